/*
 * optree/conv.h - convolution (1-D, 2-D and 3-D) and transposed convolution
 * as op-tree nodes: lazy, printable, parseable and differentiable like
 * ot_dot.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_CONV_H
#define OPTREE_CONV_H

/* ------------------------------------------------------------------------ */
/* Convolution                                                               */
/* ------------------------------------------------------------------------ */

/* Padding modes of ot_conv_opts.padding. */
enum {
    OT_PAD_EXPLICIT = 0,  /* .pad, or .pad_lo and .pad_hi (the default: none) */
    OT_PAD_VALID,         /* no padding */
    OT_PAD_SAME           /* stride 1: the output has the input's size; the
                             odd zero goes after (TensorFlow's and PyTorch's
                             'same') */
};

/* The options of ot_conv and ot_conv_transpose, by spatial dim d (at most
 * 3). Zero means the default, so a designated initialiser names only what
 * it sets:
 *   stride, dilation  1 each; {2} (the other entries 0) is 2 in every dim,
 *                     and so is {2, 0}, which C cannot tell from {2}; any
 *                     other 0 entry within x's spatial dims ({0, 2}, or
 *                     {2, 3, 0} for a 3-D conv), or a negative one, is an
 *                     error;
 *   pad               zeros added before and after every dim;
 *   pad_lo, pad_hi    per dim, before and after (used as written when any
 *                     entry is nonzero; then .pad must be 0);
 *   padding           OT_PAD_SAME or OT_PAD_VALID instead of the above;
 *   output_padding    conv_transpose: extra output size at the end of each
 *                     dim (less than that dim's stride; an error on ot_conv);
 *   groups            1: input channels and output channels split into
 *                     groups convolved apart (depthwise: groups = channels).
 * An entry set past x's spatial dims ({1, 1, 7} for a 2-D conv) is an
 * error, but for a first entry set alone ({2}: every dim).
 */
typedef struct ot_conv_opts {
    const char *spec_;   /* the options as written (the macros set it) */
    int stride[3], dilation[3];
    int pad;
    int pad_lo[3], pad_hi[3];
    int padding;
    int output_padding[3];
    int groups;
} ot_conv_opts;

/* ot_conv(x, w, ...): PyTorch's conv1d/2d/3d (a cross-correlation).
 * x is (batch, channels, spatial...), 3-D to 5-D; w is (out_channels,
 * channels / groups, kernel...) with x's count of spatial dims. The
 * result is (batch, out_channels, out...), out[d] = (in[d] + pad_lo[d] +
 * pad_hi[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1 (rounded
 * down). Floating point (promoted as ot_dot's operands; f16 and bf16
 * computed in f32 and rounded at the output); int32 is refused.
 * Errors at build time, naming shapes and the caller's file:line: x and w
 * of other ranks, channels that differ, groups not dividing both channel
 * counts, a dilated kernel larger than the padded input, stride or
 * dilation below 1, negative padding, OT_PAD_SAME needing a side of
 * padding over INT32_MAX. Size-0 batch and channel dims are
 * allowed (the result then has zeros or no elements).
 * Accuracy: on the cpu backend an f32 2-D 3x3 conv at stride and dilation
 * 1 with 16 or more input and output channels (and its input gradient, a
 * conv_transpose of the same kind) runs as Winograd F(2x2,3x3) (ot_explain
 * says "winograd F(2x2,3x3)"), its weight gradient as F(3x3,2x2) ("winograd
 * F(3x3,2x2), weight gradient"): their error against the exact result is that
 * of an f32 dot product of the same terms, a few ulps of the largest
 * |output| (measured: max error 3e-7 to 6e-7 of max |y| on the ResNet-18
 * stage shapes, im2col + gemm 4e-7 to 6e-7; the weight gradient 3e-7 to
 * 6e-7 of max |dW| at batch 2, im2col 2.5e-7 to 3.3e-7;
 * tests/test_winograd.c holds them to 2e-6), and data whose products and sums are exact in f32 (small
 * integers, halves) gives exact results, as im2col does. A call whose
 * Winograd result holds an inf or a NaN (its transforms overflowed, or an
 * operand held one) runs again as im2col: Winograd's sums of neighbours
 * give NaN where the direct sums are finite or inf. OT_WINOGRAD=0
 * (read once per process) runs im2col + gemm instead; OT_WINOGRAD=4
 * selects F(4x4,3x3), 2.25x fewer products but about 15x the error
 * (6e-6 to 1.4e-5 of max |y|), for measurement.
 *   ot_node *y = ot_conv(x, w, .stride = {2}, .pad = 1);
 *   ot_node *d = ot_conv(x, w, .groups = 32, .padding = OT_PAD_SAME); */
ot_node *ot_conv_at(ot_node *x, ot_node *w, const ot_conv_opts *opts, const char *file, int line);
#define ot_conv(x, w, ...) ot__conv_call(ot_conv_at, x, w, __VA_ARGS__)

/* ot_conv_transpose(x, w, ...): PyTorch's conv_transpose1d/2d/3d (neon's
 * deconvolution; the gradient of ot_conv with respect to its input). x is
 * (batch, in_channels, spatial...); w is (in_channels, out_channels /
 * groups, kernel...). out[d] = (in[d] - 1) * stride[d] - pad_lo[d] -
 * pad_hi[d] + dilation[d] * (kernel[d] - 1) + output_padding[d] + 1, which
 * must not be negative (nor overflow int64: OT_EOVERFLOW). padding =
 * OT_PAD_SAME is refused (its size is ambiguous); the other options as
 * ot_conv's. */
ot_node *ot_conv_transpose_at(ot_node *x, ot_node *w, const ot_conv_opts *opts, const char *file,
                              int line);
#define ot_conv_transpose(x, w, ...) ot__conv_call(ot_conv_transpose_at, x, w, __VA_ARGS__)

/* The macros' plumbing: operands as any builder's (tensors or nodes), the
 * options as designated initialisers of ot_conv_opts (none: defaults). */
#define ot__conv_call(fn, x, w, ...) \
    fn(OT__NODE(x), OT__NODE(w), &OT__OPT(ot_conv_opts, __VA_ARGS__), __FILE__, __LINE__)
#define OT__CONV_MEMBERS "stride,dilation,pad,pad_lo,pad_hi,padding,output_padding,groups"

#endif /* OPTREE_CONV_H */

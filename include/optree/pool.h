/*
 * optree/pool.h - max and average pooling (1-D, 2-D and 3-D) as op-tree
 * nodes: lazy, printable, parseable and differentiable like ot_conv.
 * (Global average pooling is ot_global_avg_pool in norm.h.)
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_POOL_H
#define OPTREE_POOL_H

/* The options of ot_max_pool and ot_avg_pool, by spatial dim d (at most
 * 3). Zero means the default, so a designated initialiser names only what
 * it sets; a list with one nonzero entry first ({2}, the others 0) is that
 * value in every dim, as ot_conv_opts's stride ({2, 0} too, which C cannot
 * tell from {2}):
 *   kernel       the window's size (required, at least 1);
 *   stride       the window's step; 0: the kernel (PyTorch's default);
 *   pad          added before and after every dim;
 *   pad_lo/hi    per dim, before and after (used as written when any
 *                entry is nonzero; then .pad must be 0); each side at
 *                most kernel[d] / 2, as PyTorch requires;
 *   dilation     1: the gap between a window's taps (max pooling only);
 *   ceil_mode    out[d] rounds up instead of down, but a window must start
 *                inside the input or its left padding (PyTorch's rule);
 *   exclude_pad  average pooling divides by the count of the window's
 *                elements inside the input instead of the kernel's volume
 *                (PyTorch's count_include_pad=False).
 */
typedef struct ot_pool_opts {
    const char *spec_;   /* the options as written (the macros set it) */
    int kernel[3];
    int stride[3];
    int pad;
    int pad_lo[3], pad_hi[3];
    int dilation[3];
    bool ceil_mode;
    bool exclude_pad;
} ot_pool_opts;

/* ot_max_pool(x, ...): PyTorch's max_pool1d/2d/3d. x is (batch, channels,
 * spatial...), 3-D to 5-D, floating point (int32 is refused by both pools).
 * The result is (batch, channels, out...), out[d] = (in[d] + pad_lo[d] +
 * pad_hi[d] - dilation[d] * (kernel[d] - 1) - 1) / stride[d] + 1, rounded
 * down (or up with ceil_mode, see above). Padding is -inf, so it never
 * wins; a window holding a NaN gives NaN (as PyTorch). The gradient goes
 * to the first maximum of each window in row-major order within the
 * window (ties: the earliest tap only; a NaN is the maximum once seen).
 * Errors at build time, naming shapes and the caller's file:line: rank,
 * kernel below 1, negative stride, padding or dilation, padding above
 * kernel / 2, a (dilated) window larger than the padded input, an entry
 * set past x's spatial dims (but a first entry set alone: every dim).
 *   ot_node *y = ot_max_pool(x, .kernel = {2});               (stride 2)
 *   ot_node *z = ot_max_pool(x, .kernel = {3}, .stride = {2}, .pad = 1); */
ot_node *ot_max_pool_at(ot_node *x, const ot_pool_opts *opts, const char *file, int line);
#define ot_max_pool(x, ...) ot__pool_call(ot_max_pool_at, x, __VA_ARGS__)

/* ot_avg_pool(x, ...): PyTorch's avg_pool1d/2d/3d: the window's mean,
 * padding counted as zeros in the kernel's volume unless exclude_pad.
 * Options and errors as ot_max_pool's; a dilation above 1 is refused. */
ot_node *ot_avg_pool_at(ot_node *x, const ot_pool_opts *opts, const char *file, int line);
#define ot_avg_pool(x, ...) ot__pool_call(ot_avg_pool_at, x, __VA_ARGS__)

/* The macros' plumbing: the operand as any builder's (tensor or node), the
 * options as designated initialisers of ot_pool_opts. */
#define ot__pool_call(fn, x, ...) \
    fn(OT__NODE(x), &OT__OPT(ot_pool_opts, __VA_ARGS__), __FILE__, __LINE__)
#define OT__POOL_MEMBERS "kernel,stride,pad,pad_lo,pad_hi,dilation,ceil_mode,exclude_pad"

#endif /* OPTREE_POOL_H */

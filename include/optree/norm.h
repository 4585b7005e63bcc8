/*
 * optree/norm.h - normalisation layers as lazy composites: batch norm
 * (training and inference), layer norm, RMS norm and global average pooling.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_NORM_H
#define OPTREE_NORM_H

/* ------------------------------------------------------------------------ */
/* Normalisation                                                             */
/* ------------------------------------------------------------------------ */

/* Builders, like ot_softmax: each returns a tree of ordinary ops (means,
 * sub, mul, rsqrt, add) owned by the current pool, computes nothing, and
 * autodiff differentiates it like any tree, so gradients (and second
 * derivatives) come for free. A reduction over several axes is a mean
 * along one axis per run of adjacent axes (x reshaped so that each run is
 * one axis: (N, C, H, W) as (N, C, H*W)), the last first. x must be float
 * (f32 or f64, or f16/bf16: computed as f32 and rounded at the output, as
 * every 16-bit tree is; docs/half.md);
 * every tensor given with it (weight, bias, running statistics) must have
 * x's dtype. Errors (NULL returned, message in the slot) name the caller's
 * file:line and the shapes: OT_EDTYPE, OT_ESHAPE, OT_EINVAL for an axis out
 * of range, a negative or NaN eps, a momentum outside [0, 1].
 *
 * Options follow the library's option macros: positional in the struct's
 * member order, or designated; a member not written takes its default.
 * (ot_*_at called with a struct whose spec_ is NULL takes every member as
 * given.) */

/* Batch normalisation, PyTorch's F.batch_norm(x, running_mean, running_var,
 * weight, bias, training, momentum, eps) with the channel axis `axis`:
 *   training:  mean and var are the batch's, over every axis but the
 *              channel axis, var biased (divided by n), and
 *                  out = (x - mean) * rsqrt(var + eps) * weight + bias
 *              with mean(x - mean)^2 as var (two passes, as NumPy's var).
 *              PyTorch refuses one value per channel (n = 1, whose unbiased
 *              variance divides by zero): so does this, OT_EINVAL, and so
 *              does ot_program_run at sizes that leave one value per
 *              channel (the trees were built at the nominal sizes; their
 *              channel's values carry the metadata key
 *              "optree.needs_two_values", which ot_print shows).
 *   inference: the running statistics in place of the batch's:
 *                  out = (x - running_mean) * rsqrt(running_var + eps) * weight + bias
 * weight and bias, (C,) tensors, may be NULL (1 and 0). Running statistics
 * are (C,) tensors; both or neither. Inference needs them.
 *
 * Running averages. A builder writes nothing: in training with running
 * statistics, .updates (an array of 2) receives the trees of their new
 * values, PyTorch's
 *     running_mean = (1 - momentum) * running_mean + momentum * mean
 *     running_var  = (1 - momentum) * running_var  + momentum * var * n / (n - 1)
 * (the unbiased batch variance), and the caller assigns them, best in the
 * same ot_assign_many (or ot_program_assign_many) as the output, which
 * evaluates every tree before writing any: the batch statistics are then
 * computed once for the output and the updates, and the updates read the
 * old running values. This is how the optimizers' steps write their state
 * (optree/autodiff.h); ot_model's batch norm layer does it in its training
 * step. Training with running statistics and no .updates is OT_EINVAL (the
 * running averages would never move). A batch with no values (a size-0
 * dim) gives an empty output and updates that keep the running values.
 *
 *     ot_node *upd[2];
 *     ot_node *y = ot_batch_norm(x, rm, rv, gamma, beta, .training = true,
 *                                .updates = upd);
 *     ot_assign_many(3, (ot_tensor *[]){out, rm, rv}, (ot_node *[]){y, upd[0], upd[1]});
 */
typedef struct ot_batch_norm_opts {
    const char *spec_;
    ot_tensor *running_mean;   /* (C,) or NULL */
    ot_tensor *running_var;    /* (C,) or NULL */
    ot_tensor *weight;         /* gamma, (C,) or NULL */
    ot_tensor *bias;           /* beta, (C,) or NULL */
    bool training;             /* default false: inference */
    double momentum;           /* default 0.1, in [0, 1] */
    double eps;                /* default 1e-5, >= 0 */
    int axis;                  /* the channel axis, default 1 (NCHW) */
    ot_node **updates;         /* training: receives 2 trees (above) */
} ot_batch_norm_opts;
#define OT__BATCH_NORM_MEMBERS "running_mean,running_var,weight,bias,training,momentum,eps,axis,updates"
ot_node *ot_batch_norm_at(ot_node *x, ot_batch_norm_opts o, const char *file, int line);
#define ot_batch_norm(x, ...)                                                 \
    ot_batch_norm_at(OT__NODE(x), OT__OPT(ot_batch_norm_opts, __VA_ARGS__), __FILE__, __LINE__)

/* Layer normalisation, PyTorch's F.layer_norm(x, x.shape[-dims:], weight,
 * bias, eps): each slice of x over its last `dims` axes normalised by its
 * own mean and biased variance, then * weight + bias (of shape
 * x.shape[-dims:], or NULL). No running statistics: training and inference
 * compute the same. dims in [1, ndim]. */
typedef struct ot_layer_norm_opts {
    const char *spec_;
    int dims;                  /* trailing axes normalised, default 1 */
    ot_tensor *weight;         /* or NULL */
    ot_tensor *bias;           /* or NULL */
    double eps;                /* default 1e-5, >= 0 */
} ot_layer_norm_opts;
#define OT__LAYER_NORM_MEMBERS "dims,weight,bias,eps"
ot_node *ot_layer_norm_at(ot_node *x, ot_layer_norm_opts o, const char *file, int line);
#define ot_layer_norm(x, ...)                                                 \
    ot_layer_norm_at(OT__NODE(x), OT__OPT(ot_layer_norm_opts, __VA_ARGS__), __FILE__, __LINE__)

/* RMS normalisation, PyTorch's F.rms_norm(x, x.shape[-dims:], weight, eps)
 * (nn.RMSNorm): each slice of x over its last `dims` axes divided by its
 * root mean square, then * weight (of shape x.shape[-dims:], or NULL):
 *     out = x * rsqrt(mean(x^2) + eps) * weight
 * eps defaults, as PyTorch's None, to x's dtype's machine epsilon
 * (torch.finfo(dtype).eps: FLT_EPSILON, DBL_EPSILON, 2^-10 for f16, 2^-7
 * for bf16). dims in [1, ndim]. */
typedef struct ot_rms_norm_opts {
    const char *spec_;
    int dims;                  /* trailing axes normalised, default 1 */
    ot_tensor *weight;         /* or NULL */
    double eps;                /* default: x's dtype's epsilon; >= 0 */
} ot_rms_norm_opts;
#define OT__RMS_NORM_MEMBERS "dims,weight,eps"
ot_node *ot_rms_norm_at(ot_node *x, ot_rms_norm_opts o, const char *file, int line);
#define ot_rms_norm(x, ...)                                                   \
    ot_rms_norm_at(OT__NODE(x), OT__OPT(ot_rms_norm_opts, __VA_ARGS__), __FILE__, __LINE__)

/* Global average pooling: x (N, C, spatial...) of rank >= 3, the mean over
 * the spatial axes: (N, C), or with keepdims (N, C, 1, ...) (PyTorch's
 * adaptive_avg_pool2d(x, 1)). Integer x gives f64, as ot_mean. Zero
 * spatial elements give NaN, as NumPy's mean. */
typedef struct ot_global_avg_pool_opts {
    const char *spec_;
    bool keepdims;
} ot_global_avg_pool_opts;
ot_node *ot_global_avg_pool_at(ot_node *x, ot_global_avg_pool_opts o, const char *file, int line);
#define ot_global_avg_pool(x, ...)                                            \
    ot_global_avg_pool_at(OT__NODE(x), OT__OPT(ot_global_avg_pool_opts, __VA_ARGS__), __FILE__, \
                          __LINE__)

#endif /* OPTREE_NORM_H */

/*
 * norm.c - normalisation layers as composites of ordinary ops
 * (optree/norm.h): batch norm in training mode (batch statistics, and the
 * trees of the running averages' new values for the caller to assign) and
 * in inference mode, layer norm, RMS norm and global average pooling.
 *
 * Everything here is built with the public builders (means along one axis,
 * sub, sqr, rsqrt, mul, add, reshape), so the trees print, explain and
 * differentiate like any other, and the cpu backend fuses them as it fuses
 * ot_var's or ot_softmax's expansion. This file owns the option defaults,
 * the checks (each error names the caller's file:line and the shapes) and
 * the formulas, which are PyTorch's: a biased variance normalises, the
 * unbiased one feeds the running average.
 */
#include "front.h"

#include <float.h>
#include <math.h>
#include <stdio.h>

/* A builder's error at `at`: kept only when the slot is empty, as every
 * builder's (the first error of an expression wins). */
#define FAIL(at, code, ...) ot__err((code), (at)->file, (at)->line, (at)->fn, __VA_ARGS__)

/* Whether the option macro wrote member (a struct built by hand, spec_
 * NULL, counts as having every member written). */
static bool given(const char *spec, const char *members, const char *member)
{
    return !spec || ot_spec_sets(spec, members, member);
}

/* x present and of rank >= min_ndim; floating point (f16 and bf16 too:
 * computed as f32, rounded at the output) unless any dtype will do. */
static int check_x(const ot__site *at, const ot_node *x, int min_ndim, bool any_dtype)
{
    if (!x) return FAIL(at, OT_ENULL, "x is NULL");
    ot_shape xs = ot_node_shape(x);
    ot_dtype dt = ot_node_dtype(x);
    char s1[OT__SHAPE_STRLEN];
    if (!any_dtype && dt == OT_I32)
        return FAIL(at, OT_EDTYPE, "x is %s of shape %s; it must be floating point",
                    ot_dtype_name(dt), ot__shape_str(&xs, s1));
    if (xs.ndim < min_ndim)
        return FAIL(at, OT_ESHAPE, "x has shape %s; it needs at least %d dims", ot__shape_str(&xs, s1),
                    min_ndim);
    return 0;
}

/* t on another backend than the tensors x reads: named here, where the
 * builder that meets both (a mul, an add) named itself. */
static int other_backend(const ot__site *at, const char *what, const ot_tensor *t,
                         const ot_node *x)
{
    const ot_backend *tb = t->leaf.be, *xb = x->be;
    if (!xb || tb == xb) return 0;
    const char *a = ot_backend_name(tb), *b = ot_backend_name(xb);
    return FAIL(at, OT_EBACKEND, "%s is a tensor of backend '%s'; x reads tensors of %s '%s' "
                "backend", what, a, strcmp(a, b) ? "the" : "another", b);
}

/* t absent, or a tensor of shape want and x's dtype, on x's backend. */
static int check_param(const ot__site *at, const char *what, const ot_tensor *t,
                       const ot_shape *want, const ot_node *x)
{
    if (!t) return 0;
    int rc = other_backend(at, what, t, x);
    if (rc) return rc;
    ot_shape ts = ot_tensor_shape(t), xs = ot_node_shape(x);
    ot_dtype dt = ot_node_dtype(x);
    bool shape_ok = ot__shape_eq(&ts, want);
    if (shape_ok && ot_tensor_dtype(t) == dt) return 0;
    char s1[OT__SHAPE_STRLEN], s2[OT__SHAPE_STRLEN], s3[OT__SHAPE_STRLEN];
    return FAIL(at, shape_ok ? OT_EDTYPE : OT_ESHAPE,
                "%s is %s of shape %s; for x of shape %s it must be %s of shape %s", what,
                ot_dtype_name(ot_tensor_dtype(t)), ot__shape_str(&ts, s1), ot__shape_str(&xs, s2),
                ot_dtype_name(dt), ot__shape_str(want, s3));
}

static int check_eps(const ot__site *at, double eps)
{
    if (eps >= 0 && isfinite(eps)) return 0;
    return FAIL(at, OT_EINVAL, "eps must be finite and >= 0, not %g", eps);
}

/* The mean of x over the axes in mask, one axis at a time from the last,
 * so that without keepdims the lower axes keep their numbers. */
static ot_node *means(const ot__site *at, ot_node *x, unsigned mask, bool keepdims)
{
    for (int d = ot_node_shape(x).ndim - 1; d >= 0 && x; d--)
        if (mask >> d & 1u) {
            ot_args r = {.axis = d, .keepdims = keepdims};
            x = ot_build_at(OT_OP_MEAN, x, NULL, &r, at->file, at->line);
        }
    return x;
}

static ot_node *bin(const ot__site *at, ot_op op, ot_node *a, ot_node *b)
{
    return ot_build_at(op, a, b, NULL, at->file, at->line);
}

/* The axes that merge_runs joins into the axis before each: those of mask
 * whose previous axis is in mask too. */
static unsigned runs_of(unsigned mask) { return mask & mask << 1; }

/* x with each run of adjacent axes in mask merged into one axis (a
 * reshape that merges those axes at any size, so that a program's
 * specialisation to another batch rebuilds it: ot__reshape_join_at),
 * *rmask getting the merged axes: on the cpu backend a mean along one long
 * contiguous axis costs about as much as a copy, and nested means along
 * short axes (W, then H) about twenty times as much (instruction counts, x
 * (8,64,28,28) f32). */
static ot_node *merge_runs(const ot__site *at, ot_node *x, unsigned mask, unsigned *rmask)
{
    *rmask = 0;
    for (int d = 0, r = -1; d < ot_node_shape(x).ndim; d++) {
        if (!(runs_of(mask) >> d & 1u)) r++;
        if (mask >> d & 1u) *rmask |= 1u << r;
    }
    return ot__reshape_join_at(x, runs_of(mask), at->file, at->line);
}

/* y, of x's shape xs with mask's runs merged (merge_runs), back in xs. */
static ot_node *unmerge(const ot__site *at, ot_node *y, const ot_shape *xs, unsigned mask)
{
    return ot__reshape_unjoin_at(y, xs, runs_of(mask), at->file, at->line);
}

/* *d: x with the runs of axes in mask merged (merge_runs), centred; *mean
 * and *var: its mean and biased variance (two passes, as NumPy's var)
 * over them, in that shape with those axes 1. Callers normalise d and
 * reshape the result back to x's shape: autodiff then sums the gradients
 * of the broadcast statistics along the long merged axes too (a training
 * batch norm's gradients: 5.9 M instructions instead of 53.6 M for x
 * (8,64,28,28) f32; the forward's last reshape costs nothing). The
 * variance and the normalisation share d: autodiff recognises the
 * standardisation by that structure and takes its closed form
 * (autodiff_rules.c's standardise_rule); even by the plain rules, a
 * centred value built twice took a sum each. */
static void moments(const ot__site *at, ot_node *x, unsigned mask, ot_node **d, ot_node **mean,
                    ot_node **var)
{
    unsigned rmask;
    ot_node *rx = merge_runs(at, x, mask, &rmask);
    *mean = means(at, rx, rmask, true);
    *d = bin(at, OT_OP_SUB, rx, *mean);
    *var = means(at, ot_build_at(OT_OP_SQR, *d, NULL, NULL, at->file, at->line), rmask, true);
}

/* A parameter tensor as a node of shape `shape` (a reshape when it differs),
 * or NULL when t is NULL. */
static ot_node *as_node(const ot__site *at, ot_tensor *t, const ot_shape *shape)
{
    if (!t) return NULL;
    ot_shape ts = ot_tensor_shape(t);
    if (ot__shape_eq(&ts, shape)) return ot_tensor_node(t);
    return ot_reshape_node_at(ot_tensor_node(t), *shape, at->file, at->line);
}

/* (x - mean) * rsqrt(var + eps) * w + b, w and b left out when NULL. */
static ot_node *normalise(const ot__site *at, ot_node *d, ot_node *var, double eps, ot_node *w,
                          ot_node *b)
{
    ot_node *inv = ot_build_at(OT_OP_RSQRT, bin(at, OT_OP_ADD, var, ot_const(eps)), NULL, NULL,
                               at->file, at->line);
    ot_node *y = bin(at, OT_OP_MUL, d, inv);
    if (w) y = bin(at, OT_OP_MUL, y, w);
    if (b) y = bin(at, OT_OP_ADD, y, b);
    return y;
}

/* ---- batch norm ------------------------------------------------------------- */

/* The options with their defaults in place of members not written. */
static ot_batch_norm_opts bn_defaults(ot_batch_norm_opts o)
{
    const char *m = OT__BATCH_NORM_MEMBERS;
    if (!given(o.spec_, m, "momentum")) o.momentum = 0.1;
    if (!given(o.spec_, m, "eps")) o.eps = 1e-5;
    if (!given(o.spec_, m, "axis")) o.axis = 1;
    return o;
}

/* Values per channel: the product of x's dims off the channel axis. */
static int64_t per_channel(const ot_shape *xs, int axis)
{
    int64_t n = 1;
    for (int d = 0; d < xs->ndim; d++)
        if (d != axis) n *= xs->dims[d];
    return n;
}

/* The mode's rules: running statistics both or neither, needed for
 * inference; updates needed for training with them; more than one value
 * per channel in training. */
static int bn_check_mode(const ot__site *at, const ot_batch_norm_opts *o, const ot_shape *xs,
                         int axis)
{
    char s1[OT__SHAPE_STRLEN];
    if (!o->running_mean != !o->running_var)
        return FAIL(at, OT_EINVAL, "running_mean and running_var are given both or neither (%s is "
                    "NULL)", o->running_mean ? "running_var" : "running_mean");
    if (!o->training && !o->running_mean)
        return FAIL(at, OT_EINVAL, "inference (training false) needs running_mean and running_var");
    if (o->training && o->running_mean && !o->updates)
        return FAIL(at, OT_EINVAL, "training with running statistics needs .updates to receive "
                    "their new values (ot_node *updates[2])");
    if (o->training && per_channel(xs, axis) == 1)
        return FAIL(at, OT_EINVAL, "training needs more than 1 value per channel (the unbiased "
                    "variance divides by n - 1): x has shape %s, channel axis %d",
                    ot__shape_str(xs, s1), axis);
    return 0;
}

/* Every check, before any node is built; *axis gets the channel axis. */
static int bn_check(const ot__site *at, ot_node *x, const ot_batch_norm_opts *o, int *axis)
{
    int rc = check_x(at, x, 1, false);
    if (rc) return rc;
    ot_shape xs = ot_node_shape(x);
    char s1[OT__SHAPE_STRLEN];
    if (o->axis < -xs.ndim || o->axis >= xs.ndim)
        return FAIL(at, OT_EINVAL, "channel axis %d is out of range for x of shape %s", o->axis,
                    ot__shape_str(&xs, s1));
    *axis = o->axis < 0 ? o->axis + xs.ndim : o->axis;
    if (!(o->momentum >= 0 && o->momentum <= 1))
        return FAIL(at, OT_EINVAL, "momentum must be in [0, 1], not %g", o->momentum);
    if ((rc = check_eps(at, o->eps))) return rc;
    ot_shape c = OT_SHAPE(xs.dims[*axis]);
    const char *names[4] = {"running_mean", "running_var", "weight", "bias"};
    ot_tensor *ts[4] = {o->running_mean, o->running_var, o->weight, o->bias};
    for (int i = 0; i < 4 && !rc; i++) rc = check_param(at, names[i], ts[i], &c, x);
    return rc ? rc : bn_check_mode(at, o, &xs, *axis);
}

/* running' = (1 - momentum) * running + momentum * stat * scale, stat the
 * batch statistic in x's keepdims shape, taken to (C,); scale NULL: 1. */
static ot_node *bn_update(const ot__site *at, ot_tensor *running, ot_node *stat, double momentum,
                          ot_node *scale)
{
    ot_node *s = ot_reshape_node_at(stat, ot_tensor_shape(running), at->file, at->line);
    if (scale) s = bin(at, OT_OP_MUL, s, scale);
    return bin(at, OT_OP_ADD, bin(at, OT_OP_MUL, ot_tensor_node(running), ot_const(1 - momentum)),
               bin(at, OT_OP_MUL, s, ot_const(momentum)));
}

/* n / (n - 1), n the values per channel, as a tree over x: n counted over
 * channel 0's values (eq(s, s) + ne(s, s) is 1 for every value, NaN
 * too), in f64 for f64 x, else f32 (exact to 2^24 values). A constant
 * would keep the nominal n when a program runs at another batch (the
 * slice follows it: ot__layout_follow); the count reads 1/C of x. The
 * slice carries OT__META_TWO_VALUES, so that a program run at a batch of
 * one value per channel is refused as the builder refuses it. */
static ot_node *bessel(const ot__site *at, ot_node *x, int axis)
{
    ot_shape xs = ot_node_shape(x);
    ot_index idx[OT_MAX_DIMS];
    for (int d = 0; d < xs.ndim; d++) idx[d] = d == axis ? OT_IDX(0) : OT_ALL;
    ot_args to = {.axis = OT_AXIS_ALL, .dtype = ot_node_dtype(x) == OT_F64 ? OT_F64 : OT_F32};
    ot_node *s = ot_build_at(OT_OP_CAST, ot_slice_node_n(x, xs.ndim, idx, at->file, at->line),
                             NULL, &to, at->file, at->line);
    /* a program that runs this at another batch checks the count there */
    if (s && ot_node_set_meta(s, OT__META_TWO_VALUES, "batch_norm")) return NULL;
    ot_args all = {.axis = OT_AXIS_ALL};
    ot_node *n = ot_build_at(OT_OP_SUM, bin(at, OT_OP_ADD, bin(at, OT_OP_EQ, s, s),
                                            bin(at, OT_OP_NE, s, s)), NULL, &all, at->file, at->line);
    return bin(at, OT_OP_DIV, n, bin(at, OT_OP_SUB, n, ot_const(1)));
}

/* Training: the batch's mean and biased variance normalise; the update
 * trees get the unbiased variance. */
static ot_node *bn_train(const ot__site *at, ot_node *x, const ot_batch_norm_opts *o, int axis)
{
    ot_shape xs = ot_node_shape(x);
    ot_node *d, *mean, *var;
    moments(at, x, ((1u << xs.ndim) - 1) & ~(1u << axis), &d, &mean, &var);
    ot_shape rst = mean ? ot_node_shape(mean) : xs;
    ot_node *w = as_node(at, o->weight, &rst), *b = as_node(at, o->bias, &rst);
    ot_node *y = unmerge(at, normalise(at, d, var, o->eps, w, b), &xs,
                         ((1u << xs.ndim) - 1) & ~(1u << axis));
    if (!y || !o->running_mean) return y;
    int64_t n = per_channel(&xs, axis);
    ot_node *u[2] = {ot_tensor_node(o->running_mean), ot_tensor_node(o->running_var)};
    if (n > 0) {   /* no values: nothing to average in */
        u[0] = bn_update(at, o->running_mean, mean, o->momentum, NULL);
        u[1] = bn_update(at, o->running_var, var, o->momentum, bessel(at, x, axis));
    }
    if (!u[0] || !u[1]) return NULL;
    o->updates[0] = u[0];
    o->updates[1] = u[1];
    return y;
}

ot_node *ot_batch_norm_at(ot_node *x, ot_batch_norm_opts o, const char *file, int line)
{
    const ot__site site = {"batch_norm", file, line}, *at = &site;
    if (o.updates) o.updates[0] = o.updates[1] = NULL;
    o = bn_defaults(o);
    int axis = 0;
    if (bn_check(at, x, &o, &axis)) return NULL;
    if (o.training) return bn_train(at, x, &o, axis);
    /* the statistics' shape: x's with every dim but the channel's 1 */
    ot_shape st = ot_node_shape(x);
    for (int d = 0; d < st.ndim; d++)
        if (d != axis) st.dims[d] = 1;
    ot_node *w = as_node(at, o.weight, &st), *b = as_node(at, o.bias, &st);
    ot_node *d = bin(at, OT_OP_SUB, x, as_node(at, o.running_mean, &st));
    return normalise(at, d, as_node(at, o.running_var, &st), o.eps, w, b);
}

/* ---- layer norm, RMS norm and global average pooling ------------------------------------ */

/* The checks layer norm and RMS norm share: x float, dims in [1, ndim],
 * eps, and weight and bias (either may be NULL) of shape x.shape[-dims:]
 * and x's dtype. *mask gets the normalised axes. */
static int trailing_check(const ot__site *at, ot_node *x, int dims, double eps, ot_tensor *w,
                          ot_tensor *b, unsigned *mask)
{
    int rc = check_x(at, x, 1, false);
    if (rc) return rc;
    ot_shape xs = ot_node_shape(x), ts = {.ndim = dims};
    char s1[OT__SHAPE_STRLEN];
    if (dims < 1 || dims > xs.ndim)
        return FAIL(at, OT_EINVAL, "dims must be in [1, %d] for x of shape %s, not %d", xs.ndim,
                    ot__shape_str(&xs, s1), dims);
    for (int d = 0; d < dims; d++) ts.dims[d] = xs.dims[xs.ndim - dims + d];
    *mask = ((1u << xs.ndim) - 1) & ~((1u << (xs.ndim - dims)) - 1);
    if ((rc = check_eps(at, eps)) || (rc = check_param(at, "weight", w, &ts, x))) return rc;
    return check_param(at, "bias", b, &ts, x);
}

/* The merged trailing axes' shape (n,), for weight and bias. */
static ot_shape trailing(ot_node *x, int dims)
{
    ot_shape xs = ot_node_shape(x), ts = {.ndim = dims};
    for (int d = 0; d < dims; d++) ts.dims[d] = xs.dims[xs.ndim - dims + d];
    return OT_SHAPE(ot__numel(&ts));
}

ot_node *ot_layer_norm_at(ot_node *x, ot_layer_norm_opts o, const char *file, int line)
{
    const ot__site site = {"layer_norm", file, line}, *at = &site;
    if (!given(o.spec_, OT__LAYER_NORM_MEMBERS, "dims")) o.dims = 1;
    if (!given(o.spec_, OT__LAYER_NORM_MEMBERS, "eps")) o.eps = 1e-5;
    unsigned mask;
    if (trailing_check(at, x, o.dims, o.eps, o.weight, o.bias, &mask)) return NULL;
    ot_shape xs = ot_node_shape(x), ws = trailing(x, o.dims);
    ot_node *d, *mean, *var;
    moments(at, x, mask, &d, &mean, &var);
    ot_node *y = normalise(at, d, var, o.eps,
                           as_node(at, o.weight, &ws), as_node(at, o.bias, &ws));
    return unmerge(at, y, &xs, mask);
}

/* A dtype's machine epsilon, PyTorch's torch.finfo(dtype).eps: the spacing
 * of its values at 1 (f16 2^-10, bf16 2^-7). */
static double dtype_eps(ot_dtype dt)
{
    switch (dt) {
    case OT_F32: return FLT_EPSILON;
    case OT_F16: return 0x1p-10;
    case OT_BF16: return 0x1p-7;
    default: return DBL_EPSILON;
    }
}

/* x * rsqrt(mean(x^2) + eps) * weight over the merged trailing axes: one
 * reduction and one elementwise pass, which the cpu backend runs per block
 * of rows (the row read from memory once). No centring: the mean square is
 * a sum of non-negative terms, so no cancellation either. */
ot_node *ot_rms_norm_at(ot_node *x, ot_rms_norm_opts o, const char *file, int line)
{
    const ot__site site = {"rms_norm", file, line}, *at = &site;
    if (!given(o.spec_, OT__RMS_NORM_MEMBERS, "dims")) o.dims = 1;
    bool eps_given = given(o.spec_, OT__RMS_NORM_MEMBERS, "eps");
    unsigned mask, rmask;
    if (trailing_check(at, x, o.dims, eps_given ? o.eps : 0, o.weight, NULL, &mask)) return NULL;
    if (!eps_given) o.eps = dtype_eps(ot_node_dtype(x));
    ot_shape xs = ot_node_shape(x), ws = trailing(x, o.dims);
    ot_node *rx = merge_runs(at, x, mask, &rmask);
    ot_node *ms = means(at, ot_build_at(OT_OP_SQR, rx, NULL, NULL, at->file, at->line), rmask, true);
    ot_node *y = normalise(at, rx, ms, o.eps, as_node(at, o.weight, &ws), NULL);
    return unmerge(at, y, &xs, mask);
}

ot_node *ot_global_avg_pool_at(ot_node *x, ot_global_avg_pool_opts o, const char *file, int line)
{
    const ot__site site = {"global_avg_pool", file, line}, *at = &site;
    if (check_x(at, x, 3, true)) return NULL;
    ot_shape xs = ot_node_shape(x), ks = OT_SHAPE(xs.dims[0], xs.dims[1]);
    for (int d = 2; d < xs.ndim; d++) ks.dims[ks.ndim++] = 1;
    unsigned rmask, mask = ((1u << xs.ndim) - 1) & ~3u;
    ot_node *rx = merge_runs(at, x, mask, &rmask);
    ot_node *m = means(at, rx, rmask, o.keepdims);
    return m && o.keepdims ? unmerge(at, m, &ks, mask) : m;
}

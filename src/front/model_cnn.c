/*
 * model_cnn.c - ot_model's layers over images (and 1-D and 3-D signals):
 * the input's per-sample shape, convolution and pooling. model.c owns
 * the model, its dense and batch norm layers and the training loop; the
 * layers here add to the same stack (model.h) and their trees are built
 * by ot__model_apply_spatial.
 *
 * A layer's output shape is found when it is added by building it over an
 * empty batch (a (0, channels, spatial...) tensor): ot_conv and the pools
 * check their own options and shapes then, so a bad layer is an error at
 * the call that adds it, in the builder's words and at the caller's
 * file:line, and the sizes are never computed twice.
 */
#include "model.h"

#include <string.h>

int ot_model_input_shape_at(ot_model *m, int ndim, const int64_t dims[], const char *file,
                            int line)
{
    const ot__site site = {"model_input_shape", file, line}, *at = &site;
    if (!m || !dims) return FAIL(at, OT_ENULL, "%s is NULL", m ? "dims" : "model");
    if (m->nlayer) return FAIL(at, OT_ESTATE, "the input shape is set before any layer");
    if (ndim < 1 || ndim > OT_MAX_DIMS - 1)
        return FAIL(at, OT_EINVAL, "ndim must be in [1, %d], not %d", OT_MAX_DIMS - 1, ndim);
    ot_shape s = {.ndim = ndim};
    for (int d = 0; d < ndim; d++) s.dims[d] = dims[d];
    char s1[OT__SHAPE_STRLEN];
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n = dims[d] > 0 ? n * dims[d] : -1;
    if (n != m->inputs)
        return FAIL(at, OT_ESHAPE, "a sample of shape %s is not the model's %lld inputs",
                    ot__shape_str(&s, s1), (long long)m->inputs);
    m->in = s;
    return 0;
}

/* The bias of a conv layer, (C,), as (C, 1, ...) over a sample's spatial
 * dims, so that it broadcasts over a batch of (N, C, spatial...). */
static ot_node *conv_bias(const layer *l, const ot_node *h)
{
    ot_shape s = {.ndim = l->out.ndim};
    for (int d = 0; d < s.ndim; d++) s.dims[d] = d ? 1 : l->out.dims[0];
    return ot_reshape_node(ot__model_param(l->b, h), s);
}

ot_node *ot__model_param(ot_tensor *t, const ot_node *h)
{
    ot_dtype dt = h ? ot_node_dtype(h) : OT_F32;
    return ot__is_half(dt) ? ot_cast(t, .dtype = dt) : ot_tensor_node(t);
}

ot_node *ot__model_apply_spatial(const layer *l, ot_node *h)
{
    if (l->kind == L_CONV) {
        ot_node *y = ot_conv_at(h, ot__model_param(l->w, h), &l->conv, l->file, l->line);
        return l->out.ndim ? ot_add(y, conv_bias(l, h)) : y;
    }
    return (l->max ? ot_max_pool_at : ot_avg_pool_at)(h, &l->pool, l->file, l->line);
}

/* Builds l over an empty batch of samples of shape `in` and sets l->out to
 * the result's sample shape (an error from the builder, at l's site,
 * otherwise). */
static int infer_out(const ot_model *m, layer *l, ot_shape in)
{
    ot_shape bs = {.ndim = in.ndim + 1};
    memcpy(bs.dims + 1, in.dims, sizeof *in.dims * (size_t)in.ndim);
    ot_tensor *x = (ot_empty)(m->be, bs, OT_F32);
    ot_pool *pool = x ? ot_pool_push() : NULL;
    int rc = pool ? 0 : ot_errcode();
    if (!rc) {
        l->out.ndim = 0;   /* no bias yet: the conv alone */
        ot_node *y = ot__model_apply_spatial(l, ot_tensor_node(x));
        if (!y) rc = ot_errcode();
        else {
            ot_shape ys = ot_node_shape(y);
            l->out.ndim = ys.ndim - 1;
            memcpy(l->out.dims, ys.dims + 1, sizeof *ys.dims * (size_t)l->out.ndim);
        }
    }
    if (pool) ot_pool_pop(pool);
    ot_tensor_free(x);
    return rc;
}

/* A layer over (channels, spatial...) samples needs the input shape. */
static int need_spatial(const ot_model *m, ot_shape in, const ot__site *at)
{
    char s1[OT__SHAPE_STRLEN];
    if (in.ndim >= 2 && in.ndim <= 4) return 0;
    return FAIL(at, OT_ESHAPE, "its input samples have shape %s; it needs (channels, "
                "spatial...) with 1 to 3 spatial dims%s", ot__shape_str(&in, s1),
                m->nlayer ? "" : " (ot_model_input_shape sets the model's)");
}

int ot_model_conv_at(ot_model *m, int64_t out_channels, int kernel, ot_activation act,
                     uint64_t seed, const ot_conv_opts *opts, const char *file, int line)
{
    const ot__site site = {"model_conv", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    ot_shape in = ot__model_in_shape(m, m->nlayer);
    int rc = need_spatial(m, in, at);
    if (rc) return rc;
    if (out_channels < 1 || kernel < 1)
        return FAIL(at, OT_EINVAL, "out_channels and kernel must be >= 1, not %lld and %d",
                    (long long)out_channels, kernel);
    layer l = {.kind = L_CONV, .act = act, .file = file, .line = line};
    if (opts) l.conv = *opts;
    int groups = l.conv.groups > 0 ? l.conv.groups : 1;
    /* (out, in / groups, kernel...): a groups that does not divide is
     * reported by ot_conv below, over the shapes */
    ot_shape ws = {.ndim = in.ndim + 1, .dims = {out_channels, in.dims[0] / groups}};
    for (int d = 2; d < ws.ndim; d++) ws.dims[d] = kernel;
    if (!ws.dims[1]) ws.dims[1] = 1;
    l.w = (ot_empty)(m->be, ws, OT_F32);
    rc = l.w ? infer_out(m, &l, in) : ot_errcode();
    ot_tensor_free(l.w);
    l.w = NULL;
    if (rc) return rc;
    return ot__model_add(m, &l, ws, ot__numel(&ws) / out_channels, seed, at);
}

/* Pooling keeps the channels; its options and errors are the pool's. */
static int add_pool(ot_model *m, bool max, const ot_pool_opts *opts, const ot__site *at)
{
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    ot_shape in = ot__model_in_shape(m, m->nlayer);
    int rc = need_spatial(m, in, at);
    if (rc) return rc;
    layer l = {.kind = L_POOL, .max = max, .file = at->file, .line = at->line};
    if (opts) l.pool = *opts;
    rc = infer_out(m, &l, in);
    return rc ? rc : ot__model_add(m, &l, OT_SHAPE(), 1, 0, at);
}

int ot_model_max_pool_at(ot_model *m, const ot_pool_opts *opts, const char *file, int line)
{
    return add_pool(m, true, opts, &(ot__site){"model_max_pool", file, line});
}

int ot_model_avg_pool_at(ot_model *m, const ot_pool_opts *opts, const char *file, int line)
{
    return add_pool(m, false, opts, &(ot__site){"model_avg_pool", file, line});
}

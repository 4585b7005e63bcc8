/*
 * topk_shape.c - top-k and the along-axis indexing ops (topk, take_along,
 * scatter_along): the public builders of include/optree/topk.h (ot_topk
 * is take_along of topk's indices), the inference ot__infer_index hands
 * them (shape and dtype, or a message naming the shapes, k and the
 * caller's line), their frame in ot__index_geom (the loop both backends
 * run) and the gradient nodes autodiff builds. The meaning is PyTorch's
 * topk, gather and scatter_add (NumPy's take_along_axis).
 */
#include "node_build.h"

/* ---- inference --------------------------------------------------------------- */

/* The axis x's lines run along: p's, normalised into *axis. */
static int one_axis(const site *st, const ot_node *x, const proto *p, const char *verb, int *axis)
{
    char sa[OT__SHAPE_STRLEN];
    *axis = p->args.axis;
    if (*axis == OT_AXIS_ALL || x->shape.ndim == 0)
        return FAIL(st, OT_EINVAL, "%s along one axis of an operand of rank 1 or more (operand "
                    "%s, axis %s)", verb, ot__shape_str(&x->shape, sa),
                    *axis == OT_AXIS_ALL ? "not given" : "given");
    return ot__norm_axis(st, *axis, x->shape.ndim, &x->shape, axis);
}

static int infer_topk(const site *st, const ot_node *x, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    int axis, rc = one_axis(st, x, p, "selects", &axis);
    if (rc) return rc;
    int64_t n = x->shape.dims[axis];
    if (p->args.ddof < 0 || p->args.ddof > n)
        return FAIL(st, OT_EINVAL, "k = %d is outside [0, %lld] for operand %s along axis %d",
                    p->args.ddof, (long long)n, ot__shape_str(&x->shape, sa), axis);
    p->shape = x->shape;
    p->shape.dims[axis] = p->args.ddof;
    p->args.axis = axis;
    p->dtype = OT_I32;
    return 0;
}

/* The indices' checks both along ops share: int32, and ref's rank and
 * dims but along axis `free` (-1: every dim equal). */
static int along_indices(const site *st, const ot_node *idx, const ot_shape *ref, int free,
                         const char *what)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (idx->dtype != OT_I32)
        return FAIL(st, OT_EDTYPE, "indices of shape %s are %s; they must be int32 (ot_cast them)",
                    ot__shape_str(&idx->shape, sa), ot_dtype_name((ot_dtype)idx->dtype));
    bool ok = idx->shape.ndim == ref->ndim;
    for (int d = 0; ok && d < ref->ndim; d++) ok = d == free || idx->shape.dims[d] == ref->dims[d];
    if (!ok)
        return FAIL(st, OT_ESHAPE, "indices %s must have the %s's shape %s%s",
                    ot__shape_str(&idx->shape, sa), what, ot__shape_str(ref, sb),
                    free >= 0 ? " but along the axis" : "");
    return 0;
}

/* take_along (x, idx): the result is idx's shape. */
static int infer_take_along(const site *st, const ot_node *x, const ot_node *idx, proto *p)
{
    int axis, rc = one_axis(st, x, p, "takes", &axis);
    if (rc) return rc;
    if ((rc = along_indices(st, idx, &x->shape, axis, "operand"))) return rc;
    p->shape = idx->shape;
    p->args.axis = axis;
    p->dtype = (ot_dtype)x->dtype;
    p->weak = x->weak;
    return 0;
}

/* scatter_along (src, idx): src's shape with the axis of size args.depth. */
static int infer_scatter_along(const site *st, const ot_node *src, const ot_node *idx, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    int axis = p->args.axis, rc;
    if (axis == OT_AXIS_ALL || src->shape.ndim == 0 || p->args.depth < 0)
        return FAIL(st, OT_EINVAL, "source %s: needs an axis, a source of rank 1 or more and an "
                    "axis size >= 0 (got %lld)", ot__shape_str(&src->shape, sa),
                    (long long)p->args.depth);
    if ((rc = ot__norm_axis(st, axis, src->shape.ndim, &src->shape, &axis))) return rc;
    if ((rc = along_indices(st, idx, &src->shape, -1, "source"))) return rc;
    p->shape = src->shape;
    p->shape.dims[axis] = p->args.depth;
    p->args.axis = axis;
    p->dtype = (ot_dtype)src->dtype;
    p->weak = src->weak;
    return 0;
}

int ot__infer_topk(const site *st, const ot_node *a, const ot_node *b, proto *p)
{
    /* only what the op's attributes say may differ between equal nodes */
    ot_args keep = p->args;
    ot__clear(&p->args, sizeof p->args);
    p->args.axis = keep.axis;
    switch (st->op) {
    case OT_OP_TOPK:
        p->args.ddof = keep.ddof;
        p->args.keepdims = keep.keepdims;
        p->args.win.ceil_mode = keep.win.ceil_mode;
        return infer_topk(st, a, p);
    case OT_OP_TAKE_ALONG: return infer_take_along(st, a, b, p);
    default: p->args.depth = keep.depth; return infer_scatter_along(st, a, b, p);
    }
}

/* ---- the builders -------------------------------------------------------------- */

ot_node *ot_topk_indices_at(ot_node *x, int64_t k, const ot_topk_opts *opts, const char *file,
                            int line)
{
    ot_topk_opts o = opts ? *opts : (ot_topk_opts){0};
    const char *s = o.spec_;
    if (!opts || (s && !ot_spec_sets(s, OT__TOPK_MEMBERS, "axis"))) o.axis = -1;
    if (!opts || (s && !ot_spec_sets(s, OT__TOPK_MEMBERS, "largest"))) o.largest = true;
    if (!opts || (s && !ot_spec_sets(s, OT__TOPK_MEMBERS, "sorted"))) o.sorted = true;
    ot_args a = {.axis = o.axis, .keepdims = !o.largest, .win.ceil_mode = !o.sorted};
    /* a k beyond int's range is outside [0, size] of any axis too: named
     * here as the caller gave it, where the axis is one of x's */
    int nd = x && !ot__node_dead(x) ? x->shape.ndim : 0, ax = o.axis < 0 ? o.axis + nd : o.axis;
    if ((k < 0 || k > INT32_MAX) && ax >= 0 && ax < nd) {
        char sa[OT__SHAPE_STRLEN];
        ot__err(OT_EINVAL, file, line, "topk", "k = %lld is outside [0, %lld] for operand %s along axis %d",
                (long long)k, (long long)x->shape.dims[ax], ot__shape_str(&x->shape, sa), ax);
        return NULL;
    }
    a.ddof = k < 0 ? -1 : k > INT32_MAX ? INT32_MAX : (int)k;
    return ot_build_at(OT_OP_TOPK, x, NULL, &a, file, line);
}

ot_node *ot_topk_at(ot_node *x, int64_t k, const ot_topk_opts *opts, const char *file, int line)
{
    ot_node *i = ot_topk_indices_at(x, k, opts, file, line);
    if (!i) return NULL;
    return ot_take_along_at(x, i, i->args.axis, file, line);
}

ot_node *ot_take_along_at(ot_node *x, ot_node *idx, int axis, const char *file, int line)
{
    return ot_build_at(OT_OP_TAKE_ALONG, x, idx, &(ot_args){.axis = axis}, file, line);
}

ot_node *ot_scatter_add_along_at(ot_node *src, ot_node *idx, int axis, int64_t size,
                                 const char *file, int line)
{
    return ot_build_at(OT_OP_SCATTER_ALONG, src, idx, &(ot_args){.axis = axis, .depth = size},
                       file, line);
}

/* ---- the frame and the gradients ----------------------------------------------- */

void ot__topk_geom_of(const ot_node *n, ot__index_geom *g)
{
    int axis = g->axis = n->args.axis;
    bool scatter = n->op == OT_OP_SCATTER_ALONG;
    const ot_shape *big = scatter ? &g->out : &g->a, *small = scatter ? &g->a : &g->out;
    g->outer = g->inner = 1;
    for (int d = 0; d < axis; d++) g->outer *= big->dims[d];
    for (int d = axis + 1; d < big->ndim; d++) g->inner *= big->dims[d];
    g->size = big->dims[axis];
    g->count = small->dims[axis];
    g->diag = n->op != OT_OP_TOPK ? 0
            : (n->args.keepdims ? OT__TOPK_SMALLEST : 0) |
              (n->args.win.ceil_mode ? OT__TOPK_UNSORTED : 0);
}

ot_node *ot__topk_grad(const ot_node *n, ot_node *g, int which, const char *file, int line)
{
    if (which || n->op == OT_OP_TOPK) return NULL;   /* indices have no gradient */
    int axis = n->args.axis;
    if (n->op == OT_OP_TAKE_ALONG)
        return ot_scatter_add_along_at(g, n->b, axis, n->a->shape.dims[axis], file, line);
    return ot_take_along_at(g, n->b, axis, file, line);
}

/*
 * index_shape.c - the indexing ops (take, scatter_add, select, tril, triu):
 * the public builders of include/optree/index.h (ot_index_add, ot_where
 * and ot_embedding are trees of them), the inference ot_build_at runs for
 * them (node.c): shape and dtype or a message naming the shapes and the
 * caller's line, the loop's geometry both backends run, the one check of
 * an index both backends make (and its message), and the gradient nodes
 * autodiff builds. The meaning is NumPy's (take, add.at, where, tril,
 * cumsum).
 */
#include "node_build.h"

#include <stdio.h>

/* ---- inference --------------------------------------------------------------- */

/* A constant has no memory for a whole-operand kernel to read: it becomes
 * a checkpoint, which the cpu backend stores (a 0-d temporary). */
static ot_node *stored(const site *st, ot_node *x)
{
    if (!x || x->kind != OT_NODE_CONST) return x;
    return ot_build_at(OT_OP_KEEP, x, NULL, NULL, st->file, st->line);
}

static int need_i32(const site *st, const ot_node *idx)
{
    char s[OT__SHAPE_STRLEN];
    if (idx->dtype == OT_I32) return 0;
    return FAIL(st, OT_EDTYPE, "indices of shape %s are %s; they must be int32 (ot_cast them)",
                ot__shape_str(&idx->shape, s), ot_dtype_name((ot_dtype)idx->dtype));
}

static int infer_take(const site *st, const ot_node *x, const ot_node *idx, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int rc = need_i32(st, idx), axis = p->args.axis;
    if (rc) return rc;
    if (axis == OT_AXIS_ALL || x->shape.ndim == 0)
        return FAIL(st, OT_EINVAL, "takes along one axis of an operand of rank 1 or more "
                    "(operand %s, axis %s)", ot__shape_str(&x->shape, sa),
                    axis == OT_AXIS_ALL ? "not given" : "given");
    if ((rc = ot__norm_axis(st, axis, x->shape.ndim, &x->shape, &axis))) return rc;
    int nd = x->shape.ndim - 1 + idx->shape.ndim;
    if (nd > OT_MAX_DIMS)
        return FAIL(st, OT_EINVAL, "the result of %s indexed by %s would have %d dims, at most "
                    "%d are supported", ot__shape_str(&x->shape, sa),
                    ot__shape_str(&idx->shape, sb), nd, OT_MAX_DIMS);
    p->shape.ndim = nd;
    for (int d = 0, o = 0; d < x->shape.ndim; d++) {
        if (d != axis) {
            p->shape.dims[o++] = x->shape.dims[d];
            continue;
        }
        for (int j = 0; j < idx->shape.ndim; j++) p->shape.dims[o++] = idx->shape.dims[j];
    }
    p->args.axis = axis;
    p->dtype = (ot_dtype)x->dtype;
    p->weak = x->weak;
    return 0;
}

/* src of shape out[:axis] + idx.shape + out[axis+1:], out's axis of size
 * args.depth. */
static int infer_scatter(const site *st, const ot_node *src, const ot_node *idx, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int rc = need_i32(st, idx), axis = p->args.axis, ni = idx->shape.ndim;
    if (rc) return rc;
    int nd = src->shape.ndim - ni + 1;
    if (axis == OT_AXIS_ALL || nd < 1 || p->args.depth < 0)
        return FAIL(st, OT_EINVAL, "source %s and indices %s: needs an axis, a source of rank "
                    "at least the indices' and an axis size >= 0 (got %lld)",
                    ot__shape_str(&src->shape, sa), ot__shape_str(&idx->shape, sb),
                    (long long)p->args.depth);
    ot_shape none = {0};
    none.ndim = nd;
    if ((rc = ot__norm_axis(st, axis, nd, &none, &axis))) return rc;
    for (int j = 0; j < ni; j++)
        if (src->shape.dims[axis + j] != idx->shape.dims[j])
            return FAIL(st, OT_ESHAPE, "source %s does not hold the indices' shape %s at axis "
                        "%d", ot__shape_str(&src->shape, sa), ot__shape_str(&idx->shape, sb),
                        axis);
    p->shape.ndim = nd;
    for (int d = 0; d < nd; d++)
        p->shape.dims[d] = d < axis ? src->shape.dims[d]
                         : d == axis ? p->args.depth
                                     : src->shape.dims[d + ni - 1];
    p->args.axis = axis;
    p->dtype = (ot_dtype)src->dtype;
    p->weak = src->weak;
    return 0;
}

static int infer_select(const site *st, const ot_node *c, const ot_node *y, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (!ot__broadcast(&c->shape, &y->shape, &p->shape, NULL))
        return FAIL(st, OT_ESHAPE, "condition %s and value %s do not broadcast",
                    ot__shape_str(&c->shape, sa), ot__shape_str(&y->shape, sb));
    p->args.axis = OT_AXIS_ALL;
    p->dtype = (ot_dtype)y->dtype;
    p->weak = y->weak;
    return 0;
}

static int infer_tri(const site *st, const ot_node *x, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    if (x->shape.ndim < 2)
        return FAIL(st, OT_EINVAL, "operand of shape %s must have 2 or more dims (the last two "
                    "are the matrix)", ot__shape_str(&x->shape, sa));
    p->shape = x->shape;
    p->args.axis = OT_AXIS_ALL;
    p->dtype = (ot_dtype)x->dtype;
    p->weak = x->weak;
    return 0;
}

static int infer_cumsum(const site *st, const ot_node *x, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    int axis = p->args.axis, rc;
    if (axis == OT_AXIS_ALL || x->shape.ndim == 0 || x->dtype == OT_I32)
        return FAIL(st, x->dtype == OT_I32 ? OT_EDTYPE : OT_EINVAL, "sums along one axis of a "
                    "floating-point operand of rank 1 or more (operand %s %s, axis %s)",
                    ot__shape_str(&x->shape, sa), ot_dtype_name((ot_dtype)x->dtype),
                    axis == OT_AXIS_ALL ? "not given" : "given");
    if ((rc = ot__norm_axis(st, axis, x->shape.ndim, &x->shape, &axis))) return rc;
    p->shape = x->shape;
    p->args.axis = axis;
    p->dtype = (ot_dtype)x->dtype;
    p->weak = x->weak;
    return 0;
}

int ot__infer_index(const site *st, ot_node **a, ot_node **b, proto *p)
{
    if (!(*a = stored(st, *a)) || (*b && !(*b = stored(st, *b)))) return ot_errcode();
    if (ot__is_topk(st->op)) return ot__infer_topk(st, *a, *b, p);
    /* only what the op's attributes say may differ between equal nodes */
    ot_args keep = p->args;
    ot__clear(&p->args, sizeof p->args);
    p->args.axis = keep.axis;
    switch (st->op) {
    case OT_OP_TAKE: return infer_take(st, *a, *b, p);
    case OT_OP_SCATTER_ADD: p->args.depth = keep.depth; return infer_scatter(st, *a, *b, p);
    case OT_OP_SELECT: return infer_select(st, *a, *b, p);
    case OT_OP_CUMSUM: return infer_cumsum(st, *a, p);
    default: p->args.ddof = keep.ddof; return infer_tri(st, *a, p);
    }
}

/* ---- the builders -------------------------------------------------------------- */

ot_node *ot_take_at(ot_node *x, ot_node *idx, int axis, const char *file, int line)
{
    return ot_build_at(OT_OP_TAKE, x, idx, &(ot_args){.axis = axis}, file, line);
}

ot_node *ot_scatter_add_at(ot_node *src, ot_node *idx, int axis, int64_t size, const char *file,
                           int line)
{
    return ot_build_at(OT_OP_SCATTER_ADD, src, idx, &(ot_args){.axis = axis, .depth = size}, file,
                       line);
}

ot_node *ot_embedding_at(ot_node *table, ot_node *ids, const char *file, int line)
{
    return ot_take_at(table, ids, 0, file, line);
}

static bool live(const ot_node *n) { return n && !ot__node_dead(n); }

/* take's result shape for x of shape xs, indices is and axis (in range). */
static ot_shape taken(const ot_shape *xs, const ot_shape *is, int axis)
{
    ot_shape s = {0};
    for (int d = 0; d < xs->ndim && s.ndim + is->ndim <= OT_MAX_DIMS; d++) {
        if (d != axis) {
            s.dims[s.ndim++] = xs->dims[d];
            continue;
        }
        for (int j = 0; j < is->ndim; j++) s.dims[s.ndim++] = is->dims[j];
    }
    return s;
}

ot_node *ot_index_add_at(ot_node *x, ot_node *idx, ot_node *src, int axis, const char *file,
                         int line)
{
    if (!live(x) || !live(idx) || !live(src))   /* the builder names what is wrong */
        return ot_build_at(OT_OP_ADD, x, ot_scatter_add_at(src, idx, axis, 0, file, line), NULL,
                           file, line);
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN], sc[OT__SHAPE_STRLEN], sd[OT__SHAPE_STRLEN];
    int nd = x->shape.ndim;
    if (axis < -nd || axis >= nd) {
        ot__err(OT_EINVAL, file, line, "index_add", "axis %d is out of bounds for x of shape %s",
                axis, ot__shape_str(&x->shape, sa));
        return NULL;
    }
    if (axis < 0) axis += nd;
    ot_shape want = taken(&x->shape, &idx->shape, axis);
    if (!ot__shape_eq(&want, &src->shape)) {
        ot__err(OT_ESHAPE, file, line, "index_add", "source of shape %s must have shape %s (x %s "
                "with axis %d indexed by %s)", ot__shape_str(&src->shape, sa),
                ot__shape_str(&want, sb), ot__shape_str(&x->shape, sc), axis,
                ot__shape_str(&idx->shape, sd));
        return NULL;
    }
    return ot_build_at(OT_OP_ADD, x, ot_scatter_add_at(src, idx, axis, x->shape.dims[axis], file,
                                                       line),
                       NULL, file, line);
}

ot_node *ot_where_at(ot_node *cond, ot_node *a, ot_node *b, const char *file, int line)
{
    ot_node *ta = ot_build_at(OT_OP_SELECT, cond, a, NULL, file, line);
    if (!ta) return NULL;
    ot_node *nc = ot_build_at(OT_OP_EQ, cond, ot_consti(0), NULL, file, line);
    return ot_build_at(OT_OP_ADD, ta, ot_build_at(OT_OP_SELECT, nc, b, NULL, file, line), NULL,
                       file, line);
}

ot_node *ot_tril_at(ot_node *x, int k, const char *file, int line)
{
    return ot_build_at(OT_OP_TRIL, x, NULL, &(ot_args){.axis = OT_AXIS_ALL, .ddof = k}, file,
                       line);
}

ot_node *ot_triu_at(ot_node *x, int k, const char *file, int line)
{
    return ot_build_at(OT_OP_TRIU, x, NULL, &(ot_args){.axis = OT_AXIS_ALL, .ddof = k}, file,
                       line);
}

ot_node *ot_cumsum_at(ot_node *x, int axis, const char *file, int line)
{
    return ot_build_at(OT_OP_CUMSUM, x, NULL, &(ot_args){.axis = axis}, file, line);
}

/* ---- the loop's geometry and the index check ------------------------------------ */

void ot__index_geom_of(const ot_node *n, ot__index_geom *g)
{
    ot__clear(g, sizeof *g);
    g->op = n->op;
    g->a = n->a->shape;
    if (n->b) g->b = n->b->shape;
    g->out = n->shape;
    g->diag = n->args.ddof;
    if (ot__is_topk(n->op)) ot__topk_geom_of(n, g);
    if (n->op != OT_OP_TAKE && n->op != OT_OP_SCATTER_ADD && n->op != OT_OP_CUMSUM) return;
    int axis = g->axis = n->args.axis;
    const ot_shape *big = n->op == OT_OP_SCATTER_ADD ? &g->out : &g->a;   /* the indexed one */
    g->outer = g->inner = 1;
    for (int d = 0; d < axis; d++) g->outer *= big->dims[d];
    for (int d = axis + 1; d < big->ndim; d++) g->inner *= big->dims[d];
    g->size = big->dims[axis];
    g->count = ot__numel(&g->b);
}

/* The public builders of op's node where a user may not know its name
 * (ot_index_add builds x + scatter_add), for an evaluation error: a plan
 * serves equal trees built anywhere, so it cannot name the failing call. */
static const char *builders(int op)
{
    switch (op) {
    case OT_OP_TAKE: return " (built by ot_take and ot_embedding)";
    case OT_OP_SCATTER_ADD: return " (built by ot_scatter_add and ot_index_add)";
    default: return "";
    }
}

int ot__index_fail(const ot__index_geom *g, int64_t v, int64_t pos)
{
    char s[OT__SHAPE_STRLEN], at[OT__SHAPE_STRLEN] = "";
    /* the position as a multi-index of the indices' shape */
    int64_t rest = pos, idx[OT_MAX_DIMS] = {0};
    for (int d = g->b.ndim - 1; d >= 0; d--) {
        int64_t n = g->b.dims[d] ? g->b.dims[d] : 1;
        idx[d] = rest % n;
        rest /= n;
    }
    int len = snprintf(at, sizeof at, "(");
    for (int d = 0; d < g->b.ndim; d++)
        len += snprintf(at + len, sizeof at - (size_t)len, d ? ", %lld" : "%lld", (long long)idx[d]);
    snprintf(at + len, sizeof at - (size_t)len, g->b.ndim == 1 ? ",)" : ")");
    return ot__err_set(OT_EINVAL, NULL, 0, ot_op_name((ot_op)g->op),
                       "index %lld at position %s of the indices (shape %s) is out of range "
                       "[-%lld, %lld) for an axis of size %lld%s",
                       (long long)v, at, ot__shape_str(&g->b, s), (long long)g->size,
                       (long long)g->size, (long long)g->size, builders(g->op));
}

/* ---- gradients ------------------------------------------------------------------ */

/* x reversed along axis: a slice of step -1 (a strided view on the cpu). */
static ot_node *reversed(ot_node *x, int axis, const char *file, int line)
{
    if (!x) return NULL;
    ot_index ix[OT_MAX_DIMS];
    for (int d = 0; d < x->shape.ndim; d++)
        ix[d] = d == axis ? OT_RANGE(OT_NONE, OT_NONE, -1) : OT_ALL;
    return ot_slice_node_n(x, x->shape.ndim, ix, file, line);
}

ot_node *ot__index_grad(const ot_node *n, ot_node *g, int which, const char *file, int line)
{
    int axis = n->args.axis;
    if (ot__is_topk(n->op)) return ot__topk_grad(n, g, which, file, line);
    switch (n->op) {
    case OT_OP_TAKE:
        return which ? NULL
                     : ot_scatter_add_at(g, n->b, axis, n->a->shape.dims[axis], file, line);
    case OT_OP_SCATTER_ADD: return which ? NULL : ot_take_at(g, n->b, axis, file, line);
    case OT_OP_SELECT: return which ? ot_build_at(OT_OP_SELECT, n->a, g, NULL, file, line) : NULL;
    case OT_OP_CUMSUM:   /* each x[i] is in every sum from i on: the reversed cumsum */
        return reversed(ot_cumsum_at(reversed(g, axis, file, line), axis, file, line), axis, file,
                        line);
    default:   /* tril, triu: the same mask */
        return ot_build_at(n->op, g, NULL, &(ot_args){.axis = OT_AXIS_ALL, .ddof = n->args.ddof},
                           file, line);
    }
}

/*
 * layout.c - the public builders of layout ops on expressions: slices from
 * NumPy indices, reshapes, concat of n parts, stack and split. Each checks
 * its arguments with messages naming the part, then builds op nodes
 * (slice, reshape, concat) through ot_build_at, which owns their shape
 * rules (node.c), so rebuilt trees (stack.c, rewrite.c) check them again.
 */
#include "internal.h"

#define FAIL(file, line, op, code, ...) ot__err((code), (file), (line), (op), __VA_ARGS__)

#define PUSH_DEPTH 8   /* elementwise levels a slice moves below, at most */

static bool is_dot(const ot_node *x)
{
    return x && x->kind == OT_NODE_OP && ot_op_kind((ot_op)x->op) == OT_KIND_DOT;
}

/* Whether slicing x may slice its operands instead: an elementwise op of
 * the table (a registered op or a composite's root is left whole), but not
 * a sum of two dots, which the cpu backend runs as one GEMM accumulating
 * into the other's result (x.W + h.U: one temporary, viewed). */
static bool pushable(const ot_node *x)
{
    int kind = ot_op_kind((ot_op)x->op);
    bool dot_sum = (x->op == OT_OP_ADD || x->op == OT_OP_SUB) && is_dot(x->a) && is_dot(x->b);
    return x->kind == OT_NODE_OP && !x->custom && x->tag == OT_OP_NONE && !dot_sum &&
           (kind == OT_KIND_UNARY || kind == OT_KIND_BINARY || x->op == OT_OP_CAST);
}

/* Slice args a of a node of shape `to` as an operand of shape o sees them,
 * o broadcasting to `to` (right-aligned): a dim of size 1 that broadcasts
 * keeps its one element (index 0 where the slice indexes). */
static ot_args operand_slice(const ot_args *a, const ot_shape *to, const ot_shape *o)
{
    ot_args b = {.axis = OT_AXIS_ALL};
    int off = to->ndim - o->ndim;
    b.shape.ndim = o->ndim;
    for (int j = 0; j < o->ndim; j++) {
        int d = j + off;
        bool spread = o->dims[j] != to->dims[d];
        b.start[j] = spread ? 0 : a->start[d];
        b.perm[j] = spread && a->perm[d] ? 1 : a->perm[d];
        b.shape.dims[j] = spread && a->perm[d] ? 1 : a->shape.dims[d];
        if (a->depth >> d & 1) b.depth |= (int64_t)1 << j;   /* whole: ot__layout_follow */
    }
    return b;
}

/* x sliced by args a. A slice of an elementwise op is that op of its
 * operands' slices (the same values, element for element), so no kernel
 * computes the elements a slice drops and a split of x + b needs no stored
 * x + b; a few levels down, then the slice stays (a view of x stored). */
static ot_node *slice_at(ot_node *x, const ot_args *a, int depth, const char *file, int line)
{
    if (depth >= PUSH_DEPTH || !pushable(x))
        return ot_build_at(OT_OP_SLICE, x, NULL, a, file, line);
    ot_node *in[2] = {x->a, x->b};
    for (int k = 0; k < 2 && in[k]; k++) {
        if (in[k]->shape.ndim == 0) continue;   /* a scalar broadcasts as it is */
        ot_args b = operand_slice(a, &x->shape, &in[k]->shape);
        if (!(in[k] = slice_at(in[k], &b, depth + 1, file, line))) return NULL;
    }
    return ot_build_at((ot_op)x->op, in[0], in[1], x->op == OT_OP_CAST ? &x->args : NULL, file, line);
}

ot_node *ot_slice_node_n(ot_node *x, int n, const ot_index *idx, const char *file, int line)
{
    if (!x) {
        FAIL(file, line, "slice", OT_ENULL, "operand is NULL");
        return NULL;
    }
    int nd = x->shape.ndim;
    if (n < 0 || n > nd || (n > 0 && !idx)) {
        if (n > 0 && !idx) FAIL(file, line, "slice", OT_ENULL, "idx is NULL");
        else FAIL(file, line, "slice", OT_EINVAL, "%d indices for an operand of %d dimensions", n, nd);
        return NULL;
    }
    ot_args a = {.axis = OT_AXIS_ALL};
    a.shape.ndim = nd;
    for (int d = 0; d < nd; d++) {
        int64_t first, count, step;
        if (ot__index_resolve(d < n ? idx[d] : OT_ALL, d, &x->shape, ot__err, file, line, &first,
                              &count, &step))
            return NULL;
        if (count <= 1) step = 1;   /* one element: the step reads nothing */
        if (step > INT32_MAX || step < -INT32_MAX) {
            FAIL(file, line, "slice", OT_EOVERFLOW, "step %lld of axis %d is beyond the int32 range",
                 (long long)step, d);
            return NULL;
        }
        a.start[d] = first;
        a.perm[d] = count < 0 ? 0 : (int)step;
        a.shape.dims[d] = count < 0 ? 0 : count;
        if (d >= n || idx[d].kind == OT_INDEX_ALL) a.depth |= (int64_t)1 << d;
    }
    return slice_at(x, &a, 0, file, line);
}

ot_node *ot_reshape_node_at(ot_node *x, ot_shape shape, const char *file, int line)
{
    ot_args a = {.axis = OT_AXIS_ALL, .shape = shape};
    return ot_build_at(OT_OP_RESHAPE, x, NULL, &a, file, line);
}

/* ---- layouts that follow their operand's size (internal.h) ------------------ */

/* A reshape of x into shape, grouped as ot__layout_follow reads it: operand
 * axis i in group in[i], result axis j in group out[j]. */
static ot_node *reshape_grouped(ot_node *x, const ot_shape *shape, const int *in, const int *out,
                                const char *file, int line)
{
    ot_args a = {.axis = OT_AXIS_ALL, .shape = *shape};
    for (int i = 0; i < x->shape.ndim; i++) a.start[i] = 1 + in[i];
    for (int j = 0; j < shape->ndim; j++) a.perm[j] = 1 + out[j];
    return ot_build_at(OT_OP_RESHAPE, x, NULL, &a, file, line);
}

/* shape with join's axes merged into the axis before each; group[d] gets
 * the merged axis that axis d of shape lands in. */
static ot_shape joined(const ot_shape *shape, unsigned join, int group[OT_MAX_DIMS])
{
    ot_shape r = {0};
    for (int d = 0; d < shape->ndim; d++) {
        if (d > 0 && (join >> d & 1u)) r.dims[r.ndim - 1] *= shape->dims[d];
        else r.dims[r.ndim++] = shape->dims[d];
        group[d] = r.ndim - 1;
    }
    return r;
}

static const int ident_groups[OT_MAX_DIMS] = {0, 1, 2, 3, 4, 5, 6, 7};

ot_node *ot__reshape_join_at(ot_node *x, unsigned join, const char *file, int line)
{
    int group[OT_MAX_DIMS];
    if (!x || !(join & ~1u)) return x;
    ot_shape r = joined(&x->shape, join, group);
    return reshape_grouped(x, &r, group, ident_groups, file, line);
}

ot_node *ot__reshape_unjoin_at(ot_node *y, const ot_shape *to, unsigned join, const char *file,
                               int line)
{
    int group[OT_MAX_DIMS];
    if (!y || !(join & ~1u)) return y;
    joined(to, join, group);
    return reshape_grouped(y, to, ident_groups, group, file, line);
}

/* The product of in's dims in group g (start[i] = 1 + g), or -1 when it
 * overflows. */
static int64_t group_size(const ot_shape *in, const ot_args *g, int64_t group)
{
    int64_t p = 1;
    for (int i = 0; i < in->ndim; i++)
        if (g->start[i] == group && !ot__mul_i64(&p, p, in->dims[i])) return -1;
    return p;
}

/* A grouped reshape's shape over operand shape in: each group's first
 * result axis takes what the group's operand axes hold beyond its other
 * result axes (a merged axis all of it). A group that cannot (sizes that
 * do not divide) keeps its dims: the builder then names the shapes. */
static void follow_reshape(const ot_shape *in, ot_args *g)
{
    ot_shape *out = &g->shape;
    for (int j = 0; j < out->ndim; j++) {
        if (j > 0 && g->perm[j] == g->perm[j - 1]) continue;   /* not its group's first */
        int64_t p = group_size(in, g, g->perm[j]), rest = 1;
        for (int k = j + 1; k < out->ndim && g->perm[k] == g->perm[j]; k++) rest *= out->dims[k];
        if (p >= 0 && rest > 0 && p % rest == 0) out->dims[j] = p / rest;
    }
}

void ot__layout_follow(const ot_node *n, const ot_node *a, ot_args *args)
{
    if (n->tag != OT_OP_NONE || !a || a->shape.ndim != n->a->shape.ndim) return;
    if (n->op == OT_OP_RESHAPE && a->shape.ndim > 0 && args->start[0] > 0)
        follow_reshape(&a->shape, args);
    if (n->op != OT_OP_SLICE) return;
    for (int d = 0; d < a->shape.ndim; d++)
        if (args->depth >> d & 1) {
            args->start[d] = 0;
            args->perm[d] = 1;
            args->shape.dims[d] = a->shape.dims[d];
        }
}

/* The checks of concat and stack, naming the part: every part present, of
 * part 0's rank, and (stack: all dims) its dims off the axis. */
static int check_parts(int n, ot_node *const parts[], int axis, bool stack, const char *op,
                       const char *file, int line)
{
    char s0[OT__SHAPE_STRLEN], si[OT__SHAPE_STRLEN];
    if (n < 1) return FAIL(file, line, op, OT_EINVAL, "needs at least one part, got n = %d", n);
    if (!parts) return FAIL(file, line, op, OT_ENULL, "parts is NULL");
    for (int i = 0; i < n; i++)
        if (!parts[i]) return FAIL(file, line, op, OT_ENULL, "part %d is NULL", i);
    const ot_shape *sh0 = &parts[0]->shape;
    int nd = sh0->ndim, rank = stack ? nd + 1 : nd;
    if (!stack && nd == 0)
        return FAIL(file, line, op, OT_ESHAPE, "part 0 has shape (): zero-dimensional parts cannot "
                    "be concatenated");
    if (rank > OT_MAX_DIMS)
        return FAIL(file, line, op, OT_EINVAL, "parts of shape %s stacked have %d dims, at most %d "
                    "are supported", ot__shape_str(sh0, s0), rank, OT_MAX_DIMS);
    if (axis < -rank || axis >= rank)
        return FAIL(file, line, op, OT_EINVAL, "axis %d is out of bounds for a result of %d "
                    "dimensions (part 0 has shape %s)", axis, rank, ot__shape_str(sh0, s0));
    int ax = axis < 0 ? axis + rank : axis;
    for (int i = 1; i < n; i++) {
        const ot_shape *sh = &parts[i]->shape;
        if (sh->ndim != nd)
            return FAIL(file, line, op, OT_ESHAPE, "part %d has shape %s, of %d dimensions; part 0 "
                        "has shape %s, of %d", i, ot__shape_str(sh, si), sh->ndim,
                        ot__shape_str(sh0, s0), nd);
        for (int d = 0; d < nd; d++)
            if ((stack || d != ax) && sh->dims[d] != sh0->dims[d])
                return stack ? FAIL(file, line, op, OT_ESHAPE, "part %d has shape %s, part 0 has "
                                    "shape %s: stacked parts must have one shape", i,
                                    ot__shape_str(sh, si), ot__shape_str(sh0, s0))
                             : FAIL(file, line, op, OT_ESHAPE, "part %d has shape %s, part 0 has "
                                    "shape %s: they may differ only on axis %d", i,
                                    ot__shape_str(sh, si), ot__shape_str(sh0, s0), ax);
    }
    return 0;
}

/* n checked parts joined pairwise, level by level: a tree of binary concat
 * nodes log2(n) deep, so gradients and walks over it stay shallow. */
static ot_node *join(int n, ot_node *const parts[], int axis, const char *file, int line)
{
    if (n == 1) return parts[0];
    ot_node **level = ot__malloc(sizeof *level * (size_t)n);
    if (!level) {
        FAIL(file, line, "concat", OT_ENOMEM, "out of memory");
        return NULL;
    }
    memcpy(level, parts, sizeof *level * (size_t)n);
    ot_args a = {.axis = axis};
    while (n > 1) {
        int m = 0;
        for (int i = 0; i < n; i += 2) {
            level[m] = i + 1 < n ? ot_build_at(OT_OP_CONCAT, level[i], level[i + 1], &a, file, line)
                                 : level[i];
            if (!level[m++]) {
                free(level);
                return NULL;
            }
        }
        n = m;
    }
    ot_node *r = level[0];
    free(level);
    return r;
}

ot_node *ot_concat_at(int n, ot_node *const parts[], int axis, const char *file, int line)
{
    if (check_parts(n, parts, axis, false, "concat", file, line)) return NULL;
    return join(n, parts, axis < 0 ? axis + parts[0]->shape.ndim : axis, file, line);
}

ot_node *ot_stack_nodes_at(int n, ot_node *const parts[], int axis, const char *file, int line)
{
    if (check_parts(n, parts, axis, true, "stack", file, line)) return NULL;
    const ot_shape *sh = &parts[0]->shape;
    int ax = axis < 0 ? axis + sh->ndim + 1 : axis;
    ot_shape grown = {.ndim = sh->ndim + 1};
    for (int d = 0, j = 0; d < grown.ndim; d++) grown.dims[d] = d == ax ? 1 : sh->dims[j++];
    ot_node **rows = ot__malloc(sizeof *rows * (size_t)n);
    if (!rows) {
        FAIL(file, line, "stack", OT_ENOMEM, "out of memory");
        return NULL;
    }
    ot_node *r = NULL;
    int i = 0;
    for (; i < n && (rows[i] = ot_reshape_node_at(parts[i], grown, file, line)); i++) {}
    if (i == n) r = join(n, rows, ax, file, line);
    free(rows);
    return r;
}

int ot_split_at(ot_node *x, int axis, int n, const int64_t *sizes, ot_node *out[],
                const char *file, int line)
{
    char sx[OT__SHAPE_STRLEN];
    if (!out) return FAIL(file, line, "split", OT_ENULL, "out is NULL");
    for (int i = 0; i < n; i++) out[i] = NULL;
    if (!x) return FAIL(file, line, "split", OT_ENULL, "operand is NULL");
    int nd = x->shape.ndim;
    if (n < 1) return FAIL(file, line, "split", OT_EINVAL, "needs at least one part, got n = %d", n);
    if (axis < -nd || axis >= nd)
        return FAIL(file, line, "split", OT_EINVAL, "axis %d is out of bounds for operand shape %s",
                    axis, ot__shape_str(&x->shape, sx));
    int ax = axis < 0 ? axis + nd : axis;
    int64_t dim = x->shape.dims[ax], total = 0;
    if (!sizes && dim % n)
        return FAIL(file, line, "split", OT_ESHAPE, "axis %d of operand shape %s does not divide "
                    "into %d equal parts", ax, ot__shape_str(&x->shape, sx), n);
    for (int i = 0; sizes && i < n; i++) {
        if (sizes[i] < 0 || !ot__add_i64(&total, total, sizes[i]))
            return FAIL(file, line, "split", OT_EINVAL, "size %d is %lld (operand shape %s)", i,
                        (long long)sizes[i], ot__shape_str(&x->shape, sx));
    }
    if (sizes && total != dim)
        return FAIL(file, line, "split", OT_ESHAPE, "sizes sum to %lld, axis %d of operand shape "
                    "%s has %lld", (long long)total, ax, ot__shape_str(&x->shape, sx),
                    (long long)dim);
    ot_index idx[OT_MAX_DIMS];
    for (int d = 0; d < nd; d++) idx[d] = OT_ALL;
    int64_t at = 0;
    for (int i = 0; i < n; i++) {
        int64_t len = sizes ? sizes[i] : dim / n;
        idx[ax] = (ot_index){OT_INDEX_RANGE, at, at + len, 1};
        at += len;
        if (!(out[i] = ot_slice_node_n(x, nd, idx, file, line))) {
            for (int j = 0; j < i; j++) out[j] = NULL;
            return ot_errcode() ? ot_errcode() : OT_ENOMEM;
        }
    }
    return 0;
}

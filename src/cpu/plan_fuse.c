/*
 * plan_fuse.c - which values get kernels and storage of their own.
 *
 * Takes a walk. merge_common merges common subexpressions: canon[i] is the
 * first entry equal to i (canon[i] <= i, canon[canon[i]] == canon[i]; a
 * leaf's is the first entry of its slot). count_uses counts each canonical
 * entry's readers. choose_materialised marks what must exist in memory
 * (non-elementwise ops, a dot's, transpose's or onehot's operands, a costly
 * value a reduction and other work both read, and cuts that bound a
 * region's size); bound_recompute adds the values that fusion would
 * recompute too often; mark_direct_roots un-marks the dots and reductions
 * written straight into their output (groot); assign_storage gives every
 * leaf and materialised entry storage, a layout op (transpose, slice,
 * reshape) its operand's storage seen through it, and a concat storage
 * its parts are written into: the output's when it is an output's whole
 * tree, its reader's part when its reader is a concat.
 *
 * Recomputation is bounded by a cost model (bound_recompute): fusion
 * inlines an elementwise value into every kernel that reads it and into
 * every element of a broadcast, so a value computed E times per element
 * (k distinct kernels, outputs of one group counting as one, times the
 * rows a broadcast repeats it over) is stored once when (E - 1) * cost >
 * 2 + E, cost being what computing it inline takes in units of an add
 * (transcendentals 8, division and roots 3, the rest 1, summed over the
 * inlined ops below it, plus a load per stored value they read, scaled
 * by the share of elements a broadcast one brings in) and 2 + E the
 * write and the reads. Single-use chains and values shared inside one
 * kernel stay fused.
 *
 * Guarantees to plan_build.c: every canonical leaf and materialised op
 * entry (transposes aside) has storage; groot[i].dot >= 0 only for a dot
 * read by output i alone that BLAS can write into it, or a scatter_add
 * that an INDEX kernel adds into output i in place (match_index_root).
 */
#include "plan.h"
#include "ops.h"

#define MAX_REGION_INSNS 512   /* cut an elementwise region beyond this */
#define MAX_REGION_NEED 12     /* or when it would need more live buffers */

/* Hash-consing of op entries: two are one when their identities
 * (ot__node_ident, as the plan key writes them) are equal over canonical
 * operands, so what CSE merges is a function of the key. Nullary ops
 * (rand) are never merged: two rand nodes are two draws. */
static int op_ident(const compiler *c, int x, int64_t w[OT__IDENT_MAX])
{
    const ent *e = &c->w->e[x];
    int canon[2] = {canon_of(c, e->a), canon_of(c, e->b)};
    return ot__node_ident(e->node, OT__LEAF_BY_NUMBER, OT__CONST_BY_CLASS, canon, w);
}

static bool same_op(const compiler *c, int x, int y)
{
    if (c->w->e[x].a < 0) return false;
    int64_t wx[OT__IDENT_MAX], wy[OT__IDENT_MAX];
    int nx = op_ident(c, x, wx), ny = op_ident(c, y, wy);
    return nx == ny && memcmp(wx, wy, sizeof *wx * (size_t)nx) == 0;
}

bool ot__fuse_merge_common(compiler *c)
{
    int n = c->w->n;
    size_t cap = 64;
    while (cap < 2 * (size_t)n) cap *= 2;
    int *table = ot__malloc(cap * sizeof *table);
    int *leaf_canon = ot__malloc(sizeof(int) * (size_t)(c->w->nleaf ? c->w->nleaf : 1));
    if (!table || !leaf_canon) {
        free(table);
        free(leaf_canon);
        return false;
    }
    memset(table, -1, cap * sizeof *table);
    for (int i = 0; i < c->w->nleaf; i++) leaf_canon[i] = -1;
    for (int i = 0; i < n; i++) {
        const ent *e = &c->w->e[i];
        c->ci[i].canon = i;
        if (e->kind == OT_NODE_LEAF) {
            if (leaf_canon[e->slot] < 0) leaf_canon[e->slot] = i;
            c->ci[i].canon = leaf_canon[e->slot];
            continue;
        }
        if (e->kind != OT_NODE_OP) continue;
        uint64_t h = (uint64_t)e->op * 31 + (uint64_t)canon_of(c, e->a) * 1000003u +
                     (uint64_t)canon_of(c, e->b) * 7919u;
        for (size_t j = (h * 0x9e3779b97f4a7c15ULL) >> 7 & (cap - 1);; j = (j + 1) & (cap - 1)) {
            if (table[j] < 0) {
                table[j] = i;
                break;
            }
            if (same_op(c, table[j], i)) {
                c->ci[i].canon = table[j];
                break;
            }
        }
    }
    free(table);
    free(leaf_canon);
    return true;
}

void ot__fuse_count_uses(compiler *c)
{
    for (int i = 0; i < c->w->n; i++) {
        if (c->ci[i].canon != i || !is_op(c, i)) continue;
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, i, k);
            if (o >= 0) c->ci[o].uses++;
        }
    }
    for (int r = 0; r < c->nout; r++) c->ci[c->ci[c->w->root[r]].canon].uses++;
}

static bool is_costly(int op)
{
    return ot__op_cost(op) >= OT__COST_TRANS;
}

/* Whether e is a chain of layout ops over a constant. */
static bool views_constant(const compiler *c, int e)
{
    while (e >= 0 && is_op(c, e) && kind_of(c, e) == OT_KIND_SHAPE && c->w->e[e].op != OT_OP_CONCAT)
        e = canon_operand(c, e, 0);
    return e >= 0 && c->w->e[e].kind == OT_NODE_CONST;
}

/* Operands that must exist in memory: a dot's (BLAS reads arrays), a
 * transpose's (it is a strided view of them), onehot's input. */
static void materialise_operands(compiler *c, int i, int kind)
{
    for (int k = 0; k < 2; k++) {
        int o = canon_operand(c, i, k);
        if (o >= 0 && is_op(c, o) && kind_of(c, o) != OT_KIND_SHAPE) c->ci[o].mat = true;
        /* a layout op of a constant has no memory to view (a
         * gradient's reshape(1.0) into a dot): it is filled */
        if ((kind == OT_KIND_DOT || kind == OT_KIND_CONV) && o >= 0 && views_constant(c, o))
            c->ci[o].mat = true;
    }
}

/* Sethi-Ullman style estimates bound a region's live buffers and
 * size; past the bound the elementwise node i is cut into its own kernel. */
static void bound_region(compiler *c, int i)
{
    cinfo *ci = &c->ci[i];
    int na = 0, nb = 0, sa = 0, sb = 0;
    int a = canon_operand(c, i, 0), b = canon_operand(c, i, 1);
    if (a >= 0 && is_ew(c, a) && !c->ci[a].mat) { na = c->ci[a].need; sa = c->ci[a].size; }
    if (b >= 0 && is_ew(c, b) && !c->ci[b].mat) { nb = c->ci[b].need; sb = c->ci[b].size; }
    ci->need = na == nb ? na + 1 : (na > nb ? na : nb);
    if (ci->need < 1) ci->need = 1;
    ci->size = sa + sb + 1;
    if (ci->need > MAX_REGION_NEED || ci->size > MAX_REGION_INSNS) {
        ci->mat = true;
        ci->need = 1;
        ci->size = 1;
    }
}

/* Decides which op entries get their own kernel and storage. */
void ot__fuse_choose_materialised(compiler *c)
{
    for (int i = 0; i < c->w->n; i++) {
        cinfo *ci = &c->ci[i];
        if (ci->canon != i || !is_op(c, i)) continue;
        int op = c->w->e[i].op, kind = kind_of(c, i);
        if (!is_ew(c, i) || !c->fused) ci->mat = kind != OT_KIND_SHAPE;
        /* A checkpoint is stored whatever fusion would do: the user's cut. */
        if (op == OT_OP_KEEP) ci->mat = true;
        if (kind == OT_KIND_DOT || kind == OT_KIND_SHAPE || op == OT_OP_ONEHOT || kind == OT_KIND_CONV)
            materialise_operands(c, i, kind);
        /* A costly value that a reduction and other work both read (softmax's
         * exp(x - max)) is stored once rather than computed in each kernel. */
        if (kind == OT_KIND_REDUCE && c->fused) {
            int o = canon_operand(c, i, 0);
            if (is_ew(c, o) && c->ci[o].uses >= 2 && is_costly(c->w->e[o].op)) c->ci[o].mat = true;
        }
        if (is_ew(c, i)) bound_region(c, i);
    }
}

/* ---- the recomputation cost model ----------------------------------------- */

#define COST_CAP (1 << 20)   /* estimates saturate here */
#define COST_STORE 2         /* writing a value once, in op units */
#define COST_LOAD 1          /* a kernel reading it back */
#define READERS_KEPT 4       /* kernel ids kept per value; beyond, counted */

/* What computing one element of op costs, in units of an add: SLEEF's
 * transcendentals are tens of instructions, a division or root a few. */
static int op_cost(int op)
{
    return ot__op_cost(op);
}

/* The kernels an inlined value is computed in: a few ids, and a count that
 * goes on past them (distinct as far as the ids tell). */
typedef struct readers {
    int id[READERS_KEPT];
    int n;
} readers;

static void readers_add(readers *r, int id)
{
    int kept = r->n < READERS_KEPT ? r->n : READERS_KEPT;
    for (int i = 0; i < kept; i++)
        if (r->id[i] == id) return;
    if (r->n < READERS_KEPT) r->id[r->n] = id;
    if (r->n < INT_MAX) r->n++;
}

static void readers_merge(readers *to, const readers *from)
{
    int kept = from->n < READERS_KEPT ? from->n : READERS_KEPT;
    for (int i = 0; i < kept; i++) readers_add(to, from->id[i]);
    for (int i = kept; i < from->n && to->n < INT_MAX; i++) to->n++;
}

/* The kernel computing output i's root: outputs of one shape share a
 * group kernel (choose_groups), so they count as one. */
static int root_kernel_id(const compiler *c, int i)
{
    int r = c->ci[c->w->root[i]].canon;
    if (!c->outs || c->nout < 2) return r;
    ot_shape si = out_shape(c, i);
    for (int j = 0; j < i; j++) {
        int rj = c->ci[c->w->root[j]].canon;
        ot_shape sj = out_shape(c, j);
        if (is_ew(c, rj) && !c->ci[rj].mat && ot__shape_eq(&si, &sj)) return c->w->n + j;
    }
    return is_ew(c, r) && !c->ci[r].mat ? c->w->n + i : r;
}

/* How many times a reader of shape `to` computes each element of an
 * inlined value of shape `from`: broadcasting along the rows repeats it
 * per row. A value broadcast along the innermost dim is a scalar per tile,
 * computed once, so that counts as 1. */
static double bcast_factor(const ot_shape *to, const ot_shape *from)
{
    int64_t nf = ot__numel(from), nt = ot__numel(to);
    if (from->ndim == 0 || nf == 0 || nt <= nf) return 1;
    int64_t lf = from->dims[from->ndim - 1], lt = to->ndim ? to->dims[to->ndim - 1] : 1;
    return lf == lt && lf > 1 ? (double)nt / (double)nf : 1;
}

/* Per value entry, what bound_recompute works with. */
typedef struct recompute {
    int *cost;         /* computing one element inline, in op units */
    double *fac;       /* evaluations per element per kernel */
    readers *rd;       /* the kernels it is inlined into */
    int *root_id;      /* an output root's kernel, or -1 */
} recompute;

static void recompute_free(recompute *r)
{
    free(r->cost);
    free(r->fac);
    free(r->rd);
    free(r->root_id);
}

static bool recompute_alloc(recompute *r, int n)
{
    size_t cnt = (size_t)(n ? n : 1);
    r->cost = ot__malloc(sizeof(int) * cnt);
    r->fac = ot__calloc(cnt, sizeof *r->fac);
    r->rd = ot__calloc(cnt, sizeof *r->rd);
    r->root_id = ot__malloc(sizeof(int) * cnt);
    if (r->cost && r->fac && r->rd && r->root_id) return true;
    recompute_free(r);
    return false;
}

/* Output roots: their kernel, and how often a broadcast into a bigger
 * output computes them. */
static void seed_roots(const compiler *c, recompute *r)
{
    for (int i = 0; i < c->w->n; i++) r->root_id[i] = -1;
    for (int i = 0; i < c->nout; i++) {
        int rt = c->ci[c->w->root[i]].canon;
        if (r->root_id[rt] < 0) r->root_id[rt] = root_kernel_id(c, i);
        ot_shape osh = out_shape(c, i);   /* a tree broadcast into a bigger output */
        double f = bcast_factor(&osh, &node_of(c, rt)->shape);
        if (f > r->fac[rt]) r->fac[rt] = f;
    }
}

/* A stored operand of shape os read by a value of shape us, per element
 * of the value: a load scaled by the share of its elements the operand
 * brings in, rounded. A broadcast operand (a row's mean, a weight row, a
 * scalar) comes from memory once and from cache for the rest: charged a
 * whole load per element, x - mean(x), which a variance, a sum and a
 * gradient read, cost 3 units and was stored, read back three times from
 * memory where recomputing it reads x and subtracts (layer norm's d/dx
 * 4096x4096 f32: 10 streams a row block, now 8, 13.3 -> 11.7 ms). */
static int64_t read_cost(const ot_shape *os, const ot_shape *us)
{
    double no = (double)ot__numel(os), nu = (double)ot__numel(us);
    return nu > 0 && no < nu ? (int64_t)(COST_LOAD * no / nu + 0.5) : COST_LOAD;
}

/* Each elementwise value's inline cost: its op, the inlined ops below it
 * and the stored values they read. */
static void inline_costs(const compiler *c, int *cost)
{
    for (int i = 0; i < c->w->n; i++) {
        cost[i] = 0;
        if (c->ci[i].canon != i || !is_ew(c, i)) continue;
        int64_t sum = op_cost(c->w->e[i].op);
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, i, k);
            if (o < 0 || c->w->e[o].kind == OT_NODE_CONST) continue;
            if (is_ew(c, o) && !c->ci[o].mat) sum += cost[o];   /* inlined */
            else sum += read_cost(&node_of(c, o)->shape, &node_of(c, i)->shape);
        }
        cost[i] = sum > COST_CAP ? COST_CAP : (int)sum;
    }
}

/* Decides whether value u is stored, then passes the kernels that compute
 * it (and how often) on to its inlined operands. */
static void decide_value(compiler *c, recompute *r, int u)
{
    cinfo *cu = &c->ci[u];
    readers here = {{0}, 0};
    double f = 1;
    if (!is_ew(c, u) || cu->mat) {
        readers_add(&here, u);
    } else {
        if (r->root_id[u] >= 0) readers_add(&r->rd[u], r->root_id[u]);
        double e = (double)r->rd[u].n * r->fac[u];
        if (e > 1 && (e - 1) * r->cost[u] > COST_STORE + e * COST_LOAD) {
            cu->mat = true;
            readers_add(&here, u);
        } else {
            here = r->rd[u];
            f = r->fac[u];
        }
    }
    if (kind_of(c, u) == OT_KIND_SHAPE) return;
    const ot_shape *us = &node_of(c, u)->shape;
    for (int k = 0; k < 2; k++) {
        int o = canon_operand(c, u, k);
        if (o < 0 || !is_ew(c, o) || c->ci[o].mat) continue;
        readers_merge(&r->rd[o], &here);
        double fo = is_ew(c, u) ? f * bcast_factor(us, &node_of(c, o)->shape) : 1;
        if (fo > r->fac[o]) r->fac[o] = fo;
    }
}

/* Fusion inlines an elementwise value into every kernel that reads it, and
 * into every element of a broadcast, so a value shared by several kernels
 * is computed in each (a recurrence whose every step is also reduced would
 * be computed T^2/2 times), and a row broadcast once per row. A value
 * computed E times per element that way (k kernels, times the broadcast)
 * is stored once instead when (E - 1) * cost > store + E * load: the cost
 * of computing it inline (its op, the inlined ops below it and the stored
 * values they read) against writing it once and reading it back. Single-use chains and values shared
 * within one kernel stay fused. Walks users before operands, so each
 * value's readers are known when it is decided. */
bool ot__fuse_bound_recompute(compiler *c)
{
    recompute r;
    if (!recompute_alloc(&r, c->w->n)) return false;
    seed_roots(c, &r);
    inline_costs(c, r.cost);
    for (int u = c->w->n - 1; u >= 0; u--)
        if (c->ci[u].canon == u && is_op(c, u)) decide_value(c, &r, u);
    recompute_free(&r);
    return true;
}

/* ---- storage -------------------------------------------------------------- */

/* Temporaries get their size here and their arena offset once every kernel
 * is built (layout_arena), so that dead ones can share memory. */
static int new_temp(compiler *c, const ot_shape *shape, ot_dtype dt)
{
    ot_plan *p = c->plan;
    if (!grow((void **)&p->temp_offset, &c->tcap, p->ntemps + 1, sizeof *p->temp_offset)) {
        c->oom = true;
        return -1;
    }
    size_t bytes = (size_t)ot__numel(shape) * ot_dtype_size(dt);
    p->temp_offset[p->ntemps] = (bytes + 63) & ~(size_t)63;   /* the size, until laid out */
    return p->ntemps++;
}

void ot__fuse_temp_storage(compiler *c, storage *s, const ot_shape *shape, ot_dtype dt)
{
    *s = (storage){.has = true, .space = OT_SPACE_TEMP, .dtype = (uint8_t)dt, .shape = *shape};
    s->index = new_temp(c, shape, dt);
    contiguous(s);
}

storage ot__fuse_part_of(const storage *s, int axis, int64_t at, int64_t len)
{
    storage p = *s;
    p.shape.dims[axis] = len;
    p.offset += at * s->strides[axis];
    return p;
}

/* A layout op's view of its operand's storage src: a transpose permutes the
 * strides, a slice moves the offset and scales them, a reshape takes
 * ot_reshape's strides. False when a reshape of src needs a copy. */
static bool view_storage(const ot_node *n, const storage *src, storage *st)
{
    *st = *src;
    st->shape = n->shape;
    const ot_args *g = &n->args;
    switch (n->op) {
    case OT_OP_SLICE:
        for (int d = 0, j = 0; d < src->shape.ndim; d++) {
            st->offset += g->start[d] * src->strides[d];
            if (g->perm[d]) st->strides[j++] = src->strides[d] * g->perm[d];
        }
        return true;
    case OT_OP_RESHAPE:
        if (ot__numel(&src->shape) == 0) {
            contiguous(st);
            return true;
        }
        return ot__reshape_strides(&src->shape, src->strides, &n->shape, st->strides) == 0;
    default:
        for (int d = 0; d < n->shape.ndim; d++) st->strides[d] = src->strides[g->perm[d]];
        return true;
    }
}

static bool is_concat(const compiler *c, int e)
{
    return e >= 0 && is_op(c, e) && c->w->e[e].op == OT_OP_CONCAT;
}

/* A concat assigned as the whole tree of output i is stored in the output,
 * each part written in place: it is read by nothing else, has the
 * output's shape and dtype (parts are cast once, to it), and the output
 * overlaps no leaf, so no kernel reads what a part has written. */
static void concats_into_outputs(compiler *c)
{
    for (int i = 0; c->outs && c->fused && i < c->nout; i++) {
        int r = c->ci[c->w->root[i]].canon;
        ot_shape osh = out_shape(c, i);
        const ot_node *n = node_of(c, r);
        if (!is_concat(c, r) || c->ci[r].uses != 1 || c->ci[r].st.has ||
            n->dtype != c->outs[i]->leaf.dtype || !ot__shape_eq(&n->shape, &osh) ||
            !ot__fuse_out_alone(c, i, -1))
            continue;
        c->ci[r].st = ot__build_out_storage(c, i);
    }
}

/* Whether operand o of concat e may be stored straight into its part:
 * read by e alone, of e's dtype, and a concat (whose parts then write
 * there) or a dot BLAS can write there. */
static bool stored_in_part(const compiler *c, int e, int o, const storage *part)
{
    const ot_node *on = node_of(c, o);
    if (c->ci[o].uses != 1 || c->ci[o].st.has || on->dtype != node_of(c, e)->dtype) return false;
    if (is_concat(c, o)) return true;
    return is_op(c, o) && kind_of(c, o) == OT_KIND_DOT && c->ci[o].mat &&
           ot__build_blas_writable(part, on);
}

/* Concats, readers first: each has storage (its output's, or a new
 * temporary), and an operand that is a concat or a dot of its dtype read by
 * it alone is stored in its part of it (in_parent), so a chain of concats
 * writes every part once, where it ends up, and a GEMM writes its part. */
static void concat_storage(compiler *c)
{
    concats_into_outputs(c);
    for (int e = c->w->n - 1; e >= 0 && !c->oom; e--) {
        cinfo *ci = &c->ci[e];
        if (ci->canon != e || !is_concat(c, e)) continue;
        const ot_node *n = node_of(c, e);
        if (!ci->st.has) ot__fuse_temp_storage(c, &ci->st, &n->shape, (ot_dtype)n->dtype);
        int axis = n->args.axis;
        for (int k = 0; k < 2 && c->fused; k++) {
            int o = canon_operand(c, e, k);
            int64_t at = k ? n->a->shape.dims[axis] : 0;
            storage part = ot__fuse_part_of(&ci->st, axis, at, node_of(c, o)->shape.dims[axis]);
            if (!stored_in_part(c, e, o, &part)) continue;
            c->ci[o].st = part;
            c->ci[o].in_parent = true;
        }
    }
}

void ot__fuse_assign_storage(compiler *c)
{
    concat_storage(c);
    for (int i = 0; i < c->w->n && !c->oom; i++) {
        cinfo *ci = &c->ci[i];
        if (ci->canon != i) continue;
        const ent *e = &c->w->e[i];
        if (e->kind == OT_NODE_LEAF) {
            const ot_tensor *t = c->w->leaf[e->slot];
            ci->st = (storage){.has = true, .space = OT_SPACE_LEAF, .index = e->slot,
                               .dtype = e->dtype, .shape = t->leaf.shape};
            memcpy(ci->st.strides, t->strides, sizeof ci->st.strides);
        } else if (e->kind == OT_NODE_OP && kind_of(c, i) == OT_KIND_SHAPE) {
            const storage *src = &c->ci[canon_operand(c, i, 0)].st;
            if (!src->has) {           /* a view of a constant: a scalar, */
                if (ci->mat)           /* or filled where it must be memory */
                    ot__fuse_temp_storage(c, &ci->st, &e->node->shape, (ot_dtype)e->dtype);
                continue;
            }
            if (view_storage(e->node, src, &ci->st)) continue;
            ci->mat = true;   /* a reshape of a layout no strides give: copied */
            ot__fuse_temp_storage(c, &ci->st, &e->node->shape, (ot_dtype)e->dtype);
        } else if (ci->mat && !ci->st.has) {
            ot__fuse_temp_storage(c, &ci->st, &e->node->shape, (ot_dtype)e->dtype);
        }
    }
}

/* ---- dots written by BLAS into their output ------------------------------ */

/* e as x * scale: a product with a nonzero constant, a negation, or x. */
static int scaled(const compiler *c, int e, ot_scale *scale)
{
    *scale = ONE;
    const ent *x = &c->w->e[e];
    if (x->kind != OT_NODE_OP) return e;
    if (x->op == OT_OP_NEG) {
        scale->mul = -1;
        return canon_operand(c, e, 0);
    }
    if (x->op != OT_OP_MUL) return e;
    for (int side = 0; side < 2; side++) {
        const ent *k = &c->w->e[canon_operand(c, e, side)];
        if (k->kind == OT_NODE_CONST && !k->zero) {
            scale->param = k->slot;
            return canon_operand(c, e, 1 - side);
        }
    }
    return e;
}

/* A dot only output i reads, with the output's shape and dtype; s is the
 * entry scaling it (s == e when none). BLAS writes alpha*dot into the output
 * and no storage holds the dot or the scaled value, so neither may have
 * another reader (a transpose, another output's kernel) nor a kernel of its
 * own: each is read once, by the output. */
static bool dot_for(const compiler *c, int i, int e, int s)
{
    ot_shape osh = out_shape(c, i);
    const ot_node *d = node_of(c, e);
    return is_op(c, e) && kind_of(c, e) == OT_KIND_DOT && c->ci[e].uses == 1 &&
           c->ci[s].uses == 1 && (s == e || !c->ci[s].mat) && ot__shape_eq(&d->shape, &osh) &&
           d->dtype == c->outs[i]->leaf.dtype;
}

/* The output itself, read as a leaf (the same view). Other readers of the
 * leaf are kernels that run before the output's (every materialised value
 * is computed before any output is written), except the dot's own operands
 * and the other outputs' kernels, which gemm_over_leaf checks. */
static bool is_out_leaf(const compiler *c, int i, int e)
{
    const ent *x = &c->w->e[e];
    return x->kind == OT_NODE_LEAF && ot__overlap(c->outs[i], c->w->leaf[x->slot]) == OT_OVERLAP_FULL;
}

/* The leaf slot an operand reads through views (transposes), or -1 when it
 * is a computed value, which has storage of its own. */
static int operand_leaf(const compiler *c, int e)
{
    while (e >= 0 && is_op(c, e) && kind_of(c, e) == OT_KIND_SHAPE && !c->ci[e].mat)
        e = canon_operand(c, e, 0);
    return e >= 0 && c->w->e[e].kind == OT_NODE_LEAF ? c->w->e[e].slot : -1;
}

/* Whether BLAS may write dot d over leaf `slot` (output i, C = alpha*A.B +
 * beta*C): neither A nor B reads that leaf, and no other output's kernel
 * does (with several outputs, every tree reads the old values; an
 * optimizer step's w -= lr*dot(x', d) reads w only in kernels that run
 * before its GEMM). */
static bool gemm_over_leaf(const compiler *c, int i, int d, int slot, int *stack)
{
    for (int k = 0; k < 2; k++) {
        int l = operand_leaf(c, canon_operand(c, d, k));
        if (l >= 0 && ot__overlap(c->outs[i], c->w->leaf[l]) != OT_OVERLAP_NONE) return false;
    }
    for (int q = 0; q < c->nout; q++)
        if (q != i && ot__build_region_reads(c, q, slot, stack)) return false;
    return true;
}

/* Whether output i overlaps no leaf but, optionally, the leaf `own`. */
bool ot__fuse_out_alone(const compiler *c, int i, int own)
{
    for (int j = 0; j < c->w->nleaf; j++)
        if (j != own && ot__overlap(c->outs[i], c->w->leaf[j]) != OT_OVERLAP_NONE) return false;
    return true;
}

/* out = s0*dot + s1*out (w - lr*g with g a dot): one BLAS call with beta
 * s1 over the output in place, saving a pass that reads the dot's result
 * and the output and writes the output again. */
static bool match_compound(const compiler *c, int i, int r, gemm_root *g, int *stack)
{
    const ent *x = &c->w->e[r];
    if (x->kind != OT_NODE_OP || (x->op != OT_OP_ADD && x->op != OT_OP_SUB) ||
        node_of(c, r)->dtype != c->outs[i]->leaf.dtype)
        return false;
    ot_scale s[2];
    int o[2] = {canon_operand(c, r, 0), canon_operand(c, r, 1)};
    int t[2] = {scaled(c, o[0], &s[0]), scaled(c, o[1], &s[1])};
    if (x->op == OT_OP_SUB) s[1].mul = -s[1].mul;
    for (int d = 0; d < 2; d++) {
        if (!dot_for(c, i, t[d], o[d]) || !is_out_leaf(c, i, t[1 - d])) continue;
        int slot = c->w->e[t[1 - d]].slot;
        if (!ot__fuse_out_alone(c, i, slot) || !gemm_over_leaf(c, i, t[d], slot, stack))
            return false;
        *g = (gemm_root){t[d], s[d], s[1 - d]};
        return true;
    }
    return false;
}

static bool match_gemm_root(const compiler *c, int i, gemm_root *g, int *stack)
{
    int r = c->ci[c->w->root[i]].canon;
    *g = (gemm_root){-1, ONE, NONE};
    if (!c->outs || !c->fused) return false;
    if (match_compound(c, i, r, g, stack)) return true;
    ot_scale alpha;
    int d = scaled(c, r, &alpha);
    if (!dot_for(c, i, d, r) || !ot__fuse_out_alone(c, i, -1)) return false;
    *g = (gemm_root){d, alpha, NONE};
    return true;
}

/* e through scalings by constants and negations, each read once and so
 * computed by nobody else: the entry scaled, *scale their product (at
 * most one constant: a kernel scale holds one parameter). */
static int scaled_chain(const compiler *c, int e, ot_scale *scale)
{
    *scale = ONE;
    for (;;) {
        ot_scale s;
        int t = scaled(c, e, &s);
        if (t == e || c->ci[e].uses != 1 || c->ci[e].mat || (s.param >= 0 && scale->param >= 0))
            return e;
        scale->mul *= s.mul;
        if (s.param >= 0) scale->param = s.param;
        e = t;
    }
}

/* out = out + alpha*scatter_add(src, idx) (index_add(t, ids, src) into t,
 * an SGD step w - lr*scatter_add(g, ids) on an embedding table, gw +=
 * scatter_add(...)): one INDEX kernel updates the output in place, reading
 * and writing only the indexed rows (O(ids x row), not O(table)); g->dot is
 * then the scatter_add. Rows not indexed keep their values (the dense form
 * would add +0 to them: a -0.0 stays -0.0). Safe when the output is its
 * leaf's very view, overlaps no other leaf, the scatter's operands do not
 * read it (they are stored before any output is written) and no other
 * output's kernel reads it (every tree reads the old values). */
static bool match_index_root(const compiler *c, int i, gemm_root *g, int *stack)
{
    int r = c->ci[c->w->root[i]].canon;
    const ent *x = &c->w->e[r];
    ot_shape osh = out_shape(c, i);
    if (!c->outs || !c->fused || x->kind != OT_NODE_OP || c->ci[r].uses != 1 ||
        (x->op != OT_OP_ADD && x->op != OT_OP_SUB) || node_of(c, r)->dtype != c->outs[i]->leaf.dtype ||
        !ot__shape_eq(&node_of(c, r)->shape, &osh))
        return false;
    for (int d = x->op == OT_OP_SUB; d < 2; d++) {
        ot_scale s;
        int o = canon_operand(c, r, d), t = scaled_chain(c, o, &s), l = canon_operand(c, r, 1 - d);
        if (!is_op(c, t) || c->w->e[t].op != OT_OP_SCATTER_ADD || c->ci[t].uses != 1 ||
            node_of(c, t)->dtype != c->outs[i]->leaf.dtype || !ot__shape_eq(&node_of(c, t)->shape, &osh) ||
            !is_out_leaf(c, i, l))
            continue;
        int slot = c->w->e[l].slot;
        if (!ot__fuse_out_alone(c, i, slot) || !gemm_over_leaf(c, i, t, slot, stack)) return false;
        if (x->op == OT_OP_SUB) s.mul = -s.mul;
        *g = (gemm_root){t, s, ONE};
        return true;
    }
    return false;
}

/* Whether a canonical op entry other than p reads leaf `slot` (directly or
 * through views), or an output's tree is that leaf. */
static bool leaf_read_elsewhere(const compiler *c, int slot, int p)
{
    for (int e = 0; e < c->w->n; e++) {
        if (c->ci[e].canon != e || e == p || !is_op(c, e)) continue;
        if (kind_of(c, e) == OT_KIND_SHAPE && !c->ci[e].mat) continue;   /* its reader counts */
        for (int k = 0; k < 2; k++)
            if (canon_operand(c, e, k) >= 0 && operand_leaf(c, canon_operand(c, e, k)) == slot) return true;
    }
    for (int q = 0; q < c->nout; q++)
        if (operand_leaf(c, c->ci[c->w->root[q]].canon) == slot) return true;
    return false;
}

/* An add p = s0*dot + out inside output i's tree, read once by an
 * elementwise op of it (SGD with momentum: v' = m*(v + k*dot) - c*w, where
 * w + v' is another output): BLAS computes p over the output in place, and
 * the output's kernel reads p there, element for element, and finishes.
 * With beta 1, BLAS reads the output inside its kernel, behind the
 * arithmetic (W10m: 1.9 against 2.1 ms a step). Safe when nothing but p
 * reads the output's leaf (p replaces it before the other kernels run) and
 * the output overlaps no other leaf; p is then materialised there. */
static bool over_out(compiler *c, int i, int p, int *stack)
{
    gemm_root g;
    const ot_node *n = node_of(c, p);
    ot_shape osh = out_shape(c, i);
    if (c->ci[p].uses != 1 || c->ci[p].mat || !ot__shape_eq(&n->shape, &osh)) return false;
    c->ci[p].mat = true;   /* so that the other outputs' regions stop at p */
    bool ok = match_compound(c, i, p, &g, stack);
    int slot = -1;
    for (int k = 0; ok && k < 2; k++)
        if (is_out_leaf(c, i, canon_operand(c, p, k))) slot = c->w->e[canon_operand(c, p, k)].slot;
    storage out = ot__build_out_storage(c, i);
    ok = ok && slot >= 0 && !leaf_read_elsewhere(c, slot, p) && ot__build_blas_writable(&out, node_of(c, g.dot));
    c->ci[p].mat = ok;
    if (!ok) return false;
    c->ci[p].st = out;
    c->ci[p].over_out = g;
    c->ci[g.dot].mat = false;
    return true;
}

/* Looks for over_out's add in output i's tree: down from its root through
 * elementwise ops read once, unmaterialised (a walk of a tree, each entry
 * seen once). */
static void find_over_out(compiler *c, int i, int *stack)
{
    int r = c->ci[c->w->root[i]].canon, n = 0;
    if (!is_ew(c, r) || c->ci[r].mat) return;
    stack[n++] = r;
    while (n > 0) {
        int e = stack[--n];
        if (e != r && over_out(c, i, e, stack + n)) return;
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, e, k);
            if (o >= 0 && is_ew(c, o) && !c->ci[o].mat && c->ci[o].uses == 1) stack[n++] = o;
        }
    }
}

/* Reductions and dots written straight into their output need no
 * temporary. */
void ot__fuse_mark_direct_roots(compiler *c)
{
    /* find_over_out's walk, then a region's walk above it */
    int *stack = ot__malloc(sizeof(int) * (size_t)(4 * c->w->n + 2));
    for (int i = 0; i < c->nout; i++) {
        int r = c->ci[c->w->root[i]].canon;
        ot_shape osh = out_shape(c, i);
        gemm_root g;
        storage out = ot__build_out_storage(c, i);
        c->groot[i] = (gemm_root){-1, ONE, NONE};
        if (stack && match_gemm_root(c, i, &g, stack) &&
            ot__build_blas_writable(&out, node_of(c, g.dot))) {
            c->groot[i] = g;
            c->ci[g.dot].mat = false;
            continue;
        }
        if (stack && match_index_root(c, i, &g, stack)) {
            c->groot[i] = g;
            c->ci[g.dot].mat = false;
            continue;
        }
        if (stack && c->outs && c->fused) find_over_out(c, i, stack);
        if (is_op(c, r) && kind_of(c, r) == OT_KIND_REDUCE && c->ci[r].uses == 1 &&
            ot__shape_eq(&node_of(c, r)->shape, &osh))
            c->ci[r].mat = false;
        /* a structured op's kernel writes its output itself (plan_struct.c) */
        if (is_op(c, r) && c->w->e[r].op == OT_OP_CUSTOM_STRUCT && c->ci[r].uses == 1 &&
            ot__shape_eq(&node_of(c, r)->shape, &osh) && out.dtype == node_of(c, r)->dtype &&
            (!c->outs || ot__fuse_out_alone(c, i, -1)))
            c->ci[r].st = out;
    }
    free(stack);
}

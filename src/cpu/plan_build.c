/*
 * plan_build.c - the kernels of a plan, in an order that runs.
 *
 * Takes the fused entries with storage and the GEMM roots. First, with
 * fusion on, a sum whose terms are dots (a weight's gradient summed over
 * the time steps of an unrolled recurrence, or over the layers sharing it)
 * becomes one running sum that BLAS accumulates into (C += A.B, beta 1):
 * left to fusion, the sum was one elementwise kernel reading every term,
 * all of them stored and alive until the end. Then builds one kernel per
 * materialised entry in entry order (elementwise, reduction, dot, an
 * accumulating dot, rand, onehot; a reduction may also write the value it
 * reduces), then the outputs': a BLAS call or a reduction writing the
 * output, an elementwise kernel, or one group kernel for outputs of one
 * shape. An output whose kernel could read what it already overwrote is
 * computed into a temporary and copied out at the end.
 *
 * Guarantees to plan_sched.c: every temporary is written by a kernel
 * before the first kernel that reads it; temp_offset holds each
 * temporary's size (rounded to 64 bytes) until the arena is laid out; every
 * kernel has its ot_explain line and its work counted in the plan's stats.
 */
#include "plan.h"

/* ---- kernel builders ------------------------------------------------------ */

static ot_kernel *new_kernel(compiler *c, int kind)
{
    ot_plan *p = c->plan;
    if (p->nkernels == c->kcap) {
        int cap = c->kcap ? 2 * c->kcap : 8;
        ot_kernel *k = ot__realloc(p->kernels, sizeof *k * (size_t)cap);
        if (!k) {
            c->oom = true;
            return NULL;
        }
        p->kernels = k;
        c->kcap = cap;
    }
    ot_kernel *k = &p->kernels[p->nkernels++];
    *k = (ot_kernel){.kind = kind, .result = -1, .red_axis = -1};
    return k;
}

static ot_view output_view(const compiler *c, int i, int ndim, const int64_t *dims)
{
    storage s = {.has = true, .space = OT_SPACE_OUT, .index = i};
    const ot_tensor *o = c->outs ? c->outs[i] : NULL;
    if (o) {
        s.dtype = o->leaf.dtype;
        s.shape = o->leaf.shape;
        memcpy(s.strides, o->strides, sizeof s.strides);
    } else {
        s.dtype = c->trees[i]->dtype;
        s.shape = c->trees[i]->shape;
        contiguous(&s);
    }
    return ot__emit_view_of(&s, ndim, dims);
}

static void set_space(ot_kernel *k, const int64_t *dims, int ndim)
{
    k->ndim = ndim;
    memcpy(k->dims, dims, sizeof(int64_t) * (size_t)ndim);
}

static void mark_layout(ot_kernel *k)
{
    int nd = k->ndim;
    k->direct_store = !k->result_scalar && nd > 0 && k->store.strides[nd - 1] == 1;
    for (int x = 0; x < k->nxstore; x++)
        k->xstores[x].direct = !k->xstores[x].scalar && nd > 0 && k->xstores[x].view.strides[nd - 1] == 1;
    for (int i = 0; i < k->nload && nd >= 2; i++) {
        int64_t s = k->loads[i].strides[nd - 1];
        if (s > 1 || s < -1) k->col_blocked = true;
    }
}

/* An elementwise kernel computing entry root (or copying a stored value)
 * over dims into the view store. */
static bool ew_kernel(compiler *c, prog *g, int root, bool computed, const ot_shape *space,
                      ot_view store)
{
    ot_kernel *k = new_kernel(c, OT_KER_EW);
    if (!k) return false;
    ot__emit_reset_prog(g, k);
    set_space(k, space->dims, space->ndim);
    k->store = store;
    int v = ot__emit_store_value(g, ot__emit_region(g, root, computed, NULL));
    if (!ot__emit_finish_program(g, v)) return false;
    mark_layout(k);
    return true;
}

/* The destination of a reduction seen over its input's dims: the reduced
 * dims get stride 0. */
static ot_view reduce_store(const storage *dst, const ot_node *r, const ot_shape *in)
{
    ot_view v = {.space = dst->space, .dtype = dst->dtype, .index = dst->index, .offset = dst->offset};
    int axis = r->args.axis;
    for (int i = 0, j = 0; i < in->ndim; i++) {
        bool reduced = axis == OT_AXIS_ALL || axis == i;
        if (reduced && !r->args.keepdims) continue;
        v.strides[i] = reduced ? 0 : dst->strides[j];
        j++;
    }
    return v;
}

/* ---- sums of dots accumulated by BLAS ------------------------------------ */

/* One step of a running sum: sum' = beta sum + alpha dot, computed by BLAS
 * into the running sum's storage (a - b is a + (-1) b). */
typedef struct acc_step {
    int dot, sum;
    ot_scale alpha, beta;
} acc_step;

static const ot_scale MINUS_ONE = {-1, -1};

static bool same_temp(const storage *a, const storage *b)
{
    return a->has && b->has && a->space == OT_SPACE_TEMP && b->space == OT_SPACE_TEMP &&
           a->index == b->index;
}

/* Add or sub entry e read as its operand `side` (the sum) and the other
 * operand (the dot), with their signs; false for any other entry. */
static bool step_operands(const compiler *c, int e, int side, acc_step *s)
{
    const ent *x = &c->w->e[e];
    if (x->kind != OT_NODE_OP || (x->op != OT_OP_ADD && x->op != OT_OP_SUB)) return false;
    bool sub = x->op == OT_OP_SUB;
    *s = (acc_step){canon_operand(c, e, 1 - side), canon_operand(c, e, side),
                    sub && side == 0 ? MINUS_ONE : ONE, sub && side == 1 ? MINUS_ONE : ONE};
    return is_op(c, s->dot) && kind_of(c, s->dot) == OT_KIND_DOT;
}

/* Whether materialised entry e is a step of a running sum (fold_dot_sums
 * made it one: it shares its sum's storage and its dot has none of its
 * own), filling *s when s is not NULL. */
static bool accumulates(const compiler *c, int e, acc_step *s)
{
    acc_step t;
    for (int side = 0; side < 2 && c->ci[e].mat; side++)
        if (step_operands(c, e, side, &t) && !c->ci[t.dot].mat &&
            same_temp(&c->ci[e].st, &c->ci[t.sum].st)) {
            if (s) *s = t;
            return true;
        }
    return false;
}

/* Whether p may be the sum a dot accumulates into, overwriting it: a stored
 * dot or running sum, with a temporary of its own, read by nothing else. */
static bool running_sum(const compiler *c, int p)
{
    const cinfo *ci = &c->ci[p];
    return ci->mat && ci->uses == 1 && ci->st.has && ci->st.space == OT_SPACE_TEMP &&
           ((is_op(c, p) && kind_of(c, p) == OT_KIND_DOT) || accumulates(c, p, NULL));
}

/* Whether step s of add/sub entry e may run as one BLAS call: its dot is
 * stored for e alone, and dot, sum and e have one shape and float dtype. */
static bool foldable(const compiler *c, int e, const acc_step *s)
{
    const ot_node *n = node_of(c, e), *d = node_of(c, s->dot), *p = node_of(c, s->sum);
    const cinfo *di = &c->ci[s->dot];
    return di->mat && di->uses == 1 && di->st.has && di->st.space == OT_SPACE_TEMP &&
           running_sum(c, s->sum) && (n->dtype == OT_F32 || n->dtype == OT_F64) &&
           d->dtype == n->dtype && p->dtype == n->dtype && ot__shape_eq(&d->shape, &n->shape) &&
           ot__shape_eq(&p->shape, &n->shape) && ot__build_blas_writable(&c->ci[s->sum].st, d);
}

/* Views (slices, reshapes, transposes) of entry e read temp `to` where they
 * read temp `from`: e's storage moved to a running sum's, a temporary of
 * the same shape and layout. Views come after e in entry order. */
static void retarget_views(compiler *c, int e, int from, int to)
{
    for (int v = e + 1; from >= 0 && v < c->w->n; v++) {
        storage *st = &c->ci[v].st;
        if (c->ci[v].canon == v && is_op(c, v) && kind_of(c, v) == OT_KIND_SHAPE && !c->ci[v].mat &&
            st->has && st->space == OT_SPACE_TEMP && st->index == from)
            st->index = to;
    }
}

/* Turns every add or sub of a dot to a stored dot or running sum into a
 * step of a running sum, in entry order (so chains fold from their first
 * term): the step shares its sum's temporary, which BLAS accumulates into,
 * and the dot's own temporary (and the step's, when it had one) is dropped
 * (no bytes, no writer, no reader). */
static void fold_dot_sums(compiler *c)
{
    for (int e = 0; c->fused && e < c->w->n; e++) {
        if (c->ci[e].canon != e) continue;
        acc_step s;
        for (int side = 0; side < 2; side++) {
            if (!step_operands(c, e, side, &s) || !foldable(c, e, &s)) continue;
            cinfo *ei = &c->ci[e];
            c->plan->temp_offset[c->ci[s.dot].st.index] = 0;
            if (ei->mat && ei->st.has && ei->st.space == OT_SPACE_TEMP)
                c->plan->temp_offset[ei->st.index] = 0;
            c->ci[s.dot].mat = false;
            ei->mat = true;
            int was = ei->st.has && ei->st.space == OT_SPACE_TEMP ? ei->st.index : -1;
            ei->st = c->ci[s.sum].st;
            retarget_views(c, e, was, ei->st.index);
            break;
        }
    }
}

/* Whether e reads x as an operand. */
static bool reads_entry(const compiler *c, int e, int x)
{
    return canon_operand(c, e, 0) == x || canon_operand(c, e, 1) == x;
}

/* Per entry, the first entry whose kernel reads it (computes it, for one
 * not stored): the least over its readers u of u where u is stored, else of
 * u's own (INT_MAX: only outputs' kernels, built after every entry's).
 * Kernels are built in entry order, so this is the first kernel that needs
 * it; one pass from the roots down. */
static bool kernels_at(compiler *c)
{
    int n = c->w->n;
    if (!(c->kernel_at = ot__malloc(sizeof(int) * (size_t)(n ? n : 1)))) return false;
    for (int e = 0; e < n; e++) c->kernel_at[e] = INT_MAX;
    for (int u = n - 1; u >= 0; u--) {
        if (c->ci[u].canon != u || !is_op(c, u)) continue;
        int ku = c->ci[u].mat ? u : c->kernel_at[u];
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, u, k);
            if (o >= 0 && ku < c->kernel_at[o]) c->kernel_at[o] = ku;
        }
    }
    return true;
}

/* Whether entry e is x seen through views (shape ops stored nowhere). */
static bool views_of(const compiler *c, int e, int x)
{
    while (e >= 0 && e != x && is_op(c, e) && kind_of(c, e) == OT_KIND_SHAPE && !c->ci[e].mat)
        e = canon_operand(c, e, 0);
    return e == x;
}

/* Whether the pass computing entry e (unless stored: then it is loaded)
 * reads x's storage through a view anywhere in its region, the entries
 * stored nowhere below it. The walk is bounded: a region past
 * REGION_WALK entries visited counts as reading it, the safe answer. */
#define REGION_WALK 256
static bool region_views(const compiler *c, int e, int x)
{
    int stack[REGION_WALK], top = 0, visits = 0;
    if (e >= 0) stack[top++] = e;
    while (top > 0) {
        int u = stack[--top];
        if (u < 0 || !is_op(c, u) || c->ci[u].mat) continue;
        if (++visits > REGION_WALK) return true;
        if (kind_of(c, u) == OT_KIND_SHAPE) {
            if (views_of(c, u, x)) return true;
            continue;   /* a view's chain ends at a stored value (materialise_operands) */
        }
        if (!is_ew(c, u)) continue;
        for (int k = 0; k < 2; k++) {
            if (top == REGION_WALK) return true;
            stack[top++] = canon_operand(c, u, k);
        }
    }
    return false;
}

/* Whether elementwise entry y, stored nowhere and read by one entry alone,
 * may carry stored value x into a reduction: it computes a value of x's
 * shape and dtype (no broadcast of x, no cast between), so the
 * reduction's pass can store x, and its other operand is no stored
 * elementwise value (which could claim the same reduction) and reads no
 * view of x anywhere in its region (which would load x's storage in the
 * pass that writes it: min(x^T, x) read it before any kernel wrote it,
 * fuzz seed 4242 tree 17426; sgn(relu(x[::-1])) * x, seed 9001 tree
 * 16885). */
static bool carries(const compiler *c, int y, int x)
{
    const ot_node *ny = node_of(c, y), *nx = node_of(c, x);
    int other = canon_operand(c, y, 0) == x ? canon_operand(c, y, 1) : canon_operand(c, y, 0);
    return y != x && is_ew(c, y) && !c->ci[y].mat && c->ci[y].uses == 1 && reads_entry(c, y, x) &&
           (other < 0 || other == x ||
            (!views_of(c, other, x) && !region_views(c, other, x) &&
             (!is_ew(c, other) || !c->ci[other].mat))) &&
           c->w->e[y].op != OT_OP_CAST && c->w->e[y].op != OT_OP_KEEP && ny->dtype == nx->dtype &&
           ot__shape_eq(&ny->shape, &nx->shape);
}

/* The reduction that computes stored value x itself and writes it out as a
 * further output (softmax's exp(x - max): stored once, summed in the same
 * pass), or -1; *via (unless NULL) is what it reduces: x, or an entry
 * that carries x (a layer norm's gradient sums -x). x must be an
 * elementwise value stored
 * for several readers, not an output, and the reduction's kernel the first
 * that reads it (kernel_at). Never a checkpoint (keep): the user asked for
 * its own kernel, and its value may be a load, which a further output
 * cannot store. */
static int absorbing_reduce(const compiler *c, int x, int *via)
{
    if (!c->fused || !is_ew(c, x) || !c->ci[x].mat || c->ci[x].canon != x ||
        c->w->e[x].op == OT_OP_KEEP || accumulates(c, x, NULL))
        return -1;
    for (int i = 0; i < c->nout; i++)
        if (c->ci[c->w->root[i]].canon == x) return -1;
    int first = c->kernel_at[x];
    if (first == INT_MAX || kind_of(c, first) != OT_KIND_REDUCE) return -1;
    int y = canon_operand(c, first, 0);
    if (y != x && !carries(c, y, x)) return -1;
    if (via) *via = y;
    return first;
}

/* The stored value that reduction e, over x, computes and writes out as a
 * further output (absorbing_reduce), or -1. */
static int absorbed_by(const compiler *c, int e, int x)
{
    int via;
    if (absorbing_reduce(c, x, &via) == e) return x;
    for (int k = 0; k < 2 && is_ew(c, x) && !c->ci[x].mat; k++) {
        int s = canon_operand(c, x, k);
        if (s >= 0 && absorbing_reduce(c, s, &via) == e && via == x) return s;
    }
    return -1;
}

static bool reduce_kernel(compiler *c, prog *g, int e, const storage *dst)
{
    const ot_node *r = node_of(c, e);
    int x = canon_operand(c, e, 0);
    const ot_shape *in = &node_of(c, x)->shape;
    ot_kernel *k = new_kernel(c, OT_KER_REDUCE);
    if (!k) return false;
    ot__emit_reset_prog(g, k);
    set_space(k, in->dims, in->ndim);
    k->store = reduce_store(dst, r, in);
    k->red_op = r->op;
    k->red_count = r->args.axis == OT_AXIS_ALL ? ot__numel(in) : in->dims[r->args.axis];
    k->red_entry = e;
    int pin = r->args.axis == OT_AXIS_ALL ? -1 : r->args.axis, stored = absorbed_by(c, e, x);
    bool absorbs = stored >= 0;
    if (absorbs) {
        if (!(k->xstores = ot__calloc(1, sizeof *k->xstores))) return false;
        k->nxstore = 1;
        k->xstores[0].view = ot__emit_view_of(&c->ci[stored].st, in->ndim, in->dims);
    }
    bool computed = (is_ew(c, x) && !c->ci[x].mat) || stored == x;
    /* The stored value is the region's one stored entry computed, not loaded. */
    ot__emit_roots(g, &x, 1, absorbs ? stored : x, computed, r->args.axis == OT_AXIS_ALL ? NULL : &pin);
    int v = c->oom ? -1 : g->val[x];
    k->red_axis = r->args.axis == OT_AXIS_ALL ? -1 : pin;
    if (absorbs) g->xval[0] = g->val[stored];
    if (!ot__emit_finish_program(g, v)) return false;
    if (absorbs) {
        int nd = k->ndim;
        k->xstores[0].direct = !k->xstores[0].scalar && nd > 0 && k->xstores[0].view.strides[nd - 1] == 1;
    }
    return true;
}

/* A stored operand of a dot as a 2-D view plus a batch stride: 1-D a is a
 * row, 1-D b a column; a batch of 1 is shared (stride 0). */
static ot_view dot_operand(const storage *s, bool is_a)
{
    ot_view v = {.space = s->space, .dtype = s->dtype, .index = s->index, .offset = s->offset};
    const int64_t *st = s->strides;
    switch (s->shape.ndim) {
    case 3:
        v.strides[0] = st[1];
        v.strides[1] = st[2];
        v.strides[2] = s->shape.dims[0] == 1 ? 0 : st[0];
        break;
    case 2:
        v.strides[0] = st[0];
        v.strides[1] = st[1];
        break;
    default:
        v.strides[is_a ? 1 : 0] = st[0];
        break;
    }
    return v;
}

/* The result of a dot (m x n per batch) in storage dst, as C's view. */
static ot_view dot_result(const storage *dst, const ot_node *d, int64_t m, int64_t n)
{
    ot_view v = {.space = dst->space, .dtype = dst->dtype, .index = dst->index, .offset = dst->offset};
    const int64_t *st = dst->strides;
    int nd = d->shape.ndim;
    if (d->op == OT_OP_BATCHED_DOT) {
        v.strides[0] = st[1];
        v.strides[1] = st[2];
        v.strides[2] = st[0];
    } else if (nd == 2) {
        v.strides[0] = st[0];
        v.strides[1] = st[1];
    } else if (nd == 1) {
        v.strides[m > 1 ? 0 : 1] = st[0];
    }
    if (m <= 1) v.strides[0] = n > 1 ? n : 1;   /* BLAS wants ldc >= n even then */
    if (n <= 1) v.strides[1] = 1;
    return v;
}

/* Whether BLAS can write a dot's result straight into storage dst. */
bool ot__build_blas_writable(const storage *dst, const ot_node *d)
{
    const ot_shape *s = &d->shape;
    int nd = s->ndim;
    if (nd == 0 || ot__numel(s) == 0) return true;
    int64_t n = s->dims[nd - 1], m = nd >= 2 ? s->dims[nd - 2] : 1;
    if (d->op == OT_OP_DOT && nd == 1) {   /* a column (m) or a row (n) */
        bool col = d->a->shape.ndim == 2;
        return col ? dst->strides[0] > 0 || s->dims[0] <= 1 : dst->strides[0] == 1 || s->dims[0] <= 1;
    }
    bool ok = (n <= 1 || dst->strides[nd - 1] == 1) && (m <= 1 || dst->strides[nd - 2] >= n);
    if (nd == 3 && s->dims[0] > 1) ok = ok && dst->strides[0] >= (m - 1) * dst->strides[1] + n;
    return ok;
}

static bool dot_kernel(compiler *c, int e, const storage *dst, ot_scale alpha, ot_scale beta)
{
    const ot_node *d = node_of(c, e);
    int a = canon_operand(c, e, 0), b = canon_operand(c, e, 1);
    const storage *sa = &c->ci[a].st, *sb = &c->ci[b].st;
    ot_kernel *k = new_kernel(c, OT_KER_DOT);
    if (!k || !(k->loads = ot__malloc(2 * sizeof *k->loads))) return false;
    k->nload = 2;
    k->loads[0] = dot_operand(sa, true);
    k->loads[1] = dot_operand(sb, false);
    int ra = sa->shape.ndim, rb = sb->shape.ndim;
    k->batch = d->op == OT_OP_BATCHED_DOT ? d->shape.dims[0] : 1;
    k->m = ra >= 2 ? sa->shape.dims[ra - 2] : 1;
    k->k = sa->shape.dims[ra - 1];
    k->n = rb >= 2 ? sb->shape.dims[rb - 1] : 1;
    k->alpha = alpha;
    k->beta = beta;
    k->store = dot_result(dst, d, k->m, k->n);
    k->shape = d->shape;
    return true;
}

static bool special_kernel(compiler *c, int e, const storage *dst)
{
    const ot_node *n = node_of(c, e);
    bool rand = n->op == OT_OP_RAND;
    ot_kernel *k = new_kernel(c, rand ? OT_KER_RAND : OT_KER_ONEHOT);
    if (!k) return false;
    k->store = (ot_view){.space = dst->space, .dtype = dst->dtype, .index = dst->index,
                        .offset = dst->offset};
    k->shape = n->shape;
    k->seed = n->args.seed;
    k->depth = n->args.depth;
    k->axis = n->args.axis;
    if (rand) return true;
    const storage *in = &c->ci[canon_operand(c, e, 0)].st;
    if (!(k->loads = ot__malloc(sizeof *k->loads))) return false;
    k->nload = 1;
    k->loads[0] = (ot_view){.space = in->space, .dtype = in->dtype, .index = in->index,
                            .offset = in->offset};
    memcpy(k->loads[0].strides, in->strides, sizeof in->strides);
    k->ndim = in->shape.ndim;
    memcpy(k->dims, in->shape.dims, sizeof in->shape.dims);
    return true;
}

/* A storage as a CONV kernel's view: 5-D strides, spatial dims past the
 * node's of size 1 (stride 0). */
static ot_view conv_view(const storage *s)
{
    ot_view v = {.space = s->space, .dtype = s->dtype, .index = s->index, .offset = s->offset};
    memcpy(v.strides, s->strides, sizeof(int64_t) * (size_t)s->shape.ndim);
    return v;
}

/* A kernel over whole operands (the kind CONV's nodes: conv, pooling,
 * indexing, attention): a view per operand (with its shape when `shapes`),
 * the store and the node's shape; its loop is the caller's. */
static ot_kernel *whole_kernel(compiler *c, int e, const storage *dst, int kind, bool shapes)
{
    const ot_node *n = node_of(c, e);
    ot_kernel *k = new_kernel(c, kind);
    int na = n->b ? 2 : 1;
    if (!k || !(k->loads = ot__malloc((size_t)na * sizeof *k->loads)) ||
        (shapes && !(k->load_shapes = ot__malloc((size_t)na * sizeof *k->load_shapes))))
        return NULL;
    k->nload = na;
    for (int i = 0; i < na; i++) {
        const storage *st = &c->ci[canon_operand(c, e, i)].st;
        k->loads[i] = conv_view(st);
        if (shapes) k->load_shapes[i] = st->shape;
    }
    k->store = conv_view(dst);
    k->shape = n->shape;
    return k;
}

static bool conv_kind_kernel(compiler *c, int e, const storage *dst)
{
    const ot_node *n = node_of(c, e);
    int op = c->w->e[e].op;
    int kind = ot__is_index(op) ? OT_KER_INDEX
             : ot__is_attn(op)  ? OT_KER_ATTN
             : ot__is_pool(op)  ? OT_KER_POOL
                                : OT_KER_CONV;
    ot_kernel *k = whole_kernel(c, e, dst, kind, kind == OT_KER_ATTN);
    if (!k) return false;
    switch (kind) {
    case OT_KER_INDEX: ot__index_geom_of(n, &k->index); break;
    case OT_KER_POOL: ot__pool_geom_of(n, &k->pool); break;
    case OT_KER_ATTN:
        ot__attn_geom_of(n, &k->attn);
        k->ndim = n->shape.ndim;
        memcpy(k->dims, n->shape.dims, sizeof n->shape.dims);
        break;
    default:
        k->conv_op = n->op;
        ot__conv_geom_of(n, &k->conv);
    }
    return true;
}

/* scatter_add e added into dst in place, times alpha (plan_fuse.c's
 * match_index_root: dst holds the value it is added to). */
static bool index_in_place_kernel(compiler *c, int e, const storage *dst, ot_scale alpha)
{
    ot_kernel *k = whole_kernel(c, e, dst, OT_KER_INDEX, false);
    if (!k) return false;
    ot__index_geom_of(node_of(c, e), &k->index);
    k->alpha = alpha;
    k->beta = ONE;
    return true;
}

static bool entry_kernel(compiler *c, prog *g, int e, const storage *dst)
{
    if (node_of(c, e)->custom && c->w->e[e].op == OT_OP_CUSTOM_STRUCT)
        return ot__build_struct_kernel(c, g, e, dst);
    switch (kind_of(c, e)) {
    case OT_KIND_CONV:
        return conv_kind_kernel(c, e, dst);
    case OT_KIND_REDUCE: return reduce_kernel(c, g, e, dst);
    case OT_KIND_DOT: return dot_kernel(c, e, dst, ONE, NONE);
    case OT_KIND_SPECIAL:
        if (c->w->e[e].op != OT_OP_CAST && c->w->e[e].op != OT_OP_KEEP)
            return special_kernel(c, e, dst);
        break;   /* a cast and a checkpoint are elementwise */
    default: break;
    }
    {
        ot_shape sh = node_of(c, e)->shape;
        return ew_kernel(c, g, e, true, &sh, ot__emit_view_of(dst, sh.ndim, sh.dims));
    }
}

/* ---- layout ops ------------------------------------------------------------ */

/* Concat e's parts, each computed (or copied) by a kernel of its own into
 * its part of e's storage: an unstored elementwise part is fused into that
 * kernel, so nothing is stored twice; a part that is a concat stored there
 * already (in_parent) wrote itself. */
static bool concat_kernels(compiler *c, prog *g, int e)
{
    const ot_node *n = node_of(c, e);
    int axis = n->args.axis;
    int64_t at = 0;
    for (int k = 0; k < 2; k++) {
        int o = canon_operand(c, e, k);
        const ot_shape *sh = &node_of(c, o)->shape;
        storage part = ot__fuse_part_of(&c->ci[e].st, axis, at, sh->dims[axis]);
        at += sh->dims[axis];
        if (c->ci[o].in_parent) continue;   /* an empty part still writes: readers need a writer */
        bool computed = is_ew(c, o) && !c->ci[o].mat;
        if (!ew_kernel(c, g, o, computed, sh, ot__emit_view_of(&part, sh->ndim, sh->dims)))
            return false;
    }
    return true;
}

/* A reshape whose operand's layout no strides can reshape (a transpose's,
 * a strided slice's): the operand copied in its own shape into the
 * reshape's contiguous temporary, which holds the same row-major order. */
static bool reshape_copy(compiler *c, prog *g, int e)
{
    int o = canon_operand(c, e, 0);
    const ot_shape *sh = &node_of(c, o)->shape;
    storage dst = c->ci[e].st;
    dst.shape = *sh;
    contiguous(&dst);
    return ew_kernel(c, g, o, false, sh, ot__emit_view_of(&dst, sh->ndim, sh->dims));
}

/* ---- outputs and aliasing ------------------------------------------------- */

/* Whether the last kernel, which writes output i, could read data it has
 * already overwritten. Only an elementwise kernel reading a leaf through
 * exactly the output's view may run in place; with several outputs, any
 * overlap goes through a temporary (every tree reads the old values). */
static bool needs_temp(const compiler *c, int i, const ot_kernel *k)
{
    if (!c->outs) return false;
    for (int j = 0; j < c->w->nleaf; j++) {
        int ov = ot__overlap(c->outs[i], c->w->leaf[j]);
        if (ov == OT_OVERLAP_NONE) continue;
        if (ov == OT_OVERLAP_PARTIAL || c->nout > 1 || k->kind != OT_KER_EW) return true;
        for (int l = 0; l < k->nload; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space == OT_SPACE_LEAF && v->index == j && !same_strides(v, &k->store, k->ndim))
                return true;
        }
    }
    return false;
}

static void drop_last_kernel(compiler *c)
{
    ot_kernel *k = &c->plan->kernels[--c->plan->nkernels];
    free(k->loads);
    free(k->load_shapes);
    free(k->xstores);
    free(k->insns);
    free(k->desc);
}


/* Writes root r (canonical entry) into output i: computed in place by its
 * own kernel when it may be, else into a temporary copied out at the end. */
storage ot__build_out_storage(const compiler *c, int i)
{
    ot_shape osh = out_shape(c, i);
    storage out = {.has = true, .space = OT_SPACE_OUT, .index = i};
    ot_view ov = output_view(c, i, osh.ndim, osh.dims);
    out.dtype = ov.dtype;
    out.shape = osh;
    memcpy(out.strides, c->outs ? c->outs[i]->strides : ov.strides, sizeof out.strides);
    return out;
}

static bool root_kernel(compiler *c, prog *g, int i, int r, int *via_temp)
{
    ot_shape osh = out_shape(c, i);
    storage out = ot__build_out_storage(c, i);
    const gemm_root *gr = &c->groot[i];
    if (gr->dot >= 0)
        return kind_of(c, gr->dot) == OT_KIND_DOT ? dot_kernel(c, gr->dot, &out, gr->alpha, gr->beta)
                                                  : index_in_place_kernel(c, gr->dot, &out, gr->alpha);
    const storage *rs = &c->ci[r].st;
    if (rs->has && rs->space == OT_SPACE_OUT && rs->index == i) return true;   /* a concat in place */
    bool reduce_direct = is_op(c, r) && kind_of(c, r) == OT_KIND_REDUCE && c->ci[r].uses == 1 &&
                         ot__shape_eq(&node_of(c, r)->shape, &osh);
    for (int attempt = 0; attempt < 2; attempt++) {
        storage dst = out;
        if (attempt == 1) {
            ot__fuse_temp_storage(c, &dst, &osh, (ot_dtype)out.dtype);
            *via_temp = dst.index;
        }
        bool ok;
        if (reduce_direct) ok = reduce_kernel(c, g, r, &dst);
        else if (is_ew(c, r) && !c->ci[r].mat)
            ok = ew_kernel(c, g, r, true, &osh, ot__emit_view_of(&dst, osh.ndim, osh.dims));
        else
            ok = ew_kernel(c, g, r, false, &osh, ot__emit_view_of(&dst, osh.ndim, osh.dims));
        if (!ok) return false;
        if (attempt == 1 || !needs_temp(c, i, &c->plan->kernels[c->plan->nkernels - 1])) return true;
        drop_last_kernel(c);
    }
    return true;
}

/* Whether output i of an ot_assign_many may be written by a group kernel
 * (alone, or sharing it with outputs of its shape): its tree is computed
 * elementwise (not by a BLAS call writing the output: that dot then has no
 * storage a kernel could load) and the output overlaps no leaf but fully, so no store can
 * change what any tree reads; check_inplace_groups then breaks up groups
 * whose leaves other outputs read. Outputs never overlap each other (the
 * assignment checks it). */
static bool groupable(const compiler *c, int i)
{
    if (!c->outs || !c->fused || c->nout < 2 || c->groot[i].dot >= 0) return false;
    int r = c->ci[c->w->root[i]].canon;
    if (!is_ew(c, r) || c->ci[r].mat) return false;
    for (int j = 0; j < c->w->nleaf; j++)
        if (ot__overlap(c->outs[i], c->w->leaf[j]) == OT_OVERLAP_PARTIAL) return false;
    return true;
}

bool ot__build_region_reads(const compiler *c, int q, int j, int *stack)
{
    int n = 0, r = c->ci[c->w->root[q]].canon;
    stack[n++] = r;
    bool found = false;
    while (n > 0 && !found) {
        int e = stack[--n];
        const ent *x = &c->w->e[e];
        if (x->kind == OT_NODE_LEAF) found = x->slot == j;
        if (x->kind != OT_NODE_OP || (e != r && c->ci[e].mat)) continue;   /* a transpose is a view: go on */
        for (int k = 0; k < 2; k++)
            if (canon_operand(c, e, k) >= 0) stack[n++] = canon_operand(c, e, k);
    }
    return found;
}

/* An output written in place over a leaf (w = w - lr*g) may share a kernel
 * only with every output whose kernel reads that leaf: a later kernel would
 * read the new values. Such groups are broken up (their outputs then go
 * through temporaries). */
static void check_inplace_groups(compiler *c, int *lead)
{
    int *stack = ot__malloc(sizeof(int) * (size_t)(2 * c->w->n + 1));
    if (!stack) {   /* ENOMEM: no plan (ungrouped outputs would go through temporaries,
                       which an output BLAS updates in place cannot) */
        c->oom = true;
        return;
    }
    for (int i = 0; i < c->nout; i++) {
        if (lead[i] < 0) continue;
        for (int j = 0; j < c->w->nleaf; j++) {
            if (ot__overlap(c->outs[i], c->w->leaf[j]) != OT_OVERLAP_FULL) continue;
            bool ok = true;
            for (int q = 0; q < c->nout && ok; q++)
                ok = (lead[q] == lead[i] && lead[q] >= 0) || !ot__build_region_reads(c, q, j, stack);
            if (ok) continue;
            int g = lead[i];
            for (int q = 0; q < c->nout; q++)
                if (lead[q] == g) lead[q] = -1;
            break;
        }
    }
    free(stack);
}

/* A store of a group may go straight into its output unless the output is
 * a leaf some instruction after it still reads: then the store waits for
 * the end of the tile. */
static bool store_in_place(const prog *g, int v, const ot_view *out)
{
    const compiler *c = g->c;
    for (int j = 0; j < c->w->nleaf; j++) {
        if (out->space != OT_SPACE_OUT || ot__overlap(c->outs[out->index], c->w->leaf[j]) == OT_OVERLAP_NONE)
            continue;
        for (int l = 0; l < g->nv; l++) {
            const ot_insn *in = &g->ins[l];
            const ot_view *lv = in->code == OT_I_LOAD ? &g->k->loads[in->arg] : NULL;
            if (lv && lv->space == OT_SPACE_LEAF && lv->index == j && g->v[l].last_use > v)
                return false;
        }
    }
    return true;
}

/* The value output x of a group stores: a value of its own that a
 * computing insn defines, since results get buffers (or output memory) of
 * their own; copied when it is a load, a constant or an earlier output's. */
static int own_value(prog *g, int v, const ot_view *view, const int *taken, int ntaken)
{
    v = ot__emit_cast_to(g, v, (uint8_t)ot__kd((ot_dtype)view->dtype));
    if (v < 0) return v;
    uint8_t code = g->ins[v].code;
    bool shared = false;
    for (int y = 0; y < ntaken; y++) shared = shared || taken[y] == v;
    if (code != OT_I_LOAD && code != OT_I_PARAM && !shared) return v;
    ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[v].kd, .a = (int16_t)ot__emit_use(g, v), .b = -1,
                  .c = -1, .scalar = g->v[v].scalar ? 1 : 0};
    return ot__emit_insn(g, in, g->v[v].kd, g->v[v].scalar);
}

/* One kernel computing the trees of outputs idx[0..n-1] (same shape) in one
 * pass: shared subtrees are computed once and every input is read once. */
/* Whether every load of a leaf that an output of kernel k overwrites walks
 * it as that output's store does (element for element): a transposed read
 * would see elements another tile already wrote. */
static bool loads_walk_outputs(const compiler *c, const ot_kernel *k)
{
    for (int x = -1; x < k->nxstore; x++) {
        const ot_view *o = x < 0 ? &k->store : &k->xstores[x].view;
        for (int l = 0; l < k->nload; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space == OT_SPACE_LEAF &&
                ot__overlap(c->outs[o->index], c->w->leaf[v->index]) != OT_OVERLAP_NONE &&
                !same_strides(v, o, k->ndim))
                return false;
        }
    }
    return true;
}

/* One kernel computing the trees of outputs idx[0..n-1]; *split is set
 * (and nothing built) when it could not run in place, and the caller
 * writes each output on its own. */
static bool group_kernel(compiler *c, prog *g, const int *idx, int n, bool *split)
{
    ot_shape osh = out_shape(c, idx[0]);
    ot_kernel *k = new_kernel(c, OT_KER_EW);
    if (!k || (n > 1 && !(k->xstores = ot__calloc((size_t)(n - 1), sizeof *k->xstores)))) return false;
    ot__emit_reset_prog(g, k);
    set_space(k, osh.dims, osh.ndim);
    k->store = output_view(c, idx[0], osh.ndim, osh.dims);
    k->nxstore = n - 1;
    int roots[1 + OT_MAX_XSTORES];
    for (int x = 0; x < n; x++) {
        roots[x] = c->ci[c->w->root[idx[x]]].canon;
        if (x > 0) k->xstores[x - 1].view = output_view(c, idx[x], osh.ndim, osh.dims);
    }
    ot__emit_roots(g, roots, n, -1, true, NULL);
    int vals[1 + OT_MAX_XSTORES];
    for (int x = 0; x < n && !c->oom; x++) {
        const ot_view *view = x ? &k->xstores[x - 1].view : &k->store;
        vals[x] = own_value(g, g->val[roots[x]], view, vals, x);
        if (vals[x] < 0) return false;
        if (x) g->xval[x - 1] = vals[x];
    }
    bool in_place[1 + OT_MAX_XSTORES];
    for (int x = 0; x < n && !c->oom; x++)
        in_place[x] = store_in_place(g, vals[x], x ? &k->xstores[x - 1].view : &k->store);
    if (c->oom || !ot__emit_finish_program(g, vals[0])) return false;
    mark_layout(k);
    k->direct_store = k->direct_store && in_place[0];
    for (int x = 1; x < n; x++) k->xstores[x - 1].direct = k->xstores[x - 1].direct && in_place[x];
    *split = !loads_walk_outputs(c, k);
    if (*split) drop_last_kernel(c);
    return true;
}

/* Cuts the groupable outputs into groups of one shape (at most
 * 1 + OT_MAX_XSTORES each); lead[i] is output i's group leader, or -1. */
static void choose_groups(compiler *c, int *lead)
{
    for (int i = 0; i < c->nout; i++) {
        lead[i] = -1;
        if (!groupable(c, i)) continue;
        ot_shape si = out_shape(c, i);
        for (int j = 0; j < i && lead[i] < 0; j++) {
            if (lead[j] != j) continue;
            ot_shape sj = out_shape(c, j);
            int members = 0;
            for (int m = 0; m < i; m++) members += lead[m] == j;
            if (ot__shape_eq(&si, &sj) && members <= OT_MAX_XSTORES) lead[i] = j;
        }
        if (lead[i] < 0) lead[i] = i;
    }
    check_inplace_groups(c, lead);
}

static bool copy_out(compiler *c, prog *g, int i, int temp)
{
    ot_shape osh = out_shape(c, i);
    ot_view dst = output_view(c, i, osh.ndim, osh.dims);
    storage src = {.has = true, .space = OT_SPACE_TEMP, .index = temp, .dtype = dst.dtype,
                   .shape = osh};
    contiguous(&src);
    ot_kernel *k = new_kernel(c, OT_KER_EW);
    if (!k || !(k->loads = ot__malloc(sizeof *k->loads))) return false;
    ot__emit_reset_prog(g, k);
    set_space(k, osh.dims, osh.ndim);
    k->nload = 1;
    k->loads[0] = ot__emit_view_of(&src, osh.ndim, osh.dims);
    k->store = dst;
    if (!ot__emit_coalesce(k, NULL)) return false;
    int v = ot__emit_store_value(g, ot__emit_load(g, 0));
    if (!ot__emit_finish_program(g, v)) return false;
    mark_layout(k);
    return true;
}

/* ---- the pass ------------------------------------------------------------- */

/* A kernel for every stored entry that no reduction absorbs. */
static bool entry_kernels(compiler *c, prog *g)
{
    bool ok = true;
    for (int i = 0; i < c->w->n && ok; i++) {
        acc_step s;
        if (c->ci[i].canon != i || !c->ci[i].mat || !is_op(c, i) ||
            absorbing_reduce(c, i, NULL) >= 0)
            continue;
        if (kind_of(c, i) == OT_KIND_SHAPE) ok = reshape_copy(c, g, i);   /* the only stored view */
        else if (c->w->e[i].op == OT_OP_CONCAT) ok = concat_kernels(c, g, i);
        else if (c->ci[i].over_out.dot > 0) {
            const gemm_root *o = &c->ci[i].over_out;
            ok = dot_kernel(c, o->dot, &c->ci[i].st, o->alpha, o->beta);
        } else ok = accumulates(c, i, &s) ? dot_kernel(c, s.dot, &c->ci[i].st, s.alpha, s.beta)
                                          : entry_kernel(c, g, i, &c->ci[i].st);
    }
    return ok;
}

/* The outputs that output i leads (choose_groups) in one group kernel, or
 * each in its own where the group splits. */
static bool group_kernels(compiler *c, prog *g, const int *lead, int i, int *via)
{
    int idx[1 + OT_MAX_XSTORES] = {0}, n = 0;
    for (int j = i; j < c->nout; j++)
        if (lead[j] == i) idx[n++] = j;
    bool split = false;
    bool ok = group_kernel(c, g, idx, n, &split);
    for (int m = 0; m < n && ok && split; m++)
        ok = root_kernel(c, g, idx[m], c->ci[c->w->root[idx[m]]].canon, &via[idx[m]]);
    return ok;
}

/* The kernels that write the outputs, then the copies of those that a
 * root kernel left in another entry's storage (via[i], -1 for none). */
static bool output_kernels(compiler *c, prog *g, const int *lead, int *via)
{
    bool ok = true;
    for (int i = 0; i < c->nout; i++) via[i] = -1;
    for (int i = 0; i < c->nout && ok; i++) {
        if (lead[i] < 0) ok = root_kernel(c, g, i, c->ci[c->w->root[i]].canon, &via[i]);
        else if (lead[i] == i) ok = group_kernels(c, g, lead, i, via);
    }
    for (int i = 0; i < c->nout && ok; i++)
        if (via[i] >= 0) ok = copy_out(c, g, i, via[i]);
    return ok;
}

bool ot__build_kernels(compiler *c)
{
    prog g = {.c = c};
    int n = c->w->n;
    g.val = ot__malloc(sizeof(int) * (size_t)n);
    g.stamp = ot__calloc((size_t)n, sizeof(int));
    g.fused = ot__calloc((size_t)n, sizeof(int));
    int *via = ot__malloc(sizeof(int) * (size_t)c->nout);
    int *lead = ot__malloc(sizeof(int) * (size_t)c->nout);
    bool ok = g.val && g.stamp && g.fused && via && lead;
    if (ok) {
        fold_dot_sums(c);
        choose_groups(c, lead);
        ok = kernels_at(c);   /* after fold_dot_sums, which moves what is stored */
    }
    ok = ok && !c->oom && entry_kernels(c, &g) && output_kernels(c, &g, lead, via);
    for (int i = 0; i < c->plan->nkernels && ok; i++) {
        ot_kernel *k = &c->plan->kernels[i];
        ot__plan_count_work(c->plan, k);
        k->desc = ot__plan_describe(k);
    }
    free(g.val);
    free(g.stamp);
    free(g.fused);
    free(g.v);
    free(g.ins);
    free(g.region);
    free(g.dfs);
    free(via);
    free(lead);
    free(c->kernel_at);
    c->kernel_at = NULL;
    return ok && !c->oom;
}

ot_kernel *ot__build_new_kernel(compiler *c, int kind) { return new_kernel(c, kind); }

bool ot__build_ew_kernel(compiler *c, prog *g, int root, bool computed, const ot_shape *space,
                         ot_view store)
{
    return ew_kernel(c, g, root, computed, space, store);
}

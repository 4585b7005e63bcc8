/*
 * half_assign.c - assignments that involve the 16-bit storage dtypes
 * (OT_F16, OT_BF16) on the cpu backend, by conversion around an f32
 * assignment: every f16/bf16 leaf is widened (exactly) into an f32
 * temporary, the trees are rebuilt over those in f32, each output of a
 * 16-bit dtype is computed into an f32 temporary and narrowed (round to
 * nearest even) when every tree has run. Arithmetic is then the f32
 * kernels' own, as the issue asks (loads widen, the kernel runs as for
 * f32, stores narrow), and every op, fused or structured, runs unchanged.
 *
 * What must round inside a tree is rounded here: a cast to f16/bf16 of a
 * computed value is evaluated into an f32 temporary and rounded there (a
 * 16-bit value is exact in f32), and a constant of a 16-bit dtype holds a
 * rounded value already. The planner never sees a 16-bit dtype.
 */
#include "cpu.h"

/* Blocks of a blocked run: small enough that a block's widened leaves and
 * result stay in L2, large enough that a call's fixed cost is small. */
enum { HALF_BLOCK = 16384, HALF_MAX_LEAVES = 8 };

typedef struct half_run {
    ot_backend *be;
    ot__half_eval eval;       /* the plain f32 assignment */
    int64_t block;            /* > 0: leaves become f32 buffers of this many
                                 elements, refilled per block (run_blocked) */
    ot_tensor *src[HALF_MAX_LEAVES], *buf[HALF_MAX_LEAVES];
    int nleaves;
    ot_node **out;            /* the f32 node of each visited node, by index */
    size_t cap;
    ot_tensor **temps;        /* tensors this run made, freed at its end */
    int ntemps, tcap;
} half_run;

static bool half_dt(int dt) { return dt == OT_F16 || dt == OT_BF16; }

static ot_tensor *temp_new(half_run *h, const ot_shape *shape)
{
    if (h->ntemps == h->tcap) {
        int cap = h->tcap ? 2 * h->tcap : 8;
        ot_tensor **t = realloc(h->temps, sizeof *t * (size_t)cap);
        if (!t) return NULL;
        h->temps = t;
        h->tcap = cap;
    }
    ot_tensor *t = ot_empty(h->be, *shape, OT_F32);
    if (t) h->temps[h->ntemps++] = t;
    return t;
}

static float *temp_data(ot_tensor *t)
{
    return (float *)t->buf->data + t->offset;
}

/* Rounds n f32 values to dt's and back, in place. */
static void round_through(int dt, float *x, size_t n)
{
    uint16_t h[1024];
    for (size_t i = 0; i < n; i += 1024) {
        size_t k = n - i < 1024 ? n - i : 1024;
        ot__half_narrow(dt, x + i, h, k);
        ot__half_widen(dt, h, x + i, k);
    }
}

/* The f32 stand-in of a leaf: the tensor itself, or its widened copy. */
static ot_node *leaf_f32(half_run *h, const ot_node *n)
{
    ot_tensor *t = ot__leaf_tensor(n);
    if (h->block) {   /* a buffer of one block, filled per block */
        ot_shape s = OT_SHAPE(h->block);
        ot_tensor *b = h->nleaves < HALF_MAX_LEAVES ? temp_new(h, &s) : NULL;
        if (!b) return NULL;
        h->src[h->nleaves] = t;
        h->buf[h->nleaves++] = b;
        return &b->leaf;
    }
    if (!half_dt(n->dtype)) return (ot_node *)n;
    ot_tensor *w = temp_new(h, &n->shape);
    if (!w || ot_get(t, temp_data(w))) return NULL;
    w->leaf.axes = t->leaf.axes;
    return &w->leaf;
}

/* x (an f32 tree) evaluated and rounded to dt: the value a cast to dt has. */
static ot_node *rounded(half_run *h, ot_node *x, int dt)
{
    ot_tensor *t = temp_new(h, &x->shape);
    if (!t || h->eval(h->be, 1, &t, &x)) return NULL;
    round_through(dt, temp_data(t), (size_t)ot__numel(&x->shape));
    t->leaf.axes = x->axes;
    return &t->leaf;
}

/* An op over its f32 operands: n itself when nothing under it changed and
 * it is no 16-bit node, else rebuilt (a composite as its composite) with a
 * 16-bit dtype attribute made f32, and rounded where n is a cast. */
static ot_node *op_f32(half_run *h, ot__walker *w, const ot_node *n, ot_node *a, ot_node *b)
{
    if (a == ot__walker_operand(w, n, 0) && b == ot__walker_operand(w, n, 1) &&
        !half_dt(n->dtype))
        return (ot_node *)n;
    ot_args args = n->args;
    if (half_dt(args.dtype)) args.dtype = OT_F32;
    ot_op op = (ot_op)(n->tag != OT_OP_NONE ? n->tag : ot__node_op(n));
    ot_node *r = ot_build_at(op, a, b, &args, n->file, n->line);
    bool cast = n->tag == OT_OP_NONE && n->op == OT_OP_CAST;
    if (r && cast && half_dt(n->dtype))
        r = rounded(h, r, n->dtype);
    return r;
}

static int visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    half_run *h = w->ctx;
    ot_node *r;
    if (n->kind == OT_NODE_LEAF)
        r = leaf_f32(h, n);
    else if (n->kind == OT_NODE_CONST)
        r = half_dt(n->dtype) ? ot_constf((float)n->value) : (ot_node *)n;
    else
        r = op_f32(h, w, n, operand[0] >= 0 ? h->out[operand[0]] : NULL,
                   operand[1] >= 0 ? h->out[operand[1]] : NULL);
    if (!r) return OT_EINVAL;   /* the failing call has said why */
    if ((size_t)index >= h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        ot_node **o = realloc(h->out, sizeof *o * cap);
        if (!o) return OT_ENOMEM;
        h->out = o;
        h->cap = cap;
    }
    h->out[index] = r;
    return 0;
}

/* Stops the walk at the first node of a 16-bit dtype. */
static int enter_half(ot__walker *w, const ot_node *n)
{
    (void)w;
    return half_dt(n->dtype) ? OT_EDTYPE : 1;
}

static int visit_none(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)w, (void)n, (void)index, (void)operand;
    return 0;
}

bool ot__half_involved(int n, ot_tensor *const outs[], ot_node *const trees[])
{
    if (!ot__half_seen()) return false;
    bool found = false;
    for (int i = 0; outs && i < n && !found; i++) found = half_dt(outs[i]->leaf.dtype);
    ot__walker w = {.composites = true, .visit = visit_none, .enter = enter_half};
    for (int i = 0; i < n && !found; i++) found = ot__walker_run(&w, trees[i]) == OT_EDTYPE;
    ot__walker_free(&w);
    return found;
}

/* ---- blocked runs --------------------------------------------------------- */

/* Whether n fits a blocked run of a tree into out: elementwise ops of out's
 * shape (no cast, which would round inside), constants, and contiguous
 * f16/bf16 leaves of out's shape that are out itself or apart from it (a
 * block of out is written before later blocks of the leaves are read). */
static int enter_blockable(ot__walker *w, const ot_node *n)
{
    const ot_tensor *out = w->ctx;
    if (n->kind == OT_NODE_CONST) return 1;
    if (!ot__shape_eq(&n->shape, &out->leaf.shape) || n->axes) return OT_EINVAL;
    if (n->kind == OT_NODE_LEAF) {   /* out may be a leaf, not a shifted one */
        const ot_tensor *t = ot__leaf_tensor(n);
        bool apart = ot__same_view(t, out) || ot__overlap(t, out) == OT_OVERLAP_NONE;
        return half_dt(n->dtype) && ot_tensor_is_contiguous(t) && apart ? 1 : OT_EINVAL;
    }
    int kind = ot__kind_of((ot_op)n->op);
    bool elementwise = (kind == OT_KIND_UNARY || kind == OT_KIND_BINARY) && !n->custom;
    return elementwise && n->tag == OT_OP_NONE && n->op != OT_OP_CAST ? 1 : OT_EINVAL;
}

static bool blockable(ot_tensor *out, ot_node *tree)
{
    if (!half_dt(out->leaf.dtype) || !ot_tensor_is_contiguous(out) ||
        ot__numel(&out->leaf.shape) < 4 * HALF_BLOCK)
        return false;
    ot__walker w = {.visit = visit_none, .enter = enter_blockable, .ctx = out};
    bool ok = ot__walker_run(&w, tree) >= 0 && w.count <= 64;
    ot__walker_free(&w);
    return ok;
}

static const uint16_t *half_at(const ot_tensor *t, int64_t i)
{
    return (const uint16_t *)t->buf->data + t->offset + i;
}

/* The f32 tree over one block's buffers of len elements. */
static ot_node *block_tree(half_run *h, ot_node *tree, int64_t len, ot_tensor **o)
{
    h->block = len;
    h->nleaves = 0;
    ot__walker w = {.composites = true, .visit = visit, .ctx = h};
    int v = ot__walker_run(&w, tree);
    ot_node *r = v >= 0 ? h->out[v] : NULL;
    ot__walker_free(&w);
    ot_shape s = OT_SHAPE(len);
    *o = r ? temp_new(h, &s) : NULL;
    return *o ? r : NULL;
}

/* An elementwise tree of 16-bit leaves into a 16-bit out, a block at a
 * time: each block's leaves widened into f32 buffers that stay in cache,
 * the f32 tree run on them, the result narrowed into out. Memory sees the
 * 16-bit values once each way, as a native kernel's would. */
static int run_blocked(half_run *h, ot_tensor *out, ot_node *tree)
{
    int64_t n = ot__numel(&out->leaf.shape), tail = n % HALF_BLOCK;
    ot_tensor *o = NULL;
    ot_node *t = block_tree(h, tree, HALF_BLOCK, &o);
    int rc = t ? 0 : ot_errcode() ? ot_errcode() : OT_ENOMEM;
    uint16_t *dst = (uint16_t *)out->buf->data + out->offset;
    for (int64_t at = 0; !rc && at < n; at += HALF_BLOCK) {
        if (at + HALF_BLOCK > n) {   /* the last, shorter block: its own tree */
            t = block_tree(h, tree, tail, &o);
            if (!t) return ot_errcode() ? ot_errcode() : OT_ENOMEM;
        }
        size_t len = (size_t)(at + HALF_BLOCK > n ? tail : HALF_BLOCK);
        for (int i = 0; i < h->nleaves; i++)
            ot__half_widen(h->src[i]->leaf.dtype, half_at(h->src[i], at), temp_data(h->buf[i]), len);
        rc = h->eval(h->be, 1, &o, &t);
        if (!rc) ot__half_narrow(out->leaf.dtype, temp_data(o), dst + at, len);
    }
    return rc;
}

/* Output k's f32 values (contiguous, row-major) stored into out: rounded
 * to nearest, or stochastically when the assignment asks for it (output
 * k's stream, element i the bits of index i, on this thread alone, so the
 * bits never depend on the thread count). */
static int store_out(ot_tensor *out, int k, const float *x)
{
    uint64_t key;
    if (!ot__half_sr_get(&key)) return ot_set(out, x);
    size_t n = (size_t)ot__numel(&out->leaf.shape);
    uint16_t *h = malloc(sizeof *h * (n ? n : 1));
    if (!h) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    ot__half_narrow_sr(out->leaf.dtype, x, h, n, ot__sr_key(key, (uint64_t)k), 0);
    int rc = ot_set_raw(out, h);
    free(h);
    return rc;
}

/* The f32 trees and outputs, then the assignment, then the narrowing. */
static int run_f32(half_run *h, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    ot_node **t32 = calloc((size_t)n, sizeof *t32);
    ot_tensor **o32 = calloc((size_t)n, sizeof *o32);
    int rc = t32 && o32 ? 0 : ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    ot__walker w = {.composites = true, .visit = visit, .ctx = h};
    for (int i = 0; i < n && !rc; i++) {
        int v = ot__walker_run(&w, trees[i]);
        if (v < 0) rc = v == OT_ENOMEM ? ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory")
                                       : ot_errcode();
        else t32[i] = h->out[v];
        o32[i] = rc || !half_dt(outs[i]->leaf.dtype) ? outs[i] : temp_new(h, &outs[i]->leaf.shape);
        if (!o32[i]) rc = ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    }
    ot__walker_free(&w);
    if (!rc) rc = h->eval(h->be, n, o32, t32);
    for (int i = 0; i < n && !rc; i++)
        if (o32[i] != outs[i]) rc = store_out(outs[i], i, temp_data(o32[i]));
    free(t32);
    free(o32);
    return rc;
}

int ot__half_assign(ot_backend *be, ot__half_eval eval, int n, ot_tensor *const outs[],
                    ot_node *const trees[])
{
    half_run h = {.be = be, .eval = eval};
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    uint64_t key;
    bool sr = ot__half_sr_get(&key);   /* stochastic stores take the plain path */
    int rc = n == 1 && !sr && blockable(outs[0], trees[0]) ? run_blocked(&h, outs[0], trees[0])
                                                             : run_f32(&h, n, outs, trees);
    ot_pool_pop(pool);
    for (int i = 0; i < h.ntemps; i++) ot_tensor_free(h.temps[i]);
    free(h.temps);
    free(h.out);
    return rc;
}

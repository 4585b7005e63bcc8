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
 *
 * One case runs natively: an elementwise tree of contiguous 16-bit leaves
 * into a contiguous 16-bit output (W1h's a*b + c) is planned in f32 over
 * block buffers, and its one kernel becomes 16-bit code (jit/jit_half.c)
 * that widens as it loads and narrows as it stores, over the whole
 * tensors; the plan keeps that code (ot_half_code) for the next call.
 */
#include "cpu.h"
#include "threads.h"

/* Blocks of a blocked run: small enough that a block's widened leaves and
 * result stay in L2, large enough that a call's fixed cost is small.
 * FAST_BLOCK: a block of the threaded run (run_fast), whose plan call
 * costs little, so that a block's buffers stay in L1 (1024 ran W1h
 * faster than 4096, loaded). FAST_PIECE: the leaves are widened in turn a
 * piece at a time, so that their streams advance together (one leaf's
 * whole block at a time read W1h's inputs at about half the rate: the
 * prefetchers restart on each short run). */
enum { HALF_BLOCK = 16384, FAST_BLOCK = 1024, HALF_MAX_LEAVES = 8, FAST_MAX_SLOTS = 64 };
#define FAST_PIECE ((size_t)256)

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

static ot_tensor *temp_new_dt(half_run *h, const ot_shape *shape, ot_dtype dt)
{
    if (h->ntemps == h->tcap) {
        int cap = h->tcap ? 2 * h->tcap : 8;
        ot_tensor **t = realloc(h->temps, sizeof *t * (size_t)cap);
        if (!t) return NULL;
        h->temps = t;
        h->tcap = cap;
    }
    ot_tensor *t = (ot_empty)(h->be, *shape, dt);
    if (t) h->temps[h->ntemps++] = t;
    return t;
}

static ot_tensor *temp_new(half_run *h, const ot_shape *shape)
{
    return temp_new_dt(h, shape, OT_F32);
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
    if (!ot__is_half(n->dtype)) return (ot_node *)n;
    ot_tensor *w = temp_new(h, &n->shape);
    if (!w || (ot_get)(t, temp_data(w))) return NULL;
    w->leaf.axes = t->leaf.axes;
    return &w->leaf;
}

/* Whether a value of dtype dt rounds on its way to f32 (f64, or i32 past
 * 2^24): such a value is kept in f64, which holds an i32 exactly, until
 * its one rounding to 16 bits (through f32 it would round twice: i32
 * 16842753 to f32's 16842752, a tie, then to bf16's 16777216, where once
 * gives 16908288). */
static bool rounds_in_f32(int dt)
{
    return dt == OT_F64 || dt == OT_I32;
}

/* An f64 temporary d as an f32 one rounded to odd (ot__f32_odd): the
 * later rounding to 16 bits rounds each double once, as docs/half.md
 * says. NULL when out of memory. */
static ot_tensor *f32_odd_of(half_run *h, const ot_tensor *d)
{
    ot_tensor *t = temp_new(h, &d->leaf.shape);
    if (!t) return NULL;
    const double *x = (const double *)d->buf->data + d->offset;
    float *y = temp_data(t);
    for (int64_t i = 0; i < ot__numel(&d->leaf.shape); i++) y[i] = ot__f32_odd(x[i]);
    return t;
}

/* x (an f32 tree, or f64 or i32: then in f64, through f32 rounded to odd)
 * evaluated and rounded to dt: the value a cast to dt has. */
static ot_node *rounded(half_run *h, ot_node *x, int dt)
{
    bool wide = rounds_in_f32(x->dtype);
    ot_tensor *t = temp_new_dt(h, &x->shape, wide ? OT_F64 : OT_F32);
    if (!t || h->eval(h->be, 1, &t, &x)) return NULL;
    if (wide && !(t = f32_odd_of(h, t))) return NULL;
    round_through(dt, temp_data(t), (size_t)ot__numel(&x->shape));
    t->leaf.axes = x->axes;
    return &t->leaf;
}

/* An op over its f32 operands: n itself when nothing under it changed and
 * it is no 16-bit node, else rebuilt with a 16-bit dtype attribute made
 * f32, and rounded where n is a cast. The walks go through a composite's
 * expansion, not its tag: the 16-bit expansion casts its weak constants to
 * the 16-bit dtype (which rounds them), and a composite rebuilt in f32 cast
 * them to f32 (cross_entropy(2.0, t) of bf16 t: log 2 as 0.6931 where ref
 * has 0.6914; fuzz seed 5151 tree 5990). */
static ot_node *op_f32(half_run *h, ot__walker *w, const ot_node *n, ot_node *a, ot_node *b)
{
    if (a == ot__walker_operand(w, n, 0) && b == ot__walker_operand(w, n, 1) &&
        !ot__is_half(n->dtype))
        return (ot_node *)n;
    ot_args args = n->args;
    if (ot__is_half(args.dtype)) args.dtype = OT_F32;
    ot_op op = (ot_op)ot__node_op(n);
    bool cast = n->op == OT_OP_CAST;
    /* a cast that has become f32 to f32 is its operand (the planner would
     * copy it: an epilogue of a 400,000-element copy in W10h's step) */
    ot_node *r = cast && a && a->dtype == args.dtype && !a->axes == !n->axes
                     ? a
                     : ot_build_at(op, a, b, &args, n->file, n->line);
    if (r && cast && ot__is_half(n->dtype))
        r = rounded(h, a && rounds_in_f32(a->dtype) ? a : r, n->dtype);
    return r;
}

static int visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    half_run *h = w->ctx;
    ot_node *r;
    if (n->kind == OT_NODE_LEAF)
        r = leaf_f32(h, n);
    else if (n->kind == OT_NODE_CONST)
        r = ot__is_half(n->dtype) ? ot_constf((float)n->value) : (ot_node *)n;
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
    return ot__is_half(n->dtype) ? OT_EDTYPE : 1;
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
    for (int i = 0; outs && i < n && !found; i++) found = ot__is_half(outs[i]->leaf.dtype);
    ot__walker w = {.composites = true, .visit = visit_none, .enter = enter_half};
    for (int i = 0; i < n && !found; i++) found = ot__walker_run(&w, trees[i]) == OT_EDTYPE;
    ot__walker_free(&w);
    return found;
}

/* ---- blocked runs --------------------------------------------------------- */

/* What a walk for blocked runs sees: the output, and the leaves' dtypes. */
typedef struct block_scan {
    const ot_tensor *out;
    bool f32, half;                /* an f32 leaf, a 16-bit leaf */
} block_scan;

/* Whether n fits a blocked run of a tree into out: elementwise ops of out's
 * shape (no cast, which would round inside), constants, and contiguous
 * f16/bf16 or f32 leaves of out's shape that are out itself or apart from
 * it (a block of out is written before later blocks of the leaves are
 * read). */
static int enter_blockable(ot__walker *w, const ot_node *n)
{
    block_scan *b = w->ctx;
    if (n->kind == OT_NODE_CONST) return 1;
    if (!ot__shape_eq(&n->shape, &b->out->leaf.shape) || n->axes) return OT_EINVAL;
    if (n->kind == OT_NODE_LEAF) {   /* out may be a leaf, not a shifted one */
        const ot_tensor *t = ot__leaf_tensor(n);
        bool apart = ot__same_view(t, b->out) || ot__overlap(t, b->out) == OT_OVERLAP_NONE;
        b->f32 |= n->dtype == OT_F32;
        b->half |= ot__is_half(n->dtype);
        bool fits = ot__is_half(n->dtype) || n->dtype == OT_F32;
        return fits && ot_tensor_is_contiguous(t) && apart ? 1 : OT_EINVAL;
    }
    int kind = ot__kind_of((ot_op)n->op);
    bool elementwise = (kind == OT_KIND_UNARY || kind == OT_KIND_BINARY) && !n->custom;
    return elementwise && n->tag == OT_OP_NONE && n->op != OT_OP_CAST ? 1 : OT_EINVAL;
}

/* How tree into out may run by blocks: 0 not; 1 16-bit leaves into a
 * 16-bit out (every way: 16-bit code or widened blocks); 2 with f32 leaves
 * or an f32 out too (16-bit code alone). *root: the tree that runs, a cast
 * to out's dtype at the root left out, as the store rounds (or, to f32,
 * keeps) the same. */
static int blockable(ot_tensor *out, ot_node *tree, ot_node **root)
{
    int dt = out->leaf.dtype;
    if ((!ot__is_half(dt) && dt != OT_F32) || !ot_tensor_is_contiguous(out)) return 0;
    if (tree->kind == OT_NODE_OP && tree->op == OT_OP_CAST && tree->tag == OT_OP_NONE &&
        tree->dtype == dt && !tree->custom)
        tree = tree->a;
    block_scan b = {.out = out};
    ot__walker w = {.visit = visit_none, .enter = enter_blockable, .ctx = &b};
    bool ok = ot__walker_run(&w, tree) >= 0 && w.count <= 64 && (b.half || ot__is_half(dt));
    ot__walker_free(&w);
    *root = tree;
    return !ok ? 0 : b.f32 || dt == OT_F32 ? 2 : 1;
}

/* Elements [i, i + n) of contiguous leaf t (f16, bf16 or f32) as f32. */
static void widen_at(const ot_tensor *t, int64_t i, float *dst, size_t n)
{
    const char *p = (const char *)t->buf->data + (t->offset + i) * (int64_t)ot_dtype_size(t->leaf.dtype);
    if (t->leaf.dtype == OT_F32) memcpy(dst, p, n * sizeof *dst);
    else ot__half_widen(t->leaf.dtype, (const uint16_t *)p, dst, n);
}

/* The f32 tree over one block's buffers of len elements. */
static ot_node *block_tree(half_run *h, ot_node *tree, int64_t len, ot_tensor **o)
{
    h->block = len;
    h->nleaves = 0;
    ot__walker w = {.visit = visit, .ctx = h};
    int v = ot__walker_run(&w, tree);
    ot_node *r = v >= 0 ? h->out[v] : NULL;
    ot__walker_free(&w);
    ot_shape s = OT_SHAPE(len);
    *o = r ? temp_new(h, &s) : NULL;
    return *o ? r : NULL;
}

/* The narrowing of a 16-bit output: f32 results src of elements
 * [at, at + n) of the output rounded into dst + at, with streaming stores
 * when asked (outputs larger than the caches). */
static void narrow_out(int dt, const float *src, uint16_t *dst, int64_t at, size_t n, bool stream)
{
    if (stream) ot__half_narrow_stream(dt, src, dst + at, n);
    else ot__half_narrow(dt, src, dst + at, n);
}

/* ---- threaded blocks over one plan ----------------------------------------- */

/* One thread slot's part of run_fast: its f32 buffers of one block (by
 * h->src index) and the binding that points the plan at them. */
typedef struct fast_slot {
    float *buf[HALF_MAX_LEAVES];
    char *leaf[HALF_MAX_LEAVES];
    ot_tensor *out;
    ot_binding bind;
    char *arena;                   /* the plan's temporaries and scratch */
} fast_slot;

typedef struct fast_run {
    ot_backend *be;
    const ot_plan *plan;
    const half_run *h;
    int dt;
    uint16_t *dst;
    int64_t n;
    bool stream;
    fast_slot slot[FAST_MAX_SLOTS];
} fast_run;

/* Blocks [first, last) on slot `slot`: the leaves' block widened into the
 * slot's buffers, FAST_PIECE elements of each in turn (a short last block
 * padded with zeros, whose results are not stored), one run of the plan,
 * the result narrowed into out. Each element's value depends on its own
 * inputs alone, so the bits do not depend on which thread ran which
 * block. */
static void fast_chunk(void *ctx, int slot, int64_t first, int64_t last)
{
    const fast_run *f = ctx;
    const fast_slot *s = &f->slot[slot];
    for (int64_t b = first; b < last; b++) {
        int64_t at = b * FAST_BLOCK;
        size_t len = (size_t)(f->n - at < FAST_BLOCK ? f->n - at : FAST_BLOCK);
        for (size_t j = 0; j < len; j += FAST_PIECE) {
            size_t k = len - j < FAST_PIECE ? len - j : FAST_PIECE;
            for (int i = 0; i < f->h->nleaves; i++) {
                widen_at(f->h->src[i], at + (int64_t)j, s->buf[i] + j, k);
            }
        }
        for (int i = 0; i < f->h->nleaves && len < FAST_BLOCK; i++)
            memset(s->buf[i] + len, 0, sizeof(float) * (FAST_BLOCK - len));
        if (f->plan->direct) ot__plan_run_direct(f->be, f->plan, &s->bind);
        else ot__plan_run_at(f->be, f->plan, &s->bind, s->arena);
        narrow_out(f->dt, temp_data(s->out), f->dst, at, len, f->stream);
    }
}

/* Points slot i's binding at its buffers: bind's leaves are slot 0's
 * buffers in the plan's order. False if one is not a buffer. */
static bool fast_bind(fast_run *f, half_run *h, const ot_binding *bind, int i)
{
    fast_slot *s = &f->slot[i];
    for (int j = 0; j < h->nleaves; j++) {
        ot_shape sh = OT_SHAPE(FAST_BLOCK);
        ot_tensor *t = i ? temp_new(h, &sh) : h->buf[j];
        if (!t) return false;
        s->buf[j] = temp_data(t);
    }
    for (int e = 0; e < f->plan->nleaves; e++) {
        int j = 0;
        while (j < h->nleaves && bind->leaf[e] != (char *)temp_data(h->buf[j])) j++;
        if (j == h->nleaves) return false;
        s->leaf[e] = (char *)s->buf[j];
    }
    s->bind = (ot_binding){s->leaf, bind->param, &s->out, true};
    return true;
}

/* Slots [0, nslots) of f made ready over the plan of o = t (slot 0's
 * buffers): their buffers, outputs, bindings and arenas. */
static int fast_slots(fast_run *f, half_run *h, int nslots, ot_tensor *o, const ot_binding *bind)
{
    size_t bytes = 0;
    if (!ot__plan_run_bytes(h->be, f->plan, &bytes)) return -1;
    for (int i = 0; i < nslots; i++) {
        fast_slot *s = &f->slot[i];
        s->out = i ? temp_new(h, &o->leaf.shape) : o;
        if (!s->out || !fast_bind(f, h, bind, i)) return -1;
        if (bytes && !(s->arena = ot__data_alloc(bytes))) return -1;
    }
    return 0;
}

/* The tree as FAST_BLOCK blocks, each run by the plan of one block (one
 * call of generated code where the plan is direct, else the executor in
 * the slot's own arena), the blocks shared among the backend's threads
 * (a run inside one keeps to its thread: the pool is held), each thread
 * with its own buffers, which stay in L1/L2. */
static int run_fast(half_run *h, ot_tensor *out, ot_node *tree)
{
    ot_cpu *cpu = h->be->impl;
    int nslots = ot__threads_workers(cpu->threads) + 1;
    fast_run *f = nslots <= FAST_MAX_SLOTS ? calloc(1, sizeof *f) : NULL;
    ot_tensor *o = NULL;
    ot_node *t = f ? block_tree(h, tree, FAST_BLOCK, &o) : NULL;
    ot_plan *plan = NULL;
    ot_walk *walk = NULL;
    ot_binding bind = {0};
    int rc = t ? ot__plan_get(h->be, 1, &o, &t, &plan, &walk, &bind) : -1;
    if (!rc && plan->nleaves <= HALF_MAX_LEAVES) {
        int64_t n = ot__numel(&out->leaf.shape), nblocks = (n + FAST_BLOCK - 1) / FAST_BLOCK;
        size_t moved = (size_t)n * 2 * (size_t)(h->nleaves + 1);   /* as f32 outputs stream */
        bool stream = cpu->stream_bytes && moved >= cpu->stream_bytes;
        *f = (fast_run){.be = h->be, .plan = plan, .h = h, .dt = out->leaf.dtype, .n = n,
                        .dst = (uint16_t *)out->buf->data + out->offset, .stream = stream};
        rc = fast_slots(f, h, nslots, o, &bind);
        int64_t cost = plan->kernels[0].run_cost + 2 * (h->nleaves + 1);   /* with conversions */
        if (!rc) ot__parallel(cpu->threads, 0, nblocks, n * cost, fast_chunk, f);
    } else if (!rc) {
        rc = 1;
    }
    for (int i = 0; f && i < nslots; i++) free(f->slot[i].arena);
    if (walk) ot__walk_done(h->be, walk);
    if (plan && !bind.borrowed) ot__plan_release(plan);
    free(f);
    return rc < 0 ? (ot_errcode() ? ot_errcode() : OT_ENOMEM) : rc;
}

/* ---- one kernel of 16-bit code ---------------------------------------------- */

/* The plan's one kernel as 16-bit code (ot__jit_build_half) over the whole
 * tensors: in[i], each vector load's source (16-bit or f32) or a
 * parameter's f32 value, dst the output, n elements; lanes per vector; the
 * code that runs is code->jit. */
typedef struct native_run {
    char *in[OT_JIT_MAX_INSN];
    float param[OT_JIT_MAX_INSN];
    uint8_t es[OT_JIT_MAX_INSN];  /* > 0: in[i] is a vector source of es bytes an
                                     element (2, or 4 for f32), advanced per chunk */
    int ninsn;
    char *dst;
    int out_es;                   /* the output's bytes an element */
    int64_t n, lanes;
    int64_t cost;                 /* per element, in adds, for ot__parallel */
    bool stream;
    ot_plan *plan;                /* the f32 plan of a block, whose code runs */
    ot_walk *walk;
    ot_binding bind;
    ot_half_code *code;
    bool own;                     /* code is the run's to free (the plan kept none) */
} native_run;

/* Elements a chunk of the threaded run holds (a multiple of every lane
 * count): enough that a call's fixed cost vanishes, few enough that two
 * threads share a 2^20-element tensor evenly. */
#define NATIVE_CHUNK ((int64_t)16384)
/* The block the kernel is planned over (its code serves any length): a
 * multiple of every lane count, small, so that its buffers cost little. */
#define NATIVE_BLOCK 64

/* Chunks [first, last) of the whole vectors, one call of the code. */
static void native_chunk(void *ctx, int slot, int64_t first, int64_t last)
{
    (void)slot;
    const native_run *f = ctx;
    int64_t whole = f->n - f->n % f->lanes, at = first * NATIVE_CHUNK;
    int64_t end = last * NATIVE_CHUNK < whole ? last * NATIVE_CHUNK : whole;
    char *in[OT_JIT_MAX_INSN], *out[1] = {f->dst + f->out_es * at};
    for (int i = 0; i < f->ninsn; i++) in[i] = f->in[i] + f->es[i] * at;
    if (end <= at) return;
    (f->stream ? f->code->jit->fn_stream : f->code->jit->fn)(in, out, (size_t)(end - at) * 2);
#if defined(__x86_64__)
    if (f->stream) __asm__ volatile("sfence" ::: "memory");   /* the code fences nothing */
#endif
}

/* The last n % lanes elements: one vector over zero-padded copies, by
 * fn_tail, which zeroes the dead lanes after each op as the f32 kernels
 * pad every op's tail, so every lane's bits agree (fn let recip(0) = inf
 * into a called sin, whose argument reduction then took the whole
 * vector's other path: 1 ulp apart from the conversion route's bits;
 * fuzz seed 3579 tree 6167). */
static void native_tail(const native_run *f)
{
    int64_t rest = f->n % f->lanes, at = f->n - rest;
    _Alignas(64) float pad[OT_JIT_MAX_INSN + 1][16];
    char *in[OT_JIT_MAX_INSN], *out[1] = {(char *)pad[OT_JIT_MAX_INSN]};
    if (!rest) return;
    for (int i = 0; i < f->ninsn; i++) {
        in[i] = f->in[i];
        if (!f->es[i]) continue;
        memset(pad[i], 0, sizeof pad[i]);
        memcpy(pad[i], f->in[i] + f->es[i] * at, (size_t)(rest * f->es[i]));
        in[i] = (char *)pad[i];
    }
    f->code->jit->fn_tail(in, out, (size_t)rest * 2);
    memcpy(f->dst + f->out_es * at, pad[OT_JIT_MAX_INSN], (size_t)(rest * f->out_es));
}

/* The bytes an element of the run moves: each vector load's and the
 * output's. */
static int native_bytes(const native_run *f)
{
    int b = f->out_es;
    for (int i = 0; i < f->ninsn; i++) b += f->es[i];
    return b;
}

/* in[] of f from the plan's kernel k: each vector load's 16-bit source
 * (found through the block buffer it reads in bind) with its dtype in
 * load_dt, each parameter's value. False where a load is not one of the
 * block buffers, whole. */
static bool native_inputs(native_run *f, const half_run *h, const ot_kernel *k,
                          const ot_binding *bind, uint8_t *load_dt)
{
    f->ninsn = k->ninsn;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        f->es[i] = 0;
        load_dt[i] = 0;
        if (in->code == OT_I_PARAM) {
            f->param[i] = (float)bind->param[in->arg];
            f->in[i] = (char *)&f->param[i];
        } else if (in->code == OT_I_LOAD) {
            const ot_view *v = &k->loads[in->arg];
            int j = 0;
            while (v->space == OT_SPACE_LEAF && j < h->nleaves &&
                   bind->leaf[v->index] != (char *)temp_data(h->buf[j]))
                j++;
            if ((in->scalar & 8) || v->space != OT_SPACE_LEAF || j == h->nleaves ||
                v->offset || v->strides[0] != 1)
                return false;
            const ot_tensor *t = h->src[j];
            f->es[i] = (uint8_t)ot_dtype_size(t->leaf.dtype);
            f->in[i] = (char *)t->buf->data + t->offset * (int64_t)f->es[i];
            load_dt[i] = t->leaf.dtype;
        }
    }
    return true;
}

void ot__half_code_free(ot_half_code *c)
{
    if (!c) return;
    ot__jit_unmap(&c->map);
    ot__jit_free(c->jit);
    free(c);
}

/* The plan's 16-bit code for this signature (jit NULL: none): the one it
 * keeps, else built and kept in a free slot (two threads may both build
 * it: one keeps its own); *own: the caller frees it (no slot was free). */
static ot_half_code *half_code(ot_plan *plan, const ot_kernels *kt, const uint8_t *load_dt,
                               int out_dt, bool *own)
{
    *own = false;
    for (int i = 0; i < OT_HALF_CODES; i++) {
        ot_half_code *c = atomic_load(&plan->half[i]);
        if (c && c->out_dt == out_dt && !memcmp(c->load_dt, load_dt, sizeof c->load_dt)) return c;
    }
    ot_half_code *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    memcpy(c->load_dt, load_dt, sizeof c->load_dt);
    c->out_dt = (uint8_t)out_dt;
    c->jit = ot__jit_build_half(&plan->kernels[0], kt, plan->acc, load_dt, out_dt);
    if (c->jit && !ot__jit_install(&c->jit, 1, &c->map)) {
        ot__half_code_free(c);
        return NULL;
    }
    for (int i = 0; i < OT_HALF_CODES; i++) {
        ot_half_code *none = NULL;
        if (atomic_compare_exchange_strong(&plan->half[i], &none, c)) return c;
    }
    *own = true;
    return c;
}

/* f made ready to run tree into out as one kernel of 16-bit code, holding
 * the plan whose code it runs; 1 where there is none: the plan is not one
 * elementwise kernel, or the table has no such code. */
static int native_prepare(half_run *h, ot_tensor *out, ot_node *tree, native_run *f)
{
    ot_cpu *cpu = h->be->impl;
    uint8_t load_dt[OT_JIT_MAX_INSN] = {0};
    ot_tensor *o = NULL;
    ot_node *t = block_tree(h, tree, NATIVE_BLOCK, &o);
    int rc = t ? ot__plan_get(h->be, 1, &o, &t, &f->plan, &f->walk, &f->bind) : -1;
    const ot_kernel *k = rc ? NULL : &f->plan->kernels[0];
    ot_half_code *code = NULL;
    if (k && cpu->jit && f->plan->nkernels == 1 && k->kind == OT_KER_EW && k->ndim == 1 &&
        !k->nxstore && native_inputs(f, h, k, &f->bind, load_dt))
        code = half_code(f->plan, cpu->k, load_dt, out->leaf.dtype, &f->own);
    if (code && code->jit) {
        int64_t n = ot__numel(&out->leaf.shape);
        f->out_es = (int)ot_dtype_size(out->leaf.dtype);
        size_t moved = (size_t)n * (size_t)native_bytes(f);
        f->code = code;
        f->dst = (char *)out->buf->data + out->offset * f->out_es;
        f->n = n;
        f->lanes = cpu->k->vbytes / 4;
        f->stream = cpu->stream_bytes && moved >= cpu->stream_bytes &&   /* a whole vector */
                    ((uintptr_t)f->dst & (uintptr_t)(f->lanes * f->out_es - 1)) == 0;
        f->cost = k->run_cost + 2 * (h->nleaves + 1);
        return 0;
    }
    if (f->own) ot__half_code_free(code);
    f->own = false;
    return rc < 0 ? (ot_errcode() ? ot_errcode() : OT_ENOMEM) : 1;
}

static void native_free(half_run *h, native_run *f)
{
    if (f->own) ot__half_code_free(f->code);
    if (f->walk) ot__walk_done(h->be, f->walk);
    if (f->plan && !f->bind.borrowed) ot__plan_release(f->plan);
}

/* The backend's statistics of one native run: its one kernel, the 16-bit
 * bytes it moved, the block plan's nodes and element ops scaled to n. */
static void count_native(ot_backend *be, const native_run *f)
{
    ot__stat_shard *s = ot__stats_mine(&be->stats);
    ot__stat_add(s, OT__STAT_KERNELS, 1);
    ot__stat_add(s, OT__STAT_NODES, f->plan->nodes);
    ot__stat_add(s, OT__STAT_BYTES, (uint64_t)f->n * (uint64_t)native_bytes(f));
    ot__stat_add(s, OT__STAT_ELEM_OPS, f->plan->elem_ops / NATIVE_BLOCK * (uint64_t)f->n);
}

/* The tree as one kernel of 16-bit code over the whole tensors, threaded
 * by chunks: memory sees each 16-bit value once, converted in registers
 * (W1h: 1.8x faster than widening into buffers). 1: not this way. */
static int run_native(half_run *h, ot_tensor *out, ot_node *tree)
{
    ot_cpu *cpu = h->be->impl;
    native_run f = {0};
    int rc = native_prepare(h, out, tree, &f);
    if (!rc) {
        ot__parallel(cpu->threads, 0, (f.n + NATIVE_CHUNK - 1) / NATIVE_CHUNK, f.n * f.cost,
                     native_chunk, &f);
        native_tail(&f);
        count_native(h->be, &f);
    }
    native_free(h, &f);
    return rc;
}

/* An elementwise tree (blockable's kind) into out: one kernel of 16-bit
 * code where the table has it (run_native, any size); else, for 16-bit
 * leaves and out alone and from four blocks up, a block at a time: each
 * block's leaves widened into f32 buffers that stay in cache, the f32 tree
 * run on them, the result narrowed into out. 1: neither (the whole trees
 * in f32). */
static int run_blocked(half_run *h, ot_tensor *out, ot_node *tree, int kind)
{
    int fast = h->be->vt == &ot__cpu_vt ? run_native(h, out, tree) : 1;
    if (fast == 1 && (kind == 2 || ot__numel(&out->leaf.shape) < 4 * HALF_BLOCK))
        return 1;   /* f32 leaves or output, or too small: the whole trees in f32 */
    if (fast == 1 && h->be->vt == &ot__cpu_vt) fast = run_fast(h, out, tree);
    if (fast <= 0) return fast;
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
            widen_at(h->src[i], at, temp_data(h->buf[i]), len);
        rc = h->eval(h->be, 1, &o, &t);
        if (!rc) narrow_out(out->leaf.dtype, temp_data(o), dst, at, len, false);
    }
    return rc;
}

/* The f32 stand-ins of the trees and outputs into t32 and o32 (a 16-bit
 * output's an f32 temporary; outs NULL: none, as explain may ask). */
static int trees_f32(half_run *h, int n, ot_tensor *const outs[], ot_node *const trees[],
                     ot_node **t32, ot_tensor **o32)
{
    int rc = t32 && o32 ? 0 : ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    ot__walker w = {.visit = visit, .ctx = h};
    for (int i = 0; i < n && !rc; i++) {
        int v = ot__walker_run(&w, trees[i]);
        if (v < 0) rc = v == OT_ENOMEM ? ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory")
                                       : ot_errcode();
        else t32[i] = h->out[v];
        if (!outs) continue;   /* explain's fresh outputs */
        /* an f64 or i32 value into 16 bits: kept in f64 until its one rounding */
        bool wide = !rc && rounds_in_f32(t32[i]->dtype);
        o32[i] = rc || !ot__is_half(outs[i]->leaf.dtype)
                     ? outs[i]
                     : temp_new_dt(h, &outs[i]->leaf.shape, wide ? OT_F64 : OT_F32);
        if (!o32[i]) rc = ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    }
    ot__walker_free(&w);
    return rc;
}

/* Output k's f32 values (contiguous, row-major) stored into out: rounded
 * to nearest, or stochastically when the assignment asks for it (output
 * k's stream, element i the bits of index i, on this thread alone, so the
 * bits never depend on the thread count). */
static int store_out(ot_tensor *out, int k, const float *x)
{
    uint64_t key;
    if (!ot__half_sr_get(&key)) return (ot_set)(out, x);
    size_t n = (size_t)ot__numel(&out->leaf.shape);
    uint16_t *h = malloc(sizeof *h * (n ? n : 1));
    if (!h) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    ot__half_narrow_sr(out->leaf.dtype, x, h, n, ot__sr_key(key, (uint64_t)k), 0);
    int rc = (ot_set_raw)(out, h);
    free(h);
    return rc;
}

/* The f32 trees and outputs, then the assignment, then the narrowing. */
static int run_f32(half_run *h, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    ot_node **t32 = calloc((size_t)n, sizeof *t32);
    ot_tensor **o32 = calloc((size_t)n, sizeof *o32);
    int rc = trees_f32(h, n, outs, trees, t32, o32);
    if (!rc) rc = h->eval(h->be, n, o32, t32);
    for (int i = 0; i < n && !rc; i++) {
        if (o32[i] == outs[i]) continue;
        ot_tensor *f = o32[i]->leaf.dtype == OT_F64 ? f32_odd_of(h, o32[i]) : o32[i];
        rc = f ? store_out(outs[i], i, temp_data(f))
               : ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    }
    free(t32);
    free(o32);
    return rc;
}

static void run_free(half_run *h, ot_pool *pool)
{
    ot_pool_pop(pool);
    for (int i = 0; i < h->ntemps; i++) ot_tensor_free(h->temps[i]);
    free(h->temps);
    free(h->out);
}

int ot__half_assign(ot_backend *be, ot__half_eval eval, int n, ot_tensor *const outs[],
                    ot_node *const trees[])
{
    half_run h = {.be = be, .eval = eval};
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    uint64_t key;
    bool sr = ot__half_sr_get(&key);   /* stochastic stores take the plain path */
    ot_node *root = NULL;
    int kind = n == 1 && !sr ? blockable(outs[0], trees[0], &root) : 0;
    int rc = kind ? run_blocked(&h, outs[0], root, kind) : 1;
    if (rc == 1) {   /* not by blocks: the whole trees in f32 */
        h.block = 0;
        rc = run_f32(&h, n, outs, trees);
    }
    run_free(&h, pool);
    return rc;
}

/* ot_explain's view of ot__half_assign (half_step.c prints the route):
 * explain called on the f32 trees and outputs that run_f32 assigns, built
 * as it builds them (leaves widened, a cast to f16/bf16 inside a tree
 * evaluated and rounded), nothing narrowed. */
int ot__half_explain(ot_backend *be, ot__half_eval eval, ot__half_explain_fn explain, int n,
                     ot_tensor *const outs[], ot_node *const trees[], FILE *f)
{
    half_run h = {.be = be, .eval = eval};
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot__err_set(OT_ENOMEM, NULL, 0, "explain", "out of memory");
    ot_node **t32 = calloc((size_t)n, sizeof *t32);
    ot_tensor **o32 = calloc((size_t)n, sizeof *o32);
    int rc = trees_f32(&h, n, outs, trees, t32, o32);
    if (!rc) rc = explain(be, n, outs ? o32 : NULL, t32, f);
    free(t32);
    free(o32);
    run_free(&h, pool);
    return rc;
}

/* Whether ot__half_assign runs tree into out as one kernel of 16-bit code
 * (what explain says). */
bool ot__half_native(ot_backend *be, ot__half_eval eval, ot_tensor *out, ot_node *tree)
{
    half_run h = {.be = be, .eval = eval};
    native_run f = {0};
    uint64_t key;
    ot_pool *pool = ot_pool_push();
    ot_node *root = NULL;
    bool yes = pool && be->vt == &ot__cpu_vt && !ot__half_sr_get(&key) &&
               blockable(out, tree, &root) && native_prepare(&h, out, root, &f) == 0;
    native_free(&h, &f);
    if (pool) run_free(&h, pool);
    return yes;
}

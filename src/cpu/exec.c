/*
 * exec.c - the cpu backend's executor: runs a plan's kernels over tiles,
 * reductions and dots, in chunks on the thread pool (threads.c).
 *
 * A kernel's iteration space is walked in tiles along its innermost dim;
 * each instruction of its register program runs as one SIMD loop over the
 * tile, or the whole program as one generated loop (jit.c), which writes
 * the outputs of memory-bound kernels beyond the last-level cache with
 * streaming stores. Work is cut into chunks whose boundaries depend only on the plan,
 * never on the thread count, and partial results are combined in chunk
 * order, so every result is bitwise identical for any number of threads.
 * Reductions (their accumulators, tiles and chunk bodies) are in
 * exec_reduce.c; exec.h holds what the two share.
 */
#include "blas.h"
#include "exec.h"
#include "ops.h"

#include <stdint.h>

#define TILE 1024              /* elements per tile (row-major walks); at most
                                   tile.inc's K_BLOCK, since a generated f32
                                   sum flushes into double once per tile */
#define TILE_COLUMN 256         /* elements per tile (column-block walks) */
#define TILE_COLUMN_JIT 512     /* ... as generated code: 16 gathered rows of
                                   512 (32 KiB) stay near L1; 1024 ran W9 5-10%
                                   slower, 256 no faster */
#define TILE_STREAM 16384       /* elements per tile of a kernel with no scratch */
#define TILE_JIT 16384          /* elements per tile of generated code (no buffer
                                   per op, so only the per-tile setup counts:
                                   at 4096 it was 2-4% of W1's time) */
#define EW_CHUNK_ELEMENTS 16384 /* an elementwise chunk's size, at least a
                                   tile: 16 tiles of generated code (2^18
                                   elements) left a GEMM block's epilogue one
                                   chunk, on one thread */

/* ---- running a tile ------------------------------------------------------- */

#define STACK_SCRATCH 8192   /* bytes of tile scratch kept on the stack */
#define STACK_BUFS 16

/* Small kernels (short rows, few buffers) use the caller's stack memory, so
 * a small assignment allocates nothing here. */
typedef struct scratch_stack {
    void *ptr[2 * STACK_BUFS];
    _Alignas(64) char mem[STACK_SCRATCH];
} scratch_stack;

static size_t scratch_per(int64_t tile) { return ((size_t)tile * 8 + 63) & ~(size_t)63; }

static bool scratch_small(int nb, size_t per) { return nb <= STACK_BUFS && per * (size_t)nb <= STACK_SCRATCH; }

/* Chunk scratch in the stack's memory or the slot's. */
static void scratch_new(scratch *s, const run_ctx *c, int slot, scratch_stack *st)
{
    const run_mem *m = c->mem;
    int nb = c->k->nbuf ? c->k->nbuf : 1;
    size_t per = scratch_per(c->tile);
    bool small = scratch_small(nb, per);
    char *tc = region(m, slot, R_TCACHE);
    for (int i = 0; i < TCACHE_LOADS; i++)
        s->tc[i] = (tcache){.load = -1, .buf = tc ? tc + (size_t)c->tile * TG_MAX_ROWS * 4 * (size_t)i : NULL};
    s->ptr = small ? st->ptr : region(m, slot, R_PTRS);
    s->mem = small ? st->mem : region(m, slot, R_BUFS);
    s->acc = region(m, slot, R_ACC);
    s->sum = region(m, slot, R_SUM);
    s->own = s->ptr + nb;
    for (int i = 0; i < nb; i++) s->own[i] = s->mem + per * (size_t)i;
}

static int64_t inner_stride(const ot_kernel *k, const ot_view *v)
{
    return k->ndim ? v->strides[k->ndim - 1] : 0;
}

static void gather(void *dst, const char *src, int64_t stride, int64_t n, size_t es)
{
    if (es == 4) {
        uint32_t *d = dst;
        for (int64_t i = 0; i < n; i++) memcpy(&d[i], src + i * stride * 4, 4);
    } else {
        uint64_t *d = dst;
        for (int64_t i = 0; i < n; i++) memcpy(&d[i], src + i * stride * 8, 8);
    }
}

static void scatter(char *dst, const void *src, int64_t stride, int64_t n, size_t es, bool fill)
{
    const char *s = src;
    if (!fill && stride == 1) {
        memcpy(dst, s, (size_t)n * es);
        return;
    }
    for (int64_t i = 0; i < n; i++) memcpy(dst + i * stride * (int64_t)es, fill ? s : s + i * (int64_t)es, es);
}

static int form2(uint8_t sc) { return (sc & 3) == 1 ? OT_FORM_SV : (sc & 3) == 2 ? OT_FORM_VS : OT_FORM_VV; }

/* Where an insn writing buffer buf puts its result: straight into an
 * output (direct[0] for the kernel's result, direct[1 + x] for further
 * output x, NULL where not in place) or its own tile buffer. */
static void *dest(const ot_kernel *k, char *const *direct, int buf, void *own)
{
    if (!direct) return own;
    for (int x = 0; x < k->nxstore; x++)   /* a reduction's extra output is its result */
        if (buf == k->xstores[x].result && direct[x + 1]) return direct[x + 1];
    if (buf == k->result && direct[0]) return direct[0];
    return own;
}

/* A column-blocked kernel reading a transposed input (unit stride along
 * the outer dim, 4-byte elements) gathers G tiles' rows at once (G =
 * kt->tgather_rows): one contiguous read of G elements serves G tiles, and
 * each GxG block is transposed in registers (16x16 with AVX-512: a whole
 * cache line per read). The tile's row, or NULL where this does not apply
 * (the caller gathers one element at a time). */
static const void *transposed_row(const run_ctx *c, scratch *s, int load, int64_t o, int64_t j,
                                  int64_t n)
{
    const ot_kernel *k = c->k;
    int nd = k->ndim;
    const ot_view *v = &k->loads[load];
    if (!k->col_blocked || nd < 2 || v->strides[nd - 2] != 1 || ot__esize(v->dtype) != 4)
        return NULL;
    int64_t g = c->kt->tgather_rows, oi = o % k->dims[nd - 2], r = oi & (g - 1), o0 = o - r;
    int rows = (int)(k->dims[nd - 2] - (oi - r) < g ? k->dims[nd - 2] - (oi - r) : g);
    tcache *e = NULL;
    for (int i = 0; i < TCACHE_LOADS && !e; i++)
        if (s->tc[i].load == load || s->tc[i].load < 0) e = &s->tc[i];
    if (!e) return NULL;
    if (e->load != load || e->o0 != o0 || e->j != j) {
        const char *src = c->base[load] + view_offset(k, v, o0, j) * 4;
        c->kt->tgather_b4(e->buf, c->tile, src, inner_stride(k, v), n, rows);
        *e = (tcache){load, o0, j, e->buf};
    }
    return e->buf + r * c->tile * 4;
}

/* Where a LOAD insn's values are for the tile at (o, j): in place when
 * contiguous or scalar, else gathered (into its own buffer or 8 rows at a
 * time). */
static void *load_tile(const run_ctx *c, scratch *s, const ot_insn *in, int64_t o, int64_t j,
                       int64_t n)
{
    const ot_kernel *k = c->k;
    const ot_view *v = &k->loads[in->arg];
    size_t es = ot__esize((ot_dtype)v->dtype);
    char *p = c->base[in->arg] + view_offset(k, v, o, j) * (int64_t)es;
    int64_t st = inner_stride(k, v);
    if ((in->scalar & 8) || st == 1) return p;
    const void *row = transposed_row(c, s, in->arg, o, j, n);
    if (row) return (void *)row;
    gather(s->own[in->dst], p, st, n, es);
    return s->own[in->dst];
}

/* One arithmetic insn over nn elements, operands at a, b, cc. */
static void run_op(const run_ctx *c, const ot_insn *in, void *d, const void *a, const void *b,
                   const void *cc, int64_t nn)
{
    const ot_kernels *kt = c->kt;
    bool scalar = in->scalar & 8;
    /* A registered op (ot_op_register); the placeholder rows come after
     * every op that was in the table before them, so most insns stop at
     * the compare. */
    const ot_custom *u = in->op >= OT_OP_CUSTOM1 ? ot__custom_insn(in) : NULL;
    if (u) {
        kt->user(u, in->kd, d, a, b, scalar ? 0 : in->scalar & 3, (size_t)nn);
        return;
    }
    switch (in->code) {
    case OT_I_UNARY:
        kt->unary[c->acc][in->op][in->kd](d, a, (size_t)nn);
        break;
    case OT_I_BINARY:
        kt->binary[in->op][in->kd][scalar ? OT_FORM_VV : form2(in->scalar)](d, a, b, (size_t)nn);
        break;
    case OT_I_FMA:
        (in->op == OT_OP_SUB ? kt->fnma : kt->fma)[in->kd][scalar ? 0 : in->scalar & 7](d, a, b, cc, (size_t)nn);
        break;
    default: /* OT_I_CAST */
        kt->cast[in->kd_from][in->kd](d, a, (size_t)nn);
        break;
    }
}

/* Whether output q can take streaming stores: written in place (not into
 * tile scratch, which is read again), aligned to the vector, and not read
 * by the kernel itself (an in-place update, or a row block that an earlier
 * kernel just left in the cache: streaming those lines out was measured
 * 30% slower on W5). */
static bool can_stream(const ot_kernel *k, char *const *val, char *const *out, scratch *s,
                       int q)
{
    const ot_jit *jt = k->jit;
    int buf = q ? k->xstores[q - 1].result : k->result;
    if (!jt->out_vector[q]) return true;
    if (out[q] == s->own[buf] || (uintptr_t)out[q] % (uintptr_t)jt->kt->vbytes) return false;
    for (int i = 0; i < k->ninsn; i++)
        if (!jt->body[i] && k->insns[i].code == OT_I_LOAD && val[i] == out[q]) return false;
    return true;
}

/* The code to run over whole vectors: the streaming-store variant where
 * there is one and every output can take it. */
static ot_jit_fn *jit_entry(const ot_kernel *k, char *const *val, char *const *out, scratch *s)
{
    const ot_jit *jt = k->jit;
    if (!jt->fn_stream) return jt->fn;
    for (int q = 0; q < jt->nout; q++)
        if (!can_stream(k, val, out, s, q)) return jt->fn;
    return jt->fn_stream;
}

void ot__exec_scalar_value(const run_ctx *c, int i, char **val, double *one)
{
    const ot_insn *in = &c->k->insns[i];
    const int16_t *arg = c->k->jit->arg[i];
    val[i] = (char *)&one[i];
    if (in->code == OT_I_PARAM) ot__store(val[i], ot__kd_dtype(in->kd), c->param[in->arg]);
    else run_op(c, in, val[i], val[arg[0]], arg[1] < 0 ? NULL : val[arg[1]],
                arg[2] < 0 ? NULL : val[arg[2]], 1);
}

/* The prelude of a kernel's generated code for n elements at (o, j):
 * val[i] for each value the code does not compute (body or pre), a load's
 * elements in place (or gathered), one element in one[i] for the rest. */
void ot__exec_jit_prelude(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n, char **val,
                        double *one)
{
    const ot_kernel *k = c->k;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (ot__jit_computes(k->jit, i)) continue;
        if (in->code == OT_I_LOAD) val[i] = load_tile(c, s, in, o, j, n);
        else ot__exec_scalar_value(c, i, val, one);
    }
}

/* Runs a kernel's generated code (see ot_jit) over n elements: the prelude
 * here, one element per scalar value, then the code over whole vectors and
 * once more over a zero-padded copy of the tail, as the tile kernels treat
 * theirs. Output buffers end up in s->ptr as run_program leaves them. */
static void run_jit(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n,
                    char *const *direct)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    char *val[OT_JIT_MAX_INSN], *out[1 + OT_MAX_XSTORES];
    double one[OT_JIT_MAX_INSN];
    ot__exec_jit_prelude(c, s, o, j, n, val, one);
    for (int q = 0; q < jt->nout; q++) {
        int buf = q ? k->xstores[q - 1].result : k->result;
        out[q] = jt->out_vector[q] ? dest(k, direct, buf, s->own[buf]) : NULL;
    }
    size_t es = jt->kd == OT_KD_F64 ? 8 : 4, vb = (size_t)jt->kt->vbytes;
    int64_t lanes = (int64_t)(vb / es), body = n / lanes * lanes, tail = n - body;
    if (body) jit_entry(k, val, out, s)(val, out, (size_t)body * es);
    if (tail) {
        _Alignas(64) char pad[OT_JIT_MAX_INSN + 1 + OT_MAX_XSTORES][64];
        char *tin[OT_JIT_MAX_INSN], *tout[1 + OT_MAX_XSTORES];
        for (int i = 0; i < k->ninsn; i++) {
            if (ot__jit_computes(jt, i)) continue;
            tin[i] = val[i];
            if (k->insns[i].code != OT_I_LOAD || (k->insns[i].scalar & 8)) continue;
            memset(pad[i], 0, vb);
            memcpy(pad[i], val[i] + body * (int64_t)es, (size_t)tail * es);
            tin[i] = pad[i];
        }
        for (int q = 0; q < jt->nout; q++) {   /* one address, one pad (the code stores once) */
            tout[q] = pad[OT_JIT_MAX_INSN + q];
            for (int p = 0; p < q; p++)
                if (out[p] == out[q]) tout[q] = tout[p];
        }
        jt->fn_tail(tin, tout, (size_t)tail * es);
        for (int q = 0; q < jt->nout; q++)
            if (jt->out_vector[q]) memcpy(out[q] + body * (int64_t)es, tout[q], (size_t)tail * es);
    }
    for (int q = 0; q < jt->nout; q++) {
        int buf = q ? k->xstores[q - 1].result : k->result;
        if (!jt->out_vector[q]) {
            out[q] = s->own[buf];
            memcpy(out[q], val[jt->out_val[q]], ot__esize(ot__kd_dtype(k->insns[jt->out_val[q]].kd)));
        }
        s->ptr[buf] = out[q];
    }
}

/* Runs the register program over n elements at outer index o, inner j. */
static void run_program(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n,
                        char *const *direct)
{
    const ot_kernel *k = c->k;
    if (k->jit && !k->jit->reduce) {   /* a row reduction's code runs whole spans */
        run_jit(c, s, o, j, n, direct);
        return;
    }
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        int64_t nn = (in->scalar & 8) ? 1 : n;
        void *d = dest(k, direct, in->dst, s->own[in->dst]);
        switch (in->code) {
        case OT_I_LOAD:
            d = load_tile(c, s, in, o, j, n);
            break;
        case OT_I_PARAM:
            ot__store(d, ot__kd_dtype(in->kd), c->param[in->arg]);
            break;
        default:
            run_op(c, in, d, s->ptr[in->a], in->b < 0 ? NULL : s->ptr[in->b],
                   in->c < 0 ? NULL : s->ptr[in->c], nn);
            break;
        }
        s->ptr[in->dst] = d;
    }
}

/* ---- elementwise kernels -------------------------------------------------- */

/* Orders a chunk's streaming stores before whatever follows it: the
 * thread's next chunk, or the pool's hand-back to the caller, after which
 * anything may read the output. */
static void store_fence(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __asm__ volatile("sfence" ::: "memory");
#endif
}

/* The outer index, inner start and length of tile t. */
static void tile_at(const run_ctx *c, int64_t t, int64_t *o, int64_t *j, int64_t *n)
{
    int64_t jt;
    if (c->k->col_blocked) {
        jt = t / c->nouter;
        *o = t % c->nouter;
    } else {
        *o = t / c->tiles_per_row;
        jt = t % c->tiles_per_row;
    }
    *j = jt * c->tile;
    *n = c->inner - *j < c->tile ? c->inner - *j : c->tile;
}

/* Runs the program for a tile, writing the kernel's further outputs
 * (directly where their insn may, else copied after); direct0 is where the
 * result goes in place, or NULL. */
void ot__exec_run_with_extras(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n,
                            char *direct0)
{
    const ot_kernel *k = c->k;
    char *xdst[OT_MAX_XSTORES], *direct[1 + OT_MAX_XSTORES];
    direct[0] = direct0;
    for (int x = 0; x < k->nxstore; x++) {
        const ot_xstore *xs = &k->xstores[x];
        xdst[x] = c->xstore[x] + view_offset(k, &xs->view, o, j) * (int64_t)ot__esize(xs->view.dtype);
        direct[x + 1] = xs->direct ? xdst[x] : NULL;
    }
    run_program(c, s, o, j, n, k->nxstore || direct0 ? direct : NULL);
    for (int x = 0; x < k->nxstore; x++) {
        const ot_xstore *xs = &k->xstores[x];
        if (!xs->direct)
            scatter(xdst[x], s->ptr[xs->result], inner_stride(k, &xs->view), n,
                    ot__esize(xs->view.dtype), xs->scalar);
    }
}

static void ew_tile(const run_ctx *c, scratch *s, int64_t t)
{
    const ot_kernel *k = c->k;
    int64_t o, j, n;
    tile_at(c, t, &o, &j, &n);
    size_t es = ot__esize((ot_dtype)k->store.dtype);
    char *dst = c->store + view_offset(k, &k->store, o, j) * (int64_t)es;
    ot__exec_run_with_extras(c, s, o, j, n, k->direct_store ? dst : NULL);
    if (!k->direct_store)
        scatter(dst, s->ptr[k->result], inner_stride(k, &k->store), n, es, k->result_scalar);
}

static void ew_body(run_ctx *c, scratch *s, int64_t first, int64_t last)
{
    int64_t total = c->nouter * c->tiles_per_row;
    int64_t t0 = first * c->ew_per_chunk, t1 = last * c->ew_per_chunk;
    if (t1 > total) t1 = total;
    if (c->k->run_rows) ot__exec_ew_rows(c, s, t0, t1);
    else
        for (int64_t t = t0; t < t1; t++) ew_tile(c, s, t);
    if (c->k->jit && c->k->jit->fn_stream) store_fence();
}

void ot__exec_run_chunk(run_ctx *c, chunk_body body, int slot, int64_t first, int64_t last)
{
    scratch s;
    scratch_stack st;
    scratch_new(&s, c, slot, &st);
    body(c, &s, first, last);
}

static void ew_chunk(void *c, int slot, int64_t first, int64_t last)
{
    ot__exec_run_chunk(c, ew_body, slot, first, last);
}

/* ---- kernels as a whole --------------------------------------------------- */

/* Whether an elementwise kernel's tiles touch no scratch: every load is read
 * in place and the one vector instruction writes the output directly. */
static bool streams(const ot_kernel *k)
{
    if (k->kind != OT_KER_EW || !k->direct_store || k->col_blocked) return false;
    int computed = 0;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code == OT_I_PARAM || (in->scalar & 8)) continue;
        if (in->code == OT_I_LOAD) {
            int64_t st = k->ndim ? k->loads[in->arg].strides[k->ndim - 1] : 0;
            if (st != 0 && st != 1) return false;
            continue;
        }
        computed++;
    }
    return computed == 1;
}

/* Tiles keep a kernel's scratch in L1; a kernel with no scratch gets long
 * tiles, since the per-tile bookkeeping is then its only overhead. */
static int64_t tile_for(const ot_kernel *k)
{
    if (streams(k)) return TILE_STREAM;
    if (k->jit && k->kind == OT_KER_EW) return k->col_blocked ? TILE_COLUMN_JIT : TILE_JIT;
    return k->col_blocked ? TILE_COLUMN : (k->nbuf > 6 ? TILE / 2 : TILE);
}

static void set_space(run_ctx *c, const ot_kernel *k)
{
    c->tile = k->run_tile;
    c->inner = k->ndim ? k->dims[k->ndim - 1] : 1;
    if (c->inner < c->tile) c->tile = c->inner > 0 ? c->inner : 1;   /* small scratch */
    c->nouter = 1;
    for (int d = 0; d + 1 < k->ndim; d++) c->nouter *= k->dims[d];
    c->tiles_per_row = (c->inner + c->tile - 1) / c->tile;
}

/* An elementwise kernel's tiles are independent, so its chunks' size never
 * changes a bit: about EW_CHUNK_ELEMENTS, at most TILES_PER_CHUNK tiles. */
static int64_t ew_tiles_per_chunk(const run_ctx *c)
{
    int64_t t = EW_CHUNK_ELEMENTS / c->tile;
    return t < 1 ? 1 : t > TILES_PER_CHUNK ? TILES_PER_CHUNK : t;
}

static void run_ew(ot_threads *th, int slot, run_ctx *c)
{
    int64_t tiles = c->nouter * c->tiles_per_row;
    c->ew_per_chunk = ew_tiles_per_chunk(c);
    if (c->k->col_blocked && ot__exec_tblocks(th, slot, c)) return;
    ot__parallel(th, slot, (tiles + c->ew_per_chunk - 1) / c->ew_per_chunk,
                 c->nouter * c->inner * c->k->run_cost, ew_chunk, c);
}

/* ---- rand and onehot ------------------------------------------------------ */

static void run_rand(const ot_backend *be, const ot_kernel *k, char *dst)
{
    ot_dtype dt = (ot_dtype)k->store.dtype;
    size_t es = ot__esize(dt);
    int64_t n = ot__numel(&k->shape);
    for (int64_t i = 0; i < n; i++)
        ot__store(dst + i * (int64_t)es, dt, ot__rand_uniform(be->opts.seed, k->seed, (uint64_t)i, dt));
}

/* Walks the result in row-major order; the input index is the result's with
 * the new axis left out. */
static void run_onehot(const ot_kernel *k, const char *src, char *dst)
{
    ot_dtype dt = (ot_dtype)k->store.dtype, it = (ot_dtype)k->loads[0].dtype;
    size_t es = ot__esize(dt), is = ot__esize(it);
    int nd = k->shape.ndim;
    int64_t idx[OT_MAX_DIMS] = {0}, n = ot__numel(&k->shape);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0;
        for (int d = 0, j = 0; d < nd; d++)
            if (d != k->axis) off += idx[d] * k->loads[0].strides[j++];
        double v = ot__load(src + off * (int64_t)is, it);
        bool hot = v == floor(v) && v >= 0 && v < (double)k->depth && v == (double)idx[k->axis];
        ot__store(dst + e * (int64_t)es, dt, hot ? 1.0 : 0.0);
        for (int d = nd - 1; d >= 0 && ++idx[d] == k->shape.dims[d]; d--) idx[d] = 0;
    }
}

/* ---- plans ---------------------------------------------------------------- */

static char *view_base(const ot_plan *p, const ot_binding *bind, char *arena, const ot_view *v)
{
    char *base;
    switch (v->space) {
    case OT_SPACE_LEAF: base = bind->leaf[v->index]; break;
    case OT_SPACE_TEMP: base = arena + p->temp_offset[v->index]; break;
    default: base = ot_tensor_data(bind->outs[v->index]); break;
    }
    return base + v->offset * (int64_t)ot__esize(v->dtype);
}

/* The rows of a row-blocked run: [r0, r0 + n), or every row when n < 0. */
typedef struct rows {
    int64_t r0, n;
} rows;

static char *row_base(char *base, const ot_view *v, rows r, int block_temp)
{
    if (r.n < 0 || (v->space == OT_SPACE_TEMP && v->index == block_temp)) return base;
    return base + r.r0 * v->strides[0] * (int64_t)ot__esize(v->dtype);
}

/* Where a kernel run on `slot` over rows r finds view v: a temp_local one
 * holds the block being run only, at its offset in the slot's R_LOCAL. */
static char *run_base(const ot_plan *p, const ot_binding *bind, char *arena, const run_mem *mem,
                      int slot, const ot_view *v, rows r, int block_temp)
{
    if (v->space == OT_SPACE_TEMP && ot__temp_local(p, v->index))
        return (char *)region(mem, slot, R_LOCAL) + p->temp_offset[v->index] +
               v->offset * (int64_t)ot__esize(v->dtype);
    return row_base(view_base(p, bind, arena, v), v, r, block_temp);
}

/* Notes that INDEX kernel `kernel` met an index out of range (its error is
 * set), keeping the lowest kernel of the run that failed. */
static void note_bad(const run_mem *mem, int kernel)
{
    int seen = atomic_load(mem->overflow);
    while ((seen < 0 || kernel < seen) && !atomic_compare_exchange_weak(mem->overflow, &seen, kernel)) {
    }
}

/* Runs one kernel, over a block of the plan's rows or over everything (r.n
 * < 0), on the pool th (NULL: serially in `slot`, when blocks run in
 * parallel; else the caller's slot 0). */
static void run_kernel(ot_backend *be, const ot_plan *p, const ot_binding *bind, char *arena,
                       const run_mem *mem, int slot, const ot_kernel *whole, rows r, int64_t nrows,
                       int block_temp, ot_threads *th)
{
    ot_cpu *cpu = be->impl;
    ot_kernel block;   /* a row block's copy; a whole run reads the plan's */
    const ot_kernel *kp = whole;
    if (r.n >= 0) {   /* a kernel coalesced to one dim walks whole rows of elements */
        block = *whole;
        int64_t per_row = block.kind == OT_KER_DOT ? 1 : block.dims[0] / nrows;
        r = (rows){r.r0 * per_row, r.n * per_row};
        if (block.kind == OT_KER_DOT) block.m = r.n;
        else block.dims[0] = r.n;
        kp = &block;
    }
    char *dst = run_base(p, bind, arena, mem, slot, &kp->store, r, block_temp);
    char *stack_base[16];
    char **base = kp->nload <= 16 ? stack_base : region(mem, slot, R_BASE);
    for (int i = 0; i < kp->nload; i++) {
        bool whole_b = kp->kind == OT_KER_DOT && i == 1;   /* every block reads all of B */
        base[i] = run_base(p, bind, arena, mem, slot, &kp->loads[i], whole_b ? (rows){0, -1} : r,
                           block_temp);
    }
    switch (kp->kind) {   /* rand, onehot and struct are never row-blocked */
    case OT_KER_DOT: ot__run_dot(kp, base, dst, bind->param, region(mem, slot, R_PACK)); break;
    case OT_KER_RAND: run_rand(be, kp, dst); break;
    case OT_KER_ONEHOT: run_onehot(kp, base[0], dst); break;
    case OT_KER_STRUCT: ot__run_struct(kp, base, dst); break;
    case OT_KER_CONV: ot__run_conv(kp, base, dst, region(mem, slot, R_PACK)); break;
    case OT_KER_POOL: ot__run_pool(kp, base, dst); break;
    case OT_KER_INDEX: /* an index out of range: the error is set, the run goes on */
        if (ot__run_index(kp, base, dst, bind->param)) note_bad(mem, (int)(whole - p->kernels));
        break;
    case OT_KER_ATTN:
        ot__run_attn(kp, base, dst, region(mem, slot, R_PACK), cpu->k,
                     be->opts.accuracy == OT_ULP35);
        break;
    default: {
        run_ctx c;
        ot__clear(&c, sizeof c);
        c.k = kp;
        c.kt = cpu->k;
        c.acc = be->opts.accuracy == OT_ULP35;
        c.base = base;
        c.store = dst;
        c.param = bind->param;
        c.mem = mem;
        c.kernel = kp->kind == OT_KER_REDUCE ? (int)(whole - p->kernels) : -1;   /* overflows */
        for (int x = 0; x < kp->nxstore; x++)
            c.xstore[x] = run_base(p, bind, arena, mem, slot, &kp->xstores[x].view, r, -1);
        set_space(&c, kp);
        if (kp->kind == OT_KER_EW) run_ew(th, slot, &c);
        else ot__exec_run_reduce(th, slot, &c);
    }
    }
}

/* A row-blocked run: each chunk runs every kernel over its blocks of rows,
 * so a block's temporaries are still in cache for the kernels that read
 * them. Rows are independent, so the result does not depend on blocking. */
typedef struct block_ctx {
    ot_backend *be;
    const ot_plan *p;
    const ot_binding *bind;
    char *arena;
    const run_mem *mem;
} block_ctx;

static void block_chunk(void *arg, int slot, int64_t first, int64_t last)
{
    block_ctx *b = arg;
    const ot_plan *p = b->p;
    int64_t nrows = p->rows;
    for (int64_t blk = first; blk < last; blk++) {
        rows r = {blk * p->row_block, 0};
        r.n = nrows - r.r0 < p->row_block ? nrows - r.r0 : p->row_block;
        for (int i = 0; i < p->nkernels; i++)
            run_kernel(b->be, p, b->bind, b->arena, b->mem, slot, &p->kernels[i], r, p->rows, -1, NULL);
    }
}

/* A segment's run: its kernels after the dot, per panel of the dot's rows. */
typedef struct segment_run {
    block_ctx c;   /* what every kernel run takes */
    const ot_segment *sg;
} segment_run;

/* The epilogue of one panel (ot__gemm_epilogue): the segment's other
 * kernels over rows [r0, r0 + n), each on every thread. */
static void segment_epilogue(void *ctx, int64_t r0, int64_t n)
{
    const segment_run *x = ctx;
    const block_ctx *c = &x->c;
    const ot_segment *sg = x->sg;
    ot_cpu *cpu = c->be->impl;
    for (int i = sg->first + 1; i < sg->first + sg->count; i++)
        run_kernel(c->be, c->p, c->bind, c->arena, c->mem, 0, &c->p->kernels[i], (rows){r0, n},
                   sg->rows, sg->block_temp, cpu->threads);
}

/* The epilogue of a convolution's block (ot__conv_epi): the segment's
 * other kernels narrowed to it (ot__conv_box), each on every thread. */
static void conv_block_epilogue(void *ctx, const ot__conv_block *b)
{
    const segment_run *x = ctx;
    const block_ctx *c = &x->c;
    ot_cpu *cpu = c->be->impl;
    ot_view loads[OT_CONV_EPI_LOADS];
    ot_xstore xs[OT_MAX_XSTORES];
    for (int i = x->sg->first + 1; i < x->sg->first + x->sg->count; i++) {
        ot_kernel box;
        ot__conv_box(&c->p->kernels[x->sg->first], &c->p->kernels[i], b, &box, loads, xs);
        run_kernel(c->be, c->p, c->bind, c->arena, c->mem, 0, &box, (rows){0, -1}, 0, -1, cpu->threads);
    }
}

/* Kernels that run per block of rows, blocks in order, each kernel on every
 * thread: a dot's rows and the epilogue that reads them while in cache, as
 * GEMMs on row panels with the epilogue after each (ot__run_dot_panels). */
static void run_segment(ot_backend *be, const ot_plan *p, const ot_binding *bind, char *arena,
                        const run_mem *mem, const ot_segment *sg)
{
    ot_cpu *cpu = be->impl;
    const ot_kernel *dk = &p->kernels[sg->first];
    if (dk->kind == OT_KER_CONV) {   /* a convolution and its epilogue on its blocks */
        segment_run x = {{be, p, bind, arena, mem}, sg};
        char *base[2] = {view_base(p, bind, arena, &dk->loads[0]), view_base(p, bind, arena, &dk->loads[1])};
        ot__run_conv_epi(dk, base, view_base(p, bind, arena, &dk->store), region(mem, 0, R_PACK),
                         &(ot__conv_epi){conv_block_epilogue, &x});
        return;
    }
    /* One block is the whole run: kernels then run unsliced, since a
     * reduction joining the segment need not walk the dot's rows (a sum
     * over a transpose of the epilogue's result) when there is one block. */
    if (sg->row_block >= sg->rows) {
        for (int i = sg->first; i < sg->first + sg->count; i++)
            run_kernel(be, p, bind, arena, mem, 0, &p->kernels[i], (rows){0, -1}, sg->rows, -1,
                       cpu->threads);
        return;
    }
    char *base[2] = {view_base(p, bind, arena, &dk->loads[0]), view_base(p, bind, arena, &dk->loads[1])};
    char *dst = view_base(p, bind, arena, &dk->store);
    bool reuse = dk->store.space == OT_SPACE_TEMP && dk->store.index == sg->block_temp;
    segment_run x = {{be, p, bind, arena, mem}, sg};
    ot__run_dot_panels(dk, base, dst, bind->param, region(mem, 0, R_PACK),
                       &(ot__panels){sg->row_block, reuse, segment_epilogue, &x});
}

/* One element's work in adds, the measure of ot__parallel's threshold: one
 * for its loads and store, plus each op's cost (ops.def) where it runs per
 * element. */
static int64_t kernel_cost(const ot_kernel *k)
{
    int64_t cost = 1;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->scalar & 8) continue;
        if (in->code == OT_I_UNARY || in->code == OT_I_BINARY) cost += ot__op_cost(in->op);
        else if (in->code == OT_I_FMA) cost += 2;
    }
    return k->kind == OT_KER_REDUCE ? cost + 1 : cost;   /* a fold per element */
}

/* A whole run of k, in adds (a dot: its multiply-adds, 2*m*n*k). */
static int64_t kernel_work(const ot_kernel *k)
{
    if (k->kind == OT_KER_DOT) return 2 * k->m * k->n * k->k * k->batch;
    int64_t elements = 1;
    for (int d = 0; d < k->ndim; d++) elements *= k->dims[d];
    return elements * k->run_cost;
}

static void run_kernels(ot_backend *be, const ot_plan *p, const ot_binding *bind, char *arena,
                        const run_mem *mem)
{
    ot_cpu *cpu = be->impl;
    if (p->row_serial) {
        ot_segment all = {0, p->nkernels, p->rows, p->row_block, -1};
        run_segment(be, p, bind, arena, mem, &all);
        return;
    }
    if (p->row_block <= 0) {
        for (int i = 0, s = 0; i < p->nkernels; i++) {
            if (s < p->nseg && p->segs[s].first == i) {
                run_segment(be, p, bind, arena, mem, &p->segs[s]);
                i += p->segs[s++].count - 1;
            } else {
                run_kernel(be, p, bind, arena, mem, 0, &p->kernels[i], (rows){0, -1}, 0, -1,
                           cpu->threads);
            }
        }
        return;
    }
    int64_t nrows = p->rows, work = 0;
    for (int i = 0; i < p->nkernels; i++) work += kernel_work(&p->kernels[i]);
    block_ctx b = {be, p, bind, arena, mem};
    ot__parallel(cpu->threads, 0, (nrows + p->row_block - 1) / p->row_block, work, block_chunk, &b);
}

static void need(size_t *have, size_t n)
{
    if (n > *have) *have = n;
}

/* m's layout for plan p: each region as large as the largest kernel's need
 * (a row block of a kernel needs no more than the whole), or false when a
 * size overflows. */
static bool run_layout(const ot_plan *p, run_mem *m)
{
    size_t sz[R_COUNT] = {[R_LOCAL] = p->local_bytes};
    for (int i = 0; i < p->nkernels; i++) {
        const ot_kernel *k = &p->kernels[i];
        if (k->nload > 16) need(&sz[R_BASE], sizeof(char *) * (size_t)k->nload);
        if (k->kind == OT_KER_DOT || k->kind == OT_KER_CONV || k->kind == OT_KER_ATTN) {
            size_t bytes;
            if (k->kind == OT_KER_DOT    ? !ot__dot_scratch(k, &bytes)
                : k->kind == OT_KER_CONV ? !ot__conv_scratch(k, &bytes)
                                         : !ot__attn_scratch(k, &bytes))
                return false;
            need(&sz[R_PACK], bytes);
        }
        if (k->kind != OT_KER_EW && k->kind != OT_KER_REDUCE) continue;
        run_ctx c;
        set_space(&c, k);
        int nb = k->nbuf ? k->nbuf : 1;
        size_t per = scratch_per(c.tile), tile = (size_t)c.tile;
        if (!scratch_small(nb, per)) {
            need(&sz[R_PTRS], sizeof(void *) * 2 * (size_t)nb);
            need(&sz[R_BUFS], per * (size_t)nb);
        }
        if (k->col_blocked) need(&sz[R_TCACHE], tile * TG_MAX_ROWS * 4 * TCACHE_LOADS);
        if (k->kind != OT_KER_REDUCE || (k->red_axis == k->ndim - 1 && k->ndim > 0)) continue;
        if (k->red_axis >= 0) {
            need(&sz[R_ACC], sizeof(racc) * tile);
            need(&sz[R_SUM], sizeof(double) * tile);
        } else {
            size_t n = (size_t)all_chunks(&c);
            need(&sz[R_PARTIAL], sizeof(racc) * (n + 1));
        }
    }
    size_t off = 0;
    for (int r = 0; r < R_COUNT; r++) {
        m->off[r] = off;
        if (sz[r] > SIZE_MAX - 63 - off) return false;
        off += (sz[r] + 63) & ~(size_t)63;
    }
    m->full = off;
    m->worker = p->row_block > 0 && !p->row_serial ? off : m->off[R_BASE];
    return true;
}

/* The plan's arena (its temporaries, then the run's slots) when no other run
 * holds it: fresh pages for large temporaries would cost a page fault per
 * 4 KiB on every call. Every run of a plan needs the same bytes. */
static char *arena_take(ot_plan *p, size_t bytes)
{
    char *a = atomic_exchange(&p->arena, NULL);
    return a ? a : ot__data_alloc(bytes);
}

static void arena_give(ot_plan *p, char *a)
{
    char *none = NULL;
    if (!atomic_compare_exchange_strong(&p->arena, &none, a)) free(a);
}

static bool plan_direct(const ot_plan *p);

/* Whether kernel k indexes by a leaf's int32 values (checked before a run). */
static bool leaf_indexed(const ot_kernel *k)
{
    return k->kind == OT_KER_INDEX && k->nload >= 2 && k->loads[1].space == OT_SPACE_LEAF;
}

void ot__plan_run_prepare(ot_plan *p)
{
    run_mem m = {0};
    for (int i = 0; i < p->nkernels; i++) {
        p->kernels[i].run_tile = tile_for(&p->kernels[i]);
        p->kernels[i].run_rows = ot__exec_spans_tiles(&p->kernels[i]);
        p->kernels[i].row_runs = p->kernels[i].run_rows && ot__exec_row_runs(&p->kernels[i]);
        p->kernels[i].red_runs = ot__exec_red_runs(&p->kernels[i]);
        p->kernels[i].run_cost = kernel_cost(&p->kernels[i]);
        p->leaf_indices |= leaf_indexed(&p->kernels[i]);
    }
    p->run_ok = run_layout(p, &m);
    p->direct = p->run_ok && plan_direct(p);
    p->run_full = m.full;
    p->run_worker = m.worker;
    memcpy(p->run_off, m.off, sizeof m.off);
}

static void count_run(ot_backend *be, const ot_plan *p);

bool ot__plan_run_bytes(const ot_backend *be, const ot_plan *p, size_t *bytes)
{
    const ot_cpu *cpu = be->impl;
    size_t temps = (p->arena_bytes + 63) & ~(size_t)63, slots = 0;
    size_t workers = (size_t)ot__threads_workers(cpu->threads);
    bool ok = p->run_ok && ot__mul_size(&slots, p->run_worker, workers) &&
              slots <= SIZE_MAX - p->run_full && (slots += p->run_full) <= SIZE_MAX - temps;
    *bytes = temps + slots;
    return ok;
}

int ot__plan_run_at(ot_backend *be, const ot_plan *p, const ot_binding *bind, char *arena)
{
    atomic_int overflow = -1;
    run_mem mem = {.full = p->run_full, .worker = p->run_worker, .overflow = &overflow};
    memcpy(mem.off, p->run_off, sizeof mem.off);
    size_t temps = (p->arena_bytes + 63) & ~(size_t)63;
    mem.slots = p->run_full || p->run_worker ? arena + temps : NULL;
    run_kernels(be, p, bind, arena, &mem);
    count_run(be, p);
    return atomic_load(&overflow);
}

/* The int32 sum a kernel computes, found again in its trees for the
 * message: the node of walk entry `entry` (plan_key.c's numbering: walk.c's
 * post-order over the roots), else the first int32 sum (a program's trees
 * before its rewrites). */
typedef struct find_sum {
    int entry;
    const ot_node *at, *first;
} find_sum;

static bool is_int_sum(const ot_node *n)
{
    return n->kind == OT_NODE_OP && n->op == OT_OP_SUM && n->dtype == OT_I32;
}

static int find_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)operand;
    find_sum *f = w->ctx;
    if (index == f->entry && is_int_sum(n)) f->at = n;
    if (!f->first && is_int_sum(n)) f->first = n;
    return 0;
}

int ot__plan_check_indices(const ot_plan *p, const ot_binding *bind)
{
    for (int i = 0; i < p->nkernels && p->leaf_indices; i++) {
        const ot_kernel *k = &p->kernels[i];
        if (!leaf_indexed(k)) continue;
        int rc = ot__index_check(k, view_base(p, bind, NULL, &k->loads[1]));
        if (rc) return rc;
    }
    return 0;
}

int ot__plan_overflow(const ot_plan *p, int kernel, int n, ot_node *const trees[])
{
    if (p->kernels[kernel].kind == OT_KER_INDEX)   /* the kernel set the error */
        return ot_errcode() ? ot_errcode() : OT_EINVAL;
    find_sum f = {p->kernels[kernel].red_entry, NULL, NULL};
    ot__walker w = {.visit = find_visit, .ctx = &f};
    for (int i = 0; i < n; i++)
        if (ot__walker_run(&w, trees[i]) < 0) break;
    ot__walker_free(&w);
    const ot_node *sum = f.at ? f.at : f.first;
    if (sum) return ot__int_sum_overflow(sum);
    return ot__err_set(OT_EOVERFLOW, NULL, 0, "sum", "an int32 sum does not fit int32 (it "
                       "would wrap); cast the operand to f64 first");
}

static void count_run(ot_backend *be, const ot_plan *p)
{
    ot__stat_shard *s = ot__stats_mine(&be->stats);
    ot__stat_add(s, OT__STAT_KERNELS, (uint64_t)p->nkernels);
    ot__stat_add(s, OT__STAT_NODES, p->nodes);
    ot__stat_add(s, OT__STAT_BYTES, p->bytes_read + p->bytes_written);
    ot__stat_add(s, OT__STAT_ELEM_OPS, p->elem_ops);
}

/* Whether p qualifies for ot__plan_run_direct (see cpu.h). A span of at
 * most a tile is one chunk, so the executor would have run it on the
 * calling thread too. */
static bool plan_direct(const ot_plan *p)
{
    const ot_kernel *k = &p->kernels[0];
    const ot_jit *jt = p->nkernels == 1 ? k->jit : NULL;
    if (!jt || p->row_block > 0 || p->row_serial || p->nseg || k->kind != OT_KER_EW ||
        jt->reduce || jt->fn_stream || k->col_blocked || k->nxstore || !k->direct_store ||
        k->ndim != 1 || jt->nout != 1 || !jt->out_vector[0] || k->store.strides[0] != 1)
        return false;
    int64_t lanes = jt->kt->vbytes / (jt->kd == OT_KD_F64 ? 8 : 4);
    if (k->dims[0] == 0 || k->dims[0] > k->run_tile || k->dims[0] % lanes) return false;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        bool in_place = in->code == OT_I_LOAD &&
                        ((in->scalar & 8) || k->loads[in->arg].strides[0] == 1);
        if (!ot__jit_computes(jt, i) && !in_place && in->code != OT_I_PARAM) return false;
    }
    return true;
}

void ot__plan_run_direct(ot_backend *be, const ot_plan *p, const ot_binding *bind)
{
    const ot_kernel *k = &p->kernels[0];
    const ot_jit *jt = k->jit;
    char *val[OT_JIT_MAX_INSN], *out[1];
    double one[OT_JIT_MAX_INSN];
    for (int i = 0; i < k->ninsn; i++) {   /* run_jit's prelude, less what cannot occur */
        const ot_insn *in = &k->insns[i];
        if (ot__jit_computes(jt, i)) continue;
        if (in->code == OT_I_LOAD) {
            val[i] = view_base(p, bind, NULL, &k->loads[in->arg]);
            continue;
        }
        val[i] = (char *)&one[i];
        ot__store(val[i], ot__kd_dtype(in->kd), bind->param[in->arg]);
    }
    out[0] = view_base(p, bind, NULL, &k->store);
    jt->fn(val, out, (size_t)k->dims[0] * (jt->kd == OT_KD_F64 ? 8 : 4));
    count_run(be, p);
}

int ot__plan_run(ot_backend *be, ot_plan *p, const ot_binding *bind, int n,
                 ot_node *const trees[])
{
    if (p->direct) {
        ot__plan_run_direct(be, p, bind);
        return 0;
    }
    int rc = ot__plan_check_indices(p, bind);
    if (rc) return rc;
    size_t bytes;
    char *arena = NULL;
    bool ok = ot__plan_run_bytes(be, p, &bytes);
    if (!ok || (bytes && !(arena = arena_take(p, bytes))))
        return ot__err_set(OT_ENOMEM, NULL, 0, "assign",
                           "out of memory for %zu bytes of temporaries and scratch", bytes);
    int over = ot__plan_run_at(be, p, bind, arena);
    if (arena) arena_give(p, arena);
    return over < 0 ? 0 : ot__plan_overflow(p, over, n, trees);
}

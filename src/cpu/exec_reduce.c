/*
 * exec_reduce.c - the executor's reductions: accumulators (exact int32
 * sums, NaN-first extremes, first-index ties), a tile folded into them,
 * and the three walks of a REDUCE kernel (along rows, down columns, over
 * everything in per-chunk partials combined in chunk order, so the result
 * is the same for any thread count). exec.c runs the kernels that call it.
 */
#include "exec.h"
#include "ops.h"

static bool is_arg(int op) { return op == OT_OP_ARGMAX || op == OT_OP_ARGMIN; }
static bool wants_max(int op) { return op == OT_OP_MAX || op == OT_OP_ARGMAX; }

static racc racc_identity(int op)
{
    racc a = {0, 0, {0, 0}};
    if (op == OT_OP_MAX || op == OT_OP_ARGMAX) a.v = -INFINITY;
    if (op == OT_OP_MIN || op == OT_OP_ARGMIN) a.v = INFINITY;
    a.index = -1;
    return a;
}

/* Folds value x at index i into a: NaN wins (first NaN for arg*); ties keep
 * the first index. */
static void racc_fold(racc *a, int op, double x, int64_t i)
{
    if (op == OT_OP_SUM || op == OT_OP_MEAN) {
        a->v += x;
        return;
    }
    if (a->index >= 0 && a->v != a->v) return;
    bool better = x != x || a->index < 0 || (wants_max(op) ? x > a->v : x < a->v);
    if (better) {
        a->v = x;
        a->index = i;
    }
}

/* Folds n tile values (or one scalar repeated n times) starting at index i0. */
static void racc_tile(const run_ctx *c, racc *a, const void *vals, bool scalar, int64_t n, int64_t i0)
{
    const ot_kernel *k = c->k;
    int kd = k->result_kd, op = k->red_op;
    if (n <= 0) return;
    if (kd == OT_KD_I32 && (op == OT_OP_SUM || op == OT_OP_MEAN)) {
        const int32_t *x = vals;
        int64_t t = scalar ? (int64_t)x[0] * n : 0;   /* n <= a tile: |t| < 2^62 */
        for (int64_t i = 0; i < n && !scalar; i++) t += x[i];
        ot__wide_add(&a->isum, t);
        return;
    }
    if (kd != OT_KD_I32 && !is_arg(op)) {
        if (scalar) {
            double x = ot__load(vals, ot__kd_dtype(kd));
            racc_fold(a, op, op == OT_OP_SUM || op == OT_OP_MEAN ? x * (double)n : x, i0);
            return;
        }
        double x = op == OT_OP_MAX ? c->kt->max[kd](vals, (size_t)n)
                 : op == OT_OP_MIN ? c->kt->min[kd](vals, (size_t)n)
                                   : c->kt->sum[kd](vals, (size_t)n);
        racc_fold(a, op, x, i0);
        return;
    }
    size_t es = ot__esize(ot__kd_dtype(kd));
    for (int64_t i = 0; i < n; i++)
        racc_fold(a, op, ot__load((const char *)vals + (scalar ? 0 : i * (int64_t)es), ot__kd_dtype(kd)),
                  i0 + i);
}

/* Notes that kernel c->kernel overflowed, keeping the lowest index of a run
 * (kernels of row blocks run concurrently). */
static void note_overflow(const run_ctx *c)
{
    int seen = atomic_load(c->mem->overflow);
    while ((seen < 0 || c->kernel < seen) &&
           !atomic_compare_exchange_weak(c->mem->overflow, &seen, c->kernel)) {
    }
}

/* Stores a's result. An int32 sum that does not fit int32 is noted and
 * stored saturated: the run then fails with OT_EOVERFLOW. */
static void racc_store(const run_ctx *c, const racc *a, char *dst)
{
    const ot_kernel *k = c->k;
    int kd = k->result_kd, op = k->red_op;
    double v = a->v;
    int32_t i32;
    if (kd == OT_KD_I32 && op == OT_OP_MEAN) v = ot__wide_double(a->isum) / (double)k->red_count;
    else if (op == OT_OP_MEAN) v = a->v / (double)k->red_count;
    if (kd == OT_KD_I32 && op == OT_OP_SUM) {
        if (ot__wide_int32(a->isum, &i32)) {
            v = i32;
        } else {
            note_overflow(c);
            v = a->isum.hi < 0 || (a->isum.hi == 0 && a->isum.lo < 0) ? -INFINITY : INFINITY;
        }
    }
    if (is_arg(op)) v = (double)(a->index < 0 ? 0 : a->index);
    ot__store(dst, (ot_dtype)k->store.dtype, v);
}

/* Runs the program for a tile and folds it; i0 is the index of its first
 * element along what is reduced. */
static void reduce_tile(const run_ctx *c, scratch *s, racc *a, int64_t o, int64_t j, int64_t n,
                        int64_t i0)
{
    ot__exec_run_with_extras(c, s, o, j, n, NULL);
    const ot_kernel *k = c->k;
    racc_tile(c, a, s->ptr[k->result], k->result_scalar, n, i0);
}

/* A reduction's code over a span whose last tail elements fill less than
 * a vector: its vector inputs' and outputs' tails go through zero-padded
 * copies (in[ninsn + v], out[nout + q]), the outputs' copied back after.
 * Not inlined: its 8 KiB of pads would weigh on every row's frame. */
__attribute__((noinline)) static int red_call_tail(const run_ctx *c, char **val, char **out,
                                                   int64_t n, int64_t tail, int64_t tile,
                                                   double *acc)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    int ni = k->ninsn, no = jt->nout;
    _Alignas(64) char pad[OT_JIT_MAX_INSN + 1 + OT_MAX_XSTORES][64];
    size_t es = jt->kd == OT_KD_F64 ? 8 : 4;
    int64_t body = n - tail;
    for (int i = 0; i < ni; i++) {
        const ot_insn *in = &k->insns[i];
        val[ni + i] = NULL;
        if (jt->body[i] || in->code != OT_I_LOAD || (in->scalar & 8)) continue;
        memset(pad[i], 0, (size_t)jt->kt->vbytes);
        memcpy(pad[i], val[i] + body * (int64_t)es, (size_t)tail * es);
        val[ni + i] = pad[i];
    }
    out[no] = NULL;
    for (int q = 1; q < no; q++) out[no + q] = pad[ni + q];
    int nan = jt->red(val, out, (size_t)n * es, (size_t)tile * es, acc);
    for (int q = 1; q < no; q++)
        memcpy(out[q] + body * (int64_t)es, out[no + q], (size_t)tail * es);
    return nan;
}

/* Calls a reduction's code (see ot_jit's red) over n > 0 elements of row
 * o from j, in tiles of tile elements, folding into *acc; returns its NaN
 * flag. A row of a few vectors costs about what the interpreter spends
 * per tile, so this stays lean: no division, the tail apart. */
static int red_call(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n, int64_t tile,
                    double *acc)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    char *val[2 * OT_JIT_MAX_INSN], *out[2 * (1 + OT_MAX_XSTORES)];
    double one[OT_JIT_MAX_INSN];
    size_t es = jt->kd == OT_KD_F64 ? 8 : 4;
    int64_t tail = n & (int64_t)((size_t)jt->kt->vbytes / es - 1);   /* lanes: a power of two */
    ot__exec_jit_prelude(c, s, o, j, n, val, one);
    out[0] = NULL;   /* the result is folded, not stored */
    for (int q = 1; q < jt->nout; q++) {   /* further outputs: in place (jit.c's reduce_fits) */
        const ot_xstore *xs = &k->xstores[q - 1];
        out[q] = c->xstore[q - 1] + view_offset(k, &xs->view, o, j) * (int64_t)es;
    }
    if (tail) return red_call_tail(c, val, out, n, tail, tile, acc);
    return jt->red(val, out, (size_t)n * es, (size_t)tile * es, acc);
}

/* Whether generated code computes anything before it reduces. Reducing a
 * bare load, it gains only the interpreter's cost per tile, and one tile
 * of a max ran 6-29% slower as code (rows of 64-1024 floats, AVX-512):
 * spans of one tile stay interpreted there. */
static bool computes(const ot_jit *jt)
{
    for (int i = 0; i < jt->ninsn; i++)
        if (jt->body[i]) return true;
    return false;
}

/* Where row o's values from j lie when the kernel's program is one
 * contiguous load of floats (max(x, axis=1) of a plain tensor): the tile
 * kernels then fold them in place, as the program would hand them over,
 * without the program's run per tile, which was a third of the time of
 * rows of 64 floats. Sums down columns (a bias gradient's) read their
 * rows so too. NULL for any other program. */
static const char *bare_row(const run_ctx *c, int64_t o, int64_t j)
{
    const ot_kernel *k = c->k;
    const ot_insn *in = &k->insns[0];
    if (k->ninsn != 1 || in->code != OT_I_LOAD || in->dst != k->result || (in->scalar & 8) ||
        k->nxstore || k->result_scalar || is_arg(k->red_op) || k->result_kd == OT_KD_I32)
        return NULL;
    const ot_view *v = &k->loads[in->arg];
    if (k->ndim < 1 || v->strides[k->ndim - 1] != 1) return NULL;
    return c->base[in->arg] + view_offset(k, v, o, j) * (int64_t)ot__esize((ot_dtype)v->dtype);
}

/* Folds n elements of row o from j (whole tiles, the last one maybe short;
 * i0: the index of the first along what is reduced) into a, as the
 * interpreter does tile by tile. Generated code does a sum's very
 * additions; a max or min whose extreme is NaN or zero is run again
 * through the interpreter, which returns the first NaN or zero. */
static void reduce_span(const run_ctx *c, scratch *s, racc *a, int64_t o, int64_t j, int64_t n,
                        int64_t i0)
{
    const ot_kernel *k = c->k;
    int op = k->red_op;
    if (k->jit && n > 0 && (n > c->tile || computes(k->jit))) {
        bool sum = op == OT_OP_SUM || op == OT_OP_MEAN;
        double x = sum ? a->v : racc_identity(op).v;
        int nan = red_call(c, s, o, j, n, sum ? c->tile : n, &x);   /* max, min: any order */
        if (sum) {
            a->v = x;
            return;
        }
        if (!nan && x != 0) {
            racc_fold(a, op, x, i0);
            return;
        }
    }
    const char *row = bare_row(c, o, j);
    size_t es = ot__esize(ot__kd_dtype(k->result_kd));
    for (int64_t t = j; t < j + n; t += c->tile) {
        int64_t m = j + n - t < c->tile ? j + n - t : c->tile;
        if (row) racc_tile(c, a, row + (t - j) * (int64_t)es, false, m, i0 + (t - j));
        else reduce_tile(c, s, a, o, t, m, i0 + (t - j));
    }
}

/* red_rows is built only for reductions over the last of several dims
 * (jit.c's folds_rows). Its masked tails read rows of any length in place:
 * 128 rows of 10 logits ran at 52 ns a row called one by one (exec's
 * prelude, the padded tail's copies, the code's entry), which was 3% of
 * W10's step. */
bool ot__exec_red_runs(const ot_kernel *k)
{
    const ot_jit *jt = k->jit;
    return jt && jt->red_rows && (k->dims[k->ndim - 1] > k->run_tile || computes(jt)) &&
           ot__exec_rows_in_place(k);
}

/* Rows from o on (before end) that a kernel with red_runs folds in one call
 * of red_rows: within o's run of dims[nd-2] (row steps are constant
 * there), at most RED_RUN; 0 for any other kernel. */
#define RED_RUN 64
static int64_t fold_run(const run_ctx *c, int64_t o, int64_t end)
{
    const ot_kernel *k = c->k;
    if (!k->red_runs) return 0;
    int64_t d = k->dims[k->ndim - 2], rows = end - o, left = d - o % d;
    if (rows > left) rows = left;
    return rows < RED_RUN ? rows : RED_RUN;
}

/* Rows o..o+rows-1 reduced by one call of red_rows, each from the
 * identity and stored as reduce_span would leave it: a sum as its code
 * adds; a max or min as found, but that rows whose extreme is zero, and
 * all of them where a NaN was met, go through reduce_span (which returns
 * ref's NaN or zero). */
static void fold_rows(const run_ctx *c, scratch *s, int64_t o, int64_t rows, size_t es)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    char *val[OT_JIT_MAX_INSN], *out[1 + OT_MAX_XSTORES];
    int64_t rs[2 + OT_JIT_MAX_INSN + OT_MAX_XSTORES];
    double one[OT_JIT_MAX_INSN], acc[RED_RUN];
    size_t ves = jt->kd == OT_KD_F64 ? 8 : 4;
    bool sum = k->red_op == OT_OP_SUM || k->red_op == OT_OP_MEAN;
    for (int64_t r = 0; r < rows; r++) acc[r] = racc_identity(k->red_op).v;
    ot__exec_rows_args(c, o, 0, rows, val, out, rs, one);
    int nan = jt->red_rows(val, out, (size_t)c->inner * ves,
                           (size_t)(sum ? c->tile : c->inner) * ves, acc, rs);
    for (int64_t r = 0; r < rows; r++) {
        racc a = racc_identity(k->red_op);
        if (sum) a.v = acc[r];
        else if (!nan && acc[r] != 0) racc_fold(&a, k->red_op, acc[r], 0);
        else reduce_span(c, s, &a, o + r, 0, c->inner, 0);
        racc_store(c, &a, c->store + view_offset(k, &k->store, o + r, 0) * (int64_t)es);
    }
}

/* The innermost dim is reduced: each row is one result, rows run a run at
 * a time where they can (red_runs). */
static void row_body(run_ctx *c, scratch *s, int64_t first, int64_t last)
{
    size_t es = ot__esize((ot_dtype)c->k->store.dtype);
    int64_t end = last * ROWS_PER_CHUNK < c->nouter ? last * ROWS_PER_CHUNK : c->nouter;
    for (int64_t o = first * ROWS_PER_CHUNK; o < end;) {
        int64_t rows = fold_run(c, o, end);
        if (rows) {
            fold_rows(c, s, o, rows, es);
            o += rows;
            continue;
        }
        racc a = racc_identity(c->k->red_op);
        reduce_span(c, s, &a, o, 0, c->inner, 0);
        racc_store(c, &a, c->store + view_offset(c->k, &c->k->store, o, 0) * (int64_t)es);
        o++;
    }
}

/* Everything is reduced: fixed chunks of tiles give partials combined in
 * chunk order. A chunk's tiles run as spans, one per row they touch. */
static void all_body(run_ctx *c, scratch *s, int64_t first, int64_t last)
{
    int64_t total = c->nouter * c->tiles_per_row;
    for (int64_t chunk = first; chunk < last; chunk++) {
        racc a = racc_identity(c->k->red_op);
        int64_t t = chunk * TILES_PER_CHUNK, end = (chunk + 1) * TILES_PER_CHUNK;
        if (end > total) end = total;
        while (t < end) {
            int64_t o = t / c->tiles_per_row, jt = t % c->tiles_per_row;
            int64_t tiles = end - t < c->tiles_per_row - jt ? end - t : c->tiles_per_row - jt;
            int64_t j = jt * c->tile, n = tiles * c->tile;
            if (n > c->inner - j) n = c->inner - j;
            reduce_span(c, s, &a, o, j, n, o * c->inner + j);
            t += tiles;
        }
        c->partial[chunk] = a;
    }
}

/* A dim other than the innermost is reduced: a tile of accumulators walks
 * down the reduced dim. Outer index o counts the dims other than the
 * reduced and the innermost one. */
/* Whether a column reduction adds rows with the acc_sum kernel: a float
 * sum, the same double additions in the same order as racc_fold's. */
static bool column_sums(const ot_kernel *k)
{
    return (k->red_op == OT_OP_SUM || k->red_op == OT_OP_MEAN) && !k->result_scalar &&
           k->result_kd != OT_KD_I32;
}

static void column_body(run_ctx *c, scratch *s, int64_t first, int64_t last)
{
    const ot_kernel *k = c->k;
    int ax = k->red_axis;
    int64_t red = k->dims[ax], total = c->rest * c->tiles_per_row;
    size_t es = ot__esize((ot_dtype)k->store.dtype);
    size_t ves = k->result_scalar ? 0 : ot__esize(ot__kd_dtype(k->result_kd));
    /* Outer indices count the dims other than the innermost; a tile's
     * position q splits around the reduced dim into (hi, lo). */
    int64_t after = 1;
    for (int d = ax + 1; d < k->ndim - 1; d++) after *= k->dims[d];
    bool sums = column_sums(k);
    racc *acc = s->acc;
    double *sum = s->sum;
    for (int64_t t = first * TILES_PER_CHUNK; t < total && t < last * TILES_PER_CHUNK; t++) {
        int64_t q = t / c->tiles_per_row, j = (t % c->tiles_per_row) * c->tile;
        int64_t n = c->inner - j < c->tile ? c->inner - j : c->tile;
        int64_t hi = q / after, lo = q % after;
        for (int64_t i = 0; i < n; i++) acc[i] = racc_identity(k->red_op);
        if (sums) memset(sum, 0, sizeof *sum * (size_t)n);
        for (int64_t r = 0; r < red; r++) {
            int64_t o = (hi * red + r) * after + lo;
            const void *vals = bare_row(c, o, j);
            if (!vals) {
                ot__exec_run_with_extras(c, s, o, j, n, NULL);
                vals = s->ptr[k->result];
            }
            if (sums) {
                c->kt->acc_sum[k->result_kd](sum, vals, (size_t)n);
                continue;
            }
            for (int64_t i = 0; i < n; i++)
                racc_tile(c, &acc[i], (const char *)vals + i * (int64_t)ves, true, 1, r);
        }
        int64_t o0 = hi * (red ? red : 1) * after + lo;
        for (int64_t i = 0; i < n; i++) {
            if (sums) acc[i].v = sum[i];
            racc_store(c, &acc[i], c->store + view_offset(k, &k->store, o0, j + i) * (int64_t)es);
        }
    }
}

static void row_chunk(void *c, int slot, int64_t first, int64_t last)
{
    ot__exec_run_chunk(c, row_body, slot, first, last);
}
static void all_chunk(void *c, int slot, int64_t first, int64_t last)
{
    ot__exec_run_chunk(c, all_body, slot, first, last);
}
static void column_chunk(void *c, int slot, int64_t first, int64_t last)
{
    ot__exec_run_chunk(c, column_body, slot, first, last);
}

void ot__exec_run_reduce(ot_threads *th, int slot, run_ctx *c)
{
    const ot_kernel *k = c->k;
    int64_t work = c->nouter * c->inner * k->run_cost;
    if (k->red_axis == k->ndim - 1 && k->ndim > 0) {
        ot__parallel(th, slot, (c->nouter + ROWS_PER_CHUNK - 1) / ROWS_PER_CHUNK, work, row_chunk, c);
    } else if (k->red_axis >= 0) {
        /* An empty reduced dim still yields results: the identity (or NaN
         * for mean), so the work is counted without it. */
        c->rest = 1;
        for (int d = 0; d + 1 < k->ndim; d++)
            if (d != k->red_axis) c->rest *= k->dims[d];
        ot__parallel(th, slot, (c->rest * c->tiles_per_row + TILES_PER_CHUNK - 1) / TILES_PER_CHUNK,
                 work, column_chunk, c);
    } else {
        int64_t nchunks = all_chunks(c);
        c->partial = region(c->mem, slot, R_PARTIAL);
        ot__parallel(th, slot, nchunks, work, all_chunk, c);
        racc a = racc_identity(k->red_op);
        for (int64_t i = 0; i < nchunks; i++) {
            const racc *pi = &c->partial[i];
            ot__wide_merge(&a.isum, pi->isum);
            if (k->red_op == OT_OP_SUM || k->red_op == OT_OP_MEAN) a.v += pi->v;
            else if (pi->index >= 0) racc_fold(&a, k->red_op, pi->v, pi->index);
        }
        racc_store(c, &a, c->store);
    }
}

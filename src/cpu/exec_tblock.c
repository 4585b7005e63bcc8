/*
 * exec_tblock.c - the cpu backend's transposed blocks: an elementwise
 * kernel with generated code that reads a transposed view (unit stride
 * along its outer dim, 4-byte elements) runs over strips of rows, each
 * strip walked across its columns TB_COLS at a time, then TB_COLS_MIN
 * where that many are left. A block of a strip's rows by its columns is
 * gathered from as many rows of the source (a
 * run of the strip's length from each, which the hardware prefetchers
 * follow), transposed in registers 16x16 (AVX-512) or 8x8 (AVX2) into a
 * small L1 copy, and the kernel's code (ot_jit's fn_rows) runs once over
 * the whole block, each output row getting whole 64-byte lines: with
 * streaming stores, a line at a time, never read first. The columns left
 * after the blocks go through exec.c's tiles. The code is the
 * kernel's own body, so results are bitwise those of any other walk.
 */
#include "exec.h"

#define TB_COLS 64          /* columns of a block: four 64-byte lines of f32 a row,
                               written back to back, and the code's per-row setup
                               paid once per 256 bytes (W9 on Zen 5: 64 columns
                               0.74x the hand loop, 128 0.78x, 48 0.82x, 32 1.02x;
                               16 ran 1.36x where 32 ran 1.06x on Zen 4) */
#define TB_COLS_MIN 32      /* the narrower block of a strip's last columns, and of
                               rows of 32 to 63 columns */
#define TB_ROWS 128         /* rows of a strip (at most the tile, whose gathered rows
                               R_TCACHE holds): a block of 64 columns is then 32 KiB,
                               the smallest L1 data cache of the x86 cores in use
                               (Zen 2-4), so the code reads the block the gather just
                               wrote from L1. W9 on Zen 4, the strips alternated in
                               one process four times: 128 rows 1.00-1.07x the hand
                               loop, 256 rows (a 64 KiB block) 1.02-1.18x, 64 rows
                               1.23-1.30x (per-strip setup) */
#define TB_SRC 16           /* source rows gathered together (gather()) */
#define TB_UNIT 65536       /* elements per unit of work (a strip's run of columns) */

/* The strips and column groups of a kernel's walk: unit u is column group
 * u % ncg of strip u / ncg, strips cut within each run of dims[nd-2]. */
typedef struct tgeom {
    int64_t d, rows, spr, cols, ncg;
} tgeom;

/* The widest block of the kernel's walk, whose gathered rows R_TCACHE
 * must hold. */
static int64_t widest(const run_ctx *c) { return c->inner >= TB_COLS ? TB_COLS : TB_COLS_MIN; }

static tgeom geom_of(const run_ctx *c)
{
    const ot_kernel *k = c->k;
    tgeom g;
    g.d = k->dims[k->ndim - 2];
    int64_t room = c->tile * TG_MAX_ROWS / widest(c);   /* rows R_TCACHE holds */
    g.rows = (room < TB_ROWS ? room : TB_ROWS) & ~(int64_t)(TG_MAX_ROWS - 1);
    g.spr = (g.d + g.rows - 1) / g.rows;
    g.cols = TB_UNIT / g.rows / TB_COLS * TB_COLS;
    g.ncg = (c->inner + g.cols - 1) / g.cols;
    return g;
}

/* Whether k runs in transposed blocks: generated code with fn_rows, every
 * output vector and written in place, and every value its code does not
 * compute one that steps with the row (a load, contiguous along the row,
 * broadcast, or transposed; a parameter), with at most TCACHE_LOADS
 * transposed loads. */
static bool fits(const run_ctx *c)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    int nd = k->ndim, nt = 0;
    if (!jt || !jt->fn_rows || k->kind != OT_KER_EW || !k->direct_store || nd < 2 ||
        c->inner < TB_COLS_MIN || jt->kd != OT_KD_F32)
        return false;
    for (int x = 0; x < k->nxstore; x++)
        if (!k->xstores[x].direct) return false;
    for (int q = 0; q < jt->nout; q++)
        if (!jt->out_vector[q]) return false;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (ot__jit_computes(jt, i) || in->code == OT_I_PARAM) continue;
        if (in->code != OT_I_LOAD) return false;   /* a scalar op of the prelude */
        const ot_view *v = &k->loads[in->arg];
        if ((in->scalar & 8) || v->strides[nd - 1] == 1) continue;
        if (v->strides[nd - 2] != 1 || ot__esize(v->dtype) != 4) return false;
        nt++;
    }
    return nt > 0 && nt <= TCACHE_LOADS;
}

/* The first rows elements of TB_SRC source rows from address a (stride st
 * elements), a line at a time, into L2: addresses as integers, since past
 * the last block they may lie past the view, which a prefetch never faults
 * on. The empty asm keeps the loop, which gcc -O2 otherwise deletes as
 * having no effect. */
static void prefetch_rows(uintptr_t a, int64_t st, int64_t rows)
{
    for (int64_t q = 0; q < TB_SRC; q++)
        for (int64_t r = 0; r < rows; r += 16) {
            __builtin_prefetch((const void *)(a + (uintptr_t)((q * st + r) * 4)), 0, 2);
            __asm__ volatile("");
        }
}

/* rows x w of a transposed view at src (inner stride st) into buf, w
 * elements a row: TB_SRC source rows at a time, each read across the
 * block's rows before the next, so that a source row's lines are read one
 * after another, while the next TB_SRC rows (the next block's first, after
 * the last) are prefetched into L2. W9 on a Xeon (Sapphire Rapids, 48 KiB
 * L1), the hand loop taking 10.4-13.3 ms: 18.2-18.8 ms reading a line of
 * each of the w rows in turn; by 16 source rows 13.6-13.9 ms, by 32
 * 12.6-12.8, by 64 18.8; with the next rows prefetched into L2, by 16
 * 10.1-10.3 ms and by 32 10.8-11.3; into L1, by 32 10.1, by 16 10.4 (not
 * taken: with the block, past a 32 KiB L1). */
static char *gather(const run_ctx *c, char *buf, const char *src, int64_t st, int64_t rows,
                    int64_t w)
{
    int g = c->kt->tgather_rows;
    for (int64_t i = 0; i < w; i += TB_SRC) {
        int64_t n = w - i < TB_SRC ? w - i : TB_SRC;
        prefetch_rows((uintptr_t)src + (uintptr_t)((i + TB_SRC) * st * 4), st, rows);
        for (int64_t r = 0; r < rows; r += g)
            c->kt->tgather_b4(buf + (r * w + i) * 4, w, src + (r + i * st) * 4, st, n,
                              (int)(rows - r < g ? rows - r : g));
    }
    return buf;
}

/* Rows o..o+rows-1, columns j..j+w-1, as one call of fn_rows: the
 * transposed loads gathered first. */
static void block(const run_ctx *c, scratch *s, int64_t o, int64_t rows, int64_t j, int64_t w)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    int nd = k->ndim, nt = 0;
    char *val[OT_JIT_MAX_INSN], *out[1 + OT_MAX_XSTORES];
    int64_t rs[2 + OT_JIT_MAX_INSN + OT_MAX_XSTORES];
    double one[OT_JIT_MAX_INSN];
    ot__exec_rows_args(c, o, j, rows, val, out, rs, one);
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (ot__jit_computes(jt, i) || in->code != OT_I_LOAD || (in->scalar & 8)) continue;
        const ot_view *v = &k->loads[in->arg];
        if (v->strides[nd - 1] == 1) continue;
        val[i] = gather(c, s->tc[nt++].buf, val[i], v->strides[nd - 1], rows, w);
        rs[1 + i] = w * 4;
    }
    bool stream = ot__exec_rows_stream(k, val, out, rs);
    (stream ? jt->fn_rows_stream : jt->fn_rows)(val, out, w * 4, rs);
}

/* Columns j..j+n-1 (n < TB_COLS_MIN) of rows o..o+rows-1 by exec.c's tiles,
 * whose gathered rows the blocks have overwritten. */
static void tail(const run_ctx *c, scratch *s, int64_t o, int64_t rows, int64_t j, int64_t n)
{
    const ot_kernel *k = c->k;
    int64_t es = (int64_t)ot__esize(k->store.dtype);
    for (int i = 0; i < TCACHE_LOADS; i++) s->tc[i].load = -1;
    for (int64_t r = o; r < o + rows; r++)
        ot__exec_run_with_extras(c, s, r, j, n, c->store + view_offset(k, &k->store, r, j) * es);
}

static void body(run_ctx *c, scratch *s, int64_t first, int64_t last)
{
    tgeom g = geom_of(c);
    for (int64_t u = first; u < last; u++) {
        int64_t strip = u / g.ncg, r0 = strip % g.spr * g.rows, o = strip / g.spr * g.d + r0;
        int64_t rows = g.d - r0 < g.rows ? g.d - r0 : g.rows;
        int64_t j = u % g.ncg * g.cols, end = j + g.cols < c->inner ? j + g.cols : c->inner;
        for (; j + TB_COLS <= end; j += TB_COLS) block(c, s, o, rows, j, TB_COLS);
        if (j + TB_COLS_MIN <= end) {
            block(c, s, o, rows, j, TB_COLS_MIN);
            j += TB_COLS_MIN;
        }
        if (j < end) tail(c, s, o, rows, j, end - j);
    }
#if defined(__x86_64__) || defined(__i386__)
    if (c->k->jit->fn_rows_stream) __asm__ volatile("sfence" ::: "memory");   /* as exec.c's */
#endif
}

static void chunk(void *c, int slot, int64_t first, int64_t last)
{
    ot__exec_run_chunk(c, body, slot, first, last);
}

bool ot__exec_tblocks(ot_threads *th, int slot, run_ctx *c)
{
    if (c->nouter <= 0 || !fits(c)) return false;
    tgeom g = geom_of(c);
    int64_t units = c->nouter / g.d * g.spr * g.ncg;
    ot__parallel(th, slot, units, c->nouter * c->inner * c->k->run_cost, chunk, c);
    return true;
}

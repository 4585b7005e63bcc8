/*
 * exec_conv.c - the cpu backend's windowed kernels (OT_KER_CONV: conv,
 * conv_transpose, conv_wgrad), over internal.h's one loop (X, S, W).
 *
 * The algorithm, which ot_explain names (ot__conv_algo):
 *   im2col + gemm  per batch and group, X's windows for a tile of S
 *                  positions are gathered into a column matrix (rows:
 *                  channel and kernel position; at most COL_BYTES, or one
 *                  column), and blas.c's GEMM multiplies it with W (conv),
 *                  is multiplied by S into W (conv_wgrad), or W^T . S is
 *                  computed into it and scattered back into X
 *                  (conv_transpose);
 *   direct         a depthwise conv (one channel per group) as a plain loop
 *                  over its taps, summed in double.
 * Operands that are not contiguous, and a strided result, are copied
 * through scratch (ot__conv_scratch says how much).
 */
#include "blas.h"
#include "cpu.h"

#define COL_BYTES ((size_t)1 << 20)   /* an im2col tile: in L2 */

/* The three tensors in X, S, W order, as contiguous arrays. */
typedef struct tens {
    char *p[3];
    int dt;
    int64_t es;
} tens;

static int64_t ksize(const ot__conv_geom *g) { return g->k[0] * g->k[1] * g->k[2]; }
static int64_t ssize(const ot__conv_geom *g) { return g->sp[0] * g->sp[1] * g->sp[2]; }
static int64_t xsize(const ot__conv_geom *g) { return g->xp[0] * g->xp[1] * g->xp[2]; }

/* Elements of role r (0 X, 1 S, 2 W). */
static int64_t numel_of(const ot__conv_geom *g, int r)
{
    if (r == 0) return g->n * g->groups * g->xc * xsize(g);
    if (r == 1) return g->n * g->groups * g->sc * ssize(g);
    return g->groups * g->sc * g->xc * ksize(g);
}
static void dims_of(const ot__conv_geom *g, int r, int64_t d[5])
{
    const int64_t *sp = r == 0 ? g->xp : r == 1 ? g->sp : g->k;
    d[0] = r == 2 ? g->groups * g->sc : g->n;
    d[1] = r == 0 ? g->groups * g->xc : r == 1 ? g->groups * g->sc : g->xc;
    for (int i = 0; i < 3; i++) d[2 + i] = sp[i];
}

/* The role of the kernel's loads and store: which of X, S, W each is. */
static void roles(int op, int *a, int *b, int *out)
{
    *a = op == OT_OP_CONV_TRANSPOSE ? 1 : 0;
    *b = op == OT_OP_CONV_WGRAD ? 1 : 2;
    *out = op == OT_OP_CONV ? 1 : op == OT_OP_CONV_TRANSPOSE ? 0 : 2;
}

/* Whether view v (5-D strides) of role r is row-major contiguous. */
static bool contig(const ot__conv_geom *g, int r, const ot_view *v)
{
    int64_t d[5], st = 1;
    dims_of(g, r, d);
    for (int i = 4; i >= 0; i--) {
        if (d[i] != 1 && v->strides[i] != st) return false;
        st *= d[i];
    }
    return true;
}

/* Copies between a strided view and a contiguous array (to: into the view). */
static void copy_view(const ot__conv_geom *g, int r, const ot_view *v, char *view, char *flat,
                      int64_t es, bool to)
{
    int64_t d[5], idx[5] = {0}, n = numel_of(g, r);
    dims_of(g, r, d);
    for (int64_t e = 0; e < n; e++) {
        int64_t off = 0;
        for (int i = 0; i < 5; i++) off += idx[i] * v->strides[i];
        if (to) memcpy(view + off * es, flat + e * es, (size_t)es);
        else memcpy(flat + e * es, view + off * es, (size_t)es);
        for (int i = 4; i >= 0 && ++idx[i] == d[i]; i--) idx[i] = 0;
    }
}

/* Columns of an im2col tile. */
static int64_t tile_cols(const ot__conv_geom *g, int64_t es)
{
    int64_t rows = g->xc * ksize(g), cols = (int64_t)COL_BYTES / (rows * es > 0 ? rows * es : 1);
    int64_t p = ssize(g);
    return cols < 1 ? 1 : cols > p ? p : cols;
}

bool ot__conv_scratch(const ot_kernel *k, size_t *bytes)
{
    const ot__conv_geom *g = &k->conv;
    int64_t es = (int64_t)ot__esize(k->store.dtype);
    int ra, rb, ro;
    roles(k->conv_op, &ra, &rb, &ro);
    size_t sum = 0, part;
    const ot_view *v[3] = {&k->loads[0], &k->loads[1], &k->store};
    int r[3] = {ra, rb, ro};
    for (int i = 0; i < 3; i++) {
        if (contig(g, r[i], v[i])) continue;
        if (!ot__mul_size(&part, (size_t)numel_of(g, r[i]), (size_t)es) ||
            !ot__add_size(&sum, sum, part + 128))
            return false;
    }
    if (!ot__mul_size(&part, (size_t)(g->xc * ksize(g)), (size_t)(tile_cols(g, es) * es)))
        return false;
    return ot__add_size(bytes, sum, part);
}

bool ot__conv_direct(const ot_kernel *k)
{
    return k->conv_op == OT_OP_CONV && k->conv.xc == 1 && k->conv.sc == 1;
}

/* ---- im2col --------------------------------------------------------------- */

/* The X offset (within one batch and group) of column p of row (c, q), or
 * -1 where the window reads padding. */
static int64_t x_off(const ot__conv_geom *g, int64_t c, const int64_t *q, const int64_t *p)
{
    int64_t off = c;
    for (int d = 0; d < 3; d++) {
        int64_t i = p[d] * g->stride[d] + q[d] * g->dil[d] - g->lo[d];
        if (i < 0 || i >= g->xp[d]) return -1;
        off = off * g->xp[d] + i;
    }
    return off;
}

static void unflat(int64_t v, const int64_t *lim, int64_t *o)
{
    for (int d = 2; d >= 0; d--) {
        o[d] = v % lim[d];
        v /= lim[d];
    }
}

/* Gathers (scatter false) or scatter-adds (true) the tile of columns [p0,
 * p0 + np) between col (rows x np) and x, X of one batch and group. */
#define IM2COL(T, name)                                                                      \
    static void name(const ot__conv_geom *g, T *x, T *col, int64_t p0, int64_t np,        \
                     bool scatter)                                                           \
    {                                                                                        \
        int64_t kk = ksize(g);                                                               \
        for (int64_t r = 0; r < g->xc * kk; r++) {                                           \
            int64_t q[3], p[3];                                                              \
            unflat(r % kk, g->k, q);                                                         \
            unflat(p0, g->sp, p);                                                            \
            T *row = col + r * np;                                                           \
            for (int64_t j = 0; j < np; j++) {                                               \
                int64_t off = x_off(g, r / kk, q, p);                                        \
                if (scatter) {                                                               \
                    if (off >= 0) x[off] += row[j];                                          \
                } else {                                                                     \
                    row[j] = off >= 0 ? x[off] : (T)0;                                       \
                }                                                                            \
                for (int d = 2; d >= 0 && ++p[d] == g->sp[d]; d--) p[d] = 0;                 \
            }                                                                                \
        }                                                                                    \
    }
IM2COL(float, im2col_f32)
IM2COL(double, im2col_f64)
#undef IM2COL

static void im2col(const tens *t, const ot__conv_geom *g, char *x, char *col, int64_t p0,
                   int64_t np, bool scatter)
{
    if (t->dt == OT_F32) im2col_f32(g, (float *)x, (float *)col, p0, np, scatter);
    else im2col_f64(g, (double *)x, (double *)col, p0, np, scatter);
}

/* One batch and group over every tile of S positions. */
static void gemm_group(const tens *t, const ot__conv_geom *g, int op, int64_t n, int64_t grp,
                       char *col, ot__gemm_fn *run)
{
    int64_t es = t->es, kk = ksize(g), rows = g->xc * kk, P = ssize(g);
    char *x = t->p[0] + ((n * g->groups + grp) * g->xc * xsize(g)) * es;
    char *s = t->p[1] + ((n * g->groups + grp) * g->sc * P) * es;
    char *w = t->p[2] + (grp * g->sc * rows) * es;
    int64_t tc = tile_cols(g, es);
    for (int64_t p0 = 0; p0 < P; p0 += tc) {
        int64_t np = P - p0 < tc ? P - p0 : tc;
        if (op == OT_OP_CONV) {
            im2col(t, g, x, col, p0, np, false);
            run(&(ot__gemm){t->dt, w, col, s + p0 * es, false, false, g->sc, np, rows, rows, np, P,
                            1.0, 0.0});
        } else if (op == OT_OP_CONV_WGRAD) {
            im2col(t, g, x, col, p0, np, false);
            run(&(ot__gemm){t->dt, s + p0 * es, col, w, false, true, g->sc, rows, np, P, np, rows,
                            1.0, 1.0});
        } else {
            run(&(ot__gemm){t->dt, w, s + p0 * es, col, true, false, rows, np, g->sc, rows, P, np,
                            1.0, 0.0});
            im2col(t, g, x, col, p0, np, true);
        }
    }
}

/* A depthwise conv: each output channel reads its one input channel. */
#define DIRECT(T, name)                                                                      \
    static void name(const ot__conv_geom *g, const T *x, const T *w, T *s)                   \
    {                                                                                        \
        int64_t kk = ksize(g), P = ssize(g), X = xsize(g);                                   \
        for (int64_t nc = 0; nc < g->n * g->groups; nc++) {                                  \
            const T *xc = x + nc * X, *wc = w + (nc % g->groups) * kk;                       \
            int64_t p[3] = {0, 0, 0};                                                        \
            for (int64_t j = 0; j < P; j++) {                                                \
                double acc = 0;                                                              \
                int64_t q[3] = {0, 0, 0};                                                    \
                for (int64_t r = 0; r < kk; r++) {                                           \
                    int64_t off = x_off(g, 0, q, p);                                         \
                    if (off >= 0) acc += (double)xc[off] * (double)wc[r];                    \
                    for (int d = 2; d >= 0 && ++q[d] == g->k[d]; d--) q[d] = 0;              \
                }                                                                            \
                s[nc * P + j] = (T)acc;                                                      \
                for (int d = 2; d >= 0 && ++p[d] == g->sp[d]; d--) p[d] = 0;                 \
            }                                                                                \
        }                                                                                    \
    }
DIRECT(float, direct_f32)
DIRECT(double, direct_f64)
#undef DIRECT

void ot__run_conv(const ot_kernel *k, char *const base[2], char *dst, char *scratch)
{
    const ot__conv_geom *g = &k->conv;
    tens t = {.dt = k->store.dtype, .es = (int64_t)ot__esize(k->store.dtype)};
    int r[3];
    roles(k->conv_op, &r[0], &r[1], &r[2]);
    const ot_view *v[3] = {&k->loads[0], &k->loads[1], &k->store};
    char *ptr[3] = {base[0], base[1], dst};
    bool packed[3];
    for (int i = 0; i < 3; i++) {
        packed[i] = !contig(g, r[i], v[i]);
        t.p[r[i]] = packed[i] ? scratch : ptr[i];
        if (packed[i]) {
            if (i < 2) copy_view(g, r[i], v[i], ptr[i], scratch, t.es, false);
            scratch += ((numel_of(g, r[i]) * t.es + 63) / 64) * 64 + 64;
        }
    }
    int64_t out_n = numel_of(g, r[2]);
    if (ot__conv_direct(k) && out_n) {
        if (t.dt == OT_F32) direct_f32(g, (float *)t.p[0], (float *)t.p[2], (float *)t.p[1]);
        else direct_f64(g, (double *)t.p[0], (double *)t.p[2], (double *)t.p[1]);
    } else if (out_n) {
        if (k->conv_op != OT_OP_CONV) memset(t.p[r[2]], 0, (size_t)(out_n * t.es));
        ot__gemm_fn *run = ot__blas_ready() ? ot__gemm_loop : ot__gemm_blas;
        bool empty = k->conv_op == OT_OP_CONV_TRANSPOSE && g->sc == 0;   /* no terms: zeros */
        if (g->xc * ksize(g) > 0 && ssize(g) > 0 && !empty)
            for (int64_t n = 0; n < g->n; n++)
                for (int64_t grp = 0; grp < g->groups; grp++)
                    gemm_group(&t, g, k->conv_op, n, grp, scratch, run);
        else if (k->conv_op == OT_OP_CONV)
            memset(t.p[1], 0, (size_t)(out_n * t.es));
    }
    if (packed[2]) copy_view(g, r[2], v[2], dst, t.p[r[2]], t.es, true);
}

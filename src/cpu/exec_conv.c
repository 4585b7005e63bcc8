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
 *                  (conv_transpose); 1-D and 2-D gather whole row segments
 *                  (memcpy at stride 1), 3-D one element at a time;
 *   1x1 gemm       a 1x1 kernel at stride 1 without padding: X of a batch
 *                  and group is the column matrix, read in place;
 *   winograd       a 2-D f32 3x3 conv (or its conv_transpose, or its
 *                  conv_wgrad) at stride and dilation 1: exec_winograd.c;
 *   direct         a depthwise conv (one channel per group): 1-D and 2-D
 *                  add each tap's weight times an input row segment into
 *                  the output row (vectorised), 3-D a plain loop over its
 *                  taps, summed in double.
 * Operands that are not contiguous, and a strided result, are copied
 * through scratch (ot__conv_scratch says how much).
 *
 * Fused epilogues: a conv or conv_transpose hands each block of its result
 * to an epilogue (ot__conv_epi) as soon as the block is complete, while it
 * is in cache: im2col and 1x1 after each tile's GEMM (the group's channels
 * x the tile's positions), direct after each channel, conv_transpose after
 * each batch and group (its scatter completes a group's channels only
 * then). The plan's elementwise kernel that alone reads the result then
 * runs on that block (ot__conv_box narrows it; exec.c runs it). Another
 * algorithm calls the epilogue the same way, once per block it completes.
 */
#include "blas.h"
#include "cpu.h"
#include "exec.h"
#include "wide.h"

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

/* Whether X of one batch and group is already the column matrix (a 1x1
 * kernel at stride 1 without padding: rows are channels, columns
 * positions), so the GEMMs read it in place. */
static bool pointwise(const ot__conv_geom *g)
{
    for (int d = 0; d < 3; d++)
        if (g->k[d] != 1 || g->stride[d] != 1 || g->lo[d] != 0 || g->sp[d] != g->xp[d])
            return false;
    return true;
}

/* Columns of an im2col tile. */
static int64_t tile_cols(const ot__conv_geom *g, int64_t es)
{
    int64_t rows = g->xc * ksize(g), cols = (int64_t)COL_BYTES / (rows * es > 0 ? rows * es : 1);
    int64_t p = ssize(g);
    return cols < 1 ? 1 : cols > p ? p : cols;
}

static bool direct_ok(const ot_kernel *k);
static bool padded_fits(const ot__conv_geom *g);
static int64_t padded_elems(const ot__conv_geom *g);

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
    if (direct_ok(k)) part = padded_fits(g) ? (size_t)padded_elems(g) * (size_t)es : 0;
    else if (pointwise(g)) part = 0;   /* no column tile */
    else if (!ot__mul_size(&part, (size_t)(g->xc * ksize(g)), (size_t)(tile_cols(g, es) * es)))
        return false;
    /* Winograd's result can send a call to im2col (wino_done): room for both. */
    if (ot__wino_ok(k) && ot__wino_scratch(k) > part) part = ot__wino_scratch(k);
    return ot__add_size(bytes, sum, part);
}

static bool direct_ok(const ot_kernel *k)
{
    return k->conv_op == OT_OP_CONV && k->conv.xc == 1 && k->conv.sc == 1;
}

const char *ot__conv_algo(const ot_kernel *k, size_t *tile)
{
    const ot__conv_geom *g = &k->conv;
    int64_t es = (int64_t)ot__esize(k->store.dtype);
    *tile = 0;
    if (direct_ok(k)) return "direct";
    if (ot__wino_ok(k)) {
        *tile = ot__wino_scratch(k);
        return ot__wino_name(k);
    }
    if (pointwise(g)) return "1x1 gemm, no im2col";
    *tile = (size_t)(g->xc * ksize(g) * tile_cols(g, es) * es);
    return "im2col + gemm";
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
 * p0 + np) between col (rows x np) and x, X of one batch and group: any
 * geometry, one offset computation per element. */
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

/* Whether the geometry is 1-D or 2-D (its last spatial dim trivial): then
 * the fast gather below applies. */
static bool planar(const ot__conv_geom *g)
{
    return g->k[2] == 1 && g->xp[2] == 1 && g->sp[2] == 1 && g->lo[2] == 0;
}

/* The output columns [*a, *b) of a row of OW that read inside the input
 * row for kernel column kw (the rest read padding). */
static void inside(const ot__conv_geom *g, int64_t kw, int64_t *a, int64_t *b)
{
    int64_t s = g->stride[1], base = kw * g->dil[1] - g->lo[1], w = g->xp[1], ow = g->sp[1];
    int64_t lo = base >= 0 ? 0 : (-base + s - 1) / s;          /* first with iw >= 0 */
    int64_t hi = w - base <= 0 ? 0 : (w - base + s - 1) / s;  /* first with iw >= w */
    *a = lo < ow ? lo : ow;
    *b = hi < *a ? *a : hi < ow ? hi : ow;
}

static int64_t clamp(int64_t v, int64_t hi) { return v < 0 ? 0 : v > hi ? hi : v; }

/* im2col for planar geometries: per row (channel, kernel position) and
 * output row segment, zeros where the window reads padding and a copy (a
 * strided gather, or memcpy at stride 1) of the rest; the scatter adds.
 * Divisions stay out of the inner loops (they cost as much as a copy). */
#define IM2COL_2D(T, name)                                                                   \
    static void name(const ot__conv_geom *g, T *x, T *col, int64_t p0, int64_t np,        \
                     bool scatter)                                                           \
    {                                                                                        \
        int64_t kh = g->k[0], kw = g->k[1], ow_n = g->sp[1], H = g->xp[0], W = g->xp[1];     \
        int64_t s1 = g->stride[1];                                                           \
        for (int64_t r = 0; r < g->xc * kh * kw; r++) {                                      \
            int64_t c = r / (kh * kw), qh = r / kw % kh, qw = r % kw, a0, b0;                \
            T *row = col + r * np, *xc = x + c * H * W;                                      \
            int64_t off = qw * g->dil[1] - g->lo[1];                                         \
            inside(g, qw, &a0, &b0);                                                         \
            int64_t oh = p0 / ow_n, ow = p0 % ow_n;                                          \
            for (int64_t j = 0; j < np; oh++, ow = 0) {                                      \
                int64_t len = ow_n - ow < np - j ? ow_n - ow : np - j, a = 0, b = 0;         \
                int64_t ih = oh * g->stride[0] + qh * g->dil[0] - g->lo[0];                  \
                T *dst = row + j;                                                            \
                if (ih >= 0 && ih < H) {                                                     \
                    a = clamp(a0 - ow, len);                                                 \
                    b = clamp(b0 - ow, len);                                                 \
                    T *src = xc + ih * W + (ow + a) * s1 + off;                              \
                    if (scatter)                                                             \
                        for (int64_t t = a; t < b; t++) src[(t - a) * s1] += dst[t];         \
                    else if (s1 == 1)                                                        \
                        memcpy(dst + a, src, (size_t)(b - a) * sizeof(T));                   \
                    else                                                                     \
                        for (int64_t t = a; t < b; t++) dst[t] = src[(t - a) * s1];          \
                }                                                                            \
                if (!scatter) {                                                              \
                    for (int64_t t = 0; t < a; t++) dst[t] = 0;                              \
                    for (int64_t t = b; t < len; t++) dst[t] = 0;                            \
                }                                                                            \
                j += len;                                                                    \
            }                                                                                \
        }                                                                                    \
    }
IM2COL_2D(float, im2col2d_f32)
IM2COL_2D(double, im2col2d_f64)
#undef IM2COL_2D

static void im2col(const tens *t, const ot__conv_geom *g, char *x, char *col, int64_t p0,
                   int64_t np, bool scatter)
{
    bool f32 = t->dt == OT_F32;
    if (planar(g) && f32) im2col2d_f32(g, (float *)x, (float *)col, p0, np, scatter);
    else if (planar(g)) im2col2d_f64(g, (double *)x, (double *)col, p0, np, scatter);
    else if (f32) im2col_f32(g, (float *)x, (float *)col, p0, np, scatter);
    else im2col_f64(g, (double *)x, (double *)col, p0, np, scatter);
}

/* One batch and group over every tile of S positions. */
static void gemm_group(const tens *t, const ot__conv_geom *g, int op, int64_t n, int64_t grp,
                       char *col, ot__gemm_fn *run, const ot__conv_epi *epi)
{
    int64_t es = t->es, kk = ksize(g), rows = g->xc * kk, P = ssize(g);
    char *x = t->p[0] + ((n * g->groups + grp) * g->xc * xsize(g)) * es;
    char *s = t->p[1] + ((n * g->groups + grp) * g->sc * P) * es;
    char *w = t->p[2] + (grp * g->sc * rows) * es;
    bool pw = pointwise(g);
    int64_t tc = pw ? P : tile_cols(g, es);
    for (int64_t p0 = 0; p0 < P; p0 += tc) {
        int64_t np = P - p0 < tc ? P - p0 : tc, ld = pw ? P : np;
        if (pw) col = x;
        if (op == OT_OP_CONV) {
            if (!pw) im2col(t, g, x, col, p0, np, false);
            run(&(ot__gemm){t->dt, w, col, s + p0 * es, false, false, g->sc, np, rows, rows, ld, P,
                            1.0, 0.0});
            if (epi) epi->fn(epi->ctx, &(ot__conv_block){n, grp * g->sc, g->sc, p0, np});
        } else if (op == OT_OP_CONV_WGRAD) {
            if (!pw) im2col(t, g, x, col, p0, np, false);
            run(&(ot__gemm){t->dt, s + p0 * es, col, w, false, true, g->sc, rows, np, P, ld, rows,
                            1.0, 1.0});
        } else {
            run(&(ot__gemm){t->dt, w, s + p0 * es, col, true, false, rows, np, g->sc, rows, P, ld,
                            1.0, pw ? 1.0 : 0.0});
            if (!pw) im2col(t, g, x, col, p0, np, true);
        }
    }
    if (epi && op == OT_OP_CONV_TRANSPOSE)
        epi->fn(epi->ctx, &(ot__conv_block){n, grp * g->xc, g->xc, 0, xsize(g)});
}

/* A depthwise conv: each output channel reads its one input channel. */
#define DIRECT(T, name)                                                                      \
    static void name(const ot__conv_geom *g, const T *x, const T *w, T *s, int64_t nc)       \
    {                                                                                        \
        int64_t kk = ksize(g), P = ssize(g), X = xsize(g);                                   \
        const T *xc = x + nc * X, *wc = w + (nc % g->groups) * kk;                           \
        int64_t p[3] = {0, 0, 0};                                                            \
        for (int64_t j = 0; j < P; j++) {                                                    \
            double acc = 0;                                                                  \
            int64_t q[3] = {0, 0, 0};                                                        \
            for (int64_t r = 0; r < kk; r++) {                                               \
                int64_t off = x_off(g, 0, q, p);                                             \
                if (off >= 0) acc += (double)xc[off] * (double)wc[r];                        \
                for (int d = 2; d >= 0 && ++q[d] == g->k[d]; d--) q[d] = 0;                  \
            }                                                                                \
            s[nc * P + j] = (T)acc;                                                          \
            for (int d = 2; d >= 0 && ++p[d] == g->sp[d]; d--) p[d] = 0;                     \
        }                                                                                    \
    }
DIRECT(float, direct_f32)
DIRECT(double, direct_f64)
#undef DIRECT

/* o += w * x over n elements that do not overlap (restrict: no runtime
 * overlap checks); GCC's -O2 cost model leaves a loop of unknown count
 * scalar, so GCC gets the dynamic one here (3x on depthwise rows). */
#if defined(__GNUC__) && !defined(__clang__)
#define VECTORISE __attribute__((optimize("tree-vectorize", "vect-cost-model=dynamic")))
#else
#define VECTORISE
#endif
#define AXPY(T)                                                                               \
    VECTORISE static void axpy_##T(T *restrict o, const T *restrict x, T w, int64_t n)                  \
    {                                                                                        \
        for (int64_t t = 0; t < n; t++) o[t] += w * x[t];                                    \
    }
AXPY(float)
AXPY(double)
#undef AXPY

/* A planar depthwise conv: per tap, its weight times the input row
 * segment the tap reads, added into each output row (a loop the compiler
 * vectorises at stride 1), padding skipped; each output sums its taps in
 * order, as the reference does. */
#define DEPTHWISE_2D(T, name)                                                                \
    static void name(const ot__conv_geom *g, const T *x, const T *w, T *s, int64_t nc)       \
    {                                                                                        \
        int64_t kh = g->k[0], kw = g->k[1], OH = g->sp[0], OW = g->sp[1], H = g->xp[0];      \
        int64_t W = g->xp[1], s1 = g->stride[1];                                             \
        const T *xc = x + nc * H * W, *wc = w + (nc % g->groups) * kh * kw;                  \
        T *so = s + nc * OH * OW;                                                            \
        for (int64_t t = 0; t < OH * OW; t++) so[t] = 0;                                     \
        for (int64_t q = 0; q < kh * kw; q++) {                                              \
            int64_t qh = q / kw, qw = q % kw, a, b;                                          \
            inside(g, qw, &a, &b);                                                           \
            const T wv = wc[q];                                                              \
            for (int64_t oh = 0; oh < OH; oh++) {                                            \
                int64_t ih = oh * g->stride[0] + qh * g->dil[0] - g->lo[0];                  \
                if (ih < 0 || ih >= H) continue;                                             \
                const T *src = xc + ih * W + a * s1 + qw * g->dil[1] - g->lo[1];             \
                T *o = so + oh * OW;                                                         \
                if (s1 == 1)                                                                 \
                    axpy_##T(o + a, src, wv, b - a);                                         \
                else                                                                         \
                    for (int64_t t = a; t < b; t++) o[t] += wv * src[(t - a) * s1];          \
            }                                                                                \
        }                                                                                    \
    }
DEPTHWISE_2D(float, depthwise2d_f32)
DEPTHWISE_2D(double, depthwise2d_f64)
#undef DEPTHWISE_2D

/* A planar depthwise conv at stride 1 on narrow planes: the rows above
 * are too short for their loops (28 columns: 1.6 vectors a call, two
 * calls a PyTorch run's time). The plane is copied once into a buffer
 * with a zero border, rows wp = OW + (kw - 1) dil wide, so that output
 * row oh's window row starts wp (kh - 1) dil behind and every tap is one
 * axpy over all OH rows at once (columns OW .. wp - 1 of each output row
 * are never copied out). The padding's terms w * 0 are then added where
 * the rows above skip them: the same sums, since a sum that starts at +0
 * is never -0 and adding +-0 changes no other value, when w is finite
 * (padded_fits checks). */
#define PADDED_COLS 4096  /* output columns: the buffer's rows stay short */
#define PADDED_TAPS 64    /* kernel taps (kh kw): their offsets are on the stack */
static bool padded_fits(const ot__conv_geom *g)
{
    return planar(g) && g->stride[0] == 1 && g->stride[1] == 1 && g->sp[1] < PADDED_COLS &&
           g->k[0] * g->k[1] <= PADDED_TAPS && g->dil[0] < PADDED_COLS && g->dil[1] < PADDED_COLS;
}

/* The buffer's elements: the padded plane, a tail its last taps read past
 * it, the output rows. */
static int64_t padded_elems(const ot__conv_geom *g)
{
    int64_t wp = g->sp[1] + (g->k[1] - 1) * g->dil[1], hp = g->sp[0] + (g->k[0] - 1) * g->dil[0];
    return hp * wp + (g->k[1] - 1) * g->dil[1] + g->sp[0] * wp;
}

/* o[j] = the sum over taps q < nq, in order from +0, of w[q] * x[off[q] + j]
 * for j < n: blocks of four runs of TAP_LANES outputs summed in registers
 * over all taps, then stored, then runs one at a time (an axpy per tap loaded and stored o nine
 * times); four, so that four sums' additions overlap (each run's lanes
 * are one vector register, which a single array of four runs was not). */
#define TAP_LANES 16
#define TAP_RUN(T, acc, j)                                                                   \
    for (int l = 0; l < TAP_LANES; l++) acc[l] += wq * xq[(j) + l]
#define TAPS(T)                                                                              \
    WIDE VECTORISE static void taps_##T(T *restrict o, const T *restrict x, const int64_t *off, \
                                        const T *w, int nq, int64_t n)                       \
    {                                                                                        \
        int64_t j = 0;                                                                       \
        for (; j + 4 * TAP_LANES <= n; j += 4 * TAP_LANES) {                                 \
            T a0[TAP_LANES] = {0}, a1[TAP_LANES] = {0}, a2[TAP_LANES] = {0}, a3[TAP_LANES] = {0}; \
            for (int q = 0; q < nq; q++) {                                                   \
                const T wq = w[q], *xq = x + off[q] + j;                                     \
                TAP_RUN(T, a0, 0);                                                           \
                TAP_RUN(T, a1, TAP_LANES);                                                   \
                TAP_RUN(T, a2, 2 * TAP_LANES);                                               \
                TAP_RUN(T, a3, 3 * TAP_LANES);                                               \
            }                                                                                \
            memcpy(o + j, a0, sizeof a0);                                                    \
            memcpy(o + j + TAP_LANES, a1, sizeof a1);                                        \
            memcpy(o + j + 2 * TAP_LANES, a2, sizeof a2);                                    \
            memcpy(o + j + 3 * TAP_LANES, a3, sizeof a3);                                    \
        }                                                                                    \
        for (; j + TAP_LANES <= n; j += TAP_LANES) {                                         \
            T a0[TAP_LANES] = {0};                                                           \
            for (int q = 0; q < nq; q++) {                                                   \
                const T wq = w[q], *xq = x + off[q] + j;                                     \
                TAP_RUN(T, a0, 0);                                                           \
            }                                                                                \
            memcpy(o + j, a0, sizeof a0);                                                    \
        }                                                                                    \
        for (; j < n; j++) {                                                                 \
            T acc = 0;                                                                       \
            for (int q = 0; q < nq; q++) acc += w[q] * x[off[q] + j];                        \
            o[j] = acc;                                                                      \
        }                                                                                    \
    }
TAPS(float)
TAPS(double)
#undef TAPS
#undef TAP_RUN

#define DEPTHWISE_PADDED(T, name)                                                            \
    static bool name(const ot__conv_geom *g, const T *x, const T *w, T *s, int64_t nc, T *buf) \
    {                                                                                        \
        int64_t kh = g->k[0], kw = g->k[1], OH = g->sp[0], OW = g->sp[1], H = g->xp[0];      \
        int64_t W = g->xp[1], d0 = g->dil[0], d1 = g->dil[1], wp = OW + (kw - 1) * d1;       \
        int64_t hp = OH + (kh - 1) * d0, lo = g->lo[1];                                      \
        const T *xc = x + nc * H * W, *wc = w + (nc % g->groups) * kh * kw;                  \
        for (int64_t q = 0; q < kh * kw; q++)                                                \
            if (!isfinite(wc[q])) return false;                                              \
        int64_t c0 = clamp(lo, wp), c1 = clamp(lo + W, wp);   /* the input's columns */      \
        T *xb = buf, *ob = buf + hp * wp + (kw - 1) * d1;                                    \
        for (int64_t r = 0; r < hp; r++) {                                                   \
            int64_t ih = r - g->lo[0];                                                       \
            T *row = xb + r * wp;                                                            \
            if (ih < 0 || ih >= H || c1 <= c0) {                                             \
                memset(row, 0, sizeof(T) * (size_t)wp);                                      \
                continue;                                                                    \
            }                                                                                \
            memset(row, 0, sizeof(T) * (size_t)c0);                                          \
            memcpy(row + c0, xc + ih * W + c0 - lo, sizeof(T) * (size_t)(c1 - c0));          \
            memset(row + c1, 0, sizeof(T) * (size_t)(wp - c1));                              \
        }                                                                                    \
        memset(xb + hp * wp, 0, sizeof(T) * (size_t)((kw - 1) * d1));                        \
        int64_t off[PADDED_TAPS];                                                \
        for (int64_t q = 0; q < kh * kw; q++) off[q] = q / kw * d0 * wp + q % kw * d1;       \
        taps_##T(ob, xb, off, wc, (int)(kh * kw), OH * wp);                                  \
        T *so = s + nc * OH * OW;                                                            \
        for (int64_t oh = 0; oh < OH; oh++)                                                  \
            memcpy(so + oh * OW, ob + oh * wp, sizeof(T) * (size_t)OW);                      \
        return true;                                                                         \
    }
DEPTHWISE_PADDED(float, padded_f32)
DEPTHWISE_PADDED(double, padded_f64)
#undef DEPTHWISE_PADDED

/* Channel by channel (batch and group nc), each handed to the epilogue
 * when written; buf: padded_elems elements when padded_fits. */
static void direct(const tens *t, const ot__conv_geom *g, const ot__conv_epi *epi, char *buf)
{
    bool f32 = t->dt == OT_F32, padded = padded_fits(g);
    float *xf = (float *)t->p[0], *sf = (float *)t->p[1], *wf = (float *)t->p[2];
    double *xd = (double *)t->p[0], *sd = (double *)t->p[1], *wd = (double *)t->p[2];
    for (int64_t nc = 0; nc < g->n * g->groups; nc++) {
        bool done = padded && (f32 ? padded_f32(g, xf, wf, sf, nc, (float *)buf)
                                   : padded_f64(g, xd, wd, sd, nc, (double *)buf));
        if (done) {   /* else a weight is inf or NaN: the padding's terms stay out */
        } else if (planar(g) && f32) depthwise2d_f32(g, xf, wf, sf, nc);
        else if (planar(g)) depthwise2d_f64(g, xd, wd, sd, nc);
        else if (f32) direct_f32(g, xf, wf, sf, nc);
        else direct_f64(g, xd, wd, sd, nc);
        if (epi) epi->fn(epi->ctx, &(ot__conv_block){nc / g->groups, nc % g->groups, 1, 0, ssize(g)});
    }
}

/* The result's channels and positions per channel (conv: S; conv_transpose: X). */
static int64_t out_channels(const ot_kernel *k)
{
    return k->conv.groups * (k->conv_op == OT_OP_CONV ? k->conv.sc : k->conv.xc);
}
static int64_t out_positions(const ot_kernel *k)
{
    return k->conv_op == OT_OP_CONV ? ssize(&k->conv) : xsize(&k->conv);
}

/* The whole result, batch by batch, to the epilogue: where no algorithm
 * ran (a result of zeros) or the result was copied out at the end. */
static void epi_all(const ot_kernel *k, const ot__conv_epi *epi)
{
    for (int64_t n = 0; epi && n < k->conv.n; n++)
        epi->fn(epi->ctx, &(ot__conv_block){n, 0, out_channels(k), 0, out_positions(k)});
}

void ot__run_conv(const ot_kernel *k, char *const base[2], char *dst, char *scratch)
{
    ot__run_conv_epi(k, base, dst, scratch, NULL);
}

/* Winograd's result, or false when it holds an inf or a NaN: its
 * transforms add and subtract neighbouring inputs before the products (a
 * tile's values reach 81 C max|x| max|w| on the way), so values near
 * FLT_MAX overflow where the direct sums do not, and one inf or NaN input
 * spreads over its whole tile (inf - inf). Such a call runs again as
 * im2col, exact in its sums' order (a misuse probe: x = +-3e38, w = 1e-3
 * gave NaN for -1.44e37). Checking the result, not the operands, costs
 * one pass over the output (a 512-channel layer's weights are 24 times
 * its output). */
static bool wino_done(const ot_kernel *k, const ot__conv_geom *g, const tens *t, char *scratch)
{
    int out = k->conv_op == OT_OP_CONV_TRANSPOSE ? 0 : k->conv_op == OT_OP_CONV ? 1 : 2;
    ot__wino_run(k, t->p, scratch);
    return ot__wino_finite((const float *)t->p[out], numel_of(g, out));
}

void ot__run_conv_epi(const ot_kernel *k, char *const base[2], char *dst, char *scratch,
                      const ot__conv_epi *epi)
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
    const ot__conv_epi *blocks = packed[2] ? NULL : epi;   /* else whole, once copied out */
    if (direct_ok(k) && out_n) {
        direct(&t, g, blocks, scratch);
        blocks = NULL;
    } else if (out_n && ot__wino_ok(k) && wino_done(k, g, &t, scratch)) {
        /* Winograd's tiles span images, so its epilogue runs after it, on
         * the whole result (epi_all below): correct, not yet in cache. */
    } else if (out_n) {
        if (k->conv_op != OT_OP_CONV) memset(t.p[r[2]], 0, (size_t)(out_n * t.es));
        ot__gemm_fn *run = ot__gemm_pick();
        bool empty = k->conv_op == OT_OP_CONV_TRANSPOSE && g->sc == 0;   /* no terms: zeros */
        if (g->xc * ksize(g) > 0 && ssize(g) > 0 && !empty) {
            for (int64_t n = 0; n < g->n; n++)
                for (int64_t grp = 0; grp < g->groups; grp++)
                    gemm_group(&t, g, k->conv_op, n, grp, scratch, run, blocks);
            blocks = NULL;
        } else if (k->conv_op == OT_OP_CONV) {
            memset(t.p[1], 0, (size_t)(out_n * t.es));
        }
    }
    if (packed[2]) copy_view(g, r[2], v[2], dst, t.p[r[2]], t.es, true);
    if (out_n && (blocks || packed[2])) epi_all(k, epi);
}

/* ---- epilogues on blocks of the result ------------------------------------ */

static int64_t numel_dims(const ot_kernel *e)
{
    int64_t n = 1;
    for (int d = 0; d < e->ndim; d++) n *= e->dims[d];
    return n;
}

/* Whether view v walks e's dims row-major contiguously from offset 0. */
static bool walks_flat(const ot_kernel *e, const ot_view *v)
{
    int64_t st = 1;
    for (int d = e->ndim - 1; d >= 0; d--) {
        if (e->dims[d] != 1 && v->strides[d] != st) return false;
        st *= e->dims[d];
    }
    return v->offset == 0;
}

/* A block is a box of e's iteration space when e's innermost dim holds
 * whole channels: that dim is a product of trailing dims of the result
 * (coalescing merges whole dims), so P positions, a channel's or several
 * channels' (one batch's) worth, and both steps of the box are strides. */
bool ot__conv_epi_fits(const ot_kernel *k, const ot_kernel *e)
{
    const ot__conv_geom *g = &k->conv;
    int ro = k->conv_op == OT_OP_CONV ? 1 : 0;
    if (k->kind != OT_KER_CONV || k->conv_op == OT_OP_CONV_WGRAD || k->store.space != OT_SPACE_TEMP ||
        k->store.offset != 0 || !contig(g, ro, &k->store))
        return false;
    if (e->kind != OT_KER_EW || e->col_blocked || e->nload > OT_CONV_EPI_LOADS || e->ndim < 1)
        return false;
    int64_t P = out_positions(k), n = numel_of(g, ro);
    if (n == 0 || numel_dims(e) != n || e->dims[e->ndim - 1] % P) return false;
    for (int l = 0; l < e->nload; l++) {
        const ot_view *v = &e->loads[l];
        if (v->space == OT_SPACE_TEMP && v->index == k->store.index && !walks_flat(e, v)) return false;
    }
    return true;
}

/* The offset of view v at element i of e's iteration space (row-major). */
static int64_t flat_off(const ot_kernel *e, const ot_view *v, int64_t i)
{
    int64_t off = 0;
    for (int d = e->ndim - 1; d >= 0; d--) {
        off += (i % e->dims[d]) * v->strides[d];
        i /= e->dims[d];
    }
    return off;
}

/* View v of e over the box from element i0: rows of `step` elements (nc of
 * them: one step needs two rows), columns at v's innermost stride. */
static ot_view narrow(const ot_kernel *e, const ot_view *v, int64_t i0, int64_t step, int64_t nc)
{
    ot_view w = *v;
    int64_t at = flat_off(e, v, i0);
    w.offset += at;
    w.strides[0] = nc > 1 ? flat_off(e, v, i0 + step) - at : 0;
    w.strides[1] = v->strides[e->ndim - 1];
    for (int d = 2; d < OT_MAX_DIMS; d++) w.strides[d] = 0;
    return w;
}

void ot__conv_box(const ot_kernel *k, const ot_kernel *e, const ot__conv_block *b, ot_kernel *box,
                  ot_view *loads, ot_xstore *xs)
{
    int64_t P = out_positions(k), i0 = (b->n * out_channels(k) + b->c0) * P + b->p0;
    *box = *e;
    box->ndim = 2;
    box->dims[0] = b->nc;
    box->dims[1] = b->np;
    box->loads = loads;
    box->xstores = xs;
    for (int l = 0; l < e->nload; l++) loads[l] = narrow(e, &e->loads[l], i0, P, b->nc);
    box->store = narrow(e, &e->store, i0, P, b->nc);
    for (int x = 0; x < e->nxstore; x++) {
        xs[x] = e->xstores[x];
        xs[x].view = narrow(e, &e->xstores[x].view, i0, P, b->nc);
    }
    /* e's rows may be whole vectors where the box's are not: e's flag let
     * rows of 4 doubles under 8 lanes run as vectors, writing past the
     * output (fuzz seed 6802 tree 25038). The inner stride, all run_rows
     * depends on, is e's. */
    box->row_runs = ot__exec_row_runs(box);
}

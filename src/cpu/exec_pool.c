/*
 * exec_pool.c - the cpu backend's pooling kernels (OT_KER_POOL: max_pool,
 * avg_pool, max_pool_grad, max_pool_take, avg_pool_grad) over internal.h's
 * loop (ot__pool_geom), one direct loop per dtype: per (batch, channel)
 * plane and output window, the window's taps inside the input are worked
 * out once (so the inner loop has no bounds test) and walked in row-major
 * order over the operands' strides. Views may be strided or transposed;
 * nothing is copied and no scratch is needed.
 *
 * The common case (1-D or 2-D, no dilation, every operand's last spatial
 * dim contiguous) takes a fast path per plane: the windows wholly inside
 * the input (the interior) run as tight row loops with the taps at fixed
 * offsets; the border windows (padding, ceil mode) keep the generic code.
 * Both visit the windows in the same order and the taps in row-major
 * order, so results are bit for bit the generic path's.
 */
#include "cpu.h"

#include <math.h>

/* A window's taps inside the input: per dim, the first and the end tap q
 * and the input index of tap 0. */
typedef struct win {
    int64_t q0[3], q1[3], i0[3];
} win;

/* Dim d of window p (its position in that dim) into w, and avg_pool's
 * divisor's factor for the dim into *cnt (internal.h's rule); no division
 * unless the window is dilated. */
static void dim_of(const ot__pool_geom *g, int d, int64_t p, win *w, int64_t *cnt)
{
    int64_t s = p * g->stride[d] - g->lo[d], dil = g->dil[d], in = g->in[d], k = g->k[d];
    int64_t lo = s >= 0 ? 0 : dil == 1 ? -s : (-s + dil - 1) / dil;
    int64_t hi = in <= s ? 0 : dil == 1 ? in - s : (in - s + dil - 1) / dil;
    w->q0[d] = lo;
    w->q1[d] = hi < k ? hi : k;
    w->i0[d] = s;
    int64_t end = s + k < in + g->hi[d] ? s + k : in + g->hi[d];
    *cnt = g->excl ? (w->q1[d] > lo ? w->q1[d] - lo : 0) : end - s;
}

/* The three views' element strides per dim (5-D), in the loop's roles: x
 * input-shaped, y output-shaped, o the result. */
typedef struct strides {
    const int64_t *x, *y, *o;
} strides;

static int64_t at(const int64_t *i, const int64_t *st) { return i[0] * st[2] + i[1] * st[3] + i[2] * st[4]; }

/* The fast path's frame: a pool as 2-D, [0] the rows and [1] the columns
 * (a 1-D pool: one row), with the operands' row strides (columns are
 * contiguous) and the interior windows, rows and columns beg .. end - 1. */
typedef struct fast {
    int rd, cd;   /* the geometry's dims of the rows and the columns */
    int64_t in[2], out[2], k[2], st[2], lo[2], beg[2], end[2];
    int64_t xr, yr, orow;
} fast;

/* Whether view st (NULL: an operand the op lacks) has contiguous columns;
 * its row stride into *r. */
static bool cols_contiguous(const int64_t *st, const fast *f, int64_t *r)
{
    *r = st ? st[2 + f->rd] : 0;
    return !st || st[2 + f->cd] == 1;
}

/* Whether pool g over views s takes the fast path; its frame into f. */
static bool fast_of(const ot__pool_geom *g, const strides *s, fast *f)
{
    if (g->in[2] != 1 || g->k[2] != 1 || g->out[2] != 1 || g->dil[0] != 1 || g->dil[1] != 1)
        return false;
    bool one_d = g->in[1] == 1 && g->k[1] == 1 && g->out[1] == 1;
    f->rd = one_d ? 1 : 0;
    f->cd = one_d ? 0 : 1;
    bool ok = true;
    for (int i = 0; i < 2; i++) {
        int d = i == 0 ? f->rd : f->cd;
        f->in[i] = g->in[d], f->out[i] = g->out[d], f->k[i] = g->k[d];
        f->st[i] = g->stride[d], f->lo[i] = g->lo[d];
        /* window j is interior when j * st - lo >= 0 and j * st - lo + k <= in */
        int64_t last = f->in[i] - f->k[i] + f->lo[i];
        f->beg[i] = (f->lo[i] + f->st[i] - 1) / f->st[i];
        f->end[i] = last < 0 ? 0 : last / f->st[i] + 1;
        if (f->end[i] > f->out[i]) f->end[i] = f->out[i];
        ok &= f->beg[i] < f->end[i];
    }
    ok &= cols_contiguous(s->x, f, &f->xr);
    ok &= cols_contiguous(s->y, f, &f->yr);
    return ok & cols_contiguous(s->o, f, &f->orow);
}

/* Per dtype T (suffix S): argmax_S finds window w's first maximum in
 * plane x (its input position into i, its value into *m; false when the
 * window is all padding: *m is then -inf); sum_S sums the window of x or,
 * with dx, adds v to each of its taps in dx; window_S runs one window of
 * the op, plane_S one plane. */
#define POOL_FNS(T, S)                                                                        \
    static bool argmax_##S(const ot__pool_geom *g, const T *x, const int64_t *xs, const win *w, \
                           int64_t *i, T *m)                                                  \
    {                                                                                         \
        bool found = false;                                                                   \
        *m = (T)-INFINITY;                                                                    \
        for (int64_t a = w->q0[0]; a < w->q1[0]; a++)                                         \
            for (int64_t b = w->q0[1]; b < w->q1[1]; b++) {                                   \
                int64_t ia = w->i0[0] + a * g->dil[0], ib = w->i0[1] + b * g->dil[1];          \
                int64_t ic = w->i0[2] + w->q0[2] * g->dil[2], st = g->dil[2] * xs[4];         \
                const T *r = x + ia * xs[2] + ib * xs[3] + ic * xs[4];                        \
                if (!found && w->q0[2] < w->q1[2])                                            \
                    found = true, i[0] = ia, i[1] = ib, i[2] = ic;                            \
                for (int64_t c = w->q0[2]; c < w->q1[2]; c++, r += st) {                      \
                    T v = *r;                                                                 \
                    if (!(v > *m) && v == v) continue;                                        \
                    *m = v, i[0] = ia, i[1] = ib, i[2] = w->i0[2] + c * g->dil[2];            \
                    if (v != v) return true; /* a NaN wins */                                 \
                }                                                                             \
            }                                                                                 \
        return found;                                                                         \
    }                                                                                         \
    static double sum_##S(const ot__pool_geom *g, const T *x, T *dx, T v, const int64_t *xs,  \
                          const win *w)                                                       \
    {                                                                                         \
        double sum = 0;                                                                       \
        int64_t st = g->dil[2] * xs[4];                                                       \
        for (int64_t a = w->q0[0]; a < w->q1[0]; a++)                                         \
            for (int64_t b = w->q0[1]; b < w->q1[1]; b++) {                                   \
                int64_t off = (w->i0[0] + a * g->dil[0]) * xs[2] +                            \
                              (w->i0[1] + b * g->dil[1]) * xs[3] +                            \
                              (w->i0[2] + w->q0[2] * g->dil[2]) * xs[4];                      \
                if (dx)                                                                       \
                    for (int64_t c = w->q0[2]; c < w->q1[2]; c++, off += st) dx[off] += v;    \
                else                                                                          \
                    for (int64_t c = w->q0[2]; c < w->q1[2]; c++, off += st) sum += x[off];   \
            }                                                                                 \
        return sum;                                                                           \
    }                                                                                         \
    /* One window w of the op: po its place in the output-shaped view, div   \
     * avg_pool's divisor. */                                                                 \
    static inline void window_##S(const ot__pool_geom *g, const T *x, const T *y, T *o,       \
                                  const strides *s, const win *w, int64_t po, double div)     \
    {                                                                                         \
        int64_t i[3];                                                                         \
        T v;                                                                                  \
        switch (g->op) {                                                                      \
        case OT_OP_MAX_POOL: argmax_##S(g, x, s->x, w, i, &v); o[po] = v; break;              \
        case OT_OP_MAX_POOL_TAKE: o[po] = argmax_##S(g, x, s->x, w, i, &v) ? y[at(i, s->y)] : 0; break; \
        case OT_OP_MAX_POOL_GRAD:                                                             \
            if (argmax_##S(g, x, s->x, w, i, &v)) o[at(i, s->o)] += y[po];                    \
            break;                                                                            \
        case OT_OP_AVG_POOL: o[po] = (T)(sum_##S(g, x, NULL, 0, s->x, w) / div); break;       \
        default: sum_##S(g, NULL, o, (T)(y[po] / div), s->o, w);                              \
        }                                                                                     \
    }                                                                                         \
    /* Windows p[cd] = from .. to - 1 of one plane, the other dims at p's   \
     * places; each dim's part of them worked out once. */                    \
    static void span_##S(const ot__pool_geom *g, const T *x, const T *y, T *o,                \
                         const strides *s, int64_t *p, int cd, int64_t from, int64_t to)      \
    {                                                                                         \
        int64_t cnt[3];                                                                       \
        bool back = g->op == OT_OP_MAX_POOL_GRAD || g->op == OT_OP_AVG_POOL_GRAD;             \
        const int64_t *ps = back ? s->y : s->o;   /* the output-shaped view's */              \
        win w;                                                                                \
        for (int d = 0; d < 3; d++)                                                           \
            if (d != cd) dim_of(g, d, p[d], &w, &cnt[d]);                                     \
        for (p[cd] = from; p[cd] < to; p[cd]++) {                                             \
            dim_of(g, cd, p[cd], &w, &cnt[cd]);                                               \
            window_##S(g, x, y, o, s, &w, at(p, ps), (double)(cnt[0] * cnt[1] * cnt[2]));     \
        }                                                                                     \
    }                                                                                         \
    /* The windows of one plane (the generic path). */                       \
    static void plane_##S(const ot__pool_geom *g, const T *x, const T *y, T *o,               \
                          const strides *s)                                                   \
    {                                                                                         \
        int64_t p[3] = {0};                                                                   \
        for (p[0] = 0; p[0] < g->out[0]; p[0]++)                                              \
            for (p[1] = 0; p[1] < g->out[1]; p[1]++) span_##S(g, x, y, o, s, p, 2, 0, g->out[2]); \
    }                                                                                         \
    /* Window r's first maximum (row-major, a NaN wins, all -inf: tap 0):     \
     * its tap into *ta, *tb. Without branches (the data decide them): a tap \
     * takes over when larger or the first NaN, so a NaN, once taken, stays. */ \
    static inline __attribute__((always_inline)) void                                         \
    amax_##S(const T *r, int64_t rs, int64_t kh, int64_t kw, int64_t *ta, int64_t *tb)        \
    {                                                                                         \
        T m = r[0];                                                                           \
        int64_t ba = 0, bb = 0;                                                               \
        for (int64_t a = 0; a < kh; a++, r += rs)                                             \
            for (int64_t b = 0; b < kw; b++) {                                                \
                T v = r[b];                                                                   \
                bool up = (v > m) | ((v != v) & (m == m));                                    \
                m = up ? v : m, ba = up ? a : ba, bb = up ? b : bb;                           \
            }                                                                                 \
        *ta = ba, *tb = bb;                                                                   \
    }                                                                                         \
    /* max_pool_take's or max_pool_grad's interior row oh (see row_), the    \
     * kernel kh x kw a constant where inlined so. */                         \
    static inline __attribute__((always_inline)) void                                         \
    argrow_##S(const fast *f, int op, const T *x, const T *y, T *o, int64_t oh, int64_t kh,   \
               int64_t kw)                                                                    \
    {                                                                                         \
        int64_t i0 = oh * f->st[0] - f->lo[0], ta, tb;                                        \
        for (int64_t j = f->beg[1]; j < f->end[1]; j++) {                                     \
            int64_t c = j * f->st[1] - f->lo[1];   /* the window's first input column */      \
            amax_##S(x + i0 * f->xr + c, f->xr, kh, kw, &ta, &tb);                            \
            if (op == OT_OP_MAX_POOL_TAKE)                                                    \
                o[oh * f->orow + j] = y[(i0 + ta) * f->yr + c + tb];                          \
            else                                                                              \
                o[(i0 + ta) * f->orow + c + tb] += y[oh * f->yr + j];                         \
        }                                                                                     \
    }                                                                                         \
    /* argrow_'s 2 x 2 windows at column stride 2 (they do not overlap in a  \
     * row): one vector loop over the row, the tap chosen by amax_'s rule as \
     * selects, the gradient added to every tap (0 where not chosen: the    \
     * result was zeroed, so the sums are argrow_'s bit for bit). */        \
    static inline __attribute__((always_inline)) void                                         \
    arg22_##S(const fast *f, int op, const T *x, const T *y, T *o, int64_t oh)                \
    {                                                                                         \
        int64_t i0 = oh * f->st[0] - f->lo[0], j0 = f->beg[1], n = f->end[1] - j0;            \
        int64_t c0 = j0 * 2 - f->lo[1];                                                       \
        const T *x0 = x + i0 * f->xr + c0, *x1 = x0 + f->xr;                                  \
        for (int64_t j = 0; j < n; j++) {                                                     \
            T a = x0[2 * j], b = x0[2 * j + 1], c = x1[2 * j], d = x1[2 * j + 1], m = a;      \
            bool ub = (b > m) | ((b != b) & (m == m));                                        \
            m = ub ? b : m;                                                                   \
            bool uc = (c > m) | ((c != c) & (m == m));                                        \
            m = uc ? c : m;                                                                   \
            bool ud = (d > m) | ((d != d) & (m == m));                                        \
            int t = ud ? 3 : uc ? 2 : ub ? 1 : 0;                                             \
            if (op == OT_OP_MAX_POOL_TAKE) {                                                  \
                const T *y0 = y + i0 * f->yr + c0, *y1 = y0 + f->yr;                          \
                o[oh * f->orow + j0 + j] = t == 0 ? y0[2 * j] : t == 1 ? y0[2 * j + 1]        \
                                         : t == 2 ? y1[2 * j] : y1[2 * j + 1];                \
            } else {                                                                          \
                T g = y[oh * f->yr + j0 + j], *o0 = o + i0 * f->orow + c0, *o1 = o0 + f->orow; \
                o0[2 * j] += t == 0 ? g : 0;                                                  \
                o0[2 * j + 1] += t == 1 ? g : 0;                                              \
                o1[2 * j] += t == 2 ? g : 0;                                                  \
                o1[2 * j + 1] += t == 3 ? g : 0;                                              \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    /* max_pool's interior row: o[j] = max over the taps of window j (its   \
     * taps at x[j * sw + tap]), one pass over the row per tap so that the   \
     * pass can be vectorised; the earlier value stays unless the later is  \
     * larger or the first NaN (amax_'s rule, as values). */                \
    static inline __attribute__((always_inline)) void                                         \
    maxrow_##S(T *o, const T *x, int64_t n, int64_t sw, int64_t xr, int64_t kh, int64_t kw)   \
    {                                                                                         \
        for (int64_t j = 0; j < n; j++) o[j] = x[j * sw];                                     \
        for (int64_t a = 0; a < kh; a++)                                                      \
            for (int64_t b = a == 0; b < kw; b++) {                                           \
                const T *r = x + a * xr + b;                                                  \
                for (int64_t j = 0; j < n; j++) {                                             \
                    T v = r[j * sw], m = o[j];                                                \
                    o[j] = (v > m) | ((v != v) & (m == m)) ? v : m;                           \
                }                                                                             \
            }                                                                                 \
    }                                                                                         \
    /* Interior row oh of plane x/y/o, windows j = f->beg[1] .. end[1] - 1, \
     * window j's tap (a, b) at row oh * st[0] - lo[0] + a and column         \
     * j * st[1] - lo[1] + b of the input-shaped operands. */                 \
    static void row_##S(const fast *f, int op, const T *x, const T *y, T *o, int64_t oh)      \
    {                                                                                         \
        int64_t i0 = oh * f->st[0] - f->lo[0], sw = f->st[1], kh = f->k[0], kw = f->k[1];     \
        int64_t j0 = f->beg[1], n = f->end[1] - j0;                                           \
        double div = (double)(kh * kw);                                                       \
        if (op == OT_OP_MAX_POOL) {                                                           \
            const T *r = x + (i0 * f->xr - f->lo[1] + j0 * sw);                               \
            T *out = o + oh * f->orow + j0;                                                   \
            if (sw == 1) maxrow_##S(out, r, n, 1, f->xr, kh, kw);                             \
            else if (sw == 2) maxrow_##S(out, r, n, 2, f->xr, kh, kw);                        \
            else maxrow_##S(out, r, n, sw, f->xr, kh, kw);                                    \
        } else if (op == OT_OP_MAX_POOL_TAKE || op == OT_OP_MAX_POOL_GRAD) {                  \
            if (kh == 2 && kw == 2 && sw == 2) arg22_##S(f, op, x, y, o, oh);                 \
            else if (kh == 2 && kw == 2) argrow_##S(f, op, x, y, o, oh, 2, 2);                \
            else if (kh == 3 && kw == 3) argrow_##S(f, op, x, y, o, oh, 3, 3);                \
            else argrow_##S(f, op, x, y, o, oh, kh, kw);                                      \
        } else if (op == OT_OP_AVG_POOL) {                                                    \
            for (int64_t j = j0; j < j0 + n; j++) {                                           \
                const T *r = x + (i0 * f->xr + j * sw - f->lo[1]);                            \
                double sum = 0;                                                               \
                for (int64_t a = 0; a < kh; a++, r += f->xr)                                  \
                    for (int64_t b = 0; b < kw; b++) sum += r[b];                             \
                o[oh * f->orow + j] = (T)(sum / div);                                         \
            }                                                                                 \
        } else {                                                                              \
            for (int64_t j = j0; j < j0 + n; j++) {                                           \
                T v = (T)(y[oh * f->yr + j] / div), *d = o + (i0 * f->orow + j * sw - f->lo[1]); \
                for (int64_t a = 0; a < kh; a++, d += f->orow)                                \
                    for (int64_t b = 0; b < kw; b++) d[b] += v;                               \
            }                                                                                 \
        }                                                                                     \
    }                                                                                         \
    /* One plane by the fast path: per output row, the border windows left \
     * of the interior, the interior, those right of it (the generic order). */ \
    static void plane_fast_##S(const ot__pool_geom *g, const fast *f, const T *x, const T *y, \
                               T *o, const strides *s)                                        \
    {                                                                                         \
        int64_t p[3] = {0};                                                                   \
        for (int64_t oh = 0; oh < f->out[0]; oh++) {                                          \
            bool in = oh >= f->beg[0] && oh < f->end[0];                                      \
            int64_t a = in ? f->beg[1] : f->out[1], b = in ? f->end[1] : f->out[1];           \
            p[f->rd] = oh;                                                                    \
            if (a > 0) span_##S(g, x, y, o, s, p, f->cd, 0, a);                               \
            if (in) row_##S(f, g->op, x, y, o, oh);                                           \
            if (b < f->out[1]) span_##S(g, x, y, o, s, p, f->cd, b, f->out[1]);               \
        }                                                                                     \
    }
POOL_FNS(float, f32)
POOL_FNS(double, f64)
#undef POOL_FNS

/* Zeroes a gradient's input-shaped result (it is accumulated into). */
static void zero(const ot__pool_geom *g, char *o, const int64_t *os, int64_t es)
{
    int64_t idx[5] = {0}, d[5] = {g->n, g->c, g->in[0], g->in[1], g->in[2]}, n = 1;
    bool flat = true;   /* row-major contiguous: one memset */
    for (int j = 4; j >= 0; j--) {
        flat &= d[j] == 1 || os[j] == n;
        n *= d[j];
    }
    if (n == 0) return;
    if (flat) {
        memset(o, 0, (size_t)(n * es));
        return;
    }
    do {
        int64_t off = 0;
        for (int j = 0; j < 5; j++) off += idx[j] * os[j];
        memset(o + off * es, 0, (size_t)es);
        int j = 4;
        while (j >= 0 && ++idx[j] == d[j]) idx[j--] = 0;
        if (j < 0) break;
    } while (true);
}

void ot__run_pool(const ot_kernel *k, char *const base[2], char *dst)
{
    const ot__pool_geom *g = &k->pool;
    bool avg_back = g->op == OT_OP_AVG_POOL_GRAD;
    const ot_view *xv = avg_back ? NULL : &k->loads[0];
    const ot_view *yv = avg_back ? &k->loads[0] : k->nload > 1 ? &k->loads[1] : NULL;
    strides s = {.x = xv ? xv->strides : NULL, .y = yv ? yv->strides : NULL,
                 .o = k->store.strides};
    const char *x = avg_back ? NULL : base[0], *y = avg_back ? base[0] : yv ? base[1] : NULL;
    int64_t es = ot_dtype_size((ot_dtype)k->store.dtype);
    if (g->op == OT_OP_MAX_POOL_GRAD || avg_back) zero(g, dst, s.o, es);
    if (g->out[0] * g->out[1] * g->out[2] == 0) return;
    fast f = {0};
    bool quick = fast_of(g, &s, &f);
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t c = 0; c < g->c; c++) {
            /* the plane's first elements (NULL for an operand the op lacks) */
            const char *xp = x ? x + (n * s.x[0] + c * s.x[1]) * es : NULL;
            const char *yp = y ? y + (n * s.y[0] + c * s.y[1]) * es : NULL;
            char *op = dst + (n * s.o[0] + c * s.o[1]) * es;
            if (es == 4 && quick)
                plane_fast_f32(g, &f, (const float *)xp, (const float *)yp, (float *)op, &s);
            else if (es == 4) plane_f32(g, (const float *)xp, (const float *)yp, (float *)op, &s);
            else if (quick)
                plane_fast_f64(g, &f, (const double *)xp, (const double *)yp, (double *)op, &s);
            else plane_f64(g, (const double *)xp, (const double *)yp, (double *)op, &s);
        }
}

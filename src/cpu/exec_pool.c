/*
 * exec_pool.c - the cpu backend's pooling kernels (OT_KER_POOL: max_pool,
 * avg_pool, max_pool_grad, max_pool_take, avg_pool_grad) over internal.h's
 * loop (ot__pool_geom), one direct loop per dtype: per (batch, channel)
 * plane and output window, the window's taps inside the input are worked
 * out once (so the inner loop has no bounds test) and walked in row-major
 * order over the operands' strides. Views may be strided or transposed;
 * nothing is copied and no scratch is needed.
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
    /* The windows of one plane, each dim's part of them worked out once. */                 \
    static void plane_##S(const ot__pool_geom *g, const T *x, const T *y, T *o,               \
                          const strides *s)                                                   \
    {                                                                                         \
        int64_t p[3], cnt[3];                                                                 \
        bool back = g->op == OT_OP_MAX_POOL_GRAD || g->op == OT_OP_AVG_POOL_GRAD;             \
        const int64_t *ps = back ? s->y : s->o;   /* the output-shaped view's */              \
        win w;                                                                                \
        for (p[0] = 0; p[0] < g->out[0]; p[0]++) {                                            \
            dim_of(g, 0, p[0], &w, &cnt[0]);                                                  \
            for (p[1] = 0; p[1] < g->out[1]; p[1]++) {                                        \
                dim_of(g, 1, p[1], &w, &cnt[1]);                                              \
                for (p[2] = 0; p[2] < g->out[2]; p[2]++) {                                    \
                    dim_of(g, 2, p[2], &w, &cnt[2]);                                          \
                    window_##S(g, x, y, o, s, &w, at(p, ps), (double)(cnt[0] * cnt[1] * cnt[2])); \
                }                                                                             \
            }                                                                                 \
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
    for (int64_t n = 0; n < g->n; n++)
        for (int64_t c = 0; c < g->c; c++) {
            /* the plane's first elements (NULL for an operand the op lacks) */
            const char *xp = x ? x + (n * s.x[0] + c * s.x[1]) * es : NULL;
            const char *yp = y ? y + (n * s.y[0] + c * s.y[1]) * es : NULL;
            char *op = dst + (n * s.o[0] + c * s.o[1]) * es;
            if (es == 4) plane_f32(g, (const float *)xp, (const float *)yp, (float *)op, &s);
            else plane_f64(g, (const double *)xp, (const double *)yp, (double *)op, &s);
        }
}

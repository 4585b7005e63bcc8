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

/* The taps of window p inside the input (q1 <= q0 in a dim: none). */
static void window_of(const ot__pool_geom *g, const int64_t *p, win *w)
{
    for (int d = 0; d < 3; d++) {
        int64_t s = p[d] * g->stride[d] - g->lo[d], dil = g->dil[d];
        int64_t lo = s < 0 ? (-s + dil - 1) / dil : 0;
        int64_t hi = g->in[d] > s ? (g->in[d] - s + dil - 1) / dil : 0;
        w->q0[d] = lo;
        w->q1[d] = hi < g->k[d] ? hi : g->k[d];
        w->i0[d] = s;
    }
}

static bool next3(int64_t *v, const int64_t *lim)
{
    for (int d = 2; d >= 0; d--) {
        if (++v[d] < lim[d]) return true;
        v[d] = 0;
    }
    return false;
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
 * with dx, adds v to each of its taps in dx; plane_S runs one plane. */
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
    static void plane_##S(const ot__pool_geom *g, const T *x, const T *y, T *o,               \
                          const strides *s)                                                   \
    {                                                                                         \
        int64_t p[3] = {0, 0, 0}, i[3];                                                       \
        bool back = g->op == OT_OP_MAX_POOL_GRAD || g->op == OT_OP_AVG_POOL_GRAD;             \
        const int64_t *ps = back ? s->y : s->o;   /* the output-shaped view's */              \
        do {                                                                                  \
            win w;                                                                            \
            T v;                                                                              \
            window_of(g, p, &w);                                                              \
            int64_t po = at(p, ps);                                                           \
            switch (g->op) {                                                                  \
            case OT_OP_MAX_POOL: argmax_##S(g, x, s->x, &w, i, &v); o[po] = v; break;         \
            case OT_OP_MAX_POOL_TAKE:                                                         \
                o[po] = argmax_##S(g, x, s->x, &w, i, &v) ? y[at(i, s->y)] : 0;               \
                break;                                                                        \
            case OT_OP_MAX_POOL_GRAD:                                                         \
                if (argmax_##S(g, x, s->x, &w, i, &v)) o[at(i, s->o)] += y[po];               \
                break;                                                                        \
            case OT_OP_AVG_POOL:                                                              \
                o[po] = (T)(sum_##S(g, x, NULL, 0, s->x, &w) / ot__pool_divisor(g, p));       \
                break;                                                                        \
            default: sum_##S(g, NULL, o, (T)(y[po] / ot__pool_divisor(g, p)), s->o, &w);      \
            }                                                                                 \
        } while (next3(p, g->out));                                                           \
    }
POOL_FNS(float, f32)
POOL_FNS(double, f64)
#undef POOL_FNS

/* Zeroes a gradient's input-shaped result (it is accumulated into). */
static void zero(const ot__pool_geom *g, char *o, const int64_t *os, int64_t es)
{
    int64_t idx[5] = {0}, d[5] = {g->n, g->c, g->in[0], g->in[1], g->in[2]};
    if (d[0] * d[1] * d[2] * d[3] * d[4] == 0) return;
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

/*
 * ref_pool.c - the reference backend's pooling ops (max_pool, avg_pool,
 * max_pool_grad, max_pool_take, avg_pool_grad): internal.h's loop
 * (ot__pool_geom), direct, in double, over row-major operands. Slow and
 * plain on purpose: the cpu backend and the NumPy checks are compared
 * against it.
 */
#include "ref.h"

#include <math.h>

static bool next3(int64_t *v, const int64_t *lim)
{
    for (int d = 2; d >= 0; d--) {
        if (++v[d] < lim[d]) return true;
        v[d] = 0;
    }
    return false;
}

/* The offset in an input plane of window p's tap q, or -1 in padding. */
static int64_t tap(const ot__pool_geom *g, const int64_t *p, const int64_t *q)
{
    int64_t off = 0;
    for (int d = 0; d < 3; d++) {
        int64_t i = p[d] * g->stride[d] + q[d] * g->dil[d] - g->lo[d];
        if (i < 0 || i >= g->in[d]) return -1;
        off = off * g->in[d] + i;
    }
    return off;
}

/* The offset of window p's first maximum in plane x (the first NaN, if
 * any), or -1 when the window is all padding. */
static int64_t argmax(const ot__pool_geom *g, const double *x, const int64_t *p)
{
    int64_t q[3] = {0, 0, 0}, best = -1;
    do {
        int64_t i = tap(g, p, q);
        if (i >= 0 && (best < 0 || x[i] > x[best] || (isnan(x[i]) && !isnan(x[best])))) best = i;
    } while (next3(q, g->k));
    return best;
}

/* Window p of plane x (avg_pool) or of plane dx (avg_pool_grad, += dy). */
static double window_avg(const ot__pool_geom *g, const double *x, double *dx, double dy,
                         const int64_t *p)
{
    int64_t q[3] = {0, 0, 0};
    double div = ot__pool_divisor(g, p), sum = 0;
    do {
        int64_t i = tap(g, p, q);
        if (i < 0) continue;
        if (dx) dx[i] += dy / div;
        else sum += x[i];
    } while (next3(q, g->k));
    return sum / div;
}

/* One (batch, channel) plane: x and y are the input-shaped and the
 * output-shaped operands, out the result of either shape. */
static void plane(const ot__pool_geom *g, const double *x, const double *y, double *out)
{
    int64_t p[3] = {0, 0, 0};
    do {
        int64_t o = (p[0] * g->out[1] + p[1]) * g->out[2] + p[2], m;
        switch (g->op) {
        case OT_OP_MAX_POOL:
            m = argmax(g, x, p);
            out[o] = m < 0 ? -INFINITY : x[m];
            break;
        case OT_OP_MAX_POOL_TAKE:
            m = argmax(g, x, p);
            out[o] = m < 0 ? 0 : y[m];
            break;
        case OT_OP_MAX_POOL_GRAD:
            if ((m = argmax(g, x, p)) >= 0) out[m] += y[o];
            break;
        case OT_OP_AVG_POOL: out[o] = window_avg(g, x, NULL, 0, p); break;
        default: window_avg(g, NULL, out, y[o], p); break;
        }
    } while (next3(p, g->out));
}

void ot__ref_pool(const ot_node *node, const double *a, const double *b, double *out)
{
    ot__pool_geom g;
    ot__pool_geom_of(node, &g);
    memset(out, 0, sizeof(double) * (size_t)ot__numel(&node->shape));
    int64_t in = g.in[0] * g.in[1] * g.in[2], os = g.out[0] * g.out[1] * g.out[2];
    if (os == 0) return;   /* (an empty input with a window of padding has outputs) */
    bool to_input = g.op == OT_OP_MAX_POOL_GRAD || g.op == OT_OP_AVG_POOL_GRAD;
    const double *x = g.op == OT_OP_AVG_POOL_GRAD ? NULL : a;
    const double *y = g.op == OT_OP_AVG_POOL_GRAD ? a : b;
    for (int64_t i = 0; i < g.n * g.c; i++)
        plane(&g, x ? x + i * in : NULL, y ? y + i * (g.op == OT_OP_MAX_POOL_TAKE ? in : os) : NULL,
              out + i * (to_input ? in : os));
}

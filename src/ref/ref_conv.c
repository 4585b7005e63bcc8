/*
 * ref_conv.c - the reference backend's windowed ops (conv, conv_transpose,
 * conv_wgrad): internal.h's one loop (ot__conv_geom), direct, in double,
 * over row-major operands. Slow and plain on purpose: the cpu backend and
 * the NumPy checks are compared against it.
 */
#include "ref.h"

/* Row-major offsets of the three tensors' elements. */
static int64_t at_x(const ot__conv_geom *g, int64_t n, int64_t c, const int64_t *i)
{
    return ((((n * g->groups * g->xc) + c) * g->xp[0] + i[0]) * g->xp[1] + i[1]) * g->xp[2] + i[2];
}
static int64_t at_s(const ot__conv_geom *g, int64_t n, int64_t o, const int64_t *p)
{
    return ((((n * g->groups * g->sc) + o) * g->sp[0] + p[0]) * g->sp[1] + p[1]) * g->sp[2] + p[2];
}
static int64_t at_w(const ot__conv_geom *g, int64_t o, int64_t c, const int64_t *q)
{
    return (((o * g->xc + c) * g->k[0] + q[0]) * g->k[1] + q[1]) * g->k[2] + q[2];
}

/* The X position of S position p and kernel position q, false outside X. */
static bool x_pos(const ot__conv_geom *g, const int64_t *p, const int64_t *q, int64_t *i)
{
    for (int d = 0; d < 3; d++) {
        i[d] = p[d] * g->stride[d] + q[d] * g->dil[d] - g->lo[d];
        if (i[d] < 0 || i[d] >= g->xp[d]) return false;
    }
    return true;
}

static bool next3(int64_t *v, const int64_t *lim)
{
    for (int d = 2; d >= 0; d--) {
        if (++v[d] < lim[d]) return true;
        v[d] = 0;
    }
    return false;
}

/* One (S element, W row) pair: every c and q of the group. */
static void pair(int op, const ot__conv_geom *g, double **t, int64_t n, int64_t grp, int64_t o,
                 const int64_t *p)
{
    double *X = t[0], *S = t[1], *W = t[2];
    int64_t so = at_s(g, n, grp * g->sc + o, p), wo = grp * g->sc + o;
    for (int64_t c = 0; c < g->xc; c++) {
        int64_t q[3] = {0, 0, 0}, i[3];
        int64_t xc = grp * g->xc + c;
        if (g->k[0] * g->k[1] * g->k[2] == 0) continue;
        do {
            if (!x_pos(g, p, q, i)) continue;
            double *x = &X[at_x(g, n, xc, i)], *w = &W[at_w(g, wo, c, q)];
            if (op == OT_OP_CONV) S[so] += *x * *w;
            else if (op == OT_OP_CONV_TRANSPOSE) *x += S[so] * *w;
            else *w += S[so] * *x;
        } while (next3(q, g->k));
    }
}

void ot__ref_conv(const ot_node *node, const double *a, const double *b, double *out)
{
    ot__conv_geom g;
    ot__conv_geom_of(node, &g);
    memset(out, 0, sizeof(double) * (size_t)ot__numel(&node->shape));
    double *t[3];   /* X, S, W; the output among them */
    int op = node->op;
    t[0] = op == OT_OP_CONV_TRANSPOSE ? out : (double *)a;
    t[1] = op == OT_OP_CONV ? out : op == OT_OP_CONV_TRANSPOSE ? (double *)a : (double *)b;
    t[2] = op == OT_OP_CONV_WGRAD ? out : (double *)b;
    if (g.sp[0] * g.sp[1] * g.sp[2] == 0) return;
    for (int64_t n = 0; n < g.n; n++)
        for (int64_t grp = 0; grp < g.groups; grp++)
            for (int64_t o = 0; o < g.sc; o++) {
                int64_t p[3] = {0, 0, 0};
                do pair(op, &g, t, n, grp, o, p);
                while (next3(p, g.sp));
            }
}

/*
 * ref_attn.c - the reference backend's attention ops (attention,
 * attention_grad) over internal.h's loop (ot__attn_geom), the plain way in
 * double: per query row every score, its softmax and the products, over
 * row-major operands. Slow and plain on purpose: it is the oracle the cpu
 * backend's fused kernel and the NumPy checks are compared against.
 */
#include "ref.h"

#include <float.h>
#include <math.h>

/* The mask's offset of score (b, h, i, j) in the pack (broadcast dims 0). */
static int64_t mask_at(const ot__attn_geom *g, int64_t b, int64_t h, int64_t i, int64_t j)
{
    const int64_t *m = g->mdim;
    int64_t x[4] = {m[0] > 1 ? b : 0, m[1] > 1 ? h : 0, m[2] > 1 ? i : 0, m[3] > 1 ? j : 0};
    return g->moff + ((x[0] * m[1] + x[1]) * m[2] + x[2]) * m[3] + x[3];
}

static double dotp(const double *x, const double *y, int64_t n)
{
    double s = 0;
    for (int64_t c = 0; c < n; c++) s += x[c] * y[c];
    return s;
}

/* Row i's scores into s (-inf where causality hides a key), their max
 * (returned; -inf when no key is seen) and *sum, the sum of exp(s - max). */
static double scores(const ot__attn_geom *g, const double *q, const double *pack, int64_t b,
                     int64_t h, int64_t i, double *s, double *sum)
{
    const double *k = pack + g->koff + (b * g->h + h) * g->sk * g->d;
    double m = -INFINITY;
    for (int64_t j = 0; j < g->sk; j++) {
        bool hidden = g->causal && j > i;
        s[j] = hidden ? -INFINITY : g->scale * dotp(q, k + j * g->d, g->d);
        if (g->mask && !hidden) s[j] += pack[mask_at(g, b, h, i, j)];
        if (s[j] > m || isnan(s[j])) m = s[j];
    }
    *sum = 0;
    if (m == -INFINITY) return m;
    for (int64_t j = 0; j < g->sk; j++) *sum += exp(s[j] - m);
    return m;
}

/* out (b, h, sq, dv + 1): each row's output, exp(s - max) / sum (not
 * exp(s - lse): at a max of -1e308, a row every key of which a mask hides,
 * lse is the max and every weight was 1), and its logsumexp. */
static void forward(const ot__attn_geom *g, const double *q, const double *pack, double *out,
                    double *s)
{
    for (int64_t b = 0; b < g->b; b++)
        for (int64_t h = 0; h < g->h; h++)
            for (int64_t i = 0; i < g->sq; i++) {
                int64_t bh = b * g->h + h;
                const double *v = pack + g->voff + bh * g->sk * g->dv;
                double *o = out + (bh * g->sq + i) * (g->dv + 1);
                double sum, m = scores(g, q + (bh * g->sq + i) * g->d, pack, b, h, i, s, &sum);
                for (int64_t c = 0; c <= g->dv; c++) o[c] = 0;
                o[g->dv] = m == -INFINITY ? m : m + log(sum);
                if (m == -INFINITY) continue;
                for (int64_t j = 0; j < g->sk; j++) {
                    double p = exp(s[j] - m) / sum;
                    for (int64_t c = 0; c < g->dv; c++) o[c] += p * v[j * g->dv + c];
                }
            }
}

/* The factor of a row's P = exp(s - lse): 1, or, where the logsumexp (in
 * the node's dtype, of epsilon eps) is large enough to have lost its
 * log-sum to rounding, 1 / the sum of exp(s - lse) over the row, as the
 * cpu kernel renormalises (ot__attn_lse_lossy). */
static double lse_factor(const ot__attn_geom *g, const double *s, double lse, double eps)
{
    if (!ot__attn_lse_lossy(lse, eps)) return 1;
    double sum = 0;
    for (int64_t j = 0; j < g->sk; j++) sum += exp(s[j] - lse);
    return sum > 0 ? 1 / sum : 1;
}

/* One query row's part of every gradient: x is the row [q | o, lse | do,
 * dlse]; out [dq | dk | dv | dmask] (zeroed). */
static void backward_row(const ot__attn_geom *g, const double *x, const double *pack, int64_t b,
                         int64_t h, int64_t i, double *out, double *s, double eps)
{
    int64_t bh = b * g->h + h, dv = g->dv, d = g->d;
    const double *q = x, *o = x + d, *dout = x + d + dv + 1;
    double lse = o[dv], sum;   /* the node's own, as the cpu kernel reads it */
    scores(g, q, pack, b, h, i, s, &sum);
    if (lse == -INFINITY) return;
    double f = lse_factor(g, s, lse, eps);
    double dsum = dotp(dout, o, dv) - dout[dv];
    const double *k = pack + g->koff + bh * g->sk * d, *v = pack + g->voff + bh * g->sk * dv;
    double *dq = out + (bh * g->sq + i) * d, *dk = out + g->b * g->h * g->sq * d + g->koff;
    double *dvv = out + g->b * g->h * g->sq * d + g->voff;
    for (int64_t j = 0; j < g->sk; j++) {
        double p = exp(s[j] - lse) * f;
        if (s[j] == -INFINITY) continue;   /* hidden (exp(-inf - lse) is 0 or NaN) */
        double ds = p * (dotp(dout, v + j * dv, dv) - dsum);
        for (int64_t c = 0; c < dv; c++) dvv[(bh * g->sk + j) * dv + c] += p * dout[c];
        for (int64_t c = 0; c < d; c++) {
            dq[c] += g->scale * ds * k[j * d + c];
            dk[(bh * g->sk + j) * d + c] += g->scale * ds * q[c];
        }
        if (g->mask) out[g->b * g->h * g->sq * d + mask_at(g, b, h, i, j)] += ds;
    }
}

int ot__ref_attn(const ot_node *node, const double *a, const double *b, double *out)
{
    ot__attn_geom g;
    ot__attn_geom_of(node, &g);
    memset(out, 0, sizeof(double) * (size_t)ot__numel(&node->shape));
    double *s = ot__malloc(sizeof(double) * (size_t)(g.sk ? g.sk : 1));   /* a row of scores */
    if (!s) return ot__err_set(OT_ENOMEM, NULL, 0, "attention", "out of memory for a row of %lld "
                               "scores", (long long)g.sk);
    if (g.op == OT_OP_ATTENTION) {
        forward(&g, a, b, out, s);
    } else {
        int64_t row = g.d + 2 * (g.dv + 1);
        double eps = node->dtype == OT_F64 ? DBL_EPSILON : FLT_EPSILON;   /* as cpu: 16 bits run as f32 */
        for (int64_t bb = 0; bb < g.b; bb++)
            for (int64_t h = 0; h < g.h; h++)
                for (int64_t i = 0; i < g.sq; i++)
                    backward_row(&g, a + ((bb * g.h + h) * g.sq + i) * row, b, bb, h, i, out, s, eps);
    }
    free(s);
    return OT_OK;
}

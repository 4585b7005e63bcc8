/*
 * ref_topk.c - the reference backend's top-k and along-axis indexing
 * (topk, take_along, scatter_along) over ot__index_geom's frame, direct,
 * in double, over row-major operands: plain on purpose (topk keeps each
 * line's best k in order by insertion, O(size k)), the oracle the cpu
 * backend and the NumPy checks are compared with. Indices are checked
 * before anything is computed; the caller writes no output when one is
 * out of range.
 */
#include "ref.h"

#include <stdlib.h>

/* Line (o, i) of topk: the positions of its best k, in place in pos[]
 * (count k), written to out in the mode's order. */
static void topk_line(const ot__index_geom *g, const double *x, int64_t *pos, double *out)
{
    bool largest = !(g->diag & OT__TOPK_SMALLEST);
    int64_t n = 0, step = g->inner;
    for (int64_t j = 0; j < g->size; j++) {   /* insertion into the sorted best n */
        int64_t at = n;
        while (at > 0 && ot__topk_before(x[j * step], j, x[pos[at - 1] * step], pos[at - 1], largest))
            at--;
        if (at >= g->count) continue;
        for (int64_t m = n < g->count ? n : g->count - 1; m > at; m--) pos[m] = pos[m - 1];
        pos[at] = j;
        if (n < g->count) n++;
    }
    if (g->diag & OT__TOPK_UNSORTED)   /* by position: an insertion sort of the k */
        for (int64_t m = 1; m < n; m++)
            for (int64_t q = m; q > 0 && pos[q] < pos[q - 1]; q--) {
                int64_t t = pos[q];
                pos[q] = pos[q - 1];
                pos[q - 1] = t;
            }
    for (int64_t m = 0; m < n; m++) out[m * step] = (double)pos[m];
}

static int topk(const ot__index_geom *g, const double *x, double *out)
{
    int64_t *pos = ot__malloc((size_t)(g->count ? g->count : 1) * sizeof *pos);
    if (!pos)
        return ot__err_set(OT_ENOMEM, NULL, 0, "topk", "out of memory for %lld positions",
                           (long long)g->count);
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t i = 0; i < g->inner; i++)
            topk_line(g, x + o * g->size * g->inner + i, pos, out + o * g->count * g->inner + i);
    free(pos);
    return 0;
}

/* The first index outside [-size, size), with the error set; 0 when all
 * are in range. */
static int check(const ot__index_geom *g, const double *idx)
{
    for (int64_t j = 0; j < g->outer * g->count * g->inner; j++)
        if (ot__index_wrap((int64_t)idx[j], g->size) < 0)
            return ot__index_fail(g, (int64_t)idx[j], j);
    return 0;
}

/* take_along: out[o, j, i] = x[o, idx[o, j, i], i]; scatter_along: out[o,
 * idx[o, j, i], i] += src[o, j, i] into zeros. */
static void along(const ot__index_geom *g, const double *a, const double *idx, double *out)
{
    bool take = g->op == OT_OP_TAKE_ALONG;
    if (!take)
        for (int64_t e = 0; e < g->outer * g->size * g->inner; e++) out[e] = 0.0;
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t j = 0; j < g->count; j++)
            for (int64_t i = 0; i < g->inner; i++) {
                int64_t e = (o * g->count + j) * g->inner + i;
                int64_t w = (o * g->size + ot__index_wrap((int64_t)idx[e], g->size)) * g->inner + i;
                if (take) out[e] = a[w];
                else out[w] += a[e];
            }
}

int ot__ref_topk(const ot_node *node, const double *a, const double *b, double *out)
{
    ot__index_geom g;
    ot__index_geom_of(node, &g);
    if (g.op == OT_OP_TOPK) return topk(&g, a, out);
    if (check(&g, b)) return ot_errcode();
    along(&g, a, b, out);
    return 0;
}

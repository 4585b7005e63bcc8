/*
 * ref_index.c - the reference backend's indexing ops (take, scatter_add,
 * select, tril, triu, cumsum): internal.h's loop (ot__index_geom), direct, in
 * double, over row-major operands. Slow and plain on purpose: the cpu
 * backend and the NumPy checks are compared against it. Every index is
 * checked before anything is computed; the caller writes no output when
 * one is out of range.
 */
#include "ref.h"

/* The first index of idx (count of them) outside [-size, size), with
 * the error set; 0 when all are in range. */
static int check(const ot__index_geom *g, const double *idx)
{
    for (int64_t j = 0; j < g->count; j++)
        if (ot__index_wrap((int64_t)idx[j], g->size) < 0)
            return ot__index_fail(g, (int64_t)idx[j], j);
    return 0;
}

static void take(const ot__index_geom *g, const double *x, const double *idx, double *out)
{
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t j = 0; j < g->count; j++) {
            const double *row = x + (o * g->size + ot__index_wrap((int64_t)idx[j], g->size)) * g->inner;
            for (int64_t i = 0; i < g->inner; i++) *out++ = row[i];
        }
}

static void scatter(const ot__index_geom *g, const double *src, const double *idx, double *out)
{
    for (int64_t e = 0; e < g->outer * g->size * g->inner; e++) out[e] = 0.0;
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t j = 0; j < g->count; j++) {
            double *row = out + (o * g->size + ot__index_wrap((int64_t)idx[j], g->size)) * g->inner;
            for (int64_t i = 0; i < g->inner; i++) row[i] += *src++;
        }
}

/* The offset in operand shape s (broadcast to out, right-aligned) of the
 * element at multi-index ix of out. */
static int64_t bcast_at(const ot_shape *s, const ot_shape *out, const int64_t *ix)
{
    int64_t off = 0;
    for (int d = 0; d < s->ndim; d++) {
        int64_t n = s->dims[d], i = ix[d + out->ndim - s->ndim];
        off = off * n + (n == 1 ? 0 : i);
    }
    return off;
}

/* select (c, y): y where c != 0, else -0.0, or 0 in an int32 node (which
 * holds integers: a -0.0 here would reach a later float op, as rsqrt's
 * -inf, where the cpu backend's stored int gives +inf). */
static void select_(const ot__index_geom *g, const double *c, const double *y, double *out,
                    bool ints)
{
    int64_t ix[OT_MAX_DIMS] = {0}, n = ot__numel(&g->out);
    double zero = ints ? 0.0 : -0.0;
    for (int64_t e = 0; e < n; e++) {
        out[e] = c[bcast_at(&g->a, &g->out, ix)] != 0.0 ? y[bcast_at(&g->b, &g->out, ix)] : zero;
        for (int d = g->out.ndim - 1; d >= 0 && ++ix[d] == g->out.dims[d]; d--) ix[d] = 0;
    }
}

static void tri(const ot__index_geom *g, const double *x, double *out)
{
    int nd = g->out.ndim;
    int64_t rows = g->out.dims[nd - 2], cols = g->out.dims[nd - 1];
    int64_t n = ot__numel(&g->out);
    for (int64_t e = 0; e < n; e++) {
        int64_t i = e / cols % rows, j = e % cols;
        bool keep = g->op == OT_OP_TRIL ? j - i <= g->diag : j - i >= g->diag;
        out[e] = keep ? x[e] : 0.0;
    }
}

static void cumsum(const ot__index_geom *g, const double *x, double *out)
{
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t i = 0; i < g->inner; i++) {
            double s = 0.0;
            for (int64_t j = 0; j < g->size; j++) {
                int64_t e = (o * g->size + j) * g->inner + i;
                out[e] = s += x[e];
            }
        }
}

int ot__ref_index(const ot_node *node, const double *a, const double *b, double *out)
{
    if (ot__is_topk(node->op)) return ot__ref_topk(node, a, b, out);
    ot__index_geom g;
    ot__index_geom_of(node, &g);
    switch (g.op) {
    case OT_OP_TAKE:
        if (check(&g, b)) return ot_errcode();
        take(&g, a, b, out);
        return 0;
    case OT_OP_SCATTER_ADD:
        if (check(&g, b)) return ot_errcode();
        scatter(&g, a, b, out);
        return 0;
    case OT_OP_SELECT: select_(&g, a, b, out, node->dtype == OT_I32); return 0;
    case OT_OP_CUMSUM: cumsum(&g, a, out); return 0;
    default: tri(&g, a, out); return 0;
    }
}

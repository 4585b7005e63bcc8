/*
 * exec_topk.c - the cpu backend's top-k and along-axis indexing kernels
 * (OT_KER_INDEX kernels of topk, take_along and scatter_along, reached
 * through exec_index.c) over ot__index_geom's frame: each line along the
 * axis is walked through its view's strides (views may be strided,
 * transposed or broadcast; nothing is copied but topk's candidates).
 * topk keeps a heap of each line's best k screened by the worst kept
 * (O(size log k)) or, for k > size / 8, sorts the line's (value,
 * position) pairs in scratch; the rank is
 * internal.h's ot__topk_before, the reference backend's too. Indices are checked before anything is
 * written: no kernel reads or writes outside its views.
 */
#include "cpu.h"

#include <stdlib.h>
#include <string.h>

/* The element offset of line lin (row-major over every dim but axis) of a
 * view of shape s with strides st. */
static int64_t line_at(const ot_shape *s, const int64_t *st, int axis, int64_t lin)
{
    int64_t off = 0;
    for (int d = s->ndim - 1; d >= 0; d--) {
        if (d == axis) continue;
        off += lin % s->dims[d] * st[d];
        lin /= s->dims[d];
    }
    return off;
}

/* ---- topk ------------------------------------------------------------------------ */

typedef struct cand { double v; int64_t i; } cand;

static bool before(const cand *a, const cand *b, bool largest)
{
    return ot__topk_before(a->v, a->i, b->v, b->i, largest);
}

/* Restores the heap below p: every parent ranks after its children, so
 * h[0] is the worst kept. */
static void sift(cand *h, int64_t n, int64_t p, bool largest)
{
    for (int64_t c; (c = 2 * p + 1) < n; p = c) {
        if (c + 1 < n && before(&h[c], &h[c + 1], largest)) c++;
        if (!before(&h[p], &h[c], largest)) return;
        cand t = h[p];
        h[p] = h[c];
        h[c] = t;
    }
}

static int by_position(const void *a, const void *b)
{
    int64_t x = ((const cand *)a)->i, y = ((const cand *)b)->i;
    return (x > y) - (x < y);
}

static int by_rank_largest(const void *a, const void *b)
{
    return before(a, b, true) ? -1 : before(b, a, true);
}

static int by_rank_smallest(const void *a, const void *b)
{
    return before(a, b, false) ? -1 : before(b, a, false);
}

/* Whether v at a later position than every kept one ranks before thr,
 * the worst kept: the heap's screen, a compare or two per element. */
static inline bool beats(double v, double thr, bool largest)
{
    if (largest) return v > thr || (v != v && thr == thr);
    return v < thr || (thr != thr && v == v);
}

static inline double value_at(const char *x, ot_dtype dt, int64_t e)
{
    return dt == OT_F32 ? ((const float *)x)[e] : dt == OT_F64 ? ((const double *)x)[e]
                                                               : ((const int32_t *)x)[e];
}

/* The line's best k (x at stride sx, size elements), best first, at the
 * front of c: for a small k a heap of k screened by its worst (a compare
 * or two per element, O(size log k) at worst); for k > size / 8 a sort of
 * the whole line (c then holds size candidates). */
static void select_best(cand *c, const char *x, ot_dtype dt, int64_t sx, int64_t size, int64_t k,
                        bool largest)
{
    if (k > size / 8) {
        for (int64_t j = 0; j < size; j++) c[j] = (cand){value_at(x, dt, j * sx), j};
        qsort(c, (size_t)size, sizeof *c, largest ? by_rank_largest : by_rank_smallest);
        return;
    }
    for (int64_t j = 0; j < k; j++) c[j] = (cand){value_at(x, dt, j * sx), j};
    for (int64_t p = k / 2 - 1; p >= 0; p--) sift(c, k, p, largest);
    for (int64_t j = k; j < size; j++) {
        double v = value_at(x, dt, j * sx);
        if (!beats(v, c[0].v, largest)) continue;
        c[0] = (cand){v, j};
        sift(c, k, 0, largest);
    }
    for (int64_t m = k - 1; m > 0; m--) {   /* the worst to the end: best first */
        cand t = c[0];
        c[0] = c[m];
        c[m] = t;
        sift(c, m, 0, largest);
    }
}

/* One line: x at stride sx to k int32 positions at stride so of out. */
static void topk_line(const ot__index_geom *g, ot_dtype dt, const char *x, int64_t sx, int32_t *out,
                      int64_t so, cand *c)
{
    int64_t k = g->count;
    select_best(c, x, dt, sx, g->size, k, !(g->diag & OT__TOPK_SMALLEST));
    if (g->diag & OT__TOPK_UNSORTED) qsort(c, (size_t)k, sizeof *c, by_position);
    for (int64_t m = 0; m < k; m++) out[m * so] = (int32_t)c[m].i;
}

static int topk(const ot_kernel *k, const char *x, char *dst)
{
    const ot__index_geom *g = &k->index;
    int ax = g->axis;
    int64_t lines = g->outer * g->inner;
    if (lines == 0 || g->count == 0) return 0;
    /* a small k (sampling's) needs no allocation, so no failure mid-run */
    cand small[64];
    int64_t need = g->count > g->size / 8 ? g->size : g->count;
    cand *c = need <= 64 ? small : ot__malloc((size_t)need * sizeof *c);
    if (!c)
        return ot__err_set(OT_ENOMEM, NULL, 0, "topk", "out of memory for a line of %lld",
                           (long long)g->size);
    ot_dtype dt = (ot_dtype)k->loads[0].dtype;
    const int64_t *sx = k->loads[0].strides, *so = k->store.strides;
    for (int64_t l = 0; l < lines; l++)
        topk_line(g, dt, x + ot_dtype_size(dt) * line_at(&g->a, sx, ax, l), sx[ax],
                  (int32_t *)dst + line_at(&g->out, so, ax, l), so[ax], c);
    if (c != small) free(c);
    return 0;
}

/* ---- take_along and scatter_along --------------------------------------------- */

/* The index at line l, position j along the axis, of indices idx (the
 * kernel's second load, of the count side's shape b). */
static int32_t index_at(const ot_kernel *k, const char *idx, int64_t l, int64_t j)
{
    const ot__index_geom *g = &k->index;
    const int64_t *st = k->loads[1].strides;
    return ((const int32_t *)idx)[line_at(&g->b, st, g->axis, l) + j * st[g->axis]];
}

int ot__along_check(const ot_kernel *k, const char *idx)
{
    const ot__index_geom *g = &k->index;
    if (g->op == OT_OP_TOPK) return 0;
    for (int64_t l = 0; l < g->outer * g->inner; l++)
        for (int64_t j = 0; j < g->count; j++) {
            int32_t v = index_at(k, idx, l, j);
            if (ot__index_wrap(v, g->size) < 0)   /* its row-major position among the indices */
                return ot__index_fail(g, v, (l / g->inner * g->count + j) * g->inner + l % g->inner);
        }
    return 0;
}

/* take_along: out[o, j, i] = x[o, idx[o, j, i], i] (bytes); scatter_along:
 * out[o, idx[o, j, i], i] += src[o, j, i] into zeros, in order. */
static void along(const ot_kernel *k, const char *a, const char *idx, char *dst)
{
    const ot__index_geom *g = &k->index;
    bool take = g->op == OT_OP_TAKE_ALONG;
    int ax = g->axis;
    ot_dtype dt = (ot_dtype)k->store.dtype;
    size_t es = ot_dtype_size(dt);
    const int64_t *sa = k->loads[0].strides, *so = k->store.strides;
    /* the line-indexed view (x or out) and the other */
    const ot_shape *big = take ? &g->a : &g->out;
    const int64_t *sb = take ? sa : so, *ss = take ? so : sa;
    for (int64_t l = 0; l < g->outer * g->inner; l++) {
        int64_t bl = line_at(big, sb, ax, l), sl = line_at(&g->b, ss, ax, l);
        if (!take)   /* zeroes first: positions no index names stay 0 */
            for (int64_t j = 0; j < g->size; j++) memset(dst + es * (bl + j * so[ax]), 0, es);
        for (int64_t j = 0; j < g->count; j++) {
            int64_t w = ot__index_wrap(index_at(k, idx, l, j), g->size);
            const char *from = take ? a + es * (bl + w * sb[ax]) : a + es * (sl + j * ss[ax]);
            char *to = take ? dst + es * (sl + j * ss[ax]) : dst + es * (bl + w * sb[ax]);
            if (take) memcpy(to, from, es);
            else ot__store(to, dt, ot__load(to, dt) + ot__load(from, dt));
        }
    }
}

int ot__run_topk(const ot_kernel *k, char *const base[2], char *dst)
{
    if (k->index.op == OT_OP_TOPK) return topk(k, base[0], dst);
    int rc = ot__along_check(k, base[1]);
    if (!rc) along(k, base[0], base[1], dst);
    return rc;
}

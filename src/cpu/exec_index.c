/*
 * exec_index.c - the cpu backend's indexing kernels (OT_KER_INDEX: take,
 * scatter_add, select, tril, triu, cumsum) over internal.h's loop
 * (ot__index_geom): direct loops over the views' strides (views may be
 * strided, transposed or broadcast; nothing is copied, no scratch). take
 * and select copy elements as bytes (the result has the value's dtype);
 * scatter_add zeroes its result, then adds the source's slices in order,
 * so repeated indices accumulate in a fixed order. Indices are checked
 * before anything is written: no kernel reads or writes outside its views.
 */
#include "cpu.h"

#include <string.h>

/* The element offset of row-major position lin over dims d0..d1-1 of shape
 * s under strides st. */
static int64_t offset_of(const ot_shape *s, const int64_t *st, int d0, int d1, int64_t lin)
{
    int64_t off = 0;
    for (int d = d1 - 1; d >= d0; d--) {
        int64_t n = s->dims[d];
        off += lin % n * st[d];
        lin /= n;
    }
    return off;
}

static int32_t index_at(const ot_kernel *k, const char *idx, int64_t j)
{
    const ot__index_geom *g = &k->index;
    return *(const int32_t *)(idx + 4 * offset_of(&g->b, k->loads[1].strides, 0, g->b.ndim, j));
}

int ot__index_check(const ot_kernel *k, const char *idx)
{
    const ot__index_geom *g = &k->index;
    if (ot__is_topk(g->op)) return ot__along_check(k, idx);
    if (g->op != OT_OP_TAKE && g->op != OT_OP_SCATTER_ADD) return 0;
    for (int64_t j = 0; j < g->count; j++) {
        int32_t v = index_at(k, idx, j);
        if (ot__index_wrap(v, g->size) < 0) return ot__index_fail(g, v, j);
    }
    return 0;
}

/* One view in the (outer, middle, inner) frame of take and scatter_add:
 * its shape, strides and the dims of its middle part (the axis, or the
 * indices' dims). */
typedef struct frame {
    const ot_shape *s;
    const int64_t *st;
    int m0, m1;
} frame;

static int64_t frame_at(const frame *f, int64_t o, int64_t mid)
{
    return offset_of(f->s, f->st, 0, f->m0, o) + offset_of(f->s, f->st, f->m0, f->m1, mid);
}

/* Whether f's inner dims walk with one stride (*step) in row-major
 * order: a single dim, or dims laid out as one (dims of size 1 aside). */
static bool even(const frame *f, int64_t *step)
{
    bool first = true;
    int64_t next = 0;
    *step = 0;
    for (int d = f->s->ndim - 1; d >= f->m1; d--) {
        if (f->s->dims[d] == 1) continue;
        if (first) *step = f->st[d];
        else if (f->st[d] != next) return false;
        first = false;
        next = f->st[d] * f->s->dims[d];
    }
    return true;
}

static int64_t inner_at(const frame *f, bool ev, int64_t step, int64_t i)
{
    return ev ? i * step : offset_of(f->s, f->st, f->m1, f->s->ndim, i);
}

/* One slice's inner run of n elements, each a contiguous row (the fast
 * case: an embedding's rows): take copies it, scatter_add adds it, times
 * alpha when the kernel updates its output in place. Adding in the dtype
 * rounds as the per-element path does (an f32 sum computed in double and
 * rounded once is the f32 sum). */
static void row_op(bool take, ot_dtype dt, char *b, char *s, int64_t n, double alpha)
{
    if (n == 0) return;   /* an empty row's buffers may be NULL */
    if (take) {
        memcpy(s, b, (size_t)n * ot_dtype_size(dt));
        return;
    }
    if (dt == OT_F32) {
        float *r = (float *)b, a = (float)alpha;
        const float *x = (const float *)s;
        if (alpha == 1.0)
            for (int64_t i = 0; i < n; i++) r[i] += x[i];
        else
            for (int64_t i = 0; i < n; i++) r[i] += a * x[i];
    } else if (dt == OT_F64) {
        double *r = (double *)b;
        const double *x = (const double *)s;
        if (alpha == 1.0)
            for (int64_t i = 0; i < n; i++) r[i] += x[i];
        else
            for (int64_t i = 0; i < n; i++) r[i] += alpha * x[i];
    } else
        for (int64_t i = 0; i < n; i++) {
            char *p = b + (size_t)i * ot_dtype_size(dt);
            ot__store(p, dt, ot__load(p, dt) + alpha * ot__load(s + (size_t)i * ot_dtype_size(dt), dt));
        }
}

/* Zeroes scatter_add's whole result (untouched rows stay 0): a dense
 * scatter's O(result) part, which the in-place form skips. */
static void zero_out(const ot_kernel *k, char *dst, size_t es)
{
    const ot__index_geom *g = &k->index;
    int64_t n = ot__numel(&g->out), step;
    frame all = {&g->out, k->store.strides, 0, 0};
    if (n == 0) return;   /* an empty result's buffer may be NULL */
    if (even(&all, &step) && step == 1) {
        memset(dst, 0, (size_t)n * es);
        return;
    }
    for (int64_t e = 0; e < n; e++)
        memset(dst + es * offset_of(&g->out, k->store.strides, 0, g->out.ndim, e), 0, es);
}

/* take: out[o, j, i] = x[o, idx[j], i]; scatter_add: out[o, idx[j], i] +=
 * alpha * src[o, j, i], alpha 1, over zeroes, or, when the kernel updates
 * its output in place (k->beta.mul != 0: the planner's t + c*scatter_add(..)
 * over t itself), the run-time scale k->alpha over the output's own values:
 * only the indexed rows are read and written. big is the axis-indexed view
 * (take's x, scatter's out), small the other. */
static void gather_scatter(const ot_kernel *k, const char *a, const char *idx, char *dst,
                           const double *param)
{
    const ot__index_geom *g = &k->index;
    bool take = g->op == OT_OP_TAKE, in_place = !take && k->beta.mul != 0;
    int ni = g->b.ndim, ax = g->axis;
    frame big = {take ? &g->a : &g->out, take ? k->loads[0].strides : k->store.strides, ax, ax + 1};
    frame small = {take ? &g->out : &g->a, take ? k->store.strides : k->loads[0].strides, ax,
                   ax + ni};
    ot_dtype dt = (ot_dtype)k->store.dtype;
    size_t es = ot_dtype_size(dt);
    int64_t sb, ss;
    bool eb = even(&big, &sb), es_ = even(&small, &ss), rows = eb && es_ && sb == 1 && ss == 1;
    double alpha = !in_place ? 1.0 : k->alpha.param >= 0 ? k->alpha.mul * param[k->alpha.param]
                                                           : k->alpha.mul;
    if (!take && !in_place) zero_out(k, dst, es);
    char *bbase = take ? (char *)a : dst, *sbase = take ? dst : (char *)a;
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t j = 0; j < g->count; j++) {
            int64_t w = ot__index_wrap(index_at(k, idx, j), g->size);
            char *bp = bbase + es * frame_at(&big, o, w), *sp = sbase + es * frame_at(&small, o, j);
            if (rows) {
                row_op(take, dt, bp, sp, g->inner, alpha);
                continue;
            }
            for (int64_t i = 0; i < g->inner; i++)
                row_op(take, dt, bp + es * inner_at(&big, eb, sb, i),
                       sp + es * inner_at(&small, es_, ss, i), 1, alpha);
        }
}

/* The offset of out's element at multi-index ix in a view of shape s
 * (broadcast to out, right-aligned) with strides st. */
static int64_t bcast_at(const ot_shape *s, const int64_t *st, const ot_shape *out, const int64_t *ix)
{
    int64_t off = 0;
    for (int d = 0; d < s->ndim; d++)
        if (s->dims[d] != 1) off += ix[d + out->ndim - s->ndim] * st[d];
    return off;
}

static void select_tri(const ot_kernel *k, const char *a, const char *b, char *dst)
{
    const ot__index_geom *g = &k->index;
    ot_dtype dt = (ot_dtype)k->store.dtype, ct = (ot_dtype)k->loads[0].dtype;
    size_t es = ot_dtype_size(dt), cs = ot_dtype_size(ct);
    bool sel = g->op == OT_OP_SELECT, lower = g->op == OT_OP_TRIL;
    int nd = g->out.ndim;
    int64_t ix[OT_MAX_DIMS] = {0}, n = ot__numel(&g->out);
    for (int64_t e = 0; e < n; e++) {
        char *p = dst + es * bcast_at(&g->out, k->store.strides, &g->out, ix);
        bool keep;
        const char *v;
        if (sel) {
            keep = ot__load(a + cs * bcast_at(&g->a, k->loads[0].strides, &g->out, ix), ct) != 0.0;
            v = b + es * bcast_at(&g->b, k->loads[1].strides, &g->out, ix);
        } else {
            int64_t off = ix[nd - 1] - ix[nd - 2];
            keep = lower ? off <= g->diag : off >= g->diag;
            v = a + es * bcast_at(&g->a, k->loads[0].strides, &g->out, ix);
        }
        if (keep) memcpy(p, v, es);
        else ot__store(p, dt, sel ? -0.0 : 0.0);
        for (int d = nd - 1; d >= 0 && ++ix[d] == g->out.dims[d]; d--) ix[d] = 0;
    }
}

/* Per (outer, inner) line along the axis, a running sum in double. */
static void cumsum(const ot_kernel *k, const char *x, char *dst)
{
    const ot__index_geom *g = &k->index;
    int ax = g->axis;
    frame in = {&g->a, k->loads[0].strides, ax, ax + 1};
    frame out = {&g->out, k->store.strides, ax, ax + 1};
    ot_dtype dt = (ot_dtype)k->store.dtype;
    size_t es = ot_dtype_size(dt);
    int64_t si = in.st[ax], so = out.st[ax];
    if (ot__numel(&g->out) == 0) return;   /* a dim of size 0: no line (nor offset) to walk */
    for (int64_t o = 0; o < g->outer; o++)
        for (int64_t i = 0; i < g->inner; i++) {
            int64_t xi = frame_at(&in, o, 0) + inner_at(&in, false, 0, i);
            int64_t oi = frame_at(&out, o, 0) + inner_at(&out, false, 0, i);
            double s = 0.0;
            for (int64_t j = 0; j < g->size; j++) {
                s += ot__load(x + es * (xi + j * si), dt);
                ot__store(dst + es * (oi + j * so), dt, s);
            }
        }
}

int ot__run_index(const ot_kernel *k, char *const base[2], char *dst, const double *param)
{
    const ot__index_geom *g = &k->index;
    if (ot__is_topk(g->op)) return ot__run_topk(k, base, dst);
    if (g->op == OT_OP_CUMSUM) {
        cumsum(k, base[0], dst);
        return 0;
    }
    if (g->op == OT_OP_SELECT || g->op == OT_OP_TRIL || g->op == OT_OP_TRIU) {
        select_tri(k, base[0], base[1], dst);
        return 0;
    }
    int rc = ot__index_check(k, base[1]);
    if (!rc) gather_scatter(k, base[0], base[1], dst, param);
    return rc;
}

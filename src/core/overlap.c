/*
 * overlap.c - the memory of views compared: whether two tensors are the
 * same view (ot__same_view) and the words that identify one for hashing,
 * and whether two views share an element or one view reads an element
 * twice (ot__overlap, ot__internal_overlap), which assignment uses to
 * detect aliasing. The tensors themselves are tensor.c's.
 */
#include "internal.h"

/* The lowest and highest element offsets that a non-empty view touches. */
static void elem_range(const ot_tensor *t, int64_t *lo, int64_t *hi)
{
    *lo = *hi = t->offset;
    for (int d = 0; d < t->leaf.shape.ndim; d++) {
        int64_t reach = t->strides[d] * (t->leaf.shape.dims[d] - 1);
        if (reach < 0)
            *lo += reach;
        else
            *hi += reach;
    }
}

/* Whether a and b walk the same elements in the same order, b's first
 * element at element offset boff of a's buffer. */
static bool same_layout(const ot_tensor *a, const ot_tensor *b, int64_t boff)
{
    if (a->offset != boff || a->leaf.dtype != b->leaf.dtype ||
        !ot__shape_eq(&a->leaf.shape, &b->leaf.shape))
        return false;
    for (int d = 0; d < a->leaf.shape.ndim; d++)
        if (a->leaf.shape.dims[d] != 1 && a->strides[d] != b->strides[d])
            return false;
    return true;
}

bool ot__same_view(const ot_tensor *a, const ot_tensor *b)
{
    return a->buf == b->buf && same_layout(a, b, b->offset);
}

int ot__view_ident(const ot_tensor *t, int64_t *w)
{
    const ot_shape *s = &t->leaf.shape;
    w[0] = (int64_t)(uintptr_t)t->buf;
    w[1] = t->offset;
    for (int d = 0; d < s->ndim; d++) {
        w[2 + 2 * d] = s->dims[d];
        w[3 + 2 * d] = s->dims[d] != 1 ? t->strides[d] : 0;
    }
    return 2 + 2 * s->ndim;
}

/* One term s*m of a sum, s > 0 and lo <= m <= hi. */
typedef struct lattice_term {
    int64_t s, lo, hi;
} lattice_term;

static int64_t floor_div(int64_t x, int64_t s) { return x / s - (x % s < 0); }
static int64_t ceil_div(int64_t x, int64_t s) { return x / s + (x % s > 0); }

/* Whether a and b (same item size) share an element: whether r0, b's
 * first element less a's in elements, is a sum of their strides times
 * index differences within their dims. A bounded exact search over the
 * terms by falling stride, pruned by what the smaller strides can still
 * reach; answers "maybe" (true) when the budget runs out, which is the
 * safe side. */
static bool lattice_meets(const ot_tensor *a, const ot_tensor *b, int64_t r0)
{
    lattice_term t[2 * OT_MAX_DIMS];
    int n = 0;
    for (int v = 0; v < 2; v++) {
        const ot_tensor *x = v ? b : a;
        for (int d = 0; d < x->leaf.shape.ndim; d++) {
            int64_t st = x->strides[d], span = x->leaf.shape.dims[d] - 1;
            if (st == 0 || span == 0)
                continue;
            /* a's indices add, b's subtract; a negative stride flips the range */
            bool up = (st > 0) == (v == 0);
            lattice_term add = {llabs(st), up ? 0 : -span, up ? span : 0};
            int k = 0;
            while (k < n && t[k].s > add.s)
                k++;
            if (k < n && t[k].s == add.s) {
                t[k].lo += add.lo;
                t[k].hi += add.hi;
                continue;
            }
            memmove(&t[k + 1], &t[k], (size_t)(n - k) * sizeof *t);
            t[k] = add;
            n++;
        }
    }
    int64_t restlo[2 * OT_MAX_DIMS + 1], resthi[2 * OT_MAX_DIMS + 1];
    restlo[n] = resthi[n] = 0;
    for (int k = n - 1; k >= 0; k--) {
        restlo[k] = restlo[k + 1] + t[k].s * t[k].lo;
        resthi[k] = resthi[k + 1] + t[k].s * t[k].hi;
    }
    int64_t r[2 * OT_MAX_DIMS + 1], m[2 * OT_MAX_DIMS], last[2 * OT_MAX_DIMS];
    r[0] = r0;
    if (r[0] < restlo[0] || r[0] > resthi[0])
        return false;
    long budget = 4096;
    int k = 0;
    bool fresh = true;
    for (;;) {
        if (k == n)
            return true;   /* the bounds left exactly r[n] == 0 */
        if (fresh) {
            int64_t lo = ceil_div(r[k] - resthi[k + 1], t[k].s);
            int64_t hi = floor_div(r[k] - restlo[k + 1], t[k].s);
            m[k] = lo > t[k].lo ? lo : t[k].lo;
            last[k] = hi < t[k].hi ? hi : t[k].hi;
        } else {
            m[k]++;
        }
        if (m[k] > last[k]) {
            if (k == 0)
                return false;
            k--;
            fresh = false;
            continue;
        }
        if (--budget == 0)
            return true;
        r[k + 1] = r[k] - t[k].s * m[k];
        k++;
        fresh = true;
    }
}

/* Whether two buffers' bytes meet. Distinct buffers of the library's own
 * never do, but ot_wrap makes one over any memory: the caller's, wrapped
 * twice (a and its transpose as two wraps), or another tensor's data. */
static bool bufs_meet(const ot_buffer *x, const ot_buffer *y)
{
    uintptr_t xs = (uintptr_t)x->data, ys = (uintptr_t)y->data;
    return xs < ys + y->nbytes && ys < xs + x->nbytes;
}

int ot__overlap(const ot_tensor *a, const ot_tensor *b)
{
    if (!a || !b || ot__numel(&a->leaf.shape) == 0 || ot__numel(&b->leaf.shape) == 0 ||
        (a->buf != b->buf && !bufs_meet(a->buf, b->buf)))
        return OT_OVERLAP_NONE;
    /* compare bytes from a's buffer: the two views may differ in item size
     * and, over wrapped memory, in buffer */
    int64_t delta = (int64_t)((intptr_t)b->buf->data - (intptr_t)a->buf->data);
    int64_t ia = (int64_t)ot_dtype_size((ot_dtype)a->leaf.dtype),
            ib = (int64_t)ot_dtype_size((ot_dtype)b->leaf.dtype);
    if (delta % ia == 0 && same_layout(a, b, b->offset + delta / ia))
        return OT_OVERLAP_FULL;   /* the same elements, through either buffer */
    int64_t alo, ahi, blo, bhi;
    elem_range(a, &alo, &ahi);
    elem_range(b, &blo, &bhi);
    if ((ahi + 1) * ia <= delta + blo * ib || delta + (bhi + 1) * ib <= alo * ia)
        return OT_OVERLAP_NONE;
    /* interleaved views (x[0::2], x[1::2]) share a range but no element;
     * wraps whose element grids are out of step are taken to share some */
    if (ia == ib && delta % ia == 0 && !lattice_meets(a, b, b->offset + delta / ia - a->offset))
        return OT_OVERLAP_NONE;
    return OT_OVERLAP_PARTIAL;
}

/* Sufficient test for distinct addresses: visiting dims by growing |stride|,
 * each stride must step past everything the smaller ones can reach. A
 * failure may be a false alarm (e.g. interleaved strides), which is the
 * safe side for a written-to view. */
bool ot__internal_overlap(const ot_tensor *t, int *dim)
{
    const ot_shape *s = &t->leaf.shape;
    int order[OT_MAX_DIMS], n = 0;
    if (ot__numel(s) == 0)
        return false;
    for (int d = 0; d < s->ndim; d++) {
        if (s->dims[d] <= 1)
            continue;
        if (t->strides[d] == 0) {
            *dim = d;
            return true;
        }
        int k = n++;
        for (; k > 0 && llabs(t->strides[order[k - 1]]) > llabs(t->strides[d]); k--)
            order[k] = order[k - 1];
        order[k] = d;
    }
    int64_t reach = 1;      /* element slots covered by the dims visited */
    for (int k = 0; k < n; k++) {
        int d = order[k];
        int64_t st = llabs(t->strides[d]);
        if (st < reach) {
            *dim = d;
            return true;
        }
        reach += st * (s->dims[d] - 1);
    }
    return false;
}

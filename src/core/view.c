/*
 * view.c - tensors that view another tensor's memory without copying:
 * slices, reshapes, transposes and broadcasts. Each checks its arguments
 * and the new strides and offset for overflow, and shares the buffer
 * (tensor.c counts its references). A view of a named tensor is named
 * after it, in NumPy's words (names.c: "x[:, 1]", "x.T").
 */
#include "internal.h"

/* Dim i of a view is dim i of its tensor (names carried over unchanged). */
static const int same[OT_MAX_DIMS] = {0, 1, 2, 3, 4, 5, 6, 7};

/* Formats n int64 values as a tuple, reusing the shape formatter so that
 * strides and perms read like shapes in messages. */
static const char *ints_str(int n, const int64_t *v, char *buf)
{
    ot_shape s = ot_shape_make(n, v);
    return ot__shape_str(&s, buf);
}

/* ---- slicing ------------------------------------------------------------- */

/* Python's slice.indices(): clips start and stop into the dim, and gives the
 * first index, the count and the step. An omitted step means 1. */
static void range_indices(ot_index ix, int64_t dim, int64_t *first, int64_t *count,
                          int64_t *step)
{
    int64_t st = ix.step == OT_NONE ? 1 : ix.step;
    int64_t lower = st > 0 ? 0 : -1, upper = st > 0 ? dim : dim - 1;
    int64_t b[2] = {ix.start, ix.stop};
    int64_t omitted[2] = {st > 0 ? lower : upper, st > 0 ? upper : lower};
    for (int i = 0; i < 2; i++) {
        if (b[i] == OT_NONE) {
            b[i] = omitted[i];
            continue;
        }
        if (b[i] < 0)
            b[i] += dim;
        b[i] = b[i] < lower ? lower : b[i] > upper ? upper : b[i];
    }
    if (st > 0)
        *count = b[1] > b[0] ? (b[1] - b[0] - 1) / st + 1 : 0;
    else
        *count = b[0] > b[1] ? (b[0] - b[1] - 1) / -st + 1 : 0;
    *first = b[0];
    *step = st;
}

/* Where a view call came from, for its errors. */
typedef struct site {
    const char *file;
    int line;
} site;

static int slice_overflow(const ot_tensor *t, int d, const char *what, int64_t v,
                          const char *by, int64_t w, const site *at)
{
    char sbuf[OT__SHAPE_STRLEN];
    return ot__err_set(OT_EOVERFLOW, at->file, at->line, "slice",
                       "%s %lld times %s %lld overflows int64 at axis %d of shape %s",
                       what, (long long)v, by, (long long)w, d,
                       ot__shape_str(&t->leaf.shape, sbuf));
}

/* Moves *off to index first of dim d. */
static int advance(const ot_tensor *t, int d, int64_t first, int64_t *off, const site *at)
{
    int64_t delta;
    if (!ot__mul_i64(&delta, first, t->strides[d]) || !ot__add_i64(off, *off, delta))
        return slice_overflow(t, d, "index", first, "stride", t->strides[d], at);
    return 0;
}

/* One NumPy index of dim d of shape as the first index, the count and the
 * step; an index (OT_IDX) gives count -1, its dim being dropped. Errors go
 * through fail (ot__err_set for views, a builder's ot__err) against
 * file:line. */
int ot__index_resolve(ot_index ix, int d, const ot_shape *shape, ot__fail_fn *fail,
                      const char *file, int line, int64_t *first, int64_t *count, int64_t *step)
{
    char sbuf[OT__SHAPE_STRLEN];
    int64_t dim = shape->dims[d];
    switch (ix.kind) {
    case OT_INDEX_ALL:
        *first = 0, *count = dim, *step = 1;
        return 0;
    case OT_INDEX_RANGE:
        if (ix.step == 0)
            return fail(OT_EINVAL, file, line, "slice",
                               "slice step cannot be zero (axis %d of shape %s)", d,
                               ot__shape_str(shape, sbuf));
        range_indices(ix, dim, first, count, step);
        return 0;
    case OT_INDEX_ONE:
        *first = ix.start < 0 ? ix.start + dim : ix.start;
        *count = -1, *step = 1;
        if (*first < 0 || *first >= dim)
            return fail(OT_EINVAL, file, line, "slice",
                        "index %lld is out of bounds for axis %d with size %lld (shape %s)",
                        (long long)ix.start, d, (long long)dim, ot__shape_str(shape, sbuf));
        return 0;
    default:
        return fail(OT_EINVAL, file, line, "slice", "index %d has unknown kind %d", d,
                           ix.kind);
    }
}

/* Applies one index to dim d of t: adds to *off and, unless the dim is
 * dropped, appends a dim to out. */
static int apply_index(const ot_tensor *t, int d, ot_index ix, ot_shape *out,
                       int64_t *strides, int64_t *off, const site *at)
{
    int64_t stride = t->strides[d];
    int64_t first, count, step;
    int rc = ot__index_resolve(ix, d, &t->leaf.shape, ot__err_set, at->file, at->line, &first,
                               &count, &step);
    if (rc != 0)
        return rc;
    if (count < 0)
        return advance(t, d, first, off, at);
    rc = advance(t, d, first, off, at);
    if (rc != 0)
        return rc;
    /* The stride of a dim of at most one element is never used: it keeps
     * the dim's own, so a step as large as INT64_MAX (Python's
     * a[1::sys.maxsize]) neither overflows here nor leaves a stride that
     * would overflow byte arithmetic elsewhere. */
    int64_t st = stride;
    if (count > 1 && !ot__mul_i64(&st, stride, step))
        return slice_overflow(t, d, "stride", stride, "step", step, at);
    strides[out->ndim] = st;
    out->dims[out->ndim++] = count;
    return 0;
}

/* A NULL argument: an error already in the slot (a failed call that gave
 * the NULL said why) or OT_ENULL naming it. */
static void null_arg(const char *op, const char *what, const site *at)
{
    if (!ot_errcode()) ot__err_set(OT_ENULL, at->file, at->line, op, "%s is NULL", what);
}

ot_tensor *ot_slice_at(const ot_tensor *t, int n, const ot_index *idx, const char *file, int line)
{
    const site at = {file, line};
    char sbuf[OT__SHAPE_STRLEN];
    if (!t) {
        null_arg("slice", "tensor", &at);
        return NULL;
    }
    int nd = t->leaf.shape.ndim;
    if (n < 0 || (n > 0 && !idx)) {
        if (n < 0)
            ot__err_set(OT_EINVAL, file, line, "slice", "negative index count %d", n);
        else
            null_arg("slice", "idx", &at);
        return NULL;
    }
    if (n > nd) {
        ot__err_set(OT_EINVAL, file, line, "slice", "too many indices: tensor is %d-dimensional, "
                    "but %d were indexed (shape %s)", nd, n, ot__shape_str(&t->leaf.shape, sbuf));
        return NULL;
    }
    ot_shape out = ot_shape_make(0, NULL);
    int64_t strides[OT_MAX_DIMS] = {0}, off = t->offset;
    int kept[OT_MAX_DIMS];   /* the source dim of each dim of the view */
    for (int d = 0; d < nd; d++) {
        int before = out.ndim;
        if (apply_index(t, d, d < n ? idx[d] : OT_ALL, &out, strides, &off, &at) != 0)
            return NULL;
        if (out.ndim > before) kept[before] = d;
    }
    return ot__axes_view(ot__name_slice(ot__view_new(t, &out, strides, off, "slice"), t, n, idx), t,
                         kept);
}

/* ---- reshape ------------------------------------------------------------- */

/* Replaces a -1 in s by the size that makes its numel equal numel. */
static int infer_dim(ot_shape *s, int64_t numel, const ot_shape *from, const site *at)
{
    char fbuf[OT__SHAPE_STRLEN];
    char sbuf[OT__SHAPE_STRLEN];
    int unknown = -1;
    size_t known = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (s->dims[d] != -1) {
            /* an overflowing product cannot divide numel; negative dims are
             * left for the shape check to report */
            if (s->dims[d] >= 0 && !ot__mul_size(&known, known, (size_t)s->dims[d]))
                known = SIZE_MAX;
            continue;
        }
        if (unknown >= 0)
            return ot__err_set(OT_EINVAL, at->file, at->line, "reshape",
                               "can only specify one unknown dimension in shape %s",
                               ot__shape_str(s, sbuf));
        unknown = d;
    }
    if (unknown < 0)
        return 0;
    if (known == 0 || (size_t)numel % known != 0)
        return ot__err_set(OT_ESHAPE, at->file, at->line, "reshape",
                           "cannot reshape tensor of size %lld into shape %s (the tensor's "
                           "shape is %s)", (long long)numel, ot__shape_str(s, sbuf),
                           ot__shape_str(from, fbuf));
    s->dims[unknown] = (int64_t)((size_t)numel / known);
    return 0;
}

/* Strides that let a view of shape os (numel > 0) and strides ostrides be
 * read in shape ns without a copy. The
 * old dims are cut into maximal chunks that are each one arithmetic run in
 * memory (size-1 dims never constrain); ns must split every chunk exactly,
 * its dims inside a chunk taking strides from the chunk's innermost one.
 * Returns 0, VIEW_COPY when some new dim would straddle two chunks, or
 * VIEW_OVERFLOW when a stride product overflows. */
enum { VIEW_COPY = 1, VIEW_OVERFLOW = 2 };
int ot__reshape_strides(const ot_shape *os, const int64_t *ostrides, const ot_shape *ns,
                        int64_t *out)
{
    int i = os->ndim - 1, j = ns->ndim - 1;
    while (i >= 0) {
        if (os->dims[i] == 1) {
            i--;
            continue;
        }
        int64_t inner = ostrides[i], size = os->dims[i], run;
        for (i--; i >= 0; i--) {
            if (os->dims[i] == 1)
                continue;
            /* a product that overflows matches no stride of a valid view */
            if (!ot__mul_i64(&run, inner, size) || ostrides[i] != run)
                break;
            if (!ot__mul_i64(&size, size, os->dims[i]))
                return VIEW_OVERFLOW;
        }
        int64_t acc = 1;
        for (; j >= 0 && acc < size; j--) {
            if (!ot__mul_i64(&out[j], inner, acc) || !ot__mul_i64(&acc, acc, ns->dims[j]))
                return VIEW_OVERFLOW;
        }
        if (acc != size)
            return VIEW_COPY;
    }
    /* what is left are size-1 dims (the numels agree): give them the stride
     * they would have in a contiguous layout */
    for (; j >= 0; j--) {
        if (j + 1 >= ns->ndim)
            out[j] = 1;
        else if (!ot__mul_i64(&out[j], out[j + 1], ns->dims[j + 1]))
            return VIEW_OVERFLOW;
    }
    return 0;
}

ot_tensor *ot_reshape_at(const ot_tensor *t, ot_shape shape, const char *file, int line)
{
    const site at = {file, line};
    char sbuf[OT__SHAPE_STRLEN], tbuf[OT__SHAPE_STRLEN], ubuf[OT__SHAPE_STRLEN];
    if (!t) {
        null_arg("reshape", "tensor", &at);
        return NULL;
    }
    const ot_shape *os = &t->leaf.shape;
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    int64_t numel = ot__numel(os), strides[OT_MAX_DIMS] = {0};
    if (shape.ndim >= 0 && shape.ndim <= OT_MAX_DIMS && infer_dim(&shape, numel, os, &at) != 0)
        return NULL;
    if (ot__shape_check(&shape, dt, "reshape", file, line) != 0)
        return NULL;
    if (ot__numel(&shape) != numel) {
        ot__err_set(OT_ESHAPE, file, line, "reshape", "cannot reshape tensor of size %lld into "
                    "shape %s (the tensor's shape is %s)", (long long)numel,
                    ot__shape_str(&shape, sbuf), ot__shape_str(os, tbuf));
        return NULL;
    }
    if (numel == 0 && !ot__contiguous_strides(&shape, ot_dtype_size(dt), strides)) {
        ot__err_set(OT_EOVERFLOW, file, line, "reshape", "shape %s of %s is too big",
                    ot__shape_str(&shape, sbuf), ot_dtype_name(dt));
        return NULL;
    }
    int vs = numel > 0 ? ot__reshape_strides(os, t->strides, &shape, strides) : 0;
    if (vs == VIEW_OVERFLOW) {
        ot__err_set(OT_EOVERFLOW, file, line, "reshape",
                    "strides of a view of shape %s with strides %s overflow int64 in shape %s",
                    ot__shape_str(os, tbuf), ints_str(os->ndim, t->strides, ubuf),
                    ot__shape_str(&shape, sbuf));
        return NULL;
    }
    if (vs == VIEW_COPY) {
        ot__err_set(OT_EINVAL, file, line, "reshape",
                    "a view of shape %s with strides %s cannot be reshaped to %s "
                    "without a copy; ot_copy it first",
                    ot__shape_str(os, tbuf), ints_str(os->ndim, t->strides, ubuf),
                    ot__shape_str(&shape, sbuf));
        return NULL;
    }
    ot_tensor *v = ot__name_shaped(ot__view_new(t, &shape, strides, t->offset, "reshape"), t, "reshape");
    return ot__shape_eq(&shape, os) ? ot__axes_view(v, t, same) : v;
}

/* ---- transpose and broadcast --------------------------------------------- */

static bool is_permutation(const int *perm, int nd)
{
    bool seen[OT_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        if (perm[i] < 0 || perm[i] >= nd || seen[perm[i]])
            return false;
        seen[perm[i]] = true;
    }
    return true;
}

ot_tensor *(ot_transpose)(const ot_tensor *t, const int *perm)
{
    char pbuf[OT__SHAPE_STRLEN], sbuf[OT__SHAPE_STRLEN];
    if (!t) {
        ot__err_null("transpose", "tensor");
        return NULL;
    }
    int nd = t->leaf.shape.ndim;
    int p[OT_MAX_DIMS];
    for (int i = 0; i < nd; i++)
        p[i] = perm ? perm[i] : nd - 1 - i;
    if (!is_permutation(p, nd)) {
        int64_t wide[OT_MAX_DIMS];
        for (int i = 0; i < nd; i++)
            wide[i] = p[i];
        ot__err_set(OT_EINVAL, NULL, 0, "transpose",
                    "perm %s is not a permutation of %d dims (shape %s)",
                    ints_str(nd, wide, pbuf), nd, ot__shape_str(&t->leaf.shape, sbuf));
        return NULL;
    }
    ot_shape out = ot_shape_make(0, NULL);
    int64_t strides[OT_MAX_DIMS] = {0};
    out.ndim = nd;
    for (int i = 0; i < nd; i++) {
        out.dims[i] = t->leaf.shape.dims[p[i]];
        strides[i] = t->strides[p[i]];
    }
    return ot__axes_view(ot__name_transpose(ot__view_new(t, &out, strides, t->offset, "transpose"), t, p),
                         t, p);
}

ot_tensor *(ot_broadcast_to)(const ot_tensor *t, ot_shape shape)
{
    char sbuf[OT__SHAPE_STRLEN], tbuf[OT__SHAPE_STRLEN];
    if (!t) {
        ot__err_null("broadcast_to", "tensor");
        return NULL;
    }
    const ot_shape *src = &t->leaf.shape;
    if (ot__shape_check(&shape, (ot_dtype)t->leaf.dtype, "broadcast_to", NULL, 0) != 0)
        return NULL;
    if (shape.ndim < src->ndim) {
        ot__err_set(OT_ESHAPE, NULL, 0, "broadcast_to",
                    "cannot broadcast shape %s to %s: the target has fewer dims",
                    ot__shape_str(src, tbuf), ot__shape_str(&shape, sbuf));
        return NULL;
    }
    int64_t strides[OT_MAX_DIMS] = {0};
    int lead = shape.ndim - src->ndim;
    for (int d = lead; d < shape.ndim; d++) {
        int64_t have = src->dims[d - lead];
        if (have == shape.dims[d])
            strides[d] = t->strides[d - lead];
        else if (have != 1) {
            ot__err_set(OT_ESHAPE, NULL, 0, "broadcast_to",
                        "cannot broadcast shape %s to %s (dim %d: %lld vs %lld)",
                        ot__shape_str(src, tbuf), ot__shape_str(&shape, sbuf), d,
                        (long long)have, (long long)shape.dims[d]);
            return NULL;
        }
    }
    ot_tensor *v = ot__view_new(t, &shape, strides, t->offset, "broadcast_to");
    if (v)
        v->readonly = true;
    v = ot__name_shaped(v, t, "broadcast_to");
    return shape.ndim == src->ndim ? ot__axes_view(v, t, same) : v;
}

/*
 * tensor.c - tensors: refcounted 64-byte-aligned buffers and buffers over
 * the caller's memory (ot_wrap), creation, host copies in and out for any
 * strides (ot_get_n/ot_set_n checking the host size), accessors, value
 * printing (NumPy's summary of large tensors, options per call). Views of
 * a tensor (slice, reshape, transpose, broadcast_to) are made in view.c,
 * and compared for shared memory in overlap.c.
 *
 * Every loop over elements is an iterative row-major counter: strides may
 * be negative or zero, and no walk recurses.
 */
#include "internal.h"

#include <stdio.h>

/* ---- dtypes -------------------------------------------------------------- */

size_t ot_dtype_size(ot_dtype dtype)
{
    switch (dtype) {
    case OT_F32: return sizeof(float);
    case OT_F64: return sizeof(double);
    case OT_I32: return sizeof(int32_t);
    case OT_F16:
    case OT_BF16: return sizeof(uint16_t);
    default: return 0;
    }
}

const char *ot_dtype_name(ot_dtype dtype)
{
    switch (dtype) {
    case OT_F32: return "float32";
    case OT_F64: return "float64";
    case OT_I32: return "int32";
    case OT_F16: return "float16";
    case OT_BF16: return "bfloat16";
    default: return "unknown";
    }
}

/* ---- small helpers ------------------------------------------------------- */

static size_t itemsize(const ot_tensor *t)
{
    return ot_dtype_size((ot_dtype)t->leaf.dtype);
}

static char *base_ptr(const ot_tensor *t)
{
    return (char *)t->buf->data;
}

/* Address of the element at element offset off (which addresses an element
 * of the view, so it is never negative). */
static char *elem_ptr(const ot_tensor *t, int64_t off)
{
    return base_ptr(t) + (size_t)off * itemsize(t);
}

static int null_arg(const char *fn, const char *what)
{
    return ot__err_set(OT_ENULL, NULL, 0, fn, "%s is NULL", what);
}

/* Advances a row-major counter over nd dims, keeping *off (in elements) in
 * step. Returns how many trailing dims wrapped back to 0: nd means the walk
 * is over (and the counter is back at the start). */
static int counter_next(int nd, const int64_t *dims, const int64_t *strides,
                        int64_t *idx, int64_t *off)
{
    int d = nd - 1;
    for (; d >= 0; d--) {
        *off += strides[d];
        if (++idx[d] < dims[d])
            break;
        *off -= strides[d] * dims[d];
        idx[d] = 0;
    }
    return nd - 1 - d;
}

/* A walk over the rows (innermost dim) of a view, so that copies can move a
 * whole row at once when its stride is 1. */
typedef struct rows {
    int outer;                    /* dims walked by the counter */
    const int64_t *dims, *strides;
    int64_t idx[OT_MAX_DIMS];
    int64_t off;                  /* element offset of the current row */
    int64_t len, step;            /* elements per row and their stride */
    int64_t left;                 /* rows still to visit */
} rows;

static void rows_init(rows *r, const ot_tensor *t)
{
    const ot_shape *s = &t->leaf.shape;
    int64_t n = ot__numel(s);
    memset(r, 0, sizeof *r);
    r->outer = s->ndim > 0 ? s->ndim - 1 : 0;
    r->dims = s->dims;
    r->strides = t->strides;
    r->off = t->offset;
    r->len = s->ndim > 0 ? s->dims[s->ndim - 1] : 1;
    r->step = s->ndim > 0 ? t->strides[s->ndim - 1] : 0;
    r->left = n == 0 ? 0 : n / r->len;
}

static void rows_next(rows *r)
{
    r->left--;
    counter_next(r->outer, r->dims, r->strides, r->idx, &r->off);
}

/* ---- buffers and tensor structs ------------------------------------------ */

static ot_buffer *buffer_new(size_t nbytes)
{
    size_t cap;
    if (!ot__add_size(&cap, nbytes, 63))
        return NULL;
    cap &= ~(size_t)63;
    if (cap == 0)
        cap = 64;     /* zero-size tensors still get a valid pointer */
    ot_buffer *b = ot__malloc(sizeof *b);
    if (!b)
        return NULL;
    memset(b, 0, sizeof *b);
    b->data = ot__data_alloc(cap);
    if (!b->data) {
        free(b);
        return NULL;
    }
    atomic_init(&b->refs, 1);
    b->nbytes = nbytes;
    return b;
}

static void buffer_release(ot_buffer *b)
{
    if (b && atomic_fetch_sub_explicit(&b->refs, 1, memory_order_acq_rel) == 1) {
        ot_buffer *of = b->grad_of;
        if (!b->wrapped)
            free(b->data);
        else if (b->free_fn)
            b->free_fn(b->user, b->wrapped);
        free(b);
        buffer_release(of);
    }
}

void ot__backend_hold(ot_backend *be)
{
    atomic_fetch_add_explicit(&be->holds, 1, memory_order_relaxed);
}

void ot__backend_drop(ot_backend *be)
{
    if (atomic_fetch_sub_explicit(&be->holds, 1, memory_order_acq_rel) == 1) be->teardown(be);
}

int ot__backend_gone_err(const ot_backend *be, const char *fn, const char *file, int line,
                         const char *what)
{
    return ot__err_set(OT_EBACKEND, file, line, fn, "%s is on backend '%s', which "
                       "ot_backend_free has freed", what, be->vt->name);
}

/* A tensor struct over buf (whose reference it takes over), its leaf node
 * holding the creator's reference. Strides and offset are left zero. */
static ot_tensor *tensor_alloc(ot_backend *be, const ot_shape *shape, ot_dtype dt,
                               ot_buffer *buf)
{
    ot_tensor *t = ot__calloc(1, sizeof *t);
    if (!t)
        return NULL;
    atomic_init(&t->leaf.refs, 1);
    atomic_init(&t->leaf.owner, ot__thread_id());   /* its owner count: parents' */
    t->leaf.kind = OT_NODE_LEAF;
    t->leaf.op = OT_OP_NONE;
    t->leaf.tag = OT_OP_NONE;
    t->leaf.dtype = (uint8_t)dt;
    ot__half_note(dt);
    t->leaf.shape = *shape;
    t->leaf.be = be;
    t->buf = buf;
    if (be) ot__backend_hold(be);
    if (be) t->serial = atomic_fetch_add_explicit(&be->serials, 1, memory_order_relaxed) + 1;
    ot__node_digest(&t->leaf);
    return t;
}

void ot__tensor_destroy(ot_tensor *t)
{
    if (!t)
        return;
    if (t->buf && t->buf->var == t) t->buf->var = NULL;
    buffer_release(t->buf);
    free(t->name);
    ot__annot_free(t->leaf.annot);
    ot_backend *be = t->leaf.be;
    free(t);
    if (be) ot__backend_drop(be);
}

bool ot__contiguous_strides(const ot_shape *s, size_t isz, int64_t *strides)
{
    size_t step = 1, bytes;
    memset(strides, 0, OT_MAX_DIMS * sizeof *strides);
    for (int d = s->ndim - 1; d >= 0; d--) {
        strides[d] = (int64_t)step;
        if (s->dims[d] > 1 && !ot__mul_size(&step, step, (size_t)s->dims[d]))
            return false;
    }
    return ot__mul_size(&bytes, step, isz) && bytes <= PTRDIFF_MAX;
}

static ot_tensor *tensor_new(ot_backend *be, ot_shape shape, ot_dtype dt, const char *fn)
{
    char sbuf[OT__SHAPE_STRLEN];
    int64_t strides[OT_MAX_DIMS];
    size_t nbytes;
    if (!be) {
        ot__err_null(fn, "backend");
        return NULL;
    }
    if (ot__backend_gone(be, fn, NULL, 0, "the new tensor"))
        return NULL;
    if (dt == OT_DTYPE_DEFAULT)
        dt = be->opts.dtype ? be->opts.dtype : OT_F32;
    if (ot_dtype_size(dt) == 0) {
        ot__err_set(OT_EDTYPE, NULL, 0, fn, "unknown dtype %d", (int)dt);
        return NULL;
    }
    if (ot__shape_check(&shape, dt, fn, NULL, 0) != 0)
        return NULL;
    if (!ot__contiguous_strides(&shape, ot_dtype_size(dt), strides) ||
        !ot__mul_size(&nbytes, (size_t)ot__numel(&shape), ot_dtype_size(dt))) {
        ot__err_set(OT_EOVERFLOW, NULL, 0, fn, "shape %s of %s is too big",
                    ot__shape_str(&shape, sbuf), ot_dtype_name(dt));
        return NULL;
    }
    ot_buffer *buf = buffer_new(nbytes);
    ot_tensor *t = buf ? tensor_alloc(be, &shape, dt, buf) : NULL;
    if (!t) {
        buffer_release(buf);
        ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate %zu bytes for shape %s",
                    nbytes, ot__shape_str(&shape, sbuf));
        return NULL;
    }
    memcpy(t->strides, strides, sizeof strides);
    return t;
}

ot_tensor *ot__view_new(const ot_tensor *t, const ot_shape *shape,
                           const int64_t *strides, int64_t offset, const char *fn)
{
    ot_tensor *v = tensor_alloc(t->leaf.be, shape, (ot_dtype)t->leaf.dtype, t->buf);
    if (!v) {
        ot__err_set(OT_ENOMEM, NULL, 0, fn, "cannot allocate a view");
        return NULL;
    }
    atomic_fetch_add_explicit(&t->buf->refs, 1, memory_order_relaxed);
    memcpy(v->strides, strides, sizeof v->strides);
    /* No elements are addressed by a zero-size view, so keep an offset that
     * is known to lie inside the buffer. */
    v->offset = ot__numel(shape) == 0 ? t->offset : offset;
    v->readonly = t->readonly;
    return v;
}

/* ---- element copies ------------------------------------------------------ */

static void copy_out(const ot_tensor *t, void *host)
{
    size_t isz = itemsize(t);
    char *dst = host;
    if (ot_tensor_is_contiguous(t)) {
        memcpy(dst, elem_ptr(t, t->offset), (size_t)ot__numel(&t->leaf.shape) * isz);
        return;
    }
    rows r;
    for (rows_init(&r, t); r.left > 0; rows_next(&r)) {
        if (r.step == 1) {
            memcpy(dst, elem_ptr(t, r.off), (size_t)r.len * isz);
            dst += (size_t)r.len * isz;
            continue;
        }
        for (int64_t i = 0; i < r.len; i++, dst += isz)
            memcpy(dst, elem_ptr(t, r.off + i * r.step), isz);
    }
}

/* t must be free of internal overlap, so every element is written once. */
static void copy_in(ot_tensor *t, const void *host)
{
    size_t isz = itemsize(t);
    const char *src = host;
    if (ot_tensor_is_contiguous(t)) {
        memcpy(elem_ptr(t, t->offset), src, (size_t)ot__numel(&t->leaf.shape) * isz);
        return;
    }
    rows r;
    for (rows_init(&r, t); r.left > 0; rows_next(&r)) {
        if (r.step == 1) {
            memcpy(elem_ptr(t, r.off), src, (size_t)r.len * isz);
            src += (size_t)r.len * isz;
            continue;
        }
        for (int64_t i = 0; i < r.len; i++, src += isz)
            memcpy(elem_ptr(t, r.off + i * r.step), src, isz);
    }
}

/* The 16-bit dtypes' host copies: floats, converted a row at a time. */
static bool is_half(const ot_tensor *t)
{
    return ot__is_half(t->leaf.dtype);
}

static void widen_out(const ot_tensor *t, float *dst)
{
    int dt = t->leaf.dtype;
    rows r;
    for (rows_init(&r, t); r.left > 0; rows_next(&r)) {
        if (r.step == 1)
            ot__half_widen(dt, (const uint16_t *)elem_ptr(t, r.off), dst, (size_t)r.len);
        else
            for (int64_t i = 0; i < r.len; i++)
                ot__half_widen(dt, (const uint16_t *)elem_ptr(t, r.off + i * r.step), dst + i, 1);
        dst += r.len;
    }
}

static void narrow_in(ot_tensor *t, const float *src)
{
    int dt = t->leaf.dtype;
    rows r;
    for (rows_init(&r, t); r.left > 0; rows_next(&r)) {
        if (r.step == 1)
            ot__half_narrow(dt, src, (uint16_t *)elem_ptr(t, r.off), (size_t)r.len);
        else
            for (int64_t i = 0; i < r.len; i++)
                ot__half_narrow(dt, src + i, (uint16_t *)elem_ptr(t, r.off + i * r.step), 1);
        src += r.len;
    }
}

/* Host copies as the caller sees them: raw copies the stored bits. */
static void host_out(const ot_tensor *t, void *host, bool raw)
{
    if (!raw && is_half(t))
        widen_out(t, host);
    else
        copy_out(t, host);
}

static void host_in(ot_tensor *t, const void *host, bool raw)
{
    if (!raw && is_half(t))
        narrow_in(t, host);
    else
        copy_in(t, host);
}

static void fill_elems(ot_tensor *t, double value)
{
    union { float f; double d; int32_t i; uint16_t h; } v;
    size_t isz = itemsize(t);
    ot__store(&v, (ot_dtype)t->leaf.dtype, value);
    rows r;
    for (rows_init(&r, t); r.left > 0; rows_next(&r))
        for (int64_t i = 0; i < r.len; i++)
            memcpy(elem_ptr(t, r.off + i * r.step), &v, isz);
}

/* Writes through t would hit one element twice, or t is a broadcast view. */
static int check_writable(const ot_tensor *t, const char *fn)
{
    int dim;
    if (ot__internal_overlap(t, &dim))
        return ot__err_set(OT_EALIAS, NULL, 0, fn,
                           "written-to tensor has overlapping elements (stride %lld at dim %d)",
                           (long long)t->strides[dim], dim);
    if (t->readonly)
        return ot__err_set(OT_EALIAS, NULL, 0, fn,
                           "written-to tensor is a read-only broadcast view");
    return 0;
}

/* ---- creation ------------------------------------------------------------ */

ot_tensor *(ot_empty)(ot_backend *be, ot_shape shape, ot_dtype dtype)
{
    return tensor_new(be, shape, dtype, "empty");
}

static ot_tensor *full_named(ot_backend *be, ot_shape shape, ot_dtype dtype,
                             double value, const char *fn)
{
    ot_tensor *t = tensor_new(be, shape, dtype, fn);
    if (t)
        fill_elems(t, value);
    return t;
}

ot_tensor *(ot_zeros)(ot_backend *be, ot_shape shape, ot_dtype dtype)
{
    return full_named(be, shape, dtype, 0.0, "zeros");
}

ot_tensor *(ot_ones)(ot_backend *be, ot_shape shape, ot_dtype dtype)
{
    return full_named(be, shape, dtype, 1.0, "ones");
}

ot_tensor *(ot_full)(ot_backend *be, ot_shape shape, ot_dtype dtype, double value)
{
    return full_named(be, shape, dtype, value, "full");
}

ot_tensor *(ot_array)(ot_backend *be, ot_shape shape, ot_dtype dtype, const void *data)
{
    if (be && !data) {
        null_arg("array", "data");
        return NULL;
    }
    ot_tensor *t = tensor_new(be, shape, dtype, "array");
    if (t)
        host_in(t, data, false);
    return t;
}

ot_tensor *(ot_zeros_like)(const ot_tensor *t)
{
    if (!t) {
        ot__err_null("zeros_like", "tensor");
        return NULL;
    }
    return full_named(t->leaf.be, t->leaf.shape, (ot_dtype)t->leaf.dtype, 0.0,
                      "zeros_like");
}

ot_tensor *(ot_copy)(const ot_tensor *t)
{
    if (!t) {
        ot__err_null("copy", "tensor");
        return NULL;
    }
    ot_tensor *c = tensor_new(t->leaf.be, t->leaf.shape, (ot_dtype)t->leaf.dtype, "copy");
    if (c) {
        copy_out(t, base_ptr(c));
        c->leaf.axes = t->leaf.axes;
    }
    return c;
}

void ot_tensor_free(ot_tensor *t)
{
    if (t)
        ot_release_at(&t->leaf, NULL, 0);   /* its errors name no library line */
}

ot_node *ot_tensor_node(ot_tensor *t)
{
    return t ? &t->leaf : NULL;
}

/* ---- data ---------------------------------------------------------------- */

int (ot_fill)(ot_tensor *t, double value)
{
    if (!t)
        return ot__err_null("fill", "tensor");
    ot_clear_error();
    int rc = check_writable(t, "fill");
    if (rc == 0)
        fill_elems(t, value);
    return rc;
}

static int get_host(const ot_tensor *t, void *host, bool raw, const char *fn)
{
    if (!t)
        return ot__err_null(fn, "tensor");
    ot_clear_error();
    if (!host)
        return null_arg(fn, "host");
    host_out(t, host, raw);
    return 0;
}

static int set_host(ot_tensor *t, const void *host, bool raw, const char *fn)
{
    if (!t)
        return ot__err_null(fn, "tensor");
    ot_clear_error();
    if (!host)
        return null_arg(fn, "host");
    int rc = check_writable(t, fn);
    if (rc == 0)
        host_in(t, host, raw);
    return rc;
}

int (ot_get)(const ot_tensor *t, void *host) { return get_host(t, host, false, "get"); }
int (ot_set)(ot_tensor *t, const void *host) { return set_host(t, host, false, "set"); }
int (ot_get_raw)(const ot_tensor *t, void *host) { return get_host(t, host, true, "get_raw"); }
int (ot_set_raw)(ot_tensor *t, const void *host) { return set_host(t, host, true, "set_raw"); }

/* The byte count host memory needs for t's values, checked against what the
 * caller says it has (ot_get_n, ot_set_n). */
static int check_host_bytes(const ot_tensor *t, const void *host, size_t nbytes,
                            const char *fn)
{
    char sbuf[OT__SHAPE_STRLEN];
    size_t need = (size_t)ot__numel(&t->leaf.shape) * (is_half(t) ? sizeof(float) : itemsize(t));
    if (!host)
        return null_arg(fn, "host");
    if (nbytes < need)
        return ot__err_set(OT_EINVAL, NULL, 0, fn,
                           "host buffer of %zu bytes is too small for %s %s (%zu bytes)",
                           nbytes, ot_dtype_name((ot_dtype)t->leaf.dtype),
                           ot__shape_str(&t->leaf.shape, sbuf), need);
    return 0;
}

int (ot_get_n)(const ot_tensor *t, void *host, size_t nbytes)
{
    if (!t)
        return ot__err_null("get_n", "tensor");
    ot_clear_error();
    int rc = check_host_bytes(t, host, nbytes, "get_n");
    if (rc == 0)
        host_out(t, host, false);
    return rc;
}

int (ot_set_n)(ot_tensor *t, const void *host, size_t nbytes)
{
    if (!t)
        return ot__err_null("set_n", "tensor");
    ot_clear_error();
    int rc = check_host_bytes(t, host, nbytes, "set_n");
    if (rc == 0)
        rc = check_writable(t, "set_n");
    if (rc == 0)
        host_in(t, host, false);
    return rc;
}

/* ---- wrapping a caller's memory ------------------------------------------ */

/* The lowest and highest element offsets, from ptr, that shape and strides
 * reach; false when they overflow. */
static bool wrap_reach(const ot_shape *s, const int64_t *strides, int64_t *lo, int64_t *hi)
{
    *lo = *hi = 0;
    if (ot__numel(s) == 0)
        return true;
    for (int d = 0; d < s->ndim; d++) {
        int64_t reach;
        if (__builtin_mul_overflow(strides[d], s->dims[d] - 1, &reach) ||
            __builtin_add_overflow(reach < 0 ? *lo : *hi, reach, reach < 0 ? lo : hi))
            return false;
    }
    return true;
}

/* A buffer over the caller's memory: data is the lowest byte the view
 * reaches, so that offsets stay non-negative for negative strides. */
static ot_buffer *wrap_buffer(char *ptr, int64_t lo, size_t nbytes,
                              void (*free_fn)(void *, void *), void *user)
{
    ot_buffer *b = ot__calloc(1, sizeof *b);
    if (!b)
        return NULL;
    atomic_init(&b->refs, 1);
    b->nbytes = nbytes;
    b->data = ptr + lo;
    b->wrapped = ptr;
    b->free_fn = free_fn;
    b->user = user;
    return b;
}

ot_tensor *(ot_wrap)(ot_backend *be, ot_shape shape, ot_dtype dtype, void *ptr,
                   const int64_t *strides, void (*free_fn)(void *user, void *ptr),
                   void *user)
{
    char sbuf[OT__SHAPE_STRLEN];
    int64_t st[OT_MAX_DIMS] = {0}, lo, hi;
    if (!be || !ptr) {
        ot__err_null("wrap", be ? "ptr" : "backend");
        return NULL;
    }
    if (ot__backend_gone(be, "wrap", NULL, 0, "the new tensor"))
        return NULL;
    if (dtype == OT_DTYPE_DEFAULT)
        dtype = be->opts.dtype ? be->opts.dtype : OT_F32;
    size_t isz = ot_dtype_size(dtype), nbytes;
    if (isz == 0) {
        ot__err_set(OT_EDTYPE, NULL, 0, "wrap", "unknown dtype %d", (int)dtype);
        return NULL;
    }
    if (ot__shape_check(&shape, dtype, "wrap", NULL, 0) != 0)
        return NULL;
    if ((uintptr_t)ptr % isz) {
        ot__err_set(OT_EINVAL, NULL, 0, "wrap",
                    "pointer %p is not aligned to its %zu-byte %s elements", ptr, isz,
                    ot_dtype_name(dtype));
        return NULL;
    }
    if (strides)
        memcpy(st, strides, (size_t)shape.ndim * sizeof *st);
    else
        ot__contiguous_strides(&shape, isz, st);
    /* hi >= 0 >= lo, so hi - lo is exact in unsigned arithmetic */
    if (!wrap_reach(&shape, st, &lo, &hi) ||
        !ot__mul_size(&nbytes, (size_t)((uint64_t)hi - (uint64_t)lo) + 1, isz) ||
        nbytes > PTRDIFF_MAX) {
        ot__err_set(OT_EOVERFLOW, NULL, 0, "wrap", "strides of shape %s reach too far",
                    ot__shape_str(&shape, sbuf));
        return NULL;
    }
    ot_buffer *buf = wrap_buffer(ptr, lo * (int64_t)isz, nbytes, free_fn, user);
    ot_tensor *t = buf ? tensor_alloc(be, &shape, dtype, buf) : NULL;
    if (!t) {
        free(buf);
        ot__err_set(OT_ENOMEM, NULL, 0, "wrap", "cannot allocate a tensor");
        return NULL;
    }
    memcpy(t->strides, st, sizeof st);
    t->offset = -lo;
    return t;
}

/* ---- printing ------------------------------------------------------------ */

static bool put_n(FILE *f, char c, int n)
{
    for (int i = 0; i < n; i++)
        if (fputc(c, f) == EOF)
            return false;
    return true;
}

/* What a print shows: per dim, how many indices (2 * edge where that dim is
 * summarised), and the summarised dims, whose index edge follows a gap. */
typedef struct shown {
    int nd, edge, precision;
    int64_t dims[OT_MAX_DIMS];
    bool gap[OT_MAX_DIMS];
} shown;

static void shown_init(shown *sh, const ot_tensor *t, const ot_print_options *o)
{
    const ot_shape *s = &t->leaf.shape;
    int64_t threshold = o && o->threshold ? o->threshold : 1000;
    bool summarise = threshold > 0 && ot__numel(s) > threshold;
    sh->nd = s->ndim;
    sh->edge = o && o->edgeitems > 0 ? o->edgeitems : 3;
    sh->precision = o && o->precision > 0 ? o->precision : 8;
    for (int d = 0; d < s->ndim; d++) {
        sh->gap[d] = summarise && s->dims[d] > 2 * (int64_t)sh->edge;
        sh->dims[d] = sh->gap[d] ? 2 * sh->edge : s->dims[d];
    }
}

/* The value of the element at shown index idx. */
static double shown_value(const shown *sh, const ot_tensor *t, const int64_t *idx)
{
    int64_t off = t->offset;
    for (int d = 0; d < sh->nd; d++) {
        int64_t i = sh->gap[d] && idx[d] >= sh->edge
                        ? t->leaf.shape.dims[d] - 2 * sh->edge + idx[d] : idx[d];
        off += i * t->strides[d];
    }
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    return ot__load(elem_ptr(t, off), dt);
}

/* Advances the shown index; returns how many trailing dims wrapped. */
static int shown_next(const shown *sh, int64_t *idx)
{
    static const int64_t none[OT_MAX_DIMS];
    int64_t off = 0;
    return counter_next(sh->nd, sh->dims, none, idx, &off);
}

/* NumPy's format for the values shown (print.c), every one the same width
 * so that columns line up. */
static void pick_format(const shown *sh, const ot_tensor *t, ot__numfmt *fmt)
{
    ot__numfmt_start(fmt, (ot_dtype)t->leaf.dtype, sh->precision);
    do {
        int64_t idx[OT_MAX_DIMS] = {0};
        do
            ot__numfmt_see(fmt, shown_value(sh, t, idx));
        while (shown_next(sh, idx) < sh->nd);
    } while (ot__numfmt_next_pass(fmt));
}

/* Brackets come from the counter: when k trailing dims wrap, k rows close,
 * k newlines separate the blocks (blank lines between matrices), and k rows
 * open, indented by the dims that did not wrap. A summarised dim's gap is
 * "..." in a row, or a line of its own between rows and blocks. */
static bool print_values(const ot_tensor *t, FILE *f, const ot_print_options *o)
{
    shown sh;
    ot__numfmt fmt;
    shown_init(&sh, t, o);
    pick_format(&sh, t, &fmt);
    int nd = sh.nd;
    int64_t idx[OT_MAX_DIMS] = {0};
    char buf[OT__NUMFMT_STRLEN];
    bool ok = put_n(f, '[', nd);
    for (;;) {
        ot__numfmt_str(&fmt, shown_value(&sh, t, idx), buf);
        ok = ok && fputs(buf, f) != EOF;
        int k = shown_next(&sh, idx);
        if (k == nd)
            break;
        bool gap = sh.gap[nd - 1 - k] && idx[nd - 1 - k] == sh.edge;
        if (k == 0) {
            ok = ok && put_n(f, ' ', 1) && (!gap || fputs("... ", f) != EOF);
            continue;
        }
        ok = ok && put_n(f, ']', k) && put_n(f, '\n', k) && put_n(f, ' ', nd - k);
        if (gap)
            ok = ok && fputs("...", f) != EOF && put_n(f, '\n', k) && put_n(f, ' ', nd - k);
        ok = ok && put_n(f, '[', k);
    }
    return ok && put_n(f, ']', nd) && put_n(f, '\n', 1);
}

int ot_tensor_print_opts(const ot_tensor *t, FILE *f, const ot_print_options *opts)
{
    if (!t)
        return ot__err_null("tensor_print", "tensor");
    ot_clear_error();
    if (!f)
        return null_arg("tensor_print", "f");
    if (opts && (opts->edgeitems < 0 || opts->edgeitems > (1 << 20) || opts->precision < 0 || opts->precision > 17))
        return ot__err_set(OT_EINVAL, NULL, 0, "tensor_print",
                           "bad print options: edgeitems %d (0..2^20), precision %d (0..17)",
                           opts->edgeitems, opts->precision);
    bool ok = ot__numel(&t->leaf.shape) == 0 ? fputs("[]\n", f) != EOF
                                             : print_values(t, f, opts);
    if (!ok || fflush(f) == EOF || ferror(f))
        return ot__err_set(OT_EIO, NULL, 0, "tensor_print", "write failed");
    return 0;
}

int ot_tensor_print(const ot_tensor *t, FILE *f)
{
    return ot_tensor_print_opts(t, f, NULL);
}

/* ---- accessors ----------------------------------------------------------- */

ot_dtype ot_tensor_dtype(const ot_tensor *t)
{
    return t ? (ot_dtype)t->leaf.dtype : OT_DTYPE_DEFAULT;
}

int ot_tensor_ndim(const ot_tensor *t)
{
    return t ? t->leaf.shape.ndim : 0;
}

ot_shape ot_tensor_shape(const ot_tensor *t)
{
    return t ? t->leaf.shape : ot_shape_make(0, NULL);
}

/* A negative axis counts from the end; -1 (with OT_EINVAL) when out of range. */
static int norm_axis(const ot_tensor *t, int axis, const char *fn)
{
    int nd = t->leaf.shape.ndim;
    int a = axis < 0 ? axis + nd : axis;
    if (a < 0 || a >= nd) {
        ot__err_set(OT_EINVAL, NULL, 0, fn,
                    "axis %d is out of bounds for tensor of dimension %d", axis, nd);
        return -1;
    }
    return a;
}

int64_t ot_tensor_dim(const ot_tensor *t, int axis)
{
    if (!t)
        return 0;
    int a = norm_axis(t, axis, "tensor_dim");
    return a < 0 ? -1 : t->leaf.shape.dims[a];
}

int64_t ot_tensor_stride(const ot_tensor *t, int axis)
{
    if (!t)
        return 0;
    int a = norm_axis(t, axis, "tensor_stride");
    return a < 0 ? -1 : t->strides[a];
}

int64_t ot_tensor_offset(const ot_tensor *t)
{
    return t ? t->offset : 0;
}

int64_t ot_tensor_numel(const ot_tensor *t)
{
    return t ? ot__numel(&t->leaf.shape) : 0;
}

void *ot_tensor_data(const ot_tensor *t)
{
    return t ? elem_ptr(t, t->offset) : NULL;
}

ot_backend *ot_tensor_backend(const ot_tensor *t)
{
    return t ? t->leaf.be : NULL;
}

/* C order; strides of size-1 dims never matter, and empty views are
 * contiguous (as in NumPy). */
bool ot_tensor_is_contiguous(const ot_tensor *t)
{
    if (!t)
        return false;
    const ot_shape *s = &t->leaf.shape;
    if (ot__numel(s) == 0)
        return true;
    int64_t expect = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        if (s->dims[d] != 1 && t->strides[d] != expect)
            return false;
        expect *= s->dims[d];
    }
    return true;
}

const char *ot_tensor_name(const ot_tensor *t)
{
    return t ? t->name : NULL;
}

int (ot_tensor_set_name)(ot_tensor *t, const char *name)
{
    if (!t)
        return ot__err_null("tensor_set_name", "tensor");
    ot_clear_error();
    int rc = ot__name_check("tensor_set_name", name);
    if (rc)
        return rc;
    char *copy = NULL;
    if (name) {
        size_t n = strlen(name) + 1;
        copy = ot__malloc(n);
        if (!copy)
            return ot__err_set(OT_ENOMEM, NULL, 0, "tensor_set_name",
                               "cannot allocate %zu bytes for a name", n);
        memcpy(copy, name, n);
    }
    free(t->name);
    t->name = copy;
    return 0;
}

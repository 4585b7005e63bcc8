/*
 * node_infer.c - what a node will be, worked out from its operands before
 * the builder (node.c) allocates it: shape helpers (broadcasting, the
 * checks of a created tensor), dtype promotion (NumPy's, NEP 50 for weak
 * constants) and the result shape and dtype of each kind of op, with the
 * message that names the user's line when the operands do not fit.
 */
#include "node_build.h"

#include <stdio.h>

/* ---- shapes -------------------------------------------------------------- */

const char *ot__shape_str(const ot_shape *s, char *buf)
{
    size_t n = 0;
    int nd = s->ndim < 0 ? 0 : (s->ndim > OT_MAX_DIMS ? OT_MAX_DIMS : s->ndim);
    buf[n++] = '(';
    for (int i = 0; i < nd; i++)
        n += (size_t)snprintf(buf + n, OT__SHAPE_STRLEN - n, i ? ",%lld" : "%lld",
                              (long long)s->dims[i]);
    if (nd == 1) buf[n++] = ',';
    buf[n++] = ')';
    buf[n] = '\0';
    return buf;
}

/* Describes what is wrong with a shape into msg; returns the code or 0. */
int ot__shape_problem(const ot_shape *s, ot_dtype dtype, char *msg, size_t len)
{
    if (s->ndim < 0 || s->ndim > OT_MAX_DIMS) {
        snprintf(msg, len, "%d dimensions requested, at most %d are supported", s->ndim,
                 OT_MAX_DIMS);
        return OT_EINVAL;
    }
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] < 0) {
            snprintf(msg, len, "negative dimension %lld at axis %d", (long long)s->dims[i], i);
            return OT_EINVAL;
        }
    }
    /* Zero dims are skipped so that (0, 2^40, 2^40) still counts as too big. */
    size_t n = dtype ? ot_dtype_size(dtype) : 1;
    bool over = false;
    for (int i = 0; i < s->ndim; i++) {
        if (s->dims[i] != 0 && (!ot__mul_size(&n, n, (size_t)s->dims[i]) || n > (size_t)PTRDIFF_MAX))
            over = true;
    }
        if (over) {
        char b[OT__SHAPE_STRLEN];
        snprintf(msg, len, "tensor too big: shape %s of %s overflows the address space",
                 ot__shape_str(s, b), dtype ? ot_dtype_name(dtype) : "elements");
        return OT_EOVERFLOW;
    }
    return 0;
}

int ot__shape_check(const ot_shape *s, ot_dtype dtype, const char *op,
                    const char *file, int line)
{
    char msg[256];
    int code = ot__shape_problem(s, dtype, msg, sizeof msg);
    return code ? ot__err_set(code, file, line, op, "%s", msg) : 0;
}

int64_t ot__numel(const ot_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

bool ot__shape_eq(const ot_shape *a, const ot_shape *b)
{
    if (a->ndim != b->ndim) return false;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i]) return false;
    return true;
}

bool ot__broadcast(const ot_shape *a, const ot_shape *b, ot_shape *out, int *bad_dim)
{
    if (ot__shape_eq(a, b)) {   /* the common case, on every binary build */
        *out = *a;
        return true;
    }
    int nd = a->ndim > b->ndim ? a->ndim : b->ndim;
    ot_shape r = {.ndim = nd};
    for (int i = 0; i < nd; i++) {
        int ia = i - (nd - a->ndim), ib = i - (nd - b->ndim);
        int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
        if (da != db && da != 1 && db != 1) {
            if (bad_dim) *bad_dim = i;
            return false;
        }
        r.dims[i] = da == 1 ? db : da;
    }
    *out = r;
    return true;
}

/* ---- dtype promotion ------------------------------------------------------ */

static bool is_float(ot_dtype d) { return d == OT_F32 || d == OT_F64 || ot__is_half(d); }
static bool valid_dtype(int d) { return d == OT_F32 || d == OT_F64 || d == OT_I32 || ot__is_half(d); }

/* Tensors: f32 with f64 gives f64; i32 with a float gives the float. The
 * 16-bit dtypes: with a wider float the wider (NumPy for f16, PyTorch for
 * bf16), f16 with bf16 gives f32 (PyTorch), i32 with either keeps it
 * (PyTorch; NumPy would give f64 for f16, as it does for f32, which this
 * library does not follow either). */
static ot_dtype promote_strong(ot_dtype a, ot_dtype b)
{
    if (a == b) return a;
    if (a == OT_F64 || b == OT_F64) return OT_F64;
    if (a == OT_I32) return b;
    if (b == OT_I32) return a;
    return OT_F32;
}

/* A weak (constant-only) operand keeps the strong one's dtype, except that a
 * float constant lifts an integer tensor to f64, as NumPy does. */
static ot_dtype promote_weak(ot_dtype strong, ot_dtype weak)
{
    if (is_float(strong) || !is_float(weak)) return strong;
    return OT_F64;
}

static ot_dtype promote(const ot_node *a, const ot_node *b, bool *weak)
{
    *weak = a->weak && b->weak;
    if (a->weak == b->weak) return promote_strong(a->dtype, b->dtype);
    return a->weak ? promote_weak(b->dtype, a->dtype) : promote_weak(a->dtype, b->dtype);
}

/* ---- the result of each kind of op ---------------------------------------- */

/* Maps a possibly negative axis into [0, ndim); OT_AXIS_ALL passes. shape
 * is the operand's, for the message. */
int ot__norm_axis(const site *st, int axis, int ndim, const ot_shape *shape, int *out)
{
    if (axis == OT_AXIS_ALL) {
        *out = OT_AXIS_ALL;
        return 0;
    }
    if (axis < -ndim || axis >= ndim) {
        char s[OT__SHAPE_STRLEN];
        return FAIL(st, OT_EINVAL, "axis %d is out of bounds for tensor of dimension %d "
                    "(operand shape %s)", axis, ndim, ot__shape_str(shape, s));
    }
    *out = axis < 0 ? axis + ndim : axis;
    return 0;
}

int ot__infer_elementwise(const site *st, ot_node *a, ot_node *b, proto *p)
{
    if (!b) {
        p->shape = a->shape;
        p->dtype = apply_flags(st->op, a->dtype);
        p->weak = a->weak;
        return 0;
    }
    int bad = 0;
    if (!ot__broadcast(&a->shape, &b->shape, &p->shape, &bad)) {
        char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
        int nd = a->shape.ndim > b->shape.ndim ? a->shape.ndim : b->shape.ndim;
        int ia = bad - (nd - a->shape.ndim), ib = bad - (nd - b->shape.ndim);
        return FAIL(st, OT_ESHAPE, "shapes %s and %s cannot be broadcast (dim %d: %lld vs %lld)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb), bad,
                    (long long)a->shape.dims[ia], (long long)b->shape.dims[ib]);
    }
    p->common = promote(a, b, &p->weak);
    p->dtype = apply_flags(st->op, p->common);
    return 0;
}

int ot__infer_reduce(const site *st, ot_node *a, proto *p)
{
    int axis = OT_AXIS_ALL;
    int rc = ot__norm_axis(st, p->args.axis, a->shape.ndim, &a->shape, &axis);
    if (rc) return rc;
    p->args.axis = axis;
    int64_t extent = axis == OT_AXIS_ALL ? ot__numel(&a->shape) : a->shape.dims[axis];
    bool needs_identity = st->op == OT_OP_MAX || st->op == OT_OP_MIN ||
                          st->op == OT_OP_ARGMAX || st->op == OT_OP_ARGMIN;
    if (needs_identity && extent == 0) {
        char s[OT__SHAPE_STRLEN];
        return FAIL(st, OT_EEMPTY, "zero-size reduction over %s of shape %s has no identity",
                    axis == OT_AXIS_ALL ? "all axes" : "an axis", ot__shape_str(&a->shape, s));
    }
    /* The result is OT_I32: an index that does not fit would be saturated
     * into a wrong answer that looks right, so refuse to build it. */
    if ((ot_op_flags(st->op) & OT_FLAG_INDEX) && extent > (int64_t)INT32_MAX + 1) {
        char s[OT__SHAPE_STRLEN];
        return FAIL(st, OT_EOVERFLOW, "%lld elements along %s of shape %s: indices beyond "
                    "%d do not fit the int32 result; reduce along a smaller axis",
                    (long long)extent, axis == OT_AXIS_ALL ? "all axes" : "the axis",
                    ot__shape_str(&a->shape, s), INT32_MAX);
    }
    ot_shape r = {.ndim = 0};
    for (int i = 0; i < a->shape.ndim; i++) {
        bool reduced = axis == OT_AXIS_ALL || axis == i;
        if (!reduced) r.dims[r.ndim++] = a->shape.dims[i];
        else if (p->args.keepdims) r.dims[r.ndim++] = 1;
    }
    p->shape = r;
    p->dtype = apply_flags(st->op, a->dtype);
    p->weak = a->weak;
    return 0;
}

/* batched_dot: (B, M, K) . (B, K, N) -> (B, M, N); a batch of 1 is shared. */
static int infer_batched(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    const int64_t *da = a->shape.dims, *db = b->shape.dims;
    if (a->shape.ndim != 3 || b->shape.ndim != 3)
        return FAIL(st, OT_EINVAL, "operands must be 3-D (batch, rows, cols), got shapes %s and %s",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    if (da[0] != db[0] && da[0] != 1 && db[0] != 1)
        return FAIL(st, OT_ESHAPE, "batch dims of %s and %s differ: %lld != %lld (nor is one 1)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    (long long)da[0], (long long)db[0]);
    if (da[2] != db[1])
        return FAIL(st, OT_ESHAPE, "shapes %s and %s not aligned: %lld (dim 2) != %lld (dim 1)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    (long long)da[2], (long long)db[1]);
    p->shape = (ot_shape){.ndim = 3, .dims = {da[0] == 1 ? db[0] : da[0], da[1], db[2]}};
    return 0;
}

/* dot: NumPy's, for 1-D and 2-D operands. */
static int infer_matrix(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int ra = a->shape.ndim, rb = b->shape.ndim;
    if (ra < 1 || ra > 2 || rb < 1 || rb > 2)
        return FAIL(st, OT_EINVAL, "operands must be 1-D or 2-D, got shapes %s and %s",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    int ka = ra - 1, kb = 0;  /* contract a's last dim with b's first */
    if (a->shape.dims[ka] != b->shape.dims[kb])
        return FAIL(st, OT_ESHAPE, "shapes %s and %s not aligned: %lld (dim %d) != %lld (dim %d)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    (long long)a->shape.dims[ka], ka, (long long)b->shape.dims[kb], kb);
    p->shape.ndim = 0;
    if (ra == 2) p->shape.dims[p->shape.ndim++] = a->shape.dims[0];
    if (rb == 2) p->shape.dims[p->shape.ndim++] = b->shape.dims[1];
    return 0;
}

/* Whether every dim of s fits BLAS's int sizes (a larger one would be cut). */
static bool dims_fit_int(const ot_shape *s)
{
    for (int d = 0; d < s->ndim; d++)
        if (s->dims[d] > INT32_MAX) return false;
    return true;
}

int ot__infer_dot(const site *st, ot_node *a, ot_node *b, proto *p)
{
    int rc = st->op == OT_OP_BATCHED_DOT ? infer_batched(st, a, b, p) : infer_matrix(st, a, b, p);
    if (rc) return rc;
    p->dtype = promote(a, b, &p->weak);
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (p->dtype == OT_I32)
        return FAIL(st, OT_EDTYPE, "int32 operands of shapes %s and %s are not supported (BLAS "
                    "has no integer product); cast them to a float dtype",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    if (!dims_fit_int(&a->shape) || !dims_fit_int(&b->shape))
        return FAIL(st, OT_EOVERFLOW, "operands of shapes %s and %s have a dim beyond "
                        "INT32_MAX, the largest size BLAS takes",
                        ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    return 0;
}

int ot__infer_transpose(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    int nd = a->shape.ndim;
    bool all_zero = !p->perm_given;
    for (int i = 0; i < OT_MAX_DIMS; i++)
        if (p->args.perm[i]) all_zero = false;
    bool seen[OT_MAX_DIMS] = {false};
    for (int i = 0; i < nd; i++) {
        int src = all_zero ? nd - 1 - i : p->args.perm[i];
        if (src < 0 || src >= nd || seen[src])
            return FAIL(st, OT_EINVAL, "perm is not a permutation of %d dims (entry %d is %d; "
                        "operand shape %s)", nd, i, src, ot__shape_str(&a->shape, sa));
        seen[src] = true;
        p->args.perm[i] = src;
        p->shape.dims[i] = a->shape.dims[src];
    }
    for (int i = nd; i < OT_MAX_DIMS; i++)
        if (p->args.perm[i])
            return FAIL(st, OT_EINVAL, "perm has entries beyond the %d dims of operand shape %s",
                        nd, ot__shape_str(&a->shape, sa));
    p->shape.ndim = nd;
    p->dtype = a->dtype;
    p->weak = a->weak;
    return 0;
}

/* A slice as args (layout.c's ot_slice_node_n writes them from NumPy
 * indices): per operand dim d, start[d] and perm[d] (the step; 0 for an
 * index, which drops the dim) and shape.dims[d] (the count). Every element
 * read must lie inside the operand. */
int ot__infer_slice(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    ot_args *g = &p->args;
    int nd = a->shape.ndim;
    p->shape.ndim = 0;
    for (int d = 0; d < nd; d++) {
        int64_t dim = a->shape.dims[d], first = g->start[d], step = g->perm[d];
        int64_t count = step ? g->shape.dims[d] : 1;
        int64_t span, last = -1;
        bool fits = count >= 0 && count <= dim && ot__mul_i64(&span, count > 0 ? count - 1 : 0, step) &&
                    ot__add_i64(&last, first, span);
        if (!fits || (count > 0 && (first < 0 || first >= dim || last < 0 || last >= dim)))
            return FAIL(st, OT_EINVAL, "slice of axis %d (start %lld, step %d, count %lld) "
                        "reads outside operand shape %s", d, (long long)first, (int)step,
                        (long long)count, ot__shape_str(&a->shape, sa));
        if (count == 0) g->start[d] = 0;   /* one form for every empty range */
        if (step && count <= 1) g->perm[d] = 1;
        if (step) p->shape.dims[p->shape.ndim++] = count;
        g->shape.dims[d] = step ? count : 0;
    }
    for (int d = nd; d < OT_MAX_DIMS; d++) g->start[d] = g->perm[d] = 0, g->shape.dims[d] = 0;
    g->shape.ndim = nd;
    p->dtype = a->dtype;
    p->weak = a->weak;
    return 0;
}

/* args.shape in row-major order, one dim -1 standing for what is left. */
int ot__infer_reshape(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    ot_shape s = p->args.shape;
    if (s.ndim < 0 || s.ndim > OT_MAX_DIMS)
        return FAIL(st, OT_EINVAL, "shape has %d dims, at most %d are supported (operand shape %s)",
                    s.ndim, OT_MAX_DIMS, ot__shape_str(&a->shape, sa));
    int64_t known = 1, numel = ot__numel(&a->shape);
    int unknown = -1;
    for (int d = 0; d < s.ndim; d++) {
        if (s.dims[d] == -1 && unknown < 0) unknown = d;
        else if (s.dims[d] < 0)
            return FAIL(st, OT_EINVAL, "shape %s has a negative dim or a second -1 (operand shape %s)",
                        ot__shape_str(&s, sb), ot__shape_str(&a->shape, sa));
        else if (known >= 0 && !ot__mul_i64(&known, known, s.dims[d])) known = -1;   /* stays */
    }
    if (unknown >= 0 && known > 0 && numel % known == 0) s.dims[unknown] = numel / known;
    /* known first: ot__numel of an overflowing shape is signed overflow */
    if (known < 0 || (unknown >= 0 && s.dims[unknown] < 0) || ot__numel(&s) != numel)
        return FAIL(st, OT_ESHAPE, "cannot reshape operand of shape %s (size %lld) into shape %s",
                    ot__shape_str(&a->shape, sa), (long long)numel, ot__shape_str(&p->args.shape, sb));
    p->shape = p->args.shape = s;
    p->dtype = a->dtype;
    p->weak = a->weak;
    return 0;
}

/* Two parts joined along args.axis: one rank (at least 1), the same dims
 * but on the axis, dtypes promoted as a binary op's. */
static int infer_concat(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int nd = a->shape.ndim, axis = 0;   /* set by norm_axis; gcc -O3 cannot see it */
    if (nd == 0 || b->shape.ndim != nd)
        return FAIL(st, OT_ESHAPE, "parts of shapes %s and %s: concatenation needs parts of one "
                    "rank, at least 1", ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb));
    int rc = ot__norm_axis(st, p->args.axis == OT_AXIS_ALL ? 0 : p->args.axis, nd, &a->shape, &axis);
    if (rc) return rc;
    for (int d = 0; d < nd; d++)
        if (d != axis && a->shape.dims[d] != b->shape.dims[d])
            return FAIL(st, OT_ESHAPE, "parts of shapes %s and %s differ on axis %d; only the "
                        "concatenation axis %d may differ", ot__shape_str(&a->shape, sa),
                        ot__shape_str(&b->shape, sb), d, axis);
    p->args.axis = axis;
    p->shape = a->shape;
    if (!ot__add_i64(&p->shape.dims[axis], a->shape.dims[axis], b->shape.dims[axis]))
        return FAIL(st, OT_EOVERFLOW, "parts of shapes %s and %s overflow axis %d",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb), axis);
    p->dtype = promote(a, b, &p->weak);
    return 0;
}

static int infer_onehot(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    if (p->args.depth <= 0)
        return FAIL(st, OT_EINVAL, "depth must be positive, got %lld (indices of shape %s)",
                    (long long)p->args.depth, ot__shape_str(&a->shape, sa));
    /* Class indices are int32 (argmax's results, or i32 tensors). */
    if (p->args.depth > INT32_MAX)
        return FAIL(st, OT_EOVERFLOW, "depth %lld exceeds the int32 index range (at most %d; "
                    "indices of shape %s)", (long long)p->args.depth, INT32_MAX,
                    ot__shape_str(&a->shape, sa));
    int nd = a->shape.ndim + 1;
    if (nd > OT_MAX_DIMS)
        return FAIL(st, OT_EINVAL, "the result would have %d dimensions, at most %d are "
                    "supported (indices of shape %s)", nd, OT_MAX_DIMS,
                    ot__shape_str(&a->shape, sa));
    int axis = p->args.axis == OT_AXIS_ALL ? nd - 1 : p->args.axis;
    int rc = ot__norm_axis(st, axis, nd, &a->shape, &axis);
    if (rc) return rc;
    p->args.axis = axis;
    p->shape.ndim = nd;
    for (int i = 0, j = 0; i < nd; i++)
        p->shape.dims[i] = i == axis ? p->args.depth : a->shape.dims[j++];
    if (p->args.dtype && !valid_dtype(p->args.dtype))
        return FAIL(st, OT_EDTYPE, "unknown dtype %d (indices of shape %s)", (int)p->args.dtype,
                    ot__shape_str(&a->shape, sa));
    p->dtype = p->args.dtype ? p->args.dtype : OT_F32;
    p->args.dtype = p->dtype;
    return 0;
}

int ot__infer_special(const site *st, ot_node *a, proto *p)
{
    char sa[OT__SHAPE_STRLEN];
    switch (st->op) {
    case OT_OP_CAST:
        if (!valid_dtype(p->args.dtype))
            return FAIL(st, OT_EDTYPE, "cannot cast to unknown dtype %d (operand shape %s)",
                        (int)p->args.dtype, ot__shape_str(&a->shape, sa));
        p->shape = a->shape;
        p->dtype = p->args.dtype;
        return 0;
    case OT_OP_ONEHOT:
        return infer_onehot(st, a, p);
    case OT_OP_KEEP:
        p->shape = a->shape;
        p->dtype = a->dtype;
        p->weak = a->weak;
        return 0;
    case OT_OP_CONCAT:
        return infer_concat(st, a, st->b, p);
    default: /* OT_OP_RAND */
        if (p->args.dtype && p->args.dtype != OT_F32 && p->args.dtype != OT_F64)
            return FAIL(st, OT_EDTYPE, "draws are float32 or float64, not %s",
                        ot_dtype_name(p->args.dtype) ? ot_dtype_name(p->args.dtype) : "unknown");
        p->dtype = p->args.dtype ? p->args.dtype : OT_F32;
        p->args.dtype = p->dtype;
        p->shape = p->args.shape;
        return 0;
    }
}

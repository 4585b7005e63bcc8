/*
 * ref.c - the reference backend ("ref"): evaluates op trees node at a time,
 * in double precision, and rounds only when storing into an output. It is
 * the oracle every faster backend is tested against, so it favours plain,
 * obviously correct loops over speed. Its draws of ot_rand come from the
 * core's generator (rng.c), which every backend shares.
 *
 * Evaluation: the trees are linearised into one post-order stack (shared
 * subtrees once, also across the roots of ot_assign_many). Each item gets a
 * private contiguous row-major buffer of doubles of its node's shape; a
 * buffer is freed as soon as its last reader has run, so a chain of 10^5
 * ops needs two buffers at a time. Roots are kept until every item has run,
 * and only then are outputs written, which makes any aliasing between an
 * output and the leaves harmless. Nothing here recurses.
 *
 * Singular points are IEEE 754 / C99 Annex F as libm gives them, and the
 * cpu backend gives the same class of value (NaN, +-inf, +-0, finite) at
 * each: sqrt(-0) = -0, sqrt and log of a negative are NaN, log(+-0) = -inf,
 * rsqrt(+-0) = +-inf, recip(+-0) = +-inf, 0/0 = NaN, pow(x, 0) = 1 for
 * every x (NaN too), pow(+-0, -1) = +-inf, pow of a negative base to a
 * non-integer is NaN, safelog floors at exp(-50) and keeps NaN.
 *
 * f32: every op of dtype f32 rounds its result to float, as NumPy's float32
 * arithmetic and the cpu backend do, so an f32 intermediate that under- or
 * overflows does so here too (the class of every value agrees with cpu; an
 * op computes in double, so its own result is correctly rounded or close).
 *
 * f16 and bf16 (storage dtypes): their ops compute in double from the
 * widened values, unrounded, and round once when an output is stored; an
 * explicit cast (or a constant) to them rounds, as a store would.
 *
 * Integers: a node of dtype OT_I32 holds integers. Its elementwise
 * arithmetic (add, sub, mul, neg, abs, sqr, pow) is done exactly in 64-bit
 * unsigned arithmetic and wrapped modulo 2^32, as NumPy does for int32.
 * Sums and means of int32 values accumulate exactly (ot__wide), and a sum
 * that does not fit int32 is OT_EOVERFLOW, never a wrapped value (issue
 * 31). Every other op is exact in double for int32 operands.
 */
#include "ref.h"
#include "ops.h"

/* ln 2; M_LN2 is not part of C11. */
#define REF_LN2 0.693147180559945309417232121458176568

/* ------------------------------------------------------------------------ */
/* Scalar reference functions, from the ref column of src/core/ops.def           */
/* ------------------------------------------------------------------------ */

/* sig and sig2 as (x < 0 ? e : 1) / (1 + e), e = exp(-|x|) or exp2(-|x|),
 * as the kernels do: exp(-x) overflows for x < -709.78, and 1 / inf = 0
 * would lose sig(-709.8) = 5.5e-309 (and sig2's like values), which f64
 * holds. */
static double ref_sigm(double x, double e) { return (x < 0 ? e : 1.0) / (1.0 + e); }

/* ref_<E>(x) or ref_<E>(x, y) for each elementwise row, and the dispatch
 * tables: the row's kind, pasted onto a macro name, picks what it expands
 * to (nothing for ops ref.c evaluates structurally). */
#define REF_DEF_UNARY(E, f) static double ref_##E(double x) { return f; }
#define REF_DEF_BINARY(E, f) static double ref_##E(double x, double y) { return f; }
#define REF_DEF_REDUCE(E, f)
#define REF_DEF_DOT(E, f)
#define REF_DEF_SHAPE(E, f)
#define REF_DEF_SPECIAL(E, f)
#define REF_DEF_COMPOSITE(E, f)
#define REF_DEF_CONV(E, f)
/* Registered ops' placeholder rows (vec USER) have none: their nodes
 * carry their own functions (eval_custom). */
#define REF_KIND_OWN(K) K
#define REF_KIND_SLEEF(K) K
#define REF_KIND_ACC(K) K
#define REF_KIND_WIDE(K) K
#define REF_KIND_NONE(K) K
#define REF_KIND_USER(K) USER
#define REF_CAT_(a, b) a##b
#define REF_CAT(a, b) REF_CAT_(a, b)
#define REF_DEF_USER(E, f)
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, ...) \
    REF_CAT(REF_DEF_, REF_KIND_##VEC(KIND))(E, REF)
#include "ops.def"
#undef OT_OP

#define REF_UN_UNARY(E) [OT_OP_##E] = ref_##E,
#define REF_UN_BINARY(E)
#define REF_BIN_UNARY(E)
#define REF_BIN_BINARY(E) [OT_OP_##E] = ref_##E,
#define REF_UN_REDUCE(E)
#define REF_UN_DOT(E)
#define REF_UN_SHAPE(E)
#define REF_UN_SPECIAL(E)
#define REF_UN_COMPOSITE(E)
#define REF_UN_CONV(E)
#define REF_BIN_REDUCE(E)
#define REF_BIN_DOT(E)
#define REF_BIN_SHAPE(E)
#define REF_BIN_SPECIAL(E)
#define REF_BIN_COMPOSITE(E)
#define REF_BIN_CONV(E)
#define REF_UN_USER(E)
#define REF_BIN_USER(E)

static double (*const ref_unary[OT_OP_COUNT])(double) = {
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, ...) REF_CAT(REF_UN_, REF_KIND_##VEC(KIND))(E)
#include "ops.def"
#undef OT_OP
};
static double (*const ref_binary[OT_OP_COUNT])(double, double) = {
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, ...) REF_CAT(REF_BIN_, REF_KIND_##VEC(KIND))(E)
#include "ops.def"
#undef OT_OP
};

ot__ref1 ot__ref_fn1(int op) { return op >= 0 && op < OT_OP_COUNT ? ref_unary[op] : NULL; }
ot__ref2 ot__ref_fn2(int op) { return op >= 0 && op < OT_OP_COUNT ? ref_binary[op] : NULL; }

/* ------------------------------------------------------------------------ */
/* Integer arithmetic for OT_I32 nodes                                      */
/* ------------------------------------------------------------------------ */

/* An operand of an integer op as an integer (int32 values are exact; any
 * stray float saturates and truncates as a store into OT_I32 would). */
static uint64_t int_of(double v) { return (uint64_t)(int64_t)ot__to_i32(v); }

/* The low 32 bits of v as an int32 value: NumPy's int32 wrap-around. */
static double wrap32(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    return u <= INT32_MAX ? (double)u : (double)u - 4294967296.0;
}

/* b ** e by squaring, modulo 2^32. NumPy rejects negative integer powers;
 * we give the integer part of the true value instead: 1 ** e = 1,
 * (-1) ** e = +-1 by parity, and 0 for every other base (0 included). */
static double int_pow(double base, double exp_)
{
    int64_t b = (int64_t)ot__to_i32(base), e = (int64_t)ot__to_i32(exp_);
    if (e < 0)
        return b == 1 ? 1.0 : b == -1 ? ((e & 1) ? -1.0 : 1.0) : 0.0;
    uint64_t r = 1, sq = (uint64_t)b;
    for (; e; e >>= 1, sq *= sq)
        if (e & 1) r *= sq;
    return wrap32(r);
}

/* Unary op of an OT_I32 node; ops that are exact in double fall through. */
static double int_unary(ot_op op, double x)
{
    uint64_t v = int_of(x);
    switch (op) {
    case OT_OP_NEG: return wrap32(0 - v);
    case OT_OP_ABS: return wrap32(x < 0 ? 0 - v : v);
    case OT_OP_SQR: return wrap32(v * v);
    default: return ref_unary[op](x);
    }
}

/* Binary op of an OT_I32 node; ops that are exact in double fall through. */
static double int_binary(ot_op op, double a, double b)
{
    switch (op) {
    case OT_OP_ADD: return wrap32(int_of(a) + int_of(b));
    case OT_OP_SUB: return wrap32(int_of(a) - int_of(b));
    case OT_OP_MUL: return wrap32(int_of(a) * int_of(b));
    case OT_OP_POW: return int_pow(a, b);
    default: return ref_binary[op](a, b);
    }
}

/* v converted to dtype dt and back, as an explicit cast (or a constant of
 * that dtype) sees it. */
static double cast_value(ot_dtype dt, double v)
{
    switch (dt) {
    case OT_F32: return (double)(float)v;
    case OT_I32: return (double)ot__to_i32(v);
    case OT_F16: return ot__f16_to_f32(ot__f64_to_f16(v));
    case OT_BF16: return ot__bf16_to_f32(ot__f64_to_bf16(v));
    default: return v;
    }
}

/* ------------------------------------------------------------------------ */
/* Compensated summation                                                    */
/* ------------------------------------------------------------------------ */

/* Neumaier's variant of Kahan summation: the running error c also catches
 * the low bits of terms larger than the partial sum. Each step's error is
 * Knuth's TwoSum, exact whichever term is larger, so it needs no branch on
 * their magnitudes (a branch the data decide, mispredicted half the time
 * in a dot product's terms). */
typedef struct ref_sum { double s, c; } ref_sum;

static inline void sum_step(double *s, double *c, double x)
{
    double t = *s + x, z = t - *s;
    *c += (*s - (t - z)) + (x - z);
    *s = t;
}

static void sum_add(ref_sum *acc, double x) { sum_step(&acc->s, &acc->c, x); }

/* Once the plain sum is inf or NaN the correction term is NaN (inf - inf);
 * the plain sum is then the right answer, as in NumPy. */
static double sum_value(const ref_sum *acc)
{
    return isfinite(acc->s) ? acc->s + acc->c : acc->s;
}

/* ------------------------------------------------------------------------ */
/* Strided walks                                                            */
/* ------------------------------------------------------------------------ */

/* A row-major walk over a shape carrying two element offsets, each with its
 * own strides (in elements); it stands in for a recursion over dims. The
 * last dim is left to the caller as rows of len elements, stepped by in[0]
 * and in[1], which keeps the per-element work a plain strided loop:
 *
 *     for (r = 0; r < w.rows; r++, walk_next_row(&w))
 *         for (j = 0; j < w.len; j++) ... w.off[k] + j * w.in[k] ...
 *
 * A 0-d shape is one row of one element; a zero-size shape has no rows. */
typedef struct ref_walk {
    int nd;                               /* the outer dims: ndim - 1 */
    int64_t rows, len, in[2], off[2];
    int64_t dims[OT_MAX_DIMS], idx[OT_MAX_DIMS], st[2][OT_MAX_DIMS];
} ref_walk;

/* st0 and st1 are strides over shape's dims; NULL means all zero. */
static void walk_init(ref_walk *w, const ot_shape *shape, const int64_t *st0,
                      const int64_t *st1, int64_t off0)
{
    memset(w, 0, sizeof *w);
    int last = shape->ndim - 1;
    w->nd = last > 0 ? last : 0;
    w->len = last >= 0 ? shape->dims[last] : 1;
    w->rows = w->len > 0;
    for (int d = 0; d < w->nd; d++) {
        w->dims[d] = shape->dims[d];
        w->rows *= shape->dims[d];
        w->st[0][d] = st0 ? st0[d] : 0;
        w->st[1][d] = st1 ? st1[d] : 0;
    }
    if (last >= 0) {
        w->in[0] = st0 ? st0[last] : 0;
        w->in[1] = st1 ? st1[last] : 0;
    }
    w->off[0] = off0;
}

static void walk_next_row(ref_walk *w)
{
    for (int d = w->nd - 1; d >= 0; d--) {
        w->off[0] += w->st[0][d];
        w->off[1] += w->st[1][d];
        if (++w->idx[d] < w->dims[d]) return;
        w->off[0] -= w->st[0][d] * w->dims[d];
        w->off[1] -= w->st[1][d] * w->dims[d];
        w->idx[d] = 0;
    }
}

/* Row-major strides of a contiguous array of shape s. */
static void contig_strides(const ot_shape *s, int64_t st[OT_MAX_DIMS])
{
    int64_t step = 1;
    for (int d = s->ndim - 1; d >= 0; d--) {
        st[d] = step;
        step *= s->dims[d];
    }
}

/* Strides that read a contiguous array of shape src as if broadcast to dst
 * (NumPy rules, right-aligned): 0 on dims that src lacks or has as 1. */
static void bcast_strides(const ot_shape *src, const ot_shape *dst, int64_t st[OT_MAX_DIMS])
{
    int64_t cs[OT_MAX_DIMS];
    contig_strides(src, cs);
    int lead = dst->ndim - src->ndim;
    for (int d = 0; d < dst->ndim; d++) {
        int sd = d - lead;
        st[d] = (sd < 0 || src->dims[sd] == 1) ? 0 : cs[sd];
    }
}

/* ------------------------------------------------------------------------ */
/* One evaluation                                                           */
/* ------------------------------------------------------------------------ */

/* The state of one ref_assign_many call: a buffer per stack item (NULL once
 * freed or before it is computed), how many op operands still have to read
 * each item, and which items are roots (kept until outputs are written). */
typedef struct ref_run {
    ot_backend *be;
    const ot_stack *stack;
    int len;
    double **vals;
    int *left;
    bool *root;
    uint64_t ops, bytes;
} ref_run;

/* A new buffer for numel doubles (at least one, so that ot__malloc(0) never
 * looks like a failure). NULL with OT_ENOMEM recorded on failure; a buffer
 * over PTRDIFF_MAX bytes could not be indexed, so it is refused unasked. */
static double *buf_new(int64_t numel, const char *what)
{
    size_t bytes;
    if (!ot__mul_size(&bytes, numel > 0 ? (size_t)numel : 1, sizeof(double)) ||
        bytes > PTRDIFF_MAX) {
        ot__err_set(OT_ENOMEM, NULL, 0, what, "%lld temporaries of 8 bytes overflow the "
                    "address space", (long long)numel);
        return NULL;
    }
    double *p = ot__malloc(bytes);
    if (!p)
        ot__err_set(OT_ENOMEM, NULL, 0, what, "out of memory for %zu bytes", bytes);
    return p;
}

/* Gathers a leaf tensor (any strides) into out, row-major. */
static void eval_leaf(const ot_tensor *t, double *out)
{
    ot_dtype dt = (ot_dtype)t->leaf.dtype;
    size_t isz = ot_dtype_size(dt);
    const char *base = (const char *)t->buf->data;
    ref_walk w;
    walk_init(&w, &t->leaf.shape, t->strides, NULL, t->offset);
    for (int64_t r = 0; r < w.rows; r++, walk_next_row(&w))
        for (int64_t j = 0; j < w.len; j++)
            *out++ = ot__load(base + (w.off[0] + j * w.in[0]) * (int64_t)isz, dt);
}

static void eval_unary(const ot_node *node, ot_op op, const double *x, double *out)
{
    int64_t n = ot__numel(&node->shape);
    if (node->dtype == OT_I32) {
        for (int64_t i = 0; i < n; i++) out[i] = int_unary(op, x[i]);
        return;
    }
    double (*f)(double) = ref_unary[op];
    for (int64_t i = 0; i < n; i++) out[i] = f(x[i]);
}

static void eval_binary(const ot_node *node, ot_op op, const double *x, const double *y,
                        double *out)
{
    int64_t sa[OT_MAX_DIMS], sb[OT_MAX_DIMS];
    bcast_strides(&node->a->shape, &node->shape, sa);
    bcast_strides(&node->b->shape, &node->shape, sb);
    bool ints = node->dtype == OT_I32, f32 = node->dtype == OT_F32;
    double (*f)(double, double) = ref_binary[op];
    ref_walk w;
    walk_init(&w, &node->shape, sa, sb, 0);
    for (int64_t r = 0; r < w.rows; r++, walk_next_row(&w)) {
        const double *a = x + w.off[0], *b = y + w.off[1];
        for (int64_t j = 0; j < w.len; j++) {
            double u = a[j * w.in[0]], v = b[j * w.in[1]];
            /* an i32 operand of an f32 op is a float first, as on the cpu
             * backend: 2147483647 is 2^31, so (-2) ** it is +inf, not -inf */
            if (f32) {
                u = (float)u;
                v = (float)v;
            }
            *out++ = ints ? int_binary(op, u, v) : f(u, v);
        }
    }
}

/* A reduction's operand seen as outer x len x inner, reducing len: one axis
 * of the operand, or every axis (outer = inner = 1). The flat layout of the
 * result is outer x inner with or without keepdims. */
typedef struct ref_red { int64_t outer, len, inner; } ref_red;

static ref_red red_geometry(const ot_node *node)
{
    const ot_shape *s = &node->a->shape;
    ref_red r = {1, 1, 1};
    int axis = node->args.axis;
    for (int d = 0; d < s->ndim; d++) {
        if (axis == OT_AXIS_ALL || d == axis)
            r.len *= s->dims[d];
        else if (d < axis)
            r.outer *= s->dims[d];
        else
            r.inner *= s->dims[d];
    }
    return r;
}

/* The compensated sum of len elements x[0], x[step], ... */
static double sum_line(const double *x, int64_t len, int64_t step)
{
    ref_sum acc = {0, 0};
    for (int64_t k = 0; k < len; k++) sum_add(&acc, x[k * step]);
    return sum_value(&acc);
}

/* The exact sum of len int32 values x[0], x[step], ... */
static ot__wide int_sum_line(const double *x, int64_t len, int64_t step)
{
    ot__wide w = {0, 0};
    for (int64_t k = 0; k < len; k++) ot__wide_add(&w, (int64_t)ot__to_i32(x[k * step]));
    return w;
}

/* sum or mean of one line: exact for int32 operands, an int32 sum that does
 * not fit being OT_EOVERFLOW; compensated otherwise. 0 / 0 = NaN is the
 * mean of no elements. */
static int sum_or_mean(const ot_node *node, ot_op op, const double *x, const ref_red *r,
                       double *v)
{
    if (node->a->dtype != OT_I32) {
        *v = sum_line(x, r->len, r->inner);
        if (op == OT_OP_MEAN) *v /= (double)r->len;
        return OT_OK;
    }
    ot__wide w = int_sum_line(x, r->len, r->inner);
    int32_t i;
    if (op == OT_OP_MEAN) *v = ot__wide_double(w) / (double)r->len;
    else if (ot__wide_int32(w, &i)) *v = i;
    else return ot__int_sum_overflow(node);
    return OT_OK;
}

/* max, min, argmax or argmin of len elements x[0], x[step], ...: the first
 * extreme wins ties, and the first NaN beats everything (NumPy). The index
 * ops give its position, the others its value. The builder rejects empty
 * lines for these ops; should one come, max/min give NaN, the index ops 0. */
static double pick_line(ot_op op, const double *x, int64_t len, int64_t step)
{
    bool index = op == OT_OP_ARGMAX || op == OT_OP_ARGMIN;
    if (len == 0) return index ? 0.0 : NAN;
    bool want_max = op == OT_OP_MAX || op == OT_OP_ARGMAX;
    int64_t best = 0;
    for (int64_t k = 1; k < len && !isnan(x[best * step]); k++) {
        double v = x[k * step], b = x[best * step];
        if (isnan(v) || (want_max ? v > b : v < b)) best = k;
    }
    return index ? (double)best : x[best * step];
}

static int eval_reduce(const ot_node *node, ot_op op, const double *x, double *out)
{
    ref_red r = red_geometry(node);
    bool sums = op == OT_OP_SUM || op == OT_OP_MEAN;
    for (int64_t o = 0; o < r.outer; o++) {
        for (int64_t i = 0; i < r.inner; i++) {
            const double *line = x + o * r.len * r.inner + i;
            double v = 0;
            if (!sums) v = pick_line(op, line, r.len, r.inner);
            else if (sum_or_mean(node, op, line, &r, &v)) return OT_EOVERFLOW;
            out[o * r.inner + i] = v;
        }
    }
    return OT_OK;
}

/* Each output sums its k terms in order (sum_add), MM_COLS outputs of a
 * row at a time: y is read along its rows, not down a column a cache line
 * per term, and the sums and their errors (apart: sum_step on two arrays)
 * stay in vector registers. w <
 * MM_COLS only at a row's end. */
enum { MM_COLS = 8 };

static void matmul_cols(const double *xr, const double *y, int64_t k_len, int64_t n, int64_t w,
                        double *o)
{
    double s[MM_COLS] = {0}, c[MM_COLS] = {0}, pad[MM_COLS] = {0};
    for (int64_t k = 0; k < k_len; k++) {
        const double *yr = y + k * n;
        if (w < MM_COLS) yr = memcpy(pad, yr, (size_t)w * sizeof *pad);
        for (int j = 0; j < MM_COLS; j++) sum_step(&s[j], &c[j], xr[k] * yr[j]);
    }
    for (int64_t j = 0; j < w; j++) o[j] = sum_value(&(ref_sum){s[j], c[j]});
}

/* One matrix product: a is M x K and b is K x N, both row-major. */
static void matmul(const double *x, const double *y, int64_t m, int64_t k_len, int64_t n,
                   double *out)
{
    for (int64_t i = 0; i < m; i++)
        for (int64_t j0 = 0; j0 < n; j0 += MM_COLS)
            matmul_cols(x + i * k_len, y + j0, k_len, n, n - j0 < MM_COLS ? n - j0 : MM_COLS,
                        out + i * n + j0);
}

/* NumPy dot for 1-D and 2-D operands: a is M x K (M = 1 when 1-D) and b is
 * K x N (N = 1 when 1-D); the result's flat layout is M x N in every case.
 * batched_dot is one such product per batch index, a batch of 1 shared.
 * K = 0 gives zeros. The builder rejects OT_I32 operands, so this is float
 * arithmetic only. */
static void eval_dot(const ot_node *node, const double *x, const double *y, double *out)
{
    const ot_shape *sa = &node->a->shape, *sb = &node->b->shape;
    if (node->op == OT_OP_BATCHED_DOT) {
        int64_t m = sa->dims[1], k = sa->dims[2], n = sb->dims[2];
        for (int64_t i = 0; i < node->shape.dims[0]; i++)
            matmul(x + (sa->dims[0] == 1 ? 0 : i) * m * k, y + (sb->dims[0] == 1 ? 0 : i) * k * n,
                   m, k, n, out + i * m * n);
        return;
    }
    int64_t m = sa->ndim == 2 ? sa->dims[0] : 1;
    int64_t n = sb->ndim == 2 ? sb->dims[1] : 1;
    matmul(x, y, m, sa->dims[sa->ndim - 1], n, out);
}

/* Dim d of the result is dim perm[d] of the operand. */
static void eval_transpose(const ot_node *node, const double *x, double *out)
{
    int64_t cs[OT_MAX_DIMS], st[OT_MAX_DIMS];
    contig_strides(&node->a->shape, cs);
    for (int d = 0; d < node->shape.ndim; d++) st[d] = cs[node->args.perm[d]];
    ref_walk w;
    walk_init(&w, &node->shape, st, NULL, 0);
    for (int64_t r = 0; r < w.rows; r++, walk_next_row(&w))
        for (int64_t j = 0; j < w.len; j++) *out++ = x[w.off[0] + j * w.in[0]];
}

/* A slice: operand dim d read from start[d] by step perm[d] (0: the one
 * index start[d], the dim dropped). */
static void eval_slice(const ot_node *node, const double *x, double *out)
{
    int64_t cs[OT_MAX_DIMS], st[OT_MAX_DIMS], off = 0;
    const ot_args *g = &node->args;
    contig_strides(&node->a->shape, cs);
    for (int d = 0, j = 0; d < node->a->shape.ndim; d++) {
        off += g->start[d] * cs[d];
        if (g->perm[d]) st[j++] = g->perm[d] * cs[d];
    }
    ref_walk w;
    walk_init(&w, &node->shape, st, NULL, 0);
    for (int64_t r = 0; r < w.rows; r++, walk_next_row(&w))
        for (int64_t j = 0; j < w.len; j++) *out++ = x[off + w.off[0] + j * w.in[0]];
}

/* Rows of the result along axis: a's block of each outer index, then b's. */
static void eval_concat(const ot_node *node, const double *x, const double *y, double *out)
{
    const ot_shape *s = &node->shape;
    int axis = node->args.axis;
    int64_t outer = 1, inner = 1;
    for (int d = 0; d < s->ndim; d++) {
        if (d < axis) outer *= s->dims[d];
        if (d > axis) inner *= s->dims[d];
    }
    int64_t na = node->a->shape.dims[axis] * inner, nb = node->b->shape.dims[axis] * inner;
    for (int64_t o = 0; o < outer; o++) {
        if (na) memcpy(out, x + o * na, sizeof *out * (size_t)na);
        if (nb) memcpy(out + na, y + o * nb, sizeof *out * (size_t)nb);
        out += na + nb;
    }
}

static void eval_cast(const ot_node *node, const double *x, double *out)
{
    int64_t n = ot__numel(&node->shape);
    for (int64_t i = 0; i < n; i++) out[i] = cast_value((ot_dtype)node->dtype, x[i]);
}

/* The operand's values as they are (reshape, keep): a 16-bit value between
 * ops is not rounded (the value of reshape(expm1(x)) of f16 x was rounded
 * to f16 here, 8.4e6 to inf, where expm1(x) alone kept it; fuzz seed 2468
 * tree 37531). */
static void eval_copy(const ot_node *node, const double *x, double *out)
{
    memcpy(out, x, (size_t)ot__numel(&node->shape) * sizeof *out);
}

/* The result has a new dim of size depth at args.axis; element k along it
 * is 1 where the input equals k. Comparing with the integer k also rejects
 * non-integral inputs and those outside [0, depth). */
static void eval_onehot(const ot_node *node, const double *x, double *out)
{
    const ot_shape *s = &node->shape;
    int axis = node->args.axis;
    int64_t outer = 1, inner = 1, depth = s->dims[axis];
    for (int d = 0; d < s->ndim; d++) {
        if (d < axis) outer *= s->dims[d];
        if (d > axis) inner *= s->dims[d];
    }
    for (int64_t o = 0; o < outer; o++)
        for (int64_t k = 0; k < depth; k++)
            for (int64_t i = 0; i < inner; i++)
                out[(o * depth + k) * inner + i] =
                    x[o * inner + i] == (double)k ? 1.0 : 0.0;
}

static void eval_rand(const ot_backend *be, const ot_node *node, double *out)
{
    int64_t n = ot__numel(&node->shape);
    for (int64_t i = 0; i < n; i++)
        out[i] = ot__rand_uniform(be->opts.seed, node->args.seed, (uint64_t)i,
                                  (ot_dtype)node->dtype);
}

/* A registered op's function in double: f64 where it has one (ref computes
 * in double), else f32 on operands rounded to float. */
static double custom_apply(const ot_custom *u, double x, double y)
{
    const ot_op_def *d = &u->def;
    if (d->arity == 1) return d->f64 ? d->f64(x) : d->f32((float)x);
    return d->f64_xy ? d->f64_xy(x, y) : d->f32_xy((float)x, (float)y);
}

/* A node of a registered op (ot_op_register), broadcasting as eval_binary;
 * OT_EUNSUPPORTED where it has no function for the node's dtype, as on
 * the cpu backend. */
static int eval_custom(const ot_node *node, const double *x, const double *y, double *out)
{
    const ot_custom *u = node->custom;
    if (!ot__custom_has(u, node->dtype == OT_F64))
        return ot__err_set(OT_EUNSUPPORTED, node->file, node->line, u->name,
                           "registered op '%s' has no %s function", u->name,
                           node->dtype == OT_F64 ? "f64" : "f32");
    int64_t sa[OT_MAX_DIMS], sb[OT_MAX_DIMS] = {0};
    bcast_strides(&node->a->shape, &node->shape, sa);
    if (y) bcast_strides(&node->b->shape, &node->shape, sb);
    ref_walk w;
    walk_init(&w, &node->shape, sa, sb, 0);
    for (int64_t r = 0; r < w.rows; r++, walk_next_row(&w))
        for (int64_t j = 0; j < w.len; j++)
            *out++ = custom_apply(u, x[w.off[0] + j * w.in[0]], y ? y[w.off[1] + j * w.in[1]] : 0.0);
    return OT_OK;
}

/* Computes op item it into out from its operands' buffers, in double. */
static int eval_op_double(ref_run *run, const ot_stack_item *it, double *out)
{
    const ot_node *node = it->node;
    const double *x = it->a >= 0 ? run->vals[it->a] : NULL;
    const double *y = it->b >= 0 ? run->vals[it->b] : NULL;
    if (node->custom)
        return node->custom->structured ? ot__ref_struct(node, x, y, out) : eval_custom(node, x, y, out);
    switch (ot_op_kind(it->op)) {
    case OT_KIND_UNARY: eval_unary(node, it->op, x, out); return OT_OK;
    case OT_KIND_BINARY: eval_binary(node, it->op, x, y, out); return OT_OK;
    case OT_KIND_REDUCE: return eval_reduce(node, it->op, x, out);
    case OT_KIND_DOT: eval_dot(node, x, y, out); return OT_OK;
    case OT_KIND_CONV:
        if (ot__is_index(it->op)) return ot__ref_index(node, x, y, out);
        if (ot__is_attn(it->op)) return ot__ref_attn(node, x, y, out);
        if (ot__is_pool(it->op)) ot__ref_pool(node, x, y, out);
        else ot__ref_conv(node, x, y, out);
        return OT_OK;
    case OT_KIND_SHAPE:
        if (it->op == OT_OP_SLICE) eval_slice(node, x, out);
        else if (it->op == OT_OP_RESHAPE) eval_copy(node, x, out);   /* row-major: the same values */
        else eval_transpose(node, x, out);
        return OT_OK;
    default: break;
    }
    switch (it->op) {
    case OT_OP_CAST: eval_cast(node, x, out); return OT_OK;
    case OT_OP_KEEP: eval_copy(node, x, out); return OT_OK;
    case OT_OP_ONEHOT: eval_onehot(node, x, out); return OT_OK;
    case OT_OP_CONCAT: eval_concat(node, x, y, out); return OT_OK;
    case OT_OP_RAND: eval_rand(run->be, node, out); return OT_OK;
    default:
        return ot__err_set(OT_EUNSUPPORTED, node->file, node->line, ot_op_name(it->op),
                           "the ref backend cannot evaluate this op");
    }
}

/* Computes op item it into out, rounded to its dtype when that is f32. */
static int eval_op(ref_run *run, const ot_stack_item *it, double *out)
{
    int rc = eval_op_double(run, it, out);
    if (rc == OT_OK && it->node->dtype == OT_F32) {
        int64_t n = ot__numel(&it->node->shape);
        for (int64_t i = 0; i < n; i++) out[i] = (double)(float)out[i];
    }
    return rc;
}

/* Drops one pending read of item i and frees its buffer after the last. */
static void release_operand(ref_run *run, int i)
{
    if (i >= 0 && --run->left[i] == 0 && !run->root[i]) {
        free(run->vals[i]);
        run->vals[i] = NULL;
    }
}

/* Computes item i into a new buffer. */
static int eval_item(ref_run *run, int i)
{
    const ot_stack_item *it = ot_stack_at(run->stack, i);
    const ot_node *node = it->node;
    double *out = buf_new(ot__numel(&node->shape), it->kind == OT_NODE_OP
                          ? ot_op_name(it->op) : "assign");
    if (!out) return OT_ENOMEM;
    run->vals[i] = out;
    if (it->kind == OT_NODE_LEAF) {
        eval_leaf(it->tensor, out);
        run->bytes += (uint64_t)ot__numel(&node->shape) *
                      ot_dtype_size(it->tensor->leaf.dtype);
        return OT_OK;
    }
    if (it->kind == OT_NODE_CONST) {
        out[0] = cast_value((ot_dtype)node->dtype, it->value);
        return OT_OK;
    }
    int rc = eval_op(run, it, out);
    if (rc) return rc;
    run->ops++;
    release_operand(run, it->a);
    release_operand(run, it->b);
    return OT_OK;
}

/* Writes a root's buffer into out (any strides), broadcasting the root's
 * shape to out's and rounding to out's dtype; into f16/bf16 stochastically
 * when the assignment asks for it (output k's stream, each element the
 * bits of its row-major index in out). */
static void write_output(ot_tensor *out, int k, const ot_shape *src_shape, const double *src)
{
    ot_dtype dt = (ot_dtype)out->leaf.dtype;
    uint64_t key;
    bool sr = ot__is_half(dt) && ot__half_sr_get(&key);
    size_t isz = ot_dtype_size(dt);
    char *base = (char *)out->buf->data;
    int64_t sst[OT_MAX_DIMS];
    bcast_strides(src_shape, &out->leaf.shape, sst);
    ref_walk w;
    walk_init(&w, &out->leaf.shape, out->strides, sst, out->offset);
    if (sr) key = ot__sr_key(key, (uint64_t)k);
    for (int64_t r = 0; r < w.rows; r++, walk_next_row(&w))
        for (int64_t j = 0; j < w.len; j++) {
            char *p = base + (w.off[0] + j * w.in[0]) * (int64_t)isz;
            double v = src[w.off[1] + j * w.in[1]];
            if (sr)
                *(uint16_t *)p = ot__f64_to_half_sr(dt, v, ot__sr_bits(key, (uint64_t)(r * w.len + j)));
            else ot__store(p, dt, v);
        }
}

/* Counts the op operands that read each item and marks the roots. */
static void count_readers(ref_run *run, int n, const int roots[])
{
    for (int i = 0; i < run->len; i++) {
        const ot_stack_item *it = ot_stack_at(run->stack, i);
        if (it->a >= 0) run->left[it->a]++;
        if (it->b >= 0) run->left[it->b]++;
    }
    for (int r = 0; r < n; r++) run->root[roots[r]] = true;
}

/* Evaluates every item, then writes every output. */
static int run_all(ref_run *run, int n, ot_tensor *const outs[], const int roots[])
{
    count_readers(run, n, roots);
    for (int i = 0; i < run->len; i++) {
        int rc = eval_item(run, i);
        if (rc) return rc;
    }
    for (int r = 0; r < n; r++) {
        const ot_stack_item *it = ot_stack_at(run->stack, roots[r]);
        write_output(outs[r], r, &it->node->shape, run->vals[roots[r]]);
        run->bytes += (uint64_t)ot__numel(&outs[r]->leaf.shape) *
                      ot_dtype_size(outs[r]->leaf.dtype);
    }
    return OT_OK;
}

static void run_free(ref_run *run)
{
    if (run->vals)
        for (int i = 0; i < run->len; i++) free(run->vals[i]);
    free(run->vals);
    free(run->left);
    free(run->root);
}

/* The ref backend's entry point (see ot_backend_vt): backend.c has already
 * checked the arguments, so only allocation can fail here. */
static int ref_assign_many(ot_backend *be, int n, ot_tensor *const outs[],
                           ot_node *const trees[])
{
    ref_run run = {.be = be};
    int *roots = ot__malloc((n > 0 ? (size_t)n : 1) * sizeof *roots);
    if (!roots)
        return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    ot_stack *s = ot__stack_new_many(n, (const ot_node *const *)trees, roots);
    if (!s) {
        free(roots);
        int code = ot_errcode();
        return code ? code : ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    }
    run.stack = s;
    run.len = ot_stack_len(s);
    run.vals = ot__calloc((size_t)run.len + 1, sizeof *run.vals);
    run.left = ot__calloc((size_t)run.len + 1, sizeof *run.left);
    run.root = ot__calloc((size_t)run.len + 1, sizeof *run.root);
    int rc = (run.vals && run.left && run.root)
                 ? run_all(&run, n, outs, roots)
                 : ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    if (rc == OT_OK) {
        ot__stat_shard *st = ot__stats_mine(&be->stats);
        ot__stat_add(st, OT__STAT_ASSIGNS, 1);
        ot__stat_add(st, OT__STAT_NODES, run.ops);
        ot__stat_add(st, OT__STAT_KERNELS, run.ops);
        ot__stat_add(st, OT__STAT_BYTES, run.bytes);
    }
    run_free(&run);
    ot_stack_free(s);
    free(roots);
    return rc;
}

/* ot_explain on ref: each tree's stack, the order ref evaluates its nodes in. */
static int ref_explain(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                       FILE *f)
{
    (void)be;
    (void)outs;
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        ot_stack *s = ot_stack_new(trees[i]);
        if (!s) return ot_errcode();
        fprintf(f, "ref backend: %d items, evaluated one node at a time in double\n",
                ot_stack_len(s));
        rc = ot_stack_print(s, f);
        ot_stack_free(s);
    }
    return rc;
}

/* ref runs no SIMD table, no generated code and no streaming stores (its
 * vtable says so: backend.c reports those options as not in force), and
 * programs run their steps through its assign. */
const ot_backend_vt ot__ref_vt = {
    .name = "ref",
    .assign_many = ref_assign_many,
    .explain = ref_explain,
};

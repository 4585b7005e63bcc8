/*
 * test_rows.c - row and column reductions (max, min, sum, mean) and row
 * softmax on the cpu backend against ref: row lengths around the vector
 * width and the tile, one-element and empty rows, NaN, infinities and
 * signed zeros in a row, strided and offset views, generated code on and
 * off. Max and min must give ref's very value (the first NaN, the first
 * zero); sums and softmax agree within f32 rounding.
 */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum { NRED = 4 };
/* What is reduced: the matrix, every other column of it (rows with a
 * stride), or all columns but the first (contiguous rows at an offset). */
enum { V_NONE, V_STEP2, V_OFFSET };
static const ot_op red_ops[NRED] = {OT_OP_MAX, OT_OP_MIN, OT_OP_SUM, OT_OP_MEAN};

/* Row r of an R x C matrix: values in [-4, 4), with row 0 NaN at its last
 * element, row 1 signed zeros for its extremes, row 2 infinities. */
static void fill(float *x, int64_t rows, int64_t cols, bool specials)
{
    uint32_t s = 12345;
    for (int64_t i = 0; i < rows * cols; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = (float)(s >> 8) / (float)(1u << 24) * 8.0f - 4.0f;
    }
    if (!specials || cols == 0) return;
    x[cols - 1] = NAN;
    if (rows > 1) {
        for (int64_t j = 0; j < cols; j++) x[cols + j] = j % 3 ? -(float)(j % 5) : (j % 2 ? 0.0f : -0.0f);
        for (int64_t j = 0; j < cols; j++) x[cols + j] = x[cols + j] > 0 ? -x[cols + j] : x[cols + j];
    }
    if (rows > 2) {
        x[2 * cols] = INFINITY;
        x[2 * cols + cols / 2] = -INFINITY;
    }
}

/* The same bits, a NaN matching any NaN; else within tol. */
static bool same(float a, float b, double tol, bool exact)
{
    if (a != a || b != b) return a != a && b != b;
    if (exact) return memcmp(&a, &b, sizeof a) == 0;
    return test__close(a, b, tol);
}

/* ot_eval of build(x) on one backend into a host array: 0, or the error
 * code (max and min over an empty axis have no identity: an error on
 * both backends). */
typedef ot_node *(*build_fn)(ot_tensor *x, int op, int axis);

static int eval_on(ot_backend *be, ot_shape shape, const float *host, build_fn build, int op,
                   int axis, int view, float *out, int64_t *n)
{
    ot_tensor *x = ot_array(be, shape, OT_F32, host);
    ot_tensor *v = view == V_STEP2   ? ot_slice(x, OT_ALL, OT_RANGE(1, OT_NONE, 2))
                 : view == V_OFFSET ? ot_slice(x, OT_ALL, OT_RANGE(1, OT_NONE))
                                    : x;
    ot_pool *pool = ot_pool_push();
    ot_tensor *y = x && v ? ot_eval(build(v, op, axis)) : NULL;
    ot_pool_pop(pool);
    int rc = y ? 0 : ot_errcode();
    if (y) {
        *n = ot_tensor_numel(y);
        rc = ot_get(y, out);
    }
    ot_tensor_free(y);
    if (v != x) ot_tensor_free(v);
    ot_tensor_free(x);
    ot_clear_error();
    return rc;
}

static ot_node *reduce_of(ot_tensor *x, int op, int axis)
{
    switch (op) {
    case OT_OP_MAX: return ot_max(x, .axis = axis);
    case OT_OP_MIN: return ot_min(x, .axis = axis);
    case OT_OP_SUM: return ot_sum(x, .axis = axis);
    default: return ot_mean(x, .axis = axis);
    }
}

static ot_node *softmax_of(ot_tensor *x, int op, int axis)
{
    (void)op;
    return ot_softmax(x, .axis = axis);
}

/* x's transpose reduced: rows with a stride (no in-place row walk). */
static ot_node *reduce_transposed(ot_tensor *x, int op, int axis)
{
    ot_tensor *t = ot_transpose(x, NULL);
    ot_node *r = reduce_of(t, op, axis);
    ot_tensor_free(t);   /* the tree holds its leaf */
    return r;
}

/* Compares cpu (be) with ref on one case; returns the mismatches. */
static int compare(ot_backend *be, ot_backend *ref, int64_t rows, int64_t cols, bool specials,
                   build_fn build, int op, int axis, int view)
{
    /* rows * cols values in, at most that many out, or rows (cols) when
     * the other is 0: a reduction of an empty axis gives its identity. */
    size_t n = (size_t)(rows * cols + rows + cols + 1);
    float *x = malloc(n * sizeof *x), *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    int64_t na = 0, nb = 0;
    int bad = 0;
    fill(x, rows, cols, specials);
    bool exact = build != softmax_of && (op == OT_OP_MAX || op == OT_OP_MIN);
    int ea = eval_on(be, OT_SHAPE(rows, cols), x, build, op, axis, view, a, &na);
    int eb = eval_on(ref, OT_SHAPE(rows, cols), x, build, op, axis, view, b, &nb);
    CHECK_INT(ea, eb);
    if (!ea && !eb) {
        CHECK_INT(na, nb);
        for (int64_t i = 0; i < na && i < nb; i++)
            if (!same(a[i], b[i], 2e-6, exact) && bad++ == 0)
                test__fail(__FILE__, __LINE__, "op %d axis %d %lldx%lld%s [%lld]: %.9g, ref %.9g", op,
                           axis, (long long)rows, (long long)cols, view ? " (a view)" : "",
                           (long long)i, a[i], b[i]);
    }
    free(x);
    free(a);
    free(b);
    return bad;
}

static const int64_t row_lengths[] = {1, 3, 15, 16, 17, 33, 64, 100, 1000, 1024, 1025, 2049};
#define NLEN (int)(sizeof row_lengths / sizeof row_lengths[0])

/* Every reduction along rows and down columns, with the special values. */
static void reductions_match(int jit)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 2, .jit = jit});
    ot_backend *ref = ot_backend_new("ref", NULL);
    CHECK(be && ref);
    for (int l = 0; l < NLEN && be && ref; l++)
        for (int r = 0; r < NRED; r++)
            for (int axis = 0; axis < 2; axis++) {
                for (int v = V_NONE; v <= V_OFFSET; v++)
                    compare(be, ref, 5, row_lengths[l], true, reduce_of, red_ops[r], axis, v);
                compare(be, ref, 3, row_lengths[l], true, reduce_transposed, red_ops[r], axis, V_NONE);
            }
    ot_backend_free(be);
    ot_backend_free(ref);
}

TEST(rows_reductions_match_ref_generated_code) { reductions_match(OT_JIT_DEFAULT); }
TEST(rows_reductions_match_ref_interpreted) { reductions_match(OT_JIT_OFF); }

/* One-element and empty rows (the identity, or NaN for mean), and many
 * short rows (row blocks of several rows). */
TEST(rows_short_and_empty)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON), *ref = ot_backend_new("ref", NULL);
    for (int r = 0; r < NRED && be && ref; r++)
        for (int axis = 0; axis < 2; axis++) {
            compare(be, ref, 7, 1, false, reduce_of, red_ops[r], axis, V_NONE);
            compare(be, ref, 4, 0, false, reduce_of, red_ops[r], axis, V_NONE);
            compare(be, ref, 300, 17, true, reduce_of, red_ops[r], axis, V_NONE);
        }
    ot_backend_free(be);
    ot_backend_free(ref);
}

/* A stored value reduced through one more op (a layer norm's gradient sums
 * -x): the reduction's pass computes and stores it. */
static ot_node *carried_of(ot_tensor *x, int op, int axis)
{
    (void)op;
    ot_node *e = ot_exp(ot_mul(x, 0.5f));
    ot_node *r = ot_sum(ot_neg(e), .axis = axis, .keepdims = true);
    return ot_add(ot_mul(e, r), e);
}

/* Two stored values meeting in the reduced op: only one could be stored by
 * the reduction's pass, so neither is (a fuzzed gradient once read the
 * other before any kernel wrote it). */
static ot_node *carried_two_of(ot_tensor *x, int op, int axis)
{
    (void)op;
    ot_node *e1 = ot_exp(ot_mul(x, 0.5f)), *e2 = ot_add(ot_mul(x, x), 1.0f);
    ot_node *r = ot_sum(ot_mul(e1, e2), .axis = axis, .keepdims = true);
    return ot_add(ot_div(e1, r), e2);
}

TEST(rows_reduction_stores_what_it_reduces_through_an_op)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON), *ref = ot_backend_new("ref", NULL);
    for (int l = 0; l < NLEN && be && ref; l++)
        for (int axis = 0; axis < 2; axis++) {
            compare(be, ref, 9, row_lengths[l], false, carried_of, 0, axis, axis ? V_STEP2 : V_NONE);
            compare(be, ref, 9, row_lengths[l], false, carried_two_of, 0, axis, V_NONE);
        }
    compare(be, ref, 600, 40, false, carried_of, 0, 1, V_NONE);
    compare(be, ref, 600, 40, false, carried_two_of, 0, 1, V_NONE);
    float host[6 * 5] = {0};
    ot_tensor *x = ot_array(be, OT_SHAPE(6, 5), OT_F32, host);
    ot_pool *pool = ot_pool_push();
    char *text = test__capture(ot_explain, carried_of(x, 0, 1));
    /* The sum, and the stored value as a further output (kept in the output). */
    CHECK(text && strstr(text, "plan: 2 kernels") &&
          strstr(text, "reduce sum over one axis [6x5]: mul exp neg <- leaf0 -> t1, out0"));
    free(text);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
    ot_backend_free(ref);
}

/* Softmax along rows: its max, exp-sum and divide passes per row block. */
TEST(rows_softmax_matches_ref)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON), *ref = ot_backend_new("ref", NULL);
    for (int l = 0; l < NLEN && be && ref; l++) {
        for (int v = V_NONE; v <= V_OFFSET; v++)
            compare(be, ref, 9, row_lengths[l], false, softmax_of, 0, 1, v);
        compare(be, ref, 4, row_lengths[l], false, softmax_of, 0, 0, V_NONE);
    }
    compare(be, ref, 600, 40, false, softmax_of, 0, 1, V_NONE);
    ot_backend_free(be);
    ot_backend_free(ref);
}

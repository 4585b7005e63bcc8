/*
 * test_badinput.c - issue 13's sweep of bad input over every public function
 * of include/optree.h: NULL for each pointer, bad counts, axes, dtypes and
 * shapes, mismatched operands, read-only and overlapping outputs, bad
 * backend names and environment overrides. Each case checks that nothing
 * crashes (the runner forks every case; the ASan build runs them too), the
 * negative OT_E* code (or NULL) and, for builders, a message naming the op,
 * the operand shapes and the file:line of the call here.
 *
 * Expected "file:line" prefixes come from __LINE__ on the line of the call.
 */
#include "test.h"

#include <limits.h>
#include <stdlib.h>

/* "tests/test_badinput.c:<line>:" for a call on that line. */
static const char *at(int line)
{
    static char buf[8][128];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s:%d:", __FILE__, line);
    return b;
}

static ot_backend *backend(const char *name)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name, NULL);
    CHECK(be != NULL);
    return be;
}

/* The op table, so that every op is swept and a new op is swept too. */
static const struct op_row { ot_op op; const char *name; int arity, kind; } ops[] = {
#define ROW(e, nm, ar, kd, sym, fl, rf) {OT_OP_##e, nm, ar, kd},
    OT_OP_LIST(ROW)
#undef ROW
};
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

/* Arguments an op needs to be valid on a (3,4) f32 operand. */
static ot_args good_args(ot_op op)
{
    ot_args a = {.axis = OT_AXIS_ALL, .dtype = OT_F32, .depth = 3, .lo = 0, .hi = 1};
    if (op == OT_OP_ONEHOT) a.axis = -1;
    if (op == OT_OP_RAND) a.shape = OT_SHAPE(3, 4);
    if (op == OT_OP_RESHAPE) a.shape = OT_SHAPE(-1);
    if (op == OT_OP_SLICE) a.start[0] = a.start[1] = 1;   /* x[1, 1]: perm 0 is an index */
    if (op == OT_OP_TAKE || op == OT_OP_SCATTER_ADD || op == OT_OP_CUMSUM) a.axis = 0;
    if (op == OT_OP_TOPK || op == OT_OP_TAKE_ALONG || op == OT_OP_SCATTER_ALONG) a.axis = 0;
    return a;
}

/* ---- NULL operands, for every op of the table --------------------------- */

TEST(badinput_null_operand_every_op)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    for (int i = 0; i < NOPS; i++) {
        if (ops[i].arity == 0) continue;
        ot_args a = good_args(ops[i].op);
        ot_clear_error();
        ot_node *n = ot_build_at(ops[i].op, NULL, ops[i].arity == 2 ? ot_tensor_node(x) : NULL,
                                 &a, __FILE__, __LINE__); int l1 = __LINE__;
        CHECK(n == NULL);
        CHECK_ERR(OT_ENULL, ops[i].name, "NULL", at(l1));
        if (ops[i].arity != 2) continue;
        n = ot_build_at(ops[i].op, ot_tensor_node(x), NULL, &a, __FILE__, __LINE__); int l2 = __LINE__;
        CHECK(n == NULL);
        CHECK_ERR(OT_ENULL, ops[i].name, "NULL", "(3,4)", at(l2));
    }
    /* The builder macros too: a NULL tensor as an operand. */
    ot_tensor *tn = NULL;
    ot_node *nn = NULL;
    CHECK(ot_sqrt(tn) == NULL); int l3 = __LINE__;
    CHECK_ERR(OT_ENULL, "sqrt", at(l3));
    CHECK(ot_dot(x, nn) == NULL); int l4 = __LINE__;
    CHECK_ERR(OT_ENULL, "dot", "(3,4)", at(l4));
    CHECK(ot_batched_dot(nn, x) == NULL); int l5 = __LINE__;
    CHECK_ERR(OT_ENULL, "batched_dot", at(l5));
    CHECK(ot_softmax(nn, .axis = 1) == NULL); int l6 = __LINE__;
    CHECK_ERR(OT_ENULL, "softmax", at(l6));
    CHECK(ot_cross_entropy(x, nn) == NULL); int l7 = __LINE__;
    CHECK_ERR(OT_ENULL, "cross_entropy", at(l7));
    CHECK(ot_clip(nn, 0.0, 1.0) == NULL); int l8 = __LINE__;
    CHECK_ERR(OT_ENULL, "clip", at(l8));
    CHECK(ot_T(tn) == NULL); int l9 = __LINE__;
    CHECK_ERR(OT_ENULL, "transpose", at(l9));
    CHECK(ot_onehot(nn, .depth = 3) == NULL); int l10 = __LINE__;
    CHECK_ERR(OT_ENULL, "onehot", at(l10));
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* The innermost bad call of a deep expression is the one reported. */
TEST(badinput_first_error_wins_deep)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(5, 4), OT_F32);
    ot_tensor *out = ot_empty(be, OT_SHAPE(3, 4), OT_F32);
    ot_node *nn = NULL;
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    int l1 = __LINE__; ot_node *deep = ot_sum(ot_exp(ot_add(ot_mul(ot_tanh(ot_sub(x, nn)), 2.0f), x)), .axis = 0);
    CHECK(deep == NULL);
    CHECK_INT(ot_errcode(), OT_ENULL);
    CHECK(strstr(ot_errmsg(), at(l1)) != NULL);
    CHECK(strstr(ot_errmsg(), "sub") != NULL);
    ot_clear_error();
    /* ot_assign of the NULL tree returns the first error, unchanged. */
    CHECK_INT(ot_assign(out, ot_neg(ot_add(x, ot_mul(x, y)))), OT_ESHAPE); int l2 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "mul", "(3,4)", "(5,4)", at(l2));
    /* A shape error below a NULL: the shape error came first. */
    CHECK(ot_add(ot_mul(x, y), nn) == NULL); int l3 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "mul", at(l3));
    /* 10,000 levels above the bad call keep its message. */
    int l4 = __LINE__; ot_node *t = ot_add(x, y);
    for (int i = 0; i < 10000; i++) t = ot_neg(t);
    CHECK(t == NULL);
    CHECK_ERR(OT_ESHAPE, "add", "(3,4)", "(5,4)", at(l4));
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* After an error the next valid call works and clears the slot (work
 * functions), or leaves it as it was (builders keep the first error). */
TEST(badinput_recovery_after_error)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(5, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    CHECK(ot_add(x, y) == NULL);
    CHECK_INT(ot_errcode(), OT_ESHAPE);
    ot_node *ok = ot_add(x, x);
    CHECK(ok != NULL);
    CHECK_INT(ot_errcode(), OT_ESHAPE);     /* builders keep the first error */
    CHECK_INT(ot_assign(x, ok), 0);
    CHECK_INT(ot_errcode(), 0);
    CHECK_STR(ot_errmsg(), "");
    float v[12];
    CHECK_INT(ot_get(x, v), 0);
    CHECK_NEAR(v[11], 2.0, 0);
    /* A NULL tensor, like a NULL tree, is taken for a failed call's result:
     * the slot's error, which explains it, is kept; with a clear slot it is
     * OT_ENULL. */
    CHECK(ot_empty(be, OT_SHAPE(-1), OT_F32) == NULL);
    ot_tensor *c = ot_copy(x);
    CHECK(c != NULL);
    CHECK_INT(ot_fill(NULL, 1), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "empty", "negative dimension -1 at axis 0");
    CHECK_INT(ot_fill(NULL, 1), OT_ENULL);
    CHECK_ERR(OT_ENULL, "fill", "tensor is NULL");
    CHECK_INT(ot_fill(c, 3), 0);
    CHECK_INT(ot_errcode(), 0);
    CHECK(ot_eval(ot_add(x, y)) == NULL);
    ot_tensor *e = ot_eval(ot_add(x, c));
    CHECK(e != NULL);
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
    ot_tensor_free(e);
    ot_tensor_free(c);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* ---- shapes ------------------------------------------------------------- */

TEST(badinput_binary_shapes_every_op)
{
    ot_backend *be = backend("ref");
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = ot_ones(be, OT_SHAPE(5, 4), OT_F32);
    ot_tensor *c = ot_ones(be, OT_SHAPE(2, 3, 5), OT_F32);
    ot_pool *p = ot_pool_push();
    for (int i = 0; i < NOPS; i++) {
        if (ops[i].kind != OT_KIND_BINARY) continue;
        ot_clear_error();
        ot_node *n = ot_build_at(ops[i].op, ot_tensor_node(a), ot_tensor_node(b), NULL,
                                 __FILE__, __LINE__); int l1 = __LINE__;
        CHECK(n == NULL);
        CHECK_ERR(OT_ESHAPE, ops[i].name, "(3,4)", "(5,4)", at(l1));
        n = ot_build_at(ops[i].op, ot_tensor_node(c), ot_tensor_node(a), NULL,
                        __FILE__, __LINE__); int l2 = __LINE__;
        CHECK(n == NULL);
        CHECK_ERR(OT_ESHAPE, ops[i].name, "(2,3,5)", "(3,4)", at(l2));
    }
    /* cross_entropy is binary too. */
    CHECK(ot_cross_entropy(a, b) == NULL); int l3 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "(3,4)", "(5,4)", at(l3));
    ot_pool_pop(p);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(c);
    ot_backend_free(be);
}

TEST(badinput_dot_shapes)
{
    ot_backend *be = backend("ref");
    ot_tensor *v3 = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *v4 = ot_ones(be, OT_SHAPE(4), OT_F32);
    ot_tensor *m34 = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *m52 = ot_ones(be, OT_SHAPE(5, 2), OT_F32);
    ot_tensor *t234 = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_tensor *t345 = ot_ones(be, OT_SHAPE(3, 4, 5), OT_F32);
    ot_tensor *t254 = ot_ones(be, OT_SHAPE(2, 5, 4), OT_F32);
    ot_tensor *i34 = ot_ones(be, OT_SHAPE(3, 4), OT_I32);
    ot_tensor *s = ot_ones(be, OT_SHAPE(), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    CHECK(ot_dot(v3, v4) == NULL); int l1 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "dot", "(3,)", "(4,)", at(l1));
    CHECK(ot_dot(m34, m52) == NULL); int l2 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "dot", "(3,4)", "(5,2)", at(l2));
    CHECK(ot_dot(v4, m52) == NULL); int l3 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "dot", "(4,)", "(5,2)", at(l3));
    CHECK(ot_dot(m34, v3) == NULL); int l4 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "dot", "(3,4)", "(3,)", at(l4));
    CHECK(ot_dot(t234, m34) == NULL); int l5 = __LINE__;
    CHECK_ERR(OT_EINVAL, "dot", "(2,3,4)", at(l5));
    CHECK(ot_dot(m34, t345) == NULL); int l6 = __LINE__;
    CHECK_ERR(OT_EINVAL, "dot", "(3,4,5)", at(l6));
    CHECK(ot_dot(s, v3) == NULL); int l7 = __LINE__;
    CHECK_ERR(OT_EINVAL, "dot", "()", at(l7));
    ot_tensor *m43 = ot_transpose(m34, NULL);
    ot_tensor *i43 = ot_transpose(i34, NULL);
    CHECK(ot_dot(i34, i43) == NULL); int l8 = __LINE__;
    ot_tensor_free(i43);
    CHECK_ERR(OT_EDTYPE, "dot", "int32", "(3,4)", "(4,3)", at(l8));
    /* batched_dot: batch, K and rank. */
    CHECK(ot_batched_dot(t234, t345) == NULL); int l9 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "batched_dot", "(2,3,4)", "(3,4,5)", at(l9));
    CHECK(ot_batched_dot(t234, t254) == NULL); int l10 = __LINE__;
    CHECK_ERR(OT_ESHAPE, "batched_dot", "(2,3,4)", "(2,5,4)", at(l10));
    CHECK(ot_batched_dot(m34, t345) == NULL); int l11 = __LINE__;
    CHECK_ERR(OT_EINVAL, "batched_dot", "(3,4)", at(l11));
    CHECK(ot_batched_dot(t234, v4) == NULL); int l12 = __LINE__;
    CHECK_ERR(OT_EINVAL, "batched_dot", "(4,)", at(l12));
    ot_pool_pop(p);
    ot_tensor *all[] = {v3, v4, m34, m52, t234, t345, t254, i34, s, m43};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* Creation with bad shapes: negative dims, too many or negative ndim,
 * numel or bytes that overflow. */
TEST(badinput_creation_shapes)
{
    ot_backend *be = backend("cpu");
    int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    struct { ot_shape s; int code; const char *sub; } rows[] = {
        {OT_SHAPE(3, -2), OT_EINVAL, "negative dimension -2 at axis 1"},
        {OT_SHAPE(INT64_MIN), OT_EINVAL, "negative dimension"},
        {ot_shape_make(9, nine), OT_EINVAL, "9"},
        {ot_shape_make(INT_MAX, nine), OT_EINVAL, "dimensions"},
        {ot_shape_make(-1, nine), OT_EINVAL, "-1"},
        {ot_shape_make(INT_MIN, nine), OT_EINVAL, "dimensions"},
        {OT_SHAPE(INT64_MAX), OT_EOVERFLOW, "9223372036854775807"},
        {OT_SHAPE(INT64_MAX, 2), OT_EOVERFLOW, ""},
        {OT_SHAPE(1LL << 62), OT_EOVERFLOW, ""},             /* bytes overflow */
        {OT_SHAPE(1LL << 32, 1LL << 32), OT_EOVERFLOW, ""},
        {OT_SHAPE(0, INT64_MAX, INT64_MAX), OT_EOVERFLOW, ""}, /* empty but absurd */
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        ot_clear_error();
        CHECK(ot_empty(be, rows[i].s, OT_F32) == NULL);
        CHECK_ERR(rows[i].code, "empty", rows[i].sub);
        CHECK(ot_zeros(be, rows[i].s, OT_F64) == NULL);
        CHECK_ERR(rows[i].code, "zeros", rows[i].sub);
        CHECK(ot_ones(be, rows[i].s, OT_F32) == NULL);
        CHECK_ERR(rows[i].code, "ones", rows[i].sub);
        CHECK(ot_full(be, rows[i].s, OT_I32, 1) == NULL);
        CHECK_ERR(rows[i].code, "full", rows[i].sub);
        float one = 1;
        CHECK(ot_array(be, rows[i].s, OT_F32, &one) == NULL);
        CHECK_ERR(rows[i].code, "array", rows[i].sub);
        ot_pool *p = ot_pool_push();
        CHECK(ot_rand(rows[i].s) == NULL); int l1 = __LINE__;
        CHECK_ERR(rows[i].code, "rand", rows[i].sub, at(l1));
        ot_pool_pop(p);
    }
    ot_backend_free(be);
}

TEST(badinput_creation_nulls_and_dtypes)
{
    ot_backend *be = backend("cpu");
    ot_clear_error();
    CHECK(ot_empty(NULL, OT_SHAPE(2), OT_F32) == NULL);
    CHECK_ERR(OT_ENULL, "empty", "backend");
    CHECK(ot_zeros(NULL, OT_SHAPE(2), OT_F32) == NULL);
    CHECK_ERR(OT_ENULL, "zeros");
    CHECK(ot_ones(NULL, OT_SHAPE(2), OT_F32) == NULL);
    CHECK_ERR(OT_ENULL, "ones");
    CHECK(ot_full(NULL, OT_SHAPE(2), OT_F32, 1) == NULL);
    CHECK_ERR(OT_ENULL, "full");
    CHECK(ot_array(NULL, OT_SHAPE(2), OT_F32, (float[]){1, 2}) == NULL);
    CHECK_ERR(OT_ENULL, "array");
    CHECK(ot_array(be, OT_SHAPE(2), OT_F32, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "array", "data");
    CHECK(ot_zeros_like(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "zeros_like");
    CHECK(ot_copy(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "copy");
    ot_tensor_free(NULL);
    /* Bad dtypes. */
    ot_dtype bad[] = {(ot_dtype)99, (ot_dtype)-1, (ot_dtype)6};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ot_empty(be, OT_SHAPE(2), bad[i]) == NULL);
        CHECK_ERR(OT_EDTYPE, "empty", "dtype");
        CHECK(ot_full(be, OT_SHAPE(2), bad[i], 0) == NULL);
        CHECK_ERR(OT_EDTYPE, "full", "dtype");
        CHECK(ot_array(be, OT_SHAPE(2), bad[i], (double[]){1, 2}) == NULL);
        CHECK_ERR(OT_EDTYPE, "array", "dtype");
        CHECK_INT(ot_dtype_size(bad[i]), 0);
        CHECK(ot_dtype_name(bad[i]) != NULL);
    }
    ot_backend_free(be);
}

/* ---- axes and attributes ------------------------------------------------ */

TEST(badinput_axes_every_axis_op)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *t = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    static const ot_op axis_ops[] = {
        OT_OP_SUM, OT_OP_MAX, OT_OP_MIN, OT_OP_MEAN, OT_OP_ARGMAX, OT_OP_ARGMIN,
        OT_OP_VAR, OT_OP_STD, OT_OP_SOFTMAX, OT_OP_LOGSOFTMAX, OT_OP_SQUARED_L2,
        OT_OP_CROSS_ENTROPY, OT_OP_ONEHOT,
    };
    const int bad_axes[] = {-3, 2, INT_MIN, INT_MAX, 100, -1001, OT_AXIS_ALL + 1};
    for (size_t i = 0; i < sizeof axis_ops / sizeof axis_ops[0]; i++) {
        ot_op op = axis_ops[i];
        for (size_t k = 0; k < sizeof bad_axes / sizeof bad_axes[0]; k++) {
            ot_args a = good_args(op);
            a.axis = bad_axes[k];
            /* onehot adds a dim: its axis may be ndim, not ndim + 1 */
            if (op == OT_OP_ONEHOT && a.axis == 2) a.axis = 3;
            if (op == OT_OP_ONEHOT && a.axis == -3) a.axis = -4;
            char want[48];
            snprintf(want, sizeof want, "axis %d", a.axis);
            ot_clear_error();
            ot_node *n = ot_build_at(op, ot_tensor_node(x),
                                     op == OT_OP_CROSS_ENTROPY ? ot_tensor_node(t) : NULL,
                                     &a, __FILE__, __LINE__); int l1 = __LINE__;
            if (n != NULL) test__fail(__FILE__, __LINE__, "%s accepted axis %d", ot_op_name(op), a.axis);
            CHECK_ERR(OT_EINVAL, ot_op_name(op), want, "(3,4)", at(l1));
        }
    }
    /* depth and perm. */
    ot_clear_error();
    CHECK(ot_onehot(x, .depth = INT64_MAX) == NULL); int l4 = __LINE__;
    CHECK_ERR(OT_EOVERFLOW, "onehot", at(l4));
    CHECK(ot_T(x, .perm = {1, 1}) == NULL); int l5 = __LINE__;
    CHECK_ERR(OT_EINVAL, "transpose", "perm", "(3,4)", at(l5));
    CHECK(ot_T(x, .perm = {INT_MIN, 1}) == NULL); int l6 = __LINE__;
    CHECK_ERR(OT_EINVAL, "transpose", "perm", at(l6));
    CHECK(ot_T(x, .perm = {1, INT_MAX}) == NULL); int l7 = __LINE__;
    CHECK_ERR(OT_EINVAL, "transpose", "perm", "(3,4)", at(l7));
    CHECK(ot_clip(x, 1.0, 0.0) != NULL || ot_errcode() == OT_EINVAL);
    ot_clear_error();
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(badinput_dtypes_of_ops)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    const ot_dtype bad[] = {(ot_dtype)99, (ot_dtype)-7, (ot_dtype)6};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        CHECK(ot_cast(x, .dtype = bad[i]) == NULL); int l1 = __LINE__;
        CHECK_ERR(OT_EDTYPE, "cast", at(l1));
        CHECK(ot_rand(OT_SHAPE(2), .dtype = bad[i]) == NULL); int l2 = __LINE__;
        CHECK_ERR(OT_EDTYPE, "rand", at(l2));
        CHECK(ot_onehot(x, .depth = 2, .dtype = bad[i]) == NULL); int l3 = __LINE__;
        CHECK_ERR(OT_EDTYPE, "onehot", at(l3));
    }
    /* An op number outside the table. */
    CHECK(ot_build_at((ot_op)OT_OP_COUNT, ot_tensor_node(x), NULL, NULL, __FILE__, __LINE__) == NULL); int l4 = __LINE__;
    CHECK_ERR(OT_EINVAL, at(l4));
    CHECK(ot_build_at((ot_op)INT_MIN, ot_tensor_node(x), NULL, NULL, __FILE__, __LINE__) == NULL); int l5 = __LINE__;
    CHECK_ERR(OT_EINVAL, at(l5));
    CHECK(ot_build_at(OT_OP_NONE, ot_tensor_node(x), NULL, NULL, __FILE__, __LINE__) == NULL); int l6 = __LINE__;
    CHECK_ERR(OT_EINVAL, at(l6));
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- views -------------------------------------------------------------- */

TEST(badinput_views)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_clear_error();
    CHECK(ot_slice_n(NULL, 1, &OT_ALL) == NULL);
    CHECK_ERR(OT_ENULL, "slice");
    CHECK(ot_slice_n(x, 1, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "slice");
    CHECK(ot_slice_n(x, -1, (ot_index[]){OT_ALL}) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "-1");
    CHECK(ot_slice_n(x, INT_MIN, (ot_index[]){OT_ALL}) == NULL);
    CHECK_ERR(OT_EINVAL, "slice");
    CHECK(ot_slice(x, OT_ALL, OT_ALL, OT_ALL) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "2-dimensional", "3");
    CHECK(ot_slice(x, OT_IDX(3)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "index 3", "size 3");
    CHECK(ot_slice(x, OT_IDX(-4)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "-4");
    CHECK(ot_slice(x, OT_IDX(INT64_MIN)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice");
    CHECK(ot_slice(x, OT_RANGE(0, 3, 0)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "step");
    CHECK(ot_slice(x, ((ot_index){77, 0, 0, 1})) == NULL);
    CHECK_ERR(OT_EINVAL, "slice");
    /* Steps of +-2^63: one element each, as in NumPy (no overflow). */
    ot_tensor *r = ot_slice(x, OT_RANGE(INT64_MIN + 1, INT64_MAX, INT64_MAX));
    CHECK(r != NULL);
    CHECK_INT(ot_tensor_dim(r, 0), 1);
    ot_tensor_free(r);
    r = ot_slice(x, OT_ALL, OT_RANGE(INT64_MAX, INT64_MIN + 1, INT64_MIN + 1));
    CHECK(r != NULL);
    CHECK_INT(ot_tensor_dim(r, 1), 1);
    float last[3];
    CHECK_INT(ot_get(r, last), 0);
    CHECK_NEAR(last[2], 1, 0);
    ot_tensor_free(r);
    ot_clear_error();
    /* reshape */
    CHECK(ot_reshape(NULL, OT_SHAPE(12)) == NULL);
    CHECK_ERR(OT_ENULL, "reshape");
    CHECK(ot_reshape(x, OT_SHAPE(5, 3)) == NULL);
    CHECK_ERR(OT_ESHAPE, "reshape", "size 12", "(5,3)");
    CHECK(ot_reshape(x, OT_SHAPE(-1, -1)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape");
    CHECK(ot_reshape(x, OT_SHAPE(-2, 6)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape", "-2");
    CHECK(ot_reshape(x, OT_SHAPE(-1, 5)) == NULL);
    CHECK_ERR(OT_ESHAPE, "reshape");
    CHECK(ot_reshape(x, OT_SHAPE(0, -1)) == NULL);
    CHECK(ot_errcode() < 0);
    ot_clear_error();
    int64_t nine[9] = {12, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK(ot_reshape(x, ot_shape_make(9, nine)) == NULL);
    CHECK_ERR(OT_EINVAL, "reshape", "9");
    CHECK(ot_reshape(x, OT_SHAPE(INT64_MAX, 2)) == NULL);
    CHECK(ot_errcode() == OT_EOVERFLOW || ot_errcode() == OT_ESHAPE);
    ot_clear_error();
    /* transpose */
    CHECK(ot_transpose(NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "transpose");
    CHECK(ot_transpose(x, (int[]){0, 0}) == NULL);
    CHECK_ERR(OT_EINVAL, "transpose", "perm");
    CHECK(ot_transpose(x, (int[]){2, 0}) == NULL);
    CHECK_ERR(OT_EINVAL, "transpose");
    CHECK(ot_transpose(x, (int[]){INT_MIN, 0}) == NULL);
    CHECK_ERR(OT_EINVAL, "transpose");
    /* broadcast_to */
    CHECK(ot_broadcast_to(NULL, OT_SHAPE(3, 4)) == NULL);
    CHECK_ERR(OT_ENULL, "broadcast_to");
    CHECK(ot_broadcast_to(x, OT_SHAPE(3, 5)) == NULL);
    CHECK_ERR(OT_ESHAPE, "broadcast_to", "(3,4)", "(3,5)");
    CHECK(ot_broadcast_to(x, OT_SHAPE(4)) == NULL);
    CHECK_ERR(OT_ESHAPE, "broadcast_to", "(3,4)", "(4,)");
    CHECK(ot_broadcast_to(x, OT_SHAPE(-2, 3, 4)) == NULL);
    CHECK_ERR(OT_EINVAL, "broadcast_to", "negative");
    CHECK(ot_broadcast_to(x, ot_shape_make(9, nine)) == NULL);
    CHECK_ERR(OT_EINVAL, "broadcast_to");
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- accessors and small functions given NULL or out-of-range values ---- */

TEST(badinput_accessors)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_clear_error();
    CHECK_INT(ot_tensor_dtype(NULL), 0);
    CHECK_INT(ot_tensor_ndim(NULL), 0);
    CHECK_INT(ot_tensor_shape(NULL).ndim, 0);
    CHECK_INT(ot_tensor_dim(NULL, 0), 0);
    CHECK_INT(ot_tensor_stride(NULL, 0), 0);
    CHECK_INT(ot_tensor_offset(NULL), 0);
    CHECK_INT(ot_tensor_numel(NULL), 0);
    CHECK(ot_tensor_data(NULL) == NULL);
    CHECK(ot_tensor_backend(NULL) == NULL);
    CHECK(!ot_tensor_is_contiguous(NULL));
    CHECK(ot_tensor_name(NULL) == NULL);
    CHECK_INT(ot_tensor_set_name(NULL, "a"), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensor_set_name");
    CHECK_INT(ot_tensor_set_name(x, NULL), 0);
    const int bad_axes[] = {-3, 2, INT_MIN, INT_MAX, OT_AXIS_ALL};
    for (size_t i = 0; i < sizeof bad_axes / sizeof bad_axes[0]; i++) {
        char want[32];
        snprintf(want, sizeof want, "axis %d", bad_axes[i]);
        CHECK_INT(ot_tensor_dim(x, bad_axes[i]), -1);
        CHECK_ERR(OT_EINVAL, "tensor_dim", want);
        CHECK_INT(ot_tensor_stride(x, bad_axes[i]), -1);
        CHECK_ERR(OT_EINVAL, "tensor_stride", want);
    }
    /* nodes */
    CHECK_INT(ot_node_kind(NULL), 0);
    CHECK_INT(ot_node_op(NULL), OT_OP_NONE);
    CHECK_INT(ot_node_tag(NULL), OT_OP_NONE);
    CHECK_INT(ot_node_shape(NULL).ndim, 0);
    CHECK_INT(ot_node_dtype(NULL), 0);
    CHECK(ot_node_child(NULL, 0) == NULL);
    CHECK(ot_node_tensor(NULL) == NULL);
    CHECK(ot_node_value(NULL) == 0);
    CHECK(ot_node_file(NULL) == NULL);
    CHECK_INT(ot_node_line(NULL), 0);
    (void)ot_node_args(NULL);
    ot_pool *p = ot_pool_push();
    ot_node *n = ot_exp(x);
    CHECK(ot_node_child(n, -1) == NULL);
    CHECK(ot_node_child(n, 1) == NULL);
    CHECK(ot_node_child(n, 2) == NULL);
    CHECK(ot_node_child(n, INT_MAX) == NULL);
    CHECK(ot_node_child(n, INT_MIN) == NULL);
    CHECK(ot_node_tensor(n) == NULL);
    CHECK(ot_tensor_node(NULL) == NULL);
    CHECK(ot_retain(NULL) == NULL);
    ot_release(NULL);
    ot_pool_pop(p);
    /* the op table */
    const ot_op bad_ops[] = {OT_OP_NONE, OT_OP_COUNT, (ot_op)INT_MAX, (ot_op)INT_MIN};
    for (size_t i = 0; i < sizeof bad_ops / sizeof bad_ops[0]; i++) {
        CHECK(ot_op_name(bad_ops[i]) == NULL);
        CHECK_INT(ot_op_arity(bad_ops[i]), -1);
        CHECK_INT(ot_op_kind(bad_ops[i]), 0);
        CHECK_INT(ot_op_flags(bad_ops[i]), 0);
    }
    CHECK_INT(ot_op_lookup(NULL), OT_OP_NONE);
    CHECK_INT(ot_op_lookup(""), OT_OP_NONE);
    CHECK_INT(ot_op_lookup("ad"), OT_OP_NONE);
    /* status strings */
    CHECK(ot_strerror(INT_MIN) != NULL);
    CHECK(ot_strerror(INT_MAX) != NULL);
    /* backend accessors */
    CHECK(ot_backend_name(NULL) != NULL || 1);
    (void)ot_backend_options(NULL);
    ot_stats st;
    CHECK_INT(ot_stats_get(NULL, &st), OT_ENULL);
    CHECK_ERR(OT_ENULL, "stats");
    CHECK_INT(ot_stats(be, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "stats");
    ot_backend_free(NULL);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- data in and out ---------------------------------------------------- */

TEST(badinput_data_functions)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *bx = ot_broadcast_to(x, OT_SHAPE(2, 3, 4));
    float host[24];
    ot_clear_error();
    CHECK_INT(ot_fill(NULL, 0), OT_ENULL);
    CHECK_ERR(OT_ENULL, "fill");
    CHECK_INT(ot_get(NULL, host), OT_ENULL);
    CHECK_ERR(OT_ENULL, "get");
    CHECK_INT(ot_get(x, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "get");
    CHECK_INT(ot_set(NULL, host), OT_ENULL);
    CHECK_ERR(OT_ENULL, "set");
    CHECK_INT(ot_set(x, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "set");
    /* A read-only broadcast view cannot be written by any path. */
    CHECK_INT(ot_fill(bx, 2), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "fill", "stride 0");
    memset(host, 0, sizeof host);
    CHECK_INT(ot_set(bx, host), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "set", "stride 0");
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(bx, ot_neg(x)), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0");
    ot_tensor *y = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){y, bx}, (ot_node *[]){ot_neg(x), ot_neg(x)}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0");
    ot_pool_pop(p);
    CHECK_INT(ot_get(x, host), 0);
    CHECK_NEAR(host[0], 1, 0);
    CHECK_INT(ot_get(bx, host), 0);
    CHECK_INT(ot_tensor_print(NULL, stdout), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensor_print");
    CHECK_INT(ot_tensor_print(x, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "tensor_print", "NULL");
    ot_tensor_free(y);
    ot_tensor_free(bx);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- assignment: outputs of the wrong shape, dtype, or overlapping ------ */

TEST(badinput_assign_outputs)
{
    const char *names[] = {"ref", "cpu"};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(names[bi]);
        ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
        ot_tensor *w = ot_ones(be, OT_SHAPE(4, 4), OT_F32);
        ot_tensor *o = ot_empty(be, OT_SHAPE(4, 3), OT_F32);
        ot_tensor *oi = ot_empty(be, OT_SHAPE(3, 4), OT_I32);
        ot_pool *p = ot_pool_push();
        ot_clear_error();
        CHECK_INT(ot_assign(o, ot_exp(a)), OT_ESHAPE);
        CHECK_ERR(OT_ESHAPE, "assign", "(4,3)", "(3,4)");
        CHECK_INT(ot_assign(oi, ot_exp(a)), OT_EDTYPE);
        CHECK_ERR(OT_EDTYPE, "float32", "int32");
        CHECK_INT(ot_assign(o, ot_dot(a, w)), OT_ESHAPE);
        CHECK_ERR(OT_ESHAPE, "(4,3)", "(3,4)");
        /* A dot into a view of its own operand, overlapping it partly: the
         * result must be as if the operand were read first. */
        ot_tensor *buf = ot_array(be, OT_SHAPE(5, 4), OT_F32,
                                  (float[]){1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                            13, 14, 15, 16, 17, 18, 19, 20});
        ot_tensor *lo = ot_slice(buf, OT_RANGE(0, 4));
        ot_tensor *hi = ot_slice(buf, OT_RANGE(1, 5));
        ot_tensor *lo_copy = ot_copy(lo);
        ot_tensor *want = ot_eval(ot_dot(lo_copy, w));
        int rc = ot_assign(hi, ot_dot(lo, w));
        if (rc == 0) {
            float got[16], exp[16];
            ot_get(hi, got);
            ot_get(want, exp);
            for (int i = 0; i < 16; i++) CHECK_NEAR(got[i], exp[i], 0);
        } else {
            CHECK_ERR(OT_EALIAS, "overlap");
        }
        /* A reduction into part of its input. */
        ot_tensor *row = ot_slice(buf, OT_IDX(1));
        ot_tensor *lo_now = ot_copy(lo);
        ot_tensor *want2 = ot_eval(ot_sum(lo_now, .axis = 0));
        rc = ot_assign(row, ot_sum(lo, .axis = 0));
        if (rc == 0) {
            float got[4], exp[4];
            ot_get(row, got);
            ot_get(want2, exp);
            for (int i = 0; i < 4; i++) CHECK_NEAR(got[i], exp[i], 0);
        } else {
            CHECK_ERR(OT_EALIAS, "overlap");
        }
        ot_pool_pop(p);
        ot_tensor *all[] = {a, w, o, oi, buf, lo, hi, lo_copy, want, row, want2, lo_now};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
        ot_backend_free(be);
    }
}

TEST(badinput_assign_many)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(4, 4), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(4, 4), OT_F32);
    ot_tensor *top = ot_slice(x, OT_RANGE(0, 3));
    ot_tensor *bot = ot_slice(x, OT_RANGE(1, 4));
    ot_pool *p = ot_pool_push();
    ot_node *t3 = ot_neg(top);
    ot_clear_error();
    CHECK_INT(ot_assign_many(0, NULL, NULL), 0);
    CHECK_INT(ot_assign_many(-1, (ot_tensor *[]){y}, (ot_node *[]){ot_neg(y)}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "assign_many", "-1");
    CHECK_INT(ot_assign_many(INT_MIN, NULL, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "assign_many");
    CHECK_INT(ot_assign_many(1, NULL, (ot_node *[]){ot_neg(y)}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "assign_many", "outs");
    CHECK_INT(ot_assign_many(1, (ot_tensor *[]){y}, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "assign_many", "trees");
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){y, NULL}, (ot_node *[]){ot_neg(y), ot_neg(y)}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "assign_many");
    /* Outputs that overlap: the same tensor twice, and two slices. */
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){y, y}, (ot_node *[]){ot_neg(x), ot_neg(x)}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "assign_many");
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){top, bot}, (ot_node *[]){t3, t3}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "assign_many");
    /* Two wraps of overlapping memory are two buffers over the same bytes
     * (they were let through, the later write winning), and a wrap of a
     * tensor's own data; wraps side by side are apart. */
    float mem[8] = {0};
    ot_tensor *w0 = ot_wrap(be, OT_SHAPE(4), OT_F32, mem, NULL, NULL, NULL);
    ot_tensor *w2 = ot_wrap(be, OT_SHAPE(4), OT_F32, mem + 2, NULL, NULL, NULL);
    ot_tensor *w4 = ot_wrap(be, OT_SHAPE(4), OT_F32, mem + 4, NULL, NULL, NULL);
    ot_tensor *wy = ot_wrap(be, OT_SHAPE(2), OT_F32, (float *)ot_tensor_data(y) + 3, NULL, NULL, NULL);
    ot_node *f4 = ot_neg(ot_slice_node(ot_tensor_node(x), OT_IDX(0)));   /* (4,) */
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){w0, w2}, (ot_node *[]){f4, f4}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "assign_many", "overlap");
    ot_node *f2 = ot_neg(ot_slice_node(ot_tensor_node(x), OT_IDX(0), OT_RANGE(0, 2)));
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){y, wy}, (ot_node *[]){ot_neg(x), f2}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "assign_many", "overlap");
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){w0, w4}, (ot_node *[]){f4, f4}), 0);
    for (int i = 0; i < 8; i++) CHECK_NEAR(mem[i], -1, 0);
    ot_tensor *ws[] = {w0, w2, w4, wy};
    for (int i = 0; i < 4; i++) ot_tensor_free(ws[i]);
    /* Nothing was written. */
    float v[16];
    ot_get(x, v);
    for (int i = 0; i < 16; i++) CHECK_NEAR(v[i], 1, 0);
    /* explain_many checks the same. */
    CHECK_INT(ot_explain_many(-1, NULL, NULL, stdout), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "-1");
    CHECK_INT(ot_explain_many(2, (ot_tensor *[]){top, bot}, (ot_node *[]){t3, t3}, stdout), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "");
    CHECK_INT(ot_explain_many(1, (ot_tensor *[]){y}, (ot_node *[]){ot_neg(y)}, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "FILE");
    ot_pool_pop(p);
    ot_tensor_free(top);
    ot_tensor_free(bot);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* Two backends in one tree: OT_EBACKEND when the builder meets them (issue
 * 17: it used to run on the output's backend, reading the other's memory,
 * silently), and when a tree is assigned into another backend's output;
 * outputs of one ot_assign_many must share a backend. */
TEST(badinput_mixed_backends)
{
    ot_backend *r = backend("ref");
    ot_backend *c = backend("cpu");
    ot_tensor *a = ot_ones(r, OT_SHAPE(3), OT_F32);
    ot_tensor *b = ot_ones(c, OT_SHAPE(3), OT_F32);
    ot_tensor *oc = ot_empty(c, OT_SHAPE(3), OT_F32);
    ot_tensor *orf = ot_empty(r, OT_SHAPE(3), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    CHECK(ot_add(a, b) == NULL);
    CHECK_ERR(OT_EBACKEND, "add", "'ref'", "'cpu'");
    CHECK_INT(ot_assign(oc, ot_neg(a)), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "assign", "'ref'", "'cpu'");
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){oc, orf}, (ot_node *[]){ot_neg(b), ot_neg(a)}),
              OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "assign_many", "backends");
    CHECK(ot_autodiff_new(ot_sum(ot_mul(a, b)), NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "mul");
    ot_pool_pop(p);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(oc);
    ot_tensor_free(orf);
    ot_backend_free(r);
    ot_backend_free(c);
}

/* Every op on an integer operand, and on mixed dtypes: it builds (and then
 * evaluates on both backends) or is refused with OT_EDTYPE naming the op,
 * the dtype and the call. Never a crash. */
TEST(badinput_integer_operands_every_op)
{
    const char *names[] = {"ref", "cpu"};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(names[bi]);
        ot_tensor *xi = ot_array(be, OT_SHAPE(3, 3), OT_I32, (int32_t[]){0, 1, 2, 2, 1, 0, -1, 5, 7});
        ot_tensor *xf = ot_ones(be, OT_SHAPE(3, 3), OT_F64);
        ot_tensor *b3i = ot_reshape(xi, OT_SHAPE(1, 3, 3));
        ot_tensor *b3f = ot_reshape(xf, OT_SHAPE(1, 3, 3));
        for (int i = 0; i < NOPS; i++) {
            /* placeholders of registered ops build nothing: test_custom_op.c */
            if (ops[i].arity == 0 || (ot_op_flags(ops[i].op) & OT_FLAG_CUSTOM)) continue;
            for (int mix = 0; mix < 3; mix++) {
                if (mix && ops[i].arity == 1) break;
                ot_pool *p = ot_pool_push();
                ot_args a = good_args(ops[i].op);
                a.dtype = OT_DTYPE_DEFAULT;
                if (ops[i].op == OT_OP_CAST) a.dtype = OT_I32;
                ot_tensor *lhs = mix == 2 ? xf : xi, *rhs = mix == 1 ? xf : xi;
                if (ops[i].op == OT_OP_BATCHED_DOT) {
                    lhs = mix == 2 ? b3f : b3i;
                    rhs = mix == 1 ? b3f : b3i;
                }
                ot_node *x = ot_tensor_node(lhs);
                ot_node *y = ops[i].arity == 2 ? ot_tensor_node(rhs) : NULL;
                ot_clear_error();
                ot_node *n = ot_build_at(ops[i].op, x, y, &a, __FILE__, __LINE__); int l1 = __LINE__;
                if (!n) {
                    CHECK_ERR(OT_EDTYPE, ops[i].name, "int32", at(l1));
                } else {
                    ot_tensor *t = ot_eval(n);
                    /* the operand's values as indices: some are out of range */
                    bool refused = ot_errcode() == OT_EINVAL && strstr(ot_errmsg(), "out of range");
                    if (!t && !refused)
                        test__fail(__FILE__, __LINE__, "%s on %s: %s", ops[i].name, names[bi], ot_errmsg());
                    ot_tensor_free(t);
                }
                ot_pool_pop(p);
            }
        }
        ot_tensor_free(b3i);
        ot_tensor_free(b3f);
        ot_tensor_free(xi);
        ot_tensor_free(xf);
        ot_backend_free(be);
    }
}

/* Shapes that are each fine but whose result is too big to address. */
TEST(badinput_result_overflow)
{
    ot_backend *be = backend("cpu");
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    ot_node *col = ot_rand(OT_SHAPE(1LL << 31, 1));
    ot_node *row = ot_rand(OT_SHAPE(1, 1LL << 31));
    CHECK(col != NULL && row != NULL);
    CHECK(ot_add(col, row) == NULL); int l1 = __LINE__;
    CHECK_ERR(OT_EOVERFLOW, "add", "(2147483648,1)", "(1,2147483648)", at(l1));
    ot_node *b1 = ot_rand(OT_SHAPE(1LL << 21, 1LL << 21, 1));
    ot_node *b2 = ot_rand(OT_SHAPE(1LL << 21, 1, 1LL << 21));
    CHECK(b1 != NULL && b2 != NULL);
    CHECK(ot_batched_dot(b1, b2) == NULL); int l2 = __LINE__;
    CHECK_ERR(OT_EOVERFLOW, "batched_dot", "(2097152,2097152,1)", "(2097152,1,2097152)", at(l2));
    ot_tensor *one = ot_ones(be, OT_SHAPE(1), OT_I32);
    ot_tensor *wide = ot_broadcast_to(one, OT_SHAPE(1LL << 40));
    CHECK(wide != NULL);
    CHECK(ot_onehot(wide, .depth = 1LL << 40) == NULL); int l3 = __LINE__;
    CHECK_ERR(OT_EOVERFLOW, "onehot", at(l3));
    CHECK(ot_broadcast_to(one, OT_SHAPE(1LL << 62, 1LL << 62)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "broadcast_to");
#if !defined(__SANITIZE_ADDRESS__)
    /* Addressable in principle, but far beyond memory: OT_ENOMEM. */
    CHECK(ot_eval(ot_mul(ot_rand(OT_SHAPE(1LL << 30, 1LL << 30)), one)) == NULL);
    CHECK_ERR(OT_ENOMEM, "");
#endif
    ot_pool_pop(p);
    ot_tensor_free(wide);
    ot_tensor_free(one);
    ot_backend_free(be);
}

/* ---- pools -------------------------------------------------------------- */

TEST(badinput_pools)
{
    ot_clear_error();
    CHECK_INT(ot_pool_pop(NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "pool_pop");
    ot_pool *a = ot_pool_push();
    ot_pool *b = ot_pool_push();
    /* Popping the outer pool pops the inner too; then both are gone. */
    CHECK_INT(ot_pool_pop(a), 0);
    CHECK_INT(ot_pool_pop(b), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "pool_pop");
    CHECK_INT(ot_pool_pop(a), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "pool_pop");
    int on_stack;
    CHECK_INT(ot_pool_pop((ot_pool *)&on_stack), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "pool_pop");
    ot_pool_drain();
    ot_pool_drain();
}

/* ---- printing ----------------------------------------------------------- */

TEST(badinput_printing)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *n = ot_exp(x);
    int (*fns[])(const ot_node *, FILE *) = {ot_print, ot_pp, ot_graphviz, ot_explain};
    const char *names[] = {"print", "pp", "graphviz", "explain"};
    ot_clear_error();
    for (int i = 0; i < 4; i++) {
        CHECK_INT(fns[i](n, NULL), OT_ENULL);
        CHECK_ERR(OT_ENULL, names[i], "FILE");
        CHECK_INT(fns[i](NULL, stdout), OT_ENULL);
        CHECK_ERR(OT_ENULL, names[i]);
        CHECK_INT(fns[i](NULL, NULL), OT_ENULL);
        CHECK_ERR(OT_ENULL, names[i]);
    }
    /* A FILE that fails writes is OT_EIO. */
    FILE *ro = fopen("/dev/null", "r");
    if (ro) {
        for (int i = 0; i < 4; i++) {
            CHECK_INT(fns[i](n, ro), OT_EIO);
            CHECK_ERR(OT_EIO, names[i]);
            clearerr(ro);
        }
        CHECK_INT(ot_tensor_print(x, ro), OT_EIO);
        CHECK_ERR(OT_EIO, "tensor_print");
        fclose(ro);
    }
    /* The stack. */
    CHECK(ot_stack_new(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "stack");
    ot_stack_free(NULL);
    CHECK_INT(ot_stack_len(NULL), 0);
    CHECK(ot_stack_at(NULL, 0) == NULL);
    ot_stack *s = ot_stack_new(n);
    CHECK(s != NULL);
    CHECK(ot_stack_at(s, -1) == NULL);
    CHECK(ot_stack_at(s, ot_stack_len(s)) == NULL);
    CHECK(ot_stack_at(s, INT_MIN) == NULL);
    CHECK(ot_stack_at(s, INT_MAX) == NULL);
    CHECK_INT(ot_stack_print(s, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "FILE");
    CHECK_INT(ot_stack_print(NULL, stdout), OT_ENULL);
    CHECK_ERR(OT_ENULL, "");
    ot_stack_free(s);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- substitute --------------------------------------------------------- */

TEST(badinput_substitute)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *n = ot_exp(x);
    ot_clear_error();
    CHECK(ot_substitute(NULL, x, y) == NULL);
    CHECK_ERR(OT_ENULL, "substitute");
    CHECK(ot_substitute(n, NULL, x) == NULL);
    CHECK_ERR(OT_ENULL, "substitute");
    CHECK(ot_substitute(n, x, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "substitute");
    CHECK(ot_substitute(n, x, y) == NULL);
    CHECK_ERR(OT_ESHAPE, "substitute", "(3,)", "(4,)");
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* ---- autodiff ----------------------------------------------------------- */

TEST(badinput_autodiff)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *z = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *g = ot_empty(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *g5 = ot_empty(be, OT_SHAPE(5), OT_F32);
    ot_tensor *xi = ot_ones(be, OT_SHAPE(3, 4), OT_I32);
    ot_pool *p = ot_pool_push();
    ot_node *f = ot_mul(x, x);
    ot_clear_error();
    CHECK(ot_autodiff_new(NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "autodiff_new");
    CHECK(ot_autodiff_new(f, ot_tensor_node(g5)) == NULL);
    CHECK_ERR(OT_ESHAPE, "autodiff", "(3,4)", "(5,)");
    CHECK(ot_autodiff_new(ot_const(1.0), NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "autodiff");
    ot_autodiff_free(NULL);
    CHECK(ot_autodiff_grad(NULL, x) == NULL);
    CHECK_INT(ot_errcode(), OT_ENULL);
    ot_clear_error();
    CHECK_INT(ot_autodiff_backprop(NULL, 1, (ot_tensor *[]){x}, (ot_tensor *[]){g}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "autodiff_backprop");
    CHECK(ot_autodiff_grad_tensor(NULL, x) == NULL);
    CHECK_ERR(OT_ENULL, "autodiff_grad_tensor");
    float host[12];
    CHECK_INT(ot_autodiff_grad_host(NULL, x, host), OT_ENULL);
    CHECK_ERR(OT_ENULL, "");

    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    CHECK(ad != NULL);
    CHECK(ot_autodiff_grad(ad, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "autodiff_grad");
    CHECK_INT(ot_autodiff_backprop(ad, -1, (ot_tensor *[]){x}, (ot_tensor *[]){g}), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "-1");
    CHECK_INT(ot_autodiff_backprop(ad, 1, NULL, (ot_tensor *[]){g}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "wrt");
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "grads");
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){NULL}, (ot_tensor *[]){g}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "");
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, (ot_tensor *[]){NULL}), OT_ENULL);
    CHECK_ERR(OT_ENULL, "");
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, (ot_tensor *[]){g5}), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "(5,)", "(3,4)");
    CHECK_INT(ot_autodiff_backprop(ad, 0, NULL, NULL), 0);
    CHECK_INT(ot_autodiff_grad_host(ad, x, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "");
    /* wrt not in the tree: zeros. */
    CHECK_INT(ot_autodiff_grad_host(ad, z, host), 0);
    for (int i = 0; i < 12; i++) CHECK_NEAR(host[i], 0, 0);
    /* Gradient into the same tensor twice: overlapping outputs. */
    CHECK_INT(ot_autodiff_backprop(ad, 2, (ot_tensor *[]){x, z}, (ot_tensor *[]){g, g}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "");
    /* A gradient buffer of the wrong dtype. */
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, (ot_tensor *[]){xi}), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "float32", "int32");
    /* A read-only broadcast view as a gradient buffer. */
    ot_tensor *row = ot_slice(g, OT_IDX(0));
    ot_tensor *bg = ot_broadcast_to(row, OT_SHAPE(3, 4));
    CHECK_INT(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, (ot_tensor *[]){bg}), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0");
    ot_tensor_free(bg);
    ot_tensor_free(row);
    ot_autodiff_free(ad);
    /* next_error of another dtype. */
    ot_autodiff *adn = ot_autodiff_new(f, ot_tensor_node(xi));
    if (adn) {
        CHECK_INT(ot_autodiff_grad_host(adn, x, host), 0);
        CHECK_NEAR(host[0], 2, 0);
        ot_autodiff_free(adn);
    } else {
        CHECK_ERR(OT_EDTYPE, "autodiff", "int32");
    }

    /* A slice of x next to x itself adds into x's row 0; a broadcast view
     * of x0 has no gradient of its own (its elements alias). */
    ot_tensor *x0 = ot_slice(x, OT_IDX(0)), *b0 = ot_broadcast_to(x0, OT_SHAPE(2, 4));
    ot_autodiff *ads = ot_autodiff_new(ot_sum(ot_mul(x, x0)), NULL);
    CHECK(ads != NULL);
    CHECK_INT(ot_autodiff_grad_host(ads, x, host), 0);
    CHECK_NEAR(host[0], 4, 0);
    CHECK_NEAR(host[4], 1, 0);
    CHECK_INT(ot_autodiff_grad_host(ads, x0, host), 0);
    CHECK_NEAR(host[0], 4, 0);
    CHECK(ot_autodiff_grad(ads, b0) == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "autodiff_grad", "broadcast");
    ot_autodiff_free(ads);
    ot_tensor_free(b0);
    ot_tensor_free(x0);

    /* An integer tree: its gradient is zeros, of the integer dtype. */
    ot_autodiff *adi = ot_autodiff_new(ot_mul(xi, xi), NULL);
    CHECK(adi != NULL);
    int32_t ih[12];
    CHECK_INT(ot_autodiff_grad_host(adi, xi, ih), 0);
    for (int i = 0; i < 12; i++) CHECK_INT(ih[i], 0);
    ot_autodiff_free(adi);
    ot_pool_pop(p);
    ot_tensor *all[] = {x, z, g, g5, xi};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* ---- optimizers --------------------------------------------------------- */

TEST(badinput_optimizers)
{
    ot_backend *be = backend("cpu");
    ot_tensor *w = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *v = ot_zeros(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *m = ot_zeros(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *bad = ot_zeros(be, OT_SHAPE(4, 3), OT_F32);
    ot_tensor *wi = ot_zeros(be, OT_SHAPE(3, 4), OT_I32);
    ot_pool *p = ot_pool_push();
    ot_tensor *gt = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_node *g = ot_tensor_node(gt);
    ot_node *gbad = ot_tensor_node(bad);
    ot_sgd sgd = {.lr = 0.1, .momentum = 0.9};
    ot_adam adam = ot_adam_default(0.1);
    ot_clear_error();
    CHECK_INT(ot_sgd_step(NULL, 1, &w, &g, &v), OT_ENULL);
    CHECK_ERR(OT_ENULL, "sgd");
    CHECK_INT(ot_sgd_step(&sgd, 1, NULL, &g, &v), OT_ENULL);
    CHECK_ERR(OT_ENULL, "sgd");
    CHECK_INT(ot_sgd_step(&sgd, 1, &w, NULL, &v), OT_ENULL);
    CHECK_ERR(OT_ENULL, "sgd");
    CHECK_INT(ot_sgd_step(&sgd, 1, &w, &g, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "sgd", "vel", "momentum");
    CHECK_INT(ot_sgd_step(&sgd, -1, &w, &g, &v), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "sgd");
    CHECK_INT(ot_sgd_step(&sgd, 1, &w, &gbad, &v), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "sgd", "(4,3)", "(3,4)");
    CHECK_INT(ot_sgd_step(&sgd, 1, &w, &g, &bad), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "sgd", "(4,3)", "(3,4)");
    CHECK_INT(ot_sgd_step(&sgd, 1, &wi, &g, &v), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "sgd");
    CHECK_INT(ot_sgd_step(&(ot_sgd){.lr = NAN}, 1, &w, &g, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "sgd");
    CHECK_INT(ot_adam_step(NULL, 1, &w, &g, &m, &v), OT_ENULL);
    CHECK_ERR(OT_ENULL, "adam");
    CHECK_INT(ot_adam_step(&adam, 1, &w, &g, &m, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "adam");
    CHECK_INT(ot_adam_step(&adam, INT_MIN, &w, &g, &m, &v), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "adam");
    CHECK_INT(ot_adam_step(&adam, 1, &w, &gbad, &m, &v), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "adam", "(4,3)", "(3,4)");
    CHECK_INT(ot_adam_step(&adam, 1, &w, &g, &bad, &v), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "adam", "(4,3)", "(3,4)");
    ot_adam a0 = adam;
    a0.t = -1;   /* 0 means 1 */
    CHECK_INT(ot_adam_step(&a0, 1, &w, &g, &m, &v), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "adam");
    double scale;
    CHECK_INT(ot_clip_global_norm(1, &g, 1.0, NULL, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "clip_global_norm");
    CHECK_INT(ot_clip_global_norm(1, NULL, 1.0, &scale, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "clip_global_norm");
    CHECK_INT(ot_clip_global_norm(-1, &g, 1.0, &scale, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "clip_global_norm");
    CHECK_INT(ot_clip_global_norm(1, &g, 0.0, &scale, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "clip_global_norm");
    CHECK_INT(ot_clip_global_norm(1, &g, NAN, &scale, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "clip_global_norm");
    /* A state tensor that is also the parameter: overlapping outputs. */
    CHECK_INT(ot_sgd_step(&sgd, 1, &w, &g, &w), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "test_badinput.c:", "sgd_step: ", "overlap");
    CHECK_INT(ot_adam_step(&adam, 1, &w, &g, &m, &m), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "test_badinput.c:", "adam_step: ", "overlap");
    /* The caller's file:line in every error of the steps (the macros'),
     * none from the functions themselves. */
    CHECK_INT(ot_sgd_step(&sgd, 1, &w, &gbad, &v), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "test_badinput.c:");
    CHECK_INT(ot_clip_global_norm(1, &g, 0.0, &scale, NULL), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "test_badinput.c:");
    CHECK_INT((ot_adam_step)(&adam, 1, &w, &gbad, &m, &v), OT_ESHAPE);
    CHECK(strstr(ot_errmsg(), "test_badinput.c") == NULL);
    /* the _at functions take the place they are given */
    CHECK_INT(ot_sgd_step_at(&sgd, 1, &w, &gbad, &v, "given.c", 7), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "given.c:7: sgd_step");
    CHECK_INT(ot_adam_step_at(&adam, 1, &w, &gbad, &m, &v, "given.c", 8), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "given.c:8: adam_step");
    CHECK_INT(ot_clip_global_norm_at(1, &g, 0.0, &scale, NULL, "given.c", 9), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "given.c:9: clip_global_norm");
    CHECK_INT(ot_adam_step(&adam, 1, &w, &g, &m, (ot_tensor *[]){wi}), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "adam");
    CHECK_INT(ot_clip_global_norm(2, (ot_node *[]){g, NULL}, 1.0, &scale, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "clip_global_norm", "g[1]");
    /* Nothing was written. */
    float h[12];
    ot_get(w, h);
    for (int i = 0; i < 12; i++) CHECK_NEAR(h[i], 1, 0);
    ot_pool_pop(p);
    ot_tensor *all[] = {w, v, m, bad, wi, gt};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* ---- backends and environment overrides -------------------------------- */

TEST(badinput_backend_new)
{
    unsetenv("OT_BACKEND");
    ot_clear_error();
    ot_backend_free(ot_backend_new(NULL, NULL));   /* the default, "ref" */
    const char *names[] = {"", "bogus", "CPU", "cpu ", "ref\n"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        CHECK(ot_backend_new(names[i], NULL) == NULL);
        CHECK_ERR(OT_EBACKEND, "backend_new");
    }
    const ot_backend_opts bad[] = {
        {.threads = -1}, {.threads = INT_MIN}, {.dtype = (ot_dtype)99},
        {.accuracy = 7}, {.accuracy = -1}, {.plan_cache = -1}, {.fusion = 9},
        {.fusion = -1},
    };
    for (int k = 0; k < 2; k++)
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            CHECK(ot_backend_new(k ? "cpu" : "ref", &bad[i]) == NULL);
            CHECK_ERR(OT_EINVAL, "backend_new");
        }
    setenv("OT_BACKEND", "bogus", 1);
    CHECK(ot_backend_new("cpu", NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "bogus");
    unsetenv("OT_BACKEND");
}

/* Environment overrides with bad values are errors, not silent defaults. */
TEST(badinput_env_overrides)
{
    unsetenv("OT_BACKEND");
    struct { const char *var, *val; } rows[] = {
        {"OT_ISA", "bogus"}, {"OT_ISA", "AVX2"}, {"OT_FUSION", "abc"}, {"OT_JIT", "x"}, {"OT_FUSION", "2"}, {"OT_JIT", "00"},
        {"OT_STREAM_BYTES", "-1"}, {"OT_STREAM_BYTES", "abc"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
        setenv(rows[i].var, rows[i].val, 1);
        ot_clear_error();
        ot_backend *be = ot_backend_new("cpu", NULL);
        if (be) {
            test__fail(__FILE__, __LINE__, "%s=%s accepted", rows[i].var, rows[i].val);
            ot_backend_free(be);
        } else {
            CHECK_ERR(OT_EINVAL, "backend_new", rows[i].var);
        }
        unsetenv(rows[i].var);
    }
}

/* Every function that does work and returns a status clears the slot when
 * it succeeds (the header's rule), so an old error never leaks into a later
 * check. */
static void stale_error(void)
{
    ot_clear_error();
    (void)ot_build_at(OT_OP_ADD, NULL, NULL, NULL, "stale.c", 1);
}
#define CLEARS(call)                                                          \
    do {                                                                      \
        stale_error();                                                        \
        int rc_ = (call);                                                     \
        if (rc_ != 0 || ot_errcode() != 0)                                    \
            test__fail(__FILE__, __LINE__, "%s: rc %d, slot %d \"%s\"", #call, \
                       rc_, ot_errcode(), ot_errmsg());                       \
    } while (0)

TEST(badinput_work_functions_clear_slot)
{
    ot_backend *be = backend("cpu");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *m = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_tensor *v = ot_zeros(be, OT_SHAPE(3), OT_F32);
    FILE *null = fopen("/dev/null", "w");
    CHECK(null != NULL);
    if (!null) return;
    float host[3];
    ot_pool *p = ot_pool_push();
    ot_node *f = ot_sum(ot_mul(x, y));
    ot_node *gx = ot_tensor_node(y);
    CLEARS(ot_fill(x, 1));
    CLEARS(ot_get(x, host));
    CLEARS(ot_set(x, host));
    CLEARS(ot_tensor_print(x, null));
    CLEARS(ot_tensor_set_name(x, "x"));
    CLEARS(ot_assign(y, ot_neg(x)));
    CLEARS(ot_assign_many(1, (ot_tensor *[]){y}, (ot_node *[]){ot_neg(x)}));
    CLEARS(ot_assign_many(0, NULL, NULL));
    CLEARS(ot_explain(f, null));
    CLEARS(ot_explain_many(1, (ot_tensor *[]){y}, (ot_node *[]){ot_neg(x)}, null));
    CLEARS(ot_print(f, null));
    CLEARS(ot_pp(f, null));
    CLEARS(ot_graphviz(f, null));
    ot_stack *s = ot_stack_new(f);
    CLEARS(ot_stack_print(s, null));
    ot_stack_free(s);
    /* Reading counters and popping pools are housekeeping: they keep the
     * slot, so an expression's error survives the pop of its pool. */
    ot_stats st;
    stale_error();
    CHECK_INT(ot_stats_get(be, &st), 0);
    CHECK_ERR(OT_ENULL, "stale.c:1:", "add");
    ot_pool *inner = ot_pool_push();
    stale_error();
    CHECK_INT(ot_pool_pop(inner), 0);
    CHECK_ERR(OT_ENULL, "stale.c:1:", "add");
    stale_error();
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    CHECK(ad != NULL);
    CHECK_INT(ot_errcode(), 0);
    CLEARS(ot_autodiff_backprop(ad, 1, (ot_tensor *[]){x}, (ot_tensor *[]){m}));
    CLEARS(ot_autodiff_grad_host(ad, x, host));
    ot_autodiff_free(ad);
    CLEARS(ot_sgd_step(&(ot_sgd){.lr = 0.1}, 1, &x, &gx, NULL));
    ot_adam adam = ot_adam_default(0.1);
    CLEARS(ot_adam_step(&adam, 1, &x, &gx, &m, &v));
    double scale;
    CLEARS(ot_clip_global_norm(1, &gx, 1.0, &scale, NULL));
    ot_pool_pop(p);
    fclose(null);
    ot_tensor *all[] = {x, y, m, v};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* Ops that add a dim, and operands at OT_MAX_DIMS. */
TEST(badinput_max_dims)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 2), OT_I32);
    ot_tensor *ro = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *bro = ot_broadcast_to(ro, OT_SHAPE(2, 3));
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    CHECK(ot_onehot(x, .depth = 2) == NULL); int l1 = __LINE__;
    CHECK_ERR(OT_EINVAL, "onehot", "9", "(1,1,1,1,1,1,1,2)", at(l1));
    CHECK(ot_sum(x, .axis = 8) == NULL); int l2 = __LINE__;
    CHECK_ERR(OT_EINVAL, "sum", "axis 8", at(l2));
    CHECK(ot_sum(x, .axis = -9) == NULL); int l3 = __LINE__;
    CHECK_ERR(OT_EINVAL, "sum", "axis -9", at(l3));
    CHECK(ot_sum(x, .axis = -8) != NULL);
    CHECK_INT(ot_errcode(), 0);
    /* A broadcast view as an optimizer's parameter is read-only too. */
    ot_node *g = ot_tensor_node(bro);
    CHECK_INT(ot_sgd_step(&(ot_sgd){.lr = 0.1}, 1, &bro, &g, NULL), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0");
    ot_pool_pop(p);
    ot_tensor_free(bro);
    ot_tensor_free(ro);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* The plain builder with the wrong number of operands, and with NULL args
 * (bindings may pass either): an error or a node, never a crash. */
static int handler_calls;
static void count_handler(int code, const char *msg, void *user)
{
    (void)code;
    (void)msg;
    (void)user;
    handler_calls++;
}

TEST(badinput_builder_arity_and_args)
{
    ot_backend *be = backend("ref");
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_node *xn = ot_tensor_node(x);
    ot_pool *p = ot_pool_push();
    for (int i = 0; i < NOPS; i++) {
        ot_clear_error();
        ot_args a = good_args(ops[i].op);
        if (ops[i].arity < 2) {
            CHECK(ot_build_at(ops[i].op, xn, xn, &a, "b.c", 7) == NULL);
            CHECK_ERR(OT_EINVAL, "b.c:7:", ops[i].name, "operand");
        }
        if (ops[i].arity == 0) {
            CHECK(ot_build_at(ops[i].op, xn, NULL, &a, "b.c", 8) == NULL);
            CHECK_ERR(OT_EINVAL, "b.c:8:", ops[i].name, "operand");
        }
        ot_node *n = ot_build_at(ops[i].op, ops[i].arity ? xn : NULL,
                                 ops[i].arity == 2 ? xn : NULL, NULL, "b.c", 9);
        if (!n) {
            CHECK(ot_errcode() < 0);
            CHECK(strstr(ot_errmsg(), "b.c:9:") != NULL);
            CHECK(strstr(ot_errmsg(), ops[i].name) != NULL);
        }
    }
    /* The handler sees each recorded error once; NULL removes it. */
    ot_clear_error();
    handler_calls = 0;
    ot_set_error_handler(count_handler, NULL);
    ot_node *nn = NULL;
    CHECK(ot_neg(ot_exp(ot_add(x, nn))) == NULL);
    CHECK_INT(handler_calls, 1);
    ot_clear_error();
    CHECK_INT(ot_fill(NULL, 0), OT_ENULL);
    CHECK_INT(handler_calls, 2);
    ot_set_error_handler(NULL, NULL);
    CHECK_INT(ot_fill(NULL, 0), OT_ENULL);
    CHECK_INT(handler_calls, 2);
    ot_clear_error();
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* Outputs that alias the tree's leaves in a different layout: the result
 * is as if the tree were evaluated before out is written (the header's
 * contract), on every backend. */
TEST(badinput_aliasing_outputs_as_if)
{
    const char *names[] = {"ref", "cpu"};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = backend(names[bi]);
        float v[9] = {0, 1, 2, 3, 4, 5, 6, 7, 8}, got[9];
        ot_tensor *x = ot_array(be, OT_SHAPE(3, 3), OT_F32, v);
        ot_tensor *xt = ot_transpose(x, NULL);
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign(xt, ot_add(x, 1.0f)), 0);
        CHECK_INT(ot_get(x, got), 0);
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++) CHECK_NEAR(got[i * 3 + j], v[j * 3 + i] + 1, 0);
        /* A shifted 1-D slice: y[1:] = 2 * y[:-1]. */
        ot_tensor *y = ot_array(be, OT_SHAPE(9), OT_F32, v);
        ot_tensor *hi = ot_slice(y, OT_RANGE(1, 9));
        ot_tensor *lo = ot_slice(y, OT_RANGE(0, 8));
        CHECK_INT(ot_assign(hi, ot_mul(lo, 2.0f)), 0);
        CHECK_INT(ot_get(y, got), 0);
        CHECK_NEAR(got[0], 0, 0);
        for (int i = 1; i < 9; i++) CHECK_NEAR(got[i], 2 * v[i - 1], 0);
        /* A reversed view: y[::-1] = y + 0. */
        ot_tensor *rev = ot_slice(y, OT_RANGE(OT_NONE, OT_NONE, -1));
        float before[9];
        ot_get(y, before);
        CHECK_INT(ot_assign(rev, ot_add(y, 0.0f)), 0);
        CHECK_INT(ot_get(y, got), 0);
        for (int i = 0; i < 9; i++) CHECK_NEAR(got[i], before[8 - i], 0);
        /* A batched_dot into the very view it reads (BLAS has no aliasing
         * contract, so the library must copy or order the work). */
        ot_tensor *a = ot_array(be, OT_SHAPE(2, 2, 2), OT_F32, (float[]){1, 2, 3, 4, 5, 6, 7, 8});
        ot_tensor *a1 = ot_slice(a, OT_RANGE(1, 2));
        ot_tensor *a1c = ot_copy(a1);
        ot_tensor *want = ot_eval(ot_batched_dot(a1c, a1c));
        CHECK_INT(ot_assign(a1, ot_batched_dot(a1, a1)), 0);
        float g4[4], e4[4];
        ot_get(a1, g4);
        ot_get(want, e4);
        for (int i = 0; i < 4; i++) CHECK_NEAR(g4[i], e4[i], 0);
        /* and a dot into the transpose of its operand */
        ot_tensor *m = ot_array(be, OT_SHAPE(2, 2), OT_F32, (float[]){1, 2, 3, 4});
        ot_tensor *mt = ot_transpose(m, NULL);
        ot_tensor *mc = ot_copy(m);
        ot_tensor *want2 = ot_eval(ot_dot(mc, mc));
        CHECK_INT(ot_assign(mt, ot_dot(m, m)), 0);
        ot_get(m, g4);
        ot_get(want2, e4);
        CHECK_NEAR(g4[0], e4[0], 0);
        CHECK_NEAR(g4[1], e4[2], 0);
        CHECK_NEAR(g4[2], e4[1], 0);
        CHECK_NEAR(g4[3], e4[3], 0);
        ot_pool_pop(p);
        ot_tensor *all[] = {x, xt, y, hi, lo, rev, a, a1, a1c, want, m, mt, mc, want2};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
        ot_backend_free(be);
    }
}

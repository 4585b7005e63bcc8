/*
 * test_errors.c - every bad input of STYLE.md's table that issue 2 covers:
 * the return value (NULL or a status), the code in the error slot, and the
 * message text (op name, shapes or dtypes, and for builders the file:line
 * of the call in this file). Also the first-error-wins propagation rule and
 * the error handler.
 *
 * Expected "file:line" prefixes are built with __LINE__ on the same line as
 * the builder call they describe.
 */
#include "test.h"
#include "internal.h"   /* ot__alloc_fail_at, the allocation seam */

#include <stdlib.h>

/* "tests/test_errors.c:<line>" for a call on that line. */
static const char *at(int line)
{
    static char buf[8][128];
    static int k;
    char *b = buf[k++ % 8];
    snprintf(b, sizeof buf[0], "%s:%d:", __FILE__, line);
    return b;
}

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

/* ---- the slot itself ----------------------------------------------------- */

TEST(errors_slot_clear)
{
    ot_clear_error();
    CHECK_INT(ot_errcode(), 0);
    CHECK_STR(ot_errmsg(), "");
    for (int c = OT_EINTERNAL; c <= 0; c++) {
        CHECK(ot_strerror(c) != NULL);
        CHECK(strlen(ot_strerror(c)) > 0);
    }
    CHECK(ot_strerror(1) != NULL);
    CHECK(ot_strerror(-1000) != NULL);
}

/* The library's version at run time is the header's (tools/test.sh's
 * library phase checks that the SONAME carries its major number). */
TEST(errors_version_matches_header)
{
    CHECK_STR(ot_version(), OT_VERSION);
    int major, minor, patch;
    CHECK_INT(sscanf(ot_version(), "%d.%d.%d", &major, &minor, &patch), 3);
}

/* ---- NULL ---------------------------------------------------------------- */

TEST(errors_null_operand)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_node *nul = NULL;
    ot_tensor *tnul = NULL;
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_node *n = ot_add(x, nul); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ENULL, "add", "NULL", at(l1));

    n = ot_mul(nul, x); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ENULL, "mul", "NULL", at(l2));

    n = ot_exp(tnul); int l3 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ENULL, "exp", "NULL", at(l3));

    n = ot_sum(nul, .axis = 0); int l4 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ENULL, "sum", "NULL", at(l4));

    /* A NULL flowing up keeps the first message. */
    n = ot_neg(ot_tanh(ot_sub(x, nul))); int l5 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ENULL, "sub", "NULL", at(l5));
    ot_neg(ot_tanh(ot_sub(x, nul)));
    CHECK(strstr(ot_errmsg(), "tanh") == NULL);
    CHECK(strstr(ot_errmsg(), "neg:") == NULL);
    ot_clear_error();

    /* A binary op missing its second operand through the plain builder. */
    n = ot_build_at(OT_OP_ADD, ot_tensor_node(x), NULL, NULL, "bind.py", 3);
    CHECK(n == NULL);
    CHECK_ERR(OT_ENULL, "bind.py:3:", "add", "NULL");

    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(errors_assign_null)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *onul = NULL;
    ot_node *nul = NULL;
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    CHECK_INT(ot_assign(onul, ot_neg(x)), OT_ENULL);
    CHECK_ERR(OT_ENULL, "NULL");

    /* A NULL output is OT_ENULL even when an older error sits in the slot
     * (only a NULL tree reports the slot's code). */
    ot_tensor *four = ot_ones(be, OT_SHAPE(4), OT_F32);
    CHECK(ot_mul(x, four) == NULL);
    ot_tensor_free(four);
    CHECK_INT(ot_errcode(), OT_ESHAPE);
    CHECK_INT(ot_assign(onul, ot_neg(x)), OT_ENULL);
    CHECK_ERR(OT_ENULL, "NULL");

    /* A NULL tree with a clear slot is OT_ENULL too. */
    CHECK_INT(ot_assign(x, nul), OT_ENULL);
    CHECK_ERR(OT_ENULL, "NULL");

    CHECK_INT(ot_assign_node(x, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "NULL");

    CHECK(ot_eval(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "NULL");

    /* ot_assign on good arguments clears an old error first. */
    (void)ot_add(x, nul);
    CHECK(ot_errcode() == OT_ENULL);
    CHECK_INT(ot_assign(x, ot_neg(x)), 0);
    CHECK_INT(ot_errcode(), 0);
    CHECK_STR(ot_errmsg(), "");

    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- shapes -------------------------------------------------------------- */

TEST(errors_broadcast)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = ot_ones(be, OT_SHAPE(5, 4), OT_F32);
    ot_tensor *c = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *d = ot_ones(be, OT_SHAPE(4), OT_F64);
    ot_pool *p = ot_pool_push();
    char want[256];

    ot_clear_error();
    ot_node *n = ot_mul(a, b); int l1 = __LINE__;
    CHECK(n == NULL);
    snprintf(want, sizeof want,
             "%s:%d: mul: shapes (3,4) and (5,4) cannot be broadcast (dim 0: 3 vs 5)",
             __FILE__, l1);
    CHECK_ERR(OT_ESHAPE, want);

    n = ot_add(c, d); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ESHAPE, at(l2), "add", "(2,3)", "(4,)", "3 vs 4");

    n = ot_maximum(d, c); int l3 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ESHAPE, at(l3), "maximum", "(4,)", "(2,3)");

    /* Good broadcasts record nothing. */
    CHECK(ot_add(a, d) != NULL);
    CHECK(ot_add(c, 1.0) != NULL);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(a); ot_tensor_free(b); ot_tensor_free(c); ot_tensor_free(d);
    ot_backend_free(be);
}

TEST(errors_propagation)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *bad = ot_ones(be, OT_SHAPE(5, 4), OT_F32);
    ot_tensor *c = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3, 4), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_node *n = ot_add(ot_mul(a, bad), c); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_INT(ot_errcode(), OT_ESHAPE);
    CHECK(strstr(ot_errmsg(), "mul: shapes (3,4) and (5,4)") != NULL);
    CHECK(strstr(ot_errmsg(), at(l1)) != NULL);
    CHECK(strstr(ot_errmsg(), "add") == NULL);
    CHECK_INT(ot_assign(out, n), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, at(l1), "mul: shapes (3,4) and (5,4) cannot be broadcast");

    /* The whole expression at once, as the header suggests. */
    CHECK_INT(ot_assign(out, ot_sqrt(ot_add(ot_mul(a, bad), c))), OT_ESHAPE);
    int l2 = __LINE__ - 1;
    CHECK_ERR(OT_ESHAPE, at(l2), "mul", "(3,4)", "(5,4)");

    /* A second, different error later in the same expression does not
     * replace the first (sequenced: argument order is unspecified in C). */
    ot_node *m = ot_mul(a, bad); int l3 = __LINE__;
    ot_node *s = ot_sum(c, .axis = 7);
    n = ot_add(m, s);
    CHECK(m == NULL && s == NULL && n == NULL);
    CHECK_ERR(OT_ESHAPE, at(l3), "mul");

    /* Errors found by shape validation inside builders (rand's shape,
     * onehot's result) do not replace an earlier error either. */
    m = ot_mul(a, bad); int l4 = __LINE__;
    ot_tensor *idx = ot_zeros(ot_tensor_backend(a), OT_SHAPE(3), OT_I32);
    ot_node *r = ot_rand(OT_SHAPE(3, -4));
    ot_node *o = ot_onehot(idx, .depth = 1LL << 62);
    CHECK(m == NULL && r == NULL && o == NULL);
    CHECK_ERR(OT_ESHAPE, at(l4), "mul: shapes (3,4) and (5,4)");
    ot_tensor_free(idx);

    /* out is untouched by a failed assign. */
    float host[12];
    CHECK_INT(ot_get(out, host), 0);
    for (int i = 0; i < 12; i++) CHECK(host[i] == 0.0f);

    ot_pool_pop(p);
    ot_tensor_free(a); ot_tensor_free(bad); ot_tensor_free(c); ot_tensor_free(out);
    ot_backend_free(be);
}

TEST(errors_dot)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = ot_ones(be, OT_SHAPE(5, 2), OT_F32);
    ot_tensor *v = ot_ones(be, OT_SHAPE(5), OT_F32);
    ot_tensor *t3 = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_tensor *m = ot_ones(be, OT_SHAPE(4, 2), OT_F32);
    ot_tensor *i1 = ot_ones(be, OT_SHAPE(3, 4), OT_I32);
    ot_tensor *i2 = ot_ones(be, OT_SHAPE(4, 2), OT_I32);
    ot_pool *p = ot_pool_push();
    char want[256];

    ot_clear_error();
    ot_node *n = ot_dot(a, b); int l1 = __LINE__;
    CHECK(n == NULL);
    snprintf(want, sizeof want,
             "%s:%d: dot: shapes (3,4) and (5,2) not aligned: 4 (dim 1) != 5 (dim 0)",
             __FILE__, l1);
    CHECK_ERR(OT_ESHAPE, want);

    n = ot_dot(a, v); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_ESHAPE, at(l2), "dot", "(3,4)", "(5,)", "not aligned");

    n = ot_dot(t3, m); int l3 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l3), "dot", "(2,3,4)");

    n = ot_dot(i1, i2); int l4 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EDTYPE, at(l4), "dot", "int32");

    /* A good dot records nothing. */
    CHECK(ot_dot(a, m) != NULL);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(a); ot_tensor_free(b); ot_tensor_free(v); ot_tensor_free(t3);
    ot_tensor_free(m); ot_tensor_free(i1); ot_tensor_free(i2);
    ot_backend_free(be);
}

TEST(errors_bad_axis)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *s = ot_ones(be, OT_SHAPE(), OT_F32);
    ot_pool *p = ot_pool_push();
    char want[256];

    ot_clear_error();
    ot_node *n = ot_sum(x, .axis = 2); int l1 = __LINE__;
    CHECK(n == NULL);
    snprintf(want, sizeof want,
             "%s:%d: sum: axis 2 is out of bounds for tensor of dimension 2", __FILE__, l1);
    CHECK_ERR(OT_EINVAL, want);

    n = ot_max(x, .axis = -3); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l2), "max: axis -3 is out of bounds for tensor of dimension 2");

    n = ot_mean(s, .axis = 0); int l3 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l3), "mean: axis 0 is out of bounds for tensor of dimension 0");

    n = ot_argmax(x, .axis = 5, .keepdims = true); int l4 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l4), "argmax", "axis 5");

    n = ot_softmax(x, .axis = 2); int l5 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l5), "softmax", "axis 2");

    /* Through the plain builder, as a binding calls it. */
    n = ot_build_at(OT_OP_MIN, ot_tensor_node(x), NULL, &(ot_args){.axis = 9}, "b.py", 12);
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, "b.py:12:", "min", "axis 9");

    /* In range, negative included: fine. */
    CHECK(ot_sum(x, .axis = -2) != NULL);
    CHECK(ot_sum(x, .axis = 1) != NULL);
    CHECK(ot_sum(s) != NULL);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(x); ot_tensor_free(s);
    ot_backend_free(be);
}

/* ---- creation: dims, negative dims, overflow ------------------------------ */

TEST(errors_too_many_dims)
{
    ot_backend *be = ref();
    ot_clear_error();
    ot_tensor *t = ot_empty(be, OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1), OT_F32);
    CHECK(t == NULL);
    CHECK_ERR(OT_EINVAL, "9", "8");

    t = ot_zeros(be, OT_SHAPE(2, 1, 1, 1, 1, 1, 1, 1, 1, 2), OT_F64);
    CHECK(t == NULL);
    CHECK_ERR(OT_EINVAL, "10", "8");

    /* Exactly 8 is fine. */
    t = ot_empty(be, OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 2), OT_F32);
    CHECK(t != NULL);
    CHECK_INT(ot_errcode(), 0);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(errors_negative_dim)
{
    ot_backend *be = ref();
    ot_clear_error();
    ot_tensor *t = ot_empty(be, OT_SHAPE(3, -2), OT_F32);
    CHECK(t == NULL);
    CHECK_ERR(OT_EINVAL, "negative dimension -2 at axis 1");

    t = ot_full(be, OT_SHAPE(-1), OT_I32, 1.0);
    CHECK(t == NULL);
    CHECK_ERR(OT_EINVAL, "negative dimension -1 at axis 0");

    /* A negative rand shape, through the builder. */
    ot_pool *p = ot_pool_push();
    ot_node *n = ot_rand(OT_SHAPE(2, -5)); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l1), "rand", "negative dimension -5 at axis 1");
    ot_pool_pop(p);
    ot_backend_free(be);
}

TEST(errors_size_overflow)
{
    ot_backend *be = ref();
    ot_clear_error();
    ot_tensor *t = ot_empty(be, OT_SHAPE(1LL << 40, 1LL << 40), OT_F32);
    CHECK(t == NULL);
    CHECK_ERR(OT_EOVERFLOW, "(1099511627776,1099511627776)");

    /* numel fits in int64 but the byte size does not fit in ptrdiff_t. */
    t = ot_zeros(be, OT_SHAPE(1LL << 31, 1LL << 31), OT_F64);
    CHECK(t == NULL);
    CHECK_ERR(OT_EOVERFLOW, "(2147483648,2147483648)");

    /* Overflow of a broadcast result or a rand shape at build time. */
    ot_pool *p = ot_pool_push();
    ot_node *n = ot_rand(OT_SHAPE(1LL << 40, 1LL << 40)); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EOVERFLOW, at(l1), "rand");
    ot_pool_pop(p);
    ot_backend_free(be);
}

/* ---- assignment ---------------------------------------------------------- */

TEST(errors_output_shape)
{
    ot_backend *be = ref();
    ot_tensor *out = ot_zeros(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *x = ot_ones(be, OT_SHAPE(3, 2), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(4, 3), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    CHECK_INT(ot_assign(out, ot_neg(x)), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "assign", "(2,3)", "(3,2)");

    CHECK_INT(ot_assign(out, x), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "assign", "(2,3)", "(3,2)");

    /* A tree that would broadcast to a bigger shape cannot shrink into out. */
    CHECK_INT(ot_assign(out, ot_exp(y)), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "assign", "(2,3)", "(4,3)");

    /* ot_assign_many checks every pair. */
    ot_tensor *outs[2] = {out, out};
    ot_tensor *o2 = ot_zeros(be, OT_SHAPE(3, 2), OT_F32);
    outs[1] = o2;
    ot_node *trees[2] = {ot_neg(x), ot_neg(x)};
    CHECK_INT(ot_assign_many(2, outs, trees), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "(2,3)", "(3,2)");

    /* A tree that broadcasts up to out is fine. */
    ot_tensor *row = ot_ones(be, OT_SHAPE(3), OT_F32);
    CHECK_INT(ot_assign(out, ot_neg(row)), 0);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(out); ot_tensor_free(x); ot_tensor_free(y);
    ot_tensor_free(o2); ot_tensor_free(row);
    ot_backend_free(be);
}

TEST(errors_broadcast_view_write)
{
    ot_backend *be = ref();
    ot_tensor *row = ot_ones(be, OT_SHAPE(1, 3), OT_F32);
    ot_tensor *src = ot_full(be, OT_SHAPE(2, 3), OT_F32, 5.0);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_tensor *bv = ot_broadcast_to(row, OT_SHAPE(2, 3));
    CHECK(bv != NULL);
    CHECK_INT(ot_tensor_stride(bv, 0), 0);
    CHECK_INT(ot_assign(bv, src), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0");
    CHECK_INT(ot_assign(bv, ot_mul(src, 2.0)), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0", "dim 0");

    /* Broadcast along a later dim: the message names that dim. */
    ot_tensor *col = ot_ones(be, OT_SHAPE(2, 1), OT_F32);
    ot_tensor *cv = ot_broadcast_to(col, OT_SHAPE(2, 3));
    CHECK(cv != NULL);
    CHECK_INT(ot_assign(cv, src), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, "stride 0 at dim 1");
    ot_tensor_free(cv);
    ot_tensor_free(col);

    /* The row itself is unchanged, and still writable. */
    float h[3];
    CHECK_INT(ot_get(row, h), 0);
    CHECK(h[0] == 1.0f && h[1] == 1.0f && h[2] == 1.0f);
    CHECK_INT(ot_assign(row, 2.0f), 0);

    /* Reading a broadcast view is fine. */
    ot_tensor *o = ot_zeros(be, OT_SHAPE(2, 3), OT_F32);
    CHECK_INT(ot_assign(o, ot_add(bv, src)), 0);
    float g[6];
    CHECK_INT(ot_get(o, g), 0);
    for (int i = 0; i < 6; i++) CHECK_NEAR(g[i], 7.0, 0);

    ot_pool_pop(p);
    ot_tensor_free(bv); ot_tensor_free(row); ot_tensor_free(src); ot_tensor_free(o);
    ot_backend_free(be);
}

/* ---- empty reductions ---------------------------------------------------- */

/* max/min/argmax/argmin over zero elements: OT_EEMPTY, reported either by
 * the builder (NULL) or at the latest by ot_assign, with the op's name,
 * "zero-size" and the builder's file:line. */
static void check_empty(ot_tensor *out, ot_node *n, const char *op, int line)
{
    int rc = ot_assign(out, n);
    if (rc != OT_EEMPTY)
        test__fail(__FILE__, line, "%s over zero elements: assign gave %d, expected %d (%s)",
                   op, rc, OT_EEMPTY, ot_errmsg());
    test__check_err(__FILE__, line, OT_EEMPTY,
                    (const char *[]){op, "zero-size", at(line), NULL});
}

TEST(errors_empty_reductions)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_zeros(be, OT_SHAPE(0, 3), OT_F32);
    ot_tensor *o3 = ot_full(be, OT_SHAPE(3), OT_F32, 7.0);
    ot_tensor *o3i = ot_full(be, OT_SHAPE(3), OT_I32, 7.0);
    ot_tensor *o0 = ot_full(be, OT_SHAPE(), OT_F32, 7.0);
    ot_tensor *o0i = ot_full(be, OT_SHAPE(), OT_I32, 7.0);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    check_empty(o3, ot_max(x, .axis = 0), "max", __LINE__);
    check_empty(o3, ot_min(x, .axis = -2), "min", __LINE__);
    check_empty(o3i, ot_argmax(x, .axis = 0), "argmax", __LINE__);
    check_empty(o3i, ot_argmin(x, .axis = 0), "argmin", __LINE__);
    check_empty(o0, ot_max(x), "max", __LINE__);
    check_empty(o0i, ot_argmin(x), "argmin", __LINE__);

    /* Reducing the non-empty axis of an empty tensor is fine: (0,). */
    ot_tensor *e = ot_zeros(be, OT_SHAPE(0), OT_F32);
    CHECK_INT(ot_assign(e, ot_max(x, .axis = 1)), 0);

    /* sum has an identity: 0; mean of nothing is NaN. */
    float h[3];
    CHECK_INT(ot_assign(o3, ot_sum(x, .axis = 0)), 0);
    CHECK_INT(ot_get(o3, h), 0);
    for (int i = 0; i < 3; i++) CHECK(h[i] == 0.0f);
    CHECK_INT(ot_assign(o0, ot_sum(x)), 0);
    CHECK_INT(ot_get(o0, h), 0);
    CHECK(h[0] == 0.0f);
    CHECK_INT(ot_assign(o3, ot_mean(x, .axis = 0)), 0);
    CHECK_INT(ot_get(o3, h), 0);
    for (int i = 0; i < 3; i++) CHECK(isnan(h[i]));
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(x); ot_tensor_free(o3); ot_tensor_free(o3i); ot_tensor_free(o0);
    ot_tensor_free(o0i); ot_tensor_free(e);
    ot_backend_free(be);
}

/* ---- dtypes and op options ----------------------------------------------- */

TEST(errors_dtype_assign)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_full(be, OT_SHAPE(3), OT_F32, 2.75);
    ot_tensor *d = ot_full(be, OT_SHAPE(3), OT_F64, -1.5);
    ot_tensor *oi = ot_full(be, OT_SHAPE(3), OT_I32, 9.0);
    ot_tensor *ii = ot_full(be, OT_SHAPE(3), OT_I32, 4.0);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    CHECK_INT(ot_assign(oi, ot_neg(x)), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "float32", "int32");
    CHECK_INT(ot_assign(oi, d), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "float64", "int32");
    /* i32 * 0.5 is f64, so it cannot go into i32 either. */
    CHECK_INT(ot_assign(oi, ot_mul(ii, 0.5)), OT_EDTYPE);
    CHECK_ERR(OT_EDTYPE, "float64", "int32");

    int32_t h[3];
    CHECK_INT(ot_get(oi, h), 0);
    for (int i = 0; i < 3; i++) CHECK_INT(h[i], 9);

    /* Cast first: fine (truncation toward zero). */
    CHECK_INT(ot_assign(oi, ot_cast(ot_neg(x), .dtype = OT_I32)), 0);
    CHECK_INT(ot_get(oi, h), 0);
    for (int i = 0; i < 3; i++) CHECK_INT(h[i], -2);
    /* i32 into f32 and i32 into i32 are fine. */
    CHECK_INT(ot_assign(x, ii), 0);
    CHECK_INT(ot_assign(oi, ot_mul(ii, 2)), 0);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(x); ot_tensor_free(d); ot_tensor_free(oi); ot_tensor_free(ii);
    ot_backend_free(be);
}

TEST(errors_onehot_depth)
{
    ot_backend *be = ref();
    ot_tensor *idx = ot_zeros(be, OT_SHAPE(4), OT_I32);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_node *n = ot_onehot(idx, .depth = 0); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l1), "onehot", "depth");

    n = ot_onehot(idx, .depth = -3); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l2), "onehot", "depth", "-3");

    n = ot_onehot(idx); int l3 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l3), "onehot", "depth");

    /* A bad new-dim axis: the result has ndim 2, so axis 3 is out of range. */
    n = ot_onehot(idx, .depth = 3, .axis = 3); int l4 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l4), "onehot", "axis 3");

    CHECK(ot_onehot(idx, .depth = 3) != NULL);
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
    ot_tensor_free(idx);
    ot_backend_free(be);
}

TEST(errors_cast_dtype)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_node *n = ot_cast(x, .dtype = (ot_dtype)7); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EDTYPE, at(l1), "cast", "dtype");

    n = ot_cast(x, .dtype = (ot_dtype)-1); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EDTYPE, at(l2), "cast");

    CHECK(ot_cast(x, .dtype = OT_F64) != NULL);
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(errors_rand_dtype)
{
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    ot_node *n = ot_rand(OT_SHAPE(3, 4), .dtype = OT_I32); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EDTYPE, at(l1), "rand", "int32");

    n = ot_rand(OT_SHAPE(3, 4), .dtype = (ot_dtype)9); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EDTYPE, at(l2), "rand");

    CHECK(ot_rand(OT_SHAPE(3, 4), .dtype = OT_F64) != NULL);
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
}

TEST(errors_transpose_perm)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_node *n = ot_T(x, .perm = {0, 0, 1}); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l1), "transpose", "perm");

    n = ot_T(x, .perm = {0, 1, 5}); int l2 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l2), "transpose");

    n = ot_T(ot_neg(x), .perm = {2, -1, 0}); int l3 = __LINE__;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l3), "transpose");

    /* A valid permutation and the default reversal. */
    CHECK(ot_T(x, .perm = {1, 0, 2}) != NULL);
    CHECK(ot_T(x) != NULL);
    CHECK_INT(ot_errcode(), 0);

    /* The tensor-view transpose checks its perm too. */
    ot_tensor *v = ot_transpose(x, (const int[]){0, 0, 1});
    CHECK(v == NULL);
    CHECK_ERR(OT_EINVAL, "perm");

    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(errors_unknown_op)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_clear_error();
    ot_node *n = ot_build_at((ot_op)OT_OP_COUNT, ot_tensor_node(x), NULL, NULL, "u.c", 5);
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, "u.c:5:");

    n = ot_build_at((ot_op)999, ot_tensor_node(x), NULL, NULL, __FILE__, __LINE__);
    int l1 = __LINE__ - 1;
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, at(l1), "999");

    n = ot_build_at(OT_OP_NONE, ot_tensor_node(x), NULL, NULL, NULL, 0);
    CHECK(n == NULL);
    CHECK_ERR(OT_EINVAL, "");

    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- backends and pools -------------------------------------------------- */

TEST(errors_backend_name)
{
    unsetenv("OT_BACKEND");
    ot_clear_error();
    ot_backend *be = ot_backend_new("nope", NULL);
    CHECK(be == NULL);
    CHECK_ERR(OT_EBACKEND, "nope");

    /* The fused backend exists; an ISA this CPU lacks is refused by name. */
    be = ot_backend_new("cpu", NULL);
    CHECK(be != NULL);
    CHECK_STR(ot_backend_name(be), "cpu");
    ot_backend_free(be);
    setenv("OT_ISA", "no-such-isa", 1);
    CHECK(ot_backend_new("cpu", NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "OT_ISA=no-such-isa is not one of scalar, sse2, avx2, avx512, neon");
    unsetenv("OT_ISA");

    /* OT_BACKEND replaces the name, also a bad one. */
    setenv("OT_BACKEND", "ref", 1);
    be = ot_backend_new("nope", NULL);
    CHECK(be != NULL);
    CHECK_STR(ot_backend_name(be), "ref");
    ot_backend_free(be);
    setenv("OT_BACKEND", "nope2", 1);
    be = ot_backend_new("ref", NULL);
    CHECK(be == NULL);
    CHECK_ERR(OT_EBACKEND, "nope2");
    unsetenv("OT_BACKEND");
}

TEST(errors_pool_state)
{
    ot_clear_error();
    ot_pool *p = ot_pool_push();
    CHECK(p != NULL);
    CHECK_INT(ot_pool_pop(p), 0);
    /* p is no longer on the stack. */
    CHECK_INT(ot_pool_pop(p), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "pool");

    /* Popping an outer pool pops the inner one too. */
    ot_pool *outer = ot_pool_push();
    ot_pool *inner = ot_pool_push();
    CHECK_INT(ot_pool_pop(outer), 0);
    CHECK_INT(ot_pool_pop(inner), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "pool");

    /* The stack still works afterwards. */
    ot_pool *q = ot_pool_push();
    ot_pool *r = ot_pool_push();
    CHECK_INT(ot_pool_pop(r), 0);
    CHECK_INT(ot_pool_pop(q), 0);
    CHECK_INT(ot_errcode(), 0);
}

/* ---- the handler --------------------------------------------------------- */

typedef struct seen { int calls, code; char msg[512]; } seen;

static void handler(int code, const char *msg, void *user)
{
    seen *s = user;
    s->calls++;
    s->code = code;
    snprintf(s->msg, sizeof s->msg, "%s", msg);
}

TEST(errors_handler)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = ot_ones(be, OT_SHAPE(5, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    seen s = {0};

    ot_clear_error();
    ot_set_error_handler(handler, &s);
    ot_node *n = ot_mul(a, b); int l1 = __LINE__;
    CHECK(n == NULL);
    CHECK_INT(s.calls, 1);
    CHECK_INT(s.code, OT_ESHAPE);
    CHECK_STR(s.msg, ot_errmsg());
    CHECK(strstr(s.msg, at(l1)) != NULL);
    CHECK(strstr(s.msg, "mul") != NULL);
    ot_clear_error();

    /* Each recorded error reaches it, whatever function recorded it. */
    CHECK(ot_sum(a, .axis = 4) == NULL);
    CHECK_INT(s.calls, 2);
    CHECK_INT(s.code, OT_EINVAL);
    CHECK_STR(s.msg, ot_errmsg());
    ot_clear_error();
    CHECK(ot_empty(be, OT_SHAPE(-1), OT_F32) == NULL);
    CHECK_INT(s.calls, 3);
    CHECK_INT(s.code, OT_EINVAL);
    CHECK_INT(ot_assign(a, b), OT_ESHAPE);
    CHECK_INT(s.calls, 4);
    CHECK_INT(s.code, OT_ESHAPE);
    CHECK_STR(s.msg, ot_errmsg());
    ot_clear_error();

    /* An error a function reports for a call it made (an optimizer's
     * assign_many, a model's savez, a builder inside ot_parse, an
     * evaluation error placed at the assignment) reaches it once, at the
     * caller's line; the slot then holds the reworded message. */
    ot_node *g = ot_tensor_node(a);
    int l2 = __LINE__ + 1;
    CHECK_INT(ot_sgd_step(&(ot_sgd){0}, 2, (ot_tensor *[]){a, a}, (ot_node *[]){g, g}, NULL),
              OT_EALIAS);
    CHECK_INT(s.calls, 5);
    CHECK(strstr(s.msg, at(l2)) != NULL && strstr(s.msg, "assign_many") != NULL);
    CHECK_ERR(OT_EALIAS, at(l2), "sgd_step: assign_many: outputs 0 and 1 overlap");
    int l3 = __LINE__ + 1;
    CHECK(ot_parse("x + y", 2, (const char *[]){"x", "y"}, (ot_node *[]){g, ot_tensor_node(b)}) == NULL);
    CHECK_INT(s.calls, 6);
    CHECK_ERR(OT_ESHAPE, at(l3), "parse: col 3: add");
    ot_tensor *i = ot_full(be, OT_SHAPE(2), OT_I32, 70), *o = ot_empty(be, OT_SHAPE(2, 4), OT_F32);
    int l4 = __LINE__ + 1;
    CHECK_INT(ot_assign(o, ot_take(a, i, 0)), OT_EINVAL);
    CHECK_INT(s.calls, 7);
    CHECK_ERR(OT_EINVAL, at(l4), "take");
    ot_tensor_free(i);
    ot_tensor_free(o);
    ot_clear_error();

    /* Removed with NULL: errors are still recorded, the handler not called. */
    ot_set_error_handler(NULL, NULL);
    CHECK(ot_mul(a, b) == NULL);
    CHECK_INT(s.calls, 7);
    CHECK_ERR(OT_ESHAPE, "mul");

    ot_pool_pop(p);
    ot_tensor_free(a); ot_tensor_free(b);
    ot_backend_free(be);
}

/* The tensor functions without a place of their own (creation, data,
 * transpose and broadcast views, assign_many, explain_many) are macros
 * over _at twins: their errors name the caller's file:line, errors of a
 * later call without one name none (the place does not linger), and the
 * parenthesised plain functions name none. */
TEST(errors_tensor_functions_name_their_caller)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    char site[256];
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *b = ot_broadcast_to(x, OT_SHAPE(4, 2, 3));
    CHECK(x && b);
    int line = __LINE__ + 1;
    CHECK(ot_empty(be, OT_SHAPE(-1), OT_F32) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "empty");
    /* ot_eval's result it cannot allocate: named as the eval's */
    ot_pool *ep = ot_pool_push();
    ot_node *tree = ot_exp(x);
    ot__alloc_fail_at(1);
    line = __LINE__ + 1;
    ot_tensor *none = ot_eval(tree);
    ot__alloc_fail_at(0);
    CHECK(none == NULL);
    CHECK_ERR(OT_ENOMEM, TEST_SITE(site, line), "eval: ");
    ot_pool_pop(ep);
    line = __LINE__ + 1;
    CHECK(ot_array(be, OT_SHAPE(2), (ot_dtype)99, (float[]){1, 2}) == NULL);
    CHECK_ERR(OT_EDTYPE, TEST_SITE(site, line), "array");
    line = __LINE__ + 1;
    CHECK_INT(ot_fill(b, 1.0), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, TEST_SITE(site, line), "fill");
    line = __LINE__ + 1;
    CHECK_INT(ot_get(NULL, site), OT_ENULL);
    CHECK_ERR(OT_ENULL, TEST_SITE(site, line), "get");
    line = __LINE__ + 1;
    CHECK_INT(ot_set_n(x, (float[]){1}, 4), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "set_n");
    line = __LINE__ + 1;
    CHECK(ot_transpose(x, (int[]){0, 0}) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "transpose");
    line = __LINE__ + 1;
    CHECK(ot_broadcast_to(x, OT_SHAPE(3, 3)) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "broadcast_to");
    line = __LINE__ + 1;
    CHECK(ot_wrap(be, OT_SHAPE(2), OT_F32, NULL, NULL, NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, TEST_SITE(site, line), "wrap");
    ot_node *trees[] = {ot_tensor_node(x)};
    ot_tensor *outs[] = {b};
    line = __LINE__ + 1;
    CHECK_INT(ot_assign_many(1, outs, trees), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, TEST_SITE(site, line), "assign_many");
    line = __LINE__ + 1;
    CHECK_INT(ot_explain_many(1, outs, trees, stdout), OT_EALIAS);
    CHECK_ERR(OT_EALIAS, TEST_SITE(site, line), "explain_many");
    CHECK_INT((ot_fill)(b, 1.0), OT_EALIAS);   /* no place: the message starts with the op */
    CHECK(strncmp(ot_errmsg(), "fill: ", 6) == 0);
    ot_clear_error();
    CHECK((ot_copy)(NULL) == NULL);
    CHECK(strncmp(ot_errmsg(), "copy: ", 6) == 0);
    ot_tensor_free(b);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* The same for the files, autodiff, ot_parse and the names (their own
 * messages nest an inner error once: "m.c:5: parse: col 1: ..."). */
TEST(errors_io_autodiff_parse_name_their_caller)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    char site[256];
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2), OT_F32);
    int line = __LINE__ + 1;
    CHECK(ot_load(be, "/nonexistent/x.npy") == NULL);
    CHECK_ERR(OT_EIO, TEST_SITE(site, line), "load");
    line = __LINE__ + 1;
    CHECK_INT(ot_save("/nonexistent/x.npy", x), OT_EIO);
    CHECK_ERR(OT_EIO, TEST_SITE(site, line), "save");
    line = __LINE__ + 1;
    CHECK(ot_loadz(be, "/nonexistent/x.npz", 0, NULL, NULL) < 0);
    CHECK_ERR(OT_EIO, TEST_SITE(site, line));
    ot_tensor *y = ot_zeros(be, OT_SHAPE(3), OT_F32);
    line = __LINE__ + 1;
    CHECK(ot_autodiff_new(ot_tensor_node(x), ot_tensor_node(y)) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "autodiff_new");
    line = __LINE__ + 1;
    CHECK(ot_parse("tanhh(a)", 1, (const char *[]){"a"}, (ot_node *[]){ot_tensor_node(x)}) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "parse: col 1: unknown function");
    CHECK(strstr(ot_errmsg() + strlen(site), "test_errors.c") == NULL);   /* once */
    line = __LINE__ + 1;
    CHECK_INT(ot_tensor_set_name(x, "a\nb"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "set_name");
    line = __LINE__ + 1;
    CHECK_INT(ot_tensor_set_axes(x, "N,C"), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line));
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* An error found while evaluating (an index out of range) names the
 * assignment's line, on both backends and with worker threads. */
TEST(errors_found_while_evaluating_name_the_assignment)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = ot_backend_new(b ? "cpu" : "ref", &(ot_backend_opts){.threads = 2});
        ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, 2, 3});
        ot_tensor *i = ot_array(be, OT_SHAPE(2), OT_I32, (int32_t[]){0, 7});
        ot_tensor *o = ot_empty(be, OT_SHAPE(2), OT_F32);
        char site[256];
        int line = __LINE__ + 1;
        CHECK_INT(ot_assign(o, ot_take(x, i, 0)), OT_EINVAL);
        CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "take: index 7");
        ot_tensor_free(x);
        ot_tensor_free(i);
        ot_tensor_free(o);
        ot_backend_free(be);
    }
}

/* ---- errors of ops built from others name the caller's op ------------------ */

/* A layer op whose operands are on two backends, or whose kernel or dtypes
 * are wrong, names itself and the real rule, not the op it builds inside
 * (attention's concat, layer_norm's mul) or a false one. */
TEST(errors_layer_ops_name_themselves)
{
    ot_backend *r = ref(), *c = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    CHECK(c != NULL);
    ot_tensor *q = ot_zeros(c, OT_SHAPE(1, 1, 2, 2), OT_F32), *m = ot_zeros(r, OT_SHAPE(2, 2), OT_F32);
    ot_tensor *x = ot_zeros(c, OT_SHAPE(2, 4), OT_F32), *w = ot_zeros(r, OT_SHAPE(4), OT_F32);
    ot_tensor *cx = ot_zeros(c, OT_SHAPE(1, 2, 5), OT_F32), *w0 = ot_zeros(c, OT_SHAPE(3, 2, 0), OT_F32);
    ot_tensor *wt0 = ot_zeros(c, OT_SHAPE(2, 3, 0), OT_F32), *wf = ot_zeros(c, OT_SHAPE(3, 2, 2), OT_F32);
    ot_tensor *qh = ot_zeros(c, OT_SHAPE(1, 1, 2, 2), OT_F16), *mf = ot_zeros(c, OT_SHAPE(2, 2), OT_F32);
    ot_tensor *xh = ot_zeros(c, OT_SHAPE(1, 2, 5), OT_F16);
    ot_pool *p = ot_pool_push();
    int l1 = __LINE__ + 1;
    CHECK(ot_attention(q, q, q, .mask = ot_tensor_node(m)) == NULL);
    CHECK_ERR(OT_EBACKEND, at(l1), "attention:", "mask reads tensors of backend 'ref'", "q of the 'cpu'");
    ot_clear_error();
    int l2 = __LINE__ + 1;
    CHECK(ot_layer_norm(x, .weight = w) == NULL);
    CHECK_ERR(OT_EBACKEND, at(l2), "layer_norm:", "weight is a tensor of backend 'ref'", "'cpu'");
    ot_clear_error();
    int l3 = __LINE__ + 1;
    CHECK(ot_conv(cx, w0) == NULL);
    CHECK_ERR(OT_ESHAPE, at(l3), "conv:", "kernel of 0", "must be at least 1", "(3,2,0)");
    CHECK(strstr(ot_errmsg(), "larger") == NULL);
    ot_clear_error();
    int l4 = __LINE__ + 1;
    CHECK(ot_conv_transpose(cx, wt0) == NULL);
    CHECK_ERR(OT_ESHAPE, at(l4), "conv_transpose:", "kernel of 0", "must be at least 1", "(2,3,0)");
    ot_clear_error();
    int l5 = __LINE__ + 1;
    CHECK(ot_attention(qh, qh, qh, .mask = ot_tensor_node(mf)) == NULL);
    CHECK_ERR(OT_EDTYPE, at(l5), "attention:", "mask is float32", "float16, bfloat16, float32 or "
              "float64", "one dtype", "(q is float16)");
    ot_clear_error();
    int l6 = __LINE__ + 1;
    CHECK(ot_conv(xh, wf) == NULL);
    CHECK_ERR(OT_EDTYPE, at(l6), "conv:", "(float16)", "(float32)", "float16, bfloat16, float32 "
              "or float64", "one dtype");
    ot_clear_error();
    ot_pool_pop(p);
    ot_tensor *all[] = {q, m, x, w, cx, w0, wt0, wf, qh, mf, xh};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++) ot_tensor_free(all[i]);
    ot_backend_free(c);
    ot_backend_free(r);
}

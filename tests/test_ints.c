/*
 * test_ints.c - int32 reductions (issue 31 point 4): sums and means of
 * int32 values accumulate exactly, and a sum that does not fit int32 is
 * OT_EOVERFLOW naming the op, the shape and the sum's file:line, on the
 * ref backend and on the cpu backend (fused and not, every reduction path:
 * rows, columns, everything in chunks, sums inside larger trees, several
 * outputs, programs, ot_eval), never a wrapped value.
 */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#define BACKENDS 3
/* ref, then cpu with fusion on and off (2 threads: chunks run in parallel). */
static ot_backend *backend(int i)
{
    return test__backend(i == 0 ? "ref" : "cpu", i == 2 ? OT_FUSION_OFF : OT_FUSION_ON);
}

/* An int32 tensor of n values v[i] in shape s. */
static ot_tensor *ints(ot_backend *be, ot_shape s, const int32_t *v)
{
    ot_tensor *t = ot_empty(be, s, OT_I32);
    CHECK(t != NULL);
    if (t) CHECK_INT(ot_set(t, v), 0);
    return t;
}

/* n copies of value. */
static int32_t *filled(int64_t n, int32_t value)
{
    int32_t *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = value;
    return v;
}

/* Assigns tree into out and expects OT_EOVERFLOW naming op and shape at
 * this file (the sum's line is checked where the test spells it). */
static void expect_overflow(ot_tensor *out, ot_node *tree, const char *op, const char *shape)
{
    CHECK_INT(ot_assign(out, tree), OT_EOVERFLOW);
    CHECK_ERR(OT_EOVERFLOW, op, shape, "test_ints.c", "does not fit int32");
}

/* The value of a 0-d or one-element int32 result. */
static int64_t scalar_i32(const ot_tensor *t)
{
    int32_t v = 0;
    CHECK_INT(ot_get(t, &v), 0);
    return v;
}

/* The issue's reproducer: [2^31-1, 1] summed gave -2^31 with rc 0. */
TEST(ints_sum_overflow_issue_repro)
{
    for (int b = 0; b < BACKENDS; b++) {
        ot_backend *be = backend(b);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ints(be, OT_SHAPE(2), (const int32_t[]){INT32_MAX, 1});
        ot_tensor *out = ot_full(be, OT_SHAPE(), OT_I32, 7);
        int line = __LINE__ + 1;
        CHECK_INT(ot_assign(out, ot_sum(x)), OT_EOVERFLOW);
        char at[32];
        snprintf(at, sizeof at, "test_ints.c:%d", line);
        CHECK_ERR(OT_EOVERFLOW, "sum", "(2,)", "all axes", at, "cast the operand to f64");
        /* still fits: INT32_MAX + 0, and INT32_MIN */
        ot_tensor *y = ints(be, OT_SHAPE(2), (const int32_t[]){INT32_MAX, 0});
        CHECK_INT(ot_assign(out, ot_sum(y)), 0);
        CHECK_INT(scalar_i32(out), INT32_MAX);
        ot_tensor *z = ints(be, OT_SHAPE(2), (const int32_t[]){INT32_MIN, -1});
        expect_overflow(out, ot_sum(z), "sum", "(2,)");
        ot_pool_pop(pool);
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_tensor_free(z);
        ot_tensor_free(out);
        ot_backend_free(be);
    }
}

/* Long rows summing to the limits exactly, and one past them, both signs:
 * 100003 elements span many tiles and several chunks of partial sums,
 * whose own sums fit while the total does not. */
TEST(ints_sum_long_rows_at_the_limits)
{
    const int64_t n = 100003;
    for (int b = 0; b < BACKENDS; b++) {
        ot_backend *be = backend(b);
        ot_pool *pool = ot_pool_push();
        for (int sign = 1; sign >= -1; sign -= 2) {
            int64_t limit = sign > 0 ? INT32_MAX : INT32_MIN;
            int32_t *v = filled(n, (int32_t)(limit / n));
            v[n - 1] += (int32_t)(limit - (limit / n) * n);   /* the total is the limit */
            ot_tensor *x = ints(be, OT_SHAPE(n), v), *out = ot_empty(be, OT_SHAPE(), OT_I32);
            CHECK_INT(ot_assign(out, ot_sum(x)), 0);
            CHECK_INT(scalar_i32(out), limit);
            v[0] += sign;   /* one past */
            CHECK_INT(ot_set(x, v), 0);
            expect_overflow(out, ot_sum(x), "sum", "(100003,)");
            /* the same as one row of a 2-D tensor, and as a column */
            ot_tensor *row = ot_reshape(x, OT_SHAPE(1, n)), *r1 = ot_empty(be, OT_SHAPE(1), OT_I32);
            expect_overflow(r1, ot_sum(row, 1), "sum", "axis 1 of shape (1,100003)");
            ot_tensor *col = ot_reshape(x, OT_SHAPE(n, 1));
            expect_overflow(r1, ot_sum(col, 0), "sum", "axis 0 of shape (100003,1)");
            v[0] -= sign;
            CHECK_INT(ot_set(x, v), 0);
            CHECK_INT(ot_assign(r1, ot_sum(col, 0)), 0);
            CHECK_INT(scalar_i32(r1), limit);
            free(v);
            ot_tensor_free(row);
            ot_tensor_free(col);
            ot_tensor_free(r1);
            ot_tensor_free(x);
            ot_tensor_free(out);
        }
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

/* Axis sums with and without keepdims: only row 1 (axis 1), column 2
 * (axis 0) or one middle line overflows, and that fails the whole sum. */
TEST(ints_sum_axes)
{
    const int32_t big = 1 << 30;
    int32_t v[2 * 3 * 4];
    for (int i = 0; i < 24; i++) v[i] = i;
    v[4 + 0] = v[4 + 1] = big;           /* [0][1][0], [0][1][1] : row 1 of the 2-D view */
    for (int b = 0; b < BACKENDS; b++) {
        ot_backend *be = backend(b);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ints(be, OT_SHAPE(2, 3, 4), v);
        ot_tensor *m = ot_reshape(x, OT_SHAPE(6, 4));
        ot_tensor *o6 = ot_empty(be, OT_SHAPE(6), OT_I32), *o4 = ot_empty(be, OT_SHAPE(4), OT_I32);
        ot_tensor *o61 = ot_empty(be, OT_SHAPE(6, 1), OT_I32);
        ot_tensor *o24 = ot_empty(be, OT_SHAPE(2, 4), OT_I32);
        /* row 1 holds big + big + 6 + 7: over */
        expect_overflow(o6, ot_sum(m, 1), "sum", "axis 1 of shape (6,4)");
        expect_overflow(o61, ot_sum(m, -1, true), "sum", "axis 1 of shape (6,4)");
        /* column 0: big + 0 + ... fits; columns hold one big each */
        CHECK_INT(ot_assign(o4, ot_sum(m, 0)), 0);
        int32_t got[8];
        CHECK_INT(ot_get(o4, got), 0);
        CHECK_INT(got[0], big + 0 + 8 + 12 + 16 + 20);
        CHECK_INT(got[2], 2 + 6 + 10 + 14 + 18 + 22);
        /* the middle axis: [0][*][0] = 0 + big + 8 fits, a second big does not */
        CHECK_INT(ot_assign(o24, ot_sum(x, 1)), 0);
        CHECK_INT(ot_get(o24, got), 0);
        CHECK_INT(got[0], big + 8);
        CHECK_INT(got[1], big + 1 + 9);
        v[8] = big;   /* [0][2][0] */
        CHECK_INT(ot_set(x, v), 0);
        expect_overflow(o24, ot_sum(x, 1), "sum", "axis 1 of shape (2,3,4)");
        v[8] = 8;
        ot_pool_pop(pool);
        ot_tensor_free(m);
        ot_tensor_free(x);
        ot_tensor_free(o6);
        ot_tensor_free(o4);
        ot_tensor_free(o61);
        ot_tensor_free(o24);
        ot_backend_free(be);
    }
}

/* Sums fused into larger trees (an elementwise prefix, a consumer after
 * the sum), several outputs of which one overflows, and ot_eval. */
TEST(ints_sum_in_trees)
{
    int32_t v[6] = {1 << 29, 1 << 29, 1 << 29, 1 << 29, 5, 6};
    for (int b = 0; b < BACKENDS; b++) {
        ot_backend *be = backend(b);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ints(be, OT_SHAPE(6), v);
        ot_tensor *o = ot_empty(be, OT_SHAPE(), OT_I32), *o2 = ot_empty(be, OT_SHAPE(6), OT_I32);
        /* 4 * 2^29 + 11 = 2^31 + 11: over; x - 1 each: 2^31 + 5, still over */
        expect_overflow(o, ot_sum(ot_sub(x, 1)), "sum", "(6,)");
        expect_overflow(o, ot_add(ot_sum(x), 3), "sum", "(6,)");
        expect_overflow(o2, ot_mul(x, ot_sum(ot_abs(x))), "sum", "(6,)");
        /* x / 2 fits (a float tree, cast back to int32 first) */
        CHECK_INT(ot_assign(o, ot_sum(ot_cast(ot_div(x, 2), OT_I32))), 0);
        CHECK_INT(scalar_i32(o), (1 << 30) + 2 + 3);
        /* two outputs: the second overflows */
        ot_tensor *o3 = ot_empty(be, OT_SHAPE(), OT_I32);
        CHECK_INT(ot_assign_many(2, (ot_tensor *[]){o3, o},
                                 (ot_node *[]){ot_sum(ot_neg(x)), ot_sum(x)}),
                  OT_EOVERFLOW);
        CHECK_ERR(OT_EOVERFLOW, "sum", "(6,)", "test_ints.c");
        /* -2^31 - 11 is over too */
        CHECK_INT(ot_assign(o3, ot_sum(ot_neg(x))), OT_EOVERFLOW);
        CHECK(ot_eval(ot_sum(x)) == NULL);
        CHECK_ERR(OT_EOVERFLOW, "sum", "(6,)", "test_ints.c");
        /* squared_l2's sum is checked as well (its squares wrap as sqr does) */
        ot_tensor *s = ints(be, OT_SHAPE(3), (const int32_t[]){40000, 40000, 1});
        CHECK_INT(ot_assign(o, ot_squared_l2(s)), OT_EOVERFLOW);
        CHECK_ERR(OT_EOVERFLOW, "squared_l2", "(3,)", "test_ints.c");
        ot_pool_pop(pool);
        ot_tensor_free(s);
        ot_tensor_free(x);
        ot_tensor_free(o);
        ot_tensor_free(o2);
        ot_tensor_free(o3);
        ot_backend_free(be);
    }
}

/* A program's step fails the run with the same error. */
TEST(ints_sum_overflow_in_program)
{
    for (int b = 0; b < BACKENDS; b++) {
        ot_backend *be = backend(b);
        ot_program *p = ot_program_new(be);
        ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(3), OT_I32);
        ot_tensor *out = ot_empty(be, OT_SHAPE(), OT_I32);
        ot_pool *pool = ot_pool_push();
        CHECK_INT(ot_program_assign(p, out, ot_sum(x)), 0);
        ot_pool_pop(pool);
        CHECK_INT(ot_program_compile(p), 0);
        ot_tensor *ok = ints(be, OT_SHAPE(3), (const int32_t[]){INT32_MAX - 3, 1, 2});
        ot_tensor *bad = ints(be, OT_SHAPE(3), (const int32_t[]){INT32_MAX - 2, 1, 2});
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_TENSOR("x", ok)), 0);
        CHECK_INT(scalar_i32(out), INT32_MAX);
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_TENSOR("x", bad)), OT_EOVERFLOW);
        CHECK_ERR(OT_EOVERFLOW, "sum", "(3,)", "test_ints.c");
        ot_program_free(p);
        ot_tensor_free(ok);
        ot_tensor_free(bad);
        ot_tensor_free(out);
        ot_backend_free(be);
    }
}

/* mean of int32 values is f64 (as NumPy's): the exact sum rounded to
 * double once, divided by the count. 5 * 2^20 values near INT32_MAX, whose
 * running sum passes 2^53 where a double accumulator rounds odd partial
 * sums; and a column mean of two extremes each. */
TEST(ints_mean_exact)
{
    const int64_t n = 5 << 20;
    int32_t *v = filled(n, INT32_MAX);
    int64_t exact = 0;
    for (int64_t i = 0; i < n; i++) exact += v[i] -= (i % 3 == 0) + (i % 7 == 0);
    for (int b = 0; b < BACKENDS; b++) {
        ot_backend *be = backend(b);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ints(be, OT_SHAPE(n), v);
        ot_node *m = ot_mean(x);
        CHECK(m && ot_node_dtype(m) == OT_F64);
        ot_tensor *out = ot_empty(be, OT_SHAPE(), OT_F64);
        CHECK_INT(ot_assign(out, m), 0);
        double got = 0;
        CHECK_INT(ot_get(out, &got), 0);
        CHECK(got == (double)exact / (double)n);
        ot_tensor *c = ints(be, OT_SHAPE(4, 2), (const int32_t[]){INT32_MAX, INT32_MIN, INT32_MAX,
                                                                  INT32_MIN, INT32_MAX, 3, INT32_MAX, 4});
        ot_tensor *o2 = ot_empty(be, OT_SHAPE(2), OT_F64);
        CHECK_INT(ot_assign(o2, ot_mean(c, 0)), 0);   /* sums beyond int32 are fine here */
        double g2[2];
        CHECK_INT(ot_get(o2, g2), 0);
        CHECK(g2[0] == (double)INT32_MAX);
        CHECK(g2[1] == ((double)INT32_MIN * 2 + 7) / 4);
        /* var and std of int32 are f64 through this mean: exact deviations */
        ot_tensor *e = ints(be, OT_SHAPE(2), (const int32_t[]){INT32_MAX, INT32_MIN});
        CHECK_INT(ot_assign(out, ot_var(e)), 0);
        CHECK_INT(ot_get(out, &got), 0);
        CHECK_NEAR(got, 2147483647.5 * 2147483647.5, 1e-15);
        ot_tensor_free(e);
        ot_pool_pop(pool);
        ot_tensor_free(x);
        ot_tensor_free(c);
        ot_tensor_free(out);
        ot_tensor_free(o2);
        ot_backend_free(be);
    }
    free(v);
}

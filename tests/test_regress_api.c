/*
 * test_regress_api.c - regression tests for issue 13's API defects: the
 * option macros (positional options work as NumPy's or do not compile),
 * i32 index ranges of argmax/argmin/onehot, checked stride arithmetic in
 * views, and the messages of builders given bad input.
 */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

static const char *const BACKENDS[] = {"cpu", "ref"};

/* The values of a tree, as doubles, and its shape. */
typedef struct res {
    ot_shape shape;
    double v[512];
    int64_t n;
    bool ok;
} res;

static res eval(ot_node *n)
{
    res r = {.ok = false};
    ot_tensor *t = n ? ot_eval(n) : NULL;
    if (!t) {
        test__fail(__FILE__, __LINE__, "eval failed: %s", ot_errmsg());
        return r;
    }
    r.shape = ot_tensor_shape(t);
    r.n = ot_tensor_numel(t);
    ot_tensor *d = ot_eval(ot_cast(t, OT_F64));
    double *all = malloc((size_t)(r.n ? r.n : 1) * sizeof *all);
    if (d && all) {
        r.ok = ot_get(d, all) == 0;
        if (r.n > 512) r.n = 512;
        memcpy(r.v, all, (size_t)r.n * sizeof *all);
    }
    free(all);
    ot_tensor_free(d);
    ot_tensor_free(t);
    return r;
}

static bool same_res(res a, res b)
{
    if (!a.ok || !b.ok || a.n != b.n || a.shape.ndim != b.shape.ndim) return false;
    for (int i = 0; i < a.shape.ndim; i++)
        if (a.shape.dims[i] != b.shape.dims[i]) return false;
    for (int64_t i = 0; i < a.n; i++)
        if (!(a.v[i] == b.v[i] || (a.v[i] != a.v[i] && b.v[i] != b.v[i]))) return false;
    return true;
}

#define SAME(pos, des)                                                        \
    do {                                                                      \
        res rp_ = eval(pos), rd_ = eval(des);                                 \
        if (!same_res(rp_, rd_))                                              \
            test__fail(__FILE__, __LINE__, "%s: %s differs from %s", name, #pos, #des); \
    } while (0)

static ot_tensor *ramp(ot_backend *be, ot_shape s, ot_dtype dt)
{
    double v[512];
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) n *= s.dims[i];
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7) % 11) / 4.0 - 1.0;
    ot_tensor *f = ot_array(be, s, OT_F64, v);
    ot_tensor *t = ot_eval(ot_cast(f, dt));
    ot_tensor_free(f);
    return t;
}

static void check_shape(res r, int ndim, int64_t d0, int64_t d1, int line)
{
    if (r.shape.ndim != ndim || (ndim > 0 && r.shape.dims[0] != d0) ||
        (ndim > 1 && r.shape.dims[1] != d1))
        test__fail(__FILE__, line, "shape has %d dims (%lld, %lld), expected %d (%lld, %lld)",
                   r.shape.ndim, (long long)r.shape.dims[0], (long long)r.shape.dims[1], ndim,
                   (long long)d0, (long long)d1);
}

/* The report: ot_sum(x, 1) of a (32, 128) tensor of ones reduced
 * every axis and broadcast 4096 into the (32,) output with rc 0. */
TEST(defect08_positional_axis_is_numpys)
{
    for (int b = 0; b < 2; b++) {
        ot_backend *be = ot_backend_new(BACKENDS[b], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ot_ones(be, OT_SHAPE(32, 128), OT_F32);
        ot_tensor *y = ot_empty(be, OT_SHAPE(32), OT_F32);
        CHECK_INT(ot_assign(y, ot_sum(x, 1)), 0);
        float out[32];
        CHECK_INT(ot_get(y, out), 0);
        for (int i = 0; i < 32; i++) CHECK_NEAR(out[i], 128.0, 0);

        res r = eval(ot_sum(x, 1));
        check_shape(r, 1, 32, 0, __LINE__);
        r = eval(ot_sum(x, 1, true));
        check_shape(r, 2, 32, 1, __LINE__);
        r = eval(ot_sum(x, .keepdims = true));  /* no axis: every axis */
        check_shape(r, 2, 1, 1, __LINE__);
        CHECK_NEAR(r.v[0], 4096.0, 0);
        r = eval(ot_sum(x, .axis = OT_AXIS_ALL));
        check_shape(r, 0, 0, 0, __LINE__);
        r = eval(ot_sum(x));
        check_shape(r, 0, 0, 0, __LINE__);
        r = eval(ot_sum(x, 0));                 /* axis 0 is an axis, not "none" */
        check_shape(r, 1, 128, 0, __LINE__);
        CHECK_NEAR(r.v[0], 32.0, 0);

        r = eval(ot_softmax(x, 1));
        double row = 0;
        for (int i = 0; i < 128 && r.ok; i++) row += r.v[i];
        CHECK_NEAR(row, 1.0, 1e-5);

        r = eval(ot_cast(x, OT_F64));
        CHECK(r.ok);
        int idx_v[4] = {3, 0, 9, 1};
        ot_tensor *idx = ot_array(be, OT_SHAPE(4), OT_I32, idx_v);
        r = eval(ot_onehot(idx, 10));
        check_shape(r, 2, 4, 10, __LINE__);
        CHECK_NEAR(r.v[3], 1.0, 0);
        CHECK_NEAR(r.v[10 + 0], 1.0, 0);
        ot_tensor_free(idx);
        ot_tensor_free(y);
        ot_tensor_free(x);
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

/* Every family: the positional form equals the designated one. */
TEST(defect08_positional_equals_designated_every_family)
{
    for (int b = 0; b < 2; b++) {
        const char *name = BACKENDS[b];
        ot_backend *be = ot_backend_new(name, NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = ramp(be, OT_SHAPE(4, 6), OT_F32);
        ot_tensor *x3 = ramp(be, OT_SHAPE(2, 3, 4), OT_F64);
        ot_tensor *p = ot_eval(ot_softmax(x, .axis = 1));
        ot_tensor *t = ot_eval(ot_onehot(ot_argmax(x, .axis = 1), .depth = 6));

        for (int axis = -2; axis < 2; axis++) {
            SAME(ot_sum(x, axis), ot_sum(x, .axis = axis));
            SAME(ot_sum(x, axis, true), ot_sum(x, .axis = axis, .keepdims = true));
            SAME(ot_max(x, axis), ot_max(x, .axis = axis));
            SAME(ot_min(x, axis, true), ot_min(x, .axis = axis, .keepdims = true));
            SAME(ot_mean(x, axis), ot_mean(x, .axis = axis));
            SAME(ot_argmax(x, axis), ot_argmax(x, .axis = axis));
            SAME(ot_argmin(x, axis, true), ot_argmin(x, .axis = axis, .keepdims = true));
            SAME(ot_var(x, axis), ot_var(x, .axis = axis));
            SAME(ot_var(x, axis, 1), ot_var(x, .axis = axis, .ddof = 1));
            SAME(ot_std(x, axis, 1, true), ot_std(x, .axis = axis, .ddof = 1, .keepdims = true));
            SAME(ot_softmax(x, axis), ot_softmax(x, .axis = axis));
            SAME(ot_logsoftmax(x, axis), ot_logsoftmax(x, .axis = axis));
            SAME(ot_cross_entropy(p, t, axis), ot_cross_entropy(p, t, .axis = axis));
            SAME(ot_cross_entropy(p, t, axis, true),
                 ot_cross_entropy(p, t, .axis = axis, .keepdims = true));
            SAME(ot_squared_l2(x, axis), ot_squared_l2(x, .axis = axis));
            SAME(ot_squared_l2(x, axis, true), ot_squared_l2(x, .axis = axis, .keepdims = true));
        }
        /* A designator, then a positional: the member after it. */
        SAME(ot_var(x, .axis = 1, 1), ot_var(x, .axis = 1, .ddof = 1));
        SAME(ot_onehot(ot_argmax(x, 1), .depth = 6, 0, OT_F64),
             ot_onehot(ot_argmax(x, 1), .depth = 6, .axis = 0, .dtype = OT_F64));
        /* Without an axis: every axis, as NumPy's None. */
        SAME(ot_sum(x, .keepdims = true), ot_sum(x, .axis = OT_AXIS_ALL, .keepdims = true));
        SAME(ot_sum(x, . axis = 1), ot_sum(x, 1));
        SAME(ot_var(x, .ddof = 1), ot_var(x, .axis = OT_AXIS_ALL, .ddof = 1));
        SAME(ot_softmax(x), ot_softmax(x, .axis = OT_AXIS_ALL));

        SAME(ot_cast(x, OT_F64), ot_cast(x, .dtype = OT_F64));
        SAME(ot_cast(x, OT_I32), ot_cast(x, .dtype = OT_I32));
        ot_node *am = ot_argmax(x3, 2);
        SAME(ot_onehot(am, 5), ot_onehot(am, .depth = 5));
        SAME(ot_onehot(am, 5, 0), ot_onehot(am, .depth = 5, .axis = 0));
        SAME(ot_onehot(am, 5, 1, OT_F64), ot_onehot(am, .depth = 5, .axis = 1, .dtype = OT_F64));
        /* rand has no leaf to take a backend from: add a zero tensor */
        ot_tensor *z = ot_zeros(be, OT_SHAPE(3, 4), OT_F64);
        SAME(ot_add(z, ot_rand(OT_SHAPE(3, 4), 7)), ot_add(z, ot_rand(OT_SHAPE(3, 4), .seed = 7)));
        SAME(ot_add(z, ot_rand(OT_SHAPE(3, 4), 7, OT_F64)),
             ot_add(z, ot_rand(OT_SHAPE(3, 4), .seed = 7, .dtype = OT_F64)));
        res r = eval(ot_add(z, ot_rand(OT_SHAPE(3, 4), 7)));
        res r2 = eval(ot_add(z, ot_rand(OT_SHAPE(3, 4), 8)));
        CHECK(r.ok && r2.ok && r.v[0] != r2.v[0]);   /* the seed did arrive */
        ot_tensor_free(z);
        SAME(ot_T(x3, {1, 0, 2}), ot_T(x3, .perm = {1, 0, 2}));
        SAME(ot_T(x3), ot_T(x3, .perm = {2, 1, 0}));

        r = eval(ot_onehot(am, 5, 1, OT_F64));
        CHECK_INT(r.shape.ndim, 3);
        CHECK_INT(r.shape.dims[1], 5);
        ot_tensor_free(t);
        ot_tensor_free(p);
        ot_tensor_free(x3);
        ot_tensor_free(x);
        ot_pool_pop(pool);
        ot_backend_free(be);
    }
}

/* C's rule, member by member, including the odd spellings. */
TEST(defect08_spec_follows_c_initializer_rule)
{
    const char *m = "axis,keepdims";
    CHECK(ot_spec_sets("1", m, "axis"));
    CHECK(ot_spec_sets("1, true", m, "keepdims"));
    CHECK(ot_spec_sets(".axis = 1", m, "axis"));
    CHECK(ot_spec_sets(".axis=1", m, "axis"));
    CHECK(ot_spec_sets(". axis = 1", m, "axis"));
    CHECK(!ot_spec_sets(". keepdims = 1", m, "axis"));
    CHECK(!ot_spec_sets(".keepdims = true", m, "axis"));
    CHECK(!ot_spec_sets("", m, "axis"));
    CHECK(!ot_spec_sets(NULL, m, "axis"));
    CHECK(ot_spec_sets(".keepdims = 1, .axis = 0", m, "axis"));
    CHECK(ot_spec_sets(".5", "lo,hi", "lo"));                /* a float, not a designator */
    CHECK(ot_spec_sets("f(1, 2), g(\",\")", m, "keepdims"));   /* commas inside */
    CHECK(!ot_spec_sets("f(1, 2)", m, "keepdims"));
    CHECK(ot_spec_sets("10, 0", "depth,axis,dtype", "axis"));
    CHECK(!ot_spec_sets("10", "depth,axis,dtype", "axis"));
    CHECK(ot_spec_sets(".depth = 3, 1", "depth,axis,dtype", "axis"));
    CHECK(ot_spec_sets("'{', 1", m, "keepdims"));
    /* ot_args itself, as bindings or tests spell it with spec_ set */
    ot_args a = {.spec_ = ".keepdims = true", .axis = 0, .keepdims = true};
    ot_pool *pool = ot_pool_push();
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_node *n = ot_build(OT_OP_SUM, ot_tensor_node(x), NULL, &a);
    CHECK(n && ot_node_shape(n).ndim == 2 && ot_node_shape(n).dims[1] == 1);
    a = (ot_args){.spec_ = "1", 1};
    n = ot_build(OT_OP_SUM, ot_tensor_node(x), NULL, &a);
    CHECK(n && ot_node_shape(n).ndim == 1 && ot_node_shape(n).dims[0] == 2);
    ot_tensor_free(x);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* A designator of another family must not compile. Needs a C compiler;
 * skipped (with a note) when there is none. */
TEST(defect08_foreign_designator_does_not_compile)
{
    if (system("cc --version >/dev/null 2>&1") != 0) {
        fprintf(stderr, "  (no cc: skipped)\n");
        return;
    }
    const char *inc = "include";
    static const char *const bad[] = {
        "ot_sum(x, .depth = 3)", "ot_cast(x, .axis = 1)", "ot_softmax(x, .keepdims = true)",
        "ot_onehot(x, .seed = 1)", "ot_T(x, .axis = 0)", "ot_var(x, .dtype = OT_F64)",
        "ot_sum(x, 1, true, 3)",   /* excess elements: a warning, -Werror here */
    };
    static const char *const good[] = {"ot_sum(x, 1, true)", "ot_onehot(x, 10, -1, OT_F64)"};
    int nbad = (int)(sizeof bad / sizeof bad[0]), ngood = (int)(sizeof good / sizeof good[0]);
    for (int k = 0; k < nbad + ngood; k++) {
        bool expect_ok = k >= nbad;
        const char *expr = expect_ok ? good[k - nbad] : bad[k];
        char path[] = "/tmp/ot_optsXXXXXX";
        int fd = mkstemp(path);
        CHECK(fd >= 0);
        if (fd < 0) return;
        FILE *f = fdopen(fd, "w");
        fprintf(f, "#include \"optree.h\"\not_node *f(ot_tensor *x) { return %s; }\n", expr);
        fclose(f);
        char cmd[512];
        snprintf(cmd, sizeof cmd, "cc -std=c11 -Wall -Wextra -Werror -fsyntax-only -x c -I%s %s "
                 ">/dev/null 2>&1", inc, path);
        int rc = system(cmd);
        remove(path);
        if ((rc == 0) != expect_ok)
            test__fail(__FILE__, __LINE__, "%s %s", expr,
                       expect_ok ? "does not compile" : "compiles");
    }
}

/* The report: argmax over 2^31 + 64 elements gave 2147483647 (the
 * saturated i32) with code 0. A broadcast view has the shape without the
 * memory (stride 0). */
TEST(defect13_argmax_index_range_beyond_int32_is_an_error)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_pool *pool = ot_pool_push();
    ot_tensor *one = ot_ones(be, OT_SHAPE(1), OT_F32);
    int64_t big = (1LL << 31) + 64;
    ot_tensor *v = ot_broadcast_to(one, OT_SHAPE(big));
    CHECK(v != NULL);
    ot_clear_error();
    CHECK(ot_argmax(v) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "argmax", "2147483712", "(2147483712,)", "test_regress_api.c:");
    ot_clear_error();
    CHECK(ot_argmin(v, 0) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "argmin", "2147483712");
    ot_clear_error();
    CHECK(ot_argmax(ot_neg(v), .axis = -1, .keepdims = true) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "argmax");

    /* 2-D: the flat range of all axes is too big, one axis is fine. */
    ot_tensor *one2 = ot_ones(be, OT_SHAPE(1, 1), OT_F32);
    ot_tensor *w = ot_broadcast_to(one2, OT_SHAPE(4, (1LL << 30) + 1));
    ot_clear_error();
    CHECK(ot_argmax(w) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "argmax", "(4,1073741825)");
    ot_clear_error();
    CHECK(ot_argmax(w, 1) != NULL);
    CHECK(ot_argmin(w, 0) != NULL);
    /* exactly 2^31 elements: the largest index is INT32_MAX */
    ot_tensor *edge = ot_broadcast_to(one, OT_SHAPE(1LL << 31));
    CHECK(ot_argmax(edge) != NULL);
    CHECK_INT(ot_errcode(), 0);

    /* onehot compares int32 class indices with k < depth */
    int iv[2] = {0, 1};
    ot_tensor *idx = ot_array(be, OT_SHAPE(2), OT_I32, iv);
    ot_clear_error();
    CHECK(ot_onehot(idx, (int64_t)INT32_MAX + 1) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "onehot", "depth 2147483648");
    ot_clear_error();
    CHECK(ot_onehot(idx, INT32_MAX) != NULL);
    CHECK(ot_onehot(idx, INT64_MAX) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "onehot");

    ot_tensor_free(idx);
    ot_tensor_free(edge);
    ot_tensor_free(w);
    ot_tensor_free(one2);
    ot_tensor_free(v);
    ot_tensor_free(one);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

static void check_view(ot_tensor *v, int ndim, int64_t d0, int line)
{
    if (!v) {
        test__fail(__FILE__, line, "view failed: %s", ot_errmsg());
        return;
    }
    if (ot_tensor_ndim(v) != ndim || (ndim > 0 && ot_tensor_dim(v, 0) != d0))
        test__fail(__FILE__, line, "view has %d dims, first %lld; expected %d, %lld",
                   ot_tensor_ndim(v), (long long)ot_tensor_dim(v, 0), ndim, (long long)d0);
    ot_tensor_free(v);
}

/* The report: ot_slice(4x4, OT_RANGE(1, INT64_MAX, INT64_MAX))
 * computed stride 4 * INT64_MAX (signed overflow) and gave stride -4. As in
 * Python, that slice is the one row 1. */
TEST(defect14_slice_extreme_bounds_and_steps)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    float v[16];
    for (int i = 0; i < 16; i++) v[i] = (float)i;
    ot_tensor *x = ot_array(be, OT_SHAPE(4, 4), OT_F32, v);
    ot_tensor *s = ot_slice(x, OT_RANGE(1, INT64_MAX, INT64_MAX));
    CHECK(s != NULL);
    if (s) {
        CHECK_INT(ot_tensor_dim(s, 0), 1);
        CHECK_INT(ot_tensor_stride(s, 0), 4);   /* a one-element dim keeps its stride */
        float row[4];
        CHECK_INT(ot_get(s, row), 0);
        CHECK_NEAR(row[0], 4.0, 0);
        ot_tensor_free(s);
    }
    const int64_t M = INT64_MAX, m = INT64_MIN + 1;   /* INT64_MIN is OT_NONE */
    /* Python: len(range(4)[a:b:c]) for each of these */
    struct { int64_t a, b, c, n; } cs[] = {
        {1, M, M, 1},        {0, M, 1, 4},         {m, M, 1, 4},       {M, m, -1, 4},
        {M, m, m, 1},        {-1, m, m, 1},        {m, M, M, 1},       {M, M, 1, 0},
        {m, m, -1, 0},       {OT_NONE, OT_NONE, M, 1}, {OT_NONE, OT_NONE, m, 1},
        {3, OT_NONE, m, 1},  {0, 4, M - 1, 1},     {M, OT_NONE, -2, 2}, {2, 1, M, 0},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        check_view(ot_slice(x, OT_ALL, OT_RANGE(cs[i].a, cs[i].b, cs[i].c)), 2, 4, __LINE__);
        ot_tensor *r = ot_slice(x, OT_RANGE(cs[i].a, cs[i].b, cs[i].c));
        if (!r || ot_tensor_dim(r, 0) != cs[i].n)
            test__fail(__FILE__, __LINE__, "case %zu: %s", i, r ? "wrong count" : ot_errmsg());
        if (r && cs[i].n > 0) {
            float tmp[16];
            CHECK_INT(ot_get(r, tmp), 0);   /* every element is inside x */
        }
        ot_tensor_free(r);
    }
    /* stride * step fits in int64 but would not in bytes: still the dim's own */
    ot_tensor *w = ot_slice(x, OT_ALL, OT_RANGE(2, M, 1LL << 61));
    CHECK(w && ot_tensor_stride(w, 1) == 1 && ot_tensor_dim(w, 1) == 1);
    ot_tensor_free(w);
    ot_clear_error();
    CHECK(ot_slice(x, OT_IDX(INT64_MAX)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "out of bounds");
    CHECK(ot_slice(x, OT_IDX(INT64_MIN)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "out of bounds");
    check_view(ot_slice(x, OT_IDX(-4)), 1, 4, __LINE__);

    /* Slices of a huge broadcast view (stride 0) and of a negative-step view */
    ot_tensor *one = ot_ones(be, OT_SHAPE(1, 1), OT_F32);
    ot_tensor *big = ot_broadcast_to(one, OT_SHAPE(1LL << 40, 1LL << 20));
    check_view(ot_slice(big, OT_RANGE(OT_NONE, OT_NONE, M), OT_RANGE(m, M, 3)), 2, 1, __LINE__);
    check_view(ot_slice(big, OT_RANGE(M, m, -(1LL << 39))), 2, 2, __LINE__);
    ot_tensor *rev = ot_slice(x, OT_RANGE(OT_NONE, OT_NONE, -1));
    check_view(ot_slice(rev, OT_RANGE(M, m, m)), 2, 1, __LINE__);
    check_view(ot_slice(rev, OT_RANGE(1, M, M)), 2, 1, __LINE__);
    ot_tensor_free(rev);
    ot_tensor_free(big);
    ot_tensor_free(one);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* Huge shapes: creation, reshape, broadcast_to and builders refuse sizes
 * that overflow, with OT_EOVERFLOW, and never compute an overflowing
 * stride or numel. */
TEST(defect14_huge_shapes_overflow_is_an_error)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_pool *pool = ot_pool_push();
    ot_clear_error();
    CHECK(ot_empty(be, OT_SHAPE(1LL << 62, 4), OT_F32) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "empty");
    CHECK(ot_zeros(be, OT_SHAPE(INT64_MAX, INT64_MAX), OT_F64) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "zeros");
    CHECK(ot_empty(be, OT_SHAPE(0, INT64_MAX, INT64_MAX), OT_F32) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "empty");

    ot_tensor *one = ot_ones(be, OT_SHAPE(1, 1), OT_F32);
    CHECK(ot_broadcast_to(one, OT_SHAPE(1LL << 62, 1LL << 2)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "broadcast_to");
    CHECK(ot_broadcast_to(one, OT_SHAPE(INT64_MAX, 1)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "broadcast_to");
    ot_tensor *a = ot_broadcast_to(one, OT_SHAPE(1LL << 40, 1));
    ot_tensor *b = ot_broadcast_to(one, OT_SHAPE(1, 1LL << 40));
    CHECK(a && b);

    check_view(ot_reshape(a, OT_SHAPE(1LL << 20, 1LL << 20)), 2, 1LL << 20, __LINE__);
    CHECK(ot_reshape(a, OT_SHAPE(1LL << 62, 1LL << 62, -1)) == NULL);
    CHECK_ERR(OT_ESHAPE, "reshape", "size 1099511627776");
    CHECK(ot_reshape(a, OT_SHAPE(-1, INT64_MAX)) == NULL);
    CHECK_INT(ot_errcode() == OT_ESHAPE || ot_errcode() == OT_EOVERFLOW, 1);
    ot_tensor *e = ot_empty(be, OT_SHAPE(0), OT_F32);
    CHECK(ot_reshape(e, OT_SHAPE(0, 1LL << 62, 1LL << 62)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "reshape");
    check_view(ot_reshape(e, OT_SHAPE(0, 1LL << 40)), 2, 0, __LINE__);
    check_view(ot_transpose(a, NULL), 2, 1, __LINE__);

    /* node shape inference: broadcasting and products that overflow */
    ot_clear_error();
    CHECK(ot_add(a, b) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "add", "(1099511627776,1099511627776)", "test_regress_api.c:");
    ot_clear_error();
    CHECK(ot_dot(a, b) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "dot", "test_regress_api.c:");
    ot_clear_error();
    CHECK(ot_mul(ot_neg(a), ot_T(a)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "mul");
    ot_clear_error();
    CHECK(ot_rand(OT_SHAPE(1LL << 62, 8)) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "rand");
    ot_clear_error();
    int iv[1] = {0};
    ot_tensor *idx = ot_array(be, OT_SHAPE(1), OT_I32, iv);
    ot_tensor *wide = ot_broadcast_to(idx, OT_SHAPE(1LL << 40));
    CHECK(ot_onehot(wide, 1 << 30) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "onehot");

    ot_tensor_free(wide);
    ot_tensor_free(idx);
    ot_tensor_free(e);
    ot_tensor_free(b);
    ot_tensor_free(a);
    ot_tensor_free(one);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* Bad input to any builder: NULL with a message naming the op, the
 * operand shape(s) and the caller's file:line; never a crash. */
TEST(api_builders_bad_input_messages)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(4, 5), OT_F32);
    ot_tensor *i = ot_ones(be, OT_SHAPE(2), OT_I32);
    ot_tensor *x8 = ot_ones(be, OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 2), OT_F32);
    ot_node *nn = NULL;
#define BAD(expr, code, ...)                                                  \
    do {                                                                      \
        ot_clear_error();                                                     \
        CHECK((expr) == NULL);                                                \
        CHECK_ERR(code, "test_regress_api.c:", __VA_ARGS__);                  \
    } while (0)
    BAD(ot_sum(x, 2), OT_EINVAL, "sum: axis 2 is out of bounds", "(2,3)");
    BAD(ot_max(x, -3, true), OT_EINVAL, "max: axis -3", "(2,3)");
    BAD(ot_argmin(x, 9), OT_EINVAL, "argmin", "(2,3)");
    BAD(ot_softmax(x, 3), OT_EINVAL, "softmax", "(2,3)");
    BAD(ot_logsoftmax(x, -5), OT_EINVAL, "logsoftmax", "(2,3)");
    BAD(ot_var(x, 4, 1), OT_EINVAL, "var", "(2,3)");
    BAD(ot_std(x, -4), OT_EINVAL, "std", "(2,3)");
    BAD(ot_cross_entropy(x, y), OT_ESHAPE, "cross_entropy", "(2,3)", "(4,5)");
    BAD(ot_cross_entropy(x, x, 4), OT_EINVAL, "cross_entropy", "(2,3)");
    BAD(ot_squared_l2(x, 3), OT_EINVAL, "squared_l2", "(2,3)");
    BAD(ot_T(x, {0, 0}), OT_EINVAL, "transpose", "not a permutation", "(2,3)");
    BAD(ot_T(x, .perm = {1, 1}), OT_EINVAL, "transpose", "(2,3)");
    BAD(ot_T(x, {0, 1, 2}), OT_EINVAL, "transpose", "(2,3)");
    BAD(ot_T(x, {-1, 0}), OT_EINVAL, "transpose", "(2,3)");
    BAD(ot_cast(x, (ot_dtype)9), OT_EDTYPE, "cast", "dtype 9", "(2,3)");
    BAD(ot_cast(x), OT_EDTYPE, "cast", "(2,3)");
    BAD(ot_onehot(i, 0), OT_EINVAL, "onehot: depth", "(2,)");
    BAD(ot_onehot(i, -3), OT_EINVAL, "onehot", "(2,)");
    BAD(ot_onehot(i, 4, 5), OT_EINVAL, "onehot: axis 5", "(2,)");
    BAD(ot_onehot(i, 4, 0, (ot_dtype)7), OT_EDTYPE, "onehot", "dtype 7", "(2,)");
    BAD(ot_onehot(x8, 3), OT_EINVAL, "onehot", "(1,1,1,1,1,1,1,2)");
    BAD(ot_rand(OT_SHAPE(2), 0, OT_I32), OT_EDTYPE, "rand", "int32");
    BAD(ot_rand(OT_SHAPE(-2, 3)), OT_EINVAL, "rand", "-2");
    BAD(ot_rand(ot_shape_make(9, (int64_t[]){1, 1, 1, 1, 1, 1, 1, 1, 1})), OT_EINVAL, "rand", "9");
    BAD(ot_add(x, y), OT_ESHAPE, "add", "(2,3)", "(4,5)");
    BAD(ot_dot(x, y), OT_ESHAPE, "dot", "(2,3)", "(4,5)");
    BAD(ot_dot(x8, x), OT_EINVAL, "dot", "(1,1,1,1,1,1,1,2)");
    BAD(ot_batched_dot(x, y), OT_EINVAL, "batched_dot", "(4,5)");
    BAD(ot_dot(i, i), OT_EDTYPE, "dot", "(2,) and (2,)");
    BAD(ot_add(x, nn), OT_ENULL, "add: operand 2");
    BAD(ot_neg(nn), OT_ENULL, "neg");
    BAD(ot_sum(nn, 1), OT_ENULL, "sum");
    BAD(ot_onehot(nn, 3), OT_ENULL, "onehot");
    BAD(ot_cross_entropy(x, nn), OT_ENULL, "cross_entropy");
    BAD(ot_T(nn, {1, 0}), OT_ENULL, "transpose");
    BAD(ot_clip(nn, 0, 1), OT_ENULL, "clip");
#undef BAD
    /* A perm not written still reverses; a written identity is kept. */
    ot_node *r = ot_T(x);
    CHECK(r && ot_node_shape(r).dims[0] == 3);
    r = ot_T(x, {0, 1});
    CHECK(r && ot_node_shape(r).dims[0] == 2);
    ot_tensor *v = ot_ones(be, OT_SHAPE(5), OT_F32);
    CHECK(ot_T(v, {0}) != NULL);

    /* tensor views: op and shape in the message */
    ot_clear_error();
    CHECK(ot_slice(x, OT_ALL, OT_RANGE(0, 2, 0)) == NULL);
    CHECK_ERR(OT_EINVAL, "slice", "zero", "axis 1", "(2,3)");
    CHECK(ot_transpose(x, (int[]){1, 1}) == NULL);
    CHECK_ERR(OT_EINVAL, "transpose", "(1,1)", "(2,3)");
    ot_tensor_free(v);
    ot_tensor_free(x8);
    ot_tensor_free(i);
    ot_tensor_free(y);
    ot_tensor_free(x);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

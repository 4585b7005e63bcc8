/*
 * test_backend.c - backend objects: names, options and their defaults, the
 * OT_BACKEND override, stats counters; and the ot_shape_make helper.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <stdlib.h>

TEST(backend_defaults_filled_in)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    CHECK_STR(ot_backend_name(be), "ref");
    ot_backend_opts o = ot_backend_options(be);
    CHECK_INT(o.dtype, OT_F32);
    CHECK_INT(o.threads, 0);
    CHECK_INT(o.accuracy, OT_ULP10);
    CHECK(o.plan_cache > 0);
    CHECK_INT(o.fusion, OT_FUSION_ON);
    ot_backend_free(be);
}

TEST(backend_options_kept)
{
    ot_backend *be = ot_backend_new("ref", &(ot_backend_opts){
        .threads = 3, .seed = 42, .dtype = OT_F64, .accuracy = OT_ULP35,
        .plan_cache = 7, .fusion = OT_FUSION_OFF});
    ot_backend_opts o = ot_backend_options(be);
    CHECK_INT(o.threads, 3);
    CHECK_INT(o.seed, 42);
    CHECK_INT(o.dtype, OT_F64);
    CHECK_INT(o.accuracy, OT_ULP35);
    CHECK_INT(o.plan_cache, 7);
    CHECK_INT(o.fusion, OT_FUSION_OFF);
    /* The default dtype applies to tensors created with OT_DTYPE_DEFAULT. */
    ot_tensor *t = ot_zeros(be, OT_SHAPE(2), OT_DTYPE_DEFAULT);
    CHECK_INT(ot_tensor_dtype(t), OT_F64);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(backend_bad_options)
{
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.threads = -1}) == NULL);
    CHECK_ERR(OT_EINVAL, "backend_new", "threads");
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.dtype = OT_I32}) == NULL);
    CHECK_ERR(OT_EINVAL, "dtype");
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.accuracy = 9}) == NULL);
    CHECK_ERR(OT_EINVAL, "accuracy");
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.fusion = 5}) == NULL);
    CHECK_ERR(OT_EINVAL, "fusion");
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.plan_cache = -2}) == NULL);
    CHECK_ERR(OT_EINVAL, "plan_cache");
}

TEST(backend_env_override)
{
    setenv("OT_BACKEND", "ref", 1);
    ot_backend *be = ot_backend_new("no-such-backend", NULL);
    CHECK(be != NULL);
    CHECK_STR(ot_backend_name(be), "ref");
    ot_backend_free(be);
    setenv("OT_BACKEND", "no-such-backend", 1);
    CHECK(ot_backend_new("ref", NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "no-such-backend");
    unsetenv("OT_BACKEND");
}

TEST(backend_null_and_free)
{
    ot_backend_free(NULL);
    CHECK(ot_backend_name(NULL) == NULL);
    ot_stats s;
    CHECK_INT(ot_stats(NULL, &s), OT_ENULL);
    CHECK_ERR(OT_ENULL, "stats");
    ot_backend *be = ot_backend_new(NULL, NULL);   /* NULL names the default */
    CHECK(be != NULL);
    CHECK_INT(ot_stats(be, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "stats");
    ot_backend_free(be);
}

TEST(backend_stats_count_work)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *x = ot_ones(be, OT_SHAPE(4), OT_F32), *y = ot_empty(be, OT_SHAPE(4), OT_F32);
    ot_stats a, b;
    CHECK_INT(ot_stats(be, &a), 0);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(y, ot_add(ot_mul(x, 2.0f), 1.0f)), 0);
    ot_pool_pop(p);
    CHECK_INT(ot_stats(be, &b), 0);
    CHECK_INT(b.assigns - a.assigns, 1);
    CHECK_INT(b.nodes - a.nodes, 2);
    CHECK(b.bytes_moved > a.bytes_moved);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(shape_make_and_macro)
{
    int64_t d[3] = {2, 3, 4};
    ot_shape s = ot_shape_make(3, d);
    CHECK_INT(s.ndim, 3);
    CHECK_INT(s.dims[2], 4);
    CHECK_INT(s.dims[3], 0);
    ot_shape z = OT_SHAPE();
    CHECK_INT(z.ndim, 0);
    ot_shape m = OT_SHAPE(5, 6);
    CHECK_INT(m.ndim, 2);
    CHECK_INT(m.dims[1], 6);
    /* More dims than fit keeps the count so creation can report it. */
    ot_shape big = OT_SHAPE(1, 1, 1, 1, 1, 1, 1, 1, 1);
    CHECK_INT(big.ndim, 9);
}

TEST(explain_on_both_backends)
{
    ot_backend *ref = ot_backend_new("ref", NULL), *cpu = ot_backend_new("cpu", NULL);
    ot_tensor *xr = ot_ones(ref, OT_SHAPE(3, 4), OT_F32), *xc = ot_ones(cpu, OT_SHAPE(3, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    char *r = test__capture(ot_explain, ot_exp(ot_add(xr, 1.0f)));
    CHECK(r && strstr(r, "ref backend") && strstr(r, "exp"));
    free(r);
    char *c = test__capture(ot_explain, ot_sum(ot_exp(ot_add(xc, 1.0f)), .axis = 1));
    CHECK(c && strstr(c, "plan: 1 kernel") && strstr(c, "reduce sum") && strstr(c, "add exp"));
    free(c);
    CHECK_INT(ot_explain(NULL, stdout), OT_ENULL);
    CHECK_ERR(OT_ENULL, "explain");
    CHECK_INT(ot_explain(ot_exp(xc), NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "FILE");
    CHECK_INT(ot_explain(ot_exp(ot_const(1.0)), stdout), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "leaf");
    /* The cpu backend counts the distinct op nodes it evaluates. */
    ot_stats s0, s1;
    ot_stats(cpu, &s0);
    ot_tensor *y = ot_empty(cpu, OT_SHAPE(3, 4), OT_F32);
    CHECK_INT(ot_assign(y, ot_exp(ot_add(xc, 1.0f))), 0);
    ot_stats(cpu, &s1);
    CHECK_INT(s1.nodes - s0.nodes, 2);
    ot_tensor_free(y);
    ot_pool_pop(p);
    ot_tensor_free(xr);
    ot_tensor_free(xc);
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

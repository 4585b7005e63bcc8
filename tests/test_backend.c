/*
 * test_backend.c - backend objects: names, options, their defaults and what
 * is in force, the environment overrides, stats counters; and the
 * ot_shape_make helper.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "cpu.h"

#include <limits.h>
#include <math.h>
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
    CHECK(ot_backend_new("cpu", &(ot_backend_opts){.jit = 3}) == NULL);
    CHECK_ERR(OT_EINVAL, "jit");
    CHECK(ot_backend_new("cpu", &(ot_backend_opts){.stream_bytes = -2}) == NULL);
    CHECK_ERR(OT_EINVAL, "stream_bytes");
    CHECK(ot_backend_new("cpu", &(ot_backend_opts){.isa = "AVX2"}) == NULL);
    CHECK_ERR(OT_EINVAL, "isa must be NULL or one of scalar, sse2, avx2, avx512, neon");
    /* Checked on ref too, though only cpu uses them: a typo stays a typo. */
    CHECK(ot_backend_new("ref", &(ot_backend_opts){.isa = "neon2"}) == NULL);
    CHECK_ERR(OT_EINVAL, "isa must be");
}

/* The environment variables that override options, saved and cleared so a
 * case sees only what it sets, then restored. */
static const char *const config_vars[] = {"OT_BACKEND", "OT_ISA", "OT_JIT", "OT_STREAM_BYTES",
                                          "OT_FUSION", "OT_L3_BYTES", "OT_L2_BYTES"};
#define NCONFIG_VARS (int)(sizeof config_vars / sizeof config_vars[0])

static void env_save(char *saved[NCONFIG_VARS]) { test__env_save(NCONFIG_VARS, config_vars, saved, NULL); }

static void env_restore(char *saved[NCONFIG_VARS]) { test__env_restore(NCONFIG_VARS, config_vars, saved); }

static ot_backend_opts cpu_options(ot_backend_opts asked)
{
    ot_backend *be = ot_backend_new("cpu", &asked);
    CHECK(be != NULL);
    ot_backend_opts o = be ? ot_backend_options(be) : (ot_backend_opts){0};
    ot_backend_free(be);
    return o;
}

static bool isa_runs(const char *isa)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.isa = isa});
    ot_backend_free(be);
    return be != NULL;
}

/* The last-level cache's size comes from sysfs; where sysfs does not list
 * the caches, CPUID's cache leaves give it (the deterministic leaves, else
 * AMD's 0x80000006, which VMs without topology extensions keep), and both
 * agree where both exist. */
TEST(backend_llc_from_cpuid)
{
    size_t cpuid = ot__llc_cpuid();
    FILE *f = fopen("/sys/devices/system/cpu/cpu0/cache/index3/size", "r");
    unsigned long kib = 0;
    bool sysfs = f && fscanf(f, "%luK", &kib) == 1;
    if (f) fclose(f);
#if defined(__x86_64__)
    CHECK(cpuid >= (size_t)256 << 10);
#endif
    if (sysfs && cpuid) CHECK_INT((long long)cpuid, (long long)kib << 10);
}

/* ot_backend_options reports the configuration in force: the ISA chosen,
 * whether code is generated, the streaming threshold. */
TEST(backend_cpu_options_in_force)
{
    char *saved[NCONFIG_VARS];
    env_save(saved);
    ot_backend_opts o = cpu_options((ot_backend_opts){0});
    CHECK(o.isa != NULL);
    const char *best = isa_runs("avx512") ? "avx512" : isa_runs("avx2") ? "avx2"
                       : isa_runs("sse2") ? "sse2" : isa_runs("neon") ? "neon" : "scalar";
    if (o.isa) CHECK_STR(o.isa, best);
    CHECK(o.stream_bytes > 0);
#if defined(__x86_64__) && defined(__linux__)
    CHECK_INT(o.jit, strcmp(best, "avx2") == 0 || strcmp(best, "avx512") == 0 ? OT_JIT_ON
                                                                             : OT_JIT_OFF);
#endif
    o = cpu_options((ot_backend_opts){.isa = "scalar", .jit = OT_JIT_ON, .stream_bytes = 4096});
    if (o.isa) CHECK_STR(o.isa, "scalar");
    CHECK_INT(o.jit, OT_JIT_OFF);   /* the scalar table has no generated code */
    CHECK_INT(o.stream_bytes, 4096);
    o = cpu_options((ot_backend_opts){.jit = OT_JIT_OFF, .stream_bytes = OT_STREAM_NEVER});
    CHECK_INT(o.jit, OT_JIT_OFF);
    CHECK_INT(o.stream_bytes, OT_STREAM_NEVER);
    /* The caller's string is not kept: the reported name is the library's. */
    char isa[] = "scalar";
    o = cpu_options((ot_backend_opts){.isa = isa});
    CHECK(o.isa != isa);
    ot_backend *ref = ot_backend_new("ref", &(ot_backend_opts){.isa = "sse2", .jit = OT_JIT_ON});
    o = ot_backend_options(ref);
    CHECK(o.isa == NULL);
    CHECK_INT(o.jit, OT_JIT_OFF);
    CHECK_INT(o.stream_bytes, OT_STREAM_NEVER);
    ot_backend_free(ref);
    env_restore(saved);
}

/* The environment overrides the options, and the report says so. */
TEST(backend_env_overrides_options)
{
    char *saved[NCONFIG_VARS];
    env_save(saved);
    ot_backend_opts asked = {.isa = "sse2", .jit = OT_JIT_ON, .stream_bytes = 4096,
                             .fusion = OT_FUSION_OFF};
    setenv("OT_ISA", "scalar", 1);
    setenv("OT_JIT", "0", 1);
    setenv("OT_STREAM_BYTES", "0", 1);
    setenv("OT_FUSION", "1", 1);
    ot_backend_opts o = cpu_options(asked);
    if (o.isa) CHECK_STR(o.isa, "scalar");
    CHECK_INT(o.jit, OT_JIT_OFF);
    CHECK_INT(o.stream_bytes, OT_STREAM_NEVER);
    CHECK_INT(o.fusion, OT_FUSION_ON);
    setenv("OT_STREAM_BYTES", "123", 1);
    setenv("OT_FUSION", "0", 1);
    o = cpu_options((ot_backend_opts){0});
    CHECK_INT(o.stream_bytes, 123);
    CHECK_INT(o.fusion, OT_FUSION_OFF);
    /* Empty is unset; a bad value is named with its variable. */
    setenv("OT_STREAM_BYTES", "", 1);
    o = cpu_options((ot_backend_opts){.stream_bytes = 77});
    CHECK_INT(o.stream_bytes, 77);
    setenv("OT_STREAM_BYTES", "1e3", 1);
    CHECK(ot_backend_new("ref", NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "OT_STREAM_BYTES=1e3 is not a byte count");
    env_restore(saved);
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
    CHECK_ERR(OT_EBACKEND, "no-such-backend", "(known: ref, cpu)");   /* backends.def's rows */
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

/* Tensors and programs that outlive ot_backend_free keep it alive (no
 * read of freed memory), and using them is OT_EBACKEND: assignments,
 * explain, new tensors, autodiff and program calls. Freeing the tensors
 * after the backend frees everything (ASan's leak check sees the rest). */
static void outlived(const char *bn)
{
    ot_backend *be = ot_backend_new(bn, NULL);
    CHECK(be != NULL);
    ot_tensor *x = ot_full(be, OT_SHAPE(4), OT_F32, 2.0), *o = ot_empty(be, OT_SHAPE(4), OT_F32);
    ot_tensor *v = ot_slice(x, OT_RANGE(1, 3));
    CHECK_INT(ot_assign(o, ot_exp(x)), 0);
    ot_program *pr = ot_program_new(be);
    CHECK_INT(ot_program_assign(pr, o, ot_neg(x)), 0);
    CHECK_INT(ot_program_compile(pr), 0);
    ot_pool *p = ot_pool_push();
    ot_node *tree = ot_tanh(x);
    ot_backend_free(be);
    CHECK_INT(ot_errcode(), 0);
    float got[4];
    CHECK_INT(ot_get(o, got), 0);   /* host memory stays readable */
    CHECK(fabsf(got[0] - expf(2.0f)) < 1e-5f);
    CHECK_INT(ot_assign(o, tree), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "test_backend.c:", "assign: output 0 is on backend", "which "
              "ot_backend_free has freed");
    FILE *sink = fopen("/dev/null", "w");
    CHECK(sink != NULL);
    if (sink) {   /* explaining only reads: it still works */
        CHECK_INT(ot_explain(tree, sink), 0);
        fclose(sink);
    }
    CHECK(ot_eval(tree) == NULL);
    CHECK_ERR(OT_EBACKEND, "test_backend.c:", "eval: the tree is on backend");
    CHECK(ot_program_placeholder(pr, "late", OT_SHAPE(2), OT_F32) == NULL);
    CHECK_ERR(OT_EBACKEND, "test_backend.c:", "program_placeholder: the program is on backend");
    CHECK(ot_empty(be, OT_SHAPE(2), OT_F32) == NULL);
    CHECK_ERR(OT_EBACKEND, "the new tensor is on backend");
    CHECK(ot_autodiff_new(ot_sum(tree), NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "autodiff_new");
    CHECK_INT(ot_program_run(pr, 0, NULL), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "program_run: the program is on backend");
    CHECK(ot_program_new(be) == NULL);
    CHECK(ot_model_new(be, 4) == NULL);
    CHECK_ERR(OT_EBACKEND, "model_new");
    CHECK(ot_wrap(be, OT_SHAPE(4), OT_F32, got, NULL, NULL, NULL) == NULL);
    CHECK_ERR(OT_EBACKEND, "wrap");
    CHECK_INT(ot_program_variables(pr, 0, NULL), 0);   /* reading the program still works */
    ot_backend_free(be);   /* twice, while tensors hold it: refused */
    CHECK_ERR(OT_EBACKEND, "backend_free", "was freed already");
    ot_pool_pop(p);
    ot_program_free(pr);
    ot_tensor_free(v);
    ot_tensor_free(x);
    ot_tensor_free(o);   /* the last: the backend goes with it */
}

TEST(backend_outlived_by_its_tensors)
{
    outlived("ref");
    outlived("cpu");
}

/* A model holds its backend as a tensor does: freed first, the backend
 * stays for the model, which then cannot add layers (OT_EBACKEND, never a
 * read of freed memory), even one without parameters. */
TEST(backend_outlived_by_a_model)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_model *m = ot_model_new(be, 4);
    CHECK(m != NULL);
    ot_backend_free(be);
    CHECK_INT(ot_model_linear(m, 3, OT_ACT_NONE, 1), OT_EBACKEND);
    CHECK_ERR(OT_EBACKEND, "which ot_backend_free has freed");
    ot_model_free(m);   /* the last hold: the backend goes with it */
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

/* ot_explain says at which accuracy each kernel's inexact ops run: the
 * setting's SLEEF column (exp has no u35 and stays u10; sig follows exp),
 * and nothing for exact ops. */
TEST(backend_explain_accuracy)
{
    static const char *const want[2][3] = {
        {"[accuracy: tanh u10]", "[accuracy: sig u10, log u10]", "[accuracy: exp u10]"},
        {"[accuracy: tanh u35]", "[accuracy: sig u10, log u35]", "[accuracy: exp u10]"}};
    for (int acc = 0; acc < 2; acc++) {
        ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.accuracy = acc ? OT_ULP35 : OT_ULP10});
        ot_tensor *x = ot_empty(be, OT_SHAPE(4, 40), OT_F32);
        ot_pool *p = ot_pool_push();
        char *t[4] = {test__capture(ot_explain, ot_tanh(ot_add(ot_mul(x, x), 1.0f))),
                      test__capture(ot_explain, ot_add(ot_sig(x), ot_log(x))),
                      test__capture(ot_explain, ot_softmax(x, .axis = 1)),
                      test__capture(ot_explain, ot_add(ot_div(x, 3.0f), ot_sqrt(x)))};
        for (int i = 0; i < 3; i++) {
            CHECK(t[i] && strstr(t[i], want[acc][i]));
            if (t[i] && !strstr(t[i], want[acc][i])) fprintf(stderr, "%s", t[i]);
        }
        CHECK(t[3] && !strstr(t[3], "accuracy"));
        for (int i = 0; i < 4; i++) free(t[i]);
        ot_pool_pop(p);
        ot_tensor_free(x);
        ot_backend_free(be);
    }
}

/* The cache a process can count on is at most 4 MiB a CPU it may run on: a
 * VM reports its host's whole L3 (300 MiB on a 2-vCPU guest), where the
 * streaming threshold would keep every W1-sized kernel from streaming. */
TEST(backend_cache_share_policy)
{
    const size_t mib = (size_t)1 << 20;
    CHECK(ot__cache_share(300 * mib, 2) == 8 * mib);
    CHECK(ot__cache_share(300 * mib, 64) == 256 * mib);
    CHECK(ot__cache_share(32 * mib, 2) == 8 * mib);
    CHECK(ot__cache_share(32 * mib, 8) == 32 * mib);
    CHECK(ot__cache_share(8 * mib, 2) == 8 * mib);
    CHECK(ot__cache_share(8 * mib, 1) == 4 * mib);
    CHECK(ot__cache_share(3 * mib, 16) == 3 * mib);
    CHECK(ot__cache_share(32 * mib, 0) == 32 * mib);   /* unknown: as reported */
    CHECK(ot__cache_share(32 * mib, LONG_MAX) == 32 * mib);
}

/* OT_L3_BYTES simulates another machine's last-level cache: the default
 * streaming threshold is that cache's share for this process, whatever the
 * machine reports; stream_bytes (and OT_STREAM_BYTES) still win; a value
 * that is not a byte count is an error naming it. */
TEST(backend_l3_bytes_simulated)
{
    char *saved[NCONFIG_VARS];
    env_save(saved);
    long cpus = ot__usable_cpus();
    const size_t mib = (size_t)1 << 20, sizes[] = {300 * mib, 32 * mib, 8 * mib};
    for (int i = 0; i < 3; i++) {
        char v[32];
        snprintf(v, sizeof v, "%zu", sizes[i]);
        setenv("OT_L3_BYTES", v, 1);
        ot_backend_opts o = cpu_options((ot_backend_opts){0});
        CHECK(o.stream_bytes == (int64_t)ot__cache_share(sizes[i], cpus));
        CHECK(o.stream_bytes <= (int64_t)sizes[i] && o.stream_bytes > 0);
        o = cpu_options((ot_backend_opts){.stream_bytes = 4096});
        CHECK(o.stream_bytes == 4096);
    }
    setenv("OT_L3_BYTES", "12k", 1);
    CHECK(ot_backend_new("cpu", NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "OT_L3_BYTES=12k is not a byte count");
    setenv("OT_L3_BYTES", "", 1);   /* empty: unset, the machine's */
    ot_backend_opts o = cpu_options((ot_backend_opts){0});
    CHECK(o.stream_bytes > 0);
    env_restore(saved);
}

/* OT_L2_BYTES simulates another machine's L2: a GEMM panel is half of it
 * (within ot__gemm_panel_bytes's bounds), whatever the machine reports. */
TEST(backend_l2_bytes_simulated)
{
    char *saved[NCONFIG_VARS];
    env_save(saved);
    setenv("OT_L3_BYTES", "314572800", 1);
    const size_t kib = 1024, sizes[] = {512 * kib, 1024 * kib, 2048 * kib};
    for (int i = 0; i < 3; i++) {
        char v[32];
        snprintf(v, sizeof v, "%zu", sizes[i]);
        setenv("OT_L2_BYTES", v, 1);
        ot_backend *be = ot_backend_new("cpu", NULL);
        CHECK(be != NULL);
        if (be)
            CHECK_INT((long long)((const ot_cpu *)be->impl)->panel_bytes,
                      (long long)ot__gemm_panel_bytes(sizes[i], (size_t)300 << 20, ot__usable_cpus()));
        ot_backend_free(be);
    }
    setenv("OT_L2_BYTES", "1M", 1);
    CHECK(ot_backend_new("cpu", NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "OT_L2_BYTES=1M is not a byte count");
    env_restore(saved);
}

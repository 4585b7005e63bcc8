/*
 * test_blas_core.c - the GEMM core selection (src/cpu/blas_core.c): the
 * policy as a function of (core, CPU features, OT_BLAS_CORE,
 * OPENBLAS_CORETYPE, the build's cores), OT_BLAS_CORE's parsing, the check
 * of a product against the C loop, the fallbacks on a library playing wrong
 * products, and ot_explain's gemm line.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include "blas.h"
#include "blas_cores.h"
#include "internal.h"

#include <stdlib.h>

enum {
    F_AVX2 = OT__BLAS_F_AVX | OT__BLAS_F_AVX2 | OT__BLAS_F_FMA,
    F_AVX512 = F_AVX2 | OT__BLAS_F_AVX512F | OT__BLAS_F_AVX512BW | OT__BLAS_F_AVX512DQ |
               OT__BLAS_F_AVX512VL,
};

TEST(blas_cpu_class)
{
    CHECK_INT(ot__blas_cpu_class(0), OT__BLAS_SSE);
    CHECK_INT(ot__blas_cpu_class(OT__BLAS_F_AVX), OT__BLAS_AVX);
    CHECK_INT(ot__blas_cpu_class(OT__BLAS_F_AVX | OT__BLAS_F_AVX2), OT__BLAS_AVX);   /* no FMA */
    CHECK_INT(ot__blas_cpu_class(F_AVX2), OT__BLAS_AVX2);
    CHECK_INT(ot__blas_cpu_class(F_AVX2 | OT__BLAS_F_AVX512F), OT__BLAS_AVX2);   /* F alone */
    CHECK_INT(ot__blas_cpu_class(F_AVX512), OT__BLAS_AVX512);
}

static bool no_skylakex(const char *name) { return strcmp(name, "SkylakeX") != 0; }

TEST(blas_pick_policy)
{
    static const struct {
        const char *core;
        unsigned features;
        const char *request, *user, *want, *why;
    } cases[] = {
        {"Prescott", F_AVX512, "auto", NULL, "SkylakeX", "narrower"},
        {"Nehalem", F_AVX512, "auto", NULL, "SkylakeX", "narrower"},
        {"Sandybridge", F_AVX512, "auto", NULL, "SkylakeX", "narrower"},
        {"Prescott", F_AVX2, "auto", NULL, "Haswell", "narrower"},
        {"Sandybridge", F_AVX2, "auto", NULL, "Haswell", "narrower"},
        {"Haswell", F_AVX2, "auto", NULL, NULL, "as wide"},
        {"Zen", F_AVX2, "auto", NULL, NULL, "as wide"},
        {"Haswell", F_AVX512, "auto", NULL, "SkylakeX", "narrower"},
        {"SkylakeX", F_AVX512, "auto", NULL, NULL, "as wide"},
        {"Cooperlake", F_AVX512, "auto", NULL, NULL, "as wide"},
        {"Prescott", OT__BLAS_F_AVX, "auto", NULL, NULL, "no core wider than Prescott"},
        {"Prescott", 0, "auto", NULL, NULL, "as wide"},
        {"ARMV8", 0, "auto", NULL, NULL, "not in optree's table"},
        {NULL, F_AVX512, "auto", NULL, NULL, "not OpenBLAS"},
        {"Prescott", F_AVX512, "keep", NULL, NULL, "OT_BLAS_CORE=keep"},
        {"Prescott", F_AVX512, "auto", "Prescott", NULL, "OPENBLAS_CORETYPE=Prescott"},
        {"Prescott", F_AVX512, "SkylakeX", "Nehalem", NULL, "set by the user"},
        {"Prescott", F_AVX512, "Haswell", NULL, "Haswell", "OT_BLAS_CORE=Haswell"},
        {"SkylakeX", F_AVX512, "Prescott", NULL, "Prescott", "OT_BLAS_CORE=Prescott"},
        {"Prescott", F_AVX2, "SkylakeX", NULL, NULL, "lacks"},
        {"Haswell", F_AVX2, "Haswell", NULL, NULL, "OT_BLAS_CORE=Haswell"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char why[240] = "";
        int cls = ot__blas_cpu_class(cases[i].features);
        const char *got = ot__blas_pick(cases[i].core, cls, cases[i].request, cases[i].user,
                                        NULL, why, sizeof why);
        if (!(got ? cases[i].want && strcmp(got, cases[i].want) == 0 : !cases[i].want) ||
            !strstr(why, cases[i].why))
            test__fail(__FILE__, __LINE__, "case %zu (%s, %s): %s [%s], expected %s [%s]", i,
                       cases[i].core ? cases[i].core : "-", cases[i].request, got ? got : "keep",
                       why, cases[i].want ? cases[i].want : "keep", cases[i].why);
    }
    /* A build without the AVX-512 kernels: the next widest. */
    char why[240];
    const char *got = ot__blas_pick("Prescott", OT__BLAS_AVX512, "auto", NULL, no_skylakex, why,
                                    sizeof why);
    CHECK_STR(got, "Haswell");
    CHECK(!ot__blas_pick("Prescott", OT__BLAS_AVX512, "SkylakeX", NULL, no_skylakex, why,
                         sizeof why));
    CHECK(strstr(why, "no such core"));
}

/* OT_BLAS_CORE as config.c reads it (the ref backend: nothing settles). */
TEST(blas_core_env)
{
    static const char *const good[] = {"keep", "auto", "SkylakeX", "Haswell", "Prescott"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        setenv("OT_BLAS_CORE", good[i], 1);
        ot_backend *be = ot_backend_new("ref", NULL);
        CHECK(be && strcmp(be->blas_core, good[i]) == 0);
        ot_backend_free(be);
    }
    unsetenv("OT_BLAS_CORE");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be && strcmp(be->blas_core, "auto") == 0);
    ot_backend_free(be);
    static const char *const bad[] = {"skylake", "SkylakeX ", "none", "1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setenv("OT_BLAS_CORE", bad[i], 1);
        CHECK(!ot_backend_new("cpu", NULL));
        CHECK_ERR(OT_EINVAL, "OT_BLAS_CORE=", "keep, auto or an OpenBLAS");
    }
    unsetenv("OT_BLAS_CORE");
}

/* ot__gemm_blas with one element of the last row of every product off by
 * a little more than rounding allows. */
static void one_element_off(const ot__gemm *g)
{
    ot__gemm_blas(g);
    int64_t at = (g->m - 1) * g->ldc + g->n / 2;
    if (g->dt == OT_F32) ((float *)g->c)[at] += 0.01f;
    else ((double *)g->c)[at] += 1e-9;
}

TEST(blas_gemm_check)
{
    char why[160] = "";
    CHECK(ot__gemm_agrees(ot__gemm_loop, why, sizeof why));
    CHECK(ot__gemm_agrees(ot__gemm_blas, why, sizeof why));
    CHECK(!ot__gemm_agrees(one_element_off, why, sizeof why));
    CHECK(strstr(why, "sgemm NN 101x100x101: C[100,50]"));
}

/* A library whose core is a string and whose products are right on the
 * cores in `good`. */
static char fake_now[24];
static const char *fake_good;
static bool fake_sets = true;
static const char *fake_core(void) { return fake_now; }
static bool fake_set(const char *name)
{
    if (fake_sets) snprintf(fake_now, sizeof fake_now, "%s", name);
    return fake_sets;
}
static bool fake_agrees(char *why, size_t n)
{
    snprintf(why, n, "played wrong");
    return fake_good && strstr(fake_good, fake_now);
}
static const ot__blas_ops fake = {fake_core, fake_set, NULL, fake_agrees};

static void settle(const char *core, const char *good, bool sets, ot__blas_state *st)
{
    snprintf(fake_now, sizeof fake_now, "%s", core);
    fake_good = good;
    fake_sets = sets;
    ot__blas_settle(&fake, "auto", OT__BLAS_AVX512, NULL, st);
}

TEST(blas_settle_fallbacks)
{
    ot__blas_state st;
    settle("Prescott", "Prescott SkylakeX", true, &st);   /* the switch */
    CHECK(strcmp(st.was, "Prescott") == 0 && strcmp(st.now, "SkylakeX") == 0 && !st.loop);
    settle("Prescott", "Prescott", true, &st);   /* SkylakeX wrong: back */
    CHECK(strcmp(st.now, "Prescott") == 0 && !st.loop);
    CHECK(strstr(st.why, "SkylakeX disagreed with the C product (played wrong)"));
    settle("Prescott", NULL, true, &st);   /* both wrong: the C loop */
    CHECK(st.loop && strstr(st.why, "Prescott disagreed"));
    settle("Prescott", "Prescott SkylakeX", false, &st);   /* the switch does not take */
    CHECK(strcmp(st.now, "Prescott") == 0 && !st.loop &&
          strstr(st.why, "switching to SkylakeX failed"));
    settle("SkylakeX", NULL, true, &st);   /* no switch, wrong: the C loop */
    CHECK(st.loop && strcmp(st.now, "SkylakeX") == 0);
}

static const char *dot_explain(ot_backend *be, float *got)
{
    ot_tensor *a = ot_full(be, OT_SHAPE(9, 7), OT_F32, 0.5);
    ot_tensor *b = ot_full(be, OT_SHAPE(7, 5), OT_F32, 0.25);
    ot_tensor *c = ot_empty(be, OT_SHAPE(9, 5), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *t = ot_dot(a, b);
    static char text[4096];
    char *s = test__capture(ot_explain, t);
    snprintf(text, sizeof text, "%s", s ? s : "");
    free(s);
    CHECK_INT(ot_assign(c, t), 0);
    ot_pool_pop(p);
    CHECK_INT(ot_get_n(c, got, sizeof(float) * 45), 0);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(c);
    return text;
}

/* A process whose library plays wrong products on every core runs its
 * dots in the C loop, and says so (a forked case settles its own process;
 * in one process, OT_TEST_NOFORK, another case may have settled it). */
TEST(blas_loop_fallback_runs_dots)
{
    snprintf(fake_now, sizeof fake_now, "Prescott");
    fake_good = NULL;
    fake_sets = true;
    if (!ot__blas_setup_with(&fake, "auto")) return;
    CHECK(ot__blas_loop());
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    float got[45];
    const char *text = dot_explain(be, got);
    CHECK(strstr(text, "  gemm: C loop (the BLAS's products were wrong)"));
    for (int i = 0; i < 45; i++) CHECK(got[i] == 0.875f);
    ot_backend_free(be);
}

/* The real library: ot_explain's line names it and its rate. */
TEST(blas_explain_line)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    float got[45];
    const char *text = dot_explain(be, got);
    const ot__blas_state *st = ot__blas_state_get();
    CHECK(strstr(text, "  gemm: ") && strstr(text, " GFLOP/s on "));
    if (!st->loop && st->now[0]) {
        char core[40];
        snprintf(core, sizeof core, " core %s", st->now);
        CHECK(strstr(text, core));
    }
    for (int i = 0; i < 45; i++) CHECK(got[i] == 0.875f);
    ot_backend_free(be);
}

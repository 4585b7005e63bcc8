/*
 * test_backend_iface.c - the backend as an interface: a backend written
 * here (a wrapper of ref that counts the calls of its vtable), registered
 * by name, makes tensors, assigns, explains and runs a training program
 * through its vtable alone; a backend without an explain slot says so; and
 * a cpu program runs its prepared plans, not assignments.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"
#include "front.h"
#include "ref.h"

#include <stdlib.h>

static struct {
    int init, assign, destroy, explain;
} calls;

static int counting_init(ot_backend *be)
{
    calls.init++;
    return ot__ref_vt.init ? ot__ref_vt.init(be) : 0;
}

static int counting_assign(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    calls.assign++;
    return ot__ref_vt.assign_many(be, n, outs, trees);
}

static void counting_destroy(ot_backend *be)
{
    calls.destroy++;
    if (ot__ref_vt.destroy) ot__ref_vt.destroy(be);
}

static int counting_explain(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                            FILE *f)
{
    calls.explain++;
    return ot__ref_vt.explain(be, n, outs, trees, f);
}

/* No plan slots: programs take the generic path (a step, an assign). */
static const ot_backend_vt counting_vt = {
    .name = "counting",
    .init = counting_init,
    .assign_many = counting_assign,
    .destroy = counting_destroy,
    .explain = counting_explain,
};

static ot_backend *counting_backend(void)
{
    unsetenv("OT_BACKEND");
    CHECK_INT(ot__backend_register("counting", &counting_vt), 0);
    memset(&calls, 0, sizeof calls);
    ot_backend *be = ot_backend_new("counting", NULL);
    CHECK(be != NULL);
    return be;
}

TEST(backend_iface_register)
{
    ot_backend *be = counting_backend();
    CHECK_INT(calls.init, 1);
    CHECK_STR(ot_backend_name(be), "counting");
    /* registering the same pair again is harmless; a taken name is not */
    CHECK_INT(ot__backend_register("counting", &counting_vt), 0);
    CHECK_INT(ot__backend_register("ref", &counting_vt), OT_EINVAL);
    CHECK_ERR(OT_EINVAL, "\"ref\" exists");
    /* the vtable says it uses no cpu options: reported as not in force */
    ot_backend_opts o = ot_backend_options(be);
    CHECK(o.isa == NULL);
    CHECK_INT(o.jit, OT_JIT_OFF);
    CHECK_INT(o.stream_bytes, OT_STREAM_NEVER);
    ot_backend_free(be);
    CHECK_INT(calls.destroy, 1);
}

TEST(backend_iface_assign_and_explain)
{
    ot_backend *be = counting_backend();
    ot_tensor *a = ot_array(be, OT_SHAPE(3), OT_F32, ((float[]){1, 2, 3}));
    ot_tensor *out = ot_empty(be, OT_SHAPE(3), OT_F32);
    CHECK_INT(ot_assign(out, ot_mul(ot_add(a, 1.0), 2.0)), 0);
    CHECK_INT(calls.assign, 1);
    float h[3];
    CHECK_INT(ot_get(out, h), 0);
    CHECK_NEAR(h[0], 4, 0);
    CHECK_NEAR(h[2], 8, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(ot_explain(ot_add(a, 1.0), f), 0);
    fclose(f);
    CHECK_INT(calls.explain, 1);
    CHECK(text && strstr(text, "ref backend: 3 items"));
    free(text);
    CHECK_INT(calls.assign, 1);   /* explaining evaluates nothing */
    ot_tensor_free(a);
    ot_tensor_free(out);
    ot_backend_free(be);
}

TEST(backend_iface_no_explain_slot)
{
    static const ot_backend_vt mute_vt = {.name = "mute", .assign_many = counting_assign};
    CHECK_INT(ot__backend_register("mute", &mute_vt), 0);
    ot_backend *be = ot_backend_new("mute", NULL);
    CHECK(be != NULL);
    ot_tensor *a = ot_zeros(be, OT_SHAPE(2), OT_F32);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(ot_explain(ot_neg(a), f), OT_EUNSUPPORTED);
    CHECK_ERR(OT_EUNSUPPORTED, "backend 'mute' cannot explain");
    fclose(f);
    free(text);
    ot_tensor_free(a);
    ot_backend_free(be);
}

/* A training program: loss = mean(sum(x * w, 1)^2) over a bound x, its
 * gradient w.r.t. the variable w, and an SGD step on w (two steps). */
typedef struct train {
    ot_program *p;
    ot_tensor *w, *gw;
} train;

static train train_new(ot_backend *be)
{
    train t = {ot_program_new(be), NULL, NULL};
    ot_tensor *x = ot_program_placeholder(t.p, "x", OT_SHAPE(2, 3), OT_F32);
    t.w = ot_program_variable(t.p, "w", OT_SHAPE(3), OT_F32, OT_INIT_CONST(0.5));
    t.gw = ot_empty(be, OT_SHAPE(3), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *loss = ot_mean(ot_sqr(ot_sum(ot_mul(x, t.w), 1)));
    CHECK_INT(ot_program_backprop(t.p, loss, 1, &t.w, &t.gw), 0);
    CHECK_INT(ot_program_sgd(t.p, &(ot_sgd){.lr = 0.1}, 1, &t.w,
                             (ot_node *[]){ot_tensor_node(t.gw)}, NULL), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(t.p), 0);
    return t;
}

/* w after `runs` SGD steps on x, in double. */
static void train_expect(const float x[6], int runs, double w[3])
{
    w[0] = w[1] = w[2] = 0.5;
    for (int r = 0; r < runs; r++) {
        double g[3] = {0, 0, 0};
        for (int i = 0; i < 2; i++) {
            double s = x[3 * i] * w[0] + x[3 * i + 1] * w[1] + x[3 * i + 2] * w[2];
            for (int j = 0; j < 3; j++) g[j] += s * x[3 * i + j];   /* 2 s x / N, N = 2 */
        }
        for (int j = 0; j < 3; j++) w[j] -= 0.1 * g[j];
    }
}

static void train_check(const train *t, const float x[6], int runs)
{
    double want[3];
    float got[3];
    train_expect(x, runs, want);
    CHECK_INT(ot_get(t->w, got), 0);
    for (int j = 0; j < 3; j++) CHECK_NEAR(got[j], want[j], 1e-5);
}

TEST(backend_iface_program)
{
    ot_backend *be = counting_backend();
    train t = train_new(be);
    const float x[6] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.25f};
    int before = calls.assign;
    for (int run = 0; run < 3; run++)
        CHECK_INT(ot_program_run(t.p, 1, &OT_BIND_DATA("x", x, sizeof x)), 0);
    CHECK_INT(calls.assign - before, 2 * 3);   /* a step, an assign */
    train_check(&t, x, 3);
    ot_program_stats st;
    CHECK_INT(ot_program_stats_get(t.p, &st), 0);
    CHECK_INT(st.steps, 2);
    CHECK_INT(st.kernels, 0);   /* nothing prepared */
    CHECK_INT(st.arena_bytes, 0);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(ot_program_explain(t.p, f), 0);
    fclose(f);
    CHECK_INT(calls.explain, 2);
    CHECK(text && strstr(text, "step 1 (1 output):") && strstr(text, "ref backend:"));
    free(text);
    ot_program_free(t.p);
    ot_tensor_free(t.gw);
    ot_backend_free(be);
}

/* On cpu a program runs the plans it prepared at compile: its runs look
 * nothing up in the plan cache and compile nothing. */
TEST(backend_iface_cpu_program_runs_plans)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 2});
    CHECK(be != NULL);
    train t = train_new(be);
    const float x[6] = {0.1f, 0.2f, 0.3f, -0.4f, 0.5f, 0.25f};
    ot_stats s0, s1;
    CHECK_INT(ot_stats_get(be, &s0), 0);
    for (int run = 0; run < 3; run++)
        CHECK_INT(ot_program_run(t.p, 1, &OT_BIND_DATA("x", x, sizeof x)), 0);
    CHECK_INT(ot_stats_get(be, &s1), 0);
    CHECK_INT(s1.compiles - s0.compiles, 0);
    CHECK_INT(s1.cache_hits - s0.cache_hits, 0);
    CHECK_INT(s1.assigns - s0.assigns, 2 * 3);
    train_check(&t, x, 3);
    ot_program_stats st;
    CHECK_INT(ot_program_stats_get(t.p, &st), 0);
    CHECK(st.kernels >= 2);
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    CHECK_INT(ot_program_explain(t.p, f), 0);
    fclose(f);
    CHECK(text && strstr(text, "plan: ") && strstr(text, "program: 2 steps"));
    free(text);
    ot_program_free(t.p);
    ot_tensor_free(t.gw);
    ot_backend_free(be);
}

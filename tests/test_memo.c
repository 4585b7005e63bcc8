/*
 * test_memo.c - a tree built once and assigned many times: the plan and
 * bindings memoised on its root (plan_key.c) serve the later assignments
 * into an output of the same layout, and only those. Results must be those
 * of a freshly built tree, whatever the outputs, evictions and threads.
 */
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <pthread.h>
#include <stdlib.h>

#define R 4
#define C 6

static ot_tensor *filled(ot_backend *be, int64_t r, int64_t c, double seed)
{
    float v[64];
    for (int i = 0; i < r * c; i++) v[i] = (float)(0.5 + 0.25 * ((i * 7 + (int)seed) % 11));
    return ot_array(be, OT_SHAPE(r, c), OT_F32, v);
}

static ot_node *tree(ot_tensor *a, ot_tensor *b)
{
    return ot_tanh(ot_add(ot_mul(a, b), ot_div(a, 2.5f)));
}

/* out's values against a fresh tree's, computed on its own backend. */
static bool same_as_fresh(ot_tensor *out, ot_tensor *a, ot_tensor *b)
{
    ot_pool *p = ot_pool_push();
    ot_tensor *want = ot_eval(tree(a, b));
    float g[R * C], w[R * C];
    bool ok = want && ot_get(out, g) == 0 && ot_get(want, w) == 0 && memcmp(g, w, sizeof g) == 0;
    ot_tensor_free(want);
    ot_pool_pop(p);
    return ok;
}

TEST(memo_serves_reassignment)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ot_tensor *a = filled(be, R, C, 1), *b = filled(be, R, C, 2), *out = ot_empty(be, OT_SHAPE(R, C), OT_F32);
    ot_node *t = ot_retain(tree(a, b));
    ot_stats s0, s1;
    CHECK_INT(ot_stats(be, &s0), 0);
    for (int i = 0; i < 3; i++) {
        ot_fill(out, -1);
        CHECK_INT(ot_assign(out, t), 0);
        CHECK(same_as_fresh(out, a, b));
    }
    CHECK_INT(ot_stats(be, &s1), 0);
    /* One compile: same_as_fresh's fresh trees find the plan in the cache. */
    CHECK_INT((long long)(s1.compiles - s0.compiles), 1);
    CHECK_INT((long long)(s1.assigns - s0.assigns), 6);
    /* Explaining a memoised assignment borrows its plan too. */
    FILE *devnull = fopen("/dev/null", "w");
    CHECK_INT(ot_explain_many(1, &out, &t, devnull), 0);
    fclose(devnull);
    /* Leaves change value between runs: the memo binds memory, not data. */
    ot_fill(a, 3);
    CHECK_INT(ot_assign(out, t), 0);
    CHECK(same_as_fresh(out, a, b));
    ot_release(t);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* Outputs of other layouts, another tensor and a leaf written in place, in
 * turn with the memoised one: each gets its own plan. */
TEST(memo_only_for_its_output_layout)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ot_tensor *a = filled(be, R, C, 1), *b = filled(be, R, C, 2);
    ot_tensor *out = ot_empty(be, OT_SHAPE(R, C), OT_F32), *other = ot_empty(be, OT_SHAPE(R, C), OT_F32);
    ot_tensor *wide = ot_empty(be, OT_SHAPE(C, R), OT_F32), *wide_t = ot_transpose(wide, NULL);
    ot_node *t = ot_retain(tree(a, b));
    for (int round = 0; round < 2; round++) {
        CHECK_INT(ot_assign(out, t), 0);
        CHECK(same_as_fresh(out, a, b));
        CHECK_INT(ot_assign(other, t), 0);
        CHECK(same_as_fresh(other, a, b));
        CHECK_INT(ot_assign(wide_t, t), 0);
        CHECK(same_as_fresh(wide_t, a, b));
    }
    /* In place into a leaf: each run reads what the last one wrote. */
    ot_tensor *b0 = filled(be, R, C, 2), *b_copy = filled(be, R, C, 2);
    ot_node *inplace = ot_retain(tree(a, b0));
    for (int i = 0; i < 3; i++) {
        CHECK_INT(ot_assign(b_copy, tree(a, b_copy)), 0);
        CHECK_INT(ot_assign(b0, inplace), 0);
        float x[R * C], y[R * C];
        CHECK(ot_get(b0, x) == 0 && ot_get(b_copy, y) == 0 && memcmp(x, y, sizeof x) == 0);
    }
    ot_release(inplace);
    ot_release(t);
    ot_tensor_free(b0);
    ot_tensor_free(b_copy);
    ot_tensor_free(wide_t);
    ot_tensor_free(wide);
    ot_tensor_free(other);
    ot_tensor_free(out);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
}

/* A one-plan cache evicts the memoised plan at every other assignment; the
 * memo's reference keeps it alive and right (ASan checks the frees). */
TEST(memo_outlives_eviction)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1, .plan_cache = 1});
    ot_tensor *a = filled(be, R, C, 1), *b = filled(be, R, C, 2), *out = ot_empty(be, OT_SHAPE(R, C), OT_F32);
    ot_node *t = ot_retain(tree(a, b)), *u = ot_retain(ot_exp(ot_sub(a, b)));
    for (int i = 0; i < 4; i++) {
        CHECK_INT(ot_assign(out, u), 0);
        CHECK_INT(ot_assign(out, t), 0);
        CHECK(same_as_fresh(out, a, b));
    }
    ot_release(t);
    ot_release(u);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* The backend freed before the tree: the memo still releases its plan. */
TEST(memo_released_after_backend)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 2});
    ot_tensor *a = filled(be, R, C, 1), *b = filled(be, R, C, 2), *out = ot_empty(be, OT_SHAPE(R, C), OT_F32);
    ot_node *t = ot_retain(tree(a, b));
    CHECK_INT(ot_assign(out, t), 0);
    CHECK_INT(ot_assign(out, t), 0);
    ot_tensor_free(out);
    ot_backend_free(be);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_release(t);
}

#define NTH 4
typedef struct job {
    ot_node *t;
    ot_tensor *out;
    int fails;
} job;

static void *reassign(void *arg)
{
    job *j = arg;
    for (int i = 0; i < 50; i++)
        j->fails += ot_assign(j->out, j->t) != 0;
    return NULL;
}

/* Threads race to memoise one tree, each into its own output. */
TEST(memo_threads)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 2});
    ot_tensor *a = filled(be, R, C, 1), *b = filled(be, R, C, 2);
    ot_node *t = ot_retain(tree(a, b));
    job jobs[NTH];
    pthread_t th[NTH];
    for (int i = 0; i < NTH; i++) {
        jobs[i] = (job){t, ot_empty(be, OT_SHAPE(R, C), OT_F32), 0};
        CHECK_INT(pthread_create(&th[i], NULL, reassign, &jobs[i]), 0);
    }
    for (int i = 0; i < NTH; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(jobs[i].fails, 0);
        CHECK(same_as_fresh(jobs[i].out, a, b));
        ot_tensor_free(jobs[i].out);
    }
    ot_release(t);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_backend_free(be);
}

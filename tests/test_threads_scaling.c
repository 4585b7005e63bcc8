/*
 * test_threads_scaling.c - results are bitwise the same for any number of threads
 * (1, 2, 3, 4, 8): elementwise kernels, the three kinds of reduction (over
 * everything, along rows, along columns), a dot and its epilogue, and a
 * training step (gradients by autodiff, then an SGD update). Each threaded
 * case also checks that the worker pool really ran (its hand-off counter
 * moved), so that a change of threshold cannot make these tests pass
 * serially; and small work must never wake the pool. Its name has
 * "thread" in it, so make test runs it under ThreadSanitizer too.
 */
#include "test.h"
#include "cpu.h"
#include "internal.h"
#include "threads.h"

#include <stdlib.h>

static const int counts[] = {1, 2, 3, 4, 8};
#define NCOUNTS 5

static ot_backend *cpu_threads(int threads)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = threads});
    CHECK(be != NULL);
    return be;
}

static uint64_t handoffs(const ot_backend *be)
{
    return ot__threads_handoffs(((const ot_cpu *)be->impl)->threads);
}

static ot_tensor *filled(ot_backend *be, ot_shape s, int seed)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = 0.5f + (float)((i * 7919 + seed * 104729) % 1000) / 700;
    ot_tensor *t = ot_array(be, s, OT_F32, v);
    free(v);
    return t;
}

/* A case: its inputs' shapes and the tree over them. */
typedef struct bit_case {
    const char *name;
    int nin;
    ot_shape in[3];
    ot_node *(*tree)(ot_tensor *const in[]);
} bit_case;

/* The result of c on a backend of `threads` threads, as host floats (the
 * caller frees them); *pooled says whether the pool took a run. */
static float *result(const bit_case *c, int threads, int64_t *n, bool *pooled)
{
    ot_backend *be = cpu_threads(threads);
    ot_tensor *in[3] = {NULL};
    for (int i = 0; i < c->nin; i++) in[i] = filled(be, c->in[i], i + 1);
    uint64_t h0 = handoffs(be);
    ot_pool *pool = ot_pool_push();
    ot_tensor *out = ot_eval(c->tree(in));
    ot_pool_pop(pool);
    *pooled = handoffs(be) > h0;
    CHECK(out != NULL);
    *n = out ? ot_tensor_numel(out) : 0;
    float *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    if (out) CHECK_INT(ot_get(out, v), 0);
    ot_tensor_free(out);
    for (int i = 0; i < c->nin; i++) ot_tensor_free(in[i]);
    ot_backend_free(be);
    return v;
}

static void check_bitwise(const bit_case *c)
{
    int64_t n1, n;
    bool pooled;
    float *want = result(c, 1, &n1, &pooled);
    for (int k = 1; k < NCOUNTS; k++) {
        float *got = result(c, counts[k], &n, &pooled);
        if (n != n1 || memcmp(got, want, sizeof *got * (size_t)n) != 0)
            test__fail(__FILE__, __LINE__, "%s: %d threads differ from 1 thread's bits", c->name,
                       counts[k]);
        if (!pooled)
            test__fail(__FILE__, __LINE__, "%s: %d threads: the pool never ran", c->name, counts[k]);
        free(got);
    }
    free(want);
}

#define BIG OT_SHAPE(1 << 20)
#define SQUARE OT_SHAPE(1024, 1024)
#define WIDE OT_SHAPE(64, 32768)   /* column reductions split by columns */

static ot_node *ew_tree(ot_tensor *const in[])
{
    return ot_tanh(ot_add(ot_mul(in[0], in[1]), ot_div(in[0], in[1])));
}

static ot_node *sum_all(ot_tensor *const in[]) { return ot_sum(ot_exp(ot_mul(in[0], in[1]))); }
static ot_node *mean_all(ot_tensor *const in[]) { return ot_mean(ot_log(in[0])); }
static ot_node *argmax_all(ot_tensor *const in[]) { return ot_argmax(ot_sin(in[0])); }
static ot_node *sum_rows(ot_tensor *const in[]) { return ot_sum(ot_exp(in[0]), .axis = 1); }
static ot_node *sum_cols(ot_tensor *const in[]) { return ot_sum(ot_exp(in[0]), .axis = 0); }
static ot_node *max_cols(ot_tensor *const in[]) { return ot_max(ot_tanh(in[0]), .axis = 0); }
static ot_node *softmax(ot_tensor *const in[]) { return ot_softmax(in[0], .axis = 1); }

static ot_node *dot_epilogue(ot_tensor *const in[])
{
    return ot_tanh(ot_add(ot_dot(in[0], in[1]), in[2]));
}

TEST(scaling_bitwise_elementwise)
{
    check_bitwise(&(bit_case){"tanh(a*b + a/b)", 2, {BIG, BIG}, ew_tree});
}

TEST(scaling_bitwise_reductions)
{
    check_bitwise(&(bit_case){"sum(exp(a*b))", 2, {BIG, BIG}, sum_all});
    check_bitwise(&(bit_case){"mean(log(a))", 1, {BIG}, mean_all});
    check_bitwise(&(bit_case){"argmax(sin(a))", 1, {BIG}, argmax_all});
    check_bitwise(&(bit_case){"sum(exp(x), axis 1)", 1, {SQUARE}, sum_rows});
    check_bitwise(&(bit_case){"sum(exp(x), axis 0)", 1, {WIDE}, sum_cols});
    check_bitwise(&(bit_case){"max(tanh(x), axis 0)", 1, {WIDE}, max_cols});
    check_bitwise(&(bit_case){"softmax(x, axis 1)", 1, {SQUARE}, softmax});
}

TEST(scaling_bitwise_dot_epilogue)
{
    check_bitwise(&(bit_case){"tanh(dot(A, W) + bias)", 3,
                              {OT_SHAPE(512, 512), OT_SHAPE(512, 512), OT_SHAPE(512)},
                              dot_epilogue});
}

#define TRAIN_ROWS 2048

/* One SGD step of a two-layer net on `threads` threads: the updated
 * weights, W1 then W2, as host floats. */
static float *train_step(int threads, bool *pooled)
{
    ot_backend *be = cpu_threads(threads);
    ot_tensor *x = filled(be, OT_SHAPE(TRAIN_ROWS, 512), 1), *w1 = filled(be, OT_SHAPE(512, 512), 2);
    ot_tensor *w2 = filled(be, OT_SHAPE(512, 64), 3);
    ot_fill(w2, 0.01);
    uint64_t h0 = handoffs(be);
    ot_pool *pool = ot_pool_push();
    ot_node *h = ot_tanh(ot_mul(ot_dot(x, w1), 0.01f));
    ot_node *d = ot_sub(ot_dot(h, w2), 1.0f);
    ot_node *loss = ot_mean(ot_mul(d, d));
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    CHECK(ad != NULL);
    ot_tensor *w[2] = {w1, w2};
    ot_node *g[2] = {ot_autodiff_grad(ad, w1), ot_autodiff_grad(ad, w2)};
    CHECK_INT(ot_sgd_step(&(ot_sgd){.lr = 0.5}, 2, w, g, NULL), 0);
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    *pooled = handoffs(be) > h0;
    float *v = malloc(sizeof *v * (512 * 512 + 512 * 64));
    CHECK_INT(ot_get(w1, v), 0);
    CHECK_INT(ot_get(w2, v + 512 * 512), 0);
    ot_tensor_free(x);
    ot_tensor_free(w1);
    ot_tensor_free(w2);
    ot_backend_free(be);
    return v;
}

TEST(scaling_bitwise_training_step)
{
    bool pooled;
    float *want = train_step(1, &pooled);
    for (int k = 1; k < NCOUNTS; k++) {
        float *got = train_step(counts[k], &pooled);
        if (memcmp(got, want, sizeof *got * (512 * 512 + 512 * 64)) != 0)
            test__fail(__FILE__, __LINE__, "training step: %d threads differ from 1 thread's bits",
                       counts[k]);
        CHECK(pooled);
        free(got);
    }
    free(want);
}

/* Small calls run on the calling thread: the pool is never handed a run,
 * whatever the thread count. */
TEST(scaling_small_work_stays_on_caller)
{
    ot_backend *be = cpu_threads(4);
    ot_tensor *a = filled(be, OT_SHAPE(32768), 1), *b = filled(be, OT_SHAPE(32768), 2);
    ot_tensor *s64 = ot_slice(a, OT_RANGE(0, 64)), *b64 = ot_slice(b, OT_RANGE(0, 64));
    ot_tensor *out = ot_empty(be, OT_SHAPE(32768), OT_F32), *o64 = ot_slice(out, OT_RANGE(0, 64));
    ot_tensor *sum = ot_empty(be, OT_SHAPE(), OT_F32);
    uint64_t h0 = handoffs(be);
    ot_pool *pool = ot_pool_push();
    for (int i = 0; i < 20; i++) {
        CHECK_INT(ot_assign(o64, ew_tree((ot_tensor *[]){s64, b64})), 0);
        CHECK_INT(ot_assign(out, ot_add(ot_mul(a, b), b)), 0);
        CHECK_INT(ot_assign(sum, ot_sum(ot_mul(a, b))), 0);
    }
    ot_pool_pop(pool);
    CHECK_INT(handoffs(be) - h0, 0);
    /* The same machinery does hand large work over. */
    ot_tensor *big = filled(be, BIG, 3), *bo = ot_empty(be, BIG, OT_F32);
    pool = ot_pool_push();
    CHECK_INT(ot_assign(bo, ew_tree((ot_tensor *[]){big, big})), 0);
    ot_pool_pop(pool);
    CHECK(handoffs(be) > h0);
    ot_tensor_free(big);
    ot_tensor_free(bo);
    ot_tensor_free(s64);
    ot_tensor_free(b64);
    ot_tensor_free(o64);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(out);
    ot_tensor_free(sum);
    ot_backend_free(be);
}

/* Counting hand-offs on a backend without a pool (threads 1) reads 0. */
TEST(scaling_handoffs_without_pool)
{
    ot_backend *be = cpu_threads(1);
    CHECK_INT(handoffs(be), 0);
    CHECK_INT(ot__threads_handoffs(NULL), 0);
    ot_backend_free(be);
}

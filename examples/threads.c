/*
 * threads.c - the cpu backend's threads: the same bits for any count.
 *
 *   1. An elementwise tree, a sum over everything, a row softmax and a
 *      dense layer's tanh(dot(x, w) + b) computed on backends of 1, 2 and 4
 *      threads: every result is bitwise the one thread's, since the work
 *      is cut into chunks by the plan alone and partial sums are added in
 *      chunk order.
 *   2. A call on 64 elements costs no more at 4 threads than at 1: work
 *      below the pool's threshold runs on the calling thread.
 *
 * Exits non-zero if a check fails. Always the cpu backend (threads are
 * its own); OT_EXAMPLE_SMALL runs smaller tensors (what make test runs
 * under valgrind). Uses only include/optree.h and frees what it creates.
 */
#include "optree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define NTREES 4

static int failures;

static void expect(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) failures++;
}

static ot_tensor *input(ot_backend *be, ot_shape s, int seed)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; v && i < n; i++) v[i] = 0.5f + (float)((i * 31 + seed * 17) % 97) / 64;
    ot_tensor *t = v ? ot_array(be, s, OT_F32, v) : NULL;
    free(v);
    return t;
}

/* The trees of part 1 over a (n) and b (n), x (r, c), w (c, c), bias (c). */
static void trees(ot_tensor *const in[5], ot_node *out[NTREES])
{
    out[0] = ot_tanh(ot_add(ot_mul(in[0], in[1]), ot_div(in[0], in[1])));
    out[1] = ot_sum(ot_exp(ot_neg(in[0])));
    out[2] = ot_softmax(in[2], .axis = 1);
    out[3] = ot_tanh(ot_add(ot_dot(in[2], in[3]), in[4]));
}

/* The results of part 1 on `threads` threads, as host floats, one block
 * per tree (the caller frees them); NULL on error. */
static float *results(int threads, int64_t n, int64_t r, int64_t c, size_t *len)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = threads});
    if (!be) return NULL;
    ot_shape shapes[5] = {OT_SHAPE(n), OT_SHAPE(n), OT_SHAPE(r, c), OT_SHAPE(c, c), OT_SHAPE(c)};
    ot_tensor *in[5];
    for (int i = 0; i < 5; i++) in[i] = input(be, shapes[i], i);
    size_t sizes[NTREES] = {(size_t)n, 1, (size_t)(r * c), (size_t)(r * c)};
    *len = sizes[0] + sizes[1] + sizes[2] + sizes[3];
    float *host = malloc(sizeof *host * *len), *at = host;
    ot_pool *pool = ot_pool_push();
    ot_node *t[NTREES];
    trees(in, t);
    for (int i = 0; i < NTREES && host; i++) {
        ot_tensor *v = ot_eval(t[i]);
        if (!v || ot_get(v, at) != 0) {
            fprintf(stderr, "threads: %s\n", ot_errmsg());
            free(host);
            host = NULL;
        }
        ot_tensor_free(v);
        at += sizes[i];
    }
    ot_pool_pop(pool);
    for (int i = 0; i < 5; i++) ot_tensor_free(in[i]);
    ot_backend_free(be);
    return host;
}

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return 1e6 * (double)ts.tv_sec + 1e-3 * (double)ts.tv_nsec;
}

/* Microseconds per ot_assign of tanh(a*b + a/b) on 64 elements, the best of
 * five rounds of `calls` calls. */
static double small_call_us(int threads, int calls)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = threads});
    ot_tensor *a = input(be, OT_SHAPE(64), 1), *b = input(be, OT_SHAPE(64), 2);
    ot_tensor *o = ot_empty(be, OT_SHAPE(64), OT_F32);
    ot_pool *pool = ot_pool_push();
    ot_node *t = ot_tanh(ot_add(ot_mul(a, b), ot_div(a, b)));
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        double t0 = now_us();
        for (int i = 0; i < calls; i++) ot_assign(o, t);
        double us = (now_us() - t0) / calls;
        if (us < best) best = us;
    }
    ot_pool_pop(pool);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(o);
    ot_backend_free(be);
    return best;
}

int main(void)
{
    int small = getenv("OT_EXAMPLE_SMALL") != NULL;
    int64_t n = small ? (int64_t)1 << 19 : (int64_t)1 << 22, r = small ? 256 : 1024, c = 256;
    size_t len1, len;
    float *one = results(1, n, r, c, &len1);
    expect(one != NULL, "results on 1 thread");
    for (int threads = 2; one && threads <= 4; threads *= 2) {
        float *got = results(threads, n, r, c, &len);
        char what[96];
        snprintf(what, sizeof what, "%d threads give 1 thread's bits (%zu floats)", threads, len);
        expect(got && len == len1 && memcmp(got, one, sizeof *got * len) == 0, what);
        free(got);
    }
    free(one);

    /* Under valgrind (small) fewer calls: the paths are the same. */
    int calls = small ? 200 : 2000;
    double us1 = small_call_us(1, calls), us4 = small_call_us(4, calls);
    printf("64 elements: %.2f us per ot_assign at 1 thread, %.2f us at 4\n", us1, us4);
    /* Generous: the check is that no thread is woken (tens of us), not a
     * timing claim; valgrind and loaded machines stretch both alike. */
    expect(us4 < 3 * us1 + 5, "small work costs no more at 4 threads than at 1");
    return failures ? 1 : 0;
}

/*
 * io.c - saving and loading a trained parameter set, wrapping a caller's
 * buffer, and printing a large tensor.
 *
 *   1. A linear model y = x.W + b learns a known map (W = [[2], [-3]],
 *      b = 0.5) from 256 points with SGD, its gradients from ot_autodiff.
 *   2. ot_savez writes W and b to one .npz (np.load(path)["W"] reads it);
 *      ot_loadz reads them back, by name, onto another backend, and the
 *      program checks that the loaded parameters are the trained ones bit
 *      for bit and predict the same values.
 *   3. The inputs come from the caller's own malloc'd buffer through
 *      ot_wrap (no copy); free_fn releases it when the last view dies.
 *   4. A 1000x1000 tensor prints summarised, NumPy style, in a few lines;
 *      ot_tensor_print_opts sets the summary's edge and precision.
 *
 * Exits non-zero if a check fails. Runs on the reference backend by default
 * (OT_BACKEND=cpu for the fused one); OT_EXAMPLE_SMALL changes nothing.
 * Uses only include/optree.h and frees everything it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int failures;

static void expect(int ok, const char *what)
{
    printf("%s: %s\n", ok ? "ok" : "FAILED", what);
    if (!ok) {
        failures++;
        if (ot_errcode())
            printf("  error: %s\n", ot_errmsg());
    }
}

/* free_fn for the wrapped input buffer. */
static void free_host(void *user, void *ptr)
{
    (*(int *)user)++;
    free(ptr);
}

/* 256 points x in [-1, 1)^2 in a buffer of our own, and y = 2 x0 - 3 x1 + 0.5. */
static void make_data(ot_backend *be, ot_tensor **x, ot_tensor **y, int *freed)
{
    enum { N = 256 };
    float *xs = malloc(N * 2 * sizeof *xs), ys[N];
    for (int i = 0; i < N; i++) {
        xs[2 * i] = (float)((i * 37) % 101) / 50.5f - 1.0f;
        xs[2 * i + 1] = (float)((i * 53) % 97) / 48.5f - 1.0f;
        ys[i] = 2.0f * xs[2 * i] - 3.0f * xs[2 * i + 1] + 0.5f;
    }
    *x = ot_wrap(be, OT_SHAPE(N, 2), OT_F32, xs, NULL, free_host, freed);
    *y = ot_array(be, OT_SHAPE(N, 1), OT_F32, ys);
}

static ot_node *predict(ot_tensor *x, ot_tensor *W, ot_tensor *b)
{
    return ot_add(ot_dot(x, W), b);
}

/* Steps of SGD on the mean squared error; returns the last cost. */
static double train(ot_tensor *x, ot_tensor *y, ot_tensor *W, ot_tensor *b, int steps)
{
    ot_backend *be = ot_tensor_backend(x);
    ot_tensor *cost = ot_empty(be, OT_SHAPE(), OT_F32);
    for (int s = 0; s < steps; s++) {
        ot_pool *p = ot_pool_push();
        ot_node *c = ot_mean(ot_sqr(ot_sub(predict(x, W, b), y)));
        ot_autodiff *ad = ot_autodiff_new(c, NULL);
        ot_node *g[] = {ot_autodiff_grad(ad, W), ot_autodiff_grad(ad, b)};
        ot_assign(cost, c);
        ot_sgd_step(&(ot_sgd){.lr = 0.3}, 2, (ot_tensor *[]){W, b}, g, NULL);
        ot_autodiff_free(ad);
        ot_pool_pop(p);
    }
    float last = NAN;
    ot_get_n(cost, &last, sizeof last);
    ot_tensor_free(cost);
    return last;
}

/* Whether a and b hold the same bytes (both contiguous f32 of n values). */
static int same_floats(const ot_tensor *a, const ot_tensor *b, size_t n)
{
    float *u = calloc(n, sizeof *u), *v = calloc(n, sizeof *v);
    int same = a && b && ot_get_n(a, u, n * sizeof *u) == 0 &&
               ot_get_n(b, v, n * sizeof *v) == 0 && memcmp(u, v, n * sizeof *u) == 0;
    free(u);
    free(v);
    return same;
}

static void save_and_reload(ot_tensor *x, ot_tensor *W, ot_tensor *b)
{
    char path[64];
    snprintf(path, sizeof path, "/tmp/optree_io_example_%ld.npz", (long)getpid());
    const char *names[] = {"W", "b"};
    expect(ot_savez(path, 2, names, (const ot_tensor *[]){W, b}) == 0, "ot_savez W and b");

    /* another backend reads them, as a later run of the program would */
    ot_backend *other = ot_backend_new("ref", NULL);
    ot_tensor *loaded[2] = {NULL, NULL};
    expect(ot_loadz(other, path, 2, names, loaded) == 2, "ot_loadz by name");
    expect(same_floats(W, loaded[0], 2) && same_floats(b, loaded[1], 1),
           "the loaded parameters are the trained ones, bit for bit");

    /* a corrupt file is an error, and the loaded parameters stay as they are */
    ot_tensor *bad[1];
    expect(ot_loadz(other, "/nonexistent/params.npz", 1, NULL, bad) == OT_EIO && !bad[0],
           "a missing file is OT_EIO");
    printf("  (%s)\n", ot_errmsg());

    ot_backend *be = ot_tensor_backend(x);
    ot_tensor *W2 = ot_copy(loaded[0]), *b2 = ot_copy(loaded[1]);
    ot_tensor *p1 = ot_empty(be, OT_SHAPE(256, 1), OT_F32), *p2 = ot_empty(be, OT_SHAPE(256, 1), OT_F32);
    ot_tensor *Wl = ot_empty(be, OT_SHAPE(2, 1), OT_F32), *bl = ot_empty(be, OT_SHAPE(1), OT_F32);
    float wv[2], bv[1];
    ot_get_n(W2, wv, sizeof wv);
    ot_get_n(b2, bv, sizeof bv);
    ot_set_n(Wl, wv, sizeof wv);
    ot_set_n(bl, bv, sizeof bv);
    ot_pool *p = ot_pool_push();
    ot_assign(p1, predict(x, W, b));
    ot_assign(p2, predict(x, Wl, bl));
    ot_pool_pop(p);
    expect(same_floats(p1, p2, 256), "the reloaded model predicts the same values");
    ot_tensor *all[] = {loaded[0], loaded[1], W2, b2, p1, p2, Wl, bl};
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        ot_tensor_free(all[i]);
    ot_backend_free(other);
    remove(path);
}

static void print_large(ot_backend *be)
{
    ot_tensor *big = ot_empty(be, OT_SHAPE(1000, 1000), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_assign(big, ot_rand(OT_SHAPE(1000, 1000), 7));
    ot_pool_pop(p);
    printf("a 1000x1000 tensor, summarised:\n");
    expect(ot_tensor_print(big, stdout) == 0, "ot_tensor_print");
    printf("with two edge items and 3 digits:\n");
    expect(ot_tensor_print_opts(big, stdout, &(ot_print_options){.edgeitems = 2, .precision = 3}) == 0,
           "ot_tensor_print_opts");
    ot_tensor_free(big);
}

int main(void)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    if (!be) {
        fprintf(stderr, "%s\n", ot_errmsg());
        return 1;
    }
    int freed = 0;
    ot_tensor *x, *y;
    make_data(be, &x, &y, &freed);
    ot_tensor *W = ot_zeros(be, OT_SHAPE(2, 1), OT_F32), *b = ot_zeros(be, OT_SHAPE(1), OT_F32);
    double cost = train(x, y, W, b, 200);
    printf("trained: cost %.3g, W and b:\n", cost);
    ot_tensor_print(W, stdout);
    ot_tensor_print(b, stdout);
    expect(cost < 1e-6, "the model learned y = 2 x0 - 3 x1 + 0.5");
    save_and_reload(x, W, b);
    print_large(be);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(W);
    ot_tensor_free(b);
    ot_backend_free(be);
    ot_pool_drain();
    expect(freed == 1, "the wrapped buffer was freed with its last user");
    return failures ? 1 : 0;
}

/*
 * deriv4d_named.c - the ngraph deriv example with named axes, as ngraph
 * writes it: the axes C, H, W, K and N are named once, on the tensors, and
 * the dot contracts C, H, W by name (examples/deriv4d.c does the same
 * positionally, with a reshape by hand).
 *
 *     w (C,H,W,K), x (N,C,H,W), b (K), t (N,K)
 *     y    = tanh(dot over C,H,W of w and x + b)   -> (K,N), ngraph's order
 *     cost = mean over K,N of (y - t)^2             (t aligned to (K,N) by name)
 *
 * The gradients w.r.t. w, x and b are checked in f64 against central
 * finite differences along random directions, and the cost against the
 * positional tree's. Exits
 * non-zero if a check fails. Runs on the reference backend; OT_BACKEND=cpu
 * runs it on the fused one. Uses only include/optree.h and frees what it
 * creates.
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { C = 4, H = 2, W = 2, K = 4, N = 8 };

/* A tensor of shape with values in [-1, 1) from a small generator, its
 * dims named axes. */
static ot_tensor *named(ot_backend *be, ot_shape shape, const char *axes, unsigned seed)
{
    double v[C * H * W * N];
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.dims[d];
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = (double)(seed >> 9) / (double)(1u << 22) - 1.0;
    }
    ot_tensor *t = ot_array(be, shape, OT_F64, v);
    if (t && ot_tensor_set_axes(t, axes) != 0) {
        ot_tensor_free(t);
        t = NULL;
    }
    return t;
}

static double value(ot_node *f)
{
    double v = NAN;
    ot_tensor *r = ot_eval(f);
    if (!r || ot_get(r, &v) != 0) fprintf(stderr, "eval: %s\n", ot_errmsg());
    ot_tensor_free(r);
    return v;
}

/* The gradient of cost w.r.t. t checked along random directions v: the
 * central difference (cost(t + e v) - cost(t - e v)) / 2e against the
 * dot product of the gradient with v. Returns the largest relative gap. */
static double worst_error(ot_node *cost, ot_tensor *t)
{
    enum { MAX = C * H * W * N, DIRECTIONS = 4 };
    double h[MAX], g[MAX], moved[MAX], worst = 0;
    int64_t n = ot_tensor_numel(t);
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    int rc = ad ? ot_autodiff_grad_host(ad, t, g) : -1;
    ot_autodiff_free(ad);
    if (rc != 0 || n > MAX || ot_get(t, h) != 0) {
        fprintf(stderr, "gradient: %s\n", ot_errmsg());
        return INFINITY;
    }
    unsigned seed = 7;
    for (int d = 0; d < DIRECTIONS; d++) {
        double v[MAX], along = 0, e = 1e-6, f[2];
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 1664525u + 1013904223u;
            v[i] = (seed >> 31) ? 1.0 : -1.0;
            along += g[i] * v[i];
        }
        for (int s = 0; s < 2; s++) {
            for (int64_t i = 0; i < n; i++) moved[i] = h[i] + (s ? -e : e) * v[i];
            ot_set(t, moved);
            f[s] = value(cost);
        }
        double gap = fabs(along - (f[0] - f[1]) / (2 * e)) / fmax(1.0, fabs(along));
        if (!(gap <= worst)) worst = gap;
    }
    ot_set(t, h);
    return worst;
}

/* Builds the cost by name, prints it, compares it with the positional
 * tree's and checks the gradients; returns the number of failed checks. */
static int run(ot_tensor *w, ot_tensor *x, ot_tensor *b, ot_tensor *t)
{
    ot_node *y = ot_tanh(ot_add(ot_dot_axes(w, x, "C,H,W"), b));
    ot_node *cost = ot_mean(ot_sqr(ot_sub(y, t)), .axes = "K,N");
    if (!cost) {
        fprintf(stderr, "cost: %s\n", ot_errmsg());
        return 1;
    }
    printf("y: axes (%s); the cost as built:\n", ot_node_axes(y));
    ot_pp(cost, stdout);
    printf("\n");

    /* The same cost positionally: x as (N, C*H*W), w as (C*H*W, K); with
     * one operand named, b and t broadcast by position. */
    ot_tensor *x2 = ot_reshape(x, OT_SHAPE(N, C * H * W));
    ot_tensor *w2 = ot_reshape(w, OT_SHAPE(C * H * W, K));
    double by_name = value(cost);
    double by_position = value(ot_mean(ot_sqr(ot_sub(ot_tanh(ot_add(ot_dot(x2, w2), b)), t))));
    ot_tensor_free(x2);
    ot_tensor_free(w2);
    printf("cost %.15f by name, %.15f by position\n", by_name, by_position);
    int failures = !(fabs(by_name - by_position) < 1e-12);

    ot_tensor *wrt[] = {w, x, b};
    const char *what[] = {"w (C,H,W,K)", "x (N,C,H,W)", "b (K)"};
    for (int i = 0; i < 3; i++) {
        double e = worst_error(cost, wrt[i]);
        printf("d cost / d %-12s along 4 directions, max |autodiff - differences| %.2e\n",
               what[i], e);
        failures += !(e < 1e-7);
    }
    return failures;
}

int main(void)
{
    const char *name = getenv("OT_BACKEND");
    ot_backend *be = ot_backend_new(name ? name : "ref", NULL);
    if (!be) {
        fprintf(stderr, "backend: %s\n", ot_errmsg());
        return 1;
    }
    ot_pool *pool = ot_pool_push();
    ot_tensor *w = named(be, OT_SHAPE(C, H, W, K), "C,H,W,K", 1);
    ot_tensor *x = named(be, OT_SHAPE(N, C, H, W), "N,C,H,W", 2);
    ot_tensor *b = named(be, OT_SHAPE(K), "K", 3);
    ot_tensor *t = named(be, OT_SHAPE(N, K), "N,K", 4);
    int failures = 1;
    if (w && x && b && t) {
        ot_tensor_set_name(w, "w");
        ot_tensor_set_name(x, "x");
        ot_tensor_set_name(b, "b");
        ot_tensor_set_name(t, "t");
        failures = run(w, x, b, t);
    } else {
        fprintf(stderr, "tensors: %s\n", ot_errmsg());
    }
    ot_tensor_free(w);
    ot_tensor_free(x);
    ot_tensor_free(b);
    ot_tensor_free(t);
    ot_pool_pop(pool);
    ot_backend_free(be);
    if (failures) fprintf(stderr, "deriv4d_named: %d check(s) failed\n", failures);
    return failures != 0;
}

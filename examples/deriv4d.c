/*
 * deriv4d.c - the ngraph deriv example: a gradient w.r.t. a 4-D variable
 * that the tree reads only through a reshape.
 *
 * ngraph contracts the C, H, W axes of a 4-D weight w (C, H, W, K) against
 * an input x (N, C, H, W) and asks ng.deriv(cost, w). Here w is a trainable
 * tensor of shape (4, 2, 2, 4); the tree reads it as the (16, 4) view
 * ot_reshape gives, so the contraction is one dot of x (N, 16). The
 * gradient asked for is w.r.t. w itself: it comes back in w's shape, and is
 * checked in f64 against central finite differences. Then ot_variables finds
 * w as the tree's only trainable leaf (through the view), ot_autodiff_grads
 * gives its gradient, and a few SGD steps lower the cost.
 *
 * Exits non-zero if a check fails. Runs on the reference backend;
 * OT_BACKEND=cpu runs it on the fused one. Small already: OT_EXAMPLE_SMALL
 * changes nothing. Uses only include/optree.h and frees what it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { C = 4, H = 2, W = 2, K = 4, N = 8, CHW = C * H * W };

static void fill(double *h, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        seed = seed * 6364136223846793005u + 1442695040888963407u;
        h[i] = -1.0 + 2.0 * (double)(seed >> 40) / (double)(1u << 24);
    }
}

static double scalar(ot_node *f)
{
    double v = NAN;
    ot_tensor *t = ot_eval(f);
    if (!t || ot_get(t, &v) != 0) fprintf(stderr, "eval: %s\n", ot_errmsg());
    ot_tensor_free(t);
    return v;
}

/* The largest |autodiff - central difference| over w's elements. */
static double check_grad(ot_node *cost, ot_tensor *w)
{
    double hw[C * H * W * K], g[C * H * W * K], worst = 0;
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    if (!ad || ot_autodiff_grad_host(ad, w, g) != 0 || ot_get(w, hw) != 0) {
        fprintf(stderr, "gradient: %s\n", ot_errmsg());
        ot_autodiff_free(ad);
        return INFINITY;
    }
    ot_autodiff_free(ad);
    for (int i = 0; i < C * H * W * K; i++) {
        double x = hw[i], e = 1e-6;
        hw[i] = x + e;
        ot_set(w, hw);
        double up = scalar(cost);
        hw[i] = x - e;
        ot_set(w, hw);
        double down = scalar(cost);
        hw[i] = x;
        ot_set(w, hw);
        double d = fabs(g[i] - (up - down) / (2 * e));
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* steps of SGD on the tree's trainable tensors, found by ot_variables. */
static int train(ot_node *cost, int steps)
{
    ot_tensor *vars[4];
    ot_node *g[4];
    int n = ot_variables(cost, 4, vars);
    if (n < 0 || n > 4) return -1;
    for (int s = 0; s < steps; s++) {
        ot_pool *pool = ot_pool_push();
        ot_autodiff *ad = ot_autodiff_new(cost, NULL);
        int rc = ad ? ot_autodiff_grads(ad, n, vars, g) : ot_errcode();
        if (!rc) rc = ot_sgd_step(&(ot_sgd){.lr = 0.5}, n, vars, g, NULL);
        ot_autodiff_free(ad);
        ot_pool_pop(pool);
        if (rc) return rc;
    }
    return n;
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
    double hw[C * H * W * K], hx[N * CHW], ht[N * K];
    fill(hw, C * H * W * K, 1);
    fill(hx, N * CHW, 2);
    fill(ht, N * K, 3);
    ot_tensor *w = ot_array(be, OT_SHAPE(C, H, W, K), OT_F64, hw);
    ot_tensor *x = ot_array(be, OT_SHAPE(N, CHW), OT_F64, hx);
    ot_tensor *t = ot_array(be, OT_SHAPE(N, K), OT_F64, ht);
    ot_tensor_set_name(w, "w");
    ot_tensor_set_trainable(w, true);
    ot_tensor *w2 = ot_reshape(w, OT_SHAPE(CHW, K));   /* w's (C, H, W) as one axis */
    ot_node *cost = ot_mean(ot_sqr(ot_sub(ot_tanh(ot_dot(x, w2)), t)));

    int failures = 0;
    double worst = check_grad(cost, w);
    printf("d cost / d w: shape (%d, %d, %d, %d), max |autodiff - differences| %.2e\n",
           C, H, W, K, worst);
    failures += !(worst < 1e-7);
    double before = scalar(cost);
    int n = train(cost, 20);
    double after = scalar(cost);
    printf("variables: %d (w, through the reshape); cost %.6f -> %.6f after 20 SGD steps\n",
           n, before, after);
    failures += n != 1 || !(after < before);

    ot_tensor_free(w2);
    ot_tensor_free(t);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_pool_pop(pool);
    ot_backend_free(be);
    if (failures) fprintf(stderr, "deriv4d: %d check(s) failed\n", failures);
    return failures != 0;
}

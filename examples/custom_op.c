/*
 * custom_op.c - ops registered at run time (ot_op_register), trained with.
 *
 * Two ops from examples/custom_ops.h are added to the library without
 * editing it: GELU (scalar functions, and AVX2 and AVX-512 vector functions
 * that the fused kernels and generated code call in their loop) and a
 * Huber cost (binary). Each has a gradient builder, so autodiff
 * differentiates them like built-in ops. A one-hidden-layer network with
 * GELU units is fitted to sin(x) under the mean Huber cost with SGD:
 *
 *     h    = gelu(x w1 + b1)          x (N,1), w1 (1,H), b1 (H)
 *     pred = h w2 + b2                w2 (H,1), b2 (1)
 *     cost = mean(huber(pred, sin x))
 *
 * ot_explain prints the plan of the forward pass: gelu is computed inside
 * the kernel that adds the bias, not in a pass of its own. The program
 * checks the gradient of w1 against central differences once, and that
 * training lowers the cost, and exits non-zero if either fails. It runs on
 * the cpu backend (OT_BACKEND=ref for the reference one); OT_EXAMPLE_SMALL
 * trains for fewer steps. Frees everything it creates.
 */
#include "optree.h"
#include "custom_ops.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

enum { N = 64, H = 16 };

typedef struct model {
    ot_tensor *w1, *b1, *w2, *b2;
} model;

static ot_op gelu, huber;

static ot_node *cost_of(const model *m, ot_tensor *x, ot_tensor *y)
{
    ot_node *h = ot_apply(gelu, ot_add(ot_dot(x, m->w1), m->b1));
    ot_node *pred = ot_add(ot_dot(h, m->w2), m->b2);
    return ot_mean(ot_apply2(huber, pred, y));
}

static double value(ot_node *scalar)
{
    double v = NAN;
    ot_tensor *t = ot_eval(scalar);
    if (t) ot_get(t, &v);
    ot_tensor_free(t);
    return v;
}

/* Deterministic weights in [-scale, scale]. */
static ot_tensor *weights(ot_backend *be, ot_shape s, unsigned seed, double scale)
{
    double v[N];
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = scale * (2.0 * (seed >> 8) / 16777216.0 - 1.0);
    }
    return ot_array(be, s, OT_F64, v);
}

/* The autodiff gradient of w1 against central differences of the cost. */
static int check_gradient(const model *m, ot_tensor *x, ot_tensor *y)
{
    ot_pool *p = ot_pool_push();
    ot_node *cost = cost_of(m, x, y);
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    double g[H], w[H], worst = 0;
    if (!ad || ot_autodiff_grad_host(ad, m->w1, g) || ot_get(m->w1, w)) {
        fprintf(stderr, "gradient: %s\n", ot_errmsg());
        ot_autodiff_free(ad);
        ot_pool_pop(p);
        return 1;
    }
    for (int i = 0; i < H; i++) {
        double f[2], save = w[i], h = 1e-6;
        for (int s = 0; s < 2; s++) {
            w[i] = save + (s ? -h : h);
            ot_set(m->w1, w);
            f[s] = value(cost);
        }
        w[i] = save;
        ot_set(m->w1, w);
        double d = fabs(g[i] - (f[0] - f[1]) / (2 * h));
        if (d > worst) worst = d;
    }
    printf("gradient of w1: autodiff against central differences, worst difference %.2e\n",
           worst);
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    return worst > 1e-7;
}

static int train(const model *m, ot_tensor *x, ot_tensor *y, int steps, double *first,
                 double *last)
{
    ot_tensor *params[] = {m->w1, m->b1, m->w2, m->b2};
    ot_sgd sgd = {.lr = 0.5};
    for (int step = 0; step < steps; step++) {
        ot_pool *p = ot_pool_push();
        ot_node *cost = cost_of(m, x, y);
        ot_autodiff *ad = ot_autodiff_new(cost, NULL);
        ot_node *g[4];
        for (int i = 0; i < 4; i++) g[i] = ad ? ot_autodiff_grad(ad, params[i]) : NULL;
        double c = value(cost);
        if (step == 0) *first = c;
        *last = c;
        int rc = ad ? ot_sgd_step(&sgd, 4, params, g, NULL) : ot_errcode();
        ot_autodiff_free(ad);
        ot_pool_pop(p);
        if (rc) {
            fprintf(stderr, "step %d: %s\n", step, ot_errmsg());
            return 1;
        }
    }
    printf("mean Huber cost: %.5f at the start, %.5f after %d steps\n", *first, *last, steps);
    return 0;
}

int main(void)
{
    gelu = ot_op_register(&(ot_op_def){0});   /* a bad definition: a clear error */
    printf("registering nothing: %s\n", ot_errmsg());
    ot_op_def gd = gelu_def(), hd = huber_def();
    gelu = ot_op_register(&gd);
    huber = ot_op_register(&hd);
    if (gelu == OT_OP_NONE || huber == OT_OP_NONE) {
        fprintf(stderr, "register: %s\n", ot_errmsg());
        return 1;
    }
    printf("registered '%s' as op %d and '%s' as op %d\n", ot_op_name(gelu), (int)gelu,
           ot_op_name(huber), (int)huber);

    ot_backend *be = ot_backend_new("cpu", NULL);
    if (!be) {
        fprintf(stderr, "backend: %s\n", ot_errmsg());
        return 1;
    }
    double xs[N], ys[N];
    for (int i = 0; i < N; i++) {
        xs[i] = -3.0 + 6.0 * i / (N - 1);
        ys[i] = sin(xs[i]);
    }
    ot_tensor *x = ot_array(be, OT_SHAPE(N, 1), OT_F64, xs);
    ot_tensor *y = ot_array(be, OT_SHAPE(N, 1), OT_F64, ys);
    model m = {weights(be, OT_SHAPE(1, H), 1, 1.5), weights(be, OT_SHAPE(H), 2, 1.0),
               weights(be, OT_SHAPE(H, 1), 3, 0.5), ot_zeros(be, OT_SHAPE(1), OT_F64)};
    ot_tensor_set_name(x, "x");
    ot_tensor_set_name(m.w1, "w1");
    ot_tensor_set_name(m.b1, "b1");

    ot_pool *p = ot_pool_push();
    ot_node *h = ot_apply(gelu, ot_add(ot_dot(x, m.w1), m.b1));
    printf("\nthe hidden layer, %s:\n", ot_backend_name(be));
    ot_pp(h, stdout);
    printf("\n");
    ot_explain(h, stdout);
    ot_pool_pop(p);

    int bad = check_gradient(&m, x, y);
    double first = 0, last = 0;
    int steps = getenv("OT_EXAMPLE_SMALL") ? 40 : 400;
    bad |= train(&m, x, y, steps, &first, &last);
    if (!(last < 0.5 * first)) {
        fprintf(stderr, "training did not lower the cost enough\n");
        bad = 1;
    }
    ot_tensor_free(m.w1), ot_tensor_free(m.b1), ot_tensor_free(m.w2), ot_tensor_free(m.b2);
    ot_tensor_free(x), ot_tensor_free(y);
    ot_backend_free(be);
    ot_pool_drain();
    return bad;
}

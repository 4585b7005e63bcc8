/*
 * cost.c - custom costs built from ops, differentiated by autodiff.
 *
 * A cost is a C function that builds a scalar tree from a prediction and a
 * target; no gradient code is written. Two are shown:
 *   - the Huber loss, quadratic near zero and linear beyond delta, written
 *     without branches as 0.5 q^2 + delta (|r| - q) with q = minimum(|r|, delta);
 *   - a label-smoothed cross-entropy, -mean(sum(t * logsoftmax(x))) with
 *     targets t = (1 - eps) onehot(label) + eps/K, which stays finite for
 *     any logits because logsoftmax is the stable form (never log(softmax)).
 * Each gradient from ot_autodiff is checked in f64 against central finite
 * differences and against its closed form (clip(r, -delta, delta)/N for
 * Huber, (softmax(x) - t)/N for the cross-entropy). The cross-entropy is
 * also compared with the built-in pair ot_cross_entropy(ot_softmax(x), t),
 * whose value and gradient must agree with the custom one.
 *
 * The program exits non-zero if a check fails. It runs on the reference
 * backend; OT_BACKEND=cpu runs it on the fused one. It is small already, so
 * OT_EXAMPLE_SMALL changes nothing. Uses only include/optree.h and frees
 * everything it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* ---------------------------------------------------------------- the costs */

/* mean(huber(pred - target)): 0.5 r^2 where |r| <= delta, else
 * delta (|r| - delta/2). minimum picks the branch elementwise, so one tree
 * (and one fused pass) covers both. */
static ot_node *huber(ot_node *pred, ot_node *target, double delta)
{
    ot_node *a = ot_abs(ot_sub(pred, target));
    ot_node *q = ot_minimum(a, delta);
    return ot_mean(ot_add(ot_mul(0.5, ot_sqr(q)), ot_mul(delta, ot_sub(a, q))));
}

/* Smoothed targets for integer labels (n,): (1 - eps) onehot + eps/K. */
static ot_node *smooth_targets(ot_tensor *labels, int k, double eps)
{
    ot_node *onehot = ot_onehot(labels, .depth = k, .dtype = OT_F64);
    if (eps == 0) return onehot;
    return ot_add(ot_mul(onehot, 1.0 - eps), eps / k);
}

/* -mean over rows of sum(t * logsoftmax(x)) along the classes (axis 1). */
static ot_node *smoothed_xent(ot_node *logits, ot_node *targets)
{
    ot_node *logp = ot_logsoftmax(logits, .axis = 1);
    return ot_neg(ot_mean(ot_sum(ot_mul(targets, logp), .axis = 1)));
}

/* The same cost from the built-in composites, for comparison. */
static ot_node *builtin_xent(ot_node *logits, ot_node *targets)
{
    return ot_mean(ot_cross_entropy(ot_softmax(logits, .axis = 1), targets, .axis = 1));
}

/* ---------------------------------------------------------------- checking */

static int failures;

static void expect(int ok, const char *what, double diff)
{
    printf("  %-52s %9.2g  %s\n", what, diff, ok ? "ok" : "FAILED");
    if (!ok) {
        failures++;
        if (ot_errcode() != 0) printf("  last error: %s\n", ot_errmsg());
    }
}

/* The value of a scalar f64 tree. */
static double value(ot_node *tree)
{
    double v = NAN;
    ot_tensor *t = ot_eval(tree);
    if (t) ot_get(t, &v);
    ot_tensor_free(t);
    return v;
}

/* Largest difference between two f64 tensors' values, read to the host. */
static double max_diff(ot_tensor *a, ot_tensor *b)
{
    int64_t n = ot_tensor_numel(a);
    double *x = malloc(sizeof(double) * (size_t)n), *y = malloc(sizeof(double) * (size_t)n);
    double worst = INFINITY;
    if (x && y && n == ot_tensor_numel(b) && ot_get(a, x) == 0 && ot_get(b, y) == 0) {
        worst = 0;
        for (int64_t i = 0; i < n; i++)
            if (!(fabs(x[i] - y[i]) <= worst)) worst = fabs(x[i] - y[i]);
    }
    free(x);
    free(y);
    return worst;
}

/* The cost as a function of the tensor it is differentiated by: the checks
 * rebuild the tree after each perturbation. */
typedef ot_node *(*cost_fn)(ot_tensor *x, void *ctx);

/* Largest difference between grad (the autodiff gradient w.r.t. x, already
 * evaluated) and central differences of cost(x), element by element. */
static double finite_diff(cost_fn cost, void *ctx, ot_tensor *x, ot_tensor *grad)
{
    int64_t n = ot_tensor_numel(x);
    double *v = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
    double worst = INFINITY;
    if (v && g && ot_get(x, v) == 0 && ot_get(grad, g) == 0) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            const double eps = 1e-6;
            double saved = v[i];
            ot_pool *pool = ot_pool_push();
            v[i] = saved + eps;
            ot_set(x, v);
            double up = value(cost(x, ctx));
            v[i] = saved - eps;
            ot_set(x, v);
            double down = value(cost(x, ctx));
            v[i] = saved;
            ot_set(x, v);
            ot_pool_pop(pool);
            double d = fabs((up - down) / (2 * eps) - g[i]);
            if (!(d <= worst)) worst = d;
        }
    }
    free(v);
    free(g);
    return worst;
}

/* ---------------------------------------------------------------- Huber */

typedef struct huber_ctx {
    ot_tensor *target;
    double delta;
} huber_ctx;

static ot_node *huber_cost(ot_tensor *pred, void *ctx)
{
    huber_ctx *h = ctx;
    return huber(ot_tensor_node(pred), ot_tensor_node(h->target), h->delta);
}

static void check_huber(ot_backend *be)
{
    enum { N = 8 };
    /* Residuals on both sides of +-delta (none exactly on it: the kink). */
    double p[N] = {0.3, -0.2, 2.5, -3.0, 0.9, 1.7, -1.2, 0.05};
    double t[N] = {0.0, 0.4, 0.5, 0.0, 1.0, -0.1, 0.3, 0.0};
    huber_ctx h = {.target = ot_array(be, OT_SHAPE(N), OT_F64, t), .delta = 1.0};
    ot_tensor *pred = ot_array(be, OT_SHAPE(N), OT_F64, p);
    ot_tensor_set_name(pred, "pred");
    ot_tensor_set_name(h.target, "target");

    printf("Huber loss, delta = %.1f, %d residuals\n", h.delta, N);
    ot_pool *pool = ot_pool_push();
    ot_node *cost = huber_cost(pred, &h);
    printf("  cost (shared subtrees as %%k lines):\n");
    ot_pp(cost, stdout);
    printf("\n  value %.12f\n", value(cost));

    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    printf("  d cost / d pred:\n");
    ot_pp(ad ? ot_autodiff_grad(ad, pred) : NULL, stdout);
    printf("\n");
    ot_tensor *grad = ad ? ot_autodiff_grad_tensor(ad, pred) : NULL;
    /* The closed form: the residual clipped to [-delta, delta], over N. */
    ot_tensor *want = ot_eval(ot_div(ot_clip(ot_sub(pred, h.target), -h.delta, h.delta), (double)N));
    if (grad && want) {
        double d = finite_diff(huber_cost, &h, pred, grad);
        expect(d < 1e-8, "autodiff vs central differences", d);
        d = max_diff(grad, want);
        expect(d < 1e-14, "autodiff vs clip(r, -delta, delta)/N", d);
    } else {
        expect(0, "gradient of the Huber loss", NAN);
    }
    ot_tensor_free(grad);
    ot_tensor_free(want);
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    ot_tensor_free(pred);
    ot_tensor_free(h.target);
}

/* ---------------------------------------------------------------- cross-entropy */

typedef struct xent_ctx {
    ot_tensor *labels;
    int classes;
    double eps;
} xent_ctx;

static ot_node *xent_cost(ot_tensor *logits, void *ctx)
{
    xent_ctx *c = ctx;
    return smoothed_xent(ot_tensor_node(logits), smooth_targets(c->labels, c->classes, c->eps));
}

static void check_xent(ot_backend *be, double eps)
{
    enum { N = 4, K = 5 };
    double x[N * K] = {1.0, -2.0, 0.5, 3.0, 0.0,   -1.0, 0.2, 0.3, 0.1, 4.0,
                       12.0, -7.0, 0.0, 1.0, 2.0,  0.0, 0.0, 0.0, 0.0, 0.0};
    int32_t y[N] = {3, 1, 0, 2};
    xent_ctx c = {.labels = ot_array(be, OT_SHAPE(N), OT_I32, y), .classes = K, .eps = eps};
    ot_tensor *logits = ot_array(be, OT_SHAPE(N, K), OT_F64, x);
    ot_tensor_set_name(logits, "x");
    ot_tensor_set_name(c.labels, "label");

    printf("label-smoothed cross-entropy, eps = %.2f, %d rows of %d classes\n", eps, N, K);
    ot_pool *pool = ot_pool_push();
    ot_node *t = smooth_targets(c.labels, K, eps);
    ot_node *mine = smoothed_xent(ot_tensor_node(logits), t);
    ot_node *theirs = builtin_xent(ot_tensor_node(logits), t);
    if (eps == 0) {
        printf("  custom   = ");
        ot_pp(mine, stdout);
        printf("\n  built-in = ");
        ot_pp(theirs, stdout);
        printf("\n");
    }
    double vm = value(mine), vt = value(theirs);
    printf("  value: custom %.12f, built-in %.12f\n", vm, vt);
    expect(fabs(vm - vt) < 1e-12, "custom value vs built-in cross_entropy(softmax)", fabs(vm - vt));

    ot_autodiff *adm = ot_autodiff_new(mine, NULL);
    ot_autodiff *adt = ot_autodiff_new(theirs, NULL);
    ot_tensor *gm = adm ? ot_autodiff_grad_tensor(adm, logits) : NULL;
    ot_tensor *gt = adt ? ot_autodiff_grad_tensor(adt, logits) : NULL;
    ot_tensor *want = ot_eval(ot_div(ot_sub(ot_softmax(logits, .axis = 1), t), (double)N));
    if (gm && gt && want) {
        double d = finite_diff(xent_cost, &c, logits, gm);
        expect(d < 1e-8, "autodiff vs central differences", d);
        d = max_diff(gm, want);
        expect(d < 1e-14, "autodiff vs (softmax(x) - t)/N", d);
        d = max_diff(gm, gt);
        expect(d < 1e-14, "autodiff: custom vs built-in", d);
    } else {
        expect(0, "gradients of the cross-entropies", NAN);
    }
    ot_tensor_free(gm);
    ot_tensor_free(gt);
    ot_tensor_free(want);
    ot_autodiff_free(adm);
    ot_autodiff_free(adt);
    ot_pool_pop(pool);
    ot_tensor_free(logits);
    ot_tensor_free(c.labels);
}

int main(void)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    if (!be) {
        fprintf(stderr, "cost: %s\n", ot_errmsg());
        return 1;
    }
    printf("cost: backend %s\n", ot_backend_name(be));
    check_huber(be);
    check_xent(be, 0.0); /* plain cross-entropy: onehot targets */
    check_xent(be, 0.1);
    ot_backend_free(be);
    ot_pool_drain();
    printf("cost: %s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}

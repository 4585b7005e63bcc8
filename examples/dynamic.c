/*
 * dynamic.c - neon's dynamic trees, in C: an op-tree whose shape depends on
 * the data, differentiated like any other.
 *
 * The tree grows in a loop while a value read back with ot_get stays small,
 * then a value read the same way picks sig or tanh for its root. Because
 * trees are built by ordinary C code, control flow is just C; autodiff then
 * sees only the tree that was built. The program prints what it built and
 * the gradients with respect to both inputs, checks them against central
 * differences, and exits 0 when they agree. OT_BACKEND=cpu runs it on the
 * fused backend. It frees everything it creates (clean under valgrind).
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>

/* The value of a scalar tree, read back to the host. */
static double value(ot_node *tree)
{
    double v = NAN;
    ot_tensor *t = ot_eval(ot_cast(tree, .dtype = OT_F64));
    if (t) ot_get(t, &v);
    ot_tensor_free(t);
    return v;
}

/* f = x0*x1 + 0.5, then f = f*x1 + x0 while sum(|f|) <= 20 (at most 10
 * times); sig(f) when mean(f) > 0, else tanh(f). */
static ot_node *build(ot_tensor *x0, ot_tensor *x1, int *steps, int *used_sig)
{
    ot_node *f = ot_add(ot_mul(x0, x1), 0.5);
    for (*steps = 0; *steps < 10 && value(ot_sum(ot_abs(f))) <= 20; ++*steps)
        f = ot_add(ot_mul(f, x1), x0);
    *used_sig = value(ot_mean(f)) > 0;
    return *used_sig ? ot_sig(f) : ot_tanh(f);
}

/* sum(tree), for the finite differences. */
static double total(ot_node *tree) { return value(ot_sum(tree)); }

/* Largest difference between the gradient w.r.t. x (next_error ones) and
 * central differences of sum(tree), over every element of x. */
static double check(ot_autodiff *ad, ot_node *tree, ot_tensor *x)
{
    double g[4], v[4], worst = 0;
    if (ot_autodiff_grad_host(ad, x, g) != 0 || ot_get(x, v) != 0) return INFINITY;
    for (int i = 0; i < 4; i++) {
        const double eps = 1e-6;
        double saved = v[i];
        v[i] = saved + eps;
        ot_set(x, v);
        double up = total(tree);
        v[i] = saved - eps;
        ot_set(x, v);
        double down = total(tree);
        v[i] = saved;
        ot_set(x, v);
        double d = fabs((up - down) / (2 * eps) - g[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

static void print_grad(ot_autodiff *ad, ot_tensor *x, const char *name)
{
    double g[4] = {0};
    ot_autodiff_grad_host(ad, x, g);
    printf("  d/d%s = [%.6f %.6f %.6f %.6f]\n", name, g[0], g[1], g[2], g[3]);
}

/* Builds, differentiates and checks one tree; returns 0 when it agrees. */
static int run(ot_tensor *x0, ot_tensor *x1, const char *label)
{
    ot_pool *pool = ot_pool_push();
    int steps, used_sig;
    ot_node *f = build(x0, x1, &steps, &used_sig);
    printf("%s: %d loop step(s), root %s\n  f = ", label, steps, used_sig ? "sig" : "tanh");
    ot_pp(f, stdout);
    printf("\n");
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    int bad = ad == NULL;
    if (ad) {
        print_grad(ad, x0, "x0");
        print_grad(ad, x1, "x1");
        double e = fmax(check(ad, f, x0), check(ad, f, x1));
        printf("  largest difference from central differences: %.2g\n", e);
        bad = !(e < 1e-6);
    } else {
        printf("  autodiff failed: %s\n", ot_errmsg());
    }
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    return bad;
}

int main(void)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    if (!be) {
        fprintf(stderr, "dynamic: %s\n", ot_errmsg());
        return 1;
    }
    ot_tensor *x0 = ot_array(be, OT_SHAPE(2, 2), OT_F64, (double[]){1, 2, 3, 4});
    ot_tensor *x1 = ot_array(be, OT_SHAPE(2, 2), OT_F64, (double[]){0.5, 1, -0.5, 1.5});
    ot_tensor *y1 = ot_full(be, OT_SHAPE(2, 2), OT_F64, -1);
    ot_tensor_set_name(x0, "x0");
    ot_tensor_set_name(x1, "x1");
    ot_tensor_set_name(y1, "x1");
    int bad = run(x0, x1, "x1 = [0.5 1 -0.5 1.5]");
    bad |= run(x0, y1, "x1 = -1");
    ot_tensor_free(x0);
    ot_tensor_free(x1);
    ot_tensor_free(y1);
    ot_backend_free(be);
    ot_pool_drain();
    printf("dynamic: %s\n", bad ? "gradients disagree" : "gradients agree");
    return bad;
}

/*
 * layer.c - a custom layer written with nothing but the public API.
 *
 * A Linear layer, y = act(x.W + b), as a small struct any program can copy:
 * its parameters, their gradients and its optimizer state are tensors; init
 * draws the weights on the backend; fprop builds the tree act(dot(x, W) + b)
 * and computes nothing; bprop asks ot_autodiff for the gradient trees of a
 * cost and evaluates them into the layer's gradient tensors. Activations are
 * plain C functions from a node to a node, so a new one (GELU below, built
 * from tanh, mul and add) needs no gradient code: autodiff differentiates
 * whatever tree it builds.
 *
 * The program checks the layer three ways and exits non-zero if any fails:
 *   1. a known value: for one identity layer and cost sum(x.W + b), the
 *      gradient w.r.t. W is x's column sums on every column, and w.r.t. b
 *      the number of rows;
 *   2. central finite differences, in f64, of every parameter of a two-layer
 *      network (2 -> 16 GELU -> 1) under a mean-squared-error cost;
 *   3. a small fit: the same network learns z = sin(2x)cos(y) on 64 points
 *      with SGD and momentum (ot_sgd_step) until the cost has dropped tenfold.
 *
 * It runs on the reference backend; OT_BACKEND=cpu runs it on the fused one,
 * and OT_EXAMPLE_SMALL=1 shortens the fit (for valgrind). Uses only
 * include/optree.h and frees everything it creates.
 */
#include "optree.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- the layer */

/* An activation builds a tree from a tree. */
typedef ot_node *(*act_fn)(ot_node *z);

static ot_node *act_identity(ot_node *z) { return z; }

/* GELU, the tanh form: 0.5 z (1 + tanh(sqrt(2/pi) (z + 0.044715 z^3))). Only
 * the forward formula is written; its gradient comes from autodiff. */
static ot_node *act_gelu(ot_node *z)
{
    ot_node *inner = ot_mul(ot_add(z, ot_mul(0.044715, ot_mul(z, ot_sqr(z)))),
                            0.7978845608028654);
    return ot_mul(ot_mul(z, 0.5), ot_add(1.0, ot_tanh(inner)));
}

typedef struct linear {
    ot_tensor *W, *b;    /* parameters: (in, out) and (out,) */
    ot_tensor *dW, *db;  /* their gradients, written by bprop */
    ot_tensor *vW, *vb;  /* momentum of SGD */
    act_fn act;
} linear;

static void linear_free(linear *L)
{
    ot_tensor *all[] = {L->W, L->b, L->dW, L->db, L->vW, L->vb};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    memset(L, 0, sizeof *L);
}

/* Glorot-uniform weights drawn on the backend (ot_rand is counter-based, so
 * a seed gives the same weights on every backend), zero bias. */
static int linear_init(linear *L, ot_backend *be, int in, int out, ot_dtype dt, act_fn act,
                       uint64_t seed)
{
    ot_shape ws = OT_SHAPE(in, out), bs = OT_SHAPE(out);
    memset(L, 0, sizeof *L);
    L->act = act ? act : act_identity;
    L->W = ot_empty(be, ws, dt);
    L->b = ot_zeros(be, bs, dt);
    L->dW = ot_zeros(be, ws, dt);
    L->db = ot_zeros(be, bs, dt);
    L->vW = ot_zeros(be, ws, dt);
    L->vb = ot_zeros(be, bs, dt);
    if (!L->W || !L->b || !L->dW || !L->db || !L->vW || !L->vb) return ot_errcode();
    double limit = sqrt(6.0 / (in + out));
    ot_pool *pool = ot_pool_push();
    ot_node *u = ot_rand(ws, .seed = seed, .dtype = dt);    /* [0, 1) */
    int rc = ot_assign(L->W, ot_mul(ot_sub(ot_mul(u, 2.0), 1.0), limit));
    ot_pool_pop(pool);
    return rc;
}

/* act(dot(x, W) + b): a tree in the current pool. b broadcasts over rows. */
static ot_node *linear_fprop(const linear *L, ot_node *x)
{
    return L->act(ot_add(ot_dot(x, L->W), L->b));
}

/* dW, db = gradients of the cost that ad was made from, in one evaluation. */
static int linear_bprop(linear *L, ot_autodiff *ad)
{
    return ot_autodiff_backprop(ad, 2, (ot_tensor *[]){L->W, L->b},
                                (ot_tensor *[]){L->dW, L->db});
}

/* ---------------------------------------------------------------- a model */

/* For a stack of layers, bprop asks for every parameter in one
 * ot_autodiff_backprop: the error flowing back through the upper layers is
 * a subtree of every lower layer's gradient, and one evaluation computes it
 * once (a layer-by-layer linear_bprop would recompute it per layer). */
enum { MAXL = 4 };
typedef struct model {
    int n;
    linear layer[MAXL];
} model;

static ot_node *model_fprop(model *m, ot_tensor *x)
{
    ot_node *h = ot_tensor_node(x);
    for (int i = 0; i < m->n; i++) h = linear_fprop(&m->layer[i], h);
    return h;
}

static int model_bprop(model *m, ot_node *cost)
{
    ot_tensor *wrt[2 * MAXL], *grads[2 * MAXL];
    for (int i = 0; i < m->n; i++) {
        wrt[2 * i] = m->layer[i].W;
        wrt[2 * i + 1] = m->layer[i].b;
        grads[2 * i] = m->layer[i].dW;
        grads[2 * i + 1] = m->layer[i].db;
    }
    ot_autodiff *ad = ot_autodiff_new(cost, NULL);
    if (!ad) return ot_errcode();
    int rc = ot_autodiff_backprop(ad, 2 * m->n, wrt, grads);
    ot_autodiff_free(ad);
    return rc;
}

/* One SGD step with momentum on every parameter, from the gradient tensors
 * bprop wrote (ot_tensor_node makes each a tree). */
static int model_sgd(model *m, const ot_sgd *opt)
{
    ot_tensor *w[2 * MAXL], *vel[2 * MAXL];
    ot_node *g[2 * MAXL];
    for (int i = 0; i < m->n; i++) {
        linear *L = &m->layer[i];
        w[2 * i] = L->W, w[2 * i + 1] = L->b;
        g[2 * i] = ot_tensor_node(L->dW), g[2 * i + 1] = ot_tensor_node(L->db);
        vel[2 * i] = L->vW, vel[2 * i + 1] = L->vb;
    }
    return ot_sgd_step(opt, 2 * m->n, w, g, vel);
}

/* Mean squared error of a prediction tree against target tensor z. */
static ot_node *mse(ot_node *pred, ot_tensor *z) { return ot_mean(ot_sqr(ot_sub(pred, z))); }

/* ---------------------------------------------------------------- checks */

static int failures;

static void expect(int ok, const char *what)
{
    printf("  %-58s %s\n", what, ok ? "ok" : "FAILED");
    if (!ok) {
        failures++;
        if (ot_errcode() != 0) printf("  last error: %s\n", ot_errmsg());
    }
}

/* The value of a scalar tree, in double. */
static double value(ot_node *tree)
{
    double v = NAN;
    ot_pool *pool = ot_pool_push();
    ot_tensor *t = ot_eval(ot_cast(tree, .dtype = OT_F64));
    if (t) ot_get(t, &v);
    ot_tensor_free(t);
    ot_pool_pop(pool);
    return v;
}

/* 1. cost = sum(x.W + b) through one identity layer: dW[i][j] = sum_n x[n][i]
 * for every j, db[j] = rows. */
static void check_known(ot_backend *be)
{
    printf("1. known gradient of sum(x.W + b)\n");
    enum { N = 5, IN = 3, OUT = 4 };
    double xs[N * IN];
    for (int i = 0; i < N * IN; i++) xs[i] = 0.25 * i - 1.5;
    ot_tensor *x = ot_array(be, OT_SHAPE(N, IN), OT_F64, xs);
    linear L;
    int rc = linear_init(&L, be, IN, OUT, OT_F64, NULL, 7);
    ot_pool *pool = ot_pool_push();
    ot_node *cost = ot_sum(linear_fprop(&L, ot_tensor_node(x)));
    ot_autodiff *ad = rc == 0 ? ot_autodiff_new(cost, NULL) : NULL;
    if (ad) rc = linear_bprop(&L, ad);
    else if (rc == 0) rc = ot_errcode();
    ot_autodiff_free(ad);
    ot_pool_pop(pool);

    double dW[IN * OUT], db[OUT], worst = 0;
    if (rc == 0) rc = ot_get(L.dW, dW);
    if (rc == 0) rc = ot_get(L.db, db);
    for (int i = 0; rc == 0 && i < IN; i++) {
        double col = 0;
        for (int n = 0; n < N; n++) col += xs[n * IN + i];
        for (int j = 0; j < OUT; j++) worst = fmax(worst, fabs(dW[i * OUT + j] - col));
    }
    for (int j = 0; rc == 0 && j < OUT; j++) worst = fmax(worst, fabs(db[j] - N));
    printf("  largest difference from the known values: %.3g\n", worst);
    expect(rc == 0 && worst < 1e-12, "dW = column sums of x, db = number of rows");
    linear_free(&L);
    ot_tensor_free(x);
}

/* 2. Every parameter's gradient against central differences of the cost.
 * Each perturbed cost rebuilds the tree: trees are cheap, and the leaves
 * read the tensors' current values when evaluated. Returns the largest
 * difference, relative to max(1, |gradient|). */
static double fd_param(model *m, ot_tensor *x, ot_tensor *z, ot_tensor *p, ot_tensor *grad)
{
    int64_t n = ot_tensor_numel(p);
    double *v = malloc(sizeof(double) * (size_t)n), *g = malloc(sizeof(double) * (size_t)n);
    double worst = INFINITY;
    if (v && g && ot_get(p, v) == 0 && ot_get(grad, g) == 0) {
        worst = 0;
        for (int64_t i = 0; i < n; i++) {
            const double eps = 1e-6;
            double saved = v[i];
            v[i] = saved + eps;
            ot_set(p, v);
            double up = value(mse(model_fprop(m, x), z));
            v[i] = saved - eps;
            ot_set(p, v);
            double down = value(mse(model_fprop(m, x), z));
            v[i] = saved;
            ot_set(p, v);
            double d = fabs((up - down) / (2 * eps) - g[i]) / fmax(1.0, fabs(g[i]));
            if (!(d <= worst)) worst = d;
        }
    }
    free(v);
    free(g);
    return worst;
}

static void check_fd(model *m, ot_tensor *x, ot_tensor *z)
{
    printf("2. gradients of a 2 -> 16 (GELU) -> 1 network vs central differences (f64)\n");
    ot_pool *pool = ot_pool_push();
    ot_node *cost = mse(model_fprop(m, x), z);
    printf("  cost (shared subtrees as %%k lines):\n");
    ot_pp(cost, stdout);
    printf("\n");
    int rc = model_bprop(m, cost);
    ot_pool_pop(pool);
    expect(rc == 0, "model_bprop: one ot_autodiff_backprop for 4 parameters");
    const char *names[] = {"W0", "b0", "W1", "b1"};
    for (int i = 0; rc == 0 && i < m->n; i++) {
        for (int j = 0; j < 2; j++) {
            linear *L = &m->layer[i];
            double d = fd_param(m, x, z, j ? L->b : L->W, j ? L->db : L->dW);
            char what[80];
            snprintf(what, sizeof what, "d cost / d %s (largest difference %.2g)", names[2 * i + j], d);
            expect(d < 1e-6, what);
        }
    }
}

/* 3. A fit with SGD and momentum: build, bprop, step, each step in a pool. */
static void check_fit(model *m, ot_tensor *x, ot_tensor *z, int steps)
{
    printf("3. fitting z = sin(2x)cos(y) with SGD + momentum, %d steps\n", steps);
    ot_sgd opt = {.lr = 0.1, .momentum = 0.9};
    double first = NAN, last = NAN;
    int rc = 0;
    for (int s = 0; s <= steps && rc == 0; s++) {
        ot_pool *pool = ot_pool_push();
        ot_node *cost = mse(model_fprop(m, x), z);
        double c = value(cost);
        if (s == 0) first = c;
        last = c;
        if (s % (steps / 5) == 0) printf("  step %4d  cost %.6f\n", s, c);
        if (s < steps) rc = model_bprop(m, cost);
        if (s < steps && rc == 0) rc = model_sgd(m, &opt);
        ot_pool_pop(pool);
    }
    expect(rc == 0, "every step ran");
    char what[80];
    snprintf(what, sizeof what, "cost fell tenfold (%.4f -> %.4f)", first, last);
    expect(last < first / 10, what);
}

int main(void)
{
    const char *small_env = getenv("OT_EXAMPLE_SMALL");
    int small = small_env && small_env[0] && strcmp(small_env, "0") != 0;
    ot_backend *be = ot_backend_new("ref", NULL);
    if (!be) {
        fprintf(stderr, "layer: %s\n", ot_errmsg());
        return 1;
    }
    printf("layer: backend %s\n", ot_backend_name(be));
    check_known(be);

    /* 64 points on a grid over [-1.5, 1.5]^2 and their targets. */
    enum { N = 64 };
    double xs[N * 2], zs[N];
    for (int i = 0; i < N; i++) {
        xs[2 * i] = -1.5 + 3.0 * (i % 8) / 7;
        xs[2 * i + 1] = -1.5 + 3.0 * (i / 8) / 7;
        zs[i] = sin(2 * xs[2 * i]) * cos(xs[2 * i + 1]);
    }
    ot_tensor *x = ot_array(be, OT_SHAPE(N, 2), OT_F64, xs);
    ot_tensor *z = ot_array(be, OT_SHAPE(N, 1), OT_F64, zs);
    model m = {.n = 2};
    int rc = linear_init(&m.layer[0], be, 2, 16, OT_F64, act_gelu, 1);
    if (rc == 0) rc = linear_init(&m.layer[1], be, 16, 1, OT_F64, NULL, 2);
    expect(rc == 0 && x && z, "a 2 -> 16 -> 1 model and its data");
    if (rc == 0) {
        check_fd(&m, x, z);
        check_fit(&m, x, z, small ? 200 : 1000);
    }

    for (int i = 0; i < m.n; i++) linear_free(&m.layer[i]);
    ot_tensor_free(x);
    ot_tensor_free(z);
    ot_backend_free(be);
    ot_pool_drain();
    printf("layer: %s\n", failures ? "FAILED" : "all checks passed");
    return failures != 0;
}

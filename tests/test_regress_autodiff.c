/*
 * test_regress_autodiff.c - regression tests for issue 13's autodiff defects
 * (3 to 6): gradients of the composites as their forward values compute
 * them, constant gradients of 0-d tensors, pow at its edges, and the same
 * class of value (NaN or finite) from the ref and cpu backends at singular
 * points. The gradient checks are f64 central differences (eps 1e-6, atol
 * 1e-5, rtol 1e-3) over every element of every input, on both backends.
 */
#include "test.h"

#include <stdlib.h>

static const char *const backends[2] = {"ref", "cpu"};

/* splitmix64, uniform in [-2, 2). */
static double urand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15u);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return (double)((z ^ (z >> 31)) >> 11) * 0x1p-51 - 2.0;
}

/* An f64 tensor of shape s holding v (or random values when v is NULL). */
static ot_tensor *f64(ot_backend *be, ot_shape s, const double *v, uint64_t seed)
{
    ot_tensor *t = ot_empty(be, s, OT_F64);
    CHECK(t != NULL);
    double *d = ot_tensor_data(t);
    for (int64_t i = 0; i < ot_tensor_numel(t); i++) d[i] = v ? v[i] : urand(&seed);
    return t;
}

static double *data(ot_tensor *t) { return ot_tensor_data(t); }

/* sum(tree * r): a scalar loss whose gradient seeds the tree with r. */
static double loss(ot_node *tree, const ot_tensor *r)
{
    ot_tensor *out = ot_eval(tree);
    if (!out) {
        test__fail(__FILE__, __LINE__, "eval: %s", ot_errmsg());
        return NAN;
    }
    double s = 0, *o = ot_tensor_data(out);
    const double *w = ot_tensor_data(r);
    for (int64_t i = 0; i < ot_tensor_numel(out); i++) s += o[i] * w[i];
    ot_tensor_free(out);
    return s;
}

/* The full-Jacobian check of tree (f64) with respect to n inputs, seeded
 * with a random next_error; each mismatch is a failure. */
static void gradcheck(const char *what, ot_node *tree, int n, ot_tensor *const in[])
{
    if (!tree) {
        test__fail(__FILE__, __LINE__, "%s: no tree: %s", what, ot_errmsg());
        return;
    }
    ot_backend *be = ot_tensor_backend(in[0]);
    ot_tensor *r = f64(be, ot_node_shape(tree), NULL, 99);
    ot_autodiff *ad = ot_autodiff_new(tree, ot_tensor_node(r));
    int bad = 0;
    if (!ad) {
        test__fail(__FILE__, __LINE__, "%s: autodiff_new: %s", what, ot_errmsg());
        bad++;
    }
    for (int k = 0; k < n && ad; k++) {
        ot_tensor *g = ot_autodiff_grad_tensor(ad, in[k]);
        if (!g) {
            test__fail(__FILE__, __LINE__, "%s: grad: %s", what, ot_errmsg());
            bad++;
            continue;
        }
        double *x = data(in[k]);
        for (int64_t i = 0; i < ot_tensor_numel(in[k]) && bad < 4; i++) {
            double v = x[i], eps = 1e-6;
            x[i] = v + eps;
            double lp = loss(tree, r);
            x[i] = v - eps;
            double lm = loss(tree, r);
            x[i] = v;
            double num = (lp - lm) / (2 * eps), an = data(g)[i];
            if (!(fabs(num - an) <= 1e-5 + 1e-3 * fabs(num))) {
                test__fail(__FILE__, __LINE__, "%s (%s): d/d input %d [%lld]: analytic %.10g, "
                           "numeric %.10g", what, ot_backend_name(be), k, (long long)i, an, num);
                bad++;
            }
        }
        ot_tensor_free(g);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(r);
}

/* The gradient of tree with respect to wrt, into out (f64). */
static int grad_of(ot_node *tree, ot_tensor *wrt, double *out)
{
    ot_autodiff *ad = ot_autodiff_new(tree, NULL);
    int rc = ad ? ot_autodiff_grad_host(ad, wrt, out) : ot_errcode();
    ot_autodiff_free(ad);
    return rc;
}

/* ---- defect 4: constant gradients ---------------------------------------- */

/* f = x and f = x + y of 0-d tensors have constant gradients (trees with no
 * leaf); grad_tensor and grad_host evaluate them on wrt's backend, as
 * backprop does. So do constant gradients of other shapes and a wrt the
 * tree does not read. */
TEST(defect04_constant_gradient_0d)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = f64(be, OT_SHAPE(), (double[]){2}, 0);
        ot_tensor *y = f64(be, OT_SHAPE(), (double[]){3}, 0);
        ot_tensor *v = f64(be, OT_SHAPE(2, 3), NULL, 1);
        ot_tensor *u = f64(be, OT_SHAPE(4), NULL, 2);
        double g[6];

        g[0] = -1;
        CHECK_INT(grad_of(ot_tensor_node(x), x, g), 0);
        CHECK_NEAR(g[0], 1, 0);
        ot_autodiff *ad = ot_autodiff_new(ot_add(x, y), NULL);
        for (int k = 0; k < 2; k++) {
            ot_tensor *t = ot_autodiff_grad_tensor(ad, k ? y : x);
            CHECK(t != NULL);
            if (t) {
                CHECK_INT(ot_tensor_ndim(t), 0);
                CHECK_INT(ot_tensor_dtype(t), OT_F64);
                CHECK_NEAR(data(t)[0], 1, 0);
            }
            ot_tensor_free(t);
        }
        ot_autodiff_free(ad);
        CHECK_INT(grad_of(ot_sub(x, ot_mul(y, 3.0)), y, g), 0);
        CHECK_NEAR(g[0], -3, 0);
        CHECK_INT(grad_of(ot_mul(x, 2.5f), x, g), 0);   /* a weak f32 constant */
        CHECK_NEAR(g[0], 2.5, 0);

        CHECK_INT(grad_of(ot_sum(v), v, g), 0);
        for (int i = 0; i < 6; i++) CHECK_NEAR(g[i], 1, 0);
        CHECK_INT(grad_of(ot_mul(v, 3.0), v, g), 0);
        for (int i = 0; i < 6; i++) CHECK_NEAR(g[i], 3, 0);
        CHECK_INT(grad_of(ot_sum(v), u, g), 0);        /* not read: zeros */
        for (int i = 0; i < 4; i++) CHECK_NEAR(g[i], 0, 0);
        CHECK_INT(grad_of(ot_tensor_node(v), x, g), 0);
        CHECK_NEAR(g[0], 0, 0);
        gradcheck("x + y, 0-d", ot_add(x, y), 2, (ot_tensor *[]){x, y});

        ot_pool_pop(pool);
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_tensor_free(v);
        ot_tensor_free(u);
        ot_backend_free(be);
    }
}

/* ---- defect 5: pow at its edges ------------------------------------------ */

/* PyTorch's pow_backward and pow_backward_exponent, one element. */
static double dpow_da(double a, double b) { return b == 0 ? 0 : b * pow(a, b - 1); }
static double dpow_db(double a, double b) { return a == 0 && b >= 0 ? 0 : pow(a, b) * log(a); }

/* d/dx pow(x, 0) at x = 0 was NaN (0 * inf); PyTorch gives 0. Every pair of
 * a base in {0, -0, -2, 0.7} and an exponent in {0, 1, 2, 0.5, -1, 3} gives
 * PyTorch's values on both backends, with tensor or constant operands. */
TEST(defect05_pow_gradient_edges)
{
    static const double as[] = {0, -0.0, -2, 0.7}, bs[] = {0, 1, 2, 0.5, -1, 3};
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        double av[24], bv[24], ga[24], gb[24];
        for (int i = 0; i < 24; i++) {
            av[i] = as[i / 6];
            bv[i] = bs[i % 6];
        }
        ot_tensor *a = f64(be, OT_SHAPE(24), av, 0), *b = f64(be, OT_SHAPE(24), bv, 0);
        ot_node *f = ot_pow(a, b);
        CHECK_INT(grad_of(f, a, ga), 0);
        CHECK_INT(grad_of(f, b, gb), 0);
        for (int i = 0; i < 24; i++) {
            if (!test__close(ga[i], dpow_da(av[i], bv[i]), 1e-12) ||
                !test__close(gb[i], dpow_db(av[i], bv[i]), 1e-12))
                test__fail(__FILE__, __LINE__, "%s: pow(%g, %g): d/da %g d/db %g, want %g %g",
                           backends[bi], av[i], bv[i], ga[i], gb[i], dpow_da(av[i], bv[i]),
                           dpow_db(av[i], bv[i]));
        }
        for (int j = 0; j < 6; j++) {   /* a constant exponent */
            ot_tensor *x = f64(be, OT_SHAPE(4), as, 0);
            CHECK_INT(grad_of(ot_pow(x, bs[j]), x, ga), 0);
            for (int i = 0; i < 4; i++) CHECK_NEAR(ga[i], dpow_da(as[i], bs[j]), 1e-12);
            ot_tensor_free(x);
        }
        for (int j = 0; j < 4; j++) {   /* a constant base */
            ot_tensor *y = f64(be, OT_SHAPE(6), bs, 0);
            CHECK_INT(grad_of(ot_pow(as[j], y), y, gb), 0);
            for (int i = 0; i < 6; i++) CHECK_NEAR(gb[i], dpow_db(as[j], bs[i]), 1e-12);
            ot_tensor_free(y);
        }
        ot_pool_pop(pool);
        ot_tensor_free(a);
        ot_tensor_free(b);
        ot_backend_free(be);
    }
}

/* Central differences agree with pow's gradient wherever pow is smooth
 * enough for them: at a = 0 with b in {0, 1, 2, 3} (d/da), at a = 0 with
 * b > 0 (d/db), at negative bases with integral exponents (d/da). */
TEST(defect05_pow_gradcheck)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *a = f64(be, OT_SHAPE(9), (double[]){0, 0, 0, 0, -1.5, -0.5, -2, 0.3, 1.2}, 0);
        ot_tensor *b = f64(be, OT_SHAPE(9), (double[]){0, 1, 2, 3, 2, 3, -1, 0.5, -1}, 0);
        gradcheck("pow d/da", ot_pow(a, b), 1, &a);
        ot_tensor *a2 = f64(be, OT_SHAPE(6), (double[]){0, 0, 0, 0.3, 1.2, 2}, 0);
        ot_tensor *b2 = f64(be, OT_SHAPE(6), (double[]){1, 2, 0.5, 0, -1, 0.5}, 0);
        gradcheck("pow d/db", ot_pow(a2, b2), 1, &b2);
        gradcheck("pow both", ot_pow(ot_add(a2, 0.5), b2), 2,
                            (ot_tensor *[]){a2, b2});
        ot_pool_pop(pool);
        ot_tensor_free(a);
        ot_tensor_free(b);
        ot_tensor_free(a2);
        ot_tensor_free(b2);
        ot_backend_free(be);
    }
}

/* ---- defect 3: composites differentiate their forward values ------------- */

/* d/dt cross_entropy(softmax(x), t) was -safelog(p), capped at 50, while
 * the loss takes logsoftmax: a logit of -1000 gave a loss of 1000 and a
 * gradient of 50. It is now minus the forward's own log p; d/dx is
 * p sum(t) - t, exact for targets that do not sum to 1. */
TEST(defect03_cross_entropy_target_gradient)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = f64(be, OT_SHAPE(2, 3), (double[]){0, -1000, 3, 1, 2, -1e4}, 0);
        ot_tensor *t = f64(be, OT_SHAPE(2, 3), (double[]){0.2, 0.5, 0.3, 0.4, 0.1, 0.7}, 0);
        ot_node *sm = ot_softmax(x, .axis = 1);
        ot_node *ce = ot_cross_entropy(sm, t, .axis = 1);
        ot_tensor *l = ot_eval(ot_logsoftmax(x, .axis = 1));
        ot_tensor *p = ot_eval(sm);
        ot_tensor *v = ot_eval(ce);
        double gt[6], gx[6];
        CHECK_INT(grad_of(ce, t, gt), 0);
        CHECK_INT(grad_of(ce, x, gx), 0);
        CHECK(data(v)[0] > 1000 * 0.5);
        for (int r = 0; r < 2; r++) {
            double st = 0;
            for (int j = 0; j < 3; j++) st += data(t)[3 * r + j];
            for (int j = 0; j < 3; j++) {
                int i = 3 * r + j;
                CHECK_NEAR(gt[i], -data(l)[i], 1e-12);
                CHECK_NEAR(gx[i], data(p)[i] * st - data(t)[i], 1e-12);
            }
        }
        CHECK_NEAR(gt[1], 1003.0 + log1p(exp(-3.0) + exp(-1003.0)), 1e-12);
        gradcheck("ce(softmax) at -1000", ce, 2, (ot_tensor *[]){x, t});
        ot_tensor_free(l);
        ot_tensor_free(p);
        ot_tensor_free(v);
        ot_pool_pop(pool);
        ot_tensor_free(x);
        ot_tensor_free(t);
        ot_backend_free(be);
    }
}

/* Positive values in [0.1, 2.1): probabilities and targets. */
static ot_tensor *pos(ot_backend *be, ot_shape s, uint64_t seed)
{
    ot_tensor *t = f64(be, s, NULL, seed);
    for (int64_t i = 0; i < ot_tensor_numel(t); i++) data(t)[i] = 0.1 + fabs(data(t)[i]) / 2;
    return t;
}

/* Every composite along every axis of a 3 x 4 operand, negative axes and
 * keepdims included, checked against central differences on both backends:
 * var, std (ddof 0 and 1), clip (also with lo > hi), softmax, logsoftmax,
 * cross_entropy over a softmax (same and other axis, broadcast targets or
 * probabilities, targets not summing to 1) and over plain probabilities,
 * squared_l2. */
TEST(defect03_composite_gradcheck)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = f64(be, OT_SHAPE(3, 4), NULL, 7);
        ot_tensor *x1 = f64(be, OT_SHAPE(1, 4), NULL, 8);
        ot_tensor *t = pos(be, OT_SHAPE(3, 4), 9), *t1 = pos(be, OT_SHAPE(1, 4), 10);
        ot_tensor *p = pos(be, OT_SHAPE(3, 4), 11);
        ot_tensor *xt[2] = {x, t}, *pt[2] = {p, t};
        static const int axes[] = {0, 1, -1, -2};
        for (int k = 0; k < 4; k++) {
            int ax = axes[k];
            bool kd = k & 1;
            char w[64];
#define GC(name, tree, n, in)                                                 \
    do {                                                                      \
        snprintf(w, sizeof w, "%s axis %d keepdims %d", name, ax, kd);        \
        gradcheck(w, tree, n, in);                                            \
    } while (0)
            GC("var", ot_var(x, .axis = ax, .keepdims = kd), 1, &x);
            GC("var ddof 1", ot_var(x, .axis = ax, .ddof = 1, .keepdims = !kd), 1, &x);
            GC("std", ot_std(x, .axis = ax, .keepdims = kd), 1, &x);
            GC("std ddof 1", ot_std(x, .axis = ax, .ddof = 1, .keepdims = !kd), 1, &x);
            GC("softmax", ot_softmax(x, .axis = ax), 1, &x);
            GC("logsoftmax", ot_logsoftmax(x, .axis = ax), 1, &x);
            GC("squared_l2", ot_squared_l2(x, .axis = ax, .keepdims = kd), 1, &x);
            GC("ce(softmax)", ot_cross_entropy(ot_softmax(x, .axis = ax), t, .axis = ax,
                                               .keepdims = kd), 2, xt);
            GC("ce(softmax, other axis)", ot_cross_entropy(ot_softmax(x, .axis = ax), t,
                                                           .axis = ax == 0 ? 1 : 0), 2, xt);
            GC("ce(softmax, broadcast t)", ot_cross_entropy(ot_softmax(x, .axis = ax), t1,
                                                            .axis = ax, .keepdims = kd),
               2, ((ot_tensor *[]){x, t1}));
            GC("ce(broadcast softmax)", ot_cross_entropy(ot_softmax(x1, .axis = ax), t,
                                                         .axis = ax, .keepdims = kd),
               2, ((ot_tensor *[]){x1, t}));
            GC("ce(p)", ot_cross_entropy(p, t, .axis = ax, .keepdims = kd), 2, pt);
#undef GC
        }
        gradcheck("var all", ot_var(x), 1, &x);
        gradcheck("softmax all", ot_softmax(x), 1, &x);
        gradcheck("logsoftmax all", ot_logsoftmax(x), 1, &x);
        gradcheck("std all keepdims", ot_std(x, .keepdims = true), 1, &x);
        gradcheck("squared_l2 all", ot_squared_l2(x), 1, &x);
        gradcheck("ce(softmax) all", ot_cross_entropy(ot_softmax(x), t), 2, xt);
        gradcheck("clip", ot_clip(x, -1.0, 1.0), 1, &x);
        gradcheck("clip lo > hi", ot_clip(x, 0.5, -0.5), 1, &x);
        ot_pool_pop(pool);
        ot_tensor_free(x);
        ot_tensor_free(x1);
        ot_tensor_free(t);
        ot_tensor_free(t1);
        ot_tensor_free(p);
        ot_backend_free(be);
    }
}

/* ---- defect 6: one convention per singular point, on both backends ------- */

/* NaN, +-inf, or finite. */
static int cls(double v) { return isnan(v) ? 0 : isinf(v) ? (v > 0 ? 1 : -1) : 2; }

/* The forward values (f, nf of them) and the gradient w.r.t. x (gx) of
 * tree, read back as doubles whatever the dtype. */
static void values(ot_node *tree, ot_tensor *x, double *f, int64_t *nf, double *gx)
{
    ot_tensor *v = ot_eval(tree);
    ot_autodiff *ad = ot_autodiff_new(tree, NULL);
    ot_tensor *g = ad ? ot_autodiff_grad_tensor(ad, x) : NULL;
    CHECK(v && g);
    ot_tensor *vv = v ? ot_eval(ot_cast(v, .dtype = OT_F64)) : NULL;
    ot_tensor *gg = g ? ot_eval(ot_cast(g, .dtype = OT_F64)) : NULL;
    *nf = vv ? ot_tensor_numel(vv) : 0;
    if (vv) memcpy(f, data(vv), (size_t)*nf * sizeof *f);
    if (gg) memcpy(gx, data(gg), (size_t)ot_tensor_numel(gg) * sizeof *gx);
    ot_tensor_free(vv);
    ot_tensor_free(gg);
    ot_tensor_free(v);
    ot_tensor_free(g);
    ot_autodiff_free(ad);
}

/* std of constant data (reached through eq or not) had gradient 0/0 = NaN
 * on ref, where its mean is exact and std is 0, and a finite value on cpu,
 * whose mean is off by a rounding and std is tiny. The gradient is 0 where
 * std == 0 (PyTorch's std_backward), so both are finite; var's too. */
TEST(defect06_std_constant_data)
{
    static const double cs[] = {0.7, 0, 0.1, 3.3};
    static const int ns[] = {3, 100, 1000};
    static double f[2][2000], g[2][2000];
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F32 : OT_F64;
        for (int ci = 0; ci < 4; ci++) {
            for (int ni = 0; ni < 3; ni++) {
                for (int op = 0; op < 5; op++) {
                    int64_t nf[2] = {0, 0};
                    for (int bi = 0; bi < 2; bi++) {
                        ot_backend *be = ot_backend_new(backends[bi], NULL);
                        ot_pool *pool = ot_pool_push();
                        ot_tensor *x = ot_full(be, OT_SHAPE(2, ns[ni]), dt, cs[ci]);
                        ot_node *tree = op == 0 ? ot_std(x, .axis = -1)
                                      : op == 1 ? ot_std(ot_mul(x, ot_eq(x, x)), .axis = 1)
                                      : op == 2 ? ot_std(ot_mul(ot_eq(x, x), x))
                                      : op == 3 ? ot_std(x, .axis = -1, .ddof = 1, .keepdims = true)
                                                : ot_var(x, .axis = 1);
                        values(tree, x, f[bi], &nf[bi], g[bi]);
                        ot_pool_pop(pool);
                        ot_tensor_free(x);
                        ot_backend_free(be);
                    }
                    for (int64_t i = 0; i < 2 * ns[ni]; i++) {
                        if (cls(g[0][i]) == 2 && cls(g[1][i]) == 2) continue;
                        test__fail(__FILE__, __LINE__,
                                   "%s op %d of %g x %d: d/dx[%lld] ref %g cpu %g",
                                   dti ? "f32" : "f64", op, cs[ci], ns[ni], (long long)i,
                                   g[0][i], g[1][i]);
                        break;
                    }
                    for (int64_t i = 0; i < nf[0]; i++) {
                        CHECK_INT(cls(f[0][i]), 2);
                        CHECK_INT(cls(f[1][i]), 2);
                        if (f[0][i] == 0)   /* ref: exact mean; the group's first element */
                            CHECK_NEAR(g[0][i * (2 * ns[ni] / nf[0])], 0, 0);
                    }
                }
            }
        }
    }
}

/* The elementwise ops at +0 and -0 (and the other special values): forward
 * values and gradients of the same class on both backends, in f64 and f32,
 * and the values PyTorch gives at 0: sqrt(-0) = -0, d sqrt at +-0 = +-inf,
 * d rsqrt at +-0 = -+inf, d log at +-0 = +-inf, d recip at +-0 = -inf,
 * d/db a/b at b = 0 = -inf for a = 1. */
TEST(defect06_singular_points_agree)
{
    enum { N = 9 };
    static const double xs[N] = {0, -0.0, 1, -1, 0.5, INFINITY, -INFINITY, NAN, 1e-30};
    static double f[2][N], g[2][N];
    for (int dti = 0; dti < 2; dti++) {
        ot_dtype dt = dti ? OT_F32 : OT_F64;
        for (int op = 0; op < 10; op++) {
            int64_t nf[2];
            for (int bi = 0; bi < 2; bi++) {
                ot_backend *be = ot_backend_new(backends[bi], NULL);
                ot_pool *pool = ot_pool_push();
                ot_tensor *x64 = f64(be, OT_SHAPE(N), xs, 0);
                ot_tensor *x = ot_eval(ot_cast(x64, .dtype = dt));
                ot_node *tree = op == 0 ? ot_sqrt(x) : op == 1 ? ot_rsqrt(x) : op == 2 ? ot_log(x)
                              : op == 3 ? ot_recip(x) : op == 4 ? ot_div(1.0, x)
                              : op == 5 ? ot_div(x, x) : op == 6 ? ot_pow(x, 0.0)
                              : op == 7 ? ot_pow(x, 0.5) : op == 8 ? ot_log2(x) : ot_safelog(x);
                values(tree, x, f[bi], &nf[bi], g[bi]);
                ot_pool_pop(pool);
                ot_tensor_free(x);
                ot_tensor_free(x64);
                ot_backend_free(be);
            }
            for (int i = 0; i < N; i++) {
                if (cls(f[0][i]) != cls(f[1][i]) || cls(g[0][i]) != cls(g[1][i]) ||
                    (!isnan(f[0][i]) && signbit(f[0][i]) != signbit(f[1][i])))
                    test__fail(__FILE__, __LINE__, "%s op %d at %g: ref %g d %g, cpu %g d %g",
                               dti ? "f32" : "f64", op, xs[i], f[0][i], g[0][i], f[1][i], g[1][i]);
            }
            double *gr = g[0], *fr = f[0];
            switch (op) {
            case 0:
                CHECK(fr[1] == 0 && signbit(fr[1]));
                CHECK_NEAR(gr[0], INFINITY, 0);
                CHECK_NEAR(gr[1], -INFINITY, 0);
                break;
            case 1:
                CHECK_NEAR(gr[0], -INFINITY, 0);
                CHECK_NEAR(gr[1], INFINITY, 0);
                break;
            case 2:
                CHECK_NEAR(gr[0], INFINITY, 0);
                CHECK_NEAR(gr[1], -INFINITY, 0);
                break;
            case 3:
            case 4:
                CHECK_NEAR(gr[0], -INFINITY, 0);
                CHECK_NEAR(gr[1], -INFINITY, 0);
                break;
            case 6:
                for (int i = 0; i < N; i++) CHECK_NEAR(gr[i], 0, 0);
                break;
            case 7:
                CHECK_NEAR(gr[0], INFINITY, 0);
                break;
            default:
                break;
            }
        }
    }
}

/* Fuzz finding 7-617224: cpu's plain mean of constant data was off by a
 * rounding, so std of it was tiny rather than 0 and log2(std) had a finite
 * gradient on cpu where ref's was NaN. var and std now centre on a refined
 * mean that is exact for constant data, on every backend. */
TEST(fuzz_std_constant_data_exact_on_every_backend)
{
    const char *names[2] = {"ref", "cpu"};
    double sd[2][2], gr[2][93];
    for (int b = 0; b < 2; b++) {
        ot_backend *be = ot_backend_new(names[b], NULL);
        ot_tensor *x = ot_full(be, OT_SHAPE(3, 31), OT_F64, 1 / 2.718281828459045);
        ot_tensor *y = ot_full(be, OT_SHAPE(1000), OT_F32, 0.7);
        ot_tensor *s = ot_empty(be, OT_SHAPE(), OT_F64);
        CHECK_INT(ot_assign(s, ot_std(x)), 0);
        ot_get(s, &sd[b][0]);
        CHECK_INT(ot_assign(s, ot_cast(ot_std(y), .dtype = OT_F64)), 0);
        ot_get(s, &sd[b][1]);
        ot_autodiff *ad = ot_autodiff_new(ot_log2(ot_std(x)), NULL);
        CHECK(ad != NULL);
        CHECK_INT(ot_autodiff_grad_host(ad, x, gr[b]), 0);
        ot_autodiff_free(ad);
        ot_tensor_free(x);
        ot_tensor_free(y);
        ot_tensor_free(s);
        ot_pool_drain();
        ot_backend_free(be);
    }
    for (int b = 0; b < 2; b++) {
        CHECK(sd[b][0] == 0.0);
        CHECK(sd[b][1] == 0.0);
        for (int i = 0; i < 93; i++) CHECK(isnan(gr[b][i]) == isnan(gr[0][i]));
    }
}

/* Fuzz seed 7 tree 1007: attention built with scale 0 (a node attribute
 * the parser and ot_build reach; the builder's 0 means 1/sqrt(dim)) under a
 * pow whose gradient is inf and NaN. BLAS skips a product whose alpha is
 * 0, so the cpu backend's scores and dq were 0 where ref's 0 * inf is NaN:
 * the kernel now scales outside the GEMMs. Both backends must agree. */
TEST(attention_scale_zero_keeps_nans_like_ref)
{
    const char *names[] = {"ref", "cpu"};
    double got[2][2 + 18 + 2];
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(names[b], OT_FUSION_ON);
        ot_pool *p = ot_pool_push();
        ot_tensor *q = ot_array(be, OT_SHAPE(1, 1, 1, 2), OT_F64, (double[]){0, 0});
        ot_tensor *pack = ot_zeros(be, OT_SHAPE(18), OT_F64);
        ot_tensor *e = ot_array(be, OT_SHAPE(1, 1, 1, 2), OT_F64, (double[]){-1, 0});
        ot_node *a = ot_build(OT_OP_ATTENTION, ot_tensor_node(q), ot_tensor_node(pack),
                              &(ot_args){.axis = OT_AXIS_ALL, .depth = 6, .ddof = 1});
        ot_node *y = a ? ot_build(OT_OP_POW, a, ot_tensor_node(e), &(ot_args){.axis = OT_AXIS_ALL}) : NULL;
        ot_autodiff *ad = y ? ot_autodiff_new(y, NULL) : NULL;
        CHECK(ad != NULL);
        ot_tensor *wrt[] = {q, pack, e}, *g[] = {ot_zeros_like(q), ot_zeros_like(pack), ot_zeros_like(e)};
        CHECK_INT(ad ? ot_autodiff_backprop(ad, 3, wrt, g) : -1, 0);
        CHECK_INT(ot_get(g[0], got[b]), 0);
        CHECK_INT(ot_get(g[1], got[b] + 2), 0);
        CHECK_INT(ot_get(g[2], got[b] + 20), 0);
        ot_autodiff_free(ad);
        for (int i = 0; i < 3; i++) ot_tensor_free(g[i]);
        ot_tensor_free(q), ot_tensor_free(pack), ot_tensor_free(e);
        ot_pool_pop(p);
        ot_backend_free(be);
    }
    for (int i = 0; i < 22; i++)
        if (!(got[0][i] == got[1][i] || (isnan(got[0][i]) && isnan(got[1][i]))))
            test__fail(__FILE__, __LINE__, "gradient value %d: cpu %g, ref %g", i, got[1][i], got[0][i]);
}

/*
 * test_norm.c - batch norm, layer norm, RMS norm and global average pooling
 * (optree/norm.h): values and running averages against loops written
 * here, gradients against central differences in float64, the one-value
 * and empty batches, every bad input's error (code, file:line, shapes),
 * and the cpu plan's kernel counts. tests/norm_check.py compares the same
 * builders with NumPy on random shapes and views.
 */
#include "test.h"

#include <stdlib.h>
#include <unistd.h>

static const char *const backends[] = {"ref", "cpu"};

static uint64_t rng_state = 88172645463325252ULL;

/* Uniform in [-1, 1): xorshift64, so the cases are the same every run. */
static double unif(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (double)(rng_state >> 11) / 4503599627370496.0 - 1.0;
}

/* An f64 tensor of random values in [lo, lo + 2). */
static ot_tensor *rand_t(ot_backend *be, ot_shape s, double lo)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = lo + 1 + unif();
    ot_tensor *t = ot_array(be, s, OT_F64, v);
    free(v);
    return t;
}

static double *host(const ot_tensor *t)
{
    int64_t n = ot_tensor_numel(t);
    double *v = calloc((size_t)(n ? n : 1), sizeof *v);
    if (ot_get(t, v)) test__fail(__FILE__, __LINE__, "get: %s", ot_errmsg());
    return v;
}

/* Training-mode batch norm of x (N, C, L) by loops: out, and the new
 * running mean and variance from rm and rv (momentum 0.1). */
static void bn_loops(const double *x, int64_t N, int64_t C, int64_t L, const double *g,
                     const double *b, double eps, double *out, double *rm, double *rv)
{
    int64_t n = N * L;
    for (int64_t c = 0; c < C; c++) {
        double s = 0, ss = 0;
        for (int64_t i = 0; i < N; i++)
            for (int64_t l = 0; l < L; l++) s += x[(i * C + c) * L + l];
        double mean = s / (double)n;
        for (int64_t i = 0; i < N; i++)
            for (int64_t l = 0; l < L; l++) ss += pow(x[(i * C + c) * L + l] - mean, 2);
        double var = ss / (double)n;
        for (int64_t i = 0; i < N; i++)
            for (int64_t l = 0; l < L; l++) {
                int64_t k = (i * C + c) * L + l;
                out[k] = (x[k] - mean) / sqrt(var + eps) * g[c] + b[c];
            }
        rm[c] = 0.9 * rm[c] + 0.1 * mean;
        rv[c] = 0.9 * rv[c] + 0.1 * ss / (double)(n - 1);
    }
}

/* Training and then inference on (3, 4, 5), the updates assigned with the
 * output in one ot_assign_many; inference reads the new running values. */
TEST(norm_batch_norm_values)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = rand_t(be, OT_SHAPE(3, 4, 5), 2), *g = rand_t(be, OT_SHAPE(4), 0);
        ot_tensor *b = rand_t(be, OT_SHAPE(4), 0), *rm = rand_t(be, OT_SHAPE(4), 0);
        ot_tensor *rv = rand_t(be, OT_SHAPE(4), 1), *out = ot_empty(be, OT_SHAPE(3, 4, 5), OT_F64);
        double *hx = host(x), *hg = host(g), *hb = host(b), *hm = host(rm), *hv = host(rv);
        double want[60];
        bn_loops(hx, 3, 4, 5, hg, hb, 1e-5, want, hm, hv);
        ot_node *upd[2];
        ot_node *y = ot_batch_norm(x, rm, rv, g, b, .training = true, .updates = upd);
        CHECK(y && upd[0] && upd[1]);
        CHECK_INT(ot_assign_many(3, (ot_tensor *[]){out, rm, rv}, (ot_node *[]){y, upd[0], upd[1]}),
                  0);
        double *got = host(out), *gm = host(rm), *gv = host(rv);
        for (int i = 0; i < 60; i++) CHECK_NEAR(got[i], want[i], 1e-12);
        for (int c = 0; c < 4; c++) {
            CHECK_NEAR(gm[c], hm[c], 1e-12);
            CHECK_NEAR(gv[c], hv[c], 1e-12);
        }
        /* inference with those running values */
        CHECK_INT(ot_assign(out, ot_batch_norm(x, rm, rv, g, b, .eps = 1e-3)), 0);
        free(got);
        got = host(out);
        for (int i = 0; i < 60; i++) {
            int c = i / 5 % 4;
            CHECK_NEAR(got[i], (hx[i] - gm[c]) / sqrt(gv[c] + 1e-3) * hg[c] + hb[c], 1e-12);
        }
        free(hx), free(hg), free(hb), free(hm), free(hv), free(got), free(gm), free(gv);
        ot_pool_pop(pool);
        ot_tensor_free(x), ot_tensor_free(g), ot_tensor_free(b), ot_tensor_free(rm);
        ot_tensor_free(rv), ot_tensor_free(out);
        ot_backend_free(be);
    }
}

/* ---- gradients ------------------------------------------------------------ */

/* sum(tree * r) evaluated afresh. */
static double weighted(ot_node *tree, const double *r)
{
    ot_tensor *t = ot_eval(tree);
    if (!t) {
        test__fail(__FILE__, __LINE__, "eval: %s", ot_errmsg());
        return NAN;
    }
    double *v = host(t), s = 0;
    for (int64_t i = 0; i < ot_tensor_numel(t); i++) s += v[i] * r[i];
    free(v);
    ot_tensor_free(t);
    return s;
}

/* Every element of every input: autodiff's gradient of sum(tree * r)
 * against central differences (step 1e-6, tolerance 1e-5 + 1e-4 relative). */
static void fd_check(const char *what, ot_backend *be, ot_node *tree, int n, ot_tensor *in[])
{
    CHECK(tree != NULL);
    if (!tree) return;
    ot_shape s = ot_node_shape(tree);
    ot_tensor *r = rand_t(be, s, -1);
    double *hr = host(r);
    ot_autodiff *ad = ot_autodiff_new(tree, ot_tensor_node(r));
    CHECK(ad != NULL);
    for (int k = 0; k < n && ad; k++) {
        ot_tensor *gt = ot_autodiff_grad_tensor(ad, in[k]);
        CHECK(gt != NULL);
        double *g = gt ? host(gt) : NULL, *v = host(in[k]);
        for (int64_t i = 0; g && i < ot_tensor_numel(in[k]); i++) {
            double keep = v[i];
            v[i] = keep + 1e-6;
            ot_set(in[k], v);
            double up = weighted(tree, hr);
            v[i] = keep - 1e-6;
            ot_set(in[k], v);
            double down = weighted(tree, hr);
            v[i] = keep;
            ot_set(in[k], v);
            double num = (up - down) / 2e-6;
            if (!(fabs(num - g[i]) <= 1e-5 + 1e-4 * fabs(num)))
                test__fail(__FILE__, __LINE__, "%s on %s: d/d input %d [%lld]: autodiff %.10g, "
                           "differences %.10g", what, ot_backend_name(be), k, (long long)i, g[i],
                           num);
        }
        free(g);
        free(v);
        ot_tensor_free(gt);
    }
    ot_autodiff_free(ad);
    free(hr);
    ot_tensor_free(r);
}

TEST(norm_gradients_f64)
{
    for (int bi = 0; bi < 2; bi++) {
        ot_backend *be = ot_backend_new(backends[bi], NULL);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = rand_t(be, OT_SHAPE(2, 3, 2, 2), 0), *g = rand_t(be, OT_SHAPE(3), 1);
        ot_tensor *b = rand_t(be, OT_SHAPE(3), 0), *rm = rand_t(be, OT_SHAPE(3), 0);
        ot_tensor *rv = rand_t(be, OT_SHAPE(3), 1);
        ot_node *upd[2];
        fd_check("batch_norm training", be,
                 ot_batch_norm(x, rm, rv, g, b, .training = true, .updates = upd), 3,
                 (ot_tensor *[]){x, g, b});
        fd_check("batch_norm inference", be, ot_batch_norm(x, rm, rv, g, b, .eps = 0.1), 5,
                 (ot_tensor *[]){x, g, b, rm, rv});
        ot_tensor *lw = rand_t(be, OT_SHAPE(2, 2), 0), *lb = rand_t(be, OT_SHAPE(2, 2), 0);
        fd_check("layer_norm", be, ot_layer_norm(x, 2, lw, lb), 3, (ot_tensor *[]){x, lw, lb});
        fd_check("rms_norm", be, ot_rms_norm(x, 2, lw, 1e-3), 2, (ot_tensor *[]){x, lw});
        fd_check("rms_norm dims 1", be, ot_rms_norm(x), 1, (ot_tensor *[]){x});
        fd_check("global_avg_pool", be, ot_global_avg_pool(x), 1, (ot_tensor *[]){x});
        ot_pool_pop(pool);
        ot_tensor *all[] = {x, g, b, rm, rv, lw, lb};
        for (int i = 0; i < 7; i++) ot_tensor_free(all[i]);
        ot_backend_free(be);
    }
}

/* ---- edges and errors -------------------------------------------------------- */

/* One value per channel in training is refused (PyTorch's rule); one
 * sample of several pixels is fine; an empty batch keeps the running
 * values; inference with one value is fine. */
TEST(norm_batch_norm_small_batches)
{
    char site[256];
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x1 = rand_t(be, OT_SHAPE(1, 3, 1), 0), *x2 = rand_t(be, OT_SHAPE(1, 3, 2), 0);
    ot_tensor *x0 = ot_empty(be, OT_SHAPE(0, 3, 2), OT_F64);
    ot_tensor *rm = rand_t(be, OT_SHAPE(3), 0), *rv = rand_t(be, OT_SHAPE(3), 1);
    ot_node *upd[2];
    int line = __LINE__ + 1;
    CHECK(!ot_batch_norm(x1, .training = true));
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "batch_norm", "more than 1 value per channel",
              "(1,3,1)");
    ot_clear_error();
    CHECK(ot_batch_norm(x2, .training = true) != NULL);
    CHECK(ot_batch_norm(x1, rm, rv) != NULL);
    double *m0 = host(rm), *v0 = host(rv);
    ot_node *y = ot_batch_norm(x0, rm, rv, .training = true, .updates = upd);
    ot_tensor *out = ot_empty(be, OT_SHAPE(0, 3, 2), OT_F64);
    CHECK_INT(ot_assign_many(3, (ot_tensor *[]){out, rm, rv}, (ot_node *[]){y, upd[0], upd[1]}),
              0);
    double *m1 = host(rm), *v1 = host(rv);
    for (int c = 0; c < 3; c++) CHECK(m0[c] == m1[c] && v0[c] == v1[c]);
    free(m0), free(v0), free(m1), free(v1);
    ot_pool_pop(pool);
    ot_tensor *all[] = {x0, x1, x2, rm, rv, out};
    for (int i = 0; i < 6; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* expr must fail with code, its message naming this line and every
 * string given. */
#define BAD(expr, code, ...)                                                  \
    do {                                                                      \
        ot_clear_error();                                                     \
        int line_ = __LINE__;                                                 \
        CHECK(!(expr));                                                       \
        CHECK_ERR((code), TEST_SITE(site, line_), __VA_ARGS__);               \
    } while (0)

/* Each bad input: NULL, the code, the caller's file:line and the shapes. */
TEST(norm_bad_input)
{
    char site[256];
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = rand_t(be, OT_SHAPE(2, 3, 4), 0), *c3 = rand_t(be, OT_SHAPE(3), 0);
    ot_tensor *c4 = rand_t(be, OT_SHAPE(4), 0), *f32 = ot_zeros(be, OT_SHAPE(3), OT_F32);
    ot_tensor *xi = ot_zeros(be, OT_SHAPE(2, 3), OT_I32);
    ot_node *upd[2];
    BAD(ot_batch_norm(x, .axis = 3, .training = true), OT_EINVAL, "channel axis 3", "(2,3,4)");
    BAD(ot_batch_norm(x, c4, c4), OT_ESHAPE, "running_mean is float64 of shape (4,)",
        "must be float64 of shape (3,)");
    BAD(ot_batch_norm(x, c3, f32), OT_EDTYPE, "running_var is float32", "(2,3,4)");
    BAD(ot_batch_norm(x, c3, c3, .eps = -1), OT_EINVAL, "eps", "-1");
    BAD(ot_batch_norm(x, c3, c3, .momentum = 1.5), OT_EINVAL, "momentum", "1.5");
    BAD(ot_batch_norm(x, c3, c3, .momentum = NAN), OT_EINVAL, "momentum", "nan");
    BAD(ot_batch_norm(x, c3, c3, .training = true), OT_EINVAL, ".updates", "updates[2]");
    BAD(ot_batch_norm(x, c3, NULL, .training = true), OT_EINVAL, "both or neither", "running_var");
    BAD(ot_batch_norm(x), OT_EINVAL, "inference", "running_mean");
    BAD(ot_batch_norm(x, c3, c3, c4, .updates = upd), OT_ESHAPE, "weight", "(4,)");
    BAD(ot_batch_norm(xi, .training = true), OT_EDTYPE, "int32", "(2,3)");
    BAD(ot_layer_norm(x, 4), OT_EINVAL, "dims must be in [1, 3]", "(2,3,4)");
    BAD(ot_layer_norm(x, 1, c3), OT_ESHAPE, "weight is float64 of shape (3,)", "(4,)");
    BAD(ot_layer_norm(x, .eps = NAN), OT_EINVAL, "eps", "nan");
    BAD(ot_rms_norm(x, 0), OT_EINVAL, "rms_norm", "dims must be in [1, 3]", "(2,3,4)");
    BAD(ot_rms_norm(x, 2, c3), OT_ESHAPE, "weight is float64 of shape (3,)", "(3,4)");
    ot_tensor *w4 = ot_zeros(be, OT_SHAPE(4), OT_F32);
    BAD(ot_rms_norm(x, .weight = w4), OT_EDTYPE, "float32", "(2,3,4)");
    BAD(ot_rms_norm(x, .eps = -1e-3), OT_EINVAL, "eps", "-0.001");
    BAD(ot_rms_norm(xi), OT_EDTYPE, "int32", "(2,3)");
    BAD(ot_global_avg_pool(xi), OT_ESHAPE, "(2,3)", "at least 3 dims");
    ot_pool_pop(pool);
    ot_tensor *all[] = {x, c3, c4, f32, xi, w4};
    for (int i = 0; i < 6; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

/* The cpu plan (x (8,16,7,7) f32): inference is one elementwise kernel, and
 * so is global average pooling (H and W merged into one axis); training
 * reads x in three passes (the mean and the variance along H*W, the
 * output, computed as (N,C,H*W) and written through a reshape that copies
 * nothing), small kernels finish the reductions over N, count channel 0's
 * values (the running variance's n / (n - 1), [8x49]) and write the
 * running averages, all in one plan with the output. */
TEST(norm_batch_norm_plan)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    ot_pool *pool = ot_pool_push();
    ot_shape xs = OT_SHAPE(8, 16, 7, 7), cs = OT_SHAPE(16);
    ot_tensor *x = ot_zeros(be, xs, OT_F32), *out = ot_empty(be, xs, OT_F32);
    ot_tensor *rm = ot_zeros(be, cs, OT_F32), *rv = ot_zeros(be, cs, OT_F32);
    char *text = test__capture(ot_explain, ot_batch_norm(x, rm, rv));
    CHECK(text && strstr(text, "plan: 1 kernel,"));
    free(text);
    text = test__capture(ot_explain, ot_global_avg_pool(x));
    CHECK(text && strstr(text, "plan: 1 kernel,") && strstr(text, "[128x49]"));
    free(text);
    ot_node *upd[2];
    ot_node *y = ot_batch_norm(x, rm, rv, .training = true, .updates = upd);
    text = test__explain_many(3, (ot_tensor *[]){out, rm, rv}, (ot_node *[]){y, upd[0], upd[1]});
    CHECK(text && strstr(text, "plan: 7 kernels,"));
    int full = 0;   /* kernels over all of x: "[8x16x..." */
    for (const char *p = text; p && (p = strstr(p, "[8x16x")); p++) full++;
    CHECK_INT(full, 2);   /* the variance's pass and the output's; the mean's reads [128x49] */
    CHECK(text && strstr(text, "[128x49]"));
    free(text);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(out), ot_tensor_free(rm), ot_tensor_free(rv);
    ot_backend_free(be);
}

/* Layer norm and RMS norm over the last axis (x (64, 1000) f32): the row
 * statistics and the normalise-scale-shift pass run per block of rows, x
 * read from memory once (3 kernels and 2 for RMS; rsqrt(var + eps) is
 * computed in the output's pass). Rows of 1e4 + noise keep their
 * variance: the variance is centred. */
TEST(norm_trailing_plan)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_zeros(be, OT_SHAPE(64, 1000), OT_F32), *w = ot_ones(be, OT_SHAPE(1000), OT_F32);
    char *text = test__capture(ot_explain, ot_layer_norm(x, .weight = w, .bias = w));
    CHECK(text && strstr(text, "plan: 3 kernels,") && strstr(text, "all kernels run per block of"));
    free(text);
    text = test__capture(ot_explain, ot_rms_norm(x, .weight = w));
    CHECK(text && strstr(text, "plan: 2 kernels,") && strstr(text, "all kernels run per block of"));
    free(text);
    float *xv = ot_tensor_data(x);
    for (int i = 0; i < 64000; i++) xv[i] = 1e4f + (float)(i % 7) * 0.1f;
    ot_tensor *out = ot_empty(be, OT_SHAPE(64, 1000), OT_F32);
    CHECK_INT(ot_assign(out, ot_layer_norm(x)), 0);
    float *ov = ot_tensor_data(out);
    double m = 0, v = 0, worst = 0;   /* row 0 in double: std ~0.2 */
    for (int j = 0; j < 1000; j++) m += xv[j] / 1000.0;
    for (int j = 0; j < 1000; j++) v += (xv[j] - m) * (xv[j] - m) / 1000.0;
    for (int j = 0; j < 1000; j++) worst = fmax(worst, fabs(ov[j] - (xv[j] - m) / sqrt(v + 1e-5)));
    CHECK(worst < 5e-3);   /* the f32 mean's rounding at 1e4 (~5e-4) over std 0.2 */
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(out);
    ot_backend_free(be);
}

/* d/dx of layer norm (weight w, incoming gradient g) by the closed form,
 * row by row in double: r (gw - mean(gw) - xhat mean(gw xhat)). */
static void ln_dx_loops(const double *x, const double *w, const double *g, int64_t rows,
                        int64_t n, double eps, double *dx)
{
    for (int64_t i = 0; i < rows; i++) {
        const double *xr = x + i * n, *gr = g + i * n;
        double m = 0, v = 0, a = 0, b = 0;
        for (int64_t j = 0; j < n; j++) m += xr[j] / (double)n;
        for (int64_t j = 0; j < n; j++) v += (xr[j] - m) * (xr[j] - m) / (double)n;
        double r = 1 / sqrt(v + eps);
        for (int64_t j = 0; j < n; j++) {
            a += gr[j] * w[j] / (double)n;
            b += gr[j] * w[j] * (xr[j] - m) * r / (double)n;
        }
        for (int64_t j = 0; j < n; j++)
            dx[i * n + j] = r * (gr[j] * w[j] - a - (xr[j] - m) * r * b);
    }
}

/* Whether got (rows x n) is the closed form of layer norm's d/dx of x,
 * weight w, incoming gradient g, within 1e-10. */
static bool ln_dx_matches(ot_tensor *x, ot_tensor *w, ot_tensor *g, ot_tensor *got, int64_t rows,
                          int64_t n)
{
    double *hx = host(x), *hw = host(w), *hg = host(g), *want = malloc(sizeof *want * (size_t)(rows * n));
    double *hv = got ? host(got) : NULL, worst = 0;
    ln_dx_loops(hx, hw, hg, rows, n, 1e-5, want);
    for (int64_t i = 0; hv && i < rows * n; i++) worst = fmax(worst, fabs(hv[i] - want[i]));
    bool ok = hv && worst < 1e-10;
    free(hx), free(hw), free(hg), free(want), free(hv);
    return ok;
}

/* Layer norm over rows, written out with its eps held in the tensor e:
 * autodiff's closed form of a standardisation (autodiff_rules.c's
 * standardise_rule) takes a constant eps only, so its d/dx is the plain
 * rules' chain of sums. */
static ot_node *ln_eps_tensor(ot_tensor *x, ot_tensor *w, ot_tensor *e)
{
    ot_node *d = ot_sub(x, ot_mean(x, .axis = 1, .keepdims = true));
    ot_node *v = ot_mean(ot_sqr(d), .axis = 1, .keepdims = true);
    return ot_mul(ot_mul(d, ot_rsqrt(ot_add(v, e))), w);
}

/* Layer norm's d/dx of rows x 1000 on a cpu backend of opts (eps_tensor:
 * ln_eps_tensor's, else ot_layer_norm's), checked against the closed form;
 * returns its plan's explain (the caller frees). */
static char *ln_dx_explained(ot_backend_opts opts, int64_t rows, bool eps_tensor)
{
    ot_backend *be = ot_backend_new("cpu", &opts);
    ot_pool *pool = ot_pool_push();
    int64_t n = 1000;
    ot_tensor *x = rand_t(be, OT_SHAPE(rows, n), -1), *w = rand_t(be, OT_SHAPE(n), 0);
    ot_tensor *g = rand_t(be, OT_SHAPE(rows, n), -1), *e = ot_full(be, OT_SHAPE(1), OT_F64, 1e-5);
    ot_node *y = eps_tensor ? ln_eps_tensor(x, w, e) : ot_layer_norm(x, .weight = w, .eps = 1e-5);
    ot_autodiff *ad = ot_autodiff_new(y, ot_tensor_node(g));
    ot_node *dx = ot_autodiff_grad(ad, x);
    char *text = test__capture(ot_explain, dx);
    ot_tensor *got = ot_eval(dx);
    CHECK(ln_dx_matches(x, w, g, got, rows, n));
    ot_autodiff_free(ad);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(g), ot_tensor_free(e), ot_tensor_free(got);
    ot_backend_free(be);
    return text;
}

/* ln_dx_explained on `threads`: the explain must hold `want` and must not
 * hold `unwanted` (NULL: anything goes). */
static void ln_dx_case(int threads, int64_t rows, const char *want, const char *unwanted)
{
    char *text = ln_dx_explained((ot_backend_opts){.threads = threads}, rows, false);
    CHECK(text && strstr(text, want) && (!unwanted || !strstr(text, unwanted)));
    free(text);
}

/* The gradient of layer norm w.r.t. x alone runs all its kernels per block
 * of rows on the cpu backend (the per-row rsqrt(var + eps), stored because
 * several kernels read it, joins the blocks), 67 rows in blocks of 32 with
 * a short last block, and equals the closed form. */
TEST(norm_layer_norm_grad_row_blocks)
{
    ln_dx_case(1, 67, "all kernels run per block of 32 rows", NULL);
}

/* The gradient keeps no row-sized temporary: x - mean(x) and g * w, each
 * read by three of its kernels, are computed again in each (a read of x or
 * g, the broadcast mean or weight from cache) instead of stored and read
 * back (plan_fuse.c's read_cost); what the blocks keep is the per-row
 * statistics, 4 values a row of the block's 32. */
TEST(norm_layer_norm_grad_recomputes_centred_rows)
{
    char *text = ln_dx_explained((ot_backend_opts){.threads = 1}, 67, false);
    const char *at = text ? strstr(text, "temporaries of one block: ") : NULL;
    long bytes = -1;
    CHECK(at && sscanf(at, "temporaries of one block: %ld bytes", &bytes) == 1);
    CHECK(bytes > 0 && bytes < 32 * 1000 * 8);
    free(text);
}

/* The same gradient's x-sized temporaries hold one block of rows each, in
 * each thread's own memory (the arena keeps none of them), and 1, 2 and 3
 * threads, each running other blocks in the same bytes, give the same bits
 * as 1 thread; so does the gradient inside a sum and beside a second root. */
TEST(norm_layer_norm_grad_block_temps_threads)
{
    int64_t rows = 203, n = 1000;   /* 7 blocks: work enough for threads */
    double *ref = NULL;
    uint64_t seed = rng_state;
    for (int threads = 1; threads <= 3; threads++) {
        rng_state = seed;   /* the same inputs each time */
        ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = threads});
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = rand_t(be, OT_SHAPE(rows, n), -1), *w = rand_t(be, OT_SHAPE(n), 0);
        ot_tensor *g = rand_t(be, OT_SHAPE(rows, n), -1);
        ot_autodiff *ad = ot_autodiff_new(ot_layer_norm(x, .weight = w, .eps = 1e-5), ot_tensor_node(g));
        ot_node *dx = ot_autodiff_grad(ad, x);
        char *text = test__capture(ot_explain, dx);
        CHECK(text && strstr(text, "temporaries (0 bytes)") &&
              strstr(text, "all kernels run per block of 32 rows; temporaries of one block: "));
        free(text);
        ot_tensor *got = ot_eval(dx), *total = ot_eval(ot_sum(ot_mul(dx, dx), .axis = 1));
        double *hv = got ? host(got) : NULL, *ht = total ? host(total) : NULL;
        CHECK(hv && ht);
        if (threads == 1) ref = hv;
        for (int64_t i = 0; hv && ref && i < rows * n; i++)
            if (memcmp(&hv[i], &ref[i], sizeof *hv) != 0) {
                CHECK(!"the same bits at every thread count");
                break;
            }
        for (int64_t i = 0; ht && ref && i < rows; i++) {
            double want = 0;
            for (int64_t j = 0; j < n; j++) want += ref[i * n + j] * ref[i * n + j];
            CHECK(fabs(ht[i] - want) <= 1e-4 * want);
        }
        if (threads > 1) free(hv);
        free(ht);
        ot_autodiff_free(ad);
        ot_pool_pop(pool);
        ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(g), ot_tensor_free(got), ot_tensor_free(total);
        ot_backend_free(be);
    }
    free(ref);
}

/* With more threads than the blocks go round (67 rows in blocks of 32 on 4
 * threads), one block per thread would not be smaller than the whole: the
 * temporaries stay whole in the arena, and the gradient is still the
 * closed form. */
TEST(norm_layer_norm_grad_few_blocks_many_threads)
{
    ln_dx_case(4, 67, "all kernels run per block of 32 rows\n", "temporaries of one block");
}

/* The plain rules' gradient of a layer norm (eps in a tensor): its last
 * kernel reads a block-local temporary and writes the output: where it
 * streams (a threshold of 1 byte), the temporary stays in the block's
 * memory and the output is written once, by that kernel alone; where it
 * does not (no streaming), the temporary goes into the output, one buffer
 * fewer. Both equal the closed form, on 1 thread and on 2. */
TEST(norm_layer_norm_grad_streams_from_block_temps)
{
    for (int run = 0; run < 4; run++) {
        int stream = run & 1, threads = 1 + run / 2;   /* 2 threads: a block each, 33 rows apart */
        char *text = ln_dx_explained(
            (ot_backend_opts){.threads = threads, .stream_bytes = stream ? 1 : OT_STREAM_NEVER}, 67,
            true);
        /* the last kernel's line: the only one naming out0 when streamed */
        const char *first = text ? strstr(text, "out0") : NULL;
        const char *last = text ? strstr(text, "kernel 4:") : NULL;
        CHECK(first && last && strstr(text, "plan: 5 kernels,"));
        if (first && last && strstr(text, "generated code")) {
            CHECK((first > last) == (stream == 1));
            CHECK((strstr(last, "streaming stores") != NULL) == (stream == 1));
        }
        free(text);
    }
}

/* Builds a normalisation of x for hvp_case: layer norm over x's last two
 * axes, or a training batch norm of x (N, C, H, W) over N, H and W (two
 * axes once H and W merge: the closed form's means along each). */
static ot_node *norm_of(ot_tensor *x, ot_tensor *w, bool batch)
{
    if (!batch) return ot_layer_norm(x, .dims = 2, .weight = w, .eps = 1e-3);
    return ot_batch_norm(x, .weight = w, .training = true, .eps = 1e-3);
}

/* f(x) = sum(v * d/dx <norm(x), g>), and its own gradient by autodiff
 * again (a Hessian-vector product): d/dx takes autodiff's closed form of
 * the standardisation, whose derivative must still be the true one. That
 * gradient is checked against central differences of f, element by
 * element, on ref and cpu in f64. */
static void hvp_case(const char *backend, bool batch)
{
    ot_backend *be = ot_backend_new(backend, NULL);
    ot_pool *pool = ot_pool_push();
    ot_shape xs = batch ? OT_SHAPE(3, 2, 2, 2) : OT_SHAPE(2, 3, 4);
    ot_shape ws = batch ? OT_SHAPE(2) : OT_SHAPE(3, 4);
    ot_tensor *x = rand_t(be, xs, -1), *w = rand_t(be, ws, 0);
    ot_tensor *g = rand_t(be, xs, -1), *v = rand_t(be, xs, -1);
    ot_autodiff *a1 = ot_autodiff_new(norm_of(x, w, batch), ot_tensor_node(g));
    ot_node *f = ot_sum(ot_mul(ot_autodiff_grad(a1, x), v));
    ot_autodiff *a2 = ot_autodiff_new(f, NULL);
    ot_tensor *hv = ot_eval(ot_autodiff_grad(a2, x));
    double *want = hv ? host(hv) : NULL, *xv = host(x), h = 1e-5, worst = 0;
    for (int64_t i = 0; want && i < ot_tensor_numel(x); i++) {
        double fx[2], keep = xv[i];
        for (int side = 0; side < 2; side++) {
            xv[i] = keep + (side ? -h : h);
            ot_set(x, xv);
            ot_tensor *t = ot_eval(f);
            double *ht = t ? host(t) : NULL;
            fx[side] = ht ? ht[0] : NAN;
            free(ht);
            ot_tensor_free(t);
        }
        xv[i] = keep;
        ot_set(x, xv);
        worst = fmax(worst, fabs((fx[0] - fx[1]) / (2 * h) - want[i]) / (1 + fabs(want[i])));
    }
    CHECK(want && worst < 1e-6);
    free(want), free(xv);
    ot_autodiff_free(a2), ot_autodiff_free(a1);
    ot_pool_pop(pool);
    ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(g), ot_tensor_free(v), ot_tensor_free(hv);
    ot_backend_free(be);
}

TEST(norm_closed_form_gradient_differentiates_again)
{
    for (int b = 0; b < 2; b++) {
        hvp_case("ref", b);
        hvp_case("cpu", b);
    }
}

/* ---- the model's batch norm layer --------------------------------------------- */

/* A batch norm layer on the inputs, then a dense layer: one step of 4 rows
 * moves the running values by momentum towards the batch's mean and
 * unbiased variance (read back from ot_model_save's "mean0" and "var0");
 * predict normalises by them; batch 1 is refused naming the layer; load
 * restores the running values. */
TEST(norm_model_batch_norm_layer)
{
    char site[256], path[] = "/tmp/optree_norm_model_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0);
    if (fd >= 0) close(fd);
    ot_backend *be = ot_backend_new("cpu", NULL);
    float xv[12] = {1, 2, 3, 2, 4, 6, 0, 1, -1, 5, 3, 0}, yv[8] = {1, 0, 0, 1, 1, 0, 0, 1};
    ot_tensor *x = ot_array(be, OT_SHAPE(4, 3), OT_F32, xv);
    ot_tensor *y = ot_array(be, OT_SHAPE(4, 2), OT_F32, yv);
    ot_model *m = ot_model_new(be, 3);
    CHECK_INT(ot_model_batch_norm(m, OT_ACT_NONE, 0.1, 1e-5), 0);
    CHECK_INT(ot_model_linear(m, 2, OT_ACT_NONE, 7), 0);
    CHECK_INT(ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL), 0);
    int line = __LINE__ + 1;
    CHECK(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 1, .quiet = true}, NULL) != 0);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "layer 0 is a batch norm layer", "batch >= 2");
    line = __LINE__ + 1;
    CHECK(ot_model_batch_norm(m, OT_ACT_NONE, 2.0, 1e-5) != 0);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "model_batch_norm", "momentum", "2");
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .no_shuffle = true, .quiet = true},
                           NULL), 0);
    CHECK_INT(ot_model_save(m, path), 0);
    ot_tensor *got[2] = {0};
    CHECK_INT(ot_loadz(be, path, 2, (const char *[]){"mean0", "var0"}, got), 6);
    float rm[3] = {0}, rv[3] = {0};
    if (got[0] && got[1]) {
        ot_get(got[0], rm);
        ot_get(got[1], rv);
    }
    for (int c = 0; c < 3; c++) {
        double mean = 0, ss = 0;
        for (int r = 0; r < 4; r++) mean += xv[3 * r + c] / 4.0;
        for (int r = 0; r < 4; r++) ss += pow(xv[3 * r + c] - mean, 2);
        CHECK_NEAR(rm[c], 0.1 * mean, 1e-6);
        CHECK_NEAR(rv[c], 0.9 + 0.1 * ss / 3, 1e-6);
    }
    /* predict reads the running values: with them reset by a load of
     * other values, the output changes, and loading the file restores it */
    ot_tensor *p1 = ot_model_predict(m, x);
    CHECK_INT(ot_model_fit(m, x, y, &(ot_fit_opts){.batch = 4, .quiet = true}, NULL), 0);
    CHECK_INT(ot_model_load(m, path), 0);
    ot_tensor *p2 = ot_model_predict(m, x);
    float a[8] = {0}, b[8] = {1};
    if (p1 && p2) {
        ot_get(p1, a);
        ot_get(p2, b);
    }
    for (int i = 0; i < 8; i++) CHECK(a[i] == b[i]);
    ot_tensor_free(p1), ot_tensor_free(p2), ot_tensor_free(got[0]), ot_tensor_free(got[1]);
    ot_model_free(m);
    ot_tensor_free(x), ot_tensor_free(y);
    ot_backend_free(be);
    remove(path);
}

/* rms_norm's default eps is x's dtype's machine epsilon, 16-bit dtypes
 * included (PyTorch's finfo(f16).eps 2^-10, finfo(bf16).eps 2^-7): on rows
 * of 0.01, whose mean square 1e-4 the eps outweighs, the result shows it. */
TEST(norm_rms_norm_default_eps_per_dtype)
{
    static const ot_dtype dts[3] = {OT_F32, OT_F16, OT_BF16};
    static const double eps[3] = {0x1p-23, 0x1p-10, 0x1p-7}, tol[3] = {1e-6, 1e-3, 2e-3};
    /* 0.01 as each dtype holds it */
    static const double x0[3] = {(double)0.01f, 0.0099945068359375, 0.010009765625};
    ot_backend *be = ot_backend_new("ref", NULL);
    for (int i = 0; i < 3; i++) {
        ot_tensor *x = ot_array(be, OT_SHAPE(4), dts[i], (float[]){0.01f, 0.01f, 0.01f, 0.01f});
        ot_pool *p = ot_pool_push();
        ot_tensor *t = ot_eval(ot_rms_norm(x));
        ot_pool_pop(p);
        float y[4];
        CHECK(t && ot_get(t, y) == 0);
        double want = x0[i] / sqrt(x0[i] * x0[i] + eps[i]);
        CHECK_NEAR(y[0], want, tol[i]);
        ot_tensor_free(t), ot_tensor_free(x);
    }
    ot_backend_free(be);
}

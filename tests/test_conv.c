/*
 * test_conv.c - issue 34: conv, conv_transpose and conv_wgrad. A value by
 * hand, cpu against ref on every option (1-D to 3-D, stride, dilation,
 * padding per side and 'same', groups, depthwise, output padding, strided
 * views), build-time errors naming shapes and the caller's line, ot_pp
 * read back by ot_parse, ot_explain naming the algorithm, and gradients
 * (first and second order) against finite differences in f64. Values
 * against NumPy are tests/conv_check.py's.
 */
#include "test.h"
#include "fuzz.h"

#include <stdlib.h>

/* A tensor of shape and dtype with small integer-valued data, per seed. */
static ot_tensor *data(ot_backend *be, ot_shape s, ot_dtype dt, int seed)
{
    return test__ints(be, s, dt, seed, 11, 5, 0.25);
}

static double *values(ot_tensor *t)
{
    ot_tensor *c = ot_empty(ot_tensor_backend(t), ot_tensor_shape(t), OT_F64);
    CHECK_INT(ot_assign(c, ot_tensor_node(t)), 0);
    int64_t n = ot_tensor_numel(t);
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    CHECK_INT(ot_get(c, v), 0);
    ot_tensor_free(c);
    return v;
}

TEST(conv_value_by_hand)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_pool *p = ot_pool_push();
    ot_tensor *x = ot_array(be, OT_SHAPE(1, 1, 4), OT_F64, (double[]){1, 2, 3, 4});
    ot_tensor *w = ot_array(be, OT_SHAPE(1, 1, 2), OT_F64, (double[]){1, 10});
    ot_tensor *y = ot_eval(ot_conv(x, w, .pad = 1, .stride = {2}));
    double v[3] = {0};
    CHECK(y && ot_tensor_numel(y) == 3);
    if (y) CHECK_INT(ot_get(y, v), 0);
    CHECK_NEAR(v[0], 10, 0);   /* [0, 1] . [1, 10] */
    CHECK_NEAR(v[1], 32, 0);   /* [2, 3] */
    CHECK_NEAR(v[2], 4, 0);    /* [4, 0] */
    ot_tensor *t = ot_eval(ot_conv_transpose(x, w, .stride = {2}));
    double u[8] = {0};
    CHECK(t && ot_tensor_numel(t) == 8);
    if (t) CHECK_INT(ot_get(t, u), 0);
    CHECK_NEAR(u[1], 10, 0);
    CHECK_NEAR(u[6], 4, 0);
    ot_tensor_free(y);
    ot_tensor_free(t);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_backend_free(be);
}

/* One geometry: x's and w's shapes and the options. */
typedef struct conv_case {
    ot_shape x, w;
    ot_conv_opts o;
    bool transpose;
} conv_case;

#define SH(n, ...) {.ndim = n, .dims = {__VA_ARGS__}}
static const conv_case CASES[] = {
    {SH(3, 2, 3, 7), SH(3, 4, 3, 3), {.stride = {2}, .pad = 1}, false},
    {SH(4, 2, 4, 6, 5), SH(4, 6, 2, 3, 2), {.groups = 2, .dilation = {2, 1},
                                                 .pad_lo = {1, 0}, .pad_hi = {2, 1}}, false},
    {SH(4, 1, 4, 5, 5), SH(4, 4, 1, 3, 3), {.groups = 4, .padding = OT_PAD_SAME}, false},
    {SH(5, 2, 2, 4, 3, 3), SH(5, 3, 2, 2, 2, 1), {.stride = {1, 2, 1}, .pad = 1}, false},
    {SH(4, 0, 2, 4, 4), SH(4, 3, 2, 2, 2), {0}, false},
    {SH(4, 2, 4, 3, 4), SH(4, 4, 3, 2, 3), {.groups = 2, .stride = {2, 3}, .pad_lo = {1, 0},
                                                 .pad_hi = {0, 1}, .output_padding = {1, 2}}, true},
    {SH(3, 1, 3, 5), SH(3, 3, 2, 3), {.dilation = {2}, .pad = 2}, true},
    /* exec_conv.c's paths: 1x1 as a plain GEMM (grouped, size-0 batch,
     * transposed), depthwise direct (planar strided and dilated, 1-D,
     * 3-D), the planar gather at odd strides and pads, and an f64 im2col
     * tile of 97 columns that starts mid-row (150 channels, 11x11). */
    {SH(4, 2, 3, 4, 5), SH(4, 5, 3, 1, 1), {0}, false},
    {SH(4, 1, 6, 3, 3), SH(4, 6, 2, 1, 1), {.groups = 3}, false},
    {SH(4, 0, 3, 2, 2), SH(4, 2, 3, 1, 1), {0}, false},
    {SH(4, 2, 4, 3, 3), SH(4, 4, 2, 1, 1), {0}, true},
    {SH(4, 2, 3, 7, 6), SH(4, 3, 1, 3, 3), {.groups = 3, .stride = {2}, .dilation = {2}, .pad = 2},
     false},
    {SH(3, 2, 3, 7), SH(3, 3, 1, 3), {.groups = 3, .pad = 1}, false},
    {SH(5, 1, 2, 3, 4, 3), SH(5, 2, 1, 2, 2, 2), {.groups = 2, .pad = 1}, false},
    {SH(4, 1, 2, 5, 9), SH(4, 3, 2, 2, 3), {.stride = {1, 3}, .dilation = {1, 2}, .pad_lo = {0, 2},
                                            .pad_hi = {1, 0}}, false},
    {SH(4, 1, 150, 11, 11), SH(4, 2, 150, 3, 3), {.pad = 1}, false},
};
#define NCASES (int)(sizeof CASES / sizeof CASES[0])

static ot_node *build_case(const conv_case *c, ot_node *x, ot_node *w)
{
    return c->transpose ? ot_conv_transpose_at(x, w, &c->o, __FILE__, __LINE__)
                        : ot_conv_at(x, w, &c->o, __FILE__, __LINE__);
}

/* The case's tree, its gradients included, on be: one value per output. */
static void eval_case(ot_backend *be, const conv_case *c, ot_dtype dt, double *out[3], bool view)
{
    ot_pool *p = ot_pool_push();
    ot_shape xs = c->x;
    if (view) xs.dims[xs.ndim - 1] *= 2;   /* every other column */
    ot_tensor *xb = data(be, xs, dt, 1), *w = data(be, c->w, dt, 2);
    ot_tensor *x = xb;
    if (view) {
        ot_index idx[5] = {OT_ALL, OT_ALL, OT_ALL, OT_ALL, OT_ALL};
        idx[xs.ndim - 1] = OT_RANGE(0, OT_NONE, 2);
        x = ot_slice_n(xb, xs.ndim, idx);
    }
    ot_node *y = build_case(c, ot_tensor_node(x), ot_tensor_node(w));
    CHECK(y != NULL);
    if (!y) {
        printf("  %s\n", ot_errmsg());
        ot_clear_error();
    }
    ot_tensor *r = y ? data(be, ot_node_shape(y), dt, 3) : NULL;
    ot_node *loss = y ? ot_sum(ot_mul(y, r)) : NULL;
    ot_autodiff *ad = loss ? ot_autodiff_new(loss, NULL) : NULL;
    ot_tensor *res[3] = {y ? ot_eval(y) : NULL, NULL, NULL};
    if (ad) {
        res[1] = ot_empty(be, ot_tensor_shape(x), dt);
        res[2] = ot_empty(be, c->w, dt);
        CHECK_INT(ot_assign(res[1], ot_autodiff_grad(ad, x)), 0);
        CHECK_INT(ot_assign(res[2], ot_autodiff_grad(ad, w)), 0);
    }
    for (int i = 0; i < 3; i++) {
        out[i] = res[i] ? values(res[i]) : NULL;
        ot_tensor_free(res[i]);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(r);
    ot_pool_pop(p);
    if (x != xb) ot_tensor_free(x);
    ot_tensor_free(xb);
    ot_tensor_free(w);
}

static int64_t numel(ot_shape s)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    return n;
}

TEST(conv_cpu_matches_ref)
{
    ot_backend *ref = test__backend("ref", OT_FUSION_ON), *cpu = test__backend("cpu", OT_FUSION_ON);
    for (int k = 0; k < NCASES; k++)
        for (int v = 0; v < 4; v++) {
            ot_dtype dt = v & 1 ? OT_F32 : OT_F64;
            double *a[3], *b[3];
            eval_case(ref, &CASES[k], dt, a, v >= 2);
            eval_case(cpu, &CASES[k], dt, b, v >= 2);
            ot_pool *p = ot_pool_push();
            ot_tensor *xt = ot_zeros(ref, CASES[k].x, OT_F64), *wt = ot_zeros(ref, CASES[k].w, OT_F64);
            ot_node *y = build_case(&CASES[k], ot_tensor_node(xt), ot_tensor_node(wt));
            int64_t n[3] = {y ? numel(ot_node_shape(y)) : 0, numel(CASES[k].x), numel(CASES[k].w)};
            ot_pool_pop(p);
            ot_tensor_free(xt);
            ot_tensor_free(wt);
            for (int i = 0; i < 3; i++) {
                CHECK(a[i] && b[i]);
                for (int64_t e = 0; a[i] && b[i] && e < n[i]; e++)
                    if (!test__close(a[i][e], b[i][e], dt == OT_F32 ? 1e-5 : 1e-12)) {
                        test__fail(__FILE__, __LINE__, "case %d %s%s, result %d [%lld]: cpu %.17g, "
                                   "ref %.17g", k, dt == OT_F32 ? "f32" : "f64",
                                   v >= 2 ? " (view)" : "", i, (long long)e, b[i][e], a[i][e]);
                        break;
                    }
                free(a[i]);
                free(b[i]);
            }
        }
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

/* The derivative of sum(tree * r) along a direction v of every input at
 * once (xs[t] + h v[t]) against the gradients' inner product with v,
 * in f64: one central difference checks every element's gradient. */
static void fd_check(int k, ot_node *tree, int n, ot_tensor *const xs[])
{
    ot_backend *be = ot_tensor_backend(xs[0]);
    ot_tensor *r = data(be, ot_node_shape(tree), OT_F64, 5);
    ot_node *loss = ot_sum(ot_mul(tree, r));
    ot_autodiff *ad = ot_autodiff_new(loss, NULL);
    double *x0[2], *v[2], want = 0, f[2], h = 1e-5;
    for (int t = 0; t < n; t++) {
        int64_t m = ot_tensor_numel(xs[t]);
        double *g = malloc(sizeof *g * (size_t)(m ? m : 1));
        x0[t] = malloc(sizeof *x0[t] * (size_t)(m ? m : 1));
        v[t] = malloc(sizeof *v[t] * (size_t)(m ? m : 1));
        CHECK_INT(ot_autodiff_grad_host(ad, xs[t], g), 0);
        CHECK_INT(ot_get(xs[t], x0[t]), 0);
        for (int64_t i = 0; i < m; i++) {
            v[t][i] = (double)((i * 5 + t * 3) % 7 - 3) / 3;
            want += g[i] * v[t][i];
        }
        free(g);
    }
    ot_tensor *lv = ot_empty(be, OT_SHAPE(), OT_F64);
    for (int side = 0; side < 2; side++) {
        for (int t = 0; t < n; t++) {
            int64_t m = ot_tensor_numel(xs[t]);
            double *x = malloc(sizeof *x * (size_t)(m ? m : 1));
            for (int64_t i = 0; i < m; i++) x[i] = x0[t][i] + (side ? -h : h) * v[t][i];
            ot_set(xs[t], x);
            free(x);
        }
        CHECK_INT(ot_assign(lv, loss), 0);
        ot_get(lv, &f[side]);
    }
    double num = (f[0] - f[1]) / (2 * h);
    if (!(fabs(num - want) <= 1e-6 * (1 + fabs(num))))
        test__fail(__FILE__, __LINE__, "case %d: directional derivative: analytic %.12g, "
                   "numeric %.12g", k, want, num);
    for (int t = 0; t < n; t++) {
        ot_set(xs[t], x0[t]);
        free(x0[t]);
        free(v[t]);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(lv);
    ot_tensor_free(r);
}

/* First order on every case; second order (the gradient in w, itself a
 * conv_wgrad, differentiated in x, and conv_transpose's in x, a conv). */
TEST(conv_gradients_match_finite_differences)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    for (int k = 0; k < NCASES; k++) {
        if (numel(CASES[k].x) == 0) continue;
        ot_pool *p = ot_pool_push();
        ot_tensor *xw[2] = {data(be, CASES[k].x, OT_F64, 1), data(be, CASES[k].w, OT_F64, 2)};
        ot_node *y = build_case(&CASES[k], ot_tensor_node(xw[0]), ot_tensor_node(xw[1]));
        CHECK(y != NULL);
        if (y) fd_check(k, ot_sqr(y), 2, xw);
        ot_tensor *r = y ? data(be, ot_node_shape(y), OT_F64, 4) : NULL;
        ot_autodiff *ad = y ? ot_autodiff_new(ot_sum(ot_mul(ot_sqr(y), r)), NULL) : NULL;
        if (ad) {
            fd_check(100 + k, ot_autodiff_grad(ad, xw[1]), 2, xw);
            fd_check(200 + k, ot_autodiff_grad(ad, xw[0]), 2, xw);
        }
        ot_autodiff_free(ad);
        ot_tensor_free(r);
        ot_pool_pop(p);
        ot_tensor_free(xw[0]);
        ot_tensor_free(xw[1]);
    }
    ot_backend_free(be);
}

TEST(conv_bad_input_is_a_build_error)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 4, 5, 5), OT_F32), *w = ot_zeros(be, OT_SHAPE(6, 3, 3, 3), OT_F32);
    ot_tensor *w2 = ot_zeros(be, OT_SHAPE(6, 2, 3, 3), OT_F32), *big = ot_zeros(be, OT_SHAPE(6, 4, 6, 3), OT_F32);
    ot_tensor *xd = ot_zeros(be, OT_SHAPE(2, 4, 5, 5), OT_F64), *w1 = ot_zeros(be, OT_SHAPE(6, 4, 3), OT_F32);
    char site[64];
    ot_pool *p = ot_pool_push();
    int line = __LINE__ + 1;
    CHECK(ot_conv(x, w) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "conv:", "input channels 4", "(6,3,3,3)", "(2,4,5,5)");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 3) == NULL);
    CHECK_ERR(OT_ESHAPE, "groups 3");
    ot_clear_error();
    CHECK(ot_conv(x, big) == NULL);
    CHECK_ERR(OT_ESHAPE, "larger than the padded input 5 + 0 + 0");
    ot_clear_error();
    CHECK(ot_conv(x, big, .pad = 1) != NULL);
    CHECK(ot_conv(x, w2, .stride = {0}) == NULL);
    CHECK_ERR(OT_EINVAL, "stride 0");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .dilation = {1, -1}) == NULL);
    CHECK_ERR(OT_EINVAL, "dilation -1 in spatial dim 1");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .pad = -1) == NULL);
    CHECK_ERR(OT_EINVAL, "pad_lo -1");
    ot_clear_error();
    CHECK(ot_conv(xd, w2, .groups = 2) == NULL);
    CHECK_ERR(OT_EDTYPE, "float64");
    ot_clear_error();
    CHECK(ot_conv(x, w1) == NULL);
    CHECK_ERR(OT_EINVAL, "3-D to 5-D");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .pad = 1, .pad_lo = {1, 1}) == NULL);
    CHECK_ERR(OT_EINVAL, "give one of");
    ot_clear_error();
    CHECK(ot_conv_transpose(x, big, .stride = {2}, .output_padding = {2}) == NULL);
    CHECK_ERR(OT_ESHAPE, "conv_transpose");
    ot_clear_error();
    /* options past x's two spatial dims, or conv_transpose's alone */
    CHECK(ot_conv(x, w2, .groups = 2, .dilation = {1, 1, -3}) == NULL);
    CHECK_ERR(OT_EINVAL, ".dilation[2] is -3", "(2,4,5,5) has 2 spatial dims");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .stride = {1, 1, 7}) == NULL);
    CHECK_ERR(OT_EINVAL, ".stride[2] is 7");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .pad_hi = {0, 0, 1}) == NULL);
    CHECK_ERR(OT_EINVAL, ".pad_hi[2] is 1");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .output_padding = {1}) == NULL);
    CHECK_ERR(OT_EINVAL, ".output_padding is conv_transpose's option");
    ot_clear_error();
    CHECK(ot_conv(x, w2, .groups = 2, .stride = {2}) != NULL);   /* {2}: every dim */
    ot_pool_pop(p);
    ot_tensor *t[] = {x, w, w2, big, xd, w1};
    for (int i = 0; i < 6; i++) ot_tensor_free(t[i]);
    ot_backend_free(be);
}

/* Output sizes whose int64 arithmetic overflows (huge dims come cheap as
 * broadcast views): errors, not the small shapes the wrapped products
 * gave (conv_transpose (1,1,2^40+1) at stride 2^24 was (1,1,3); a kernel
 * of 2^34+1 dilated by 2^30 "fitted" an input of 5; 'same' padding over
 * INT32_MAX was cast to other pads, input 2^34 giving output 2^33). */
TEST(conv_size_overflow_is_an_error)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_tensor *one = ot_ones(be, OT_SHAPE(1, 1, 1), OT_F32), *w = ot_ones(be, OT_SHAPE(1, 1, 3), OT_F32);
    ot_tensor *x5 = ot_ones(be, OT_SHAPE(1, 1, 5), OT_F32), *w6 = ot_ones(be, OT_SHAPE(1, 1, 6), OT_F32);
    ot_tensor *xb = ot_broadcast_to(one, OT_SHAPE(1, 1, ((int64_t)1 << 40) + 1));
    ot_tensor *wb = ot_broadcast_to(one, OT_SHAPE(1, 1, ((int64_t)1 << 34) + 1));
    ot_tensor *xs = ot_broadcast_to(one, OT_SHAPE(1, 1, (int64_t)1 << 34));
    ot_tensor *ws = ot_broadcast_to(one, OT_SHAPE(1, 1, ((int64_t)1 << 33) + 202));
    ot_pool *p = ot_pool_push();
    CHECK(ot_conv_transpose(xb, w, .stride = {1 << 24}) == NULL);
    CHECK_ERR(OT_EOVERFLOW, "conv_transpose:", "overflows int64", "(1,1,1099511627777)");
    ot_clear_error();
    CHECK(ot_conv(x5, wb, .dilation = {1 << 30}) == NULL);
    CHECK_ERR(OT_ESHAPE, "conv:", "larger than the padded input 5 + 0 + 0");
    ot_clear_error();
    CHECK(ot_conv(xs, ws, .padding = OT_PAD_SAME) == NULL);
    CHECK_ERR(OT_EINVAL, "conv:", "OT_PAD_SAME in spatial dim 0", "(1,1,17179869184)");
    ot_clear_error();
    CHECK(ot_conv(x5, w6, .padding = OT_PAD_SAME, .dilation = {INT32_MAX}) == NULL);
    CHECK_ERR(OT_EINVAL, "more padding than an int32 holds");
    ot_clear_error();
    /* the largest that fit still build */
    ot_node *y = ot_conv_transpose(xb, w, .stride = {1 << 16});
    CHECK(y && ot_node_shape(y).dims[2] == ((int64_t)1 << 56) + 3);
    y = ot_conv(x5, w6, .padding = OT_PAD_SAME, .dilation = {1 << 20});
    CHECK(y && ot_node_shape(y).dims[2] == 5);
    ot_pool_pop(p);
    ot_tensor *t[] = {xs, ws, xb, wb, x5, w6, w, one};
    for (int i = 0; i < 8; i++) ot_tensor_free(t[i]);
    ot_backend_free(be);
}

TEST(conv_prints_parses_and_explains)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 4, 5, 5), OT_F32), *w = ot_zeros(be, OT_SHAPE(4, 2, 3, 3), OT_F32);
    ot_tensor *dw = ot_zeros(be, OT_SHAPE(4, 1, 3, 3), OT_F32);
    ot_tensor_set_name(x, "x");
    ot_tensor_set_name(w, "w");
    ot_pool *p = ot_pool_push();
    ot_node *in[2] = {ot_tensor_node(x), ot_tensor_node(w)};
    ot_node *trees[] = {
        ot_conv(x, w, .groups = 2, .stride = {2, 1}, .pad_lo = {1, 0}, .pad_hi = {0, 2}),
        ot_conv_transpose(x, w, .stride = {2}, .output_padding = {1, 0}, .dilation = {1, 2}),
        ot_relu(ot_conv(x, w, .groups = 2, .padding = OT_PAD_SAME)),
    };
    CHECK_INT(fuzz_pp_roundtrip(trees, 3, 2, (const char *[]){"x", "w"}, in), -1);   /* the tree that did not */
    char *e = test__capture(ot_explain, trees[0]);
    CHECK(e && strstr(e, "conv conv [2x4x2x5] (im2col + gemm, groups 2, im2col tile 0.7 KiB)"));
    free(e);
    e = test__capture(ot_explain, ot_conv(x, dw, .groups = 4, .pad = 1));
    CHECK(e && strstr(e, "(direct, groups 4)"));
    free(e);
    ot_tensor *w1 = ot_zeros(be, OT_SHAPE(3, 4, 1, 1), OT_F32);
    e = test__capture(ot_explain, ot_conv(x, w1));
    CHECK(e && strstr(e, "(1x1 gemm, no im2col, groups 1)"));
    free(e);
    ot_tensor_free(w1);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_tensor_free(dw);
    ot_backend_free(be);
}

/* ---- depthwise at stride 1 through padded planes (exec_conv.c) ----------- */

typedef struct dw_case {
    int64_t n, c, h, w, kh, kw;
    ot_conv_opts o;
    bool inf_weight;   /* channel 1's weights hold an inf: its rows skip the padding */
} dw_case;

/* The sums the direct path promises, per output in tap order from +0, the
 * padding's taps left out, in the dtype's arithmetic: x and w row-major
 * doubles holding values of that dtype. */
static double dw_expect(const dw_case *d, const double *x, const double *w, int64_t oh,
                        int64_t ow, int64_t n, int64_t c, bool f32)
{
    float sf = 0;
    double sd = 0;
    for (int64_t a = 0; a < d->kh; a++)
        for (int64_t b = 0; b < d->kw; b++) {
            int64_t i = oh + a * (d->o.dilation[0] ? d->o.dilation[0] : 1) - d->o.pad_lo[0];
            int64_t j = ow + b * (d->o.dilation[1] ? d->o.dilation[1] : 1) - d->o.pad_lo[1];
            if (i < 0 || i >= d->h || j < 0 || j >= d->w) continue;
            double xv = x[((n * d->c + c) * d->h + i) * d->w + j], wv = w[(c * d->kh + a) * d->kw + b];
            if (f32) sf += (float)wv * (float)xv;
            else sd += wv * xv;
        }
    return f32 ? sf : sd;
}

/* t's elements from doubles holding values of its dtype. */
static void set_values(ot_tensor *t, const double *v)
{
    int64_t n = ot_tensor_numel(t);
    if (ot_tensor_dtype(t) == OT_F64) {
        CHECK_INT(ot_set(t, v), 0);
        return;
    }
    float *f = malloc(sizeof *f * (size_t)n);
    for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
    CHECK_INT(ot_set(t, f), 0);
    free(f);
}

static bool same_value(double a, double b)
{
    return (a != a && b != b) || memcmp(&a, &b, sizeof a) == 0;
}

/* Planes copied into a zero border, every tap one pass over all rows:
 * the sums (so the bits) of the rows they replace, on narrow and wide
 * planes, asymmetric pads, dilation, a kernel of one row, NaN, inf and -0
 * inputs, -0 weights; a channel with an inf weight and a kernel of more
 * than 64 taps keep the rows (w * 0 there would be NaN, or the offsets
 * too many). */
TEST(conv_depthwise_padded_planes_keep_the_sums)
{
    static const dw_case cases[] = {
        {2, 3, 5, 7, 3, 3, {.pad_lo = {1, 1}, .pad_hi = {1, 1}}, false},
        {1, 2, 28, 28, 3, 3, {.pad_lo = {1, 1}, .pad_hi = {1, 1}}, true},
        {1, 2, 9, 70, 5, 5, {.pad_lo = {2, 1}, .pad_hi = {0, 3}, .dilation = {1, 2}}, false},
        {2, 2, 6, 6, 1, 7, {.pad_lo = {0, 3}, .pad_hi = {0, 3}}, false},
        {1, 1, 4, 5, 9, 8, {.pad_lo = {4, 4}, .pad_hi = {4, 3}}, false},
        {1, 2, 1, 1, 3, 3, {.pad_lo = {1, 1}, .pad_hi = {1, 1}}, false},
        {1, 2, 7, 9, 3, 3, {.dilation = {2, 3}, .pad_lo = {2, 3}, .pad_hi = {2, 3}}, false},
    };
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++)
        for (int f = 0; f < 2; f++) {
            const dw_case *d = &cases[k];
            bool f32 = f == 0;
            ot_dtype dt = f32 ? OT_F32 : OT_F64;
            ot_pool *p = ot_pool_push();
            ot_shape xs = OT_SHAPE(d->n, d->c, d->h, d->w), ws = OT_SHAPE(d->c, 1, d->kh, d->kw);
            ot_tensor *x = test__uniform(be, xs, dt, 5 + (uint32_t)k, -2, 2);
            ot_tensor *w = test__uniform(be, ws, dt, 9 + (uint32_t)k, -1, 1);
            int64_t nx = ot_tensor_numel(x);
            double *xv = values(x), *wv = values(w);
            xv[0] = NAN, xv[nx / 2] = INFINITY, xv[nx - 1] = -0.0, wv[0] = -0.0;
            if (d->inf_weight) wv[d->kh * d->kw + 1] = INFINITY;
            set_values(x, xv);
            set_values(w, wv);
            ot_conv_opts o = d->o;
            o.groups = d->c;
            ot_node *y = ot_conv_at(ot_tensor_node(x), ot_tensor_node(w), &o, __FILE__, __LINE__);
            CHECK(y != NULL);
            ot_tensor *yt = y ? ot_eval(y) : NULL;
            double *yv = yt ? values(yt) : NULL;
            ot_tensor_free(yt);
            ot_shape ys = y ? ot_node_shape(y) : xs;
            for (int64_t e = 0; yv && e < numel(ys); e++) {
                int64_t ow = e % ys.dims[3], oh = e / ys.dims[3] % ys.dims[2];
                int64_t c = e / (ys.dims[3] * ys.dims[2]) % d->c, n = e / (ys.dims[3] * ys.dims[2] * d->c);
                double want = dw_expect(d, xv, wv, oh, ow, n, c, f32);
                if (!same_value(yv[e], want)) {
                    test__fail(__FILE__, __LINE__, "case %zu %s [%lld]: %.17g, the rows' sum %.17g",
                               k, f32 ? "f32" : "f64", (long long)e, yv[e], want);
                    break;
                }
            }
            free(xv);
            free(wv);
            free(yv);
            ot_pool_pop(p);
            ot_tensor_free(x);
            ot_tensor_free(w);
        }
    ot_backend_free(be);
}

/* A conv written to an output is one kernel: the copy of its result into
 * the output, left copying the output onto itself once the conv wrote
 * there, is gone, as is its segment; a plain gradient's too (autodiff's
 * cast to the dtype it has). */
TEST(conv_result_copied_onto_itself_is_no_kernel)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *x = test__ints(be, OT_SHAPE(2, 4, 6, 6), OT_F32, 1, 7, 3, 0.5);
    ot_tensor *w = test__ints(be, OT_SHAPE(4, 1, 3, 3), OT_F32, 2, 5, 2, 0.25);
    ot_tensor *w2 = test__ints(be, OT_SHAPE(4, 4, 3, 3), OT_F32, 3, 5, 2, 0.25);
    ot_tensor *gy = test__ints(be, OT_SHAPE(2, 4, 6, 6), OT_F32, 4, 9, 4, 0.5);
    ot_tensor *y = ot_empty(be, OT_SHAPE(2, 4, 6, 6), OT_F32), *dx = ot_empty(be, OT_SHAPE(2, 4, 6, 6), OT_F32);
    ot_tensor *ref = ot_empty(be, OT_SHAPE(2, 4, 6, 6), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *trees[2] = {ot_conv(x, w, .groups = 4, .pad = 1), NULL};
    ot_autodiff *ad = ot_autodiff_new(ot_conv(x, w2, .pad = 1), ot_tensor_node(gy));
    CHECK(ad != NULL);
    trees[1] = ad ? ot_autodiff_grad(ad, x) : NULL;
    ot_tensor *outs[2] = {y, dx};
    for (int i = 0; i < 2; i++) {
        char *text = NULL;
        size_t len = 0;
        FILE *m = open_memstream(&text, &len);
        CHECK_INT(ot_explain_many(1, &outs[i], &trees[i], m), 0);
        fclose(m);
        CHECK(text && strstr(text, "plan: 1 kernel,") && !strstr(text, "-> out0 (direct)"));
        if (text && !strstr(text, "plan: 1 kernel,")) printf("%s", text);
        free(text);
        /* the values: the tree plus zero, whose add keeps its kernel */
        CHECK_INT(ot_assign(outs[i], trees[i]), 0);
        CHECK_INT(ot_assign(ref, ot_add(trees[i], 0.0f)), 0);
        double *a = values(outs[i]), *b = values(ref);
        for (int64_t e = 0; e < ot_tensor_numel(ref); e++)
            if (!same_value(a[e], b[e])) {
                test__fail(__FILE__, __LINE__, "tree %d [%lld]: %.9g against %.9g", i, (long long)e, a[e], b[e]);
                break;
            }
        free(a);
        free(b);
    }
    ot_autodiff_free(ad);
    ot_pool_pop(p);
    ot_tensor *all[] = {x, w, w2, gy, y, dx, ref};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
    ot_backend_free(be);
}

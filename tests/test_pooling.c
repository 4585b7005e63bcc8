/*
 * test_pooling.c - issue 34: max_pool and avg_pool (optree/pool.h) and
 * their gradient nodes. Values by hand (ties, padding, ceil mode,
 * exclude_pad, NaN, -0.0), cpu against ref over random 1-D to 3-D
 * geometries with transposed and stepped views (value, gradient and the
 * gradient's gradient), build-time errors naming shapes and the caller's
 * line, ot_pp read back by ot_parse, and ot_explain. (Not test_pool.c:
 * that is the node pool's.) Finite differences of every pooling node are
 * test_autodiff.c's full-Jacobian check; values against NumPy are
 * tests/pool_check.py's.
 */
#include "test.h"
#include "fuzz.h"

#include <math.h>
#include <stdlib.h>

/* The values of node n (f64), or NULL with the error recorded. */
static double *eval(ot_backend *be, ot_node *n, int64_t *count)
{
    ot_shape s = n ? ot_node_shape(n) : OT_SHAPE(0);
    ot_tensor *t = ot_empty(be, s, OT_F64);
    *count = ot_tensor_numel(t);
    double *v = malloc(sizeof *v * (size_t)(*count ? *count : 1));
    int rc = n ? ot_assign(t, n) : -1;
    if (rc) {
        test__fail(__FILE__, __LINE__, "no value: %s", ot_errmsg());
        ot_clear_error();
    } else {
        CHECK_INT(ot_get(t, v), 0);
    }
    ot_tensor_free(t);
    if (rc) free(v);
    return rc ? NULL : v;
}

/* Whether tree's values are want's (NaN where want has NaN, signs of
 * zeros alike); a failure names what. */
static void expect(ot_backend *be, ot_node *tree, const double *want, int n, const char *what)
{
    int64_t count;
    double *v = eval(be, tree, &count);
    if (!v) return;
    CHECK_INT(count, n);
    for (int i = 0; i < n && i < count; i++)
        if (!(isnan(want[i]) ? isnan(v[i]) : v[i] == want[i] && signbit(v[i]) == signbit(want[i]))) {
            test__fail(__FILE__, __LINE__, "%s on %s [%d]: %g, expected %g", what,
                       ot_backend_name(be), i, v[i], want[i]);
            break;
        }
    free(v);
}

/* d sum(y) / dx. */
static ot_node *grad_of_sum(ot_node *y, ot_tensor *x)
{
    ot_autodiff *ad = ot_autodiff_new(ot_sum(y), NULL);
    ot_node *g = ad ? ot_autodiff_grad(ad, x) : NULL;
    ot_autodiff_free(ad);
    return g;
}

static ot_tensor *vec(ot_backend *be, int n, const double *v)
{
    return ot_array(be, OT_SHAPE(1, 1, n), OT_F64, v);
}

TEST(pooling_values_by_hand)
{
    const char *names[2] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        ot_backend *be = test__backend(names[b], OT_FUSION_ON);
        ot_pool *p = ot_pool_push();
        ot_tensor *x = vec(be, 5, (double[]){1, 3, 3, 2, 5});
        expect(be, ot_max_pool(x, .kernel = {2}), (double[]){3, 3}, 2, "max k2");
        expect(be, ot_max_pool(x, .kernel = {2}, .ceil_mode = true), (double[]){3, 3, 5}, 3, "ceil");
        /* ties: the first maximum of each window takes its gradient */
        ot_node *m = ot_max_pool(x, .kernel = {3}, .stride = {1});
        expect(be, m, (double[]){3, 3, 5}, 3, "max k3 s1");
        expect(be, grad_of_sum(m, x), (double[]){0, 2, 0, 0, 1}, 5, "tied gradient");
        expect(be, ot_max_pool(x, .kernel = {2}, .dilation = {3}, .stride = {1}),
               (double[]){2, 5}, 2, "dilated");
        /* padding is -inf: it never wins over negative values */
        ot_tensor *neg = vec(be, 3, (double[]){-1, -2, -3});
        expect(be, ot_max_pool(neg, .kernel = {3}, .stride = {2}, .pad = 1), (double[]){-1, -2}, 2,
               "padded max");
        ot_tensor *nan = vec(be, 4, (double[]){1, NAN, 2, 3});
        ot_node *mn = ot_max_pool(nan, .kernel = {2});
        expect(be, mn, (double[]){NAN, 3}, 2, "NaN");
        expect(be, grad_of_sum(mn, nan), (double[]){0, 1, 0, 1}, 4, "NaN's gradient");
        ot_tensor *z = vec(be, 2, (double[]){-0.0, 0.0});
        expect(be, ot_max_pool(z, .kernel = {2}), (double[]){-0.0}, 1, "signed zeros");
        ot_tensor *a = vec(be, 3, (double[]){3, 6, 9});
        ot_node *av = ot_avg_pool(a, .kernel = {3}, .stride = {1}, .pad = 1);
        expect(be, av, (double[]){3, 6, 5}, 3, "avg with padding");
        expect(be, ot_avg_pool(a, .kernel = {3}, .stride = {1}, .pad = 1, .exclude_pad = true),
               (double[]){4.5, 6, 7.5}, 3, "avg exclude_pad");
        expect(be, grad_of_sum(av, a), (double[]){2.0 / 3, 1, 2.0 / 3}, 3, "avg gradient");
        /* ceil mode's last window is cut at the input's end (PyTorch's divisor) */
        expect(be, ot_avg_pool(x, .kernel = {2}, .ceil_mode = true), (double[]){2, 2.5, 5}, 3,
               "avg ceil");
        ot_pool_pop(p);
        ot_tensor *t[] = {x, neg, nan, z, a};
        for (int i = 0; i < 5; i++) ot_tensor_free(t[i]);
        ot_backend_free(be);
    }
}

/* ---- cpu against ref ----------------------------------------------------------- */

typedef struct lcg { uint64_t s; } lcg;
static int draw(lcg *r, int n)
{
    r->s = r->s * 6364136223846793005ull + 1442695040888963407ull;
    return (int)((r->s >> 33) % (uint64_t)n);
}

/* A random pooling case over x: the op and its options. */
static ot_node *random_pool(lcg *r, ot_node *x, bool avg)
{
    ot_shape s = ot_node_shape(x);
    ot_pool_opts o = {.ceil_mode = draw(r, 3) == 0, .exclude_pad = avg && draw(r, 2)};
    for (int d = 0; d < s.ndim - 2; d++) {
        int in = (int)s.dims[2 + d], k = 1 + draw(r, in < 3 ? in : 3);
        o.kernel[d] = k;
        o.stride[d] = draw(r, 3);   /* 0: the kernel */
        o.pad_lo[d] = draw(r, k / 2 + 1);
        o.pad_hi[d] = draw(r, k / 2 + 1);
        o.dilation[d] = !avg && 2 * (k - 1) + 1 <= in ? 1 + draw(r, 2) : 1;
    }
    return avg ? ot_avg_pool_at(x, &o, __FILE__, __LINE__) : ot_max_pool_at(x, &o, __FILE__, __LINE__);
}

/* Case k's three values (see pool_case) of pooling y over x, of shape s;
 * the tensors it makes into keep, for the caller to free. */
static void three_values(ot_backend *be, int k, ot_dtype dt, ot_shape s, ot_tensor *x, ot_node *y,
                         double *out[3], int64_t n[3], ot_tensor *keep[2])
{
    ot_tensor *rt = y ? test__ints(be, ot_node_shape(y), dt, k + 1, 5, 2, 0.25) : NULL;
    ot_tensor *r2 = test__ints(be, s, dt, k + 2, 5, 2, 0.25);
    ot_autodiff *ad = y ? ot_autodiff_new(ot_sum(ot_mul(y, rt)), NULL) : NULL;
    ot_node *gx = ad ? ot_autodiff_grad(ad, x) : NULL;
    ot_autodiff *ad2 = gx ? ot_autodiff_new(ot_sum(ot_mul(gx, r2)), NULL) : NULL;
    ot_node *trees[3] = {y, gx, ad2 ? ot_autodiff_grad(ad2, rt) : NULL};
    for (int i = 0; i < 3; i++) out[i] = trees[i] ? eval(be, trees[i], &n[i]) : NULL;
    if (!y) test__fail(__FILE__, __LINE__, "case %d: %s", k, ot_errmsg());
    ot_clear_error();
    ot_autodiff_free(ad2);
    ot_autodiff_free(ad);
    keep[0] = rt;
    keep[1] = r2;
}

/* Case k's three values on be (y, d sum(y r)/dx, and that in r of sum(dx
 * r2): the gradient nodes and their gradients), x a view as view says. */
static void pool_case(ot_backend *be, int k, ot_dtype dt, int view, double *out[3], int64_t n[3])
{
    lcg r = {(uint64_t)k * 7919 + 1};
    ot_shape s = {.ndim = 3 + draw(&r, 3), .dims = {draw(&r, 4) == 0 ? 0 : 1 + draw(&r, 2),
                                                     1 + draw(&r, 3)}};
    for (int d = 2; d < s.ndim; d++) s.dims[d] = 1 + draw(&r, s.ndim == 5 ? 4 : 7);
    ot_pool *p = ot_pool_push();
    ot_shape bs = s;
    if (view == 1) for (int d = 0; d < s.ndim; d++) bs.dims[d] = s.dims[s.ndim - 1 - d];
    if (view == 2) bs.dims[s.ndim - 1] *= 2;
    ot_tensor *base = test__ints(be, bs, dt, k, 7, 3, 0.5), *x = base;
    if (view == 1) x = ot_transpose(base, NULL);
    if (view == 2) {
        ot_index idx[5] = {OT_ALL, OT_ALL, OT_ALL, OT_ALL, OT_ALL};
        idx[s.ndim - 1] = OT_RANGE(1, OT_NONE, 2);
        x = ot_slice_n(base, s.ndim, idx);
    }
    ot_node *y = random_pool(&r, ot_tensor_node(x), k % 2);
    ot_tensor *keep[2];
    three_values(be, k, dt, s, x, y, out, n, keep);
    ot_pool_pop(p);
    if (x != base) ot_tensor_free(x);
    ot_tensor *t[] = {base, keep[0], keep[1]};
    for (int i = 0; i < 3; i++) ot_tensor_free(t[i]);
}

/* Case k's three values on ref (a) and cpu (b) alike; frees them. */
static void compare(int k, ot_dtype dt, int view, double *a[3], int64_t na[3], double *b[3],
                    int64_t nb[3])
{
    for (int i = 0; i < 3; i++) {
        CHECK(a[i] && b[i] && na[i] == nb[i]);
        for (int64_t e = 0; a[i] && b[i] && e < na[i] && e < nb[i]; e++)
            if (!test__close(a[i][e], b[i][e], dt == OT_F32 ? 1e-6 : 1e-13)) {
                test__fail(__FILE__, __LINE__, "case %d (%s, view %d), result %d [%lld]: "
                           "cpu %.17g, ref %.17g", k, dt == OT_F32 ? "f32" : "f64", view, i,
                           (long long)e, b[i][e], a[i][e]);
                break;
            }
        free(a[i]);
        free(b[i]);
    }
}

TEST(pooling_cpu_matches_ref)
{
    ot_backend *ref = test__backend("ref", OT_FUSION_ON), *cpu = test__backend("cpu", OT_FUSION_ON);
    for (int k = 0; k < 48; k++) {
        ot_dtype dt = k % 4 < 2 ? OT_F64 : OT_F32;
        double *a[3], *b[3];
        int64_t na[3] = {0}, nb[3] = {0};
        pool_case(ref, k, dt, k % 3, a, na);
        pool_case(cpu, k, dt, k % 3, b, nb);
        compare(k, dt, k % 3, a, na, b, nb);
    }
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

/* The cpu backend's fast path (1-D and 2-D, contiguous, no dilation):
 * interior windows and the border around them, ties, NaNs and an all
 * -inf window inside, each geometry as max and avg pool, f32 and f64. */
typedef struct fast_geom {
    int nsp, h, w, kh, kw, sh, sw, ph, pw;
    bool ceil, excl;
} fast_geom;

static const fast_geom fast_geoms[] = {
    {2, 8, 8, 2, 2, 2, 2, 0, 0, false, false},  {2, 9, 11, 2, 2, 2, 2, 0, 0, true, false},
    {2, 9, 10, 3, 3, 2, 2, 1, 1, false, false}, {2, 11, 9, 3, 3, 2, 2, 1, 1, true, true},
    {2, 7, 9, 3, 3, 1, 1, 1, 1, false, true},   {2, 6, 7, 3, 3, 1, 1, 0, 0, false, false},
    {2, 10, 5, 3, 2, 1, 2, 1, 0, true, false},  {2, 12, 13, 2, 3, 3, 1, 1, 1, true, false},
    {1, 1, 13, 1, 3, 1, 2, 0, 1, false, false}, {1, 1, 12, 1, 2, 1, 2, 0, 0, true, true},
};

static void fast_case(ot_backend *be, int k, ot_dtype dt, bool avg, double *out[3], int64_t n[3])
{
    const fast_geom *f = &fast_geoms[k];
    ot_shape s = f->nsp == 2 ? OT_SHAPE(2, 2, f->h, f->w) : OT_SHAPE(2, 2, f->w);
    int64_t plane = (int64_t)f->h * f->w, count = 4 * plane;
    double *v = malloc(sizeof *v * (size_t)count);
    for (int64_t i = 0; i < count; i++) v[i] = (double)((i * 7) % 5) - 2;   /* ties */
    for (int64_t i = 0; i < count; i++) {   /* planes 1 and 3 hashed: any tap may win */
        uint32_t z = (uint32_t)i * 0x9e3779b1u;
        z = (z ^ z >> 15) * 0x85ebca77u;
        if (i / plane % 2) v[i] = (double)((z ^ z >> 13) % 9) - 4;
    }
    v[plane / 2 + 1] = NAN;
    v[plane + f->w + 2] = NAN;
    v[plane + f->w + 3] = NAN;
    for (int64_t i = 2 * plane; i < 2 * plane + 2 * f->w; i++) v[i] = -INFINITY;
    ot_pool *p = ot_pool_push();
    float *v32 = malloc(sizeof *v32 * (size_t)count);
    for (int64_t i = 0; i < count; i++) v32[i] = (float)v[i];
    ot_tensor *x = ot_array(be, s, dt, dt == OT_F32 ? (void *)v32 : (void *)v);
    free(v);
    free(v32);
    ot_pool_opts o = {.ceil_mode = f->ceil, .exclude_pad = avg && f->excl};
    int geo[2][4] = {{f->kh, f->sh, f->ph}, {f->kw, f->sw, f->pw}};
    for (int d = 0; d < f->nsp; d++) {
        const int *g = geo[d + 2 - f->nsp];
        o.kernel[d] = g[0], o.stride[d] = g[1], o.pad_lo[d] = o.pad_hi[d] = g[2];
    }
    ot_node *y = avg ? ot_avg_pool_at(ot_tensor_node(x), &o, __FILE__, __LINE__)
                     : ot_max_pool_at(ot_tensor_node(x), &o, __FILE__, __LINE__);
    ot_tensor *keep[2];
    three_values(be, k, dt, s, x, y, out, n, keep);
    ot_pool_pop(p);
    ot_tensor *t[] = {x, keep[0], keep[1]};
    for (int i = 0; i < 3; i++) ot_tensor_free(t[i]);
}

TEST(pooling_cpu_fast_path_matches_ref)
{
    ot_backend *ref = test__backend("ref", OT_FUSION_ON), *cpu = test__backend("cpu", OT_FUSION_ON);
    int ncase = (int)(sizeof fast_geoms / sizeof fast_geoms[0]);
    for (int k = 0; k < 4 * ncase; k++) {
        ot_dtype dt = k & 1 ? OT_F32 : OT_F64;
        double *a[3], *b[3];
        int64_t na[3] = {0}, nb[3] = {0};
        fast_case(ref, k / 4, dt, k & 2, a, na);
        fast_case(cpu, k / 4, dt, k & 2, b, nb);
        compare(k, dt, 0, a, na, b, nb);
    }
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

/* ---- errors --------------------------------------------------------------------- */

TEST(pooling_bad_input_is_a_build_error)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3, 5, 5), OT_F32);
    ot_tensor *xi = ot_zeros(be, OT_SHAPE(2, 3, 5, 5), OT_I32), *x2 = ot_zeros(be, OT_SHAPE(3, 5), OT_F32);
    char site[64];
    ot_pool *p = ot_pool_push();
    int line = __LINE__ + 1;
    CHECK(ot_max_pool(x2, .kernel = {2}) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "max_pool:", "(3,5)", "3-D to 5-D");
    ot_clear_error();
    line = __LINE__ + 1;
    CHECK(ot_max_pool(x, .kernel = {6}) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "larger than the padded input 5 + 0 + 0", "(2,3,5,5)");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {6}, .pad = 1) != NULL);
    CHECK(ot_max_pool(x, .kernel = {2}, .pad = 2) == NULL);
    CHECK_ERR(OT_EINVAL, "padding 2 + 2", "kernel / 2 = 1");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {3, 3}, .dilation = {3}) == NULL);
    CHECK_ERR(OT_ESHAPE, "dilated: 7");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {0}) == NULL);
    CHECK_ERR(OT_EINVAL, "kernel 0");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {2}, .stride = {1, -1}) == NULL);
    CHECK_ERR(OT_EINVAL, "stride -1 in spatial dim 1");
    ot_clear_error();
    CHECK(ot_avg_pool(x, .kernel = {2}, .pad = -1) == NULL);
    CHECK_ERR(OT_EINVAL, "padding -1");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {2}, .dilation = {-1}) == NULL);
    CHECK_ERR(OT_EINVAL, "dilation -1");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {2, 2, 9}) == NULL);   /* past x's 2 spatial dims */
    CHECK_ERR(OT_EINVAL, "max_pool", ".kernel[2] is 9", "(2,3,5,5) has 2 spatial dims");
    ot_clear_error();
    CHECK(ot_avg_pool(x, .kernel = {2}, .pad_lo = {0, 0, 1}) == NULL);
    CHECK_ERR(OT_EINVAL, ".pad_lo[2] is 1");
    ot_clear_error();
    CHECK(ot_avg_pool(x, .kernel = {2}, .dilation = {2}) == NULL);
    CHECK_ERR(OT_EINVAL, "no dilation");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {2}, .exclude_pad = true) == NULL);
    CHECK_ERR(OT_EINVAL, "exclude_pad");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {3}, .pad = 1, .pad_lo = {1, 1}) == NULL);
    CHECK_ERR(OT_EINVAL, "give one of");
    ot_clear_error();
    CHECK(ot_max_pool(xi, .kernel = {2}) == NULL);
    CHECK_ERR(OT_EDTYPE, "int32", "(2,3,5,5)");
    ot_clear_error();
    CHECK(ot_avg_pool(xi, .kernel = {2}) == NULL);
    CHECK_ERR(OT_EDTYPE, "must be floating point");
    ot_clear_error();
    /* gradient nodes by hand: dy of the wrong shape */
    ot_args a = {.axis = OT_AXIS_ALL, .win = {.ksize = {2, 2}}};
    CHECK(ot_build(OT_OP_MAX_POOL_GRAD, ot_tensor_node(x), ot_tensor_node(x), &a) == NULL);
    CHECK_ERR(OT_ESHAPE, "the output gradient has shape (2,3,5,5)", "(2,3,2,2)");
    ot_clear_error();
    CHECK(ot_max_pool(x, .kernel = {2}, .ceil_mode = true) != NULL);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(xi);
    ot_tensor_free(x2);
    ot_backend_free(be);
}

/* ---- print, parse, explain ---------------------------------------------------- */

TEST(pooling_prints_parses_and_explains)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3, 7, 6), OT_F32);
    ot_tensor_set_name(x, "x");
    ot_pool *p = ot_pool_push();
    ot_node *in = ot_tensor_node(x);
    ot_node *mp = ot_max_pool(x, .kernel = {3, 2}, .stride = {2, 1}, .pad_lo = {1, 0},
                              .pad_hi = {0, 1}, .dilation = {2, 1}, .ceil_mode = true);
    ot_node *ap = ot_avg_pool(x, .kernel = {3}, .pad = 1, .exclude_pad = true, .ceil_mode = true);
    ot_node *trees[] = {mp, ap, grad_of_sum(ot_sqr(mp), x), grad_of_sum(ot_sqr(ap), x)};
    CHECK_INT(fuzz_pp_roundtrip(trees, 4, 1, (const char *[]){"x"}, &in), -1);   /* the tree that did not */
    char *e = test__capture(ot_explain, trees[2]);
    CHECK(e && strstr(e, "pool max_pool_grad [2x3x7x6] (direct)"));
    free(e);
    e = test__capture(ot_pp, trees[3]);
    CHECK(e && strstr(e, "avg_pool_grad") && strstr(e, "exclude_pad"));
    free(e);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* A window entry the operand has no dim for, or a dilation given to average
 * pooling, through ot_parse's prefix form or ot_build_at, is an error: the
 * builder dropped both (probe E: (avg_pool x ksize=(3,) dilation=(2,)) pooled
 * undilated, (max_pool x ksize=(3,3)) of a 1-D input used the 3 alone). */
TEST(pooling_refuses_window_entries_it_would_drop)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3, 8), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *in = ot_tensor_node(x);
    static const struct { const char *text, *msg; } bad[] = {
        {"(avg_pool x ksize=(3,) dilation=(2,))", "avg_pool takes no argument 'dilation'"},
        {"(max_pool x ksize=(3,3))", "kernel 3 for spatial dim 1: the operand has 1 spatial dim"},
        {"(max_pool x ksize=(3,) pad_hi=(0,1))", "pad_hi 1 for spatial dim 1"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ot_clear_error();
        CHECK(ot_parse(bad[k].text, 1, (const char *[]){"x"}, &in) == NULL);
        test__check_err(__FILE__, __LINE__, OT_EINVAL, (const char *[]){bad[k].msg, NULL});
    }
    ot_args a = {.axis = OT_AXIS_ALL, .win = {.ksize = {3}, .dilation = {2}}};
    CHECK(ot_build_at(OT_OP_AVG_POOL, in, NULL, &a, __FILE__, __LINE__) == NULL);
    CHECK_ERR(OT_EINVAL, "average pooling takes no dilation");
    a.win.dilation[0] = 1;   /* 1 is no dilation */
    CHECK(ot_build_at(OT_OP_AVG_POOL, in, NULL, &a, __FILE__, __LINE__) != NULL);
    CHECK(ot_parse("(max_pool x ksize=(3,) dilation=(2,))", 1, (const char *[]){"x"}, &in) != NULL);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_backend_free(be);
}

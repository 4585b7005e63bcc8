/*
 * test_custom_op.c - ops registered at run time (ot_op_register): GELU
 * (scalar, AVX2 and AVX-512 functions), a Huber cost (binary, the same)
 * and softsign (scalar functions only), from examples/custom_ops.h.
 *   - results against the same formula built from the table's ops, and
 *     against the ref backend;
 *   - on every ISA this CPU runs: generated code, the tile interpreter
 *     (jit off) and fusion off bitwise equal, on odd lengths, views,
 *     broadcasts, scalar operands and 1 and 3 threads;
 *   - ot_explain shows the op inside a generated kernel;
 *   - gradients against central differences in f64, on both backends;
 *   - the registry: names, numbers, queries, printing, bad registrations,
 *     a dtype without a function, registration from several threads.
 * Each test runs in its own process, so each registers its own ops.
 */
#include "test.h"
#include "../examples/custom_ops.h"

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static const char *const isas[] = {"scalar", "sse2", "avx2", "avx512", "neon"};
#define NISA 5

/* Options that only this test sets. */
static void clear_env(void)
{
    unsetenv("OT_BACKEND");
    unsetenv("OT_ISA");
    unsetenv("OT_JIT");
    unsetenv("OT_FUSION");
}

/* A cpu backend on isa (NULL: the widest), or NULL where this CPU lacks it. */
static ot_backend *cpu(const char *isa, int jit, int fusion, int threads)
{
    ot_backend_opts o = {.isa = isa, .jit = jit, .fusion = fusion, .threads = threads};
    ot_backend *be = ot_backend_new("cpu", &o);
    ot_clear_error();
    return be;
}

static ot_op reg(ot_op_def d)
{
    ot_op op = ot_op_register(&d);
    CHECK(op >= OT_OP_REGISTERED);
    return op;
}

/* n values in [-lo, hi] of a fixed pseudo-random sequence. */
static ot_tensor *values(ot_backend *be, ot_shape s, ot_dtype dt, uint32_t seed, double lo,
                         double hi)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) n *= s.dims[i];
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = lo + (hi - lo) * (seed >> 8) / 16777216.0;
    }
    ot_tensor *t = ot_empty(be, s, dt);
    if (dt == OT_F32) {
        float *f = malloc(sizeof *f * (size_t)(n ? n : 1));
        for (int64_t i = 0; i < n; i++) f[i] = (float)v[i];
        ot_set(t, f);
        free(f);
    } else {
        ot_set(t, v);
    }
    free(v);
    return t;
}

/* The tree's value as doubles (caller frees), or NULL with the error set. */
static double *eval(ot_node *tree, int64_t *n)
{
    ot_tensor *t = ot_eval(tree);
    if (!t) return NULL;
    *n = ot_tensor_numel(t);
    double *v = malloc(sizeof *v * (size_t)(*n ? *n : 1));
    if (ot_tensor_dtype(t) == OT_F32) {
        float *f = malloc(sizeof *f * (size_t)(*n ? *n : 1));
        ot_get(t, f);
        for (int64_t i = 0; i < *n; i++) v[i] = f[i];
        free(f);
    } else {
        ot_get(t, v);
    }
    ot_tensor_free(t);
    return v;
}

static void check_close(const double *a, const double *b, int64_t n, double tol, const char *what)
{
    for (int64_t i = 0; i < n; i++)
        if (!test__close(a[i], b[i], tol)) {
            test__fail(__FILE__, __LINE__, "%s: element %lld is %.17g, expected %.17g", what,
                       (long long)i, a[i], b[i]);
            return;
        }
}

static void check_bitwise(const double *a, const double *b, int64_t n, const char *what)
{
    if (memcmp(a, b, sizeof *a * (size_t)n) != 0)
        test__fail(__FILE__, __LINE__, "%s: not bitwise equal", what);
}

/* gelu as the table's ops: x * sig(2u). */
static ot_node *gelu_builtin(ot_node *x)
{
    ot_node *u = ot_mul(GELU_C, ot_add(x, ot_mul(GELU_A, ot_mul(ot_mul(x, x), x))));
    return ot_mul(x, ot_sig(ot_mul(2.0, u)));
}

/* huber as the table's ops. */
static ot_node *huber_builtin(ot_node *p, ot_node *t)
{
    ot_node *d = ot_sub(p, t), *a = ot_abs(d);
    ot_node *in = ot_le(a, 1.0);
    return ot_add(ot_mul(in, ot_mul(0.5, ot_mul(d, d))), ot_mul(ot_sub(1.0, in), ot_sub(a, 0.5)));
}

/* ---- values ---------------------------------------------------------------- */

TEST(custom_op_gelu_and_huber_match_the_table_ops)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def()), soft = reg(softsign_def());
    static const int64_t lens[] = {1, 7, 8, 9, 17, 31, 33, 1000, 4099};
    for (int b = 0; b < 2; b++) {
        ot_backend *be = b ? cpu(NULL, 0, 0, 1) : ot_backend_new("ref", NULL);
        for (int d = 0; d < 2; d++) {
            ot_dtype dt = d ? OT_F64 : OT_F32;
            double tol = d ? 1e-13 : 3e-6;
            for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
                ot_pool *p = ot_pool_push();
                ot_tensor *x = values(be, OT_SHAPE(lens[l]), dt, 7 + (uint32_t)l, -6, 6);
                ot_tensor *y = values(be, OT_SHAPE(lens[l]), dt, 99 + (uint32_t)l, -3, 3);
                ot_node *xa = ot_add(ot_mul(x, 1.5), 0.25);   /* fused in front of the op */
                int64_t n1, n2;
                double *got = eval(ot_apply(gelu, xa), &n1), *want = eval(gelu_builtin(xa), &n2);
                CHECK(got && want && n1 == lens[l] && n2 == n1);
                if (got && want) check_close(got, want, n1, tol, b ? "cpu gelu" : "ref gelu");
                free(got), free(want);
                got = eval(ot_apply2(huber, xa, y), &n1), want = eval(huber_builtin(xa, ot_tensor_node(y)), &n2);
                CHECK(got && want);
                if (got && want) check_close(got, want, n1, tol, b ? "cpu huber" : "ref huber");
                free(got), free(want);
                got = eval(ot_apply(soft, ot_mul(x, y)), &n1);
                want = eval(ot_div(ot_mul(x, y), ot_add(1.0, ot_abs(ot_mul(x, y)))), &n2);
                CHECK(got && want);
                if (got && want) check_close(got, want, n1, tol, "softsign");
                free(got), free(want);
                ot_tensor_free(x), ot_tensor_free(y);
                ot_pool_pop(p);
            }
        }
        ot_backend_free(be);
    }
}

/* The cpu backend against ref: a tree mixing the ops, broadcast operands. */
TEST(custom_op_cpu_matches_ref)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def());
    ot_backend *r = ot_backend_new("ref", NULL), *c = cpu(NULL, 0, 0, 0);
    for (int d = 0; d < 2; d++) {
        ot_dtype dt = d ? OT_F64 : OT_F32;
        double *v[2];
        int64_t n[2];
        for (int b = 0; b < 2; b++) {
            ot_backend *be = b ? c : r;
            ot_pool *p = ot_pool_push();
            ot_tensor *x = values(be, OT_SHAPE(5, 37), dt, 3, -4, 4);
            ot_tensor *t = values(be, OT_SHAPE(37), dt, 4, -2, 2);
            ot_node *tree = ot_add(ot_apply(gelu, ot_tanh(x)), ot_apply2(huber, x, t));
            v[b] = eval(ot_sum(tree, 1), &n[b]);
            ot_tensor_free(x), ot_tensor_free(t);
            ot_pool_pop(p);
        }
        CHECK(v[0] && v[1] && n[0] == 5 && n[1] == 5);
        if (v[0] && v[1]) check_close(v[1], v[0], 5, d ? 1e-12 : 1e-5, "cpu vs ref");
        free(v[0]), free(v[1]);
    }
    ot_backend_free(r), ot_backend_free(c);
}

/* The examples' vector exp to the ends of its range: gelu's exp(-2u) runs
 * up to ln FLT_MAX (f32 x near -10.05) and ln DBL_MAX (f64 x near -21.15),
 * where a clamp at 88 (709) halved the value; against the scalar
 * functions (libm's exp), relative. */
static void gelu_edge(ot_backend *be, ot_op gelu, ot_dtype dt, double lo, double hi,
                      const char *what)
{
    enum { N = 97 };
    double x[N], want[N];
    float xf[N];
    for (int i = 0; i < N; i++) {
        x[i] = lo + (hi - lo) * i / (N - 1);
        xf[i] = (float)x[i];
        want[i] = dt == OT_F32 ? gelu_f32(xf[i]) : gelu_f64(x[i]);
    }
    ot_pool *p = ot_pool_push();
    ot_tensor *t = ot_empty(be, OT_SHAPE(N), dt);
    CHECK(ot_set(t, dt == OT_F32 ? (void *)xf : (void *)x) == 0);
    int64_t n = 0;
    /* exp(-2u) near -2u = 88 (709) turns an ulp of u into 2 |u| ulps of the
     * result, and the vector and scalar functions round u differently */
    double *got = eval(ot_apply(gelu, t), &n), tol = dt == OT_F32 ? 1e-4 : 1e-11;
    CHECK(got && n == N);
    for (int i = 0; got && i < N; i++)
        if (!(fabs(got[i] - want[i]) <= tol * fabs(want[i]))) {
            test__fail(__FILE__, __LINE__, "%s: gelu(%.9g) is %.17g, libm's %.17g", what, x[i],
                       got[i], want[i]);
            break;
        }
    free(got);
    ot_tensor_free(t);
    ot_pool_pop(p);
}

TEST(custom_op_vector_exp_to_the_ends_of_its_range)
{
    clear_env();
    ot_op gelu = reg(gelu_def());
    static const char *const vec[] = {"avx2", "avx512"};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++) {
            ot_backend *be = cpu(vec[i], j ? OT_JIT_OFF : OT_JIT_ON, OT_FUSION_ON, 1);
            if (!be) continue;   /* not this CPU */
            char what[64];
            snprintf(what, sizeof what, "%s%s f32", vec[i], j ? " jit off" : "");
            gelu_edge(be, gelu, OT_F32, -10.2, -9.9, what);
            snprintf(what, sizeof what, "%s%s f64", vec[i], j ? " jit off" : "");
            gelu_edge(be, gelu, OT_F64, -21.4, -21.0, what);
            ot_backend_free(be);
        }
}

/* ---- the paths of the cpu backend ------------------------------------------- */

/* The trees of the path checks over x (2-D), a row t and a view xt. */
static ot_node *path_tree(int k, ot_op gelu, ot_op huber, ot_op soft, ot_tensor *x,
                          ot_tensor *t, ot_tensor *xt)
{
    switch (k) {
    case 0: return ot_apply(gelu, ot_add(ot_mul(x, 2.0), 1.0));
    case 1: return ot_mul(ot_apply2(huber, x, t), ot_apply(gelu, x));   /* broadcast row */
    case 2: return ot_add(ot_apply2(huber, 0.5, x), ot_apply2(huber, x, -0.25));   /* scalars */
    case 3: return ot_apply(gelu, ot_sub(xt, ot_apply(soft, xt)));   /* a strided view */
    default: return ot_apply(gelu, ot_apply2(huber, ot_exp(t), x));
    }
}

TEST(custom_op_fused_unfused_interpreted_bitwise)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def()), soft = reg(softsign_def());
    static const int64_t cols[] = {1, 5, 8, 13, 16, 67};
    for (int i = 0; i < NISA; i++) {
        ot_backend *be[4] = {cpu(isas[i], OT_JIT_ON, OT_FUSION_ON, 1),
                             cpu(isas[i], OT_JIT_OFF, OT_FUSION_ON, 1),
                             cpu(isas[i], OT_JIT_ON, OT_FUSION_OFF, 1),
                             cpu(isas[i], OT_JIT_ON, OT_FUSION_ON, 3)};
        if (!be[0]) continue;
        for (int d = 0; d < 2; d++)
            for (size_t c = 0; c < sizeof cols / sizeof cols[0]; c++)
                for (int k = 0; k < 5; k++) {
                    double *v[4] = {NULL};
                    int64_t n[4];
                    for (int b = 0; b < 4; b++) {
                        ot_pool *p = ot_pool_push();
                        ot_dtype dt = d ? OT_F64 : OT_F32;
                        ot_tensor *x = values(be[b], OT_SHAPE(3, cols[c]), dt, 5, -5, 5);
                        ot_tensor *t = values(be[b], OT_SHAPE(cols[c]), dt, 6, -2, 2);
                        ot_tensor *w = values(be[b], OT_SHAPE(cols[c], 3), dt, 8, -3, 3);
                        ot_tensor *xt = ot_transpose(w, NULL);
                        v[b] = eval(path_tree(k, gelu, huber, soft, x, t, xt), &n[b]);
                        CHECK(v[b] != NULL);
                        ot_tensor_free(xt), ot_tensor_free(w);
                        ot_tensor_free(x), ot_tensor_free(t);
                        ot_pool_pop(p);
                    }
                    static const char *const what[] = {"", "jit off", "fusion off", "3 threads"};
                    for (int b = 1; b < 4; b++)
                        if (v[0] && v[b] && n[b] == n[0]) {
                            char msg[128];
                            snprintf(msg, sizeof msg, "%s %s cols %lld tree %d: %s", isas[i],
                                     d ? "f64" : "f32", (long long)cols[c], k, what[b]);
                            check_bitwise(v[0], v[b], n[0], msg);
                        }
                    for (int b = 0; b < 4; b++) free(v[b]);
                }
        for (int b = 0; b < 4; b++) ot_backend_free(be[b]);
    }
}

/* A large output, tiled and split over threads: still bitwise. */
TEST(custom_op_threads_bitwise)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def());
    double *v[2];
    int64_t n[2];
    for (int b = 0; b < 2; b++) {
        ot_backend *be = cpu(NULL, 0, 0, b ? 3 : 1);
        ot_pool *p = ot_pool_push();
        ot_tensor *x = values(be, OT_SHAPE(301, 257), OT_F32, 11, -4, 4);
        ot_tensor *t = values(be, OT_SHAPE(257), OT_F32, 12, -4, 4);
        v[b] = eval(ot_apply(gelu, ot_apply2(huber, ot_mul(x, 3.0f), t)), &n[b]);
        ot_tensor_free(x), ot_tensor_free(t);
        ot_pool_pop(p);
        ot_backend_free(be);
    }
    CHECK(v[0] && v[1] && n[0] == n[1]);
    if (v[0] && v[1]) check_bitwise(v[0], v[1], n[0], "1 vs 3 threads");
    free(v[0]), free(v[1]);
}

/* ---- explain ---------------------------------------------------------------- */

static char *explain(ot_node *tree) { return test__capture(ot_explain, tree); }

/* The line of s holding both a and b, or NULL. */
static const char *line_with(const char *s, const char *a, const char *b)
{
    for (const char *l = s; l && *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        char buf[1024];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf ? len : sizeof buf - 1), l);
        if (strstr(buf, a) && strstr(buf, b)) return l;
        l = e ? e + 1 : NULL;
    }
    return NULL;
}

TEST(custom_op_explain_shows_it_in_generated_code)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), soft = reg(softsign_def());
    int jitted = 0;
    for (int i = 2; i < NISA; i++) {
        ot_backend *be = cpu(isas[i], OT_JIT_ON, 0, 1);
        if (!be) continue;
        bool jits = ot_backend_options(be).jit == OT_JIT_ON;
        ot_pool *p = ot_pool_push();
        ot_tensor *x = values(be, OT_SHAPE(100), OT_F32, 1, -1, 1);
        char *s = explain(ot_apply(gelu, ot_add(ot_mul(x, 2.0f), 1.0f)));
        CHECK(s && line_with(s, "gelu", "kernel 0"));
        if (jits) CHECK(s && line_with(s, "gelu", "(generated code)"));
        jitted += jits;
        free(s);
        /* Without a vector function the kernel is interpreted. */
        s = explain(ot_apply(soft, ot_add(ot_mul(x, 2.0f), 1.0f)));
        CHECK(s && line_with(s, "softsign", "kernel 0"));
        CHECK(s && !line_with(s, "softsign", "generated"));
        free(s);
        ot_tensor_free(x);
        ot_pool_pop(p);
        ot_backend_free(be);
    }
#if defined(__x86_64__) && defined(__linux__)
    ot_backend *any = cpu("avx2", 0, 0, 0);
    if (any) CHECK(jitted > 0);
    ot_backend_free(any);
#endif
}

/* ---- gradients --------------------------------------------------------------- */

/* d sum(f(x, y) * w) / dx and / dy by autodiff against central differences
 * (f64), on backend be. */
static void gradcheck(ot_backend *be, ot_op op, bool binary, bool bcast)
{
    ot_pool *p = ot_pool_push();
    ot_tensor *x = values(be, OT_SHAPE(3, 4), OT_F64, 21, -2.5, 2.5);
    ot_tensor *y = values(be, bcast ? OT_SHAPE(4) : OT_SHAPE(3, 4), OT_F64, 22, -2, 2);
    ot_tensor *w = values(be, OT_SHAPE(3, 4), OT_F64, 23, -1, 1);
    ot_node *f = ot_sum(ot_mul(binary ? ot_apply2(op, x, y) : ot_apply(op, x), w));
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    CHECK(ad != NULL);
    for (int k = 0; ad && k < (binary ? 2 : 1); k++) {
        ot_tensor *v = k ? y : x;
        int64_t n = ot_tensor_numel(v);
        double g[12], xs[12];
        CHECK_INT(ot_autodiff_grad_host(ad, v, g), 0);
        ot_get(v, xs);
        for (int64_t i = 0; i < n; i++) {
            double h = 1e-6, fx[2];
            for (int s = 0; s < 2; s++) {
                double save = xs[i];
                xs[i] = save + (s ? -h : h);
                ot_set(v, xs);
                ot_tensor *r = ot_eval(f);
                ot_get(r, &fx[s]);
                ot_tensor_free(r);
                xs[i] = save;
            }
            ot_set(v, xs);
            double fd = (fx[0] - fx[1]) / (2 * h);
            if (!test__close(g[i], fd, 1e-6))
                test__fail(__FILE__, __LINE__, "%s d/d%s[%lld] = %.12g, differences give %.12g",
                           ot_op_name(op), k ? "y" : "x", (long long)i, g[i], fd);
        }
    }
    ot_autodiff_free(ad);
    ot_tensor_free(x), ot_tensor_free(y), ot_tensor_free(w);
    ot_pool_pop(p);
}

TEST(custom_op_gradcheck_f64)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def());
    for (int b = 0; b < 2; b++) {
        ot_backend *be = b ? cpu(NULL, 0, 0, 0) : ot_backend_new("ref", NULL);
        gradcheck(be, gelu, false, false);
        gradcheck(be, huber, true, false);
        gradcheck(be, huber, true, true);   /* y broadcast: its gradient is summed back */
        ot_backend_free(be);
    }
}

/* An op without a gradient builder is not differentiable: zero gradient. */
TEST(custom_op_without_gradient_is_nodiff)
{
    clear_env();
    ot_op soft = reg(softsign_def());
    CHECK(ot_op_flags(soft) & OT_FLAG_NODIFF);
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_pool *p = ot_pool_push();
    ot_tensor *x = values(be, OT_SHAPE(4), OT_F64, 1, -1, 1);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_apply(soft, x)), NULL);
    double g[4] = {1, 1, 1, 1};
    CHECK_INT(ot_autodiff_grad_host(ad, x, g), 0);
    for (int i = 0; i < 4; i++) CHECK(g[i] == 0.0);
    ot_autodiff_free(ad);
    ot_tensor_free(x);
    ot_pool_pop(p);
    ot_backend_free(be);
}

static ot_node *null_grad(ot_node *x, ot_node *y, ot_node *out, ot_node *g, int which, void *u)
{
    (void)x, (void)y, (void)out, (void)g, (void)which, (void)u;
    return NULL;
}

TEST(custom_op_gradient_builder_returning_null_is_an_error)
{
    clear_env();
    ot_op_def d = softsign_def();
    d.name = "softsign_bad_grad";
    d.grad = null_grad;
    ot_op op = reg(d);
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_pool *p = ot_pool_push();
    ot_tensor *x = values(be, OT_SHAPE(4), OT_F64, 1, -1, 1);
    CHECK(ot_autodiff_new(ot_sum(ot_apply(op, x)), NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "softsign_bad_grad", "returned NULL");
    ot_tensor_free(x);
    ot_pool_pop(p);
    ot_backend_free(be);
}

/* ---- the registry ------------------------------------------------------------ */

TEST(custom_op_names_numbers_and_printing)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def());
    CHECK_INT(gelu, OT_OP_REGISTERED);
    CHECK_INT(huber, OT_OP_REGISTERED + 1);
    CHECK_STR(ot_op_name(gelu), "gelu");
    CHECK_INT(ot_op_lookup("huber"), huber);
    CHECK_INT(ot_op_arity(gelu), 1);
    CHECK_INT(ot_op_arity(huber), 2);
    CHECK_INT(ot_op_kind(gelu), OT_KIND_UNARY);
    CHECK_INT(ot_op_kind(huber), OT_KIND_BINARY);
    CHECK_INT(ot_op_flags(gelu), OT_FLAG_FLOAT | OT_FLAG_CUSTOM);
    CHECK(ot_op_name(OT_OP_REGISTERED + 2) == NULL);
    CHECK_INT(ot_op_arity(OT_OP_REGISTERED + 2), -1);

    ot_backend *be = ot_backend_new("ref", NULL);
    ot_pool *p = ot_pool_push();
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2), OT_F32);
    ot_tensor_set_name(x, "x");
    ot_node *n = ot_apply2(huber, ot_apply(gelu, x), x);
    CHECK_INT(ot_node_op(n), huber);
    CHECK_INT(ot_node_op(ot_node_child(n, 0)), gelu);
    char *s = test__capture(ot_pp, n);
    CHECK_STR(s, "(huber (gelu x) x)");
    free(s);
    s = test__capture(ot_print, n);
    CHECK(s && strstr(s, "'op': 'huber'") && strstr(s, "'op': 'gelu'"));
    free(s);
    s = test__capture(ot_graphviz, n);
    CHECK(s && strstr(s, "gelu") && strstr(s, "huber"));
    free(s);
    ot_stack *st = ot_stack_new(n);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ot_stack_print(st, f);
    fclose(f);
    CHECK(buf && strstr(buf, "gelu") && strstr(buf, "huber"));
    free(buf);
    CHECK_INT(ot_stack_at(st, ot_stack_len(st) - 1)->op, huber);
    ot_stack_free(st);
    /* Substitution rebuilds the registered ops. */
    ot_tensor *x2 = ot_ones(be, OT_SHAPE(2), OT_F32);
    ot_tensor_set_name(x2, "x2");
    ot_node *sub = ot_substitute(n, x, x2);
    s = sub ? test__capture(ot_pp, sub) : NULL;
    CHECK_STR(s, "(huber (gelu x2) x2)");
    free(s);
    ot_tensor_free(x2);
    /* i32 operands give f64, as the functions are f32 and f64 only. */
    ot_tensor *i = ot_zeros(be, OT_SHAPE(2), OT_I32);
    CHECK_INT(ot_node_dtype(ot_apply(gelu, i)), OT_F64);
    ot_tensor_free(i);
    ot_tensor_free(x);
    ot_pool_pop(p);
    ot_backend_free(be);
}

/* Two registered ops of one shape are two plans, never one cached for both. */
TEST(custom_op_identity_in_plans)
{
    clear_env();
    ot_op_def a = softsign_def(), b = softsign_def();
    b.name = "softsign2";
    b.f32 = gelu_f32;
    b.f64 = gelu_f64;
    ot_op sa = reg(a), sb = reg(b);
    ot_backend *be = cpu(NULL, 0, 0, 1);
    ot_pool *p = ot_pool_push();
    ot_tensor *x = values(be, OT_SHAPE(9), OT_F32, 2, -2, 2);
    int64_t n;
    double *va = eval(ot_add(ot_apply(sa, x), ot_apply(sb, x)), &n);
    double *vb = eval(ot_add(ot_apply(sb, x), ot_apply(sa, x)), &n);
    double *vs = eval(ot_mul(ot_apply(sa, x), 2.0f), &n), *vg = eval(ot_mul(ot_apply(sb, x), 2.0f), &n);
    float xs[9];
    ot_get(x, xs);
    for (int i = 0; i < 9 && va && vb && vs && vg; i++) {
        CHECK(va[i] == vb[i]);
        CHECK(vs[i] == 2.0f * softsign_f32(xs[i]));
        CHECK(vg[i] == 2.0f * gelu_f32(xs[i]));
    }
    free(va), free(vb), free(vs), free(vg);
    ot_tensor_free(x);
    ot_pool_pop(p);
    ot_backend_free(be);
}

TEST(custom_op_bad_registrations)
{
    clear_env();
    CHECK_INT(ot_op_register(NULL), OT_OP_NONE);
    CHECK_ERR(OT_ENULL, "op_register", "NULL");
    struct { ot_op_def d; const char *sub; } bad[] = {
        {{.name = NULL, .arity = 1, .f32 = gelu_f32}, "NULL"},
        {{.name = "", .arity = 1, .f32 = gelu_f32}, "''"},
        {{.name = "has space", .arity = 1, .f32 = gelu_f32}, "has space"},
        /* a leading digit: ot_pp would print "(9lives x)", which ot_parse
         * reads as the number 9 */
        {{.name = "9lives", .arity = 1, .f32 = gelu_f32}, "digit first"},
        {{.name = "a_name_much_longer_than_thirty_one", .arity = 1, .f32 = gelu_f32}, "characters"},
        {{.name = "tanh", .arity = 1, .f32 = gelu_f32}, "built-in"},
        {{.name = "custom1", .arity = 1, .f32 = gelu_f32}, "built-in"},
        {{.name = "g", .arity = 0, .f32 = gelu_f32}, "arity 0"},
        {{.name = "g", .arity = 3, .f32 = gelu_f32}, "arity 3"},
        {{.name = "g", .arity = 1}, "no scalar function"},
        {{.name = "g", .arity = 2}, "no scalar function"},
        {{.name = "g", .arity = 1, .f32_xy = huber_f32}, "binary functions"},
        {{.name = "g", .arity = 2, .f32 = gelu_f32, .f32_xy = huber_f32}, "unary functions"},
        {{.name = "g", .arity = 1, .f32 = gelu_f32, .avx2_f64 = (ot_vfn)gelu_f64}, "no f64 scalar"},
        {{.name = "g", .arity = 1, .f64 = gelu_f64, .avx512_f32 = (ot_vfn)gelu_f32}, "no f32 scalar"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ot_clear_error();
        CHECK_INT(ot_op_register(&bad[i].d), OT_OP_NONE);
        CHECK_ERR(OT_EINVAL, "op_register", bad[i].sub);
    }
    ot_op g = reg(gelu_def());
    CHECK_INT(ot_op_register(&(ot_op_def){.name = "gelu", .arity = 1, .f64 = gelu_f64}), OT_OP_NONE);
    CHECK_ERR(OT_EINVAL, "'gelu'", "registered already");
    /* The failures registered nothing. */
    CHECK_INT(g, OT_OP_REGISTERED);
    CHECK_INT(ot_op_lookup("g"), OT_OP_NONE);
    /* A full registry. */
    char name[16];
    int added = 1;
    for (int i = 0; i < OT_MAX_REGISTERED_OPS; i++) {
        snprintf(name, sizeof name, "op%d", i);
        ot_op_def d = {.name = name, .arity = 1, .f32 = gelu_f32};
        if (ot_op_register(&d) == OT_OP_NONE) break;
        added++;
    }
    CHECK_INT(added, OT_MAX_REGISTERED_OPS);
    CHECK_ERR(OT_EINVAL, "op_register", "the most there may be");
    CHECK_INT(ot_op_lookup("op254"), OT_OP_REGISTERED + OT_MAX_REGISTERED_OPS - 1);
}

TEST(custom_op_bad_builds)
{
    clear_env();
    ot_op gelu = reg(gelu_def()), huber = reg(huber_def());
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_pool *p = ot_pool_push();
    ot_tensor *x = ot_zeros(be, OT_SHAPE(2, 3), OT_F32), *y = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_clear_error();
    CHECK(ot_build_at(OT_OP_CUSTOM1, ot_tensor_node(x), NULL, NULL, "u.c", 3) == NULL);
    CHECK_ERR(OT_EINVAL, "u.c:3", "custom1", "ot_op_register");
    ot_clear_error();
    CHECK(ot_build_at((ot_op)(OT_OP_REGISTERED + 7), ot_tensor_node(x), NULL, NULL, "u.c", 4) == NULL);
    CHECK_ERR(OT_EINVAL, "unknown op");
    ot_clear_error();
    CHECK(ot_apply2(huber, x, y) == NULL);
    CHECK_ERR(OT_ESHAPE, "huber", "(2,3)", "(4,)");
    ot_clear_error();
    CHECK(ot_build_at(gelu, ot_tensor_node(x), ot_tensor_node(x), NULL, "u.c", 5) == NULL);
    CHECK_ERR(OT_EINVAL, "gelu", "operand");
    ot_clear_error();
    CHECK(ot_build_at(huber, ot_tensor_node(x), NULL, NULL, "u.c", 6) == NULL);
    CHECK_ERR(OT_ENULL, "huber", "NULL");
    ot_tensor_free(x), ot_tensor_free(y);
    ot_pool_pop(p);
    ot_backend_free(be);
}

/* f64 data for an op with f32 functions only: OT_EUNSUPPORTED at
 * assignment, on both backends, never a call of NULL. */
TEST(custom_op_dtype_without_function)
{
    clear_env();
    ot_op only32 = reg((ot_op_def){.name = "gelu32", .arity = 1, .f32 = gelu_f32,
                                   .avx2_f32 = CUSTOM_VFN(_mm256_gelu_f32)});
    for (int b = 0; b < 3; b++) {
        ot_backend *be = b == 2 ? cpu("scalar", 0, 0, 1) : b ? cpu(NULL, 0, 0, 1)
                                                          : ot_backend_new("ref", NULL);
        ot_pool *p = ot_pool_push();
        ot_tensor *x = ot_ones(be, OT_SHAPE(10), OT_F64), *out = ot_zeros(be, OT_SHAPE(10), OT_F64);
        ot_node *n = ot_apply(only32, ot_mul(x, 2.0));
        CHECK(n != NULL);
        CHECK_INT(ot_assign(out, n), OT_EUNSUPPORTED);
        CHECK_ERR(OT_EUNSUPPORTED, "gelu32", "f64 function");
        double v[10];
        ot_get(out, v);
        CHECK(v[0] == 0.0);   /* nothing written */
        ot_tensor *f = ot_ones(be, OT_SHAPE(10), OT_F32), *fo = ot_zeros(be, OT_SHAPE(10), OT_F32);
        CHECK_INT(ot_assign(fo, ot_apply(only32, f)), 0);
        float w[10];
        ot_get(fo, w);
        CHECK_NEAR(w[3], gelu_f32(1.0f), 1e-6);
        ot_tensor_free(x), ot_tensor_free(out), ot_tensor_free(f), ot_tensor_free(fo);
        ot_pool_pop(p);
        ot_backend_free(be);
    }
}

static void *register_some(void *arg)
{
    int t = (int)(intptr_t)arg;
    for (int i = 0; i < 20; i++) {
        char name[32];
        snprintf(name, sizeof name, "t%d_op%d", t, i);
        ot_op_def d = {.name = name, .arity = 1, .f64 = gelu_f64};
        if (ot_op_register(&d) == OT_OP_NONE) return (void *)1;
    }
    return NULL;
}

TEST(custom_op_registration_from_threads)
{
    pthread_t th[4];
    for (int t = 0; t < 4; t++) pthread_create(&th[t], NULL, register_some, (void *)(intptr_t)t);
    for (int t = 0; t < 4; t++) {
        void *r;
        pthread_join(th[t], &r);
        CHECK(r == NULL);
    }
    bool seen[80] = {false};
    for (int t = 0; t < 4; t++)
        for (int i = 0; i < 20; i++) {
            char name[32];
            snprintf(name, sizeof name, "t%d_op%d", t, i);
            int op = (int)ot_op_lookup(name) - OT_OP_REGISTERED;
            CHECK(op >= 0 && op < 80 && !seen[op]);
            if (op >= 0 && op < 80) seen[op] = true;
            CHECK_STR(ot_op_name((ot_op)(OT_OP_REGISTERED + op)), name);
        }
}

/* ---- random trees ---------------------------------------------------------------- */

/* A tree as a recipe, so that each backend builds its own copy: leaves
 * (shape, transposed or not, seed) then ops over earlier entries. */
enum { FZ_LEAVES = 3, FZ_OPS = 6 };
typedef struct fz_tree {
    ot_dtype dt;
    ot_shape leaf[FZ_LEAVES];
    bool transposed[FZ_LEAVES];
    int op[FZ_OPS], a[FZ_OPS], b[FZ_OPS];
    double k[FZ_OPS];
} fz_tree;

static uint32_t fz_rnd(uint32_t *s, uint32_t n)
{
    *s = *s * 1664525u + 1013904223u;
    return (*s >> 8) % n;
}

static fz_tree fz_draw(uint32_t seed)
{
    fz_tree t = {.dt = fz_rnd(&seed, 2) ? OT_F64 : OT_F32};
    int64_t r = 1 + fz_rnd(&seed, 5), c = 1 + fz_rnd(&seed, 40);
    for (int i = 0; i < FZ_LEAVES; i++) {
        int form = (int)fz_rnd(&seed, 4);
        t.leaf[i] = form == 0 ? OT_SHAPE(r, c) : form == 1 ? OT_SHAPE(c) : form == 2 ? OT_SHAPE(r, 1)
                                                                          : OT_SHAPE(1, c);
        t.transposed[i] = form == 0 && fz_rnd(&seed, 2);
    }
    t.leaf[0] = OT_SHAPE(r, c);
    for (int i = 0; i < FZ_OPS; i++) {
        t.op[i] = (int)fz_rnd(&seed, 6);
        t.a[i] = (int)fz_rnd(&seed, (uint32_t)(FZ_LEAVES + i));
        t.b[i] = (int)fz_rnd(&seed, (uint32_t)(FZ_LEAVES + i));
        t.k[i] = 0.25 * ((int)fz_rnd(&seed, 9) - 4);
    }
    return t;
}

/* The tree on be; tensors made go to made[] (caller frees). */
static ot_node *fz_build(const fz_tree *t, ot_backend *be, ot_op ops[3], ot_tensor *made[])
{
    ot_node *e[FZ_LEAVES + FZ_OPS];
    int nm = 0;
    for (int i = 0; i < FZ_LEAVES; i++) {
        ot_shape s = t->leaf[i];
        if (t->transposed[i]) {
            made[nm] = values(be, OT_SHAPE(s.dims[1], s.dims[0]), t->dt, 31 + (uint32_t)i, -3, 3);
            made[nm + 1] = ot_transpose(made[nm], NULL);
            e[i] = ot_tensor_node(made[nm + 1]);
            nm += 2;
        } else {
            made[nm] = values(be, s, t->dt, 31 + (uint32_t)i, -3, 3);
            e[i] = ot_tensor_node(made[nm++]);
        }
    }
    made[nm] = NULL;
    for (int i = 0; i < FZ_OPS; i++) {
        ot_node *a = e[t->a[i]], *b = e[t->b[i]];
        switch (t->op[i]) {
        case 0: e[FZ_LEAVES + i] = ot_apply(ops[0], a); break;
        case 1: e[FZ_LEAVES + i] = ot_apply(ops[2], ot_mul(a, t->k[i])); break;
        case 2: e[FZ_LEAVES + i] = ot_apply2(ops[1], a, b); break;
        case 3: e[FZ_LEAVES + i] = ot_add(a, b); break;
        case 4: e[FZ_LEAVES + i] = ot_apply2(ops[1], a, t->k[i]); break;
        default: e[FZ_LEAVES + i] = ot_tanh(ot_add(a, t->k[i])); break;
        }
    }
    return e[FZ_LEAVES + FZ_OPS - 1];
}

static double *fz_eval(const fz_tree *t, ot_backend *be, ot_op ops[3], int64_t *n)
{
    ot_tensor *made[2 * FZ_LEAVES + 1];
    ot_pool *p = ot_pool_push();
    double *v = eval(fz_build(t, be, ops, made), n);
    for (int i = 0; made[i]; i++) ot_tensor_free(made[i]);
    ot_pool_pop(p);
    return v;
}

/* Random trees of the registered ops among built-in ones, broadcasts and
 * transposed views: ref against cpu within tolerance; on every ISA,
 * generated code, the interpreter, fusion off and 3 threads bitwise. */
TEST(custom_op_random_trees)
{
    clear_env();
    ot_op ops[3] = {reg(gelu_def()), reg(huber_def()), reg(softsign_def())};
    ot_backend *ref = ot_backend_new("ref", NULL);
    ot_backend *be[NISA][4];
    for (int i = 0; i < NISA; i++) {
        be[i][0] = cpu(isas[i], OT_JIT_ON, OT_FUSION_ON, 1);
        be[i][1] = cpu(isas[i], OT_JIT_OFF, OT_FUSION_ON, 1);
        be[i][2] = cpu(isas[i], OT_JIT_ON, OT_FUSION_OFF, 1);
        be[i][3] = cpu(isas[i], OT_JIT_ON, OT_FUSION_ON, 3);
    }
    for (uint32_t seed = 1; seed <= 150; seed++) {
        fz_tree t = fz_draw(seed);
        int64_t nr;
        double *want = fz_eval(&t, ref, ops, &nr);
        CHECK(want != NULL);
        for (int i = 0; i < NISA && want; i++) {
            if (!be[i][0]) continue;
            double *v[4];
            int64_t n[4];
            for (int c = 0; c < 4; c++) v[c] = fz_eval(&t, be[i][c], ops, &n[c]);
            char msg[96];
            snprintf(msg, sizeof msg, "tree %u on %s against ref", seed, isas[i]);
            if (v[0] && n[0] == nr) check_close(v[0], want, nr, t.dt == OT_F32 ? 1e-4 : 1e-10, msg);
            for (int c = 1; c < 4; c++) {
                snprintf(msg, sizeof msg, "tree %u on %s, config %d", seed, isas[i], c);
                CHECK(v[0] && v[c] && n[c] == n[0]);
                if (v[0] && v[c] && n[c] == n[0]) check_bitwise(v[0], v[c], n[0], msg);
            }
            for (int c = 0; c < 4; c++) free(v[c]);
        }
        free(want);
    }
    for (int i = 0; i < NISA; i++)
        for (int c = 0; c < 4; c++) ot_backend_free(be[i][c]);
    ot_backend_free(ref);
}

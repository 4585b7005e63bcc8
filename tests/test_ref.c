/*
 * test_ref.c - unit tests of the reference backend (src/ref/ref.c): every op
 * against hand-computed values in f32, f64 and i32, broadcasting, the
 * reductions, dot, transpose, cast, onehot, rand, the composites, writing
 * into strided views, aliasing between outputs and leaves, ot_assign_many,
 * ot_eval, trees of height 10^5, and the stats counters.
 */
#include "test.h"
#include "internal.h"

#include <stdlib.h>

/* ---- fixture ------------------------------------------------------------- */

/* Each case runs in its own process; the fixture holds its backend, a pool
 * for its nodes and the tensors to free at the end (so LeakSanitizer and
 * valgrind see a clean exit). */
static struct {
    ot_backend *be;
    ot_pool *pool;
    ot_tensor *ts[256];
    int n;
} F;

static void fx_begin(const ot_backend_opts *opts)
{
    memset(&F, 0, sizeof F);
    F.be = ot_backend_new("ref", opts);
    CHECK(F.be != NULL);
    F.pool = ot_pool_push();
}

static void fx_end(void)
{
    ot_pool_pop(F.pool);
    for (int i = 0; i < F.n; i++) ot_tensor_free(F.ts[i]);
    ot_backend_free(F.be);
}

static ot_tensor *keep(ot_tensor *t)
{
    CHECK(t != NULL);
    if (t && F.n < 256) F.ts[F.n++] = t;
    return t;
}

/* A tensor of dtype dt and shape s holding the n values v (row-major). */
static ot_tensor *mk(ot_dtype dt, ot_shape s, const double *v, size_t n)
{
    ot_tensor *t = keep(ot_empty(F.be, s, dt));
    if (!t) return NULL;
    CHECK_INT(ot_tensor_numel(t), n);
    for (size_t i = 0; i < n && i < (size_t)ot_tensor_numel(t); i++) {
        int64_t idx[OT_MAX_DIMS], rest = (int64_t)i;
        for (int d = s.ndim - 1; d >= 0; d--) {
            idx[d] = rest % s.dims[d];
            rest /= s.dims[d];
        }
        char *p = ot_tensor_data(t);
        for (int d = 0; d < s.ndim; d++)
            p += idx[d] * ot_tensor_stride(t, d) * (int64_t)ot_dtype_size(dt);
        ot__store(p, dt, v[i]);
    }
    return t;
}
/* A zero-filled tensor (for zero-size shapes, which ARR cannot spell). */
#define ZEROS(dt, shape) keep(ot_zeros(F.be, (shape), (dt)))
#define ARR(dt, shape, ...)                                                   \
    mk((dt), (shape), (const double[]){__VA_ARGS__},                         \
       sizeof((const double[]){__VA_ARGS__}) / sizeof(double))

/* The values of t (any view), row-major, as doubles; the caller frees. */
static double *vals(const ot_tensor *t)
{
    int64_t n = ot_tensor_numel(t);
    size_t isz = ot_dtype_size(ot_tensor_dtype(t));
    char *host = malloc((size_t)(n ? n : 1) * isz);
    double *out = malloc((size_t)(n ? n : 1) * sizeof *out);
    CHECK_INT(ot_get(t, host), 0);
    for (int64_t i = 0; i < n; i++)
        out[i] = ot__load(host + i * (int64_t)isz, ot_tensor_dtype(t));
    free(host);
    return out;
}

/* Compares every value of t with want[0..n); NaN matches NaN. */
static void check_vals(const char *file, int line, const ot_tensor *t, double tol,
                       const double *want, size_t n)
{
    if (!t) {
        test__fail(file, line, "no tensor: %s", ot_errmsg());
        return;
    }
    if ((size_t)ot_tensor_numel(t) != n) {
        test__fail(file, line, "numel %lld, expected %zu", (long long)ot_tensor_numel(t), n);
        return;
    }
    double *got = vals(t);
    for (size_t i = 0; i < n; i++)
        if (!test__close(got[i], want[i], tol))
            test__fail(file, line, "[%zu] == %.17g, expected %.17g", i, got[i], want[i]);
    free(got);
}
#define CHECK_VALS(t, tol, ...)                                               \
    check_vals(__FILE__, __LINE__, (t), (tol), (const double[]){__VA_ARGS__},  \
               sizeof((const double[]){__VA_ARGS__}) / sizeof(double))

/* Assigns tree into a new tensor of its shape and dtype dt (0: the tree's). */
static ot_tensor *run_at(const char *file, int line, ot_node *tree, ot_dtype dt)
{
    if (!tree) {
        test__fail(file, line, "tree is NULL: %s", ot_errmsg());
        return NULL;
    }
    ot_tensor *out = keep(ot_full(F.be, ot_node_shape(tree), dt ? dt : ot_node_dtype(tree), -7));
    int rc = ot_assign(out, tree);
    if (rc != 0) test__fail(file, line, "ot_assign: %d %s", rc, ot_errmsg());
    return out;
}
#define RUN(tree) run_at(__FILE__, __LINE__, (tree), OT_DTYPE_DEFAULT)
#define RUN_AS(tree, dt) run_at(__FILE__, __LINE__, (tree), (dt))

static void check_shape(const char *file, int line, const ot_tensor *t, ot_shape want)
{
    ot_shape got = ot_tensor_shape(t);
    bool same = got.ndim == want.ndim;
    for (int d = 0; same && d < got.ndim; d++) same = got.dims[d] == want.dims[d];
    if (!same) test__fail(file, line, "shape mismatch (ndim %d vs %d)", got.ndim, want.ndim);
}
#define CHECK_SHAPE(t, s) check_shape(__FILE__, __LINE__, (t), (s))

/* ---- unary ops ----------------------------------------------------------- */

/* Builds every unary op over x and checks its values at the inputs
 * -2, -0.5, 0, 0.5, 1, 4 (values from NumPy / CPython's math module). */
static void check_unary_table(ot_dtype dt, double tol)
{
    ot_tensor *x = ARR(dt, OT_SHAPE(6), -2, -0.5, 0, 0.5, 1, 4);
    const double inf = INFINITY, nan = NAN;
    struct { const char *name; ot_node *n; double want[6]; } c[] = {
        {"finite", ot_finite(x), {1, 1, 1, 1, 1, 1}},
        {"neg", ot_neg(x), {2, 0.5, -0.0, -0.5, -1, -4}},
        {"abs", ot_abs(x), {2, 0.5, 0, 0.5, 1, 4}},
        {"sgn", ot_sgn(x), {-1, -1, 0, 1, 1, 1}},
        {"sqrt", ot_sqrt(x), {nan, nan, 0, 0.7071067811865476, 1, 2}},
        {"sqr", ot_sqr(x), {4, 0.25, 0, 0.25, 1, 16}},
        {"exp", ot_exp(x), {0.1353352832366127, 0.6065306597126334, 1.0,
                            1.6487212707001282, 2.718281828459045, 54.598150033144236}},
        {"exp2", ot_exp2(x), {0.25, 0.7071067811865476, 1, 1.4142135623730951, 2, 16}},
        {"log", ot_log(x), {nan, nan, -inf, -0.6931471805599453, 0, 1.3862943611198906}},
        {"log2", ot_log2(x), {nan, nan, -inf, -1, 0, 2}},
        {"safelog", ot_safelog(x), {-50, -50, -50, -0.6931471805599453, 0, 1.3862943611198906}},
        {"sig", ot_sig(x), {0.11920292202211755, 0.3775406687981454, 0.5,
                            0.6224593312018546, 0.7310585786300049, 0.9820137900379085}},
        {"sig2", ot_sig2(x), {0.2, 0.4142135623730951, 0.5, 0.585786437626905,
                              0.6666666666666666, 0.9411764705882353}},
        {"tanh", ot_tanh(x), {-0.9640275800758169, -0.46211715726000974, 0.0,
                              0.46211715726000974, 0.7615941559557649, 0.999329299739067}},
        {"tanh2", ot_tanh2(x), {-15.0 / 17, -1.0 / 3, 0, 1.0 / 3, 0.6, 255.0 / 257}},
        {"rint", ot_rint(x), {-2, -0.0, 0, 0, 1, 4}},
        {"rsqrt", ot_rsqrt(x), {nan, nan, inf, 1.4142135623730951, 1, 0.5}},
        {"recip", ot_recip(x), {-0.5, -2, inf, 2, 1, 0.25}},
        {"relu", ot_relu(x), {0, 0, 0, 0.5, 1, 4}},
        {"sin", ot_sin(x), {-0.9092974268256817, -0.479425538604203, 0.0,
                            0.479425538604203, 0.8414709848078965, -0.7568024953079282}},
        {"cos", ot_cos(x), {-0.4161468365471424, 0.8775825618903728, 1.0,
                            0.8775825618903728, 0.5403023058681398, -0.6536436208636119}},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ot_tensor *out = RUN(c[i].n);
        if (!out) continue;
        CHECK_INT(ot_tensor_dtype(out), dt);
        double *got = vals(out);
        for (int k = 0; k < 6; k++)
            if (!test__close(got[k], c[i].want[k], tol))
                test__fail(__FILE__, __LINE__, "%s(x)[%d] == %.17g, expected %.17g",
                           c[i].name, k, got[k], c[i].want[k]);
        free(got);
    }
}

TEST(ref_unary_f64)
{
    fx_begin(NULL);
    check_unary_table(OT_F64, 1e-15);
    fx_end();
}

TEST(ref_unary_f32)
{
    fx_begin(NULL);
    check_unary_table(OT_F32, 1e-7);
    fx_end();
}

TEST(ref_unary_special_values)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(5), INFINITY, -INFINITY, NAN, -0.0, 1e-320);
    CHECK_VALS(RUN(ot_finite(x)), 0, 0, 0, 0, 1, 1);
    CHECK_VALS(RUN(ot_sgn(x)), 0, 1, -1, NAN, 0, 1);
    double *s = vals(RUN(ot_sgn(x)));
    CHECK(!signbit(s[3]));                /* sgn(-0.0) is +0.0, as np.sign */
    free(s);
    CHECK_VALS(RUN(ot_safelog(x)), 1e-15, INFINITY, -50, NAN, -50, -50);
    CHECK_VALS(RUN(ot_relu(x)), 0, INFINITY, 0, NAN, 0, 1e-320);
    CHECK_VALS(RUN(ot_sig(x)), 0, 1, 0, NAN, 0.5, 0.5);
    CHECK_VALS(RUN(ot_tanh2(x)), 1e-15, 1, -1, NAN, 0, 0);
    /* tanh2 of a large argument is 1, never inf/inf = NaN. */
    ot_tensor *big = ARR(OT_F64, OT_SHAPE(2), 2000, -2000);
    CHECK_VALS(RUN(ot_tanh2(big)), 0, 1, -1);
    CHECK_VALS(RUN(ot_sig2(big)), 0, 1, 0);
    /* Round half to even. */
    ot_tensor *h = ARR(OT_F64, OT_SHAPE(5), 0.5, 1.5, 2.5, -1.5, -2.5);
    CHECK_VALS(RUN(ot_rint(h)), 0, 0, 2, 2, -2, -2);
    fx_end();
}

TEST(ref_unary_i32)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_I32, OT_SHAPE(5), -3, 0, 7, 2147483647, -2147483648.0);
    CHECK_VALS(RUN(ot_neg(x)), 0, 3, 0, -7, -2147483647, -2147483648.0);
    CHECK_VALS(RUN(ot_abs(x)), 0, 3, 0, 7, 2147483647, -2147483648.0);
    CHECK_VALS(RUN(ot_sqr(x)), 0, 9, 0, 49, 1, 0);
    CHECK_VALS(RUN(ot_sgn(x)), 0, -1, 0, 1, 1, -1);
    CHECK_VALS(RUN(ot_relu(x)), 0, 0, 0, 7, 2147483647, 0);
    CHECK_VALS(RUN(ot_finite(x)), 0, 1, 1, 1, 1, 1);
    CHECK_VALS(RUN(ot_rint(x)), 0, -3, 0, 7, 2147483647, -2147483648.0);
    ot_tensor *o = RUN(ot_neg(x));
    CHECK(o && ot_tensor_dtype(o) == OT_I32);
    /* Float-only ops promote an integer operand to f64. */
    ot_tensor *sq = RUN(ot_sqrt(ARR(OT_I32, OT_SHAPE(2), 4, 9)));
    CHECK(sq && ot_tensor_dtype(sq) == OT_F64);
    CHECK_VALS(sq, 0, 2, 3);
    fx_end();
}

/* ---- binary ops ---------------------------------------------------------- */

static void check_binary_table(ot_dtype dt, double tol)
{
    ot_tensor *a = ARR(dt, OT_SHAPE(4), 1, -2, 3, 0.5);
    ot_tensor *b = ARR(dt, OT_SHAPE(4), 2, -2, -1.5, 4);
    struct { const char *name; ot_node *n; double want[4]; } c[] = {
        {"add", ot_add(a, b), {3, -4, 1.5, 4.5}},
        {"sub", ot_sub(a, b), {-1, 0, 4.5, -3.5}},
        {"mul", ot_mul(a, b), {2, 4, -4.5, 2}},
        {"div", ot_div(a, b), {0.5, 1, -2, 0.125}},
        {"pow", ot_pow(a, b), {1, 0.25, 0.19245008972987526, 0.0625}},
        {"eq", ot_eq(a, b), {0, 1, 0, 0}},
        {"ne", ot_ne(a, b), {1, 0, 1, 1}},
        {"lt", ot_lt(a, b), {1, 0, 0, 1}},
        {"le", ot_le(a, b), {1, 1, 0, 1}},
        {"gt", ot_gt(a, b), {0, 0, 1, 0}},
        {"ge", ot_ge(a, b), {0, 1, 1, 0}},
        {"minimum", ot_minimum(a, b), {1, -2, -1.5, 0.5}},
        {"maximum", ot_maximum(a, b), {2, -2, 3, 4}},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        ot_tensor *out = RUN(c[i].n);
        if (!out) continue;
        CHECK_INT(ot_tensor_dtype(out), dt);
        double *got = vals(out);
        for (int k = 0; k < 4; k++)
            if (!test__close(got[k], c[i].want[k], tol))
                test__fail(__FILE__, __LINE__, "%s[%d] == %.17g, expected %.17g",
                           c[i].name, k, got[k], c[i].want[k]);
        free(got);
    }
}

TEST(ref_binary_f64)
{
    fx_begin(NULL);
    check_binary_table(OT_F64, 1e-15);
    fx_end();
}

TEST(ref_binary_f32)
{
    fx_begin(NULL);
    check_binary_table(OT_F32, 1e-7);
    fx_end();
}

TEST(ref_binary_nan)
{
    fx_begin(NULL);
    ot_tensor *a = ARR(OT_F64, OT_SHAPE(3), NAN, 1, NAN);
    ot_tensor *b = ARR(OT_F64, OT_SHAPE(3), 1, NAN, NAN);
    CHECK_VALS(RUN(ot_eq(a, b)), 0, 0, 0, 0);
    CHECK_VALS(RUN(ot_ne(a, b)), 0, 1, 1, 1);
    CHECK_VALS(RUN(ot_lt(a, b)), 0, 0, 0, 0);
    CHECK_VALS(RUN(ot_ge(a, b)), 0, 0, 0, 0);
    CHECK_VALS(RUN(ot_minimum(a, b)), 0, NAN, NAN, NAN);
    CHECK_VALS(RUN(ot_maximum(a, b)), 0, NAN, NAN, NAN);
    CHECK_VALS(RUN(ot_add(a, b)), 0, NAN, NAN, NAN);
    fx_end();
}

TEST(ref_binary_i32_wrap)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_I32, OT_SHAPE(5), -3, 0, 7, 2147483647, -2147483648.0);
    CHECK_VALS(RUN(ot_add(x, 1)), 0, -2, 1, 8, -2147483648.0, -2147483647);
    CHECK_VALS(RUN(ot_sub(x, 1)), 0, -4, -1, 6, 2147483646, 2147483647);
    CHECK_VALS(RUN(ot_mul(x, 2)), 0, -6, 0, 14, -2, 0);
    CHECK_VALS(RUN(ot_mul(x, x)), 0, 9, 0, 49, 1, 0);
    CHECK_VALS(RUN(ot_minimum(x, 0)), 0, -3, 0, 0, 0, -2147483648.0);
    CHECK_VALS(RUN(ot_gt(x, 0)), 0, 0, 0, 1, 1, 0);
    ot_tensor *o = RUN(ot_add(x, 1));
    CHECK(o && ot_tensor_dtype(o) == OT_I32);
    /* Integer division promotes to f64, as NumPy's true division does. */
    ot_tensor *d = RUN(ot_div(ARR(OT_I32, OT_SHAPE(2), 7, -7), 2));
    CHECK(d && ot_tensor_dtype(d) == OT_F64);
    CHECK_VALS(d, 0, 3.5, -3.5);
    fx_end();
}

TEST(ref_pow_i32)
{
    fx_begin(NULL);
    ot_tensor *b = ARR(OT_I32, OT_SHAPE(9), 2, 3, -2, -1, -1, 1, 0, 5, 3);
    ot_tensor *e = ARR(OT_I32, OT_SHAPE(9), 10, -1, 3, -3, -4, -5, -2, 0, 20);
    /* Negative exponents give 1 for base 1, +-1 for base -1, else 0; 3**20
     * wraps modulo 2^32 as in NumPy. */
    CHECK_VALS(RUN(ot_pow(b, e)), 0, 1024, 0, -8, -1, 1, 1, 0, 1, -808182895);
    CHECK_VALS(RUN(ot_pow(b, 2)), 0, 4, 9, 4, 1, 1, 1, 0, 25, 9);
    CHECK_VALS(RUN(ot_pow(ARR(OT_I32, OT_SHAPE(2), 2, -2), 31)), 0,
               -2147483648.0, -2147483648.0);
    CHECK_VALS(RUN(ot_pow(ARR(OT_I32, OT_SHAPE(1), 2), 32)), 0, 0);
    fx_end();
}

TEST(ref_broadcast)
{
    fx_begin(NULL);
    ot_tensor *m = ARR(OT_F64, OT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    ot_tensor *r = ARR(OT_F64, OT_SHAPE(3), 10, 20, 30);
    ot_tensor *c = ARR(OT_F64, OT_SHAPE(2, 1), 100, 200);
    ot_tensor *s = ARR(OT_F64, OT_SHAPE(), 0.5);
    CHECK_VALS(RUN(ot_add(m, r)), 0, 11, 22, 33, 14, 25, 36);
    CHECK_VALS(RUN(ot_add(r, m)), 0, 11, 22, 33, 14, 25, 36);
    CHECK_VALS(RUN(ot_sub(m, c)), 0, -99, -98, -97, -196, -195, -194);
    ot_tensor *outer = RUN(ot_mul(c, r));                 /* (2,1) x (3,) */
    CHECK_SHAPE(outer, OT_SHAPE(2, 3));
    CHECK_VALS(outer, 0, 1000, 2000, 3000, 2000, 4000, 6000);
    CHECK_VALS(RUN(ot_mul(m, s)), 0, 0.5, 1, 1.5, 2, 2.5, 3);
    CHECK_VALS(RUN(ot_div(1.0, m)), 1e-15, 1, 0.5, 1.0 / 3, 0.25, 0.2, 1.0 / 6);
    /* Zero-size operands give zero-size results. */
    ot_tensor *z = ZEROS(OT_F64, OT_SHAPE(0, 3));
    ot_tensor *zr = RUN(ot_add(z, r));
    CHECK_SHAPE(zr, OT_SHAPE(0, 3));
    fx_end();
}

/* A 4-D broadcast written into a transposed (all strides permuted) output:
 * r[i][j][k][l] = a[i][0][k][0] + b[j][0][l] = (100i + 10k) + (j + 0.5l). */
TEST(ref_broadcast_4d_into_view)
{
    fx_begin(NULL);
    ot_tensor *a = keep(ot_empty(F.be, OT_SHAPE(2, 1, 3, 1), OT_F64));
    ot_tensor *b = keep(ot_empty(F.be, OT_SHAPE(4, 1, 5), OT_F32));
    double av[6], bv32[20];
    float bv[20];
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 3; k++) av[i * 3 + k] = 100 * i + 10 * k;
    for (int j = 0; j < 4; j++)
        for (int l = 0; l < 5; l++) bv[j * 5 + l] = (float)(bv32[j * 5 + l] = j + 0.5 * l);
    CHECK_INT(ot_set(a, av), 0);
    CHECK_INT(ot_set(b, bv), 0);
    ot_tensor *base = keep(ot_zeros(F.be, OT_SHAPE(5, 3, 4, 2), OT_F64));
    ot_tensor *view = keep(ot_transpose(base, NULL));          /* (2, 4, 3, 5) */
    CHECK_INT(ot_assign(view, ot_add(a, b)), 0);
    double *got = vals(base);                                  /* [l][k][j][i] */
    int bad = 0;
    for (int l = 0; l < 5; l++)
        for (int k = 0; k < 3; k++)
            for (int j = 0; j < 4; j++)
                for (int i = 0; i < 2; i++)
                    bad += got[((l * 3 + k) * 4 + j) * 2 + i] != av[i * 3 + k] + bv32[j * 5 + l];
    CHECK_INT(bad, 0);
    free(got);
    /* 0-d tensors in and out. */
    ot_tensor *s = ARR(OT_F64, OT_SHAPE(), 3);
    ot_tensor *o = keep(ot_empty(F.be, OT_SHAPE(), OT_F32));
    CHECK_INT(ot_assign(o, ot_mul(s, s)), 0);
    CHECK_VALS(o, 0, 9);
    fx_end();
}

/* ---- reductions ---------------------------------------------------------- */

TEST(ref_reduce_axes)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2, 3), 1, 5, 3, 4, 2, 6);
    CHECK_VALS(RUN(ot_sum(x, .axis = 0)), 0, 5, 7, 9);
    CHECK_VALS(RUN(ot_sum(x, .axis = 1)), 0, 9, 12);
    CHECK_VALS(RUN(ot_sum(x)), 0, 21);
    CHECK_VALS(RUN(ot_max(x, .axis = 0)), 0, 4, 5, 6);
    CHECK_VALS(RUN(ot_max(x, .axis = 1)), 0, 5, 6);
    CHECK_VALS(RUN(ot_max(x)), 0, 6);
    CHECK_VALS(RUN(ot_min(x, .axis = 0)), 0, 1, 2, 3);
    CHECK_VALS(RUN(ot_min(x, .axis = -1)), 0, 1, 2);
    CHECK_VALS(RUN(ot_min(x)), 0, 1);
    CHECK_VALS(RUN(ot_mean(x, .axis = 0)), 0, 2.5, 3.5, 4.5);
    CHECK_VALS(RUN(ot_mean(x, .axis = 1)), 0, 3, 4);
    CHECK_VALS(RUN(ot_mean(x)), 0, 3.5);
    CHECK_VALS(RUN(ot_argmax(x, .axis = 0)), 0, 1, 0, 1);
    CHECK_VALS(RUN(ot_argmax(x, .axis = 1)), 0, 1, 2);
    CHECK_VALS(RUN(ot_argmax(x)), 0, 5);
    CHECK_VALS(RUN(ot_argmin(x, .axis = 0)), 0, 0, 1, 0);
    CHECK_VALS(RUN(ot_argmin(x, .axis = 1)), 0, 0, 1);
    CHECK_VALS(RUN(ot_argmin(x)), 0, 0);
    ot_tensor *am = RUN(ot_argmax(x, .axis = 1));
    CHECK(am && ot_tensor_dtype(am) == OT_I32);
    fx_end();
}

TEST(ref_reduce_keepdims)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F32, OT_SHAPE(2, 3), 1, 5, 3, 4, 2, 6);
    ot_tensor *k1 = RUN(ot_sum(x, .axis = -1, .keepdims = true));
    CHECK_SHAPE(k1, OT_SHAPE(2, 1));
    CHECK_VALS(k1, 0, 9, 12);
    ot_tensor *k0 = RUN(ot_max(x, .axis = 0, .keepdims = true));
    CHECK_SHAPE(k0, OT_SHAPE(1, 3));
    CHECK_VALS(k0, 0, 4, 5, 6);
    ot_tensor *ka = RUN(ot_mean(x, .keepdims = true));
    CHECK_SHAPE(ka, OT_SHAPE(1, 1));
    CHECK_VALS(ka, 0, 3.5);
    ot_tensor *ki = RUN(ot_argmin(x, .axis = 1, .keepdims = true));
    CHECK_SHAPE(ki, OT_SHAPE(2, 1));
    CHECK_VALS(ki, 0, 0, 1);
    /* Keepdims results broadcast back against the operand. */
    CHECK_VALS(RUN(ot_sub(x, ot_max(x, .axis = 1, .keepdims = true))), 0,
               -4, 0, -2, -2, -4, 0);
    fx_end();
}

TEST(ref_reduce_middle_axis)
{
    fx_begin(NULL);
    /* Shape (2,3,2): reducing axis 1 has both an outer and an inner part. */
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2, 3, 2), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    ot_tensor *s = RUN(ot_sum(x, .axis = 1));
    CHECK_SHAPE(s, OT_SHAPE(2, 2));
    CHECK_VALS(s, 0, 6, 9, 24, 27);
    CHECK_VALS(RUN(ot_argmax(x, .axis = 1)), 0, 2, 2, 2, 2);
    CHECK_VALS(RUN(ot_min(x, .axis = 2)), 0, 0, 2, 4, 6, 8, 10);
    CHECK_VALS(RUN(ot_mean(x, .axis = 0, .keepdims = true)), 0, 3, 4, 5, 6, 7, 8);
    fx_end();
}

TEST(ref_reduce_ties_and_nan)
{
    fx_begin(NULL);
    ot_tensor *t = ARR(OT_F64, OT_SHAPE(5), 3, 1, 3, 1, 2);
    CHECK_VALS(RUN(ot_argmax(t)), 0, 0);
    CHECK_VALS(RUN(ot_argmin(t)), 0, 1);
    ot_tensor *n = ARR(OT_F64, OT_SHAPE(5), 1, 7, NAN, 9, NAN);
    CHECK_VALS(RUN(ot_argmax(n)), 0, 2);
    CHECK_VALS(RUN(ot_argmin(n)), 0, 2);
    CHECK_VALS(RUN(ot_max(n)), 0, NAN);
    CHECK_VALS(RUN(ot_min(n)), 0, NAN);
    CHECK_VALS(RUN(ot_sum(n)), 0, NAN);
    ot_tensor *first = ARR(OT_F64, OT_SHAPE(3), NAN, 5, 1);
    CHECK_VALS(RUN(ot_argmax(first)), 0, 0);
    CHECK_VALS(RUN(ot_max(first)), 0, NAN);
    ot_tensor *inf = ARR(OT_F64, OT_SHAPE(3), 1, INFINITY, -INFINITY);
    CHECK_VALS(RUN(ot_max(inf)), 0, INFINITY);
    CHECK_VALS(RUN(ot_argmin(inf)), 0, 2);
    CHECK_VALS(RUN(ot_sum(inf)), 0, NAN);
    CHECK_VALS(RUN(ot_sum(ARR(OT_F64, OT_SHAPE(2), INFINITY, 1))), 0, INFINITY);
    CHECK_VALS(RUN(ot_sum(ARR(OT_F64, OT_SHAPE(2), 1e308, 1e308))), 0, INFINITY);
    fx_end();
}

TEST(ref_sum_compensated)
{
    fx_begin(NULL);
    /* Plain left-to-right summation loses the small terms entirely. */
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(4), 1, 1e100, 1, -1e100);
    CHECK_VALS(RUN(ot_sum(x)), 0, 2);
    ot_tensor *y = ARR(OT_F64, OT_SHAPE(2, 3), 1e16, 1, -1e16, 0.1, 0.2, 0.3);
    CHECK_VALS(RUN(ot_sum(y, .axis = 1)), 1e-16, 1, 0.6);
    CHECK_VALS(RUN(ot_mean(x)), 0, 0.5);
    fx_end();
}

TEST(ref_reduce_empty_and_i32)
{
    fx_begin(NULL);
    ot_tensor *e = ZEROS(OT_F64, OT_SHAPE(0));
    CHECK_VALS(RUN(ot_sum(e)), 0, 0);
    CHECK_VALS(RUN(ot_mean(e)), 0, NAN);
    ot_tensor *e2 = ZEROS(OT_F64, OT_SHAPE(2, 0));
    CHECK_VALS(RUN(ot_sum(e2, .axis = 1)), 0, 0, 0);
    ot_tensor *s0 = RUN(ot_sum(e2, .axis = 0));
    CHECK_SHAPE(s0, OT_SHAPE(0));
    ot_tensor *i = ARR(OT_I32, OT_SHAPE(2, 2), 2147483647, 0, -5, 2);
    ot_tensor *si = RUN(ot_sum(i, .axis = 1));
    CHECK(si && ot_tensor_dtype(si) == OT_I32);
    CHECK_VALS(si, 0, 2147483647, -3);
    /* a sum past int32's range is an error, not NumPy's wrapped value */
    ot_tensor *over = ARR(OT_I32, OT_SHAPE(2, 2), 2147483647, 1, -5, 2);
    CHECK_INT(ot_assign(si, ot_sum(over, .axis = 1)), OT_EOVERFLOW);
    CHECK_VALS(si, 0, 2147483647, -3);   /* ref writes nothing then */
    CHECK_VALS(RUN(ot_max(i, .axis = 0)), 0, 2147483647, 2);
    CHECK_VALS(RUN(ot_argmin(i)), 0, 2);
    CHECK_VALS(RUN_AS(ot_mean(i), OT_F64), 1e-15, 2147483644.0 / 4);
    fx_end();
}

/* ---- dot ----------------------------------------------------------------- */

TEST(ref_dot_ranks)
{
    fx_begin(NULL);
    ot_tensor *v3 = ARR(OT_F64, OT_SHAPE(3), 1, 2, 3);
    ot_tensor *w3 = ARR(OT_F64, OT_SHAPE(3), 4, 5, 6);
    ot_tensor *m32 = ARR(OT_F64, OT_SHAPE(3, 2), 1, 2, 3, 4, 5, 6);
    ot_tensor *m23 = ARR(OT_F64, OT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    ot_tensor *v2 = ARR(OT_F64, OT_SHAPE(2), 1, -1);
    ot_tensor *b32 = ARR(OT_F64, OT_SHAPE(3, 2), 7, 8, 9, 10, 11, 12);
    ot_tensor *s = RUN(ot_dot(v3, w3));
    CHECK_SHAPE(s, OT_SHAPE());
    CHECK_VALS(s, 0, 32);
    ot_tensor *mv = RUN(ot_dot(m32, v2));
    CHECK_SHAPE(mv, OT_SHAPE(3));
    CHECK_VALS(mv, 0, -1, -1, -1);
    ot_tensor *vm = RUN(ot_dot(v3, m32));
    CHECK_SHAPE(vm, OT_SHAPE(2));
    CHECK_VALS(vm, 0, 22, 28);
    ot_tensor *mm = RUN(ot_dot(m23, b32));
    CHECK_SHAPE(mm, OT_SHAPE(2, 2));
    CHECK_VALS(mm, 0, 58, 64, 139, 154);
    /* f32 operands: exact small integers. */
    ot_tensor *f = ARR(OT_F32, OT_SHAPE(2, 2), 1, 2, 3, 4);
    CHECK_VALS(RUN(ot_dot(f, f)), 0, 7, 10, 15, 22);
    /* Operands that are expressions and transposed views. */
    CHECK_VALS(RUN(ot_dot(ot_T(m23), ot_add(v2, 1))), 0, 2, 4, 6);
    fx_end();
}

TEST(ref_dot_k0_nan)
{
    fx_begin(NULL);
    ot_tensor *a = ZEROS(OT_F64, OT_SHAPE(2, 0));
    ot_tensor *b = ZEROS(OT_F64, OT_SHAPE(0, 3));
    ot_tensor *z = RUN(ot_dot(a, b));           /* filled with -7 before */
    CHECK_SHAPE(z, OT_SHAPE(2, 3));
    CHECK_VALS(z, 0, 0, 0, 0, 0, 0, 0);
    ot_tensor *e = ZEROS(OT_F64, OT_SHAPE(0));
    CHECK_VALS(RUN(ot_dot(e, e)), 0, 0);
    ot_tensor *n = ARR(OT_F64, OT_SHAPE(2, 2), 1, NAN, 3, 4);
    ot_tensor *v = ARR(OT_F64, OT_SHAPE(2), 1, 1);
    CHECK_VALS(RUN(ot_dot(n, v)), 0, NAN, 7);
    ot_tensor *inf = ARR(OT_F64, OT_SHAPE(2), INFINITY, 1);
    CHECK_VALS(RUN(ot_dot(inf, v)), 0, INFINITY);
    /* Compensated: the 1s survive next to +-1e100. */
    ot_tensor *c = ARR(OT_F64, OT_SHAPE(4), 1, 1e100, 1, -1e100);
    ot_tensor *ones = ARR(OT_F64, OT_SHAPE(4), 1, 1, 1, 1);
    CHECK_VALS(RUN(ot_dot(c, ones)), 0, 2);
    /* Integer operands are cast first (the builder rejects an i32 dot); the
     * f64 product is exact: 2^32 + 9, no wrap. */
    ot_tensor *i = ARR(OT_I32, OT_SHAPE(2), 65536, 3);
    ot_node *fi = ot_cast(i, .dtype = OT_F64);
    CHECK_VALS(RUN(ot_dot(fi, fi)), 0, 4294967305.0);
    fx_end();
}

/* ---- transpose, cast, onehot --------------------------------------------- */

TEST(ref_transpose)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2, 3), 1, 2, 3, 4, 5, 6);
    ot_tensor *t = RUN(ot_T(ot_add(x, 0)));
    CHECK_SHAPE(t, OT_SHAPE(3, 2));
    CHECK_VALS(t, 0, 1, 4, 2, 5, 3, 6);
    ot_tensor *y = ARR(OT_F64, OT_SHAPE(2, 3, 4), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                       12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23);
    ot_tensor *p = RUN(ot_T(ot_neg(y), .perm = {2, 0, 1}));
    CHECK_SHAPE(p, OT_SHAPE(4, 2, 3));
    /* p[i][j][k] = -y[j][k][i] = -(12j + 4k + i). */
    CHECK_VALS(p, 0, -0.0, -4, -8, -12, -16, -20, -1, -5, -9, -13, -17, -21,
               -2, -6, -10, -14, -18, -22, -3, -7, -11, -15, -19, -23);
    ot_tensor *r = RUN(ot_T(y));
    CHECK_SHAPE(r, OT_SHAPE(4, 3, 2));
    double *rv = vals(r);
    CHECK_INT(rv[1], 12);          /* r[0][0][1] = y[1][0][0] */
    CHECK_INT(rv[2], 4);           /* r[0][1][0] = y[0][1][0] */
    CHECK_INT(rv[6], 1);           /* r[1][0][0] = y[0][0][1] */
    free(rv);
    fx_end();
}

TEST(ref_cast)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(6), 1.5, -1.5, NAN, 1e10, -1e10, 0.1);
    ot_tensor *i = RUN(ot_cast(x, .dtype = OT_I32));
    CHECK(i && ot_tensor_dtype(i) == OT_I32);
    CHECK_VALS(i, 0, 1, -1, 0, 2147483647, -2147483648.0, 0);
    /* Cast to f32 rounds inside the tree, even into an f64 output. */
    ot_tensor *f = RUN_AS(ot_cast(ot_cast(x, .dtype = OT_F32), .dtype = OT_F64), OT_F64);
    CHECK_VALS(f, 0, 1.5, -1.5, NAN, 1e10, -1e10, 0.10000000149011612);
    ot_tensor *d = RUN_AS(ot_sub(ot_cast(x, .dtype = OT_F32), x), OT_F64);
    double *dv = vals(d);
    CHECK(dv[5] != 0);
    free(dv);
    CHECK_VALS(RUN(ot_cast(ARR(OT_I32, OT_SHAPE(2), 7, -3), .dtype = OT_F64)), 0, 7, -3);
    /* Integer arithmetic on a cast wraps; a cast itself saturates. */
    ot_tensor *big = ARR(OT_F64, OT_SHAPE(1), 3e9);
    CHECK_VALS(RUN(ot_add(ot_cast(big, .dtype = OT_I32), 1)), 0, -2147483648.0);
    fx_end();
}

TEST(ref_f32_rounded_between_ops)
{
    fx_begin(NULL);
    /* In f32 arithmetic (1 + 1e-10) - 1 is 0, as NumPy's float32 and the cpu
     * backend give it: every f32 op rounds, even into an f64 output. */
    ot_tensor *x = ARR(OT_F32, OT_SHAPE(2), 1, 1e20);
    ot_tensor *out = RUN_AS(ot_sub(ot_add(x, 1e-10), 1.0), OT_F64);
    double *v = vals(out);
    CHECK(v[0] == 0.0);
    free(v);
    /* (1e20)^2 overflows f32: inf, not 1e40 */
    out = RUN_AS(ot_sqr(x), OT_F64);
    v = vals(out);
    CHECK(v[0] == 1.0 && isinf(v[1]));
    free(v);
    fx_end();
}

TEST(ref_onehot)
{
    fx_begin(NULL);
    ot_tensor *idx = ARR(OT_I32, OT_SHAPE(4), 0, 2, 5, -1);
    ot_tensor *h = RUN(ot_onehot(idx, .depth = 3));
    CHECK_SHAPE(h, OT_SHAPE(4, 3));
    CHECK_VALS(h, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0);
    ot_tensor *h0 = RUN(ot_onehot(idx, .depth = 3, .axis = 0));
    CHECK_SHAPE(h0, OT_SHAPE(3, 4));
    CHECK_VALS(h0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0);
    /* Non-integral float indices give a row of zeros. */
    ot_tensor *fi = ARR(OT_F64, OT_SHAPE(3), 1.0, 1.5, NAN);
    CHECK_VALS(RUN(ot_onehot(fi, .depth = 2, .dtype = OT_F64)), 0, 0, 1, 0, 0, 0, 0);
    /* A 2-D index with the new dim in the middle. */
    ot_tensor *i2 = ARR(OT_I32, OT_SHAPE(2, 2), 0, 1, 1, 0);
    ot_tensor *hm = RUN(ot_onehot(i2, .depth = 2, .axis = 1));
    CHECK_SHAPE(hm, OT_SHAPE(2, 2, 2));
    /* hm[a][k][b] = idx[a][b] == k. */
    CHECK_VALS(hm, 0, 1, 0, 0, 1, 0, 1, 1, 0);
    fx_end();
}

/* ---- rand ---------------------------------------------------------------- */

TEST(ref_rand_values)
{
    fx_begin(NULL);
    ot_tensor *a = RUN(ot_rand(OT_SHAPE(1000), .dtype = OT_F32));
    ot_tensor *b = RUN(ot_rand(OT_SHAPE(1000), .dtype = OT_F32));
    ot_tensor *c = RUN(ot_rand(OT_SHAPE(1000), .dtype = OT_F32, .seed = 1));
    ot_tensor *d = RUN(ot_rand(OT_SHAPE(1000), .dtype = OT_F64));
    double *va = vals(a), *vb = vals(b), *vc = vals(c), *vd = vals(d);
    int same_ab = 0, same_ac = 0, not_unit = 0, not_exact = 0;
    for (int i = 0; i < 1000; i++) {
        same_ab += va[i] == vb[i];
        same_ac += va[i] == vc[i];
        not_unit += !(va[i] >= 0 && va[i] < 1) + !(vd[i] >= 0 && vd[i] < 1);
        not_exact += va[i] * 0x1p24 != floor(va[i] * 0x1p24);
        not_exact += vd[i] * 0x1p53 != floor(vd[i] * 0x1p53);
    }
    CHECK_INT(same_ab, 1000);           /* reproducible */
    CHECK(same_ac < 5);                 /* another seed, another stream */
    CHECK_INT(not_unit, 0);
    CHECK_INT(not_exact, 0);
    free(va), free(vb), free(vc), free(vd);
    fx_end();
}

TEST(ref_rand_backend_seed_and_mean)
{
    fx_begin(&(ot_backend_opts){.seed = 42});
    ot_tensor *a = RUN(ot_rand(OT_SHAPE(100000), .dtype = OT_F64));
    ot_tensor *m = RUN(ot_mean(ot_rand(OT_SHAPE(100000), .dtype = OT_F64)));
    double *va = vals(a), *vm = vals(m);
    CHECK_NEAR(vm[0], 0.5, 0.005);
    /* Element i depends only on the seeds and i, not on the shape. */
    CHECK_INT(va[7] == ot__rand_uniform(42, 0, 7, OT_F64), 1);
    CHECK(va[7] != ot__rand_uniform(43, 0, 7, OT_F64));
    ot_tensor *small = RUN(ot_rand(OT_SHAPE(2, 4), .dtype = OT_F64));
    double *vs = vals(small);
    CHECK(vs[7] == va[7]);
    free(va), free(vm), free(vs);
    fx_end();
}

TEST(ref_rand_uniform_direct)
{
    /* Distinct indices, seeds and backend seeds give distinct draws; the F32
     * draw is the top 24 bits of the first word, which the F64 draw starts
     * with, so the two differ by less than 2^-23. */
    double prev = -1;
    int dup = 0;
    for (uint64_t i = 0; i < 64; i++) {
        double v = ot__rand_uniform(0, 0, i, OT_F64);
        CHECK(v >= 0 && v < 1);
        dup += v == prev;
        prev = v;
        double f = ot__rand_uniform(0, 0, i, OT_F32);
        CHECK(fabs(f - v) < 0x1p-23);
        CHECK((double)(float)f == f);
    }
    CHECK_INT(dup, 0);
    CHECK(ot__rand_uniform(0, 0, 1ull << 32, OT_F64) != ot__rand_uniform(0, 0, 0, OT_F64));
    CHECK(ot__rand_uniform(0, 1, 0, OT_F64) != ot__rand_uniform(0, 0, 0, OT_F64));
    CHECK(ot__rand_uniform(1, 0, 0, OT_F64) != ot__rand_uniform(0, 0, 0, OT_F64));
    CHECK(ot__rand_uniform(5, 9, 3, OT_F64) == ot__rand_uniform(5, 9, 3, OT_F64));
}

/* Pinned draws: the stream is part of the API (every backend, and every
 * version, must draw the same values), so any change to the key mixing or
 * to Philox shows up here. The Philox-2x32-10 core was checked against the
 * Random123 known-answer vectors when these were recorded. */
TEST(ref_rand_pinned)
{
    CHECK(ot__rand_uniform(0, 0, 0, OT_F64) == 0x1.e62c4a0a47b04p-2);
    CHECK(ot__rand_uniform(0, 0, 1, OT_F64) == 0x1.f7e9aea4cc1dp-2);
    CHECK(ot__rand_uniform(42, 7, (1ull << 32) + 5, OT_F64) == 0x1.fb96f7f84eefep-2);
    CHECK(ot__rand_uniform(0, 0, 0, OT_F32) == 0x1.e62c48p-2);
    CHECK(ot__rand_uniform(0, 0, 1, OT_F32) == 0x1.f7e9acp-2);
    CHECK(ot__rand_uniform(42, 7, (1ull << 32) + 5, OT_F32) == 0x1.fb96f4p-2);
}

/* ---- composites ---------------------------------------------------------- */

TEST(ref_softmax_logsoftmax)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2, 3), 1, 2, 3, 1000, 0, -1000);
    ot_tensor *s = RUN(ot_softmax(x, .axis = 1));
    CHECK_VALS(s, 1e-15, 0.09003057317038046, 0.24472847105479764, 0.6652409557748218,
               1, 0, 0);
    CHECK_VALS(RUN(ot_sum(ot_softmax(x, .axis = 1), .axis = 1)), 1e-15, 1, 1);
    ot_tensor *l = RUN(ot_logsoftmax(x, .axis = 1));
    CHECK_VALS(l, 1e-13, 1 - 3.4076059644443806, 2 - 3.4076059644443806,
               3 - 3.4076059644443806, 0, -1000, -2000);
    ot_tensor *lo = ARR(OT_F32, OT_SHAPE(2), -1000, -1000);
    CHECK_VALS(RUN(ot_logsoftmax(lo)), 1e-7, -0.6931471805599453, -0.6931471805599453);
    CHECK_VALS(RUN(ot_softmax(lo)), 1e-7, 0.5, 0.5);
    fx_end();
}

TEST(ref_var_std_clip)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(4), 1, 2, 3, 4);
    CHECK_VALS(RUN(ot_var(x)), 1e-15, 1.25);
    CHECK_VALS(RUN(ot_var(x, .ddof = 1)), 1e-15, 5.0 / 3);
    CHECK_VALS(RUN(ot_std(x)), 1e-15, 1.118033988749895);
    ot_tensor *m = ARR(OT_F64, OT_SHAPE(2, 2), 1, 3, 10, 20);
    CHECK_VALS(RUN(ot_var(m, .axis = 1)), 1e-15, 1, 25);
    CHECK_VALS(RUN(ot_std(m, .axis = 0)), 1e-15, 4.5, 8.5);
    ot_tensor *c = ARR(OT_F32, OT_SHAPE(4), -2, 0.5, 3, NAN);
    CHECK_VALS(RUN(ot_clip(c, 0, 1)), 0, 0, 0.5, 1, NAN);
    fx_end();
}

TEST(ref_cross_entropy_squared_l2)
{
    fx_begin(NULL);
    ot_tensor *p = ARR(OT_F64, OT_SHAPE(2, 2), 0.25, 0.75, 0.5, 0.5);
    ot_tensor *t = ARR(OT_F64, OT_SHAPE(2, 2), 0, 1, 1, 0);
    CHECK_VALS(RUN(ot_cross_entropy(p, t, .axis = 1)), 1e-15, 0.2876820724517809,
               0.6931471805599453);
    CHECK_VALS(RUN(ot_cross_entropy(p, t)), 1e-15, 0.2876820724517809 + 0.6931471805599453);
    /* safelog keeps a zero probability finite: -log(exp(-50)) = 50. */
    ot_tensor *z = ARR(OT_F64, OT_SHAPE(2), 0, 1);
    ot_tensor *zt = ARR(OT_F64, OT_SHAPE(2), 1, 0);
    CHECK_VALS(RUN(ot_cross_entropy(z, zt)), 1e-15, 50);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2, 3), 1, 2, 3, -1, 0, 2);
    CHECK_VALS(RUN(ot_squared_l2(x)), 0, 19);
    CHECK_VALS(RUN(ot_squared_l2(x, .axis = 1)), 0, 14, 5);
    ot_tensor *i = ARR(OT_I32, OT_SHAPE(3), 1, 2, 3);
    CHECK_VALS(RUN(ot_squared_l2(i)), 0, 14);
    fx_end();
}

/* ---- outputs: views, broadcasting, aliasing ------------------------------ */

TEST(ref_write_strided_views)
{
    fx_begin(NULL);
    ot_tensor *y = keep(ot_zeros(F.be, OT_SHAPE(3, 3), OT_F64));
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(3), 1, 2, 3);
    ot_tensor *col = keep(ot_slice(y, OT_ALL, OT_IDX(1)));
    CHECK_INT(ot_assign(col, ot_mul(x, 10)), 0);
    CHECK_VALS(y, 0, 0, 10, 0, 0, 20, 0, 0, 30, 0);
    /* A transposed view: y.T[i][j] = m[i][j], so y[j][i] = m[i][j]. */
    ot_tensor *yt = keep(ot_transpose(y, NULL));
    ot_tensor *m = ARR(OT_F64, OT_SHAPE(3, 3), 1, 2, 3, 4, 5, 6, 7, 8, 9);
    CHECK_INT(ot_assign(yt, ot_add(m, 0)), 0);
    CHECK_VALS(y, 0, 1, 4, 7, 2, 5, 8, 3, 6, 9);
    /* A negative step. */
    ot_tensor *v = keep(ot_zeros(F.be, OT_SHAPE(4), OT_F32));
    ot_tensor *rev = keep(ot_slice(v, OT_RANGE(OT_NONE, OT_NONE, -1)));
    CHECK_INT(ot_assign(rev, ARR(OT_F32, OT_SHAPE(4), 1, 2, 3, 4)), 0);
    CHECK_VALS(v, 0, 4, 3, 2, 1);
    /* Every other element, backwards, from a strided leaf. */
    ot_tensor *w = keep(ot_zeros(F.be, OT_SHAPE(6), OT_F64));
    ot_tensor *odd = keep(ot_slice(w, OT_RANGE(5, OT_NONE, -2)));
    ot_tensor *src = keep(ot_slice(m, OT_IDX(1)));
    CHECK_INT(ot_assign(odd, ot_neg(src)), 0);
    CHECK_VALS(w, 0, 0, -6, 0, -5, 0, -4);
    fx_end();
}

TEST(ref_read_strided_leaves)
{
    fx_begin(NULL);
    ot_tensor *m = ARR(OT_F64, OT_SHAPE(3, 4), 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11);
    ot_tensor *c = keep(ot_slice(m, OT_ALL, OT_IDX(2)));
    CHECK_VALS(RUN(ot_add(c, 0)), 0, 2, 6, 10);
    ot_tensor *r = keep(ot_slice(m, OT_RANGE(OT_NONE, OT_NONE, -1), OT_RANGE(1, 4, 2)));
    CHECK_VALS(RUN(ot_mul(r, 1)), 0, 9, 11, 5, 7, 1, 3);
    ot_tensor *t = keep(ot_transpose(m, NULL));
    CHECK_VALS(RUN(ot_sum(t, .axis = 1)), 0, 12, 15, 18, 21);
    CHECK_VALS(RUN(ot_dot(t, ARR(OT_F64, OT_SHAPE(3), 1, 0, -1))), 0, -8, -8, -8, -8);
    fx_end();
}

TEST(ref_broadcast_into_output)
{
    fx_begin(NULL);
    ot_tensor *y = keep(ot_empty(F.be, OT_SHAPE(2, 3), OT_F64));
    CHECK_INT(ot_assign(y, ARR(OT_F64, OT_SHAPE(3), 1, 2, 3)), 0);
    CHECK_VALS(y, 0, 1, 2, 3, 1, 2, 3);
    CHECK_INT(ot_assign(y, 2.5), 0);
    CHECK_VALS(y, 0, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5);
    CHECK_INT(ot_assign(y, ot_sum(ARR(OT_F64, OT_SHAPE(2, 1), 1, 2), .axis = 1,
                                  .keepdims = true)), 0);
    CHECK_VALS(y, 0, 1, 1, 1, 2, 2, 2);
    /* Rounding happens only in the store: f64 tree into f32 and i32 outputs. */
    ot_tensor *f = keep(ot_empty(F.be, OT_SHAPE(1), OT_F32));
    CHECK_INT(ot_assign(f, ot_div(ARR(OT_F64, OT_SHAPE(1), 1), 3)), 0);
    CHECK_VALS(f, 0, (double)(1.0f / 3.0f));
    ot_tensor *i = keep(ot_empty(F.be, OT_SHAPE(2), OT_I32));
    CHECK_INT(ot_assign(i, ot_add(ARR(OT_I32, OT_SHAPE(2), 1, 2), 3)), 0);
    CHECK_VALS(i, 0, 4, 5);
    fx_end();
}

TEST(ref_inplace_aliasing)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(3), 1, 2, 3);
    CHECK_INT(ot_assign(x, ot_sub(x, 1)), 0);
    CHECK_VALS(x, 0, 0, 1, 2);
    ot_tensor *m = ARR(OT_F64, OT_SHAPE(2, 2), 1, 2, 3, 4);
    CHECK_INT(ot_assign(m, ot_T(m)), 0);
    CHECK_VALS(m, 0, 1, 3, 2, 4);
    /* A column written from a sum over the rows it is part of. */
    ot_tensor *a = ARR(OT_F64, OT_SHAPE(3, 3), 1, 2, 3, 4, 5, 6, 7, 8, 9);
    ot_tensor *col = keep(ot_slice(a, OT_ALL, OT_IDX(0)));
    CHECK_INT(ot_assign(col, ot_sum(a, .axis = 1)), 0);
    CHECK_VALS(a, 0, 6, 2, 3, 15, 5, 6, 24, 8, 9);
    /* A reversed view of itself. */
    ot_tensor *v = ARR(OT_F32, OT_SHAPE(5), 1, 2, 3, 4, 5);
    ot_tensor *rv = keep(ot_slice(v, OT_RANGE(OT_NONE, OT_NONE, -1)));
    CHECK_INT(ot_assign(v, ot_add(rv, 0)), 0);
    CHECK_VALS(v, 0, 5, 4, 3, 2, 1);
    /* The transposed view as output, reading the whole matrix. */
    ot_tensor *s = ARR(OT_F64, OT_SHAPE(2, 2), 1, 2, 3, 4);
    ot_tensor *st = keep(ot_transpose(s, NULL));
    CHECK_INT(ot_assign(st, ot_mul(s, 10)), 0);
    CHECK_VALS(s, 0, 10, 30, 20, 40);
    fx_end();
}

/* ---- assign_many, eval, stats -------------------------------------------- */

TEST(ref_assign_many_shared)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(3), 0, 1, 2);
    ot_tensor *o1 = keep(ot_empty(F.be, OT_SHAPE(3), OT_F64));
    ot_tensor *o2 = keep(ot_empty(F.be, OT_SHAPE(3), OT_F64));
    ot_node *e = ot_exp(x);
    ot_stats before, after;
    CHECK_INT(ot_stats(F.be, &before), 0);
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){o1, o2},
                             (ot_node *[]){ot_add(e, 1.0), ot_mul(e, 2.0)}), 0);
    CHECK_INT(ot_stats(F.be, &after), 0);
    CHECK_VALS(o1, 1e-15, 2, 3.718281828459045, 8.38905609893065);
    CHECK_VALS(o2, 1e-15, 2, 5.43656365691809, 14.7781121978613);
    CHECK_INT(after.assigns - before.assigns, 1);
    CHECK_INT(after.nodes - before.nodes, 3);        /* exp once, add, mul */
    CHECK_INT(after.kernels - before.kernels, 3);
    CHECK_INT(after.bytes_moved - before.bytes_moved, 24 + 2 * 24);
    /* Every tree is evaluated before any output is written: a swap. */
    ot_tensor *a = ARR(OT_F64, OT_SHAPE(2), 1, 2);
    ot_tensor *b = ARR(OT_F64, OT_SHAPE(2), 3, 4);
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){a, b}, (ot_node *[]){ot_tensor_node(b),
                                                                   ot_tensor_node(a)}), 0);
    CHECK_VALS(a, 0, 3, 4);
    CHECK_VALS(b, 0, 1, 2);
    /* One tree written to two outputs, and a root that is also an operand. */
    ot_tensor *p = keep(ot_empty(F.be, OT_SHAPE(2), OT_F32));
    ot_tensor *q = keep(ot_empty(F.be, OT_SHAPE(2), OT_F64));
    ot_node *s = ot_sqr(a);
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){p, q}, (ot_node *[]){s, ot_add(s, s)}), 0);
    CHECK_VALS(p, 0, 9, 16);
    CHECK_VALS(q, 0, 18, 32);
    fx_end();
}

TEST(ref_eval)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F32, OT_SHAPE(2, 2), 1, 2, 3, 4);
    ot_tensor *e = keep(ot_eval(ot_sum(ot_mul(x, x), .axis = 0)));
    CHECK(e && ot_tensor_dtype(e) == OT_F32);
    CHECK_SHAPE(e, OT_SHAPE(2));
    CHECK_VALS(e, 0, 10, 20);
    ot_tensor *s = keep(ot_eval(ot_dot(x, ot_T(x))));
    CHECK_VALS(s, 0, 5, 11, 11, 25);
    fx_end();
}

TEST(ref_stats_counters)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(3), 1, 2, 3);
    ot_tensor *y = keep(ot_empty(F.be, OT_SHAPE(3), OT_F32));
    ot_stats s0, s1, s2;
    CHECK_INT(ot_stats(F.be, &s0), 0);
    CHECK_INT(ot_assign(y, ot_add(x, 1)), 0);
    CHECK_INT(ot_stats(F.be, &s1), 0);
    CHECK_INT(s1.assigns - s0.assigns, 1);
    CHECK_INT(s1.nodes - s0.nodes, 1);
    CHECK_INT(s1.kernels - s0.kernels, 1);
    CHECK_INT(s1.bytes_moved - s0.bytes_moved, 3 * 8 + 3 * 4);
    /* A plain copy evaluates no op. */
    CHECK_INT(ot_assign(y, x), 0);
    CHECK_INT(ot_stats(F.be, &s2), 0);
    CHECK_INT(s2.assigns - s1.assigns, 1);
    CHECK_INT(s2.nodes - s1.nodes, 0);
    CHECK_VALS(y, 0, 1, 2, 3);
    fx_end();
}

/* ---- deep trees ---------------------------------------------------------- */

#define DEEP TEST_HEIGHT

TEST(ref_deep_chain)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2), 1.5, -2);
    ot_node *t = ot_tensor_node(x);
    for (int i = 0; i < DEEP + 1; i++) t = ot_neg(t);
    CHECK_VALS(RUN(t), 0, -1.5, 2);
    ot_node *u = ot_tensor_node(x);
    for (int i = 0; i < DEEP; i++) u = ot_abs(u);
    CHECK_VALS(RUN(u), 0, 1.5, 2);
    fx_end();
}

TEST(ref_deep_left_sum)
{
    fx_begin(NULL);
    ot_tensor *x = ARR(OT_F64, OT_SHAPE(2), 1, 2);
    ot_tensor *y = ARR(OT_F32, OT_SHAPE(2), 0.5, 1);
    ot_node *t = ot_tensor_node(x);
    for (int i = 0; i < DEEP; i++) t = ot_add(t, x);
    CHECK_VALS(RUN(t), 0, DEEP + 1, 2.0 * (DEEP + 1));
    ot_node *u = ot_tensor_node(y);
    for (int i = 0; i < DEEP; i++) u = ot_add(u, 1.0f);
    CHECK_VALS(RUN(u), 0, DEEP + 0.5, DEEP + 1);
    ot_stats s;
    CHECK_INT(ot_stats(F.be, &s), 0);
    CHECK_INT(s.nodes, 2 * DEEP);
    fx_end();
}

/* ---- errors -------------------------------------------------------------- */

TEST(ref_out_of_memory)
{
    fx_begin(NULL);
    /* 2^60 f64 temporaries: a valid tree whose evaluation cannot allocate,
     * after other buffers are live (they must be freed; valgrind checks). */
    ot_tensor *y = keep(ot_zeros(F.be, OT_SHAPE(), OT_F32));
    ot_tensor *x = ARR(OT_F32, OT_SHAPE(), 1);
    ot_node *big = ot_add(ot_exp(x), ot_sum(ot_rand(OT_SHAPE(1 << 30, 1 << 30))));
    CHECK(big != NULL);
    CHECK_INT(ot_assign(y, big), OT_ENOMEM);
    CHECK_ERR(OT_ENOMEM, "rand", "address space");
    CHECK_VALS(y, 0, 0);
    fx_end();
}

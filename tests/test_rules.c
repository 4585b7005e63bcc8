/*
 * test_rules.c - the stated rules of issue 31 point 16, against tables:
 * dtype promotion (README "Dtypes and promotion", optree.h ot_build_at) and
 * gradients at NaN inputs (optree.h autodiff "Rules", README "Autodiff"),
 * the latter on the ref and cpu backends in f64 and f32.
 */
#include "test.h"

#include <math.h>
#include <stdlib.h>

/* ---- promotion ----------------------------------------------------------- */

enum { T_F32, T_F64, T_I32, K_I32, K_F32, K_F64, NKIND };   /* tensors, weak constants */
static const char *const kind_name[NKIND] = {"f32", "f64", "i32", "int const", "float const",
                                             "double const"};

static ot_node *operand(ot_backend *be, int kind, ot_tensor **own)
{
    static const ot_dtype dt[3] = {OT_F32, OT_F64, OT_I32};
    *own = NULL;
    switch (kind) {
    case K_I32: return ot_consti(2);
    case K_F32: return ot_constf(2.0f);
    case K_F64: return ot_const(2.0);
    default: *own = ot_full(be, OT_SHAPE(2), dt[kind], 2); return ot_tensor_node(*own);
    }
}

/* The table README states: an elementwise binary op's dtype for each pair
 * of operands (row: operand 1, column: operand 2). Tensors: NumPy's rule
 * for floats of two widths, PyTorch's (and JAX's) for i32 with a float
 * tensor, which keeps the float (NumPy 2 gives f64 for i32 with f32).
 * Constants are weak, as Python scalars in NumPy 2 (NEP 50): they take the
 * tensor's dtype, except that a float constant lifts an i32 tensor to f64. */
static const ot_dtype promoted[NKIND][NKIND] = {
    /*             f32     f64     i32     int k   flt k   dbl k */
    /* f32 */    {OT_F32, OT_F64, OT_F32, OT_F32, OT_F32, OT_F32},
    /* f64 */    {OT_F64, OT_F64, OT_F64, OT_F64, OT_F64, OT_F64},
    /* i32 */    {OT_F32, OT_F64, OT_I32, OT_I32, OT_F64, OT_F64},
    /* int k */  {OT_F32, OT_F64, OT_I32, OT_I32, OT_F32, OT_F64},
    /* flt k */  {OT_F32, OT_F64, OT_F64, OT_F32, OT_F32, OT_F64},
    /* dbl k */  {OT_F32, OT_F64, OT_F64, OT_F64, OT_F64, OT_F64},
};

TEST(rules_promotion_table)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_pool *pool = ot_pool_push();
    for (int i = 0; i < NKIND; i++) {
        for (int j = 0; j < NKIND; j++) {
            ot_tensor *ta, *tb;
            ot_node *a = operand(be, i, &ta), *b = operand(be, j, &tb);
            ot_dtype want = promoted[i][j];
            ot_node *n = ot_add(a, b), *lt = ot_lt(a, b), *q = ot_div(a, b);
            ot_dtype got = n ? ot_node_dtype(n) : OT_DTYPE_DEFAULT;
            if (got != want)
                test__fail(__FILE__, __LINE__, "add(%s, %s) is %s, the table says %s",
                           kind_name[i], kind_name[j], ot_dtype_name(got), ot_dtype_name(want));
            /* compares: 1 or 0 in the promoted dtype; div (a FLOAT op): i32 gives f64 */
            CHECK(lt && ot_node_dtype(lt) == want);
            CHECK(q && ot_node_dtype(q) == (want == OT_I32 ? OT_F64 : want));
            /* an assignment of two tensors computes in that dtype too */
            if (ta && tb) {
                ot_tensor *out = ot_empty(be, OT_SHAPE(2), want);
                CHECK_INT(ot_assign(out, n), 0);
                ot_tensor_free(out);
            }
            ot_tensor_free(ta);
            ot_tensor_free(tb);
        }
    }
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* C's other integer types are int constants too (NumPy 2's Python int is
 * weak whatever its size): long, long long and unsigned took ot_const's f64
 * and lifted an i32 tensor (found by a misuse probe); past int32 they are
 * f64 still. Clipping an i32 tensor by integers stays i32 (np.clip), by a
 * fraction gives f64. */
TEST(rules_integer_constants_and_clip)
{
    ot_backend *be = test__backend("cpu", OT_FUSION_ON);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_I32, (int[]){2147483647, -7, 9});
    long long big = 1LL << 40;
    CHECK_INT(ot_node_dtype(ot_mul(x, 3L)), OT_I32);
    CHECK_INT(ot_node_dtype(ot_mul(x, 3LL)), OT_I32);
    CHECK_INT(ot_node_dtype(ot_add(x, 5u)), OT_I32);
    CHECK_INT(ot_node_dtype(ot_add(x, big)), OT_F64);
    CHECK_INT(ot_node_dtype(ot_add(ot_consti64(-3), ot_constf(0.5f))), OT_F32);
    ot_tensor *o = ot_empty(be, OT_SHAPE(3), OT_I32);
    int v[3];
    CHECK_INT(ot_assign(o, ot_mul(x, 3LL)), 0);   /* wraps as int32 */
    CHECK_INT(ot_get(o, v), 0);
    CHECK_INT(v[0], 2147483645);
    CHECK_INT(v[1], -21);
    ot_node *c = ot_clip(x, -5, 5);
    CHECK_INT(ot_node_dtype(c), OT_I32);
    CHECK_INT(ot_assign(o, c), 0);
    CHECK_INT(ot_get(o, v), 0);
    CHECK(v[0] == 5 && v[1] == -5 && v[2] == 5);
    CHECK_INT(ot_node_dtype(ot_clip(x, -5.5, 5)), OT_F64);
    CHECK_INT(ot_node_dtype(ot_clip(ot_cast(x, OT_F32), -5, 5)), OT_F32);
    ot_tensor_free(o);
    ot_tensor_free(x);
    ot_pool_pop(pool);
    ot_backend_free(be);
}

/* Unary ops, reductions and dot by their dtype rule (ops.def's rule column,
 * README's table): SAME keeps the dtype, FLOAT gives f64 for i32, INDEX
 * gives i32, dot refuses i32. */
TEST(rules_promotion_by_op)
{
    ot_backend *be = test__backend("ref", OT_FUSION_ON);
    ot_pool *pool = ot_pool_push();
    ot_tensor *t[3] = {ot_full(be, OT_SHAPE(2, 2), OT_F32, 1), ot_full(be, OT_SHAPE(2, 2), OT_F64, 1),
                       ot_full(be, OT_SHAPE(2, 2), OT_I32, 1)};
    for (int k = 0; k < 3; k++) {
        ot_dtype d = ot_tensor_dtype(t[k]), fl = d == OT_I32 ? OT_F64 : d;
        CHECK(ot_node_dtype(ot_neg(t[k])) == d);
        CHECK(ot_node_dtype(ot_abs(t[k])) == d);
        CHECK(ot_node_dtype(ot_sqr(t[k])) == d);
        CHECK(ot_node_dtype(ot_sum(t[k])) == d);
        CHECK(ot_node_dtype(ot_max(t[k], 0)) == d);
        CHECK(ot_node_dtype(ot_squared_l2(t[k])) == d);
        CHECK(ot_node_dtype(ot_exp(t[k])) == fl);
        CHECK(ot_node_dtype(ot_sqrt(t[k])) == fl);
        CHECK(ot_node_dtype(ot_mean(t[k])) == fl);
        CHECK(ot_node_dtype(ot_var(t[k])) == fl);
        CHECK(ot_node_dtype(ot_softmax(t[k])) == fl);
        CHECK(ot_node_dtype(ot_argmax(t[k])) == OT_I32);
        ot_node *dt = ot_dot(t[k], t[k]);
        if (d == OT_I32) {
            CHECK(dt == NULL);
            CHECK_ERR(OT_EDTYPE, "dot", "int32");
            ot_clear_error();
        } else {
            CHECK(dt && ot_node_dtype(dt) == d);
        }
    }
    ot_pool_pop(pool);
    for (int k = 0; k < 3; k++) ot_tensor_free(t[k]);
    ot_backend_free(be);
}

/* ---- gradients at NaN ---------------------------------------------------- */

/* The gradient of sum(f) (next_error ones) w.r.t. wrt into want-shaped
 * host doubles; f is built by the caller over tensors of be. */
static void grad_host(ot_node *f, ot_tensor *wrt, double *host)
{
    ot_autodiff *ad = ot_autodiff_new(f, NULL);
    CHECK(ad != NULL);
    ot_tensor *g = ad ? ot_autodiff_grad_tensor(ad, wrt) : NULL;
    CHECK(g != NULL);
    int64_t n = ot_tensor_numel(wrt);
    if (g) {
        ot_tensor *g64 = ot_empty(ot_tensor_backend(g), ot_tensor_shape(g), OT_F64);
        CHECK_INT(ot_assign(g64, ot_cast(g, OT_F64)), 0);
        CHECK_INT(ot_get(g64, host), 0);
        ot_tensor_free(g64);
    } else {
        for (int64_t i = 0; i < n; i++) host[i] = -12345;
    }
    ot_tensor_free(g);
    ot_autodiff_free(ad);
}

/* got and want agree element for element: NaN where want is NaN, equal
 * elsewhere. */
static void check_grad(const char *what, const char *be, ot_dtype dt, const double *got,
                       const double *want, int n)
{
    for (int i = 0; i < n; i++) {
        bool ok = isnan(want[i]) ? isnan(got[i]) : got[i] == want[i];
        if (!ok)
            test__fail(__FILE__, __LINE__, "%s on %s (%s): element %d is %g, the rule says %g",
                       what, be, ot_dtype_name(dt), i, got[i], want[i]);
    }
}

#define N 6
#define NANV NAN

/* A tensor of dtype dt holding the n doubles v (rounded to f32 for f32). */
static ot_tensor *from(ot_backend *be, ot_shape s, ot_dtype dt, const double *v, int n)
{
    ot_tensor *t = ot_empty(be, s, dt);
    float f[N];
    for (int i = 0; i < n && i < N; i++) f[i] = (float)v[i];
    CHECK(t != NULL);
    if (t) CHECK_INT(ot_set(t, dt == OT_F32 ? (const void *)f : (const void *)v), 0);
    return t;
}
/* x and y hold NaNs at different places, a tie at 3 and a zero. */
static const double xs[N] = {1, NANV, -2, 3, NANV, 0};
static const double ys[N] = {0.5, 2, NANV, 3, NANV, -1};

/* The NaN rule: an operand that is NaN gets a NaN gradient from a
 * selection (abs, relu, maximum, minimum, max, min, clip, safelog's floor);
 * an operand that is not NaN gets 0 from a selection a NaN won; ops whose
 * derivative does not depend on the operand (sum, add) pass g on. */
static void nan_rule_case(const char *bename, ot_dtype dt)
{
    ot_backend *be = test__backend(bename, OT_FUSION_ON);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = from(be, OT_SHAPE(N), dt, xs, N), *y = from(be, OT_SHAPE(N), dt, ys, N);
    double g[N];
    struct {
        const char *what;
        ot_node *f;
        ot_tensor *wrt;
        double want[N];
    } cases[] = {
        {"abs", ot_abs(x), x, {1, NANV, -1, 1, NANV, 0}},
        {"relu", ot_relu(x), x, {1, NANV, 0, 1, NANV, 0}},
        {"maximum(x, y) dx", ot_maximum(x, y), x, {1, NANV, 0, 0.5, NANV, 1}},
        {"maximum(x, y) dy", ot_maximum(x, y), y, {0, 0, NANV, 0.5, NANV, 0}},
        {"maximum(y, x) dx", ot_maximum(y, x), x, {1, NANV, 0, 0.5, NANV, 1}},
        {"maximum(y, x) dy", ot_maximum(y, x), y, {0, 0, NANV, 0.5, NANV, 0}},
        {"minimum(x, y) dx", ot_minimum(x, y), x, {0, NANV, 0, 0.5, NANV, 0}},
        {"minimum(x, y) dy", ot_minimum(x, y), y, {1, 0, NANV, 0.5, NANV, 1}},
        {"minimum(y, x) dy", ot_minimum(y, x), y, {1, 0, NANV, 0.5, NANV, 1}},
        {"maximum(x, 0)", ot_maximum(x, 0.0), x, {1, NANV, 0, 1, NANV, 0.5}},
        {"max(x)", ot_max(x), x, {0, NANV, 0, 0, NANV, 0}},
        {"min(y)", ot_min(y), y, {0, 0, NANV, 0, NANV, 0}},
        {"clip(x, -1, 2)", ot_clip(x, -1.0, 2.0), x, {1, NANV, 0, 0, NANV, 1}},
        {"safelog(x)", ot_safelog(x), x, {1, NANV, 0, 1.0 / 3, NANV, 0}},
        {"sum(x)", ot_sum(x), x, {1, 1, 1, 1, 1, 1}},
        {"x + y", ot_add(x, y), x, {1, 1, 1, 1, 1, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        CHECK(cases[c].f != NULL);
        if (!cases[c].f) continue;
        grad_host(cases[c].f, cases[c].wrt, g);
        double want[N];
        for (int i = 0; i < N; i++)   /* f32 rounds 1/3 */
            want[i] = dt == OT_F32 ? (double)(float)cases[c].want[i] : cases[c].want[i];
        check_grad(cases[c].what, bename, dt, g, want, N);
    }
    /* max along an axis: a line with a NaN gives it NaN and the rest 0; a
     * line without shares among its ties */
    ot_tensor *m = ot_reshape(x, OT_SHAPE(2, 3));
    double gm[N];
    grad_host(ot_max(m, 1), m, gm);
    check_grad("max(x, axis 1)", bename, dt, gm, (const double[]){0, NANV, 0, 0, NANV, 0}, N);
    ot_tensor *tie = from(be, OT_SHAPE(2, 3), dt, (const double[]){1, 0, 0, 3, 0, 0}, N);
    grad_host(ot_max(tie, 0), tie, gm);   /* columns (1, 3), (0, 0), (0, 0): ties halve */
    check_grad("max(tie, axis 0)", bename, dt, gm, (const double[]){0, 0.5, 0.5, 1, 0.5, 0.5}, N);
    ot_pool_pop(pool);
    ot_tensor_free(m);
    ot_tensor_free(tie);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(rules_nan_gradients_ref_f64) { nan_rule_case("ref", OT_F64); }
TEST(rules_nan_gradients_cpu_f64) { nan_rule_case("cpu", OT_F64); }
TEST(rules_nan_gradients_ref_f32) { nan_rule_case("ref", OT_F32); }
TEST(rules_nan_gradients_cpu_f32) { nan_rule_case("cpu", OT_F32); }

/*
 * test_struct_op.c - structured ops registered at run time
 * (ot_op_register_structured): cumsum and its reverse from
 * examples/cumsum_op.h, an outer product (two operands, an f64 kernel
 * alone) and iota (no operands, no gradient).
 *   - values against float64 loops (np.cumsum's definition) on the cpu
 *     backend, fused and not, and on ref, in f32 and f64: leaves, views
 *     (transposed, broadcast), expressions, size-0 and size-1 dims, outputs
 *     that are strided views, mixed operand dtypes (cast to the result's);
 *   - gradients against central differences, through other registered ops;
 *   - printing, parsing by name, ot_explain, the plan cache telling axes
 *     apart, the queries;
 *   - bad registrations and bad input: errors with messages naming the op
 *     and the caller's file:line, never a crash.
 */
#include "test.h"
#include "../examples/cumsum_op.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- the ops --------------------------------------------------------------- */

static int outer_shape(int n, const ot_shape in[], const ot_dtype dt[], ot_args *args,
                       ot_shape *out, ot_dtype *out_dt, char *msg, size_t len, void *user)
{
    (void)n, (void)args, (void)user;
    if (in[0].ndim != 1 || in[1].ndim != 1)
        return snprintf(msg, len, "takes two vectors, not rank %d and %d", in[0].ndim,
                        in[1].ndim),
               OT_ESHAPE;
    *out = (ot_shape){.ndim = 2, .dims = {in[0].dims[0], in[1].dims[0]}};
    *out_dt = dt[0] == OT_F64 || dt[1] == OT_F64 ? OT_F64 : OT_F32;
    return 0;
}

static void outer_f64(const ot_struct_call *c)
{
    const double *a = c->in[0].data, *b = c->in[1].data;
    double *o = c->out->data;
    int64_t m = c->out->shape.dims[0], n = c->out->shape.dims[1];
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) o[i * c->out->strides[0] + j] = a[i] * b[j];
}

static ot_node *outer_grad(int n, ot_node *const in[], ot_node *out, ot_node *g, int which,
                           const ot_args *args, void *user)
{
    (void)n, (void)out, (void)args, (void)user;
    return which == 0 ? ot_dot(g, in[1]) : ot_dot(in[0], g);
}

static int iota_shape(int n, const ot_shape in[], const ot_dtype dt[], ot_args *args,
                      ot_shape *out, ot_dtype *out_dt, char *msg, size_t len, void *user)
{
    (void)n, (void)in, (void)dt, (void)user;
    if (args->axis < 0) return snprintf(msg, len, "needs a length (axis=)"), OT_EINVAL;
    *out = (ot_shape){.ndim = 1, .dims = {args->axis}};
    *out_dt = OT_F32;
    return 0;
}

static void iota_f32(const ot_struct_call *c)
{
    float *o = c->out->data;
    for (int64_t i = 0; i < c->out->shape.dims[0]; i++) o[i] = (float)i;
}

static ot_op cumsum, rcumsum, outer, iota;

static void register_all(void)
{
    CHECK(cumsum_register(&cumsum, &rcumsum));
    outer = ot_op_lookup("outer");
    if (outer == OT_OP_NONE)
        outer = ot_op_register_structured(&(ot_struct_def){
            .name = "outer", .arity = 2, .shape = outer_shape, .f64 = outer_f64, .grad = outer_grad});
    iota = ot_op_lookup("iota");
    if (iota == OT_OP_NONE)
        iota = ot_op_register_structured(&(ot_struct_def){
            .name = "iota", .arity = 0, .shape = iota_shape, .f32 = iota_f32});
    CHECK(outer >= OT_OP_REGISTERED && iota >= OT_OP_REGISTERED);
}

/* op(x, axis=axis) with the caller's file:line */
#define cs(op, x, ax) ot_apply_struct((op), 1, (ot_node *[]){(x)}, &(ot_args){.axis = (ax)})

/* ---- helpers --------------------------------------------------------------- */

static ot_tensor *seq(ot_backend *be, ot_shape s, ot_dtype dt, double scale)
{
    int64_t n = 1;
    for (int i = 0; i < s.ndim; i++) n *= s.dims[i];
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) v[i] = scale * sin(0.37 * (double)i + 0.1);
    ot_tensor *t = ot_array(be, s, OT_F64, v);
    ot_tensor *r = dt == OT_F64 ? t : ot_eval(ot_cast(t, dt));
    if (r != t) ot_tensor_free(t);
    free(v);
    return r;
}

/* A tree's values in double (n of them), evaluated; false on error. */
static bool values_of(ot_node *tree, double *out, int64_t n)
{
    ot_tensor *t = ot_eval(ot_cast(tree, OT_F64));
    bool ok = t && ot_get_n(t, out, sizeof(double) * (size_t)n) == 0;
    ot_tensor_free(t);
    return ok;
}

/* np.cumsum(x, axis) of row-major x of shape s, in double. */
static void cumsum_ref(const double *x, const ot_shape *s, int axis, bool rev, double *y)
{
    int64_t outer_n = 1, len = s->dims[axis], inner = 1;
    for (int d = 0; d < axis; d++) outer_n *= s->dims[d];
    for (int d = axis + 1; d < s->ndim; d++) inner *= s->dims[d];
    for (int64_t o = 0; o < outer_n; o++)
        for (int64_t j = 0; j < inner; j++) {
            double acc = 0;
            for (int64_t t = 0; t < len; t++) {
                int64_t i = (o * len + (rev ? len - 1 - t : t)) * inner + j;
                y[i] = acc += x[i];
            }
        }
}

static int64_t numel(const ot_shape *s)
{
    int64_t n = 1;
    for (int i = 0; i < s->ndim; i++) n *= s->dims[i];
    return n;
}

/* cumsum of input (an expression of shape s) along axis on backend be,
 * against the loop on the input's own values. */
static void check_cumsum(ot_node *input, const ot_shape *s, int axis, bool rev, double tol)
{
    int64_t n = numel(s);
    double *x = malloc(sizeof *x * (size_t)(n + 1)), *got = malloc(sizeof *x * (size_t)(n + 1)),
           *want = malloc(sizeof *x * (size_t)(n + 1));
    CHECK(values_of(input, x, n));
    int ax = axis < 0 ? axis + s->ndim : axis;
    cumsum_ref(x, s, ax, rev, want);
    CHECK(values_of(cs(rev ? rcumsum : cumsum, input, axis), got, n));
    for (int64_t i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], tol);
    free(x);
    free(got);
    free(want);
}

static const char *const backends[] = {"cpu", "cpu", "ref"};

/* ---- values ---------------------------------------------------------------- */

TEST(struct_cumsum_values)
{
    register_all();
    static const ot_shape shapes[] = {{1, {7}}, {2, {3, 5}}, {3, {2, 3, 4}}, {3, {2, 0, 3}},
                                      {2, {1, 6}}};
    for (int b = 0; b < 3; b++) {
        ot_backend *be = test__backend(backends[b], b == 0);
        for (int d = 0; d < 2; d++) {
            ot_dtype dt = d ? OT_F64 : OT_F32;
            double tol = d ? 1e-12 : 1e-5;
            for (size_t k = 0; k < sizeof shapes / sizeof shapes[0]; k++) {
                ot_pool *pool = ot_pool_push();
                ot_tensor *x = seq(be, shapes[k], dt, 1.5);
                for (int axis = -1; axis < shapes[k].ndim; axis++) {
                    check_cumsum(ot_tensor_node(x), &shapes[k], axis, axis == 0, tol);
                    /* an expression: computed into memory first */
                    check_cumsum(ot_add(ot_mul(x, 2.0), 1.0), &shapes[k], axis, false, tol);
                }
                ot_pool_pop(pool);
                ot_tensor_free(x);
            }
        }
        ot_backend_free(be);
    }
}

TEST(struct_cumsum_views)
{
    register_all();
    for (int b = 0; b < 3; b++) {
        ot_backend *be = test__backend(backends[b], b == 0);
        ot_pool *pool = ot_pool_push();
        ot_tensor *x = seq(be, OT_SHAPE(4, 3), OT_F64, 1.0);
        ot_tensor *xt = ot_transpose(x, NULL);             /* (3, 4), strided */
        ot_tensor *row = seq(be, OT_SHAPE(5), OT_F64, 1.0);
        ot_tensor *bc = ot_broadcast_to(row, OT_SHAPE(3, 5)); /* stride 0 */
        ot_shape s34 = OT_SHAPE(3, 4), s35 = OT_SHAPE(3, 5), s43 = OT_SHAPE(4, 3);
        check_cumsum(ot_tensor_node(xt), &s34, 1, false, 1e-12);
        check_cumsum(ot_tensor_node(bc), &s35, 0, false, 1e-12);
        /* into a strided output, and into a slice of one */
        ot_tensor *o = ot_zeros(be, OT_SHAPE(4, 3), OT_F64), *ot = ot_transpose(o, NULL);
        CHECK_INT(ot_assign(ot, cs(cumsum, ot_tensor_node(xt), 1)), 0);
        double got[12], want[12], xv[12];
        CHECK(values_of(ot_tensor_node(x), xv, 12));
        cumsum_ref(xv, &s43, 0, false, want);
        CHECK(values_of(ot_tensor_node(o), got, 12));
        for (int i = 0; i < 12; i++) CHECK_NEAR(got[i], want[i], 1e-12);
        ot_tensor *big = ot_zeros(be, OT_SHAPE(2, 4, 3), OT_F64);
        ot_tensor *part = ot_slice(big, OT_IDX(1));
        CHECK_INT(ot_assign(part, cs(cumsum, ot_tensor_node(x), 0)), 0);
        CHECK(values_of(ot_tensor_node(part), got, 12));
        for (int i = 0; i < 12; i++) CHECK_NEAR(got[i], want[i], 1e-12);
        /* read by later work, and broadcast into a larger output */
        ot_tensor *o2 = ot_empty(be, OT_SHAPE(2, 4, 3), OT_F64);
        CHECK_INT(ot_assign(o2, ot_add(cs(cumsum, ot_tensor_node(x), 0), 1.0)), 0);
        double g2[24];
        CHECK(values_of(ot_tensor_node(o2), g2, 24));
        for (int i = 0; i < 24; i++) CHECK_NEAR(g2[i], want[i % 12] + 1.0, 1e-12);
        /* an f32 operand of a two-operand op with an f64 one: cast to f64 */
        ot_tensor *a32 = seq(be, OT_SHAPE(3), OT_F32, 1.0), *b64 = seq(be, OT_SHAPE(2), OT_F64, 1.0);
        ot_node *op = ot_apply_struct(outer, 2, (ot_node *[]){ot_tensor_node(a32), ot_tensor_node(b64)}, NULL);
        CHECK(op && ot_node_dtype(op) == OT_F64);
        double av[3], bv[2], ov[6];
        CHECK(values_of(ot_tensor_node(a32), av, 3) && values_of(ot_tensor_node(b64), bv, 2));
        CHECK(values_of(op, ov, 6));
        for (int i = 0; i < 6; i++) CHECK_NEAR(ov[i], av[i / 2] * bv[i % 2], 1e-15);
        /* no operands */
        float iv[4];
        ot_tensor *it = ot_empty(be, OT_SHAPE(4), OT_F32);
        CHECK_INT(ot_assign(it, ot_apply_struct(iota, 0, NULL, &(ot_args){.axis = 4})), 0);
        CHECK_INT(ot_get(it, iv), 0);
        ot_tensor_free(it);
        for (int i = 0; i < 4; i++) CHECK_NEAR(iv[i], i, 0);
        ot_pool_pop(pool);
        ot_tensor *all[] = {x, xt, row, bc, o, ot, big, part, o2, a32, b64};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) ot_tensor_free(all[i]);
        ot_backend_free(be);
    }
}

/* ---- gradients ------------------------------------------------------------- */

/* sum(cumsum(outer(a, b) * w, axis=1) ... ) as a function of a's values. */
static ot_node *loss(ot_tensor *a, ot_tensor *b, ot_tensor *w)
{
    ot_node *o = ot_apply_struct(outer, 2, (ot_node *[]){ot_tensor_node(a), ot_tensor_node(b)}, NULL);
    return ot_sum(ot_mul(cs(rcumsum, cs(cumsum, ot_tanh(o), 1), 0), w));
}

static double loss_value(ot_tensor *a, ot_tensor *b, ot_tensor *w)
{
    ot_pool *pool = ot_pool_push();
    ot_tensor *t = ot_eval(loss(a, b, w));
    double v = NAN;
    if (t) ot_get(t, &v);
    ot_tensor_free(t);
    ot_pool_pop(pool);
    return v;
}

TEST(struct_gradients)
{
    register_all();
    for (int bk = 1; bk < 3; bk++) {
        ot_backend *be = test__backend(backends[bk], 1);
        ot_tensor *a = seq(be, OT_SHAPE(3), OT_F64, 0.8), *b = seq(be, OT_SHAPE(4), OT_F64, 0.6);
        ot_tensor *w = seq(be, OT_SHAPE(3, 4), OT_F64, 1.0);
        ot_tensor *wrt[2] = {a, b};
        for (int k = 0; k < 2; k++) {
            ot_pool *pool = ot_pool_push();
            ot_autodiff *ad = ot_autodiff_new(loss(a, b, w), NULL);
            double g[4], v[4];
            int n = k ? 4 : 3;
            CHECK(ad && ot_autodiff_grad_host(ad, wrt[k], g) == 0);
            ot_autodiff_free(ad);
            ot_pool_pop(pool);
            CHECK_INT(ot_get(wrt[k], v), 0);
            for (int i = 0; i < n; i++) {
                double h = 1e-6, keep = v[i];
                v[i] = keep + h;
                ot_set(wrt[k], v);
                double up = loss_value(a, b, w);
                v[i] = keep - h;
                ot_set(wrt[k], v);
                double down = loss_value(a, b, w);
                v[i] = keep;
                ot_set(wrt[k], v);
                CHECK_NEAR(g[i], (up - down) / (2 * h), 1e-6);
            }
        }
        ot_tensor_free(a);
        ot_tensor_free(b);
        ot_tensor_free(w);
        ot_backend_free(be);
    }
}

/* ---- the registry, printing, parsing, plans -------------------------------- */

TEST(struct_registry_print_parse)
{
    register_all();
    CHECK_INT(ot_op_kind(cumsum), OT_KIND_SPECIAL);
    CHECK_INT(ot_op_arity(cumsum), 1);
    CHECK_INT(ot_op_arity(outer), 2);
    CHECK_INT(ot_op_arity(iota), 0);
    CHECK_INT(ot_op_flags(cumsum), OT_FLAG_FLOAT | OT_FLAG_CUSTOM);
    CHECK_INT(ot_op_flags(iota), OT_FLAG_FLOAT | OT_FLAG_CUSTOM | OT_FLAG_NODIFF);
    CHECK_STR(ot_op_name(cumsum), "cumsum");
    CHECK_INT(ot_op_lookup("rcumsum"), rcumsum);
    ot_backend *be = test__backend("cpu", 1);
    ot_tensor *x = seq(be, OT_SHAPE(2, 3), OT_F32, 1.0);
    ot_tensor_set_name(x, "x");
    ot_pool *pool = ot_pool_push();
    ot_node *y = cs(cumsum, ot_exp(x), -1);
    CHECK_INT(ot_node_op(y), cumsum);
    char *pp = test__capture(ot_pp, y);
    CHECK_STR(pp, "(cumsum (exp x) axis=1)");
    ot_node *back = ot_parse("cumsum(exp(x), axis=1)", 1, (const char *[]){"x"},
                             (ot_node *[]){ot_tensor_node(x)});
    char *pp2 = back ? test__capture(ot_pp, back) : NULL;
    CHECK_STR(pp2, pp);
    ot_node *pre = ot_parse(pp, 1, (const char *[]){"x"}, (ot_node *[]){ot_tensor_node(x)});
    char *pp3 = pre ? test__capture(ot_pp, pre) : NULL;
    CHECK_STR(pp3, pp);
    char *ex = test__capture(ot_explain, y);
    CHECK(ex && strstr(ex, "struct cumsum [2x3]"));
    /* the plan cache tells the axes apart: one output, two plans */
    ot_tensor *o = ot_empty(be, OT_SHAPE(2, 3), OT_F32);
    double v0[6], v1[6], xv[6], w0[6], w1[6];
    CHECK(values_of(ot_tensor_node(x), xv, 6));
    ot_shape s23 = OT_SHAPE(2, 3);
    cumsum_ref(xv, &s23, 0, false, w0);
    cumsum_ref(xv, &s23, 1, false, w1);
    for (int r = 0; r < 2; r++) {
        CHECK_INT(ot_assign(o, cs(cumsum, ot_tensor_node(x), 0)), 0);
        CHECK(values_of(ot_tensor_node(o), v0, 6));
        CHECK_INT(ot_assign(o, cs(cumsum, ot_tensor_node(x), 1)), 0);
        CHECK(values_of(ot_tensor_node(o), v1, 6));
        for (int i = 0; i < 6; i++) {
            CHECK_NEAR(v0[i], w0[i], 1e-6);
            CHECK_NEAR(v1[i], w1[i], 1e-6);
        }
    }
    CHECK_INT(ot_parse("cumsum(x, 1, 2)", 1, (const char *[]){"x"}, (ot_node *[]){ot_tensor_node(x)}) == NULL, 1);
    CHECK_ERR(OT_EINVAL, "cumsum takes");
    CHECK(ot_parse("custom_struct(x)", 1, (const char *[]){"x"}, (ot_node *[]){ot_tensor_node(x)}) == NULL);
    ot_pool_pop(pool);
    free(pp);
    free(pp2);
    free(pp3);
    free(ex);
    ot_tensor_free(o);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(struct_errors)
{
    register_all();
    /* registrations */
    CHECK_INT(ot_op_register_structured(NULL), OT_OP_NONE);
    CHECK_ERR(OT_ENULL, "def is NULL");
    ot_struct_def d = {.name = "bad_one", .arity = 1, .shape = cumsum_shape, .f64 = cumsum_f64};
    ot_struct_def nd = d;
    nd.shape = NULL;
    CHECK_INT(ot_op_register_structured(&nd), OT_OP_NONE);
    CHECK_ERR(OT_ENULL, "bad_one", "no shape rule");
    nd = d;
    nd.f64 = NULL;
    CHECK_INT(ot_op_register_structured(&nd), OT_OP_NONE);
    CHECK_ERR(OT_EINVAL, "bad_one", "no kernel");
    for (int a = -1; a <= 9; a += 10) {
        nd = d;
        nd.arity = a;
        CHECK_INT(ot_op_register_structured(&nd), OT_OP_NONE);
        CHECK_ERR(OT_EINVAL, "bad_one", "arity");
    }
    nd = d;
    nd.name = "cumsum";
    CHECK_INT(ot_op_register_structured(&nd), OT_OP_NONE);
    CHECK_ERR(OT_EINVAL, "registered already");
    nd.name = "sum";
    CHECK_INT(ot_op_register_structured(&nd), OT_OP_NONE);
    CHECK_ERR(OT_EINVAL, "built-in");
    nd.name = NULL;
    CHECK_INT(ot_op_register_structured(&nd), OT_OP_NONE);
    CHECK_ERR(OT_EINVAL, "NULL");
    /* building */
    ot_backend *be = test__backend("cpu", 1);
    ot_tensor *x = seq(be, OT_SHAPE(2, 3), OT_F32, 1.0);
    ot_tensor *xi = ot_zeros(be, OT_SHAPE(4), OT_I32);
    char site[256];
    ot_pool *pool = ot_pool_push();
    int line = __LINE__ + 1;
    CHECK(cs(cumsum, ot_tensor_node(x), 2) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "cumsum: axis 2 is out of range for rank 2");
    line = __LINE__ + 1;
    CHECK(cs(cumsum, ot_tensor_node(x), OT_AXIS_ALL) == NULL);
    CHECK_ERR(OT_EINVAL, TEST_SITE(site, line), "cumsum: needs an axis");
    line = __LINE__ + 1;
    CHECK(cs(cumsum, ot_const(2.0), 0) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "cumsum: takes a tensor of rank 1");
    line = __LINE__ + 1;
    CHECK(cs(cumsum, ot_tensor_node(xi), 0) == NULL);
    CHECK_ERR(OT_EDTYPE, TEST_SITE(site, line), "cumsum: takes float32 or float64, not int32");
    line = __LINE__ + 1;
    CHECK(ot_apply_struct(outer, 2, (ot_node *[]){ot_tensor_node(x), ot_tensor_node(x)}, NULL) == NULL);
    CHECK_ERR(OT_ESHAPE, TEST_SITE(site, line), "outer: takes two vectors, not rank 2 and 2");
    CHECK(ot_apply_struct(outer, 2, (ot_node *[]){ot_tensor_node(xi), NULL}, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "operand 2 is NULL");
    CHECK(ot_apply_struct(outer, 1, (ot_node *[]){ot_tensor_node(x)}, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "outer", "takes 2 operands, not 1");
    CHECK(ot_apply_struct(outer, 2, NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "operand array");
    CHECK(ot_apply_struct(OT_OP_ADD, 2, (ot_node *[]){ot_tensor_node(x), ot_tensor_node(x)}, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "not a structured registered op");
    /* an f32 result of an op with only an f64 kernel */
    ot_tensor *v32 = seq(be, OT_SHAPE(3), OT_F32, 1.0);
    CHECK(ot_apply_struct(outer, 2, (ot_node *[]){ot_tensor_node(v32), ot_tensor_node(v32)}, NULL) == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "outer", "no f32 kernel");
    CHECK(ot_apply_struct(iota, 0, NULL, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "iota: needs a length");
    /* no gradient rule: no gradient flows through it */
    ot_node *io = ot_apply_struct(iota, 0, NULL, &(ot_args){.axis = 3});
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(ot_tensor_node(v32), io)), NULL);
    double g[3];
    CHECK(ad && ot_autodiff_grad_host(ad, v32, g) == 0);
    ot_autodiff_free(ad);
    ot_clear_error();
    ot_pool_pop(pool);
    ot_tensor_free(v32);
    ot_tensor_free(x);
    ot_tensor_free(xi);
    ot_backend_free(be);
}

TEST(struct_in_program)
{
    register_all();
    ot_backend *be = test__backend("cpu", 1);
    ot_program *p = ot_program_new(be);
    ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(3, 4), OT_F64);
    ot_tensor *o = ot_empty(be, OT_SHAPE(3, 4), OT_F64);
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign(p, o, ot_mul(cs(cumsum, ot_exp(x), 1), 2.0)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    ot_shape s = OT_SHAPE(3, 4);
    for (int run = 0; run < 2; run++) {
        double xv[12], ex[12], want[12], got[12];
        for (int i = 0; i < 12; i++) ex[i] = exp(xv[i] = 0.1 * (i + run));
        cumsum_ref(ex, &s, 1, false, want);
        CHECK_INT(ot_program_run(p, 1, &OT_BIND_DATA("x", xv, sizeof xv)), 0);
        CHECK_INT(ot_get(o, got), 0);
        for (int i = 0; i < 12; i++) CHECK_NEAR(got[i], 2 * want[i], 1e-12);
    }
    ot_program_free(p);
    ot_tensor_free(o);
    ot_backend_free(be);
}

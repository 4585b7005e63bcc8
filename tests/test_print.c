/*
 * test_print.c - the text forms of trees: the float repr (ot__fmt_double),
 * neon's tuple form (ot_print), infix (ot_pp) and DOT (ot_graphviz), checked
 * byte for byte, plus their error returns and trees of height 100,000; and
 * tensors' values (ot_tensor_print_opts) against NumPy's text.
 */
#include "test.h"
#include "internal.h"

#include <inttypes.h>
#include <stdlib.h>

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

static ot_tensor *named(ot_backend *be, ot_shape s, ot_dtype dt, const char *name)
{
    ot_tensor *t = ot_zeros(be, s, dt);
    CHECK(t != NULL);
    if (name) CHECK_INT(ot_tensor_set_name(t, name), 0);
    return t;
}

/* Checks that fn writes exactly want for n. */
#define CHECK_OUT(fn, n, want)                                                \
    do {                                                                      \
        char *got_ = test__capture((fn), (n));                                \
        CHECK_STR(got_, (want));                                              \
        free(got_);                                                           \
    } while (0)

static const char *fmt(double v)
{
    static char buf[64];
    ot__fmt_double(buf, sizeof buf, v);
    return buf;
}

TEST(print_fmt_double_repr)
{
    CHECK_STR(fmt(0.5), "0.5");
    CHECK_STR(fmt(1.0), "1.0");
    CHECK_STR(fmt(-2.0), "-2.0");
    CHECK_STR(fmt(0.0), "0.0");
    CHECK_STR(fmt(-0.0), "-0.0");
    CHECK_STR(fmt(0.1), "0.1");
    CHECK_STR(fmt(1.0 / 3.0), "0.3333333333333333");
    CHECK_STR(fmt(100.0), "100.0");
    CHECK_STR(fmt(123.456), "123.456");
    CHECK_STR(fmt(1e-07), "1e-07");
    CHECK_STR(fmt(0.0001), "0.0001");
    CHECK_STR(fmt(0.00012), "0.00012");
    CHECK_STR(fmt(1.5e-05), "1.5e-05");
    CHECK_STR(fmt(1e16), "1e+16");
    CHECK_STR(fmt(9999999999999998.0), "9999999999999998.0");
    CHECK_STR(fmt(1e22), "1e+22");
    CHECK_STR(fmt(1.7976931348623157e308), "1.7976931348623157e+308");
    CHECK_STR(fmt(5e-324), "5e-324");
    CHECK_STR(fmt((double)0.1f), "0.10000000149011612");
    CHECK_STR(fmt(INFINITY), "inf");
    CHECK_STR(fmt(-INFINITY), "-inf");
    CHECK_STR(fmt(NAN), "nan");
}

TEST(print_fmt_double_round_trips)
{
    /* Every text reads back as the same double, over many magnitudes. */
    char buf[64];
    double v = 0.7;
    int bad = 0;
    for (int i = 0; i < 2000; i++) {
        v = v * 3.7 + 1e-3;
        if (v > 1e300) v = 1e-300 * (i + 1);
        ot__fmt_double(buf, sizeof buf, v);
        if (strtod(buf, NULL) != v) bad++;
    }
    CHECK_INT(bad, 0);
    /* A short buffer truncates, NUL-terminated. */
    ot__fmt_double(buf, 4, 123.456);
    CHECK_STR(buf, "123");
}

/* ---- tensors, as NumPy prints them ---------------------------------------- */

/* What ot_tensor_print_opts writes (caller frees). */
static char *tensor_text(const ot_tensor *t, const ot_print_options *o)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK(f != NULL);
    if (!f) return NULL;
    CHECK_INT(ot_tensor_print_opts(t, f, o), 0);
    fclose(f);
    return buf;
}

/* ot_tensor_print_opts against NumPy 1.24's np.array2string(a,
 * precision=p) (p 8 where precision is 0, the default): precision counts
 * digits after the point (it counted significant digits: 1.14 for
 * NumPy's 1.143), unique digits in both dtypes, positional or scientific
 * for the whole array, padded alike, nan and inf among them. */
TEST(print_tensor_precision_as_numpy)
{
    static const struct {
        ot_dtype dt;
        int n;
        double v[4];
        int precision;
        const char *numpy;
    } cases[] = {
        {OT_F64, 3, {0.3333333333333333, 0.6666666666666666, 1.0}, 3, "[0.333 0.667 1.   ]"},
        {OT_F64, 3, {0.3333333333333333, 0.6666666666666666, 1.0}, 0, "[0.33333333 0.66666667 1.        ]"},
        {OT_F32, 3, {0.3333333333333333, 0.6666666666666666, 1.0}, 0, "[0.33333334 0.6666667  1.        ]"},
        {OT_F64, 3, {1.14285714, -12.5, 100.0}, 3, "[  1.143 -12.5   100.   ]"},
        {OT_F64, 3, {1.0, 2.0, -3.0}, 0, "[ 1.  2. -3.]"},
        {OT_F64, 4, {0.5, -1.25, 0.0, -0.0}, 0, "[ 0.5  -1.25  0.   -0.  ]"},
        {OT_F64, 3, {1.5, 2.25, 0.0}, 1, "[1.5 2.2 0. ]"},
        {OT_F64, 3, {0.125, 0.375, 2.675}, 2, "[0.12 0.38 2.67]"},
        {OT_F64, 2, {1.99999999999, 1.0}, 3, "[2. 1.]"},
        {OT_F64, 2, {123456789.0, 1.0}, 0, "[1.23456789e+08 1.00000000e+00]"},
        {OT_F64, 4, {1e-05, 1.5, -20000000000.0, NAN}, 0, "[ 1.0e-05  1.5e+00 -2.0e+10      nan]"},
        {OT_F64, 4, {1e-05, 1.5, -20000000000.0, NAN}, 3, "[ 1.0e-05  1.5e+00 -2.0e+10      nan]"},
        {OT_F64, 2, {1e+100, 1.0}, 0, "[1.e+100 1.e+000]"},
        {OT_F64, 2, {0.0001, 0.1}, 8, "[0.0001 0.1   ]"},
        {OT_F64, 2, {0.0001, 0.1001}, 8, "[1.000e-04 1.001e-01]"},
        {OT_F64, 3, {NAN, INFINITY, -INFINITY}, 0, "[ nan  inf -inf]"},
        {OT_F64, 2, {NAN, 1.0}, 0, "[nan  1.]"},
        {OT_F64, 2, {-INFINITY, 0.5}, 0, "[-inf  0.5]"},
        {OT_F64, 2, {0.0, 0.0}, 0, "[0. 0.]"},
        {OT_F32, 2, {0.1, 1.0000001192092896}, 0, "[0.1       1.0000001]"},
        {OT_F32, 2, {0.1, 1.0000001192092896}, 4, "[0.1 1. ]"},
        {OT_F32, 2, {9.999999747378752e-05, 1.0}, 0, "[1.e-04 1.e+00]"},
        {OT_F32, 2, {1000.0, 1.0}, 0, "[1000.    1.]"},
        {OT_F32, 2, {1000.5, 1.0}, 0, "[1.0005e+03 1.0000e+00]"},
        {OT_F32, 2, {16777217.0, 0.5}, 0, "[1.6777216e+07 5.0000000e-01]"},
        {OT_F64, 2, {3.14159265358979, 2.718281828459045}, 17, "[3.14159265358979  2.718281828459045]"},
        {OT_F32, 2, {3.14159265358979, 2.718281828459045}, 17, "[3.1415927 2.7182817]"},
        {OT_F64, 2, {-1234.5678, 0.001234}, 2, "[-1.23e+03  1.23e-03]"},
    };
    ot_backend *be = ref();
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_tensor *t = ot_empty(be, OT_SHAPE(cases[k].n), cases[k].dt);
        for (int i = 0; i < cases[k].n; i++) {
            if (cases[k].dt == OT_F32) ((float *)ot_tensor_data(t))[i] = (float)cases[k].v[i];
            else ((double *)ot_tensor_data(t))[i] = cases[k].v[i];
        }
        char *s = tensor_text(t, &(ot_print_options){.precision = cases[k].precision});
        size_t len = s ? strlen(s) : 0;
        if (!s || len == 0 || s[len - 1] != '\n' || strncmp(s, cases[k].numpy, len - 1) != 0 ||
            strlen(cases[k].numpy) != len - 1)
            test__fail(__FILE__, __LINE__, "case %zu: printed \"%s\", NumPy \"%s\"", k,
                       s ? s : "(null)", cases[k].numpy);
        free(s);
        ot_tensor_free(t);
    }
    /* a summary picks its format from the values it shows, as NumPy does */
    ot_tensor *m = ot_empty(be, OT_SHAPE(40, 50), OT_F64);
    for (int i = 0; i < 2000; i++) ((double *)ot_tensor_data(m))[i] = i / 7.0;
    char *s = tensor_text(m, &(ot_print_options){.precision = 3});
    CHECK_STR(s, "[[0.000e+00 1.429e-01 2.857e-01 ... 6.714e+00 6.857e+00 7.000e+00]\n"
                 " [7.143e+00 7.286e+00 7.429e+00 ... 1.386e+01 1.400e+01 1.414e+01]\n"
                 " [1.429e+01 1.443e+01 1.457e+01 ... 2.100e+01 2.114e+01 2.129e+01]\n"
                 " ...\n"
                 " [2.643e+02 2.644e+02 2.646e+02 ... 2.710e+02 2.711e+02 2.713e+02]\n"
                 " [2.714e+02 2.716e+02 2.717e+02 ... 2.781e+02 2.783e+02 2.784e+02]\n"
                 " [2.786e+02 2.787e+02 2.789e+02 ... 2.853e+02 2.854e+02 2.856e+02]]\n");
    free(s);
    ot_tensor *scalar = ot_full(be, OT_SHAPE(), OT_F32, 0.1);
    s = tensor_text(scalar, NULL);
    CHECK_STR(s, "0.1\n");
    free(s);
    ot_tensor_free(m);
    ot_tensor_free(scalar);
    ot_backend_free(be);
}

TEST(print_tuple_add_exact)
{
    ot_backend *be = ref();
    ot_tensor *x0 = named(be, OT_SHAPE(2, 2), OT_F32, "x0");
    ot_tensor *x1 = named(be, OT_SHAPE(2, 2), OT_F32, "x1");
    ot_node *f = ot_add(x0, x1);
    CHECK_OUT(ot_print, f, "({'shape': (2, 2), 'op': 'add'}, x0, x1)");
    CHECK_OUT(ot_print, ot_exp(x0), "({'shape': (2, 2), 'op': 'exp'}, x0, None)");
    CHECK_OUT(ot_print, ot_mul(f, x0),
              "({'shape': (2, 2), 'op': 'mul'}, ({'shape': (2, 2), 'op': 'add'}, x0, x1), x0)");
    /* A leaf at the top prints alone. */
    CHECK_OUT(ot_print, ot_tensor_node(x0), "x0");
    ot_tensor_free(x0);
    ot_tensor_free(x1);
    ot_backend_free(be);
}

TEST(print_tuple_shapes_and_attrs)
{
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2, 3), OT_F32, "x");
    ot_tensor *v = named(be, OT_SHAPE(3), OT_F32, "v");
    ot_tensor *i = named(be, OT_SHAPE(4), OT_I32, "i");
    CHECK_OUT(ot_print, ot_neg(v), "({'shape': (3,), 'op': 'neg'}, v, None)");
    CHECK_OUT(ot_print, ot_sum(x), "({'shape': (), 'op': 'sum', 'axis': None}, x, None)");
    CHECK_OUT(ot_print, ot_sum(x, .axis = 1),
              "({'shape': (2,), 'op': 'sum', 'axis': 1}, x, None)");
    CHECK_OUT(ot_print, ot_max(x, .axis = -1, .keepdims = true),
              "({'shape': (2, 1), 'op': 'max', 'axis': 1, 'keepdims': True}, x, None)");
    CHECK_OUT(ot_print, ot_T(x), "({'shape': (3, 2), 'op': 'transpose', 'perm': (1, 0)}, x, None)");
    CHECK_OUT(ot_print, ot_cast(x, .dtype = OT_F64),
              "({'shape': (2, 3), 'op': 'cast', 'dtype': 'float64'}, x, None)");
    CHECK_OUT(ot_print, ot_onehot(i, .depth = 10, .axis = 0),
              "({'shape': (10, 4), 'op': 'onehot', 'depth': 10, 'axis': 0}, i, None)");
    CHECK_OUT(ot_print, ot_rand(OT_SHAPE(3, 4), .seed = 7),
              "({'shape': (3, 4), 'op': 'rand', 'seed': 7}, None, None)");
    CHECK_OUT(ot_print, ot_dot(x, v), "({'shape': (2,), 'op': 'dot'}, x, v)");
    ot_tensor_free(x);
    ot_tensor_free(v);
    ot_tensor_free(i);
    ot_backend_free(be);
}

TEST(print_constants)
{
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), OT_F32, "x");
    CHECK_OUT(ot_print, ot_mul(x, 0.5), "({'shape': (2,), 'op': 'mul'}, x, 0.5)");
    /* A constant takes the dtype of the tensor it meets (NEP 50). */
    CHECK_OUT(ot_print, ot_mul(x, 2), "({'shape': (2,), 'op': 'mul'}, x, 2.0)");
    CHECK_OUT(ot_print, ot_add(1e-7, x), "({'shape': (2,), 'op': 'add'}, 1e-07, x)");
    CHECK_OUT(ot_print, ot_add(x, 3.0), "({'shape': (2,), 'op': 'add'}, x, 3.0)");
    /* A float literal prints as the float it is, not its double expansion. */
    CHECK_OUT(ot_print, ot_mul(x, 0.1f), "({'shape': (2,), 'op': 'mul'}, x, 0.1)");
    CHECK_OUT(ot_print, ot_mul(x, -INFINITY), "({'shape': (2,), 'op': 'mul'}, x, -inf)");
    CHECK_OUT(ot_print, ot_const(NAN), "nan");
    CHECK_OUT(ot_print, ot_consti(-3), "-3");
    ot_tensor *i = ot_zeros(be, OT_SHAPE(2), OT_I32);
    ot_tensor_set_name(i, "i");
    CHECK_OUT(ot_print, ot_add(i, 2), "({'shape': (2,), 'op': 'add'}, i, 2)");
    CHECK_OUT(ot_pp, ot_mul(ot_const(0.5), ot_const(1e22)), "(0.5 * 1e+22)");
    ot_tensor_free(i);
    /* An f32 constant not under an f32 node is marked, for ot_parse. */
    CHECK_OUT(ot_pp, ot_constf(1e-7f), "1e-07f");
    CHECK_OUT(ot_pp, ot_mul(x, 0.1f), "(x * 0.1)");
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(print_unnamed_tensor)
{
    ot_backend *be = ref();
    ot_tensor *t = named(be, OT_SHAPE(2), OT_F32, NULL);
    char want[128];
    snprintf(want, sizeof want, "({'shape': (2,), 'op': 'abs'}, tensor-0x%" PRIxPTR ", None)",
             (uintptr_t)t);
    CHECK_OUT(ot_print, ot_abs(t), want);
    snprintf(want, sizeof want, "(abs tensor-0x%" PRIxPTR ")", (uintptr_t)t);
    CHECK_OUT(ot_pp, ot_abs(t), want);
    ot_tensor_free(t);
    ot_backend_free(be);
}

TEST(print_composite_expansion)
{
    /* The tuple form shows what runs: the expansion, not the tag. */
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(3), OT_F32, "x");
    CHECK_OUT(ot_print, ot_squared_l2(x),
              "({'shape': (), 'op': 'sum', 'axis': None}, ({'shape': (3,), 'op': 'sqr'}, x, None), None)");
    CHECK_OUT(ot_print, ot_clip(x, -1.0, 1.0),
              "({'shape': (3,), 'op': 'minimum'}, ({'shape': (3,), 'op': 'maximum'}, x, -1.0), 1.0)");
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(print_pp_categories)
{
    ot_backend *be = ref();
    ot_tensor *a = named(be, OT_SHAPE(2, 2), OT_F32, "a");
    ot_tensor *b = named(be, OT_SHAPE(2, 2), OT_F32, "b");
    ot_tensor *i = named(be, OT_SHAPE(2), OT_I32, "i");
    CHECK_OUT(ot_pp, ot_add(a, b), "(a + b)");
    CHECK_OUT(ot_pp, ot_sub(a, b), "(a - b)");
    CHECK_OUT(ot_pp, ot_mul(a, b), "(a * b)");
    CHECK_OUT(ot_pp, ot_div(a, b), "(a / b)");
    CHECK_OUT(ot_pp, ot_pow(a, 2), "(a ** 2.0)");
    CHECK_OUT(ot_pp, ot_minimum(a, b), "(minimum a b)");
    CHECK_OUT(ot_pp, ot_dot(a, b), "(dot a b)");
    CHECK_OUT(ot_pp, ot_eq(a, b), "(eq a b)");
    CHECK_OUT(ot_pp, ot_exp(a), "(exp a)");
    CHECK_OUT(ot_pp, ot_tanh(ot_add(ot_mul(a, b), ot_div(a, b))),
              "(tanh ((a * b) + (a / b)))");
    CHECK_OUT(ot_pp, ot_sum(a, .axis = 1, .keepdims = true), "(sum a axis=1 keepdims)");
    CHECK_OUT(ot_pp, ot_sum(a), "(sum a)");
    CHECK_OUT(ot_pp, ot_argmax(a, .axis = -2), "(argmax a axis=0)");
    CHECK_OUT(ot_pp, ot_T(a), "(transpose a perm=(1,0))");
    CHECK_OUT(ot_pp, ot_cast(a, .dtype = OT_F64), "(cast a dtype=float64)");
    CHECK_OUT(ot_pp, ot_onehot(i, .depth = 10, .axis = 1), "(onehot i depth=10 axis=1)");
    CHECK_OUT(ot_pp, ot_rand(OT_SHAPE(3, 4), .seed = 0), "(rand shape=(3,4) seed=0)");
    CHECK_OUT(ot_pp, ot_tensor_node(a), "a");
    CHECK_OUT(ot_pp, ot_const(0.5), "0.5");
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(i);
    ot_backend_free(be);
}

TEST(print_pp_zero_operand_is_binary)
{
    /* neon printed x - 0 as a unary op; a zero is an ordinary operand. */
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), OT_F32, "x");
    CHECK_OUT(ot_pp, ot_sub(x, 0), "(x - 0.0)");
    CHECK_OUT(ot_pp, ot_sub(0.0, x), "(0.0 - x)");
    CHECK_OUT(ot_pp, ot_mul(ot_add(x, 0.0f), 0.0), "((x + 0.0) * 0.0)");
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(print_pp_composites)
{
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2, 3), OT_F32, "x");
    ot_tensor *p = named(be, OT_SHAPE(2, 3), OT_F32, "p");
    ot_tensor *t = named(be, OT_SHAPE(2, 3), OT_F32, "t");
    CHECK_OUT(ot_pp, ot_softmax(x, .axis = 1), "(softmax x axis=1)");
    CHECK_OUT(ot_pp, ot_softmax(x, .axis = -1), "(softmax x axis=1)");
    CHECK_OUT(ot_pp, ot_logsoftmax(x, .axis = 0), "(logsoftmax x axis=0)");
    CHECK_OUT(ot_pp, ot_var(x, .axis = 0, .ddof = 1), "(var x axis=0 ddof=1)");
    CHECK_OUT(ot_pp, ot_var(x, .axis = 0), "(var x axis=0)");
    CHECK_OUT(ot_pp, ot_std(x), "(std x)");
    CHECK_OUT(ot_pp, ot_clip(x, -1.0, 1.0), "(clip x lo=-1.0 hi=1.0)");
    CHECK_OUT(ot_pp, ot_cross_entropy(p, t, .axis = 1), "(cross_entropy p t axis=1)");
    CHECK_OUT(ot_pp, ot_squared_l2(x, .axis = 1, .keepdims = true),
              "(squared_l2 x axis=1 keepdims)");
    /* A composite inside an ordinary expression, and one over an expression. */
    CHECK_OUT(ot_pp, ot_add(ot_softmax(ot_exp(x), .axis = 1), 1),
              "((softmax (exp x) axis=1) + 1.0)");
    ot_tensor_free(x);
    ot_tensor_free(p);
    ot_tensor_free(t);
    ot_backend_free(be);
}

/* Occurrences of sub in s. A plain scan: ASan's strstr measures the whole
 * haystack on every call, which is quadratic over megabytes of output. */
static size_t count(const char *s, const char *sub)
{
    size_t n = 0, k = strlen(sub);
    for (const char *q = s; *q; q++)
        if (*q == sub[0] && memcmp(q, sub, k) == 0) {
            n++;
            q += k - 1;
        }
    return n;
}

TEST(print_graphviz_exact)
{
    ot_backend *be = ref();
    ot_tensor *x0 = named(be, OT_SHAPE(2, 2), OT_F32, "x0");
    ot_tensor *x1 = named(be, OT_SHAPE(2, 2), OT_F32, "x\"1");
    CHECK_OUT(ot_graphviz, ot_mul(ot_add(x0, x1), 0.5),
              "digraph optree {\n"
              "  n0 [shape=box, label=\"x0\\n(2, 2) float32\"];\n"
              "  n1 [shape=box, label=\"x\\\"1\\n(2, 2) float32\"];\n"
              "  n2 [shape=ellipse, label=\"add\\n(2, 2) float32\"];\n"
              "  n0 -> n2;\n"
              "  n1 -> n2;\n"
              "  n3 [shape=plaintext, label=\"0.5\\n() float32\"];\n"
              "  n4 [shape=ellipse, label=\"mul\\n(2, 2) float32\"];\n"
              "  n2 -> n4;\n"
              "  n3 -> n4;\n"
              "}\n");
    CHECK_OUT(ot_graphviz, ot_sum(x0, .axis = 1),
              "digraph optree {\n"
              "  n0 [shape=box, label=\"x0\\n(2, 2) float32\"];\n"
              "  n1 [shape=ellipse, label=\"sum axis=1\\n(2,) float32\"];\n"
              "  n0 -> n1;\n"
              "}\n");
    ot_tensor_free(x0);
    ot_tensor_free(x1);
    ot_backend_free(be);
}

TEST(print_graphviz_shared_once)
{
    /* A diamond of depth 40: 2^40 paths, 41 distinct nodes, 80 edges. */
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), OT_F32, "x");
    ot_node *d = ot_tensor_node(x);
    for (int i = 0; i < 40; i++) d = ot_add(d, d);
    char *s = test__capture(ot_graphviz, d);
    CHECK(s != NULL);
    if (s) {
        CHECK_INT(count(s, "label="), 41);
        CHECK_INT(count(s, " -> "), 80);
        CHECK_INT(count(s, "x\\n"), 1);
        CHECK(strncmp(s, "digraph optree {\n", 17) == 0);
    }
    free(s);
    /* A tagged root names its composite. */
    s = test__capture(ot_graphviz, ot_softmax(x));
    CHECK(s && strstr(s, "label=\"div [softmax]\\n(2,) float32\""));
    free(s);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(print_errors)
{
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), OT_F32, "x");
    ot_node *e = ot_exp(x);
    int (*fns[])(const ot_node *, FILE *) = {ot_print, ot_pp, ot_graphviz};
    FILE *ro = fopen("/dev/null", "r");
    CHECK(ro != NULL);
    for (int k = 0; k < 3; k++) {
        ot_clear_error();
        CHECK_INT(fns[k](NULL, stdout), OT_ENULL);
        CHECK_ERR(OT_ENULL, "tree is NULL");
        CHECK_INT(fns[k](e, NULL), OT_ENULL);
        CHECK_ERR(OT_ENULL, "FILE is NULL");
        if (ro) {
            CHECK_INT(fns[k](e, ro), OT_EIO);
            CHECK_ERR(OT_EIO, "write failed");
            clearerr(ro);
        }
    }
    /* A NULL tree from a failed builder reports the builder's error. */
    ot_tensor *y = named(be, OT_SHAPE(3), OT_F32, "y");
    ot_node *bad = ot_add(x, y);
    CHECK(bad == NULL);
    CHECK_INT(ot_pp(bad, stdout), OT_ESHAPE);
    CHECK_ERR(OT_ESHAPE, "add", "(2,)", "(3,)");
    /* Success clears the slot. */
    ot_add(x, y);
    FILE *null = fopen("/dev/null", "w");
    CHECK_INT(ot_pp(e, null), 0);
    CHECK_INT(ot_errcode(), 0);
    fclose(null);
    if (ro) fclose(ro);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(print_deep_chain)
{
    /* Height 100,000: every form walks with a heap stack. */
    enum { DEPTH = TEST_HEIGHT };
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), OT_F32, "x");
    ot_pool *pool = ot_pool_push();
    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = i % 2 ? ot_neg(n) : ot_add(n, 1);
    CHECK(n != NULL);
    char *s = test__capture(ot_pp, n);
    CHECK(s != NULL);
    if (s) {
        CHECK_INT(count(s, "("), DEPTH);
        CHECK_INT(count(s, "(neg "), DEPTH / 2);
        CHECK(strstr(s, "(x + 1.0)") != NULL);
    }
    free(s);
    s = test__capture(ot_print, n);
    CHECK(s && count(s, "'op': 'add'") == DEPTH / 2);
    free(s);
    s = test__capture(ot_graphviz, n);
    CHECK(s && count(s, " -> ") == DEPTH + DEPTH / 2);
    free(s);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
}

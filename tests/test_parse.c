/*
 * test_parse.c - ot_parse (src/core/parse.c): every op of the table and a
 * registered op parsed by its call form equal to the builder's tree;
 * operators, precedence and literals; values of a parsed W3 bitwise those
 * of the built tree; every error with its column; deep and long input; and
 * a byte fuzz that must never crash.
 */
#include "test.h"

#include <stdint.h>
#include <stdlib.h>

#include "../examples/custom_ops.h"
#include "fuzz.h"

static const char *const names[] = {"a", "b", "m", "n", "i"};

typedef struct fx {
    ot_backend *be;
    ot_tensor *a, *b, *m, *n, *i;
    ot_node *nodes[5];
} fx;

static void fx_new(fx *f)
{
    unsetenv("OT_BACKEND");
    f->be = ot_backend_new("cpu", NULL);
    CHECK(f->be != NULL);
    f->a = ot_full(f->be, OT_SHAPE(3, 4), OT_F32, 1.5);
    f->b = ot_full(f->be, OT_SHAPE(3, 4), OT_F32, 0.5);
    f->m = ot_full(f->be, OT_SHAPE(4, 2), OT_F32, 2);
    f->n = ot_full(f->be, OT_SHAPE(2, 4, 2), OT_F32, 1);
    f->i = ot_zeros(f->be, OT_SHAPE(3), OT_I32);
    ot_tensor *t[] = {f->a, f->b, f->m, f->n, f->i};
    for (int k = 0; k < 5; k++) {
        ot_tensor_set_name(t[k], names[k]);
        f->nodes[k] = ot_tensor_node(t[k]);
    }
}

static void fx_free(fx *f)
{
    ot_tensor *t[] = {f->a, f->b, f->m, f->n, f->i};
    for (int k = 0; k < 5; k++) ot_tensor_free(t[k]);
    ot_backend_free(f->be);
    ot_pool_drain();
}

static ot_node *parse(const fx *f, const char *s) { return ot_parse(s, 5, names, f->nodes); }

#define CHECK_PARSE(f, text, tree)                                            \
    do {                                                                      \
        ot_node *p_ = parse((f), (text));                                     \
        if (!fuzz_same_tree(p_, (tree)))                                           \
            test__fail(__FILE__, __LINE__, "'%s' does not parse to %s (%s)", (text), #tree, \
                       p_ ? "another tree" : ot_errmsg());                    \
    } while (0)

/* Every op of the table by its name: elementwise and reductions from their
 * rows, the rest with attributes written both ways. */
TEST(parse_every_op)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    ot_node *a = f.nodes[0], *b = f.nodes[1];
    char text[128];
    int tested = 0;
    for (int op = 0; op < OT_OP_COUNT; op++) {
        int kind = ot_op_kind((ot_op)op);
        if (ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM) continue;
        ot_args all = {.axis = OT_AXIS_ALL}, ax1 = {.axis = 1};
        if (kind == OT_KIND_UNARY) {
            snprintf(text, sizeof text, "%s(a)", ot_op_name((ot_op)op));
            CHECK_PARSE(&f, text, ot_build_at((ot_op)op, a, NULL, NULL, NULL, 0));
            tested++;
        } else if (kind == OT_KIND_BINARY) {
            snprintf(text, sizeof text, "%s(a, b)", ot_op_name((ot_op)op));
            CHECK_PARSE(&f, text, ot_build_at((ot_op)op, a, b, NULL, NULL, 0));
            tested++;
        } else if (kind == OT_KIND_REDUCE) {
            snprintf(text, sizeof text, "%s(a)", ot_op_name((ot_op)op));
            CHECK_PARSE(&f, text, ot_build_at((ot_op)op, a, NULL, &all, NULL, 0));
            snprintf(text, sizeof text, "%s(a, axis=1)", ot_op_name((ot_op)op));
            CHECK_PARSE(&f, text, ot_build_at((ot_op)op, a, NULL, &ax1, NULL, 0));
            snprintf(text, sizeof text, "%s(a, -1, True)", ot_op_name((ot_op)op));
            CHECK_PARSE(&f, text, ot_build_at((ot_op)op, a, NULL, &(ot_args){.axis = -1, .keepdims = true},
                                              NULL, 0));
            tested++;
        }
    }
    CHECK(tested > 40);
    CHECK_PARSE(&f, "dot(a, m)", ot_dot(f.a, f.m));
    CHECK_PARSE(&f, "batched_dot(n, transpose(n, (0, 2, 1)))",
                ot_batched_dot(f.n, ot_T(f.n, {0, 2, 1})));
    CHECK_PARSE(&f, "transpose(a)", ot_T(f.a));
    CHECK_PARSE(&f, "transpose(a, perm=(1, 0))", ot_T(f.a, {1, 0}));
    CHECK_PARSE(&f, "cast(a, f64)", ot_cast(f.a, OT_F64));
    CHECK_PARSE(&f, "cast(a, dtype=int32)", ot_cast(f.a, OT_I32));
    CHECK_PARSE(&f, "onehot(i, 10)", ot_onehot(f.i, 10));
    CHECK_PARSE(&f, "onehot(i, depth=5, axis=0, dtype=f64)", ot_onehot(f.i, 5, 0, OT_F64));
    CHECK_PARSE(&f, "rand(shape=(3, 4), seed=7)", ot_rand(OT_SHAPE(3, 4), 7));
    CHECK_PARSE(&f, "rand((2,), 1, f64)", ot_rand(OT_SHAPE(2), 1, OT_F64));
    CHECK_PARSE(&f, "var(a, 0, 1)", ot_var(f.a, 0, 1));
    CHECK_PARSE(&f, "std(a, axis=1, keepdims=1)", ot_std(f.a, .axis = 1, .keepdims = true));
    CHECK_PARSE(&f, "clip(a, 0, 6)", ot_clip(f.a, 0, 6));
    CHECK_PARSE(&f, "clip(a, lo=-1.5, hi=inf)", ot_clip(f.a, -1.5, INFINITY));
    CHECK_PARSE(&f, "softmax(a, axis=1)", ot_softmax(f.a, .axis = 1));
    CHECK_PARSE(&f, "logsoftmax(a)", ot_logsoftmax(f.a));
    CHECK_PARSE(&f, "cross_entropy(softmax(a, 1), b, axis=1)",
                ot_cross_entropy(ot_softmax(f.a, 1), f.b, .axis = 1));
    CHECK_PARSE(&f, "squared_l2(a)", ot_squared_l2(f.a));
    CHECK_PARSE(&f, "keep(a)", ot_keep(f.a));
    ot_pool_pop(pool);
    fx_free(&f);
}

/* What ot_pp writes of t, parsed back, is t. */
static void check_round_trip(const fx *f, ot_node *t, const char *what)
{
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    CHECK_INT(ot_pp(t, m), 0);
    fclose(m);
    ot_node *back = ot_parse(text, 5, names, f->nodes);
    if (!fuzz_same_tree(back, t))
        test__fail(__FILE__, __LINE__, "%s: ot_pp wrote '%s', parsed to %s", what, text,
                   back ? "another tree" : ot_errmsg());
    free(text);
}

/* Every op of the table, written by ot_pp and read back: the same tree,
 * attributes, dtypes of constants and shared nodes included. */
TEST(parse_reads_ot_pp_back)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    ot_node *a = f.nodes[0], *b = f.nodes[1];
    char what[64];
    for (int op = 0; op < OT_OP_COUNT; op++) {
        int kind = ot_op_kind((ot_op)op);
        ot_args ax = {.axis = 1, .keepdims = true};
        ot_node *t = NULL;
        if (ot_op_flags((ot_op)op) & OT_FLAG_CUSTOM) continue;
        if (kind == OT_KIND_UNARY) t = ot_build_at((ot_op)op, a, NULL, NULL, NULL, 0);
        else if (kind == OT_KIND_BINARY) t = ot_build_at((ot_op)op, a, b, NULL, NULL, 0);
        else if (kind == OT_KIND_REDUCE) t = ot_build_at((ot_op)op, a, NULL, &ax, NULL, 0);
        if (!t) continue;
        snprintf(what, sizeof what, "op %s", ot_op_name((ot_op)op));
        check_round_trip(&f, t, what);
    }
    ot_node *x = ot_add(f.a, f.b);
    ot_node *three[] = {f.nodes[0], ot_exp(f.b), f.nodes[0]};
    ot_node *trees[] = {
        ot_dot(f.a, f.m), ot_batched_dot(f.n, ot_T(f.n, {0, 2, 1})), ot_T(f.a),
        ot_cast(f.a, OT_F64), ot_onehot(f.i, 5, 0, OT_F64), ot_rand(OT_SHAPE(3, 4), 7, OT_F64),
        ot_var(f.a, 0, 1), ot_std(f.a, .axis = 1, .keepdims = true), ot_clip(f.a, -1.5, 6),
        ot_softmax(f.a, .axis = 1), ot_logsoftmax(f.a),
        ot_cross_entropy(ot_softmax(f.a, 1), f.b, .axis = 1), ot_squared_l2(f.a), ot_keep(f.a),
        ot_mul(x, x),                                    /* a shared node: %1 */
        ot_pow(-2.5, f.a),                               /* a negative base */
        ot_add(ot_cast(f.a, OT_F64), ot_constf(0.1f)),  /* an f32 constant in f64 */
        ot_exp(ot_constf(0.1f)), ot_constf(2.5f), ot_consti(-3), ot_mul(f.i, 2),
        ot_named(ot_mul(ot_named(ot_add(f.a, 1), "h1"), ot_named(ot_const(0.5), "lr")), "out"),
        ot_slice_node(ot_exp(f.a), OT_IDX(2), OT_RANGE(3, OT_NONE, -2)),
        ot_slice_node(ot_dot(f.a, f.m), OT_RANGE(0, 2), OT_ALL),
        ot_reshape_node(ot_T(f.a), OT_SHAPE(2, 6)),
        ot_concat(3, three, 0), ot_stack_nodes(2, three, 1),
    };
    for (size_t k = 0; k < sizeof trees / sizeof *trees; k++) {
        snprintf(what, sizeof what, "tree %zu", k);
        CHECK(trees[k] != NULL);
        if (trees[k]) check_round_trip(&f, trees[k], what);
    }
    /* seeds past 2^53 read back exactly (through a double 2^53 + 1 was
     * 2^53), up to 2^64 - 1 (refused) */
    static const uint64_t big[] = {(1ULL << 53) + 1, (1ULL << 63) - 1, 1ULL << 63, UINT64_MAX};
    for (size_t k = 0; k < sizeof big / sizeof *big; k++) {
        snprintf(what, sizeof what, "seed %llu", (unsigned long long)big[k]);
        check_round_trip(&f, ot_add(f.a, ot_rand(OT_SHAPE(3, 4), .seed = big[k])), what);
    }
    CHECK_PARSE(&f, "rand(shape=(2,), seed=9007199254740993)",
                ot_rand(OT_SHAPE(2), .seed = (1ULL << 53) + 1));
    CHECK_PARSE(&f, "rand(shape=(2,), seed=7.0)", ot_rand(OT_SHAPE(2), .seed = 7));
    CHECK_PARSE(&f, "transpose(n, perm=(0, 2, 1))", ot_T(f.n, {0, 2, 1}));
    CHECK_INT(ot_tensor_set_axes(f.n, "B,R,C"), 0);
    check_round_trip(&f, ot_sum(f.n, .axes = "R"), "named axes");
    CHECK_INT(ot_tensor_set_axes(f.n, NULL), 0);
    ot_node *labelled = parse(&f, "h1:(a + b) * lr:0.5");
    CHECK(labelled && strcmp(ot_node_name(ot_node_child(labelled, 0)), "h1") == 0);
    CHECK(parse(&f, "h:a") == NULL);
    CHECK_ERR(OT_EINVAL, "a label names a node built here, not 'a'");
    CHECK(parse(&f, "%1 = (a + b)\n(%1 * %2)") == NULL);
    CHECK_ERR(OT_EINVAL, "no %2 defined");
    CHECK(parse(&f, "%2 = a") == NULL);
    CHECK_ERR(OT_EINVAL, "expected %1 here");
    ot_pool_pop(pool);
    fx_free(&f);
}

/* Views of named tensors are named as NumPy writes them ("a[1:3]", "m.T",
 * "n.reshape(...)", chains, axis names after them): ot_pp writes such a
 * leaf by its name and ot_parse, handed those names, reads the same tree
 * back, the longest name that the text spells winning over its base's;
 * a view name running on into an identifier is no match. */
TEST(parse_reads_view_names_back)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    ot_tensor *v[4] = {ot_slice(f.a, OT_RANGE(1, 3)), ot_transpose(f.m, NULL),
                       ot_reshape(f.n, OT_SHAPE(4, 4)), NULL};
    v[3] = v[0] ? ot_transpose(v[0], NULL) : NULL;
    CHECK(v[0] && v[1] && v[2] && v[3]);
    if (!v[0] || !v[1] || !v[2] || !v[3]) return;
    CHECK_INT(ot_tensor_set_axes(v[1], "B,F"), 0);
    const char *vn[9];
    ot_node *vnodes[9];
    for (int k = 0; k < 5; k++) vn[k] = names[k], vnodes[k] = f.nodes[k];
    for (int k = 0; k < 4; k++) vn[5 + k] = ot_tensor_name(v[k]), vnodes[5 + k] = ot_tensor_node(v[k]);
    CHECK(strcmp(vn[5], "a[1:3]") == 0 && strcmp(vn[6], "m.T") == 0 && strcmp(vn[8], "a[1:3].T") == 0);
    ot_node *t = ot_add(ot_sum(ot_mul(v[0], 2.0f)), ot_sum(ot_add(ot_dot(v[1], f.m), ot_sum(v[2]))));
    t = ot_add(t, ot_sum(ot_exp(v[3])));
    char *text = NULL;
    size_t len = 0;
    FILE *m = open_memstream(&text, &len);
    CHECK_INT(ot_pp(t, m), 0);
    fclose(m);
    ot_node *back = ot_parse(text, 9, vn, vnodes);
    if (!fuzz_same_tree(back, t))
        test__fail(__FILE__, __LINE__, "ot_pp wrote '%s', parsed to %s", text,
                   back ? "another tree" : ot_errmsg());
    free(text);
    CHECK(ot_parse("a[1:3].T", 9, vn, vnodes) == vnodes[8]);   /* not a[1:3], then .T */
    CHECK(ot_parse("m.T(B,F)", 9, vn, vnodes) == vnodes[6]);
    CHECK(ot_parse("m.Tx", 9, vn, vnodes) == NULL);
    CHECK_ERR(OT_EINVAL, "col 2");
    CHECK(ot_parse("a", 1, (const char *[]){"a[\x01]"}, vnodes) == NULL);
    CHECK_ERR(OT_EINVAL, "is not a name an expression can spell");
    CHECK(ot_parse("a", 1, (const char *[]){".T"}, vnodes) == NULL);
    CHECK_ERR(OT_EINVAL, "is not a name an expression can spell");
    for (int k = 0; k < 4; k++) ot_tensor_free(v[k]);
    ot_pool_pop(pool);
    fx_free(&f);
}

/* Node names that are no identifier ('/' and spaces as ngraph's op names
 * have them, a digit first, inf and nan, quotes and backslashes) are
 * written by ot_pp as quoted labels and read back, name and tree: bare,
 * "dense/fc 1:(a + 1.0)" was unreadable (read as a division). */
TEST(parse_reads_quoted_labels_back)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    static const char *const odd[] = {"dense/fc 1", "h:1", "1h", "inf", "nanf", "%1", "x[1]",
                                      "it's", "back\\slash", "\xc3\xa9t\xc3\xa9", "a", "h1"};
    for (size_t k = 0; k < sizeof odd / sizeof *odd; k++) {
        ot_node *h = ot_named(ot_add(f.a, 1.0f), odd[k]);
        ot_node *lr = ot_named(ot_constf(0.5f), odd[k]);
        ot_node *trees[] = {ot_mul(h, h), ot_exp(h), ot_mul(f.a, lr), h};
        for (size_t t = 0; t < sizeof trees / sizeof *trees; t++) {
            char *text = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&text, &len);
            CHECK_INT(ot_pp(trees[t], m), 0);
            fclose(m);
            ot_node *back = parse(&f, text);
            const ot_node *named = !back ? NULL : t == 3 ? back
                                   : t == 2 ? ot_node_child(back, 1) : ot_node_child(back, 0);
            if (!fuzz_same_tree(back, trees[t]) || !named || !ot_node_name(named) ||
                strcmp(ot_node_name(named), odd[k]) != 0)
                test__fail(__FILE__, __LINE__, "name '%s': ot_pp wrote '%s', parsed to %s", odd[k],
                           text, back ? "another tree or name" : ot_errmsg());
            free(text);
        }
    }
    CHECK_PARSE(&f, "'dense/fc 1':(a + b)", ot_add(f.a, f.b));
    CHECK(parse(&f, "'h 1'") == NULL);
    CHECK_ERR(OT_EINVAL, "col 1: a quoted name is a label");
    CHECK(parse(&f, "'h 1") == NULL);
    CHECK_ERR(OT_EINVAL, "col 1: a quoted name is a label");
    CHECK(parse(&f, "'\\x01':(a + b)") == NULL);   /* a control character: refused by naming */
    CHECK(ot_errcode() == OT_EINVAL);
    ot_pool_pop(pool);
    fx_free(&f);
}

/* A tall tree reads back: ot_pp names a node every PP_MAX_HEIGHT levels
 * on its own line, so no line nests past ot_parse's 200 (a sum of 201
 * terms was written as 201 nested parentheses and refused; probe F). Left
 * and right chains, infix and calls, up to TEST_HEIGHT levels. */
TEST(parse_reads_tall_trees_back)
{
    fx f;
    fx_new(&f);
    static const int heights[] = {64, 65, 201, 1000, TEST_HEIGHT};
    for (size_t k = 0; k < sizeof heights / sizeof *heights; k++)
        for (int shape = 0; shape < 3; shape++) {
            ot_pool *pool = ot_pool_push();
            ot_node *t = ot_tensor_node(f.a);
            for (int i = 0; i < heights[k]; i++)
                t = shape == 0 ? ot_add(t, f.b) : shape == 1 ? ot_sub(f.b, t) : ot_exp(t);
            char *text = NULL;
            size_t len = 0;
            FILE *m = open_memstream(&text, &len);
            CHECK_INT(ot_pp(t, m), 0);
            fclose(m);
            ot_node *back = parse(&f, text);
            if (!fuzz_same_tree(back, t))
                test__fail(__FILE__, __LINE__, "height %d, shape %d: %s", heights[k], shape,
                           back ? "another tree" : ot_errmsg());
            CHECK(heights[k] > 64 || !strchr(text, '%'));   /* short trees: one expression */
            free(text);
            ot_pool_pop(pool);
        }
    fx_free(&f);
}

TEST(parse_registered_op)
{
    fx f;
    fx_new(&f);
    ot_op gelu = ot_op_lookup("gelu");
    ot_op_def def = gelu_def();
    if (gelu == OT_OP_NONE) gelu = ot_op_register(&def);
    CHECK(gelu != OT_OP_NONE);
    ot_pool *pool = ot_pool_push();
    CHECK_PARSE(&f, "gelu(a * 2)", ot_apply(gelu, ot_mul(f.a, 2)));
    CHECK(parse(&f, "custom1(a)") == NULL);
    CHECK_ERR(OT_EINVAL, "col 1: unknown function 'custom1'");
    ot_pool_pop(pool);
    fx_free(&f);
}

TEST(parse_operators_and_literals)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    ot_tensor *a = f.a, *b = f.b;
    CHECK_PARSE(&f, "a + b * a", ot_add(a, ot_mul(b, a)));
    CHECK_PARSE(&f, "(a + b) * a", ot_mul(ot_add(a, b), a));
    CHECK_PARSE(&f, "a - b - a", ot_sub(ot_sub(a, b), a));
    CHECK_PARSE(&f, "a / b / a", ot_div(ot_div(a, b), a));
    CHECK_PARSE(&f, "-a ** 2", ot_neg(ot_pow(a, 2)));
    CHECK_PARSE(&f, "a ** b ** a", ot_pow(a, ot_pow(b, a)));
    CHECK_PARSE(&f, "a ** -b", ot_pow(a, ot_neg(b)));
    CHECK_PARSE(&f, "--a", ot_neg(ot_neg(a)));
    CHECK_PARSE(&f, "+a", ot_tensor_node(a));
    CHECK_PARSE(&f, "a * -2", ot_mul(a, -2));
    CHECK_PARSE(&f, "a * -2.5e-1", ot_mul(a, -0.25));
    CHECK_PARSE(&f, "a * .5 + 3.", ot_add(ot_mul(a, 0.5), 3.0));
    CHECK_PARSE(&f, "a < b", ot_lt(a, b));
    CHECK_PARSE(&f, "a <= b", ot_le(a, b));
    CHECK_PARSE(&f, "a > b", ot_gt(a, b));
    CHECK_PARSE(&f, "a >= b", ot_ge(a, b));
    CHECK_PARSE(&f, "a == b + 1", ot_eq(a, ot_add(b, 1)));
    CHECK_PARSE(&f, "a != b", ot_ne(a, b));
    CHECK_PARSE(&f, "a < b == b < a", ot_lt(ot_eq(ot_lt(a, b), b), a));   /* not chained */
    CHECK_PARSE(&f, " \ttanh( a*b+a/b )\n", ot_tanh(ot_add(ot_mul(a, b), ot_div(a, b))));
    CHECK_PARSE(&f, "a * inf + nan", ot_add(ot_mul(a, INFINITY), NAN));
    CHECK_PARSE(&f, "a[1:3]", ot_slice_node(a, OT_RANGE(1, 3)));
    CHECK_PARSE(&f, "a[:, ::-1]", ot_slice_node(a, OT_ALL, OT_RANGE(OT_NONE, OT_NONE, -1)));
    CHECK_PARSE(&f, "(a + b)[0, 1:]", ot_slice_node(ot_add(a, b), OT_IDX(0), OT_RANGE(1, OT_END)));
    CHECK_PARSE(&f, "exp(a)[-1][::2]",
                ot_slice_node(ot_slice_node(ot_exp(a), OT_IDX(-1)), OT_RANGE(OT_NONE, OT_NONE, 2)));
    CHECK_PARSE(&f, "reshape(a, shape=(4, 3))", ot_reshape_node(a, OT_SHAPE(4, 3)));
    CHECK_PARSE(&f, "reshape(a, (2, -1))", ot_reshape_node(a, OT_SHAPE(2, -1)));
    ot_node *ab[] = {f.nodes[0], f.nodes[1]};
    CHECK_PARSE(&f, "concat(a, b, axis=1)", ot_concat(2, ab, 1));
    /* integer literals are i32 constants, others f64: both weak */
    ot_node *two = parse(&f, "2");
    CHECK(two && ot_node_dtype(two) == OT_I32);
    ot_node *big = parse(&f, "3000000000");
    CHECK(big && ot_node_dtype(big) == OT_F64);
    ot_node *sum_exp = parse(&f, "sum(exp(a - max(a, axis=1, keepdims=1)), axis=1)");
    CHECK(fuzz_same_tree(sum_exp, ot_sum(ot_exp(ot_sub(a, ot_max(a, 1, true))), 1)));
    ot_pool_pop(pool);
    fx_free(&f);
}

/* Parsed and built trees assign the same bits (random data, f32). */
TEST(parse_values_match_builders)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_empty(f.be, OT_SHAPE(64, 33), OT_F32);
    ot_tensor *y = ot_empty(f.be, OT_SHAPE(64, 33), OT_F32);
    CHECK_INT(ot_assign(x, ot_add(ot_rand(OT_SHAPE(64, 33), 1), 0.5)), 0);
    CHECK_INT(ot_assign(y, ot_add(ot_rand(OT_SHAPE(64, 33), 2), 0.5)), 0);
    const char *xy[] = {"x", "y"};
    ot_node *in[] = {ot_tensor_node(x), ot_tensor_node(y)};
    const struct { const char *text; ot_node *tree; } cases[] = {
        {"tanh(x*y + x/y)", ot_tanh(ot_add(ot_mul(x, y), ot_div(x, y)))},
        {"sum(exp(x - max(x, axis=1, keepdims=1)), axis=1)",
         ot_sum(ot_exp(ot_sub(x, ot_max(x, 1, true))), 1)},
        {"dot(x, transpose(y)) * 0.5 - 1", ot_sub(ot_mul(ot_dot(x, ot_T(y)), 0.5), 1)},
        {"mean(sig(x) ** 2, 0)", ot_mean(ot_pow(ot_sig(x), 2), 0)},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        ot_node *p = ot_parse(cases[k].text, 2, xy, in);
        ot_tensor *vp = p ? ot_eval(p) : NULL, *vb = ot_eval(cases[k].tree);
        CHECK(vp && vb);
        if (!vp || !vb) continue;
        size_t n = (size_t)ot_tensor_numel(vb);
        float *hp = calloc(n, sizeof *hp), *hb = calloc(n, sizeof *hb);
        CHECK_INT(ot_get(vp, hp), 0);
        CHECK_INT(ot_get(vb, hb), 0);
        CHECK(memcmp(hp, hb, n * sizeof *hp) == 0);
        free(hp);
        free(hb);
        ot_tensor_free(vp);
        ot_tensor_free(vb);
    }
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_tensor_free(y);
    fx_free(&f);
}

TEST(parse_errors_name_the_column)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    const struct { const char *text; int code; const char *msg; } bad[] = {
        {"tanhh(a)", OT_EINVAL, "col 1: unknown function 'tanhh'; did you mean 'tanh'?"},
        {"a + tanhh(b)", OT_EINVAL, "col 5: unknown function 'tanhh'"},
        {"a + zzzzzz(b)", OT_EINVAL, "col 5: unknown function 'zzzzzz'"},
        {"a + c", OT_EINVAL, "col 5: unknown name 'c'; did you mean 'a'?"},
        {"a + qqqq", OT_EINVAL, "col 5: unknown name 'qqqq'"},
        {"a * tanh", OT_EINVAL, "col 5: 'tanh' is a function: write tanh(...)"},
        {"a +", OT_EINVAL, "col 4: unexpected end of expression"},
        {"", OT_EINVAL, "col 1: unexpected end of expression"},
        {"(a + b", OT_EINVAL, "col 7: expected ')'"},
        {"a b", OT_EINVAL, "col 3: unexpected 'b' after the expression"},
        {"a $ b", OT_EINVAL, "col 3: unexpected '$'"},
        {"sum(a, foo=1)", OT_EINVAL, "col 8: sum takes no argument 'foo'; it takes axis,keepdims"},
        {"sum(a, 1, 1, 1)", OT_EINVAL, "col 14: sum takes 1 operand and then axis,keepdims"},
        {"sum(a, axis=1, axis=0)", OT_EINVAL, "col 16: axis given twice"},
        {"sum(a, 1, axis=0)", OT_EINVAL, "axis given twice"},
        {"sum(a, axis=1.5)", OT_EINVAL, "axis must be an integer"},
        {"sum(a, axis=b)", OT_EINVAL, "axis must be a number"},
        {"cast(a, f8)", OT_EINVAL, "dtype must be f32, f64, i32, f16 or bf16"},
        {"transpose(a, (1, 0)", OT_EINVAL, "expected ',' or ')'"},
        {"transpose(a, perm=1)", OT_EINVAL, "perm must be a tuple"},
        {"add(a)", OT_EINVAL, "col 1: add takes 2 operands, not 1"},
        {"exp(a, b)", OT_EINVAL, "exp takes 1 operand"},
        {"a + m", OT_ESHAPE, "col 3: "},
        {"sum(a, axis=5)", OT_EINVAL, "col 1: "},
        {"dot(a, b)", OT_ESHAPE, "col 1: "},
        {"batched_dot(a, b)", OT_EINVAL, "col 1: batched_dot: operands must be 3-D"},
        {"a == = b", OT_EINVAL, "col 6: unexpected '='"},
        {"a ! b", OT_EINVAL, "unexpected '!'"},
        {"(sum a start=3)", OT_EINVAL, "start is not written as name=value"},
        {"a[1:2", OT_EINVAL, "col 6: expected ']' to close the index started at col 2"},
        {"a[x]", OT_EINVAL, "col 3: an index is an integer"},
        {"a[1:2:0]", OT_EINVAL, "a range's step is not 0"},
        {"a[5]", OT_EINVAL, "col 2: "},
        {"a[1,2,3]", OT_EINVAL, "col 2: "},
        /* a perm's length is the operand's rank (C's array cannot say it) */
        {"transpose(a, perm=(1,))", OT_EINVAL, "col 1: transpose: perm has 1 entry; its operand has 2 dims"},
        {"transpose(a, perm=(1, 0, 0))", OT_EINVAL, "perm has 3 entries"},
        {"transpose(a, ())", OT_EINVAL, "perm has 0 entries"},
        {"rand(shape=(2,), seed=18446744073709551616)", OT_EINVAL, "seed must be an integer in range"},
        {"rand(shape=(2,), seed=-1)", OT_EINVAL, "seed must be an integer in range"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ot_clear_error();
        if (parse(&f, bad[k].text) != NULL)
            test__fail(__FILE__, __LINE__, "'%s' parsed", bad[k].text);
        else
            test__check_err(__FILE__, __LINE__, bad[k].code, (const char *[]){"parse: ", bad[k].msg, NULL});
    }
    CHECK(ot_parse(NULL, 0, NULL, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "expression is NULL");
    CHECK(ot_parse("a", -1, names, f.nodes) == NULL);
    CHECK_ERR(OT_EINVAL, "negative count");
    CHECK(ot_parse("a", 1, NULL, f.nodes) == NULL);
    CHECK_ERR(OT_ENULL, "names or nodes is NULL");
    CHECK(ot_parse("a", 1, (const char *[]){NULL}, f.nodes) == NULL);
    CHECK_ERR(OT_ENULL, "names[0] is NULL");
    CHECK(ot_parse("a", 1, names, (ot_node *[]){NULL}) == NULL);
    CHECK_ERR(OT_ENULL, "nodes[0] is NULL");
    CHECK(ot_parse("1 + 2", 0, NULL, NULL) != NULL);   /* no names needed */
    /* Names an expression cannot spell, or that repeat: errors (a repeated
     * one, inf or nan silently lost; a long one was cut to 63 bytes and
     * matched another operand). */
    ot_node *two[2] = {f.nodes[0], f.nodes[1]};
    CHECK(ot_parse("x", 2, (const char *[]){"x", "x"}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "names[", "are both \"x\"");
    CHECK(ot_parse("inf", 1, (const char *[]){"inf"}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "names[0] \"inf\" is not a name an expression can spell");
    CHECK(ot_parse("nanf", 1, (const char *[]){"nanf"}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "names[0] \"nanf\" is not a name");
    CHECK(ot_parse("a", 1, (const char *[]){"a b"}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "names[0] \"a b\"");
    char n63[64], n100[101], n300[301];
    memset(n63, 'x', 63), n63[63] = 0;
    memset(n100, 'x', 100), n100[100] = 0;
    memset(n300, 'x', 300), n300[300] = 0;
    CHECK(ot_parse(n100, 1, (const char *[]){n63}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "unknown name");
    CHECK(ot_parse(n100, 2, (const char *[]){n63, n100}, two) == two[1]);   /* the 100-byte one */
    CHECK(ot_parse(n300, 1, (const char *[]){n63}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "a name of 300 bytes is longer than OT_NAME_MAX (256)");
    char label[320];   /* a label too long: the error stays (naming cleared it) */
    snprintf(label, sizeof label, "%s:(1 + 2)", n300);
    CHECK(ot_parse(label, 0, NULL, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "col 1: a name of 300 bytes is longer than OT_NAME_MAX (256)");
    CHECK(ot_parse("a", 1, (const char *[]){n300}, two) == NULL);
    CHECK_ERR(OT_EINVAL, "names[0]", "...");
    ot_pool_pop(pool);
    fx_free(&f);
}

/* Deep nesting is an error, never a deep recursion; long flat input parses
 * (each level of the grammar loops). */
TEST(parse_deep_and_long)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    enum { N = 100000 };
    char *s = malloc(2 * N + 4);
    for (int k = 0; k < N; k++) s[k] = '(';
    s[N] = 'a';
    for (int k = 0; k < N; k++) s[N + 1 + k] = ')';
    s[2 * N + 1] = '\0';
    CHECK(parse(&f, s) == NULL);
    CHECK_ERR(OT_EINVAL, "nested deeper than 200");
    memset(s, '-', N);
    strcpy(s + N, "a");
    CHECK(parse(&f, s) == NULL);
    CHECK_ERR(OT_EINVAL, "nested deeper than 200");
    for (int k = 0; k < N; k++) memcpy(s + 2 * k, k ? "+a" : " a", 2);
    s[2 * N] = '\0';
    ot_node *chain = parse(&f, s);
    CHECK(chain != NULL);
    char *nest = malloc(8 * 150 + 8);
    nest[0] = '\0';
    for (int k = 0; k < 150; k++) strcat(nest, "exp(");
    strcat(nest, "a");
    for (int k = 0; k < 150; k++) strcat(nest, ")");
    CHECK(parse(&f, nest) != NULL);
    free(nest);
    free(s);
    ot_pool_pop(pool);
    fx_free(&f);
}

/* k copies of unit, then tail (caller frees). */
static char *chain(const char *unit, int k, const char *tail)
{
    size_t u = strlen(unit), t = strlen(tail);
    char *s = malloc(u * (size_t)k + t + 1);
    for (int i = 0; i < k; i++) memcpy(s + u * (size_t)i, unit, u);
    memcpy(s + u * (size_t)k, tail, t + 1);
    return s;
}

/* Every recursive path counts depth: the right operand of ** went through
 * unary() uncounted, so a**a**...**a recursed until SIGSEGV (10^6 deep,
 * 10^5 under ASan). Each nesting below is refused past 200 levels, 10^6
 * deep, and parses 150 deep. */
TEST(parse_depth_every_path)
{
    fx f;
    fx_new(&f);
    static const struct { const char *unit, *tail; } paths[] = {
        {"a**", "a"},        {"a ** ", "a"},      {"2**", "2"},    {"a**-", "a"},
        {"-a**", "a"},       {"-", "a"},          {"+", "a"},      {"-+", "2"},
        {"(", "a"},          {"exp(", "a"},       {"sum(", "a"},   {"add(a, ", "a"},
        {"(exp ", "a"},      {"(add a ", "a"},    {"(neg -", "a"}, {"h:", "a"},
        {"h:(", "a"},        {"a[0:1]**", "a"},   {"a*(", "a"},    {"clip(", "a"},
    };
    enum { DEEP = 1000000, OK = 150 };
    for (size_t k = 0; k < sizeof paths / sizeof paths[0]; k++) {
        ot_pool *pool = ot_pool_push();
        char *s = chain(paths[k].unit, DEEP, paths[k].tail);
        ot_clear_error();
        if (parse(&f, s) != NULL)
            test__fail(__FILE__, __LINE__, "%s x %d parsed", paths[k].unit, DEEP);
        else
            test__check_err(__FILE__, __LINE__, OT_EINVAL,
                            (const char *[]){"parse: col ", "nested deeper than 200", NULL});
        free(s);
        ot_pool_pop(pool);
    }
    /* within the bound the same nestings parse (closed where they open) */
    static const struct { const char *unit, *tail, *close; } fine[] = {
        {"a**", "a", ""}, {"(", "a", ")"}, {"exp(", "a", ")"},
        {"(exp ", "a", ")"}, {"-", "a", ""},
    };
    for (size_t k = 0; k < sizeof fine / sizeof fine[0]; k++) {
        ot_pool *pool = ot_pool_push();
        char *open = chain(fine[k].unit, OK, fine[k].tail), *close = chain(fine[k].close, OK, "");
        char *s = malloc(strlen(open) + strlen(close) + 1);
        strcat(strcpy(s, open), close);
        if (!parse(&f, s)) test__fail(__FILE__, __LINE__, "%s x %d: %s", fine[k].unit, OK, ot_errmsg());
        free(open);
        free(close);
        free(s);
        ot_pool_pop(pool);
    }
    fx_free(&f);
}

/* Text of n copies of c between head and tail (caller frees). */
static char *repeat(const char *head, char c, size_t n, const char *tail)
{
    size_t h = strlen(head), t = strlen(tail);
    char *s = malloc(h + n + t + 1);
    memcpy(s, head, h);
    memset(s + h, c, n);
    memcpy(s + h + n, tail, t + 1);
    return s;
}

/* The constant text parses to: value and dtype (NaN when it fails). */
static double parsed_const(const fx *f, char *text, ot_dtype *dt)
{
    ot_node *c = parse(f, text);
    free(text);
    *dt = c ? ot_node_dtype(c) : (ot_dtype)-1;
    return c ? ot_node_value(c) : NAN;
}

#define CHECK_LITERAL(f, text, value, dtype)                                  \
    do {                                                                      \
        ot_dtype dt_;                                                         \
        double v_ = parsed_const((f), (text), &dt_);                          \
        if (v_ != (value) || dt_ != (dtype))                                  \
            test__fail(__FILE__, __LINE__, "%s reads as %.17g (dtype %d), not %.17g (%s)", \
                       #text, v_, (int)dt_, (double)(value), ot_errmsg());    \
    } while (0)

/* A literal of any length reads as strtod reads the whole of it (it was
 * cut at 127 characters: 1 and 200 zeros read as 1e126); one beyond its
 * type's range is an error at its column, never a quiet inf. */
TEST(parse_long_literals)
{
    fx f;
    fx_new(&f);
    ot_pool *pool = ot_pool_push();
    CHECK_LITERAL(&f, repeat("1", '0', 200, ""), 1e200, OT_F64);
    CHECK_LITERAL(&f, repeat("0.", '0', 130, "1e200"), 1e69, OT_F64);
    CHECK_LITERAL(&f, repeat("-0.", '0', 130, "1e200"), -1e69, OT_F64);
    CHECK_LITERAL(&f, repeat("0.", '0', 100000, "1e100006"), 1e5, OT_F64);
    CHECK_LITERAL(&f, repeat("", '0', 100000, "7"), 7, OT_I32);   /* an integer still */
    CHECK_LITERAL(&f, repeat("2147483647.", '0', 100000, ""), 2147483647.0, OT_F64);
    CHECK_LITERAL(&f, repeat("", '0', 100000, "2147483648"), 2147483648.0, OT_F64);
    /* 2^53 + 1 is halfway: only the last of 10^5 digits rounds it up */
    CHECK_LITERAL(&f, repeat("9007199254740993.", '0', 100000, "1"), 9007199254740994.0, OT_F64);
    CHECK_LITERAL(&f, repeat("9007199254740993.", '0', 100000, ""), 9007199254740992.0, OT_F64);
    /* 1 + 2^-24 is halfway in f32: the f reads straight to f32 */
    CHECK_LITERAL(&f, repeat("1.000000059604644775390625", '0', 1000, "1f"), 1.00000011920928955078125,
                  OT_F32);
    CHECK_LITERAL(&f, strdup("1e-400"), 0, OT_F64);   /* rounds to 0, as in Python */
    CHECK(parse(&f, "0x1") == NULL);                    /* no hex, as before */
    CHECK_ERR(OT_EINVAL, "col 2: unexpected 'x'");
    const struct { char *text; const char *msg; } bad[] = {
        {repeat("a + 1", '0', 100000, ""), "col 5: the literal 1000000000000000000000000000000000000000... is beyond f64's range"},
        {strdup("a * -1e400"), "col 6: the literal 1e400 is beyond f64's range"},
        {strdup("a * 1e39f"), "col 5: the literal 1e39 is beyond f32's range"},
        {strdup("clip(a, lo=-1e999)"), "col 13: the literal 1e999 is beyond"},
        {repeat("sum(a, axis=1", '0', 400, ")"), "col 13: the literal 1000"},
        {repeat("a[1", '0', 400, "]"), "col 3: the literal"},
        {repeat("reshape(a, (1", '0', 400, ", 2))"), "col 13: the literal"},
    };
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
        ot_clear_error();
        if (parse(&f, bad[k].text) != NULL)
            test__fail(__FILE__, __LINE__, "'%.40s' parsed", bad[k].text);
        else
            test__check_err(__FILE__, __LINE__, OT_EINVAL, (const char *[]){"parse: ", bad[k].msg, NULL});
        free(bad[k].text);
    }
    ot_pool_pop(pool);
    fx_free(&f);
}

static uint64_t rng(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* Random bytes, and valid expressions with random bytes changed, cut or
 * inserted: a tree or an error, never a crash (the sanitizer build runs
 * this too). */
TEST(parse_byte_fuzz)
{
    fx f;
    fx_new(&f);
    static const char *const seeds[] = {
        "tanh(a*b + a/b)", "sum(exp(a - max(a, axis=1, keepdims=1)), axis=1)",
        "transpose(a, perm=(1, 0)) ** -2.5e3", "onehot(i, depth=4, axis=0, dtype=f64) >= 1",
        "clip(var(a, 0, 1), lo=-inf, hi=nan)", "rand(shape=(3, 4), seed=7) != b",
    };
    static const char alphabet[] = "ab()+-*/<=>!,.e0123456789 _=xsumtanhxp\t\"'\\\x01\xff";
    uint64_t st = 12345;
    char buf[160];
    for (int it = 0; it < 20000; it++) {
        ot_pool *pool = ot_pool_push();
        size_t len;
        if (it % 3 == 0) {
            len = rng(&st) % 60;
            for (size_t k = 0; k < len; k++) buf[k] = alphabet[rng(&st) % (sizeof alphabet - 1)];
        } else {
            const char *seed = seeds[rng(&st) % (sizeof seeds / sizeof *seeds)];
            len = strlen(seed);
            memcpy(buf, seed, len);
            for (int m = 1 + (int)(rng(&st) % 3); m > 0; m--) {
                size_t at = rng(&st) % (len + 1);
                int what = (int)(rng(&st) % 3);
                if (what == 0 && at < len) buf[at] = alphabet[rng(&st) % (sizeof alphabet - 1)];
                else if (what == 1) len = at;
                else if (len + 1 < sizeof buf) {
                    memmove(buf + at + 1, buf + at, len - at);
                    buf[at] = alphabet[rng(&st) % (sizeof alphabet - 1)];
                    len++;
                }
            }
        }
        buf[len] = '\0';
        ot_clear_error();
        ot_node *t = parse(&f, buf);
        CHECK(t != NULL || ot_errcode() != 0);
        ot_pool_pop(pool);
    }
    fx_free(&f);
}

/*
 * test_node.c - building nodes: the op table (names both ways, arity, kind,
 * flags), dtype promotion (weak constants, OT_FLAG_FLOAT, compares, index
 * results), result shapes (broadcasting, reductions, dot, transpose, cast,
 * onehot, rand), composite tags, constants, node accessors, and the plain
 * builder ot_build_at called as a language binding would call it.
 */
#include "test.h"

#include <stdlib.h>

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

/* Fails at the caller's line unless s equals want. */
static void shape_is(int line, ot_shape s, ot_shape want)
{
    int ok = s.ndim == want.ndim;
    for (int i = 0; ok && i < want.ndim; i++) ok = s.dims[i] == want.dims[i];
    if (!ok) {
        char a[128] = "", b[128] = "";
        size_t na = 0, nb = 0;
        for (int i = 0; i < s.ndim && i < OT_MAX_DIMS; i++)
            na += (size_t)snprintf(a + na, sizeof a - na, "%lld,", (long long)s.dims[i]);
        for (int i = 0; i < want.ndim; i++)
            nb += (size_t)snprintf(b + nb, sizeof b - nb, "%lld,", (long long)want.dims[i]);
        test__fail(__FILE__, line, "shape ndim %d (%s), expected ndim %d (%s)",
                   s.ndim, a, want.ndim, b);
    }
}
#define SHAPE_IS(node, ...)                                                   \
    do {                                                                      \
        ot_node *n_ = (node);                                                 \
        if (!n_) test__fail(__FILE__, __LINE__, "node is NULL: %s", ot_errmsg()); \
        else shape_is(__LINE__, ot_node_shape(n_), OT_SHAPE(__VA_ARGS__));   \
    } while (0)
#define DTYPE_IS(node, dt)                                                    \
    do {                                                                      \
        ot_node *n_ = (node);                                                 \
        if (!n_) test__fail(__FILE__, __LINE__, "node is NULL: %s", ot_errmsg()); \
        else CHECK_INT(ot_node_dtype(n_), dt);                                \
    } while (0)

/* ---- the op table -------------------------------------------------------- */

typedef struct op_row {
    ot_op op;
    const char *name;
    int arity, kind;
    unsigned flags;
} op_row;
#define ROW(e, name, arity, kind, sym, flags, ref) {OT_OP_##e, name, arity, kind, flags},
static const op_row ops[] = {OT_OP_LIST(ROW)};
#undef ROW
#define NOPS ((int)(sizeof ops / sizeof ops[0]))

TEST(node_op_table)
{
    CHECK_INT(NOPS, OT_OP_COUNT);
    for (int i = 0; i < NOPS; i++) {
        CHECK_INT(ops[i].op, i);
        CHECK_STR(ot_op_name(ops[i].op), ops[i].name);
        CHECK_INT(ot_op_lookup(ops[i].name), ops[i].op);
        CHECK_INT(ot_op_lookup(ot_op_name(ops[i].op)), ops[i].op);
        CHECK_INT(ot_op_arity(ops[i].op), ops[i].arity);
        CHECK_INT(ot_op_kind(ops[i].op), ops[i].kind);
        CHECK_INT(ot_op_flags(ops[i].op), ops[i].flags);
    }
    CHECK_INT(ot_op_lookup("tanh"), OT_OP_TANH);
    CHECK_STR(ot_op_name(OT_OP_TANH), "tanh");
    CHECK_INT(ot_op_lookup("cross_entropy"), OT_OP_CROSS_ENTROPY);
    CHECK_INT(ot_op_lookup("nope"), OT_OP_NONE);
    CHECK_INT(ot_op_lookup(""), OT_OP_NONE);
    CHECK_INT(ot_op_lookup("tanh "), OT_OP_NONE);
    CHECK_INT(ot_op_lookup("tan"), OT_OP_NONE);
    CHECK_INT(ot_op_lookup(NULL), OT_OP_NONE);
    CHECK(ot_op_name(OT_OP_NONE) == NULL);
    CHECK(ot_op_name(OT_OP_COUNT) == NULL);
    CHECK(ot_op_name((ot_op)1000) == NULL);
    CHECK(ot_op_name((ot_op)-7) == NULL);
    /* Lookups do not touch the error slot. */
    CHECK_INT(ot_errcode(), 0);
}

TEST(node_dtype_table)
{
    CHECK_INT(ot_dtype_size(OT_F32), 4);
    CHECK_INT(ot_dtype_size(OT_F64), 8);
    CHECK_INT(ot_dtype_size(OT_I32), 4);
    CHECK_INT(ot_dtype_size((ot_dtype)9), 0);
    CHECK_STR(ot_dtype_name(OT_F32), "float32");
    CHECK_STR(ot_dtype_name(OT_F64), "float64");
    CHECK_STR(ot_dtype_name(OT_I32), "int32");
}

/* ---- dtype promotion, table-driven --------------------------------------- */

TEST(node_promotion_elementwise_every_op)
{
    ot_backend *be = ref();
    ot_tensor *f = ot_ones(be, OT_SHAPE(3, 1), OT_F32);
    ot_tensor *d = ot_ones(be, OT_SHAPE(4), OT_F64);
    ot_tensor *i = ot_ones(be, OT_SHAPE(3, 1), OT_I32);
    ot_tensor *j = ot_ones(be, OT_SHAPE(4), OT_I32);
    ot_pool *p = ot_pool_push();
    ot_node *F = ot_tensor_node(f), *D = ot_tensor_node(d);
    ot_node *I = ot_tensor_node(i), *J = ot_tensor_node(j);

    for (int k = 0; k < NOPS; k++) {
        const op_row *r = &ops[k];
        bool fl = r->flags & OT_FLAG_FLOAT;
        if (r->flags & OT_FLAG_CUSTOM) continue;   /* placeholders: test_custom_op.c */
        if (r->kind == OT_KIND_UNARY) {
            ot_node *nf = ot_build(r->op, F, NULL, NULL);
            ot_node *nd = ot_build(r->op, D, NULL, NULL);
            ot_node *ni = ot_build(r->op, I, NULL, NULL);
            if (!nf || !nd || !ni) {
                test__fail(__FILE__, __LINE__, "%s: NULL (%s)", r->name, ot_errmsg());
                ot_clear_error();
                continue;
            }
            if (ot_node_dtype(nf) != OT_F32 || ot_node_dtype(nd) != OT_F64 ||
                ot_node_dtype(ni) != (fl ? OT_F64 : OT_I32))
                test__fail(__FILE__, __LINE__, "%s: dtypes %d %d %d", r->name,
                           ot_node_dtype(nf), ot_node_dtype(nd), ot_node_dtype(ni));
            shape_is(__LINE__, ot_node_shape(nf), OT_SHAPE(3, 1));
            shape_is(__LINE__, ot_node_shape(nd), OT_SHAPE(4));
            CHECK_INT(ot_node_op(nf), r->op);
            CHECK_INT(ot_node_kind(nf), OT_NODE_OP);
            CHECK(ot_node_child(nf, 0) == F);
            CHECK(ot_node_child(nf, 1) == NULL);
        } else if (r->kind == OT_KIND_BINARY) {
            ot_node *ff = ot_build(r->op, F, F, NULL);
            ot_node *fd = ot_build(r->op, F, D, NULL);
            ot_node *df = ot_build(r->op, D, F, NULL);
            ot_node *if_ = ot_build(r->op, I, F, NULL);
            ot_node *id = ot_build(r->op, J, D, NULL);
            ot_node *ij = ot_build(r->op, I, J, NULL);
            if (!ff || !fd || !df || !if_ || !id || !ij) {
                test__fail(__FILE__, __LINE__, "%s: NULL (%s)", r->name, ot_errmsg());
                ot_clear_error();
                continue;
            }
            if (ot_node_dtype(ff) != OT_F32 || ot_node_dtype(fd) != OT_F64 ||
                ot_node_dtype(df) != OT_F64 || ot_node_dtype(if_) != OT_F32 ||
                ot_node_dtype(id) != OT_F64 || ot_node_dtype(ij) != (fl ? OT_F64 : OT_I32))
                test__fail(__FILE__, __LINE__, "%s: dtypes %d %d %d %d %d %d", r->name,
                           ot_node_dtype(ff), ot_node_dtype(fd), ot_node_dtype(df),
                           ot_node_dtype(if_), ot_node_dtype(id), ot_node_dtype(ij));
            shape_is(__LINE__, ot_node_shape(ff), OT_SHAPE(3, 1));
            shape_is(__LINE__, ot_node_shape(fd), OT_SHAPE(3, 4));
            shape_is(__LINE__, ot_node_shape(df), OT_SHAPE(3, 4));
            shape_is(__LINE__, ot_node_shape(ij), OT_SHAPE(3, 4));
            CHECK(ot_node_child(fd, 0) == F);
            CHECK(ot_node_child(fd, 1) == D);
        }
    }
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
    ot_tensor_free(f); ot_tensor_free(d); ot_tensor_free(i); ot_tensor_free(j);
    ot_backend_free(be);
}

TEST(node_promotion_reductions_every_op)
{
    ot_backend *be = ref();
    ot_tensor *f = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_tensor *d = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F64);
    ot_tensor *i = ot_ones(be, OT_SHAPE(2, 3, 4), OT_I32);
    ot_pool *p = ot_pool_push();
    for (int k = 0; k < NOPS; k++) {
        const op_row *r = &ops[k];
        if (r->kind != OT_KIND_REDUCE) continue;
        ot_args a = {.axis = 1};
        ot_node *nf = ot_build(r->op, ot_tensor_node(f), NULL, &a);
        ot_node *nd = ot_build(r->op, ot_tensor_node(d), NULL, &a);
        ot_node *ni = ot_build(r->op, ot_tensor_node(i), NULL, &a);
        if (!nf || !nd || !ni) {
            test__fail(__FILE__, __LINE__, "%s: NULL (%s)", r->name, ot_errmsg());
            ot_clear_error();
            continue;
        }
        ot_dtype wf = OT_F32, wd = OT_F64, wi = OT_I32;
        if (r->flags & OT_FLAG_INDEX) wf = wd = wi = OT_I32;
        else if (r->flags & OT_FLAG_FLOAT) wi = OT_F64;
        if (ot_node_dtype(nf) != wf || ot_node_dtype(nd) != wd || ot_node_dtype(ni) != wi)
            test__fail(__FILE__, __LINE__, "%s: dtypes %d %d %d, expected %d %d %d",
                       r->name, ot_node_dtype(nf), ot_node_dtype(nd), ot_node_dtype(ni),
                       wf, wd, wi);
        shape_is(__LINE__, ot_node_shape(nf), OT_SHAPE(2, 4));
        CHECK_INT(ot_node_args(nf).axis, 1);
        CHECK(!ot_node_args(nf).keepdims);

        a = (ot_args){.axis = -1, .keepdims = true};
        ot_node *nk = ot_build(r->op, ot_tensor_node(f), NULL, &a);
        CHECK(nk != NULL);
        if (nk) {
            shape_is(__LINE__, ot_node_shape(nk), OT_SHAPE(2, 3, 1));
            CHECK_INT(ot_node_args(nk).axis, 2);     /* normalised */
            CHECK(ot_node_args(nk).keepdims);
        }
        a = (ot_args){.axis = OT_AXIS_ALL};
        ot_node *na = ot_build(r->op, ot_tensor_node(f), NULL, &a);
        CHECK(na != NULL);
        if (na) {
            shape_is(__LINE__, ot_node_shape(na), OT_SHAPE());
            CHECK_INT(ot_node_args(na).axis, OT_AXIS_ALL);
        }
        a = (ot_args){.axis = OT_AXIS_ALL, .keepdims = true};
        ot_node *nak = ot_build(r->op, ot_tensor_node(f), NULL, &a);
        CHECK(nak != NULL);
        if (nak) shape_is(__LINE__, ot_node_shape(nak), OT_SHAPE(1, 1, 1));
    }
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
    ot_tensor_free(f); ot_tensor_free(d); ot_tensor_free(i);
    ot_backend_free(be);
}

/* ---- dtype promotion, by hand -------------------------------------------- */

TEST(node_promotion_weak_constants)
{
    ot_backend *be = ref();
    ot_tensor *f = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, 2, 3});
    ot_tensor *d = ot_array(be, OT_SHAPE(3), OT_F64, (double[]){1, 2, 3});
    ot_tensor *i = ot_array(be, OT_SHAPE(3), OT_I32, (int32_t[]){1, 2, 3});
    ot_pool *p = ot_pool_push();

    DTYPE_IS(ot_mul(f, 0.5), OT_F32);
    DTYPE_IS(ot_mul(f, 0.5f), OT_F32);
    DTYPE_IS(ot_mul(f, 2), OT_F32);
    DTYPE_IS(ot_mul(0.5, f), OT_F32);
    DTYPE_IS(ot_add(2, f), OT_F32);
    DTYPE_IS(ot_mul(d, 0.5f), OT_F64);
    DTYPE_IS(ot_mul(d, 2), OT_F64);
    DTYPE_IS(ot_mul(i, 2), OT_I32);
    DTYPE_IS(ot_sub(3, i), OT_I32);
    DTYPE_IS(ot_mul(i, 0.5), OT_F64);
    DTYPE_IS(ot_mul(0.5, i), OT_F64);
    DTYPE_IS(ot_pow(f, 2), OT_F32);
    DTYPE_IS(ot_maximum(f, 0), OT_F32);
    /* A subtree of constants only is still weak. */
    DTYPE_IS(ot_add(f, ot_mul(0.5, 2.0)), OT_F32);
    DTYPE_IS(ot_add(ot_neg(1.5), f), OT_F32);
    /* A subtree with a tensor in it is not: f32 + (i32 * 0.5 -> f64). */
    DTYPE_IS(ot_add(f, ot_mul(i, 0.5)), OT_F64);
    DTYPE_IS(ot_add(f, ot_mul(i, 2)), OT_F32);
    /* Through longer expressions. */
    DTYPE_IS(ot_div(1.0f, ot_add(1.0f, ot_exp(ot_neg(f)))), OT_F32);
    DTYPE_IS(ot_div(1.0, ot_add(1, ot_exp(ot_neg(f)))), OT_F32);
    DTYPE_IS(ot_sqrt(ot_add(ot_mul(f, f), 1e-8)), OT_F32);

    /* OT_FLAG_FLOAT ops turn i32 into f64, and leave floats alone. */
    DTYPE_IS(ot_div(i, i), OT_F64);
    DTYPE_IS(ot_div(i, 2), OT_F64);
    DTYPE_IS(ot_div(f, 2), OT_F32);
    DTYPE_IS(ot_sqrt(i), OT_F64);
    DTYPE_IS(ot_exp(i), OT_F64);
    DTYPE_IS(ot_log(i), OT_F64);
    DTYPE_IS(ot_tanh(i), OT_F64);
    DTYPE_IS(ot_sig(i), OT_F64);
    DTYPE_IS(ot_mean(i), OT_F64);
    DTYPE_IS(ot_var(i), OT_F64);
    DTYPE_IS(ot_std(i), OT_F64);
    DTYPE_IS(ot_softmax(i), OT_F64);
    DTYPE_IS(ot_logsoftmax(i), OT_F64);
    DTYPE_IS(ot_mean(f), OT_F32);
    DTYPE_IS(ot_softmax(f), OT_F32);
    DTYPE_IS(ot_neg(i), OT_I32);
    DTYPE_IS(ot_abs(i), OT_I32);
    DTYPE_IS(ot_sum(i), OT_I32);
    DTYPE_IS(ot_max(i), OT_I32);
    DTYPE_IS(ot_squared_l2(i), OT_I32);

    /* Compares keep the promoted dtype. */
    DTYPE_IS(ot_lt(f, d), OT_F64);
    DTYPE_IS(ot_eq(i, i), OT_I32);
    DTYPE_IS(ot_gt(f, 1), OT_F32);
    DTYPE_IS(ot_gt(i, 1), OT_I32);
    DTYPE_IS(ot_ge(i, 1.5), OT_F64);
    DTYPE_IS(ot_ne(i, f), OT_F32);
    DTYPE_IS(ot_finite(f), OT_F32);
    DTYPE_IS(ot_finite(i), OT_I32);

    /* argmax/argmin give OT_I32 whatever the input. */
    DTYPE_IS(ot_argmax(d), OT_I32);
    DTYPE_IS(ot_argmin(f, .axis = 0), OT_I32);
    DTYPE_IS(ot_argmax(i, .axis = 0, .keepdims = true), OT_I32);
    SHAPE_IS(ot_argmax(d), );
    SHAPE_IS(ot_argmax(i, .axis = 0, .keepdims = true), 1);

    /* Dot: the promoted dtype of its operands. */
    DTYPE_IS(ot_dot(f, f), OT_F32);
    DTYPE_IS(ot_dot(f, d), OT_F64);
    DTYPE_IS(ot_dot(d, f), OT_F64);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(f); ot_tensor_free(d); ot_tensor_free(i);
    ot_backend_free(be);
}

/* The dtypes reported are the dtypes evaluated: i32 * 0.5 really gives
 * halves, i32 / i32 is true division, compares give 1 and 0, i32 * 2 stays
 * integral, argmax gives indices. */
TEST(node_promotion_values)
{
    ot_backend *be = ref();
    ot_tensor *i = ot_array(be, OT_SHAPE(3), OT_I32, (int32_t[]){1, 2, 3});
    ot_tensor *f = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){0.5f, 4, -1});
    ot_tensor *od = ot_zeros(be, OT_SHAPE(3), OT_F64);
    ot_tensor *oi = ot_zeros(be, OT_SHAPE(3), OT_I32);
    ot_tensor *o0 = ot_zeros(be, OT_SHAPE(), OT_I32);
    ot_pool *p = ot_pool_push();
    double h[3];
    int32_t k[3];

    CHECK_INT(ot_assign(od, ot_mul(i, 0.5)), 0);
    CHECK_INT(ot_get(od, h), 0);
    CHECK(h[0] == 0.5 && h[1] == 1.0 && h[2] == 1.5);
    CHECK_INT(ot_assign(od, ot_div(i, 2)), 0);
    CHECK_INT(ot_get(od, h), 0);
    CHECK(h[0] == 0.5 && h[1] == 1.0 && h[2] == 1.5);
    CHECK_INT(ot_assign(oi, ot_mul(i, 2)), 0);
    CHECK_INT(ot_get(oi, k), 0);
    CHECK(k[0] == 2 && k[1] == 4 && k[2] == 6);
    CHECK_INT(ot_assign(oi, ot_gt(i, 1)), 0);
    CHECK_INT(ot_get(oi, k), 0);
    CHECK(k[0] == 0 && k[1] == 1 && k[2] == 1);
    CHECK_INT(ot_assign(od, ot_lt(f, i)), 0);
    CHECK_INT(ot_get(od, h), 0);
    CHECK(h[0] == 1 && h[1] == 0 && h[2] == 1);
    CHECK_INT(ot_assign(o0, ot_argmax(f)), 0);
    CHECK_INT(ot_get(o0, k), 0);
    CHECK_INT(k[0], 1);
    CHECK_INT(ot_assign(o0, ot_argmin(f, .axis = 0)), 0);
    CHECK_INT(ot_get(o0, k), 0);
    CHECK_INT(k[0], 2);

    ot_pool_pop(p);
    ot_tensor_free(i); ot_tensor_free(f); ot_tensor_free(od); ot_tensor_free(oi);
    ot_tensor_free(o0);
    ot_backend_free(be);
}

/* ---- shapes -------------------------------------------------------------- */

TEST(node_shapes_broadcast)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 1), OT_F32);
    ot_tensor *b = ot_ones(be, OT_SHAPE(4), OT_F32);
    ot_tensor *c = ot_ones(be, OT_SHAPE(2, 1, 3), OT_F32);
    ot_tensor *e = ot_ones(be, OT_SHAPE(5, 1), OT_F32);
    ot_tensor *s = ot_ones(be, OT_SHAPE(), OT_F32);
    ot_tensor *z = ot_ones(be, OT_SHAPE(0, 3), OT_F32);
    ot_tensor *r = ot_ones(be, OT_SHAPE(1, 3), OT_F32);
    ot_tensor *z1 = ot_ones(be, OT_SHAPE(0), OT_F32);
    ot_tensor *o1 = ot_ones(be, OT_SHAPE(1), OT_F32);
    ot_tensor *big = ot_ones(be, OT_SHAPE(1, 1, 1, 1, 1, 1, 2, 1), OT_F32);
    ot_pool *p = ot_pool_push();

    SHAPE_IS(ot_add(a, b), 3, 4);
    SHAPE_IS(ot_add(b, a), 3, 4);
    SHAPE_IS(ot_mul(c, e), 2, 5, 3);
    SHAPE_IS(ot_sub(s, b), 4);
    SHAPE_IS(ot_sub(b, s), 4);
    SHAPE_IS(ot_add(s, s), );
    SHAPE_IS(ot_add(z, r), 0, 3);
    SHAPE_IS(ot_add(r, z), 0, 3);
    SHAPE_IS(ot_add(o1, z1), 0);
    SHAPE_IS(ot_add(big, b), 1, 1, 1, 1, 1, 1, 2, 4);
    SHAPE_IS(ot_mul(a, 2.0), 3, 1);
    SHAPE_IS(ot_mul(2.0, 3), );
    SHAPE_IS(ot_neg(0.5), );
    SHAPE_IS(ot_add(ot_add(a, b), ot_sub(s, b)), 3, 4);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(a); ot_tensor_free(b); ot_tensor_free(c); ot_tensor_free(e);
    ot_tensor_free(s); ot_tensor_free(z); ot_tensor_free(r); ot_tensor_free(z1);
    ot_tensor_free(o1); ot_tensor_free(big);
    ot_backend_free(be);
}

TEST(node_shapes_reduction_options)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_tensor *s = ot_ones(be, OT_SHAPE(), OT_F32);
    ot_pool *p = ot_pool_push();
    int ax = 1;

    SHAPE_IS(ot_sum(x, .axis = 1), 2, 4);
    SHAPE_IS(ot_sum(x, .axis=1), 2, 4);
    SHAPE_IS(ot_sum(x, .axis = 0), 3, 4);
    SHAPE_IS(ot_sum(x, .axis = ax), 2, 4);
    SHAPE_IS(ot_sum(x, .axis = -1), 2, 3);
    SHAPE_IS(ot_sum(x, .axis = -3), 3, 4);
    SHAPE_IS(ot_sum(x, .axis = 1, .keepdims = true), 2, 1, 4);
    SHAPE_IS(ot_sum(x, .keepdims = true, .axis = 0), 1, 3, 4);
    /* .axis omitted: every axis. */
    SHAPE_IS(ot_sum(x), );
    SHAPE_IS(ot_max(x, .keepdims = true), 1, 1, 1);
    SHAPE_IS(ot_mean(x, .keepdims = false), );
    SHAPE_IS(ot_sum(s), );
    SHAPE_IS(ot_argmin(x), );
    CHECK_INT(ot_node_args(ot_sum(x)).axis, OT_AXIS_ALL);
    CHECK_INT(ot_node_args(ot_sum(x, .axis = -1)).axis, 2);
    CHECK_INT(ot_node_args(ot_sum(x, .axis = 0)).axis, 0);
    CHECK(ot_node_args(ot_sum(x, .axis = 0)).spec_ == NULL);
    /* Reductions of reductions. */
    SHAPE_IS(ot_sum(ot_max(x, .axis = 2), .axis = 0), 3);
    SHAPE_IS(ot_mean(ot_sum(x, .axis = 1, .keepdims = true), .axis = -2), 2, 4);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(x); ot_tensor_free(s);
    ot_backend_free(be);
}

TEST(node_shapes_dot_transpose_cast)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_ones(be, OT_SHAPE(3, 4), OT_F32);
    ot_tensor *b = ot_ones(be, OT_SHAPE(4, 5), OT_F32);
    ot_tensor *v = ot_ones(be, OT_SHAPE(4), OT_F64);
    ot_tensor *k0 = ot_ones(be, OT_SHAPE(3, 0), OT_F32);
    ot_tensor *k1 = ot_ones(be, OT_SHAPE(0, 2), OT_F32);
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3, 4), OT_F32);
    ot_pool *p = ot_pool_push();

    SHAPE_IS(ot_dot(a, b), 3, 5);
    SHAPE_IS(ot_dot(v, b), 5);
    SHAPE_IS(ot_dot(a, v), 3);
    SHAPE_IS(ot_dot(v, v), );
    SHAPE_IS(ot_dot(k0, k1), 3, 2);
    SHAPE_IS(ot_dot(ot_T(b), ot_T(a)), 5, 3);
    DTYPE_IS(ot_dot(a, v), OT_F64);
    CHECK_INT(ot_node_op(ot_dot(a, b)), OT_OP_DOT);

    SHAPE_IS(ot_T(x), 4, 3, 2);
    SHAPE_IS(ot_T(a), 4, 3);
    SHAPE_IS(ot_T(v), 4);
    SHAPE_IS(ot_T(x, .perm = {1, 0, 2}), 3, 2, 4);
    SHAPE_IS(ot_T(x, .perm = {2, 0, 1}), 4, 2, 3);
    SHAPE_IS(ot_T(ot_neg(x), .perm = {0, 2, 1}), 2, 4, 3);
    ot_node *t = ot_T(x, .perm = {2, 0, 1});
    if (t) {
        ot_args ar = ot_node_args(t);
        CHECK(ar.perm[0] == 2 && ar.perm[1] == 0 && ar.perm[2] == 1);
        CHECK_INT(ot_node_op(t), OT_OP_TRANSPOSE);
    }

    ot_node *c = ot_cast(x, .dtype = OT_I32);
    SHAPE_IS(c, 2, 3, 4);
    DTYPE_IS(c, OT_I32);
    if (c) CHECK_INT(ot_node_args(c).dtype, OT_I32);
    DTYPE_IS(ot_cast(c, .dtype = OT_F64), OT_F64);
    DTYPE_IS(ot_cast(x, .dtype = OT_F32), OT_F32);
    /* A cast result is not weak: f32 + (i32 cast) is f32, f32 + cast f64 is f64. */
    DTYPE_IS(ot_add(x, ot_cast(x, .dtype = OT_F64)), OT_F64);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(a); ot_tensor_free(b); ot_tensor_free(v); ot_tensor_free(k0);
    ot_tensor_free(k1); ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(node_shapes_onehot_rand)
{
    ot_backend *be = ref();
    ot_tensor *idx = ot_zeros(be, OT_SHAPE(3), OT_I32);
    ot_tensor *idx2 = ot_zeros(be, OT_SHAPE(2, 3), OT_I32);
    ot_pool *p = ot_pool_push();

    ot_node *o = ot_onehot(idx, .depth = 10);
    SHAPE_IS(o, 3, 10);
    DTYPE_IS(o, OT_F32);
    if (o) CHECK_INT(ot_node_args(o).depth, 10);
    SHAPE_IS(ot_onehot(idx, .depth = 10, .axis = 0), 10, 3);
    SHAPE_IS(ot_onehot(idx, .depth = 10, .axis = -1), 3, 10);
    SHAPE_IS(ot_onehot(idx2, .depth = 4, .axis = 1), 2, 4, 3);
    SHAPE_IS(ot_onehot(idx2, .depth = 4), 2, 3, 4);
    SHAPE_IS(ot_onehot(idx2, .depth = 4, .axis = -2), 2, 4, 3);
    DTYPE_IS(ot_onehot(idx, .depth = 2, .dtype = OT_F64), OT_F64);
    DTYPE_IS(ot_onehot(idx, .depth = 2, .dtype = OT_I32), OT_I32);

    ot_node *r = ot_rand(OT_SHAPE(3, 4));
    SHAPE_IS(r, 3, 4);
    DTYPE_IS(r, OT_F32);
    if (r) {
        CHECK_INT(ot_node_kind(r), OT_NODE_OP);
        CHECK_INT(ot_node_op(r), OT_OP_RAND);
        CHECK(ot_node_child(r, 0) == NULL);
        CHECK(ot_node_child(r, 1) == NULL);
    }
    ot_node *r2 = ot_rand(OT_SHAPE(2), .seed = 7, .dtype = OT_F64);
    DTYPE_IS(r2, OT_F64);
    if (r2) {
        CHECK_INT(ot_node_args(r2).seed, 7);
        shape_is(__LINE__, ot_node_args(r2).shape, OT_SHAPE(2));
    }
    SHAPE_IS(ot_rand(OT_SHAPE()), );
    SHAPE_IS(ot_rand(OT_SHAPE(0, 5)), 0, 5);
    /* rand meets a tensor like any f32 operand. */
    DTYPE_IS(ot_add(ot_rand(OT_SHAPE(3)), idx), OT_F32);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(idx); ot_tensor_free(idx2);
    ot_backend_free(be);
}

/* ---- composites ---------------------------------------------------------- */

/* The root of a composite carries its tag; its op is a primitive op. */
static void tagged(int line, ot_node *n, ot_op tag)
{
    if (!n) {
        test__fail(__FILE__, line, "%s: NULL (%s)", ot_op_name(tag), ot_errmsg());
        ot_clear_error();
        return;
    }
    if (ot_node_tag(n) != tag)
        test__fail(__FILE__, line, "tag %d, expected %d (%s)", ot_node_tag(n), tag,
                   ot_op_name(tag));
    if (ot_node_kind(n) != OT_NODE_OP || ot_node_op(n) == tag ||
        ot_op_kind(ot_node_op(n)) == OT_KIND_COMPOSITE)
        test__fail(__FILE__, line, "%s: root op %d is not a primitive op",
                   ot_op_name(tag), ot_node_op(n));
    for (int i = 0; i < 2; i++) {
        ot_node *c = ot_node_child(n, i);
        if (c && ot_node_tag(c) == tag)
            test__fail(__FILE__, line, "%s: child %d carries the tag too", ot_op_name(tag), i);
    }
    if (!ot_node_file(n) || strcmp(ot_node_file(n), __FILE__) != 0 || ot_node_line(n) != line)
        test__fail(__FILE__, line, "%s: file:line %s:%d", ot_op_name(tag),
                   ot_node_file(n) ? ot_node_file(n) : "(null)", ot_node_line(n));
}

TEST(node_composites)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *t = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_node *n;
    n = ot_softmax(x, .axis = 1); tagged(__LINE__, n, OT_OP_SOFTMAX);
    SHAPE_IS(n, 2, 3);
    DTYPE_IS(n, OT_F32);
    n = ot_softmax(x); tagged(__LINE__, n, OT_OP_SOFTMAX);
    SHAPE_IS(n, 2, 3);
    n = ot_logsoftmax(x, .axis = -1); tagged(__LINE__, n, OT_OP_LOGSOFTMAX);
    SHAPE_IS(n, 2, 3);
    n = ot_var(x, .axis = 1); tagged(__LINE__, n, OT_OP_VAR);
    SHAPE_IS(n, 2);
    n = ot_var(x, .axis = 0, .keepdims = true, .ddof = 1); tagged(__LINE__, n, OT_OP_VAR);
    SHAPE_IS(n, 1, 3);
    n = ot_std(x); tagged(__LINE__, n, OT_OP_STD);
    SHAPE_IS(n, );
    n = ot_clip(x, -1.0, 1.0); tagged(__LINE__, n, OT_OP_CLIP);
    SHAPE_IS(n, 2, 3);
    DTYPE_IS(n, OT_F32);
    if (n) {
        ot_args a = ot_node_args(n);
        CHECK(a.lo == -1.0 && a.hi == 1.0);
    }
    n = ot_cross_entropy(x, t); tagged(__LINE__, n, OT_OP_CROSS_ENTROPY);
    SHAPE_IS(n, );
    n = ot_cross_entropy(x, t, .axis = 1); tagged(__LINE__, n, OT_OP_CROSS_ENTROPY);
    SHAPE_IS(n, 2);
    n = ot_squared_l2(x); tagged(__LINE__, n, OT_OP_SQUARED_L2);
    SHAPE_IS(n, );
    n = ot_squared_l2(x, .axis = 0); tagged(__LINE__, n, OT_OP_SQUARED_L2);
    SHAPE_IS(n, 3);

    /* Composites of expressions, and plain ops carry no tag. */
    n = ot_softmax(ot_mul(x, 2.0), .axis = 1); tagged(__LINE__, n, OT_OP_SOFTMAX);
    CHECK_INT(ot_node_tag(ot_add(x, t)), OT_OP_NONE);
    CHECK_INT(ot_node_tag(ot_sum(x)), OT_OP_NONE);
    CHECK_INT(ot_node_tag(ot_tensor_node(x)), OT_OP_NONE);
    CHECK_INT(ot_node_tag(ot_const(1.0)), OT_OP_NONE);
    /* A plain op over a composite is not tagged. */
    CHECK_INT(ot_node_tag(ot_neg(ot_softmax(x))), OT_OP_NONE);

    /* Through the plain builder. */
    n = ot_build_at(OT_OP_SOFTMAX, ot_tensor_node(x), NULL, &(ot_args){.axis = 1},
                    __FILE__, __LINE__); tagged(__LINE__, n, OT_OP_SOFTMAX);
    n = ot_build_at(OT_OP_CLIP, ot_tensor_node(x), NULL,
                    &(ot_args){.axis = OT_AXIS_ALL, .lo = 0, .hi = 2}, __FILE__, __LINE__);
    tagged(__LINE__ - 1, n, OT_OP_CLIP);
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(x); ot_tensor_free(t);
    ot_backend_free(be);
}

/* ---- constants and accessors --------------------------------------------- */

TEST(node_constants)
{
    ot_pool *p = ot_pool_push();
    ot_node *c = ot_const(0.5);
    ot_node *cf = ot_constf(0.25f);
    ot_node *ci = ot_consti(-3);
    CHECK(c && cf && ci);
    if (!c || !cf || !ci) { ot_pool_pop(p); return; }
    CHECK_INT(ot_node_kind(c), OT_NODE_CONST);
    CHECK_INT(ot_node_kind(cf), OT_NODE_CONST);
    CHECK_INT(ot_node_kind(ci), OT_NODE_CONST);
    CHECK_INT(ot_node_dtype(c), OT_F64);
    CHECK_INT(ot_node_dtype(cf), OT_F32);
    CHECK_INT(ot_node_dtype(ci), OT_I32);
    CHECK(ot_node_value(c) == 0.5);
    CHECK(ot_node_value(cf) == 0.25);
    CHECK(ot_node_value(ci) == -3.0);
    CHECK_INT(ot_node_shape(c).ndim, 0);
    CHECK_INT(ot_node_shape(ci).ndim, 0);
    CHECK_INT(ot_node_op(c), OT_OP_NONE);
    CHECK_INT(ot_node_tag(c), OT_OP_NONE);
    CHECK(ot_node_child(c, 0) == NULL);
    CHECK(ot_node_child(c, 1) == NULL);
    CHECK(ot_node_tensor(c) == NULL);
    /* The _Generic operand forms. */
    ot_node *n = ot_add(1.5, 2);
    CHECK(n != NULL);
    if (n) {
        CHECK_INT(ot_node_kind(ot_node_child(n, 0)), OT_NODE_CONST);
        CHECK_INT(ot_node_dtype(ot_node_child(n, 0)), OT_F64);
        CHECK(ot_node_value(ot_node_child(n, 0)) == 1.5);
        CHECK_INT(ot_node_dtype(ot_node_child(n, 1)), OT_I32);
        CHECK(ot_node_value(ot_node_child(n, 1)) == 2.0);
    }
    n = ot_mul(0.1f, 7);
    CHECK(n != NULL);
    if (n) {
        CHECK_INT(ot_node_dtype(ot_node_child(n, 0)), OT_F32);
        CHECK(ot_node_value(ot_node_child(n, 0)) == (double)0.1f);
    }
    /* Special values survive. */
    CHECK(isnan(ot_node_value(ot_const(NAN))));
    CHECK(isinf(ot_node_value(ot_constf(-INFINITY))));
    CHECK(signbit(ot_node_value(ot_const(-0.0))));
    CHECK_INT(ot_errcode(), 0);
    ot_pool_pop(p);
}

/* Constant-only trees evaluate (broadcast into out) and give their value. */
TEST(node_constant_trees_evaluate)
{
    ot_backend *be = ref();
    ot_tensor *o = ot_zeros(be, OT_SHAPE(2), OT_F64);
    ot_pool *p = ot_pool_push();
    double h[2];
    CHECK_INT(ot_assign(o, ot_add(ot_mul(0.5, 3), 0.25f)), 0);
    CHECK_INT(ot_get(o, h), 0);
    CHECK(h[0] == 1.75 && h[1] == 1.75);
    CHECK_INT(ot_assign(o, 2.5), 0);
    CHECK_INT(ot_get(o, h), 0);
    CHECK(h[0] == 2.5 && h[1] == 2.5);
    ot_pool_pop(p);
    ot_tensor_free(o);
    ot_backend_free(be);
}

TEST(node_accessors)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(3), OT_F64);
    ot_pool *p = ot_pool_push();

    ot_node *lx = ot_tensor_node(x);
    CHECK(lx != NULL);
    CHECK(ot_tensor_node(x) == lx);          /* no allocation: the same leaf */
    CHECK_INT(ot_node_kind(lx), OT_NODE_LEAF);
    CHECK(ot_node_tensor(lx) == x);
    CHECK_INT(ot_node_op(lx), OT_OP_NONE);
    CHECK_INT(ot_node_dtype(lx), OT_F32);
    shape_is(__LINE__, ot_node_shape(lx), OT_SHAPE(2, 3));
    CHECK(ot_node_child(lx, 0) == NULL);

    ot_node *n = ot_sub(x, 2.0); int l1 = __LINE__;
    CHECK(n != NULL);
    if (n) {
        CHECK_INT(ot_node_kind(n), OT_NODE_OP);
        CHECK_INT(ot_node_op(n), OT_OP_SUB);
        CHECK_INT(ot_node_tag(n), OT_OP_NONE);
        CHECK(ot_node_child(n, 0) == lx);
        CHECK(ot_node_tensor(ot_node_child(n, 0)) == x);
        CHECK_INT(ot_node_kind(ot_node_child(n, 1)), OT_NODE_CONST);
        CHECK(ot_node_value(ot_node_child(n, 1)) == 2.0);
        CHECK(ot_node_tensor(n) == NULL);
        CHECK_STR(ot_node_file(n), __FILE__);
        CHECK(strstr(ot_node_file(n), "tests/test_node.c") != NULL);
        CHECK_INT(ot_node_line(n), l1);
        CHECK_INT(ot_node_dtype(n), OT_F32);
        shape_is(__LINE__, ot_node_shape(n), OT_SHAPE(2, 3));
    }
    ot_node *m = ot_maximum(n, y); int l2 = __LINE__;
    CHECK(m != NULL);
    if (m) {
        CHECK(ot_node_child(m, 0) == n);
        CHECK(ot_node_child(m, 1) == ot_tensor_node(y));
        CHECK_INT(ot_node_line(m), l2);
        CHECK_INT(ot_node_dtype(m), OT_F64);
    }
    ot_node *u = ot_exp(m);
    if (u) {
        CHECK(ot_node_child(u, 0) == m);
        CHECK(ot_node_child(u, 1) == NULL);
    }
    ot_node *s = ot_sum(x, .axis = 1, .keepdims = true); int l3 = __LINE__;
    if (s) {
        ot_args a = ot_node_args(s);
        CHECK_INT(a.axis, 1);
        CHECK(a.keepdims);
        CHECK_INT(ot_node_line(s), l3);
    }
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(x); ot_tensor_free(y);
    ot_backend_free(be);
}

/* ---- ot_build_at as a binding calls it ----------------------------------- */

TEST(node_build_at_binding)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2, 3), OT_F32);
    ot_tensor *y = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_tensor *idx = ot_zeros(be, OT_SHAPE(3), OT_I32);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(), OT_F64);
    ot_tensor *z = ot_ones(be, OT_SHAPE(2, 3, 3), OT_F32), *c3 = ot_ones(be, OT_SHAPE(3, 3, 3), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *X = ot_tensor_node(x), *Y = ot_tensor_node(y), *Z = ot_tensor_node(z);
    ot_node *C3 = ot_tensor_node(c3);

    ot_args a = {0};
    a.axis = OT_AXIS_ALL;
    ot_node *n = ot_build_at(OT_OP_SUM, X, NULL, &a, "binding.py", 7);
    SHAPE_IS(n, );
    if (n) {
        CHECK_STR(ot_node_file(n), "binding.py");
        CHECK_INT(ot_node_line(n), 7);
        CHECK_INT(ot_node_args(n).axis, OT_AXIS_ALL);
        CHECK_INT(ot_assign(out, n), 0);
        double h;
        CHECK_INT(ot_get(out, &h), 0);
        CHECK(h == 6.0);
    }
    /* axis 0 given explicitly means axis 0 (no option spec to read). */
    a = (ot_args){.axis = 0};
    SHAPE_IS(ot_build_at(OT_OP_SUM, X, NULL, &a, "binding.py", 8), 3);
    a = (ot_args){.axis = -1, .keepdims = true};
    SHAPE_IS(ot_build_at(OT_OP_MAX, X, NULL, &a, "binding.py", 9), 2, 1);
    a = (ot_args){.axis = OT_AXIS_ALL};
    DTYPE_IS(ot_build_at(OT_OP_ARGMAX, X, NULL, &a, NULL, 0), OT_I32);

    n = ot_build_at(OT_OP_ADD, X, Y, NULL, NULL, 0);
    SHAPE_IS(n, 2, 3);
    if (n) {
        CHECK(ot_node_file(n) == NULL);
        CHECK_INT(ot_node_line(n), 0);
    }
    n = ot_build(OT_OP_MUL, X, Y, NULL); int l1 = __LINE__;
    if (n) {
        CHECK_STR(ot_node_file(n), __FILE__);
        CHECK_INT(ot_node_line(n), l1);
    }
    DTYPE_IS(ot_build_at(OT_OP_TANH, X, NULL, NULL, "b", 1), OT_F32);
    /* Unary and binary ops with explicit (ignored) args. */
    a = (ot_args){.axis = OT_AXIS_ALL};
    SHAPE_IS(ot_build_at(OT_OP_NEG, X, NULL, &a, "b", 2), 2, 3);
    SHAPE_IS(ot_build_at(OT_OP_DOT, X, Y, &a, "b", 3), 2);

    a = (ot_args){.axis = OT_AXIS_ALL, .dtype = OT_F64};
    DTYPE_IS(ot_build_at(OT_OP_CAST, X, NULL, &a, "b", 4), OT_F64);
    a = (ot_args){.axis = -1, .depth = 4};
    n = ot_build_at(OT_OP_ONEHOT, ot_tensor_node(idx), NULL, &a, "b", 5);
    SHAPE_IS(n, 3, 4);
    DTYPE_IS(n, OT_F32);
    a = (ot_args){.axis = 0, .depth = 4};
    SHAPE_IS(ot_build_at(OT_OP_ONEHOT, ot_tensor_node(idx), NULL, &a, "b", 6), 4, 3);
    a = (ot_args){.axis = OT_AXIS_ALL, .shape = OT_SHAPE(2, 2), .seed = 3};
    n = ot_build_at(OT_OP_RAND, NULL, NULL, &a, "b", 7);
    SHAPE_IS(n, 2, 2);
    DTYPE_IS(n, OT_F32);
    a = (ot_args){.axis = OT_AXIS_ALL};
    SHAPE_IS(ot_build_at(OT_OP_TRANSPOSE, X, NULL, &a, "b", 8), 3, 2);
    a = (ot_args){.axis = OT_AXIS_ALL, .perm = {1, 0}};
    SHAPE_IS(ot_build_at(OT_OP_TRANSPOSE, X, NULL, &a, "b", 9), 3, 2);
    a = (ot_args){.axis = 1, .ddof = 1};
    SHAPE_IS(ot_build_at(OT_OP_VAR, X, NULL, &a, "b", 10), 2);
    a = (ot_args){.axis = OT_AXIS_ALL};
    SHAPE_IS(ot_build_at(OT_OP_CROSS_ENTROPY, X, X, &a, "b", 11), );
    SHAPE_IS(ot_build_at(OT_OP_SQUARED_L2, X, NULL, &a, "b", 12), );

    /* Every op through the plain builder, by name, as a binding would. */
    for (int k = 0; k < NOPS; k++) {
        ot_op op = ot_op_lookup(ops[k].name);
        if (ops[k].flags & OT_FLAG_CUSTOM) continue;   /* placeholders: test_custom_op.c */
        a = (ot_args){.axis = OT_AXIS_ALL, .depth = 2, .shape = OT_SHAPE(3),
                      .dtype = OT_F64};
        if (ops[k].op == OT_OP_ONEHOT) a.axis = -1;
        ot_node *l = ops[k].op == OT_OP_ONEHOT ? ot_tensor_node(idx) : Y;
        ot_node *r = ops[k].arity == 2 ? Y : NULL;
        if (ops[k].op == OT_OP_RAND) l = NULL;
        if (ops[k].op == OT_OP_BATCHED_DOT) l = r = Z;
        if (ops[k].kind == OT_KIND_CONV) {   /* x (3,3,3) and w (3,3,3); wgrad, pools: kernel 1 */
            l = r = C3;
            a.win.ksize[0] = 1;
            if (ops[k].arity == 1) r = NULL;
            a.shape = ot_node_shape(C3);   /* avg_pool_grad's input */
        }
        if (ops[k].op == OT_OP_TAKE || ops[k].op == OT_OP_SCATTER_ADD) {   /* int32 indices */
            r = ot_tensor_node(idx);
            a.axis = 0;
        }
        if (ops[k].op == OT_OP_CUMSUM) a.axis = 0;
        if (ops[k].op == OT_OP_TOPK || ops[k].op == OT_OP_TAKE_ALONG || ops[k].op == OT_OP_SCATTER_ALONG) {
            a.axis = 0;   /* along-axis indices: int32 of x's shape */
            if (r) r = ot_cast(C3, OT_I32);
        }
        if (ops[k].op == OT_OP_ATTENTION || ops[k].op == OT_OP_ATTENTION_GRAD) {
            /* q (1,1,3,3) (grad: dim 1, dim_v 0) and a pack of 3 keys (3,) */
            l = ot_reshape_node(C3, OT_SHAPE(1, 1, 3, 9));
            l = ot_slice_node(l, OT_ALL, OT_ALL, OT_ALL, OT_RANGE(0, 3));
            r = ot_slice_node(ot_reshape_node(C3, OT_SHAPE(27)), OT_RANGE(0, ops[k].op == OT_OP_ATTENTION ? 9 : 3));
            a = (ot_args){.axis = OT_AXIS_ALL, .depth = 3};
        }
        ot_node *m = ot_build_at(op, l, r, &a, "bind.py", k + 1);
        if (!m) {
            test__fail(__FILE__, __LINE__, "%s: NULL (%s)", ops[k].name, ot_errmsg());
            ot_clear_error();
            continue;
        }
        CHECK_INT(ot_node_line(m), k + 1);
        if (ops[k].kind == OT_KIND_COMPOSITE) CHECK_INT(ot_node_tag(m), op);
        else CHECK_INT(ot_node_op(m), op);
    }
    CHECK_INT(ot_errcode(), 0);

    ot_pool_pop(p);
    ot_tensor_free(z);
    ot_tensor_free(c3);
    ot_tensor_free(x); ot_tensor_free(y); ot_tensor_free(idx); ot_tensor_free(out);
    ot_backend_free(be);
}

/* Elementwise builds without arguments on one shape and dtype take a short
 * path: its nodes must be the general path's (reached here by passing the
 * default arguments), dtype rule and errors included. */
TEST(node_plain_elementwise_same_as_general)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *f = ot_zeros(be, OT_SHAPE(3, 4), OT_F32), *i = ot_zeros(be, OT_SHAPE(3, 4), OT_I32);
    ot_args none = {.axis = OT_AXIS_ALL};
    ot_pool *p = ot_pool_push();
    const ot_op ops[] = {OT_OP_TANH, OT_OP_ADD, OT_OP_LT, OT_OP_SQRT, OT_OP_MUL};
    for (int k = 0; k < 5; k++)
        for (int t = 0; t < 2; t++) {
            ot_node *x = t ? ot_tensor_node(i) : ot_tensor_node(f);
            ot_node *y = ot_op_arity(ops[k]) == 2 ? x : NULL;
            ot_node *fast = ot_build_at(ops[k], x, y, NULL, __FILE__, __LINE__);
            ot_node *slow = ot_build_at(ops[k], x, y, &none, __FILE__, __LINE__);
            CHECK(fast && slow);
            if (!fast || !slow) continue;
            CHECK_INT(ot_node_dtype(fast), ot_node_dtype(slow));
            ot_shape a = ot_node_shape(fast), b = ot_node_shape(slow);
            CHECK(a.ndim == b.ndim && memcmp(a.dims, b.dims, sizeof a.dims) == 0);
            char *sf = test__capture(ot_print, fast), *ss = test__capture(ot_print, slow);
            CHECK(sf && ss && strcmp(sf, ss) == 0);
            free(sf);
            free(ss);
        }
    CHECK_INT(ot_node_dtype(ot_exp(i)), OT_F64);
    CHECK(ot_add(f, i) != NULL);   /* mixed dtypes: the general path promotes */
    ot_pool_pop(p);
    ot_tensor_free(f);
    ot_tensor_free(i);
    ot_backend_free(be);
}

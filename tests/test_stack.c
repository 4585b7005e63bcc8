/*
 * test_stack.c - the post-order stack (order, dedupe of identical and of
 * structurally equal subtrees, uses counts, several roots, the printed
 * listing) and ot_substitute (values on the ref backend, sharing, the
 * original left unchanged, errors), including trees of height 100,000 and
 * heavily shared DAGs.
 */
#include "test.h"
#include "internal.h"

#include <stdlib.h>
#include <time.h>

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

static ot_tensor *arr(ot_backend *be, ot_shape s, const float *v, const char *name)
{
    ot_tensor *t = ot_array(be, s, OT_F32, v);
    CHECK(t != NULL);
    if (name) CHECK_INT(ot_tensor_set_name(t, name), 0);
    return t;
}

/* The listing of ot_stack_print for tree, malloc'd. */
static char *listing(const ot_node *tree)
{
    ot_stack *s = ot_stack_new(tree);
    CHECK(s != NULL);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CHECK_INT(ot_stack_print(s, f), 0);
    fclose(f);
    ot_stack_free(s);
    return buf;
}

#define CHECK_LISTING(tree, want)                                             \
    do {                                                                      \
        char *got_ = listing(tree);                                           \
        CHECK_STR(got_, (want));                                              \
        free(got_);                                                           \
    } while (0)

static int len_of(const ot_node *tree)
{
    ot_stack *s = ot_stack_new(tree);
    int n = ot_stack_len(s);
    ot_stack_free(s);
    return n;
}

TEST(stack_postorder_and_listing)
{
    ot_backend *be = ref();
    ot_tensor *x0 = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x0");
    ot_tensor *x1 = arr(be, OT_SHAPE(2, 2), (float[]){5, 6, 7, 8}, "x1");
    ot_node *f = ot_mul(ot_add(x0, x1), 0.5f);
    ot_stack *s = ot_stack_new(f);
    CHECK(s != NULL);
    CHECK_INT(ot_stack_len(s), 5);
    const ot_stack_item *it = ot_stack_at(s, 0);
    CHECK(it->kind == OT_NODE_LEAF && it->tensor == x0 && it->a == -1 && it->b == -1);
    CHECK(it->node == ot_tensor_node(x0));
    it = ot_stack_at(s, 1);
    CHECK(it->kind == OT_NODE_LEAF && it->tensor == x1);
    it = ot_stack_at(s, 2);
    CHECK(it->kind == OT_NODE_OP && it->op == OT_OP_ADD && it->a == 0 && it->b == 1);
    it = ot_stack_at(s, 3);
    CHECK(it->kind == OT_NODE_CONST && it->value == 0.5 && it->op == OT_OP_NONE);
    it = ot_stack_at(s, 4);
    CHECK(it->op == OT_OP_MUL && it->a == 2 && it->b == 3 && it->node == f);
    for (int i = 0; i < 5; i++) CHECK_INT(ot_stack_at(s, i)->uses, 1);
    CHECK(ot_stack_at(s, 5) == NULL);
    CHECK(ot_stack_at(s, -1) == NULL);
    ot_stack_free(s);
    CHECK_LISTING(f, "0: leaf x0 (2, 2) float32\n"
                     "1: leaf x1 (2, 2) float32\n"
                     "2: add (2, 2) float32 <- 0 1\n"
                     "3: const 0.5 float32\n"
                     "4: mul (2, 2) float32 <- 2 3\n");
    /* A leaf alone is a one-item stack. */
    CHECK_LISTING(ot_tensor_node(x0), "0: leaf x0 (2, 2) float32\n");
    ot_tensor_free(x0);
    ot_tensor_free(x1);
    ot_backend_free(be);
}

TEST(stack_listing_attributes)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6}, "x");
    ot_tensor *i = ot_zeros(be, OT_SHAPE(4), OT_I32);
    ot_tensor_set_name(i, "i");
    CHECK_LISTING(ot_sum(x, .axis = 1, .keepdims = true),
                  "0: leaf x (2, 3) float32\n"
                  "1: sum axis=1 keepdims (2, 1) float32 <- 0\n");
    CHECK_LISTING(ot_max(ot_T(x)), "0: leaf x (2, 3) float32\n"
                                   "1: transpose perm=(1, 0) (3, 2) float32 <- 0\n"
                                   "2: max () float32 <- 1\n");
    CHECK_LISTING(ot_cast(x, .dtype = OT_F64), "0: leaf x (2, 3) float32\n"
                                               "1: cast dtype=float64 (2, 3) float64 <- 0\n");
    CHECK_LISTING(ot_onehot(i, .depth = 10), "0: leaf i (4,) int32\n"
                                             "1: onehot depth=10 axis=1 (4, 10) float32 <- 0\n");
    CHECK_LISTING(ot_rand(OT_SHAPE(3), .seed = 9), "0: rand seed=9 (3,) float32\n");
    CHECK_LISTING(ot_add(x, 2), "0: leaf x (2, 3) float32\n"
                                "1: const 2.0 float32\n"
                                "2: add (2, 3) float32 <- 0 1\n");
    CHECK_LISTING(ot_add(i, 2), "0: leaf i (4,) int32\n"
                                "1: const 2 int32\n"
                                "2: add (4,) int32 <- 0 1\n");
    ot_tensor_free(x);
    ot_tensor_free(i);
    ot_backend_free(be);
}

TEST(stack_dedupe_identical_and_uses)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2), (float[]){1, 2}, "x");
    ot_node *e = ot_exp(x);
    ot_node *f = ot_add(ot_mul(e, e), e);
    ot_stack *s = ot_stack_new(f);
    CHECK_INT(ot_stack_len(s), 4);
    CHECK_INT(ot_stack_at(s, 0)->uses, 1);   /* x: read by exp */
    CHECK_INT(ot_stack_at(s, 1)->uses, 3);   /* exp: both slots of mul, one of add */
    CHECK_INT(ot_stack_at(s, 2)->uses, 1);   /* mul */
    CHECK_INT(ot_stack_at(s, 3)->uses, 1);   /* add: the root */
    CHECK_INT(ot_stack_at(s, 2)->a, 1);
    CHECK_INT(ot_stack_at(s, 2)->b, 1);
    ot_stack_free(s);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(stack_dedupe_structural)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *y = arr(be, OT_SHAPE(2, 2), (float[]){5, 6, 7, 8}, "y");
    /* x*y built twice is one item, read twice. */
    ot_stack *s = ot_stack_new(ot_add(ot_mul(x, y), ot_mul(x, y)));
    CHECK_INT(ot_stack_len(s), 4);
    CHECK_INT(ot_stack_at(s, 2)->uses, 2);
    ot_stack_free(s);
    /* Equal constants are one item; NaN by its bits; -0.0 is not 0.0. */
    CHECK_INT(len_of(ot_add(ot_mul(x, 0.5), ot_mul(x, 0.5))), 4);
    CHECK_INT(len_of(ot_add(ot_mul(x, NAN), ot_mul(x, NAN))), 4);
    CHECK_INT(len_of(ot_add(ot_mul(x, 0.0), ot_mul(x, -0.0))), 6);
    /* x*0.5 and x*0.5f are one: both constants become float32 0.5. */
    CHECK_INT(len_of(ot_add(ot_mul(x, 0.5), ot_mul(x, 0.5f))), 4);
    /* Constants of different dtypes differ. */
    CHECK_INT(len_of(ot_add(ot_const(0.5), ot_constf(0.5f))), 3);
    CHECK_INT(len_of(ot_add(ot_const(0.5), ot_const(0.5))), 2);
    /* Attributes matter: sums over different axes differ. */
    CHECK_INT(len_of(ot_add(ot_sum(x, .axis = 1), ot_sum(x, .axis = 1))), 3);
    CHECK_INT(len_of(ot_add(ot_sum(x, .axis = 0), ot_sum(x, .axis = 1))), 4);
    CHECK_INT(len_of(ot_add(ot_sum(x, .axis = 1), ot_sum(x, .axis = -1, .keepdims = false))), 3);
    /* Composite tags do not: squared_l2(x) is sum(sqr(x)). */
    CHECK_INT(len_of(ot_add(ot_squared_l2(x), ot_sum(ot_sqr(x)))), 4);
    /* Operand order matters for non-commutative ops (and is kept for all). */
    CHECK_INT(len_of(ot_add(ot_sub(x, y), ot_sub(y, x))), 5);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(stack_dedupe_leaf_views)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *v1 = ot_slice(x, OT_ALL, OT_RANGE(0, 2));   /* same view as x */
    ot_tensor *v2 = ot_slice(x, OT_IDX(0));
    ot_tensor *v3 = ot_slice(x, OT_IDX(1));
    ot_tensor *xt = ot_transpose(x, NULL);
    ot_tensor *c = ot_copy(x);
    CHECK(v1 && v2 && v3 && xt && c);
    ot_stack *s = ot_stack_new(ot_add(x, v1));
    CHECK_INT(ot_stack_len(s), 2);
    CHECK(ot_stack_at(s, 0)->tensor == x);     /* the first leaf seen */
    CHECK_INT(ot_stack_at(s, 0)->uses, 2);
    ot_stack_free(s);
    CHECK_INT(len_of(ot_add(v2, v3)), 3);      /* other offset */
    CHECK_INT(len_of(ot_add(x, xt)), 3);       /* other strides */
    CHECK_INT(len_of(ot_add(x, c)), 3);        /* other buffer */
    ot_tensor *tt = ot_transpose(xt, NULL);    /* x's layout again */
    CHECK_INT(len_of(ot_add(x, tt)), 2);
    ot_tensor *d = ot_zeros(be, OT_SHAPE(2, 2), OT_F64);
    CHECK_INT(len_of(ot_add(x, d)), 3);
    ot_tensor_free(v1);
    ot_tensor_free(v2);
    ot_tensor_free(v3);
    ot_tensor_free(xt);
    ot_tensor_free(tt);
    ot_tensor_free(c);
    ot_tensor_free(d);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* Two views of the same elements that differ only in a size-1 dim's
 * stride are one leaf (ot__same_view), on the stack as in the plan key;
 * and the plan computes with either view the same values. */
TEST(stack_dedupe_size1_stride)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(4), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *a = ot_reshape(x, OT_SHAPE(1, 4)), *b = ot_broadcast_to(x, OT_SHAPE(1, 4));
    CHECK(a && b);
    if (!a || !b) return;
    CHECK(ot_tensor_stride(a, 0) != ot_tensor_stride(b, 0));
    CHECK_INT(len_of(ot_add(a, b)), 2);
    ot_backend *cpu = ot_backend_new("cpu", NULL);
    ot_tensor *xc = ot_array(cpu, OT_SHAPE(4), OT_F32, (float[]){1, 2, 3, 4});
    ot_tensor *ac = ot_reshape(xc, OT_SHAPE(1, 4)), *bc = ot_broadcast_to(xc, OT_SHAPE(1, 4));
    ot_tensor *out = ot_empty(cpu, OT_SHAPE(1, 4), OT_F32);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(out, ot_add(ot_mul(ac, 2.0f), bc)), 0);
    ot_pool_pop(p);
    float got[4];
    CHECK_INT(ot_get(out, got), 0);
    CHECK(got[0] == 3 && got[1] == 6 && got[2] == 9 && got[3] == 12);
    ot_tensor_free(ac);
    ot_tensor_free(bc);
    ot_tensor_free(xc);
    ot_tensor_free(out);
    ot_backend_free(cpu);
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(stack_many_roots)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2), (float[]){1, 2}, "x");
    ot_tensor *y = arr(be, OT_SHAPE(2), (float[]){3, 4}, "y");
    ot_node *m = ot_mul(x, y);
    ot_node *e = ot_exp(m);
    const ot_node *roots[] = {e, ot_add(ot_mul(x, y), y), ot_tensor_node(y), e};
    int out[4] = {-9, -9, -9, -9};
    ot_stack *s = ot__stack_new_many(4, roots, out);
    CHECK(s != NULL);
    /* x y mul exp, then add: mul (built twice) and y are shared. */
    CHECK_INT(ot_stack_len(s), 5);
    CHECK_INT(out[0], 3);
    CHECK_INT(out[1], 4);
    CHECK_INT(out[2], 1);
    CHECK_INT(out[3], 3);
    CHECK_INT(ot_stack_at(s, 1)->uses, 3);     /* mul, add, and a root */
    CHECK_INT(ot_stack_at(s, 2)->uses, 2);     /* exp and add */
    CHECK_INT(ot_stack_at(s, 3)->uses, 2);     /* two roots */
    CHECK_INT(ot_stack_at(s, 4)->uses, 1);
    ot_stack_free(s);
    /* Zero roots give an empty stack; roots_out may be NULL. */
    s = ot__stack_new_many(0, NULL, NULL);
    CHECK(s != NULL && ot_stack_len(s) == 0);
    ot_stack_free(s);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(stack_errors)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2), (float[]){1, 2}, "x");
    ot_clear_error();
    CHECK(ot_stack_new(NULL) == NULL);
    CHECK_ERR(OT_ENULL, "ot_stack_new", "tree is NULL");
    const ot_node *roots[] = {ot_tensor_node(x), NULL};
    CHECK(ot__stack_new_many(2, roots, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "tree is NULL");
    CHECK(ot__stack_new_many(-1, roots, NULL) == NULL);
    CHECK_ERR(OT_EINVAL, "negative");
    /* A NULL tree from a failed builder keeps the builder's error. */
    ot_tensor *y = arr(be, OT_SHAPE(3), (float[]){1, 2, 3}, "y");
    CHECK(ot_stack_new(ot_add(x, y)) == NULL);
    CHECK_ERR(OT_ESHAPE, "add");
    CHECK_INT(ot_stack_len(NULL), 0);
    CHECK(ot_stack_at(NULL, 0) == NULL);
    ot_stack_free(NULL);
    CHECK_INT(ot_stack_print(NULL, stdout), OT_ENULL);
    CHECK_ERR(OT_ENULL, "stack is NULL");
    ot_stack *s = ot_stack_new(ot_exp(x));
    CHECK_INT(ot_stack_print(s, NULL), OT_ENULL);
    CHECK_ERR(OT_ENULL, "FILE is NULL");
    FILE *ro = fopen("/dev/null", "r");
    if (ro) {
        CHECK_INT(ot_stack_print(s, ro), OT_EIO);
        CHECK_ERR(OT_EIO, "write failed");
        fclose(ro);
    }
    ot_stack_free(s);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

TEST(stack_diamond_linear)
{
    /* Depth 40: 2^40 root-to-leaf paths. A walk that does not memoise by
     * pointer would never end; this one sees 41 nodes. */
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2), (float[]){1, 2}, "x");
    ot_node *d = ot_tensor_node(x);
    for (int i = 0; i < 40; i++) d = ot_add(d, d);
    double t0 = seconds();
    ot_stack *s = ot_stack_new(d);
    CHECK_INT(ot_stack_len(s), 41);
    for (int i = 1; i < 41; i++) {
        CHECK_INT(ot_stack_at(s, i)->a, i - 1);
        CHECK_INT(ot_stack_at(s, i)->b, i - 1);
        CHECK_INT(ot_stack_at(s, i - 1)->uses, 2);
    }
    ot_stack_free(s);
    /* Two equal but distinct nodes per level: memoised by pointer, merged
     * by structure, still 41 items. */
    ot_node *a = ot_tensor_node(x), *b = a;
    for (int i = 0; i < 40; i++) {
        ot_node *na = ot_add(a, b), *nb = ot_add(a, b);
        a = na;
        b = nb;
    }
    CHECK_INT(len_of(ot_mul(a, b)), 42);
    /* The same over 100,000 levels takes time linear in the levels. */
    ot_pool *pool = ot_pool_push();
    a = b = ot_tensor_node(x);
    for (int i = 0; i < 100000; i++) {
        ot_node *na = ot_add(a, b), *nb = ot_add(a, b);
        a = na;
        b = nb;
    }
    CHECK_INT(len_of(ot_sub(a, b)), 100002);
    ot_pool_pop(pool);
    CHECK(seconds() - t0 < 20.0);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(stack_deep_chain)
{
    enum { DEPTH = TEST_HEIGHT };
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2), (float[]){1, 2}, "x");
    ot_pool *pool = ot_pool_push();
    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = ot_add(ot_neg(n), 1.0f);
    ot_stack *s = ot_stack_new(n);
    /* x, const 1.0 (one item for all 100,000), then neg and add per level. */
    CHECK_INT(ot_stack_len(s), 2 + 2 * DEPTH);
    CHECK_INT(ot_stack_at(s, 2)->uses, DEPTH);
    CHECK(ot_stack_at(s, ot_stack_len(s) - 1)->node == n);
    FILE *f = fopen("/dev/null", "w");
    CHECK_INT(ot_stack_print(s, f), 0);
    fclose(f);
    ot_stack_free(s);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- ot_substitute ------------------------------------------------------- */

static void get2x2(ot_tensor *t, float out[4])
{
    CHECK_INT(ot_get(t, out), 0);
}

/* Evaluates tree into a new 2x2 f64 tensor and reads it out. */
static void eval4(ot_backend *be, ot_node *tree, double out[4])
{
    ot_tensor *o = ot_empty(be, OT_SHAPE(2, 2), OT_F64);
    CHECK_INT(ot_assign(o, ot_cast(tree, .dtype = OT_F64)), 0);
    CHECK_INT(ot_get(o, out), 0);
    ot_tensor_free(o);
}

TEST(stack_substitute_values)
{
    ot_backend *be = ref();
    ot_tensor *x0 = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x0");
    ot_tensor *x1 = arr(be, OT_SHAPE(2, 2), (float[]){5, 6, 7, 8}, "x1");
    ot_tensor *y = arr(be, OT_SHAPE(2, 2), (float[]){10, 20, 30, 40}, "y");
    ot_node *left = ot_exp(ot_mul(x1, 0.0f));          /* has no x0: stays shared */
    ot_node *f = ot_add(ot_mul(x0, x1), ot_sub(left, x0));
    char *before = test__capture(ot_pp, f);
    ot_node *g = ot_substitute(f, x0, y);
    CHECK(g != NULL && g != f);
    CHECK_INT(ot_errcode(), 0);
    char *after = test__capture(ot_pp, g);
    CHECK_STR(after, "((y * x1) + ((exp (x1 * 0.0)) - y))");
    free(after);
    after = test__capture(ot_pp, f);
    CHECK_STR(after, before);                            /* the original is unchanged */
    free(after);
    free(before);
    CHECK(ot_node_child(ot_node_child(g, 1), 0) == left);
    double v[4], w[4];
    eval4(be, g, v);
    eval4(be, f, w);
    float yv[4], x0v[4], x1v[4];
    get2x2(y, yv);
    get2x2(x0, x0v);
    get2x2(x1, x1v);
    for (int i = 0; i < 4; i++) {
        CHECK_NEAR(v[i], yv[i] * x1v[i] + (1.0 - yv[i]), 1e-6);
        CHECK_NEAR(w[i], x0v[i] * x1v[i] + (1.0 - x0v[i]), 1e-6);
    }
    ot_tensor_free(x0);
    ot_tensor_free(x1);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(stack_substitute_sharing_and_identity)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *z = arr(be, OT_SHAPE(2, 2), (float[]){1, 1, 1, 1}, "z");
    ot_tensor *y = arr(be, OT_SHAPE(2, 2), (float[]){0, 0, 0, 0}, "y");
    /* No occurrence: the same tree back. */
    ot_node *f = ot_sqr(ot_add(z, 1));
    CHECK(ot_substitute(f, x, y) == f);
    CHECK(ot_substitute(ot_tensor_node(z), x, y) == ot_tensor_node(z));
    /* A leaf that is old becomes new's leaf. */
    CHECK(ot_substitute(ot_tensor_node(x), x, y) == ot_tensor_node(y));
    /* A shared subtree is rebuilt once and stays shared. */
    ot_node *e = ot_exp(x);
    ot_node *g = ot_substitute(ot_add(e, e), x, y);
    CHECK(g && ot_node_child(g, 0) == ot_node_child(g, 1));
    CHECK(ot_node_child(g, 0) != e);
    /* A view of old's buffer is not old: only the pointer counts. */
    ot_tensor *v = ot_slice(x, OT_ALL);
    ot_node *h = ot_add(v, x);
    char *s = test__capture(ot_pp, ot_substitute(h, x, y));
    CHECK_STR(s, "(x[:] + y)");   /* the view keeps x's name, not x's place */
    free(s);
    ot_tensor_free(v);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(z);
    ot_backend_free(be);
}

TEST(stack_substitute_composites_and_dtypes)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *y = arr(be, OT_SHAPE(2, 2), (float[]){0, 0, 0, 0}, "y");
    ot_tensor *d = ot_zeros(be, OT_SHAPE(2, 2), OT_F64);
    ot_tensor_set_name(d, "d");
    /* The composite is rebuilt as itself, over the new operand. */
    ot_node *sm = ot_softmax(x, .axis = 1);
    ot_node *g = ot_substitute(ot_mul(sm, 2.0f), x, y);
    CHECK(g != NULL);
    char *s = test__capture(ot_pp, g);
    CHECK_STR(s, "((softmax y axis=1) * 2.0)");
    free(s);
    CHECK_INT(ot_node_tag(ot_node_child(g, 0)), OT_OP_SOFTMAX);
    double v[4];
    eval4(be, g, v);
    for (int i = 0; i < 4; i++) CHECK_NEAR(v[i], 1.0, 1e-6);    /* 2 * 0.5 */
    s = test__capture(ot_pp, ot_substitute(ot_clip(ot_var(x, .axis = 0, .ddof = 1), -1.0, 1.0),
                                           x, y));
    CHECK_STR(s, "(clip (var y axis=0 ddof=1) lo=-1.0 hi=1.0)");
    free(s);
    /* Dtypes are promoted afresh: an f64 leaf makes the tree f64. */
    ot_node *f = ot_sum(ot_mul(x, 0.5), .axis = 0);
    CHECK_INT(ot_node_dtype(f), OT_F32);
    ot_node *h = ot_substitute(f, x, d);
    CHECK(h != NULL);
    CHECK_INT(ot_node_dtype(h), OT_F64);
    CHECK_INT(ot_node_args(h).axis, 0);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(d);
    ot_backend_free(be);
}

TEST(stack_substitute_errors)
{
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *w = arr(be, OT_SHAPE(3, 2), (float[]){1, 2, 3, 4, 5, 6}, "w");
    ot_tensor *y = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "y");
    ot_node *f = ot_exp(x);
    ot_clear_error();
    CHECK(ot_substitute(f, x, w) == NULL);
    CHECK_ERR(OT_ESHAPE, "substitute: shapes (2,2) and (3,2) differ");
    CHECK(ot_substitute(NULL, x, y) == NULL);
    CHECK_ERR(OT_ENULL, "substitute", "tree is NULL");
    CHECK(ot_substitute(f, NULL, y) == NULL);
    CHECK_ERR(OT_ENULL, "old is NULL");
    CHECK(ot_substitute(f, x, NULL) == NULL);
    CHECK_ERR(OT_ENULL, "new_t is NULL");
    /* Builder style: the first error of an expression is kept. */
    CHECK(ot_substitute(ot_add(x, w), x, y) == NULL);
    CHECK_ERR(OT_ESHAPE, "add", "(2,2)", "(3,2)");
    /* A rebuild the builder refuses: dot has no int32 form. */
    ot_tensor *i = ot_zeros(be, OT_SHAPE(2, 2), OT_I32);
    CHECK(ot_substitute(ot_dot(x, x), x, i) == NULL);
    CHECK_ERR(OT_EDTYPE, "dot", "int32");
    ot_tensor_free(i);
    ot_tensor_free(x);
    ot_tensor_free(w);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(stack_substitute_deep)
{
    enum { DEPTH = TEST_HEIGHT };
    ot_backend *be = ref();
    ot_tensor *x = arr(be, OT_SHAPE(2, 2), (float[]){1, 2, 3, 4}, "x");
    ot_tensor *y = arr(be, OT_SHAPE(2, 2), (float[]){-1, -2, -3, -4}, "y");
    ot_pool *pool = ot_pool_push();
    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = i % 2 ? ot_neg(n) : ot_add(n, 1.0f);
    ot_node *g = ot_substitute(n, x, y);
    CHECK(g != NULL && g != n);
    /* Walk down the new chain: every level rebuilt, y at the bottom. */
    const ot_node *p = g, *q = n;
    int levels = 0;
    while (ot_node_kind(p) == OT_NODE_OP) {
        if (p == q) break;
        p = ot_node_child(p, 0);
        q = ot_node_child(q, 0);
        levels++;
    }
    CHECK_INT(levels, DEPTH);
    CHECK(p == ot_tensor_node(y));
    CHECK(q == ot_tensor_node(x));
    double v[4];
    eval4(be, g, v);
    /* (((y + 1) neg) + 1) neg ...: DEPTH/2 rounds of y -> -(y + 1). */
    float yv[4];
    get2x2(y, yv);
    for (int i = 0; i < 4; i++) CHECK_NEAR(v[i], yv[i], 1e-6);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

/* A stack retains its tree: its items' nodes and tensors stay valid after
 * the pool that built them is popped and the tensor freed, until
 * ot_stack_free. */
TEST(stack_holds_its_tree)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_stack *s = ot_stack_new(ot_exp(ot_add(x, 1.0)));
    ot_pool_pop(p);
    ot_tensor_free(x);
    CHECK(s != NULL);
    CHECK_INT(ot_stack_len(s), 4);
    const ot_stack_item *leaf = ot_stack_at(s, 0);
    CHECK(leaf && leaf->kind == OT_NODE_LEAF && ot_tensor_numel(leaf->tensor) == 3);
    FILE *sink = fopen("/dev/null", "w");
    CHECK(sink != NULL);
    if (sink) {
        CHECK_INT(ot_stack_print(s, sink), 0);
        fclose(sink);
    }
    ot_stack_free(s);   /* releases the tree, and x with it */
    ot_backend_free(be);
}

/*
 * test_deep.c - trees of height 100,000: a chain of unary ops, a left- and a
 * right-leaning sum, and a chain mixing constants. Each is built, printed
 * (ot_pp, ot_print, ot_graphviz), linearised (ot_stack_new), evaluated on
 * the ref backend (ot_assign, ot_eval), rewritten (ot_substitute) and freed
 * without recursion deep enough to overflow the stack: every walk over a
 * tree, destruction included, must be iterative.
 */
#include "test.h"

#include <stdlib.h>
#include <time.h>

#define DEPTH TEST_HEIGHT

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

/* Non-overlapping occurrences of sub in s. A plain loop: ASan's strstr
 * interceptor measures the whole haystack on every call, which is
 * quadratic over megabytes of output. */
static size_t count(const char *s, const char *sub)
{
    size_t n = 0, k = strlen(sub);
    for (size_t i = 0; s[i];) {
        size_t j = 0;
        while (j < k && s[i + j] == sub[j]) j++;
        if (j == k) { n++; i += k; }
        else i++;
    }
    return n;
}

/* Prints tree every way into /dev/null and checks that each succeeds. */
static void print_all(const ot_node *tree)
{
    FILE *f = fopen("/dev/null", "w");
    CHECK(f != NULL);
    if (!f) return;
    CHECK_INT(ot_pp(tree, f), 0);
    CHECK_INT(ot_print(tree, f), 0);
    CHECK_INT(ot_graphviz(tree, f), 0);
    fclose(f);
}

/* Checks the post-order stack: its length, and that the root comes last
 * and every operand index points backwards. */
static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Builds tree's stack: linear in its nodes, so 10^5 of them take
 * milliseconds. The bound (2 s, sanitizers and valgrind included) catches
 * a hash-consing table that probes in long runs (it took 5 s once). */
static void check_stack(const ot_node *tree, int want_len)
{
    double t0 = seconds();
    ot_stack *s = ot_stack_new(tree);
    double took = seconds() - t0;
    if (took > 2.0) test__fail(__FILE__, __LINE__, "ot_stack_new took %.1f s", took);
    CHECK(s != NULL);
    if (!s) return;
    int n = ot_stack_len(s);
    CHECK_INT(n, want_len);
    int bad = 0;
    for (int i = 0; i < n; i++) {
        const ot_stack_item *it = ot_stack_at(s, i);
        if (!it || it->a >= i || it->b >= i) bad++;
    }
    CHECK_INT(bad, 0);
    if (n > 0) CHECK(ot_stack_at(s, n - 1)->node == tree);
    FILE *f = fopen("/dev/null", "w");
    if (f) {
        CHECK_INT(ot_stack_print(s, f), 0);
        fclose(f);
    }
    ot_stack_free(s);
}

/* ot_assign into out and ot_eval; both must give want[0..n). */
static void check_value(ot_tensor *out, ot_node *tree, const double *want, int n)
{
    double got[8];
    CHECK_INT(ot_assign(out, tree), 0);
    CHECK_INT(ot_get(out, got), 0);
    for (int i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], 0);
    ot_tensor *e = ot_eval(tree);
    CHECK(e != NULL);
    if (!e) return;
    CHECK_INT(ot_tensor_numel(e), n);
    ot_tensor *e64 = ot_zeros_like(out);
    CHECK_INT(ot_assign(e64, e), 0);
    CHECK_INT(ot_get(e64, got), 0);
    for (int i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], 0);
    ot_tensor_free(e64);
    ot_tensor_free(e);
}

/* (a) neg(abs(neg(abs(... neg(x))))): 100,000 unary ops. */
TEST(deep_unary_chain)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, -2, 3.5f});
    ot_tensor *y = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){-4, 5, 0});
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F64);
    ot_tensor_set_name(x, "x");
    ot_pool *p = ot_pool_push();

    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++)
        n = (i % 2 == 0) ? ot_neg(n) : ot_abs(n);
    CHECK(n != NULL);
    if (!n) { ot_pool_pop(p); return; }
    CHECK_INT(ot_node_op(n), OT_OP_ABS);
    CHECK_INT(ot_node_dtype(n), OT_F32);
    CHECK_INT(ot_node_shape(n).ndim, 1);

    char *pp = test__capture(ot_pp, n);
    CHECK(pp != NULL);
    if (pp) {
        CHECK_INT(count(pp, "(neg "), DEPTH / 2);
        CHECK_INT(count(pp, "(abs "), DEPTH / 2);
        CHECK_INT(count(pp, "("), count(pp, ")"));
        /* a line per 64 levels (ot_parse reads 200): the root's last */
        const char *root = strrchr(pp, '\n');
        CHECK(strncmp(pp, "%1 = (", 6) == 0 && root && strncmp(root + 1, "(abs (neg (abs ", 15) == 0);
        CHECK(strstr(pp, "(neg x)") != NULL);
        free(pp);
    }
    char *tp = test__capture(ot_print, n);
    CHECK(tp != NULL);
    if (tp) {
        CHECK_INT(count(tp, "'op': 'neg'"), DEPTH / 2);
        CHECK_INT(count(tp, "'op': 'abs'"), DEPTH / 2);
        free(tp);
    }
    print_all(n);
    check_stack(n, DEPTH + 1);
    /* abs last: |x| */
    check_value(out, n, (double[]){1, 2, 3.5}, 3);

    /* Substituting the leaf rebuilds the whole chain. */
    ot_node *m = ot_substitute(n, x, y);
    CHECK(m != NULL);
    if (m) {
        check_value(out, m, (double[]){4, 5, 0}, 3);
        check_stack(m, DEPTH + 1);
    }
    check_value(out, n, (double[]){1, 2, 3.5}, 3);

    CHECK_INT(ot_pool_pop(p), 0);
    ot_tensor_free(x); ot_tensor_free(y); ot_tensor_free(out);
    ot_backend_free(be);
}

/* (b) ((x + x) + x) + ... : 100,000 adds leaning left. */
TEST(deep_left_sum)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(2), OT_F32, (float[]){1, -0.5f});
    ot_tensor *out = ot_zeros(be, OT_SHAPE(2), OT_F64);
    ot_tensor_set_name(x, "x");
    ot_pool *p = ot_pool_push();

    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = ot_add(n, x);
    CHECK(n != NULL);
    if (!n) { ot_pool_pop(p); return; }

    char *pp = test__capture(ot_pp, n);
    CHECK(pp != NULL);
    if (pp) {
        CHECK_INT(count(pp, " + "), DEPTH);
        CHECK_INT(count(pp, "("), DEPTH);
        CHECK_INT(count(pp, ")"), DEPTH);
        /* the first line: the innermost 64 sums (a line per 64 levels,
         * which ot_parse reads), then the others naming the line before */
        CHECK(strncmp(pp, "%1 = ", 5) == 0 && strspn(pp + 5, "(") == 64);
        CHECK(strncmp(pp + 5 + 64, "x + x) + x) + x)", 16) == 0);
        const char *second = strstr(pp, "\n%2 = ");
        CHECK(second && strspn(second + 6, "(") == 64 && strncmp(second + 70, "%1 + x) + x)", 12) == 0);
        free(pp);
    }
    print_all(n);
    /* x is one shared item; every add is distinct. */
    check_stack(n, DEPTH + 1);
    check_value(out, n, (double[]){DEPTH + 1, -0.5 * (DEPTH + 1)}, 2);

    CHECK_INT(ot_pool_pop(p), 0);
    ot_tensor_free(x); ot_tensor_free(out);
    ot_backend_free(be);
}

/* x + (x + (x + ...)): 100,000 adds leaning right, in the default pool. */
TEST(deep_right_sum_default_pool)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(2), OT_F64, (double[]){2, 3});
    ot_tensor *out = ot_zeros(be, OT_SHAPE(2), OT_F64);
    ot_tensor_set_name(x, "x");

    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = ot_add(x, n);
    CHECK(n != NULL);
    if (!n) { ot_pool_drain(); return; }
    char *pp = test__capture(ot_pp, n);
    CHECK(pp != NULL);
    if (pp) {
        CHECK(strncmp(pp, "%1 = (x + (x + (x + ", 20) == 0);
        CHECK_INT(count(pp, " + "), DEPTH);
        free(pp);
    }
    print_all(n);
    check_stack(n, DEPTH + 1);
    check_value(out, n, (double[]){2.0 * (DEPTH + 1), 3.0 * (DEPTH + 1)}, 2);

    ot_tensor_free(x);          /* the tree keeps it alive */
    check_value(out, n, (double[]){2.0 * (DEPTH + 1), 3.0 * (DEPTH + 1)}, 2);
    ot_pool_drain();
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* (c) a chain mixing constants of every weak dtype, on both sides. */
TEST(deep_const_chain)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, 2, -3});
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F64);
    ot_tensor_set_name(x, "x");
    double want[3] = {1, 2, -3};
    ot_pool *p = ot_pool_push();

    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) {
        switch (i % 4) {
        case 0: n = ot_add(n, 0.5); break;
        case 1: n = ot_mul(1, n); break;
        case 2: n = ot_sub(n, 0.25f); break;
        default: n = ot_add(0.5, n); break;
        }
        for (int k = 0; k < 3; k++) {
            switch (i % 4) {
            case 0: want[k] += 0.5; break;
            case 1: want[k] *= 1; break;
            case 2: want[k] -= 0.25; break;
            default: want[k] += 0.5; break;
            }
        }
    }
    CHECK(n != NULL);
    if (!n) { ot_pool_pop(p); return; }
    /* Weak constants leave the tree f32. */
    CHECK_INT(ot_node_dtype(n), OT_F32);

    char *pp = test__capture(ot_pp, n);
    CHECK(pp != NULL);
    if (pp) {
        CHECK_INT(count(pp, " + "), DEPTH / 2);
        CHECK_INT(count(pp, " * "), DEPTH / 4);
        CHECK_INT(count(pp, " - "), DEPTH / 4);
        free(pp);
    }
    print_all(n);
    /* x, the three distinct constants (0.5 f64, 1 i32, 0.25 f32), the ops. */
    check_stack(n, DEPTH + 4);
    check_value(out, n, want, 3);

    CHECK_INT(ot_pool_pop(p), 0);
    ot_tensor_free(x); ot_tensor_free(out);
    ot_backend_free(be);
}

/* A deep tree kept with ot_retain beyond its pool, then freed by one
 * ot_release: the cascade of 100,000 frees must not recurse. */
TEST(deep_retain_release)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_full(be, OT_SHAPE(4), OT_F32, 1.0);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(4), OT_F64);
    ot_pool *p = ot_pool_push();
    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = (i % 2) ? ot_sqr(n) : ot_neg(n);
    CHECK(n != NULL);
    if (!n) { ot_pool_pop(p); return; }
    ot_node *keep = ot_retain(n);
    CHECK(keep == n);
    CHECK_INT(ot_pool_pop(p), 0);

    /* Still alive and correct after the pop: sqr(neg(1)) ... = 1. */
    check_value(out, keep, (double[]){1, 1, 1, 1}, 4);
    /* Deep trees also work as operands of new trees in a new pool. */
    ot_pool *q = ot_pool_push();
    ot_node *m = ot_add(ot_mul(keep, 3), keep);
    check_value(out, m, (double[]){4, 4, 4, 4}, 4);
    check_stack(m, DEPTH + 4);
    CHECK_INT(ot_pool_pop(q), 0);

    ot_tensor_free(x);
    ot_release(keep);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* Deep trees on both sides of one op, one of them a reduction's operand,
 * assigned together with ot_assign_many. */
TEST(deep_two_branches_many)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(2, 2), OT_F64, (double[]){1, 2, 3, 4});
    ot_tensor *o1 = ot_zeros(be, OT_SHAPE(2, 2), OT_F64);
    ot_tensor *o2 = ot_zeros(be, OT_SHAPE(2), OT_F64);
    ot_pool *p = ot_pool_push();
    ot_node *l = ot_tensor_node(x), *r = ot_tensor_node(x);
    for (int i = 0; i < DEPTH / 2; i++) {
        l = ot_neg(l);
        r = ot_add(r, 0);
    }
    ot_node *t1 = ot_sub(l, r);                 /* x - x = 0 (even negs) */
    ot_node *t2 = ot_sum(ot_mul(r, l), .axis = 0);
    CHECK(t1 != NULL && t2 != NULL);
    if (!t1 || !t2) { ot_pool_pop(p); return; }
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){o1, o2}, (ot_node *[]){t1, t2}), 0);
    double h[4];
    CHECK_INT(ot_get(o1, h), 0);
    for (int i = 0; i < 4; i++) CHECK_NEAR(h[i], 0, 0);
    CHECK_INT(ot_get(o2, h), 0);
    CHECK_NEAR(h[0], 1 + 9, 0);
    CHECK_NEAR(h[1], 4 + 16, 0);
    print_all(t2);
    /* x, the constant 0, DEPTH/2 negs, DEPTH/2 adds, mul, sum. */
    check_stack(t2, 2 + DEPTH + 2);
    CHECK_INT(ot_pool_pop(p), 0);
    ot_tensor_free(x); ot_tensor_free(o1); ot_tensor_free(o2);
    ot_backend_free(be);
}

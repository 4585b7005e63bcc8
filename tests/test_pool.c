/*
 * test_pool.c - pools and refcounts: nesting, pop releasing inner pools,
 * ot_retain across a pop, the default pool and ot_pool_drain, tensors freed
 * while a tree uses them, per-thread pools, and memory that stays flat over
 * 10^5 build/assign/pop iterations.
 *
 * Refcounts are read white-box through src/core/internal.h: a tensor's leaf
 * counts its creator plus every parent node, so a pool pop shows up as the
 * count falling back.
 */
#include "test.h"
#include "internal.h"

#include <malloc.h>
#include <pthread.h>
#include <stdlib.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#define OT_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define OT_TEST_ASAN 1
#endif
#endif
#ifdef OT_TEST_ASAN
/* From <sanitizer/allocator_interface.h>, which not every install ships. */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

static long refs(const ot_tensor *t)
{
    return ot__node_refs(&t->leaf);
}

/* Bytes the program has allocated and not freed (ASan's own count under
 * ASan, where freed blocks sit in quarantine and RSS means little). */
static long long live_bytes(void)
{
#ifdef OT_TEST_ASAN
    return (long long)__sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 mi = mallinfo2();
    return (long long)mi.uordblks + (long long)mi.hblkhd;
#endif
}

/* Resident set size in bytes, from /proc/self/statm. */
static long long rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    long long size = 0, res = 0;
    if (!f) return -1;
    if (fscanf(f, "%lld %lld", &size, &res) != 2) res = -1;
    fclose(f);
    return res < 0 ? -1 : res * (long long)sysconf(_SC_PAGESIZE);
}

static void check_vals(ot_tensor *t, const double *want, int n)
{
    double h[16];
    ot_tensor *d = ot_zeros(ot_tensor_backend(t), ot_tensor_shape(t), OT_F64);
    CHECK_INT(ot_assign(d, t), 0);
    CHECK_INT(ot_get(d, h), 0);
    for (int i = 0; i < n; i++) CHECK_NEAR(h[i], want[i], 0);
    ot_tensor_free(d);
}

TEST(pool_pop_releases)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(3), OT_F32);
    CHECK_INT(refs(x), 1);
    ot_pool *p = ot_pool_push();
    CHECK(p != NULL);
    ot_node *n = ot_exp(ot_neg(x));
    CHECK(n != NULL);
    CHECK(refs(x) > 1);
    /* A tensor used as a leaf costs no node: its own leaf is the operand. */
    CHECK(ot_node_child(ot_node_child(n, 0), 0) == ot_tensor_node(x));
    CHECK_INT(ot_pool_pop(p), 0);
    CHECK_INT(refs(x), 1);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(pool_nesting)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, 2, 3});
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F32);

    ot_pool *p1 = ot_pool_push();
    ot_node *a = ot_neg(x);
    long r1 = refs(x);
    CHECK(r1 > 1);

    ot_pool *p2 = ot_pool_push();
    CHECK(p2 != NULL && p2 != p1);
    ot_node *b = ot_add(x, a);
    ot_node *c = ot_mul(b, x);
    CHECK(b != NULL && c != NULL);
    CHECK(refs(x) > r1);
    CHECK_INT(ot_assign(out, c), 0);
    check_vals(out, (double[]){0, 0, 0}, 3);
    CHECK_INT(ot_pool_pop(p2), 0);
    CHECK_INT(refs(x), r1);

    /* a (in p1) is alive and usable; new nodes go to p1 again. */
    CHECK_INT(ot_assign(out, a), 0);
    check_vals(out, (double[]){-1, -2, -3}, 3);
    ot_node *d = ot_sqr(x);
    CHECK(refs(x) > r1);
    CHECK_INT(ot_assign(out, ot_add(a, d)), 0);
    check_vals(out, (double[]){0, 2, 6}, 3);

    CHECK_INT(ot_pool_pop(p1), 0);
    CHECK_INT(refs(x), 1);
    ot_tensor_free(x); ot_tensor_free(out);
    ot_backend_free(be);
}

TEST(pool_pop_outer_releases_inner)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F32);

    ot_pool *p1 = ot_pool_push();
    (void)ot_neg(x);
    ot_pool *p2 = ot_pool_push();
    (void)ot_neg(x);
    ot_pool *p3 = ot_pool_push();
    (void)ot_add(x, x);
    CHECK(p1 && p2 && p3);
    CHECK(refs(x) >= 5);
    CHECK_INT(ot_pool_pop(p1), 0);
    CHECK_INT(refs(x), 1);

    /* With every pool popped, nodes go to the default pool. */
    ot_node *n = ot_neg(x);
    CHECK(n != NULL);
    CHECK_INT(refs(x), 2);
    ot_pool_drain();
    CHECK_INT(refs(x), 1);

    /* Many levels deep, popped from the bottom at once. */
    ot_pool *bottom = ot_pool_push();
    for (int i = 0; i < 1000; i++) {
        CHECK(ot_pool_push() != NULL);
        (void)ot_neg(x);
    }
    CHECK_INT(refs(x), 1001);
    CHECK_INT(ot_pool_pop(bottom), 0);
    CHECK_INT(refs(x), 1);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* A popped pool's handle stays stale when the next push reuses its memory
 * (the spare pool): popping it again is OT_ESTATE and leaves the newer
 * pool, and its nodes, alone. */
TEST(pool_stale_handle_pops_nothing)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F32);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_pool_pop(p), 0);
    ot_pool *q = ot_pool_push();
    CHECK(q != NULL && q != p);
    ot_node *n = ot_neg(x);
    CHECK(n != NULL);
    CHECK_INT(ot_pool_pop(p), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "pool_pop", "not on this thread's pool stack");
    CHECK_INT(refs(x), 2);   /* q and n are alive */
    CHECK_INT(ot_pool_pop(q), 0);
    CHECK_INT(refs(x), 1);
    CHECK_INT(ot_pool_pop(q), OT_ESTATE);
    ot_clear_error();
    int line = __LINE__ + 1;
    CHECK_INT(ot_pool_pop(NULL), OT_ENULL);
    char at[128];
    CHECK_ERR(OT_ENULL, TEST_SITE(at, line), "pool_pop: pool is NULL");
    for (int i = 0; i < 200; i++) {   /* each push's handle pops once */
        ot_pool *r = ot_pool_push();
        CHECK_INT(ot_pool_pop(r), 0);
        CHECK_INT(ot_pool_pop(r), OT_ESTATE);
    }
    /* Random pushes and pops, pools freed and their memory malloc'd again:
     * no handle ever popped is taken for a live pool (a handle that was an
     * address with a 6-bit tag was, within a thousand steps). */
    enum { DEPTH = 16, KEPT = 4096 };
    ot_pool *stack[DEPTH], *popped[KEPT];
    int sp = 0, np = 0;
    unsigned s = 1;
    for (int it = 0; it < 20000; it++) {
        s = s * 1103515245u + 12345u;
        unsigned r = s >> 16;
        if (r % 3 < 2 && sp < DEPTH) {
            stack[sp++] = ot_pool_push();
        } else if (sp > 0) {
            int k = (int)(r / 3 % (unsigned)sp);
            for (int j = k; j < sp; j++) popped[np++ % KEPT] = stack[j];
            CHECK_INT(ot_pool_pop(stack[k]), 0);
            sp = k;
        }
        if (np && it % 7 == 0) {
            ot_pool *stale = popped[(r >> 4) % (unsigned)(np < KEPT ? np : KEPT)];
            CHECK_INT(ot_pool_pop(stale), OT_ESTATE);
        }
    }
    if (sp) CHECK_INT(ot_pool_pop(stack[0]), 0);
    ot_clear_error();
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(pool_retain_survives_pop)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F64, (double[]){1, 2, 3});
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F64);

    ot_pool *p = ot_pool_push();
    ot_node *n = ot_mul(ot_add(x, 1), 2.0);
    ot_node *keep = ot_retain(n);
    CHECK(keep == n);
    CHECK(ot_retain(keep) == keep);          /* twice */
    CHECK_INT(ot_pool_pop(p), 0);
    CHECK(refs(x) > 1);

    CHECK_INT(ot_assign(out, keep), 0);
    check_vals(out, (double[]){4, 6, 8}, 3);

    /* Used inside a later pool, whose pop leaves it alone. */
    ot_pool *q = ot_pool_push();
    CHECK_INT(ot_assign(out, ot_sub(keep, x)), 0);
    check_vals(out, (double[]){3, 4, 5}, 3);
    CHECK_INT(ot_pool_pop(q), 0);

    ot_release(keep);
    CHECK(refs(x) > 1);
    CHECK_INT(ot_assign(out, ot_neg(keep)), 0);  /* default pool */
    check_vals(out, (double[]){-4, -6, -8}, 3);
    ot_pool_drain();
    ot_release(keep);
    CHECK_INT(refs(x), 1);

    /* A tensor's leaf can be retained too; it then outlives ot_tensor_free. */
    ot_node *leaf = ot_retain(ot_tensor_node(x));
    CHECK_INT(refs(x), 2);
    ot_tensor_free(x);
    CHECK_INT(ot_assign(out, ot_mul(leaf, leaf)), 0);
    check_vals(out, (double[]){1, 4, 9}, 3);
    ot_pool_drain();
    ot_release(leaf);                            /* destroys the tensor */

    CHECK(ot_retain(NULL) == NULL);
    ot_release(NULL);
    ot_tensor_free(out);
    ot_backend_free(be);
}

TEST(pool_default_and_drain)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_ones(be, OT_SHAPE(2), OT_F32);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(2), OT_F32);

    ot_pool_drain();                 /* an empty default pool: a no-op */
    ot_node *a = ot_neg(x);
    CHECK(a != NULL);
    CHECK_INT(refs(x), 2);

    /* Pushing and popping a pool leaves default-pool nodes alone. */
    ot_pool *p = ot_pool_push();
    ot_node *b = ot_add(a, x);
    CHECK_INT(refs(x), 3);
    CHECK_INT(ot_assign(out, b), 0);
    CHECK_INT(ot_pool_pop(p), 0);
    CHECK_INT(refs(x), 2);
    CHECK_INT(ot_assign(out, a), 0);
    check_vals(out, (double[]){-1, -1}, 2);

    /* Draining with a pool pushed releases only the default pool. */
    p = ot_pool_push();
    ot_node *c = ot_sqr(x);
    CHECK_INT(refs(x), 3);
    ot_pool_drain();
    CHECK_INT(refs(x), 2);
    CHECK_INT(ot_assign(out, c), 0);
    check_vals(out, (double[]){1, 1}, 2);
    CHECK_INT(ot_pool_pop(p), 0);
    CHECK_INT(refs(x), 1);
    ot_pool_drain();
    CHECK_INT(refs(x), 1);

    ot_tensor_free(x); ot_tensor_free(out);
    ot_backend_free(be);
}

TEST(pool_tensor_freed_while_used)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(2, 2), OT_F32, (float[]){1, 2, 3, 4});
    ot_tensor *col = ot_slice(x, OT_ALL, OT_IDX(1));
    ot_tensor *out = ot_zeros(be, OT_SHAPE(2, 2), OT_F32);
    ot_pool *p = ot_pool_push();

    ot_node *n = ot_add(ot_mul(x, 2.0), col);   /* (2,2) + (2,) */
    ot_tensor_free(x);
    ot_tensor_free(col);
    CHECK_INT(ot_assign(out, n), 0);
    check_vals(out, (double[]){4, 8, 8, 12}, 4);
    ot_tensor *e = ot_eval(n);
    CHECK(e != NULL);
    if (e) {
        check_vals(e, (double[]){4, 8, 8, 12}, 4);
        ot_tensor_free(e);
    }
    /* The leaves are still readable as leaves. */
    ot_tensor *leaf = ot_node_tensor(ot_node_child(ot_node_child(n, 0), 0));
    CHECK(leaf != NULL);
    if (leaf) check_vals(leaf, (double[]){1, 2, 3, 4}, 4);
    CHECK_INT(ot_pool_pop(p), 0);     /* frees x, col and their buffer */
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* ---- threads ------------------------------------------------------------- */

typedef struct thr_arg {
    ot_tensor *x, *out;
    int id, fails;
} thr_arg;

static void *thr_main(void *v)
{
    thr_arg *a = v;
    ot_tensor *bad = ot_ones(ot_tensor_backend(a->x), OT_SHAPE(7), OT_F32);
    for (int i = 0; i < 5000; i++) {
        ot_pool *p = ot_pool_push();
        ot_node *n = ot_add(ot_mul(a->x, (double)a->id), 1.0);
        if (ot_assign(a->out, n) != 0) a->fails++;
        /* An error on this thread stays in this thread's slot. */
        if (ot_add(a->x, bad) != NULL || ot_errcode() != OT_ESHAPE ||
            !strstr(ot_errmsg(), "(7,)"))
            a->fails++;
        ot_clear_error();
        if (ot_pool_pop(p) != 0) a->fails++;
    }
    ot_pool_drain();
    ot_tensor_free(bad);
    return NULL;
}

TEST(pool_per_thread)
{
    ot_backend *be = ref();
    ot_tensor *x = ot_array(be, OT_SHAPE(3), OT_F32, (float[]){1, 2, 3});
    thr_arg args[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thr_arg){x, ot_zeros(be, OT_SHAPE(3), OT_F32), i + 1, 0};
        CHECK_INT(pthread_create(&th[i], NULL, thr_main, &args[i]), 0);
    }
    /* Main thread's own pool and slot are untouched meanwhile. */
    ot_pool *p = ot_pool_push();
    ot_clear_error();
    for (int i = 0; i < 4; i++) pthread_join(th[i], NULL);
    CHECK_INT(ot_errcode(), 0);
    for (int i = 0; i < 4; i++) {
        CHECK_INT(args[i].fails, 0);
        double want[3];
        for (int k = 0; k < 3; k++) want[k] = (k + 1) * (i + 1) + 1.0;
        check_vals(args[i].out, want, 3);
        ot_tensor_free(args[i].out);
    }
    CHECK_INT(refs(x), 1);
    CHECK_INT(ot_pool_pop(p), 0);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- memory stays flat --------------------------------------------------- */

#define ITERS 100000
#define WARM 10000
#define MIB (1024LL * 1024LL)

static void report_growth(const char *what, long long h0, long long h1,
                          long long r0, long long r1)
{
    if (h1 - h0 >= MIB)
        test__fail(__FILE__, __LINE__, "%s: live heap grew %lld bytes from iteration %d to %d",
                   what, h1 - h0, WARM, ITERS);
#ifndef OT_TEST_ASAN
    if (r0 < 0 || r1 < 0)
        test__fail(__FILE__, __LINE__, "%s: cannot read /proc/self/statm", what);
    else if (r1 - r0 >= MIB)
        test__fail(__FILE__, __LINE__, "%s: RSS grew %lld bytes from iteration %d to %d",
                   what, r1 - r0, WARM, ITERS);
#else
    (void)r0; (void)r1;
#endif
}

TEST(pool_memory_flat)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_full(be, OT_SHAPE(4, 3), OT_F32, 2.0);
    ot_tensor *b = ot_full(be, OT_SHAPE(3), OT_F32, 3.0);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(4, 3), OT_F32);
    long long h0 = 0, r0 = 0;
    int fails = 0;
    for (int i = 0; i < ITERS; i++) {
        if (i == WARM) { h0 = live_bytes(); r0 = rss_bytes(); }
        ot_pool *p = ot_pool_push();
        ot_node *n = ot_add(ot_mul(a, b), ot_exp(ot_neg(b)));
        if (!p || !n || ot_assign(out, n) != 0) fails++;
        if (ot_pool_pop(p) != 0) fails++;
    }
    long long h1 = live_bytes(), r1 = rss_bytes();
    CHECK_INT(fails, 0);
    report_growth("push/build/assign/pop", h0, h1, r0, r1);
    /* Evaluated in double, rounded once into the f32 output. */
    float want = (float)(6 + exp(-3.0));
    check_vals(out, (double[]){want, want}, 2);
    CHECK_INT(refs(a), 1);
    CHECK_INT(refs(b), 1);
    ot_tensor_free(a); ot_tensor_free(b); ot_tensor_free(out);
    ot_backend_free(be);
}

/* The same with the default pool and ot_pool_drain, failing builders, a
 * retained tree, a reduction, views made and freed, and ot_eval. */
TEST(pool_memory_flat_mixed)
{
    ot_backend *be = ref();
    ot_tensor *a = ot_full(be, OT_SHAPE(4, 3), OT_F64, 0.5);
    ot_tensor *bad = ot_ones(be, OT_SHAPE(5), OT_F64);
    ot_tensor *out = ot_zeros(be, OT_SHAPE(3), OT_F64);
    long long h0 = 0, r0 = 0;
    int fails = 0;
    for (int i = 0; i < ITERS; i++) {
        if (i == WARM) { h0 = live_bytes(); r0 = rss_bytes(); }
        ot_node *keep = ot_retain(ot_sum(ot_sqr(a), .axis = 0));
        ot_node *n = ot_add(ot_neg(keep), ot_mul(a, bad));   /* fails */
        if (n != NULL || ot_errcode() != OT_ESHAPE) fails++;
        ot_clear_error();
        ot_tensor *v = ot_slice(a, OT_IDX(i % 4));
        if (!v || ot_assign(out, ot_add(keep, v)) != 0) fails++;
        ot_tensor_free(v);
        if (i % 100 == 0) {
            ot_tensor *e = ot_eval(keep);
            if (!e) fails++;
            ot_tensor_free(e);
        }
        if (i % 7 == 0) ot_pool_drain();
        ot_release(keep);
    }
    ot_pool_drain();
    long long h1 = live_bytes(), r1 = rss_bytes();
    CHECK_INT(fails, 0);
    report_growth("default pool/drain/errors/retain", h0, h1, r0, r1);
    check_vals(out, (double[]){1.5, 1.5, 1.5}, 3);
    CHECK_INT(refs(a), 1);
    ot_tensor_free(a); ot_tensor_free(bad); ot_tensor_free(out);
    ot_backend_free(be);
}

/*
 * test_digest.c - the plan cache's digest table (plan_key.c): a tree
 * rebuilt per call reuses the plan and bindings of its last assignment into
 * the same output without a walk. Each case changes one thing a rebuilt tree
 * could differ in (a constant, a leaf, a view of the same memory, a leaf
 * freed and another made in its place, the output, sharing, a composite's
 * annotation, an op's attributes) and checks the values against the ref backend, and that the
 * unchanged rebuild is a hit that compiles nothing.
 */
#include "test.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>

enum { N = 77 };

static ot_tensor *filled(ot_backend *be, ot_shape shape, double scale)
{
    int64_t n = 1;
    for (int d = 0; d < shape.ndim; d++) n *= shape.dims[d];
    float *v = malloc(sizeof *v * (size_t)n);
    for (int64_t i = 0; i < n; i++) v[i] = (float)(scale * (double)((i * 37 % 101) - 50) / 23.0);
    ot_tensor *t = ot_array(be, shape, OT_F32, v);
    free(v);
    return t;
}

/* out := tree(a, b, k) rebuilt in a pool, compared with ref's value. */
typedef ot_node *tree_fn(ot_tensor *a, ot_tensor *b, float k);

static ot_node *w3k(ot_tensor *a, ot_tensor *b, float k)
{
    return ot_tanh(ot_add(ot_mul(a, b), ot_mul(ot_div(a, b), k)));
}

static void check_against_ref(ot_tensor *out, tree_fn *f, ot_tensor *a, ot_tensor *b, float k)
{
    ot_backend *ref = ot_backend_new("ref", NULL);
    int64_t n = ot_tensor_numel(out);
    float *ha = malloc(sizeof *ha * (size_t)ot_tensor_numel(a)),
          *hb = malloc(sizeof *hb * (size_t)ot_tensor_numel(b)), *got = malloc(sizeof *got * (size_t)n),
          *want = malloc(sizeof *want * (size_t)n);
    ot_get(a, ha);
    ot_get(b, hb);
    ot_tensor *ra = ot_array(ref, ot_tensor_shape(a), OT_F32, ha);
    ot_tensor *rb = ot_array(ref, ot_tensor_shape(b), OT_F32, hb);
    ot_tensor *ro = ot_empty(ref, ot_tensor_shape(out), OT_F32);
    ot_pool *p = ot_pool_push();
    CHECK_INT(ot_assign(ro, f(ra, rb, k)), 0);
    ot_pool_pop(p);
    ot_get(ro, want);
    ot_get(out, got);
    for (int64_t i = 0; i < n; i++) CHECK_NEAR(got[i], want[i], 1e-6);
    ot_tensor_free(ra);
    ot_tensor_free(rb);
    ot_tensor_free(ro);
    ot_backend_free(ref);
    free(ha), free(hb), free(got), free(want);
}

static int assign_rebuilt(ot_tensor *out, tree_fn *f, ot_tensor *a, ot_tensor *b, float k)
{
    ot_pool *p = ot_pool_push();
    int rc = ot_assign(out, f(a, b, k));
    ot_pool_pop(p);
    return rc;
}

/* assign_rebuilt, then its values against ref's. */
static void rebuild_and_check(ot_tensor *out, tree_fn *f, ot_tensor *a, ot_tensor *b, float k)
{
    CHECK_INT(assign_rebuilt(out, f, a, b, k), 0);
    check_against_ref(out, f, a, b, k);
}

static uint64_t compiles(ot_backend *be)
{
    ot_stats s;
    ot_stats(be, &s);
    return s.compiles;
}

static ot_backend *cpu(void) { return ot_backend_new("cpu", &(ot_backend_opts){.threads = 1}); }

/* The unchanged rebuild compiles nothing and reads no stale constant: the
 * constant is part of the digest, so k = 3 after k = 2 is a new entry. */
TEST(digest_rebuilt_tree_hits_and_constants_differ)
{
    ot_backend *be = cpu();
    ot_tensor *a = filled(be, OT_SHAPE(N), 1.0), *b = filled(be, OT_SHAPE(N), -0.5);
    ot_tensor *out = ot_empty(be, OT_SHAPE(N), OT_F32);
    CHECK_INT(assign_rebuilt(out, w3k, a, b, 2.0f), 0);
    uint64_t c0 = compiles(be);
    for (int i = 0; i < 5; i++) CHECK_INT(assign_rebuilt(out, w3k, a, b, 2.0f), 0);
    CHECK(compiles(be) == c0);
    check_against_ref(out, w3k, a, b, 2.0f);
    rebuild_and_check(out, w3k, a, b, 3.0f);
    rebuild_and_check(out, w3k, a, b, 2.0f);
    CHECK(compiles(be) == c0);   /* one plan: constants are data */
    ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(out);
    ot_backend_free(be);
}

/* Other leaves, leaves swapped, and a leaf freed with another made (most
 * likely at the same address, over other values and another layout). */
TEST(digest_leaves_by_tensor_not_by_address)
{
    ot_backend *be = cpu();
    ot_tensor *a = filled(be, OT_SHAPE(N), 1.0), *b = filled(be, OT_SHAPE(N), -0.5);
    ot_tensor *c = filled(be, OT_SHAPE(N), 0.25);
    ot_tensor *out = ot_empty(be, OT_SHAPE(N), OT_F32);
    CHECK_INT(assign_rebuilt(out, w3k, a, b, 2.0f), 0);
    rebuild_and_check(out, w3k, a, c, 2.0f);
    rebuild_and_check(out, w3k, b, a, 2.0f);
    rebuild_and_check(out, w3k, a, a, 2.0f);
    for (int round = 0; round < 4; round++) {
        ot_tensor_free(b);
        b = filled(be, OT_SHAPE(N), 0.1 * (round + 2));
        rebuild_and_check(out, w3k, a, b, 2.0f);
    }
    /* a reversed view of a 2N buffer: the same address range, another
     * layout, made where b was */
    ot_tensor_free(b);
    ot_tensor *big = filled(be, OT_SHAPE(2 * N), 0.3);
    ot_tensor *rev = ot_slice(big, OT_RANGE(N - 1, -(int64_t)2 * N - 1, -1));
    ot_tensor *evens = ot_slice(big, OT_RANGE(0, 2 * N, 2));
    CHECK(rev && evens);
    rebuild_and_check(out, w3k, a, rev, 2.0f);
    rebuild_and_check(out, w3k, a, evens, 2.0f);
    ot_tensor_free(rev), ot_tensor_free(evens), ot_tensor_free(big);
    ot_tensor_free(a), ot_tensor_free(c), ot_tensor_free(out);
    ot_backend_free(be);
}

/* The same tree into two outputs in turn, into a view of a leaf (the
 * overlap is part of the plan), and into an output freed and made again. */
TEST(digest_outputs)
{
    ot_backend *be = cpu();
    ot_tensor *a = filled(be, OT_SHAPE(N), 1.0), *b = filled(be, OT_SHAPE(N), -0.5);
    ot_tensor *o1 = ot_empty(be, OT_SHAPE(N), OT_F32), *o2 = ot_empty(be, OT_SHAPE(N), OT_F32);
    for (int i = 0; i < 3; i++) {
        CHECK_INT(assign_rebuilt(o1, w3k, a, b, 2.0f), 0);
        CHECK_INT(assign_rebuilt(o2, w3k, b, a, 2.0f), 0);
    }
    check_against_ref(o1, w3k, a, b, 2.0f);
    check_against_ref(o2, w3k, b, a, 2.0f);
    ot_tensor_free(o2);
    o2 = ot_empty(be, OT_SHAPE(2, N), OT_F32);
    ot_tensor *row = ot_slice(o2, OT_IDX(1));
    rebuild_and_check(row, w3k, a, b, 2.0f);
    /* in place: out is a; ref gets the values a had */
    ot_tensor *a0 = ot_copy(a);
    CHECK_INT(assign_rebuilt(a, w3k, a, b, 2.0f), 0);
    check_against_ref(a, w3k, a0, b, 2.0f);
    ot_tensor_free(a0), ot_tensor_free(row), ot_tensor_free(o2);
    ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(o1);
    ot_backend_free(be);
}

static ot_node *shared(ot_tensor *a, ot_tensor *b, float k)
{
    ot_node *s = ot_add(ot_mul(a, b), k);
    return ot_mul(s, ot_exp(s));
}

static ot_node *unshared(ot_tensor *a, ot_tensor *b, float k)
{
    return ot_mul(ot_add(ot_mul(a, b), k), ot_exp(ot_add(ot_mul(a, b), k)));
}

static ot_node *var1(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_var(ot_mul(a, b), .axis = 1, .ddof = 1);
}

static ot_node *var0(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_var(ot_mul(a, b), .axis = 1, .ddof = 0);
}

/* A shared subtree and its copy digest alike and compute alike; var's ddof,
 * an annotation of its composite root, is part of the digest. */
TEST(digest_sharing_and_composites)
{
    ot_backend *be = cpu();
    ot_tensor *a = filled(be, OT_SHAPE(N), 0.2), *b = filled(be, OT_SHAPE(N), 0.3);
    ot_tensor *out = ot_empty(be, OT_SHAPE(N), OT_F32);
    for (int i = 0; i < 2; i++) {
        rebuild_and_check(out, shared, a, b, 0.5f);
        rebuild_and_check(out, unshared, a, b, 0.5f);
    }
    ot_tensor *m = filled(be, OT_SHAPE(7, 11), 1.0), *n = filled(be, OT_SHAPE(7, 11), -2.0);
    ot_tensor *v = ot_empty(be, OT_SHAPE(7), OT_F32);
    for (int i = 0; i < 2; i++) {
        rebuild_and_check(v, var1, m, n, 0);
        rebuild_and_check(v, var0, m, n, 0);
    }
    ot_tensor_free(m), ot_tensor_free(n), ot_tensor_free(v);
    ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(out);
    ot_backend_free(be);
}

/* Two backends with other options never share an entry (each has its own
 * table), and a backend freed and made again at the same address starts
 * empty: its tensors' serials start again, but so does its table. */
TEST(digest_backends)
{
    for (int round = 0; round < 3; round++) {
        ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){
                                                   .threads = 1,
                                                   .accuracy = round == 1 ? OT_ULP35 : OT_ULP10,
                                                   .fusion = round == 2 ? OT_FUSION_OFF
                                                                        : OT_FUSION_DEFAULT});
        ot_tensor *a = filled(be, OT_SHAPE(N), 1.0 + round), *b = filled(be, OT_SHAPE(N), -0.5);
        ot_tensor *out = ot_empty(be, OT_SHAPE(N), OT_F32);
        for (int i = 0; i < 2; i++) CHECK_INT(assign_rebuilt(out, w3k, a, b, 2.0f), 0);
        check_against_ref(out, w3k, a, b, 2.0f);
        ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(out);
        ot_backend_free(be);
    }
}

static ot_node *plain_sum(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_add(ot_tensor_node(a), ot_tensor_node(b));
}

static ot_node *transposed_sum(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_add(ot_T(a), ot_tensor_node(b));
}

static ot_node *rows_sum(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_mul(ot_sum(a, .axis = 0), ot_sum(b, .axis = 0));
}

static ot_node *cols_sum(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_mul(ot_sum(a, .axis = 1), ot_sum(b, .axis = 0));
}

static ot_node *slice_lo(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_add(ot_slice_node(ot_tensor_node(a), OT_RANGE(0, 9)),
                  ot_slice_node(ot_tensor_node(b), OT_RANGE(0, 9)));
}

static ot_node *slice_hi(ot_tensor *a, ot_tensor *b, float k)
{
    (void)k;
    return ot_add(ot_slice_node(ot_tensor_node(a), OT_RANGE(2, 11)),
                  ot_slice_node(ot_tensor_node(b), OT_RANGE(0, 9)));
}

/* Trees alike but for an op's attributes (a transpose's perm, a sum's axis,
 * a slice's start), over the same leaves into the same output, in turn. */
TEST(digest_attributes)
{
    ot_backend *be = cpu();
    ot_tensor *a = filled(be, OT_SHAPE(9, 9), 1.0), *b = filled(be, OT_SHAPE(9, 9), -0.7);
    ot_tensor *sq = ot_empty(be, OT_SHAPE(9, 9), OT_F32), *v = ot_empty(be, OT_SHAPE(9), OT_F32);
    ot_tensor *c = filled(be, OT_SHAPE(11), 0.4), *d = filled(be, OT_SHAPE(11), 0.9);
    for (int i = 0; i < 2; i++) {
        rebuild_and_check(sq, plain_sum, a, b, 0);
        rebuild_and_check(sq, transposed_sum, a, b, 0);
        rebuild_and_check(v, rows_sum, a, b, 0);
        rebuild_and_check(v, cols_sum, a, b, 0);
        rebuild_and_check(v, slice_lo, c, d, 0);
        rebuild_and_check(v, slice_hi, c, d, 0);
    }
    ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(c), ot_tensor_free(d);
    ot_tensor_free(sq), ot_tensor_free(v);
    ot_backend_free(be);
}

/* Threads rebuilding trees on one backend at once, each its own leaves and
 * constants and some sharing one output pattern: the table is read and
 * replaced under the cache's lock, and each thread's values stay its own. */
typedef struct digest_job {
    ot_backend *be;
    int id;
    int bad;
} digest_job;

static void *digest_worker(void *arg)
{
    digest_job *job = arg;
    ot_tensor *a = filled(job->be, OT_SHAPE(N), 1.0 + job->id);
    ot_tensor *b = filled(job->be, OT_SHAPE(N), -0.5);
    ot_tensor *out = ot_empty(job->be, OT_SHAPE(N), OT_F32);
    float ha[N], hb[N], got[N];
    ot_get(a, ha);
    ot_get(b, hb);
    for (int i = 0; i < 200 && !job->bad; i++) {
        float k = (float)(i % 3 + job->id);
        if (assign_rebuilt(out, w3k, a, b, k) != 0) job->bad = 1;
        ot_get(out, got);
        for (int e = 0; e < N; e++) {
            float want = tanhf(ha[e] * hb[e] + ha[e] / hb[e] * k);
            if (fabsf(got[e] - want) > 1e-5f * (1 + fabsf(want))) job->bad = 1;
        }
    }
    ot_tensor_free(a), ot_tensor_free(b), ot_tensor_free(out);
    ot_pool_drain();   /* this thread's spare pool and nodes */
    return NULL;
}

TEST(digest_threads_share_a_backend)
{
    ot_backend *be = cpu();
    pthread_t th[4];
    digest_job jobs[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (digest_job){be, i, 0};
        CHECK_INT(pthread_create(&th[i], NULL, digest_worker, &jobs[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(!jobs[i].bad);
    }
    ot_backend_free(be);
}

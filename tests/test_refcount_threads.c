/*
 * test_refcount_threads.c - node_pool.c's biased refcounts and plan_key.c's
 * per-thread digest tables, white-box through src/core/internal.h.
 *
 * The invariant the counts rest on: a reference counted in a node's owner
 * count (a pool's, or a parent's made on the same thread) is dropped on the
 * owner thread, or moved to the shared count there when the node escapes
 * its owner (no owner reference left but shared ones). These cases take
 * references on one thread and drop them on another, kill a node from
 * either side, and check that each node dies exactly once, when its last
 * reference goes: a tensor's leaf count (creator plus parents) coming back
 * to 1, and OT_NODE_DEAD, show it. The file's name puts its cases in the
 * ThreadSanitizer phase of make test.
 */
#include "test.h"
#include "internal.h"

#include <pthread.h>

/* Both counts of x's leaf: the creator's (shared) and parents' (its
 * owner count, in use while not zero). */
static long leaf_refs(const ot_tensor *t) { return ot__node_refs(&t->leaf); }

/* A cpu backend on one thread: the tables and counts are what is tested. */
static ot_backend *one_thread(void)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    CHECK(be != NULL);
    return be;
}

/* Four ones on a backend of their own; end() frees both. */
static ot_tensor *begin(void) { return ot_ones(one_thread(), OT_SHAPE(4), OT_F32); }

static void end(ot_tensor *x)
{
    ot_backend *be = ot_tensor_backend(x);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* Pops p and checks that r and m died with it, x's leaf back to its
 * creator's reference alone. */
static void pop_kills(ot_pool *p, ot_node *r, ot_node *m, const ot_tensor *x)
{
    CHECK_INT(ot_pool_pop(p), 0);
    CHECK_INT(ot_node_kind(r), OT_NODE_DEAD);
    CHECK_INT(ot_node_kind(m), OT_NODE_DEAD);
    CHECK_INT(leaf_refs(x), 1);
}

/* Built and popped on one thread: operands counted in the owner's count,
 * no shared count touched, every node dead at the pop. */
TEST(refcount_threads_owner_only)
{
    ot_tensor *x = begin();
    ot_pool *p = ot_pool_push();
    ot_node *m = ot_mul(x, x), *s = ot_tanh(ot_add(m, m));
    ot_node *add = ot_node_child(s, 0);
    CHECK(ot__node_fresh(s));
    CHECK_INT(m->local, 3);   /* its pool's and add's two (one per operand slot) */
    CHECK_INT(add->local_ops, OT__OP_A | OT__OP_B);
    CHECK_INT(m->local_ops, OT__OP_A | OT__OP_B);   /* x is this thread's tensor */
    CHECK_INT(atomic_load(&m->refs), OT__NODE_OWNED);
    CHECK_INT(leaf_refs(x), 3);
    CHECK_INT(atomic_load(&x->leaf.refs), OT__NODE_OWNED | 1);   /* the creator's */
    pop_kills(p, s, m, x);
    CHECK(atomic_load(&x->leaf.refs) == 1 && x->leaf.local == 0);   /* the flag is clear */
    end(x);
}

/* A root retained beyond its pool escapes at the pop: its operands'
 * references move to their shared counts, and its release kills the tree. */
TEST(refcount_threads_escape)
{
    ot_tensor *x = begin();
    ot_pool *p = ot_pool_push();
    ot_node *m = ot_mul(x, x), *r = ot_retain(ot_exp(ot_add(m, m)));
    ot_node *add = ot_node_child(r, 0);
    CHECK_INT(ot_pool_pop(p), 0);
    CHECK_INT(atomic_load(&r->refs), 1);
    CHECK_INT(atomic_load(&add->refs), 1);   /* r's, moved */
    CHECK_INT(atomic_load(&m->refs), 2);     /* add's two, moved */
    CHECK(atomic_load(&r->owner) == 0 && r->local == 0 && r->local_ops == 0);
    CHECK(ot_node_kind(m) == OT_NODE_OP);
    ot_release(r);
    CHECK_INT(ot_node_kind(m), OT_NODE_DEAD);
    CHECK_INT(leaf_refs(x), 1);
    end(x);
}

/* ---- across threads ------------------------------------------------------------ */

typedef struct handoff {
    ot_node *node;      /* retained by the owner, handed over */
    ot_tensor *x;
    bool build;         /* build a parent over it before releasing */
    int rc;
} handoff;

/* Another thread: a parent over the node (shared references, as the
 * node is not this thread's), then the owner's retain dropped here. */
static void *other_thread(void *arg)
{
    handoff *h = arg;
    ot_pool *p = ot_pool_push();
    ot_node *parent = h->build ? ot_neg(h->node) : NULL;
    if (h->build && (!parent || parent->local_ops != 0)) h->rc = 1;
    ot_release(h->node);
    if (p) ot_pool_pop(p);
    ot_pool_drain();
    return NULL;
}

static void *free_tensor(void *x)
{
    ot_tensor_free(x);
    return NULL;
}

static void run_other(handoff *h)
{
    pthread_t th;
    CHECK_INT(pthread_create(&th, NULL, other_thread, h), 0);
    pthread_join(th, NULL);
    CHECK_INT(h->rc, 0);
}

/* The owner's ot_retain released on another thread while the node is
 * still in the owner's pool: the shared count falls to zero with the owner
 * flag set, so the node lives on, and dies at the owner's pop. */
TEST(refcount_threads_release_elsewhere_before_pop)
{
    ot_tensor *x = begin();
    for (int build = 0; build < 2; build++) {
        ot_pool *p = ot_pool_push();
        ot_node *m = ot_mul(x, x), *r = ot_retain(ot_add(m, m));
        handoff h = {r, x, build, 0};
        run_other(&h);
        CHECK_INT(atomic_load(&r->refs), OT__NODE_OWNED);
        CHECK(ot_node_kind(r) == OT_NODE_OP && ot_node_kind(m) == OT_NODE_OP);
        pop_kills(p, r, m, x);
    }
    end(x);
}

/* The same after the pop: the tree escaped, and the other thread's
 * release kills it there, operands included. */
TEST(refcount_threads_release_elsewhere_after_pop)
{
    ot_tensor *x = begin();
    for (int build = 0; build < 2; build++) {
        ot_pool *p = ot_pool_push();
        ot_node *m = ot_mul(x, x), *r = ot_retain(ot_add(m, m));
        CHECK_INT(ot_pool_pop(p), 0);
        handoff h = {r, x, build, 0};
        run_other(&h);
        CHECK_INT(leaf_refs(x), 1);   /* r and m died on the other thread */
    }
    end(x);
}

/* A tensor freed on another thread while a tree over it is in its owner's
 * pool: its leaf lives on in its owner count, the tree still reads it,
 * and it dies at the pop (ASan sees a use after free or a leak). */
TEST(refcount_threads_leaf_freed_elsewhere)
{
    ot_backend *be = one_thread();
    ot_tensor *x = ot_full(be, OT_SHAPE(4), OT_F32, 3.0), *out = ot_zeros(be, OT_SHAPE(4), OT_F32);
    ot_pool *p = ot_pool_push();
    ot_node *m = ot_mul(x, x);
    pthread_t th;
    CHECK_INT(pthread_create(&th, NULL, free_tensor, x), 0);
    pthread_join(th, NULL);
    CHECK_INT(atomic_load(&x->leaf.refs), OT__NODE_OWNED);   /* no shared reference left */
    CHECK_INT(ot_assign(out, m), 0);
    CHECK_INT(ot_pool_pop(p), 0);
    float v[4];
    CHECK_INT(ot_get(out, v), 0);
    CHECK_NEAR(v[3], 9.0, 0);
    ot_tensor_free(out);
    ot_backend_free(be);
}

/* ---- many threads at once --------------------------------------------------- */

#define RACE_THREADS 4
#define RACE_ROUNDS 200

typedef struct race {
    ot_node *shared;    /* retained by the main thread, its owner */
    ot_tensor *out;     /* this thread's */
    pthread_barrier_t *start;
    int bad;
} race;

/* Parents over the owner's node built, assigned and popped on every
 * thread while the owner drops its own references. */
static void *race_main(void *arg)
{
    race *r = arg;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < RACE_ROUNDS; i++) {
        ot_pool *p = ot_pool_push();
        ot_node *t = ot_retain(ot_add(r->shared, 1.0));
        ot_pool_pop(p);
        if (ot_assign(r->out, t) != 0) r->bad++;
        ot_release(t);
    }
    ot_release(r->shared);   /* this thread's retain, taken by the owner */
    ot_pool_drain();
    return NULL;
}

/* Joins the threads, each of which wrote want into its out, and frees
 * their outputs. */
static void race_join(race r[], pthread_t th[], pthread_barrier_t *start, double want)
{
    for (int i = 0; i < RACE_THREADS; i++) {
        pthread_join(th[i], NULL);
        CHECK_INT(r[i].bad, 0);
        float v[8];
        CHECK_INT(ot_get(r[i].out, v), 0);
        CHECK_NEAR(v[7], want, 0);
        ot_tensor_free(r[i].out);
    }
    pthread_barrier_destroy(start);
}

TEST(refcount_threads_race)
{
    ot_backend *be = one_thread();
    ot_tensor *x = ot_full(be, OT_SHAPE(8), OT_F32, 2.0);
    ot_pool *p = ot_pool_push();
    ot_node *m = ot_mul(x, x);
    race r[RACE_THREADS];
    pthread_t th[RACE_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, RACE_THREADS + 1);
    for (int i = 0; i < RACE_THREADS; i++) {
        r[i] = (race){ot_retain(m), ot_zeros(be, OT_SHAPE(8), OT_F32), &start, 0};
        CHECK_INT(pthread_create(&th[i], NULL, race_main, &r[i]), 0);
    }
    pthread_barrier_wait(&start);
    CHECK_INT(ot_pool_pop(p), 0);   /* the owner's reference goes while they run */
    race_join(r, th, &start, 5.0);
    CHECK_INT(leaf_refs(x), 1);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* Trees over one tensor built on every thread at once: on its owner
 * thread in the leaf's owner count (its flag set and cleared each round),
 * on the others in its shared count. */
static void *leaf_race_main(void *arg)
{
    race *r = arg;
    pthread_barrier_wait(r->start);
    for (int i = 0; i < RACE_ROUNDS; i++) {
        ot_pool *p = ot_pool_push();
        if (ot_assign(r->out, ot_add(r->shared, ot_mul(r->shared, 2.0))) != 0) r->bad++;
        ot_pool_pop(p);
    }
    ot_pool_drain();
    return NULL;
}

TEST(refcount_threads_leaf_race)
{
    ot_backend *be = one_thread();
    ot_tensor *x = ot_full(be, OT_SHAPE(8), OT_F32, 2.0), *mine = ot_zeros(be, OT_SHAPE(8), OT_F32);
    race r[RACE_THREADS];
    pthread_t th[RACE_THREADS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, RACE_THREADS + 1);
    for (int i = 0; i < RACE_THREADS; i++) {
        r[i] = (race){ot_tensor_node(x), ot_zeros(be, OT_SHAPE(8), OT_F32), &start, 0};
        CHECK_INT(pthread_create(&th[i], NULL, leaf_race_main, &r[i]), 0);
    }
    pthread_barrier_wait(&start);
    for (int i = 0; i < RACE_ROUNDS; i++) {
        ot_pool *p = ot_pool_push();
        CHECK_INT(ot_assign(mine, ot_sub(ot_mul(x, x), x)), 0);
        ot_pool_pop(p);
    }
    race_join(r, th, &start, 6.0);
    CHECK_INT(leaf_refs(x), 1);
    CHECK(x->leaf.local == 0);
    ot_tensor_free(mine);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- the per-thread digest tables ------------------------------------------------ */

/* A tree rebuilt per call on two backends in turn, then on a new backend
 * made where a freed one was: each call gets its own backend's plan and
 * bindings (the tables name backends by a process-unique id). */
TEST(refcount_threads_digest_tables_per_backend)
{
    for (int round = 0; round < 3; round++) {
        ot_backend *be[2];
        ot_tensor *x[2], *out[2];
        for (int k = 0; k < 2; k++) {
            be[k] = one_thread();
            x[k] = ot_full(be[k], OT_SHAPE(64), OT_F32, 1.0 + k + round);
            out[k] = ot_zeros(be[k], OT_SHAPE(64), OT_F32);
        }
        for (int call = 0; call < 6; call++) {
            int k = call % 2;
            ot_pool *p = ot_pool_push();
            CHECK_INT(ot_assign(out[k], ot_mul(x[k], x[k])), 0);
            ot_pool_pop(p);
            float v[64];
            CHECK_INT(ot_get(out[k], v), 0);
            double want = (1.0 + k + round) * (1.0 + k + round);
            CHECK_NEAR(v[63], want, 0);
        }
        for (int k = 0; k < 2; k++) {
            ot_tensor_free(x[k]);
            ot_tensor_free(out[k]);
            ot_backend_free(be[k]);
        }
    }
}

/*
 * test_dead.c - dead nodes (issue 31 point 1): a node used after its pool
 * was popped, or after its last ot_release, is an OT_ESTATE error at every
 * entry point (builders, ot_assign*, ot_eval, ot_explain, autodiff,
 * programs, the printers, stacks, ot_rewrite, ot_retain and ot_release),
 * naming where the node was built and where it died; a release no retain
 * balances is refused too; it stays detected
 * while OT_DEAD_NODES_KEPT more nodes die on the thread, and live nodes
 * keep working around it.
 */
#include "test.h"
#include "internal.h"

#include <pthread.h>
#include <stdlib.h>

/* Operands x = 1 and y = 2 and an output, all (4,) float32, on ref. */
typedef struct fixture {
    ot_backend *be;
    ot_tensor *x, *y, *out;
} fixture;

static fixture setup(void)
{
    unsetenv("OT_BACKEND");
    fixture t = {.be = ot_backend_new("ref", NULL)};
    CHECK(t.be != NULL);
    t.x = ot_full(t.be, OT_SHAPE(4), OT_F32, 1);
    t.y = ot_full(t.be, OT_SHAPE(4), OT_F32, 2);
    t.out = ot_full(t.be, OT_SHAPE(4), OT_F32, 7);
    return t;
}

static void teardown(fixture *t)
{
    ot_tensor_free(t->x);
    ot_tensor_free(t->y);
    ot_tensor_free(t->out);
    ot_backend_free(t->be);
    ot_pool_drain();
}

/* A dead node: x + y built on line *built in a pool popped on line *died. */
typedef struct corpse {
    ot_node *node;
    char built[64], died[64];
} corpse;

static corpse kill_sum(ot_tensor *x, ot_tensor *y)
{
    corpse c;
    ot_pool *pool = ot_pool_push();
    c.node = ot_add(x, y); snprintf(c.built, sizeof c.built, "built at %s:%d", __FILE__, __LINE__);
    ot_pool_pop(pool); snprintf(c.died, sizeof c.died, "ot_pool_pop at %s:%d", __FILE__, __LINE__);
    return c;
}

#define CHECK_DEAD(c, fn, what) CHECK_ERR(OT_ESTATE, fn, what " is a dead node", "add (4,) float32", \
                                          (c).built, (c).died)

/* The case: this returned 0 and wrote zeros (or whatever the node's
 * memory held next). */
TEST(dead_assign_after_pop)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c = kill_sum(x, y);
    CHECK_INT(ot_node_kind(c.node), OT_NODE_DEAD);
    CHECK_INT(ot_assign(t.out, c.node), OT_ESTATE);
    char at[64];   /* the call's own site first */
    snprintf(at, sizeof at, "%s:%d: assign: the tree is a dead node", __FILE__, __LINE__ - 2);
    CHECK_ERR(OT_ESTATE, at, "add (4,) float32", c.built, c.died);
    float v[4];
    CHECK_INT(ot_get(t.out, v), 0);
    for (int i = 0; i < 4; i++) CHECK_NEAR(v[i], 7, 0);   /* untouched */
    CHECK_INT(ot_assign_many(2, (ot_tensor *[]){t.out, x}, (ot_node *[]){ot_tensor_node(y), c.node}),
              OT_ESTATE);
    CHECK_DEAD(c, "assign_many", "trees[1]");
    teardown(&t);
}

TEST(dead_eval_explain)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c = kill_sum(x, y);
    CHECK(ot_eval(c.node) == NULL);
    CHECK_DEAD(c, "eval", "the tree");
    CHECK_INT(ot_explain(c.node, stderr), OT_ESTATE);
    CHECK_DEAD(c, "explain", "the tree");
    CHECK_INT(ot_explain_many(1, &t.out, &c.node, stderr), OT_ESTATE);
    CHECK_DEAD(c, "explain_many", "the tree");
    teardown(&t);
}

/* As either operand of any builder, including the layout builders and the
 * composites, which reach the node through ot_build_at. */
TEST(dead_builder_operand)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c = kill_sum(x, y);
    ot_pool *pool = ot_pool_push();
    CHECK(ot_neg(c.node) == NULL);
    CHECK_DEAD(c, "neg", "operand 1");
    ot_clear_error();
    CHECK(ot_mul(x, c.node) == NULL);
    CHECK_DEAD(c, "mul", "operand 2");
    ot_clear_error();
    CHECK(ot_mul(c.node, 2.0) == NULL);
    CHECK_DEAD(c, "mul", "operand 1");
    ot_clear_error();
    CHECK(ot_sum(c.node) == NULL);
    CHECK_DEAD(c, "sum", "operand 1");
    ot_clear_error();
    CHECK(ot_softmax(c.node) == NULL);
    CHECK_DEAD(c, "softmax", "operand 1");
    ot_clear_error();
    CHECK(ot_slice_node(c.node, OT_RANGE(1, 3)) == NULL);
    CHECK_DEAD(c, "slice", "operand 1");
    ot_clear_error();
    CHECK(ot_concat(2, ((ot_node *[]){ot_tensor_node(x), c.node}), 0) == NULL);
    CHECK_DEAD(c, "concat", "operand 2");
    /* an expression over it is NULL, and its first error is the dead node's */
    ot_clear_error();
    CHECK(ot_assign(t.out, ot_exp(ot_add(x, ot_neg(c.node)))) == OT_ESTATE);
    CHECK_DEAD(c, "neg", "operand 1");
    ot_pool_pop(pool);
    teardown(&t);
}

TEST(dead_autodiff)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c = kill_sum(x, y);
    CHECK(ot_autodiff_new(c.node, NULL) == NULL);
    CHECK_DEAD(c, "autodiff_new", "the tree");
    ot_pool *pool = ot_pool_push();
    CHECK(ot_autodiff_new(ot_mul(x, y), c.node) == NULL);
    CHECK_DEAD(c, "autodiff_new", "next_error");
    ot_pool_pop(pool);
    teardown(&t);
}

TEST(dead_program_steps)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    ot_tensor *w = ot_full(t.be, OT_SHAPE(4), OT_F32, 3);
    ot_tensor *m = ot_zeros(t.be, OT_SHAPE(4), OT_F32), *v = ot_zeros(t.be, OT_SHAPE(4), OT_F32);
    CHECK_INT(ot_tensor_set_trainable(x, true), 0);
    corpse c = kill_sum(x, y);
    ot_program *p = ot_program_new(t.be);
    CHECK_INT(ot_program_assign_node(p, t.out, c.node), OT_ESTATE);
    CHECK_DEAD(c, "program_assign", "trees[0]");
    CHECK_INT(ot_program_assign_many(p, 1, &t.out, &c.node), OT_ESTATE);
    CHECK_DEAD(c, "program_assign_many", "trees[0]");
    CHECK_INT(ot_program_backprop(p, c.node, 1, &x, &t.out), OT_ESTATE);
    CHECK_DEAD(c, "program_backprop", "loss");
    CHECK_INT(ot_program_sgd(p, &(ot_sgd){.lr = 0.1}, 1, &w, &c.node, NULL), OT_ESTATE);
    CHECK_DEAD(c, "program_sgd", "g[0]");
    CHECK_INT(ot_program_adam(p, &(ot_adam){.lr = 0.1, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                            .t = 1},
                              1, &w, &c.node, &m, &v),
              OT_ESTATE);
    CHECK_DEAD(c, "program_adam", "g[0]");
    /* the program still works */
    ot_pool *pool = ot_pool_push();
    CHECK_INT(ot_program_assign_node(p, t.out, ot_mul(x, y)), 0);
    ot_pool_pop(pool);
    CHECK_INT(ot_program_compile(p), 0);
    CHECK_INT(ot_program_run(p, 0, NULL), 0);
    float r[4];
    CHECK_INT(ot_get(t.out, r), 0);
    CHECK_NEAR(r[3], 2, 0);
    ot_program_free(p);
    ot_tensor_free(w);
    ot_tensor_free(m);
    ot_tensor_free(v);
    teardown(&t);
}

TEST(dead_print_stack_rewrite)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c = kill_sum(x, y);
    CHECK_INT(ot_print(c.node, stderr), OT_ESTATE);
    CHECK_DEAD(c, "print", "the tree");
    CHECK_INT(ot_pp(c.node, stderr), OT_ESTATE);
    CHECK_DEAD(c, "pp", "the tree");
    CHECK_INT(ot_graphviz(c.node, stderr), OT_ESTATE);
    CHECK_DEAD(c, "ot_graphviz", "the tree");
    CHECK(ot_stack_new(c.node) == NULL);
    CHECK_DEAD(c, "ot_stack_new", "the tree");
    CHECK(ot_substitute(c.node, x, y) == NULL);
    CHECK_DEAD(c, "substitute", "the tree");
    CHECK(ot_rewrite(c.node, "fuse") == NULL);
    CHECK_DEAD(c, "rewrite", "the tree");
    teardown(&t);
}

/* A retained node outlives its pool, and dies at its last ot_release, which
 * the error names; a second release or a retain of it is refused (a count
 * of zero taken to one would bury it twice). */
TEST(dead_after_release)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c;
    ot_pool *pool = ot_pool_push();
    c.node = ot_retain(ot_sqr(ot_add(x, y))); snprintf(c.built, sizeof c.built, "built at %s:%d", __FILE__, __LINE__);
    ot_pool_pop(pool);
    CHECK_INT(ot_assign(t.out, c.node), 0);
    float r[4];
    CHECK_INT(ot_get(t.out, r), 0);
    CHECK_NEAR(r[0], 9, 0);
    ot_release(c.node); snprintf(c.died, sizeof c.died, "ot_release at %s:%d", __FILE__, __LINE__);
    CHECK_INT(ot_assign(t.out, c.node), OT_ESTATE);
    CHECK_ERR(OT_ESTATE, "assign", "the tree is a dead node (sqr (4,) float32", c.built, c.died);
    ot_clear_error();
    CHECK(ot_retain(c.node) == NULL);
    CHECK_ERR(OT_ESTATE, "retain", "the node is a dead node", c.built, c.died);
    ot_clear_error();
    ot_release(c.node);
    CHECK_ERR(OT_ESTATE, "release", "the node is a dead node", c.built, c.died);
    /* still exactly one burial: the next builds get distinct nodes */
    pool = ot_pool_push();
    ot_node *a = ot_neg(x), *b = ot_neg(y);
    CHECK(a != NULL && b != NULL && a != b);
    ot_pool_pop(pool);
    teardown(&t);
}

/* A release that no retain balances is refused, not counted: a node its
 * pool alone holds, a retained node released twice, a tensor freed twice
 * while a tree reads it. The count wrapped past zero there and the node,
 * its tensors and their buffers never died (found by a misuse probe); the
 * leak check of this case sees that they do. */
TEST(dead_unbalanced_release_is_refused)
{
    fixture t = setup();
    ot_pool *pool = ot_pool_push();
    ot_node *n = ot_add(t.x, t.y);
    ot_clear_error();
    ot_release(n);
    CHECK_ERR(OT_ESTATE, "test_dead.c:", "release: the node (add (4,) float32) has no reference "
                         "of the caller's left");
    ot_node *k = ot_retain(n);
    ot_release(k);
    ot_clear_error();
    ot_release(k);
    CHECK_ERR(OT_ESTATE, "release", "each ot_release balances an ot_retain");
    ot_tensor *z = ot_full(t.be, OT_SHAPE(4), OT_F32, 3);
    ot_node *tree = ot_mul(z, t.x);
    ot_tensor_free(z);   /* the tree keeps z */
    ot_clear_error();
    ot_tensor_free(z);
    CHECK_ERR(OT_ESTATE, "release", "tensor (4,) float32", "each tensor is freed once");
    CHECK_INT(ot_assign(t.out, tree), 0);   /* everything still works */
    float r[4];
    CHECK_INT(ot_get(t.out, r), 0);
    CHECK_NEAR(r[0], 3, 0);
    CHECK_INT(ot_pool_pop(pool), 0);   /* n, the tree and z die here */
    teardown(&t);
}

/* Detection holds while fewer than OT_DEAD_NODES_KEPT nodes die after it:
 * new trees built and popped meanwhile never take its memory, and work. */
TEST(dead_survives_new_trees)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    corpse c = kill_sum(x, y);
    uint64_t died = ot__nodes_released();
    /* three nodes die per tree (constant, add, mul): stop with the corpse
     * still among the last OT_DEAD_NODES_KEPT released */
    for (int i = 0; ot__nodes_released() - died + 3 < OT_DEAD_NODES_KEPT; i++) {
        ot_pool *pool = ot_pool_push();
        ot_node *tree = ot_mul(ot_add(x, (float)i), y);
        CHECK(tree != c.node);
        CHECK_INT(ot_assign(t.out, tree), 0);
        ot_pool_pop(pool);
        float r[4];
        CHECK_INT(ot_get(t.out, r), 0);
        CHECK_NEAR(r[1], (1.0 + i) * 2, 0);
        CHECK_INT(ot_node_kind(c.node), OT_NODE_DEAD);
    }
    CHECK_INT(ot_assign(t.out, c.node), OT_ESTATE);
    CHECK_DEAD(c, "assign", "the tree");
    teardown(&t);
}

/* A pool popped in the middle of the stack kills the nodes of the pools
 * above it too; a node that a live tree or an ot_retain holds lives on. */
TEST(dead_nested_pools)
{
    fixture t = setup();
    ot_tensor *x = t.x, *y = t.y;
    ot_pool *outer = ot_pool_push();
    ot_node *held = ot_add(x, y);
    ot_pool *mid = ot_pool_push();
    ot_node *a = ot_sub(x, y), *kept = ot_retain(ot_exp(held));
    ot_pool_push();
    ot_node *b = ot_exp(a);
    ot_pool_pop(mid);   /* pops the innermost pool too */
    CHECK_INT(ot_node_kind(a), OT_NODE_DEAD);
    CHECK_INT(ot_node_kind(b), OT_NODE_DEAD);
    CHECK(ot_neg(b) == NULL);
    CHECK_ERR(OT_ESTATE, "neg", "operand 1 is a dead node (exp (4,) float32");
    ot_clear_error();
    CHECK_INT(ot_node_kind(kept), OT_NODE_OP);
    CHECK_INT(ot_assign(t.out, kept), 0);
    ot_release(kept);
    CHECK_INT(ot_node_kind(kept), OT_NODE_DEAD);
    CHECK_INT(ot_node_kind(held), OT_NODE_OP);   /* its pool is live */
    CHECK_INT(ot_assign(t.out, held), 0);
    float r[4];
    CHECK_INT(ot_get(t.out, r), 0);
    CHECK_NEAR(r[2], 3, 0);
    ot_pool_pop(outer);
    CHECK_INT(ot_node_kind(held), OT_NODE_DEAD);
    teardown(&t);
}

/* Pools and dead nodes are per thread: a node that died on a worker thread
 * is detected on the main thread while the worker keeps it. */
typedef struct handoff {
    fixture t;
    corpse c;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stage;   /* 1: the node is dead; 2: checked, the worker may drain */
} handoff;

static void *worker(void *arg)
{
    handoff *h = arg;
    h->c = kill_sum(h->t.x, h->t.y);
    pthread_mutex_lock(&h->mu);
    h->stage = 1;
    pthread_cond_broadcast(&h->cv);
    while (h->stage != 2) pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
    ot_pool_drain();
    return NULL;
}

TEST(dead_other_thread)
{
    handoff h = {.t = setup(), .mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    pthread_t t;
    CHECK_INT(pthread_create(&t, NULL, worker, &h), 0);
    pthread_mutex_lock(&h.mu);
    while (h.stage != 1) pthread_cond_wait(&h.cv, &h.mu);
    CHECK_INT(ot_assign(h.t.out, h.c.node), OT_ESTATE);
    CHECK_DEAD(h.c, "assign", "the tree");
    h.stage = 2;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(t, NULL);
    teardown(&h.t);
}

/* Names, metadata and ot_variables of a dead node: a name attached to a
 * dead node would leak when its memory is reused, and ot_variables listed
 * nothing with rc 0. */
TEST(dead_names_and_variables)
{
    fixture t = setup();
    corpse c = kill_sum(t.x, t.y);
    CHECK_INT(ot_node_set_name(c.node, "h"), OT_ESTATE);
    CHECK_DEAD(c, "node_set_name", "the node");
    CHECK_INT(ot_node_set_meta(c.node, "k", "v"), OT_ESTATE);
    CHECK_DEAD(c, "node_set_meta", "the node");
    CHECK(ot_named(c.node, "h") == NULL);
    CHECK_DEAD(c, "named: ", "the node");
    ot_tensor *vars[2];
    CHECK_INT(ot_variables(c.node, 2, vars), OT_ESTATE);
    CHECK_DEAD(c, "variables", "the tree");
    teardown(&t);
}

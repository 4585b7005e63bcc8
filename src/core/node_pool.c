/*
 * node_pool.c - the life of a node after it is built: refcounts (ot_retain,
 * ot_release, released iteratively), the per-thread pools that own new
 * nodes, and the per-thread queue of dead nodes that makes a use of a
 * released node an error naming both sites (optree.h's "Dead nodes") and
 * that the builders take their memory from (ot__node_alloc).
 */
#include "internal.h"
#include "ops.h"

#include <stddef.h>
#include <stdio.h>

/* ---- released nodes ------------------------------------------------------ */

/* A node whose last reference is dropped is not handed out again at once:
 * it joins this thread's queue of dead nodes, oldest first, marked
 * OT_NODE_DEAD with the site that released it, so that a stale pointer to
 * it (a node used after its pool was popped) reads as dead, an error naming
 * both sites, rather than as whatever node took its memory. The newest
 * OT_DEAD_NODES_KEPT stay in the queue; only older ones are reused by the
 * builders (NODE_REUSE of them at most: a tree per assignment is the common
 * pattern, and this keeps it allocation-free) or freed. Under
 * AddressSanitizer none is reused, so that ASan sees every use of a node
 * that has left the queue. */
#if defined(__SANITIZE_ADDRESS__)
#define NODE_REUSE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define NODE_REUSE 0
#endif
#endif
#ifndef NODE_REUSE
#define NODE_REUSE 256
#endif
static _Thread_local ot_node *dead_oldest, *dead_newest;
static _Thread_local size_t dead_count;
static _Thread_local uint64_t released;
/* This thread's id as the owner of the nodes it makes ("refcounts" below):
 * ids are never reused, so a node outliving its owner thread is owned by
 * no live thread. */
static _Atomic uint64_t thread_ids = 1;
static _Thread_local uint64_t self_id;   /* 0 until this thread makes a node */

static inline uint64_t thread_id(void)
{
    if (!self_id) self_id = atomic_fetch_add_explicit(&thread_ids, 1, memory_order_relaxed);
    return self_id;
}

uint64_t ot__thread_id(void) { return thread_id(); }

/* Whether this thread owns n (its owner count is in use, and this thread's). */
static bool mine(const ot_node *n)
{
    uint64_t o = atomic_load_explicit(&n->owner, memory_order_relaxed);
    return o && o == self_id;
}

/* Where a release happens, recorded on the nodes it kills. */
typedef struct release_site {
    const char *fn, *file;
    int line;
} release_site;

uint64_t ot__nodes_released(void) { return released; }

static ot_node *dead_take(void)
{
    ot_node *n = dead_oldest;
    dead_oldest = n->next_dead;
    if (!dead_oldest) dead_newest = NULL;
    dead_count--;
    return n;
}

/* n has no references left: its operands, memo and annotations are gone
 * (ot_release); what a message says of it stays. */
static void node_bury(ot_node *n, const release_site *at)
{
    n->kind = OT_NODE_DEAD;
    n->a = n->b = n->tag_a = n->tag_b = NULL;
    n->annot = NULL;
    atomic_store_explicit(&n->memo, NULL, memory_order_relaxed);
    n->died_fn = at->fn;
    n->died_file = at->file;
    n->died_line = at->line;
    n->next_dead = NULL;
    if (dead_newest) dead_newest->next_dead = n;
    else dead_oldest = n;
    dead_newest = n;
    released++;
    if (++dead_count > OT_DEAD_NODES_KEPT + NODE_REUSE) free(dead_take());
}

/* What a reused node's clearing writes: everything before args, and args'
 * axis. */
#define NODE_HEAD (offsetof(ot_node, args) + offsetof(ot_args, axis) + sizeof(int))

/* A dead node zeroed for reuse. Its args were zeroed when it was last
 * reused (or allocated) and only their axis written since, unless args_set
 * says otherwise: most nodes are elementwise, and args are 312 of a node's
 * 552 bytes (W8: 3,790 instructions a call, 3,5xx clearing only what was
 * written). */
static ot_node *node_reuse(void)
{
    ot_node *n = dead_take();
    bool args_set = n->args_set;
    /* The next one to reuse died OT_DEAD_NODES_KEPT releases ago, and its
     * lines have left L1 (a LIFO cache reused hot nodes): fetch the ones the
     * clearing writes while this build goes on (W8: 581 ns a call, 610
     * without, 588 with the LIFO cache; CPU time, best of 5). */
    if (dead_oldest)
        for (size_t i = 0; i < NODE_HEAD; i += 64)
            __builtin_prefetch((const char *)dead_oldest + i, 1);
    if (args_set) {
        ot__clear(n, sizeof *n);
    } else {
        ot__clear(n, offsetof(ot_node, args));
        n->args.axis = 0;
    }
    return n;
}

ot_node *ot__node_alloc(void)
{
    ot_node *n;
    if (dead_count > OT_DEAD_NODES_KEPT) {   /* never under ASan: see NODE_REUSE */
        n = node_reuse();
    } else {
        n = ot__calloc(1, sizeof *n);
    }
    if (!n) return NULL;
    atomic_init(&n->refs, OT__NODE_OWNED);
    n->local = 1;
    atomic_init(&n->owner, thread_id());
    n->op = OT_OP_NONE;
    n->tag = OT_OP_NONE;
    return n;
}

const char *ot__dead_str(const char *what, const ot_node *n, char *buf)
{
    char sh[OT__SHAPE_STRLEN], built[300] = "", died[300] = "";
    if (n->file) snprintf(built, sizeof built, ", built at %s:%d", n->file, n->line);
    if (n->died_file) snprintf(died, sizeof died, " at %s:%d", n->died_file, n->died_line);
    snprintf(buf, OT__DEAD_STRLEN,
             "%s is a dead node (%s %s %s%s): its last reference was dropped by %s%s; a node "
             "lives while its pool, a parent or an ot_retain holds it",
             what, n->op == OT_OP_NONE ? "constant" : ot_op_name((ot_op)ot__node_op(n)),
             ot__shape_str(&n->shape, sh), ot_dtype_name((ot_dtype)n->dtype), built,
             n->died_fn, died);
    return buf;
}

int ot__dead_err(const char *fn, const char *file, int line, const char *what, const ot_node *n)
{
    char msg[OT__DEAD_STRLEN];
    return ot__err_set(OT_ESTATE, file, line, fn, "%s", ot__dead_str(what, n, msg));
}

int ot__nodes_check(const char *fn, const char *file, int line, const char *array, int n,
                    ot_node *const nodes[])
{
    for (int i = 0; nodes && i < n; i++) {
        if (!ot__node_dead(nodes[i])) continue;
        char what[64];
        snprintf(what, sizeof what, "%s[%d]", array, i);
        return ot__dead_err(fn, file, line, what, nodes[i]);
    }
    return 0;
}

/* ---- refcounts ----------------------------------------------------------- */

/* Biased counts: a node built per call (push, build, assign, pop) took a
 * locked increment or decrement for each of its references, a tenth of a
 * 64-element call. A node's references are therefore counted in two
 * places: 'local', the owner's count, plain, read and written only on the
 * thread that made the node (its owner), and 'refs', the shared count,
 * atomic, for all others.
 *
 * The invariant: a reference is dropped in the count it was taken in, and
 * a reference in an owner's count is dropped on the owner thread (or moved
 * to the shared count there, by escape below). Only two kinds of reference
 * go to an owner's count, and both keep it:
 *   - a pool's, of a node made on its thread (ot__pool_adopt_new): pools
 *     are per thread, so it is dropped there;
 *   - a parent's on its operand, where one thread made both
 *     (ot__node_hold_operand, the parent's local_ops remembering which):
 *     dropped when the parent dies, which is on the owner thread while the
 *     parent's own owner count is in use, and moved to the operand's shared
 *     count when it stops being (escape), before any other thread can kill
 *     the parent.
 * Everything else (ot_retain, ot_release, a parent made on another thread,
 * a tensor's creator's reference to its leaf) is shared.
 *
 * A tensor's leaf is owned by the thread that made the tensor, and its
 * owner count holds only parents' references: it is in use while it is
 * not zero (ot__node_take_local sets the flag when it leaves zero, and
 * drop_local's last drop clears it as escape does, keeping the owner). A
 * tree built and released on the tensor's thread then takes two locked
 * instructions per leaf, not two per parent's reference to it (W8: 4 a
 * call, 8 before).
 *
 * While the owner count is in use, 'refs' carries OT__NODE_OWNED. The node
 * is dead when both counts are zero. When the owner drops the last of its
 * count and the shared count is zero, no reference is left anywhere, so no
 * other thread may touch the node (it would need one): it dies with no
 * locked instruction. When the shared count is not zero the node escapes:
 * its operand references move to their shared counts, the owner flag is
 * cleared with an atomic and (its old value saying whether the sharers
 * left meanwhile), and from then on the node is shared only, its last
 * shared drop (refs 1 -> 0, flag clear) killing it. A tree retained beyond
 * its pool pays those atomics once, at the pop. */
long ot__node_refs(const ot_node *n)
{
    long r = atomic_load_explicit(&n->refs, memory_order_acquire);
    return r & OT__NODE_OWNED ? (r & ~OT__NODE_OWNED) + n->local : r;
}

bool ot__node_fresh(const ot_node *n)
{
    return mine(n) && n->local == 1 &&
           atomic_load_explicit(&n->refs, memory_order_relaxed) == OT__NODE_OWNED;
}

/* The lists a release works through: nodes dead, and nodes whose owner
 * count has run out while others hold them. Linked through next_dead. */
typedef struct release_lists {
    ot_node *dead, *escaped;
} release_lists;

static void push(ot_node **list, ot_node *n)
{
    n->next_dead = *list;
    *list = n;
}

/* Drops a reference counted in n's shared count. */
static inline void drop_shared(ot_node *n, release_lists *l)
{
    if (n && atomic_fetch_sub_explicit(&n->refs, 1, memory_order_acq_rel) == 1) push(&l->dead, n);
}

/* Drops a reference counted in n's owner count: this thread owns n. The
 * acquire load orders the other threads' drops (acq_rel) before a burial. */
static inline void drop_local(ot_node *n, release_lists *l)
{
    if (--n->local > 0) return;
    if (n->kind == OT_NODE_LEAF) {   /* escape's end, a leaf having no operands */
        if (atomic_fetch_and_explicit(&n->refs, ~OT__NODE_OWNED, memory_order_acq_rel) ==
            OT__NODE_OWNED)
            push(&l->dead, n);
        return;
    }
    if (atomic_load_explicit(&n->refs, memory_order_acquire) == OT__NODE_OWNED) push(&l->dead, n);
    else push(&l->escaped, n);
}

/* n's operand reference in slot op of n: in the operand's owner count when
 * local_ops says so. */
static inline void drop_operand(ot_node *n, ot_node *op, int slot, release_lists *l)
{
    if (n->local_ops & slot) drop_local(op, l);
    else drop_shared(op, l);
}

/* n (owned here) has no owner references left but shared ones: its operand
 * references move to the operands' shared counts, and it becomes shared.
 * The release ordering of the flag's clearing publishes local_ops = 0 to
 * the thread whose drop will kill n. */
static void escape(ot_node *n, release_lists *l)
{
    ot_node *op[4] = {n->a, n->b, n->tag_a, n->tag_b};
    for (int i = 0; i < 4; i++) {
        if (!(n->local_ops & (1 << i))) continue;
        atomic_fetch_add_explicit(&op[i]->refs, 1, memory_order_relaxed);
        drop_local(op[i], l);
    }
    n->local_ops = 0;
    atomic_store_explicit(&n->owner, 0, memory_order_relaxed);
    if (atomic_fetch_and_explicit(&n->refs, ~OT__NODE_OWNED, memory_order_acq_rel) ==
        OT__NODE_OWNED)
        push(&l->dead, n);   /* the sharers dropped theirs meanwhile */
}

/* d's last reference is gone: its operands, memo and annotations go. */
static inline void destroy(ot_node *d, release_lists *l, const release_site *at)
{
    if (d->kind == OT_NODE_LEAF) {
        ot__tensor_destroy(ot__leaf_tensor(d));
        return;
    }
    drop_operand(d, d->a, OT__OP_A, l);
    drop_operand(d, d->b, OT__OP_B, l);
    drop_operand(d, d->tag_a, OT__OP_TAG_A, l);
    drop_operand(d, d->tag_b, OT__OP_TAG_B, l);
    ot_memo *m = atomic_load_explicit(&d->memo, memory_order_acquire);
    if (m) m->drop(m);
    if (d->annot) ot__annot_free(d->annot);
    node_bury(d, at);
}

/* Whatever died or escaped into l, and what dies or escapes with it.
 * Iterative: releasing the root of a 100,000-deep tree must not recurse. */
static void release_lists_drain(release_lists *l, const release_site *at)
{
    for (;;) {
        ot_node *d = l->dead;
        if (d) {
            l->dead = d->next_dead;
            destroy(d, l, at);
            continue;
        }
        if (!(d = l->escaped)) return;
        l->escaped = d->next_dead;
        escape(d, l);
    }
}

/* Drops one reference to n, local (in its owner count) or shared, and
 * whatever dies or escapes with it. */
static void release(ot_node *n, bool local, const release_site *at)
{
    release_lists l = {NULL, NULL};
    if (local) drop_local(n, &l);
    else drop_shared(n, &l);
    release_lists_drain(&l, at);
}

/* drop_shared for a caller's ot_release: false, and nothing dropped, when
 * n has no shared reference left (held by its pool or parents alone), where
 * the count would wrap past zero and n, its tensors and their buffers
 * would never die. */
static bool drop_shared_checked(ot_node *n, release_lists *l)
{
    long r = atomic_load_explicit(&n->refs, memory_order_relaxed);
    do {
        if ((r & ~OT__NODE_OWNED) == 0) return false;
    } while (!atomic_compare_exchange_weak_explicit(&n->refs, &r, r - 1, memory_order_acq_rel,
                                                    memory_order_relaxed));
    if (r == 1) push(&l->dead, n);
    return true;
}

ot_node *ot_retain_at(ot_node *n, const char *file, int line)
{
    if (ot__node_check("retain", file, line, "the node", n)) return NULL;
    return ot__node_hold(n);
}

ot_node *(ot_retain)(ot_node *n) { return ot_retain_at(n, NULL, 0); }

/* A dead node is refused rather than released again: its count is already
 * zero, and a second burial would queue it twice. So is a release with no
 * retain of its own to balance (a pool's node released, or a tensor freed
 * twice while a tree reads it): its count would wrap. */
void ot_release_at(ot_node *n, const char *file, int line)
{
    if (!n || ot__node_check("release", file, line, "the node", n)) return;   /* NULL: nothing */
    release_lists l = {NULL, NULL};
    if (!drop_shared_checked(n, &l)) {
        char sh[OT__SHAPE_STRLEN];
        ot__err_set(OT_ESTATE, file, line, "release",
                    "the node (%s %s %s) has no reference of the caller's left: each "
                    "ot_release balances an ot_retain, and each tensor is freed once",
                    n->kind == OT_NODE_LEAF ? "tensor" : ot_op_name((ot_op)ot__node_op(n)),
                    ot__shape_str(&n->shape, sh), ot_dtype_name((ot_dtype)n->dtype));
        return;
    }
    release_lists_drain(&l, &(release_site){"ot_release", file, line});
}

void (ot_release)(ot_node *n) { ot_release_at(n, NULL, 0); }

/* ---- pools --------------------------------------------------------------- */

struct ot_pool {
    ot_pool *parent;
    ot_node **items;
    size_t n, cap;
    uintptr_t handle;   /* what its push returned */
};

/* A pool's handle is not its address but a number no other push returns:
 * the thread's id and its count of pushes. A popped pool's struct is
 * reused by the next push (the spare below) and a freed one's address by
 * malloc, so a handle that was an address (even tagged with a push count
 * in its low bits) could name a newer pool, and popping it again popped
 * that pool. Handles are never dereferenced; pop looks for one on the
 * thread's stack. */
static uintptr_t next_handle(void)
{
    static _Thread_local uint64_t last;   /* the thread's id above 2^40 pushes */
    if (!last) last = thread_id() << 40;
    return (uintptr_t)++last;
}

static _Thread_local ot_pool *pool_top;
static _Thread_local ot_pool default_pool;
/* The last popped pool, kept with its item array for the next push: a pool
 * per assignment is the common pattern, and this makes it allocation-free.
 * ot_pool_drain frees it. */
static _Thread_local ot_pool *spare_pool;

/* Releases every node of p, keeping its item array. */
static void pool_empty(ot_pool *p, const release_site *at)
{
    for (size_t i = p->n; i-- > 0;)
        release(p->items[i], mine(p->items[i]), at);
    p->n = 0;
}

ot_pool *ot_pool_push(void)
{
    ot_pool *p = spare_pool;
    spare_pool = NULL;
    if (!p) p = ot__calloc(1, sizeof *p);
    if (!p) {
        ot__err_set(OT_ENOMEM, NULL, 0, "pool_push", "out of memory");
        return NULL;
    }
    p->handle = next_handle();
    p->parent = pool_top;
    pool_top = p;
    return (ot_pool *)p->handle;
}

int ot_pool_pop_at(ot_pool *h, const char *file, int line)
{
    if (!h)
        return ot_errcode() ? ot_errcode()
                            : ot__err_set(OT_ENULL, file, line, "pool_pop", "pool is NULL");
    ot_pool *p = pool_top;
    while (p && p->handle != (uintptr_t)h) p = p->parent;
    if (!p)
        return ot__err_set(OT_ESTATE, file, line, "pool_pop",
                           "pool handle %p is not on this thread's pool stack (popped already?)",
                           (void *)h);
    const release_site at = {"ot_pool_pop", file, line};
    ot_pool *stop = p->parent;
    while (pool_top != stop) {
        ot_pool *top = pool_top;
        pool_top = top->parent;
        pool_empty(top, &at);
        if (!spare_pool) {
            spare_pool = top;
            continue;
        }
        free(top->items);
        free(top);
    }
    return 0;
}

int (ot_pool_pop)(ot_pool *p) { return ot_pool_pop_at(p, NULL, 0); }

size_t ot_pool_default_nodes(void) { return default_pool.n; }

/* Nodes that die here are freed with the rest of the dead at once: the
 * thread may be about to exit, and a queue left behind would leak. */
void ot_pool_drain(void)
{
    pool_empty(&default_pool, &(release_site){"ot_pool_drain", NULL, 0});
    free(default_pool.items);
    default_pool = (ot_pool){0};
    if (spare_pool) {
        free(spare_pool->items);
        free(spare_pool);
        spare_pool = NULL;
    }
    while (dead_oldest) free(dead_take());
}

/* Appends n to this thread's innermost pool, which takes over a reference
 * in n's owner count (local) or shared count. */
static ot_node *adopt(ot_node *n, bool local)
{
    ot_pool *p = pool_top ? pool_top : &default_pool;
    if (p->n == p->cap) {
        size_t cap = p->cap ? p->cap * 2 : 64, bytes;
        ot_node **items = NULL;
        if (ot__mul_size(&bytes, cap, sizeof *items)) items = ot__realloc(p->items, bytes);
        if (!items) {
            release(n, local, &(release_site){"ot_release", NULL, 0});
            ot__err(OT_ENOMEM, NULL, 0, NULL, "out of memory adding a node to its pool");
            return NULL;
        }
        p->items = items;
        p->cap = cap;
    }
    p->items[p->n++] = n;
    return n;
}

ot_node *ot__pool_adopt_new(ot_node *n) { return adopt(n, true); }

/* A pool drops its reference in n's owner count when this thread owns n
 * (pool_empty asks mine()), so a shared one handed over for a node owned
 * here moves to the owner count: the owner count keeps n owned until the
 * pool drops it, and the shared count cannot reach zero here, its owner
 * flag being set. */
ot_node *ot__pool_adopt(ot_node *n)
{
    bool local = mine(n);
    if (local) {
        ot__node_take_local(n);
        atomic_fetch_sub_explicit(&n->refs, 1, memory_order_relaxed);
    }
    return adopt(n, local);
}

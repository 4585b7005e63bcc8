/*
 * plan_key.c - the compiler's front end: trees -> entries, key; the plan cache.
 *
 * Takes the trees and outputs of one assignment. Every call walks its
 * trees once with walk.c's walker (iterative, memoised by node pointer)
 * into a post-order list of entries, entry i being the node the walker
 * numbered i. That walk yields three things at once: the plan-cache key
 * (structure only: each entry's identity, ot__node_ident, then leaf shapes
 * and strides, output layouts and their overlap with the leaves), the leaf
 * pointers and the constant values to bind. Leaves are numbered by the
 * memory they view and constants by occurrence, so everything the compiler
 * merges (common subexpressions, compared by the same identity) is a
 * function of the key, and a cached plan never merges two operands that
 * happen to be equal in one call but not the next.
 *
 * Guarantees to the passes (struct ot_walk): each distinct node once, in
 * post-order, an op's operand entries before it (a, b < its own index, or
 * -1); leaf slots < nleaf, one per distinct view; param indices < nparam;
 * root[i] the entry of tree i; and nothing the passes read that is not in
 * the key. This file only finds and keeps plans (the backend's bounded LRU
 * cache, a root's memo, the digest table) and frees them with their last
 * reference; on a miss the driver above it (compile.c's ot__plan_get)
 * compiles the walk and hands the plan back to be kept.
 */
#include "plan.h"

#include <pthread.h>

/* ---- the walk ------------------------------------------------------------ */

#define SPARE_KEY_MAX 65536   /* walks bigger than this are not kept */

static bool key_grow(ot_walk *w, size_t len)
{
    size_t cap = w->kcap ? w->kcap : 256;
    while (cap < w->klen + len) cap *= 2;
    uint8_t *k = ot__realloc(w->key, cap);
    if (!k) return false;
    w->key = k;
    w->kcap = cap;
    return true;
}

/* Inlined so that the fixed-size fields of the key become plain moves: this
 * runs for every node of every assignment. */
static inline __attribute__((always_inline)) bool key_put(ot_walk *w, const void *data, size_t len)
{
    if (w->klen + len > w->kcap && !key_grow(w, len)) return false;
    memcpy(w->key + w->klen, data, len);
    w->klen += len;
    return true;
}

#define KEY(w, v) key_put((w), &(v), sizeof(v))

/* An identity's words into the key, a word at a time: room for every word
 * is made first, and each 8-byte copy reads what one 8-byte store of the
 * identity wrote (a 16-byte copy of two words waited for both stores to
 * reach the cache, on every node); memcpy of a length known only at run
 * time would be a call. */
static inline bool key_words(ot_walk *w, const int64_t *v, int n)
{
    size_t room = sizeof *v * OT__IDENT_MAX;
    if (w->klen + room > w->kcap && !key_grow(w, room)) return false;
    for (int i = 0; i < n; i++) memcpy(w->key + w->klen + sizeof *v * (size_t)i, v + i, sizeof *v);
    w->klen += sizeof *v * (size_t)n;
    return true;
}

/* The slot of a leaf: the first leaf seen with the same view. The scan is
 * linear in the distinct leaves, which are few in practice. */
static int leaf_slot(ot_walk *w, const ot_tensor *t)
{
    for (int i = 0; i < w->nleaf; i++)
        if (w->leaf[i] == t || ot__same_view(w->leaf[i], t)) return i;
    if (!grow((void **)&w->leaf, &w->leafcap, w->nleaf + 1, sizeof *w->leaf)) return -1;
    w->leaf[w->nleaf] = t;
    return w->nleaf++;
}

/* A view's layout, in the key after its slot's first use. */
static bool key_layout(ot_walk *w, const ot_tensor *t)
{
    const ot_shape *s = &t->leaf.shape;
    return KEY(w, s->ndim) && key_put(w, s->dims, sizeof(int64_t) * (size_t)s->ndim) &&
           key_put(w, t->strides, sizeof(int64_t) * (size_t)s->ndim);
}

/* Makes node n entry index, its operands being entries operand[0] and [1]:
 * its identity (ot__node_ident) goes into the key, leaves by slot and
 * constants by class, so the key holds the structure and none of the data;
 * a slot's first use adds the view's layout, and a constant's value goes to
 * the params bound per call. Inlined into the walk (ot__walker_run_plain):
 * a call per node was a measurable part of a small ot_assign. */
static inline __attribute__((always_inline)) int add_entry(ot__walker *wk, const ot_node *n,
                                                           int index, const int operand[2])
{
    ot_walk *w = wk->ctx;
    if (!grow((void **)&w->e, &w->cap, index + 1, sizeof *w->e)) return OT_ENOMEM;
    ent *e = &w->e[index];
    *e = (ent){n->kind, n->op, n->dtype, operand[0], operand[1], -1, false, false, n};
    int nleaf = w->nleaf;
    if (n->kind == OT_NODE_LEAF) {
        e->slot = leaf_slot(w, ot__leaf_tensor(n));
        if (e->slot < 0) return OT_ENOMEM;
    } else if (n->kind == OT_NODE_CONST) {
        if (!grow((void **)&w->param, &w->paramcap, w->nparam + 1, sizeof *w->param))
            return OT_ENOMEM;
        e->slot = w->nparam;
        w->param[w->nparam++] = n->value;
        e->one = n->value == 1.0;
        e->zero = n->value == 0.0;
    }
    int64_t id[OT__IDENT_MAX];
    int nid = ot__node_ident(n, OT__LEAF_BY_NUMBER, OT__CONST_BY_CLASS,
                             n->kind == OT_NODE_OP ? operand : (const int[2]){e->slot, -1}, id);
    bool ok = key_words(w, id, nid);
    if (w->nleaf > nleaf) ok = ok && key_layout(w, ot__leaf_tensor(n));
    w->n = index + 1;
    return ok ? 0 : OT_ENOMEM;
}

/* Each output's layout and how it overlaps each leaf: aliasing changes the
 * plan, so it is part of the key. */
static bool key_outputs(ot_walk *w, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    bool ok = KEY(w, n);
    for (int i = 0; i < n && ok; i++) {
        if (!outs) {
            ok = KEY(w, trees[i]->dtype);
            continue;
        }
        const ot_tensor *o = outs[i];
        ok = KEY(w, o->leaf.dtype) && KEY(w, o->leaf.shape.ndim) &&
             key_put(w, o->leaf.shape.dims, sizeof(int64_t) * (size_t)o->leaf.shape.ndim) &&
             key_put(w, o->strides, sizeof(int64_t) * (size_t)o->leaf.shape.ndim);
        for (int j = 0; j < w->nleaf && ok; j++) {
            uint8_t ov = (uint8_t)ot__overlap(o, w->leaf[j]);
            ok = KEY(w, ov);
        }
    }
    return ok;
}

/* Zeros up to a whole word: hash_bytes reads words, and its byte-at-a-time
 * tail cost more than the padding's compare. */
static bool key_pad(ot_walk *w)
{
    uint64_t zero = 0;
    if (w->klen + sizeof zero > w->kcap && !key_grow(w, sizeof zero)) return false;
    memcpy(w->key + w->klen, &zero, sizeof zero);
    w->klen += (sizeof zero - w->klen % sizeof zero) % sizeof zero;
    return true;
}

/* One lane's step: the word into the lane, multiplied and folded. */
static inline uint64_t hash_step(uint64_t h, const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * 0xff51afd7ed558ccdULL;
    return h ^ h >> 32;
}

/* Four independent lanes in scalar registers, each word into the next
 * lane: one lane's chain of multiply, shift and xor per word bounded a
 * small assignment's key walk by its latency (a fifth of W8's walk), and
 * an array of lanes was vectorised into SSE2 with 64-bit multiplies
 * emulated. The padded key is whole words. */
static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h0 = 0x9e3779b97f4a7c15ULL ^ n, h1 = 0xc2b2ae3d27d4eb4fULL,
             h2 = 0x165667b19e3779f9ULL, h3 = 0x27d4eb2f165667c5ULL;
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        h0 = hash_step(h0, p + i);
        h1 = hash_step(h1, p + i + 8);
        h2 = hash_step(h2, p + i + 16);
        h3 = hash_step(h3, p + i + 24);
    }
    if (i + 8 <= n) h0 = hash_step(h0, p + i), i += 8;
    if (i + 8 <= n) h1 = hash_step(h1, p + i), i += 8;
    if (i + 8 <= n) h2 = hash_step(h2, p + i), i += 8;
    for (; i < n; i++) h3 = (h3 ^ p[i]) * 0x100000001b3ULL;
    uint64_t x = h0 ^ h1 * 0x9e3779b97f4a7c15ULL ^ h2 * 0xc2b2ae3d27d4eb4fULL ^
                 h3 * 0x165667b19e3779f9ULL;
    return x ^ x >> 29;
}

void ot__walk_free(ot_walk *w)
{
    if (!w) return;
    free(w->e);
    ot__walker_free(&w->walker);
    free(w->leaf);
    free(w->leafptr);
    free(w->param);
    free(w->key);
    free(w->root);
    free(w);
}

void ot__walk_done(ot_backend *be, ot_walk *w)
{
    ot_cpu *cpu = be->impl;
    ot_walk *none = NULL;
    if (!w) return;
    if (w->kcap > SPARE_KEY_MAX || !atomic_compare_exchange_strong(&cpu->spare, &none, w))
        ot__walk_free(w);
}

/* The backend's spare walk, or a new one, as it was left: a digest-table
 * hit fills only its bindings; walk_trees empties it first. */
static ot_walk *walk_take(ot_cpu *cpu)
{
    ot_walk *w = atomic_exchange(&cpu->spare, NULL);
    return w ? w : ot__calloc(1, sizeof *w);
}

/* Walks the trees into w, emptied first: entries, key, bindings, hash.
 * False when out of memory. */
static bool walk_trees(ot_walk *w, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    ot__walker_reset(&w->walker);
    w->walker.ctx = w;
    w->n = w->nleaf = w->nparam = 0;
    w->klen = 0;
    bool ok = grow((void **)&w->root, &w->rootcap, n, sizeof *w->root);
    for (int i = 0; i < n && ok; i++) {
        w->root[i] = ot__walker_run_plain(&w->walker, trees[i], add_entry);
        ok = w->root[i] >= 0;
    }
    ok = ok && key_put(w, w->root, sizeof(int) * (size_t)n) && key_outputs(w, n, outs, trees) &&
         key_pad(w);
    ok = ok && grow((void **)&w->leafptr, &w->leafptrcap, w->nleaf ? w->nleaf : 1, sizeof(char *));
    if (!ok) return false;
    for (int i = 0; i < w->nleaf; i++) {
        const ot_tensor *t = w->leaf[i];
        w->leafptr[i] = (char *)t->buf->data + t->offset * (int64_t)ot__esize(t->leaf.dtype);
    }
    w->hash = hash_bytes(w->key, w->klen);
    return true;
}

/* ---- the plan's references ---------------------------------------------------- */

/* The cache, the memos and each caller hold a reference; the last one
 * frees the plan with its generated code. */
void ot__plan_release(ot_plan *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
    for (int i = 0; i < p->nkernels; i++) {
        free(p->kernels[i].loads);
        free(p->kernels[i].load_shapes);
        free(p->kernels[i].xstores);
        free(p->kernels[i].insns);
        free(p->kernels[i].desc);
        ot__jit_free(p->kernels[i].jit);
    }
    ot__jit_unmap(&p->jit);
    for (int i = 0; i < OT_HALF_CODES; i++) ot__half_code_free(atomic_load(&p->half[i]));
    free(p->kernels);
    free(p->segs);
    free(p->temp_offset);
    free(p->temp_local);
    free(atomic_load(&p->arena));
    free(p);
}

/* ---- the plan cache: a bounded LRU ---------------------------------------- */

typedef struct cache_entry {
    uint64_t hash;
    uint8_t *key;
    size_t klen;
    ot_plan *plan;
    struct cache_entry *prev, *next;   /* most recent first */
} cache_entry;

#define DIGEST_SLOTS 64   /* recent trees remembered by digest, per backend */

struct digest_entry;

struct ot_plan_cache {
    uint64_t id;              /* unique in the process: names the backend in
                                 the threads' digest tables */
    pthread_mutex_t lock;
    cache_entry *head, *tail;
    int len, cap;
    struct digest_entry *recent[DIGEST_SLOTS];   /* the digest table, below */
};

ot_plan_cache *ot__plan_cache_new(int capacity)
{
    ot_plan_cache *c = ot__calloc(1, sizeof *c);
    if (!c) return NULL;
    static _Atomic uint64_t ids;
    c->id = atomic_fetch_add_explicit(&ids, 1, memory_order_relaxed) + 1;
    pthread_mutex_init(&c->lock, NULL);
    c->cap = capacity;
    return c;
}

static void entry_free(cache_entry *e)
{
    ot__plan_release(e->plan);
    free(e->key);
    free(e);
}

static void digest_entry_free(struct digest_entry *e);
static void thread_digests_forget(uint64_t cache_id);

void ot__plan_cache_free(ot_plan_cache *c)
{
    if (!c) return;
    thread_digests_forget(c->id);
    for (int i = 0; i < DIGEST_SLOTS; i++) digest_entry_free(c->recent[i]);
    for (cache_entry *e = c->head, *nx; e; e = nx) {
        nx = e->next;
        entry_free(e);
    }
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static void unlink_entry(ot_plan_cache *c, cache_entry *e)
{
    if (e->prev) e->prev->next = e->next;
    else c->head = e->next;
    if (e->next) e->next->prev = e->prev;
    else c->tail = e->prev;
    e->prev = e->next = NULL;
}

static void push_front(ot_plan_cache *c, cache_entry *e)
{
    e->next = c->head;
    if (c->head) c->head->prev = e;
    c->head = e;
    if (!c->tail) c->tail = e;
}

/* A found plan gains a reference (under the cache lock) that its run drops,
 * so eviction by another thread never frees a plan in use. */
static ot_plan *cache_find(ot_plan_cache *c, const ot_walk *w)
{
    for (cache_entry *e = c->head; e; e = e->next) {
        if (e->hash == w->hash && e->klen == w->klen && memcmp(e->key, w->key, w->klen) == 0) {
            unlink_entry(c, e);
            push_front(c, e);
            atomic_fetch_add(&e->plan->refs, 1);
            return e->plan;
        }
    }
    return NULL;
}

static bool cache_add(ot_plan_cache *c, ot_walk *w, ot_plan *plan)
{
    cache_entry *e = ot__calloc(1, sizeof *e);
    if (!e) return false;
    e->hash = w->hash;
    e->klen = w->klen;
    e->key = ot__malloc(w->klen ? w->klen : 1);
    if (!e->key) {
        free(e);
        return false;
    }
    memcpy(e->key, w->key, w->klen);
    e->plan = plan;
    push_front(c, e);
    if (++c->len > c->cap) {
        cache_entry *old = c->tail;
        unlink_entry(c, old);
        entry_free(old);
        c->len--;
    }
    return true;
}

/* ---- the root memo ---------------------------------------------------------- */

/* A tree assigned again and again (built once, run per step) need not be
 * walked again: its structure, leaves and constants cannot change, so the
 * plan and bindings found by its first assignment hold for every later one
 * into an output of the same layout, on the same backend with the same
 * options. That assignment is memoised on the root (ot_node.memo, set once,
 * read-only after, dropped with the node). The memo holds a plan reference,
 * so the plan outlives its eviction from the cache, and lends it to each
 * run without touching its count; it compares the backend by pointer and
 * options, so a backend freed and another made at the same address gets a
 * plan only if it would compile the same one. */
typedef struct root_memo {
    ot_memo base;
    const ot_backend *be;
    ot_backend_opts opts;
    const ot_tensor *out;       /* the output, and its layout */
    const void *buf;
    int64_t offset;
    ot_shape shape;
    int64_t strides[OT_MAX_DIMS];
    int dtype;
    ot_plan *plan;
    char **leaf;                /* the bindings, in this allocation */
    double *param;
} root_memo;

/* Whether options a and b compile the same plans. The seed matters only
 * when a plan runs; the thread count shapes plans (a row block's local
 * temporaries, which temporary goes into an output) but is fixed for the
 * backend whose cache this is. */
static bool same_plan_opts(const ot_backend_opts *a, const ot_backend_opts *b)
{
    return a->dtype == b->dtype && a->accuracy == b->accuracy && a->fusion == b->fusion &&
           a->isa == b->isa && a->jit == b->jit && a->stream_bytes == b->stream_bytes;
}

/* Whether t is the memo's output, laid out as it was: the tensor, its
 * buffer and its view (a tensor freed and another made at the same address
 * must match all of them to use the plan). */
static bool same_output(const root_memo *m, const ot_tensor *t)
{
    const ot_shape *s = &t->leaf.shape;
    if (m->out != t || m->buf != t->buf || m->offset != t->offset || m->dtype != t->leaf.dtype ||
        m->shape.ndim != s->ndim)
        return false;
    for (int d = 0; d < s->ndim; d++)
        if (m->shape.dims[d] != s->dims[d] || m->strides[d] != t->strides[d]) return false;
    return true;
}

static void memo_drop(ot_memo *m)
{
    ot__plan_release(((root_memo *)m)->plan);
    free(m);
}

static bool memoisable(int n, ot_tensor *const outs[], ot_node *const trees[])
{
    return n == 1 && outs && trees[0]->kind == OT_NODE_OP;
}

/* What a root's memo slot holds after its first assignment: a tree built
 * per call (the common pattern) is assigned once, and the memo's
 * allocation would be pure cost there, so only a second assignment makes
 * one. Never dropped: node.c drops what drop says, and this drops nothing. */
static void seen_drop(ot_memo *m) { (void)m; }
static ot_memo assigned_once = {seen_drop};

/* The memoised plan of trees[0] into outs[0], NULL when there is none for
 * this output and backend. The plan is borrowed (bind->borrowed): the
 * memo's reference keeps it alive while the caller holds the tree. */
static ot_plan *memo_find(const ot_backend *be, ot_tensor *out, ot_node *root, ot_binding *bind)
{
    ot_memo *slot = atomic_load_explicit(&root->memo, memory_order_acquire);
    root_memo *m = (root_memo *)slot;
    if (!slot || slot == &assigned_once || m->be != be || !same_plan_opts(&m->opts, &be->opts) ||
        !same_output(m, out))
        return NULL;
    *bind = (ot_binding){.leaf = m->leaf, .param = m->param, .borrowed = true};
    return m->plan;
}

/* Memoises plan p and w's bindings on the root at its second assignment,
 * unless a memo is there. A memo is only a shortcut: without memory there
 * is none. */
static void memo_add(const ot_backend *be, ot_tensor *out, ot_node *root, const ot_binding *w,
                     ot_plan *p)
{
    ot_memo *none = NULL;
    if (atomic_compare_exchange_strong(&root->memo, &none, &assigned_once)) return;
    if (none != &assigned_once) return;
    size_t leaves = sizeof(char *) * (size_t)p->nleaves, params = sizeof(double) * (size_t)p->nparams;
    root_memo *m = ot__malloc(sizeof *m + leaves + params);
    if (!m) return;
    ot__clear(m, sizeof *m);
    m->base.drop = memo_drop;
    m->be = be;
    m->opts = be->opts;
    m->out = out;
    m->buf = out->buf;
    m->offset = out->offset;
    m->shape = out->leaf.shape;
    memcpy(m->strides, out->strides, sizeof m->strides);
    m->dtype = out->leaf.dtype;
    m->param = (double *)(m + 1);
    m->leaf = (char **)((char *)m->param + params);
    if (params) memcpy(m->param, w->param, params);   /* a tree without constants has no array */
    if (leaves) memcpy(m->leaf, w->leaf, leaves);
    m->plan = p;
    atomic_fetch_add(&p->refs, 1);
    ot_memo *seen = &assigned_once;
    if (!atomic_compare_exchange_strong(&root->memo, &seen, &m->base)) memo_drop(&m->base);
}

/* ---- the digest table ------------------------------------------------------ */

/* A tree rebuilt per call (push, build, assign, pop: W8) is a new root
 * each time, so the root memo never sees it twice, and its walk, key and
 * lookup were a third of such a call. Every node carries a 128-bit digest
 * of the tree below it, set when it is built (ot__node_digest): identity
 * words, constants' values, operands' digests, and leaves by their tensor's
 * serial, which no other tensor of the backend ever gets (a tensor's view
 * and memory never change). Two trees of equal digests therefore compile to
 * the same plan, with the same leaf pointers and constants bound, so the
 * plan and bindings of a tree's last assignment into an output serve every
 * tree of its digest into that output: one slot per digest and output, the
 * latest assignment replacing what was there. A digest match is trusted,
 * not checked against the tree: checking would be the walk it saves. */
typedef struct digest_entry {
    uint64_t digest[2];
    uint64_t cache_id;          /* the backend's (its plan cache's id) */
    uint64_t out_serial;        /* the output: serials name tensors of the backend */
    ot_backend_opts opts;
    ot_plan *plan;              /* a reference */
    int nleaf, nparam;
    char **leaf;                /* the bindings, in this allocation */
    double *param;
} digest_entry;

static void digest_entry_free(digest_entry *e)
{
    if (!e) return;
    ot__plan_release(e->plan);
    free(e);
}

static digest_entry **digest_slot(ot_plan_cache *c, const ot_tensor *out, const ot_node *root)
{
    return &c->recent[(root->digest[0] ^ out->serial * 0x9e3779b97f4a7c15ULL) % DIGEST_SLOTS];
}

static bool digest_match(const digest_entry *e, const ot_backend *be, const ot_tensor *out,
                         const ot_node *root)
{
    return e && e->digest[0] == root->digest[0] && e->digest[1] == root->digest[1] &&
           e->out_serial == out->serial && same_plan_opts(&e->opts, &be->opts);
}

/* The plan of a tree whose digest was assigned into out before, with its
 * bindings copied into w; NULL when none. The plan gains a reference that
 * the run drops. */
static ot_plan *digest_find(ot_backend *be, ot_tensor *out, const ot_node *root, ot_walk *w)
{
    ot_cpu *cpu = be->impl;
    ot_plan *p = NULL;
    pthread_mutex_lock(&cpu->cache->lock);
    const digest_entry *e = *digest_slot(cpu->cache, out, root);
    if (digest_match(e, be, out, root) &&
        grow((void **)&w->leafptr, &w->leafptrcap, e->nleaf + 1, sizeof(char *)) &&
        grow((void **)&w->param, &w->paramcap, e->nparam + 1, sizeof(double))) {
        memcpy(w->leafptr, e->leaf, sizeof(char *) * (size_t)e->nleaf);
        memcpy(w->param, e->param, sizeof(double) * (size_t)e->nparam);
        w->nleaf = e->nleaf;
        w->nparam = e->nparam;
        p = e->plan;
        atomic_fetch_add(&p->refs, 1);
    }
    pthread_mutex_unlock(&cpu->cache->lock);
    return p;
}

/* An entry for root's digest into out: plan p (gaining a reference) and
 * the bindings given; NULL without memory. */
static digest_entry *digest_entry_new(const ot_backend *be, const ot_tensor *out,
                                      const ot_node *root, int nleaf, char *const leaf[],
                                      int nparam, const double param[], ot_plan *p)
{
    const ot_cpu *cpu = be->impl;
    size_t leaves = sizeof(char *) * (size_t)nleaf, params = sizeof(double) * (size_t)nparam;
    digest_entry *e = ot__malloc(sizeof *e + params + leaves);
    if (!e) return NULL;
    *e = (digest_entry){{root->digest[0], root->digest[1]}, cpu->cache->id, out->serial,
                        be->opts, p, nleaf, nparam, NULL, NULL};
    e->param = (double *)(e + 1);
    e->leaf = (char **)((char *)e->param + params);
    if (params) memcpy(e->param, param, params);
    if (leaves) memcpy(e->leaf, leaf, leaves);
    atomic_fetch_add(&p->refs, 1);
    return e;
}

/* ---- this thread's digest table ---------------------------------------------- */

/* The digest table is the backend's, behind its lock: a W8 call paid a
 * locked instruction for the lock, one for its unlock and two for the
 * plan's reference it gained and dropped. Each thread therefore keeps a
 * small table of its own in front of it, of entries it owns (each holding
 * a plan reference, so the plan it lends a run stays alive however the
 * backend's table and cache change meanwhile; only this thread replaces or
 * frees them). An entry says what the backend's table says, as a digest
 * names its plan and bindings for good (see above); its backend is named
 * by its plan cache's id, which no other cache of the process gets, so an
 * entry of a freed backend matches nothing: it is freed when replaced,
 * when its backend is freed on this thread, or when the thread exits. */
#define THREAD_DIGEST_SLOTS 16

typedef struct thread_digests {
    digest_entry *slot[THREAD_DIGEST_SLOTS];
} thread_digests;

static _Thread_local thread_digests *digests_mine;
static pthread_key_t digests_key;
static pthread_once_t digests_once = PTHREAD_ONCE_INIT;

static void thread_digests_free(void *v)
{
    thread_digests *t = v;
    for (int i = 0; i < THREAD_DIGEST_SLOTS; i++) digest_entry_free(t->slot[i]);
    free(t);
}

/* The key's destructor frees a thread's table when the thread exits. */
static void digests_key_make(void) { (void)pthread_key_create(&digests_key, thread_digests_free); }

static void thread_digests_forget(uint64_t cache_id)
{
    thread_digests *t = digests_mine;
    for (int i = 0; t && i < THREAD_DIGEST_SLOTS; i++) {
        if (!t->slot[i] || t->slot[i]->cache_id != cache_id) continue;
        digest_entry_free(t->slot[i]);
        t->slot[i] = NULL;
    }
}

static digest_entry **thread_slot(thread_digests *t, const ot_tensor *out, const ot_node *root)
{
    return &t->slot[(root->digest[0] ^ out->serial * 0x9e3779b97f4a7c15ULL) %
                    THREAD_DIGEST_SLOTS];
}

/* The plan of root's digest into out from this thread's table, lent with
 * its bindings (bind->borrowed); NULL when none. */
static ot_plan *thread_find(const ot_backend *be, const ot_tensor *out, const ot_node *root,
                            ot_binding *bind)
{
    thread_digests *t = digests_mine;
    const ot_cpu *cpu = be->impl;
    const digest_entry *e = t ? *thread_slot(t, out, root) : NULL;
    if (!e || e->cache_id != cpu->cache->id || !digest_match(e, be, out, root)) return NULL;
    *bind = (ot_binding){.leaf = e->leaf, .param = e->param, .borrowed = true};
    return e->plan;
}

/* Remembers plan p and its bindings for root's digest into out in this
 * thread's table. Without memory nothing is: the table is a shortcut. */
static void thread_add(const ot_backend *be, const ot_tensor *out, const ot_node *root,
                       const ot_walk *w, ot_plan *p)
{
    thread_digests *t = digests_mine;
    if (!t) {
        pthread_once(&digests_once, digests_key_make);
        if (!(t = ot__calloc(1, sizeof *t))) return;
        if (pthread_setspecific(digests_key, t)) {
            free(t);
            return;
        }
        digests_mine = t;
    }
    digest_entry *e = digest_entry_new(be, out, root, w->nleaf, w->leafptr, w->nparam, w->param, p);
    if (!e) return;
    digest_entry **slot = thread_slot(t, out, root);
    digest_entry_free(*slot);
    *slot = e;
}

/* Remembers plan p and w's bindings for root's digest into out, in the
 * backend's table and this thread's. Without memory nothing is remembered:
 * the tables are only shortcuts. */
static void digest_add(ot_backend *be, ot_tensor *out, const ot_node *root, const ot_walk *w,
                       ot_plan *p)
{
    ot_cpu *cpu = be->impl;
    thread_add(be, out, root, w, p);
    digest_entry *e = digest_entry_new(be, out, root, w->nleaf, w->leafptr, w->nparam, w->param, p);
    if (!e) return;
    pthread_mutex_lock(&cpu->cache->lock);
    digest_entry **slot = digest_slot(cpu->cache, out, root), *old = *slot;
    *slot = e;
    pthread_mutex_unlock(&cpu->cache->lock);
    digest_entry_free(old);
}

/* ---- lookup and keeping ------------------------------------------------------ */

/* A plan found in a digest table for trees[0] into outs[0]: counted as a
 * cache hit, and memoised on the root at its second assignment. A root
 * seen for the first time is not marked here (the memo's compare and
 * swap was a locked instruction of every W8 call): one a thread's table
 * serves at once is not worth a memo, that table being nearly as quick. */
static void digest_hit(ot_backend *be, ot_tensor *const outs[], ot_node *const trees[],
                       const ot_binding *bind, ot_plan *p)
{
    ot__stat_add(ot__stats_mine(&be->stats), OT__STAT_CACHE_HITS, 1);
    if (atomic_load_explicit(&trees[0]->memo, memory_order_relaxed) == &assigned_once)
        memo_add(be, outs[0], trees[0], bind, p);
}

int ot__plan_find(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                  ot_plan **plan, ot_walk **walk, ot_binding *bind)
{
    ot_cpu *cpu = be->impl;
    bool memo = memoisable(n, outs, trees);
    if (memo && (*plan = memo_find(be, outs[0], trees[0], bind))) {
        ot__stat_add(ot__stats_mine(&be->stats), OT__STAT_CACHE_HITS, 1);
        *walk = NULL;
        bind->outs = outs;
        return 0;
    }
    bool digest = memo && trees[0]->digest_ok && outs[0]->serial;   /* 0: no backend's */
    *walk = NULL;
    if (digest && (*plan = thread_find(be, outs[0], trees[0], bind))) {
        bind->outs = outs;
        digest_hit(be, outs, trees, bind, *plan);
        return 0;
    }
    ot_walk *w = walk_take(cpu);
    if (!w) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory walking the tree");
    *walk = w;
    if (digest && (*plan = digest_find(be, outs[0], trees[0], w))) {
        *bind = (ot_binding){.leaf = w->leafptr, .param = w->param, .outs = outs};
        thread_add(be, outs[0], trees[0], w, *plan);
        ot__stat_add(ot__stats_mine(&be->stats), OT__STAT_CACHE_HITS, 1);
        memo_add(be, outs[0], trees[0], bind, *plan);
        return 0;
    }
    w->start_ns = ot__now_ns();
    if (!walk_trees(w, n, outs, trees)) {
        ot__walk_free(w);
        *walk = NULL;
        return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory walking the tree");
    }
    *bind = (ot_binding){.leaf = w->leafptr, .param = w->param, .outs = outs};
    pthread_mutex_lock(&cpu->cache->lock);
    *plan = cache_find(cpu->cache, w);
    pthread_mutex_unlock(&cpu->cache->lock);
    if (!*plan) return 0;   /* a miss: the driver compiles w */
    ot__stat_add(ot__stats_mine(&be->stats), OT__STAT_CACHE_HITS, 1);
    if (memo) memo_add(be, outs[0], trees[0], bind, *plan);
    if (digest) digest_add(be, outs[0], trees[0], w, *plan);
    return 0;
}

void ot__plan_keep(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                   ot_walk *w, ot_plan *p)
{
    ot_cpu *cpu = be->impl;
    pthread_mutex_lock(&cpu->cache->lock);
    atomic_fetch_add(&p->refs, 1);   /* the cache's, beside the caller's */
    if (!cache_add(cpu->cache, w, p)) atomic_fetch_sub(&p->refs, 1);
    pthread_mutex_unlock(&cpu->cache->lock);
    if (!memoisable(n, outs, trees)) return;
    memo_add(be, outs[0], trees[0], &(ot_binding){.leaf = w->leafptr, .param = w->param}, p);
    if (trees[0]->digest_ok && outs[0]->serial) digest_add(be, outs[0], trees[0], w, p);
}

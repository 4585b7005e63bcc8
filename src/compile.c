/*
 * compile.c - the cpu backend's compiler: trees -> a cached plan of kernels.
 *
 * Every call walks its trees once, iteratively and memoised by node pointer,
 * into a post-order list of entries. That walk yields three things at once:
 * the plan-cache key (structure only: ops, attributes, dtypes, leaf shapes
 * and strides, output layouts and their overlap with the leaves), the leaf
 * pointers and the constant values to bind. Leaves are numbered by the memory
 * they view and constants by occurrence, so everything the compiler merges
 * (common subexpressions) is a function of the key, and a cached plan never
 * merges two operands that happen to be equal in one call but not the next.
 *
 * On a miss the entries are compiled: common subexpressions are merged, the
 * nodes that must be materialised are chosen (dots, reductions read by more
 * work, transposes of computed values, rand/onehot, and cuts that bound a
 * kernel's size), and each kernel becomes a register program over tile
 * buffers with a mul+add -> fma peephole.
 *
 * Recomputation is bounded by a cost model (bound_recompute): fusion
 * inlines an elementwise value into every kernel that reads it and into
 * every element of a broadcast, so a value computed E times per element
 * (k distinct kernels, outputs of one group counting as one, times the
 * rows a broadcast repeats it over) is stored once when (E - 1) * cost >
 * 2 + E, cost being what computing it inline takes in units of an add
 * (transcendentals 8, division and roots 3, the rest 1, summed over the
 * inlined ops below it, plus 1 per stored value they read) and 2 + E the
 * write and the reads. Single-use
 * chains and values shared inside one kernel stay fused. The cpu backend counts elem_ops the same
 * way fused and unfused (count_ops), so tests bound fusion's arithmetic.
 */
#include "internal.h"
#include "ops.h"

#include <pthread.h>

#define MAX_REGION_INSNS 512   /* cut an elementwise region beyond this */
#define MAX_REGION_NEED 12     /* or when it would need more live buffers */

/* ---- the walk ------------------------------------------------------------ */

typedef struct ent {
    uint8_t kind;              /* OT_NODE_* */
    int8_t op;
    uint8_t dtype;
    int32_t a, b;              /* operand entries, -1 when absent */
    int32_t slot;              /* leaf slot or param index */
    bool one;                  /* a constant equal to 1 */
    bool zero;                 /* a constant equal to 0 */
    const ot_node *node;
} ent;

#define SMALL_MEMO 32   /* walks this small memoise without hashing */

struct ot_walk {
    ent *e;
    int n, cap;
    const ot_node *small[SMALL_MEMO];  /* node of entry i, while n <= SMALL_MEMO */
    ot__ptrmap memo;                   /* every node, once n > SMALL_MEMO */
    const ot_tensor **leaf;    /* one per slot: the first view seen */
    char **leafptr;
    int nleaf, leafcap;
    double *param;
    int nparam, paramcap;
    uint8_t *key;
    size_t klen, kcap;
    int *root;                 /* entry of each tree */
    int rootcap, leafptrcap;
    struct frame *frames;      /* the walk's explicit stack */
    int framecap;
    uint64_t hash;
};

typedef struct frame {
    const ot_node *n;
    bool expanded;
} frame;

#define SPARE_KEY_MAX 65536   /* walks bigger than this are not kept */

/* The entry of node n, or -1. */
static int memo_get(const ot_walk *w, const ot_node *n)
{
    if (w->n > SMALL_MEMO) return ot__ptrmap_get(&w->memo, n);
    for (int i = w->n - 1; i >= 0; i--)
        if (w->small[i] == n) return i;
    return -1;
}

/* Records node n as entry w->n (the next one); moves to the hash map when
 * the walk outgrows the inline array. */
static bool memo_put(ot_walk *w, const ot_node *n)
{
    if (w->n < SMALL_MEMO) {
        w->small[w->n] = n;
        return true;
    }
    if (w->n == SMALL_MEMO)
        for (int i = 0; i < SMALL_MEMO; i++)
            if (!ot__ptrmap_put(&w->memo, w->small[i], i)) return false;
    return ot__ptrmap_put(&w->memo, n, w->n);
}

static bool grow(void **p, int *cap, int need, size_t elem)
{
    if (need <= *cap) return true;
    int c = *cap ? *cap : 16;
    while (c < need) c *= 2;
    size_t bytes;
    if (!ot__mul_size(&bytes, (size_t)c, elem)) return false;
    void *q = ot__realloc(*p, bytes);
    if (!q) return false;
    *p = q;
    *cap = c;
    return true;
}

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

static bool same_view(const ot_tensor *x, const ot_tensor *y)
{
    if (x->buf != y->buf || x->offset != y->offset || x->leaf.dtype != y->leaf.dtype ||
        !ot__shape_eq(&x->leaf.shape, &y->leaf.shape))
        return false;
    for (int i = 0; i < x->leaf.shape.ndim; i++)
        if (x->strides[i] != y->strides[i]) return false;
    return true;
}

/* The slot of a leaf; a view seen for the first time adds its layout to the
 * key. The scan is linear in the distinct leaves, which are few in practice. */
static int leaf_slot(ot_walk *w, const ot_tensor *t, bool *ok)
{
    for (int i = 0; i < w->nleaf; i++)
        if (w->leaf[i] == t || same_view(w->leaf[i], t)) return i;
    if (!grow((void **)&w->leaf, &w->leafcap, w->nleaf + 1, sizeof *w->leaf)) {
        *ok = false;
        return -1;
    }
    w->leaf[w->nleaf] = t;
    const ot_shape *s = &t->leaf.shape;
    *ok = KEY(w, s->ndim) && key_put(w, s->dims, sizeof(int64_t) * (size_t)s->ndim) &&
          key_put(w, t->strides, sizeof(int64_t) * (size_t)s->ndim);
    return w->nleaf++;
}

/* The attributes that change what an op computes, in a fixed layout. */
static bool key_args(ot_walk *w, const ot_node *n)
{
    const ot_args *g = &n->args;
    switch (ot_op_kind((ot_op)n->op)) {
    case OT_KIND_REDUCE: {
        int32_t v[2] = {g->axis, g->keepdims};
        return KEY(w, v);
    }
    case OT_KIND_SHAPE: return key_put(w, g->perm, sizeof g->perm);
    case OT_KIND_SPECIAL: {
        int64_t v[3] = {g->depth, (int64_t)g->seed, g->axis};
        return KEY(w, v) && KEY(w, n->shape.ndim) &&
               key_put(w, n->shape.dims, sizeof(int64_t) * (size_t)n->shape.ndim);
    }
    default: return true;
    }
}

static bool add_entry(ot_walk *w, const ot_node *n)
{
    if (!grow((void **)&w->e, &w->cap, w->n + 1, sizeof *w->e)) return false;
    ent *e = &w->e[w->n];
    *e = (ent){n->kind, n->op, n->dtype, -1, -1, -1, false, false, n};
    uint8_t head[3] = {n->kind, (uint8_t)n->op, n->dtype};
    bool ok = KEY(w, head);
    if (n->kind == OT_NODE_LEAF) {
        e->slot = leaf_slot(w, ot__leaf_tensor(n), &ok);
        ok = ok && KEY(w, e->slot);
    } else if (n->kind == OT_NODE_CONST) {
        if (!grow((void **)&w->param, &w->paramcap, w->nparam + 1, sizeof *w->param))
            return false;
        e->slot = w->nparam;
        w->param[w->nparam++] = n->value;
        /* Whether the value is 1 or 0 is structure, not data: patterns such
         * as 1/(1 + exp(-x)) depend on it, and a GEMM's beta must not drop
         * the NaN that 0*out keeps. */
        e->one = n->value == 1.0;
        e->zero = n->value == 0.0;
        uint8_t cls = (uint8_t)(e->one | e->zero << 1);
        ok = ok && KEY(w, cls);
    } else {
        e->a = n->a ? memo_get(w, n->a) : -1;
        e->b = n->b ? memo_get(w, n->b) : -1;
        ok = ok && KEY(w, e->a) && KEY(w, e->b) && key_args(w, n);
    }
    ok = ok && memo_put(w, n);
    w->n++;
    return ok;
}

/* Iterative post-order over one tree, operand a before b, each node once. */
static bool walk_tree(ot_walk *w, const ot_node *root, int *root_entry)
{
    int sn = 0;
    bool ok = grow((void **)&w->frames, &w->framecap, 1, sizeof *w->frames);
    if (ok) w->frames[sn++] = (frame){root, false};
    while (ok && sn > 0) {
        frame *f = &w->frames[sn - 1];
        /* An expanded frame was not in the memo when first seen, and a node
         * cannot be its own descendant: only new frames need the lookup. */
        if (!f->expanded && memo_get(w, f->n) >= 0) {
            sn--;
            continue;
        }
        if (f->expanded || f->n->kind != OT_NODE_OP) {
            ok = add_entry(w, f->n);
            sn--;
            continue;
        }
        f->expanded = true;
        const ot_node *a = f->n->a, *b = f->n->b;
        if (!grow((void **)&w->frames, &w->framecap, sn + 2, sizeof *w->frames)) return false;
        if (b) w->frames[sn++] = (frame){b, false};
        if (a) w->frames[sn++] = (frame){a, false};
    }
    if (ok) *root_entry = memo_get(w, root);
    return ok;
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

static uint64_t hash_bytes(const uint8_t *p, size_t n)
{
    uint64_t h = 0x9e3779b97f4a7c15ULL ^ n, w;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        memcpy(&w, p + i, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdULL;
        h ^= h >> 32;
    }
    for (; i < n; i++) h = (h ^ p[i]) * 0x100000001b3ULL;
    return h ^ (h >> 29);
}

void ot__walk_free(ot_walk *w)
{
    if (!w) return;
    free(w->e);
    ot__ptrmap_free(&w->memo);
    free(w->leaf);
    free(w->leafptr);
    free(w->param);
    free(w->key);
    free(w->root);
    free(w->frames);
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

/* The backend's spare walk emptied for reuse, or a new one. */
static ot_walk *walk_start(ot_cpu *cpu)
{
    ot_walk *w = atomic_exchange(&cpu->spare, NULL);
    if (!w) return ot__calloc(1, sizeof *w);
    ot__ptrmap_free(&w->memo);
    memset(&w->memo, 0, sizeof w->memo);
    w->n = w->nleaf = w->nparam = 0;
    w->klen = 0;
    return w;
}

static ot_walk *walk_trees(ot_cpu *cpu, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    ot_walk *w = walk_start(cpu);
    bool ok = w && grow((void **)&w->root, &w->rootcap, n, sizeof *w->root);
    for (int i = 0; i < n && ok; i++) ok = walk_tree(w, trees[i], &w->root[i]);
    ok = ok && key_put(w, w->root, sizeof(int) * (size_t)n) && key_outputs(w, n, outs, trees);
    ok = ok && grow((void **)&w->leafptr, &w->leafptrcap, w->nleaf ? w->nleaf : 1, sizeof(char *));
    if (!ok) {
        ot__walk_free(w);
        return NULL;
    }
    for (int i = 0; i < w->nleaf; i++) {
        const ot_tensor *t = w->leaf[i];
        w->leafptr[i] = (char *)t->buf->data + t->offset * (int64_t)ot_dtype_size(t->leaf.dtype);
    }
    w->hash = hash_bytes(w->key, w->klen);
    return w;
}

/* ---- the plan cache: a bounded LRU ---------------------------------------- */

typedef struct cache_entry {
    uint64_t hash;
    uint8_t *key;
    size_t klen;
    ot_plan *plan;
    struct cache_entry *prev, *next;   /* most recent first */
} cache_entry;

struct ot_plan_cache {
    pthread_mutex_t lock;
    cache_entry *head, *tail;
    int len, cap;
};

ot_plan_cache *ot__plan_cache_new(int capacity)
{
    ot_plan_cache *c = ot__calloc(1, sizeof *c);
    if (!c) return NULL;
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

void ot__plan_cache_free(ot_plan_cache *c)
{
    if (!c) return;
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

/* ---- compiling: storage and materialisation ------------------------------- */

/* Where a materialised entry's values live, as a strided view. */
typedef struct storage {
    bool has;
    uint8_t space;
    int32_t index;
    uint8_t dtype;
    ot_shape shape;
    int64_t strides[OT_MAX_DIMS];
} storage;

typedef struct cinfo {
    int canon;                 /* the entry this one merged into */
    int uses;                  /* readers among canonical entries and roots */
    bool mat;                  /* materialised: computed by its own kernel */
    int need, size;            /* register need and region size estimates */
    storage st;
} cinfo;

typedef struct compiler {
    ot_backend *be;
    const ot_kernels *k;
    const ot_walk *w;
    ot_tensor *const *outs;
    ot_node *const *trees;
    int nout;
    cinfo *ci;
    ot_plan *plan;
    int kcap, tcap;
    bool fused;
    bool oom;
    struct gemm_root *groot;   /* per output: written by one BLAS call? */
} compiler;

/* Output i is dot * alpha + out * beta, computed by one BLAS call writing
 * the output (neon's compound_dot); beta NONE for a plain dot. */
typedef struct gemm_root {
    int dot;                   /* the dot's entry, or -1 */
    ot_scale alpha, beta;
} gemm_root;


static const ot_node *node_of(const compiler *c, int e) { return c->w->e[e].node; }
static int kind_of(const compiler *c, int e) { return ot_op_kind((ot_op)c->w->e[e].op); }
static bool is_op(const compiler *c, int e) { return c->w->e[e].kind == OT_NODE_OP; }
static bool is_ew(const compiler *c, int e)
{
    if (!is_op(c, e)) return false;
    int k = kind_of(c, e);
    return k == OT_KIND_UNARY || k == OT_KIND_BINARY || c->w->e[e].op == OT_OP_CAST;
}

static int canon_of(const compiler *c, int e) { return e >= 0 ? c->ci[e].canon : -1; }

/* Hash-consing of op entries by (op, dtype, attributes, canonical operands).
 * Nullary ops (rand) are never merged: two rand nodes are two draws. */
static bool same_op(const compiler *c, int x, int y)
{
    const ent *ex = &c->w->e[x], *ey = &c->w->e[y];
    if (ex->a < 0 || ex->op != ey->op || ex->dtype != ey->dtype ||
        canon_of(c, ex->a) != canon_of(c, ey->a) || canon_of(c, ex->b) != canon_of(c, ey->b))
        return false;
    const ot_args *ga = &ex->node->args, *gb = &ey->node->args;
    return ga->axis == gb->axis && ga->keepdims == gb->keepdims && ga->depth == gb->depth &&
           ga->seed == gb->seed && memcmp(ga->perm, gb->perm, sizeof ga->perm) == 0 &&
           ot__shape_eq(&ex->node->shape, &ey->node->shape);
}

static bool merge_common(compiler *c)
{
    int n = c->w->n;
    size_t cap = 64;
    while (cap < 2 * (size_t)n) cap *= 2;
    int *table = ot__malloc(cap * sizeof *table);
    int *leaf_canon = ot__malloc(sizeof(int) * (size_t)(c->w->nleaf ? c->w->nleaf : 1));
    if (!table || !leaf_canon) {
        free(table);
        free(leaf_canon);
        return false;
    }
    memset(table, -1, cap * sizeof *table);
    for (int i = 0; i < c->w->nleaf; i++) leaf_canon[i] = -1;
    for (int i = 0; i < n; i++) {
        const ent *e = &c->w->e[i];
        c->ci[i].canon = i;
        if (e->kind == OT_NODE_LEAF) {
            if (leaf_canon[e->slot] < 0) leaf_canon[e->slot] = i;
            c->ci[i].canon = leaf_canon[e->slot];
            continue;
        }
        if (e->kind != OT_NODE_OP) continue;
        uint64_t h = (uint64_t)e->op * 31 + (uint64_t)canon_of(c, e->a) * 1000003u +
                     (uint64_t)canon_of(c, e->b) * 7919u;
        for (size_t j = (h * 0x9e3779b97f4a7c15ULL) >> 7 & (cap - 1);; j = (j + 1) & (cap - 1)) {
            if (table[j] < 0) {
                table[j] = i;
                break;
            }
            if (same_op(c, table[j], i)) {
                c->ci[i].canon = table[j];
                break;
            }
        }
    }
    free(table);
    free(leaf_canon);
    return true;
}

static int canon_operand(const compiler *c, int e, int which)
{
    return canon_of(c, which == 0 ? c->w->e[e].a : c->w->e[e].b);
}

static void count_uses(compiler *c)
{
    for (int i = 0; i < c->w->n; i++) {
        if (c->ci[i].canon != i || !is_op(c, i)) continue;
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, i, k);
            if (o >= 0) c->ci[o].uses++;
        }
    }
    for (int r = 0; r < c->nout; r++) c->ci[c->ci[c->w->root[r]].canon].uses++;
}

static bool is_costly(int op)
{
    return ot__op_cost(op) >= OT__COST_TRANS;
}

/* Decides which op entries get their own kernel and storage. */
static void choose_materialised(compiler *c)
{
    for (int i = 0; i < c->w->n; i++) {
        cinfo *ci = &c->ci[i];
        if (ci->canon != i || !is_op(c, i)) continue;
        int op = c->w->e[i].op, kind = kind_of(c, i);
        if (!is_ew(c, i) || !c->fused) ci->mat = kind != OT_KIND_SHAPE;
        /* Operands that must exist in memory: a dot's (BLAS reads arrays), a
         * transpose's (it is a strided view of them), onehot's input. */
        if (kind == OT_KIND_DOT || kind == OT_KIND_SHAPE || op == OT_OP_ONEHOT)
            for (int k = 0; k < 2; k++) {
                int o = canon_operand(c, i, k);
                if (o >= 0 && is_op(c, o) && kind_of(c, o) != OT_KIND_SHAPE) c->ci[o].mat = true;
            }
        /* A costly value that a reduction and other work both read (softmax's
         * exp(x - max)) is stored once rather than computed in each kernel. */
        if (kind == OT_KIND_REDUCE && c->fused) {
            int o = canon_operand(c, i, 0);
            if (is_ew(c, o) && c->ci[o].uses >= 2 && is_costly(c->w->e[o].op)) c->ci[o].mat = true;
        }
        if (!is_ew(c, i)) continue;
        /* Sethi-Ullman style estimates bound a region's live buffers and
         * size; past the bound the node is cut into its own kernel. */
        int na = 0, nb = 0, sa = 0, sb = 0;
        int a = canon_operand(c, i, 0), b = canon_operand(c, i, 1);
        if (a >= 0 && is_ew(c, a) && !c->ci[a].mat) { na = c->ci[a].need; sa = c->ci[a].size; }
        if (b >= 0 && is_ew(c, b) && !c->ci[b].mat) { nb = c->ci[b].need; sb = c->ci[b].size; }
        ci->need = na == nb ? na + 1 : (na > nb ? na : nb);
        if (ci->need < 1) ci->need = 1;
        ci->size = sa + sb + 1;
        if (ci->need > MAX_REGION_NEED || ci->size > MAX_REGION_INSNS) {
            ci->mat = true;
            ci->need = 1;
            ci->size = 1;
        }
    }
}

static ot_shape out_shape(const compiler *c, int i);

/* ---- the recomputation cost model ----------------------------------------- */

#define COST_CAP (1 << 20)   /* estimates saturate here */
#define COST_STORE 2         /* writing a value once, in op units */
#define COST_LOAD 1          /* a kernel reading it back */
#define READERS_KEPT 4       /* kernel ids kept per value; beyond, counted */

/* What computing one element of op costs, in units of an add: SLEEF's
 * transcendentals are tens of instructions, a division or root a few. */
static int op_cost(int op)
{
    return ot__op_cost(op);
}

/* The kernels an inlined value is computed in: a few ids, and a count that
 * goes on past them (distinct as far as the ids tell). */
typedef struct readers {
    int id[READERS_KEPT];
    int n;
} readers;

static void readers_add(readers *r, int id)
{
    int kept = r->n < READERS_KEPT ? r->n : READERS_KEPT;
    for (int i = 0; i < kept; i++)
        if (r->id[i] == id) return;
    if (r->n < READERS_KEPT) r->id[r->n] = id;
    if (r->n < INT_MAX) r->n++;
}

static void readers_merge(readers *to, const readers *from)
{
    int kept = from->n < READERS_KEPT ? from->n : READERS_KEPT;
    for (int i = 0; i < kept; i++) readers_add(to, from->id[i]);
    for (int i = kept; i < from->n && to->n < INT_MAX; i++) to->n++;
}

/* The kernel computing output i's root: outputs of one shape share a
 * group kernel (choose_groups), so they count as one. */
static int root_kernel_id(const compiler *c, int i)
{
    int r = c->ci[c->w->root[i]].canon;
    if (!c->outs || c->nout < 2) return r;
    ot_shape si = out_shape(c, i);
    for (int j = 0; j < i; j++) {
        int rj = c->ci[c->w->root[j]].canon;
        ot_shape sj = out_shape(c, j);
        if (is_ew(c, rj) && !c->ci[rj].mat && ot__shape_eq(&si, &sj)) return c->w->n + j;
    }
    return is_ew(c, r) && !c->ci[r].mat ? c->w->n + i : r;
}

/* How many times a reader of shape `to` computes each element of an
 * inlined value of shape `from`: broadcasting along the rows repeats it
 * per row. A value broadcast along the innermost dim is a scalar per tile,
 * computed once, so that counts as 1. */
static double bcast_factor(const ot_shape *to, const ot_shape *from)
{
    int64_t nf = ot__numel(from), nt = ot__numel(to);
    if (from->ndim == 0 || nf == 0 || nt <= nf) return 1;
    int64_t lf = from->dims[from->ndim - 1], lt = to->ndim ? to->dims[to->ndim - 1] : 1;
    return lf == lt && lf > 1 ? (double)nt / (double)nf : 1;
}

/* Fusion inlines an elementwise value into every kernel that reads it, and
 * into every element of a broadcast, so a value shared by several kernels
 * is computed in each (a recurrence whose every step is also reduced would
 * be computed T^2/2 times), and a row broadcast once per row. A value
 * computed E times per element that way (k kernels, times the broadcast)
 * is stored once instead when (E - 1) * cost > store + E * load: the cost
 * of computing it inline (its op, the inlined ops below it and the stored
 * values they read) against writing it once and reading it back. Single-use chains and values shared
 * within one kernel stay fused. Walks users before operands, so each
 * value's readers are known when it is decided. */
static bool bound_recompute(compiler *c)
{
    int n = c->w->n;
    size_t cnt = (size_t)(n ? n : 1);
    int *cost = ot__malloc(sizeof(int) * cnt);
    double *fac = ot__calloc(cnt, sizeof *fac);   /* evaluations per element per kernel */
    readers *rd = ot__calloc(cnt, sizeof *rd);
    int *root_id = ot__malloc(sizeof(int) * cnt);   /* an output root's kernel, or -1 */
    if (!cost || !fac || !rd || !root_id) {
        free(cost);
        free(fac);
        free(rd);
        free(root_id);
        return false;
    }
    for (int i = 0; i < n; i++) root_id[i] = -1;
    for (int i = 0; i < c->nout; i++) {
        int r = c->ci[c->w->root[i]].canon;
        if (root_id[r] < 0) root_id[r] = root_kernel_id(c, i);
        ot_shape osh = out_shape(c, i);   /* a tree broadcast into a bigger output */
        double f = bcast_factor(&osh, &node_of(c, r)->shape);
        if (f > fac[r]) fac[r] = f;
    }
    for (int i = 0; i < n; i++) {
        cost[i] = 0;
        if (c->ci[i].canon != i || !is_ew(c, i)) continue;
        int64_t sum = op_cost(c->w->e[i].op);
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, i, k);
            if (o < 0 || c->w->e[o].kind == OT_NODE_CONST) continue;
            sum += is_ew(c, o) && !c->ci[o].mat ? cost[o] : COST_LOAD;   /* inlined, or read */
        }
        cost[i] = sum > COST_CAP ? COST_CAP : (int)sum;
    }
    for (int u = n - 1; u >= 0; u--) {
        cinfo *cu = &c->ci[u];
        if (cu->canon != u || !is_op(c, u)) continue;
        readers here = {{0}, 0};
        double f = 1;
        if (!is_ew(c, u) || cu->mat) {
            readers_add(&here, u);
        } else {
            if (root_id[u] >= 0) readers_add(&rd[u], root_id[u]);
            double e = (double)rd[u].n * fac[u];
            if (e > 1 && (e - 1) * cost[u] > COST_STORE + e * COST_LOAD) {
                cu->mat = true;
                readers_add(&here, u);
            } else {
                here = rd[u];
                f = fac[u];
            }
        }
        if (kind_of(c, u) == OT_KIND_SHAPE) continue;
        const ot_shape *us = &node_of(c, u)->shape;
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, u, k);
            if (o < 0 || !is_ew(c, o) || c->ci[o].mat) continue;
            readers_merge(&rd[o], &here);
            double fo = is_ew(c, u) ? f * bcast_factor(us, &node_of(c, o)->shape) : 1;
            if (fo > fac[o]) fac[o] = fo;
        }
    }
    free(cost);
    free(fac);
    free(rd);
    free(root_id);
    return true;
}

/* ---- storage -------------------------------------------------------------- */

static void contiguous(storage *s)
{
    int64_t st = 1;
    for (int i = s->shape.ndim - 1; i >= 0; i--) {
        s->strides[i] = st;
        st *= s->shape.dims[i] ? s->shape.dims[i] : 1;
    }
}

/* Temporaries get their size here and their arena offset once every kernel
 * is built (layout_arena), so that dead ones can share memory. */
static int new_temp(compiler *c, const ot_shape *shape, ot_dtype dt)
{
    ot_plan *p = c->plan;
    if (!grow((void **)&p->temp_offset, &c->tcap, p->ntemps + 1, sizeof *p->temp_offset)) {
        c->oom = true;
        return -1;
    }
    size_t bytes = (size_t)ot__numel(shape) * ot_dtype_size(dt);
    p->temp_offset[p->ntemps] = (bytes + 63) & ~(size_t)63;   /* the size, until laid out */
    return p->ntemps++;
}

static void temp_storage(compiler *c, storage *s, const ot_shape *shape, ot_dtype dt)
{
    *s = (storage){.has = true, .space = OT_SPACE_TEMP, .dtype = (uint8_t)dt, .shape = *shape};
    s->index = new_temp(c, shape, dt);
    contiguous(s);
}

static void assign_storage(compiler *c)
{
    for (int i = 0; i < c->w->n && !c->oom; i++) {
        cinfo *ci = &c->ci[i];
        if (ci->canon != i) continue;
        const ent *e = &c->w->e[i];
        if (e->kind == OT_NODE_LEAF) {
            const ot_tensor *t = c->w->leaf[e->slot];
            ci->st = (storage){.has = true, .space = OT_SPACE_LEAF, .index = e->slot,
                               .dtype = e->dtype, .shape = t->leaf.shape};
            memcpy(ci->st.strides, t->strides, sizeof ci->st.strides);
        } else if (e->kind == OT_NODE_OP && kind_of(c, i) == OT_KIND_SHAPE) {
            const storage *src = &c->ci[canon_operand(c, i, 0)].st;
            if (!src->has) continue;   /* transpose of a constant: a scalar */
            ci->st = *src;
            ci->st.shape = e->node->shape;
            for (int d = 0; d < e->node->shape.ndim; d++)
                ci->st.strides[d] = src->strides[e->node->args.perm[d]];
        } else if (ci->mat) {
            temp_storage(c, &ci->st, &e->node->shape, (ot_dtype)e->dtype);
        }
    }
}

/* ---- kernels -------------------------------------------------------------- */

static const ot_scale ONE = {-1, 1}, NONE = {-1, 0};

static ot_kernel *new_kernel(compiler *c, int kind)
{
    ot_plan *p = c->plan;
    if (p->nkernels == c->kcap) {
        int cap = c->kcap ? 2 * c->kcap : 8;
        ot_kernel *k = ot__realloc(p->kernels, sizeof *k * (size_t)cap);
        if (!k) {
            c->oom = true;
            return NULL;
        }
        p->kernels = k;
        c->kcap = cap;
    }
    ot_kernel *k = &p->kernels[p->nkernels++];
    *k = (ot_kernel){.kind = kind, .result = -1, .red_axis = -1};
    return k;
}

/* A storage seen from an iteration space (right-aligned broadcast). */
static ot_view view_of(const storage *s, int ndim, const int64_t *dims)
{
    ot_view v = {.space = s->space, .dtype = s->dtype, .index = s->index};
    int off = ndim - s->shape.ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - off;
        v.strides[i] = j >= 0 && !(s->shape.dims[j] == 1 && dims[i] != 1) ? s->strides[j] : 0;
    }
    return v;
}

static ot_view output_view(const compiler *c, int i, int ndim, const int64_t *dims)
{
    storage s = {.has = true, .space = OT_SPACE_OUT, .index = i};
    const ot_tensor *o = c->outs ? c->outs[i] : NULL;
    if (o) {
        s.dtype = o->leaf.dtype;
        s.shape = o->leaf.shape;
        memcpy(s.strides, o->strides, sizeof s.strides);
    } else {
        s.dtype = c->trees[i]->dtype;
        s.shape = c->trees[i]->shape;
        contiguous(&s);
    }
    return view_of(&s, ndim, dims);
}

/* Builds one register program: values are SSA, then mapped onto buffers. */
typedef struct value {
    uint8_t kd;
    bool scalar;
    int last_use;              /* insn index, or INT_MAX for the result */
    int buf;
} value;

typedef struct prog {
    compiler *c;
    ot_kernel *k;
    int *val;                  /* entry -> value, -1 when not yet emitted */
    int *stamp;                /* entry -> kernel id that marked it */
    int id;
    value *v;
    int nv, vcap;
    ot_insn *ins;
    int nins, icap;
    int *fused;                /* entry -> id of the kernel folding it into an fma */
    int *region;               /* the entries of the current region, sorted */
    int nregion, regioncap;
    int *dfs;                  /* the marking walk's stack */
    int dfscap;
    int xval[OT_MAX_XSTORES];  /* the values of the kernel's further outputs */
} prog;

static int emit(prog *g, ot_insn in, uint8_t kd, bool scalar)
{
    if (!grow((void **)&g->ins, &g->icap, g->nins + 1, sizeof *g->ins) ||
        !grow((void **)&g->v, &g->vcap, g->nv + 1, sizeof *g->v)) {
        g->c->oom = true;
        return -1;
    }
    in.dst = (int16_t)g->nv;
    in.kd = kd;
    if (scalar) in.scalar |= 8;
    g->ins[g->nins++] = in;
    g->v[g->nv] = (value){kd, scalar, -1, -1};
    return g->nv++;
}

static int use(prog *g, int v) { if (v >= 0) g->v[v].last_use = g->nins; return v; }

static int cast_to(prog *g, int v, uint8_t kd)
{
    if (v < 0 || g->v[v].kd == kd) return v;
    ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[v].kd, .a = (int16_t)use(g, v), .b = -1, .c = -1};
    bool s = g->v[v].scalar;
    in.scalar = s ? 1 : 0;
    return emit(g, in, kd, s);
}

static bool is_mul_for_fma(const prog *g, int e, uint8_t kd)
{
    const compiler *c = g->c;
    return e >= 0 && c->w->e[e].op == OT_OP_MUL && is_op(c, e) && !c->ci[e].mat &&
           c->ci[e].uses == 1 && ot__kd((ot_dtype)c->w->e[e].dtype) == kd && kd != OT_KD_I32 &&
           (strcmp(c->k->isa, "avx2") == 0 || strcmp(c->k->isa, "avx512") == 0);
}

static int operand_value(prog *g, int e, uint8_t kd) { return cast_to(g, g->val[e], kd); }

static int fma_mul_of(const prog *g, int e);
static int sigmoid_of(const prog *g, int e, int fold[3]);
static bool coalesce(ot_kernel *k, int *pinned);

static int emit_op(prog *g, int e)
{
    compiler *c = g->c;
    const ent *x = &c->w->e[e];
    uint8_t kd = (uint8_t)ot__kd((ot_dtype)x->dtype);
    int a = canon_operand(c, e, 0), b = canon_operand(c, e, 1);
    if (x->op == OT_OP_CAST) {
        int va = use(g, g->val[a]);
        ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[va].kd, .a = (int16_t)va, .b = -1, .c = -1,
                      .scalar = g->v[va].scalar ? 1 : 0};
        return emit(g, in, kd, g->v[va].scalar);
    }
    int fold[3], arg = sigmoid_of(g, e, fold);
    if (arg >= 0) {
        int vx = use(g, operand_value(g, arg, kd));
        ot_insn in = {.code = OT_I_UNARY, .op = OT_OP_SIG, .a = (int16_t)vx, .b = -1, .c = -1,
                      .scalar = g->v[vx].scalar ? 1 : 0};
        return emit(g, in, kd, g->v[vx].scalar);
    }
    if (b < 0) {
        int va = use(g, operand_value(g, a, kd));
        ot_insn in = {.code = OT_I_UNARY, .op = (uint8_t)x->op, .a = (int16_t)va, .b = -1, .c = -1,
                      .scalar = g->v[va].scalar ? 1 : 0};
        return emit(g, in, kd, g->v[va].scalar);
    }
    int m = fma_mul_of(g, e);
    if (m >= 0) {
        int z = x->op == OT_OP_SUB || m != a ? a : b;
        int vx = operand_value(g, canon_operand(c, m, 0), kd);
        int vy = operand_value(g, canon_operand(c, m, 1), kd);
        int vz = operand_value(g, z, kd);
        use(g, vx), use(g, vy), use(g, vz);
        bool sx = g->v[vx].scalar, sy = g->v[vy].scalar, sz = g->v[vz].scalar;
        ot_insn in = {.code = OT_I_FMA, .op = (uint8_t)x->op, .a = (int16_t)vx, .b = (int16_t)vy,
                      .c = (int16_t)vz,
                      .scalar = (uint8_t)((sx ? 1 : 0) | (sy ? 2 : 0) | (sz ? 4 : 0))};
        return emit(g, in, kd, sx && sy && sz);
    }
    int va = operand_value(g, a, kd), vb = operand_value(g, b, kd);
    use(g, va), use(g, vb);
    bool sa = g->v[va].scalar, sb = g->v[vb].scalar;
    ot_insn in = {.code = OT_I_BINARY, .op = (uint8_t)x->op, .a = (int16_t)va, .b = (int16_t)vb,
                  .c = -1, .scalar = (uint8_t)((sa ? 1 : 0) | (sb ? 2 : 0))};
    return emit(g, in, kd, sa && sb);
}

/* An entry the region reads rather than computes. The root is computed
 * unless root_computed is false (a reduction over a stored value). */
static bool region_input(const compiler *c, int e, int root, bool root_computed)
{
    if (e == root) return !root_computed;
    return !is_ew(c, e) || c->ci[e].mat;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Marks the region of root with g->id and lists its entries in entry order
 * (a topological order), so that work per kernel is linear in its region,
 * not in the whole tree. Returns false when out of memory. */
static bool mark_region(prog *g, const int *roots, int nroots, int root, bool root_computed)
{
    compiler *c = g->c;
    int sn = 0;
    g->nregion = 0;
    if (!grow((void **)&g->dfs, &g->dfscap, nroots, sizeof *g->dfs)) return false;
    for (int i = 0; i < nroots; i++) g->dfs[sn++] = roots[i];
    while (sn > 0) {
        int e = g->dfs[--sn];
        if (g->stamp[e] == g->id) continue;
        g->stamp[e] = g->id;
        g->val[e] = -1;
        if (!grow((void **)&g->region, &g->regioncap, g->nregion + 1, sizeof *g->region))
            return false;
        g->region[g->nregion++] = e;
        bool scalar_view = is_op(c, e) && kind_of(c, e) == OT_KIND_SHAPE && !c->ci[e].st.has;
        if (region_input(c, e, root, root_computed) && !scalar_view) continue;
        if (!grow((void **)&g->dfs, &g->dfscap, sn + 2, sizeof *g->dfs)) return false;
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, e, k);
            if (o >= 0 && g->stamp[o] != g->id) g->dfs[sn++] = o;
        }
    }
    qsort(g->region, (size_t)g->nregion, sizeof *g->region, cmp_int);
    return true;
}

static bool reads_storage(const compiler *c, int e, int root, bool root_computed)
{
    return c->ci[e].st.has &&
           (region_input(c, e, root, root_computed) || c->w->e[e].kind == OT_NODE_LEAF);
}

/* Adds a load per stored input of the region (before coalescing, so every
 * view takes part in it). */
static bool add_loads(prog *g, int root, bool root_computed)
{
    compiler *c = g->c;
    ot_kernel *k = g->k;
    for (int r = 0; r < g->nregion; r++) {
        int e = g->region[r];
        if (c->ci[e].canon != e || !reads_storage(c, e, root, root_computed)) continue;
        ot_view *lv = ot__realloc(k->loads, sizeof *lv * (size_t)(k->nload + 1));
        if (!lv) return false;
        k->loads = lv;
        lv[k->nload] = view_of(&c->ci[e].st, k->ndim, k->dims);
        g->val[e] = -2 - k->nload++;   /* a pending load, emitted below */
    }
    return true;
}

/* The multiply an add (either operand) or a subtraction (the subtrahend:
 * c - a*b, an fnma) folds into; the same choice emit_op makes. */
static int fma_mul_of(const prog *g, int e)
{
    const compiler *c = g->c;
    int op = c->w->e[e].op;
    if ((op != OT_OP_ADD && op != OT_OP_SUB) || !is_op(c, e)) return -1;
    uint8_t kd = (uint8_t)ot__kd((ot_dtype)c->w->e[e].dtype);
    int a = canon_operand(c, e, 0), b = canon_operand(c, e, 1);
    if (op == OT_OP_ADD && is_mul_for_fma(g, a, kd) && g->stamp[a] == g->id) return a;
    if (is_mul_for_fma(g, b, kd) && g->stamp[b] == g->id) return b;
    return -1;
}

/* An op entry of this region that only e reads, so e may absorb it. */
static bool absorbable(const prog *g, int e, int op)
{
    const compiler *c = g->c;
    return e >= 0 && is_op(c, e) && c->w->e[e].op == op && !c->ci[e].mat &&
           c->ci[e].uses == 1 && g->stamp[e] == g->id;
}

static bool is_one(const compiler *c, int e)
{
    return e >= 0 && c->w->e[e].kind == OT_NODE_CONST && c->w->e[e].one;
}

/* 1 / (1 + exp(-x)) is sig(x), computed in one pass by the sig kernel (and
 * more accurately, without the overflow of exp for large -x). Returns x, and
 * the entries folded in through fold[0..2]. */
static int sigmoid_of(const prog *g, int e, int fold[3])
{
    const compiler *c = g->c;
    if (!is_op(c, e) || c->w->e[e].op != OT_OP_DIV || !is_one(c, canon_operand(c, e, 0)))
        return -1;
    int add = canon_operand(c, e, 1);
    if (!absorbable(g, add, OT_OP_ADD)) return -1;
    int ex = canon_operand(c, add, 1);
    if (!is_one(c, canon_operand(c, add, 0))) {
        if (!is_one(c, ex)) return -1;
        ex = canon_operand(c, add, 0);
    }
    int neg = canon_operand(c, ex, 0);
    if (!absorbable(g, ex, OT_OP_EXP) || !absorbable(g, neg, OT_OP_NEG)) return -1;
    int x = canon_operand(c, neg, 0);
    if (c->w->e[x].dtype != c->w->e[e].dtype) return -1;
    fold[0] = add;
    fold[1] = ex;
    fold[2] = neg;
    return x;
}

static void mark_fused(prog *g, int root, bool root_computed)
{
    for (int r = 0; r < g->nregion; r++) {
        int e = g->region[r];
        if (g->c->ci[e].canon != e || region_input(g->c, e, root, root_computed)) continue;
        int m = fma_mul_of(g, e), fold[3];
        if (m >= 0) g->fused[m] = g->id;
        if (sigmoid_of(g, e, fold) >= 0)
            for (int k = 0; k < 3; k++) g->fused[fold[k]] = g->id;
    }
}

static int emit_load(prog *g, int load)
{
    const ot_kernel *k = g->k;
    bool scalar = k->ndim == 0 || k->loads[load].strides[k->ndim - 1] == 0;
    ot_insn in = {.code = OT_I_LOAD, .arg = load, .a = -1, .b = -1, .c = -1};
    return emit(g, in, (uint8_t)ot__kd((ot_dtype)k->loads[load].dtype), scalar);
}

/* Emits the region of roots in entry order (a topological order) after the
 * loads are coalesced: a value shared by several roots is computed once.
 * root is the one root that may be stored rather than computed (!root_computed),
 * or -1. */
static void emit_roots(prog *g, const int *roots, int nroots, int root, bool root_computed,
                       int *pinned)
{
    compiler *c = g->c;
    g->id++;
    if (!mark_region(g, roots, nroots, root, root_computed) || !add_loads(g, root, root_computed) ||
        !coalesce(g->k, pinned)) {
        c->oom = true;
        return;
    }
    mark_fused(g, root, root_computed);
    for (int r = 0; r < g->nregion && !c->oom; r++) {
        int e = g->region[r];
        if (c->ci[e].canon != e || g->fused[e] == g->id) continue;
        const ent *x = &c->w->e[e];
        if (g->val[e] <= -2) {
            g->val[e] = emit_load(g, -2 - g->val[e]);
        } else if (x->kind == OT_NODE_CONST) {
            ot_insn in = {.code = OT_I_PARAM, .arg = x->slot, .a = -1, .b = -1, .c = -1};
            g->val[e] = emit(g, in, (uint8_t)ot__kd((ot_dtype)x->dtype), true);
        } else if (kind_of(c, e) == OT_KIND_SHAPE) {
            g->val[e] = g->val[canon_operand(c, e, 0)];   /* transposed scalar */
        } else {
            g->val[e] = emit_op(g, e);
        }
    }
}

/* Emits the region of one root; returns its value. */
static int emit_region(prog *g, int root, bool root_computed, int *pinned)
{
    emit_roots(g, &root, 1, root, root_computed, pinned);
    return g->c->oom ? -1 : g->val[root];
}

static bool is_xresult(const prog *g, int v)
{
    for (int x = 0; x < g->k->nxstore; x++)
        if (g->xval[x] == v) return true;
    return false;
}

/* Linear scan: a value's buffer is free after its last use, so an insn may
 * write over an operand that dies there (kernels allow dst == operand). The
 * result, and each further output's value, gets a buffer of its own that
 * only its defining insn writes. */
static void allocate_buffers(prog *g, int result)
{
    int *free_list = ot__malloc(sizeof(int) * (size_t)(g->nv + 1));
    if (!free_list) {
        g->c->oom = true;
        return;
    }
    int nfree = 0, nbuf = 0;
    g->v[result].last_use = INT_MAX;
    for (int x = 0; x < g->k->nxstore; x++) g->v[g->xval[x]].last_use = INT_MAX;
    for (int i = 0; i < g->nins; i++) {
        ot_insn *in = &g->ins[i];
        int16_t *ops[3] = {&in->a, &in->b, &in->c};
        int dying[3], ndying = 0;
        for (int k = 0; k < 3; k++) {
            int v = *ops[k];
            if (v < 0) continue;
            *ops[k] = (int16_t)g->v[v].buf;
            bool dup = (k > 0 && *ops[0] == *ops[k]) || (k > 1 && *ops[1] == *ops[k]);
            if (g->v[v].last_use == i && !dup) dying[ndying++] = g->v[v].buf;
        }
        /* A cast that changes the element size cannot write over its operand. */
        bool resizes = in->code == OT_I_CAST &&
                       ot_dtype_size(ot__kd_dtype(in->kd)) != ot_dtype_size(ot__kd_dtype(in->kd_from));
        if (!resizes)
            for (int k = 0; k < ndying; k++) free_list[nfree++] = dying[k];
        int d = in->dst;
        bool own = d == result || is_xresult(g, d);
        int buf = own || nfree == 0 ? nbuf++ : free_list[--nfree];
        g->v[d].buf = buf;
        in->dst = (int16_t)buf;
        if (resizes)
            for (int k = 0; k < ndying; k++) free_list[nfree++] = dying[k];
        if (g->v[d].last_use < 0 && !own) free_list[nfree++] = buf;   /* dead value */
    }
    for (int x = 0; x < g->k->nxstore; x++) {
        g->k->xstores[x].result = g->v[g->xval[x]].buf;
        g->k->xstores[x].scalar = g->v[g->xval[x]].scalar;
    }
    g->k->nbuf = nbuf;
    g->k->result = g->v[result].buf;
    g->k->result_scalar = g->v[result].scalar;
    g->k->result_kd = g->v[result].kd;
    free(free_list);
}

/* Drops dims of size 1 and merges neighbours that every view walks as one,
 * never touching the pinned (reduced) dim, whose new index is returned
 * through *pinned. */
static bool coalesce(ot_kernel *k, int *pinned)
{
    int nv = k->nload + 1 + k->nxstore, pin = pinned ? *pinned : -1, newpin = -1, nd = 0;
    ot_view **views = ot__malloc(sizeof *views * (size_t)nv);
    if (!views) return false;
    for (int i = 0; i < k->nload; i++) views[i] = &k->loads[i];
    views[k->nload] = &k->store;
    for (int x = 0; x < k->nxstore; x++) views[k->nload + 1 + x] = &k->xstores[x].view;
    bool prev_pinned = false;
    for (int i = 0; i < k->ndim; i++) {
        bool is_pin = i == pin;
        if (k->dims[i] == 1 && !is_pin) continue;
        bool merge = nd > 0 && !is_pin && !prev_pinned;
        for (int v = 0; v < nv && merge; v++)
            merge = views[v]->strides[nd - 1] == views[v]->strides[i] * k->dims[i];
        if (merge) {
            k->dims[nd - 1] *= k->dims[i];
            for (int v = 0; v < nv; v++) views[v]->strides[nd - 1] = views[v]->strides[i];
            continue;
        }
        k->dims[nd] = k->dims[i];
        for (int v = 0; v < nv; v++) views[v]->strides[nd] = views[v]->strides[i];
        if (is_pin) newpin = nd;
        prev_pinned = is_pin;
        nd++;
    }
    k->ndim = nd;
    if (pinned) *pinned = newpin;
    free(views);
    return true;
}

/* ---- kernel builders ------------------------------------------------------ */

static bool finish_program(prog *g, int result)
{
    ot_kernel *k = g->k;
    if (g->c->oom || result < 0) return false;
    allocate_buffers(g, result);
    if (g->c->oom) return false;
    k->insns = ot__malloc(sizeof *k->insns * (size_t)(g->nins ? g->nins : 1));
    if (!k->insns) return false;
    memcpy(k->insns, g->ins, sizeof *k->insns * (size_t)g->nins);
    k->ninsn = g->nins;
    return true;
}

static void reset_prog(prog *g, ot_kernel *k)
{
    g->k = k;
    g->nv = g->nins = 0;
}

/* The value to store, as a freshly computed buffer in the store's dtype. */
static int store_value(prog *g, int v)
{
    if (v < 0) return v;
    v = cast_to(g, v, (uint8_t)ot__kd((ot_dtype)g->k->store.dtype));
    uint8_t code = g->ins[g->nins - 1].code;
    if (g->nins > 0 && g->ins[g->nins - 1].dst == v && code != OT_I_LOAD && code != OT_I_PARAM)
        return v;
    ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[v].kd, .a = (int16_t)use(g, v), .b = -1,
                  .c = -1, .scalar = g->v[v].scalar ? 1 : 0};
    return emit(g, in, g->v[v].kd, g->v[v].scalar);
}

static void set_space(ot_kernel *k, const int64_t *dims, int ndim)
{
    k->ndim = ndim;
    memcpy(k->dims, dims, sizeof(int64_t) * (size_t)ndim);
}

static void mark_layout(ot_kernel *k)
{
    int nd = k->ndim;
    k->direct_store = !k->result_scalar && nd > 0 && k->store.strides[nd - 1] == 1;
    for (int x = 0; x < k->nxstore; x++)
        k->xstores[x].direct = !k->xstores[x].scalar && nd > 0 && k->xstores[x].view.strides[nd - 1] == 1;
    for (int i = 0; i < k->nload && nd >= 2; i++) {
        int64_t s = k->loads[i].strides[nd - 1];
        if (s > 1 || s < -1) k->col_blocked = true;
    }
}

/* An elementwise kernel computing entry root (or copying a stored value)
 * over dims into the view store. */
static bool ew_kernel(compiler *c, prog *g, int root, bool computed, const ot_shape *space,
                      ot_view store)
{
    ot_kernel *k = new_kernel(c, OT_KER_EW);
    if (!k) return false;
    reset_prog(g, k);
    set_space(k, space->dims, space->ndim);
    k->store = store;
    int v = store_value(g, emit_region(g, root, computed, NULL));
    if (!finish_program(g, v)) return false;
    mark_layout(k);
    return true;
}

/* The destination of a reduction seen over its input's dims: the reduced
 * dims get stride 0. */
static ot_view reduce_store(const storage *dst, const ot_node *r, const ot_shape *in)
{
    ot_view v = {.space = dst->space, .dtype = dst->dtype, .index = dst->index};
    int axis = r->args.axis;
    for (int i = 0, j = 0; i < in->ndim; i++) {
        bool reduced = axis == OT_AXIS_ALL || axis == i;
        if (reduced && !r->args.keepdims) continue;
        v.strides[i] = reduced ? 0 : dst->strides[j];
        j++;
    }
    return v;
}

/* The reduction that computes stored value x itself and writes it out as a
 * further output (softmax's exp(x - max): stored once, summed in the same
 * pass), or -1. x must be an elementwise value stored for several readers,
 * not an output, read by exactly one reduction (built by reduce_kernel), and
 * by nothing else built before that reduction. */
static int absorbing_reduce(const compiler *c, int x)
{
    if (!c->fused || !is_ew(c, x) || !c->ci[x].mat || c->ci[x].canon != x) return -1;
    for (int i = 0; i < c->nout; i++)
        if (c->ci[c->w->root[i]].canon == x) return -1;
    int red = -1;
    for (int e = x + 1; e < c->w->n; e++) {
        if (c->ci[e].canon != e || !is_op(c, e)) continue;
        bool reads = canon_operand(c, e, 0) == x || canon_operand(c, e, 1) == x;
        if (!reads) continue;
        if (red >= 0) continue;   /* later readers load what the reduction stored */
        if (kind_of(c, e) != OT_KIND_REDUCE || !c->ci[e].mat || canon_operand(c, e, 0) != x) return -1;
        red = e;
    }
    return red;
}

static bool reduce_kernel(compiler *c, prog *g, int e, const storage *dst)
{
    const ot_node *r = node_of(c, e);
    int x = canon_operand(c, e, 0);
    const ot_shape *in = &node_of(c, x)->shape;
    ot_kernel *k = new_kernel(c, OT_KER_REDUCE);
    if (!k) return false;
    reset_prog(g, k);
    set_space(k, in->dims, in->ndim);
    k->store = reduce_store(dst, r, in);
    k->red_op = r->op;
    k->red_count = r->args.axis == OT_AXIS_ALL ? ot__numel(in) : in->dims[r->args.axis];
    int pin = r->args.axis == OT_AXIS_ALL ? -1 : r->args.axis;
    bool absorbs = absorbing_reduce(c, x) == e;
    if (absorbs) {
        if (!(k->xstores = ot__calloc(1, sizeof *k->xstores))) return false;
        k->nxstore = 1;
        k->xstores[0].view = view_of(&c->ci[x].st, in->ndim, in->dims);
    }
    bool computed = (is_ew(c, x) && !c->ci[x].mat) || absorbs;
    int v = emit_region(g, x, computed, r->args.axis == OT_AXIS_ALL ? NULL : &pin);
    k->red_axis = r->args.axis == OT_AXIS_ALL ? -1 : pin;
    if (absorbs) g->xval[0] = v;
    if (!finish_program(g, v)) return false;
    if (absorbs) {
        int nd = k->ndim;
        k->xstores[0].direct = !k->xstores[0].scalar && nd > 0 && k->xstores[0].view.strides[nd - 1] == 1;
    }
    return true;
}

/* A stored operand of a dot as a 2-D view plus a batch stride: 1-D a is a
 * row, 1-D b a column; a batch of 1 is shared (stride 0). */
static ot_view dot_operand(const storage *s, bool is_a)
{
    ot_view v = {.space = s->space, .dtype = s->dtype, .index = s->index};
    const int64_t *st = s->strides;
    switch (s->shape.ndim) {
    case 3:
        v.strides[0] = st[1];
        v.strides[1] = st[2];
        v.strides[2] = s->shape.dims[0] == 1 ? 0 : st[0];
        break;
    case 2:
        v.strides[0] = st[0];
        v.strides[1] = st[1];
        break;
    default:
        v.strides[is_a ? 1 : 0] = st[0];
        break;
    }
    return v;
}

/* The result of a dot (m x n per batch) in storage dst, as C's view. */
static ot_view dot_result(const storage *dst, const ot_node *d, int64_t m, int64_t n)
{
    ot_view v = {.space = dst->space, .dtype = dst->dtype, .index = dst->index};
    const int64_t *st = dst->strides;
    int nd = d->shape.ndim;
    if (d->op == OT_OP_BATCHED_DOT) {
        v.strides[0] = st[1];
        v.strides[1] = st[2];
        v.strides[2] = st[0];
    } else if (nd == 2) {
        v.strides[0] = st[0];
        v.strides[1] = st[1];
    } else if (nd == 1) {
        v.strides[m > 1 ? 0 : 1] = st[0];
    }
    if (m <= 1) v.strides[0] = n > 1 ? n : 1;   /* BLAS wants ldc >= n even then */
    if (n <= 1) v.strides[1] = 1;
    return v;
}

/* Whether BLAS can write a dot's result straight into storage dst. */
static bool blas_writable(const storage *dst, const ot_node *d)
{
    const ot_shape *s = &d->shape;
    int nd = s->ndim;
    if (nd == 0 || ot__numel(s) == 0) return true;
    int64_t n = s->dims[nd - 1], m = nd >= 2 ? s->dims[nd - 2] : 1;
    if (d->op == OT_OP_DOT && nd == 1) {   /* a column (m) or a row (n) */
        bool col = d->a->shape.ndim == 2;
        return col ? dst->strides[0] > 0 || s->dims[0] <= 1 : dst->strides[0] == 1 || s->dims[0] <= 1;
    }
    bool ok = (n <= 1 || dst->strides[nd - 1] == 1) && (m <= 1 || dst->strides[nd - 2] >= n);
    if (nd == 3 && s->dims[0] > 1) ok = ok && dst->strides[0] >= (m - 1) * dst->strides[1] + n;
    return ok;
}

static bool dot_kernel(compiler *c, int e, const storage *dst, ot_scale alpha, ot_scale beta)
{
    const ot_node *d = node_of(c, e);
    int a = canon_operand(c, e, 0), b = canon_operand(c, e, 1);
    const storage *sa = &c->ci[a].st, *sb = &c->ci[b].st;
    ot_kernel *k = new_kernel(c, OT_KER_DOT);
    if (!k || !(k->loads = ot__malloc(2 * sizeof *k->loads))) return false;
    k->nload = 2;
    k->loads[0] = dot_operand(sa, true);
    k->loads[1] = dot_operand(sb, false);
    int ra = sa->shape.ndim, rb = sb->shape.ndim;
    k->batch = d->op == OT_OP_BATCHED_DOT ? d->shape.dims[0] : 1;
    k->m = ra >= 2 ? sa->shape.dims[ra - 2] : 1;
    k->k = sa->shape.dims[ra - 1];
    k->n = rb >= 2 ? sb->shape.dims[rb - 1] : 1;
    k->alpha = alpha;
    k->beta = beta;
    k->store = dot_result(dst, d, k->m, k->n);
    k->shape = d->shape;
    return true;
}

static bool special_kernel(compiler *c, int e, const storage *dst)
{
    const ot_node *n = node_of(c, e);
    bool rand = n->op == OT_OP_RAND;
    ot_kernel *k = new_kernel(c, rand ? OT_KER_RAND : OT_KER_ONEHOT);
    if (!k) return false;
    k->store = (ot_view){.space = dst->space, .dtype = dst->dtype, .index = dst->index};
    k->shape = n->shape;
    k->seed = n->args.seed;
    k->depth = n->args.depth;
    k->axis = n->args.axis;
    if (rand) return true;
    const storage *in = &c->ci[canon_operand(c, e, 0)].st;
    if (!(k->loads = ot__malloc(sizeof *k->loads))) return false;
    k->nload = 1;
    k->loads[0] = (ot_view){.space = in->space, .dtype = in->dtype, .index = in->index};
    memcpy(k->loads[0].strides, in->strides, sizeof in->strides);
    k->ndim = in->shape.ndim;
    memcpy(k->dims, in->shape.dims, sizeof in->shape.dims);
    return true;
}

static bool entry_kernel(compiler *c, prog *g, int e, const storage *dst)
{
    switch (kind_of(c, e)) {
    case OT_KIND_REDUCE: return reduce_kernel(c, g, e, dst);
    case OT_KIND_DOT: return dot_kernel(c, e, dst, ONE, NONE);
    case OT_KIND_SPECIAL:
        if (c->w->e[e].op != OT_OP_CAST) return special_kernel(c, e, dst);
        break;   /* a cast is elementwise */
    default: break;
    }
    {
        ot_shape sh = node_of(c, e)->shape;
        return ew_kernel(c, g, e, true, &sh, view_of(dst, sh.ndim, sh.dims));
    }
}

/* ---- outputs and aliasing ------------------------------------------------- */

static bool same_strides(const ot_view *a, const ot_view *b, int nd)
{
    for (int i = 0; i < nd; i++)
        if (a->strides[i] != b->strides[i]) return false;
    return true;
}

/* Whether the last kernel, which writes output i, could read data it has
 * already overwritten. Only an elementwise kernel reading a leaf through
 * exactly the output's view may run in place; with several outputs, any
 * overlap goes through a temporary (every tree reads the old values). */
static bool needs_temp(const compiler *c, int i, const ot_kernel *k)
{
    if (!c->outs) return false;
    for (int j = 0; j < c->w->nleaf; j++) {
        int ov = ot__overlap(c->outs[i], c->w->leaf[j]);
        if (ov == OT_OVERLAP_NONE) continue;
        if (ov == OT_OVERLAP_PARTIAL || c->nout > 1 || k->kind != OT_KER_EW) return true;
        for (int l = 0; l < k->nload; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space == OT_SPACE_LEAF && v->index == j && !same_strides(v, &k->store, k->ndim))
                return true;
        }
    }
    return false;
}

static void drop_last_kernel(compiler *c)
{
    ot_kernel *k = &c->plan->kernels[--c->plan->nkernels];
    free(k->loads);
    free(k->xstores);
    free(k->insns);
    free(k->desc);
}

static ot_shape out_shape(const compiler *c, int i)
{
    return c->outs ? c->outs[i]->leaf.shape : c->trees[i]->shape;
}

/* Writes root r (canonical entry) into output i: computed in place by its
 * own kernel when it may be, else into a temporary copied out at the end. */
static storage out_storage(const compiler *c, int i)
{
    ot_shape osh = out_shape(c, i);
    storage out = {.has = true, .space = OT_SPACE_OUT, .index = i};
    ot_view ov = output_view(c, i, osh.ndim, osh.dims);
    out.dtype = ov.dtype;
    out.shape = osh;
    memcpy(out.strides, c->outs ? c->outs[i]->strides : ov.strides, sizeof out.strides);
    return out;
}

static bool root_kernel(compiler *c, prog *g, int i, int r, int *via_temp)
{
    ot_shape osh = out_shape(c, i);
    storage out = out_storage(c, i);
    const gemm_root *gr = &c->groot[i];
    if (gr->dot >= 0) return dot_kernel(c, gr->dot, &out, gr->alpha, gr->beta);
    bool reduce_direct = is_op(c, r) && kind_of(c, r) == OT_KIND_REDUCE && c->ci[r].uses == 1 &&
                         ot__shape_eq(&node_of(c, r)->shape, &osh);
    for (int attempt = 0; attempt < 2; attempt++) {
        storage dst = out;
        if (attempt == 1) {
            temp_storage(c, &dst, &osh, (ot_dtype)out.dtype);
            *via_temp = dst.index;
        }
        bool ok;
        if (reduce_direct) ok = reduce_kernel(c, g, r, &dst);
        else if (is_ew(c, r) && !c->ci[r].mat)
            ok = ew_kernel(c, g, r, true, &osh, view_of(&dst, osh.ndim, osh.dims));
        else
            ok = ew_kernel(c, g, r, false, &osh, view_of(&dst, osh.ndim, osh.dims));
        if (!ok) return false;
        if (attempt == 1 || !needs_temp(c, i, &c->plan->kernels[c->plan->nkernels - 1])) return true;
        drop_last_kernel(c);
    }
    return true;
}

/* Whether output i of an ot_assign_many may be written by a group kernel
 * (alone, or sharing it with outputs of its shape): its tree is computed
 * elementwise (not by a BLAS call writing the output: that dot then has no
 * storage a kernel could load) and the output overlaps no leaf but fully, so no store can
 * change what any tree reads; check_inplace_groups then breaks up groups
 * whose leaves other outputs read. Outputs never overlap each other (the
 * assignment checks it). */
static bool groupable(const compiler *c, int i)
{
    if (!c->outs || !c->fused || c->nout < 2 || c->groot[i].dot >= 0) return false;
    int r = c->ci[c->w->root[i]].canon;
    if (!is_ew(c, r) || c->ci[r].mat) return false;
    for (int j = 0; j < c->w->nleaf; j++)
        if (ot__overlap(c->outs[i], c->w->leaf[j]) == OT_OVERLAP_PARTIAL) return false;
    return true;
}

/* Whether output q's kernel reads leaf j itself: its root's elementwise
 * region (values not stored by kernels of their own, transposes of leaves
 * included) reaches the leaf. */
static bool region_reads(const compiler *c, int q, int j, int *stack)
{
    int n = 0, r = c->ci[c->w->root[q]].canon;
    stack[n++] = r;
    bool found = false;
    while (n > 0 && !found) {
        int e = stack[--n];
        const ent *x = &c->w->e[e];
        if (x->kind == OT_NODE_LEAF) found = x->slot == j;
        if (x->kind != OT_NODE_OP || (e != r && c->ci[e].mat)) continue;   /* a transpose is a view: go on */
        for (int k = 0; k < 2; k++)
            if (canon_operand(c, e, k) >= 0) stack[n++] = canon_operand(c, e, k);
    }
    return found;
}

/* An output written in place over a leaf (w = w - lr*g) may share a kernel
 * only with every output whose kernel reads that leaf: a later kernel would
 * read the new values. Such groups are broken up (their outputs then go
 * through temporaries). */
static void check_inplace_groups(const compiler *c, int *lead)
{
    int *stack = ot__malloc(sizeof(int) * (size_t)(2 * c->w->n + 1));
    if (!stack) {
        for (int i = 0; i < c->nout; i++) lead[i] = -1;
        return;
    }
    for (int i = 0; i < c->nout; i++) {
        if (lead[i] < 0) continue;
        for (int j = 0; j < c->w->nleaf; j++) {
            if (ot__overlap(c->outs[i], c->w->leaf[j]) != OT_OVERLAP_FULL) continue;
            bool ok = true;
            for (int q = 0; q < c->nout && ok; q++)
                ok = (lead[q] == lead[i] && lead[q] >= 0) || !region_reads(c, q, j, stack);
            if (ok) continue;
            int g = lead[i];
            for (int q = 0; q < c->nout; q++)
                if (lead[q] == g) lead[q] = -1;
            break;
        }
    }
    free(stack);
}

/* A store of a group may go straight into its output unless the output is
 * a leaf some instruction after it still reads: then the store waits for
 * the end of the tile. */
static bool store_in_place(const prog *g, int v, const ot_view *out)
{
    const compiler *c = g->c;
    for (int j = 0; j < c->w->nleaf; j++) {
        if (out->space != OT_SPACE_OUT || ot__overlap(c->outs[out->index], c->w->leaf[j]) == OT_OVERLAP_NONE)
            continue;
        for (int l = 0; l < g->nv; l++) {
            const ot_insn *in = &g->ins[l];
            const ot_view *lv = in->code == OT_I_LOAD ? &g->k->loads[in->arg] : NULL;
            if (lv && lv->space == OT_SPACE_LEAF && lv->index == j && g->v[l].last_use > v)
                return false;
        }
    }
    return true;
}

/* The value output x of a group stores: a value of its own that a
 * computing insn defines, since results get buffers (or output memory) of
 * their own; copied when it is a load, a constant or an earlier output's. */
static int own_value(prog *g, int v, const ot_view *view, const int *taken, int ntaken)
{
    v = cast_to(g, v, (uint8_t)ot__kd((ot_dtype)view->dtype));
    if (v < 0) return v;
    uint8_t code = g->ins[v].code;
    bool shared = false;
    for (int y = 0; y < ntaken; y++) shared = shared || taken[y] == v;
    if (code != OT_I_LOAD && code != OT_I_PARAM && !shared) return v;
    ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[v].kd, .a = (int16_t)use(g, v), .b = -1,
                  .c = -1, .scalar = g->v[v].scalar ? 1 : 0};
    return emit(g, in, g->v[v].kd, g->v[v].scalar);
}

/* One kernel computing the trees of outputs idx[0..n-1] (same shape) in one
 * pass: shared subtrees are computed once and every input is read once. */
/* Whether every load of a leaf that an output of kernel k overwrites walks
 * it as that output's store does (element for element): a transposed read
 * would see elements another tile already wrote. */
static bool loads_walk_outputs(const compiler *c, const ot_kernel *k)
{
    for (int x = -1; x < k->nxstore; x++) {
        const ot_view *o = x < 0 ? &k->store : &k->xstores[x].view;
        for (int l = 0; l < k->nload; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space == OT_SPACE_LEAF &&
                ot__overlap(c->outs[o->index], c->w->leaf[v->index]) != OT_OVERLAP_NONE &&
                !same_strides(v, o, k->ndim))
                return false;
        }
    }
    return true;
}

/* One kernel computing the trees of outputs idx[0..n-1]; *split is set
 * (and nothing built) when it could not run in place, and the caller
 * writes each output on its own. */
static bool group_kernel(compiler *c, prog *g, const int *idx, int n, bool *split)
{
    ot_shape osh = out_shape(c, idx[0]);
    ot_kernel *k = new_kernel(c, OT_KER_EW);
    if (!k || (n > 1 && !(k->xstores = ot__calloc((size_t)(n - 1), sizeof *k->xstores)))) return false;
    reset_prog(g, k);
    set_space(k, osh.dims, osh.ndim);
    k->store = output_view(c, idx[0], osh.ndim, osh.dims);
    k->nxstore = n - 1;
    int roots[1 + OT_MAX_XSTORES];
    for (int x = 0; x < n; x++) {
        roots[x] = c->ci[c->w->root[idx[x]]].canon;
        if (x > 0) k->xstores[x - 1].view = output_view(c, idx[x], osh.ndim, osh.dims);
    }
    emit_roots(g, roots, n, -1, true, NULL);
    int vals[1 + OT_MAX_XSTORES];
    for (int x = 0; x < n && !c->oom; x++) {
        const ot_view *view = x ? &k->xstores[x - 1].view : &k->store;
        vals[x] = own_value(g, g->val[roots[x]], view, vals, x);
        if (vals[x] < 0) return false;
        if (x) g->xval[x - 1] = vals[x];
    }
    bool in_place[1 + OT_MAX_XSTORES];
    for (int x = 0; x < n && !c->oom; x++)
        in_place[x] = store_in_place(g, vals[x], x ? &k->xstores[x - 1].view : &k->store);
    if (c->oom || !finish_program(g, vals[0])) return false;
    mark_layout(k);
    k->direct_store = k->direct_store && in_place[0];
    for (int x = 1; x < n; x++) k->xstores[x - 1].direct = k->xstores[x - 1].direct && in_place[x];
    *split = !loads_walk_outputs(c, k);
    if (*split) drop_last_kernel(c);
    return true;
}

/* Cuts the groupable outputs into groups of one shape (at most
 * 1 + OT_MAX_XSTORES each); lead[i] is output i's group leader, or -1. */
static void choose_groups(const compiler *c, int *lead)
{
    for (int i = 0; i < c->nout; i++) {
        lead[i] = -1;
        if (!groupable(c, i)) continue;
        ot_shape si = out_shape(c, i);
        for (int j = 0; j < i && lead[i] < 0; j++) {
            if (lead[j] != j) continue;
            ot_shape sj = out_shape(c, j);
            int members = 0;
            for (int m = 0; m < i; m++) members += lead[m] == j;
            if (ot__shape_eq(&si, &sj) && members <= OT_MAX_XSTORES) lead[i] = j;
        }
        if (lead[i] < 0) lead[i] = i;
    }
    check_inplace_groups(c, lead);
}

static bool copy_out(compiler *c, prog *g, int i, int temp)
{
    ot_shape osh = out_shape(c, i);
    ot_view dst = output_view(c, i, osh.ndim, osh.dims);
    storage src = {.has = true, .space = OT_SPACE_TEMP, .index = temp, .dtype = dst.dtype,
                   .shape = osh};
    contiguous(&src);
    ot_kernel *k = new_kernel(c, OT_KER_EW);
    if (!k || !(k->loads = ot__malloc(sizeof *k->loads))) return false;
    reset_prog(g, k);
    set_space(k, osh.dims, osh.ndim);
    k->nload = 1;
    k->loads[0] = view_of(&src, osh.ndim, osh.dims);
    k->store = dst;
    if (!coalesce(k, NULL)) return false;
    int v = store_value(g, emit_load(g, 0));
    if (!finish_program(g, v)) return false;
    mark_layout(k);
    return true;
}

/* ---- the plan ------------------------------------------------------------- */

static uint64_t view_bytes(const ot_kernel *k, const ot_view *v)
{
    uint64_t n = ot_dtype_size((ot_dtype)v->dtype);
    for (int i = 0; i < k->ndim; i++)
        if (v->strides[i]) n *= (uint64_t)k->dims[i];
    return n;
}

/* The arithmetic of one run of k, the same way fused or not: an op counts
 * once per element it computes (a scalar insn once), an fma as the mul and
 * add it replaces, a reduction one step per element reduced, a GEMM
 * 2*M*N*K. So a plan's count against the unfused plan's bounds what fusion
 * recomputes. */
static uint64_t count_ops(const ot_kernel *k)
{
    if (k->kind == OT_KER_DOT) return 2 * (uint64_t)k->m * (uint64_t)k->n * (uint64_t)k->k * (uint64_t)k->batch;
    if (k->kind == OT_KER_RAND || k->kind == OT_KER_ONEHOT) return (uint64_t)ot__numel(&k->shape);
    uint64_t elems = 1, ops = 0;
    for (int i = 0; i < k->ndim; i++) elems *= (uint64_t)k->dims[i];
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        uint64_t n = (in->scalar & 8) ? (elems != 0) : elems;   /* once, if it runs at all */
        if (in->code == OT_I_UNARY || in->code == OT_I_BINARY) ops += n;
        else if (in->code == OT_I_FMA) ops += 2 * n;
        else if (in->code == OT_I_CAST && in->kd != in->kd_from) ops += n;
    }
    return k->kind == OT_KER_REDUCE ? ops + elems : ops;
}

static void count_work(ot_plan *p, const ot_kernel *k)
{
    p->elem_ops += count_ops(k);
    if (k->kind == OT_KER_DOT) {
        size_t es = ot_dtype_size((ot_dtype)k->store.dtype);
        p->bytes_read += (uint64_t)(k->m * k->k + k->k * k->n) * es;
        p->bytes_written += (uint64_t)(k->m * k->n) * es;
        return;
    }
    for (int i = 0; i < k->nload; i++)
        if (k->loads[i].space == OT_SPACE_LEAF) p->bytes_read += view_bytes(k, &k->loads[i]);
    if (k->store.space == OT_SPACE_OUT) p->bytes_written += view_bytes(k, &k->store);
    for (int x = 0; x < k->nxstore; x++) p->bytes_written += view_bytes(k, &k->xstores[x].view);
}

static const char *space_name(int s) { return s == OT_SPACE_LEAF ? "leaf" : s == OT_SPACE_TEMP ? "t" : "out"; }

/* A one-line summary of what a kernel fuses, for ot_explain. */
static char *describe(const ot_kernel *k)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    static const char *kinds[] = {"elementwise", "reduce", "dot", "rand", "onehot"};
    fprintf(f, "%s", kinds[k->kind]);
    if (k->kind == OT_KER_DOT) {
        const char *blas = k->n == 1 || k->m == 1 ? "gemv" : "gemm";
        if (k->batch != 1) fprintf(f, " %lld x", (long long)k->batch);
        fprintf(f, " %lldx%lld . %lldx%lld (%s%s%s) <- %s%d %s%d -> %s%d", (long long)k->m,
                (long long)k->k, (long long)k->k, (long long)k->n, blas,
                k->alpha.param >= 0 || k->alpha.mul != 1 ? ", alpha" : "",
                k->beta.mul != 0 ? ", beta: accumulates" : "", space_name(k->loads[0].space),
                k->loads[0].index, space_name(k->loads[1].space), k->loads[1].index,
                space_name(k->store.space), k->store.index);
        fclose(f);
        return buf;
    }
    if (k->kind == OT_KER_REDUCE)
        fprintf(f, " %s over %s", ot_op_name((ot_op)k->red_op),
                k->red_axis < 0 ? "all" : "one axis");
    fprintf(f, " [");
    for (int i = 0; i < k->ndim; i++) fprintf(f, i ? "x%lld" : "%lld", (long long)k->dims[i]);
    fprintf(f, "]:");
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code == OT_I_UNARY || in->code == OT_I_BINARY)
            fprintf(f, " %s", ot_op_name((ot_op)in->op));
        else if (in->code == OT_I_FMA) fprintf(f, in->op == OT_OP_SUB ? " fnma" : " fma");
        else if (in->code == OT_I_CAST && in->kd != in->kd_from) fprintf(f, " cast");
    }
    fprintf(f, " <-");
    for (int i = 0; i < k->nload; i++)
        fprintf(f, " %s%d", space_name(k->loads[i].space), k->loads[i].index);
    fprintf(f, " -> %s%d%s", space_name(k->store.space), k->store.index,
            k->direct_store ? " (direct)" : "");
    for (int x = 0; x < k->nxstore; x++)
        fprintf(f, ", %s%d%s", space_name(k->xstores[x].view.space), k->xstores[x].view.index,
                k->xstores[x].direct ? " (direct)" : "");
    fprintf(f, "%s", k->col_blocked ? " (column blocks)" : "");
    fclose(f);
    return buf;
}

void ot__plan_release(ot_plan *p)
{
    if (!p || atomic_fetch_sub(&p->refs, 1) != 1) return;
    for (int i = 0; i < p->nkernels; i++) {
        free(p->kernels[i].loads);
        free(p->kernels[i].xstores);
        free(p->kernels[i].insns);
        free(p->kernels[i].desc);
        ot__jit_free(p->kernels[i].jit);
    }
    ot__jit_unmap(&p->jit);
    free(p->kernels);
    free(p->segs);
    free(p->temp_offset);
    free(atomic_load(&p->arena));
    free(p);
}

/* Kernel i's place in a segment: 1 the epilogue, 2 a reduction joining it,
 * 0 neither; *dot is the segment's dot. */
static int segment_role(const ot_plan *p, int i, int *dot)
{
    for (int s = 0; p->row_block <= 0 && s < p->nseg; s++)
        if (i > p->segs[s].first && i < p->segs[s].first + p->segs[s].count) {
            *dot = p->segs[s].first;
            return i - p->segs[s].first;
        }
    return 0;
}

/* The dot kernel whose result kernel i reads, or -1. */
static int dot_read(const ot_plan *p, int i)
{
    const ot_kernel *k = &p->kernels[i];
    for (int l = 0; l < k->nload && k->kind != OT_KER_DOT; l++)
        for (int w = 0; w < i; w++) {
            const ot_kernel *d = &p->kernels[w];
            if (d->kind == OT_KER_DOT && d->store.space == OT_SPACE_TEMP &&
                k->loads[l].space == OT_SPACE_TEMP && k->loads[l].index == d->store.index)
                return w;
        }
    return -1;
}

int ot__plan_explain(const ot_plan *p, FILE *f)
{
    fprintf(f, "plan: %d kernel%s, %d temporar%s (%zu bytes), reads %llu bytes, writes %llu bytes\n",
            p->nkernels, p->nkernels == 1 ? "" : "s", p->ntemps, p->ntemps == 1 ? "y" : "ies",
            p->arena_bytes, (unsigned long long)p->bytes_read,
            (unsigned long long)p->bytes_written);
    if (p->row_serial)
        fprintf(f, "  dot epilogues: all kernels run per block of %lld of %lld rows, in order\n",
                (long long)p->row_block, (long long)p->rows);
    else if (p->row_block > 0)
        fprintf(f, "  all kernels run per block of %lld rows\n", (long long)p->row_block);
    for (int s = 0; p->row_block <= 0 && s < p->nseg; s++)
        fprintf(f, "  dot epilogue: kernels %d-%d run per block of %lld of %lld rows, in order\n",
                p->segs[s].first, p->segs[s].first + p->segs[s].count - 1,
                (long long)p->segs[s].row_block, (long long)p->segs[s].rows);
    for (int i = 0; i < p->nkernels; i++) {
        int seg_dot = -1, role = segment_role(p, i, &seg_dot);
        int from = role == 1 ? seg_dot : p->row_serial ? dot_read(p, i) : -1;
        fprintf(f, "  kernel %d: %s", i, p->kernels[i].desc ? p->kernels[i].desc : "?");
        if (from >= 0) fprintf(f, " (epilogue of kernel %d, on its rows in cache)", from);
        if (role == 2) fprintf(f, " (bsum of kernel %d's result, in cache)", i - 1);
        if (p->kernels[i].jit)
            fputs(p->kernels[i].jit->fn_stream ? " (generated code, streaming stores)"
                                               : " (generated code)", f);
        fputc('\n', f);
    }
    return ferror(f) ? OT_EIO : 0;
}

typedef struct block { size_t off, size; } block;

/* First fit over free blocks, else the end of the arena. */
static size_t arena_take(block *free_blocks, int *nfree, size_t size, size_t *end)
{
    for (int i = 0; i < *nfree; i++) {
        if (free_blocks[i].size < size) continue;
        size_t off = free_blocks[i].off;
        free_blocks[i].off += size;
        free_blocks[i].size -= size;
        if (free_blocks[i].size == 0) free_blocks[i] = free_blocks[--*nfree];
        return off;
    }
    size_t off = *end;
    *end += size;
    return off;
}

/* Gives each temporary an arena offset: it lives from the kernel that
 * writes it to the last kernel that reads it, and its memory is reused
 * afterwards, so a long unfused chain needs a few buffers, not one per node. */
static bool layout_arena(ot_plan *p)
{
    int nt = p->ntemps, nk = p->nkernels;
    if (nt == 0) return true;
    /* Per temp: its size, the kernel defining it, the last kernel reading
     * it; per kernel: lists of the temps born and dying there. */
    int *def = ot__malloc(sizeof(int) * (size_t)nt * 4), *last = def + nt;
    int *next_born = def + 2 * (size_t)nt, *next_dead = def + 3 * (size_t)nt;
    int *born = ot__malloc(sizeof(int) * (size_t)(nk + 1) * 2), *dead = born + nk + 1;
    size_t *size = ot__malloc(sizeof(size_t) * (size_t)nt);
    block *fb = ot__malloc(sizeof *fb * (size_t)nt);
    bool ok = def && born && size && fb;
    for (int t = 0; ok && t < nt; t++) {
        def[t] = last[t] = -1;
        size[t] = p->temp_offset[t];
    }
    for (int k = 0; ok && k <= nk; k++) born[k] = dead[k] = -1;
    for (int k = 0; ok && k < nk; k++) {
        const ot_kernel *kk = &p->kernels[k];
        if (kk->store.space == OT_SPACE_TEMP && def[kk->store.index] < 0) def[kk->store.index] = k;
        for (int x = 0; x < kk->nxstore; x++) {
            const ot_view *xv = &kk->xstores[x].view;
            if (xv->space == OT_SPACE_TEMP && def[xv->index] < 0) def[xv->index] = k;
        }
        for (int l = 0; l < kk->nload; l++)
            if (kk->loads[l].space == OT_SPACE_TEMP) last[kk->loads[l].index] = k;
    }
    for (int t = 0; ok && t < nt; t++) {
        int b = def[t] < 0 ? 0 : def[t], d = last[t] < b ? b : last[t];
        next_born[t] = born[b];
        born[b] = t;
        next_dead[t] = dead[d];
        dead[d] = t;
    }
    int nfree = 0;
    size_t end = 0;
    for (int k = 0; ok && k < nk; k++) {
        for (int t = born[k]; t >= 0; t = next_born[t])
            p->temp_offset[t] = arena_take(fb, &nfree, size[t], &end);
        for (int t = dead[k]; t >= 0; t = next_dead[t]) fb[nfree++] = (block){p->temp_offset[t], size[t]};
    }
    if (ok) p->arena_bytes = end;
    free(def);
    free(born);
    free(size);
    free(fb);
    return ok;
}

static bool build_kernels(compiler *c)
{
    prog g = {.c = c};
    int n = c->w->n;
    g.val = ot__malloc(sizeof(int) * (size_t)n);
    g.stamp = ot__calloc((size_t)n, sizeof(int));
    g.fused = ot__calloc((size_t)n, sizeof(int));
    int *via = ot__malloc(sizeof(int) * (size_t)c->nout);
    int *lead = ot__malloc(sizeof(int) * (size_t)c->nout);
    bool ok = g.val && g.stamp && g.fused && via && lead;
    if (ok) choose_groups(c, lead);
    for (int i = 0; i < n && ok; i++) {
        if (c->ci[i].canon == i && c->ci[i].mat && is_op(c, i) && kind_of(c, i) != OT_KIND_SHAPE &&
            absorbing_reduce(c, i) < 0)
            ok = entry_kernel(c, &g, i, &c->ci[i].st);
    }
    for (int i = 0; i < c->nout && ok; i++) via[i] = -1;
    for (int i = 0; i < c->nout && ok; i++) {
        if (lead[i] < 0) {
            ok = root_kernel(c, &g, i, c->ci[c->w->root[i]].canon, &via[i]);
        } else if (lead[i] == i) {
            int idx[1 + OT_MAX_XSTORES] = {0}, n = 0;
            for (int j = i; j < c->nout; j++)
                if (lead[j] == i) idx[n++] = j;
            bool split = false;
            ok = group_kernel(c, &g, idx, n, &split);
            for (int m = 0; m < n && ok && split; m++)
                ok = root_kernel(c, &g, idx[m], c->ci[c->w->root[idx[m]]].canon, &via[idx[m]]);
        }
    }
    for (int i = 0; i < c->nout && ok; i++)
        if (via[i] >= 0) ok = copy_out(c, &g, i, via[i]);
    for (int i = 0; i < c->plan->nkernels && ok; i++) {
        ot_kernel *k = &c->plan->kernels[i];
        count_work(c->plan, k);
        k->desc = describe(k);
    }
    free(g.val);
    free(g.stamp);
    free(g.fused);
    free(g.v);
    free(g.ins);
    free(g.region);
    free(g.dfs);
    free(via);
    free(lead);
    return ok && !c->oom;
}

#define ROW_BLOCK_BYTES 65536   /* a block's rows stay in L2 between kernels */
#define GEMM_BLOCK_BYTES (1 << 20) /* a GEMM block's result stays in cache */
#define GEMM_BLOCK_ROWS 256     /* fewer rows per GEMM call repack B too often */

/* Rows per GEMM block: the result block stays in cache, but each call
 * repacks B, so not fewer than GEMM_BLOCK_ROWS; one block when two would do. */
static int64_t gemm_block(int64_t rows, int64_t row_bytes)
{
    int64_t blk = row_bytes > 0 ? GEMM_BLOCK_BYTES / row_bytes : rows;
    if (blk < GEMM_BLOCK_ROWS) blk = GEMM_BLOCK_ROWS;
    if (rows <= 2 * blk) return rows;
    int64_t nblocks = (rows + blk - 1) / blk;   /* equal blocks: no thin last call */
    return (rows + nblocks - 1) / nblocks;
}

/* The rows a kernel walks (dim 0, a dot's rows), or -1. */
static int64_t kernel_rows(const ot_kernel *k)
{
    if (k->kind == OT_KER_DOT) return k->batch == 1 ? k->m : -1;
    return k->ndim >= 1 ? k->dims[0] : -1;
}

/* Whether a kernel walks the plan's rows the way a row-blocked plan needs:
 * dim 0 is the rows or, for an elementwise kernel coalesced to one dim,
 * whole rows of elements. A dot's B must be whole before the first block. */
static bool walks_rows(const ot_kernel *k, int64_t rows, bool dots)
{
    int64_t kr = kernel_rows(k);
    if (k->kind == OT_KER_DOT) return kr == rows && k->loads[1].space != OT_SPACE_TEMP;
    if (k->kind == OT_KER_EW && dots && k->ndim == 1) return kr > 0 && kr % rows == 0;
    if (k->ndim < 2 || kr != rows) return false;
    if (k->kind == OT_KER_EW) return true;
    return k->kind == OT_KER_REDUCE && k->red_axis >= 1;
}

/* A view's step from one plan row to the next. */
static int64_t row_step(const ot_kernel *k, const ot_view *v, int64_t rows)
{
    return v->strides[0] * (kernel_rows(k) / rows);
}

/* Row blocking is safe when every kernel walks the same rows, each
 * temporary is read at the rows its writer wrote, and no output overlaps a
 * leaf (a later block would read what an earlier one wrote). Plans with a
 * dot run their blocks in order, each kernel on every thread: the dot's
 * elementwise readers are then epilogues on its rows while they are in
 * cache. */
static void choose_row_blocks(compiler *c)
{
    ot_plan *p = c->plan;
    if (p->nkernels < 2 || !c->fused) return;
    bool dots = false;
    for (int i = 0; i < p->nkernels; i++) dots |= p->kernels[i].kind == OT_KER_DOT;
    int64_t rows = kernel_rows(&p->kernels[0]), row_bytes = 0;
    /* Per temp: its row step as written (0: not written yet). */
    int64_t *written = ot__calloc((size_t)(p->ntemps ? p->ntemps : 1), sizeof *written);
    if (!written) return;
    bool ok = rows > 1;
    for (int i = 0; i < p->nkernels && ok; i++) {
        const ot_kernel *k = &p->kernels[i];
        ok = walks_rows(k, rows, dots);
        for (int l = 0; l < k->nload && ok; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space != OT_SPACE_TEMP || (k->kind == OT_KER_DOT && l == 1)) continue;
            ok = written[v->index] != 0 && written[v->index] == row_step(k, v, rows);
        }
        for (int x = -1; ok && x < k->nxstore; x++) {
            const ot_view *o = x < 0 ? &k->store : &k->xstores[x].view;
            int64_t step = row_step(k, o, rows);
            if (o->space == OT_SPACE_TEMP) written[o->index] = step ? step : -1;
        }
        int64_t b = k->kind == OT_KER_DOT ? k->n * 8 : 8;
        for (int d = 1; d < k->ndim; d++) b *= k->dims[d];
        if (k->kind != OT_KER_DOT) b *= kernel_rows(k) / rows;
        if (b > row_bytes) row_bytes = b;
    }
    for (int i = 0; ok && c->outs && i < c->nout; i++)
        for (int j = 0; j < c->w->nleaf && ok; j++)
            ok = ot__overlap(c->outs[i], c->w->leaf[j]) == OT_OVERLAP_NONE;
    free(written);
    if (!ok || row_bytes <= 0) return;
    p->rows = rows;
    if (!dots) {
        p->row_block = row_bytes >= ROW_BLOCK_BYTES ? 1 : ROW_BLOCK_BYTES / row_bytes;
        return;
    }
    p->row_block = gemm_block(rows, row_bytes);
    p->row_serial = true;
}

/* ---- dot epilogues in plans that are not row-blocked as a whole ----------- */

/* The only kernel reading temp t, or -1 (none, or more than one). */
static int sole_reader(const ot_plan *p, int t)
{
    int reader = -1;
    for (int i = 0; i < p->nkernels; i++)
        for (int l = 0; l < p->kernels[i].nload; l++) {
            const ot_view *v = &p->kernels[i].loads[l];
            if (v->space != OT_SPACE_TEMP || v->index != t) continue;
            if (reader >= 0 && reader != i) return -1;
            reader = i;
        }
    return reader;
}

/* Whether view v (a load) may see what kernel k writes to outputs. */
static bool reads_written(const compiler *c, const ot_view *v, const ot_kernel *k)
{
    if (!c->outs || v->space != OT_SPACE_LEAF) return false;
    const ot_tensor *leaf = c->w->leaf[v->index];
    for (int x = -1; x < k->nxstore; x++) {
        const ot_view *o = x < 0 ? &k->store : &k->xstores[x].view;
        if (o->space == OT_SPACE_OUT && ot__overlap(c->outs[o->index], leaf) != OT_OVERLAP_NONE)
            return true;
    }
    return false;
}

static bool kernels_conflict(const compiler *c, const ot_kernel *reader, const ot_kernel *writer)
{
    for (int l = 0; l < reader->nload; l++)
        if (reads_written(c, &reader->loads[l], writer)) return true;
    return false;
}

/* Whether kernel e, the only reader of dot d's result, may run right after
 * d, per block of d's rows: it walks those rows, its other inputs exist
 * before d, and moving it past the kernels between them changes nothing
 * they read or write. */
static bool epilogue_fits(const compiler *c, int d, int e)
{
    const ot_plan *p = c->plan;
    const ot_kernel *dk = &p->kernels[d], *ek = &p->kernels[e];
    if (ek->kind != OT_KER_EW || !walks_rows(ek, dk->m, true)) return false;
    if (kernels_conflict(c, dk, ek)) return false;
    for (int l = 0; l < ek->nload; l++) {
        const ot_view *v = &ek->loads[l];
        if (v->space != OT_SPACE_TEMP) continue;
        if (v->index == dk->store.index) {
            if (row_step(ek, v, dk->m) != dk->store.strides[0]) return false;
            continue;
        }
        for (int k = d; k < e; k++)
            if (p->kernels[k].store.space == OT_SPACE_TEMP && p->kernels[k].store.index == v->index)
                return false;
    }
    for (int k = d + 1; k < e; k++)
        if (kernels_conflict(c, &p->kernels[k], ek) || kernels_conflict(c, ek, &p->kernels[k]))
            return false;
    return true;
}

/* A segment of dot `first` and its epilogue. With several blocks, the dot's
 * result shrinks to one block that every block reuses (still in cache when
 * the next block's GEMM writes it); its size is set before the arena's
 * layout. */
static bool add_segment(compiler *c, int first, int64_t rows, int64_t row_bytes)
{
    ot_plan *p = c->plan;
    ot_segment *s = ot__realloc(p->segs, sizeof *s * (size_t)(p->nseg + 1));
    if (!s) return false;
    p->segs = s;
    const ot_kernel *d = &p->kernels[first];
    int64_t blk = gemm_block(rows, row_bytes);
    int t = blk < rows ? d->store.index : -1;
    if (t >= 0) {
        size_t bytes = (size_t)(blk * d->store.strides[0]) * ot_dtype_size((ot_dtype)d->store.dtype);
        p->temp_offset[t] = (bytes + 63) & ~(size_t)63;
    }
    s[p->nseg++] = (ot_segment){first, 2, rows, blk, t};
    return true;
}

/* Moves kernel `from` to position `to` (< from), shifting the ones between. */
static void move_kernel(ot_plan *p, int from, int to)
{
    ot_kernel moved = p->kernels[from];
    memmove(&p->kernels[to + 1], &p->kernels[to], sizeof moved * (size_t)(from - to));
    p->kernels[to] = moved;
}

/* The kernel writing temp t (as its result or a further output), or -1. */
static int temp_writer(const ot_plan *p, int t)
{
    for (int k = 0; k < p->nkernels; k++) {
        const ot_kernel *kk = &p->kernels[k];
        for (int x = -1; x < kk->nxstore; x++) {
            const ot_view *o = x < 0 ? &kk->store : &kk->xstores[x].view;
            if (o->space == OT_SPACE_TEMP && o->index == t) return k;
        }
    }
    return -1;
}

/* A reduction of the epilogue's result that may join segment sg right after
 * it, while that result is in cache (neon's bsum: a bias gradient's sum over
 * the rows): its other inputs exist before the dot, moving it earlier
 * changes nothing the kernels it passes read or write, and it either walks
 * the rows the epilogue wrote or the segment is one block (a sum down the
 * rows needs every row; exec.c runs a one-block segment unsliced). The
 * first such kernel, or -1. */
static int bsum_of(const compiler *c, const ot_segment *sg)
{
    const ot_plan *p = c->plan;
    int d = sg->first;
    const ot_kernel *ek = &p->kernels[d + 1];
    if (ek->store.space != OT_SPACE_TEMP) return -1;
    bool one_block = sg->row_block >= sg->rows;
    for (int r = d + 2; r < p->nkernels; r++) {
        const ot_kernel *rk = &p->kernels[r];
        bool reads = false, ok = rk->kind == OT_KER_REDUCE &&
                                 (one_block || walks_rows(rk, sg->rows, true));
        for (int l = 0; l < rk->nload && ok; l++) {
            const ot_view *v = &rk->loads[l];
            if (v->space != OT_SPACE_TEMP) continue;
            /* Per block it must read the rows the epilogue wrote, not the
             * same count of rows of a transpose (a square result). */
            if (v->index == ek->store.index) {
                reads = true;
                ok = one_block || row_step(rk, v, sg->rows) == row_step(ek, &ek->store, sg->rows);
            } else {
                ok = temp_writer(p, v->index) < d;
            }
        }
        for (int k = d + 2; k < r && ok && reads; k++)
            ok = !kernels_conflict(c, &p->kernels[k], rk) && !kernels_conflict(c, rk, &p->kernels[k]);
        if (ok && reads) return r;
    }
    return -1;
}

/* Pairs each dot with the elementwise kernel that alone reads its result
 * (moved right after it), so that kernel runs as an epilogue on blocks of
 * the dot's rows. Runs before the arena is laid out: it reorders kernels. */
static bool choose_dot_segments(compiler *c)
{
    ot_plan *p = c->plan;
    for (int d = 0; c->fused && d + 1 < p->nkernels; d++) {
        const ot_kernel *dk = &p->kernels[d];
        if (dk->kind != OT_KER_DOT || dk->batch != 1 || dk->m < 2 || dk->store.space != OT_SPACE_TEMP)
            continue;
        int e = sole_reader(p, dk->store.index);
        if (e <= d || !epilogue_fits(c, d, e)) continue;
        move_kernel(p, e, d + 1);
        const ot_kernel *ek = &p->kernels[d + 1];
        int64_t row_bytes = 8 * dk->n;
        for (int i = 1; i < ek->ndim; i++) row_bytes = row_bytes > 8 * ek->dims[i] ? row_bytes : 8 * ek->dims[i];
        if (!add_segment(c, d, dk->m, row_bytes)) return false;
        ot_segment *sg = &p->segs[p->nseg - 1];
        int r = bsum_of(c, sg);
        if (r >= 0) {
            move_kernel(p, r, d + 2);
            sg->count = 3;
        }
        d += sg->count - 1;
    }
    return true;
}

/* ---- temporaries kept in the output ---------------------------------------- */

static bool out_alone(const compiler *c, int i, int own);
static char *describe(const ot_kernel *k);

/* Whether a view's strides are the contiguous ones of shape (dims, nd). */
static bool contiguous_view(const int64_t *strides, const ot_shape *sh)
{
    int64_t st = 1;
    for (int d = sh->ndim - 1; d >= 0; d--) {
        if (sh->dims[d] != 1 && strides[d] != st) return false;
        st *= sh->dims[d];
    }
    return true;
}

/* Every view of temp t becomes output i's (same layout: both contiguous). */
static void retarget_temp(ot_plan *p, int t, int i)
{
    for (int k = 0; k < p->nkernels; k++) {
        ot_kernel *kk = &p->kernels[k];
        for (int v = -1 - kk->nxstore; v < kk->nload; v++) {
            ot_view *w = v >= 0 ? &kk->loads[v] : v == -1 ? &kk->store : &kk->xstores[-2 - v].view;
            if (w->space == OT_SPACE_TEMP && w->index == t) {
                w->space = OT_SPACE_OUT;
                w->index = i;
                free(kk->desc);
                kk->desc = describe(kk);
            }
        }
    }
    p->temp_offset[t] = 0;   /* no arena bytes */
}

/* A temporary that only the kernel writing output i reads, element for
 * element, is kept in the output itself (as a hand-written softmax keeps
 * exp in its output and divides in place): one buffer fewer to stream
 * through memory. Both must be contiguous, of one shape and dtype, and the
 * output must overlap no leaf. */
/* Whether every load of temp t in kernel k reads it element for element with
 * k's store: a transposed or broadcast read of a temp kept in the output
 * would see elements the kernel has already overwritten. */
static bool reads_aligned(const ot_kernel *k, int t)
{
    for (int l = 0; l < k->nload; l++) {
        const ot_view *v = &k->loads[l];
        if (v->space == OT_SPACE_TEMP && v->index == t && !same_strides(v, &k->store, k->ndim))
            return false;
    }
    return true;
}

static void temps_into_outputs(compiler *c)
{
    ot_plan *p = c->plan;
    if (!c->fused) return;
    for (int k = 0; k < p->nkernels; k++) {
        const ot_kernel *kk = &p->kernels[k];
        if (kk->kind != OT_KER_EW || kk->store.space != OT_SPACE_OUT || kk->nxstore) continue;
        int i = kk->store.index;
        ot_shape osh = out_shape(c, i);
        if (c->outs && (!contiguous_view(c->outs[i]->strides, &osh) || !out_alone(c, i, -1))) continue;
        for (int l = 0; l < kk->nload; l++) {
            const ot_view *v = &kk->loads[l];
            if (v->space != OT_SPACE_TEMP || !same_strides(v, &kk->store, kk->ndim) ||
                v->dtype != kk->store.dtype || sole_reader(p, v->index) != k ||
                !reads_aligned(kk, v->index))
                continue;
            int w = temp_writer(p, v->index);
            const ot_kernel *wk = w >= 0 ? &p->kernels[w] : NULL;
            bool by_xstore = wk && wk->store.index != v->index;
            size_t bytes = (size_t)ot__numel(&osh) * ot_dtype_size((ot_dtype)v->dtype);
            if (!wk || wk->kind == OT_KER_DOT || (!by_xstore && wk->store.space != OT_SPACE_TEMP) ||
                p->temp_offset[v->index] != ((bytes + 63) & ~(size_t)63))
                continue;
            retarget_temp(p, v->index, i);
            break;
        }
    }
}

/* ---- dots written by BLAS into their output ------------------------------ */

/* e as x * scale: a product with a nonzero constant, a negation, or x. */
static int scaled(const compiler *c, int e, ot_scale *scale)
{
    *scale = ONE;
    const ent *x = &c->w->e[e];
    if (x->kind != OT_NODE_OP) return e;
    if (x->op == OT_OP_NEG) {
        scale->mul = -1;
        return canon_operand(c, e, 0);
    }
    if (x->op != OT_OP_MUL) return e;
    for (int side = 0; side < 2; side++) {
        const ent *k = &c->w->e[canon_operand(c, e, side)];
        if (k->kind == OT_NODE_CONST && !k->zero) {
            scale->param = k->slot;
            return canon_operand(c, e, 1 - side);
        }
    }
    return e;
}

/* A dot only output i reads, with the output's shape and dtype; s is the
 * entry scaling it (s == e when none). BLAS writes alpha*dot into the output
 * and no storage holds the dot or the scaled value, so neither may have
 * another reader (a transpose, another output's kernel) nor a kernel of its
 * own: each is read once, by the output. */
static bool dot_for(const compiler *c, int i, int e, int s)
{
    ot_shape osh = out_shape(c, i);
    const ot_node *d = node_of(c, e);
    return is_op(c, e) && kind_of(c, e) == OT_KIND_DOT && c->ci[e].uses == 1 &&
           c->ci[s].uses == 1 && (s == e || !c->ci[s].mat) && ot__shape_eq(&d->shape, &osh) &&
           d->dtype == c->outs[i]->leaf.dtype;
}

/* The output itself, read as a leaf (the same view). */
static bool is_out_leaf(const compiler *c, int i, int e)
{
    const ent *x = &c->w->e[e];
    return x->kind == OT_NODE_LEAF && c->ci[e].uses == 1 &&
           ot__overlap(c->outs[i], c->w->leaf[x->slot]) == OT_OVERLAP_FULL;
}

/* Whether output i overlaps no leaf but, optionally, the leaf `own`. */
static bool out_alone(const compiler *c, int i, int own)
{
    for (int j = 0; j < c->w->nleaf; j++)
        if (j != own && ot__overlap(c->outs[i], c->w->leaf[j]) != OT_OVERLAP_NONE) return false;
    return true;
}

static bool match_compound(const compiler *c, int i, int r, gemm_root *g)
{
    const ent *x = &c->w->e[r];
    if (c->nout != 1 || x->kind != OT_NODE_OP || (x->op != OT_OP_ADD && x->op != OT_OP_SUB) ||
        node_of(c, r)->dtype != c->outs[i]->leaf.dtype)
        return false;
    ot_scale s[2];
    int o[2] = {canon_operand(c, r, 0), canon_operand(c, r, 1)};
    int t[2] = {scaled(c, o[0], &s[0]), scaled(c, o[1], &s[1])};
    if (x->op == OT_OP_SUB) s[1].mul = -s[1].mul;
    for (int d = 0; d < 2; d++) {
        if (!dot_for(c, i, t[d], o[d]) || !is_out_leaf(c, i, t[1 - d])) continue;
        if (!out_alone(c, i, c->w->e[t[1 - d]].slot)) return false;
        *g = (gemm_root){t[d], s[d], s[1 - d]};
        return true;
    }
    return false;
}

static bool match_gemm_root(const compiler *c, int i, gemm_root *g)
{
    int r = c->ci[c->w->root[i]].canon;
    *g = (gemm_root){-1, ONE, NONE};
    if (!c->outs || !c->fused) return false;
    if (match_compound(c, i, r, g)) return true;
    ot_scale alpha;
    int d = scaled(c, r, &alpha);
    if (!dot_for(c, i, d, r) || !out_alone(c, i, -1)) return false;
    *g = (gemm_root){d, alpha, NONE};
    return true;
}

/* Reductions and dots written straight into their output need no
 * temporary. */
static void mark_direct_roots(compiler *c)
{
    for (int i = 0; i < c->nout; i++) {
        int r = c->ci[c->w->root[i]].canon;
        ot_shape osh = out_shape(c, i);
        gemm_root g;
        storage out = out_storage(c, i);
        c->groot[i] = (gemm_root){-1, ONE, NONE};
        if (match_gemm_root(c, i, &g) && blas_writable(&out, node_of(c, g.dot))) {
            c->groot[i] = g;
            c->ci[g.dot].mat = false;
            continue;
        }
        if (is_op(c, r) && kind_of(c, r) == OT_KIND_REDUCE && c->ci[r].uses == 1 &&
            ot__shape_eq(&node_of(c, r)->shape, &osh))
            c->ci[r].mat = false;
    }
}

/* Generated code for the kernels that have it (see jit.c); where there is
 * no room for it the plan runs on the interpreter, as it would anyway. */
static void generate_code(ot_plan *p, const ot_kernels *kt, int acc, size_t stream_bytes)
{
    ot_jit **jits = ot__malloc(sizeof *jits * (size_t)(p->nkernels ? p->nkernels : 1));
    if (!jits) return;
    for (int i = 0; i < p->nkernels; i++)
        jits[i] = ot__jit_build(&p->kernels[i], kt, acc, stream_bytes);
    bool installed = ot__jit_install(jits, p->nkernels, &p->jit);
    for (int i = 0; i < p->nkernels; i++) {
        if (installed) p->kernels[i].jit = jits[i];
        else ot__jit_free(jits[i]);
    }
    free(jits);
}

static ot_plan *compile(ot_backend *be, const ot_walk *w, int n, ot_tensor *const outs[],
                        ot_node *const trees[])
{
    ot_cpu *cpu = be->impl;
    compiler c = {.be = be, .k = cpu->k, .w = w, .outs = outs, .trees = trees, .nout = n,
                  .fused = be->opts.fusion != OT_FUSION_OFF};
    c.ci = ot__calloc((size_t)w->n, sizeof *c.ci);
    c.plan = ot__calloc(1, sizeof *c.plan);
    c.groot = ot__calloc((size_t)n, sizeof *c.groot);
    /* Counted from the start, so that a failure below frees it. */
    if (c.plan) atomic_init(&c.plan->refs, 1);
    bool ok = c.ci && c.plan && c.groot && merge_common(&c);
    if (ok) {
        c.plan->nleaves = w->nleaf;
        c.plan->nparams = w->nparam;
        c.plan->nout = n;
        count_uses(&c);
        for (int i = 0; i < w->n; i++) c.plan->nodes += c.ci[i].canon == i && w->e[i].kind == OT_NODE_OP;
        choose_materialised(&c);
        if (c.fused && !bound_recompute(&c)) c.oom = true;
        mark_direct_roots(&c);
        assign_storage(&c);
        ok = !c.oom && build_kernels(&c) && choose_dot_segments(&c);
        if (ok) temps_into_outputs(&c);
        ok = ok && layout_arena(c.plan);
        if (ok && c.plan->nseg == 0) choose_row_blocks(&c);
        if (ok && cpu->jit)
            generate_code(c.plan, cpu->k, be->opts.accuracy == OT_ULP35, cpu->stream_bytes);
    }
    free(c.ci);
    free(c.groot);
    if (!ok) {
        ot__plan_release(c.plan);
        return NULL;
    }
    return c.plan;
}

int ot__plan_get(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                 ot_plan **plan, ot_walk **walk, ot_binding *bind)
{
    ot_cpu *cpu = be->impl;
    ot_walk *w = walk_trees(cpu, n, outs, trees);
    if (!w) return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory walking the tree");
    pthread_mutex_lock(&cpu->cache->lock);
    ot_plan *p = cache_find(cpu->cache, w);
    pthread_mutex_unlock(&cpu->cache->lock);
    if (p) {
        atomic_fetch_add(&be->stats.cache_hits, 1);
    } else {
        unsigned long failed = ot__alloc_failures();
        p = compile(be, w, n, outs, trees);
        if (p && ot__kernels_check(p, cpu->k, be->opts.accuracy == OT_ULP35)) {
            ot__plan_release(p);
            ot__walk_done(be, w);
            return OT_EUNSUPPORTED;
        }
        if (!p) {
            ot__walk_done(be, w);
            return ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory compiling the tree");
        }
        /* A plan that fell back from generated code or a fused group for
         * want of memory runs once; cached, it would stay the slower plan. */
        bool keep = ot__alloc_failures() == failed;
        atomic_fetch_add(&be->stats.compiles, 1);
        pthread_mutex_lock(&cpu->cache->lock);
        atomic_fetch_add(&p->refs, 1);   /* the caller's, beside the cache's */
        if (!keep || !cache_add(cpu->cache, w, p)) atomic_fetch_sub(&p->refs, 1);
        pthread_mutex_unlock(&cpu->cache->lock);
    }
    *plan = p;
    *walk = w;
    *bind = (ot_binding){.leaf = w->leafptr, .param = w->param, .outs = outs};
    return 0;
}

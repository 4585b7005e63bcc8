/*
 * stack.c - the post-order stack of a tree (ot_stack), through which the
 * compiler reads trees, leaf substitution (ot_substitute), and the node
 * pointer -> int map (ot__ptrmap) that their walks and ot_graphviz memoise
 * with. Writing a stack as text (ot_stack_print) is print.c's.
 *
 * A stack lists each distinct subtree once, operands before their op. Distinct
 * means by pointer and, through hash-consing, by structure, so x*y built twice
 * is one item. Both walks here keep their stack on the heap (trees may be
 * 100,000 deep) and memoise by node pointer, so a DAG with heavy sharing costs
 * time linear in its distinct nodes, not in its paths.
 */
#include "internal.h"

struct ot_stack {
    ot_stack_item *items;
    int len;
};

/* ---- node pointer -> int ------------------------------------------------- */

static size_t ptr_hash(const void *p)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x;
}

int ot__ptrmap_get(const ot__ptrmap *m, const ot_node *key)
{
    if (!m->cap) return -1;
    for (size_t i = ptr_hash(key) & (m->cap - 1);; i = (i + 1) & (m->cap - 1)) {
        if (m->keys[i] == key) return m->vals[i];
        if (!m->keys[i]) return -1;
    }
}

static void ptrmap_insert(ot__ptrmap *m, const ot_node *key, int val)
{
    size_t i = ptr_hash(key) & (m->cap - 1);
    while (m->keys[i]) i = (i + 1) & (m->cap - 1);
    m->keys[i] = key;
    m->vals[i] = val;
    m->len++;
}

bool ot__ptrmap_put(ot__ptrmap *m, const ot_node *key, int val)
{
    if (2 * (m->len + 1) > m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        ot__ptrmap g = {ot__calloc(cap, sizeof *g.keys), ot__malloc(cap * sizeof *g.vals), cap, 0};
        if (!g.keys || !g.vals) {
            free(g.keys);
            free(g.vals);
            return false;
        }
        for (size_t i = 0; i < m->cap; i++)
            if (m->keys[i]) ptrmap_insert(&g, m->keys[i], m->vals[i]);
        free(m->keys);
        free(m->vals);
        *m = g;
    }
    ptrmap_insert(m, key, val);
    return true;
}

void ot__ptrmap_free(ot__ptrmap *m)
{
    free(m->keys);
    free(m->vals);
}

/* v (an array of *cap elements of size elem) with room for need elements:
 * v itself, or a larger copy (and *cap updated), or NULL with v untouched. */
static void *reserve(void *v, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap) return v;
    size_t n = *cap ? 2 * *cap : 64, bytes;
    while (n < need) n *= 2;
    void *p = ot__mul_size(&bytes, n, elem) ? ot__realloc(v, bytes) : NULL;
    if (p) *cap = n;
    return p;
}

/* ---- the iterative post-order walk --------------------------------------- */

typedef struct frame {
    const ot_node *n;
    int next;                 /* the operand to descend into next */
} frame;

/* visit() is called once per node, after its operands, and returns the
 * node's value (>= 0, remembered in done) or a negative status. With
 * composites set, a tagged root's operands are the composite's own (tag_a,
 * tag_b) rather than those of its expansion. */
typedef struct walker {
    ot__ptrmap done;
    frame *stack;
    size_t len, cap;
    bool composites;
    int (*visit)(struct walker *w, const ot_node *n);
    void *ctx;
} walker;

static const ot_node *operand(const walker *w, const ot_node *n, int k)
{
    if (n->kind != OT_NODE_OP) return NULL;
    if (w->composites && n->tag != OT_OP_NONE) return k ? n->tag_b : n->tag_a;
    return k ? n->b : n->a;
}

/* The value of n's operand k (visited already), or -1 when n has none. */
static int operand_value(const walker *w, const ot_node *n, int k)
{
    const ot_node *c = operand(w, n, k);
    return c ? ot__ptrmap_get(&w->done, c) : -1;
}

static bool walker_push(walker *w, const ot_node *n)
{
    frame *v = reserve(w->stack, &w->cap, w->len + 1, sizeof *v);
    if (!v) return false;
    w->stack = v;
    w->stack[w->len++] = (frame){n, 0};
    return true;
}

/* Visits every node under root not visited yet, operands before ops and a's
 * subtree before b's. Returns root's value or a negative status. */
static int walk(walker *w, const ot_node *root)
{
    int v = ot__ptrmap_get(&w->done, root);
    if (v >= 0) return v;
    if (!walker_push(w, root)) return OT_ENOMEM;
    while (w->len > 0) {
        frame *top = &w->stack[w->len - 1];
        if (top->next < 2) {
            const ot_node *c = operand(w, top->n, top->next++);
            if (c && ot__ptrmap_get(&w->done, c) < 0 && !walker_push(w, c)) return OT_ENOMEM;
            continue;
        }
        const ot_node *n = top->n;
        w->len--;
        v = w->visit(w, n);
        if (v < 0) return v;
        if (!ot__ptrmap_put(&w->done, n, v)) return OT_ENOMEM;
    }
    return v;
}

static void walker_free(walker *w)
{
    ot__ptrmap_free(&w->done);
    free(w->stack);
}

/* ---- structural equality (hash-consing) ---------------------------------- */

static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    return h * 0xbf58476d1ce4e5b9ULL;
}

/* The attributes that change what an op computes, as words: composite tags
 * and attributes that only annotate (spec_, a composite's ddof on a sum) are
 * left out. Returns the count. */
static int attr_words(const ot_node *n, int64_t w[OT_MAX_DIMS])
{
    const ot_args *g = &n->args;
    switch (ot_op_kind((ot_op)n->op)) {
    case OT_KIND_REDUCE:
        w[0] = g->axis;
        w[1] = g->keepdims;
        return 2;
    case OT_KIND_SHAPE:
        for (int i = 0; i < n->shape.ndim; i++) w[i] = g->perm[i];
        return n->shape.ndim;
    case OT_KIND_SPECIAL:
        w[0] = g->dtype;
        if (n->op == OT_OP_CAST) return 1;
        if (n->op == OT_OP_RAND) {
            w[1] = (int64_t)g->seed;
            return 2;
        }
        w[1] = g->depth;
        w[2] = g->axis;
        return 3;
    default:
        return 0;
    }
}

static uint64_t bits_of(double v)
{
    uint64_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}

/* A hash consistent with same_item: equal items hash equally. */
static uint64_t item_hash(const ot_node *n, int a, int b)
{
    uint64_t h = mix(mix(n->kind, n->dtype), (uint64_t)n->shape.ndim);
    for (int i = 0; i < n->shape.ndim; i++) h = mix(h, (uint64_t)n->shape.dims[i]);
    if (n->kind == OT_NODE_LEAF) {
        const ot_tensor *t = ot__leaf_tensor(n);
        h = mix(mix(h, (uint64_t)(uintptr_t)t->buf), (uint64_t)t->offset);
        for (int i = 0; i < n->shape.ndim; i++) h = mix(h, (uint64_t)t->strides[i]);
    } else if (n->kind == OT_NODE_CONST) {
        h = mix(mix(h, n->weak), bits_of(n->value));
    } else {
        int64_t w[OT_MAX_DIMS];
        int nw = attr_words(n, w);
        h = mix(mix(mix(h, (uint64_t)n->op), (uint64_t)a), (uint64_t)b);
        for (int i = 0; i < nw; i++) h = mix(h, (uint64_t)w[i]);
    }
    return h;
}

static bool same_item(const ot_stack_item *it, const ot_node *n, int a, int b)
{
    const ot_node *m = it->node;
    if (m->kind != n->kind || m->dtype != n->dtype || !ot__shape_eq(&m->shape, &n->shape))
        return false;
    /* Leaves are equal when they read the same elements in the same layout. */
    if (n->kind == OT_NODE_LEAF) return ot__same_view(ot__leaf_tensor(m), ot__leaf_tensor(n));
    /* Constants compare by bit pattern, so NaN constants are one item. */
    if (n->kind == OT_NODE_CONST) return m->weak == n->weak && bits_of(m->value) == bits_of(n->value);
    int64_t wm[OT_MAX_DIMS], wn[OT_MAX_DIMS];
    int nm = attr_words(m, wm), nn = attr_words(n, wn);
    return m->op == n->op && it->a == a && it->b == b && nm == nn &&
           memcmp(wm, wn, (size_t)nn * sizeof *wn) == 0;
}

/* ---- building a stack ---------------------------------------------------- */

/* The stack under construction and its hash-consing table: slots holds item
 * indices (-1 empty) by structural hash, at most half full. */
typedef struct builder {
    ot_stack *s;
    size_t cap;               /* of s->items and hash */
    uint64_t *hash;           /* item_hash of each item */
    int *slots;
    size_t nslots;
} builder;

static bool grow_slots(builder *bd)
{
    size_t n = bd->nslots ? 2 * bd->nslots : 64;
    int *slots = ot__malloc(n * sizeof *slots);
    if (!slots) return false;
    memset(slots, 0xff, n * sizeof *slots);   /* every slot -1 */
    for (int k = 0; k < bd->s->len; k++) {
        size_t i = (size_t)bd->hash[k] & (n - 1);
        while (slots[i] >= 0) i = (i + 1) & (n - 1);
        slots[i] = k;
    }
    free(bd->slots);
    bd->slots = slots;
    bd->nslots = n;
    return true;
}

/* Room for one more item, in both s->items and hash. */
static bool grow_items(builder *bd)
{
    size_t need = (size_t)bd->s->len + 1, icap = bd->cap, hcap = bd->cap;
    ot_stack_item *items = reserve(bd->s->items, &icap, need, sizeof *items);
    if (items) bd->s->items = items;
    uint64_t *hash = items ? reserve(bd->hash, &hcap, need, sizeof *hash) : NULL;
    if (!hash) return false;
    bd->hash = hash;
    bd->cap = icap;   /* both grew by the same rule to the same size */
    return true;
}

static ot_stack_item new_item(const ot_node *n, int a, int b)
{
    ot_stack_item it = {.kind = n->kind, .op = OT_OP_NONE, .node = n, .a = a, .b = b};
    if (n->kind == OT_NODE_OP) it.op = (ot_op)n->op;
    if (n->kind == OT_NODE_LEAF) it.tensor = ot__leaf_tensor(n);
    if (n->kind == OT_NODE_CONST) it.value = n->value;
    return it;
}

/* The item of node n whose operands are items a and b (-1 when absent):
 * an existing equal item, or a new one appended. */
static int stack_visit(walker *w, const ot_node *n)
{
    builder *bd = w->ctx;
    ot_stack *s = bd->s;
    int a = operand_value(w, n, 0), b = operand_value(w, n, 1);
    if (2 * ((size_t)s->len + 1) > bd->nslots && !grow_slots(bd)) return OT_ENOMEM;
    uint64_t h = item_hash(n, a, b);
    size_t i = (size_t)h & (bd->nslots - 1);
    for (; bd->slots[i] >= 0; i = (i + 1) & (bd->nslots - 1)) {
        int k = bd->slots[i];
        if (bd->hash[k] == h && same_item(&s->items[k], n, a, b)) return k;
    }
    if ((size_t)s->len == bd->cap && !grow_items(bd)) return OT_ENOMEM;
    int k = s->len++;
    s->items[k] = new_item(n, a, b);
    bd->hash[k] = h;
    bd->slots[i] = k;
    /* uses counts operand slots, so add(x, x) reads x twice. */
    if (a >= 0) s->items[a].uses++;
    if (b >= 0) s->items[b].uses++;
    return k;
}

ot_stack *ot__stack_new_many(int n, const ot_node *const roots[], int roots_out[])
{
    const char *fn = "ot_stack_new";
    if (n < 0) {
        ot__err_set(OT_EINVAL, NULL, 0, fn, "negative root count %d", n);
        return NULL;
    }
    if (n > 0 && !roots) {
        ot__err_null(fn, "roots");
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        if (!roots[i]) {
            ot__err_null(fn, "tree");
            return NULL;
        }
    }
    ot_stack *s = ot__calloc(1, sizeof *s);
    builder bd = {.s = s};
    walker w = {.visit = stack_visit, .ctx = &bd};
    int rc = s ? 0 : OT_ENOMEM;
    for (int i = 0; i < n && rc >= 0; i++) {
        rc = walk(&w, roots[i]);
        if (rc < 0) break;
        s->items[rc].uses++;
        if (roots_out) roots_out[i] = rc;
    }
    walker_free(&w);
    free(bd.hash);
    free(bd.slots);
    if (rc < 0) {
        ot_stack_free(s);
        ot__err_set(OT_ENOMEM, NULL, 0, fn, "out of memory");
        return NULL;
    }
    return s;
}

ot_stack *ot_stack_new(const ot_node *tree)
{
    if (!tree) {
        ot__err_null("ot_stack_new", "tree");
        return NULL;
    }
    ot_clear_error();
    return ot__stack_new_many(1, &tree, NULL);
}

void ot_stack_free(ot_stack *s)
{
    if (!s) return;
    free(s->items);
    free(s);
}

int ot_stack_len(const ot_stack *s) { return s ? s->len : 0; }

const ot_stack_item *ot_stack_at(const ot_stack *s, int i)
{
    return s && i >= 0 && i < s->len ? &s->items[i] : NULL;
}

/* ---- substitution -------------------------------------------------------- */

typedef struct subst {
    const ot_node *old;
    ot_node *new_leaf;
    ot_node **out;            /* the new node of each visited node */
    size_t len, cap;
} subst;

/* The new node of operand k of n (visited already), or NULL when absent. */
static ot_node *new_operand(const walker *w, const ot_node *n, int k)
{
    const subst *sb = w->ctx;
    int v = operand_value(w, n, k);
    return v >= 0 ? sb->out[v] : NULL;
}

/* A node's replacement: new_leaf for old, the node itself when nothing
 * under it changed (so untouched subtrees stay shared), else a rebuild of
 * its op, or of its composite for a tagged root, over the new operands. */
static int subst_visit(walker *w, const ot_node *n)
{
    subst *sb = w->ctx;
    ot_node *r = (ot_node *)n;
    if (n == sb->old) {
        r = sb->new_leaf;
    } else if (n->kind == OT_NODE_OP) {
        ot_node *a = new_operand(w, n, 0), *b = new_operand(w, n, 1);
        if (a != operand(w, n, 0) || b != operand(w, n, 1)) {
            ot_op op = (ot_op)(n->tag != OT_OP_NONE ? n->tag : n->op);
            r = ot_build_at(op, a, b, &n->args, n->file, n->line);
            /* The builder has recorded why; any negative value stops the walk. */
            if (!r) return OT_EINVAL;
        }
    }
    ot_node **out = reserve(sb->out, &sb->cap, sb->len + 1, sizeof *out);
    if (!out) return OT_ENOMEM;
    sb->out = out;
    sb->out[sb->len] = r;
    return (int)sb->len++;
}

ot_node *ot_substitute(ot_node *tree, ot_tensor *old, ot_tensor *new_t)
{
    const char *what = !tree ? "tree" : !old ? "old" : !new_t ? "new_t" : NULL;
    if (what) {
        ot__err(OT_ENULL, NULL, 0, "substitute", "%s is NULL", what);
        return NULL;
    }
    if (!ot__shape_eq(&old->leaf.shape, &new_t->leaf.shape)) {
        char so[OT__SHAPE_STRLEN], sn[OT__SHAPE_STRLEN];
        ot__err(OT_ESHAPE, NULL, 0, "substitute", "shapes %s and %s differ",
                ot__shape_str(&old->leaf.shape, so), ot__shape_str(&new_t->leaf.shape, sn));
        return NULL;
    }
    subst sb = {.old = &old->leaf, .new_leaf = &new_t->leaf};
    walker w = {.composites = true, .visit = subst_visit, .ctx = &sb};
    int v = walk(&w, tree);
    if (v == OT_ENOMEM) ot__err(OT_ENOMEM, NULL, 0, "substitute", "out of memory");
    ot_node *r = v >= 0 ? sb.out[v] : NULL;
    walker_free(&w);
    free(sb.out);
    return r;
}

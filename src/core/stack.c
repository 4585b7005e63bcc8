/*
 * stack.c - the post-order stack of a tree (ot_stack) and leaf substitution
 * (ot_substitute). Writing a stack as text (ot_stack_print) is print.c's.
 *
 * A stack lists each distinct subtree once, operands before their op. Distinct
 * means by pointer (both walk with walk.c's walker, which visits a shared
 * node once) and, through hash-consing, by structure, so x*y built twice is
 * one item: two nodes are one item when their identities (ot__node_ident)
 * are equal, leaves by view and constants by value.
 */
#include "internal.h"
#include "ops.h"

struct ot_stack {
    ot_stack_item *items;
    int len;
    ot_node **roots;   /* retained: the items' nodes and tensors stay valid */
    int nroots;
};

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

/* ---- structural equality (hash-consing) ---------------------------------- */

/* The stack's identity of node n whose operands are items a and b (-1 when
 * absent): leaves by the view they read, constants by value (bit pattern, so
 * NaN constants are one item, and weak flag). */
static int item_ident(const ot_node *n, int a, int b, int64_t w[OT__IDENT_MAX])
{
    return ot__node_ident(n, OT__LEAF_BY_VIEW, OT__CONST_BY_VALUE, (const int[2]){a, b}, w);
}

/* The table takes the low bits, and a product's low bits depend only on
 * the factors' low bits, so the words are mixed and the result folded
 * (high bits into low): without the fold, a right-deep chain of 10^5 adds
 * probed in long runs and built its stack in seconds, not milliseconds. */
static uint64_t hash_words(const int64_t *w, int nw)
{
    uint64_t h = (uint64_t)nw;
    for (int i = 0; i < nw; i++) {
        h ^= (uint64_t)w[i] + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
        h *= 0xbf58476d1ce4e5b9ULL;
    }
    h ^= h >> 31;
    h *= 0x94d049bb133111ebULL;
    return h ^ (h >> 29);
}

static bool same_item(const ot_stack_item *it, const int64_t *w, int nw)
{
    int64_t v[OT__IDENT_MAX];
    return item_ident(it->node, it->a, it->b, v) == nw &&
           memcmp(v, w, sizeof *w * (size_t)nw) == 0;
}

/* ---- building a stack ---------------------------------------------------- */

/* The stack under construction and its hash-consing table: slots holds item
 * indices (-1 empty) by structural hash, at most half full. */
typedef struct builder {
    ot_stack *s;
    size_t cap;               /* of s->items and hash */
    uint64_t *hash;           /* hash_words of each item's identity */
    int *slots;
    size_t nslots;
    int *item;                /* the item of each node the walk visited */
    size_t itemcap;
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
    if (n->kind == OT_NODE_OP) it.op = (ot_op)ot__node_op(n);   /* a registered op's own */
    if (n->kind == OT_NODE_LEAF) it.tensor = ot__leaf_tensor(n);
    if (n->kind == OT_NODE_CONST) it.value = n->value;
    return it;
}

/* The item of node n: an existing equal item, or a new one appended. */
static int stack_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    builder *bd = w->ctx;
    ot_stack *s = bd->s;
    int *item = reserve(bd->item, &bd->itemcap, (size_t)index + 1, sizeof *item);
    if (!item) return OT_ENOMEM;
    bd->item = item;
    int a = operand[0] >= 0 ? item[operand[0]] : -1, b = operand[1] >= 0 ? item[operand[1]] : -1;
    if (2 * ((size_t)s->len + 1) > bd->nslots && !grow_slots(bd)) return OT_ENOMEM;
    int64_t id[OT__IDENT_MAX];
    int nid = item_ident(n, a, b, id);
    uint64_t h = hash_words(id, nid);
    size_t i = (size_t)h & (bd->nslots - 1);
    for (; bd->slots[i] >= 0; i = (i + 1) & (bd->nslots - 1)) {
        int k = bd->slots[i];
        if (bd->hash[k] == h && same_item(&s->items[k], id, nid)) return item[index] = k;
    }
    if ((size_t)s->len == bd->cap && !grow_items(bd)) return OT_ENOMEM;
    int k = s->len++;
    s->items[k] = new_item(n, a, b);
    bd->hash[k] = h;
    bd->slots[i] = k;
    /* uses counts operand slots, so add(x, x) reads x twice. */
    if (a >= 0) s->items[a].uses++;
    if (b >= 0) s->items[b].uses++;
    return item[index] = k;
}

/* A new stack holding the n roots (retained), or NULL. */
static ot_stack *hold_roots(int n, const ot_node *const roots[])
{
    ot_stack *s = ot__calloc(1, sizeof *s);
    if (s && n > 0 && !(s->roots = ot__malloc(sizeof *s->roots * (size_t)n))) {
        free(s);
        return NULL;
    }
    for (; s && s->nroots < n; s->nroots++)
        s->roots[s->nroots] = ot_retain_at((ot_node *)roots[s->nroots], NULL, 0);
    return s;
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
    ot_stack *s = hold_roots(n, roots);
    builder bd = {.s = s};
    ot__walker w = {.visit = stack_visit, .ctx = &bd};
    int rc = s ? 0 : OT_ENOMEM;
    for (int i = 0; i < n && rc >= 0; i++) {
        rc = ot__walker_run(&w, roots[i]);
        if (rc < 0) break;
        int k = bd.item[rc];
        s->items[k].uses++;
        if (roots_out) roots_out[i] = k;
    }
    ot__walker_free(&w);
    free(bd.hash);
    free(bd.slots);
    free(bd.item);
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
    if (ot__node_check("ot_stack_new", NULL, 0, "the tree", tree)) return NULL;
    ot_clear_error();
    return ot__stack_new_many(1, &tree, NULL);
}

void ot_stack_free(ot_stack *s)
{
    if (!s) return;
    for (int i = 0; i < s->nroots; i++) ot_release_at(s->roots[i], NULL, 0);
    free(s->roots);
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
    int n;
    ot_tensor *const *old;    /* old[i] becomes new_t[i] */
    ot_tensor *const *new_t;
    ot_node **out;            /* the new node of each visited node, by index */
    size_t cap;
} subst;

/* A node's replacement: new_t[i] for old[i], the node itself when nothing
 * under it changed (so untouched subtrees stay shared), else a rebuild of
 * its op, or of its composite for a tagged root, over the new operands. */
static int subst_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    subst *sb = w->ctx;
    ot_node *r = (ot_node *)n;
    for (int i = 0; i < sb->n; i++)
        if (n == &sb->old[i]->leaf) r = &sb->new_t[i]->leaf;
    if (n->kind == OT_NODE_OP) {
        ot_node *a = operand[0] >= 0 ? sb->out[operand[0]] : NULL;
        ot_node *b = operand[1] >= 0 ? sb->out[operand[1]] : NULL;
        if (a != ot__walker_operand(w, n, 0) || b != ot__walker_operand(w, n, 1)) {
            ot_op op = (ot_op)(n->tag != OT_OP_NONE ? n->tag : ot__node_op(n));
            ot_args args = n->args;
            ot__layout_follow(n, a, &args);   /* a merge or a whole dim at a's size */
            if (ot__is_attn(op)) ot__attn_follow(n, a, b, &args);   /* seq_k at b's size */
            r = ot_build_at(op, a, b, &args, n->file, n->line);
            /* The builder has recorded why; any negative value stops the walk. */
            if (!r) return OT_EINVAL;
            /* The rebuilt node stands for n: it keeps n's name and metadata. */
            if (n->annot && ot__annot_copy(r, n)) return OT_EINVAL;
        }
    }
    ot_node **out = reserve(sb->out, &sb->cap, (size_t)index + 1, sizeof *out);
    if (!out) return OT_ENOMEM;
    sb->out = out;
    sb->out[index] = r;
    return 0;
}

ot_node *ot_substitute(ot_node *tree, ot_tensor *old, ot_tensor *new_t)
{
    const char *what = !tree ? "tree" : !old ? "old" : !new_t ? "new_t" : NULL;
    if (what) {
        ot__err(OT_ENULL, NULL, 0, "substitute", "%s is NULL", what);
        return NULL;
    }
    if (ot__node_check("substitute", NULL, 0, "the tree", tree)) return NULL;
    if (!ot__shape_eq(&old->leaf.shape, &new_t->leaf.shape)) {
        char so[OT__SHAPE_STRLEN], sn[OT__SHAPE_STRLEN];
        ot__err(OT_ESHAPE, NULL, 0, "substitute", "shapes %s and %s differ",
                ot__shape_str(&old->leaf.shape, so), ot__shape_str(&new_t->leaf.shape, sn));
        return NULL;
    }
    return ot__substitute(tree, 1, &old, &new_t);
}

ot_node *ot__substitute(ot_node *tree, int n, ot_tensor *const old[], ot_tensor *const new_t[])
{
    subst sb = {.n = n, .old = old, .new_t = new_t};
    ot__walker w = {.composites = true, .visit = subst_visit, .ctx = &sb};
    int v = ot__walker_run(&w, tree);
    if (v == OT_ENOMEM) ot__err(OT_ENOMEM, NULL, 0, "substitute", "out of memory");
    ot_node *r = v >= 0 ? sb.out[v] : NULL;
    ot__walker_free(&w);
    free(sb.out);
    return r;
}

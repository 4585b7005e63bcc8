/*
 * walk.h - the one post-order walk over node DAGs (ot__walker, walk.c) and
 * the one statement of which attributes make two nodes the same
 * (ot__node_ident). Included by internal.h, after the node and tensor
 * structures it reads.
 *
 * Users: the compiler's front end (plan_key.c: entries and the plan key),
 * the stack and substitution (stack.c), autodiff's sweep and the printers
 * walk with the walker; the plan key, CSE (plan_fuse.c) and the stack
 * compare nodes through the identity. The walk's steps are inline here so
 * that the compiler's walk, which runs for every ot_assign, is a copy with
 * its visit inlined (ot__walker_run_plain), not a call per node.
 */
#ifndef OT_WALK_H
#define OT_WALK_H

#include "ops.h"   /* the op table's attributes, which identity reads */

/* ---- the walker ----------------------------------------------------------- */

/* The memo of a walk that outgrew its inline array: node pointer -> index,
 * open addressing, at most half full; keys are borrowed, not retained. */
typedef struct ot__ptrmap {
    const ot_node **keys;
    int *vals;
    size_t cap, len;      /* len counts the keys */
} ot__ptrmap;

typedef struct ot__walk_frame {
    const ot_node *n;     /* an op node */
    int next;             /* the operand to walk next */
    /* The indices of the operands walked (-1 until then), operand k in
     * bits 32k..32k+31: one word written whole, so that the visit's read
     * of both is forwarded from the last store. Two int stores read back
     * as one 8-byte load stalled the compiler's walk on every node. */
    uint64_t operands;
} ot__walk_frame;

#define OT__NO_OPERANDS UINT64_MAX   /* both -1 */

static inline void ot__frame_set_operand(ot__walk_frame *f, int k, int index)
{
    uint64_t v = (uint32_t)index;
    f->operands = k ? (f->operands & UINT32_MAX) | v << 32
                    : (f->operands & ~(uint64_t)UINT32_MAX) | v;
}

/* Walks this small memoise in an array scanned from its end, not a hash:
 * most trees the compiler walks are this small. */
#define OT__WALK_SMALL 32

/* The one iterative post-order walk over node DAGs. Zero it and set the
 * hooks; then walk each root (roots may share nodes: each distinct node is
 * visited once over all of them); ot__walker_free at the end. An op node's
 * operands are a then b (NULL ones skipped), or with composites a tagged
 * root's own tag_a then tag_b, the expansion below it unvisited; leaves and
 * constants have none. Each visited node gets an index, 0, 1, ... in
 * visiting order (post-order: operands first), by which users keep their
 * per-node arrays. The stack is on the heap, so depth is bounded by memory
 * alone. */
typedef struct ot__walker ot__walker;
/* After n's operands, once per distinct node: index is n's, operand[k]
 * that of operand k (-1 when absent or passed by enter). Returns >= 0, or a
 * negative status that stops the walk and is returned. */
typedef int ot__walk_visit(ot__walker *w, const ot_node *n, int index, const int operand[2]);
struct ot__walker {
    ot__walk_visit *visit;
    /* Optional, when a node is first reached, before its operands: 1 walks
     * it, 0 passes it by (no operands, no visit, no index; it is asked again
     * when reached again), negative stops the walk. */
    int (*enter)(ot__walker *w, const ot_node *n);
    /* Optional, before operand k of an op node is walked, also when that
     * operand is NULL (a printer writes "None"); negative stops the walk. */
    int (*between)(ot__walker *w, const ot_node *n, int k, const ot_node *operand);
    void *ctx;            /* the user's */
    bool composites;      /* a tagged root's operands are the composite's */
    bool every_path;      /* no memo: a node reached twice is walked twice
                             (writing an expression whose sharing the
                             hooks cut); indices then number paths */
    /* the walk's own */
    int count;            /* nodes visited */
    const ot_node *small[OT__WALK_SMALL];   /* node of index i, while count <= SMALL */
    ot__ptrmap memo;                        /* every node, once count > SMALL */
    ot__walk_frame *stack;
    size_t len, cap;
};
/* Walks root; returns its index, or the negative status that stopped the
 * walk (OT_ENOMEM when out of memory; OT_EINVAL when enter passed the root
 * by). A root visited before returns its index at once. */
int ot__walker_run(ot__walker *w, const ot_node *root);
/* Operand k of n as w walks it (composites or not), or NULL. */
static inline const ot_node *ot__walker_operand(const ot__walker *w, const ot_node *n, int k)
{
    if (n->kind != OT_NODE_OP) return NULL;
    if (w->composites && n->tag != OT_OP_NONE) return k ? n->tag_b : n->tag_a;
    return k ? n->b : n->a;
}
/* Forgets the visited nodes (indices restart at 0); keeps the stack. */
void ot__walker_reset(ot__walker *w);
void ot__walker_free(ot__walker *w);

/* walk.c's out-of-line pieces of the steps below: the map's lookup, adding
 * n as index w->count once the array is outgrown, a larger stack. */
int ot__walker_lookup(const ot__walker *w, const ot_node *n);
bool ot__walker_spill(ot__walker *w, const ot_node *n);
bool ot__walker_grow(ot__walker *w);

/* The index of a visited node, or -1. */
static inline int ot__walker_index(const ot__walker *w, const ot_node *n)
{
    if (w->count > OT__WALK_SMALL) return ot__walker_lookup(w, n);
    for (int i = w->count - 1; i >= 0; i--)
        if (w->small[i] == n) return i;
    return -1;
}

/* The steps, each taking the visit to call and whether hooks may be set:
 * ot__walker_run instantiates them with hooks and w->visit, and
 * ot__walker_run_plain without, and with the caller's visit, which the
 * compiler can then inline. */
#define OT__WALK_STEP static inline __attribute__((always_inline))

/* Visits n, whose operands are done, and numbers it: 0 with *index set,
 * or a negative status. */
OT__WALK_STEP int ot__walk_visit_node(ot__walker *w, ot__walk_visit *visit, bool hooks,
                                      const ot_node *n, const int operand[2], int *index)
{
    int rc = visit(w, n, w->count, operand);
    if (rc < 0) return rc;
    if (!(hooks && w->every_path)) {
        if (w->count < OT__WALK_SMALL) w->small[w->count] = n;
        else if (!ot__walker_spill(w, n)) return OT_ENOMEM;
    }
    *index = w->count++;
    return 0;
}

/* Reaches n: asks enter, then pushes an op node, or visits any other at
 * once, since it has no operands; *index is then its index, else -1.
 * Returns 0 or a negative status. */
OT__WALK_STEP int ot__walk_reach(ot__walker *w, ot__walk_visit *visit, bool hooks,
                                 const ot_node *n, int *index)
{
    *index = -1;
    if (hooks && w->enter) {
        int rc = w->enter(w, n);
        if (rc <= 0) return rc;
    }
    if (n->kind != OT_NODE_OP)
        return ot__walk_visit_node(w, visit, hooks, n, (const int[2]){-1, -1}, index);
    if (w->len == w->cap && !ot__walker_grow(w)) return OT_ENOMEM;
    w->stack[w->len++] = (ot__walk_frame){n, 0, OT__NO_OPERANDS};
    return 0;
}

/* Walks root to its end: root's index or a negative status. Only op nodes
 * have frames. A frame's operands that need none (absent, visited, leaves)
 * are dealt with in one go; one that needs a frame is walked first, and
 * its index handed to the frame below, its parent, when it is visited. */
OT__WALK_STEP int ot__walk_root(ot__walker *w, ot__walk_visit *visit, bool hooks,
                                const ot_node *root)
{
    int index = hooks && w->every_path ? -1 : ot__walker_index(w, root);
    if (index >= 0) return index;
    w->len = 0;
    int rc = ot__walk_reach(w, visit, hooks, root, &index);
    if (rc < 0 || index >= 0) return rc < 0 ? rc : index;
    if (w->len == 0) return OT_EINVAL;   /* enter passed the root by */
    while (w->len > 0) {
        ot__walk_frame *f = &w->stack[w->len - 1];
        if (f->next < 2) {
            int k = f->next++;
            const ot_node *c = ot__walker_operand(w, f->n, k);
            if (hooks && w->between && (rc = w->between(w, f->n, k, c)) < 0) return rc;
            if (!c) continue;
            int i = hooks && w->every_path ? -1 : ot__walker_index(w, c);
            if (i < 0 && (rc = ot__walk_reach(w, visit, hooks, c, &i)) < 0) return rc;
            /* f is stale when c was pushed (the stack may have moved); i is
             * then -1, and c's visit fills the operand in. */
            if (i >= 0) ot__frame_set_operand(f, k, i);
            continue;
        }
        const int operand[2] = {(int32_t)(uint32_t)f->operands,
                                (int32_t)(uint32_t)(f->operands >> 32)};
        if ((rc = ot__walk_visit_node(w, visit, hooks, f->n, operand, &index)) < 0) return rc;
        if (--w->len > 0) {
            ot__walk_frame *parent = &w->stack[w->len - 1];
            ot__frame_set_operand(parent, parent->next - 1, index);
        }
    }
    return index;
}

/* ot__walker_run for a walk with no enter, no between and a memo, calling
 * visit (w->visit is not read): the compiler's walk, with its visit
 * inlined. */
OT__WALK_STEP int ot__walker_run_plain(ot__walker *w, const ot_node *root, ot__walk_visit *visit)
{
    return ot__walk_root(w, visit, false, root);
}

/* ---- identity ------------------------------------------------------------- */

/* Which attributes make two nodes the same: the one statement, used by the
 * plan key, CSE and the stack. ot__node_ident writes a node's identity as
 * words (returns how many); two nodes are the same exactly when their words
 * are equal. The words are the kind, op and dtype, then by kind:
 *   op:    the caller's numbers of its operands (num[0], num[1]; -1 when
 *          absent: entries, canonical entries or stack items), then what
 *          changes the result: the attributes its row of src/core/ops.def
 *          lists (column attrs: a reduction's axis and keepdims, a
 *          transpose's perm, a slice's start, step and count per dim, a
 *          reshape's shape, concat's axis, onehot's depth and axis, rand's
 *          seed and shape; a dtype is the head's),
 *          a registered op's identity (custom1 and custom2 nodes).
 *          Never the composite tag or its annotations (ddof, lo, hi, a
 *          softmax's axis on its root), nor the weak flag: the expansion
 *          below computes the same either way. Nor, for any kind, a
 *          node's name and metadata (names.c): naming never recompiles.
 *   leaf:  by the policy: BY_NUMBER, the caller's number for its view
 *          (num[0]; the plan key numbers views so that its leaf slots are
 *          part of the structure); BY_VIEW, the view itself (equal exactly
 *          when ot__same_view).
 *   const: by the policy: BY_CLASS, whether it is 1, 0 or else (the plan
 *          key: values are data bound per call, so a cached plan never
 *          depends on them beyond that); BY_VALUE, its bit pattern and weak
 *          flag (the stack: NaN constants are one item).
 * Words are not portable; compare them only with words written under the
 * same policies. Inline, so that the plan key's copy, which runs for every
 * node of every ot_assign, folds its policies away. */
typedef enum ot__leaf_ident { OT__LEAF_BY_NUMBER, OT__LEAF_BY_VIEW } ot__leaf_ident;
typedef enum ot__const_ident { OT__CONST_BY_CLASS, OT__CONST_BY_VALUE } ot__const_ident;
#define OT__IDENT_MAX (3 + 3 * OT_MAX_DIMS)   /* a slice: three words a dim */

/* One attribute of n (ops.h's table) as identity words; the count. The
 * node's dtype is in the head; its shape counts where the operands do not
 * say it (reshape, rand). */
static inline int ot__attr_ident(const ot_node *n, const ot__attr *at, int64_t *w)
{
    const char *p = (const char *)&n->args + at->off;
    const ot_args *g = &n->args;
    switch (at->type) {
    case OT__AT_INT: w[0] = *(const int *)p; return 1;
    case OT__AT_FLAG: w[0] = *(const bool *)p; return 1;
    case OT__AT_I64: w[0] = *(const int64_t *)p; return 1;
    case OT__AT_U64: w[0] = (int64_t) * (const uint64_t *)p; return 1;
    case OT__AT_DOUBLE: memcpy(w, p, sizeof *w); return 1;
    case OT__AT_NODE_SHAPE:
        w[0] = n->shape.ndim;
        memcpy(w + 1, n->shape.dims, sizeof(int64_t) * (size_t)n->shape.ndim);
        return 1 + n->shape.ndim;
    case OT__AT_PERM: {
        uint64_t q = 0;   /* perm entries are < 8: a byte each */
        for (int i = 0; i < n->shape.ndim; i++) q |= (uint64_t)g->perm[i] << 8 * i;
        w[0] = (int64_t)q;
        return 1;
    }
    case OT__AT_WIN3:   /* every entry: those past the spatial dims are 0 */
        for (int i = 0; i < 3; i++) w[i] = ((const int32_t *)p)[i];
        return 3;
    case OT__AT_INDEX:   /* start, step and count of each operand dim */
        for (int i = 0; i < n->a->shape.ndim; i++) {
            w[3 * i] = g->start[i];
            w[3 * i + 1] = g->perm[i];
            w[3 * i + 2] = g->shape.dims[i];
        }
        return 3 * n->a->shape.ndim;
    default:   /* OT__AT_DTYPE, OT__AT_NODE_DTYPE: the head's */
        return 0;
    }
}

/* The op's own attributes after the head and operand words, as its row of
 * the op table lists them; the count. */
static inline int ot__op_ident(const ot_node *n, int64_t *w)
{
    int k = 0;
    if (n->custom)   /* which registered op: entries live as long as the process */
        w[k++] = (int64_t)(uintptr_t)n->custom;
    for (const unsigned char *a = ot__op_table[n->op].attrs; *a; a++)
        k += ot__attr_ident(n, &ot__attrs[*a], w + k);
    return k;
}

static inline int ot__node_ident(const ot_node *n, ot__leaf_ident leaf, ot__const_ident konst,
                                 const int num[2], int64_t w[OT__IDENT_MAX])
{
    uint64_t head = n->kind | (uint64_t)(uint8_t)n->op << 8 | (uint64_t)n->dtype << 16;
    if (n->kind == OT_NODE_LEAF) {
        if (leaf == OT__LEAF_BY_VIEW) {
            w[0] = (int64_t)head;
            return 1 + ot__view_ident((const ot_tensor *)n, w + 1);
        }
        w[0] = (int64_t)(head | (uint64_t)(uint32_t)num[0] << 32);
        return 1;
    }
    if (n->kind == OT_NODE_CONST) {
        if (konst == OT__CONST_BY_VALUE) {
            uint64_t bits;
            memcpy(&bits, &n->value, sizeof bits);
            w[0] = (int64_t)(head | (uint64_t)n->weak << 24);
            w[1] = (int64_t)bits;
            return 2;
        }
        /* Whether the value is 1 or 0 is structure, not data: patterns such
         * as 1/(1 + exp(-x)) depend on it, and a GEMM's beta must not drop
         * the NaN that 0*out keeps. */
        uint64_t cls = (uint64_t)(n->value == 1.0) | (uint64_t)(n->value == 0.0) << 1;
        w[0] = (int64_t)(head | cls << 32);
        return 1;
    }
    w[0] = (int64_t)head;
    w[1] = (int64_t)((uint64_t)(uint32_t)num[0] | (uint64_t)(uint32_t)num[1] << 32);
    return 2 + ot__op_ident(n, w + 2);
}

#endif /* OT_WALK_H */

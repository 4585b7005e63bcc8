/*
 * sequential.c - ot_sequential: steps run in order, each written before the
 * next is evaluated, and a value that several steps compute is computed
 * once and kept for the later ones (ngraph's sequential: each op of the
 * computation runs once).
 *
 * The steps' nodes are numbered into items, one per distinct value: the
 * same node, or nodes of equal digest (the plan cache's identity: the same
 * ops over the same views and constants). An item a later step reads may
 * be kept only while no step in between writes memory it reads: a leaf
 * item is dirtied by a step whose output overlaps it (ot__overlap, views
 * and aliases included), an op item by any dirtied operand, and a value
 * computed in step c serves step k only when no step c..k-1 dirtied it.
 * Otherwise the later step computes it again, from what it reads then.
 *
 * Planning walks the steps in order. In step j, the items with a valid kept
 * value are read from it (the walk stops there); of the items step j
 * computes, those that a later step would read while still valid are kept:
 * in step j's output when they are one of its trees, written whole at their
 * own dtype; else in a temporary of their shape and dtype, computed before
 * step j (in waves, inner values first, so that nothing is computed twice)
 * and read by step j like any leaf. A temporary is freed after the last
 * step reading it. Running rebuilds each step's trees over the kept values
 * (the builders, in a pool popped after the step) and assigns them on the
 * backend; with rule sets, every step is rewritten first, as an assignment
 * of it would be, and the rewritten trees are what is shared.
 *
 * The plan is ot__share_steps', for any sink: ot_sequential's assigns each
 * assignment at once (and skips sharing that may save fewer element ops
 * than OT__SHARE_MIN_SAVING: planning would cost more); a program's compile
 * keeps the assignments and the temporaries, to run them at every run.
 */
#include "front.h"

/* ---- the plan's structures ------------------------------------------------ */

typedef struct item {
    const ot_node *node;      /* the first node found with this value */
    int a, b;                 /* operand items, -1 when absent */
    int first, last;          /* the first and last step whose trees read it */
    bool work;                /* computing it does arithmetic (worth keeping) */
    int cur;                  /* its kept value now (a gen), -1 */
    int seen;                 /* the walk that last computed it */
    int cand, want;           /* planning step j: a candidate to keep; wanted later */
    ot_tensor *root_out;      /* step `cand`'s output holding it whole, or NULL */
    int rstamp;               /* the step run that replaces it by rleaf */
    ot_node *rleaf;
    bool pend;                /* a temporary of the step running, not yet computed */
    int reach, reach_root;    /* keep_inner: how many roots reach it; the last one */
} item;

typedef struct gen {          /* one kept value: item's as of step made */
    int item, made, last;     /* last: the last step reading it, -1: none (made: its own) */
    ot_tensor *out;           /* step made's output holding it, or NULL */
    ot_tensor *t;             /* else its temporary, while it lives */
} gen;

typedef struct use {
    int step, gen;            /* step reads gen instead of computing it */
} use;

typedef struct share {
    int n;
    const ot_step *st;        /* the steps (rewritten, where rule sets apply) */
    ot_backend *be;
    item *it;
    int nit, capit;
    int *slot;                /* items by value: index or -1, at most half full */
    size_t nslot;
    unsigned char *dirty;     /* bit s * nit + i: step s writes memory item i reads */
    gen *g;
    int ng, capg;
    use *u;
    int nu, capu;
    int *ev;                  /* the items the planning walk of a step computed */
    int nev, capev;
    ot__walker w;
    int j, k, walk, rebuild;  /* the walk in progress */
    int self;                 /* a wave's walk: the item it is of */
    int root;                 /* keep_inner's walk: its number */
    bool blocked;             /* and whether another pending item is below */
    ot_node **out;            /* a rebuild's new node, by walker index */
    int capout;
    gen **tmp;                /* run_step's scratch: a step's temporaries, */
    ot_tensor **souts;        /* outputs and trees of a wave or the step, */
    ot_node **strees;
    int *idx;                 /* which temporaries a wave computes */
    ot_node **rewritten;      /* with rule sets: every step's trees, retained */
    size_t nrewritten;
    ot__share_sink *sink;     /* where the assignments go */
} share;

/* Room for need elements in *v (*cap of them, elem bytes each). */
static bool grow(void *v, int *cap, int need, size_t elem)
{
    if (need <= *cap) return true;
    int n = *cap ? 2 * *cap : 16;
    while (n < need) n *= 2;
    void *p = ot__realloc(*(void **)v, elem * (size_t)n);
    if (!p) return false;
    *(void **)v = p;
    *cap = n;
    return true;
}

/* The caller (ot_sequential) prefixes its site and the step. */
static int nomem(void)
{
    return ot__err_set(OT_ENOMEM, NULL, 0, NULL, "out of memory");
}

/* ---- items by value ------------------------------------------------------- */

static bool same_value(const ot_node *x, const ot_node *y)
{
    return x == y || (x->digest_ok && y->digest_ok && x->digest[0] == y->digest[0] &&
                      x->digest[1] == y->digest[1]);
}

static size_t value_hash(const ot_node *n)
{
    uint64_t h = n->digest_ok ? n->digest[0] ^ (n->digest[1] * 0x9e3779b97f4a7c15ULL)
                              : (uint64_t)(uintptr_t)n * 0xbf58476d1ce4e5b9ULL;
    return (size_t)(h ^ (h >> 29));
}

/* The slot of n's value: its item's, or the empty one it would take. */
static size_t find_slot(const share *s, const ot_node *n)
{
    size_t i = value_hash(n) & (s->nslot - 1);
    while (s->slot[i] >= 0 && !same_value(s->it[s->slot[i]].node, n)) i = (i + 1) & (s->nslot - 1);
    return i;
}

static int item_of(const share *s, const ot_node *n)
{
    return n ? s->slot[find_slot(s, n)] : -1;
}

static bool grow_slots(share *s)
{
    size_t n = s->nslot ? 2 * s->nslot : 256;
    int *slot = ot__malloc(sizeof *slot * n);
    if (!slot) return false;
    memset(slot, 0xff, sizeof *slot * n);
    free(s->slot);
    s->slot = slot;
    s->nslot = n;
    for (int i = 0; i < s->nit; i++) s->slot[find_slot(s, s->it[i].node)] = i;
    return true;
}

/* Whether computing n, operands a and b already known, is arithmetic worth
 * keeping: views, checkpoints and concats of leaves only move data. */
static bool is_work(const share *s, const ot_node *n, int a, int b)
{
    if (n->kind != OT_NODE_OP || n->weak || ot__numel(&n->shape) == 0) return false;
    /* An f16/bf16 value is not rounded where it is computed (ref works in
     * double, cpu in f32: docs/half.md), only at a cast or a store: a
     * 16-bit temporary would round it. A cast's value is rounded anyway. */
    if (ot__is_half(n->dtype) && (n->op != OT_OP_CAST || n->tag != OT_OP_NONE))
        return false;
    if ((a >= 0 && s->it[a].work) || (b >= 0 && s->it[b].work)) return true;
    int op = ot__node_op(n);
    return ot__kind_of(op) != OT_KIND_SHAPE && op != OT_OP_KEEP && op != OT_OP_CONCAT;
}

/* The first walk: every node of step s->j gets its item. */
static int number_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)index, (void)operand;
    share *s = w->ctx;
    if (2 * ((size_t)s->nit + 1) > s->nslot && !grow_slots(s)) return OT_ENOMEM;
    size_t at = find_slot(s, n);
    int i = s->slot[at];
    if (i < 0) {
        if (!grow(&s->it, &s->capit, s->nit + 1, sizeof *s->it)) return OT_ENOMEM;
        i = s->nit++;
        int a = item_of(s, n->kind == OT_NODE_OP ? n->a : NULL);
        int b = item_of(s, n->kind == OT_NODE_OP ? n->b : NULL);
        s->it[i] = (item){n, a, b, s->j, s->j, is_work(s, n, a, b), -1, -1, -1, -1, NULL, -1,
                          NULL, false, 0, -1};
        s->slot[at] = i;
    }
    s->it[i].last = s->j;
    return 0;
}

/* Walks step k's roots with w's hooks; a root that enter passes by is not
 * walked (the walker would call that an error). */
static int walk_roots(share *s, int k)
{
    ot__walker_reset(&s->w);
    s->k = k;
    for (int r = 0; r < s->st[k].n; r++) {
        const ot_node *root = s->st[k].trees[r];
        int rc = s->w.enter ? s->w.enter(&s->w, root) : 1;
        if (rc > 0) rc = ot__walker_run(&s->w, root);
        if (rc < 0) return rc;
    }
    return 0;
}

/* ---- what steps write ----------------------------------------------------- */

static bool dirty(const share *s, int step, int i)
{
    size_t bit = (size_t)step * (size_t)s->nit + (size_t)i;
    return s->dirty[bit / 8] >> (bit % 8) & 1;
}

/* Marks the items whose memory step writes: leaves its outputs overlap,
 * then every item over a marked operand (items come operands first). */
static void find_dirty(share *s, int step)
{
    for (int i = 0; i < s->nit; i++) {
        const item *x = &s->it[i];
        bool d = (x->a >= 0 && dirty(s, step, x->a)) || (x->b >= 0 && dirty(s, step, x->b));
        for (int o = 0; !d && x->node->kind == OT_NODE_LEAF && o < s->st[step].n; o++)
            d = ot__overlap(ot__leaf_tensor(x->node), s->st[step].outs[o]) != OT_OVERLAP_NONE;
        size_t bit = (size_t)step * (size_t)s->nit + (size_t)i;
        if (d) s->dirty[bit / 8] |= (unsigned char)(1u << (bit % 8));
    }
}

/* Whether a value of item i computed in step c still holds in step k:
 * no step c..k-1 wrote memory it reads, nor (held in out, an output of
 * step c) memory out is. */
static bool holds(const share *s, int i, int c, const ot_tensor *out, int k)
{
    for (int step = c; step < k; step++) {
        if (dirty(s, step, i)) return false;
        for (int o = 0; out && step > c && o < s->st[step].n; o++)
            if (ot__overlap(out, s->st[step].outs[o]) != OT_OVERLAP_NONE) return false;
    }
    return true;
}

/* Item i's kept value valid in step k, or -1. */
static int valid_gen(const share *s, int i, int k)
{
    int g = s->it[i].cur;
    return g >= 0 && holds(s, i, s->g[g].made, s->g[g].out, k) ? g : -1;
}

/* ---- planning ------------------------------------------------------------- */

/* Step j's own walk: a value kept and valid is read (a use); the rest is
 * computed, and listed in s->ev. */
static int plan_enter(ot__walker *w, const ot_node *n)
{
    share *s = w->ctx;
    int i = n->kind == OT_NODE_OP ? item_of(s, n) : -1;
    int g = i >= 0 ? valid_gen(s, i, s->j) : -1;
    if (g < 0) return 1;
    if (s->g[g].last != s->j) {
        if (!grow(&s->u, &s->capu, s->nu + 1, sizeof *s->u)) return OT_ENOMEM;
        s->u[s->nu++] = (use){s->j, g};
        s->g[g].last = s->j;
    }
    return 0;
}

static int plan_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)index, (void)operand;
    share *s = w->ctx;
    int i = item_of(s, n);
    if (s->it[i].seen == s->walk) return 0;
    s->it[i].seen = s->walk;
    if (!grow(&s->ev, &s->capev, s->nev + 1, sizeof *s->ev)) return OT_ENOMEM;
    s->ev[s->nev++] = i;
    return 0;
}

/* A later step k's walk as it would be with step j's candidates kept:
 * a candidate it reaches while valid is wanted. */
static int want_enter(ot__walker *w, const ot_node *n)
{
    share *s = w->ctx;
    int i = n->kind == OT_NODE_OP ? item_of(s, n) : -1;
    if (i < 0) return 1;
    item *x = &s->it[i];
    if (x->cand == s->j && holds(s, i, s->j, NULL, s->k)) {
        if (x->root_out && !holds(s, i, s->j, x->root_out, s->k))
            x->root_out = NULL;   /* the output is overwritten first: a temporary */
        x->want = s->j;
        return 0;
    }
    return valid_gen(s, i, s->k) < 0;
}

static int no_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)w, (void)n, (void)index, (void)operand;
    return 0;
}

/* Step j's candidates: values it computes that a later step reads, with
 * the output that holds one whole, if any. Returns the last step reading
 * one, or j when there are none. */
static int find_candidates(share *s, int j)
{
    int last = j;
    for (int e = 0; e < s->nev; e++) {
        item *x = &s->it[s->ev[e]];
        if (!x->work || x->last <= j) continue;
        x->cand = j;
        x->root_out = NULL;
        if (x->last > last) last = x->last;
    }
    const ot_step *st = &s->st[j];
    for (int r = st->n - 1; r >= 0; r--) {
        item *x = &s->it[item_of(s, st->trees[r])];
        const ot_tensor *o = st->outs[r];
        if (x->cand == j && o->leaf.dtype == x->node->dtype &&
            ot__shape_eq(&o->leaf.shape, &x->node->shape) &&
            (!o->leaf.axes || o->leaf.axes == x->node->axes))
            x->root_out = st->outs[r];
    }
    return last;
}

/* Whether item i is read in step j from a temporary other than the one
 * keep_inner walks (s->self): one an earlier step kept, or one step j
 * computes before its trees. */
static bool read_as_temp(const share *s, int i, int j)
{
    int g = valid_gen(s, i, j);
    return g >= 0 && i != s->self && (s->g[g].made < j || !s->g[g].out);
}

static int inner_enter(ot__walker *w, const ot_node *n)
{
    share *s = w->ctx;
    return n->kind != OT_NODE_OP || !read_as_temp(s, item_of(s, n), s->j);
}

static int inner_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    (void)index, (void)operand;
    share *s = w->ctx;
    item *x = &s->it[item_of(s, n)];
    if (n->kind == OT_NODE_OP && x->reach_root != s->root) x->reach++, x->reach_root = s->root;
    return 0;
}

/* Walks one root of keep_inner's from item self (-1: a tree of the step). */
static int inner_walk(share *s, const ot_node *root, int self)
{
    ot__walker_reset(&s->w);
    s->self = self;
    s->root++;
    int rc = inner_enter(&s->w, root);
    return rc > 0 ? ot__walker_run(&s->w, root) : rc;
}

/* Step j's values that two of its computations read (the temporaries it
 * keeps and its trees, each down to the temporaries it reads): kept too,
 * for step j alone (last j), computed in an earlier wave. Else each wave
 * computes them again: a language model's residual stream, GEMMs and all,
 * once for every layer norm whose parts the backward keeps. */
static int keep_inner(share *s, int j, int first_gen)
{
    for (int e = 0; e < s->nev; e++) s->it[s->ev[e]].reach = 0;
    s->w.enter = inner_enter;
    s->w.visit = inner_visit;
    int rc = 0, ng = s->ng;
    for (int q = first_gen; q < ng && rc >= 0; q++)
        if (!s->g[q].out) rc = inner_walk(s, s->it[s->g[q].item].node, s->g[q].item);
    for (int r = 0; r < s->st[j].n && rc >= 0; r++) rc = inner_walk(s, s->st[j].trees[r], -1);
    s->self = -1;
    for (int e = 0; e < s->nev && rc >= 0; e++) {
        item *x = &s->it[s->ev[e]];
        if (x->reach < 2 || !x->work || valid_gen(s, s->ev[e], j) >= 0) continue;
        if (!grow(&s->g, &s->capg, s->ng + 1, sizeof *s->g)) return OT_ENOMEM;
        s->g[s->ng] = (gen){s->ev[e], j, j, NULL, NULL};
        x->cur = s->ng++;
    }
    return rc < 0 ? rc : 0;
}

/* Plans step j: its uses, then the values it keeps for later steps. */
static int plan_step(share *s, int j)
{
    int first_gen = s->ng;
    s->j = j;
    s->walk++;
    s->nev = 0;
    s->w.enter = plan_enter;
    s->w.visit = plan_visit;
    int rc = walk_roots(s, j);
    int last = rc ? j : find_candidates(s, j);
    s->w.enter = want_enter;
    s->w.visit = no_visit;
    for (int k = j + 1; k <= last && !rc; k++) rc = walk_roots(s, k);
    for (int e = 0; e < s->nev && !rc; e++) {
        item *x = &s->it[s->ev[e]];
        if (x->want != j) continue;
        if (!grow(&s->g, &s->capg, s->ng + 1, sizeof *s->g)) return OT_ENOMEM;
        s->g[s->ng] = (gen){s->ev[e], j, -1, x->root_out, NULL};
        x->cur = s->ng++;
    }
    return rc || s->ng == first_gen ? rc : keep_inner(s, j, first_gen);
}

/* What sharing could save, in element ops: each value that does work,
 * once for every later step that may read it, but for operands read over
 * the same steps as their parent (computed inside the parent's kept value,
 * not saved twice). A bound: a write in between may save less. Items come
 * operands first, so a parent marks its operands before they are counted. */
static int64_t saving(share *s)
{
    int64_t saved = 0;
    for (int i = s->nit - 1; i >= 0; i--) {
        item *x = &s->it[i];
        bool inside = x->seen == -2;
        x->seen = -1;
        if (!x->work || x->first >= x->last) continue;
        for (int k = 0; k < 2; k++) {
            int o = k ? x->b : x->a;
            if (o >= 0 && s->it[o].first == x->first && s->it[o].last == x->last)
                s->it[o].seen = -2;   /* inside x */
        }
        if (!inside) saved += ot__numel(&x->node->shape) * (int64_t)(x->last - x->first);
    }
    return saved;
}

/* Numbers the steps' values and, where a later step reads a value an
 * earlier one computes, plans what is kept; *kept false when nothing is. */
static int plan(share *s, bool *kept)
{
    *kept = false;
    s->w = (ot__walker){.visit = number_visit, .ctx = s};
    int rc = 0;
    for (int j = 0; j < s->n && !rc; j++) {
        s->j = j;
        rc = walk_roots(s, j);
    }
    int64_t saved = rc ? 0 : saving(s);
    if (rc || !saved || saved < s->sink->min_saving) return rc == OT_ENOMEM ? nomem() : rc;
    size_t bits = (size_t)s->n * (size_t)s->nit;
    s->dirty = ot__calloc(bits / 8 + 1, 1);
    if (!s->dirty) return nomem();
    for (int step = 0; step < s->n; step++) find_dirty(s, step);
    for (int j = 0; j < s->n && !rc; j++) rc = plan_step(s, j);
    *kept = s->nu > 0;
    return rc == OT_ENOMEM ? nomem() : rc;
}

/* ---- rebuilding a step over the kept values -------------------------------- */

static void replace(share *s, int i, ot_node *leaf)
{
    s->it[i].rstamp = s->rebuild;
    s->it[i].rleaf = leaf;
}

/* The leaf the step running reads instead of computing n, or NULL. */
static ot_node *replaced(const share *s, const ot_node *n)
{
    int i = n && n->kind == OT_NODE_OP ? item_of(s, n) : -1;
    return i >= 0 && s->it[i].rstamp == s->rebuild ? s->it[i].rleaf : NULL;
}

static int rebuild_enter(ot__walker *w, const ot_node *n)
{
    return !replaced(w->ctx, n);
}

/* n over its operands' replacements: n itself when none changed (so what
 * is untouched stays shared), else rebuilt by its op's builder at n's
 * site, with n's name (a composite's root as its expansion's root op). */
static int rebuild_visit(ot__walker *w, const ot_node *n, int index, const int operand[2])
{
    share *s = w->ctx;
    ot_node *r = (ot_node *)n;
    if (n->kind == OT_NODE_OP) {
        ot_node *x[2] = {n->a, n->b};
        bool changed = false;
        for (int k = 0; k < 2; k++) {
            ot_node *rep = replaced(s, x[k]);
            ot_node *nx = rep ? rep : operand[k] >= 0 ? s->out[operand[k]] : x[k];
            changed = changed || nx != x[k];
            x[k] = nx;
        }
        if (changed) r = ot_build_at((ot_op)ot__node_op(n), x[0], x[1], &n->args, n->file, n->line);
        if (!r || (changed && n->annot && ot__annot_copy(r, n)))
            return ot_errcode() ? ot_errcode() : OT_EINTERNAL;
    }
    if (!grow(&s->out, &s->capout, index + 1, sizeof *s->out)) return OT_ENOMEM;
    s->out[index] = r;
    return 0;
}

/* trees with every value replaced in this step run read from its leaf,
 * into out (the current pool). */
static int rebuild(share *s, int n, ot_node *const trees[], ot_node *out[])
{
    ot__walker_reset(&s->w);
    s->w.enter = rebuild_enter;
    s->w.visit = rebuild_visit;
    for (int r = 0; r < n; r++) {
        ot_node *tree = trees[r], *rep = replaced(s, tree);   /* out may be trees */
        out[r] = rep;
        if (rep) continue;
        int v = ot__walker_run(&s->w, tree);
        if (v < 0) return v == OT_ENOMEM ? nomem() : v;
        out[r] = s->out[v];
    }
    return 0;
}

/* ---- running ---------------------------------------------------------------- */

/* A wave's walk of one pending temporary: blocked when another one, not
 * yet computed, is below it. */
static int wave_enter(ot__walker *w, const ot_node *n)
{
    share *s = w->ctx;
    if (n->kind != OT_NODE_OP || replaced(s, n)) return n->kind != OT_NODE_OP;
    int i = item_of(s, n);
    if (i != s->self && s->it[i].pend) {
        s->blocked = true;
        return 0;
    }
    return 1;
}


/* Whether pending temporary x can be computed now: no other pending one
 * below it. */
static int ready(share *s, int i, bool *ok)
{
    ot__walker_reset(&s->w);
    s->w.enter = wave_enter;
    s->w.visit = no_visit;
    s->self = i;
    s->blocked = false;
    int rc = ot__walker_run(&s->w, s->it[i].node);
    *ok = !s->blocked;
    return rc == OT_ENOMEM ? nomem() : rc < 0 ? rc : 0;
}

/* Computes the temporaries tmp[0..n) (pending) of the step running, in
 * waves: those with no pending one below them first, as one assignment,
 * each then read by the later waves and by the step. outs, trees and idx
 * hold n entries. */
static int run_waves(share *s, int n, gen *const tmp[], ot_tensor **outs, ot_node **trees,
                     int *idx)
{
    for (int left = n; left > 0;) {
        int m = 0, rc = 0;
        for (int p = 0; p < n && !rc; p++) {
            bool ok = false;
            if (s->it[tmp[p]->item].pend) rc = ready(s, tmp[p]->item, &ok);
            if (!ok) continue;
            outs[m] = tmp[p]->t;
            trees[m] = (ot_node *)s->it[tmp[p]->item].node;
            idx[m++] = p;
        }
        if (!rc && !m)   /* the lowest pending one has none below it: never */
            rc = ot__err_set(OT_EINTERNAL, NULL, 0, NULL, "kept values depend on each other");
        if (!rc) rc = rebuild(s, m, trees, trees);
        if (!rc) rc = s->sink->emit(s->sink->ctx, s->be, s->rebuild, true, m, outs, trees);
        if (rc) return rc;
        for (int q = 0; q < m; q++) {
            s->it[tmp[idx[q]]->item].pend = false;
            replace(s, tmp[idx[q]]->item, &tmp[idx[q]]->t->leaf);
        }
        left -= m;
    }
    return 0;
}

/* A temporary for item i's value: its shape, dtype and axis names. */
static ot_tensor *temporary(const share *s, int i)
{
    const ot_node *n = s->it[i].node;
    ot_tensor *t = (ot_empty)(s->be, n->shape, (ot_dtype)n->dtype);
    if (t) t->leaf.axes = n->axes;
    return t;
}

/* Step j's temporaries, made now and pending into s->tmp; their count,
 * or a negative code. *gi walks the kept values, which are in step order. */
static int start_temporaries(share *s, int j, int *gi)
{
    int ntmp = 0;
    for (; *gi < s->ng && s->g[*gi].made == j; (*gi)++) {
        gen *g = &s->g[*gi];
        if (g->out || g->last < j) continue;   /* in an output, or read by no one */
        if (!(g->t = temporary(s, g->item))) return ot_errcode() ? ot_errcode() : nomem();
        s->it[g->item].pend = true;
        s->tmp[ntmp++] = g;
    }
    return ntmp;
}

/* Frees the temporaries no step after j reads (kept ones are the
 * sink's: it runs the assignments again). */
static void free_read(share *s, int j)
{
    for (int q = 0; q < s->ng && !s->sink->keep; q++)
        if (s->g[q].t && s->g[q].last <= j) {
            ot_tensor_free(s->g[q].t);
            s->g[q].t = NULL;
        }
}

/* Runs step j over the plan: the kept values it reads replaced by their
 * leaves; the temporaries it keeps computed first; then the step, and the
 * temporaries read for the last time freed. *ui walks the uses, in step
 * order. */
static int run_step(share *s, int j, int *ui, int *gi)
{
    const ot_step *st = &s->st[j];
    s->rebuild = j;
    for (; *ui < s->nu && s->u[*ui].step == j; (*ui)++) {
        gen *g = &s->g[s->u[*ui].gen];
        replace(s, g->item, g->out ? &g->out->leaf : &g->t->leaf);
    }
    int ntmp = start_temporaries(s, j, gi);
    ot_pool *pool = ntmp < 0 ? NULL : ot_pool_push();
    int rc = ntmp < 0 ? ntmp : pool ? 0 : nomem();
    if (!rc) rc = run_waves(s, ntmp, s->tmp, s->souts, s->strees, s->idx);
    if (!rc) rc = rebuild(s, st->n, st->trees, s->strees);
    if (!rc) rc = s->sink->emit(s->sink->ctx, s->be, j, false, st->n, st->outs, s->strees);
    if (pool) ot_pool_pop(pool);
    free_read(s, j);
    return rc;
}

/* Room for the largest step or set of temporaries, for run_step. */
static int alloc_scratch(share *s)
{
    int cap = s->ng;
    for (int j = 0; j < s->n; j++) cap = s->st[j].n > cap ? s->st[j].n : cap;
    size_t c = (size_t)(cap ? cap : 1);
    s->tmp = ot__malloc(sizeof *s->tmp * c);
    s->souts = ot__malloc(sizeof *s->souts * c);
    s->strees = ot__malloc(sizeof *s->strees * c);
    s->idx = ot__malloc(sizeof *s->idx * c);
    if (s->sink->keep) s->sink->tmps = ot__malloc(sizeof *s->sink->tmps * c);
    return s->tmp && s->souts && s->strees && s->idx && (s->sink->tmps || !s->sink->keep)
               ? 0 : nomem();
}

/* ---- the call ------------------------------------------------------------------- */

static int keep_trees(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                      void *ctx)
{
    (void)be, (void)outs;
    ot_node **dst = ctx;
    for (int r = 0; r < n; r++) dst[r] = ot_retain(trees[r]);
    return 0;
}

/* With rule sets: every step's trees rewritten first, as assigning the
 * step would, retained in s->rewritten; copy gets the steps over them. */
static int rewrite_steps(share *s, ot_step *copy, int *failed)
{
    size_t total = 0;
    for (int j = 0; j < s->n; j++) total += (size_t)s->st[j].n;
    s->rewritten = ot__calloc(total ? total : 1, sizeof *s->rewritten);
    if (!s->rewritten) return nomem();
    s->nrewritten = total;
    size_t at = 0;
    int rc = 0;
    for (int j = 0; j < s->n && !rc; j++) {
        copy[j] = s->st[j];
        copy[j].trees = s->rewritten + at;
        if (s->st[j].n)
            rc = ot__rewrite_then(s->be, s->st[j].n, s->st[j].outs, s->st[j].trees, NULL,
                                  keep_trees, s->rewritten + at);
        if (rc) *failed = j;   /* the error names the step */
        at += (size_t)s->st[j].n;
    }
    return rc;
}

/* Frees the plan; temporaries the sink keeps go to it. */
static void share_free(share *s)
{
    for (int q = 0; q < s->ng; q++)
        if (s->sink->keep && s->sink->tmps && s->g[q].t) s->sink->tmps[s->sink->ntmp++] = s->g[q].t;
        else ot_tensor_free(s->g[q].t);
    for (size_t r = 0; r < s->nrewritten; r++)
        if (s->rewritten[r]) ot_release(s->rewritten[r]);
    ot__walker_free(&s->w);
    free(s->rewritten);
    free(s->it);
    free(s->slot);
    free(s->dirty);
    free(s->g);
    free(s->u);
    free(s->ev);
    free(s->out);
    free(s->tmp);
    free(s->souts);
    free(s->strees);
    free(s->idx);
}

/* The one backend every step runs on, or NULL (no step, or several). */
static ot_backend *one_backend(int n, const ot_step steps[])
{
    ot_backend *be = NULL;
    for (int j = 0; j < n; j++) {
        ot_backend *b = steps[j].n ? steps[j].outs[0]->leaf.be : be;
        if (be && b != be) return NULL;
        be = b;
    }
    return be;
}

int ot__share_steps(int n, const ot_step steps[], ot__share_sink *sink, int *failed)
{
    share s = {.n = n, .st = steps, .be = one_backend(n, steps), .sink = sink};
    ot_step *copy = NULL;
    bool kept = false;
    int rc = 0;
    *failed = -1;
    sink->ntmp = 0;
    if (s.be && n > 1) {
        if (s.be->rewrite && !(copy = ot__malloc(sizeof *copy * (size_t)n))) rc = nomem();
        if (copy) rc = rewrite_steps(&s, copy, failed);
        if (copy) s.st = copy;
        if (!rc) rc = plan(&s, &kept);
        if (!rc && kept) rc = alloc_scratch(&s);
    }
    ot_backend *fin = copy || (s.be && !s.be->rewrite) ? s.be : NULL;   /* trees final */
    for (int j = 0, ui = 0, gi = 0; j < n && !rc; j++) {
        const ot_step *st = &s.st[j];
        if (!st->n) continue;
        if (kept) rc = run_step(&s, j, &ui, &gi);
        else rc = sink->emit(sink->ctx, fin, j, false, st->n, st->outs, st->trees);
        if (rc) *failed = j;
    }
    share_free(&s);
    free(copy);
    return rc;
}

/* ot_sequential's sink: each assignment made at once. */
static int assign_now(void *ctx, ot_backend *be, int step, bool wave, int n,
                      ot_tensor *const outs[], ot_node *const trees[])
{
    (void)ctx, (void)step, (void)wave;
    return be ? be->vt->assign_many(be, n, outs, trees)
              : ot__assign_backend(outs[0]->leaf.be, n, outs, trees);
}

int ot__sequential_run(int n, const ot_step steps[], int *failed)
{
    ot__share_sink sink = {.emit = assign_now, .min_saving = OT__SHARE_MIN_SAVING};
    return ot__share_steps(n, steps, &sink, failed);
}

/*
 * autodiff.c - reverse-mode autodiff over op-trees: the sweep, and the
 * autodiff object (ot_autodiff_*), memoised per backend, with the gradient
 * w.r.t. a tensor. The rule of each op is autodiff_rules.c's.
 *
 * A gradient is an ordinary op-tree built with the public builders from the
 * forward tree's own nodes, so it prints, explains, fuses, and can be
 * differentiated again. Nothing is computed here.
 *
 * The sweep lists the distinct nodes of the tree in post-order (walk.c's
 * walker: a tree 100,000 deep is fine, and a DAG costs time linear in its
 * distinct nodes), then walks that list backwards: each node's
 * gradient is complete before it is pushed to its operands, and contributions
 * to a shared node are added in that order. A composite's tagged root is
 * differentiated by the composite's own rule, straight to the composite's
 * operands, which is what gives the stable forms (softmax - y for a softmax
 * cross-entropy; logsoftmax through exp, never the log of a softmax).
 * A standardisation (batch and layer norm's (x - m) * rsqrt(v + eps)) is
 * recognised by its structure and takes its closed form
 * (autodiff_rules.c's standardise_rule).
 *
 * Conventions of the rules:
 *   - An incoming gradient may have any shape that broadcasts to its node's
 *     (the implicit next_error of ones is the constant 1). A contribution is
 *     summed back to its operand's shape before it is added.
 *   - Ties of max, min, maximum and minimum share the gradient equally among
 *     the tied elements. clip passes the gradient on the closed interval
 *     [lo, hi]: its bounds are constants, so there is no tie to share.
 *   - Non-differentiable ops (OT_FLAG_NODIFF), integer values and constants
 *     receive nothing: a leaf reached by no gradient gets zeros.
 *   - A composite's gradient is the derivative of the value its expansion
 *     (node.c) computes, on the axes it used: cross_entropy's d/dt is minus
 *     the very log p node of the forward.
 *
 * Singular points: PyTorch's convention per op, as the plain formula gives
 * it unless listed. Both backends evaluate the same gradient tree, and at
 * +-0, +-inf, NaN, denormals and constant data they give the same class of
 * value (NaN, +-inf, finite) in every case tests/test_regress_autodiff.c
 * probes.
 *   sqrt    g / (2 sqrt x): +inf at +0, -inf at -0, NaN below 0.
 *   rsqrt   -g rsqrt(x)^3 / 2: -inf at +0, +inf at -0.
 *   log     g / x: +inf at +0, -inf at -0; log2 likewise over ln 2.
 *   recip   -g recip(x)^2, and a / b: d/db = -(g / b)(a / b); -inf at 0.
 *   safelog flat (0) at and below its floor exp(-50), 1/x above.
 *   pow     d/da = b a^(b-1), 0 where b == 0 (also at a = 0 or NaN);
 *           d/db = a^b log a, 0 where a == 0 and b >= 0; NaN for a < 0.
 *   abs     g sgn(x): 0 at 0. relu: 0 at 0. clip: g on [lo, hi], closed.
 *   max/min ties share g equally (PyTorch's amax rule; torch.max picks one).
 *   std     g (x - mean) / (dof std), and 0 where std == 0 (constant data:
 *           PyTorch's std_backward); var: 2 g (x - mean) / dof. With
 *           dof <= 0 both divide by 0 and give inf or NaN, as PyTorch.
 * Known difference: ref keeps double between f32 ops and cpu rounds each to
 * f32, so an f32 intermediate that under- or overflows only on cpu (sqrt of
 * sqr(1e-30) is 0 there, not 1e-30) gives cpu inf where ref is finite.
 */
#include "autodiff.h"

#include <pthread.h>

/* Objects a backend keeps for reuse: bounded so that a loop building a new
 * tree per step keeps a fixed number alive. */
#define MEMO_CAP 64

struct ot_autodiff {
    atomic_long refs;         /* the memo's and every ot_autodiff_new's */
    ot_backend *be;
    ot_node *tree;            /* retained: the memo key stays unique */
    ot_node *next_error;      /* retained; NULL means ones */
    int nleaves;
    ot_tensor **leaf;         /* leaves reached by a gradient (tree keeps them) */
    ot_node **grad;           /* their gradients, in their shapes (retained) */
    uint64_t used;            /* the memo's clock at the last lookup */
};

typedef struct ot_ad_memo {
    pthread_mutex_t lock;
    uint64_t clock;
    bool closed;              /* ot_backend_free emptied it: adds nothing */
    int n;
    ot_autodiff *slot[MEMO_CAP];
} ot_ad_memo;

/* ---- the sweep ----------------------------------------------------------- */

/* Room for position i in order and live. */
static bool grow(sweep *s, int i)
{
    if (i < s->cap) return true;
    int cap = s->cap ? 2 * s->cap : 256;
    ot_node **o = ot__realloc(s->order, (size_t)cap * sizeof *o);
    if (o) s->order = o;
    bool *l = ot__realloc(s->live, (size_t)cap * sizeof *l);
    if (l) s->live = l;
    if (!o || !l) return false;
    s->cap = cap;
    return true;
}

/* Lists node n at its post-order position, and whether gradients reach it:
 * a float leaf, or an op that is differentiable with a live operand, its
 * operands being those a gradient flows to (a composite's own for its
 * tagged root, whose rule skips the expansion). Integer values never carry
 * a gradient. */
static int list_node(ot__walker *w, const ot_node *n, int i, const int operand[2])
{
    sweep *s = w->ctx;
    if (!grow(s, i)) return OT_ENOMEM;
    bool live = false;
    if (n->dtype == OT_I32) live = false;
    else if (n->kind == OT_NODE_LEAF) live = true;
    else if (n->kind == OT_NODE_OP && !(ot_op_flags((ot_op)ot__node_op(n)) & OT_FLAG_NODIFF))
        live = (operand[0] >= 0 && s->live[operand[0]]) || (operand[1] >= 0 && s->live[operand[1]]);
    s->order[i] = (ot_node *)n;
    s->live[i] = live;
    s->len = i + 1;
    return 0;
}

/* Lists the distinct nodes of tree in post-order. */
static int walk(sweep *s, ot_node *tree)
{
    s->walker = (ot__walker){.visit = list_node, .ctx = s, .composites = true};
    int rc = ot__walker_run(&s->walker, tree);
    return rc >= 0 ? 0 : ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_new", "out of memory");
}

/* Walks the tree backwards from its root's gradient g0. */
static int backward(sweep *s, ot_backend *be, ot_node *g0)
{
    /* A NULL seed would leave every gradient unset, which reads as zeros. */
    if (!g0) return ot_errcode();
    s->grad[s->len - 1] = g0;
    for (int i = s->len - 1; i >= 0; i--) {
        if (s->wide[i]) {   /* every contribution to node i is in: i's users come later */
            ot__ad_settle(&(ctx){s->order[i]->file, s->order[i]->line, be}, s, i);
            if (ot_errcode()) return ot_errcode();
        }
        if (!s->grad[i] || !s->live[i] || s->order[i]->kind != OT_NODE_OP) continue;
        int rc = ot__ad_apply(s, be, s->order[i], s->grad[i]);
        if (!rc) rc = ot_errcode();
        if (rc) return rc;
    }
    return 0;
}

/* Keeps the gradient of every live leaf in ad. */
static int keep_leaves(ot_autodiff *ad, const sweep *s)
{
    int n = 0;
    for (int i = 0; i < s->len; i++)
        n += s->order[i]->kind == OT_NODE_LEAF && s->live[i] && s->grad[i];
    ad->leaf = ot__calloc((size_t)(n ? n : 1), sizeof *ad->leaf);
    ad->grad = ot__calloc((size_t)(n ? n : 1), sizeof *ad->grad);
    if (!ad->leaf || !ad->grad)
        return ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_new", "out of memory");
    for (int i = 0; i < s->len; i++) {
        if (s->order[i]->kind != OT_NODE_LEAF || !s->live[i] || !s->grad[i]) continue;
        ad->leaf[ad->nleaves] = ot__leaf_tensor(s->order[i]);
        ad->grad[ad->nleaves++] = ot_retain(s->grad[i]);
    }
    return 0;
}

/* The sweep, in a pool of its own: what the object keeps is retained, the
 * rest dies with the pool. */
static int differentiate(ot_autodiff *ad)
{
    sweep s = {0};
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot_errcode();
    int rc = walk(&s, ad->tree);
    if (!rc) {
        s.grad = ot__calloc((size_t)s.len, sizeof *s.grad);
        s.wide = ot__calloc((size_t)s.len, sizeof *s.wide);
        if (!s.grad || !s.wide) rc = ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_new", "out of memory");
    }
    if (!rc) rc = backward(&s, ad->be, ad->next_error ? ad->next_error : K(1.0));
    if (!rc) rc = keep_leaves(ad, &s);
    ot_pool_pop(pool);
    ot__walker_free(&s.walker);
    free(s.order);
    free(s.grad);
    free(s.wide);
    free(s.live);
    return rc;
}

/* ---- the object and its memo --------------------------------------------- */

/* What an object holds (its tree, next_error and gradients), taken out of
 * it: the object is left empty, matching no lookup. */
typedef struct ad_held {
    ot_node *tree, *next_error, **grad;
    ot_tensor **leaf;
    int nleaves;
} ad_held;

static ad_held detach(ot_autodiff *ad)
{
    ad_held h = {ad->tree, ad->next_error, ad->grad, ad->leaf, ad->nleaves};
    ad->tree = ad->next_error = NULL;
    ad->grad = NULL;
    ad->leaf = NULL;
    ad->nleaves = 0;
    return h;
}

static void release_held(ad_held *h)
{
    for (int i = 0; i < h->nleaves; i++) ot_release(h->grad[i]);
    ot_release(h->tree);
    ot_release(h->next_error);
    free(h->leaf);
    free(h->grad);
}

void ot_autodiff_free(ot_autodiff *ad)
{
    if (!ad || atomic_fetch_sub_explicit(&ad->refs, 1, memory_order_acq_rel) != 1) return;
    ad_held h = detach(ad);
    release_held(&h);
    free(ad);
}

/* The backend's memo, created on first use (a race loses to the first). */
static ot_ad_memo *memo_of(ot_backend *be)
{
    ot_ad_memo *m = atomic_load(&be->ad_memo);
    if (m) return m;
    m = ot__calloc(1, sizeof *m);
    if (!m || pthread_mutex_init(&m->lock, NULL) != 0) {
        free(m);
        return NULL;
    }
    ot_ad_memo *expected = NULL;
    if (atomic_compare_exchange_strong(&be->ad_memo, &expected, m)) return m;
    pthread_mutex_destroy(&m->lock);
    free(m);
    return expected;
}

/* The object memoised for (tree, next_error), given a new reference, or
 * NULL. Called with the lock held. */
static ot_autodiff *memo_take(ot_ad_memo *m, const ot_node *tree, const ot_node *ne)
{
    for (int i = 0; i < m->n; i++) {
        ot_autodiff *a = m->slot[i];
        if (a->tree != tree || a->next_error != ne) continue;
        a->used = ++m->clock;
        atomic_fetch_add(&a->refs, 1);
        return a;
    }
    return NULL;
}

static ot_autodiff *memo_find(ot_ad_memo *m, const ot_node *tree, const ot_node *ne)
{
    pthread_mutex_lock(&m->lock);
    ot_autodiff *a = memo_take(m, tree, ne);
    pthread_mutex_unlock(&m->lock);
    return a;
}

/* Whether nobody can look object a up any more: no caller holds it, and it
 * alone holds its tree (or its next_error), so no caller has the pointers a
 * lookup needs. */
static bool unreachable(ot_autodiff *a)
{
    return a->tree && atomic_load(&a->refs) == 1 &&
           (atomic_load(&a->tree->refs) == 1 ||
            (a->next_error && atomic_load(&a->next_error->refs) == 1));
}

/* Empties the objects nobody can look up, into held[] (returning how many)
 * to be released outside the lock. A training loop builds a new tree per
 * step: the memo kept the last MEMO_CAP of them alive, and each step's
 * nodes went to fresh memory (page faults) instead of the last step's. An
 * emptied object keeps its slot and its place in the LRU order, so which
 * live objects stay is unchanged. Called with the lock held. */
static int memo_empty_dead(ot_ad_memo *m, ad_held held[MEMO_CAP])
{
    int n = 0;
    for (int i = 0; i < m->n; i++)
        if (unreachable(m->slot[i])) held[n++] = detach(m->slot[i]);
    return n;
}

/* Adds ad (giving the memo a reference), evicting the least recently used
 * object when full. Returns the object to hand out: ad, or the one another
 * thread memoised for the same key meanwhile (ad is then dropped). */
static ot_autodiff *memo_add(ot_ad_memo *m, ot_autodiff *ad)
{
    ot_autodiff *evicted = NULL;
    ad_held dead[MEMO_CAP];
    pthread_mutex_lock(&m->lock);
    int ndead = memo_empty_dead(m, dead);
    ot_autodiff *old = memo_take(m, ad->tree, ad->next_error);
    if (!old && !m->closed) {
        int at = m->n;
        if (m->n == MEMO_CAP) {
            at = 0;
            for (int i = 1; i < m->n; i++)
                if (m->slot[i]->used < m->slot[at]->used) at = i;
            evicted = m->slot[at];
        } else {
            m->n++;
        }
        ad->used = ++m->clock;
        atomic_fetch_add(&ad->refs, 1);
        m->slot[at] = ad;
    }
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < ndead; i++) release_held(&dead[i]);
    ot_autodiff_free(old ? ad : evicted);
    return old ? old : ad;
}

void ot__autodiff_memo_close(ot_backend *be)
{
    ot_ad_memo *m = atomic_load(&be->ad_memo);
    if (!m) return;
    ot_autodiff *held[MEMO_CAP];
    pthread_mutex_lock(&m->lock);
    int n = m->n;
    memcpy(held, m->slot, sizeof *held * (size_t)n);
    m->n = 0;
    m->closed = true;
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < n; i++) ot_autodiff_free(held[i]);   /* outside the lock */
}

void ot__autodiff_memo_free(ot_backend *be)
{
    ot_ad_memo *m = atomic_load(&be->ad_memo);
    if (!m) return;
    for (int i = 0; i < m->n; i++) ot_autodiff_free(m->slot[i]);
    pthread_mutex_destroy(&m->lock);
    free(m);
    atomic_store(&be->ad_memo, NULL);
}

static int check_new(const ot_node *tree, const ot_node *ne)
{
    char st[OT__SHAPE_STRLEN], se[OT__SHAPE_STRLEN];
    if (ne && !ot__shape_eq(&ne->shape, &tree->shape))
        return ot__err_set(OT_ESHAPE, NULL, 0, "autodiff_new",
                           "next_error has shape %s, the tree has shape %s",
                           ot__shape_str(&ne->shape, se), ot__shape_str(&tree->shape, st));
    if (!tree->be)
        return ot__err_set(OT_EBACKEND, NULL, 0, "autodiff_new",
                           "the tree has no tensor leaf to take a backend from");
    return 0;
}

ot_autodiff *(ot_autodiff_new)(ot_node *tree, ot_node *next_error)
{
    if (!tree) {
        ot__err_null("autodiff_new", "tree");
        return NULL;
    }
    if (ot__node_check("autodiff_new", NULL, 0, "the tree", tree) ||
        ot__node_check("autodiff_new", NULL, 0, "next_error", next_error))
        return NULL;
    ot_clear_error();
    if (check_new(tree, next_error)) return NULL;
    /* a freed backend's memo would hold its tensors, and they it */
    if (ot__backend_gone(tree->be, "autodiff_new", NULL, 0, "the tree")) return NULL;
    ot_ad_memo *m = memo_of(tree->be);
    if (!m) {
        ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_new", "out of memory");
        return NULL;
    }
    ot_autodiff *ad = memo_find(m, tree, next_error);
    if (ad) return ad;
    ad = ot__calloc(1, sizeof *ad);
    if (!ad) {
        ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_new", "out of memory");
        return NULL;
    }
    atomic_init(&ad->refs, 1);
    ad->be = tree->be;
    ad->tree = ot_retain(tree);
    ad->next_error = ot_retain(next_error);
    if (differentiate(ad) != 0) {
        ot_autodiff_free(ad);
        return NULL;
    }
    return memo_add(m, ad);
}

/* ---- gradients w.r.t. a tensor ------------------------------------------- */

/* How leaf l relates to wrt: 0 when they share no memory, 1 when l reads
 * exactly wrt's elements laid out as wrt's dims permuted, with size-1 dims
 * inserted anywhere (perm[i] is the dim of wrt that dim i of l walks, -1 for
 * an inserted one: a tensor aligned by axis name is read so), -1 for any
 * other overlap. */
static int relation(const ot_tensor *l, const ot_tensor *wrt, int perm[OT_MAX_DIMS])
{
    if (l == wrt) {
        for (int i = 0; i < OT_MAX_DIMS; i++) perm[i] = i;
        return 1;
    }
    if (ot__overlap(l, wrt) == OT_OVERLAP_NONE) return 0;
    const ot_shape *ls = &l->leaf.shape, *ws = &wrt->leaf.shape;
    if (l->buf != wrt->buf || l->offset != wrt->offset || ls->ndim < ws->ndim) return -1;
    bool used[OT_MAX_DIMS] = {false};
    int matched = 0;
    for (int i = 0; i < ls->ndim; i++) {
        perm[i] = -1;
        for (int j = 0; j < ws->ndim && perm[i] < 0; j++) {
            bool stride_ok = ls->dims[i] == 1 || l->strides[i] == wrt->strides[j];
            if (!used[j] && ls->dims[i] == ws->dims[j] && stride_ok) perm[i] = j;
        }
        if (perm[i] >= 0) used[perm[i]] = true, matched++;
        else if (ls->dims[i] != 1) return -1;
    }
    return matched == ws->ndim ? 1 : -1;
}

static bool identity(const int *perm, int ndim)
{
    for (int i = 0; i < ndim; i++)
        if (perm[i] != i) return false;
    return true;
}

/* Leaf i's gradient in wrt's layout (perm as relation() gives it). */
static ot_node *to_layout(const ctx *c, const ot_autodiff *ad, int i, const int *perm)
{
    ot_node *g = ad->grad[i];
    const ot_node *l = &ad->leaf[i]->leaf;
    int nd = l->shape.ndim, kept[OT_MAX_DIMS], k = 0;
    if (identity(perm, nd)) return g;
    g = ot__ad_full(c, g, l->shape, (ot_dtype)l->dtype);
    /* inserted size-1 dims summed away (one element each), the last first */
    for (int d = nd - 1; d >= 0 && g; d--)
        if (perm[d] < 0) g = reduce(c, OT_OP_SUM, g, d, false);
    for (int d = 0; d < nd; d++)
        if (perm[d] >= 0) kept[k++] = perm[d];
    if (identity(kept, k)) return g;
    int inv[OT_MAX_DIMS] = {0};
    for (int d = 0; d < k; d++) inv[kept[d]] = d;
    return ot__ad_transpose(c, g, inv);
}

/* g as wrt's shape and dtype: zeros where nothing reached it. */
static ot_node *fit(const ctx *c, ot_node *g, const ot_tensor *wrt)
{
    ot_dtype dt = (ot_dtype)wrt->leaf.dtype;
    if (!g) return ot__ad_zeros(c->be, wrt->leaf.shape, dt);
    if (g->dtype != dt || g->weak) {
        ot_args to = {.axis = OT_AXIS_ALL, .dtype = dt};
        g = ot_build_at(OT_OP_CAST, g, NULL, &to, c->file, c->line);
    }
    /* A gradient that reads no tensor (f = x, f = 3 x: a constant) has no
     * backend to evaluate on; adding zeros of wrt's shape gives it wrt's,
     * even where the shapes already agree (0-d). */
    if (g && !g->be) return B(c, OT_OP_ADD, g, ot__ad_zeros(c->be, wrt->leaf.shape, dt));
    return ot__ad_full(c, g, wrt->leaf.shape, dt);
}

/* ---- gradients through views: the scatter -------------------------------- */

/* The lowest and highest element of the buffer that t addresses. */
static void extent(const ot_tensor *t, int64_t *lo, int64_t *hi)
{
    *lo = *hi = t->offset;
    for (int d = 0; d < t->leaf.shape.ndim; d++) {
        int64_t span = t->strides[d] * (t->leaf.shape.dims[d] - 1);
        if (span < 0) *lo += span;
        else *hi += span;
    }
}

static const char *name_of(const ot_tensor *t)
{
    return t->name ? t->name : "the tensor";
}

/* acc (a copy of the buffer's elements lo and up) += leaf i's gradient,
 * written through the leaf's own geometry: a broadcast dim (stride 0) is
 * summed first and written once. */
static int scatter_leaf(const ctx *c, const ot_autodiff *ad, int i, ot_tensor *acc, int64_t lo)
{
    const ot_tensor *l = ad->leaf[i];
    ot_shape s = l->leaf.shape;
    for (int d = 0; d < s.ndim; d++)
        if (l->strides[d] == 0) s.dims[d] = 1;
    ot_node *g = ot__ad_full(c, ad->grad[i], l->leaf.shape, (ot_dtype)l->leaf.dtype);
    ot_tensor *v = ot__view_new(acc, &s, l->strides, l->offset - lo, "autodiff_grad");
    if (!v) return ot_errcode();
    int dim, rc;
    if (ot__internal_overlap(v, &dim))
        rc = ot__err(OT_EUNSUPPORTED, NULL, 0, "autodiff_grad", "the tree reads %s through a "
                     "view whose dim %d reads its elements more than once, not by broadcasting",
                     name_of(l), dim);
    else
        rc = ot_assign(v, B(c, OT_OP_ADD, &v->leaf, ot__ad_sum_to(c, g, &s)));
    ot_tensor_free(v);
    return rc;
}

/* The gradient w.r.t. wrt where the tree reads its memory through views
 * that are not wrt laid out again (a reshape, a slice, a broadcast, views
 * overlapping one another): every such leaf's gradient is added into a
 * copy of the memory they span through the leaf's own geometry, in the
 * leaves' order, and wrt's geometry reads the sums back. The op set has no
 * scatter, so this is computed now: a tensor node, not a tree. */
static ot_node *through_views(const ctx *c, const ot_autodiff *ad, const ot_tensor *wrt)
{
    int dim;
    if (ot__internal_overlap(wrt, &dim)) {
        ot__err(OT_EUNSUPPORTED, NULL, 0, "autodiff_grad", "%s reads one element many times "
                "(dim %d of a broadcast view): its elements are not independent, so the tree's "
                "gradient cannot be mapped back to it; ask for the tensor it broadcasts",
                name_of(wrt), dim);
        return NULL;
    }
    int64_t lo, hi, l0, h0;
    extent(wrt, &lo, &hi);
    for (int i = 0; i < ad->nleaves; i++) {
        if (ot__overlap(ad->leaf[i], wrt) == OT_OVERLAP_NONE) continue;
        extent(ad->leaf[i], &l0, &h0);
        if (l0 < lo) lo = l0;
        if (h0 > hi) hi = h0;
    }
    ot_tensor *acc = (ot_zeros)(c->be, OT_SHAPE(hi - lo + 1), (ot_dtype)wrt->leaf.dtype);
    ot_pool *pool = acc ? ot_pool_push() : NULL;
    int rc = pool ? 0 : ot_errcode();
    for (int i = 0; i < ad->nleaves && !rc; i++)
        if (ot__overlap(ad->leaf[i], wrt) != OT_OVERLAP_NONE) rc = scatter_leaf(c, ad, i, acc, lo);
    if (pool) ot_pool_pop(pool);
    ot_tensor *r = rc ? NULL : ot__view_new(acc, &wrt->leaf.shape, wrt->strides,
                                            wrt->offset - lo, "autodiff_grad");
    /* Marked as wrt's, so that differentiating a tree that reads these
     * values w.r.t. wrt again is refused (snapshot_of) instead of
     * silently treating them as constants: a zero Hessian. */
    if (r) {
        acc->buf->grad_of = wrt->buf;
        atomic_fetch_add_explicit(&wrt->buf->refs, 1, memory_order_relaxed);
    }
    ot_tensor_free(acc);
    return r ? ot__pool_adopt(&r->leaf) : NULL;
}

/* Whether leaf l holds values through_views computed for wrt's memory:
 * they depend on wrt, but as a tensor, not a tree, so a derivative w.r.t.
 * wrt of a tree reading them (a Hessian-vector product) cannot be had. */
static bool snapshot_of(const ot_tensor *l, const ot_tensor *wrt)
{
    return l->buf && wrt->buf && l->buf->grad_of == wrt->buf;
}

/* The gradient w.r.t. wrt; with trees_only, an error where it cannot be a
 * tree (through_views), for a caller that evaluates it later. */
static ot_node *grad_of(ot_autodiff *ad, ot_tensor *wrt, bool trees_only)
{
    if (!ad || !wrt) {
        ot__err(OT_ENULL, NULL, 0, "autodiff_grad", "%s is NULL", ad ? "wrt" : "autodiff object");
        return NULL;
    }
    ctx c = {ad->tree->file, ad->tree->line, wrt->leaf.be};
    ot_node *sum = NULL;
    for (int i = 0; i < ad->nleaves; i++) {
        int perm[OT_MAX_DIMS];
        if (snapshot_of(ad->leaf[i], wrt)) {
            ot__err(OT_EUNSUPPORTED, NULL, 0, "autodiff_grad",
                    "the tree reads a gradient w.r.t. %s that was computed when asked (it "
                    "was read through a reshape, slice or broadcast view: a tensor of that "
                    "moment's values, not a tree), so it cannot be differentiated w.r.t. %s "
                    "again; build the views as expressions (ot_slice_node, ot_reshape_node) "
                    "for a gradient that is a tree",
                    name_of(wrt), name_of(wrt));
            return NULL;
        }
        int rel = relation(ad->leaf[i], wrt, perm);
        if (rel < 0 && trees_only) {
            ot__err(OT_EUNSUPPORTED, NULL, 0, "autodiff_grad",
                    "the tree reads %s through a view that is neither it nor a transpose of it; "
                    "its gradient is then computed when asked (the op set has no scatter), which "
                    "a step run later cannot use; ask for the gradient of that view",
                    name_of(wrt));
            return NULL;
        }
        if (rel < 0) return through_views(&c, ad, wrt);
        if (rel == 0) continue;
        ot_node *g = to_layout(&c, ad, i, perm);
        sum = sum ? B(&c, OT_OP_ADD, sum, g) : g;
    }
    /* The pool gets a reference of its own: the gradient may be a node the
     * object holds, and must outlive the object like any built node. */
    ot_node *g = fit(&c, sum, wrt);
    return g ? ot__pool_adopt(ot_retain(g)) : NULL;
}

ot_node *(ot_autodiff_grad)(ot_autodiff *ad, ot_tensor *wrt)
{
    return grad_of(ad, wrt, false);
}

ot_node *ot__autodiff_grad_tree(ot_autodiff *ad, ot_tensor *wrt)
{
    return grad_of(ad, wrt, true);
}

int ot_autodiff_grads(ot_autodiff *ad, int n, ot_tensor *const wrt[], ot_node *g[])
{
    if (!ad) return ot__err_set(OT_ENULL, NULL, 0, "autodiff_grads", "autodiff object is NULL");
    if (n < 0) return ot__err_set(OT_EINVAL, NULL, 0, "autodiff_grads", "negative count %d", n);
    if (n > 0 && (!wrt || !g))
        return ot__err_set(OT_ENULL, NULL, 0, "autodiff_grads", "%s is NULL", wrt ? "g" : "wrt");
    ot_clear_error();
    for (int i = 0; i < n; i++) {
        if ((g[i] = (ot_autodiff_grad)(ad, wrt[i]))) continue;
        int rc = ot_errcode();
        for (int j = 0; j <= i; j++) g[j] = NULL;
        return rc;
    }
    return 0;
}

int (ot_autodiff_backprop)(ot_autodiff *ad, int n, ot_tensor *const wrt[], ot_tensor *const grads[])
{
    if (!ad) return ot__err_null("autodiff_backprop", "autodiff object");
    if (n < 0) return ot__err_set(OT_EINVAL, NULL, 0, "autodiff_backprop", "negative count %d", n);
    if (n > 0 && (!wrt || !grads)) return ot__err_null("autodiff_backprop", wrt ? "grads" : "wrt");
    ot_clear_error();
    for (int i = 0; i < n; i++) {   /* written by position: names must not say otherwise */
        const ot__axes *gw = grads[i] ? grads[i]->leaf.axes : NULL;
        const ot__axes *ww = wrt[i] ? wrt[i]->leaf.axes : NULL;
        if (gw && ww && gw != ww)
            return ot__err_set(OT_EINVAL, NULL, 0, "autodiff_backprop", "gradient buffer %d is "
                               "named (%s) and its wrt (%s): a gradient is in its wrt's layout; "
                               "name the buffer as the wrt, or not at all", i, gw->text, ww->text);
    }
    ot_node **trees = ot__calloc((size_t)(n ? n : 1), sizeof *trees);
    ot_pool *pool = trees ? ot_pool_push() : NULL;
    if (!pool) {
        free(trees);
        return ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_backprop", "out of memory");
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (!(trees[i] = (ot_autodiff_grad)(ad, wrt[i]))) rc = ot_errcode();
    /* One evaluation of every gradient: shared subtrees once; each in its
     * wrt's layout, by position, whatever names its tree carries. */
    if (!rc) rc = ot__assign_by_position("autodiff_backprop", n, grads, trees);
    ot_pool_pop(pool);
    free(trees);
    return rc;
}

ot_tensor *(ot_autodiff_grad_tensor)(ot_autodiff *ad, ot_tensor *wrt)
{
    if (!ad || !wrt) {
        ot__err_null("autodiff_grad_tensor", ad ? "wrt" : "autodiff object");
        return NULL;
    }
    ot_clear_error();
    ot_pool *pool = ot_pool_push();
    if (!pool) return NULL;
    ot_node *g = (ot_autodiff_grad)(ad, wrt);
    ot_tensor *t = g ? (ot_eval)(g) : NULL;
    ot_pool_pop(pool);
    return t;
}

int (ot_autodiff_grad_host)(ot_autodiff *ad, ot_tensor *wrt, void *host)
{
    if (!host) return ot__err_set(OT_ENULL, NULL, 0, "autodiff_grad_host", "host is NULL");
    ot_tensor *t = (ot_autodiff_grad_tensor)(ad, wrt);
    if (!t) return ot_errcode();
    int rc = (ot_get)(t, host);
    ot_tensor_free(t);
    return rc;
}

/* The _at twins: each function above under the caller's file:line. */
OT__AT_TWIN(ot_autodiff *, ot_autodiff_new,
        (ot_node *tree, ot_node *next_error, const char *file, int line),
        (tree, next_error))
OT__AT_TWIN(ot_node *, ot_autodiff_grad,
        (ot_autodiff *ad, ot_tensor *wrt, const char *file, int line),
        (ad, wrt))
OT__AT_TWIN(int, ot_autodiff_backprop,
        (ot_autodiff *ad, int n, ot_tensor *const wrt[], ot_tensor *const grads[],
         const char *file, int line),
        (ad, n, wrt, grads))
OT__AT_TWIN(ot_tensor *, ot_autodiff_grad_tensor,
        (ot_autodiff *ad, ot_tensor *wrt, const char *file, int line),
        (ad, wrt))
OT__AT_TWIN(int, ot_autodiff_grad_host,
        (ot_autodiff *ad, ot_tensor *wrt, void *host, const char *file, int line),
        (ad, wrt, host))

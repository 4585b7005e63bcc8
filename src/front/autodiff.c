/*
 * autodiff.c - reverse-mode autodiff over op-trees: the gradient rule of
 * every op, and the autodiff object (ot_autodiff_*), memoised per backend.
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
#include "internal.h"
#include "ops.h"

#include <pthread.h>

/* Objects a backend keeps for reuse: bounded so that a loop building a new
 * tree per step keeps a fixed number alive. */
#define MEMO_CAP 64
#define LN2 0.693147180559945309417232121458176568
/* safelog's floor, exp(-50), as ref.c computes it. */
#define SAFELOG_FLOOR 1.9287498479639178e-22

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
    int n;
    ot_autodiff *slot[MEMO_CAP];
} ot_ad_memo;

/* ---- builder shorthands -------------------------------------------------- */

/* Gradient nodes carry the call site of the forward node they differentiate,
 * so an error inside a gradient points at the user's line. */
typedef struct ctx {
    const char *file;
    int line;
    ot_backend *be;
} ctx;

static ot_node *B(const ctx *c, ot_op op, ot_node *a, ot_node *b)
{
    return ot_build_at(op, a, b, NULL, c->file, c->line);
}

static ot_node *reduce(const ctx *c, ot_op op, ot_node *x, int axis, bool keepdims)
{
    ot_args r = {.axis = axis, .keepdims = keepdims};
    return ot_build_at(op, x, NULL, &r, c->file, c->line);
}

static ot_node *K(double v) { return ot_const(v); }

static bool is_one(const ot_node *n)
{
    return n && n->kind == OT_NODE_CONST && n->value == 1.0;
}

/* a * b, where the implicit ones gradient multiplies away. */
static ot_node *mul(const ctx *c, ot_node *a, ot_node *b)
{
    if (is_one(a) && b) return b;
    if (is_one(b) && a) return a;
    return B(c, OT_OP_MUL, a, b);
}

/* A read-only zeros view of shape and dtype (stride 0 everywhere, one
 * element of memory), owned by the current pool. Adding it broadcasts a
 * smaller gradient up to a full shape without reading anything real. */
static ot_node *zeros_node(ot_backend *be, ot_shape shape, ot_dtype dt)
{
    ot_tensor *one = ot_zeros(be, OT_SHAPE(), dt);
    ot_tensor *v = one ? ot_broadcast_to(one, shape) : NULL;
    ot_tensor_free(one);
    if (!v) return NULL;
    ot_tensor_set_name(v, "zeros");
    return ot__pool_adopt(&v->leaf);
}

/* g brought up to exactly shape (g must broadcast to it). */
static ot_node *full(const ctx *c, ot_node *g, ot_shape shape, ot_dtype dt)
{
    if (!g || ot__shape_eq(&g->shape, &shape)) return g;
    return B(c, OT_OP_ADD, g, zeros_node(c->be, shape, dt));
}

static ot_node *transpose(const ctx *c, ot_node *x, const int *perm)
{
    ot_args t = {.axis = OT_AXIS_ALL};
    if (perm) memcpy(t.perm, perm, sizeof t.perm);
    return ot_build_at(OT_OP_TRANSPOSE, x, NULL, &t, c->file, c->line);
}

/* g (broadcastable to shape) with a new dim of size 1 inserted at axis:
 * broadcasting against zeros of (1, shape...) adds it in front, and a
 * transpose moves it into place. */
static ot_node *insert_axis(const ctx *c, ot_node *g, ot_shape shape, int axis, ot_dtype dt)
{
    ot_shape s = {.ndim = shape.ndim + 1, .dims = {1}};
    for (int i = 0; i < shape.ndim; i++) s.dims[i + 1] = shape.dims[i];
    ot_node *h = B(c, OT_OP_ADD, g, zeros_node(c->be, s, dt));
    if (axis == 0 || !h) return h;
    int perm[OT_MAX_DIMS] = {0};
    for (int i = 0; i < s.ndim; i++) perm[i] = i < axis ? i + 1 : i == axis ? 0 : i;
    return transpose(c, h, perm);
}

/* The gradient g of a reduction's result (shape out), made to broadcast
 * against the reduced operand again. */
static ot_node *expand_back(const ctx *c, ot_node *g, const ot_node *n)
{
    int axis = n->args.axis;
    if (!g || axis == OT_AXIS_ALL || n->args.keepdims || g->shape.ndim == 0) return g;
    return insert_axis(c, g, n->shape, axis, (ot_dtype)n->dtype);
}

/* A contribution g summed back to shape t (which broadcasts to g's shape):
 * every dim t lacks or has as 1 where g does not is summed away. */
static ot_node *sum_to(const ctx *c, ot_node *g, const ot_shape *t)
{
    if (!g) return NULL;
    ot_shape s = g->shape;
    int lead = s.ndim - t->ndim;
    bool need = lead > 0;
    for (int i = lead > 0 ? lead : 0; i < s.ndim; i++)
        if (s.dims[i] != t->dims[i - lead]) need = true;
    if (!need) return g;
    if (ot__numel(t) == 1) return reduce(c, OT_OP_SUM, g, OT_AXIS_ALL, false);
    /* From the last axis down, so that dropping a leading axis leaves the
     * indices still to visit unchanged. */
    for (int i = s.ndim - 1; i >= 0 && g; i--) {
        int ti = i - lead;
        if (ti < 0) g = reduce(c, OT_OP_SUM, g, i, false);
        else if (t->dims[ti] == 1 && s.dims[i] != 1) g = reduce(c, OT_OP_SUM, g, i, true);
    }
    return g;
}

/* ---- the sweep ----------------------------------------------------------- */

typedef struct sweep {
    ot__walker walker;        /* numbers the nodes: index = post-order position */
    ot_node **order;          /* post-order */
    ot_node **grad;           /* per position; nodes owned by the sweep's pool */
    bool *live;               /* a float leaf is below and gradients reach it */
    int len, cap;
} sweep;

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

static int pos(const sweep *s, const ot_node *n)
{
    return ot__walker_index(&s->walker, n);
}

static bool want(const sweep *s, const ot_node *n)
{
    return n && s->live[pos(s, n)];
}

static bool is_neg(const ot_node *n)
{
    return n->kind == OT_NODE_OP && n->op == OT_OP_NEG && n->tag == OT_OP_NONE;
}

/* p + g, where a negated term becomes a subtraction (exact, one op fewer,
 * and c - a*b fuses into one instruction on the cpu backend). */
static ot_node *accumulate(const ctx *c, ot_node *p, ot_node *g)
{
    if (!p) return g;
    if (is_neg(g)) return B(c, OT_OP_SUB, p, g->a);
    if (is_neg(p)) return B(c, OT_OP_SUB, g, p->a);
    return B(c, OT_OP_ADD, p, g);
}

/* Adds contribution g (summed back to n's shape) to n's gradient. */
static void push(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    g = sum_to(c, g, &n->shape);
    if (!g) return;
    int i = pos(s, n);
    s->grad[i] = accumulate(c, s->grad[i], g);
}

/* ---- rules: elementwise -------------------------------------------------- */

/* NaN where x is NaN, else 0 (sgn is never infinite): added to the mask of
 * a selection, it gives a NaN operand a NaN gradient (the NaN rule of
 * optree.h, "Rules"), where the mask alone would give it 0. */
static ot_node *nan_mark(const ctx *c, ot_node *x)
{
    return B(c, OT_OP_MUL, B(c, OT_OP_SGN, x, NULL), K(0.0));
}

/* An extremum operand's share w under the NaN rule: 0 where the other
 * operand is NaN (the NaN won: eq(other, other) is 0 there), NaN where this
 * one is. A constant other operand that is not NaN never wins so. */
static ot_node *share(const ctx *c, ot_node *w, ot_node *self, ot_node *other)
{
    if (other->kind != OT_NODE_CONST || isnan(other->value))
        w = B(c, OT_OP_MUL, w, B(c, OT_OP_EQ, other, other));
    return B(c, OT_OP_ADD, w, nan_mark(c, self));
}

/* maximum and minimum: the winner takes g, a tie gives each half. w is a's
 * share: (a > b) + (a >= b) halved; a NaN operand wins (the op returns it)
 * and gets NaN. */
static void extremum_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    bool mx = n->op == OT_OP_MAXIMUM;
    ot_node *a = n->a, *b = n->b;
    ot_node *w = B(c, OT_OP_MUL, B(c, OT_OP_ADD, B(c, mx ? OT_OP_GT : OT_OP_LT, a, b),
                                    B(c, mx ? OT_OP_GE : OT_OP_LE, a, b)), K(0.5));
    if (want(s, a)) push(c, s, a, mul(c, g, share(c, w, a, b)));
    if (want(s, b)) push(c, s, b, mul(c, g, share(c, B(c, OT_OP_SUB, K(1.0), w), b, a)));
}

/* pow, by PyTorch's rules (pow_backward, pow_backward_exponent):
 *   d/da = b a^(b-1), and 0 where b == 0: the exponent b - (b != 0) is 0
 *          there, so b a^0 = 0 at a = 0 too, not 0 * inf;
 *   d/db = a^b log a, and 0 where a == 0 and b >= 0: the log's operand is
 *          a + 1 there, so a^b log 1 = 0, not 0 * -inf or 1 * -inf.
 * A constant operand folds its part of the masks. */
static void pow_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *a = n->a, *b = n->b;
    bool kb = b->kind == OT_NODE_CONST;
    if (want(s, a) && !(kb && b->value == 0.0)) {
        ot_node *e = kb ? K(b->value - 1.0) : B(c, OT_OP_SUB, b, B(c, OT_OP_NE, b, K(0.0)));
        push(c, s, a, mul(c, g, B(c, OT_OP_MUL, b, B(c, OT_OP_POW, a, e))));
    }
    if (want(s, b)) {
        ot_node *la = a;
        if (a->kind != OT_NODE_CONST || a->value == 0.0)
            la = B(c, OT_OP_ADD, a, B(c, OT_OP_MUL, B(c, OT_OP_EQ, a, K(0.0)),
                                      B(c, OT_OP_GE, b, K(0.0))));
        push(c, s, b, mul(c, g, B(c, OT_OP_MUL, n, B(c, OT_OP_LOG, la, NULL))));
    }
}

/* add and sub: a broadcast operand sums g over the node's shape, so g must
 * have it (the seed of ones, or a full reduction's g, is smaller). */
static void add_sub_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *a = n->a, *b = n->b;
    if (!ot__shape_eq(&a->shape, &n->shape) || !ot__shape_eq(&b->shape, &n->shape))
        g = full(c, g, n->shape, (ot_dtype)n->dtype);
    if (want(s, a)) push(c, s, a, g);
    if (want(s, b)) push(c, s, b, n->op == OT_OP_ADD ? g : B(c, OT_OP_NEG, g, NULL));
}

/* h = g/b is d/da; d/db = -h (a/b) reuses h and the quotient. */
static void div_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *a = n->a, *b = n->b;
    ot_node *h = B(c, OT_OP_DIV, g, b);
    if (want(s, a)) push(c, s, a, h);
    if (want(s, b)) push(c, s, b, B(c, OT_OP_NEG, B(c, OT_OP_MUL, h, n), NULL));
}

/* ---- rules: reductions, dot, transpose, cast ----------------------------- */

static void reduce_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *x = n->a;
    int axis = n->args.axis;
    ot_node *ge = expand_back(c, g, n);
    if (n->op == OT_OP_SUM) {
        push(c, s, x, ge);
    } else if (n->op == OT_OP_MEAN) {
        int64_t count = axis == OT_AXIS_ALL ? ot__numel(&x->shape) : x->shape.dims[axis];
        push(c, s, x, B(c, OT_OP_DIV, ge, K((double)count)));
    } else {
        /* MAX, MIN: shared equally among the elements equal to it. A NaN
         * extreme equals nothing (mask and ties 0, the ties taken as 1):
         * the NaN elements get NaN, the others 0 (the NaN rule). */
        ot_node *mask = B(c, OT_OP_EQ, x, expand_back(c, n, n));
        ot_node *ties = B(c, OT_OP_MAXIMUM, reduce(c, OT_OP_SUM, mask, axis, true), K(1.0));
        push(c, s, x, mul(c, ge, B(c, OT_OP_ADD, B(c, OT_OP_DIV, mask, ties), nan_mark(c, x))));
    }
}

/* batched_dot: per batch index, the 2-D rule; a shared batch of 1 sums the
 * batches' gradients. */
static void batched_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    static const int swap_last[OT_MAX_DIMS] = {0, 2, 1};
    ot_node *a = n->a, *b = n->b;
    ot_node *gf = full(c, g, n->shape, (ot_dtype)n->dtype);
    if (!gf) return;
    if (want(s, a))
        push(c, s, a, sum_to(c, B(c, OT_OP_BATCHED_DOT, gf, transpose(c, b, swap_last)), &a->shape));
    if (want(s, b))
        push(c, s, b, sum_to(c, B(c, OT_OP_BATCHED_DOT, transpose(c, a, swap_last), gf), &b->shape));
}

/* dot for 1-D and 2-D operands: the products with the other operand
 * transposed; a 1-D operand against a 2-D one gives an outer product. */
static void dot_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    if (n->op == OT_OP_BATCHED_DOT) {
        batched_rule(c, s, n, g);
        return;
    }
    ot_node *a = n->a, *b = n->b;
    int ra = a->shape.ndim, rb = b->shape.ndim;
    ot_dtype dt = (ot_dtype)n->dtype;
    if (ra == 1 && rb == 1) {
        if (want(s, a)) push(c, s, a, mul(c, g, b));
        if (want(s, b)) push(c, s, b, mul(c, g, a));
        return;
    }
    ot_node *gf = full(c, g, n->shape, dt);
    if (!gf) return;
    if (want(s, a)) {
        ot_node *ga = rb == 1 ? B(c, OT_OP_MUL, insert_axis(c, gf, gf->shape, 1, dt), b)
                    : ra == 1 ? B(c, OT_OP_DOT, b, gf)
                              : B(c, OT_OP_DOT, gf, transpose(c, b, NULL));
        push(c, s, a, ga);
    }
    if (want(s, b)) {
        ot_node *gb = ra == 1 ? B(c, OT_OP_MUL, insert_axis(c, a, a->shape, 1, dt), gf)
                              : B(c, OT_OP_DOT, transpose(c, a, NULL), gf);
        push(c, s, b, gb);
    }
}

static void transpose_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    int inv[OT_MAX_DIMS] = {0};
    for (int i = 0; i < n->shape.ndim; i++) inv[n->args.perm[i]] = i;
    if (g->shape.ndim == 0) push(c, s, n->a, g);
    else push(c, s, n->a, transpose(c, full(c, g, n->shape, (ot_dtype)n->dtype), inv));
}

static void cast_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_args to = {.axis = OT_AXIS_ALL, .dtype = (ot_dtype)n->a->dtype};
    if (g->dtype != to.dtype || g->weak)
        g = ot_build_at(OT_OP_CAST, g, NULL, &to, c->file, c->line);
    push(c, s, n->a, g);
}

/* ---- rules: layout ops (slice, reshape, concat) ---------------------------- */

static ot_node *reshape_to(const ctx *c, ot_node *x, ot_shape shape)
{
    if (!x || ot__shape_eq(&x->shape, &shape)) return x;
    return ot_reshape_node_at(x, shape, c->file, c->line);
}

static ot_node *cat(const ctx *c, ot_node *x, ot_node *y, int axis)
{
    ot_args a = {.axis = axis};
    return ot_build_at(OT_OP_CONCAT, x, y, &a, c->file, c->line);
}

/* x with `before` zeros ahead of it and `after` behind it along axis. */
static ot_node *pad(const ctx *c, ot_node *x, int axis, int64_t before, int64_t after)
{
    for (int side = 0; side < 2 && x; side++) {
        int64_t len = side ? after : before;
        if (len == 0) continue;
        ot_shape z = x->shape;
        z.dims[axis] = len;
        ot_node *zeros = zeros_node(c->be, z, (ot_dtype)x->dtype);
        x = side ? cat(c, x, zeros, axis) : cat(c, zeros, x, axis);
    }
    return x;
}

/* x (count along axis) spread to every |step|-th place of a dim of size
 * dim from first, zeros between and around: a range of a slice undone. */
static ot_node *unslice_axis(const ctx *c, ot_node *x, int axis, int64_t first, int64_t step,
                             int64_t dim)
{
    int64_t count = x->shape.dims[axis];
    if (count == 0) return pad(c, x, axis, dim, 0);
    ot_index all[OT_MAX_DIMS];
    for (int d = 0; d < x->shape.ndim; d++) all[d] = OT_ALL;
    if (step < 0) {   /* reversed: the same elements read forwards */
        all[axis] = (ot_index){OT_INDEX_RANGE, OT_NONE, OT_NONE, -1};
        x = ot_slice_node_n(x, x->shape.ndim, all, c->file, c->line);
        first += (count - 1) * step;
        step = -step;
        all[axis] = OT_ALL;
    }
    if (x && step > 1) {   /* (.., count, ..) -> (.., count, step, ..), zeros after each */
        ot_shape s = x->shape, wide;
        wide.ndim = s.ndim + 1;
        for (int d = 0, j = 0; d < wide.ndim; d++) wide.dims[d] = d == axis + 1 ? 1 : s.dims[j++];
        x = pad(c, reshape_to(c, x, wide), axis + 1, 0, step - 1);
        s.dims[axis] = count * step;
        x = reshape_to(c, x, s);
        all[axis] = (ot_index){OT_INDEX_RANGE, 0, (count - 1) * step + 1, 1};
        if (x) x = ot_slice_node_n(x, x->shape.ndim, all, c->file, c->line);
    }
    int64_t len = (count - 1) * step + 1;
    return x ? pad(c, x, axis, first, dim - first - len) : NULL;
}

/* The gradient of a slice: g scattered into zeros of the operand's shape,
 * as dropped dims of size 1 put back, then each range undone. */
static void slice_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    const ot_shape *in = &n->a->shape;
    const ot_args *a = &n->args;
    ot_shape kept = *in;
    for (int d = 0; d < in->ndim; d++) kept.dims[d] = a->perm[d] ? a->shape.dims[d] : 1;
    ot_node *x = reshape_to(c, full(c, g, n->shape, (ot_dtype)n->dtype), kept);
    for (int d = 0; d < in->ndim && x; d++) {
        bool whole = a->perm[d] == 1 && a->start[d] == 0 && a->shape.dims[d] == in->dims[d];
        if (!whole) x = unslice_axis(c, x, d, a->start[d], a->perm[d] ? a->perm[d] : 1, in->dims[d]);
    }
    push(c, s, n->a, x);
}

static void reshape_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    push(c, s, n->a, reshape_to(c, full(c, g, n->shape, (ot_dtype)n->dtype), n->a->shape));
}

/* Each part's gradient is its slice of g. */
static void concat_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    g = full(c, g, n->shape, (ot_dtype)n->dtype);
    if (!g) return;
    int axis = n->args.axis;
    ot_node *part[2];
    int64_t sizes[2] = {n->a->shape.dims[axis], n->b->shape.dims[axis]};
    if (ot_split_at(g, axis, 2, sizes, part, c->file, c->line)) return;
    if (want(s, n->a)) push(c, s, n->a, part[0]);
    if (want(s, n->b)) push(c, s, n->b, part[1]);
}

/* ---- rules: composites --------------------------------------------------- */

/* x - mean(x) along the composite's axis, and its number of degrees of
 * freedom: var's root divides by it as a constant. */
static ot_node *centered(const ctx *c, ot_node *x, int axis)
{
    return B(c, OT_OP_SUB, x, ot__mean_refined(x, axis, c->file, c->line));
}

static void var_std_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    bool is_std = n->tag == OT_OP_STD;
    const ot_node *var = is_std ? n->a : n;
    double dof = var->b->value;
    ot_node *x = n->tag_a, *ge = expand_back(c, g, n);
    ot_node *d = centered(c, x, n->args.axis);
    if (is_std) { /* g (x - mean) / (dof std), and 0 where std == 0 (PyTorch) */
        ot_node *sd = expand_back(c, n, n);
        ot_node *w = B(c, OT_OP_DIV, B(c, OT_OP_NE, sd, K(0.0)),
                       B(c, OT_OP_ADD, B(c, OT_OP_MUL, sd, K(dof)), B(c, OT_OP_EQ, sd, K(0.0))));
        push(c, s, x, mul(c, mul(c, ge, d), w));
    } else /* 2 g (x - mean) / dof */
        push(c, s, x, mul(c, ge, B(c, OT_OP_DIV, B(c, OT_OP_MUL, d, K(2.0)), K(dof))));
}

static void softmax_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *x = n->tag_a;
    int axis = n->args.axis;
    if (n->tag == OT_OP_SOFTMAX) { /* s (g - sum(g s)) */
        ot_node *gs = reduce(c, OT_OP_SUM, mul(c, g, n), axis, true);
        push(c, s, x, B(c, OT_OP_MUL, n, B(c, OT_OP_SUB, g, gs)));
        return;
    }
    /* logsoftmax l: g - exp(l) sum(g); exp(l) is the softmax, and l itself
     * was computed stably, so no log of a softmax appears. A scalar g (the
     * implicit ones) sums to g times the count. */
    int64_t count = axis == OT_AXIS_ALL ? ot__numel(&n->shape) : n->shape.dims[axis];
    ot_node *gsum = g->shape.ndim == 0 ? mul(c, g, K((double)count))
                  : reduce(c, OT_OP_SUM, full(c, g, n->shape, (ot_dtype)n->dtype), axis, true);
    push(c, s, x, B(c, OT_OP_SUB, g, B(c, OT_OP_MUL, B(c, OT_OP_EXP, n, NULL), gsum)));
}

/* cross_entropy(p, t) = -sum(t log p), where log p is the node the forward
 * computes (node.c's log_probs): max(logsoftmax(x), -FLT_MAX) when p is a
 * softmax(x), on whatever axes, else safelog(p). d/dt is minus that very
 * node, so a logit of -1000 gives the loss's 1000, not safelog's cap of 50.
 * Through a softmax the gradient skips p: with G = g t brought to the
 * product's shape and summed to p's, d/dx = p sum(G) - G (the logsoftmax
 * rule), which is softmax - t when the targets sum to 1. The -FLT_MAX
 * floor is not differentiated for x: it is reached only where a logit gap
 * overflows, and the softmax there is 0. */
static void cross_entropy_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *p = n->tag_a, *t = n->tag_b, *ge = expand_back(c, g, n);
    ot_node *prod = n->a->a, *logp = prod->b;   /* neg(sum(t * log p)) */
    bool softmax = p->kind == OT_NODE_OP && p->tag == OT_OP_SOFTMAX;
    if (softmax && want(s, p->tag_a)) {
        ot_node *gp = sum_to(c, full(c, mul(c, ge, t), prod->shape, (ot_dtype)prod->dtype),
                             &p->shape);
        push(c, s, p->tag_a, B(c, OT_OP_SUB, B(c, OT_OP_MUL, p, reduce(c, OT_OP_SUM, gp,
                                                                        p->args.axis, true)), gp));
    } else if (!softmax && want(s, p)) {
        ot_node *dlog = B(c, OT_OP_DIV, B(c, OT_OP_GT, p, K(SAFELOG_FLOOR)),
                          B(c, OT_OP_MAXIMUM, p, K(SAFELOG_FLOOR)));
        push(c, s, p, B(c, OT_OP_NEG, mul(c, ge, B(c, OT_OP_MUL, t, dlog)), NULL));
    }
    if (want(s, t)) push(c, s, t, B(c, OT_OP_NEG, mul(c, ge, logp), NULL));
}

/* g on [lo, hi], NaN at a NaN x (the NaN rule). */
static void clip_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *x = n->tag_a;
    ot_node *in = B(c, OT_OP_MUL, B(c, OT_OP_GE, x, K(n->args.lo)), B(c, OT_OP_LE, x, K(n->args.hi)));
    push(c, s, x, mul(c, g, B(c, OT_OP_ADD, in, nan_mark(c, x))));
}

static void squared_l2_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *x = n->tag_a;
    push(c, s, x, mul(c, expand_back(c, g, n), B(c, OT_OP_MUL, x, K(2.0))));
}

/* ---- rules: registered ops ------------------------------------------------ */

/* A registered op (ot_op_register) by its gradient builder, one operand at
 * a time. The contribution may have any shape that broadcasts to the
 * node's: it is brought up to it, then summed back to the operand's. g is
 * brought up first where an operand is broadcast, as add's rule does, so
 * the builder sees the node's shape. */
static void custom_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    const ot_custom *u = n->custom;
    ot_node *x = n->a, *y = n->b;
    if (!ot__shape_eq(&x->shape, &n->shape) || (y && !ot__shape_eq(&y->shape, &n->shape)))
        g = full(c, g, n->shape, (ot_dtype)n->dtype);
    for (int k = 0; k < u->def.arity && g; k++) {
        ot_node *operand = k ? y : x;
        if (!want(s, operand)) continue;
        ot_node *d = u->def.grad(x, y, n, g, k, u->def.user);
        if (!d && !ot_errcode())
            ot__err(OT_EINVAL, n->file, n->line, "autodiff",
                    "the gradient builder of op '%s' returned NULL for operand %d", u->name, k);
        if (!d) return;
        push(c, s, operand, full(c, d, n->shape, (ot_dtype)n->dtype));
    }
}

/* ---- the rule of each op, from src/ops.def -------------------------------- */

typedef void (*rule_fn)(const ctx *c, sweep *s, ot_node *n, ot_node *g);

/* The vocabulary of the table's dx and dy expressions: x, y (the operands),
 * out (the node), g (its gradient), k(v), mul(a, b) (the product above,
 * which drops a factor 1), op1(E, a), op2(E, a, b). */
#define k(v) K(v)
#define mul(a, b) mul(c, a, b)
#define op1(E, a) B(c, OT_OP_##E, a, NULL)
#define op2(E, a, b) B(c, OT_OP_##E, a, b)
#define RULE_VARS                                                                  \
    ot_node *x = n->a, *y = n->b, *out = n;                                        \
    (void)x, (void)y, (void)out
/* UN and BIN rows define rule_<E>; FN rows name their function; NONE rows
 * (OT_FLAG_NODIFF) have none. */
#define RULE_DEF_NONE(E, dx, dy)
#define RULE_DEF_FN(E, dx, dy)
#define RULE_DEF_UN(E, dx, dy)                                                     \
    static void rule_##E(const ctx *c, sweep *s, ot_node *n, ot_node *g)          \
    {                                                                              \
        RULE_VARS;                                                                 \
        push(c, s, x, dx);                                                         \
    }
#define RULE_DEF_BIN(E, dx, dy)                                                    \
    static void rule_##E(const ctx *c, sweep *s, ot_node *n, ot_node *g)          \
    {                                                                              \
        RULE_VARS;                                                                 \
        if (want(s, x)) push(c, s, x, dx);                                         \
        if (want(s, y)) push(c, s, y, dy);                                         \
    }
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, VFN, U10, U35, JIT, GRAD, DX, DY, ...) \
    RULE_DEF_##GRAD(E, DX, DY)
#include "ops.def"
#undef OT_OP
#undef k
#undef mul
#undef op1
#undef op2

#define RULE_OF_NONE(E, dx)
#define RULE_OF_FN(E, dx) [OT_OP_##E] = dx,
#define RULE_OF_UN(E, dx) [OT_OP_##E] = rule_##E,
#define RULE_OF_BIN(E, dx) [OT_OP_##E] = rule_##E,
static const rule_fn rules[OT_OP_COUNT] = {
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, VFN, U10, U35, JIT, GRAD, DX, ...) \
    RULE_OF_##GRAD(E, DX)
#include "ops.def"
#undef OT_OP
};

bool ot__autodiff_has_rule(int op) { return op >= 0 && op < OT_OP_COUNT && rules[op]; }

/* Pushes node n's gradient g to its operands; OT_EUNSUPPORTED for an op
 * without a rule. */
static int apply(sweep *s, ot_backend *be, ot_node *n, ot_node *g)
{
    ctx c = {n->file, n->line, be};
    /* A composite's tagged root is differentiated by the composite's rule. */
    int op = n->tag != OT_OP_NONE ? n->tag : n->op;
    if (ot__autodiff_has_rule(op)) {
        rules[op](&c, s, n, g);
        return 0;
    }
    if (ot_op_name((ot_op)op))
        return ot__err_set(OT_EUNSUPPORTED, n->file, n->line, "autodiff",
                           "no gradient rule for op %s", ot_op_name((ot_op)op));
    return ot__err_set(OT_EUNSUPPORTED, n->file, n->line, "autodiff",
                       "no gradient rule for op %d", op);
}

/* Walks the tree backwards from its root's gradient g0. */
static int backward(sweep *s, ot_backend *be, ot_node *g0)
{
    /* A NULL seed would leave every gradient unset, which reads as zeros. */
    if (!g0) return ot_errcode();
    s->grad[s->len - 1] = g0;
    for (int i = s->len - 1; i >= 0; i--) {
        if (!s->grad[i] || !s->live[i] || s->order[i]->kind != OT_NODE_OP) continue;
        int rc = apply(s, be, s->order[i], s->grad[i]);
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
        if (!s.grad) rc = ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_new", "out of memory");
    }
    if (!rc) rc = backward(&s, ad->be, ad->next_error ? ad->next_error : K(1.0));
    if (!rc) rc = keep_leaves(ad, &s);
    ot_pool_pop(pool);
    ot__walker_free(&s.walker);
    free(s.order);
    free(s.grad);
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
    if (!old) {
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

ot_autodiff *ot_autodiff_new(ot_node *tree, ot_node *next_error)
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
    g = full(c, g, l->shape, (ot_dtype)l->dtype);
    /* inserted size-1 dims summed away (one element each), the last first */
    for (int d = nd - 1; d >= 0 && g; d--)
        if (perm[d] < 0) g = reduce(c, OT_OP_SUM, g, d, false);
    for (int d = 0; d < nd; d++)
        if (perm[d] >= 0) kept[k++] = perm[d];
    if (identity(kept, k)) return g;
    int inv[OT_MAX_DIMS] = {0};
    for (int d = 0; d < k; d++) inv[kept[d]] = d;
    return transpose(c, g, inv);
}

/* g as wrt's shape and dtype: zeros where nothing reached it. */
static ot_node *fit(const ctx *c, ot_node *g, const ot_tensor *wrt)
{
    ot_dtype dt = (ot_dtype)wrt->leaf.dtype;
    if (!g) return zeros_node(c->be, wrt->leaf.shape, dt);
    if (g->dtype != dt || g->weak) {
        ot_args to = {.axis = OT_AXIS_ALL, .dtype = dt};
        g = ot_build_at(OT_OP_CAST, g, NULL, &to, c->file, c->line);
    }
    /* A gradient that reads no tensor (f = x, f = 3 x: a constant) has no
     * backend to evaluate on; adding zeros of wrt's shape gives it wrt's,
     * even where the shapes already agree (0-d). */
    if (g && !g->be) return B(c, OT_OP_ADD, g, zeros_node(c->be, wrt->leaf.shape, dt));
    return full(c, g, wrt->leaf.shape, dt);
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
    ot_node *g = full(c, ad->grad[i], l->leaf.shape, (ot_dtype)l->leaf.dtype);
    ot_tensor *v = ot__view_new(acc, &s, l->strides, l->offset - lo, "autodiff_grad");
    if (!v) return ot_errcode();
    int dim, rc;
    if (ot__internal_overlap(v, &dim))
        rc = ot__err(OT_EUNSUPPORTED, NULL, 0, "autodiff_grad", "the tree reads %s through a "
                     "view whose dim %d reads its elements more than once, not by broadcasting",
                     name_of(l), dim);
    else
        rc = ot_assign(v, B(c, OT_OP_ADD, &v->leaf, sum_to(c, g, &s)));
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
    ot_tensor *acc = ot_zeros(c->be, OT_SHAPE(hi - lo + 1), (ot_dtype)wrt->leaf.dtype);
    ot_pool *pool = acc ? ot_pool_push() : NULL;
    int rc = pool ? 0 : ot_errcode();
    for (int i = 0; i < ad->nleaves && !rc; i++)
        if (ot__overlap(ad->leaf[i], wrt) != OT_OVERLAP_NONE) rc = scatter_leaf(c, ad, i, acc, lo);
    if (pool) ot_pool_pop(pool);
    ot_tensor *r = rc ? NULL : ot__view_new(acc, &wrt->leaf.shape, wrt->strides,
                                            wrt->offset - lo, "autodiff_grad");
    ot_tensor_free(acc);
    return r ? ot__pool_adopt(&r->leaf) : NULL;
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

ot_node *ot_autodiff_grad(ot_autodiff *ad, ot_tensor *wrt)
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
        if ((g[i] = ot_autodiff_grad(ad, wrt[i]))) continue;
        int rc = ot_errcode();
        for (int j = 0; j <= i; j++) g[j] = NULL;
        return rc;
    }
    return 0;
}

int ot_autodiff_backprop(ot_autodiff *ad, int n, ot_tensor *const wrt[], ot_tensor *const grads[])
{
    if (!ad) return ot__err_null("autodiff_backprop", "autodiff object");
    if (n < 0) return ot__err_set(OT_EINVAL, NULL, 0, "autodiff_backprop", "negative count %d", n);
    if (n > 0 && (!wrt || !grads)) return ot__err_null("autodiff_backprop", wrt ? "grads" : "wrt");
    ot_clear_error();
    ot_node **trees = ot__calloc((size_t)(n ? n : 1), sizeof *trees);
    ot_pool *pool = trees ? ot_pool_push() : NULL;
    if (!pool) {
        free(trees);
        return ot__err_set(OT_ENOMEM, NULL, 0, "autodiff_backprop", "out of memory");
    }
    int rc = 0;
    for (int i = 0; i < n && !rc; i++)
        if (!(trees[i] = ot_autodiff_grad(ad, wrt[i]))) rc = ot_errcode();
    /* One evaluation of every gradient: shared subtrees once. */
    if (!rc) rc = ot_assign_many(n, grads, trees);
    ot_pool_pop(pool);
    free(trees);
    return rc;
}

ot_tensor *ot_autodiff_grad_tensor(ot_autodiff *ad, ot_tensor *wrt)
{
    if (!ad || !wrt) {
        ot__err_null("autodiff_grad_tensor", ad ? "wrt" : "autodiff object");
        return NULL;
    }
    ot_clear_error();
    ot_pool *pool = ot_pool_push();
    if (!pool) return NULL;
    ot_node *g = ot_autodiff_grad(ad, wrt);
    ot_tensor *t = g ? ot_eval(g) : NULL;
    ot_pool_pop(pool);
    return t;
}

int ot_autodiff_grad_host(ot_autodiff *ad, ot_tensor *wrt, void *host)
{
    if (!host) return ot__err_set(OT_ENULL, NULL, 0, "autodiff_grad_host", "host is NULL");
    ot_tensor *t = ot_autodiff_grad_tensor(ad, wrt);
    if (!t) return ot_errcode();
    int rc = ot_get(t, host);
    ot_tensor_free(t);
    return rc;
}

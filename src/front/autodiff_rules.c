/*
 * autodiff_rules.c - the gradient rule of every op (the table's dx and dy
 * expressions from src/core/ops.def, and a function per op that needs more),
 * the builder shorthands they are written in, and how a contribution is
 * added to an operand's gradient in the sweep (autodiff.c walks the tree;
 * the conventions and singular points of the rules are listed there).
 */
#include "autodiff.h"

#include <math.h>

#define LN2 0.693147180559945309417232121458176568
/* safelog's floor, exp(-50), as ref.c computes it. */
#define SAFELOG_FLOOR 1.9287498479639178e-22

/* ---- builder shorthands -------------------------------------------------- */

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
ot_node *ot__ad_zeros(ot_backend *be, ot_shape shape, ot_dtype dt)
{
    ot_tensor *one = (ot_zeros)(be, OT_SHAPE(), dt);
    ot_tensor *v = one ? (ot_broadcast_to)(one, shape) : NULL;
    ot_tensor_free(one);
    if (!v) return NULL;
    (ot_tensor_set_name)(v, "zeros");
    return ot__pool_adopt(&v->leaf);
}

/* g brought up to exactly shape (g must broadcast to it). */
ot_node *ot__ad_full(const ctx *c, ot_node *g, ot_shape shape, ot_dtype dt)
{
    if (!g || ot__shape_eq(&g->shape, &shape)) return g;
    return B(c, OT_OP_ADD, g, ot__ad_zeros(c->be, shape, dt));
}

ot_node *ot__ad_transpose(const ctx *c, ot_node *x, const int *perm)
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
    ot_node *h = B(c, OT_OP_ADD, g, ot__ad_zeros(c->be, s, dt));
    if (axis == 0 || !h) return h;
    int perm[OT_MAX_DIMS] = {0};
    for (int i = 0; i < s.ndim; i++) perm[i] = i < axis ? i + 1 : i == axis ? 0 : i;
    return ot__ad_transpose(c, h, perm);
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
ot_node *ot__ad_sum_to(const ctx *c, ot_node *g, const ot_shape *t)
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

/* ---- contributions ------------------------------------------------------- */

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

/* Adds contribution g (summed back to n's shape) to n's gradient. A
 * contribution wider than n waits in s->wide, where later ones of its
 * shape add to it, so that their total is summed back once: a value that
 * two broadcasts of n reach (x - mean used twice) took two sums, each a
 * pass over x, where one suffices. */
static void push(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    if (!g) return;
    int i = pos(s, n);
    if (ot__shape_eq(&g->shape, &n->shape)) {
        s->grad[i] = accumulate(c, s->grad[i], g);
        return;
    }
    ot_node *w = s->wide[i];
    if (w && ot__shape_eq(&w->shape, &g->shape)) {
        s->wide[i] = accumulate(c, w, g);
        return;
    }
    ot__ad_settle(c, s, i);
    s->wide[i] = g;
}

void ot__ad_settle(const ctx *c, sweep *s, int i)
{
    ot_node *g = ot__ad_sum_to(c, s->wide[i], &s->order[i]->shape);
    s->wide[i] = NULL;
    if (g) s->grad[i] = accumulate(c, s->grad[i], g);
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
        g = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
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

/* ---- standardisation's closed form ---------------------------------------- */

static bool is_plain(const ot_node *n, ot_op op)
{
    return n && n->kind == OT_NODE_OP && n->op == op && n->tag == OT_OP_NONE;
}

/* The axes of a chain of keepdims means from top down to base, in the
 * order they apply (base's first): their count, 0 when top is no such
 * chain. */
static int mean_axes(const ot_node *top, const ot_node *base, int axes[OT_MAX_DIMS])
{
    int n = 0, rev[OT_MAX_DIMS];
    for (const ot_node *m = top; m != base; m = m->a) {
        if (n == OT_MAX_DIMS || !is_plain(m, OT_OP_MEAN) || !m->args.keepdims ||
            m->args.axis == OT_AXIS_ALL)
            return 0;
        rev[n++] = m->args.axis;
    }
    for (int i = 0; i < n; i++) axes[i] = rev[n - 1 - i];
    return n;
}

/* The base of a chain of means from top down (top itself when it is no
 * mean). */
static const ot_node *below_means(const ot_node *top)
{
    while (is_plain(top, OT_OP_MEAN)) top = top->a;
    return top;
}

/* Whether n is (x - m) * rsqrt(v + eps) with m the keepdims means of x
 * along some axes, v those of (x - m)^2 along the same, the same x - m
 * node in both places and eps a constant (norm.c's batch and layer norm
 * build it so: moments, normalise): its x then in *x, the axes in axes. */
static int standardises(const ot_node *n, const ot_node **x, int axes[OT_MAX_DIMS])
{
    const ot_node *d = n->a, *inv = n->b;
    if (!is_plain(n, OT_OP_MUL) || !is_plain(d, OT_OP_SUB) || !is_plain(inv, OT_OP_RSQRT))
        return 0;
    const ot_node *ve = inv->a;
    if (!is_plain(ve, OT_OP_ADD) || !ve->b || ve->b->kind != OT_NODE_CONST) return 0;
    const ot_node *sq = below_means(ve->a);
    if (!is_plain(sq, OT_OP_SQR) || sq->a != d) return 0;
    int va[OT_MAX_DIMS], k = mean_axes(d->b, d->a, axes);
    if (!k || mean_axes(ve->a, sq, va) != k || memcmp(axes, va, sizeof *va * (size_t)k)) return 0;
    *x = d->a;
    return k;
}

/* The keepdims means of v along axes[0..k). */
static ot_node *means_along(const ctx *c, ot_node *v, const int *axes, int k)
{
    for (int i = 0; i < k && v; i++) v = reduce(c, OT_OP_MEAN, v, axes[i], true);
    return v;
}

/* d/dx of a standardisation y = (x - m) * r (standardises): with G the
 * incoming gradient, r (G - mean(G) - y mean(G y)), where the plain rules
 * would push G through r's variance and m's mean in a chain of four
 * dependent sums (each waiting for the one before: the sum through m
 * needs v's gradient, which needs the sum through r). The sum that flows
 * through m from v's branch is r^3 mean(G (x - m)) mean(x - m), zero
 * exactly, so its reads go, and the two sums left depend on m and r only:
 * layer norm's d/dx over 4096x4096 f32 in 5 kernels took 15.4-18.5 ms,
 * this form 12.7-15.8. Whatever else reads x - m, m or r (nothing in
 * norm.c's trees) still gets its gradient by its own rule. Whether the
 * form is taken is only a function of the node's structure, so a plan
 * keyed by it is too. */
static bool standardise_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    const ot_node *x;
    int axes[OT_MAX_DIMS], k = standardises(n, &x, axes);
    if (!k) return false;
    if (!want(s, x)) return true;
    ot_node *d = n->a, *r = n->b, *gf = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    ot_node *mg = means_along(c, gf, axes, k);
    ot_node *mgd = means_along(c, B(c, OT_OP_MUL, gf, d), axes, k);
    ot_node *dr2 = B(c, OT_OP_MUL, d, B(c, OT_OP_MUL, r, r));
    ot_node *inner = B(c, OT_OP_SUB, B(c, OT_OP_SUB, gf, mg), B(c, OT_OP_MUL, dr2, mgd));
    push(c, s, (ot_node *)x, B(c, OT_OP_MUL, r, inner));
    return true;
}

/* batched_dot: per batch index, the 2-D rule; a shared batch of 1 sums the
 * batches' gradients. */
static void batched_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    static const int swap_last[OT_MAX_DIMS] = {0, 2, 1};
    ot_node *a = n->a, *b = n->b;
    ot_node *gf = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    if (!gf) return;
    if (want(s, a))
        push(c, s, a, ot__ad_sum_to(c, B(c, OT_OP_BATCHED_DOT, gf, ot__ad_transpose(c, b, swap_last)),
                                    &a->shape));
    if (want(s, b))
        push(c, s, b, ot__ad_sum_to(c, B(c, OT_OP_BATCHED_DOT, ot__ad_transpose(c, a, swap_last), gf),
                                    &b->shape));
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
    ot_node *gf = ot__ad_full(c, g, n->shape, dt);
    if (!gf) return;
    if (want(s, a)) {
        ot_node *ga = rb == 1 ? B(c, OT_OP_MUL, insert_axis(c, gf, gf->shape, 1, dt), b)
                    : ra == 1 ? B(c, OT_OP_DOT, b, gf)
                              : B(c, OT_OP_DOT, gf, ot__ad_transpose(c, b, NULL));
        push(c, s, a, ga);
    }
    if (want(s, b)) {
        ot_node *gb = ra == 1 ? B(c, OT_OP_MUL, insert_axis(c, a, a->shape, 1, dt), gf)
                              : B(c, OT_OP_DOT, ot__ad_transpose(c, a, NULL), gf);
        push(c, s, b, gb);
    }
}

/* conv, conv_transpose, conv_wgrad: windowed nodes of g (conv_shape.c). */
static void conv_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *gf = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    if (want(s, n->a)) push(c, s, n->a, ot__conv_grad(n, gf, 0, c->file, c->line));
    if (want(s, n->b)) push(c, s, n->b, ot__conv_grad(n, gf, 1, c->file, c->line));
}

/* Pooling: pooling nodes of g (pool_shape.c); none where the op is flat. */
static void pool_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *gf = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    for (int i = 0; i < 2; i++) {
        ot_node *o = i ? n->b : n->a, *d;
        if (o && want(s, o) && (d = ot__pool_grad(n, gf, i, c->file, c->line))) push(c, s, o, d);
    }
}

/* Indexing: indexing nodes of g (index_shape.c); none in indices and in a
 * select's condition. */
static void index_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *gf = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    for (int i = 0; i < 2; i++) {
        ot_node *o = i ? n->b : n->a, *d;
        if (o && want(s, o) && (d = ot__index_grad(n, gf, i, c->file, c->line))) push(c, s, o, d);
    }
}

/* Attention: one attention_grad node gives q's and the pack's (k, v and
 * the mask) gradients (attn_shape.c). */
static void attn_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *gf = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype), *dq, *dp;
    if (!ot__attn_grads(n, gf, &dq, &dp, c->file, c->line)) return;
    if (want(s, n->a)) push(c, s, n->a, dq);
    if (want(s, n->b)) push(c, s, n->b, dp);
}

/* attention_grad has no gradient rule of its own (a second derivative of
 * attention would need the backward's own backward): refused, never a
 * silent zero. */
static void attn_grad_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    (void)c, (void)s, (void)g;
    ot__err(OT_EUNSUPPORTED, n->file, n->line, "autodiff",
            "attention_grad: no second derivative of attention (its gradient is not differentiable)");
}

static void transpose_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    int inv[OT_MAX_DIMS] = {0};
    for (int i = 0; i < n->shape.ndim; i++) inv[n->args.perm[i]] = i;
    if (g->shape.ndim == 0) push(c, s, n->a, g);
    else push(c, s, n->a,
              ot__ad_transpose(c, ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype), inv));
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
        ot_node *zeros = ot__ad_zeros(c->be, z, (ot_dtype)x->dtype);
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
    ot_node *x = reshape_to(c, ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype), kept);
    for (int d = 0; d < in->ndim && x; d++) {
        bool whole = a->perm[d] == 1 && a->start[d] == 0 && a->shape.dims[d] == in->dims[d];
        if (!whole) x = unslice_axis(c, x, d, a->start[d], a->perm[d] ? a->perm[d] : 1, in->dims[d]);
    }
    push(c, s, n->a, x);
}

static void reshape_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    push(c, s, n->a, reshape_to(c, ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype), n->a->shape));
}

/* Each part's gradient is its slice of g. */
static void concat_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    g = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
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
                  : reduce(c, OT_OP_SUM, ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype), axis, true);
    push(c, s, x, B(c, OT_OP_SUB, g, B(c, OT_OP_MUL, B(c, OT_OP_EXP, n, NULL), gsum)));
}

/* cross_entropy(p, t) = -sum(t log p), where log p is the node the forward
 * computes (node.c's log_probs): max(logsoftmax(x), -65504) when p is a
 * softmax(x), on whatever axes, else safelog(p). d/dt is minus that very
 * node, so a logit of -1000 gives the loss's 1000, not safelog's cap of 50.
 * Through a softmax the gradient skips p: with G = g t brought to the
 * product's shape and summed to p's, d/dx = p sum(G) - G (the logsoftmax
 * rule), which is softmax - t when the targets sum to 1. The -65504
 * floor is not differentiated for x: it is reached only where a logit gap
 * passes 65504, and the softmax there is 0. */
static void cross_entropy_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    ot_node *p = n->tag_a, *t = n->tag_b, *ge = expand_back(c, g, n);
    ot_node *prod = n->a->a, *logp = prod->b;   /* neg(sum(t * log p)) */
    bool softmax = p->kind == OT_NODE_OP && p->tag == OT_OP_SOFTMAX;
    if (softmax && want(s, p->tag_a)) {
        ot_node *gp = ot__ad_sum_to(
            c, ot__ad_full(c, mul(c, ge, t), prod->shape, (ot_dtype)prod->dtype), &p->shape);
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
/* A structured registered op (ot_op_register_structured) by its gradient
 * rule, given g in the node's shape: each contribution is summed back to
 * its operand's shape. */
static void struct_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    const ot_custom *u = n->custom;
    ot_node *in[OT_STRUCT_MAX_ARITY + 1] = {n->a, n->b};
    g = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    for (int k = 0; k < u->def.arity && g; k++) {
        if (!want(s, in[k])) continue;
        ot_node *d = u->sdef.grad(u->def.arity, in, n, g, k, &n->args, u->sdef.user);
        if (!d && !ot_errcode())
            ot__err(OT_EINVAL, n->file, n->line, "autodiff",
                    "the gradient rule of op '%s' returned NULL for operand %d", u->name, k);
        if (!d) return;
        push(c, s, in[k], d);
    }
}

static void custom_rule(const ctx *c, sweep *s, ot_node *n, ot_node *g)
{
    const ot_custom *u = n->custom;
    if (u->structured) {
        struct_rule(c, s, n, g);
        return;
    }
    ot_node *x = n->a, *y = n->b;
    if (!ot__shape_eq(&x->shape, &n->shape) || (y && !ot__shape_eq(&y->shape, &n->shape)))
        g = ot__ad_full(c, g, n->shape, (ot_dtype)n->dtype);
    for (int k = 0; k < u->def.arity && g; k++) {
        ot_node *operand = k ? y : x;
        if (!want(s, operand)) continue;
        ot_node *d = u->def.grad(x, y, n, g, k, u->def.user);
        if (!d && !ot_errcode())
            ot__err(OT_EINVAL, n->file, n->line, "autodiff",
                    "the gradient builder of op '%s' returned NULL for operand %d", u->name, k);
        if (!d) return;
        push(c, s, operand, ot__ad_full(c, d, n->shape, (ot_dtype)n->dtype));
    }
}

/* ---- the rule of each op, from src/core/ops.def -------------------------------- */

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
int ot__ad_apply(sweep *s, ot_backend *be, ot_node *n, ot_node *g)
{
    ctx c = {n->file, n->line, be};
    /* A composite's tagged root is differentiated by the composite's rule. */
    int op = n->tag != OT_OP_NONE ? n->tag : n->op;
    if (op == OT_OP_MUL && standardise_rule(&c, s, n, g)) return 0;
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

/*
 * pool_shape.c - the pooling ops (max_pool, avg_pool and their gradients
 * max_pool_grad, max_pool_take, avg_pool_grad): the public builders of
 * include/optree/pool.h, which turn ot_pool_opts into a node's geometry
 * (args.win, the window in ksize), the inference ot_build_at runs for them
 * (node.c): shape and dtype or a message naming the shapes and the
 * caller's line, the loop's geometry the backends run, and the gradient
 * nodes autodiff builds. The size rules are PyTorch's.
 */
#include "node_build.h"

#include <stdio.h>

/* ---- the geometry ---------------------------------------------------------- */

/* One spatial dim's output size (floor, or ceil where a window still
 * starts inside the input or its left padding); -1 when the window does
 * not fit the padded input. */
static int64_t pool_out_size(int64_t in, int64_t k, int64_t s, int64_t dil, int64_t lo,
                             int64_t hi, bool ceil_mode)
{
    int64_t span = dil * (k - 1) + 1, room = in + lo + hi - span;
    if (room < 0) return -1;
    int64_t out = (ceil_mode ? (room + s - 1) / s : room / s) + 1;
    if (ceil_mode && (out - 1) * s >= in + lo) out--;
    return out;
}

static bool is_avg(int op) { return op == OT_OP_AVG_POOL || op == OT_OP_AVG_POOL_GRAD; }

/* Checks the used entries of w (nsp spatial dims) for op; the rest must
 * be zero, as the builders leave them (equal geometries are equal words:
 * node identity), since ot_build_at and ot_parse would otherwise drop an
 * entry given for a dim the operand lacks. A stride left all zero is the
 * kernel, a dilation left all zero 1. */
static int check_window(const site *st, ot_window *w, int nsp)
{
    bool avg = is_avg(st->op), sz = true, dz = true;
    for (int d = 0; d < 3; d++) sz &= !w->stride[d], dz &= !w->dilation[d];
    for (int d = 0; d < 3; d++) {
        if (d >= nsp) {   /* ot_build_at's or ot_parse's, which would be dropped */
            const int32_t e[5] = {w->ksize[d], w->stride[d], w->dilation[d], w->pad_lo[d],
                                  w->pad_hi[d]};
            static const char *const what[5] = {"kernel", "stride", "dilation", "pad_lo", "pad_hi"};
            for (int i = 0; i < 5; i++)
                if (e[i])
                    return FAIL(st, OT_EINVAL, "%s %d for spatial dim %d: the operand has %d "
                                "spatial dim%s", what[i], (int)e[i], d, nsp, nsp == 1 ? "" : "s");
            continue;
        }
        if (avg && w->dilation[d] > 1)
            return FAIL(st, OT_EINVAL, "dilation %d in spatial dim %d: average pooling takes no "
                        "dilation", (int)w->dilation[d], d);
        if (sz) w->stride[d] = w->ksize[d];
        if (dz || avg) w->dilation[d] = 1;
        int32_t k = w->ksize[d], v[3] = {k, w->stride[d], w->dilation[d]};
        static const char *const name[3] = {"kernel", "stride", "dilation"};
        for (int i = 0; i < 3; i++)
            if (v[i] < 1)
                return FAIL(st, OT_EINVAL, "%s %d in spatial dim %d: must be at least 1", name[i],
                            (int)v[i], d);
        if (w->pad_lo[d] < 0 || w->pad_hi[d] < 0 || w->pad_lo[d] > k / 2 || w->pad_hi[d] > k / 2)
            return FAIL(st, OT_EINVAL, "padding %d + %d in spatial dim %d: each side must be "
                        "0 to kernel / 2 = %d", (int)w->pad_lo[d], (int)w->pad_hi[d], d,
                        (int)(k / 2));
    }
    memset(w->outpad, 0, sizeof w->outpad);
    w->groups = 0;
    if (!avg) w->exclude_pad = false;
    return 0;
}

/* ---- inference ------------------------------------------------------------------ */

/* x of rank 3 to 5, floating point; y (when given) of x's dtype. */
static int check_operands(const site *st, const ot_node *x, const ot_node *y, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (x->dtype == OT_I32 || (y && y->dtype != x->dtype))
        return FAIL(st, OT_EDTYPE, "operand%s of shape %s (%s)%s%s%s%s%s must be floating point%s; "
                    "cast %s", y ? "s" : "", ot__shape_str(&x->shape, sa),
                    ot_dtype_name((ot_dtype)x->dtype), y ? " and " : "",
                    y ? ot__shape_str(&y->shape, sb) : "", y ? " (" : "",
                    y ? ot_dtype_name((ot_dtype)y->dtype) : "", y ? ")" : "",
                    y ? ", both alike" : "", y ? "them" : "it");
    if (x->shape.ndim < 3 || x->shape.ndim > 5)
        return FAIL(st, OT_EINVAL, "operand of shape %s must be 3-D to 5-D (batch, channels, "
                    "spatial...)", ot__shape_str(&x->shape, sa));
    p->dtype = (ot_dtype)x->dtype;
    p->weak = false;
    return 0;
}

/* The pooled shape of input shape `in` under p's window into out, or the
 * error. */
static int pooled(const site *st, const ot_shape *in, const proto *p, ot_shape *out)
{
    const ot_window *w = &p->args.win;
    char sa[OT__SHAPE_STRLEN];
    *out = *in;
    for (int d = 0; d < in->ndim - 2; d++) {
        int64_t o = pool_out_size(in->dims[2 + d], w->ksize[d], w->stride[d], w->dilation[d],
                                  w->pad_lo[d], w->pad_hi[d], w->ceil_mode);
        if (o < 0)
            return FAIL(st, OT_ESHAPE, "window of %d (dilated: %lld) in spatial dim %d is larger "
                        "than the padded input %lld + %d + %d (input %s)", (int)w->ksize[d],
                        (long long)w->dilation[d] * (w->ksize[d] - 1) + 1, d,
                        (long long)in->dims[2 + d], (int)w->pad_lo[d], (int)w->pad_hi[d],
                        ot__shape_str(in, sa));
        out->dims[2 + d] = o;
    }
    return 0;
}

/* An operand whose shape must be want (what the others' shapes give). */
static int shape_fits(const site *st, const ot_node *y, const ot_shape *want, const char *what)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (ot__shape_eq(&y->shape, want)) return 0;
    return FAIL(st, OT_ESHAPE, "%s has shape %s, the window needs %s", what,
                ot__shape_str(&y->shape, sa), ot__shape_str(want, sb));
}

int ot__infer_pool(const site *st, ot_node *a, ot_node *b, proto *p)
{
    bool grad_avg = st->op == OT_OP_AVG_POOL_GRAD;
    ot_shape in = grad_avg ? p->args.shape : a->shape, out;
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int rc = check_operands(st, a, b, p);
    if (!rc && grad_avg && (in.ndim != a->shape.ndim || in.dims[0] != a->shape.dims[0] ||
                            in.dims[1] != a->shape.dims[1]))
        rc = FAIL(st, OT_ESHAPE, "output gradient %s and input shape %s: the rank, batch and "
                  "channels must agree", ot__shape_str(&a->shape, sa), ot__shape_str(&in, sb));
    if (!rc) rc = check_window(st, &p->args.win, in.ndim - 2);
    if (!rc) rc = pooled(st, &in, p, &out);
    if (rc) return rc;
    switch (st->op) {
    case OT_OP_MAX_POOL_GRAD: rc = shape_fits(st, b, &out, "the output gradient"); break;
    case OT_OP_MAX_POOL_TAKE: rc = shape_fits(st, b, &in, "the gradient taken from"); break;
    case OT_OP_AVG_POOL_GRAD: rc = shape_fits(st, a, &out, "the output gradient"); break;
    default: break;
    }
    bool to_input = st->op == OT_OP_MAX_POOL_GRAD || grad_avg;
    p->shape = to_input ? in : out;
    if (!grad_avg) memset(&p->args.shape, 0, sizeof p->args.shape);
    return rc;
}

/* ---- the builders ------------------------------------------------------------- */

static ot_node *pool_build(ot_op op, ot_node *a, ot_node *b, const ot_window *win,
                           const ot_shape *shape, const char *file, int line)
{
    ot_args args = {.axis = OT_AXIS_ALL, .win = *win};
    if (shape) args.shape = *shape;
    return ot_build_at(op, a, b, &args, file, line);
}

/* One option array into field v over nsp dims: as written, or its first
 * entry in every dim when only that one is set; a 0 entry is dflt[d]. */
static void spread(int32_t *v, const int *o, int nsp, const int32_t *dflt, int one)
{
    bool first_only = o[0] && !o[1] && !o[2];
    for (int d = 0; d < nsp; d++) {
        int x = first_only ? o[0] : o[d];
        v[d] = x ? x : dflt ? dflt[d] : one;
    }
}

/* The geometry o asks for over nsp spatial dims; the error recorded (false
 * returned) for options that contradict each other. */
static bool window_of(ot_op op, const ot_pool_opts *o, const ot_node *x, ot_window *w,
                      const char *file, int line)
{
    int nsp = x->shape.ndim - 2;
    const char *name = ot_op_name(op);
    bool sides = false, dil = false;
    for (int d = 0; d < 3; d++) sides |= o->pad_lo[d] || o->pad_hi[d], dil |= o->dilation[d] > 1;
    if (sides && o->pad)
        return !ot__err(OT_EINVAL, file, line, name, "give one of .pad and .pad_lo/.pad_hi");
    if (op == OT_OP_AVG_POOL && dil)
        return !ot__err(OT_EINVAL, file, line, name, "average pooling takes no dilation");
    if (op == OT_OP_MAX_POOL && o->exclude_pad)
        return !ot__err(OT_EINVAL, file, line, name, ".exclude_pad is average pooling's");
    if (ot__win_extra(name, "kernel", o->kernel, true, x, file, line) ||
        ot__win_extra(name, "stride", o->stride, true, x, file, line) ||
        ot__win_extra(name, "dilation", o->dilation, true, x, file, line) ||
        ot__win_extra(name, "pad_lo", o->pad_lo, false, x, file, line) ||
        ot__win_extra(name, "pad_hi", o->pad_hi, false, x, file, line))
        return false;
    spread(w->ksize, o->kernel, nsp, NULL, 0);
    spread(w->stride, o->stride, nsp, w->ksize, 0);
    spread(w->dilation, o->dilation, nsp, NULL, 1);
    for (int d = 0; d < nsp; d++) {
        w->pad_lo[d] = sides ? o->pad_lo[d] : o->pad;
        w->pad_hi[d] = sides ? o->pad_hi[d] : o->pad;
    }
    w->ceil_mode = o->ceil_mode;
    w->exclude_pad = o->exclude_pad;
    return true;
}

static ot_node *build(ot_op op, ot_node *x, const ot_pool_opts *o, const char *file, int line)
{
    ot_window win;
    memset(&win, 0, sizeof win);
    int nsp = x && !ot__node_dead(x) ? x->shape.ndim - 2 : 0;
    if (nsp >= 1 && nsp <= 3 && o && !window_of(op, o, x, &win, file, line)) return NULL;
    return pool_build(op, x, NULL, &win, NULL, file, line);
}

ot_node *ot_max_pool_at(ot_node *x, const ot_pool_opts *opts, const char *file, int line)
{
    return build(OT_OP_MAX_POOL, x, opts, file, line);
}

ot_node *ot_avg_pool_at(ot_node *x, const ot_pool_opts *opts, const char *file, int line)
{
    return build(OT_OP_AVG_POOL, x, opts, file, line);
}

/* ---- the loop's geometry ---------------------------------------------------------- */

void ot__pool_geom_of(const ot_node *node, ot__pool_geom *g)
{
    int op = node->op;
    const ot_shape *xs = op == OT_OP_MAX_POOL_GRAD || op == OT_OP_AVG_POOL_GRAD ? &node->shape
                                                                               : &node->a->shape;
    const ot_shape *ys = op == OT_OP_MAX_POOL_GRAD   ? &node->b->shape
                         : op == OT_OP_AVG_POOL_GRAD ? &node->a->shape
                                                     : &node->shape;
    const ot_window *w = &node->args.win;
    int nsp = ot__win_dims(node);
    g->op = op;
    g->n = xs->dims[0];
    g->c = xs->dims[1];
    g->excl = w->exclude_pad;
    for (int d = 0; d < 3; d++) {
        bool in = d < nsp;
        g->in[d] = in ? xs->dims[2 + d] : 1;
        g->out[d] = in ? ys->dims[2 + d] : 1;
        g->k[d] = in ? w->ksize[d] : 1;
        g->stride[d] = in ? w->stride[d] : 1;
        g->dil[d] = in ? w->dilation[d] : 1;
        g->lo[d] = in ? w->pad_lo[d] : 0;
        g->hi[d] = in ? w->pad_hi[d] : 0;
    }
}

double ot__pool_divisor(const ot__pool_geom *g, const int64_t *p)
{
    int64_t count = 1;
    for (int d = 0; d < 3; d++) {
        int64_t s = p[d] * g->stride[d] - g->lo[d], e = s + g->k[d];
        int64_t end = g->excl ? g->in[d] : g->in[d] + g->hi[d];
        if (e > end) e = end;
        if (g->excl && s < 0) s = 0;
        count *= e > s ? e - s : 0;
    }
    return (double)count;
}

/* ---- gradients -------------------------------------------------------------- */

ot_node *ot__pool_grad(const ot_node *n, ot_node *g, int which, const char *file, int line)
{
    const ot_window *w = &n->args.win;
    ot_node *x = n->op == OT_OP_AVG_POOL || n->op == OT_OP_AVG_POOL_GRAD ? NULL
                 : ot__alike(n->a, &g, file, line);
    switch (n->op) {
    case OT_OP_MAX_POOL: return pool_build(OT_OP_MAX_POOL_GRAD, x, g, w, NULL, file, line);
    case OT_OP_MAX_POOL_GRAD:   /* linear in dy: the values at the maxima */
        return which ? pool_build(OT_OP_MAX_POOL_TAKE, x, g, w, NULL, file, line) : NULL;
    case OT_OP_MAX_POOL_TAKE:
        return which ? pool_build(OT_OP_MAX_POOL_GRAD, x, g, w, NULL, file, line) : NULL;
    case OT_OP_AVG_POOL:
        return pool_build(OT_OP_AVG_POOL_GRAD, g, NULL, w, &n->a->shape, file, line);
    default:   /* avg_pool_grad: linear, its adjoint avg_pool */
        return pool_build(OT_OP_AVG_POOL, g, NULL, w, NULL, file, line);
    }
}

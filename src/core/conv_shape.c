/*
 * conv_shape.c - the windowed ops (conv, conv_transpose, conv_wgrad): the
 * public builders of include/optree/conv.h, which turn ot_conv_opts into a
 * node's geometry (args.win), the internal builder the gradient rules use,
 * and the inference ot_build_at runs for the kind (node.c): the result's
 * shape and dtype, or a message naming the shapes and the caller's line.
 * The size rules are PyTorch's.
 */
#include "node_build.h"

#include <stdio.h>

/* ---- the geometry ---------------------------------------------------------- */

/* The span of a dilated kernel, dil * (k - 1) + 1: false when it
 * overflows int64. A kernel dim can be 2^40 (a broadcast view) and a
 * dilation 2^31 - 1, so the product does not always fit; unchecked, it
 * wrapped to a small span that passed the size checks (a silently wrong
 * output shape). */
static bool dilated_span(int64_t k, int dil, int64_t *span)
{
    return ot__mul_i64(span, dil, k - 1) && ot__add_i64(span, *span, 1);
}

/* The caller has checked that the dilated kernel fits the padded input
 * (dilated_span), so nothing here overflows: in is bounded by the address
 * space and the rest are ints. */
int64_t ot__conv_out_size(int64_t in, int64_t k, int stride, int dil, int lo, int hi)
{
    return (in + lo + hi - (int64_t)dil * (k - 1) - 1) / stride + 1;
}

/* false when the size overflows int64: (in - 1) * stride and the dilated
 * kernel are products of a dim (up to 2^62 for a broadcast view) and an
 * int, and wrapped round they gave a small, wrong, positive size. */
bool ot__conv_transpose_size(int64_t in, int64_t k, int stride, int dil, int lo, int hi,
                             int outpad, int64_t *out)
{
    int64_t reach, span;
    return dilated_span(k, dil, &span) && ot__mul_i64(&reach, in - 1, stride) &&
           ot__add_i64(out, reach, span) && ot__add_i64(out, *out, (int64_t)outpad - lo - hi);
}

/* The window's int32_t[3] fields, for checks that treat them alike. */
typedef struct field {
    const char *name;
    size_t off;
    int min;          /* the least value a used entry may take */
} field;
#define F(m, lo) {#m, offsetof(ot_window, m), lo}
static const field FIELDS[] = {F(stride, 1), F(dilation, 1), F(pad_lo, 0), F(pad_hi, 0),
                               F(outpad, 0), F(ksize, 1)};
#undef F
static int32_t *field_of(ot_window *w, const field *f) { return (int32_t *)((char *)w + f->off); }

/* Checks the used entries of w (nsp spatial dims) for op and zeroes the
 * rest, so that equal geometries are equal words (node identity). A
 * stride or dilation left all zero (ot_parse of a tree that omits it)
 * means 1. */
static int check_window(const site *st, ot_window *w, int nsp)
{
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++) {
        const field *f = &FIELDS[i];
        int32_t *v = field_of(w, f);
        bool used = f->off == offsetof(ot_window, outpad) ? st->op == OT_OP_CONV_TRANSPOSE
                    : f->off == offsetof(ot_window, ksize) ? st->op == OT_OP_CONV_WGRAD
                                                            : true;
        if (f->min == 1 && used && !v[0] && !v[1] && !v[2] &&
            f->off != offsetof(ot_window, ksize))
            v[0] = v[1] = v[2] = 1;
        for (int d = 0; d < 3; d++) {
            if (d >= nsp || !used) {
                v[d] = 0;
                continue;
            }
            if (v[d] < f->min)
                return FAIL(st, OT_EINVAL, "%s %d in spatial dim %d: must be at least %d", f->name,
                            (int)v[d], d, f->min);
        }
    }
    if (w->groups == 0) w->groups = 1;
    if (w->groups < 1) return FAIL(st, OT_EINVAL, "groups %d: must be at least 1", w->groups);
    return 0;
}

/* ---- inference ------------------------------------------------------------------ */

/* Operand ranks (3-D to 5-D, equal) and dtypes (floating point, equal). */
static int check_operands(const site *st, const ot_node *a, const ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int ra = a->shape.ndim, rb = b->shape.ndim;
    if (a->dtype == OT_I32 || b->dtype == OT_I32 || a->dtype != b->dtype)
        return FAIL(st, OT_EDTYPE, "operands of shapes %s (%s) and %s (%s) must be floating "
                    "point (float16, bfloat16, float32 or float64) and of one dtype; cast them", ot__shape_str(&a->shape, sa),
                    ot_dtype_name((ot_dtype)a->dtype), ot__shape_str(&b->shape, sb),
                    ot_dtype_name((ot_dtype)b->dtype));
    if (ra < 3 || ra > 5 || ra != rb)
        return FAIL(st, OT_EINVAL, "operands must both be 3-D to 5-D (batch, channels, "
                    "spatial...), got shapes %s and %s", ot__shape_str(&a->shape, sa),
                    ot__shape_str(&b->shape, sb));
    p->dtype = (ot_dtype)a->dtype;
    p->weak = false;
    return 0;
}

/* Channels of x and w that do not fit groups; need says the rule. */
static int channels_fail(const site *st, const ot_node *x, const ot_node *w, int groups,
                         const char *need)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    return FAIL(st, OT_ESHAPE, "input channels %lld and weights %s do not fit groups %d: need %s "
                "(input shape %s)", (long long)x->shape.dims[1], ot__shape_str(&w->shape, sb),
                groups, need, ot__shape_str(&x->shape, sa));
}

/* A kernel dim of w under 1 (spatial dim d): no window to slide, whatever
 * the input's size; 0, or the error. */
static int empty_kernel(const site *st, const ot_node *x, const ot_node *w, int d)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int64_t k = w->shape.dims[2 + d];
    if (k >= 1) return 0;
    return FAIL(st, OT_ESHAPE, "kernel of %lld in spatial dim %d: a kernel dim must be at least "
                "1 (input %s, weights %s)", (long long)k, d, ot__shape_str(&x->shape, sa),
                ot__shape_str(&w->shape, sb));
}

/* conv: x (N, C, in...), w (O, C / groups, k...) -> (N, O, out...). */
static int infer_conv(const site *st, const ot_node *x, const ot_node *w, proto *p)
{
    const ot_window *g = &p->args.win;
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    const int64_t *dx = x->shape.dims, *dw = w->shape.dims;
    int nsp = x->shape.ndim - 2;
    if (dx[1] != dw[1] * g->groups || dw[0] % g->groups)
        return channels_fail(st, x, w, g->groups, "channels = groups * w.shape[1] and groups "
                                                  "dividing w.shape[0]");
    p->shape = (ot_shape){.ndim = x->shape.ndim, .dims = {dx[0], dw[0]}};
    for (int d = 0; d < nsp; d++) {
        int64_t in = dx[2 + d], k = dw[2 + d], span;
        int rc = empty_kernel(st, x, w, d);
        if (rc) return rc;
        bool fits = dilated_span(k, g->dilation[d], &span);   /* else larger than any input */
        if (!fits || in + g->pad_lo[d] + g->pad_hi[d] < span)
            return FAIL(st, OT_ESHAPE, "kernel of %lld (dilated by %d: %s%lld) in spatial dim %d "
                        "is larger than the padded input %lld + %d + %d (input %s, weights %s)",
                        (long long)k, (int)g->dilation[d], fits ? "" : "over ",
                        (long long)(fits ? span : INT64_MAX), d, (long long)in, (int)g->pad_lo[d],
                        (int)g->pad_hi[d], ot__shape_str(&x->shape, sa),
                        ot__shape_str(&w->shape, sb));
        p->shape.dims[2 + d] = ot__conv_out_size(in, k, g->stride[d], g->dilation[d],
                                                 g->pad_lo[d], g->pad_hi[d]);
    }
    return 0;
}

/* conv_transpose: x (N, C, in...), w (C, O / groups, k...) -> (N, O, out...). */
static int infer_transpose(const site *st, const ot_node *x, const ot_node *w, proto *p)
{
    const ot_window *g = &p->args.win;
    const int64_t *dx = x->shape.dims, *dw = w->shape.dims;
    if (dx[1] != dw[0] || dw[0] % g->groups)
        return channels_fail(st, x, w, g->groups, "channels = w.shape[0], divisible by groups");
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    int nsp = x->shape.ndim - 2;
    p->shape = (ot_shape){.ndim = x->shape.ndim, .dims = {dx[0], dw[1] * g->groups}};
    for (int d = 0; d < nsp; d++) {
        int64_t in = dx[2 + d], k = dw[2 + d], out;
        if (g->outpad[d] >= g->stride[d])
            return FAIL(st, OT_EINVAL, "output padding %d in spatial dim %d: must be less than "
                        "the stride %d", (int)g->outpad[d], d, (int)g->stride[d]);
        int rc = empty_kernel(st, x, w, d);
        if (rc) return rc;
        if (!ot__conv_transpose_size(in, k, g->stride[d], g->dilation[d], g->pad_lo[d],
                                     g->pad_hi[d], g->outpad[d], &out))
            return FAIL(st, OT_EOVERFLOW, "spatial dim %d: input %lld, kernel %lld, stride %d and "
                        "dilation %d give an output size that overflows int64 (input %s, "
                        "weights %s)", d, (long long)in, (long long)k, (int)g->stride[d],
                        (int)g->dilation[d], ot__shape_str(&x->shape, sa),
                        ot__shape_str(&w->shape, sb));
        if (in < 1 || out < 0)
            return FAIL(st, OT_ESHAPE, "spatial dim %d: input %lld, kernel %lld and padding %d + "
                        "%d give output size %lld (input %s, weights %s)", d, (long long)in,
                        (long long)k, (int)g->pad_lo[d], (int)g->pad_hi[d], (long long)out,
                        ot__shape_str(&x->shape, sa), ot__shape_str(&w->shape, sb));
        p->shape.dims[2 + d] = out;
    }
    return 0;
}

/* conv_wgrad: x (N, C, in...), g (N, O, out...) -> (O, C / groups, ksize...),
 * where out is conv's output size for x and a kernel of ksize. */
static int infer_wgrad(const site *st, const ot_node *x, const ot_node *gr, proto *p)
{
    const ot_window *g = &p->args.win;
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    const int64_t *dx = x->shape.dims, *dg = gr->shape.dims;
    int nsp = x->shape.ndim - 2;
    if (dx[0] != dg[0] || dx[1] % g->groups || dg[1] % g->groups)
        return FAIL(st, OT_ESHAPE, "input %s and output gradient %s: batches must agree and "
                    "groups %d divide both channel counts", ot__shape_str(&x->shape, sa),
                    ot__shape_str(&gr->shape, sb), g->groups);
    p->shape = (ot_shape){.ndim = x->shape.ndim, .dims = {dg[1], dx[1] / g->groups}};
    for (int d = 0; d < nsp; d++) {
        int64_t in = dx[2 + d], k = g->ksize[d];
        int64_t span = (int64_t)g->dilation[d] * (k - 1) + 1;
        if (in + g->pad_lo[d] + g->pad_hi[d] < span ||
            ot__conv_out_size(in, k, g->stride[d], g->dilation[d], g->pad_lo[d], g->pad_hi[d]) !=
                dg[2 + d])
            return FAIL(st, OT_ESHAPE, "spatial dim %d: a kernel of %lld over input %s does not "
                        "give the output gradient's %s", d, (long long)k,
                        ot__shape_str(&x->shape, sa), ot__shape_str(&gr->shape, sb));
        p->shape.dims[2 + d] = k;
    }
    return 0;
}

int ot__infer_conv(const site *st, ot_node *a, ot_node *b, proto *p)
{
    int rc = check_operands(st, a, b, p);
    if (!rc) rc = check_window(st, &p->args.win, a->shape.ndim - 2);
    if (rc) return rc;
    if (st->op == OT_OP_CONV) return infer_conv(st, a, b, p);
    if (st->op == OT_OP_CONV_TRANSPOSE) return infer_transpose(st, a, b, p);
    return infer_wgrad(st, a, b, p);
}

/* ---- the builders ------------------------------------------------------------- */

ot_node *ot__conv_build(ot_op op, ot_node *a, ot_node *b, const ot_window *win, const char *file,
                        int line)
{
    ot_args args = {.axis = OT_AXIS_ALL, .win = *win};
    return ot_build_at(op, a, b, &args, file, line);
}

/* One option array into field v over nsp dims: as written, or its first
 * entry in every dim when only that one is set; dflt when not written. */
static void spread(int32_t *v, const int *o, int nsp, bool given, int dflt)
{
    bool first_only = o[0] && !o[1] && !o[2];
    for (int d = 0; d < nsp; d++) v[d] = !given ? dflt : first_only ? o[0] : o[d];
}

/* 'same' padding (TensorFlow's rule, PyTorch's at stride 1): the output
 * is ceil(in / stride), the total padding split with the odd one after.
 * A side over INT32_MAX (a huge dilated kernel) does not fit the window's
 * int32 pads: the error recorded and false, where a cast wrapped it to
 * some other padding and a silently wrong output size. */
static bool same_padding(ot_window *w, const ot_node *x, const ot_node *k, int nsp,
                         const char *file, int line)
{
    for (int d = 0; d < nsp; d++) {
        int64_t in = x->shape.dims[2 + d], s = w->stride[d], kd = k->shape.dims[2 + d], span;
        if (s < 1 || w->dilation[d] < 1 || kd < 1) return true;   /* inference says */
        int64_t out = (in + s - 1) / s;
        int64_t total = 0;
        if (!dilated_span(kd, w->dilation[d], &span) ||
            !ot__add_i64(&total, (out - 1) * s - in, span) || total - total / 2 > INT32_MAX) {
            char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
            return !ot__err(OT_EINVAL, file, line, "conv", "OT_PAD_SAME in spatial dim %d needs "
                            "more padding than an int32 holds (input %s, weights %s, dilation "
                            "%d)", d, ot__shape_str(&x->shape, sa), ot__shape_str(&k->shape, sb),
                            (int)w->dilation[d]);
        }
        if (total < 0) total = 0;
        w->pad_lo[d] = (int32_t)(total / 2);
        w->pad_hi[d] = (int32_t)(total - total / 2);
    }
    return true;
}

/* Whether the options set member: as the macros wrote them, or (options
 * built by hand, spec_ NULL) where nonzero. */
static bool given(const char *spec, const char *member, bool nonzero)
{
    return spec ? ot_spec_sets(spec, OT__CONV_MEMBERS, member) : nonzero;
}

/* Options that contradict each other or are out of range: the error
 * recorded and false. */
static bool opts_fit(ot_op op, const ot_conv_opts *o, bool explicit_sides, bool sg, bool dg,
                     const char *file, int line)
{
    const char *name = ot_op_name(op);
    if ((explicit_sides && o->pad) || (o->padding && (explicit_sides || o->pad)))
        return !ot__err(OT_EINVAL, file, line, name,
                        "give one of .pad, .pad_lo/.pad_hi and .padding");
    if (o->padding < OT_PAD_EXPLICIT || o->padding > OT_PAD_SAME ||
        (o->padding == OT_PAD_SAME && op == OT_OP_CONV_TRANSPOSE))
        return !ot__err(OT_EINVAL, file, line, name,
                        "padding %d is not OT_PAD_EXPLICIT, OT_PAD_VALID%s", o->padding,
                        op == OT_OP_CONV ? " or OT_PAD_SAME" : "");
    if ((sg && !o->stride[0] && !o->stride[1] && !o->stride[2]) ||
        (dg && !o->dilation[0] && !o->dilation[1] && !o->dilation[2]))
        return !ot__err(OT_EINVAL, file, line, name, "%s 0: must be at least 1",
                        sg && !o->stride[0] ? "stride" : "dilation");
    return true;
}

bool ot__win_extra(const char *op, const char *member, const int *v, bool spreads, const ot_node *x,
                   const char *file, int line)
{
    int nsp = x->shape.ndim - 2;
    if (spreads && v[0] && !v[1] && !v[2]) return false;
    for (int d = nsp; d < 3; d++) {   /* callers hold nsp in [1, 3] */
        if (!v[d]) continue;
        char sh[OT__SHAPE_STRLEN];
        ot__err(OT_EINVAL, file, line, op, ".%s[%d] is %d, but x %s has %d spatial dim%s", member, d,
                v[d], ot__shape_str(&x->shape, sh), nsp, nsp == 1 ? "" : "s");
        return true;
    }
    return false;
}

/* Options set past x's spatial dims, or one conv_transpose alone takes:
 * the error recorded and true. */
static bool opts_beyond(ot_op op, const ot_conv_opts *o, const ot_node *x, const char *file, int line)
{
    const char *name = ot_op_name(op);
    if (op == OT_OP_CONV && (o->output_padding[0] || o->output_padding[1] || o->output_padding[2]))
        return ot__err(OT_EINVAL, file, line, name, ".output_padding is conv_transpose's option"),
               true;
    return ot__win_extra(name, "stride", o->stride, true, x, file, line) ||
           ot__win_extra(name, "dilation", o->dilation, true, x, file, line) ||
           ot__win_extra(name, "pad_lo", o->pad_lo, false, x, file, line) ||
           ot__win_extra(name, "pad_hi", o->pad_hi, false, x, file, line) ||
           ot__win_extra(name, "output_padding", o->output_padding, false, x, file, line);
}

/* The geometry opts asks for, over x's spatial dims; the error recorded
 * (false returned) for options that contradict each other. */
static bool window_of(ot_op op, const ot_node *x, const ot_node *w, const ot_conv_opts *o,
                      ot_window *win, const char *file, int line)
{
    const char *spec = o->spec_;
    int nsp = x->shape.ndim - 2;
    if (nsp < 1 || nsp > 3 || w->shape.ndim != x->shape.ndim) return true;  /* inference says */
    bool explicit_sides = false;
    for (int d = 0; d < 3; d++) explicit_sides |= o->pad_lo[d] || o->pad_hi[d];
    bool sg = given(spec, "stride", o->stride[0] || o->stride[1] || o->stride[2]),
         dg = given(spec, "dilation", o->dilation[0] || o->dilation[1] || o->dilation[2]);
    if (!opts_fit(op, o, explicit_sides, sg, dg, file, line) || opts_beyond(op, o, x, file, line))
        return false;
    spread(win->stride, o->stride, nsp, sg, 1);
    spread(win->dilation, o->dilation, nsp, dg, 1);
    for (int d = 0; d < nsp; d++) {
        win->pad_lo[d] = explicit_sides ? o->pad_lo[d] : o->pad;
        win->pad_hi[d] = explicit_sides ? o->pad_hi[d] : o->pad;
        win->outpad[d] = o->output_padding[d];
    }
    win->groups = given(spec, "groups", o->groups != 0) ? o->groups : 1;
    return o->padding != OT_PAD_SAME || same_padding(win, x, w, nsp, file, line);
}

static ot_node *build(ot_op op, ot_node *x, ot_node *w, const ot_conv_opts *o, const char *file,
                      int line)
{
    ot_window win;
    memset(&win, 0, sizeof win);
    if (x && w && !ot__node_dead(x) && !ot__node_dead(w) && o &&
        !window_of(op, x, w, o, &win, file, line))
        return NULL;
    return ot__conv_build(op, x, w, &win, file, line);
}

ot_node *ot_conv_at(ot_node *x, ot_node *w, const ot_conv_opts *opts, const char *file, int line)
{
    return build(OT_OP_CONV, x, w, opts, file, line);
}

ot_node *ot_conv_transpose_at(ot_node *x, ot_node *w, const ot_conv_opts *opts, const char *file,
                              int line)
{
    return build(OT_OP_CONV_TRANSPOSE, x, w, opts, file, line);
}

/* ---- the loop's geometry ---------------------------------------------------------- */

void ot__conv_geom_of(const ot_node *node, ot__conv_geom *g)
{
    const ot_shape *xs, *ss, *ws;
    switch (node->op) {
    case OT_OP_CONV: xs = &node->a->shape, ws = &node->b->shape, ss = &node->shape; break;
    case OT_OP_CONV_TRANSPOSE: ss = &node->a->shape, ws = &node->b->shape, xs = &node->shape; break;
    default: xs = &node->a->shape, ss = &node->b->shape, ws = &node->shape; break;
    }
    const ot_window *w = &node->args.win;
    int nsp = ot__win_dims(node);
    g->n = xs->dims[0];
    g->groups = w->groups;
    g->sc = ss->dims[1] / w->groups;
    g->xc = ws->dims[1];
    for (int d = 0; d < 3; d++) {
        bool in = d < nsp;
        g->sp[d] = in ? ss->dims[2 + d] : 1;
        g->xp[d] = in ? xs->dims[2 + d] : 1;
        g->k[d] = in ? ws->dims[2 + d] : 1;
        g->stride[d] = in ? w->stride[d] : 1;
        g->dil[d] = in ? w->dilation[d] : 1;
        g->lo[d] = in ? w->pad_lo[d] : 0;
    }
}

/* ---- gradients -------------------------------------------------------------- */

/* The output padding that makes conv_transpose of conv node-like geometry
 * win give back spatial sizes `in` from `out` (conv's rounding down). */
static void remainder_pad(ot_window *win, const ot_shape *in, const ot_shape *out,
                          const ot_shape *k, int nsp)
{
    for (int d = 0; d < nsp; d++)
        win->outpad[d] = (int32_t)(in->dims[2 + d] + win->pad_lo[d] + win->pad_hi[d] -
                                   (int64_t)win->dilation[d] * (k->dims[2 + d] - 1) - 1 -
                                   (out->dims[2 + d] - 1) * win->stride[d]);
}

ot_node *ot__conv_grad(const ot_node *n, ot_node *g, int which, const char *file, int line)
{
    ot_window win = n->args.win;
    int nsp = ot__win_dims(n);
    memset(win.outpad, 0, sizeof win.outpad);
    memset(win.ksize, 0, sizeof win.ksize);
    /* the operand g meets, as g's dtype or both wider (mixed precision) */
    ot_node *o = ot__alike(which ? n->a : n->b, &g, file, line);
    if (!o || !g) return NULL;
    switch (n->op * 2 + which) {
    case OT_OP_CONV * 2:   /* x: the transpose of g through w */
        remainder_pad(&win, &n->a->shape, &n->shape, &n->b->shape, nsp);
        return ot__conv_build(OT_OP_CONV_TRANSPOSE, g, o, &win, file, line);
    case OT_OP_CONV * 2 + 1:   /* w: x correlated with g */
        for (int d = 0; d < nsp; d++) win.ksize[d] = (int32_t)n->b->shape.dims[2 + d];
        return ot__conv_build(OT_OP_CONV_WGRAD, o, g, &win, file, line);
    case OT_OP_CONV_TRANSPOSE * 2:
        return ot__conv_build(OT_OP_CONV, g, o, &win, file, line);
    case OT_OP_CONV_TRANSPOSE * 2 + 1:
        for (int d = 0; d < nsp; d++) win.ksize[d] = (int32_t)n->b->shape.dims[2 + d];
        return ot__conv_build(OT_OP_CONV_WGRAD, g, o, &win, file, line);
    case OT_OP_CONV_WGRAD * 2:   /* x: as conv's, g in the weights' place */
        remainder_pad(&win, &n->a->shape, &n->b->shape, &n->shape, nsp);
        return ot__conv_build(OT_OP_CONV_TRANSPOSE, o, g, &win, file, line);
    default:   /* conv_wgrad's output gradient: x convolved with g */
        return ot__conv_build(OT_OP_CONV, o, g, &win, file, line);
    }
}

/*
 * attn_shape.c - the attention ops (attention, attention_grad): the public
 * builder of include/optree/attention.h, which checks q, k, v and the mask
 * (messages naming shapes and the caller's line), packs k, v and the mask
 * into one flat operand (nodes have two operands) and slices the
 * logsumexp column off the node; the inference ot_build_at runs for the
 * rows (node.c), which re-checks what a parsed or hand-built node claims;
 * the loop's geometry both backends run; and the gradient nodes autodiff
 * builds (one attention_grad node for q, k, v and the mask).
 */
#include "node_build.h"

#include <math.h>
#include <stdio.h>

/* ---- the geometry ---------------------------------------------------------- */

/* The mask code's bit for dim d (ops.def: 1 batch, 2 heads, 4 seq_q, 8
 * seq_k) and the code's "present" bit. */
#define MASK_ON 16

static void mask_dims(int code, const int64_t full[4], int64_t *mdim)
{
    for (int d = 0; d < 4; d++) mdim[d] = code & (1 << d) ? full[d] : 1;
}

static int64_t prod4(const int64_t *v) { return v[0] * v[1] * v[2] * v[3]; }

/* The geometry of op over first operand shape a with attributes x. */
static void geom_from(int op, const ot_shape *a, const ot_args *x, ot__attn_geom *g)
{
    memset(g, 0, sizeof *g);
    g->op = op;
    g->b = a->dims[0], g->h = a->dims[1], g->sq = a->dims[2];
    g->sk = x->depth, g->dv = x->ddof;
    g->d = op == OT_OP_ATTENTION ? a->dims[3] : a->dims[3] - 2 * (g->dv + 1);
    g->causal = x->keepdims;
    g->scale = x->lo;
    g->mask = x->win.groups != 0;
    int64_t full[4] = {g->b, g->h, g->sq, g->sk};
    mask_dims(g->mask ? x->win.groups : 0, full, g->mdim);
    g->koff = 0;
    g->voff = g->b * g->h * g->sk * g->d;
    g->moff = g->voff + g->b * g->h * g->sk * g->dv;
    g->npack = g->moff + (g->mask ? prod4(g->mdim) : 0);
}

void ot__attn_geom_of(const ot_node *node, ot__attn_geom *g)
{
    geom_from(node->op, &node->a->shape, &node->args, g);
}

void ot__attn_follow(const ot_node *n, const ot_node *a, const ot_node *b, ot_args *args)
{
    if (n->tag != OT_OP_NONE || !a || !b || a->shape.ndim != 4 || b->shape.ndim != 1) return;
    /* the pack holds sk (b h (d + dv)) elements of k and v, and the mask's:
     * m0 (its dims but seq_k's) times sk where the mask has seq_k in full */
    ot__attn_geom g;
    geom_from(n->op, &a->shape, args, &g);
    int code = args->win.groups;
    int64_t m0 = 1;
    for (int d = 0; d < 3; d++) m0 *= g.mask ? g.mdim[d] : 0;
    bool per_key = g.mask && (code & 8);
    int64_t per = g.b * g.h * (g.d + g.dv) + (per_key ? m0 : 0);
    int64_t rest = b->shape.dims[0] - (per_key ? 0 : m0);
    if (g.d < 0 || per <= 0 || rest < 0 || rest % per) return;   /* inference names it */
    args->depth = rest / per;
}

/* ---- inference ------------------------------------------------------------------ */

static int check_attrs(const site *st, const ot_args *x)
{
    if (x->depth < 0 || x->ddof < 0)
        return FAIL(st, OT_EINVAL, "seq_k %lld and dim_v %d must not be negative",
                    (long long)x->depth, x->ddof);
    if (x->win.groups != 0 && (x->win.groups < MASK_ON || x->win.groups >= 2 * MASK_ON))
        return FAIL(st, OT_EINVAL, "mask code %d: 0 (none) or 16 + bits 1, 2, 4, 8 (the dims "
                    "the mask has in full)", x->win.groups);
    return 0;
}

int ot__infer_attn(const site *st, ot_node *a, ot_node *b, proto *p)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    if (a->dtype == OT_I32 || b->dtype != a->dtype)
        return FAIL(st, OT_EDTYPE, "operands %s (%s) and %s (%s) must be floating point "
                    "(float16, bfloat16, float32 or float64) and of one dtype", ot__shape_str(&a->shape, sa), ot_dtype_name((ot_dtype)a->dtype),
                    ot__shape_str(&b->shape, sb), ot_dtype_name((ot_dtype)b->dtype));
    int rc = check_attrs(st, &p->args);
    if (rc) return rc;
    /* An inf or NaN scale makes every score inf, -inf or NaN: rows of NaN,
     * or (-inf) zeros as if every key were masked, never a softmax. */
    if (!isfinite(p->args.lo))
        return FAIL(st, OT_EINVAL, "scale %g must be finite (0: 1 / sqrt(dim)); q %s",
                    p->args.lo, ot__shape_str(&a->shape, sa));
    bool grad = st->op == OT_OP_ATTENTION_GRAD;
    int64_t extra = grad ? 2 * (p->args.ddof + 1) : 0;
    if (a->shape.ndim != 4 || b->shape.ndim != 1 || a->shape.dims[3] < extra)
        return FAIL(st, OT_ESHAPE, "operands %s and %s: the first must be 4-D (batch, heads, "
                    "seq_q, %s), the second 1-D (the pack of k, v and the mask)",
                    ot__shape_str(&a->shape, sa), ot__shape_str(&b->shape, sb),
                    grad ? "dim + 2 (dim_v + 1)" : "dim");
    ot__attn_geom g;
    geom_from(st->op, &a->shape, &p->args, &g);
    if (b->shape.dims[0] != g.npack)
        return FAIL(st, OT_ESHAPE, "the pack %s must hold k, v and the mask: %lld elements for "
                    "q %s, seq_k %lld, dim_v %lld", ot__shape_str(&b->shape, sb),
                    (long long)g.npack, ot__shape_str(&a->shape, sa), (long long)g.sk,
                    (long long)g.dv);
    p->dtype = (ot_dtype)a->dtype;
    p->weak = false;
    if (grad) p->shape = (ot_shape){1, {g.b * g.h * g.sq * g.d + g.npack}};
    else p->shape = (ot_shape){4, {g.b, g.h, g.sq, g.dv + 1}};
    return 0;
}

/* ---- the builder ---------------------------------------------------------------- */

#define BFAIL(code, ...) (ot__err((code), file, line, "attention", __VA_ARGS__), NULL)
#define OFAIL(code, ...) (ot__err((code), file, line, "attention", __VA_ARGS__), false)

/* Mask m checked against q's (batch, heads, seq_q) and seq_k, its code
 * (ops.def) set, as the pack takes it (of rank 1 or more), or NULL with
 * the error set. */
static ot_node *mask_of(ot_node *m, const int64_t full[4], int *code, const char *file, int line)
{
    char sa[OT__SHAPE_STRLEN], sb[OT__SHAPE_STRLEN];
    ot_shape want = {4, {full[0], full[1], full[2], full[3]}}, s = {4, {1, 1, 1, 1}};
    if (m->shape.ndim > 4)
        return BFAIL(OT_ESHAPE, "mask %s has more than 4 dims (scores %s)",
                     ot__shape_str(&m->shape, sa), ot__shape_str(&want, sb));
    for (int d = 0; d < m->shape.ndim; d++) s.dims[4 - m->shape.ndim + d] = m->shape.dims[d];
    *code = MASK_ON;
    for (int d = 0; d < 4; d++) {
        if (s.dims[d] == full[d] && full[d] != 1) *code |= 1 << d;
        else if (s.dims[d] != 1)
            return BFAIL(OT_ESHAPE, "mask %s is not broadcastable to the scores %s "
                         "(batch, heads, seq_q, seq_k)", ot__shape_str(&m->shape, sa),
                         ot__shape_str(&want, sb));
    }
    /* m as it is: flattened into the pack, leading dims of 1 change
     * nothing, and a reshape to (1, 1, seq_q, seq_k) would fix the mask's
     * sizes for a program run at another sequence length (a flattening
     * follows them: ot__reshape_join_at) */
    return m->shape.ndim > 0 ? m : ot_reshape_node_at(m, (ot_shape){1, {1}}, file, line);
}

/* Operands over tensors of two backends, named here: the pack's concat
 * named itself, an op the caller never wrote. */
static bool one_backend(ot_node *const all[4], const char *const name[4], const char *file,
                        int line)
{
    int first = -1;
    for (int i = 0; i < 4; i++) {
        if (!all[i] || !all[i]->be || (first >= 0 && all[i]->be == all[first]->be)) continue;
        if (first < 0) {
            first = i;
            continue;
        }
        const char *a = all[first]->be->vt->name, *b = all[i]->be->vt->name;
        return OFAIL(OT_EBACKEND, "%s reads tensors of backend '%s', %s of %s '%s' backend",
                     name[i], b, name[first], strcmp(a, b) ? "the" : "another", a);
    }
    return true;
}

static bool operands_ok(ot_node *q, ot_node *k, ot_node *v, ot_node *m, const char *file, int line)
{
    char sq[OT__SHAPE_STRLEN], sk[OT__SHAPE_STRLEN], sv[OT__SHAPE_STRLEN];
    ot_node *all[4] = {q, k, v, m};
    static const char *const name[4] = {"q", "k", "v", "mask"};
    for (int i = 0; i < 4; i++) {
        if (!all[i] && i < 3) return OFAIL(OT_ENULL, "%s is NULL", name[i]);
        if (all[i] && ot__node_dead(all[i])) return OFAIL(OT_ESTATE, "%s is a dead node", name[i]);
        if (all[i] && (all[i]->dtype == OT_I32 || all[i]->dtype != q->dtype))
            return OFAIL(OT_EDTYPE, "%s is %s; q, k, v and the mask must be floating point "
                         "(float16, bfloat16, float32 or float64) and of one dtype (q is %s)", name[i], ot_dtype_name((ot_dtype)all[i]->dtype),
                         ot_dtype_name((ot_dtype)q->dtype));
    }
    if (!one_backend(all, name, file, line)) return false;
    const ot_shape *a = &q->shape, *b = &k->shape, *c = &v->shape;
    ot__shape_str(a, sq), ot__shape_str(b, sk), ot__shape_str(c, sv);
    if (a->ndim != 4 || b->ndim != 4 || c->ndim != 4)
        return OFAIL(OT_ESHAPE, "q %s, k %s and v %s must be 4-D (batch, heads, seq, dim)", sq, sk,
                     sv);
    if (a->dims[0] != b->dims[0] || a->dims[0] != c->dims[0] || a->dims[1] != b->dims[1] ||
        a->dims[1] != c->dims[1])
        return OFAIL(OT_ESHAPE, "q %s, k %s and v %s must agree in batch and heads", sq, sk, sv);
    if (a->dims[3] != b->dims[3])
        return OFAIL(OT_ESHAPE, "q %s and k %s must agree in dim", sq, sk);
    if (b->dims[2] != c->dims[2])
        return OFAIL(OT_ESHAPE, "k %s and v %s must agree in seq (seq_k)", sk, sv);
    return true;
}

/* x (4-D) flattened, at any size of x (a program specialised to another
 * batch rebuilds it: ot__reshape_join_at). */
static ot_node *flat(ot_node *x, const char *file, int line)
{
    return ot__reshape_join_at(x, ~1u, file, line);
}

ot_node *ot_attention_at(ot_node *q, ot_node *k, ot_node *v, const ot_attn_opts *o,
                         const char *file, int line)
{
    ot_node *m = o ? o->mask : NULL;
    if (!operands_ok(q, k, v, m, file, line)) return NULL;
    int64_t full[4] = {q->shape.dims[0], q->shape.dims[1], q->shape.dims[2], k->shape.dims[2]};
    int code = 0;
    if (m && !(m = mask_of(m, full, &code, file, line))) return NULL;
    int64_t d = q->shape.dims[3], dv = v->shape.dims[3];
    double scale = o && o->scale != 0 ? o->scale : d > 0 ? 1.0 / sqrt((double)d) : 1.0;
    ot_node *parts[3] = {flat(k, file, line), flat(v, file, line), m ? flat(m, file, line) : NULL};
    if (!parts[0] || !parts[1] || (m && !parts[2])) return NULL;
    ot_node *pack = ot_concat_at(m ? 3 : 2, parts, 0, file, line);
    ot_args args = {.axis = OT_AXIS_ALL, .lo = scale, .keepdims = o && o->causal,
                    .depth = k->shape.dims[2], .ddof = (int)dv, .win = {.groups = code}};
    ot_node *n = pack ? ot_build_at(OT_OP_ATTENTION, q, pack, &args, file, line) : NULL;
    ot_index idx[4] = {OT_ALL, OT_ALL, OT_ALL, OT_RANGE(0, dv)};
    return n ? ot_slice_node_n(n, 4, idx, file, line) : NULL;
}

/* ---- gradients -------------------------------------------------------------- */

bool ot__attn_grads(const ot_node *n, ot_node *g, ot_node **dq, ot_node **dpack, const char *file,
                    int line)
{
    ot_node *parts[3] = {n->a, (ot_node *)n, g};
    ot_node *x = ot_concat_at(3, parts, 3, file, line);
    ot_args args = n->args;
    /* the pack as x's dtype or both wider (mixed precision: a 16-bit
     * attention under an f32 gradient, which the concat promotes) */
    ot_node *pack = x ? ot__alike(n->b, &x, file, line) : NULL;
    ot_node *G = pack && x ? ot_build_at(OT_OP_ATTENTION_GRAD, x, pack, &args, file, line) : NULL;
    if (!G) return false;
    int64_t nq = ot__numel(&n->a->shape), np = ot__numel(&n->b->shape);
    ot_index iq = OT_RANGE(0, nq), ip = OT_RANGE(nq, nq + np);
    ot_node *sq = ot_slice_node_n(G, 1, &iq, file, line);
    *dq = sq ? ot_reshape_node_at(sq, n->a->shape, file, line) : NULL;
    *dpack = ot_slice_node_n(G, 1, &ip, file, line);
    return *dq && *dpack;
}

/*
 * rules_conv_bn.c - the library's rule set "conv_bn": an inference-mode
 * batch norm folded into the convolution it normalises, the worked example
 * of MXNet's subgraph API (../shared/seeds/, "conv_bn") done for real.
 *
 * Written as a user's rule set would be, with the public node accessors and
 * rewrite API alone (optree.h, optree/extend.h; front.h only declares the
 * set for rewrite.c's registry, which knows it by name as it knows "fuse").
 * The seed's steps, one by one:
 *   Select        conv_select: a match starts on a convolution;
 *   SelectInput   none (NULL): the search never goes down an operand;
 *   SelectOutput  conv_select_output: the next node of the chain that
 *                 ot_batch_norm's inference tree makes over the conv's
 *                 output, and only that;
 *   Filter        conv_filter: no batch norm after the conv (or a match that
 *                 is not exactly one chain) and the conv stays as it is;
 *   CreateSubgraphNode  conv_create: one conv over folded weights, plus a
 *                 folded bias.
 *
 * The chain, each step reading the one before it and a per-channel
 * parameter P of shape (1, C, 1, ...) (or any shape that broadcasts only
 * along the channel axis): conv, [+ P_bias], - P_mean, * rsqrt(P_var +
 * eps), [* P_weight], [+ P_beta]. Every P is a tensor (a leaf, or a reshape
 * of one) of the conv's dtype and has exactly C values, so nothing that
 * depends on the conv's input (a training batch norm's batch statistics)
 * and no statistic of another axis or channel count is folded. With
 *     scale = rsqrt(P_var + eps) * P_weight
 * the match becomes
 *     conv(x, W * scale) + ((P_bias - P_mean) * scale + P_beta)
 * (scale laid along W's output-channel axis, the bias along the result's
 * channel axis). The folded weights and bias are subtrees over the same
 * tensors, not values computed once: an assignment recomputes them (one
 * pass over W, small next to the conv) and they always follow the tensors'
 * current values, so updating the running statistics between assignments
 * needs no new rewrite. Only ot_conv is folded (not ot_conv_transpose,
 * whose weights put output channels second); strides, padding, dilation
 * and groups carry over as the conv had them, in 1-D, 2-D and 3-D.
 */
#include "front.h"

#include <string.h>

/* The chain's steps, in the order they must come. */
enum { NONE, CONV, BIAS, SUB, NORM, SCALE, SHIFT };

/* For each step, the steps that may come right before it (bit masks). */
static const unsigned PREV[SHIFT + 1] = {
    [BIAS] = 1u << CONV,
    [SUB] = 1u << CONV | 1u << BIAS,
    [NORM] = 1u << SUB,
    [SCALE] = 1u << NORM,
    [SHIFT] = 1u << NORM | 1u << SCALE,
};

/* One step: what a node does to the chain below it. */
typedef struct link {
    int stage;
    const ot_node *prev;    /* the chain operand it reads */
    const ot_node *param;   /* its per-channel operand (as it reads it) */
} link;

static bool is_plain(const ot_node *n, ot_op op)
{
    return n && ot_node_kind(n) == OT_NODE_OP && ot_node_op(n) == op &&
           ot_node_tag(n) == OT_OP_NONE;
}

static bool same_shape(ot_shape a, ot_shape b)
{
    return a.ndim == b.ndim && memcmp(a.dims, b.dims, sizeof a.dims[0] * (size_t)a.ndim) == 0;
}

static int64_t numel(const ot_shape *s)
{
    int64_t n = 1;
    for (int d = 0; d < s->ndim; d++) n *= s->dims[d];
    return n;
}

/* p is one value per channel of `like` (rank >= 3, channels on axis 1), a
 * tensor of like's dtype: a leaf, or a reshape of one, whose shape
 * broadcasts against like's along the channel axis only. */
static bool per_channel(const ot_node *p, const ot_node *like)
{
    const ot_node *t = is_plain(p, OT_OP_RESHAPE) ? ot_node_child(p, 0) : p;
    if (!t || ot_node_kind(t) != OT_NODE_LEAF || ot_node_dtype(p) != ot_node_dtype(like))
        return false;
    ot_shape ps = ot_node_shape(p), ls = ot_node_shape(like);
    if (ps.ndim < ls.ndim - 1 || ps.ndim > ls.ndim || numel(&ps) != ls.dims[1]) return false;
    for (int d = 0; d < ps.ndim; d++)
        if (ps.dims[d] != (d + ls.ndim - ps.ndim == 1 ? ls.dims[1] : 1)) return false;
    return true;
}

/* inv is rsqrt(P_var + eps) or rsqrt(P_var), P_var per channel of like and
 * eps a constant. */
static bool inv_std(const ot_node *inv, const ot_node *like)
{
    if (!is_plain(inv, OT_OP_RSQRT) || ot_node_dtype(inv) != ot_node_dtype(like)) return false;
    const ot_node *v = ot_node_child(inv, 0);
    if (per_channel(v, like)) return true;
    if (!is_plain(v, OT_OP_ADD)) return false;
    const ot_node *a = ot_node_child(v, 0), *b = ot_node_child(v, 1);
    return (per_channel(a, like) && ot_node_kind(b) == OT_NODE_CONST) ||
           (per_channel(b, like) && ot_node_kind(a) == OT_NODE_CONST);
}

/* Whether n could be a chain node: an op other steps' operands are not. */
static bool chain_op(const ot_node *n)
{
    return is_plain(n, OT_OP_CONV) || is_plain(n, OT_OP_ADD) || is_plain(n, OT_OP_SUB) ||
           is_plain(n, OT_OP_MUL);
}

/* The step n makes, from its op and operands alone (stage NONE when it is
 * none). A step keeps the shape and dtype of the chain operand it reads. */
static link step(const ot_node *n)
{
    link none = {NONE, NULL, NULL};
    if (!chain_op(n) || ot_node_shape(n).ndim < 3) return none;
    if (is_plain(n, OT_OP_CONV)) return (link){CONV, NULL, NULL};
    const ot_node *a = ot_node_child(n, 0), *b = ot_node_child(n, 1);
    link l = none;
    if (is_plain(n, OT_OP_SUB)) {
        if (per_channel(b, n)) l = (link){SUB, a, b};
    } else {
        bool mul = is_plain(n, OT_OP_MUL);
        if (!per_channel(b, n) && !(mul && inv_std(b, n))) {   /* the other order */
            const ot_node *t = a;
            a = b;
            b = t;
        }
        int add_stage = is_plain(a, OT_OP_CONV) ? BIAS : SHIFT;
        if (mul && inv_std(b, n)) l = (link){NORM, a, b};
        else if (per_channel(b, n)) l = (link){mul ? SCALE : add_stage, a, b};
    }
    bool keeps = l.prev && chain_op(l.prev) && ot_node_dtype(l.prev) == ot_node_dtype(n) &&
                 same_shape(ot_node_shape(l.prev), ot_node_shape(n));
    return keeps ? l : none;
}

/* n's stage when it tops a chain that goes down, step by step in an order
 * PREV allows, to a conv; else NONE. *len gets the chain's node count.
 * Stages fall at each step, so the walk takes at most SHIFT steps. */
static int chain_stage(const ot_node *n, int *len)
{
    link l = step(n);
    int top = l.stage;
    *len = 1;
    while (l.stage > CONV) {
        link below = step(l.prev);
        if (!(PREV[l.stage] >> below.stage & 1u)) return NONE;
        l = below;
        ++*len;
    }
    return l.stage == CONV ? top : NONE;
}

/* ---- the selector ----------------------------------------------------------- */

/* Select: the search starts on a convolution (not a transposed one). */
static bool conv_select(const ot_node *n, void *user)
{
    (void)user;
    return is_plain(n, OT_OP_CONV);
}

/* SelectOutput: a reader of member n joins when it is the chain's next
 * step after n. The seed's selector takes one BatchNorm and then no more;
 * here a member's reader joins only as its one next step, and a conv read
 * by two batch norms grows two roots, which drops the match. */
static bool conv_select_output(const ot_node *n, const ot_node *out, void *user)
{
    (void)user;
    int len;
    return step(out).prev == n && chain_stage(out, &len) != NONE;
}

/* Filter: a batch norm (its normalising product) must follow the conv, and
 * the match must be that chain, node for node (nodes come operands first,
 * so the chain's bottom, the conv, is nodes[0]). */
static bool conv_filter(int nnodes, const ot_node *const nodes[], void *user)
{
    (void)user;
    int len;
    if (chain_stage(nodes[nnodes - 1], &len) < NORM || len != nnodes) return false;
    const ot_node *n = nodes[nnodes - 1];
    for (int i = nnodes - 1; i > 0; i--) {
        if (n != nodes[i]) return false;
        n = step(n).prev;
    }
    return n == nodes[0];
}

/* ---- the replacement ---------------------------------------------------------- */

typedef struct fold {
    const ot_rewrite_match *m;
    const char *file;
    int line;
    ot_shape st;     /* (1, C, 1, ...): the result's with every dim but C 1 */
} fold;

static ot_node *bin(const fold *f, ot_op op, ot_node *a, ot_node *b)
{
    return ot_build_at(op, a, b, NULL, f->file, f->line);
}

/* x (any shape of `to`'s element count) reshaped to `to`, unless it has it. */
static ot_node *shaped(const fold *f, ot_node *x, ot_shape to)
{
    if (!x) return NULL;
    return same_shape(ot_node_shape(x), to) ? x : ot_reshape_node_at(x, to, f->file, f->line);
}

/* A parameter as the match's input (earlier passes' rewrites in), in st. */
static ot_node *param(const fold *f, const ot_node *read)
{
    return read ? shaped(f, ot_rewrite_input(f->m, read), f->st) : NULL;
}

/* CreateSubgraphNode: conv(x, W * scale) + shift, over the match's inputs. */
static ot_node *conv_create(const ot_rewrite_match *m, void *user)
{
    (void)user;
    const ot_node *conv = m->nodes[0], *root = m->nodes[m->nnodes - 1];
    const ot_node *read[SHIFT + 1] = {0};
    for (int i = 1; i < m->nnodes; i++) {
        link l = step(m->nodes[i]);
        read[l.stage] = l.param;
    }
    fold f = {m, ot_node_file(root), ot_node_line(root), ot_node_shape(root)};
    for (int d = 0; d < f.st.ndim; d++)
        if (d != 1) f.st.dims[d] = 1;
    ot_node *scale = param(&f, read[NORM]);
    if (read[SCALE]) scale = bin(&f, OT_OP_MUL, scale, param(&f, read[SCALE]));
    ot_node *mean = param(&f, read[SUB]);
    ot_node *shift = read[BIAS] ? bin(&f, OT_OP_SUB, param(&f, read[BIAS]), mean)
                                : ot_build_at(OT_OP_NEG, mean, NULL, NULL, f.file, f.line);
    shift = bin(&f, OT_OP_MUL, shift, scale);
    if (read[SHIFT]) shift = bin(&f, OT_OP_ADD, shift, param(&f, read[SHIFT]));
    ot_node *w = ot_rewrite_input(m, ot_node_child(conv, 1));
    ot_shape ws = w ? ot_node_shape(w) : f.st;   /* (C, in / groups, kernel...) */
    for (int d = 1; d < ws.ndim; d++) ws.dims[d] = 1;
    ot_node *wf = bin(&f, OT_OP_MUL, w, shaped(&f, scale, ws));
    ot_args args = ot_node_args(conv);
    ot_node *y = ot_build_at(OT_OP_CONV, ot_rewrite_input(m, ot_node_child(conv, 0)), wf, &args,
                             ot_node_file(conv), ot_node_line(conv));
    return bin(&f, OT_OP_ADD, y, shift);
}

static const ot_rewrite_rule conv_bn_rules[] = {{
    .name = "conv_bn",
    .select = conv_select,
    .select_output = conv_select_output,
    .filter = conv_filter,
    .create = conv_create,
}};

const ot_rule_set ot__conv_bn_set = {"conv_bn", 1, conv_bn_rules};

/*
 * optree/attention.h - scaled dot-product attention as one op-tree node:
 * lazy, printable, parseable and differentiable like ot_conv. The cpu
 * backend runs it fused (FlashAttention's tiling with an online softmax:
 * memory linear in the sequence, never the seq_q x seq_k matrix); the ref
 * backend computes the plain formula as the oracle.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_ATTENTION_H
#define OPTREE_ATTENTION_H

/* The options of ot_attention (zero: the default):
 *   mask    an additive mask, broadcastable to (batch, heads, seq_q,
 *           seq_k), of q's dtype, or NULL: added to the scaled scores
 *           before the softmax (-inf excludes a key; +inf and NaN give
 *           NaN, as PyTorch);
 *   causal  query i sees keys j <= i only: the top-left aligned lower
 *           triangle, PyTorch's scaled_dot_product_attention(is_causal)
 *           convention, also where seq_q != seq_k;
 *   scale   the scores' factor; 0: 1 / sqrt(dim); inf or NaN is an error.
 */
typedef struct ot_attn_opts {
    const char *spec_;   /* the options as written (the macro sets it) */
    ot_node *mask;
    bool causal;
    double scale;
} ot_attn_opts;

/* ot_attention(q, k, v, ...): softmax(q k^T * scale + mask) v per (batch,
 * head): q (batch, heads, seq_q, dim), k (batch, heads, seq_k, dim), v
 * (batch, heads, seq_k, dim_v), all of one float dtype (f16 and bf16
 * computed in f32, rounded at the output); the result is (batch,
 * heads, seq_q, dim_v). A query row that sees no key (every key masked by
 * -inf or by causality, or seq_k 0) gives zeros, and zero gradients; a
 * row every key of which a large finite mask hides (-1e9, -FLT_MAX) is
 * still a softmax of its scores, as PyTorch's (in f32 the mask absorbs
 * q k^T, so the row is the mean of v). Gradients go to q, k, v and the
 * mask (the mask's: the scores' gradient summed over its broadcast dims);
 * second order is not supported (autodiff refuses attention_grad). Errors
 * at build time, naming shapes and the caller's file:line: rank other than
 * 4, batch, heads or dim that disagree, seq_k != v's seq, a mask not broadcastable, mixed dtypes.
 * The node is attention(q, pack) sliced to dim_v columns: pack is k, v and
 * the mask flattened into one vector, and the node's last column is each
 * row's logsumexp, which the backward pass reads (internal detail).
 *   ot_node *o = ot_attention(q, k, v, .causal = true);
 *   ot_node *p = ot_attention(q, k, v, .mask = m, .scale = 0.5);      */
ot_node *ot_attention_at(ot_node *q, ot_node *k, ot_node *v, const ot_attn_opts *opts,
                         const char *file, int line);
#define ot_attention(q, k, v, ...)                                                          \
    ot_attention_at(OT__NODE(q), OT__NODE(k), OT__NODE(v),                                  \
                    &OT__OPT(ot_attn_opts, __VA_ARGS__), __FILE__, __LINE__)

#endif /* OPTREE_ATTENTION_H */

/*
 * node_build.h - private to the node builder (node.c) and its inference
 * (node_infer.c): what a node will be (proto), where it is built and from
 * what (site), the builder's error, and the per-kind inference that
 * ot_build_at dispatches to.
 */
#ifndef OT_NODE_BUILD_H
#define OT_NODE_BUILD_H

#include "internal.h"
#include "ops.h"

/* What a node will be, worked out before it is allocated. */
typedef struct proto {
    ot_shape shape;
    ot_dtype dtype;
    ot_dtype common;      /* binary ops: the operands' promoted dtype */
    bool weak;
    bool perm_given;      /* args.perm as written, even all zero */
    const ot__axes *named;   /* the result's names when aligned by name */
    ot_args args;
} proto;

typedef struct site {
    ot_op op;                 /* a registered op's own number, for messages */
    const char *file;
    int line;
    const ot_custom *custom;  /* the registered op, or NULL */
    ot_node *a, *b;           /* the operands as given: named in messages,
                                 b read by concat's inference */
} site;

/* The builder's error, with the operands' names (node.c). */
int ot__build_fail(const site *st, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define FAIL(st, code, ...) ot__build_fail((st), (code), __VA_ARGS__)

/* The op's dtype rule; inline, as every plain build in node.c asks it. */
static inline ot_dtype apply_flags(ot_op op, ot_dtype d)
{
    unsigned f = ot__flags_of(op);
    if (f & OT_FLAG_INDEX) return OT_I32;
    if ((f & OT_FLAG_FLOAT) && d == OT_I32) return OT_F64;
    return d;
}

/* Each fills p (zeroed, args normalised) for its kind of op, or fails with
 * the error set and returns its code. */
int ot__norm_axis(const site *st, int axis, int ndim, const ot_shape *shape, int *out);
int ot__infer_elementwise(const site *st, ot_node *a, ot_node *b, proto *p);
int ot__infer_reduce(const site *st, ot_node *a, proto *p);
int ot__infer_dot(const site *st, ot_node *a, ot_node *b, proto *p);
int ot__infer_transpose(const site *st, ot_node *a, proto *p);
int ot__infer_slice(const site *st, ot_node *a, proto *p);
int ot__infer_reshape(const site *st, ot_node *a, proto *p);
int ot__infer_special(const site *st, ot_node *a, proto *p);
/* A structured registered op's node (ops_struct.c): its shape rule, and
 * operands of another dtype than the result's replaced by casts. */
int ot__infer_struct(const site *st, ot_node **a, ot_node **b, proto *p);
/* conv_shape.c: conv, conv_transpose, conv_wgrad. */
int ot__infer_conv(const site *st, ot_node *a, ot_node *b, proto *p);
/* pool_shape.c: max_pool, avg_pool and their gradients (b: NULL for the
 * one-operand ones). */
int ot__infer_pool(const site *st, ot_node *a, ot_node *b, proto *p);
/* topk_shape.c: topk, take_along and scatter_along (ot__infer_index's). */
int ot__infer_topk(const site *st, const ot_node *a, const ot_node *b, proto *p);
/* attn_shape.c: attention and attention_grad. */
int ot__infer_attn(const site *st, ot_node *a, ot_node *b, proto *p);

/* index_shape.c: take, scatter_add, select, tril, triu (b: NULL for tril
 * and triu); a constant operand is replaced by a checkpoint of it. */
int ot__infer_index(const site *st, ot_node **a, ot_node **b, proto *p);

#endif

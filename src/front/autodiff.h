/*
 * autodiff.h - private to autodiff.c (the sweep, the object and its memo,
 * gradients w.r.t. a tensor) and autodiff_rules.c (the rule of each op):
 * the sweep the rules push into, the call site gradient nodes carry, and
 * the builder shorthands both write gradients with.
 */
#ifndef OT_AUTODIFF_H
#define OT_AUTODIFF_H

#include "front.h"
#include "ops.h"

/* Gradient nodes carry the call site of the forward node they differentiate,
 * so an error inside a gradient points at the user's line. */
typedef struct ctx {
    const char *file;
    int line;
    ot_backend *be;
} ctx;

typedef struct sweep {
    ot__walker walker;        /* numbers the nodes: index = post-order position */
    ot_node **order;          /* post-order */
    ot_node **grad;           /* per position; nodes owned by the sweep's pool */
    ot_node **wide;           /* per position: contributions of one shape wider
                                 than the node's, added up, not yet summed back
                                 (ot__ad_settle) */
    bool *live;               /* a float leaf is below and gradients reach it */
    int len, cap;
} sweep;

/* Gradient nodes broadcast by position: the forward tree's operands are
 * aligned by name already, and a gradient that kept a narrower operand's
 * names (w of axes C) was aligned with a wider one by name otherwise. */
static inline ot_node *B(const ctx *c, ot_op op, ot_node *a, ot_node *b)
{
    return ot__build_positional(op, a, b, NULL, c->file, c->line);
}

static inline ot_node *reduce(const ctx *c, ot_op op, ot_node *x, int axis, bool keepdims)
{
    ot_args r = {.axis = axis, .keepdims = keepdims};
    return ot_build_at(op, x, NULL, &r, c->file, c->line);
}

static inline ot_node *K(double v) { return ot_const(v); }

/* autodiff_rules.c: read-only zeros of shape (a broadcast view, owned by
 * the current pool); g brought up to exactly shape; x transposed by perm;
 * g summed back to shape t. */
ot_node *ot__ad_zeros(ot_backend *be, ot_shape shape, ot_dtype dt);
ot_node *ot__ad_full(const ctx *c, ot_node *g, ot_shape shape, ot_dtype dt);
ot_node *ot__ad_transpose(const ctx *c, ot_node *x, const int *perm);
ot_node *ot__ad_sum_to(const ctx *c, ot_node *g, const ot_shape *t);
/* Sums the contributions waiting in s->wide[i] back to node i's shape
 * into its gradient: before the gradient is read. */
void ot__ad_settle(const ctx *c, sweep *s, int i);
/* Pushes node n's gradient g to its operands by n's rule; OT_EUNSUPPORTED
 * for an op without one. */
int ot__ad_apply(sweep *s, ot_backend *be, ot_node *n, ot_node *g);

#endif

/*
 * ref.h - the reference backend's vtable (src/ref/), named ot__<name>_vt
 * as backends.def's row "ref" has it; the registry (src/front/backend.c)
 * declares it from that row, the tests include this header.
 */
#ifndef OT_REF_H
#define OT_REF_H

#include "internal.h"

extern const ot_backend_vt ot__ref_vt;

/* ref_struct.c: a structured registered op's node from its operands'
 * values x and y (NULL where absent), in double, into out. */
int ot__ref_struct(const ot_node *node, const double *x, const double *y, double *out);
/* ref_conv.c: conv, conv_transpose or conv_wgrad node of row-major
 * operands a and b into out, in double. */
void ot__ref_conv(const ot_node *node, const double *a, const double *b, double *out);

/* ref_pool.c: a pooling node (internal.h's ot__pool_geom) of row-major
 * operands a and b (NULL for one-operand ops) into out, in double. */
void ot__ref_pool(const ot_node *node, const double *a, const double *b, double *out);

/* ref_index.c: an indexing node (internal.h's ot__index_geom) of row-major
 * operands a and b (NULL for tril and triu) into out, in double; the
 * error (OT_EINVAL) for an index out of range, out then unwritten. */
int ot__ref_index(const ot_node *node, const double *a, const double *b, double *out);
/* ref_topk.c: topk, take_along and scatter_along (ot__ref_index's). */
int ot__ref_topk(const ot_node *node, const double *a, const double *b, double *out);
/* ref_attn.c: an attention node (internal.h's ot__attn_geom) of row-major
 * operands a and b into out, in double; OT_ENOMEM recorded on failure. */
int ot__ref_attn(const ot_node *node, const double *a, const double *b, double *out);

#endif

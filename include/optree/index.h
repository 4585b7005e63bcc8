/*
 * optree/index.h - indexing ops as op-tree nodes: gather (take,
 * embedding), scatter-add (index_add), selection (where) and triangular
 * masks (tril, triu) and cumulative sums (cumsum). Lazy, printable, parseable and differentiable like
 * any op; both backends run them.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 *
 * Indices are int32 tensors (or trees) of any shape. A negative index
 * counts from the end, as NumPy's (-1 is the last), once: the valid range
 * along an axis of size n is [-n, n). An index outside it is an error of
 * the assignment (OT_EINVAL, naming the op, the index, its position among
 * the indices and the axis size): indices read from a tensor are checked
 * before anything of the assignment runs, so it writes nothing (in a
 * sequence, before that step runs: optree/program.h); indices computed inside
 * the tree are checked as the kernel reads them (on the cpu backend
 * outputs may then be partly written). No kernel reads or writes outside
 * a buffer whatever the indices. Indices have no gradient.
 */
#include "../optree.h"

#ifndef OPTREE_INDEX_H
#define OPTREE_INDEX_H

/* ot_take(x, idx, axis): NumPy's np.take(x, idx, axis) (PyTorch's
 * index_select for 1-D idx): the result has shape x.shape[:axis] +
 * idx.shape + x.shape[axis+1:], element [..., j..., ...] = x[..., idx[j...],
 * ...]. axis may be negative (counted from the end). x of any dtype; idx
 * int32. The gradient in x is a scatter-add of the result's gradient (the
 * rows read, repeated ones summed). Errors at build time: idx not int32,
 * axis out of range, x a 0-d tensor, a result of more than OT_MAX_DIMS
 * dims. */
ot_node *ot_take_at(ot_node *x, ot_node *idx, int axis, const char *file, int line);
#define ot_take(x, idx, axis) ot_take_at(OT__NODE(x), OT__NODE(idx), (axis), __FILE__, __LINE__)

/* ot_index_add(x, idx, src, axis): x plus src's slices added along axis at
 * idx, repeated indices accumulating: NumPy's np.add.at(x, (slice(None),)
 * * axis + (idx,), src) on a copy, PyTorch's x.index_add(axis, idx, src)
 * for 1-D idx. src's shape must be x.shape[:axis] + idx.shape +
 * x.shape[axis+1:] (take's result shape); the result is x's shape and the
 * promoted dtype of x and src. Gradients: g in x, take(g, idx, axis) in
 * src. On the cpu backend ot_assign(x, ot_index_add(x, idx, src, axis)),
 * and likewise x - lr*ot_scatter_add(src, idx, ...) into x (an SGD step
 * on an embedding table), update x in place, reading and writing only
 * the indexed slices (ot_explain: "in place: indexed rows only"). */
ot_node *ot_index_add_at(ot_node *x, ot_node *idx, ot_node *src, int axis, const char *file,
                         int line);
#define ot_index_add(x, idx, src, axis)                                       \
    ot_index_add_at(OT__NODE(x), OT__NODE(idx), OT__NODE(src), (axis), __FILE__, __LINE__)

/* ot_scatter_add(src, idx, axis, size): ot_index_add into zeros of axis
 * size `size` (the node take's gradient is). */
ot_node *ot_scatter_add_at(ot_node *src, ot_node *idx, int axis, int64_t size, const char *file,
                           int line);
#define ot_scatter_add(src, idx, axis, size)                                  \
    ot_scatter_add_at(OT__NODE(src), OT__NODE(idx), (axis), (size), __FILE__, __LINE__)

/* ot_embedding(table, ids): rows of table (vocabulary, features...) at
 * int32 ids of any shape, shape ids.shape + table.shape[1:]: ot_take
 * along axis 0, PyTorch's F.embedding. The gradient in the table is a
 * scatter-add of the rows' gradients (no one-hot product). */
ot_node *ot_embedding_at(ot_node *table, ot_node *ids, const char *file, int line);
#define ot_embedding(table, ids) ot_embedding_at(OT__NODE(table), OT__NODE(ids), __FILE__, __LINE__)

/* ot_where(cond, a, b): NumPy's np.where: a where cond is nonzero, else b,
 * the three broadcast together (NumPy's rule); the dtype is a's and b's
 * promoted one (a constant is weak, as in any op); cond may be of any
 * dtype (a NaN is nonzero, as in NumPy). Values are exact: an inf or NaN
 * of the branch not taken never leaks (where(m, x, -INFINITY) is a causal
 * mask). Gradients: g where cond, 0 elsewhere in a; the other way round in
 * b; none in cond. */
ot_node *ot_where_at(ot_node *cond, ot_node *a, ot_node *b, const char *file, int line);
#define ot_where(cond, a, b) \
    ot_where_at(OT__NODE(cond), OT__NODE(a), OT__NODE(b), __FILE__, __LINE__)

/* ot_tril(x, k), ot_triu(x, k): NumPy's np.tril / np.triu over the last
 * two axes of x (rank 2 or more; the others are a batch): tril keeps
 * element [..., i, j] where j - i <= k, triu where j - i >= k, the rest
 * +0. k = 0 is the main diagonal, k > 0 above it. The gradient is the
 * same mask of g. ot_tril(ot_ones-like, 0) is a causal mask. */
ot_node *ot_tril_at(ot_node *x, int k, const char *file, int line);
ot_node *ot_triu_at(ot_node *x, int k, const char *file, int line);
#define ot_tril(x, k) ot_tril_at(OT__NODE(x), (k), __FILE__, __LINE__)
#define ot_triu(x, k) ot_triu_at(OT__NODE(x), (k), __FILE__, __LINE__)

/* ot_cumsum(x, axis): NumPy's np.cumsum(x, axis) (the node prints as
 * cumulative_sum, NumPy 2's name): element i along the axis
 * is the sum of elements 0..i (in double on both backends, then rounded
 * to x's dtype: once, but for f16 and bf16 on the cpu backend, which go
 * through f32 and can differ from ref by an ulp at a tie). x floating point (f16 and bf16 too) of rank 1 or more
 * (int32 is refused: ot_cast it). The gradient is the reversed cumulative
 * sum of g. */
ot_node *ot_cumsum_at(ot_node *x, int axis, const char *file, int line);
#define ot_cumsum(x, axis) ot_cumsum_at(OT__NODE(x), (axis), __FILE__, __LINE__)

#endif /* OPTREE_INDEX_H */

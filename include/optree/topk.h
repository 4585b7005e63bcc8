/*
 * optree/topk.h - top-k along an axis (for sampling and beam search) and
 * the along-axis gather and scatter-add it stands on (NumPy's
 * take_along_axis, PyTorch's gather and scatter_add), as op-tree nodes:
 * lazy, printable, parseable and differentiable like any op; both
 * backends run them.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 *
 * Order: topk ranks the elements of each line along the axis as a stable
 * sort would (np.argsort(kind='stable') of the descending order for the
 * largest): equal values (+0.0 and -0.0 are equal) keep their positions'
 * order, the lower position first. NaN ranks above every number, as in
 * PyTorch: the NaNs of a line come first with largest (in position
 * order) and last with smallest. Indices are int32 (of any shape) as in
 * index.h: negative ones count from the end once, and one outside [-n, n)
 * for an axis of size n is an error of the assignment (OT_EINVAL), never
 * a read or write outside a buffer.
 */
#include "../optree.h"

#ifndef OPTREE_TOPK_H
#define OPTREE_TOPK_H

/* The options of ot_topk and ot_topk_indices, in positional order (the
 * macro's unset members take the defaults):
 *   axis     the axis the lines run along, negative from the end; -1;
 *   largest  the k largest, best first (false: the k smallest); true;
 *   sorted   best first (false: in the order of their positions along the
 *            line, ascending); true.
 * Called with a struct whose spec_ is NULL, ot_topk_at takes every
 * member as given. */
typedef struct ot_topk_opts {
    const char *spec_;
    int axis;
    bool largest;
    bool sorted;
} ot_topk_opts;
#define OT__TOPK_MEMBERS "axis,largest,sorted"

/* ot_topk(x, k, ...): the k largest (or smallest) elements of each line
 * of x along the axis: torch.topk(x, k, dim, largest, sorted).values; the
 * result has x's shape with the axis of size k and x's dtype.
 * ot_topk_indices: their int32 positions along the axis (.indices). k may
 * be 0 (an empty axis) up to the axis' size. The values' gradient in x is
 * the incoming gradient scattered to the chosen positions (zero
 * elsewhere); the indices have none. Errors at build time, naming the op,
 * x's shape, k and the caller's file:line: k outside [0, size], axis out
 * of range, x 0-d. The values are ot_take_along(x, ot_topk_indices(x, k,
 * ...), axis): one selection node, read by the gather and its gradient.
 *   ot_node *v = ot_topk(logits, 5);                  // last axis
 *   ot_node *i = ot_topk_indices(x, 2, .axis = 0, .largest = false); */
ot_node *ot_topk_at(ot_node *x, int64_t k, const ot_topk_opts *opts, const char *file, int line);
ot_node *ot_topk_indices_at(ot_node *x, int64_t k, const ot_topk_opts *opts, const char *file,
                            int line);
#define ot_topk(x, k, ...)                                                                   \
    ot_topk_at(OT__NODE(x), (k), &OT__OPT(ot_topk_opts, __VA_ARGS__), __FILE__, __LINE__)
#define ot_topk_indices(x, k, ...)                                                           \
    ot_topk_indices_at(OT__NODE(x), (k), &OT__OPT(ot_topk_opts, __VA_ARGS__), __FILE__,     \
                       __LINE__)

/* ot_take_along(x, idx, axis): np.take_along_axis(x, idx, axis) (PyTorch's
 * gather(x, axis, idx)): idx int32 of x's rank and x's dims except along
 * the axis (no broadcasting), the result idx's shape, x's dtype:
 * out[..., j, ...] = x[..., idx[..., j, ...], ...] line by line. The
 * gradient in x is ot_scatter_add_along of it (repeated indices summed). */
ot_node *ot_take_along_at(ot_node *x, ot_node *idx, int axis, const char *file, int line);
#define ot_take_along(x, idx, axis)                                                           \
    ot_take_along_at(OT__NODE(x), OT__NODE(idx), (axis), __FILE__, __LINE__)

/* ot_scatter_add_along(src, idx, axis, size): zeros of src's shape with
 * the axis of size `size`, src's elements added at idx line by line,
 * repeated indices accumulating (PyTorch's zeros(...).scatter_add(axis,
 * idx, src)); idx int32 of src's shape. The gradient in src is
 * ot_take_along of it. */
ot_node *ot_scatter_add_along_at(ot_node *src, ot_node *idx, int axis, int64_t size,
                                 const char *file, int line);
#define ot_scatter_add_along(src, idx, axis, size)                                            \
    ot_scatter_add_along_at(OT__NODE(src), OT__NODE(idx), (axis), (size), __FILE__, __LINE__)

#endif /* OPTREE_TOPK_H */

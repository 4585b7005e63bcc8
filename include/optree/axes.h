/*
 * optree/axes.h - named axes: dims that carry names, and reductions,
 * softmax and dot that take names instead of positions.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_AXES_H
#define OPTREE_AXES_H

/* ------------------------------------------------------------------------ */
/* Named axes                                                                */
/* ------------------------------------------------------------------------ */

/* After ngraph's make_axis(length, name): the dims of a tensor may carry
 * names, and reductions, softmax and dot may take names instead of
 * positions. Names follow the values through every builder:
 *   - elementwise ops, cast and keep take their operands' names; when both
 *     operands of a binary op are named (and differently), they are aligned
 *     by name instead of by position: the result has a's names in a's
 *     order, then b's other names in b's order; each operand is transposed
 *     into that order and given size-1 dims for the names it lacks (a
 *     tensor through views, an expression through a transpose, and, for
 *     dims it lacks between its own, a product with a broadcast ones view:
 *     x * 1 is x, bit for bit). A name's lengths in the two operands must
 *     agree or one be 1. With one operand named or neither, NumPy's
 *     positional rules apply as before, and the result keeps the named
 *     operand's names when it has that operand's rank;
 *   - reductions drop the reduced names (keepdims keeps them, size 1);
 *     transposes permute them; dot gives a's free name and b's; onehot and
 *     rand give none;
 *   - views: ot_transpose permutes them, ot_slice drops the names of dims
 *     indexed with OT_IDX, ot_reshape keeps them only when the dims are
 *     unchanged, ot_broadcast_to only when the rank is, ot_copy keeps them;
 *   - an assignment (ot_assign, ot_assign_many, ot_sequential, a program's
 *     steps) of a named value into an output named otherwise takes the
 *     value by name, as a binary op takes an operand: brought into the
 *     output's order, the names it lacks broadcast. A name the output
 *     lacks is OT_EINVAL, a length neither equal nor 1 OT_ESHAPE. With
 *     the output or the value unnamed, positions count, as before.
 *     Gradients (ot_autodiff_backprop, a program's backprop) are written
 *     by position: a gradient is in its wrt's layout, and a buffer named
 *     otherwise than its wrt is OT_EINVAL. A program's placeholder is
 *     brought by a transpose node, not a view, so that it follows a
 *     symbolic size.
 * Names are read when a node is built: renaming a tensor later changes how
 * it prints, not trees already built. They never change a plan or a
 * result: a tree without names plans and prints exactly as before.
 *
 *     ot_tensor_set_axes(x, "N,C,H,W");
 *     ot_sum(x, .axes = "C,H,W")          // (N): one sum per axis, last first
 *     ot_softmax(x, .axes = "C")
 *     ot_add(x, b)                        // b named "C": as b[None, :, None, None]
 *     ot_dot_axes(w, x, "C,H,W")          // w (C,H,W,K), x (N,C,H,W) -> (K,N)
 *
 * Errors name the axes: "sum: no axis 'Q' in (N,C,H,W)". Interned name sets
 * live as long as the process (a few hundred bytes per distinct set). */

/* Names t's dims: one name per dim, comma-separated ("N,C,H,W"; spaces
 * around names are ignored); NULL or "" clears them. OT_EINVAL for a bad
 * name, a repeated one or a count that is not t's rank; OT_ENULL. */
int ot_tensor_set_axes(ot_tensor *t, const char *axes);
/* Each ..._at below is its function with the caller's file:line, which
 * its errors name; the plain name is a macro over it (optree.h). */
int ot_tensor_set_axes_at(ot_tensor *t, const char *axes, const char *file, int line);
#define ot_tensor_set_axes(...) ot_tensor_set_axes_at(__VA_ARGS__, __FILE__, __LINE__)
/* The names as "N,C,H,W" (the library's string, valid for the process), or
 * NULL when t or node n has none. */
const char *ot_tensor_axes(const ot_tensor *t);
const char *ot_node_axes(const ot_node *n);
/* The position of the dim named name in n (a tensor or node), or a negative
 * code with the error set: OT_EINVAL naming the axes n has. */
int ot_axis_of_node(const ot_node *n, const char *name);
#define ot_axis_of(x, name) ot_axis_of_node(OT__NODE(x), (name))

/* Reductions, var/std and softmax/logsoftmax take .axes = "C,H,W" in place
 * of .axis: sum, mean, max and min reduce every axis named (one reduction
 * per axis, from the last position down, keepdims as given); argmax,
 * argmin, var, std, softmax, logsoftmax, squared_l2 and cross_entropy take
 * one name (several is OT_EUNSUPPORTED). An operand without names, an
 * unknown or repeated name, or .axis given too is OT_EINVAL. */

/* ngraph's dot over named axes: contracts the axes named in axes (NULL:
 * every name the two share) and gives w's other axes, then x's (ngraph's
 * order). Built from a transpose and a reshape of each operand (views of a
 * tensor where its strides allow; ot_T and ot_reshape_node otherwise) and
 * the 2-D dot, whose (free w, free x) result is reshaped back to the free
 * axes when a side keeps several. OT_EINVAL: an operand without names, an
 * unknown name, an axis one side lacks, a shared axis not contracted;
 * OT_ESHAPE: lengths that differ. A builder. */
ot_node *ot_dot_axes_at(ot_node *w, ot_node *x, const char *axes, const char *file, int line);
#define ot_dot_axes(w, x, axes)                                               \
    ot_dot_axes_at(OT__NODE(w), OT__NODE(x), (axes), __FILE__, __LINE__)

#endif /* OPTREE_AXES_H */

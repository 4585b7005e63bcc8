/*
 * optree/autodiff.h - training: reverse-mode gradients as op-trees,
 * trainable variables (gradients through views) and the optimizers.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"

#ifndef OPTREE_AUTODIFF_H
#define OPTREE_AUTODIFF_H

/* ------------------------------------------------------------------------ */
/* Autodiff                                                                  */
/* ------------------------------------------------------------------------ */

/* Reverse-mode gradients of a tree, as op-trees (neon's Autodiff):
 *
 *     ot_autodiff *ad = ot_autodiff_new(f, NULL);   // NULL: next_error = ones
 *     ot_node *g0 = ot_autodiff_grad(ad, x0);       // a tree; computes nothing
 *     ot_autodiff_backprop(ad, 2, (ot_tensor *[]){x0, x1},
 *                          (ot_tensor *[]){g0buf, g1buf});  // one evaluation
 *     ot_autodiff_free(ad);
 *
 * Gradient trees are ordinary trees built from the forward tree's nodes:
 * they print, explain, fuse, and can be differentiated again (a Hessian-
 * vector product is the gradient of sum(grad * v)). A gradient has the shape
 * and dtype of its tensor; broadcast operands are summed back to their shape.
 *
 * Rules. Every op of the table has one. Composites use their stable form:
 * the gradient of cross_entropy(softmax(x), t) w.r.t. x is built as
 * softmax(x) sum(t) - t (softmax(x) - t for targets that sum to 1 along the
 * axis, as in neon), w.r.t. t as minus the loss's own log p, and
 * logsoftmax's goes through exp of its own stable value. Ties of max, min,
 * maximum and minimum share the gradient equally among the tied elements;
 * clip passes it on the closed interval [lo, hi]. NaN: an operand that is
 * NaN gets a NaN gradient from every op whose derivative selects by its
 * value (abs, relu, maximum, minimum, max, min, clip, safelog's floor); one
 * that is not NaN gets 0 from a selection a NaN won (maximum(NaN, 2): NaN
 * for the first operand, 0 for the second, in either order; max of a line
 * holding NaNs: NaN for each NaN, 0 for the rest). Ops whose derivative
 * does not depend on the operand (add, sub, neg, sum, mean) pass g on, and
 * formulas give what IEEE arithmetic gives. Non-differentiable ops
 * (compares, sgn, finite, rint, argmax, argmin, onehot, rand), integer
 * values and constants contribute zero; an integer tensor's gradient is
 * zeros, and so does a registered op whose definition has no grad
 * (OT_FLAG_NODIFF: ot_op_register's "not differentiable"). Any other op
 * without a rule is OT_EUNSUPPORTED, naming the op and the file:line
 * where its node was built.
 *
 * Views. A gradient belongs to the memory a tensor views. The gradient
 * w.r.t. t sums the gradients of every leaf that reads any of t's elements,
 * each added back where it reads: t itself, an equal view or a transpose of
 * t, also with size-1 dims inserted (as alignment by axis name reads t), as
 * a tree, in t's layout (for x0t = ot_transpose(x0), the gradient of
 * x0t * x1 w.r.t. x0 is x1 transposed); another reshape, a slice (steps, negative
 * steps, overlapping slices) or a broadcast of t's memory by a scatter: each
 * such leaf's gradient is added, in the tree's order, into zeros through
 * the leaf's own view (a broadcast dim summed first), and t's view reads
 * the sums. The op set has no scatter, so that gradient is computed when
 * asked: a tensor node holding the values of that moment (ask again after
 * the tensors change; a program's backprop refuses it with OT_EUNSUPPORTED,
 * since its steps run later, and so does ot_autodiff_grad w.r.t. t of a
 * tree that reads it, which would otherwise take it for a constant: build
 * the views as expressions, ot_slice_node or ot_reshape_node, for a
 * gradient that is a tree and can be differentiated again). Leaves over parts of the buffer t does not
 * view add nothing. A t whose own elements alias (a broadcast view) has no
 * gradient that maps back when the tree reads its memory another way:
 * OT_EUNSUPPORTED, naming the dim; ask for the tensor it broadcasts.
 *
 * Ownership. Objects are refcounted and memoised per (tree, next_error) on
 * the backend of the tree's first leaf: a second ot_autodiff_new of the same
 * tree and next_error returns the same object. Each ot_autodiff_new is
 * balanced by an ot_autodiff_free. The memo keeps up to 64 keys, but holds
 * an object's tree only while something else does (a caller's object, or a
 * reference to the tree): a training loop that builds a new tree per step
 * does not keep the old steps' trees alive. It drops everything when the
 * backend is freed; free your own before the backend, as tensors.
 */
typedef struct ot_autodiff ot_autodiff;

/* Differentiates tree (building gradient trees, computing nothing) with
 * next_error as the gradient of the tree's value; NULL means ones. A
 * non-NULL next_error must have the tree's shape (OT_ESHAPE otherwise). NULL
 * on error: OT_EBACKEND for a tree without a tensor leaf, OT_EUNSUPPORTED
 * for an op without a rule. Not a builder: it clears the error slot. */
ot_autodiff *ot_autodiff_new(ot_node *tree, ot_node *next_error);
/* Each ..._at below is its function with the caller's file:line, which
 * its errors name; the plain name is a macro over it (optree.h). */
ot_autodiff *ot_autodiff_new_at(ot_node *tree, ot_node *next_error, const char *file, int line);
#define ot_autodiff_new(...) ot_autodiff_new_at(__VA_ARGS__, __FILE__, __LINE__)
/* Drops a reference. NULL is a no-op. */
void ot_autodiff_free(ot_autodiff *ad);
/* The gradient of the tree w.r.t. wrt, a tree of wrt's shape and dtype owned
 * by the current pool; zeros when the tree does not read wrt. A builder:
 * NULL on error, keeping the first one. */
ot_node *ot_autodiff_grad(ot_autodiff *ad, ot_tensor *wrt);
ot_node *ot_autodiff_grad_at(ot_autodiff *ad, ot_tensor *wrt, const char *file, int line);
#define ot_autodiff_grad(...) ot_autodiff_grad_at(__VA_ARGS__, __FILE__, __LINE__)
/* grads[i][...] = the gradient w.r.t. wrt[i], for i < n, in one evaluation
 * (ot_assign_many): subtrees the gradients share are computed once. Each is
 * written by position, in wrt[i]'s layout; a buffer whose axis names
 * differ from wrt[i]'s is OT_EINVAL. */
int ot_autodiff_backprop(ot_autodiff *ad, int n, ot_tensor *const wrt[],
                         ot_tensor *const grads[]);
int ot_autodiff_backprop_at(ot_autodiff *ad, int n, ot_tensor *const wrt[],
                            ot_tensor *const grads[], const char *file, int line);
#define ot_autodiff_backprop(...) ot_autodiff_backprop_at(__VA_ARGS__, __FILE__, __LINE__)
/* The gradient w.r.t. wrt as a new contiguous tensor (the caller frees it),
 * or NULL on error. */
ot_tensor *ot_autodiff_grad_tensor(ot_autodiff *ad, ot_tensor *wrt);
ot_tensor *ot_autodiff_grad_tensor_at(ot_autodiff *ad, ot_tensor *wrt, const char *file, int line);
#define ot_autodiff_grad_tensor(...) ot_autodiff_grad_tensor_at(__VA_ARGS__, __FILE__, __LINE__)
/* Copies the gradient w.r.t. wrt to host memory: row-major, in wrt's dtype. */
int ot_autodiff_grad_host(ot_autodiff *ad, ot_tensor *wrt, void *host);
int ot_autodiff_grad_host_at(ot_autodiff *ad, ot_tensor *wrt, void *host,
    const char *file, int line);
#define ot_autodiff_grad_host(...) ot_autodiff_grad_host_at(__VA_ARGS__, __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* Trainable variables and gradients through views                           */
/* ------------------------------------------------------------------------ */

/* ngraph's variables(): a tensor marked trainable is a variable; the flag
 * belongs to the memory it views, so every view of it (a reshape, slice,
 * transpose or broadcast of it) counts as that tensor; a view of the
 * buffer that reads none of its elements does not. One variable per
 * buffer: marking a second, different view of marked memory is OT_EINVAL
 * (an optimizer would update the shared memory twice); an integer tensor is
 * OT_EDTYPE and a read-only broadcast view OT_EINVAL. on = false unmarks
 * (the marked tensor or an equal view). Program variables
 * (ot_program_variable) start marked. */
int ot_tensor_set_trainable(ot_tensor *t, bool on);
/* Whether t reads any element of a trainable tensor; false for NULL. */
bool ot_tensor_trainable(const ot_tensor *t);
/* The trainable tensors tree reads, directly or through views, each once,
 * in post-order of the first leaf that reads it (operand a before b): the
 * marked tensors themselves, not the views, so they go straight to
 * ot_autodiff_grads and the optimizers. Writes at most n into out and
 * returns how many there are (call with n = 0 to count), or an error code. */
int ot_variables(const ot_node *tree, int n, ot_tensor *out[]);
/* g[i] = ot_autodiff_grad(ad, wrt[i]) for i < n (trees owned by the
 * current pool): with ot_variables, the w[] and g[] of ot_sgd_step and
 * ot_adam_step. On error no g[i] is kept. */
int ot_autodiff_grads(ot_autodiff *ad, int n, ot_tensor *const wrt[], ot_node *g[]);

/* ------------------------------------------------------------------------ */
/* Optimizers                                                                */
/* ------------------------------------------------------------------------ */

/* A step updates every parameter and its state in one ot_assign_many: each
 * new value is an op-tree of the old ones, all evaluated before any is
 * written, so the cpu backend runs a parameter's whole update as one pass
 * that reads w, its gradient and its state once and writes w and the state
 * once. Gradients are trees (an ot_autodiff_grad, or a tensor through
 * ot_tensor_node), so computing a gradient can fuse into its update. Every
 * w[i], g[i] and state tensor of one i has w[i]'s shape; constants are
 * weak, so f32 parameters stay f32. src/front/optim.c is short on purpose: read it
 * as an example of writing your own. */

/* A zero field of the options means its default, so (ot_adam){.lr = 1e-3}
 * and (ot_sgd){.momentum = 0.9} are complete: lr OT_SGD_LR or OT_ADAM_LR
 * (Keras's), beta1 0.9, beta2 0.999, eps 1e-8, t 1, grad_scale 1, momentum
 * and weight_decay 0 (a beta of exactly 0 is not expressible: 1e-300 acts
 * as 0). The same holds for ot_program_sgd/adam and ot_model_sgd/adam.
 * Both steps check every argument before writing anything: OT_ENULL for a
 * NULL array or entry, OT_EINVAL for n < 0, a negative, infinite or NaN
 * lr, momentum or weight_decay, a negative grad_scale, betas outside [0, 1), eps < 0 or
 * t < 0, OT_EDTYPE for an integer parameter, gradient, state or
 * lr_scale, OT_ESHAPE for a gradient or state whose shape is not exactly
 * w's or an lr_scale that is not 0-d, OT_EBACKEND for a gradient, state or
 * lr_scale on another backend than its parameter. */

/* A learning-rate schedule: lr_scale, when not NULL, is a 0-d float tensor
 * on the parameters' backend whose value multiplies lr each time the step
 * runs. An eager step can simply pass a new lr; a program's lr is built into
 * its steps, so ot_set(lr_scale, ...) before each ot_program_run is how a
 * program (and ot_model_fit's .lr_schedule) decays it. */

#define OT_SGD_LR 0.01    /* ot_sgd's lr when 0 */
#define OT_ADAM_LR 1e-3   /* ot_adam's lr when 0 */

/* SGD with momentum and weight decay (neon's GradientDescentMomentum):
 *     d = grad_scale*g + weight_decay*w
 *     v = momentum*v - lr*d
 *     w = w + v
 * With momentum 0, vel may be NULL (then w = w - lr*d). A clipping scale
 * from ot_clip_global_norm goes in grad_scale. */
typedef struct ot_sgd {
    double lr, momentum, weight_decay, grad_scale;
    ot_tensor *lr_scale;   /* NULL: none (see above) */
} ot_sgd;
int ot_sgd_step_at(const ot_sgd *o, int n, ot_tensor *const w[], ot_node *const g[],
                   ot_tensor *const vel[], const char *file, int line);
int(ot_sgd_step)(const ot_sgd *o, int n, ot_tensor *const w[], ot_node *const g[],
                 ot_tensor *const vel[]);
/* The macros (variadic, so that compound literals pass whole) give the
 * caller's file:line to its errors; the functions, called as
 * (ot_sgd_step)(...) or through a pointer, name none. */
#define ot_sgd_step(...) ot_sgd_step_at(__VA_ARGS__, __FILE__, __LINE__)

/* Adam (Kingma and Ba, 2015), t = 1 for the first step (the caller counts):
 *     d = grad_scale*g
 *     m = beta1*m + (1 - beta1)*d
 *     v = beta2*v + (1 - beta2)*d*d
 *     w = w - lr*sqrt(1 - beta2^t)/(1 - beta1^t) * m/(sqrt(v) + eps)
 *           - lr*weight_decay*w
 * The weight decay is decoupled (AdamW, Loshchilov and Hutter, 2019, and
 * PyTorch's AdamW): it shrinks w by lr*weight_decay (lr times lr_scale
 * under a schedule) and never enters m and v, so it is not divided by
 * sqrt(v) as an L2 term in the gradient would be. 0 (the default) is plain
 * Adam; PyTorch's AdamW default is 0.01. Zero fields mean the defaults
 * (above); ot_adam_default(lr) spells them out. */
typedef struct ot_adam {
    double lr, beta1, beta2, eps, grad_scale;
    double weight_decay;   /* decoupled, >= 0 (above) */
    int64_t t;
    ot_tensor *lr_scale;   /* NULL: none (see above) */
} ot_adam;
static inline ot_adam ot_adam_default(double lr)
{
    ot_adam o = OT__ZERO;
    o.lr = lr;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    o.grad_scale = 1;
    o.t = 1;
    return o;
}
int ot_adam_step_at(const ot_adam *o, int n, ot_tensor *const w[], ot_node *const g[],
                    ot_tensor *const m[], ot_tensor *const v[], const char *file, int line);
int(ot_adam_step)(const ot_adam *o, int n, ot_tensor *const w[], ot_node *const g[],
                  ot_tensor *const m[], ot_tensor *const v[]);
/* As ot_sgd_step's: the macro passes the caller's file:line. */
#define ot_adam_step(...) ot_adam_step_at(__VA_ARGS__, __FILE__, __LINE__)

/* Clipping by global norm: norm = sqrt(sum over i of sum(g[i]^2)), summed
 * in double; *scale = min(1, max_norm/norm), and 1 for a zero norm. Pass
 * *scale as the step's grad_scale. norm may be NULL. A NaN or infinite norm
 * gives a NaN scale (the step then poisons w, which is how the caller sees
 * it). max_norm must be > 0. */
int ot_clip_global_norm_at(int n, ot_node *const g[], double max_norm, double *scale,
                           double *norm, const char *file, int line);
int(ot_clip_global_norm)(int n, ot_node *const g[], double max_norm, double *scale, double *norm);
/* As ot_sgd_step's: the macro passes the caller's file:line. */
#define ot_clip_global_norm(...) ot_clip_global_norm_at(__VA_ARGS__, __FILE__, __LINE__)

#endif /* OPTREE_AUTODIFF_H */

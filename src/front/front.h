/*
 * front.h - what the files of the front layer (src/front/) declare for each
 * other: options and the environment (config.c), rule sets (rewrite.c), the
 * assignment's checks and last half and the backend registry (backend.c),
 * the optimizers' trees (optim.c), autodiff for programs (autodiff.c).
 * Nothing below the front layer sees it (docs/ARCHITECTURE.md, "The layers").
 */
#ifndef OT_FRONT_H
#define OT_FRONT_H

#include "internal.h"

/* The metadata key that batch norm's training trees put on the values of
 * one channel whose count divides by n - 1 (norm.c): a program run at
 * sizes where such a node holds fewer than 2 values refuses the run
 * (program_run.c), as the builder refused that shape. */
#define OT__META_TWO_VALUES "optree.needs_two_values"

/* ot_autodiff_grad, but an error where the gradient cannot be a tree (a
 * variable read through a reshape or slice is scattered when asked): for
 * programs, whose steps evaluate it later. */
ot_node *ot__autodiff_grad_tree(ot_autodiff *ad, ot_tensor *wrt);

/* The backend name and options in force (config.c): opts checked, defaults
 * and environment overrides applied; -1 with the error set when any is bad.
 * *isa_from tells where opts->isa came from, for messages; *rewrite gets
 * the rule sets in force (NULL: none), opts->rewrite the library's copy;
 * caches[0] OT_L2_BYTES and caches[1] OT_L3_BYTES (0: unset); *blas_core
 * OT_BLAS_CORE ("auto" when unset; a static string). */
int ot__config_resolve(const char **name, ot_backend_opts *opts, const char **isa_from,
                       struct ot__rewrite **rewrite, size_t caches[2], const char **blas_core);
/* Marks the cpu-only options as not in force: backend.c calls it for a
 * backend whose vtable says it does not use them. */
void ot__config_not_cpu(ot_backend_opts *opts);
/* The rule sets a list names (rewrite.c): *out NULL for NULL or "";
 * var names the option or variable the list came from, for messages.
 * Returns 0 or OT_EINVAL/OT_ENOMEM with the error set. */
int ot__rewrite_config(const char *list, const char *var, struct ot__rewrite **out);
const char *ot__rewrite_list(const struct ot__rewrite *rw);   /* the library's copy */
void ot__rewrite_free(struct ot__rewrite *rw);
/* The library's rule set "conv_bn" (rules_conv_bn.c), which rewrite.c's
 * registry lists next to its own "fuse". */
extern const ot_rule_set ot__conv_bn_set;
/* then(be, n, outs, rewritten, ctx) with be's rule sets applied to trees
 * (be->rewrite set); the rewritten trees live in a pool pushed for the call.
 * Each firing is written to log as ot_explain prints it (log may be NULL). */
typedef int ot__rewritten_fn(ot_backend *be, int n, ot_tensor *const outs[],
                             ot_node *const trees[], void *ctx);
int ot__rewrite_then(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                     FILE *log, ot__rewritten_fn *then, void *ctx);
/* Trees already checked (ot__assign_check) assigned on be, rewritten first
 * by its rule sets if it has any (backend.c): ot_assign_many's last half,
 * which a program's run on ref calls per step. */
int ot__assign_backend(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[]);
/* Makes a new program (nothing added yet) run its steps as assignments
 * (ot__assign_backend) rather than prepared by the backend: what ot_model
 * does with a 16-bit compute dtype, which the cpu backend does not
 * prepare yet (program.c). */
void ot__program_unprepared(ot_program *p);
/* ot_sequential's run (sequential.c): n checked steps in order, a value
 * that several steps compute computed once while what it reads is not
 * written in between. 0, or an error with *failed the step that failed
 * (earlier steps' writes done), or -1 when none ran (out of memory while
 * planning); the slot holds the message, without site or step. */
int ot__sequential_run(int n, const ot_step steps[], int *failed);
/* ot_sequential shares values only where that may save this many element
 * ops: below it, planning, rebuilding the steps and the extra assignment
 * cost more than the work saved. Callgrind, three 1-thread steps sharing
 * tanh(a*b) of n elements (saving 2n): 37.6k + 7.2n instructions a call
 * shared, 8.2k + 16.4n separately; break-even n = 3,200. */
#define OT__SHARE_MIN_SAVING 6144
/* The same plan made for any sink (sequential.c; a program's compile keeps
 * the assignments it gets and runs them at each run). emit gets, in order,
 * every assignment the steps take: for step j, the waves computing the
 * values kept for later steps (wave true, outputs the temporaries), then
 * the step over the kept values. be is the steps' one backend when trees
 * are final (rewritten by its rule sets, or it has none), else NULL (assign
 * them as ot_assign_many would). With keep, the temporaries outlive the
 * call: they are handed over in tmps (ntmp of them; the caller frees them
 * and the array, on error too) for the caller to run the assignments again. */
typedef int ot__share_emit(void *ctx, ot_backend *be, int step, bool wave, int n,
                           ot_tensor *const outs[], ot_node *const trees[]);
typedef struct ot__share_sink {
    ot__share_emit *emit;
    void *ctx;
    int64_t min_saving;   /* share only where it may save this many element ops */
    bool keep;
    ot_tensor **tmps;
    int ntmp;
} ot__share_sink;
int ot__share_steps(int n, const ot_step steps[], ot__share_sink *sink, int *failed);
/* Releases the autodiff objects memoised on be (autodiff.c); close
 * (ot_backend_free) empties the memo under its lock and stops it adding,
 * so another thread's ot_autodiff_new meanwhile is safe, and free (the
 * backend's teardown) frees it. */
void ot__autodiff_memo_close(ot_backend *be);
void ot__autodiff_memo_free(ot_backend *be);

/* Adds a backend that ot_backend_new finds by name (backend.c): the test
 * suite's, and later ones built outside the library's own list. 0, or
 * OT_EINVAL when the name is taken by another vtable or the table is full
 * (registering the same pair again is 0). */
int ot__backend_register(const char *name, const ot_backend_vt *vt);
/* The checks of an assignment of n trees into outs that backend.c makes
 * before any backend runs (NULLs, broadcast, dtypes, writable and disjoint
 * outputs, one backend); *be gets the outputs' backend (NULL for n = 0).
 * Clears the slot when the NULL checks pass. fit (n pointers, or NULL)
 * gets the trees laid out by their outputs' axis names (ot__assign_fit),
 * which the checks then read in their place. */
int ot__assign_check(const char *fn, int n, ot_tensor *const outs[], ot_node *const trees[],
                     ot_node **fit, ot_backend **be);
/* trees copied into fit (n), each laid out by its output's axis names
 * (ot__axes_fit: a tree named otherwise is transposed by name into its
 * named output); 0 or the error, set. A program's assignments call it;
 * ot_assign and ot_sequential have ot__assign_check do it. */
/* ot_assign_many without the layout by name: each tree written by
 * position (a gradient is in its wrt's layout, whatever names its tree
 * happens to carry). */
int ot__assign_by_position(const char *fn, int n, ot_tensor *const outs[],
                           ot_node *const trees[]);
int ot__assign_fit(const char *fn, const char *file, int line, int n, ot_tensor *const outs[],
                   ot_node *const trees[], ot_node **fit);
/* Where a call came from, for its errors: "file:line: fn: ..." (file NULL:
 * "fn: ..."). */
typedef struct ot__site {
    const char *fn, *file;
    int line;
} ot__site;
/* The options of ot_sgd_step and ot_adam_step with their zero fields set
 * to the defaults into *out, and checked alone (optim.c), the errors
 * reported at `at`; ot_model and programs check their optimizer with them. */
int ot__sgd_opts(const ot__site *at, const ot_sgd *in, ot_sgd *out);
int ot__adam_opts(const ot__site *at, const ot_adam *in, ot_adam *out);
/* SGD's update trees (ot_sgd_step's, same checks) into outs and trees, which
 * hold 2n entries, in the current pool, without running them; *count gets
 * how many (optim.c). */
int ot__sgd_trees(const ot__site *at, const ot_sgd *o, int n, ot_tensor *const w[],
                  ot_node *const g[], ot_tensor *const vel[], ot_tensor **outs, ot_node **trees,
                  int *count);
/* Adam's update trees (ot_adam_step's checks and trees) with the bias
 * correction computed on the backend from count, a 0-d f64 tensor holding
 * the step number t (a program increments it in a step of its own). */
int ot__adam_trees(const ot__site *at, const ot_adam *o, ot_tensor *count, int n,
                   ot_tensor *const w[], ot_node *const g[], ot_tensor *const m[],
                   ot_tensor *const v[], ot_tensor **outs, ot_node **trees, int *nout);

#endif

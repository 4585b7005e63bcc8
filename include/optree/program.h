/*
 * optree/program.h - programs: assignments run in order as one call,
 * compiled programs with placeholders and variables, and the model API
 * (layers, a loss, an optimizer and a training loop) built on them.
 *
 * Part of the public API: optree.h includes this header at its end, so
 * #include <optree.h> is all a program needs; included on its own it
 * includes optree.h first.
 */
#include "../optree.h"
#include "conv.h"   /* the model's conv and pooling layers take */
#include "pool.h"   /* ot_conv_opts and ot_pool_opts */

#ifndef OPTREE_PROGRAM_H
#define OPTREE_PROGRAM_H

/* ------------------------------------------------------------------------ */
/* Programs and sequences                                                    */
/* ------------------------------------------------------------------------ */

/* Several assignments run in order, as one call: each step is evaluated and
 * written before the next step's trees are evaluated, so a later tree that
 * reads a tensor an earlier step wrote sees the new values (ngraph's control
 * dependencies). Trees are lazy until their step runs: building them all
 * first is what makes this useful. Every step is checked (NULLs, shapes,
 * dtypes, outputs, one backend) before the first one runs; an error names
 * the call and the step ("file.c:88: sequential: step 2: ..."; a macro
 * passes __FILE__, __LINE__), and nothing is written then. A step that fails
 * while running (out of memory) leaves the earlier steps' writes in place,
 * and writes none of its own outputs. The values of indices (optree/index.h)
 * are a step's own, checked when it runs, since an earlier step may write
 * them: an index out of range in a later step is such a failure, after
 * the earlier steps have written.
 *
 * A value that several steps compute (one node, or nodes built alike over
 * the same tensors and constants) is computed once, by the first of them,
 * and kept for the later ones while no step in between writes memory it
 * reads: a tensor under it, a view overlapping one, or the output that
 * keeps it. A step after such a write computes it again, from what it
 * reads then. It is kept in the output of the step that computes it when
 * it is one of that step's trees (same shape and dtype), else in a
 * temporary of its own shape and dtype, freed after the last step that
 * reads it. Being stored at its dtype, a kept value is read as stored: a
 * later a*b + c over a kept a*b adds to the rounded product where the
 * step alone would fuse one fma. With rule sets (ot_backend_opts.rewrite)
 * every step is rewritten first, as its assignment would be, and the
 * rewritten trees are shared. A call whose sharing could save fewer than 6,144
 * element ops (each shared value's elements, once per later step reading
 * it) runs its steps as given: planning would cost more than it saves.
 * Programs (below) share values across their steps the same way, planned
 * once at compile and without that cut-off. */
typedef struct ot_step {
    int n;                        /* outputs, and trees, of this step */
    ot_tensor *const *outs;
    ot_node *const *trees;
} ot_step;
int ot_sequential_at(int n, const ot_step steps[], const char *file, int line);
#define ot_sequential(...) ot_sequential_at(__VA_ARGS__, __FILE__, __LINE__)

/* A program: placeholders (inputs bound per run, without a copy), variables
 * with initializers, and steps that run in creation order, each once per
 * run, a step seeing what earlier steps wrote (ngraph's sequential
 * semantics; there is no other order to sort into). ot_program_compile
 * checks every step and plans it once, with one arena for the temporaries
 * of every step (they run one after another); ot_program_run then binds the
 * placeholders and runs the plans without walking a tree or looking up a
 * plan. A value several steps compute is computed once per run and kept
 * for the later steps, as ot_sequential keeps it (above): the plan is made
 * at compile, the temporaries it needs live with the program. Results are
 * bitwise those of the same steps run as one ot_sequential (and of
 * ot_assign_many per step where the steps share no value).
 *
 *     ot_program *p = ot_program_new(be);
 *     int batch = ot_program_symbol(p, "batch", 32);          // nominal 32
 *     ot_tensor *x = ot_program_placeholder(p, "x", OT_SHAPE(OT_SYM(batch), 784), OT_F32);
 *     ot_tensor *w = ot_program_variable(p, "w", OT_SHAPE(784, 10), OT_F32,
 *                                        OT_INIT_UNIFORM(-0.05, 0.05, 1));
 *     ot_node *loss = ...trees over x and w...;
 *     ot_program_backprop(p, loss, 1, &w, &gw);                // step 0
 *     ot_program_sgd(p, &(ot_sgd){.lr = 0.1}, 1, &w, (ot_node *[]){ot_tensor_node(gw)}, NULL);
 *     ot_program_compile(p);
 *     for (...) ot_program_run(p, 1, &OT_BIND_DATA("x", host_batch, nbytes));
 *     ot_program_free(p);
 *
 * One call of a program at a time: a call that finds another in progress
 * (another thread's ot_program_run, say) returns OT_ESTATE at once and
 * changes nothing (the guard is one atomic exchange per call). Programs
 * are independent: threads may run programs of their own concurrently. A
 * program holds its steps' trees, outputs and placeholders; it is freed
 * before its backend (and not while a call on it runs).
 *
 * Each ot_program_* name below is a macro passing the caller's __FILE__ and
 * __LINE__ to its *_at function, so every error reads "file.c:88:
 * program_run: ...", as a builder's does; the _at functions are the ABI. */
typedef struct ot_program ot_program;

/* A new empty program on be. NULL (OT_ENULL, OT_ENOMEM) on error. */
ot_program *ot_program_new_at(ot_backend *be, const char *file, int line);
#define ot_program_new(...) ot_program_new_at(__VA_ARGS__, __FILE__, __LINE__)
/* Frees the program, its placeholders and variables. NULL is a no-op. */
void ot_program_free(ot_program *p);

/* A symbolic dim, for a placeholder's shape: OT_SYM(s) is symbol s (an id
 * from ot_program_symbol). */
#define OT_SYM(s) (-1 - (int64_t)(s))
/* Declares a symbol (a size fixed per run, such as the batch) with its
 * nominal size, at which trees are built and the program first compiled.
 * Returns its id (>= 0) or a negative OT_E* code (duplicate name, size < 0). */
int ot_program_symbol_at(ot_program *p, const char *name, int64_t nominal, const char *file,
                         int line);
#define ot_program_symbol(...) ot_program_symbol_at(__VA_ARGS__, __FILE__, __LINE__)
/* A placeholder: a tensor the program owns, to build trees from, whose data
 * is bound at each run. A dim may be OT_SYM(s); the tensor then has the
 * symbol's nominal size there. Names are unique among placeholders. Never
 * written by a step, and never freed by the caller; its own memory holds
 * zeros (a run reads the binding in place), and another program's steps
 * may not read it (OT_EINVAL). NULL on error. */
ot_tensor *ot_program_placeholder_at(ot_program *p, const char *name, ot_shape shape,
                                     ot_dtype dtype, const char *file, int line);
#define ot_program_placeholder(...) ot_program_placeholder_at(__VA_ARGS__, __FILE__, __LINE__)

/* A variable's initial value, set when the variable is made. */
typedef struct ot_init {
    int kind;                     /* OT_INIT_* */
    double value, lo, hi;         /* CONSTANT: value; UNIFORM: [lo, hi) */
    uint64_t seed;                /* UNIFORM: the ot_rand seed */
    const void *data;             /* DATA: row-major, in the variable's dtype */
} ot_init;
enum { OT_INIT_ZEROS = 0, OT_INIT_CONSTANT = 1, OT_INIT_UNIFORM = 2, OT_INIT_DATA = 3 };
#define OT_INIT_ZERO ((ot_init){.kind = OT_INIT_ZEROS})
#define OT_INIT_CONST(v) ((ot_init){.kind = OT_INIT_CONSTANT, .value = (v)})
#define OT_INIT_UNIFORM(l, h, s) ((ot_init){.kind = OT_INIT_UNIFORM, .lo = (l), .hi = (h), .seed = (s)})
#define OT_INIT_HOST(p) ((ot_init){.kind = OT_INIT_DATA, .data = (p)})
/* A trainable variable (ngraph's Variable with its initializer): a tensor
 * the program owns, initialised now, listed by ot_program_variables. Its
 * shape has no symbols. NULL on error. */
ot_tensor *ot_program_variable_at(ot_program *p, const char *name, ot_shape shape,
                                  ot_dtype dtype, ot_init init, const char *file, int line);
#define ot_program_variable(...) ot_program_variable_at(__VA_ARGS__, __FILE__, __LINE__)
/* The variables in creation order: the first min(n, count) into out
 * (borrowed); returns the count, or a negative OT_E* code. */
int ot_program_variables_at(const ot_program *p, int n, ot_tensor *out[], const char *file,
                            int line);
#define ot_program_variables(...) ot_program_variables_at(__VA_ARGS__, __FILE__, __LINE__)

/* Steps, appended in execution order; each returns 0 or a negative OT_E*
 * code (a NULL tree returns the builder's error). The program keeps its
 * own references to trees and outputs. After ot_program_compile no step
 * can be added (OT_ESTATE). */
int ot_program_assign_at(ot_program *p, ot_tensor *out, ot_node *tree, const char *file, int line);
#define ot_program_assign(p, out, x) ot_program_assign_at((p), (out), OT__NODE(x), __FILE__, __LINE__)
#define ot_program_assign_node(p, out, tree)                                   \
    ot_program_assign_at((p), (out), (tree), __FILE__, __LINE__)
int ot_program_assign_many_at(ot_program *p, int n, ot_tensor *const outs[],
                              ot_node *const trees[], const char *file, int line);
#define ot_program_assign_many(...) ot_program_assign_many_at(__VA_ARGS__, __FILE__, __LINE__)
/* grads[i] = the gradient of loss (next_error ones) w.r.t. wrt[i], as one
 * multi-assign step (ot_autodiff_backprop's). */
int ot_program_backprop_at(ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                           ot_tensor *const grads[], const char *file, int line);
#define ot_program_backprop(...) ot_program_backprop_at(__VA_ARGS__, __FILE__, __LINE__)
/* An SGD update (ot_sgd_step's trees and checks; zero options are the
 * defaults) as one step. */
int ot_program_sgd_at(ot_program *p, const ot_sgd *o, int n, ot_tensor *const w[],
                      ot_node *const g[], ot_tensor *const vel[], const char *file, int line);
#define ot_program_sgd(...) ot_program_sgd_at(__VA_ARGS__, __FILE__, __LINE__)
/* An Adam update (ot_adam_step's trees and checks) as two steps: the
 * program's own step count, o->t on the first run, goes up by one per run,
 * and the bias correction lr*sqrt(1 - beta2^t)/(1 - beta1^t) is computed
 * from it on the backend in f64 (ot_adam_step folds it on the host: the
 * weights agree to within a rounding of that factor to w's dtype). */
int ot_program_adam_at(ot_program *p, const ot_adam *o, int n, ot_tensor *const w[],
                       ot_node *const g[], ot_tensor *const m[], ot_tensor *const v[],
                       const char *file, int line);
#define ot_program_adam(...) ot_program_adam_at(__VA_ARGS__, __FILE__, __LINE__)

/* Checks every step (as ot_assign_many would, reporting "file:line:
 * program_compile: step i (tree built at file:line): ..."), plans each once
 * at the symbols' current sizes and lays out the one arena. Placeholders
 * must not be written by a step. */
int ot_program_compile_at(ot_program *p, const char *file, int line);
#define ot_program_compile(...) ot_program_compile_at(__VA_ARGS__, __FILE__, __LINE__)

/* A binding of one placeholder for a run: either a tensor (contiguous, of
 * the placeholder's dtype and shape, on the program's backend) or host data
 * (row-major, contiguous, in the placeholder's dtype), read in place. For
 * data, shape gives the sizes of symbolic dims when has_shape; else each
 * symbol keeps its current size. Host data states its size: nbytes, the
 * bytes readable at data (as ot_set_n's), at least what the bound shape
 * needs, or the run is OT_EINVAL naming the placeholder, the shape and both
 * byte counts (never a read past the buffer); 0 is "not given", an error
 * unless the shape has no elements. A tensor binding leaves nbytes 0. */
typedef struct ot_bind {
    const char *name;
    ot_tensor *tensor;
    const void *data;
    size_t nbytes;
    bool has_shape;
    ot_shape shape;
} ot_bind;
#define OT_BIND_TENSOR(nm, t) ((ot_bind){.name = (nm), .tensor = (t)})
#define OT_BIND_DATA(nm, p, n) ((ot_bind){.name = (nm), .data = (p), .nbytes = (n)})
#define OT_BIND_DATA_SHAPE(nm, p, s, n)                                        \
    ((ot_bind){.name = (nm), .data = (p), .nbytes = (n), .has_shape = true, .shape = (s)})

/* Runs a compiled program once with these bindings, which must name every
 * placeholder once. Checked before anything is written: an unknown or
 * repeated name, a placeholder left out, a wrong dtype or rank, a fixed dim
 * that differs, a symbol bound to two sizes, a tensor on another backend
 * or not contiguous, and memory that overlaps a step's output. A symbol
 * bound to a size the program was not compiled at re-specialises it: every
 * step's trees are rebuilt over placeholders of the new shape and planned
 * again (kept: a size among the 16 run most recently costs nothing again;
 * past 16 sizes the one run least recently is freed). That fails, naming the
 * step, where a tree fixes the symbol's size some other way: a view
 * (slice, reshape) of a symbolic placeholder, an output or another tensor
 * whose shape has the old size. */
int ot_program_run_at(ot_program *p, int n, const ot_bind bindings[], const char *file, int line);
#define ot_program_run(...) ot_program_run_at(__VA_ARGS__, __FILE__, __LINE__)

/* ot_program_run with placeholder i bound to tensors[i], in the order the
 * placeholders were made (n of them: every one), the same checks, errors
 * and results: the cheapest run for a caller that keeps its tensors in
 * that order (the Python module replays each assignment so). */
int ot_program_run_tensors_at(ot_program *p, int n, ot_tensor *const tensors[], const char *file,
                              int line);
#define ot_program_run_tensors(...) ot_program_run_tensors_at(__VA_ARGS__, __FILE__, __LINE__)

/* What a compiled program holds, at the symbols' current sizes (on the
 * ref backend, which plans nothing, kernels and the arena read 0). */
typedef struct ot_program_stats {
    int steps;                    /* steps per run */
    int kernels;                  /* kernels per run, every step's */
    int specializations;          /* compiled symbol sizes kept (at most 16) */
    size_t arena_bytes;           /* the one arena (temporaries and scratch) */
    size_t separate_bytes;        /* the steps' arenas added up: what running
                                     each step as its own assignment keeps */
} ot_program_stats;
int ot_program_stats_at(const ot_program *p, ot_program_stats *out, const char *file, int line);
#define ot_program_stats_get(...) ot_program_stats_at(__VA_ARGS__, __FILE__, __LINE__)
/* Prints every step's plan (as ot_explain_many) and the arena figures.
 * ot_explain(p, f) on a program is this call (C11 _Generic; C++ callers
 * call ot_program_explain), without the caller's file:line. */
int ot_program_explain_at(const ot_program *p, FILE *f, const char *file, int line);
int (ot_program_explain)(const ot_program *p, FILE *f);
#define ot_program_explain(p, f) ot_program_explain_at((p), (f), __FILE__, __LINE__)
#ifndef __cplusplus
#define ot_explain(x, f)                                                       \
    _Generic((x), ot_program *: ot_program_explain,                            \
             const ot_program *: ot_program_explain, default: ot_explain)((x), (f))
#endif

/* ------------------------------------------------------------------------ */
/* Models: layers, a loss, an optimizer and a training loop                  */
/* ------------------------------------------------------------------------ */

/* A stack of layers (dense, act(x.W + b); batch norm; convolution and
 * pooling over images), trained by ot_model_fit on rows of f32 inputs x
 * (rows, inputs) against targets y (rows, outputs), after Serrano's Model
 * and Keras's fit/predict. The model owns its parameters
 * (He-uniform weights drawn on the backend from the layer's seed, zero
 * biases). Training runs as a program (ot_program_*): one per batch size,
 * compiled at the first fit and reused. A bad argument is an error before
 * any step runs, so the parameters are left as they were.
 *
 *     ot_model *m = ot_model_new(be, 2);
 *     ot_model_linear(m, 64, OT_ACT_RELU, 1);
 *     ot_model_linear(m, 10, OT_ACT_NONE, 2);          // logits
 *     ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL);  // y one-hot
 *     ot_model_adam(m, &(ot_adam){.lr = 1e-3});           // default: Adam, lr 1e-3
 *     ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 10, .batch = 128,
 *                  .seed = 1, .validation_split = 0.2, .patience = 3}, &result);
 *     ot_tensor *logits = ot_model_predict(m, x_new);
 *     ot_model_free(m);
 *
 * As for programs, each ot_model_* name (but ot_model_free) is a macro
 * passing the caller's __FILE__ and __LINE__ to its *_at function: errors
 * read "file.c:88: model_fit: y has shape (32,3); must be (rows, 2)". */
typedef struct ot_model ot_model;
typedef enum { OT_ACT_NONE, OT_ACT_RELU, OT_ACT_TANH, OT_ACT_SIG } ot_activation;
enum { OT_LOSS_SOFTMAX_CE = 1,   /* mean cross-entropy of softmax(out) and y (rows sum to 1) */
       OT_LOSS_MSE = 2,          /* mean of (out - y)^2 */
       OT_LOSS_CUSTOM = 3 };     /* fn(out, y, user): a scalar tree */
enum { OT_MONITOR_VAL_LOSS = 0, OT_MONITOR_VAL_ACCURACY = 1, OT_MONITOR_LOSS = 2 };
/* The learning rate over a fit of K steps: the optimizer's lr throughout,
 * or lr*(1 + cos(pi*k/K))/2 at step k = 0..K-1 (cosine decay towards 0;
 * an early stop ends it sooner). The optimizer given to the model has no
 * lr_scale of its own: the model keeps the scale. */
enum { OT_LR_CONSTANT = 0, OT_LR_COSINE = 1 };
#define OT_MODEL_MAX_LAYERS 16
typedef ot_node *(*ot_loss_fn)(ot_node *out, ot_node *target, void *user);
/* Data augmentation (ot_fit_opts.augment): called before each training
 * step with the step's batch, x (rows, inputs) f32 row-major on the host,
 * a copy that the callback may alter in place (flip, shift, add noise...;
 * the x given to fit is never changed, validation rows are never
 * augmented). sample is the model's input shape (ot_model_input_shape,
 * e.g. (1, 28, 28)); seed is a new draw per step from the fit's seed, so a
 * run is reproducible. Returning non-zero stops the fit: OT_EINVAL. */
typedef int (*ot_augment_fn)(float *x, int64_t rows, const ot_shape *sample, uint64_t seed,
                             void *user);

typedef struct ot_fit_opts {
    int epochs;                /* 0: 1 */
    int batch;                 /* rows per step; 0: 32. Full batches only:
                                  the rows left over join other batches in
                                  later epochs (a new order each epoch) */
    uint64_t seed;             /* the shuffling's seed */
    bool no_shuffle;           /* rows in order (default: shuffled) */
    double validation_split;   /* the last fraction of rows, held out and
                                  evaluated after each epoch; [0, 1), and
                                  if not 0 at least one row */
    int patience;              /* stop after this many epochs without a
                                  better monitored value; 0: never */
    int monitor;               /* OT_MONITOR_*; the val ones need a split */
    bool quiet;                /* no progress line per epoch */
    FILE *log;                 /* where progress goes; NULL: stdout */
    int lr_schedule;           /* OT_LR_CONSTANT (0) or OT_LR_COSINE */
    ot_augment_fn augment;     /* NULL: none (see above) */
    void *augment_user;        /* augment's last argument */
} ot_fit_opts;

typedef struct ot_fit_result {
    int epochs_run, best_epoch;
    double loss, accuracy;          /* the last epoch's training means;
                                       accuracy NaN with one output */
    double val_loss, val_accuracy;  /* NaN without a validation split */
} ot_fit_result;

/* A model of `inputs` input columns on be. NULL with the error set. */
ot_model *ot_model_new_at(ot_backend *be, int64_t inputs, const char *file, int line);
#define ot_model_new(...) ot_model_new_at(__VA_ARGS__, __FILE__, __LINE__)
void ot_model_free(ot_model *m);
/* Each layer maps a sample (one row of x) of one shape to a sample of
 * another: a model's input samples are flat, (inputs), unless
 * ot_model_input_shape gives them a shape such as (channels, height,
 * width); conv and pooling layers take and give (channels, spatial...)
 * samples, batch norm keeps the shape, and a dense layer flattens a sample
 * of higher rank first (NumPy's row-major order), so a linear layer after
 * a conv or pool needs no flatten layer. The model's output is the last
 * layer's, flattened: y is (rows, its elements). fit and predict take x
 * as (rows, inputs) or (rows, input shape...).
 *
 *     ot_model *m = ot_model_new(be, 784);
 *     ot_model_input_shape(m, 3, (int64_t[]){1, 28, 28});
 *     ot_model_conv(m, 32, 3, OT_ACT_NONE, 1, .padding = OT_PAD_SAME);
 *     ot_model_batch_norm(m, OT_ACT_RELU, 0.1, 1e-5);   // per channel
 *     ot_model_max_pool(m, .kernel = {2});               // (32, 14, 14)
 *     ot_model_linear(m, 10, OT_ACT_NONE, 2);            // flattens 6272
 */

/* The shape of one input sample, ndim dims whose product is the model's
 * inputs; before any layer is added. */
int ot_model_input_shape_at(ot_model *m, int ndim, const int64_t dims[], const char *file,
                            int line);
#define ot_model_input_shape(...) ot_model_input_shape_at(__VA_ARGS__, __FILE__, __LINE__)
/* Appends a dense layer of `units` outputs and activation act. */
int ot_model_linear_at(ot_model *m, int64_t units, ot_activation act, uint64_t seed,
                       const char *file, int line);
#define ot_model_linear(...) ot_model_linear_at(__VA_ARGS__, __FILE__, __LINE__)
/* Appends a batch norm layer over the previous layer's outputs (or the
 * inputs), then activation act: ot_batch_norm with channel axis 1
 * (optree/norm.h): per feature of flat samples, per channel of (channels,
 * spatial...) samples (statistics over the batch and the spatial dims). Its weight (ones) and bias (zeros) are trained like a
 * dense layer's W and b (ot_model_parameters lists them as that layer's W
 * and b); its running mean (zeros) and variance (ones) are updated by each
 * training step with momentum, in the same evaluation as the loss, and
 * normalise in predict and in the validation after each epoch. fit then
 * needs batch >= 2. ot_model_save stores the running values too, as
 * "mean<i>" and "var<i>". momentum in [0, 1], eps >= 0 (PyTorch's: 0.1, 1e-5). */
int ot_model_batch_norm_at(ot_model *m, ot_activation act, double momentum, double eps,
                           const char *file, int line);
#define ot_model_batch_norm(...) ot_model_batch_norm_at(__VA_ARGS__, __FILE__, __LINE__)
/* Appends a convolution of out_channels filters of size kernel in every
 * spatial dim, plus a bias per channel, then act: ot_conv (optree/conv.h)
 * with the options that follow (stride, dilation, pad, pad_lo/pad_hi,
 * padding = OT_PAD_SAME or OT_PAD_VALID, groups), over samples (channels,
 * spatial...) with 1 to 3 spatial dims. The weight is (out_channels,
 * channels / groups, kernel...), He-uniform over its fan-in (channels /
 * groups * kernel^dims) drawn from seed; the bias starts at zero. Bad
 * options or shapes (groups not dividing the channels, a kernel larger
 * than the padded input) are ot_conv's errors, at this call.
 *     ot_model_conv(m, 64, 3, OT_ACT_RELU, 7, .stride = {2}, .pad = 1); */
int ot_model_conv_at(ot_model *m, int64_t out_channels, int kernel, ot_activation act,
                     uint64_t seed, const ot_conv_opts *opts, const char *file, int line);
#define ot_model_conv(m, out_channels, kernel, act, ...)                      \
    ot_model_conv_at((m), (out_channels), (kernel), (act), ot__model_conv_args(__VA_ARGS__))
#define ot__model_conv_args(seed, ...)                                        \
    (seed), &OT__OPT(ot_conv_opts, __VA_ARGS__), __FILE__, __LINE__
/* Append a max or average pooling layer: ot_max_pool / ot_avg_pool
 * (optree/pool.h) with the options that follow (kernel, required; stride,
 * default the kernel; pad, pad_lo/pad_hi, dilation, ceil_mode,
 * exclude_pad) over (channels, spatial...) samples. No parameters. Bad
 * options or shapes are the pool's errors, at this call.
 *     ot_model_max_pool(m, .kernel = {2});     // halves H and W */
int ot_model_max_pool_at(ot_model *m, const ot_pool_opts *opts, const char *file, int line);
#define ot_model_max_pool(m, ...)                                             \
    ot_model_max_pool_at((m), &OT__OPT(ot_pool_opts, __VA_ARGS__), __FILE__, __LINE__)
int ot_model_avg_pool_at(ot_model *m, const ot_pool_opts *opts, const char *file, int line);
#define ot_model_avg_pool(m, ...)                                             \
    ot_model_avg_pool_at((m), &OT__OPT(ot_pool_opts, __VA_ARGS__), __FILE__, __LINE__)
/* Appends a dropout layer (Srivastava et al., 2014): while fit trains,
 * each value of a sample is zeroed with probability rate and the others
 * are scaled by 1/(1 - rate), a new mask each step (drawn from the fit's
 * seed); predict and validation pass the values on unchanged. Keeps the
 * sample's shape; no parameters (it counts as a layer for the npz names).
 * rate in [0, 1).
 *     ot_model_linear(m, 256, OT_ACT_RELU, 3);
 *     ot_model_dropout(m, 0.3);          // before the output layer */
int ot_model_dropout_at(ot_model *m, double rate, const char *file, int line);
#define ot_model_dropout(...) ot_model_dropout_at(__VA_ARGS__, __FILE__, __LINE__)
/* The loss: OT_LOSS_SOFTMAX_CE or OT_LOSS_MSE with fn NULL, or
 * OT_LOSS_CUSTOM with fn (any scalar cost tree of out and y). */
int ot_model_loss_at(ot_model *m, int loss, ot_loss_fn fn, void *user, const char *file,
                     int line);
#define ot_model_loss(...) ot_model_loss_at(__VA_ARGS__, __FILE__, __LINE__)
/* The optimizer (the default is Adam, lr 1e-3); zero options are the
 * defaults, as for ot_sgd_step and ot_adam_step; SGD's momentum is kept in
 * the model. Adam's weight_decay is AdamW's decoupled decay (optree/
 * autodiff.h) and applies to the weights of dense and conv layers only,
 * not to biases or batch norm's scale and shift (the usual choice):
 *     ot_model_adam(m, &(ot_adam){.lr = 1e-3, .weight_decay = 0.05});
 * SGD's weight_decay (an L2 term in the gradient) applies to every
 * parameter. Adam's moments live in the model, and so does its step
 * count t, per layer, as the moments' age: fit after fit it goes on
 * (as in Keras and PyTorch), whatever rebuilds the training program (a
 * new batch size, loss, optimizer options or compute dtype, a layer
 * added). ot_model_adam keeps the moments, so it keeps the counts unless
 * t is given: a t (not 0) is the next step's t for every layer the model
 * has (to resume a run, say). A layer starts at the t of the last
 * ot_model_adam (1 by default) with zero moments. SGD steps count none.
 * A switch between SGD and Adam starts the new optimizer's state afresh
 * (zero velocity, or zero moments and t = 1), as a new PyTorch optimizer
 * does; another call of the same one keeps it. */
int ot_model_sgd_at(ot_model *m, const ot_sgd *o, const char *file, int line);
#define ot_model_sgd(...) ot_model_sgd_at(__VA_ARGS__, __FILE__, __LINE__)
int ot_model_adam_at(ot_model *m, const ot_adam *o, const char *file, int line);
#define ot_model_adam(...) ot_model_adam_at(__VA_ARGS__, __FILE__, __LINE__)
/* Mixed-precision training (docs/half.md): the dtype activations and
 * gradients are stored in, OT_F32 (the default), OT_BF16 or OT_F16. The
 * parameters and the optimizer's state stay f32 (the master weights):
 * each layer casts its weights to the compute dtype, its output is of the
 * compute dtype (batch norm computes in f32 between casts), and the
 * output layer's values are cast back to f32 for the loss; gradients flow
 * back through the casts, so the weights' gradients are f32. Predict and
 * validation run the same casts. With OT_F16, fit scales the loss
 * dynamically (PyTorch's GradScaler): the gradients of loss*scale are
 * unscaled in f32; a step whose gradients hold an inf or NaN is skipped
 * (the parameters and optimizer state unchanged; batch norm's running
 * values are updated, as in PyTorch) and halves the scale; after
 * growth_interval steps in a row without one the scale doubles. Changing
 * the dtype rebuilds the training program at the next fit.
 *     ot_model_compute_dtype(m, OT_BF16); */
int ot_model_compute_dtype_at(ot_model *m, ot_dtype dtype, const char *file, int line);
#define ot_model_compute_dtype(...) ot_model_compute_dtype_at(__VA_ARGS__, __FILE__, __LINE__)
/* The f16 loss scaler's state. */
typedef struct ot_loss_scale {
    double scale;              /* the scale in force; set: > 0, or 0 for
                                  the default 65536 (2^16) */
    int growth_interval;       /* steps without overflow before the scale
                                  doubles; set: 0 for the default 2000 */
    int64_t skipped;           /* steps skipped for an inf or NaN gradient
                                  since the model was made (get only) */
} ot_loss_scale;
/* Sets the scaler from *set (unless NULL; skipped is ignored) and then
 * reports it into *get (unless NULL). */
int ot_model_loss_scale_at(ot_model *m, const ot_loss_scale *set, ot_loss_scale *get,
                           const char *file, int line);
#define ot_model_loss_scale(...) ot_model_loss_scale_at(__VA_ARGS__, __FILE__, __LINE__)
/* Trains on (x, y); opts NULL: one epoch of batches of 32. Prints one
 * progress line per epoch (loss, accuracy with two or more outputs,
 * validation figures, samples/s) unless quiet. result may be NULL. */
int ot_model_fit_at(ot_model *m, const ot_tensor *x, const ot_tensor *y, const ot_fit_opts *opts,
                    ot_fit_result *result, const char *file, int line);
#define ot_model_fit(...) ot_model_fit_at(__VA_ARGS__, __FILE__, __LINE__)
/* The model's output for x (rows, inputs), a new tensor the caller frees
 * (logits for OT_LOSS_SOFTMAX_CE: ot_argmax along axis 1 picks the class). */
ot_tensor *ot_model_predict_at(const ot_model *m, const ot_tensor *x, const char *file, int line);
#define ot_model_predict(...) ot_model_predict_at(__VA_ARGS__, __FILE__, __LINE__)
/* The parameters, W then b per layer that has them (dense, batch norm,
 * conv; pooling has none), into out[0..n); returns how many there are.
 * They are the model's own tensors, lent: read or ot_set them, but never
 * ot_tensor_free one (the model would go on using freed memory); they
 * live until ot_model_free. */
int ot_model_parameters_at(const ot_model *m, int n, ot_tensor *out[], const char *file, int line);
#define ot_model_parameters(...) ot_model_parameters_at(__VA_ARGS__, __FILE__, __LINE__)
/* The parameters to and from a NumPy .npz (ot_savez): entries w<i>, b<i>
 * for layer i (counted from 0 over every layer, pooling included) that has
 * parameters: w0, b0, w1, b1, ... (np.load(path)["w0"]); a conv layer's
 * w<i> is (out, in / groups, kernel...), PyTorch's Conv2d.weight layout. Loading reads and checks every entry (count,
 * names, f32, the model's shapes) before it writes any, so a corrupt or
 * mismatched file is an error that leaves the parameters as they were.
 * Saving replaces the file as ot_save does, so a failed save leaves the
 * previous one whole; loading also reads numpy.savez_compressed's files.
 * The optimizer's state is not saved. */
int ot_model_save_at(const ot_model *m, const char *path, const char *file, int line);
#define ot_model_save(...) ot_model_save_at(__VA_ARGS__, __FILE__, __LINE__)
int ot_model_load_at(ot_model *m, const char *path, const char *file, int line);
#define ot_model_load(...) ot_model_load_at(__VA_ARGS__, __FILE__, __LINE__)

#endif /* OPTREE_PROGRAM_H */

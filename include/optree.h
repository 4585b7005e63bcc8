/*
 * optree.h - lazy tensors in the op-tree style, in C11.
 *
 * The one public header of optree. Tensor arithmetic builds immutable op-tree
 * nodes; nothing is computed until a tree is assigned into an output tensor.
 * Nodes built while no pool is pushed go to the calling thread's default
 * pool, which only ot_pool_drain empties: a loop that builds a tree per step
 * without ot_pool_push/ot_pool_pop grows without bound (200,000 assigns took
 * 5 MB to 341 MB). ot_pool_default_nodes (and ot_stats' default_pool_nodes)
 * tells how many nodes it holds.
 *
 * A worked example (the neon backend guide, in C):
 *
 *     ot_backend *be = ot_backend_new("ref", NULL);
 *     ot_tensor *x0 = ot_array(be, OT_SHAPE(2, 2), OT_F32, (float[]){1, 2, 3, 4});
 *     ot_tensor *x1 = ot_full(be, OT_SHAPE(2, 2), OT_F32, 0.5);
 *     ot_tensor *y  = ot_empty(be, OT_SHAPE(2, 2), OT_F32);
 *     ot_tensor_set_name(x0, "x0");
 *     ot_tensor_set_name(x1, "x1");
 *
 *     ot_pool *pool = ot_pool_push();
 *     ot_node *f = ot_add(x0, x1);                  // builds, computes nothing
 *     ot_print(f, stdout);    // ({'shape': (2, 2), 'op': 'add'}, x0, x1)
 *     if (ot_assign(y, ot_div(1.0f, ot_add(1.0f, ot_exp(ot_neg(f))))) != 0)
 *         fprintf(stderr, "%s\n", ot_errmsg());     // y[:] = sigmoid(x0 + x1)
 *     ot_pool_pop(pool);                            // the tree's nodes die here
 *
 *     ot_tensor_free(x0); ot_tensor_free(x1); ot_tensor_free(y);
 *     ot_backend_free(be);
 *
 * Ownership.
 *   - Tensors belong to whoever created them (ot_empty, ot_slice, ...) and are
 *     released with ot_tensor_free. A view shares its buffer; the buffer lives
 *     while any view of it does. A tree that uses a tensor keeps it alive too,
 *     so freeing a tensor that a live tree reads is safe.
 *   - Nodes are refcounted. Every builder returns a node owned by the calling
 *     thread's innermost pool (ot_pool_push/ot_pool_pop); with no pool pushed
 *     they go to the thread's default pool, emptied by ot_pool_drain. A parent
 *     retains its children. ot_retain keeps a tree beyond its pool; balance it
 *     with ot_release.
 *   - Strings returned by the library (ot_errmsg, ot_op_name, ot_tensor_name)
 *     are borrowed: they stay valid until the next call that changes them.
 *
 * Errors.
 *   Nothing aborts on bad input. A builder given bad operands returns NULL and
 *   records an error (code, message naming the op, the shapes and dtypes, and
 *   the file:line of the call) in a thread-local slot. A builder given a NULL
 *   operand returns NULL and keeps the first message, so a whole expression
 *   can be checked once, at ot_assign. Functions that do work return 0 or a
 *   negative OT_E* code; when they are handed a NULL tree they return the code
 *   already in the slot, otherwise they clear the slot before working.
 *   ot_errcode() and ot_errmsg() read the slot; ot_set_error_handler() lets
 *   an application log or abort on every recorded error.
 *
 * Threads. Backends and tensors may be shared between threads for reading;
 * builders, pools, the error slot and the memory pools keep for reuse are
 * per thread (thread-locals; ot_pool_drain returns that memory).
 */
#ifndef OPTREE_H
#define OPTREE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The version, in this one place (the Makefile's SONAME and pkg-config file
 * read it from here). ot_version() is the library's own, at run time: a
 * program built against one header and run with another liboptree.so can
 * tell. */
#define OT_VERSION "0.1.0"
const char *ot_version(void);
/* The most dimensions a tensor or node may have. */
#define OT_MAX_DIMS 8

/* ------------------------------------------------------------------------ */
/* Status codes                                                              */
/* ------------------------------------------------------------------------ */

/* 0 is success; every error is negative. ot_strerror names each one. */
typedef enum ot_status {
    OT_OK = 0,
    OT_EINVAL = -1,       /* a bad argument: axis, index, dims, option */
    OT_ESHAPE = -2,       /* shapes that do not broadcast or do not match */
    OT_EDTYPE = -3,       /* a dtype the op or the output cannot take */
    OT_ENOMEM = -4,       /* an allocation failed; every object stays valid */
    OT_EALIAS = -5,       /* an output that overlaps itself or another output */
    OT_EBACKEND = -6,     /* an unknown or unavailable backend */
    OT_EUNSUPPORTED = -7, /* a valid request this build cannot carry out */
    OT_ENULL = -8,        /* a NULL argument */
    OT_EOVERFLOW = -9,    /* a size or offset that overflows */
    OT_EEMPTY = -10,      /* a reduction with no identity over zero elements */
    OT_ESTATE = -11,      /* a call out of order (popping a pool not pushed) */
    OT_EIO = -12,         /* writing to a FILE failed */
    OT_EINTERNAL = -13    /* an internal check failed: a bug in optree (builds
                             with -DOT_VERIFY_PLANS verify every plan) */
} ot_status;

/* The code of the first error recorded since the slot was last cleared. */
int ot_errcode(void);
/* Its message ("file:line: op: text"), or "" when the slot is clear. */
const char *ot_errmsg(void);
/* Clears this thread's error slot. */
void ot_clear_error(void);
/* A short static description of a status code. */
const char *ot_strerror(int code);
/* Called (on the recording thread) with every error recorded on this thread;
 * NULL removes it. The handler may log or abort; it must not call builders. */
typedef void (*ot_error_handler)(int code, const char *msg, void *user);
void ot_set_error_handler(ot_error_handler fn, void *user);

/* ------------------------------------------------------------------------ */
/* Dtypes and shapes                                                         */
/* ------------------------------------------------------------------------ */

/* 0 (OT_DTYPE_DEFAULT) asks for a default: the backend's for tensors. */
typedef enum ot_dtype { OT_DTYPE_DEFAULT = 0, OT_F32 = 1, OT_F64 = 2, OT_I32 = 3 } ot_dtype;

/* Bytes per element (0 for an unknown dtype) and the NumPy name. */
size_t ot_dtype_size(ot_dtype dtype);
const char *ot_dtype_name(ot_dtype dtype);

/* A shape: ndim dims, row-major. A plain value type. */
typedef struct ot_shape {
    int ndim;
    int64_t dims[OT_MAX_DIMS];
} ot_shape;

/* ot_shape_make(n, dims): a shape from an array. More than OT_MAX_DIMS dims
 * keeps n in ndim (and the first 8 dims) so that users of the shape can
 * report "too many dimensions" instead of truncating silently. */
static inline ot_shape ot_shape_make(int ndim, const int64_t *dims)
{
    ot_shape s;
    s.ndim = ndim;
    for (int i = 0; i < OT_MAX_DIMS; i++)
        s.dims[i] = i < ndim ? dims[i] : 0;
    return s;
}
/* OT_SHAPE(3, 4) is a 3x4 shape; OT_SHAPE() is the 0-d (scalar) shape. */
#define OT_SHAPE(...)                                                         \
    ot_shape_make((int)(sizeof((int64_t[]){0, __VA_ARGS__}) / sizeof(int64_t)) - 1, \
                  (const int64_t[]){0, __VA_ARGS__} + 1)

/* ------------------------------------------------------------------------ */
/* Backends                                                                  */
/* ------------------------------------------------------------------------ */

typedef struct ot_backend ot_backend;

enum { OT_ULP10 = 0, OT_ULP35 = 1 };                  /* accuracy */
enum { OT_FUSION_DEFAULT = 0, OT_FUSION_ON = 1, OT_FUSION_OFF = 2 };
enum { OT_JIT_DEFAULT = 0, OT_JIT_ON = 1, OT_JIT_OFF = 2 };   /* generated code */
/* ot_backend_opts.stream_bytes: never write with streaming stores. */
#define OT_STREAM_NEVER INT64_C(-1)

/* The most threads a backend runs (more: OT_EINVAL; all cores: capped). */
#define OT_MAX_THREADS 256

/* Zero-initialised options are the defaults. Environment variables, when
 * set and not empty, override the fields named beside them (so one program
 * can be run in another configuration unchanged); a value that is not one
 * the variable takes is OT_EINVAL, never a silent default. ot_backend_options
 * reports what is in force after both. */
typedef struct ot_backend_opts {
    int threads;       /* 0: all cores; at most OT_MAX_THREADS. optree's own
                          kernels only: dot runs on OpenBLAS, whose threads
                          are process-wide and the host program's to set
                          (OPENBLAS_NUM_THREADS, openblas_set_num_threads) */
    uint64_t seed;     /* the seed of every ot_rand draw */
    ot_dtype dtype;    /* tensors created with OT_DTYPE_DEFAULT; 0: OT_F32 */
    int accuracy;      /* OT_ULP10 (default) or OT_ULP35 */
    int plan_cache;    /* plan-cache entries; 0: the default */
    int fusion;        /* OT_FUSION_*; OT_FUSION_OFF materialises every node
                          (OT_FUSION=0|1) */
    const char *rewrite; /* rule sets applied to every tree before it is
                          planned or evaluated: names, comma-separated
                          ("fuse" or "fuse,mine"; see "Rewrite rules" below),
                          each registered; NULL or "": none, and no cost
                          (OT_REWRITE=name1,name2). An unknown or repeated
                          name is OT_EINVAL. Reported: the library's copy of
                          the list in force, or NULL */
    /* The fields below concern the cpu backend; on "ref" they are checked
     * and reported as not in force (NULL, OT_JIT_OFF, OT_STREAM_NEVER). */
    const char *isa;   /* "scalar", "sse2", "avx2", "avx512" (x86) or
                          "neon" (aarch64); NULL: the
                          widest this CPU runs (OT_ISA). One the CPU lacks
                          is OT_EUNSUPPORTED. Reported: the one in force */
    int jit;           /* OT_JIT_*: elementwise kernels as generated code
                          where the ISA has it, AVX2 and AVX-512 on x86-64
                          Linux (OT_JIT=0|1). Reported: ON where it runs */
    int64_t stream_bytes; /* kernels that move this many bytes or more
                          (reads plus writes) write their outputs with
                          streaming stores, when they are bound by memory
                          (little arithmetic per byte: a*b + c streams,
                          tanh(a*b + a/b) does not); 0: the last-level cache
                          size; OT_STREAM_NEVER: never (OT_STREAM_BYTES=n,
                          0 meaning never). Reported: the threshold in force */
} ot_backend_opts;

/* Creates a backend: "ref" (node at a time, in double; the test oracle) or
 * "cpu" (the fused backend). The environment variable OT_BACKEND, when set,
 * replaces the name, so one program runs on either backend unchanged. NULL
 * opts means the defaults. Returns NULL with OT_EBACKEND for an unknown or
 * unavailable name, OT_EINVAL for bad options or environment values,
 * OT_EUNSUPPORTED for an ISA this CPU lacks. */
ot_backend *ot_backend_new(const char *name, const ot_backend_opts *opts);
/* Frees a backend. Tensors created on it must be freed first. NULL is a no-op. */
void ot_backend_free(ot_backend *be);
/* "ref" or "cpu". */
const char *ot_backend_name(const ot_backend *be);
/* The options in force (defaults filled in). */
ot_backend_opts ot_backend_options(const ot_backend *be);

/* Counters kept by a backend since it was created. */
typedef struct ot_stats {
    uint64_t assigns;      /* ot_assign/ot_assign_many/ot_eval calls that ran */
    uint64_t nodes;        /* op nodes evaluated */
    uint64_t compiles;     /* plans compiled (cpu backend) */
    uint64_t cache_hits;   /* plan-cache hits (cpu backend) */
    uint64_t kernels;      /* kernels run */
    uint64_t bytes_moved;  /* bytes read from leaves plus bytes written */
    uint64_t elem_ops;     /* arithmetic done: each op of a kernel counts once
                              per element it computes (cpu backend) */
    uint64_t default_pool_nodes;  /* nodes in the calling thread's default
                                     pool now (ot_pool_default_nodes) */
} ot_stats;
int ot_stats_get(const ot_backend *be, ot_stats *out);
#define ot_stats(be, ...) ot_stats_get((be), __VA_ARGS__)

/* ------------------------------------------------------------------------ */
/* Tensors                                                                   */
/* ------------------------------------------------------------------------ */

typedef struct ot_tensor ot_tensor;

/* Creation. dtype OT_DTYPE_DEFAULT takes the backend's default. A shape may
 * be 0-d and may have zero-size dims; negative dims, more than OT_MAX_DIMS
 * dims and sizes that overflow are errors. */
ot_tensor *ot_empty(ot_backend *be, ot_shape shape, ot_dtype dtype);
ot_tensor *ot_zeros(ot_backend *be, ot_shape shape, ot_dtype dtype);
ot_tensor *ot_ones(ot_backend *be, ot_shape shape, ot_dtype dtype);
ot_tensor *ot_full(ot_backend *be, ot_shape shape, ot_dtype dtype, double value);
/* Copies numel elements of dtype, row-major, from host memory. */
ot_tensor *ot_array(ot_backend *be, ot_shape shape, ot_dtype dtype, const void *data);
ot_tensor *ot_zeros_like(const ot_tensor *t);
/* A new contiguous tensor with t's values (t may be any view). */
ot_tensor *ot_copy(const ot_tensor *t);
/* Releases the creator's reference. The tensor itself lives on while a tree
 * uses it; its buffer while any view of it does. NULL is a no-op. */
void ot_tensor_free(ot_tensor *t);

/* Data. Host memory is row-major and contiguous in the tensor's dtype; the
 * tensor may be any view. Float values written into OT_I32 truncate toward
 * zero (NaN gives 0, out-of-range values saturate). */
int ot_fill(ot_tensor *t, double value);
int ot_get(const ot_tensor *t, void *host);
int ot_set(ot_tensor *t, const void *host);
/* Prints the values, NumPy style; more than 1000 elements are summarised
 * with "..." (ot_tensor_print_opts sets the threshold). */
int ot_tensor_print(const ot_tensor *t, FILE *f);

/* Views: new tensors sharing t's buffer (the caller frees them). */
typedef struct ot_index {
    int kind;             /* OT_INDEX_ALL, OT_INDEX_RANGE or OT_INDEX_ONE */
    int64_t start, stop, step;
} ot_index;
enum { OT_INDEX_ALL = 0, OT_INDEX_RANGE = 1, OT_INDEX_ONE = 2 };
/* An omitted range bound: OT_RANGE(OT_NONE, OT_NONE, -1) is NumPy's [::-1]. */
#define OT_NONE INT64_MIN
#define OT_END OT_NONE
#define OT_ALL ((ot_index){OT_INDEX_ALL, 0, 0, 1})
#define OT_IDX(i) ((ot_index){OT_INDEX_ONE, (i), 0, 1})
#define OT__RANGE2(a, b) ((ot_index){OT_INDEX_RANGE, (a), (b), 1})
#define OT__RANGE3(a, b, s) ((ot_index){OT_INDEX_RANGE, (a), (b), (s)})
#define OT__PICK3(_1, _2, _3, name, ...) name
/* OT_RANGE(start, stop[, step]): NumPy's start:stop:step, negative indices and
 * negative steps included; out-of-range bounds are clipped as in NumPy. */
#define OT_RANGE(...) OT__PICK3(__VA_ARGS__, OT__RANGE3, OT__RANGE2, none)(__VA_ARGS__)
/* ot_slice(t, OT_ALL, OT_RANGE(3, 10), OT_IDX(1), ...): NumPy basic indexing.
 * OT_IDX drops its dim; missing trailing indices mean OT_ALL. ot_slice_n
 * takes n indices from an array. Both are macros passing the caller's
 * __FILE__ and __LINE__ to ot_slice_at (as ot_reshape to ot_reshape_at):
 * errors read "file.c:88: slice: ..." and name the tensor's shape. */
ot_tensor *ot_slice_at(const ot_tensor *t, int n, const ot_index *idx, const char *file, int line);
#define ot_slice_n(t, n, idx) ot_slice_at((t), (n), (idx), __FILE__, __LINE__)
#define ot_slice(t, ...)                                                      \
    ot_slice_at((t), (int)(sizeof((ot_index[]){__VA_ARGS__}) / sizeof(ot_index)), \
                (ot_index[]){__VA_ARGS__}, __FILE__, __LINE__)
/* A view with a new shape (one dim may be -1) when the strides allow it;
 * otherwise OT_EINVAL, saying that a copy is needed (use ot_copy first). */
ot_tensor *ot_reshape_at(const ot_tensor *t, ot_shape shape, const char *file, int line);
#define ot_reshape(t, ...) ot_reshape_at((t), (__VA_ARGS__), __FILE__, __LINE__)
/* Permutes dims: perm[i] is the source dim of dim i; NULL reverses them. */
ot_tensor *ot_transpose(const ot_tensor *t, const int *perm);
/* A read-only broadcast view (stride 0 on broadcast dims), NumPy rules.
 * Such a view cannot be written: ot_assign into it fails with OT_EALIAS. */
ot_tensor *ot_broadcast_to(const ot_tensor *t, ot_shape shape);

/* Accessors. */
ot_dtype ot_tensor_dtype(const ot_tensor *t);
int ot_tensor_ndim(const ot_tensor *t);
ot_shape ot_tensor_shape(const ot_tensor *t);
int64_t ot_tensor_dim(const ot_tensor *t, int axis);       /* negative axis ok */
int64_t ot_tensor_stride(const ot_tensor *t, int axis);    /* in elements */
int64_t ot_tensor_offset(const ot_tensor *t);              /* in elements */
int64_t ot_tensor_numel(const ot_tensor *t);
/* The address of element (0, ..., 0) of the view. */
void *ot_tensor_data(const ot_tensor *t);
ot_backend *ot_tensor_backend(const ot_tensor *t);
bool ot_tensor_is_contiguous(const ot_tensor *t);
/* The name used when printing trees; NULL when unnamed. set_name copies. */
const char *ot_tensor_name(const ot_tensor *t);
int ot_tensor_set_name(ot_tensor *t, const char *name);

/* ------------------------------------------------------------------------ */
/* The op table                                                              */
/* ------------------------------------------------------------------------ */

/* Op kinds. */
enum {
    OT_KIND_UNARY = 1,    /* elementwise, one operand */
    OT_KIND_BINARY,       /* elementwise, two operands, NumPy broadcasting */
    OT_KIND_REDUCE,       /* along .axis (or all), .keepdims */
    OT_KIND_DOT,          /* matrix product */
    OT_KIND_SHAPE,        /* transpose of an expression */
    OT_KIND_SPECIAL,      /* cast, onehot, rand */
    OT_KIND_COMPOSITE     /* expands into other ops, tagged with its name */
};

/* Op flags. */
#define OT_FLAG_FLOAT 1u    /* integer operands give an OT_F64 result */
#define OT_FLAG_COMPARE 2u  /* result is 1 or 0 in the operands' dtype */
#define OT_FLAG_INDEX 4u    /* result is OT_I32 (argmax, argmin) */
#define OT_FLAG_NODIFF 8u   /* gradient is zero (not differentiable) */

/* The ops: the ot_op enum (OT_OP_*, OT_OP_COUNT), OT_OP_LIST(X) and the
 * builders of the elementwise ops (ot_tanh(x), ot_add(x, y), ...) are
 * generated from the library's op table, src/ops.def. Public op numbers are
 * append-only: a new op gets the next number, an existing op keeps its own. */
#include "optree_ops.h"

/* Name <-> op, for bindings: ot_op_lookup("tanh") == OT_OP_TANH; an unknown
 * name gives OT_OP_NONE. ot_op_name of an unknown op gives NULL. */
ot_op ot_op_lookup(const char *name);
const char *ot_op_name(ot_op op);
int ot_op_arity(ot_op op);
int ot_op_kind(ot_op op);
unsigned ot_op_flags(ot_op op);

/* ------------------------------------------------------------------------ */
/* Nodes and building trees                                                  */
/* ------------------------------------------------------------------------ */

typedef struct ot_node ot_node;

/* The axis value meaning "every axis" (a reduction to a scalar). */
#define OT_AXIS_ALL (-1000)

/* Op attributes, as the one builder (and bindings) take them. The option
 * macros below take a smaller struct per op family instead, positionally or
 * designated, and convert it to this. Here, with spec_ NULL, axis is taken
 * as given: pass OT_AXIS_ALL for every axis. */
typedef struct ot_args {
    const char *spec_;    /* the options as written, when a macro built this
                             (then an axis not set means every axis) */
    int axis;             /* reductions, softmax, onehot; negative counts back */
    bool keepdims;        /* reductions: keep reduced dims with size 1 */
    ot_dtype dtype;       /* cast target; onehot/rand result (default OT_F32) */
    int64_t depth;        /* onehot: number of classes */
    uint64_t seed;        /* rand: the stream, mixed with the backend seed */
    int ddof;             /* var, std: delta degrees of freedom */
    double lo, hi;        /* clip bounds */
    int perm[OT_MAX_DIMS];/* transpose: all zero reverses the dims (unless
                             spec_ says the perm was written); slice: each
                             operand dim's step, 0 for an index (dropped) */
    ot_shape shape;       /* rand, reshape: the result's; slice: each
                             operand dim's count */
    int64_t start[OT_MAX_DIMS]; /* slice: each operand dim's first index */
} ot_args;
/* ot_args's members after spec_, in order (see ot_spec_sets). */
#define OT__ARGS_MEMBERS "axis,keepdims,dtype,depth,seed,ddof,lo,hi,perm,shape,start"

/* The one builder: type and shape checks (NumPy broadcasting, dtype
 * promotion, axis range), then a new node owned by the current pool. args
 * may be NULL for ops that take none; bindings pass axis = OT_AXIS_ALL
 * explicitly. file and line are recorded for messages (NULL and 0 are ok).
 * Promotion (README "Dtypes and promotion" has the table): two tensors of
 * one dtype keep it, f32 with f64 gives f64, i32 with f32 gives f32
 * (PyTorch's rule; NumPy gives f64), i32 with f64 gives f64. A constant is
 * weak (NumPy 2's Python scalars): it takes the tensor's dtype, but a float
 * constant with an i32 tensor gives f64. By op: FLOAT ops (div, exp, sqrt,
 * mean, var, softmax, ...) give f64 for i32; compares give 1 or 0 in the
 * promoted dtype; argmax/argmin give i32; the rest keep the promoted
 * dtype, i32 included (elementwise i32 arithmetic wraps modulo 2^32). */
ot_node *ot_build_at(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                     const char *file, int line);
/* args may be a compound literal, commas and all: &(ot_args){.axis = 1, .keepdims = 1}. */
#define ot_build(op, a, b, ...) ot_build_at((op), (a), (b), __VA_ARGS__, __FILE__, __LINE__)

/* Operands. A tensor is its own leaf node (no allocation). Constants are
 * weakly typed: x * 0.5 stays f32 when x is f32. */
ot_node *ot_tensor_node(ot_tensor *t);
ot_node *ot_const(double value);   /* weak f64 */
ot_node *ot_constf(float value);   /* weak f32 */
ot_node *ot_consti(int value);     /* weak i32 */
static inline ot_node *ot__node_id(ot_node *n) { return n; }
#define OT__NODE(x)                                                           \
    _Generic((x), ot_tensor *: ot_tensor_node, ot_node *: ot__node_id,        \
             float: ot_constf, double: ot_const, int: ot_consti,              \
             long: ot_const, long long: ot_const, unsigned: ot_const)(x)

#define OT__UN(op, x) ot_build_at((op), OT__NODE(x), NULL, NULL, __FILE__, __LINE__)
#define OT__BIN(op, x, y)                                                     \
    ot_build_at((op), OT__NODE(x), OT__NODE(y), NULL, __FILE__, __LINE__)

/* Whether the options spec (the stringified initializers an option macro
 * saw) set member, members being the struct's members after spec_ in order,
 * comma-separated. C's rule: a designator sets its member, a positional
 * initializer the member after the one set before (the first: the first
 * member). So ot_sum(x, 1) and ot_sum(x, .axis = 1) set the axis, and
 * ot_sum(x, .keepdims = true) does not (every axis, as NumPy's None). */
bool ot_spec_sets(const char *spec, const char *members, const char *member);

/* Option structs, one per op family. Their member order is the family's
 * positional order, so ot_sum(x, 1, true) is NumPy's x.sum(1, keepdims=True);
 * a designator of another family's option does not compile, and more
 * positional options than the family has is the compiler's "excess
 * elements" warning (an error under -Werror). */
typedef struct ot_reduce_opts {
    const char *spec_;
    int axis;             /* default: every axis */
    bool keepdims;
    const char *axes;     /* by name instead: "C,H,W" (see "Named axes") */
} ot_reduce_opts;
#define OT__REDUCE_MEMBERS "axis,keepdims,axes"
typedef struct ot_var_opts {
    const char *spec_;
    int axis;             /* default: every axis */
    int ddof;
    bool keepdims;
    const char *axes;     /* by name instead: one name */
} ot_var_opts;
#define OT__VAR_MEMBERS "axis,ddof,keepdims,axes"
typedef struct ot_softmax_opts {
    const char *spec_;
    int axis;             /* default: every axis */
    const char *axes;     /* by name instead: one name */
} ot_softmax_opts;
typedef struct ot_cast_opts {
    const char *spec_;
    ot_dtype dtype;
} ot_cast_opts;
typedef struct ot_onehot_opts {
    const char *spec_;
    int64_t depth;
    int axis;             /* of the new dim; default: last */
    ot_dtype dtype;       /* default: OT_F32 */
} ot_onehot_opts;
#define OT__ONEHOT_MEMBERS "depth,axis,dtype"
typedef struct ot_rand_opts {
    const char *spec_;
    uint64_t seed;
    ot_dtype dtype;       /* default: OT_F32 */
} ot_rand_opts;
typedef struct ot_transpose_opts {
    const char *spec_;
    int perm[OT_MAX_DIMS];/* not given: reverses the dims */
} ot_transpose_opts;

static inline int ot__opt_axis(const char *spec, const char *members, int axis)
{
    return ot_spec_sets(spec, members, "axis") ? axis : OT_AXIS_ALL;
}
/* ot_build_at along the axes named (comma-separated) instead of args->axis,
 * which must be OT_AXIS_ALL (see "Named axes" at the end). */
ot_node *ot_build_axes_at(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                          const char *axes, const char *file, int line);
static inline ot_node *ot__build_reduce(ot_op op, ot_node *x, ot_node *y, ot_reduce_opts o,
                                        const char *file, int line)
{
    ot_args a = {.axis = ot__opt_axis(o.spec_, OT__REDUCE_MEMBERS, o.axis),
                 .keepdims = o.keepdims};
    if (o.axes) return ot_build_axes_at(op, x, y, &a, o.axes, file, line);
    return ot_build_at(op, x, y, &a, file, line);
}
static inline ot_node *ot__build_var(ot_op op, ot_node *x, ot_var_opts o,
                                     const char *file, int line)
{
    ot_args a = {.axis = ot__opt_axis(o.spec_, OT__VAR_MEMBERS, o.axis),
                 .ddof = o.ddof, .keepdims = o.keepdims};
    if (o.axes) return ot_build_axes_at(op, x, NULL, &a, o.axes, file, line);
    return ot_build_at(op, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_softmax(ot_op op, ot_node *x, ot_softmax_opts o,
                                         const char *file, int line)
{
    ot_args a = {.axis = ot__opt_axis(o.spec_, "axis,axes", o.axis)};
    if (o.axes) return ot_build_axes_at(op, x, NULL, &a, o.axes, file, line);
    return ot_build_at(op, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_cast(ot_node *x, ot_cast_opts o, const char *file, int line)
{
    ot_args a = {.axis = OT_AXIS_ALL, .dtype = o.dtype};
    return ot_build_at(OT_OP_CAST, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_onehot(ot_node *x, ot_onehot_opts o, const char *file,
                                        int line)
{
    ot_args a = {.axis = ot__opt_axis(o.spec_, OT__ONEHOT_MEMBERS, o.axis),
                 .depth = o.depth, .dtype = o.dtype};
    return ot_build_at(OT_OP_ONEHOT, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_rand(ot_shape shape, ot_rand_opts o, const char *file,
                                      int line)
{
    ot_args a = {.axis = OT_AXIS_ALL, .seed = o.seed, .dtype = o.dtype, .shape = shape};
    return ot_build_at(OT_OP_RAND, NULL, NULL, &a, file, line);
}
static inline ot_node *ot__build_transpose(ot_node *x, ot_transpose_opts o, const char *file,
                                           int line)
{
    /* A perm as written is taken literally, so {0, 0} is an error rather
     * than ot_args's all-zero "reverse". */
    ot_args a = {.spec_ = ot_spec_sets(o.spec_, "perm", "perm") ? ".perm = given" : NULL,
                 .axis = OT_AXIS_ALL};
    for (int i = 0; i < OT_MAX_DIMS; i++) a.perm[i] = o.perm[i];
    return ot_build_at(OT_OP_TRANSPOSE, x, NULL, &a, file, line);
}
/* The options as a compound literal of the family's struct. */
#define OT__OPT(type, ...) ((type){.spec_ = #__VA_ARGS__, __VA_ARGS__})

/* The unary and binary elementwise builders are in optree_ops.h. */
/* NumPy dot for 1-D and 2-D operands: inner dims must agree. */
#define ot_dot(x, y) OT__BIN(OT_OP_DOT, x, y)
/* neon's batched_dot: 3-D (B, M, K) . (B, K, N) -> (B, M, N), one matrix
 * product per batch index. A batch dim of 1 on either side is shared by
 * every batch (a weight used at every step). */
#define ot_batched_dot(x, y) OT__BIN(OT_OP_BATCHED_DOT, x, y)

/* Reductions. Options, in positional order: (axis, keepdims), so
 * ot_sum(x, 1), ot_sum(x, 1, true), ot_sum(x, .axis = 1, .keepdims = true);
 * with no axis (ot_sum(x) or ot_sum(x, .keepdims = true)) every axis is
 * reduced, as NumPy's axis=None. max, min, argmax and argmin over zero
 * elements are OT_EEMPTY; argmax/argmin give OT_I32 flat indices (first
 * occurrence; a NaN wins, as in NumPy), and an index range beyond INT32_MAX
 * is OT_EOVERFLOW. sum of OT_I32 is OT_I32, summed exactly: a result that
 * does not fit int32 fails the assignment (or ot_eval, or program run)
 * with OT_EOVERFLOW naming the sum's file:line, the operand's shape and the
 * axis, never a wrapped value (the ref backend then writes no output; the
 * cpu backend's outputs hold what the run wrote, that sum saturated).
 * mean of OT_I32 is OT_F64: the exact sum rounded once, divided by the
 * count. */
#define ot_sum(x, ...) OT__REDUCE(OT_OP_SUM, OT__NODE(x), NULL, __VA_ARGS__)
#define ot_max(x, ...) OT__REDUCE(OT_OP_MAX, OT__NODE(x), NULL, __VA_ARGS__)
#define ot_min(x, ...) OT__REDUCE(OT_OP_MIN, OT__NODE(x), NULL, __VA_ARGS__)
#define ot_mean(x, ...) OT__REDUCE(OT_OP_MEAN, OT__NODE(x), NULL, __VA_ARGS__)
#define ot_argmax(x, ...) OT__REDUCE(OT_OP_ARGMAX, OT__NODE(x), NULL, __VA_ARGS__)
#define ot_argmin(x, ...) OT__REDUCE(OT_OP_ARGMIN, OT__NODE(x), NULL, __VA_ARGS__)
#define OT__REDUCE(op, x, y, ...)                                             \
    ot__build_reduce((op), (x), (y), OT__OPT(ot_reduce_opts, __VA_ARGS__), __FILE__, __LINE__)

/* Transpose of an expression. Options: (perm), so ot_T(x) reverses the dims
 * and ot_T(x, {1, 0, 2}) or ot_T(x, .perm = {1, 0, 2}) permutes them; a
 * written perm must be a permutation (ot_T(x, {0, 0}) is OT_EINVAL). */
#define ot_T(x, ...)                                                          \
    ot__build_transpose(OT__NODE(x), OT__OPT(ot_transpose_opts, __VA_ARGS__), __FILE__, __LINE__)
/* Conversion. Options: (dtype): ot_cast(x, OT_F64) or ot_cast(x, .dtype =
 * OT_F64). Into OT_I32: truncation toward zero, NaN gives 0, out-of-range
 * values saturate. */
#define ot_cast(x, ...)                                                       \
    ot__build_cast(OT__NODE(x), OT__OPT(ot_cast_opts, __VA_ARGS__), __FILE__, __LINE__)
/* One-hot. Options: (depth, axis, dtype): ot_onehot(idx, 10), ot_onehot(idx,
 * 10, 0, OT_F64), ot_onehot(idx, .depth = 10, .dtype = OT_F64). The result
 * has a new dim of size depth at axis (default: last); element k along it
 * is 1 where idx == k. Indices outside [0, depth) give a row of zeros. depth
 * must be in [1, INT32_MAX]. */
#define ot_onehot(x, ...)                                                     \
    ot__build_onehot(OT__NODE(x), OT__OPT(ot_onehot_opts, __VA_ARGS__), __FILE__, __LINE__)
/* Uniform [0, 1) of a shape. Options: (seed, dtype): ot_rand(OT_SHAPE(3, 4)),
 * ot_rand(OT_SHAPE(3, 4), 7, OT_F64), ot_rand(shape, .seed = k).
 * Counter-based (Philox-2x32-10 on the backend seed, the seed and the
 * element's row-major index), so every backend draws the same values, and a
 * rand node draws the same values each time it is evaluated: vary the seed
 * for new ones. */
#define ot_rand(shp, ...)                                                     \
    ot__build_rand((shp), OT__OPT(ot_rand_opts, __VA_ARGS__), __FILE__, __LINE__)

/* Composites: expansions into the ops above, whose root carries a tag (the
 * composite's op) that autodiff and rewrites recognise. */
/* Mean of squared deviations. Options: (axis, ddof, keepdims), ddof as in
 * NumPy: ot_var(x, 0, 1) or ot_var(x, .axis = 0, .ddof = 1). */
#define ot_var(x, ...)                                                        \
    ot__build_var(OT_OP_VAR, OT__NODE(x), OT__OPT(ot_var_opts, __VA_ARGS__), __FILE__, __LINE__)
#define ot_std(x, ...)                                                        \
    ot__build_var(OT_OP_STD, OT__NODE(x), OT__OPT(ot_var_opts, __VA_ARGS__), __FILE__, __LINE__)
/* minimum(maximum(x, lo), hi). */
#define ot_clip(x, low, high)                                                 \
    ot_build_at(OT_OP_CLIP, OT__NODE(x), NULL, &(ot_args){.axis = OT_AXIS_ALL, \
                .lo = (low), .hi = (high)}, __FILE__, __LINE__)
/* exp(x - max) / sum(exp(x - max)), stable. Options: (axis), default every
 * axis: ot_softmax(x, 1) or ot_softmax(x, .axis = 1). */
#define ot_softmax(x, ...)                                                    \
    ot__build_softmax(OT_OP_SOFTMAX, OT__NODE(x), OT__OPT(ot_softmax_opts, __VA_ARGS__), \
                      __FILE__, __LINE__)
/* (x - max) - log(sum(exp(x - max))); never log of a softmax. Options as
 * ot_softmax's. */
#define ot_logsoftmax(x, ...)                                                 \
    ot__build_softmax(OT_OP_LOGSOFTMAX, OT__NODE(x), OT__OPT(ot_softmax_opts, __VA_ARGS__), \
                      __FILE__, __LINE__)
/* -sum(t * safelog(p)): p probabilities, t targets. Options as a
 * reduction's: (axis, keepdims), default every axis. When p is an
 * ot_softmax(x), log p is taken as logsoftmax(x) (with a floor of -FLT_MAX),
 * so the loss is exact for logits of +-1000 rather than capped at 50 by
 * safelog. */
#define ot_cross_entropy(p, t, ...)                                           \
    OT__REDUCE(OT_OP_CROSS_ENTROPY, OT__NODE(p), OT__NODE(t), __VA_ARGS__)
/* sum(x * x). Options as a reduction's: (axis, keepdims). */
#define ot_squared_l2(x, ...) OT__REDUCE(OT_OP_SQUARED_L2, OT__NODE(x), NULL, __VA_ARGS__)

/* Refcounts. ot_retain returns n, so `keep = ot_retain(tree)` reads well.
 * Both refuse a dead node (below) with OT_ESTATE in the error slot naming
 * the call's file:line: ot_retain returns NULL, ot_release does nothing.
 * A node dies when ot_release drops its last reference; the macros record
 * the caller's file:line as the place it died. */
ot_node *ot_retain_at(ot_node *n, const char *file, int line);
void ot_release_at(ot_node *n, const char *file, int line);
ot_node *(ot_retain)(ot_node *n);
void (ot_release)(ot_node *n);
#define ot_retain(n) ot_retain_at((n), __FILE__, __LINE__)
#define ot_release(n) ot_release_at((n), __FILE__, __LINE__)

/* Node accessors. OT_NODE_DEAD is the kind of a node whose last reference
 * was dropped (its pool popped): see "Dead nodes" under Pools. */
enum { OT_NODE_LEAF = 1, OT_NODE_CONST = 2, OT_NODE_OP = 3, OT_NODE_DEAD = 4 };
int ot_node_kind(const ot_node *n);
ot_op ot_node_op(const ot_node *n);            /* OT_OP_NONE for leaf/const */
ot_op ot_node_tag(const ot_node *n);           /* composite tag or OT_OP_NONE */
ot_shape ot_node_shape(const ot_node *n);
ot_dtype ot_node_dtype(const ot_node *n);
ot_node *ot_node_child(const ot_node *n, int i);   /* i = 0 or 1; may be NULL */
ot_tensor *ot_node_tensor(const ot_node *n);       /* the leaf's tensor */
double ot_node_value(const ot_node *n);            /* a constant's value */
ot_args ot_node_args(const ot_node *n);             /* attributes in force */
const char *ot_node_file(const ot_node *n);
int ot_node_line(const ot_node *n);

/* ------------------------------------------------------------------------ */
/* Pools                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct ot_pool ot_pool;
/* Pushes a new innermost pool on this thread. NULL (OT_ENOMEM) on failure. */
ot_pool *ot_pool_push(void);
/* Releases every node of p, and of any pool pushed after it, and pops them.
 * OT_ESTATE when p is not on this thread's stack. The macro records the
 * caller's file:line, which the error of a later use of a node that died
 * here names. */
int ot_pool_pop_at(ot_pool *p, const char *file, int line);
int (ot_pool_pop)(ot_pool *p);
#define ot_pool_pop(p) ot_pool_pop_at((p), __FILE__, __LINE__)
/* Releases every node of this thread's default pool, and returns the memory
 * this thread keeps for reuse (a spare pool and the dead nodes below, which
 * make a pool and a small tree per assignment allocation-free): dead nodes
 * are freed here, so a later use of one is for ASan or valgrind to see.
 * Call it before a thread that built trees exits. */
void ot_pool_drain(void);

/* Dead nodes. A node whose last reference is dropped (by ot_pool_pop or
 * ot_release) is dead, and a pointer kept to it is stale.
 * Handing a dead node to a builder (as an operand), ot_assign*, ot_eval,
 * ot_explain*, ot_autodiff_new, the ot_program_* steps, ot_print, ot_pp,
 * ot_graphviz, ot_stack_new, ot_substitute, ot_rewrite, ot_retain or
 * ot_release is an OT_ESTATE error whose message names the call, the op
 * and shape the node had, where it was built (builders record their
 * caller's file:line; ot_const and friends record none) and where it died
 * ("by ot_pool_pop at main.c:42"). ot_node_kind returns OT_NODE_DEAD.
 *
 * What is guaranteed: a released node is not handed out again while it is
 * among the last OT_DEAD_NODES_KEPT nodes released on the thread that
 * released it, so a use of it is detected until that many more nodes have
 * died on that thread, or that thread calls ot_pool_drain. After that its
 * memory is reused by a new node or freed: a use is undefined, and it is
 * AddressSanitizer and valgrind that can see it (in sanitizer builds no
 * node memory is reused, only freed). The dead nodes and the nodes kept for
 * reuse are per thread, as pools are; a node used on another thread than
 * the one it died on is detected in the same window, racing with that
 * thread's reuse of the memory. A node retained beyond its pool
 * (ot_retain) lives until its last ot_release. */
#define OT_DEAD_NODES_KEPT 256

/* ------------------------------------------------------------------------ */
/* Printing                                                                  */
/* ------------------------------------------------------------------------ */

/* neon's tuple form: ({'shape': (2, 2), 'op': 'add'}, x0, x1). Unnamed
 * tensors print as tensor-0x<address>, constants as their value. */
int ot_print(const ot_node *tree, FILE *f);
/* Infix: (x0 + x1), (exp x), (sum x axis=1 keepdims), (minimum a b).
 * Both forms write an op node used more than once once, as a line
 * "%1 = (x + x)", and as %1 at its uses: "%1 = (x + x)\n(%1 * %1)".
 * ot_pp writes every attribute a node holds (rand's and onehot's dtype
 * when not f32) and marks an f32 constant that is the root or sits under
 * a node of another dtype as 0.1f, so that ot_parse reads its text back
 * as the same tree when every leaf has a name. */
int ot_pp(const ot_node *tree, FILE *f);
/* A DOT graph of the tree (shared subtrees once). */
int ot_graphviz(const ot_node *tree, FILE *f);

/* ------------------------------------------------------------------------ */
/* The post-order stack                                                      */
/* ------------------------------------------------------------------------ */

/* The items of a tree in postfix order, operands before their op, with
 * shared subtrees listed once: identical nodes, and structurally equal
 * subtrees (same op, attributes and operands; leaves over the same memory
 * with the same view; equal constants of one dtype). */
typedef struct ot_stack ot_stack;
typedef struct ot_stack_item {
    int kind;             /* OT_NODE_LEAF, OT_NODE_CONST or OT_NODE_OP */
    ot_op op;             /* for OT_NODE_OP */
    const ot_node *node;  /* the first node seen for this item (borrowed) */
    ot_tensor *tensor;    /* for OT_NODE_LEAF (borrowed) */
    double value;         /* for OT_NODE_CONST */
    int a, b;             /* operand item indices, or -1 */
    int uses;             /* how many items (and the root) read this one */
} ot_stack_item;
ot_stack *ot_stack_new(const ot_node *tree);
void ot_stack_free(ot_stack *s);
int ot_stack_len(const ot_stack *s);
const ot_stack_item *ot_stack_at(const ot_stack *s, int i);
/* One line per item: index, kind, op and attributes, operand indices. */
int ot_stack_print(const ot_stack *s, FILE *f);

/* A new tree equal to tree with every leaf over old replaced by new_t. new_t
 * must have old's shape; dtypes are promoted afresh. tree is unchanged. */
ot_node *ot_substitute(ot_node *tree, ot_tensor *old, ot_tensor *new_t);

/* ------------------------------------------------------------------------ */
/* Execution                                                                 */
/* ------------------------------------------------------------------------ */

/* out[...] = tree, on out's backend. The tree's shape must broadcast to
 * out's; out may be any writable view and may alias the tree's leaves (the
 * result is as if the tree were evaluated before out is written). A float
 * tree cannot be written into an OT_I32 out (OT_EDTYPE) unless cast first.
 * A tree built once and assigned again into the same out reuses the plan
 * of its second assignment without walking the tree (kept on the root node,
 * freed with it). */
int ot_assign_node(ot_tensor *out, ot_node *tree);
/* The errors of its checks carry the file:line of this call (ot_assign_at,
 * in "Names and metadata on nodes" below). */
#define ot_assign(out, x) ot_assign_at((out), OT__NODE(x), __FILE__, __LINE__)
/* Several outputs at once: every tree is evaluated before any output is
 * written; shared subtrees are computed once. Outputs must not overlap. */
int ot_assign_many(int n, ot_tensor *const outs[], ot_node *const trees[]);
/* A new tensor of the tree's shape and dtype, on the backend of its first
 * leaf, holding its value. NULL on error. */
ot_tensor *ot_eval(ot_node *tree);
/* Prints how the backend of the tree's first leaf would run ot_eval(tree):
 * for the cpu backend its kernels, the nodes each one fuses, temporaries,
 * the bytes read and written, which kernels run as "(generated code)" or
 * "(generated code, streaming stores)", and the accuracy of each kernel's
 * inexact ops ("[accuracy: tanh u10]"); for the ref backend, one line per
 * node. */
int ot_explain(const ot_node *tree, FILE *f);
/* Prints how ot_assign_many(n, outs, trees) would run: the same plan,
 * in-place writes, compound dots and epilogues included (ot_explain plans
 * for a fresh output). The same checks as ot_assign_many; writes nothing. */
int ot_explain_many(int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f);

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
 * zeros. An op without a rule is OT_EUNSUPPORTED, naming the op and the
 * file:line where its node was built.
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
 * since its steps run later). Leaves over parts of the buffer t does not
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
/* Drops a reference. NULL is a no-op. */
void ot_autodiff_free(ot_autodiff *ad);
/* The gradient of the tree w.r.t. wrt, a tree of wrt's shape and dtype owned
 * by the current pool; zeros when the tree does not read wrt. A builder:
 * NULL on error, keeping the first one. */
ot_node *ot_autodiff_grad(ot_autodiff *ad, ot_tensor *wrt);
/* grads[i][...] = the gradient w.r.t. wrt[i], for i < n, in one evaluation
 * (ot_assign_many): subtrees the gradients share are computed once. */
int ot_autodiff_backprop(ot_autodiff *ad, int n, ot_tensor *const wrt[],
                         ot_tensor *const grads[]);
/* The gradient w.r.t. wrt as a new contiguous tensor (the caller frees it),
 * or NULL on error. */
ot_tensor *ot_autodiff_grad_tensor(ot_autodiff *ad, ot_tensor *wrt);
/* Copies the gradient w.r.t. wrt to host memory: row-major, in wrt's dtype. */
int ot_autodiff_grad_host(ot_autodiff *ad, ot_tensor *wrt, void *host);

/* ------------------------------------------------------------------------ */
/* Optimizers (src/optim.c)                                                  */
/* ------------------------------------------------------------------------ */

/* A step updates every parameter and its state in one ot_assign_many: each
 * new value is an op-tree of the old ones, all evaluated before any is
 * written, so the cpu backend runs a parameter's whole update as one pass
 * that reads w, its gradient and its state once and writes w and the state
 * once. Gradients are trees (an ot_autodiff_grad, or a tensor through
 * ot_tensor_node), so computing a gradient can fuse into its update. Every
 * w[i], g[i] and state tensor of one i has w[i]'s shape; constants are
 * weak, so f32 parameters stay f32. src/optim.c is short on purpose: read it
 * as an example of writing your own. */

/* A zero field of the options means its default, so (ot_adam){.lr = 1e-3}
 * and (ot_sgd){.momentum = 0.9} are complete: lr OT_SGD_LR or OT_ADAM_LR
 * (Keras's), beta1 0.9, beta2 0.999, eps 1e-8, t 1, grad_scale 1, momentum
 * and weight_decay 0 (a beta of exactly 0 is not expressible: 1e-300 acts
 * as 0). The same holds for ot_program_sgd/adam and ot_model_sgd/adam.
 * Both steps check every argument before writing anything: OT_ENULL for a
 * NULL array or entry, OT_EINVAL for n < 0, a negative or NaN lr, momentum
 * or weight_decay, a negative grad_scale, betas outside [0, 1), eps < 0 or
 * t < 0, OT_EDTYPE for an integer parameter, state or lr_scale, OT_ESHAPE
 * for a gradient or state whose shape is not exactly w's or an lr_scale
 * that is not 0-d. */

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
int ot_sgd_step(const ot_sgd *o, int n, ot_tensor *const w[], ot_node *const g[],
                ot_tensor *const vel[]);

/* Adam (Kingma and Ba, 2015), t = 1 for the first step (the caller counts):
 *     d = grad_scale*g
 *     m = beta1*m + (1 - beta1)*d
 *     v = beta2*v + (1 - beta2)*d*d
 *     w = w - lr*sqrt(1 - beta2^t)/(1 - beta1^t) * m/(sqrt(v) + eps)
 * Zero fields mean the defaults (above); ot_adam_default(lr) spells them
 * out. */
typedef struct ot_adam {
    double lr, beta1, beta2, eps, grad_scale;
    int64_t t;
    ot_tensor *lr_scale;   /* NULL: none (see above) */
} ot_adam;
static inline ot_adam ot_adam_default(double lr)
{
    return (ot_adam){.lr = lr, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .grad_scale = 1, .t = 1};
}
int ot_adam_step(const ot_adam *o, int n, ot_tensor *const w[], ot_node *const g[],
                 ot_tensor *const m[], ot_tensor *const v[]);

/* Clipping by global norm: norm = sqrt(sum over i of sum(g[i]^2)), summed
 * in double; *scale = min(1, max_norm/norm), and 1 for a zero norm. Pass
 * *scale as the step's grad_scale. norm may be NULL. A NaN or infinite norm
 * gives a NaN scale (the step then poisons w, which is how the caller sees
 * it). max_norm must be > 0. */
int ot_clip_global_norm(int n, ot_node *const g[], double max_norm, double *scale,
                        double *norm);

/* ------------------------------------------------------------------------ */
/* Custom ops (src/ops.c, ot_op_register)                                    */
/* ------------------------------------------------------------------------ */

/* An elementwise op added at run time, without editing the library. It
 * gets an op number of its own (OT_OP_REGISTERED and up) that ot_op_name,
 * ot_op_lookup, ot_op_arity, ot_op_kind, ot_op_flags and ot_node_op know;
 * its nodes fuse into the cpu backend's kernels like a built-in op's (the
 * vector function is called from inside the fused loop, in generated code
 * too), print by its name, and differentiate through its gradient builder.
 *
 *     static float gelu_f32(float x) { ... }
 *     static __m256 gelu_avx2(__m256 x) { ... }   // target("avx2,fma")
 *     ot_op gelu = ot_op_register(&(ot_op_def){
 *         .name = "gelu", .arity = 1, .f32 = gelu_f32, .f64 = gelu_f64,
 *         .avx2_f32 = (ot_vfn)gelu_avx2, .grad = gelu_grad});
 *     ot_assign(out, ot_apply(gelu, ot_mul(x, 2.0f)));
 *
 * Shapes and dtypes are those of a built-in elementwise op (NumPy
 * broadcasting for two operands, dtype promotion; i32 operands give f64).
 * The scalar function of a dtype is required for that dtype: the ref
 * backend, the scalar and SSE2 kernels and ISAs without a vector function
 * call it; using the op on a dtype without one is OT_EUNSUPPORTED at
 * assignment. The ref backend uses f64 where given (it computes in double),
 * else f32. Vector functions are optional: with one for the ISA's width
 * (AVX2: __m256 / __m256d; AVX-512: __m512 / __m512d, by value, as
 * `__m256 f(__m256 x)` or `__m256 f(__m256 x, __m256 y)`, the System V
 * vector calling convention) the op runs a vector at a time, and generated
 * code calls it; without one the kernel runs on the tile interpreter,
 * calling the scalar function per element. A vector function must be
 * lane-wise (a lane's result depends on that lane alone) and may be called
 * on zero-padded lanes past the end of the data; every function must be
 * pure and callable from any thread. On one ISA, fused, unfused and
 * interpreted results are bitwise equal.
 *
 * The registry lives as long as the process: ops cannot be unregistered,
 * and registration is thread-safe. */
typedef void (*ot_vfn)(void);   /* a vector function, cast to this type */
/* The gradient of a registered op: the contribution to operand `which`
 * (0: x, 1: y; y is NULL for a unary op), as a tree built from the operand
 * nodes, the op's own node `out` and its incoming gradient g, with the
 * ordinary builders. It may have out's shape or any shape that broadcasts
 * to it; autodiff sums it back to the operand's shape. NULL with an error
 * set fails the differentiation. */
typedef ot_node *(*ot_grad_fn)(ot_node *x, ot_node *y, ot_node *out, ot_node *g, int which,
                               void *user);
typedef struct ot_op_def {
    const char *name;               /* copied; [A-Za-z0-9_], < OT_OP_NAME_MAX,
                                       no built-in's or registered op's name */
    int arity;                      /* 1 or 2 */
    float (*f32)(float x);          /* unary ops: at least one of these */
    double (*f64)(double x);
    float (*f32_xy)(float x, float y);     /* binary ops: at least one */
    double (*f64_xy)(double x, double y);
    ot_vfn avx2_f32, avx2_f64;      /* optional, each only with the scalar */
    ot_vfn avx512_f32, avx512_f64;  /* function of its dtype */
    ot_grad_fn grad;                /* NULL: not differentiable (zero gradient,
                                       OT_FLAG_NODIFF) */
    void *user;                     /* passed to grad */
} ot_op_def;

#define OT_FLAG_CUSTOM 16u          /* a registered op, or the table's
                                       placeholder row of such ops (custom1,
                                       custom2: built only through them) */
#define OT_OP_REGISTERED 1024       /* the first registered op's number */
#define OT_MAX_REGISTERED_OPS 256
#define OT_OP_NAME_MAX 32

/* Registers def (copied): its op number, or OT_OP_NONE with OT_EINVAL for a
 * bad definition (no name, a name in use, an arity not 1 or 2, no scalar
 * function or one of the other arity, a vector function without its
 * dtype's scalar function, a full registry) and OT_ENULL for a NULL def. */
ot_op ot_op_register(const ot_op_def *def);
/* A node of a registered op: ot_apply(op, x) for a unary op, ot_apply2(op,
 * x, y) for a binary one (ot_build_at takes registered ops too). Operands
 * as for the built-in builders: nodes, tensors or numbers. */
#define ot_apply(op, x) OT__UN((op), x)
#define ot_apply2(op, x, y) OT__BIN((op), x, y)

/* ------------------------------------------------------------------------ */
/* Programs and sequences (src/program.c)                                    */
/* ------------------------------------------------------------------------ */

/* Several assignments run in order, as one call: each step is evaluated and
 * written before the next step's trees are evaluated, so a later tree that
 * reads a tensor an earlier step wrote sees the new values (ngraph's control
 * dependencies). Trees are lazy until their step runs: building them all
 * first is what makes this useful. Every step is checked (NULLs, shapes,
 * dtypes, outputs, one backend) before the first one runs; an error names
 * the call and the step ("file.c:88: sequential: step 2: ..."; a macro
 * passes __FILE__, __LINE__), and nothing is written then. A step that fails
 * while running (out of memory) leaves the earlier steps' writes in place. */
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
 * plan. Results are bitwise those of the same steps run as ot_assign_many.
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
 * written by a step, and never freed by the caller. NULL on error. */
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
 * again (kept, so a size seen before costs nothing). That fails, naming the
 * step, where a tree fixes the symbol's size some other way: a view
 * (slice, reshape) of a symbolic placeholder, an output or another tensor
 * whose shape has the old size. */
int ot_program_run_at(ot_program *p, int n, const ot_bind bindings[], const char *file, int line);
#define ot_program_run(...) ot_program_run_at(__VA_ARGS__, __FILE__, __LINE__)

/* What a compiled program holds, at the symbols' current sizes (on the
 * ref backend, which plans nothing, kernels and the arena read 0). */
typedef struct ot_program_stats {
    int steps;                    /* steps per run */
    int kernels;                  /* kernels per run, every step's */
    int specializations;          /* compiled symbol sizes kept */
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
/* Rewrite rules (src/rewrite.c)                                             */
/* ------------------------------------------------------------------------ */

/* A rule rewrites a pattern of a tree before it is planned, after MXNet's
 * subgraph API: a selector grows a match from one node (SubgraphSelector's
 * Select, SelectInput, SelectOutput, Filter) and a builder returns the tree
 * that replaces it (SubgraphProperty's CreateSubgraphNode). Rules are
 * grouped into named rule sets; a backend applies the sets its options name
 * (ot_backend_opts.rewrite, or OT_REWRITE=name1,name2) to every tree it
 * assigns or explains, and ot_explain prints each firing as
 * "rewrite: <rule> (set '<set>') at <file>:<line>" (the matched root's).
 * The user's trees are never changed: rewritten trees are new nodes.
 *
 * Matching, one pass per rule (sets in the order listed, rules in the
 * order registered), over the trees as the previous pass left them:
 *   - seeds are tried operands first (post-order); a node is in at most
 *     one match per pass;
 *   - select(n) starts a match at op node n; select_input(n, in) adds op
 *     operand in of member n, select_output(n, out) adds a node out that
 *     reads member n (both optional: NULL adds nothing); leaves and
 *     constants are never members. A composite (softmax, ...) is one node
 *     whose operands are its own (ot_rewrite_operand); its expansion is
 *     not matched;
 *   - the match must have one root, a member no other member reads (else it
 *     is dropped), and filter (optional) may reject it;
 *   - create(m) returns the replacement of the root, a tree of the root's
 *     shape and dtype built over m->inputs. Members other than the root
 *     stay where something outside the match reads them.
 * A create that returns NULL, or a tree of another shape or dtype, makes the
 * assignment fail (OT_EINVAL, OT_ESHAPE, OT_EDTYPE naming rule, set and the
 * root's file:line) before anything is written. Callbacks run on the
 * assigning thread, possibly on several threads at once. A create may
 * itself rewrite (ot_rewrite, or an assignment through a backend with rule
 * sets), 16 creates deep at most per thread: past that (a create that
 * rewrites a tree its rule fires on again) every create in the chain fails
 * with OT_ESTATE naming the innermost rule, set and file:line. */
typedef struct ot_rewrite_match {
    const char *rule, *set;        /* the names */
    int nnodes;
    const ot_node *const *nodes;   /* the members, operands first; the root,
                                      which is replaced, last */
    int ninputs;
    ot_node *const *inputs;        /* the values entering the match, in the
                                      order members read them (each once),
                                      as earlier passes rewrote them: build
                                      the replacement over these */
    const ot_node *const *input_nodes; /* the same values as the members
                                      read them (ot_rewrite_input maps) */
} ot_rewrite_match;

typedef struct ot_rewrite_rule {
    const char *name;              /* for ot_explain; copied */
    bool (*select)(const ot_node *n, void *user);                    /* required */
    bool (*select_input)(const ot_node *n, const ot_node *input, void *user);
    bool (*select_output)(const ot_node *n, const ot_node *output, void *user);
    bool (*filter)(int nnodes, const ot_node *const nodes[], void *user);
    ot_node *(*create)(const ot_rewrite_match *m, void *user);      /* required */
    void *user;                    /* passed to each callback; not copied */
} ot_rewrite_rule;

typedef struct ot_rule_set {
    const char *name;              /* no commas, not empty */
    int nrules;
    const ot_rewrite_rule *rules;
} ot_rule_set;

/* Registers a rule set under its name, for every backend made after it.
 * The set, its name and its rules' names are copied; user pointers are
 * kept. Registrations are permanent (the registry is append-only and
 * thread-safe). OT_ENULL for a NULL set, name, rules, rule name, select or
 * create; OT_EINVAL for an empty name or one with a comma or space, no
 * rules, or a name registered already ("fuse" is the library's: silu's
 * spellings sig(x) * x and x / (1 + exp(-x)) as x * sig(x), the form the
 * kernels run in one pass; log(softmax(x, axis)) as logsoftmax(x, axis),
 * finite where the softmax underflows; sum(x * x, axis) as
 * squared_l2(x, axis), the same values, with autodiff's 2 x g). */
int ot_rule_set_register(const ot_rule_set *set);
/* tree rewritten by the named rule sets (comma-separated, as the option),
 * as a backend would before planning it: a builder (NULL on error, keeping
 * the first), owned by the current pool. tree itself when nothing fires. */
ot_node *ot_rewrite(ot_node *tree, const char *sets);
/* In create: the rewritten input for a value a member reads, given as the
 * member read it (an ot_rewrite_operand of a member); NULL when it is not
 * one of m's inputs. */
ot_node *ot_rewrite_input(const ot_rewrite_match *m, const ot_node *read);
/* Operand i (0 or 1) of n as rewrites see it: a composite's own operand
 * for a composite's root (softmax(x) reads x), else ot_node_child's. */
ot_node *ot_rewrite_operand(const ot_node *n, int i);

/* ------------------------------------------------------------------------ */
/* Models: layers, a loss, an optimizer and a training loop (src/model.c)   */
/* ------------------------------------------------------------------------ */

/* A stack of dense layers, act(x.W + b), trained by ot_model_fit on rows of
 * f32 inputs x (rows, inputs) against targets y (rows, outputs), after
 * Serrano's Model and Keras's fit/predict. The model owns its parameters
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

typedef struct ot_fit_opts {
    int epochs;                /* 0: 1 */
    int batch;                 /* rows per step; 0: 32. Full batches only:
                                  the rows left over join other batches in
                                  later epochs (a new order each epoch) */
    uint64_t seed;             /* the shuffling's seed */
    bool no_shuffle;           /* rows in order (default: shuffled) */
    double validation_split;   /* the last fraction of rows, held out and
                                  evaluated after each epoch; [0, 1) */
    int patience;              /* stop after this many epochs without a
                                  better monitored value; 0: never */
    int monitor;               /* OT_MONITOR_*; the val ones need a split */
    bool quiet;                /* no progress line per epoch */
    FILE *log;                 /* where progress goes; NULL: stdout */
    int lr_schedule;           /* OT_LR_CONSTANT (0) or OT_LR_COSINE */
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
/* Appends a dense layer of `units` outputs and activation act. */
int ot_model_linear_at(ot_model *m, int64_t units, ot_activation act, uint64_t seed,
                       const char *file, int line);
#define ot_model_linear(...) ot_model_linear_at(__VA_ARGS__, __FILE__, __LINE__)
/* The loss: OT_LOSS_SOFTMAX_CE or OT_LOSS_MSE with fn NULL, or
 * OT_LOSS_CUSTOM with fn (any scalar cost tree of out and y). */
int ot_model_loss_at(ot_model *m, int loss, ot_loss_fn fn, void *user, const char *file,
                     int line);
#define ot_model_loss(...) ot_model_loss_at(__VA_ARGS__, __FILE__, __LINE__)
/* The optimizer (the default is Adam, lr 1e-3); zero options are the
 * defaults, as for ot_sgd_step and ot_adam_step; SGD's momentum is kept in
 * the model. */
int ot_model_sgd_at(ot_model *m, const ot_sgd *o, const char *file, int line);
#define ot_model_sgd(...) ot_model_sgd_at(__VA_ARGS__, __FILE__, __LINE__)
int ot_model_adam_at(ot_model *m, const ot_adam *o, const char *file, int line);
#define ot_model_adam(...) ot_model_adam_at(__VA_ARGS__, __FILE__, __LINE__)
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
/* The parameters, W then b per layer, into out[0..n); returns how many
 * there are (2 per layer). */
int ot_model_parameters_at(const ot_model *m, int n, ot_tensor *out[], const char *file, int line);
#define ot_model_parameters(...) ot_model_parameters_at(__VA_ARGS__, __FILE__, __LINE__)
/* The parameters to and from a NumPy .npz (ot_savez): entries w0, b0, w1,
 * b1, ... (np.load(path)["w0"]). Loading reads and checks every entry (count,
 * names, f32, the model's shapes) before it writes any, so a corrupt or
 * mismatched file is an error that leaves the parameters as they were.
 * Saving replaces the file as ot_save does, so a failed save leaves the
 * previous one whole; loading also reads numpy.savez_compressed's files.
 * The optimizer's state is not saved. */
int ot_model_save_at(const ot_model *m, const char *path, const char *file, int line);
#define ot_model_save(...) ot_model_save_at(__VA_ARGS__, __FILE__, __LINE__)
int ot_model_load_at(ot_model *m, const char *path, const char *file, int line);
#define ot_model_load(...) ot_model_load_at(__VA_ARGS__, __FILE__, __LINE__)

/* ==== Checkpoints, the default pool and mixing rules ======================
 *
 * ot_keep(x): x itself (same shape, dtype and values, bit for bit), as a
 * node the cpu backend always stores: it gets a kernel and storage of its
 * own, and whatever reads it reads memory, so a fused region is cut there by
 * hand (ngraph's and Serrano's graphs have no such node; it is the
 * checkpoint of a rematerialisation scheme). Gradients pass through it
 * unchanged; ref evaluates it as the identity; ot_explain shows the extra
 * kernel and temporary, ot_print/ot_pp show keep(x). A builder: NULL on a
 * NULL operand, owned by the current pool.
 *
 * Backends: a tree runs on the backend of its tensors. A builder whose two
 * operands read tensors of two backends is OT_EBACKEND naming both and the
 * file:line of the call; ot_assign of a tree into an output on another
 * backend is OT_EBACKEND naming both (constant-only trees go anywhere).
 *
 * Dtypes of an assignment follow NumPy's "same_kind" casting (np.add(a, b,
 * out=o)): a tree is rounded to its output's dtype within a kind (an f64
 * tree into an f32 output narrows, rounding to nearest, with no error; an
 * i32 tree into a float output converts), and a float tree into an i32
 * output is OT_EDTYPE (ot_cast it first). Check ot_node_dtype first where a
 * narrowing would be a bug. */
#define ot_keep(x) ot_build_at(OT_OP_KEEP, OT__NODE(x), NULL, NULL, __FILE__, __LINE__)
/* Nodes held by the calling thread's default pool (where builders put nodes
 * while no pool is pushed); ot_pool_drain empties it. Thread-local, as the
 * pool stack is. */
size_t ot_pool_default_nodes(void);

/* ------------------------------------------------------------------------ */
/* Trainable variables and gradients through views (src/variables.c,         */
/* src/autodiff.c)                                                           */
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
/* Saving, loading and wrapping tensors (src/io.c, src/tensor.c)             */
/* ------------------------------------------------------------------------ */

/* NumPy's .npy: one tensor per file, format 1.0 as numpy.save writes it
 * (dtypes '<f4', '<f8', '<i4', C order), so np.load reads the file and
 * ot_load reads numpy.save's, values bit for bit. A view is saved as its
 * logical contents.
 * Saving never loses the old file (ot_save, ot_savez, ot_savez_compressed,
 * ot_model_save): the bytes go to a new temporary file in the target's
 * directory (the target's name + ".tmp" + 6 random characters), which is
 * fsync'ed and then renamed over the target, so on any failure the old
 * file is untouched and the temporary removed. The new file has the old
 * one's permission bits, or 0666 less the umask if there was none. A
 * symbolic link is followed (the file it points to is replaced, the link
 * stays); an existing target that is not a regular file (/dev/null, a
 * FIFO) is written in place. Returns 0, OT_ENULL, OT_EIO (naming the path
 * and errno's text), OT_ENOMEM. */
int ot_save(const char *path, const ot_tensor *t);
/* A new contiguous tensor on be with the file's shape and dtype. Formats
 * 1.0, 2.0 and 3.0 are read; a Fortran-order array is loaded in C order.
 * '<i8' (NumPy's default integer) is loaded as OT_I32 when every value
 * fits, else OT_EOVERFLOW naming the first value that does not.
 * NULL on error, with nothing allocated: OT_EIO (cannot open or read, bad
 * magic - an .npz is named as such: read it with ot_loadz -, a malformed
 * header, a file shorter or longer than the shape says), OT_EUNSUPPORTED
 * (big-endian or another dtype, more than OT_MAX_DIMS dims), OT_EOVERFLOW,
 * OT_ENOMEM. */
ot_tensor *ot_load(ot_backend *be, const char *path);

/* NumPy's .npz (numpy.savez): a zip of one .npy per tensor, entry
 * names[i] + ".npy" (np.load(path)[names[i]]), stored uncompressed.
 * Names are unique, not empty. Tensors of several backends may be saved
 * together. The archive is built in memory (libzip), then written as
 * ot_save writes. */
int ot_savez(const char *path, int n, const char *const names[],
             const ot_tensor *const tensors[]);
/* The same with every entry deflated, as numpy.savez_compressed writes. */
int ot_savez_compressed(const char *path, int n, const char *const names[],
                        const ot_tensor *const tensors[]);
/* Loads n entries of an .npz (numpy.savez's or numpy.savez_compressed's:
 * stored and deflated entries, zip64 included): names[i] (without ".npy"),
 * or with names NULL the first n entries in file order, into out[i] (new
 * tensors the caller frees). Returns the number of entries in the file (so
 * n = 0 asks for it), or a negative code with every out[i] NULL: OT_EINVAL
 * for a name not in the file, OT_EUNSUPPORTED for encrypted entries and
 * other compression methods, and ot_load's errors (a corrupt archive or a
 * CRC that does not match is OT_EIO). */
int ot_loadz(ot_backend *be, const char *path, int n, const char *const names[],
             ot_tensor *out[]);

/* A tensor over the caller's memory, without a copy: ptr is the address of
 * element [0, 0, ...], strides in elements (NULL: row-major contiguous; any
 * sign, 0 for a read-only broadcast). ptr must be aligned to the element
 * (4 or 8 bytes; nothing more: the cpu backend's kernels load and store
 * unaligned vectors and stream only to aligned outputs), else OT_EINVAL.
 * free_fn(user, ptr), when not NULL, is called once when the tensor and
 * every view of it are gone; on error it is not called and the memory
 * stays the caller's. NULL with OT_ENULL, OT_EDTYPE, OT_EINVAL, OT_ESHAPE
 * (bad shape), OT_EOVERFLOW, OT_ENOMEM. */
ot_tensor *ot_wrap(ot_backend *be, ot_shape shape, ot_dtype dtype, void *ptr,
                   const int64_t *strides, void (*free_fn)(void *user, void *ptr),
                   void *user);

/* ot_get / ot_set that know the host buffer's size: nbytes less than
 * numel * itemsize is OT_EINVAL (naming both sizes) and nothing is copied. */
int ot_get_n(const ot_tensor *t, void *host, size_t nbytes);
int ot_set_n(ot_tensor *t, const void *host, size_t nbytes);

/* How ot_tensor_print_opts prints values, per call (no global state).
 * Zero fields are the defaults, NumPy's: a tensor of more than threshold
 * (1000) elements is summarised, each dim longer than 2 * edgeitems (3)
 * showing its first and last edgeitems with "..." between; a negative
 * threshold never summarises. precision (8, 1..17) is NumPy's: digits
 * after the point, and the text is np.array2string's with its defaults
 * (floatmode 'maxprec'): per value the fewest digits that read back in its
 * dtype, at most precision after the point, trailing zeros dropped but the
 * point kept (1.); scientific for the whole tensor when a finite non-zero
 * |value| shown is >= 1e8 or < 1e-4 or the largest is over 1000 times the
 * smallest, every mantissa then with the same digits; values padded to
 * one width, lined up on the point. ot_tensor_print(t, f) is
 * ot_tensor_print_opts(t, f, NULL). Lines are not wrapped at a line
 * width (NumPy wraps at 75 characters). */
typedef struct ot_print_options {
    int64_t threshold;
    int edgeitems;
    int precision;
} ot_print_options;
int ot_tensor_print_opts(const ot_tensor *t, FILE *f, const ot_print_options *opts);

/* ==== Parsing expressions (src/parse.c) ====================================
 *
 * ot_parse("tanh(a*b + a/b)", 2, (const char *[]){"a", "b"}, (ot_node *[]){a, b})
 * builds the tree over the named operands (tensors through ot_tensor_node,
 * or any nodes) in the current pool, as the builders would. The syntax is
 * Python's for numbers (1, 2.5, 1e-3, inf, nan), names, + - * / ** (right
 * associative, tighter than a unary minus on its left), unary - and +,
 * < <= > >= == != (lowest, left associative) and parentheses. Every op of
 * the table and every registered op is a function by its name, operands
 * first, then its attributes positionally or by keyword, in the order of
 * the C builders' options: sum(x, 1), sum(x, axis=1, keepdims=1),
 * var(x, axis=0, ddof=1), clip(x, 0, 6), cast(x, f64), onehot(y, 10),
 * transpose(x, perm=(1, 0)), rand(shape=(3, 4), seed=7). An integer literal
 * is an i32 constant, any other number f64 (both weak, as in C). A minus
 * written on a literal is part of the constant (-2, not neg(2)). A literal
 * of any length is read whole, correctly rounded (1 followed by 200 zeros
 * is 1e200); one beyond its type's range (1e400, 1e39f) is an error at its
 * column: write inf.
 *
 * Errors (OT_EINVAL, or the builder's code) say where:
 * "parse: col 6: unknown function 'tanhh'; did you mean 'tanh'?". NULL on
 * error. Nesting deeper than 200 levels (parentheses, calls, signs, the
 * right operand of each ** in a chain, labels) is an error, never a deep
 * recursion. */
ot_node *ot_parse(const char *expr, int n, const char *const names[], ot_node *const nodes[]);

/* ------------------------------------------------------------------------ */
/* Names and metadata on nodes (issue 17)                                    */
/* ------------------------------------------------------------------------ */

/* Any node may carry a name and a small set of string metadata, key ->
 * value (ngraph's op names and metadata). They are annotations, not part
 * of the node's value: the plan key, common subexpressions and the
 * post-order stack ignore them, so naming a node never compiles anything
 * again, and two equal trees named differently share one cached plan.
 * A leaf's name is its tensor's: ot_node_set_name on a leaf is
 * ot_tensor_set_name. Annotations are freed with the node. Setting them
 * is not synchronised: annotate a node before other threads read it.
 *
 * Where they show:
 *   ot_pp          a named op node as  h1:(x0 + x1)  (a named constant as
 *                  lr:0.5); a shared one as "%1 = h1:(x0 + x1)", then %1.
 *   ot_print       'name': 'h1' and 'meta': {'key': 'value'} in the dict
 *                  of an op node.
 *   ot_graphviz    labels "h1: add" (constants "lr: 0.5"), then a line
 *                  "key=value" per metadata entry of any node.
 *   ot_stack_print "2: h1: add (2, 2) float32 <- 0 1". Items are shared by
 *                  structure, so an item shows the first node's name.
 *   errors         a builder's message ends naming its operands that have
 *                  a name ("; operand 2 is 'h1'"); ot_assign's checks name
 *                  the tree and the output ("tree 0 'h1' of shape (3,4)
 *                  cannot be written into an output 'y' of shape (5,)").
 * ot_substitute's rebuilt nodes keep the names and metadata of the nodes
 * they replace; gradient trees (ot_autodiff_grad) are unnamed.
 *
 * Views of a named tensor are named after it, as NumPy writes them, and
 * views of an unnamed one are unnamed: ot_slice "x[2:5]", "x[::-1]",
 * "x[:, 1]", "x[1]" (the indices given; none at all is "x[...]");
 * ot_transpose "x.T" (dims reversed) or "x.transpose(1,0,2)"; ot_reshape
 * "x.reshape(4,16)" (the shape after a -1 is worked out); ot_broadcast_to
 * "x.broadcast_to(3,4)". Views keep no metadata. */
#define OT_NAME_MAX 256       /* bytes of a node's name, without the NUL */
#define OT_META_KEY_MAX 64    /* bytes of a metadata key */
#define OT_META_MAX 32        /* metadata entries per node */

/* Copies name; NULL or "" removes it. OT_ENULL for a NULL node, OT_EINVAL
 * for a name longer than OT_NAME_MAX, OT_ENOMEM. */
int ot_node_set_name(ot_node *n, const char *name);
/* The name, or NULL (also for a NULL node). Borrowed until it changes. */
const char *ot_node_name(const ot_node *n);
/* n named name, for naming inside an expression:
 * ot_mul(ot_named(ot_add(a, b), "h1"), c). NULL when n is NULL (keeping the
 * first error, as builders do) or when naming fails. */
ot_node *ot_named(ot_node *n, const char *name);

/* Sets key to a copy of value, replacing an existing value in place;
 * value NULL removes key (absent: nothing to do). Keys are 1 to
 * OT_META_KEY_MAX bytes without control characters, else OT_EINVAL (NULL:
 * OT_ENULL); a new key beyond OT_META_MAX entries is OT_EINVAL. */
int ot_node_set_meta(ot_node *n, const char *key, const char *value);
/* key's value, or NULL. Borrowed until it changes. */
const char *ot_node_meta(const ot_node *n, const char *key);
/* Entries are numbered 0 .. count-1 in the order their keys were first
 * set (a removal moves the later ones down). meta_at gives entry i's key
 * and value (either out may be NULL); OT_EINVAL when i is out of range. */
int ot_node_meta_count(const ot_node *n);
int ot_node_meta_at(const ot_node *n, int i, const char **key, const char **value);

/* ot_assign_node with the call's place: the errors of the checks read
 * "file.c:88: assign: ...". The ot_assign macro passes __FILE__, __LINE__;
 * ot_assign_node is this with file NULL. */
int ot_assign_at(ot_tensor *out, ot_node *tree, const char *file, int line);
/* ot_eval likewise; the ot_eval macro passes the call's place. */
ot_tensor *ot_eval_at(ot_node *tree, const char *file, int line);
#define ot_eval(tree) ot_eval_at((tree), __FILE__, __LINE__)

/* ==== Named axes (src/axes.c) =============================================
 *
 * After ngraph's make_axis(length, name): the dims of a tensor may carry
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
 *     unchanged, ot_broadcast_to only when the rank is, ot_copy keeps them.
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

/* ==== Concat, split and slicing of expressions (issue 17 item 6) ==== */
/* Layout ops of any expression, not only of tensors, with gradients. x is a
 * tensor or a node (OT__NODE); each builder records its call site and
 * returns a node of the current pool, or NULL with the error in the slot
 * (as every builder). On the cpu backend a slice or reshape reads a strided
 * view of its operand's stored value (a leaf, a dot's result, or the
 * operand computed once into a temporary): slicing a dot's result copies
 * nothing. A concat writes each part into its place of the result, in
 * place in the output when it is the tree assigned.
 *
 * The macros below (and ot_build, ot_stats) take their arguments after the
 * first as __VA_ARGS__ and pass them on unchanged: a compound literal such
 * as (ot_node *[]){a, b} has commas the preprocessor would otherwise split
 * into separate macro arguments, so ot_concat(2, (ot_node *[]){a, b}, -1)
 * and ot_split(x, 0, 2, (int64_t[]){1, 3}, out) compile as written. */

/* ot_slice_node(x, OT_ALL, OT_RANGE(a, b[, step]), OT_IDX(i), ...): NumPy
 * basic indexing of an expression, the rules of ot_slice (negative indices
 * and steps, clipped bounds, OT_IDX drops its dim, missing trailing indices
 * mean OT_ALL). OT_EINVAL: too many indices, a zero step, an index out of
 * bounds. */
ot_node *ot_slice_node_n(ot_node *x, int n, const ot_index *idx, const char *file, int line);
#define ot_slice_node(x, ...)                                                  \
    ot_slice_node_n(OT__NODE(x), (int)(sizeof((ot_index[]){__VA_ARGS__}) / sizeof(ot_index)), \
                    (ot_index[]){__VA_ARGS__}, __FILE__, __LINE__)

/* x in a new shape, its elements in row-major order as NumPy's reshape;
 * one dim may be -1. OT_ESHAPE when the sizes differ. */
ot_node *ot_reshape_node_at(ot_node *x, ot_shape shape, const char *file, int line);
#define ot_reshape_node(x, ...) ot_reshape_node_at(OT__NODE(x), __VA_ARGS__, __FILE__, __LINE__)

/* NumPy's concatenate of parts[0..n-1] along axis (negative counts back):
 * one rank (at least 1), the same dims but on the axis; dtypes promote as
 * a binary op's. Errors name the part, its shape and the axis: OT_EINVAL
 * (n < 1, axis out of range), OT_ENULL (parts or a part NULL), OT_ESHAPE. */
ot_node *ot_concat_at(int n, ot_node *const parts[], int axis, const char *file, int line);
#define ot_concat(n, ...) ot_concat_at((n), __VA_ARGS__, __FILE__, __LINE__)

/* NumPy's stack: parts of one shape joined along a new dim at axis
 * (-1 is last, so axis is in [-(ndim + 1), ndim]). */
ot_node *ot_stack_nodes_at(int n, ot_node *const parts[], int axis, const char *file, int line);
#define ot_stack_nodes(n, ...) ot_stack_nodes_at((n), __VA_ARGS__, __FILE__, __LINE__)

/* NumPy's split: out[0..n-1] = x cut along axis into n slices, of equal
 * size when sizes is NULL (the dim must divide by n, else OT_ESHAPE), else
 * of sizes[i] (non-negative, summing to the dim). Returns 0, or the error
 * with every out[i] NULL. */
int ot_split_at(ot_node *x, int axis, int n, const int64_t *sizes, ot_node *out[],
                const char *file, int line);
#define ot_split(x, ...) ot_split_at(OT__NODE(x), __VA_ARGS__, __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* Data-parallel training over MPI (src/mpi/allreduce.c, build/liboptree_mpi.a) */
/* ------------------------------------------------------------------------ */

/* These functions are not in liboptree: they live in build/liboptree_mpi.a,
 * which make builds only where mpicc is found (link it before liboptree.a,
 * with mpicc). This header does not include mpi.h: comm points at the
 * caller's MPI_Comm (MPI_Comm w = MPI_COMM_WORLD; ot_allreduce(&w, ...)).
 *
 * Each call is a collective: every rank of comm calls it, in the same order
 * relative to its other collectives on comm, with the same n and, tensor
 * for tensor, the same dtype (f32 or f64) and shape. The result is the sum
 * or mean over ranks, written in place, and bitwise the same on every rank:
 * every rank gathers every contribution and adds them in rank order (f32
 * in double, rounded once; f64 in f64), then divides by the rank count for
 * OT_REDUCE_MEAN; MPI_Allreduce's order is the implementation's, so it is
 * not used. Ranks exchange their arguments' descriptions first, so a rank's
 * bad argument or a dtype/shape that differs across ranks is the same error
 * on every rank (naming the rank and the tensor), not a hang. Errors:
 * OT_ENULL (comm, tensors or an entry), OT_EINVAL (n < 0, an unknown op, a
 * non-contiguous tensor, MPI not initialised), OT_EALIAS (tensors that
 * overlap; a read-only broadcast view), OT_EBACKEND (tensors of different backends), OT_EDTYPE (i32, or
 * dtypes that differ across ranks), OT_ESHAPE (shapes that differ across
 * ranks), OT_EOVERFLOW (more than INT_MAX elements of one dtype), OT_ENOMEM,
 * OT_EIO (an MPI call failed, under an error handler that returns). A NULL
 * comm fails without communicating, so the other ranks wait for it, as for
 * any collective one rank skips. Data is gathered, not reduce-scattered:
 * each rank receives ranks * size bytes, right for a few ranks. */
typedef enum ot_reduce_op { OT_REDUCE_SUM = 0, OT_REDUCE_MEAN = 1 } ot_reduce_op;
int ot_allreduce(const void *comm, int n, ot_tensor *const tensors[], ot_reduce_op op);

/* The same in two halves, so that computing overlaps communicating: start
 * checks the arguments across ranks (a small blocking exchange), copies
 * the tensors' values and posts the exchange (MPI_Iallgather) and sets
 * *req; wait finishes it, writes the results and frees *req (NULL: OT_ENULL).
 * Between the two the tensors must stay alive and unwritten by others, but
 * other work (another start, the next layer's backprop) may run. Every
 * start that succeeds is matched by one wait; one that fails sets *req to
 * NULL and needs none. Open MPI progresses the exchange inside MPI calls
 * (a later start, the wait). */
typedef struct ot_allreduce_req ot_allreduce_req;
int ot_allreduce_start(const void *comm, int n, ot_tensor *const tensors[], ot_reduce_op op,
                       ot_allreduce_req **req);
int ot_allreduce_wait(ot_allreduce_req *req);

#ifdef __cplusplus
}
#endif
#endif /* OPTREE_H */

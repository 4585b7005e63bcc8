/*
 * optree.h - lazy tensors in the op-tree style, in C11.
 *
 * The core header of optree. Tensor arithmetic builds immutable op-tree
 * nodes; nothing is computed until a tree is assigned into an output tensor.
 * Nodes built while no pool is pushed go to the calling thread's default
 * pool, which only ot_pool_drain empties: a loop that builds a tree per step
 * without ot_pool_push/ot_pool_pop grows without bound (200,000 assigns took
 * 5 MB to 341 MB). ot_pool_default_nodes (and ot_stats' default_pool_nodes)
 * tells how many nodes it holds.
 *
 * This header holds the core: errors, dtypes and shapes, backends, tensors,
 * assignment, the op table and the builders, pools, printing and node
 * names. The rest is in sub-headers it includes at its end, so
 * #include <optree.h> still gives everything:
 *   optree/axes.h      named axes (sum over "C,H,W", dot over named axes)
 *   optree/autodiff.h  gradients, trainable variables, optimizers
 *   optree/norm.h      batch norm, layer norm, global average pooling
 *   optree/program.h   sequences, compiled programs, the model API
 *   optree/extend.h    custom ops, rewrite rules, parsing, the post-order
 *                      stack and substitution
 *   optree/io.h        .npy and .npz files
 *   optree/mpi.h       data-parallel training over MPI (liboptree_mpi.a)
 *   optree/conv.h      convolution and transposed convolution
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
 *   can be checked once, at ot_assign. Builders keep the first error since
 *   the slot was last cleared whatever its cause (the order C evaluates an
 *   expression's arguments in is unspecified), so an error left from an
 *   earlier expression stands, and the handler is not called again, until
 *   ot_clear_error or a function that does work clears the slot. Functions
 *   that do work return 0 or a negative OT_E* code; when they are handed a
 *   NULL tree they return the code already in the slot, otherwise they
 *   clear the slot before working.
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
/* Called (on the recording thread) with every error recorded on this thread,
 * once, as first recorded; NULL removes it. A function that reports an
 * error of a call it made (an optimizer step's assignment, a model's save,
 * a builder inside ot_parse, an assignment's evaluation) then rewords the
 * slot's message with its own name or place without calling it again. The
 * handler may log or abort; it must not call builders. */
typedef void (*ot_error_handler)(int code, const char *msg, void *user);
void ot_set_error_handler(ot_error_handler fn, void *user);

/* ------------------------------------------------------------------------ */
/* Dtypes and shapes                                                         */
/* ------------------------------------------------------------------------ */

/* 0 (OT_DTYPE_DEFAULT) asks for a default: the backend's for tensors. */
/* OT_F16 (IEEE binary16) and OT_BF16 (bfloat16) are storage dtypes: ops on
 * them compute in f32 (ref: in double) and round to nearest even when they
 * store (docs/half.md). */
typedef enum ot_dtype {
    OT_DTYPE_DEFAULT = 0, OT_F32 = 1, OT_F64 = 2, OT_I32 = 3, OT_F16 = 4, OT_BF16 = 5
} ot_dtype;

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
                          ("fuse" or "fuse, mine"; spaces around names are
                          ignored; see optree/extend.h),
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
                          tanh(a*b + a/b) does not); 0: the last-level
                          cache this process can count on (the size the
                          machine reports, or OT_L3_BYTES=n, but at most
                          4 MiB per CPU it may run on: a VM reports its
                          host's whole L3); OT_STREAM_NEVER: never
                          (OT_STREAM_BYTES=n, 0 meaning never). Reported:
                          the threshold in force */
    int stochastic_round; /* both backends: 1 makes every store into an
                          f16/bf16 output round stochastically (as neon's
                          backend option did; docs/half.md), the random
                          bits a hash of seed, the backend's count of
                          assignments and the element's index, so the
                          same for any thread count; 0: round to nearest
                          even (OT_STOCHASTIC_ROUND=0|1) */
} ot_backend_opts;

/* Creates a backend: "ref" (node at a time, in double; the test oracle) or
 * "cpu" (the fused backend). The environment variable OT_BACKEND, when set,
 * replaces the name, so one program runs on either backend unchanged. NULL
 * opts means the defaults. Returns NULL with OT_EBACKEND for an unknown or
 * unavailable name, OT_EINVAL for bad options or environment values,
 * OT_EUNSUPPORTED for an ISA this CPU lacks. */
ot_backend *ot_backend_new(const char *name, const ot_backend_opts *opts);
/* Frees a backend; NULL is a no-op. Tensors, programs and models made on
 * it may be freed before or after: while any is left, the backend stays
 * (its memory and threads go with the last of them), and using one to compute
 * (an assignment, ot_eval, a program's compile or run or new placeholder,
 * ot_autodiff_new, a new tensor or model or model layer on be) is
 * OT_EBACKEND; what only reads goes on working: host memory (ot_get),
 * ot_explain, a program's variables, stats and explain. A
 * second ot_backend_free while they hold it is OT_EBACKEND, refused. */
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
/* Copies numel elements of dtype, row-major, from host memory (for
 * OT_F16/OT_BF16: floats, rounded as ot_set rounds). */
ot_tensor *ot_array(ot_backend *be, ot_shape shape, ot_dtype dtype, const void *data);
ot_tensor *ot_zeros_like(const ot_tensor *t);
/* A new contiguous tensor with t's values (t may be any view). */
ot_tensor *ot_copy(const ot_tensor *t);
/* Each of these (and ot_wrap, ot_fill ... ot_set_n, ot_transpose,
 * ot_broadcast_to, ot_tensor_set_name, ot_assign_many, ot_explain_many,
 * ot_node_set_name below; ot_save ... ot_loadz, ot_autodiff_new ...
 * ot_autodiff_grad_host, ot_parse, ot_tensor_set_axes in the headers of
 * optree/) is also a macro over its _at twin, which names the caller's
 * file:line in its errors ("m.c:12: array: ..."); (ot_empty)(...) or a
 * NULL file names none. */
ot_tensor *ot_empty_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line);
ot_tensor *ot_zeros_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line);
ot_tensor *ot_ones_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const char *file, int line);
ot_tensor *ot_full_at(ot_backend *be, ot_shape shape, ot_dtype dtype, double value,
                      const char *file, int line);
ot_tensor *ot_array_at(ot_backend *be, ot_shape shape, ot_dtype dtype, const void *data,
                       const char *file, int line);
ot_tensor *ot_zeros_like_at(const ot_tensor *t, const char *file, int line);
ot_tensor *ot_copy_at(const ot_tensor *t, const char *file, int line);
#define ot_empty(...) ot_empty_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_zeros(...) ot_zeros_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_ones(...) ot_ones_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_full(...) ot_full_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_array(...) ot_array_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_zeros_like(...) ot_zeros_like_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_copy(...) ot_copy_at(__VA_ARGS__, __FILE__, __LINE__)
/* Releases the creator's reference. The tensor itself lives on while a tree
 * uses it; its buffer while any view of it does. NULL is a no-op. */
void ot_tensor_free(ot_tensor *t);

/* A tensor over the caller's memory, without a copy: ptr is the address of
 * element [0, 0, ...], strides in elements (NULL: row-major contiguous; any
 * sign, 0 for a read-only broadcast). ptr must be aligned to the element
 * (4 or 8 bytes; nothing more: the cpu backend's kernels load and store
 * unaligned vectors and stream only to aligned outputs), else OT_EINVAL.
 * free_fn(user, ptr), when not NULL, is called once when the tensor and
 * every view of it are gone; on error it is not called and the memory
 * stays the caller's. Wraps of overlapping memory (one array wrapped twice,
 * a wrap of another tensor's data) alias as views of one tensor do: an
 * assignment reads them as if before writing, and overlapping outputs of
 * ot_assign_many are OT_EALIAS. NULL with OT_ENULL, OT_EDTYPE, OT_EINVAL,
 * OT_ESHAPE (bad shape), OT_EOVERFLOW, OT_ENOMEM. */
ot_tensor *ot_wrap(ot_backend *be, ot_shape shape, ot_dtype dtype, void *ptr,
                   const int64_t *strides, void (*free_fn)(void *user, void *ptr),
                   void *user);
ot_tensor *ot_wrap_at(ot_backend *be, ot_shape shape, ot_dtype dtype, void *ptr,
                      const int64_t *strides, void (*free_fn)(void *user, void *ptr),
                      void *user, const char *file, int line);
#define ot_wrap(...) ot_wrap_at(__VA_ARGS__, __FILE__, __LINE__)

/* Data. Host memory is row-major and contiguous in the tensor's dtype; the
 * tensor may be any view. Float values written into OT_I32 truncate toward
 * zero (NaN gives 0, out-of-range values saturate). An OT_F16 or OT_BF16
 * tensor's host memory is float: ot_get widens exactly, ot_set rounds to
 * nearest even; ot_get_raw and ot_set_raw copy the 16-bit patterns (for
 * other dtypes they are ot_get and ot_set). */
int ot_fill(ot_tensor *t, double value);
int ot_get(const ot_tensor *t, void *host);
int ot_set(ot_tensor *t, const void *host);
int ot_get_raw(const ot_tensor *t, void *host);
int ot_set_raw(ot_tensor *t, const void *host);
/* ot_get / ot_set that know the host buffer's size: nbytes less than
 * numel * the host itemsize (4 for OT_F16/OT_BF16) is OT_EINVAL (naming both sizes) and nothing is copied. */
int ot_get_n(const ot_tensor *t, void *host, size_t nbytes);
int ot_set_n(ot_tensor *t, const void *host, size_t nbytes);
int ot_fill_at(ot_tensor *t, double value, const char *file, int line);
int ot_get_at(const ot_tensor *t, void *host, const char *file, int line);
int ot_set_at(ot_tensor *t, const void *host, const char *file, int line);
int ot_get_raw_at(const ot_tensor *t, void *host, const char *file, int line);
int ot_set_raw_at(ot_tensor *t, const void *host, const char *file, int line);
int ot_get_n_at(const ot_tensor *t, void *host, size_t nbytes, const char *file, int line);
int ot_set_n_at(ot_tensor *t, const void *host, size_t nbytes, const char *file, int line);
#define ot_fill(...) ot_fill_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_get(...) ot_get_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_set(...) ot_set_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_get_raw(...) ot_get_raw_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_set_raw(...) ot_set_raw_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_get_n(...) ot_get_n_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_set_n(...) ot_set_n_at(__VA_ARGS__, __FILE__, __LINE__)
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
ot_tensor *ot_transpose_at(const ot_tensor *t, const int *perm, const char *file, int line);
ot_tensor *ot_broadcast_to_at(const ot_tensor *t, ot_shape shape, const char *file, int line);
#define ot_transpose(...) ot_transpose_at(__VA_ARGS__, __FILE__, __LINE__)
#define ot_broadcast_to(...) ot_broadcast_to_at(__VA_ARGS__, __FILE__, __LINE__)

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
/* The name used when printing trees; NULL when unnamed. set_name copies;
 * OT_EINVAL for more than OT_NAME_MAX bytes or a control character. */
const char *ot_tensor_name(const ot_tensor *t);
int ot_tensor_set_name(ot_tensor *t, const char *name);
int ot_tensor_set_name_at(ot_tensor *t, const char *name, const char *file, int line);
#define ot_tensor_set_name(...) ot_tensor_set_name_at(__VA_ARGS__, __FILE__, __LINE__)

/* ------------------------------------------------------------------------ */
/* Assignment and evaluation                                                 */
/* ------------------------------------------------------------------------ */

typedef struct ot_node ot_node;

/* Backends: a tree runs on the backend of its tensors. A builder whose two
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

/* out[...] = tree, on out's backend. The tree's shape must broadcast to
 * out's; out may be any writable view and may alias the tree's leaves (the
 * result is as if the tree were evaluated before out is written). A float
 * tree cannot be written into an OT_I32 out (OT_EDTYPE) unless cast first.
 * A tree built once and assigned again into the same out reuses the plan
 * of its second assignment without walking the tree (kept on the root node,
 * freed with it). */
int ot_assign_node(ot_tensor *out, ot_node *tree);
/* The errors of its checks carry the file:line of this call (ot_assign_at,
 * below). */
#define ot_assign(out, x) ot_assign_at((out), OT__NODE(x), __FILE__, __LINE__)
/* ot_assign_node with the call's place: the errors of the checks read
 * "file.c:88: assign: ...". The ot_assign macro passes __FILE__, __LINE__;
 * ot_assign_node is this with file NULL. */
int ot_assign_at(ot_tensor *out, ot_node *tree, const char *file, int line);
/* ot_assign whose store into an f16/bf16 out rounds stochastically: up
 * with probability equal to the fraction of the gap to the next value
 * covered (unbiased), the random bits a hash of seed and each element's
 * index in out (row-major), so the same bits for any thread count and a
 * given seed. Other dtypes store as ot_assign does. docs/half.md. */
int ot_assign_sr_at(ot_tensor *out, ot_node *tree, uint64_t seed, const char *file, int line);
#define ot_assign_sr(out, x, seed)                                            \
    ot_assign_sr_at((out), OT__NODE(x), (seed), __FILE__, __LINE__)
/* Several outputs at once: every tree is evaluated before any output is
 * written; shared subtrees are computed once. Outputs must not overlap. */
int ot_assign_many(int n, ot_tensor *const outs[], ot_node *const trees[]);
int ot_assign_many_at(int n, ot_tensor *const outs[], ot_node *const trees[], const char *file,
                      int line);
#define ot_assign_many(...) ot_assign_many_at(__VA_ARGS__, __FILE__, __LINE__)
/* A new tensor of the tree's shape and dtype, on the backend of its first
 * leaf, holding its value. NULL on error. */
ot_tensor *ot_eval(ot_node *tree);
/* ot_eval likewise; the ot_eval macro passes the call's place. */
ot_tensor *ot_eval_at(ot_node *tree, const char *file, int line);
#define ot_eval(tree) ot_eval_at((tree), __FILE__, __LINE__)
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
int ot_explain_many_at(int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f,
                       const char *file, int line);
#define ot_explain_many(...) ot_explain_many_at(__VA_ARGS__, __FILE__, __LINE__)

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
    OT_KIND_COMPOSITE,    /* expands into other ops, tagged with its name */
    OT_KIND_CONV          /* a sliding window: conv, conv_transpose, conv_wgrad,
                             pooling (include/optree/pool.h) */
};

/* Op flags. */
#define OT_FLAG_FLOAT 1u    /* integer operands give an OT_F64 result */
#define OT_FLAG_COMPARE 2u  /* result is 1 or 0 in the operands' dtype */
#define OT_FLAG_INDEX 4u    /* result is OT_I32 (argmax, argmin) */
#define OT_FLAG_NODIFF 8u   /* gradient is zero (not differentiable) */

/* The ops: the ot_op enum (OT_OP_*, OT_OP_COUNT), OT_OP_LIST(X) and the
 * builders of the elementwise ops (ot_tanh(x), ot_add(x, y), ...) are
 * generated from the library's op table, src/core/ops.def. Public op numbers are
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
/* Building trees                                                            */
/* ------------------------------------------------------------------------ */

/* The axis value meaning "every axis" (a reduction to a scalar). */
#define OT_AXIS_ALL (-1000)

/* Op attributes, as the one builder (and bindings) take them. The option
 * macros below take a smaller struct per op family instead, positionally or
 * designated, and convert it to this. Here, with spec_ NULL, axis is taken
 * as given: pass OT_AXIS_ALL for every axis. */
/* The geometry of a sliding window (conv, conv_transpose, conv_wgrad;
 * include/optree/conv.h) over each spatial dim: entries [0, spatial dims)
 * are used, the rest are 0. One struct, so that every windowed op (pooling
 * too) holds, prints, parses and compares its geometry alike. */
typedef struct ot_window {
    int32_t stride[3], dilation[3];
    int32_t pad_lo[3], pad_hi[3];  /* zeros added before and after each dim */
    int32_t outpad[3];             /* conv_transpose: size added at the end */
    int32_t ksize[3];              /* conv_wgrad: the kernel's spatial size;
                                      pooling: the window's */
    int groups;
    bool ceil_mode;                /* pooling: output sizes round up */
    bool exclude_pad;              /* avg pooling: divide by the count of
                                      input elements in the window */
} ot_window;

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
    ot_window win;        /* conv, conv_transpose, conv_wgrad, pooling */
} ot_args;
/* ot_args's members after spec_, in order (see ot_spec_sets). */
#define OT__ARGS_MEMBERS "axis,keepdims,dtype,depth,seed,ddof,lo,hi,perm,shape,start,win"

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
/* long, long long and unsigned operands: a weak i32 where the value fits
 * int32 (a NumPy 2 Python int with an int32 array), else a weak f64
 * (where NumPy 2 would refuse the overflow). */
ot_node *ot_consti64(int64_t value);
static inline ot_node *ot__node_id(ot_node *n) { return n; }
#define OT__NODE(x)                                                           \
    _Generic((x), ot_tensor *: ot_tensor_node, ot_node *: ot__node_id,        \
             float: ot_constf, double: ot_const, int: ot_consti,              \
             long: ot_consti64, long long: ot_consti64, unsigned: ot_consti64)(x)

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
    const char *axes;     /* by name instead: "C,H,W" (see optree/axes.h) */
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

/* An all-zero struct in C and C++ alike: the inline builders below set
 * members one by one, since g++ -Wextra warns about every member that a
 * designated initializer leaves out (and C++ before C++20 has none). */
#ifdef __cplusplus
#define OT__ZERO {}
#else
#define OT__ZERO {0}
#endif
static inline int ot__opt_axis(const char *spec, const char *members, int axis)
{
    return ot_spec_sets(spec, members, "axis") ? axis : OT_AXIS_ALL;
}
/* ot_build_at along the axes named (comma-separated) instead of args->axis,
 * which must be OT_AXIS_ALL (see optree/axes.h). */
ot_node *ot_build_axes_at(ot_op op, ot_node *a, ot_node *b, const ot_args *args,
                          const char *axes, const char *file, int line);
static inline ot_node *ot__build_reduce(ot_op op, ot_node *x, ot_node *y, ot_reduce_opts o,
                                        const char *file, int line)
{
    ot_args a = OT__ZERO;
    a.axis = ot__opt_axis(o.spec_, OT__REDUCE_MEMBERS, o.axis);
    a.keepdims = o.keepdims;
    if (o.axes) return ot_build_axes_at(op, x, y, &a, o.axes, file, line);
    return ot_build_at(op, x, y, &a, file, line);
}
static inline ot_node *ot__build_var(ot_op op, ot_node *x, ot_var_opts o,
                                     const char *file, int line)
{
    ot_args a = OT__ZERO;
    a.axis = ot__opt_axis(o.spec_, OT__VAR_MEMBERS, o.axis);
    a.keepdims = o.keepdims;
    a.ddof = o.ddof;
    if (o.axes) return ot_build_axes_at(op, x, NULL, &a, o.axes, file, line);
    return ot_build_at(op, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_softmax(ot_op op, ot_node *x, ot_softmax_opts o,
                                         const char *file, int line)
{
    ot_args a = OT__ZERO;
    a.axis = ot__opt_axis(o.spec_, "axis,axes", o.axis);
    if (o.axes) return ot_build_axes_at(op, x, NULL, &a, o.axes, file, line);
    return ot_build_at(op, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_cast(ot_node *x, ot_cast_opts o, const char *file, int line)
{
    ot_args a = OT__ZERO;
    a.axis = OT_AXIS_ALL;
    a.dtype = o.dtype;
    return ot_build_at(OT_OP_CAST, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_onehot(ot_node *x, ot_onehot_opts o, const char *file,
                                        int line)
{
    ot_args a = OT__ZERO;
    a.axis = ot__opt_axis(o.spec_, OT__ONEHOT_MEMBERS, o.axis);
    a.dtype = o.dtype;
    a.depth = o.depth;
    return ot_build_at(OT_OP_ONEHOT, x, NULL, &a, file, line);
}
static inline ot_node *ot__build_rand(ot_shape shape, ot_rand_opts o, const char *file,
                                      int line)
{
    ot_args a = OT__ZERO;
    a.axis = OT_AXIS_ALL;
    a.dtype = o.dtype;
    a.seed = o.seed;
    a.shape = shape;
    return ot_build_at(OT_OP_RAND, NULL, NULL, &a, file, line);
}
static inline ot_node *ot__build_transpose(ot_node *x, ot_transpose_opts o, const char *file,
                                           int line)
{
    /* A perm as written is taken literally, so {0, 0} is an error rather
     * than ot_args's all-zero "reverse". */
    ot_args a = OT__ZERO;
    a.spec_ = ot_spec_sets(o.spec_, "perm", "perm") ? ".perm = given" : NULL;
    a.axis = OT_AXIS_ALL;
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
/* minimum(maximum(x, lo), hi); a bound that is an integer in int32's range
 * is an int constant (an i32 x stays i32, as np.clip), else a float one. */
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
 * ot_softmax(x), log p is taken as logsoftmax(x) floored at -65504 (the
 * lowest finite f16, so that a target of 0 where p is 0 adds 0 in every
 * float dtype), so the loss is exact for logits of +-1000 rather than
 * capped at 50 by safelog. */
#define ot_cross_entropy(p, t, ...)                                           \
    OT__REDUCE(OT_OP_CROSS_ENTROPY, OT__NODE(p), OT__NODE(t), __VA_ARGS__)
/* sum(x * x). Options as a reduction's: (axis, keepdims). */
#define ot_squared_l2(x, ...) OT__REDUCE(OT_OP_SQUARED_L2, OT__NODE(x), NULL, __VA_ARGS__)

/* ot_keep(x): x itself (same shape, dtype and values, bit for bit), as a
 * node the cpu backend always stores: it gets a kernel and storage of its
 * own, and whatever reads it reads memory, so a fused region is cut there by
 * hand (ngraph's and Serrano's graphs have no such node; it is the
 * checkpoint of a rematerialisation scheme). Gradients pass through it
 * unchanged; ref evaluates it as the identity; ot_explain shows the extra
 * kernel and temporary, ot_print/ot_pp show keep(x). A builder: NULL on a
 * NULL operand, owned by the current pool. */
#define ot_keep(x) ot_build_at(OT_OP_KEEP, OT__NODE(x), NULL, NULL, __FILE__, __LINE__)

/* Refcounts. ot_retain returns n, so `keep = ot_retain(tree)` reads well.
 * Both refuse a dead node (below) with OT_ESTATE in the error slot naming
 * the call's file:line: ot_retain returns NULL, ot_release does nothing.
 * So does ot_release when no ot_retain of its own is left to balance (a
 * node its pool alone holds, or a tensor freed twice while a tree still
 * reads it): the node lives on with its pool or its parents.
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
/* Concat, split and slicing of expressions                                  */
/* ------------------------------------------------------------------------ */

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
/* Pools                                                                     */
/* ------------------------------------------------------------------------ */

typedef struct ot_pool ot_pool;
/* Pushes a new innermost pool on this thread. NULL (OT_ENOMEM) on failure. */
ot_pool *ot_pool_push(void);
/* Releases every node of p, and of any pool pushed after it, and pops them.
 * OT_ESTATE when p is not on this thread's stack: a handle popped already
 * stays stale, even once a newer push reuses its memory. The macro records the
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
/* Nodes held by the calling thread's default pool (where builders put nodes
 * while no pool is pushed); ot_pool_drain empties it. Thread-local, as the
 * pool stack is. */
size_t ot_pool_default_nodes(void);

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
 * "%1 = (x + x)", and as %1 at its uses: "%1 = (x + x)\n(%1 * %1)";
 * ot_pp also names so a node 64 levels above the last line it began, so
 * that no line nests deeper than ot_parse reads (a tall tree is a line
 * per 64 levels). ot_pp writes every attribute a node holds (rand's and onehot's dtype
 * when not f32) and marks an f32 constant that is the root or sits under
 * a node of another dtype as 0.1f, so that ot_parse reads its text back
 * as the same tree when every leaf has a name. */
int ot_pp(const ot_node *tree, FILE *f);
/* A DOT graph of the tree (shared subtrees once). */
int ot_graphviz(const ot_node *tree, FILE *f);

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

/* ------------------------------------------------------------------------ */
/* Names and metadata on nodes                                               */
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
 *                  lr:0.5); a shared one as "%1 = h1:(x0 + x1)", then %1;
 *                  a name that is no identifier quoted, 'dense/fc 1':(...),
 *                  which ot_parse reads back.
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
 * "x.broadcast_to(3,4)"; a view whose name would pass OT_NAME_MAX is
 * unnamed. Views keep no metadata. */
#define OT_NAME_MAX 256       /* bytes of a node's name, without the NUL */
#define OT_META_KEY_MAX 64    /* bytes of a metadata key */
#define OT_META_MAX 32        /* metadata entries per node */

/* Copies name; NULL or "" removes it. OT_ENULL for a NULL node, OT_EINVAL
 * for a name longer than OT_NAME_MAX or with a control character (as
 * ot_tensor_set_name), OT_ENOMEM. */
int ot_node_set_name(ot_node *n, const char *name);
int ot_node_set_name_at(ot_node *n, const char *name, const char *file, int line);
#define ot_node_set_name(...) ot_node_set_name_at(__VA_ARGS__, __FILE__, __LINE__)
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

/* The rest of the API, by audience (see the list at the top). */
#include "optree/axes.h"
#include "optree/autodiff.h"
#include "optree/norm.h"
#include "optree/program.h"
#include "optree/extend.h"
#include "optree/io.h"
#include "optree/mpi.h"
#include "optree/conv.h"
#include "optree/pool.h"
#include "optree/index.h"
#include "optree/attention.h"
#include "optree/topk.h"

#ifdef __cplusplus
}
#endif
#endif /* OPTREE_H */

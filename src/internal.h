/*
 * internal.h - private structures and helpers shared by the files of src/.
 * Never installed. Non-static internal functions are named ot__*.
 */
#ifndef OT_INTERNAL_H
#define OT_INTERNAL_H

#include "optree.h"

#include <assert.h>
#include <limits.h>
#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static_assert(OT_MAX_DIMS == 8, "shape code assumes 8 dims");

/* Internal invariant checks: on in debug builds only. User input is never
 * checked with this; it gets a status. */
#ifdef OT_DEBUG
#define OT_ASSERT(x) assert(x)
#else
#define OT_ASSERT(x) ((void)0)
#endif

/* ---- allocation (alloc.c) ------------------------------------------------ */

/* Every allocation of the library goes through these (free stays free), so
 * that a test can fail the Nth one: ot__alloc_fail_at(n) arms a countdown on
 * the calling thread (0 disarms it), ot__alloc_count() counts this thread's
 * allocations since then. The jit's mmap asks ot__alloc_should_fail too. */
void *ot__malloc(size_t n);
void *ot__calloc(size_t n, size_t size);
void *ot__realloc(void *p, size_t n);
void *ot__aligned_alloc(size_t align, size_t n);
bool ot__alloc_should_fail(void);
void ot__alloc_fail_at(long n);
long ot__alloc_count(void);
/* Allocations that failed on this thread, injected or real, ever: a result
 * built while this moved may have fallen back from an optimisation, so it
 * is not worth keeping (the plan cache compares it before and after). */
unsigned long ot__alloc_failures(void);

/* ---- nodes --------------------------------------------------------------- */

struct ot_node {
    atomic_long refs;
    uint8_t kind;         /* OT_NODE_LEAF / CONST / OP */
    uint8_t dtype;        /* ot_dtype */
    bool weak;            /* dtype came only from constants */
    int8_t op;            /* ot_op for OT_NODE_OP, else OT_OP_NONE */
    int8_t tag;           /* composite op that this node is the root of */
    int line;
    const char *file;
    ot_backend *be;       /* backend of the first leaf below, or NULL */
    ot_shape shape;
    ot_node *a, *b;       /* operands (retained), NULL when absent */
    ot_node *tag_a, *tag_b; /* a composite's own operands (retained) */
    double value;         /* OT_NODE_CONST */
    ot_args args;         /* attributes in force, spec_ NULL, axis normalised
                             (0..ndim-1 of the operand, or OT_AXIS_ALL) */
    ot_node *next_dead;   /* worklist link while being destroyed */
};

/* Adds a new node (holding one reference, the creator's) to the innermost
 * pool of this thread, which takes that reference over. On allocation
 * failure the node is released and OT_ENOMEM recorded; returns n or NULL. */
ot_node *ot__pool_adopt(ot_node *n);
/* mean(x, axis, keepdims) as var and std expand it (node.c): exact for
 * constant data on every backend; autodiff's var/std rules use it too. */
ot_node *ot__mean_refined(ot_node *x, int axis, const char *file, int line);
/* A zeroed node with refs = 1, kind/op/tag set to "none" values. */
ot_node *ot__node_alloc(void);

/* ---- tensors ------------------------------------------------------------- */

typedef struct ot_buffer {
    atomic_long refs;
    size_t nbytes;
    void *data;           /* 64-byte aligned */
} ot_buffer;

struct ot_tensor {
    ot_node leaf;         /* first member: a tensor is its own leaf node.
                             leaf.refs counts the creator plus every parent
                             node; dtype, shape and be live here. */
    ot_buffer *buf;
    int64_t strides[OT_MAX_DIMS];  /* in elements; may be 0 or negative */
    int64_t offset;                /* in elements, from buf->data */
    char *name;
    bool readonly;                 /* a broadcast view */
};

static inline ot_tensor *ot__leaf_tensor(const ot_node *n)
{
    return (ot_tensor *)n;    /* valid only for kind == OT_NODE_LEAF */
}
/* Called by ot_release when a leaf's refcount reaches zero. */
void ot__tensor_destroy(ot_tensor *t);

/* Memory overlap of two views, after ATen's MemoryOverlap: zero-size views
 * never overlap; same buffer, offset, shape and strides is FULL; disjoint
 * byte ranges, or views no index pair of which meets (interleaved
 * x[0::2], x[1::2]; a bounded exact search), are NONE; anything else is
 * PARTIAL (conservative). */
enum { OT_OVERLAP_NONE = 0, OT_OVERLAP_FULL = 1, OT_OVERLAP_PARTIAL = 2 };
int ot__overlap(const ot_tensor *a, const ot_tensor *b);
/* True when two distinct indices of t address one element (stride 0 on a
 * dim of size > 1, or overlapping strides); *dim gets the culprit dim. */
bool ot__internal_overlap(const ot_tensor *t, int *dim);

/* Element load/store in a dtype. Stores into OT_I32 truncate toward zero,
 * map NaN to 0 and saturate out-of-range values (never undefined). */
static inline double ot__load(const void *p, ot_dtype dt)
{
    switch (dt) {
    case OT_F32: return *(const float *)p;
    case OT_F64: return *(const double *)p;
    default: return *(const int32_t *)p;
    }
}
static inline int32_t ot__to_i32(double v)
{
    if (v != v) return 0;
    if (v >= 2147483647.0) return INT32_MAX;
    if (v <= -2147483648.0) return INT32_MIN;
    return (int32_t)v;
}
static inline void ot__store(void *p, ot_dtype dt, double v)
{
    switch (dt) {
    case OT_F32: *(float *)p = (float)v; break;
    case OT_F64: *(double *)p = v; break;
    default: *(int32_t *)p = ot__to_i32(v); break;
    }
}

/* ---- sizes and shapes ---------------------------------------------------- */

/* Checked size arithmetic: false on overflow. Every size goes through here. */
static inline bool ot__mul_size(size_t *r, size_t a, size_t b)
{
    return !__builtin_mul_overflow(a, b, r);
}
static inline bool ot__add_size(size_t *r, size_t a, size_t b)
{
    return !__builtin_add_overflow(a, b, r);
}
/* Validates a shape for a tensor or node of dtype (or 0 to skip the byte
 * size): ndim in [0, 8], dims >= 0, numel * itemsize fits in PTRDIFF_MAX.
 * On failure records the error for op at file:line and returns the code. */
int ot__shape_check(const ot_shape *s, ot_dtype dtype, const char *op,
                    const char *file, int line);
/* Product of dims (the shape must have passed ot__shape_check). */
int64_t ot__numel(const ot_shape *s);
bool ot__shape_eq(const ot_shape *a, const ot_shape *b);
/* NumPy broadcasting of a and b into *out. On failure returns false and sets
 * *bad_dim to the offending dim of the result (counted from the left). */
bool ot__broadcast(const ot_shape *a, const ot_shape *b, ot_shape *out, int *bad_dim);
/* "(3,4)", "(3,)", "()" into buf, which must hold OT__SHAPE_STRLEN chars. */
#define OT__SHAPE_STRLEN 192
const char *ot__shape_str(const ot_shape *s, char *buf);

/* ---- errors -------------------------------------------------------------- */

/* Records an error for a builder: kept only when the slot is empty (the first
 * error of an expression wins). Message: "file:line: op: <fmt>" (file and op
 * parts omitted when NULL). Calls the handler. Returns code. */
int ot__err(int code, const char *file, int line, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same, but replaces whatever the slot held (for functions that work). */
int ot__err_set(int code, const char *file, int line, const char *op, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* For a function that does work and was handed a NULL tree or tensor:
 * returns the code already in the slot, or records OT_ENULL naming what. */
int ot__err_null(const char *fn, const char *what);

/* ---- backends ------------------------------------------------------------ */

typedef struct ot_backend_vt {
    const char *name;
    int (*init)(ot_backend *be);       /* sets up impl; may be NULL */
    /* Evaluates every tree before writing any output. Called after the
     * common checks of backend.c: no NULLs, every tree broadcasts to its
     * output, dtypes allowed, outputs writable and mutually disjoint. */
    int (*assign_many)(ot_backend *be, int n, ot_tensor *const outs[],
                       ot_node *const trees[]);
    void (*destroy)(ot_backend *be);   /* frees impl; may be NULL */
} ot_backend_vt;

typedef struct ot_stat_counters {
    atomic_uint_fast64_t assigns, nodes, compiles, cache_hits, kernels, bytes_moved, elem_ops;
} ot_stat_counters;

struct ot_backend {
    const ot_backend_vt *vt;
    ot_backend_opts opts;     /* defaults filled in */
    ot_stat_counters stats;
    void *impl;
    _Atomic(struct ot_ad_memo *) ad_memo;  /* autodiff.c: memoised objects */
};
/* Releases the autodiff objects memoised on be (autodiff.c). */
void ot__autodiff_memo_free(ot_backend *be);

extern const ot_backend_vt ot__ref_vt;

/* ---- post-order stacks --------------------------------------------------- */

/* A stack over several roots at once (for ot_assign_many): shared subtrees,
 * also between roots, appear once. roots_out[i] receives the item index of
 * roots[i]. The public ot_stack_new is this with n = 1. */
ot_stack *ot__stack_new_many(int n, const ot_node *const roots[], int roots_out[]);

/* ---- node pointer -> int map (stack.c) ----------------------------------- */

/* What lets a walk over a DAG memoise per node, so heavy sharing costs time
 * linear in distinct nodes: open addressing with linear probing, at most half
 * full. A zeroed map is empty; keys are borrowed, not retained. */
typedef struct ot__ptrmap {
    const ot_node **keys;
    int *vals;
    size_t cap, len;      /* len counts the keys */
} ot__ptrmap;
/* The value of key, or -1 when absent. */
int ot__ptrmap_get(const ot__ptrmap *m, const ot_node *key);
/* Adds key, which must be absent, with val (>= 0, so that get can answer
 * -1 for absent). False when out of memory; the map is then unchanged. */
bool ot__ptrmap_put(ot__ptrmap *m, const ot_node *key, int val);
/* Frees the map's arrays; zero it again before reusing it. */
void ot__ptrmap_free(ot__ptrmap *m);

/* ---- random numbers ------------------------------------------------------ */

/* The uniform [0, 1) draw of element idx of a rand node with attribute seed,
 * on a backend with seed be_seed: Philox-2x32-10 keyed by both seeds. OT_F32
 * draws have 24 random bits and OT_F64 draws 53, so each is exact in its
 * dtype and never rounds up to 1. */
double ot__rand_uniform(uint64_t be_seed, uint64_t seed, uint64_t idx, ot_dtype dt);

/* ---- tile kernels (src/kernels/) ------------------------------------------ */

/* Kernel dtype index: tables are indexed by it, not by ot_dtype. */
enum { OT_KD_F32 = 0, OT_KD_F64 = 1, OT_KD_I32 = 2, OT_KD_COUNT = 3 };
static inline int ot__kd(ot_dtype d) { return d == OT_F32 ? 0 : d == OT_F64 ? 1 : 2; }
static inline ot_dtype ot__kd_dtype(int kd) { return kd == 0 ? OT_F32 : kd == 1 ? OT_F64 : OT_I32; }
/* ot_dtype_size for the three valid dtypes, inline for hot loops. */
static inline size_t ot__esize(int dt) { return dt == OT_F64 ? 8 : 4; }

/* Tile kernels run one op over n elements. Array operands are contiguous and
 * may be unaligned; dst may be the same array as an operand (never a partial
 * overlap). A "scalar" operand is a pointer to one element broadcast over all
 * n. Results are exactly those of the scalar definitions in ref.c rounded to
 * the dtype, except transcendentals (SLEEF u10 or u35) and fma (one rounding). */
typedef void (*ot_k1)(void *dst, const void *a, size_t n);
typedef void (*ot_k2)(void *dst, const void *a, const void *b, size_t n);
typedef void (*ot_k3)(void *dst, const void *a, const void *b, const void *c, size_t n);

/* Operand forms: bit i set means operand i is a scalar. */
enum { OT_FORM_VV = 0, OT_FORM_SV = 1, OT_FORM_VS = 2 };

typedef struct ot_kernels {
    const char *isa;                     /* "scalar", "sse2", "avx2", "avx512" */
    /* unary[acc][op][kd]: acc 0 = u10 (default), 1 = u35; NULL where the op
     * does not exist for that dtype (float-only ops on i32). Only ops of
     * OT_KIND_UNARY have entries. */
    ot_k1 unary[2][OT_OP_COUNT][OT_KD_COUNT];
    /* binary[op][kd][form], form in OT_FORM_VV/SV/VS; OT_KIND_BINARY ops. */
    ot_k2 binary[OT_OP_COUNT][OT_KD_COUNT][3];
    /* fma[kd][form]: dst = a*b + c rounded once; form bits 1/2/4 mark a/b/c
     * as scalars (0..6; 7 unused). f32 and f64 only. */
    ot_k3 fma[2][7];
    /* fnma[kd][form]: dst = c - a*b rounded once; forms as for fma. */
    ot_k3 fnma[2][7];
    /* cast[from][to]: float -> i32 truncates, NaN -> 0, saturates (ot__to_i32). */
    ot_k1 cast[OT_KD_COUNT][OT_KD_COUNT];
    /* Tile reductions, f32 and f64: the sum of n elements accumulated in
     * vector lanes and combined in a fixed order, returned in double; max and
     * min propagate NaN (any NaN gives NaN); n may be 0 (sum 0, max -inf,
     * min +inf). */
    double (*sum[2])(const void *a, size_t n);
    double (*max[2])(const void *a, size_t n);
    double (*min[2])(const void *a, size_t n);
    /* Column accumulation: acc[i] += a[i] for i < n, acc in double. */
    void (*acc_sum[2])(double *acc, const void *a, size_t n);
    /* Transposed gather of 4-byte elements: dst[r*ds + i] = src[i*ss + r]
     * for r < rows (at most 8) and i < n (strides in elements). */
    void (*tgather_b4)(void *dst, int64_t ds, const void *src, int64_t ss, int64_t n, int rows);
    /* The element functions that code generated by src/jit.c calls, one
     * vector per call in the vector calling convention (operands in ymm0/
     * zmm0 and ymm1/zmm1; result in ymm0/zmm0): vfn1[acc][op][kd] and
     * vfn2[op][kd], f32 and f64. Only the AVX2 and AVX-512 tables have
     * them; NULL where an op has none or is emitted inline. */
    const void *vfn1[2][OT_OP_COUNT][2];
    const void *vfn2[OT_OP_COUNT][2];
    int vbytes;                     /* bytes per vector register */
} ot_kernels;

/* The kernel table for an ISA name ("scalar", "sse2", "avx2", "avx512"), or
 * NULL when this CPU cannot run it or it was not built. */
const ot_kernels *ot__kernels_for(const char *isa);
/* The best table this CPU runs, or the one OT_ISA names; NULL and an
 * OT_EUNSUPPORTED error when OT_ISA names an ISA this CPU lacks. */
const ot_kernels *ot__kernels_select(void);

/* ---- cpu plans (compile.c builds them, exec.c runs them) ----------------- */

/* Where a kernel operand lives: a leaf tensor bound at run time, a temporary
 * of the plan's arena, or an output tensor. */
enum { OT_SPACE_LEAF = 0, OT_SPACE_TEMP = 1, OT_SPACE_OUT = 2 };

typedef struct ot_view {
    uint8_t space;                  /* OT_SPACE_* */
    uint8_t dtype;                  /* ot_dtype */
    int32_t index;                  /* leaf slot, temp or output index */
    int64_t strides[OT_MAX_DIMS];   /* elements, over the kernel's dims */
} ot_view;

/* Register-program instructions. Registers are SSA values mapped onto tile
 * buffers; a "scalar" register holds one element for the whole tile. */
enum { OT_I_LOAD, OT_I_PARAM, OT_I_UNARY, OT_I_BINARY, OT_I_FMA, OT_I_CAST };

typedef struct ot_insn {
    uint8_t code;                   /* OT_I_* */
    uint8_t op;                     /* ot_op for UNARY/BINARY; FMA: OT_OP_SUB
                                       for c - a*b, else a*b + c */
    uint8_t kd;                     /* result kernel dtype (OT_KD_*) */
    uint8_t kd_from;                /* CAST: source kernel dtype */
    int16_t dst, a, b, c;           /* buffers; -1 when unused */
    uint8_t scalar;                 /* bits: 1 a, 2 b, 4 c, 8 dst scalar */
    int32_t arg;                    /* LOAD: load index; PARAM: param index */
} ot_insn;

enum { OT_KER_EW, OT_KER_REDUCE, OT_KER_DOT, OT_KER_RAND, OT_KER_ONEHOT };

/* A run-time scale: mul * param[param], or mul alone when param < 0. */
typedef struct ot_scale {
    int param;
    double mul;
} ot_scale;

#define OT_MAX_XSTORES 7            /* further outputs of one elementwise kernel */

/* A further output of a multi-output elementwise kernel (ot_assign_many of
 * trees over one space): its own view, buffer and store mode. */
typedef struct ot_xstore {
    ot_view view;
    int result;                     /* buffer holding it, written once */
    bool scalar;                    /* one value per tile */
    bool direct;                    /* its insn writes the output in place */
} ot_xstore;

/* Generated code for a kernel's register program (src/jit.c). fn(in, out,
 * nbytes) runs the body over nbytes / kt->vbytes vectors: in[v] points at
 * value v of the prelude (a vector load at byte offset 0, else one element
 * that is broadcast), out[q] is where output q goes (0: the result, 1 + x:
 * further output x) when out_vector[q]. */
#define OT_JIT_MAX_INSN 128
typedef struct ot_jit {
    void (*fn)(char *const *in, char *const *out, size_t nbytes);
    /* The same with streaming (non-temporal) stores, fenced before it
     * returns; every vector output must be aligned to the vector. NULL
     * where the kernel's output is below the backend's stream_bytes. */
    void (*fn_stream)(char *const *in, char *const *out, size_t nbytes);
    /* For a tail of nbytes < kt->vbytes, one vector over zero-padded
     * inputs: the lanes past nbytes are zeroed before each call, as the
     * tile kernels pad every op's tail (SLEEF's sin and cos reduce their
     * argument one way for the whole vector, so a lane's result hangs on
     * the others). fn itself where the body calls nothing. */
    void (*fn_tail)(char *const *in, char *const *out, size_t nbytes);
    uint8_t *code;                  /* the machine code until installed */
    size_t code_len;
    size_t stream_at;               /* fn_stream's offset in code, or 0 */
    size_t tail_at;                 /* fn_tail's offset in code, or 0 */
    const ot_kernels *kt;
    int ninsn, nout, kd;            /* kd: the body's kernel dtype */
    int16_t (*arg)[3];              /* per insn: the values operands a, b, c read */
    bool *body;                     /* per insn: run by the code (else prelude) */
    int16_t out_val[1 + OT_MAX_XSTORES];
    bool out_vector[1 + OT_MAX_XSTORES];
} ot_jit;

typedef struct ot_kernel {
    int kind;                       /* OT_KER_* */
    int ndim;                       /* the coalesced iteration space */
    int64_t dims[OT_MAX_DIMS];
    int nload;
    ot_view *loads;
    int ninsn;
    ot_insn *insns;
    int nbuf;                       /* tile buffers the program needs */
    int result;                     /* buffer holding what is stored/reduced */
    bool result_scalar;             /* one value per tile */
    uint8_t result_kd;              /* its kernel dtype */
    bool direct_store;              /* the last insn writes the output in place */
    ot_view store;                  /* EW/REDUCE: where results go; reduced
                                       dims have stride 0 */
    int nxstore;                    /* EW: further outputs, same space */
    ot_xstore *xstores;
    int red_op;                     /* REDUCE: OT_OP_SUM/MAX/MIN/MEAN/ARG* */
    int red_axis;                   /* REDUCE: iteration dim, or -1 for all */
    int64_t red_count;              /* REDUCE: elements per result (mean) */
    bool col_blocked;               /* EW: walk column blocks (transposed
                                       inputs stay in cache) */
    /* DOT (src/blas.c): per batch index, C[m,n] = alpha*A[m,k] B[k,n] +
     * beta*C, with loads[0] = A, loads[1] = B and store = C as views whose
     * strides are [0] rows, [1] cols, [2] batch (0: shared by every batch);
     * 1-D operands get a unit dim. C's column stride is 1. */
    int64_t m, n, k, batch;
    ot_scale alpha, beta;
    /* RAND: seed; ONEHOT: depth and the new axis; the op's result shape. */
    uint64_t seed;
    int64_t depth;
    int axis;
    ot_shape shape;
    char *desc;                     /* for ot_explain: the nodes it fuses */
    ot_jit *jit;                    /* EW: generated code, or NULL */
} ot_kernel;

/* jit.c: code for k's program, or NULL where k has ops it does not cover,
 * the table has no vector functions (only AVX2's and AVX-512's have), k
 * has a single op and writes less than stream_bytes, or the platform is
 * not x86-64 Linux. From stream_bytes of output on (0: never) fn_stream
 * is built too. acc: 1 for OT_ULP35. fn, fn_stream and fn_tail are set by
 * ot__jit_install, which puts the code of n kernels (NULL entries
 * skipped) into one executable mapping; false (nothing installed) when
 * the mapping fails. */
typedef struct ot_jit_map {
    void *base;
    size_t bytes;
} ot_jit_map;
ot_jit *ot__jit_build(const ot_kernel *k, const ot_kernels *kt, int acc, size_t stream_bytes);
bool ot__jit_install(ot_jit *const *jits, int n, ot_jit_map *map);
void ot__jit_unmap(ot_jit_map *map);
void ot__jit_free(ot_jit *j);

typedef struct ot_segment {
    int first, count;               /* kernels [first, first + count) */
    int64_t rows, row_block;
    int block_temp;                 /* a temp holding one block of rows (the
                                       dot's result, reused by every block,
                                       so it stays in cache), or -1 */
} ot_segment;

typedef struct ot_plan {
    atomic_int refs;                /* the cache's reference plus runs' */
    _Atomic(char *) arena;          /* temporaries' memory, kept between runs
                                       (a concurrent run allocates its own) */
    int nkernels;
    ot_kernel *kernels;
    int ntemps;
    size_t *temp_offset;            /* bytes into the arena, 64-aligned */
    size_t arena_bytes;
    int nleaves, nparams, nout;
    uint64_t bytes_read, bytes_written;  /* per run, for stats/explain */
    uint64_t nodes;                 /* distinct op nodes a run evaluates */
    uint64_t elem_ops;              /* per run: op insns times the elements
                                       they compute, 2*M*N*K per GEMM */
    int64_t row_block;              /* > 0: every kernel walks the same rows
                                       (dim 0), so all kernels run for a block
                                       of this many rows before the next */
    int64_t rows;                   /* the rows then (a kernel coalesced to
                                       one dim walks a multiple of them) */
    bool row_serial;                /* blocks in order, kernels threaded (a
                                       dot's rows and their epilogues) */
    ot_jit_map jit;                 /* the kernels' generated code */
    int nseg;                       /* without row_block: runs of kernels, a
                                       dot and its epilogue, that run per
                                       block of the dot's rows, in order */
    ot_segment *segs;
} ot_plan;

/* What a run binds: leaf base pointers (element 0 of each leaf view),
 * constant values, output tensors. */
typedef struct ot_binding {
    char **leaf;
    const double *param;
    ot_tensor *const *outs;
} ot_binding;

/* compile.c: the plan for n trees into n outputs (NULL outputs: fresh
 * contiguous tensors, as for ot_eval/ot_explain), through the backend's plan
 * cache. Fills *bind (arrays owned by *walk, handed back with ot__walk_done). */
typedef struct ot_walk ot_walk;
int ot__plan_get(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                 ot_plan **plan, ot_walk **walk, ot_binding *bind);
/* Hands a walk back: kept for the backend's next call, or freed. */
void ot__walk_done(ot_backend *be, ot_walk *w);
void ot__walk_free(ot_walk *w);
/* Drops a reference; the last one frees the plan. */
void ot__plan_release(ot_plan *p);
int ot__plan_explain(const ot_plan *p, FILE *f);
/* blas.c: runs a DOT kernel (k->m may be a row block's) from the bases of
 * its operands into dst, packing operands BLAS cannot read in place into
 * scratch, of the size ot__dot_scratch gives for the whole kernel (false:
 * the size overflows). A run allocates nothing once it writes. */
bool ot__dot_scratch(const ot_kernel *k, size_t *bytes);
void ot__run_dot(ot_backend *be, const ot_kernel *k, char *const base[2], char *dst,
                 const double *param, char *scratch);
/* exec.c */
int ot__plan_run(ot_backend *be, ot_plan *p, const ot_binding *bind);

/* The cpu backend's private state (be->impl). */
typedef struct ot_plan_cache ot_plan_cache;
typedef struct ot_threads ot_threads;
typedef struct ot_cpu {
    const ot_kernels *k;
    ot_plan_cache *cache;           /* compile.c */
    ot_threads *threads;            /* exec.c */
    _Atomic(ot_walk *) spare;       /* a finished walk whose arrays the next
                                       call reuses (saves its allocations) */
    bool jit;                       /* generate code for kernels (OT_JIT=0: no) */
    size_t stream_bytes;            /* outputs this large are written with
                                       streaming stores (exec.c) */
} ot_cpu;
ot_plan_cache *ot__plan_cache_new(int capacity);
void ot__plan_cache_free(ot_plan_cache *c);
extern const ot_backend_vt ot__cpu_vt;

/* ---- small shared helpers ------------------------------------------------ */

/* memset(p, 0, n) through a size the compiler cannot see: GCC inlines a
 * constant-size clear of a few hundred bytes as rep stos, whose start-up
 * cost was a fifth of W8's time (nodes, build protos, run contexts); the C
 * library's memset uses vector stores. */
static const volatile size_t ot__opaque_zero = 0;
static inline void ot__clear(void *p, size_t n) { memset(p, 0, n + ot__opaque_zero); }

/* Shortest text that reads back as v (Python's repr: 1.0, 0.1, inf, nan). */
void ot__fmt_double(char *buf, size_t n, double v);

#endif /* OT_INTERNAL_H */

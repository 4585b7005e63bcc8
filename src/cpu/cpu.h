/*
 * cpu.h - the cpu backend's private structures: the tile-kernel tables
 * (src/cpu/kernels/), the plans that compile.c builds and exec.c runs, the
 * generated code of jit.c, and the backend's state. Included only by the
 * files of the cpu backend (after SQLite's vdbeInt.h: one subsystem's private
 * header), so the rest of src/ does not rebuild when a plan changes shape.
 * Never installed.
 */
#ifndef OT_CPU_H
#define OT_CPU_H

#include "internal.h"
#include "isa.h"

/* ---- f16/bf16 by conversion (half_assign.c) ----------------------------------- */

/* The backend's f32 assignment, which half_assign runs the converted trees by. */
typedef int (*ot__half_eval)(ot_backend *be, int n, ot_tensor *const outs[],
                             ot_node *const trees[]);
/* Whether an output (outs may be NULL) or a node of the trees is f16/bf16;
 * false at once while the process has made none. */
bool ot__half_involved(int n, ot_tensor *const outs[], ot_node *const trees[]);
/* Whether ot__half_assign would run tree into out as one kernel of 16-bit
 * code (half_assign.c's run_native; explain says so). */
bool ot__half_native(ot_backend *be, ot__half_eval eval, ot_tensor *out, ot_node *tree);
int ot__half_assign(ot_backend *be, ot__half_eval eval, int n, ot_tensor *const outs[],
                    ot_node *const trees[]);
/* explain called on the f32 trees and outputs ot__half_assign would assign. */
typedef int (*ot__half_explain_fn)(ot_backend *be, int n, ot_tensor *const outs[],
                                   ot_node *const trees[], FILE *f);
int ot__half_explain(ot_backend *be, ot__half_eval eval, ot__half_explain_fn explain, int n,
                     ot_tensor *const outs[], ot_node *const trees[], FILE *f);

/* Program steps and ot_explain of trees that involve f16/bf16 (half_step.c):
 * the step keeps its trees and runs them by ot__half_assign. */
int ot__half_step_prepare(ot_backend *be, ot__half_eval eval, ot__half_explain_fn explain, int n,
                          ot_tensor *const outs[], ot_node *const trees[], ot__prepared *s);
bool ot__half_step_is(const ot__prepared *s);
int ot__half_step_run(const ot__prepared *s);
int ot__half_step_explain(const ot__prepared *s, FILE *f);
void ot__half_step_release(ot__prepared *s);
/* ot_explain of such trees: the route in words, then explain of the f32 trees. */
int ot__half_explain_route(ot_backend *be, ot__half_eval eval, ot__half_explain_fn explain,
                           int n, ot_tensor *const outs[], ot_node *const trees[], FILE *f);

/* ---- tile kernels (src/cpu/kernels/) ------------------------------------------ */

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
    ot_isa isa;                          /* the ISA it was built for (isa.h) */
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
     * for r < rows (at most tgather_rows, a power of two no larger than
     * exec.c's TG_MAX_ROWS: 16 with AVX-512, else 8) and
     * i < n (strides in elements). */
    void (*tgather_b4)(void *dst, int64_t ds, const void *src, int64_t ss, int64_t n, int rows);
    int tgather_rows;
    /* The element functions that code generated by src/cpu/jit/jit.c calls, one
     * vector per call in the vector calling convention (operands in ymm0/
     * zmm0 and ymm1/zmm1; result in ymm0/zmm0): vfn1[acc][op][kd] and
     * vfn2[op][kd], f32 and f64. Only the AVX2 and AVX-512 tables have
     * them; NULL where an op has none or is emitted inline. */
    const void *vfn1[2][OT_OP_COUNT][2];
    const void *vfn2[OT_OP_COUNT][2];
    /* vfn1's SLEEF functions are SLEEF 3.5's, whose f32 exp (and sig's),
     * log and tanh at both accuracies jit.c emits inline, step for step,
     * instead of calling them. */
    bool inline_sleef;
    int vbytes;                     /* bytes per vector register */
    /* A registered op (ops.h's ot_custom) over n elements of kernel dtype
     * kd (f32 or f64; it has that dtype's scalar function): its vector
     * function for vbytes where it has one, else its scalar function. Form
     * bits 1 and 2 mark a and b as scalars; b is NULL for a unary op. */
    void (*user)(const struct ot_custom *u, int kd, void *dst, const void *a, const void *b,
                 int form, size_t n);
} ot_kernels;

/* What each ISA is (isa.h's OT__ISAS) with what this build and CPU make
 * of it: ot__isas[isa], the one descriptor table (dispatch.c). */
typedef struct ot_isa_desc {
    const char *name;               /* ot_backend_opts.isa's spelling */
    const char *needs;              /* what a CPU must have, for messages */
    const char *arch;               /* the architecture whose builds have it */
    bool (*cpu_runs)(void);         /* whether this CPU runs it */
    const ot_kernels *kernels;      /* its tile kernels; NULL: not in this build */
    bool fma;                       /* the kernels fuse a*b + c (OT_I_FMA) */
    int vbytes;                     /* bytes per vector register */
    bool jit;                       /* code is generated for it (x86-64 Linux) */
    int nregs;                      /* vector registers */
} ot_isa_desc;
extern const ot_isa_desc ot__isas[OT_ISA_COUNT];
/* isa's name, for messages. */
static inline const char *ot__isa_name(int isa) { return ot__isas[isa].name; }

/* The ISA a name ("scalar", "sse2", "avx2", "avx512", "neon") is, or -1:
 * the one place inside the cpu backend where an ISA name is compared. */
int ot__isa_parse(const char *name);
/* The kernel table of isa, or NULL when isa is not one (-1), this CPU
 * cannot run it or it was not built. */
const ot_kernels *ot__kernels_for(int isa);
/* The table of isa, or the best this CPU runs when isa is -1; NULL and an
 * OT_EUNSUPPORTED error naming the setting (isa_from: "isa" or "OT_ISA")
 * when this CPU or build lacks it. */
const ot_kernels *ot__kernels_select(int isa, const char *isa_from);

/* ---- cpu plans (compile.c builds them, exec.c runs them) ----------------- */

/* Where a kernel operand lives: a leaf tensor bound at run time, a temporary
 * of the plan's arena, or an output tensor. */
enum { OT_SPACE_LEAF = 0, OT_SPACE_TEMP = 1, OT_SPACE_OUT = 2 };

typedef struct ot_view {
    uint8_t space;                  /* OT_SPACE_* */
    uint8_t dtype;                  /* ot_dtype */
    int32_t index;                  /* leaf slot, temp or output index */
    int64_t strides[OT_MAX_DIMS];   /* elements, over the kernel's dims */
    int64_t offset;                 /* elements from the base: a slice of a
                                       stored value, a part of a concat */
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
    int32_t arg;                    /* LOAD: load index; PARAM: param index;
                                       UNARY/BINARY of custom1/custom2: the
                                       registered op's index (ot__custom) */
} ot_insn;

enum { OT_KER_EW, OT_KER_REDUCE, OT_KER_DOT, OT_KER_RAND, OT_KER_ONEHOT, OT_KER_STRUCT,
       OT_KER_CONV, OT_KER_POOL, OT_KER_INDEX, OT_KER_ATTN };

/* A run-time scale: mul * param[param], or mul alone when param < 0. */
typedef struct ot_scale {
    int param;
    double mul;
} ot_scale;

#define OT_MAX_XSTORES 7            /* further outputs of one elementwise kernel */
#define OT_MAX_PREFETCH 4           /* loads one kernel prefetches ahead */

/* A further output of a multi-output elementwise kernel (ot_assign_many of
 * trees over one space): its own view, buffer and store mode. */
typedef struct ot_xstore {
    ot_view view;
    int result;                     /* buffer holding it, written once */
    bool scalar;                    /* one value per tile */
    bool direct;                    /* its insn writes the output in place */
} ot_xstore;

/* Generated code for a kernel's register program (src/cpu/jit/jit.c). fn(in, out,
 * nbytes) runs the body over nbytes / kt->vbytes vectors: in[v] points at
 * value v of the prelude (a vector load at byte offset 0, else one element
 * that is broadcast), out[q] is where output q goes (0: the result, 1 + x:
 * further output x) when out_vector[q]. */
#define OT_JIT_MAX_INSN 128
typedef void ot_jit_fn(char *const *in, char *const *out, size_t nbytes);
typedef void ot_jit_rows_fn(char **in, char **out, size_t nbytes, const int64_t *rs);
typedef struct ot_jit {
    ot_jit_fn *fn;
    /* A REDUCE kernel's code instead (sum, mean, max or min over the
     * innermost dim or everything): runs the body over nbytes of one row,
     * any length, its vector loads and further outputs in place, and folds
     * the result into *acc tile by tile as exec's interpreter folds each
     * tile's kt->sum, max or min (tile_bytes: the tile, at most K_BLOCK
     * elements): sums bitwise the same but for which NaN; max and min give
     * the extreme and return nonzero where a NaN may have been met (or
     * +inf and -inf both), exec then running the interpreter for the first
     * NaN (or the first zero, where the extreme is zero). Where nbytes ends
     * within a vector, in[ninsn + v] and out[nout + q] are zero-padded
     * vectors of the last elements of vector input v and output q, which
     * the code reads and writes instead. */
    int (*red)(char *const *in, char *const *out, size_t nbytes, size_t tile_bytes, double *acc);
    /* A sum's (or mean's) over rows of several: red once per row of rs[0],
     * folding row r into acc[r], in[v] and out[q] advanced by rs[1 + v] and
     * rs[1 + ninsn + q] bytes after each row (both arrays are rewritten);
     * nbytes a whole number of vectors. NULL where not built. */
    int (*red_rows)(char **in, char **out, size_t nbytes, size_t tile_bytes, double *acc,
                    const int64_t *rs);
    bool reduce;                    /* red, not fn, fn_stream or fn_tail */
    /* The same with streaming (non-temporal) stores, not fenced: the
     * caller issues an sfence after its last call, before anything may read
     * the output; every vector output must be aligned to the vector. NULL
     * where the kernel's output is below the backend's stream_bytes or the
     * kernel is bound by its arithmetic, not by memory (jit.c). */
    ot_jit_fn *fn_stream;
    /* For a tail of nbytes < kt->vbytes, one vector over zero-padded
     * inputs: the lanes past nbytes are zeroed before each call, as the
     * tile kernels pad every op's tail (SLEEF's sin and cos reduce their
     * argument one way for the whole vector, so a lane's result hangs on
     * the others). fn itself where the body calls nothing. */
    void (*fn_tail)(char *const *in, char *const *out, size_t nbytes);
    /* The code for a block of rows (exec_tblock.c's transposed blocks of a
     * column-blocked kernel, exec_rows.c's runs of whole rows): fn's body
     * over nbytes of each of rs[0] rows, each row's broadcasts and pre
     * ops taken again, in[v] and out[q] advanced by rs[1 + v] and
     * rs[1 + ninsn + q] bytes after each row (both arrays are rewritten);
     * nbytes and rs[0] > 0. fn_rows_stream streams as fn_stream does.
     * NULL where not built. */
    ot_jit_rows_fn *fn_rows, *fn_rows_stream;
    uint8_t *code;                  /* the machine code until installed */
    size_t code_len;
    size_t stream_at;               /* fn_stream's offset in code, or 0 */
    size_t tail_at;                 /* fn_tail's offset in code, or 0 */
    size_t rows_at, rows_stream_at; /* fn_rows's and fn_rows_stream's, or 0 */
    size_t red_rows_at;             /* red_rows', or 0 */
    const ot_kernels *kt;
    int acc;                        /* kt's accuracy slot (vfn1[acc]) */
    bool calls_log_tanh;            /* a reduction whose inline log or tanh did not
                                       fit beside its accumulators: it calls them */
    int ninsn, nout, kd;            /* kd: the body's kernel dtype */
    int16_t (*arg)[3];              /* per insn: the values operands a, b, c read */
    bool *body;                     /* per insn: run by the code's loop */
    /* per insn: a scalar op the code computes once per call, before its
     * loop, on broadcast operands (jit.c's choose_pre); exec's prelude
     * leaves it, and reads no value of it, alone */
    bool *pre;
    int16_t out_val[1 + OT_MAX_XSTORES];
    bool out_vector[1 + OT_MAX_XSTORES];
    /* The kernel's prefetches (ot_kernel's pf_*): vector load pf_val[i]
     * read at pf_bytes[i] past each vector's address, into L2. */
    int npf;
    int16_t pf_val[OT_MAX_PREFETCH];
    int32_t pf_bytes[OT_MAX_PREFETCH];
} ot_jit;

/* Whether jt's code computes value i (in its loop or before it), so that
 * exec passes nothing for it. */
static inline bool ot__jit_computes(const ot_jit *jt, int i) { return jt->body[i] || jt->pre[i]; }

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
    int64_t run_tile;               /* elements per tile (exec.c), set by
                                       ot__plan_run_prepare */
    bool run_rows;                  /* generated code reading in place: a
                                       row's tiles run as one call (exec.c's
                                       spans_tiles), set there too */
    bool row_runs;                  /* ... and runs of whole rows as one call
                                       (exec_rows.c), set there too */
    bool red_runs;                  /* a row reduction's runs of rows as one call
                                       (exec_reduce.c), set there too */
    int64_t run_cost;               /* one element's work in adds (exec.c's
                                       kernel_cost), set there too */
    ot_view store;                  /* EW/REDUCE: where results go; reduced
                                       dims have stride 0 */
    int nxstore;                    /* EW: further outputs, same space */
    ot_xstore *xstores;
    int red_op;                     /* REDUCE: OT_OP_SUM/MAX/MIN/MEAN/ARG* */
    int red_axis;                   /* REDUCE: iteration dim, or -1 for all */
    int64_t red_count;              /* REDUCE: elements per result (mean) */
    int red_entry;                  /* REDUCE: its node's walk entry, which
                                       an overflow's message names */
    bool col_blocked;               /* EW: walk column blocks (transposed
                                       inputs stay in cache) */
    /* EW, REDUCE in a row-blocked plan (plan_stream.c's
     * ot__sched_prefetches): loads pf_load[i] whose rows of a later block,
     * pf_bytes[i] past what the code reads, its generated code prefetches. */
    int npf;
    int16_t pf_load[OT_MAX_PREFETCH];
    int32_t pf_bytes[OT_MAX_PREFETCH];
    /* DOT (src/cpu/blas.c): per batch index, C[m,n] = alpha*A[m,k] B[k,n] +
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
    /* STRUCT (plan_struct.c): the structured registered op whose kernel
     * runs (axis: its args.axis) over the contiguous loads, of shapes
     * load_shapes (owned), into the contiguous store of shape `shape`. */
    const struct ot_custom *custom;
    ot_shape *load_shapes;
    /* CONV (exec_conv.c): the op and its loop (internal.h's X, S, W); loads
     * and store have 5-D strides (batch, channels, 3 spatial dims). */
    int conv_op;
    ot__conv_geom conv;
    /* POOL (exec_pool.c): its loop; views as CONV's. */
    ot__pool_geom pool;
    /* INDEX (exec_index.c): its loop; each view has its operand's (the
     * store the node's) shape and strides. A scatter_add with beta.mul != 0
     * updates its store in place by alpha times the source's slices
     * (plan_fuse.c's t + c*scatter_add(...) written over t): it reads and
     * writes only the indexed rows. */
    ot__index_geom index;
    /* ATTN (exec_attn.c): its loop; loads a and the pack, of shapes
     * load_shapes (owned), the store of shape `shape` (also ndim, dims). */
    ot__attn_geom attn;
    char *desc;                     /* for ot_explain: the nodes it fuses */
    ot_jit *jit;                    /* EW, REDUCE: generated code, or NULL (a
                                       column sum's is its body's elementwise
                                       code: jit->reduce false) */
} ot_kernel;

/* jit.c: code for k's program, or NULL where k has ops it does not cover,
 * the table has no vector functions (only AVX2's and AVX-512's have), k
 * has a single op and does not stream, k reduces what ot_jit's red does
 * not (columns, arg*, i32, strided inputs), or the platform is not x86-64
 * Linux. With stream, fn_stream is built too (never for a reduction). acc:
 * 1 for OT_ULP35. fn, fn_stream and fn_tail (a reduction's red) are set by
 * ot__jit_install, which puts the code of n kernels (NULL entries skipped)
 * into one executable mapping; false (nothing installed) when the mapping
 * fails. stream is the scheduler's decision (ot__sched_streams). */
typedef struct ot_jit_map {
    void *base;
    size_t bytes;
} ot_jit_map;
/* Whether code is generated for kt's ISA on this platform at all. */
bool ot__jit_available(const ot_kernels *kt);
ot_jit *ot__jit_build(const ot_kernel *k, const ot_kernels *kt, int acc, bool stream);
/* An elementwise kernel's code over 16-bit memory (jit/jit_half.c): fn and
 * fn_stream with each vector load v reading load_dt[v] (OT_F16 or OT_BF16)
 * and the one output written as out_dt, rounded to nearest even; nbytes
 * counts 2 bytes an element, a multiple of the vector's lanes; no fn_tail
 * or fn_rows. f32 loads and an f32 output may join them (addressed at
 * twice the offset). NULL where the kernel or the table does not suit. */
ot_jit *ot__jit_build_half(const ot_kernel *k, const ot_kernels *kt, int acc,
                           const uint8_t *load_dt, int out_dt);
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

#define OT_RUN_REGIONS 9
/* 16-bit code of a plan (half_assign.c): the code for one signature, the
 * dtype each vector load reads and the output's. */
enum { OT_HALF_CODES = 4 };
typedef struct ot_half_code {
    ot_jit *jit;
    ot_jit_map map;
    uint8_t load_dt[OT_JIT_MAX_INSN];
    uint8_t out_dt;
} ot_half_code;
void ot__half_code_free(ot_half_code *c);
typedef struct ot_plan {
    atomic_int refs;                /* the cache's reference plus runs' */
    _Atomic(char *) arena;          /* temporaries' memory, kept between runs
                                       (a concurrent run allocates its own) */
    int nkernels;
    ot_kernel *kernels;
    int ntemps;
    size_t *temp_offset;            /* bytes into the arena (or, for a
                                       temp_local one, into each thread's
                                       block memory), 64-aligned */
    size_t arena_bytes;
    uint8_t *temp_local;            /* per temp, 1: it holds the row block
                                       being run only, in the running
                                       thread's R_LOCAL region; NULL: none */
    size_t local_bytes;             /* that region's bytes */
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
    bool prefetch;                  /* run per row block, a kernel would
                                       prefetch (ot__sched_prefetching) */
    ot_jit_map jit;                 /* the kernels' generated code */
    int nseg;                       /* without row_block: runs of kernels, a
                                       dot and its epilogue, that run per
                                       block of the dot's rows, in order */
    ot_segment *segs;
    /* What a run reserves besides temporaries (exec.c's regions), laid out
     * once by ot__plan_run_prepare; run_ok false when a size overflows. */
    size_t run_full, run_worker, run_off[OT_RUN_REGIONS];
    bool run_ok;
    bool leaf_indices;              /* an INDEX kernel reads its indices from a leaf:
                                       ot__plan_check_indices has work */
    bool direct;                    /* one call of its code (ot__plan_direct),
                                       set by ot__plan_run_prepare */
    int acc;                        /* 0: OT_ULP10, 1: OT_ULP35 */
    /* The one kernel's 16-bit code (half_assign.c's run_native), one per
     * signature of 16-bit dtypes, built on first use and set once each. */
    _Atomic(struct ot_half_code *) half[OT_HALF_CODES];
    uint64_t compile_ns;            /* the walk and compile that made it */
    int compile_nodes;              /* the entries that walk had */
} ot_plan;

/* Whether temp t of p holds one row block only (temp_local). */
static inline bool ot__temp_local(const ot_plan *p, int t)
{
    return p->temp_local && p->temp_local[t];
}

/* 0 when kernel table kt (at accuracy acc: 0 = u10, 1 = u35) has an entry
 * for every instruction of plan p, else OT_EUNSUPPORTED naming the op, dtype
 * and ISA, so that the executor never calls NULL (kernels/dispatch.c). */
int ot__kernels_check(const ot_plan *p, const ot_kernels *kt, int acc);
/* The registered op (ops.h) that an instruction of custom1 or custom2
 * runs, or NULL for any other instruction (kernels/dispatch.c). */
const struct ot_custom *ot__custom_insn(const ot_insn *in);

/* What a run binds: leaf base pointers (element 0 of each leaf view),
 * constant values, output tensors. */
typedef struct ot_binding {
    char **leaf;
    const double *param;
    ot_tensor *const *outs;
    bool borrowed;                  /* the plan is lent, not referenced: the
                                       caller does not release it */
} ot_binding;

/* compile.c: the plan for n trees into n outputs (NULL outputs: fresh
 * contiguous tensors, as for ot_eval/ot_explain), through the backend's plan
 * cache. Fills *bind (arrays owned by *walk, handed back with ot__walk_done,
 * or by the root's memo: *walk is then NULL and the plan lent, not
 * referenced, as bind->borrowed says). */
typedef struct ot_walk ot_walk;
int ot__plan_get(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                 ot_plan **plan, ot_walk **walk, ot_binding *bind);
/* Hands a walk back: kept for the backend's next call, or freed. */
void ot__walk_done(ot_backend *be, ot_walk *w);
void ot__walk_free(ot_walk *w);
/* Drops a reference; the last one frees the plan (plan_key.c). */
void ot__plan_release(ot_plan *p);
int ot__plan_explain(const ot_plan *p, FILE *f);
/* blas.c: runs a DOT kernel (k->m may be a row block's) from the bases of
 * its operands into dst, packing operands BLAS cannot read in place into
 * scratch, of the size ot__dot_scratch gives for the whole kernel (false:
 * the size overflows). A run allocates nothing once it writes. */
bool ot__dot_scratch(const ot_kernel *k, size_t *bytes);
void ot__run_dot(const ot_kernel *k, char *const base[2], char *dst,
                 const double *param, char *scratch);
/* plan_struct.c: runs a STRUCT kernel from the bases of its loads into dst. */
void ot__run_struct(const ot_kernel *k, char *const *base, char *dst);
/* exec_conv.c: runs a CONV kernel from its operands' bases into dst, with
 * scratch of ot__conv_scratch's size (false: it overflows). */
bool ot__conv_scratch(const ot_kernel *k, size_t *bytes);
void ot__run_conv(const ot_kernel *k, char *const base[2], char *dst, char *scratch);
/* A block of a CONV kernel's result that is complete: batch n, channels
 * [c0, c0 + nc), positions [p0, p0 + np) of each channel. */
typedef struct ot__conv_block {
    int64_t n, c0, nc, p0, np;
} ot__conv_block;
/* The epilogue a CONV kernel calls on each block as soon as it wrote it
 * (while it is in cache): every algorithm calls it once per block, the
 * blocks covering the result once. */
typedef struct ot__conv_epi {
    void (*fn)(void *ctx, const ot__conv_block *b);
    void *ctx;
} ot__conv_epi;
#define OT_CONV_EPI_LOADS 16   /* the most loads an epilogue kernel has */
/* ot__run_conv, calling epi on each block of the result (conv and
 * conv_transpose; a conv_wgrad's sum is complete only at the end). */
void ot__run_conv_epi(const ot_kernel *k, char *const base[2], char *dst, char *scratch,
                      const ot__conv_epi *epi);
/* Whether elementwise kernel e may run as conv k's epilogue on its blocks:
 * it walks k's result (a temporary, read element for element at offset 0)
 * in the result's order, its innermost dim whole channels, its loads and
 * stores views that block b narrows to (see ot__conv_box). */
bool ot__conv_epi_fits(const ot_kernel *k, const ot_kernel *e);
/* e narrowed to block b of k's result, into *box (a 2-D kernel: channels x
 * positions) with its views in loads and xs (room for OT_CONV_EPI_LOADS
 * and OT_MAX_XSTORES), and its row runs decided for the box's rows. */
void ot__conv_box(const ot_kernel *k, const ot_kernel *e, const ot__conv_block *b, ot_kernel *box,
                  ot_view *loads, ot_xstore *xs);
/* The algorithm a CONV kernel runs (a static name: "im2col + gemm", "1x1
 * gemm, no im2col", "direct", "winograd F(2x2,3x3)") and the bytes of its
 * im2col tile or Winograd scratch (0: none). */
const char *ot__conv_algo(const ot_kernel *k, size_t *tile);

/* CLOCK_MONOTONIC in ns (compile.c): read on a full walk and after a compile,
 * never on a hit, whose cost a 64-element call would feel. */
uint64_t ot__now_ns(void);

/* exec_winograd.c: whether CONV kernel k runs as Winograd (f32, 2-D, 3x3,
 * stride and dilation 1, conv, conv_transpose or conv_wgrad, 16 channels
 * or more on both sides), its name for ot_explain, its scratch bytes (past
 * the packed operands'), and the run over contiguous X, S, W (xsw, in that
 * order) into whichever of them it writes. */
bool ot__wino_ok(const ot_kernel *k);
const char *ot__wino_name(const ot_kernel *k);
size_t ot__wino_scratch(const ot_kernel *k);
void ot__wino_run(const ot_kernel *k, char *const xsw[3], char *scratch);
/* Whether n floats are all finite (Winograd's result checked: exec_conv.c). */
bool ot__wino_finite(const float *y, int64_t n);
/* Whether the weights' taps are read by AVX-512 gathers (1) or copied (0),
 * instead of measuring which is faster (tests: the results are the same
 * bits either way); -1 measures again. */
void ot__wino_gather_taps(int v);
/* exec_pool.c: runs a POOL kernel from its operands' bases (one or two)
 * into dst. */
void ot__run_pool(const ot_kernel *k, char *const base[2], char *dst);
/* exec_index.c: runs an INDEX kernel from its operands' bases into dst
 * (param: the run's constants, for an in-place scatter's alpha);
 * OT_EINVAL with the error set, dst untouched, for an index out of range.
 * ot__index_check checks take's and scatter_add's indices at idx alone
 * (0 for the other ops). */
int ot__run_index(const ot_kernel *k, char *const base[2], char *dst, const double *param);
int ot__index_check(const ot_kernel *k, const char *idx);
/* exec_topk.c: ot__run_index's and ot__index_check's for topk,
 * take_along and scatter_along (ot__is_topk); the same contract. */
int ot__run_topk(const ot_kernel *k, char *const base[2], char *dst);
int ot__along_check(const ot_kernel *k, const char *idx);
/* exec_attn.c: runs an ATTN kernel in scratch of ot__attn_scratch's size
 * (false: it overflows), its exps by kt's vector exp at accuracy acc (0:
 * u10, 1: u35); ot__attn_describe is its ot_explain line. */
bool ot__attn_scratch(const ot_kernel *k, size_t *bytes);
void ot__run_attn(const ot_kernel *k, char *const base[2], char *dst, char *scratch,
                  const ot_kernels *kt, int acc);
void ot__attn_describe(FILE *f, const ot_kernel *k);
/* exec.c: ot__plan_run_prepare lays out a run's scratch once, after the
 * plan's code is generated (tiles depend on it); ot__plan_run runs it for
 * the n trees it was planned from: an int32 sum that does not fit int32 is
 * OT_EOVERFLOW naming the sum's node (the outputs then hold what the run
 * wrote: the other results, and that sum saturated). */
void ot__plan_run_prepare(ot_plan *p);
int ot__plan_run(ot_backend *be, ot_plan *p, const ot_binding *bind, int n,
                 ot_node *const trees[]);
/* The same in two halves, for a caller that keeps its own arena (a program
 * shares one between its steps): the bytes a run of p needs (false when the
 * size overflows), and a run in an arena of at least that many bytes, which
 * returns the first kernel whose int32 sum overflowed, or -1; then
 * ot__plan_overflow records the error for that kernel of p, planned from
 * trees, and returns OT_EOVERFLOW. */
bool ot__plan_run_bytes(const ot_backend *be, const ot_plan *p, size_t *bytes);
int ot__plan_run_at(ot_backend *be, const ot_plan *p, const ot_binding *bind, char *arena);
/* Checks the indices that INDEX kernels read from leaf tensors, before a
 * run writes anything: OT_EINVAL with the error set at the first out of
 * range (indices computed in the run are checked by their kernels). */
int ot__plan_check_indices(const ot_plan *p, const ot_binding *bind);
int ot__plan_overflow(const ot_plan *p, int kernel, int n, ot_node *const trees[]);
/* A plan whose p->direct is set (one kernel of generated elementwise code
 * over one span, at most a tile, whose loads are read in place and whose
 * result is stored in place, with no tail) runs as one call of its code,
 * the same call run_jit makes, without the executor's tile walk: what
 * ot__plan_run does for it, and a program's run too. */
void ot__plan_run_direct(ot_backend *be, const ot_plan *p, const ot_binding *bind);

/* The cpu backend's private state (be->impl). */
typedef struct ot_plan_cache ot_plan_cache;
typedef struct ot_threads ot_threads;
typedef struct ot_cpu {
    const ot_kernels *k;
    ot_plan_cache *cache;           /* plan_key.c */
    ot_threads *threads;            /* exec.c */
    _Atomic(ot_walk *) spare;       /* a finished walk whose arrays the next
                                       call reuses (saves its allocations) */
    bool jit;                       /* generate code for kernels (opts.jit) */
    size_t stream_bytes;            /* outputs this large are written with
                                       streaming stores when their kernel is
                                       bound by memory (jit.c); 0: never */
    size_t panel_bytes;             /* a GEMM panel's budget (ot__gemm_panel_bytes) */
} ot_cpu;
/* The last-level cache's size from CPUID's cache leaves (x86), 0 where
 * unknown: cpu.c's fallback when sysfs does not say. */
size_t ot__llc_cpuid(void);
/* The part of a reported last-level cache of `reported` bytes that a
 * process running on `cpus` CPUs can count on: at most OT__CACHE_PER_CPU
 * a CPU. A VM reports its host's whole L3 (300 MiB on a 2-vCPU guest was
 * seen), of which a guest's share is its cores'; 4 MiB a core is the most
 * current x86 parts give (AMD Zen 4: 32 MiB per 8-core CCD; Intel Xeon:
 * 1.9-2.5 MiB of L3 plus 2 MiB of L2). cpus <= 0: reported. */
#define OT__CACHE_PER_CPU ((size_t)4 << 20)
size_t ot__cache_share(size_t reported, long cpus);
/* The budget of one row panel of a GEMM whose epilogue runs on it while
 * it is in cache (plan_sched.c, counted at 8 bytes an element): half of a
 * core's L2 as reported (l2; 0: unknown, OT__PANEL_L2_UNKNOWN assumed),
 * where the panel, the epilogue's other operands and the GEMM's packed
 * blocks meet, but never more than half the last-level cache one CPU can
 * count on (ot__cache_share of l3 over cpus: a VM's report of either may
 * be its host's), within [OT__PANEL_MIN, OT__PANEL_MAX]. A pure function,
 * for the tests' simulated caches; cpu_init calls it with the machine's
 * L2 and OT_L3_BYTES or the reported L3. */
#define OT__PANEL_L2_UNKNOWN ((size_t)2 << 20)
#define OT__PANEL_MIN ((size_t)128 << 10)
#define OT__PANEL_MAX ((size_t)2 << 20)
size_t ot__gemm_panel_bytes(size_t l2, size_t l3, long cpus);
/* The CPUs this process may run on: its affinity mask, else those online. */
long ot__usable_cpus(void);
ot_plan_cache *ot__plan_cache_new(int capacity);
void ot__plan_cache_free(ot_plan_cache *c);

/* The backend's vtable (cpu.c), named ot__<name>_vt as backends.def's
 * row "cpu" has it. */
extern const ot_backend_vt ot__cpu_vt;

#endif /* OT_CPU_H */

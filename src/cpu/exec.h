/*
 * exec.h - what the executor's files share (cpu layer, private to
 * them): the memory a run reserves, the context every tile of a kernel
 * shares, tile scratch, and the calls between exec.c (tiles, elementwise
 * kernels, plans), exec_reduce.c (reductions), exec_tblock.c
 * (transposed blocks) and exec_rows.c (row runs).
 */
#ifndef OT_EXEC_H
#define OT_EXEC_H

#include "cpu.h"
#include "threads.h"

#define TILES_PER_CHUNK 16
#define ROWS_PER_CHUNK 4

/* Everything a run needs besides its temporaries, reserved with them before
 * its first kernel writes, so that running allocates nothing and an
 * allocation failure leaves every output as it was. Each thread of the run
 * owns a slot (the caller 0, worker i 1 + i) with a region of each kind at
 * off[], sized for the plan's largest need. The regions from R_BASE on
 * serve whoever runs a kernel: only slot 0 has them, unless row blocks run
 * in parallel (a BLAS operand's packed copy can be large). */
enum {
    R_PTRS,                    /* tile scratch over the stack's: buffer pointers */
    R_BUFS,                    /* ... and the buffers */
    R_TCACHE,                  /* gathered rows of transposed inputs */
    R_ACC,                     /* column reductions: accumulators per tile */
    R_SUM,                     /* ... and float sums */
    R_BASE,                    /* load bases of a kernel with more than 16 */
    R_PARTIAL,                 /* REDUCE over all: an accumulator per chunk */
    R_PACK,                    /* DOT: operands packed for BLAS */
    R_LOCAL,                   /* a row-blocked plan's temp_local temporaries */
    R_COUNT
};
_Static_assert(R_COUNT == OT_RUN_REGIONS, "cpu.h's OT_RUN_REGIONS counts exec.c's regions");

typedef struct run_mem {
    char *slots;               /* slot 0, then the workers'; NULL when full is 0 */
    size_t full, worker;       /* bytes of slot 0 and of each worker's */
    size_t off[R_COUNT];
    atomic_int *overflow;      /* the first kernel whose int32 sum overflowed */
} run_mem;

/* A region of slot `slot`, or NULL when the run needs no slots. */
static inline void *region(const run_mem *m, int slot, int r)
{
    if (!m->slots) return NULL;
    return m->slots + (slot ? m->full + m->worker * (size_t)(slot - 1) : 0) + m->off[r];
}

typedef struct racc {
    double v;
    int64_t index;
    ot__wide isum;             /* int32 sums and means: exact */
} racc;

/* What every tile of a kernel shares. */
typedef struct run_ctx {
    const ot_kernel *k;
    const ot_kernels *kt;
    int acc;                   /* 0 = u10, 1 = u35 */
    char **base;               /* per load: the address of element 0 */
    char *store;
    char *xstore[OT_MAX_XSTORES];  /* a multi-output kernel's further outputs */
    const double *param;
    const run_mem *mem;
    int64_t tile, inner, nouter, tiles_per_row;
    int64_t ew_per_chunk;      /* EW: tiles per chunk (ew_tiles_per_chunk) */
    int64_t rest;              /* column reductions: results per tile column */
    racc *partial;             /* REDUCE over all: one per chunk */
    int kernel;                /* the kernel's index in its plan */
} run_ctx;

/* Rows of a transposed input gathered together, up to TG_MAX_ROWS at a
 * time (see transposed_row). */
#define TCACHE_LOADS 2
#define TG_MAX_ROWS 16
typedef struct tcache {
    int load;                  /* the load it holds, or -1 */
    int64_t o0, j;             /* its first outer index and inner start */
    char *buf;                 /* up to TG_MAX_ROWS rows of one tile */
} tcache;

/* Scratch of one chunk: a buffer per register plus reduction space. */
typedef struct scratch {
    void **ptr, **own;
    char *mem;
    tcache tc[TCACHE_LOADS];
    racc *acc;                 /* column reductions */
    double *sum;
} scratch;

/* The element offset of a view at outer index o (over dims[0..nd-2]) and
 * inner position j. A dim of size 0 is walked as one of size 1: only a
 * reduction's emptied dim is (its results are the identity), and every
 * view it stores through has stride 0 there. What is left of o at dim 0
 * is below its size, so no division is spent there (a row reduction pays
 * this per row). */
static inline int64_t view_offset(const ot_kernel *k, const ot_view *v, int64_t o, int64_t j)
{
    int nd = k->ndim;
    if (nd == 0) return 0;
    int64_t off = j * v->strides[nd - 1];
    for (int d = nd - 2; d > 0; d--) {
        int64_t n = k->dims[d] ? k->dims[d] : 1;
        off += (o % n) * v->strides[d];
        o /= n;
    }
    return nd > 1 ? off + o * v->strides[0] : off;
}

/* Every chunk sets up tile scratch once, then runs its kind's body. */
typedef void (*chunk_body)(run_ctx *c, scratch *s, int64_t first, int64_t last);

/* A REDUCE over everything: its chunks, each a partial. */
static inline int64_t all_chunks(const run_ctx *c)
{
    return (c->nouter * c->tiles_per_row + TILES_PER_CHUNK - 1) / TILES_PER_CHUNK;
}

/* exec.c: a chunk's tile scratch set up, then body run over it; insn i of
 * a kernel with code, a parameter or an op on one element of val's, into
 * one[i] (val[i] points there); the prelude of a kernel's generated code
 * for n elements at (o, j); the register program over a tile with the
 * kernel's further outputs written. */
void ot__exec_run_chunk(run_ctx *c, chunk_body body, int slot, int64_t first, int64_t last);
void ot__exec_scalar_value(const run_ctx *c, int i, char **val, double *one);
void ot__exec_jit_prelude(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n,
                          char **val, double *one);
void ot__exec_run_with_extras(const run_ctx *c, scratch *s, int64_t o, int64_t j, int64_t n,
                              char *direct0);
/* exec_tblock.c: an EW kernel reading a transposed view run in blocks
 * through its generated code's fn_rows; false (nothing run) where it does
 * not fit. */
bool ot__exec_tblocks(ot_threads *th, int slot, run_ctx *c);
/* exec_rows.c: whether an EW kernel's code runs a row's tiles as one call
 * (spans_tiles: inputs in place, its one output in place), and runs of
 * whole rows as one call of fn_rows (run_rows, fn_rows built, and
 * rows_in_place below); tiles first..last-1 of a run_rows kernel so run; whether
 * fn_rows' call with in val, out and rs (row steps) may take
 * fn_rows_stream (every output and its step aligned to the vector, none
 * read in place). */
bool ot__exec_spans_tiles(const ot_kernel *k);
bool ot__exec_row_runs(const ot_kernel *k);
/* ... whether k's code can read each row in place (row runs' and row
 * reductions' condition, beside their code's being built): rows of some
 * elements, every value the code does not compute a load or the same for
 * every row (a parameter, or an op of such) */
bool ot__exec_rows_in_place(const ot_kernel *k);
void ot__exec_ew_rows(run_ctx *c, scratch *s, int64_t first, int64_t last);
bool ot__exec_rows_stream(const ot_kernel *k, char *const *val, char *const *out,
                          const int64_t *rs);
/* ... and fn_rows' arguments for rows o..o+rows-1 from column j: every
 * load in place (exec_tblock.c gathers its transposed ones after), a
 * parameter in one[i], every output, and each one's step per row. */
void ot__exec_rows_args(const run_ctx *c, int64_t o, int64_t j, int64_t rows, char **val,
                        char **out, int64_t *rs, double *one);
/* exec_reduce.c: a REDUCE kernel run on the pool th from slot; whether a
 * row reduction runs rows a run at a time through its code's red_rows
 * (built, used where reduce_span would call the code, and the rows read in
 * place: ot__exec_rows_in_place). */
bool ot__exec_red_runs(const ot_kernel *k);
void ot__exec_run_reduce(ot_threads *th, int slot, run_ctx *c);

#endif /* OT_EXEC_H */

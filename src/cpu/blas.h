/*
 * blas.h - the cpu backend's GEMM below its DOT kernels: one product as
 * data (ot__gemm), run by BLAS or by a plain C loop (blas.c), and the
 * process-wide choice of which runs (blas_core.c): the OpenBLAS core, its
 * check against the C loop, the fallback, and the line ot_explain prints.
 * Private to the cpu backend (and the white-box tests).
 */
#ifndef OT_BLAS_H
#define OT_BLAS_H

#include "internal.h"

#include <stdio.h>

/* C = alpha*op(A).op(B) + beta*C, row-major: op(A) is m x k, stored as is
 * (lda >= k) or, ta, as its k x m transpose (lda >= m); the same for B.
 * beta == 0 does not read C. dt is OT_F32 or OT_F64. */
typedef struct ot__gemm {
    int dt;
    const void *a, *b;
    void *c;
    bool ta, tb;
    int64_t m, n, k, lda, ldb, ldc;
    double alpha, beta;
} ot__gemm;
typedef void ot__gemm_fn(const ot__gemm *g);

/* Through cblas (gemv where m or n is 1). */
void ot__gemm_blas(const ot__gemm *g);
/* In plain C, sums in double: the check's reference and the fallback. */
void ot__gemm_loop(const ot__gemm *g);
/* The product function a kernel calls: settles the process's OpenBLAS core
 * first (ot__blas_ready), then cblas, or the loop where the check refused
 * the library. Kernels take it here, never ot__gemm_blas directly: a
 * product before the core is settled runs on the library's first core. */
ot__gemm_fn *ot__gemm_pick(void);
/* Whether fn's products agree with ot__gemm_loop's on a few odd shapes
 * (f32 and f64, transposes, beta != 0, leading dims past the width, and
 * vectors, sizes on both sides of OpenBLAS's small-matrix path); *why gets
 * the first disagreement. A few ms. */
bool ot__gemm_agrees(ot__gemm_fn *fn, char *why, size_t n);

/* ---- GEMMs with an epilogue per panel -------------------------------------- */

/* What runs on rows [r0, r0 + n) of a product's C right after the GEMM
 * wrote them, while they are in cache: a dense layer's bias and
 * activation, a residual add, an optimizer's update, an inference batch
 * norm's scale and shift (a convolution's GEMM hands its panels on the
 * same way). */
typedef void ot__gemm_epilogue(void *ctx, int64_t r0, int64_t n);
typedef struct ot__panels {
    int64_t rows;             /* rows per panel (the plan's, cpu.c's budget) */
    bool reuse;               /* every panel's C at dst: a buffer of one panel,
                                 reused while in cache; else at its rows */
    ot__gemm_epilogue *epi;
    void *ctx;
} ot__panels;
/* Runs DOT kernel k (batch 1) as GEMMs on row panels of C, in order, each
 * followed by pp->epi on its rows: op(A)'s panel rows and all of B (base[0],
 * base[1], as ot__run_dot reads them), C at dst. */
struct ot_kernel;   /* cpu.h */
void ot__run_dot_panels(const struct ot_kernel *k, char *const base[2], char *dst,
                        const double *param, char *scratch, const ot__panels *pp);

/* ---- the core in use (blas_core.c) --------------------------------------- */

/* The policy as a pure function of its inputs, for the tests: the core to
 * switch to (a static name) or NULL to keep `core`. core: the running
 * core's name (NULL: not OpenBLAS); cpu_class: the CPU's vector class
 * (blas_cores.h's OT__BLAS_*); request: OT_BLAS_CORE ("keep", "auto" or a
 * name); user_env: OPENBLAS_CORETYPE as set by the user (NULL: unset), never
 * overridden; has: whether the BLAS build has a core (NULL: all). *why gets
 * the reason either way. */
const char *ot__blas_pick(const char *core, int cpu_class, const char *request,
                          const char *user_env, bool (*has)(const char *name), char *why,
                          size_t n);
/* The vector class of a CPU with these features (the OT__BLAS_F_* bits). */
enum {
    OT__BLAS_F_AVX = 1, OT__BLAS_F_AVX2 = 2, OT__BLAS_F_FMA = 4, OT__BLAS_F_AVX512F = 8,
    OT__BLAS_F_AVX512BW = 16, OT__BLAS_F_AVX512DQ = 32, OT__BLAS_F_AVX512VL = 64
};
int ot__blas_cpu_class(unsigned features);
unsigned ot__blas_cpu_features(void);   /* this CPU's */

/* What the settling decided. */
typedef struct ot__blas_state {
    char was[24], now[24];   /* the core before and after ("": not OpenBLAS) */
    char why[240];           /* why now is what it is */
    bool loop;               /* the C loop runs the products */
} ot__blas_state;
/* The BLAS as the settling sees it, so that the tests can play a library
 * whose products are wrong. */
typedef struct ot__blas_ops {
    const char *(*core)(void);          /* the running core; NULL: not OpenBLAS */
    bool (*set)(const char *name);      /* switch to a core; whether it took */
    bool (*has)(const char *name);      /* whether the build has the core */
    bool (*agrees)(char *why, size_t n);   /* whether the products are right */
} ot__blas_ops;
/* Picks, switches and checks the core, falling back to the core it found
 * and then to the C loop where the products are wrong; fills *st. */
void ot__blas_settle(const ot__blas_ops *ops, const char *request, int cpu_class,
                     const char *user_env, ot__blas_state *st);

/* The first cpu backend's OT_BLAS_CORE (cpu.c; later backends' are not
 * asked: the core is the process's), for ot__blas_ready. */
void ot__blas_request(const char *request);
/* Once per process, before the first dot (blas.c) or ot_explain of one:
 * settles the real library with the request. OpenBLAS reads its core
 * when a call starts, so no BLAS call may be in flight in the host
 * meanwhile (README, "GEMM core selection"). Returns ot__blas_loop(). */
bool ot__blas_ready(void);
/* ot__blas_ready with another library (the tests' fakes); false where the
 * process had settled already (nothing done). */
bool ot__blas_setup_with(const ot__blas_ops *ops, const char *request);
/* Whether the C loop runs the products (the library's were wrong). */
bool ot__blas_loop(void);
/* The settled state (after ot__blas_ready). */
const ot__blas_state *ot__blas_state_get(void);
/* ot_explain's line for plans with a dot: the library, version and core,
 * and sgemm's GFLOP/s against the FMA peak, both measured once per process
 * on first use (a few ms). */
void ot__blas_explain(FILE *f);

#endif /* OT_BLAS_H */

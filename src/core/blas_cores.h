/*
 * blas_cores.h - OpenBLAS's x86-64 cores as data: each core's name as
 * openblas_get_corename() spells it and OPENBLAS_CORETYPE takes it, with the
 * widest vector class its GEMM kernels use. Macros only, so any layer may
 * include it: config.c checks OT_BLAS_CORE's value against the names, and
 * src/cpu/blas_core.c compares a core's class with the CPU's to decide
 * whether the running core is narrower than the machine (the cores a
 * DYNAMIC_ARCH build picks when it does not know the CPU model: Prescott on
 * an Emerald Rapids under Debian 12's 0.3.21).
 */
#ifndef OT_BLAS_CORES_H
#define OT_BLAS_CORES_H

/* The vector classes, narrowest first: what a core's kernels need and what
 * a CPU has. AVX512 means F, BW, DQ and VL (what SkylakeX's kernels use). */
enum { OT__BLAS_SSE = 0, OT__BLAS_AVX = 1, OT__BLAS_AVX2 = 2, OT__BLAS_AVX512 = 3 };

/* X(name, class). The AMD cores with FMA4/FMA3 but no AVX2 are AVX class;
 * Zen and Excavator run AVX2 kernels. */
#define OT__BLAS_CORES(X)                                                            \
    X(Katmai, OT__BLAS_SSE) X(Coppermine, OT__BLAS_SSE) X(Northwood, OT__BLAS_SSE)    \
    X(Prescott, OT__BLAS_SSE) X(Banias, OT__BLAS_SSE) X(Atom, OT__BLAS_SSE)           \
    X(Core2, OT__BLAS_SSE) X(Penryn, OT__BLAS_SSE) X(Dunnington, OT__BLAS_SSE)        \
    X(Nehalem, OT__BLAS_SSE) X(Athlon, OT__BLAS_SSE) X(Opteron, OT__BLAS_SSE)         \
    X(Opteron_SSE3, OT__BLAS_SSE) X(Barcelona, OT__BLAS_SSE) X(Nano, OT__BLAS_SSE)    \
    X(Bobcat, OT__BLAS_SSE) X(Sandybridge, OT__BLAS_AVX) X(Bulldozer, OT__BLAS_AVX)   \
    X(Piledriver, OT__BLAS_AVX) X(Steamroller, OT__BLAS_AVX)                          \
    X(Excavator, OT__BLAS_AVX2) X(Haswell, OT__BLAS_AVX2) X(Zen, OT__BLAS_AVX2)       \
    X(SkylakeX, OT__BLAS_AVX512) X(Cooperlake, OT__BLAS_AVX512)                       \
    X(SapphireRapids, OT__BLAS_AVX512)

#endif /* OT_BLAS_CORES_H */

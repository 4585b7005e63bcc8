/*
 * kernels.h - the per-ISA kernel tables of src/cpu/kernels/ (private to that
 * directory and its tests). Each table is tile.inc compiled by one
 * k_<isa>.c with that ISA's flags; dispatch.c picks one at run time. The
 * x86 tables exist only in x86 builds, the NEON table only in aarch64 ones.
 */
#ifndef OT_KERNELS_H
#define OT_KERNELS_H

#include "cpu.h"

#if defined(__x86_64__) || defined(__i386__)
#define OT_KERNELS_X86 1
#else
#define OT_KERNELS_X86 0
#endif
#if defined(__aarch64__)
#define OT_KERNELS_ARM64 1
#else
#define OT_KERNELS_ARM64 0
#endif

extern const ot_kernels ot__kernels_scalar;
#if OT_KERNELS_X86
extern const ot_kernels ot__kernels_sse2;
extern const ot_kernels ot__kernels_avx2;
extern const ot_kernels ot__kernels_avx512;
#endif
#if OT_KERNELS_ARM64
extern const ot_kernels ot__kernels_neon;
#endif

#endif /* OT_KERNELS_H */

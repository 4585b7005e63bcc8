/*
 * k_neon.c - the tile kernels (tile.inc) for AArch64 Advanced SIMD (NEON):
 * 4 float / 2 double lanes, FMA, SLEEF's advsimd functions. Built with the
 * baseline flags; NEON is part of every AArch64 CPU.
 */
#if defined(__aarch64__)
#include "isa_neon.h"
#include "tile.inc"
#else
typedef int ot__k_neon_unused; /* not an arm64 build: nothing here */
#endif

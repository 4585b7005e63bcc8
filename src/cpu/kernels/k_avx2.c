/*
 * k_avx2.c - the tile kernels (tile.inc) for AVX2 + FMA: 8 float / 4
 * double lanes. Built with -mavx2 -mfma; run only where the CPU has both.
 */
#if defined(__x86_64__) || defined(__i386__)
#include "isa_avx2.h"
#include "tile.inc"
#else
typedef int ot__k_avx2_unused; /* not an x86 build: nothing here */
#endif

/*
 * k_avx512.c - the tile kernels (tile.inc) for AVX-512F: 16 float / 8
 * double lanes. Built with -mavx512f -mavx2 -mfma; run only where the CPU has
 * avx512f.
 */
#if defined(__x86_64__) || defined(__i386__)
#include "isa_avx512.h"
#include "tile.inc"
#else
typedef int ot__k_avx512_unused; /* not an x86 build: nothing here */
#endif

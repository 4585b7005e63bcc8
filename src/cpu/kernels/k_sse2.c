/*
 * k_sse2.c - the tile kernels (tile.inc) for SSE2, the x86-64 baseline: 4
 * float / 2 double lanes. Built with the baseline flags.
 */
#if defined(__x86_64__) || defined(__i386__)
#include "isa_sse2.h"
#include "tile.inc"
#else
typedef int ot__k_sse2_unused; /* not an x86 build: nothing here */
#endif

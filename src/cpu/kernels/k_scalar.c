/*
 * k_scalar.c - the tile kernels (tile.inc) for the portable fallback: one
 * lane, plain C and SLEEF's scalar functions. Built with the baseline flags
 * on any architecture.
 */
#include "isa_scalar.h"
#include "tile.inc"

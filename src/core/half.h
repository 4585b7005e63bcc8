/*
 * half.h - the 16-bit storage dtypes (OT_F16, IEEE binary16; OT_BF16, the
 * top half of an f32): scalar conversions by bit manipulation (half.c, the
 * definition every vector version is checked against) and tables of bulk
 * conversions per instruction set (half_simd.c), one picked at run time.
 * Narrowing rounds to nearest, ties to even; NaN stays NaN (quieted),
 * infinities stay, overflow gives infinity, subnormals are exact. Widening
 * is exact (an f16 signalling NaN comes back quiet, as F16C gives it).
 */
#ifndef OT_HALF_H
#define OT_HALF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

uint16_t ot__f32_to_f16(float f);
float ot__f16_to_f32(uint16_t h);
uint16_t ot__f32_to_bf16(float f);
float ot__bf16_to_f32(uint16_t h);
/* A double rounded once to the 16-bit dtype (via f32 rounded to odd, which
 * keeps the one rounding correct): what a store from double gives. */
uint16_t ot__f64_to_f16(double d);
uint16_t ot__f64_to_bf16(double d);

/* Whether the process has made a tensor or node of a 16-bit dtype, so
 * that backends skip looking for them until then; noted by the makers. */
bool ot__half_seen(void);
void ot__half_note(int dt);

/* Bulk conversions of n elements, one set per instruction set. */
typedef struct ot__half_fns {
    const char *name;
    void (*to_f16)(const float *src, uint16_t *dst, size_t n);
    void (*from_f16)(const uint16_t *src, float *dst, size_t n);
    void (*to_bf16)(const float *src, uint16_t *dst, size_t n);
    void (*from_bf16)(const uint16_t *src, float *dst, size_t n);
} ot__half_fns;

/* Table i (0: scalar, then wider ones), NULL when this CPU or build lacks
 * it or i is past the last. */
const ot__half_fns *ot__half_table(int i);
/* The widest table this CPU runs (chosen once). */
const ot__half_fns *ot__half_best(void);

/* dt is OT_F16 or OT_BF16 (ot_dtype values; int so that this header needs
 * no other). */
void ot__half_narrow(int dt, const float *src, uint16_t *dst, size_t n);
void ot__half_widen(int dt, const uint16_t *src, float *dst, size_t n);
/* ot__half_narrow's bits written with streaming stores (x86; elsewhere
 * ordinary ones), fenced before it returns: for outputs larger than the
 * caches, whose lines then need not be read before they are written. */
void ot__half_narrow_stream(int dt, const float *src, uint16_t *dst, size_t n);

/* d rounded to f32 toward an odd last bit when inexact (half.c). */
float ot__f32_odd(double d);

/* ---- stochastic rounding (half_sr.c) ---- */

/* The key of one stream of random bits: a seed and a stream number (an
 * assignment's count, an output's index) hashed together. */
uint64_t ot__sr_key(uint64_t seed, uint64_t stream);
/* The 32 random bits of element i of key's stream: a hash, no state. */
uint32_t ot__sr_bits(uint64_t key, uint64_t i);
/* f rounded to the 16-bit dtype stochastically with the random bits r:
 * up with probability (distance to the lower value) / (the gap). NaN as
 * the nearest rounding gives it; infinities and exact values unchanged. */
uint16_t ot__f32_to_f16_sr(float f, uint32_t r);
uint16_t ot__f32_to_bf16_sr(float f, uint32_t r);
/* A double (ref's stores): exact values and NaN as the nearest rounding,
 * else via f32 rounded to odd. dt is OT_F16 or OT_BF16. */
uint16_t ot__f64_to_half_sr(int dt, double d, uint32_t r);
/* n elements, element i taking the bits of index first + i of key. */
void ot__half_narrow_sr(int dt, const float *src, uint16_t *dst, size_t n, uint64_t key,
                        uint64_t first);
/* The same with the vector code (AVX2, where the CPU has it) or without:
 * the same bits either way (tests/test_half_sr.c compares them). */
void ot__half_narrow_sr_with(bool vector, int dt, const float *src, uint16_t *dst, size_t n,
                             uint64_t key, uint64_t first);
/* The rounding of 16-bit stores in force on this thread: set by the front
 * around one assignment (ot_assign_sr, or a backend made with
 * stochastic_round), read by the backends' stores. get gives whether it is
 * on and then its key; set returns whether it was on. */
bool ot__half_sr_get(uint64_t *key);
bool ot__half_sr_set(bool on, uint64_t key);

#endif /* OT_HALF_H */

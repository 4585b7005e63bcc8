/*
 * rng.c - the counter-based random number generator behind ot_rand
 * (Philox-2x32-10), in the core because every backend draws from it: the
 * same seed gives the same numbers on ref, cpu and any backend to come.
 */
#include "internal.h"

/* The splitmix64 finaliser: a bijective 64-bit mix with full avalanche. */
static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* Philox-2x32 with 10 rounds (Salmon et al., SC'11): each round multiplies
 * the first word into a 64-bit product, whose high half is mixed with the
 * key and the second word; the key advances by the golden-ratio Weyl
 * constant after every round. */
static void philox2x32_10(uint32_t key, uint32_t ctr[2])
{
    uint32_t x0 = ctr[0], x1 = ctr[1];
    for (int r = 0; r < 10; r++) {
        uint64_t prod = (uint64_t)0xD256D193u * x0;
        uint32_t hi = (uint32_t)(prod >> 32), lo = (uint32_t)prod;
        x0 = hi ^ key ^ x1;
        x1 = lo;
        key += 0x9E3779B9u;
    }
    ctr[0] = x0;
    ctr[1] = x1;
}

double ot__rand_uniform(uint64_t be_seed, uint64_t seed, uint64_t idx, ot_dtype dt)
{
    /* Golden-ratio offset so that seed 0 does not mix to 0. */
    uint64_t k = mix64(be_seed ^ mix64(seed + 0x9E3779B97F4A7C15u));
    uint32_t ctr[2] = {(uint32_t)idx, (uint32_t)(idx >> 32)};
    philox2x32_10((uint32_t)(k ^ (k >> 32)), ctr);
    if (dt == OT_F32)                      /* 24 bits: exact in float, < 1 */
        return (double)(ctr[0] >> 8) * 0x1p-24;
    /* 53 bits: 32 from the first word on top, 21 from the second below. */
    uint64_t bits = ((uint64_t)ctr[0] << 21) ^ (ctr[1] >> 11);
    return (double)bits * 0x1p-53;
}

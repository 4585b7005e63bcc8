/*
 * stats.h - the backend's work counters behind ot_stats_get (stats.c).
 * Each thread counts into a shard of its own with plain (relaxed) loads
 * and stores: an assignment or a program run takes no locked instruction
 * to count itself (five locked adds were 5% of a 64-element program run).
 * Reading sums the shards. Threads beyond OT__STAT_SLOTS alive at once
 * share one shard with atomic adds.
 */
#ifndef OT_STATS_H
#define OT_STATS_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct ot_backend;

enum {
    OT__STAT_ASSIGNS,
    OT__STAT_NODES,
    OT__STAT_COMPILES,
    OT__STAT_CACHE_HITS,
    OT__STAT_KERNELS,
    OT__STAT_BYTES,
    OT__STAT_ELEM_OPS,
    OT__STAT_N
};

#define OT__STAT_SLOTS 64

typedef struct ot__stat_shard {
    atomic_uint_fast64_t n[OT__STAT_N];
    bool shared;   /* the one shard of threads without a slot: atomic adds */
} ot__stat_shard;

/* The counters of one backend: a shard per thread slot, made on the slot's
 * first count, and the shared one. */
typedef struct ot__stat_counters {
    _Atomic(ot__stat_shard *) shard[OT__STAT_SLOTS];
    ot__stat_shard shared;
} ot__stat_counters;

/* The calling thread's slot + 1; 0 before its first count, -1 when it has
 * none (stats.c). */
extern _Thread_local int ot__stats_slot;

/* The first count of a thread, or of its slot on c: takes the slot, makes
 * the shard (stats.c). */
ot__stat_shard *ot__stats_mine_slow(ot__stat_counters *c);

/* The calling thread's shard of c; never NULL (the shared one when the
 * thread has no slot or a shard cannot be allocated). Inline: a 64-element
 * assignment counts twice, and the call was a tenth of what a program run
 * spends outside its kernel; the common case is one TLS read and one load. */
static inline ot__stat_shard *ot__stats_mine(ot__stat_counters *c)
{
    int slot = ot__stats_slot;
    ot__stat_shard *s = slot > 0 ? atomic_load_explicit(&c->shard[slot - 1], memory_order_acquire)
                                 : NULL;
    return s ? s : ot__stats_mine_slow(c);
}

static inline void ot__stat_add(ot__stat_shard *s, int what, uint64_t n)
{
    if (s->shared) {
        atomic_fetch_add_explicit(&s->n[what], n, memory_order_relaxed);
        return;
    }
    uint64_t v = atomic_load_explicit(&s->n[what], memory_order_relaxed);
    atomic_store_explicit(&s->n[what], v + n, memory_order_relaxed);
}

/* The sum over c's shards of counter what. */
uint64_t ot__stats_sum(const ot__stat_counters *c, int what);
void ot__stats_init(ot__stat_counters *c);
void ot__stats_free(ot__stat_counters *c);

#endif

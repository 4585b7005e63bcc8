/*
 * stats.c - the backend's work counters (stats.h): thread slots, the
 * shards and their sums. A thread takes the lowest free slot on its first
 * count and gives it back when it exits (a pthread key's destructor), so
 * the shards of a backend number at most the threads alive at once; a
 * slot's next thread goes on counting into the same shard (the mutex
 * orders its loads after the last thread's stores).
 */
#include "stats.h"

#include "internal.h"

#include <pthread.h>

static pthread_mutex_t slot_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t slots_used;   /* bit i: slot i held by a live thread */
static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t slot_key;
static bool key_ok;
_Thread_local int ot__stats_slot;   /* slot + 1; 0: none yet; -1: none to have */

static void slot_release(void *v)
{
    int slot = (int)(intptr_t)v - 1;
    pthread_mutex_lock(&slot_lock);
    slots_used &= ~((uint64_t)1 << slot);
    pthread_mutex_unlock(&slot_lock);
}

static void key_make(void) { key_ok = pthread_key_create(&slot_key, slot_release) == 0; }

/* The lowest free slot, held until the thread exits; -1 when none is free. */
static int slot_take(void)
{
    pthread_once(&key_once, key_make);
    if (!key_ok) return -1;
    int slot = -1;
    pthread_mutex_lock(&slot_lock);
    for (int i = 0; i < OT__STAT_SLOTS && slot < 0; i++)
        if (!(slots_used >> i & 1)) slot = i;
    if (slot >= 0 && pthread_setspecific(slot_key, (void *)(intptr_t)(slot + 1)) == 0)
        slots_used |= (uint64_t)1 << slot;
    else
        slot = -1;
    pthread_mutex_unlock(&slot_lock);
    return slot;
}

ot__stat_shard *ot__stats_mine_slow(ot__stat_counters *c)
{
    if (ot__stats_slot == 0) {
        int slot = slot_take();
        ot__stats_slot = slot < 0 ? -1 : slot + 1;
    }
    if (ot__stats_slot < 0) return &c->shared;
    ot__stat_shard *s = atomic_load_explicit(&c->shard[ot__stats_slot - 1], memory_order_acquire);
    if (s) return s;
    s = ot__calloc(1, sizeof *s);
    if (!s) return &c->shared;
    atomic_store_explicit(&c->shard[ot__stats_slot - 1], s, memory_order_release);
    return s;
}

uint64_t ot__stats_sum(const ot__stat_counters *c, int what)
{
    uint64_t sum = atomic_load_explicit(&c->shared.n[what], memory_order_relaxed);
    for (int i = 0; i < OT__STAT_SLOTS; i++) {
        const ot__stat_shard *s = atomic_load_explicit(&c->shard[i], memory_order_acquire);
        if (s) sum += atomic_load_explicit(&s->n[what], memory_order_relaxed);
    }
    return sum;
}

void ot__stats_init(ot__stat_counters *c)
{
    for (int i = 0; i < OT__STAT_SLOTS; i++) atomic_init(&c->shard[i], NULL);
    for (int i = 0; i < OT__STAT_N; i++) atomic_init(&c->shared.n[i], 0);
    c->shared.shared = true;
}

void ot__stats_free(ot__stat_counters *c)
{
    for (int i = 0; i < OT__STAT_SLOTS; i++) free(atomic_load(&c->shard[i]));
}

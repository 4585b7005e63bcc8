/*
 * threads.h - the cpu backend's thread pool (threads.c), used by the
 * executor (exec.c) and the backend object (cpu.c).
 */
#ifndef OT_THREADS_H
#define OT_THREADS_H

#include "cpu.h"

/* Runs chunks [first, last) on the thread that owns slot `slot` of the
 * run's memory (exec.c's run_mem); scratch is set up once per call. */
typedef void (*chunk_fn)(void *ctx, int slot, int64_t first, int64_t last);

/* A pool of `workers` threads, or NULL with the error set. All of them or
 * none: a pool short of threads would quietly run slower than asked. */
ot_threads *ot__threads_new(int workers);
void ot__threads_free(ot_threads *t);
/* The workers besides the calling thread (0 for no pool). */
int ot__threads_workers(const ot_threads *t);
/* Runs fn over chunks 0..n-1 on the pool (the caller works too, in slot
 * 0, the one it owns then); serially in the caller's slot when there is no
 * pool, little work (elements times their cost in adds), or another run
 * holds the pool. */
void ot__parallel(ot_threads *t, int slot, int64_t n, int64_t work, chunk_fn fn, void *ctx);
/* Runs handed to the pool's workers so far (a run kept on the calling
 * thread does not count): tests check that small work wakes no one. */
uint64_t ot__threads_handoffs(const ot_threads *t);

#endif

/*
 * alloc.c - the one seam every allocation of the library goes through, so
 * that tests can make the Nth allocation fail (the fault-injection loop of
 * tests/test_oom.c) and check that every path recovers: an OT_ENOMEM error,
 * no leak, outputs untouched.
 *
 * The countdown is a thread-local: a test arms it on its own thread, and
 * the allocations it counts are that thread's. That covers every
 * allocation of a call: the cpu backend reserves all a run needs (its
 * worker threads' tile scratch included) on the calling thread before its
 * first kernel writes, and the workers allocate nothing.
 */
#include "internal.h"

static _Thread_local long fail_countdown;   /* 0: off; 1: the next one fails */
static _Thread_local long alloc_count;
static _Thread_local unsigned long failures;

void ot__alloc_fail_at(long n)
{
    fail_countdown = n > 0 ? n : 0;
    alloc_count = 0;
}

long ot__alloc_count(void) { return alloc_count; }

unsigned long ot__alloc_failures(void) { return failures; }

bool ot__alloc_should_fail(void)
{
    alloc_count++;
    if (fail_countdown == 0 || --fail_countdown != 0) return false;
    failures++;
    return true;
}

/* p, counting a real failure (malloc(0) may return NULL, and is none). */
static void *counted(void *p, size_t n)
{
    if (!p && n) failures++;
    return p;
}

void *ot__malloc(size_t n) { return ot__alloc_should_fail() ? NULL : counted(malloc(n), n); }

void *ot__calloc(size_t n, size_t size)
{
    return ot__alloc_should_fail() ? NULL : counted(calloc(n, size), n * size);
}

void *ot__realloc(void *p, size_t n)
{
    return ot__alloc_should_fail() ? NULL : counted(realloc(p, n), n);
}

void *ot__aligned_alloc(size_t align, size_t n)
{
    return ot__alloc_should_fail() ? NULL : counted(aligned_alloc(align, n), n);
}

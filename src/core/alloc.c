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
#define _DEFAULT_SOURCE   /* madvise */
#include "internal.h"

#if defined(__linux__)
#include <sys/mman.h>
#endif

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

/* Tensor data from HUGE_MIN bytes on sits in whole 2 MiB pages, which the
 * kernel is asked to back with huge pages (Linux's THP in "madvise" mode
 * gives them only on request): a kernel streaming three 64 MiB inputs
 * otherwise takes a TLB miss every 4 KiB of each, and W1 (a*b + c at 2^24)
 * ran 12-30% faster on huge pages (Zen 4). The rounding wastes less than
 * a third of a buffer this large; smaller ones stay 64-byte aligned. */
#define HUGE_PAGE ((size_t)2 << 20)
#define HUGE_MIN ((size_t)4 << 20)

void *ot__data_alloc(size_t n)
{
    if (n < HUGE_MIN || n > SIZE_MAX - HUGE_PAGE) return ot__aligned_alloc(64, n);
    size_t cap = (n + HUGE_PAGE - 1) & ~(HUGE_PAGE - 1);
    void *p = ot__aligned_alloc(HUGE_PAGE, cap);
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (p) madvise(p, cap, MADV_HUGEPAGE);   /* advice: without THP, nothing changes */
#endif
    return p;
}

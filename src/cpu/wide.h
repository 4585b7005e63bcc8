/*
 * wide.h - WIDE: a function compiled for AVX-512, AVX2 and the baseline,
 * the one this CPU runs picked when the library loads (GCC's
 * target_clones), for loops over vector lanes in files built without -m
 * flags (exec_winograd.c's transforms, exec_conv.c's depthwise taps).
 */
#ifndef OT_WIDE_H
#define OT_WIDE_H

/* An ifunc's resolver runs while the loader relocates, before
 * ThreadSanitizer's runtime exists, and its instrumented entry crashes
 * there: the TSan build takes the baseline only. */
#if defined(__SANITIZE_THREAD__)
#define OT_NO_CLONES
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OT_NO_CLONES
#endif
#endif
#if defined(__x86_64__) && defined(__GNUC__) && !defined(OT_NO_CLONES)
#define WIDE __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WIDE
#endif

#endif

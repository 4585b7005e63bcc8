/*
 * test.h - the unit-test harness: TEST() registers a case, CHECK*() record
 * failures without stopping the case. tests/main.c runs every case in its own
 * child process with a timeout and prints "N passed, N failed".
 */
#ifndef OT_TEST_H
#define OT_TEST_H

#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef void (*test_fn)(void);
void test__register(const char *name, const char *file, test_fn fn);
void test__fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Relative-or-absolute closeness: |a - b| <= tol * max(1, |a|, |b|); NaN
 * equals NaN and infinities must match exactly. */
int test__close(double a, double b, double tol);

/* The height of the deep-tree cases: 100,000, which every walk must
 * survive without recursion (the unit phase runs them so). Under ASan,
 * whose shadow memory makes each such case 5-30 times dearer, a fifth:
 * every walker's heap stack still grows through a dozen doublings, which
 * is what that build is there to watch. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_HEIGHT 20000
#else
#define TEST_HEIGHT 100000
#endif

#define TEST(name)                                                            \
    static void test_##name(void);                                            \
    __attribute__((constructor)) static void test__reg_##name(void)           \
    {                                                                         \
        test__register(#name, __FILE__, test_##name);                         \
    }                                                                         \
    static void test_##name(void)

#define CHECK(cond)                                                           \
    do {                                                                      \
        if (!(cond)) test__fail(__FILE__, __LINE__, "CHECK(%s)", #cond);       \
    } while (0)
#define CHECK_INT(a, b)                                                       \
    do {                                                                      \
        long long a_ = (long long)(a), b_ = (long long)(b);                   \
        if (a_ != b_)                                                         \
            test__fail(__FILE__, __LINE__, "%s == %lld, expected %s == %lld", \
                       #a, a_, #b, b_);                                       \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                 \
    do {                                                                      \
        double a_ = (double)(a), b_ = (double)(b);                            \
        if (!test__close(a_, b_, (tol)))                                      \
            test__fail(__FILE__, __LINE__, "%s == %.17g, expected %.17g (tol %g)", \
                       #a, a_, b_, (double)(tol));                            \
    } while (0)
#define CHECK_STR(a, b)                                                       \
    do {                                                                      \
        const char *a_ = (a), *b_ = (b);                                      \
        if (!a_ || !b_ || strcmp(a_, b_) != 0)                                \
            test__fail(__FILE__, __LINE__, "%s == \"%s\", expected \"%s\"",   \
                       #a, a_ ? a_ : "(null)", b_ ? b_ : "(null)");           \
    } while (0)
/* The error slot holds code and a message containing every given substring. */
#define CHECK_ERR(code, ...)                                                  \
    test__check_err(__FILE__, __LINE__, (code), (const char *[]){__VA_ARGS__, NULL})
void test__check_err(const char *file, int line, int code, const char *const subs[]);
/* "file:line: " for a call on `line` of this file, written into the char
 * array buf: the prefix of an error that names its caller (for CHECK_ERR). */
#define TEST_SITE(buf, line) (snprintf((buf), sizeof(buf), "%s:%d: ", __FILE__, (line)), (const char *)(buf))

/* Captures what fn writes to a FILE* into a malloc'd string (caller frees). */
char *test__capture(int (*fn)(const ot_node *, FILE *), const ot_node *n);
/* ot_explain_many's text (caller frees), or NULL on an error. */
char *test__explain_many(int n, ot_tensor *const outs[], ot_node *const trees[]);
/* Saves the n environment variables names[] into saved[] (malloc'd, or
 * NULL where unset), then sets each to values[i] (values NULL, or an entry
 * NULL: unset), so that a case sees only what it sets;
 * test__env_restore puts them back and frees saved[]. */
void test__env_save(int n, const char *const names[], char *saved[], const char *const values[]);
void test__env_restore(int n, const char *const names[], char *saved[]);
/* A backend by name with this fusion setting and 2 threads, the variables
 * that would override them unset (a failure is recorded). */
ot_backend *test__backend(const char *name, int fusion);
/* A tensor of shape s and dtype dt whose element i is
 * ((i * 7 + seed * 13) % mod - off) * scale: small exact values, other per
 * seed (a failure is recorded). */
ot_tensor *test__ints(ot_backend *be, ot_shape s, ot_dtype dt, int seed, int mod, int off,
                      double scale);
/* A tensor of shape s and dtype dt with values in [lo, hi) from a linear
 * congruential generator started at seed (a failure is recorded). */
ot_tensor *test__uniform(ot_backend *be, ot_shape s, ot_dtype dt, uint32_t seed, double lo,
                         double hi);

#endif

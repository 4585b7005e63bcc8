/*
 * test_regress_misc.c - regressions of issue 13's defects 10 (printers
 * linear in distinct nodes), 11 (bounded thread count) and 15 (small
 * contract mismatches: OT_STREAM_BYTES, SGD's NULL velocity, printer I/O
 * errors, disjoint interleaved views).
 */
#include "test.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <unistd.h>

static ot_backend *ref(void)
{
    unsetenv("OT_BACKEND");
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be != NULL);
    return be;
}

static ot_tensor *named(ot_backend *be, ot_shape s, const char *name)
{
    ot_tensor *t = ot_zeros(be, s, OT_F32);
    CHECK(t != NULL);
    if (t) CHECK_INT(ot_tensor_set_name(t, name), 0);
    return t;
}

static size_t count(const char *s, const char *sub)
{
    size_t n = 0, k = strlen(sub);
    for (const char *q = s; *q; q++)
        if (*q == sub[0] && memcmp(q, sub, k) == 0) {
            n++;
            q += k - 1;
        }
    return n;
}

#define CHECK_OUT(fn, n, want)                                                \
    do {                                                                      \
        char *got_ = test__capture((fn), (n));                                \
        CHECK_STR(got_, (want));                                              \
        free(got_);                                                           \
    } while (0)

/* ---- defect 10 ------------------------------------------------------------ */

TEST(defect10_shared_subtree_printed_once)
{
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), "x");
    ot_node *f = ot_tensor_node(x);
    for (int i = 0; i < 22; i++) f = ot_add(f, f);
    int (*fns[])(const ot_node *, FILE *) = {ot_pp, ot_print, ot_graphviz};
    for (int k = 0; k < 3; k++) {
        char *s = test__capture(fns[k], f);
        CHECK(s != NULL);
        if (s) CHECK(strlen(s) < 4096);
        free(s);
    }
    /* The first level repeats its leaf; every later one is named once. */
    char *s = test__capture(ot_pp, f);
    CHECK(s && strncmp(s, "%1 = (x + x)\n%2 = (%1 + %1)\n", 27) == 0);
    CHECK(s && strstr(s, "\n(%21 + %21)") != NULL && count(s, "\n") == 21);
    free(s);
    ot_tensor_free(x);
    ot_backend_free(be);
}

TEST(defect10_shared_forms_exact)
{
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), "x");
    ot_tensor *y = named(be, OT_SHAPE(2), "y");
    ot_node *e = ot_exp(x);
    ot_node *g = ot_mul(ot_add(e, y), e);
    CHECK_OUT(ot_pp, g, "%1 = (exp x)\n((%1 + y) * %1)");
    CHECK_OUT(ot_print, g,
              "%1 = ({'shape': (2,), 'op': 'exp'}, x, None)\n"
              "({'shape': (2,), 'op': 'mul'}, ({'shape': (2,), 'op': 'add'}, %1, y), %1)");
    /* Unshared trees print as before; repeated leaves are not named. */
    CHECK_OUT(ot_pp, ot_add(ot_mul(x, x), ot_div(x, y)), "((x * x) + (x / y))");
    CHECK_OUT(ot_print, ot_add(x, x), "({'shape': (2,), 'op': 'add'}, x, x)");
    /* ot_pp follows a composite's own operands, ot_print its expansion. */
    CHECK_OUT(ot_pp, ot_softmax(ot_exp(x)), "(softmax (exp x))");
    char *s = test__capture(ot_print, ot_softmax(ot_exp(x)));
    CHECK(s && strncmp(s, "%1 = ", 5) == 0);
    free(s);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
}

TEST(defect10_deep_shared_chain)
{
    /* 100,000 levels, each used twice: 100,000 named lines, no recursion. */
    enum { DEPTH = 100000 };
    ot_backend *be = ref();
    ot_tensor *x = named(be, OT_SHAPE(2), "x");
    ot_pool *pool = ot_pool_push();
    ot_node *n = ot_tensor_node(x);
    for (int i = 0; i < DEPTH; i++) n = ot_mul(ot_neg(n), n);
    CHECK(n != NULL);
    char *s = test__capture(ot_pp, n);
    CHECK(s != NULL);
    if (s) {
        CHECK_INT(count(s, "\n"), DEPTH - 1);
        CHECK_INT(count(s, "(neg "), DEPTH);
        CHECK(strstr(s, "((neg %99999) * %99999)") != NULL);
    }
    free(s);
    s = test__capture(ot_print, n);
    CHECK(s && count(s, "'op': 'neg'") == DEPTH);
    free(s);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_backend_free(be);
}

/* ---- defect 11 ------------------------------------------------------------ */

TEST(defect11_threads_bounded)
{
    unsetenv("OT_BACKEND");
    const char *names[] = {"ref", "cpu"};
    int bad[] = {1 << 30, OT_MAX_THREADS + 1, -1, INT32_MAX};
    for (int i = 0; i < 2; i++)
        for (int k = 0; k < 4; k++) {
            ot_backend_opts o = {.threads = bad[k]};
            CHECK(ot_backend_new(names[i], &o) == NULL);
            CHECK_ERR(OT_EINVAL, "threads", "OT_MAX_THREADS");
        }
    ot_backend_opts o = {.threads = 4};
    ot_backend *be = ot_backend_new("cpu", &o);
    CHECK(be != NULL);
    CHECK_INT(ot_backend_options(be).threads, 4);
    ot_backend_free(be);
    /* All cores is capped too. */
    be = ot_backend_new("cpu", NULL);
    CHECK(be != NULL);
    CHECK(ot_backend_options(be).threads >= 1 &&
          ot_backend_options(be).threads <= OT_MAX_THREADS);
    ot_backend_free(be);
}

TEST(defect11_thread_pool_failures_clean)
{
    unsetenv("OT_BACKEND");
    ot_backend_opts o = {.threads = 8};
    /* Every allocation of the start-up failing in turn: OT_ENOMEM, no leak. */
    int failed = 0;
    for (long n = 1; n < 64; n++) {
        ot__alloc_fail_at(n);
        ot_backend *be = ot_backend_new("cpu", &o);
        ot__alloc_fail_at(0);
        if (be) {
            ot_backend_free(be);
            break;
        }
        failed++;
        CHECK_ERR(OT_ENOMEM, "out of memory");
    }
    CHECK(failed > 0);
#if !defined(__SANITIZE_ADDRESS__)
    /* Threads that cannot be started (no address space for their stacks):
     * the started ones are joined and the backend is refused. */
    FILE *sm = fopen("/proc/self/statm", "r");
    long pages = 0;
    CHECK(sm && fscanf(sm, "%ld", &pages) == 1);
    if (sm) fclose(sm);
    struct rlimit old, lim;
    CHECK_INT(getrlimit(RLIMIT_AS, &old), 0);
    lim = old;
    lim.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + ((rlim_t)64 << 20);
    CHECK_INT(setrlimit(RLIMIT_AS, &lim), 0);
    o.threads = OT_MAX_THREADS;
    ot_backend *be = ot_backend_new("cpu", &o);
    setrlimit(RLIMIT_AS, &old);
    CHECK(be == NULL);
    CHECK_ERR(OT_EUNSUPPORTED, "worker threads", "started");
    ot_backend_free(be);
#endif
}

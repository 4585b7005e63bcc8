/*
 * main.c - the test runner: runs every registered case in a child process
 * (a crash or hang fails that case only), then prints "N passed, N failed".
 * Arguments are substrings that select cases; OT_TEST_NOFORK=1 runs them in
 * process (for a debugger); OT_TEST_TIMEOUT=S replaces the 120 s limit per
 * case (tools/test_arm64.sh: emulated cases run far slower); OT_TEST_JOBS=N
 * runs N cases at a time (default: one per online CPU), each case's output
 * printed whole, with its result line (wall and CPU seconds), when it ends.
 */
#if defined(__SANITIZE_ADDRESS__)
#define _GNU_SOURCE   /* dl_iterate_phdr (populate_data) */
#endif
#define _POSIX_C_SOURCE 200809L
#include "test.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <time.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#if defined(__SANITIZE_ADDRESS__)
#include <link.h>
#include <sanitizer/lsan_interface.h>
#include <stdint.h>
#include <sys/mman.h>
/* A forked case ends in _exit, which skips LeakSanitizer's exit-time check;
 * run it explicitly so every case is checked for leaks on its own. */
static int leaked(void) { return __lsan_do_recoverable_leak_check(); }

/* The leak check reads every page of every module's data and bss (test
 * code's 12 MiB under ASan, UBSan's runtime's 6 MiB): pages the runner has
 * not written are absent from each forked child's page tables (fork copies
 * a mapping's entries only where it has written pages), so every case's
 * check faulted them in again: 66 ms a case where a fault costs 20 us.
 * Populating them for writing once here (MADV_POPULATE_WRITE: the pages
 * are made, their contents untouched, so no thread's data can change)
 * puts them in the page tables fork copies. A kernel without it (before
 * Linux 5.14) refuses, and the cases run as before. */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
static void populate(uintptr_t a, uintptr_t end)
{
    uintptr_t lo = a & ~(uintptr_t)4095, hi = (end + 4095) & ~(uintptr_t)4095;
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_POPULATE_WRITE);
}

static int populate_module(struct dl_phdr_info *m, size_t size, void *arg)
{
    (void)size, (void)arg;
    uintptr_t ro = 0, ro_end = 0;   /* read-only after relocation (written then) */
    for (int i = 0; i < m->dlpi_phnum; i++)
        if (m->dlpi_phdr[i].p_type == PT_GNU_RELRO) {
            ro = m->dlpi_addr + m->dlpi_phdr[i].p_vaddr;
            ro_end = ro + m->dlpi_phdr[i].p_memsz;
        }
    for (int i = 0; i < m->dlpi_phnum; i++) {
        const ElfW(Phdr) *ph = &m->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_W)) continue;
        uintptr_t a = m->dlpi_addr + ph->p_vaddr, end = a + ph->p_memsz;
        if (ro_end > a && ro < end) {   /* the part after the read-only one */
            populate(a, ro > a ? ro : a);
            populate(ro_end, end);
        } else {
            populate(a, end);
        }
    }
    return 0;
}

static void populate_data(void) { dl_iterate_phdr(populate_module, NULL); }
#else
static int leaked(void) { return 0; }
static void populate_data(void) {}
#endif

#define MAX_TESTS 2048
#define TIMEOUT_S 120
#define MAX_JOBS 64

typedef struct test_case { const char *name, *file; test_fn fn; } test_case;
static test_case cases[MAX_TESTS];
static int ncases;
static int failures;

void test__register(const char *name, const char *file, test_fn fn)
{
    if (ncases < MAX_TESTS)
        cases[ncases++] = (test_case){name, file, fn};
}

void test__fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "  %s:%d: ", file, line);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
    failures++;
}

int test__close(double a, double b, double tol)
{
    if (isnan(a) || isnan(b)) return isnan(a) && isnan(b);
    if (isinf(a) || isinf(b)) return a == b;
    double m = fmax(1.0, fmax(fabs(a), fabs(b)));
    return fabs(a - b) <= tol * m;
}

void test__check_err(const char *file, int line, int code, const char *const subs[])
{
    if (ot_errcode() != code) {
        test__fail(file, line, "error code %d (%s), expected %d (%s); message \"%s\"",
                   ot_errcode(), ot_strerror(ot_errcode()), code, ot_strerror(code),
                   ot_errmsg());
    }
    for (int i = 0; subs[i]; i++)
        if (!strstr(ot_errmsg(), subs[i]))
            test__fail(file, line, "message \"%s\" lacks \"%s\"", ot_errmsg(), subs[i]);
    ot_clear_error();
}

char *test__capture(int (*fn)(const ot_node *, FILE *), const ot_node *n)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    fn(n, f);
    fclose(f);
    return buf;
}

ot_tensor *test__ints(ot_backend *be, ot_shape s, ot_dtype dt, int seed, int mod, int off,
                      double scale)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    if (!v) {
        CHECK(v != NULL);
        return NULL;
    }
    for (int64_t i = 0; i < n; i++) v[i] = (double)((i * 7 + seed * 13) % mod - off) * scale;
    ot_tensor *t = ot_array(be, s, OT_F64, v);
    ot_tensor *r = ot_empty(be, s, dt);
    CHECK_INT(ot_assign(r, ot_cast(t, dt)), 0);
    ot_tensor_free(t);
    free(v);
    return r;
}

ot_tensor *test__uniform(ot_backend *be, ot_shape s, ot_dtype dt, uint32_t seed, double lo,
                         double hi)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    double *v = malloc(sizeof *v * (size_t)(n ? n : 1));
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        v[i] = lo + (hi - lo) * (seed >> 8) / (double)(1 << 24);
    }
    ot_tensor *t = ot_array(be, s, OT_F64, v);
    free(v);
    if (dt == OT_F64) return t;
    ot_tensor *r = ot_empty(be, s, dt);
    CHECK_INT(ot_assign(r, ot_cast(t, dt)), 0);
    ot_tensor_free(t);
    return r;
}

char *test__explain_many(int n, ot_tensor *const outs[], ot_node *const trees[])
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    int rc = ot_explain_many(n, outs, trees, f);
    fclose(f);
    if (rc == 0) return buf;
    free(buf);
    return NULL;
}

void test__env_save(int n, const char *const names[], char *saved[], const char *const values[])
{
    for (int i = 0; i < n; i++) {
        const char *v = getenv(names[i]);
        saved[i] = v ? strdup(v) : NULL;
        if (values && values[i]) setenv(names[i], values[i], 1);
        else unsetenv(names[i]);
    }
}

void test__env_restore(int n, const char *const names[], char *saved[])
{
    for (int i = 0; i < n; i++) {
        if (saved[i]) setenv(names[i], saved[i], 1);
        else unsetenv(names[i]);
        free(saved[i]);
    }
}

ot_backend *test__backend(const char *name, int fusion)
{
    unsetenv("OT_BACKEND");
    unsetenv("OT_FUSION");
    ot_backend *be = ot_backend_new(name, &(ot_backend_opts){.fusion = fusion, .threads = 2});
    if (!be) test__fail(__FILE__, __LINE__, "backend %s: %s", name, ot_errmsg());
    return be;
}

static int selected(const test_case *c, int argc, char **argv)
{
    if (argc < 2) return 1;
    for (int i = 1; i < argc; i++)
        if (strstr(c->name, argv[i]) || strstr(c->file, argv[i])) return 1;
    return 0;
}

static int run_in_process(const test_case *c)
{
    failures = 0;
    c->fn();
    ot_pool_drain();
    ot_clear_error();
    return failures == 0;
}

/* Seconds since an earlier now_s(), for each case's result line: the
 * suite's time is the sum of its cases', and this says where it goes. */
static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* CPU seconds (user + system) of the children reaped so far, or of this
 * process: a case's CPU time is the difference across its reaping, which
 * says what a case costs on a loaded machine, where its wall time does not. */
static double cpu_s(int who)
{
    struct rusage u;
    if (getrusage(who, &u) != 0) return 0;
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

static void print_result(const test_case *c, int ok, double secs, double cpu)
{
    printf("%s %s (%s) %.1f s, %.1f s cpu\n", ok ? "[ OK ]" : "[FAIL]", c->name, c->file,
           secs, cpu);
    fflush(stdout);
}

/* A case running in a child: its output goes to a private file, copied to
 * stdout with the case's result line when it ends, so that cases running
 * side by side never interleave their messages. */
typedef struct running { pid_t pid; const test_case *c; FILE *out; double t0; } running;

static void start_child(const test_case *c, running *r)
{
    r->c = c;
    r->t0 = now_s();
    r->out = tmpfile();
    fflush(NULL);
    r->pid = fork();
    if (r->pid != 0) return;
    if (r->out) {
        dup2(fileno(r->out), STDOUT_FILENO);
        dup2(fileno(r->out), STDERR_FILENO);
    }
    const char *t = getenv("OT_TEST_TIMEOUT");
    alarm(t && atoi(t) > 0 ? (unsigned)atoi(t) : TIMEOUT_S);
    int ok = run_in_process(c);
    fflush(NULL);
    _exit(ok && !leaked() ? 0 : 1);
}

/* Prints a finished case's output and result line; returns whether it passed. */
static int finish_child(running *r, int status, double cpu)
{
    if (r->out) {
        char buf[4096];
        size_t n;
        rewind(r->out);
        while ((n = fread(buf, 1, sizeof buf, r->out)) > 0) fwrite(buf, 1, n, stdout);
        fclose(r->out);
    }
    if (WIFSIGNALED(status))
        printf("  killed by signal %d%s\n", WTERMSIG(status),
               WTERMSIG(status) == SIGALRM ? " (timeout)" : "");
    int ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    print_result(r->c, ok, now_s() - r->t0, cpu);
    return ok;
}

/* Waits for one of the n running children, reports it and drops it from
 * the list; returns whether it passed. */
static int reap_one(running *run, int *n)
{
    int status = 0;
    pid_t pid;
    double cpu0 = cpu_s(RUSAGE_CHILDREN);
    while ((pid = waitpid(-1, &status, 0)) < 0 && errno == EINTR) continue;
    int i = 0;
    while (i < *n - 1 && run[i].pid != pid) i++;
    if (run[i].pid != pid) {   /* waitpid failed: a case whose end is unknown fails */
        printf("  waitpid: %s\n", strerror(errno));
        status = 1 << 8;
    }
    int ok = finish_child(&run[i], status, cpu_s(RUSAGE_CHILDREN) - cpu0);
    run[i] = run[--*n];
    return ok;
}

/* OT_TEST_JOBS cases at a time (default: one per online CPU). */
static int jobs(void)
{
    const char *j = getenv("OT_TEST_JOBS");
    long n = j && atoi(j) > 0 ? atoi(j) : sysconf(_SC_NPROCESSORS_ONLN);
    return n < 1 ? 1 : n > MAX_JOBS ? MAX_JOBS : (int)n;
}

int main(int argc, char **argv)
{
    int nofork = getenv("OT_TEST_NOFORK") && atoi(getenv("OT_TEST_NOFORK"));
    int maxrun = jobs(), nrun = 0, passed = 0, failed = 0;
    running run[MAX_JOBS];
    if (!nofork) populate_data();
    for (int i = 0; i < ncases; i++) {
        const test_case *c = &cases[i];
        if (!selected(c, argc, argv)) continue;
        if (!nofork) {
            if (nrun == maxrun) {
                if (reap_one(run, &nrun)) passed++;
                else failed++;
            }
            start_child(c, &run[nrun]);
            if (run[nrun].pid > 0) {
                nrun++;
                continue;
            }
            if (run[nrun].out) fclose(run[nrun].out);   /* no fork: run it here */
        }
        double t0 = now_s(), cpu0 = cpu_s(RUSAGE_SELF);
        int ok = run_in_process(c);
        print_result(c, ok, now_s() - t0, cpu_s(RUSAGE_SELF) - cpu0);
        if (ok) passed++;
        else failed++;
    }
    while (nrun > 0) {
        if (reap_one(run, &nrun)) passed++;
        else failed++;
    }
    printf("%d passed, %d failed\n", passed, failed);
    fflush(stdout);
    return failed ? 1 : 0;
}

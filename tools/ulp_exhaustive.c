/*
 * ulp_exhaustive.c - the f32 accuracy of exp, log, tanh and sig as the cpu
 * backend computes them, over every one of the 2^32 inputs: through the
 * tile kernels of each ISA table and, on AVX2 and AVX-512, through
 * generated code, at OT_ULP10 (or OT_ULP35 with --acc 35). Built and run
 * by `make ulp-exhaustive` (minutes: not part of make test); prints one
 * line per function, table and path: the largest error in ULPs, where, and
 * how many results are off by more than 1 ULP, and how many special
 * values (NaN, inf, 0) are wrong.
 *
 * The reference is C's double function (sig: 1 / (1 + exp(-x)) in
 * double), within 1 double ULP of the true value: 2^-29 of an f32 ULP,
 * so a printed error is the true one to 2^-28. The ULP is that of the
 * binade of the exact value (below 2^-126 it is 2^-149); where the exact
 * value is past FLT_MAX by half an ULP or more the only right result is
 * inf.  Inputs are split over --jobs processes (default: the CPUs);
 * --sample n looks at every n-th chunk of 2^22 inputs only.
 */
#define _DEFAULT_SOURCE
#include "optree.h"

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define CHUNK_BITS 22
#define NCHUNK (1u << (32 - CHUNK_BITS))

typedef struct stats {
    double worst;       /* largest error in ULPs */
    uint32_t where;     /* its input's bits */
    uint64_t over1;     /* results more than 1 ULP off */
    uint64_t special;   /* NaN where not NaN and back, or a wrong inf */
} stats;

static const char *const fns[] = {"exp", "log", "tanh", "sig"};
enum { NFN = sizeof fns / sizeof fns[0] };

static double reference(int f, double x)
{
    switch (f) {
    case 0: return exp(x);
    case 1: return log(x);
    case 2: return tanh(x);
    default: return 1 / (1 + exp(-x));
    }
}

static ot_node *apply(int f, ot_tensor *x)
{
    switch (f) {
    case 0: return ot_exp(x);
    case 1: return ot_log(x);
    case 2: return ot_tanh(x);
    default: return ot_sig(x);
    }
}

/* The error of got against the double t, in ULPs of t's binade. */
static double ulp_error(float got, double t)
{
    double a = fabs(t), ulp = 0x1p-149;
    if (a >= 0x1p-126) {
        int e;
        frexp(a, &e);
        ulp = ldexp(1.0, e - 24);
    }
    return fabs((double)got - t) / ulp;
}

static void score(stats *s, uint32_t bits, float got, double t)
{
    if (isnan(t) || isnan(got)) {
        s->special += !isnan(t) != !isnan(got);
        return;
    }
    bool inf = isinf(t) || fabs(t) >= (double)FLT_MAX + 0x1p103;   /* rounds to inf */
    if (inf || isinf(got)) {
        s->special += !(inf && isinf(got) && (got > 0) == (t > 0));
        return;
    }
    double e = ulp_error(got, t);
    if (e > 1) s->over1++;
    if (e > s->worst) s->worst = e, s->where = bits;
}

/* Chunks w, w + jobs, ... of function f on one backend. */
static unsigned sample = 1;   /* --sample n: every n-th chunk only (a quick look) */

static int worker(int f, const ot_backend_opts *o, unsigned w, unsigned jobs, stats *s)
{
    ot_pool *pool = ot_pool_push();
    ot_backend *be = ot_backend_new("cpu", o);
    ot_tensor *x = be ? ot_empty(be, OT_SHAPE(1 << CHUNK_BITS), OT_F32) : NULL;
    ot_tensor *y = be ? ot_empty(be, OT_SHAPE(1 << CHUNK_BITS), OT_F32) : NULL;
    if (!x || !y) return fprintf(stderr, "ulp_exhaustive: %s\n", ot_errmsg()), 1;
    uint32_t *in = ot_tensor_data(x);
    const float *out = ot_tensor_data(y);
    for (uint32_t c = w * sample; c < NCHUNK; c += jobs * sample) {
        for (uint32_t i = 0; i < 1u << CHUNK_BITS; i++) in[i] = c << CHUNK_BITS | i;
        ot_pool *p = ot_pool_push();
        int rc = ot_assign(y, apply(f, x));
        ot_pool_pop(p);
        if (rc) return fprintf(stderr, "ulp_exhaustive: %s\n", ot_errmsg()), 1;
        const float *xf = (const float *)in;
        for (uint32_t i = 0; i < 1u << CHUNK_BITS; i++)
            score(s, in[i], out[i], reference(f, (double)xf[i]));
    }
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_backend_free(be);
    ot_pool_pop(pool);
    return 0;
}

/* One line: function f on isa through code (jit) or the tile kernels. */
static int run(int f, const char *isa, bool jit, int acc, unsigned jobs)
{
    ot_backend_opts o = {.threads = 1, .accuracy = acc, .isa = isa,
                         .jit = jit ? OT_JIT_ON : OT_JIT_OFF};
    int fd[2];
    if (pipe(fd)) return 1;
    for (unsigned w = 0; w < jobs; w++)
        if (fork() == 0) {
            stats s = {0};
            int rc = worker(f, &o, w, jobs, &s);
            if (write(fd[1], &s, sizeof s) != (ssize_t)sizeof s) rc = 1;
            _exit(rc);
        }
    close(fd[1]);
    stats all = {0}, s;
    unsigned got = 0;
    while (read(fd[0], &s, sizeof s) == (ssize_t)sizeof s) {
        got++;
        all.over1 += s.over1, all.special += s.special;
        if (s.worst > all.worst) all.worst = s.worst, all.where = s.where;
    }
    close(fd[0]);
    int status, bad = 0;
    while (wait(&status) > 0) bad |= !WIFEXITED(status) || WEXITSTATUS(status);
    if (bad || got != jobs) return fprintf(stderr, "ulp_exhaustive: %s %s failed\n", fns[f], isa), 1;
    float at;
    memcpy(&at, &all.where, sizeof at);
    printf("%-5s u%s %-7s %-5s max %.4f ULP at %a, > 1 ULP: %llu, wrong specials: %llu\n", fns[f],
           acc ? "35" : "10", isa, jit ? "code" : "tiles", all.worst, (double)at,
           (unsigned long long)all.over1, (unsigned long long)all.special);
    fflush(stdout);
    return all.special != 0;
}

static bool listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)) != NULL; p += n)
        if ((p == list || p[-1] == ',') && (p[n] == ',' || p[n] == 0)) return true;
    return false;
}

int main(int argc, char **argv)
{
    const char *fnl = "exp,log,tanh,sig", *isal = "scalar,sse2,avx2,avx512";
    int acc = OT_ULP10;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    unsigned jobs = cpus > 0 ? (unsigned)cpus : 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--fn")) fnl = argv[i + 1];
        else if (!strcmp(argv[i], "--isa")) isal = argv[i + 1];
        else if (!strcmp(argv[i], "--acc")) acc = atoi(argv[i + 1]) == 35 ? OT_ULP35 : OT_ULP10;
        else if (!strcmp(argv[i], "--jobs")) jobs = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sample")) sample = (unsigned)atoi(argv[i + 1]);
        else return fprintf(stderr, "usage: %s [--fn exp,log,tanh,sig] [--isa scalar,sse2,avx2,avx512] "
                                    "[--acc 10|35] [--jobs n] [--sample n]\n", argv[0]), 2;
    }
    static const char *const isas[] = {"scalar", "sse2", "avx2", "avx512"};
    int rc = 0;
    for (int f = 0; f < NFN; f++)
        for (int i = 0; i < 4 && listed(fnl, fns[f]); i++) {
            if (!listed(isal, isas[i])) continue;
            ot_backend *probe = ot_backend_new("cpu", &(ot_backend_opts){.isa = isas[i]});
            if (!probe) {
                printf("%-5s %s: not on this CPU\n", fns[f], isas[i]);
                continue;
            }
            ot_backend_free(probe);
            rc |= run(f, isas[i], false, acc, jobs ? jobs : 1);
            if (i >= 2) rc |= run(f, isas[i], true, acc, jobs ? jobs : 1);
        }
    if (sample > 1) printf("(every %u-th chunk of 2^22 inputs only)\n", sample);
    return rc;
}

/*
 * isa.c - the kernel tables of the cpu backend, one ISA at a time.
 *
 * Asks for each ISA by name (ot_backend_opts.isa; OT_ISA does the same
 * from the environment): a table this machine lacks is an OT_EUNSUPPORTED
 * error and is skipped, as neon on x86 or avx2 on aarch64. Each one runs
 * three expressions over the same inputs, and the results are compared
 * with the scalar table's. a*b + c is exact: bitwise the scalar result
 * (two roundings) where the ISA has no FMA (sse2), bitwise C's fmaf (one
 * rounding) where the planner contracts it into one FMA (avx2, avx512,
 * neon). exp and tanh(a*b + a/b) go through SLEEF: within a few ULPs.
 *
 *     ./isa                  every table, N = 100,003 (OT_EXAMPLE_SMALL: 1,003)
 *     ./isa neon 65536 exp 2 evaluates one expression (fma, exp or tanh)
 *                            on one table, as many times as asked: what
 *                            tools/test_arm64.sh counts instructions of
 *
 * Uses only include/optree.h; frees everything; runs clean under valgrind.
 */
#include "optree.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const isas[] = {"scalar", "sse2", "avx2", "avx512", "neon"};
#define NISA 5
static const char *const exprs[] = {"a*b + c", "exp(a)", "tanh(a*b + a/b)"};
static const char *const short_names[] = {"fma", "exp", "tanh"};
#define NEXPR 3

/* Inputs in [0.5, 1.5) (b never zero), from a fixed sequence. */
static float *inputs(size_t n, unsigned seed)
{
    float *v = malloc(n * sizeof *v);
    for (size_t i = 0; v && i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        v[i] = 0.5f + (float)(seed >> 8) / (float)(1u << 24);
    }
    return v;
}

/* expr on the cpu backend with that isa over n elements, evaluated reps
 * times, the last result into out; 1 when the table is missing here, -1 on
 * any other error. */
static int run(const char *isa, const char *expr, size_t n, int reps, float *const in[3],
               float *out)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.isa = isa, .threads = 1});
    if (!be) {
        int missing = ot_errcode() == OT_EUNSUPPORTED;
        if (!missing) printf("  %s: %s\n", isa, ot_errmsg());
        ot_clear_error();
        return missing ? 1 : -1;
    }
    ot_tensor *t[3];
    ot_node *nodes[3];
    for (int k = 0; k < 3; k++) t[k] = ot_array(be, OT_SHAPE((int64_t)n), OT_F32, in[k]);
    ot_tensor *y = NULL;
    for (int r = 0; r < reps; r++) {
        ot_tensor_free(y);
        ot_pool *pool = ot_pool_push();
        for (int k = 0; k < 3; k++) nodes[k] = ot_tensor_node(t[k]);
        y = ot_eval(ot_parse(expr, 3, (const char *[]){"a", "b", "c"}, nodes));
        ot_pool_pop(pool);
    }
    int rc = y && ot_get(y, out) == 0 ? 0 : -1;
    if (rc) printf("  %s %s: %s\n", isa, expr, ot_errmsg());
    ot_tensor_free(y);
    for (int k = 0; k < 3; k++) ot_tensor_free(t[k]);
    ot_backend_free(be);
    return rc;
}

/* The largest difference in units of the scalar result's last place. */
static double max_ulps(const float *got, const float *want, size_t n)
{
    double worst = 0;
    for (size_t i = 0; i < n; i++) {
        double ulp = nextafterf(fabsf(want[i]), INFINITY) - fabsf(want[i]);
        double e = fabs((double)got[i] - (double)want[i]) / ulp;
        if (e > worst) worst = e;
    }
    return worst;
}

/* Every table against the scalar one; 0 when all agree. */
static int compare_all(size_t n, float *const in[3], float *want, float *got)
{
    int bad = 0;
    printf("%-7s %-16s %s\n", "isa", "expression", "against scalar");
    for (int e = 0; e < NEXPR; e++) {
        if (run("scalar", exprs[e], n, 1, in, want)) return 1;
        for (int i = 1; i < NISA; i++) {
            int rc = run(isas[i], exprs[e], n, 1, in, got);
            if (rc > 0) continue;
            if (rc < 0) return 1;
            if (e == 0) {
                int same = memcmp(got, want, n * sizeof *got) == 0, fused = 1;
                for (size_t k = 0; k < n && !same; k++)
                    fused &= got[k] == fmaf(in[0][k], in[1][k], in[2][k]);
                printf("%-7s %-16s %s\n", isas[i], exprs[e],
                       same ? "bitwise equal" : fused ? "bitwise fmaf (contracted)" : "DIFFERENT");
                bad += !same && !fused;
            } else {
                double u = max_ulps(got, want, n);
                printf("%-7s %-16s %.1f ULP at most\n", isas[i], exprs[e], u);
                bad += !(u <= 4.0);
            }
        }
    }
    return bad != 0;
}

int main(int argc, char **argv)
{
    size_t n = getenv("OT_EXAMPLE_SMALL") ? 1003 : 100003;
    int one = argc == 4 || argc == 5, e = 0, reps = argc == 5 ? atoi(argv[4]) : 1;
    if (one) {
        n = (size_t)strtoull(argv[2], NULL, 10);
        while (e < NEXPR && strcmp(argv[3], short_names[e]) != 0) e++;
        if (e == NEXPR || n == 0 || reps < 1) {
            fprintf(stderr, "usage: %s [ISA N fma|exp|tanh [REPS]]\n", argv[0]);
            return 2;
        }
    }
    float *in[3] = {inputs(n, 1), inputs(n, 2), inputs(n, 3)};
    float *want = malloc(n * sizeof *want), *got = malloc(n * sizeof *got);
    int rc = 1;
    if (in[0] && in[1] && in[2] && want && got)
        rc = one ? run(argv[1], exprs[e], n, reps, in, got) != 0 : compare_all(n, in, want, got);
    for (int k = 0; k < 3; k++) free(in[k]);
    free(want);
    free(got);
    return rc;
}

/*
 * math_speed.c - the speed of the cpu backend's f32 transcendentals at the
 * default accuracy (u10) against SLEEF's u10 functions of the same ISA, in
 * one process: for each table this CPU has, y = f(x) over n floats in
 * cache through the tile kernels (OT_JIT_OFF) and through generated code
 * (AVX2, AVX-512), and a hand loop calling SLEEF's vector function over
 * the same arrays (sig: SLEEF's exp in the formula optree used before);
 * the runs interleaved, --runs times (default 9), and the medians printed as ns per element and the ratio SLEEF / optree (above 1
 * optree is faster). Built and run by `make math-speed` (not make test).
 */
#define _POSIX_C_SOURCE 200809L
#include "optree.h"

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* SLEEF's u10 functions, declared here so that each is called from a
 * function compiled for its ISA only (sleef.h declares them by the flags
 * of the whole file). */
float Sleef_expf_u10(float);
float Sleef_logf_u10(float);
float Sleef_tanhf_u10(float);
__m128 Sleef_expf4_u10sse2(__m128);
__m128 Sleef_logf4_u10sse2(__m128);
__m128 Sleef_tanhf4_u10sse2(__m128);
__attribute__((target("avx2,fma"))) __m256 Sleef_expf8_u10avx2(__m256);
__attribute__((target("avx2,fma"))) __m256 Sleef_logf8_u10avx2(__m256);
__attribute__((target("avx2,fma"))) __m256 Sleef_tanhf8_u10avx2(__m256);
__attribute__((target("avx512f"))) __m512 Sleef_expf16_u10avx512f(__m512);
__attribute__((target("avx512f"))) __m512 Sleef_logf16_u10avx512f(__m512);
__attribute__((target("avx512f"))) __m512 Sleef_tanhf16_u10avx512f(__m512);

static const char *const fns[] = {"exp", "log", "tanh", "sig"};
enum { SIG = 3 };   /* SLEEF has none: its exp u10 in optree's former formula */
static const char *const isas[] = {"scalar", "sse2", "avx2", "avx512"};

/* sig(x) = (x < 0 ? e : 1) / (1 + e), e = exp(-|x|): what optree computed
 * over its own exp before f32 sig's correction step (1.25 ULP). */
static void sleef_scalar(int f, float *y, const float *x, size_t n)
{
    float (*g)(float) = f == 0 || f == SIG ? Sleef_expf_u10 : f == 1 ? Sleef_logf_u10 : Sleef_tanhf_u10;
    if (f == SIG)
        for (size_t i = 0; i < n; i++) {
            float e = g(-__builtin_fabsf(x[i]));
            y[i] = (x[i] < 0 ? e : 1) / (1 + e);
        }
    else
        for (size_t i = 0; i < n; i++) y[i] = g(x[i]);
}
static void sleef_sse2(int f, float *y, const float *x, size_t n)
{
    __m128 (*g)(__m128) = f == 0 ? Sleef_expf4_u10sse2 : f == 1 ? Sleef_logf4_u10sse2
                                                                : Sleef_tanhf4_u10sse2;
    const __m128 one = _mm_set1_ps(1), sign = _mm_set1_ps(-0.0f);
    for (size_t i = 0; i < n; i += 4) {
        __m128 v = _mm_loadu_ps(x + i);
        if (f == SIG) {
            __m128 e = Sleef_expf4_u10sse2(_mm_or_ps(v, sign)), neg = _mm_cmplt_ps(v, _mm_setzero_ps());
            v = _mm_div_ps(_mm_or_ps(_mm_and_ps(neg, e), _mm_andnot_ps(neg, one)), _mm_add_ps(one, e));
        } else {
            v = g(v);
        }
        _mm_storeu_ps(y + i, v);
    }
}
__attribute__((target("avx2,fma"))) static void sleef_avx2(int f, float *y, const float *x, size_t n)
{
    const __m256 one = _mm256_set1_ps(1), sign = _mm256_set1_ps(-0.0f);
    for (size_t i = 0; i < n; i += 8) {
        __m256 v = _mm256_loadu_ps(x + i);
        if (f == SIG) {
            __m256 e = Sleef_expf8_u10avx2(_mm256_or_ps(v, sign));
            v = _mm256_div_ps(_mm256_blendv_ps(one, e, v), _mm256_add_ps(one, e));
        } else {
            v = f == 0 ? Sleef_expf8_u10avx2(v) : f == 1 ? Sleef_logf8_u10avx2(v) : Sleef_tanhf8_u10avx2(v);
        }
        _mm256_storeu_ps(y + i, v);
    }
}
__attribute__((target("avx512f"))) static void sleef_avx512(int f, float *y, const float *x, size_t n)
{
    const __m512 one = _mm512_set1_ps(1), zero = _mm512_setzero_ps();
    for (size_t i = 0; i < n; i += 16) {
        __m512 v = _mm512_loadu_ps(x + i);
        if (f == SIG) {
            __m512 e = Sleef_expf16_u10avx512f(_mm512_min_ps(v, _mm512_sub_ps(zero, v)));
            __mmask16 neg = _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ);
            v = _mm512_div_ps(_mm512_mask_blend_ps(neg, one, e), _mm512_add_ps(one, e));
        } else {
            v = f == 0 ? Sleef_expf16_u10avx512f(v) : f == 1 ? Sleef_logf16_u10avx512f(v)
                                                             : Sleef_tanhf16_u10avx512f(v);
        }
        _mm512_storeu_ps(y + i, v);
    }
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static ot_node *apply(int f, ot_tensor *x)
{
    return f == 0 ? ot_exp(x) : f == 1 ? ot_log(x) : f == 2 ? ot_tanh(x) : ot_sig(x);
}

/* Median seconds per call of the three ways (SLEEF, tiles, code), each
 * timed over reps calls, interleaved runs times. */
static int measure(int f, int isa, size_t n, int runs, double med[3])
{
    enum { MAXRUNS = 64 };
    ot_backend *be[2];
    ot_tensor *x[2], *y[2];
    for (int j = 0; j < 2; j++) {
        ot_backend_opts o = {.threads = 1, .isa = isas[isa], .jit = j ? OT_JIT_ON : OT_JIT_OFF};
        be[j] = ot_backend_new("cpu", &o);
        if (!be[j]) return 1;
        x[j] = ot_empty(be[j], OT_SHAPE((int64_t)n), OT_F32);
        y[j] = ot_empty(be[j], OT_SHAPE((int64_t)n), OT_F32);
        float *xd = ot_tensor_data(x[j]);
        for (size_t i = 0; i < n; i++)  /* exp, sig: [-20, 20); log: (0, 40); tanh: [-5, 5) */
            xd[i] = f == 1 ? 40.0f * (i + 0.5f) / n : (f == 2 ? 10.0f : 40.0f) * ((float)i / n - 0.5f);
    }
    ot_node *t[2] = {apply(f, x[0]), apply(f, x[1])};
    float *buf = malloc(n * sizeof *buf);
    const float *xs = ot_tensor_data(x[0]);
    double s[3][MAXRUNS];
    int reps = (int)(20000000 / n) + 1;
    if (runs > MAXRUNS) runs = MAXRUNS;
    for (int r = 0; r < runs; r++)
        for (int w = 0; w < 3; w++) {
            double t0 = now();
            for (int k = 0; k < reps; k++) {
                if (w > 0) ot_assign(y[w - 1], t[w - 1]);
                else if (isa == 0) sleef_scalar(f, buf, xs, n);
                else if (isa == 1) sleef_sse2(f, buf, xs, n);
                else if (isa == 2) sleef_avx2(f, buf, xs, n);
                else sleef_avx512(f, buf, xs, n);
            }
            s[w][r] = (now() - t0) / reps;
        }
    for (int w = 0; w < 3; w++) {
        qsort(s[w], (size_t)runs, sizeof s[w][0], cmp);
        med[w] = s[w][runs / 2];
    }
    free(buf);
    for (int j = 0; j < 2; j++) ot_backend_free(be[j]);
    return 0;
}

int main(int argc, char **argv)
{
    size_t n = 1 << 14;
    int runs = 9;
    const char *only = NULL;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--n")) n = (size_t)atol(argv[i + 1]) & ~(size_t)15;
        else if (!strcmp(argv[i], "--runs")) runs = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--fn")) only = argv[i + 1];
        else return fprintf(stderr, "usage: %s [--n elements] [--runs r] [--fn exp|log|tanh|sig]\n", argv[0]), 2;
    }
    if (n < 16 || runs < 1) return fprintf(stderr, "math_speed: bad --n or --runs\n"), 2;
    ot_pool *pool = ot_pool_push();
    printf("f32 u10, %zu elements, medians of %d interleaved runs, ns per element; "
           "ratio = SLEEF / optree (> 1: optree faster)\n", n, runs);
    printf("%-5s %-7s %8s %8s %8s %7s %7s\n", "fn", "table", "SLEEF", "tiles", "code", "tiles", "code");
    for (int f = 0; f < 4; f++)
        for (int i = 0; i < 4; i++) {
            if (only && strcmp(only, fns[f])) continue;
            ot_backend *probe = ot_backend_new("cpu", &(ot_backend_opts){.isa = isas[i]});
            if (!probe) continue;
            ot_backend_free(probe);
            double m[3];
            if (measure(f, i, n, runs, m)) return fprintf(stderr, "math_speed: %s\n", ot_errmsg()), 1;
            bool code = i >= 2;
            printf("%-5s %-7s %8.3f %8.3f %8.3f %7.2f %7.2f\n", fns[f], isas[i], 1e9 * m[0] / n,
                   1e9 * m[1] / n, code ? 1e9 * m[2] / n : 0.0, m[0] / m[1], code ? m[0] / m[2] : 0.0);
            fflush(stdout);
        }
    ot_pool_pop(pool);
    return 0;
}

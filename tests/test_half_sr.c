/*
 * test_half_sr.c - stochastic rounding into f16/bf16 (issue 36): unbiased
 * (the mean error of 10^7 roundings of one value within 3 standard errors
 * of zero, on cpu; 10^6 on ref), the same bits at 1 and 3 threads and for
 * the same seed, other bits for another seed, NaN, infinities and exact
 * values unchanged, the backend option and its environment variable, and
 * round to nearest even as the default.
 */
#include "test.h"
#include "internal.h"

#include <stdint.h>
#include <stdlib.h>

static float bits_f(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof f);
    return f;
}

static float widen(ot_dtype dt, uint16_t h)
{
    return dt == OT_BF16 ? ot__bf16_to_f32(h) : ot__f16_to_f32(h);
}

/* Whether the mean of n stochastic roundings of v (read back from t) is
 * within 3 standard errors of v; lo and hi are the values around v. */
static bool unbiased(const ot_tensor *t, ot_dtype dt, double v, double lo, double hi, int64_t n)
{
    uint16_t *h = malloc(sizeof *h * (size_t)n);
    if (!h || ot_get_raw(t, h)) {
        free(h);
        return false;
    }
    double sum = 0;
    int64_t other = 0;
    for (int64_t i = 0; i < n; i++) {
        double w = widen(dt, h[i]);
        sum += w - v;
        other += w != lo && w != hi;
    }
    free(h);
    double p = (v - lo) / (hi - lo), se = sqrt(p * (1 - p) / (double)n) * (hi - lo);
    return other == 0 && fabs(sum / (double)n) <= 3 * se;
}

/* One value rounded n times into dt on be, by ot_assign_sr. */
static bool mean_ok(ot_backend *be, ot_dtype dt, float v, int64_t n)
{
    ot_tensor *x = ot_full(be, OT_SHAPE(n), OT_F32, v), *o = ot_empty(be, OT_SHAPE(n), dt);
    bool ok = x && o && ot_assign_sr(o, x, 42) == 0;
    uint16_t down = dt == OT_BF16 ? ot__f32_to_bf16(v) : ot__f32_to_f16(v);
    if (widen(dt, down) > v) down--;   /* positive v: the pattern below */
    ok = ok && unbiased(o, dt, v, widen(dt, down), widen(dt, (uint16_t)(down + 1)), n);
    ot_tensor_free(x);
    ot_tensor_free(o);
    return ok;
}

TEST(half_sr_unbiased_cpu)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    CHECK(be);
    CHECK(mean_ok(be, OT_BF16, 0.1f, 10000000));
    CHECK(mean_ok(be, OT_F16, 0.1f, 10000000));
    CHECK(mean_ok(be, OT_F16, 3e-6f, 1000000));   /* an f16 subnormal */
    ot_backend_free(be);
}

TEST(half_sr_unbiased_ref)
{
    ot_backend *be = ot_backend_new("ref", NULL);
    CHECK(be);
    CHECK(mean_ok(be, OT_BF16, 1.2345f, 1000000));
    CHECK(mean_ok(be, OT_F16, 1.2345f, 1000000));
    ot_backend_free(be);
}

/* The scalar rounding on values it must not change, and both neighbours
 * reachable for one that is not exact. */
TEST(half_sr_specials)
{
    static const uint32_t keep[] = {0x00000000, 0x80000000, 0x3f800000, 0xc0400000,
                                    0x7f800000, 0xff800000, 0x33800000};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        for (uint32_t r = 0; r < 64; r++) {
            float f = bits_f(keep[i]);
            uint32_t bits = ot__sr_bits(7, r);
            CHECK(ot__f32_to_f16_sr(f, bits) == ot__f32_to_f16(f));
            CHECK(ot__f32_to_bf16_sr(f, bits) == ot__f32_to_bf16(f));
        }
    float nan = bits_f(0x7fc01234);
    CHECK(ot__f32_to_f16_sr(nan, 0xffffffffu) == ot__f32_to_f16(nan));
    CHECK(ot__f32_to_bf16_sr(nan, 0xffffffffu) == ot__f32_to_bf16(nan));
    CHECK(ot__f64_to_half_sr(OT_F16, NAN, 0xffffffffu) == ot__f64_to_f16(NAN));
    CHECK(ot__f64_to_half_sr(OT_BF16, 1.0, 0xffffffffu) == 0x3f80);
    /* 1 + 2^-12 lies a quarter of the way from 1 to 1 + 2^-10 in f16:
     * large bits round up, small ones down (the bits are added below the
     * kept ones) */
    CHECK(ot__f32_to_f16_sr(1.0f + 0x1p-12f, 0) == 0x3c00);
    CHECK(ot__f32_to_f16_sr(1.0f + 0x1p-12f, 0xffffffffu) == 0x3c01);
    CHECK(ot__f32_to_f16_sr(1.0f + 0x1p-12f, 0xbfffffffu) == 0x3c00);
    CHECK(ot__f32_to_f16_sr(1.0f + 0x1p-12f, 0xc0000000u) == 0x3c01);
    CHECK(ot__f32_to_f16_sr(-1.0f - 0x1p-12f, 0xffffffffu) == 0xbc01);   /* the magnitude */
    CHECK(ot__f32_to_f16_sr(0x1p-26f, 0xbfffffffu) == 0x0000);   /* subnormal: a quarter */
    CHECK(ot__f32_to_f16_sr(0x1p-26f, 0xc0000000u) == 0x0001);
    /* past the largest finite: infinity with the distance's probability */
    CHECK(ot__f32_to_f16_sr(65520.0f, 0) == 0x7bff);
    CHECK(ot__f32_to_f16_sr(65520.0f, 0xffffffffu) == 0x7c00);
    CHECK(ot__f32_to_f16_sr(70000.0f, 0) == 0x7c00);
    CHECK(ot__f32_to_bf16_sr(bits_f(0x7f7fffff), 0) == 0x7f7f);
    CHECK(ot__f32_to_bf16_sr(bits_f(0x7f7fffff), 0xffffffffu) == 0x7f80);
}

/* tanh(a*b + c) into a bf16 output, its raw bits. */
static bool run_bits(int threads, int option, uint64_t seed, uint16_t out[], int64_t n)
{
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = threads, .seed = seed,
                                                              .stochastic_round = option});
    float *host = malloc(sizeof *host * (size_t)n);
    for (int64_t i = 0; host && i < n; i++) host[i] = (float)((i * 7919) % 1000) * 1e-3f;
    ot_tensor *a = be && host ? ot_array(be, OT_SHAPE(n), OT_F32, host) : NULL;
    ot_tensor *b = a ? ot_full(be, OT_SHAPE(n), OT_F32, 0.7) : NULL;
    ot_tensor *o = b ? ot_empty(be, OT_SHAPE(n), OT_BF16) : NULL;
    free(host);
    bool ok = o != NULL;
    for (int k = 0; k < 2 && ok; k++)   /* the second assignment: the option's next stream */
        ok = (option ? ot_assign(o, ot_tanh(ot_add(ot_mul(a, b), 0.25f)))
                     : ot_assign_sr(o, ot_tanh(ot_add(ot_mul(a, b), 0.25f)), seed)) == 0;
    ok = ok && ot_get_raw(o, out) == 0;
    ot_tensor_free(a);
    ot_tensor_free(b);
    ot_tensor_free(o);
    ot_backend_free(be);
    return ok;
}

TEST(half_sr_threads_and_seeds)
{
    enum { N = 300001 };
    uint16_t *x = malloc(4 * sizeof *x * N);
    CHECK(x);
    if (!x) return;
    uint16_t *y = x + N, *z = y + N, *w = z + N;
    for (int option = 0; option < 2; option++) {
        CHECK(run_bits(1, option, 5, x, N));
        CHECK(run_bits(3, option, 5, y, N));
        CHECK(run_bits(3, option, 6, z, N));
        CHECK(memcmp(x, y, sizeof *x * N) == 0);   /* threads do not matter */
        CHECK(memcmp(x, z, sizeof *x * N) != 0);   /* the seed does */
    }
    CHECK(run_bits(2, 0, 5, w, N));
    CHECK(memcmp(w, y, sizeof *x * N) != 0);   /* the option's stream is the count's, not the call's */
    free(x);
}

/* Without the option or ot_assign_sr, stores round to nearest even; the
 * option is checked and comes from OT_STOCHASTIC_ROUND too. */
TEST(half_sr_default_and_option)
{
    ot_backend *be = ot_backend_new("cpu", NULL);
    CHECK(be && ot_backend_options(be).stochastic_round == 0);
    ot_tensor *x = ot_full(be, OT_SHAPE(1000), OT_F32, 0.1), *o = ot_empty(be, OT_SHAPE(1000), OT_F16);
    uint16_t h[1000];
    CHECK(ot_assign(o, x) == 0 && ot_get_raw(o, h) == 0);
    bool all = true;
    for (int i = 0; i < 1000; i++) all = all && h[i] == ot__f32_to_f16(0.1f);
    CHECK(all);
    ot_tensor_free(x);
    ot_tensor_free(o);
    ot_backend_free(be);
    CHECK(!ot_backend_new("ref", &(ot_backend_opts){.stochastic_round = 2}));
    CHECK_ERR(OT_EINVAL, "stochastic_round must be 0 or 1");
    setenv("OT_STOCHASTIC_ROUND", "1", 1);
    be = ot_backend_new("ref", NULL);
    unsetenv("OT_STOCHASTIC_ROUND");
    CHECK(be && ot_backend_options(be).stochastic_round == 1);
    ot_backend_free(be);
}

/* The vector code (AVX2, where the CPU has it) gives the scalar code's
 * bits: random patterns over the whole f32 range, subnormals, NaNs and
 * infinities among them, at indices crossing 2^32. */
TEST(half_sr_vector_is_scalar)
{
    enum { N = 1 << 16 };
    float *x = malloc(sizeof *x * N);
    uint16_t *a = malloc(sizeof *a * N), *b = malloc(sizeof *b * N);
    CHECK(x && a && b);
    uint64_t s = 99;
    for (int i = 0; x && i < N; i++) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        uint32_t bits = (uint32_t)(s >> 32);
        if (i % 4 == 1) bits = (bits & 0x87ffffffu) | 0x30000000u;   /* near f16's subnormals */
        if (i % 97 == 3) bits |= 0x7f800000u;                        /* NaN or inf */
        x[i] = bits_f(bits);
    }
    static const uint64_t firsts[] = {0, 5, 0xfffffffdull, 0x123456789ull};
    for (int dt = OT_F16; x && a && b && dt <= OT_BF16; dt++)
        for (size_t f = 0; f < sizeof firsts / sizeof firsts[0]; f++) {
            ot__half_narrow_sr_with(true, dt, x, a, N - (int)f, 0xabcdef12345ull, firsts[f]);
            ot__half_narrow_sr_with(false, dt, x, b, N - (int)f, 0xabcdef12345ull, firsts[f]);
            CHECK(memcmp(a, b, sizeof *a * (N - f)) == 0);
        }
    free(x);
    free(a);
    free(b);
}

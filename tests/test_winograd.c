/*
 * test_winograd.c - the cpu backend's Winograd path (src/cpu/exec_winograd.c):
 * f32 3x3 convs at stride 1 and their gradients (d/dinput runs a
 * conv_transpose through it, d/dweights its F(3x3,2x2) conv_wgrad) against
 * the ref backend in f64 on random
 * non-integer data: odd sizes, padding 0, 1, 2 and per side, size-1
 * spatial dims, batch 1 and several, channel counts off multiples of 16,
 * groups, a conv_transpose of its own; ot_explain naming the algorithm.
 */
#include "test.h"
#include "cpu.h"   /* ot__wino_gather_taps */

#include <stdlib.h>
#include <string.h>

typedef struct wcase {
    int64_t n, c, co, h, w;
    ot_conv_opts o;
    bool transpose;
} wcase;

static const wcase WCASES[] = {
    {2, 17, 19, 9, 11, {.pad = 1}, false},
    {1, 16, 16, 1, 1, {.pad = 1}, false},
    {3, 20, 16, 7, 7, {0}, false},
    {2, 16, 18, 6, 5, {.pad = 2}, false},
    {1, 18, 16, 8, 3, {.pad_lo = {0, 1}, .pad_hi = {2, 0}}, false},
    {2, 32, 34, 5, 6, {.pad = 1, .groups = 2}, false},
    {2, 16, 17, 5, 4, {.pad = 1}, true},
    {1, 16, 16, 5, 41, {.pad = 1}, false},             /* 21 tiles a row, odd width */
    {1, 16, 16, 4, 37, {.pad_lo = {1, 3}, .pad_hi = {0, 0}}, true},
    {2, 128, 128, 5, 2, {.pad = 1}, false},   /* many channels, narrow: the lanes */
    {1, 128, 130, 3, 2, {.pad = 1}, true},
    /* the lanes' padded input: padding per side, none, and a transpose's
     * (lh = 2 - lo = 0) */
    {2, 128, 128, 6, 2, {.pad_lo = {0, 1}, .pad_hi = {2, 0}}, false},
    {3, 128, 128, 4, 3, {0}, false},
    {2, 128, 128, 3, 4, {.pad = 2}, true},
};
#define NW (int)(sizeof WCASES / sizeof WCASES[0])

/* A tensor of random values in [-1, 1), the same (f32-exact) per seed in
 * either dtype. */
static ot_tensor *rnd(ot_backend *be, ot_shape s, ot_dtype dt, unsigned seed)
{
    int64_t n = 1;
    for (int d = 0; d < s.ndim; d++) n *= s.dims[d];
    double *v = malloc(sizeof *v * (size_t)n);
    float *f = malloc(sizeof *f * (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        seed = seed * 1103515245u + 12345u;
        f[i] = (float)((seed >> 8) % 65536) / 32768.0f - 1.0f;
        v[i] = f[i];
    }
    ot_tensor *t = ot_array(be, s, dt, dt == OT_F32 ? (void *)f : (void *)v);
    free(v);
    free(f);
    return t;
}

static double *host(ot_tensor *t)
{
    ot_tensor *c = ot_empty(ot_tensor_backend(t), ot_tensor_shape(t), OT_F64);
    CHECK_INT(ot_assign(c, ot_tensor_node(t)), 0);
    double *v = malloc(sizeof *v * (size_t)ot_tensor_numel(t));
    CHECK_INT(ot_get(c, v), 0);
    ot_tensor_free(c);
    return v;
}

static ot_node *build(const wcase *c, ot_node *x, ot_node *w)
{
    return c->transpose ? ot_conv_transpose_at(x, w, &c->o, __FILE__, __LINE__)
                        : ot_conv_at(x, w, &c->o, __FILE__, __LINE__);
}

/* The case's output and its gradients with respect to x and w (of
 * sum(y * r)) on be in dt; n[] gets their sizes; *explain, when not NULL,
 * ot_explain's text of the three trees. */
static void run_case(ot_backend *be, const wcase *c, ot_dtype dt, double *out[3], int64_t n[3],
                     char **explain)
{
    ot_pool *p = ot_pool_push();
    int64_t g = c->o.groups ? c->o.groups : 1;
    ot_shape xs = OT_SHAPE(c->n, c->c, c->h, c->w);
    ot_shape ws = c->transpose ? OT_SHAPE(c->c, c->co / g, 3, 3) : OT_SHAPE(c->co, c->c / g, 3, 3);
    ot_tensor *x = rnd(be, xs, dt, 1), *w = rnd(be, ws, dt, 2);
    ot_node *y = build(c, ot_tensor_node(x), ot_tensor_node(w));
    CHECK(y != NULL);
    ot_tensor *r = rnd(be, ot_node_shape(y), dt, 3);
    ot_autodiff *ad = ot_autodiff_new(ot_sum(ot_mul(y, r)), NULL);
    ot_node *trees[3] = {y, ot_autodiff_grad(ad, x), ot_autodiff_grad(ad, w)};
    ot_tensor *res[3];
    for (int i = 0; i < 3; i++) res[i] = ot_empty(be, ot_node_shape(trees[i]), dt);
    if (explain) *explain = test__explain_many(3, res, trees);
    for (int i = 0; i < 3; i++) {
        CHECK_INT(ot_assign(res[i], trees[i]), 0);
        out[i] = host(res[i]);
        n[i] = ot_tensor_numel(res[i]);
        ot_tensor_free(res[i]);
    }
    ot_autodiff_free(ad);
    ot_tensor_free(r);
    ot_pool_pop(p);
    ot_tensor_free(x);
    ot_tensor_free(w);
}

/* Whether a (cpu, f32) is b (ref, f64) within tol of b's largest
 * magnitude: Winograd's rounding is a dot product's, relative to the
 * terms' sizes rather than to each result's. */
static void compare(int k, int i, const double *a, const double *b, int64_t n, double tol)
{
    double scale = 1;
    for (int64_t e = 0; e < n; e++) scale = fmax(scale, fabs(b[e]));
    for (int64_t e = 0; e < n; e++)
        if (fabs(a[e] - b[e]) > tol * scale) {
            test__fail(__FILE__, __LINE__, "case %d result %d [%lld]: cpu f32 %.9g, ref f64 %.9g",
                       k, i, (long long)e, a[e], b[e]);
            return;
        }
}

TEST(winograd_matches_ref_f64)
{
    ot_backend *ref = test__backend("ref", OT_FUSION_ON), *cpu = test__backend("cpu", OT_FUSION_ON);
    for (int k = 0; k < NW; k++) {
        double *a[3], *b[3];
        int64_t n[3], nb[3];
        char *ex = NULL;
        run_case(cpu, &WCASES[k], OT_F32, a, n, &ex);
        run_case(ref, &WCASES[k], OT_F64, b, nb, NULL);
        /* the forward (or, transposed, the input gradient) is Winograd's,
         * and so is the weight gradient */
        CHECK(ex && strstr(ex, "winograd F(2x2,3x3)"));
        CHECK(ex && strstr(ex, "winograd F(3x3,2x2), weight gradient"));
        for (int i = 0; i < 3; i++) {
            CHECK(n[i] == nb[i]);
            compare(k, i, a[i], b[i], n[i] < nb[i] ? n[i] : nb[i], 2e-6);
            free(a[i]);
            free(b[i]);
        }
        free(ex);
    }
    ot_backend_free(ref);
    ot_backend_free(cpu);
}

/* Blocks of tiles that end inside a tile row (256 + 256 channels make a
 * block 128 tiles; an image here has 9 x 9), against the cpu backend's f64
 * conv (im2col + dgemm: not Winograd, and quick). */
TEST(winograd_blocks_split_tile_rows)
{
    ot_backend *cpu = test__backend("cpu", OT_FUSION_ON);
    const wcase c = {2, 256, 256, 18, 17, {.pad = 1}, false};
    double *a[3], *b[3];
    int64_t n[3], nb[3];
    char *ex = NULL;
    run_case(cpu, &c, OT_F32, a, n, &ex);
    run_case(cpu, &c, OT_F64, b, nb, NULL);
    CHECK(ex && strstr(ex, "winograd F(2x2,3x3)"));
    CHECK(ex && strstr(ex, "winograd F(3x3,2x2), weight gradient"));
    for (int i = 0; i < 3; i++) {
        CHECK(n[i] == nb[i]);
        compare(0, i, a[i], b[i], n[i] < nb[i] ? n[i] : nb[i], 4e-6);
        free(a[i]);
        free(b[i]);
    }
    free(ex);
    ot_backend_free(cpu);
}

/* Operands whose transforms overflow or spread an inf over a tile (x =
 * +-3e38 with w = 1e-3: Winograd's sums of neighbours reach inf, then
 * inf - inf; one inf input) give a result with an inf or NaN, and the call
 * runs again as im2col: the values ref gives, not NaN (a misuse probe);
 * conv and conv_transpose (the input gradient's Winograd). */
TEST(winograd_extreme_operands_match_ref)
{
    static float xd[16 * 8 * 8], wd[16 * 16 * 9];
    for (int i = 0; i < 16 * 16 * 9; i++) wd[i] = 1e-3f;
    /* 2: conv_transpose (an input gradient); 3: relu(conv + 1), its epilogue
     * fused (run per block when the call falls back to im2col) */
    for (int kind = 0; kind < 4; kind++) {
        for (int i = 0; i < 16 * 8 * 8; i++) xd[i] = kind == 1 ? 1.0f : (i % 2 ? 3e38f : -3e38f);
        if (kind == 1) xd[3 * 8 + 3] = INFINITY;
        float y[2][16 * 8 * 8];
        const char *names[2] = {"ref", "cpu"};
        for (int b = 0; b < 2; b++) {
            ot_backend *be = ot_backend_new(names[b], NULL);
            ot_tensor *x = ot_array(be, OT_SHAPE(1, 16, 8, 8), OT_F32, xd);
            ot_tensor *w = ot_array(be, OT_SHAPE(16, 16, 3, 3), OT_F32, wd);
            ot_tensor *out = ot_empty(be, OT_SHAPE(1, 16, 8, 8), OT_F32);
            ot_pool *p = ot_pool_push();
            ot_node *c = kind == 2 ? ot_conv_transpose(x, w, .pad = 1) : ot_conv(x, w, .pad = 1);
            CHECK_INT(ot_assign(out, kind == 3 ? ot_relu(ot_add(c, 1.0f)) : c), 0);
            ot_pool_pop(p);
            CHECK(ot_get(out, y[b]) == 0);
            ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(out);
            ot_backend_free(be);
        }
        /* f32 sums against ref's exact ones: a few ulps of the sum of the
         * terms' magnitudes, 144 * max|x| * 1e-3 (+-3e38 cancel to 0 on ref,
         * to 2.5e27 in f32) */
        float tol = 1e-6f * 144 * (kind == 1 ? 1.0f : 3e38f) * 1e-3f;
        int bad = 0;
        for (int i = 0; i < 16 * 8 * 8; i++)
            bad += isnan(y[1][i]) || isnan(y[0][i]) ||
                   (isinf(y[0][i]) ? y[1][i] != y[0][i] : !(fabsf(y[1][i] - y[0][i]) <= tol));
        CHECK_INT(bad, 0);
    }
}

/* The weight gradient's transforms overflow the same way (x = +-3e38 with
 * an output gradient of 1e-3; one inf input): its result holds an inf or
 * NaN, and the call runs again as im2col, giving ref's values. */
TEST(winograd_wgrad_extreme_operands_match_ref)
{
    static float xd[16 * 8 * 8], gd[16 * 8 * 8];
    for (int i = 0; i < 16 * 8 * 8; i++) gd[i] = 1e-3f;
    for (int kind = 0; kind < 2; kind++) {
        for (int i = 0; i < 16 * 8 * 8; i++) xd[i] = kind ? 1.0f : (i % 2 ? 3e38f : -3e38f);
        if (kind) xd[3 * 8 + 3] = INFINITY;
        float dw[2][16 * 16 * 9];
        const char *names[2] = {"ref", "cpu"};
        for (int b = 0; b < 2; b++) {
            ot_backend *be = ot_backend_new(names[b], NULL);
            ot_tensor *x = ot_array(be, OT_SHAPE(1, 16, 8, 8), OT_F32, xd);
            ot_tensor *w = ot_zeros(be, OT_SHAPE(16, 16, 3, 3), OT_F32);
            ot_tensor *gy = ot_array(be, OT_SHAPE(1, 16, 8, 8), OT_F32, gd);
            ot_tensor *out = ot_empty(be, OT_SHAPE(16, 16, 3, 3), OT_F32);
            ot_pool *p = ot_pool_push();
            ot_autodiff *ad = ot_autodiff_new(ot_conv(x, w, .pad = 1), ot_tensor_node(gy));
            CHECK_INT(ot_assign(out, ot_autodiff_grad(ad, w)), 0);
            ot_autodiff_free(ad);
            ot_pool_pop(p);
            CHECK(ot_get(out, dw[b]) == 0);
            ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(gy), ot_tensor_free(out);
            ot_backend_free(be);
        }
        /* a few ulps of the sum of the terms' magnitudes, 64 * max|x| * 1e-3 */
        float tol = 1e-6f * 64 * (kind ? 1.0f : 3e38f) * 1e-3f;
        int bad = 0;
        for (int i = 0; i < 16 * 16 * 9; i++)
            bad += isnan(dw[1][i]) || isnan(dw[0][i]) ||
                   (isinf(dw[0][i]) ? dw[1][i] != dw[0][i] : !(fabsf(dw[1][i] - dw[0][i]) <= tol));
        CHECK_INT(bad, 0);
    }
}

/* The weights' taps read by AVX-512 gathers or copied lane by lane (which
 * is faster depends on the CPU, measured once per process) give the same
 * bits: the forward's stride and the input gradient's, channel counts on
 * and off multiples of 16. */
TEST(winograd_weight_taps_gathered_or_copied_same_bits)
{
    ot_backend *cpu = ot_backend_new("cpu", NULL);
    for (int k = 0; k < NW; k++) {
        double *out[2][3];
        int64_t n[2][3];
        for (int v = 0; v < 2; v++) {
            ot__wino_gather_taps(v);
            run_case(cpu, &WCASES[k], OT_F32, out[v], n[v], NULL);
        }
        for (int i = 0; i < 3; i++) {
            CHECK(n[0][i] == n[1][i] && memcmp(out[0][i], out[1][i], sizeof(double) * (size_t)n[0][i]) == 0);
            free(out[0][i]);
            free(out[1][i]);
        }
    }
    ot__wino_gather_taps(-1);
    ot_backend_free(cpu);
}

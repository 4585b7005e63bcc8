/*
 * w_half.c - issue 36's 16-bit storage rows (bench --half): W1h (W1, a*b +
 * c on 2^24 elements, with f16 and with bf16 inputs and output) against the
 * f32 W1 and against hand-written AVX-512 loops over the same 16-bit data
 * (f16: vcvtph2ps / vcvtps2ph, round to nearest; bf16: widen by a 16-bit
 * shift, narrow by integer round-to-nearest-even; FMA; both store modes,
 * the faster counts, as bench.c's references); W3h and W4h (the
 * transcendental chains of workloads.c) in bf16 and f16 against f32; W10h
 * (ot_model_fit of the 784-512-10 MLP, batch 128, SGD) with
 * ot_model_compute_dtype(OT_BF16) against f32, per step. All in this one
 * process, 1 thread, the variants of a row interleaved run after run,
 * medians. The hand loops' bits are checked against optree's. The machine
 * may be shared: read the ratios. Also written to OUT_DIR/half.md.
 */
#define _DEFAULT_SOURCE
#include "bench.h"

#include <immintrin.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define AVX512 __attribute__((target("avx512f,fma")))

/* W10h: the model and the steps one timed fit runs. */
enum { MLP_IN = 784, MLP_HID = 512, MLP_OUT = 10, MLP_BATCH = 128, MLP_STEPS = 6 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- the hand loops ------------------------------------------------------ */

/* bf16 -> f32: the pattern in the high half. */
AVX512 static inline __m512 bf16_widen(const uint16_t *p)
{
    __m512i x = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(x, 16));
}

/* f32 -> bf16, round to nearest even (no NaN in the bench's data). */
AVX512 static inline __m256i bf16_narrow(__m512 v)
{
    __m512i x = _mm512_castps_si512(v);
    __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
    x = _mm512_add_epi32(x, _mm512_add_epi32(odd, _mm512_set1_epi32(0x7FFF)));
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(x, 16));
}

/* One vector of W1 at element i of a, b and c. */
#define LD16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + i)))
#define W1_F16 _mm512_cvtps_ph(_mm512_fmadd_ps(LD16(a), LD16(b), LD16(c)), \
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)
#define W1_BF16 bf16_narrow(_mm512_fmadd_ps(bf16_widen(a + i), bf16_widen(b + i), \
                                            bf16_widen(c + i)))

/* o = a*b + c over 16-bit patterns, n a multiple of 16, VEC the dtype's
 * vector; stream: streaming stores (o 32-byte aligned). */
#define HAND_BODY(name, VEC)                                                          \
    AVX512 static void name(uint16_t *o, const uint16_t *a, const uint16_t *b,        \
                            const uint16_t *c, size_t n, bool stream)                 \
    {                                                                                 \
        if (stream) {                                                                 \
            for (size_t i = 0; i < n; i += 16) _mm256_stream_si256((__m256i *)(o + i), VEC); \
            _mm_sfence();                                                             \
        } else {                                                                      \
            for (size_t i = 0; i < n; i += 16) _mm256_storeu_si256((__m256i *)(o + i), VEC); \
        }                                                                             \
    }
HAND_BODY(hand_f16_body, W1_F16)
HAND_BODY(hand_bf16_body, W1_BF16)

typedef void (*hand_fn)(uint16_t *, const uint16_t *, const uint16_t *, const uint16_t *,
                        size_t, bool);

/* Any n: the whole vectors, then the tail through a zero-padded vector. */
static void hand_w1(hand_fn body, uint16_t *o, const uint16_t *a, const uint16_t *b,
                    const uint16_t *c, size_t n, bool stream)
{
    size_t m = n & ~(size_t)15;
    body(o, a, b, c, m, stream && ((uintptr_t)o & 31) == 0);
    if (m == n) return;
    uint16_t t[4][16] = {{0}};
    memcpy(t[1], a + m, 2 * (n - m));
    memcpy(t[2], b + m, 2 * (n - m));
    memcpy(t[3], c + m, 2 * (n - m));
    body(t[0], t[1], t[2], t[3], 16, false);
    memcpy(o + m, t[0], 2 * (n - m));
}

/* ---- the optree side ------------------------------------------------------ */

/* a, b, c and the output in one dtype; hand: the hand loop's output. */
typedef struct dset {
    ot_dtype dt;
    ot_tensor *in[3], *out, *hand;
} dset;

static void dset_new(dset *s, ot_backend *be, ot_dtype dt, int64_t n, float *const host[3])
{
    s->dt = dt;
    for (int i = 0; i < 3; i++) s->in[i] = ot_array(be, OT_SHAPE(n), dt, host[i]);
    s->out = ot_empty(be, OT_SHAPE(n), dt);
    s->hand = dt == OT_F32 ? NULL : ot_empty(be, OT_SHAPE(n), dt);
    if (!s->in[0] || !s->in[1] || !s->in[2] || !s->out || (dt != OT_F32 && !s->hand))
        bench_die("W1h: %s", ot_errmsg());
}

static void dset_free(dset *s)
{
    for (int i = 0; i < 3; i++) ot_tensor_free(s->in[i]);
    ot_tensor_free(s->out);
    ot_tensor_free(s->hand);
}

typedef ot_node *(*tree_fn)(ot_tensor *const[]);

/* The tree of workloads.c's row id, so that the 16-bit rows run exactly
 * the f32 rows' expressions. */
static tree_fn case_tree(const char *id)
{
    for (int i = 0; i < bench_ncases; i++)
        if (strcmp(bench_cases[i].id, id) == 0 && bench_cases[i].tree) return bench_cases[i].tree;
    bench_die("half: no case %s", id);
}

/* Seconds of one assignment of tree into s->out, the tree built in a pool
 * as a user's call builds it. */
static double time_tree(tree_fn tree, const dset *s)
{
    ot_pool *pool = ot_pool_push();
    double t0 = now();
    if (ot_assign(s->out, tree(s->in)) != 0) bench_die("half: %s", ot_errmsg());
    double t = now() - t0;
    ot_pool_pop(pool);
    return t;
}

static double time_hand(hand_fn body, const dset *s, bool stream)
{
    size_t n = (size_t)ot_tensor_numel(s->out);
    double t0 = now();
    hand_w1(body, ot_tensor_data(s->hand), ot_tensor_data(s->in[0]), ot_tensor_data(s->in[1]),
            ot_tensor_data(s->in[2]), n, stream);
    return now() - t0;
}

/* Elements whose bits differ between optree's W1 output and the hand
 * loop's (both just written). */
static long bits_differ(const dset *s)
{
    size_t n = (size_t)ot_tensor_numel(s->out);
    uint16_t *x = bench_xmalloc(2 * n), *y = bench_xmalloc(2 * n);
    if (ot_get_raw(s->out, x) != 0 || ot_get_raw(s->hand, y) != 0)
        bench_die("half: %s", ot_errmsg());
    long d = 0;
    for (size_t i = 0; i < n; i++) d += x[i] != y[i];
    free(x);
    free(y);
    return d;
}

/* ---- W10h: the model API's steps ---------------------------------------- */

static ot_model *mlp_new(ot_backend *be, ot_dtype compute)
{
    ot_model *m = ot_model_new(be, MLP_IN);
    int rc = m ? ot_model_compute_dtype(m, compute) : ot_errcode();
    if (!rc) rc = ot_model_linear(m, MLP_HID, OT_ACT_RELU, 1);
    if (!rc) rc = ot_model_linear(m, MLP_OUT, OT_ACT_NONE, 2);
    if (!rc) rc = ot_model_loss(m, OT_LOSS_SOFTMAX_CE, NULL, NULL);
    if (!rc) rc = ot_model_sgd(m, &(ot_sgd){.lr = 0.01, .grad_scale = 1});
    if (rc) bench_die("W10h: %s", ot_errmsg());
    return m;
}

/* Seconds per step of one epoch of MLP_STEPS batches. */
static double time_fit(ot_model *m, ot_tensor *x, ot_tensor *y)
{
    ot_fit_result r;
    double t0 = now();
    if (ot_model_fit(m, x, y, &(ot_fit_opts){.epochs = 1, .batch = MLP_BATCH, .seed = 1,
                                             .quiet = true}, &r) != 0)
        bench_die("W10h: %s", ot_errmsg());
    return (now() - t0) / MLP_STEPS;
}

/* ---- the rows ------------------------------------------------------------ */

/* One row of the table: ms, the f32 row's ms, the hand loop's (< 0: none). */
typedef struct hrow {
    const char *id, *what, *dtype, *target;
    double ms, f32, hand, max_f32, max_hand;
    long differ;        /* < 0: not checked */
} hrow;

/* fmt to stdout and to the markdown file (when open). */
__attribute__((format(printf, 2, 3))) static void say(FILE *const outs[2], const char *fmt, ...)
{
    for (int o = 0; o < 2; o++) {
        if (!outs[o]) continue;
        va_list ap;
        va_start(ap, fmt);
        vfprintf(outs[o], fmt, ap);
        va_end(ap);
    }
}

static void put_row(FILE *const outs[2], const hrow *r)
{
    char hand[32] = "-", rh[32] = "-", bits[32] = "-";
    bool pass = r->ms / r->f32 <= r->max_f32;
    if (r->hand > 0) {
        snprintf(hand, sizeof hand, "%.2f", r->hand);
        snprintf(rh, sizeof rh, "%.2fx", r->ms / r->hand);
        pass = pass && r->ms / r->hand <= r->max_hand;
    }
    if (r->differ >= 0) snprintf(bits, sizeof bits, r->differ ? "%ld differ" : "equal", r->differ);
    say(outs, "| %s | %s | %s | %.2f | %.2f | %.2fx | %s | %s | %s | %s | %s |\n", r->id,
        r->what, r->dtype, r->ms, r->f32, r->ms / r->f32, hand, rh, bits, r->target,
        r->max_f32 <= 0 ? "info" : pass ? "PASS" : "MISS");
}

enum { T_F32, T_F16, T_BF16, T_HF16, T_HF16S, T_HBF16, T_HBF16S, T_W3 = 7, T_W4 = 10,
       T_MLP = 13, T_COUNT = 15 };

/* All timings of one run, in turn. */
static void one_run(double t[T_COUNT], dset *s, ot_model *mlp[2], ot_tensor *x, ot_tensor *y)
{
    tree_fn tree_w1 = case_tree("W1"), tree_w3 = case_tree("W3"), tree_w4 = case_tree("W4");
    for (int d = 0; d < 3; d++) t[T_F32 + d] = time_tree(tree_w1, &s[d]);
    t[T_HF16] = time_hand(hand_f16_body, &s[1], false);
    t[T_HF16S] = time_hand(hand_f16_body, &s[1], true);
    t[T_HBF16] = time_hand(hand_bf16_body, &s[2], false);
    t[T_HBF16S] = time_hand(hand_bf16_body, &s[2], true);
    for (int d = 0; d < 3; d++) t[T_W3 + d] = time_tree(tree_w3, &s[d]);
    for (int d = 0; d < 3; d++) t[T_W4 + d] = time_tree(tree_w4, &s[d]);
    for (int d = 0; d < 2; d++) t[T_MLP + d] = time_fit(mlp[d], x, y);
}

static bool has_avx512(void) { return __builtin_cpu_supports("avx512f"); }

/* The medians (ms) over runs of every timing, and the bit checks of the
 * hand loops (f16, bf16). */
static void measure(int runs, int64_t n, double med[T_COUNT], long differ[2])
{
    uint64_t seed = 36;
    float *host[3];
    for (int i = 0; i < 3; i++) {
        host[i] = bench_xmalloc(sizeof(float) * (size_t)n);
        bench_fill_uniform(host[i], (size_t)n, 0.5f, 2.0f, &seed);
    }
    ot_backend *be = bench_backend("cpu", 1, OT_FUSION_DEFAULT);
    dset s[3];
    const ot_dtype dts[3] = {OT_F32, OT_F16, OT_BF16};
    for (int d = 0; d < 3; d++) dset_new(&s[d], be, dts[d], n, host);
    for (int i = 0; i < 3; i++) free(host[i]);
    ot_tensor *x = bench_rand_tensor(be, OT_SHAPE(MLP_BATCH * MLP_STEPS, MLP_IN), &seed, "W10h");
    float *oh = calloc((size_t)MLP_BATCH * MLP_STEPS * MLP_OUT, sizeof *oh);
    if (!oh) bench_die("out of memory");
    for (int r = 0; r < MLP_BATCH * MLP_STEPS; r++)
        oh[r * MLP_OUT + bench_rand(&seed) % MLP_OUT] = 1;
    ot_tensor *y = ot_array(be, OT_SHAPE(MLP_BATCH * MLP_STEPS, MLP_OUT), OT_F32, oh);
    free(oh);
    if (!y) bench_die("W10h: %s", ot_errmsg());
    ot_model *mlp[2] = {mlp_new(be, OT_F32), mlp_new(be, OT_BF16)};
    double *t = bench_xmalloc(sizeof *t * (size_t)runs * T_COUNT), one[T_COUNT];
    bool avx = has_avx512();
    for (int k = -1; k < runs; k++) {
        one_run(one, s, mlp, x, y);
        for (int j = 0; j < T_COUNT; j++)   /* the warm-up's, k = -1, overwritten */
            t[(size_t)j * (size_t)runs + (size_t)(k < 0 ? 0 : k)] = one[j];
        if (k < 0 && avx) {    /* the W1 outputs are still those of this run */
            time_tree(case_tree("W1"), &s[1]);
            time_tree(case_tree("W1"), &s[2]);
            time_hand(hand_f16_body, &s[1], false);
            time_hand(hand_bf16_body, &s[2], false);
            differ[0] = bits_differ(&s[1]);
            differ[1] = bits_differ(&s[2]);
        }
    }
    for (int j = 0; j < T_COUNT; j++)
        med[j] = 1e3 * bench_median(t + (size_t)j * (size_t)runs, runs);
    free(t);
    for (int d = 0; d < 2; d++) ot_model_free(mlp[d]);
    ot_tensor_free(x);
    ot_tensor_free(y);
    for (int d = 0; d < 3; d++) dset_free(&s[d]);
    ot_backend_free(be);
}

static double min2(double a, double b) { return a < b ? a : b; }

int bench_half(int runs, bool quick, const char *out_dir)
{
    int64_t n = quick ? (int64_t)1 << 20 : (int64_t)1 << 24;
    double m[T_COUNT];
    long differ[2] = {-1, -1};
    bool avx = has_avx512();
    if (!avx) fprintf(stderr, "bench: note: no AVX-512: W1h runs without its hand loops\n");
    fprintf(stderr, "bench: W1h, W3h, W4h, W10h: %d runs ...\n", runs);
    measure(runs, n, m, differ);
    /* A hand loop's figure is its faster store mode's median, as bench.c
     * takes its references'; ratios are ratios of medians. */
    double hf16 = avx ? min2(m[T_HF16], m[T_HF16S]) : -1;
    double hbf16 = avx ? min2(m[T_HBF16], m[T_HBF16S]) : -1;
    const char *w1t = "<= 0.55x f32 and <= 1.05x hand", *eqt = "<= 1.00x f32";
    const hrow rows[] = {
        {"W1h", "a\\*b + c", "f16", w1t, m[T_F16], m[T_F32], hf16, 0.55, 1.05, differ[0]},
        {"W1h", "a\\*b + c", "bf16", w1t, m[T_BF16], m[T_F32], hbf16, 0.55, 1.05, differ[1]},
        {"W3h", "tanh(a\\*b + a/b)", "bf16", eqt, m[T_W3 + 2], m[T_W3], -1, 1.00, 0, -1},
        {"W3h", "tanh(a\\*b + a/b)", "f16", "-", m[T_W3 + 1], m[T_W3], -1, 0, 0, -1},
        {"W4h", "sqrt(abs(a))\\*log(b\\*b + 1) + exp(-c)\\*0.5", "bf16", eqt, m[T_W4 + 2],
         m[T_W4], -1, 1.00, 0, -1},
        {"W4h", "sqrt(abs(a))\\*log(b\\*b + 1) + exp(-c)\\*0.5", "f16", "-", m[T_W4 + 1], m[T_W4],
         -1, 0, 0, -1},
        {"W10h", "MLP 784-512-10 step (ot_model_fit, SGD, batch 128)", "bf16 compute",
         "< 1.00x f32", m[T_MLP + 1], m[T_MLP], -1, 0.9999, 0, -1},
    };
    char path[512];
    snprintf(path, sizeof path, "%s/half.md", out_dir);
    FILE *md = fopen(path, "w");
    FILE *outs[2] = {stdout, md};
    say(outs, "\n16-bit storage (issue 36): %lld elements (W1h-W4h), cpu backend, 1 thread, "
        "medians of %d interleaved runs in one process; hand: AVX-512 loop over the "
        "same 16-bit data, the faster store mode (the machine may be loaded: read "
        "the ratios)\n\n"
        "| row | workload | dtype | optree ms | f32 ms | /f32 | hand ms | /hand | "
        "bits vs hand | target | result |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
        (long long)n, runs);
    for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) put_row(outs, &rows[i]);
    if (avx)
        say(outs, "\nHand loops, ordinary / streaming stores: f16 %.2f / %.2f ms, "
            "bf16 %.2f / %.2f ms; W10h: ms per step of a %d-step epoch\n",
            m[T_HF16], m[T_HF16S], m[T_HBF16], m[T_HBF16S], MLP_STEPS);
    if (md) fclose(md);
    return differ[0] > 0 || differ[1] > 0 ? 1 : 0;
}

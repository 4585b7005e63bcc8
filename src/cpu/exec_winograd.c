/*
 * exec_winograd.c - the cpu backend's Winograd convolution F(m x m, 3 x 3)
 * (Lavin and Gray, "Fast Algorithms for Convolutional Neural Networks"):
 * a 2-D f32 conv with a 3x3 kernel at stride and dilation 1, any padding
 * and groups, and the conv_transpose of one (d/dinput: a conv of the
 * output gradient with the flipped, transposed weights, padding 2 - lo).
 *
 * The output is cut into m x m tiles, numbered across the whole batch (so
 * a 7x7 image's few tiles join the other images' in one GEMM). Per group:
 *   weights   U[xi][co][ci] = (G w G^T)[xi], a = m + 2, xi < a * a;
 *   per block of TB tiles (its V and M together about BLOCK_BYTES):
 *     input   V[xi][ci][t] = (B^T d B)[xi], d the tile's a x a input patch;
 *     GEMMs   M[xi] = U[xi] . V[xi], a * a of them (co x ci x tiles);
 *     output  the tile = A^T M A, written by put_block (one call per block
 *             of tiles: where a fused epilogue would run on the values).
 * F(2,3)'s input and output transforms run as vector loops over whole
 * images (f2planes) where that pays (planes_pay), else, as the weights'
 * transform and F(4,3)'s do, on LANES tiles (or channels) at once, one
 * vector lane each. F(2,3) (a = 4) is the one used: its transforms' coefficients
 * are 0, +-1 and 1/2, so on data whose products and sums are exact in f32
 * (small integers, halves) it is exact, and its rounding otherwise is
 * that of a dot product of the same terms (include/optree/conv.h). F(4,3)
 * (a = 6, 2.25 times fewer products again) is kept as a table for
 * measurement (OT_WINOGRAD=4): its 1/6 and 1/24 lose about 10x more.
 *
 * The weight gradient (conv_wgrad) of such a conv runs as F(3x3, 2x2): see
 * "the weight gradient" below; it shares the input transform and the
 * blocks of tiles, and its GEMMs' depth is the tiles.
 */
#include "blas.h"
#include "cpu.h"
#include "wide.h"

#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define GATHER_TAPS 1   /* gather_taps */
#endif

#define LANES 16
#define AMAX 6
#define BLOCK_BYTES ((size_t)2 << 20)   /* a block's V and M: in L2/L3 */
#define MIN_TILES 128                   /* a GEMM narrower than this runs slowly */

/* One F(m, 3): B^T (a x a), G (a x 3), A^T (m x a). */
typedef struct wmat {
    int m, a;
    float bt[AMAX][AMAX], g[AMAX][3], at[AMAX - 2][AMAX];
} wmat;

static const wmat F2 = {2, 4,
                        {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}},
                        {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}},
                        {{1, 1, 1, 0}, {0, 1, -1, -1}}};
static const wmat F4 = {4, 6,
                        {{4, 0, -5, 0, 1, 0}, {0, -4, -4, 1, 1, 0}, {0, 4, -4, -1, 1, 0},
                         {0, -2, -1, 2, 1, 0}, {0, 2, -1, -2, 1, 0}, {0, 4, 0, -5, 0, 1}},
                        {{1.0f / 4, 0, 0}, {-1.0f / 6, -1.0f / 6, -1.0f / 6},
                         {-1.0f / 6, 1.0f / 6, -1.0f / 6}, {1.0f / 24, 1.0f / 12, 1.0f / 6},
                         {1.0f / 24, -1.0f / 12, 1.0f / 6}, {0, 0, 1}},
                        {{1, 1, 1, 1, 1, 0}, {0, 1, -1, 2, -2, 0}, {0, 1, 1, 4, 4, 0},
                         {0, 1, -1, 8, -8, 1}}};

/* One group's problem as a plain conv: x (n images of ci channels, h x w,
 * image stride xs) correlated with w into y (co channels, oh x ow, image
 * stride ys); output position p reads input p + q - lo for tap q. Weight
 * (o, i) starts at w + o * wo + i * wi; flip reads its taps reversed. */
typedef struct wprob {
    const wmat *f;
    const float *x, *w;
    float *y;
    int64_t n, ci, co, h, w_, oh, ow, lh, lw, xs, ys, wo, wi;
    bool flip, planes;   /* planes: F(2,3) on whole images (f2planes), else lanes */
    bool gather;         /* AVX-512 gathers: the lanes' patches, the weights' taps where
                            they pay (taps_by_gather) */
    bool wgrad;          /* conv_wgrad: the weight gradient (run_wgrad) */
    const float *gy;     /* conv_wgrad: the output gradient (S), images ys apart */
    float *dw;           /* conv_wgrad: the weight gradient it writes */
    int64_t th, tw, tiles, tb;   /* tiles down, across, in all; per block */
} wprob;

/* The tiles of one group of LANES: where each reads and writes. A lane past
 * the block's end reads padding only and writes nothing. */
typedef struct lanes {
    int64_t img[LANES], r0[LANES], c0[LANES];   /* r0, c0: output origin */
    bool live[LANES];
    /* runs of consecutive live tiles of one tile row: run r is lanes
     * [at[r], at[r + 1]); of those, [in0[r], in1[r]) read inside the input
     * and [out0[r], out1[r]) write whole tiles: strided vector copies */
    int runs, at[LANES + 1], in0[LANES], in1[LANES], out0[LANES], out1[LANES];
} lanes;

/* OT_WINOGRAD, read once per process (a plan's scratch is sized by the
 * choice, so it must not change under a cached plan): "0" off (im2col +
 * gemm instead: for A/B measurement), "4" F(4,3), else F(2,3). */
static const wmat *pick(void)
{
    static _Atomic int mode = -1;   /* 0 off, 2 or 4 */
    int m = atomic_load(&mode);
    if (m < 0) {
        const char *e = getenv("OT_WINOGRAD");
        m = !e ? 2 : strcmp(e, "0") == 0 ? 0 : strcmp(e, "4") == 0 ? 4 : 2;
        atomic_store(&mode, m);
    }
    return m == 0 ? NULL : m == 4 ? &F4 : &F2;
}

/* ---- eligibility and sizes ------------------------------------------------ */

bool ot__wino_ok(const ot_kernel *k)
{
    const ot__conv_geom *g = &k->conv;
    if (k->kind != OT_KER_CONV || k->store.dtype != OT_F32 || !pick()) return false;
    /* the weight gradient has F(2,3)'s transposed tables only */
    if (k->conv_op == OT_OP_CONV_WGRAD && pick() != &F2) return false;
    if (g->k[0] != 3 || g->k[1] != 3 || g->k[2] != 1 || g->xp[2] != 1 || g->sp[2] != 1)
        return false;
    for (int d = 0; d < 2; d++)
        if (g->stride[d] != 1 || g->dil[d] != 1) return false;
    /* few channels: a GEMM of depth ci is too thin, im2col's is 9 ci */
    return g->xc >= 16 && g->sc >= 16 && g->n > 0;
}

/* Whether F(2,3)'s whole-image transforms pay for their extra tile a row
 * (1/tw more GEMM work, of ci co products a tile) by what they save over
 * the lanes' gathers (about 19 ns a tile and channel, ci + co channels,
 * against 0.32 ns a product: callgrind and the W12 rows on the development
 * Xeon): many channels on narrow images (512 at 7x7) keep the lanes. */
static bool planes_pay(const wprob *p)
{
    return (double)p->ci * (double)p->co / (double)(p->ci + p->co) < 60.0 * (double)p->tw;
}

/* The problem of k's group 0 without its pointers: channels, sizes, pads. */
static void shape_of(const ot_kernel *k, wprob *p)
{
    const ot__conv_geom *g = &k->conv;
    bool tr = k->conv_op == OT_OP_CONV_TRANSPOSE;
    const int64_t *in = tr ? g->sp : g->xp, *out = tr ? g->xp : g->sp;
    *p = (wprob){.f = pick(), .n = g->n, .ci = tr ? g->sc : g->xc, .co = tr ? g->xc : g->sc,
                 .h = in[0], .w_ = in[1], .oh = out[0], .ow = out[1],
                 .lh = tr ? 2 - g->lo[0] : g->lo[0], .lw = tr ? 2 - g->lo[1] : g->lo[1],
                 .wo = tr ? 9 : g->xc * 9, .wi = tr ? g->xc * 9 : 9, .flip = tr,
                 .wgrad = k->conv_op == OT_OP_CONV_WGRAD};
    int64_t m = p->f->m, a2 = p->f->a * p->f->a;
    p->th = (p->oh + m - 1) / m;
    p->tw = (p->ow + m - 1) / m;
    p->planes = p->f == &F2 && planes_pay(p);
#ifdef GATHER_TAPS
    /* the gathers' indices are int32: l * wi * 4 bytes for l < LANES */
    p->gather = __builtin_cpu_supports("avx512f") && p->wi <= INT32_MAX / (4 * LANES);
#endif
    p->tw += p->planes;   /* one tile more a row, see f2planes */
    p->tiles = p->n * p->th * p->tw;
    int64_t tb = (int64_t)BLOCK_BYTES / (a2 * (p->ci + p->co) * 4);
    tb = tb < MIN_TILES ? MIN_TILES : tb;
    tb = tb < p->tiles ? tb : p->tiles;
    p->tb = (tb + LANES - 1) / LANES * LANES;
}

/* Bytes of U, of V, of M (each rounded to 64) and of their sum. */
static size_t part_bytes(const wprob *p, int which)
{
    int64_t a2 = p->f->a * p->f->a;
    int64_t e = which == 0 ? a2 * p->co * p->ci : which == 1 ? a2 * p->ci * p->tb
                                                              : a2 * p->co * p->tb;
    return ((size_t)e * sizeof(float) + 63) / 64 * 64;
}

static size_t f2_floats(const wprob *p);

static int64_t padded_floats(const wprob *p);

/* Bytes of the F(2,3) planes (f2planes), for the planes' transforms and
 * the weight gradient's (image_gt), then of the lanes' padded input. */
static size_t f2_bytes(const wprob *p)
{
    return p->planes || p->wgrad ? (f2_floats(p) * sizeof(float) + 63) / 64 * 64 : 0;
}
static size_t rows_bytes(const wprob *p)
{
    return f2_bytes(p) + (size_t)padded_floats(p) * sizeof(float);
}

size_t ot__wino_scratch(const ot_kernel *k)
{
    wprob p;
    shape_of(k, &p);
    return part_bytes(&p, 0) + part_bytes(&p, 1) + part_bytes(&p, 2) + rows_bytes(&p) + 64;
}

const char *ot__wino_name(const ot_kernel *k)
{
    if (k->conv_op == OT_OP_CONV_WGRAD) return "winograd F(3x3,2x2), weight gradient";
    return pick() == &F4 ? "winograd F(4x4,3x3)" : "winograd F(2x2,3x3)";
}

/* ---- transforms on LANES lanes -------------------------------------------- */

/* The transforms are written once over a wmat and instantiated per table
 * (INLINE, with the table a constant: the loops unroll and the zero and
 * unit coefficients fold away), each instance compiled for AVX-512, AVX2
 * and the baseline, picked at load time (WIDE), so that a row of LANES
 * lanes is one or two vector registers. */
#define INLINE static inline __attribute__((always_inline))

/* o[i] = sum_k mt[i][k] v[k] for i < r, k < c, each a row of LANES floats;
 * v's rows sv floats apart, o's so; zero coefficients skipped. */
INLINE void lane_mul(const float *mt, int ldm, int r, int c, const float *v, int64_t sv, float *o,
                     int64_t so)
{
    for (int i = 0; i < r; i++) {
        float acc[LANES] = {0};
        for (int k = 0; k < c; k++) {
            float f = mt[i * ldm + k];
            if (f == 0) continue;
            const float *vk = v + k * sv;
            for (int l = 0; l < LANES; l++) acc[l] += f * vk[l];
        }
        memcpy(o + i * so, acc, sizeof acc);
    }
}

/* out = mt . in . mt^T on LANES lanes: in is c x c, out r x r, mt r x c
 * (row stride ldm); tmp holds r x c. */
INLINE void lane_sandwich(const float *mt, int ldm, int r, int c, const float *in, float *tmp,
                          float *out)
{
    for (int j = 0; j < c; j++)
        lane_mul(mt, ldm, r, c, in + j * LANES, c * LANES, tmp + j * LANES, c * LANES);
    for (int i = 0; i < r; i++)
        lane_mul(mt, ldm, r, c, tmp + i * c * LANES, LANES, out + i * r * LANES, LANES);
}

/* F(2,3)'s B^T on four rows of lanes (row k at x + k * sx) into four
 * (y + i * sy), and its A^T into two: the tables' sums written out. */
INLINE void bt2(const float *restrict x, int64_t sx, float *restrict y, int64_t sy)
{
    for (int l = 0; l < LANES; l++) {
        float a = x[l], b = x[sx + l], c = x[2 * sx + l], d = x[3 * sx + l];
        y[l] = a - c;
        y[sy + l] = b + c;
        y[2 * sy + l] = c - b;
        y[3 * sy + l] = b - d;
    }
}
INLINE void at2(const float *restrict x, int64_t sx, float *restrict y, int64_t sy)
{
    for (int l = 0; l < LANES; l++) {
        float b = x[sx + l], c = x[2 * sx + l];
        y[l] = x[l] + b + c;
        y[sy + l] = b - c - x[3 * sx + l];
    }
}

/* F(2,3)'s G: three rows of lanes into four. */
INLINE void g2(const float *restrict x, int64_t sx, float *restrict y, int64_t sy)
{
    for (int l = 0; l < LANES; l++) {
        float a = x[l], b = x[sx + l], c = x[2 * sx + l];
        y[l] = a;
        y[sy + l] = (a + b + c) * 0.5f;
        y[2 * sy + l] = (a - b + c) * 0.5f;
        y[3 * sy + l] = c;
    }
}

/* o = G g G^T (g 3 x 3 lanes, o a x a), tmp a x 3. */
INLINE void w_xform(const wmat *f, const float *g, float *tmp, float *o)
{
    int a = f->a;
    if (f == &F2) {
        for (int j = 0; j < 3; j++) g2(g + j * LANES, 3 * LANES, tmp + j * LANES, 3 * LANES);
        for (int i = 0; i < 4; i++) g2(tmp + i * 3 * LANES, LANES, o + i * 4 * LANES, LANES);
        return;
    }
    for (int j = 0; j < 3; j++)
        lane_mul(&f->g[0][0], 3, a, 3, g + j * LANES, 3 * LANES, tmp + j * LANES, 3 * LANES);
    for (int i = 0; i < a; i++)
        lane_mul(&f->g[0][0], 3, a, 3, tmp + i * 3 * LANES, LANES, o + i * a * LANES, LANES);
}

/* o = B^T d B (input: a x a lanes each) or A^T d A (output: d a x a, o
 * m x m); tmp r x a, r = a or m. */
INLINE void io_xform(const wmat *f, bool output, const float *d, float *tmp, float *o)
{
    int r = output ? f->m : f->a;
    if (f != &F2) {
        lane_sandwich(output ? &f->at[0][0] : &f->bt[0][0], AMAX, r, f->a, d, tmp, o);
        return;
    }
    for (int j = 0; j < 4; j++) {
        if (output) at2(d + j * LANES, 4 * LANES, tmp + j * LANES, 4 * LANES);
        else bt2(d + j * LANES, 4 * LANES, tmp + j * LANES, 4 * LANES);
    }
    for (int i = 0; i < r; i++) {
        if (output) at2(tmp + i * 4 * LANES, LANES, o + i * r * LANES, LANES);
        else bt2(tmp + i * 4 * LANES, LANES, o + i * r * LANES, LANES);
    }
}

/* g[q][l] = s0[l * wi + (flip ? 8 - q : q)] for LANES lanes: a fixed
 * count of lanes at one stride, fully unrolled (the gather per channel
 * with its flip test took 2.9 of W12's 17.7 ms at 512 channels, this
 * 2.1-2.2, Zen 4). */
static void copy_taps(const float *s0, int64_t wi, bool flip, float *g)
{
    for (int q = 0; q < 9; q++) {
        const float *sq = s0 + (flip ? 8 - q : q);
        for (int l = 0; l < LANES; l++) g[q * LANES + l] = sq[l * wi];
    }
}

#ifdef GATHER_TAPS
/* The same by AVX-512 gathers and whole-vector stores: the copy compiles
 * to a scalar load and insert each, and the transform's vector loads of g
 * then wait on the partial writes. */
__attribute__((target("avx512f"))) static void gather_taps(const float *s0, int64_t wi, bool flip,
                                                           float *g)
{
    __m512i idx = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12,
                                                       13, 14, 15),
                                     _mm512_set1_epi32((int)wi));
    for (int q = 0; q < 9; q++)
        _mm512_storeu_ps(g + q * LANES, _mm512_i32gather_ps(idx, s0 + (flip ? 8 - q : q), 4));
}

/* One way's best of 5 runs over 512 channels' taps at stride wi. */
static uint64_t time_taps(void (*fn)(const float *, int64_t, bool, float *), const float *w,
                          int64_t wi, float *g)
{
    uint64_t best = UINT64_MAX;
    volatile float sink = 0;
    for (int r = 0; r < 5; r++) {
        uint64_t t0 = ot__now_ns();
        for (int c = 0; c < 512; c++) {
            fn(w + (wi == 9 ? c * 9 * LANES : c * 9), wi, false, g);
            sink += g[c % (9 * LANES)];
        }
        uint64_t t = ot__now_ns() - t0;
        best = t < best ? t : best;
    }
    return best + (sink > 1e30f);   /* read: the copies are kept (w is zeros) */
}

/* Whether gather_taps beats copy_taps at stride wi on this CPU (the same
 * bits either way): with the gathers W12 at 512 channels ran 3% faster on
 * a Sapphire Rapids Xeon (11.07-11.12 ms against 11.39-11.63), 11% slower
 * on Zen 5 (10.7-10.9 against 9.4-9.7). Measured once per process for the
 * forward's stride (9) and the input gradient's (ci * 9), about 0.3 ms;
 * ot__wino_gather_taps sets it instead. */
static _Atomic int taps_gather[2] = {-1, -1};

static bool taps_by_gather(int64_t wi)
{
    int kind = wi != 9, v = atomic_load(&taps_gather[kind]);
    if (v >= 0) return v;
    int64_t stride = kind ? 512 * 9 : 9;
    size_t n = (size_t)LANES * 512 * 9 + 512 * 9;
    float g[9 * LANES], *w = ot__malloc(sizeof *w * n);
    if (!w) return false;   /* without the memory to measure: the copy */
    memset(w, 0, sizeof *w * n);   /* written: calloc's untouched zero page flattered the gathers */
    v = time_taps(gather_taps, w, stride, g) < time_taps(copy_taps, w, stride, g);
    free(w);
    atomic_store(&taps_gather[kind], v);
    return v;
}

void ot__wino_gather_taps(int v)
{
    for (int k = 0; k < 2; k++) atomic_store(&taps_gather[k], v);
}
#else
void ot__wino_gather_taps(int v) { (void)v; }   /* no gathers here: the copy */
#endif

/* U for output channel o, input channels [i0, i0 + LANES) (fewer at the
 * end: the rest are not stored). */
INLINE void weight_lanes(const wprob *p, const wmat *f, float *u, int64_t o, int64_t i0)
{
    int a = f->a;
    int64_t ni = p->ci - i0 < LANES ? p->ci - i0 : LANES;
    float g[9 * LANES], tmp[AMAX * 3 * LANES], v[AMAX * AMAX * LANES];
    const float *s0 = p->w + o * p->wo + i0 * p->wi;
#ifdef GATHER_TAPS
    if (ni == LANES && p->gather && taps_by_gather(p->wi)) {
        gather_taps(s0, p->wi, p->flip, g);
    } else
#endif
    if (ni == LANES) {
        copy_taps(s0, p->wi, p->flip, g);
    } else {
        memset(g, 0, sizeof g);   /* the lanes past ci */
        for (int64_t l = 0; l < ni; l++)
            for (int q = 0; q < 9; q++) g[q * LANES + l] = s0[l * p->wi + (p->flip ? 8 - q : q)];
    }
    w_xform(f, g, tmp, v);
    /* whole rows at a constant size: a vector store each (a copy of ni
     * floats was a rep movsq, 40% of the transform at 512 channels) */
    for (int xi = 0; xi < a * a; xi++) {
        float *d = u + (xi * p->co + o) * p->ci + i0;
        if (ni == LANES) memcpy(d, v + xi * LANES, sizeof(float) * LANES);
        else memcpy(d, v + xi * LANES, (size_t)ni * sizeof(float));
    }
}

INLINE void weights_t(const wprob *p, const wmat *f, float *u)
{
    for (int64_t o = 0; o < p->co; o++)
        for (int64_t i0 = 0; i0 < p->ci; i0 += LANES) weight_lanes(p, f, u, o, i0);
}

WIDE static void weights(const wprob *p, float *u)
{
    if (p->f == &F2) weights_t(p, &F2, u);
    else weights_t(p, &F4, u);
}

/* The lanes of tiles [t0, t0 + LANES), those below end live. */
static void lanes_at(const wprob *p, int64_t t0, int64_t end, lanes *ln)
{
    int64_t m = p->f->m, a = p->f->a;
    for (int l = 0; l < LANES; l++) {
        int64_t t = t0 + l;
        ln->live[l] = t < end;
        t = t < end ? t : 0;
        ln->img[l] = t / (p->th * p->tw);
        ln->r0[l] = t / p->tw % p->th * m;
        ln->c0[l] = t % p->tw * m;
    }
    ln->runs = 0;
    for (int l = 0, r; l < LANES && ln->live[l]; ln->runs++) {
        r = ln->runs;
        ln->at[r] = l;
        int64_t row = ln->r0[l] - p->lh;
        bool rin = row >= 0 && row + a <= p->h, rout = ln->r0[l] + m <= p->oh;
        ln->in0[r] = ln->in1[r] = ln->out0[r] = ln->out1[r] = l;
        for (; l < LANES && ln->live[l] && ln->img[l] == ln->img[ln->at[r]] &&
               ln->r0[l] == ln->r0[ln->at[r]]; l++) {
            int64_t col = ln->c0[l] - p->lw;
            if (rin && col >= 0 && col + a <= p->w_) ln->in1[r] = l + 1;
            else if (ln->in1[r] == l) ln->in0[r] = ln->in1[r] = l + 1;
            if (rout && ln->c0[l] + m <= p->ow) ln->out1[r] = l + 1;
        }
        ln->at[r + 1] = l;
    }
}

/* Lane l's a x a input patch of channel c: zeros, then the part inside
 * the input (none for a dead lane). */
INLINE void gather_one(const wprob *p, int a, const lanes *ln, int64_t c, int l, float *d)
{
    for (int e = 0; e < a * a; e++) d[e * LANES + l] = 0;
    if (!ln->live[l]) return;
    int64_t r0 = ln->r0[l] - p->lh, c0 = ln->c0[l] - p->lw, w = p->w_;
    const float *xc = p->x + ln->img[l] * p->xs + c * p->h * w + r0 * w + c0;
    int64_t i0 = r0 < 0 ? -r0 : 0, i1 = p->h - r0 < a ? p->h - r0 : a;
    int64_t j0 = c0 < 0 ? -c0 : 0, j1 = w - c0 < a ? w - c0 : a;
    for (int64_t i = i0; i < i1; i++)
        for (int64_t j = j0; j < j1; j++) d[(i * a + j) * LANES + l] = xc[i * w + j];
}

/* d = the lanes' a x a input patches of channel c (padding and dead
 * lanes read zeros): a run's patches inside the input as strided rows. */
INLINE void gather(const wprob *p, int a, int m, const lanes *ln, int64_t c, float *d)
{
    int l = 0;
    for (int r = 0; r < ln->runs; r++) {
        int i0 = ln->in0[r], i1 = ln->in1[r];
        for (l = ln->at[r]; l < i0; l++) gather_one(p, a, ln, c, l, d);
        if (i1 > i0) {
            const float *s = p->x + ln->img[i0] * p->xs + c * p->h * p->w_ +
                             (ln->r0[i0] - p->lh) * p->w_ + ln->c0[i0] - p->lw;
            for (int i = 0; i < a; i++)
                for (int j = 0; j < a; j++) {
                    float *dd = d + (i * a + j) * LANES;
                    const float *ss = s + i * p->w_ + j - i0 * m;
                    for (int q = i0; q < i1; q++) dd[q] = ss[q * m];
                }
        }
        for (l = i1; l < ln->at[r + 1]; l++) gather_one(p, a, ln, c, l, d);
    }
    for (; l < LANES; l++) gather_one(p, a, ln, c, l, d);
}

#ifdef GATHER_TAPS
/* gather's d for a block's padded images (every live lane's patch inside
 * its plane): element e = (i, j) of lane l at base[at[l] + i * w + j],
 * dead lanes (not in live) zero, by AVX-512 gathers, a whole vector
 * stored each, where gather's strided runs are 4 lanes long on a 7x7
 * image. W12 at 512 channels 7x7 (a Sapphire Rapids Xeon, runs of 31
 * calls): 10.84-10.94 ms against 11.07-11.12; the input transform's share
 * of the call (perf) 11.9% -> 6.5%. */
__attribute__((target("avx512f"))) static void gather_patches(const float *base, int64_t w, int a,
                                                              const int32_t *at, uint16_t live,
                                                              float *d)
{
    __m512i idx = _mm512_loadu_si512(at);
    for (int e = 0; e < a * a; e++)
        _mm512_storeu_ps(d + e * LANES, _mm512_mask_i32gather_ps(_mm512_setzero_ps(), live, idx,
                                                                 base + e / a * w + e % a, 4));
}

/* The lanes' patch origins for gather_patches (false where an offset
 * leaves int32: gather's loops then). */
static bool patch_origins(const wprob *p, const lanes *ln, int32_t *at, uint16_t *live)
{
    *live = 0;
    for (int l = 0; l < LANES; l++) {
        int64_t o = ln->live[l] ? ln->img[l] * p->xs + ln->r0[l] * p->w_ + ln->c0[l] : 0;
        if (o > INT32_MAX / 4) return false;
        at[l] = (int32_t)o;
        *live |= (uint16_t)((unsigned)ln->live[l] << l);
    }
    return true;
}
#endif

/* V of the block's tiles [t0, t0 + nt): column t - t0 of V[xi][c]; p's
 * images padded (pad_images), so every live patch lies inside them. */
INLINE void input_block_t(const wprob *p, const wmat *f, float *v, int64_t t0, int64_t nt)
{
    int a = f->a;
    float d[AMAX * AMAX * LANES], tmp[AMAX * AMAX * LANES], o[AMAX * AMAX * LANES];
    lanes ln;
    for (int64_t g0 = 0; g0 < nt; g0 += LANES) {
        lanes_at(p, t0 + g0, t0 + nt, &ln);
#ifdef GATHER_TAPS
        int32_t at[LANES];
        uint16_t live;
        bool fast = p->gather && patch_origins(p, &ln, at, &live);
#endif
        for (int64_t c = 0; c < p->ci; c++) {
#ifdef GATHER_TAPS
            if (fast) gather_patches(p->x + c * p->h * p->w_, p->w_, a, at, live, d);
            else
#endif
                gather(p, a, f->m, &ln, c, d);
            io_xform(f, false, d, tmp, o);
            for (int xi = 0; xi < a * a; xi++)
                memcpy(v + (xi * p->ci + c) * p->tb + g0, o + xi * LANES, sizeof(float) * LANES);
        }
    }
}

/* ---- F(2,3) on whole images ---------------------------------------------------
 * F(2,3)'s input and output transforms run as vector loops over an image's
 * tiles instead: per-tile gathers (above) cost more than the GEMMs on small
 * images, and loops over one tile row are too short to vectorise (7 tiles
 * on a 14x14 image). Each tile row has one tile more than the output needs
 * (tw = ceil(ow / 2) + 1, shape_of), so that tile u = tr * tw + t of an
 * image starts at column 2u of a padded plane whose rows are wp = 2 tw
 * wide: with the planes split by row parity, B^T d B is a vertical pass of
 * unit-stride loops over the image (rows 2 tr .. 2 tr + 3 are even and odd
 * rows tr and tr + 1) and a horizontal one of stride-2 loops (tile u reads
 * columns 2u .. 2u + 3). A^T m A likewise, into two output planes of row
 * parity, copied out clipped. The extra tile's results are never stored:
 * it costs 1 / tw more GEMM work. */

/* The F(2,3) planes in a run's scratch (rows): the padded input by row
 * parity (pe, po: th + 2 rows of wp each), its vertical B^T (q: 4 planes of
 * th + 1 rows), the output by row parity (o: 2 planes of th rows). */
typedef struct f2planes {
    float *pe, *po, *q[4], *o[2];
    int64_t wp;
} f2planes;

static size_t f2_floats(const wprob *p)
{
    int64_t wp = 2 * p->tw;
    return (size_t)((2 * (p->th + 2) + 4 * (p->th + 1) + 2 * p->th) * wp);
}

static f2planes f2_at(const wprob *p, float *rows)
{
    int64_t wp = 2 * p->tw, ps = (p->th + 2) * wp, qs = (p->th + 1) * wp;
    f2planes f = {.pe = rows, .po = rows + ps, .wp = wp};
    for (int i = 0; i < 4; i++) f.q[i] = rows + 2 * ps + i * qs;
    for (int i = 0; i < 2; i++) f.o[i] = rows + 2 * ps + 4 * qs + i * p->th * wp;
    return f;
}

/* Padded row r of channel plane xc, width floats at row: input row r - lh
 * with its columns shifted by lw, zeros elsewhere (the planes' rows and
 * the lanes' padded images both). */
static void padded_row(const wprob *p, const float *xc, int64_t r, float *row, int64_t width)
{
    int64_t rr = r - p->lh, c0 = p->lw > 0 ? p->lw : 0;
    int64_t c1 = p->w_ + p->lw < width ? p->w_ + p->lw : width;
    memset(row, 0, sizeof *row * (size_t)width);
    if (rr >= 0 && rr < p->h && c1 > c0)
        memcpy(row + c0, xc + rr * p->w_ + c0 - p->lw, sizeof *row * (size_t)(c1 - c0));
}

/* Padded rows [r0, r1) of channel plane xc into pe and po: padded row r is
 * input row r - lh at columns shifted by lw, zeros elsewhere. */
static void pad_rows(const wprob *p, const float *xc, int64_t r0, int64_t r1, const f2planes *f)
{
    for (int64_t r = r0; r < r1; r++)
        padded_row(p, xc, r, (r & 1 ? f->po : f->pe) + (r >> 1) * f->wp, f->wp);
}

/* V of an image's tiles [ua, ub) of channel plane xc: tile u at column
 * u - ua of v + xi * vs. The vertical pass covers two columns past the
 * last tile row, which the extra tile of that row reads. */
INLINE void image_bt(const wprob *p, const float *xc, int64_t ua, int64_t ub, const f2planes *f,
                     float *v, int64_t vs)
{
    int64_t wp = f->wp, tra = ua / p->tw, trb = (ub - 1) / p->tw + 1;
    pad_rows(p, xc, 2 * tra, 2 * trb + 4, f);
    const float *restrict pe = f->pe, *restrict po = f->po;
    float *restrict q0 = f->q[0], *restrict q1 = f->q[1], *restrict q2 = f->q[2],
                    *restrict q3 = f->q[3];
    for (int64_t u = tra * wp; u < trb * wp + 2; u++) {
        float e0 = pe[u], e1 = pe[u + wp], o0 = po[u], o1 = po[u + wp];
        q0[u] = e0 - e1;
        q1[u] = o0 + e1;
        q2[u] = e1 - o0;
        q3[u] = o0 - o1;
    }
    for (int i = 0; i < 4; i++) {
        const float *restrict q = f->q[i];
        float *restrict v0 = v + 4 * i * vs - ua, *restrict v1 = v0 + vs, *restrict v2 = v1 + vs,
                        *restrict v3 = v2 + vs;
        for (int64_t u = ua; u < ub; u++) {
            float a = q[2 * u], b = q[2 * u + 1], c = q[2 * u + 2], d = q[2 * u + 3];
            v0[u] = a - c;
            v1[u] = b + c;
            v2[u] = c - b;
            v3[u] = b - d;
        }
    }
}

/* The run of the block's tiles [t, end) within one image: its image and
 * the run's tiles [*ua, *ub) of that image. */
static void image_run(const wprob *p, int64_t t, int64_t end, int64_t *img, int64_t *ua,
                      int64_t *ub)
{
    int64_t per = p->th * p->tw;
    *img = t / per;
    *ua = t % per;
    *ub = per - *ua < end - t ? per : *ua + end - t;
}

/* ---- the weight gradient ---------------------------------------------------
 * dW[co][ci] (3 x 3) sums, over every 2 x 2 tile of the output gradient s
 * (channel co), the correlation of the tile with its 4 x 4 input patch d
 * (channel ci; the forward's patch for that tile): Winograd's F(3,2), whose
 * tables are F(2,3)'s transposed (B^T the same; A and G trade places):
 *   dW = G^T [ sum over tiles of (A s A^T) . (B^T d B) ] G,
 * so V is the forward's input transform, S[xi][co][t] = (A s A^T)[xi] the
 * gradient's, and M[xi] = S[xi] . V[xi]^T (co x ci, the tiles its depth)
 * sums over the blocks: 16 products a tile where im2col has 36. Tiles
 * reaching past the output read zeros there (the planes' extra tile of a
 * row: all of it), so they add nothing. */

/* The vertical pass on one tile row's n columns: rows r0 and r1 (NULL:
 * zeros, below the gradient's last row) into A's four combinations, A =
 * [1 0; 1 1; 1 -1; 0 -1]. */
INLINE void gt_down(const float *restrict r0, const float *restrict r1, int64_t n,
                    float *restrict q0, float *restrict q1, float *restrict q2,
                    float *restrict q3)
{
    for (int64_t c = 0; c < n; c++) {
        float a = r0[c], b = r1 ? r1[c] : 0.0f;
        q0[c] = a;
        q1[c] = a + b;
        q2[c] = a - b;
        q3[c] = -b;
    }
}

/* S of an image's tiles [ua, ub) of gradient plane sc, A s A^T, as
 * image_bt does B^T d B: the vertical pass into q[i] (tile row tr at
 * tr * wp, wp = 2 tw, zeros past the gradient's width), so that tile u's
 * two columns are q[i][2u], q[i][2u + 1]; then the horizontal pass, a
 * stride-2 loop over the run's tiles, [x, x + y, x - y, -y], into column
 * u - ua of o + xi * os. */
INLINE void image_gt(const wprob *p, const float *sc, int64_t ua, int64_t ub, const f2planes *f,
                     float *o, int64_t os)
{
    int64_t wp = f->wp, ow = p->ow;
    for (int64_t tr = ua / p->tw; tr * p->tw < ub; tr++) {
        const float *r0 = sc + 2 * tr * ow;
        float *q[4];
        for (int i = 0; i < 4; i++) q[i] = f->q[i] + tr * wp;
        gt_down(r0, 2 * tr + 1 < p->oh ? r0 + ow : NULL, ow, q[0], q[1], q[2], q[3]);
        for (int i = 0; i < 4; i++) memset(q[i] + ow, 0, sizeof(float) * (size_t)(wp - ow));
    }
    for (int i = 0; i < 4; i++) {
        const float *restrict q = f->q[i];
        float *restrict o0 = o + 4 * i * os, *restrict o1 = o0 + os, *restrict o2 = o1 + os,
                        *restrict o3 = o2 + os;
        for (int64_t u = ua; u < ub; u++) {
            float x = q[2 * u], y = q[2 * u + 1];
            o0[u - ua] = x;
            o1[u - ua] = x + y;
            o2[u - ua] = x - y;
            o3[u - ua] = -y;
        }
    }
}


/* The whole-image transforms of the block's tiles [t0, t0 + nt) into
 * column t - t0 of o[xi][c]: the input's B^T d B (V, every input channel)
 * or, grad, the output gradient's A s A^T (S, every output channel). */
WIDE static void planes_block(const wprob *p, bool grad, float *o, int64_t t0, int64_t nt,
                              float *rows)
{
    f2planes f = f2_at(p, rows);
    int64_t nc = grad ? p->co : p->ci, plane = grad ? p->oh * p->ow : p->h * p->w_;
    for (int64_t t = t0, img, ua, ub; t < t0 + nt; t += ub - ua) {
        image_run(p, t, t0 + nt, &img, &ua, &ub);
        const float *src = grad ? p->gy + img * p->ys : p->x + img * p->xs;
        for (int64_t c = 0; c < nc; c++) {
            float *oc = o + c * p->tb + (t - t0);
            if (grad) image_gt(p, src + c * plane, ua, ub, &f, oc, nc * p->tb);
            else image_bt(p, src + c * plane, ua, ub, &f, oc, nc * p->tb);
        }
    }
}

/* ---- the lanes' input, padded -------------------------------------------------
 * A lane whose patch reaches into the padding gathers it element by element
 * (gather_one), and on small images most do (a 7x7 image's 16 tiles: 12 of
 * them; 14% of a 512-channel 7x7 conv). So the images a block's tiles reach
 * are first copied into planes with a zero border, th m + 2 rows of tw m + 2
 * (a tile's patch starts at its output origin there), and the lanes read
 * those: every patch inside, gathered as runs of strided rows. */

static int64_t padded_plane(const wprob *p)
{
    return (p->th * p->f->m + 2) * (p->tw * p->f->m + 2);
}

/* The images a block of tiles reaches: its tiles' span, plus one for a
 * block starting inside an image. */
static int64_t block_images(const wprob *p)
{
    int64_t per = p->th * p->tw;
    return (p->tb + per - 1) / per + 1;
}

static int64_t padded_floats(const wprob *p)
{
    return p->planes ? 0 : block_images(p) * p->ci * padded_plane(p);
}

/* Images [ia, ib) of the input into padded planes at d (image i - ia,
 * channel c at ((i - ia) ci + c) plane), and q: p over them, the padding
 * theirs (lh = lw = 0), image ia its first. */
static void pad_images(const wprob *p, int64_t ia, int64_t ib, float *d, wprob *q)
{
    int64_t ph = p->th * p->f->m + 2, pw = p->tw * p->f->m + 2;
    for (int64_t i = ia; i < ib; i++)
        for (int64_t c = 0; c < p->ci; c++) {
            const float *xc = p->x + i * p->xs + c * p->h * p->w_;
            float *pc = d + ((i - ia) * p->ci + c) * ph * pw;
            for (int64_t r = 0; r < ph; r++) padded_row(p, xc, r, pc + r * pw, pw);
        }
    *q = *p;
    q->x = d;
    q->h = ph;
    q->w_ = pw;
    q->lh = q->lw = 0;
    q->xs = p->ci * ph * pw;
}

WIDE static void input_block(const wprob *p, float *v, int64_t t0, int64_t nt, float *rows)
{
    if (p->planes) {
        planes_block(p, false, v, t0, nt, rows);
        return;
    }
    int64_t per = p->th * p->tw, ia = t0 / per, ib = (t0 + nt - 1) / per + 1;
    float *d = rows + f2_bytes(p) / sizeof(float);   /* past the planes (rows_bytes) */
    wprob q;
    pad_images(p, ia, ib, d, &q);
    if (p->f == &F2) input_block_t(&q, &F2, v, t0 - ia * per, nt);
    else input_block_t(&q, &F4, v, t0 - ia * per, nt);
}

/* Lane l's m x m output tile of channel c, clipped to the output. */
INLINE void put_one(const wprob *p, int m, const lanes *ln, int64_t c, int l, const float *o)
{
    float *yc = p->y + ln->img[l] * p->ys + c * p->oh * p->ow + ln->r0[l] * p->ow + ln->c0[l];
    int64_t rn = p->oh - ln->r0[l] < m ? p->oh - ln->r0[l] : m;
    int64_t cn = p->ow - ln->c0[l] < m ? p->ow - ln->c0[l] : m;
    for (int64_t i = 0; i < rn; i++)
        for (int64_t j = 0; j < cn; j++) yc[i * p->ow + j] = o[(i * m + j) * LANES + l];
}

/* Writes the lanes' m x m output tiles of channel c (a run's whole tiles
 * as strided rows). A fused epilogue (bias, activation, residual, batch
 * norm of channel c) would run on o here, before the stores. */
INLINE void put_lanes(const wprob *p, int m, const lanes *ln, int64_t c, const float *o)
{
    for (int r = 0; r < ln->runs; r++) {
        int o0 = ln->out0[r], o1 = ln->out1[r];
        if (o1 > o0) {
            float *y = p->y + ln->img[o0] * p->ys + c * p->oh * p->ow + ln->r0[o0] * p->ow +
                       ln->c0[o0];
            for (int i = 0; i < m; i++)
                for (int j = 0; j < m; j++) {
                    const float *oo = o + (i * m + j) * LANES;
                    float *yy = y + i * p->ow + j - o0 * m;
                    for (int q = o0; q < o1; q++) yy[q * m] = oo[q];
                }
        }
        for (int l = o1; l < ln->at[r + 1]; l++) put_one(p, m, ln, c, l, o);
    }
}

/* The output of the block's tiles [t0, t0 + nt), from M: every channel of
 * those tiles; the one place the block's results are written. */
INLINE void put_block_t(const wprob *p, const wmat *f, const float *mm, int64_t t0, int64_t nt)
{
    int a = f->a, m = f->m;
    float d[AMAX * AMAX * LANES], tmp[AMAX * AMAX * LANES], o[AMAX * AMAX * LANES];
    lanes ln;
    for (int64_t g0 = 0; g0 < nt; g0 += LANES) {
        lanes_at(p, t0 + g0, t0 + nt, &ln);
        for (int64_t c = 0; c < p->co; c++) {
            for (int xi = 0; xi < a * a; xi++)
                memcpy(d + xi * LANES, mm + (xi * p->co + c) * p->tb + g0, sizeof(float) * LANES);
            io_xform(f, true, d, tmp, o);
            put_lanes(p, m, &ln, c, o);
        }
    }
}

/* Output row i of an image's tiles [ua, ub) into o (tile u at 2u, 2u + 1)
 * from M's rows 4 r + k at m + (4 r + k) ms, m starting at row i: A^T's
 * row 0 is m0 + (m1 + m2), row 1 m1 - (m2 + m3) (sg 1 or -1), then the
 * same along the row. */
INLINE void at_row(const float *m, int64_t ms, int64_t ua, int64_t ub, float sg,
                   float *restrict o)
{
    const float *restrict a0 = m - ua, *restrict a1 = a0 + ms, *restrict a2 = a0 + 2 * ms,
                          *restrict a3 = a0 + 3 * ms;
    const float *restrict b0 = a0 + 4 * ms, *restrict b1 = b0 + ms, *restrict b2 = b0 + 2 * ms,
                          *restrict b3 = b0 + 3 * ms;
    const float *restrict c0 = b0 + 4 * ms, *restrict c1 = c0 + ms, *restrict c2 = c0 + 2 * ms,
                          *restrict c3 = c0 + 3 * ms;
    for (int64_t u = ua; u < ub; u++) {
        float q0 = a0[u] + sg * (b0[u] + c0[u]), q1 = a1[u] + sg * (b1[u] + c1[u]);
        float q2 = a2[u] + sg * (b2[u] + c2[u]), q3 = a3[u] + sg * (b3[u] + c3[u]);
        o[2 * u] = q0 + q1 + q2;
        o[2 * u + 1] = q1 - q2 - q3;
    }
}

/* Output of an image's tiles [ua, ub) into channel plane yc, from M's
 * columns m + xi * ms (tile u at column u - ua): A^T m A, vertical first,
 * into the output planes (tile u's rows at columns 2u, 2u + 1), then the
 * tiles' rows copied out, clipped to the output (the extra tile of each
 * row lies past it). A fused epilogue (bias, activation, the channel's
 * batch norm) would run on the planes here, before the copy. */
INLINE void image_at(const wprob *p, const float *m, int64_t ms, int64_t ua, int64_t ub,
                     const f2planes *f, float *yc)
{
    at_row(m, ms, ua, ub, 1.0f, f->o[0]);
    at_row(m + 4 * ms, ms, ua, ub, -1.0f, f->o[1]);
    for (int64_t tr = ua / p->tw; tr * p->tw < ub; tr++) {
        int64_t ta = ua > tr * p->tw ? ua - tr * p->tw : 0;
        int64_t tb = ub < (tr + 1) * p->tw ? ub - tr * p->tw : p->tw;
        int64_t c1 = 2 * tb < p->ow ? 2 * tb : p->ow;
        for (int i = 0; i < 2 && 2 * tr + i < p->oh && c1 > 2 * ta; i++)
            memcpy(yc + (2 * tr + i) * p->ow + 2 * ta, f->o[i] + tr * f->wp + 2 * ta,
                   sizeof *yc * (size_t)(c1 - 2 * ta));
    }
}

WIDE static void put_f2(const wprob *p, const float *mm, int64_t t0, int64_t nt, float *rows)
{
    f2planes f = f2_at(p, rows);
    for (int64_t t = t0, img, ua, ub; t < t0 + nt; t += ub - ua) {
        image_run(p, t, t0 + nt, &img, &ua, &ub);
        float *yi = p->y + img * p->ys;
        for (int64_t c = 0; c < p->co; c++)
            image_at(p, mm + c * p->tb + (t - t0), p->co * p->tb, ua, ub, &f,
                     yi + c * p->oh * p->ow);
    }
}

WIDE static void put_block(const wprob *p, const float *mm, int64_t t0, int64_t nt, float *rows)
{
    if (p->planes) put_f2(p, mm, t0, nt, rows);
    else if (p->f == &F2) put_block_t(p, &F2, mm, t0, nt);
    else put_block_t(p, &F4, mm, t0, nt);
}

/* ---- the weight gradient's sums and output transform ---------------------- */

/* G^T's three rows on four values (m0..m3 ms apart): [m0 + (m1 + m2) / 2,
 * (m1 - m2) / 2, (m1 + m2) / 2 + m3]. */
static void gt3(const float *m, int64_t ms, float *o, int64_t os)
{
    float h = (m[ms] + m[2 * ms]) * 0.5f;
    o[0] = m[0] + h;
    o[os] = (m[ms] - m[2 * ms]) * 0.5f;
    o[2 * os] = h + m[3 * ms];
}

/* dW = G^T M G for every (co, ci): M[xi][co][ci] (xi = 4 i + j, i down). */
static void wgrad_out(const wprob *p, const float *mm)
{
    int64_t xs = p->co * p->ci;
    for (int64_t o = 0; o < p->co; o++)
        for (int64_t i = 0; i < p->ci; i++) {
            float t[3][4];   /* G^T down each of M's four columns */
            for (int j = 0; j < 4; j++) gt3(mm + j * xs + o * p->ci + i, 4 * xs, &t[0][j], 4);
            float *w = p->dw + o * p->wo + i * p->wi;
            for (int r = 0; r < 3; r++) gt3(t[r], 1, w + 3 * r, 1);
        }
}

/* One group's weight gradient: M (16 co ci), V and S (16 ci tb, 16 co tb)
 * in scratch; M sums over every block, from zeros (no tiles: dW = 0). */
static void run_wgrad(const wprob *p, float *mm, float *v, float *sg, float *rows,
                      ot__gemm_fn *gemm)
{
    memset(mm, 0, sizeof *mm * (size_t)(16 * p->co * p->ci));
    for (int64_t t0 = 0; t0 < p->tiles; t0 += p->tb) {
        int64_t nt = p->tiles - t0 < p->tb ? p->tiles - t0 : p->tb;
        input_block(p, v, t0, nt, rows);
        planes_block(p, true, sg, t0, nt, rows);
        for (int64_t xi = 0; xi < 16; xi++)
            gemm(&(ot__gemm){OT_F32, sg + xi * p->co * p->tb, v + xi * p->ci * p->tb,
                             mm + xi * p->co * p->ci, false, true, p->co, p->ci, nt, p->tb, p->tb,
                             p->ci, 1.0, 1.0});
    }
    wgrad_out(p, mm);
}

/* ---- the run ---------------------------------------------------------------- */

static void run_group(const wprob *p, float *u, float *v, float *mm, float *rows,
                      ot__gemm_fn *gemm)
{
    int64_t a2 = p->f->a * p->f->a;
    weights(p, u);
    for (int64_t t0 = 0; t0 < p->tiles; t0 += p->tb) {
        int64_t nt = p->tiles - t0 < p->tb ? p->tiles - t0 : p->tb;
        input_block(p, v, t0, nt, rows);
        for (int64_t xi = 0; xi < a2; xi++)
            gemm(&(ot__gemm){OT_F32, u + xi * p->co * p->ci, v + xi * p->ci * p->tb,
                             mm + xi * p->co * p->tb, false, false, p->co, nt, p->ci, p->ci, p->tb,
                             p->tb, 1.0, 0.0});
        put_block(p, mm, t0, nt, rows);
    }
}

static float *align64(char *s) { return (float *)(((uintptr_t)s + 63) & ~(uintptr_t)63); }

void ot__wino_run(const ot_kernel *k, char *const xsw[3], char *scratch)
{
    const ot__conv_geom *g = &k->conv;
    bool tr = k->conv_op == OT_OP_CONV_TRANSPOSE;
    wprob p;
    shape_of(k, &p);
    float *u = align64(scratch);
    float *v = (float *)((char *)u + part_bytes(&p, 0));
    float *mm = (float *)((char *)v + part_bytes(&p, 1));
    float *rows = (float *)((char *)mm + part_bytes(&p, 2));
    ot__gemm_fn *gemm = ot__gemm_pick();
    int64_t xsz = g->xc * g->xp[0] * g->xp[1], ssz = g->sc * g->sp[0] * g->sp[1];
    const float *xs = (const float *)xsw[0], *ss = (const float *)xsw[1];
    for (int64_t grp = 0; grp < g->groups; grp++) {
        p.x = tr ? ss + grp * ssz : xs + grp * xsz;
        p.xs = g->groups * (tr ? ssz : xsz);
        p.ys = g->groups * (tr ? xsz : ssz);
        if (p.wgrad) {   /* reads x and the gradient S, writes W; M in U's room, S in M's */
            p.gy = ss + grp * ssz;
            p.dw = (float *)xsw[2] + grp * g->sc * g->xc * 9;
            run_wgrad(&p, u, v, mm, rows, gemm);
            continue;
        }
        p.y = (float *)(tr ? xsw[0] : xsw[1]) + grp * (tr ? xsz : ssz);
        p.w = (const float *)xsw[2] + grp * g->sc * g->xc * 9;
        run_group(&p, u, v, mm, rows, gemm);
    }
}

/* One pass over the result, no early exit, so that it vectorises (this
 * file is built at -O3): an exponent of all ones is an inf or a NaN. */
bool ot__wino_finite(const float *y, int64_t n)
{
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &y[i], sizeof b);
        bad |= (b & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

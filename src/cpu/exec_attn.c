/*
 * exec_attn.c - the cpu backend's attention kernels (OT_KER_ATTN:
 * attention, attention_grad) over internal.h's loop (ot__attn_geom), fused
 * as FlashAttention does (Dao et al. 2022): per (batch, head), q, k and v
 * are copied contiguous (whatever the operands' views), then
 *   forward: per block of BR query rows, the scores of one block of BC
 *   keys at a time (a GEMM), scaled, masked, and folded into a running
 *   max and sum (the online softmax), the output rescaled and the block's
 *   P . V added (a GEMM); each row ends as output / sum and its
 *   logsumexp, which the node keeps in its last column;
 *   backward: per block of keys, every block of queries that sees it
 *   recomputes P from q, k and the saved logsumexp, and adds dV += P^T dO,
 *   dS = P (dO V^T - rowsum(dO o) + dlse), dQ += scale dS K, dK += scale
 *   dS^T Q and the mask's dS (all GEMMs but the elementwise step); a
 *   row whose logsumexp has lost its log-sum to rounding (a huge max) gets
 *   its P renormalised over the row first; a
 *   head whose dO or D is not finite goes key by key instead, skipping
 *   the keys a row does not see, as ref does (the GEMMs made their P of 0
 *   times inf NaN).
 * Only tiles (BR x BC) and per-head copies are held: memory is linear in
 * the sequence, never seq_q x seq_k. The body is exec_attn.inc, compiled
 * once for float and once for double.
 */
#include "blas.h"
#include "cpu.h"

#include <float.h>
#include <math.h>

#define BR 64    /* query rows per block */
#define BC 128   /* keys per block */

/* The run's views in elements: a (q, or attention_grad's x), the pack and
 * the store; and the kernel table's vector exp, max and sum for the dtype
 * (a score tile's exps are most of the work outside the GEMMs: one libm
 * call per score cost more than the GEMMs at head dim 32). */
typedef struct attn_io {
    const char *a, *pack;
    char *out;
    int64_t as[4], ps, os[4];
    ot_k1 exp;
    double (*max)(const void *a, size_t n), (*sum)(const void *a, size_t n);
} attn_io;

static int64_t mask_base(const ot__attn_geom *g, int64_t b, int64_t h, int64_t i)
{
    const int64_t *m = g->mdim;
    int64_t x[3] = {m[0] > 1 ? b : 0, m[1] > 1 ? h : 0, m[2] > 1 ? i : 0};
    return ((x[0] * m[1] + x[1]) * m[2] + x[2]) * m[3];
}

static void gemm(int dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha,
                 const void *a, int64_t lda, const void *b, int64_t ldb, double beta, void *c,
                 int64_t ldc)
{
    if (m == 0 || n == 0) return;
    if (k == 0) {   /* C = beta C: dim 0 gives zero scores */
        for (int64_t r = 0; r < m && beta == 0; r++)
            memset((char *)c + r * ldc * (dt == OT_F32 ? 4 : 8), 0, (size_t)n * (dt == OT_F32 ? 4 : 8));
        return;
    }
    /* BLAS skips the product when alpha is 0, so a score of scale 0 times
     * an inf dot would be 0, not ref's NaN: form it and scale it here */
    bool zero = alpha == 0 && beta == 0;
    ot__gemm g = {.dt = dt, .a = a, .b = b, .c = c, .ta = ta, .tb = tb, .m = m, .n = n, .k = k,
                  .lda = lda, .ldb = ldb, .ldc = ldc, .alpha = zero ? 1 : alpha, .beta = beta};
    ot__gemm_pick()(&g);
    for (int64_t r = 0; zero && r < m; r++)
        for (int64_t j = 0; j < n; j++) {
            if (dt == OT_F32) ((float *)c)[r * ldc + j] *= 0.0f;
            else ((double *)c)[r * ldc + j] *= 0.0;
        }
}

/* Per-head scratch, in elements of the dtype (doubles for the rows'
 * running max and sum): q, k, v copies, a score tile, and the forward's
 * output block or the backward's o, dO, lse, D, dQ, dP, dK and dV. */
typedef struct attn_mem {
    int64_t q, k, v, s, o, dout, lse, dsum, inv, dq, dp, dk, dv, end;
} attn_mem;

static attn_mem mem_of(const ot__attn_geom *g)
{
    attn_mem m;
    int64_t at = 0;
#define TAKE(f, n) (m.f = at, at += ((n) + 15) & ~(int64_t)15)
    TAKE(q, g->sq * g->d);
    TAKE(k, g->sk * g->d);
    TAKE(v, g->sk * g->dv);
    TAKE(s, BR * BC);
    bool back = g->op == OT_OP_ATTENTION_GRAD;
    TAKE(o, back ? g->sq * g->dv : BR * g->dv);
    TAKE(dout, back ? g->sq * g->dv : 0);
    TAKE(lse, back ? g->sq : 2 * BR);   /* forward: the running max and sum, doubles */
    TAKE(dsum, back ? g->sq : 2 * BR);
    TAKE(inv, back ? g->sq : 0);   /* the rows' P factors (bwd_renorm) */
    TAKE(dq, back ? g->sq * g->d : 0);
    TAKE(dp, back ? BR * BC : 0);
    TAKE(dk, back ? BC * g->d : 0);
    TAKE(dv, back ? BC * g->dv : 0);
#undef TAKE
    m.end = at;
    return m;
}

bool ot__attn_scratch(const ot_kernel *k, size_t *bytes)
{
    attn_mem m = mem_of(&k->attn);
    return ot__mul_size(bytes, (size_t)m.end, 8);   /* doubles for f32 too: the rows' */
}

#define T float
#define SUF f32
#define DT OT_F32
#define EXP expf
#define EPS FLT_EPSILON
#include "exec_attn.inc"
#undef T
#undef SUF
#undef DT
#undef EXP
#undef EPS

#define T double
#define SUF f64
#define DT OT_F64
#define EXP exp
#define EPS DBL_EPSILON
#include "exec_attn.inc"

void ot__run_attn(const ot_kernel *k, char *const base[2], char *dst, char *scratch,
                  const ot_kernels *kt, int acc)
{
    const ot__attn_geom *g = &k->attn;
    bool f32 = k->store.dtype == OT_F32;
    int kd = f32 ? OT_KD_F32 : OT_KD_F64;
    attn_io io = {.a = base[0], .pack = base[1], .out = dst, .ps = k->loads[1].strides[0],
                  .exp = kt->unary[acc][OT_OP_EXP][kd], .max = kt->max[kd], .sum = kt->sum[kd]};
    for (int d = 0; d < 4; d++) io.as[d] = k->loads[0].strides[d];
    int nd = k->shape.ndim;
    for (int d = 0; d < nd; d++) io.os[d] = k->store.strides[d];
    if (g->op == OT_OP_ATTENTION_GRAD && g->mask) {   /* dmask sums into zeros */
        int64_t at = g->b * g->h * g->sq * g->d + g->moff, n = g->npack - g->moff;
        for (int64_t i = 0; i < n; i++) {
            char *p = dst + (at + i) * io.os[0] * (f32 ? 4 : 8);
            if (f32) *(float *)p = 0;
            else *(double *)p = 0;
        }
    }
    for (int64_t b = 0; b < g->b; b++)
        for (int64_t h = 0; h < g->h; h++) {
            if (f32 && g->op == OT_OP_ATTENTION) fwd_head_f32(g, &io, b, h, scratch);
            else if (f32) bwd_head_f32(g, &io, b, h, scratch);
            else if (g->op == OT_OP_ATTENTION) fwd_head_f64(g, &io, b, h, scratch);
            else bwd_head_f64(g, &io, b, h, scratch);
        }
}

void ot__attn_describe(FILE *f, const ot_kernel *k)
{
    const ot__attn_geom *g = &k->attn;
    fprintf(f, " %s [%lldx%lldx%lldx%lld . %lld keys, dim %lld/%lld] (flash %s: tiles %dx%d, %s%s%s)",
            ot_op_name((ot_op)g->op), (long long)g->b, (long long)g->h, (long long)g->sq,
            (long long)g->d, (long long)g->sk, (long long)g->d, (long long)g->dv,
            g->op == OT_OP_ATTENTION ? "forward, online softmax" : "backward, P recomputed",
            BR, BC, k->store.dtype == OT_F32 ? "sgemm" : "dgemm", g->causal ? ", causal" : "",
            g->mask ? ", mask" : "");
}

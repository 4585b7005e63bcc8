/*
 * blas.c - dot and batched_dot on the cpu backend, through OpenBLAS.
 *
 * A DOT kernel is C = alpha*A.B + beta*C per batch index, where A, B and C
 * are strided 2-D views. Views BLAS can read as they are (a unit stride on
 * one side and a leading dim at least the other side's length) go in place,
 * a transposed view as a transpose flag; any other layout (a negative or
 * zero stride, no unit stride, another dtype) is copied to a contiguous
 * array first, so BLAS never sees an invalid leading dim. A vector operand
 * takes gemv. K = 0 is handled here (BLAS would skip the beta scaling on some
 * builds): C = alpha*0 + beta*C, with beta = 0 not reading C, so that zeros
 * get the sign ref gives them. With K > 0 and a negative alpha, a zero may be
 * +0 where ref's is -0: OpenBLAS adds alpha*A.B to a zeroed C for larger
 * sizes, and a C of -0 with beta 1 costs a write pass (README, cpu backend).
 * OpenBLAS's thread count is process-wide, so it is never set here: a host
 * program and two backends with different thread counts would fight over
 * it. It is the host's (OPENBLAS_NUM_THREADS, openblas_set_num_threads).
 *
 * ot__run_dot_panels runs a dot as GEMMs on row panels of C, each panel
 * handed to an epilogue while it is in cache (exec.c's dot segments).
 *
 * A product is an ot__gemm, run by cblas (ot__gemm_blas) or, where the
 * library's products disagreed with the C loop here (ot__gemm_agrees; the
 * process's choice is blas_core.c's, made before its first dot), by that
 * loop (ot__gemm_loop).
 */
#include "blas.h"
#include "cpu.h"

#include <cblas.h>
#include <math.h>

/* A 2-D operand as BLAS reads it. */
typedef struct operand {
    const char *p;
    int64_t ld;
    bool trans;
} operand;

/* Whether rows x cols with strides st is a BLAS layout, and which one. */
static bool blas_layout(int64_t rows, int64_t cols, const int64_t *st, operand *o)
{
    int64_t r = rows > 1 ? st[0] : 0, c = cols > 1 ? st[1] : 0;
    if ((cols <= 1 || c == 1) && (rows <= 1 || r >= (cols > 1 ? cols : 1))) {
        o->trans = false;
        o->ld = rows > 1 ? r : (cols > 1 ? cols : 1);
        return true;
    }
    if ((rows <= 1 || r == 1) && (cols <= 1 || c >= (rows > 1 ? rows : 1))) {
        o->trans = true;
        o->ld = cols > 1 ? c : (rows > 1 ? rows : 1);
        return true;
    }
    return false;
}

/* Copies a strided 2-D view of dtype `from` into buf (row-major, dtype dt). */
static void pack(char *buf, const char *src, ot_dtype from, int64_t rows, int64_t cols,
                 const int64_t *st, ot_dtype dt)
{
    int64_t es = (int64_t)ot__esize(dt), fs = (int64_t)ot__esize(from);
    for (int64_t i = 0; i < rows; i++)
        for (int64_t j = 0; j < cols; j++)
            ot__store(buf + (i * cols + j) * es, dt, ot__load(src + (i * st[0] + j * st[1]) * fs, from));
}

/* One operand of the product: in place, or packed into scratch (packed
 * once when every batch shares it). */
typedef struct side {
    const ot_view *v;
    const char *base;
    int64_t rows, cols;
    char *scratch;
    const char *packed_from;   /* the batch pointer scratch holds, if any */
} side;

/* Whether v (rows x cols) must be packed to be multiplied as dtype dt; its
 * layout does not depend on the batch, and a block of fewer rows packs no
 * more than the whole. */
static bool needs_pack(const ot_view *v, int64_t rows, int64_t cols, ot_dtype dt)
{
    operand o;
    return v->dtype != dt || !blas_layout(rows, cols, v->strides, &o);
}

static void side_at(side *s, int64_t b, ot_dtype dt, operand *o)
{
    int64_t fs = (int64_t)ot__esize(s->v->dtype);
    const char *p = s->base + b * s->v->strides[2] * fs;
    o->p = p;
    if (s->v->dtype == dt && blas_layout(s->rows, s->cols, s->v->strides, o)) return;
    if (s->packed_from != p) pack(s->scratch, p, (ot_dtype)s->v->dtype, s->rows, s->cols, s->v->strides, dt);
    s->packed_from = p;
    *o = (operand){s->scratch, s->cols > 1 ? s->cols : 1, false};
}

/* Bytes of v's packed copy, 64-aligned; 0 where BLAS reads it in place. */
static bool pack_bytes(size_t *bytes, const ot_view *v, int64_t rows, int64_t cols, ot_dtype dt)
{
    *bytes = 0;
    if (!needs_pack(v, rows, cols, dt)) return true;
    if (!ot__mul_size(bytes, (size_t)(rows * cols), ot__esize(dt)) || *bytes > SIZE_MAX - 63)
        return false;
    *bytes = (*bytes + 63) & ~(size_t)63;
    return true;
}

bool ot__dot_scratch(const ot_kernel *k, size_t *bytes)
{
    ot_dtype dt = (ot_dtype)k->store.dtype;
    size_t a, b;
    *bytes = 0;
    if (k->m == 0 || k->n == 0 || k->batch == 0 || k->k == 0) return true;
    if (!pack_bytes(&a, &k->loads[0], k->m, k->k, dt) || !pack_bytes(&b, &k->loads[1], k->k, k->n, dt) ||
        a > SIZE_MAX - b)
        return false;
    *bytes = a + b;
    return true;
}

static double scale_value(ot_scale s, const double *param)
{
    return s.param >= 0 ? s.mul * param[s.param] : s.mul;
}

/* C = alpha*0 + beta*C for K = 0, as the tree computes it over a dot of
 * zeros (the zero's sign, and NaN for an infinite alpha); beta = 0 (no
 * beta) does not read C. */
static void scale_rows(char *c, ot_dtype dt, int64_t m, int64_t n, int64_t ldc, double alpha,
                       double beta)
{
    int64_t es = (int64_t)ot__esize(dt);
    for (int64_t i = 0; i < m; i++)
        for (int64_t j = 0; j < n; j++) {
            char *p = c + (i * ldc + j) * es;
            ot__store(p, dt, beta == 0 ? alpha * 0.0 : beta * ot__load(p, dt) + alpha * 0.0);
        }
}

void ot__gemm_blas(const ot__gemm *g)
{
    enum CBLAS_TRANSPOSE ta = g->ta ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = g->tb ? CblasTrans : CblasNoTrans;
    blasint bm = (blasint)g->m, bn = (blasint)g->n, bk = (blasint)g->k, lda = (blasint)g->lda,
            ldb = (blasint)g->ldb, ldc = (blasint)(g->ldc > 1 ? g->ldc : 1);
    float fa = (float)g->alpha, fb = (float)g->beta;
    if (g->n == 1) {   /* c[:, 0] = A x: gemv over A, x a column of B */
        blasint incx = (blasint)(g->tb ? 1 : g->ldb);
        blasint rows = g->ta ? bk : bm, cols = g->ta ? bm : bk;
        if (g->dt == OT_F32)
            cblas_sgemv(CblasRowMajor, ta, rows, cols, fa, g->a, lda, g->b, incx, fb, g->c, ldc);
        else
            cblas_dgemv(CblasRowMajor, ta, rows, cols, g->alpha, g->a, lda, g->b, incx, g->beta,
                        g->c, ldc);
    } else if (g->m == 1) {   /* c[0, :] = B^T x: gemv over B transposed */
        enum CBLAS_TRANSPOSE tbt = g->tb ? CblasNoTrans : CblasTrans;
        blasint incx = (blasint)(g->ta ? g->lda : 1);
        blasint rows = g->tb ? bn : bk, cols = g->tb ? bk : bn;
        if (g->dt == OT_F32)
            cblas_sgemv(CblasRowMajor, tbt, rows, cols, fa, g->b, ldb, g->a, incx, fb, g->c, 1);
        else
            cblas_dgemv(CblasRowMajor, tbt, rows, cols, g->alpha, g->b, ldb, g->a, incx, g->beta,
                        g->c, 1);
    } else if (g->dt == OT_F32) {
        cblas_sgemm(CblasRowMajor, ta, tb, bm, bn, bk, fa, g->a, lda, g->b, ldb, fb, g->c, ldc);
    } else {
        cblas_dgemm(CblasRowMajor, ta, tb, bm, bn, bk, g->alpha, g->a, lda, g->b, ldb, g->beta,
                    g->c, ldc);
    }
}

/* Row i, column j of op(A).op(B), summed in double in order of p. */
static double dot_at(const ot__gemm *g, int64_t i, int64_t j)
{
    int64_t ai = g->ta ? 1 : g->lda, ap = g->ta ? g->lda : 1;
    int64_t bp = g->tb ? 1 : g->ldb, bj = g->tb ? g->ldb : 1;
    double s = 0;
    if (g->dt == OT_F32) {
        const float *a = (const float *)g->a + i * ai, *b = (const float *)g->b + j * bj;
        for (int64_t p = 0; p < g->k; p++) s += (double)a[p * ap] * b[p * bp];
    } else {
        const double *a = (const double *)g->a + i * ai, *b = (const double *)g->b + j * bj;
        for (int64_t p = 0; p < g->k; p++) s += a[p * ap] * b[p * bp];
    }
    return s;
}

ot__gemm_fn *ot__gemm_pick(void) { return ot__blas_ready() ? ot__gemm_loop : ot__gemm_blas; }

void ot__gemm_loop(const ot__gemm *g)
{
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t j = 0; j < g->n; j++) {
            char *p = (char *)g->c + (i * g->ldc + j) * (int64_t)ot__esize(g->dt);
            double v = g->alpha * dot_at(g, i, j);
            ot_dtype dt = (ot_dtype)g->dt;
            ot__store(p, dt, g->beta == 0 ? v : v + g->beta * ot__load(p, dt));
        }
}

void ot__run_dot(const ot_kernel *k, char *const base[2], char *dst,
                 const double *param, char *scratch)
{
    ot_dtype dt = (ot_dtype)k->store.dtype;
    int64_t es = (int64_t)ot__esize(dt), ldc = k->store.strides[0];
    double alpha = scale_value(k->alpha, param), beta = scale_value(k->beta, param);
    if (k->m == 0 || k->n == 0 || k->batch == 0) return;
    if (k->k == 0) {
        for (int64_t b = 0; b < k->batch; b++)
            scale_rows(dst + b * k->store.strides[2] * es, dt, k->m, k->n, ldc, alpha, beta);
        return;
    }
    size_t a_bytes;
    pack_bytes(&a_bytes, &k->loads[0], k->m, k->k, dt);
    side sa = {&k->loads[0], base[0], k->m, k->k, scratch, NULL};
    side sb = {&k->loads[1], base[1], k->k, k->n, scratch + a_bytes, NULL};
    ot__gemm_fn *run = ot__gemm_pick();
    for (int64_t b = 0; b < k->batch; b++) {
        operand a, bo;
        side_at(&sa, b, dt, &a);
        side_at(&sb, b, dt, &bo);
        run(&(ot__gemm){dt, a.p, bo.p, dst + b * k->store.strides[2] * es, a.trans, bo.trans,
                        k->m, k->n, k->k, a.ld, bo.ld, ldc, alpha, beta});
    }
}

void ot__run_dot_panels(const ot_kernel *k, char *const base[2], char *dst, const double *param,
                        char *scratch, const ot__panels *pp)
{
    int64_t es = (int64_t)ot__esize((ot_dtype)k->store.dtype);
    int64_t as = (int64_t)ot__esize((ot_dtype)k->loads[0].dtype), step = pp->rows > 0 ? pp->rows : k->m;
    for (int64_t r0 = 0; r0 < k->m; r0 += step) {
        ot_kernel panel = *k;
        panel.m = k->m - r0 < step ? k->m - r0 : step;
        char *in[2] = {base[0] + r0 * k->loads[0].strides[0] * as, base[1]};
        ot__run_dot(&panel, in, pp->reuse ? dst : dst + r0 * k->store.strides[0] * es, param, scratch);
        pp->epi(pp->ctx, r0, panel.m);
    }
}

/* ---- the check of a GEMM against the C loop ------------------------------- */

/* The shapes: sizes on both sides of OpenBLAS's small-matrix path (M*N*K
 * of a million) and of its threading threshold, edges off every kernel's
 * block width, all four transpose pairs, beta 0 (C not read) and not, and
 * the gemv forms. */
typedef struct check_shape {
    int dt;
    bool ta, tb;
    int64_t m, n, k;
    double alpha, beta;
} check_shape;
static const check_shape shapes[] = {
    {OT_F32, false, false, 101, 100, 101, 1, 0},   {OT_F32, true, false, 37, 29, 45, -0.5, 1.5},
    {OT_F32, false, true, 7, 65, 200, 1, 0.25},    {OT_F32, true, true, 1, 77, 50, 2, 0},
    {OT_F64, false, false, 97, 103, 101, 1, 0.75},  {OT_F64, true, true, 19, 33, 17, 2, 0},
    {OT_F64, false, true, 61, 1, 40, 1, -1},
};

/* Values in [-1, 1] from a fixed sequence, exact in f32. */
static void fill(void *x, int dt, int64_t count, uint32_t seed)
{
    for (int64_t i = 0; i < count; i++) {
        seed = seed * 1664525u + 1013904223u;
        ot__store((char *)x + i * (int64_t)ot__esize(dt), (ot_dtype)dt,
                  (double)((int)(seed >> 20) - 2048) / 2048.0);
    }
}

/* The rows the check compares: every fifth (which meets every row of a
 * micro-tile of 4, 8 or 16 rows, 5 being prime to them) and the last 8
 * (the tail tiles): a quarter of the reference's work, which under
 * valgrind is most of a first dot's. */
static bool checked_row(int64_t i, int64_t m) { return i % 5 == 0 || i >= m - 8; }

/* The product in double over the checked rows, row by row (p outer, j inner: the rows of a
 * B stored as is are read in order, which the compiler vectorises), each
 * element summed in order of p, as dot_at sums it. */
static void ref_product(const ot__gemm *g, double *want)
{
    int64_t ai = g->ta ? 1 : g->lda, ap = g->ta ? g->lda : 1;
    int64_t bp = g->tb ? 1 : g->ldb, bj = g->tb ? g->ldb : 1, es = (int64_t)ot__esize(g->dt);
    memset(want, 0, sizeof *want * (size_t)(g->m * g->n));
    for (int64_t i = 0; i < g->m; i++)
        for (int64_t p = 0; checked_row(i, g->m) && p < g->k; p++) {
            double *w = want + i * g->n;
            int64_t at = i * ai + p * ap, row = p * bp;
            double a = g->dt == OT_F32 ? ((const float *)g->a)[at] : ((const double *)g->a)[at];
            if (g->dt == OT_F32 && bj == 1)
                for (int64_t j = 0; j < g->n; j++) w[j] += a * ((const float *)g->b)[row + j];
            else if (bj == 1)
                for (int64_t j = 0; j < g->n; j++) w[j] += a * ((const double *)g->b)[row + j];
            else
                for (int64_t j = 0; j < g->n; j++)
                    w[j] += a * ot__load((const char *)g->b + (row + j * bj) * es, (ot_dtype)g->dt);
        }
}

/* Whether fn computes shape s within a rounding bound of the sum in
 * double: 8 (k + 2) eps of the largest sum the values (all in [-1, 1])
 * can make, where a wrong kernel is off by about the values themselves (a
 * product left out or counted twice moves a sum by up to 1). */
static bool agrees_on(ot__gemm_fn *fn, const check_shape *s, char *why, size_t n)
{
    int64_t lda = s->ta ? s->m + 3 : s->k + 3, ldb = s->tb ? s->k + 3 : s->n + 3, ldc = s->n + 5;
    int64_t na = (s->ta ? s->k : s->m) * lda, nb = (s->tb ? s->n : s->k) * ldb, nc = s->m * ldc;
    size_t es = ot__esize(s->dt), head = ((size_t)(na + nb + 2 * nc) * es + 7) & ~(size_t)7;
    char *buf = malloc(head + sizeof(double) * (size_t)(s->m * s->n));
    if (!buf) return true;   /* unchecked rather than a failure of the BLAS */
    char *a = buf, *b = a + na * (int64_t)es, *c = b + nb * (int64_t)es, *c0 = c + nc * (int64_t)es;
    double *want = (double *)(void *)(buf + head);   /* 8-aligned after the f32 arrays */
    fill(a, s->dt, na, 1u + (uint32_t)s->m);
    fill(b, s->dt, nb, 7u + (uint32_t)s->n);
    fill(c, s->dt, nc, 13u + (uint32_t)s->k);
    memcpy(c0, c, (size_t)nc * es);
    ot__gemm g = {s->dt, a, b, c, s->ta, s->tb, s->m, s->n, s->k, lda, ldb, ldc, s->alpha, s->beta};
    fn(&g);
    ref_product(&g, want);
    double eps = s->dt == OT_F32 ? 0x1p-23 : 0x1p-52;
    bool ok = true;
    for (int64_t i = 0; ok && i < s->m; i++)
        for (int64_t j = 0; ok && checked_row(i, s->m) && j < s->n; j++) {
            int64_t at = (i * ldc + j) * (int64_t)es;
            double old = s->beta == 0 ? 0 : s->beta * ot__load(c0 + at, (ot_dtype)s->dt);
            double ref = s->alpha * want[i * s->n + j] + old;
            double got = ot__load(c + at, (ot_dtype)s->dt);
            double bound = 8 * (double)(s->k + 2) * eps *
                           (fabs(s->alpha) * (double)s->k + fabs(old));
            ok = fabs(got - ref) <= bound;
            if (!ok)
                snprintf(why, n, "%sgemm %s%s %lldx%lldx%lld: C[%lld,%lld] = %g, not %g",
                         s->dt == OT_F32 ? "s" : "d", s->ta ? "T" : "N", s->tb ? "T" : "N",
                         (long long)s->m, (long long)s->n, (long long)s->k, (long long)i,
                         (long long)j, got, ref);
        }
    free(buf);
    return ok;
}

bool ot__gemm_agrees(ot__gemm_fn *fn, char *why, size_t n)
{
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (!agrees_on(fn, &shapes[i], why, n)) return false;
    return true;
}

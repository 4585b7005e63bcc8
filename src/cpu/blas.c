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
 */
#include "cpu.h"

#include <cblas.h>

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

static void gemm(ot_dtype dt, const operand *a, const operand *b, int64_t m, int64_t n, int64_t k,
                 double alpha, double beta, char *c, int64_t ldc)
{
    enum CBLAS_TRANSPOSE ta = a->trans ? CblasTrans : CblasNoTrans;
    enum CBLAS_TRANSPOSE tb = b->trans ? CblasTrans : CblasNoTrans;
    blasint bm = (blasint)m, bn = (blasint)n, bk = (blasint)k, lda = (blasint)a->ld,
            ldb = (blasint)b->ld, bldc = (blasint)(ldc > 1 ? ldc : 1);
    if (n == 1) {   /* c[:, 0] = A x: gemv over A, x a column of B */
        blasint incx = (blasint)(b->trans ? 1 : b->ld), incy = bldc;
        if (dt == OT_F32)
            cblas_sgemv(CblasRowMajor, ta, a->trans ? bk : bm, a->trans ? bm : bk, (float)alpha,
                        (const float *)a->p, lda, (const float *)b->p, incx, (float)beta, (float *)c, incy);
        else
            cblas_dgemv(CblasRowMajor, ta, a->trans ? bk : bm, a->trans ? bm : bk, alpha,
                        (const double *)a->p, lda, (const double *)b->p, incx, beta, (double *)c, incy);
    } else if (m == 1) {   /* c[0, :] = B^T x: gemv over B transposed */
        enum CBLAS_TRANSPOSE tbt = b->trans ? CblasNoTrans : CblasTrans;
        blasint incx = (blasint)(a->trans ? a->ld : 1);
        if (dt == OT_F32)
            cblas_sgemv(CblasRowMajor, tbt, b->trans ? bn : bk, b->trans ? bk : bn, (float)alpha,
                        (const float *)b->p, ldb, (const float *)a->p, incx, (float)beta, (float *)c, 1);
        else
            cblas_dgemv(CblasRowMajor, tbt, b->trans ? bn : bk, b->trans ? bk : bn, alpha,
                        (const double *)b->p, ldb, (const double *)a->p, incx, beta, (double *)c, 1);
    } else if (dt == OT_F32) {
        cblas_sgemm(CblasRowMajor, ta, tb, bm, bn, bk, (float)alpha, (const float *)a->p, lda,
                    (const float *)b->p, ldb, (float)beta, (float *)c, bldc);
    } else {
        cblas_dgemm(CblasRowMajor, ta, tb, bm, bn, bk, alpha, (const double *)a->p, lda,
                    (const double *)b->p, ldb, beta, (double *)c, bldc);
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
    for (int64_t b = 0; b < k->batch; b++) {
        operand a, bo;
        side_at(&sa, b, dt, &a);
        side_at(&sb, b, dt, &bo);
        gemm(dt, &a, &bo, k->m, k->n, k->k, alpha, beta, dst + b * k->store.strides[2] * es, ldc);
    }
}

/*
 * test_allreduce.c - tests of ot_allreduce and its nonblocking halves
 * (src/mpi/allreduce.c), run under mpirun -np 2 (or more) by tools/test.sh.
 * A collective needs every rank in the same process, so this is its own
 * program rather than cases of test_optree (which forks each case): each
 * case runs on every rank, counts as passed when no rank failed a check,
 * and rank 0 prints "N passed, M failed". Results are checked bitwise
 * against the sum computed here in rank order, and against every other
 * rank's result; every bad argument, and every mismatch between ranks, must
 * be the same error on every rank and leave the tensors untouched.
 */
#include "optree.h"

#include <mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static MPI_Comm world;
static int rank, ranks, fails;
static ot_backend *cpu, *ref;

#define CHECK(cond)                                                                     \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "  rank %d: %s:%d: CHECK(%s)\n", rank, __FILE__, __LINE__,  \
                    #cond);                                                             \
            fails++;                                                                    \
        }                                                                               \
    } while (0)
/* rc is code and the error message contains sub. */
#define CHECK_ERR(rc, code, sub)                                                        \
    do {                                                                                \
        CHECK((rc) == (code));                                                          \
        CHECK(ot_errcode() == (code));                                                  \
        if (!strstr(ot_errmsg(), (sub))) {                                              \
            fprintf(stderr, "  rank %d: %s:%d: \"%s\" lacks \"%s\"\n", rank, __FILE__,  \
                    __LINE__, ot_errmsg(), (sub));                                      \
            fails++;                                                                    \
        }                                                                               \
    } while (0)

/* A value that depends on the rank, the tensor and the element, with
 * magnitudes spread so that the order of a sum changes its rounding. */
static double value(int r, int t, int64_t i)
{
    uint64_t z = (uint64_t)r * 0x9e3779b97f4a7c15ULL + (uint64_t)t * 0xbf58476d1ce4e5b9ULL +
                 (uint64_t)i * 0x94d049bb133111ebULL + 1;
    z = (z ^ (z >> 31)) * 0xbf58476d1ce4e5b9ULL;
    z ^= z >> 29;
    double u = (double)(z >> 11) * 0x1.0p-53 - 0.5;
    return ldexp(u, (int)(z % 40) - 20);
}

static ot_tensor *filled(ot_backend *be, ot_shape s, ot_dtype dt, int r, int t)
{
    ot_tensor *x = ot_empty(be, s, dt);
    int64_t n = ot_tensor_numel(x);
    for (int64_t i = 0; i < n; i++) {
        if (dt == OT_F32) ((float *)ot_tensor_data(x))[i] = (float)value(r, t, i);
        else ((double *)ot_tensor_data(x))[i] = value(r, t, i);
    }
    return x;
}

/* Element i of tensor t reduced as documented: every rank's value added in
 * rank order (in double), divided by the rank count for a mean, rounded to
 * the dtype once. */
static double expected(int t, int64_t i, ot_dtype dt, ot_reduce_op op)
{
    double s = dt == OT_F32 ? (float)value(0, t, i) : value(0, t, i);
    for (int r = 1; r < ranks; r++) s += dt == OT_F32 ? (float)value(r, t, i) : value(r, t, i);
    if (op == OT_REDUCE_MEAN) s /= ranks;
    return dt == OT_F32 ? (float)s : s;
}

/* x holds expected(t, ., op) bit for bit, and so does every other rank's x. */
static void check_result(ot_tensor *x, int t, ot_reduce_op op)
{
    int64_t n = ot_tensor_numel(x);
    ot_dtype dt = ot_tensor_dtype(x);
    size_t bytes = (size_t)n * ot_dtype_size(dt);
    int bad = 0;
    for (int64_t i = 0; i < n && !bad; i++) {
        double e = expected(t, i, dt, op);
        if (dt == OT_F32) {
            float f = (float)e;
            bad = memcmp(&f, (float *)ot_tensor_data(x) + i, sizeof f) != 0;
        } else {
            bad = memcmp(&e, (double *)ot_tensor_data(x) + i, sizeof e) != 0;
        }
    }
    CHECK(!bad);
    char *all = malloc(bytes * (size_t)ranks + 1);
    CHECK(all != NULL);
    if (!all) return;
    MPI_Allgather(ot_tensor_data(x), (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, world);
    for (int r = 1; r < ranks; r++) CHECK(memcmp(all, all + bytes * (size_t)r, bytes) == 0);
    free(all);
}

/* ---- results ---------------------------------------------------------------- */

static void sum_f32(void)
{
    ot_tensor *x = filled(cpu, OT_SHAPE(33, 7), OT_F32, rank, 0);
    CHECK(ot_allreduce(&world, 1, &x, OT_REDUCE_SUM) == 0);
    check_result(x, 0, OT_REDUCE_SUM);
    ot_tensor_free(x);
}

static void mean_f64(void)
{
    ot_tensor *x = filled(cpu, OT_SHAPE(1000), OT_F64, rank, 0);
    CHECK(ot_allreduce(&world, 1, &x, OT_REDUCE_MEAN) == 0);
    check_result(x, 0, OT_REDUCE_MEAN);
    ot_tensor_free(x);
}

/* f16 and bf16 add as f32 (the widened values, in rank order, rounded to
 * f32) and round once more to their dtype. */
static void sum_half(void)
{
    ot_dtype dts[2] = {OT_F16, OT_BF16};
    for (int k = 0; k < 2; k++) {
        enum { N = 77 };
        float v[N], got[N], want[N];
        ot_tensor *x = ot_empty(cpu, OT_SHAPE(7, 11), dts[k]), *w = ot_empty(cpu, OT_SHAPE(1), dts[k]);
        for (int i = 0; i < N; i++) v[i] = (float)value(rank, k, i);
        CHECK(ot_set(x, v) == 0);
        CHECK(ot_allreduce(&world, 1, &x, OT_REDUCE_SUM) == 0);
        for (int i = 0; i < N; i++) {
            double s = 0;
            for (int r = 0; r < ranks; r++) {   /* rank r's value as its tensor holds it */
                float one = (float)value(r, k, i);
                ot_set(w, &one);
                ot_get(w, &one);
                s += one;
            }
            want[i] = (float)s;
        }
        ot_tensor *wt = ot_empty(cpu, OT_SHAPE(N), dts[k]);
        ot_set(wt, want);
        ot_get(wt, want);
        ot_get(x, got);
        CHECK(memcmp(got, want, sizeof got) == 0);
        ot_tensor_free(x), ot_tensor_free(w), ot_tensor_free(wt);
    }
}

/* Several tensors of both dtypes, a 0-d and an empty one, on either backend. */
static void several_mixed(void)
{
    for (int k = 0; k < 2; k++) {
        ot_backend *be = k ? ref : cpu;
        ot_tensor *t[5] = {
            filled(be, OT_SHAPE(4, 5), OT_F32, rank, 0),
            filled(be, OT_SHAPE(3), OT_F64, rank, 1),
            filled(be, OT_SHAPE(), OT_F32, rank, 2),
            filled(be, OT_SHAPE(0, 3), OT_F64, rank, 3),
            filled(be, OT_SHAPE(2, 3, 4), OT_F32, rank, 4),
        };
        for (int op = 0; op < 2; op++) {
            for (int i = 0; i < 5; i++) {
                ot_tensor_free(t[i]);
                ot_shape s = i == 0 ? OT_SHAPE(4, 5) : i == 1 ? OT_SHAPE(3) : i == 2 ? OT_SHAPE()
                           : i == 3 ? OT_SHAPE(0, 3) : OT_SHAPE(2, 3, 4);
                t[i] = filled(be, s, i % 2 ? OT_F64 : OT_F32, rank, i);
            }
            CHECK(ot_allreduce(&world, 5, t, (ot_reduce_op)op) == 0);
            for (int i = 0; i < 5; i++) check_result(t[i], i, (ot_reduce_op)op);
        }
        for (int i = 0; i < 5; i++) ot_tensor_free(t[i]);
    }
}

/* Two requests in flight at once give what the blocking call gives. */
static void start_wait(void)
{
    ot_tensor *a = filled(cpu, OT_SHAPE(100), OT_F32, rank, 0);
    ot_tensor *b[2] = {filled(cpu, OT_SHAPE(5, 5), OT_F64, rank, 1),
                       filled(cpu, OT_SHAPE(7), OT_F32, rank, 2)};
    ot_allreduce_req *qa = NULL, *qb = NULL;
    CHECK(ot_allreduce_start(&world, 1, &a, OT_REDUCE_MEAN, &qa) == 0);
    CHECK(ot_allreduce_start(&world, 2, b, OT_REDUCE_SUM, &qb) == 0);
    CHECK(qa && qb);
    /* Values are taken at start: writing a now does not change its result. */
    ((float *)ot_tensor_data(a))[0] = 12345;
    CHECK(ot_allreduce_wait(qa) == 0);
    CHECK(ot_allreduce_wait(qb) == 0);
    check_result(a, 0, OT_REDUCE_MEAN);
    check_result(b[0], 1, OT_REDUCE_SUM);
    check_result(b[1], 2, OT_REDUCE_SUM);
    ot_tensor_free(a);
    ot_tensor_free(b[0]);
    ot_tensor_free(b[1]);
}

/* A contiguous view is reduced in place; the rest of its base is not. */
static void contiguous_view(void)
{
    ot_tensor *base = ot_full(cpu, OT_SHAPE(4, 3), OT_F32, rank + 1);
    ot_tensor *rows = ot_slice(base, OT_RANGE(1, 3));
    CHECK(rows && ot_tensor_is_contiguous(rows));
    CHECK(ot_allreduce(&world, 1, &rows, OT_REDUCE_SUM) == 0);
    float h[12];
    ot_get(base, h);
    float sum = (float)(ranks * (ranks + 1) / 2);
    for (int i = 0; i < 12; i++) CHECK(h[i] == (i >= 3 && i < 9 ? sum : (float)(rank + 1)));
    ot_tensor_free(rows);
    ot_tensor_free(base);
}

static void zero_tensors(void)
{
    CHECK(ot_allreduce(&world, 0, NULL, OT_REDUCE_SUM) == 0);
}

/* ---- errors ------------------------------------------------------------------ */

/* x still holds rank's own values for tensor t. */
static void check_untouched(ot_tensor *x, int t)
{
    int64_t n = ot_tensor_numel(x);
    for (int64_t i = 0; i < n; i++)
        CHECK(((float *)ot_tensor_data(x))[i] == (float)value(rank, t, i));
}

/* Each rank's own bad argument, the same on every rank: its own error. */
static void bad_local(void)
{
    ot_tensor *x = filled(cpu, OT_SHAPE(3, 4), OT_F32, rank, 0);
    ot_tensor *xt = ot_transpose(x, NULL);
    ot_tensor *i32 = ot_zeros(cpu, OT_SHAPE(3), OT_I32);
    ot_tensor *onref = filled(ref, OT_SHAPE(2), OT_F32, rank, 1);
    ot_tensor *part = ot_slice(x, OT_RANGE(0, 2));
    ot_tensor *row = ot_slice(x, OT_RANGE(0, 1));
    ot_tensor *bc = ot_broadcast_to(row, OT_SHAPE(1, 4));   /* contiguous, read-only */
    CHECK(xt && i32 && onref && part && bc && ot_tensor_is_contiguous(bc));
    ot_allreduce_req *q = (ot_allreduce_req *)&q;
    ot_tensor_free(ot_reshape(x, OT_SHAPE(5)));   /* an earlier error in the slot */
    CHECK(ot_errcode() != 0 && ot_errcode() != OT_ENULL);
    CHECK_ERR(ot_allreduce(NULL, 1, &x, OT_REDUCE_SUM), OT_ENULL, "comm");
    CHECK_ERR(ot_allreduce(&world, 1, NULL, OT_REDUCE_SUM), OT_ENULL, "tensors");
    CHECK_ERR(ot_allreduce(&world, 2, (ot_tensor *[]){x, NULL}, OT_REDUCE_SUM), OT_ENULL,
              "tensors[1] is NULL");
    CHECK_ERR(ot_allreduce(&world, -1, &x, OT_REDUCE_SUM), OT_EINVAL, "n is -1");
    CHECK_ERR(ot_allreduce(&world, 1, &x, (ot_reduce_op)7), OT_EINVAL, "op 7");
    CHECK_ERR(ot_allreduce(&world, 1, &i32, OT_REDUCE_SUM), OT_EDTYPE, "int32");
    CHECK_ERR(ot_allreduce(&world, 1, &xt, OT_REDUCE_SUM), OT_EINVAL, "not contiguous");
    CHECK_ERR(ot_allreduce(&world, 2, (ot_tensor *[]){x, x}, OT_REDUCE_SUM), OT_EALIAS,
              "tensors[0] and tensors[1] overlap");
    CHECK_ERR(ot_allreduce(&world, 2, (ot_tensor *[]){part, x}, OT_REDUCE_SUM), OT_EALIAS,
              "overlap");
    CHECK_ERR(ot_allreduce(&world, 2, (ot_tensor *[]){x, onref}, OT_REDUCE_SUM), OT_EBACKEND,
              "tensors[1] is on backend ref");
    CHECK_ERR(ot_allreduce(&world, 1, &bc, OT_REDUCE_SUM), OT_EALIAS, "read-only");
    CHECK_ERR(ot_allreduce_start(&world, 1, &x, OT_REDUCE_SUM, NULL), OT_ENULL, "req");
    CHECK_ERR(ot_allreduce_start(&world, 1, &xt, OT_REDUCE_SUM, &q), OT_EINVAL, "contiguous");
    CHECK(q == NULL);
    CHECK_ERR(ot_allreduce_wait(NULL), OT_ENULL, "req");
    check_untouched(x, 0);
    check_untouched(onref, 1);
    ot_tensor_free(bc);
    ot_tensor_free(row);
    ot_tensor_free(part);
    ot_tensor_free(xt);
    ot_tensor_free(x);
    ot_tensor_free(i32);
    ot_tensor_free(onref);
}

/* Ranks that disagree: the same error on every rank, nothing written. */
static void mismatch_across_ranks(void)
{
    ot_tensor *x = filled(cpu, rank ? OT_SHAPE(4, 3) : OT_SHAPE(3, 4), OT_F32, rank, 0);
    CHECK_ERR(ot_allreduce(&world, 1, &x, OT_REDUCE_SUM), OT_ESHAPE,
              "tensors[0] is (3,4) on rank 0, (4,3) on rank 1");
    check_untouched(x, 0);
    ot_tensor_free(x);

    x = filled(cpu, OT_SHAPE(5), rank ? OT_F64 : OT_F32, rank, 0);
    CHECK_ERR(ot_allreduce(&world, 1, &x, OT_REDUCE_SUM), OT_EDTYPE,
              "tensors[0] is float32 on rank 0, float64 on rank 1");
    ot_tensor_free(x);

    ot_tensor *t[2] = {filled(cpu, OT_SHAPE(2), OT_F32, rank, 0),
                       filled(cpu, OT_SHAPE(2), OT_F32, rank, 1)};
    CHECK_ERR(ot_allreduce(&world, rank ? 2 : 1, t, OT_REDUCE_SUM), OT_EINVAL, "passes n = ");
    /* Only rank 1 passes a bad argument: its error, named, everywhere. */
    ot_tensor *bad[2] = {t[0], rank == 1 ? NULL : t[1]};
    int rc = ot_allreduce(&world, 2, bad, OT_REDUCE_SUM);
    if (rank == 1) CHECK_ERR(rc, OT_ENULL, "tensors[1] is NULL");
    else CHECK_ERR(rc, OT_ENULL, "rank 1 failed its own checks");
    check_untouched(t[0], 0);
    /* Agreement again: the communicator is still usable. */
    CHECK(ot_allreduce(&world, 2, t, OT_REDUCE_SUM) == 0);
    check_result(t[0], 0, OT_REDUCE_SUM);
    ot_tensor_free(t[0]);
    ot_tensor_free(t[1]);
}

/* ---- runner ------------------------------------------------------------------ */

typedef struct tcase {
    const char *name;
    void (*fn)(void);
} tcase;

static const tcase CASES[] = {
    {"sum_f32", sum_f32},
    {"mean_f64", mean_f64},
    {"sum_half", sum_half},
    {"several_mixed", several_mixed},
    {"start_wait", start_wait},
    {"contiguous_view", contiguous_view},
    {"zero_tensors", zero_tensors},
    {"bad_local", bad_local},
    {"mismatch_across_ranks", mismatch_across_ranks},
};

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    world = MPI_COMM_WORLD;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &ranks);
    unsetenv("OT_BACKEND");
    cpu = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    ref = ot_backend_new("ref", NULL);
    int passed = 0, failed = 0;
    for (size_t c = 0; c < sizeof CASES / sizeof *CASES; c++) {
        if (ranks < 2 && !strcmp(CASES[c].name, "mismatch_across_ranks")) continue;
        int before = fails, mine, any = 0;
        CASES[c].fn();
        mine = fails > before;
        MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, world);
        if (any) failed++;
        else passed++;
        if (rank == 0) printf("%s %s\n", any ? "[FAIL]" : "[ OK ]", CASES[c].name);
    }
    ot_backend_free(cpu);
    ot_backend_free(ref);
    ot_pool_drain();
    MPI_Finalize();
    /* After MPI_Finalize: an error, not a crash (rank 0 reports it). */
    MPI_Comm gone = MPI_COMM_WORLD;
    int before = fails;
    CHECK_ERR(ot_allreduce(&gone, 0, NULL, OT_REDUCE_SUM), OT_EINVAL, "finalized");
    if (rank == 0) {
        printf("%s after_finalize\n", fails > before ? "[FAIL]" : "[ OK ]");
        passed += fails == before;
        failed += fails != before;
        printf("%d passed, %d failed\n", passed, failed);
    }
    return failed ? 1 : 0;
}

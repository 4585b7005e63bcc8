/*
 * allreduce.c - ot_allreduce and its nonblocking halves: the sum or mean of
 * tensors across the ranks of an MPI communicator, in place, bitwise the same
 * on every rank. Built with mpicc into build/liboptree_mpi.a, only where MPI
 * is installed, so that liboptree itself never depends on libmpi.
 *
 * Why not MPI_Allreduce: its summation order is the implementation's (it
 * may change with the rank count, message size or algorithm chosen), so two
 * runs, or a run and a single process, could differ in ways no one can
 * state. Here every rank gathers every contribution (MPI_Iallgather) and
 * adds them in rank order with the same scalar code, so every rank computes
 * the same bits from the same inputs.
 *
 * Arguments are agreed before any data moves: each rank's own checks give a
 * status, the statuses and counts are gathered, then the dtypes and shapes;
 * every rank sees every description and so reaches the same verdict. A
 * mismatch is an error on every rank rather than an exchange of different
 * sizes, which MPI does not define.
 */
#include "internal.h"

#include <mpi.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* The dtypes that can be reduced, each packed into its own buffer. */
enum { G_F32, G_F64, G_COUNT };

typedef struct group {
    MPI_Request req;
    int64_t count;      /* elements of this dtype over all tensors */
    void *send;         /* this rank's values, packed in tensor order */
    void *recv;         /* every rank's, rank after rank */
} group;

struct ot_allreduce_req {
    MPI_Comm comm;
    int ranks, n;
    ot_reduce_op op;
    ot_tensor **t;
    group g[G_COUNT];
};

/* A tensor's description as exchanged: dtype, ndim, dims. */
enum { DESC = 2 + OT_MAX_DIMS };

static const char *const FN = "allreduce";

static int mpi_fail(int rc, const char *call)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(rc, msg, &len) != MPI_SUCCESS) len = 0;
    msg[len] = '\0';
    return ot__err_set(OT_EIO, NULL, 0, FN, "%s failed: %s", call, msg);
}

/* f16 and bf16 travel and add as f32 (widened when packed, rounded once
 * when the sums come back). */
static int group_of(ot_dtype dt) { return dt == OT_F64 ? G_F64 : G_F32; }

/* This rank's own checks, made before anything is exchanged. */
static int check_local(int n, ot_tensor *const t[], ot_reduce_op op)
{
    if (n < 0) return ot__err_set(OT_EINVAL, NULL, 0, FN, "n is %d, not >= 0", n);
    if (n > INT_MAX / DESC)
        return ot__err_set(OT_EOVERFLOW, NULL, 0, FN, "n is %d, more than %d", n, INT_MAX / DESC);
    if (op != OT_REDUCE_SUM && op != OT_REDUCE_MEAN)
        return ot__err_set(OT_EINVAL, NULL, 0, FN, "op %d is neither OT_REDUCE_SUM nor "
                           "OT_REDUCE_MEAN", (int)op);
    if (n > 0 && !t) return ot__err_null(FN, "tensors");
    for (int i = 0; i < n; i++) {
        if (!t[i]) return ot__err_set(OT_ENULL, NULL, 0, FN, "tensors[%d] is NULL", i);
        ot_dtype dt = ot_tensor_dtype(t[i]);
        if (dt != OT_F32 && dt != OT_F64 && !ot__is_half(dt))
            return ot__err_set(OT_EDTYPE, NULL, 0, FN, "tensors[%d] is %s, not f32, f64, f16 or bf16",
                               i, ot_dtype_name(dt));
        if (t[i]->readonly)
            return ot__err_set(OT_EALIAS, NULL, 0, FN, "tensors[%d] is a read-only broadcast "
                               "view", i);
        if (!ot_tensor_is_contiguous(t[i]))
            return ot__err_set(OT_EINVAL, NULL, 0, FN, "tensors[%d] is not contiguous "
                               "(ot_copy it, reduce the copy, assign it back)", i);
        if (ot_tensor_backend(t[i]) != ot_tensor_backend(t[0]))
            return ot__err_set(OT_EBACKEND, NULL, 0, FN, "tensors[%d] is on backend %s, "
                               "tensors[0] on another", i,
                               ot_backend_name(ot_tensor_backend(t[i])));
    }
    for (int i = 0; i < n; i++) {
        const char *a = ot_tensor_data(t[i]);
        size_t an = (size_t)ot_tensor_numel(t[i]) * ot_dtype_size(ot_tensor_dtype(t[i]));
        for (int j = 0; j < i && an; j++) {
            const char *b = ot_tensor_data(t[j]);
            size_t bn = (size_t)ot_tensor_numel(t[j]) * ot_dtype_size(ot_tensor_dtype(t[j]));
            if (bn && a < b + bn && b < a + an)
                return ot__err_set(OT_EALIAS, NULL, 0, FN, "tensors[%d] and tensors[%d] "
                                   "overlap", j, i);
        }
    }
    int64_t count[G_COUNT] = {0};
    for (int i = 0; i < n; i++) count[group_of(ot_tensor_dtype(t[i]))] += ot_tensor_numel(t[i]);
    for (int k = 0; k < G_COUNT; k++)
        if (count[k] > INT_MAX)
            return ot__err_set(OT_EOVERFLOW, NULL, 0, FN, "%lld elements of one dtype; MPI "
                               "counts stop at %d", (long long)count[k], INT_MAX);
    return 0;
}

/* Every rank's status and n; the same verdict on every rank. */
static int agree_status(MPI_Comm comm, int ranks, int status, int n)
{
    int64_t mine[2] = {status, n};
    int64_t *all = malloc(sizeof *all * 2 * (size_t)ranks);
    if (!all) return ot__err_set(OT_ENOMEM, NULL, 0, FN, "out of memory");
    int rc = MPI_Allgather(mine, 2, MPI_INT64_T, all, 2, MPI_INT64_T, comm);
    if (rc != MPI_SUCCESS) {
        free(all);
        return mpi_fail(rc, "MPI_Allgather");
    }
    int out = status;
    for (int r = 0; r < ranks && !out; r++) {
        if (all[2 * r] != 0)
            out = ot__err_set((int)all[2 * r], NULL, 0, FN, "rank %d failed its own checks "
                              "(%s)", r, ot_strerror((int)all[2 * r]));
        else if (all[2 * r + 1] != n)
            out = ot__err_set(OT_EINVAL, NULL, 0, FN, "rank %d passes n = %lld, this rank %d",
                              r, (long long)all[2 * r + 1], n);
    }
    free(all);
    return out;
}

/* The first difference between rank 0's description of tensor i and rank r's. */
static int desc_mismatch(const int64_t *d0, const int64_t *dr, int r, int i)
{
    char a[OT__SHAPE_STRLEN], b[OT__SHAPE_STRLEN];
    if (d0[0] != dr[0])
        return ot__err_set(OT_EDTYPE, NULL, 0, FN, "tensors[%d] is %s on rank 0, %s on "
                           "rank %d", i, ot_dtype_name((ot_dtype)d0[0]),
                           ot_dtype_name((ot_dtype)dr[0]), r);
    ot_shape s0 = ot_shape_make((int)d0[1], d0 + 2), sr = ot_shape_make((int)dr[1], dr + 2);
    return ot__err_set(OT_ESHAPE, NULL, 0, FN, "tensors[%d] is %s on rank 0, %s on rank %d",
                       i, ot__shape_str(&s0, a), ot__shape_str(&sr, b), r);
}

/* Every rank's dtypes and shapes, compared with rank 0's. */
static int agree_shapes(MPI_Comm comm, int ranks, int n, ot_tensor *const t[])
{
    size_t per = (size_t)n * DESC;
    int64_t *all = calloc(per * (size_t)ranks + per, sizeof *all);
    if (!all) return ot__err_set(OT_ENOMEM, NULL, 0, FN, "out of memory");
    int64_t *mine = all + per * (size_t)ranks;
    for (int i = 0; i < n; i++) {
        ot_shape s = ot_tensor_shape(t[i]);
        mine[i * DESC] = ot_tensor_dtype(t[i]);
        mine[i * DESC + 1] = s.ndim;
        memcpy(mine + i * DESC + 2, s.dims, sizeof *s.dims * (size_t)s.ndim);
    }
    int rc = MPI_Allgather(mine, (int)per, MPI_INT64_T, all, (int)per, MPI_INT64_T, comm);
    int out = rc == MPI_SUCCESS ? 0 : mpi_fail(rc, "MPI_Allgather");
    for (int r = 1; r < ranks && !out; r++)
        for (int i = 0; i < n && !out; i++)
            if (memcmp(all + i * DESC, all + per * (size_t)r + i * DESC, sizeof *all * DESC))
                out = desc_mismatch(all + i * DESC, all + per * (size_t)r + i * DESC, r, i);
    free(all);
    return out;
}

static void req_free(ot_allreduce_req *q)
{
    if (!q) return;
    for (int k = 0; k < G_COUNT; k++) {
        free(q->g[k].send);
        free(q->g[k].recv);
    }
    free(q->t);
    free(q);
}

/* Copies each tensor's values into its dtype's send buffer (way 0) or the
 * group's results back into the tensors (way 1), in tensor order. */
static void pack(ot_allreduce_req *q, int way)
{
    size_t off[G_COUNT] = {0};
    for (int i = 0; i < q->n; i++) {
        ot_dtype dt = ot_tensor_dtype(q->t[i]);
        group *g = &q->g[group_of(dt)];
        size_t es = dt == OT_F64 ? 8 : 4, bytes = (size_t)ot_tensor_numel(q->t[i]) * es;
        char *buf = (char *)(way ? g->recv : g->send) + off[group_of(dt)];
        if (bytes && ot__is_half(dt)) {   /* contiguous, checked: cannot fail */
            if (way) (ot_set)(q->t[i], buf);
            else (ot_get)(q->t[i], buf);
        } else if (bytes) {
            if (way) memcpy(ot_tensor_data(q->t[i]), buf, bytes);
            else memcpy(buf, ot_tensor_data(q->t[i]), bytes);
        }
        off[group_of(dt)] += bytes;
    }
}

/* The request, its buffers filled; NULL with OT_ENOMEM. */
static ot_allreduce_req *req_new(MPI_Comm comm, int ranks, int n, ot_tensor *const t[],
                                 ot_reduce_op op)
{
    ot_allreduce_req *q = calloc(1, sizeof *q);
    if (q) q->t = malloc(sizeof *q->t * (size_t)(n ? n : 1));
    if (!q || !q->t) {
        req_free(q);
        ot__err_set(OT_ENOMEM, NULL, 0, FN, "out of memory");
        return NULL;
    }
    *q = (ot_allreduce_req){.comm = comm, .ranks = ranks, .n = n, .op = op, .t = q->t};
    memcpy(q->t, t, sizeof *t * (size_t)n);
    for (int i = 0; i < n; i++) q->g[group_of(ot_tensor_dtype(t[i]))].count += ot_tensor_numel(t[i]);
    for (int k = 0; k < G_COUNT; k++) {
        group *g = &q->g[k];
        g->req = MPI_REQUEST_NULL;
        if (!g->count) continue;
        size_t es = ot_dtype_size(k == G_F32 ? OT_F32 : OT_F64);
        g->send = malloc((size_t)g->count * es);
        g->recv = malloc((size_t)g->count * es * (size_t)ranks);
        if (!g->send || !g->recv) {
            req_free(q);
            ot__err_set(OT_ENOMEM, NULL, 0, FN, "out of memory");
            return NULL;
        }
    }
    pack(q, 0);
    return q;
}

int ot_allreduce_start(const void *comm, int n, ot_tensor *const tensors[], ot_reduce_op op,
                       ot_allreduce_req **req)
{
    if (req) *req = NULL;
    ot_clear_error();
    if (!comm) return ot__err_null(FN, "comm");
    int inited = 0, done = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&done);
    if (!inited || done)
        return ot__err_set(OT_EINVAL, NULL, 0, FN, "MPI is %s", done ? "finalized"
                           : "not initialised (call MPI_Init first)");
    MPI_Comm c = *(const MPI_Comm *)comm;
    int ranks = 0, rc = MPI_Comm_size(c, &ranks);
    if (rc != MPI_SUCCESS) return mpi_fail(rc, "MPI_Comm_size");
    int status = req ? check_local(n, tensors, op) : ot__err_null(FN, "req");
    int out = agree_status(c, ranks, status, n);
    if (!out && n > 0) out = agree_shapes(c, ranks, n, tensors);
    if (out) return out;
    ot_allreduce_req *q = req_new(c, ranks, n, tensors, op);
    if (!q) return OT_ENOMEM;
    for (int k = 0; k < G_COUNT && !out; k++) {
        group *g = &q->g[k];
        MPI_Datatype ty = k == G_F32 ? MPI_FLOAT : MPI_DOUBLE;
        if (!g->count) continue;
        rc = MPI_Iallgather(g->send, (int)g->count, ty, g->recv, (int)g->count, ty, c, &g->req);
        if (rc != MPI_SUCCESS) out = mpi_fail(rc, "MPI_Iallgather");
    }
    if (out) {
        for (int k = 0; k < G_COUNT; k++)
            if (q->g[k].req != MPI_REQUEST_NULL) MPI_Wait(&q->g[k].req, MPI_STATUS_IGNORE);
        req_free(q);
        return out;
    }
    *req = q;
    return 0;
}

/* recv[i] = the rank-ordered sum (or mean) of recv[r * count + i]: f32 is
 * added in double and rounded once, so the result is as exact as one
 * rounding allows for a few ranks and the same wherever it is computed. */
static void reduce_f32(float *x, int64_t count, int ranks, ot_reduce_op op)
{
    for (int64_t i = 0; i < count; i++) {
        double s = x[i];
        for (int r = 1; r < ranks; r++) s += x[r * count + i];
        x[i] = (float)(op == OT_REDUCE_MEAN ? s / ranks : s);
    }
}

static void reduce_f64(double *x, int64_t count, int ranks, ot_reduce_op op)
{
    for (int64_t i = 0; i < count; i++) {
        double s = x[i];
        for (int r = 1; r < ranks; r++) s += x[r * count + i];
        x[i] = op == OT_REDUCE_MEAN ? s / ranks : s;
    }
}

int ot_allreduce_wait(ot_allreduce_req *req)
{
    if (!req) return ot__err_set(OT_ENULL, NULL, 0, FN, "req is NULL");
    int out = 0;
    for (int k = 0; k < G_COUNT; k++) {
        if (req->g[k].req == MPI_REQUEST_NULL) continue;
        int rc = MPI_Wait(&req->g[k].req, MPI_STATUS_IGNORE);
        if (rc != MPI_SUCCESS && !out) out = mpi_fail(rc, "MPI_Wait");
    }
    if (!out) {
        reduce_f32(req->g[G_F32].recv, req->g[G_F32].count, req->ranks, req->op);
        reduce_f64(req->g[G_F64].recv, req->g[G_F64].count, req->ranks, req->op);
        pack(req, 1);
    }
    req_free(req);
    return out;
}

int ot_allreduce(const void *comm, int n, ot_tensor *const tensors[], ot_reduce_op op)
{
    ot_allreduce_req *q = NULL;
    int rc = ot_allreduce_start(comm, n, tensors, op, &q);
    return rc ? rc : ot_allreduce_wait(q);
}

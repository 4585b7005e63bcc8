/*
 * mlp_mpi.c - data-parallel training over MPI: examples/mlp.c's spirals MLP
 * (2 -> 128 -> 128 -> 10, ReLU, softmax cross-entropy, Adam with a cosine-
 * decayed step size, global batches of 128 rows), each rank computing the
 * gradient of its own shard of every global batch, the gradients averaged
 * across ranks with ot_allreduce, every rank then taking the same Adam step.
 *
 * Run it with mpirun (make demo-mpi: mpirun -np 2 --oversubscribe). Every
 * rank makes the same data set and the same initial weights from fixed
 * seeds, and the same shuffle each epoch; rank r of P takes rows
 * [r*128/P, (r+1)*128/P) of each global batch (P must divide 128; the last,
 * partial batch of an epoch is dropped). Afterwards each rank trains again
 * alone on the whole global batches (a single process's run) and compares:
 * the weights of all ranks must be bitwise identical (gathered and
 * compared), and the difference from the single process is printed after
 * one step and at the end. It cannot be zero: a shard's mean gradient
 * (OpenBLAS summing 64 rows), averaged over 2 ranks, rounds differently
 * from one mean over 128 rows. Both runs must reach the accuracy mlp.c
 * does (above 95% held out) and agree within a point.
 *
 * --mode chooses how a step's gradients meet the allreduce:
 *   fused    one ot_autodiff over the whole loss, every gradient in one
 *            evaluation, one blocking ot_allreduce of all six (default)
 *   staged   backprop layer by layer, last layer first (an ot_autodiff per
 *            layer, the next layer's error passed as next_error), a
 *            blocking ot_allreduce after each layer
 *   overlap  the same, but each layer's allreduce is started
 *            (ot_allreduce_start) and only waited for after the first
 *            layer's backprop, so the exchange of layer 3's gradients
 *            overlaps the backprop of layers 2 and 1
 * and the step time (ms, mean over the run after the first step) is
 * printed. --epochs N (default 20; the accuracy is required of 20 epochs
 * only), --no-check (skip the single-process run). OT_EXAMPLE_SMALL=1
 * trains on 2,000 points for 2 epochs without the accuracy requirement
 * (make test runs it so on 2 ranks). Frees everything.
 */
#include "optree.h"

#include <mpi.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CLASSES = 10, BATCH = 128, HIDDEN = 128, LAYERS = 3, NP = 2 * LAYERS };
enum { FUSED, STAGED, OVERLAP };
static const int WIDTH[LAYERS + 1] = {2, HIDDEN, HIDDEN, CLASSES};

/* ---------------------------------------------------------------- data */

/* splitmix64, as in mlp.c: the same data on every rank and every run. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
static double rng_uniform(uint64_t *s) { return (double)(rng_next(s) >> 11) * 0x1.0p-53; }

/* mlp.c's 10-arm noisy spirals. */
static void make_spirals(int n, float *xy, float *onehot)
{
    uint64_t s = 0x5eed0f0eU;
    memset(onehot, 0, sizeof *onehot * (size_t)n * CLASSES);
    for (int i = 0; i < n; i++) {
        int k = (int)(rng_next(&s) % CLASSES);
        double t = rng_uniform(&s), r = 0.1 + 0.9 * t;
        double a = 6.283185307179586 * k / CLASSES + 6.283185307179586 * t;
        double u = 1.0 - rng_uniform(&s), v = rng_uniform(&s);
        double u2 = 1.0 - rng_uniform(&s), v2 = rng_uniform(&s);
        xy[2 * i] = (float)(r * cos(a) + 0.015 * sqrt(-2 * log(u)) * cos(6.283185307179586 * v));
        xy[2 * i + 1] =
            (float)(r * sin(a) + 0.015 * sqrt(-2 * log(u2)) * cos(6.283185307179586 * v2));
        onehot[i * CLASSES + k] = 1;
    }
}

/* ---------------------------------------------------------------- model */

static double now_ms(void) { return MPI_Wtime() * 1e3; }
/* Time spent in ot_allreduce, _start and _wait since the first step. */
static double comm_ms;

typedef struct net {
    ot_tensor *p[NP], *g[NP], *m[NP], *v[NP];  /* W1 b1 W2 b2 W3 b3 */
    ot_tensor *h[LAYERS], *dh[LAYERS];         /* staged: activations, errors */
} net;

static void net_free(net *nt)
{
    for (int i = 0; i < NP; i++) {
        ot_tensor_free(nt->p[i]);
        ot_tensor_free(nt->g[i]);
        ot_tensor_free(nt->m[i]);
        ot_tensor_free(nt->v[i]);
    }
    for (int l = 0; l < LAYERS; l++) {
        ot_tensor_free(nt->h[l]);
        ot_tensor_free(nt->dh[l]);
    }
}

/* He-uniform weights and zero biases from a fixed seed (the same on every
 * rank); rows is the shard's batch. Returns 0 or the error code. */
static int net_init(net *nt, ot_backend *be, int rows)
{
    uint64_t s = 42;
    memset(nt, 0, sizeof *nt);
    for (int l = 0; l < LAYERS; l++) {
        int fi = WIDTH[l], fo = WIDTH[l + 1];
        float *w = malloc(sizeof *w * (size_t)fi * fo);
        if (!w) return OT_ENOMEM;
        for (int i = 0; i < fi * fo; i++)
            w[i] = (float)((2 * rng_uniform(&s) - 1) * sqrt(6.0 / fi));
        nt->p[2 * l] = ot_array(be, OT_SHAPE(fi, fo), OT_F32, w);
        nt->p[2 * l + 1] = ot_zeros(be, OT_SHAPE(fo), OT_F32);
        free(w);
        nt->h[l] = ot_empty(be, OT_SHAPE(rows, fo), OT_F32);
        nt->dh[l] = ot_empty(be, OT_SHAPE(rows, fo), OT_F32);
    }
    for (int i = 0; i < NP; i++) {
        if (!nt->p[i]) return ot_errcode();
        nt->g[i] = ot_zeros_like(nt->p[i]);
        nt->m[i] = ot_zeros_like(nt->p[i]);
        nt->v[i] = ot_zeros_like(nt->p[i]);
        if (!nt->g[i] || !nt->m[i] || !nt->v[i]) return ot_errcode();
    }
    for (int l = 0; l < LAYERS; l++)
        if (!nt->h[l] || !nt->dh[l]) return ot_errcode();
    return 0;
}

/* Layer l's output as a tree of its input: dot(in, W) + b, ReLU but last. */
static ot_node *layer(const net *nt, int l, ot_node *in)
{
    ot_node *z = ot_add(ot_dot(in, nt->p[2 * l]), nt->p[2 * l + 1]);
    return l + 1 < LAYERS ? ot_relu(z) : z;
}

static ot_node *loss_of(ot_node *logits, ot_tensor *y)
{
    return ot_mean(ot_cross_entropy(ot_softmax(logits, .axis = 1), y, .axis = 1));
}

/* The gradients of every parameter in one evaluation, then one allreduce. */
static int grads_fused(net *nt, ot_tensor *x, ot_tensor *y, const void *comm)
{
    ot_node *out = ot_tensor_node(x);
    for (int l = 0; l < LAYERS; l++) out = layer(nt, l, out);
    ot_autodiff *ad = ot_autodiff_new(loss_of(out, y), NULL);
    int rc = ad ? ot_autodiff_backprop(ad, NP, nt->p, nt->g) : ot_errcode();
    ot_autodiff_free(ad);
    double t = now_ms();
    if (!rc && comm) rc = ot_allreduce(comm, NP, nt->g, OT_REDUCE_MEAN);
    comm_ms += now_ms() - t;
    return rc;
}

/* Layer by layer, last first: layer l's gradients (and the error of its
 * input) from the error of its output; each layer's pair is reduced as
 * soon as it exists, blocking (staged) or started and waited for at the
 * end (overlap). */
static int grads_staged(net *nt, ot_tensor *x, ot_tensor *y, const void *comm, bool overlap)
{
    int rc = 0;
    for (int l = 0; l < LAYERS - 1 && !rc; l++)
        rc = ot_assign(nt->h[l], layer(nt, l, ot_tensor_node(l ? nt->h[l - 1] : x)));
    ot_allreduce_req *req[LAYERS] = {0};
    for (int l = LAYERS - 1; l >= 0 && !rc; l--) {
        ot_tensor *in = l ? nt->h[l - 1] : x;
        ot_node *out = layer(nt, l, ot_tensor_node(in));
        ot_autodiff *ad = l == LAYERS - 1 ? ot_autodiff_new(loss_of(out, y), NULL)
                                          : ot_autodiff_new(out, ot_tensor_node(nt->dh[l]));
        ot_tensor *wrt[3] = {nt->p[2 * l], nt->p[2 * l + 1], in};
        ot_tensor *into[3] = {nt->g[2 * l], nt->g[2 * l + 1], l ? nt->dh[l - 1] : NULL};
        rc = ad ? ot_autodiff_backprop(ad, l ? 3 : 2, wrt, into) : ot_errcode();
        ot_autodiff_free(ad);
        if (rc || !comm) continue;
        double t = now_ms();
        if (overlap) rc = ot_allreduce_start(comm, 2, nt->g + 2 * l, OT_REDUCE_MEAN, &req[l]);
        else rc = ot_allreduce(comm, 2, nt->g + 2 * l, OT_REDUCE_MEAN);
        comm_ms += now_ms() - t;
    }
    double t = now_ms();
    for (int l = LAYERS - 1; l >= 0; l--) {   /* in the order they started */
        int w = req[l] ? ot_allreduce_wait(req[l]) : 0;
        if (!rc) rc = w;
    }
    comm_ms += now_ms() - t;
    return rc;
}

/* One step on rows [r0, r0 + rows) of this epoch's shuffled data. */
static int step(net *nt, ot_tensor *xe, ot_tensor *ye, int64_t r0, int rows, int mode,
                const void *comm, const ot_adam *adam)
{
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_slice(xe, OT_RANGE(r0, r0 + rows));
    ot_tensor *y = ot_slice(ye, OT_RANGE(r0, r0 + rows));
    int rc = x && y ? 0 : ot_errcode();
    if (!rc) rc = mode == FUSED ? grads_fused(nt, x, y, comm)
                                : grads_staged(nt, x, y, comm, mode == OVERLAP);
    ot_node *g[NP];
    for (int i = 0; i < NP; i++) g[i] = ot_tensor_node(nt->g[i]);
    if (!rc) rc = ot_adam_step(adam, NP, nt->p, g, nt->m, nt->v);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_tensor_free(y);
    return rc;
}

/* ---------------------------------------------------------------- training */

typedef struct run {
    int mode, epochs, ntrain, rank, ranks;
    const void *comm;       /* NULL: one process on whole batches */
    const float *xy, *onehot;
    int64_t steps;          /* taken */
    double step_ms;         /* mean over the steps after the first */
    double comm_ms;         /* of which in ot_allreduce*, per step */
    float *after_one;       /* the parameters after one step (host, packed) */
    float *after_epoch;     /* and after the first epoch */
} run;

static int64_t param_count(void)
{
    int64_t n = 0;
    for (int l = 0; l < LAYERS; l++) n += (int64_t)WIDTH[l] * WIDTH[l + 1] + WIDTH[l + 1];
    return n;
}

/* Every parameter, row-major, one after another, into host. */
static int params_get(const net *nt, float *host)
{
    for (int i = 0; i < NP; i++) {
        int rc = ot_get(nt->p[i], host);
        if (rc) return rc;
        host += ot_tensor_numel(nt->p[i]);
    }
    return 0;
}

/* This epoch's order of the training rows (the same on every rank), the
 * data gathered in it into xe and ye. */
static int shuffle(const run *r, int epoch, int *perm, float *xb, float *yb, ot_tensor *xe,
                   ot_tensor *ye)
{
    uint64_t s = 1000 + (uint64_t)epoch;
    for (int i = 0; i < r->ntrain; i++) perm[i] = i;
    for (int i = r->ntrain - 1; i > 0; i--) {
        int j = (int)(rng_next(&s) % (uint64_t)(i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (int i = 0; i < r->ntrain; i++) {
        memcpy(xb + 2 * i, r->xy + 2 * perm[i], sizeof *xb * 2);
        memcpy(yb + CLASSES * i, r->onehot + CLASSES * perm[i], sizeof *yb * CLASSES);
    }
    int rc = ot_set(xe, xb);
    return rc ? rc : ot_set(ye, yb);
}

/* Trains nt from its initial weights; one shard of every batch per rank. */
static int train(run *r, ot_backend *be, net *nt)
{
    int rows = BATCH / r->ranks, per_epoch = r->ntrain / BATCH;
    int64_t total = (int64_t)per_epoch * r->epochs;
    int *perm = malloc(sizeof *perm * (size_t)r->ntrain);
    float *xb = malloc(sizeof *xb * 2 * (size_t)r->ntrain);
    float *yb = malloc(sizeof *yb * CLASSES * (size_t)r->ntrain);
    ot_tensor *xe = ot_empty(be, OT_SHAPE(r->ntrain, 2), OT_F32);
    ot_tensor *ye = ot_empty(be, OT_SHAPE(r->ntrain, CLASSES), OT_F32);
    r->after_one = malloc(sizeof *r->after_one * (size_t)param_count());
    r->after_epoch = malloc(sizeof *r->after_epoch * (size_t)param_count());
    int rc = perm && xb && yb && r->after_one && r->after_epoch ? 0 : OT_ENOMEM;
    if (!rc && (!xe || !ye)) rc = ot_errcode();
    if (!rc) rc = net_init(nt, be, rows);
    double t0 = 0;
    for (int e = 0; e < r->epochs && !rc; e++) {
        rc = shuffle(r, e, perm, xb, yb, xe, ye);
        for (int s = 0; s < per_epoch && !rc; s++, r->steps++) {
            ot_adam a = ot_adam_default(0.01 * 0.5 * (1 + cos(3.141592653589793 * r->steps / total)));
            a.t = r->steps + 1;
            rc = step(nt, xe, ye, (int64_t)s * BATCH + (int64_t)r->rank * rows, rows, r->mode,
                      r->comm, &a);
            if (!rc && r->steps == 0) {
                rc = params_get(nt, r->after_one);
                t0 = now_ms();
                comm_ms = 0;
            }
        }
        if (!rc && e == 0) rc = params_get(nt, r->after_epoch);
    }
    if (r->steps > 1) {
        r->step_ms = (now_ms() - t0) / (double)(r->steps - 1);
        r->comm_ms = comm_ms / (double)(r->steps - 1);
    }
    ot_tensor_free(xe);
    ot_tensor_free(ye);
    free(perm);
    free(xb);
    free(yb);
    return rc;
}

/* The held-out accuracy: argmax of the logits against the labels. */
static double accuracy(net *nt, ot_backend *be, const float *xy, const float *onehot, int n)
{
    ot_pool *pool = ot_pool_push();
    ot_tensor *x = ot_array(be, OT_SHAPE(n, 2), OT_F32, xy);
    ot_tensor *y = ot_array(be, OT_SHAPE(n, CLASSES), OT_F32, onehot);
    ot_tensor *hit = ot_empty(be, OT_SHAPE(), OT_F32);
    ot_node *out = ot_tensor_node(x);
    for (int l = 0; l < LAYERS; l++) out = layer(nt, l, out);
    ot_node *eq = ot_eq(ot_argmax(out, .axis = 1), ot_argmax(y, .axis = 1));
    float h = -1;
    if (hit && ot_assign(hit, ot_mean(ot_cast(eq, .dtype = OT_F32))) == 0) ot_get(hit, &h);
    ot_pool_pop(pool);
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(hit);
    return h;
}

static double max_diff(const float *a, const float *b, int64_t n)
{
    double m = 0;
    for (int64_t i = 0; i < n; i++) m = fmax(m, fabs((double)a[i] - b[i]));
    return m;
}

/* Whether every rank's parameters are bitwise rank 0's (every rank learns). */
static int same_on_all_ranks(const float *mine, int64_t n, int ranks, MPI_Comm comm)
{
    float *all = malloc(sizeof *all * (size_t)n * (size_t)ranks);
    if (!all) return -1;
    MPI_Allgather(mine, (int)n, MPI_FLOAT, all, (int)n, MPI_FLOAT, comm);
    int same = 1;
    for (int r = 1; r < ranks; r++)
        same &= memcmp(all, all + (size_t)r * (size_t)n, sizeof *all * (size_t)n) == 0;
    free(all);
    return same;
}

/* ---------------------------------------------------------------- main */

typedef struct opts {
    int mode, epochs, check, small, full;
} opts;

static int parse(int argc, char **argv, opts *o)
{
    const char *small_env = getenv("OT_EXAMPLE_SMALL");
    o->small = small_env && small_env[0] && strcmp(small_env, "0") != 0;
    o->mode = FUSED;
    o->epochs = o->small ? 2 : 20;
    o->check = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-check")) o->check = 0;
        else if (!strcmp(argv[i], "--epochs") && i + 1 < argc) o->epochs = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--mode") && i + 1 < argc) {
            const char *m = argv[++i];
            o->mode = !strcmp(m, "fused") ? FUSED : !strcmp(m, "staged") ? STAGED
                      : !strcmp(m, "overlap") ? OVERLAP : -1;
            if (o->mode < 0) return -1;
        } else return -1;
    }
    o->full = !o->small && o->epochs == 20;
    return o->epochs > 0 ? 0 : -1;
}

static const char *const MODE_NAME[] = {"fused", "staged", "overlap"};

/* The MPI run and, unless --no-check, the single-process one beside it;
 * returns 0 when every check holds. */
static int demo(const opts *o, int rank, int ranks, MPI_Comm world, ot_backend *be,
                const float *xy, const float *onehot, int n)
{
    int ntrain = n - n / 5;
    int64_t np = param_count();
    run mr = {.mode = o->mode, .epochs = o->epochs, .ntrain = ntrain, .rank = rank,
              .ranks = ranks, .comm = &world, .xy = xy, .onehot = onehot};
    run sr = mr;
    sr.comm = NULL;
    sr.rank = 0;
    sr.ranks = 1;
    net mn = {0}, sn = {0};
    float *mw = malloc(sizeof *mw * (size_t)np), *sw = malloc(sizeof *sw * (size_t)np);
    int rc = mw && sw ? train(&mr, be, &mn) : OT_ENOMEM;
    if (!rc) rc = params_get(&mn, mw);
    double macc = rc ? -1 : accuracy(&mn, be, xy + 2 * ntrain, onehot + CLASSES * ntrain, n / 5);
    int same = rc ? 0 : same_on_all_ranks(mw, np, ranks, world);
    if (rank == 0 && !rc)
        printf("mlp_mpi: %d rank%s, mode %s: %lld steps of %d rows per rank; step time %.3f ms "
               "(%.3f in ot_allreduce*); held-out accuracy %.2f%%; weights %s on every rank\n",
               ranks, ranks > 1 ? "s" : "", MODE_NAME[o->mode], (long long)mr.steps,
               BATCH / ranks, mr.step_ms, mr.comm_ms, 100 * macc,
               same == 1 ? "bitwise identical" : "DIFFERENT");
    /* The accuracy is required of the full run only (no --epochs, not
     * small): shorter runs are for timing. */
    int ok = !rc && same == 1 && (!o->full || macc > 0.95);
    if (o->check && !rc) {
        rc = train(&sr, be, &sn);
        if (!rc) rc = params_get(&sn, sw);
        double sacc = rc ? -1 : accuracy(&sn, be, xy + 2 * ntrain, onehot + CLASSES * ntrain, n / 5);
        double d1 = max_diff(mr.after_one, sr.after_one, np);
        double de = max_diff(mr.after_epoch, sr.after_epoch, np), dn = max_diff(mw, sw, np);
        if (rank == 0 && !rc)
            printf("single process, same global batches: held-out accuracy %.2f%%, step time "
                   "%.3f ms; max |w_mpi - w_single| %.3g after 1 step, %.3g after 1 epoch, "
                   "%.3g after %lld steps\n", 100 * sacc, sr.step_ms, d1, de, dn,
                   (long long)sr.steps);
        /* One step moves each weight by about lr = 0.01 (Adam); a different
         * rounding of the gradient changes that by far less than 1e-4. */
        ok = ok && !rc && d1 < 1e-4 && (!o->full || (sacc > 0.95 && fabs(macc - sacc) < 0.01));
        net_free(&sn);
        free(sr.after_one);
        free(sr.after_epoch);
    }
    net_free(&mn);
    free(mr.after_one);
    free(mr.after_epoch);
    free(mw);
    free(sw);
    if (rc && rank == 0) fprintf(stderr, "mlp_mpi: %s\n", ot_errmsg());
    return ok ? 0 : 1;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank = 0, ranks = 1;
    MPI_Comm world = MPI_COMM_WORLD;
    MPI_Comm_rank(world, &rank);
    MPI_Comm_size(world, &ranks);
    opts o;
    if (parse(argc, argv, &o) != 0 || BATCH % ranks != 0) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np P mlp_mpi [--mode fused|staged|overlap] "
                            "[--epochs N] [--no-check] (P divides %d)\n", BATCH);
        MPI_Finalize();
        return 2;
    }
    int n = o.small ? 2000 : 30000;
    /* One optree thread per rank: the ranks are the parallelism. */
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    float *xy = malloc(sizeof *xy * 2 * (size_t)n);
    float *onehot = malloc(sizeof *onehot * CLASSES * (size_t)n);
    int bad = !be || !xy || !onehot;
    if (!bad) {
        make_spirals(n, xy, onehot);
        if (rank == 0)
            printf("mlp_mpi: %d training and %d held-out points; global batch %d over %d "
                   "rank%s\n", n - n / 5, n / 5, BATCH, ranks, ranks > 1 ? "s" : "");
        bad = demo(&o, rank, ranks, world, be, xy, onehot, n);
    }
    ot_backend_free(be);
    ot_pool_drain();
    free(xy);
    free(onehot);
    int any = 0;
    MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, world);
    if (rank == 0 && any) printf("mlp_mpi: FAILED\n");
    MPI_Finalize();
    return any ? 1 : 0;
}

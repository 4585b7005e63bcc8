/*
 * threads.c - the cpu backend's thread pool: a fixed set of workers that
 * take chunks of one run from a shared counter. Which thread runs a chunk
 * varies; what a chunk computes does not, so results never depend on the
 * number of threads (exec.c cuts the work by the plan alone).
 *
 * A run wakes only the workers its work pays for (one per PER_THREAD of
 * work, fewer than its chunks), each through its own semaphore, so that a
 * run of two chunks does not wake fifteen threads to find nothing left.
 * The counter the threads take chunks from, the count of workers still
 * busy, and each worker's semaphore sit on cache lines of their own: the
 * fields every chunk reads (fn, ctx, nchunks) are never on a line another
 * thread writes during the run.
 */
#include "cpu.h"
#include "threads.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdalign.h>
#include <unistd.h>

/* Work (elements times their cost in adds, exec.c's kernel_work) below
 * which a run stays on the calling thread, and the work each thread woken
 * must have at least. Handing a run to sleeping workers and back cost 7-100
 * us on the 2-vCPU build machine (README, "Thread scaling"), and 2^20 adds'
 * worth of work takes 50-100 us on one core there: below that, sum(a*b) of
 * 32768 elements ran 4-10x slower at 2 and 4 threads than at 1. */
#define PARALLEL_MIN ((int64_t)1 << 20)
#define PER_THREAD ((int64_t)1 << 19)
/* Polls of the busy count before the caller sleeps: the caller's last chunk
 * usually ends within a chunk's time of the workers', and a short poll
 * saves a futex sleep and wake-up. */
#define CALLER_SPIN 4000
/* Polls of a worker's semaphore after a run before it sleeps, where the
 * pool fits the machine's CPUs: back-to-back runs (a plan's kernels, a
 * training loop's steps) then find it awake. On the 2-vCPU build machine a
 * hand-off to one worker took 0.5 us so, 7 us through a futex wake-up; in
 * a pool larger than the CPUs, spinning workers took the CPU from the
 * ones with work and a hand-off took 50x longer, so they never spin there. */
#define WORKER_SPIN 2000

/* One poll's wait. Every 64th gives the CPU away: where the machine is
 * busier than the pool (other processes), a poller sharing a CPU with the
 * thread it waits for would otherwise hold it for its whole time slice
 * (hand-offs of 120-150 us, against 1 us, on the loaded build machine). */
static void poll_pause(int i)
{
    if (i % 64 == 63) {
        sched_yield();
        return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield" ::: "memory");
#endif
}

typedef struct worker_arg {
    alignas(64) sem_t go;      /* posted once per run the worker joins */
    struct ot_threads *t;
    int slot;                  /* 1 + the worker's index; the caller's is 0 */
} worker_arg;

struct ot_threads {
    int n;                     /* workers, besides the calling thread */
    pthread_t *tid;
    worker_arg *arg;
    pthread_mutex_t run;       /* one run at a time */
    pthread_mutex_t mu;        /* the caller's sleep while workers finish */
    pthread_cond_t done;
    atomic_bool quit;
    atomic_ullong handoffs;    /* runs handed to the pool, ever */
    int spin;                  /* WORKER_SPIN, or 0 in a pool beyond the CPUs */
    chunk_fn fn;               /* the run's; read by every chunk */
    void *ctx;
    int64_t nchunks;
    alignas(64) atomic_llong next;
    alignas(64) atomic_int busy;
};

static void run_chunks(ot_threads *t, int slot)
{
    for (int64_t c; (c = atomic_fetch_add(&t->next, 1)) < t->nchunks;) t->fn(t->ctx, slot, c, c + 1);
}

static void *worker(void *arg)
{
    worker_arg *w = arg;
    ot_threads *t = w->t;
    for (;;) {
        int polls = 0;
        while (polls < t->spin && sem_trywait(&w->go) != 0) {
            poll_pause(polls++);
        }
        while (polls == t->spin && sem_wait(&w->go) != 0 && errno == EINTR) continue;
        if (atomic_load(&t->quit)) return NULL;
        run_chunks(t, w->slot);
        if (atomic_fetch_sub(&t->busy, 1) == 1) {
            pthread_mutex_lock(&t->mu);
            pthread_cond_signal(&t->done);
            pthread_mutex_unlock(&t->mu);
        }
    }
}

void ot__threads_free(ot_threads *t)
{
    if (!t) return;
    atomic_store(&t->quit, true);
    for (int i = 0; i < t->n; i++) sem_post(&t->arg[i].go);
    for (int i = 0; i < t->n; i++) pthread_join(t->tid[i], NULL);
    for (int i = 0; i < t->n; i++) sem_destroy(&t->arg[i].go);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->run);
    pthread_cond_destroy(&t->done);
    free(t->tid);
    free(t->arg);
    free(t);
}

ot_threads *ot__threads_new(int workers)
{
    ot_threads *t = ot__aligned_alloc(64, sizeof *t);
    worker_arg *arg = workers ? ot__aligned_alloc(64, sizeof *arg * (size_t)workers) : NULL;
    if (t) ot__clear(t, sizeof *t);
    if (!t || (workers && !arg) || !(t->tid = ot__calloc((size_t)workers ? (size_t)workers : 1,
                                                         sizeof *t->tid))) {
        free(t);
        free(arg);
        ot__err_set(OT_ENOMEM, NULL, 0, "backend_new", "out of memory");
        return NULL;
    }
    t->arg = arg;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    t->spin = cpus > 0 && workers < cpus ? WORKER_SPIN : 0;
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->run, NULL);
    pthread_cond_init(&t->done, NULL);
    int err = 0;
    for (int i = 0; i < workers; i++) {
        ot__clear(&arg[i], sizeof arg[i]);
        arg[i].t = t;
        arg[i].slot = 1 + i;
        sem_init(&arg[i].go, 0, 0);
    }
    while (t->n < workers && (err = pthread_create(&t->tid[t->n], NULL, worker, &t->arg[t->n])) == 0)
        t->n++;
    if (err) {
        int started = t->n;
        for (int i = started; i < workers; i++) sem_destroy(&arg[i].go);
        ot__threads_free(t);
        ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new",
                    "cannot start %d worker threads (%d started: %s); ask for fewer threads",
                    workers, started, strerror(err));
        return NULL;
    }
    return t;
}

/* The workers a run of n chunks and `work` wakes: none below PARALLEL_MIN,
 * else one per PER_THREAD of work beyond the caller's, fewer than the
 * chunks, at most the pool's. */
static int64_t workers_for(const ot_threads *t, int64_t n, int64_t work)
{
    if (!t || work < PARALLEL_MIN) return 0;
    int64_t w = work / PER_THREAD - 1;
    if (w > n - 1) w = n - 1;
    return w < t->n ? w : t->n;
}

void ot__parallel(ot_threads *t, int slot, int64_t n, int64_t work, chunk_fn fn, void *ctx)
{
    int64_t woken = workers_for(t, n, work);
    if (woken < 1 || pthread_mutex_trylock(&t->run)) {
        if (n > 0) fn(ctx, slot, 0, n);
        return;
    }
    atomic_fetch_add_explicit(&t->handoffs, 1, memory_order_relaxed);
    t->fn = fn;
    t->ctx = ctx;
    t->nchunks = n;
    atomic_store(&t->next, 0);
    atomic_store(&t->busy, (int)woken);
    for (int64_t i = 0; i < woken; i++) sem_post(&t->arg[i].go);
    run_chunks(t, slot);
    for (int i = 0; i < CALLER_SPIN && atomic_load(&t->busy) > 0; i++) poll_pause(i);
    if (atomic_load(&t->busy) > 0) {
        pthread_mutex_lock(&t->mu);
        while (atomic_load(&t->busy) > 0) pthread_cond_wait(&t->done, &t->mu);
        pthread_mutex_unlock(&t->mu);
    }
    pthread_mutex_unlock(&t->run);
}

int ot__threads_workers(const ot_threads *t) { return t ? t->n : 0; }

uint64_t ot__threads_handoffs(const ot_threads *t) { return t ? atomic_load(&t->handoffs) : 0; }

/*
 * threads.c - the cpu backend's thread pool: a fixed set of workers that
 * take chunks of one run from a shared counter. Which thread runs a chunk
 * varies; what a chunk computes does not, so results never depend on the
 * number of threads (exec.c cuts the work by the plan alone).
 */
#include "cpu.h"
#include "threads.h"

#include <pthread.h>

#define PARALLEL_MIN 32768     /* elements below which a run stays serial */

typedef struct worker_arg {
    struct ot_threads *t;
    int slot;                  /* 1 + the worker's index; the caller's is 0 */
} worker_arg;

struct ot_threads {
    int n;                     /* workers, besides the calling thread */
    pthread_t *tid;
    worker_arg *arg;
    pthread_mutex_t mu, run;
    pthread_cond_t go, done;
    uint64_t gen;
    int busy;
    bool quit;
    chunk_fn fn;
    void *ctx;
    int64_t nchunks;
    atomic_llong next;
};

static void run_chunks(ot_threads *t, int slot)
{
    for (int64_t c; (c = atomic_fetch_add(&t->next, 1)) < t->nchunks;) t->fn(t->ctx, slot, c, c + 1);
}

static void *worker(void *arg)
{
    ot_threads *t = ((worker_arg *)arg)->t;
    int slot = ((worker_arg *)arg)->slot;
    uint64_t seen = 0;
    for (;;) {
        pthread_mutex_lock(&t->mu);
        while (t->gen == seen && !t->quit) pthread_cond_wait(&t->go, &t->mu);
        if (t->quit) {
            pthread_mutex_unlock(&t->mu);
            return NULL;
        }
        seen = t->gen;
        pthread_mutex_unlock(&t->mu);
        run_chunks(t, slot);
        pthread_mutex_lock(&t->mu);
        if (--t->busy == 0) pthread_cond_signal(&t->done);
        pthread_mutex_unlock(&t->mu);
    }
}

void ot__threads_free(ot_threads *t)
{
    if (!t) return;
    pthread_mutex_lock(&t->mu);
    t->quit = true;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    for (int i = 0; i < t->n; i++) pthread_join(t->tid[i], NULL);
    pthread_mutex_destroy(&t->mu);
    pthread_mutex_destroy(&t->run);
    pthread_cond_destroy(&t->go);
    pthread_cond_destroy(&t->done);
    free(t->tid);
    free(t->arg);
    free(t);
}

ot_threads *ot__threads_new(int workers)
{
    ot_threads *t = ot__calloc(1, sizeof *t);
    if (!t || !(t->tid = ot__calloc((size_t)workers, sizeof *t->tid)) ||
        !(t->arg = ot__calloc((size_t)workers, sizeof *t->arg))) {
        if (t) free(t->tid);
        free(t);
        ot__err_set(OT_ENOMEM, NULL, 0, "backend_new", "out of memory");
        return NULL;
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_mutex_init(&t->run, NULL);
    pthread_cond_init(&t->go, NULL);
    pthread_cond_init(&t->done, NULL);
    int err = 0;
    for (int i = 0; i < workers; i++) t->arg[i] = (worker_arg){t, 1 + i};
    while (t->n < workers && (err = pthread_create(&t->tid[t->n], NULL, worker, &t->arg[t->n])) == 0)
        t->n++;
    if (err) {
        int started = t->n;
        ot__threads_free(t);
        ot__err_set(OT_EUNSUPPORTED, NULL, 0, "backend_new",
                    "cannot start %d worker threads (%d started: %s); ask for fewer threads",
                    workers, started, strerror(err));
        return NULL;
    }
    return t;
}

void ot__parallel(ot_threads *t, int slot, int64_t n, int64_t elements, chunk_fn fn, void *ctx)
{
    if (!t || t->n == 0 || n < 2 || elements < PARALLEL_MIN || pthread_mutex_trylock(&t->run)) {
        if (n > 0) fn(ctx, slot, 0, n);
        return;
    }
    pthread_mutex_lock(&t->mu);
    t->fn = fn;
    t->ctx = ctx;
    t->nchunks = n;
    atomic_store(&t->next, 0);
    t->busy = t->n;
    t->gen++;
    pthread_cond_broadcast(&t->go);
    pthread_mutex_unlock(&t->mu);
    run_chunks(t, slot);
    pthread_mutex_lock(&t->mu);
    while (t->busy > 0) pthread_cond_wait(&t->done, &t->mu);
    pthread_mutex_unlock(&t->mu);
    pthread_mutex_unlock(&t->run);
}

int ot__threads_workers(const ot_threads *t) { return t ? t->n : 0; }

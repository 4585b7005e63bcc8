/*
 * lm.c - a small transformer language model on real English text, written
 * with optree's program API (`make demo-lm`).
 *
 * The data is Debian's `fortunes` package (`make deps` installs it): about
 * 2.6 MB of quotations, jokes and poems in /usr/share/games/fortunes, one
 * file per topic. Every plain file there is read in name order and joined;
 * the model sees bytes, so the vocabulary is the bytes the text uses. The
 * last tenth is held out for validation.
 *
 * The model is a character-level decoder in the GPT-2 arrangement:
 *
 *     token embedding + learned position embedding           (B*T, D)
 *     L blocks of   h = h + attention(layer_norm(h))            causal, H heads
 *                   h = h + W2 relu(W1 layer_norm(h) + b1) + b2
 *     layer_norm, then a linear layer to the vocabulary's logits
 *
 * trained with softmax cross-entropy and Adam (lr 3e-3, warmed up over the
 * first 5% of the steps, then decayed by a cosine) on batches of B windows
 * of T bytes drawn at random offsets. It prints the validation loss in bits
 * per character as it goes, against the text's unigram entropy (what a
 * model that ignores context can reach), then samples a few lines.
 *
 * How it is written, for a user who copies it to write a model of their
 * own: the variables live in one ot_program with three kinds of step - the
 * loss, its gradients (ot_program_backprop) and the update
 * (ot_program_adam) - compiled once and run per batch, binding the batch's
 * host arrays in place. Validation and sampling build plain trees over the
 * same variables and assign them; a tree of a shape seen before reuses its
 * plan. Each layer is one small function over nodes (embed, attend, norm,
 * mlp), so changing the architecture is changing those.
 *
 *     build/examples/lm [STEPS [DIR [INIT.npz]]]   (default 600, /usr/share/games/fortunes)
 *
 * INIT.npz, when given, receives the initial parameters by name (for
 * bench/lm_torch.py --init, which then starts from the same numbers).
 *
 * OT_EXAMPLE_SMALL=1 trains a tiny model for two steps on the first 4 KiB
 * (how the test suite runs it under valgrind); without the text it prints a
 * note and exits 0. Exits non-zero when the final validation loss is not
 * below the unigram entropy (after the default steps). Uses only
 * include/optree.h and frees everything it creates.
 */
#define _POSIX_C_SOURCE 200809L   /* strdup, clock_gettime */
#include "optree.h"
#include "lm_model.h"

#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---------------------------------------------------------------- data */

typedef struct text {
    unsigned char *ids;   /* the bytes mapped to 0..vocab-1 */
    size_t n, ntrain;     /* total; the first ntrain train, the rest validate */
    unsigned char byte_of[256];
    int vocab;
} text;

static int by_name(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The plain files of dir (no .dat index, no .u8 link, no subdirectory), in
 * name order so every run reads the same text. */
static int list_files(const char *dir, char ***out)
{
    DIR *d = opendir(dir);
    if (!d) return -1;
    char **names = NULL;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.' || (len > 4 && !strcmp(e->d_name + len - 4, ".dat")) ||
            (len > 3 && !strcmp(e->d_name + len - 3, ".u8")) || !strcmp(e->d_name, "off"))
            continue;
        char **grown = realloc(names, sizeof *names * (size_t)(n + 1));
        if (grown) names = grown;
        if (!grown || !(names[n] = strdup(e->d_name))) break;
        n++;
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof *names, by_name);
    *out = names;
    return n;
}

/* Appends the file dir/name to *buf (of *len bytes, *cap allocated). */
static int append_file(const char *dir, const char *name, unsigned char **buf, size_t *len,
                       size_t *cap)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) return 0;   /* a link to nowhere or a directory: skipped */
    unsigned char chunk[1 << 16];
    for (size_t got; (got = fread(chunk, 1, sizeof chunk, f)) > 0;) {
        if (*len + got > *cap) {
            size_t want = (*cap ? *cap * 2 : 1 << 20) + got;
            unsigned char *grown = realloc(*buf, want);
            if (!grown) {
                fclose(f);
                return -1;
            }
            *buf = grown;
            *cap = want;
        }
        memcpy(*buf + *len, chunk, got);
        *len += got;
    }
    fclose(f);
    return 0;
}

/* The text of dir, at most `limit` bytes, as ids; 0 or -1. */
static int text_load(text *t, const char *dir, size_t limit)
{
    char **names = NULL;
    int nf = list_files(dir, &names);
    if (nf <= 0) return -1;
    size_t len = 0, cap = 0;
    int rc = 0;
    for (int i = 0; i < nf; i++) {
        if (!rc && len < limit) rc = append_file(dir, names[i], &t->ids, &len, &cap);
        free(names[i]);
    }
    free(names);
    if (rc || len < 64) return -1;
    t->n = len < limit ? len : limit;
    int id_of[256];
    for (int b = 0; b < 256; b++) id_of[b] = -1;
    t->vocab = 0;
    for (size_t i = 0; i < t->n; i++)
        if (id_of[t->ids[i]] < 0) {
            t->byte_of[t->vocab] = t->ids[i];
            id_of[t->ids[i]] = t->vocab++;
        }
    for (size_t i = 0; i < t->n; i++) t->ids[i] = (unsigned char)id_of[t->ids[i]];
    t->ntrain = t->n - t->n / 10;
    return 0;
}

/* The training text's unigram entropy, bits per character. */
static double unigram_bits(const text *t)
{
    double count[256] = {0}, h = 0;
    for (size_t i = 0; i < t->ntrain; i++) count[t->ids[i]]++;
    for (int c = 0; c < t->vocab; c++)
        if (count[c] > 0) h -= count[c] / (double)t->ntrain * log2(count[c] / (double)t->ntrain);
    return h;
}

/* The generator that picks the windows (and bench/lm_torch.py's, the same
 * sequence: a 64-bit LCG, the top 31 bits). */
static uint64_t lcg(uint64_t *s)
{
    *s = *s * 6364136223846793005u + 1442695040888963407u;
    return *s >> 33;
}

/* A batch: d->batch windows of d->ctx ids starting in [lo, hi - ctx - 1),
 * as input ids x (B*T) and one-hot next-byte targets y (B*T, V). */
static void fill_batch(const text *t, const dims *d, size_t lo, size_t hi, uint64_t *seed,
                       int32_t *x, float *y)
{
    size_t rows = (size_t)(d->batch * d->ctx), v = (size_t)d->vocab;
    memset(y, 0, sizeof *y * rows * v);
    for (int64_t b = 0; b < d->batch; b++) {
        size_t at = lo + lcg(seed) % (hi - lo - (size_t)d->ctx - 1);
        for (int64_t i = 0; i < d->ctx; i++) {
            size_t r = (size_t)(b * d->ctx + i);
            x[r] = t->ids[at + (size_t)i];
            y[r * v + t->ids[at + (size_t)i + 1]] = 1;
        }
    }
}

/* Linear warm-up over the first 5% of the steps, then a cosine to 0. */
static double schedule(int step, int steps)
{
    int warm = steps / 20 > 0 ? steps / 20 : 1;
    if (step < warm) return (step + 1.0) / warm;
    return 0.5 * (1 + cos(3.14159265358979323846 * (step - warm) / (double)(steps - warm)));
}

/* The validation loss, bits per character, over `batches` fixed batches. */
static double validate(ot_backend *be, const trainer *t, const text *tx, const dims *d,
                       int batches, int32_t *xb, float *yb)
{
    int64_t rows = d->batch * d->ctx;
    uint64_t seed = 12345;
    double sum = 0;
    ot_tensor *x = ot_empty(be, OT_SHAPE(rows), OT_I32);
    ot_tensor *y = ot_empty(be, OT_SHAPE(rows, d->vocab), OT_F32);
    ot_tensor *l = ot_empty(be, OT_SHAPE(), OT_F32);
    int rc = x && y && l ? 0 : -1;
    for (int i = 0; i < batches && !rc; i++) {
        fill_batch(tx, d, tx->ntrain, tx->n, &seed, xb, yb);
        float v = 0;
        ot_pool *pool = ot_pool_push();
        rc = ot_set(x, xb);
        if (!rc) rc = ot_set(y, yb);
        if (!rc) rc = ot_assign(l, loss_of(forward(ot_tensor_node(x), &t->w, d, d->batch),
                                           ot_tensor_node(y)));
        ot_pool_pop(pool);
        if (!rc) rc = ot_get(l, &v);
        sum += v;
    }
    ot_tensor_free(x);
    ot_tensor_free(y);
    ot_tensor_free(l);
    return rc ? NAN : sum / batches / log(2);
}

/* ------------------------------------------------------------ sampling */

/* Draws an index from softmax(logits / temp). */
static int draw(const float *logits, int v, double temp, uint64_t *seed)
{
    double top = -INFINITY, sum = 0, p[256];
    for (int c = 0; c < v; c++) top = logits[c] > top ? logits[c] : top;
    for (int c = 0; c < v; c++) sum += p[c] = exp((logits[c] - top) / temp);
    double u = (double)lcg(seed) / 2147483648.0 * sum;
    for (int c = 0; c < v; c++)
        if ((u -= p[c]) <= 0) return c;
    return v - 1;
}

/* Prints `lines` lines of text the model writes, starting after a newline.
 * The window is the last T bytes written; causal attention means the
 * positions after the newest byte do not change its logits. */
static int sample(ot_backend *be, const trainer *t, const text *tx, const dims *d, int lines)
{
    int64_t T = d->ctx, V = d->vocab;
    float *z = malloc(sizeof *z * (size_t)(T * V));
    int32_t *win = calloc((size_t)T, sizeof *win);   /* the window's ids, 0 after len */
    ot_tensor *xt = ot_empty(be, OT_SHAPE(T), OT_I32), *zt = ot_empty(be, OT_SHAPE(T, V), OT_F32);
    int rc = z && win && xt && zt ? 0 : -1, len = 1, done = 0, col = 0;
    uint64_t seed = 7;
    int nl = 0;
    while (nl < V && tx->byte_of[nl] != '\n') nl++;
    win[0] = nl < V ? nl : 0;
    printf("sample:\n  ");
    while (!rc && done < lines && col < 4 * 80) {
        ot_pool *pool = ot_pool_push();
        rc = ot_set(xt, win);
        if (!rc) rc = ot_assign(zt, forward(ot_tensor_node(xt), &t->w, d, 1));
        ot_pool_pop(pool);
        if (!rc) rc = ot_get(zt, z);
        if (rc) break;
        int c = draw(z + (size_t)(len - 1) * (size_t)V, (int)V, 0.8, &seed);
        unsigned char byte = tx->byte_of[c];
        col++;
        if (byte == '\n') {
            done++;
            col = 0;
            printf(done < lines ? "\n  " : "\n");
        } else {
            putchar(byte >= 32 || byte == '\t' ? byte : '?');
        }
        if (len == T) memmove(win, win + 1, sizeof *win * (size_t)(T - 1));
        else len++;
        win[len - 1] = c;
    }
    if (col) putchar('\n');
    free(z);
    free(win);
    ot_tensor_free(xt);
    ot_tensor_free(zt);
    return rc;
}

/* ---------------------------------------------------------------- main */

/* The initial parameters into an .npz, by variable name: bench/lm_torch.py
 * --init starts the PyTorch model from the same numbers. */
static int save_init(const trainer *t, const char *path)
{
    const char *names[8 * PER_LAYER + 6];
    for (int i = 0; i < t->n; i++) names[i] = ot_tensor_name(t->list[i]);
    return ot_savez(path, t->n, names, (const ot_tensor *const *)t->list);
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Runs `steps` training steps, printing the validation loss 10 times. */
static int train(ot_backend *be, trainer *t, const text *tx, const dims *d, int steps,
                 int val_batches, double *val_bits)
{
    size_t rows = (size_t)(d->batch * d->ctx), ybytes = sizeof(float) * rows * (size_t)d->vocab;
    int32_t *xb = malloc(sizeof *xb * rows);
    float *yb = malloc(ybytes);
    if (!xb || !yb) {
        free(xb);
        free(yb);
        return -1;
    }
    uint64_t seed = 1;
    int rc = 0, every = steps >= 10 ? steps / 10 : 1;
    double busy = 0, run_loss = 0;   /* seconds in training steps, validation not counted */
    for (int s = 0; s < steps && !rc; s++) {
        double t0 = now();
        fill_batch(tx, d, 0, tx->ntrain, &seed, xb, yb);
        float f = (float)schedule(s, steps), l = 0;
        ot_bind bind[2] = {OT_BIND_DATA("x", xb, sizeof *xb * rows), OT_BIND_DATA("y", yb, ybytes)};
        rc = ot_set(t->lr_scale, &f);
        if (!rc) rc = ot_program_run(t->p, 2, bind);
        if (!rc) rc = ot_get(t->loss, &l);
        run_loss += l;
        busy += now() - t0;
        if (!rc && ((s + 1) % every == 0 || s + 1 == steps)) {
            *val_bits = validate(be, t, tx, d, val_batches, xb, yb);
            printf("step %4d: train %.3f, validation %.3f bits/char; %.0f ms/step, %.0f chars/s\n",
                   s + 1, run_loss / every / log(2), *val_bits, 1e3 * busy / (s + 1),
                   (double)rows * (s + 1) / busy);
            run_loss = 0;
            fflush(stdout);
        }
    }
    free(xb);
    free(yb);
    return rc;
}

int main(int argc, char **argv)
{
    const char *small_env = getenv("OT_EXAMPLE_SMALL");
    bool small = small_env && *small_env && strcmp(small_env, "0") != 0;
    int steps = argc > 1 ? atoi(argv[1]) : small ? 2 : 600;
    const char *dir = argc > 2 ? argv[2] : "/usr/share/games/fortunes";
    if (steps < 1) {
        fprintf(stderr, "lm: STEPS must be a positive number\n");
        return 2;
    }
    text tx = {0};
    if (text_load(&tx, dir, small ? 4096 : SIZE_MAX) != 0) {
        free(tx.ids);
        fprintf(stderr, "lm: no text in %s (install Debian's fortunes: make deps)\n", dir);
        return small ? 0 : 1;
    }
    dims d = small ? (dims){2, 16, 16, 2, 1, 32, tx.vocab}
                   : (dims){32, 128, 128, 4, 2, 512, tx.vocab};
    double unigram = unigram_bits(&tx), val = NAN;
    printf("lm: %zu bytes of text (%zu train, %zu validation), %d distinct; unigram entropy "
           "%.3f bits/char\n", tx.n, tx.ntrain, tx.n - tx.ntrain, tx.vocab, unigram);
    printf("lm: %lld layers, width %lld, %lld heads, context %lld, batch %lld; %d steps of Adam\n",
           (long long)d.layers, (long long)d.width, (long long)d.heads, (long long)d.ctx,
           (long long)d.batch, steps);
    /* One thread, as bench/lm_torch.py runs PyTorch (make demo-lm sets
     * OPENBLAS_NUM_THREADS=1 for the products too). */
    ot_backend *be = ot_backend_new("cpu", &(ot_backend_opts){.threads = 1});
    trainer t = {0};
    int rc = be ? trainer_build(&t, be, &d, 3e-3) : -1;
    if (!rc && argc > 3) rc = save_init(&t, argv[3]);
    if (!rc) rc = train(be, &t, &tx, &d, steps, small ? 1 : 16, &val);
    if (!rc) rc = sample(be, &t, &tx, &d, small ? 1 : 4);
    if (rc) fprintf(stderr, "lm: %s\n", ot_errmsg());
    bool missed = !rc && !small && steps >= 600 && !(val < unigram);
    if (!rc)
        printf("lm: validation %.3f bits/char against the unigram entropy's %.3f%s\n", val, unigram,
               missed ? ": NOT BELOW IT" : "");
    trainer_free(&t);
    ot_backend_free(be);
    ot_pool_drain();
    free(tx.ids);
    return rc ? 1 : missed ? 1 : 0;
}

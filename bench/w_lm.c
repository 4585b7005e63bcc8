/*
 * w_lm.c - W16 of issue 35: one training step of examples/lm.c's character
 * language model (examples/lm_model.h: token + position embeddings, 2
 * pre-norm blocks of causal 4-head attention and a ReLU MLP, width 128,
 * final layer norm, logits over the demo's 114-byte vocabulary; softmax
 * cross-entropy, backprop, Adam) on a batch of 32 windows of 128
 * characters, as the demo runs it: its compiled program, one run per call.
 * Each variant's backend has its own program, made from the same seeds at
 * its first call and freed by collect.
 *
 * The reference is the same step in PyTorch (bench/lm_torch.py --serve,
 * one thread), timed in this process run over a pipe (torch_pipe.c).
 * Without torch the reference times nothing and the label says so. The
 * model's learning is checked by `make bench-lm` (the demo against the
 * same model in PyTorch); here only that the loss is finite.
 */
#include "bench.h"

#include "../examples/lm_model.h"

#include <math.h>
#include <string.h>

enum { W16_V = 114, W16_MODELS = 4, IN_X = 0, IN_Y = 1, IN_COUNT = 2 };
static const dims W16_DIMS = {32, 128, 128, 4, 2, 512, W16_V};

#define W16_REF "PyTorch 1.13 step (bench/lm_torch.py), 1 thread"
char w16_ref_label[160] = W16_REF;

/* The program of each variant's backend, and the batch's ids as int32 (the
 * bench's inputs are f32: the ids arrive as whole numbers). */
static struct {
    ot_backend *be;
    trainer t;
    ot_tensor *ids;
} progs[W16_MODELS];

static bench_torch torch;

void w16_shapes(bench_data *d, bool quick)
{
    (void)quick;
    int64_t rows = W16_DIMS.batch * W16_DIMS.ctx;
    d->n_in = IN_COUNT;
    d->in_shape[IN_X] = OT_SHAPE(rows);
    d->in_shape[IN_Y] = OT_SHAPE(rows, W16_V);
    d->out_shape = OT_SHAPE(1);
}

/* Random characters: input ids, one-hot targets. */
void w16_fill(bench_data *d, uint64_t seed)
{
    size_t rows = (size_t)(W16_DIMS.batch * W16_DIMS.ctx);
    memset(d->in[IN_Y], 0, sizeof(float) * rows * W16_V);
    for (size_t r = 0; r < rows; r++) {
        d->in[IN_X][r] = (float)(bench_rand(&seed) % W16_V);
        d->in[IN_Y][r * W16_V + bench_rand(&seed) % W16_V] = 1;
    }
    if (!torch.in && bench_torch_start(&torch, "W16", "bench/lm_torch.py", "--serve") != 0)
        snprintf(w16_ref_label, sizeof w16_ref_label, W16_REF ": torch not importable, not measured");
}

/* The ids of x (whole numbers in f32) as a new int32 tensor. */
static ot_tensor *ids_of(ot_tensor *x)
{
    enum { ROWS = 32 * 128 };
    static float f[ROWS];
    static int32_t id[ROWS];
    if (ot_get(x, f) != 0) bench_die("W16: reading the ids: %s", ot_errmsg());
    for (int r = 0; r < ROWS; r++) id[r] = (int32_t)f[r];
    ot_tensor *t = ot_array(ot_tensor_backend(x), OT_SHAPE(ROWS), OT_I32, id);
    if (!t) bench_die("W16: the ids: %s", ot_errmsg());
    return t;
}

/* The slot of the inputs' backend, its program built at the first call. */
static int slot_of(ot_tensor *const in[])
{
    ot_backend *be = ot_tensor_backend(in[IN_X]);
    for (int i = 0; i < W16_MODELS; i++)
        if (progs[i].be == be) return i;
    for (int i = 0; i < W16_MODELS; i++)
        if (!progs[i].be) {
            progs[i].be = be;
            if (trainer_build(&progs[i].t, be, &W16_DIMS, 3e-3) != 0)
                bench_die("W16: building the program: %s", ot_errmsg());
            progs[i].ids = ids_of(in[IN_X]);
            return i;
        }
    bench_die("W16: more than %d backends", W16_MODELS);
}

int w16_step(ot_tensor *out, ot_tensor *const in[])
{
    (void)out;
    int i = slot_of(in);
    ot_bind bind[2] = {OT_BIND_TENSOR("x", progs[i].ids), OT_BIND_TENSOR("y", in[IN_Y])};
    return ot_program_run(progs[i].t.p, 2, bind);
}

/* The step's program as ot_program_explain shows it (bench --explain). */
void w16_explain(FILE *f, ot_tensor *const in[])
{
    if (ot_program_explain(progs[slot_of(in)].t.p, f) != 0)
        bench_die("W16: ot_program_explain: %s", ot_errmsg());
}

/* 0 when the last step's loss was finite; the variant's program is done. */
int w16_collect(ot_tensor *out, ot_tensor *const in[])
{
    int i = slot_of(in);
    float l = NAN;
    int rc = ot_get(progs[i].t.loss, &l);
    float bad = !rc && isfinite(l) && l >= 0 ? 0.0f : 1.0f;
    trainer_free(&progs[i].t);
    ot_tensor_free(progs[i].ids);
    memset(&progs[i], 0, sizeof progs[i]);
    return ot_set(out, &bad);
}

void w16_check(const bench_data *d, float *out)
{
    (void)d;
    out[0] = 0;
}

bool w16_ref_absent(void) { return !torch.in; }

void w16_ref(const ref_loops *L, store_mode sm, const bench_data *d, float *out)
{
    (void)L, (void)sm, (void)d;
    out[0] = 0;
    bench_torch_step(&torch, "W16");
}

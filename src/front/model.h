/*
 * model.h - private to model.c and model_cnn.c: an ot_model's layers and
 * the shared pieces of adding one.
 *
 * Every layer maps a batch of samples of shape `in` (its predecessor's
 * `out`, or the model's input shape) to samples of shape `out`: dense
 * layers take and give flat samples (a sample of higher rank is flattened
 * first), batch norm keeps the shape, convolution and pooling take
 * (channels, spatial...) samples.
 */
#ifndef OT_FRONT_MODEL_H
#define OT_FRONT_MODEL_H

#include "front.h"

typedef enum { L_DENSE, L_BN, L_CONV, L_POOL, L_DROP } layer_kind;

typedef struct layer {
    layer_kind kind;
    ot_shape out;                 /* one sample's output shape */
    ot_activation act;
    ot_tensor *w, *b;             /* dense: (fan_in, units), (units); batch
                                     norm: weight and bias, (channels); conv:
                                     (out, in / groups, kernel...), (out);
                                     pooling: none */
    ot_tensor *m[2], *v[2];       /* Adam's moments or SGD's velocity (m) */
    int64_t adam_t;               /* Adam's updates of m and v so far: the
                                     next step's t - 1, kept across fits and
                                     rebuilds of the program, as the moments */
    double momentum, eps;         /* batch norm's */
    ot_tensor *rm, *rv;           /* batch norm's running mean and variance */
    ot_conv_opts conv;            /* conv's options as given */
    ot_pool_opts pool;            /* pooling's options as given */
    bool max;                     /* max pooling (else average) */
    double rate;                  /* dropout's: the fraction of values zeroed */
    ot_tensor *mask;              /* dropout's: the training program's
                                     placeholder, (batch, out...); NULL
                                     until fit builds the program */
    float *mask_host;             /* dropout's: its data for the next step */
    char mask_name[16];           /*   bound by this name: "drop<i>" */
    const char *file;             /* where the layer was added: a tree */
    int line;                     /*   built later reports errors there */
} layer;

struct ot_model {
    ot_backend *be;
    int64_t inputs;               /* one sample's elements */
    ot_shape in;                  /* one sample's shape: (inputs) or set by
                                     ot_model_input_shape */
    int nlayer;
    layer layer[OT_MODEL_MAX_LAYERS];
    int loss;                     /* OT_LOSS_*; 0: none yet */
    ot_loss_fn loss_fn;
    void *loss_user;
    bool adam;
    ot_sgd sgd;
    ot_adam adam_opts;
    ot_program *prog;             /* the training step, for prog_batch rows */
    int64_t prog_batch;
    ot_tensor *loss_t, *hits_t;   /* the step's scalars */
    ot_tensor *lr_scale;          /* 0-d f64: the schedule's factor on lr */
    ot_dtype compute;             /* activations' and gradients' dtype */
    ot_loss_scale ls;             /* f16's loss scaler (scale > 0) */
    int good;                     /*   steps since the last skip or growth */
    ot_tensor *scale_t, *unscale_t, *finite_t;   /* 0-d f32: the scale, its
                                     inverse, and 0 (NaN when a gradient is
                                     not finite), for the program */
    ot_program *opt;              /* f16: the optimizer's step, run apart
                                     so that a step can be skipped */
};

/* An error of the call at `at` (its function's name and caller's file:line). */
#define FAIL(at, code, ...) ot__err_set((code), (at)->file, (at)->line, (at)->fn, __VA_ARGS__)

/* The shape of a sample entering layer i (the model's input shape for 0). */
ot_shape ot__model_in_shape(const ot_model *m, int i);
/* Appends *l (kind, out, act and options set, and for conv its weight
 * shape in ws) with its tensors made and initialised: He-uniform weights
 * over fan_in drawn from seed, zero biases. */
int ot__model_add(ot_model *m, layer *l, ot_shape ws, int64_t fan_in, uint64_t seed,
                  const ot__site *at);
/* Dropout (model_reg.c): the training program's mask placeholders, one
 * per dropout layer, of batch rows (with their host buffers), and each
 * step's masks drawn from *rng into binds[]: returns how many binds. */
int ot__model_drop_placeholders(ot_model *m, ot_program *p, int64_t batch, const ot__site *at);
int ot__model_drop_masks(ot_model *m, int64_t batch, uint64_t *rng, ot_bind binds[]);
/* splitmix64: the model's random stream (shuffling, masks, augmentation). */
uint64_t ot__model_splitmix(uint64_t *s);
/* Layer l (a conv or pooling layer) applied to h, a batch of its input
 * samples: the tree, nothing computed. Errors name l's file:line. */
ot_node *ot__model_apply_spatial(const layer *l, ot_node *h);
/* Parameter t as h's layer reads it: cast to h's dtype when that is a
 * 16-bit compute dtype (mixed precision), else t itself. */
ot_node *ot__model_param(ot_tensor *t, const ot_node *h);
/* f16's loss scaler (model_half.c): its tensors made and set and the
 * optimizer's program made (NULL with the error set); the step that
 * unscales the n gradients g and flags a non-finite one, into p; and,
 * after each run of the gradients' program, the optimizer's run or the
 * skip, and the scale's update. */
ot_program *ot__model_scaler_new(ot_model *m, const char *f, int ln);
int ot__model_unscale_step(const ot_model *m, ot_program *p, int n, ot_tensor *g[], const char *f,
                           int ln);
int ot__model_scaler_step(ot_model *m, const ot__site *at);

#endif /* OT_FRONT_MODEL_H */

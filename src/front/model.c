/*
 * model.c - ot_model: layers, a loss and an optimizer driven by a training
 * loop (Serrano's Model over its ComputationGraph; Keras's fit/predict).
 *
 * A model owns its parameters as plain tensors (made when a layer is
 * added, so predict works before fit). ot_model_fit writes one program
 * (program.c) per batch size: the loss and the correct count into two
 * scalars, the gradients, the optimizer's update; each step of an epoch
 * then binds a batch gathered on the host in the shuffled order and runs
 * it, with no tree built. Validation and predict are plain assignments of
 * the forward tree, at any number of rows. Everything fit checks (shapes,
 * dtypes, options, a loss) is checked before the first step runs, so bad
 * input leaves the parameters as they were. The parameters go to and from
 * NumPy's .npz in model_io.c.
 */
#include "model.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int nomem(const ot__site *at) { return FAIL(at, OT_ENOMEM, "out of memory"); }

ot_model *ot_model_new_at(ot_backend *be, int64_t inputs, const char *file, int line)
{
    const ot__site site = {"model_new", file, line}, *at = &site;
    if (!be) {
        FAIL(at, OT_ENULL, "backend is NULL");
        return NULL;
    }
    if (inputs < 1) {
        FAIL(at, OT_EINVAL, "inputs must be >= 1, not %lld", (long long)inputs);
        return NULL;
    }
    if (ot__backend_gone(be, at->fn, file, line, "the model")) return NULL;
    ot_model *m = ot__calloc(1, sizeof *m);
    if (!m) {
        nomem(at);
        return NULL;
    }
    ot__backend_hold(be);   /* layers made later are made on it */
    m->be = be;
    m->inputs = inputs;
    m->in = OT_SHAPE(inputs);
    m->adam_opts = ot_adam_default(1e-3);
    m->adam = true;
    m->compute = OT_F32;
    m->ls = (ot_loss_scale){65536, 2000, 0};
    return m;
}

static void layer_free(layer *l)
{
    ot_tensor_free(l->w);
    ot_tensor_free(l->b);
    ot_tensor_free(l->rm);
    ot_tensor_free(l->rv);
    for (int k = 0; k < 2; k++) {
        ot_tensor_free(l->m[k]);
        ot_tensor_free(l->v[k]);
    }
    free(l->mask_host);
    *l = (layer){0};
}

/* Dropout's mask placeholders go with the program. */
static void drop_program(ot_model *m)
{
    ot_program_free(m->prog);
    ot_program_free(m->opt);
    m->prog = m->opt = NULL;
    m->prog_batch = 0;
    for (int i = 0; i < m->nlayer; i++) m->layer[i].mask = NULL;
}

void ot_model_free(ot_model *m)
{
    if (!m) return;
    drop_program(m);
    for (int i = 0; i < m->nlayer; i++) layer_free(&m->layer[i]);
    ot_tensor_free(m->loss_t);
    ot_tensor_free(m->hits_t);
    ot_tensor_free(m->lr_scale);
    ot_tensor_free(m->scale_t);
    ot_tensor_free(m->unscale_t);
    ot_tensor_free(m->finite_t);
    ot_backend *be = m->be;
    free(m);
    ot__backend_drop(be);
}

ot_shape ot__model_in_shape(const ot_model *m, int i)
{
    return i ? m->layer[i - 1].out : m->in;
}

/* The model's outputs per sample: the last layer's, flattened. */
static int64_t outputs(const ot_model *m)
{
    return ot__numel(&m->layer[m->nlayer - 1].out);
}

/* Weights drawn He-uniform (limit sqrt(6/fan_in)) on the backend from seed,
 * zero biases and optimizer state; batch norm: a weight of ones and, as
 * PyTorch starts them, running mean 0 and variance 1. Pooling layers have
 * no parameters (ws.ndim 0). */
/* The layer's tensors, each made at the caller's place; the first that
 * cannot be made (a size too big) ends it, its error named as the call's
 * (one error: the handler heard six). */
static int layer_tensors(ot_model *m, layer *l, ot_shape ws, ot_shape bs)
{
    ot_tensor **t[8] = {&l->w, &l->b, &l->m[0], &l->v[0], &l->m[1], &l->v[1], &l->rm, &l->rv};
    int count = l->kind == L_BN ? 8 : 6;
    for (int i = 0; i < count; i++) {
        ot_shape s = i == 0 || i == 2 || i == 3 ? ws : bs;
        *t[i] = i == 0 ? (ot_empty)(m->be, s, OT_F32)
                       : (ot_full)(m->be, s, OT_F32, i == 7 ? 1.0 : 0.0);
        if (!*t[i]) return ot_errcode() ? ot_errcode() : OT_ENOMEM;
    }
    return 0;
}

static ot_node *bin(ot_op op, ot_node *a, double b)
{
    return ot_build_at(op, a, ot_const(b), NULL, NULL, 0);
}

/* Marks w and b trainable (ot_variables of a tree over the model lists its
 * parameters) and writes w's first values: ones for batch norm, else
 * uniform in +-sqrt(6/in). Built with no place of their own: an error
 * (out of memory) takes the caller's. */
static int layer_values(layer *l, ot_shape ws, int64_t in, uint64_t seed)
{
    if (ot_tensor_set_trainable(l->w, true) || ot_tensor_set_trainable(l->b, true))
        return ot_errcode();
    ot_pool *pool = ot_pool_push();
    if (!pool) return ot_errcode();
    ot_node *v = ot_const(1.0);
    if (l->kind != L_BN) {
        ot_args r = {.axis = OT_AXIS_ALL, .dtype = OT_DTYPE_DEFAULT, .seed = seed, .shape = ws};
        ot_node *u = ot_build_at(OT_OP_RAND, NULL, NULL, &r, NULL, 0);
        v = bin(OT_OP_MUL, bin(OT_OP_SUB, bin(OT_OP_MUL, u, 2.0), 1.0), sqrt(6.0 / (double)in));
    }
    int rc = v ? ot_assign_at(l->w, v, NULL, 0) : ot_errcode() ? ot_errcode() : OT_ENOMEM;
    ot_pool_pop(pool);
    return rc;
}

static int layer_init(ot_model *m, layer *l, ot_shape ws, int64_t in, uint64_t seed,
                      const ot__site *at)
{
    int rc = ot__backend_gone(m->be, at->fn, at->file, at->line, "the model");
    if (rc || !ws.ndim) return rc;
    ot_shape bs = OT_SHAPE(ws.dims[l->kind == L_DENSE ? 1 : 0]);
    ot__callsite outer = ot__site_enter(at->file, at->line);
    rc = layer_tensors(m, l, ws, bs);
    if (!rc) rc = layer_values(l, ws, in, seed);
    ot__site_leave(outer);
    return rc ? ot__err_relabel(rc, at->file, at->line, at->fn) : 0;
}

int ot__model_add(ot_model *m, layer *l, ot_shape ws, int64_t fan_in, uint64_t seed,
                  const ot__site *at)
{
    if (l->act < OT_ACT_NONE || l->act > OT_ACT_SIG)
        return FAIL(at, OT_EINVAL, "unknown activation %d", (int)l->act);
    if (m->nlayer == OT_MODEL_MAX_LAYERS)
        return FAIL(at, OT_EINVAL, "a model has at most %d layers", OT_MODEL_MAX_LAYERS);
    l->file = at->file;
    l->line = at->line;
    l->adam_t = m->adam_opts.t - 1;   /* fresh moments: Adam's first step */
    int rc = layer_init(m, l, ws, fan_in, seed, at);
    if (rc) {
        layer_free(l);
        return rc;
    }
    m->layer[m->nlayer++] = *l;
    drop_program(m);
    return 0;
}

/* A dense layer flattens a sample of higher rank (a conv's (C, H, W)). */
int ot_model_linear_at(ot_model *m, int64_t units, ot_activation act, uint64_t seed,
                       const char *file, int line)
{
    const ot__site site = {"model_linear", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (units < 1)
        return FAIL(at, OT_EINVAL, "units must be >= 1, not %lld", (long long)units);
    ot_shape in = ot__model_in_shape(m, m->nlayer);
    int64_t fan_in = ot__numel(&in);
    layer l = {.kind = L_DENSE, .out = OT_SHAPE(units), .act = act};
    return ot__model_add(m, &l, OT_SHAPE(fan_in, units), fan_in, seed, at);
}

/* Per channel: a sample's first dim (a dense layer's features, a conv's
 * channels). */
int ot_model_batch_norm_at(ot_model *m, ot_activation act, double momentum, double eps,
                           const char *file, int line)
{
    const ot__site site = {"model_batch_norm", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (!(momentum >= 0 && momentum <= 1))
        return FAIL(at, OT_EINVAL, "momentum must be in [0, 1], not %g", momentum);
    if (!(eps >= 0 && isfinite(eps)))
        return FAIL(at, OT_EINVAL, "eps must be finite and >= 0, not %g", eps);
    ot_shape in = ot__model_in_shape(m, m->nlayer);
    layer l = {.kind = L_BN, .out = in, .act = act, .momentum = momentum, .eps = eps};
    return ot__model_add(m, &l, OT_SHAPE(in.dims[0]), 1, 0, at);
}

int ot_model_loss_at(ot_model *m, int loss, ot_loss_fn fn_, void *user, const char *file,
                     int line)
{
    const ot__site site = {"model_loss", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (loss < OT_LOSS_SOFTMAX_CE || loss > OT_LOSS_CUSTOM)
        return FAIL(at, OT_EINVAL, "unknown loss %d", loss);
    if ((loss == OT_LOSS_CUSTOM) != (fn_ != NULL))
        return FAIL(at, fn_ ? OT_EINVAL : OT_ENULL,
                           fn_ ? "a loss function is given only with OT_LOSS_CUSTOM"
                               : "OT_LOSS_CUSTOM needs a loss function");
    m->loss = loss;
    m->loss_fn = fn_;
    m->loss_user = user;
    drop_program(m);
    return 0;
}

/* The model's schedule tensor is the one its program reads. */
static int own_schedule(const ot__site *at)
{
    return FAIL(at, OT_EINVAL, "the optimizer's lr_scale must be NULL: a model schedules lr "
                "itself (ot_fit_opts.lr_schedule)");
}

/* A switch between SGD and Adam: the state m holds (SGD's velocity in
 * m[], or Adam's moments) is the other optimizer's, so the new one starts
 * from zeros and t = 1, as a new PyTorch optimizer does (Adam read a
 * velocity as its first moment, SGD Adam's moment as its velocity). */
static int switch_state(ot_model *m, bool adam, const ot__site *at)
{
    if (m->adam == adam) return 0;
    for (int i = 0; i < m->nlayer; i++) {
        layer *l = &m->layer[i];
        for (int k = 0; k < 2; k++)
            if ((l->m[k] && ot_fill(l->m[k], 0.0)) || (l->v[k] && ot_fill(l->v[k], 0.0)))
                return ot__err_relabel(ot_errcode(), at->file, at->line, at->fn);
        l->adam_t = 0;
    }
    return 0;
}

/* The options are kept with their defaults filled in. */
int ot_model_sgd_at(ot_model *m, const ot_sgd *o, const char *file, int line)
{
    const ot__site site = {"model_sgd", file, line}, *at = &site;
    ot_sgd full;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    int rc = ot__sgd_opts(at, o, &full);
    if (!rc && full.lr_scale) rc = own_schedule(at);
    if (!rc) rc = switch_state(m, false, at);
    if (rc) return rc;
    m->sgd = full;
    m->adam = false;
    drop_program(m);
    return 0;
}

int ot_model_adam_at(ot_model *m, const ot_adam *o, const char *file, int line)
{
    const ot__site site = {"model_adam", file, line}, *at = &site;
    ot_adam full;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    int rc = ot__adam_opts(at, o, &full);
    if (!rc && full.lr_scale) rc = own_schedule(at);
    if (!rc) rc = switch_state(m, true, at);
    if (rc) return rc;
    m->adam_opts = full;
    m->adam = true;
    for (int i = 0; o->t && i < m->nlayer; i++) m->layer[i].adam_t = full.t - 1;
    drop_program(m);
    return 0;
}

/* ---- trees ------------------------------------------------------------------ */

static ot_node *activate(ot_node *h, ot_activation act)
{
    switch (act) {
    case OT_ACT_RELU: return ot_relu(h);
    case OT_ACT_TANH: return ot_tanh(h);
    case OT_ACT_SIG: return ot_sig(h);
    default: return h;
    }
}

/* h, a batch of samples, as a batch of samples of shape `sample` (a
 * reshape of an expression; none when h has that shape already). */
static ot_node *as_samples(ot_node *h, ot_shape sample)
{
    if (!h) return NULL;
    ot_shape hs = ot_node_shape(h), want = {.ndim = sample.ndim + 1};
    want.dims[0] = hs.dims[0];
    bool same = hs.ndim == want.ndim;
    for (int d = 0; d < sample.ndim; d++) {
        want.dims[d + 1] = sample.dims[d];
        same = same && hs.dims[d + 1] == sample.dims[d];
    }
    return same ? h : ot_reshape_node(h, want);
}

/* h with each sample flattened: (rows, elements). */
static ot_node *flatten(ot_node *h)
{
    if (!h || ot_node_shape(h).ndim == 2) return h;
    return ot_reshape_node(h, OT_SHAPE(ot_node_shape(h).dims[0], -1));
}

/* h in dtype dt: a cast where it is of another (none for f32 models, so
 * their trees are what they always were). */
static ot_node *in_dtype(ot_node *h, ot_dtype dt)
{
    return !h || ot_node_dtype(h) == dt ? h : ot_cast(h, .dtype = dt);
}

/* The model's output for x (rows of inputs, flat or in the input shape):
 * builds, computes nothing; rows of the last layer's outputs, flattened,
 * in f32. upd NULL: inference (batch norm by its running values); else
 * training, and upd[2i], upd[2i + 1] get batch norm layer i's running
 * mean and variance update trees (NULL for other layers). Layers compute
 * in m->compute (mixed precision: weights cast to it; batch norm, whose
 * running values are f32, in f32 between casts). */
static ot_node *forward(const ot_model *m, ot_node *x, ot_node **upd)
{
    ot_node *h = in_dtype(as_samples(x, m->in), m->compute);
    for (int i = 0; i < m->nlayer; i++) {
        const layer *l = &m->layer[i];
        if (upd) upd[2 * i] = upd[2 * i + 1] = NULL;
        switch (l->kind) {
        case L_DENSE:
            h = ot_add(ot_dot(flatten(h), ot__model_param(l->w, h)), ot__model_param(l->b, h));
            break;
        case L_BN:
            h = ot_batch_norm(in_dtype(h, OT_F32), l->rm, l->rv, l->w, l->b,
                              .training = upd != NULL, .momentum = l->momentum, .eps = l->eps,
                              .updates = upd ? upd + 2 * i : NULL);
            break;
        case L_DROP:
            if (upd) h = ot_mul(h, l->mask);   /* inference: the identity */
            break;
        default: h = ot__model_apply_spatial(l, h);
        }
        h = activate(in_dtype(h, m->compute), l->act);
    }
    return in_dtype(flatten(h), OT_F32);
}

/* The mean loss of out against y (a scalar tree). */
static ot_node *loss_tree(const ot_model *m, ot_node *out, ot_node *y)
{
    switch (m->loss) {
    case OT_LOSS_SOFTMAX_CE:
        return ot_mean(ot_cross_entropy(ot_softmax(out, .axis = 1), y, .axis = 1));
    case OT_LOSS_MSE: return ot_mean(ot_sqr(ot_sub(out, y)));
    default: return m->loss_fn(out, y, m->loss_user);
    }
}

/* Rows whose largest output is where their target is largest (an i32
 * scalar); with one output column, accuracy is not defined (NULL). */
static ot_node *hits_tree(const ot_model *m, ot_node *out, ot_node *y)
{
    if (outputs(m) < 2) return NULL;
    return ot_sum(ot_eq(ot_argmax(out, .axis = 1), ot_argmax(y, .axis = 1)));
}

/* ---- the training program ---------------------------------------------------- */

/* The step that writes the loss, the hit count and the batch norm layers'
 * running values (upd: forward's trees): one evaluation, so the batch
 * statistics are computed once for the loss and the running averages. */
static int assign_step(const ot_model *m, ot_program *p, ot_node *loss, ot_node *hits,
                       ot_node *const upd[], const char *f, int ln)
{
    ot_tensor *outs[2 + 2 * OT_MODEL_MAX_LAYERS] = {m->loss_t, m->hits_t};
    ot_node *trees[2 + 2 * OT_MODEL_MAX_LAYERS] = {loss, hits};
    int k = hits ? 2 : 1;
    for (int i = 0; i < m->nlayer; i++) {
        if (m->layer[i].kind != L_BN) continue;
        outs[k] = m->layer[i].rm;
        trees[k++] = upd[2 * i];
        outs[k] = m->layer[i].rv;
        trees[k++] = upd[2 * i + 1];
    }
    return ot_program_assign_many_at(p, k, outs, trees, f, ln);
}

/* The parameters, W then b of each layer that has them, into w; their
 * optimizer state into mo and vo unless NULL. Returns the count. */
static int param_slots(const ot_model *m, ot_tensor *w[], ot_tensor *mo[], ot_tensor *vo[])
{
    int n = 0;
    for (int i = 0; i < m->nlayer; i++) {
        const layer *l = &m->layer[i];
        for (int k = 0; l->w && k < 2; k++, n++) {
            w[n] = k ? l->b : l->w;
            if (mo) mo[n] = l->m[k];
            if (vo) vo[n] = l->v[k];
        }
    }
    return n;
}

/* Whether parameter k (0: W, 1: b) of layer l decays under AdamW: dense
 * and conv weights do; biases and batch norm's scale and shift do not (as
 * usual: decaying them only limits what the layer can represent). */
static bool decays(const layer *l, int k)
{
    return k == 0 && (l->kind == L_DENSE || l->kind == L_CONV);
}

/* Adam's steps over the n parameters (param_slots' order), one per group
 * of parameters that share AdamW's decay (applied to the weights that
 * decay only) and t: each layer counts the updates its moments have had
 * (a layer added between fits starts afresh while the others go on), so
 * the program starts each group at the next t of its layers. */
static int adam_steps(const ot_model *m, ot_program *p, int n, ot_tensor *w[], ot_node *gn[],
                      ot_tensor *mo[], ot_tensor *vo[], const char *f, int ln)
{
    ot_tensor *wp[2 * OT_MODEL_MAX_LAYERS], *mp[2 * OT_MODEL_MAX_LAYERS],
        *vp[2 * OT_MODEL_MAX_LAYERS];
    ot_node *gp[2 * OT_MODEL_MAX_LAYERS];
    int64_t t[2 * OT_MODEL_MAX_LAYERS];
    bool decay[2 * OT_MODEL_MAX_LAYERS], done[2 * OT_MODEL_MAX_LAYERS] = {0};
    ot_adam o = m->adam_opts;
    o.lr_scale = m->lr_scale;
    if (n == 0) return ot_program_adam_at(p, &o, 0, w, gn, mo, vo, f, ln);   /* its checks */
    for (int i = 0, j = 0; i < m->nlayer; i++)
        for (int k = 0; m->layer[i].w && k < 2; k++, j++) {
            t[j] = m->layer[i].adam_t + 1;
            decay[j] = o.weight_decay != 0 && decays(&m->layer[i], k);
        }
    int rc = 0;
    for (int j = 0; j < n && !rc; j++) {
        if (done[j]) continue;
        int c = 0;
        for (int k = j; k < n; k++) {
            if (done[k] || t[k] != t[j] || decay[k] != decay[j]) continue;
            done[k] = true;
            wp[c] = w[k];
            gp[c] = gn[k];
            mp[c] = mo[k];
            vp[c++] = vo[k];
        }
        ot_adam g = o;
        g.t = t[j];
        if (!decay[j]) g.weight_decay = 0;
        rc = ot_program_adam_at(p, &g, c, wp, gp, mp, vp, f, ln);
    }
    return rc;
}

/* The optimizer's steps over the parameters w with gradients gn, into p. */
static int optimizer_steps(const ot_model *m, ot_program *p, int n, ot_tensor *w[], ot_node *gn[],
                           ot_tensor *mo[], ot_tensor *vo[], const char *f, int ln)
{
    if (m->adam) return adam_steps(m, p, n, w, gn, mo, vo, f, ln);
    ot_sgd sgd = m->sgd;
    sgd.lr_scale = m->lr_scale;
    return ot_program_sgd_at(p, &sgd, n, w, gn, sgd.momentum > 0 ? mo : NULL, f, ln);
}

/* The training step's assignments over placeholders x and y: the loss
 * and hits (and batch norm's running values), the gradients g of the n
 * parameters w, into p, and the optimizer's update, into q (p itself but
 * with f16, whose loss scaling takes the gradients of loss*scale and
 * unscales them in p, the optimizer being a program of its own). */
static int train_steps(const ot_model *m, ot_program *p, ot_program *q, ot_tensor *x, ot_tensor *y,
                       int n, ot_tensor *w[], ot_tensor *g[], ot_node *gn[], ot_tensor *mo[],
                       ot_tensor *vo[], const ot__site *at)
{
    const char *f = at->file;
    int ln = at->line, rc = 0;
    ot_node *upd[2 * OT_MODEL_MAX_LAYERS];
    ot_node *out = forward(m, ot_tensor_node(x), upd);
    ot_node *loss = loss_tree(m, out, ot_tensor_node(y));
    ot_node *hits = hits_tree(m, out, ot_tensor_node(y));
    char s1[OT__SHAPE_STRLEN];
    ot_shape ls = loss ? ot_node_shape(loss) : OT_SHAPE();
    if (!loss) rc = ot_errcode() ? ot_errcode() : FAIL(at, OT_EINVAL, "the loss function returned NULL");
    else if (ls.ndim != 0)
        rc = FAIL(at, OT_ESHAPE, "the loss has shape %s; it must be a scalar tree",
                  ot__shape_str(&ls, s1));
    bool scaling = q != p;
    if (!rc) rc = assign_step(m, p, loss, hits, upd, f, ln);
    ot_node *cost = scaling && loss ? ot_mul(loss, m->scale_t) : loss;
    if (!rc) rc = ot_program_backprop_at(p, cost, n, w, g, f, ln);
    if (!rc && scaling) rc = ot__model_unscale_step(m, p, n, g, f, ln);
    return rc ? rc : optimizer_steps(m, q, n, w, gn, mo, vo, f, ln);
}

/* An error of a call fit made for its caller (building, compiling or
 * running the training program: program_new, program_run, ...): the
 * fit's, at the caller, the inner call's words kept. */
static int fit_error(int rc, const ot__site *at)
{
    return rc ? ot__err_relabel(rc, at->file, at->line, at->fn) : 0;
}

/* The program's calls are reported at the fit's caller (at). With a
 * 16-bit compute dtype the program's steps run as assignments (the cpu
 * backend prepares no f16/bf16 step yet; its ot_assign converts); with
 * f16 the optimizer is a second program, m->opt, run when the step's
 * gradients are finite. */
static int build_program(ot_model *m, int64_t batch, const ot__site *at)
{
    const char *f = at->file;
    int ln = at->line;
    int64_t outs = outputs(m);
    drop_program(m);
    ot_program *p = ot_program_new_at(m->be, f, ln);
    if (!p) return ot_errcode();
    if (m->compute != OT_F32) ot__program_unprepared(p);
    ot_program *q = m->compute == OT_F16 ? ot__model_scaler_new(m, f, ln) : p;
    if (!q) {
        ot_program_free(p);
        return ot_errcode();
    }
    ot_tensor *x = ot_program_placeholder_at(p, "x", OT_SHAPE(batch, m->inputs), OT_F32, f, ln);
    ot_tensor *y = ot_program_placeholder_at(p, "y", OT_SHAPE(batch, outs), OT_F32, f, ln);
    ot_tensor *w[2 * OT_MODEL_MAX_LAYERS], *g[2 * OT_MODEL_MAX_LAYERS] = {0};
    ot_tensor *mo[2 * OT_MODEL_MAX_LAYERS], *vo[2 * OT_MODEL_MAX_LAYERS];
    ot_node *gn[2 * OT_MODEL_MAX_LAYERS];
    int n = param_slots(m, w, mo, vo), rc = x && y ? 0 : ot_errcode();
    if (!rc) rc = ot__model_drop_placeholders(m, p, batch, at);
    for (int i = 0; i < n && !rc; i++) {
        g[i] = (ot_zeros)(m->be, ot_tensor_shape(w[i]), OT_F32);
        if (!g[i]) rc = ot_errcode();
        else gn[i] = ot_tensor_node(g[i]);
    }
    ot_pool *pool = rc ? NULL : ot_pool_push();
    if (!rc && !pool) rc = ot_errcode();
    if (!rc) rc = train_steps(m, p, q, x, y, n, w, g, gn, mo, vo, at);
    if (pool) ot_pool_pop(pool);
    for (int i = 0; i < n; i++) ot_tensor_free(g[i]);   /* the steps hold them */
    if (!rc) rc = ot_program_compile_at(p, f, ln);
    if (!rc && q != p) rc = ot_program_compile_at(q, f, ln);
    if (rc) {
        ot_program_free(p);
        if (q != p) ot_program_free(q);
        return rc;
    }
    m->prog = p;
    m->opt = q != p ? q : NULL;
    m->prog_batch = batch;
    return 0;
}

/* ---- fit -------------------------------------------------------------------- */

/* Whether x's shape is (rows, inputs) or (rows, the input shape...). */
static bool x_fits(const ot_model *m, ot_shape xs)
{
    if (xs.ndim == 2 && xs.dims[1] == m->inputs) return true;
    bool same = xs.ndim == m->in.ndim + 1;
    for (int d = 0; same && d < m->in.ndim; d++) same = xs.dims[d + 1] == m->in.dims[d];
    return same;
}

/* What x_fits takes, for errors: "(rows, 784)" or "(rows, 784) or (rows,
 * 1, 28, 28)". */
static const char *x_wanted(const ot_model *m, char *buf, size_t size)
{
    int k = snprintf(buf, size, "(rows, %lld)", (long long)m->inputs);
    if (m->in.ndim > 1) {
        k += snprintf(buf + k, size - (size_t)k, " or (rows");
        for (int d = 0; d < m->in.ndim; d++)
            k += snprintf(buf + k, size - (size_t)k, ", %lld", (long long)m->in.dims[d]);
        snprintf(buf + k, size - (size_t)k, ")");
    }
    return buf;
}

/* x (see x_fits) and y (rows, outputs), f32, with as many rows; an error
 * names the shapes and dtypes received. */
static int check_data(const ot_model *m, const ot_tensor *x, const ot_tensor *y, const ot__site *at)
{
    if (!x || !y) return FAIL(at, OT_ENULL, "%s is NULL", x ? "y" : "x");
    ot_shape xs = ot_tensor_shape(x), ys = ot_tensor_shape(y);
    int64_t outs = outputs(m);
    char s1[OT__SHAPE_STRLEN], s2[OT__SHAPE_STRLEN];
    ot__shape_str(&xs, s1);
    ot__shape_str(&ys, s2);
    if (ot_tensor_dtype(x) != OT_F32 || ot_tensor_dtype(y) != OT_F32)
        return FAIL(at, OT_EDTYPE, "x is %s and y %s; both must be float32",
                    ot_dtype_name(ot_tensor_dtype(x)), ot_dtype_name(ot_tensor_dtype(y)));
    char want[96];
    if (!x_fits(m, xs))
        return FAIL(at, OT_ESHAPE, "x has shape %s; must be %s", s1, x_wanted(m, want, sizeof want));
    if (ys.ndim != 2 || ys.dims[1] != outs)
        return FAIL(at, OT_ESHAPE, "y has shape %s; must be (rows, %lld)", s2, (long long)outs);
    if (xs.dims[0] != ys.dims[0])
        return FAIL(at, OT_ESHAPE, "x has shape %s and y %s: not as many rows", s1, s2);
    return 0;
}

static int check_fit(const ot_model *m, const ot_tensor *x, const ot_tensor *y,
                     const ot_fit_opts *o, const ot__site *at)
{
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (!m->nlayer) return FAIL(at, OT_ESTATE, "the model has no layers");
    if (!m->loss) return FAIL(at, OT_ESTATE, "the model has no loss");
    int rc = ot__backend_gone(m->be, at->fn, at->file, at->line, "the model");
    if (!rc) rc = check_data(m, x, y, at);
    if (rc) return rc;
    if (o->epochs < 1 || o->batch < 1)
        return FAIL(at, OT_EINVAL, "epochs and batch must be >= 1");
    for (int i = 0; i < m->nlayer; i++)
        if (m->layer[i].kind == L_BN && o->batch < 2)
            return FAIL(at, OT_EINVAL, "layer %d is a batch norm layer: training needs batch >= 2 "
                        "(one value per feature has no variance), not %d", i, o->batch);
    if (!(o->validation_split >= 0 && o->validation_split < 1))
        return FAIL(at, OT_EINVAL, "validation_split must be in [0, 1)");
    if (o->patience < 0 || o->monitor < OT_MONITOR_VAL_LOSS || o->monitor > OT_MONITOR_LOSS)
        return FAIL(at, OT_EINVAL, "patience must be >= 0 and monitor an OT_MONITOR_*");
    if (o->lr_schedule != OT_LR_CONSTANT && o->lr_schedule != OT_LR_COSINE)
        return FAIL(at, OT_EINVAL, "lr_schedule must be OT_LR_CONSTANT or "
                           "OT_LR_COSINE, not %d", o->lr_schedule);
    int64_t rows = ot_tensor_shape(x).dims[0];
    int64_t val = (int64_t)floor((double)rows * o->validation_split);
    /* A split that rounds down to no row would train on every row and
     * report val_loss NaN each epoch as if it validated (Keras refuses
     * such a split too). */
    if (o->validation_split > 0 && val == 0)
        return FAIL(at, OT_EINVAL, "validation_split %g of %lld rows holds no row: needs at "
                    "least 1 / %lld", o->validation_split, (long long)rows, (long long)rows);
    if (rows - val < o->batch)
        return FAIL(at, OT_EINVAL, "%lld training rows make no batch of %d",
                           (long long)(rows - val), o->batch);
    if (o->monitor != OT_MONITOR_LOSS && o->patience > 0 && val == 0)
        return FAIL(at, OT_EINVAL, "a validation metric needs validation_split > 0");
    if (o->monitor == OT_MONITOR_VAL_ACCURACY && outputs(m) < 2)
        return FAIL(at, OT_EINVAL, "accuracy needs two or more outputs");
    return 0;
}

static void shuffle(int64_t *order, int64_t n, uint64_t *s)
{
    for (int64_t i = n - 1; i > 0; i--) {
        int64_t j = (int64_t)(ot__model_splitmix(s) % (uint64_t)(i + 1));
        int64_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
}

static void gather(float *dst, const float *src, const int64_t *rows, int64_t n, int64_t width)
{
    for (int64_t r = 0; r < n; r++)
        memcpy(dst + r * width, src + rows[r] * width, sizeof *dst * (size_t)width);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Rows per forward evaluation outside training (validation, predict): about
 * 2^22 elements in the largest layer's output, so that a conv network on
 * thousands of images does not hold gigabytes of activations at once. */
static int64_t chunk_rows(const ot_model *m)
{
    int64_t widest = m->inputs;
    for (int i = 0; i < m->nlayer; i++) {
        int64_t n = ot__numel(&m->layer[i].out);
        if (n > widest) widest = n;
    }
    return widest < (1 << 22) ? (1 << 22) / widest : 1;
}

/* Loss (a float) and hit count (-1 without one) of the model on rows of host data. */
static int evaluate_chunk(const ot_model *m, const float *x, const float *y, int64_t rows,
                          float *loss, int32_t *hit_count)
{
    int64_t outs = outputs(m);
    ot_tensor *tx = (ot_array)(m->be, OT_SHAPE(rows, m->inputs), OT_F32, x);
    ot_tensor *ty = (ot_array)(m->be, OT_SHAPE(rows, outs), OT_F32, y);
    ot_pool *pool = tx && ty ? ot_pool_push() : NULL;
    int rc = pool ? 0 : ot_errcode();
    float l = NAN;
    int32_t h = -1;
    if (!rc) {
        ot_node *out = forward(m, ot_tensor_node(tx), NULL);
        ot_node *hits = hits_tree(m, out, ot_tensor_node(ty));
        ot_tensor *lt = (ot_eval)(loss_tree(m, out, ot_tensor_node(ty)));
        ot_tensor *ht = hits ? (ot_eval)(hits) : NULL;
        rc = lt && (ht || !hits) ? (ot_get)(lt, &l) : ot_errcode();
        if (!rc && ht) rc = (ot_get)(ht, &h);
        ot_tensor_free(lt);
        ot_tensor_free(ht);
    }
    if (pool) ot_pool_pop(pool);
    ot_tensor_free(tx);
    ot_tensor_free(ty);
    *loss = l;
    *hit_count = h;
    return rc;
}

/* Loss and accuracy (NaN without one) of the model on rows of host data,
 * in chunks of chunk_rows: the loss is their losses' mean weighted by rows. */
static int evaluate(const ot_model *m, const float *x, const float *y, int64_t rows, double *loss,
                    double *acc)
{
    int64_t chunk = chunk_rows(m), outs = outputs(m), hits = 0;
    double sum = 0;
    int rc = 0;
    for (int64_t r = 0; r < rows && !rc; r += chunk) {
        int64_t n = rows - r < chunk ? rows - r : chunk;
        float l;
        int32_t h;
        rc = evaluate_chunk(m, x + r * m->inputs, y + r * outs, n, &l, &h);
        sum += (double)l * (double)n;
        hits = h >= 0 && hits >= 0 ? hits + h : -1;
    }
    *loss = sum / (double)rows;
    *acc = hits >= 0 ? (double)hits / (double)rows : NAN;
    return rc;
}

typedef struct fit_state {
    float *x, *y, *xb, *yb;
    int64_t *order;
    uint64_t drop_rng, aug_rng;   /* dropout's masks, augment's seeds */
    ot_augment_fn augment;
    void *augment_user;
    int schedule;                 /* OT_LR_* */
    int64_t step, steps;          /* this fit's step count so far, planned */
    const ot__site *at;           /* the fit's call */
} fit_state;

/* The schedule's factor on lr for the next step, into the tensor the
 * program reads. */
static int set_lr_scale(const ot_model *m, fit_state *s)
{
    double k = (double)s->step++, f = 1;
    if (s->schedule == OT_LR_COSINE) f = 0.5 * (1 + cos(3.141592653589793 * k / (double)s->steps));
    return (ot_set)(m->lr_scale, &f);
}

static void state_free(fit_state *s)
{
    free(s->x);
    free(s->y);
    free(s->xb);
    free(s->yb);
    free(s->order);
}

/* The user's augmentation of the batch gathered in s->xb, if any. */
static int augment(const ot_model *m, fit_state *s, int batch)
{
    if (!s->augment) return 0;
    uint64_t seed = ot__model_splitmix(&s->aug_rng);
    int rc = s->augment(s->xb, batch, &m->in, seed, s->augment_user);
    if (!rc) return 0;
    return FAIL(s->at, OT_EINVAL, "the augment callback returned %d at step %lld", rc,
                (long long)s->step + 1);
}

/* After a step whose update ran (f16's scaler skips some): Adam's moments
 * took one more update, and so does each layer's t, which the program
 * counts too while it lives and a rebuilt one starts from. */
static void count_update(ot_model *m)
{
    for (int i = 0; m->adam && i < m->nlayer; i++) m->layer[i].adam_t++;
}

/* One epoch over the training rows in a new order: full batches only, so
 * every step has the program's shape (the rows left over are in other
 * batches next epoch). */
static int epoch(ot_model *m, fit_state *s, int64_t train, int batch, bool shuffled,
                 uint64_t *seed, double *loss, double *acc)
{
    int64_t outs = outputs(m), steps = train / batch, right = 0;
    if (shuffled) shuffle(s->order, train, seed);
    double sum = 0;
    int rc = 0;
    for (int64_t k = 0; k < steps && !rc; k++) {
        gather(s->xb, s->x, s->order + k * batch, batch, m->inputs);
        gather(s->yb, s->y, s->order + k * batch, batch, outs);
        rc = augment(m, s, batch);
        if (!rc) rc = set_lr_scale(m, s);
        ot_bind b[2 + OT_MODEL_MAX_LAYERS] = {
            OT_BIND_DATA("x", s->xb, sizeof *s->xb * (size_t)(batch * m->inputs)),
            OT_BIND_DATA("y", s->yb, sizeof *s->yb * (size_t)(batch * outs))};
        int nb = 2 + ot__model_drop_masks(m, batch, &s->drop_rng, b + 2);
        int64_t skipped = m->ls.skipped;
        if (!rc) rc = ot_program_run_at(m->prog, nb, b, s->at->file, s->at->line);
        if (!rc) rc = ot__model_scaler_step(m, s->at);
        rc = fit_error(rc, s->at);
        if (!rc && m->ls.skipped == skipped) count_update(m);
        float l = 0;
        int32_t h = 0;
        if (!rc) rc = (ot_get)(m->loss_t, &l);
        if (!rc && outs > 1) rc = (ot_get)(m->hits_t, &h);
        sum += l;
        right += h;
    }
    *loss = sum / (double)steps;
    *acc = outs > 1 ? (double)right / (double)(steps * batch) : NAN;
    return rc;
}

static const char *const monitor_names[] = {"val_loss", "val_accuracy", "loss"};   /* OT_MONITOR_* */

static double monitored(const ot_fit_opts *o, const ot_fit_result *r)
{
    if (o->monitor == OT_MONITOR_LOSS) return r->loss;
    if (o->monitor == OT_MONITOR_VAL_ACCURACY) return -r->val_accuracy;
    return r->val_loss;
}

static void progress(FILE *f, int e, const ot_fit_opts *o, const ot_fit_result *r, double rate)
{
    fprintf(f, "epoch %d/%d: loss %.4f", e, o->epochs, r->loss);
    if (!isnan(r->accuracy)) fprintf(f, ", accuracy %.2f%%", 100 * r->accuracy);
    if (o->validation_split > 0) {
        fprintf(f, ", val_loss %.4f", r->val_loss);
        if (!isnan(r->val_accuracy)) fprintf(f, ", val_accuracy %.2f%%", 100 * r->val_accuracy);
    }
    fprintf(f, ", %.0f samples/s\n", rate);
}

static int load_data(const ot_model *m, const ot_tensor *x, const ot_tensor *y, int64_t rows,
                     int batch, fit_state *s)
{
    int64_t outs = outputs(m);
    s->x = ot__malloc(sizeof *s->x * (size_t)(rows * m->inputs));
    s->y = ot__malloc(sizeof *s->y * (size_t)(rows * outs));
    s->xb = ot__malloc(sizeof *s->xb * (size_t)(batch * m->inputs));
    s->yb = ot__malloc(sizeof *s->yb * (size_t)(batch * outs));
    s->order = ot__malloc(sizeof *s->order * (size_t)rows);
    if (!s->x || !s->y || !s->xb || !s->yb || !s->order) return nomem(s->at);
    for (int64_t i = 0; i < rows; i++) s->order[i] = i;
    int rc = (ot_get)(x, s->x);
    return rc ? rc : (ot_get)(y, s->y);
}

int ot_model_fit_at(ot_model *m, const ot_tensor *x, const ot_tensor *y, const ot_fit_opts *opts,
                    ot_fit_result *result, const char *file, int line)
{
    const ot__site at = {"model_fit", file, line};
    ot_fit_opts o = opts ? *opts : (ot_fit_opts){0};
    if (!o.epochs) o.epochs = 1;
    if (!o.batch) o.batch = 32;
    int rc = check_fit(m, x, y, &o, &at);
    if (rc) return rc;
    int64_t rows = ot_tensor_shape(x).dims[0];
    int64_t val = (int64_t)floor((double)rows * o.validation_split), train = rows - val;
    if (!m->loss_t) m->loss_t = (ot_empty)(m->be, OT_SHAPE(), OT_F32);
    if (!m->hits_t) m->hits_t = (ot_empty)(m->be, OT_SHAPE(), OT_I32);
    if (!m->lr_scale) m->lr_scale = (ot_empty)(m->be, OT_SHAPE(), OT_F64);
    if (!m->loss_t || !m->hits_t || !m->lr_scale) return fit_error(ot_errcode(), &at);
    fit_state s = {.schedule = o.lr_schedule, .steps = (int64_t)o.epochs * (train / o.batch),
                   .at = &at, .drop_rng = o.seed ^ 0x6a09e667f3bcc908ULL,
                   .aug_rng = o.seed ^ 0xbb67ae8584caa73bULL, .augment = o.augment,
                   .augment_user = o.augment_user};
    rc = load_data(m, x, y, rows, o.batch, &s);
    if (!rc && (!m->prog || m->prog_batch != o.batch))
        rc = fit_error(build_program(m, o.batch, &at), &at);
    int64_t outs = outputs(m);
    uint64_t seed = o.seed;
    ot_fit_result r = {.val_loss = NAN, .val_accuracy = NAN}, best = r;
    double best_value = INFINITY;
    int since_best = 0;
    FILE *log = o.log ? o.log : stdout;
    for (int e = 1; e <= o.epochs && !rc; e++) {
        double t0 = now_s();
        rc = epoch(m, &s, train, o.batch, !o.no_shuffle, &seed, &r.loss, &r.accuracy);
        double rate = (double)(train / o.batch * o.batch) / (now_s() - t0);
        if (!rc && val)
            rc = evaluate(m, s.x + train * m->inputs, s.y + train * outs, val, &r.val_loss,
                          &r.val_accuracy);
        if (rc) break;
        r.epochs_run = e;
        if (!o.quiet) progress(log, e, &o, &r, rate);
        double v = monitored(&o, &r);
        if (v < best_value) {
            best_value = v;
            best = r;
            best.best_epoch = e;
            since_best = 0;
        } else if (o.patience && ++since_best >= o.patience) {
            if (!o.quiet)
                fprintf(log, "early stop: no better %s for %d epochs (best: epoch %d)\n",
                        monitor_names[o.monitor], o.patience, best.best_epoch);
            break;
        }
    }
    state_free(&s);
    if (result) {
        *result = r;
        result->best_epoch = best.best_epoch;
    }
    return rc;
}

int ot_model_compute_dtype_at(ot_model *m, ot_dtype dtype, const char *file, int line)
{
    const ot__site site = {"model_compute_dtype", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (dtype != OT_F32 && dtype != OT_BF16 && dtype != OT_F16)
        return FAIL(at, OT_EDTYPE, "the compute dtype must be float32, bfloat16 or float16, not %s",
                    ot_dtype_name(dtype) ? ot_dtype_name(dtype) : "unknown");
    if (dtype != m->compute) drop_program(m);
    m->compute = dtype;
    return 0;
}

ot_tensor *ot_model_predict_at(const ot_model *m, const ot_tensor *x, const char *file, int line)
{
    const ot__site site = {"model_predict", file, line}, *at = &site;
    if (!m || !x) {
        FAIL(at, OT_ENULL, "%s is NULL", m ? "x" : "model");
        return NULL;
    }
    if (!m->nlayer) {
        FAIL(at, OT_ESTATE, "the model has no layers");
        return NULL;
    }
    if (ot__backend_gone(m->be, at->fn, file, line, "the model")) return NULL;
    if (ot_tensor_backend(x) != m->be) {
        FAIL(at, OT_EBACKEND, "x is on backend '%s', the model on %s '%s'",
             ot_backend_name(ot_tensor_backend(x)),
             strcmp(ot_backend_name(ot_tensor_backend(x)), ot_backend_name(m->be)) ? "backend"
                                                                                 : "another",
             ot_backend_name(m->be));
        return NULL;
    }
    ot_shape xs = ot_tensor_shape(x);
    if (ot_tensor_dtype(x) != OT_F32 || !x_fits(m, xs)) {
        char s1[OT__SHAPE_STRLEN], want[96];
        FAIL(at, ot_tensor_dtype(x) != OT_F32 ? OT_EDTYPE : OT_ESHAPE, "x is %s of shape %s; must "
             "be float32 %s", ot_dtype_name(ot_tensor_dtype(x)), ot__shape_str(&xs, s1),
             x_wanted(m, want, sizeof want));
        return NULL;
    }
    ot_pool *pool = ot_pool_push();
    if (!pool) return NULL;
    int64_t rows = xs.dims[0], chunk = chunk_rows(m);
    ot_tensor *out = rows <= chunk ? (ot_eval)(forward(m, ot_tensor_node((ot_tensor *)x), NULL))
                                   : (ot_empty)(m->be, OT_SHAPE(rows, outputs(m)), OT_F32);
    for (int64_t r = 0; out && rows > chunk && r < rows; r += chunk) {
        ot_index span = OT_RANGE(r, r + chunk < rows ? r + chunk : rows);
        ot_tensor *xr = ot_slice(x, span), *o = ot_slice(out, span);
        int rc = xr && o ? ot_assign(o, forward(m, ot_tensor_node(xr), NULL)) : ot_errcode();
        ot_tensor_free(xr);
        ot_tensor_free(o);
        if (rc) {
            ot_tensor_free(out);
            out = NULL;
        }
    }
    ot_pool_pop(pool);
    return out;
}

int ot_model_parameters_at(const ot_model *m, int n, ot_tensor *out[], const char *file, int line)
{
    const ot__site site = {"model_parameters", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (n < 0) return FAIL(at, OT_EINVAL, "negative count %d", n);
    if (n > 0 && !out) return FAIL(at, OT_ENULL, "out is NULL");
    ot_tensor *w[2 * OT_MODEL_MAX_LAYERS];
    int count = param_slots(m, w, NULL, NULL);
    for (int i = 0; i < count && i < n; i++) out[i] = w[i];
    return count;
}

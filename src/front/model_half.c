/*
 * model_half.c - ot_model's mixed precision with f16 (issue 36): dynamic
 * loss scaling as PyTorch's GradScaler does it. The training program
 * takes the gradients of loss*scale, unscales them in f32 and flags
 * whether all are finite; the optimizer is a program of its own, run only
 * then, so that an overflowing step is skipped whole; the scale halves on
 * a skip and doubles after growth_interval good steps. model.c casts at
 * the layer boundaries and builds the programs.
 */
#include "model.h"

#include <math.h>

/* The scale and its inverse into the tensors the program reads. */
static int put_scale(const ot_model *m)
{
    float s = (float)m->ls.scale, inv = (float)(1 / m->ls.scale);
    int rc = (ot_set)(m->scale_t, &s);
    return rc ? rc : (ot_set)(m->unscale_t, &inv);
}

ot_program *ot__model_scaler_new(ot_model *m, const char *f, int ln)
{
    ot_tensor **t[3] = {&m->scale_t, &m->unscale_t, &m->finite_t};
    for (int i = 0; i < 3; i++)
        if (!*t[i] && !(*t[i] = (ot_empty)(m->be, OT_SHAPE(), OT_F32))) return NULL;
    return put_scale(m) ? NULL : ot_program_new_at(m->be, f, ln);
}

/* One step that unscales the gradients (in f32) and writes into finite_t
 * the sum of every gradient times 0: 0 when all are finite, else NaN. */
int ot__model_unscale_step(const ot_model *m, ot_program *p, int n, ot_tensor *g[], const char *f,
                           int ln)
{
    ot_tensor *outs[2 * OT_MODEL_MAX_LAYERS + 1];
    ot_node *trees[2 * OT_MODEL_MAX_LAYERS + 1], *flag = ot_constf(0);
    for (int i = 0; i < n; i++) {
        outs[i] = g[i];
        trees[i] = ot_mul(g[i], m->unscale_t);
        flag = ot_add(flag, ot_sum(ot_mul(g[i], 0.0f)));
    }
    outs[n] = m->finite_t;
    trees[n] = flag;
    return ot_program_assign_many_at(p, n + 1, outs, trees, f, ln);
}

/* After the gradients' program ran: the optimizer's step when every
 * gradient was finite (and the scale doubled after growth_interval of
 * them in a row), else no step and half the scale. The scale stays within
 * 2^-64..2^64 (a scale of inf could never shrink again). */
int ot__model_scaler_step(ot_model *m, const ot__site *at)
{
    if (!m->opt) return 0;
    float flag;
    int rc = (ot_get)(m->finite_t, &flag);
    if (rc) return rc;
    double old = m->ls.scale;
    if (flag == 0) {
        rc = ot_program_run_at(m->opt, 0, NULL, at->file, at->line);
        if (++m->good >= m->ls.growth_interval) {
            m->good = 0;
            m->ls.scale = fmin(2 * m->ls.scale, 0x1p64);
        }
    } else {
        m->ls.skipped++;
        m->good = 0;
        m->ls.scale = fmax(0.5 * m->ls.scale, 0x1p-64);
    }
    return rc || m->ls.scale == old ? rc : put_scale(m);
}

int ot_model_loss_scale_at(ot_model *m, const ot_loss_scale *set, ot_loss_scale *get,
                           const char *file, int line)
{
    const ot__site site = {"model_loss_scale", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (set && (!(set->scale >= 0) || set->scale > 0x1p64 || set->growth_interval < 0))
        return FAIL(at, OT_EINVAL, "scale must be in [0, 2^64] (0: 65536) and growth_interval "
                    ">= 0 (0: 2000), not %g and %d", set->scale, set->growth_interval);
    int rc = 0;
    if (set) {
        m->ls.scale = set->scale > 0 ? set->scale : 65536;
        m->ls.growth_interval = set->growth_interval ? set->growth_interval : 2000;
        m->good = 0;
        if (m->scale_t) rc = put_scale(m);
    }
    if (get) *get = m->ls;
    return rc;
}

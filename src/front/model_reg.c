/*
 * model_reg.c - ot_model's dropout layer: zeroes each value of its input
 * with probability `rate` while fit trains, scaling the rest by
 * 1/(1 - rate) so a value's expectation is unchanged ("inverted" dropout,
 * Srivastava et al., 2014), and passes its input on unchanged in predict
 * and validation.
 *
 * The masks are drawn on the host and bound as placeholders of the
 * training program, one per dropout layer: a program's trees are fixed at
 * compile time, and an ot_rand node draws the same values at every run,
 * so a mask that changes each step has to come in as data. Drawing a
 * batch's mask costs one splitmix64 per value, small beside the step's
 * convolutions (64 x 256 values behind a dense layer of 256).
 */
#include "model.h"

#include <stdio.h>
#include <stdlib.h>

uint64_t ot__model_splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Keeps the shape: a sample of any shape, flat or (channels, spatial...). */
int ot_model_dropout_at(ot_model *m, double rate, const char *file, int line)
{
    const ot__site site = {"model_dropout", file, line}, *at = &site;
    if (!m) return FAIL(at, OT_ENULL, "model is NULL");
    if (!(rate >= 0 && rate < 1))
        return FAIL(at, OT_EINVAL, "rate must be in [0, 1), not %g", rate);
    layer l = {.kind = L_DROP, .out = ot__model_in_shape(m, m->nlayer), .rate = rate};
    return ot__model_add(m, &l, OT_SHAPE(), 0, 0, at);
}

int ot__model_drop_placeholders(ot_model *m, ot_program *p, int64_t batch, const ot__site *at)
{
    for (int i = 0; i < m->nlayer; i++) {
        layer *l = &m->layer[i];
        if (l->kind != L_DROP) continue;
        ot_shape s = {.ndim = l->out.ndim + 1, .dims = {batch}};
        for (int d = 0; d < l->out.ndim; d++) s.dims[d + 1] = l->out.dims[d];
        free(l->mask_host);
        l->mask_host = ot__malloc(sizeof *l->mask_host * (size_t)(batch * ot__numel(&l->out)));
        if (!l->mask_host) return FAIL(at, OT_ENOMEM, "out of memory");
        snprintf(l->mask_name, sizeof l->mask_name, "drop%d", i);
        l->mask = ot_program_placeholder_at(p, l->mask_name, s, OT_F32, at->file, at->line);
        if (!l->mask) return ot_errcode();
    }
    return 0;
}

int ot__model_drop_masks(ot_model *m, int64_t batch, uint64_t *rng, ot_bind binds[])
{
    int n = 0;
    for (int i = 0; i < m->nlayer; i++) {
        layer *l = &m->layer[i];
        if (l->kind != L_DROP) continue;
        int64_t count = batch * ot__numel(&l->out);
        float keep = (float)(1 / (1 - l->rate));
        /* a value survives when a uniform draw in [0, 1) is >= rate */
        for (int64_t k = 0; k < count; k++) {
            double u = (double)(ot__model_splitmix(rng) >> 11) * 0x1p-53;
            l->mask_host[k] = u >= l->rate ? keep : 0.0f;
        }
        binds[n++] = OT_BIND_DATA(l->mask_name, l->mask_host,
                                  sizeof *l->mask_host * (size_t)count);
    }
    return n;
}

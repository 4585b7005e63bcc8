/*
 * model_io.c - ot_model's parameters on disk: ot_model_save and
 * ot_model_load write and read them (and batch norm layers' running
 * values) as NumPy's .npz through io.c's ot_savez/ot_loadz, named "w0",
 * "b0", ... per layer; a load checks every array before it copies any in.
 */
#include "model.h"

#include <stdio.h>

/* What the model stores, parameters and running values: up to 4 per layer. */
#define OT__MODEL_ARRAYS (4 * OT_MODEL_MAX_LAYERS)
typedef struct stored {
    int n;
    char names[OT__MODEL_ARRAYS][16];   /* a short word and any int */
    const char *np[OT__MODEL_ARRAYS];
    ot_tensor *t[OT__MODEL_ARRAYS];
} stored;

static void store(stored *s, const char *word, int i, ot_tensor *t)
{
    snprintf(s->names[s->n], sizeof s->names[s->n], "%s%d", word, i);
    s->np[s->n] = s->names[s->n];
    s->t[s->n++] = t;
}

/* "w0", "b0", "w1", ... per layer (W and b, or a batch norm's weight and
 * bias), and a batch norm layer's running "mean<i>" and "var<i>". */
static void stored_arrays(const ot_model *m, stored *s)
{
    s->n = 0;
    for (int i = 0; i < m->nlayer; i++) {
        const layer *l = &m->layer[i];
        if (!l->w) continue;   /* pooling */
        store(s, "w", i, l->w);
        store(s, "b", i, l->b);
        if (l->kind != L_BN) continue;
        store(s, "mean", i, l->rm);
        store(s, "var", i, l->rv);
    }
}

int ot_model_save_at(const ot_model *m, const char *path, const char *file, int line)
{
    const ot__site site = {"model_save", file, line}, *at = &site;
    if (!m || !path)
        return FAIL(at, OT_ENULL, "%s is NULL", m ? "path" : "model");
    stored s;
    stored_arrays(m, &s);
    int rc = ot_savez_at(path, s.n, s.np, (const ot_tensor *const *)s.t, file, line);
    return rc ? ot__err_relabel(rc, file, line, at->fn) : 0;   /* savez's, as the caller's */
}

/* Reads every parameter first and checks it against the model's own; only
 * then are they copied in, so a bad file leaves the model as it was. */
int ot_model_load_at(ot_model *m, const char *path, const char *file, int line)
{
    const ot__site site = {"model_load", file, line}, *at = &site;
    if (!m || !path) return FAIL(at, OT_ENULL, "%s is NULL", m ? "path" : "model");
    stored s;
    stored_arrays(m, &s);
    int n = s.n;
    const char *const *np = s.np;
    ot_tensor *const *p = s.t, *got[OT__MODEL_ARRAYS] = {0};
    int count = ot_loadz_at(m->be, path, n, np, got, file, line);
    if (count < 0) return ot__err_relabel(count, file, line, at->fn);   /* loadz's */
    int rc = count == n ? 0 : FAIL(at, OT_EINVAL, "%s holds %d arrays; the model "
                                          "stores %d", path, count, n);
    for (int i = 0; i < n && !rc; i++) {
        ot_shape want = ot_tensor_shape(p[i]), have = ot_tensor_shape(got[i]);
        bool same = ot_tensor_dtype(got[i]) == OT_F32 && want.ndim == have.ndim;
        for (int d = 0; same && d < want.ndim; d++) same = want.dims[d] == have.dims[d];
        char s1[OT__SHAPE_STRLEN], s2[OT__SHAPE_STRLEN];
        if (!same)   /* a dtype that differs is OT_EDTYPE (it was OT_ESHAPE whatever differed) */
            rc = FAIL(at, ot_tensor_dtype(got[i]) != OT_F32 ? OT_EDTYPE : OT_ESHAPE,
                      "%s: '%s' is %s of shape %s; the model's is float32 %s", path,
                      np[i], ot_dtype_name(ot_tensor_dtype(got[i])), ot__shape_str(&have, s1),
                      ot__shape_str(&want, s2));
    }
    for (int i = 0; i < n && !rc; i++) rc = ot_assign(p[i], got[i]);
    for (int i = 0; i < n; i++) ot_tensor_free(got[i]);
    return rc;
}

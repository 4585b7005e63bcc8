/*
 * exec_rows.c - the cpu backend's row runs: an elementwise kernel whose
 * generated code reads every input in place and writes its one output in
 * place, over rows of whole vectors, runs each run of whole rows as one
 * call of its code's fn_rows. That code takes each row's broadcasts (a
 * row's mean, and the ops computed from them before the loop: layer
 * norm's rsqrt(var + eps)) again and steps every pointer by its row's
 * stride; a call per row cost about 1,000 instructions a row in exec.c's
 * prelude and calls (rms norm's scale, 1024 columns, callgrind). The code
 * is the kernel's own body, so results are bitwise those of any other
 * walk. Also the streaming check that these runs and exec_tblock.c's
 * transposed blocks share.
 */
#include "exec.h"

bool ot__exec_row_runs(const ot_kernel *k)
{
    const ot_jit *jt = k->jit;
    if (!k->run_rows || !jt->fn_rows || k->ndim < 2 || jt->nout != 1 || !jt->out_vector[0])
        return false;
    int64_t lanes = jt->kt->vbytes / (jt->kd == OT_KD_F64 ? 8 : 4), inner = k->dims[k->ndim - 1];
    if (inner <= 0 || inner % lanes) return false;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (!jt->body[i] && !jt->pre[i] && in->code != OT_I_LOAD && in->code != OT_I_PARAM)
            return false;
    }
    return true;
}

bool ot__exec_rows_stream(const ot_kernel *k, char *const *val, char *const *out,
                          const int64_t *rs)
{
    const ot_jit *jt = k->jit;
    uintptr_t vb = (uintptr_t)jt->kt->vbytes;
    if (!jt->fn_rows_stream) return false;
    for (int q = 0; q < jt->nout; q++) {
        if ((uintptr_t)out[q] % vb || (uintptr_t)rs[1 + k->ninsn + q] % vb) return false;
        for (int i = 0; i < k->ninsn; i++)
            if (!jt->body[i] && k->insns[i].code == OT_I_LOAD && val[i] == out[q]) return false;
    }
    return true;
}

void ot__exec_rows_args(const run_ctx *c, int64_t o, int64_t j, int64_t rows, char **val,
                        char **out, int64_t *rs, double *one)
{
    const ot_kernel *k = c->k;
    const ot_jit *jt = k->jit;
    int nd = k->ndim;
    rs[0] = rows;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        rs[1 + i] = 0;
        if (jt->body[i] || jt->pre[i]) continue;
        if (in->code == OT_I_PARAM) {
            val[i] = (char *)&one[i];
            ot__store(val[i], ot__kd_dtype(in->kd), c->param[in->arg]);
            continue;
        }
        const ot_view *v = &k->loads[in->arg];
        int64_t es = (int64_t)ot__esize(v->dtype);
        val[i] = c->base[in->arg] + view_offset(k, v, o, j) * es;
        rs[1 + i] = v->strides[nd - 2] * es;
    }
    for (int q = 0; q < jt->nout; q++) {
        const ot_view *v = q ? &k->xstores[q - 1].view : &k->store;
        int64_t es = (int64_t)ot__esize(v->dtype);
        out[q] = (q ? c->xstore[q - 1] : c->store) + view_offset(k, v, o, j) * es;
        rs[1 + k->ninsn + q] = v->strides[nd - 2] * es;
    }
}

void ot__exec_row_run(const run_ctx *c, int64_t o, int64_t rows)
{
    const ot_jit *jt = c->k->jit;
    char *val[OT_JIT_MAX_INSN], *out[1];
    int64_t rs[2 + OT_JIT_MAX_INSN];
    double one[OT_JIT_MAX_INSN];
    ot__exec_rows_args(c, o, 0, rows, val, out, rs, one);
    bool stream = ot__exec_rows_stream(c->k, val, out, rs);
    size_t bytes = (size_t)c->inner * (jt->kd == OT_KD_F64 ? 8 : 4);
    (stream ? jt->fn_rows_stream : jt->fn_rows)(val, out, bytes, rs);
}

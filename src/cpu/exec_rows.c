/*
 * exec_rows.c - the cpu backend's row calls: an elementwise kernel whose
 * generated code reads every input in place and writes its one output in
 * place runs each row's tiles as one call of its code, and each run of
 * whole rows as one call of fn_rows. That code takes each row's broadcasts
 * (a row's mean, and the ops computed from them before the loop: layer
 * norm's rsqrt(var + eps)) again, steps every pointer by its row's stride
 * and ends a row that is not whole vectors under a mask; a call per row
 * cost about 1,000 instructions a row in exec.c's prelude and calls (rms
 * norm's scale, 1024 columns, callgrind). The code is the kernel's own
 * body, so results are bitwise those of any other walk. Also fn_rows'
 * arguments and the streaming check that exec_tblock.c's transposed blocks
 * and exec_reduce.c's row reductions share.
 */
#include "exec.h"

/* Every value the code does not compute is a load (stepped per row) or
 * the same for every row: a parameter, or an op of such (W10's 1/count,
 * cast, which exec computes once a call). */
bool ot__exec_rows_in_place(const ot_kernel *k)
{
    const ot_jit *jt = k->jit;
    bool fixed[OT_JIT_MAX_INSN];
    if (k->dims[k->ndim - 1] <= 0) return false;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        fixed[i] = in->code == OT_I_PARAM;
        if (ot__jit_computes(jt, i) || in->code == OT_I_LOAD || fixed[i]) continue;
        for (int o = 0; o < 3; o++)
            if (jt->arg[i][o] >= 0 && !fixed[jt->arg[i][o]]) return false;
        fixed[i] = true;
    }
    return true;
}

/* fn_rows is built for such a kernel only over rows (ndim >= 2) with one
 * output (jit.c's runs_rows). */
bool ot__exec_row_runs(const ot_kernel *k)
{
    return k->run_rows && k->jit->fn_rows && k->jit->out_vector[0] && ot__exec_rows_in_place(k);
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
        if (ot__jit_computes(jt, i)) continue;
        if (in->code != OT_I_LOAD) {
            ot__exec_scalar_value(c, i, val, one);
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

/* Rows o..o+rows-1, within one run of dims[nd-2], as one call. */
static void row_run(const run_ctx *c, int64_t o, int64_t rows)
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

/* Whether a kernel's generated code can run several tiles of a row as one
 * call: it reads every input in place (contiguous or one value) and writes
 * its one output directly, so no tile-sized scratch is involved. */
bool ot__exec_spans_tiles(const ot_kernel *k)
{
    if (!k->jit || k->kind != OT_KER_EW || k->col_blocked || !k->direct_store || k->nxstore)
        return false;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code != OT_I_LOAD || (in->scalar & 8)) continue;
        if (!k->ndim || k->loads[in->arg].strides[k->ndim - 1] != 1) return false;
    }
    return true;
}

/* Whole rows from tile t on (t starting a row) that a kernel with row_runs
 * runs as one call: those within first..last-1 and within t's run of
 * dims[nd-2] (row steps are constant there); 0 where t starts no row. */
static int64_t whole_rows(const run_ctx *c, int64_t t, int64_t last)
{
    const ot_kernel *k = c->k;
    if (!k->row_runs || t % c->tiles_per_row) return 0;
    int64_t o = t / c->tiles_per_row, rows = (last - t) / c->tiles_per_row;
    int64_t d = k->dims[k->ndim - 2], left = d - o % d;
    return rows < left ? rows : left;
}

/* Tiles first..last-1 of a kernel that spans_tiles, each row's run of them
 * as one call, and runs of whole rows as one (whole_rows): a call per tile
 * cost W2 1.5% beside one call per row (one thread gets every chunk at
 * once; elementwise values do not depend on where the calls cut). */
void ot__exec_ew_rows(run_ctx *c, scratch *s, int64_t first, int64_t last)
{
    size_t es = ot__esize((ot_dtype)c->k->store.dtype);
    for (int64_t t = first; t < last;) {
        int64_t whole = whole_rows(c, t, last);
        if (whole) {
            row_run(c, t / c->tiles_per_row, whole);
            t += whole * c->tiles_per_row;
            continue;
        }
        int64_t o = t / c->tiles_per_row, jt = t % c->tiles_per_row;
        int64_t end = (o + 1) * c->tiles_per_row < last ? (o + 1) * c->tiles_per_row : last;
        int64_t j = jt * c->tile, stop = (end - o * c->tiles_per_row) * c->tile;
        int64_t n = (stop < c->inner ? stop : c->inner) - j;
        char *dst = c->store + view_offset(c->k, &c->k->store, o, j) * (int64_t)es;
        ot__exec_run_with_extras(c, s, o, j, n, dst);
        t = end;
    }
}

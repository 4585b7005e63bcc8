/*
 * plan_emit.c - register programs: the region of a kernel -> instructions.
 *
 * Takes the fused entries (canon, mat, storage) and a kernel whose space
 * and store views are set. mark_region collects the entries the kernel
 * computes inline (elementwise values not materialised), add_loads gives
 * each stored input a load, coalesce merges the dims every view walks as
 * one, and the entries are emitted in entry order as SSA values with two
 * peepholes: a multiply read once folds into an add or subtract as fma or
 * fnma (AVX2 and AVX-512 only), and 1 / (1 + exp(-x)) becomes sig(x).
 * allocate_buffers then maps the values onto tile buffers by a linear scan.
 *
 * Guarantees to the kernel builders and exec.c: every instruction reads
 * buffers an earlier instruction wrote; load indices < nload, buffers <
 * nbuf; the result and each further output have a buffer that only their
 * defining instruction writes.
 */
#include "plan.h"
#include "ops.h"

/* A storage seen from an iteration space (right-aligned broadcast). */
ot_view ot__emit_view_of(const storage *s, int ndim, const int64_t *dims)
{
    ot_view v = {.space = s->space, .dtype = s->dtype, .index = s->index, .offset = s->offset};
    int off = ndim - s->shape.ndim;
    for (int i = 0; i < ndim; i++) {
        int j = i - off;
        v.strides[i] = j >= 0 && !(s->shape.dims[j] == 1 && dims[i] != 1) ? s->strides[j] : 0;
    }
    return v;
}

int ot__emit_insn(prog *g, ot_insn in, uint8_t kd, bool scalar)
{
    if (!grow((void **)&g->ins, &g->icap, g->nins + 1, sizeof *g->ins) ||
        !grow((void **)&g->v, &g->vcap, g->nv + 1, sizeof *g->v)) {
        g->c->oom = true;
        return -1;
    }
    in.dst = (int16_t)g->nv;
    in.kd = kd;
    if (scalar) in.scalar |= 8;
    g->ins[g->nins++] = in;
    g->v[g->nv] = (value){kd, scalar, -1, -1};
    return g->nv++;
}


int ot__emit_cast_to(prog *g, int v, uint8_t kd)
{
    if (v < 0 || g->v[v].kd == kd) return v;
    ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[v].kd, .a = (int16_t)ot__emit_use(g, v), .b = -1, .c = -1};
    bool s = g->v[v].scalar;
    in.scalar = s ? 1 : 0;
    return ot__emit_insn(g, in, kd, s);
}

static bool is_mul_for_fma(const prog *g, int e, uint8_t kd)
{
    const compiler *c = g->c;
    return e >= 0 && c->w->e[e].op == OT_OP_MUL && is_op(c, e) && !c->ci[e].mat &&
           c->ci[e].uses == 1 && ot__kd((ot_dtype)c->w->e[e].dtype) == kd && kd != OT_KD_I32 &&
           ot__isas[c->k->isa].fma;
}

static int operand_value(prog *g, int e, uint8_t kd) { return ot__emit_cast_to(g, g->val[e], kd); }

static int fma_mul_of(const prog *g, int e);


/* The insn arg of an op entry: its registered op's index for custom1 and
 * custom2 nodes, else 0. */
static int32_t op_arg(const compiler *c, int e)
{
    const ot_node *n = node_of(c, e);
    return n->custom ? n->custom->index : 0;
}

static int emit_op(prog *g, int e)
{
    compiler *c = g->c;
    const ent *x = &c->w->e[e];
    uint8_t kd = (uint8_t)ot__kd((ot_dtype)x->dtype);
    int a = canon_operand(c, e, 0), b = canon_operand(c, e, 1);
    if (x->op == OT_OP_KEEP) return g->val[a];   /* the identity: no insn */
    if (x->op == OT_OP_CAST) {
        int va = ot__emit_use(g, g->val[a]);
        ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[va].kd, .a = (int16_t)va, .b = -1, .c = -1,
                      .scalar = g->v[va].scalar ? 1 : 0};
        return ot__emit_insn(g, in, kd, g->v[va].scalar);
    }
    if (b < 0) {
        int va = ot__emit_use(g, operand_value(g, a, kd));
        ot_insn in = {.code = OT_I_UNARY, .op = (uint8_t)x->op, .a = (int16_t)va, .b = -1, .c = -1,
                      .scalar = g->v[va].scalar ? 1 : 0, .arg = op_arg(c, e)};
        return ot__emit_insn(g, in, kd, g->v[va].scalar);
    }
    int m = fma_mul_of(g, e);
    if (m >= 0) {
        int z = x->op == OT_OP_SUB || m != a ? a : b;
        int vx = operand_value(g, canon_operand(c, m, 0), kd);
        int vy = operand_value(g, canon_operand(c, m, 1), kd);
        int vz = operand_value(g, z, kd);
        ot__emit_use(g, vx), ot__emit_use(g, vy), ot__emit_use(g, vz);
        bool sx = g->v[vx].scalar, sy = g->v[vy].scalar, sz = g->v[vz].scalar;
        ot_insn in = {.code = OT_I_FMA, .op = (uint8_t)x->op, .a = (int16_t)vx, .b = (int16_t)vy,
                      .c = (int16_t)vz,
                      .scalar = (uint8_t)((sx ? 1 : 0) | (sy ? 2 : 0) | (sz ? 4 : 0))};
        return ot__emit_insn(g, in, kd, sx && sy && sz);
    }
    int va = operand_value(g, a, kd), vb = operand_value(g, b, kd);
    ot__emit_use(g, va), ot__emit_use(g, vb);
    bool sa = g->v[va].scalar, sb = g->v[vb].scalar;
    ot_insn in = {.code = OT_I_BINARY, .op = (uint8_t)x->op, .a = (int16_t)va, .b = (int16_t)vb,
                  .c = -1, .scalar = (uint8_t)((sa ? 1 : 0) | (sb ? 2 : 0)), .arg = op_arg(c, e)};
    return ot__emit_insn(g, in, kd, sa && sb);
}

/* An entry the region reads rather than computes. The root is computed
 * unless root_computed is false (a reduction over a stored value). */
static bool region_input(const compiler *c, int e, int root, bool root_computed)
{
    if (e == root) return !root_computed;
    return !is_ew(c, e) || c->ci[e].mat;
}

static int cmp_int(const void *a, const void *b)
{
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

/* Marks the region of root with g->id and lists its entries in entry order
 * (a topological order), so that work per kernel is linear in its region,
 * not in the whole tree. Returns false when out of memory. */
static bool mark_region(prog *g, const int *roots, int nroots, int root, bool root_computed)
{
    compiler *c = g->c;
    int sn = 0;
    g->nregion = 0;
    if (!grow((void **)&g->dfs, &g->dfscap, nroots, sizeof *g->dfs)) return false;
    for (int i = 0; i < nroots; i++) g->dfs[sn++] = roots[i];
    while (sn > 0) {
        int e = g->dfs[--sn];
        if (g->stamp[e] == g->id) continue;
        g->stamp[e] = g->id;
        g->val[e] = -1;
        if (!grow((void **)&g->region, &g->regioncap, g->nregion + 1, sizeof *g->region))
            return false;
        g->region[g->nregion++] = e;
        bool scalar_view = is_op(c, e) && kind_of(c, e) == OT_KIND_SHAPE && !c->ci[e].st.has;
        if (region_input(c, e, root, root_computed) && !scalar_view) continue;
        if (!grow((void **)&g->dfs, &g->dfscap, sn + 2, sizeof *g->dfs)) return false;
        for (int k = 0; k < 2; k++) {
            int o = canon_operand(c, e, k);
            if (o >= 0 && g->stamp[o] != g->id) g->dfs[sn++] = o;
        }
    }
    qsort(g->region, (size_t)g->nregion, sizeof *g->region, cmp_int);
    return true;
}

static bool reads_storage(const compiler *c, int e, int root, bool root_computed)
{
    return c->ci[e].st.has &&
           (region_input(c, e, root, root_computed) || c->w->e[e].kind == OT_NODE_LEAF);
}

/* Adds a load per stored input of the region (before coalescing, so every
 * view takes part in it). */
static bool add_loads(prog *g, int root, bool root_computed)
{
    compiler *c = g->c;
    ot_kernel *k = g->k;
    for (int r = 0; r < g->nregion; r++) {
        int e = g->region[r];
        if (c->ci[e].canon != e || !reads_storage(c, e, root, root_computed)) continue;
        ot_view *lv = ot__realloc(k->loads, sizeof *lv * (size_t)(k->nload + 1));
        if (!lv) return false;
        k->loads = lv;
        lv[k->nload] = ot__emit_view_of(&c->ci[e].st, k->ndim, k->dims);
        g->val[e] = -2 - k->nload++;   /* a pending load, emitted below */
    }
    return true;
}

/* The multiply an add (either operand) or a subtraction (the subtrahend:
 * c - a*b, an fnma) folds into; the same choice emit_op makes. */
static int fma_mul_of(const prog *g, int e)
{
    const compiler *c = g->c;
    int op = c->w->e[e].op;
    if ((op != OT_OP_ADD && op != OT_OP_SUB) || !is_op(c, e)) return -1;
    uint8_t kd = (uint8_t)ot__kd((ot_dtype)c->w->e[e].dtype);
    int a = canon_operand(c, e, 0), b = canon_operand(c, e, 1);
    if (op == OT_OP_ADD && is_mul_for_fma(g, a, kd) && g->stamp[a] == g->id) return a;
    if (is_mul_for_fma(g, b, kd) && g->stamp[b] == g->id) return b;
    return -1;
}

static void mark_fused(prog *g, int root, bool root_computed)
{
    for (int r = 0; r < g->nregion; r++) {
        int e = g->region[r];
        if (g->c->ci[e].canon != e || region_input(g->c, e, root, root_computed)) continue;
        int m = fma_mul_of(g, e);
        if (m >= 0) g->fused[m] = g->id;
    }
}

int ot__emit_load(prog *g, int load)
{
    const ot_kernel *k = g->k;
    bool scalar = k->ndim == 0 || k->loads[load].strides[k->ndim - 1] == 0;
    ot_insn in = {.code = OT_I_LOAD, .arg = load, .a = -1, .b = -1, .c = -1};
    return ot__emit_insn(g, in, (uint8_t)ot__kd((ot_dtype)k->loads[load].dtype), scalar);
}

/* Emits the region of roots in entry order (a topological order) after the
 * loads are coalesced: a value shared by several roots is computed once.
 * root is the one root that may be stored rather than computed (!root_computed),
 * or -1. */
void ot__emit_roots(prog *g, const int *roots, int nroots, int root, bool root_computed,
                       int *pinned)
{
    compiler *c = g->c;
    g->id++;
    if (!mark_region(g, roots, nroots, root, root_computed) || !add_loads(g, root, root_computed) ||
        !ot__emit_coalesce(g->k, pinned)) {
        c->oom = true;
        return;
    }
    mark_fused(g, root, root_computed);
    for (int r = 0; r < g->nregion && !c->oom; r++) {
        int e = g->region[r];
        if (c->ci[e].canon != e || g->fused[e] == g->id) continue;
        const ent *x = &c->w->e[e];
        if (g->val[e] <= -2) {
            g->val[e] = ot__emit_load(g, -2 - g->val[e]);
        } else if (x->kind == OT_NODE_CONST) {
            ot_insn in = {.code = OT_I_PARAM, .arg = x->slot, .a = -1, .b = -1, .c = -1};
            g->val[e] = ot__emit_insn(g, in, (uint8_t)ot__kd((ot_dtype)x->dtype), true);
        } else if (kind_of(c, e) == OT_KIND_SHAPE) {
            g->val[e] = g->val[canon_operand(c, e, 0)];   /* transposed scalar */
        } else {
            g->val[e] = emit_op(g, e);
        }
    }
}

/* Emits the region of one root; returns its value. */
int ot__emit_region(prog *g, int root, bool root_computed, int *pinned)
{
    ot__emit_roots(g, &root, 1, root, root_computed, pinned);
    return g->c->oom ? -1 : g->val[root];
}

static bool is_xresult(const prog *g, int v)
{
    for (int x = 0; x < g->k->nxstore; x++)
        if (g->xval[x] == v) return true;
    return false;
}

/* Linear scan: a value's buffer is free after its last use, so an insn may
 * write over an operand that dies there (kernels allow dst == operand). The
 * result, and each further output's value, gets a buffer of its own that
 * only its defining insn writes. */
static void allocate_buffers(prog *g, int result)
{
    int *free_list = ot__malloc(sizeof(int) * (size_t)(g->nv + 1));
    if (!free_list) {
        g->c->oom = true;
        return;
    }
    int nfree = 0, nbuf = 0;
    g->v[result].last_use = INT_MAX;
    for (int x = 0; x < g->k->nxstore; x++) g->v[g->xval[x]].last_use = INT_MAX;
    for (int i = 0; i < g->nins; i++) {
        ot_insn *in = &g->ins[i];
        int16_t *ops[3] = {&in->a, &in->b, &in->c};
        int dying[3], ndying = 0;
        for (int k = 0; k < 3; k++) {
            int v = *ops[k];
            if (v < 0) continue;
            *ops[k] = (int16_t)g->v[v].buf;
            bool dup = (k > 0 && *ops[0] == *ops[k]) || (k > 1 && *ops[1] == *ops[k]);
            if (g->v[v].last_use == i && !dup) dying[ndying++] = g->v[v].buf;
        }
        /* A cast that changes the element size cannot write over its operand. */
        bool resizes = in->code == OT_I_CAST &&
                       ot_dtype_size(ot__kd_dtype(in->kd)) != ot_dtype_size(ot__kd_dtype(in->kd_from));
        if (!resizes)
            for (int k = 0; k < ndying; k++) free_list[nfree++] = dying[k];
        int d = in->dst;
        bool own = d == result || is_xresult(g, d);
        int buf = own || nfree == 0 ? nbuf++ : free_list[--nfree];
        g->v[d].buf = buf;
        in->dst = (int16_t)buf;
        if (resizes)
            for (int k = 0; k < ndying; k++) free_list[nfree++] = dying[k];
        if (g->v[d].last_use < 0 && !own) free_list[nfree++] = buf;   /* dead value */
    }
    for (int x = 0; x < g->k->nxstore; x++) {
        g->k->xstores[x].result = g->v[g->xval[x]].buf;
        g->k->xstores[x].scalar = g->v[g->xval[x]].scalar;
    }
    g->k->nbuf = nbuf;
    g->k->result = g->v[result].buf;
    g->k->result_scalar = g->v[result].scalar;
    g->k->result_kd = g->v[result].kd;
    free(free_list);
}

/* Drops dims of size 1 and merges neighbours that every view walks as one,
 * never touching the pinned (reduced) dim, whose new index is returned
 * through *pinned. */
bool ot__emit_coalesce(ot_kernel *k, int *pinned)
{
    int nv = k->nload + 1 + k->nxstore, pin = pinned ? *pinned : -1, newpin = -1, nd = 0;
    ot_view **views = ot__malloc(sizeof *views * (size_t)nv);
    if (!views) return false;
    for (int i = 0; i < k->nload; i++) views[i] = &k->loads[i];
    views[k->nload] = &k->store;
    for (int x = 0; x < k->nxstore; x++) views[k->nload + 1 + x] = &k->xstores[x].view;
    bool prev_pinned = false;
    for (int i = 0; i < k->ndim; i++) {
        bool is_pin = i == pin;
        if (k->dims[i] == 1 && !is_pin) continue;
        bool merge = nd > 0 && !is_pin && !prev_pinned;
        for (int v = 0; v < nv && merge; v++)
            merge = views[v]->strides[nd - 1] == views[v]->strides[i] * k->dims[i];
        if (merge) {
            k->dims[nd - 1] *= k->dims[i];
            for (int v = 0; v < nv; v++) views[v]->strides[nd - 1] = views[v]->strides[i];
            continue;
        }
        k->dims[nd] = k->dims[i];
        for (int v = 0; v < nv; v++) views[v]->strides[nd] = views[v]->strides[i];
        if (is_pin) newpin = nd;
        prev_pinned = is_pin;
        nd++;
    }
    k->ndim = nd;
    if (pinned) *pinned = newpin;
    free(views);
    return true;
}

/* ---- finishing a program -------------------------------------------------- */

bool ot__emit_finish_program(prog *g, int result)
{
    ot_kernel *k = g->k;
    if (g->c->oom || result < 0) return false;
    allocate_buffers(g, result);
    if (g->c->oom) return false;
    k->insns = ot__malloc(sizeof *k->insns * (size_t)(g->nins ? g->nins : 1));
    if (!k->insns) return false;
    memcpy(k->insns, g->ins, sizeof *k->insns * (size_t)g->nins);
    k->ninsn = g->nins;
    return true;
}

void ot__emit_reset_prog(prog *g, ot_kernel *k)
{
    g->k = k;
    g->nv = g->nins = 0;
}

/* The value to store, as a freshly computed buffer in the store's dtype. */
int ot__emit_store_value(prog *g, int v)
{
    if (v < 0) return v;
    v = ot__emit_cast_to(g, v, (uint8_t)ot__kd((ot_dtype)g->k->store.dtype));
    uint8_t code = g->ins[g->nins - 1].code;
    if (g->nins > 0 && g->ins[g->nins - 1].dst == v && code != OT_I_LOAD && code != OT_I_PARAM)
        return v;
    ot_insn in = {.code = OT_I_CAST, .kd_from = g->v[v].kd, .a = (int16_t)ot__emit_use(g, v), .b = -1,
                  .c = -1, .scalar = g->v[v].scalar ? 1 : 0};
    return ot__emit_insn(g, in, g->v[v].kd, g->v[v].scalar);
}

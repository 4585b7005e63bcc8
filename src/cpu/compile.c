/*
 * compile.c - the cpu backend's compiler driver: a walk -> a plan of kernels.
 *
 * compile runs the passes (plan.h lists them; each file's top comment is
 * its contract) and, when the backend generates code, jit.c on the
 * elementwise kernels; with -DOT_VERIFY_PLANS plan_verify.c checks the
 * invariants between passes. This file also keeps what a plan says about
 * itself: the work it does (the cpu backend counts elem_ops the same way
 * fused and unfused, count_ops, so tests bound fusion's arithmetic), its
 * ot_explain text, with the time its walk and compile took. Below it,
 * plan_key.c finds and keeps plans; the driver here (ot__plan_get) looks a
 * plan up there, compiles it on a miss and hands it back to be kept.
 */
#include "plan.h"
#include "ops.h"

#include <time.h>

/* ---- the plan ------------------------------------------------------------- */

static uint64_t view_bytes(const ot_kernel *k, const ot_view *v)
{
    uint64_t n = ot_dtype_size((ot_dtype)v->dtype);
    for (int i = 0; i < k->ndim; i++)
        if (v->strides[i]) n *= (uint64_t)k->dims[i];
    return n;
}

/* The arithmetic of one run of k, the same way fused or not: an op counts
 * once per element it computes (a scalar insn once), an fma as the mul and
 * add it replaces, a reduction one step per element reduced, a GEMM
 * 2*M*N*K. So a plan's count against the unfused plan's bounds what fusion
 * recomputes. */
static uint64_t count_ops(const ot_kernel *k)
{
    if (k->kind == OT_KER_DOT) return 2 * (uint64_t)k->m * (uint64_t)k->n * (uint64_t)k->k * (uint64_t)k->batch;
    if (k->kind == OT_KER_RAND || k->kind == OT_KER_ONEHOT || k->kind == OT_KER_STRUCT ||
        k->kind == OT_KER_INDEX)
        return (uint64_t)ot__numel(&k->shape);
    if (k->kind == OT_KER_CONV) {   /* a multiply-add per tap of every S element */
        const ot__conv_geom *g = &k->conv;
        return 2 * (uint64_t)(g->n * g->groups * g->sc * g->xc) *
               (uint64_t)(g->sp[0] * g->sp[1] * g->sp[2] * g->k[0] * g->k[1] * g->k[2]);
    }
    if (k->kind == OT_KER_ATTN) {   /* QK^T and PV; the backward's five GEMMs */
        const ot__attn_geom *g = &k->attn;
        uint64_t f = 2 * (uint64_t)(g->b * g->h * g->sq * g->sk) * (uint64_t)(g->d + g->dv);
        return g->op == OT_OP_ATTENTION ? f : f * 5 / 2;
    }
    if (k->kind == OT_KER_POOL) {   /* a compare or add per tap of every window */
        const ot__pool_geom *g = &k->pool;
        return (uint64_t)(g->n * g->c) *
               (uint64_t)(g->out[0] * g->out[1] * g->out[2] * g->k[0] * g->k[1] * g->k[2]);
    }
    uint64_t elems = 1, ops = 0;
    for (int i = 0; i < k->ndim; i++) elems *= (uint64_t)k->dims[i];
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        uint64_t n = (in->scalar & 8) ? (elems != 0) : elems;   /* once, if it runs at all */
        if (in->code == OT_I_UNARY || in->code == OT_I_BINARY) ops += n;
        else if (in->code == OT_I_FMA) ops += 2 * n;
        else if (in->code == OT_I_CAST && in->kd != in->kd_from) ops += n;
    }
    return k->kind == OT_KER_REDUCE ? ops + elems : ops;
}

void ot__plan_count_work(ot_plan *p, const ot_kernel *k)
{
    p->elem_ops += count_ops(k);
    if (k->kind == OT_KER_DOT) {
        size_t es = ot_dtype_size((ot_dtype)k->store.dtype);
        p->bytes_read += (uint64_t)(k->m * k->k + k->k * k->n) * es;
        p->bytes_written += (uint64_t)(k->m * k->n) * es;
        return;
    }
    for (int i = 0; i < k->nload; i++)
        if (k->loads[i].space == OT_SPACE_LEAF) p->bytes_read += view_bytes(k, &k->loads[i]);
    if (k->store.space == OT_SPACE_OUT) p->bytes_written += view_bytes(k, &k->store);
    for (int x = 0; x < k->nxstore; x++) p->bytes_written += view_bytes(k, &k->xstores[x].view);
}

static const char *space_name(int s) { return s == OT_SPACE_LEAF ? "leaf" : s == OT_SPACE_TEMP ? "t" : "out"; }

/* A view as "t0", or "t0@4" when it starts 4 elements in: a slice of a
 * stored value, or the part of a concat a kernel writes. */
static void put_view(FILE *f, const char *pre, const ot_view *v)
{
    fprintf(f, "%s%s%d", pre, space_name(v->space), v->index);
    if (v->offset) fprintf(f, "@%lld", (long long)v->offset);
}

/* A windowed kernel (CONV, POOL): its op, shape, algorithm and views. */
static void describe_window(FILE *f, const ot_kernel *k)
{
    bool conv = k->kind == OT_KER_CONV;
    int op = conv ? k->conv_op : k->kind == OT_KER_POOL ? k->pool.op : k->index.op;
    fprintf(f, " %s [", ot_op_name((ot_op)op));
    for (int i = 0; i < k->shape.ndim; i++)
        fprintf(f, i ? "x%lld" : "%lld", (long long)k->shape.dims[i]);
    if (conv) {
        size_t tile;
        const char *algo = ot__conv_algo(k, &tile);
        fprintf(f, "] (%s, groups %lld", algo, (long long)k->conv.groups);
        bool wino = strncmp(algo, "winograd", 8) == 0;
        fprintf(f, !tile ? ")" : wino ? ", scratch %.1f KiB)" : ", im2col tile %.1f KiB)",
                (double)tile / 1024);
    } else if (k->kind == OT_KER_INDEX && k->beta.mul != 0)
        fprintf(f, "] (in place: indexed rows only, %s)",
                k->alpha.param >= 0 || k->alpha.mul != 1 ? "alpha" : "added");
    else
        fprintf(f, "] (direct)");
    for (int i = 0; i < k->nload; i++) put_view(f, i ? " " : " <- ", &k->loads[i]);
    put_view(f, " -> ", &k->store);
}

/* A one-line summary of what a kernel fuses, for ot_explain. */
char *ot__plan_describe(const ot_kernel *k)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    static const char *kinds[] = {"elementwise", "reduce", "dot", "rand", "onehot", "struct", "conv",
                                  "pool", "index", "attention"};
    fprintf(f, "%s", kinds[k->kind]);
    if (k->kind == OT_KER_STRUCT) fprintf(f, " %s", k->custom->name);
    if (k->kind == OT_KER_ATTN) {
        ot__attn_describe(f, k);
        for (int i = 0; i < k->nload; i++) put_view(f, i ? " " : " <- ", &k->loads[i]);
        put_view(f, " -> ", &k->store);
        fclose(f);
        return buf;
    }
    if (k->kind >= OT_KER_CONV) {   /* CONV, POOL, INDEX */
        describe_window(f, k);
        fclose(f);
        return buf;
    }
    if (k->kind == OT_KER_DOT) {
        const char *blas = k->n == 1 || k->m == 1 ? "gemv" : "gemm";
        if (k->batch != 1) fprintf(f, " %lld x", (long long)k->batch);
        fprintf(f, " %lldx%lld . %lldx%lld (%s%s%s)", (long long)k->m, (long long)k->k,
                (long long)k->k, (long long)k->n, blas,
                k->alpha.param >= 0 || k->alpha.mul != 1 ? ", alpha" : "",
                k->beta.mul != 0 ? ", beta: accumulates" : "");
        put_view(f, " <- ", &k->loads[0]);
        put_view(f, " ", &k->loads[1]);
        put_view(f, " -> ", &k->store);
        fclose(f);
        return buf;
    }
    if (k->kind == OT_KER_REDUCE)
        fprintf(f, " %s over %s", ot_op_name((ot_op)k->red_op),
                k->red_axis < 0 ? "all" : "one axis");
    fprintf(f, " [");
    for (int i = 0; i < k->ndim; i++) fprintf(f, i ? "x%lld" : "%lld", (long long)k->dims[i]);
    fprintf(f, "]:");
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->code == OT_I_UNARY || in->code == OT_I_BINARY)
            fprintf(f, " %s", ot__op_display_name(in->op, in->arg));
        else if (in->code == OT_I_FMA) fprintf(f, in->op == OT_OP_SUB ? " fnma" : " fma");
        else if (in->code == OT_I_CAST && in->kd != in->kd_from) fprintf(f, " cast");
    }
    fprintf(f, " <-");
    for (int i = 0; i < k->nload; i++) put_view(f, " ", &k->loads[i]);
    put_view(f, " -> ", &k->store);
    fprintf(f, "%s", k->direct_store ? " (direct)" : "");
    for (int x = 0; x < k->nxstore; x++) {
        put_view(f, ", ", &k->xstores[x].view);
        fprintf(f, "%s", k->xstores[x].direct ? " (direct)" : "");
    }
    fprintf(f, "%s", k->col_blocked ? " (column blocks)" : "");
    fclose(f);
    return buf;
}

/* Kernel i's place in a segment: 1 the epilogue, 2 a reduction joining it,
 * 0 neither; *dot is the segment's dot. Asked for i in order: *s walks the
 * segments (disjoint, in order) along. */
static int segment_role(const ot_plan *p, int i, int *s, int *dot)
{
    while (p->row_block <= 0 && *s < p->nseg && p->segs[*s].first + p->segs[*s].count <= i) ++*s;
    if (p->row_block > 0 || *s >= p->nseg || i <= p->segs[*s].first) return 0;
    *dot = p->segs[*s].first;
    return i - *dot;
}

/* The dot kernel whose result kernel i reads, or -1; dot_of: per temp, the
 * first dot kernel writing it (or -1). */
static int dot_read(const ot_plan *p, const int *dot_of, int i)
{
    const ot_kernel *k = &p->kernels[i];
    for (int l = 0; l < k->nload && k->kind != OT_KER_DOT; l++)
        if (k->loads[l].space == OT_SPACE_TEMP && dot_of[k->loads[l].index] >= 0 &&
            dot_of[k->loads[l].index] < i)
            return dot_of[k->loads[l].index];
    return -1;
}

/* Per temp, the first dot kernel writing it, or -1; NULL without memory. */
static int *dots_of_temps(const ot_plan *p)
{
    int *dot_of = ot__malloc(sizeof(int) * (size_t)(p->ntemps + 1));
    for (int t = 0; dot_of && t < p->ntemps; t++) dot_of[t] = -1;
    for (int w = 0; dot_of && w < p->nkernels; w++) {
        const ot_kernel *d = &p->kernels[w];
        if (d->kind == OT_KER_DOT && d->store.space == OT_SPACE_TEMP && dot_of[d->store.index] < 0)
            dot_of[d->store.index] = w;
    }
    return dot_of;
}

/* The leaves whose next block of rows k's generated code prefetches
 * (ot__sched_prefetches). */
static void explain_prefetch(const ot_kernel *k, FILE *f)
{
    if (!k->jit || !k->jit->npf) return;
    fputs(" (prefetches the next block of", f);
    for (int i = 0; i < k->jit->npf; i++) {
        const ot_insn *in = &k->insns[k->jit->pf_val[i]];
        fprintf(f, "%s leaf%d", i ? "," : "", (int)k->loads[in->arg].index);
    }
    fputc(')', f);
}

/* The accuracy of k's inexact ops, each once: the SLEEF accuracy the
 * table uses at the plan's setting ("tanh u10"), or the library's own
 * function's ("sig u35"; its row's u10/u35 column where it names one: exp
 * is u10 at both). Exact ops (correctly rounded, bitwise NumPy's) are not
 * listed. */
static void explain_accuracy(const ot_kernel *k, int acc, FILE *f)
{
    bool seen[OT_OP_COUNT] = {false}, any = false;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        const ot_opinfo *o = in->code == OT_I_UNARY || in->code == OT_I_BINARY ? ot__op(in->op) : NULL;
        if (!o || seen[in->op] || (o->vec != OT__VEC_SLEEF && o->vec != OT__VEC_ACC)) continue;
        seen[in->op] = true;
        /* Binary SLEEF ops (pow) run at their u10 column at both settings;
         * sig and sig2 at their base function's. */
        const ot_opinfo *b = o->jit_base != OT_OP_NONE ? ot__op(o->jit_base) : o;
        const char *ulp = b->ulp[b->arity == 2 ? 0 : acc];
        if (b->vec == OT__VEC_ACC && ulp[0] == '-') ulp = acc ? "u35" : "u10";
        fprintf(f, "%s%s %s", any ? ", " : " [accuracy: ", o->name, ulp);
        any = true;
    }
    if (any) fputc(']', f);
}

/* Where a conv's fused epilogue runs: the direct and GEMM convs hand it
 * each block of output as it is written (in cache); Winograd's transform
 * tiles span images, so its epilogue runs once over the whole result. */
static void conv_epilogue_line(const ot_plan *p, int conv, FILE *f)
{
    if (ot__wino_ok(&p->kernels[conv]))
        fprintf(f, "  conv epilogue: kernel %d runs on kernel %d's whole result after it "
                "(Winograd's tiles span images: not in cache)\n", conv + 1, conv);
    else
        fprintf(f, "  conv epilogue: kernel %d runs on each block of kernel %d's result as it "
                "is written, in cache\n", conv + 1, conv);
}

int ot__plan_explain(const ot_plan *p, FILE *f)
{
    fprintf(f, "plan: %d kernel%s, %d temporar%s (%zu bytes), reads %llu bytes, writes %llu bytes\n",
            p->nkernels, p->nkernels == 1 ? "" : "s", p->ntemps, p->ntemps == 1 ? "y" : "ies",
            p->arena_bytes, (unsigned long long)p->bytes_read,
            (unsigned long long)p->bytes_written);
    fprintf(f, "  compiled %d nodes in %.3f ms, %.2f us/node\n", p->compile_nodes,
            (double)p->compile_ns * 1e-6,
            p->compile_nodes ? (double)p->compile_ns * 1e-3 / p->compile_nodes : 0.0);
    if (p->row_serial)
        fprintf(f, "  dot epilogues: all kernels run per block of %lld of %lld rows, in order\n",
                (long long)p->row_block, (long long)p->rows);
    else if (p->row_block > 0 && p->local_bytes)
        fprintf(f, "  all kernels run per block of %lld rows; temporaries of one block: %zu bytes "
                "a thread\n", (long long)p->row_block, p->local_bytes);
    else if (p->row_block > 0)
        fprintf(f, "  all kernels run per block of %lld rows\n", (long long)p->row_block);
    for (int s = 0; p->row_block <= 0 && s < p->nseg; s++)
        if (p->kernels[p->segs[s].first].kind == OT_KER_CONV)
            conv_epilogue_line(p, p->segs[s].first, f);
        else
            fprintf(f, "  dot epilogue: kernels %d-%d run per block of %lld of %lld rows, in order\n",
                    p->segs[s].first, p->segs[s].first + p->segs[s].count - 1,
                    (long long)p->segs[s].row_block, (long long)p->segs[s].rows);
    int *dot_of = p->row_serial ? dots_of_temps(p) : NULL, seg = 0;
    if (p->row_serial && !dot_of) return ot__err_set(OT_ENOMEM, NULL, 0, "explain", "out of memory");
    for (int i = 0; i < p->nkernels; i++) {
        int seg_dot = -1, role = segment_role(p, i, &seg, &seg_dot);
        int from = role == 1 ? seg_dot : p->row_serial ? dot_read(p, dot_of, i) : -1;
        fprintf(f, "  kernel %d: %s", i, p->kernels[i].desc ? p->kernels[i].desc : "?");
        if (from >= 0)
            fprintf(f, " (epilogue of kernel %d, %s)", from,
                    p->kernels[from].kind != OT_KER_CONV ? "on its rows in cache"
                    : ot__wino_ok(&p->kernels[from]) ? "on its whole result"
                                                      : "on its blocks in cache");
        if (role == 2) fprintf(f, " (bsum of kernel %d's result, in cache)", i - 1);
        if (p->kernels[i].jit)
            fputs(p->kernels[i].jit->fn_stream ? " (generated code, streaming stores)"
                                               : " (generated code)", f);
        explain_prefetch(&p->kernels[i], f);
        explain_accuracy(&p->kernels[i], p->acc, f);
        fputc('\n', f);
    }
    free(dot_of);
    return ferror(f) ? OT_EIO : 0;
}

/* Generated code for the kernels that have it (see jit.c); where there is
 * no room for it the plan runs on the interpreter, as it would anyway. */
static void generate_code(ot_plan *p, const ot_kernels *kt, int acc, size_t stream_bytes)
{
    ot_jit **jits = ot__malloc(sizeof *jits * (size_t)(p->nkernels ? p->nkernels : 1));
    if (!jits) return;
    for (int i = 0; i < p->nkernels; i++)
        jits[i] = ot__jit_build(&p->kernels[i], kt, acc,
                                 ot__sched_streams_in(p, &p->kernels[i], stream_bytes));
    bool installed = ot__jit_install(jits, p->nkernels, &p->jit);
    for (int i = 0; i < p->nkernels; i++) {
        if (installed) p->kernels[i].jit = jits[i];
        else ot__jit_free(jits[i]);
    }
    free(jits);
}

int ot__plan_compile(ot_backend *be, const ot_walk *w, int n, ot_tensor *const outs[],
                     ot_node *const trees[], ot_plan **plan)
{
    ot_cpu *cpu = be->impl;
    compiler c = {.be = be, .k = cpu->k, .w = w, .outs = outs, .trees = trees, .nout = n,
                  .fused = be->opts.fusion != OT_FUSION_OFF};
    c.ci = ot__calloc((size_t)w->n, sizeof *c.ci);
    c.plan = ot__calloc(1, sizeof *c.plan);
    c.groot = ot__calloc((size_t)n, sizeof *c.groot);
    /* Counted from the start, so that a failure below frees it. */
    if (c.plan) atomic_init(&c.plan->refs, 1);
    int rc = c.ci && c.plan && c.groot ? OT_VERIFY(ot__verify_walk(w, n)) : OT_ENOMEM;
    if (!rc && !ot__fuse_merge_common(&c)) rc = OT_ENOMEM;
    if (!rc) {
        c.plan->nleaves = w->nleaf;
        c.plan->nparams = w->nparam;
        c.plan->nout = n;
        ot__fuse_count_uses(&c);
        for (int i = 0; i < w->n; i++) c.plan->nodes += c.ci[i].canon == i && w->e[i].kind == OT_NODE_OP;
        ot__fuse_choose_materialised(&c);
        if (c.fused && !ot__fuse_bound_recompute(&c)) c.oom = true;
        ot__fuse_mark_direct_roots(&c);
        ot__fuse_assign_storage(&c);
        rc = c.oom ? OT_ENOMEM : OT_VERIFY(ot__verify_fused(&c));
        if (!rc) rc = ot__build_kernels(&c) ? OT_VERIFY(ot__verify_plan(c.plan, OT_VERIFY_BUILT)) : OT_ENOMEM;
        if (!rc && !ot__sched_choose_dot_segments(&c)) rc = OT_ENOMEM;
        if (!rc) {
            c.plan->prefetch = ot__sched_prefetching(c.plan);
            ot__sched_temps_into_outputs(&c);
            rc = OT_VERIFY(ot__verify_plan(c.plan, OT_VERIFY_SCHEDULED));
        }
        if (!rc && c.plan->nseg == 0) ot__sched_choose_row_blocks(&c);
        if (!rc) ot__sched_prefetches(c.plan, be->opts.threads > 1 ? be->opts.threads : 1);
        if (!rc && !ot__sched_layout_arena(c.plan)) rc = OT_ENOMEM;
        if (!rc) rc = OT_VERIFY(ot__verify_plan(c.plan, OT_VERIFY_LAID_OUT));
        if (!rc && cpu->jit)
            generate_code(c.plan, cpu->k, be->opts.accuracy == OT_ULP35, cpu->stream_bytes);
        if (!rc) ot__plan_run_prepare(c.plan);
        if (!rc) c.plan->acc = be->opts.accuracy == OT_ULP35;
    }
    free(c.ci);
    free(c.groot);
    if (rc) {
        ot__plan_release(c.plan);
        c.plan = NULL;
    }
    *plan = c.plan;
    return rc;
}

/* ---- the driver ------------------------------------------------------------ */

uint64_t ot__now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ot__plan_get(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                 ot_plan **plan, ot_walk **walk, ot_binding *bind)
{
    int rc = ot__plan_find(be, n, outs, trees, plan, walk, bind);
    if (rc || *plan) return rc;
    ot_cpu *cpu = be->impl;
    ot_walk *w = *walk;
    ot_plan *p;
    unsigned long failed = ot__alloc_failures();
    rc = ot__plan_compile(be, w, n, outs, trees, &p);
    if (!rc && ot__kernels_check(p, cpu->k, be->opts.accuracy == OT_ULP35)) {
        ot__plan_release(p);
        ot__walk_done(be, w);
        return OT_EUNSUPPORTED;
    }
    if (rc) {
        ot__walk_done(be, w);
        /* the verifier recorded what it found */
        return rc == OT_EINTERNAL ? rc : ot__err_set(OT_ENOMEM, NULL, 0, "assign",
                                                     "out of memory compiling the tree");
    }
    ot__stat_add(ot__stats_mine(&be->stats), OT__STAT_COMPILES, 1);
    p->compile_ns = ot__now_ns() - w->start_ns;   /* the walk too */
    p->compile_nodes = w->n;
    /* A plan that fell back from generated code or a fused group for want
     * of memory runs once; cached, it would stay the slower plan. */
    if (ot__alloc_failures() == failed) ot__plan_keep(be, n, outs, trees, w, p);
    *plan = p;
    return 0;
}

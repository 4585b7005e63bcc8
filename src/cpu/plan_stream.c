/*
 * plan_stream.c - the plan's hints on memory traffic: which kernels write
 * their output with streaming stores, and which prefetch their inputs.
 *
 * ot__sched_streams: a kernel bound by memory that moves at least the
 * backend's stream_bytes; ot__sched_streams_in: never a row-blocked plan's
 * temporary, which a later kernel of the block reads from cache, nor a
 * dot's epilogue (and the lookup of a kernel's segment). Generated
 * code obeys it (compile.c); plan_sched.c asks it where a temporary could
 * go into an output. ot__sched_prefetches: in a row-blocked plan, the last
 * kernel of a block to read a leaf's rows prefetches the next block's.
 */
#include "plan.h"
#include "ops.h"   /* the op table's costs */

/* Streaming stores pay where a kernel is bound by memory: they save reading
 * each output line before writing it (a fifth of W1's traffic). Where the
 * arithmetic is the bound they cost: W3, W4 and W7 by hand ran 7-50%
 * slower with them on Zen 4 (issue 15), W1 19% faster. A kernel counts as
 * memory-bound when its work per element, in the op table's cost units
 * (1 cheap, 3 divide or root, 8 transcendental), is at most
 * STREAM_WORK_PER_BYTE per byte of vector it reads or writes. */
#define STREAM_WORK_PER_BYTE 0.5

static bool memory_bound(const ot_kernel *k)
{
    int work = 0, vectors = 1 + k->nxstore;
    for (int i = 0; i < k->ninsn; i++) {
        const ot_insn *in = &k->insns[i];
        if (in->scalar & 8) continue;
        if (in->code == OT_I_LOAD) vectors++;
        else if (in->code == OT_I_FMA) work += OT__COST_CHEAP;
        else if (in->code != OT_I_PARAM) work += ot__op_cost(in->op);
    }
    size_t es = k->result_kd == OT_KD_F64 ? 8 : 4;
    return (double)work <= STREAM_WORK_PER_BYTE * (double)(es * (size_t)vectors);
}

/* Whether k reads the memory it writes (softmax's divide rescales its
 * output in place): those lines are in the cache already, and streaming
 * them out was 30% slower (W5). exec.c checks leaves written in place at
 * run time. */
static bool reads_own_output(const ot_kernel *k)
{
    for (int l = 0; l < k->nload; l++)
        if (k->loads[l].space == k->store.space && k->loads[l].index == k->store.index)
            return true;
    return false;
}

/* The bytes one run of k moves, its loads and stores counted at the
 * result's width: what has to fit in the cache for its output to stay
 * there. */
static size_t moved_bytes(const ot_kernel *k)
{
    size_t n = (k->result_kd == OT_KD_F64 ? 8 : 4) * (size_t)(1 + k->nxstore);
    for (int i = 0; i < k->ninsn; i++)
        if (k->insns[i].code == OT_I_LOAD && !(k->insns[i].scalar & 8)) n += k->result_kd == OT_KD_F64 ? 8 : 4;
    for (int d = 0; d < k->ndim; d++) n *= (size_t)k->dims[d];
    return n;
}

/* Streams when the data a kernel moves, not its output alone, passes the
 * threshold: a*b + c over 4M f32 writes 16 MB but moves 64 MB, more than a
 * 32 MB last-level cache holds, and ordinary stores then ran it at 70% of
 * the streamed rate (optree-bench, 2e6..5e6 elements). */
bool ot__sched_streams(const ot_kernel *k, size_t stream_bytes)
{
    if (!stream_bytes || k->kind != OT_KER_EW || reads_own_output(k)) return false;
    return moved_bytes(k) >= stream_bytes && memory_bound(k);
}

int ot__sched_segment_of(const ot_plan *p, int k)
{
    int lo = 0, hi = p->nseg;
    while (lo < hi) {   /* the first segment ending after k */
        int mid = (lo + hi) / 2;
        if (p->segs[mid].first + p->segs[mid].count <= k) lo = mid + 1;
        else hi = mid;
    }
    return lo < p->nseg && p->segs[lo].first <= k ? lo : -1;
}

/* Whether k is a dot's epilogue: a kernel of the dot's segment after it,
 * run on each block of rows between two blocks of the product. */
static bool dot_epilogue(const ot_plan *p, const ot_kernel *k)
{
    int i = (int)(k - p->kernels), s = ot__sched_segment_of(p, i);
    return s >= 0 && i > p->segs[s].first && p->kernels[p->segs[s].first].kind == OT_KER_DOT;
}

/* In a row-blocked plan a temporary is read back by a later kernel of the
 * same block, from cache: streamed, each block's rows went to memory and
 * were read back from it (a layer norm gradient's x - mean). A dot's
 * epilogue stores as usual: the next block's product, bound by its
 * arithmetic, has the time to write the lines back, where streamed the
 * epilogue waited for memory (W16's relu gradients, 4096x512 epilogues of
 * their forward GEMM on Zen 5: 2.2-2.4 ms a step streamed, 1.4-1.6 not). */
bool ot__sched_streams_in(const ot_plan *p, const ot_kernel *k, size_t stream_bytes)
{
    bool blocked = p->row_block > 0 && p->row_block < p->rows;
    if ((blocked && k->store.space == OT_SPACE_TEMP) || dot_epilogue(p, k)) return false;
    return blocked ? ot__sched_streams_blocked(p, k, stream_bytes) : ot__sched_streams(k, stream_bytes);
}

/* Per leaf slot, the first kernel reading it and the last one bound by
 * its arithmetic reading it (-1: none), in one pass over the loads, so
 * that a plan's compile stays linear in its kernels. False without
 * memory. */
typedef struct leaf_readers {
    int *first, *last_arith;
} leaf_readers;

static bool readers_of_leaves(const ot_plan *p, leaf_readers *r)
{
    size_t n = (size_t)(p->nleaves > 0 ? p->nleaves : 1);
    r->first = ot__malloc(sizeof(int) * n);
    r->last_arith = ot__malloc(sizeof(int) * n);
    if (!r->first || !r->last_arith) {
        free(r->first);
        free(r->last_arith);
        return false;
    }
    for (size_t i = 0; i < n; i++) r->first[i] = r->last_arith[i] = -1;
    for (int i = 0; i < p->nkernels; i++) {
        const ot_kernel *k = &p->kernels[i];
        bool arith = (k->kind == OT_KER_EW || k->kind == OT_KER_REDUCE) && !memory_bound(k);
        for (int l = 0; l < k->nload; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space != OT_SPACE_LEAF || v->index < 0 || v->index >= p->nleaves) continue;
            if (r->first[v->index] < 0) r->first[v->index] = i;
            if (arith) r->last_arith[v->index] = i;
        }
    }
    return true;
}

bool ot__sched_prefetching(const ot_plan *p)
{
    leaf_readers r;
    bool any = false;
    if (!readers_of_leaves(p, &r)) return false;
    for (int i = 0; i < p->nleaves; i++) any |= r.last_arith[i] > r.first[i];
    free(r.first);
    free(r.last_arith);
    return any;
}

/* A row-blocked plan that prefetches writes with ordinary stores: softmax,
 * 4096x4096 on Zen 5, its exp prefetching, ran at 0.71-0.84x the hand loop
 * so (its exp kept in the output and divided there, as the hand loop does)
 * against 1.06-1.09x with the divide streaming from a block temporary, in
 * runs alternated four times; a norm, whose kernels prefetch nothing, ran
 * as fast or faster streaming (rms norm 1.05-1.10 against 1.05-1.16). */
bool ot__sched_streams_blocked(const ot_plan *p, const ot_kernel *k, size_t stream_bytes)
{
    return !p->prefetch && ot__sched_streams(k, stream_bytes);
}

/* The bytes from a row of load l to the same row of the block after next
 * for this thread (slots threads take blocks in turn), or 0: a broadcast
 * row, a view read through a copy (its inner stride is not 1), a leaf
 * some earlier load of k prefetches already, or too far for a 32-bit
 * displacement. */
static int32_t prefetch_bytes(const ot_plan *p, const ot_kernel *k, int l, int slots)
{
    const ot_view *v = &k->loads[l];
    if (!k->ndim || v->strides[k->ndim - 1] != 1) return 0;
    for (int e = 0; e < l; e++)
        if (k->loads[e].space == OT_SPACE_LEAF && k->loads[e].index == v->index) return 0;
    int64_t step = v->strides[0] * (k->dims[0] / p->rows);   /* a plan row's elements */
    int64_t bytes = step * (int64_t)ot__esize(v->dtype) * p->row_block * slots;
    return step > 0 && bytes < (INT64_C(1) << 30) ? (int32_t)bytes : 0;
}

/* In a row-blocked plan the first kernel of a block to read a leaf's rows
 * takes them from memory, and the kernels after it from cache: with 8 rows
 * of 4096 f32 a block, a softmax spent a quarter of its time in its row
 * max waiting for memory. The last kernel to read the rows that is bound
 * by its arithmetic (softmax's exp) prefetches the next block's into L2 as
 * it goes, a line per vector, and the next block's first kernel finds them
 * there: W5 by hand in blocks of 8 rows took 8.2-9.4 ms on Zen 5, 7.2-7.4
 * ms with these prefetches, one pass per row (row max, exp, divide)
 * 7.3-7.5 ms. A burst of prefetches before the exp pass gave nothing
 * (8.7-9.0 ms): the core waits for them as for loads. A kernel bound by
 * memory has no time to hide them in: rms norm's scale prefetching went
 * from 0.98-1.01x the hand loop to 1.05-1.36x. */
void ot__sched_prefetches(ot_plan *p, int slots)
{
    leaf_readers r;
    if (p->row_block <= 0 || p->row_block >= p->rows || p->row_serial) return;
    if (!readers_of_leaves(p, &r)) return;   /* without memory: no prefetches */
    for (int i = 0; i < p->nkernels; i++) {
        ot_kernel *k = &p->kernels[i];
        for (int l = 0; l < k->nload && k->npf < OT_MAX_PREFETCH; l++) {
            const ot_view *v = &k->loads[l];
            if (v->space != OT_SPACE_LEAF || v->index < 0 || v->index >= p->nleaves ||
                r.last_arith[v->index] != i || r.first[v->index] >= i)
                continue;
            int32_t bytes = prefetch_bytes(p, k, l, slots);
            if (!bytes) continue;
            k->pf_load[k->npf] = (int16_t)l;
            k->pf_bytes[k->npf++] = bytes;
        }
    }
    free(r.first);
    free(r.last_arith);
}

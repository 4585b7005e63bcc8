/*
 * plan_sched.c - how the kernels run: dot segments, arena, row blocks.
 *
 * Takes kernels in a valid order with temporary sizes.
 * choose_dot_segments moves the elementwise kernel that alone reads a dot's
 * result (and a reduction of that kernel's result, neon's bsum) right after
 * the dot, to run per block of the dot's rows while they are in cache;
 * temps_into_outputs keeps a temporary in the output whose kernel alone
 * reads it; choose_row_blocks, in a plan without segments, runs all kernels
 * per block of rows when they all walk the same rows, and gives the
 * temporaries that need only the block being run one block's bytes in each
 * thread's memory; layout_arena gives each temporary an offset,
 * temporaries whose lives do not overlap sharing memory (which kernels
 * stream their stores: plan_stream.c). Each pass is
 * linear in the kernels (up to a log): questions about a temporary's
 * readers and writers go to an index made once per pass (kindex).
 *
 * Guarantees to exec.c: temporaries are still written before they are read;
 * segments are disjoint runs of kernels in order; the arena blocks of
 * temporaries alive at the same time are disjoint and within arena_bytes
 * (a temp_local one's within local_bytes, one block of its rows).
 */
#include "plan.h"

/* ---- the arena ------------------------------------------------------------- */

typedef struct block { size_t off, size; } block;

/* The free blocks, in the order first fit scans them, with a max tree over
 * that order (each leaf a block's size + 1, 0 past the end), so the first
 * block that fits is found in log time: a long chain's thousands of freed
 * blocks made the scan quadratic. */
typedef struct freelist {
    block *b;
    int n, cap;                /* blocks; leaves (a power of two) */
    size_t *mx;                /* the tree: node j's children 2j, 2j + 1 */
} freelist;

static void fl_set(freelist *f, int i)
{
    int j = i + f->cap;
    f->mx[j] = i < f->n ? f->b[i].size + 1 : 0;
    for (j >>= 1; j; j >>= 1) f->mx[j] = f->mx[2 * j] > f->mx[2 * j + 1] ? f->mx[2 * j] : f->mx[2 * j + 1];
}

/* First fit over free blocks, else the end of the arena. A block used up
 * gives its place to the last one. */
static size_t arena_take(freelist *f, size_t size, size_t *end)
{
    if (f->mx[1] < size + 1) {
        size_t off = *end;
        *end += size;
        return off;
    }
    int j = 1;
    while (j < f->cap) j = f->mx[2 * j] >= size + 1 ? 2 * j : 2 * j + 1;
    int i = j - f->cap;
    size_t off = f->b[i].off;
    f->b[i].off += size;
    f->b[i].size -= size;
    if (f->b[i].size == 0) {
        f->b[i] = f->b[--f->n];
        fl_set(f, f->n);
    }
    fl_set(f, i);
    return off;
}

/* Room for n blocks; false without memory (whatever was made is freed
 * with the rest by the caller). */
static bool fl_new(freelist *f, int n)
{
    *f = (freelist){.b = ot__malloc(sizeof(block) * (size_t)n), .cap = 1};
    while (f->cap < n) f->cap *= 2;
    f->mx = ot__calloc((size_t)f->cap * 2, sizeof *f->mx);
    return f->b && f->mx;
}

static void arena_free(freelist *f, block b)
{
    f->b[f->n++] = b;
    fl_set(f, f->n - 1);
}

/* The last kernel of the segment holding kernel k (k itself outside one):
 * a segment's kernels run interleaved, block by block, so what one of them
 * reads lives until the last has run. */
static int segment_end(const ot_plan *p, int k)
{
    int s = ot__sched_segment_of(p, k);
    return s < 0 ? k : p->segs[s].first + p->segs[s].count - 1;
}

/* Per temporary, its size (temp_offset until laid out), the kernel
 * defining it (def) and the last kernel reading it (last), -1 where none. */
static void temp_lives(const ot_plan *p, size_t *size, int *def, int *last)
{
    for (int t = 0; t < p->ntemps; t++) {
        def[t] = last[t] = -1;
        size[t] = p->temp_offset[t];
    }
    for (int k = 0; k < p->nkernels; k++) {
        const ot_kernel *kk = &p->kernels[k];
        if (kk->store.space == OT_SPACE_TEMP && def[kk->store.index] < 0) def[kk->store.index] = k;
        for (int x = 0; x < kk->nxstore; x++) {
            const ot_view *xv = &kk->xstores[x].view;
            if (xv->space == OT_SPACE_TEMP && def[xv->index] < 0) def[xv->index] = k;
        }
        for (int l = 0; l < kk->nload; l++)
            if (kk->loads[l].space == OT_SPACE_TEMP) last[kk->loads[l].index] = k;
    }
}

/* Gives each temporary an offset: it lives from the kernel that writes it
 * to the last kernel that reads it, and its memory is reused afterwards, so
 * a long unfused chain needs a few buffers, not one per node. A temporary
 * of one row block (temp_local) gets its offset in the block's own memory
 * (local_bytes, one copy per thread), the others in the arena. In a plan of
 * several row blocks the arena's temporaries share no bytes: blocks run on
 * several threads at once, and a block of one temporary is not the same
 * bytes as that block of another unless their rows are laid out alike. */
bool ot__sched_layout_arena(ot_plan *p)
{
    int nt = p->ntemps, nk = p->nkernels;
    if (nt == 0) return true;
    /* Per temp: its size, the kernel defining it, the last kernel reading
     * it; per kernel: lists of the temps born and dying there. */
    int *def = ot__malloc(sizeof(int) * (size_t)nt * 4), *last = def + nt;
    int *next_born = def + 2 * (size_t)nt, *next_dead = def + 3 * (size_t)nt;
    int *born = ot__malloc(sizeof(int) * (size_t)(nk + 1) * 2), *dead = born + nk + 1;
    size_t *size = ot__malloc(sizeof(size_t) * (size_t)nt);
    freelist fl[2];
    bool ok = fl_new(&fl[0], nt);   /* both made, so that both can be freed */
    ok = fl_new(&fl[1], nt) && ok && def && born && size;
    if (ok) temp_lives(p, size, def, last);
    for (int k = 0; ok && k <= nk; k++) born[k] = dead[k] = -1;
    for (int t = 0; ok && t < nt; t++) {
        int b = def[t] < 0 ? 0 : def[t], d = last[t] < b ? b : segment_end(p, last[t]);
        next_born[t] = born[b];
        born[b] = t;
        next_dead[t] = dead[d];
        dead[d] = t;
    }
    size_t end[2] = {0, 0};
    bool share = p->row_block <= 0 || p->row_block >= p->rows;
    for (int k = 0; ok && k < nk; k++) {
        /* group 1: a thread's row block (temp_local); 0: the arena */
        for (int t = born[k]; t >= 0; t = next_born[t]) {
            int g = ot__temp_local(p, t);
            p->temp_offset[t] = arena_take(&fl[g], size[t], &end[g]);
        }
        for (int t = dead[k]; t >= 0; t = next_dead[t])
            if (share || ot__temp_local(p, t))
                arena_free(&fl[ot__temp_local(p, t)], (block){p->temp_offset[t], size[t]});
    }
    if (ok) {
        p->arena_bytes = end[0];
        p->local_bytes = end[1];
    }
    free(def);
    free(born);
    free(size);
    for (int g = 0; g < 2; g++) {
        free(fl[g].b);
        free(fl[g].mx);
    }
    return ok;
}

/* ---- row blocks ------------------------------------------------------------ */

#define ROW_BLOCK_BYTES 262144  /* a block's rows stay in L2 between kernels;
                                   each kernel's run costs its setup once per
                                   block: softmax over rows of 4096 f32 in L2
                                   ran 2-3% faster in blocks of 8 rows than
                                   of 2, and no slower than 1 row (Xeon) */
#define GEMM_BLOCK_ROWS 256     /* fewer rows per GEMM call repack B too often */

/* The budget of a GEMM block's result, so that it stays in cache for its
 * epilogue (the backend's, from its cache policy: cpu.c). */
static int64_t panel_bytes(const compiler *c)
{
    const ot_cpu *cpu = c->be->impl;
    return (int64_t)cpu->panel_bytes;
}

/* Rows per GEMM block: the result block (row_bytes a row) stays within the
 * panel budget, but each call repacks B, so not fewer than
 * GEMM_BLOCK_ROWS; one block when two would do. */
static int64_t gemm_block(int64_t rows, int64_t row_bytes, int64_t panel)
{
    int64_t blk = row_bytes > 0 ? panel / row_bytes : rows;
    if (blk < GEMM_BLOCK_ROWS) blk = GEMM_BLOCK_ROWS;
    if (rows <= 2 * blk) return rows;
    int64_t nblocks = (rows + blk - 1) / blk;   /* equal blocks: no thin last call */
    return (rows + nblocks - 1) / nblocks;
}

/* The rows a kernel walks (dim 0, a dot's rows), or -1. */
static int64_t kernel_rows(const ot_kernel *k)
{
    if (k->kind == OT_KER_DOT) return k->batch == 1 ? k->m : -1;
    return k->ndim >= 1 ? k->dims[0] : -1;
}

/* Whether a kernel walks the plan's rows the way a row-blocked plan needs:
 * dim 0 is the rows or, for an elementwise kernel coalesced to one dim,
 * whole rows of elements, or one value per row (a norm's rsqrt(var + eps),
 * read by several kernels and so stored: without it a layer norm's
 * gradient ran its 10 kernels over the whole tensor each, x-sized
 * temporaries streamed to memory and back). kernel_blocks checks that its
 * loads and stores step by the row as their writers and readers do. A
 * dot's B must be whole before the first block. */
static bool walks_rows(const ot_kernel *k, int64_t rows, bool dots)
{
    int64_t kr = kernel_rows(k);
    if (k->kind == OT_KER_DOT) return kr == rows && k->loads[1].space != OT_SPACE_TEMP;
    if (k->kind == OT_KER_EW && k->ndim == 1) return kr > 0 && kr % rows == 0 && (dots || kr == rows);
    if (k->ndim < 2 || kr != rows) return false;
    if (k->kind == OT_KER_EW) return true;
    return k->kind == OT_KER_REDUCE && k->red_axis >= 1;
}

/* A view's step from one plan row to the next. */
static int64_t row_step(const ot_kernel *k, const ot_view *v, int64_t rows)
{
    return v->strides[0] * (kernel_rows(k) / rows);
}

/* Whether a view's offset (a slice, a concat's part) stays within its
 * first row: per block it then reads or writes that block's rows, not a
 * neighbour's, which a block may not have written yet. */
static bool offset_in_row(const ot_kernel *k, const ot_view *v, int64_t rows)
{
    int64_t step = row_step(k, v, rows);
    return v->offset == 0 || (v->offset > 0 && v->offset < (step < 0 ? -step : step));
}

/* Whether kernel k keeps a row-blocked plan safe: it walks the plan's rows,
 * reads each temporary at the rows its writer wrote, and writes within
 * its rows. written: per temp, its row step as written (0: not written
 * yet); k's stores are noted there. */
static bool kernel_blocks(const ot_kernel *k, int64_t rows, bool dots, int64_t *written)
{
    bool ok = walks_rows(k, rows, dots);
    for (int l = 0; l < k->nload && ok; l++) {
        const ot_view *v = &k->loads[l];
        if (v->space != OT_SPACE_TEMP || (k->kind == OT_KER_DOT && l == 1)) continue;
        ok = written[v->index] != 0 && written[v->index] == row_step(k, v, rows) &&
             offset_in_row(k, v, rows);
    }
    for (int x = -1; ok && x < k->nxstore; x++) {
        const ot_view *o = x < 0 ? &k->store : &k->xstores[x].view;
        int64_t step = row_step(k, o, rows);
        ok = offset_in_row(k, o, rows);
        if (o->space == OT_SPACE_TEMP) written[o->index] = step ? step : -1;
    }
    return ok;
}

/* The bytes of one plan row that kernel k touches, at 8 bytes an element. */
static int64_t kernel_row_bytes(const ot_kernel *k, int64_t rows)
{
    int64_t b = k->kind == OT_KER_DOT ? k->n * 8 : 8;
    for (int d = 1; d < k->ndim; d++) b *= k->dims[d];
    if (k->kind != OT_KER_DOT) b *= kernel_rows(k) / rows;
    return b;
}

/* Whether each plan row of view v of kernel k lies within its first `step`
 * elements from the row's start (the temporary's rows do not interleave), so
 * that a block of rows is [0, rows * step) from the block's first row. */
static bool row_within(const ot_kernel *k, const ot_view *v, int64_t rows, int64_t step)
{
    int64_t per_row = kernel_rows(k) / rows, end = v->offset + (per_row - 1) * v->strides[0];
    for (int d = 1; d < k->ndim; d++) {
        if (v->strides[d] < 0) return false;
        end += (k->dims[d] - 1) * v->strides[d];
    }
    return v->offset >= 0 && v->strides[0] >= 0 && end < step;
}

/* A kernel's view v: a load for v >= 0, the store for -1, its further
 * outputs below. */
static const ot_view *view_at(const ot_kernel *k, int v)
{
    return v >= 0 ? &k->loads[v] : v == -1 ? &k->store : &k->xstores[-2 - v].view;
}

/* Notes in step[t], for each temp t that kernel k reads or writes, the
 * bytes from one plan row of it to the next, the same in every view of it
 * (else -1; 0 before the first view). */
static void note_steps(const ot_kernel *k, int64_t rows, int64_t *step)
{
    for (int w = -1 - k->nxstore; w < k->nload; w++) {
        const ot_view *v = view_at(k, w);
        if (v->space != OT_SPACE_TEMP) continue;
        int64_t s = row_step(k, v, rows), b = s * (int64_t)ot__esize((ot_dtype)v->dtype);
        int64_t *st = &step[v->index];
        *st = s <= 0 || !row_within(k, v, rows, s) || (*st && *st != b) ? -1 : b;
    }
}

/* Whether blocks of row_block of rows rows leave each of slots threads a
 * block of its own whose temporaries together are smaller than the whole
 * (choose_local_temps; local_steps predicts it). */
static bool blocks_local(int64_t row_block, int64_t rows, int slots)
{
    return row_block <= rows / slots;
}

/* Each temporary's row step (note_steps over every kernel); NULL without
 * memory. */
static int64_t *temp_steps(const ot_plan *p, int64_t rows)
{
    int64_t *step = ot__calloc((size_t)p->ntemps, sizeof *step);
    for (int i = 0; step && i < p->nkernels; i++) note_steps(&p->kernels[i], rows, step);
    return step;
}

/* In a plan of several row blocks, the temporaries that need only the block
 * being run: every kernel reads a temporary at the rows its writer wrote
 * (kernel_blocks), so a block's rows of it are dead once the block's kernels
 * have run. Each thread then keeps one block of them (temp_local), the same
 * bytes for every block, in cache: whole, the x-sized temporaries of a layer
 * norm's gradient went to memory and back, 2.1x the time of a hand-written
 * loop. A temporary whose rows interleave stays whole, and so does every
 * one where the threads' blocks together (slots of them) would not be
 * smaller than the whole. Sizes are set for layout_arena. */
static void choose_local_temps(ot_plan *p, int slots)
{
    if (!blocks_local(p->row_block, p->rows, slots) || !p->ntemps) return;
    int64_t *step = temp_steps(p, p->rows);
    uint8_t *local = ot__calloc((size_t)p->ntemps, 1);
    if (step && local) {   /* without memory every temporary stays whole */
        for (int t = 0; t < p->ntemps; t++) {
            if (step[t] <= 0) continue;
            size_t block = ((size_t)(step[t] * p->row_block) + 63) & ~(size_t)63;
            local[t] = 1;
            if (block < p->temp_offset[t]) p->temp_offset[t] = block;
        }
        p->temp_local = local;
        local = NULL;
    }
    free(local);
    free(step);
}

/* The rows of a plan that may run per block of rows, else 0: safe when
 * every kernel walks the same rows, each temporary is read at the rows its
 * writer wrote, and no output overlaps a leaf (a later block would read
 * what an earlier one wrote). The most bytes a kernel touches of one row
 * go to *row_bytes, whether the plan has a dot to *dots. */
static int64_t blockable_rows(const compiler *c, int64_t *row_bytes, bool *dots)
{
    const ot_plan *p = c->plan;
    if (p->nkernels < 2 || !c->fused) return 0;
    *dots = false;
    for (int i = 0; i < p->nkernels; i++) *dots |= p->kernels[i].kind == OT_KER_DOT;
    int64_t rows = kernel_rows(&p->kernels[0]);
    int64_t *written = ot__calloc((size_t)(p->ntemps ? p->ntemps : 1), sizeof *written);
    if (!written) return 0;
    bool ok = rows > 1;
    *row_bytes = 0;
    for (int i = 0; i < p->nkernels && ok; i++) {
        ok = kernel_blocks(&p->kernels[i], rows, *dots, written);
        int64_t b = kernel_row_bytes(&p->kernels[i], rows);
        if (b > *row_bytes) *row_bytes = b;
    }
    for (int i = 0; ok && c->outs && i < c->nout; i++)
        for (int j = 0; j < c->w->nleaf && ok; j++)
            ok = ot__overlap(c->outs[i], c->w->leaf[j]) == OT_OVERLAP_NONE;
    free(written);
    return ok && *row_bytes > 0 ? rows : 0;
}

static int64_t elementwise_block(int64_t row_bytes)
{
    return row_bytes >= ROW_BLOCK_BYTES ? 1 : ROW_BLOCK_BYTES / row_bytes;
}

/* The threads that each keep one block of the local temporaries: the
 * caller and the workers. */
static int block_slots(const compiler *c)
{
    return c->be->opts.threads > 1 ? c->be->opts.threads : 1;
}

/* Runs a plan that blockable_rows allows per block of rows. Plans with a
 * dot run their blocks in order, each kernel on every thread: the dot's
 * elementwise readers are then epilogues on its rows while they are in
 * cache. */
void ot__sched_choose_row_blocks(compiler *c)
{
    ot_plan *p = c->plan;
    int64_t row_bytes;
    bool dots;
    int64_t rows = blockable_rows(c, &row_bytes, &dots);
    if (!rows) return;
    p->rows = rows;
    if (!dots) {
        p->row_block = elementwise_block(row_bytes);
        choose_local_temps(p, block_slots(c));
        return;
    }
    p->row_block = gemm_block(rows, row_bytes, panel_bytes(c));
    p->row_serial = true;
}

/* ---- who reads and writes each temporary ---------------------------------- */

/* The kernels reading and writing each temporary, found in one pass, so
 * that the passes below ask per temporary instead of rescanning the plan
 * per kernel (that rescan made a recurrence's compile quadratic in its
 * length). Kernels are named by their index when the index was made (id).
 * choose_dot_segments places kernels into a new order, key saying where: a
 * placed kernel's key is its new position (below nk); the others keep
 * their old order after them, at key nk + id. */
typedef struct kindex {
    int nk;
    int *key;                  /* per id: its place in the order (see above) */
    int *rfirst, *rlist;       /* per temp: its readers' ids (CSR, each once) */
    int *wfirst, *wlist;       /* per temp: its writers' ids (CSR, each once) */
    int *outw, noutw;          /* the ids of kernels writing an output */
    int cursor;                /* the last kernel placed in its old order:
                                  all before it are placed */
} kindex;

static void kindex_free(kindex *ix)
{
    free(ix->key);
    free(ix->rfirst);
    free(ix->rlist);
}

/* Fills one CSR list per temp: pass 0 counts, pass 1 places; loads or
 * stores as `loads` says; a kernel is listed once per temp. */
static void kindex_fill(const ot_plan *p, int *first, int *list, int *last, bool loads, int pass)
{
    for (int t = 0; t < p->ntemps; t++) last[t] = -1;
    for (int k = 0; k < p->nkernels; k++) {
        const ot_kernel *kk = &p->kernels[k];
        int lo = loads ? 0 : -1 - kk->nxstore, hi = loads ? kk->nload : 0;
        for (int v = lo; v < hi; v++) {
            const ot_view *w = view_at(kk, v);
            int t = w->index;
            if (w->space != OT_SPACE_TEMP || last[t] == k) continue;
            last[t] = k;
            if (pass == 0) first[t + 1]++;
            else list[first[t]++] = k;
        }
    }
}

/* Makes a CSR list; first has ntemps + 1 zeroed slots. */
static void kindex_csr(const ot_plan *p, int *first, int *list, int *last, bool loads)
{
    int nt = p->ntemps;
    kindex_fill(p, first, list, last, loads, 0);
    for (int t = 0; t < nt; t++) first[t + 1] += first[t];
    kindex_fill(p, first, list, last, loads, 1);   /* first[t] now ends list t */
    for (int t = nt; t > 0; t--) first[t] = first[t - 1];
    first[0] = 0;
}

static bool writes_out(const ot_kernel *k)
{
    for (int v = -1 - k->nxstore; v < 0; v++)
        if (view_at(k, v)->space == OT_SPACE_OUT) return true;
    return false;
}

static bool kindex_new(kindex *ix, const ot_plan *p)
{
    int nk = p->nkernels, nt = p->ntemps, nviews = 0;
    for (int k = 0; k < nk; k++) nviews += p->kernels[k].nload + 1 + p->kernels[k].nxstore;
    *ix = (kindex){.nk = nk};
    ix->key = ot__malloc(sizeof(int) * ((size_t)nk * 2 + 1));
    ix->rfirst = ot__calloc((size_t)(nt + 1) * 2, sizeof(int));
    ix->rlist = ot__malloc(sizeof(int) * ((size_t)nviews + 1));
    int *last = ot__malloc(sizeof(int) * ((size_t)nt + 1));
    bool ok = ix->key && ix->rfirst && ix->rlist && last;
    if (ok) {
        ix->outw = ix->key + nk;
        ix->wfirst = ix->rfirst + nt + 1;
        for (int k = 0; k < nk; k++) {
            ix->key[k] = nk + k;
            if (writes_out(&p->kernels[k])) ix->outw[ix->noutw++] = k;
        }
        kindex_csr(p, ix->rfirst, ix->rlist, last, true);
        ix->wlist = ix->rlist + ix->rfirst[nt];
        kindex_csr(p, ix->wfirst, ix->wlist, last, false);
    }
    free(last);
    if (!ok) kindex_free(ix);
    return ok;
}

/* The only kernel reading temp t, or -1 (none, or more than one). */
static int sole_reader(const kindex *ix, int t)
{
    return ix->rfirst[t + 1] - ix->rfirst[t] == 1 ? ix->rlist[ix->rfirst[t]] : -1;
}

/* The last kernel (in key order) writing temp t, or -1: a running sum
 * (plan_build.c) is written by each dot it accumulates. */
static int temp_writer(const kindex *ix, int t)
{
    int last = -1;
    for (int i = ix->wfirst[t]; i < ix->wfirst[t + 1]; i++)
        if (last < 0 || ix->key[ix->wlist[i]] > ix->key[last]) last = ix->wlist[i];
    return last;
}

/* Whether kernel id is not placed yet and comes before key hi. */
static bool unplaced_before(const kindex *ix, int id, int hi)
{
    return ix->key[id] >= ix->nk && ix->key[id] < hi;
}

/* ---- dot epilogues in plans that are not row-blocked as a whole ----------- */

/* Whether view v (a load) may see what kernel k writes to outputs. */
static bool reads_written(const compiler *c, const ot_view *v, const ot_kernel *k)
{
    if (!c->outs || v->space != OT_SPACE_LEAF) return false;
    const ot_tensor *leaf = c->w->leaf[v->index];
    for (int x = -1; x < k->nxstore; x++) {
        const ot_view *o = x < 0 ? &k->store : &k->xstores[x].view;
        if (o->space == OT_SPACE_OUT && ot__overlap(c->outs[o->index], leaf) != OT_OVERLAP_NONE)
            return true;
    }
    return false;
}

static bool kernels_conflict(const compiler *c, const ot_kernel *reader, const ot_kernel *writer)
{
    for (int l = 0; l < reader->nload; l++)
        if (reads_written(c, &reader->loads[l], writer)) return true;
    return false;
}

/* Whether kernel k conflicts, either way, with an unplaced kernel before
 * key hi (one it would pass when placed): only kernels writing outputs
 * can, so those are asked first, and the whole run only when k writes one. */
static bool conflicts_before(const compiler *c, const kindex *ix, const ot_kernel *k, int hi)
{
    const ot_kernel *ks = c->plan->kernels;
    if (!c->outs) return false;
    for (int i = 0; i < ix->noutw; i++)
        if (unplaced_before(ix, ix->outw[i], hi) && kernels_conflict(c, k, &ks[ix->outw[i]]))
            return true;
    if (!writes_out(k)) return false;
    for (int id = ix->cursor + 1; id < hi - ix->nk; id++)
        if (unplaced_before(ix, id, hi) && kernels_conflict(c, &ks[id], k)) return true;
    return false;
}

/* Whether an unplaced kernel before key hi writes temp t: as its result
 * (store_only), or as any of its outputs. */
static bool writes_before(const compiler *c, const kindex *ix, int t, int hi, bool store_only)
{
    for (int i = ix->wfirst[t]; i < ix->wfirst[t + 1]; i++) {
        const ot_view *st = &c->plan->kernels[ix->wlist[i]].store;
        if (unplaced_before(ix, ix->wlist[i], hi) &&
            (!store_only || (st->space == OT_SPACE_TEMP && st->index == t)))
            return true;
    }
    return false;
}

/* Whether kernel e, the only reader of dot d's result, may run right after
 * d (just placed), per block of d's rows: it walks those rows, its other
 * inputs exist before d (no kernel between writes them, as its result or
 * a further output: a reduction that stores the value it sums wrote one
 * after the epilogue had read it, fuzz seed 4242 tree 23267), and moving
 * it past the kernels between them changes nothing they read or write. */
static bool epilogue_fits(const compiler *c, const kindex *ix, int d, int e)
{
    const ot_plan *p = c->plan;
    const ot_kernel *dk = &p->kernels[d], *ek = &p->kernels[e];
    int hi = ix->key[e];
    if (ek->kind != OT_KER_EW || !walks_rows(ek, dk->m, true)) return false;
    if (kernels_conflict(c, dk, ek)) return false;
    for (int l = 0; l < ek->nload; l++) {
        const ot_view *v = &ek->loads[l];
        if (v->space != OT_SPACE_TEMP) continue;
        if (v->index == dk->store.index) {
            if (row_step(ek, v, dk->m) != dk->store.strides[0] || !offset_in_row(ek, v, dk->m))
                return false;
            continue;
        }
        if (writes_before(c, ix, v->index, hi, false)) return false;   /* xstores too */
    }
    /* a later dot accumulating into d's result: e must wait for it */
    if (writes_before(c, ix, dk->store.index, hi, true)) return false;
    return !conflicts_before(c, ix, ek, hi);
}

/* A segment of dot d (at position first) and its epilogue. With several
 * blocks, the dot's result shrinks to one block that every block reuses
 * (still in cache when the next block's GEMM writes it), unless the dot
 * accumulates into it; its size is set before the arena's layout. p->segs
 * has room. */
static void add_segment(ot_plan *p, const ot_kernel *d, int first, int64_t rows, int64_t row_bytes,
                        int64_t panel)
{
    int64_t blk = gemm_block(rows, row_bytes, panel);
    /* A dot accumulating into a running sum (beta != 0) reads the rows it
     * adds to: they stay where they are. */
    int t = blk < rows && d->beta.mul == 0 ? d->store.index : -1;
    if (t >= 0) {
        size_t bytes = (size_t)(blk * d->store.strides[0]) * ot_dtype_size((ot_dtype)d->store.dtype);
        p->temp_offset[t] = (bytes + 63) & ~(size_t)63;
    }
    p->segs[p->nseg++] = (ot_segment){first, 2, rows, blk, t};
}

/* Whether dot d's temporary holds its result alone: not so for a part of
 * a concat, whose other parts a one-block result would lose. The other
 * dots of a running sum write the same elements (add_segment and
 * epilogue_fits see to those). */
static bool sole_writer(const ot_plan *p, const kindex *ix, int d)
{
    const ot_view *t = &p->kernels[d].store;
    for (int i = ix->wfirst[t->index]; i < ix->wfirst[t->index + 1]; i++) {
        const ot_kernel *kk = &p->kernels[ix->wlist[i]];
        for (int x = -1; ix->wlist[i] != d && x < kk->nxstore; x++) {
            const ot_view *o = x < 0 ? &kk->store : &kk->xstores[x].view;
            bool same_sum = kk->kind == OT_KER_DOT && o->offset == t->offset &&
                            kk->m == p->kernels[d].m && kk->n == p->kernels[d].n;
            if (o->space == t->space && o->index == t->index && !same_sum) return false;
        }
    }
    return true;
}

/* Whether unplaced reduction r may join segment sg right after its
 * epilogue e (see bsum_of); it reads e's result. */
static bool bsum_fits(const compiler *c, const kindex *ix, const ot_segment *sg, int e, int r)
{
    const ot_plan *p = c->plan;
    const ot_kernel *ek = &p->kernels[e], *rk = &p->kernels[r];
    bool one_block = sg->row_block >= sg->rows;
    bool ok = rk->kind == OT_KER_REDUCE && (one_block || walks_rows(rk, sg->rows, true));
    for (int l = 0; l < rk->nload && ok; l++) {
        const ot_view *v = &rk->loads[l];
        if (v->space != OT_SPACE_TEMP) continue;
        /* Per block it must read the rows the epilogue wrote, not the
         * same count of rows of a transpose (a square result). */
        if (v->index == ek->store.index) {
            ok = one_block || (row_step(rk, v, sg->rows) == row_step(ek, &ek->store, sg->rows) &&
                               offset_in_row(rk, v, sg->rows));
            /* The epilogue may write only part of it (a concat's): the
             * reduction must not pass the kernels writing the rest. */
            ok = ok && !writes_before(c, ix, v->index, ix->key[r], false);
        } else {
            int w = temp_writer(ix, v->index);
            ok = w < 0 || ix->key[w] < sg->first;
        }
    }
    return ok && !conflicts_before(c, ix, rk, ix->key[r]);
}

/* A reduction of the epilogue e's result that may join segment sg right
 * after it, while that result is in cache (neon's bsum: a bias gradient's
 * sum over the rows): its other inputs exist before the dot, moving it
 * earlier changes nothing the kernels it passes read or write, and it
 * either walks the rows the epilogue wrote or the segment is one block (a
 * sum down the rows needs every row; exec.c runs a one-block segment
 * unsliced), and no kernel it passes writes what it reads. The first such
 * kernel among the unplaced readers of e's result, or -1. */
static int bsum_of(const compiler *c, const kindex *ix, const ot_segment *sg, int e)
{
    const ot_kernel *ek = &c->plan->kernels[e];
    if (ek->store.space != OT_SPACE_TEMP) return -1;
    int t = ek->store.index, best = -1;
    for (int i = ix->rfirst[t]; i < ix->rfirst[t + 1]; i++) {
        int r = ix->rlist[i];
        if (unplaced_before(ix, r, best < 0 ? INT_MAX : ix->key[best]) && bsum_fits(c, ix, sg, e, r))
            best = r;
    }
    return best;
}

/* Whether kernel e, the only reader of conv d's result (d its only
 * writer), may run on each block of it as d writes them (exec_conv.c
 * says which e fit): as for a dot's epilogue, its other inputs exist
 * before d and moving it changes nothing the kernels it passes read or
 * write. */
static bool conv_epilogue_fits(const compiler *c, const kindex *ix, int d, int e)
{
    const ot_plan *p = c->plan;
    const ot_kernel *dk = &p->kernels[d], *ek = &p->kernels[e];
    int t = dk->store.index;
    if (ix->wfirst[t + 1] - ix->wfirst[t] != 1 || !ot__conv_epi_fits(dk, ek) ||
        kernels_conflict(c, dk, ek))
        return false;
    for (int l = 0; l < ek->nload; l++) {
        const ot_view *v = &ek->loads[l];
        if (v->space == OT_SPACE_TEMP && v->index != t &&
            writes_before(c, ix, v->index, ix->key[e], false))   /* a further output too */
            return false;
    }
    return !conflicts_before(c, ix, ek, ix->key[e]);
}

/* Puts kernel id at the next position of the new order. */
static void place(kindex *ix, int *order, int *n, int id)
{
    ix->key[id] = *n;
    order[(*n)++] = id;
}

/* Makes the new order into order: each kernel in the old order, and after
 * a dot the epilogue (and bsum) it pairs with. */
static void order_segments(compiler *c, kindex *ix, int *order)
{
    ot_plan *p = c->plan;
    int n = 0;
    for (int id = 0; id < p->nkernels; id++) {
        if (ix->key[id] < ix->nk) continue;
        int d = n;
        ix->cursor = id;
        place(ix, order, &n, id);
        const ot_kernel *dk = &p->kernels[id];
        if (dk->kind == OT_KER_CONV && dk->store.space == OT_SPACE_TEMP) {
            int e = sole_reader(ix, dk->store.index);
            if (e < 0 || ix->key[e] < ix->nk || !conv_epilogue_fits(c, ix, id, e)) continue;
            place(ix, order, &n, e);
            p->segs[p->nseg++] = (ot_segment){d, 2, 0, 0, -1};   /* blocks: exec_conv.c's */
            continue;
        }
        if (dk->kind != OT_KER_DOT || dk->batch != 1 || dk->m < 2 || dk->store.space != OT_SPACE_TEMP ||
            !sole_writer(p, ix, id))
            continue;
        int e = sole_reader(ix, dk->store.index);
        if (e < 0 || ix->key[e] < ix->nk || !epilogue_fits(c, ix, id, e)) continue;
        place(ix, order, &n, e);
        const ot_kernel *ek = &p->kernels[e];
        int64_t row_bytes = 8 * dk->n;
        for (int i = 1; i < ek->ndim; i++) row_bytes = row_bytes > 8 * ek->dims[i] ? row_bytes : 8 * ek->dims[i];
        add_segment(p, dk, d, dk->m, row_bytes, panel_bytes(c));
        ot_segment *sg = &p->segs[p->nseg - 1];
        int r = bsum_of(c, ix, sg, e);
        if (r >= 0) {
            place(ix, order, &n, r);
            sg->count = 3;
        }
    }
}

/* Pairs each dot with the elementwise kernel that alone reads its result
 * (moved right after it), so that kernel runs as an epilogue on blocks of
 * the dot's rows. Runs before the arena is laid out: it reorders kernels,
 * once, after choosing every segment. */
bool ot__sched_choose_dot_segments(compiler *c)
{
    ot_plan *p = c->plan;
    int nk = p->nkernels;
    if (!c->fused || nk < 2) return true;
    kindex ix;
    if (!kindex_new(&ix, p)) return false;
    int *order = ot__malloc(sizeof(int) * (size_t)nk);
    ot_kernel *moved = ot__malloc(sizeof *moved * (size_t)nk);
    ot_segment *segs = ot__realloc(p->segs, sizeof *segs * (size_t)(p->nseg + nk / 2 + 1));
    bool ok = order && moved && segs;
    if (segs) p->segs = segs;
    if (ok) {
        order_segments(c, &ix, order);
        for (int i = 0; i < nk; i++) moved[i] = p->kernels[order[i]];
        memcpy(p->kernels, moved, sizeof *moved * (size_t)nk);
    }
    free(order);
    free(moved);
    kindex_free(&ix);
    return ok;
}

/* ---- temporaries kept in the output ---------------------------------------- */

/* Whether a view's strides are the contiguous ones of shape (dims, nd). */
static bool contiguous_view(const int64_t *strides, const ot_shape *sh)
{
    int64_t st = 1;
    for (int d = sh->ndim - 1; d >= 0; d--) {
        if (sh->dims[d] != 1 && strides[d] != st) return false;
        st *= sh->dims[d];
    }
    return true;
}

/* Every view of temp t becomes output i's (same layout: both contiguous). */
static void retarget_temp(ot_plan *p, int t, int i)
{
    for (int k = 0; k < p->nkernels; k++) {
        ot_kernel *kk = &p->kernels[k];
        for (int v = -1 - kk->nxstore; v < kk->nload; v++) {
            ot_view *w = v >= 0 ? &kk->loads[v] : v == -1 ? &kk->store : &kk->xstores[-2 - v].view;
            if (w->space == OT_SPACE_TEMP && w->index == t) {
                w->space = OT_SPACE_OUT;
                w->index = i;
                free(kk->desc);
                kk->desc = ot__plan_describe(kk);
            }
        }
    }
    p->temp_offset[t] = 0;   /* no arena bytes */
}

/* A temporary that only the kernel writing output i reads, element for
 * element, is kept in the output itself (as a hand-written softmax keeps
 * exp in its output and divides in place): one buffer fewer to stream
 * through memory. Both must be contiguous, of one shape and dtype, and the
 * output must overlap no leaf. */
/* Whether every load of temp t in kernel k reads it element for element with
 * k's store: a transposed or broadcast read of a temp kept in the output
 * would see elements the kernel has already overwritten. */
static bool reads_aligned(const ot_kernel *k, int t)
{
    for (int l = 0; l < k->nload; l++) {
        const ot_view *v = &k->loads[l];
        if (v->space == OT_SPACE_TEMP && v->index == t && !same_strides(v, &k->store, k->ndim))
            return false;
    }
    return true;
}

/* Whether the values stored in temp t (by the entries that own it, views
 * aside) are n elements: a kernel reading only a slice of t reads it with
 * the store's strides, yet t is larger than the output. */
static bool temp_holds(const compiler *c, int t, int64_t n)
{
    for (int e = 0; e < c->w->n; e++) {
        const storage *st = &c->ci[e].st;
        if (c->ci[e].canon == e && st->has && st->space == OT_SPACE_TEMP && st->index == t &&
            !(is_op(c, e) && kind_of(c, e) == OT_KIND_SHAPE && !c->ci[e].mat) &&
            ot__numel(&node_of(c, e)->shape) != n)
            return false;
    }
    return true;
}

/* Whether dot w, the only writer of temp t, may write output i (n
 * elements, contiguous, overlapping no leaf) in t's place: one product of
 * all of t, row after row, not a running sum (whose later dots read what
 * they add to). Its epilogue then runs in place over the rows the GEMM
 * just wrote, as a hand-written layer runs it (cblas_sgemm into y, then
 * bias and activation over y), instead of reading t and writing the
 * output besides: the result's bytes are touched once, not twice. The
 * segment that blocked t (one block of rows reused) then blocks the
 * output's rows instead. */
static bool dot_into_output(const compiler *c, const kindex *ix, int w, int t, int64_t n)
{
    const ot_kernel *dk = &c->plan->kernels[w];
    const ot_view *st = &dk->store;
    return c->outs && dk->batch == 1 && dk->beta.mul == 0 && st->offset == 0 &&
           dk->m * dk->n == n && (dk->n <= 1 || st->strides[1] == 1) &&
           (dk->m <= 1 || st->strides[0] == dk->n) && ix->wfirst[t + 1] - ix->wfirst[t] == 1;
}

/* The segments blocking temp t block nothing now (it went to an output). */
static void unblock_temp(ot_plan *p, int t)
{
    for (int s = 0; s < p->nseg; s++)
        if (p->segs[s].block_temp == t) p->segs[s].block_temp = -1;
}

/* Whether the writer of temp t (read element for element by an output's
 * kernel alone) may write that output of n elements instead: it writes
 * all of t, and nothing else owns part of t. */
static bool writer_fits(const compiler *c, const kindex *ix, int t, int64_t n)
{
    const ot_plan *p = c->plan;
    int w = temp_writer(ix, t);
    if (w < 0) return false;
    const ot_kernel *wk = &p->kernels[w];
    if (wk->kind == OT_KER_DOT) return dot_into_output(c, ix, w, t, n) && temp_holds(c, t, n);
    bool by_xstore = wk->store.index != t;
    size_t bytes = (size_t)n * ot_dtype_size((ot_dtype)p->kernels[sole_reader(ix, t)].store.dtype);
    return (by_xstore || wk->store.space == OT_SPACE_TEMP) &&
           p->temp_offset[t] == ((bytes + 63) & ~(size_t)63) && temp_holds(c, t, n);
}

/* The temporaries' row steps when the plan will run per block of rows,
 * one block of each temporary kept in each thread (choose_row_blocks'
 * choice, made after this pass), and its kernels may stream; else NULL. */
static int64_t *local_steps(const compiler *c)
{
    const ot_plan *p = c->plan;
    const ot_cpu *cpu = c->be->impl;
    int64_t row_bytes;
    bool dots;
    if (p->nseg || !cpu->jit || !cpu->stream_bytes || !p->ntemps) return NULL;
    int64_t rows = blockable_rows(c, &row_bytes, &dots);
    if (!rows || dots || !blocks_local(elementwise_block(row_bytes), rows, block_slots(c)))
        return NULL;
    return temp_steps(p, rows);
}

/* Whether temp t, kept one block at a time in cache (step from
 * local_steps), should stay there rather than go into the output that
 * kernel k writes from it: k then streams the output out once. Kept in
 * the output, its lines came from memory before the writer's ordinary
 * stores and were written again by k, which cannot stream what it reads
 * (layer norm's d/dx: 13% of its time, 4096x4096 on Zen 4). */
static bool stays_local(const compiler *c, const int64_t *step, const ot_kernel *k, int t)
{
    const ot_cpu *cpu = c->be->impl;
    return step && step[t] > 0 && ot__sched_streams_blocked(c->plan, k, cpu->stream_bytes);
}

/* Whether k copies a view onto itself, element for element in its dtype:
 * what retarget_temp leaves of a kernel that copied a temporary into the
 * output the temporary went to (a conv's result: the conv wrote the
 * output, then a pass, or an epilogue per block, read and wrote it). */
static bool copies_onto_itself(const ot_kernel *k)
{
    if (k->kind != OT_KER_EW || k->nxstore || k->nload != 1 || k->ninsn < 1) return false;
    const ot_insn *in = &k->insns[0];
    const ot_view *a = &k->loads[0], *b = &k->store;
    if (in->code != OT_I_LOAD || in->arg != 0 || in->kd != ot__kd((ot_dtype)a->dtype)) return false;
    for (int i = 1; i < k->ninsn; i++) {   /* casts to the dtype it has (autodiff's) */
        const ot_insn *c = &k->insns[i];
        if (c->code != OT_I_CAST || c->kd != in->kd || c->kd_from != in->kd ||
            c->a != k->insns[i - 1].dst)
            return false;
    }
    return k->result == k->insns[k->ninsn - 1].dst && a->space == b->space &&
           a->index == b->index && a->dtype == b->dtype && same_strides(a, b, k->ndim);
}

static int segment_of(const ot_plan *p, int k)   /* or -1 */
{
    for (int s = 0; s < p->nseg; s++)
        if (k >= p->segs[s].first && k < p->segs[s].first + p->segs[s].count) return s;
    return -1;
}

/* Removes kernel k, which copies a view onto itself, and the segment it
 * was the epilogue of (a segment runs a dot or a convolution with its
 * epilogue; alone, that kernel runs as any other). One in a segment of
 * three (a dot, its epilogue and a sum of it) stays. */
static void drop_copy(ot_plan *p, int k)
{
    int s = segment_of(p, k);
    if (s >= 0 && p->segs[s].count != 2) return;
    if (s >= 0) {
        memmove(&p->segs[s], &p->segs[s + 1], sizeof *p->segs * (size_t)(p->nseg - s - 1));
        p->nseg--;
    }
    ot_kernel *kk = &p->kernels[k];
    free(kk->loads);
    free(kk->load_shapes);
    free(kk->insns);
    free(kk->desc);
    memmove(kk, kk + 1, sizeof *kk * (size_t)(p->nkernels - k - 1));
    p->nkernels--;
    for (int t = 0; t < p->nseg; t++)
        if (p->segs[t].first > k) p->segs[t].first--;
}

void ot__sched_temps_into_outputs(compiler *c)
{
    ot_plan *p = c->plan;
    kindex ix;
    /* Without memory for the index, temporaries stay where they are. */
    if (!c->fused || !kindex_new(&ix, p)) return;
    int64_t *step = local_steps(c);   /* NULL also without memory: nothing stays */
    for (int k = 0; k < p->nkernels; k++) {
        const ot_kernel *kk = &p->kernels[k];
        if (kk->kind != OT_KER_EW || kk->store.space != OT_SPACE_OUT || kk->nxstore) continue;
        int i = kk->store.index;
        ot_shape osh = out_shape(c, i);
        if (c->outs && (!contiguous_view(c->outs[i]->strides, &osh) || !ot__fuse_out_alone(c, i, -1))) continue;
        for (int l = 0; l < kk->nload; l++) {
            const ot_view *v = &kk->loads[l];
            if (v->space != OT_SPACE_TEMP || !same_strides(v, &kk->store, kk->ndim) ||
                v->dtype != kk->store.dtype || sole_reader(&ix, v->index) != k ||
                !reads_aligned(kk, v->index))
                continue;
            int t = v->index;   /* retarget_temp rewrites *v */
            if (!writer_fits(c, &ix, t, ot__numel(&osh))) continue;
            if (stays_local(c, step, kk, t)) break;   /* another moved in, k could not stream */
            retarget_temp(p, t, i);
            unblock_temp(p, t);
            break;
        }
    }
    free(step);
    kindex_free(&ix);
    for (int k = p->nkernels - 1; k >= 0; k--)
        if (copies_onto_itself(&p->kernels[k])) drop_copy(p, k);
}

/*
 * cpu.c - the cpu backend object: its configuration in force (kernel
 * table, generated code, streaming threshold; config.c resolved what was
 * asked), the plan cache and thread pool it owns, and its vtable: assign,
 * which gets a plan (compile.c) and runs it (exec.c), explain, and a
 * program's steps prepared as plans with their own bindings and run in the
 * program's one arena.
 */
#define _GNU_SOURCE   /* sched_getaffinity, CPU_COUNT */
#include "blas.h"
#include "cpu.h"
#include "threads.h"

#include <sched.h>
#include <stdio.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

static int cpu_assign_plain(ot_backend *be, int n, ot_tensor *const outs[],
                            ot_node *const trees[])
{
    ot_plan *plan;
    ot_walk *walk;
    ot_binding bind;
    int rc = ot__plan_get(be, n, outs, trees, &plan, &walk, &bind);
    if (rc) return rc;
    rc = ot__plan_run(be, plan, &bind, n, trees);
    if (!bind.borrowed) ot__plan_release(plan);
    ot__walk_done(be, walk);
    if (rc == 0) ot__stat_add(ot__stats_mine(&be->stats), OT__STAT_ASSIGNS, 1);
    return rc;
}

/* Trees or outputs of f16/bf16 go through f32 (half_assign.c). */
static int cpu_assign_many(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[])
{
    if (ot__half_involved(n, outs, trees))
        return ot__half_assign(be, cpu_assign_plain, n, outs, trees);
    return cpu_assign_plain(be, n, outs, trees);
}

static void cpu_destroy(ot_backend *be)
{
    ot_cpu *cpu = be->impl;
    if (!cpu) return;
    ot__threads_free(cpu->threads);
    ot__plan_cache_free(cpu->cache);
    ot__walk_free(atomic_load(&cpu->spare));
    free(cpu);
}

/* The size of the data or unified cache of `want` level (0: the highest)
 * that sysfs lists for cpu0, 0 where sysfs is absent (containers and some
 * VMs hide it). */
static size_t cache_sysfs(int want)
{
    size_t best = 0;
    int best_level = 0;
    for (int i = 0; i < 8; i++) {
        char path[96];
        unsigned long size = 0;
        int level = 0;
        char unit = 0;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", i);
        FILE *f = fopen(path, "r");
        if (!f) break;
        bool ok = fscanf(f, "%d", &level) == 1;
        fclose(f);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/type", i);
        f = fopen(path, "r");
        char type[16] = "";
        if (f) {
            ok = ok && fscanf(f, "%15s", type) == 1;
            fclose(f);
        }
        if (strcmp(type, "Instruction") == 0 || (want && level != want)) continue;
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", i);
        f = fopen(path, "r");
        if (!f) continue;
        ok = ok && fscanf(f, "%lu%c", &size, &unit) >= 1;
        fclose(f);
        size *= unit == 'K' ? 1024ul : unit == 'M' ? 1024ul * 1024 : 1;
        if (ok && level >= best_level) {
            best_level = level;
            best = size;
        }
    }
    return best;
}

#if defined(__x86_64__) || defined(__i386__)
/* L2 (want 2) or the highest level (want 0) from AMD's older leaf
 * 0x80000006: ECX[31:16] the L2 in KiB, EDX[31:18] the L3 in units of
 * 512 KiB (Intel leaves EDX 0). Hypervisors that hide the topology
 * extensions, and with them leaf 0x8000001D, still fill this one. */
static size_t cache_cpuid_legacy(unsigned want)
{
    unsigned a, b, c, d, max_ext = __get_cpuid_max(0x80000000u, NULL);
    if (max_ext < 0x80000006u || !__get_cpuid(0x80000006u, &a, &b, &c, &d)) return 0;
    size_t l2 = (size_t)(c >> 16) << 10, l3 = (size_t)(d >> 18) << 19;
    return want == 2 ? l2 : l3 ? l3 : l2;
}

/* The data or unified cache of `want` level (0: the highest) of the
 * deterministic cache leaves: 4 on Intel, 0x8000001D on AMD (same layout:
 * ways, partitions, line size and sets, each stored minus one); where
 * neither lists a cache, the older leaf above. */
static size_t cache_cpuid(unsigned want)
{
    unsigned a, b, c, d, max_ext = __get_cpuid_max(0x80000000u, NULL);
    unsigned leaf = max_ext >= 0x8000001Du && __get_cpuid(0x80000001u, &a, &b, &c, &d) &&
                            (c >> 22 & 1)   /* topology extensions */
                        ? 0x8000001Du
                        : __get_cpuid_max(0, NULL) >= 4 ? 4u : 0u;
    size_t best = 0;
    unsigned best_level = 0;
    for (unsigned i = 0; leaf && i < 16; i++) {
        __cpuid_count(leaf, i, a, b, c, d);
        unsigned type = a & 31, level = a >> 5 & 7;
        if (type == 0) break;
        if (type == 2 || (want && level != want)) continue;   /* instruction cache, other levels */
        size_t size = (size_t)((b >> 22) + 1) * ((b >> 12 & 1023) + 1) * ((b & 4095) + 1) *
                      ((size_t)c + 1);
        if (level >= best_level) {
            best_level = level;
            best = size;
        }
    }
    return best ? best : cache_cpuid_legacy(want);
}
#else
static size_t cache_cpuid(unsigned want)
{
    (void)want;
    return 0;
}
#endif

size_t ot__llc_cpuid(void) { return cache_cpuid(0); }

/* The last-level cache's size as reported: sysfs, else CPUID, else 32 MiB. */
static size_t last_level_cache(void)
{
    size_t s = cache_sysfs(0);
    if (!s) s = ot__llc_cpuid();
    return s ? s : (size_t)32 << 20;
}

/* A core's L2 as reported (sysfs, else CPUID), 0 where neither says. */
static size_t l2_cache(void)
{
    size_t s = cache_sysfs(2);
    return s ? s : cache_cpuid(2);
}

long ot__usable_cpus(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return sysconf(_SC_NPROCESSORS_ONLN);
}

size_t ot__cache_share(size_t reported, long cpus)
{
    if (cpus <= 0 || (size_t)cpus > SIZE_MAX / OT__CACHE_PER_CPU) return reported;
    size_t cap = (size_t)cpus * OT__CACHE_PER_CPU;
    return reported < cap ? reported : cap;
}

size_t ot__gemm_panel_bytes(size_t l2, size_t l3, long cpus)
{
    size_t per_cpu = cpus > 0 ? ot__cache_share(l3, cpus) / (size_t)cpus : l3;
    size_t c = l2 ? l2 : OT__PANEL_L2_UNKNOWN;
    if (per_cpu && per_cpu < c) c = per_cpu;
    c /= 2;
    return c < OT__PANEL_MIN ? OT__PANEL_MIN : c > OT__PANEL_MAX ? OT__PANEL_MAX : c;
}

/* The streaming-store threshold in force: by default, kernels moving the
 * cache this process can count on (ot__cache_share of OT_L3_BYTES or the
 * reported size) or more, since their outputs cannot stay in the cache for
 * the reader anyway, and streaming saves reading each line before it is
 * written (a fifth of W1's memory traffic). 0 means never. */
static size_t stream_threshold(int64_t asked, size_t l3_bytes)
{
    if (asked == OT_STREAM_NEVER) return 0;
    if (asked) return (size_t)asked;
    return ot__cache_share(l3_bytes, ot__usable_cpus());
}

static int cpu_init(ot_backend *be)
{
    /* The option's name (config.c checked it) parsed once: from here on the
     * ISA is the table's. */
    int isa = be->opts.isa ? ot__isa_parse(be->opts.isa) : -1;
    /* What the process's GEMM core is settled with at its first dot
     * (blas_core.c). */
    ot__blas_request(be->blas_core);
    const ot_kernels *k = ot__kernels_select(isa, be->isa_from);
    if (!k) return ot_errcode();
    ot_cpu *cpu = ot__calloc(1, sizeof *cpu);
    if (!cpu) return ot__err_set(OT_ENOMEM, NULL, 0, "backend_new", "out of memory");
    be->impl = cpu;
    cpu->k = k;
    cpu->jit = be->opts.jit != OT_JIT_OFF && ot__jit_available(k);
    /* the caches to plan for: OT_L2_BYTES / OT_L3_BYTES, else as reported */
    size_t l2 = be->l2_bytes ? be->l2_bytes : l2_cache();
    size_t l3 = be->l3_bytes ? be->l3_bytes : last_level_cache();
    cpu->stream_bytes = stream_threshold(be->opts.stream_bytes, l3);
    cpu->panel_bytes = ot__gemm_panel_bytes(l2, l3, ot__usable_cpus());
    be->opts.isa = ot__isa_name(k->isa);
    be->opts.jit = cpu->jit ? OT_JIT_ON : OT_JIT_OFF;
    be->opts.stream_bytes = cpu->stream_bytes ? (int64_t)cpu->stream_bytes : OT_STREAM_NEVER;
    cpu->cache = ot__plan_cache_new(be->opts.plan_cache);
    if (!be->opts.threads) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        be->opts.threads = n > OT_MAX_THREADS ? OT_MAX_THREADS : n > 0 ? (int)n : 1;
    }
    int rc = cpu->cache ? 0 : ot__err_set(OT_ENOMEM, NULL, 0, "backend_new", "out of memory");
    if (!rc && be->opts.threads > 1 && !(cpu->threads = ot__threads_new(be->opts.threads - 1)))
        rc = ot_errcode();
    if (rc) {
        cpu_destroy(be);
        be->impl = NULL;
    }
    return rc;
}

/* ---- the vtable's slots for ot_explain and programs ----------------------- */

/* A plan's text, then, where it has a dot, which GEMM runs the dots. */
static int explain_plan(const ot_plan *plan, FILE *f)
{
    int rc = ot__plan_explain(plan, f);
    bool dot = false;
    for (int i = 0; i < plan->nkernels; i++) dot = dot || plan->kernels[i].kind == OT_KER_DOT;
    if (!rc && dot) ot__blas_explain(f);
    return rc || ferror(f) ? OT_EIO : 0;
}

/* The plan the planner makes for the trees (from its cache), explained. */
static int cpu_explain_plain(ot_backend *be, int n, ot_tensor *const outs[],
                             ot_node *const trees[], FILE *f)
{
    ot_plan *plan;
    ot_walk *walk;
    ot_binding bind;
    int rc = ot__plan_get(be, n, outs, trees, &plan, &walk, &bind);
    if (rc) return rc;
    rc = explain_plan(plan, f);
    if (!bind.borrowed) ot__plan_release(plan);
    ot__walk_done(be, walk);
    return rc;
}

/* ot_explain on cpu: the plan it runs for the trees; for trees that
 * involve f16/bf16, the conversion route and the plan of its f32 trees. */
static int cpu_explain(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                       FILE *f)
{
    if (ot__half_involved(n, outs, trees))
        return ot__half_explain_route(be, cpu_assign_plain, cpu_explain_plain, n, outs, trees, f);
    return cpu_explain_plain(be, n, outs, trees, f);
}

static void cpu_release(ot__prepared *s)
{
    if (ot__half_step_is(s)) {
        ot__half_step_release(s);
        return;
    }
    ot__plan_release(s->impl);
    free(s->leaf);
    free((double *)s->param);
    *s = (ot__prepared){0};
}

/* A program's step: its plan, referenced, with copies of its bindings (the
 * walk's arrays go back to the backend for its next call); a step that
 * involves f16/bf16 keeps its trees for ot__half_assign (half_step.c). */
static int cpu_prepare(ot_backend *be, int n, ot_tensor *const outs[], ot_node *const trees[],
                       ot__prepared *s)
{
    ot_plan *plan;
    ot_walk *walk;
    ot_binding bind;
    if (ot__half_involved(n, outs, trees))
        return ot__half_step_prepare(be, cpu_assign_plain, cpu_explain_plain, n, outs, trees, s);
    int rc = ot__plan_get(be, n, outs, trees, &plan, &walk, &bind);
    if (rc) return rc;
    if (bind.borrowed) atomic_fetch_add(&plan->refs, 1);
    size_t nl = (size_t)plan->nleaves, np = (size_t)plan->nparams;
    char **leaf = ot__malloc(sizeof *leaf * (nl ? nl : 1));
    double *param = ot__malloc(sizeof *param * (np ? np : 1));
    *s = (ot__prepared){plan, leaf, param, outs, plan->nleaves, plan->nkernels, 0};
    if (leaf && nl) memcpy(leaf, bind.leaf, sizeof *leaf * nl);
    if (param && np) memcpy(param, bind.param, sizeof *param * np);
    ot__walk_done(be, walk);
    if (!leaf || !param) rc = ot__err_set(OT_ENOMEM, NULL, 0, "assign", "out of memory");
    else if (!ot__plan_run_bytes(be, plan, &s->arena_bytes))
        rc = ot__err_set(OT_EOVERFLOW, NULL, 0, "assign", "the run's scratch size overflows");
    if (rc) cpu_release(s);
    return rc;
}

/* One run of a prepared step: a direct plan as one call of its code, any
 * other through the executor in the caller's arena. */
static int cpu_run(ot_backend *be, const ot__prepared *s, char *arena, int n,
                   ot_node *const trees[])
{
    if (ot__half_step_is(s)) return ot__half_step_run(s);
    const ot_plan *plan = s->impl;
    ot_binding bind = {s->leaf, s->param, s->outs, false};
    if (plan->direct) {
        ot__plan_run_direct(be, plan, &bind);
        return 0;
    }
    int rc = ot__plan_check_indices(plan, &bind);
    if (rc) return rc;
    int over = ot__plan_run_at(be, plan, &bind, arena);
    return over < 0 ? 0 : ot__plan_overflow(plan, over, n, trees);
}

static int cpu_explain_prepared(const ot__prepared *s, FILE *f)
{
    return ot__half_step_is(s) ? ot__half_step_explain(s, f) : explain_plan(s->impl, f);
}

const ot_backend_vt ot__cpu_vt = {
    .name = "cpu",
    .cpu_opts = true,
    .init = cpu_init,
    .assign_many = cpu_assign_many,
    .destroy = cpu_destroy,
    .explain = cpu_explain,
    .prepare = cpu_prepare,
    .run = cpu_run,
    .explain_prepared = cpu_explain_prepared,
    .release = cpu_release,
};

/*
 * blas_core.c - which GEMM runs the cpu backend's dots, decided once per
 * process: the OpenBLAS core, checked, with fallbacks; and ot_explain's
 * line about it.
 *
 * A DYNAMIC_ARCH OpenBLAS picks its kernels by CPU model, and a model it
 * does not know gets an old core: Debian 12's 0.3.21 runs Prescott (SSE3)
 * on an Emerald Rapids Xeon (family 6, model 207), 17 GFLOP/s for sgemm
 * 1024^3 on one thread where its SkylakeX core does 105 (Haswell: 63).
 * So before the process's first dot (or ot_explain of one) this compares
 * the core's vector class
 * (blas_cores.h) with the CPU's features and, when the core is narrower,
 * restarts the library's dispatch on the widest core the CPU runs:
 * gotoblas_dynamic_quit, OPENBLAS_CORETYPE set for the one call of
 * gotoblas_dynamic_init (which reads it, then sets the core's block sizes)
 * and unset again. The entry points are looked up with dlsym, so another
 * BLAS still links and runs (its core is reported as unknown). A user's
 * OPENBLAS_CORETYPE is never overridden; OT_BLAS_CORE=keep|auto|<core>
 * is ours (config.c reads it). Choosing the core is cheaper than a second
 * BLAS or GEMM kernels of our own and gets the same kernels a user tuning
 * by hand gets.
 *
 * Whatever core runs is then checked against a plain C product (blas.c;
 * some cores compute wrong results on CPUs they do not know: a few ms,
 * which is why this waits for a dot rather than running at every cpu
 * backend's creation, most of which never multiply); a core that
 * disagrees falls back to the core found, and that failing too, to the C
 * loop, so that results stay right (slowly), and the reason is kept for
 * ot_explain.
 *
 * The measurements ot_explain prints (sgemm's rate, the FMA peak from a
 * loop of independent FMA chains on the widest vectors, not from a clock
 * frequency a VM may misreport) are made once, on the first explain that
 * shows a dot, in a few ms.
 */
#define _GNU_SOURCE   /* RTLD_DEFAULT */
#include "blas.h"
#include "blas_cores.h"
#include "cpu.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdatomic.h>
#include <strings.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define BLAS_X86 1
#include <immintrin.h>
#else
#define BLAS_X86 0
#endif

/* ---- the policy ------------------------------------------------------------ */

#define CORE_ROW(nm, cls) {#nm, cls},
static const struct core_row {
    const char *name;
    int cls;
} cores[] = {OT__BLAS_CORES(CORE_ROW)};
#undef CORE_ROW
#define NCORES ((int)(sizeof cores / sizeof cores[0]))
static const char *const class_names[] = {"sse", "avx", "avx2 and fma", "avx512 (f, bw, dq, vl)"};

static const struct core_row *core_named(const char *name)
{
    for (int i = 0; name && i < NCORES; i++)
        if (strcasecmp(name, cores[i].name) == 0) return &cores[i];
    return NULL;
}

int ot__blas_cpu_class(unsigned f)
{
    unsigned avx512 = OT__BLAS_F_AVX512F | OT__BLAS_F_AVX512BW | OT__BLAS_F_AVX512DQ |
                      OT__BLAS_F_AVX512VL;
    if ((f & avx512) == avx512) return OT__BLAS_AVX512;
    if ((f & (OT__BLAS_F_AVX2 | OT__BLAS_F_FMA)) == (OT__BLAS_F_AVX2 | OT__BLAS_F_FMA))
        return OT__BLAS_AVX2;
    return f & OT__BLAS_F_AVX ? OT__BLAS_AVX : OT__BLAS_SSE;
}

unsigned ot__blas_cpu_features(void)
{
#if BLAS_X86
    /* __builtin_cpu_supports takes a literal: one test per feature. */
    __builtin_cpu_init();
    unsigned f = 0;
    f |= __builtin_cpu_supports("avx") ? OT__BLAS_F_AVX : 0u;
    f |= __builtin_cpu_supports("avx2") ? OT__BLAS_F_AVX2 : 0u;
    f |= __builtin_cpu_supports("fma") ? OT__BLAS_F_FMA : 0u;
    f |= __builtin_cpu_supports("avx512f") ? OT__BLAS_F_AVX512F : 0u;
    f |= __builtin_cpu_supports("avx512bw") ? OT__BLAS_F_AVX512BW : 0u;
    f |= __builtin_cpu_supports("avx512dq") ? OT__BLAS_F_AVX512DQ : 0u;
    f |= __builtin_cpu_supports("avx512vl") ? OT__BLAS_F_AVX512VL : 0u;
    return f;
#else
    return 0;
#endif
}

/* The core auto wants on a CPU of class cls that `has`: the widest
 * OpenBLAS x86-64 cores, SkylakeX then Haswell; NULL below AVX2. */
static const char *widest(int cls, bool (*has)(const char *name))
{
    if (cls >= OT__BLAS_AVX512 && (!has || has("SkylakeX"))) return "SkylakeX";
    if (cls >= OT__BLAS_AVX2 && (!has || has("Haswell"))) return "Haswell";
    return NULL;
}

/* A named request: the core, unless the CPU lacks its class. */
static const char *named(const struct core_row *cur, const struct core_row *want, int cls,
                         bool (*has)(const char *name), char *why, size_t n)
{
    if (want->cls > cls) {
        snprintf(why, n, "OT_BLAS_CORE=%s needs %s, which this CPU lacks: kept", want->name,
                 class_names[want->cls]);
        return NULL;
    }
    if (has && !has(want->name)) {
        snprintf(why, n, "OT_BLAS_CORE=%s: this OpenBLAS has no such core: kept", want->name);
        return NULL;
    }
    snprintf(why, n, "OT_BLAS_CORE=%s", want->name);
    return want == cur ? NULL : want->name;
}

const char *ot__blas_pick(const char *core, int cls, const char *request, const char *user_env,
                          bool (*has)(const char *name), char *why, size_t n)
{
    const struct core_row *cur = core_named(core), *want = core_named(request);
    if (!core) {
        snprintf(why, n, "not OpenBLAS (no openblas_get_corename)");
        return NULL;
    }
    if (user_env) {
        snprintf(why, n, "OPENBLAS_CORETYPE=%s set by the user", user_env);
        return NULL;
    }
    if (!cur) {
        snprintf(why, n, "core %s is not in optree's table: kept", core);
        return NULL;
    }
    if (request && strcmp(request, "keep") == 0) {
        snprintf(why, n, "OT_BLAS_CORE=keep");
        return NULL;
    }
    if (want) return named(cur, want, cls, has, why, n);
    const char *best = cur->cls < cls ? widest(cls, has) : NULL;
    if (best && core_named(best)->cls > cur->cls) {
        snprintf(why, n, "%s is narrower than this CPU's %s", cur->name, class_names[cls]);
        return best;
    }
    if (cur->cls >= cls)
        snprintf(why, n, "%s is as wide as this CPU's %s", cur->name, class_names[cls]);
    else
        snprintf(why, n, "no core wider than %s for this CPU's %s", cur->name, class_names[cls]);
    return NULL;
}

/* ---- settling: switch, check, fall back ---------------------------------- */

static void set_name(char *dst, const char *name)
{
    snprintf(dst, 24, "%s", name ? name : "");
}

/* Whether the products of the core in force are right; else the reason
 * joins why. */
static bool core_agrees(const ot__blas_ops *ops, const char *core, ot__blas_state *st)
{
    char bad[160];
    if (ops->agrees(bad, sizeof bad)) return true;
    size_t len = strlen(st->why);
    snprintf(st->why + len, sizeof st->why - len, "; %s disagreed with the C product (%s)",
             core[0] ? core : "the BLAS", bad);
    return false;
}

void ot__blas_settle(const ot__blas_ops *ops, const char *request, int cpu_class,
                     const char *user_env, ot__blas_state *st)
{
    *st = (ot__blas_state){0};
    const char *core = ops->core();
    set_name(st->was, core);
    set_name(st->now, core);
    const char *target = ot__blas_pick(core, cpu_class, request, user_env, ops->has, st->why,
                                       sizeof st->why);
    if (target) {
        if (ops->set(target)) {
            set_name(st->now, target);
            if (core_agrees(ops, st->now, st)) return;
        } else {
            size_t len = strlen(st->why);
            snprintf(st->why + len, sizeof st->why - len, "; switching to %s failed", target);
        }
        /* Back to the core the library chose itself, unless it still runs. */
        const char *cur = ops->core();
        if (!(cur && strcasecmp(cur, st->was) == 0) && !ops->set(st->was)) {
            size_t len = strlen(st->why);
            snprintf(st->why + len, sizeof st->why - len, "; switching back to %s failed",
                     st->was);
            st->loop = true;
            return;
        }
        set_name(st->now, st->was);
    }
    st->loop = !core_agrees(ops, st->now, st);
}

/* ---- the real library ---------------------------------------------------- */

static void *blas_sym(const char *name) { return dlsym(RTLD_DEFAULT, name); }

static const char *real_core(void)
{
    char *(*fn)(void) = (char *(*)(void))blas_sym("openblas_get_corename");
    return fn ? fn() : NULL;
}

/* gotoblas_<NAME> is each core's table in a DYNAMIC_ARCH build. */
static bool real_has(const char *name)
{
    char sym[48] = "gotoblas_";
    for (size_t i = 0; name[i] && i + 10 < sizeof sym; i++)
        sym[9 + i] = (char)(name[i] >= 'a' && name[i] <= 'z' ? name[i] - 32 : name[i]);
    return blas_sym(sym) != NULL;
}

/* OpenBLAS reads OPENBLAS_CORETYPE only in gotoblas_dynamic_init; the
 * variable is unset again so that the process's environment is as the
 * user left it (this runs only where the user did not set it). */
static bool real_set(const char *name)
{
    void (*quit)(void) = (void (*)(void))blas_sym("gotoblas_dynamic_quit");
    void (*init)(void) = (void (*)(void))blas_sym("gotoblas_dynamic_init");
    if (!quit || !init) return false;
    quit();
    setenv("OPENBLAS_CORETYPE", name, 1);
    init();
    unsetenv("OPENBLAS_CORETYPE");
    const char *now = real_core();
    return now && strcasecmp(now, name) == 0;
}

static bool real_agrees(char *why, size_t n) { return ot__gemm_agrees(ot__gemm_blas, why, n); }

static const ot__blas_ops real_ops = {real_core, real_set, real_has, real_agrees};

static pthread_mutex_t settle_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool settled, use_loop;
static ot__blas_state state;

bool ot__blas_setup_with(const ot__blas_ops *ops, const char *request)
{
    bool first = false;
    if (atomic_load_explicit(&settled, memory_order_acquire)) return false;
    pthread_mutex_lock(&settle_lock);
    if (!atomic_load_explicit(&settled, memory_order_relaxed)) {
        const char *user = getenv("OPENBLAS_CORETYPE");
        ot__blas_settle(ops, request, ot__blas_cpu_class(ot__blas_cpu_features()),
                        user && *user ? user : NULL, &state);
        atomic_store_explicit(&use_loop, state.loop, memory_order_relaxed);
        atomic_store_explicit(&settled, true, memory_order_release);
        first = true;
    }
    pthread_mutex_unlock(&settle_lock);
    return first;
}

static _Atomic(const char *) requested;

void ot__blas_request(const char *request)
{
    const char *none = NULL;
    atomic_compare_exchange_strong(&requested, &none, request);
}

bool ot__blas_ready(void)
{
    if (!atomic_load_explicit(&settled, memory_order_acquire)) {
        const char *r = atomic_load(&requested);
        ot__blas_setup_with(&real_ops, r ? r : "auto");
    }
    return ot__blas_loop();
}

bool ot__blas_loop(void) { return atomic_load_explicit(&use_loop, memory_order_relaxed); }

const ot__blas_state *ot__blas_state_get(void) { return &state; }

/* ---- measurements for ot_explain ------------------------------------------- */

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

#if BLAS_X86
/* FMA_LOOP(name, tgt, V, lanes, set1, fma, add, store): a function
 * returning the FLOPs of `iters` rounds of 12 independent FMA chains
 * (latency 4 x 2 ports = 8 in flight on current x86 cores; 12 leaves
 * room) on V of `lanes` floats, the sum kept so the loop is not dropped.
 * The chains start apart: started alike (as the first version did) the
 * compiler merged them into 2, and the "peak" was a latency-bound loop
 * counted as 12 chains. */
#define FMA_LOOP(name, tgt, V, lanes, set1, fma, add, store)                   \
    __attribute__((target(tgt))) static double name(long iters)               \
    {                                                                            \
        V m = set1(0.999999f), a = set1(1e-7f), x[12];                           \
        /* distinct starts: equal chains would be computed once */               \
        _Pragma("GCC unroll 12") for (int j = 0; j < 12; j++) x[j] = set1(1.0f + 0x1p-10f * (float)j); \
        for (long i = 0; i < iters; i++)                                         \
            _Pragma("GCC unroll 12") for (int j = 0; j < 12; j++) x[j] = fma(x[j], m, a); \
        _Pragma("GCC unroll 12") for (int j = 1; j < 12; j++) x[0] = add(x[0], x[j]); \
        float lane[lanes];                                                       \
        store(lane, x[0]);                                                       \
        volatile float sink = lane[0];                                           \
        (void)sink;                                                              \
        return (double)iters * 12 * lanes * 2;                                   \
    }
FMA_LOOP(fma_loop_512, "avx512f", __m512, 16, _mm512_set1_ps, _mm512_fmadd_ps, _mm512_add_ps,
         _mm512_storeu_ps)
FMA_LOOP(fma_loop_256, "avx2,fma", __m256, 8, _mm256_set1_ps, _mm256_fmadd_ps, _mm256_add_ps,
         _mm256_storeu_ps)
#endif

/* One core's f32 FMA peak in GFLOP/s, the best of 5 runs of at least
 * 0.2 ms (the best, since a shared machine only ever slows a run; the
 * rounds grow until a run is that long, so that a slow host, valgrind,
 * runs few); 0 without FMA. *isa names the vectors. */
static double fma_peak(const char **isa)
{
    double (*loop)(long) = NULL;
#if BLAS_X86
    int cls = ot__blas_cpu_class(ot__blas_cpu_features());
    loop = cls >= OT__BLAS_AVX512 ? fma_loop_512 : cls >= OT__BLAS_AVX2 ? fma_loop_256 : NULL;
    *isa = cls >= OT__BLAS_AVX512 ? "avx512" : "avx2";
#else
    (void)isa; /* no FMA loop off x86: the peak reads 0 and is not printed */
#endif
    double best = 0;
    long iters = 1000;
    for (int r = 0; loop && r < 5;) {
        double t0 = now_s(), flops = loop(iters), dt = now_s() - t0;
        if (dt < 2e-4 && iters < 1000000) {
            iters *= 4;
            continue;
        }
        if (flops / dt > best) best = flops / dt;
        r++;
    }
    return best * 1e-9;
}

/* Seconds of one sgemm at n^3 on buf (3 max^2 floats) by run. */
static double gemm_once(ot__gemm_fn *run, float *buf, int64_t n, int64_t max)
{
    ot__gemm g = {OT_F32, buf, buf + max * max, buf + 2 * max * max, false, false,
                  n, n, n, n, n, n, 1, 0};
    double t0 = now_s();
    run(&g);
    return now_s() - t0;
}

/* sgemm's GFLOP/s through what runs the dots at *n^3: the size doubles
 * from 64 until a call takes 0.5 ms, up to max (so that a slow host or
 * valgrind multiplies little), then the best of 3. */
static double gemm_rate(int64_t max, int64_t *n)
{
    float *buf = malloc(sizeof *buf * (size_t)(3 * max * max));
    *n = 64;
    if (!buf) return 0;
    for (int64_t i = 0; i < 3 * max * max; i++) buf[i] = (float)(i % 7) * 0.25f - 0.75f;
    ot__gemm_fn *run = ot__blas_loop() ? ot__gemm_loop : ot__gemm_blas;
    while (*n < max && gemm_once(run, buf, *n, max) < 5e-4) *n = *n * 2 < max ? *n * 2 : max;
    double best = 0;
    for (int r = 0; r < 3; r++) {
        double dt = gemm_once(run, buf, *n, max);
        double rate = dt > 0 ? 2.0 * (double)(*n * *n * *n) / dt : 0;
        best = rate > best ? rate : best;
    }
    free(buf);
    return best * 1e-9;
}

static struct {
    pthread_once_t once;
    double peak, rate;
    const char *isa;
    int64_t n;
    int threads;
    char lib[64];
} measured = {PTHREAD_ONCE_INIT, 0, 0, "", 0, 1, ""};

/* "OpenBLAS 0.3.21" from the build string, or what else runs. */
static void library_name(char *dst, size_t n)
{
    char *(*config)(void) = (char *(*)(void))blas_sym("openblas_get_config");
    const char *c = config ? config() : NULL;
    int words = 0;
    size_t len = 0;
    for (; c && c[len] && len + 1 < n; len++)
        if (c[len] == ' ' && ++words == 2) break;
    snprintf(dst, n, "%.*s", (int)len, c ? c : "");
    if (!c) snprintf(dst, n, "a BLAS");
}

static void measure(void)
{
    int (*threads)(void) = (int (*)(void))blas_sym("openblas_get_num_threads");
    library_name(measured.lib, sizeof measured.lib);
    measured.threads = threads && !ot__blas_loop() ? threads() : 1;
    measured.rate = gemm_rate(ot__blas_loop() ? 96 : 384, &measured.n);
    measured.peak = fma_peak(&measured.isa);
}

void ot__blas_explain(FILE *f)
{
    ot__blas_ready();
    pthread_once(&measured.once, measure);
    const ot__blas_state *st = &state;
    fprintf(f, "  gemm: %s", st->loop ? "C loop (the BLAS's products were wrong)" : measured.lib);
    if (!st->loop && st->now[0]) fprintf(f, " core %s", st->now);
    if (strcmp(st->was, st->now) != 0) fprintf(f, " (was %s)", st->was);
    fprintf(f, " [%s]; sgemm %lld^3: %.1f GFLOP/s on %d thread%s", st->why, (long long)measured.n,
            measured.rate, measured.threads, measured.threads == 1 ? "" : "s");
    if (measured.peak > 0)
        fprintf(f, ", %.0f%% of the FMA peak (%.1f GFLOP/s a core, %s, measured)",
                100 * measured.rate / (measured.peak * measured.threads), measured.peak,
                measured.isa);
    fputc('\n', f);
}

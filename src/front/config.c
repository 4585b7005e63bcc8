/*
 * config.c - the options a backend runs with: ot_backend_opts as the caller
 * gave them, checked, then the environment's overrides, which are read here
 * and nowhere else, all by one rule: a variable unset or empty is not set;
 * otherwise its whole value must be one the variable takes (a word of its
 * list, or decimal digits alone for a count), else the backend is not made
 * (OT_EINVAL naming the variable and the value). A typo must not silently
 * run the default, and " 12", "+12" or "1e3" are not counts.
 *
 * The backend fills in what depends on the machine (the ISA, whether code
 * is generated, the cache size) when it starts; OT_L3_BYTES and
 * OT_L2_BYTES, which have no field, give it the last-level and the L2
 * cache sizes to plan for instead of the ones the machine reports (tests
 * simulate other machines with them), and
 * OT_BLAS_CORE, which has no field either, which OpenBLAS core the cpu
 * backend asks for (src/cpu/blas_core.c); so ot_backend_options can
 * report what is in force rather than what was asked. Rule-set names
 * (OT_REWRITE) are rewrite.c's to check, against its registry.
 */
#include "blas_cores.h"
#include "front.h"
#include "isa.h"

#include <errno.h>

#define DEFAULT_PLAN_CACHE 256

/* The ISA names the option and OT_ISA take: isa.h's, in its id order. */
#define ISA_NAME(ID, nm, fma, vb, jit, nr, needs, arch) #nm,
static const char *const isa_names[] = {OT__ISAS(ISA_NAME)};
#undef ISA_NAME
#define NISA ((int)(sizeof isa_names / sizeof isa_names[0]))
/* "scalar, sse2, avx2, avx512, neon" for the messages, from the same list. */
#define ISA_LISTED(ID, nm, fma, vb, jit, nr, needs, arch) ", " #nm
static const char isa_listed[] = "" OT__ISAS(ISA_LISTED);
#undef ISA_LISTED
#define ISA_LIST (isa_listed + 2)
static const char *const switch_words[] = {"0", "1"};
/* OT_BLAS_CORE's words: keep (the core OpenBLAS chose), auto (the default:
 * the widest core the CPU runs when OpenBLAS chose a narrower one), or a
 * core by its OpenBLAS name (blas_cores.h). */
#define BLAS_CORE_NAME(nm, cls) #nm,
static const char *const blas_core_words[] = {"keep", "auto", OT__BLAS_CORES(BLAS_CORE_NAME)};
#undef BLAS_CORE_NAME
#define NBLAS_CORE_WORDS ((int)(sizeof blas_core_words / sizeof blas_core_words[0]))

static const char *env_value(const char *var)
{
    const char *v = getenv(var);
    return v && *v ? v : NULL;
}

/* The index in words of var's value; -1 when var is not set. */
static int env_word(const char *var, const char *const words[], int nwords, const char *want,
                    int *index)
{
    const char *v = env_value(var);
    *index = -1;
    if (!v) return 0;
    for (int i = 0; i < nwords; i++)
        if (strcmp(v, words[i]) == 0) *index = i;
    if (*index < 0)
        return ot__err_set(OT_EINVAL, NULL, 0, "backend_new", "%s=%s is not %s", var, v, want);
    return 0;
}

/* A count in decimal digits; *set false when var is not set. */
static int env_count(const char *var, int64_t *count, bool *set)
{
    const char *v = env_value(var);
    *set = v != NULL;
    if (!v) return 0;
    char *end;
    errno = 0;
    unsigned long long n = strtoull(v, &end, 10);
    if (v[0] < '0' || v[0] > '9' || *end || errno || n > (unsigned long long)INT64_MAX)
        return ot__err_set(OT_EINVAL, NULL, 0, "backend_new", "%s=%s is not a byte count", var, v);
    *count = (int64_t)n;
    return 0;
}

/* The library's own copy of an ISA name, so that no pointer of the caller's
 * is kept; NULL for a name that is not one. */
static const char *isa_named(const char *isa)
{
    for (int i = 0; i < NISA; i++)
        if (strcmp(isa, isa_names[i]) == 0) return isa_names[i];
    return NULL;
}

static const char *bad_option(const ot_backend_opts *o)
{
    if (o->dtype != OT_DTYPE_DEFAULT && o->dtype != OT_F32 && o->dtype != OT_F64)
        return "dtype must be OT_F32 or OT_F64";
    if (o->accuracy != OT_ULP10 && o->accuracy != OT_ULP35)
        return "accuracy must be OT_ULP10 or OT_ULP35";
    if (o->plan_cache < 0) return "plan_cache must be >= 0";
    if (o->fusion < OT_FUSION_DEFAULT || o->fusion > OT_FUSION_OFF)
        return "fusion must be OT_FUSION_DEFAULT, OT_FUSION_ON or OT_FUSION_OFF";
    if (o->jit < OT_JIT_DEFAULT || o->jit > OT_JIT_OFF)
        return "jit must be OT_JIT_DEFAULT, OT_JIT_ON or OT_JIT_OFF";
    if (o->stream_bytes < OT_STREAM_NEVER)
        return "stream_bytes must be >= 0 or OT_STREAM_NEVER";
    if (o->stochastic_round != 0 && o->stochastic_round != 1)
        return "stochastic_round must be 0 or 1";
    return NULL;
}

static int check_opts(const ot_backend_opts *o)
{
    if (o->threads < 0 || o->threads > OT_MAX_THREADS)
        return ot__err_set(OT_EINVAL, NULL, 0, "backend_new",
                           "threads must be in 0..%d (OT_MAX_THREADS), not %d", OT_MAX_THREADS,
                           o->threads);
    const char *bad = bad_option(o);
    if (bad) return ot__err_set(OT_EINVAL, NULL, 0, "backend_new", "%s", bad);
    if (o->isa && !isa_named(o->isa))
        return ot__err_set(OT_EINVAL, NULL, 0, "backend_new", "isa must be NULL or one of %s",
                           ISA_LIST);
    return 0;
}

/* An on/off variable (OT_FUSION, OT_JIT): 0 sets *field to off, 1 to on. */
static int env_switch(const char *var, int *field, int on_value, int off_value)
{
    int on;
    if (env_word(var, switch_words, 2, "0 or 1", &on)) return -1;
    if (on >= 0) *field = on ? on_value : off_value;
    return 0;
}

static int env_overrides(ot_backend_opts *o, const char **isa_from, size_t caches[2],
                         const char **blas_core)
{
    int isa, core;
    int64_t stream = 0, l2 = 0, l3 = 0;
    bool stream_set, l2_set, l3_set;
    char isa_want[64];
    snprintf(isa_want, sizeof isa_want, "one of %s", ISA_LIST);
    if (env_switch("OT_FUSION", &o->fusion, OT_FUSION_ON, OT_FUSION_OFF) ||
        env_switch("OT_JIT", &o->jit, OT_JIT_ON, OT_JIT_OFF) ||
        env_switch("OT_STOCHASTIC_ROUND", &o->stochastic_round, 1, 0) ||
        env_word("OT_ISA", isa_names, NISA, isa_want, &isa) ||
        env_count("OT_STREAM_BYTES", &stream, &stream_set) ||
        env_count("OT_L2_BYTES", &l2, &l2_set) || env_count("OT_L3_BYTES", &l3, &l3_set) ||
        env_word("OT_BLAS_CORE", blas_core_words, NBLAS_CORE_WORDS,
                 "keep, auto or an OpenBLAS x86-64 core name (as OPENBLAS_CORETYPE spells it)",
                 &core))
        return -1;
    *blas_core = core >= 0 ? blas_core_words[core] : "auto";
    caches[0] = l2_set ? (size_t)l2 : 0;
    caches[1] = l3_set ? (size_t)l3 : 0;
    if (isa >= 0) {
        o->isa = isa_names[isa];
        *isa_from = "OT_ISA";
    }
    if (stream_set) o->stream_bytes = stream ? stream : OT_STREAM_NEVER;
    return 0;
}

/* OT_REWRITE replaces the option's list; rewrite.c checks the names. */
static int rewrite_sets(ot_backend_opts *o, struct ot__rewrite **rewrite)
{
    const char *env = env_value("OT_REWRITE");
    const char *list = env ? env : o->rewrite;
    if (ot__rewrite_config(list, env ? "OT_REWRITE" : "rewrite", rewrite)) return -1;
    o->rewrite = ot__rewrite_list(*rewrite);
    return 0;
}

int ot__config_resolve(const char **name, ot_backend_opts *o, const char **isa_from,
                       struct ot__rewrite **rewrite, size_t caches[2], const char **blas_core)
{
    const char *env = env_value("OT_BACKEND");
    if (env) *name = env;
    if (!*name) *name = "ref";
    *isa_from = "isa";
    *rewrite = NULL;
    if (check_opts(o) || env_overrides(o, isa_from, caches, blas_core) ||
        rewrite_sets(o, rewrite))
        return -1;
    if (o->isa) o->isa = isa_named(o->isa);
    if (!o->dtype) o->dtype = OT_F32;
    if (!o->plan_cache) o->plan_cache = DEFAULT_PLAN_CACHE;
    if (!o->fusion) o->fusion = OT_FUSION_ON;
    return 0;
}

void ot__config_not_cpu(ot_backend_opts *o)
{
    o->isa = NULL;
    o->jit = OT_JIT_OFF;
    o->stream_bytes = OT_STREAM_NEVER;
}

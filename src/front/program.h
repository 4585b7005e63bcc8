/*
 * program.h - what program.c (building a program) and program_run.c
 * (compiling, binding, running) share: the program's structures and the
 * few helpers both call. Front layer, private to those two files.
 */
#ifndef OT_PROGRAM_H
#define OT_PROGRAM_H

#include "front.h"

enum { STEP_ASSIGN, STEP_BACKPROP };
#define MAX_SYMBOLS 64             /* a run's set of bound symbols is one word */

/* A step as added. A backprop step keeps its loss and wrt too, so that a
 * specialisation derives its gradients again (their constants, such as a
 * mean's 1/count, depend on the shapes). */
typedef struct pstep {
    int kind, n;
    ot_tensor **outs;             /* retained */
    ot_node **trees;              /* retained */
    ot_node *loss;                /* STEP_BACKPROP: retained */
    ot_tensor **wrt;              /* STEP_BACKPROP: retained */
} pstep;

typedef struct placeholder {
    char *name;
    ot_shape shape;               /* with OT_SYM dims */
    ot_dtype dtype;
    int64_t esize;                /* bytes per element */
    ot_tensor *t;                 /* at the nominal sizes (owned) */
} placeholder;

/* A leaf pointer that reads placeholder ph, off bytes into it. */
typedef struct patch {
    int slot, ph;
    size_t off;
} patch;

/* An assignment compiled for one specialisation: a step, or a wave of
 * values computed once for it and later steps (ot__share_steps' plan). */
typedef struct cstep {
    int step;                     /* the program's step it belongs to */
    bool wave;                    /* computes kept values (into temporaries) */
    bool final;                   /* trees already rewritten by the rule sets */
    int n;
    ot_tensor **outs;             /* the step's outputs or the spec's temporaries */
    ot_node **trees;              /* retained */
    ot__prepared prep;            /* the backend's, where it prepares steps */
    patch *patches;
    int npatch;
} cstep;

typedef struct spec {
    int64_t *sym;                 /* the symbols' sizes */
    ot_tensor **ph;               /* placeholders at those sizes */
    ot_tensor **nominal;          /* the program's own, for ot__substitute */
    ot_node **trees;              /* every step's trees over ph, in step order (retained) */
    cstep *steps;                 /* what a run assigns, in order */
    int nsteps;
    ot_tensor **tmps;             /* the kept values' temporaries (owned) */
    int ntmp;
    char *arena;
    size_t arena_bytes, separate_bytes;
    int kernels;
    uint64_t used;                /* the run that last ran it (specialise) */
} spec;

/* Specialisations a program keeps: past that, a new one frees the one run
 * least recently (a caller binding ever new sizes would otherwise keep
 * every size's temporaries, arena and plans). */
#define OT_PROG_SPECS_KEPT 16

/* A binding of the last run: the tensor, by address and serial (a tensor
 * freed and another made at its address has another serial), and the
 * placeholder it bound. */
typedef struct last_bind {
    const ot_tensor *t;
    uint64_t serial;
    int k;
} last_bind;

struct ot_program {
    ot_backend *be;
    bool prepared;                /* the backend prepares steps (vt->prepare) */
    int nsym, nph, nvar, nstep, nspec;
    char **symname;
    int64_t *symnom;
    placeholder *ph;
    ot_tensor **var;
    pstep *steps;
    spec **specs;
    spec *cur;
    /* per run, allocated at compile: bound bases, the binding of each
     * placeholder, the symbols' sizes */
    char **base;
    uint64_t *bound;              /* the run that bound it last */
    int *bound_by;
    uint64_t runs;
    int64_t *symrun;
    /* the bindings of the last run, when it succeeded binding tensors only
     * (nlast of them; -1: none): a run that binds the same tensors again
     * skips the checks their first binding passed (program_run.c) */
    last_bind *last;
    int nlast;
    /* the buffers steps write, each once, and the first step writing it */
    const ot_buffer **write;
    int *write_step;
    int nwrite;
    /* one call at a time (enter, leave), and where it came from */
    atomic_bool busy;
    ot__site at;
};

/* An error of the call in progress, at its caller's file:line. */
/* msg without a leading "file:line: fn: " (or "fn: ") of at: an inner
 * error of the same call, which the caller's message then places once. */
const char *ot__prog_unsited(const ot__site *at, const char *msg);
#define FAIL(p, code, ...) ot__err_set((code), (p)->at.file, (p)->at.line, (p)->at.fn, __VA_ARGS__)

/* ---- helpers both files use ------------------------------------------------ */

bool ot__prog_push(void **arr, int *n, size_t elem, const void *item);
/* Prefixes the error in the slot with the call's site, the step and where
 * its tree was built. */
int ot__prog_step_error(const ot__site *at, int i, const ot_node *tree);
/* OT_ESTATE once the program is compiled (nothing can be added then). */
int ot__prog_check_open(const ot_program *p);
/* shape with every symbol at its size in sym (checked: a known symbol). */
int ot__prog_resolve_shape(const ot_program *p, const char *name, ot_shape *shape,
                           const int64_t *sym);
/* The gradients of loss w.r.t. wrt into trees (current pool). */
int ot__prog_grad_trees(const ot_program *p, ot_node *loss, int n, ot_tensor *const wrt[],
                        ot_node **trees);
/* Frees a specialisation (program_run.c). */
void ot__prog_spec_free(const ot_program *p, spec *s);

static inline int nomem(const ot_program *p) { return FAIL(p, OT_ENOMEM, "out of memory"); }

/* Starts a call of fn on p from file:line. One call at a time: a second,
 * concurrent one (another thread's run) is OT_ESTATE instead of a race on
 * the bindings, the specialisations and the arena. One atomic exchange.
 * Inline, with leave: every run enters and leaves (W8p times runs). */
static inline int enter(const ot_program *cp, const char *fn, const char *file, int line)
{
    if (!cp) return ot__err_set(OT_ENULL, file, line, fn, "program is NULL");
    ot_program *p = (ot_program *)cp;   /* busy and at change in a const call too */
    if (atomic_exchange_explicit(&p->busy, true, memory_order_acquire))
        return ot__err_set(OT_ESTATE, file, line, fn, "the program is in use by a call in "
                           "another thread (one call of a program at a time)");
    p->at = (ot__site){fn, file, line};
    return 0;
}

/* enter for a call that computes (compile, run): OT_EBACKEND, the call
 * left, once ot_backend_free has freed the program's backend; what only
 * reads the program (variables, stats, explain) goes on working. */
static inline int enter_live(const ot_program *p, const char *fn, const char *file, int line)
{
    int rc = enter(p, fn, file, line);
    if (rc || !(rc = ot__backend_gone(p->be, fn, file, line, "the program"))) return rc;
    atomic_store_explicit(&((ot_program *)p)->busy, false, memory_order_release);
    return rc;
}

/* Ends the call enter started; returns rc. */
static inline int leave(const ot_program *cp, int rc)
{
    atomic_store_explicit(&((ot_program *)cp)->busy, false, memory_order_release);
    return rc;
}

#endif /* OT_PROGRAM_H */

/*
 * fuzz.h - the property-based differential fuzzer (tests/fuzz.c): random
 * op-trees drawn from the op table, run on the ref backend (the oracle) and
 * on cpu backends under every ISA table, JIT on/off, 1 and 3 threads and
 * fusion off; gradients against ref and central differences; each tree
 * also built again through pools pushed and popped at random points, every
 * use of a dead node an OT_ESTATE error (check_pops). A failure is
 * shrunk and printed as a C snippet. Used by tests/test_fuzz.c (a fixed
 * budget in the unit suite) and tools/fuzz_main.c (`make fuzz`).
 */
#ifndef OT_FUZZ_H
#define OT_FUZZ_H

#include <stdbool.h>
#include <stdint.h>

#include "optree.h"

/* What a tree is checked for; FUZZ_ALL draws one per tree. FUZZ_HALF
 * (with FUZZ_FORWARD or FUZZ_MANY) also draws f16/bf16 leaves, casts and
 * outputs; without it a seed's trees are what they always were. */
enum { FUZZ_FORWARD = 1, FUZZ_GRAD = 2, FUZZ_MANY = 4, FUZZ_ALL = 7, FUZZ_HALF = 8 };

typedef struct fuzz_opts {
    uint64_t seed;        /* tree i draws from (seed, i) alone */
    int64_t first, n;     /* trees first .. first+n-1 */
    int modes;            /* FUZZ_* bits */
    int all_configs;      /* every ISA x JIT x threads per tree, not a draw */
    int fork;             /* run trees in forked children: a crash is a failure */
    int shrink;           /* shrink failures before reporting them */
    const char *findings; /* directory for <seed>-<i>.c and INDEX.txt, or NULL */
    int verbose;          /* progress lines on stderr */
    int max_report;       /* stop shrinking/reporting after this many (0: 10) */
    int64_t crash_at;     /* the fuzzer's own test: tree crash_at - 1 aborts (0: none) */
} fuzz_opts;

typedef struct fuzz_result {
    int64_t passed, failed, skipped;
    int64_t first_failed; /* the first failing tree's index; -1 when none failed */
} fuzz_result;

/* p and q are one tree (same ops, attributes, leaves and constants): the
 * post-order stack of a node over both shares every item, so that node's
 * operands are one item. Used by the print/parse round trip here and in
 * test_parse.c. */
bool fuzz_same_tree(ot_node *p, ot_node *q);
/* The first of trees[0..n) whose ot_pp text does not parse back to the
 * same tree (names[i] bound to in[i]), or -1 when all do. */
int fuzz_pp_roundtrip(ot_node *const *trees, int n, int nin, const char *const *names,
                      ot_node *const *in);

/* Runs opts->n trees; 0, or -1 when no backend could be created. */
int fuzz_run(const fuzz_opts *opts, fuzz_result *res);

#endif

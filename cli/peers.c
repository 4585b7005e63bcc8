/*
 * peers.c - --peers: the same expression timed with NumPy and numexpr, the
 * tools a user would otherwise reach for, through Debian's python3 (or
 * $OT_PYTHON). The expression is evaluated by Python itself with optree's
 * op names bound to NumPy functions as the op table's peer column spells
 * them (ot_parse's syntax is Python's), and
 * handed to numexpr as written where numexpr knows every name in it. Each
 * is timed as optree is: medians of samples of about 2 ms, inputs in
 * [0.5, 1.5). Sizes, dtype and the expression go through the environment
 * and python3 runs from an argument vector (spawn.c): no shell is involved.
 */
#define _GNU_SOURCE
#include "cli.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char script[] =
    "import os, sys, time\n"
    "import numpy as np\n"
    "try:\n"
    "    import numexpr as ne\n"
    "    ne.set_num_threads(int(os.environ['OTB_THREADS']))\n"
    "except Exception:\n"
    "    ne = None\n"
    "expr = os.environ['OTB_EXPR']\n"
    "dt = np.float64 if os.environ['OTB_DTYPE'] == 'f64' else np.float32\n"
    "cols = int(os.environ['OTB_COLS'])\n"
    "repeat = int(os.environ['OTB_REPEAT'])\n"
    "def red(f):\n"
    "    return lambda x, axis=None, keepdims=0: f(x, axis=axis, keepdims=bool(keepdims))\n"
    "fns = dict(\n";
/* fns's entries come from the op table's peer column (src/core/ops.def), then
 * this tail. */
static const char script_tail[] =
    "    inf=np.inf, nan=np.nan)\n"
    "import re\n"
    "names = sorted(set(re.findall(r'[A-Za-z_][A-Za-z0-9_]*', expr)) - set(fns) - {'axis', 'keepdims', 'True', 'False'})\n"
    "def timed(f):\n"
    "    k = 1\n"
    "    while True:\n"
    "        t0 = time.perf_counter()\n"
    "        for _ in range(k): f()\n"
    "        t = time.perf_counter() - t0\n"
    "        if t > 2e-3 or k > 1 << 22: break\n"
    "        k *= 2\n"
    "    s = []\n"
    "    for _ in range(repeat):\n"
    "        t0 = time.perf_counter()\n"
    "        for _ in range(k): f()\n"
    "        s.append((time.perf_counter() - t0) / k)\n"
    "    return sorted(s)[len(s) // 2]\n"
    "for n in map(int, os.environ['OTB_SIZES'].split(',')):\n"
    "    shape = (max(n // cols, 1), cols) if cols > 0 else (n,)\n"
    "    rng = np.random.default_rng(1)\n"
    "    env = {k: (rng.random(shape) + 0.5).astype(dt) for k in names}\n"
    "    g = dict(fns, **env)\n"
    "    try:\n"
    "        code = compile(expr, '<expr>', 'eval')\n"
    "        t_np = timed(lambda: eval(code, g))\n"
    "    except Exception:\n"
    "        t_np = 0\n"
    "    t_ne = 0\n"
    "    if ne is not None:\n"
    "        try:\n"
    "            ne.evaluate(expr, local_dict=env)\n"
    "            t_ne = timed(lambda: ne.evaluate(expr, local_dict=env))\n"
    "        except Exception:\n"
    "            t_ne = 0\n"
    "    print(n, t_np, t_ne, flush=True)\n";

/* Column 20 of the op table: each op's NumPy spelling, or NULL. */
static const struct peer { const char *name, *numpy; bool reduce; } peer[] = {
#define OT_OP(E, NM, AR, KIND, RULE, REF, COST, VEC, VFN, U10, U35, JIT, GRAD, DX, DY, SYM, DOM, \
              DOC, ATTRS, PEER)                                                              \
    {NM, PEER, OT_KIND_##KIND == OT_KIND_REDUCE},
#include "ops.def"
#undef OT_OP
};

/* The script, with fns holding every op that has a NumPy spelling (a
 * reduction wrapped to take optree's axis and keepdims). A spelling NumPy
 * lacks fails every --peers run (tests/cli_check.py's "peers"). */
static void write_script(FILE *f)
{
    fputs(script, f);
    for (size_t i = 0; i < sizeof peer / sizeof peer[0]; i++) {
        if (!peer[i].numpy) continue;
        fprintf(f, "    %s=%s%s%s,\n", peer[i].name, peer[i].reduce ? "red(" : "", peer[i].numpy,
                peer[i].reduce ? ")" : "");
    }
    fputs(script_tail, f);
}

static const char *python(void)
{
    const char *p = getenv("OT_PYTHON");
    if (p && *p) return p;
    return access("/usr/bin/python3", X_OK) == 0 ? "/usr/bin/python3" : "python3";
}

/* The peers' times for expression e in dtype dt into every point of them. */
static int peers_expr(run *r, const char *file, int e, ot_dtype dt, int threads)
{
    char sizes[MAX_SIZES * 14] = "", num[32];
    for (int i = 0; i < r->nsize; i++) {
        snprintf(num, sizeof num, "%s%lld", i ? "," : "", (long long)r->sizes[i]);
        strcat(sizes, num);
    }
    setenv("OTB_EXPR", r->exprs[e], 1);
    setenv("OTB_DTYPE", dt == OT_F64 ? "f64" : "f32", 1);
    setenv("OTB_SIZES", sizes, 1);
    snprintf(num, sizeof num, "%lld", (long long)r->cols);
    setenv("OTB_COLS", num, 1);
    snprintf(num, sizeof num, "%d", r->repeat);
    setenv("OTB_REPEAT", num, 1);
    snprintf(num, sizeof num, "%d", threads);
    setenv("OTB_THREADS", num, 1);
    char *argv[] = {(char *)python(), (char *)file, NULL};
    pid_t pid;
    FILE *p = spawn_pipe(argv, "r", &pid);
    if (!p) return -1;
    long long n;
    double tnp, tne;
    int got = 0;
    while (fscanf(p, "%lld %lf %lf", &n, &tnp, &tne) == 3) {
        got++;
        for (int i = 0; i < r->npts; i++) {
            point *q = &r->pts[i];
            if (q->expr == e && q->n == n && r->cfg[q->cfg].dtype == dt) {
                q->numpy_s = tnp;
                q->numexpr_s = tne;
            }
        }
    }
    return spawn_wait(p, pid) == 0 && got ? 0 : -1;
}

int peers_time(run *r)
{
    char file[] = "/tmp/optree-bench-peers-XXXXXX";
    int fd = mkstemp(file);
    if (fd < 0) return -1;
    FILE *f = fdopen(fd, "w");
    if (!f) {
        close(fd);
        unlink(file);
        return -1;
    }
    write_script(f);
    fclose(f);
    if (!r->quiet) fprintf(stderr, "optree-bench: timing NumPy and numexpr...\n");
    int rc = 0;
    for (int e = 0; e < r->nexpr && !rc; e++)
        for (int dt = OT_F32; dt <= OT_F64 && !rc; dt++) {
            int c = 0;
            while (c < r->ncfg && r->cfg[c].dtype != (ot_dtype)dt) c++;
            if (c < r->ncfg) rc = peers_expr(r, file, e, (ot_dtype)dt, r->cfg[c].threads);
        }
    unlink(file);
    return rc;
}

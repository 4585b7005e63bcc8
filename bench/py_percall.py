"""py_percall.py - the Python module's per-call cost (issue 37): W8 (W3,
tanh(a*b + a/b), on 64 float32 elements) built and assigned from Python,
and replayed as a compiled program, against NumPy's same expression
(np.tanh(a*b + a/b, out=out)) in the same process. The three are timed
interleaved, ROUNDS rounds of CALLS calls each; the ratios are medians over
rounds of same-round ratios (the machine may be loaded: absolute times
drift, ratios much less).

--big: W1-W5 at 2^24 elements (W5: 4096x4096 row softmax, written as
bench/workloads.c writes it) assigned through the module (out[:] = tree)
against the same trees built and assigned by direct C calls (ctypes:
ot_build_at, ot_assign_at, in a pushed pool) on the same tensors, in the
same process, interleaved, ROUNDS rounds (median of per-round ratios).

usage: PYTHONPATH=python python3 bench/py_percall.py [--rounds 15] [--calls 2000] [--backend cpu]
       [--only tree|program|numpy]   (CALLS calls of one, for callgrind)
       [--big] [--threads N]
"""
import argparse
import ctypes
import statistics
import time

import numpy as np

import optree
from optree import _decls as D
from optree._lib import lib, raise_error

OP = optree.OP


def c_tree(expr, leaves):
    """expr's tree built by direct C calls: expr is nested tuples (op name,
    operand, operand, axis-reduction flag) over leaf indices and numbers."""
    def build(e):
        if isinstance(e, int) and not isinstance(e, bool) and e >= 0 and e < len(leaves):
            return leaves[e]._n
        if isinstance(e, float):
            return lib.ot_const(e)
        op = getattr(OP, e[0])
        args = None
        if op.kind not in ("UNARY", "BINARY"):
            args = ctypes.byref(D.ot_args(axis=1, keepdims=True))
        a = build(e[1])
        b = build(e[2]) if len(e) > 2 else None
        p = lib.ot_build_at(op.num, a, b, args, b"py_percall.py", 0)
        if not p:
            raise_error()
        return p
    return build(expr)


# bench/workloads.c's W1-W5 as the module writes them, and as C builds them.
def _w5(x, be):
    den = be.sum(be.exp(x - be.max(x, axis=1)), axis=1)
    return be.exp(x - be.max(x, axis=1)) / den


_SHIFTED = ("exp", ("sub", 0, ("max", 0)))
BIG = [
    ("W1", 3, lambda a, b, c, be: a * b + c, ("add", ("mul", 0, 1), 2)),
    ("W2", 1, lambda a, be: 1.0 / (1.0 + be.exp(-a)),
     ("div", 1.0, ("add", 1.0, ("exp", ("neg", 0))))),
    ("W3", 2, lambda a, b, be: be.tanh(a * b + a / b), ("tanh", ("add", ("mul", 0, 1), ("div", 0, 1)))),
    ("W4", 3, lambda a, b, c, be: be.sqrt(abs(a)) * be.log(b * b + 1.0) + be.exp(-c) * 0.5,
     ("add", ("mul", ("sqrt", ("abs", 0)), ("log", ("add", ("mul", 1, 1), 1.0))),
      ("mul", ("exp", ("neg", 2)), 0.5))),
    ("W5", 1, _w5, ("div", _SHIFTED, ("sum", _SHIFTED))),
]


def big(args):
    be = optree.Backend(args.backend, threads=args.threads)
    rng = np.random.RandomState(0)
    print("W1-W5 at 2^24 elements, backend %s, threads %d, %d rounds: the module's "
          "out[:] = tree vs direct C calls (ot_build_at + ot_assign_at), same tensors"
          % (args.backend, args.threads, args.rounds))
    for wid, nin, py, expr in BIG:
        shape = (4096, 4096) if wid == "W5" else (1 << 24,)
        ins = [be.array(rng.uniform(0.5, 2.0, shape).astype(np.float32)) for _ in range(nin)]
        out_py, out_c = be.empty(shape), be.empty(shape)

        def module():
            out_py[:] = py(*ins, be)

        def direct():
            pool = lib.ot_pool_push()
            rc = lib.ot_assign_at(out_c._t, c_tree(expr, ins), b"py_percall.py", 0)
            lib.ot_pool_pop(pool)
            if rc:
                raise_error(rc)

        for f in (module, module, direct):      # the module compiles at the 2nd
            f()
        assert np.array_equal(np.asarray(out_py), np.asarray(out_c)), wid
        tm, tc = [], []
        for _ in range(args.rounds):
            for f, acc in ((module, tm), (direct, tc)):
                t0 = time.perf_counter()
                f()
                acc.append(time.perf_counter() - t0)
        r = statistics.median(m / c for m, c in zip(tm, tc))
        print("  %s  module %8.2f ms   C %8.2f ms   module/C %.3f"
              % (wid, statistics.median(tm) * 1e3, statistics.median(tc) * 1e3, r))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="the backend's threads (0: all cores)")
    ap.add_argument("--only", choices=("tree", "program", "numpy"),
                    help="run CALLS calls of one variant, untimed (for callgrind: "
                         "instructions per call = the difference of two CALLS)")
    ap.add_argument("--big", action="store_true", help="W1-W5 at 2^24: the module vs direct C")
    args = ap.parse_args()
    if args.big:
        return big(args)
    be = optree.Backend(args.backend, threads=args.threads)
    rng = np.random.RandomState(0)
    an = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    bn = rng.uniform(0.5, 2.0, 64).astype(np.float32)
    on = np.empty(64, np.float32)
    a, b, out = be.array(an), be.array(bn), be.array(np.empty(64, np.float32))
    tanh = be.tanh

    def tree():
        out[:] = tanh(a * b + a / b)

    prog = optree.Program(be)
    prog.assign(out, tanh(a * b + a / b))
    prog.compile()
    run = prog.run

    def numpy():
        np.tanh(an * bn + an / bn, out=on)

    for f in (tree, run, numpy):
        f()
    numpy()
    assert np.allclose(np.asarray(out), on, rtol=1e-6)
    if args.only:
        f = {"tree": tree, "program": run, "numpy": numpy}[args.only]
        for _ in range(args.calls):
            f()
        return
    times = {"tree": [], "program": [], "numpy": []}
    for _ in range(args.rounds):
        for name, f in (("tree", tree), ("program", run), ("numpy", numpy)):
            t0 = time.perf_counter()
            for _ in range(args.calls):
                f()
            times[name].append((time.perf_counter() - t0) / args.calls * 1e6)
    med = {k: statistics.median(v) for k, v in times.items()}
    r_tree = statistics.median(t / n for t, n in zip(times["tree"], times["numpy"]))
    r_prog = statistics.median(t / n for t, n in zip(times["program"], times["numpy"]))
    print("W8 from Python, 64 float32, backend %s, %d rounds of %d calls (medians)"
          % (args.backend, args.rounds, args.calls))
    print("  numpy   np.tanh(a*b + a/b, out=o)   %6.2f us" % med["numpy"])
    print("  tree    o[:] = be.tanh(a*b + a/b)   %6.2f us   %.2fx numpy (target <= 2x)"
          % (med["tree"], r_tree))
    print("  program prog.run()                  %6.2f us   %.2fx numpy (target <= 1.5x)"
          % (med["program"], r_prog))


if __name__ == "__main__":
    main()

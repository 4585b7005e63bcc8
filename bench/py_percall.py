"""py_percall.py - the Python module's per-call cost (issue 37): W8 (W3,
tanh(a*b + a/b), on 64 float32 elements) built and assigned from Python,
and replayed as a compiled program, against NumPy's same expression
(np.tanh(a*b + a/b, out=out)) in the same process. The three are timed
interleaved, ROUNDS rounds of CALLS calls each; the ratios are medians over
rounds of same-round ratios (the machine may be loaded: absolute times
drift, ratios much less).

usage: PYTHONPATH=python python3 bench/py_percall.py [--rounds 15] [--calls 2000] [--backend cpu]
       [--only tree|program|numpy]   (CALLS calls of one, for callgrind)
"""
import argparse
import statistics
import time

import numpy as np

import optree


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--threads", type=int, default=1, help="the backend's threads (0: all cores)")
    ap.add_argument("--only", choices=("tree", "program", "numpy"),
                    help="run CALLS calls of one variant, untimed (for callgrind: "
                         "instructions per call = the difference of two CALLS)")
    args = ap.parse_args()
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

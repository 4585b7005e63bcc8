#!/usr/bin/python3
"""vs_numpy.py - tanh(a*b + a/b) over sizes that fit in cache and beyond,
NumPy against optree at OT_ULP10 and OT_ULP35, interleaved in one process
(optree through ctypes on build/liboptree.so, a tree built once and
ot_assign timed alone; one thread). Prints elements per second.

NumPy's float32 tanh uses SVML (up to 4 ULP); optree's u10 tanh is its own
(at most 0.93 ULP, all 2^32 inputs measured), its u35 SLEEF's. The ratios
are NumPy's time over optree's: above 1, optree is faster. Run from the
repository root after
`make`:  /usr/bin/python3 bench/vs_numpy.py
"""
import ctypes as C
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, 'tests'))
import diff_numpy as D  # noqa: E402  (its ctypes bindings of the library)

ROUNDS = 8


def backend(lib, accuracy):
    o = D.OtBackendOpts()
    o.threads = 1
    o.accuracy = accuracy
    be = lib.ot_backend_new(b'cpu', C.byref(o))
    if not be:
        sys.exit('ot_backend_new: %s' % lib.ot_errmsg().decode())
    return be


def optree_call(lib, be, a, b):
    """The assignment of a tree built once, as a zero-argument callable."""
    ops = {n: lib.ot_op_lookup(n.encode()) for n in ('tanh', 'add', 'mul', 'div')}

    def build(op, x, y=None):
        return lib.ot_build_at(ops[op], x, y, None, None, 0)
    shape = D.mkshape(a.shape)
    ta = lib.ot_array(be, shape, D.F32, a.ctypes.data)
    tb = lib.ot_array(be, shape, D.F32, b.ctypes.data)
    out = lib.ot_empty(be, shape, D.F32)
    na, nb = lib.ot_tensor_node(ta), lib.ot_tensor_node(tb)
    tree = build('tanh', build('add', build('mul', na, nb), build('div', na, nb)))
    return lambda: lib.ot_assign_node(out, tree)


def per_call(fn, reps):
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def main():
    lib = D.load(os.path.join(ROOT, 'build', 'liboptree.so'))
    lib.ot_backend_new.argtypes = [C.c_char_p, C.c_void_p]
    lib.ot_pool_push()   # the trees live until the process ends
    bes = {'u10': backend(lib, 0), 'u35': backend(lib, 1)}
    print('size     NumPy  optree u10  optree u35  u10/NumPy  u35/NumPy   (G elements/s)')
    for k in range(6, 22, 2):
        n = 1 << k
        rng = np.random.default_rng(k)
        a = rng.uniform(0.5, 2, n).astype(np.float32)
        b = rng.uniform(0.5, 2, n).astype(np.float32)
        calls = {'numpy': lambda: np.tanh(a * b + a / b)}
        calls.update({name: optree_call(lib, be, a, b) for name, be in bes.items()})
        reps = max(20, (1 << 22) // n)
        times = {name: [] for name in calls}
        for r in range(ROUNDS + 1):   # the first round warms up
            for name, fn in calls.items():
                t = per_call(fn, reps)
                if r:
                    times[name].append(t)
        med = {name: sorted(t)[ROUNDS // 2] for name, t in times.items()}
        rate = {name: n / t / 1e9 for name, t in med.items()}
        print('2^%-2d  %7.3f  %10.3f  %10.3f  %9.2f  %9.2f' % (
            k, rate['numpy'], rate['u10'], rate['u35'], med['numpy'] / med['u10'],
            med['numpy'] / med['u35']))


if __name__ == '__main__':
    main()

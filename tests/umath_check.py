#!/usr/bin/python3
"""umath_check.py - optree's transcendentals against NumPy's own validation data.

    /usr/bin/python3 tests/umath_check.py build/liboptree.so [--data DIR] [--table] [-v]

NumPy ships the sets its own ufuncs are tested with
(numpy/core/tests/data/umath-validation-set-<fn>.csv, in Debian's
python3-numpy: dtype, input, the correctly rounded output, the ulp error
NumPy allows; values as hex bit patterns; README there). Every function
optree has among them (UMATH_FNS: exp, exp2, expm1, log, log2, sin, cos,
tanh) runs through its set, f32 and f64 rows apart, each set as one tensor
(one assign per function, dtype and backend), on:
  ref                  the reference backend (double, rounded once);
  cpu/<isa>            the tile kernels of every ISA table the CPU runs
                       (OT_ISA=scalar, sse2, avx2, avx512, neon; OT_JIT=0);
  cpu/<isa>/jit        generated code (src/cpu/jit) where the table has it
                       (avx2, avx512): f(neg(-x)), since a lone op stays
                       with the tile kernels (jit.c's worth_it) and neg is
                       exact and inline;
all at the default accuracy (OT_ULP10), on one thread.

A case "<fn> <dtype> umath@<backend>" passes when every row's result has the
class of the expected one (NaN, +-inf, finite, the sign of a zero) and is
within the row's tolerance in ulps of it: NumPy's own (the file's column),
and for f32 at most 1 ulp (issue 33: the default accuracy is within 1 ulp).
Ulps count as sv_ulps does (subnormal ulps below the normal range, the
largest finite value and inf 1 apart). --table prints the largest error
seen per function, dtype and backend (README.md, "Testing", quotes it).
The output ends with one line "N passed, M failed" (exit 1 if M > 0).
"""

import argparse
import ctypes as C
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from diff_numpy import (F32, F64, NP_DT, Lib, sv_backend, sv_eval, sv_ulps)  # noqa: E402

UMATH_FNS = ('exp', 'exp2', 'expm1', 'log', 'log2', 'sin', 'cos', 'tanh')
F32_ULPS = 1        # issue 33's bound for f32 at the default accuracy
DTYPES = {'np.float32': (F32, np.uint32), 'np.float64': (F64, np.uint64)}


def default_data_dir():
    return os.path.join(os.path.dirname(np.core.__file__), 'tests', 'data')


def read_set(path):
    """{dtype: (inputs, expected, allowed ulps)} of one validation file."""
    rows = {}
    with open(path) as f:
        for line in f:
            parts = line.strip().split(',')
            if len(parts) != 4 or parts[0] not in DTYPES:
                continue                # the header, comments, float16 rows
            rows.setdefault(parts[0], []).append(parts[1:])
    out = {}
    for name, r in rows.items():
        dt, bits = DTYPES[name]
        npd = NP_DT[dt]
        x = np.array([int(v[0], 16) for v in r], dtype=bits).view(npd)
        want = np.array([int(v[1], 16) for v in r], dtype=bits).view(npd)
        ulps = np.array([float(v[2]) for v in r])
        out[dt] = (x, want, ulps)
    return out


def configs():
    """(label, backend name, environment, generated code) of every backend."""
    out = [('ref', b'ref', {}, False)]
    for isa in ('scalar', 'sse2', 'avx2', 'avx512', 'neon'):
        out.append(('cpu/%s' % isa, b'cpu', {'OT_ISA': isa, 'OT_JIT': '0'}, False))
        if isa in ('avx2', 'avx512'):
            out.append(('cpu/%s/jit' % isa, b'cpu', {'OT_ISA': isa, 'OT_JIT': '1'}, True))
    return out


def explain(lib, node):
    """What ot_explain prints for node, through a libc memstream."""
    libc = C.CDLL(None)
    libc.open_memstream.restype = C.c_void_p
    libc.open_memstream.argtypes = [C.POINTER(C.c_char_p), C.POINTER(C.c_size_t)]
    libc.fclose.argtypes = [C.c_void_p]
    libc.free.argtypes = [C.c_void_p]
    lib.c.ot_explain.argtypes = [C.c_void_p, C.c_void_p]
    buf, n = C.c_char_p(), C.c_size_t()
    f = libc.open_memstream(C.byref(buf), C.byref(n))
    rc = lib.c.ot_explain(node, f)
    libc.fclose(f)
    text = C.string_at(buf, n.value).decode(errors='replace')
    libc.free(C.cast(buf, C.c_void_p))
    return text if rc == 0 else 'ot_explain failed: %s' % lib.errmsg()


def evaluate(lib, be, fn, x, jit):
    """fn(x) on backend be, as (values, None) or (None, failure text); for
    generated code fn(neg(-x)), whose plan must say it has some."""
    fid, neg = lib.op(fn), lib.op('neg')
    plan = []

    def tree(nodes):
        if not jit:
            return lib.c.ot_build_at(fid, nodes[0], None, None, None, 0)
        node = lib.c.ot_build_at(fid, lib.c.ot_build_at(neg, nodes[0], None, None, None, 0),
                                 None, None, None, 0)
        plan.append(explain(lib, node) if node else '')
        return node
    got, err = sv_eval(lib, be, tree, [-x if jit else x])
    if not err and jit and 'generated code' not in plan[0]:
        return None, 'no generated code in the plan: %s' % plan[0].replace('\n', ' / ')
    return got, err


def check(got, x, want, ulps, dt):
    """(failure texts, largest finite error in ulps) of got against want."""
    g, e = got.astype(np.float64), want.astype(np.float64)
    bad = np.isnan(g) != np.isnan(e)
    both = ~np.isnan(g) & ~np.isnan(e)
    bad |= both & (np.isinf(g) | np.isinf(e)) & (g != e)
    bad |= both & (g == 0) & (e == 0) & (np.signbit(g) != np.signbit(e))
    err = np.where(both, sv_ulps(np.where(both, got, 0), np.where(both, want, 0), dt), 0.0)
    allowed = np.minimum(ulps, F32_ULPS) if dt == F32 else ulps
    bad |= err > allowed
    fails = ['x = %r (%s): got %r, expected %r (%g ulp, allowed %g)' % (
        float(x[i]), hex(int(np.asarray(x[i]).view(np.uint32 if dt == F32 else np.uint64))),
        float(got[i]), float(want[i]), err[i], allowed[i]) for i in np.flatnonzero(bad)]
    return fails, float(err.max()) if err.size else 0.0


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('lib', nargs='?', default='build/liboptree.so')
    ap.add_argument('--data', default=default_data_dir(), help='the validation sets\' folder')
    ap.add_argument('--table', action='store_true', help='print the largest error per case')
    ap.add_argument('--max-fails', type=int, default=3, help='failures shown per case')
    ap.add_argument('-v', '--verbose', action='store_true', help='print every case')
    opt = ap.parse_args(argv)
    np.seterr(all='ignore')
    lib = Lib(opt.lib)
    passed = failed = 0
    sets = {}
    for fn in UMATH_FNS:
        path = os.path.join(opt.data, 'umath-validation-set-%s.csv' % fn)
        if lib.op(fn) < 0:
            print('FAIL %s umath: the library has no op %s' % (fn, fn))
            failed += 1
        elif not os.path.exists(path):
            print('FAIL %s umath: no %s (make deps installs python3-numpy)' % (fn, path))
            failed += 1
        else:
            sets[fn] = read_set(path)
    table = {}
    for label, name, env, jit in configs():
        be = sv_backend(lib, name, env)
        if be is None:
            if opt.verbose:
                print('skip umath@%s: the CPU lacks it' % label)
            continue
        try:
            for fn, data in sets.items():
                for dt, (x, want, ulps) in sorted(data.items()):
                    case = '%s %s umath@%s' % (fn, 'f32' if dt == F32 else 'f64', label)
                    got, err = evaluate(lib, be, fn, x, jit)
                    fails, worst = ([err], None) if err else check(got, x, want, ulps, dt)
                    table[(fn, dt, label)] = worst
                    if fails:
                        failed += 1
                        more = '' if len(fails) <= opt.max_fails else \
                            ' [and %d more]' % (len(fails) - opt.max_fails)
                        print('FAIL %s: %d of %d rows: %s%s' % (
                            case, len(fails), len(x), ' | '.join(fails[:opt.max_fails]), more))
                    else:
                        passed += 1
                        if opt.verbose:
                            print('ok   %s: %d rows, max %g ulp' % (case, len(x), worst))
                    sys.stdout.flush()
        finally:
            lib.c.ot_backend_free(be)
    if opt.table:
        print_table(table)
    lib.c.ot_backend_free(lib.be)
    print('%d passed, %d failed' % (passed, failed))
    return 1 if failed else 0


def print_table(table):
    """The largest error in ulps per function and dtype (rows) and backend
    (columns), as a Markdown table."""
    labels = []
    for _, _, label in table:
        if label not in labels:
            labels.append(label)
    print('| function | ' + ' | '.join(labels) + ' |')
    print('|---|' + '---|' * len(labels))
    for fn in UMATH_FNS:
        for dt in (F32, F64):
            cells = [table.get((fn, dt, lb)) for lb in labels]
            if all(c is None for c in cells):
                continue
            print('| %s %s | %s |' % (fn, 'f32' if dt == F32 else 'f64', ' | '.join(
                '-' if c is None else '%g' % c for c in cells)))


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))

"""_program.py - compiled programs (ot_program): steps recorded once over
placeholders, tensors and variables, planned once, then replayed by one
call each run (no tree walked, no plan looked up): the per-call cost of a
small expression from Python is one ctypes call."""
import ctypes

import numpy as np

from . import _decls as D
from ._core import Tensor, dtype_code, make_shape, node_of
from ._lib import capture, lib, check, raise_error, site


# ot_program_run_at without argtypes (Program.run's arguments are ready).
_run = lib._FuncPtr(("ot_program_run_at", lib))


class _Placeholder(Tensor):
    """A tensor the program owns (never freed by Python); keeps it alive."""
    __slots__ = ("_prog",)

    def __del__(self):
        pass


class Program:
    """p = Program(be); x = p.placeholder('x', (64,)); p.assign(out, tree);
    p.compile(); p.run(x=ndarray_or_tensor)."""

    def __init__(self, be):
        file, line = site()
        self._p = lib.ot_program_new_at(be._b, file, line)
        if not self._p:
            raise_error()
        self._cp = ctypes.c_void_p(self._p)
        self.be = be
        self._keep = []            # outputs and trees the steps hold
        self._none = (D.ot_bind * 1)()

    def __del__(self):
        try:
            lib.ot_program_free(self._p)
        except Exception:
            pass

    def placeholder(self, name, shape, dtype=None):
        file, line = site()
        ptr = lib.ot_program_placeholder_at(self._p, name.encode(), make_shape(shape),
                                            dtype_code(dtype), file, line)
        if not ptr:
            raise_error()
        t = _Placeholder._own(ptr)
        t._prog = self
        return t

    def assign(self, out, tree):
        """A step: out[...] = tree at each run."""
        file, line = site()
        check(lib.ot_program_assign_at(self._p, out._t, node_of(tree), file, line))
        self._keep.append((out, tree))

    def compile(self):
        file, line = site()
        check(lib.ot_program_compile_at(self._p, file, line))
        return self

    def run(self, **bindings):
        """One run; each placeholder bound by name to a tensor or to a
        C-contiguous ndarray of its dtype (read in place). A run without
        bindings is one ctypes call, its arguments converted beforehand
        (no caller's line: an error is raised again with it)."""
        n = len(bindings)
        if not n:
            if not _run(self._cp, 0, None, None, 0):
                return 0
            lib.ot_clear_error()        # the run again, its error naming the line
        file, line = site()
        if not n:
            return check(lib.ot_program_run_at(self._p, 0, self._none, file, line))
        b = (D.ot_bind * n)()
        keep = []
        for i, (name, v) in enumerate(bindings.items()):
            enc = name.encode()
            keep.append(enc)
            b[i].name = enc
            if isinstance(v, Tensor):
                b[i].tensor = v._t
            else:
                a = np.ascontiguousarray(v)
                keep.append(a)
                b[i].data, b[i].nbytes = a.ctypes.data, a.nbytes
        return check(lib.ot_program_run_at(self._p, n, b, file, line))

    def explain(self):
        """The compiled plan of every step (ot_program_explain)."""
        return capture(lib.ot_program_explain, self._p)

"""_program.py - compiled programs (ot_program): steps recorded once over
placeholders, tensors and variables, planned once, then replayed by one
call each run (no tree walked, no plan looked up): the per-call cost of a
small expression from Python is one ctypes call."""
import ctypes
import weakref

import numpy as np

from . import _decls as D
from ._core import Tensor, dtype_code, make_shape, node_of, _converted, _BF16, _DT_TO_NP
from ._lib import capture, lib, check, raise_error, raise_pending, site, cstr
# pylint: disable=no-name-in-module (made from the header)
from ._lib import DtypeError, StateError


# ot_program_run_at without argtypes (Program.run's arguments are ready).
_run = lib._FuncPtr(("ot_program_run_at", lib))
# A placeholder's tensor -> its program, to refuse it in another program's
# steps (the library takes it, reading memory that program never binds).
_owners = weakref.WeakValueDictionary()


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
        self._ph = {}              # name -> placeholder

    def __del__(self):
        try:
            lib.ot_program_free(self._p)
        except Exception:
            pass

    def placeholder(self, name, shape, dtype=None):
        """A tensor bound at each run. Its own memory, which a tree read
        outside a run sees, starts zero (not the allocator's garbage)."""
        file, line = site()
        ptr = lib.ot_program_placeholder_at(self._p, cstr(name), make_shape(shape),
                                            dtype_code(dtype), file, line)
        if not ptr:
            raise_error()
        t = _Placeholder._own(ptr)
        t._prog = self
        check(lib.ot_fill_at(ptr, 0.0, file, line))
        self._ph[name] = t
        _owners[ptr] = self
        return t

    def assign(self, out, tree):
        """A step: out[...] = tree at each run."""
        file, line = site()
        root = node_of(tree)
        self._refuse_foreign(root)
        check(lib.ot_program_assign_at(self._p, out._t, root, file, line))
        self._keep.append((out, tree))

    def _refuse_foreign(self, root):
        """StateError for a tree reading another program's placeholder."""
        stack, seen = [root], set()
        while stack:
            n = stack.pop()
            if not n or n in seen:
                continue
            seen.add(n)
            owner = _owners.get(lib.ot_node_tensor(n))
            if owner is not None and owner is not self:
                raise StateError("optree: assign: the tree reads a placeholder of another "
                                 "program")
            stack += [lib.ot_node_child(n, 0), lib.ot_node_child(n, 1)]

    def compile(self):
        file, line = site()
        check(lib.ot_program_compile_at(self._p, file, line))
        return self

    def run(self, **bindings):
        """One run; each placeholder bound by name to a tensor or to an
        array of its shape: a C-contiguous ndarray of its dtype is read in
        place, anything else (another dtype, a list) converted first (a
        copy; int32 values checked as be.array checks them). A run without
        bindings is one ctypes call, its arguments converted beforehand
        (no caller's line: an error is raised again with it)."""
        n = len(bindings)
        if not n:
            if not _run(self._cp, 0, None, None, 0):
                raise_pending()         # a registered op's kernel that raised
                return 0
            lib.ot_clear_error()        # the run again, its error naming the line
        file, line = site()
        if not n:
            check(lib.ot_program_run_at(self._p, 0, self._none, file, line))
            raise_pending()
            return 0
        b = (D.ot_bind * n)()
        keep = []
        for i, (name, v) in enumerate(bindings.items()):
            enc = cstr(name)
            keep.append(enc)
            b[i].name = enc
            if isinstance(v, Tensor):
                b[i].tensor = v._t
            else:
                a = self._host(name, v)
                keep.append(a)
                b[i].data, b[i].nbytes = a.ctypes.data, a.nbytes
                # the array's shape, which the library checks against the
                # placeholder's (nbytes alone would take any shape of the size)
                b[i].has_shape, b[i].shape = True, make_shape(a.shape)
        check(lib.ot_program_run_at(self._p, n, b, file, line))
        raise_pending()
        return 0

    def _host(self, name, v):
        """v as host data for placeholder name: C-contiguous, of its dtype
        (the library reads the bytes as that dtype, whatever they are)."""
        ph = self._ph.get(name)
        a = np.asarray(v)
        if ph is None:                  # not ours: the library names the error
            return np.ascontiguousarray(a)
        code = lib.ot_tensor_dtype(ph._t)
        if code == _BF16:
            raise DtypeError("optree: run: placeholder %r is bfloat16, which NumPy lacks: "
                             "bind a tensor" % name)
        want = _DT_TO_NP[code]
        if a.dtype != want or not a.flags.c_contiguous or not a.flags.aligned:
            a = _converted(a, want)
        return a

    def explain(self):
        """The compiled plan of every step (ot_program_explain)."""
        return capture(lib.ot_program_explain, self._p)

"""_core.py - neon's backend API over optree: backends, tensors (NumPy views
without copies), op-tree nodes with Python operators, and a builder per op
of the library's table (generated from _decls.OPS, so a new op of
src/core/ops.def is here by name without an edit).

Node lifetime. Builders put nodes in the C thread's default pool; a node
object holds its node without a reference of its own while it is young
(one ctypes call less per node: W8's per-call cost). When the pool grows
past _DRAIN_AT nodes, every live node object takes a reference
(ot_retain) and the pool is drained, so the pool's size stays bounded
whatever the program keeps. Objects made from other sources (gradients,
parsed trees) take their reference at once.
"""
import ctypes
import numbers
import os

import numpy as np

from . import _decls as D
from ._lib import lib, capture, check, raise_error, site, _files, _getframe
from ._lib import BackendError  # pylint: disable=no-name-in-module (made from the header)

_DT_TO_NP = {1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int32)}
_NP_TO_DT = {v: k for k, v in _DT_TO_NP.items()}
_DRAIN_AT = 1 << 14


def dtype_code(dtype, default=0):
    if dtype is None:
        return default
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    code = _NP_TO_DT.get(np.dtype(dtype))
    if code is None:
        raise TypeError("optree: dtype %s is not one of float32, float64, int32" % np.dtype(dtype))
    return code


def make_shape(shape):
    if isinstance(shape, numbers.Integral):
        shape = (shape,)
    shape = tuple(int(d) for d in shape)
    s = D.ot_shape()
    s.ndim = len(shape)
    for i, d in enumerate(shape[:D.OT_MAX_DIMS]):
        s.dims[i] = d
    return s


def shape_tuple(s):
    return tuple(s.dims[i] for i in range(s.ndim))


# ---------------------------------------------------------------- nodes

_young = {}          # id(node object) -> node pointer, not yet retained
_build_at = lib.ot_build_at
_files_get = _files.get
_builds = [0]


def _promote_and_drain():
    """Every young node object takes a reference; the default pool drains."""
    for key, ptr in list(_young.items()):
        lib.ot_retain_at(ptr, None, 0)
    _young.clear()
    lib.ot_pool_drain()


class _Expr:
    """What tensors and nodes share: Python operators building op-trees."""
    __slots__ = ()
    __array_priority__ = 1000      # ndarray <op> node defers to the node

    # The operators (+ - * / ** @, comparisons) are set from the op table
    # below (_install_operators).
    def __neg__(self): return build(OP.neg, self)
    def __pos__(self): return self
    def __abs__(self): return build(OP.abs, self)
    __hash__ = object.__hash__

    @property
    def T(self):
        return self.transpose()

    def execute(self):
        """neon's execute(): an assignment already ran when it was built."""
        return self

    def pp(self):
        """The infix form (ot_pp): ((x0 * x0) + (x0 * x1))."""
        return capture(lib.ot_pp, node_of(self)).rstrip("\n")

    def explain(self):
        """How the backend would run it (ot_explain)."""
        return capture(lib.ot_explain, node_of(self))

    def graphviz(self):
        return capture(lib.ot_graphviz, node_of(self))


class _ShapeOf:
    """OpTreeNode.shape(x) as neon's static function, node.shape as a tuple."""

    def __get__(self, obj, cls):
        if obj is None:
            return lambda x: x.shape
        return shape_tuple(lib.ot_node_shape(obj._p))


class OpTreeNode(_Expr):
    """A node of an op-tree (neon's OpTreeNode): immutable, built by
    operators and backend functions, computed when assigned (t[:] = node)."""
    __slots__ = ("_p", "__weakref__")
    shape = _ShapeOf()

    def __init__(self, ptr, a=None, b=None, retained=False):
        if isinstance(ptr, dict):           # neon's OpTreeNode(op_dict, a, b)
            ptr = lib.ot_retain_at(build(getattr(OP, ptr["op"]), a, b)._p, None, 0)
            retained = True
        self._p = ptr
        if not retained:
            _young[id(self)] = ptr

    @staticmethod
    def build(op, a, b=None, out=None, **attrs):
        """neon's OpTreeNode.build("add", a, b): the node of op by name;
        "assign" (or out given) computes it at once and returns the output."""
        if op == "assign":
            a[:] = b
            return a
        o = getattr(OP, op, None)
        if o is None:
            raise ValueError("optree: no op %r in the table" % op)
        node = build(o, a, b, args=op_args(o, attrs) if (attrs or o.attrs) else None)
        if out is not None:
            out[:] = node
            return out
        return node

    def __del__(self):
        try:
            if _young.pop(id(self), None) is None:
                lib.ot_release_at(self._p, None, 0)
        except Exception:       # interpreter shutdown: the library may be gone
            pass

    @property
    def dtype(self):
        return _DT_TO_NP[lib.ot_node_dtype(self._p)]

    @property
    def ndim(self):
        return lib.ot_node_shape(self._p).ndim

    @property
    def op(self):
        return OPS_BY_NUM[lib.ot_node_op(self._p)].name

    @property
    def axes(self):
        """The dims' names ("N,C,H,W"), or None."""
        a = lib.ot_node_axes(self._p)
        return a.decode() if a else None

    def __str__(self):
        """neon's tuple form: ({'shape': (2, 2), 'op': 'add'}, x0, x1)."""
        return capture(lib.ot_print, self._p).rstrip("\n")

    __repr__ = __str__

    def __getitem__(self, key):
        file, line = site()
        idx, n = indices(key, self.ndim)
        return wrap_node(lib.ot_slice_node_n(self._p, n, idx, file, line))

    def transpose(self, *perm):
        file, line = site()
        a = D.ot_args(axis=D.OT_AXIS_ALL)
        if perm:
            perm = perm[0] if len(perm) == 1 and not isinstance(perm[0], int) else perm
            a.spec_ = b".perm = given"
            for i, p in enumerate(perm):
                a.perm[i] = p
        return wrap_node(lib.ot_build_at(OP.transpose.num, self._p, None, ctypes.byref(a), file, line))

    def reshape(self, *shape):
        file, line = site()
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return wrap_node(lib.ot_reshape_node_at(self._p, make_shape(shape), file, line))

    def astensor(self, be=None):
        """The value, in a new tensor (ot_eval)."""
        file, line = site()
        return Tensor._own(lib.ot_eval_at(self._p, file, line))

    def get(self):
        return self.astensor().get()

    def name(self, name):
        check(lib.ot_node_set_name(self._p, name.encode()))
        return self


def wrap_node(ptr, retained=False):
    if not ptr:
        raise_error()
    node = OpTreeNode(ptr, retained=retained)    # young before any drain
    _builds[0] += 1
    if _builds[0] & 1023 == 0 and lib.ot_pool_default_nodes() > _DRAIN_AT:
        _promote_and_drain()
    return node


def node_of(x):
    """The C node of an operand: a node, a tensor, a Python number."""
    if isinstance(x, OpTreeNode):
        return x._p
    if isinstance(x, Tensor):
        return x._n
    if isinstance(x, bool):
        return lib.ot_consti(int(x))
    if isinstance(x, numbers.Integral):
        return lib.ot_consti(int(x)) if -2**31 <= x < 2**31 else lib.ot_const(float(x))
    if isinstance(x, numbers.Real):
        return lib.ot_const(float(x))
    if isinstance(x, np.ndarray):
        raise TypeError("optree: wrap an ndarray with be.array(a) before using it in a tree")
    raise TypeError("optree: %r is not a tensor, a node or a number" % (x,))


def _operand(x):
    t = type(x)
    if t is OpTreeNode:
        return x._p
    if t is Tensor:
        return x._n
    return None if x is None else node_of(x)


def build(op, a=None, b=None, args=None, depth=2):
    """The node of op over a and b (tensors, nodes, numbers), recording the
    Python caller's file:line (depth frames up, or the first frame outside
    this package). The per-call path of every operator: kept short."""
    f = _getframe(depth)
    file = _files_get(f.f_code)
    if file:                        # the caller's file, seen before: no walk
        line = f.f_lineno
    else:
        file, line = site(depth + 1)
    p = _build_at(op.num, _operand(a), _operand(b),
                  None if args is None else ctypes.byref(args), file, line)
    if not p:
        raise_error()
    node = OpTreeNode.__new__(OpTreeNode)
    node._p = p
    _young[id(node)] = p
    _builds[0] += 1
    if not _builds[0] & 1023 and lib.ot_pool_default_nodes() > _DRAIN_AT:
        _promote_and_drain()
    return node


# ---------------------------------------------------------------- the op table

class Op:
    __slots__ = ("num", "name", "arity", "kind", "rule", "grad", "infix", "user", "attrs", "peer")

    def __init__(self, row):
        (self.num, self.name, self.arity, self.kind, self.rule, self.grad, self.infix,
         self.user, self.attrs, self.peer) = row


class _Ops:
    pass


OP = _Ops()
OPS_BY_NUM = {}
for _row in D.OPS:
    _op = Op(_row)
    setattr(OP, _op.name, _op)
    OPS_BY_NUM[_op.num] = _op

# Python's operator names -> the table's ops; the first six also reflected.
_OPERATORS = {"add": "add", "sub": "sub", "mul": "mul", "truediv": "div", "pow": "pow",
              "matmul": "dot", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt",
              "ge": "ge"}


def _install_operators():
    for i, (py, name) in enumerate(_OPERATORS.items()):
        op = getattr(OP, name)

        def fwd(self, o, _op=op): return build(_op, self, o)
        setattr(_Expr, "__%s__" % py, fwd)
        if i < 6:
            def rev(self, o, _op=op): return build(_op, o, self)
            setattr(_Expr, "__r%s__" % py, rev)


_install_operators()

# Keyword -> ot_args member, for the table's simple attributes.
_ATTR_FIELDS = {"axis": "axis", "keepdims": "keepdims", "ddof": "ddof", "lo": "lo", "hi": "hi",
                "seed": "seed", "depth": "depth", "dtype": "dtype", "rdtype": "dtype",
                "diag": "ddof", "k": "ddof"}


def op_args(op, kw):
    """ot_args for op from keywords; axis defaults to every axis."""
    a = D.ot_args(axis=D.OT_AXIS_ALL)
    for k, v in kw.items():
        field = _ATTR_FIELDS.get(k)
        if field is None:
            raise TypeError("optree: %s takes no keyword %r (its attributes: %s)"
                            % (op.name, k, ", ".join(op.attrs) or "none"))
        if k == "axis" and v is None:
            continue
        if k in ("dtype", "rdtype"):
            v = dtype_code(v)
        if k == "shape":
            v = make_shape(v)
        setattr(a, field, v)
    return a


def build_axes(op, a, b, args, axes):
    """build() along the axes named ("C,H,W") instead of args.axis."""
    file, line = site(3)
    return wrap_node(lib.ot_build_axes_at(op.num, _operand(a), _operand(b), ctypes.byref(args),
                                          axes.encode(), file, line))


def op_function(op):
    """A Python function building op from its operands and attributes
    (axes="C,H" names the axes instead of axis=)."""
    def fn(*operands, **kw):
        if len(operands) != op.arity:
            raise TypeError("optree: %s takes %d operand(s), %d given" % (op.name, op.arity, len(operands)))
        axes = kw.pop("axes", None)
        args = op_args(op, kw) if (kw or op.attrs or axes) else None
        ab = (operands + (None, None))[:2]
        if axes is not None:
            return build_axes(op, ab[0], ab[1], args, axes)
        return build(op, *ab, args=args)
    fn.__name__ = op.name
    fn.__doc__ = "The op %r of the library's table (%s, %d operand(s); attributes: %s)." % (
        op.name, op.kind.lower(), op.arity, ", ".join(op.attrs) or "none")
    return fn


# ---------------------------------------------------------------- indexing

def indices(key, ndim):
    """An ot_index array (and its length) from a Python index."""
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        i = key.index(Ellipsis)
        rest = sum(1 for k in key if k is not Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - rest) + key[i + 1:]
    arr = (D.ot_index * max(len(key), 1))()
    for i, k in enumerate(key):
        x = arr[i]
        if isinstance(k, slice):
            if k.start is None and k.stop is None and k.step in (None, 1):
                x.kind, x.step = 0, 1
                continue
            x.kind = 1
            x.start = D.OT_NONE if k.start is None else int(k.start)
            x.stop = D.OT_NONE if k.stop is None else int(k.stop)
            x.step = 1 if k.step is None else int(k.step)
        elif isinstance(k, numbers.Integral):
            x.kind, x.start, x.step = 2, int(k), 1
        else:
            raise TypeError("optree: index %r: ints, slices and ... only" % (k,))
    return arr, len(key)


# ---------------------------------------------------------------- tensors

_kept = {}           # user key -> the ndarray a wrapped tensor reads


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
def _release_array(user, ptr):
    _kept.pop(user, None)


class Tensor(_Expr):
    """neon's Tensor: a multidimensional array on a backend. Its memory is
    host memory: np.asarray(t) is a view of it (no copy)."""
    __slots__ = ("_t", "_n", "__weakref__")

    @classmethod
    def _own(cls, ptr):
        if not ptr:
            raise_error()
        t = object.__new__(cls)
        t._t = ptr
        t._n = lib.ot_tensor_node(ptr)
        return t

    def __del__(self):
        try:
            lib.ot_tensor_free(self._t)
        except Exception:
            pass

    # -- metadata
    @property
    def shape(self):
        return shape_tuple(lib.ot_tensor_shape(self._t))

    @property
    def dtype(self):
        return _DT_TO_NP[lib.ot_tensor_dtype(self._t)]

    @property
    def ndim(self):
        return lib.ot_tensor_ndim(self._t)

    @property
    def size(self):
        return lib.ot_tensor_numel(self._t)

    def __len__(self):
        return self.shape[0]

    @property
    def name(self):
        n = lib.ot_tensor_name(self._t)
        return n.decode() if n else None

    @name.setter
    def name(self, value):
        check(lib.ot_tensor_set_name(self._t, None if value is None else value.encode()))

    @property
    def axes(self):
        """The dims' names ("N,C,H,W"), or None; setting names them."""
        a = lib.ot_tensor_axes(self._t)
        return a.decode() if a else None

    @axes.setter
    def axes(self, names):
        check(lib.ot_tensor_set_axes(self._t, None if names is None else names.encode()))

    @property
    def backend(self):
        return Backend._of(lib.ot_tensor_backend(self._t))

    @property
    def __array_interface__(self):
        nd = self.ndim
        item = self.dtype.itemsize
        return {"version": 3, "shape": self.shape, "typestr": self.dtype.str,
                "data": (lib.ot_tensor_data(self._t) or 0, False),
                "strides": tuple(lib.ot_tensor_stride(self._t, i) * item for i in range(nd))}

    # -- data
    def get(self):
        """A NumPy copy of the values (neon's get)."""
        return np.array(self, copy=True)

    def asnumpyarray(self):
        return self.get()

    def set(self, ary):
        """Copies ary (any array-like of this shape) in (neon's set)."""
        a = np.ascontiguousarray(ary, dtype=self.dtype)
        if a.size != self.size:
            a = np.ascontiguousarray(np.broadcast_to(a, self.shape), dtype=self.dtype)
        check(lib.ot_set_n(self._t, a.ctypes.data, a.nbytes))
        return self

    def fill(self, value):
        check(lib.ot_fill(self._t, float(value)))
        return self

    def copy(self, a=None):
        """A new tensor with the values of a (neon: t.copy(a)), or of self."""
        src = self if a is None else a
        if isinstance(src, Tensor):
            return Tensor._own(lib.ot_copy(src._t))
        return self.backend.array(np.array(src))

    def __getitem__(self, key):
        file, line = site()
        idx, n = indices(key, self.ndim)
        return Tensor._own(lib.ot_slice_at(self._t, n, idx, file, line))

    def save(self, path):
        """Writes a NumPy .npy file (ot_save; np.load reads it)."""
        check(lib.ot_save(os.fsencode(path), self._t))

    def __setitem__(self, key, value):
        """t[...] = node | tensor | number | array: an assignment (runs the tree)."""
        file, line = site()
        out = self if _whole(key) else self[key]
        if isinstance(value, (OpTreeNode, Tensor)):
            check(lib.ot_assign_at(out._t, node_of(value), file, line))
        elif isinstance(value, numbers.Number):
            check(lib.ot_fill(out._t, float(value)))
        else:
            np.asarray(out)[...] = value

    def transpose(self, *perm):
        if not perm:
            return Tensor._own(lib.ot_transpose(self._t, None))
        perm = perm[0] if len(perm) == 1 and not isinstance(perm[0], int) else perm
        p = (ctypes.c_int * len(perm))(*perm)
        return Tensor._own(lib.ot_transpose(self._t, p))

    def reshape(self, *shape):
        file, line = site()
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return Tensor._own(lib.ot_reshape_at(self._t, make_shape(shape), file, line))

    def __str__(self):
        return capture(lib.ot_tensor_print, self._t).rstrip("\n")

    def __repr__(self):
        return "%s%s" % (self.name or "Tensor", str(self).replace("\n", " "))

    def pp(self):
        return self.name or capture(lib.ot_pp, self._n).rstrip("\n")


def _whole(key):
    return key is Ellipsis or (isinstance(key, slice) and key == slice(None))


# ---------------------------------------------------------------- backends

class Backend:
    """A backend (ot_backend): 'cpu' (fused) or 'ref' (the reference). Its
    functions build op-trees (be.exp(x)) or make tensors (be.zeros)."""
    _all = {}

    def __init__(self, name="cpu", rng_seed=None, default_dtype=np.float32, threads=0):
        opts = D.ot_backend_opts()
        opts.dtype = dtype_code(default_dtype)
        opts.threads = threads
        if rng_seed is not None:
            opts.seed = rng_seed
        self._b = lib.ot_backend_new(name.encode(), ctypes.byref(opts))
        if not self._b:
            raise_error()
        # Backends live as long as the process: a tree in the C pool may
        # still hold tensors of it (the library frees tensors first).
        Backend._all[self._b] = self
        self.default_dtype = _DT_TO_NP[opts.dtype]

    @classmethod
    def _of(cls, ptr):
        return cls._all.get(ptr)

    @property
    def name(self):
        return lib.ot_backend_name(self._b).decode()

    def _new(self, fn, shape, dtype, name, *extra):
        t = Tensor._own(fn(self._b, make_shape(shape), dtype_code(dtype), *extra))
        if name:
            t.name = name
        return t

    # -- tensors
    def empty(self, shape, dtype=None, name=None, **_neon):
        return self._new(lib.ot_empty, shape, dtype, name)

    def zeros(self, shape, dtype=None, name=None, **_neon):
        return self._new(lib.ot_zeros, shape, dtype, name)

    def ones(self, shape, dtype=None, name=None, **_neon):
        return self._new(lib.ot_ones, shape, dtype, name)

    def full(self, shape, value, dtype=None, name=None):
        return self._new(lib.ot_full, shape, dtype, name, float(value))

    def _like(self, ary, dtype):
        if dtype is None and isinstance(ary, Tensor):
            dtype = ary.dtype
        return ary.shape, dtype

    def empty_like(self, ary, dtype=None, name=None, **_neon):
        return self.empty(*self._like(ary, dtype), name=name)

    def zeros_like(self, ary, dtype=None, name=None, **_neon):
        return self.zeros(*self._like(ary, dtype), name=name)

    def ones_like(self, ary, dtype=None, name=None, **_neon):
        return self.ones(*self._like(ary, dtype), name=name)

    def array(self, ary, dtype=None, name=None, **_neon):
        """A tensor of ary's values. A C-contiguous ndarray of float32,
        float64 or int32 (and dtype None or its own) is wrapped without a
        copy (ot_wrap) and kept alive by the tensor; anything else is
        converted: floats to the backend's dtype, integers to int32."""
        if isinstance(ary, Tensor):
            ary = ary.get()
        a = ary if isinstance(ary, np.ndarray) else np.asarray(ary)
        if dtype is None and a.dtype not in _NP_TO_DT:
            dtype = np.int32 if a.dtype.kind in "iub" else self.default_dtype
        want = a.dtype if dtype is None else np.dtype(dtype)
        if a.dtype != want or not a.flags.c_contiguous or not a.flags.aligned:
            a = np.ascontiguousarray(a, dtype=want)
        key = id(a)
        _kept[key] = a
        ptr = lib.ot_wrap(self._b, make_shape(a.shape), _NP_TO_DT[want], a.ctypes.data or None,
                          None, ctypes.cast(_release_array, ctypes.c_void_p), key)
        if not ptr:
            _kept.pop(key, None)
            raise_error()
        t = Tensor._own(ptr)
        if name:
            t.name = name
        return t

    def load(self, path, name=None):
        """A tensor of a .npy file (ot_load: float32, float64, int32; int64
        as int32 when every value fits)."""
        t = Tensor._own(lib.ot_load(self._b, os.fsencode(path)))
        if name:
            t.name = name
        return t

    def parse(self, text, **tensors):
        """The tree that text writes in ot_pp's infix form, its leaves the
        tensors (or nodes) given by name: be.parse("(tanh (a * b))", a=a, b=b)."""
        n = len(tensors)
        names = (ctypes.c_char_p * max(n, 1))(*[k.encode() for k in tensors])
        ts = (ctypes.c_void_p * max(n, 1))(*[node_of(t) for t in tensors.values()])
        return wrap_node(lib.ot_parse(text.encode(), n, names, ts))

    # -- neon's functions with neon's signatures
    def dot(self, a, b, out=None):
        return _out(build(OP.dot, a, b), out)

    def _reduce(self, op, a, axis, out, keepdims):
        return _out(build(op, a, args=op_args(op, {"axis": axis, "keepdims": keepdims}), depth=3), out)

    def sum(self, a, axis=None, out=None, keepdims=True):
        return self._reduce(OP.sum, a, axis, out, keepdims)

    def max(self, a, axis=None, out=None, keepdims=True):
        return self._reduce(OP.max, a, axis, out, keepdims)

    def min(self, a, axis=None, out=None, keepdims=True):
        return self._reduce(OP.min, a, axis, out, keepdims)

    def mean(self, a, axis=None, out=None, keepdims=True):
        return self._reduce(OP.mean, a, axis, out, keepdims)

    def argmax(self, a, axis=1, out=None, keepdims=True):
        return self._reduce(OP.argmax, a, axis, out, keepdims)

    def argmin(self, a, axis=1, out=None, keepdims=True):
        return self._reduce(OP.argmin, a, axis, out, keepdims)

    def var(self, a, axis=None, out=None, keepdims=True, ddof=0):
        op = OP.var
        return _out(build(op, a, args=op_args(op, {"axis": axis, "keepdims": keepdims, "ddof": ddof})), out)

    def std(self, a, axis=None, out=None, keepdims=True, ddof=0):
        op = OP.std
        return _out(build(op, a, args=op_args(op, {"axis": axis, "keepdims": keepdims, "ddof": ddof})), out)

    def clip(self, a, a_min, a_max, out=None):
        return _out(build(OP.clip, a, args=op_args(OP.clip, {"lo": a_min, "hi": a_max})), out)

    def square(self, a, out=None):
        return _out(build(OP.sqr, a), out)

    def reciprocal(self, a, out=None):
        return _out(build(OP.recip, a), out)

    def sgn(self, a, out=None):
        return _out(build(OP.sgn, a), out)

    def add(self, a, b, out=None): return _out(build(OP.add, a, b), out)
    def subtract(self, a, b, out=None): return _out(build(OP.sub, a, b), out)
    def multiply(self, a, b, out=None): return _out(build(OP.mul, a, b), out)
    def divide(self, a, b, out=None): return _out(build(OP.div, a, b), out)
    def power(self, a, b, out=None): return _out(build(OP.pow, a, b), out)
    def negative(self, a, out=None): return _out(build(OP.neg, a), out)
    def absolute(self, a, out=None): return _out(build(OP.abs, a), out)
    def equal(self, a, b, out=None): return _out(build(OP.eq, a, b), out)
    def not_equal(self, a, b, out=None): return _out(build(OP.ne, a, b), out)
    def less(self, a, b, out=None): return _out(build(OP.lt, a, b), out)
    def less_equal(self, a, b, out=None): return _out(build(OP.le, a, b), out)
    def greater(self, a, b, out=None): return _out(build(OP.gt, a, b), out)
    def greater_equal(self, a, b, out=None): return _out(build(OP.ge, a, b), out)

    def onehot(self, indices, axis, out=None, depth=None):
        d = depth if depth is not None else (out.shape[axis] if out is not None else None)
        node = build(OP.onehot, indices, args=op_args(OP.onehot, {"axis": axis, "depth": d}))
        return _out(node, out)

    def execute(self, node):
        return node

    def __repr__(self):
        return "<optree backend %r>" % self.name


def dot_axes(w, x, axes=None):
    """ngraph's dot over named axes: contracts the axes named (None: every
    name the two share); w's other axes, then x's."""
    file, line = site()
    return wrap_node(lib.ot_dot_axes_at(_operand(w), _operand(x),
                                        None if axes is None else axes.encode(), file, line))


def _out(node, out):
    if out is not None:
        out[:] = node
        return out
    return node


def _install_table_ops():
    """A backend function per op of the table not spelled above: be.tanh,
    be.sig, be.exp, be.expm1, be.erf, be.relu, ... (every op by its name)."""
    for op in OPS_BY_NUM.values():
        if op.user or hasattr(Backend, op.name):
            continue
        fn = op_function(op)
        if op.kind == "UNARY":          # the common case, one call shorter
            def method(self, x, out=None, _op=op):
                node = build(_op, x)
                return node if out is None else _out(node, out)
        else:
            def method(self, *operands, _fn=fn, out=None, **kw):
                return _out(_fn(*operands, **kw), out)
        method.__name__, method.__doc__ = op.name, fn.__doc__
        setattr(Backend, op.name, method)


_install_table_ops()


def gen_backend(backend="cpu", rng_seed=None, default_dtype=np.float32, **_neon):
    """neon's gen_backend: 'cpu' (also 'mkl', a CPU backend too) or 'ref'."""
    name = {"mkl": "cpu"}.get(backend, backend)
    if name in ("gpu", "nervanagpu"):
        raise BackendError("optree: backend %r: optree runs on the CPU; use gen_backend('cpu')"
                           % backend)
    return Backend(name, rng_seed=rng_seed, default_dtype=default_dtype)


"""_core.py - neon's backend API over optree: backends, tensors (NumPy views
without copies), op-tree nodes with Python operators, and a builder per op
of the library's table (generated from _decls.OPS, so a new op of
src/core/ops.def is here by name without an edit).

Nodes are built in Python first and in C when needed (see "nodes" below:
a structure seen before costs no C call), and a whole-tensor assignment of
a structure seen before replays a compiled program (see "replays").

Node lifetime. A node object whose C node is built holds a reference to it
(ot_retain, released by its _CRef); the C thread's default pool, where
builders put nodes, is drained when it grows past _DRAIN_AT nodes, so its
size stays bounded whatever the program keeps.
"""
import ctypes
import itertools
import numbers
import operator
import os
import weakref

import numpy as np

from . import _decls as D
from ._lib import lib, capture, check, raise_error, raise_pending, site, _files, _getframe, _PKG
from ._lib import c_integer, cpath, cstr, set_field
# pylint: disable=no-name-in-module (made from the header)
from ._lib import BackendError, DtypeError, ShapeError, SizeOverflowError

_DT_TO_NP = {1: np.dtype(np.float32), 2: np.dtype(np.float64), 3: np.dtype(np.int32),
             4: np.dtype(np.float16)}
_NP_TO_DT = {v: k for k, v in _DT_TO_NP.items()}
_I32, _F16, _BF16 = 3, 4, 5
_DRAIN_AT = 1 << 14


def np_dtype(code):
    """The NumPy dtype of a library dtype. bfloat16, which NumPy lacks,
    reads as float32: its values widen exactly (ot_get)."""
    d = _DT_TO_NP.get(code)
    if d is None:
        if code == _BF16:
            return _DT_TO_NP[1]
        raise TypeError("optree: dtype code %r has no NumPy dtype" % (code,))
    return d


def dtype_code(dtype, default=0):
    if dtype is None:
        return default
    if isinstance(dtype, int) and not isinstance(dtype, bool):
        return dtype
    if isinstance(dtype, str) and dtype in ("bfloat16", "bf16"):   # ot_parse's name too
        return _BF16
    d = np.dtype(dtype)
    code = _NP_TO_DT.get(d.newbyteorder("="))      # '>f8' is float64 too
    if code is None:
        raise TypeError("optree: dtype %s is not one of float32, float64, int32, float16, "
                        "'bfloat16'" % d)
    return code


def make_shape(shape):
    if not isinstance(shape, (tuple, list)) and not hasattr(shape, "__iter__"):
        shape = (shape,)
    shape = tuple(c_integer(d, "dimension", ctypes.c_int64) for d in shape)
    s = D.ot_shape()
    s.ndim = len(shape)
    for i, d in enumerate(shape[:D.OT_MAX_DIMS]):
        s.dims[i] = d
    return s


def shape_tuple(s):
    return tuple(s.dims[i] for i in range(s.ndim))


# ---------------------------------------------------------------- nodes
#
# A node is built in Python first. It knows its op, attributes, children,
# the Python file:line that built it, and a structural key `_k`: an int
# interned from (op, attributes, the children's keys), a tensor's key being
# its backend, dtype, shape, contiguity and axis names (not its identity),
# a number's its type and value. `_kcache` maps a key to its id once a C
# build of that structure succeeded: the same structure is then valid (the
# library's shape and dtype rules read nothing else), so a node whose key is
# cached is made without a C call. A new structure is built in C at once,
# so its shape or dtype error is raised where it is built, naming that
# Python line. The C tree of a node is built when something needs it
# (printing, explain, Autodiff, an assignment not cached) by _materialize.
# `_l` is the tuple of the tree's leaf tensors (their C pointers), left to
# right, a tensor once per occurrence: the bindings of the compiled
# program that replays an assignment of this structure (Tensor.__setitem__).

_kcache = {}         # structural key -> id (a C build of it succeeded)
_ksize = {}          # id -> (leaves, nodes) of the tree written out
_KCACHE_MAX = 1 << 15
_MAX_LEAVES, _MAX_NODES = 64, 256     # larger trees are built in C at once
_next_kid = [0]
_kget = _kcache.get
_build_at = lib.ot_build_at
_retain_at = lib.ot_retain_at
_files_get = _files.get
_new = object.__new__
_builds = [0]


class _CRef:
    """One reference to a C node, released with this object."""
    __slots__ = ("p",)

    def __init__(self, p):
        self.p = p

    def __del__(self):
        try:
            lib.ot_release_at(self.p, None, 0)
        except Exception:       # interpreter shutdown: the library may be gone
            pass


def _own(n, p):
    """n holds C node p (built in the current pool) with a reference of its
    own; every so often the default pool is drained (the nodes Python
    holds all have their own references)."""
    _retain_at(p, None, 0)
    n._p = p
    n._r = _CRef(p)
    _builds[0] += 1
    if not _builds[0] & 1023 and lib.ot_pool_default_nodes() > _DRAIN_AT:
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

    # -- NumPy's truth, length, iteration and membership (a tensor or a
    # tree of one element is computed for its truth, as NumPy reads it)
    def __bool__(self):
        if _size(self.shape) != 1:
            raise ValueError("optree: the truth value of a tensor of shape %s is ambiguous; "
                             "use .get().any() or .get().all()" % (self.shape,))
        return bool(self.get())

    # float(t), int(t): NumPy's for one element, whatever the dims (a tree
    # is computed first), a TypeError in NumPy's words for any other size
    def _one(self):
        if _size(self.shape) != 1:
            raise TypeError("optree: only tensors of one element can be converted to Python "
                            "scalars, not one of shape %s" % (self.shape,))
        return self.get().reshape(())

    def __float__(self):
        return float(self._one())

    def __int__(self):
        return int(self._one())

    def __len__(self):
        shape = self.shape
        if not shape:
            raise TypeError("optree: len() of a 0-d tensor")
        return shape[0]

    def __iter__(self):
        for i in range(len(self)):
            yield self[i]

    def __contains__(self, value):
        if isinstance(value, _Expr):
            value = value.get()
        return bool((self.get() == value).any())

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
        return shape_tuple(lib.ot_node_shape(node_of(obj)))


class OpTreeNode(_Expr):
    """A node of an op-tree (neon's OpTreeNode): immutable, built by
    operators and backend functions, computed when assigned (t[:] = node).
    _s = (op, a, b, args, file, line): how to build it in C (a, b tensors,
    nodes or numbers; file, line where Python built it, or the code object
    and instruction offset to find them from when needed); _p its C node
    once built (None before), _r the reference Python holds; _k, _l its key
    and leaves (None: a node known only in C: Autodiff's, parse's, a
    view...)."""
    __slots__ = ("_k", "_l", "_s", "_p", "_r", "__weakref__")
    shape = _ShapeOf()

    def __init__(self, ptr, a=None, b=None, retained=False):
        if isinstance(ptr, dict):           # neon's OpTreeNode(op_dict, a, b)
            ptr = node_of(build(getattr(OP, ptr["op"]), a, b))
        self._k = self._l = None
        if retained:
            self._p, self._r = ptr, _CRef(ptr)
        else:
            _own(self, ptr)

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

    @property
    def dtype(self):
        return np_dtype(lib.ot_node_dtype(node_of(self)))

    @property
    def ndim(self):
        return lib.ot_node_shape(node_of(self)).ndim

    @property
    def op(self):
        return OPS_BY_NUM[lib.ot_node_op(node_of(self))].name

    @property
    def axes(self):
        """The dims' names ("N,C,H,W"), or None."""
        a = lib.ot_node_axes(node_of(self))
        return a.decode() if a else None

    def __str__(self):
        """neon's tuple form: ({'shape': (2, 2), 'op': 'add'}, x0, x1)."""
        return capture(lib.ot_print, node_of(self)).rstrip("\n")

    __repr__ = __str__

    def __getitem__(self, key):
        file, line = site()
        idx, n = indices(key, self.shape)
        return wrap_node(lib.ot_slice_node_n(node_of(self), n, idx, file, line))

    def transpose(self, *perm):
        file, line = site()
        a = D.ot_args(axis=D.OT_AXIS_ALL)
        if perm:
            a.spec_ = b".perm = given"
            set_field(a, "perm", _perm(perm, self.ndim), "perm")
        return wrap_node(lib.ot_build_at(OP.transpose.num, node_of(self), None, ctypes.byref(a),
                                         file, line))

    def __array__(self, dtype=None, copy=None):
        """np.asarray(tree): its value, computed now (a new array)."""
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    def reshape(self, *shape):
        file, line = site()
        shape = shape[0] if len(shape) == 1 and not isinstance(shape[0], int) else shape
        return wrap_node(lib.ot_reshape_node_at(node_of(self), make_shape(shape), file, line))

    def astensor(self, be=None):
        """The value, in a new tensor (ot_eval)."""
        file, line = site()
        t = Tensor._own(lib.ot_eval_at(node_of(self), file, line), (file, line))
        raise_pending()             # a registered op's kernel that raised
        return t

    def get(self):
        return self.astensor().get()

    def name(self, name):
        check(lib.ot_node_set_name(node_of(self), cstr(name)), site())
        return self


def _perm(perm, ndim):
    """transpose(1, 0) or transpose((1, 0)): the axes, one per dim (the
    library reads ndim of them)."""
    perm = tuple(perm[0]) if len(perm) == 1 and not isinstance(perm[0], numbers.Integral) \
        else perm
    if len(perm) != ndim:
        raise ValueError("optree: transpose: %d axes given for %d dims" % (len(perm), ndim))
    # NumPy's negative axes (x.transpose(-1, 0, 1)); the library reads
    # 0..ndim-1 only, and refused -1 as "not a permutation"
    return tuple(a + ndim if isinstance(a, numbers.Integral) and -ndim <= a < 0 else a
                 for a in perm)


def _size(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def wrap_node(ptr, retained=False):
    """A node known only in C (a pointer the current pool owns, or one
    already retained for Python)."""
    if not ptr:
        raise_error()
    return OpTreeNode(ptr, retained=retained)


def _const_key(x):
    """A number's key (its type and exact value: 0.0 and -0.0 differ), or
    None for what is not a number."""
    t = type(x)
    if t is float:
        return ("f", x.hex())
    if t is int or t is bool:
        return ("i", int(x))
    if isinstance(x, numbers.Integral):
        return ("i", int(x))
    if isinstance(x, numbers.Real):
        return ("f", float(x).hex())
    return None


def _key_of(x):
    """(key, leaves, (leaf count, node count)) of an operand, or Nones."""
    if x is None:
        return 0, (), (0, 0)
    if isinstance(x, (OpTreeNode, Tensor)):
        k = x._k
        if k is None:
            return None, None, None
        return k, x._l, (_ksize.get(k) if type(x) is OpTreeNode else (1, 1))
    k = _const_key(x)
    return k, (), (0, 1)


def node_of(x):
    """The C node of an operand: a node (built in C now if it was not), a
    tensor, a Python number."""
    if isinstance(x, OpTreeNode):
        p = x._p
        return p if p is not None else _materialize(x)
    if isinstance(x, Tensor):
        return x._n
    if isinstance(x, (bool, np.bool_)):     # np.bool_ is no numbers.Number
        return lib.ot_consti(int(x))
    if isinstance(x, numbers.Integral):
        return lib.ot_consti(int(x)) if -2**31 <= x < 2**31 else lib.ot_const(float(x))
    if isinstance(x, numbers.Real):
        return lib.ot_const(float(x))
    if isinstance(x, np.ndarray) and x.ndim == 0 and x.dtype.kind in "biuf":
        return node_of(x[()])     # NumPy's scalars reach a reflected operator as 0-d arrays
    if isinstance(x, np.ndarray):
        raise TypeError("optree: wrap an ndarray with be.array(a) before using it in a tree")
    raise TypeError("optree: %r is not a tensor, a node or a number" % (x,))


def _operand(x):
    return None if x is None else node_of(x)


def _where(code, lasti):
    """The file and line of an instruction of code (None, 0 in this package)."""
    file = _files_get(code)
    if file is None:
        name = code.co_filename
        file = _files[code] = b"" if name.startswith(_PKG) else name.encode("utf-8", "replace")
    if not file:
        return None, 0
    for start, end, line in code.co_lines():
        if start <= lasti < end and line is not None:
            return file, line
    return file, code.co_firstlineno


def _c_build(n, a, b):
    op, _, _, args, file, line = n._s
    if type(file) is not bytes:
        file, line = _where(file, line)
    return _build_at(op.num, a, b, None if args is None else ctypes.byref(args), file, line)


def _materialize(root):
    """Builds the C nodes of root's tree not built yet, children first
    (iteratively: trees may be deep), each with the file:line that built
    it in Python; returns root's."""
    stack = [root]
    while stack:
        n = stack[-1]
        if n._p is not None:
            stack.pop()
            continue
        a, b = n._s[1:3]
        todo = [c for c in (b, a) if type(c) is OpTreeNode and c._p is None]
        if todo:
            stack.extend(todo)
            continue
        stack.pop()
        p = _c_build(n, _operand(a), _operand(b))
        if not p:
            raise_error()
        _own(n, p)
    return root._p


def _lazy(op, a, b, args, kid, leaves, file, line):
    n = _new(OpTreeNode)
    n._k, n._l, n._s, n._p = kid, leaves, (op, a, b, args, file, line), None
    return n


def build(op, a=None, b=None, args=None, depth=2):
    """The node of op over a and b (tensors, nodes, numbers) with ot_args
    args, recording the Python caller's file:line (depth frames up, or the
    first frame outside this package). A structure built before is made
    without a C call; a new one is built (and so checked) in C now."""
    f = _getframe(depth)
    file = _files_get(f.f_code)
    if file:                        # the caller's file, seen before: no walk
        line = f.f_lineno
    else:
        file, line = site(depth + 1)
    ka, la, sa = _key_of(a)
    kb, lb, sb = _key_of(b)
    key = None
    if ka is not None and kb is not None and sa is not None and sb is not None:
        key = (op.num, ka, kb, None if args is None else bytes(args))
        kid = _kget(key)
        if kid is not None:
            return _lazy(op, a, b, args, kid, la + lb, file, line)
    n = _lazy(op, a, b, args, None, None, file, line)
    p = _c_build(n, _operand(a), _operand(b))
    if not p:
        _refuse_none(op, a, b)
        raise_error()
    _own(n, p)
    if key is not None:
        size = (sa[0] + sb[0], sa[1] + sb[1] + 1)
        if size[0] <= _MAX_LEAVES and size[1] <= _MAX_NODES:
            if len(_kcache) >= _KCACHE_MAX:
                _kcache.clear()
                _ksize.clear()
                _progs_clear()
            kid = _next_kid[0] = _next_kid[0] + 1
            _kcache[key] = kid
            _ksize[kid] = size
            n._k, n._l = kid, la + lb
    return n


def _refuse_none(op, a, b):
    """After a failed C build: a None operand (t + None, t == None,
    be.exp(None)) reached C as NULL, whose "operand 2 is NULL" names
    nothing the caller wrote; said as the TypeError of any other
    non-operand (t + "x") instead."""
    for i, x in enumerate((a, b)[:op.arity]):
        if x is None:
            lib.ot_clear_error()
            raise TypeError("optree: %s: operand %d is None, not a tensor, a node or a number"
                            % (op.name, i + 1))


def _fast_binary(op):
    """Python's operator for op: a structure seen before costs a key, a
    dict look-up and a node object; anything else goes through build()."""
    num = op.num

    def fwd(self, o):
        try:
            key = (num, self._k, o._k, None)
            leaves = self._l + o._l
        except (AttributeError, TypeError):     # a number; a node known only in C
            return build(op, self, o)
        kid = _kget(key)
        if kid is None:
            return build(op, self, o)
        f = _getframe(1)
        n = _new(OpTreeNode)
        n._k = kid
        n._l = leaves
        n._s = (op, self, o, None, f.f_code, f.f_lasti)
        n._p = None
        return n

    def rev(self, o):
        return build(op, o, self)
    return fwd, rev


def _fast_unary(op):
    """be.<op>(x) for a unary op, as _fast_binary's operators."""
    num = op.num

    def method(self, x, out=None):
        try:
            key = (num, x._k, 0, None)
            leaves = x._l + ()
        except (AttributeError, TypeError):
            node = build(op, x)
            return node if out is None else _out(node, out)
        kid = _kget(key)
        if kid is None:
            node = build(op, x)
        else:
            f = _getframe(1)
            node = _new(OpTreeNode)
            node._k = kid
            node._l = leaves
            node._s = (op, x, None, None, f.f_code, f.f_lasti)
            node._p = None
        return node if out is None else _out(node, out)
    return method


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
        fwd, rev = _fast_binary(getattr(OP, name))
        setattr(_Expr, "__%s__" % py, fwd)
        if i < 6:
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
        set_field(a, field, v, k)
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

_I64_MAX = (1 << 63) - 1


def _bound(v):
    """A slice bound as int64: beyond the range it means as far as the
    range (NumPy clamps bounds); OT_NONE, -2**63, stays None's."""
    if v is None:
        return D.OT_NONE
    v = operator.index(v)
    return max(-_I64_MAX, min(_I64_MAX, v))


def indices(key, shape):
    """An ot_index array (and its length) from a Python index into shape.
    An integer out of range is IndexError (so iteration stops), as
    NumPy's; a bool is refused (NumPy adds an axis for it)."""
    ndim = len(shape)
    if not isinstance(key, tuple):
        key = (key,)
    if any(k is Ellipsis for k in key):
        if sum(1 for k in key if k is Ellipsis) > 1:
            # the second one reached the loop below, whose TypeError said
            # "ints, slices and ... only" of a "..."
            raise IndexError("optree: an index can only have a single ellipsis ('...')")
        i = key.index(Ellipsis)
        rest = sum(1 for k in key if k is not Ellipsis)
        key = key[:i] + (slice(None),) * (ndim - rest) + key[i + 1:]
    if len(key) > ndim:
        # NumPy's IndexError; the library's refusal is OT_EINVAL, a
        # ValueError, which `except IndexError` (and iteration) misses
        raise IndexError("optree: too many indices: tensor is %d-dimensional, but %d were "
                         "indexed" % (ndim, len(key)))
    arr = (D.ot_index * max(len(key), 1))()
    for i, k in enumerate(key):
        x = arr[i]
        if isinstance(k, np.ndarray) and k.ndim == 0 and k.dtype.kind in "biu":
            k = k[()]             # a 0-d integer array indexes as its integer, as in NumPy
        if isinstance(k, slice):
            if k.start is None and k.stop is None and k.step in (None, 1):
                x.kind, x.step = 0, 1
                continue
            x.kind = 1
            x.start, x.stop = _bound(k.start), _bound(k.stop)
            x.step = 1 if k.step is None else _bound(k.step)
        elif isinstance(k, (bool, np.bool_)):
            raise IndexError("optree: index %r: a bool index (NumPy's new axis) is not "
                             "supported" % (k,))
        elif isinstance(k, numbers.Integral):
            k = int(k)
            if i < ndim and not -shape[i] <= k < shape[i]:
                raise IndexError("optree: index %d is out of bounds for axis %d with size %d"
                                 % (k, i, shape[i]))
            x.kind, x.start, x.step = 2, max(-_I64_MAX, min(_I64_MAX, k)), 1
        else:
            raise TypeError("optree: index %r: ints, slices and ... only" % (k,))
    return arr, len(key)


# ---------------------------------------------------------------- tensors

_kept = {}           # wrap key -> the ndarray a wrapped tensor reads
_wrap_keys = itertools.count(1)   # one key per wrap: an array wrapped twice has two


@ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
def _release_array(user, ptr):
    _kept.pop(user, None)


_I32_MIN, _I32_MAX = -(1 << 31), (1 << 31) - 1


def _check_int32(a):
    """Refuses values an int32 cannot hold, as NumPy's int conversions do
    (ValueError for NaN, OverflowError beyond the range), where astype and
    the library would wrap, give 0 or saturate silently."""
    kind = a.dtype.kind
    if kind not in "fiu" or not a.size:
        return
    if kind == "f" and np.isnan(a).any():
        raise ValueError("optree: cannot convert float NaN to int32")
    lo, hi = a.min(), a.max()
    # floats truncate toward zero: -2147483648.5 fits, 2147483648.0 does not
    if (lo <= _I32_MIN - 1 or hi >= _I32_MAX + 1) if kind == "f" else (lo < _I32_MIN or hi > _I32_MAX):
        raise SizeOverflowError("optree: value %s does not fit int32"
                                % (lo if lo < _I32_MIN else hi))


def _converted(a, want):
    """A new C-contiguous copy of a in dtype want (a copy even when a is
    of want already: a read-only array must not be wrapped writable)."""
    if want == _DT_TO_NP[_I32]:
        _check_int32(a)
    return np.array(a, dtype=want, order="C")


def _half_host(a):
    """a as the float32 host values a float16 or bfloat16 tensor's ot_set
    rounds to 16 bits, so that each value is rounded once: float64 and
    integer values (int32 past 2^24 is inexact in float32) go through
    float64 and are rounded to float32 toward an odd last bit when
    inexact, as the library's f64 stores do (ot__f32_odd; float32 has more
    than 2 bits beyond either 16-bit dtype). Rounded to nearest instead,
    65519.999999 became float32's 65520, then f16's inf, not 65504."""
    if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and a.dtype.itemsize <= 4):
        f32 = _DT_TO_NP[1]
        return a if a.dtype == f32 and a.flags.c_contiguous else _converted(a, f32)
    d = np.array(a, dtype=np.float64, order="C")
    with np.errstate(over="ignore", invalid="ignore"):
        f = d.astype(np.float32)
        back = f.astype(np.float64)
    bits = f.view(np.uint32)
    odd = (back != d) & np.isfinite(f) & ((bits & 1) == 0)   # inexact with an even last bit
    away = np.abs(back) > np.abs(d)
    bits[odd & away] -= np.uint32(1)       # toward zero: the neighbour on d's side
    bits[odd & ~away] += np.uint32(1)
    return f


def _fill_value(code, value):
    """value as ot_fill's double, checked as NumPy checks an assignment
    into an int32 tensor (code its dtype)."""
    v = float(value)
    if code == _I32:
        _check_int32(np.array([v]))
    return v


def _array_dtype(d, default):
    """The dtype be.array gives an ndarray of dtype d: its own where the
    library has it (any byte order); other floats float64 (longdouble) or
    float32; integers and bools int32; anything else the default."""
    if d.kind == "f":
        return {2: _DT_TO_NP[_F16], 4: _DT_TO_NP[1]}.get(d.itemsize, _DT_TO_NP[2])
    if d.kind in "iub":
        return _DT_TO_NP[_I32]
    if d.kind == "c":
        raise TypeError("optree: %s values have no optree dtype (take .real or abs first)" % d)
    return default


class Tensor(_Expr):
    """neon's Tensor: a multidimensional array on a backend. Its memory is
    host memory: np.asarray(t) is a view of it (no copy)."""
    __slots__ = ("_t", "_n", "_k", "_l", "__weakref__")

    def __getattr__(self, name):
        """_k and _l (a leaf's key and leaves), made at first use."""
        if name in ("_k", "_l"):
            self._k, self._l = _tensor_key(self), (self._t,)
            return getattr(self, name)
        raise AttributeError(name)

    @classmethod
    def _own(cls, ptr, at=None):
        if not ptr:
            raise_error(at=at)
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
        """Its NumPy dtype; a bfloat16 tensor's is float32, the dtype its
        values read as (NumPy has no bfloat16)."""
        return np_dtype(lib.ot_tensor_dtype(self._t))

    @property
    def ndim(self):
        return lib.ot_tensor_ndim(self._t)

    @property
    def size(self):
        return lib.ot_tensor_numel(self._t)

    @property
    def name(self):
        n = lib.ot_tensor_name(self._t)
        return n.decode() if n else None

    @name.setter
    def name(self, value):
        check(lib.ot_tensor_set_name(self._t, None if value is None else cstr(value)), site())

    @property
    def axes(self):
        """The dims' names ("N,C,H,W"), or None; setting names them."""
        a = lib.ot_tensor_axes(self._t)
        return a.decode() if a else None

    @axes.setter
    def axes(self, names):
        check(lib.ot_tensor_set_axes(self._t, None if names is None else cstr(names, "axes")),
              site())
        self._k = _tensor_key(self)

    @property
    def backend(self):
        return Backend._of(lib.ot_tensor_backend(self._t))

    @property
    def __array_interface__(self):
        if lib.ot_tensor_dtype(self._t) == _BF16:     # no NumPy view: __array__ copies
            raise AttributeError("__array_interface__")
        nd = self.ndim
        item = self.dtype.itemsize
        return {"version": 3, "shape": self.shape, "typestr": self.dtype.str,
                "data": (lib.ot_tensor_data(self._t) or 0, False),
                "strides": tuple(lib.ot_tensor_stride(self._t, i) * item for i in range(nd))}

    def __array__(self, dtype=None, copy=None):
        """np.asarray of a bfloat16 tensor (the others are views by
        __array_interface__): its values widened to float32, a copy."""
        a = self.get()
        return a if dtype is None else a.astype(dtype)

    # -- data
    def get(self):
        """A NumPy copy of the values (neon's get)."""
        if lib.ot_tensor_dtype(self._t) != _BF16:
            return np.array(self, copy=True)
        file, line = site()
        a = np.empty(self.shape, np.float32)
        check(lib.ot_get_n_at(self._t, a.ctypes.data, a.nbytes, file, line))
        return a

    def asnumpyarray(self):
        return self.get()

    def set(self, ary):
        """Copies ary in (neon's set): an array-like of this shape or one
        that broadcasts to it (ShapeError otherwise: a same-size array of
        another shape is not reshaped)."""
        file, line = site()
        a = np.asarray(ary)
        shape = self.shape
        if a.shape != shape:
            try:
                a = np.broadcast_to(a, shape)
            except ValueError:
                raise ShapeError("optree: set: an array of shape %s into a tensor of shape %s"
                                 % (a.shape, shape)) from None
        # float16 and bfloat16 tensors take float32 host values (ot_set rounds)
        if lib.ot_tensor_dtype(self._t) in (_F16, _BF16):
            a = _half_host(a)
        elif a.dtype != self.dtype or not a.flags.c_contiguous:
            a = _converted(a, self.dtype)
        check(lib.ot_set_n_at(self._t, a.ctypes.data, a.nbytes, file, line))
        return self

    def fill(self, value):
        file, line = site()
        check(lib.ot_fill_at(self._t, _fill_value(lib.ot_tensor_dtype(self._t), value),
                             file, line))
        return self

    def copy(self, a=None):
        """A new tensor with the values of a (neon: t.copy(a)), or of self."""
        src = self if a is None else a
        if isinstance(src, Tensor):
            file, line = site()
            return Tensor._own(lib.ot_copy_at(src._t, file, line))
        return self.backend.array(np.array(src))

    def __getitem__(self, key):
        file, line = site()
        idx, n = indices(key, self.shape)
        return Tensor._own(lib.ot_slice_at(self._t, n, idx, file, line))

    def save(self, path):
        """Writes a NumPy .npy file (ot_save; np.load reads it)."""
        check(lib.ot_save(cpath(path), self._t), site())

    def __setitem__(self, key, value):
        """t[...] = node | tensor | number | array: an assignment (runs the
        tree). A whole-tensor assignment of a tree whose structure this
        tensor was assigned before replays a compiled program (_Replay):
        one C call binding the tree's leaves."""
        if type(value) is OpTreeNode and (key is Ellipsis or key == _ALL):
            e = _progs.get((id(self), value._k))
            if e is not None and (value._l == e.last or e.bind(value._l)):
                if not _run_tensors(e.p, e.n, e.arr, None, 0):
                    raise_pending()      # a registered op's kernel that raised
                    return
                lib.ot_clear_error()     # an alias, say: the assignment says why
        file, line = site()
        out = self if _whole(key) else self[key]
        if isinstance(value, (OpTreeNode, Tensor)):
            check(lib.ot_assign_at(out._t, node_of(value), file, line), (file, line))
            raise_pending()
            if out is self and type(value) is OpTreeNode and value._k is not None:
                _assigned(self, value)
        elif isinstance(value, numbers.Number):
            check(lib.ot_fill_at(out._t, _fill_value(lib.ot_tensor_dtype(out._t), value),
                                 file, line))
        else:
            out.set(value)

    def transpose(self, *perm):
        file, line = site()
        p = None
        if perm:
            perm = _perm(perm, self.ndim)
            p = (ctypes.c_int * max(len(perm), 1))(
                *[c_integer(a, "axis") for a in perm])
        return Tensor._own(lib.ot_transpose_at(self._t, p, file, line))

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


def _install_inplace():
    """t += x and the like assign into t (its views and NumPy views of it
    see the new values), as NumPy's and neon's do; a tree has none, so
    `node += x` rebinds the name to a new tree."""
    for py in ("add", "sub", "mul", "truediv", "pow", "matmul"):
        op = getattr(OP, _OPERATORS[py])

        def method(self, other, _op=op):
            self[...] = build(_op, self, other)
            return self
        method.__name__ = "__i%s__" % py
        setattr(Tensor, method.__name__, method)


_install_inplace()


_ALL = slice(None)
_tkeys = {}          # a tensor's (backend, dtype, shape, contiguous, axes) -> its key


def _tensor_key(t):
    """A leaf's key: what a C build reads of a tensor, and whether a
    compiled program can bind it (contiguous); not its identity."""
    p = t._t
    nd = lib.ot_tensor_ndim(p)
    shape = shape_tuple(lib.ot_tensor_shape(p))
    strides = tuple(lib.ot_tensor_stride(p, i) for i in range(nd))
    want, contiguous = 1, True
    for d in range(nd - 1, -1, -1):
        contiguous = contiguous and (shape[d] == 1 or strides[d] == want)
        want *= shape[d]
    axes = lib.ot_tensor_axes(p)
    key = (lib.ot_tensor_backend(p), lib.ot_tensor_dtype(p), shape, contiguous, axes)
    k = _tkeys.get(key)
    if k is None:
        k = _tkeys[key] = _next_kid[0] = _next_kid[0] + 1
        if not contiguous:
            _no_program.add(k)
    return k


# ---------------------------------------------------------------- replays
#
# out[:] = tree, for a tree of a structure assigned to out before: a
# program (ot_program) compiled once per (out, structure), its placeholders
# the tree's leaves in order, run by ot_program_run_tensors with the leaves
# of the tree at hand. The first assignment of a structure to out runs as
# ot_assign (its errors name the assignment's line); the second compiles.
# A run the program refuses (a leaf overlapping out, say) is done by
# ot_assign instead. At most _PROGS_MAX programs are kept (the oldest go
# first); a program goes when its output tensor does.

_progs = {}          # (id(out), key) -> _Replay
_seen = {}           # (id(out), key) -> None: assigned once
_outs = {}           # id(out) -> (weakref to out, [its _progs keys])
_no_program = set()  # keys of tensors a program cannot bind
_PROGS_MAX = 256
# ot_program_run_tensors_at without argtypes: its arguments are passed
# converted already (a c_void_p, ints, a ctypes array, None), a third of a
# replay's ctypes cost saved.
_run_tensors = lib._FuncPtr(("ot_program_run_tensors_at", lib))


def _pattern(leaves):
    """Which leaf occurrences are one tensor: (each occurrence's index among
    the distinct tensors, the distinct tensors in order)."""
    first = {}
    pat = tuple([first.setdefault(p, len(first)) for p in leaves])
    return pat, list(first)


class _Replay:
    """A compiled assignment: its program (a placeholder per distinct leaf
    tensor), the leaves it was last bound to, as the ctypes array of the
    distinct ones, and which occurrences are one tensor (pat)."""
    __slots__ = ("p", "n", "last", "arr", "pat")

    def __init__(self, p, leaves):
        self.p = ctypes.c_void_p(p)
        self.pat, distinct = _pattern(leaves)
        self.n = len(distinct)
        self.bind(leaves)

    def bind(self, leaves):
        """Binds other leaves; False where they share tensors otherwise
        (the program reads one placeholder where they read two tensors)."""
        pat, distinct = _pattern(leaves)
        if pat != self.pat:
            return False
        self.last = leaves
        self.arr = (ctypes.c_void_p * max(self.n, 1))(*distinct)
        return True

    def __del__(self):
        try:
            lib.ot_program_free(self.p)
        except Exception:
            pass


def _progs_clear():
    _progs.clear()
    _seen.clear()


def _forget_out(oid):
    ref_keys = _outs.pop(oid, None)
    if ref_keys:
        for k in ref_keys[1]:
            _progs.pop(k, None)
            _seen.pop(k, None)


def _assigned(out, node):
    """After out[:] = node ran by ot_assign: the second time, compile."""
    key = (id(out), node._k)
    if key not in _seen:
        if len(_seen) >= 4 * _PROGS_MAX:
            _seen.clear()
        _seen[key] = None
        return
    if key in _progs:
        return
    p = _compile(out, node)
    if p is None:
        return
    if len(_progs) >= _PROGS_MAX:
        _progs.pop(next(iter(_progs)))
    _progs[key] = _Replay(p, node._l)
    oid = id(out)
    entry = _outs.get(oid)
    if entry is None:
        entry = _outs[oid] = (weakref.ref(out, lambda _r, oid=oid: _forget_out(oid)), [])
    entry[1].append(key)


def _compile(out, node):
    """A program assigning node's structure to out over placeholders, one
    per distinct leaf tensor in node._l's order (so a value the tree reads
    twice is seen as one, as it is in C); None where none can be made."""
    be = lib.ot_tensor_backend(out._t)
    p = lib.ot_program_new_at(be, None, 0)
    if not p:
        lib.ot_clear_error()
        return None
    pool = lib.ot_pool_push()
    ok = False
    try:
        # pre-order, a before b: the leaves in node._l's order
        stack, leaves, built = [(node, False)], {}, []
        while stack:
            n, done = stack.pop()
            if type(n) is not OpTreeNode:
                if isinstance(n, Tensor):
                    if n._k in _no_program:
                        return None
                    t = leaves.get(n._t)
                    if t is None:
                        t = leaves[n._t] = lib.ot_program_placeholder_at(
                            p, b"%d" % len(leaves), lib.ot_tensor_shape(n._t),
                            lib.ot_tensor_dtype(n._t), None, 0)
                    if not t:
                        return None
                    built.append(lib.ot_tensor_node(t))
                else:
                    built.append(_operand(n))
                continue
            a, b = n._s[1:3]
            if done:
                b = built.pop() if b is not None else None
                a = built.pop()
                c = _c_build(n, a, b)
                if not c:
                    return None
                built.append(c)
                continue
            stack.append((n, True))
            if b is not None:
                stack.append((b, False))
            stack.append((a, False))
        ok = (list(leaves) == _pattern(node._l)[1]
              and not lib.ot_program_assign_at(p, out._t, built[0], None, 0)
              and not lib.ot_program_compile_at(p, None, 0))
        return p if ok else None
    finally:
        lib.ot_pool_pop(pool)
        if not ok:
            lib.ot_clear_error()
            lib.ot_program_free(p)


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
        set_field(opts, "threads", threads)
        if rng_seed is not None:
            set_field(opts, "seed", rng_seed, "rng_seed")
        self._b = lib.ot_backend_new(cstr(name, "backend"), ctypes.byref(opts))
        if not self._b:
            raise_error(at=site())
        # Backends live as long as the process: a tree in the C pool may
        # still hold tensors of it (the library frees tensors first).
        Backend._all[self._b] = self
        self.default_dtype = np_dtype(lib.ot_backend_options(self._b).dtype)

    @classmethod
    def _of(cls, ptr):
        return cls._all.get(ptr)

    @property
    def name(self):
        return lib.ot_backend_name(self._b).decode()

    def _new(self, fn, shape, dtype, name, *extra):
        file, line = site()
        t = Tensor._own(fn(self._b, make_shape(shape), dtype_code(dtype), *extra, file, line))
        return _named(t, name)

    # -- tensors
    def empty(self, shape, dtype=None, name=None, **_neon):
        return self._new(lib.ot_empty_at, shape, dtype, name)

    def zeros(self, shape, dtype=None, name=None, **_neon):
        return self._new(lib.ot_zeros_at, shape, dtype, name)

    def ones(self, shape, dtype=None, name=None, **_neon):
        return self._new(lib.ot_ones_at, shape, dtype, name)

    def full(self, shape, value, dtype=None, name=None):
        code = dtype_code(dtype) or dtype_code(self.default_dtype)
        return self._new(lib.ot_full_at, shape, dtype, name, _fill_value(code, value))

    def _like(self, ary, dtype):
        """ary's shape and dtype (an ndarray's as be.array would make it)."""
        if dtype is None and isinstance(ary, Tensor):
            dtype = ary.dtype
        elif dtype is None and isinstance(ary, np.ndarray):
            dtype = _array_dtype(ary.dtype, self.default_dtype)
        return ary.shape, dtype

    def empty_like(self, ary, dtype=None, name=None, **_neon):
        return self.empty(*self._like(ary, dtype), name=name)

    def zeros_like(self, ary, dtype=None, name=None, **_neon):
        return self.zeros(*self._like(ary, dtype), name=name)

    def ones_like(self, ary, dtype=None, name=None, **_neon):
        return self.ones(*self._like(ary, dtype), name=name)

    def array(self, ary, dtype=None, name=None, **_neon):
        """A tensor of ary's values. A C-contiguous, aligned, writable
        ndarray of float32, float64, int32 or float16 (and dtype None or
        its own) is wrapped without a copy (ot_wrap) and kept alive by the
        tensor; anything else is converted (a copy): other floats to
        float64 (longdouble) or float32, any byte order to the native one;
        integers and bools to int32 (SizeOverflowError for a value int32
        cannot hold); a read-only array to a writable copy."""
        file, line = site()
        if isinstance(ary, Tensor):
            ary = ary.get()
        a = ary if isinstance(ary, np.ndarray) else np.asarray(ary)
        code = _NP_TO_DT[_array_dtype(a.dtype, self.default_dtype)] if dtype is None \
            else dtype_code(dtype)
        if code == _BF16:       # no NumPy dtype to wrap: copied from floats (ot_array)
            a = _half_host(a)
            return _named(Tensor._own(lib.ot_array_at(self._b, make_shape(a.shape), code,
                                                      a.ctypes.data, file, line)), name)
        want = np_dtype(code)
        if (a.dtype != want or not a.flags.c_contiguous or not a.flags.aligned
                or not a.flags.writeable):
            a = _converted(a, want)
        key = next(_wrap_keys)
        _kept[key] = a
        ptr = lib.ot_wrap_at(self._b, make_shape(a.shape), code, a.ctypes.data or None, None,
                             ctypes.cast(_release_array, ctypes.c_void_p), key, file, line)
        if not ptr:
            _kept.pop(key, None)
            raise_error()
        return _named(Tensor._own(ptr), name)

    def load(self, path, name=None):
        """A tensor of a .npy file (ot_load: float32, float64, int32; int64
        as int32 when every value fits)."""
        return _named(Tensor._own(lib.ot_load(self._b, cpath(path)), site()), name)

    def parse(self, text, **tensors):
        """The tree that text writes in ot_pp's infix form, its leaves the
        tensors (or nodes) given by name: be.parse("(tanh (a * b))", a=a, b=b)."""
        n = len(tensors)
        names = (ctypes.c_char_p * max(n, 1))(*[cstr(k) for k in tensors])
        ts = (ctypes.c_void_p * max(n, 1))(*[node_of(t) for t in tensors.values()])
        p = lib.ot_parse(cstr(text, "text"), n, names, ts)
        if not p:
            raise_error(at=site())
        return wrap_node(p)

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
        if isinstance(indices, _Expr) and indices.dtype.kind != "i":
            raise DtypeError("optree: onehot: indices of dtype %s: int32 only" % indices.dtype)
        d = depth if depth is not None else (out.shape[axis] if out is not None else None)
        node = build(OP.onehot, indices, args=op_args(OP.onehot, {"axis": axis, "depth": d}))
        return _out(node, out)

    def execute(self, node):
        return node

    def __repr__(self):
        return "<optree backend %r>" % self.name


def _named(t, name):
    if name:
        t.name = name
    return t


def dot_axes(w, x, axes=None):
    """ngraph's dot over named axes: contracts the axes named (None: every
    name the two share); w's other axes, then x's."""
    file, line = site()
    return wrap_node(lib.ot_dot_axes_at(_operand(w), _operand(x),
                                        None if axes is None else cstr(axes, "axes"), file, line))


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
        if op.kind == "UNARY":          # the common case: fast
            method = _fast_unary(op)
        else:
            def method(self, *operands, _fn=fn, out=None, **kw):
                return _out(_fn(*operands, **kw), out)
        method.__name__, method.__doc__ = op.name, fn.__doc__
        setattr(Backend, op.name, method)


_install_table_ops()


def gen_backend(backend="cpu", rng_seed=None, default_dtype=np.float32, threads=0, **_neon):
    """neon's gen_backend: 'cpu' (also 'mkl', a CPU backend too) or 'ref';
    threads as Backend's; neon's other arguments (device_id, batch_size,
    ...) mean nothing on the CPU and are ignored."""
    name = {"mkl": "cpu"}.get(backend, backend)
    if name in ("gpu", "nervanagpu"):
        raise BackendError("optree: backend %r: optree runs on the CPU; use gen_backend('cpu')"
                           % backend)
    return Backend(name, rng_seed=rng_seed, default_dtype=default_dtype, threads=threads)


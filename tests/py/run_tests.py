"""run_tests.py - the Python module's tests (make test's and make check's "py"
phase): neon's backend page run as written (tests/py/neon_backend_page.py)
with what it prints and computes checked against what the page states, then
unit tests of the module (operators, slicing views, NumPy without copies and
its lifetimes, errors naming the Python file:line, every op of the table by
name), and that the generated declarations match the header
(tools/gen_py.py --check and --layout). Ends with "N passed, M failed".

usage: PYTHONPATH=python python3 tests/py/run_tests.py [BUILD_DIR]
"""
import contextlib
import gc
import io
import os
import re
import subprocess
import sys
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
if len(sys.argv) > 1:
    os.environ.setdefault("OPTREE_LIB", os.path.join(sys.argv[1], "liboptree.so"))

import optree  # noqa: E402
from optree import Autodiff, OpTreeNode, gen_backend  # noqa: E402

PAGE = os.path.join(ROOT, "tests", "py", "neon_backend_page.py")
RESULTS = [0, 0]
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def sections():
    """The page's sections: title -> (first line, code)."""
    out, title, start, lines = {}, None, 0, open(PAGE).read().split("\n")
    for i, line in enumerate(lines + ["# --- end"]):
        if line.startswith("# --- "):
            if title:
                out[title] = (start, "\n".join(lines[start:i]) + "\n")
            title, start = line[6:], i
    return out


def run_section(title, ns):
    """Runs a section in ns; the page uses neon's OpTreeNode without
    importing it (neon.backends.backend's), so ns has it."""
    ns.setdefault("OpTreeNode", OpTreeNode)
    first, code = sections()[title]
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile("\n" * first + code, PAGE, "exec"), ns)
    return buf.getvalue()


def numbers(text):
    return [float(x) for x in re.findall(r"-?\d+\.?\d*(?:e[-+]?\d+)?", text)]


# ---------------------------------------------------------------- the page

@case
def page_directly_calling_the_backend():
    ns = {}
    run_section("directly calling the backend", ns)
    assert ns["fval"].shape == (100, 100)
    assert np.allclose(ns["fval"].get(), 0.5)          # the logistic of zeros
    assert ns["myNumpyArray"].shape == (100, 100) and not ns["myNumpyArray"].any()


@case
def page_minimal_op_tree():
    out = run_section("op-trees: a minimal example", {})
    # The page: ({'shape': (2, 2), 'op': 'add'}, x0, x1) [[ 2.  2.]  [ 2.  2.]]
    tree, values = out.split("\n", 1)
    assert tree == "({'shape': (2, 2), 'op': 'add'}, x0, x1)", tree
    assert numbers(values) == [2.0, 2.0, 2.0, 2.0], values


def creation_context():
    """What the fragments of "Op-Tree Creation" take for granted."""
    be = gen_backend("cpu")
    x1, x2 = be.ones((2, 2), name="x1"), be.ones((2, 2), name="x2")
    a, b, x = be.array(np.arange(4.0).reshape(2, 2), name="a"), x2, x1
    return dict(be=be, ng=be, x=x, x1=x1, x2=x2, t1=x1 * 2, t2=x2 + 1, a=a, b=b,
                out_buffer=be.empty((2, 2)), op_dict={"shape": (2, 2), "op": "add"},
                f_val=be.empty((2, 2)), f=x1 + x2, OpTreeNode=OpTreeNode)


@case
def page_op_tree_creation_and_execution():
    ns = creation_context()
    for title in ("op-tree creation: operator overload", "op-tree creation: backend functions",
                  "op-tree creation: OpTreeNode.build()", "op-tree creation: OpTreeNode's init function"):
        run_section(title, ns)
    assert np.allclose(ns["out_buffer"].get(), np.sqrt(np.arange(4.0).reshape(2, 2)))
    assert str(ns["f"]).startswith("({'shape': (1, 1), 'op': 'mean'")      # neon keeps dims
    ns["f"] = ns["x1"] + ns["x2"]
    run_section("op-tree execution", ns)
    assert np.allclose(ns["f_val"].get(), 2.0)


@case
def page_autodiff_example_0():
    ns = {}
    out = run_section("autodiff: example 0", ns)
    # "result is [2 * x0 + x1, x0]": x0 = 1, x1 = 2
    assert out.startswith("# example 0\n"), out
    assert numbers(out[12:]) == [4.0] * 9 + [1.0] * 9, out


@case
def page_autodiff_fprop_tree():
    ns = {}
    run_section("autodiff: example 0", ns)
    out = run_section("autodiff: a forward-propagation op-tree", ns)
    assert "tanh" in out, out
    x0, x1 = 1.0, 2.0
    dt = 1 - np.tanh(x0 * x1 + x0 / x1) ** 2
    g0, g1 = ns["x0_grad_op_tree"].get(), ns["x1_grad_op_tree"].get()
    assert np.allclose(g0, dt * (x1 + 1 / x1)) and np.allclose(g1, dt * (x0 - x0 / x1 ** 2))


@case
def page_autodiff_dynamic_tree():
    """The page's dynamically generated tree, for x0[0, 0] = 0 .. 9."""
    for k in range(10):
        ns = {}
        run_section("autodiff: example 0", ns)
        rng = np.random.RandomState(k)
        draw = rng.randint(10, size=(3, 3))
        draw[0, 0] = k

        class _Random:                   # np.random.randint gives the draw above
            def randint(self, *a, **kw):
                return draw.copy()
        ns["np"] = type("np", (), {"random": _Random()})
        out = run_section("autodiff: a dynamically generated op-tree", ns)
        x = draw.astype(np.float64)
        want = k * x + (1 / (1 + np.exp(-x)) if k % 2 == 0 else np.tanh(x))
        assert np.allclose(ns["f"].get(), want), (k, out)
        pp = out.split("\n")[3]
        assert pp.count("+ x0") == k and ("(sig x0)" if k % 2 == 0 else "(tanh x0)") in pp, pp
        # x0 holds integers (int32, as np.random.randint's values): optree
        # differentiates floats only, so its gradient tree is zeros.
        assert out.split("\n")[4] == "zeros", out


# ---------------------------------------------------------------- the module

BE = gen_backend("cpu")
REF = gen_backend("ref")


@case
def operators_match_numpy():
    rng = np.random.RandomState(1)
    a, b = rng.uniform(0.5, 2, (4, 5)).astype(np.float32), rng.uniform(0.5, 2, (4, 5)).astype(np.float32)
    for be in (BE, REF):
        x, y = be.array(a), be.array(b)
        exprs = [(lambda p, q: p + q * 2 - 1 / q), (lambda p, q: -p ** 2 + abs(q)),
                 (lambda p, q: (p < q) + (p >= q) * 2 + (p == p)), (lambda p, q: 3 - p / 2)]
        for e in exprs:
            out = be.empty(a.shape)
            out[:] = e(x, y)
            assert np.allclose(out.get(), e(a, b), rtol=1e-6), e
        out = be.empty((4, 4))
        out[:] = be.dot(x, y.T)
        assert np.allclose(out.get(), a @ b.T, rtol=1e-5)


@case
def reductions_and_table_ops():
    a = np.random.RandomState(2).uniform(-1, 1, (3, 4))
    x = BE.array(a)
    assert np.allclose(BE.sum(x, axis=1).get(), a.sum(1, keepdims=True))
    assert np.allclose(BE.max(x).get(), a.max())
    assert (BE.argmax(x, axis=1).get().ravel() == a.argmax(1)).all()
    assert np.allclose(optree.softmax(x, axis=1).get(), np.exp(a) / np.exp(a).sum(1, keepdims=True))
    assert np.allclose(BE.expm1(x).get(), np.expm1(a)) and np.allclose(BE.sig(x).get(), 1 / (1 + np.exp(-a)))
    n = 0
    for op in optree.OPS_BY_NUM.values():          # every op of the table by name
        if not op.user:
            assert callable(getattr(optree, op.name)) and callable(getattr(BE, op.name)), op.name
            n += 1
    assert n >= 60, n


@case
def table_ops_against_their_numpy_peers():
    """Every elementwise op of the table with a NumPy spelling (ops.def's
    peer column), through the module, on both backends, f32 and f64."""
    rng = np.random.RandomState(4)
    checked = 0
    for op in optree.OPS_BY_NUM.values():
        if op.kind not in ("UNARY", "BINARY") or not op.peer:
            continue
        peer = eval(op.peer, {"np": np})
        for dt, tol in ((np.float32, 2e-6), (np.float64, 1e-13)):
            xs = [rng.uniform(0.5, 2.0, (3, 7)).astype(dt) for _ in range(op.arity)]
            want = peer(*xs)
            for be in (BE, REF):
                got = getattr(optree, op.name)(*[be.array(x) for x in xs]).get()
                assert got.dtype == want.dtype, (op.name, got.dtype, want.dtype)
                assert np.allclose(got, want, rtol=tol, atol=0), (op.name, be, dt)
        checked += 1
    assert checked >= 25, checked


@case
def slicing_gives_views():
    a = np.arange(24.0).reshape(4, 6)
    t = BE.array(a.copy())
    v = t[1:4:2, ::-2]
    assert v.shape == (2, 3) and (v.get() == a[1:4:2, ::-2]).all()
    v[:] = 0                      # writes through to t
    b = a.copy()
    b[1:4:2, ::-2] = 0
    assert (t.get() == b).all()
    assert (t[:, 1].get() == b[:, 1]).all() and (t[-1].get() == b[-1]).all()
    assert (t.T.get() == b.T).all() and (t.reshape(6, 4).get() == b.reshape(6, 4)).all()
    t[0, :] = 7.5
    assert (t.get()[0] == 7.5).all()
    n = BE.array(a)[1:3] * 2      # a tree sliced
    assert ((n[0] + 0).get() == a[1] * 2).all()


@case
def numpy_without_copies():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = BE.array(a)
    assert np.asarray(t).__array_interface__["data"][0] == a.__array_interface__["data"][0]
    a[0, 0] = 42
    assert t.get()[0, 0] == 42                           # the tensor reads a's memory
    view = np.asarray(t)
    view[1, 1] = -1
    assert a[1, 1] == -1
    # the tensor keeps the array alive; the view keeps the tensor alive
    b = np.ones(5, dtype=np.float64)
    tb = BE.array(b)
    addr = b.ctypes.data
    del b
    gc.collect()
    nb = np.asarray(tb)
    del tb
    gc.collect()
    assert nb.ctypes.data == addr and (nb == 1).all()
    # unsupported dtypes and strided arrays are converted (a copy)
    ti = BE.array(np.arange(4, dtype=np.int64))
    assert ti.dtype == np.int32 and (ti.get() == np.arange(4)).all()
    ts = BE.array(np.arange(10.0)[::2])
    assert (ts.get() == np.arange(10.0)[::2]).all()


@case
def errors_name_the_python_line():
    x, y = BE.ones((2, 3)), BE.ones((4, 5))
    line = sys._getframe().f_lineno + 2
    try:
        x + y
    except optree.ShapeError as e:
        assert e.code == -2 and isinstance(e, optree.OptreeError)
        assert "run_tests.py:%d" % line in str(e), str(e)
    else:
        raise AssertionError("no ShapeError")
    out = BE.empty((7,))
    line = sys._getframe().f_lineno + 2
    try:
        out[:] = x * 2
    except optree.OptreeError as e:
        assert "run_tests.py:%d" % line in str(e), str(e)
    else:
        raise AssertionError("no error")
    try:
        gen_backend("nosuch")
    except optree.BackendError:
        pass
    assert [c.__name__ for c in optree.ERROR_CLASSES][:3] == ["InvalidError", "ShapeError", "DtypeError"]
    assert issubclass(optree.ShapeError, ValueError)


@case
def node_pool_stays_bounded():
    x = BE.ones((2,))
    keep = x + 1
    lib = optree._core.lib
    for _ in range(40000):
        x * 2 + 1
    assert lib.ot_pool_default_nodes() < 2 * optree._core._DRAIN_AT
    assert (keep.get() == 2).all()                      # a kept node survives the drains


@case
def structures_cached_and_replayed():
    """A structure seen before is built without a C call and its
    assignment replayed by a compiled program; results stay those of
    NumPy whatever the leaves, constants, aliasing and views."""
    from optree import _core
    rng = np.random.RandomState(3)
    arrs = [rng.uniform(0.5, 2, 16).astype(np.float32) for _ in range(4)]
    a, b, c, d = [BE.array(x) for x in arrs]
    out = BE.empty((16,))
    for k in range(4):                      # ot_assign, compile, then replays
        x, y = (a, b) if k % 2 else (c, d)  # other leaves, same structure
        xn, yn = (arrs[0], arrs[1]) if k % 2 else (arrs[2], arrs[3])
        out[:] = BE.tanh(x * y + x / y) * 2
        assert np.allclose(out.get(), np.tanh(xn * yn + xn / yn) * 2, rtol=1e-6)
    assert (id(out), (BE.tanh(a * b + a / b) * 2)._k) in _core._progs
    out[:] = BE.tanh(a * b + a / b) * 3     # another constant: another structure
    out[:] = BE.tanh(a * b + a / b) * 3
    assert np.allclose(out.get(), np.tanh(arrs[0] * arrs[1] + arrs[0] / arrs[1]) * 3, rtol=1e-6)
    s = a * b                               # a subtree used twice
    for _ in range(3):
        out[:] = s + s * c
    assert np.allclose(out.get(), arrs[0] * arrs[1] * (1 + arrs[2]), rtol=1e-6)
    for x, y in ((a, a), (a, a), (a, a), (c, d), (b, b)):  # one tensor twice, then two
        out[:] = x * y - y
        assert np.allclose(out.get(), np.asarray(x) * np.asarray(y) - np.asarray(y), rtol=1e-6)
    t = BE.array(arrs[0].copy())
    for _ in range(3):                      # the leaf is the output: ot_assign
        t[:] = t * 2 + 0
    assert np.allclose(t.get(), arrs[0] * 8)
    m = BE.array(rng.uniform(size=(4, 6)).astype(np.float32))
    o2 = BE.empty((6, 4))
    for _ in range(3):                      # a strided leaf: ot_assign
        o2[:] = m.T * 2
    assert np.allclose(o2.get(), np.asarray(m).T * 2)
    assert (a * b)._p is None               # cached: no C node yet
    assert "*" in (a * b).pp() and (a * b).shape == (16,)   # built in C when asked
    line = sys._getframe().f_lineno + 3
    for _ in range(2):                      # a bad structure fails each time
        try:
            a + BE.ones((3,))
        except optree.ShapeError as e:
            assert "run_tests.py:%d" % line in str(e), str(e)
        else:
            raise AssertionError("no ShapeError")
    n_before = len(_core._progs)
    o3 = BE.empty((16,))
    for _ in range(2):
        o3[:] = a - b
    assert len(_core._progs) == n_before + 1
    del o3
    gc.collect()
    assert len(_core._progs) == n_before    # its program went with it


@case
def model_fit_predict_save_load():
    import tempfile
    rng = np.random.RandomState(0)
    x = rng.randn(256, 4).astype(np.float32)
    y = np.eye(2, dtype=np.float32)[(x[:, 0] + x[:, 1] > 0).astype(int)]
    m = optree.Model(BE, 4).linear(16, "relu").linear(2).loss("softmax_ce").adam(lr=0.05)
    r = m.fit(x, y, epochs=20, batch=32, seed=1)
    assert r.epochs_run == 20 and r.loss < 0.1, r
    assert (m.predict(x).argmax(1) == y.argmax(1)).mean() > 0.95
    path = os.path.join(tempfile.mkdtemp(), "m.npz")
    m.save(path)
    assert sorted(np.load(path).files) == ["b0", "b1", "w0", "w1"]
    m2 = optree.Model(BE, 4).linear(16, "relu").linear(2).loss("softmax_ce").load(path)
    assert np.array_equal(m2.predict(x), m.predict(x))
    assert [t.shape for t in m.parameters()] == [(4, 16), (16,), (16, 2), (2,)]
    c = (optree.Model(BE, input_shape=(1, 6, 6)).conv(4, 3, "relu", padding="same")
         .batch_norm().max_pool(2).dropout(0.2).linear(2).loss("mse").sgd(lr=0.01, momentum=0.9))
    xi = rng.randn(32, 1, 6, 6).astype(np.float32)
    r = c.fit(xi, rng.randn(32, 2).astype(np.float32), epochs=1, batch=8)
    assert r.epochs_run == 1 and c.predict(xi).shape == (32, 2)
    line = sys._getframe().f_lineno + 2
    try:
        m.fit(x, y[:, :1])
    except optree.ShapeError as e:
        assert "run_tests.py:%d: model_fit" % line in str(e), str(e)
    else:
        raise AssertionError("no ShapeError")


@case
def program_replay():
    p = optree.Program(BE)
    x = p.placeholder("x", (8,))
    w = BE.array(np.arange(8, dtype=np.float32))
    out = BE.empty((8,))
    p.assign(out, BE.sig(x * w) + 1)
    p.compile()
    for k in range(3):
        data = np.full(8, k * 0.5, dtype=np.float32)
        p.run(x=data)
        assert np.allclose(out.get(), 1 / (1 + np.exp(-data * np.arange(8))) + 1, rtol=1e-6)
    assert "kernel" in p.explain().lower()
    try:
        p.run()                          # x left unbound
    except optree.OptreeError as e:
        assert "run_tests.py" in str(e), str(e)
    else:
        raise AssertionError("no error")


@case
def explain_and_names():
    x = BE.ones((4,), name="x")
    f = (BE.exp(x) * 2).name("h1") + x
    assert f.pp() == "(h1:((exp x) * 2.0) + x)", f.pp()
    assert "kernel" in f.explain().lower()
    assert f.shape == (4,) and f.dtype == np.float32 and f.op == "add"


@case
def save_load_and_parse():
    import tempfile
    a = np.arange(6, dtype=np.float64).reshape(2, 3)
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "a.npy")
        BE.array(a).save(path)
        assert (np.load(path) == a).all()
        t = BE.load(path, name="t")
        assert t.dtype == np.float64 and (t.get() == a).all()
        try:
            BE.load(os.path.join(d, "missing.npy"))
        except optree.OptreeError as e:
            assert e.code == -12 and "missing.npy" in str(e), str(e)
        else:
            raise AssertionError("no error")
    x = BE.array(a, name="x")
    f = BE.parse("(tanh (x * 2))", x=x)
    assert f.pp() == "(tanh (x * 2.0))" and np.allclose(f.get(), np.tanh(a * 2))


@case
def custom_op_from_a_python_callable():
    softplus = optree.register_op("softplus_py", lambda x: np.log1p(np.exp(x)),
                                  grad=lambda ins, out, g, which: g * BE.sig(ins[0]))
    hyp = optree.register_op("hypot_py", np.hypot, arity=2)
    a = np.linspace(-2, 2, 6)
    x = BE.array(a, name="x")
    f = softplus(x) * 2
    assert f.pp() == "((softplus_py x) * 2.0)", f.pp()
    assert np.allclose(f.get(), 2 * np.log1p(np.exp(a)))
    g, = Autodiff(f, BE).get_grad_asnumpyarray([x])
    assert np.allclose(g, 2 / (1 + np.exp(-a)))
    y = BE.array(np.ones((2, 1), np.float32))
    h = hyp(BE.array(a.astype(np.float32)), y)
    assert h.shape == (2, 6) and h.dtype == np.float32 and np.allclose(h.get(), np.hypot(a, 1))
    # A rule returning a tensor it made, which dies with the rule's frame
    # (the leaf was freed before the library read it: a heap corruption).
    made = optree.register_op("made_py", lambda v: v * 1.0,
                              grad=lambda ins, out, g, which: BE.array(np.full(6, 3.0)))
    for _ in range(3):
        g, = Autodiff(made(x) * 2, BE).get_grad_asnumpyarray([x])
        assert np.array_equal(g, np.full(6, 3.0)), g


@case
def named_axes():
    a = np.random.RandomState(3).uniform(size=(2, 3, 4))
    x = BE.array(a)
    x.axes = "N,C,W"
    assert x.axes == "N,C,W"
    s = optree.sum(x, axes="C,W")
    assert s.axes == "N" and np.allclose(s.get(), a.sum((1, 2)))
    w = BE.array(np.ones((3, 4, 5)))
    w.axes = "C,W,K"
    d = optree.dot_axes(w, x, "C,W")
    assert d.shape == (5, 2) and np.allclose(d.get(), np.tensordot(np.ones((3, 4, 5)), a, ([0, 1], [1, 2])))
    try:
        optree.sum(x, axes="Q")
    except optree.InvalidError as e:
        assert "'Q'" in str(e) and "run_tests.py" in str(e), str(e)
    else:
        raise AssertionError("no error")


# ---------------------------------------------------------------- misuse (each once a silent
# wrong result or a crash)

def child(code):
    """Runs code in a fresh interpreter with the module (a crash there is a
    failure here, not the end of the run); returns its stdout."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-c", "import numpy as np, optree, gc\n" + code],
                       env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
    return r.stdout


def raises(exc, fn, *args, **kw):
    """The exception fn(*args) raises, asserting it is an exc."""
    try:
        fn(*args, **kw)
    except exc as e:
        return e
    raise AssertionError("%s did not raise %s" % (fn, exc.__name__))


@case
def array_wrapped_twice_keeps_it_alive():
    out = child("be = optree.gen_backend('cpu')\n"
                "a = np.full(1 << 20, 7.0, dtype=np.float32)\n"
                "t1 = be.array(a); t2 = be.array(a)\n"
                "del a, t1; gc.collect()\n"
                "junk = [np.full(1 << 20, -1.0, dtype=np.float32) for _ in range(4)]\n"
                "print((t2.get() == 7).all())\n")
    assert out.strip() == "True", out


@case
def read_only_arrays_are_copied():
    import tempfile
    b = bytes(16)
    t = BE.array(np.frombuffer(b, dtype=np.float32))
    t.fill(1.0)
    assert b == bytes(16) and (t.get() == 1).all()
    path = os.path.join(tempfile.mkdtemp(), "ro.bin")
    np.arange(8, dtype=np.float32).tofile(path)
    m = np.memmap(path, dtype=np.float32, mode="r")
    tm = BE.array(m)
    tm[:] = 1.0                         # a write into a read-only mapping crashed
    assert (tm.get() == 1).all() and (np.fromfile(path, np.float32) == np.arange(8)).all()
    del m, tm


@case
def custom_op_shape_error_keeps_numpy_message():
    out = child("be = optree.gen_backend('cpu')\n"
                "add2 = optree.register_op('add2', lambda a, b: a + b, arity=2)\n"
                "try:\n"
                "    add2(be.ones((3,)), be.ones((4,)))\n"
                "except optree.ShapeError as e:\n"
                "    print(e)\n"
                "print([bytes([i]) for i in range(3)])\n")
    assert "add2: shape mismatch" in out and "<string>:5" in out, out


@case
def custom_op_gradient_rule_failures_raise():
    out = child("be = optree.gen_backend('cpu')\n"
                "x = be.array(np.arange(6, dtype=np.float32).reshape(2, 3))\n"
                "for rule in (lambda i, o, g, w: None, lambda i, o, g, w: 1 / 0):\n"
                "    op = optree.register_op('g%d' % id(rule), lambda v: v * 3, grad=rule)\n"
                "    try:\n"
                "        optree.Autodiff(op(x), be).get_grad_asnumpyarray([x])\n"
                "    except optree.InvalidError as e:\n"
                "        print(type(e.__cause__).__name__)\n")
    assert out.split() == ["TypeError", "ZeroDivisionError"], out


@case
def custom_op_kernel_exception_raised_to_the_caller():
    x = BE.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    boom = optree.register_op("boom_py", lambda v: 1 / 0)
    bad = optree.register_op("bad_py", lambda v: np.ones(7))
    none = optree.register_op("none_py", lambda v: None)
    for f, exc in ((boom, ZeroDivisionError), (bad, ValueError), (none, TypeError)):
        out = BE.empty((2, 3))
        for _ in range(3):              # ot_assign, then the compiled replays
            raises(exc, out.__setitem__, Ellipsis, f(x) * 2)
            assert np.isnan(out.get()).all()    # not uninitialised memory
        raises(exc, f(x).get)
    ok = optree.register_op("ok_py", lambda v: v + 1)
    assert (ok(x).get() == np.arange(6).reshape(2, 3) + 1).all()
    raises(TypeError, ok, x, x)         # its arity, not a ctypes IndexError


@case
def program_run_converts_and_checks_bindings():
    p = optree.Program(BE)
    x = p.placeholder("x", (4,))
    out = BE.empty((4,))
    p.assign(out, x * 2)
    p.compile()
    for arg in (np.arange(4, dtype=np.int32), np.arange(4, dtype=np.float64), [0, 1, 2, 3]):
        p.run(x=arg)
        assert (out.get() == [0, 2, 4, 6]).all(), (arg, out.get())
    raises(optree.OptreeError, p.run, x=np.zeros(5, np.float32))
    raises(optree.OptreeError, p.run, x=np.zeros((2, 2), np.float32))


@case
def integers_out_of_range_are_refused():
    t = BE.array(np.arange(5, dtype=np.float32))
    raises(OverflowError, BE.zeros, (2**64 + 3,))
    raises(TypeError, BE.zeros, (2.7,))
    raises(IndexError, t.__getitem__, 2**64 + 1)
    assert (t[:2**64 + 2].get() == np.arange(5)).all()        # bounds clamp, as NumPy's
    x = BE.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    raises(OverflowError, optree.sum, x, axis=2**32)
    raises(OverflowError, optree.Model, BE, input_shape=(2**64 + 4,))
    raises(OverflowError, gen_backend, "cpu", rng_seed=2**70)
    raises(ValueError, optree.Model(BE, input_shape=(1, 6, 6)).conv, 2, 3, stride=(1, 1, 1, 1))


@case
def array_refuses_values_int32_cannot_hold():
    raises(optree.SizeOverflowError, BE.array, np.array([2**31, 5]))
    raises(OverflowError, BE.array, [3_000_000_000])
    raises(OverflowError, BE.array, np.array([2**32 - 1], np.uint32))
    assert (BE.array(np.array([2**31 - 1, -2**31])).get() == [2**31 - 1, -2**31]).all()
    t = BE.array(np.array([0.1], dtype=">f8"))
    assert t.dtype == np.float64 and t.get()[0] == 0.1
    assert BE.array(np.array([0.1], np.longdouble)).dtype == np.float64
    raises(TypeError, BE.array, np.array([1j]))


@case
def a_none_operand_is_a_type_error():
    """None reached C as a NULL operand: "add: operand 2 is NULL", a
    NullError naming nothing the caller wrote."""
    x = BE.array(np.arange(3, dtype=np.float32))
    for fn in (lambda: x + None, lambda: None + x, lambda: x == None,   # noqa: E711
               lambda: (x * 2) < None, lambda: BE.exp(None), lambda: BE.dot(x, None),
               lambda: BE.sum(None)):
        e = raises(TypeError, fn)
        assert "is None, not a tensor" in str(e), str(e)
    assert (BE.exp(x * 0).get() == 1).all()      # the error slot was cleared


@case
def two_ellipses_are_an_index_error():
    """As NumPy's; the second "..." was refused as not "ints, slices and ..." """
    x = BE.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    for t in (x, x * 1):
        e = raises(IndexError, t.__getitem__, (Ellipsis, 0, Ellipsis))
        assert "single ellipsis" in str(e), str(e)
    assert (x[..., 1].get() == [1, 4]).all()


@case
def too_many_indices_are_an_index_error():
    """As NumPy's; x[0, 0, 0] of a 2-d x was the library's InvalidError (a
    ValueError), which `except IndexError` missed."""
    x = BE.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    for t in (x, x * 1):
        for key in ((0, 0, 0), (slice(None),) * 3, (0, Ellipsis, 0, 0)):
            e = raises(IndexError, t.__getitem__, key)
            assert "too many indices" in str(e), str(e)
    raises(IndexError, BE.array(np.float32(2)).__getitem__, 0)
    assert x[1, ..., 2].get() == 5


@case
def an_empty_reduction_is_a_value_error():
    """max of zero elements: NumPy's ValueError ("zero-size array to
    reduction operation maximum which has no identity"); EmptyError was an
    OptreeError only, which `except ValueError` missed."""
    x = BE.array(np.zeros((0, 3), np.float32))
    for fn in (BE.max, BE.min, BE.argmax):
        e = raises(ValueError, fn, x, axis=0)
        assert isinstance(e, optree.EmptyError), type(e)
    assert (BE.sum(x, axis=0).get() == 0).all()


@case
def a_numpy_bool_is_a_number_as_a_python_bool():
    """x + np.True_ was "True is not a tensor, a node or a number" (np.bool_
    is not a numbers.Number)."""
    x = BE.array(np.array([1, 2, 3], np.float32))
    for b in (np.True_, np.False_):
        assert ((x + b).get() == (x + bool(b)).get()).all()
        assert ((x > b).get() == (x > bool(b)).get()).all()


@case
def bf16_names_bfloat16():
    """"bf16", ot_parse's name, is bfloat16 as "bfloat16" is (NumPy has
    neither; it was "data type 'bf16' not understood")."""
    lib = optree._core.lib
    a, b = BE.zeros((2,), dtype="bf16"), BE.zeros((2,), dtype="bfloat16")
    assert lib.ot_tensor_dtype(a._t) == lib.ot_tensor_dtype(b._t) == optree._core._BF16
    a.set([1.0, 1.00390625])            # bf16 keeps 8 bits: the second rounds to 1
    assert (a.get() == [1, 1]).all()


@case
def float_and_int_of_one_element():
    """As NumPy's float(a) and int(a) of a one-element array, tensor or
    tree; any other size is a TypeError (it was a TypeError for every size)."""
    x = BE.array(np.array([[2.75]], np.float32))
    for t in (x, x * 2 - 2.75):
        assert float(t) == 2.75 and int(t) == 2
    i = BE.array(np.array([-7], np.int32))
    assert int(i) == -7 and float(i) == -7.0
    e = raises(TypeError, float, BE.array(np.array([1, 2], np.float32)))
    assert "one element" in str(e) and "(2,)" in str(e), str(e)
    raises(TypeError, int, BE.array(np.zeros((0,), np.float32)))


@case
def numpy_scalars_on_the_left_and_0d_indices():
    """np.True_ < x reached x.__gt__ as a 0-d ndarray ("wrap an ndarray with
    be.array"), and x[np.array(1)] was "ints, slices and ... only": NumPy
    takes both as their scalar."""
    x = BE.array(np.array([[0, 1, 2], [3, 4, 5]], np.float32))
    assert ((np.True_ < x).get() == (x > 1).get()).all()
    assert ((np.float64(2.5) >= x).get() == (x <= 2.5).get()).all()
    assert ((np.int32(3) - x).get() == 3 - x.get()).all()
    assert (x[np.array(1)].get() == [3, 4, 5]).all()
    assert x[np.array(1), np.array(-1, np.int8)].get() == 5
    for bad in (np.array(True), np.array([1]), np.array(1.0)):
        try:
            x[bad]
        except (TypeError, IndexError):
            continue
        raise AssertionError("x[%r] was accepted" % (bad,))


@case
def transpose_checks_its_axes():
    x = BE.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    for perm in ((1, 0, 2), (1,)):
        raises(ValueError, x.transpose, *perm)
        raises(ValueError, (x * 1).transpose, *perm)
    assert (x.transpose(1, 0).get() == np.arange(6).reshape(2, 3).T).all()
    fn = lambda: x.transpose(0, 0)      # noqa: E731 (its line is the error's)
    e = raises(optree.OptreeError, fn)
    assert "run_tests.py:%d: transpose" % fn.__code__.co_firstlineno in str(e), str(e)


@case
def transpose_takes_negative_axes():
    """As NumPy's: x.transpose(-1, 0, 1) was refused by the library as
    "not a permutation" (it reads 0..ndim-1 only)."""
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    x = BE.array(a)
    for perm in ((-1, 0, 1), (2, -3, -2), (-1, -2, -3)):
        want = a.transpose(perm)
        assert (x.transpose(*perm).get() == want).all()
        assert (x.transpose(perm).get() == want).all()
        assert ((x * 1).transpose(*perm).get() == want).all()
    for perm in ((-4, 0, 1), (-1, 2, 0)):     # out of range; -1 is 2 twice
        raises(ValueError, x.transpose, *perm)
        raises(ValueError, (x * 1).transpose, *perm)


@case
def filling_int32_checks_the_value():
    t = BE.zeros((3,), dtype=np.int32)
    raises(ValueError, t.__setitem__, slice(None), float("nan"))
    raises(OverflowError, t.fill, 2**31)
    raises(OverflowError, t.fill, float("inf"))
    raises(ValueError, BE.full, (2,), float("nan"), dtype=np.int32)
    raises(ValueError, t.set, [1.0, float("nan"), 2.0])
    t.fill(-2**31)
    assert (t.get() == -2**31).all()


@case
def inplace_operators_assign_into_the_tensor():
    t = BE.ones((3,))
    alias, view = t, np.asarray(t)
    t += 1
    t *= 3
    t -= BE.ones((3,))
    t /= 5
    t **= 2
    assert t is alias and isinstance(t, optree.Tensor)
    assert np.allclose(view, 1.0) and np.allclose(alias.get(), 1.0)
    n = t * 1
    n += 1                              # a tree: rebound, as an immutable value
    assert isinstance(n, OpTreeNode) and (t.get() == 1).all()


@case
def truth_length_iteration_as_numpy():
    t = BE.array(np.array([1., 2., 3.], np.float32))
    raises(ValueError, bool, t > 100)
    raises(ValueError, bool, t == 99)
    assert not bool(t[0] > 100) and bool(t[1] == 2)
    assert 2 in t and 99 not in t
    assert [float(v.get()) for v in t] == [1.0, 2.0, 3.0]
    assert [float(v.get()) for v in t * 2] == [2.0, 4.0, 6.0]
    raises(IndexError, t.__getitem__, 3)
    raises(TypeError, len, BE.zeros(()))
    raises(IndexError, t.__getitem__, True)


@case
def placeholders_start_zero_and_stay_in_their_program():
    p = optree.Program(BE)
    x = p.placeholder("x", (4,))
    assert (x.get() == 0).all() and (x[1:3].get() == 0).all()
    p2 = optree.Program(BE)
    raises(optree.StateError, p2.assign, BE.empty((4,)), x + 1)


@case
def embedded_nul_is_refused():
    import tempfile
    d = tempfile.mkdtemp()
    raises(ValueError, optree.Model(BE, 4).linear(2).save, os.path.join(d, "a\0b.npz"))
    raises(ValueError, BE.ones((2,)).save, os.path.join(d, "x\0y.npy"))
    assert os.listdir(d) == []
    t = BE.ones((2,))
    raises(ValueError, setattr, t, "name", "a\0b")
    raises(ValueError, BE.load, "a\0b.npy")


@case
def model_fit_refuses_another_backends_tensors():
    m = optree.Model(BE, 4).linear(2).loss("mse").sgd(lr=0.1)
    raises(optree.BackendError, m.fit, REF.ones((8, 4)), BE.ones((8, 2)), batch=4)
    raises(optree.BackendError, m.predict, REF.ones((2, 4)))


@case
def half_precision_tensors():
    import tempfile
    path = os.path.join(tempfile.mkdtemp(), "h.npy")
    np.save(path, np.array([1.5, 2.5, 3.5], np.float16))
    for t in (BE.load(path), BE.array(np.array([1.5, 2.5, 3.5]), dtype=np.float16)):
        assert t.dtype == np.float16 and (t.get() == [1.5, 2.5, 3.5]).all()
        assert (np.asarray(t) == [1.5, 2.5, 3.5]).all()
    b = optree.cast(BE.ones((3,)), dtype="bfloat16").astensor()
    assert b.dtype == np.float32 and (b.get() == 1).all() and (np.asarray(b) == 1).all()
    b.set([1.0, 2.0, 3.0])
    assert (b.get() == [1, 2, 3]).all()
    assert BE.zeros((2,), dtype=np.float16).dtype == np.float16


@case
def half_tensors_round_float64_and_int_data_once():
    """set(), t[:] = and be.array of float64 (or integer) data into f16
    and bf16 round each value once, as NumPy's astype(float16) and the
    C library's ot_fill do: they went through float32 first, so
    65519.999999 became inf (f16's 65504), 1 + 2^-11 + 2^-40 became 1.0
    (f16's 1.000977), 1 + 2^-8 + 2^-40 bf16's 1.0 (1.0078125), int32
    16842753 bf16's 16777216 (16908288)."""
    rng = np.random.default_rng(7)
    edges = [65519.999999, 1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40, -(1 + 2**-8 + 2**-40),
             3.3961775e38, 16842753.0, 1e-300, np.inf, 0.0]
    v = np.concatenate([edges, rng.standard_normal(64) * 2.0 ** rng.integers(-30, 30, 64)])
    ints = np.array([16842753, -16842753, 16777217, 2**31 - 1, -2**31, 65519, 65520], np.int32)
    for be in (BE, REF):
        for dt in (np.float16, "bfloat16"):
            for data in (v, ints):
                want = be.zeros(data.shape, dtype=dt)
                for i, x in enumerate(data):
                    want[i] = float(x)                     # ot_fill: one rounding of a double
                if dt is np.float16:
                    assert (want.get() == data.astype(np.float16)).all()
                t, u = be.zeros(data.shape, dtype=dt), be.zeros(data.shape, dtype=dt)
                t.set(data)
                u[:] = data
                for got in (t, u, be.array(data, dtype=dt)):
                    bad = np.flatnonzero(got.get() != want.get())
                    assert not len(bad), (be, dt, data[bad], got.get()[bad], want.get()[bad])


@case
def errors_of_tensor_functions_name_the_python_line():
    x = BE.ones((2, 3))
    cases = [(lambda: optree.Autodiff(x * 2, BE, next_error=BE.ones((5,))), "autodiff_new"),
             (lambda: optree.Autodiff(x * 2, BE).back_prop_grad([x], [BE.empty((3, 2))]), ""),
             (lambda: BE.load("/nonexistent.npy"), "load"),
             (lambda: BE.parse("(tanh (a *", a=x), "parse"),
             (lambda: BE.array(np.ones((1,) * 9, np.float32)), "wrap"),
             (lambda: BE.zeros((-1,)), "zeros"),
             (lambda: optree.take(x, BE.array(np.array([7], np.int32)), axis=1).get(), "take"),
             (lambda: optree.register_op("bad name", lambda v: v), "")]
    for fn, what in cases:
        line = fn.__code__.co_firstlineno
        e = raises(optree.OptreeError, fn)
        assert "run_tests.py:%d: %s" % (line, what) in str(e), str(e)


@case
def minor_misuses():
    x = BE.array(np.arange(6, dtype=np.float32).reshape(2, 3))
    a = np.asarray(x * 2)
    assert a.dtype == np.float32 and (a == np.arange(6).reshape(2, 3) * 2).all()
    assert BE.zeros_like(np.ones(2)).dtype == np.float64
    raises(optree.ShapeError, x.set, np.ones(6))
    x.set(np.ones(3))                   # broadcasts, as NumPy's assignment
    raises(optree.DtypeError, BE.onehot, BE.array(np.array([0., 1.], np.float32)), 0, depth=3)
    raises(TypeError, optree.Autodiff(x * 2, BE).get_grad_tensor, [x * 2])
    raises(TypeError, optree.Autodiff(x * 2, BE).get_grad_op_tree, [3])


@case
def readme_python_blocks():
    """Every ```python block of README.md runs as a whole program."""
    text = open(os.path.join(ROOT, "README.md")).read()
    found = re.findall(r"^```python\n(.*?)^```$", text, flags=re.S | re.M)
    assert found, "no python block in README.md"
    for code in found:
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, "README.md", "exec"), {"__name__": "__main__"})


@case
def declarations_match_the_header():
    gen = os.path.join(ROOT, "tools", "gen_py.py")
    subprocess.check_call([sys.executable, gen, "--check"])
    out = subprocess.check_output([sys.executable, gen, "--layout", os.environ.get("CC", "cc")])
    assert b" 0 differ" in out, out


def main():
    for fn in CASES:
        try:
            fn()
            RESULTS[0] += 1
            print("[ OK ] %s" % fn.__name__)
        except Exception:
            RESULTS[1] += 1
            print("[FAIL] %s" % fn.__name__)
            traceback.print_exc(file=sys.stdout)
    print("%d passed, %d failed" % tuple(RESULTS))
    return 1 if RESULTS[1] else 0


if __name__ == "__main__":
    sys.exit(main())

"""cli_check.py - checks of optree-bench (cli/) as a user runs it: the
table, CSV, JSON and plot outputs, --compare, --explain, --peers, the
configuration lists, and clear errors (exit status 2 for bad options, 1 for
a bad expression, with the column). Small sizes and few repeats: this
checks behaviour, not speed. Prints one "N passed, M failed" line.

usage: python3 tests/cli_check.py build/optree-bench
"""
import csv
import io
import json
import os
import subprocess
import sys
import tempfile

BIN = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else "build/optree-bench")
CACHE = tempfile.mkdtemp(prefix="optree-bench-cache-")
# The limits are measured as a user's first run measures them, on arrays of
# 16 MiB (OPTREE_BENCH_TRIAD_MIB): the same code in a second, not a minute.
ENV = dict(os.environ, XDG_CACHE_HOME=CACHE, OPTREE_BENCH_TRIAD_MIB="16")
passed = failed = 0


def run(*args, cwd=None):
    p = subprocess.run([BIN, *args], capture_output=True, text=True, env=ENV, timeout=300, cwd=cwd)
    return p.returncode, p.stdout, p.stderr


def case(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("[ OK ] " + name)
    else:
        failed += 1
        print("[FAIL] " + name + (": " + detail[-2000:] if detail else ""))


QUICK = ["--repeat", "3", "--quiet"]

rc, out, err = run("--help")
case("help", rc == 0 and "--n SIZES" in out and "--plot" in out, out + err)

rc, out, err = run("a*b + c", "--n", "64,1e4", *QUICK)
case("table", rc == 0 and "at n=64:" in out and "per call" in out and "10000" in out, out + err)
case("limits cached", os.path.exists(os.path.join(CACHE, "optree", "limits")), err)

rc, out, err = run("a*b + c", "--n", "64,1e4", "--csv", "--fusion", "on,off", *QUICK)
rows = list(csv.DictReader(io.StringIO(out))) if rc == 0 else []
case("csv rows", len(rows) == 4 and {r["fusion"] for r in rows} == {"on", "off"}, out + err)
row64 = [r for r in rows if r["n"] == "64" and r["fusion"] == "on"]
# a*b + c reads three f32 inputs and writes one output: 16 bytes per element
case("csv bytes from the plan", bool(row64) and float(row64[0]["bytes"]) == 64 * 16, out)
case("csv fields", bool(row64) and float(row64[0]["median_s"]) > 0 and float(row64[0]["triad_gb_per_s"]) > 0, out)

rc, out, err = run("tanh(a*b + a/b)", "--n", "1e3..1e4", "--json", "--dtype", "f32,f64", *QUICK)
try:
    doc = json.loads(out)
except ValueError:
    doc = None
case("json parses", doc is not None, out + err)
if doc:
    sizes = sorted({p["n"] for p in doc["points"]})
    case("json range 1e3..1e4", sizes == [1000, 2000, 5000, 10000], str(sizes))
    case("json configs", [c["dtype"] for c in doc["configs"]] == ["f32", "f64"], str(doc["configs"]))
    case("json flops", all(p["flops"] > 0 for p in doc["points"]), out)

rc, out, err = run("a*b", "--compare", "a+b", "--n", "1e4", *QUICK)
case("compare", rc == 0 and "'a+b'" in out and "vs 1st" in out, out + err)

rc, out, err = run("exp(x)", "--n", "100", "--explain", *QUICK)
case("explain", rc == 0 and "plan of 'exp(x)'" in out and "kernel" in out, out + err)

rc, out, err = run("sum(x, axis=1)", "--cols", "16", "--n", "4096", "--backend", "cpu,ref", *QUICK)
case("cols and backends", rc == 0 and "[ref " in out and "[cpu " in out, out + err)

rc, out, err = run("x + 1", "--n", "1e5", "--threads", "1,2", *QUICK)
case("threads", rc == 0 and "2 threads" in out, out + err)

svg = os.path.join(CACHE, "plot.svg")
rc, out, err = run("a*b + c", "--n", "1e3..1e5", "--plot", svg, *QUICK)
text = open(svg).read() if os.path.exists(svg) else ""
case("plot svg", rc == 0 and "<svg" in text and "roofline" in text, err)

# No character of the file name is interpreted (issue 31 point 6): the
# issue's payload and names with quotes, backslashes, a newline, $(),
# backquotes and a leading dash each give exactly that file and nothing else.
NAMES = ["x.svg'; system('touch PWNED'); set output 'y.svg",
         'q"u\'o\\te.svg', "new\nline.svg", "$(touch PWNED2).svg", "`touch PWNED3`.svg",
         "-h.svg", "@ARG1 .png"]
for name in NAMES:
    d = tempfile.mkdtemp(dir=CACHE)
    rc, out, err = run("a*b", "--n", "1e3,1e4", "--plot", name, *QUICK, cwd=d)
    made = sorted(os.listdir(d))
    case("plot file name %r taken literally" % name, rc == 0 and made == [name], "%r %s" % (made, err))

rc, out, err = run("a*b + c", "--n", "1e3", "--csv", *QUICK)
rows = list(csv.DictReader(io.StringIO(out))) if rc == 0 else []
# Without --peers the peers' cells are empty, as JSON's null (issue 31 point 15).
case("csv without peers: empty cells", len(rows) == 1 and rows[0]["numpy_s"] == ""
     and rows[0]["numexpr_s"] == "", out + err)

rc, out, err = run("a*b + c", "--n", "1e3", "--peers", *QUICK)
case("peers", rc == 0 and "numpy" in out and "optree is faster" in out, out + err)
rc, out, err = run("a*b + c", "--n", "1e3", "--peers", "--csv", *QUICK)
rows = list(csv.DictReader(io.StringIO(out))) if rc == 0 else []
case("csv with peers: numpy's time", len(rows) == 1 and float(rows[0]["numpy_s"] or 0) > 0, out + err)
# The peers' NumPy spellings come from src/core/ops.def's peer column: ops NumPy
# spells otherwise, a lambda and a wrapped reduction all evaluate.
rc, out, err = run("sum(sgn(a) * recip(b) + rsqrt(c), axis=1, keepdims=1) + sub(a, sqr(b))",
                   "--n", "1e3", "--cols", "10", "--peers", "--csv", *QUICK)
rows = list(csv.DictReader(io.StringIO(out))) if rc == 0 else []
case("peers from the op table", len(rows) == 1 and float(rows[0]["numpy_s"] or 0) > 0, out + err)

rc, out, err = run("tanhh(a)", "--n", "10", *QUICK)
case("bad expression", rc == 1 and "col 1: unknown function 'tanhh'; did you mean 'tanh'?" in err, err)
rc, out, err = run("a +", "--n", "10", *QUICK)
case("incomplete expression", rc == 1 and "col 4" in err, err)
rc, out, err = run("a", "--bogus")
case("unknown option", rc == 2 and "unknown option '--bogus'" in err, err)
rc, out, err = run("a", "--n", "1e3..10")
case("bad sizes", rc == 2 and "bad --n" in err, err)
rc, out, err = run("a", "--dtype", "f16")
case("bad dtype", rc == 2, err)
rc, out, err = run("a", "--isa", "nonesuch", "--n", "10", *QUICK)
case("bad isa", rc == 1 and "isa" in err, err)
rc, out, err = run()
case("no expression", rc == 2 and "no expression" in err, err)
# A plot that cannot be made is refused before the run, not after it (the
# whole run measured, then its plot lost).
rc, out, err = run("a", "--plot", os.path.join(CACHE, "x.pdf"), "--n", "10", *QUICK)
case("plot format", rc == 2 and ".svg or .png" in err and out == "", out + err)
rc, out, err = run("a", "--plot", os.path.join(CACHE, "no-such-dir", "x.svg"), "--n", "10", *QUICK)
case("plot directory missing", rc == 2 and "not a writable directory" in err and out == "",
     out + err)
# An empty list made no configuration: nothing measured, exit 0; a list
# longer than 16 lost its tail without a word.
for opt, val in [("--backend", ","), ("--dtype", ""), ("--isa", ",,"), ("--fusion", ","),
                 ("--accuracy", ","), ("--threads", ","), ("--threads", ",".join(["1"] * 17)),
                 ("--dtype", ",".join(["f32"] * 17))]:
    rc, out, err = run("a", opt, val, "--n", "10", *QUICK)
    case("bad list %s %r" % (opt, val[:12]), rc == 2 and ("bad " + opt) in err and val in err
         and out == "", out + err)
rc, out, err = run("a", "--dtype", ",".join(["f32"] * 16), "--n", "10", "--csv", *QUICK)
case("a list of 16", rc == 0 and len(list(csv.DictReader(io.StringIO(out)))) == 16, out + err)

print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)

"""doc_check.py - compiles every ```c block of README.md and docs/*.md, and
runs those that are whole programs, so that the documentation cannot drift
from the code. Prints a line per block and one
"N passed, M failed" line; exits non-zero on a failure.

The convention (README.md, "Code blocks in the documentation"):
- A block with a line starting "int main(" is a whole program: compiled,
  linked against BUILD/liboptree.a and run in a temporary directory; it
  must exit with status 0.
- Any other block is a fragment, compiled (not linked) as the body of a
  function. Its leading file-scope lines (#include, static, typedef,
  __attribute__ ... at column 0, with their indented continuations) stay
  outside the function.
- An HTML comment right before the block, <!-- doc-check: TEXT -->, gives
  the C declarations the fragment takes for granted (variables, prototypes,
  #include lines), placed at file scope before it. A TEXT of
  "in PATH" instead requires the block to appear verbatim in PATH (a line
  of src/core/ops.def, say). A block that includes <mpi.h> is compiled with
  mpicc and skipped where mpicc is missing.
- Fragments may leave variables unused (they show a call whose result the
  reader uses later); every other warning is an error.

usage: python3 tools/doc_check.py [--build DIR] [--jobs N] [--cc CC] [FILE.md ...]
"""
import argparse
import concurrent.futures
import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile

CFLAGS = ["-std=c11", "-Wall", "-Wextra", "-Werror", "-D_POSIX_C_SOURCE=200809L", "-Iinclude"]
FRAGMENT_FLAGS = ["-Wno-unused-variable", "-Wno-unused-but-set-variable", "-Wno-unused-function",
                  "-Wno-unused-parameter", "-Wno-unused-value"]
LIBS = ["-lsleef", "-lopenblas", "-lm", "-lpthread"]
FILE_SCOPE = re.compile(r"^(#|static\b|typedef\b|__attribute__|struct\b|enum\b|extern\b)")
DIRECTIVE = re.compile(r"<!--\s*doc-check:(.*?)-->\s*$", re.S)


def blocks(path):
    """(line, context, code) of each ```c block of a Markdown file."""
    lines = open(path, encoding="utf-8").read().split("\n")
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```c":
            start = i + 1
            j = start
            while j < len(lines) and lines[j].strip() != "```":
                j += 1
            found.append((start, directive(lines, i), "\n".join(lines[start:j]) + "\n"))
            i = j
        i += 1
    return found


def directive(lines, fence):
    """The doc-check comment ending on the line before the fence, or ''."""
    k = fence - 1
    if k < 0 or not lines[k].rstrip().endswith("-->"):
        return ""
    while k > 0 and "<!--" not in lines[k]:
        k -= 1
    m = DIRECTIVE.search("\n".join(lines[k:fence]))
    return m.group(1).strip() if m else ""


def split_fragment(code):
    """(file-scope part, function body) of a fragment."""
    lines = code.split("\n")
    n = 0
    while n < len(lines):
        line = lines[n]
        if FILE_SCOPE.match(line) or (n > 0 and (line == "" or line[0] in " \t}")):
            n += 1
        else:
            break
    return "\n".join(lines[:n]), "\n".join(lines[n:])


def compile_cmd(args, mpi):
    cc = os.environ.get("MPICC", "mpicc") if mpi else args.cc
    return [cc, *CFLAGS]


def check(args, md, line, context, code, tmp):
    """(status, message): status is 'ok', 'fail' or 'skip'."""
    where = "%s:%d" % (md, line)
    if context.startswith("in "):
        target = context[3:].strip()
        squash = lambda s: " ".join(s.split())
        text = open(target, encoding="utf-8").read() if os.path.exists(target) else ""
        if squash(code) in squash(text):
            return "ok", where + " (appears in %s)" % target
        return "fail", where + ": the block does not appear in %s" % target
    mpi = "<mpi.h>" in context or "<mpi.h>" in code
    if mpi and not shutil.which(os.environ.get("MPICC", "mpicc")):
        return "skip", where + " (needs mpicc)"
    base = os.path.join(tmp, re.sub(r"[^A-Za-z0-9]", "_", where))
    program = re.search(r"^int main\(", code, re.M) is not None
    prelude = "/* %s */\n#include <optree.h>\n#include <math.h>\n#include <stdio.h>\n" \
              "#include <stdlib.h>\n#include <string.h>\n" % where
    if program:
        src = prelude + context + "\n#line %d \"%s\"\n" % (line + 1, md) + code
        cmd = compile_cmd(args, mpi) + ["-o", base, base + ".c",
                                               os.path.join(args.build, "liboptree.a"), *LIBS]
    else:
        outside, body = split_fragment(code)
        nout = outside.count("\n") + 1 if outside else 0
        src = (prelude + context + "\n" +
               ("#line %d \"%s\"\n%s\n" % (line + 1, md, outside) if outside else "") +
               "void doc_fragment(void);\nvoid doc_fragment(void)\n{\n" +
               "#line %d \"%s\"\n%s\n}\n" % (line + 1 + nout, md, body))
        cmd = compile_cmd(args, mpi) + FRAGMENT_FLAGS + ["-c", "-o", base + ".o", base + ".c"]
    with open(base + ".c", "w", encoding="utf-8") as f:
        f.write(src)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return "fail", where + ": does not compile\n" + p.stdout + p.stderr
    if not program:
        return "ok", where + " (fragment compiles)"
    run_dir = tempfile.mkdtemp(dir=tmp)
    try:
        p = subprocess.run([base], capture_output=True, text=True, cwd=run_dir, timeout=120)
    except subprocess.TimeoutExpired:
        return "fail", where + ": the program ran past 120 s"
    if p.returncode != 0:
        return "fail", where + ": the program exited with %d\n%s%s" % (p.returncode, p.stdout, p.stderr)
    return "ok", where + " (program compiles and runs)"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("BUILD", "build"))
    ap.add_argument("--jobs", type=int, default=int(os.environ.get("JOBS", "2")))
    ap.add_argument("--cc", default=os.environ.get("CC", "cc"))
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    files = args.files or ["README.md", *sorted(glob.glob("docs/*.md"))]
    todo = [(md, *b) for md in files for b in blocks(md)]
    passed = failed = 0
    with tempfile.TemporaryDirectory(prefix="doc-check-") as tmp, \
            concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
        for status, msg in pool.map(lambda t: check(args, *t, tmp), todo):
            if status == "ok":
                passed += 1
                print("[ OK ] " + msg)
            elif status == "skip":
                print("[SKIP] " + msg)
            else:
                failed += 1
                print("[FAIL] " + msg)
    print("%d passed, %d failed" % (passed, failed))
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

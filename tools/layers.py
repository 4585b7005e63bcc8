#!/usr/bin/python3
"""layers.py - the walls of src/ checked: python3 tools/layers.py --build DIR

src/ is in folders by layer (docs/ARCHITECTURE.md, "Layers"). A layer calls
only itself and the layers below it; the front layer takes nothing of a
backend but its vtable object, which src/core/backends.def names. Four checks, one line
per breach, then one "N passed, M failed" line:

  includes  every #include "..." of src/, resolved as the compiler does
            (the includer's folder, then include/, src/core/ and, for
            the cpu backend's rooms, src/cpu/, src/cpu/jit/,
            src/cpu/kernels/), names a header of the file's own layer, of
            or a layer below it (the cpu backend's three rooms share their
            types: they see each other's headers, and the calls check keeps
            kernels below jit below cpu);
  calls     every symbol an object of DIR/obj/ takes from another object
            (nm) is defined in its own layer or one it may call;
  size      no file of src/ is over 1,000 lines;
  branches  no function of src/ has a cyclomatic complexity over 30
            (pmccabe, which make deps installs).
"""
import argparse
import collections
import os
import re
import shutil
import subprocess
import sys
import tempfile

# Who may call whom: a layer, then the layers it may call (itself included).
MAY_CALL = {
    'core': {'core'},
    'cpu/kernels': {'core', 'cpu/kernels'},
    'cpu/jit': {'core', 'cpu/kernels', 'cpu/jit'},
    'cpu': {'core', 'cpu/kernels', 'cpu/jit', 'cpu'},
    'ref': {'core', 'ref'},
    'front': {'core', 'front'},
    'mpi': {'core', 'front', 'mpi'},
}
# What a layer may take beyond MAY_CALL: the backend registry (front) takes
# each built-in backend's vtable object, ot__<name>_vt for each row
# OT_BACKEND(name) of src/core/backends.def, and nothing else of a backend.
BACKENDS_DEF = 'src/core/backends.def'


def backend_vtables():
    text = open(BACKENDS_DEF, encoding='utf-8').read()
    return {'ot__%s_vt' % n for n in re.findall(r'^OT_BACKEND\((\w+)\)', text, re.M)}


EXPORTS = {'front': {'symbols': backend_vtables()}}
CPU_ROOMS = ('cpu', 'cpu/jit', 'cpu/kernels')
MAX_LINES = 1000
MAX_BRANCHES = 30


def layer_of(path):
    """The layer of a path under src/ (or of an object under obj/)."""
    parts = path.split('/')
    if parts[0] == 'cpu' and len(parts) > 2 and parts[1] in ('jit', 'kernels'):
        return 'cpu/' + parts[1]
    return parts[0] if parts[0] in MAY_CALL else None


def sources():
    for root, _, files in os.walk('src'):
        for f in sorted(files):
            if f.endswith(('.c', '.h', '.inc', '.def')):
                yield os.path.join(root, f)


def resolve(src, name):
    """The file #include "name" in src names, as the compiler finds it."""
    layer = layer_of(os.path.relpath(src, 'src'))
    dirs = [os.path.dirname(src), 'include', 'src/core']
    if layer in CPU_ROOMS:
        dirs += ['src/' + r for r in CPU_ROOMS]
    for d in dirs:
        cand = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(cand):
            return cand
    return None


def check_includes(breach):
    n = 0
    for src in sources():
        n += 1
        layer = layer_of(os.path.relpath(src, 'src'))
        for line in open(src, encoding='utf-8'):
            m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
            if not m:
                continue
            hdr = resolve(src, m.group(1))
            if hdr is None:
                breach('includes: %s (layer %s) includes "%s", which its layer cannot see'
                       % (src, layer, m.group(1)))
                continue
            if not hdr.startswith('src/'):
                continue   # include/: the public headers
            to = layer_of(os.path.relpath(hdr, 'src'))
            if to in MAY_CALL[layer] or (layer in CPU_ROOMS and to in CPU_ROOMS):
                continue
            breach('includes: %s (layer %s) includes %s (layer %s)' % (src, layer, hdr, to))
    return n


def nm(path):
    out = subprocess.run(['nm', path], capture_output=True, text=True, check=True).stdout
    defined, used = set(), set()
    for line in out.splitlines():
        p = line.split()
        if len(p) == 3 and p[1] in 'TDRBCVW':
            defined.add(p[2])
        elif len(p) == 2 and p[0] == 'U':
            used.add(p[1])
    return defined, used


def check_calls(build, breach):
    objdir = os.path.join(build, 'obj')
    objs = {}
    for root, _, files in os.walk(objdir):
        for f in files:
            if f.endswith('.o'):
                rel = os.path.relpath(os.path.join(root, f), objdir)
                if layer_of(rel):
                    objs[rel] = nm(os.path.join(root, f))
    owner = {s: o for o, (d, _) in objs.items() for s in d}
    for o, (_, used) in sorted(objs.items()):
        layer = layer_of(o)
        bad = collections.defaultdict(list)
        for s in used:
            to = owner.get(s)
            if to is None or to == o:
                continue
            tl = layer_of(to)
            if tl in MAY_CALL[layer] or s in EXPORTS.get(layer, {}).get('symbols', ()):
                continue
            bad[to].append(s)
        for to, syms in sorted(bad.items()):
            breach('calls: %s (layer %s) calls %s (layer %s): %s'
                   % (o, layer, to, layer_of(to), ' '.join(sorted(syms))))
    return len(objs)


def check_size(breach):
    n = 0
    for src in sources():
        n += 1
        lines = sum(1 for _ in open(src, encoding='utf-8'))
        if lines > MAX_LINES:
            breach('size: %s has %d lines (at most %d)' % (src, lines, MAX_LINES))
    return n


def pmccabe_text(src):
    """src as pmccabe can parse it: comments blanked (newlines kept, so the
    line numbers stay) and the parenthesised names of the functions that
    stand beside their macros, (ot_release)(...), written plainly."""
    text = open(src, encoding='utf-8').read()
    text = re.sub(r'/\*.*?\*/', lambda m: re.sub(r'[^\n]', ' ', m.group(0)), text, flags=re.S)
    return re.sub(r'\((ot_\w+)\)\s*\(', r'\1(', text)


def check_branches(breach):
    if not shutil.which('pmccabe'):
        breach('branches: pmccabe is not installed (make deps installs it)')
        return 0
    n = 0
    with tempfile.TemporaryDirectory() as tmp:
        for src in (s for s in sources() if s.endswith('.c')):
            copy = os.path.join(tmp, os.path.basename(src))
            with open(copy, 'w', encoding='utf-8') as f:
                f.write(pmccabe_text(src))
            run = subprocess.run(['pmccabe', copy], capture_output=True, text=True)
            if run.returncode or run.stderr.strip():
                breach('branches: pmccabe cannot parse %s: %s'
                       % (src, run.stderr.strip().splitlines()[0] if run.stderr.strip() else
                          'exit %d' % run.returncode))
            for line in run.stdout.splitlines():
                p = line.split('\t')
                if len(p) < 6:
                    continue
                n += 1
                if int(p[0]) > MAX_BRANCHES:
                    where = p[5].strip().replace(copy, src)
                    breach('branches: %s has cyclomatic complexity %s (at most %d)'
                           % (where, p[0], MAX_BRANCHES))
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--build', default='build', help='the build folder (its obj/)')
    args = ap.parse_args()
    breaches = []
    counts = {
        'files whose includes respect the layers': check_includes(breaches.append),
        'objects whose calls respect the layers': check_calls(args.build, breaches.append),
        'files within the size limit': check_size(breaches.append),
        'functions within the branch limit': check_branches(breaches.append),
    }
    for b in breaches:
        print('layers: ' + b)
    for what, n in counts.items():
        print('layers: %d %s checked' % (n, what))
    checked = sum(counts.values())
    print('%d passed, %d failed' % (max(checked - len(breaches), 0), len(breaches)))
    return 1 if breaches else 0


if __name__ == '__main__':
    sys.exit(main())

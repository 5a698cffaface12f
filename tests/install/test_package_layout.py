"""How the Python package is put together (docs/design.md): no import circle, counting
imports inside functions; no module inside the package imports its face; a rank's
``import mxhorovod`` loads only the launcher's protocol modules; every subpackage says
what it owns."""
import ast
import os
import subprocess
import sys

from support.paths import ROOT

PACKAGES = ("mxhorovod", "mxhorovodrun")
# The launcher's modules a rank needs: the elastic protocol (variables and exit codes the
# driver and the ranks share) and the host's usable cores. Both standard library only.
RANK_LAUNCHER_MODULES = ["mxhorovodrun", "mxhorovodrun.cores", "mxhorovodrun.elastic_protocol"]
# A folder that `mxhorovodrun --horovod-alias` puts on the ranks' sys.path: its modules are
# named as imported there (horovod, horovod.mxnet), not as files of the package.
ALIAS_ROOT = os.path.join(ROOT, "mxhorovod", "horovod_alias")


def _modules():
    """{module name: path} of every .py file of the packages."""
    found = {}
    for package in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, package)):
            for name in files:
                if not name.endswith(".py"):
                    continue
                path = os.path.join(folder, name)
                inside_alias = folder != ALIAS_ROOT and folder.startswith(ALIAS_ROOT + os.sep)
                rel = os.path.relpath(path, ALIAS_ROOT if inside_alias else ROOT)[:-3]
                parts = rel.split(os.sep)
                if parts[-1] == "__init__":
                    parts = parts[:-1]
                found[".".join(parts)] = path
    return found


def _imports(path, module, modules):
    """[(imported module, line, names taken)] of every import in the file, functions too.
    ``from a import b`` counts as importing ``a.b`` when that is a module, else ``a``."""
    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    is_package = path.endswith("__init__.py")
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                out.append((alias.name, node.lineno, None))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = module.split(".")
                parent = parent if is_package else parent[:-1]
                parent = parent[:len(parent) - (node.level - 1)]
                base = ".".join(parent + ([base] if base else []))
            for alias in node.names:
                full = base + "." + alias.name
                out.append((full if full in modules else base, node.lineno, alias.name))
    return out


def _graph():
    modules = _modules()
    return modules, {m: [(i, line, name) for i, line, name in _imports(p, m, modules)
                         if i in modules and i != m]
                     for m, p in modules.items()}


def _cycles(edges):
    """Every strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on, groups, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                on.discard(w)
                group.append(w)
                if w == v:
                    break
            if len(group) > 1 or v in edges.get(v, ()):
                groups.append(sorted(group))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return groups


def test_no_import_circle_counting_imports_inside_functions():
    _, graph = _graph()
    edges = {m: sorted({i for i, _, _ in imports}) for m, imports in graph.items()}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_circle():
    assert _cycles({"a": ["b"], "b": ["c"], "c": ["a"], "d": ["a"]}) == [["a", "b", "c"]]


def test_no_module_of_the_package_imports_its_face():
    modules, graph = _graph()
    faces = []
    for module, imports in graph.items():
        if module == "mxhorovod" or not module.startswith("mxhorovod."):
            continue
        if module.startswith("mxhorovod.runner"):  # the launcher's former name: a face of it
            continue
        for imported, line, name in imports:
            if imported == "mxhorovod":
                faces.append("%s:%d takes %s from the package face"
                             % (modules[module], line, name or "the package"))
    assert faces == []


def test_a_rank_imports_only_the_launchers_protocol_modules():
    code = ("import sys, mxhorovod\n"
            "print(sorted(m for m in sys.modules if m.startswith('mxhorovodrun')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == repr(RANK_LAUNCHER_MODULES), proc.stdout


def test_every_subpackage_says_what_it_owns():
    silent = []
    for module, path in _modules().items():
        if path.endswith("__init__.py"):
            doc = ast.get_docstring(ast.parse(open(path, encoding="utf-8").read()))
            if not doc or len(doc.split()) < 8:
                silent.append(module)
    assert silent == []


FACES = ["mxhorovod", "mxhorovod.mpi_ops", "mxhorovod.functions", "mxhorovod.compression",
         "mxhorovod.optimizer", "mxhorovod.process_sets", "mxhorovod.errors",
         "mxhorovod.elastic", "mxhorovod.timeline", "mxhorovod.runner"]


def test_every_face_star_imports_and_hands_on_the_same_objects():
    # `from mxhorovod.X import *` must work (each name of __all__ exists), and a name is
    # the very object hvd has, whichever path a script takes.
    code = ("import importlib, mxhorovod as hvd\n"
            "for face in %r:\n"
            "    exec('from %%s import *' %% face, {})\n"
            "    module = importlib.import_module(face)\n"
            "    for name in getattr(module, '__all__', []):\n"
            "        if hasattr(hvd, name):\n"
            "            assert getattr(module, name) is getattr(hvd, name), (face, name)\n"
            "print('FACES OK')" % FACES)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, cwd=ROOT, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert proc.returncode == 0 and "FACES OK" in proc.stdout, proc.stdout + proc.stderr

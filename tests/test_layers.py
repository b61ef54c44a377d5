"""The package's layer order, checked on its import graph (docs/design.md, "Layers").

Every ``import`` of a ``treexchange`` module, at module level or inside a function, must point to a
module of the same or a lower layer. The edges that do not yet are listed in ``KNOWN_UPWARD`` with
the reason; the list may only shrink (a listed edge that no longer exists fails the test, so the
entry is removed with the fix), and a new upward edge fails until it is fixed or listed and argued.

The graph has no cycle, and no import inside a function hides one; every import inside a function
says why it is there (a comment: the package is optional, or costly to import).
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "treexchange"

LAYERS: dict[str, float] = {
    # 0: the value model and its helpers; the version; atomic file replacement
    "_version": 0, "_atomic": 0, "_errors": 0, "_limits": 0, "_recursion": 0, "_gc": 0,
    "_symbol": 0, "_juliatype": 0, "_values": 0, "_typeof": 0, "_jsonform": 0, "_nodeproto": 0,
    "_expansion": 0,
    # 1: the codec
    "_hdf5": 1, "_jld2": 1, "_bson": 1,
    # 2: the reader facade (open, File, reading an entry) and presentation over the codec
    "_plainhdf5": 2, "_bsonfile": 2, "_reader": 2, "_inspect": 2,
    # 3: the domain layers, in this order: the bridge (restore, to_julia) below the schema (which
    # converts PyTrees through it), the ports (Flux layouts, from_flux: they restore through the
    # bridge and check embedded schemas), the other formats (PyTorch through the ports' rules)
    "_bridge": 3.0, "_schema": 3.1, "_port": 3.2, "_interop": 3.3,
    # 4: the front door (load, save, convert) and the package's public surface
    "_file": 4, "_save": 4, "__init__": 4,
    # 5: the command line
    "_cli": 5, "_commands": 5,
}  # fmt: skip

KNOWN_UPWARD: dict[tuple[str, str], str] = {
    # (importing module, imported module): why it is still there. Empty since issue 11 moved the
    # reader facade (File, open, reading an entry) below the domain layers.
}


@functools.cache
def _tree(path: Path) -> ast.Module:
    """``path`` parsed, once for all the tests of the module (they walk the same trees)."""
    return ast.parse(path.read_text(encoding="utf-8"))


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = ["treexchange", *path.relative_to(PACKAGE).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _targets(module: str, path: Path, node: ast.Import | ast.ImportFrom, known: set[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    if node.level:
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, *([node.module] if node.module else [])])
    else:
        target = node.module or ""
    return [f"{target}.{a.name}" if f"{target}.{a.name}" in known else target for a in node.names]


def _layer(module: str) -> float:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


@functools.cache  # (two tests ask; neither changes the set)
def _upward_edges() -> set[tuple[str, str]]:
    modules = _modules()
    known = set(modules)
    edges = set()
    for module, path in modules.items():
        for node in ast.walk(_tree(path)):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            for target in _targets(module, path, node, known):
                if target.startswith("treexchange") and _layer(target) > _layer(module):
                    edges.add((module, target))
    return edges


def test_every_module_has_a_layer() -> None:
    for module in _modules():
        _layer(module)  # KeyError names a module without a layer


def test_imports_point_down() -> None:
    upward = _upward_edges()
    new = sorted(upward - KNOWN_UPWARD.keys())
    assert not new, "imports pointing to a higher layer (fix, or list with the reason):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in new
    )


def test_known_upward_list_only_shrinks() -> None:
    gone = sorted(KNOWN_UPWARD.keys() - _upward_edges())
    assert not gone, "fixed: remove from KNOWN_UPWARD:\n" + "\n".join(f"  {a} -> {b}" for a, b in gone)


@functools.cache  # (two tests ask; neither changes the graph)
def _import_edges() -> tuple[dict[str, set[str]], set[tuple[str, str]]]:
    """The module-level import graph (``TYPE_CHECKING`` blocks left out: they never run), and the
    imports made inside functions, between the package's modules.

    Importing ``a.b.c`` first runs the package ``a.b`` (its ``__init__``), unless that package is
    one the importer lives in (then it is already running): the graph has that edge too, since a
    package that re-exports its modules closes cycles through it."""
    modules = _modules()
    known = set(modules)
    top: dict[str, set[str]] = {m: set() for m in modules}
    inner: set[tuple[str, str]] = set()
    for module, path in modules.items():
        tree = _tree(path)
        skipped: set[int] = set()  # ids of nodes under an ``if TYPE_CHECKING``
        in_function: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if id(node) not in in_function:  # (a function in a function: its nodes are in)
                    in_function.update(id(sub) for sub in ast.walk(node))
            elif isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                skipped.update(id(sub) for sub in ast.walk(node))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)) or id(node) in skipped:
                continue
            for target in _targets(module, path, node, known):
                if target not in modules or target == module:
                    continue
                reached = {target} | {p for p in _packages_of(target) if p not in _packages_of(module)}
                for t in reached - {module}:
                    if id(node) in in_function:
                        inner.add((module, t))
                    else:
                        top[module].add(t)
    return top, inner


def _packages_of(module: str) -> list[str]:
    """The packages ``module`` is in, below ``treexchange`` itself (which is always running)."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


def _reaches(graph: dict[str, set[str]], start: str, goal: str) -> bool:
    seen, stack = {start}, [start]
    while stack:
        for nxt in graph[stack.pop()]:
            if nxt == goal:
                return True
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return False


def test_no_import_cycle() -> None:
    top, _ = _import_edges()
    cycles = sorted((a, b) for a in top for b in top[a] if _reaches(top, b, a))
    assert not cycles, "module-level imports in a cycle:\n" + "\n".join(f"  {a} -> {b}" for a, b in cycles)


def test_no_function_level_import_closes_a_cycle() -> None:
    """An import inside a function may save work (an optional or costly package), never hide a
    cycle: were it at module level, the imported module must not lead back to the importer."""
    top, inner = _import_edges()
    cycles = sorted((a, b) for a, b in inner if _reaches(top, b, a))
    listed = "\n".join(f"  {a} -> {b}" for a, b in cycles)
    assert not cycles, "function-level imports closing a cycle:\n" + listed


_TOOL_COMMENT = re.compile(r"(type|noqa|pragma|fmt)\b:?")


def _reason_lines(source: str) -> tuple[set[int], set[int]]:
    """Lines with a comment that says something (tool directives such as ``# type: ignore`` do
    not): those with code before the comment, and those that are only a comment."""
    trailing: set[int] = set()
    alone: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        parts = [p.strip() for p in tok.string.split("#")]
        if any(p and not _TOOL_COMMENT.match(p) for p in parts):
            (alone if not tok.line[: tok.start[1]].strip() else trailing).add(tok.start[0])
    return trailing, alone


def _unexplained_imports(source: str, tree: ast.Module | None = None) -> list[int]:
    """Lines of imports inside a function with no reason: a comment on the import's own lines or
    alone on the line just above, or the import follows one that has a reason in the same
    block (one comment for a group of imports). ``tree``: the source parsed already, if it was."""
    trailing, alone = _reason_lines(source)
    bad = []
    for fn in ast.walk(tree or ast.parse(source)):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for holder in ast.walk(fn):
            for field in ("body", "orelse", "finalbody"):
                block = getattr(holder, field, None)
                if not isinstance(block, list):
                    continue
                explained = False  # the previous statement was an import with a reason
                for stmt in block:
                    if not isinstance(stmt, (ast.Import, ast.ImportFrom)):
                        explained = False
                        continue
                    own = range(stmt.lineno, (stmt.end_lineno or stmt.lineno) + 1)
                    explained = explained or any(n in trailing or n in alone for n in own)
                    explained = explained or stmt.lineno - 1 in alone
                    if not explained:
                        bad.append(stmt.lineno)
    return sorted(set(bad))


def test_every_function_level_import_says_why() -> None:
    """An import inside a function is there for a reason a reader cannot guess (the package is
    optional, or costly to import and only some calls need it): a comment says which."""
    bad = [
        f"  {path.relative_to(PACKAGE.parent)}:{line}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for line in _unexplained_imports(path.read_text(encoding="utf-8"), _tree(path))
    ]
    assert not bad, "imports inside functions without a comment saying why:\n" + "\n".join(bad)


def test_the_reason_check_reads_comments() -> None:
    """The check above on a sample: a reason on the line, above it, or above the group counts; a
    tool directive alone does not."""
    sample = (
        "def f():\n"
        "    import jax  # jax is costly to import\n"
        "    import jax.numpy as jnp\n"
        "\n"
        "    # flax is optional\n"
        "    from flax import nnx\n"
        "    return jax, jnp, nnx\n"
        "\n"
        "def g():\n"
        "    x = 1  # a comment about x\n"
        "    import torch  # type: ignore[import-not-found]\n"
        "    return x, torch\n"
    )
    assert _unexplained_imports(sample) == [11]


def test_one_jax_array_test_for_every_layer() -> None:
    """JAX arrays are recognised by one function; the writer and the bridge call that one."""
    import jax.numpy as jnp
    import numpy as np

    from treexchange import _typeof
    from treexchange._bridge import _classify
    from treexchange._jld2 import _writer_types

    assert _classify.is_jax_array is _typeof.is_jax_array
    # The writer does not look at values itself: it types them with _typeof.type_of.
    assert not hasattr(_writer_types, "is_jax_array") and _writer_types.type_of is _typeof.type_of
    assert _typeof.is_jax_array(jnp.zeros(2)) and not _typeof.is_jax_array(np.zeros(2))

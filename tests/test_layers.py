"""The package's layer order, checked on its import graph (docs/design.md, "Layers").

Every ``import`` of a ``treexchange`` module, at module level or inside a function, must point to a
module of the same or a lower layer. The edges that do not yet are listed in ``KNOWN_UPWARD`` with
the reason; the list may only shrink (a listed edge that no longer exists fails the test, so the
entry is removed with the fix), and a new upward edge fails until it is fixed or listed and argued.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "treexchange"

LAYERS: dict[str, int] = {
    # 0: the value model and its helpers; the version; atomic file replacement
    "_version": 0, "_atomic": 0, "_errors": 0, "_limits": 0, "_recursion": 0, "_gc": 0,
    "_juliatype": 0, "_values": 0, "_typeof": 0, "_jsonform": 0,
    # 1: the codec
    "_hdf5": 1, "_jld2": 1,
    # 2: presentation over the codec
    "_plainhdf5": 2, "_inspect": 2,
    # 3: the domain layers
    "_schema": 3, "_port": 3, "_bridge": 3, "_interop": 3,
    # 4: the front door (load, save, open) and the package's public surface
    "_file": 4, "_save": 4, "__init__": 4,
    # 5: the command line
    "_cli": 5, "_commands": 5,
}  # fmt: skip

KNOWN_UPWARD: dict[tuple[str, str], str] = {
    # (importing module, imported module): why it is still there (issue 11 removes them).
    ("treexchange._schema._sources", "treexchange._file"): "a schema source opens a file through File",
    ("treexchange._schema._embedded", "treexchange._file"): "an embedded schema is read through File",
    ("treexchange._port._fromflux", "treexchange"): "from_flux opens its file through the public load()",
    ("treexchange._interop._source", "treexchange"): "a conversion source is opened through open()",
}


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


def _layer(module: str) -> int:
    parts = module.split(".")
    return LAYERS[parts[1] if len(parts) > 1 else "__init__"]


def _upward_edges() -> set[tuple[str, str]]:
    modules = _modules()
    known = set(modules)
    edges = set()
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
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

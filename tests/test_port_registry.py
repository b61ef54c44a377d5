"""The layer registry: every kind has a builder and a reader in every target, and facts live once.

``_port/_registry.py`` holds one record per Flux layer kind; each target module registers its
builder and reader per kind. These tests read the registry after importing every target, and the
package's sources for the places a kind is named.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytest.importorskip("flax")
pytest.importorskip("equinox")
pytest.importorskip("torch")

from test_layers import _import_edges  # the package's import graph, one implementation

# Importing the targets registers their builders and readers.
import treexchange._interop._torch
import treexchange._interop._torchmodules
import treexchange._port._eqx
import treexchange._port._linen
import treexchange._port._nnx  # noqa: F401  (registers the nnx target)
from treexchange import UnsupportedError
from treexchange._port import _registry as registry
from treexchange._port._spec import Layer

PACKAGE = Path(registry.__file__).resolve().parent.parent

# The modules of each target (its builders/readers and the framework modules they build).
TARGET_MODULES = {
    "equinox": {"treexchange._port._eqx", "treexchange._port._eqx_layers"},
    "nnx": {"treexchange._port._nnx", "treexchange._port._nnx_layers"},
    "linen": {"treexchange._port._linen", "treexchange._port._linen_layers"},
    "torch": {
        "treexchange._interop._torch",
        "treexchange._interop._torchmodules",
        "treexchange._interop._metalhead",
        "treexchange._interop._lux",
    },
}


def _expected(target: str) -> set[str]:
    """Every kind, except those the registry says the target cannot compute (with the reason)."""
    refused = registry.NO_TORCH_EQUIVALENT if target == "torch" else {}
    return set(registry.KINDS) - set(refused)


@pytest.mark.parametrize("target", registry.TARGETS)
def test_every_kind_has_a_builder_and_reader_in_every_target(target: str) -> None:
    registered = registry.registered(target)
    missing = sorted(_expected(target) - registered)
    extra = sorted(registered - _expected(target))
    assert not missing, f"{target} has no builder/reader for {missing}"
    assert not extra, f"{target} registers {extra}, which it refuses (or the registry does not know)"
    for kind in registered:
        found = registry.entry(target, kind)
        assert found.builder is not None, f"{target} has no builder for {kind}"
        assert found.reader is not None, f"{target} has no reader for {kind}"


def test_a_second_registration_is_refused() -> None:
    with pytest.raises(ValueError, match="second builder/reader for 'Dense'"):
        registry.register("equinox", "Dense", builder=print, reader=print)
    with pytest.raises(ValueError, match="does not know"):
        registry.register("equinox", "Dense2", builder=print, reader=print)
    with pytest.raises(ValueError, match="unknown porting target"):
        registry.register("keras", "Dense", builder=print, reader=print)


def test_an_unsupported_layer_lists_what_ports_and_where_the_rules_are() -> None:
    with pytest.raises(UnsupportedError) as info:
        registry.entry("torch", "GRUv3")
    message = str(info.value)
    assert "reset gate before Wh" in message and "docs/porting.md" in message
    assert "LSTM" in message and "GRUv3," not in message  # the supported list, without GRUv3
    with pytest.raises(UnsupportedError, match=r"'Foo' does not port; supported: .*Dense.*docs/porting\.md"):
        registry.with_defaults(Layer("Foo"))
    from treexchange import ConversionError, JuliaStruct
    from treexchange._port._arch import parse_architecture
    from treexchange._port._wholemodel import from_whole_model

    with pytest.raises(ConversionError, match=r"unknown layer 'Foo' at .*port: .*LSTM.*docs/porting\.md"):
        parse_architecture("Chain(Foo(3))")
    with pytest.raises(ConversionError, match=r"unknown layer type Main\.Foo; .*LSTM.*docs/porting\.md"):
        from_whole_model(JuliaStruct("Main.Foo", {}))


def test_records_are_consistent() -> None:
    for kind, record in registry.KINDS.items():
        assert record.kind == kind
        assert record.group in ("container", "arrays", "stateless"), kind
        assert bool(record.torch) != bool(record.torch_refusal) or record.group != "arrays", kind
        assert set(record.state_arrays) <= {"μ", "σ²"}, kind
    assert registry.RECURRENT_GATES == {"RNN": 1, "LSTM": 4, "GRU": 3, "GRUv3": 3}
    assert registry.KINDS["LSTM"].gates == ("i", "f", "g", "o")


def test_every_array_field_has_a_size_check() -> None:
    """Each kind with arrays implies their sizes (what from_flux checks a state against)."""
    for kind in registry.ARRAY_LAYERS:
        assert registry.KINDS[kind].shapes is not registry._no_arrays, kind


def test_no_target_imports_another() -> None:
    top, inner = _import_edges()
    edges = {(a, b) for a, targets in top.items() for b in targets} | inner
    owner = {module: target for target, modules in TARGET_MODULES.items() for module in modules}
    crossing = sorted((a, b) for a, b in edges if a in owner and b in owner and owner[a] != owner[b])
    assert not crossing, f"target modules importing another target's: {crossing}"


def test_flax_is_imported_once_per_module_at_its_top() -> None:
    """The Flax targets import flax (and their layer modules) at module level, never in a function."""
    for name in ("_nnx", "_linen", "_nnx_layers", "_linen_layers"):
        tree = ast.parse((PACKAGE / "_port" / f"{name}.py").read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for sub in ast.walk(node):
                    if isinstance(sub, ast.ImportFrom) and (sub.module or "").startswith(("flax", "_")):
                        pytest.fail(f"{name}.{node.name} imports {sub.module} inside a function")


# Where a kind's name may be written: the registry, and one module per target or source.
PLACES = {
    "registry": {"_port/_registry.py"},
    "flux writer": {"_port/_rules.py"},
    "flux text": {"_port/_arch.py"},
    "flux structs": {"_port/_wholemodel.py", "_port/_eras.py"},
    "lux": {"_port/_lux.py", "_port/_fromlux.py", "_port/_luxarch.py", "_interop/_lux.py"},  # Lux text too
    "from_flux": {"_port/_fromflux.py"},
    "equinox": {"_port/_eqx.py"},
    "flax": {"_port/_flaxread.py", "_port/_jaxops.py"},  # the reader and equations nnx and linen share
    "nnx": {"_port/_nnx.py"},
    "linen": {"_port/_linen.py"},
    "torch": {"_interop/_torch.py", "_interop/_torchmodules.py"},  # tensors; torch modules read
}


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _quoted_in(kind: str) -> set[str]:
    """The porting modules whose code (not docstrings) holds the string ``kind``."""
    found = set()
    for sub in ("_port", "_interop"):
        for path in (PACKAGE / sub).rglob("*.py"):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            docs = _docstrings(tree)
            if any(
                isinstance(n, ast.Constant) and n.value == kind and id(n) not in docs for n in ast.walk(tree)
            ):
                found.add(path.relative_to(PACKAGE).as_posix())
    return found


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN", "Conv", "BatchNorm", "MultiHeadAttention"])
def test_a_kind_is_named_in_the_registry_and_once_per_target(kind: str) -> None:
    modules = _quoted_in(kind)
    allowed = set().union(*PLACES.values())
    assert "_port/_registry.py" in modules
    assert modules <= allowed, f"{kind!r} is written in {sorted(modules - allowed)} too"
    for place, files in PLACES.items():
        assert len(modules & files) <= 1 or place in ("flux structs", "lux", "flax", "torch"), (
            place,
            modules & files,
        )


def test_scale_ports_to_every_target_that_can_compute_it() -> None:
    """Scale: Julia text both ways, the state's sizes checked, Lux names, PyTorch's refusal (the
    forward passes against the Flux reference are in tests/test_port_layers.py)."""
    import equinox as eqx
    import jax
    import numpy as np

    import treexchange as tx
    from treexchange._port._arch import parse_architecture
    from treexchange._port._eqx import build_equinox
    from treexchange._port._fromflux import check_state

    layer = Layer("Scale", {"size": (2, 3), "σ": "relu", "bias": False})
    text = registry.julia_constructor(layer)
    assert text == "Scale(2, 3, relu; bias=false)"
    assert parse_architecture(text).args == dict(registry.with_defaults(layer).args)
    model = build_equinox(layer, key=jax.random.key(0))
    model = eqx.tree_at(lambda m: m.layer.weight, model, jax.numpy.arange(6.0).reshape(3, 2))
    state = tx.flux_state(model)
    assert list(state) == ["scale", "bias", "σ"] and state["bias"] is False
    np.testing.assert_array_equal(state["scale"], np.arange(6.0).reshape(3, 2).T)  # Julia (2, 3)
    with pytest.raises(tx.ConversionError, match="implies scale of size 3×2"):
        check_state(Layer("Scale", {"size": (3, 2), "bias": False}), state)
    ps, st = tx.lux_state(model)
    assert list(ps) == ["weight"] and st == tx.NamedTuple()
    np.testing.assert_array_equal(ps["weight"], state["scale"])
    assert "Scale" in registry.NO_TORCH_EQUIVALENT

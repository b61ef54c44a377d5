"""Validation on value trees: clean when inferred from the same tree, every seeded corruption found
at its exact path, all in one run."""

from __future__ import annotations

import numpy as np
import pytest
from _schema_samples import flux_chain_state, flux_dense, lux_ps_st

import treexchange as tx
from treexchange import Mismatch, MismatchError, NamedTuple, Symbol
from treexchange._schema import (
    ArrayNode,
    NamedField,
    NamedTupleNode,
    NumberNode,
    Schema,
    StringNode,
    SymbolNode,
    TupleNode,
    VectorNode,
    raise_if_invalid,
)

LAYERS = ("model_state", "layers")


def _kinds_at(found: list[Mismatch]) -> set[tuple[str, tuple[object, ...]]]:
    return {(m.kind, m.path) for m in found}


def test_inferred_schema_validates_its_own_tree() -> None:
    state = flux_chain_state()
    ps, st = lux_ps_st()
    tree = {"model_state": state, "ps": ps, "st": st}
    doc = tx.infer_schema(tree, checksums=True, values=True)
    assert tx.validate(tree, doc) == []
    # A different draw of the same architecture: same structure, other numbers.
    other = {"model_state": flux_chain_state(seed=1), "ps": ps, "st": st}
    assert tx.validate(other, tx.infer_schema(tree)) == []


def test_seeded_corruptions_each_reported_at_its_exact_path_in_one_run() -> None:
    state = flux_chain_state()
    doc = tx.infer_schema({"model_state": state}, checksums=True)
    conv, bn, _pool, flat, dense = state.layers

    # 1. changed shape (conv weight 3x3 -> 5x5)
    conv2 = conv.replace(weight=np.zeros((5, 5, 1, 4), np.float32))
    # 2. changed dtype (batchnorm μ float32 -> float64)
    bn2 = bn.replace(μ=bn["μ"].astype(np.float64))
    # 3. one flipped byte of array data (batchnorm γ)
    gamma = bn["γ"].copy()
    gamma.view(np.uint8)[5] ^= 0x10
    bn2 = bn2.replace(γ=gamma)
    # 4. renamed field (dense weight -> W) and 5. reordered fields (bias before weight... σ first)
    dense2 = NamedTuple([("σ", ()), ("W", dense.weight), ("bias", dense.bias)])
    # 6. missing layer: drop the MaxPool () in position 3
    corrupted = NamedTuple(layers=(conv2, bn2, flat, dense2))

    found = tx.validate({"model_state": corrupted}, doc)
    got = _kinds_at(found)
    assert ("shape", (*LAYERS, 1, "weight")) in got
    assert ("dtype", (*LAYERS, 2, "μ")) in got
    assert ("checksum", (*LAYERS, 2, "γ")) in got
    assert ("missing", (*LAYERS, 5, "weight")) in got or ("missing", (*LAYERS, 4, "weight")) in got
    assert any(k == "extra" and p[-1] == "W" for k, p in got)
    assert any(k == "order" and p[-1] in (4, 5) for k, p in got)
    assert ("missing", (*LAYERS, 3)) in got
    # Nothing else is blamed: no spurious mismatches on the untouched layers.
    assert all(m.kind in {"shape", "dtype", "checksum", "missing", "extra", "order"} for m in found)
    assert len(found) == 7, "\n".join(map(str, found))
    messages = "\n".join(map(str, found))
    assert "model_state.layers[1].weight: shape (5, 5, 1, 4) found, schema expects (3, 3, 1, 4)" in messages
    assert "model_state.layers[2].μ: dtype float64 found, schema expects float32" in messages
    assert "renamed to 'W'?" in messages


def test_missing_layer_in_the_middle_is_aligned_not_blamed_on_later_layers() -> None:
    rng = np.random.default_rng(0)
    d1, d2, d3 = flux_dense(rng, 4, 8), flux_dense(rng, 8, 16), flux_dense(rng, 16, 2)
    doc = tx.infer_schema({"m": NamedTuple(layers=(d1, d2, d3))})
    found = tx.validate({"m": NamedTuple(layers=(d1, d3))}, doc)
    assert [(m.kind, m.path) for m in found] == [("missing", ("m", "layers", 2))]
    found = tx.validate({"m": NamedTuple(layers=(d1, d2, d2, d3))}, doc)
    assert [(m.kind, m.path) for m in found] == [("extra", ("m", "layers", 3))]


def test_checksums_can_be_skipped() -> None:
    state = flux_chain_state()
    doc = tx.infer_schema({"model_state": state}, checksums=True)
    changed = state.layers[4].weight.copy()
    changed[0, 0] += 1
    bad = NamedTuple(layers=(*state.layers[:4], state.layers[4].replace(weight=changed)))
    assert [m.kind for m in tx.validate({"model_state": bad}, doc)] == ["checksum"]
    assert tx.validate({"model_state": bad}, doc, checksums=False) == []


def test_kind_type_and_singleton_mismatches() -> None:
    doc = tx.infer_schema({"m": NamedTuple(a=(), b=None, c=np.zeros(2), d=Symbol("relu"))})
    found = tx.validate({"m": NamedTuple(a=None, b=None, c=[1.0, 2.0], d="relu")}, doc)
    assert [(m.kind, m.path) for m in found] == [
        ("type", ("m", "a")),
        ("kind", ("m", "c")),
        ("kind", ("m", "d")),
    ]
    assert str(found[0]) == "m.a: type Nothing found, schema expects Tuple{}"


def test_symbolic_dimensions_bind_across_the_document() -> None:
    doc = Schema(
        roots={
            "x": ArrayNode(dtype="float32", shape=["batch", 3]),
            "y": ArrayNode(dtype="float32", shape=["batch", None]),
        }
    )
    ok = {"x": np.zeros((7, 3), np.float32), "y": np.zeros((7, 11), np.float32)}
    assert tx.validate(ok, doc) == []
    bad = {"x": np.zeros((7, 3), np.float32), "y": np.zeros((8, 1), np.float32)}
    (m,) = tx.validate(bad, doc)
    assert (m.kind, m.path) == ("shape", ("y",))
    assert "batch = 7 (bound at x)" in m.detail


def test_value_constraints() -> None:
    doc = Schema(
        roots={
            "cfg": NamedTupleNode(
                fields=[
                    NamedField(name="groups", node=NumberNode(dtype="int64", enum=[1, 2])),
                    NamedField(name="momentum", node=NumberNode(dtype="float32", minimum=0, maximum=1)),
                    NamedField(name="eps", node=NumberNode(dtype="float32", enum=[1e-5])),
                    NamedField(name="act", node=SymbolNode(enum=["relu", "tanh"])),
                    NamedField(name="name", node=StringNode(enum=["a"])),
                ]
            )
        }
    )
    good = NamedTuple(
        groups=np.int64(2), momentum=np.float32(0.1), eps=np.float32(1e-5), act=Symbol("relu"), name="a"
    )
    assert tx.validate({"cfg": good}, doc) == []
    bad = NamedTuple(
        groups=np.int64(3), momentum=np.float32(1.5), eps=np.float32(1e-4), act=Symbol("gelu"), name="b"
    )
    found = tx.validate({"cfg": bad}, doc)
    assert [(m.kind, m.path[-1]) for m in found] == [
        ("value", "groups"),
        ("value", "momentum"),
        ("value", "eps"),
        ("value", "act"),
        ("value", "name"),
    ]
    assert str(found[0]) == "cfg.groups: value 3 found, schema allows [1, 2]"
    assert "maximum is 1" in str(found[1])


def test_inferred_values_pin_scalars() -> None:
    doc = tx.infer_schema({"m": NamedTuple(k=np.int64(3), x=np.float32(0.1), f=True)}, values=True)
    assert doc.node_at(("m", "x")).enum == [0.1]  # type: ignore[union-attr]
    assert tx.validate({"m": NamedTuple(k=np.int64(3), x=np.float32(0.1), f=True)}, doc) == []
    found = tx.validate({"m": NamedTuple(k=np.int64(4), x=np.float32(0.1), f=False)}, doc)
    assert [m.path[-1] for m in found] == ["k", "f"]


def test_vector_with_element_schema_and_length() -> None:
    doc = Schema(roots={"v": VectorNode(element=ArrayNode(dtype="float64", shape=[None]), length="n")})
    assert tx.validate({"v": [np.zeros(2), np.zeros(5)]}, doc) == []
    found = tx.validate({"v": [np.zeros(2), np.zeros((2, 2))]}, doc)
    assert [(m.kind, m.path) for m in found] == [("shape", ("v", 2))]


def test_missing_and_extra_roots_and_dict_entries() -> None:
    doc = tx.infer_schema({"a": {"x": 1.0, "y": 2.0}, "b": np.zeros(2)})
    found = tx.validate({"a": {"x": 1.0, "z": 2.0}, "c": 1}, doc)
    assert [(m.kind, m.path) for m in found] == [
        ("missing", ("a", "y")),
        ("extra", ("a", "z")),
        ("missing", ("b",)),
        ("extra", ("c",)),
    ]


def test_single_value_uses_the_only_root_and_name() -> None:
    state = flux_chain_state()
    doc = tx.infer_schema({"model_state": state})
    assert tx.validate(state, doc) == []
    ps, st = lux_ps_st()
    doc2 = tx.infer_schema({"ps": ps, "st": st})
    assert tx.validate(st, doc2, name="st") == []
    found = tx.validate(ps, doc2, name="st")
    assert [(m.kind, m.path[1:]) for m in found] == [
        ("extra", ("layer_1", "weight")),
        ("extra", ("layer_1", "bias")),
        ("missing", ("layer_2", "running_mean")),
        ("missing", ("layer_2", "running_var")),
        ("missing", ("layer_2", "training")),
        ("extra", ("layer_2", "scale")),
        ("extra", ("layer_2", "bias")),
        ("extra", ("layer_3", "weight")),
        ("extra", ("layer_3", "bias")),
    ]
    # Two look-alike candidates: no misleading rename guess.
    assert not any("renamed" in m.detail for m in found)


def test_raise_if_invalid_lists_everything() -> None:
    doc = Schema(roots={"t": TupleNode(items=[ArrayNode(dtype="int8", shape=[2]), ArrayNode(dtype="int8")])})
    with pytest.raises(MismatchError) as info:
        raise_if_invalid({"t": (np.zeros(3, np.int8), np.zeros(1, np.int16))}, doc)
    assert len(info.value.mismatches) == 2
    assert "t[1]: shape (3,) found, schema expects (2,)" in str(info.value)
    assert "t[2]: dtype int16 found, schema expects int8" in str(info.value)


def test_pytree_through_the_bridge() -> None:
    eqx = pytest.importorskip("equinox")
    jax = pytest.importorskip("jax")
    model = eqx.nn.Linear(3, 2, key=jax.random.PRNGKey(0))
    doc = tx.infer_schema(model)
    node = doc.roots["model_state"]
    assert node.kind == "namedtuple"
    assert node.field("weight").shape == [2, 3]  # type: ignore[union-attr]
    assert tx.validate(model, doc) == []
    bigger = eqx.nn.Linear(4, 2, key=jax.random.PRNGKey(0))
    assert [(m.kind, m.path) for m in tx.validate(bigger, doc)] == [("shape", ("model_state", "weight"))]

"""The document models, JSON text, checksums and scalar encodings; a property test over random trees."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import treexchange as tx
from treexchange import FormatError, Int128, JuliaStruct, LimitError, NamedTuple, Singleton, Symbol
from treexchange._jsonform import _SLAB_BYTES, array_sha256, json_scalar
from treexchange._schema import (
    ArrayNode,
    BoolNode,
    NamedField,
    NamedTupleNode,
    Schema,
    SingletonNode,
    TupleNode,
    VectorNode,
)
from treexchange._schema._model import format_shape
from treexchange._schema._pretty import pretty_json
from treexchange._schema._scalars import number_compare, number_in


def test_models_reject_malformed_nodes() -> None:
    with pytest.raises(ValueError, match="duplicate field name 'a'"):
        NamedTupleNode(fields=[NamedField(name="a", node=BoolNode()), NamedField(name="a", node=BoolNode())])
    with pytest.raises(ValueError, match="exactly one of 'items' and 'element'"):
        VectorNode(items=[BoolNode()], element=BoolNode())
    with pytest.raises(ValueError, match="'length' goes with 'element'"):
        VectorNode(items=[BoolNode()], length=3)
    with pytest.raises(FormatError, match=r"roots\.x"):
        tx.load_schema({"schema_version": "2.0", "roots": {"x": {"kind": "array", "shape": [1.5]}}})


def test_node_at_and_summaries() -> None:
    doc = Schema(
        roots={
            "m": NamedTupleNode(
                fields=[
                    NamedField(name="layers", node=TupleNode(items=[SingletonNode(type="Tuple{}")])),
                    NamedField(name="w", node=ArrayNode(dtype="float32", shape=[3, None, "batch"])),
                ]
            )
        }
    )
    assert doc.node_at(("m", "layers", 1)).summary() == "()"
    assert doc.node_at(["m", "w"]).summary() == "array float32 (3, :, batch)"
    with pytest.raises(KeyError):
        doc.node_at(("m", "layers", 2))
    assert format_shape([]) == "()" and format_shape([7]) == "(7,)"


def test_json_text_is_canonical_and_readable() -> None:
    doc = tx.load_schema(
        Schema(roots={"x": ArrayNode(dtype="float32", shape=[2, 3], description="é")}).to_json()
    )
    text = doc.to_json()
    assert '"description": "é"' in text  # UTF-8, not \\u escapes
    assert '"shape": [2, 3]' in text  # small pieces stay on one line
    assert json.loads(text) == json.loads(doc.to_json(indent=None)) == doc.to_dict()
    big = {"a": [{"k": i, "v": list(range(i))} for i in range(30)]}
    assert json.loads(pretty_json(big, width=40)) == big
    # Every line fits the width (the separating comma aside).
    assert all(len(line.rstrip(",")) <= 40 for line in pretty_json(big, width=40).splitlines())


def test_depth_is_bounded_with_our_errors() -> None:
    most = tx.Limits().max_schema_depth
    deep: Any = np.zeros(1)
    for _ in range(most + 5):
        deep = (deep,)
    with pytest.raises(LimitError, match="64 levels"):
        tx.infer_schema({"x": deep})
    node: dict[str, Any] = {"kind": "bool"}
    for _ in range(most + 5):
        node = {"kind": "tuple", "items": [node]}
    with pytest.raises(FormatError):
        tx.load_schema({"schema_version": "2.0", "roots": {"x": node}})
    very_deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(FormatError):
        tx.load_schema('{"schema_version": "2.0", "roots": {"x": ' + very_deep + "}}")


@pytest.mark.parametrize(
    "array",
    [
        np.arange(24, dtype="<f4").reshape(2, 3, 4),  # C order
        np.asfortranarray(np.arange(24, dtype="<i8").reshape(2, 3, 4)),  # F order
        np.arange(48, dtype="<i2").reshape(4, 12)[:, ::2],  # strided view
        np.arange(6, dtype=">f8").reshape(2, 3),  # big-endian
        np.arange(6, dtype="<f4").astype(ml_dtypes.bfloat16).reshape(3, 2),
        np.array(3.5, "<f8"),  # 0-d
        np.zeros((0, 4), "<f4"),  # empty
        np.array([True, False, True]),
        np.arange(4, dtype="<c8"),
    ],
    ids=["C", "F", "strided", "big-endian", "bfloat16", "0-d", "empty", "bool", "complex"],
)
def test_checksum_is_sha256_of_column_major_little_endian_bytes(array: np.ndarray) -> None:
    le = array.astype(array.dtype.newbyteorder("<")) if array.dtype.byteorder == ">" else array
    expected = hashlib.sha256(le.tobytes(order="F")).hexdigest()
    assert array_sha256(array) == expected


def test_checksum_of_a_large_row_major_array_hashes_in_slabs() -> None:
    rows = _SLAB_BYTES // (8 * 64) + 3  # more than one slab of the last axis
    a = np.arange(64 * rows * 2, dtype="<f8").reshape(64, rows * 2)
    assert not a.flags.f_contiguous
    assert array_sha256(a) == hashlib.sha256(a.tobytes(order="F")).hexdigest()


def test_scalar_encoding_and_comparisons() -> None:
    assert json_scalar(np.float32(0.1)) == 0.1
    assert json_scalar(np.float64(0.1)) == 0.1
    assert json_scalar(np.float16(np.inf)) == "Infinity"
    assert json_scalar(-np.inf) == "-Infinity"
    assert json_scalar(ml_dtypes.bfloat16(1.5)) == 1.5
    assert json_scalar(Int128(-(2**100))) == str(-(2**100))
    assert json_scalar(np.complex128(1 - 2j)) == [1.0, -2.0]
    assert json_scalar(Symbol("a")) == "a"
    assert number_in(np.float32(0.1), [0.1]) and not number_in(np.float64(0.1), [float(np.float32(0.1))])
    assert number_in(np.float64(np.inf), ["Inf"]) and number_in(np.float64(np.inf), ["Infinity"])
    assert number_in(np.complex64(1 + 2j), [[1, 2]])
    assert number_in(np.uint64(2**64 - 1), [2**64 - 1])
    assert number_compare(np.float32(0.1), 0.1) == 0
    assert number_compare(np.int8(-3), 0) == -1
    assert number_compare(np.complex64(1), 0) is None


# --- property: any value tree describes itself --------------------------------------------------

_dtypes = st.sampled_from(
    [np.dtype(t) for t in ("float32", "float64", "float16", "int8", "int64", "uint16", "bool", "complex64")]
)
_arrays = _dtypes.flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=3)))
_names = st.sampled_from(["weight", "bias", "σ", "σ²", "μ", "layers", "layer_1", "x"])
_leaves = st.one_of(
    _arrays,
    st.sampled_from([(), None, tx.MISSING, Singleton("NNlib.#relu")]),
    st.floats(allow_nan=True, width=32).map(np.float32),
    st.integers(-(2**63), 2**63 - 1).map(np.int64),
    st.booleans(),
    st.text(max_size=4),
    st.text(min_size=1, max_size=4).map(Symbol),
)


def _containers(children: Any) -> Any:
    return st.one_of(
        st.lists(st.tuples(_names, children), max_size=4, unique_by=lambda kv: kv[0]).map(NamedTuple),
        st.lists(children, min_size=1, max_size=4).map(tuple),
        st.lists(children, max_size=3),
        st.dictionaries(_names, children, max_size=3),
        st.lists(st.tuples(_names, children), max_size=3, unique_by=lambda kv: kv[0]).map(
            lambda kv: JuliaStruct("Main.S{Core.Int64}", kv)
        ),
    )


_trees = st.recursive(_leaves, _containers, max_leaves=10)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from(["model_state", "ps", "st"]), _trees, min_size=1, max_size=2))
def test_any_tree_validates_against_its_own_schema(tree: dict[str, Any]) -> None:
    doc = tx.infer_schema(tree, checksums=True, values=True)
    again = tx.load_schema(doc.to_json())
    assert again == doc
    assert tx.validate(tree, again) == []
    assert not tx.diff(doc, tx.infer_schema(tree, checksums=True, values=True))
    # Dropping any one root is noticed.
    if len(tree) == 2:
        first = next(iter(tree))
        found = tx.validate({k: v for k, v in tree.items() if k != first}, doc)
        assert [(m.kind, m.path) for m in found] == [("missing", (first,))]

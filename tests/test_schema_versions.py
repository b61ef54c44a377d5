"""Versioning: newer majors refused naming both versions, newer minors read with a warning, older
versions migrated (the shipped 0.9 -> 1.0 migration reproduces the 1.0 example exactly)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

import treexchange as tx
from treexchange import FormatError, UnsupportedError
from treexchange._schema import SCHEMA_VERSION, migrate, register_migration
from treexchange._schema._versions import _MIGRATIONS

REPO = Path(__file__).resolve().parents[1]


def _flux_example_as_0_9() -> dict[str, Any]:
    """The Flux chain example written in the 0.9 pre-release layout (docs/schema.md)."""

    def dense(n_in: int, n_out: int, doc: str) -> dict[str, Any]:
        return {
            "type": "record",
            "doc": doc,
            "fields": {
                "weight": {"type": "tensor", "dtype": "float32", "dims": [n_out, n_in]},
                "bias": {"type": "tensor", "dtype": "float32", "dims": [n_out]},
                "σ": {"type": "empty", "of": "()"},
            },
        }

    def ints(n: int) -> dict[str, Any]:
        return {"type": "tuple", "elements": [{"type": "scalar", "dtype": "int64"} for _ in range(n)]}

    vec4 = {"type": "tensor", "dtype": "float32", "dims": [4]}
    conv = {
        "type": "record",
        "doc": "Conv((3, 3), 1 => 4, relu): weight is (kw, kh, cin, cout) in Julia order.",
        "fields": {
            "σ": {"type": "empty", "of": "()", "doc": "the activation function: no state, saved as ()"},
            "weight": {"type": "tensor", "dtype": "float32", "dims": [3, 3, 1, 4]},
            "bias": vec4,
            "stride": ints(2),
            "pad": ints(4),
            "dilation": ints(2),
            "groups": {"type": "scalar", "dtype": "int64", "choices": [1]},
        },
    }
    bn = {
        "type": "record",
        "doc": "BatchNorm(4): β, γ trained; μ, σ² running statistics.",
        "fields": {
            "λ": {"type": "empty", "of": "()"},
            "β": vec4,
            "γ": vec4,
            "μ": vec4,
            "σ²": vec4,
            "ϵ": {"type": "scalar", "dtype": "float32", "min": 0},
            "momentum": {"type": "scalar", "dtype": "float32", "min": 0, "max": 1},
            "affine": {"type": "scalar", "dtype": "bool"},
            "track_stats": {"type": "scalar", "dtype": "bool"},
            "active": {"type": "empty", "of": "nothing"},
            "chs": {"type": "scalar", "dtype": "int64", "choices": [4]},
        },
    }
    example = json.loads((REPO / "schema/examples/flux_chain_state.json").read_text(encoding="utf-8"))
    return {
        "format_version": "0.9",
        "generator": "treexchange",
        "doc": example["description"],
        "trees": {
            "model_state": {
                "type": "record",
                "fields": {
                    "layers": {
                        "type": "tuple",
                        "doc": example["roots"]["model_state"]["fields"][0]["node"]["description"],
                        "elements": [
                            conv,
                            bn,
                            {"type": "empty", "of": "()", "doc": "MaxPool((2, 2)): no state"},
                            {"type": "empty", "of": "()", "doc": "Flux.flatten: no state"},
                            dense(36, 10, "Dense(36 => 10): weight is (out, in) = (10, 36)."),
                        ],
                    }
                },
            }
        },
    }


def test_migration_0_9_reproduces_the_1_0_example() -> None:
    old = _flux_example_as_0_9()
    doc = tx.load_schema(old)
    assert doc.schema_version == SCHEMA_VERSION
    expected = tx.load_schema(REPO / "schema/examples/flux_chain_state.json")
    assert doc.roots == expected.roots
    assert doc.description == expected.description
    assert doc.producer is not None and doc.producer.name == "treexchange"
    # Field order comes from the 0.9 object key order and survives as a 1.0 list.
    assert doc.node_at(("model_state", "layers", 2)).names[:3] == ["λ", "β", "γ"]  # type: ignore[union-attr]


def test_migration_also_runs_from_json_text_and_keeps_input_untouched() -> None:
    old = _flux_example_as_0_9()
    before = copy.deepcopy(old)
    doc = tx.load_schema(json.dumps(old, ensure_ascii=False))
    assert old == before
    assert doc.node_at(("model_state", "layers", 1, "weight")).shape == [3, 3, 1, 4]  # type: ignore[union-attr]


def test_migrated_free_and_symbolic_dims() -> None:
    old = {"format_version": "0.9", "trees": {"x": {"type": "tensor", "dims": ["?", "batch", 3]}}}
    assert migrate(old)["roots"]["x"] == {"kind": "array", "shape": [None, "batch", 3]}


def test_broken_0_9_document_is_a_format_error() -> None:
    with pytest.raises(FormatError, match=r"cannot migrate schema version 0\.9"):
        tx.load_schema({"format_version": "0.9", "trees": {"x": {"type": "bogus"}}})
    with pytest.raises(FormatError, match="cannot migrate"):
        tx.load_schema({"format_version": "0.9", "trees": {"x": {"dims": [1]}}})


def test_newer_major_version_is_refused_naming_both_versions() -> None:
    with pytest.raises(UnsupportedError) as info:
        tx.load_schema({"schema_version": "3.0", "roots": {}})
    assert "3.0" in str(info.value) and SCHEMA_VERSION in str(info.value)
    with pytest.raises(UnsupportedError, match=r"3\.1"):
        tx.validate({}, '{"schema_version": "3.1", "roots": {}}')


def test_newer_minor_version_is_read_with_a_warning_ignoring_unknown_keys() -> None:
    data = {
        "schema_version": "2.7",
        "future_top_level": 1,
        "roots": {"x": {"kind": "array", "dtype": "float32", "future_key": {"a": 1}}},
    }
    with pytest.warns(UserWarning, match="2.7"):
        doc = tx.load_schema(data)
    assert doc.roots["x"].dtype == "float32"  # type: ignore[union-attr]
    # ... while the current version still rejects unknown keys (they are usually typos).
    with pytest.raises(FormatError, match="future_key"):
        tx.load_schema({**data, "schema_version": SCHEMA_VERSION, "future_top_level": None})
    # A later minor of the previous major (1.7, written by a newer 1.x reader): migrated like 1.0,
    # with its unknown keys ignored and a warning.
    with pytest.warns(UserWarning, match="1.7"):
        doc = tx.load_schema({**data, "schema_version": "1.7"})
    assert doc.schema_version == SCHEMA_VERSION and doc.roots["x"].dtype == "float32"  # type: ignore[union-attr]


def test_older_version_without_a_migration_is_refused() -> None:
    with pytest.raises(UnsupportedError, match=r"0\.5.*no migration"):
        tx.load_schema({"schema_version": "0.5", "roots": {}})


def test_registered_migrations_chain() -> None:
    @register_migration("0.8", "0.9")
    def _eight(data: dict[str, Any]) -> dict[str, Any]:
        return {"format_version": "0.9", "trees": data["forest"]}

    try:
        doc = tx.load_schema({"format_version": "0.8", "forest": {"b": {"type": "scalar", "dtype": "bool"}}})
        assert doc.roots["b"].kind == "bool"
    finally:
        del _MIGRATIONS["0.8"]


def test_not_a_schema() -> None:
    with pytest.raises(FormatError, match="schema_version"):
        tx.load_schema({"roots": {}})
    with pytest.raises(FormatError, match="not valid JSON"):
        tx.load_schema("{nope")
    with pytest.raises(FormatError, match="cannot read schema"):
        tx.load_schema(REPO / "no-such-schema.json")

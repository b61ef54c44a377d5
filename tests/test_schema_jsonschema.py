"""The committed JSON Schema is current, and every example and inferred schema satisfies it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest
from _schema_samples import flux_chain_state, lux_ps_st

import treexchange as tx
from treexchange import FormatError, NamedTuple, Symbol
from treexchange._schema import json_schema, json_schema_text

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "schema" / "treexchange-schema.json"
EXAMPLES = sorted((REPO / "schema" / "examples").glob("*.json"))


@pytest.fixture(scope="module")
def validator() -> jsonschema.protocols.Validator:
    schema = json.loads(COMMITTED.read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def test_committed_json_schema_is_current() -> None:
    assert COMMITTED.read_text(encoding="utf-8") == json_schema_text(), (
        "schema/treexchange-schema.json is out of date: regenerate it with "
        "`treexchange schema --json-schema -o schema/treexchange-schema.json`"
    )
    assert json_schema()["$schema"] == "https://json-schema.org/draft/2020-12/schema"


def test_nodes_dispatch_on_kind_without_one_of() -> None:
    """``oneOf`` over the node kinds makes JSON Schema validation exponential in the nesting depth
    (docs/schema.md); the committed schema dispatches on ``kind`` with an if/then/else chain."""
    committed = json.loads(COMMITTED.read_text(encoding="utf-8"))

    def unions(data: Any) -> list[Any]:
        if isinstance(data, dict):
            found = [data["oneOf"]] if "oneOf" in data else []
            return found + [u for v in data.values() for u in unions(v)]
        if isinstance(data, list):
            return [u for v in data for u in unions(v)]
        return []

    assert all("$ref" not in branch for union in unions(committed) for branch in union)
    assert "discriminator" not in COMMITTED.read_text(encoding="utf-8")
    node = committed["$defs"]["Node"]
    kinds = node["properties"]["kind"]["enum"]
    assert len(kinds) == 13
    chained = []
    while "if" in node:
        chained.append(node["if"]["properties"]["kind"]["const"])
        node = node["else"]
    assert chained == kinds[:-1] and node == {"$ref": f"#/$defs/{committed_name(kinds[-1])}"}


def committed_name(kind: str) -> str:
    return {"namedtuple": "NamedTupleNode"}.get(kind, kind.capitalize() + "Node")


def test_there_are_the_two_examples() -> None:
    assert {p.name for p in EXAMPLES} == {"flux_chain_state.json", "lux_ps_st.json"}


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_satisfy_the_json_schema_and_load(path: Path, validator: Any) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    validator.validate(data)
    doc = tx.load_schema(path)
    assert doc.to_dict() == data  # nothing lost or added by the models
    assert doc.to_json() + "\n" == path.read_text(encoding="utf-8")  # committed text is canonical


def test_examples_describe_the_trees_they_claim() -> None:
    assert (
        tx.validate({"model_state": flux_chain_state(seed=3)}, REPO / "schema/examples/flux_chain_state.json")
        == []
    )
    ps, st = lux_ps_st(seed=3)
    assert tx.validate({"ps": ps, "st": st}, REPO / "schema/examples/lux_ps_st.json") == []


def test_inferred_schemas_satisfy_the_json_schema(validator: Any) -> None:
    ps, st = lux_ps_st()
    tree = {
        "model_state": flux_chain_state(),
        "ps": ps,
        "st": st,
        "misc": NamedTuple(
            s="text",
            sym=Symbol("relu"),
            c=np.complex64(1 + 2j),
            big=tx.Int128(2**100),
            nan=np.float64("nan"),
            v=[1, "a", None, tx.MISSING],
            d={"k": np.zeros((2, 0), np.float16)},
            arr=tx.JuliaArray("Core.Symbol", [Symbol("a")]),
            st=tx.JuliaStruct("Main.Foo{Core.Int64}", {"a": np.int64(1), "b": ()}),
            bits=tx.JuliaBits("Main.Color", b"\x01\x00\x00\x00"),
        ),
    }
    doc = tx.infer_schema(tree, checksums=True, values=True)
    validator.validate(doc.to_dict())
    validator.validate(json.loads(doc.to_json(indent=None)))
    assert tx.validate(tree, doc) == []


BAD_DOCUMENTS = {
    "no kind": {"schema_version": "2.0", "roots": {"x": {"dtype": "float32"}}},
    "unknown kind": {"schema_version": "2.0", "roots": {"x": {"kind": "tensor"}}},
    "typo key": {"schema_version": "2.0", "roots": {"x": {"kind": "array", "shpae": [1]}}},
    "bad sha": {"schema_version": "2.0", "roots": {"x": {"kind": "array", "sha256": "abc"}}},
    "negative dim": {"schema_version": "2.0", "roots": {"x": {"kind": "array", "shape": [-1]}}},
    "bad dim name": {"schema_version": "2.0", "roots": {"x": {"kind": "array", "shape": ["a b"]}}},
    "items and element": {
        "schema_version": "2.0",
        "roots": {"x": {"kind": "vector", "items": [], "element": {"kind": "bool"}}},
    },
    "neither items nor element": {"schema_version": "2.0", "roots": {"x": {"kind": "vector"}}},
    "struct without type": {"schema_version": "2.0", "roots": {"x": {"kind": "struct", "fields": []}}},
    "bad version": {"schema_version": "one", "roots": {}},
}


@pytest.mark.parametrize("name", list(BAD_DOCUMENTS))
def test_bad_documents_are_refused_by_both_the_json_schema_and_the_models(name: str, validator: Any) -> None:
    data = BAD_DOCUMENTS[name]
    with pytest.raises(jsonschema.ValidationError):
        validator.validate(data)
    with pytest.raises(FormatError):
        tx.load_schema(data)

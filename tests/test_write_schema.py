"""``save(..., schema=...)``: embedding a schema (inferred or given) in the written file, and
refusing values that do not conform before anything is written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import treexchange
from treexchange import (
    MISSING,
    ConversionError,
    Int128,
    JuliaStruct,
    MismatchError,
    NamedTuple,
    Symbol,
)
from treexchange._schema import SCHEMA_ATTRIBUTE, GroupNode, schema_to_attributes


def _state(n_in: int = 3) -> NamedTuple:
    dense = NamedTuple(weight=np.ones((2, n_in), np.float32), bias=np.zeros(2, np.float32), σ=())
    drop = NamedTuple(p=0.5, dims=(), active=None, rng=())
    return NamedTuple(layers=(dense, drop), act=Symbol("relu"))


VALUES: dict[str, Any] = {
    "model_state": _state(),
    "g/h/x": np.arange(4, dtype=np.int16),
    "g/y": "text",
    "l": [1, "a", None],
    "s": JuliaStruct("Main.Foo", {"a": 1, "b": np.zeros(2)}),
    "m": MISSING,
    "big": Int128(5),
    "c": 1 + 2j,
    "t": tuple(range(12)),  # written as a Vector{Int64}, read back as the tuple
}


def test_schema_true_embeds_the_schema_of_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "m.jld2"
    treexchange.save(path, VALUES, schema=True)
    embedded = treexchange.read_embedded_schema(path)
    assert embedded is not None
    # Inferring from the file written gives the same tree, groups included.
    assert embedded.roots == treexchange.infer_schema(path).roots
    assert isinstance(embedded.roots["g"], GroupNode) and set(embedded.roots["g"].entries) == {"h", "y"}
    assert treexchange.validate(path, embedded) == []
    # libhdf5 sees it as an ordinary root attribute holding the document's JSON.
    with h5py.File(path, "r") as f:
        text = f.attrs[SCHEMA_ATTRIBUTE]
    assert json.loads(text)["roots"]["model_state"]["kind"] == "namedtuple"
    loaded = treexchange.load(path)  # checks the embedded schema
    assert set(loaded) == {"model_state", "g", "l", "s", "m", "big", "c", "t"}


def test_schema_of_a_large_model_is_embedded(tmp_path: Path) -> None:
    # 2,500 Dense-like layers, 5,000 array leaves: the schema's JSON (~600 KB) is far beyond the
    # 64 KiB one header message holds, so it must live in the global heap (a vlen string).
    dense = [
        NamedTuple(weight=np.full((2, 2), i, np.float32), bias=np.zeros(2, np.float32), σ=())
        for i in range(2500)
    ]
    state = NamedTuple(layers=tuple(dense))
    path = tmp_path / "big.jld2"
    treexchange.save(path, model_state=state, schema=True)
    with h5py.File(path, "r") as f:
        text = f.attrs[SCHEMA_ATTRIBUTE]
    assert len(text) > 0xFFFF
    assert json.loads(text)["roots"]["model_state"]["kind"] == "namedtuple"
    embedded = treexchange.read_embedded_schema(path)
    assert embedded == treexchange.infer_schema({"model_state": state})
    back = treexchange.load(path, "model_state")  # checked against the embedded schema
    assert len(back["layers"]) == 2500 and back["layers"][7]["weight"][0, 0] == 7


def test_schema_true_with_a_dict_validates_on_load(tmp_path: Path) -> None:
    path = tmp_path / "d.jld2"
    treexchange.save(path, d=treexchange.JuliaDict({"a": 1.0, "b": 2.0}), schema=True)
    embedded = treexchange.read_embedded_schema(path)
    assert embedded is not None and embedded.roots["d"].kind == "dict"
    assert treexchange.load(path) == {"d": {"a": 1.0, "b": 2.0}}
    assert treexchange.validate(path, embedded) == []


def test_schema_true_with_a_plain_dict_describes_the_namedtuple_written(tmp_path: Path) -> None:
    path = tmp_path / "p.jld2"
    treexchange.save(path, ps={"weight": np.ones(2, np.float32)}, schema=True)
    embedded = treexchange.read_embedded_schema(path)
    assert embedded is not None and embedded.roots["ps"].kind == "namedtuple"
    assert treexchange.validate(path, embedded) == []


def test_load_checks_the_embedded_schema(tmp_path: Path) -> None:
    """What ``schema=`` embeds is what ``load`` checks: the same attribute, written without the
    up-front validation (through ``root_attributes``), makes ``load`` fail."""
    doc = treexchange.infer_schema({"model_state": _state(3)})
    path = tmp_path / "m.jld2"
    treexchange.save(path, model_state=_state(4), root_attributes=schema_to_attributes(doc))
    with pytest.raises(MismatchError, match=r"weight: shape \(2, 4\) found, schema expects \(2, 3\)"):
        treexchange.load(path)
    treexchange.save(path, model_state=_state(3), schema=doc)
    assert treexchange.read_embedded_schema(path) == doc
    assert treexchange.load(path, "model_state")["layers"][0]["weight"].shape == (2, 3)


@pytest.mark.parametrize("form", ["schema", "json", "path", "pathlike"])
def test_a_given_schema_is_validated_then_embedded(tmp_path: Path, form: str) -> None:
    doc = treexchange.infer_schema({"model_state": _state()}, description="three inputs")
    json_path = tmp_path / "schema.json"
    json_path.write_text(doc.to_json())
    given: Any = {"schema": doc, "json": doc.to_json(), "path": str(json_path), "pathlike": json_path}[form]
    path = tmp_path / "m.jld2"
    treexchange.save(path, model_state=_state(), schema=given)
    assert treexchange.read_embedded_schema(path) == doc


def test_a_mismatching_schema_writes_nothing(tmp_path: Path) -> None:
    doc = treexchange.infer_schema({"model_state": _state(3), "step": 1})
    out = tmp_path / "out"
    out.mkdir()
    path = out / "m.jld2"
    with pytest.raises(MismatchError) as info:
        treexchange.save(path, model_state=_state(5), extra=1.0, schema=doc)
    messages = [str(m) for m in info.value.mismatches]
    assert messages == [
        "model_state.layers[1].weight: shape (2, 5) found, schema expects (2, 3)",
        "step: missing (schema expects number int64)",
        "extra: extra (top-level name not in schema)",
    ]
    assert list(out.iterdir()) == []  # no file, no temporary file

    # An existing file is left as it was.
    treexchange.save(path, model_state=_state(3), step=1)
    before = path.read_bytes()
    with pytest.raises(MismatchError):
        treexchange.save(path, model_state=_state(5), step=1, schema=doc)
    assert path.read_bytes() == before and sorted(os.listdir(out)) == ["m.jld2"]


def test_schema_and_root_attribute_of_the_same_name_conflict(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="given twice"):
        treexchange.save(tmp_path / "x.jld2", x=1, root_attributes={SCHEMA_ATTRIBUTE: "{}"}, schema=True)
    assert list(tmp_path.iterdir()) == []


def test_schema_false_or_none_embeds_nothing(tmp_path: Path) -> None:
    for i, option in enumerate((None, False)):
        path = tmp_path / f"{i}.jld2"
        treexchange.save(path, x=1, schema=option)
        assert treexchange.read_embedded_schema(path) is None


def test_names_that_are_both_group_and_dataset_are_refused_before_writing(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="is a dataset, not a group") as info:
        treexchange.save(tmp_path / "x.jld2", {"a": 1, "a/b": 2}, schema=True)
    assert info.value.path == ("a/b",)
    assert list(tmp_path.iterdir()) == []


_IMPORTS = """
import sys, numpy as np, treexchange
treexchange.save(sys.argv[1], x=np.zeros(2){option})
print(any(m.startswith("treexchange._schema") for m in sys.modules), "pydantic" in sys.modules)
"""


@pytest.mark.parametrize(("option", "expected"), [("", "False False"), (", schema=True", "True True")])
def test_the_schema_layer_is_imported_only_for_schema(tmp_path: Path, option: str, expected: str) -> None:
    code = _IMPORTS.format(option=option)
    out = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "x.jld2")], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == expected

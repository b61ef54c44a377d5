"""Schemas of the Julia-written fixtures: infer -> validate is clean for every file (lazily, and
for the values ``load`` returns), checksums agree with h5py, a flipped data byte is caught."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

import h5py
import jsonschema
import numpy as np
import pytest
from conftest import (
    DENSE_FLUX_STATE,
    FIXTURES,
    NESTED_GROUPS,
    all_fixtures_or_skip,
    fixture_ids,
    require_fixture,
    require_one_of,
    require_one_of_table,
)

import treexchange as tx
from treexchange import WrongFormatError, load

REPO = Path(__file__).resolve().parents[1]
FILES = all_fixtures_or_skip()


@pytest.fixture(scope="module")
def validator() -> Any:
    schema = json.loads((REPO / "schema/treexchange-schema.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


@pytest.mark.parametrize(
    "path", FILES, ids=fixture_ids(FILES) if FILES and isinstance(FILES[0], Path) else None
)
def test_infer_then_validate_is_clean_for_every_fixture(path: Path, validator: Any) -> None:
    if path.suffix == ".jld":  # JLD (v1, JLD.jl) files are told apart, not read
        with pytest.raises(WrongFormatError, match="JLD"):
            tx.infer_schema(path)
        return
    doc = tx.infer_schema(path, checksums=True, values=True)
    assert doc.roots, "every fixture holds at least one name"
    assert doc.producer is not None and doc.producer.source == path.name
    assert doc.producer.format is not None and doc.producer.format.startswith("0.")
    # The JSON Schema check of the fullest document (every optional key the plain one has too).
    validator.validate(doc.to_dict())
    assert tx.load_schema(doc.to_json()) == doc
    assert tx.validate(path, doc) == []
    values = load(path)  # the eager values agree with the lazy nodes
    assert tx.validate(values, doc) == []
    assert not tx.diff(doc, tx.infer_schema(values, checksums=True, values=True))


def test_an_opened_file_is_walked_lazily() -> None:
    path = require_one_of(DENSE_FLUX_STATE)
    with tx.open(path) as f:
        doc = tx.infer_schema(f)  # no checksums, no values: reads no array data
        assert tx.validate(f, doc) == []
    assert doc == tx.infer_schema(path)
    assert tx.validate(path, doc) == []
    assert doc.roots["model_state"].summary() == "namedtuple (layers)"


def test_flux_state_fixture_schema_shape() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    doc = tx.infer_schema(path)
    layers = doc.node_at(("lenet_state", "layers"))
    assert layers.kind == "tuple" and len(layers.items) == 8  # type: ignore[union-attr]
    assert [n.kind for n in layers.items] == [  # type: ignore[union-attr]
        "namedtuple",
        "singleton",
        "namedtuple",
        "singleton",
        "singleton",
        "namedtuple",
        "namedtuple",
        "namedtuple",
    ]
    conv = layers.items[0]  # type: ignore[union-attr]
    assert conv.names == ["σ", "weight", "bias", "stride", "pad", "dilation", "groups"]
    assert conv.field("weight").shape == [5, 5, 1, 6]
    assert conv.field("σ").type == "Tuple{}"
    dense = layers.items[5]  # type: ignore[union-attr]
    assert dense.field("weight").shape == [120, 256] and dense.field("weight").dtype == "float32"


def test_checksums_agree_with_h5py() -> None:
    """h5py is the oracle: its C-ordered data of a top-level dataset are the Julia column-major bytes."""
    checked = 0
    for rel in (
        "flux-jl/xy.jld2",
        "jld2jl/docs_v0.6.0_demo.jld2",
        "misc/ternarydiagrams_data.jld2",
        "misc/amg_lin_elastic_2d.jld2",
    ):
        path = FIXTURES / rel
        if not path.is_file():
            continue
        doc = tx.infer_schema(path, checksums=True)
        with h5py.File(path, "r") as f:
            for name, node in doc.roots.items():
                ds = f.get(name)
                if node.kind != "array" or not isinstance(ds, h5py.Dataset) or ds.dtype.kind not in "fiub":
                    continue
                data = ds[()]
                assert node.shape == list(reversed(data.shape))  # type: ignore[union-attr]
                le = data.astype(data.dtype.newbyteorder("<"))
                assert node.sha256 == hashlib.sha256(np.ascontiguousarray(le).tobytes()).hexdigest()  # type: ignore[union-attr]
                checked += 1
    if checked == 0:
        pytest.skip("fixtures absent")
    assert checked >= 5


def _flip_one_data_byte(src: Path, dst: Path, array: np.ndarray) -> int:
    """Copy ``src`` to ``dst`` with one byte of ``array``'s stored data flipped; returns its offset."""
    shutil.copyfile(src, dst)
    data = bytearray(dst.read_bytes())
    needle = np.asfortranarray(array).tobytes(order="F")
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0, "the array's bytes must occur exactly once"
    offset = at + len(needle) // 2
    data[offset] ^= 0x01
    dst.write_bytes(bytes(data))
    return offset


def test_flipped_data_byte_is_reported_at_its_path(tmp_path: Path) -> None:
    src = require_fixture("flux-state/silver-bullet_lenet.jld2")
    doc = tx.infer_schema(src, checksums=True)
    weight = load(src, "lenet_state").layers[5].weight
    bad = tmp_path / "lenet_flipped.jld2"
    _flip_one_data_byte(src, bad, weight)
    found = tx.validate(bad, doc)
    assert [(m.kind, m.path) for m in found] == [("checksum", ("lenet_state", "layers", 6, "weight"))]
    assert tx.validate(bad, doc, checksums=False) == []
    assert tx.validate(bad, tx.infer_schema(src)) == []  # no checksums in the schema: not detectable


def test_name_selects_one_root_and_nested_groups() -> None:
    path, (group, _, _, _) = require_one_of_table(NESTED_GROUPS)
    top, second = group.split("/")[:2]
    doc = tx.infer_schema(path)
    assert doc.roots[top].kind == "group"
    sub = tx.infer_schema(path, name=group)
    assert list(sub.roots) == [top] and list(sub.roots[top].entries) == [second]  # type: ignore[union-attr]
    assert tx.validate(path, sub, name=group) == []
    assert tx.validate(load(path, group), sub, name=group) == []
    assert tx.validate(load(path), doc) == []  # loaded groups are dicts: accepted for groups

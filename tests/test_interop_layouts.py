"""The skeleton of safetensors / orbax files keeps each struct's on-disk layout (``_layoutjson``).

A struct's declared field types belong to its type: ``Core.Box`` (a closure's reassigned captured
variable) declares ``contents::Any``, and one file (``ODINN-SciML/iceflow_sandbox``,
``benchmark.jld2``) holds Boxes of a ``Float64`` and of an ``Int64``. Without the layout the
JLD2 writer takes the field types from the first Box it meets, and the second does not fit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import treexchange as tx
from treexchange._cli import main
from treexchange._hdf5._model import H5Class, H5Type, Member
from treexchange._interop import _treejson as tj
from treexchange._interop._source import lazy_tree
from treexchange._jld2._layout import FieldLayout, StructLayout
from treexchange._juliatype import JuliaType

pytest.importorskip("safetensors")
from treexchange._interop._safetensors import save_safetensors

_REF = H5Type(H5Class.REFERENCE, 1, 0, 8)
_CONTENTS = Member("contents", 0, _REF)
_BOX = StructLayout(
    JuliaType("Core.Box"),
    H5Type(H5Class.COMPOUND, 3, 1, 8, members=(_CONTENTS,)),
    (FieldLayout("contents", "reference", _CONTENTS),),
    field_attrs="field_names",
)


def _boxes_file(path: Path) -> Path:
    """Two Boxes whose contents have different types, written (as JLD2 does) by reference."""
    tree = {
        "dx": tx.JuliaStruct("Core.Box", {"contents": np.float64(0.5)}, layout=_BOX, mutable=True),
        "nx": tx.JuliaStruct("Core.Box", {"contents": np.int64(124)}, layout=_BOX, mutable=True),
    }
    tx.save(path, tree)
    return path


def test_boxes_of_different_contents_go_through_safetensors_and_back(tmp_path: Path) -> None:
    src = _boxes_file(tmp_path / "boxes.jld2")
    st, out = tmp_path / "boxes.safetensors", tmp_path / "back.jld2"
    save_safetensors(st, lazy_tree(src))
    assert main(["convert", str(st), str(out)]) == 0
    back = tx.load(out)
    assert tx.values_equal(back, tx.load(src))
    assert isinstance(back["nx"]["contents"], np.int64) and isinstance(back["dx"]["contents"], np.float64)


def test_the_layout_is_kept_once_and_read_back_equal(tmp_path: Path) -> None:
    read = tx.load(_boxes_file(tmp_path / "boxes.jld2"))  # the layout as the reader gives it
    layout = read["nx"].layout
    assert isinstance(layout, StructLayout)
    node = tj.encode({"a": read["nx"], "b": [read["dx"], read["nx"]]}, lambda a, p: {})
    assert len(node["L"]) == 1  # three structs, one layout
    value = tj.decode(node, lambda n, p: None)
    assert value["a"].layout == layout and value["b"][0].layout == layout


def test_a_mutable_struct_stays_mutable() -> None:
    node = tj.encode([tx.JuliaStruct("Main.M", {"x": 1}, mutable=True), tx.JuliaStruct("Main.I", {})], print)
    back = tj.decode(node, print)
    assert back[0].mutable and not back[1].mutable


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda e: e.update(h5="ff"), "truncated|datatype class"),
        (lambda e: e.update(h5=e["h5"] + "00"), "bytes after"),
        (lambda e: e["f"][0].__setitem__(1, "sideways"), "stored as"),
        (lambda e: e["f"][0].__setitem__(2, "nothere"), "names no member"),
        (lambda e: e.update(fa="all"), "field attributes"),
        (lambda e: e.pop("jt"), "bad struct layout"),
    ],
)
def test_a_lying_layout_entry_is_a_format_error(change: Any, message: str) -> None:
    node = tj.encode(tx.JuliaStruct("Core.Box", {"contents": np.int64(1)}, layout=_BOX), lambda a, p: {})
    change(node["L"][0])
    with pytest.raises(tx.FormatError, match=message):
        tj.decode(node, lambda n, p: None)


@pytest.mark.parametrize("index", [1, -1, "0", True])
def test_a_layout_index_outside_the_table_is_a_format_error(index: Any) -> None:
    node = tj.encode(tx.JuliaStruct("Core.Box", {"contents": np.int64(1)}, layout=_BOX), lambda a, p: {})
    node["lay"] = index
    with pytest.raises(tx.FormatError, match="not in the table"):
        tj.decode(node, lambda n, p: None)


def test_a_layout_without_a_table_is_a_format_error() -> None:
    node = tj.encode(tx.JuliaStruct("Core.Box", {"contents": np.int64(1)}, layout=_BOX), lambda a, p: {})
    del node["L"]
    with pytest.raises(tx.FormatError, match="without a layout table"):
        tj.decode(node, lambda n, p: None)

"""Writing ``treexchange.UNDEF`` (Julia's ``#undef``): a NULL reference wherever JLD2 stores a
reference, 16 zero bytes where it stores a String/Symbol heap reference, and ConversionError (with
the tree path) where Julia has no undefined form. h5py is the independent reader of the bytes."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import treexchange
from treexchange import UNDEF, ConversionError, JuliaArray, JuliaStruct, JuliaType, NamedTuple, Symbol

ANY = JuliaType.parse("Core.Any")


def _save(tmp_path: Path, name: str = "t.jld2", **values: Any) -> Path:
    path = tmp_path / name
    treexchange.save(path, **values)
    return path


def _reencode(tmp_path: Path, path: Path) -> bytes:
    """The file written again from what ``load`` read from it."""
    return _save(tmp_path, "again.jld2", **treexchange.load(path)).read_bytes()


def _data_bytes(path: Path, name: str, n: int) -> bytes:
    with h5py.File(path, "r") as f:
        offset = f[name].id.get_offset()
    assert offset is not None  # contiguous storage
    return path.read_bytes()[offset : offset + n]


def test_vector_any_element_is_a_null_reference(tmp_path: Path) -> None:
    path = _save(tmp_path, v=[1.0, UNDEF, "a"])
    with h5py.File(path, "r") as f:
        refs = f["v"][()]
        assert [bool(r) for r in refs] == [True, False, True]
        assert f[refs[0]][()] == 1.0
    assert _data_bytes(path, "v", 24)[8:16] == bytes(8)
    back = treexchange.load(path, "v")
    assert back[1] is UNDEF and back[0] == 1.0 and back[2] == "a"
    assert _reencode(tmp_path, path) == path.read_bytes()


def test_matrix_of_any_keeps_unassigned_elements_in_place(tmp_path: Path) -> None:
    data = np.empty((2, 3), dtype=object)
    data[:] = [[1, UNDEF, "x"], [UNDEF, Symbol("s"), UNDEF]]
    path = _save(tmp_path, m=JuliaArray(ANY, data))
    with h5py.File(path, "r") as f:
        # libhdf5 sees the reversed dims; column-major element k is at [k % 2, k // 2] in Julia.
        refs = f["m"][()]
        assert refs.shape == (3, 2)
        assert [[bool(r) for r in row] for row in refs] == [[True, False], [False, True], [True, False]]
    back = treexchange.load(path, "m")
    assert back.shape == (2, 3)
    assert [x is UNDEF for x in back] == [False, True, True, False, False, True]  # column-major
    assert _reencode(tmp_path, path) == path.read_bytes()


def test_struct_made_in_python_declares_an_undef_field_any(tmp_path: Path) -> None:
    node = JuliaStruct("Main.Node", {"value": 1.5, "next": UNDEF})
    path = _save(tmp_path, n=node)
    back = treexchange.load(path, "n")
    assert back.fields["next"] is UNDEF and back.fields["value"] == 1.5
    assert back.type == node.type
    assert _reencode(tmp_path, path) == path.read_bytes()
    # The reference member is a NULL reference in the compound libhdf5 sees.
    with h5py.File(path, "r") as f:
        row = f["n"][()]
        assert row.dtype.names == ("value", "next") and not bool(row["next"])


def test_struct_read_from_a_file_reuses_its_layout_for_undef_fields(tmp_path: Path) -> None:
    first = _save(tmp_path, "first.jld2", n=JuliaStruct("Main.P", {"x": 2.0, "w": [1.0], "name": "p"}))
    read = treexchange.load(first, "n")
    layout = read.layout
    assert [(f.name, f.storage) for f in layout.fields] == [
        ("x", "inline"),
        ("w", "reference"),
        ("name", "inline"),
    ]
    undef = JuliaStruct(read.type, {"x": 2.0, "w": UNDEF, "name": UNDEF}, layout=layout)
    path = _save(tmp_path, n=undef)
    back = treexchange.load(path, "n")
    assert back.fields["w"] is UNDEF and back.fields["x"] == 2.0
    with h5py.File(path, "r") as f:
        row = f["n"][()]
        assert not bool(row["w"])
    # The whole compact record is x = 2.0 then zeros: a NULL reference and an all-zero String heap
    # reference (JLD2 reads that as #undef; an empty String has a heap object of its own).
    with h5py.File(path, "r") as f:
        stored = f["n"].id.get_type()  # the file's compound (h5py's memory dtype has pointers)
        members = [(stored.get_member_name(i), stored.get_member_offset(i)) for i in range(3)]
    assert members == [(b"x", 0), (b"w", 8), (b"name", 16)]
    record = struct.pack("<d", 2.0) + bytes(8 + 16)  # x, the reference, the 16-byte vlen
    assert path.read_bytes().count(record) == 1
    assert record not in first.read_bytes()


def test_string_and_symbol_elements_are_zero_heap_references(tmp_path: Path) -> None:
    path = _save(
        tmp_path,
        s=JuliaArray(JuliaType.parse("Core.String"), ["a", UNDEF, ""]),
        y=JuliaArray(JuliaType.parse("Core.Symbol"), [UNDEF, Symbol("q")]),
    )
    s = _data_bytes(path, "s", 48)
    assert s[16:32] == bytes(16)
    assert s[:16] != bytes(16) and s[32:48] != bytes(16)  # "" has a heap object of its own
    assert _data_bytes(path, "y", 32)[:16] == bytes(16)
    with h5py.File(path, "r") as f:
        assert list(f["s"][()]) == [b"a", b"", b""]


@pytest.mark.parametrize(
    ("values", "path"),
    [
        ({"x": UNDEF}, ("x",)),
        ({"t": (1.0, UNDEF)}, ("t", 2)),
        ({"nt": NamedTuple(a=1, b=UNDEF)}, ("nt", "b")),
        ({"d": {"k": UNDEF}}, ("d", "k")),
        ({"v": [NamedTuple(a=UNDEF)]}, ("v", 1, "a")),
        ({"f": JuliaArray(JuliaType.parse("Core.Float64"), [1.0, UNDEF])}, ("f", 2)),
    ],
    ids=["top-level", "tuple", "namedtuple", "dict", "nested-in-vector", "bits-array"],
)
def test_undef_where_julia_has_no_reference_is_refused(
    tmp_path: Path, values: dict[str, Any], path: tuple[Any, ...]
) -> None:
    target = tmp_path / "t.jld2"
    with pytest.raises(ConversionError, match="#undef") as info:
        treexchange.save(target, values)
    assert info.value.path == path
    assert list(tmp_path.iterdir()) == []  # nothing written, no temporary file left


def test_undef_in_an_inline_field_of_a_read_struct_is_refused(tmp_path: Path) -> None:
    first = _save(tmp_path, "first.jld2", n=JuliaStruct("Main.Q", {"x": 2.0, "w": [1.0]}))
    read = treexchange.load(first, "n")
    bad = JuliaStruct(read.type, {"x": UNDEF, "w": [1.0]}, layout=read.layout)
    with pytest.raises(ConversionError, match="stored inline") as info:
        treexchange.save(tmp_path / "t.jld2", n=bad)
    assert info.value.path == ("n", "x")


def test_none_stays_nothing_not_undef(tmp_path: Path) -> None:
    path = _save(tmp_path, v=[None, UNDEF])
    back = treexchange.load(path, "v")
    assert back[0] is None and back[1] is UNDEF
    with h5py.File(path, "r") as f:
        assert [bool(r) for r in f["v"][()]] == [True, False]

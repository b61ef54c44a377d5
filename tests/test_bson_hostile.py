"""Hostile BSON.jl files: every one gets a TreexchangeError (with file offset and tree path where
there is one) in bounded time and memory, never a crash, a hang or a huge allocation (time is
bounded by construction: nesting and chains are cut at a depth, shared values read once)."""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import numpy as np
import pytest
from _bson_fuzz import kitchen_sink

import treexchange as tx
from treexchange import FormatError, LimitError, TreexchangeError, UnsupportedError, WrongFormatError
from treexchange._bson import _writer
from treexchange._bson._writer import array, backref, bson_file, datatype, primitive, tuple_
from treexchange._inspect import json_lines, text_lines
from treexchange._recursion import stack_for_depth

jl_struct = _writer.struct  # (a BSON.jl struct document; the name struct is the stdlib's here)


def _read_all(raw: bytes) -> None:
    with tx.open(raw) as f:
        f.read()
        for _ in json_lines(f):
            pass
        for _ in text_lines(f):
            pass


def test_not_bson_is_the_wrong_format() -> None:
    for raw in (b"hello world", b"\x05\x00\x00\x00\x01", b"\x07\x00\x00\x00\x00\x00", b""):
        with pytest.raises(WrongFormatError):
            tx.load(raw)
    with pytest.raises(FormatError, match="element name runs past") as err:  # BSON by its length, broken
        tx.load(b"\x06\x00\x00\x00\x01\x00")
    # (the HDF5 reader, tried first, refused it: its error is not the BSON error's context)
    assert err.value.__context__ is None and err.value.__cause__ is None


def test_a_file_both_bson_and_hdf5_opens_as_bson_and_a_jld2_path_is_opened_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``open`` tries the JLD2 reader first and asks the BSON rule of the bytes it mapped (a
    path is not opened a second time to be sniffed), yet what a file is told to be is as when
    it was sniffed first: a file that is a BSON document (its length first, a 0 last) and a
    plain HDF5 file at once (the document's one binary holds the HDF5 file, whose userblock
    the document's head sits in) opens as BSON, with or without ``allow_hdf5``."""
    import h5py

    path = tmp_path / "both.bson"
    with h5py.File(path, "w", userblock_size=512) as f:
        f["a"] = np.arange(3)
    raw = bytearray(path.read_bytes() + b"\x00")
    head = struct.pack("<i", len(raw)) + b"\x05x\x00" + struct.pack("<i", len(raw) - 13) + b"\x00"
    raw[: len(head)] = head
    path.write_bytes(bytes(raw))
    with h5py.File(path, "r") as f:  # (libhdf5 reads it as HDF5)
        assert f["a"][()].tolist() == [0, 1, 2]
    for allow in (False, True):
        with tx.open(path, allow_hdf5=allow) as f:
            assert type(f).__name__ == "BsonFile" and list(f) == ["x"]
            assert bytes(f["x"].read()) == bytes(raw[12:-1])  # (after 12 bytes of heads)
    import treexchange._reader as reader_module

    asked: list[object] = []
    real = reader_module.sniff_bson
    monkeypatch.setattr(reader_module, "sniff_bson", lambda source: asked.append(source) or real(source))
    jld2 = tmp_path / "a.jld2"
    tx.save(jld2, a=np.zeros(2))
    with tx.open(jld2) as f:
        assert f["a"].shape == (2,)
    assert len(asked) == 1 and isinstance(asked[0], memoryview)  # the mapped bytes, not the path


def test_every_truncation_is_refused() -> None:
    raw = kitchen_sink()
    for cut in range(0, len(raw), 7):
        with pytest.raises(TreexchangeError):
            tx.load(raw[:cut])
        # the same bytes with the root length made to match: the parser itself must notice
        if cut >= 5:
            fixed = bytearray(raw[:cut])
            struct.pack_into("<i", fixed, 0, cut)
            fixed[-1] = 0
            try:
                _read_all(bytes(fixed))
            except TreexchangeError:
                pass


def test_lengths_out_of_range_name_the_offset() -> None:
    raw = bytearray(bson_file({"a": [1.0, 2.0]}))
    # the array document's length (after type byte 0x04 and the key "a\0" at offset 4)
    struct.pack_into("<i", raw, 7, 10_000)
    with pytest.raises(FormatError, match="length 10000 out of range") as err:
        tx.load(bytes(raw))
    assert err.value.offset == 7 and err.value.path == ("a",)
    raw = bytearray(bson_file({"s": "text"}))
    struct.pack_into("<i", raw, 7, -3)
    with pytest.raises(FormatError, match="string length -3"):
        tx.load(bytes(raw))
    raw = bytearray(bson_file({"b": b"12345678"}))
    struct.pack_into("<i", raw, 7, 2**31 - 1)
    with pytest.raises(FormatError, match="binary length"):
        tx.load(bytes(raw))


def test_deep_nesting_is_a_limit_error_in_bounded_time() -> None:
    depth = 50_000
    inner = struct.pack("<i", 5) + b"\x00"
    for _ in range(depth):  # each level: an array holding the next under the key "0"
        body = b"\x04" + b"0\x00" + inner
        inner = struct.pack("<i", len(body) + 5) + body + b"\x00"
    raw = struct.pack("<i", len(inner) + 8) + b"\x04a\x00" + inner + b"\x00"
    with pytest.raises(LimitError, match="nested deeper") as err:
        tx.load(raw)
    assert err.value.offset is not None and err.value.path[0] == "a"


def test_long_backref_chains_are_a_limit_error() -> None:
    n = 20_000
    refs = [[backref(i + 2)] for i in range(n - 1)] + [[1]]
    raw = bson_file({"x": backref(1)}, refs)
    with pytest.raises(LimitError, match="nested deeper"):
        tx.load(raw)


def test_cycles_bson_jl_never_writes_are_refused() -> None:
    raw = bson_file({"x": backref(1)}, [backref(1)])  # a backref that is itself
    with pytest.raises(TreexchangeError, match="cycle"):
        tx.load(raw)
    # a datatype among its own parameters
    raw = bson_file({"x": jl_struct(backref(1), 1)}, [datatype("Main.T", backref(1))])
    with pytest.raises(UnsupportedError, match="cycle") as err:
        tx.load(raw)
    assert err.value.path[0] == "x"
    # a Tuple holding itself (immutable: Julia builds its elements first, so it cannot)
    raw = bson_file({"x": backref(1)}, [tuple_(1, [backref(1)])])
    with pytest.raises(UnsupportedError, match="cycle") as err:
        tx.load(raw)
    assert err.value.path[:2] == ("x", 2)


def test_a_ring_of_vectors_reads_as_one_cycle_and_a_long_one_is_a_limit_error() -> None:
    """Two ``Vector{Any}`` each holding the other (``a = Any[]; b = Any[a]; push!(a, b)``, both
    saved: two backrefs naming each other) read as the cycle; a ring 20,000 long is cut at the
    depth limit like any nesting, in bounded time."""
    raw = bson_file({"x": backref(1), "y": backref(2)}, [[backref(2)], [backref(1)]])
    out = tx.load(raw)
    assert out["x"][0] is out["y"] and out["y"][0] is out["x"]
    _read_all(raw)
    n = 20_000
    raw = bson_file({"x": backref(1)}, [[backref(i + 2)] for i in range(n - 1)] + [[backref(1)]])
    with pytest.raises(LimitError, match="nested deeper"):
        tx.load(raw)


def test_backref_index_out_of_range() -> None:
    for ref in (0, 3, -1, 2**62):
        with pytest.raises(FormatError, match="backref"):
            tx.load(bson_file({"x": backref(ref)}, [1.0, 2.0]))
    with pytest.raises(FormatError, match="not an integer"):
        tx.load(bson_file({"x": {"tag": "backref", "ref": "1"}}, [1.0]))


def test_huge_claimed_sizes_allocate_nothing() -> None:
    f64 = datatype("Core.Float64")
    cases = [
        {"tag": "array", "type": f64, "size": [2**40, 2**40], "data": b"\x00" * 8},
        {"tag": "array", "type": f64, "size": [2**62, -4], "data": b"\x00" * 8},
        {"tag": "array", "type": datatype("Core.Nothing"), "size": [10**12], "data": b""},
        {"tag": "array", "type": datatype("Core.String"), "size": [10**12], "data": ["a"]},
        {"tag": "array", "type": datatype("Core.Char"), "size": [10**9], "data": b"\x00" * 8},
        {"tag": "array", "type": f64, "size": [1] * 100, "data": b"\x00" * 8},
    ]
    tracemalloc.start()
    try:
        for doc in cases:
            tracemalloc.reset_peak()
            with pytest.raises(TreexchangeError) as err:
                tx.load(bson_file({"a": doc}))
            assert err.value.path[:1] == ("a",)
            assert tracemalloc.get_traced_memory()[1] < 8 << 20
    finally:
        tracemalloc.stop()


def test_array_limits_apply() -> None:
    raw = bson_file({"a": array("Core.Float32", np.zeros(1000, np.float32))})
    with pytest.raises(LimitError, match="max_array_bytes"):
        tx.load(raw, limits=tx.Limits(max_array_bytes=1000))
    assert tx.load(raw)["a"].shape == (1000,)


def test_shared_dag_reads_and_lists_in_linear_time() -> None:
    """Each backref holds two references to the one before: a tree of 2**n leaves, n+1 objects.
    Read and listed in linear time while what it expands to is within ``Limits.max_nodes``; past
    that (2**60 places) a LimitError at once, as every walk of the value (writing it, converting
    it) would expand it (tests/test_shared_expansion.py)."""
    leaf = array("Core.Float32", np.ones(2, np.float32))
    for n, limits in ((60, tx.Limits(max_nodes=2**64)), (16, tx.Limits())):
        refs = [leaf] + [tuple_(backref(i), backref(i)) for i in range(1, n)]
        raw = bson_file({"x": backref(n)}, refs)
        value = tx.load(raw, limits=limits)["x"]
        assert value[0] is value[1]
        with tx.open(raw, limits=limits) as f:  # each shared tuple listed once, then pointed back to
            records = list(json_lines(f))
            assert len(records) < 4 * n
            assert f["x"].julia_type.name == "Core.Tuple"  # its text, 2**60 long, is cut when printed
    _read_all(raw)
    refs = [leaf] + [tuple_(backref(i), backref(i)) for i in range(1, 60)]
    with pytest.raises(LimitError, match="shared many times over"):
        tx.load(bson_file({"x": backref(60)}, refs))


def test_element_types_bson_jl_never_writes() -> None:
    body = b"\x0dcode\x00" + struct.pack("<i", 3) + b"x=\x00"
    raw = struct.pack("<i", len(body) + 5) + body + b"\x00"
    with pytest.raises(UnsupportedError, match="JavaScript"):
        tx.load(raw)
    body = b"\x42k\x00"
    raw = struct.pack("<i", len(body) + 5) + body + b"\x00"
    with pytest.raises(FormatError, match="unknown element type 0x42"):
        tx.load(raw)


def test_malformed_julia_documents() -> None:
    cases = {
        "dict keys and values differ": jl_struct(
            datatype("Base.Dict", datatype("Core.String"), datatype("Core.Int64")), ["a", "b"], [1]
        ),
        "array without data": {"tag": "array", "type": datatype("Core.Float64"), "size": [2]},
        "struct type is a number": jl_struct(3, 1),
        "datatype name not strings": {"tag": "datatype", "name": [1, 2], "params": []},
    }
    for doc in cases.values():
        with pytest.raises(TreexchangeError):
            tx.load(bson_file({"a": doc}))
    body = b"\x08b\x00\x07"  # a boolean byte that is neither 0 nor 1
    raw = struct.pack("<i", len(body) + 5) + body + b"\x00"
    with pytest.raises(FormatError, match="boolean byte 7"):
        tx.load(raw)
    with pytest.raises(FormatError, match="appears twice"):
        tx.load(_duplicate_names())


def _duplicate_names() -> bytes:
    body = b"\x10a\x00" + struct.pack("<i", 1) + b"\x10a\x00" + struct.pack("<i", 2)
    return struct.pack("<i", len(body) + 5) + body + b"\x00"


def test_dict_keys_python_cannot_hash_keep_the_pairs() -> None:
    doc = jl_struct(
        datatype("Base.Dict", datatype("Core.Array", datatype("Core.Float64"), 1), datatype("Core.Int64")),
        [array("Core.Float64", np.zeros(2))],
        [np.int64(1)],
    )
    d = tx.load(bson_file({"d": doc}), "d")
    assert isinstance(d, tx.JuliaStruct) and str(d.type) == "Dict{Array{Float64, 1}, Int64}"
    assert list(d.fields) == ["keys", "vals"] and d["vals"] == [1]


def test_early_bson_jl_forms() -> None:
    """BSON.jl of early 2018: parameters as a SimpleVector, symbols as plain strings, no Main."""
    t = {"tag": "datatype", "name": ["Foo"], "params": {"tag": "svec", "data": [datatype("Core.Float32"), 2]}}
    v = tx.load(bson_file({"x": jl_struct(t, 1.5)}), "x")
    assert str(v.type) == "Foo{Float32, 2}" and v["1"] == 1.5
    # A 32-bit Julia: Int32 sizes and type parameters
    doc = {"tag": "array", "type": datatype("Core.Float64"), "size": [np.int32(2)], "data": np.zeros(2)}
    assert tx.load(bson_file({"a": doc}), "a").shape == (2,)
    v = tx.load(bson_file({"x": jl_struct(datatype("Main.P", np.int32(3)), 1)}), "x")
    assert v.type.params[0] == 3 and v.type.params[0].dtype == np.int64


def test_complex_scalars_and_element_limits() -> None:
    c64 = datatype("Base.Complex", datatype("Core.Float32"))
    f32 = datatype("Core.Float32")
    z = jl_struct(c64, primitive(f32, np.float32(1).tobytes()), primitive(f32, np.float32(-2).tobytes()))
    v = tx.load(bson_file({"z": z}), "z")
    assert v == np.complex64(1 - 2j) and v.dtype == np.complex64  # as JLD2 reads a Complex
    raw = bson_file({"a": list(range(100))})
    with pytest.raises(LimitError, match="max_elements") as err:
        tx.load(raw, limits=tx.Limits(max_elements=50))
    assert err.value.path == ("a",)


def test_deeply_nested_values_list_without_exhausting_the_stack() -> None:
    def nested(n: int) -> bytes:
        x: object = 1.0
        for _ in range(n):
            x = tuple_(x)
        with stack_for_depth(n):  # the test writer recurses per level
            return bson_file({"x": x})

    raw = nested(1000)  # a value 1000 levels deep, its type as deep
    x, depth = tx.load(raw, "x"), 0
    while isinstance(x, tuple):
        x, depth = x[0], depth + 1
    assert depth == 1000 and x == 1.0
    _read_all(raw)
    with pytest.raises(LimitError, match="nested deeper than 1040"):
        tx.load(nested(1041))

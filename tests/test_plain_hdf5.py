"""Plain HDF5 files (``allow_hdf5=True``), read through h5py: Julia shapes and element types,
indexing like JLD2 nodes, limits, and the choice between the JLD2 reader and h5py."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from _jld2_builder import Builder

import treexchange as tx
from treexchange import JuliaArray, LimitError, Limits, NamedTuple, PlainHDF5Error, WrongFormatError
from treexchange._inspect import iter_records


@pytest.fixture
def plain(tmp_path: Path) -> Path:
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["big"] = np.arange(12.0).reshape(3, 4)  # HDF5 (3, 4) = Julia 4×3
        f["words"] = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=h5py.string_dtype())
        f["fixed"] = np.array([[b"a", b"b", b"c"], [b"d", b"e", b"f"]])
        f["recs"] = np.array([(1, 2.5), (3, 4.5)], dtype=[("a", "<i4"), ("b", "<f8")])
        f["rec"] = np.array([(1, 2.5)], dtype=[("a", "<i4"), ("b", "<f8")])[0]
        f["refs"] = np.array([[f["big"].ref, h5py.Reference()]], dtype=h5py.ref_dtype)
        f.attrs["note"] = "hello"
    return path


def test_nd_strings_keep_their_julia_shape(plain: Path) -> None:
    words = tx.load(plain, "words", allow_hdf5=True)
    # HDF5 (2, 3) is Julia 3×2; column-major order is HDF5's storage order.
    assert isinstance(words, JuliaArray) and words.shape == (3, 2) and str(words.eltype) == "String"
    assert words.tolist() == list("abcdef") and words[2, 1] == "f" and words[1, 0] == "b"
    assert tx.load(plain, "fixed", allow_hdf5=True).tolist() == list("abcdef")
    storage = tx.load(plain, "words", allow_hdf5=True, order="storage")
    assert storage.shape == (2, 3) and storage.data[1, 2] == "f"
    with tx.open(plain, allow_hdf5=True) as f:
        node = f["words"]
        assert node.kind == "vector" and node.shape == (3, 2) and len(node) == 6
        assert str(node.julia_type) == "Array{String, 2}"
        assert node[1].read() == "b" and node[1].path == ("words", 2)


def test_partial_indexing_uses_julia_axes(plain: Path) -> None:
    julia = np.arange(12.0).reshape(3, 4).T  # what load() gives: Julia 4×3
    with tx.open(plain, allow_hdf5=True) as f:
        big = f["big"]
        assert big.shape == (4, 3) == tx.load(plain, "big", allow_hdf5=True).shape
        for index in [0, -1, (1,), (slice(None), 2), (Ellipsis, 1), (1, Ellipsis), (slice(1, 3), 0), (2, 1)]:
            np.testing.assert_array_equal(big[index], julia[index], err_msg=str(index))
            assert np.shape(big[index]) == np.shape(julia[index])
        assert big[0].shape == (3,)
        assert type(big[2, 1]) is np.float64 and big[2, 1] == julia[2, 1]
        np.testing.assert_array_equal(big[[0, 3]], julia[[0, 3]])  # fancy: read all, then index
        np.testing.assert_array_equal(big[::-1, 0], julia[::-1, 0])


def test_element_types_are_kept(plain: Path) -> None:
    with tx.open(plain, allow_hdf5=True) as f:
        recs = f["recs"]
        assert str(recs.julia_type) == "Array{NamedTuple{(:a, :b), Tuple{Int32, Float64}}, 1}"
        value = recs.read()
        assert isinstance(value, JuliaArray) and str(value.eltype) == str(recs.julia_type.params[0])
        assert value[1] == NamedTuple(a=np.int32(3), b=np.float64(4.5))
        assert recs[0]["b"].read() == 2.5 and recs[1].path == ("recs", 2)
        rec = f["rec"]
        assert rec.kind == "namedtuple" and rec["a"].read() == 1 and list(rec) == ["a", "b"]
        refs = f["refs"].read()
        assert isinstance(refs, JuliaArray) and refs.shape == (2, 1) and str(refs.eltype) == "Any"
        assert refs[0].shape == (4, 3) and refs[1] is tx.UNDEF  # a NULL reference is #undef
        assert f.attrs == {"note": "hello"}
        assert f.format_version == "" and isinstance(f.producer, str)


def test_array_protocol_and_copies(plain: Path) -> None:
    with tx.open(plain, allow_hdf5=True) as f:
        a, b = np.array(f["big"], copy=True), np.asarray(f["big"])
        assert a.shape == (4, 3) and not np.shares_memory(a, b)
        assert np.asarray(f["big"], dtype=np.float32).dtype == np.float32


def test_limits_are_honoured(plain: Path) -> None:
    small = Limits(max_array_bytes=64, max_elements=4)
    with tx.open(plain, allow_hdf5=True, limits=small) as f:
        with pytest.raises(LimitError, match="max_array_bytes"):
            f["big"].read()  # 96 bytes
        with pytest.raises(LimitError, match="max_elements"):
            f["words"].read()  # 6 strings
        assert f["big"][0, 0] == 0.0  # a small part of a large array stays readable
    with pytest.raises(LimitError):
        tx.load(plain, allow_hdf5=True, limits=small)


def test_reference_cycles_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "cycle.h5"
    with h5py.File(path, "w") as f:
        ds = f.create_dataset("loop", (1,), dtype=h5py.ref_dtype)
        ds[0] = ds.ref
    with pytest.raises(tx.UnsupportedError, match="cycle"):
        tx.load(path, allow_hdf5=True)


def test_plain_hdf5_is_recognised_by_error_class_not_message(tmp_path: Path) -> None:
    # A JLD v1 file whose *name* says "plain HDF5" is still JLD v1: refused, not read by h5py.
    b = Builder("Julia data file (HDF5), version 0.1.3")
    b.link("a", b.int_dataset(3))
    jld1 = tmp_path / "a plain HDF5 copy.jld"
    jld1.write_bytes(b.finish())
    with pytest.raises(WrongFormatError, match=r"JLD \(v1\)") as err:
        tx.open(jld1, allow_hdf5=True)
    assert not isinstance(err.value, PlainHDF5Error)
    plain = tmp_path / "p.h5"
    with h5py.File(plain, "w") as f:
        f["x"] = 1
    with pytest.raises(PlainHDF5Error):
        tx.open(plain)
    with tx.open(plain, allow_hdf5=True) as f:
        assert [r["value"] for r in iter_records(f)] == [1]

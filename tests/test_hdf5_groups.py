"""Superblocks, object headers, groups (compact, symbol-table, dense) and attributes vs h5py."""

from __future__ import annotations

import io
from pathlib import Path

import h5py
import numpy as np
import pytest

from treexchange import WrongFormatError
from treexchange._hdf5 import HDF5File


def _bytes_of(write, **file_kw) -> bytes:  # type: ignore[no-untyped-def]
    bio = io.BytesIO()
    with h5py.File(bio, "w", **file_kw) as f:
        write(f)
    return bio.getvalue()


def _addr(obj: h5py.HLObject) -> int:
    return h5py.h5o.get_info(obj.id).addr  # type: ignore[attr-defined]


# --- superblocks -----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("libver", "userblock", "expected"),
    [("earliest", 0, 0), ("earliest", 512, 0), ("v108", 0, 2), ("latest", 1024, 3), ("latest", 4096, 3)],
)
def test_superblock_versions(libver: str, userblock: int, expected: int) -> None:
    def write(f: h5py.File) -> None:
        f["x"] = np.arange(3)

    raw = bytearray(_bytes_of(write, libver=libver, userblock_size=userblock))
    raw[:11] = b"user block!" if userblock else raw[:11]
    with HDF5File(bytes(raw), verify_checksums=True) as h5:
        assert h5.superblock_version == expected
        assert h5.base == userblock
        assert h5.userblock == bytes(raw[:userblock])
        assert h5.absolute(10) == userblock + 10
        with h5py.File(io.BytesIO(bytes(raw))) as f:
            assert h5.root_address == _addr(f)
            assert h5.root.links() == {"x": _addr(f["x"])}


def test_superblock_v1_from_nondefault_istore_k(tmp_path: Path) -> None:
    fcpl = h5py.h5p.create(h5py.h5p.FILE_CREATE)
    _libhdf5().H5Pset_istore_k(fcpl.id, 64)  # not wrapped by h5py
    fapl = h5py.h5p.create(h5py.h5p.FILE_ACCESS)
    fapl.set_libver_bounds(h5py.h5f.LIBVER_EARLIEST, h5py.h5f.LIBVER_LATEST)
    fid = h5py.h5f.create(str(tmp_path / "v1.h5").encode(), fcpl=fcpl, fapl=fapl)
    with h5py.File(fid) as f:
        f["x"] = np.arange(5, dtype="<i2")
    with HDF5File(tmp_path / "v1.h5") as h5:
        assert h5.superblock_version == 1
        obj = h5.object(h5.root.links()["x"])
        assert bytes(h5.raw_data(obj)) == np.arange(5, dtype="<i2").tobytes()


def _libhdf5():  # type: ignore[no-untyped-def]
    """h5py's own bundled libhdf5, for the few property setters h5py does not wrap."""
    import ctypes
    import glob
    import os

    libs = glob.glob(os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs", "libhdf5-*.so*"))
    if not libs:
        pytest.skip("h5py's bundled libhdf5 not found")
    lib = ctypes.CDLL(libs[0])
    lib.H5Pset_istore_k.argtypes = [ctypes.c_int64, ctypes.c_uint]
    return lib


def test_not_hdf5() -> None:
    with pytest.raises(WrongFormatError, match="not an HDF5 file"):
        HDF5File(b"PK\x03\x04" + bytes(5000))
    with pytest.raises(WrongFormatError):
        HDF5File(b"")


def test_empty_file_on_disk(tmp_path: Path) -> None:
    (tmp_path / "empty.jld2").write_bytes(b"")
    with pytest.raises(WrongFormatError):
        HDF5File(tmp_path / "empty.jld2")


# --- groups ----------------------------------------------------------------------------------------
def _names(n: int) -> list[str]:
    # unsorted insertion order, with non-ASCII characters
    return [f"n{(i * 7919) % 10007:05d}_σ²" for i in range(n)]


@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("track_order", [False, True])
@pytest.mark.parametrize("nlinks", [3, 20, 1500])
def test_group_links_match_h5py(libver: str, track_order: bool, nlinks: int) -> None:
    names = _names(nlinks)

    def write(f: h5py.File) -> None:
        g = f.create_group("g", track_order=track_order)
        for i, name in enumerate(names):
            if i % 3:
                g.create_dataset(name, data=np.int32(i))
            else:
                g.create_group(name)

    raw = _bytes_of(write, libver=libver)
    with HDF5File(raw, verify_checksums=True) as h5, h5py.File(io.BytesIO(raw)) as f:
        g = h5.object(h5.root.links()["g"])
        assert g.kind == "group"
        links = g.links()
        expected = {name: _addr(f["g"][name]) for name in f["g"]}
        assert links == expected
        if track_order:
            # creation order is tracked: both sides list links in insertion order
            assert list(links) == names == list(f["g"])
        elif nlinks > 8:
            # dense name indexes list by name, like h5py
            assert list(links) == list(f["g"])
        # (compact link messages without creation order come in on-disk order, which is what
        # JLD2 relies on; libhdf5 may place them in any chunk, so there is no order to compare)
        for name, addr in links.items():
            assert h5.object(addr).kind == ("group" if names.index(name) % 3 == 0 else "dataset")


@pytest.mark.parametrize("nlinks", [5, 400])
def test_symbol_table_groups(nlinks: int) -> None:
    """ASCII names and the default (earliest) format: old-style groups, listed by name."""
    names = [f"k{(i * 7919) % 10007:05d}" for i in range(nlinks)]

    def write(f: h5py.File) -> None:
        g = f.create_group("g")
        for i, name in enumerate(names):
            g[name] = np.float64(i)

    raw = _bytes_of(write, libver="earliest")
    with HDF5File(raw) as h5, h5py.File(io.BytesIO(raw)) as f:
        g = h5.object(h5.root.links()["g"])
        assert g.version == 1 and any(m.type == 0x11 for m in g.messages)
        links = g.links()
        assert list(links) == sorted(names) == list(f["g"])
        for name, addr in links.items():
            assert addr == _addr(f["g"][name])
            assert np.frombuffer(h5.raw_data(h5.object(addr)), "<f8")[0] == names.index(name)


def test_soft_and_external_links() -> None:
    def write(f: h5py.File) -> None:
        f["a"] = 1
        f["soft"] = h5py.SoftLink("/a")
        f["ext"] = h5py.ExternalLink("other.h5", "/x")

    raw = _bytes_of(write, libver="latest")
    with HDF5File(raw) as h5:
        kinds = {lk.name: (lk.kind, lk.target) for lk in h5.link_messages(h5.root)}
        assert kinds["a"][0] == 0
        assert kinds["soft"] == (1, b"/a")
        assert kinds["ext"][0] == 64 and b"other.h5" in kinds["ext"][1]
        assert list(h5.root.links()) == ["a"]


def test_dense_group_with_indirect_heap_blocks() -> None:
    """Long names fill the fractal heap past its direct rows: nested indirect blocks."""
    names = [f"{i:05d}" + "x" * 250 for i in range(2600)]

    def write(f: h5py.File) -> None:
        g = f.create_group("g")
        for name in names:
            g[name] = f["/"]  # hard links to the root

    raw = _bytes_of(write, libver="latest")
    with HDF5File(raw, verify_checksums=True) as h5:
        links = h5.object(h5.root.links()["g"]).links()
        assert list(links) == sorted(names)
        assert set(links.values()) == {h5.root_address}


def test_object_header_continuations(tmp_path: Path) -> None:
    """Attributes added after creation push messages into continuation chunks (v1 and v2)."""
    for libver in ("earliest", "latest"):
        path = tmp_path / f"{libver}.h5"
        with h5py.File(path, "w", libver=libver) as f:
            d = f.create_dataset("d", data=np.arange(4.0))
            for i in range(6):
                d.attrs[f"a{i}"] = np.arange(i * 50, dtype="<i8")
        with HDF5File(path, verify_checksums=True) as h5, h5py.File(path) as f:
            obj = h5.object(h5.root.links()["d"])
            assert obj.version == (1 if libver == "earliest" else 2)
            assert any(m.type == 0x10 for m in obj.messages), "expected a continuation message"
            assert sorted(obj.attributes) == sorted(f["d"].attrs)
            for name, attr in obj.attributes.items():
                assert np.array_equal(np.frombuffer(attr.data, "<i8"), f["d"].attrs[name])
            assert bytes(h5.raw_data(obj)) == np.arange(4.0).tobytes()


# --- attributes ------------------------------------------------------------------------------------
ATTR_CASES = [
    (libver, track, n, big)
    for libver in ("earliest", "latest")
    for track in (False, True)
    for n, big in ((3, False), (30, False), (30, True))
    # libhdf5 cannot keep a 80 KB attribute in a v1 header's compact storage
    if not (libver == "earliest" and not track and big)
]


@pytest.mark.parametrize(("libver", "track_order", "nattrs", "big"), ATTR_CASES)
def test_attributes_match_h5py(libver: str, track_order: bool, nattrs: int, big: bool) -> None:
    names = [f"a{(i * 31) % 101}_é" for i in range(nattrs)]

    def write(f: h5py.File) -> None:
        g = f.create_group("g", track_order=track_order)
        for i, name in enumerate(names):
            g.attrs[name] = np.arange(i + 1, dtype="<f8")
        if big:
            g.attrs["big"] = np.arange(20_000, dtype=">i4")  # > 64 KiB: a "huge" heap object

    raw = _bytes_of(write, libver=libver)
    with HDF5File(raw, verify_checksums=True) as h5, h5py.File(io.BytesIO(raw)) as f:
        attrs = h5.object(h5.root.links()["g"]).attributes
        hattrs = f["g"].attrs
        assert sorted(attrs) == sorted(hattrs)
        if track_order:
            assert list(attrs) == list(hattrs)
        for name, attr in attrs.items():
            dtype = attr.type.numpy_dtype()
            assert dtype is not None
            np.testing.assert_array_equal(
                np.frombuffer(attr.data, dtype).reshape(attr.space.dims), hattrs[name]
            )
            assert bytes(h5.buffer[attr.data_offset : attr.data_offset + len(attr.data)]) == bytes(attr.data)


def test_scalar_string_and_vlen_attributes() -> None:
    def write(f: h5py.File) -> None:
        f.attrs["fixed"] = np.bytes_(b"hello")
        f.attrs["vlen"] = "grüße"
        f.attrs["vlen_list"] = ["a", "bb", "ccc", ""]
        f.attrs["empty"] = h5py.Empty("f4")

    raw = _bytes_of(write)
    with HDF5File(raw) as h5:
        attrs = h5.root.attributes
        assert bytes(attrs["fixed"].data) == b"hello" and attrs["fixed"].type.size == 5
        vlen = attrs["vlen"]
        assert vlen.type.is_vlen_string and vlen.type.charset == 1
        assert bytes(h5.read_vlen(vlen.data)).decode() == "grüße"
        lst = attrs["vlen_list"]
        got = [bytes(h5.read_vlen(lst.data[i * 16 : (i + 1) * 16])) for i in range(4)]
        assert got == [b"a", b"bb", b"ccc", b""]
        assert attrs["empty"].space.kind == "null" and len(attrs["empty"].data) == 0

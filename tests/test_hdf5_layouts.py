"""Raw data access for every storage layout, chunk index and filter, checked against h5py.

Files come from h5py (an independent writer) in ``tmp_path``; JLD2-style single-chunk datasets,
which HDF5 2.x refuses to read, and codecs h5py cannot write without plugins (zstd, lz4, bzip2)
come from a small raw-byte builder below, validated by letting h5py read its standard variant.
"""

from __future__ import annotations

import bz2
import struct
import zlib
from pathlib import Path

import h5py
import numpy as np
import pytest

from treexchange import FormatError, LimitError, Limits
from treexchange._hdf5 import HDF5File
from treexchange._hdf5._filters import fletcher32, unshuffle
from treexchange._hdf5._lookup3 import lookup3


def _data(shape: tuple[int, ...], dtype: str = "<f4") -> np.ndarray:
    n = int(np.prod(shape))
    return ((np.arange(n) * 7919) % 1009).astype(dtype).reshape(shape)


def _roundtrip(path: Path, name: str = "d", **verify: bool) -> tuple[HDF5File, bytes]:
    h5 = HDF5File(path, verify_checksums=verify.get("verify", True))
    obj = h5.object(h5.root.links()[name])
    return h5, bytes(h5.raw_data(obj))


# --- compact / contiguous --------------------------------------------------------------------------
def test_contiguous_is_zero_copy(tmp_path: Path) -> None:
    data = _data((10, 7), ">i8")  # big-endian stays big-endian in storage
    with h5py.File(tmp_path / "c.h5", "w") as f:
        f["d"] = data
    with HDF5File(tmp_path / "c.h5") as h5:
        obj = h5.object(h5.root.links()["d"])
        assert obj.layout is not None and obj.layout.kind == "contiguous"
        assert obj.datatype is not None and obj.datatype.numpy_dtype() == np.dtype(">i8")
        view = h5.raw_data(obj)
        assert isinstance(view, memoryview) and view.obj is h5.buffer.obj
        assert bytes(view) == data.tobytes()
        off, n = h5.raw_location(obj)  # type: ignore[misc]
        assert n == data.nbytes and bytes(h5.buffer[off : off + n]) == data.tobytes()
        del view


def test_compact_layout(tmp_path: Path) -> None:
    data = _data((3, 4), "<u2")
    with h5py.File(tmp_path / "k.h5", "w") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(data.shape)
        h5py.h5d.create(f.id, b"d", h5py.h5t.STD_U16LE, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, data
        )
    h5, raw = _roundtrip(tmp_path / "k.h5")
    obj = h5.object(h5.root.links()["d"])
    assert obj.layout is not None and obj.layout.kind == "compact"
    assert obj.layout.data_offset is not None and obj.offset < obj.layout.data_offset < obj.offset + 200
    assert raw == data.tobytes()
    assert h5.raw_location(obj) == (obj.layout.data_offset, data.nbytes)


def test_external_storage_is_unsupported(tmp_path: Path) -> None:
    from treexchange import UnsupportedError

    (tmp_path / "raw.bin").write_bytes(bytes(32))
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("d", shape=(4,), dtype="<f8", external=[(str(tmp_path / "raw.bin"), 0, 32)])
    with HDF5File(tmp_path / "x.h5") as h5, pytest.raises(UnsupportedError, match="external"):
        h5.raw_data(h5.object(h5.root.links()["d"]))


def test_null_and_unwritten_datasets(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "n.h5", "w") as f:
        f.create_dataset("null", data=h5py.Empty("f4"))
        f.create_dataset("unwritten", shape=(4,), dtype="f8")  # contiguous, never allocated
        f.create_dataset("scalar", data=np.float32(2.5))
    with HDF5File(tmp_path / "n.h5") as h5:
        links = h5.root.links()
        null = h5.object(links["null"])
        assert null.dataspace is not None and null.dataspace.kind == "null"
        assert h5.raw_data(null) == b"" and h5.raw_location(null) is None
        unwritten = h5.object(links["unwritten"])
        assert unwritten.layout is not None and unwritten.layout.data_offset is None
        assert h5.raw_data(unwritten) == b""
        scalar = h5.object(links["scalar"])
        assert scalar.dataspace is not None and scalar.dataspace.kind == "scalar"
        assert np.frombuffer(h5.raw_data(scalar), "<f4").tolist() == [2.5]


# --- chunked: every index type, filters, edge chunks ------------------------------------------------
FILTERS = {"compression": "gzip", "shuffle": True, "fletcher32": True}

CHUNKED = {
    # name: (libver, create_dataset kwargs, expected (layout version, index type))
    "btree_v1": ("earliest", {"shape": (100, 37), "chunks": (16, 10), **FILTERS}, (3, None)),
    "btree_v1_plain": ("earliest", {"shape": (61, 7), "chunks": (8, 3)}, (3, None)),
    "single": ("latest", {"shape": (100, 37), "chunks": (100, 37), "compression": "gzip"}, (5, 1)),
    "single_plain": ("latest", {"shape": (30, 7), "chunks": (30, 7)}, (4, 1)),
    "fixed": ("latest", {"shape": (100, 37), "chunks": (16, 10), **FILTERS}, (5, 3)),
    "fixed_paged": ("latest", {"shape": (1000, 370), "chunks": (16, 10), "compression": "gzip"}, (5, 3)),
    "fixed_paged_plain": ("latest", {"shape": (1000, 370), "chunks": (16, 10)}, (4, 3)),
    "earray": ("latest", {"shape": (100, 37), "chunks": (16, 10), "maxshape": (None, 37), **FILTERS}, (5, 4)),
    "earray_sblocks": ("latest", {"shape": (5000, 37), "chunks": (4, 10), "maxshape": (None, 37)}, (4, 4)),
    "earray_dim1": ("latest", {"shape": (37, 500), "chunks": (10, 4), "maxshape": (37, None)}, (4, 4)),
    "btree_v2": (
        "latest",
        {"shape": (100, 37), "chunks": (16, 10), "maxshape": (None, None), **FILTERS},
        (5, 5),
    ),
    "btree_v2_deep": ("latest", {"shape": (1000, 370), "chunks": (8, 10), "maxshape": (None, None)}, (4, 5)),
    "rank3": ("earliest", {"shape": (5, 6, 7), "chunks": (2, 4, 3), "compression": "gzip"}, (3, None)),
}


@pytest.mark.parametrize("name", sorted(CHUNKED))
def test_chunked_matches_h5py(tmp_path: Path, name: str) -> None:
    libver, kwargs, (version, index) = CHUNKED[name]
    kwargs = dict(kwargs)
    data = _data(kwargs.pop("shape"), ">f8" if "plain" in name else "<f4")
    path = tmp_path / f"{name}.h5"
    with h5py.File(path, "w", libver=libver) as f:
        f.create_dataset("d", data=data, **kwargs)
    h5, raw = _roundtrip(path)
    obj = h5.object(h5.root.links()["d"])
    assert obj.layout is not None and (obj.layout.version, obj.layout.index_type) == (version, index)
    assert obj.layout.chunk_dims[-1] == data.dtype.itemsize
    assert raw == data.tobytes()
    with h5py.File(path) as f:
        assert raw == f["d"][()].tobytes()
    whole_chunk = tuple(obj.layout.chunk_dims[:-1]) == data.shape
    if whole_chunk and not obj.filters:
        off, n = h5.raw_location(obj)  # type: ignore[misc]
        assert bytes(h5.buffer[off : off + n]) == data.tobytes()
    else:
        assert h5.raw_location(obj) is None
    h5.close()


def test_implicit_index(tmp_path: Path) -> None:
    """Index type 2: early allocation, fixed size, no filters (only reachable through the C API)."""
    data = _data((100, 37), "<i4")
    with h5py.File(tmp_path / "i.h5", "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((16, 10))
        dcpl.set_alloc_time(h5py.h5d.ALLOC_TIME_EARLY)
        space = h5py.h5s.create_simple(data.shape)
        h5py.h5d.create(f.id, b"d", h5py.h5t.STD_I32LE, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, data
        )
    h5, raw = _roundtrip(tmp_path / "i.h5")
    assert h5.object(h5.root.links()["d"]).layout.index_type == 2  # type: ignore[union-attr]
    assert raw == data.tobytes()


def test_extensible_array_paged_data_blocks(tmp_path: Path) -> None:
    """More than 131060 chunks: the extensible array's data blocks grow past one 1024-entry page."""
    data = (np.arange(140_000) % 251).astype("u1")
    with h5py.File(tmp_path / "p.h5", "w", libver="latest") as f:
        f.create_dataset("d", data=data, chunks=(1,), maxshape=(None,))
    _h5, raw = _roundtrip(tmp_path / "p.h5")
    assert raw == data.tobytes()


def test_unwritten_chunks_read_as_fill_value(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "f.h5", "w", libver="latest") as f:
        d = f.create_dataset("d", shape=(50, 20), chunks=(8, 8), dtype="<i2", fillvalue=-7)
        d[10:20, 3:5] = 42
        e = f.create_dataset("e", shape=(50,), chunks=(8,), dtype="<f4", maxshape=(None,))
        e[40:45] = 1.5
    with HDF5File(tmp_path / "f.h5") as h5, h5py.File(tmp_path / "f.h5") as f:
        for name in ("d", "e"):
            obj = h5.object(h5.root.links()[name])
            assert bytes(h5.raw_data(obj)) == f[name][()].tobytes()
        assert h5.object(h5.root.links()["d"]).fill_value == struct.pack("<h", -7)


def test_shrunk_dataset_ignores_chunks_beyond_extent(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "s.h5", "w", libver="latest") as f:
        d = f.create_dataset("d", data=_data((40, 9)), chunks=(8, 4), maxshape=(None, None))
        d.resize((21, 5))
    with HDF5File(tmp_path / "s.h5") as h5, h5py.File(tmp_path / "s.h5") as f:
        obj = h5.object(h5.root.links()["d"])
        assert bytes(h5.raw_data(obj)) == f["d"][()].tobytes()


def _set_chunk_opts(dcpl: h5py.h5p.PropDCID, opts: int) -> None:
    """H5Pset_chunk_opts is not wrapped by h5py: call it in h5py's own libhdf5 through ctypes."""
    import ctypes
    import glob
    import os

    libs = glob.glob(os.path.join(os.path.dirname(h5py.__file__), os.pardir, "h5py.libs", "libhdf5-*.so*"))
    if not libs:
        pytest.skip("h5py's bundled libhdf5 not found (needed for H5Pset_chunk_opts)")
    lib = ctypes.CDLL(libs[0])
    lib.H5Pset_chunk_opts.argtypes = [ctypes.c_int64, ctypes.c_uint]
    if lib.H5Pset_chunk_opts(dcpl.id, opts) < 0:
        pytest.skip("H5Pset_chunk_opts failed")


def test_partial_edge_chunks_left_unfiltered(tmp_path: Path) -> None:
    """Layout flag 1 (H5Pset_chunk_opts): edge chunks are stored without filters."""
    data = _data((21, 13), "<i4")
    with h5py.File(tmp_path / "e.h5", "w", libver="latest") as f:
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_chunk((8, 8))
        dcpl.set_deflate(6)
        _set_chunk_opts(dcpl, 0x0002)  # H5D_CHUNK_DONT_FILTER_PARTIAL_CHUNKS
        space = h5py.h5s.create_simple(data.shape)
        h5py.h5d.create(f.id, b"d", h5py.h5t.STD_I32LE, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, data
        )
    h5, raw = _roundtrip(tmp_path / "e.h5")
    assert h5.object(h5.root.links()["d"]).layout.flags & 1  # type: ignore[union-attr]
    assert raw == data.tobytes()


def test_fletcher32_mismatch_is_detected(tmp_path: Path) -> None:
    data = _data((64,), "<f8")
    with h5py.File(tmp_path / "x.h5", "w") as f:
        f.create_dataset("d", data=data, chunks=(64,), fletcher32=True)
    raw = bytearray((tmp_path / "x.h5").read_bytes())
    at = raw.find(data.tobytes())
    assert at > 0
    raw[at + 3] ^= 0x40
    with HDF5File(bytes(raw)) as h5:
        with pytest.raises(FormatError, match="Fletcher32") as err:
            h5.raw_data(h5.object(h5.root.links()["d"]))
        assert err.value.offset == at


def test_fletcher32_matches_hdf5() -> None:
    """Our Fletcher-32 equals the checksum libhdf5 appended to real chunks (odd length too)."""
    for n in (1, 2, 3, 719, 720, 721, 100_001):
        buf = bytes((np.arange(n) * 31 % 256).astype("u1"))
        ref = _h5py_fletcher(buf)
        assert fletcher32(buf) == ref, n
    assert fletcher32(b"") == 0 and fletcher32(bytes(10)) == 0


def _h5py_fletcher(buf: bytes) -> int:
    """The checksum libhdf5 appends to a one-chunk dataset holding ``buf``."""
    import io

    from treexchange._hdf5._chunks import iter_chunks

    bio = io.BytesIO()
    with h5py.File(bio, "w") as f:
        f.create_dataset("d", data=np.frombuffer(buf, "u1"), chunks=(len(buf),), fletcher32=True)
    h5 = HDF5File(bio.getvalue())
    (rec,) = iter_chunks(h5, h5.object(h5.root.links()["d"]))
    assert rec.size == len(buf) + 4 and bytes(h5.buffer[rec.offset : rec.offset + len(buf)]) == buf
    return int.from_bytes(h5.buffer[rec.offset + len(buf) : rec.offset + rec.size], "little")


def test_unshuffle_inverts_shuffle() -> None:
    arr = np.arange(1001, dtype="<u4")
    shuffled = arr.view("u1").reshape(-1, 4).T.tobytes() + b"\x01\x02\x03"
    assert unshuffle(shuffled, 4) == arr.tobytes() + b"\x01\x02\x03"


def test_decompression_is_bounded(tmp_path: Path) -> None:
    """A chunk whose stream inflates far past the chunk size is an error, never a big allocation."""
    import tracemalloc

    bomb = zlib.compress(bytes(1 << 26), 9)  # 64 MiB of zeros in ~65 KiB
    path = _build(tmp_path / "bomb.h5", np.zeros(4096, "u1"), filters=[(1, "", (6,))], chunk=bomb)
    with HDF5File(path) as h5:
        obj = h5.object(h5.root.links()["d"])
        tracemalloc.start()
        try:
            with pytest.raises(FormatError, match="deflate"):
                h5.raw_data(obj)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 1 << 20


def test_max_array_bytes_limit(tmp_path: Path) -> None:
    with h5py.File(tmp_path / "l.h5", "w") as f:
        f.create_dataset("d", data=_data((100, 10)), chunks=(10, 10), compression="gzip")
    with HDF5File(tmp_path / "l.h5", limits=Limits(max_array_bytes=1000)) as h5:
        with pytest.raises(LimitError):
            h5.raw_data(h5.object(h5.root.links()["d"]))


# --- JLD2-style single chunk and other codecs, built byte by byte -----------------------------------
def _ohdr(messages: list[tuple[int, int, bytes]]) -> bytes:
    body = b"".join(struct.pack("<BHB", t, len(b), fl) + b for t, fl, b in messages)
    head = b"OHDR" + bytes([2, 0x02]) + struct.pack("<I", len(body))
    raw = head + body
    return raw + struct.pack("<I", lookup3(raw))


def _build(
    path: Path,
    data: np.ndarray,
    *,
    filters: list[tuple[int, str, tuple[int, ...]]],
    chunk: bytes,
    width: int = 8,
    userblock: bool = True,
) -> Path:
    """A minimal HDF5 file the way JLD2 writes a compressed array: superblock v2 (base 512 after a
    JLD2 user block), a root group with one link ``d``, and a dataset whose layout is v4 chunked
    with a single-chunk index and dimension sizes ``width`` bytes wide (JLD2 writes 8)."""
    base = 512 if userblock else 0
    assert data.dtype == np.dtype("<f4") or data.dtype == np.dtype("u1")
    if data.dtype == np.dtype("<f4"):
        dtype = bytes([0x11, 0x20, 0x1F, 0x00]) + struct.pack("<IHHBBBBI", 4, 0, 32, 23, 8, 0, 23, 127)
    else:
        dtype = bytes([0x10, 0x00, 0x00, 0x00]) + struct.pack("<IHH", 1, 0, 8)
    rank = data.ndim
    space = bytes([2, rank, 0, 1]) + b"".join(struct.pack("<Q", d) for d in data.shape)
    pipeline = bytes([2, len(filters)])
    for fid, name, values in filters:
        pipeline += struct.pack("<H", fid)
        enc = name.encode() + b"\x00" if name else b""
        if fid >= 256:
            pipeline += struct.pack("<H", len(enc))
        pipeline += struct.pack("<HH", 0, len(values)) + enc + b"".join(struct.pack("<I", v) for v in values)
    dims = [*list(data.shape), data.dtype.itemsize]
    sb_size = 48
    root_at = sb_size  # relative
    link = bytes([1, 0x10, 1, 1]) + b"d"
    root_len = len(_ohdr([(2, 0, bytes(18)), (10, 0, b"\x00\x00"), (6, 0, link + bytes(8))]))
    dset_at = root_at + root_len

    def layout(chunk_at: int) -> bytes:
        out = bytes([4, 2, 0x02, rank + 1, width])
        out += b"".join(d.to_bytes(width, "little") for d in dims)
        out += bytes([1]) + struct.pack("<QI", len(chunk), 0) + struct.pack("<Q", chunk_at)
        return out

    undef = b"\xff" * 8
    msgs = [(5, 1, b"\x03\x09"), (1, 0, space), (3, 1, dtype), (11, 0, pipeline)]
    dset_len = len(_ohdr([*msgs, (8, 0, layout(0))]))
    chunk_at = dset_at + dset_len
    eof = chunk_at + len(chunk)
    root = _ohdr(
        [(2, 0, b"\x00\x00" + undef + undef), (10, 0, b"\x00\x00"), (6, 0, link + struct.pack("<Q", dset_at))]
    )
    dset = _ohdr([*msgs, (8, 0, layout(chunk_at))])
    sb = b"\x89HDF\r\n\x1a\n" + bytes([2, 8, 8, 0]) + struct.pack("<Q", base) + undef
    sb += struct.pack("<QQ", base + eof, root_at)  # JLD2 (and libhdf5 in practice) use the file length
    sb += struct.pack("<I", lookup3(sb))
    head = b"HDF5-based Julia Data Format, version 0.2.0\x00".ljust(512, b"\x00") if userblock else b""
    path.write_bytes(head + sb + root + dset + chunk)
    return path


def _minimal_width(dims: list[int]) -> int:
    return max((max(dims).bit_length() + 7) // 8, 1)


def test_builder_is_valid_hdf5(tmp_path: Path) -> None:
    """With the minimal dimension width, h5py reads what the builder writes: the builder is sound."""
    data = _data((5, 10))
    chunk = zlib.compress(data.tobytes(), 5)
    width = _minimal_width([*data.shape, 4])
    path = _build(tmp_path / "ok.h5", data, filters=[(1, "", (5,))], chunk=chunk, width=width)
    with h5py.File(path) as f:
        assert f.userblock_size == 512
        np.testing.assert_array_equal(f["d"][()], data)
    h5, raw = _roundtrip(path)
    assert raw == data.tobytes() and h5.base == 512


def test_jld2_single_chunk_with_8_byte_dims(tmp_path: Path) -> None:
    """JLD2 (<= 0.6.5) writes chunk dimension sizes 8 bytes wide; HDF5 2.x refuses, we read it."""
    data = _data((5, 10))  # Julia 10x5 Matrix{Float32}
    chunk = zlib.compress(data.tobytes(), 5)
    path = _build(tmp_path / "jld2.h5", data, filters=[(1, "", (5,))], chunk=chunk, width=8)
    with h5py.File(path) as f, pytest.raises(Exception, match="encoding length"):
        f["d"][()]
    h5, raw = _roundtrip(path)
    obj = h5.object(h5.root.links()["d"])
    assert obj.layout is not None and obj.layout.chunk_dims == (5, 10, 4)
    assert obj.layout.index_type == 1 and obj.layout.single_chunk_filtered_size == len(chunk)
    assert [f.id for f in obj.filters] == [1] and obj.filters[0].name == "deflate"
    assert raw == data.tobytes()
    assert h5.raw_location(obj) is None  # filtered: not zero-copy


def _lz4_hdf5(raw: bytes, block: int = 1000) -> bytes:
    import lz4.block

    out = struct.pack(">QI", len(raw), block)
    for i in range(0, len(raw), block):
        piece = raw[i : i + block]
        comp = lz4.block.compress(piece, store_size=False)
        if len(comp) >= len(piece):
            comp = piece  # stored raw, as the HDF5 LZ4 filter does when compression does not help
        out += struct.pack(">I", len(comp)) + comp
    return out


def _zstd(raw: bytes) -> bytes:
    import zstandard

    return zstandard.ZstdCompressor(level=3).compress(raw)


def _lz4_frame(raw: bytes) -> bytes:
    import lz4.frame

    return lz4.frame.compress(raw)


CODECS = {
    "zstd": (32015, "ZSTD", (3,), _zstd),
    "lz4_hdf5": (32004, "LZ4H5", (), _lz4_hdf5),
    "lz4_frame_old_jld2": (32004, "LZ4H5", (), _lz4_frame),
    "bzip2": (307, "BZIP2", (9,), lambda raw: bz2.compress(raw, 9)),
    "deflate": (1, "", (5,), lambda raw: zlib.compress(raw, 5)),
}


@pytest.mark.parametrize("codec", sorted(CODECS))
@pytest.mark.parametrize("shuffle", [False, True])
def test_jld2_codecs(tmp_path: Path, codec: str, shuffle: bool) -> None:
    fid, name, values, compress = CODECS[codec]
    data = _data((7, 300))
    raw = data.tobytes()
    filters = [(fid, name, values)]
    if shuffle:
        raw = data.view("u1").reshape(-1, 4).T.tobytes()
        filters.insert(0, (2, "", (4,)))
    path = _build(tmp_path / f"{codec}.h5", data, filters=filters, chunk=compress(raw))
    h5, got = _roundtrip(path)
    assert got == data.tobytes()
    ids = [f.id for f in h5.object(h5.root.links()["d"]).filters]
    assert ids == ([2, fid] if shuffle else [fid])


def test_unknown_filter_is_unsupported(tmp_path: Path) -> None:
    from treexchange import UnsupportedError

    data = _data((3,))
    path = _build(tmp_path / "u.h5", data, filters=[(32001, "blosc", ())], chunk=data.tobytes())
    with HDF5File(path) as h5, pytest.raises(UnsupportedError, match="32001"):
        h5.raw_data(h5.object(h5.root.links()["d"]))


def test_filter_mask_skips_filters(tmp_path: Path) -> None:
    """A chunk whose filter mask has bit 0 set was stored without the first filter."""
    data = _data((4, 4))
    path = _build(tmp_path / "m.h5", data, filters=[(1, "", (5,))], chunk=data.tobytes())
    raw = bytearray(path.read_bytes())
    # patch the single-chunk filter mask (u32 after the u64 filtered size) to 1
    at = raw.find(struct.pack("<QI", data.nbytes, 0))
    assert at > 0
    raw[at + 8 : at + 12] = struct.pack("<I", 1)
    h5 = HDF5File(bytes(raw))
    assert bytes(h5.raw_data(h5.object(h5.root.links()["d"]))) == data.tobytes()

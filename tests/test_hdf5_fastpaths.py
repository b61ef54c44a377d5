"""The fast paths of object-header decoding give the same answers as the careful ones.

Object headers are the hot path of opening a file of many arrays, so they are decoded with one
``struct`` call per message header, pure messages (datatype, dataspace, filter pipeline, shared
address) are decoded once per distinct body, and compact / contiguous layouts skip the generic
parser. These tests hold them to h5py (an independent reader) and to the generic decoders, and
check that the shortcuts did not drop a bounds check.
"""

from __future__ import annotations

import gc
import io
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest

from treexchange import FormatError, LimitError, Limits
from treexchange._hdf5 import HDF5File, Layout, Message, _messages as m
from treexchange._hdf5._cursor import Cursor
from treexchange._hdf5._datatype import _KNOWN_BYTES
from treexchange._hdf5._file import _MEMO_BODY_BYTES


def _h5(build: object, **kw: object) -> bytes:
    bio = io.BytesIO()
    with h5py.File(bio, "w", **kw) as f:  # type: ignore[arg-type]
        build(f)  # type: ignore[operator]
    return bio.getvalue()


# --- message headers -------------------------------------------------------------------------------
@pytest.mark.parametrize("libver", ["earliest", "latest"])
@pytest.mark.parametrize("track_order", [False, True])
def test_messages_agree_with_h5py(libver: str, track_order: bool) -> None:
    """Header version, chunk count (continuations followed) and message bodies, for v1 and v2
    headers, with and without the 2-byte creation-order field in v2 message headers."""
    data = np.arange(24, dtype="<i4").reshape(4, 6)

    def build(f: h5py.File) -> None:
        ds = f.create_dataset("d", data=data, track_order=track_order)
        for i in range(7):  # added after creation: the header grows continuation chunks
            ds.attrs[f"attribute_{i}"] = np.arange(100 * (i + 1), dtype="<f8")

    raw = _h5(build, libver=libver)
    with h5py.File(io.BytesIO(raw), "r") as f:
        info = h5py.h5o.get_info(f["d"].id)
        hdr_version, nchunks = info.hdr.version, info.hdr.nchunks
        data_offset = f["d"].id.get_offset()
    with HDF5File(raw) as h5:
        obj = h5.object(h5.root.links()["d"])
        assert obj.version == hdr_version
        msgs = obj.messages
        assert all(isinstance(msg, Message) for msg in msgs)
        assert 1 + sum(msg.type == m.CONTINUATION for msg in msgs) == nchunks > 1
        for msg in msgs:
            assert msg.type != m.NIL
            assert 0 < msg.offset and msg.offset + msg.size <= len(raw)
            assert bytes(obj.body(msg)) == raw[msg.offset : msg.offset + msg.size]
        assert obj.find(m.DATASPACE) == next(msg for msg in msgs if msg.type == m.DATASPACE)
        assert [a.offset for a in obj.find_all(m.ATTRIBUTE)] == [
            msg.offset for msg in msgs if msg.type == m.ATTRIBUTE
        ]
        assert list(obj.attributes) == [f"attribute_{i}" for i in range(7)]
        np.testing.assert_array_equal(
            np.frombuffer(obj.attributes["attribute_6"].data, "<f8"), np.arange(700, dtype="<f8")
        )
        assert obj.dataspace is not None and obj.dataspace.dims == (4, 6)
        assert h5.raw_location(obj) == (data_offset, data.nbytes)
        assert bytes(h5.raw_data(obj)) == data.tobytes()


def test_message_tuples_are_not_tracked_by_the_gc() -> None:
    """Headers keep their messages as plain int tuples, which the cyclic GC stops scanning (the
    reason they are not dataclasses holding memoryviews: 100,000 of them in a 20,000-leaf file)."""
    raw = _h5(lambda f: f.create_dataset("d", data=np.zeros(3)))
    with HDF5File(raw) as h5:
        obj = h5.object(h5.root.links()["d"])
        gc.collect()
        gc.collect()  # the outer tuple is untracked once its items are
        assert obj._raw and not any(gc.is_tracked(t) for t in obj._raw)
        assert not gc.is_tracked(obj._raw)


def test_truncated_message_body_is_a_format_error_at_its_offset() -> None:
    raw = bytearray(_h5(lambda f: f.create_dataset("d", data=np.zeros(3)), libver="latest"))
    with HDF5File(bytes(raw)) as h5:
        obj = h5.object(h5.root.links()["d"])
        msg = obj.find(m.DATASPACE)
        assert msg is not None and obj.version == 2
        address = obj.address
    # v2 message header: type u8, size u16, flags u8 (no creation order here) before the body
    assert raw[msg.offset - 4] == m.DATASPACE
    raw[msg.offset - 3 : msg.offset - 1] = struct.pack("<H", 0xFFFF)
    with HDF5File(bytes(raw)) as h5, pytest.raises(FormatError, match="truncated") as err:
        h5.object(address)
    assert err.value.offset == msg.offset


def test_message_count_limit_still_applies() -> None:
    raw = _h5(lambda f: [f.create_dataset(f"d{i}", data=np.zeros(1)) for i in range(3)], libver="latest")
    with HDF5File(raw, limits=Limits(max_header_messages=2)) as h5, pytest.raises(LimitError):
        h5.object(h5.root.links()["d0"])


# --- decoded once per distinct body ------------------------------------------------------------------
def test_identical_messages_share_one_decoded_value() -> None:
    def build(f: h5py.File) -> None:
        for i in range(5):
            f.create_dataset(f"a{i}", data=np.full((2, 3), i, "<f4"))
        f.create_dataset("b", data=np.zeros((3, 2), "<f4"))
        f.create_dataset("c", data=np.zeros((2, 3), ">f8"))

    with HDF5File(_h5(build)) as h5:
        objs = {name: h5.object(addr) for name, addr in h5.root.links().items()}
        a = [objs[f"a{i}"] for i in range(5)]
        assert all(o.datatype is a[0].datatype for o in a)  # one H5Type for five messages
        assert all(o.dataspace is a[0].dataspace for o in a)
        assert objs["b"].datatype is a[0].datatype
        assert objs["b"].dataspace is not None and objs["b"].dataspace.dims == (3, 2)
        assert objs["c"].datatype is not None and objs["c"].datatype.numpy_dtype() == np.dtype(">f8")
        for i, o in enumerate(a):  # shared decoded messages, yet each dataset its own data
            np.testing.assert_array_equal(np.frombuffer(h5.raw_data(o), "<f4"), np.full(6, i, "<f4"))


def test_large_bodies_are_decoded_but_not_remembered() -> None:
    """Bodies over _MEMO_BODY_BYTES are parsed every time, which bounds the memo's memory."""
    names = [f"member_with_a_long_name_{i:03d}" for i in range(12)]
    dt = np.dtype([(n, "<i4") for n in names])

    def build(f: h5py.File) -> None:
        f.create_dataset("x", data=np.zeros(2, dt))
        f.create_dataset("y", data=np.ones(2, dt))

    with HDF5File(_h5(build)) as h5:
        x, y = (h5.object(h5.root.links()[k]) for k in "xy")
        msg = x.find(m.DATATYPE)
        assert msg is not None and msg.size > _MEMO_BODY_BYTES
        assert x.datatype == y.datatype
        assert x.datatype is not None and [mem.name for mem in x.datatype.members] == names
        assert all(len(k) <= _MEMO_BODY_BYTES for table in h5._memos.values() for k in table)
        # (The compound itself may be found again by its bytes: KnownCompounds, bounded on its own.)
        assert h5.known_compounds._bytes <= _KNOWN_BYTES


# --- layouts ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("libver", ["earliest", "latest"])
def test_contiguous_and_compact_layouts_match_h5py(libver: str) -> None:
    data = np.arange(12, dtype="<u2").reshape(3, 4)

    def build(f: h5py.File) -> None:
        f["contiguous"] = data
        dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
        dcpl.set_layout(h5py.h5d.COMPACT)
        space = h5py.h5s.create_simple(data.shape)
        h5py.h5d.create(f.id, b"compact", h5py.h5t.STD_U16LE, space, dcpl=dcpl).write(
            h5py.h5s.ALL, h5py.h5s.ALL, data
        )

    raw = _h5(build, libver=libver)
    with h5py.File(io.BytesIO(raw), "r") as f:
        contiguous_at = f["contiguous"].id.get_offset()
    with HDF5File(raw) as h5:
        c = h5.object(h5.root.links()["contiguous"])
        k = h5.object(h5.root.links()["compact"])
        assert c.layout is not None and k.layout is not None
        assert (c.layout.kind, c.layout.data_offset, c.layout.data_size) == (
            "contiguous",
            contiguous_at,
            data.nbytes,
        )
        assert k.layout.kind == "compact" and k.layout.data_size == data.nbytes
        assert k.layout.data_offset is not None
        at = k.layout.data_offset
        assert raw[at : at + data.nbytes] == data.tobytes()
        assert c.layout is c.layout  # decoded once


@pytest.mark.parametrize("version", [3, 4, 5])
def test_layout_fast_path_equals_the_generic_decoder(version: int) -> None:
    addr, size, base = 4096, 800, 512
    body8 = bytes([version, 1]) + struct.pack("<QQ", addr, size)
    body4 = bytes([version, 1]) + struct.pack("<II", addr, size)
    fast = m.parse_layout(Cursor(memoryview(body8), 0), base)
    # 4-byte offsets and lengths take the generic decoder
    slow = m.parse_layout(Cursor(memoryview(body4), 0, offset_size=4, length_size=4), base)
    assert fast == slow == Layout("contiguous", version, addr + base, size)
    assert repr(fast) == repr(Layout("contiguous", version, addr + base, size))
    undefined = bytes([version, 1]) + b"\xff" * 8 + struct.pack("<Q", 0)
    assert m.parse_layout(Cursor(memoryview(undefined), 0), base).data_offset is None
    compact = bytes([version, 0]) + struct.pack("<H", 3) + b"abc"
    at_100 = memoryview(bytes(100) + compact)
    assert m.parse_layout(Cursor(at_100, 100), base) == Layout("compact", version, 104, 3)


def test_layout_fast_path_keeps_its_bounds_checks() -> None:
    lying_compact = bytes([4, 0]) + struct.pack("<H", 50) + b"abc"  # claims 50 bytes, holds 3
    with pytest.raises(FormatError, match="truncated") as err:
        m.parse_layout(Cursor(memoryview(lying_compact), 0), 0)
    assert err.value.offset == 4
    short_contiguous = bytes([3, 1]) + struct.pack("<Q", 7)  # no size field
    with pytest.raises(FormatError, match="truncated"):
        m.parse_layout(Cursor(memoryview(short_contiguous), 0), 0)


# --- page-cache advice -----------------------------------------------------------------------------
def test_large_files_are_mapped_for_random_access_until_metadata_look_dense(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Advice is only a hint, so what can be checked is that the switch happens when it should
    and that reading (metadata, contiguous and chunked data, prefetch) still gives the data."""
    import treexchange._hdf5._file as hfile

    data = np.arange(40_000, dtype="<f8")
    with h5py.File(tmp_path / "f.h5", "w") as f:
        for i in range(6):
            f[f"c{i}"] = data + i
        f.create_dataset("z", data=data, chunks=(4096,), compression="gzip")
    size = (tmp_path / "f.h5").stat().st_size
    monkeypatch.setattr(hfile, "_RANDOM_ABOVE", 0)  # treat the file as large
    monkeypatch.setattr(hfile, "_DENSE_METADATA", size // 4)  # dense after 4 headers
    with HDF5File(tmp_path / "f.h5") as h5:
        assert h5._random_until == 4
        links = h5.root.links()
        for i in range(6):
            obj = h5.object(links[f"c{i}"])
            np.testing.assert_array_equal(np.frombuffer(h5.raw_data(obj), "<f8"), data + i)
        assert h5._random_until is None  # 7 headers parsed: back to the default read-around
        z = h5.object(links["z"])
        assembled = h5.raw_data(z)
        np.testing.assert_array_equal(np.frombuffer(assembled, "<f8"), data)
        # chunked data are assembled into new memory, handed out writable (no second copy needed)
        assert isinstance(assembled, memoryview) and not assembled.readonly
        h5.prefetch(size - 10, 1 << 20)  # past the end, or before the start: ignored
        h5.prefetch(-5, 1 << 20)
    with HDF5File((tmp_path / "f.h5").read_bytes()) as h5:
        assert h5._random_until is None  # bytes: no map, no advice
        h5.prefetch(0, 1 << 20)


@pytest.mark.parametrize("layout", ["contiguous", "compact"])
def test_stored_ranges_of_a_few_headers_equal_the_bulk_pass(layout: str) -> None:
    """``stored_ranges`` reads a few headers' layouts one by one (a Dict of a few Dicts), many
    with numpy: the same offsets, sizes and refusals either way -- layouts of every version, of
    the other class, with an undefined or outside address, an oversized compact size."""
    n = 24

    def build(f: h5py.File) -> None:
        for i in range(n):
            data = np.full(3, i, "<u2")
            if layout == "contiguous":
                f[f"d{i:02d}"] = data
            else:
                dcpl = h5py.h5p.create(h5py.h5p.DATASET_CREATE)
                dcpl.set_layout(h5py.h5d.COMPACT)
                space = h5py.h5s.create_simple(data.shape)
                h5py.h5d.create(f.id, f"d{i:02d}".encode(), h5py.h5t.STD_U16LE, space, dcpl=dcpl).write(
                    h5py.h5s.ALL, h5py.h5s.ALL, data
                )

    raw = bytearray(_h5(build, libver="latest"))
    with HDF5File(bytes(raw)) as h5:
        proto = h5.object(h5.root.links()["d00"])
        offsets = [h5.object(a).offset for a in h5.root.links().values()]
        msg = proto._first(m.LAYOUT)
        assert msg is not None and len(offsets) == n
        rel = msg[2] - proto.offset
    # damage a few layouts: version, class, address (undefined, outside), compact size
    damage = [(1, 0, 2), (2, 0, 6), (3, 1, 2 if layout == "contiguous" else 1)]
    if layout == "contiguous":
        damage += [(4, 2, None), (5, 2, "outside"), (6, 10, "huge")]
    else:
        damage += [(4, 2, "huge")]
    for i, at, value in damage:
        body = offsets[i] + rel
        if value is None:
            raw[body + at : body + at + 8] = b"\xff" * 8
        elif value == "outside":
            raw[body + at : body + at + 8] = struct.pack("<Q", len(raw) + 10)
        elif value == "huge":
            width = 8 if layout == "contiguous" else 2
            raw[body + at : body + at + width] = b"\xff" * width
        else:
            raw[body + at] = value
    with HDF5File(bytes(raw)) as h5:
        bulk = h5.stored_ranges(proto, np.array(offsets, np.int64))
        assert len(offsets) > 16  # (the bulk pass)
        for lo in range(0, n, 8):
            part = np.array(offsets[lo : lo + 8], np.int64)
            few = h5.stored_ranges(proto, part)
            ok = bulk[0][lo : lo + 8]
            before = int(bulk[0][:lo].sum())
            assert few[0].tolist() == ok.tolist()
            assert few[1].tolist() == bulk[1][before : before + int(ok.sum())].tolist()
            assert few[2].tolist() == bulk[2][before : before + int(ok.sum())].tolist()
        assert not bulk[0][1:4].any() and bulk[0][0] and bulk[0][7:].all()

"""Datatype messages: every class, every version, compared with libhdf5's own view of the type."""

from __future__ import annotations

import io
import struct

import h5py
import numpy as np
import pytest

from treexchange import FormatError, LimitError, Limits
from treexchange._hdf5 import H5Class, H5Type, HDF5File
from treexchange._hdf5._cursor import Cursor
from treexchange._hdf5._datatype import parse_datatype
from treexchange._limits import DEFAULT_LIMITS

COMPOUND = np.dtype([("a", "<i2"), ("b", [("x", ">f8"), ("y", "u1")]), ("c", "<f4", (2, 3))])
DTYPES = {
    "int8": np.dtype("i1"),
    "uint64_be": np.dtype(">u8"),
    "int32": np.dtype("<i4"),
    "float16": np.dtype("<f2"),
    "float32_be": np.dtype(">f4"),
    "float64": np.dtype("<f8"),
    "fixed_string": np.dtype("S7"),
    "vlen_str": h5py.string_dtype("utf-8"),
    "vlen_ascii": h5py.string_dtype("ascii"),
    "vlen_seq": h5py.vlen_dtype(np.dtype("<i4")),
    "enum": h5py.enum_dtype({"red": 1, "green": 7, "blue": -3}, basetype="<i2"),
    "bool_enum": np.dtype("?"),
    "compound": COMPOUND,
    "packed_compound": np.dtype(
        {"names": ["p", "q"], "formats": ["u1", "<i8"], "offsets": [0, 1], "itemsize": 9}
    ),
    "opaque": np.dtype("V5"),
    "objref": h5py.ref_dtype,
    "regionref": h5py.regionref_dtype,
    "complex": np.dtype("<c8"),
}


def _sample(name: str, dt: np.dtype, f: h5py.File) -> object:
    n = 4
    if name.startswith("vlen_str") or name == "vlen_ascii":
        return np.array(["a", "bb", "", "dddd"], dtype=dt)
    if name == "vlen_seq":
        arr = np.empty(n, dtype=dt)
        for i in range(n):
            arr[i] = np.arange(i, dtype="<i4")
        return arr
    if name == "objref":
        return np.array([f.ref, f["int8"].ref, f.ref, h5py.Reference()], dtype=dt)
    if name == "regionref":
        return np.array([f["int8"].regionref[1:3]] * n, dtype=dt)
    if name == "opaque":
        return np.frombuffer(bytes(range(5 * n)), dtype=dt)
    if name == "fixed_string":
        return np.array([b"abc", b"", b"1234567", b"x"], dtype=dt)
    if name == "enum":
        return np.array([1, 7, -3, 1], dtype=dt)
    if dt.kind == "c":
        return (np.arange(n) + 1j * np.arange(n) / 3).astype(dt)
    if dt.kind == "f":
        return (np.arange(n) / 3 - 1).astype(dt)
    if dt.names == ("a", "b", "c"):
        arr = np.zeros(n, dtype=dt)
        arr["a"] = np.arange(n) - 2
        arr["b"]["x"] = np.arange(n) / 3
        arr["b"]["y"] = np.arange(n) * 2
        arr["c"] = np.arange(n * 6).reshape(n, 2, 3)
        return arr
    raw = (np.arange(n * dt.itemsize) * 37 % 251).astype("u1").tobytes()
    return np.frombuffer(raw, dtype=dt).copy()


@pytest.fixture(scope="module", params=["earliest", "latest"])
def typed_file(request: pytest.FixtureRequest) -> tuple[HDF5File, h5py.File]:
    bio = io.BytesIO()
    with h5py.File(bio, "w", libver=request.param) as f:
        f["int8"] = np.arange(4, dtype="i1")  # referenced by the reference datasets
        for name, dt in DTYPES.items():
            if name != "int8":
                f.create_dataset(name, data=_sample(name, dt, f), dtype=dt)
        f["bitfield"] = np.zeros(4, "u2")
        bf = h5py.h5d.create(f.id, b"bitfield_be", h5py.h5t.STD_B16BE, h5py.h5s.create_simple((4,)))
        bf.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([1, 2, 3, 0xFFFF], "u2"), mtype=h5py.h5t.STD_B16LE)
        # h5py turns subarray dtypes into extra dataset dimensions: make a true ARRAY type here
        atype = h5py.h5t.array_create(h5py.h5t.STD_I32BE, (2, 3))
        ad = h5py.h5d.create(f.id, b"array", atype, h5py.h5s.create_simple((4,)))
        ad.write(h5py.h5s.ALL, h5py.h5s.ALL, np.arange(24, dtype=">i4").reshape(4, 2, 3), mtype=atype)
        custom = h5py.h5t.IEEE_F32LE.copy()  # a 16-bit float with bfloat16's layout
        custom.set_fields(15, 7, 8, 0, 7)
        custom.set_size(2)
        custom.set_precision(16)
        custom.set_ebias(127)
        cd = h5py.h5d.create(f.id, b"custom_float", custom, h5py.h5s.create_simple((3,)))
        cd.write(h5py.h5s.ALL, h5py.h5s.ALL, np.array([1.0, -2.0, 0.5], "f4"))
        f["named"] = np.dtype([("u", "<u4"), ("v", "<f8")])  # committed datatype
        f.create_dataset(
            "uses_named", data=np.array([(1, 2.5), (3, 4.5)], f["named"].dtype), dtype=f["named"]
        )
    raw = bio.getvalue()
    return HDF5File(raw, verify_checksums=True), h5py.File(io.BytesIO(raw))


NAMES = [*DTYPES, "array", "bitfield_be", "custom_float", "uses_named"]


@pytest.mark.parametrize("name", NAMES)
def test_datatype_matches_libhdf5(typed_file: tuple[HDF5File, h5py.File], name: str) -> None:
    h5, f = typed_file
    obj = h5.object(h5.root.links()[name])
    dt = obj.datatype
    assert dt is not None
    _same(dt, f[name].id.get_type())
    raw = bytes(h5.raw_data(obj))
    assert len(raw) == obj.dataspace.count * dt.size  # type: ignore[union-attr]
    if not _has_vlen(dt) and dt.cls != H5Class.REFERENCE:
        # libhdf5 converts only into native layouts, so compare bytes where the memory type is the
        # file type itself: read with the file datatype.
        tid = f[name].id.get_type()
        buf = np.empty(len(raw), "u1")
        f[name].id.read(h5py.h5s.ALL, h5py.h5s.ALL, buf, mtype=tid)
        assert raw == buf.tobytes()


def test_committed_datatype_is_resolved(typed_file: tuple[HDF5File, h5py.File]) -> None:
    h5, _f = typed_file
    named_addr = h5.root.links()["named"]
    assert h5.object(named_addr).kind == "datatype"
    uses = h5.object(h5.root.links()["uses_named"]).datatype
    assert uses is not None and uses.committed_at == named_addr
    assert uses == h5.object(named_addr).datatype  # committed_at takes no part in equality
    assert [m.name for m in uses.members] == ["u", "v"]


def test_references_point_at_objects(typed_file: tuple[HDF5File, h5py.File]) -> None:
    h5, f = typed_file
    obj = h5.object(h5.root.links()["objref"])
    assert obj.datatype is not None and obj.datatype.ref_type == 0
    raw = bytes(h5.raw_data(obj))
    addrs = [int.from_bytes(raw[i : i + 8], "little") for i in range(0, 32, 8)]
    expected = [h5py.h5o.get_info(f[r].id).addr if r else 0 for r in f["objref"][()]]  # type: ignore[attr-defined]
    assert addrs == expected == [h5.root_address, h5.root.links()["int8"], h5.root_address, 0]


def test_vlen_data_resolves_through_global_heap(typed_file: tuple[HDF5File, h5py.File]) -> None:
    h5, f = typed_file
    for name in ("vlen_str", "vlen_seq"):
        obj = h5.object(h5.root.links()[name])
        raw = bytes(h5.raw_data(obj))
        got = [bytes(h5.read_vlen(raw[i * 16 : (i + 1) * 16])) for i in range(4)]
        expected = [
            v.encode() if isinstance(v, str) else (v.tobytes() if isinstance(v, np.ndarray) else bytes(v))
            for v in f[name][()]
        ]
        assert got == expected


def _has_vlen(t: H5Type) -> bool:
    return (
        t.cls == H5Class.VLEN
        or any(_has_vlen(m.type) for m in t.members)
        or (t.base is not None and _has_vlen(t.base))
    )


def _same(t: H5Type, tid: h5py.h5t.TypeID) -> None:
    """Our parse agrees with libhdf5's introspection of the same on-disk type."""
    cls = tid.get_class()
    if t.is_vlen_string:
        assert cls == h5py.h5t.STRING and tid.is_variable_str()
        assert t.charset == tid.get_cset() and t.string_padding == tid.get_strpad()
        return
    assert int(t.cls) == cls
    if not _has_vlen(t):
        assert t.size == tid.get_size()
    if t.cls in (H5Class.FIXED, H5Class.BITFIELD, H5Class.FLOAT, H5Class.ENUM):
        order = tid.get_order() if t.cls != H5Class.ENUM else tid.get_super().get_order()
        assert t.byte_order == ("<" if order == h5py.h5t.ORDER_LE else ">")
    if t.cls == H5Class.FIXED:
        assert t.signed == (tid.get_sign() == h5py.h5t.SGN_2)
        assert struct.unpack("<HH", t.props) == (tid.get_offset(), tid.get_precision())
    elif t.cls == H5Class.FLOAT:
        off, prec, eloc, esize, mloc, msize, bias = struct.unpack("<HHBBBBI", t.props)
        spos, epos, esz, mpos, msz = tid.get_fields()
        assert (eloc, esize, mloc, msize) == (epos, esz, mpos, msz)
        assert (off, prec, bias) == (tid.get_offset(), tid.get_precision(), tid.get_ebias())
        assert (t.flags >> 8) & 0xFF == spos
    elif t.cls == H5Class.STRING:
        assert t.charset == tid.get_cset() and t.string_padding == tid.get_strpad()
    elif t.cls == H5Class.OPAQUE:
        assert t.tag == tid.get_tag()
    elif t.cls == H5Class.COMPOUND:
        assert len(t.members) == tid.get_nmembers()
        for i, m in enumerate(t.members):
            assert m.name.encode() == tid.get_member_name(i)
            assert m.offset == tid.get_member_offset(i)
            _same(m.type, tid.get_member_type(i))
    elif t.cls == H5Class.ENUM:
        assert t.base is not None
        _same(t.base, tid.get_super())
        names = [tid.get_member_name(i).decode() for i in range(tid.get_nmembers())]
        values = [tid.get_member_value(i) for i in range(tid.get_nmembers())]
        assert list(t.enum_names) == names
        base_dtype = t.base.numpy_dtype()
        assert base_dtype is not None
        assert [int(np.frombuffer(v, base_dtype)[0]) for v in t.enum_values] == values
    elif t.cls == H5Class.ARRAY:
        assert t.dims == tid.get_array_dims() and t.base is not None
        _same(t.base, tid.get_super())
    elif t.cls == H5Class.VLEN:
        assert t.base is not None
        _same(t.base, tid.get_super())
    elif t.cls == H5Class.REFERENCE:
        assert t.ref_type == (0 if t.size == 8 else 1)


def test_numpy_dtype_of_numbers(typed_file: tuple[HDF5File, h5py.File]) -> None:
    h5, _ = typed_file
    links = h5.root.links()
    expect = {"int8": "i1", "uint64_be": ">u8", "float16": "<f2", "float32_be": ">f4", "bitfield_be": ">u2"}
    for name, code in expect.items():
        assert h5.object(links[name]).datatype.numpy_dtype() == np.dtype(code)  # type: ignore[union-attr]
    assert h5.object(links["custom_float"]).datatype.numpy_dtype() is None  # type: ignore[union-attr]
    assert h5.object(links["compound"]).datatype.numpy_dtype() is None  # type: ignore[union-attr]


# --- hand-built encodings libhdf5 no longer writes ----------------------------------------------------
def _parse(raw: bytes, limits: Limits = DEFAULT_LIMITS) -> H5Type:
    c = Cursor(memoryview(raw), 0)
    t = parse_datatype(c, limits)
    assert c.pos == len(raw), "the parser must consume exactly the encoded type"
    return t


I32 = bytes([0x10, 0x08, 0x00, 0x00]) + struct.pack("<IHH", 4, 0, 32)
F64_V1 = bytes([0x11, 0x20, 0x3F, 0x00]) + struct.pack("<IHHBBBBI", 8, 0, 64, 52, 11, 0, 52, 1023)


def test_compound_v1_with_array_member() -> None:
    """HDF5 1.4-era compounds: padded names and a 4-slot dimension block per member."""
    members = b"ab\x00".ljust(8, b"\x00") + struct.pack("<I", 0)
    members += bytes([2, 0, 0, 0]) + struct.pack("<I", 0) + bytes(4) + struct.pack("<4I", 2, 3, 0, 0) + I32
    members += b"c\x00".ljust(8, b"\x00") + struct.pack("<I", 24)
    members += bytes([0, 0, 0, 0]) + bytes(8) + bytes(16) + F64_V1
    t = _parse(bytes([0x16, 2, 0, 0]) + struct.pack("<I", 32) + members)
    assert t.version == 1 and [(m.name, m.offset) for m in t.members] == [("ab", 0), ("c", 24)]
    arr = t.members[0].type
    assert arr.cls == H5Class.ARRAY and arr.dims == (2, 3) and arr.size == 24 and arr.base == _parse(I32)
    assert t.members[1].type.numpy_dtype() == np.dtype("<f8")


def test_compound_v3_offset_widths() -> None:
    for size, width in ((255, 1), (256, 2), (70_000, 3)):
        raw = (
            bytes([0x36, 1, 0, 0]) + struct.pack("<I", size) + b"x\x00" + (size - 4).to_bytes(width, "little")
        )
        t = _parse(raw + I32)
        assert t.members[0].offset == size - 4


def test_version0_compound_is_jld2_v3_layout() -> None:
    """JLD2 0.4's version-0 class byte with unpadded names and 1-byte offsets (fixtures readas_*)."""
    raw = bytes([0x06, 2, 0, 0]) + struct.pack("<I", 12) + b"re\x00\x00" + I32 + b"im\x00\x04" + I32
    t = _parse(raw)
    assert t.version == 0 and [(m.name, m.offset) for m in t.members] == [("re", 0), ("im", 4)]


def test_enum_v1_padded_names_and_array_v2() -> None:
    u8 = bytes([0x10, 0, 0, 0]) + struct.pack("<IHH", 1, 0, 8)
    names = b"lo\x00".ljust(8, b"\x00") + b"highest\x00".ljust(8, b"\x00")
    t = _parse(bytes([0x18, 2, 0, 0]) + struct.pack("<I", 1) + u8 + names + bytes([0, 9]))
    assert t.enum_names == ("lo", "highest") and t.enum_values == (b"\x00", b"\x09")
    arr = _parse(
        bytes([0x2A, 0, 0, 0])
        + struct.pack("<I", 24)
        + bytes([2, 0, 0, 0])
        + struct.pack("<4I", 2, 3, 0, 1)
        + I32
    )
    assert arr.dims == (2, 3) and arr.base is not None and arr.base.size == 4
    arr3 = _parse(
        bytes([0x3A, 0, 0, 0]) + struct.pack("<I", 24) + bytes([2]) + struct.pack("<2I", 2, 3) + I32
    )
    assert arr3.dims == (2, 3)


def test_time_opaque_and_reference_classes() -> None:
    time = _parse(bytes([0x12, 0, 0, 0]) + struct.pack("<IH", 8, 64))
    assert time.cls == H5Class.TIME and time.size == 8
    opaque = _parse(bytes([0x15, 8, 0, 0]) + struct.pack("<I", 2) + b"bf16\x00\x00\x00\x00")
    assert opaque.tag == b"bf16" and opaque.size == 2
    empty_tag = _parse(bytes([0x35, 0, 0, 0]) + struct.pack("<I", 1))  # JLD2 ghost types
    assert empty_tag.tag == b"" and empty_tag.props == b""
    ref = _parse(bytes([0x37, 0, 0, 0]) + struct.pack("<I", 8))
    assert ref.cls == H5Class.REFERENCE and ref.ref_type == 0


def test_props_re_encode_exactly() -> None:
    raw = bytes([0x36, 2, 0, 0]) + struct.pack("<I", 12) + b"re\x00\x00" + I32 + b"im\x00\x04" + I32
    t = _parse(raw)
    header = bytes([raw[0], *t.flags.to_bytes(3, "little")]) + struct.pack("<I", t.size)
    assert header + t.props == raw


def test_bad_datatypes_raise_format_error() -> None:
    with pytest.raises(FormatError, match="class") as err:
        _parse(bytes([0x3F, 0, 0, 0]) + struct.pack("<I", 4))
    assert err.value.offset == 0
    with pytest.raises(FormatError, match="truncated"):
        _parse(I32[:-1])
    with pytest.raises(FormatError, match="exceeds the compound size"):
        _parse(bytes([0x36, 1, 0, 0]) + struct.pack("<I", 2) + b"x\x00\x00" + I32)
    with pytest.raises(FormatError, match="unterminated"):
        _parse(bytes([0x36, 1, 0, 0]) + struct.pack("<I", 4) + b"xyz")


def test_datatype_nesting_is_bounded() -> None:
    """A vlen of vlen of ... deeper than max_depth is refused, without recursion errors."""
    depth = 2000
    raw = b"".join(bytes([0x39, 0, 0, 0]) + struct.pack("<I", 16) for _ in range(depth)) + I32
    with pytest.raises(LimitError):
        _parse(raw, Limits(max_depth=64))
    with pytest.raises(LimitError):
        _parse(raw)  # the default limits also stop it, well before Python's recursion limit
    # compounds nest two parser frames per level; a value max_depth deep is a compound per level,
    # so max_depth (+16) levels parse (the reader makes room on the stack for that), more do not
    from treexchange._recursion import stack_for_depth

    def compounds(n: int) -> bytes:
        nested = I32
        for _ in range(n):
            nested = bytes([0x36, 1, 0, 0]) + struct.pack("<I", 4) + b"m\x00\x00" + nested
        return nested

    with stack_for_depth(Limits().max_depth):
        assert _parse(compounds(Limits().max_depth)).size == 4
        with pytest.raises(LimitError, match="max_depth"):
            _parse(compounds(Limits().max_depth + 17))
    ok = I32
    for _ in range(20):
        ok = bytes([0x36, 1, 0, 0]) + struct.pack("<I", 4) + b"m\x00\x00" + ok
    assert _parse(ok).size == 4

"""Targeted reads of value kinds that no Julia-written fixture contains.

The files are built byte by byte by ``_jld2_builder`` the way JLD2 lays these values out (see
docs/jld2-format.md §5); h5py checks whatever it can read of them.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import h5py
import ml_dtypes
import numpy as np
import pytest
from _jld2_builder import (
    Attr,
    Builder,
    shared,
    space,
    t_bool,
    t_compound,
    t_float,
    t_int,
    t_opaque,
    t_ref,
    t_vlen,
    t_vlen_string,
)

import treexchange as tx
from treexchange import (
    MISSING,
    FormatError,
    JuliaArray,
    JuliaBits,
    JuliaStruct,
    LimitError,
    Limits,
    NamedTuple,
    Symbol,
    UnsupportedError,
    WrongFormatError,
)
from treexchange._inspect import iter_records
from treexchange._jld2._layout import StructLayout
from treexchange._typeof import kind_of


def _ref(addr: int) -> bytes:
    return struct.pack("<Q", addr)


def _build(b: Builder) -> bytes:
    raw = b.finish()
    # Everything the builder makes is valid HDF5: h5py lists the same top-level names.
    with h5py.File(io.BytesIO(raw), "r") as f:
        assert {k for k in f if k != "_types"} == {name for name, _ in b.root_links}
    return raw


def _one(b: Builder, name: str = "x") -> object:
    return tx.load(_build(b), name)


def _jt_str(raw: bytes, name: str = "x") -> str:
    with tx.open(raw) as f:
        return str(f[name].julia_type)


# --- numbers -----------------------------------------------------------------------------------


def test_float16_arrays_and_scalars() -> None:
    b = Builder()
    a = np.array([[1.5, -2.0], [0.25, 65504]], dtype=np.float16)
    b.link("x", b.array(a))
    b.link("s", b.dataset(t_float(2), space("scalar"), np.float16(3.5).tobytes()))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert x.dtype == np.float16 and x.shape == (2, 2) and np.array_equal(x, a)
    s = tx.load(raw, "s")
    assert type(s) is np.float16 and s == 3.5
    assert _jt_str(raw) == "Array{Float16, 2}"


def test_bfloat16_committed_opaque() -> None:
    b = Builder()
    bf = b.commit(t_opaque(2), b.jt("BFloat16s.BFloat16"))
    values = np.array([1.0, -0.5, 3.140625], dtype=ml_dtypes.bfloat16)
    b.link("x", b.dataset(shared(bf), space("simple", [3]), values.tobytes()))
    b.link("s", b.dataset(shared(bf), space("scalar"), values[:1].tobytes()))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert x.dtype == np.dtype(ml_dtypes.bfloat16) and np.array_equal(x, values)
    s = tx.load(raw, "s")
    assert s.dtype == np.dtype(ml_dtypes.bfloat16) and float(s) == 1.0
    assert _jt_str(raw) == "Array{BFloat16s.BFloat16, 1}"


def _complex_type(b: Builder, size: int) -> int:
    name = {2: "Core.Float16", 4: "Core.Float32", 8: "Core.Float64"}[size]
    param = b.jt_dataset(name)
    members = [("re", t_float(size), size), ("im", t_float(size), size)]
    return b.commit(t_compound(members), b.jt("Base.Complex", [param]))


def test_complex_scalars_and_arrays() -> None:
    b = Builder()
    c32 = _complex_type(b, 4)
    values = np.array([1 + 2j, -3.5 + 0.25j], dtype=np.complex64)
    b.link("x", b.dataset(shared(c32), space("simple", [2]), values.tobytes()))
    b.link("s", b.dataset(shared(_complex_type(b, 8)), space("scalar"), np.complex128(2 - 1j).tobytes()))
    b.link(
        "h", b.dataset(shared(_complex_type(b, 2)), space("scalar"), np.array([1.5, 2], np.float16).tobytes())
    )
    raw = _build(b)
    x = tx.load(raw, "x")
    assert x.dtype == np.complex64 and np.array_equal(x, values)
    s = tx.load(raw, "s")
    assert type(s) is np.complex128 and s == 2 - 1j
    h = tx.load(raw, "h")  # numpy has no complex32: Complex{Float16} stays a struct
    assert isinstance(h, JuliaStruct) and str(h.type) == "Complex{Float16}"
    assert h["re"] == np.float16(1.5) and h["im"] == np.float16(2)
    assert _jt_str(raw) == "Array{Complex{Float32}, 1}"


def test_int128_and_uint128() -> None:
    b = Builder()
    big = -(2**120) + 7
    b.link("s", b.dataset(t_int(16), space("scalar"), big.to_bytes(16, "little", signed=True)))
    data = b"".join(v.to_bytes(16, "little") for v in (1, 2**127 + 5))
    b.link("u", b.dataset(t_int(16, signed=False), space("simple", [2]), data))
    raw = _build(b)
    s = tx.load(raw, "s")
    assert type(s) is tx.Int128 and s == big
    u = tx.load(raw, "u")
    assert isinstance(u, JuliaArray) and str(u.eltype) == "UInt128"
    assert u.tolist() == [1, 2**127 + 5] and all(type(v) is tx.UInt128 for v in u)


def test_bool_scalars_and_arrays() -> None:
    b = Builder()
    a = np.array([[True, False, True], [False, False, True]])
    b.link("x", b.array(a))
    b.link("s", b.dataset(t_bool(), space("scalar"), b"\x01"))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert x.dtype == np.bool_ and np.array_equal(x, a) and x.flags.f_contiguous
    s = tx.load(raw, "s")
    assert s is True
    assert _jt_str(raw) == "Array{Bool, 2}"


def test_big_endian_numbers() -> None:
    b = Builder()
    a = np.arange(6, dtype=">f8").reshape(3, 2)
    b.link("x", b.array(a))
    b.link("s", b.dataset(t_int(4, big=True), space("scalar"), np.array([-5], ">i4").tobytes()))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert np.array_equal(x, a) and x.shape == (3, 2)
    s = tx.load(raw, "s")
    assert s == -5 and s.dtype == np.dtype("int32")


def test_char_and_enum_as_bits() -> None:
    b = Builder()
    char = b.commit(t_opaque(4), b.jt("Core.Char"))
    b.link("x", b.dataset(shared(char), space("scalar"), "σ".encode().ljust(4, b"\x00")[::-1]))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert isinstance(x, JuliaBits) and x.type.name == "Core.Char" and len(x.data) == 4


def test_committed_type_stored_as_another_class_keeps_or_refuses_its_type() -> None:
    b = Builder()
    # A user's 32-bit primitive type stored as an HDF5 integer: its bytes under its own type.
    prim = b.commit(t_int(4), b.jt("Main.MyPrim"))
    b.link("p", b.dataset(shared(prim), space("scalar"), struct.pack("<i", 7)))
    # Float64 stored in 4 bytes is not a Float64 at all: a damaged file, not a Float32.
    f64 = b.commit(t_float(4), b.jt("Core.Float64"))
    b.link("f", b.dataset(shared(f64), space("scalar"), np.float32(1.5).tobytes()))
    raw = _build(b)
    p = tx.load(raw, "p")
    assert isinstance(p, JuliaBits) and str(p.type) == "Main.MyPrim" and p.as_int() == 7
    assert _jt_str(raw, "p") == "Main.MyPrim"
    with pytest.raises(FormatError, match=r"Core\.Float64 stored as an HDF5 float of 4 bytes"):
        tx.load(raw, "f")


def test_basic_types_of_unexpected_size_are_refused() -> None:
    from treexchange._hdf5._model import H5Class, H5Type
    from treexchange._jld2._typeutil import basic_julia_type

    assert str(basic_julia_type(H5Type(H5Class.FLOAT, 1, 0x20, 4))) == "Float32"
    with pytest.raises(UnsupportedError, match="16 bytes"):
        basic_julia_type(H5Type(H5Class.FLOAT, 1, 0x20, 16))  # not read as Float64
    base = H5Type(H5Class.FIXED, 1, 0, 3)
    with pytest.raises(UnsupportedError, match="enumeration of 3 bytes"):
        basic_julia_type(H5Type(H5Class.ENUM, 3, 0, 3, base=base))  # not read as UInt8
    assert str(basic_julia_type(H5Type(H5Class.FIXED, 1, 0, 3))) == "JLD2.OpaqueData{3}"


# --- strings, symbols, arrays of objects -------------------------------------------------------------


def test_strings_and_symbols() -> None:
    b = Builder()
    words = ["σ²", "", "hello"]
    b.link("v", b.dataset(t_vlen_string(), space("simple", [3]), b"".join(b.vstr(w) for w in words)))
    sym = b.symbol_type()
    b.link("s", b.dataset(shared(sym), space("scalar"), b.vstr("relu")))
    b.link("syms", b.dataset(shared(sym), space("simple", [2]), b.vstr("a") + b.vstr("β")))
    b.link("t", b.dataset(b"\x13\x11\x00\x00\x05\x00\x00\x00", space("scalar"), "héllo".encode()[:5]))
    raw = _build(b)
    v = tx.load(raw, "v")
    assert isinstance(v, JuliaArray) and v.tolist() == words and str(v.eltype) == "String"
    s = tx.load(raw, "s")
    assert type(s) is Symbol and s == "relu"
    assert tx.load(raw, "syms").tolist() == [Symbol("a"), Symbol("β")]
    assert tx.load(raw, "t").startswith("h")


def test_zero_dim_and_ghost_arrays_with_dimensions_attribute() -> None:
    b = Builder()
    empty_dims = Attr("dimensions", t_int(8), space("simple", [0]), b"")
    b.link("z", b.dataset(t_float(8), space("simple", [1]), np.float64(4.5).tobytes(), [empty_dims]))
    nothing = b.ghost("Core.Nothing")
    dims = Attr("dimensions", t_int(8), space("simple", [2]), struct.pack("<qq", 3, 2))  # Julia 2×3
    b.link("g", b.dataset(shared(nothing), space("null"), b"", [dims]))
    raw = _build(b)
    z = tx.load(raw, "z")
    assert isinstance(z, np.ndarray) and z.shape == () and z[()] == 4.5
    g = tx.load(raw, "g")
    assert isinstance(g, JuliaArray) and g.shape == (2, 3) and all(x is None for x in g)
    assert _jt_str(raw, "g") == "Array{Nothing, 2}" and _jt_str(raw, "z") == "Array{Float64, 0}"


def test_null_array_of_stored_elements_is_an_empty_vector_of_union_bottom() -> None:
    b = Builder()
    b.link("e", b.dataset(t_float(8), space("null"), b""))
    raw = _build(b)
    e = tx.load(raw, "e")
    assert isinstance(e, JuliaArray) and len(e) == 0 and e.shape == (0,)
    assert str(e.eltype) == "Union{}" and _jt_str(raw, "e") == "Array{Union{}, 1}"  # not Union


def test_memory_attribute() -> None:
    b = Builder()
    mem = Attr("Memory", t_bool(), space("scalar"), b"\x01")
    b.link("m", b.array(np.arange(4.0), [mem]))
    raw = _build(b)
    assert tx.load(raw, "m").tolist() == [0, 1, 2, 3]
    assert _jt_str(raw, "m") == "Memory{Float64}"


def test_jld2_single_chunk_deflate_array() -> None:
    # JLD2's compressed layout (one chunk, dimension-size width 8) that libhdf5 2.x refuses.
    b = Builder()
    a = np.arange(1000, dtype=np.float32).reshape(10, 100)
    b.link("x", b.array(a, layout="deflate", chunk_dims=(100, 10, 4)))
    x = tx.load(b.finish(), "x")
    assert np.array_equal(x, a) and x.flags.writeable and x.shape == (10, 100)


def test_vector_any_matrix_any_undef_and_identity() -> None:
    b = Builder()
    any_t = b.jt_dataset("Core.Any")
    w = b.array(np.ones((2, 3), np.float32))
    ten = b.int_dataset(10)
    julia_type = Attr("julia_type", t_ref(), space("scalar"), _ref(any_t))
    b.link(
        "v", b.dataset(t_ref(), space("simple", [4]), _ref(w) + _ref(ten) + _ref(0) + _ref(w), [julia_type])
    )
    b.link("m", b.dataset(t_ref(), space("simple", [2, 2]), _ref(ten) * 3 + _ref(w), [julia_type]))
    raw = _build(b)
    v = tx.load(raw, "v")
    assert isinstance(v, list) and len(v) == 4
    assert v[0] is v[3]  # one Julia object stored once, read once
    # A NULL reference is Julia's #undef: the UNDEF sentinel, not `nothing`.
    assert v[1] == 10 and v[2] is tx.UNDEF
    with tx.open(raw) as f:
        undef = f["v"][2]
        assert (undef.kind, str(undef.julia_type), undef.read()) == ("singleton", "Union{}", tx.UNDEF)
        assert undef.path == ("v", 3)
        records = {tuple(r["path"]): r for r in iter_records(f)}
    assert records[("v", 3)] == {"path": ["v", 3], "kind": "singleton", "julia_type": "Union{}"}
    m = tx.load(raw, "m")
    assert isinstance(m, JuliaArray) and m.shape == (2, 2) and m[1, 1] is not None
    data = tx.load(raw)
    assert data["v"][0] is data["m"][1, 1]  # identity holds across the whole load
    assert _jt_str(raw, "m") == "Array{Any, 2}"


# --- structs, ghosts, custom serialization -----------------------------------------------------------


def _namedtuple(
    b: Builder,
    names: list[str],
    members: list[tuple[str, bytes, int]],
    types: list[int],
    tuple_params: list[int],
) -> int:
    tt = b.commit(t_compound(members) if members else t_opaque(1), b.jt("Core.Tuple", tuple_params))
    return b.commit(
        t_compound(members), b.jt("Core.NamedTuple", [b.names_tuple(names), tt]), b.field_attrs(names, types)
    )


def test_struct_layout_inline_reference_ghost() -> None:
    b = Builder()
    nothing = b.ghost("Core.Nothing")
    relu = b.ghost("NNlib.#relu")
    members = [("w", t_ref(), 8), ("k", t_int(8), 8)]
    st = b.commit(
        t_compound(members), b.jt("Main.Layer"), b.field_attrs(["w", "σ", "k", "n"], [0, relu, 0, nothing])
    )
    w = b.array(np.arange(3.0))
    b.link("x", b.dataset(shared(st), space("scalar"), _ref(w) + struct.pack("<q", 5)))
    x = _one(b)
    assert isinstance(x, JuliaStruct) and list(x.fields) == ["w", "σ", "k", "n"]
    assert x["σ"] == tx.Singleton("NNlib.#relu") and x["n"] is None and x["k"] == 5
    lay = x.layout
    assert isinstance(lay, StructLayout) and lay.field_attrs == "field_names"
    assert [f.storage for f in lay.fields] == ["reference", "ghost", "inline", "ghost"]
    assert [f.member.offset if f.member else None for f in lay.fields] == [0, None, 8, None]
    assert lay.fields[1].field_type == tx.JuliaType("NNlib.#relu")
    assert lay.h5type.committed_at is not None and lay.h5type.size == 16


def test_ghost_namedtuples_and_tuples() -> None:
    b = Builder()
    nothing = b.ghost("Core.Nothing")
    empty = b.ghost("Tuple")
    names = b.names_tuple(["a", "b"])
    tt = b.jt_dataset("Core.Tuple", [nothing, empty])
    nt = b.ghost("Core.NamedTuple", [names, tt])
    b.link("x", b.dataset(shared(nt), space("null"), b""))
    empty_names = b.dataset(shared(empty), space("null"), b"")
    b.link("e", b.dataset(shared(b.ghost("Core.NamedTuple", [empty_names, empty])), space("null"), b""))
    b.link("m", b.dataset(shared(b.ghost("Base.Missing")), space("null"), b""))
    raw = _build(b)
    assert tx.load(raw, "x") == NamedTuple(a=None, b=())
    assert tx.load(raw, "e") == NamedTuple()
    assert tx.load(raw, "m") is MISSING
    assert _jt_str(raw, "e") == "NamedTuple{(), Tuple{}}"


def test_namedtuple_with_inline_tuple_field() -> None:
    b = Builder()
    i64 = b.jt_dataset("Core.Int64")
    two = b.int_dataset(2)
    ntuple = b.commit(t_compound([("1", t_int(8), 8), ("2", t_int(8), 8)]), b.jt("NTuple", [two, i64]))
    members = [("stride", t_compound([("1", t_int(8), 8), ("2", t_int(8), 8)]), 16)]
    nt = _namedtuple(b, ["stride"], members, [ntuple], [ntuple])
    b.link("x", b.dataset(shared(nt), space("scalar"), struct.pack("<qq", 3, 4)))
    x = _one(b)
    assert x == NamedTuple(stride=(np.int64(3), np.int64(4)))


def _dict_to_int(b: Builder, key_type: str, key_member: tuple[bytes, int], keys: list[bytes]) -> int:
    """A ``Dict{K,Int64}`` as JLD2 writes it (``SerializedDict`` of a vector of ``Pair``s): keys
    stored as ``key_member`` (encoded type, size) with bytes ``keys``, values 1, 2, ..."""
    k, i = b.jt_dataset(key_type), b.jt_dataset("Core.Int64")
    pair = b.commit(t_compound([("first", *key_member), ("second", t_int(8), 8)]), b.jt("Core.Pair", [k, i]))
    kv = b.dataset(
        shared(pair),
        space("simple", [len(keys)]),
        b"".join(key + struct.pack("<q", n) for n, key in enumerate(keys, 1)),
    )
    sd = b.commit(
        t_compound([("kvvec", t_ref(), 8)]), b.jt("Base.Dict", [k, i]), written=b.jt("JLD2.SerializedDict")
    )
    return b.dataset(shared(sd), space("scalar"), _ref(kv))


def test_dict_and_pair() -> None:
    b = Builder()
    b.link("d", _dict_to_int(b, "Core.String", (t_vlen_string(), 16), [b.vstr("a"), b.vstr("σ")]))
    raw = _build(b)
    d = tx.load(raw, "d")
    assert d == {"a": 1, "σ": 2} and all(type(v) is np.int64 for v in d.values())
    assert _jt_str(raw, "d") == "Dict{String, Int64}"
    with tx.open(raw) as f:
        node = f["d"]
        assert node.kind == "dict" and node.keys() == ["a", "σ"] and node["σ"].read() == 2
        assert node["σ"].path == ("d", "σ")


def test_a_large_dict_with_a_string_key_twice_keeps_every_entry() -> None:
    # Keys decoded in bulk (a Dict of 40 String keys) and found equal: a damaged or hand-made
    # file, since Julia's Dict has each key once. Every entry is kept, as for a small Dict.
    b = Builder()
    keys = [f"k{n}" for n in range(39)] + ["k7"]
    b.link("d", _dict_to_int(b, "Core.String", (t_vlen_string(), 16), [b.vstr(k) for k in keys]))
    b.link("ok", _dict_to_int(b, "Core.String", (t_vlen_string(), 16), [b.vstr(k) for k in keys[:39]]))
    raw = _build(b)
    d = tx.load(raw, "d")
    assert isinstance(d, JuliaStruct) and list(d.fields) == ["kvvec"]
    assert [(p["first"], p["second"]) for p in d["kvvec"].tolist()] == list(zip(keys, range(1, 41)))
    assert tx.load(raw, "ok") == {k: n for n, k in enumerate(keys[:39], 1)}
    with tx.open(raw) as f:
        assert f["d"].kind == "struct" and f["d"].keys() == ["kvvec"]
        node = f["ok"]
        assert node.kind == "dict" and node.keys() == keys[:39]
        assert node["k38"].read() == 39 and "k7" in node and "k39" not in node
        with pytest.raises(KeyError):
            node["k39"]


def test_dict_keys_equal_in_python_keep_every_entry() -> None:
    # Julia's Dict(:a => 1, "a" => 2) has two entries; a Python dict would keep one.
    b = Builder()
    sym = b.dataset(shared(b.symbol_type()), space("scalar"), b.vstr("a"))
    text = b.dataset(t_vlen_string(), space("scalar"), b.vstr("a"))
    b.link("d", _dict_to_int(b, "Core.Any", (t_ref(), 8), [_ref(sym), _ref(text)]))
    other = b.dataset(t_vlen_string(), space("scalar"), b.vstr("b"))
    b.link("ok", _dict_to_int(b, "Core.Any", (t_ref(), 8), [_ref(sym), _ref(other)]))
    raw = _build(b)
    d = tx.load(raw, "d")
    assert isinstance(d, JuliaStruct) and str(d.type) == "Dict{Any, Int64}" and list(d.fields) == ["kvvec"]
    pairs = d["kvvec"].tolist()
    assert [(type(p["first"]), p["first"], p["second"]) for p in pairs] == [(Symbol, "a", 1), (str, "a", 2)]
    assert tx.load(raw, "ok") == {Symbol("a"): 1, "b": 2}
    with tx.open(raw) as f:
        node = f["d"]
        assert node.kind == "struct" == kind_of(d) and node.keys() == ["kvvec"]
        paths = [child.path for _, child in node["kvvec"].children()]
        assert paths == [("d", "kvvec", 1), ("d", "kvvec", 2)]  # two children, two paths
        assert [p["second"].read() for p in node["kvvec"]] == [1, 2]
        assert f["ok"].kind == "dict" and f["ok"].keys() == [Symbol("a"), "b"]


def test_ntuple_written_as_vector() -> None:
    b = Builder()
    i64 = b.jt_dataset("Core.Int64")
    n = b.int_dataset(11)
    one = b.int_dataset(1)
    arr_t = b.jt("Core.Array", [i64, one])
    nt = b.commit(t_ref(), b.jt("NTuple", [n, i64]), written=arr_t)
    vec = b.array(np.arange(11, dtype=np.int64))
    b.link("x", b.dataset(shared(nt), space("scalar"), _ref(vec)))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert x == tuple(range(11)) and all(type(v) is np.int64 for v in x)
    with tx.open(raw) as f:
        node = f["x"]
        assert node.kind == "tuple" and len(node) == 11 and node[10].read() == 10
        assert str(node.julia_type) == "NTuple{11, Int64}" and node[0].path == ("x", 1)


# Julia's BigInt under the names a file may give it: its defining module's (what JLD2 writes, e.g.
# a MersenneTwister's adv_jump field in ReservoirComputing's saved ESN state) and Base's alias.
BIGINT_NAMES = ["Base.GMP.BigInt", "Base.BigInt"]


@pytest.mark.parametrize("name", BIGINT_NAMES)
def test_bigint_and_generic_custom_serialization(name: str) -> None:
    b = Builder()
    big = b.commit(t_vlen_string(), b.jt(name), written=b.jt("Core.String"))
    b.link("big", b.dataset(shared(big), space("scalar"), b.vstr("-1z")))
    ser = b.commit(t_compound([("v", t_int(8), 8)]), b.jt("Main.Foo"), written=b.jt("Main.FooSerialization"))
    b.link("foo", b.dataset(shared(ser), space("scalar"), struct.pack("<q", 9)))
    raw = _build(b)
    big_value = tx.load(raw, "big")
    assert big_value == -(1 * 62 + 61) and isinstance(big_value, tx.BigInt)
    assert big_value.julia_name == name  # kept, so it is written back under the same name
    with tx.open(raw) as f:
        assert f["big"].kind == "number" and str(f["big"].julia_type) == "BigInt"
    foo = tx.load(raw, "foo")
    assert isinstance(foo, JuliaStruct) and foo.type.name == "Main.Foo" and foo["v"] == 9
    assert foo.layout.written_type == tx.JuliaType("Main.FooSerialization")


def test_base62_text_is_julias_both_ways() -> None:
    # Julia's string(n, base = 62) / parse(BigInt, s, base = 62), checked against digit-by-digit
    # division across the writer's 10-digit chunks.
    from treexchange._jld2._base62 import DIGITS, int_to_base62
    from treexchange._jld2._plans import base62_to_int

    def one_digit_at_a_time(n: int) -> str:
        out, m = "", abs(n)
        while m:
            m, d = divmod(m, 62)
            out = DIGITS[d] + out
        return ("-" if n < 0 else "") + (out or "0")

    for n in (0, 1, -1, 61, 62, 62**10 - 1, 62**10, 62**10 + 1, 62**20 * 5 + 3, -(62**25) - 5, 2**4000):
        text = int_to_base62(n)
        assert text == one_digit_at_a_time(n)
        assert base62_to_int(text, (), max_digits=2399) == n


@pytest.mark.parametrize("name", BIGINT_NAMES)
def test_bigint_beyond_printable_size_is_a_limit_error(name: str) -> None:
    most = tx.Limits().max_bigint_digits
    b = Builder()
    big = b.commit(t_vlen_string(), b.jt(name), written=b.jt("Core.String"))
    largest = "z" * most
    b.link("ok", b.dataset(shared(big), space("scalar"), b.vstr(largest)))
    b.link("huge", b.dataset(shared(big), space("scalar"), b.vstr("1" + "0" * 3000)))
    raw = _build(b)
    ok = tx.load(raw, "ok")
    assert ok == 62**most - 1 and len(str(ok)) <= 4300
    with tx.open(raw) as f:
        records = {tuple(r["path"]): r for r in iter_records(f, "ok")}
        assert records[("ok",)]["value"] == str(ok)  # inspect prints it as decimal text
        with pytest.raises(LimitError, match="BigInt of 3001 base-62 digits") as err:
            list(iter_records(f, "huge"))
        assert err.value.path == ("huge",)
    with pytest.raises(LimitError):
        tx.load(raw, "huge")


# --- hostile structures ------------------------------------------------------------------------------


def test_vlen_of_zero_size_elements_is_bounded_by_the_file_size() -> None:
    # An empty NamedTuple takes no bytes: a few heap bytes could claim millions of them.
    b = Builder()
    b.link("x", b.dataset(t_vlen(t_compound([])), space("scalar"), b.vlen(b"\x00" * 8, 5_000_000)))
    b.link("ok", b.dataset(t_vlen(t_compound([])), space("scalar"), b.vlen(b"\x00" * 8, 3)))
    raw = _build(b)
    assert tx.load(raw, "ok").tolist() == [NamedTuple()] * 3
    with pytest.raises(LimitError, match="zero-size elements per byte of file"):
        tx.load(raw, "x")


def test_vector_any_cycle_closes_on_one_list() -> None:
    """``v = Any[]; push!(v, v)`` is legal Julia: it loads as a list that holds itself."""
    b = Builder()
    any_t = b.jt_dataset("Core.Any")
    attr = Attr("julia_type", t_ref(), space("scalar"), _ref(any_t))
    addr = b.here()
    # The vector's only element is the vector itself.
    msgs_addr = b.dataset(t_ref(), space("simple", [1]), _ref(addr), [attr])
    assert msgs_addr == addr
    b.link("v", addr)
    for mmap in (True, False):
        v = tx.load(_build(b), "v", mmap=mmap)
        assert isinstance(v, list) and len(v) == 1 and v[0] is v


def test_type_parameter_cycle_is_refused() -> None:
    b = Builder()
    b.datatype_type()
    # A DataType dataset whose parameter is itself: its address is right after the heap
    # collection (4096 bytes, 8-aligned) that will hold the parameter list.
    name = b.vstr("Main.Loop")
    addr = -(-b.here() // 8) * 8 + 4096
    value = name + b.vlen(_ref(addr), 1)
    assert b.dataset(shared(b.datatype_type()), space("scalar"), value) == addr
    st = b.commit(t_compound([("a", t_int(8), 8)]), b.jt("Main.S", [addr]))
    b.link("x", b.dataset(shared(st), space("scalar"), bytes(8)))
    with pytest.raises(FormatError, match="refers back"):
        tx.load(_build(b), "x")


def test_deep_nesting_hits_the_depth_limit() -> None:
    b = Builder()
    any_t = b.jt_dataset("Core.Any")
    attr = Attr("julia_type", t_ref(), space("scalar"), _ref(any_t))
    inner = b.int_dataset(1)
    for _ in range(40):
        inner = b.dataset(t_ref(), space("simple", [1]), _ref(inner), [attr])
    b.link("v", inner)
    raw = _build(b)
    assert tx.load(raw, "v") is not None
    with pytest.raises(LimitError, match="max_depth"):
        tx.load(raw, "v", limits=Limits(max_depth=10))


def test_compound_member_outside_its_compound() -> None:
    b = Builder()
    bad = bytearray(t_compound([("a", t_int(8), 8)]))
    bad[4:8] = struct.pack("<I", 4)  # compound size 4 < member 8 bytes
    b.link("x", b.dataset(bytes(bad), space("scalar"), bytes(8)))
    with pytest.raises(FormatError):
        tx.load(b.finish(), "x")


# --- headers and other formats ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        "HDF5-based Julia Data Format, version 0.1",
        "HDF5-based Julia Data Format, version 0.1.0",
        "HDF5-based Julia Data Format, version 0.1.1",
        "HDF5-based Julia Data Format, version 0.2.0",
        "Julia data file (HDF5), version 0.2.0",
    ],
)
def test_header_variants(header: str) -> None:
    b = Builder(header)
    b.link("a", b.int_dataset(3))
    raw = b.finish()
    with tx.open(raw) as f:
        assert f.header == header and f.format_version == header.rsplit(" ", 1)[1]
        assert f.legacy_header == header.startswith("Julia data file")
        assert f["a"].read() == 3


def test_jld_v1_and_plain_hdf5(tmp_path: Path) -> None:
    b = Builder("Julia data file (HDF5), version 0.1.3")
    b.link("a", b.int_dataset(3))
    with pytest.raises(WrongFormatError, match=r"JLD \(v1\)"):
        tx.load(b.finish())
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["w"] = np.arange(6, dtype=np.float32).reshape(2, 3)
        f["g/s"] = 5
        f["t"] = "text"
    with pytest.raises(WrongFormatError, match="plain HDF5"):
        tx.open(path)
    data = tx.load(path, allow_hdf5=True)
    assert data["w"].shape == (3, 2) and np.array_equal(data["w"], np.arange(6).reshape(2, 3).T)
    assert data["g"] == {"s": 5} and data["t"] == "text"
    with tx.open(path, allow_hdf5=True) as f:
        node = f["w"]
        assert node.kind == "array" and node.shape == (3, 2) and np.array_equal(node[1, :], [1, 4])
    with pytest.raises(WrongFormatError, match="not an HDF5 file"):
        tx.load(b"definitely not hdf5" * 40)


def test_root_attributes() -> None:
    bio = io.BytesIO()
    with h5py.File(bio, "w", userblock_size=512) as f:
        f["x"] = 1.5
        f.attrs["schema"] = '{"version": 1}'
        f.attrs["grid"] = np.arange(6, dtype=np.int32).reshape(2, 3)
        f.attrs["one"] = np.float32(2.5)
    raw = bytearray(bio.getvalue())
    header = b"HDF5-based Julia Data Format, version 0.2.0\x00 (test)\x00"
    raw[: len(header)] = header
    with tx.open(bytes(raw)) as f:
        attrs = f.attrs
        assert attrs["schema"] == '{"version": 1}'
        assert attrs["grid"].shape == (3, 2) and attrs["grid"][2, 1] == 5  # Julia order
        assert type(attrs["one"]) is np.float32 and attrs["one"] == 2.5
        assert f["x"].read() == 1.5
    with tx.open(_build(Builder())) as f:
        assert f.attrs == {}


def test_types_used_as_values() -> None:
    from _jld2_builder import t_vlen

    b = Builder()
    dt = b.datatype_type()
    datatype = t_compound([("name", t_vlen_string(), 16), ("parameters", t_vlen(t_ref()), 16)])
    st = b.commit(t_compound([("T", datatype, 32)]), b.jt("Main.S"), b.field_attrs(["T"], [dt]))
    b.link("x", b.dataset(shared(st), space("scalar"), b.jt("Core.Float64")))
    b.link("t", b.jt_dataset("Core.Array", [b.jt_dataset("Core.Int8"), b.int_dataset(3)]))
    raw = _build(b)
    x = tx.load(raw, "x")
    assert x["T"] == tx.Singleton(tx.JuliaType("Core.Type", (tx.JuliaType("Core.Float64"),)))
    t = tx.load(raw, "t")
    assert isinstance(t, tx.Singleton) and str(t.type) == "Type{Array{Int8, 3}}"
    with tx.open(raw) as f:
        assert f["t"].kind == "singleton" and str(f["t"].julia_type) == "Type{Array{Int8, 3}}"
        assert f["x"]["T"].kind == "singleton"

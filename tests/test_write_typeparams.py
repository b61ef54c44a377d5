"""Type parameters that are values (StaticArrays' ``Tuple{2}``, ``Val{:x}``, negative and unsigned
integers, Chars) are written as JLD2 writes them and read back equal (issue 10, finding 5); type
names spelled differently for the same type compare equal (finding 6)."""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest

import treexchange
from treexchange import JuliaBits, JuliaStruct, JuliaType, NamedTuple, Singleton, Symbol, values_equal
from treexchange._values import canonical_type, same_type


def _sarray(size: str, n: int, ndims: int) -> JuliaStruct:
    t = JuliaType.parse(f"StaticArrays.SArray{{{size},Core.Float64,{ndims},{n}}}")
    return JuliaStruct(t, {"data": tuple(np.float64(i) for i in range(n))})


@pytest.mark.parametrize(
    ("size", "n", "ndims"),
    [("Tuple{2}", 2, 1), ("Tuple{2,3}", 6, 2), ("Tuple{2,2}", 4, 2), ("Tuple{3,1,2}", 6, 3)],
)
def test_static_arrays_with_value_tuple_parameters(tmp_path: Path, size: str, n: int, ndims: int) -> None:
    """Was "expected a type parameter, found the value np.int64(2)"."""
    value = _sarray(size, n, ndims)
    path = tmp_path / "s.jld2"
    treexchange.save(path, s=value, v=[value, value])
    with h5py.File(path) as f:
        assert f["s"].dtype.names == ("data",) and f["s"][()]["data"].tolist() == tuple(range(n))
    back = treexchange.load(path)
    assert values_equal(back["s"], value) and values_equal(back["v"], [value, value])
    assert same_type(back["s"].type, JuliaType.parse(f"StaticArrays.SArray{{{size},Float64,{ndims},{n}}}"))


def test_value_parameters_of_every_kind(tmp_path: Path) -> None:
    char = JuliaBits("Core.Char", b"a\x00\x00\x00"[::-1])  # Char 'a' (big-endian code unit)
    params = (
        JuliaType("Base.Val", (Symbol("x"),)),
        np.int64(-3),
        np.uint8(7),
        np.uint64(2**64 - 1),
        True,
        char,
        (Symbol("a"), Symbol("b")),
        JuliaType("Core.Tuple", (np.int64(1), JuliaType("Core.Tuple", (np.int64(-2),)))),  # nested
    )
    value = JuliaStruct(JuliaType("Main.W", params), {"a": np.float64(1)})
    ghost = Singleton(JuliaType("Main.Tag", (JuliaType("Base.Val", (np.int64(-1),)),)))
    path = tmp_path / "w.jld2"
    treexchange.save(path, w=value, g=ghost)
    back = treexchange.load(path)
    assert values_equal(back["w"], value)
    got = back["w"].type.params
    assert got[1] == -3 and got[2] == 7 and got[3] == 2**64 - 1 and got[4] is True
    assert isinstance(got[2], np.uint8) and isinstance(got[3], np.uint64)
    assert got[5] == char and got[6] == (Symbol("a"), Symbol("b"))
    assert back["g"] == ghost


def test_type_names_are_compared_normalized() -> None:
    pairs = [
        ("Core.Tuple{Core.Int64,Core.Float64}", "Tuple{Int64, Float64}"),
        ("NTuple{2,Core.Int64}", "Tuple{Int64,Int64}"),
        ("Tracker.Call{Core.Nothing,Core.Tuple}", "Tracker.Call{Nothing,Tuple}"),
        ("Base.Dict{Core.Symbol,Core.Any}", "Dict{Symbol,Any}"),
    ]
    for stored, written in pairs:
        a, b = JuliaType.parse(stored), JuliaType.parse(written)
        assert same_type(a, b) and canonical_type(a) == canonical_type(b)
        assert Singleton(a) == Singleton(b) and hash(Singleton(a)) == hash(Singleton(b))
        assert JuliaStruct(a, {"x": 1}) == JuliaStruct(b, {"x": 1})
    assert not same_type(JuliaType.parse("Main.Foo"), JuliaType.parse("Other.Foo"))
    assert not same_type(JuliaType.parse("Tuple{Int64}"), JuliaType.parse("Tuple{Int32}"))
    # The stored spelling itself is kept (byte identity writes it back as it was).
    assert JuliaType.parse("Core.Tuple{Core.Int64}").qualified() == "Core.Tuple{Core.Int64}"
    assert values_equal(
        NamedTuple(f=Singleton(JuliaType.parse("Core.Tuple{Core.Int64}"))),
        NamedTuple(f=Singleton(JuliaType.parse("Tuple{Int64}"))),
    )


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        (
            "StaticArrays.SArray{NTuple{2,2},Core.Float64,2,4}",
            "StaticArrays.SArray{Tuple{2, 2}, Float64, 2, 4}",
        ),
        ("NTuple{2,Core.Int64}", "Tuple{Int64, Int64}"),
        ("NTuple{4,Core.Int64}", "NTuple{4, Int64}"),
        ("Tuple{Float64,Float64,Float64,Float64}", "NTuple{4, Float64}"),
        ("Tuple{Float64,Float64,Float64}", "Tuple{Float64, Float64, Float64}"),
        ("Tuple{3,1,2}", "Tuple{3, 1, 2}"),
        ("Tuple{}", "Tuple{}"),
    ],
)
def test_tuple_types_print_as_julia_shows_them(stored: str, shown: str) -> None:
    t = JuliaType.parse(stored)
    assert str(t) == shown
    assert JuliaType.parse(t.qualified()) == t  # the stored spelling is kept for writing back


def test_value_parameters_print_as_julia_shows_them(tmp_path: Path) -> None:
    def char(c: str) -> JuliaBits:  # UTF-8 bytes left-aligned in a big-endian UInt32, stored little-endian
        return JuliaBits("Core.Char", c.encode().ljust(4, b"\x00")[::-1])

    params = (
        char("a"), char("é"), char("'"), char("\n"),
        np.uint8(7), np.uint16(7), np.uint64(2**64 - 1), np.int32(-3), np.int64(5),
        np.float32(1.5), np.float32(1e-8), np.float16(0.5), np.float64(2.0), True, Symbol("x"),
    )  # fmt: skip
    value = JuliaStruct(JuliaType("Main.W", params), {"a": np.float64(1)})
    treexchange.save(tmp_path / "w.jld2", w=value)
    shown = (
        "Main.W{'a', 'é', '\\'', '\\n', 0x07, 0x0007, 0xffffffffffffffff, -3, 5, 1.5f0, 1.0f-8, "
        "Float16(0.5), 2.0, true, :x}"
    )
    assert str(treexchange.load(tmp_path / "w.jld2", "w").type) == shown
    with treexchange.open(tmp_path / "w.jld2") as f:
        assert str(f["w"].julia_type) == shown

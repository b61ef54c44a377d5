"""The writer agrees with itself by construction (issue 10): the datatype written is the one the
bytes follow, whatever order types are met in; and ``convert`` checks its output before it
replaces the target. h5py is the independent reader; ``treexchange.load`` must read it back too."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import treexchange
from treexchange import (
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    JuliaType,
    NamedTuple,
    Symbol,
    WriteError,
    values_equal,
)
from treexchange._cli import main
from treexchange._jld2._writer import JLD2Writer
from treexchange._save import atomic_write, convert, verify_output


def _enum(name: str, value: int, nbytes: int) -> JuliaBits:
    return JuliaBits(name, value.to_bytes(nbytes, "little", signed=True))


@pytest.mark.parametrize("nbytes", [1, 4, 8])
def test_vector_of_an_enum_is_stored_inline_as_jld2_does(tmp_path: Path, nbytes: int) -> None:
    """Was ``AssertionError: contiguous data is 12 bytes, expected 16`` (a 4-byte ``@enum``)."""
    colors = JuliaArray("Main.Color", [_enum("Main.Color", i, nbytes) for i in (0, 2, 1, -1)])
    path = tmp_path / "e.jld2"
    treexchange.save(path, colors=colors, one=_enum("Main.Color", 1, nbytes))
    with h5py.File(path) as f:
        assert f["colors"].shape == (4,) and f["colors"].dtype.itemsize == nbytes  # opaque, inline
        raw = f["colors"][()].tobytes()
    assert [
        int.from_bytes(raw[i : i + nbytes], "little", signed=True) for i in range(0, 4 * nbytes, nbytes)
    ] == [
        0,
        2,
        1,
        -1,
    ]
    back = treexchange.load(path)
    assert back["colors"] == colors and back["one"] == _enum("Main.Color", 1, nbytes)


def _sector(i: int) -> JuliaStruct:
    return JuliaStruct("Main.Sector", {"j": np.int64(i), "k": np.int32(-i), "m": np.float64(i / 2)})


def test_struct_first_met_as_a_type_parameter_is_laid_out_inline(tmp_path: Path) -> None:
    """TensorKit-like: ``Space{Tuple{Sector,Sector}}`` names ``Sector`` before any value shows its
    layout; an array of ``Tuple{Sector,Sector}`` follows. Was a broken file (the tuple declared
    as two references, the sectors written inline); now both are inline compounds, as in JLD2."""
    space = JuliaStruct(JuliaType.parse("Main.Space{Tuple{Main.Sector, Main.Sector}}"), {"n": np.int64(2)})
    pairs = JuliaArray(
        JuliaType.parse("Tuple{Main.Sector, Main.Sector}"),
        [(_sector(1), _sector(2)), (_sector(3), _sector(4)), (_sector(5), _sector(6))],
    )
    path = tmp_path / "t.jld2"
    treexchange.save(path, space=space, pairs=pairs, nested=NamedTuple(p=pairs, s=_sector(7)))
    with h5py.File(path) as f:
        ds = f["pairs"]
        assert ds.shape == (3,) and ds.dtype.names == ("1", "2")
        assert ds.dtype["1"].names == ("j", "k", "m")  # an inline compound, not a reference
        assert ds.dtype.itemsize == 2 * (8 + 4 + 8)
        assert [int(x) for x in ds[()]["2"]["j"]] == [2, 4, 6]
    back = treexchange.load(path)
    assert values_equal(back["pairs"], pairs)  # NTuple{2,Sector} == Tuple{Sector,Sector}
    assert values_equal(back["nested"], NamedTuple(p=pairs, s=_sector(7)))
    assert values_equal(back["space"], space)


def test_a_type_laid_out_as_a_reference_stays_one(tmp_path: Path) -> None:
    """Written value by value (no ``prepare``): an empty ``Vector{Main.G}`` is laid out before
    any ``G`` is seen, as references; every later ``G`` element and field follows that decision
    instead of switching to inline bytes under the same datatype."""
    g = [JuliaStruct("Main.G", {"a": np.int64(i), "b": np.int32(i)}) for i in range(3)]
    path = tmp_path / "r.jld2"
    with open(path, "wb") as out:
        w = JLD2Writer(out)
        w.write("empty", JuliaArray("Main.G", []))
        w.write("full", JuliaArray("Main.G", g))
        w.write("holder", JuliaStruct("Main.H", {"g": g[0], "v": JuliaArray("Main.G", g[1:])}))
        w.close()
    with h5py.File(path) as f:
        assert h5py.check_dtype(ref=f["full"].dtype) is h5py.Reference
        assert [int(f[r][()]["a"]) for r in f["full"][()]] == [0, 1, 2]
    back = treexchange.load(path)
    assert back["empty"] == JuliaArray("Main.G", [])
    assert back["full"] == JuliaArray("Main.G", g)
    assert values_equal(back["holder"], JuliaStruct("Main.H", {"g": g[0], "v": JuliaArray("Main.G", g[1:])}))


def test_dataframe_like_column_of_structs(tmp_path: Path) -> None:
    """Was ``compact data is 24 bytes, expected 16`` (a DataFrame column of structs)."""
    rows = JuliaArray(
        "Main.Graph", [JuliaStruct("Main.Graph", {"ne": np.int64(i), "w": np.float64(i)}) for i in range(4)]
    )
    index = JuliaStruct(
        "DataFrames.Index",
        {
            "lookup": JuliaDict({Symbol("g"): np.int64(1), Symbol("x"): np.int64(2)}),
            "names": JuliaArray("Core.Symbol", [Symbol("g"), Symbol("x")]),
        },
    )
    frame = JuliaStruct("DataFrames.DataFrame", {"columns": [rows, np.arange(4.0)], "colindex": index})
    path = tmp_path / "df.jld2"
    treexchange.save(path, df=frame, graphs=JuliaArray("Main.Graph", list(rows)))
    with h5py.File(path) as f:
        assert f["graphs"].dtype.names == ("ne", "w")
    back = treexchange.load(path)
    assert values_equal(back["df"], frame)


def test_element_that_does_not_match_its_array_type_is_a_write_error(tmp_path: Path) -> None:
    """A JuliaArray whose elements disagree with its declared element type never becomes bytes
    that disagree with the datatype: the element is named."""
    odd = JuliaArray("Main.Color", [_enum("Main.Color", 1, 4), _enum("Main.Color", 2, 8)])
    with pytest.raises(treexchange.TreexchangeError) as info:
        treexchange.save(tmp_path / "o.jld2", odd=odd)
    assert info.value.path == ("odd", 2) and "needs 4 bytes, found 8" in str(info.value)
    assert list(tmp_path.iterdir()) == []


# --- convert checks its output ---------------------------------------------------------------


def test_convert_verifies_by_default_and_no_verify_skips(tmp_path: Path) -> None:
    src = tmp_path / "in.jld2"
    pairs = JuliaArray(JuliaType.parse("Tuple{Main.Sector, Main.Sector}"), [(_sector(1), _sector(2))])
    treexchange.save(src, pairs=pairs, cfg=JuliaDict(lr=0.5), w=np.arange(6.0).reshape(2, 3))
    out = tmp_path / "out.jld2"
    assert main(["convert", str(src), str(out)]) == 0
    assert values_equal(treexchange.load(out), treexchange.load(src))
    out.unlink()
    assert main(["convert", str(src), str(out), "--no-verify"]) == 0
    assert values_equal(treexchange.load(out), treexchange.load(src))


def test_a_failed_check_leaves_the_target_untouched(tmp_path: Path) -> None:
    src = tmp_path / "in.jld2"
    treexchange.save(src, a=np.arange(3.0))
    target = tmp_path / "out.jld2"
    target.write_bytes(b"previous")

    def write(f: Any) -> None:
        f.write(src.read_bytes())

    with pytest.raises(WriteError, match="different values for: a"):
        atomic_write(target, write, check=lambda tmp: verify_output(tmp, [("a", np.arange(4.0))]))
    assert target.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.jld2", "out.jld2"]


def test_an_unreadable_output_is_a_write_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jld2"
    bad.write_bytes(b"\x89HDF not really" * 40)
    with pytest.raises(WriteError, match="cannot be read back"):
        verify_output(str(bad), [("a", 1)])


def test_convert_of_a_fixture_with_a_julia_16_type_spelling_verifies(tmp_path: Path) -> None:
    from conftest import FIXTURES

    src = FIXTURES / "flux-model-zoo" / "temp.jld2"
    if not src.exists():
        pytest.skip("fixture flux-model-zoo/temp.jld2 absent")
    out = tmp_path / "out.jld2"
    convert(src, out)  # Core.Tuple (stored) vs Tuple (written): the same type, values equal
    assert values_equal(treexchange.load(out), treexchange.load(src))


def _self_identity_cases() -> dict[str, dict[str, Any]]:
    enum = JuliaArray("Main.Color", [_enum("Main.Color", i, 4) for i in range(4)])
    space = JuliaStruct(JuliaType.parse("Main.Space{Tuple{Main.Sector, Main.Sector}}"), {"n": np.int64(2)})
    pairs = JuliaArray(JuliaType.parse("Tuple{Main.Sector, Main.Sector}"), [(_sector(1), _sector(2))])
    sarray = JuliaStruct(
        JuliaType.parse("StaticArrays.SArray{Tuple{2,3},Core.Float64,2,6}"),
        {"data": tuple(np.float64(i) for i in range(6))},
    )
    val = JuliaType("Base.Val", (Symbol("x"),))
    params = JuliaStruct(JuliaType("Main.W", (val, np.int64(-3), np.uint8(7))), {"a": np.float64(1)})
    return {
        "enum": {"c": enum},
        "sector": {"space": space, "pairs": pairs},
        "values": {"s": sarray, "w": params},
        "dicts": {"cfg": JuliaDict(lr=0.5, n=3), "ps": {"layer_1": {"weight": np.ones((2, 2), np.float32)}}},
    }


@pytest.mark.parametrize("case", ["enum", "sector", "values", "dicts"])
def test_what_save_writes_convert_reproduces_byte_for_byte(tmp_path: Path, case: str) -> None:
    """The writer, the reader's layouts and the writer again agree: re-encoding our own file
    (``convert --keep-producer``) gives the same bytes, as for Julia's files."""
    first, second = tmp_path / "a.jld2", tmp_path / "b.jld2"
    treexchange.save(first, **_self_identity_cases()[case], producer=" (self)")
    convert(first, second, keep_producer=True)
    assert first.read_bytes() == second.read_bytes()

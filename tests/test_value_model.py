"""The value model and the Julia type AST: UNDEF, JuliaArray's length/iteration/indexing, and
JuliaType parsing and printing edge cases."""

from __future__ import annotations

import copy
import pickle
import typing
from pathlib import Path

import numpy as np
import pytest

import treexchange as tx
from treexchange import UNDEF, FormatError, JuliaArray, JuliaType
from treexchange._typeof import Kind, julia_type_of, kind_of

# --- UNDEF ------------------------------------------------------------------------------------------


def test_undef_is_a_singleton_sentinel_of_kind_singleton() -> None:
    assert tx.Undef() is UNDEF and copy.deepcopy(UNDEF) is UNDEF
    assert pickle.loads(pickle.dumps(UNDEF)) is UNDEF
    assert repr(UNDEF) == "UNDEF"
    assert kind_of(UNDEF) == "singleton" and kind_of(UNDEF) in typing.get_args(Kind)
    # No value has the bottom type, as no value is stored for an undefined reference.
    assert str(julia_type_of(UNDEF)) == "Union{}"
    assert UNDEF is not None and not tx.values_equal(UNDEF, None)
    with pytest.raises(TypeError, match="undef"):
        bool(UNDEF)


# --- JuliaArray: len, iteration and integer indexing agree (Julia's length / linear indexing) ----------


def test_julia_array_len_iter_and_index_are_julia_linear() -> None:
    grid = np.empty((2, 3), dtype=object)
    for i in range(2):
        for j in range(3):
            grid[i, j] = f"{i}{j}"
    a = JuliaArray("Core.String", grid)
    column_major = ["00", "10", "01", "11", "02", "12"]
    assert list(a) == column_major == a.tolist()
    assert len(a) == 6 == len(list(a))
    assert [a[k] for k in range(len(a))] == column_major
    assert a[-1] == "12" and a[np.int64(3)] == "11"
    assert a[1, 2] == "12" and list(a[:, 0]) == ["00", "10"]  # tuples and slices index `data`
    with pytest.raises(IndexError):
        a[6]
    v = JuliaArray("Core.Symbol", [tx.Symbol("a"), tx.Symbol("b")])
    assert len(v) == 2 and v[1] == "b" and list(v) == ["a", "b"]


def test_julia_array_length_matches_the_lazy_node() -> None:
    from _jld2_builder import Builder, space, t_vlen_string

    b = Builder()
    data = b"".join(b.vstr(s) for s in "abcdef")
    b.link("m", b.dataset(t_vlen_string(), space("simple", [3, 2]), data))  # Julia 2×3
    raw = b.finish()
    m = tx.load(raw, "m")
    with tx.open(raw) as f:
        node = f["m"]
        assert m.shape == (2, 3) == node.shape
        assert len(m) == len(node) == 6
        assert [node[k].read() for k in range(6)] == list(m) == list("abcdef")


# --- JuliaType --------------------------------------------------------------------------------------


def test_union_bottom_prints_with_braces() -> None:
    assert str(JuliaType.parse("Union{}")) == "Union{}"
    assert str(JuliaType.parse("Core.Array{Core.Union{},1}")) == "Array{Union{}, 1}"
    assert str(JuliaType.parse("Union{Nothing, Float64}")) == "Union{Nothing, Float64}"
    assert str(JuliaType.parse("Tuple{}")) == "Tuple{}"


def test_integer_parameters_beyond_int64_stay_exact() -> None:
    t = JuliaType.parse("Foo{9999999999999999999999, -3, 9223372036854775807}")
    big, small, edge = t.params
    assert type(big) is int and big == 9999999999999999999999
    assert type(small) is np.int64 and type(edge) is np.int64
    assert str(t) == "Foo{9999999999999999999999, -3, 9223372036854775807}"
    assert JuliaType.parse(t.qualified()) == t
    with pytest.raises(FormatError, match="integer too long"):
        JuliaType.parse("Foo{" + "9" * 5000 + "}")


def test_parse_errors_quote_a_bounded_part_of_the_text() -> None:
    text = "Foo{" + "a," * 2000 + "(}"
    with pytest.raises(FormatError) as err:
        JuliaType.parse(text)
    message = str(err.value)
    assert len(message) < 300 and f"({len(text)} chars)" in message
    with pytest.raises(FormatError, match="not a type"):
        JuliaType.parse("1.5")


def test_a_struct_of_zero_size_fields_equals_its_singleton(tmp_path: Path) -> None:
    """``DataFrames.ByRow{typeof(f)}`` holding the function ``f`` is a zero-size type: BSON.jl
    stores its field, JLD2 nothing (it reads back as the singleton), so ``convert`` BSON -> JLD2
    refused its own output as "reads back different values" (GenieFramework/ScoringEngineDemo's
    preprocessing file). Equal now; a struct with data is not its type's singleton."""
    by_row = "DataFrames.ByRow{Main.#pol_map}"
    struct = tx.JuliaStruct(by_row, {"1": tx.Singleton("Main.#pol_map")})
    tx.save(tmp_path / "g.jld2", f=struct)
    back = tx.load(tmp_path / "g.jld2", "f")
    assert type(back) is tx.Singleton
    assert tx.values_equal(struct, back) and tx.values_equal(back, struct)
    nested = tx.JuliaStruct(by_row, {"1": (tx.Singleton("Main.#pol_map"), None, tx.NamedTuple())})
    assert tx.values_equal(nested, tx.Singleton(by_row))
    assert not tx.values_equal(tx.JuliaStruct(by_row, {"1": 1}), tx.Singleton(by_row))
    assert not tx.values_equal(struct, tx.Singleton("DataFrames.ByRow{Main.#other}"))

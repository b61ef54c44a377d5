"""One implementation per contract: where two parts of the package must agree, they call one function.

- the Julia type of a Python value: ``julia_type_of`` (``inspect``, the schema) and the writer's
  ``TypeFactory.of_value`` both run ``_typeof.type_of``; here they are compared on a broad set of values;
- the JSON form of scalars and the array digest (``_jsonform``): ``inspect --json`` and the schema
  print the same ``value`` / ``enum`` and ``sha256`` for the same file;
- tree paths: errors, mismatches and ``inspect``'s text print them with ``_errors.format_path``.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import treexchange as tx
from treexchange._jld2._writer_types import TypeFactory
from treexchange._typeof import julia_type_of

_DTYPES = ["?", "i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f2", "f4", "f8", "c8", "c16", ">f4", ">i8"]
_CHAR = tx.JuliaBits("Core.Char", b"\x00\x00\x00a")  # 'a' (0x61000000, little-endian)


def _typed_dict(items: dict[object, object], julia_type: str) -> tx.JuliaDict:
    out = tx.JuliaDict(items)
    out.julia_type = tx.JuliaType.parse(julia_type)
    return out


def _values() -> dict[str, object]:
    out: dict[str, object] = {
        "namedtuple": tx.NamedTuple(weight=np.zeros((2, 3), np.float32), bias=np.zeros(2, np.float32), σ=()),
        "nested namedtuple": tx.NamedTuple(layers=(tx.NamedTuple(w=np.ones(2)), tx.NamedTuple(w=None))),
        "empty namedtuple": tx.NamedTuple(),
        "tuple": (1, "a", tx.Symbol("x"), 2.5),
        "long homogeneous tuple": tuple(range(12)),
        "empty tuple": (),
        "list": [1, "a", None],
        "dict": {"a": 1.0, "b": 2.0},
        "dict of mixed values": {"a": 1, "b": "x"},
        "empty dict": {},
        "JuliaDict": tx.JuliaDict({1: "a", 2: "b"}),
        "dict of dicts": tx.JuliaDict({"g": tx.JuliaDict({"x": np.zeros(2)})}),
        # a Dict that remembers the type its file stored: kept while the entries fit it
        "IdDict kept": _typed_dict({"a": 1.0}, "Base.IdDict{Any, Any}"),
        "ImmutableDict kept": _typed_dict({"a": 1.0}, "Base.ImmutableDict{Core.String, Core.Float64}"),
        "Dict{Any, Any} of floats kept": _typed_dict({"a": 1.0, "b": 2.0}, "Base.Dict{Core.Any, Core.Any}"),
        "Dict of an abstract value type kept": _typed_dict({"a": 1.0}, "Base.Dict{Core.String, Core.Real}"),
        "Dict whose entries no longer fit": _typed_dict({"a": "x"}, "Base.Dict{Core.String, Core.Float64}"),
        "struct": tx.JuliaStruct("Main.Foo", {"x": 1.0, "y": np.int32(2)}),
        "parametric struct": tx.JuliaStruct("Main.Foo{Float64}", {"x": 1.0}),
        "string": "hello",
        "empty string": "",
        "Symbol": tx.Symbol("relu"),
        "Char": _CHAR,
        "nothing": None,
        "missing": tx.MISSING,
        "Int128": tx.Int128(2**100),
        "UInt128": tx.UInt128(2**127),
        "int": 5,
        "negative int": -(2**63),
        "float": 1.5,
        "complex": 1 + 2j,
        "bool": True,
        "singleton": tx.Singleton("Main.Relu"),
        "JuliaArray of strings": tx.JuliaArray("Core.String", np.array(["a", "b"], dtype=object)),
        "JuliaArray spelled by hand": tx.JuliaArray("UInt128", [tx.UInt128(1)]),
        "a type as a value": tx.JuliaType.parse("Core.Float64"),
        "bfloat16 array": np.zeros((2, 2), ml_dtypes.bfloat16),
        "bfloat16 scalar": ml_dtypes.bfloat16(1.5),
        "0-d array": np.zeros((), np.float32),
    }
    for dt in _DTYPES:
        out[f"array {dt}"] = np.zeros((3, 2), dt)
        out[f"numpy scalar {dt}"] = np.zeros((), dt)[()]
    return out


_VALUES = _values()


@pytest.mark.parametrize("name", sorted(_VALUES))
def test_writer_and_julia_type_of_agree(name: str) -> None:
    value = _VALUES[name]
    assert TypeFactory().of_value(value).key == julia_type_of(value).qualified()


def test_jax_arrays_type_the_same() -> None:
    import jax.numpy as jnp

    for dt in ("float32", "int32", "bfloat16", "bool", "uint8"):
        a = jnp.zeros((2, 3), dt)
        expected = julia_type_of(np.asarray(a)).qualified()
        assert TypeFactory().of_value(a).key == julia_type_of(a).qualified() == expected


def test_where_the_writer_differs_it_is_storage() -> None:
    """The writer stores a ``Type{T}`` value as a DataType (what JLD2 does) and refuses ``#undef``
    where JLD2 keeps no reference; the type named is the same rule's."""
    type_value = tx.Singleton("Core.Type{Core.Float64}")
    assert julia_type_of(type_value).qualified() == "Core.Type{Core.Float64}"
    assert TypeFactory().of_value(type_value).key == "Core.DataType"
    assert julia_type_of(tx.UNDEF).qualified() == "Core.Union"
    with pytest.raises(tx.ConversionError, match="#undef"):
        TypeFactory().of_value(tx.UNDEF)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (2**63 - 1, "Core.Int64"),
        (2**63, "Core.Int128"),
        (2**128 - 1, "Core.UInt128"),
        (2**128, "Base.GMP.BigInt"),
        (-(2**127) - 1, "Base.GMP.BigInt"),
        (tx.BigInt(0), "Base.GMP.BigInt"),
        (tx.BigInt(0, "Base.BigInt"), "Base.BigInt"),
    ],
)
def test_both_type_python_ints_alike(value: int, expected: str) -> None:
    # A Python int takes the narrowest of Int64, Int128, UInt128, else BigInt (as the bridge
    # converts it); a tx.BigInt stays a BigInt under the name it was read with.
    assert julia_type_of(value).qualified() == expected
    assert TypeFactory().of_value(value).key == expected


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (tx.Int128(2**127), "does not fit Int128"),
        (tx.UInt128(-1), "does not fit UInt128"),
        ({1, 2}, "has no Julia counterpart"),
        (np.zeros(2, object), "no Julia element type"),
        (tx.JuliaBits("Main.E", b""), "no bytes"),
        (tx.NamedTuple(a=(1, object())), "has no Julia counterpart"),
    ],
)
def test_both_refuse_the_same_values(value: object, message: str) -> None:
    with pytest.raises(tx.ConversionError, match=message) as a:
        julia_type_of(value)
    with pytest.raises(tx.ConversionError, match=message) as b:
        TypeFactory().of_value(value)
    assert a.value.path == b.value.path


# --- JSON form of scalars and arrays: inspect --json and the schema -----------------------------------


def _scalars() -> dict[str, object]:
    return {
        "nan": float("nan"),
        "minus_inf": np.float32(-np.inf),
        "inf16": np.float16(np.inf),
        "half": np.float16(0.1),
        "tenth": np.float32(0.1),
        "bf": ml_dtypes.bfloat16(0.1),
        "c64": np.complex64(1 + 0.1j),
        "c_nonfinite": complex(float("nan"), float("inf")),
        "char": _CHAR,
        "sym": tx.Symbol("relu"),
        "text": "text",
        "flag": True,
        "i128": tx.Int128(2**100),
        "small_i128": tx.Int128(-5),
        "u128": tx.UInt128(2**128 - 1),
        "u64_max": np.uint64(2**64 - 1),
        "i64_min": np.int64(-(2**63)),
        "int": 7,
        "small_bigint": tx.BigInt(3),
        "wide_int": -(2**200),
    }


def _bigint_file(name: str) -> bytes:
    from _jld2_builder import Builder, shared, space, t_vlen_string

    b = Builder()
    big = b.commit(t_vlen_string(), b.jt(name), written=b.jt("Core.String"))
    b.link("small_big", b.dataset(shared(big), space("scalar"), b.vstr("5")))
    b.link("huge_big", b.dataset(shared(big), space("scalar"), b.vstr("z" * 20)))  # 62**20 > 2**64
    return b.finish()


def _enums(doc: tx.Schema, names: list[str]) -> dict[str, object]:
    return {n: doc.node_at((n,)).enum for n in names}  # type: ignore[union-attr]


def test_inspect_and_schema_spell_scalars_alike(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from treexchange._inspect import iter_records

    path = tmp_path / "scalars.jld2"
    tx.save(path, **_scalars())
    with tx.open(path) as f:
        shown = {r["path"][0]: [r["value"]] for r in iter_records(f)}
    assert shown["nan"] == ["NaN"] and shown["minus_inf"] == ["-Infinity"] and shown["inf16"] == ["Infinity"]
    assert shown["tenth"] == [0.1] and shown["half"] == [0.1] and shown["c64"] == [[1.0, 0.1]]
    assert shown["i128"] == [str(2**100)] and shown["small_i128"] == ["-5"]
    assert shown["u64_max"] == [2**64 - 1] and shown["i64_min"] == [-(2**63)]
    assert shown["small_bigint"] == ["3"] and shown["wide_int"] == [str(-(2**200))]  # BigInts
    assert _enums(tx.infer_schema(path, values=True), list(shown)) == shown
    assert _enums(tx.infer_schema(tx.load(path), values=True), list(shown)) == shown

    docs = []
    for name in ("Base.GMP.BigInt", "Base.BigInt"):  # as JLD2 writes it; Base's alias
        raw = _bigint_file(name)
        with tx.open(raw) as f:
            shown = {r["path"][0]: [r["value"]] for r in iter_records(f)}
            doc = tx.infer_schema(f, values=True)
        # Every value of a type wider than 64 bits is decimal text, however small (JSON numbers
        # beyond 64 bits do not survive common parsers).
        assert shown == {"small_big": ["5"], "huge_big": [str(62**20 - 1)]}
        assert _enums(doc, list(shown)) == shown
        assert doc.node_at(("small_big",)).type == "BigInt"  # type: ignore[union-attr]
        docs.append(doc)
        with tx.open(raw) as f:
            assert tx.validate(f, doc) == []
    with tx.open(_bigint_file("Base.GMP.BigInt")) as f:
        assert tx.validate(f, docs[1]) == []  # one type, whichever of its names the file used


def test_one_checksum_for_inspect_and_schema(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from treexchange import _inspect, _jsonform
    from treexchange._inspect import iter_records
    from treexchange._schema import _sources

    assert _inspect.array_sha256 is _sources.array_sha256 is _jsonform.array_sha256
    path = tmp_path / "arrays.jld2"
    arrays = {f"a_{dt.replace('>', 'be')}": (np.arange(12) % 3).astype(dt).reshape(3, 4) for dt in _DTYPES}
    tx.save(path, **arrays, wide=tx.JuliaArray("Core.UInt128", [tx.UInt128(1), tx.UInt128(2**100)]))
    with tx.open(path) as f:
        shown = {r["path"][0]: r["sha256"] for r in iter_records(f)}
    doc = tx.infer_schema(path, checksums=True)
    assert {n: doc.node_at((n,)).sha256 for n in shown} == shown  # type: ignore[union-attr]


# --- tree paths: one type (_errors.TreePath), one formatter (_errors.format_path) -------------------


def test_inspect_text_prints_paths_as_errors_do(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from treexchange._errors import format_path
    from treexchange._inspect import text_lines

    node = tx.JuliaStruct("Main.Node", {"x": 1.0}, mutable=True)
    path = tmp_path / "shared.jld2"
    tx.save(path, **{"layer-1": [node, node], "ok": tx.NamedTuple(v=[node])})
    with tx.open(path) as f:
        text = "\n".join(text_lines(f))
    where = format_path(("layer-1", 1))
    assert where == "['layer-1'][1]" and text.count(f"(same object as {where})") == 2
    assert str(tx.Mismatch("shape", ("layer-1", 1), "x")) == f"{where}: shape x"

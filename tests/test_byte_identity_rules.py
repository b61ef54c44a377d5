"""General JLD2.jl rules behind byte identity found on real files outside ../shared (issue 24).

Each rule has a synthetic test that fails without it, and the real files that show it: they are
looked up by their corpus name (tests/corpus_sources.md) under ``$TREEXCHANGE_SHARED/julia_fixtures``
and skipped, with the reason, when absent.

- a struct custom-serialized as a ``String`` (``writeas(::Type{BigInt}) = String``, the same for
  ``BigFloat``): the committed type is the vlen string itself (``julia_type`` the struct,
  ``written_type`` ``Core.String``), the text stored inline in a struct (ReservoirComputing's ESN
  state: ``MersenneTwister.adv_jump``, a ``Base.GMP.BigInt`` read as a ``tx.BigInt``; a
  ``BigFloat`` reads as a ``tx.BigFloat``).
- ``Ptr{T}`` is custom-serialized as ``Nothing`` (JLD2's ``writeas(::Type{Ptr{T}}) = Nothing``,
  since v0.4.0): its committed type carries ``julia_type`` ``Ptr{T}`` *and* ``written_type``
  ``Nothing`` (CategoricalArrays' ``CategoricalPool`` has two ``Ptr{Nothing}`` fields).
- a Dict type whose parameter is a ``where`` type (``Dict{String, Array{Float64,N} where N}``,
  ``Dict{Type{<:AbstractGridComponent}, Any}``) keeps it: a ``UnionAll`` dataset.
- ``convert`` keeps what the input shows beyond its values (``_era.Source``): the ``Union``
  descriptions Julia printed (they depend on the session's imports) and the type parameters it
  wrote by name (a ghost ``Axis{...}`` the writer knows by name only).
- ``Pair`` keeps the module the writing Julia gave it (``Base.Pair`` before Julia 1.7).
- a file written with a write session per top-level name (the same String text in two datasets)
  is re-encoded so.
- a ``TypeVar`` is one object wherever the reader meets it (a ``UnionAll``'s ``var`` and its body).
- a struct or singleton type no value shows (an empty Dict's value type, a type parameter) is
  built from the layout the input committed (``Source.layouts``): JLD2 decides from the type.
- a second name of one object keeps its place in link order (``@save`` writes names sorted).
- ``convert --keep-format`` names links added in a later session (continued object headers) and
  zeros past the end-of-file address (Windows, a file opened for writing and closed unwritten).
- format 0.1.1 is written with the rules of the JLD2 release the input shows (``_era``): before
  v0.4.4 (groups without room for links), v0.4.19 (no ``NTuple`` naming), v0.4.41
  (``NTuple{1,T}``), v0.3.3 (Bool a committed opaque type), v0.4.42 (Dicts as
  ``Vector{Pair}``); v0.4.51 and v0.4.52 (a reserved NIL message, their layout choices, datatype
  messages of version 0). Each rule set is written, detected and reproduced byte for byte.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Mapping
from decimal import Decimal
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import FIXTURES

import treexchange as tx
from treexchange import JuliaArray, JuliaDict, JuliaStruct, JuliaType, Singleton, Symbol
from treexchange._cli import main
from treexchange._hdf5._lookup3 import lookup3
from treexchange._hdf5._objectheader import first_chunk
from treexchange._inspect import node_record
from treexchange._jld2 import _era
from treexchange._jld2._encode_hdf5 import VLEN_UTF8
from treexchange._jld2._era import REPORTED_TRAITS, Source, header_traits
from treexchange._jld2._layout import StructLayout
from treexchange._jld2._unlinked import _is_header, unlinked_headers
from treexchange._jld2._writefile import write_jld2
from treexchange._jld2._writer_arrays import JLD2_DEFLATE_PIPELINE, Compression
from treexchange._reader import File, read_objects
from treexchange._save import prepare_values, source_compression

# Real files (tests/corpus_sources.md, "issue 24") that show each rule, with the rule.
PTR_FILES = ["savindumahasen__Classification-Project-Based-on-Iris-dataset-__model.jld2"]
# A BigInt (custom-serialized as a String) in a MersenneTwister: ReservoirComputing's saved ESN state
# (tests/corpus_sources.md, "issue 24, second search").
STRING_FILES = ["SciML__ReservoirComputing.jl__dev_tutorials_esn_trained.jld2"]
CORPUS_011 = {
    "JuliaGeodynamics__GeophysicalModelGenerator.jl__test_download_GMG_temp.jld2": "NTuple{1,T}",
    "tristanth03__UROP__params_m_3LS_epo10.jld2": "IdDict as Vector{Pair}",
    "Wuheng10086__Fomo.jl__test.jld2": "Dict as Vector{Pair}",
    "Syndrius__CSAWParallel__test.jld2": "v0.4.51: NIL message, compact small arrays, datatype v0",
    "ComputationalThermodynamics__MAGEMinApp.jl__src_tools_OL12_b9b4788b.jld2": "v0.4.52+ layout",
    "Yonasbo__Bidomain-Model__test.jld2": "Dict{Type{<:T}, Any} (a where key type), Union description",
    "Philippe1123__QMCIntegrationInR.jl__res_NoMapping_31082021_17.jld2": "Base.Pair (Julia 1.5)",
    "natevmp__hsc-vaf-dynamics__data_LSData_NPSpace_21-06-15_LSData_NPSpaceInference_tM8_lVFS500_"
    "pureGrowthtrue.jld2": "Base.Pair (Julia 1.6)",
    "WilliamCam__SC-circuit-simulator__LC.jld2": "a write session per top-level name",
    "Atomtomate__EquivalenceClassesConstructor.jl__freqList_new.jld2": "Core.Tuple{Int64,...} (< v0.4.19)",
    "Atomtomate__EquivalenceClassesConstructor.jl__test.jld2": "Bool a committed opaque type (< v0.3.3)",
    "FilipSjovall__FictShapeOpt__123.jld2": "a TypeVar in a UnionAll value and its body",
    "sebastien-lemieux__horaires__data.jld2": "Vector{Union{Missing, String31}} of raw bits",
    "FilipSjovall__FictShapeOpt__f__rdig_cyl_80ba02f7.jld2": "an empty Dict{String, Set{T}}: T committed",
    "FilipSjovall__FictShapeOpt__n__stan_bra_cyl.jld2": "@save: two names of one array, names sorted",
    "eduardstan__MRBC.jl__model_d4b84e27.jld2": "a singleton type parameter, then an array of it",
}
# The third search (tests/corpus_sources.md, "issue 24, third search"; /tmp/corpus3): the issue's
# LsqFit file (LsqFitResult structs; their empty trace's LMState committed with no value of it) and
# the files of the rules found on them.
CORPUS_011.update(
    {
        "AdityaD16__QuantumNaturalfPEPS.jl__save.jld2": "Tuple{Any,Any} values; a name linked late",
        "ODINN-SciML__iceflow_sandbox__benchmark.jld2": "PyCall.PyObject: a mutable zero-size struct",
        "ODINN-SciML__iceflow_sandbox__benchmark_gla.jld2": "NTuple{1,T} in a type no value uses",
    }
)
PYOBJECT_FILES = ["ODINN-SciML__iceflow_sandbox__benchmark.jld2"]
THIRD_SEARCH_020 = [
    "pchantelot__Guided_elastic_waves_informed_material_modelling_of_soft_incompressible_media__"
    "fitparameters_1f33ba3b.jld2"
]
PRODUCER = " (Julia 1.9.4 64-bit LE)"


def _assert_byte_identical(path: Path, out: Path, *extra: str) -> None:
    assert main(["convert", str(path), str(out), "--keep-producer", *extra]) == 0
    original, written = path.read_bytes(), out.read_bytes()
    if written != original:
        first = next((i for i, (a, b) in enumerate(zip(written, original)) if a != b), None)
        pytest.fail(f"first difference at byte {first} (sizes {len(written)} vs {len(original)})")


# --- Ptr{T} written as Nothing ------------------------------------------------------------------


def test_a_pointer_field_is_committed_with_written_type_nothing(tmp_path: Path) -> None:
    ptr = Singleton(JuliaType("Core.Ptr", (JuliaType("Core.Nothing"),)))
    pool = JuliaStruct(JuliaType("Main.Pool"), {"hash": np.uint64(7), "subsetof": ptr, "equalto": ptr})
    path = tmp_path / "ptr.jld2"
    tx.save(path, pool=pool)
    data = path.read_bytes()
    # One committed type for Ptr{Nothing} (both fields share it), custom-serialized as Nothing:
    # its julia_type (Ptr{Nothing}, whose parameter is a Nothing DataType dataset) and its
    # written_type (Nothing, another DataType dataset: each attribute has its own session).
    assert data.count(b"written_type") == 1
    assert data.count(b"Core.Nothing") == 2
    assert tx.values_equal(tx.load(path)["pool"], pool)


# --- where types as Dict parameters -------------------------------------------------------------


def _where_array() -> JuliaStruct:
    """``Array{Float64, N} where N``: a UnionAll value (var: a TypeVar; body: Array{Float64, N})."""
    n = JuliaStruct(JuliaType("Core.TypeVar"), {"name": Symbol("N"), "lb": None, "ub": None}, mutable=True)
    body = JuliaType("Core.Array", (JuliaType("Core.Float64"), n))
    return JuliaStruct(JuliaType("Core.UnionAll"), {"var": n, "body": body})


def test_a_dict_keeps_a_where_type_parameter(tmp_path: Path) -> None:
    declared = JuliaType("Base.Dict", (JuliaType("Core.String"), _where_array()))
    d = JuliaDict({"a": np.arange(3.0), "b": np.ones((2, 2))})
    d.julia_type = declared
    path = tmp_path / "d.jld2"
    tx.save(path, d=d)
    back = tx.load(path)["d"]
    assert "where" in str(back.julia_type) and back.julia_type.params[1].type.name == "Core.UnionAll"
    assert b"Core.UnionAll" in path.read_bytes()
    assert tx.values_equal(back, d)


# --- a struct custom-serialized as a String (BigFloat, BigInt) ---------------------------------


def _string_serialized(text: str, name: str = "Main.Money") -> JuliaStruct:
    """A struct JLD2 writes as its ``String`` (a user's ``writeas(::Type{Money}) = String``, as
    JLD2's own for ``BigInt`` and ``BigFloat``), as the reader gives it: its one ``written`` field."""
    t = JuliaType(name)
    layout = StructLayout(t, VLEN_UTF8, (), written_type=JuliaType("Core.String"))
    return JuliaStruct(t, {"written": text}, layout=layout)


def test_a_struct_written_as_a_string_commits_the_string_type(tmp_path: Path) -> None:
    # JLD2 commits the vlen string type itself (julia_type the struct, written_type Core.String)
    # and stores the text inline in a struct, not a one-member compound.
    rng = JuliaStruct(
        JuliaType("Main.RNG"), {"seed": np.int64(17), "x": _string_serialized("0.5")}, mutable=True
    )
    path = tmp_path / "big.jld2"
    tx.save(path, rng=rng, a=_string_serialized("1.25"), b=_string_serialized("-7.0"))
    data = path.read_bytes()
    assert data.count(b"written_type") == 1 and data.count(b"Core.String") == 1
    assert data.count(b"written") == 1  # no member named "written"
    back = tx.load(path)
    assert tx.values_equal(back["rng"], rng) and tx.values_equal(back["b"], _string_serialized("-7.0"))
    with h5py.File(path, "r") as f:
        assert f["a"][()] == b"1.25" and f["rng"].dtype["x"].kind == "O"


PI_TEXT = "3.141592653589793238462643383279502884197169399375105820974944592307816406286198"


def test_a_bigfloat_reads_as_tx_bigfloat_and_is_written_back_byte_for_byte(tmp_path: Path) -> None:
    """JLD2's ``writeas(::Type{BigFloat}) = String``, ``string(x)``: the file holds the decimal
    text (no precision). It reads as a ``tx.BigFloat`` keeping every digit and the type's name,
    wherever it lies (top level, a struct field, a ``Vector{Any}``, a ``Vector{BigFloat}``); the
    JLD2 form written from the struct the reader gave before and from ``tx.BigFloat`` values is
    one, byte for byte, and a re-encode gives it again."""

    def values(big: Callable[[str], object], name: str = "Base.MPFR.BigFloat") -> list[tuple[str, object]]:
        rng = JuliaStruct(JuliaType("Main.RNG"), {"seed": np.int64(17), "x": big("0.5")}, mutable=True)
        return [
            ("pi", big(PI_TEXT)),
            ("rng", rng),
            ("any", [big("-Inf"), big("1.0e+400"), 2.0]),
            ("vec", JuliaArray(name, [big("NaN"), big("-0.0")])),
        ]

    as_struct, as_bigfloat = tmp_path / "struct.jld2", tmp_path / "bigfloat.jld2"
    original = _write(as_struct, values(lambda t: _string_serialized(t, "Base.MPFR.BigFloat")), "0.2.0")
    assert _write(as_bigfloat, values(tx.BigFloat), "0.2.0") == original
    back = tx.load(as_struct)
    x = back["pi"]
    assert type(x) is tx.BigFloat and str(x) == PI_TEXT and x.julia_name == "Base.MPFR.BigFloat"
    assert float(x) == math.pi and x.to_decimal() == Decimal(PI_TEXT) and x != tx.BigFloat("3.14")
    assert type(back["rng"]["x"]) is tx.BigFloat and back["rng"]["x"] == 0.5
    assert [str(v) for v in back["any"][:2]] == ["-Inf", "1.0e+400"] and float(back["any"][1]) == math.inf
    assert back["vec"].eltype.name == "Base.MPFR.BigFloat" and [str(v) for v in back["vec"]] == [
        "NaN",
        "-0.0",
    ]
    assert tx.values_equal(back, dict(values(tx.BigFloat)))
    assert _write(tmp_path / "again.jld2", list(back.items()), "0.2.0") == original
    _assert_byte_identical(as_struct, tmp_path / "converted.jld2")
    with h5py.File(as_struct, "r") as f:  # the independent reader sees the text JLD2 stores
        assert f["pi"][()] == PI_TEXT.encode() and f["rng"][()]["x"] == b"0.5"
    with tx.open(as_struct) as f:
        assert f["pi"].kind == "number" and str(f["pi"].julia_type) == "BigFloat"
        assert node_record(f["pi"])["value"] == PI_TEXT  # every digit in JSON, as text


def test_a_bigfloat_keeps_the_name_its_file_gave_it_and_malformed_text_is_a_format_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "alias.jld2"
    tx.save(path, x=_string_serialized("2.5", "Base.BigFloat"))
    back = tx.load(path)["x"]
    assert back == tx.BigFloat("2.5") and back.julia_name == "Base.BigFloat"
    assert b"Base.BigFloat" in path.read_bytes() and b"MPFR" not in path.read_bytes()
    _assert_byte_identical(path, tmp_path / "again.jld2")
    bad = tmp_path / "bad.jld2"
    tx.save(bad, s=JuliaStruct("Main.S", {"x": _string_serialized("1.5e", "Base.MPFR.BigFloat")}))
    with pytest.raises(tx.FormatError, match="malformed BigFloat text") as err:
        tx.load(bad)
    assert err.value.path == ("s", "x")
    with pytest.raises(ValueError):
        tx.BigFloat("0x1p3")


def _esn_like(adv_jump: object) -> JuliaStruct:
    """The shape of Random.MersenneTwister in ReservoirComputing's saved ESN state: a mutable
    struct whose adv_jump field is a BigInt, stored inline as its base-62 text."""
    return JuliaStruct(
        JuliaType("Random.MersenneTwister"),
        {"seed": np.int64(17), "adv": np.int64(223340), "adv_jump": adv_jump, "adv_ints": np.int64(-1)},
        mutable=True,
    )


def test_a_bigint_is_written_as_jld2_writes_it(tmp_path: Path) -> None:
    # JLD2's writeas(BigInt) = String: string(x, base = 62) under a committed string type whose
    # julia_type is Base.GMP.BigInt (the name today's Julia gives it); small or huge, and a plain
    # Python int too wide for 128 bits, alike. They read back as tx.BigInt.
    huge = -(62**500 + 12345)  # "-1", 497 zeros, "3D7" (12345 = 3*62^2 + 13*62 + 7)
    path = tmp_path / "bigint.jld2"
    tx.save(path, rng=_esn_like(tx.BigInt(0)), a=tx.BigInt(-123), b=huge, c=[2**200, tx.BigInt(1)])
    data = path.read_bytes()
    assert data.count(b"Base.GMP.BigInt") == 1 and data.count(b"written_type") == 1
    with h5py.File(path, "r") as f:
        assert f["a"][()] == b"-1z" and f["rng"].dtype["adv_jump"].kind == "O"
        assert f["b"][()] == b"-1" + b"0" * 497 + b"3D7" and f["rng"][()]["adv_jump"] == b"0"
        assert f["b"].dtype.metadata["vlen"] is str  # a variable-length String, as JLD2 stores it
    back = tx.load(path)
    assert back["b"] == huge and back["c"] == [2**200, 1] and back["a"] == -123
    assert all(type(v) is tx.BigInt for v in (back["a"], back["b"], back["rng"]["adv_jump"], *back["c"]))
    assert tx.values_equal(back["rng"], _esn_like(tx.BigInt(0)))
    _assert_byte_identical(path, tmp_path / "again.jld2")


def test_a_bigint_keeps_the_name_its_file_gave_it(tmp_path: Path) -> None:
    # A BigInt read under another of its names (Base.BigInt) is written back under it.
    path = tmp_path / "alias.jld2"
    tx.save(path, rng=_esn_like(tx.BigInt(5, "Base.BigInt")))
    data = path.read_bytes()
    assert b"Base.BigInt" in data and b"GMP" not in data
    back = tx.load(path)["rng"]["adv_jump"]
    assert back == 5 and back.julia_name == "Base.BigInt"
    _assert_byte_identical(path, tmp_path / "again.jld2")


def _check_esn_bigint(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The real ESN state's MersenneTwister: its adv_jump BigInt reads as an int with its name."""
    rng = tx.load(FIXTURES / name, "st")["reservoir"]["cell"]["rng"]
    assert type(rng["adv_jump"]) is tx.BigInt and rng["adv_jump"] == 0
    assert rng["adv_jump"].julia_name == "Base.GMP.BigInt"


def _mixture_type(element: str) -> JuliaStruct:
    """``Array{element, N} where N`` as the reader returns a ``UnionAll`` value: its body a
    ``Type{...}`` whose parameter is the very TypeVar of ``var``."""
    n = JuliaStruct(JuliaType("Core.TypeVar"), {"name": Symbol("N"), "lb": None, "ub": None}, mutable=True)
    body = Singleton(JuliaType("Core.Type", (JuliaType("Core.Array", (JuliaType(element), n)),)))
    return JuliaStruct(JuliaType("Core.UnionAll"), {"var": n, "body": body})


@pytest.mark.parametrize("fmt", ["0.2.0", "0.1.1"])
def test_a_typevar_is_one_object_whichever_way_it_is_read(fmt: str, tmp_path: Path) -> None:
    """``[Foo, Bar]`` (``UnionAll`` values, e.g. BetaML's mixture types): a value's ``var`` and the
    parameter of its body are one TypeVar, written once. The value is read in the session of the
    values, the body's parameter in the one of type parameters: both give the same object, so
    convert writes the TypeVar once again (it wrote it twice, a dataset more per UnionAll)."""
    src = tmp_path / "u.jld2"
    mixtures = JuliaArray("UnionAll", [_mixture_type("Core.Float64"), _mixture_type("Core.Int64")])
    with open(src, "wb") as out:  # (the values as the reader returns them, not converted again)
        write_jld2(
            out, [("m", mixtures)], compress=None, producer=PRODUCER, root_attributes={}, format_version=fmt
        )
    with File(src) as f:
        first = read_objects(f).values[0][1].data.ravel()[0]
        assert len(f.reader.typevars) == 2  # one TypeVar dataset per UnionAll
    assert first.fields["var"] is first.fields["body"].type.params[0].params[1]
    _assert_byte_identical(src, tmp_path / "out.jld2", *(("--keep-format",) if fmt == "0.1.1" else ()))


# --- what convert keeps of its input ------------------------------------------------------------


def _write(
    path: Path,
    items: list[tuple[str, object]],
    fmt: str,
    source: Source | None = None,
    sessions: list[int] | None = None,
) -> bytes:
    with open(path, "wb") as out:
        write_jld2(
            out,
            prepare_values(items),
            compress=None,
            producer=PRODUCER,
            root_attributes={},
            format_version=fmt,
            source=source,
            sessions=sessions or (),
        )
    return path.read_bytes()


def _union_vector() -> JuliaArray:
    union = JuliaType("Core.Union", (JuliaType("Core.Nothing"), JuliaType("Core.String")))
    return JuliaArray(union, [None, "a", "b"])


def test_convert_keeps_the_union_description_julia_printed(tmp_path: Path) -> None:
    items: list[tuple[str, object]] = [("v", _union_vector())]
    key = "Core.Union{Core.Nothing,Core.String}"
    src = tmp_path / "in.jld2"
    # What a session that imported the names differently would print.
    original = _write(src, items, "0.2.0", Source(union_descriptions={key: "Union{Nothing, Base.String}"}))
    assert b"Union{Nothing, Base.String}" in original
    assert _write(tmp_path / "plain.jld2", items, "0.2.0") != original  # the default text differs
    _assert_byte_identical(src, tmp_path / "out.jld2")


def test_convert_writes_by_name_what_the_input_wrote_by_name(tmp_path: Path) -> None:
    axis = JuliaType("Main.Axis", (np.int64(3),))  # a ghost struct, known here by name only
    tuple_t = JuliaType("Core.Tuple", (axis,))
    value = JuliaStruct(JuliaType("Main.CA", (tuple_t,)), {"data": np.arange(3.0)})
    items: list[tuple[str, object]] = [("ca", value)]
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.1.1", Source(by_name=_era.type_keys([tuple_t])))
    assert _write(tmp_path / "plain.jld2", items, "0.1.1") != original  # committed otherwise
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")


# --- what the input's objects and types tell beyond its values -------------------------------------


def test_a_typevar_in_a_where_value_and_its_body_is_written_once(tmp_path: Path) -> None:
    """JLD2 writes a ``TypeVar`` (mutable) once and refers to it after: the ``var`` of a
    ``UnionAll`` value and the parameter of its body point to one dataset. The reader reads the
    value and the body's parameters in different sessions; both must give the one object."""
    src = tmp_path / "in.jld2"
    with open(src, "wb") as out:  # (the value as the reader gives it: one TypeVar object)
        write_jld2(out, [("u", _where_array())], compress=None, producer=PRODUCER, root_attributes={})
    back = tx.load(src)["u"]
    assert back.fields["var"] is back.fields["body"].type.params[0].params[1]
    _assert_byte_identical(src, tmp_path / "out.jld2")


@pytest.mark.parametrize("mutable", [False, True])
@pytest.mark.parametrize("as_singleton", [False, True])
def test_save_of_a_hand_built_where_value_writes_its_typevar_once(
    mutable: bool, as_singleton: bool, tmp_path: Path
) -> None:
    """A ``UnionAll`` built in Python (one TypeVar object as ``var`` and in the body, the body a
    ``JuliaType`` or the ``Type{...}`` the reader gives) is saved as the reader's value is: its
    TypeVar one dataset (``save`` copied the ``var`` and not the body's parameter, so it wrote two)."""
    n = JuliaStruct(JuliaType("Core.TypeVar"), {"name": Symbol("N"), "lb": None, "ub": None}, mutable=mutable)
    array_t = JuliaType("Core.Array", (JuliaType("Core.Float64"), n))
    body = Singleton(JuliaType("Core.Type", (array_t,))) if as_singleton else array_t
    u = JuliaStruct(JuliaType("Core.UnionAll"), {"var": n, "body": body})
    saved, direct = tmp_path / "saved.jld2", tmp_path / "direct.jld2"
    tx.save(saved, u=u, v=[u, 1.0])
    with File(saved) as f:
        back = f.read("u")
        assert len(f.reader.typevars) == 1
    assert back.fields["var"] is back.fields["body"].type.params[0].params[1]
    items: list[tuple[str, object]] = [("u", u), ("v", [u, 1.0])]
    with open(direct, "wb") as out:  # the value as it is, not converted as save converts it
        write_jld2(out, items, compress=None, producer=PRODUCER, root_attributes={})
    assert _write(tmp_path / "converted.jld2", items, "0.2.0") == direct.read_bytes()


def _layouts_of(path: Path) -> dict:
    with File(path) as f:
        return _era.committed_layouts(f.reader)


def test_a_struct_type_no_value_shows_is_committed_as_the_input_did(tmp_path: Path) -> None:
    """JLD2 decides from the Julia type: an immutable struct type used as a type parameter (the
    value type of an empty Dict) is committed, with its fields. Re-encoding such a file, the
    writer knows that struct from the layout the input committed (``Source.layouts``)."""
    p_type = JuliaType("Main.P")
    empty = JuliaDict({})
    empty.julia_type = JuliaType("Base.Dict", (JuliaType("Core.String"), p_type))
    known = tmp_path / "known.jld2"  # a file that holds a P: its committed layout
    _write(known, [("q", JuliaStruct(p_type, {"v": np.float64(2.0)}))], "0.1.1")
    items: list[tuple[str, object]] = [("d", empty)]
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.1.1", Source(layouts=_layouts_of(known)))
    assert _write(tmp_path / "plain.jld2", items, "0.1.1") != original  # by name otherwise
    assert "Main.P" in _layouts_of(src)
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")


def test_a_singleton_type_first_met_as_a_parameter_stays_a_ghost(tmp_path: Path) -> None:
    """A singleton type written by name as a type parameter, then an array of its instance:
    JLD2 commits the empty type and stores no element; known by name only, the array would be
    one of references. The input's empty committed type tells the writer it is a ghost."""
    g = JuliaType("Main.G")
    items: list[tuple[str, object]] = [
        ("w", JuliaStruct(JuliaType("Main.W", (g,)), {"x": np.float64(1.0)})),
        ("a", JuliaArray(g, [Singleton(g), Singleton(g)])),
    ]
    known = tmp_path / "known.jld2"
    _write(known, [("a", items[1][1])], "0.1.1")
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.1.1", Source(layouts=_layouts_of(known)))
    assert _write(tmp_path / "plain.jld2", items, "0.1.1") != original
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")


def test_a_second_name_of_one_object_keeps_its_place_in_link_order(tmp_path: Path) -> None:
    """``x`` and ``z`` name one mutable struct, ``y`` lies between them in link order (JLD2's
    ``@save`` writes a workspace's names sorted): the object is written once, at ``x``, and the
    root group links ``x, y, z`` as the input did, not ``x, z, y``."""
    shared = JuliaStruct(JuliaType("Main.M"), {"v": np.arange(3.0)}, mutable=True)
    src = tmp_path / "in.jld2"
    tx.save(src, x=shared, y=np.arange(2.0), z=shared, producer=PRODUCER, format="0.1.1")
    with File(src) as f:
        links = f.reader.links(f.reader.root_address)
        assert list(links)[:3] == ["x", "y", "z"] and links["x"] == links["z"]
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")


def test_a_name_written_as_part_of_an_earlier_value_keeps_its_place_in_link_order(
    tmp_path: Path,
) -> None:
    """``@save f model n peps`` where ``model`` holds the mutable ``peps``: JLD2 writes ``peps``
    inside ``model`` and only links it after ``n``. Its object lies below ``n``'s header, yet
    the root group links ``model, n, peps`` (the order JLD2 wrote the names), not by address."""
    peps = JuliaStruct(JuliaType("Main.Peps"), {"v": np.arange(3.0)}, mutable=True)
    model = JuliaStruct(JuliaType("Main.Model"), {"peps": peps, "k": np.int64(2)}, mutable=True)
    for fmt, extra in (("0.1.1", ("--keep-format",)), ("0.2.0", ())):
        src = tmp_path / f"in_{fmt}.jld2"
        tx.save(src, model=model, n=np.arange(2.0), peps=peps, producer=PRODUCER, format=fmt)
        with File(src) as f:
            links = f.reader.links(f.reader.root_address)
            assert list(links)[:3] == ["model", "n", "peps"] and links["peps"] < links["n"]
        _assert_byte_identical(src, tmp_path / f"out_{fmt}.jld2", *extra)


def test_a_zero_size_struct_referenced_twice_is_one_dataset(tmp_path: Path) -> None:
    """JLD2 writes a mutable object once, wherever it is referenced (``write_dataset`` looks up
    ``objectid``), a zero-size one too (PyCall's ``PyObject``: its one field, a ``Ptr``, is
    written as ``nothing``); an immutable one again at each reference. The reader gives one
    object per dataset, the writer one dataset per object: ``[h, h, g]`` is two datasets."""
    h, g = Singleton("PyCall.PyObject"), Singleton("PyCall.PyObject")
    for fmt, extra in (("0.1.1", ("--keep-format",)), ("0.2.0", ())):
        src = tmp_path / f"in_{fmt}.jld2"
        tx.save(src, v=[h, h, g], producer=PRODUCER, format=fmt)
        with h5py.File(src, "r") as f:
            refs = f["v"][()]
            assert len({h5py.h5o.get_info(f[r].id).addr for r in refs}) == 2
        back = tx.load(src)["v"]
        assert back == [h, h, g] and back[0] is back[1] and back[2] is not back[0]
        _assert_byte_identical(src, tmp_path / f"out_{fmt}.jld2", *extra)


def test_an_array_of_a_mutable_zero_size_struct_holds_references(tmp_path: Path) -> None:
    """A ``Vector{PyCall.PyObject}`` (a mutable struct with no stored field): JLD2 stores the
    elements by reference, one dataset per object, where an immutable zero-size element type
    stores nothing. No value says the type is mutable; the file does (a reference array of its
    own element type), and the re-encoding keeps it (``Source.mutable``)."""
    h, g = Singleton("PyCall.PyObject"), Singleton("PyCall.PyObject")
    items: list[tuple[str, object]] = [
        ("v", JuliaArray("PyCall.PyObject", np.array([h, g, h], dtype=object)))
    ]
    known = tmp_path / "known.jld2"  # a file that committed the (empty) PyObject type
    tx.save(known, x=[h], producer=PRODUCER)
    layouts = _layouts_of(known)
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.2.0", Source(layouts=layouts, mutable=frozenset({"PyCall.PyObject"})))
    immutable = _write(tmp_path / "plain.jld2", items, "0.2.0", Source(layouts=layouts))
    assert immutable != original  # (an immutable one: a null dataspace, nothing stored)
    with h5py.File(src, "r") as f:
        assert len({h5py.h5o.get_info(f[r].id).addr for r in f["v"][()]}) == 2
    with File(src) as f:
        assert read_objects(f).mutable_ghosts == {"PyCall.PyObject"}
    _assert_byte_identical(src, tmp_path / "out.jld2")


def _check_pyobjects(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """ODINN-SciML/iceflow_sandbox's benchmark results: ``PyCall.PyObject``s held by closures'
    fields, each one dataset referenced from several places."""
    path = FIXTURES / name
    with File(path) as f:
        objects = read_objects(f)
    assert objects.mutable_ghosts == {"PyCall.PyObject"}
    seen: Counter[int] = Counter()
    objects_by_id: dict[int, object] = {}

    def walk(x: object) -> None:
        if type(x) is Singleton and x.type.name == "PyCall.PyObject":
            seen[id(x)] += 1
            objects_by_id[id(x)] = x
        elif isinstance(x, Mapping):  # (dicts and NamedTuples)
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)
        elif isinstance(x, JuliaArray) and x.data.dtype == object:
            for v in x.data.ravel():
                walk(v)
        elif isinstance(x, JuliaStruct) and id(x) not in objects_by_id:
            objects_by_id[id(x)] = x
            for v in x.fields.values():
                walk(v)

    walk(objects.values[0][1])
    assert seen and all(n > 1 for n in seen.values())  # each PyObject reached more than once
    _assert_byte_identical(path, tmp_path / "out.jld2", "--keep-format")


def _tuple_of_any_dict() -> JuliaDict:
    tuple_any = JuliaType("Core.Tuple", (JuliaType("Core.Any"), JuliaType("Core.Any")))
    d = JuliaDict({"a": (np.float64(1.0), Symbol("x")), "b": (np.int64(2), "y")})
    d.julia_type = JuliaType("Base.Dict", (JuliaType("Core.String"), tuple_any))
    return d


@pytest.mark.parametrize("fmt", ["0.1.1", "0.2.0"])
def test_a_tuple_type_of_abstract_elements_holds_its_values_by_reference(fmt: str, tmp_path: Path) -> None:
    """``Tuple{Any,Any}`` is not a concrete type in Julia (a tuple type is concrete only when its
    element types are): a ``Dict{String, Tuple{Any,Any}}`` keeps its type, and JLD2 stores each
    ``Pair``'s ``second`` as a reference to the value's own concrete tuple, as for ``Any``.
    Taken for a struct of two references, the Dict's type was not kept (``Dict{String, Any}``)."""
    src = tmp_path / "in.jld2"
    tx.save(src, d=_tuple_of_any_dict(), producer=PRODUCER, format=fmt)
    back = tx.load(src)["d"]
    assert str(back.julia_type) == "Dict{String, Tuple{Any, Any}}"
    assert back == {"a": (1.0, Symbol("x")), "b": (2, "y")}
    with h5py.File(src, "r") as h:  # the Pair's second field: an HDF5 object reference
        stored = h["d"][()]
        pairs = h[stored["kvvec"]][()] if stored.dtype.names == ("kvvec",) else stored
        pair = h[pairs[0]][()] if isinstance(pairs[0], h5py.Reference) else pairs[0]
        assert pair.dtype.names == ("first", "second")
        assert h[pair["second"]][()].dtype.names == ("1", "2")
    _assert_byte_identical(src, tmp_path / "out.jld2", *(("--keep-format",) if fmt == "0.1.1" else ()))


# --- format 0.1.1: the rules of the release that wrote a file ------------------------------------


def _era_items() -> list[tuple[str, object]]:
    """Values every release rule shows on, in groups of fewer than 4 links (/_types counts):
    one-element tuples, Dicts (top level and a field), a small and a large array, a struct with
    a Bool field."""
    s_type = JuliaType("Main.S", (JuliaType("Core.Tuple", (JuliaType("Core.Float64"),)),))
    table = JuliaDict({np.int64(1): 2.0, np.int64(3): 4.0})
    fields = {"x": (np.float64(2.0),), "table": table, "large": np.arange(2001.0), "flag": True}
    return [
        ("s", JuliaStruct(s_type, fields, mutable=True)),
        ("g/d", table),
        ("g/small", np.arange(4.0)),
    ]


RULE_SETS = {
    "before v0.3.3": {_era.GROUPS_WITHOUT_ROOM, _era.NO_NTUPLE, _era.DICT_AS_VECTOR, _era.BOOL_OPAQUE},
    "before v0.4.4": {_era.GROUPS_WITHOUT_ROOM, _era.NTUPLE_ONE, _era.DICT_AS_VECTOR},
    "before v0.4.19": {_era.NO_NTUPLE, _era.DICT_AS_VECTOR},
    "before v0.4.41": {_era.NTUPLE_ONE, _era.DICT_AS_VECTOR},
    "v0.4.41": {_era.DICT_AS_VECTOR},
    "v0.4.51": {_era.LAYOUT_0_4_51, _era.DATATYPE_V0},
    "v0.4.52": {_era.LAYOUT_0_4_52, _era.DATATYPE_V0},
    "v0.4.53": {_era.LAYOUT_0_4_52},
    "v0.4.41, Julia < 1.7": {_era.DICT_AS_VECTOR, _era.BASE_PAIR},
}


@pytest.mark.parametrize("release", list(RULE_SETS))
def test_release_rules_are_detected_and_reproduced(release: str, tmp_path: Path) -> None:
    rules = frozenset(RULE_SETS[release])
    src = tmp_path / "in.jld2"
    original = _write(src, _era_items(), "0.1.1", Source(rules))
    # The rules change the bytes (each one fails the test when not followed) ...
    assert _write(tmp_path / "plain.jld2", _era_items(), "0.1.1") != original
    for rule in rules:
        assert _write(tmp_path / "less.jld2", _era_items(), "0.1.1", Source(rules - {rule})) != original
    # ... the file shows them, and convert --keep-format follows them.
    with File(src) as f:
        read_objects(f)
        assert _era.era_rules(f.reader.types.writer_traits | _era.header_traits(f.reader)) == rules
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")
    assert tx.values_equal(tx.load(tmp_path / "out.jld2"), tx.load(src))


def test_a_release_rule_shown_only_by_a_type_no_value_uses_is_followed(tmp_path: Path) -> None:
    """JLD2 < v0.4.41 names a 1-tuple type ``NTuple{1,T}``. When the only 1-tuple of a file is the
    field type of a struct used only as a type parameter (``W{D}``: ``D`` committed with its
    fields' types, no value of it), reading the values decodes ``D``'s name, not its fields; the
    traits are taken after every committed type is (``committed_layouts``), so ``convert``
    follows the rule (ForwardDiff's ``Partials{1,Float64}`` in ODINN-SciML's benchmark files)."""
    d_type = JuliaType("Main.D")
    rules = frozenset({_era.NTUPLE_ONE, _era.DICT_AS_VECTOR})
    known = tmp_path / "known.jld2"  # (a file that holds a D: its committed layout)
    _write(known, [("q", JuliaStruct(d_type, {"t": (np.float64(2.0),)}))], "0.1.1", Source(rules))
    items: list[tuple[str, object]] = [
        ("w", JuliaStruct(JuliaType("Main.W", (d_type,)), {"x": np.float64(1.0)}))
    ]
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.1.1", Source(rules, layouts=_layouts_of(known)))
    assert _write(tmp_path / "new.jld2", items, "0.1.1", Source(layouts=_layouts_of(known))) != original
    with File(src) as f:
        read_objects(f)
        assert _era.NTUPLE_ONE not in _era.era_rules(f.reader.types.writer_traits)  # (values only)
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")


def test_pair_keeps_the_module_julia_named_in_format_020(tmp_path: Path) -> None:
    """Julia before 1.7 named Pair ``Base.Pair``: a 0.2.0 file that says so is written so again."""
    items: list[tuple[str, object]] = [("d", JuliaDict({np.int64(1): 2.0}))]
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.2.0", Source(frozenset({_era.BASE_PAIR})))
    assert b"Base.Pair" in original and b"Core.Pair" not in original
    _assert_byte_identical(src, tmp_path / "out.jld2")


def test_a_write_session_per_name_when_the_input_shows_one(tmp_path: Path) -> None:
    """``f[name] = value`` gives each name a write session of its own: the same String text under
    two names is two datasets. A file that shows it (and none reached from two names) is
    re-encoded so; one written in one session (``jldsave``) keeps one dataset."""
    items: list[tuple[str, object]] = [
        ("a", JuliaArray("Any", ["R1", np.int64(1)])),
        ("b", JuliaArray("Any", ["R1"])),
    ]
    src = tmp_path / "in.jld2"
    original = _write(src, items, "0.2.0", Source(frozenset({_era.SESSION_PER_NAME})))
    shared = _write(tmp_path / "shared.jld2", items, "0.2.0")
    assert original.count(b"R1") == shared.count(b"R1") + 1  # the text written again
    with File(src) as f:
        read_objects(f)
        assert _era.era_rules(f.reader.types.writer_traits) == {_era.SESSION_PER_NAME}
    with File(tmp_path / "shared.jld2") as f:
        read_objects(f)
        assert _era.era_rules(f.reader.types.writer_traits) == frozenset()
    _assert_byte_identical(src, tmp_path / "out.jld2")
    _assert_byte_identical(tmp_path / "shared.jld2", tmp_path / "out2.jld2")


def test_keep_format_says_what_differs_and_why(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src, out = tmp_path / "in.jld2", tmp_path / "out.jld2"
    tx.save(src, a=np.arange(3.0), producer=PRODUCER, format="0.1.1")
    assert main(["convert", str(src), str(out), "--keep-format", "--keep-producer"]) == 0
    assert capsys.readouterr().err == ""  # byte for byte: nothing to say
    tx.save(src, a=np.arange(3.0), compress=True, producer=PRODUCER)  # JLD2 0.5+: 0.2.0
    assert main(["convert", str(src), str(out), "--keep-format", "--keep-producer"]) == 0
    err = capsys.readouterr().err
    assert "not byte-identical from byte" in err and "compressed datasets" in err


def test_a_union_array_of_raw_bits_and_missing_is_written(tmp_path: Path) -> None:
    """``Vector{Union{Missing, String31}}`` (a DataFrames column of InlineStrings): JLD2 stores
    each element as an ``InlineUnionEl`` (a mask byte, then both members); an element the reader
    gives as raw bits (:class:`~treexchange.JuliaBits`) is placed in its member, not taken for the
    whole element (``ConversionError`` before)."""
    s31 = JuliaType("InlineStrings.String31")
    union = JuliaType("Core.Union", (JuliaType("Base.Missing"), s31))
    # String31 "Ab" as the file holds it (little-endian): the length, zeros, the text reversed
    text = b"\x02" + bytes(29) + b"bA"
    column = JuliaArray(union, [tx.JuliaBits(s31, text), tx.MISSING, tx.JuliaBits(s31, text)])
    src = tmp_path / "in.jld2"
    tx.save(src, column=column, producer=PRODUCER, format="0.1.1")
    back = tx.load(src)["column"]
    assert tx.values_equal(back, column) and back[1] is tx.MISSING
    assert back[0].as_str() == "Ab" and back[2].shown() == '"Ab"'
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")


def test_keep_format_names_zeros_past_the_end_of_file_address(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """JLD2 on Windows maps a file opened for writing 512 KiB larger; closed with nothing
    written, it is not truncated: zeros follow the superblock's end-of-file address. The
    content up to that address is re-encoded byte for byte, and the note says why the rest is not."""
    src, out = tmp_path / "in.jld2", tmp_path / "out.jld2"
    tx.save(src, a=np.arange(3.0), producer=PRODUCER, format="0.1.1")
    content = src.read_bytes()
    src.write_bytes(content + bytes(4096))
    assert main(["convert", str(src), str(out), "--keep-format", "--keep-producer"]) == 0
    err = capsys.readouterr().err
    assert f"not byte-identical from byte {len(content)} on" in err
    assert "zeros past its end-of-file address" in err
    assert out.read_bytes() == content


# --- JLD2's own compress=true ----------------------------------------------------------------------

COMPRESSED_FILES = ["CarinLundqvist__Supergrid__results.jld2"]


def _jld2_compressed(path: Path) -> list[tuple[str, object]]:
    """A file in JLD2.jl's own compressed form (``jldsave(path, true; ...)``, format 0.2.0)."""
    items: list[tuple[str, object]] = [
        ("v", np.arange(5000.0)),
        ("m", np.arange(12, dtype=np.int32).reshape(3, 4)),
        ("nt", tx.NamedTuple(w=np.linspace(0.0, 1.0, 7), n=np.int64(3))),
    ]
    with open(path, "wb") as out:
        write_jld2(
            out, prepare_values(items), compress=Compression.jld2(), producer=PRODUCER, root_attributes={}
        )
    return items


def test_jld2_compressed_files_are_compressed_again_so(tmp_path: Path) -> None:
    """JLD2 (>= 0.5) compresses every non-empty isbits array with deflate alone, at zlib's default
    level, as one chunk in a single-chunk index whose dimension sizes are 8 bytes wide (its
    ``write_chunked_storage_message``), its filter saying level 5. ``convert --keep-producer``
    compresses such an input again in that form: byte for byte; without ``--keep-producer`` the
    output is what libhdf5 reads (here uncompressed, as ``--compress`` is not given)."""
    src = tmp_path / "in.jld2"
    items = _jld2_compressed(src)
    data = src.read_bytes()
    assert data.count(JLD2_DEFLATE_PIPELINE) == 3  # three arrays compressed, no shuffle
    # layout v4, chunked, flags 2 (single filtered chunk), rank + 1 dims of 8 bytes each
    assert data.count(bytes([4, 2, 2, 2, 8])) == 2 and data.count(bytes([4, 2, 2, 3, 8])) == 1
    assert tx.values_equal(tx.load(src), dict(prepare_values(items)))
    with File(src) as f:
        read_objects(f)
        assert source_compression(f.reader.h5.filter_pipelines_seen) == Compression.jld2()
    _assert_byte_identical(src, tmp_path / "out.jld2")
    # Without --keep-producer: h5py reads every array of the output.
    import h5py

    plain = tmp_path / "plain.jld2"
    assert main(["convert", str(src), str(plain)]) == 0
    with h5py.File(plain, "r") as f:
        np.testing.assert_array_equal(f["v"][()], np.arange(5000.0))
        np.testing.assert_array_equal(f["m"][()], np.arange(12, dtype=np.int32).reshape(3, 4).T)


def test_other_compressed_files_are_not_compressed_in_jld2_form(tmp_path: Path) -> None:
    """Only JLD2's own pipeline is written again: a file compressed with shuffle + deflate (what
    ``save(compress=True)`` writes) comes out uncompressed, and --keep-format says why."""
    src = tmp_path / "in.jld2"
    tx.save(src, a=np.arange(3000.0), compress=True, producer=PRODUCER)
    with File(src) as f:
        read_objects(f)
        assert (
            f.reader.h5.filter_pipelines_seen
            and source_compression(f.reader.h5.filter_pipelines_seen) is None
        )


def _check_compressed(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Byte for byte; libhdf5 2 refuses JLD2's single-chunk index in the original (and so in the
    identical copy), while it reads the output of a plain ``convert``."""
    import h5py

    _assert_byte_identical(FIXTURES / name, tmp_path / "out.jld2")
    plain = tmp_path / "plain.jld2"
    assert main(["convert", str(FIXTURES / name), str(plain)]) == 0

    def arrays_read(path: Path) -> tuple[int, Counter[str]]:
        """Datasets h5py reads, and its reasons for those it refuses (with their counts),
        following every object reference from the top."""
        ok, failed = 0, Counter[str]()
        with h5py.File(path, "r") as f:
            todo: list = [key for key in f if key != "_types"]  # names, then references
            seen: set[int] = set()
            while todo:
                try:
                    ds = f[todo.pop()]
                    if hash(ds.id) in seen:
                        continue
                    seen.add(hash(ds.id))
                    value = np.asarray(ds[()])
                    ok += 1
                except Exception as exc:  # libhdf5's refusals, e.g. of 8-byte dimension sizes
                    failed["chunk index" if "chunk dimension" in str(exc) else str(exc)] += 1
                    continue
                fields = [value[n] for n in value.dtype.names] if value.dtype.names else [value]
                for column in fields:
                    if column.dtype.kind == "O":
                        todo += [r for r in np.asarray(column).ravel() if isinstance(r, h5py.Reference) and r]
        return ok, failed

    ok, failed = arrays_read(FIXTURES / name)
    assert failed["chunk index"] > 0  # the compressed arrays
    ok_plain, failed_plain = arrays_read(plain)
    # Every array compressed in the original is read in the plain output; what else libhdf5
    # refuses (types of size 0) it refuses in both.
    assert ok_plain == ok + failed.pop("chunk index") and failed_plain == failed


# --- files written in several sessions (jldopen(path, "a+")) ---------------------------------------

# Real files written in several JLD2 sessions (format 0.1.1, JLD2 0.4 on Julia 1.6/1.7): a new
# session's links go into a group header's free space or a continuation chunk, groups that grew
# are saved in the order the file shows, types are committed after the first session's.
SESSION_FILES = [
    "WilliamCam__SC-circuit-simulator__" + name
    for name in (
        "CircuitSimProgram_rc_s.jld2",
        "Create_Netlist_test.jld2",
        "Create_Netlist_test_0ccd2bb7.jld2",
        "Create_Netlist_test_da7c6f2c.jld2",
        "RLC-SQUID_Parallel_v2_Sweeps_simlogs.jld2",
        "circuits_apf_27ffbaf8.jld2",
        "circuits_ishaan_e891d6de.jld2",
        "circuits_rc_p.jld2",
        "circuits_rc_s.jld2",
        "circuits_vsource_jj.jld2",
        "simlogs.jld2",
        "simlogs_83cebcc2.jld2",
    )
]


def _point(x: float, name: str = "Main.Point") -> JuliaStruct:
    return JuliaStruct(JuliaType(name), {"x": np.float64(x), "y": np.float64(-x)})


def _session_items() -> list[tuple[str, object]]:
    """Session 1 (up to index 3): two names, a group, a committed type; session 2: names that
    overflow the root group's header into a continuation chunk, a link added to the group (into
    its free space), three types committed after the first session's (``/_types`` continues)."""
    return [
        ("a", np.arange(4.0)),
        ("g/x", _point(0.5)),
        ("b", "text"),
        ("c", [_point(1.0, "Main.P1"), _point(1.0, "Main.P2"), _point(1.0, "Main.P3")]),
        ("g/y", np.arange(3, dtype=np.int32)),
        ("a_longer_name_for_the_second_session", JuliaArray("Any", [_point(2.0), "text"])),
        ("d", np.ones((2, 2))),
    ]


def _write_sessions(path: Path, fmt: str, sessions: list[int]) -> bytes:
    return _write(path, _session_items(), fmt, sessions=sessions)


@pytest.mark.parametrize("fmt", ["0.2.0", "0.1.1"])
def test_a_file_written_in_two_sessions_is_rewritten_so(fmt: str, tmp_path: Path) -> None:
    """A later session's objects follow the end of the file; its links go into the free space of
    a group header while they fit, then into a continuation chunk (which, before v0.4.51, format
    0.1.1, leaves room for more links); the groups that grew are saved before the root group.
    ``read_objects`` tells the sessions from the header chunks between the datasets, and convert
    replays them: byte for byte; written in one session, the same values give other bytes."""
    import h5py

    src = tmp_path / "two.jld2"
    two = _write_sessions(src, fmt, [3])
    one = _write_sessions(tmp_path / "one.jld2", fmt, [])
    assert two != one and two.count(b"OCHK") == 2  # root group and /_types continued
    with File(src) as f:
        objects = read_objects(f)
    assert [n for n, _ in objects.values][:3] == ["a", "g/x", "b"] and objects.sessions == [3]
    assert objects.grown_groups == [[], ["_types", ""]]
    with File(tmp_path / "one.jld2") as f:
        assert read_objects(f).sessions == []
    back, once = tx.load(src), tx.load(tmp_path / "one.jld2")
    assert sorted(back) == sorted(once) and all(tx.values_equal(back[k], once[k]) for k in once)
    extra = ("--keep-format",) if fmt == "0.1.1" else ()
    _assert_byte_identical(src, tmp_path / "out.jld2", *extra)
    # libhdf5 follows the continuation chunks (their checksums included) to every link.
    with h5py.File(src, "r") as f:
        assert sorted(f) == ["_types", "a", "a_longer_name_for_the_second_session", "b", "c", "d", "g"]
        with h5py.File(tmp_path / "one.jld2", "r") as once:
            assert sorted(f["g"]) == ["x", "y"] and len(f["_types"]) == len(once["_types"])
        np.testing.assert_array_equal(f["g/y"][()], np.arange(3, dtype=np.int32))


def test_three_sessions_and_the_limit_of_what_a_file_shows(tmp_path: Path) -> None:
    """Each close that wrote a chunk is seen (three sessions, replayed byte for byte); a session
    whose links all fit into the free space earlier headers left writes none, so nothing tells it
    from the next one: the two are taken for one (here "b" alone, then "c" ...)."""
    src = tmp_path / "three.jld2"
    _write_sessions(src, "0.1.1", [3, 4])  # a, g/x, b | c | g/y, ...
    with File(src) as f:
        objects = read_objects(f)
    assert objects.sessions == [3, 4] and objects.grown_groups == [[], ["_types", ""], [""]]
    _assert_byte_identical(src, tmp_path / "out.jld2", "--keep-format")
    _write_sessions(src, "0.1.1", [2, 3])  # a, g/x | b (into free space) | c, ...
    with File(src) as f:
        assert read_objects(f).sessions == [2]


def _check_sessions(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with File(FIXTURES / name) as f:
        assert read_objects(f).sessions  # (each was written in two to seven sessions)
    _assert_byte_identical(FIXTURES / name, tmp_path / "out.jld2", "--keep-format")


# --- the real files that show each rule ------------------------------------------------------------


def _check_rule(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # Format 0.1.1 files are kept in their format; the 0.2.0 files are converted as they are.
    extra = ("--keep-format",) if name in CORPUS_011 else ()
    _assert_byte_identical(FIXTURES / name, tmp_path / "out.jld2", *extra)


def test_continued_headers_are_a_known_cause_kept_for_what_the_replay_misses(tmp_path: Path) -> None:
    """A header continued in a later block (links added by a later session) stays a trait that
    ``--keep-format`` names if the bytes still differ (a session the file does not show, objects a
    deleted link left behind); one session continues none."""
    two, one = tmp_path / "two.jld2", tmp_path / "one.jld2"
    _write_sessions(two, "0.1.1", [3])
    _write_sessions(one, "0.1.1", [])
    with File(two) as f:
        assert "header:continued" in header_traits(f.reader)
    with File(one) as f:
        assert "header:continued" not in header_traits(f.reader)
    assert "header:continued" in REPORTED_TRAITS


# --- objects nothing links -------------------------------------------------------------------------

# @save of a whole workspace that stopped at a variable it could not write: what it wrote of that
# value stays in the file, unlinked (docs/writing.md, "Objects no name reaches").
UNLINKED_FILES = [
    f"FilipSjovall__FictShapeOpt__{stem}.jld2"
    for stem in (
        "hej",
        "facit",
        "steg1",
        "steg2",
        "steg200",
        "test",
        "tre",
        "tva",
        "tva_1d6c4760",
        "tva_968924a5",
    )
]


def _unlink(path: Path, name: str) -> int:
    """Turn the root group's link to ``name`` into a NIL message of the same size, the header's
    checksum recomputed: the object stays in the file, linked from nowhere (as ``delete!`` leaves
    it). Returns the object header's file offset."""
    data = bytearray(path.read_bytes())
    with File(path) as f:
        h5 = f.reader.h5
        root = h5.absolute(h5.root_address)
        address = f.reader.links(h5.root_address)[name]
    chunk = first_chunk(memoryview(data), root)
    assert chunk is not None and not chunk[0] & 0x04  # (version 2, no creation order: 4-byte heads)
    _, at, end = chunk
    while at + 4 <= end:
        mtype, size = data[at], int.from_bytes(data[at + 1 : at + 3], "little")
        body = bytes(data[at + 4 : at + 4 + size])
        if mtype == 0x06 and name.encode() in body and body.endswith(address.to_bytes(8, "little")):
            data[at] = 0x00  # a NIL message
            break
        at += 4 + size
    else:
        pytest.fail(f"no link to {name!r} in the root group's first chunk")
    data[end : end + 4] = lookup3(bytes(data[root:end])).to_bytes(4, "little")
    path.write_bytes(bytes(data))
    return h5.absolute(address)


def test_keep_format_names_object_headers_nothing_links(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A dataset no link reaches any more (its header valid, checksum and all) is re-encoded by
    no value: ``--keep-format`` says so, where the first such header lies, instead of "no known
    cause"; libhdf5 reads the file as one without it."""
    src, out = tmp_path / "in.jld2", tmp_path / "out.jld2"
    tx.save(src, a=np.arange(3.0), b=np.arange(4.0), c=np.arange(5.0), producer=PRODUCER, format="0.1.1")
    dead = _unlink(src, "b")
    with h5py.File(src, "r") as f:
        assert sorted(f) == ["a", "c"]
    with File(src) as f:
        assert unlinked_headers(f.reader, read_objects(f).reached) == [dead]
    assert main(["convert", str(src), str(out), "--keep-format", "--keep-producer"]) == 0
    err = capsys.readouterr().err
    assert "not byte-identical from byte" in err and "no known cause" not in err
    assert f"1 object header nothing links (the first at byte {dead})" in err
    assert sorted(tx.load(out)) == ["a", "c"]


def test_a_valid_header_copied_into_array_data_is_not_an_unlinked_object(tmp_path: Path) -> None:
    """A Float64 array whose raw bytes hold a whole object header, checksum and all (a file's
    bytes kept as numbers): it lies inside the data of a dataset reading reached, so it is no
    object; a dataset no link reaches beside it is still found, and only it."""
    donor = tmp_path / "donor.jld2"
    tx.save(donor, w=np.arange(3.0), format="0.1.1")
    raw = donor.read_bytes()
    with File(donor) as f:
        h5 = f.reader.h5
        at = h5.absolute(f.reader.links(h5.root_address)["w"])
    chunk = first_chunk(memoryview(raw), at)
    assert chunk is not None
    header = raw[at : chunk[2] + 4]  # the first chunk and its checksum
    payload = bytes(8) + header + bytes(-len(header) % 8 + 8)
    values = np.frombuffer(payload, "<f8").copy()
    src = tmp_path / "in.jld2"
    tx.save(src, x=values, b=np.arange(4.0), producer=PRODUCER, format="0.1.1")
    dead = _unlink(src, "b")
    content = src.read_bytes()
    copy_at = content.find(payload)
    assert copy_at > 0 and content.count(header) == 1
    with File(src) as f:
        assert tx.values_equal(f.read("x"), values)
        assert unlinked_headers(f.reader, read_objects(f).reached) == [dead]
        # the copy is a header by every test but where it lies
        assert _is_header(f.reader.h5, copy_at + 8) and copy_at + 8 != dead


def test_object_header_bytes_inside_array_data_are_not_taken_for_headers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Array data that spell ``OHDR`` and a version-2 header's start fail the checksum: not
    reported (the bytes differ here for another reason, zeros past the end-of-file address)."""
    src, out = tmp_path / "in.jld2", tmp_path / "out.jld2"
    fake = (b"OHDR\x02\x00\x10" + bytes(range(16)) + b"\x00" * 5) * 16
    tx.save(src, a=np.frombuffer(fake, np.uint8).copy(), producer=PRODUCER, format="0.1.1")
    content = src.read_bytes()
    assert content.count(b"OHDR\x02") >= 16 + 2  # (the fakes, the dataset and the root group)
    src.write_bytes(content + bytes(4096))
    with File(src) as f:
        assert unlinked_headers(f.reader, read_objects(f).reached) == []
    assert main(["convert", str(src), str(out), "--keep-format", "--keep-producer"]) == 0
    err = capsys.readouterr().err
    assert "zeros past its end-of-file address" in err and "nothing links" not in err


def _check_unlinked(name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The ten files a stopped whole-workspace ``@save`` left unlinked objects in: every value is
    re-encoded, the dead objects are not, and the note names them."""
    assert main(["convert", str(FIXTURES / name), str(tmp_path / "out.jld2"), "--keep-format"]) == 0
    err = capsys.readouterr().err
    assert "not byte-identical" in err and "no known cause" not in err
    assert "nothing links (the first at byte" in err


# --- every real file outside ../shared, one test (one skip when they are absent) -------------------

_Check = Callable[[str, Path, pytest.CaptureFixture[str]], None]
_REAL_FILE_CHECKS: list[tuple[str, _Check, list[str]]] = [
    ("bigint", _check_esn_bigint, STRING_FILES[:1]),
    ("compressed", _check_compressed, COMPRESSED_FILES),
    ("sessions", _check_sessions, SESSION_FILES),
    ("rule", _check_rule, PTR_FILES + STRING_FILES + THIRD_SEARCH_020 + list(CORPUS_011)),
    ("unlinked", _check_unlinked, UNLINKED_FILES),
    ("pyobjects", _check_pyobjects, PYOBJECT_FILES),
]


def _real_file_params() -> list:
    """One case per (check, file) whose file is under FIXTURES (so a failure names both), plus one
    case that skips saying how many are absent, when any is."""
    cases = [(kind, check, name) for kind, check, names in _REAL_FILE_CHECKS for name in names]
    present = [c for c in cases if (FIXTURES / c[2]).is_file()]
    params: list = [pytest.param(check, name, id=f"{kind}-{name}") for kind, check, name in present]
    files = {name for _, _, name in cases}
    absent = len(files - {name for _, _, name in present})
    if absent:
        reason = (
            f"{absent} of {len(files)} real files outside ../shared not found under {FIXTURES} "
            "(fetch them as tests/corpus_sources.md says, issue 24)"
        )
        params.append(pytest.param(None, None, id="absent", marks=pytest.mark.skip(reason=reason)))
    return params


@pytest.mark.parametrize(("check", "name"), _real_file_params())
def test_real_files_outside_shared(
    check: _Check, name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    check(name, tmp_path, capsys)

"""General JLD2.jl rules behind byte identity on real files (issue 10, corpus round two).

Each test builds the situation on its own (the independent builder in ``_jld2_builder`` or our
writer) and checks the rule JLD2.jl follows:

- an array whose element type is a ``where`` type (``Vector{Foo}`` with ``Foo`` parametric) keeps
  that element type: its ``julia_type`` attribute is a ``UnionAll`` dataset, read and written as
  one (``TypeVar``s shared between ``var`` and ``body``, as in Julia);
- a ``UnionAll``'s ``var`` and ``body`` are written in the file's datatype session
  (JLD2's ``h5convert!`` for ``UnionAllODR``), whatever session the ``UnionAll`` is written in;
- a tuple type with a ``Vararg`` parameter is spelled ``Core.Tuple`` (it is no ``Type{<:NTuple}``);
- a concrete struct type that the file writes as a type parameter *by name* (a DataType dataset,
  not a committed type) is mutable: JLD2's ``refs_from_types`` commits exactly the struct types it
  stores inline;
- a Dict keeps the type the file stored (``ImmutableDict``, ``IdDict``, ``Dict{Any,Any}``), and a
  Dict read in its stored form (``kvvec``: keys Python cannot hash) is written as a Dict again.
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from _jld2_builder import Attr, Builder, shared, space, t_compound, t_int, t_ref, t_vlen_string

import treexchange as tx
from treexchange import UNDEF, JuliaArray, JuliaDict, JuliaStruct, JuliaType, NamedTuple, Singleton, Symbol
from treexchange._cli import main
from treexchange._jld2._reader import Reader


def _objects_named(path: Path, type_name: str) -> int:
    """How many datasets of the file (linked or not) hold a value of the committed type
    ``type_name``: counted through every object header the file has."""
    reader = Reader(path)
    data = path.read_bytes()
    count = 0
    pos = data.find(b"OHDR", 560)
    while pos != -1:
        try:
            info = reader.info(pos - 512)
            if info.kind == "dataset" and info.julia_type.name == type_name:
                count += 1
        except tx.TreexchangeError:
            pass  # not an object header (the 4 bytes inside data)
        pos = data.find(b"OHDR", pos + 4)
    return count


# --- where types as element types -------------------------------------------------------------


def _where_vector_file(*, twice: bool = False) -> bytes:
    """``v = Main.Foo[Foo{Int64}(1), Foo{Int64}(2)]``, its element type ``Foo{T} where T``: a
    ``Core.UnionAll`` dataset (var: a ``Core.TypeVar`` dataset, body: the DataType ``Foo{T}``
    whose parameter refers to that same TypeVar), as JLD2 writes ``write_ref(f, eltype, ...)``.
    ``twice``: a second vector ``w`` whose element type is a second UnionAll dataset (UnionAll
    is immutable: JLD2 writes it again) over the same TypeVar dataset (mutable: written once)."""
    b = Builder()
    unionall_t = b.commit(t_compound([("var", t_ref(), 8), ("body", t_ref(), 8)]), b.jt("Core.UnionAll"))
    sym = b.symbol_type()
    typevar_t = b.commit(
        t_compound([("name", t_vlen_string(), 16), ("lb", t_ref(), 8), ("ub", t_ref(), 8)]),
        b.jt("Core.TypeVar"),
        b.field_attrs(["name", "lb", "ub"], [sym, 0, 0]),
    )
    bottom_t = b.ghost("Core.TypeofBottom")
    bottom = b.dataset(shared(bottom_t), space("null"), b"")
    any_t = b.jt_dataset("Core.Any")
    tvar = b.dataset(shared(typevar_t), space("scalar"), b.vstr("T") + struct.pack("<QQ", bottom, any_t))
    body = b.jt_dataset("Main.Foo", [tvar])
    where = b.dataset(shared(unionall_t), space("scalar"), struct.pack("<QQ", tvar, body))
    foo_t = b.commit(t_compound([("x", t_int(8), 8)]), b.jt("Main.Foo", [b.jt_dataset("Core.Int64")]))
    items = [b.dataset(shared(foo_t), space("scalar"), struct.pack("<q", i)) for i in (1, 2)]
    julia_type = Attr("julia_type", t_ref(), space("scalar"), struct.pack("<Q", where))
    b.link("v", b.dataset(t_ref(), space("simple", [2]), struct.pack("<QQ", *items), [julia_type]))
    if twice:
        where2 = b.dataset(
            shared(unionall_t), space("scalar"), struct.pack("<QQ", tvar, b.jt_dataset("Main.Foo", [tvar]))
        )
        julia_type2 = Attr("julia_type", t_ref(), space("scalar"), struct.pack("<Q", where2))
        b.link("w", b.dataset(t_ref(), space("simple", [1]), struct.pack("<Q", items[0]), [julia_type2]))
    return b.finish()


def test_where_element_type_is_kept_and_written_as_a_unionall(tmp_path: Path) -> None:
    """Was: the element type was dropped (a ``list``, written back as ``Vector{Any}``)."""
    path = tmp_path / "where.jld2"
    path.write_bytes(_where_vector_file())
    v = tx.load(path)["v"]
    assert isinstance(v, JuliaArray), type(v)
    assert str(v.eltype) == "Main.Foo{T} where T"
    assert [x["x"] for x in v] == [1, 2]
    unionall = v.eltype.params[0]
    # The TypeVar of `where T` and the T in the body Foo{T} are one object, as in Julia.
    assert unionall["var"] is unionall["body"].type.params[0].params[0]
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out)]) == 0
    back = tx.load(out)["v"]
    assert isinstance(back, JuliaArray) and str(back.eltype) == "Main.Foo{T} where T"
    assert tx.values_equal(back, v)
    assert _objects_named(out, "Core.UnionAll") == 1
    assert _objects_named(out, "Core.TypeVar") == 1  # shared by var and body: one dataset


def test_typevar_shared_by_two_where_types_is_one_object(tmp_path: Path) -> None:
    """Type parameters of the whole file are read in one traversal: the TypeVar JLD2 wrote once
    for two element types (e.g. ``Vector{VarName}`` in two places) stays one object, one dataset."""
    path = tmp_path / "where2.jld2"
    path.write_bytes(_where_vector_file(twice=True))
    loaded = tx.load(path)
    first, second = loaded["v"].eltype.params[0], loaded["w"].eltype.params[0]
    assert first is not second and first["var"] is second["var"]
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out)]) == 0
    assert _objects_named(out, "Core.UnionAll") == 2
    assert _objects_named(out, "Core.TypeVar") == 1


def test_a_union_type_value_is_a_union_dataset_with_julias_description(tmp_path: Path) -> None:
    """A Union used as a value (a TypeVar's bound, a field of type ``Type``) is a ``Core.Union``
    dataset, not a DataType; its description is Julia's ``string(U)``: ``typeof(f)`` for a
    function's type, the bare name for a where type over all of its type's parameters."""
    path = tmp_path / "where.jld2"
    path.write_bytes(_where_vector_file())
    unionall = tx.load(path)["v"].eltype.params[0]  # Foo{T} where T, i.e. Foo
    union = JuliaType("Core.Union", (JuliaType("Base.#identity"), unionall))
    out = tmp_path / "union.jld2"
    tx.save(out, u=Singleton(JuliaType("Core.Type", (union,))))
    assert b"Union{typeof(identity), Main.Foo}" in out.read_bytes()
    reader = Reader(out)
    assert reader.info(reader.links(reader.root_address)["u"]).julia_type.name == "Core.Union"


def test_unionall_parts_are_written_in_the_datatype_session(tmp_path: Path) -> None:
    """``Box{Any, Vector{Foo{T} where T}}``: the type attribute's own session writes ``Core.Any``
    (the first parameter); the ``UnionAll`` inside writes its TypeVar's bound ``Core.Any`` in the
    datatype session, where it is not yet: JLD2 writes that DataType a second time."""
    path = tmp_path / "where.jld2"
    path.write_bytes(_where_vector_file())
    unionall = tx.load(path)["v"].eltype.params[0]  # as a type parameter: the UnionAll itself
    vector = JuliaType("Core.Array", (unionall, np.int64(1)))
    box = JuliaStruct(JuliaType("Main.Box", (JuliaType("Core.Any"), vector)), {"n": np.int64(1)})
    out = tmp_path / "box.jld2"
    tx.save(out, box=box)
    assert out.read_bytes().count(b"Core.Any") == 2
    assert tx.values_equal(tx.load(out)["box"], box)


# --- Vararg tuples ------------------------------------------------------------------------------


def test_vararg_tuple_parameter_is_spelled_core_tuple(tmp_path: Path) -> None:
    """``Tuple{Vararg{Int64}}`` is not a ``Type{<:NTuple}``: JLD2 writes its generic name."""
    vararg = JuliaStruct(
        "Core.TypeofVararg", {"T": Singleton(JuliaType("Core.Type", (JuliaType("Core.Int64"),))), "N": UNDEF}
    )
    t = JuliaType("Main.Sized", (JuliaType("Core.Tuple", (vararg,)),))
    value = JuliaStruct(t, {"n": np.int64(3)})
    out = tmp_path / "vararg.jld2"
    tx.save(out, s=value)
    raw = out.read_bytes()
    assert b"Core.Tuple\x00" in raw and b"\x00Tuple\x00" not in raw
    back = tx.load(out)["s"]
    assert back["n"] == 3 and str(back.type) == str(t)


# --- mutability shown by how a type parameter is written ----------------------------------------


def _holder_file(*, by_name: bool) -> bytes:
    """``h = Main.Holder{Main.Node}(Node(7))``; the field is stored by reference, and the type
    parameter ``Main.Node`` is a DataType dataset (``by_name``, as JLD2 writes a mutable struct
    type) or the committed ``Node`` type (as it writes an immutable one)."""
    b = Builder()
    node_t = b.commit(t_compound([("v", t_int(8), 8)]), b.jt("Main.Node"))
    param = b.jt_dataset("Main.Node") if by_name else node_t
    holder_t = b.commit(t_compound([("n", t_ref(), 8)]), b.jt("Main.Holder", [param]))
    node = b.dataset(shared(node_t), space("scalar"), struct.pack("<q", 7))
    b.link("h", b.dataset(shared(holder_t), space("scalar"), struct.pack("<Q", node)))
    # A reference array of Node whose julia_type is a DataType dataset (write_ref, not
    # refs_from_types): that says nothing about mutability.
    # (Other holds a reference: a reference array of a plain-bits struct is mutable anyway.)
    other_t = b.commit(t_compound([("v", t_ref(), 8)]), b.jt("Main.Other"))
    other = b.dataset(shared(other_t), space("scalar"), struct.pack("<Q", b.int_dataset(8)))
    julia_type = Attr("julia_type", t_ref(), space("scalar"), struct.pack("<Q", b.jt_dataset("Main.Other")))
    b.link("o", b.dataset(t_ref(), space("simple", [1]), struct.pack("<Q", other), [julia_type]))
    return b.finish()


def test_struct_type_parameter_written_by_name_is_mutable(tmp_path: Path) -> None:
    path = tmp_path / "holder.jld2"
    path.write_bytes(_holder_file(by_name=True))
    loaded = tx.load(path)
    assert loaded["h"]["n"].mutable  # was: not flagged, so written back committed and inline
    assert not loaded["o"][0].mutable
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out), "--keep-producer"]) == 0
    assert tx.load(out)["h"]["n"].mutable


def test_committed_struct_type_parameter_stays_immutable(tmp_path: Path) -> None:
    path = tmp_path / "holder.jld2"
    path.write_bytes(_holder_file(by_name=False))
    assert not tx.load(path)["h"]["n"].mutable


# --- Dict types ---------------------------------------------------------------------------------


def _typed(items: dict, type_text: str) -> JuliaDict:  # type: ignore[type-arg]
    d = JuliaDict(items)
    d.julia_type = JuliaType.parse(type_text)
    return d


def test_dict_keeps_its_stored_type(tmp_path: Path) -> None:
    """Was: every Dict written as ``Dict{K,V}`` with K, V worked out from the entries."""
    values = {
        "imm": _typed({Symbol("a"): 1.0}, "Base.ImmutableDict{Core.Any,Core.Any}"),
        "id": _typed({"k": np.int64(1)}, "Base.IdDict{Core.String,Core.Int64}"),
        "any": _typed({"x": 0.5, "y": 1.5}, "Base.Dict{Core.Any,Core.Any}"),
    }
    out = tmp_path / "dicts.jld2"
    tx.save(out, **values)
    raw = out.read_bytes()
    assert b"Base.ImmutableDict" in raw and b"Base.IdDict" in raw
    back = tx.load(out)
    for name, d in values.items():
        assert back[name] == d and back[name].julia_type == d.julia_type, name


def test_dict_entries_that_no_longer_fit_the_stored_type_are_typed_afresh(tmp_path: Path) -> None:
    d = _typed({"a": np.int64(1)}, "Base.Dict{Core.String,Core.Int64}")
    d["b"] = "text"  # a String value: Dict{String,Int64} cannot hold it
    out = tmp_path / "d.jld2"
    tx.save(out, d=d)
    back = tx.load(out)["d"]
    assert back == d and str(back.julia_type) == "Dict{String, Any}"


def test_dict_in_its_stored_form_is_written_as_a_dict(tmp_path: Path) -> None:
    """Keys equal in Python but distinct in Julia (``1`` and ``1.0``) keep the stored form
    ``JuliaStruct(Dict, kvvec=[Pair...])``; it is still a Dict for JLD2 (a ``SerializedDict``),
    also next to a Dict of the same type in the ordinary form. Was: written as a struct with a
    ``kvvec`` field, or refused ("appears with fields ['kvvec'] and with ['kvvec']")."""
    t = JuliaType.parse("Base.Dict{Core.Any,Core.Int64}")
    pair_t = JuliaType.parse("Core.Pair{Core.Any,Core.Int64}")
    pairs = [
        JuliaStruct(pair_t, {"first": k, "second": np.int64(i)}) for i, k in enumerate([np.int64(1), 1.0])
    ]
    stored = JuliaStruct(t, {"kvvec": JuliaArray(pair_t, pairs)})
    out = tmp_path / "kv.jld2"
    tx.save(out, x=NamedTuple(a=_typed({"k": np.int64(3)}, "Base.Dict{Core.Any,Core.Int64}"), b=stored))
    assert b"JLD2.SerializedDict" in out.read_bytes()
    back = tx.load(out)["x"]
    assert back["a"] == {"k": 3}
    assert isinstance(back["b"], JuliaStruct) and back["b"].type == t
    assert [(p["first"], p["second"]) for p in back["b"]["kvvec"]] == [(1, 0), (1.0, 1)]


def test_a_type_written_with_version_zero_is_its_own_not_an_equal_ones() -> None:
    """JLD2 0.4.51 - 0.4.52's datatype messages (version 0) are made once per type object. They
    were kept in a cache keyed by equality, where a type read from one file at one address and an
    equal one (``committed_at`` takes no part in equality) got whichever was asked for first."""
    from treexchange._hdf5._model import H5Class, H5Type, Member
    from treexchange._jld2._writer import _version_zero

    f64 = H5Type(H5Class.FLOAT, 1, 0x20 | (0x3F << 8), 8, b"\x00\x00\x40\x00\x0b\x34\x00\xff\x03\x00\x00")
    pair = H5Type(H5Class.COMPOUND, 3, 1, 8, members=(Member("x", 0, f64),))
    here, there = pair.committed_as(1024), pair.committed_as(4096)
    assert here == there and _version_zero(here).committed_at == 1024
    zero = _version_zero(there)
    assert zero.committed_at == 4096 and zero.version == 0 and zero.members[0].type.version == 0
    assert _version_zero(there) is zero  # once per type object
    assert _version_zero(there.committed_as(64)).committed_at == 64  # a copy does not take the memo

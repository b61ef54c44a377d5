"""What ``save`` refuses and what it accepts (issue 8, write side): cycles, depth, surrogates,
lying containers, PyTree objects (Equinox modules, dataclasses, namedtuples) and the one rule
for plain dicts. h5py is the independent check that what was written is a sound file."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import HOSTILE

import treexchange
from treexchange import (
    ConversionError,
    JuliaArray,
    JuliaDict,
    JuliaStruct,
    JuliaType,
    LimitError,
    Limits,
    NamedTuple,
    Symbol,
    to_julia,
    values_equal,
)
from treexchange._limits import DEFAULT_LIMITS
from treexchange._save import convert

_NAME_ONLY = np.dtype([("name", h5py.string_dtype())])


def julia_type_name(ds: h5py.Dataset) -> str:
    """The name in the ``julia_type`` attribute of a dataset's committed datatype."""
    t = h5py.Datatype(ds.id.get_type())
    arr = np.zeros((), _NAME_ONLY)
    h5py.h5a.open(t.id, b"julia_type").read(arr)
    name = arr["name"][()]
    return name.decode() if isinstance(name, bytes) else str(name)


# --- cycles ------------------------------------------------------------------------------------


def _cyclic_list() -> list[Any]:
    x: list[Any] = [np.float64(1.0), []]
    x[1].append(x)
    return x


def _cyclic_dict() -> dict[str, Any]:
    d: dict[str, Any] = {"a": {"b": 1.0}}
    d["a"]["back"] = d
    return d


def _cyclic_struct() -> JuliaStruct:
    s = JuliaStruct("Main.Node", {"value": np.float64(1), "children": []})
    s.fields["children"].append(s)
    return s


def _cyclic_julia_dict() -> JuliaDict:
    d = JuliaDict({1: 2.0})
    d[2] = [d]
    return d


def test_a_list_containing_itself_is_written_as_a_cyclic_vector_any(tmp_path: Path) -> None:
    """A Python list is a ``Vector{Any}``, mutable in Julia too: one containing itself was refused;
    it is written as JLD2.jl writes ``x = Any[1.0, Any[]]; push!(x[2], x)`` (the inner vector's
    element a reference to the outer dataset) and reads back as the same cycle."""
    path = tmp_path / "c.jld2"
    treexchange.save(path, m=_cyclic_list())
    with h5py.File(path, "r") as f:
        outer = f["m"]
        inner = f[outer[()][1]]
        assert f[inner[()][0]] == outer  # the reference closes on the outer Vector{Any} itself
        assert "julia_type" in outer.attrs and "julia_type" in inner.attrs
    back = treexchange.load(path, "m")
    assert back[1][0] is back and back[0] == 1.0
    # Julia's own `a = Any[]; push!(a, Any[a])` (JLD2.jl, Julia 1.11.1): the same list saved from
    # Python is the file `convert` makes of it, byte for byte
    julia = HOSTILE / "crafted_L14.jld2"
    if julia.is_file():
        a: list[Any] = []
        a.append([a])
        treexchange.save(tmp_path / "a.jld2", a=a, producer=" (Julia 1.11.1 64-bit LE)")
        convert(julia, tmp_path / "converted.jld2", keep_producer=True)
        assert (tmp_path / "a.jld2").read_bytes() == (tmp_path / "converted.jld2").read_bytes()
        assert treexchange.values_equal(treexchange.load(tmp_path / "a.jld2"), treexchange.load(julia))


@pytest.mark.parametrize(
    ("make", "where"),
    [
        (_cyclic_dict, ("m", "a", "back")),
        (_cyclic_struct, ("m", "children", 1)),
        (_cyclic_julia_dict, ("m", "2", 1)),
    ],
)
def test_cycles_are_refused_with_their_path(tmp_path: Path, make: Any, where: tuple[Any, ...]) -> None:
    with pytest.raises(ConversionError, match="cycle") as info:
        treexchange.save(tmp_path / "c.jld2", m=make())
    assert info.value.path == where
    assert list(tmp_path.iterdir()) == []


def test_a_shared_container_is_not_a_cycle_and_is_written_once(tmp_path: Path) -> None:
    shared = [np.arange(3.0)]
    path = tmp_path / "s.jld2"
    treexchange.save(path, a=NamedTuple(x=shared, y=shared), b=shared)
    back = treexchange.load(path)
    assert back["a"]["x"] is back["a"]["y"] is back["b"]  # one dataset, read as one object
    with h5py.File(path) as f:
        x, y = (f[f["a"][()][k]].id.get_offset() for k in ("x", "y"))
        assert x == y == f["b"].id.get_offset()


# --- depth -------------------------------------------------------------------------------------


def _chain(kind: str, levels: int) -> Any:
    """``levels`` values nested in each other, the innermost a Float64."""
    v: Any = np.float64(1.5)
    for _ in range(levels - 1):
        # Dict{String,Any} (the "n" entry makes the value type Any): a Dict{String,Dict{...}} 512
        # levels deep would have a 512-level type, written again for every level, as JLD2 does.
        v = [v] if kind == "list" else JuliaDict(a=v, n=0) if kind == "dict" else (v, np.int8(0))
    return v


def _h5_depth(f: h5py.File, top: h5py.Dataset) -> int:
    """Datasets on the longest chain of object references from ``top`` (h5py, iteratively)."""
    deepest = 0
    todo = [(top, 1)]
    while todo:
        ds, depth = todo.pop()
        deepest = max(deepest, depth)
        data = ds[()] if ds.shape is not None else None
        refs: list[Any] = []
        if h5py.check_dtype(ref=ds.dtype) is h5py.Reference:
            refs = list(np.ravel(data))
        elif ds.dtype.names:
            for name in ds.dtype.names:
                if h5py.check_dtype(ref=ds.dtype[name]) is h5py.Reference:
                    refs.extend(np.ravel(data[name]))
        todo.extend((f[r], depth + 1) for r in refs if r)
    return deepest


@pytest.mark.parametrize("kind", ["list", "dict"])
def test_trees_as_deep_as_the_limit_are_written(tmp_path: Path, kind: str) -> None:
    limit = Limits().max_depth
    path = tmp_path / "deep.jld2"
    # max_depth counts nested containers (as the reader does): limit containers and the leaf.
    treexchange.save(path, d=_chain(kind, limit + 1))
    with h5py.File(path) as f:
        assert _h5_depth(f, f["d"]) >= limit  # every level its own dataset (a Dict: two)
    with pytest.raises(LimitError, match=f"max_depth={limit}") as info:
        treexchange.save(tmp_path / "deeper.jld2", d=_chain(kind, limit + 2))
    assert len(info.value.path) == limit + 2  # the name, then one segment per level
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.jld2"]


def test_moderately_deep_trees_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "d.jld2"
    value = NamedTuple(l=_chain("list", 60), d=_chain("dict", 25), t=_chain("tuple", 60))
    treexchange.save(path, v=value)
    assert values_equal(treexchange.load(path, "v"), value)


def test_inline_types_nest_as_deep_as_values_do(tmp_path: Path) -> None:
    """docs/writing.md: ``max_depth`` nested isbits NamedTuples around a number are one HDF5
    compound ``max_depth`` levels deep (h5py sees every level) and read back; one more level is the
    ``max_depth`` LimitError (the docs said 100 levels, yet 508 round-tripped)."""
    limit = DEFAULT_LIMITS.max_depth

    def nested(levels: int) -> Any:
        v: Any = np.float64(1.5)
        for _ in range(levels):
            v = NamedTuple(a=v)
        return v

    path = tmp_path / "deep.jld2"
    treexchange.save(path, v=nested(limit))
    with h5py.File(path) as f:
        dtype, levels = f["v"].dtype, 0
        while dtype.names == ("a",):
            dtype, levels = dtype["a"], levels + 1
        assert levels == limit and dtype == np.float64
    assert values_equal(treexchange.load(path, "v"), nested(limit))
    with pytest.raises(LimitError, match=f"max_depth={limit}"):
        treexchange.save(tmp_path / "deeper.jld2", v=nested(limit + 1))


@pytest.mark.slow  # 2 minutes: types nested to the very limit, written and read back
def test_inline_types_as_deep_as_the_limit_round_trip(tmp_path: Path) -> None:
    """Nested isbits NamedTuples make one nested HDF5 compound. The value depth limit
    (``Limits().max_depth``) is what bounds them: the writer's own bound on inline type nesting
    (``datatype_depth``, what the reader parses) lies beyond it, so everything ``save`` accepts
    reads back."""
    from treexchange._limits import datatype_depth

    assert datatype_depth(DEFAULT_LIMITS) > DEFAULT_LIMITS.max_depth

    def nested(levels: int) -> Any:
        v: Any = np.float64(1.0)
        for _ in range(levels):
            v = NamedTuple(a=v)
        return v

    treexchange.save(tmp_path / "h5.jld2", v=nested(100))
    with h5py.File(tmp_path / "h5.jld2") as f:
        assert f["v"].dtype.names == ("a",)
    for levels in range(DEFAULT_LIMITS.max_depth - 2, DEFAULT_LIMITS.max_depth + 3):
        try:
            treexchange.save(tmp_path / "deep.jld2", v=nested(levels))
        except LimitError as err:
            assert "max_depth" in str(err)
            assert levels > DEFAULT_LIMITS.max_depth - 2
            break
        assert values_equal(treexchange.load(tmp_path / "deep.jld2", "v"), nested(levels))
    else:
        pytest.fail("a tree deeper than max_depth was saved")


# --- bad text and lying containers -----------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "where"),
    [
        ("a\udc80", ("m",)),
        (Symbol("relu\ud800"), ("m",)),
        (NamedTuple(**{"w\udfff": 1.0}), ("m", "w\udfff")),
        (JuliaStruct("Main.T\udc00", {"a": 1.0}), ("m",)),
        (JuliaStruct("Main.T", {"a\udc00": 1.0}), ("m", "a\udc00")),
        (JuliaArray("Core.String", ["ok", "no\udc80"]), ("m", 2)),
        (JuliaDict({Symbol("k\udc80"): 1.0}), ("m", "k\udc80")),
    ],
)
def test_lone_surrogates_are_conversion_errors_with_paths(
    tmp_path: Path, value: Any, where: tuple[Any, ...]
) -> None:
    with pytest.raises(ConversionError, match="surrogate") as info:
        treexchange.save(tmp_path / "u.jld2", m=value)
    assert info.value.path == where
    assert list(tmp_path.iterdir()) == []


def test_a_lone_surrogate_in_a_name_is_a_conversion_error(tmp_path: Path) -> None:
    with pytest.raises(ConversionError, match="surrogate") as info:
        treexchange.save(tmp_path / "u.jld2", {"bad\udc80": 1.0})
    assert info.value.path == ("bad\udc80",)


class _LyingList(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 7


class _LyingTuple(tuple):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 0


class _LyingDict(dict):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 1


def test_containers_whose_len_lies_are_written_as_they_iterate(tmp_path: Path) -> None:
    path = tmp_path / "l.jld2"
    items = [np.float64(1), np.float64(2)]
    treexchange.save(
        path,
        l=_LyingList(items),
        t=_LyingTuple(items),
        d=_LyingDict(a=np.float64(1), b=np.float64(2)),
    )
    back = treexchange.load(path)
    assert values_equal(back["l"], items)
    assert back["t"] == tuple(items)
    assert back["d"] == NamedTuple(a=1.0, b=2.0)
    with h5py.File(path) as f:
        assert f["l"].shape == (2,)


# --- what to_julia accepts, save accepts -------------------------------------------------------


@dataclasses.dataclass
class _Dense:
    weight: np.ndarray
    bias: np.ndarray
    activation: str = "relu"


_Pair = collections.namedtuple("_Pair", ["first", "second"])


def test_dataclass_and_namedtuple_save_as_to_julia_converts_them(tmp_path: Path) -> None:
    dense = _Dense(np.ones((2, 3), np.float32), np.zeros(2, np.float32))
    pair = _Pair(np.float32(1), [1, 2])
    path = tmp_path / "p.jld2"
    treexchange.save(path, dense=dense, pair=pair)
    back = treexchange.load(path)
    assert values_equal(back["dense"], to_julia(dense))
    assert list(back["dense"]) == ["weight", "bias", "activation"]
    assert values_equal(back["pair"], to_julia(pair))
    with h5py.File(path) as f:
        assert julia_type_name(f["dense"]) == "Core.NamedTuple"


def test_equinox_module_saves_directly(tmp_path: Path) -> None:
    eqx = pytest.importorskip("equinox")
    jax = pytest.importorskip("jax")
    model = eqx.nn.MLP(in_size=3, out_size=2, width_size=4, depth=1, key=jax.random.PRNGKey(0))
    path = tmp_path / "mlp.jld2"
    treexchange.save(path, model_state=model)
    back = treexchange.load(path, "model_state")
    assert values_equal(back, to_julia(model))
    w = np.asarray(model.layers[0].weight)
    assert np.array_equal(back["layers"][0]["weight"], w) and back["layers"][0]["weight"].dtype == w.dtype


# --- the one rule for plain dicts ----------------------------------------------------------------


def test_plain_dicts_with_str_keys_are_namedtuples_like_lux_ps(tmp_path: Path) -> None:
    """A Lux ``ps`` / Flax params dict: nested NamedTuples in the dict's order."""
    ps = {
        "layer_1": {"weight": np.ones((4, 2), np.float32), "bias": np.zeros(4, np.float32)},
        "layer_2": {},
    }
    path = tmp_path / "ps.jld2"
    treexchange.save(path, ps=ps)
    back = treexchange.load(path, "ps")
    assert isinstance(back, NamedTuple) and list(back) == ["layer_1", "layer_2"]
    assert list(back["layer_1"]) == ["weight", "bias"] and back["layer_2"] == NamedTuple()
    assert values_equal(back, to_julia(ps))
    with h5py.File(path) as f:
        assert julia_type_name(f["ps"]) == "Core.NamedTuple"


def test_julia_dicts_and_other_keys_stay_dicts(tmp_path: Path) -> None:
    path = tmp_path / "d.jld2"
    hyper = JuliaDict({"lr": 0.1, "epochs": 3})
    by_int = {1: "a", 2: "b"}
    by_symbol = {Symbol("a"): 1.0}
    treexchange.save(path, hyper=hyper, by_int=by_int, by_symbol=by_symbol)
    back = treexchange.load(path)
    for name in ("hyper", "by_int", "by_symbol"):
        assert type(back[name]) is JuliaDict
    assert back["hyper"] == {"lr": 0.1, "epochs": 3}
    with h5py.File(path) as f:
        assert {julia_type_name(f[n]) for n in ("hyper", "by_int", "by_symbol")} == {"Base.Dict"}


def test_a_dict_read_from_a_file_writes_back_as_a_dict(tmp_path: Path) -> None:
    first, second = tmp_path / "1.jld2", tmp_path / "2.jld2"
    treexchange.save(first, cfg=JuliaDict({"name": "run", "seed": 7}))
    loaded = treexchange.load(first)
    treexchange.save(second, loaded)
    assert first.read_bytes()[512:] == second.read_bytes()[512:]  # same bytes after the header
    assert type(treexchange.load(second, "cfg")) is JuliaDict


def test_julia_dict_is_a_jax_pytree_in_insertion_order() -> None:
    jax = pytest.importorskip("jax")
    d = JuliaDict({"b": 1.0, "a": 2.0, 3: 3.0})
    leaves, treedef = jax.tree_util.tree_flatten(d)
    assert leaves == [1.0, 2.0, 3.0]
    back = jax.tree_util.tree_unflatten(treedef, leaves)
    assert type(back) is JuliaDict and list(back) == ["b", "a", 3]


def test_a_loaded_and_a_python_made_julia_dict_share_a_tree_structure() -> None:
    """The keys alone are a JuliaDict's pytree structure: the Dict type a file stored
    (``julia_type``, set on every loaded Dict) is not part of it, so a tree_map over a loaded Dict
    and a Python-made one works, and jax.jit never hands one Dict's type to another."""
    jax = pytest.importorskip("jax")
    loaded = JuliaDict({"w": np.float64(1.0), "b": np.float64(2.0)})
    loaded.julia_type = JuliaType("Base.IdDict", (JuliaType("Core.Any"), JuliaType("Core.Any")))
    plain = JuliaDict({"w": np.float64(10.0), "b": np.float64(20.0)})
    assert jax.tree_util.tree_structure(plain) == jax.tree_util.tree_structure(loaded)
    summed = jax.tree_util.tree_map(lambda a, b: a + b, loaded, plain)
    assert type(summed) is JuliaDict and summed == {"w": 11.0, "b": 22.0}
    identity = jax.jit(lambda x: x)
    identity(loaded)
    assert identity(plain).julia_type is None


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (NamedTuple(**{"a\x00b": 1.0}), ("m", "a\x00b")),
        ({"\x00": 1.0}, ("m", "\x00")),
        (Symbol("x\x00"), ("m",)),
        (JuliaStruct("Main.T", {"f\x00": 1.0}), ("m", "f\x00")),
    ],
)
def test_nul_in_a_name_or_symbol_is_a_conversion_error(
    tmp_path: Path, value: Any, where: tuple[Any, ...]
) -> None:
    """Julia Symbols cannot hold NUL (and HDF5 would end a compound member's name there); a
    String can, and does round-trip."""
    with pytest.raises(ConversionError, match="NUL") as info:
        treexchange.save(tmp_path / "n.jld2", m=value)
    assert info.value.path == where
    treexchange.save(tmp_path / "s.jld2", s="a\x00b", d=JuliaDict({"\x00": 1.0}))
    back = treexchange.load(tmp_path / "s.jld2")
    assert back["s"] == "a\x00b" and back["d"] == {"\x00": 1.0}


def test_a_namedtuple_too_wide_for_hdf5_is_refused_as_jld2_does(tmp_path: Path) -> None:
    """HDF5 describes a type in one header message of at most 65535 bytes; JLD2.jl cannot write
    a wider NamedTuple either (InexactError, JLD2.jl #343/#487). Refused with the field count, the
    limit and the ways out; nothing is left at the target. Just below the limit writes fine."""
    tx = treexchange
    wide = tx.NamedTuple((f"f{i}", np.zeros(2, np.float32)) for i in range(5000))
    target = tmp_path / "wide.jld2"
    with pytest.raises(tx.WriteError, match=r"5000 fields.*65535.*JuliaDict") as err:
        tx.save(target, s=wide)
    assert err.value.path == ("s",)
    assert not target.exists() and not list(tmp_path.iterdir())
    tx.save(target, s=tx.JuliaDict(wide.items()))  # the way out the message names
    assert len(tx.load(target, "s")) == 5000
    fits = tx.NamedTuple((f"f{i}", np.zeros(2, np.float32)) for i in range(3000))
    tx.save(target, s=fits)
    with h5py.File(target) as f:
        assert len(f["s"].dtype.names) == 3000

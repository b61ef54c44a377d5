"""What ``treexchange.save`` writes for each kind of value, checked with h5py (libhdf5) as the
independent reader and with treexchange's own reader for the Julia-level meaning."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import h5py
import ml_dtypes
import numpy as np
import pytest
from _h5walk import is_numeric, reachable_datasets

import treexchange
from treexchange import (
    MISSING,
    ConversionError,
    Int128,
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
    values_equal,
)

_NAME_ONLY = np.dtype([("name", h5py.string_dtype())])


def julia_type_name(obj: h5py.Datatype) -> str:
    """The name part of a committed type's ``julia_type`` attribute (h5py cannot read the
    parameters: they are a vlen of references inside a committed compound)."""
    arr = np.zeros((), _NAME_ONLY)
    h5py.h5a.open(obj.id, b"julia_type").read(arr)
    name = arr["name"][()]
    return name.decode() if isinstance(name, bytes) else str(name)


def committed_names(f: h5py.File) -> list[str]:
    return [julia_type_name(f["_types"][k]) for k in f["_types"]] if "_types" in f else []


def dataset_type_name(ds: h5py.Dataset) -> str:
    return julia_type_name(h5py.Datatype(ds.id.get_type()))


def save_and_open(tmp_path: Path, **values: Any) -> tuple[Path, h5py.File]:
    path = tmp_path / "t.jld2"
    treexchange.save(path, **values)
    return path, h5py.File(path, "r")


def absolute_offset(ds: h5py.Dataset) -> int:
    return ds.id.get_offset()


# --- a Flux.state-shaped tree ------------------------------------------------------------------


def test_flux_state_layout_matches_jld2(tmp_path: Path) -> None:
    dense = NamedTuple(weight=np.ones((5, 10), np.float32), bias=np.zeros(5, np.float32), σ=())
    bn = NamedTuple(
        [
            ("λ", ()),
            ("β", np.zeros(5, np.float32)),
            ("γ", np.ones(5, np.float32)),
            ("μ", np.zeros(5, np.float32)),
            ("σ²", np.ones(5, np.float32)),
            ("ϵ", np.float32(1e-5)),
            ("momentum", np.float32(0.1)),
            ("affine", True),
            ("track_stats", True),
            ("active", None),
            ("chs", 5),
        ]
    )
    drop = NamedTuple(p=0.5, dims=(), active=None, rng=())
    state = NamedTuple(layers=(dense, bn, drop))
    path, f = save_and_open(tmp_path, model_state=state)
    with f:
        ds = f["model_state"]
        assert ds.shape == () and ds.id.get_create_plist().get_layout() == h5py.h5d.COMPACT
        assert dataset_type_name(ds) == "Core.NamedTuple"
        # The packed layout of jld2-format.md §10: "1"@0 (16 B), "2"@16 (50 B), "3"@66 (8 B).
        layers = ds.dtype["layers"]
        assert layers.itemsize == 74
        assert [(n, layers.fields[n][1]) for n in layers.names] == [("1", 0), ("2", 16), ("3", 66)]
        b = layers["2"]
        assert list(b.names) == ["β", "γ", "μ", "σ²", "ϵ", "momentum", "affine", "track_stats", "chs"]
        assert [b.fields[n][1] for n in b.names] == [0, 8, 16, 24, 32, 36, 40, 41, 42]
        names = committed_names(f)
        assert names[0] == "Core.DataType"
        assert {"Tuple", "Core.Nothing", "Core.Symbol", "Core.NamedTuple", "Core.Tuple"} <= set(names)
        # The weight is an unnamed dataset with Julia's dims reversed.
        ref = ds[()]["layers"]["1"]["weight"]
        w = f[ref]
        assert w.shape == (10, 5) and w.name is None
        assert np.array_equal(w[()].T, dense["weight"])
    back = treexchange.load(path, "model_state")
    assert values_equal(back, state)


# --- scalars -----------------------------------------------------------------------------------

SCALARS = [
    (np.int8(-3), "int8"),
    (np.int16(-300), "int16"),
    (np.int32(7), "int32"),
    (np.int64(-(2**40)), "int64"),
    (np.uint8(200), "uint8"),
    (np.uint16(60000), "uint16"),
    (np.uint32(2**31), "uint32"),
    (np.uint64(2**63), "uint64"),
    (np.float16(1.5), "float16"),
    (np.float32(0.25), "float32"),
    (np.float64(-2.5), "float64"),
]


@pytest.mark.parametrize(("value", "dtype"), SCALARS, ids=[d for _, d in SCALARS])
def test_number_scalars_are_plain_compact_datasets(tmp_path: Path, value: Any, dtype: str) -> None:
    path, f = save_and_open(tmp_path, x=value)
    with f:
        ds = f["x"]
        assert ds.dtype == np.dtype(dtype) and ds.shape == ()
        assert ds[()] == value
        assert "_types" not in f  # plain numbers need no committed type
    back = treexchange.load(path, "x")
    assert type(back) is type(value) and back == value


def test_python_scalars_map_to_julia_types(tmp_path: Path) -> None:
    path, f = save_and_open(tmp_path, i=3, x=1.5, b=True, c=1 + 2j, s="hé")
    with f:
        assert f["i"].dtype == np.int64 and f["x"].dtype == np.float64
        assert f["b"].id.get_type().get_class() == h5py.h5t.BITFIELD and f["b"][()] == 1
        assert f["s"][()] == "hé".encode() and f["s"].dtype.itemsize == len("hé".encode())
        assert dataset_type_name(f["c"]) == "Base.Complex"
        ctype = f["c"].id.get_type()  # the HDF5 type itself (h5py may be told to read it as complex)
        assert ctype.get_class() == h5py.h5t.COMPOUND
        assert [ctype.get_member_name(i) for i in range(ctype.get_nmembers())] == [b"re", b"im"]
    back = treexchange.load(path)
    assert back["i"] == np.int64(3) and back["b"] is True and back["c"] == np.complex128(1 + 2j)


def test_128_bit_integers_bfloat16_and_bits(tmp_path: Path) -> None:
    path, f = save_and_open(
        tmp_path,
        i=Int128(-(2**100)),
        u=UInt128(2**127 + 5),
        bf=ml_dtypes.bfloat16(2.5),
        ch=JuliaBits("Core.Char", b"a\x00\x00\x00"),
    )
    with f:
        assert f["i"].id.get_type().get_size() == 16 and f["u"].id.get_type().get_size() == 16
        assert f["i"].id.get_type().get_sign() == h5py.h5t.SGN_2
        assert dataset_type_name(f["bf"]) == "Core.BFloat16"
        assert f["bf"].id.get_type().get_class() == h5py.h5t.OPAQUE
        assert dataset_type_name(f["ch"]) == "Core.Char"
    back = treexchange.load(path)
    assert back["i"] == -(2**100) and isinstance(back["i"], Int128)
    assert back["u"] == 2**127 + 5 and isinstance(back["u"], UInt128)
    assert back["bf"].dtype == ml_dtypes.bfloat16 and float(back["bf"]) == 2.5
    assert back["ch"] == JuliaBits("Core.Char", b"a\x00\x00\x00")


def test_symbol_and_ghosts(tmp_path: Path) -> None:
    path, f = save_and_open(
        tmp_path, s=Symbol("relu"), n=None, m=MISSING, u=(), g=Singleton("NNlib.#relu"), e=NamedTuple()
    )
    with f:
        assert dataset_type_name(f["s"]) == "Core.Symbol"
        for name, jl in [("n", "Core.Nothing"), ("m", "Base.Missing"), ("u", "Tuple"), ("g", "NNlib.#relu")]:
            assert f[name].shape is None, name  # NULL dataspace: no data at all
            assert dataset_type_name(f[name]) == jl
            assert h5py.Datatype(f[name].id.get_type()).attrs["empty"] == 1
    back = treexchange.load(path)
    assert back["s"] == "relu" and isinstance(back["s"], Symbol)
    assert back["n"] is None and back["m"] is MISSING and back["u"] == ()
    assert back["g"] == Singleton("NNlib.#relu") and back["e"] == NamedTuple()


def test_empty_top_level_string_is_written_like_jld2(tmp_path: Path) -> None:
    # JLD2 stores "" as a size-0 fixed string, which libhdf5 >= 1.14 refuses to open (format
    # §9.2); the rest of the file is fine and treexchange reads it.
    path, f = save_and_open(tmp_path, s="", t="x")
    with f:
        assert f["t"][()] == b"x"
        with pytest.raises((KeyError, OSError)):
            f["s"]
    assert treexchange.load(path) == {"s": "", "t": "x"}


# --- arrays ------------------------------------------------------------------------------------

ARRAYS = {
    "c_order": np.arange(24, dtype=np.float32).reshape(2, 3, 4),
    "f_order": np.asfortranarray(np.arange(24, dtype=np.int16).reshape(2, 3, 4)),
    "strided": np.arange(80.0).reshape(8, 10)[::3, 1::4],
    "transposed_view": np.arange(12, dtype=np.uint32).reshape(3, 4).T,
    "big_endian": np.arange(6, dtype=">f8").reshape(2, 3),
    "bool": np.array([[True, False, True], [False, False, True]]),
    "complex": (np.arange(6) + 0.5j).astype(np.complex64).reshape(3, 2),
    "float16": np.linspace(0, 1, 7, dtype=np.float16),
    "vector": np.arange(5, dtype=np.int64),
}


@pytest.mark.parametrize("name", list(ARRAYS))
def test_arrays_in_julia_order(tmp_path: Path, name: str) -> None:
    value = ARRAYS[name]
    path, f = save_and_open(tmp_path, a=value)
    with f:
        ds = f["a"]
        assert ds.shape == value.shape[::-1]
        data = ds[()]
        if data.dtype.names == ("re", "im"):
            data = data["re"] + 1j * data["im"]
        elif value.dtype == bool:
            data = data.astype(bool)
        assert np.array_equal(data.T, value)
        assert ds.id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
        assert absolute_offset(ds) % 8 == 0  # JLD2 aligns array data to 8 bytes
    back = treexchange.load(path, "a")
    assert back.shape == value.shape and np.array_equal(back, value)
    assert back.dtype == value.dtype.newbyteorder("=")


def test_bfloat16_array(tmp_path: Path) -> None:
    value = np.array([[1, 2, 3], [4, 5, 6]], dtype=ml_dtypes.bfloat16)
    path, f = save_and_open(tmp_path, a=value)
    with f:
        raw = f["a"][()]
        assert raw.shape == (3, 2) and raw.dtype.itemsize == 2
        assert np.array_equal(raw.view(ml_dtypes.bfloat16).T, value)
        assert committed_names(f) == ["Core.DataType", "Core.BFloat16"]
    assert values_equal(treexchange.load(path, "a"), value)


def test_jax_array(tmp_path: Path) -> None:
    jnp = pytest.importorskip("jax.numpy")
    value = jnp.arange(6.0, dtype=jnp.float32).reshape(2, 3)
    path, f = save_and_open(tmp_path, a=value, pair=NamedTuple(x=value, y=value))
    with f:
        assert np.array_equal(f["a"][()].T, np.asarray(value))
    back = treexchange.load(path)
    assert np.array_equal(back["a"], np.asarray(value)) and back["a"].dtype == np.float32
    assert back["pair"]["x"] is back["pair"]["y"]  # one jax array object: written once


def test_zero_dim_and_empty_arrays(tmp_path: Path) -> None:
    path, f = save_and_open(
        tmp_path, z=np.array(2.5, np.float32), e=np.zeros((0, 3)), e1=np.zeros(0, np.int8)
    )
    with f:
        z = f["z"]
        assert z.shape == (1,) and z[0] == 2.5
        assert z.attrs["dimensions"].shape == (0,)
        assert f["e"].shape == (3, 0)
        assert f["e"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT
    back = treexchange.load(path)
    assert back["z"].shape == () and back["z"].dtype == np.float32 and back["z"] == 2.5
    assert back["e"].shape == (0, 3) and back["e1"].shape == (0,)


def test_list_is_vector_any(tmp_path: Path) -> None:
    value = [1, 2.5, "x", None, np.ones(2), (1, 2), [Symbol("a")]]
    path, f = save_and_open(tmp_path, v=value)
    with f:
        ds = f["v"]
        assert h5py.check_ref_dtype(ds.dtype) is h5py.Reference and ds.shape == (7,)
        eltype = f[ds.attrs["julia_type"]]
        assert eltype.fields("name")[()] in (b"Core.Any", "Core.Any")
        elements = [f[r] for r in ds[()]]
        assert elements[0][()] == 1 and elements[1][()] == 2.5 and elements[2][()] == b"x"
        assert elements[3].shape is None
        assert np.array_equal(elements[4][()], np.ones(2))
    assert values_equal(treexchange.load(path, "v"), value)


def test_julia_arrays_of_strings_symbols_and_ghosts(tmp_path: Path) -> None:
    strings = JuliaArray("Core.String", ["a", "bb", "", "σ²"])
    symbols = JuliaArray("Core.Symbol", [Symbol("relu"), Symbol("tanh")])
    ghosts = JuliaArray("Core.Nothing", np.array([[None] * 3] * 2, dtype=object))
    path, f = save_and_open(tmp_path, s=strings, y=symbols, g=ghosts)
    with f:
        assert [x.decode() for x in f["s"][()]] == ["a", "bb", "", "σ²"]
        assert dataset_type_name(f["y"]) == "Core.Symbol"
        assert f["g"].shape is None and list(f["g"].attrs["dimensions"]) == [3, 2]
    back = treexchange.load(path)
    assert back["s"] == strings and back["y"] == symbols and back["g"] == ghosts


def test_union_arrays_are_inline_union_elements(tmp_path: Path) -> None:
    # JLD2 writes Vector{Union{Nothing,Float64}} as JLD2.InlineUnionEl{Nothing,Float64} structs:
    # (mask = 0 for the first member, 255 for the second; t1 is a ghost, so no member).
    value = JuliaArray("Core.Union{Core.Nothing,Core.Float64}", [None, 1.5, None, -2.0])
    path, f = save_and_open(tmp_path, u=value)
    with f:
        assert dataset_type_name(f["u"]) == "JLD2.InlineUnionEl"
        rows = f["u"][()]
        assert rows.dtype.names == ("mask", "t2") and rows.dtype.itemsize == 9
        assert rows["mask"].tolist() == [0, 255, 0, 255] and rows["t2"].tolist() == [0.0, 1.5, 0.0, -2.0]
    assert treexchange.load(path, "u") == value


def test_other_union_arrays_are_references_typed_by_a_union(tmp_path: Path) -> None:
    # Not two bits types: an array of references whose julia_type is a Core.Union dataset.
    value = JuliaArray("Core.Union{Core.Nothing,Core.String}", [None, "a", "bc"])
    path, f = save_and_open(tmp_path, u=value)
    with f:
        ds = f["u"]
        assert h5py.check_ref_dtype(ds.dtype) is h5py.Reference
        union = f[ds.attrs["julia_type"]]
        assert dataset_type_name(union) == "Core.Union"
        assert union.dtype.names == ("description", "datatype", "unionall")
    assert treexchange.load(path, "u") == value


def test_dicts_are_serialized_dicts(tmp_path: Path) -> None:
    # str-keyed Dicts must be JuliaDicts (a plain str-keyed dict is a NamedTuple); other keys
    # make a Dict from a plain dict too.
    typed = JuliaDict({"a": np.float32(1), "b": np.float32(2)})
    mixed = JuliaDict({"x": 1, "y": "two", "z": [3]})
    bits = {np.int64(1): 0.5, np.int64(-1): 0.25}
    path, f = save_and_open(tmp_path, t=typed, m=mixed, b=bits, e=JuliaDict())
    with f:
        for name in "tmbe":
            t = h5py.Datatype(f[name].id.get_type())
            assert julia_type_name(t) == "Base.Dict"
            arr = np.zeros((), _NAME_ONLY)
            h5py.h5a.open(t.id, b"written_type").read(arr)
            assert arr["name"][()] in (b"JLD2.SerializedDict", "JLD2.SerializedDict")
        kv = f[f["b"][()]["kvvec"]]  # Vector{Pair{Int64,Float64}}: isbits pairs stored inline
        assert kv.dtype.names == ("first", "second") and kv.shape == (2,)
    back = treexchange.load(path)
    assert values_equal(back["t"], typed) and values_equal(back["m"], mixed)
    assert values_equal(back["b"], bits) and back["e"] == {}
    assert all(type(back[name]) is JuliaDict for name in "tmbe")


def test_long_homogeneous_tuples_become_vectors(tmp_path: Path) -> None:
    floats = tuple(np.float64(i) for i in range(12))
    layers = tuple(NamedTuple(w=np.full(2, i, np.float32)) for i in range(11))
    short = tuple(np.float64(i) for i in range(10))
    path, f = save_and_open(tmp_path, f=floats, l=layers, s=short, nt=NamedTuple(layers=layers))
    with f:
        for name in ("f", "l"):
            t = h5py.Datatype(f[name].id.get_type())
            assert t.id.get_class() == h5py.h5t.REFERENCE  # custom serialization: written as Vector
            assert "written_type" in [n.decode() for n in _attr_names(t)]
        assert f["s"].dtype.names == tuple(str(i) for i in range(1, 11))  # 10 elements: inline compound
    assert values_equal(
        treexchange.load(path), {"f": floats, "l": layers, "s": short, "nt": NamedTuple(layers=layers)}
    )


def _attr_names(obj: Any) -> list[bytes]:
    names: list[bytes] = []
    h5py.h5a.iterate(obj.id, lambda n: names.append(n))
    return names


def test_shared_arrays_are_written_once(tmp_path: Path) -> None:
    w = np.arange(6.0).reshape(2, 3)
    s = "tied"
    path, f = save_and_open(tmp_path, a=NamedTuple(enc=w, dec=w), b=w, s1=s, s2=s)
    with f:
        row = f["a"][()]
        assert h5py.h5o.get_info(f[row["enc"]].id).addr == h5py.h5o.get_info(f[row["dec"]].id).addr
        assert h5py.h5o.get_info(f["b"].id).addr == h5py.h5o.get_info(f[row["enc"]].id).addr
        # Julia's objectid of a String is its content: equal strings are one dataset.
        assert h5py.h5o.get_info(f["s1"].id).addr == h5py.h5o.get_info(f["s2"].id).addr
    back = treexchange.load(path)
    assert back["a"]["enc"] is back["a"]["dec"] is back["b"]


def test_groups_and_link_order(tmp_path: Path) -> None:
    path = tmp_path / "g.jld2"
    treexchange.save(path, {"a/x": 1, "top": 2, "a/b/y": 3, "c/z": Symbol("q")})
    # JLD2 links datasets first, then groups in creation order, then _types (h5py lists names
    # sorted, so read the link messages in order with treexchange's HDF5 layer).
    from treexchange._hdf5 import HDF5File

    with HDF5File(path) as h5:
        root = h5.object(h5.root_address)
        assert list(root.links()) == ["top", "a", "c", "_types"]
        assert list(h5.object(root.links()["a"]).links()) == ["x", "b"]
    with h5py.File(path, "r") as f:
        assert f["a/b/y"][()] == 3
    back = treexchange.load(path)
    assert back["a"]["b"]["y"] == 3 and back["c"]["z"] == "q" and back["top"] == 2


def test_root_attributes(tmp_path: Path) -> None:
    path = tmp_path / "r.jld2"
    treexchange.save(path, x=np.ones(2), root_attributes={"note": '{"a": "μ"}', "origin": "σ", "e": ""})
    with h5py.File(path, "r") as f:
        # Variable-length UTF-8 strings: libhdf5 hands them over as str.
        assert dict(f.attrs) == {"note": '{"a": "μ"}', "origin": "σ", "e": ""}
        assert f.attrs.get_id("note").get_type().is_variable_str()
        assert list(f) == ["x"]
    with treexchange.File(path) as jf:
        assert jf.attrs == {"note": '{"a": "μ"}', "origin": "σ", "e": ""}
    assert values_equal(treexchange.load(path), {"x": np.ones(2)})


def test_long_root_attribute_stays_out_of_the_header(tmp_path: Path) -> None:
    # One header message holds at most 64 KiB: the text lives in the global heap instead.
    path = tmp_path / "r.jld2"
    text = "σ" * 70_000
    treexchange.save(path, x=1, root_attributes={"note": text})
    with h5py.File(path, "r") as f:
        assert f.attrs["note"] == text
    with treexchange.File(path) as jf:
        assert jf.attrs["note"] == text
    with pytest.raises(ConversionError, match="root attribute name"):
        treexchange.save(path, x=1, root_attributes={"n" * 70_000: "v"})


def test_long_tuple_of_int128(tmp_path: Path) -> None:
    # NTuple{11,Int128} is written as a Vector{Int128}: numpy has no dtype for its elements.
    path = tmp_path / "t.jld2"
    value = tuple(Int128(2**100 + i) for i in range(11))
    treexchange.save(path, t=value, u=tuple(UInt128(2**127 + i) for i in range(12)))
    back = treexchange.load(path)
    assert back["t"] == value and all(isinstance(v, Int128) for v in back["t"])
    assert back["u"] == tuple(UInt128(2**127 + i) for i in range(12))
    with h5py.File(path, "r") as f:  # a reference to a Vector{Int128}: 11 little-endian 16-byte ints
        vec = f[f["t"][()]]  # numpy has no 16-byte int: check the type and read the raw bytes
        assert vec.shape == (11,) and vec.id.get_type().get_size() == 16
        offset = vec.id.get_offset()
    raw = path.read_bytes()[offset : offset + 16 * 11]
    assert [int.from_bytes(raw[i : i + 16], "little", signed=True) for i in range(0, 176, 16)] == list(value)


def test_jax_prng_key_is_state_free_as_in_to_julia(tmp_path: Path) -> None:
    """``save`` follows ``to_julia``: a typed PRNG key is RNG state, written as ``()`` (as
    ``Flux.state`` drops RNGs); its raw data is kept when asked for with ``key_data``."""
    import jax

    treexchange.save(tmp_path / "k.jld2", state=NamedTuple(rng=jax.random.key(0)))
    assert treexchange.load(tmp_path / "k.jld2", "state") == NamedTuple(rng=())
    raw = jax.random.key_data(jax.random.key(0))
    treexchange.save(tmp_path / "k.jld2", state=NamedTuple(rng=raw))
    assert np.array_equal(treexchange.load(tmp_path / "k.jld2", "state")["rng"], np.asarray(raw))


def test_unicode_names(tmp_path: Path) -> None:
    value = NamedTuple(**{"σ²": np.float32(1), "μ": np.float32(2), "ϵ": 3.0, "β⃗₀": np.ones(2)})
    path, f = save_and_open(tmp_path, **{"θ": value})
    with f:
        assert f["θ"].dtype.names == ("σ²", "μ", "ϵ", "β⃗₀")
    assert values_equal(treexchange.load(path, "θ"), value)


def test_inline_limit_and_large_compact_limit(tmp_path: Path) -> None:
    # 129 array fields = 1032 bytes of Julia pointers > 1024: the inner NamedTuple becomes a
    # reference of its parent instead of an inline compound (JLD2's MAX_INLINE_SIZE).
    # A non-array value of 8192 bytes or more is contiguous, smaller ones compact.
    wide = NamedTuple((f"w{i}", np.ones(1)) for i in range(129))
    narrow = NamedTuple((f"w{i}", np.ones(1)) for i in range(128))
    huge = NamedTuple((f"w{i}", np.float64(i)) for i in range(1024))
    path, f = save_and_open(tmp_path, p=NamedTuple(wide=wide, narrow=narrow), big=wide, huge=huge)
    with f:
        row = f["p"].dtype
        assert h5py.check_ref_dtype(row["wide"]) is h5py.Reference
        assert row["narrow"].names is not None and row["narrow"].itemsize == 128 * 8
        assert f["big"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT  # 1032 bytes
        assert f["huge"].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS  # 8192 bytes
        assert f["huge"][()]["w1023"] == 1023
    assert values_equal(treexchange.load(path, "p"), NamedTuple(wide=wide, narrow=narrow))


def test_user_struct_without_layout(tmp_path: Path) -> None:
    value = JuliaStruct("Main.Point{Core.Float64}", {"x": 1.0, "y": np.float32(2), "tag": Symbol("p")})
    path, f = save_and_open(tmp_path, p=value)
    with f:
        assert dataset_type_name(f["p"]) == "Main.Point"
        assert f["p"].dtype.names == ("x", "y", "tag")
    back = treexchange.load(path, "p")
    assert back.type == value.type and values_equal(back.fields, {"x": 1.0, "y": np.float32(2), "tag": "p"})


# --- the bytes themselves ----------------------------------------------------------------------


def test_header_superblock_and_checksums(tmp_path: Path) -> None:
    path = tmp_path / "h.jld2"
    treexchange.save(path, x=np.ones(3), producer=" (Julia 1.11.1 64-bit LE)")
    raw = path.read_bytes()
    assert (
        raw[:512].rstrip(b"\x00")
        == b"HDF5-based Julia Data Format, version 0.2.0\x00 (Julia 1.11.1 64-bit LE)"
    )
    assert raw[512:520] == b"\x89HDF\r\n\x1a\n" and raw[520] == 2
    base, _ext, eof, _root = struct.unpack("<QQQQ", raw[524:556])
    assert base == 512 and eof == len(raw)
    with treexchange.open(path, verify_checksums=True) as f:
        assert f.producer == " (Julia 1.11.1 64-bit LE)"
        assert np.array_equal(f.read("x"), np.ones(3))


# --- errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "where"),
    [
        (NamedTuple(a=NamedTuple(b=object())), ("m", "a", "b")),
        ((1, {1, 2}), ("m", 2)),
        (NamedTuple(x=np.array(["a"], dtype=object)), ("m", "x")),
        ([1, NamedTuple(z=object())], ("m", 2, "z")),
        ("lone \udc80 surrogate", ("m",)),
        (NamedTuple(a=[Symbol("x\ud800")]), ("m", "a", 1)),
        ({"k\udfff": 1}, ("m", "k\udfff")),
        (JuliaDict({"k\udfff": 1}), ("m", "k\udfff")),
    ],
)
def test_unsupported_values_name_their_path(tmp_path: Path, value: Any, where: tuple[Any, ...]) -> None:
    path = tmp_path / "bad.jld2"
    with pytest.raises(ConversionError) as info:
        treexchange.save(path, m=value)
    assert info.value.path == where
    assert not path.exists() and list(tmp_path.iterdir()) == []


def test_header_message_size_limit_is_a_clean_error(tmp_path: Path) -> None:
    wide = NamedTuple((f"field_{i}", np.float64(i)) for i in range(5000))  # > 64 KiB compound type
    with pytest.raises(treexchange.WriteError, match=r"5000 fields.*65535"):
        treexchange.save(tmp_path / "wide.jld2", w=wide)
    assert list(tmp_path.iterdir()) == []


def test_absurdly_deep_nesting_is_a_limit_error(tmp_path: Path) -> None:
    deep: Any = 1
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(treexchange.LimitError, match="max_depth=512") as info:
        treexchange.save(tmp_path / "deep.jld2", d=deep)
    assert len(info.value.path) == 514  # the name and 513 positions: the 513th nested list crosses it
    assert list(tmp_path.iterdir()) == []


def test_bad_names_and_options(tmp_path: Path) -> None:
    path = tmp_path / "x.jld2"
    with pytest.raises(ConversionError):
        treexchange.save(path, _types=1)
    with pytest.raises(ConversionError):
        treexchange.save(path, {"a": 1, "a/b": 2})
    with pytest.raises(ValueError):
        treexchange.save(path, compress="lzma", x=1)
    with pytest.raises(TypeError):
        treexchange.save(path, {1: 2})
    with pytest.raises(TypeError):
        treexchange.save(path, x=1, root_attributes={"a": 1})
    assert not path.exists()


def test_embedded_schema_round_trip(tmp_path: Path) -> None:
    # The schema layer stores its JSON as a root attribute; load() then checks the file against it.
    state = NamedTuple(weight=np.ones((2, 3), np.float32), σ=())
    schema = treexchange.infer_schema({"model_state": state})
    path = tmp_path / "s.jld2"
    treexchange.save(path, model_state=state, root_attributes=treexchange.schema_to_attributes(schema))
    assert treexchange.read_embedded_schema(str(path)) == schema
    assert values_equal(treexchange.load(path, "model_state"), state)
    bad = tmp_path / "bad.jld2"
    wrong = NamedTuple(weight=np.ones((2, 4), np.float32), σ=())
    treexchange.save(bad, model_state=wrong, root_attributes=treexchange.schema_to_attributes(schema))
    with pytest.raises(treexchange.MismatchError):
        treexchange.load(bad, "model_state")


def test_field_type_and_field_size_agree_for_every_type() -> None:
    """``h5fieldtype`` (the HDF5 type of a field) and ``field_kind`` (its size in the packed
    record) must describe the same storage, or records are mis-sized. Checked for every type a
    varied write session meets, including ``Core.Union`` known only by name but committed."""
    import io

    from treexchange._jld2 import _encode_hdf5 as enc
    from treexchange._jld2._writer import Committed, JLD2Writer

    w = JLD2Writer(io.BytesIO())
    w.write("u", JuliaArray("Core.Union{Core.Nothing,Core.String}", [None, "a"]))
    w.write("s", JuliaStruct("Main.Foo", {"a": 1, "b": np.zeros(2), "c": (1.0, Symbol("x"))}))
    w.write("d", {"a": [1, 2], "b": None})
    w.write("n", NamedTuple(t=tuple(range(12)), z=Int128(3), c=1 + 2j))
    types = list(w.types._cache.values())
    assert any(t.cat.value == "other" and t.name == "Core.Union" for t in types)
    for t in types:
        kind = w.field_kind(t.writeas, True)
        h5 = w.h5fieldtype(t.writeas, t, True)
        stored = w.datatypes[h5.number - 1] if isinstance(h5, Committed) else h5
        if kind == "none":
            assert h5 is None, t
        elif kind == "ref":
            assert stored == enc.REFERENCE, t
        else:
            assert stored is not None and stored.size == w.field_size(t, True), t


def _field_stored_by_reference(path: Path, field: str) -> int:
    """How many of the compound datatypes h5py (libhdf5) finds in ``path`` (datasets and
    committed types) have a member ``field`` stored as an object reference; asserts there is one
    and that no such member is stored otherwise (inline)."""
    found = {"ref": 0, "other": 0}

    def look(dt: np.dtype) -> None:
        if dt.names is None:
            return
        for name in dt.names:
            member = dt.fields[name][0]
            if name == field:
                found["ref" if h5py.check_dtype(ref=member) is h5py.Reference else "other"] += 1
            look(member)

    with h5py.File(path, "r") as f:
        for k in f.get("_types", {}):
            look(f["_types"][k].dtype)
    for ds in reachable_datasets(path).values():
        look(ds.dtype)
    assert found["ref"] >= 1 and found["other"] == 0, found
    return found["ref"]


def _saves_declared_any(path: Path, field: str, **values: Any) -> None:
    """``save`` writes the values (a struct type made in Python whose instances hold values of
    several types in ``field``: the field declared abstract, stored by reference as JLD2.jl
    stores such a field), they read back equal, and h5py reads every dataset."""
    treexchange.save(path, **values)
    for name, value in values.items():
        assert values_equal(treexchange.load(path, name), value), name
    _field_stored_by_reference(path, field)
    _all_datasets_read(path)


@pytest.mark.parametrize("order", ["in one vector", "as two names"])
def test_instances_of_one_struct_type_with_other_field_types_declare_it_abstract(
    tmp_path: Path, order: str
) -> None:
    # A Julia struct type has one declaration per field: two instances of Main.P whose x is a
    # Float64 in one and an Int64 in the other exist in Julia only when x is declared with a type
    # that is not concrete (Real, Any, a Union), which JLD2.jl stores by reference, each value a
    # dataset of its own type. A struct made in Python (or read from BSON, which records no
    # declarations) is written so: it was refused ("another instance of Main.P made 'x' a ...").
    a = JuliaStruct("Main.P", {"x": 1.0, "y": np.zeros(3, np.float32)})
    b = JuliaStruct("Main.P", {"x": 2, "y": np.zeros(3, np.float32)})
    path = tmp_path / "p.jld2"
    values = {"v": [a, b]} if order == "in one vector" else {"u": a, "w": b}
    _saves_declared_any(path, "x", **values)
    back = (
        [treexchange.load(path, "v")[i] for i in (0, 1)]
        if order == "in one vector"
        else [treexchange.load(path, n) for n in ("u", "w")]
    )
    assert [np.asarray(s["x"]).dtype for s in back] == [np.float64, np.int64]  # (each its own type)
    # instances that agree keep the concrete declaration (x inline)
    same = tmp_path / "same.jld2"
    treexchange.save(same, v=[a, JuliaStruct("Main.P", {"x": 3.0, "y": np.ones(3, np.float32)})])
    with pytest.raises(AssertionError, match=r"'other': [1-9]"):
        _field_stored_by_reference(same, "x")  # (x is a Float64, inline)


@pytest.mark.parametrize("ghost", [(), None], ids=["Tuple{}", "nothing"])
@pytest.mark.parametrize("order", ["value first", "ghost first"])
def test_a_field_another_instance_holds_as_a_ghost_is_not_lost(
    tmp_path: Path, ghost: object, order: str
) -> None:
    # A field that one Python-made instance of Main.S holds as () or nothing (a type with no
    # stored data) and another as 0: once the instance typed first fixed the type, and when that
    # made x a ghost the 0 was written as nothing (both read back as Singleton("Main.S"), found by
    # the write fuzz test). The field is declared abstract now (Julia's Union{Nothing, Int64}
    # for nothing): each value by reference, both read back as written, in either order.
    a, b = JuliaStruct("Main.S", {"x": 0, "y": 1.5}), JuliaStruct("Main.S", {"x": ghost, "y": 2.5})
    values = [a, b] if order == "value first" else [b, a]
    path = tmp_path / "s.jld2"
    _saves_declared_any(path, "x", v=values)
    assert [s.fields["x"] for s in treexchange.load(path, "v")] == [s.fields["x"] for s in values]
    # instances that agree, ghost fields included, still write and read back whole
    treexchange.save(path, v=[b, JuliaStruct("Main.S", {"x": ghost, "y": 3.5})])
    back = treexchange.load(path, "v")
    assert [s.fields["y"] for s in back] == [2.5, 3.5]


def _all_datasets_read(path: Path) -> int:
    """h5py (libhdf5) reads every dataset reachable from the root through links and references;
    their count."""
    found = reachable_datasets(path)
    for ds in found.values():
        if ds.shape is not None and is_numeric(ds):
            ds[()]
    return len(found)


def test_a_reference_field_another_instance_holds_of_another_type_is_declared_abstract(
    tmp_path: Path,
) -> None:
    # Fuzz seed 23 (30,000 examples): the instance typed first made x a Vector{Any}, stored by
    # reference; the other instance's () was written as a reference to a Tuple{} dataset, which
    # JLD2.jl loads into a field declared Vector{Any} only by convert(Vector{Any}, ()), a
    # MethodError (it was refused). Declared abstract, the field takes each value as stored.
    path = tmp_path / "s.jld2"
    for values in (
        [JuliaStruct("Main.S", {"x": ()}), JuliaStruct("Main.S", {"x": []})],
        [JuliaStruct("Main.S", {"x": []}), JuliaStruct("Main.S", {"x": ()})],
    ):
        _saves_declared_any(path, "x", v=values)
    # Arrays of one element type and rank differ in nothing Julia declares: each instance keeps its own.
    a = JuliaStruct("Main.S", {"x": np.arange(3.0, dtype=np.float32), "y": [1, "a"]})
    b = JuliaStruct("Main.S", {"x": np.arange(5.0, dtype=np.float32), "y": []})
    treexchange.save(path, v=[a, b])
    assert values_equal(treexchange.load(path, "v"), [a, b])
    assert _all_datasets_read(path) >= 5  # v, two x, two y
    # a Vector{Float64} beside a Vector{Float32}: declared abstract, nothing converted (was refused)
    wrong = JuliaStruct("Main.S", {"x": np.arange(4.0), "y": []})
    _saves_declared_any(tmp_path / "w.jld2", "x", v=[wrong, b])
    assert treexchange.load(tmp_path / "w.jld2", "v")[0]["x"].dtype == np.float64


def test_a_field_of_several_types_nested_in_a_namedtuple_is_declared_abstract(tmp_path: Path) -> None:
    # Structs inside a NamedTuple (a layer and its twin), one holding a matrix where the other
    # holds a vector; and a level deeper, a mutable struct (written as its own dataset) whose
    # field holds a String in one instance and a Vector{Any} in the other: both were refused.
    layer = JuliaStruct("Main.Layer", {"w": np.ones((2, 2), np.float32), "act": Symbol("relu")})
    twin = JuliaStruct("Main.Layer", {"w": np.ones(2, np.float32), "act": Symbol("relu")})
    _saves_declared_any(tmp_path / "m.jld2", "w", m=NamedTuple(a=layer, b=twin))
    box = lambda x: JuliaStruct("Main.Box", {"x": x}, mutable=True)  # noqa: E731
    inner = NamedTuple(
        a=JuliaStruct("Main.Outer", {"box": box("text"), "n": 1}),
        b=JuliaStruct("Main.Outer", {"box": box(["text"]), "n": 2}),
    )
    _saves_declared_any(tmp_path / "n.jld2", "x", m=inner)


def test_cyclic_mutable_structs_are_typed_once_and_still_save(tmp_path: Path) -> None:
    # Each field's value is typed, not what it holds: a cycle (a node whose parent points back to
    # it) is typed once per instance and saves; a node whose value is another array type makes
    # that field abstract (by reference: its arrays are anyway).
    root = JuliaStruct("Main.Node", {"value": np.zeros(2), "parent": None}, mutable=True)
    child = JuliaStruct("Main.Node", {"value": np.ones(3), "parent": root}, mutable=True)
    root.fields["parent"] = child
    path = tmp_path / "tree.jld2"
    treexchange.save(path, tree=root)
    back = treexchange.load(path, "tree")
    assert back["parent"]["parent"] is back and values_equal(back["parent"]["value"], np.ones(3))
    assert _all_datasets_read(path) >= 4  # two nodes, two value arrays
    stray = JuliaStruct("Main.Node", {"value": np.zeros(2, np.float32), "parent": root}, mutable=True)
    treexchange.save(tmp_path / "two.jld2", tree=root, stray=stray)
    again = treexchange.load(tmp_path / "two.jld2", "stray")
    assert again["value"].dtype == np.float32 and again["parent"]["parent"]["parent"] is again["parent"]


def test_a_field_first_declared_any_holds_values_of_any_type(tmp_path: Path) -> None:
    # An #undef field of the instance typed first is declared Any (a NULL reference): other
    # instances may hold any value there, each by reference; so may a field whose instances
    # disagree (tag: a String in three, a Symbol in one), where one agreeing concrete type was
    # written converted (the Symbol as a String) and then refused.
    def s(x: Any, tag: Any) -> JuliaStruct:
        return JuliaStruct("Main.S", {"x": x, "tag": tag})

    values = [s(1.5, "a"), s("text", "b"), s(np.arange(3), "c"), s(treexchange.UNDEF, "d")]
    path = tmp_path / "any.jld2"
    treexchange.save(path, v=values)
    back = treexchange.load(path, "v")
    assert values_equal(back, values)
    assert _all_datasets_read(path) >= 4
    with h5py.File(path, "r") as f:
        assert f["v"].shape == (4,)
    mixed = [s(1.5, Symbol("a")), *values[1:]]
    _saves_declared_any(tmp_path / "mixed.jld2", "tag", v=mixed)
    assert type(treexchange.load(tmp_path / "mixed.jld2", "v")[0]["tag"]) is Symbol


def test_an_inline_struct_field_of_another_struct_type_is_declared_abstract(tmp_path: Path) -> None:
    # x holds a Main.A in one instance and a Main.B (same field names) in the other: the encoder
    # once wrote the A's fields as a B without a word (both read back as Main.B), then refused
    # it. Declared abstract, each is a dataset of its own type and reads back as itself.
    a = JuliaStruct("Main.S", {"x": JuliaStruct("Main.A", {"n": 1})})
    b = JuliaStruct("Main.S", {"x": JuliaStruct("Main.B", {"n": 2})})
    _saves_declared_any(tmp_path / "s.jld2", "x", v=[a, b])
    assert [str(s["x"].type) for s in treexchange.load(tmp_path / "s.jld2", "v")] == ["Main.A", "Main.B"]


def test_an_array_of_a_zero_size_type_refuses_an_element_of_another_type(tmp_path: Path) -> None:
    # No element of a Vector{Nothing} (or of a fieldless struct type) is stored: one of another
    # type was dropped without a word (read back as nothing). A Python-made struct element is
    # typed too, so the ghost-field check runs for the element the array's type was not taken from.
    path = tmp_path / "g.jld2"
    s = lambda x: JuliaStruct("Main.S", {"x": x})  # noqa: E731
    for values, where in (
        (JuliaArray("Core.Nothing", [None, 0]), ("v", 2)),
        (JuliaArray("Core.Tuple{}", [(), (), None]), ("v", 3)),
    ):
        with pytest.raises(ConversionError, match="stores no data") as info:
            treexchange.save(path, v=values)
        assert info.value.path == where
        assert list(tmp_path.iterdir()) == []
    # a Main.S element whose x is () where another's is 0: x declared abstract, nothing dropped
    _saves_declared_any(tmp_path / "s.jld2", "x", v=JuliaArray("Main.S", [s(()), s(0)]))
    treexchange.save(path, v=JuliaArray("Core.Nothing", [None] * 3), w=JuliaArray("Main.S", [s(()), s(())]))
    assert treexchange.load(path, "v") == JuliaArray("Core.Nothing", [None] * 3)
    assert treexchange.load(path, "w") == JuliaArray("Main.S", [Singleton("Main.S")] * 2)


def _mixed_field_value(rng: Any, depth: int = 0) -> Any:
    """A value of one of many Julia types (ghosts, numbers, arrays, strings, tuples, structs)."""
    kind = rng.randrange(15)
    if kind == 11 and depth < 2:  # a struct holding something stored (a struct of ghosts reads back
        inner = _mixed_field_value(rng, depth + 1)  # as a Singleton, docs/writing.md)
        while inner is None or inner is MISSING or (type(inner) is tuple and not inner):
            inner = _mixed_field_value(rng, depth + 1)
        return JuliaStruct(rng.choice(["Main.A", "Main.B"]), {"n": inner})
    return [
        None, MISSING, rng.randrange(-5, 5), rng.random(), np.float32(rng.random()),
        np.arange(rng.randrange(4), dtype=rng.choice([np.float32, np.float64, np.int64])),
        "s" * rng.randrange(3), Symbol("a"), (1, 2.0), (), [1, "a"], 0, True, "t",
        np.ones((2, 2), np.float32),
    ][kind]  # fmt: skip


@pytest.mark.parametrize("seed", range(4))
def test_struct_instances_with_fields_of_any_types_save_and_read_back_equal(
    tmp_path: Path, seed: int
) -> None:
    # Instances of one Python-made struct type whose fields hold values of every kind, mixed
    # across instances, in a vector, a tuple, a typed array or as separate names, mutable or not:
    # each writes (the fields that disagree declared Any, by reference), reads back equal, and
    # h5py reads every dataset. (A campaign of 1,800 such cases found nothing else.)
    import random

    rng = random.Random(seed)
    path = tmp_path / "s.jld2"
    for _ in range(25):
        mutable = rng.random() < 0.3
        structs = [
            JuliaStruct(
                "Main.S", {"x": _mixed_field_value(rng), "y": _mixed_field_value(rng)}, mutable=mutable
            )
            for _ in range(rng.randrange(2, 5))
        ]
        how = rng.randrange(4)
        values: dict[str, Any] = (
            {"v": structs},
            {"v": tuple(structs)},
            {"v": JuliaArray("Main.S", structs)},
            {f"v{i}": s for i, s in enumerate(structs)},
        )[how]
        treexchange.save(path, **values)
        for name, value in values.items():
            assert values_equal(treexchange.load(path, name), value), (name, value)
        _all_datasets_read(path)

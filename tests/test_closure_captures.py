"""Closures that captured values, written losslessly instead of refused.

BSON.jl stores a Julia closure as its type, its compiled code and the values it captured
(Projekt_saranego's ResNet: ``(mx, x) -> mx + downsample(x)`` holding a trained
``Chain(Conv, BatchNorm)``). In Julia the closure is an instance of a compiler-made struct type
(``ResNet.#9#10{Flux.Chain{…}}``) whose fields are the captured variables, and JLD2.jl writes it
as any struct. So does treexchange now: the JLD2 file holds that struct (h5py sees its field and
the captured arrays), the safetensors / orbax metadata a struct node, and each reads back as a
:class:`~treexchange.JuliaStruct` that ``values_equal`` the closure. Captures without their names
(no field names for the struct) are still refused, naming the place.
"""

from __future__ import annotations

import copy
import hashlib
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _h5walk import is_numeric, julia_shape, reachable_datasets, sha256_le
from conftest import BUNDLED_DIR
from test_write_values import dataset_type_name

import treexchange as tx
from treexchange import Closure, JuliaStruct, NamedTuple, Singleton
from treexchange._cli import main
from treexchange._juliatype import JuliaType
from treexchange._save import convert
from treexchange._values import each_value, same_type

SARANEGO = BUNDLED_DIR / "bson" / "saranego_resnet_closure.bson"
CLOSURE_TYPE = "ResNet.#9#10"


def _closures(value: Any) -> list[Closure]:
    """The closures with captures in a value tree, in tree order."""
    return [v for _, v in each_value(value) if isinstance(v, Closure) and v.captures]


def _conv_weight(closure_or_struct: Any) -> np.ndarray:
    """The weight of the Conv in the captured ``downsample`` Chain (BSON gives positional fields)."""
    if isinstance(closure_or_struct, Closure):
        (chain,) = closure_or_struct.captures
    else:
        chain = closure_or_struct.fields["downsample"]
    conv = chain["1"][0]
    assert conv.type.name == "Flux.Conv"
    weight = conv["2"]
    assert isinstance(weight, np.ndarray)
    return weight


def _column_major_sha(array: np.ndarray) -> str:
    """SHA-256 of an array's bytes in Julia's (column-major) order, as h5py's are hashed."""
    return hashlib.sha256(np.asarray(array).tobytes(order="F")).hexdigest()


def _walk_to_closures(value: Any) -> list[Any]:
    """The values at the places the source file's closures were (after a round trip)."""
    model = tx.load(SARANEGO)
    places = [p for p, v in each_value(model) if isinstance(v, Closure) and v.captures]
    found = []
    for place in places:
        v = value
        for seg in place:
            v = v.fields[seg] if isinstance(v, JuliaStruct) else v[seg - 1 if isinstance(seg, int) else seg]
        found.append(v)
    return found


def test_the_closures_of_a_real_file_are_written_to_jld2_as_their_struct(tmp_path: Path) -> None:
    source = tx.load(SARANEGO)
    closures = _closures(source)
    assert len(closures) == 2 and all(c.capture_names == ("downsample",) for c in closures)
    values = {"closures": closures, "first": closures[0], "inside": (closures[1], 1.5)}
    out = tmp_path / "closures.jld2"
    tx.save(out, **values)  # (it refused: "holds the values it captured")

    back = tx.load(out)
    assert tx.values_equal(back, values) and tx.values_equal(values, back)
    first = back["first"]
    assert isinstance(first, JuliaStruct) and list(first.fields) == ["downsample"]
    assert same_type(first.type, closures[0].type) and first.type.name == CLOSURE_TYPE
    assert first == closures[0] and closures[0] == first
    for closure, written in zip(closures, back["closures"]):
        w, got = _conv_weight(closure), _conv_weight(written)
        assert got.dtype == w.dtype == np.float32 and got.shape == w.shape
        assert got.tobytes(order="F") == w.tobytes(order="F")  # the BSON file's numbers, bit for bit
    # and not equal once a captured number changes
    altered = copy.deepcopy(back["first"])
    _conv_weight(altered).flat[0] += 1
    assert not tx.values_equal(altered, closures[0]) and altered != closures[0]

    # libhdf5 (h5py) reads the file: the struct's committed type and field, and the captured arrays
    with h5py.File(out, "r") as h:
        ds = h["first"]
        assert ds.dtype.names == ("downsample",)
        assert dataset_type_name(ds) == CLOSURE_TYPE
    found = [ds for ds in reachable_datasets(out).values() if is_numeric(ds)]
    hashes = {(julia_shape(ds), sha256_le(ds[()])) for ds in found}
    assert {(_conv_weight(c).shape, _column_major_sha(_conv_weight(c))) for c in closures} <= hashes


def test_the_whole_real_file_goes_to_safetensors_and_orbax_with_its_captures(tmp_path: Path) -> None:
    source = tx.load(SARANEGO)
    out = tmp_path / "rn.safetensors"
    assert main(["convert", str(SARANEGO), str(out)]) == 0  # (it refused the captures)
    back = tx.load_safetensors(out)
    assert tx.values_equal(back, source) and tx.values_equal(source, back)
    written = _walk_to_closures(back)
    assert all(isinstance(s, JuliaStruct) and s.type.name == CLOSURE_TYPE for s in written)
    for closure, struct in zip(_closures(source), written):
        assert struct == closure
        assert _conv_weight(struct).tobytes(order="F") == _conv_weight(closure).tobytes(order="F")
    from safetensors import safe_open

    with safe_open(str(out), framework="numpy") as f:
        names = [k for k in f.keys() if "downsample" in k]
    assert len(names) >= 2 * 5  # per closure: the Conv's weight and bias, BatchNorm's β, γ, μ, σ²

    pytest.importorskip("orbax.checkpoint")
    ckpt = tmp_path / "ckpt"
    tx.save_orbax(ckpt, source)
    again = tx.load_orbax(ckpt)
    assert tx.values_equal(again, source)
    assert [_conv_weight(s).tobytes() for s in _walk_to_closures(again)] == [
        _conv_weight(c).tobytes() for c in _closures(source)
    ]


def test_the_whole_real_file_converts_to_jld2_its_disagreeing_fields_by_reference(tmp_path: Path) -> None:
    # Flux.BatchNorm's `active` (Julia: Union{Bool,Nothing}) is `false` in the main path and
    # `nothing` in the captured Chains, one BatchNorm type; ResNet.BasicBlock's chain holds Chains
    # of two types (a SkipConnection joined by the closure, one joined by +). BSON.jl stores no
    # declared field types: such fields are declared Any and stored by reference, as JLD2.jl
    # stores a field declared with a type that is not concrete. The file was refused for them.
    out = tmp_path / "rn.jld2"
    convert(SARANEGO, out)  # (verified: read back value-equal)
    back = tx.load(out)
    assert tx.values_equal(back, tx.load(SARANEGO))
    norms = [s for _, s in each_value(back) if isinstance(s, JuliaStruct) and s.type.name == "Flux.BatchNorm"]
    assert {repr(s.fields["10"]) for s in norms} == {"False", "None"}
    assert [_conv_weight(s).tobytes() for s in _walk_to_closures(back)] == [
        _conv_weight(c).tobytes() for c in _closures(tx.load(SARANEGO))
    ]
    found = reachable_datasets(out)
    for ds in found.values():  # the independent reader reads every dataset
        if ds.shape is not None and is_numeric(ds):
            ds[()]


def test_made_closures_round_trip_through_jld2_and_safetensors(tmp_path: Path) -> None:
    counter = Closure(
        "Main.#5#6{Core.Int64,Core.Array{Core.Float32,1}}",
        name="#5",
        captures=(np.int64(3), np.arange(3, dtype=np.float32)),
        capture_names=("n", "w"),
    )
    # capturing a function only: a zero-size struct, which JLD2 stores without data (read back
    # as the singleton of its type, still equal)
    activation = Closure("Main.#7#8{NNlib.#relu}", captures=(Singleton("NNlib.#relu"),), capture_names=("σ",))
    values = {
        "counter": counter,
        "activation": activation,
        "twice": [counter, counter],
        "layer": NamedTuple(weight=np.ones((2, 2), np.float32), f=counter),
    }
    out = tmp_path / "made.jld2"
    tx.save(out, **values)
    back = tx.load(out)
    assert tx.values_equal(back, values) and tx.values_equal(values, back)
    assert back["counter"] == JuliaStruct(counter.type, {"n": 3, "w": np.arange(3, dtype=np.float32)})
    assert back["activation"] == Singleton(activation.type) == activation
    st = tmp_path / "made.safetensors"
    tx.save_safetensors(st, values)
    assert tx.values_equal(tx.load_safetensors(st), values)


@pytest.mark.parametrize("fmt", ["jld2", "safetensors"])
def test_a_closure_without_the_names_of_its_captures_is_still_refused(tmp_path: Path, fmt: str) -> None:
    unnamed = Closure("Main.#3#4{Core.Int64}", captures=(np.int64(1),))
    out = tmp_path / f"f.{fmt}"
    with pytest.raises(tx.UnsupportedError, match="without their names") as info:
        if fmt == "jld2":
            tx.save(out, m=NamedTuple(f=unnamed))
        else:
            tx.save_safetensors(out, {"m": NamedTuple(f=unnamed)})
    assert info.value.path == ("m", "f")
    assert list(tmp_path.iterdir()) == []


def test_a_closure_equals_only_the_struct_of_its_type_with_its_captures() -> None:
    w = np.arange(4, dtype=np.float32)
    c = Closure("Main.#1#2{Core.Array{Core.Float32,1},Core.Int64}", captures=(w, 2), capture_names=("w", "k"))
    same = JuliaStruct(c.type, {"w": w.copy(), "k": 2})
    assert tx.values_equal(c, same) and tx.values_equal(same, c) and c == same and same == c
    assert tx.values_equal([c, (c,)], [same, (same,)])
    unequal = [
        JuliaStruct("Main.#9#10{Core.Array{Core.Float32,1},Core.Int64}", {"w": w, "k": 2}),  # other type
        JuliaStruct(c.type, {"k": 2, "w": w}),  # other order
        JuliaStruct(c.type, {"w": w, "n": 2}),  # other name
        JuliaStruct(c.type, {"w": w, "k": 2, "x": 0}),  # one more field
        JuliaStruct(c.type, {"w": w.astype(np.float64), "k": 2}),  # other dtype
        JuliaStruct(c.type, {"w": w, "k": 3}),  # other value
        Singleton(c.type),  # its type alone: the captures lost
    ]
    for other in unequal:
        assert not tx.values_equal(c, other) and not tx.values_equal(other, c), other
        assert c != other and other != c, other
    # names unknown: no struct to be equal to (the writers refuse it)
    assert not tx.values_equal(Closure(c.type, captures=(w, 2)), same)
    respelled = Closure(JuliaType.parse(str(c.type)), captures=(w, 2), capture_names=("w", "k"))
    assert tx.values_equal(respelled, c)  # (one type, spelled as Julia prints it)

"""Objects a file holds once keep being one object through safetensors and orbax.

A Julia object referenced from two places (Flux's implicit-params optimiser keeps an ``IdDict``
keyed by the model's own weight arrays; two roots sharing a mutable struct) was written to the
tree formats as copies: equal in value, so ``values_equal`` and ``diff`` saw nothing, but no longer
one object, which Julia's ``IdDict`` needs (survey 20: leochartrand/TetrisAI.jl's DQNAgent,
JuliaComputing/ScoringEngineDemo.jl's ``flux-test-cpu.bson``). Now the second occurrence is a
``same`` node of the tree metadata (version 2, written only when there is one) and the lazy
convert reads a file's roots through one session.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import treexchange as tx
from treexchange import FormatError, JuliaStruct, NamedTuple
from treexchange._cli import main
from treexchange._interop import _treejson as tj


def _shared_state() -> dict[str, object]:
    """A model and an optimiser state keyed by the model's own arrays, in two roots."""
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.ones(2, np.float32)
    ctx = JuliaStruct("Main.Context", {"id": np.int64(7)}, mutable=True)
    model = NamedTuple(layers=(NamedTuple(weight=w, bias=b, σ=()),), ctx=ctx)
    moments = [np.zeros_like(w), np.zeros_like(b)]
    iddict = JuliaStruct("Base.IdDict{Any, Any}", {"keys": [w, b], "vals": moments, "ctx": ctx})
    return {"model": model, "opt": iddict}


def _check_shared(roots: dict[str, object]) -> None:
    model, opt = roots["model"], roots["opt"]
    assert isinstance(model, NamedTuple) and isinstance(opt, JuliaStruct)
    layer = model["layers"][0]
    keys = opt.fields["keys"]
    assert keys[0] is layer["weight"] and keys[1] is layer["bias"]  # (one object each, not copies)
    assert opt.fields["ctx"] is model["ctx"]
    assert opt.fields["vals"][0] is not keys[0]  # (equal shapes, other objects: kept apart)


@pytest.mark.parametrize("target", ["s.safetensors", "o.orbax"])
def test_shared_objects_stay_shared_through_the_tree_formats(tmp_path: Path, target: str) -> None:
    source = tmp_path / "a.jld2"
    tx.save(source, **_shared_state())
    _check_shared(tx.load(source))
    assert main(["convert", str(source), str(tmp_path / target)]) == 0
    assert main(["convert", str(tmp_path / target), str(tmp_path / "b.jld2")]) == 0
    back = tx.load(tmp_path / "b.jld2")
    _check_shared(back)
    assert tx.values_equal(back, tx.load(source))


def test_the_document_marks_the_first_object_and_names_it_again() -> None:
    sharing = tj.Sharing()
    state = _shared_state()
    stored: list[tuple[int, ...]] = []

    def store(a: np.ndarray, path: object) -> dict[str, str]:
        stored.append(a.shape)
        return {"dtype": "float32"}

    roots = [[name, tj.encode(v, store, (name,), sharing)] for name, v in state.items()]
    assert sharing.version() == 2 and len(stored) == 4  # (w, b and the two moments: w and b once)
    text = json.dumps(roots)
    assert text.count('"same"') == 3 and '"k": 0' in text
    plain = tj.Sharing()
    tj.encode(NamedTuple(a=np.ones(2), b=np.ones(2)), lambda a, p: {"dtype": "float64"}, (), plain)
    assert plain.version() == 1  # (equal arrays that are not one object: no sharing, version 1)


def test_a_same_node_before_its_object_or_with_a_bad_key_is_a_format_error() -> None:
    arrays = {"w": np.ones(2)}
    get = lambda node, path: arrays["w"]  # noqa: E731
    first = {"t": "array", "dtype": "float64", "shape": [2], "k": 0}
    ok = tj.decode({"t": "tuple", "v": [first, {"t": "same", "k": 0}]}, get)
    assert ok[0] is ok[1]
    for bad, message in (
        ({"t": "tuple", "v": [{"t": "same", "k": 0}, first]}, "before the object it names"),
        ({"t": "tuple", "v": [first, {"t": "same", "k": "0"}]}, "is not a number"),
        ({"t": "tuple", "v": [{"t": "list", "v": [{"t": "same", "k": 0}], "k": 0}]}, "before the object"),
    ):
        with pytest.raises(FormatError, match=message):
            tj.decode(bad, get)
    with pytest.raises(tx.UnsupportedError, match="version 3 is newer"):
        tj.document_roots({"format": tj.TREE_FORMAT, "version": 3, "roots": []}, "f")


@pytest.mark.parametrize("target", ["s.safetensors", "o.orbax"])
def test_a_dict_keeps_the_type_the_file_stored_through_the_tree_formats(tmp_path: Path, target: str) -> None:
    """A Dict's declared type is not always what its entries make: PeggyYuchunWang/Deep-HRL-for-
    Scene-Decomp's ``Dict{Int64, DriverModel{A} where A}`` of ``EgoDriver``s came back from
    safetensors and orbax as ``Dict{Int64, EgoDriver{…}}`` (values equal, so only ``diff`` saw it;
    survey 21). The tree metadata's dict node now carries the type."""
    from treexchange._juliatype import JuliaType

    declared = tx.JuliaDict({"lr": 0.1, "momentum": 0.9})
    declared.julia_type = JuliaType.parse("Base.Dict{Core.String, Core.Any}")
    source = tmp_path / "a.jld2"
    tx.save(source, opts=declared, w=np.ones(2, np.float32))
    assert str(tx.load(source, "opts").julia_type) == "Dict{String, Any}"
    assert main(["convert", str(source), str(tmp_path / target)]) == 0
    assert main(["convert", str(tmp_path / target), str(tmp_path / "b.jld2")]) == 0
    back = tx.load(tmp_path / "b.jld2", "opts")
    assert str(back.julia_type) == "Dict{String, Any}" and back == {"lr": 0.1, "momentum": 0.9}
    assert main(["diff", str(source), str(tmp_path / "b.jld2")]) == 0
    # a dict made in Python (no stored type) is written as before: no "type" in its node
    assert "type" not in tj.encode({"a": 1.0}, lambda a, p: {"name": "x"})

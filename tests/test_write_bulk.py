"""Writing a Dict's Pairs and a model's layers in bulk changes no byte of the file.

``_writer_bulk.encode_refs`` lays out runs of alike references (Pairs of a String key and a small
array, NamedTuples of small arrays) at once, from the writer's per-file plans; the one-by-one path
(``encode_field`` per element) is what it stands for. Files written both ways, and with every plan
off (the general path), must be identical: here for the trees the benchmarks write and for mixes
meant to break runs (arrays met twice, shapes and dtypes that change, non-ASCII and long keys that
open new heap collections, C- and F-ordered, big-endian and strided arrays), through an in-memory
file and a real one (the writer thread), and with the sink's in-place region refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _bulkwrite import saved_both_ways, write_bytes

import treexchange as tx
from treexchange import JuliaDict, NamedTuple
from treexchange._jld2 import _writer_bulk
from treexchange._jld2._writer_sink import Sink


def _leaves(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {f"l{i:06d}": rng.standard_normal(64).astype(np.float32) for i in range(n)}


def _flat_dict() -> JuliaDict:
    return JuliaDict(_leaves(700))


def _dict_of_dicts() -> JuliaDict:
    tree = JuliaDict()
    for k, a in _leaves(900).items():
        tree.setdefault("g" + k[1:5], JuliaDict())[k] = a
    return tree


def _layers() -> NamedTuple:
    vals = list(_leaves(600).values())
    layers = tuple(NamedTuple(weight=vals[i], bias=vals[i + 1]) for i in range(0, len(vals), 2))
    return NamedTuple(layers=layers, σ=())


def _mixed_dict() -> JuliaDict:
    rng = np.random.default_rng(1)
    shared = rng.standard_normal((3, 4)).astype(np.float32)
    tree = JuliaDict()
    for i in range(1500):
        key = (
            ("κλειδί" if i % 7 == 0 else "k")
            + str(i)
            + ("x" * (5000 if i == 700 else i % 300 if i % 50 == 0 else 0))
        )
        if i % 11 == 0:
            v: Any = shared  # met again: a reference to the first dataset
        elif i % 5 == 0:
            v = rng.standard_normal((2, 3)).astype(np.float64)
        elif i % 3 == 0:
            v = np.asfortranarray(rng.standard_normal((4, 2)).astype(np.float32))
        elif i % 13 == 0:
            v = rng.standard_normal(5).astype(">f4")
        elif i % 17 == 0:
            v = rng.standard_normal(10).astype(np.float32)[::2]  # strided
        else:
            v = rng.standard_normal(5).astype(np.float32)
        tree[key] = v
    tree["nested"] = JuliaDict({f"e{i}": np.arange(i + 1.0) for i in range(60)})
    return tree


def _mixed_layers() -> NamedTuple:
    rng = np.random.default_rng(2)
    shared = rng.standard_normal((3, 2)).astype(np.float32)
    layers = []
    for i in range(400):
        weight = (
            shared
            if i % 13 == 0
            else rng.standard_normal((3, 2) if i % 40 < 30 else (2, 2)).astype(np.float32)
        )
        bias = weight if i % 97 == 0 else np.zeros(3, np.float32)
        layers.append(NamedTuple(weight=weight, bias=bias))
    return NamedTuple(layers=tuple(layers))


def _odd_layers() -> NamedTuple:
    """Layers whose bytes are no multiple of 8 (the alignment changes from layer to layer), and
    an array met again now and then (a run stops there)."""
    rng = np.random.default_rng(3)
    shared = rng.standard_normal(3).astype(np.float32)
    layers = [
        NamedTuple(
            weight=shared if i % 37 == 5 else rng.standard_normal(3).astype(np.float32),
            bias=rng.standard_normal(5).astype(np.float32),
        )
        for i in range(500)
    ]
    return NamedTuple(layers=tuple(layers))


def _string_dict() -> JuliaDict:
    """String => String Pairs (two keys in a row: the step-by-step path) beside String => array
    Pairs whose keys grow long enough to open many heap collections in one run."""
    tree = JuliaDict({f"s{i}": "v" * (i % 40) for i in range(300)})
    arrays = {"k" * (i % 700 + 1): np.full(2, i, np.float32) for i in range(1400)}
    arrays["λ" * 3000] = np.zeros(2, np.float32)  # a key longer than a new collection's 4096 bytes
    arrays.update({f"k{i}": np.full(2, i, np.float32) for i in range(100)})
    tree["arrays"] = JuliaDict(arrays)
    return tree


CASES = [_flat_dict, _dict_of_dicts, _layers, _mixed_dict, _mixed_layers, _odd_layers, _string_dict]


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__.strip("_"))
def test_bulk_changes_no_byte(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    value = make()
    bulk = write_bytes(value, bulk=True, monkeypatch=monkeypatch)
    assert bulk == write_bytes(value, bulk=False, monkeypatch=monkeypatch)
    assert bulk == write_bytes(value, bulk=True, plans=False, monkeypatch=monkeypatch)


def test_bulk_is_used(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runs are taken (else the comparison above compares the one-by-one path with itself)."""
    runs: list[int] = []
    real = _writer_bulk._lay_out

    def counting(writer: Any, form: Any, start: int, end: int, run: Any) -> None:
        runs.append(len(run.headers))
        real(writer, form, start, end, run)

    monkeypatch.setattr(_writer_bulk, "_lay_out", counting)
    write_bytes(_flat_dict(), bulk=True, monkeypatch=monkeypatch)
    assert sum(runs) == 699  # all but the first Pair, which made the plans


@pytest.mark.parametrize("make", [_flat_dict, _odd_layers, _string_dict], ids=["pairs", "layers", "strings"])
def test_runs_are_planned_with_numpy(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs of these forms are laid out by ``_writer_runs.plan_run`` (not its step-by-step
    stand-in), so the comparison above checks its offsets. (A Dict of Dicts is laid out by
    ``_writer_dicts``: tests/test_write_dicts_bulk.py.)"""
    planned: list[int] = []
    real = _writer_bulk.plan_run

    def counting(*args: Any) -> Any:
        got = real(*args)
        if got is not None:
            planned.append(got[1])
        return got

    monkeypatch.setattr(_writer_bulk, "plan_run", counting)
    write_bytes(make(), bulk=True, monkeypatch=monkeypatch)
    assert sum(planned) > 300


def test_bulk_without_the_window_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the sink cannot hand out its window, the run is put piece by piece: same bytes."""
    value = _mixed_dict()
    expected = write_bytes(value, bulk=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(Sink, "region", lambda self, offset, n: None)
    assert write_bytes(value, bulk=True, monkeypatch=monkeypatch) == expected


@pytest.mark.parametrize("make", [_dict_of_dicts, _mixed_layers], ids=["dicts", "layers"])
def test_bulk_through_a_real_file(make: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    value = make()
    paths = saved_both_ways(value, tmp_path, monkeypatch)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    _assert_same(tx.load(paths[0])["st"], value)


def _assert_same(back: Any, value: Any) -> None:
    """Every leaf read back equals the one written (arrays in Julia's order: the same shape)."""
    if isinstance(value, np.ndarray):
        np.testing.assert_array_equal(np.asarray(back), value)
    elif isinstance(value, (dict, NamedTuple)):
        assert list(back) == list(value)
        for k in value:
            _assert_same(back[k], value[k])
    elif isinstance(value, tuple):
        assert len(back) == len(value)
        for b, v in zip(back, value):
            _assert_same(b, v)
    else:
        assert back == value

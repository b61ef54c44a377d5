"""Writing a Dict of Dicts at once (``_writer_dicts``) changes no byte of the file.

A run of a Dict's Pairs whose values are alike Dicts of small arrays is laid out in one pass: the
outer Pairs, the inner Dicts' headers and Pair vectors, the inner Pairs and their arrays. The
files written that way must equal those of the one-by-one path (``_writer_bulk.enabled`` off) and
of the general path (no plans): for trees meant to break runs -- inner Dicts of other sizes, types
or dtypes, an inner Dict or array met twice, keys that are not ``str``, long and non-ASCII keys that
open heap collections inside a run, arrays whose bytes are no multiple of 8 (every slot then starts
at another alignment), one-entry Dicts, an empty one -- through an in-memory and a real file, and
h5py reads every one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _bulkwrite import saved_both_ways, write_bytes

import treexchange as tx
from treexchange import JuliaDict
from treexchange._jld2 import _writer_bulk, _writer_dicts
from treexchange._jld2._writer_sink import Sink


def _groups(
    n_groups: int, size: int, elements: int = 64, dtype: Any = np.float32, seed: int = 0
) -> JuliaDict:
    rng = np.random.default_rng(seed)
    return JuliaDict(
        {
            f"g{g:04d}": JuliaDict(
                {f"l{g:04d}_{i:03d}": rng.standard_normal(elements).astype(dtype) for i in range(size)}
            )
            for g in range(n_groups)
        }
    )


def _alike() -> JuliaDict:
    return _groups(40, 25)


def _odd_bytes() -> JuliaDict:
    """Arrays of 12 bytes: no slot ends 8-aligned, each starts where the one before left off."""
    return _groups(30, 7, elements=3)


def _small_dicts() -> JuliaDict:
    """A Flux-like state as a Dict of layers: two entries each (fewer than a bulk run's minimum)."""
    rng = np.random.default_rng(4)
    return JuliaDict(
        {
            f"layer{i}": JuliaDict(
                weight=rng.standard_normal((4, 3)).astype(np.float32), bias=np.zeros(4, np.float32)
            )
            for i in range(60)
        }
    )


def _one_entry() -> JuliaDict:
    return _groups(50, 1, elements=5)


def _broken_runs() -> JuliaDict:
    """Inner Dicts that stop a run: other sizes, dtypes, shapes, non-str keys, a Dict and an array
    met twice, an empty Dict, long and non-ASCII keys (new heap collections mid-run)."""
    rng = np.random.default_rng(5)
    shared = rng.standard_normal(8).astype(np.float32)
    tree = JuliaDict()
    again = None
    for g in range(120):
        size = 6 if g % 17 else 9
        inner = JuliaDict()
        for i in range(size):
            key = ("ключ" if (g + i) % 7 == 0 else "k") + f"{g}_{i}" + "x" * (900 if g % 23 == 3 else 0)
            inner[key] = rng.standard_normal(8).astype(np.float32)
        if g % 19 == 4:
            inner[next(iter(inner))] = shared  # an array met again
        if g % 29 == 7:
            inner[next(iter(inner))] = rng.standard_normal(8).astype(np.float64)
        if g % 31 == 8:
            inner[next(iter(inner))] = rng.standard_normal((2, 4)).astype(np.float32)
        if g == 40:
            again = inner
        if g == 60 and again is not None:
            inner = again  # one Dict met twice: a reference to the first
        if g == 70:
            inner = JuliaDict()
        if g == 80:
            inner = JuliaDict({1: rng.standard_normal(8).astype(np.float32)})
        if g == 90:
            inner = JuliaDict({f"t{i}": f"text{i}" for i in range(6)})
        tree[f"group{g}" + ("é" if g % 11 == 0 else "")] = inner
    tree["plain"] = rng.standard_normal(8).astype(np.float32)
    return tree


def _key_heavy() -> JuliaDict:
    """Keys long enough that many heap collections open inside one run."""
    rng = np.random.default_rng(6)
    return JuliaDict(
        {
            "g" * (g % 300 + 1): JuliaDict(
                {
                    "k" * ((g * 7 + i) % 500 + 1) + str(i): rng.standard_normal(4).astype(np.float32)
                    for i in range(20)
                }
            )
            for g in range(200)
        }
    )


def _count_dict_runs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of outer Pairs each ``write_dict_run`` writes, as the writes go."""
    done: list[int] = []
    real = _writer_dicts.write_dict_run

    def counting(*args: Any) -> Any:
        refs, j = real(*args)
        done.append(len(refs) // 8)
        return refs, j

    monkeypatch.setattr(_writer_bulk, "write_dict_run", counting)
    return done


CASES = [_alike, _odd_bytes, _small_dicts, _one_entry, _broken_runs, _key_heavy]


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__.strip("_"))
def test_dict_runs_change_no_byte(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    value = make()
    bulk = write_bytes(value, bulk=True, monkeypatch=monkeypatch)
    assert bulk == write_bytes(value, bulk=False, monkeypatch=monkeypatch)
    assert bulk == write_bytes(value, bulk=True, plans=False, monkeypatch=monkeypatch)


@pytest.mark.parametrize("make", CASES, ids=lambda f: f.__name__.strip("_"))
def test_dict_runs_are_taken(make: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The inner Dicts are laid out by ``write_dict_run`` (else the comparison above compares the
    one-by-one path with itself)."""
    done = _count_dict_runs(monkeypatch)
    value = make()
    write_bytes(value, bulk=True, monkeypatch=monkeypatch)
    assert sum(done) >= len(value) // 2


def test_dict_runs_without_the_window_region(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where the sink cannot hand out its window, the run is put piece by piece: same bytes."""
    value = _broken_runs()
    expected = write_bytes(value, bulk=False, monkeypatch=monkeypatch)
    monkeypatch.setattr(Sink, "region", lambda self, offset, n: None)
    assert write_bytes(value, bulk=True, monkeypatch=monkeypatch) == expected


@pytest.mark.parametrize("make", [_alike, _broken_runs], ids=["alike", "broken"])
def test_dict_runs_through_a_real_file(make: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    value = make()
    paths = saved_both_ways(value, tmp_path, monkeypatch)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    back = tx.load(paths[0])["st"]
    assert list(back) == list(value)
    for g, inner in value.items():
        if isinstance(inner, dict):
            assert list(back[g]) == list(inner)
            for k, v in inner.items():
                if isinstance(v, np.ndarray):
                    np.testing.assert_array_equal(np.asarray(back[g][k]), v)
    with h5py.File(paths[0], "r") as f:  # the independent reader follows every reference
        assert _read_h5py(f, f["st"]) == _plain(value)


def _read_h5py(f: h5py.File, dataset: h5py.Dataset) -> Any:
    """A Dict (a JLD2.SerializedDict: a reference to its Pair vector) as h5py reads it: keys
    and values in order, Dicts and arrays followed through their references."""
    (pairs,) = dataset[()]
    out = []
    for ref in f[pairs][()]:
        first, second = f[ref][()]
        key = first.decode() if isinstance(first, bytes) else first.item()
        if not isinstance(second, h5py.Reference):
            out.append((key, second.decode()))  # a String value, in the Pair itself
            continue
        target = f[second]
        if target.dtype.names == ("kvvec",):
            out.append((key, _read_h5py(f, target)))
        else:
            out.append((key, target[()].tolist()))
    return out


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return [(k, _plain(v)) for k, v in value.items()]
    if isinstance(value, str):
        return value
    return np.asarray(value).T.tolist()  # (h5py shows Julia's column-major dimensions reversed)


def test_large_inner_dicts_keep_their_own_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    """An inner Dict larger than a run (600 arrays of 4 KiB: 2.4 MiB) is written one by one, its
    Pairs in runs of their own (a run is laid out in memory whole): same bytes, no Dict run."""
    value = _groups(3, 600, elements=1024)
    done = _count_dict_runs(monkeypatch)
    assert write_bytes(value, bulk=True, monkeypatch=monkeypatch) == write_bytes(
        value, bulk=False, monkeypatch=monkeypatch
    )
    assert sum(done) == 0

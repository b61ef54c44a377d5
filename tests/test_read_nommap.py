"""``load(..., mmap=False)``: arrays read with plain reads into memory of their own.

Checked against the default (memory-mapped) load of the same file: equal values, no memory shared
with anything the map backs, no map left behind (``/proc/self/maps``), and the arrays survive the
file being deleted or replaced.
"""

from __future__ import annotations

import gc
import mmap
import os
import random
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import all_fixtures_or_skip, fixture_files, fixture_ids

import treexchange as tx
from treexchange import FormatError, LimitError, Limits, NamedTuple, TreexchangeError, values_equal

FIXTURES = all_fixtures_or_skip("**/*.jld2")  # JLD v1 (.jld) files do not load
IDS = fixture_ids([p for p in fixture_files() if p.suffix != ".jld"]) or None


def _arrays(value: Any) -> Iterator[np.ndarray]:
    """Every numpy array in a value tree (containers, structs, object arrays)."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                stack.extend(v.ravel().tolist())
            else:
                yield v
        elif isinstance(v, (dict, NamedTuple)):
            stack.extend(v.values())
        elif isinstance(v, (tuple, list)):
            stack.extend(v)
        elif isinstance(v, tx.JuliaArray):
            stack.append(v.data)
        elif isinstance(v, tx.JuliaStruct):
            stack.extend(v.fields.values())


def _base_chain(arr: np.ndarray) -> list[Any]:
    chain, b = [], arr.base
    while b is not None:
        chain.append(b)
        b = getattr(b, "base", None) if isinstance(b, np.ndarray) else getattr(b, "obj", None)
    return chain


def _assert_private(arr: np.ndarray) -> None:
    assert arr.flags.writeable
    for b in _base_chain(arr):
        assert not isinstance(b, mmap.mmap), "array is a view of a memory map"


def _mapped(path: Path) -> bool:
    """Whether this process has ``path`` memory-mapped (Linux)."""
    target = os.path.realpath(path)
    with open("/proc/self/maps") as maps:
        return any(line.rstrip("\n").endswith(target) for line in maps)


def _state(rng: np.random.Generator) -> NamedTuple:
    return NamedTuple(
        w=rng.standard_normal((64, 48)).astype(np.float32),
        b=np.arange(64, dtype=np.int64),
        c=(rng.standard_normal(5) + 1j * rng.standard_normal(5)).astype(np.complex64),
        mask=np.array([[True, False, True]]),
        empty=np.zeros((0, 3), np.float64),
        scalar=np.float64(2.5),
        tied=None,
    )


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    rng = np.random.default_rng(7)
    state = _state(rng)
    shared = rng.standard_normal(100)
    path = tmp_path / "state.jld2"
    tx.save(path, model_state=state, a=shared, again=shared, packed=rng.standard_normal((30, 20)))
    return path


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_every_fixture_equals_the_mapped_load(path: Path) -> None:
    for order in ("julia", "storage"):
        mapped = tx.load(path, order=order)
        private = tx.load(path, order=order, mmap=False)
        assert values_equal(private, mapped), (path, order)
        mapped_arrays = list(_arrays(mapped))
        for arr in _arrays(private):
            _assert_private(arr)
            assert not any(np.shares_memory(arr, m) for m in mapped_arrays if m.size and arr.size)


def test_arrays_own_their_data_and_match(saved: Path) -> None:
    mapped = tx.load(saved)
    private = tx.load(saved, mmap=False)
    assert values_equal(private, mapped)
    w = private["model_state"].w
    assert w.flags.owndata and w.flags.f_contiguous and w.flags.writeable
    assert w.dtype == np.float32 and w.shape == (64, 48)
    np.testing.assert_array_equal(w, mapped["model_state"].w)
    w[0, 0] = 123.0  # ordinary memory: the next load (mapped or not) is unaffected
    assert tx.load(saved, "model_state").w[0, 0] != 123.0
    assert private["a"] is private["again"]  # shared in Julia, one object here too


def test_no_map_kept_and_file_can_go(saved: Path) -> None:
    if not Path("/proc/self/maps").exists():
        pytest.skip("needs /proc/self/maps")
    expected = tx.load(saved)
    expected = {k: v for k, v in expected.items()}
    expected_w = np.array(expected["model_state"].w)
    del expected
    gc.disable()  # the map must be gone when load returns, not when a collection breaks cycles
    try:
        private = tx.load(saved, mmap=False)
        assert not _mapped(saved)
    finally:
        gc.enable()
    os.unlink(saved)
    np.testing.assert_array_equal(private["model_state"].w, expected_w)
    # a different file under the same name changes nothing either
    tx.save(saved, model_state=NamedTuple(w=np.zeros((2, 2), np.float32)))
    np.testing.assert_array_equal(private["model_state"].w, expected_w)
    mapped = tx.load(saved)  # the default keeps the map while its arrays live
    assert _mapped(saved)
    del mapped


def test_storage_order(saved: Path) -> None:
    mapped = tx.load(saved, "packed", order="storage")
    private = tx.load(saved, "packed", order="storage", mmap=False)
    assert private.shape == (30, 20)[::-1] == mapped.shape
    assert private.flags.c_contiguous and private.flags.owndata
    np.testing.assert_array_equal(private, mapped)
    np.testing.assert_array_equal(private.T, tx.load(saved, "packed", mmap=False))


def test_compressed_arrays_are_decoded(tmp_path: Path) -> None:
    path = tmp_path / "z.jld2"
    x = np.arange(5000, dtype=np.float64).reshape(50, 100)
    tx.save(path, x=x, compress=True)
    got = tx.load(path, "x", mmap=False)
    np.testing.assert_array_equal(got, x)
    _assert_private(got)


def test_file_read_node_read_and_bytes(saved: Path) -> None:
    raw = saved.read_bytes()
    with tx.open(saved) as f:
        node = f["model_state"]
        w_node = node.read(mmap=False).w
        w_file = f.read("model_state", mmap=False).w
        everything = f.read(mmap=False)
        mapped = f.read("model_state").w
    for w in (w_node, w_file, everything["model_state"].w):
        assert w.flags.owndata and not np.shares_memory(w, mapped)
        np.testing.assert_array_equal(w, mapped)
    from_bytes = tx.load(raw, "model_state", mmap=False).w
    assert from_bytes.flags.owndata
    np.testing.assert_array_equal(from_bytes, mapped)


def test_limits_apply(saved: Path) -> None:
    with pytest.raises(LimitError, match="max_array_bytes"):
        tx.load(saved, "packed", mmap=False, limits=Limits(max_array_bytes=1000))


def test_file_truncated_after_open(saved: Path) -> None:
    with tx.open(saved) as f:
        node = f["packed"]
        before = node.read(mmap=False)  # metadata parsed (and kept) through the map
        h5 = f.reader.h5
        offset, nbytes = h5.raw_location(h5.object(f.reader.links(f.reader.root_address)["packed"]))
        assert nbytes == before.nbytes
        # Cut inside the array's data only: touching the map beyond the end would be SIGBUS,
        # while a plain read just comes back short.
        assert offset > 4096
        with open(saved, "r+b") as fh:
            fh.truncate(offset + 10)
        with pytest.raises(FormatError, match="ended early") as info:
            node.read(mmap=False)
        assert info.value.path == ("packed",)


@pytest.mark.skipif(sys.platform == "win32", reason="truncating a mapped file")
def test_damaged_files_raise_only_treexchange_errors(saved: Path, tmp_path: Path) -> None:
    raw = saved.read_bytes()
    rng = random.Random(20)
    bad = tmp_path / "bad.jld2"
    failures = 0
    for i in range(150):
        data = bytearray(raw)
        if i % 3 == 0:
            data = data[: rng.randrange(600, len(data))]
        else:
            for _ in range(rng.randrange(1, 8)):
                data[rng.randrange(512, len(data))] = rng.randrange(256)
        bad.write_bytes(bytes(data))
        for source in (bad, bytes(data)):
            try:
                tx.load(source, mmap=False, validate=False)
            except TreexchangeError:
                failures += 1
    assert failures > 20  # the damage bites

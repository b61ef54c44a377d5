"""Large groups of headers vouched for are entered when something looks for them
(``HDF5File.vouch_as``): what a walk gives, what it counts against ``max_objects`` and what a
read after it finds are the same as with every group entered at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import treexchange as tx
from treexchange import Limits
from treexchange._hdf5 import _file

N_INNER, PER_INNER = 4, 75  # 300 Pairs and 300 arrays: groups above _VOUCH_LATER (256)


@pytest.fixture(scope="module")
def dict_of_dicts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vouch") / "dod.jld2"
    rng = np.random.default_rng(7)
    value = tx.JuliaDict(
        {
            f"g{j}": tx.JuliaDict(
                {f"w{k:03d}": rng.standard_normal(5).astype(np.float32) for k in range(PER_INNER)}
            )
            for j in range(N_INNER)
        }
    )
    tx.save(path, st=value)
    return path


@pytest.fixture(scope="module")
def layers(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("vouch") / "layers.jld2"
    layer = [
        tx.NamedTuple(weight=np.full((3, 2), i, np.float32), bias=np.full(3, -i, np.float32))
        for i in range(300)
    ]
    tx.save(path, st=tx.NamedTuple(layers=tuple(layer)))
    return path


def _listing(path: Path, limits: Limits | None = None) -> tuple[list[Any], set[int], int]:
    """Every leaf (path, shape, dtype, address), the headers read, and how many groups still
    wait to be entered when the listing ends; then every leaf again, by key from the top."""
    with tx.open(path, limits=limits or Limits()) as f:
        leaves = [(p, leaf.shape, str(leaf.dtype), leaf._address) for p, leaf in f.leaves()]
        h5 = f.reader.h5
        waiting = len(h5._pending)
        read = set(h5.headers_read())
    with tx.open(path, limits=limits or Limits()) as f:
        by_key: list[Any] = []
        _by_key(f["st"], ("st",), by_key)
    return [*leaves, *by_key], read, waiting


def _by_key(node: Any, path: tuple[Any, ...], out: list[Any]) -> None:
    if node.kind == "array":
        out.append((path, node.shape, str(node.dtype), node._address))
        return
    for key in node.keys():
        _by_key(node[key], (*path, key), out)


def _eager(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_file, "_VOUCH_LATER", 1 << 62)


@pytest.mark.parametrize("fixture", ["dict_of_dicts", "layers"])
def test_listing_same_as_entered_at_once(
    fixture: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = request.getfixturevalue(fixture)
    later = _listing(path)
    _eager(monkeypatch)
    now = _listing(path)
    assert later[0] == now[0]
    assert len(now[0]) == 2 * {"dict_of_dicts": N_INNER * PER_INNER, "layers": 600}[fixture]
    assert later[1] == now[1]  # (headers_read enters what waits: the same headers either way)
    assert now[2] == 0


def test_dict_listing_leaves_groups_waiting(dict_of_dicts: Path) -> None:
    # the point of waiting: listing a Dict of Dicts' leaves looks up none of its Pairs or
    # arrays by address (they come described from the bulk pass), so nothing is entered --
    # not even when the next group's first header is parsed among the last group's
    with tx.open(dict_of_dicts) as f:
        assert sum(1 for _ in f.leaves()) == N_INNER * PER_INNER
        h5 = f.reader.h5
        assert [len(a) for a, _ in h5._pending] == [N_INNER * PER_INNER] * 2  # the Pairs, the arrays
        assert h5._pending_n == 2 * N_INNER * PER_INNER


@pytest.mark.parametrize("wait", [True, False])
def test_read_after_listing(dict_of_dicts: Path, wait: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = tx.load(dict_of_dicts)["st"]
    if not wait:
        _eager(monkeypatch)
    parsed: list[int] = []
    parse = _file.HDF5File._parse_object

    def counted(self: _file.HDF5File, address: int, *args: Any) -> Any:
        parsed.append(address)
        return parse(self, address, *args)

    with tx.open(dict_of_dicts) as f:
        leaves = list(f.leaves())
        h5 = f.reader.h5
        assert bool(h5._pending) is wait
        monkeypatch.setattr(_file.HDF5File, "_parse_object", counted)
        for p, leaf in leaves:
            np.testing.assert_array_equal(leaf.read(), loaded[p[1]][p[2]])
        # the first read entered the waiting groups; every array's header was then made from
        # the one it was vouched alike to, none parsed afresh
        assert not h5._pending and h5._pending_n == 0
        assert parsed == []


@pytest.mark.parametrize("fixture", ["dict_of_dicts", "layers"])
def test_max_objects_counted_alike(
    fixture: str, request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    # every bound around the count reached: the same leaves or the same error, waiting or not
    path = request.getfixturevalue(fixture)
    _, read, _ = _listing(path)
    bounds = sorted({*range(0, len(read) + 3, 37), *range(len(read) - 3, len(read) + 3), 10**6})

    def outcome(bound: int) -> Any:
        try:
            return _listing(path, Limits(max_objects=bound))[:2]
        except tx.LimitError as err:
            return str(err)

    later = [outcome(b) for b in bounds]
    _eager(monkeypatch)
    now = [outcome(b) for b in bounds]
    assert later == now
    assert isinstance(now[0], str) and not isinstance(now[-1], str)  # (both sides of the bound met)


def test_vouched_twice_counted_once(dict_of_dicts: Path) -> None:
    # a group vouched for twice waits twice; the count is the exact one once it could matter
    with tx.open(dict_of_dicts) as f:
        h5 = f.reader.h5
        for _ in f.leaves():
            pass
        exact = len(h5.headers_read())  # (enters what waits)
        assert not h5._pending
        addresses = [a for a in h5._vouched]
        proto = h5._vouched[addresses[0]]
        big = addresses[:300]
        h5.vouch_as(big, proto)
        h5.vouch_as(big, proto)
        assert h5._pending_n == 600 and h5._headers_counted() == exact + 600  # far from the bound
        h5.limits = Limits(max_objects=exact + 10)
        assert h5._headers_counted() == exact  # near it: entered, each address once
        assert not h5._pending

"""Nesting depth costs work in proportion to the file, never more.

A struct nested n deep holds the descriptions of all its inner levels (HDF5 compounds embed their
members' types whole), and JLD2 writes the parameters of each committed type afresh (a Dict nested
n deep has n copies of its inner levels): such files are quadratic in the depth, for Julia too.
Reading and writing them must stay proportional to the file: these tests count the steps that
used to grow faster (hashing nested datatypes on save, decoding every nested compound again at
each level on load, comparing equal type parameters down to the bottom), at two depths. No
timing: the counts are what the time follows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import treexchange as tx
from treexchange import _juliatype
from treexchange._hdf5 import _datatype, _model


def deep_namedtuple(n: int) -> Any:
    x: Any = {"leaf": 1}
    for _ in range(n):
        x = {"k": x}
    return x


def deep_dict(n: int) -> Any:
    x: Any = {1: 1.0}
    for _ in range(n):
        x = {1: x}
    return x


@contextmanager
def counting(owner: Any, name: str) -> Iterator[list[int]]:
    """Count the calls of ``owner.name`` while the block runs."""
    original: Callable[..., Any] = getattr(owner, name)
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)
    try:
        yield calls
    finally:
        setattr(owner, name, original)


def _steps(tmp_path: Path, make: Callable[[int], Any], n: int, step: tuple[Any, str], on: str) -> int:
    path = tmp_path / f"deep{n}.jld2"
    value = make(n)
    if on == "save":
        with counting(*step) as calls:
            tx.save(path, model_state=value)
    else:
        tx.save(path, model_state=value)
        with counting(*step) as calls:
            back = tx.load(path, "model_state")
        assert tx.values_equal(back, tx.load(path, "model_state"))
    return calls[0]


@pytest.mark.parametrize(
    ("make", "step", "on", "most"),
    [
        # Save of a nested struct: each nested member's hash was recomputed at every level.
        (deep_namedtuple, (_model.Member, "__hash__"), "save", 2.5),
        # Load of a nested struct: each level decoded all the levels below it again.
        (deep_namedtuple, (_datatype, "_compound_members"), "load", 2.5),
        # Load of a nested Dict: the file is quadratic (x4 for twice the depth); comparing its
        # equal type parameters went to the bottom each time (x8).
        (deep_dict, (_juliatype, "_params_equal"), "load", 5.0),
    ],
    ids=["save-struct-hash", "load-struct-decode", "load-dict-params"],
)
def test_twice_the_depth_is_not_much_more_than_twice_the_steps(
    tmp_path: Path, make: Callable[[int], Any], step: tuple[Any, str], on: str, most: float
) -> None:
    shallow = _steps(tmp_path, make, 60, step, on)
    deep = _steps(tmp_path, make, 120, step, on)
    assert shallow > 0
    assert deep / shallow < most, (shallow, deep)


def test_the_deepest_struct_allowed_round_trips(tmp_path: Path) -> None:
    depth = tx.Limits().max_depth - 4  # the model_state name and the leaf's own levels
    path = tmp_path / "deepest.jld2"
    tx.save(path, model_state=deep_namedtuple(depth))
    back = tx.load(path, "model_state")
    for _ in range(depth):
        back = back["k"]
    assert back["leaf"] == 1

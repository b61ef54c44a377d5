"""Seeded mutation fuzzing of the BSON.jl reader: damaged files raise TreexchangeError, nothing else,
in bounded time and memory (the pattern of tests/test_fuzz_read.py, with BSON-aware mutations
from tests/_bson_fuzz.py: lengths, element types, integers, backref indices, flips, truncations).

The quick test runs 150 cases; the ``slow`` one ``TREEXCHANGE_FUZZ_CASES`` (default 1500, some
two minutes: tracemalloc makes each case ~30 times slower). ``tests/fuzz_long.py`` runs these
seeds too, much longer.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

import numpy as np
import pytest
import test_fuzz_read as fz
from _bson_fuzz import BsonSeed, bson_seeds

import treexchange as tx

N_CASES = int(os.environ.get("TREEXCHANGE_FUZZ_CASES", "1500"))


def test_bson_seeds_read_cleanly() -> None:
    for name, raw in bson_seeds():
        fz._read_everything(raw)
        with tx.open(raw) as f:
            assert f.format_version == "BSON", name


def test_kitchen_sink_values() -> None:
    from _bson_fuzz import kitchen_sink

    v = tx.load(kitchen_sink())
    assert v["same"] is v["model"]["1"][0]["1"]  # a backref: one object at both places
    assert v["model"]["1"][0]["2"].shape == (2, 2)  # the Tracker array read as its data
    assert isinstance(v["closure"], tx.Closure) and v["closure"].where == "REPL[1]:3"
    assert v["nt"] == tx.NamedTuple(a=np.float32(1), b=np.float32(2))
    assert v["dict"] == {"a": 1, "b": 2} and str(v["dict"].julia_type) == "Dict{String, Int64}"
    assert v["symdict"] == {tx.Symbol("lr"): 0.1, tx.Symbol("n"): 3}
    assert v["ghosts"].tolist() == [None, None, None]
    assert [c.data for c in v["chars"]] == [b"\x00\x00\x00a", b"\x00\x00\x00b"]
    assert v["objects"].shape == (1, 2)
    assert str(v["where"].type.params[0]) == "Array{T, 1} where T"  # a type as a value: Type{...}
    assert v["undef"]["1"] is tx.UNDEF
    assert v["list"][4].dtype.name == "uint8" and v["empty"] == ()


def test_fuzz_bson_quick() -> None:
    _fuzz(150, seed=7)


@pytest.mark.slow
def test_fuzz_bson_only_treexchange_errors() -> None:
    _fuzz(N_CASES, seed=20261127)


def _fuzz(n_cases: int, seed: int) -> None:
    seeds = [BsonSeed(name, raw) for name, raw in bson_seeds()]
    rng = random.Random(seed)

    def cases() -> Iterator[tuple[str, bytes]]:
        for i in range(n_cases):
            bson_seed = seeds[i % len(seeds)]
            what, raw = bson_seed.mutate(rng)
            yield f"case {i}: {bson_seed.name}: {what}", raw

    outcomes = fz.run_cases(cases())
    assert outcomes["error"] > n_cases // 10 and outcomes["ok"] > n_cases // 20, outcomes

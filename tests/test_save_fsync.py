"""``save(..., fsync=False)``: the same bytes as the durable default, still atomic."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import treexchange as tx
from treexchange import ConversionError, NamedTuple


def _state() -> dict[str, object]:
    rng = np.random.default_rng(11)
    return {
        "model_state": NamedTuple(
            w=rng.standard_normal((700, 1500), dtype=np.float32),  # C-ordered, several blocks
            f=np.asfortranarray(rng.standard_normal((300, 200))),
            b=np.zeros(8, np.float32),
        ),
        "opt": {f"m{i}": rng.standard_normal(4) for i in range(30)},
    }


@pytest.mark.parametrize("compress", [False, True])
def test_fsync_false_writes_the_same_bytes(tmp_path: Path, compress: bool) -> None:
    durable, scratch = tmp_path / "durable.jld2", tmp_path / "scratch.jld2"
    tx.save(durable, _state(), compress=compress)
    tx.save(scratch, _state(), compress=compress, fsync=False)
    assert scratch.read_bytes() == durable.read_bytes()
    assert sorted(os.listdir(tmp_path)) == ["durable.jld2", "scratch.jld2"]  # no temporary left


def test_fsync_false_is_still_atomic(tmp_path: Path) -> None:
    path = tmp_path / "x.jld2"
    tx.save(path, a=np.arange(3), fsync=False)
    before = path.read_bytes()
    with pytest.raises(ConversionError):
        tx.save(path, a=np.arange(5), bad=object(), fsync=False)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["x.jld2"]

"""`load` checks a value against the schema embedded in the file, or one given explicitly."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import treexchange as tx


def _state(width: int) -> tx.NamedTuple:
    layer = tx.NamedTuple(weight=np.ones((width, 3), np.float32), bias=np.zeros(width, np.float32), σ=())
    return tx.NamedTuple(layers=(layer, ()))


def test_embedded_schema_is_checked_on_load(tmp_path: Path) -> None:
    good = tx.infer_schema({"model_state": _state(4)})
    path = tmp_path / "m.jld2"
    tx.save(path, model_state=_state(4), root_attributes=tx.schema_to_attributes(good))
    loaded = tx.load(path, "model_state")
    assert loaded["layers"][0]["weight"].shape == (4, 3)

    # A file whose embedded schema disagrees with its content fails loudly, at the exact path.
    stale = tx.infer_schema({"model_state": _state(5)})
    bad = tmp_path / "bad.jld2"
    tx.save(bad, model_state=_state(4), root_attributes=tx.schema_to_attributes(stale))
    with pytest.raises(tx.MismatchError) as info:
        tx.load(bad, "model_state")
    paths = {m.path for m in info.value.mismatches}
    assert ("model_state", "layers", 1, "weight") in paths
    assert ("model_state", "layers", 1, "bias") in paths
    # ... unless the caller opts out.
    assert tx.load(bad, "model_state", validate=False)["layers"][0]["bias"].shape == (4,)


def test_explicit_schema_wins_over_embedded(tmp_path: Path) -> None:
    path = tmp_path / "plain.jld2"
    tx.save(path, model_state=_state(4))
    with pytest.raises(tx.MismatchError):
        tx.load(path, "model_state", schema=tx.infer_schema({"model_state": _state(6)}))
    whole = tx.load(path, schema=tx.infer_schema({"model_state": _state(4)}))
    assert list(whole) == ["model_state"]

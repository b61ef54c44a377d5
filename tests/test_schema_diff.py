"""diff between schemas, value trees and schema files: human text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from _schema_samples import flux_chain_state, flux_dense

import treexchange as tx
from treexchange import NamedTuple
from treexchange._cli import main

REPO = Path(__file__).resolve().parents[1]


def test_identical_trees_have_no_differences() -> None:
    result = tx.diff({"model_state": flux_chain_state(0)}, {"model_state": flux_chain_state(1)})
    assert not result and len(result) == 0
    assert result.text().endswith("no differences\n")
    assert result.to_json()["equal"] is True


def test_checksums_show_changed_contents() -> None:
    a, b = {"model_state": flux_chain_state(0)}, {"model_state": flux_chain_state(1)}
    result = tx.diff(a, b, checksums=True)
    kinds = {d.kind for d in result}
    assert kinds == {"checksum"}
    assert {d.path for d in result} >= {
        ("model_state", "layers", 1, "weight"),
        ("model_state", "layers", 5, "bias"),
    }


def test_every_kind_of_change_is_reported_at_its_path() -> None:
    rng = np.random.default_rng(0)
    d1, d2, d3 = flux_dense(rng, 4, 8), flux_dense(rng, 8, 16), flux_dense(rng, 16, 2)
    a = {"m": NamedTuple(layers=(d1, d2, d3), k=np.int64(1), flag=True, act=())}
    b = {
        "m": NamedTuple(
            layers=(NamedTuple(σ=(), weight=d1.weight.astype(np.float64), bias=d1.bias), d3),
            k=np.float32(1),
            flag=np.zeros(1),
            act=None,
            new=1.0,
        )
    }
    result = tx.diff(a, b)
    got = [(d.kind, d.path) for d in result]
    assert got == [
        ("order", ("m", "layers", 1)),
        ("dtype", ("m", "layers", 1, "weight")),
        ("removed", ("m", "layers", 2)),
        ("dtype", ("m", "k")),
        ("kind", ("m", "flag")),
        ("type", ("m", "act")),
        ("added", ("m", "new")),
    ]
    text = result.text()
    assert "~ m.layers[1].weight: dtype float32 -> float64\n" in text
    assert "- m.layers[2]: removed (namedtuple (weight, bias, σ))\n" in text
    assert "+ m.new: added (number float64)\n" in text
    assert "~ m.layers[1]: order (weight, bias, σ) -> (σ, weight, bias)\n" in text
    data = json.loads(json.dumps(result.to_json()))
    assert data["equal"] is False
    first = data["differences"][1]
    assert first == {
        "kind": "dtype",
        "path": ["m", "layers", 1, "weight"],
        "a": "float32",
        "b": "float64",
        "message": "dtype float32 -> float64",
    }
    removed = data["differences"][2]
    assert removed["a"]["kind"] == "namedtuple" and removed["b"] is None


def test_schema_documents_and_files(tmp_path: Path) -> None:
    flux = REPO / "schema/examples/flux_chain_state.json"
    doc = tx.load_schema(flux)
    changed = doc.model_copy(deep=True)
    changed.node_at(("model_state", "layers", 5, "weight")).shape = [10, "n"]  # type: ignore[union-attr]
    changed.node_at(("model_state", "layers", 2, "chs")).enum = [8]  # type: ignore[union-attr]
    changed.node_at(("model_state", "layers")).description = None
    other = tmp_path / "other.json"
    other.write_text(changed.to_json(), encoding="utf-8")
    result = tx.diff(flux, other)
    assert [(d.kind, d.path) for d in result] == [
        ("description", ("model_state", "layers")),
        ("value", ("model_state", "layers", 2, "chs")),
        ("shape", ("model_state", "layers", 5, "weight")),
    ]
    assert "~ model_state.layers[5].weight: shape (10, 36) -> (10, n)" in result.text()
    assert "~ model_state.layers[2].chs: value enum [4] -> [8]" in result.text()
    assert result.a_label == str(flux)


def test_cli_diff_exit_codes_and_json(tmp_path: Path, capsys: object) -> None:
    flux = REPO / "schema/examples/flux_chain_state.json"
    lux = REPO / "schema/examples/lux_ps_st.json"
    assert main(["diff", str(flux), str(flux)]) == 0
    assert main(["diff", "--json", str(flux), str(lux)]) == 1
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    data = json.loads(out[out.index("{") :])
    assert {(d["kind"], tuple(d["path"])) for d in data["differences"]} == {
        ("removed", ("model_state",)),
        ("added", ("ps",)),
        ("added", ("st",)),
    }

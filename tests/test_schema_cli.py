"""The command line (``schema``, ``validate``, ``diff``) and the schema stored in a file.

The central check: a Flux.state file with six seeded corruptions (changed shape, changed dtype,
renamed field, missing layer, reordered fields, one flipped byte of array data) validated in ONE
run of ``treexchange validate`` against the ``--checksums`` schema of the original: exit code 1,
each corruption reported at its exact path.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import DENSE_FLUX_STATE, require_fixture, require_one_of

import treexchange as tx
from treexchange import MismatchError, NamedTuple, load, save
from treexchange._cli import main
from treexchange._schema import SCHEMA_ATTRIBUTE, check_loaded, json_schema_text

REPO = Path(__file__).resolve().parents[1]
LENET = "flux-state/silver-bullet_lenet.jld2"


def _run(capsys: Any, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _flip_byte_of(path: Path, array: np.ndarray) -> None:
    data = bytearray(path.read_bytes())
    needle = np.asfortranarray(array).tobytes(order="F")
    at = data.find(needle)
    assert at >= 0 and data.find(needle, at + 1) < 0
    data[at + 3] ^= 0x40
    path.write_bytes(bytes(data))


def _corrupt_lenet(src: Path, dst: Path, **save_options: Any) -> None:
    """LeNet's state with six corruptions, written with treexchange's writer."""
    state = load(src, "lenet_state")
    c1, p2, _c3, p4, f5, d6, d7, d8 = state.layers
    c1 = c1.replace(weight=np.zeros((3, 3, 1, 6), np.float32))  # changed shape
    d6 = d6.replace(bias=d6.bias.astype(np.float64))  # changed dtype
    d7 = NamedTuple([("W", d7.weight), ("bias", d7.bias), ("σ", ())])  # renamed field
    d8 = NamedTuple([("bias", d8.bias), ("weight", d8.weight), ("σ", ())])  # reordered fields
    layers = (c1, p2, p4, f5, d6, d7, d8)  # missing layer: the second Conv (position 3)
    save(dst, {"lenet_state": NamedTuple(layers=layers)}, **save_options)
    _flip_byte_of(dst, c1.bias)  # one flipped byte of array data


EXPECTED = [
    ("shape", ["lenet_state", "layers", 1, "weight"]),
    ("checksum", ["lenet_state", "layers", 1, "bias"]),
    ("missing", ["lenet_state", "layers", 3]),
    ("dtype", ["lenet_state", "layers", 5, "bias"]),
    ("missing", ["lenet_state", "layers", 6, "weight"]),
    ("extra", ["lenet_state", "layers", 6, "W"]),
    ("order", ["lenet_state", "layers", 7]),
]


def test_six_seeded_corruptions_reported_at_their_paths_in_one_run(tmp_path: Path, capsys: Any) -> None:
    src = require_fixture(LENET)
    schema = tmp_path / "lenet.schema.json"
    code, out, _ = _run(capsys, "schema", str(src), "--checksums", "-o", str(schema))
    assert code == 0 and out == ""
    assert '"sha256"' in schema.read_text(encoding="utf-8")
    bad = tmp_path / "lenet_corrupted.jld2"
    _corrupt_lenet(src, bad)

    code, out, err = _run(capsys, "validate", str(bad), str(schema), "--json")
    assert code == 1
    found = [json.loads(line) for line in out.splitlines()]
    assert [(m["kind"], m["path"]) for m in found] == EXPECTED

    code, out, err = _run(capsys, "validate", str(bad), str(schema))
    assert code == 1
    lines = out.splitlines()
    assert lines == [
        "lenet_state.layers[1].weight: shape (3, 3, 1, 6) found, schema expects (5, 5, 1, 6)",
        lines[1],
        "lenet_state.layers[3]: missing (schema expects namedtuple (σ, weight, bias, stride, pad, dilation, "
        "groups); 7 of 8 present)",
        "lenet_state.layers[5].bias: dtype float64 found, schema expects float32",
        "lenet_state.layers[6].weight: missing (schema expects array float32 (84, 120); renamed to 'W'?)",
        "lenet_state.layers[6].W: extra (not in schema: array float32 (84, 120); renamed from 'weight'?)",
        "lenet_state.layers[7]: order (bias, weight, σ) found, schema expects (weight, bias, σ)",
    ]
    assert lines[1].startswith("lenet_state.layers[1].bias: checksum sha256 ")
    assert "7 violation(s)" in err
    # Without checksum verification the flipped byte goes unnoticed; the rest is still found.
    code, out, _ = _run(capsys, "validate", str(bad), str(schema), "--no-checksums")
    assert code == 1 and len(out.splitlines()) == 6


def test_schema_command(capsys: Any) -> None:
    src = require_one_of(DENSE_FLUX_STATE)
    code, out, _ = _run(capsys, "schema", str(src))
    assert code == 0
    doc = tx.load_schema(out)
    assert doc == tx.infer_schema(src)
    assert "sha256" not in out
    code, out, _ = _run(capsys, "schema", str(src), "--values", "--name", "model_state", "--description", "x")
    assert code == 0 and tx.load_schema(out).description == "x"
    code, out, _ = _run(capsys, "schema", "--json-schema")
    assert code == 0 and out == json_schema_text()
    code, out, err = _run(capsys, "schema")
    assert code == 2 and "FILE" in err


def test_validate_clean_file_and_errors(tmp_path: Path, capsys: Any) -> None:
    src = require_one_of(DENSE_FLUX_STATE)
    schema = tmp_path / "s.json"
    schema.write_text(tx.infer_schema(src, checksums=True).to_json(), encoding="utf-8")
    code, out, _ = _run(capsys, "validate", str(src), str(schema))
    assert code == 0 and "valid" in out
    code, _, err = _run(capsys, "validate", str(src))  # no schema given, none stored
    assert code == 2 and "holds no schema" in err
    code, _, err = _run(capsys, "validate", str(tmp_path / "missing.jld2"), str(schema))
    assert code == 2 and "No such file" in err
    # Without SCHEMA the embedded one is looked for: a missing file is still a missing file.
    code, _, err = _run(capsys, "validate", str(tmp_path / "missing.jld2"))
    assert code == 2 and "No such file" in err and "holds no schema" not in err
    with pytest.raises(FileNotFoundError):
        tx.read_embedded_schema(tmp_path / "missing.jld2")
    newer = tmp_path / "newer.json"
    newer.write_text('{"schema_version": "3.0", "roots": {}}', encoding="utf-8")
    code, _, err = _run(capsys, "validate", str(src), str(newer))
    assert code == 2 and "3.0" in err and "this reader's 2." in err


def test_diff_command_on_files(tmp_path: Path, capsys: Any) -> None:
    src = require_fixture(LENET)
    bad = tmp_path / "bad.jld2"
    _corrupt_lenet(src, bad)
    code, out, _ = _run(capsys, "diff", str(src), str(bad))
    assert code == 1
    assert "~ lenet_state.layers[1].weight: shape (5, 5, 1, 6) -> (3, 3, 1, 6)" in out
    conv = "namedtuple (σ, weight, bias, stride, pad, dilation, groups)"
    assert f"- lenet_state.layers[3]: removed ({conv})" in out
    code, out, _ = _run(capsys, "diff", "--json", "--checksums", str(src), str(bad))
    data = json.loads(out)
    assert code == 1 and data["equal"] is False
    changes = [(d["kind"], d["path"]) for d in data["differences"]]
    assert ("checksum", ["lenet_state", "layers", 1, "bias"]) in changes
    schema = tmp_path / "lenet.json"
    schema.write_text(tx.infer_schema(src).to_json(), encoding="utf-8")
    code, out, _ = _run(capsys, "diff", str(schema), str(src))  # a schema file against a file
    assert code == 0 and "no differences" in out


def test_schema_stored_in_the_file_is_used_by_validate_and_load_check(tmp_path: Path, capsys: Any) -> None:
    src = require_fixture(LENET)
    doc = tx.infer_schema(src, checksums=True)
    good = tmp_path / "good.jld2"
    save(good, load(src), root_attributes=tx.schema_to_attributes(doc))
    assert tx.read_embedded_schema(good) == doc
    code, out, _ = _run(capsys, "validate", str(good))
    assert code == 0 and "the schema stored in the file" in out
    assert check_loaded(good, load(good)) == doc  # the check load(..., validate=True) runs
    assert check_loaded(good, load(good, "lenet_state"), name="lenet_state") == doc
    assert tx.read_embedded_schema(good.read_bytes()) == doc  # load(bytes) finds it too

    bad = tmp_path / "bad.jld2"
    _corrupt_lenet(src, bad, root_attributes=tx.schema_to_attributes(doc))
    code, out, _ = _run(capsys, "validate", str(bad), "--json")
    assert code == 1
    assert [(m["kind"], m["path"]) for m in map(json.loads, out.splitlines())] == EXPECTED
    with pytest.raises(MismatchError) as info:
        load(bad)  # load validates against the embedded schema by default
    assert [(m.kind, list(m.path)) for m in info.value.mismatches] == EXPECTED
    with pytest.raises(MismatchError) as info:
        check_loaded(bad, load(bad, validate=False))
    assert [(m.kind, list(m.path)) for m in info.value.mismatches] == EXPECTED
    assert check_loaded(bad, load(bad, validate=False), validate=False) is None
    # load(..., order="storage") returns reversed shapes: the file itself is checked.
    assert check_loaded(good, load(good, order="storage"), order="storage") == doc
    with pytest.raises(MismatchError):
        check_loaded(good, load(good, order="storage"))
    # load(..., schema=S): an explicit schema wins over the stored one.
    with pytest.raises(MismatchError):
        check_loaded(good, load(good), schema=tx.infer_schema(bad))


def test_embedded_schema_attribute_is_plain_json(tmp_path: Path) -> None:
    import h5py

    doc = tx.infer_schema({"x": np.zeros(3, np.float32)})
    path = tmp_path / "x.jld2"
    save(path, x=np.zeros(3, np.float32), root_attributes=tx.schema_to_attributes(doc))
    with h5py.File(path, "r") as f:  # h5py as an independent reader of the attribute
        raw = f.attrs[SCHEMA_ATTRIBUTE]
    text = raw.decode() if isinstance(raw, bytes) else str(raw)
    assert json.loads(text)["roots"]["x"] == {"kind": "array", "dtype": "float32", "shape": [3]}
    assert list(load(path)) == ["x"]  # the attribute is not a value of the file


def test_unknown_names_are_errors_not_tracebacks(tmp_path: Path, capsys: Any) -> None:
    src = require_one_of(DENSE_FLUX_STATE)
    schema = tmp_path / "s.json"
    schema.write_text(tx.infer_schema(src).to_json(), encoding="utf-8")
    code, _, err = _run(capsys, "schema", str(src), "--name", "nope")
    assert code == 2 and "no entry named 'nope'" in err
    code, _, err = _run(capsys, "validate", str(src), str(schema), "--name", "nope")
    assert code == 2 and "no top-level name 'nope'" in err and "model_state" in err
    code, _, _ = _run(capsys, "validate", str(src), str(schema), "--name", "model_state")
    assert code == 0

"""The command-line frame: version, errors as messages with exit code 2, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import treexchange
from treexchange._cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"treexchange {treexchange.__version__}"


def test_missing_file_is_a_message_and_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["inspect", str(tmp_path / "absent.jld2")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("treexchange: error:") and "absent.jld2" in err


def test_damaged_file_is_a_message_with_an_offset(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "m.jld2"
    treexchange.save(path, x=treexchange.NamedTuple(w=[1.0, 2.0]))
    raw = bytearray(path.read_bytes())
    path.write_bytes(bytes(raw[: len(raw) // 2]))  # truncated: the root group is gone
    assert main(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("treexchange: error:") and "offset" in err


def test_errors_name_the_file_and_truncation_is_called_so(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good, bad = tmp_path / "good.jld2", tmp_path / "bad.jld2"
    treexchange.save(good, x=treexchange.NamedTuple(w=[1.0, 2.0]))
    raw = good.read_bytes()
    bad.write_bytes(raw[: len(raw) - 40])
    for argv in (["inspect", str(bad)], ["diff", str(good), str(bad)], ["diff", str(bad), str(good)]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert f"{bad}: truncated: {len(raw) - 40} bytes, the superblock says {len(raw)}" in err, err
    with pytest.raises(treexchange.FormatError) as caught:
        treexchange.load(bad)
    assert caught.value.file == str(bad) and str(caught.value).startswith(f"{bad}: truncated")


def test_long_julia_types_are_shortened_alike_by_inspect_diff_and_validate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from conftest import require_fixture

    path = require_fixture("misc/gmg_test.jld2")  # GeoData: Unitful types of 100s of characters
    text = treexchange.infer_schema(path).to_json()
    long_type = max(_types(json.loads(text)), key=len)
    assert len(long_type) > 150 and "Meter" in long_type
    other = tmp_path / "other.json"
    changed = long_type.replace("Meter", "Foot")
    other.write_text(text.replace(json.dumps(long_type)[1:-1], json.dumps(changed)[1:-1]), encoding="utf-8")
    outputs = {}
    for command in (
        ["inspect", str(path)],
        ["diff", str(path), str(other)],
        ["validate", str(path), str(other)],
    ):
        for full in (False, True):
            main([*command, *(["--full-types"] if full else [])])
            outputs[command[0], full] = capsys.readouterr().out
    for command in ("inspect", "diff", "validate"):
        short, full = outputs[command, False], outputs[command, True]
        assert max(len(line) for line in short.splitlines()) < 260, command  # two types at most
        assert "…" in short and long_type in full, command
        assert long_type not in short, command


def _types(doc: object) -> list[str]:
    """Every "type" string of a schema document."""
    if isinstance(doc, dict):
        found = [doc["type"]] if isinstance(doc.get("type"), str) else []
        return found + [t for v in doc.values() for t in _types(v)]
    if isinstance(doc, list):
        return [t for v in doc for t in _types(v)]
    return []


def test_convert_flux_state_says_what_it_wrote_and_how_julia_loads_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A real --flux-state run printed nothing: the Julia lines and the notes were only in --dry-run.
    import numpy as np

    from treexchange import JuliaStruct

    old, new = tmp_path / "old.jld2", tmp_path / "new.jld2"
    dense = JuliaStruct(
        "Flux.Dense{NNlib.#relu,A,B}", {"W": np.ones((2, 3), np.float32), "b": np.zeros(2, np.float32)}
    )
    treexchange.save(old, model=dense, epochs=3)
    assert main(["convert", str(old), str(new), "--flux-state", "--dry-run"]) == 0
    dry = capsys.readouterr().out
    assert "model.weight <- model.W  (2, 3) float32" in dry and not new.exists()
    assert main(["convert", str(old), str(new), "--flux-state"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == f"{old} -> {new}: 2 value(s), Flux.state for Flux >= 0.15, JLD2 0.2.0"
    assert "model: in Julia:" in out and "epochs: written as it is (no Flux layers in it)" in out
    assert not any(" <- " in line for line in out)  # the per-array mapping stays in --dry-run
    assert any(line.startswith("  Flux.loadmodel!(model, JLD2.load(") for line in out)
    assert list(treexchange.load(new, "model")) == ["weight", "bias", "σ"]


def test_convert_to_another_format_says_what_it_wrote(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # The safetensors/orbax routes wrote silently, unlike JLD2 -> JLD2.
    pytest.importorskip("safetensors")
    import numpy as np

    src, dst = tmp_path / "a.jld2", tmp_path / "a.safetensors"
    treexchange.save(src, model_state=treexchange.NamedTuple(weight=np.ones((2, 3), np.float32)))
    assert main(["convert", str(src), str(dst)]) == 0
    assert capsys.readouterr().out == f"{src} -> {dst}: jld2 -> safetensors\n" and dst.exists()
    # a BSON.jl file takes the same route, and is said to be BSON (it was called "jld2"; survey 21)
    bson = Path(__file__).parent.parent / "julia_fixtures" / "bson" / "plasma_1d1v_weights.bson"
    assert main(["convert", str(bson), str(dst)]) == 0
    assert capsys.readouterr().out == f"{bson} -> {dst}: bson -> safetensors\n"

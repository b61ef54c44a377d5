"""The command-line frame: version, errors as messages with exit code 2, never a traceback."""

from __future__ import annotations

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

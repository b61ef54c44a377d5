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

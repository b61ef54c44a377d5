"""Fixture lists and checks shared by the safetensors and orbax tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from treexchange._cli import main

# Julia-written fixtures whose *values* convert exactly (checked for every fixture) but which
# tx.save does not write back to the same values, so JLD2 -> format -> JLD2 is not checked on them.
# Empty since the skeleton keeps each struct's on-disk layout (treexchange/_interop/_layoutjson.py):
# the five readas_foo_* and betaml_test.jld2 files listed before (custom serialisation through
# `written_type`, a struct whose only fields are singletons) now write back as convert writes them.
NOT_REWRITABLE: frozenset[str] = frozenset()


def assert_convert_refused(source: Path, out: Path, named: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``convert`` of ``source`` to ``out``, and its ``--dry-run`` (whose mapping would not list
    what is refused either), exit 2 with ``named`` on stderr, no traceback, and no ``out``."""
    for dry_run in ([], ["--dry-run"]):
        assert main(["convert", str(source), str(out), *dry_run]) == 2
        err = capsys.readouterr().err
        assert named in err and "Traceback" not in err
    assert not out.exists()

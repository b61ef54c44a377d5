"""Byte identity with Julia: ``treexchange convert IN OUT --keep-producer`` reproduces every
format-0.2.0 fixture that Julia's JLD2 wrote, byte for byte.

This is the proof of compatibility while no Julia runs here: the writer allocates, commits types,
grows the global heap and lays out headers exactly as JLD2.jl 0.6 does.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import (
    FIXTURES,
    fixture_files,
    fixture_ids,
    require_fixture,
    require_full_corpus,
    require_one_of_table,
    require_own_corpus,
)

from treexchange._cli import main

FORMAT_020 = b"HDF5-based Julia Data Format, version 0.2.0\x00"

# The fixtures the issue names explicitly (they must exist and must be in the identity set).
REQUIRED = [
    "jld2jl/docs_v0.6.0_demo.jld2",
    "jld2jl/docs_v0.6.0_example.jld2",
    "jld2jl/docs_v0.6.0_test.jld2",
    "misc/exactpenalty_data.jld2",
    "flux-state/reinforce-circuits_mymodel.jld2",
    "jld2testfiles/singleton_struct_fields.jld2",
    "misc/amg_lin_elastic_2d.jld2",
    "lux/seriesforecast_params_v020.jld2",
]

# Format-0.2.0 fixtures whose values are outside what the writer supports, with the reason.
# (Empty: every 0.2.0 fixture is reproduced byte for byte.)
NOT_IDENTICAL: dict[str, str] = {}


def _format_020() -> list[Path]:
    return [p for p in fixture_files("**/*.jld2") if p.read_bytes()[: len(FORMAT_020)] == FORMAT_020]


FILES = _format_020()


def test_every_required_fixture_is_a_020_file() -> None:
    require_full_corpus()
    names = {str(p.relative_to(FIXTURES)) for p in FILES}
    assert set(REQUIRED) <= names, set(REQUIRED) - names


@pytest.mark.parametrize("path", FILES or [None], ids=fixture_ids(FILES) if FILES else ["absent"])
def test_convert_keep_producer_is_byte_identical(path: Path | None, tmp_path: Path) -> None:
    if path is None:
        pytest.skip("fixtures absent")
    require_own_corpus()  # another corpus: tests/test_corpus.py checks its 0.2.0 files
    name = str(path.relative_to(FIXTURES))
    if name in NOT_IDENTICAL:
        pytest.skip(NOT_IDENTICAL[name])
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out), "--keep-producer"]) == 0
    original = path.read_bytes()
    written = out.read_bytes()
    if written != original:
        diffs = (i for i, (a, b) in enumerate(zip(written, original)) if a != b)
        first = next(diffs, min(len(written), len(original)))
        pytest.fail(f"{name}: first difference at byte {first} (sizes {len(written)} vs {len(original)})")


def test_without_keep_producer_only_the_header_note_differs(tmp_path: Path) -> None:
    # A format-0.2.0 file of the identity set and the producer its header names: the file the test
    # was written for, then a bundled one (julia_fixtures/SOURCES.md).
    producers = {
        "flux-state/reinforce-circuits_mymodel.jld2": b"Julia 1.11.1",
        "jld2jl/docs_v0.6.0_test.jld2": b"Julia 1.11.6",
    }
    path, producer = require_one_of_table(producers)
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out)]) == 0
    original, written = path.read_bytes(), out.read_bytes()
    assert written[512:] == original[512:]
    assert written[: len(FORMAT_020)] == FORMAT_020
    assert producer in original[:512]
    assert b"treexchange" in written[:512] and producer not in written[:512]


def test_demo_file_is_the_file_julia_writes() -> None:
    """The in-memory test file is JLD2's ``jldsave(path; a = zeros(2))``."""
    from _demofile import demo_jld2_bytes

    original = require_fixture("jld2jl/docs_v0.6.0_demo.jld2").read_bytes()
    demo = demo_jld2_bytes()
    assert demo[512:] == original[512:] and len(demo) == len(original) == 828
    assert demo[: len(FORMAT_020)] == FORMAT_020 and b"(treexchange demo)" in demo[:512]

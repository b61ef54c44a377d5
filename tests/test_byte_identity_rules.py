"""General JLD2.jl rules behind byte identity found on real files outside ../shared (issue 24).

Each rule has a synthetic test that fails without it, and the real files that show it: they are
looked up by their corpus name (tests/corpus_sources.md) under ``$TREEXCHANGE_SHARED/julia_fixtures``
and skipped, with the reason, when absent.

- ``Ptr{T}`` is custom-serialized as ``Nothing`` (JLD2's ``writeas(::Type{Ptr{T}}) = Nothing``,
  since v0.4.0): its committed type carries ``julia_type`` ``Ptr{T}`` *and* ``written_type``
  ``Nothing`` (CategoricalArrays' ``CategoricalPool`` has two ``Ptr{Nothing}`` fields).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import FIXTURES

import treexchange as tx
from treexchange import JuliaStruct, JuliaType, Singleton
from treexchange._cli import main

# Real files (tests/corpus_sources.md) that show each rule.
PTR_FILES = ["savindumahasen__Classification-Project-Based-on-Iris-dataset-__model.jld2"]


def _corpus_file(name: str) -> Path:
    path = FIXTURES / name
    if not path.is_file():
        pytest.skip(f"{name} not found under {FIXTURES} (re-fetch it: tests/corpus_sources.md)")
    return path


def _assert_byte_identical(path: Path, out: Path, *extra: str) -> None:
    assert main(["convert", str(path), str(out), "--keep-producer", *extra]) == 0
    original, written = path.read_bytes(), out.read_bytes()
    if written != original:
        first = next((i for i, (a, b) in enumerate(zip(written, original)) if a != b), None)
        pytest.fail(f"first difference at byte {first} (sizes {len(written)} vs {len(original)})")


# --- Ptr{T} written as Nothing ------------------------------------------------------------------


def test_a_pointer_field_is_committed_with_written_type_nothing(tmp_path: Path) -> None:
    ptr = Singleton(JuliaType("Core.Ptr", (JuliaType("Core.Nothing"),)))
    pool = JuliaStruct(JuliaType("Main.Pool"), {"hash": np.uint64(7), "subsetof": ptr, "equalto": ptr})
    path = tmp_path / "ptr.jld2"
    tx.save(path, pool=pool)
    data = path.read_bytes()
    # One committed type for Ptr{Nothing} (both fields share it), custom-serialized as Nothing:
    # its julia_type (Ptr{Nothing}, whose parameter is a Nothing DataType dataset) and its
    # written_type (Nothing, another DataType dataset: each attribute has its own session).
    assert data.count(b"written_type") == 1
    assert data.count(b"Core.Nothing") == 2
    assert tx.values_equal(tx.load(path)["pool"], pool)


@pytest.mark.parametrize("name", PTR_FILES)
def test_real_files_with_pointer_fields(name: str, tmp_path: Path) -> None:
    _assert_byte_identical(_corpus_file(name), tmp_path / "out.jld2")

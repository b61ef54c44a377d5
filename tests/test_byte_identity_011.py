"""Format 0.1.1 (JLD2.jl 0.3 - 0.4.50): ``treexchange convert IN OUT --keep-format --keep-producer``
reproduces format-0.1.1 fixtures byte for byte, and every 0.1.1 fixture converts to a 0.1.1 file
that reads back to the same values and that h5py (libhdf5) opens.

The differences between the formats that the writer implements are listed in
``treexchange/_jld2/_writer.py`` (``_Format``); the ones it does not yet implement are the reasons
in ``NOT_IDENTICAL`` below.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import FIXTURES, fixture_files, fixture_ids, require_full_corpus, require_own_corpus

import treexchange
from treexchange._cli import main
from treexchange._errors import UnsupportedError

FORMAT_011 = b"HDF5-based Julia Data Format, version 0.1.1\x00"

# Format-0.1.1 fixtures not reproduced byte for byte, with the cause. Their output is a
# format-0.1.1 file with the same values (checked below), laid out differently. The rules of the
# JLD2 release that wrote a file (before v0.4.4, v0.4.41, v0.4.42; v0.4.51, v0.4.52; see
# treexchange/_jld2/_era.py) are followed when the file shows them.
NOT_IDENTICAL: dict[str, str] = {}


def _h5py_failures(path: Path) -> set[str]:
    """The objects of ``path`` h5py cannot open, or whose numbers it cannot read."""
    failures: set[str] = set()
    with h5py.File(path, "r") as f:
        names: list[str] = []
        f.visit(names.append)
        for n in names:
            try:
                obj = f[n]
                if isinstance(obj, h5py.Dataset) and obj.shape is not None and obj.dtype.kind in "biuf":
                    obj[()]
            except (KeyError, OSError, TypeError, ValueError):
                failures.add(n)
    return failures


def _format_011() -> list[Path]:
    return [p for p in fixture_files("**/*.jld2") if p.read_bytes()[: len(FORMAT_011)] == FORMAT_011]


FILES = _format_011()


def test_there_are_011_fixtures() -> None:
    require_full_corpus()
    assert len(FILES) >= 27
    names = {str(p.relative_to(FIXTURES)) for p in FILES}
    assert set(NOT_IDENTICAL) <= names, set(NOT_IDENTICAL) - names


@pytest.mark.parametrize("path", FILES or [None], ids=fixture_ids(FILES) if FILES else ["absent"])
def test_convert_keep_format_011(path: Path | None, tmp_path: Path) -> None:
    if path is None:
        pytest.skip("fixtures of ../shared absent")
    require_own_corpus()
    name = str(path.relative_to(FIXTURES))
    out = tmp_path / "out.jld2"
    # convert verifies by default: the output has been read back and compared with the input.
    assert main(["convert", str(path), str(out), "--keep-format", "--keep-producer"]) == 0
    original, written = path.read_bytes(), out.read_bytes()
    assert written[: len(FORMAT_011)] == FORMAT_011
    # h5py (libhdf5) reads the output wherever it reads the input (JLD2 0.4.51 - 0.4.52 wrote
    # datatype messages of version 0, which libhdf5 refuses: a faithful copy is refused too).
    assert _h5py_failures(out) <= _h5py_failures(path)
    if name in NOT_IDENTICAL:  # a known gap, checked to be still there (the values were checked above)
        assert written != original
        pytest.xfail(f"not byte-identical yet: {NOT_IDENTICAL[name]}")
    if written != original:
        diffs = (i for i, (a, b) in enumerate(zip(written, original)) if a != b)
        first = next(diffs, min(len(written), len(original)))
        pytest.fail(f"{name}: first difference at byte {first} (sizes {len(written)} vs {len(original)})")


def test_save_format_011_plain_values(tmp_path: Path) -> None:
    """Small arrays are compact, large ones contiguous right after their header, no NIL message."""
    path = tmp_path / "a.jld2"
    big = np.arange(2000, dtype=np.float64)  # 16000 bytes: contiguous
    treexchange.save(path, small=np.ones(3, np.float32), big=big, s="hi", format="0.1.1")
    data = path.read_bytes()
    assert data.startswith(FORMAT_011)
    back = treexchange.load(path)
    assert np.array_equal(back["big"], big) and back["s"] == "hi"
    with h5py.File(path, "r") as f:
        assert f["small"].id.get_create_plist().get_layout() == h5py.h5d.COMPACT
        assert f["big"].id.get_create_plist().get_layout() == h5py.h5d.CONTIGUOUS
        assert np.array_equal(f["big"][()], big)
    assert treexchange.File(path).format_version == "0.1.1"


def test_format_011_refuses_compression_and_unknown_versions(tmp_path: Path) -> None:
    with pytest.raises(UnsupportedError, match="compression"):
        treexchange.save(tmp_path / "c.jld2", a=np.ones(3), compress=True, format="0.1.1")
    with pytest.raises(UnsupportedError, match=r"0\.1\.0"):
        treexchange.save(tmp_path / "d.jld2", a=np.ones(3), format="0.1.0")
    assert not (tmp_path / "c.jld2").exists() and not (tmp_path / "d.jld2").exists()


def test_keep_format_writes_020_for_other_inputs(tmp_path: Path) -> None:
    src, out = tmp_path / "in.jld2", tmp_path / "out.jld2"
    treexchange.save(src, a=np.ones(3))
    assert main(["convert", str(src), str(out), "--keep-format"]) == 0
    assert out.read_bytes().startswith(b"HDF5-based Julia Data Format, version 0.2.0\x00")


def test_committed_types_share_their_parameters_datatype_datasets_in_011(tmp_path: Path) -> None:
    """JLD2 up to v0.4.51 writes a committed datatype's ``julia_type`` attribute in the file's
    datatype session: two struct types with the same parameter ``Vector{Float64}`` refer to one
    ``Core.Array`` DataType dataset. Format 0.2.0 (a fresh session per attribute) writes it for
    each. Both read back to the same values."""
    from treexchange import JuliaStruct, JuliaType

    vec = JuliaType("Core.Array", (JuliaType("Core.Float64"), 1))
    a = JuliaStruct(JuliaType("Main.A", (vec,)), {"x": np.arange(3.0)})
    b = JuliaStruct(JuliaType("Main.B", (vec,)), {"y": np.arange(2.0)})
    counts = {}
    for fmt in ("0.1.1", "0.2.0"):
        path = tmp_path / f"{fmt}.jld2"
        treexchange.save(path, a=a, b=b, format=fmt)
        counts[fmt] = path.read_bytes().count(b"Core.Array")
        back = treexchange.load(path)
        assert treexchange.values_equal(back["a"], a) and treexchange.values_equal(back["b"], b)
    assert counts["0.1.1"] < counts["0.2.0"], counts

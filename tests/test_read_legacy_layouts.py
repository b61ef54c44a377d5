"""Layouts older JLD2 versions wrote and JLD2.jl still reads, built byte by byte.

JLD2 0.1.12-0.3.1 (2019-2021; file format 0.1.0 and 0.1.1) wrote a ``String`` as a dataset with
the dataspace of its bytes as a ``Vector{UInt8}`` (n elements) and an n-byte string datatype, so
the dataspace and datatype together describe n * n bytes while the data holds n. JLD2.jl reads
it (``src/backwards_compatibility.jl``) as the String of those n bytes; so do we.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
from _jld2_builder import Builder, space, t_fixed_string

import treexchange as tx
from treexchange._cli import main


def _legacy_string_file(texts: dict[str, str], header: str) -> bytes:
    b = Builder(header)
    for name, text in texts.items():
        raw = text.encode()
        b.link(name, b.dataset(t_fixed_string(len(raw)), space("simple", [len(raw)]), raw))
    return b.finish()


def test_a_string_stored_over_its_bytes_dataspace_reads_as_the_string(tmp_path: Path) -> None:
    texts = {"s": "abcdefg", "utf8": "héllo → wörld", "one": "x"}
    path = tmp_path / "legacy.jld2"
    path.write_bytes(_legacy_string_file(texts, "HDF5-based Julia Data Format, version 0.1.0"))
    assert tx.load(path) == texts
    with tx.open(path) as f:
        node = f["s"]
        assert node.kind == "string" and str(node.julia_type) == "String"
        assert node.read() == "abcdefg"
    with h5py.File(path, "r") as f:  # libhdf5 refuses the layout: 7 stored bytes, 49 described
        with pytest.raises(KeyError, match="compact dataset"):
            f["s"]


def test_convert_writes_the_legacy_string_as_jld2_writes_strings_today(tmp_path: Path) -> None:
    src, out = tmp_path / "legacy.jld2", tmp_path / "out.jld2"
    src.write_bytes(_legacy_string_file({"s": "abcdefg"}, "HDF5-based Julia Data Format, version 0.1.1"))
    assert main(["convert", str(src), str(out)]) == 0
    assert tx.load(out) == {"s": "abcdefg"}
    with h5py.File(out, "r") as f:  # today's layout: one scalar string
        assert f["s"].shape == () and f["s"][()] == b"abcdefg"


def test_the_same_layout_in_a_020_file_reads_the_same_way(tmp_path: Path) -> None:
    """JLD2 applies the rule whatever the file's version: it is how it reads a string over a
    simple dataspace, not a special case of one version."""
    path = tmp_path / "v020.jld2"
    path.write_bytes(_legacy_string_file({"s": "abc"}, "HDF5-based Julia Data Format, version 0.2.0"))
    assert tx.load(path) == {"s": "abc"}

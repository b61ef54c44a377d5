"""``save(path, mode="a", ...)``: names added to an existing JLD2 file as one more write session,
as Julia's ``jldopen(path, "a+")`` then ``f[name] = value`` do (docs/writing.md)."""

from __future__ import annotations

import re
from pathlib import Path

import h5py
import numpy as np
import pytest
from test_byte_identity_rules import PRODUCER, _session_items, _write_sessions

import treexchange as tx
from treexchange._reader import File, read_objects


@pytest.mark.parametrize("fmt", ["0.2.0", "0.1.1"])
def test_append_writes_what_a_second_jld2_session_writes(fmt: str, tmp_path: Path) -> None:
    """The bytes are those of the same values written in two sessions (the layout JLD2 gives a
    reopened file, which convert reproduces for real Julia files: tests/test_byte_identity_rules.py),
    and the file reads back every value, in libhdf5 too."""
    items = _session_items()
    path = tmp_path / "a.jld2"
    tx.save(path, dict(items[:3]), producer=PRODUCER, format=fmt)
    tx.save(path, dict(items[3:]), producer=PRODUCER, format=fmt, mode="a")
    expected = _write_sessions(tmp_path / "two.jld2", fmt, [3])
    assert path.read_bytes() == expected
    with File(path) as f:
        assert read_objects(f).sessions == [3]
    with h5py.File(path, "r") as f:
        np.testing.assert_array_equal(f["d"][()], np.ones((2, 2)))
    # A third session.
    tx.save(path, {"e": np.int64(5)}, producer=PRODUCER, format=fmt, mode="a")
    back = tx.load(path)
    assert back["e"] == 5 and tx.values_equal(back["g"]["y"], np.arange(3, dtype=np.int32))
    with File(path) as f:
        assert read_objects(f).sessions == [3, 7]


def test_append_to_a_missing_file_writes_it(tmp_path: Path) -> None:
    path = tmp_path / "new.jld2"
    tx.save(path, mode="a", x=np.arange(3.0))
    assert tx.values_equal(tx.load(path)["x"], np.arange(3.0))


def test_append_keeps_compression_and_compresses_as_asked(tmp_path: Path) -> None:
    path = tmp_path / "c.jld2"
    tx.save(path, a=np.zeros(5000), compress="zstd")
    tx.save(path, mode="a", b=np.ones(5000), compress=True)
    data = path.read_bytes()
    assert len(data) < 8 * 5000  # both arrays compressed
    with File(path) as f:
        assert tx.values_equal(f["a"].read(), np.zeros(5000)) and tx.values_equal(
            f["b"].read(), np.ones(5000)
        )
        assert len(f.reader.h5.filter_pipelines_seen) == 2  # shuffle + zstd, shuffle + deflate


def test_append_refuses_what_it_cannot_keep(tmp_path: Path) -> None:
    path = tmp_path / "r.jld2"
    tx.save(path, a=np.zeros(2))
    before = path.read_bytes()
    with pytest.raises(tx.ConversionError, match="already present"):
        tx.save(path, mode="a", a=np.ones(2))
    with pytest.raises(ValueError, match=re.escape("format='0.2.0'")):
        tx.save(path, mode="a", b=1, format="0.1.1")
    with pytest.raises(ValueError, match="root_attributes"):
        tx.save(path, mode="a", b=1, root_attributes={"k": "v"})
    with pytest.raises(ValueError, match="mode must be"):
        tx.save(path, mode="r+", b=1)
    assert path.read_bytes() == before  # nothing refused touched the file
    tx.save(path, a=np.zeros(2), schema=True)
    embedded = path.read_bytes()
    with pytest.raises(tx.UnsupportedError, match="schema"):
        tx.save(path, mode="a", b=1)
    assert path.read_bytes() == embedded

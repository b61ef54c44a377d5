"""The converters on damaged input: JLD2 and BSON.jl files, and the tree metadata of safetensors
files, give an output or a TreexchangeError; never another exception, never a hang, and a refused
convert leaves nothing behind.

The reading fuzz (``tests/test_fuzz_read.py``) proves the reader, the safetensors fuzz
(``tests/test_fuzz_safetensors.py``) damaged safetensors files read back; this one what the
converters do with what a damaged file holds: JLD2/BSON -> safetensors (the lazy walk, the tree
metadata encoder), -> JLD2 (the writer, with its verify), the written safetensors back to JLD2, and
``diff`` of the input and each output. Its first campaign (2026-11-29) found the tree metadata
recursing at Python's limit of 1000 frames (a tree 300 levels deep, which ``tx.save`` writes, was a
bare ``RecursionError`` on the way back; ``tests/test_deep_nesting.py``), JSON text nested 10⁵ deep
in a file's metadata or index (a ``RecursionError`` from ``json``), an index that is not UTF-8 and a
recorded key order of numbers (the regressions below).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from safetensors.numpy import save_file

import treexchange as tx
from treexchange._interop import convert_formats
from treexchange._interop._safetensors import INDEX_SUFFIX, METADATA_KEY, ORDER_KEY
from treexchange._juliatype import JuliaType
from treexchange._values import JuliaBits


def test_metadata_nested_past_any_tree_is_a_limit_error(tmp_path: Path) -> None:
    # json recursed once per level: 10⁵ levels was a bare RecursionError (and, with the limit
    # raised for a deep file open in the process, would overflow the C stack)
    path = tmp_path / "deep.safetensors"
    save_file({"a": np.ones(2, np.float32)}, str(path), metadata={METADATA_KEY: "[" * 100_000})
    with pytest.raises(tx.LimitError, match="JSON nested 100000 deep"):
        tx.load_safetensors(path)
    with pytest.raises(tx.LimitError, match="JSON nested 100000 deep"):
        convert_formats(path, tmp_path / "out.jld2")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["deep.safetensors"]


@pytest.mark.parametrize("index", [b'{"weight_map": "\xff\xfe"}', b"[" * 100_000], ids=["not-utf8", "deep"])
def test_a_damaged_index_is_refused(tmp_path: Path, index: bytes) -> None:
    path = tmp_path / f"model{INDEX_SUFFIX}"
    path.write_bytes(index)  # (was UnicodeDecodeError / RecursionError)
    with pytest.raises((tx.FormatError, tx.LimitError)):
        tx.load_safetensors(path)


@pytest.mark.parametrize("order", ['[1, "0.weight"]', "[" * 50_000], ids=["numbers", "deep"])
def test_a_recorded_order_that_is_no_order_is_ignored(tmp_path: Path, order: str) -> None:
    # The key order treexchange records in a state_dict it writes; damaged, the architecture's
    # own order is used (sorting [1, "0.weight"] was a TypeError, a deep one a RecursionError).
    path = tmp_path / "m.safetensors"
    tensors = {"0.weight": np.ones((1, 2), np.float32), "0.bias": np.zeros(1, np.float32)}
    save_file(tensors, str(path), metadata={"format": "pt", ORDER_KEY: order})
    convert_formats(path, tmp_path / "m.jld2", architecture="Chain(Dense(2 => 1))")
    layer = tx.load(tmp_path / "m.jld2", "model_state")["layers"][0]
    assert np.array_equal(layer["weight"], tensors["0.weight"])


def test_a_dict_whose_declared_type_holds_it_is_a_cycle(tmp_path: Path) -> None:
    # A type parameter may be a value (Val{(1, 2)}); one holding the Dict whose type it is (a
    # damaged file's reference made one) was encoded by a fresh encoder each time round, which
    # never saw the cycle: a RecursionError once the stack ran out.
    d = tx.JuliaDict({"a": 1})
    d.julia_type = JuliaType("Base.Dict", (JuliaType("Core.String"), [d]))
    with pytest.raises(tx.ConversionError, match="refers to itself"):
        tx.save_safetensors(tmp_path / "d.safetensors", {"x": d})
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("nest", ["tuple", "dict"])
def test_a_value_without_a_type_deep_in_a_nest_is_refused_at_once(nest: str, tmp_path: Path) -> None:
    # Typing a tuple's elements (a Dict's values) runs without their paths, and again with them
    # when one fails, for the message. Every level below retried that way: 2**depth steps, so a
    # 200-deep tuple nest of a damaged file (a leaf of no bytes) made convert hang. One retry now
    # types the whole nest with paths.
    from treexchange._jld2 import _writer_types

    x: Any = JuliaBits(JuliaType("Main.B"), b"")  # (no bytes: no Julia type)
    for _ in range(16):
        x = (x, 1) if nest == "tuple" else {1: x}
    calls = [0]
    of_value = _writer_types.TypeFactory.of_value

    def counted(self: Any, value: Any, path: Any = ()) -> Any:
        calls[0] += 1
        return of_value(self, value, path)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_writer_types.TypeFactory, "of_value", counted)
        step = r"\[1\]" if nest == "tuple" else r"\['1'\]"
        with pytest.raises(tx.ConversionError, match=rf"no bytes \(at t({step}){{16}}\)"):
            tx.save(tmp_path / "t.jld2", {"t": x})
    assert calls[0] < 400, calls  # (65,000 and more before; ~70 for a nest of 16 typed four times)

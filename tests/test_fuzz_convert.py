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

Seeds: the reading fuzz's kitchen sink and BSON kitchen sink, a ``tx.save`` file of shared and
nested values (a tuple nest 60 deep among them), and, when ``../shared`` is there, small fixtures
and the hostile files. Mutations: those of the reading fuzz (``test_fuzz_read._Seed``) and of the
BSON fuzz (``_bson_fuzz.BsonSeed``). ``TX_CONVERT_FUZZ_CASES=5000 python -m pytest
tests/test_fuzz_convert.py -m slow`` runs a long campaign (orbax is left out: seconds a case).
"""

from __future__ import annotations

import contextlib
import io
import os
import random
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _bson_fuzz import BsonSeed, kitchen_sink as bson_kitchen_sink
from _fuzzops import FuzzOps
from conftest import FIXTURES, HOSTILE
from safetensors.numpy import save_file
from test_fuzz_read import _kitchen_sink, _Seed

import treexchange as tx
from treexchange._cli import main
from treexchange._interop import convert_formats
from treexchange._interop._safetensors import INDEX_SUFFIX, METADATA_KEY, ORDER_KEY
from treexchange._juliatype import JuliaType
from treexchange._save import convert
from treexchange._values import JuliaBits

TIME_LIMIT = 10.0  # CPU seconds an operation may take (a hang otherwise)
FIXTURE_SEEDS = [
    "flux-state/reinforce-circuits_mymodel.jld2",
    "jld2testfiles/struct_reconstruction.jld2",
    "jld2testfiles/unionall_typeparam.jld2",
    "misc/urop_tuble.jld2",
    "bson/eliascarv_mlp.bson",
]


def _saved_seed(tmp_path: Path) -> bytes:
    """A file of the values converters treat apart: shared arrays and lists, a Dict with its
    type, structs, a tuple nest 60 deep, strings and scalars."""
    w = np.arange(12, dtype=np.float32).reshape(3, 4)
    nest: Any = (w, 1.5)
    for _ in range(60):
        nest = (nest, 2)
    shared = [w, "x"]
    values = {
        "state": tx.NamedTuple(layers=(tx.NamedTuple(weight=w, bias=np.zeros(3, np.float32), σ=()),)),
        "shared": {"a": shared, "b": shared, "w": w},
        "dict": {1: w, 2: np.arange(3)},
        "struct": tx.JuliaStruct("Main.Foo", {"w": w, "t": (1, tx.Symbol("s"))}),
        "nest": nest,
        "scalars": [1, 2.5, "σ", None, True, 1 + 2j],
    }
    path = tmp_path / "saved.jld2"
    tx.save(path, values, fsync=False)
    raw = path.read_bytes()
    path.unlink()
    return raw


def _seeds(tmp_path: Path) -> list[tuple[_Seed | BsonSeed, str]]:
    """``(seed, suffix)``: its mutations are written to a file of that suffix."""
    out: list[tuple[_Seed | BsonSeed, str]] = [
        (_Seed("kitchen_sink", _kitchen_sink()), ".jld2"),
        (_Seed("saved", _saved_seed(tmp_path)), ".jld2"),
        (BsonSeed("bson/kitchen_sink", bson_kitchen_sink()), ".bson"),
    ]
    for rel in FIXTURE_SEEDS:
        p = FIXTURES / rel
        if p.is_file():
            seed = BsonSeed(rel, p.read_bytes()) if p.suffix == ".bson" else _Seed(rel, p.read_bytes())
            out.append((seed, p.suffix))
    if HOSTILE.is_dir():
        out.extend(
            (_Seed(f"hostile/{p.name}", p.read_bytes()), ".jld2")
            for p in sorted(HOSTILE.glob("*.jld2"))
            if p.stat().st_size < 20_000
        )
    return out


def _cases(n: int, seed: int, tmp_path: Path) -> Iterator[tuple[str, bytes, str]]:
    seeds = _seeds(tmp_path)
    rng = random.Random(seed)
    for i in range(n):
        source, suffix = seeds[i % len(seeds)]
        desc, raw = source.mutate(rng)
        if rng.random() < 0.3:
            desc, raw = _stacked(source, desc, raw, rng)
        yield f"case {i}: {source.name}: {desc}", raw, suffix


def _stacked(source: _Seed | BsonSeed, desc: str, raw: bytes, rng: random.Random) -> tuple[str, bytes]:
    """One or two more mutations of the seed's fields on a mutated file (of the seed's size: its
    field positions hold): the campaign that found the type-parameter cycle needed two pointers
    moved at once."""
    original = source.raw
    try:
        for _ in range(rng.randrange(1, 3)):
            if len(raw) != source.size:
                break
            source.raw = raw
            try:
                more, raw = source.mutate(rng)
            except IndexError:  # (a graph move whose field the first mutation changed: no move left)
                break
            desc += f" + {more}"
    finally:
        source.raw = original
    return desc, raw


def _cli(argv: list[str]) -> bool:
    """Whether the CLI exits with 0 (its output swallowed); 1 (a difference) and 2 (a refusal,
    said) are answers too, an exception is not."""
    sink = io.StringIO()
    with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        return main(argv) == 0


def _run(n: int, seed: int, tmp_path: Path) -> dict[str, int]:
    """Each case: to safetensors, then that back to JLD2 and ``diff`` of input and copy; to JLD2
    (verified), then ``diff``. Nothing may be left behind by a refused convert."""
    work, out = tmp_path / "in", tmp_path / "out"
    work.mkdir()
    out.mkdir()
    with FuzzOps(TIME_LIMIT) as ops:
        for desc, raw, suffix in _cases(n, seed, tmp_path):
            src = work / f"in{suffix}"
            src.write_bytes(raw)
            st, back, jld2 = out / "out.safetensors", out / "back.jld2", out / "out.jld2"
            ops.run("to safetensors", desc, convert_formats, src, st, to="safetensors")
            if st.exists():
                ops.run("safetensors back", desc, convert_formats, st, back)
                if back.exists():
                    ops.run("diff back", desc, _cli, ["diff", str(src), str(back)])
            elif list(out.iterdir()):
                ops.failures.append(f"left {sorted(os.listdir(out))}: {desc}")
            for p in list(out.iterdir()):
                p.unlink()
            ops.run("to jld2", desc, convert, src, jld2)
            if jld2.exists():
                ops.run("diff jld2", desc, _cli, ["diff", str(src), str(jld2)])
            elif list(out.iterdir()):
                ops.failures.append(f"left {sorted(os.listdir(out))}: {desc}")
            shutil.rmtree(out)
            out.mkdir()
    return ops.check()


def test_a_short_convert_fuzz(tmp_path: Path) -> None:
    outcomes = _run(240, 29, tmp_path)
    assert outcomes["ok"] and outcomes["error"], outcomes  # the mutations bite, and not all of them


@pytest.mark.slow  # ~1 min for the default 1500 cases
def test_the_convert_fuzz(tmp_path: Path) -> None:
    n = int(os.environ.get("TX_CONVERT_FUZZ_CASES", "1500"))
    outcomes = _run(n, 20261129, tmp_path)
    assert outcomes["error"] > n // 10 and outcomes["ok"] > n // 10, outcomes


def test_a_type_nested_past_any_tree_in_the_metadata_is_a_limit_error(tmp_path: Path) -> None:
    # A struct's type 7,000 parameters deep: its JSON (two levels a parameter) parses, and the
    # type's nodes do not lengthen the path; decoding it recursed until a bare RecursionError.
    import json
    import struct as binary

    path = tmp_path / "t.safetensors"
    tx.save_safetensors(path, {"st": tx.JuliaStruct("Main.S", {"w": np.zeros(2, np.float32)})})
    raw = path.read_bytes()
    (n,) = binary.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    doc = json.loads(header["__metadata__"][METADATA_KEY])
    text = '{"t": "type", "name": "Main.T", "p": [' * 7000  # (json.dumps recurses: written by hand)
    text += '{"t": "type", "name": "Core.Int64", "p": []}' + "]}" * 7000
    doc["roots"][0][1]["type"] = "TYPE"
    header["__metadata__"][METADATA_KEY] = json.dumps(doc).replace('"TYPE"', text)
    body = json.dumps(header).encode()
    body += b" " * (-len(body) % 8)
    path.write_bytes(binary.pack("<Q", len(body)) + body + raw[8 + n :])
    with pytest.raises(tx.LimitError, match="tree metadata nested deeper than 3104 nodes"):
        tx.load_safetensors(path)


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

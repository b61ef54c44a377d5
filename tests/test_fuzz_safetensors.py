"""A damaged safetensors file, or damaged tree metadata in one (the JSON document treexchange
writes beside the tensors), is read or refused with a TreexchangeError: never another exception,
never a hang. Safetensors files come from anywhere (a model hub); the ``safetensors`` package
checks the header and the offsets, treexchange must check its own document.

The first run (2026-11-28, 3,000 cases) found 49 crashes in the document's reading: roots that
are not ``[name, node]`` pairs, a version that is not a number, field names that are numbers
(which then crashed the JLD2 writer of ``convert``), array nodes without a dtype or a shape, a
layout table of the wrong form (``ValueError``, ``TypeError``, ``AttributeError``). Mutations:
the header's length, bytes flipped, truncation, and a node of the header or of the tree document
replaced by another JSON value or removed. ``TX_SAFETENSORS_FUZZ_CASES=20000 python -m pytest
tests/test_fuzz_safetensors.py -m slow`` runs a long campaign.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import random
import struct
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _fuzzops import FuzzOps, json_places

import treexchange as tx
from treexchange._cli import main

pytest.importorskip("safetensors")

TIME_LIMIT = 10.0
_REPLACEMENTS: list[Any] = [
    None, -1, 0, 1, 2**62, 1e308, "", "x", [], {}, [1, 2], True, "nt", "array", "jarray",
    {"t": "array"}, {"t": "nt", "f": [["a", {"t": "nt", "f": []}]]},
    {"t": "type", "name": "Core.Int64", "p": []},
    {"t": "jarray", "eltype": {"t": "type", "name": "Any", "p": []}, "shape": [10**12], "v": []},
    {"t": "same", "k": 0}, {"t": "same", "k": -1}, {"t": "same", "k": 2**70},
    {"t": "tuple", "v": [{"t": "same", "k": 0}, {"t": "same", "k": 0}], "k": 0},
    {"t": "group", "items": [[{"t": "str", "v": "g"}, {"t": "same", "k": 0}]], "k": 0},
]  # fmt: skip


def _seeds(tmp_path: Path) -> list[tuple[str, bytes]]:
    from safetensors.numpy import save_file

    f32 = np.float32
    trees = {
        "state": {
            "model_state": tx.NamedTuple(
                layers=(
                    tx.NamedTuple(weight=np.ones((2, 3), f32), bias=np.zeros(2, f32), σ=()),
                    tx.NamedTuple(weight=np.arange(6.0).reshape(3, 2), name="x", k=np.int64(3),
                                  s=tx.Symbol("a"), n=None, c=np.complex128(1 + 2j)),
                )
            )
        },
        "values": {
            "d": {"a": np.arange(4), "b": {"c": f32(1.5), "e": [1, "two", (3.0, None)]}},
            "x": tx.JuliaStruct("Main.Foo", {"w": np.ones(3), "t": (1, 2)}),
        },
    }  # fmt: skip
    seeds = []
    for name, roots in trees.items():
        path = tmp_path / f"{name}.safetensors"
        tx.save_safetensors(path, roots)
        seeds.append((name, path.read_bytes()))
    plain = tmp_path / "plain.safetensors"
    save_file({"a.weight": np.ones((2, 2), f32), "b": np.arange(3, dtype=np.int32)}, str(plain))
    seeds.append(("plain", plain.read_bytes()))
    for p in tmp_path.iterdir():
        p.unlink()
    return seeds


def _replace_a_node(doc: Any, rng: random.Random) -> Any:
    places = json_places(doc)
    if not places:
        return doc
    parent, key = rng.choice(places)
    if isinstance(parent, list) and rng.random() < 0.3:
        del parent[key]
    else:
        parent[key] = json.loads(json.dumps(rng.choice(_REPLACEMENTS)))
    return doc


def _mutate(raw: bytes, rng: random.Random) -> tuple[str, bytes]:
    (size,) = struct.unpack_from("<Q", raw, 0)
    header = json.loads(raw[8 : 8 + size])
    body = raw[8 + size :]
    r = rng.random()
    if r < 0.05:  # (the safetensors package checks the header: the tree document is treexchange's)
        new = rng.choice([0, 1, size - 1, size + 1, len(raw), 2**63, 2**40])
        return f"length={new}", struct.pack("<Q", new) + raw[8:]
    if r < 0.1:
        flipped = bytearray(raw)
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] = rng.randrange(256)
        return "flip", bytes(flipped)
    if r < 0.15:
        return "truncate", raw[: rng.randrange(len(raw))]
    meta = header.get("__metadata__") or {}
    keys = [k for k in meta if "treexchange" in k]
    if r < 0.85 and keys:
        meta[keys[0]] = json.dumps(_replace_a_node(json.loads(meta[keys[0]]), rng), ensure_ascii=False)
        desc = "tree document"
    else:
        header = _replace_a_node(header, rng)
        desc = "header"
    text = json.dumps(header, ensure_ascii=False).encode("utf-8")
    return desc, struct.pack("<Q", len(text)) + text + body


def _run(n: int, seed: int, tmp_path: Path) -> dict[str, int]:
    seeds = _seeds(tmp_path)
    rng = random.Random(seed)
    path, out = tmp_path / "in.safetensors", tmp_path / "out.jld2"

    def convert() -> bool:
        sink = io.StringIO()
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            rc = main(["convert", str(path), str(out)])
        if rc == 0:
            tx.load(out)  # what was written reads back
        return rc == 0

    with FuzzOps(TIME_LIMIT) as ops:
        for i in range(n):
            name, raw = seeds[i % len(seeds)]
            desc, data = _mutate(raw, rng)
            path.write_bytes(data)
            where = f"case {i}: {name}: {desc}"
            ops.run("load", where, tx.load_safetensors, path)
            ops.run("convert", where, convert, after=out)
            path.unlink()
            if os.listdir(tmp_path):
                ops.failures.append(f"left {os.listdir(tmp_path)}: case {i}")
    return ops.check()


def test_a_short_safetensors_fuzz(tmp_path: Path) -> None:
    outcomes = _run(80, 3, tmp_path)
    assert outcomes["ok"] and outcomes["error"], outcomes


@pytest.mark.slow  # ~40 s
def test_the_safetensors_fuzz(tmp_path: Path) -> None:
    n = int(os.environ.get("TX_SAFETENSORS_FUZZ_CASES", "3000"))
    outcomes = _run(n, 20261128, tmp_path)
    assert outcomes["error"] > n // 10 and outcomes["ok"] > n // 10, outcomes

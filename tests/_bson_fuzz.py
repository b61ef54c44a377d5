"""BSON seeds and BSON-aware mutations for the fuzz tests (tests/test_fuzz_bson.py, tests/fuzz_long.py).

A :class:`BsonSeed` walks its (valid) file once, independently of treexchange's parser, and
records where the numbers that size or link things are: every int32 length (documents, arrays,
strings, binaries), every element-type byte, every integer value (backref indices, array sizes,
type parameters) and the binary payloads (array bytes, left alone by byte flips). Mutations
overwrite those with hostile values, point backrefs at other backrefs (cycles, chains), flip
metadata bytes and truncate.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

import numpy as np
from conftest import FIXTURES

from treexchange._bson._writer import (
    array,
    backref,
    bson_file,
    datatype,
    primitive,
    struct as jl_struct,
    symbol,
    tuple_,
)

HOSTILE_LENGTHS = [0, 1, 4, 5, -1, -5, 2**31 - 1, -(2**31)]


def kitchen_sink() -> bytes:
    """A BSON.jl-shaped file with the tags and kinds the real fixtures hold, and some they lack."""
    f32 = datatype("Core.Float32")
    shared_w = array("Core.Float32", np.arange(6, dtype=np.float32).reshape(2, 3))
    tracked = jl_struct(
        datatype("Flux.Tracker.TrackedArray", f32, 2, datatype("Core.Array", f32, 2)),
        jl_struct(datatype("Flux.Tracker.Tracked", datatype("Core.Array", f32, 2)), None),
        array("Core.Float32", np.ones((2, 2), np.float32)),
        backref(1),
    )
    typename = jl_struct(
        datatype("Core.TypeName"),
        "1.6.0",
        symbol("#1#2"),
        {"tag": "svec", "data": []},
        datatype("Core.Function"),
        [
            symbol("#1"),
            [
                jl_struct(
                    datatype("Core.Method"),
                    {"tag": "ref", "path": ["Main"]},
                    symbol("#1"),
                    symbol("REPL[1]"),
                    3,
                )
            ],
            1,
            None,
        ],
    )
    closure = jl_struct({"tag": "jl_anonymous", "typename": typename, "params": []})
    nt_type = datatype("Core.NamedTuple", tuple_(symbol("a"), symbol("b")), datatype("Core.Tuple", f32, f32))
    entries = {
        "model": jl_struct(
            datatype("Flux.Chain", datatype("Core.Tuple", datatype("Flux.Dense", datatype("NNlib.#relu")))),
            tuple_(
                jl_struct(datatype("Flux.Dense"), backref(1), tracked, jl_struct(datatype("NNlib.#relu")))
            ),
        ),
        "same": backref(1),
        "closure": closure,
        "nt": jl_struct(nt_type, primitive(f32, b"\x00\x00\x80\x3f"), primitive(f32, b"\x00\x00\x00\x40")),
        "dict": jl_struct(
            datatype("Base.Dict", datatype("Core.String"), datatype("Core.Int64")),
            ["a", "b"],
            array("Core.Int64", np.array([1, 2], np.int64)),
        ),
        "symdict": {"lr": 0.1, "n": np.int32(3)},
        "ghosts": {"tag": "array", "type": datatype("Core.Nothing"), "size": [3], "data": b""},
        "chars": {
            "tag": "array",
            "type": datatype("Core.Char"),
            "size": [2],
            "data": b"\x00\x00\x00a\x00\x00\x00b",
        },
        "objects": {"tag": "array", "type": datatype("Core.String"), "size": [1, 2], "data": ["x", "y"]},
        "where": {
            "tag": "unionall",
            "var": jl_struct(datatype("Core.TypeVar"), symbol("T"), None, None),
            "body": datatype("Core.Array", backref(2), 1),
        },
        "undef": jl_struct(datatype("Main.M"), jl_struct(datatype("BSON.Undef")), 1),
        "list": [None, True, "s", 1.5, b"\x01\x02"],
        "empty": tuple_(),
    }
    backrefs = [shared_w, jl_struct(datatype("Core.TypeVar"), symbol("T"), None, None)]
    return bson_file(entries, backrefs)


def bson_seeds() -> list[tuple[str, bytes]]:
    """The kitchen sink, and the BSON fixtures of at most 256 KB."""
    seeds = [("bson/kitchen_sink", kitchen_sink())]
    folder = FIXTURES / "bson"
    if folder.is_dir():
        for p in sorted(folder.glob("*.bson")):
            if p.stat().st_size <= 256 << 10:
                seeds.append((str(Path("bson", p.name)), p.read_bytes()))
    return seeds


class BsonSeed:
    """A BSON file with the positions of its lengths, type bytes and integers (see module doc)."""

    def __init__(self, name: str, raw: bytes) -> None:
        self.name = name
        self.raw = raw
        self.size = len(raw)
        self.lengths: list[int] = []
        self.type_bytes: list[int] = []
        self.ints: list[tuple[int, int]] = []  # (position, width)
        self.backref_values: list[int] = []  # positions of the int after a backref's "ref" key
        payload = np.zeros(len(raw), bool)
        self._walk(0, payload)
        self.metadata_positions = np.nonzero(~payload)[0]

    def _walk(self, off: int, payload: np.ndarray) -> None:
        raw = self.raw
        stack = [off]
        while stack:
            start = stack.pop()
            self.lengths.append(start)
            end = start + struct.unpack_from("<i", raw, start)[0] - 1
            pos = start + 4
            while pos < end:
                etype = raw[pos]
                self.type_bytes.append(pos)
                nul = raw.index(b"\x00", pos + 1)
                key = raw[pos + 1 : nul]
                pos = nul + 1
                if etype in (3, 4):
                    stack.append(pos)
                    pos += struct.unpack_from("<i", raw, pos)[0]
                elif etype in (2, 5):
                    self.lengths.append(pos)
                    n = struct.unpack_from("<i", raw, pos)[0]
                    if etype == 5:
                        payload[pos + 5 : pos + 5 + n] = True
                        pos += 5 + n
                    else:
                        pos += 4 + n
                elif etype in (0x10, 0x12):
                    width = 4 if etype == 0x10 else 8
                    self.ints.append((pos, width))
                    if key == b"ref":
                        self.backref_values.append(pos)
                    pos += width
                else:
                    pos += {1: 8, 8: 1, 0x0A: 0}[etype]

    def mutate(self, rng: random.Random) -> tuple[str, bytes]:
        raw = bytearray(self.raw)
        r = rng.random()
        if r < 0.12 and self.backref_values:
            pos = rng.choice(self.backref_values)
            new = rng.choice([0, 1, 2, 3, -1, 2**62, rng.randrange(1, 64)])
            struct.pack_into("<q", raw, pos, new)
            return f"backref@{pos}={new}", bytes(raw)
        if r < 0.35:
            pos = rng.choice(self.lengths)
            old = struct.unpack_from("<i", raw, pos)[0]
            new = rng.choice([*HOSTILE_LENGTHS, old + rng.choice([-9, -4, -1, 1, 4, 9]), self.size])
            struct.pack_into("<i", raw, pos, max(min(new, 2**31 - 1), -(2**31)))
            return f"length@{pos}={new}", bytes(raw)
        if r < 0.47:
            pos = rng.choice(self.type_bytes)
            new = rng.choice(
                [0, 1, 2, 3, 4, 5, 6, 7, 8, 0x0A, 0x0D, 0x10, 0x12, 0x13, 0x7F, 0xFF, rng.randrange(256)]
            )
            raw[pos] = new
            return f"type@{pos}={new}", bytes(raw)
        if r < 0.62 and self.ints:
            pos, width = rng.choice(self.ints)
            new = rng.choice([0, -1, 1, 2**31 - 1, 2**40, rng.randrange(-5, 100)])
            if width == 4:
                struct.pack_into("<i", raw, pos, max(min(new, 2**31 - 1), -(2**31)))
            else:
                struct.pack_into("<q", raw, pos, new)
            return f"int@{pos}={new}", bytes(raw)
        if r < 0.85:
            desc = []
            for _ in range(rng.choice([1, 1, 2, 3])):
                pos = int(rng.choice(self.metadata_positions))
                val = rng.choice([0, 0xFF, rng.randrange(256), raw[pos] ^ (1 << rng.randrange(8))])
                raw[pos] = val
                desc.append(f"{pos}={val}")
            return "flip " + ",".join(desc), bytes(raw)
        cut = rng.randrange(0, self.size)
        out = raw[:cut]
        if out[:4] and rng.random() < 0.5 and cut >= 5:  # keep the root length consistent: reach the parser
            struct.pack_into("<i", out, 0, cut)
            out[-1] = 0
            return f"truncate@{cut} (length fixed)", bytes(out)
        return f"truncate@{cut}", bytes(out)

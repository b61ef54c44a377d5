"""Seeded mutation fuzzing of the reader: damaged files raise TreexchangeError, nothing else.

Seeds are small Julia-written fixtures plus a builder-made file holding the value kinds the
fixtures lack. Mutations: pointer and length fields found by parsing the seed (every 8-byte
field whose value is the address of an object header, a heap collection or a data block, and
the vlen counts next to heap addresses) overwritten with hostile values; random byte flips
outside array payloads; runs of 0x00/0xFF; truncations. Every case is read completely (eager
``load`` and the ``inspect --json`` listing) under a per-case time alarm and a tracemalloc
peak budget, to catch hangs and allocations that the file size does not justify.

The hostile files (../shared/hostile, else tests/hostile; each broke a promise once) are seeds too,
and a graph mutation redirects a link or reference to an ancestor of its object (a cycle) or to a sibling (a
DAG): every walk must end, and visit each object once.

``TREEXCHANGE_FUZZ_CASES`` (default 2400) sets the number of cases; ``tests/fuzz_long.py`` runs
the same mutations much longer, outside CI.
"""

from __future__ import annotations

import os
import random
import signal
import struct
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from _h5walk import is_numeric, julia_shape, reachable_datasets, sha256_le
from _jld2_builder import (
    Attr,
    Builder,
    shared,
    space,
    t_compound,
    t_float,
    t_int,
    t_opaque,
    t_ref,
    t_vlen_string,
)
from conftest import FIXTURES, HOSTILE

import treexchange as tx
from treexchange import TreexchangeError
from treexchange._inspect import json_lines, node_record, text_lines, walk_nodes
from treexchange._nodeproto import walk_leaves

N_CASES = int(os.environ.get("TREEXCHANGE_FUZZ_CASES", "2400"))
SEED_FILES = [
    "flux-state/reinforce-circuits_mymodel.jld2",
    "flux-state/juliahepnet_model.jld2",
    "jld2jl/docs_v0.6.0_test.jld2",
    "misc/exactpenalty_data.jld2",
    "misc/multistartlh_test.jld2",
    "misc/urop_tuble.jld2",
    "misc/ternarydiagrams_data.jld2",
    "misc/seriesforecast_data.jld2",
    "legacy/dsge_test.jld2",
    "jld2testfiles/singleton_struct_fields.jld2",
    "jld2testfiles/struct_reconstruction.jld2",
    "jld2testfiles/readas_foo_n_sin.jld2",
    "jld2testfiles/unionall_typeparam_v0.1.2.jld2",
]
TIME_LIMIT = 10.0  # seconds per case before the alarm fires (a hang)
SLOW = 2.0  # seconds per case that count as suspiciously slow


def _kitchen_sink() -> bytes:
    """A builder file with Dict, NTuple-as-vector, Complex, BFloat16, ghosts, 0-dim, compressed."""
    b = Builder()
    any_t = b.jt_dataset("Core.Any")
    i64 = b.jt_dataset("Core.Int64")
    s = b.jt_dataset("Core.String")
    pair = b.commit(
        t_compound([("first", t_vlen_string(), 16), ("second", t_int(8), 8)]), b.jt("Core.Pair", [s, i64])
    )
    kv = b.dataset(
        shared(pair),
        space("simple", [2]),
        b.vstr("a") + struct.pack("<q", 1) + b.vstr("b") + struct.pack("<q", 2),
    )
    sd = b.commit(
        t_compound([("kvvec", t_ref(), 8)]), b.jt("Base.Dict", [s, i64]), written=b.jt("JLD2.SerializedDict")
    )
    b.link("dict", b.dataset(shared(sd), space("scalar"), struct.pack("<Q", kv)))
    n11 = b.int_dataset(11)
    one = b.int_dataset(1)
    nt = b.commit(t_ref(), b.jt("NTuple", [n11, i64]), written=b.jt("Core.Array", [i64, one]))
    b.link("ntuple", b.dataset(shared(nt), space("scalar"), struct.pack("<Q", b.array(np.arange(11)))))
    f32 = b.jt_dataset("Core.Float32")
    cplx = b.commit(t_compound([("re", t_float(4), 4), ("im", t_float(4), 4)]), b.jt("Base.Complex", [f32]))
    b.link(
        "complex", b.dataset(shared(cplx), space("simple", [3]), np.arange(3, dtype=np.complex64).tobytes())
    )
    bf = b.commit(t_opaque(2), b.jt("BFloat16s.BFloat16"))
    b.link("bf16", b.dataset(shared(bf), space("simple", [2]), b"\x80\x3f\x00\x40"))
    nothing = b.ghost("Core.Nothing")
    dims = Attr("dimensions", t_int(8), space("simple", [1]), struct.pack("<q", 4))
    b.link("ghosts", b.dataset(shared(nothing), space("null"), b"", [dims]))
    zero = Attr("dimensions", t_int(8), space("simple", [0]), b"")
    b.link("zero_dim", b.dataset(t_float(8), space("simple", [1]), np.float64(1).tobytes(), [zero]))
    b.link(
        "packed",
        b.array(np.arange(64, dtype=np.float32).reshape(8, 8), layout="deflate", chunk_dims=(8, 8, 4)),
    )
    attr = Attr("julia_type", t_ref(), space("scalar"), struct.pack("<Q", any_t))
    w = b.array(np.ones((3, 2), np.float32))
    b.link("list", b.dataset(t_ref(), space("simple", [3]), struct.pack("<QQQ", w, w, 0), [attr]))
    b.link("strings", b.dataset(t_vlen_string(), space("simple", [2]), b.vstr("σ²") + b.vstr("")))
    return b.finish()


def _seeds() -> list[tuple[str, bytes]]:
    seeds = [("kitchen_sink", _kitchen_sink())]
    for rel in SEED_FILES:
        p = FIXTURES / rel
        if p.is_file():
            seeds.append((rel, p.read_bytes()))
    return seeds


def _hostile_seeds() -> list[tuple[str, bytes]]:
    """The hostile files (conftest.HOSTILE), small ones: the two 200+ KB mutants add little but time."""
    if not HOSTILE.is_dir():
        return []
    return [
        (f"hostile/{p.name}", p.read_bytes())
        for p in sorted(HOSTILE.glob("*.jld2"))
        if p.stat().st_size < 100_000
    ]


def _object_graph(f: tx.File, max_nodes: int = 20_000) -> tuple[dict[int, set[int]], dict[int, set[int]]]:
    """For every object (dataset or group) reached: its ancestor objects and its sibling objects."""
    ancestors: dict[int, set[int]] = {}
    children: dict[int | None, set[int]] = {}
    parent_of: dict[int, int | None] = {}
    stack: list[tuple[object, tuple[int, ...]]] = [(f, ())]
    seen = 0
    while stack and seen < max_nodes:
        node, above = stack.pop()
        seen += 1
        address = getattr(node, "object_address", None)
        if address is not None:
            if address in ancestors:
                continue
            ancestors[address] = set(above)
            parent = above[-1] if above else None
            parent_of[address] = parent
            children.setdefault(parent, set()).add(address)
            above = (*above, address)
        if hasattr(node, "children"):
            try:
                stack.extend((child, above) for _, child in node.children())  # type: ignore[attr-defined]
            except TreexchangeError:
                pass
    siblings = {a: children.get(parent_of[a], set()) - {a} for a in ancestors}
    return ancestors, siblings


class _Seed:
    """A seed file with the positions of its pointer/length fields, found by parsing it."""

    def __init__(self, name: str, raw: bytes) -> None:
        self.name = name
        self.raw = raw
        addrs: set[int] = set()
        data_ranges: list[tuple[int, int]] = []
        with tx.open(raw) as f:
            try:  # a hostile seed may refuse to be read (that is what it is for)
                tx.load(raw)
                list(json_lines(f))
            except TreexchangeError:
                pass
            self.ancestors, self.siblings = _object_graph(f)
            reader = f.reader
            # Parse every object reachable by a full read, then harvest addresses.
            reader.h5.object(reader.root_address)
            for info in list(reader._infos.values()):
                loc = reader.h5.raw_location(info.obj) if info.kind == "dataset" else None
                if loc is not None and info.shape is not None and info.dtype is not None:
                    data_ranges.append(loc)
            addrs.update(reader.h5._objects)
            addrs.update(reader.h5._heaps)
            base = reader.h5.base
            for off, _n in data_ranges:
                addrs.add(off - base)
        self.data_ranges = data_ranges
        buf = np.frombuffer(raw, np.uint8)
        known = np.array(sorted(a for a in addrs if a > 0), dtype="<u8")
        fields: list[int] = []
        for k in range(8):
            count = (len(raw) - k) // 8
            vals = np.frombuffer(raw, "<u8", count, k)
            hits = np.nonzero(np.isin(vals, known))[0] * 8 + k
            fields.extend(int(h) for h in hits)
        self.pointer_fields = sorted(fields)
        self.known_addrs = [int(a) for a in known]
        # pointer fields that hold the address of an object with an ancestor or a sibling
        self.graph_fields = [
            p
            for p in self.pointer_fields
            if self.ancestors.get(struct.unpack_from("<Q", raw, p)[0])
            or self.siblings.get(struct.unpack_from("<Q", raw, p)[0])
        ]
        heap_addrs = set(reader.h5._heaps) if hasattr(reader.h5, "_heaps") else set()
        self.count_fields = [
            p - 4 for p in self.pointer_fields if p >= 4 and struct.unpack_from("<Q", raw, p)[0] in heap_addrs
        ]
        self.metadata = np.ones(len(raw), bool)
        for off, n in data_ranges:
            self.metadata[off : off + n] = False
        self.metadata_positions = np.nonzero(self.metadata)[0]
        self.size = len(raw)
        del buf

    def mutate(self, rng: random.Random) -> tuple[str, bytes]:
        raw = bytearray(self.raw)
        if self.graph_fields and rng.random() < 0.15:
            # graph-shaped: a link or reference now points at an ancestor (a cycle) or a sibling
            pos = rng.choice(self.graph_fields)
            old = struct.unpack_from("<Q", raw, pos)[0]
            up, side = sorted(self.ancestors.get(old, ())), sorted(self.siblings.get(old, ()))
            choices = [("ancestor", a) for a in up] + [("sibling", a) for a in side]
            how, new = rng.choice(choices)
            struct.pack_into("<Q", raw, pos, new)
            return f"graph@{pos}: {old} -> {how} {new}", bytes(raw)
        r = rng.random()
        if r < 0.4 and self.pointer_fields:
            pos = rng.choice(self.pointer_fields)
            old = struct.unpack_from("<Q", raw, pos)[0]
            new = (
                rng.choice(
                    [
                        0,
                        1,
                        8,
                        2**64 - 1,
                        2**63,
                        2**32,
                        self.size,
                        self.size - 512,
                        self.size - 520,
                        rng.randrange(0, self.size),
                        old + rng.choice([-48, -16, -8, -1, 1, 8, 16, 48]),
                        rng.choice(self.known_addrs),  # type confusion: another object
                        rng.choice(self.known_addrs),
                        rng.getrandbits(64),
                    ]
                )
                % 2**64
            )
            struct.pack_into("<Q", raw, pos, new)
            return f"pointer@{pos}={new}", bytes(raw)
        if r < 0.5 and self.count_fields:
            pos = rng.choice(self.count_fields)
            new = rng.choice([0, 1, 2, 255, 2**16, 2**31, 2**32 - 1, rng.getrandbits(32)])
            struct.pack_into("<I", raw, pos, new)
            return f"count@{pos}={new}", bytes(raw)
        if r < 0.75:
            desc = []
            for _ in range(rng.choice([1, 1, 2, 3, 4])):
                pos = int(rng.choice(self.metadata_positions))
                val = rng.choice([0, 0xFF, rng.randrange(256), raw[pos] ^ (1 << rng.randrange(8))])
                raw[pos] = val
                desc.append(f"{pos}={val}")
            return "flip " + ",".join(desc), bytes(raw)
        if r < 0.88:
            pos = int(rng.choice(self.metadata_positions))
            n = rng.randrange(2, 17)
            fill = rng.choice([0, 0xFF])
            raw[pos : pos + n] = bytes([fill]) * len(raw[pos : pos + n])
            return f"fill@{pos}+{n}={fill}", bytes(raw)
        cut = rng.choice(
            [rng.randrange(0, self.size), rng.randrange(512, self.size), self.size - rng.randrange(1, 64)]
        )
        return f"truncate@{cut}", bytes(raw[: max(cut, 0)])


def _read_everything(raw: bytes) -> None:
    """Eager read of every value (what ``load`` does) and the full ``inspect --json`` listing;
    the text listing too when the JSON one succeeds (it has its own cycle rendering); then the
    leaves, which must be what the protocol's walk over ``children()`` lists (:func:`_leaves`)."""
    try:
        with tx.open(raw) as f:
            try:
                f.read()
            finally:  # even when the eager read refuses (a cycle through a struct), list it
                for _ in json_lines(f):
                    pass
                for _ in text_lines(f):
                    pass
    finally:
        fast, generic = _leaves(raw, fast=True), _leaves(raw, fast=False)
        assert fast == generic, f"leaves() {_short(fast)} != walk_leaves {_short(generic)}"


def _leaves(raw: bytes, *, fast: bool) -> list[tuple[Any, ...]] | str:
    """What ``leaves()`` (``fast``) or ``walk_leaves`` lists of a fresh open of ``raw``, or the
    name of the TreexchangeError it raises."""
    try:
        with tx.open(raw) as f:
            found = f.leaves() if fast else walk_leaves(f, f.limits.nodes_for(f.file_size))
            return [(p, n.kind, str(n.julia_type), n.shape, n.dtype, n.object_address) for p, n in found]
    except TreexchangeError as err:
        return type(err).__name__


def _short(found: list[tuple[Any, ...]] | str) -> str:
    return found if isinstance(found, str) else f"{len(found)} leaves, first {found[:1]}"


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: object) -> None:
    raise _Timeout()


def _cases(
    n_cases: int = N_CASES, extra: list[tuple[str, bytes]] | None = None
) -> Iterator[tuple[_Seed, str, bytes]]:
    seeds = [_Seed(name, raw) for name, raw in _seeds() + _hostile_seeds() + (extra or [])]
    rng = random.Random(20240611)
    for i in range(n_cases):
        seed = seeds[i % len(seeds)]
        desc, raw = seed.mutate(rng)
        yield seed, f"case {i}: {seed.name}: {desc}", raw


@pytest.mark.slow  # ~50 s: every mutation read completely
def test_fuzz_only_treexchange_errors() -> None:
    if not FIXTURES.is_dir():
        pytest.skip("fixtures absent: fuzzing only the kitchen-sink seed is not enough")
    graph_cases = 0

    def cases() -> Iterator[tuple[str, bytes]]:
        nonlocal graph_cases
        for _seed, desc, raw in _cases():
            graph_cases += ": graph@" in desc
            yield desc, raw

    outcomes = run_cases(cases())
    # The mutations must actually bite (and not all be rejected at the first byte).
    assert outcomes["error"] > N_CASES // 10 and outcomes["ok"] > N_CASES // 20, outcomes
    assert graph_cases > N_CASES // 20, graph_cases  # cycles and DAGs made by redirection


def untraced_seconds(raw: bytes) -> float | None:
    """CPU seconds of reading ``raw`` completely (:func:`_read_everything`; a TreexchangeError
    is an answer) with tracemalloc off; None when that too takes over ``TIME_LIMIT`` (a hang).
    Needs the SIGPROF handler (:func:`_alarm`) installed.

    A case that is slow, or hangs, while tracemalloc traces is timed again so: tracemalloc walks
    the whole Python stack at every allocation (to count its frames), so reading a tree thousands
    of levels deep -- refused at ``Limits`` depth, as it must be -- costs time in proportion to the
    depth per allocation only under the tracer (a fuzzed Dict nested 2,062 deep: 0.16 s, 19 s
    traced). The tracer's peak is read before this is asked."""
    tracing = tracemalloc.is_tracing()
    if tracing:
        tracemalloc.stop()
    signal.setitimer(signal.ITIMER_PROF, TIME_LIMIT)
    t0 = time.process_time()
    try:
        try:
            _read_everything(raw)
        except TreexchangeError:
            pass
        return time.process_time() - t0
    except _Timeout:
        return None
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        if tracing:
            tracemalloc.start()


def run_cases(cases: Iterator[tuple[str, bytes]]) -> dict[str, int]:
    """Read every ``(description, bytes)`` case completely under a CPU-time alarm and a
    tracemalloc budget; assert that each one read or raised a TreexchangeError, none hung, none
    was slow or allocated more than its size justifies (time judged without the tracer when it
    ran long under it: :func:`untraced_seconds`). Returns the counts of reads and errors."""
    old_handler = signal.signal(signal.SIGPROF, _alarm)
    tracemalloc.start()
    failures: list[str] = []
    slow: list[str] = []
    outcomes = {"ok": 0, "error": 0}
    try:
        for desc, raw in cases:
            tracemalloc.reset_peak()
            budget = 48 * 2**20 + 64 * len(raw)
            timed_out = False
            signal.setitimer(signal.ITIMER_PROF, TIME_LIMIT)  # CPU time: a loaded machine is no hang
            t0 = time.process_time()  # CPU seconds: other processes do not make a case slow
            try:
                _read_everything(raw)
                outcomes["ok"] += 1
            except TreexchangeError:
                outcomes["error"] += 1
            except _Timeout:
                timed_out = True
            except Exception as err:
                failures.append(f"{desc}: {type(err).__name__}: {err}")
            finally:
                signal.setitimer(signal.ITIMER_PROF, 0)
            elapsed = time.process_time() - t0
            peak = tracemalloc.get_traced_memory()[1]
            if peak > budget:
                failures.append(f"{desc}: allocated {peak} bytes for a {len(raw)}-byte file")
            if timed_out or elapsed > SLOW:
                untraced = untraced_seconds(raw)
                if untraced is None:
                    failures.append(f"{desc}: hang (> {TIME_LIMIT} s)")
                elif untraced > SLOW:
                    slow.append(f"{desc}: {untraced:.1f} s")
            if len(failures) >= 20:
                break
    finally:
        tracemalloc.stop()
        signal.signal(signal.SIGPROF, old_handler)
    assert not failures, "\n".join(failures)
    assert not slow, "\n".join(slow)
    return outcomes


def test_seeds_read_cleanly_and_agree_with_h5py(tmp_path: Path) -> None:
    """The unmutated seeds read completely, and every numeric array h5py reaches (through links
    and references) has the same Julia shape, values and inspect sha256 in our reader."""
    total = 0
    for i, (name, raw) in enumerate(_seeds()):
        _read_everything(raw)
        path = tmp_path / f"seed{i}.jld2"  # one name each: h5py keeps the files it opened open
        path.write_bytes(raw)
        datasets = {addr: ds for addr, ds in reachable_datasets(path).items() if is_numeric(ds) and ds.ndim}
        with tx.open(raw) as f:
            reader = f.reader
            for addr, ds in datasets.items():
                info = reader.info(addr)
                expected = ds[()]
                assert info.shape == julia_shape(ds), name
                np.testing.assert_array_equal(reader.numeric_array(info, "storage"), expected, err_msg=name)
                np.testing.assert_array_equal(reader.numeric_array(info, "julia"), expected.T, err_msg=name)
            # inspect's sha256 of every listed array h5py can read is h5py's.
            compared = 0
            for node, _ in walk_nodes(f):
                info = getattr(node, "_info", None)
                if node.kind == "array" and info is not None and info.address in datasets:
                    assert node_record(node)["sha256"] == sha256_le(datasets[info.address][()]), node.path
                    compared += 1
            with h5py.File(path, "r") as h5:
                assert sorted(f) == sorted(k for k in h5 if k != "_types"), name  # h5py sorts names
        assert compared or not datasets, f"{name}: no numeric array compared"
        total += compared
    # The built-in kitchen-sink seed alone holds a few arrays; the fixtures add many more.
    assert total >= (10 if len(_seeds()) > 1 else 3)


def test_a_type_parameter_holding_an_array_is_read_not_compared(tmp_path: Path) -> None:
    """A fuzz finding (tests/fuzz_long.py --seed 1128, cases 13849 and 15248): a Tuple type whose
    parameter reference points at an array dataset (type confusion) raised a bare ValueError: the
    check for a tuple of one concrete type compared the parameters with ``==``, which for an
    array is no bool. JLD2 reads a parameter as the value its dataset holds; so does treexchange."""
    path = tmp_path / "t.jld2"
    tx.save(path, x=tx.NamedTuple(a=np.arange(4), b=np.arange(4.0)))
    raw = bytearray(path.read_bytes())
    with tx.open(path) as f:
        node = f["x"]
        assert str(node.julia_type).endswith("Tuple{Array{Int64, 1}, Array{Float64, 1}}}")
        array_at = node["a"]._address  # type: ignore[attr-defined]
        params = f.reader.types._params  # type: ignore[attr-defined]  # (ref -> parameter read)
        (ref,) = [r for r, t in params.items() if str(t) == "Array{Float64, 1}"]
    old, new = struct.pack("<Q", ref), struct.pack("<Q", array_at)
    assert raw.count(old) >= 1
    mutated = bytes(raw.replace(old, new))
    _read_everything(mutated)  # (raised ValueError)
    with tx.open(mutated) as f:
        assert str(f["x"].julia_type).endswith("Tuple{Array{Int64, 1}, array([0, 1, 2, 3])}}")

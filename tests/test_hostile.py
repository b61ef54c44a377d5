"""Hostile and edge-case files (../shared/hostile, else tests/hostile) through every entry point.

Each file of ../shared/hostile/ (with slow/ and writeback/; without ../shared, the part of them the
repository bundles in tests/hostile/, README there) broke a promise of treexchange (a hang, an
exception other than TreexchangeError, memory or time far beyond the file's size). Every one now
gets, from ``open`` + a full lazy walk reading every array, ``load`` with ``mmap`` both ways,
``infer_schema``, ``validate``, ``inspect`` (text and ``--json``) and ``convert`` (to JLD2, and to
safetensors through the tree formats' lazy walk), a result or a
TreexchangeError that names an offset or a path, within seconds and in bounded memory. Each file
runs in a child process (forked by tests/_hostile_child.py --serve) so that its time and peak
resident set are its own.

The rest builds legal graphs (an HDF5 hard link to an ancestor group, a ``Vector{Any}`` that holds
itself, a reference DAG) and deep trees with ``tx.save`` and checks what each entry point makes of
them.
"""

from __future__ import annotations

import json
import os
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from conftest import HOSTILE, REPO

import treexchange as tx
from treexchange._inspect import iter_records, text_lines
from treexchange._limits import DEFAULT_LIMITS, reference_depth
from treexchange._recursion import stack_for_depth
from treexchange._schema import RefNode
from treexchange._schema._model import iter_paths

# slow/: mutated real files that once took over 20 s (time must follow the file's size, not the
# counts it claims); writeback/: files load reads that save once failed to write back.
HOSTILE_FILES = (
    sorted([*HOSTILE.glob("*.jld2"), *HOSTILE.glob("slow/*.jld2"), *HOSTILE.glob("writeback/*.jld2")])
    if HOSTILE.is_dir()
    else []
)
ENTRIES = (
    "walk",
    "load_mmap",
    "load_nommap",
    "infer",
    "validate",
    "inspect",
    "inspect_json",
    "convert",
    "convert_safetensors",
)
SECONDS = 10.0  # per entry point, generous: a hang is what this catches (the issue asks ~1 s)
RSS_SLACK_KB = 300 * 1024  # above the child's baseline (Python + numpy + treexchange imported)
RSS_PER_FILE_BYTE = 64  # "a small multiple of the file size"

# Files that are legal (a result is expected from the entry points that can represent them).
LEGAL = {
    # (a group cycle: JLD2 and the tree formats write trees)
    "linkcycle_shared_demo.jld2": set(ENTRIES) - {"convert", "convert_safetensors"},
    # (a Vector{Any} that holds itself: the tree formats store a tree of values)
    "crafted_L14.jld2": set(ENTRIES) - {"convert_safetensors"},
    "crafted_L12.jld2": set(ENTRIES),
    "crafted_L15.jld2": {"walk", "load_mmap", "load_nommap", "inspect", "inspect_json", "infer"},
}


# Mutants that run in the slow tier. Their cost is the real file's, not the mutation's: the entry
# points of each take 3.1-4.6 s of CPU together (dims_2-4025 3.1 s, field_1-1555 3.4 s, flip_3-1786
# 4.6 s; 4.4-4.9 s wall with the child's imports, more on a loaded machine), where the unmutated
# misc/betaml_test.jld2 (616 KB of thousands of small objects, read, walked, validated and converted
# whole: why conftest.SLOW_FIXTURES holds it) takes 3.9 s; mgk_field_1-3207 reads, walks, validates
# and converts the whole 1.1 MB mgk file (9 s wall on a slow machine, where mnn_field_1-1847, the same
# kind of mutation, takes 4.4 s). Time follows the file's size, as this test demands; only the amount
# of work puts them in the slow tier, where SECONDS still bounds each entry point. The other betaml
# mutants (dims_1-1945, dims_2-3943) stop at an error in under 1 s: dims_1-1945 is the default tier's
# one of its kind.
SLOW_MUTANTS = frozenset(
    {
        "betaml_dims_2-4025.jld2",
        "betaml_field_1-1555.jld2",
        "betaml_flip_3-1786.jld2",
        "mgk_field_1-3207.jld2",
    }
)


def _mutation(path: Path) -> str | None:
    """The kind of mutation of a slow/ mutant (``redirect`` of ``mnn_redirect_2-4012.jld2``: what
    was changed in the real file it came from, ``mnn``), else None."""
    if path.parent.name != "slow":
        return None
    return re.sub(r"^[a-z]+_|_\d+-\d+$", "", path.stem)


def _params() -> list:
    """Every hostile file; of the slow/ mutants, the default tier runs the first of each kind of
    mutation (each takes 2-7 s: the real file's work, SLOW_MUTANTS), the slow tier the others (the
    same kinds of mutation of other real files, and other seeds) and SLOW_MUTANTS, so the README's
    test command stays well within its five minutes on a slow 2-core machine while each kind of
    mutation is still in it (CI runs both tiers)."""
    if not HOSTILE_FILES:
        return [pytest.param(None, marks=pytest.mark.skip(reason=f"{HOSTILE} absent"))]
    params, seen = [], set()
    for p in HOSTILE_FILES:  # (sorted: the first of a kind is the same on every machine)
        kind = _mutation(p)
        slow = p.name in SLOW_MUTANTS or (kind is not None and kind in seen)
        if kind is not None and p.name not in SLOW_MUTANTS:
            seen.add(kind)
        params.append(
            pytest.param(p, id=str(p.relative_to(HOSTILE)), marks=[pytest.mark.slow] if slow else [])
        )
    return params


class _Children:
    """A ``tests/_hostile_child.py --serve`` process, which forks a child for each file: what a
    child process of its own measures, without a second of interpreter start and imports per file
    (most of the time of a small file). Started again after a file it did not answer for."""

    def __init__(self) -> None:
        self.server: subprocess.Popen | None = None
        self.buffer = bytearray()

    def run(self, path: Path, entries: tuple[str, ...] = ENTRIES) -> list[dict]:
        """The records of ``entries`` run on ``path`` by one forked child (its exit status 0)."""
        if self.server is None or self.server.poll() is not None:
            self.buffer.clear()
            self.server = subprocess.Popen(
                [sys.executable, str(REPO / "tests" / "_hostile_child.py"), "--serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                env=dict(os.environ, PYTHONPATH=str(REPO)),
                cwd=REPO,
                start_new_session=True,  # (its forked child too is killed with it)
            )
        assert self.server.stdin is not None
        self.server.stdin.write(f"{','.join(entries)}\t{path}\n".encode())
        self.server.stdin.flush()
        deadline = time.monotonic() + SECONDS * len(entries) + 30
        records = []
        while True:
            line = self._line(deadline)
            if line is None:
                self.close(kill=True)
                pytest.fail(f"{path.name}: no answer within {SECONDS * len(entries) + 30:.0f} s")
            if line.startswith(b"{"):
                record = json.loads(line)
                if "done" in record:
                    assert record["done"] == 0, record["stderr"]
                    return records
                records.append(record)

    def _line(self, deadline: float) -> bytes | None:
        """The server's next line, or None at the deadline or when it exited."""
        assert self.server is not None and self.server.stdout is not None
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.server.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.server.stdout.fileno(), 1 << 16)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, rest = bytes(self.buffer).partition(b"\n")
        self.buffer[:] = rest
        return line

    def close(self, kill: bool = False) -> None:
        if self.server is None:
            return
        if not kill:
            assert self.server.stdin is not None
            self.server.stdin.close()  # (the server exits at the end of its input)
            try:
                self.server.wait(timeout=30)
            except subprocess.TimeoutExpired:
                kill = True
        if kill:
            os.killpg(self.server.pid, signal.SIGKILL)
            self.server.wait()
        for stream in (self.server.stdin, self.server.stdout):
            if stream is not None and not stream.closed:
                stream.close()
        self.server = None


@pytest.fixture(scope="module")
def children() -> Iterator[_Children]:
    served = _Children()
    yield served
    served.close()


@pytest.mark.parametrize("path", _params())
def test_every_entry_point_is_bounded(children: _Children, path: Path) -> None:
    records = children.run(path)
    assert [r["entry"] for r in records] == list(ENTRIES)
    size_kb = path.stat().st_size / 1024
    problems = []
    for r in records:
        what = f"{path.name} {r['entry']}: {r['outcome']} {r['message'][:200]}"
        if not r["treexchange"]:
            problems.append(f"not a TreexchangeError: {what}")
        elif r["outcome"] != "ok" and r["offset"] is None and not r["path"]:
            problems.append(f"error names neither an offset nor a path: {what}")
        if r["seconds"] > SECONDS:
            problems.append(f"{r['seconds']:.1f} s: {what}")
        grown = r["maxrss_kb"] - r["baseline_kb"]
        if grown > RSS_SLACK_KB + RSS_PER_FILE_BYTE * size_kb:
            problems.append(f"peak RSS grew by {grown // 1024} MiB: {what}")
        if r["entry"] in LEGAL.get(path.name, ()) and r["outcome"] != "ok":
            problems.append(f"legal file refused: {what}")
    assert not problems, "\n".join(problems)


# --- legal graphs, built here ----------------------------------------------------------------------


def _group_cycle(tmp_path: Path) -> Path:
    """An h5py-made JLD2 file whose group ``g`` holds a hard link ``back`` to itself."""
    import h5py

    src = tmp_path / "plain.jld2"
    tx.save(src, g=tx.NamedTuple(w=np.arange(3.0)))
    path = tmp_path / "cycle.jld2"
    path.write_bytes(src.read_bytes())
    with h5py.File(path, "r+") as h5:
        grp = h5.create_group("grp")
        grp["w"] = h5["g"]  # the NamedTuple dataset, linked from the group as well
        grp["back"] = grp  # a hard link to the group itself: a cycle
    return path


def test_group_cycle_is_read_walked_once_and_shown(tmp_path: Path) -> None:
    path = _group_cycle(tmp_path)
    value = tx.load(path)
    assert value["grp"]["back"] is value["grp"]  # the cycle closes on the same dict
    with tx.open(path) as f:
        recs = list(iter_records(f))
        text = list(text_lines(f))
    back = [r for r in recs if r["path"] == ["grp", "back"]]
    assert back == [{"path": ["grp", "back"], "kind": "group", "julia_type": "JLD2.Group", "ref": ["grp"]}]
    assert any("back/: JLD2.Group  (cycle: back to grp)" in line for line in text)
    # the NamedTuple reached through two links is listed at both places (its children once)
    shared = [r for r in recs if r["path"] == ["grp", "w"]]
    assert shared and shared[0]["ref"] == ["g"]


def test_list_cycle_loads_as_one_object(tmp_path: Path) -> None:
    """``a = Any[]; push!(a, Any[a])`` in Julia: a reference cycle, loaded with identity kept."""
    path = HOSTILE / "crafted_L14.jld2"
    if not path.is_file():
        pytest.skip(f"{HOSTILE} absent")
    for mmap in (True, False):
        a = tx.load(path, "a", mmap=mmap)
        assert isinstance(a, list) and a[0][0] is a
    with tx.open(path) as f:
        recs = list(iter_records(f))
    assert recs[-1]["ref"] == ["a"] and recs[-1]["path"] == ["a", 1, 1]
    # The schema describes the cycle with a back-reference (schema 2.0), and the file conforms.
    doc = tx.infer_schema(path)
    inner = doc.node_at(("a", 1, 1))
    assert isinstance(inner, RefNode) and inner.target == ["a"]
    assert tx.validate(path, doc) == [] and tx.validate(tx.load(path), doc) == []
    assert not tx.diff(path, doc)
    out = tmp_path / "converted.jld2"
    from treexchange._save import convert

    convert(path, out)
    again = tx.load(out, "a")
    assert again[0][0] is again


def test_reference_dag_is_visited_once_per_object() -> None:
    """A vector k holds [ref k-1, ref k-1], 40 levels: 2**40 paths, 41 objects."""
    path = HOSTILE / "crafted_L12.jld2"
    if not path.is_file():
        pytest.skip(f"{HOSTILE} absent")
    with tx.open(path) as f:
        recs = list(iter_records(f))
    assert len(recs) < 200
    assert sum("ref" in r for r in recs) >= 39
    # Each vector is shared (mutable, reached twice): described once, then a back-reference, so
    # the schema has 2 nodes per level, not 2**40 (it used to exceed max_nodes).
    doc = tx.infer_schema(path)
    nodes = list(iter_paths(doc.roots))
    assert len(nodes) < 200 and sum(isinstance(n, RefNode) for _, n in nodes) >= 39
    assert tx.validate(path, doc) == []


def test_type_dag_renders_within_max_type_chars() -> None:
    path = HOSTILE / "crafted_L15.jld2"
    if not path.is_file():
        pytest.skip(f"{HOSTILE} absent")
    with tx.open(path) as f:
        jt = f["x"].julia_type
        text = str(jt)
        assert len(text) <= DEFAULT_LIMITS.max_type_chars + 10
        assert text.endswith("…}")
        assert jt == jt and hash(jt) == hash(jt)
        with pytest.raises(tx.LimitError, match="max_type_chars"):
            jt.qualified()


# --- allocation follows what the file stores ------------------------------------------------------


def test_decoded_bytes_budget(tmp_path: Path) -> None:
    path = tmp_path / "zeros.jld2"
    tx.save(path, z=np.zeros(1 << 22), compress="zstd")  # 32 MiB decoded from a small file
    assert path.stat().st_size < 1 << 20
    assert tx.load(path, "z").sum() == 0  # the default budget: max(256 MiB, 100 x file size)
    tight = tx.Limits(max_decoded_bytes=1 << 20)
    with pytest.raises(tx.LimitError, match="max_decoded_bytes") as err:
        tx.load(path, "z", limits=tight)
    assert err.value.offset is not None
    with tx.open(path, limits=tight) as f, pytest.raises(tx.LimitError):
        np.asarray(f["z"])


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("crafted_L01.jld2", tx.LimitError),
        ("crafted_L02.jld2", tx.LimitError),
        ("crafted_L04.jld2", tx.LimitError),
        ("crafted_L06.jld2", tx.LimitError),
        ("crafted_L10.jld2", tx.LimitError),
        ("crafted_L11.jld2", tx.LimitError),
        ("crafted_dupfield.jld2", tx.FormatError),
    ],
)
def test_hostile_sizes_raise_our_errors(name: str, error: type[Exception]) -> None:
    path = HOSTILE / name
    if not path.is_file():
        pytest.skip(f"{HOSTILE} absent")
    with pytest.raises(error) as err:
        tx.load(path)
    assert err.value.offset is not None or err.value.path


# --- depth: decided once, in _limits -----------------------------------------------------------------


def _nest(kind: str, levels: int) -> object:
    v: object = np.arange(2.0)
    for _ in range(levels):
        v = [v] if kind == "list" else tx.NamedTuple(a=v)
    return v


def _depth_of(v: object) -> int:
    d = 0
    while not isinstance(v, np.ndarray):
        v = v[0] if isinstance(v, list) else v["a"]  # type: ignore[index]
        d += 1
    return d


@pytest.mark.parametrize(
    ("kind", "levels"),
    # NamedTuples nested in NamedTuples are stored inline with types whose text grows with the
    # depth (a file quadratic in it): 512 levels take ~30 s, so the limit is tested with lists.
    [("list", 82), ("list", DEFAULT_LIMITS.max_depth), ("namedtuple", 82), ("namedtuple", 160)],
)
def test_deep_trees_saved_by_treexchange_load(tmp_path: Path, kind: str, levels: int) -> None:
    path = tmp_path / "deep.jld2"
    with stack_for_depth(DEFAULT_LIMITS.max_depth):
        tx.save(path, x=_nest(kind, levels))
    assert _depth_of(tx.load(path, "x")) == levels
    assert _depth_of(tx.load(path, "x", mmap=False)) == levels
    with tx.open(path) as f:
        assert sum(1 for _ in iter_records(f)) == levels + 1


def test_references_deeper_than_the_limit_are_a_limit_error(tmp_path: Path) -> None:
    """A chain of references one past ``reference_depth`` raises LimitError, never RecursionError."""
    limits = tx.Limits(max_depth=100)
    limit = reference_depth(limits)
    path = tmp_path / "deeper.jld2"
    tx.save(path, x=_nest("list", limit + 1))  # within what save admits (Limits().max_depth)
    with pytest.raises(tx.LimitError, match="references nested deeper"):
        tx.load(path, "x", limits=limits)
    small = tx.Limits(max_depth=4)
    path2 = tmp_path / "five.jld2"
    tx.save(path2, x=_nest("list", 3 * small.max_depth))
    assert _depth_of(tx.load(path2, "x", limits=small)) == 3 * small.max_depth
    tx.save(path2, x=_nest("list", 3 * small.max_depth + 1))
    with pytest.raises(tx.LimitError, match="max_depth=4"):
        tx.load(path2, "x", limits=small)


def test_nested_dicts_built_eagerly_stop_at_the_limit(tmp_path: Path) -> None:
    """A Dict node reads its keys when it is made: nesting is bounded there too (not by the stack)."""
    v: object = np.zeros(2)
    for _ in range(20):
        v = {"a": v}  # written as a Julia Dict per level
    path = tmp_path / "dicts.jld2"
    tx.save(path, x=v)
    small = tx.Limits(max_depth=4)
    with tx.open(path, limits=small) as f, pytest.raises(tx.LimitError, match="max_depth=4"):
        f["x"]
    with pytest.raises(tx.LimitError, match="max_depth=4"):
        tx.load(path, "x", limits=small)
    with tx.open(path) as f:
        assert f["x"].kind in ("dict", "namedtuple")


def test_a_chunk_larger_than_its_dataspace_is_charged_whole(tmp_path: Path) -> None:
    """Found by the long fuzz on the merged reader: three bytes of the bzip2 bomb turn its 512 MiB
    array into a 0-d UInt8, whose one stored chunk still decodes to 512 MiB. The budget must count
    the chunk, not the dataspace (before: 1 GiB allocated, no error)."""
    source = HOSTILE / "crafted_L11.jld2"
    if not source.is_file():
        pytest.skip(f"{source} not found (../shared absent)")
    data = bytearray(source.read_bytes())
    for pos, value in ((980, 0), (400, 181), (274, 255)):
        data[pos] = value
    path = tmp_path / "scalar_bomb.jld2"
    path.write_bytes(bytes(data))
    with pytest.raises(tx.LimitError, match="max_decoded_bytes") as info:
        tx.load(path)
    assert info.value.offset is not None
    big = tx.Limits(max_decoded_bytes=1 << 30)
    assert tx.load(path, limits=big)["bomb"].shape == ()


# --- every safety bound is a field of Limits, passed to where it is enforced --------------------------
# Each test crafts input just past a lowered bound (our error, naming the field) and shows the same
# input passing at the default or a raised bound.


def test_zero_size_elements_follow_max_virtual_elements() -> None:
    from _jld2_builder import Builder, space, t_compound, t_vlen

    b = Builder()
    b.link("x", b.dataset(t_vlen(t_compound([])), space("scalar"), b.vlen(b"\x00" * 8, 1000)))
    raw = b.finish()
    assert len(tx.load(raw, "x")) == 1000
    with pytest.raises(tx.LimitError, match="max_virtual_elements") as err:
        tx.load(raw, "x", limits=tx.Limits(max_virtual_elements=999))
    assert err.value.path == ("x",)


@pytest.mark.parametrize("name", ["Base.GMP.BigInt", "Base.BigInt"])
def test_bigints_follow_max_bigint_digits(name: str) -> None:
    from _jld2_builder import Builder, shared, space, t_vlen_string

    b = Builder()
    big = b.commit(t_vlen_string(), b.jt(name), written=b.jt("Core.String"))
    b.link("big", b.dataset(shared(big), space("scalar"), b.vstr("z" * 30)))
    raw = b.finish()
    assert tx.load(raw, "big") == 62**30 - 1
    with pytest.raises(tx.LimitError, match="max_bigint_digits=29") as err:
        tx.load(raw, "big", limits=tx.Limits(max_bigint_digits=29))
    assert err.value.path == ("big",)


def test_bigint_digit_counts_beyond_the_limit_are_limit_errors(tmp_path: Path) -> None:
    # A BigInt stored inline in a struct (the ESN layout: MersenneTwister.adv_jump) one digit over
    # max_bigint_digits, and a top-level one of a million digits: both refused by the length of
    # their text, with the tree path, before any digit is parsed.
    from _jld2_builder import Builder, shared, space, t_vlen_string

    path = tmp_path / "rng.jld2"
    over = tx.BigInt(62**DEFAULT_LIMITS.max_bigint_digits)  # "1" and max_bigint_digits zeros
    rng = tx.JuliaStruct("Random.MersenneTwister", {"seed": np.int64(1), "adv_jump": over}, mutable=True)
    tx.save(path, rng=rng)
    with pytest.raises(tx.LimitError, match="max_bigint_digits") as err:
        tx.load(path)
    assert err.value.path == ("rng", "adv_jump")
    assert tx.load(path, limits=tx.Limits(max_bigint_digits=2400))["rng"]["adv_jump"] == over

    b = Builder()
    big = b.commit(t_vlen_string(), b.jt("Base.GMP.BigInt"), written=b.jt("Core.String"))
    b.link("huge", b.dataset(shared(big), space("scalar"), b.vstr("z" * 1_000_000)))
    raw = b.finish()
    with pytest.raises(tx.LimitError, match="BigInt of 1000000 base-62 digits") as err:
        tx.load(raw, "huge")
    assert err.value.path == ("huge",)
    with tx.open(raw) as f, pytest.raises(tx.LimitError):
        list(iter_records(f))


def test_type_text_follows_max_type_text_depth() -> None:
    def deep(levels: int) -> str:
        return "Main.T{" * levels + "Core.Int64" + "}" * levels

    assert tx.JuliaType.parse(deep(60)).name == "Main.T"
    with pytest.raises(tx.FormatError, match="max_type_text_depth=64"):
        tx.JuliaType.parse(deep(100_000))  # no RecursionError, however deep
    assert tx.JuliaType.parse(deep(100), limits=tx.Limits(max_type_text_depth=128)).name == "Main.T"
    with pytest.raises(tx.FormatError, match="max_type_text_depth=8"):
        tx.JuliaType.parse(deep(10), limits=tx.Limits(max_type_text_depth=8))


def test_schema_documents_follow_max_schema_bytes(tmp_path: Path) -> None:
    doc = tx.infer_schema({"x": np.zeros(3)})
    path = tmp_path / "schema.json"
    path.write_text(doc.to_json(), encoding="utf-8")
    size = path.stat().st_size
    assert tx.load_schema(path, limits=tx.Limits(max_schema_bytes=size)) == doc
    with pytest.raises(tx.FormatError, match="max_schema_bytes"):
        tx.load_schema(path, limits=tx.Limits(max_schema_bytes=size - 1))


def test_embedded_schemas_follow_max_embedded_schema_chars(tmp_path: Path) -> None:
    from treexchange._schema import schema_from_attributes

    path = tmp_path / "embedded.jld2"
    tx.save(path, x=np.zeros(3), schema=True)
    with tx.open(path) as f:
        attrs = dict(f.attrs)
    n = len(attrs["treexchange_schema"])
    assert schema_from_attributes(attrs, limits=tx.Limits(max_embedded_schema_chars=n)) is not None
    with pytest.raises(tx.FormatError, match="max_embedded_schema_chars"):
        schema_from_attributes(attrs, limits=tx.Limits(max_embedded_schema_chars=n - 1))


def test_schema_trees_follow_max_schema_depth(tmp_path: Path) -> None:
    value: object = np.zeros(1)
    for _ in range(70):
        value = (value,)
    path = tmp_path / "deep.jld2"
    tx.save(path, x=value)
    with pytest.raises(tx.LimitError, match="64 levels"):
        tx.infer_schema(path)
    # The limits a file is opened with are the ones its schema walk uses.
    with tx.open(path, limits=tx.Limits(max_schema_depth=80)) as f:
        doc = tx.infer_schema(f)
        assert tx.validate(f, doc) == []
    with (
        tx.open(path, limits=tx.Limits(max_schema_depth=10)) as f,
        pytest.raises(tx.LimitError, match="10 levels"),
    ):
        tx.validate(f, doc)
    text = doc.to_json()
    with pytest.raises(tx.FormatError, match="max_schema_depth=64"):
        tx.load_schema(text)
    assert tx.load_schema(text, limits=tx.Limits(max_schema_depth=80)) == doc


def test_sequence_alignment_follows_max_align_cells(tmp_path: Path) -> None:
    """Aligning n file items with m schema items costs n * m trial validations: past
    ``max_align_cells`` the items are paired by position instead."""
    items = tuple(np.zeros(i + 1) for i in range(30))
    path = tmp_path / "items.jld2"
    tx.save(path, x=items)
    doc = tx.infer_schema({"x": items[:10] + items[11:]})  # the schema lacks the 11th item
    with tx.open(path) as f:
        assert [(m.kind, m.path) for m in tx.validate(f, doc)] == [("extra", ("x", 11))]
    with tx.open(path, limits=tx.Limits(max_align_cells=29 * 30 - 1)) as f:
        positional = tx.validate(f, doc)
    assert len(positional) > 1  # every item after the gap is blamed


def _walked_and_dropped(path: Path) -> tuple[bool, bool]:
    """Open ``path``, walk it, read it, drop the File unclosed: (its reader freed, the recursion
    limit back), asked before any garbage collection."""
    import gc
    import weakref

    before = sys.getrecursionlimit()
    enabled = gc.isenabled()
    gc.disable()
    try:
        f = tx.open(path)
        reader = weakref.ref(f.reader)  # type: ignore[attr-defined]

        def walk(node: object) -> None:
            if hasattr(node, "keys"):
                for key in list(node.keys()):  # type: ignore[attr-defined]
                    walk(node[key])  # type: ignore[index]

        walk(f)
        f.read(mmap=False)
        raised = sys.getrecursionlimit() > before  # (the open File raised it)
        del f
        assert raised
        return reader() is None, sys.getrecursionlimit() == before
    finally:
        if enabled:
            gc.enable()


def test_a_file_dropped_unclosed_is_freed_at_once(tmp_path: Path) -> None:
    """A File dropped without close() frees its reader -- the memory map, the recursion limit
    the open file raised -- when the last reference goes, not at some later garbage collection
    (its type resolver and type session used to hold the reader in a cycle: the limit stayed
    raised until a collection, which could run in the middle of unrelated code)."""
    from conftest import fixture_files

    saved = tmp_path / "tree.jld2"
    tx.save(
        saved,
        {"outer": {"a": np.arange(3.0), "b": {"c": np.ones((2, 2), np.float32)}}, "n": 3, "s": "text"},
    )
    paths = [saved, *[p for p in fixture_files("**/*.jld2") if p.stat().st_size < 1 << 21][:12]]
    for path in paths:
        assert _walked_and_dropped(path) == (True, True), path


def test_the_recursion_limit_is_put_back_when_threads_end_out_of_order() -> None:
    """Two threads raise the limit for their blocks; the one that raised it less ends first. The
    limit used to stay raised for good, and a later deep JSON document could crash the process."""
    import threading

    before = sys.getrecursionlimit()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()

    def first() -> None:
        with stack_for_depth(100):
            first_in.set()
            second_in.wait(10)
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with stack_for_depth(DEFAULT_LIMITS.max_depth):
            assert sys.getrecursionlimit() >= DEFAULT_LIMITS.max_depth * 48
            second_in.set()
            first_out.wait(10)

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert sys.getrecursionlimit() == before


def test_deep_schema_json_is_a_format_error_even_with_a_raised_recursion_limit() -> None:
    """``json.loads`` recurses in C once per level, bounded only by the recursion limit; with the
    limit raised far beyond the C stack a deep document crashed the interpreter. It is measured
    before parsing now. In a child process: a crash must not take the test run down."""
    code = (
        "import sys, treexchange as tx\n"
        "sys.setrecursionlimit(1_000_000)\n"
        "doc = '{\"schema_version\": \"1.0\", \"roots\": {\"x\": ' + '[' * 300_000 + ']' * 300_000 + '}}'\n"
        "try:\n"
        "    tx.load_schema(doc)\n"
        "except tx.FormatError as err:\n"
        "    print('FormatError:', err)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "nested more than" in out.stdout

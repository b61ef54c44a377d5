"""Nesting depth costs work in proportion to the file, never more.

A struct nested n deep holds the descriptions of all its inner levels (HDF5 compounds embed their
members' types whole), and JLD2 writes the parameters of each committed type afresh (a Dict nested
n deep has n copies of its inner levels): such files are quadratic in the depth, for Julia too.
Reading and writing them must stay proportional to the file: these tests count the steps that
used to grow faster (hashing nested datatypes on save, decoding every nested compound again at
each level on load, comparing equal type parameters down to the bottom), at two depths, and
every Python call each operation makes (save, load, a lazy walk, infer_schema, validate, inspect,
convert) at the deep end, for every kind of nest (NamedTuples, Tuples, Vector{Any}, BSON.jl
documents): the calls the levels from 240 to 480 add must be about twice those the levels from
120 to 240 add, not four times (a cache keyed by equality that compares a fresh copy of a nested
type down to the bottom, a type printed again with all the types below it at each level, a path
re-keyed segment by segment in Python at each level). No timing: the counts are what the time
follows. The slow tier holds the Tuple nests and four of the Dict nest's operations (where each
case is, below).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

import numpy as np
import pytest

import treexchange as tx
from treexchange import _inspect, _juliatype
from treexchange._bson._writer import (
    array as bson_array,
    bson_file,
    datatype as bson_datatype,
    struct as bson_struct,
)
from treexchange._hdf5 import _datatype, _file as _hdf5_file
from treexchange._interop import convert_formats
from treexchange._recursion import stack_for_depth
from treexchange._save import convert


def deep_namedtuple(n: int) -> Any:
    x: Any = {"leaf": 1}
    for _ in range(n):
        x = {"k": x}
    return x


def deep_tuple(n: int) -> Any:
    x: Any = (1,)
    for _ in range(n):
        x = (x,)
    return x


def deep_vector(n: int) -> Any:
    x: Any = [1]
    for _ in range(n):
        x = [x]
    return x


def deep_dict(n: int) -> Any:
    x: Any = {1: 1.0}
    for _ in range(n):
        x = {1: x}
    return x


@contextmanager
def counting(owner: Any, name: str) -> Iterator[list[int]]:
    """Count the calls of ``owner.name`` while the block runs."""
    original: Callable[..., Any] = getattr(owner, name)
    calls = [0]

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    setattr(owner, name, counted)
    try:
        yield calls
    finally:
        setattr(owner, name, original)


def _steps(tmp_path: Path, make: Callable[[int], Any], n: int, step: tuple[Any, str], on: str) -> int:
    path = tmp_path / f"deep{n}.jld2"
    value = make(n)
    if on == "save":
        with counting(*step) as calls:
            tx.save(path, model_state=value)
    else:
        tx.save(path, model_state=value)
        with counting(*step) as calls:
            back = tx.load(path, "model_state")
        assert tx.values_equal(back, tx.load(path, "model_state"))
    return calls[0]


@pytest.mark.parametrize(
    ("make", "step", "on", "most"),
    [
        # Load of a nested struct: each level decoded all the levels below it again.
        (deep_namedtuple, (_datatype, "_compound_members"), "load", 2.5),
    ],
    ids=["load-struct-decode"],
)
def test_twice_the_depth_is_not_much_more_than_twice_the_steps(
    tmp_path: Path, make: Callable[[int], Any], step: tuple[Any, str], on: str, most: float
) -> None:
    shallow = _steps(tmp_path, make, 60, step, on)
    deep = _steps(tmp_path, make, 120, step, on)
    assert shallow > 0
    assert deep / shallow < most, (shallow, deep)


def test_a_deep_dict_loads_without_comparing_its_types_to_the_bottom(tmp_path: Path) -> None:
    # A nested Dict's file is quadratic (x4 for twice the depth: JLD2 writes each level's type
    # parameters afresh); comparing its equal type parameters went to the bottom at each level
    # (x8). The reader now interns a type by its parts' identities (_typesread._intern_parts), so
    # a load compares none of them deeply: at most as many comparisons as the shallow nest's twice.
    shallow = _steps(tmp_path, deep_dict, 60, (_juliatype, "_params_equal"), "load")
    deep = _steps(tmp_path, deep_dict, 120, (_juliatype, "_params_equal"), "load")
    assert deep <= 2 * shallow, (shallow, deep)


def test_the_deepest_struct_allowed_round_trips(tmp_path: Path) -> None:
    depth = tx.Limits().max_depth - 4  # the model_state name and the leaf's own levels
    path = tmp_path / "deepest.jld2"
    tx.save(path, model_state=deep_namedtuple(depth))
    back = tx.load(path, "model_state")
    for _ in range(depth):
        back = back["k"]
    assert back["leaf"] == 1


def python_calls(work: Callable[[], Any]) -> int:
    """How many Python function calls ``work()`` makes (C calls not counted)."""
    calls = [0]
    # each measure from the same start: the datatypes another file left in the process-wide memo
    # would make a later (larger) file's calls depend on which ran before it
    _hdf5_file._PROCESS_MEMOS.clear()

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            calls[0] += 1

    sys.setprofile(profile)
    try:
        work()
    finally:
        sys.setprofile(None)
    return calls[0]


def _write_nest(tmp_path: Path, kind: str, n: int) -> Path:
    if kind == "bson":  # BSON.jl documents nested n deep (what a Dict{Symbol,Any} nest is in BSON)
        doc: Any = {"leaf": 1}
        for _ in range(n):
            doc = {"k": doc}
        path = tmp_path / f"bson{n}.bson"
        with stack_for_depth(n):  # (the test writer recurses once per level)
            path.write_bytes(bson_file({"model_state": doc}))
        return path
    path = tmp_path / f"{kind}{n}.jld2"
    tx.save(path, model_state=NESTS[kind](n), fsync=False)
    return path


NESTS: dict[str, Callable[[int], Any]] = {
    "namedtuple": deep_namedtuple,
    "tuple": deep_tuple,
    "vector": deep_vector,
    "dict": deep_dict,
}
Nests = Callable[[str, int], Path]


@pytest.fixture(scope="module")
def nests(tmp_path_factory: pytest.TempPathFactory) -> Nests:
    """``nests(kind, n)``: the file of a nest ``n`` deep, written once for the module's tests. Every
    operation but save reads the same files, and writing the deep ones (a NamedTuple nest 480 deep
    is 2.9 MB: its type descriptions are quadratic in the depth) took most of each test's time."""
    folder = tmp_path_factory.mktemp("nests")
    written: dict[tuple[str, int], Path] = {}

    def nest(kind: str, n: int) -> Path:
        if (kind, n) not in written:
            written[kind, n] = _write_nest(folder, kind, n)
        return written[kind, n]

    return nest


def _operation(op: str, kind: str, n: int, tmp_path: Path, nests: Nests) -> Callable[[], Any]:
    """The work of ``op`` on a nest ``n`` deep (its file written beforehand, outside the count)."""
    if op == "save":
        value = NESTS[kind](n)
        return lambda: tx.save(tmp_path / f"saved{n}.jld2", model_state=value, fsync=False)
    path = nests(kind, n)
    deep = tx.Limits(max_schema_depth=4 * n + 64)  # (a schema describes 64 levels by default)
    schema = tx.infer_schema(tx.open(path, limits=deep)) if op == "validate" else None

    def walk() -> None:
        with tx.open(path) as f:
            for node, _ in _inspect.walk_nodes(f):
                assert node.kind and node.julia_type is not None and node.path is not None

    def infer() -> None:
        with tx.open(path, limits=deep) as f:
            tx.infer_schema(f)

    def validate() -> None:
        with tx.open(path, limits=deep) as f:
            assert tx.validate(f, schema) == []

    def inspect() -> None:
        with tx.open(path) as f:
            list(_inspect.json_lines(f))
            list(_inspect.text_lines(f))

    return {
        "load": lambda: tx.load(path, "model_state"),
        "walk": walk,
        "infer_schema": infer,
        "validate": validate,
        "inspect": inspect,
        "convert": lambda: convert(path, tmp_path / f"converted{n}.jld2", verify=False),
        "safetensors": lambda: _through_safetensors(path, tmp_path / f"converted{n}"),
    }[op]


def _through_safetensors(path: Path, stem: Path) -> None:
    """``path`` converted to safetensors and that back to JLD2 (the tree metadata encoded, dumped
    as JSON, parsed and decoded), as ``treexchange convert`` does."""
    convert_formats(path, stem.with_suffix(".safetensors"), to="safetensors")
    convert_formats(stem.with_suffix(".safetensors"), stem.with_suffix(".jld2"))


OPERATIONS = ["save", "load", "walk", "infer_schema", "validate", "inspect", "convert", "safetensors"]


# every operation on every kind of nest, but no save of a BSON nest (treexchange writes JLD2 only).
# Tuple nests in the slow tier: a Tuple is stored as a NamedTuple is (a struct type whose field
# types nest), so the NamedTuple nests run that code in the default tier, at 1-4 s an operation.
_DEEP_END_CASES = [
    pytest.param(kind, op, id=f"{kind}-{op}", marks=[pytest.mark.slow] if kind == "tuple" else [])
    for kind in ("namedtuple", "tuple", "vector", "bson")
    for op in OPERATIONS
    if not (kind == "bson" and op == "save")
]
# The Dict nest's writer and readers (save, load, a lazy walk, inspect) in the default tier, the
# operations made of them (infer_schema and validate walk, convert loads and saves, safetensors
# loads and encodes) in the slow one, 2-5 s each: the NamedTuple, Vector and BSON nests run those
# four at the deep end in the default tier.
_DICT_SLOW = ("infer_schema", "validate", "convert", "safetensors")


@pytest.mark.parametrize(("kind", "op"), _DEEP_END_CASES)
def test_the_deep_end_adds_calls_in_proportion_to_its_levels(
    tmp_path: Path, nests: Nests, kind: str, op: str
) -> None:
    _operation(op, kind, 8, tmp_path, nests)()  # (first calls: imports and one-time tables, not counted)
    counts = [python_calls(_operation(op, kind, n, tmp_path, nests)) for n in (120, 240, 480)]
    # Linear: the 240 levels from 240 to 480 add twice the calls of the 120 from 120 to 240 (a
    # little more for the reader's bounded memo of nested compounds, 2.4 measured); quadratic
    # work adds four times (3.2 to 3.9 measured before the fix: save, convert, inspect, validate).
    growth = (counts[2] - counts[1]) / (counts[1] - counts[0])
    assert growth < 2.6, counts


@pytest.mark.parametrize(
    "op", [pytest.param(op, marks=[pytest.mark.slow] if op in _DICT_SLOW else []) for op in OPERATIONS]
)
def test_a_deep_dict_costs_calls_in_proportion_to_its_file(tmp_path: Path, nests: Nests, op: str) -> None:
    # A Dict nested n deep is a file quadratic in n (JLD2 writes each level's type parameters
    # afresh, as Julia does): the calls must grow as the file does, no faster.
    _operation(op, "dict", 8, tmp_path, nests)()
    depths = (30, 60, 120)
    counts = [python_calls(_operation(op, "dict", n, tmp_path, nests)) for n in depths]
    sizes = [
        (tmp_path / f"saved{n}.jld2" if op == "save" else nests("dict", n)).stat().st_size for n in depths
    ]
    calls_growth = (counts[2] - counts[1]) / (counts[1] - counts[0])
    size_growth = (sizes[2] - sizes[1]) / (sizes[1] - sizes[0])
    assert calls_growth < 1.15 * size_growth, (counts, sizes)


def test_each_level_of_a_nested_struct_type_is_decoded_once(tmp_path: Path, monkeypatch: Any) -> None:
    # The levels of a nest share one datatype header (one size): the memo of compounds keeps
    # them all and finds each again, so loading decodes every level's members once -- with the
    # 64 most recent kept, every 64th committed level decoded all those below it again.
    n = 300
    path = tmp_path / "deep.jld2"
    tx.save(path, model_state=deep_tuple(n), fsync=False)
    decoded = [0]
    members = _datatype._compound_members

    def counted(*args: Any) -> Any:
        decoded[0] += 1
        return members(*args)

    monkeypatch.setattr(_datatype, "_compound_members", counted)
    _hdf5_file._PROCESS_MEMOS.clear()
    tx.load(path, "model_state")
    assert n <= decoded[0] <= n + 16, decoded


@pytest.mark.parametrize("kind", ["namedtuple", "tuple", "vector", "dict", "bson"])
def test_the_deepest_tree_allowed_goes_through_safetensors_and_back(
    tmp_path: Path, nests: Nests, kind: str
) -> None:
    # The tree metadata's encoder, json.dumps, json.loads and decoder recursed at Python's default
    # limit of 1000 frames: a tree of 300 levels, which tx.save writes and tx.load reads, was a bare
    # RecursionError (four frames a level decoding, three JSON levels a level).
    n = 120 if kind == "dict" else tx.Limits().max_depth - 12  # (a Dict nest's file is quadratic)
    path = nests(kind, n)
    _through_safetensors(path, tmp_path / "back")
    original, back = tx.load(path, "model_state"), tx.load(tmp_path / "back.jld2", "model_state")
    assert tx.values_equal(original, back)


def test_the_deepest_tree_allowed_goes_through_orbax_and_back(tmp_path: Path, nests: Nests) -> None:
    pytest.importorskip("orbax.checkpoint")
    # (orbax, too, recursed through the nested names of the arrays of a deep tree restoring them)
    path = nests("namedtuple", tx.Limits().max_depth - 12)
    convert_formats(path, tmp_path / "deep.orbax", to="orbax")
    convert_formats(tmp_path / "deep.orbax", tmp_path / "back.jld2")
    assert tx.values_equal(tx.load(path, "model_state"), tx.load(tmp_path / "back.jld2", "model_state"))


def test_a_tree_document_deeper_than_a_tree_path_is_a_limit_error() -> None:
    # Decoding, encoding and listing stop at TREE_DEPTH levels with a LimitError naming the
    # place: a damaged or hand-made document, or a Python value, may nest without end.
    from treexchange._interop import _treejson as tj

    node: Any = {"t": "nothing"}
    value: Any = None
    for _ in range(tj.TREE_DEPTH + 1):
        node = {"t": "list", "v": [node]}
        value = [value]
    with pytest.raises(tx.LimitError, match="tree deeper than"):
        tj.decode(node, lambda n, p: None)
    with pytest.raises(tx.LimitError, match="tree deeper than"):
        tj.array_nodes(node)
    with pytest.raises(tx.LimitError, match="tree deeper than"):
        tj.encode(value, lambda a, p: {})


def deep_struct(n: int) -> Any:
    """Structs nested ``n`` deep, each level a type of its own (one type per field, as Julia's)."""
    x: Any = np.ones(3, np.float32)
    for i in range(n):
        x = tx.JuliaStruct(f"Main.S{i}", {"x": x})
    return x


def test_a_struct_nest_as_deep_as_allowed_is_written(tmp_path: Path) -> None:
    # The writer learns every struct's type before writing (prepare: five frames a level), and
    # did so at Python's default limit of 1000 frames: structs nested 200 deep, which a BSON.jl
    # file holds and load reads, were a bare RecursionError from save and convert.
    n = tx.Limits().max_depth - 12
    tx.save(tmp_path / "s.jld2", model_state=deep_struct(n))
    back = tx.load(tmp_path / "s.jld2", "model_state")
    for _ in range(n):
        back = back.fields["x"]
    assert np.array_equal(back, np.ones(3, np.float32))
    x = bson_array("Core.Float32", np.ones(3, np.float32))
    for i in range(n):
        x = bson_struct(bson_datatype(f"Main.S{i}"), x)
    with stack_for_depth(n):  # (the test writer recurses once per level)
        (tmp_path / "s.bson").write_bytes(bson_file({"model_state": x}))
    convert(tmp_path / "s.bson", tmp_path / "from_bson.jld2")  # (verified: read back and compared)

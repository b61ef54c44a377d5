"""read(write(tree)) == tree for hypothesis-generated trees over the whole value model, dtypes
and Julia shapes exact; and libhdf5 (h5py) opens every written file and reads every plain
dataset and every array reached through references back equal."""

from __future__ import annotations

import hashlib
import io
from collections import Counter
from typing import Any

import h5py
import ml_dtypes
import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import treexchange
from treexchange import (
    MISSING,
    Int128,
    JuliaArray,
    JuliaStruct,
    NamedTuple,
    Singleton,
    Symbol,
    UInt128,
    values_equal,
)
from treexchange._jld2._writer import JLD2Writer
from treexchange._jld2._writer_arrays import Compression
from treexchange._nodeproto import walk_leaves

NUMERIC = [
    np.dtype(t)
    for t in (
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
    )
]
ALL_DTYPES = [
    *NUMERIC,
    np.dtype(np.complex64),
    np.dtype(np.complex128),
    np.dtype(bool),
    np.dtype(ml_dtypes.bfloat16),
]

names = st.sampled_from(["σ²", "μ", "ϵ", "weight", "bias", "β", "x1", "layer_1", "θ", "state"])
text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)


@st.composite
def arrays(draw: Any) -> np.ndarray:
    dtype = draw(st.sampled_from(ALL_DTYPES))
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    if dtype == np.dtype(ml_dtypes.bfloat16):
        base = draw(hnp.arrays(np.float32, shape, elements=st.floats(-100, 100, width=32)))
        arr = base.astype(ml_dtypes.bfloat16)
    else:
        arr = draw(hnp.arrays(dtype, shape))
    if draw(st.booleans()) and arr.ndim > 1:
        arr = np.asfortranarray(arr)
    return arr


@st.composite
def scalars(draw: Any) -> Any:
    kind = draw(st.integers(0, 6))
    if kind == 0:
        dtype = draw(st.sampled_from([*NUMERIC, np.dtype(np.complex64), np.dtype(np.complex128)]))
        return dtype.type(draw(hnp.from_dtype(dtype)))  # a numpy scalar of exactly that dtype
    if kind == 1:
        return draw(st.booleans())
    if kind == 2:
        return draw(text.filter(bool)) if draw(st.booleans()) else Symbol(draw(text.filter(bool)))
    if kind == 3:
        return draw(st.sampled_from([None, MISSING, (), Singleton("NNlib.#relu"), Singleton("Main.#f")]))
    if kind == 4:
        return Int128(draw(st.integers(-(2**127), 2**127 - 1)))
    if kind == 5:
        return UInt128(draw(st.integers(0, 2**128 - 1)))
    return ml_dtypes.bfloat16(draw(st.floats(-1000, 1000, width=32)))


def leaves() -> st.SearchStrategy[Any]:
    return st.one_of(
        scalars(),
        arrays(),
        st.lists(text, max_size=3).map(lambda xs: JuliaArray("Core.String", xs)),
        st.lists(text.filter(bool), max_size=3).map(
            lambda xs: JuliaArray("Core.Symbol", [Symbol(x) for x in xs])
        ),
    )


def containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.dictionaries(names, children, max_size=4).map(lambda d: NamedTuple(d)),
        st.lists(children, min_size=1, max_size=4).map(tuple),
        st.lists(children, max_size=4),
        st.dictionaries(names, children, max_size=3),
        st.builds(
            lambda d, u: JuliaStruct(f"Main.Thing{u.hex[:12]}", d),  # one Julia type per struct value
            st.dictionaries(st.sampled_from(["x", "y", "tag"]), children, min_size=1, max_size=3),
            st.uuids(),
        ),
    )


trees = st.recursive(leaves(), containers, max_leaves=12)
top_names = st.lists(
    st.sampled_from(["model_state", "σ", "a", "b/c", "b/d", "ϵ_1"]), min_size=1, max_size=3, unique=True
)


def write_bytes(values: dict[str, Any], compression: Compression | None = None) -> bytes:
    buf = io.BytesIO()
    w = JLD2Writer(buf, compress=compression)
    for k, v in values.items():
        w.write(k, v)
    w.close()
    return buf.getvalue()


def nest(values: dict[str, Any]) -> dict[str, Any]:
    """``"b/c"`` names -> nested dicts, as ``treexchange.load`` returns groups (JLD2 links a
    group after the group's datasets)."""
    out: dict[str, Any] = {k: expected(v) for k, v in values.items() if "/" not in k}
    for k, v in values.items():
        head, _, rest = k.partition("/")
        if rest:
            out.setdefault(head, {})[rest] = expected(v)
    return out


def is_ghost(v: Any) -> bool:
    """Zero-size in Julia: stored as no bytes at all."""
    if v is None or v is MISSING or isinstance(v, Singleton):
        return True
    if isinstance(v, (tuple, NamedTuple)):
        return all(is_ghost(x) for x in (v.values() if isinstance(v, NamedTuple) else v))
    if isinstance(v, JuliaStruct):
        return all(is_ghost(x) for x in v.fields.values())
    return False


def expected(v: Any) -> Any:
    """What the reader returns for ``v``: a struct whose fields are all zero-size is stored as a
    ghost type and comes back as the value model's :class:`Singleton` of that type (JLD2 keeps
    no field values for it; Julia rebuilds it from its type)."""
    if isinstance(v, JuliaStruct):
        if is_ghost(v):
            return Singleton(v.type)
        return JuliaStruct(v.type, {k: expected(x) for k, x in v.fields.items()})
    if isinstance(v, NamedTuple):
        return NamedTuple((k, expected(x)) for k, x in v.items())
    if isinstance(v, tuple):
        return tuple(expected(x) for x in v)
    if isinstance(v, list):
        return [expected(x) for x in v]
    if isinstance(v, dict):
        return {k: expected(x) for k, x in v.items()}
    return v


def numeric_arrays(tree: Any, seen: set[int] | None = None) -> Counter[tuple[Any, ...]]:
    """(HDF5 shape, dtype, sha256 of the column-major bytes) of every real/integer/bool numpy
    array in ``tree`` (each array object once: shared arrays are written once)."""
    seen = set() if seen is None else seen
    out: Counter[tuple[Any, ...]] = Counter()
    if isinstance(tree, np.ndarray):
        if id(tree) not in seen and tree.dtype.kind in "biuf" and tree.dtype != np.dtype(ml_dtypes.bfloat16):
            seen.add(id(tree))
            dtype = np.dtype(np.uint8) if tree.dtype == bool else tree.dtype
            shape = tree.shape[::-1] if tree.ndim else (1,)
            data = np.asfortranarray(tree).astype(dtype).tobytes(order="F")
            out[(shape, dtype.str, hashlib.sha256(data).hexdigest())] += 1
        return out
    items: Any = ()
    if isinstance(tree, (NamedTuple, dict)):
        items = tree.values()
    elif isinstance(tree, (tuple, list)):
        items = tree
    elif isinstance(tree, JuliaStruct):
        items = tree.fields.values()
    for x in items:
        out.update(numeric_arrays(x, seen))
    return out


def h5py_arrays(raw: bytes) -> Counter[tuple[Any, ...]]:
    """The same fingerprints for every numeric array dataset h5py reaches through links and
    object references (JLD2's unnamed datasets)."""
    out: Counter[tuple[Any, ...]] = Counter()
    with h5py.File(io.BytesIO(raw), "r") as f:
        seen: set[int] = set()
        todo: list[Any] = [f[k] for k in f if k != "_types"]
        while todo:
            obj = todo.pop()
            if isinstance(obj, h5py.Group):
                todo.extend(obj[k] for k in obj)
                continue
            addr = h5py.h5o.get_info(obj.id).addr
            if addr in seen or obj.shape is None:
                continue
            seen.add(addr)
            tid = obj.id.get_type()
            if tid.get_class() == h5py.h5t.REFERENCE:
                todo.extend(f[r] for r in np.asarray(obj[()]).ravel() if r)
                continue
            if tid.get_class() == h5py.h5t.COMPOUND:
                todo.extend(f[r] for r in _refs(obj))
                continue
            numeric = tid.get_class() in (h5py.h5t.INTEGER, h5py.h5t.FLOAT, h5py.h5t.BITFIELD)
            if obj.ndim == 0 or not numeric or tid.get_size() > 8:
                continue
            dt = obj.dtype
            data = np.ascontiguousarray(obj[()])
            out[(data.shape, dt.newbyteorder("<").str, hashlib.sha256(data.tobytes()).hexdigest())] += 1
    return out


def _refs(ds: h5py.Dataset) -> list[Any]:
    from _h5walk import _dataset_refs

    return _dataset_refs(ds)


def check_plain_top_level(raw: bytes, values: dict[str, Any]) -> None:
    """Top-level numbers, non-empty strings and real arrays read back equal in h5py."""
    with h5py.File(io.BytesIO(raw), "r") as f:
        for name, v in values.items():
            if isinstance(v, np.generic) and v.dtype in NUMERIC:
                got = f[name][()]
                assert got.dtype == v.dtype and (got == v or (np.isnan(got) and np.isnan(v)))
            elif isinstance(v, str) and not isinstance(v, Symbol) and v:
                assert f[name][()] == v.encode("utf-8")
            elif isinstance(v, np.ndarray) and v.dtype in NUMERIC and v.ndim:
                assert np.array_equal(f[name][()].T, v, equal_nan=v.dtype.kind == "f")


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(top_names, st.data())
def test_roundtrip(names_: list[str], data: Any) -> None:
    values = {name: data.draw(trees, label=name) for name in names_}
    raw = write_bytes(values)
    back = treexchange.load(raw)
    assert values_equal(back, nest(values)), (back, values)
    assert h5py_arrays(raw) == numeric_arrays(values)
    check_plain_top_level(raw, values)
    check_leaves(raw)


def check_leaves(raw: bytes) -> None:
    """``leaves()`` lists what the protocol's walk over ``children()`` lists (the JLD2 walk makes
    layers and Dict values from their bytes: random trees reach its every branch), and each
    array leaf holds the data its node reads."""
    with treexchange.open(raw) as f:
        fast = _listed(f.leaves())
    with treexchange.open(raw) as f:
        assert fast == _listed(walk_leaves(f, 10**6))
        for path, leaf in f.leaves():
            if leaf.kind == "array":
                assert tuple(leaf.path) == path and np.asarray(leaf).shape == leaf.shape


def _listed(pairs: Any) -> list[tuple[Any, ...]]:
    return [(p, n.kind, str(n.julia_type), n.shape, n.dtype, n.object_address) for p, n in pairs]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.dictionaries(st.sampled_from(["a", "w"]), arrays(), min_size=1), st.sampled_from(["deflate", "zstd"])
)
def test_roundtrip_compressed(values: dict[str, np.ndarray], method: str) -> None:
    raw = write_bytes(values, Compression(method, 1, chunk_bytes=24))
    assert values_equal(treexchange.load(raw), values)
    if method == "deflate":
        assert h5py_arrays(raw) == numeric_arrays(values)


def test_shared_array_roundtrip_keeps_identity() -> None:
    w = np.arange(4.0)
    tree = NamedTuple(enc=NamedTuple(w=w), dec=NamedTuple(w=w), both=[w, w])
    back = treexchange.load(write_bytes({"m": tree}), "m")
    assert values_equal(back, tree)
    assert back["enc"]["w"] is back["dec"]["w"] is back["both"][0] is back["both"][1]

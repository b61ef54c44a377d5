"""One node protocol (treexchange._nodeproto): JLD2 nodes and plain-HDF5 nodes answer alike.

Every node class of both readers is an instance of ``LazyNode`` (and both root objects of
``LazyFile``), and the same data, saved once as JLD2 and once as plain HDF5 (h5py), shows the same
kinds, paths, children, shapes, dtypes, slices and values through the protocol.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

import treexchange as tx
from treexchange._nodeproto import CONTAINER_KINDS, LazyFile, LazyNode, is_node

W = np.arange(12.0).reshape(4, 3)  # Julia shape 4×3
B = np.arange(5, dtype=np.int32)


def _walk(node: LazyNode) -> Iterator[LazyNode]:
    yield node
    for _, child in node.children():
        yield from _walk(child)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    d = tmp_path_factory.mktemp("nodeproto")
    jld2 = d / "same.jld2"
    tx.save(jld2, {"w": W, "g/b": B})
    plain = d / "same.h5"
    with h5py.File(plain, "w") as f:
        f["w"] = np.ascontiguousarray(W.T)  # HDF5 dims are Julia's reversed
        f.create_group("g")["b"] = B
    return jld2, plain


@pytest.fixture(scope="module")
def varied(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Files holding every kind of node each reader makes."""
    d = tmp_path_factory.mktemp("nodeproto_varied")
    jld2 = d / "varied.jld2"
    layer = tx.NamedTuple(weight=np.ones((2, 3), np.float32), bias=np.zeros(2, np.float32), σ=())
    tx.save(
        jld2,
        {
            "model_state": tx.NamedTuple(layers=(layer, (), tx.NamedTuple())),
            "g/list": [np.int64(1), "text", tx.Symbol("s"), None, [1.5, 2.5]],
            "d": tx.JuliaDict({"a": 1, "b": np.arange(3.0)}),
            "st": tx.JuliaStruct(tx.JuliaType("Main.Point"), {"x": 1.0, "y": 2.0}),
            "flag": True,
        },
    )
    plain = d / "varied.h5"
    with h5py.File(plain, "w") as f:
        f["big"] = np.arange(12.0).reshape(3, 4)
        f["words"] = np.array([["a", "b", "c"], ["d", "e", "f"]], dtype=h5py.string_dtype())
        f["rec"] = np.array([(1, 2.5)], dtype=[("a", "<i4"), ("b", "<f8")])[0]
        f["scalar"] = np.float32(1.5)
        f.create_group("g/h")["x"] = np.zeros(2)
    return jld2, plain


def test_every_node_class_of_both_readers_is_a_lazy_node(varied: tuple[Path, Path]) -> None:
    jld2, plain = varied
    classes: dict[str, set[str]] = {}
    for path, options in ((jld2, {}), (plain, {"allow_hdf5": True})):
        with tx.open(path, **options) as f:
            assert isinstance(f, LazyFile) and isinstance(f, LazyNode)
            assert f.kind == "group" and f.path == () and f.shape is None and f.dtype is None
            seen = classes.setdefault(path.suffix, set())
            for node in _walk(f):
                assert isinstance(node, LazyNode), type(node)
                assert is_node(node)
                seen.add(type(node).__name__)
    assert {"File", "Group", "ArrayNode", "LeafNode", "CompoundNode", "RefVectorNode"} <= classes[".jld2"]
    assert {"PlainFile", "PlainNode", "ValueNode"} <= classes[".h5"]


def test_values_are_not_nodes() -> None:
    for value in (np.zeros(2), 1.0, "x", None, tx.NamedTuple(a=1), {"kind": "array"}):
        assert not is_node(value)
        assert not isinstance(value, LazyNode)


def _answers(node: LazyNode) -> dict[str, Any]:
    """What the protocol says about a node, in a form two readers can be compared by."""
    out: dict[str, Any] = {
        "kind": node.kind,
        "path": node.path,
        "julia_type": str(node.julia_type),
        "children": sorted(str(seg) for seg, _ in node.children()),  # h5py lists names sorted
    }
    if node.kind == "group":
        out["names"] = sorted(node)
        out["len"] = len(node)
        assert node.shape is None and node.dtype is None
    if node.kind == "array":
        out["shape"] = node.shape
        out["dtype"] = np.dtype(node.dtype).newbyteorder("=")
        out["len"] = len(node)
    return out


def test_jld2_and_plain_hdf5_nodes_answer_alike(files: tuple[Path, Path]) -> None:
    jld2, plain = files
    with tx.open(jld2) as a, tx.open(plain, allow_hdf5=True) as b:
        assert {n.path: _answers(n) for n in _walk(a)} == {n.path: _answers(n) for n in _walk(b)}
        for f in (a, b):
            w = f["w"]
            assert w.shape == (4, 3) and w.dtype == np.float64
            np.testing.assert_array_equal(w[1], W[1])  # slicing in Julia's shape
            np.testing.assert_array_equal(w[:, 2], W[:, 2])
            assert w[3, 2] == W[3, 2]
            np.testing.assert_array_equal(w.read(), W)
            np.testing.assert_array_equal(w.read(order="storage"), W.T)
            own = w.read(mmap=False)  # plain HDF5: read by h5py, always memory of its own
            assert own.flags.owndata or (f is b and own.base is not None and own.base.flags.owndata)
            np.testing.assert_array_equal(own, W)
            group = f["g"]
            assert group.kind == "group" and list(group) == ["b"]
            assert f["g/b"].path == ("g", "b") == group["b"].path
            np.testing.assert_array_equal(group["b"].read(), B)
            everything = f.read()
            assert sorted(everything) == ["g", "w"]
            np.testing.assert_array_equal(everything["g"]["b"], B)
            assert isinstance(f.attrs, dict) and f.limits == tx.Limits()
        # JLD2 containers are objects of their own (shared and cyclic groups are told by address)
        assert isinstance(a["g"].object_address, int)
        assert b["g"].object_address is None


def test_container_nodes_have_children_and_no_array_access(varied: tuple[Path, Path]) -> None:
    jld2, plain = varied
    with tx.open(jld2) as f:
        for node in _walk(f):
            if node.kind in CONTAINER_KINDS:
                assert node.dtype is None
                kids = list(node.children())
                assert len(kids) == len(node)
                assert [child.path for _, child in kids] == [(*node.path, seg) for seg, _ in kids]
            elif node.kind in ("number", "bool"):  # a numpy scalar's answers
                assert node.shape == () and node.dtype == np.asarray(node.read()).dtype, node.path
                assert list(node.children()) == []
            elif node.kind not in ("group", "array"):
                assert node.shape is None and node.dtype is None
                assert list(node.children()) == []
        layer = f["model_state"]["layers"][0]
        assert layer.kind == "namedtuple" and layer["weight"].shape == (2, 3)
        assert list(layer) == ["weight", "bias", "σ"]
    with tx.open(plain, allow_hdf5=True) as f:
        rec = f["rec"]
        assert rec.kind == "namedtuple" and list(rec) == ["a", "b"]
        assert [seg for seg, _ in rec.children()] == ["a", "b"]
        assert rec["b"].read() == 2.5 and rec["b"].path == ("rec", "b")
        words = f["words"]
        assert words.kind == "vector" and words.shape == (3, 2) and len(words) == 6
        assert [child.read() for child in words] == list("abcdef")  # Julia's column-major order


def test_scalars_are_described_alike_by_jld2_bson_and_plain_hdf5(tmp_path: Path) -> None:
    # One rule for every reader (the protocol): a number or a Bool has shape () and its Julia
    # type's numpy dtype (none for an Int128), a string neither; the same values written as JLD2,
    # BSON.jl and plain HDF5 are described the same way, and as the schema describes them.
    from treexchange._bson._writer import array, bson_file, datatype, primitive

    values = {"f32": np.float32(1.5), "f64": 2.5, "i64": np.int64(3), "u8": np.uint8(7), "yes": True}
    values |= {"text": "relu", "w": np.arange(6.0, dtype=np.float32).reshape(2, 3)}
    jld2 = tmp_path / "scalars.jld2"
    tx.save(jld2, values | {"wide": tx.Int128(5)})
    plain = tmp_path / "scalars.h5"
    with h5py.File(plain, "w") as h:
        for name, x in values.items():
            h[name] = np.ascontiguousarray(x.T) if name == "w" else x
    as_bson = values | {  # as BSON.jl writes what BSON has no type of its own for
        "f32": primitive(datatype("Core.Float32"), np.float32(1.5).tobytes()),
        "u8": primitive(datatype("Core.UInt8"), b"\x07"),
        "wide": primitive(datatype("Core.Int128"), (5).to_bytes(16, "little")),
        "w": array("Core.Float32", values["w"]),
    }
    expected = {
        ("f32",): ("number", (), np.dtype(np.float32)),
        ("f64",): ("number", (), np.dtype(np.float64)),
        ("i64",): ("number", (), np.dtype(np.int64)),
        ("u8",): ("number", (), np.dtype(np.uint8)),
        ("yes",): ("bool", (), np.dtype(np.bool_)),
        ("text",): ("string", None, None),
        ("w",): ("array", (2, 3), np.dtype(np.float32)),  # (Julia's shape)
    }
    described = []
    for opened in (
        tx.open(jld2),
        tx.open(plain, allow_hdf5=True),
        tx.open(bson_file(as_bson)),
    ):
        with opened as f:
            got = {p: (n.kind, n.shape, n.dtype) for p, n in f.leaves()}
            described.append(got)
            schema = tx.infer_schema(f)
        assert {p: got[p] for p in expected} == expected
        for p, (kind, _, dtype) in got.items():
            if kind == "number" and dtype is not None:  # the schema's dtype is the node's
                assert schema.roots[p[0]].dtype == dtype.name, p
    assert described[0][("wide",)] == described[2][("wide",)] == ("number", (), None)


def test_the_schema_walks_both_readers_alike(files: tuple[Path, Path]) -> None:
    jld2, plain = files
    doc = tx.infer_schema(jld2, checksums=True)
    with tx.open(plain, allow_hdf5=True) as f:
        assert tx.infer_schema(f, checksums=True).roots == doc.roots
        assert tx.validate(f, doc) == []
        wrong = tx.infer_schema({"w": W[:2], "g": {"b": B}})
        assert [m.path for m in tx.validate(f, wrong)] == [("w",)]

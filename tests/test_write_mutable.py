"""Mutable structs: written as datasets of their own and referenced (JLD2's rule), identity kept
(one Python object is one dataset, and reads back as one object), cycles written and read.

Files are made with our writer and with the independent test builder (tests/_jld2_builder.py,
laid out the way JLD2.jl lays them out); h5py is the independent check of what was written.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from _jld2_builder import Builder, shared, space, t_compound, t_int, t_ref

import treexchange as tx
from treexchange import JuliaArray, JuliaStruct, NamedTuple, values_equal
from treexchange._cli import main
from treexchange._jld2._writer import JLD2Writer


def _params(lr: float = 0.1) -> JuliaStruct:
    return JuliaStruct("Main.Params", {"lr": lr, "n": np.int64(3)}, mutable=True)


def _xoshiro() -> JuliaStruct:
    state = {f"s{i}": np.uint64(0x9E3779B97F4A7C15 * (i + 1) % 2**64) for i in range(5)}
    return JuliaStruct("Random.Xoshiro", state, mutable=True)


def _two_nodes() -> JuliaStruct:
    """A two-node cycle: each node's ``parent`` is the other node."""
    root = JuliaStruct("Main.Node", {"value": np.int64(1), "parent": None}, mutable=True)
    child = JuliaStruct("Main.Node", {"value": np.int64(2), "parent": root}, mutable=True)
    root.fields["parent"] = child
    return root


def _same_object(f: h5py.File, a: h5py.Reference, b: h5py.Reference) -> bool:
    return bool(h5py.h5o.get_info(f[a].id).addr == h5py.h5o.get_info(f[b].id).addr)


def test_shared_mutable_struct_is_one_dataset_and_reads_back_as_one_object(tmp_path: Path) -> None:
    p = _params()
    path = tmp_path / "shared.jld2"
    tx.save(path, a=NamedTuple(x=p, y=p), b=NamedTuple(x=_params(), y=_params()))
    with h5py.File(path, "r") as f:
        shared_refs = f["a"][()]
        distinct_refs = f["b"][()]
        assert f["a"].dtype["x"].kind == "O"  # a reference, not an inline compound
        assert _same_object(f, shared_refs[0], shared_refs[1])
        assert not _same_object(f, distinct_refs[0], distinct_refs[1])
        assert f[shared_refs[0]][()]["lr"] == 0.1
    back = tx.load(path)
    assert back["a"]["x"] is back["a"]["y"]
    assert back["a"]["x"].mutable
    assert back["b"]["x"] is not back["b"]["y"]
    assert values_equal(back["a"], NamedTuple(x=_params(), y=_params()))


def test_immutable_struct_is_inline_and_written_per_occurrence(tmp_path: Path) -> None:
    """The same Python object of an immutable struct type: inline, like JLD2 (no identity)."""
    s = JuliaStruct("Main.Point", {"x": 1.0, "y": 2.0})
    path = tmp_path / "imm.jld2"
    tx.save(path, a=NamedTuple(p=s, q=s))
    with h5py.File(path, "r") as f:
        assert f["a"].dtype["p"].names == ("x", "y")
    back = tx.load(path)
    assert back["a"]["p"] is not back["a"]["q"]
    assert not back["a"]["p"].mutable


def test_cycle_writes_reads_and_rewrites_byte_identically(tmp_path: Path) -> None:
    path = tmp_path / "tree.jld2"
    tx.save(path, tree=_two_nodes(), producer=" (Julia 1.11.6 64-bit LE)")
    with h5py.File(path, "r") as f:
        child_ref = f["tree"][()][1]
        assert _same_object(f, f[child_ref][()][1], f["tree"].ref)  # child.parent is the root
    tree = tx.load(path)["tree"]
    assert tree["parent"]["parent"] is tree
    assert tree["parent"]["value"] == 2 and tree.mutable and tree["parent"].mutable
    assert tree == _two_nodes()  # equality follows the cycle
    assert "JuliaStruct(...)" in repr(tree)
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out), "--keep-producer"]) == 0
    assert out.read_bytes() == path.read_bytes()


def test_self_loop_and_shared_node_in_a_vector(tmp_path: Path) -> None:
    node = JuliaStruct("Main.Node", {"value": np.int64(7), "parent": None}, mutable=True)
    node.fields["parent"] = node
    arr = np.empty(3, dtype=object)
    arr[:] = [node, node, _two_nodes()]
    path = tmp_path / "vec.jld2"
    tx.save(path, nodes=JuliaArray("Main.Node", arr))
    with h5py.File(path, "r") as f:
        refs = f["nodes"][()]
        assert f["nodes"].dtype.kind == "O"
        assert _same_object(f, refs[0], refs[1]) and not _same_object(f, refs[0], refs[2])
    nodes = tx.load(path)["nodes"]
    items = list(nodes.data) if isinstance(nodes, JuliaArray) else list(nodes)
    assert items[0] is items[1] and items[0]["parent"] is items[0]
    assert all(n.mutable for n in items)
    again = tmp_path / "again.jld2"
    tx.save(again, nodes=nodes)
    assert again.read_bytes() == path.read_bytes()


def test_xoshiro_in_a_namedtuple_round_trips_by_reference(tmp_path: Path) -> None:
    path = tmp_path / "rng.jld2"
    tx.save(path, st=NamedTuple(rng=_xoshiro(), step=np.int64(4)), producer=" (Julia 1.11.6 64-bit LE)")
    with h5py.File(path, "r") as f:
        assert f["st"].dtype["rng"].kind == "O"
    st = tx.load(path)["st"]
    assert st["rng"].mutable  # a NamedTuple field declared Xoshiro yet stored by reference
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out), "--keep-producer"]) == 0
    assert out.read_bytes() == path.read_bytes()


def test_mutability_learned_from_a_later_instance(tmp_path: Path) -> None:
    """An unflagged instance first (a top-level dataset), a flagged one later: the type is mutable."""
    path = tmp_path / "late.jld2"
    plain = JuliaStruct("Main.Params", {"lr": 0.5, "n": np.int64(1)})
    tx.save(path, first=plain, later=NamedTuple(p=_params()))
    with h5py.File(path, "r") as f:
        assert f["later"].dtype["p"].kind == "O"


# --- files laid out by the independent builder --------------------------------------------------


def _node_file(*, cycle: bool) -> bytes:
    """``tree``: a ``Main.Node`` whose ``parent`` is a second node whose ``parent`` is the first
    (``cycle``) or an ``Int`` dataset. Built as JLD2 lays it out: compact datasets, the
    reference field a plain reference member (no field_types entry)."""
    b = Builder()
    node_t = b.commit(
        t_compound([("value", t_int(8), 8), ("parent", t_ref(), 8)]),
        b.jt("Main.Node"),
    )

    def node(value: int, parent: int) -> int:
        return b.dataset(shared(node_t), space("scalar"), struct.pack("<qQ", value, parent))

    if cycle:
        # The root's address is the builder's next object; the child is written right after it.
        start = len(b.buf)
        root = node(1, 0)
        size = len(b.buf) - start
        del b.buf[start:]
        assert node(1, root + size) == root
        assert node(2, root) == root + size
    else:
        leaf = b.int_dataset(5)
        root = node(1, node(2, leaf))
    b.link("tree", root)
    return b.finish()


def test_builder_cycle_loads_as_a_cycle_and_writes_back(tmp_path: Path) -> None:
    path = tmp_path / "built.jld2"
    path.write_bytes(_node_file(cycle=True))
    tree = tx.load(path)["tree"]
    child = tree["parent"]
    assert child["parent"] is tree and child["value"] == 2
    assert tree.mutable and child.mutable
    out = tmp_path / "out.jld2"
    assert main(["convert", str(path), str(out)]) == 0  # verified: reads back value-equal
    back = tx.load(out)["tree"]
    assert back["parent"]["parent"] is back and back == tree


def test_builder_chain_without_cycle_reads_unflagged(tmp_path: Path) -> None:
    """A reference field with no declared type and one reader: nothing says mutable."""
    path = tmp_path / "chain.jld2"
    path.write_bytes(_node_file(cycle=False))
    tree = tx.load(path)["tree"]
    assert tree["parent"]["parent"] == 5
    assert not tree.mutable and not tree["parent"].mutable


def test_builder_shared_struct_in_namedtuple(tmp_path: Path) -> None:
    """``a = (x = p, y = p)`` with ``p::Params`` mutable, as JLD2 writes it: one ``Params``
    dataset, two references to it."""
    b = Builder()
    params_t = b.commit(t_compound([("lr", t_int(8), 8)]), b.jt("Main.Params"))
    p = b.dataset(shared(params_t), space("scalar"), struct.pack("<q", 3))
    ptype = b.jt_dataset("Main.Params")
    tup = b.jt_dataset("Core.Tuple", [ptype, ptype])
    names = b.names_tuple(["x", "y"])
    nt_t = b.commit(t_compound([("x", t_ref(), 8), ("y", t_ref(), 8)]), b.jt("Core.NamedTuple", [names, tup]))
    b.link("a", b.dataset(shared(nt_t), space("scalar"), struct.pack("<QQ", p, p)))
    path = tmp_path / "nt.jld2"
    path.write_bytes(b.finish())
    a = tx.load(path)["a"]
    assert a["x"] is a["y"] and a["x"].mutable and a["x"]["lr"] == 3
    out = tmp_path / "out.jld2"
    tx.save(out, a=a)
    with h5py.File(out, "r") as f:
        refs = f["a"][()]
        assert _same_object(f, refs[0], refs[1])


def test_dict_of_mutable_structs_keeps_identity_and_flag(tmp_path: Path) -> None:
    """Graph edge data in a Dict: ``Dict{String,Edge}`` is stored as ``Pair{String,Edge}``
    entries whose ``second`` is a reference; the Pair's type parameters declare ``Edge``."""
    edge = JuliaStruct("Main.Edge", {"weight": 0.5}, mutable=True)
    path = tmp_path / "dict.jld2"
    tx.save(path, g={"a": edge, "b": edge, "c": JuliaStruct("Main.Edge", {"weight": 1.5}, mutable=True)})
    g = tx.load(path)["g"]
    assert g["a"] is g["b"] and g["a"] is not g["c"]
    assert g["c"].mutable  # flagged by its declared type, not by sharing
    again = tmp_path / "again.jld2"
    tx.save(again, g=g)
    assert again.read_bytes() == path.read_bytes()


def test_flag_after_immutable_use_is_refused(tmp_path: Path) -> None:
    """A type already laid out as immutable cannot turn mutable later in the same file."""
    w = JLD2Writer(io.BytesIO())
    w.write("first", NamedTuple(p=JuliaStruct("Main.Params", {"lr": 0.5, "n": np.int64(1)})))
    with pytest.raises(tx.ConversionError, match="mutable"):
        w.write("later", NamedTuple(p=_params()))

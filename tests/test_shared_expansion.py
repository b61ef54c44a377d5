"""A small file that places one immutable value many times over is refused when read.

Readers give a value stored once and referred to from several places (a BSON.jl backref, a JLD2
reference read twice, a ``same`` node of the tree metadata) as one Python object, so loading
is linear. What walks the tree afterwards visits it at every place: a tuple holding the same
tuple twice, forty levels deep, is 2**40 nodes from a 4 KiB file, and ``convert`` of such a
BSON or safetensors file ran until killed (and would have written terabytes). The readers now
add up what the values placed again expand to and refuse past ``Limits.max_nodes``
(``treexchange._expansion``), with the path; mutable values (arrays, lists, Dicts, mutable
structs), written once and referred to after, are not counted, so the sharing real files have
still reads, converts and stays shared.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from _jld2_builder import Builder, shared, space, t_compound, t_ref
from conftest import HOSTILE

import treexchange as tx
from treexchange import LimitError, NamedTuple
from treexchange._bson._writer import array, backref, bson_file, datatype, struct as jl_struct, tuple_
from treexchange._cli import main
from treexchange._expansion import Expansion

DEPTH = 40  # 2**40 places for the bottom value


def _bson_chain(depth: int, kind: str) -> bytes:
    """``x_i = (x_{i-1}, x_{i-1})`` through backrefs (a tuple, or a struct of a new type each level)."""
    refs = [array("Core.Float32", np.arange(2, dtype=np.float32))]
    for i in range(1, depth):
        if kind == "tuple":
            refs.append(tuple_(backref(i), backref(i)))
        else:
            refs.append(jl_struct(datatype(f"Main.S{i}"), backref(i), backref(i)))
    return bson_file({"st": backref(depth)}, refs)


def _safetensors_chain(path: Path, depth: int, tag: str) -> None:
    """A safetensors file whose tree metadata is ``x_i = (x_{i-1}, same x_{i-1})`` (a tuple,
    list or NamedTuple ``(a=x_{i-1}, b=same)``)."""
    tx.save_safetensors(path, {"st": ([np.arange(2, dtype=np.float32)],)})
    raw = path.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8 : 8 + n])
    doc = json.loads(header["__metadata__"]["treexchange"])
    node = doc["roots"][0][1]["v"][0]["v"][0]  # (the array's node)
    for i in range(depth):
        parts = [node, {"t": "same", "k": i - 1}] if i else [node]
        if tag == "nt":
            node = {"t": "nt", "f": [[name, part] for name, part in zip("ab", parts)], "k": i}
        else:
            node = {"t": tag, "v": parts, "k": i}
    doc["version"] = 2
    doc["roots"] = [["st", node]]
    header["__metadata__"]["treexchange"] = json.dumps(doc)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + raw[8 + n :])


def test_the_size_of_a_value_placed_again_counts_each_distinct_object_once() -> None:
    x: object = (np.zeros(1),)
    for _ in range(60):
        x = (x, x)
    budget = Expansion(10**6)
    assert budget.size(x) == 3 * 2**60 - 1  # (sized in 61 steps, not 2**60)
    shared_list = [np.zeros(1)] * 3
    budget.again(shared_list, ("l",))  # a mutable value placed again is one reference
    budget.again(NamedTuple(a=np.zeros(1), b=shared_list), ("n",))
    assert budget.total == 3
    with pytest.raises(LimitError, match="more than 1000000 nodes") as info:
        budget.again(x, ("p", 1))
    assert info.value.path == ("p", 1)


def test_a_bson_file_of_tuples_shared_over_and_over_is_refused_not_expanded(tmp_path: Path) -> None:
    source = tmp_path / "chain.bson"
    source.write_bytes(_bson_chain(DEPTH, "tuple"))
    assert source.stat().st_size < 5000
    with pytest.raises(LimitError, match="shared many times over") as info:
        tx.load(source)
    assert info.value.path[0] == "st" and info.value.offset is not None
    for target in ("out.jld2", "out.safetensors"):
        assert main(["convert", str(source), str(tmp_path / target)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.bson"]  # nothing left behind
    # a few levels of the same still read, convert and verify (2**12 places)
    small = tmp_path / "small.bson"
    small.write_bytes(_bson_chain(12, "tuple"))
    value = tx.load(small)["st"]
    assert value[0] is value[1]
    assert main(["convert", str(small), str(tmp_path / "small.jld2")]) == 0


def test_a_bson_file_of_structs_shared_over_and_over_still_converts(tmp_path: Path) -> None:
    # Structs reached through a backref are written once and referred to (JLD2.jl's way for a
    # struct Julia shares, which only a mutable one can be): no expansion, nothing refused.
    source = tmp_path / "structs.bson"
    source.write_bytes(_bson_chain(DEPTH, "struct"))
    value = tx.load(source)["st"]
    assert value.fields["1"] is value.fields["2"]
    assert main(["convert", str(source), str(tmp_path / "structs.jld2")]) == 0


@pytest.mark.parametrize("tag", ["tuple", "nt"])
def test_safetensors_metadata_placing_an_immutable_many_times_is_refused(tmp_path: Path, tag: str) -> None:
    source = tmp_path / "chain.safetensors"
    _safetensors_chain(source, DEPTH, tag)
    with pytest.raises(LimitError, match="shared many times over") as info:
        tx.load_safetensors(source)
    assert info.value.path[0] == "st"
    assert main(["convert", str(source), str(tmp_path / "out.jld2")]) == 2
    assert not (tmp_path / "out.jld2").exists()


def test_safetensors_metadata_sharing_a_list_over_and_over_still_reads(tmp_path: Path) -> None:
    source = tmp_path / "lists.safetensors"
    _safetensors_chain(source, DEPTH, "list")
    value = tx.load_safetensors(source)["st"]
    assert value[0] is value[1]
    assert main(["convert", str(source), str(tmp_path / "lists.jld2")]) == 0
    back = tx.load(tmp_path / "lists.jld2")["st"]
    assert back[0] is back[1]


def test_a_jld2_dataset_referenced_twice_counts_at_both_places(tmp_path: Path) -> None:
    # JLD2.jl writes an immutable value again at every place; a file whose two references name
    # one tuple dataset (patched here) reads as one object, and what it expands to counts.
    path = tmp_path / "v.jld2"
    tx.save(path, v=[tuple(np.full(2, i, np.float32) for i in range(6)) for _ in range(2)])
    with h5py.File(path, "r") as f:
        at = f["v"].id.get_offset()
    raw = bytearray(path.read_bytes())
    raw[at + 8 : at + 16] = raw[at : at + 8]  # the second element refers to the first's tuple
    path.write_bytes(bytes(raw))
    value = tx.load(path)["v"]
    assert value[0] is value[1]
    with pytest.raises(LimitError, match="more than 5 nodes") as info:
        tx.load(path, limits=tx.Limits(max_nodes=5))  # (the tuple and its six arrays: 7)
    assert info.value.path == ("v", 2)


def _jld2_namedtuple_chain(depth: int) -> bytes:
    """``x_i = (a=x_{i-1}, b=x_{i-1})`` of type ``NamedTuple{(:a, :b), Tuple{Any, Any}}``: both
    fields references to the one dataset below (the builder's raw bytes, as no writer makes it)."""
    b = Builder()
    any_type = b.jt_dataset("Core.Any")
    members = [("a", t_ref(), 8), ("b", t_ref(), 8)]
    fields = b.commit(t_compound(members), b.jt("Core.Tuple", [any_type, any_type]))
    nt = b.commit(t_compound(members), b.jt("Core.NamedTuple", [b.names_tuple(["a", "b"]), fields]))
    below = b.array(np.arange(2, dtype=np.float32))
    for _ in range(depth):
        below = b.dataset(shared(nt), space("scalar"), struct.pack("<QQ", below, below))
    b.link("x", below)
    return b.finish()


def test_a_jld2_namedtuple_chain_is_refused_by_load_and_by_the_lazy_convert(tmp_path: Path) -> None:
    source = tmp_path / "chain.jld2"
    source.write_bytes(_jld2_namedtuple_chain(DEPTH))
    with pytest.raises(LimitError, match="shared many times over") as info:
        tx.load(source)
    assert info.value.path[0] == "x" and info.value.offset is not None
    # convert to the tree formats walks the file lazily (treexchange._interop._source): refused too
    for target in ("out.jld2", "out.safetensors", "out.orbax"):
        assert main(["convert", str(source), str(tmp_path / target)]) == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chain.jld2"]
    with tx.open(source) as f:  # listed once per object, as before
        assert len(list(f.leaves())) == 2
    small = tmp_path / "small.jld2"
    small.write_bytes(_jld2_namedtuple_chain(3))
    value = tx.load(small)["x"]
    assert value["a"] is value["b"]
    assert main(["convert", str(small), str(tmp_path / "small.safetensors")]) == 0
    assert tx.values_equal(tx.load_safetensors(tmp_path / "small.safetensors")["x"], value)


def _jld2_group_chain(depth: int) -> bytes:
    """HDF5 groups ``g_i`` whose links ``a`` and ``b`` both name ``g_{i-1}`` (legal HDF5)."""
    b = Builder()
    below = b.array(np.arange(2, dtype=np.float32))
    for _ in range(depth):
        below = b.group([("a", below), ("b", below)])
    b.link("x", below)
    return b.finish()


def test_a_dag_of_groups_converts_to_the_tree_formats_once_per_group(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # convert's lazy walk made a Group per link (2**40 of them, never ending); now one per
    # HDF5 group, written once (a same node). JLD2 writes a tree of groups: back to JLD2, and
    # from the JLD2 file straight, it is refused with the names of the two places.
    source = tmp_path / "groups.jld2"
    source.write_bytes(_jld2_group_chain(DEPTH))
    target = tmp_path / "groups.safetensors"
    assert main(["convert", str(source), str(target)]) == 0
    x = tx.load_safetensors(target)["x"]
    assert x["a"] is x["b"] and x["a"]["a"] is x["a"]["b"]
    for src in (source, target):
        assert main(["convert", str(src), str(tmp_path / "back.jld2")]) == 2
        assert "is the same" in capsys.readouterr().err
    assert not (tmp_path / "back.jld2").exists()


def test_a_hard_link_cycle_to_the_tree_formats_is_refused_not_a_recursion_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the root link 'a' names the root group itself (tests/hostile/README.md): convert to
    # safetensors raised a bare RecursionError
    source = HOSTILE / "linkcycle_shared_demo.jld2"
    for target in ("cycle.safetensors", "cycle.orbax"):
        assert main(["convert", str(source), str(tmp_path / target)]) == 2
        assert "hard link cycle" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []

"""The shortcuts of a lazy walk give the same answers as the careful paths, and keep few objects.

Opening a model of many arrays rebuilds object headers that differ only in their data address
from the first one parsed (``_hdf5._headermemo``), keeps one object per dataset (the reader's
``DatasetInfo`` *is* the object header), and builds nodes that the cyclic garbage collector has
little to scan. These tests hold the memo to plain parsing (h5py files, the Julia fixtures,
hostile variants), and count what a walk leaves alive.
"""

from __future__ import annotations

import gc
import io
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import all_fixtures_or_skip, fixture_files, fixture_ids

import treexchange as tx
from treexchange import NamedTuple
from treexchange._hdf5 import HDF5File
from treexchange._hdf5._objectheader import ObjectHeader
from treexchange._inspect import walk_nodes
from treexchange._jld2._reader import DatasetInfo, Reader
from treexchange._reader import File


def _views(obj: ObjectHeader) -> tuple[Any, ...]:
    """Everything an object header tells (messages and decoded views), comparable."""
    return (
        obj.version,
        obj.kind,
        obj.messages,
        obj.datatype,
        obj.dataspace,
        obj.layout,
        obj.filters,
        obj.fill_value,
        {k: (a.type, a.space, a.data_offset, bytes(a.data)) for k, a in obj.attributes.items()},
    )


def _all_objects(h5: HDF5File) -> list[int]:
    """Addresses of every object reachable through groups and object references of datasets."""
    seen: list[int] = []
    todo = [h5.root_address]
    while todo:
        a = todo.pop()
        if a in seen:
            continue
        seen.append(a)
        obj = h5.object(a)
        if obj.kind == "group":
            todo.extend(obj.links().values())
        elif obj.kind == "dataset" and obj.datatype is not None and obj.datatype.cls == 7:
            n = obj.dataspace.count if obj.dataspace else 0
            raw = h5.raw_data(obj)
            todo.extend(int(x) for x in np.frombuffer(bytes(raw[: 8 * n]), "<u8") if x)
    return seen


def _jld2_objects(source: bytes | Path) -> list[int]:
    """Addresses of every object a full lazy walk of a JLD2 file parses ([] if not JLD2)."""
    try:
        with File(source) as f:
            for _ in walk_nodes(f):
                pass
            # made, or only known alike to a header made (Reader.describe)
            return list(f.reader.h5.headers_read())
    except tx.TreexchangeError:
        return []


def _same_as_parsing(source: bytes | Path) -> int:
    """Parse every object with and without the memo; return how many came from the memo."""
    with HDF5File(source) as memo, HDF5File(source) as plain:
        plain._headers = None
        addresses = _all_objects(plain) + _jld2_objects(source)
        for a in addresses:
            assert _views(memo.object(a)) == _views(plain.object(a)), a
        assert memo._headers is not None
        return memo._headers.hits


def _description(info: DatasetInfo) -> tuple[Any, ...]:
    plan = info.plan  # (plans are made per reader: compared by what they decode)
    return (
        info.kind,
        info.value_kind,
        None if plan is None else (type(plan), plan.julia_type, plan.size, plan.dtype),
        info.space,
        info.shape,
        info.eltype,
        info.julia_type,
        info.memory,
        info.count,
        info.dtype,
    )


@pytest.mark.parametrize("path", all_fixtures_or_skip(), ids=fixture_ids(fixture_files()) or None)
def test_descriptions_agree_with_parsing_fixtures(path: Path) -> None:
    """What a walk learns of each dataset from a header alike to it (``Reader.describe``, a
    copied description) is what describing its own parsed header gives."""
    addresses = _jld2_objects(path)
    try:
        memo, plain = Reader(path), Reader(path)
    except tx.TreexchangeError:
        return
    try:
        plain.h5._headers = None
        for a in addresses:
            try:
                want = _description(plain.info(a))
            except tx.TreexchangeError as err:
                with pytest.raises(type(err)):
                    memo.describe(a)
                continue
            got = memo.describe(a)
            assert _description(got) == want, a
    finally:
        memo.close()
        plain.close()


def test_memo_agrees_with_parsing_h5py() -> None:
    """Many alike datasets (hits), and some that differ in shape, type, attributes or layout."""
    bio = io.BytesIO()
    with h5py.File(bio, "w", libver="latest") as f:
        for i in range(20):
            f.create_dataset(f"a{i}", data=np.full((3, 4), i, "<f4"))
        for i in range(5):
            f.create_dataset(f"b{i}", data=np.arange(i + 1, dtype="<i8"))
        f.create_dataset("c", data=np.zeros(4, "<f4"), chunks=(2,))
        d = f.create_dataset("d", data=np.zeros((3, 4), "<f4"))
        d.attrs["x"] = 1
        f.create_dataset("e", data=np.zeros(2, "<f4"), compression="gzip")
    hits = _same_as_parsing(bio.getvalue())
    assert hits >= 19  # all a* but the first


def test_memo_hits_on_a_flux_state(tmp_path: Path) -> None:
    """A Flux-like state written by treexchange: all but the first of each kind of header is
    rebuilt, and reads through rebuilt headers give the arrays written."""
    path = tmp_path / "layers.jld2"
    rng = np.random.default_rng(0)
    layers = tuple(
        NamedTuple(
            weight=rng.standard_normal((3, 2)).astype(np.float32), bias=np.full(3, i, np.float32), σ=()
        )
        for i in range(50)
    )
    tx.save(path, model_state=NamedTuple(layers=layers))
    assert _same_as_parsing(path) >= 3 * 50 - 10
    back = tx.load(path)["model_state"]["layers"]
    for got, want in zip(back, layers):
        np.testing.assert_array_equal(got["weight"], want["weight"])
        np.testing.assert_array_equal(got["bias"], want["bias"])


@pytest.mark.parametrize("path", all_fixtures_or_skip(), ids=fixture_ids(fixture_files()) or None)
def test_memo_agrees_with_parsing_fixtures(path: Path) -> None:
    _same_as_parsing(path)


def _two_alike_headers() -> tuple[bytearray, int, int]:
    bio = io.BytesIO()
    with h5py.File(bio, "w", libver="latest") as f:
        f.create_dataset("a", data=np.zeros(4, "<f4"))
        f.create_dataset("b", data=np.ones(4, "<f4"))
    raw = bytearray(bio.getvalue())
    with HDF5File(bytes(raw)) as h5:
        links = h5.root.links()
        return raw, links["a"], links["b"]


def test_memo_keeps_bounds_checks() -> None:
    """A rebuilt header's layout is decoded from its own bytes: a data address that runs past
    the end of the file is refused as it is without the memo."""
    raw, a, b = _two_alike_headers()
    with HDF5File(bytes(raw)) as h5:
        obj_b = h5.object(b)
        layout_at = obj_b.find(8).offset  # type: ignore[union-attr]
    raw[layout_at + 2 : layout_at + 10] = (len(raw) - 4).to_bytes(8, "little")
    with HDF5File(bytes(raw)) as h5:
        h5.object(a)
        obj = h5.object(b)
        assert h5._headers is not None and h5._headers.hits == 1
        with pytest.raises(tx.FormatError):
            h5.raw_data(obj)


def test_memo_misses_when_other_bytes_differ() -> None:
    """A header alike but for a byte outside the layout body (here the dataspace) is parsed."""
    raw, a, b = _two_alike_headers()
    with HDF5File(bytes(raw)) as h5:
        space_at = h5.object(b).find(1).offset  # type: ignore[union-attr]
    raw[space_at + 4] = 3  # dims[0]: 4 -> 3
    with HDF5File(bytes(raw)) as h5:
        h5.object(a)
        obj = h5.object(b)
        assert h5._headers is not None and h5._headers.hits == 0
        assert obj.dataspace is not None and obj.dataspace.dims == (3,)


def test_no_memo_when_verifying_checksums() -> None:
    raw, _, b = _two_alike_headers()
    with HDF5File(bytes(raw), verify_checksums=True) as h5:
        assert h5._headers is None
        assert h5.object(b).dataspace.dims == (4,)  # type: ignore[union-attr]


def test_reader_describes_each_header_once(tmp_path: Path) -> None:
    """The reader's description lives on the object header itself, one per dataset."""
    path = tmp_path / "s.jld2"
    tx.save(path, x=np.zeros((2, 3), np.float32), y=[np.zeros(2, np.float64)])
    reader = Reader(path)
    try:
        info = reader.info(reader.links(reader.root_address)["x"])
        assert isinstance(info, DatasetInfo) and info.obj is info
        assert info.shape == (2, 3) and info.dtype == np.dtype("<f4") and info.value_kind == "array"
        assert reader.h5.object(info.address) is info
        assert reader.info(info.address) is info
    finally:
        reader.close()
    with pytest.raises(ValueError, match="closed"):
        reader.info(info.address)


@pytest.mark.slow  # ~20 s: a large tree walked while counting tracked objects
def test_walk_keeps_few_tracked_objects(tmp_path: Path) -> None:
    """What a walk of N layers leaves for the cyclic garbage collector: about five objects per
    layer (four nodes, a child cache) and no object header -- the walk learns what the layers
    and arrays are from a header alike to theirs (``Reader.describe``), so it needs none of
    their own -- not the twenty-odd of a header, a description, a source and a view per
    dataset. Every extra one is scanned by each full collection during a walk of a large model."""

    def grown(n: int) -> int:
        path = tmp_path / f"layers{n}.jld2"
        layers = tuple(
            NamedTuple(weight=np.zeros((2, 2), np.float32), bias=np.zeros(2, np.float32), σ=())
            for _ in range(n)
        )
        tx.save(path, model_state=NamedTuple(layers=layers))
        gc.collect()
        before = len(gc.get_objects())
        with File(path) as f:
            assert sum(1 for _ in walk_nodes(f)) == 4 * n + 3
            gc.collect()
            return len(gc.get_objects()) - before

    per_layer = (grown(400) - grown(100)) / 300
    assert per_layer < 6, per_layer


def test_inferred_nodes_share_a_complete_fields_set() -> None:
    """Schema nodes made by inference share one fields set per class that holds every field:
    assigning a field leaves it unchanged (no leak between nodes), copies get their own."""
    doc = tx.infer_schema({"m": NamedTuple(a=np.zeros(2, np.float32), b=np.zeros(3, np.float32))})
    a, b = (f.node for f in doc.roots["m"].fields)  # type: ignore[union-attr]
    assert a.model_fields_set == set(type(a).model_fields)
    before = set(b.model_fields_set)
    a.sha256 = "00" * 32  # type: ignore[union-attr]
    assert b.model_fields_set == before and b.sha256 is None  # type: ignore[union-attr]
    c = a.model_copy(update={"description": "x"})
    assert c.model_fields_set is not a.model_fields_set
    assert tx.load_schema(doc.to_json()) == doc


def test_array_nodes_are_made_when_asked_and_not_kept(tmp_path: Path) -> None:
    """An array child is not kept by its parent (so a walk of many arrays leaves nothing per
    array for the collector): asked twice it is two nodes of the same array, and once dropped
    it is gone. Containers are made once and kept; a vector of references checks its elements'
    headers once, on the first element looked at, even when every element is an array."""
    path = tmp_path / "a.jld2"
    layers = tuple(NamedTuple(w=np.full((2, 3), i, np.float32), b=np.arange(2.0) + i) for i in range(40))
    arrays = [np.full(3, i, np.float32) for i in range(40)]
    tx.save(path, st=NamedTuple(layers=layers, d=tx.JuliaDict(a=arrays[0], b=arrays[1]), v=arrays))
    with File(path) as f:
        st = f["st"]
        assert st["layers"] is st["layers"] and st["layers"][3] is st["layers"][3]
        for parent, key in ((st["layers"][3], "w"), (st["d"], "a"), (st["v"], 5)):
            one, two = parent[key], parent[key]
            assert one is not two and one.kind == two.kind == "array"
            assert (one.path, one.object_address, one.shape, one.dtype) == (
                two.path,
                two.object_address,
                two.shape,
                two.dtype,
            )
            assert np.array_equal(np.asarray(one), np.asarray(two))
            gc.collect()
            alive = sum(1 for o in gc.get_objects() if type(o).__name__ == "ArrayNode")
            del one, two
            assert sum(1 for o in gc.get_objects() if type(o).__name__ == "ArrayNode") == alive - 2
        v = st["v"]
        assert [tuple(c.shape) for _, c in v.children()] == [(3,)] * 40
        assert np.array_equal(np.asarray(v[39]), arrays[39]) and np.array_equal(v[-1][0:2], arrays[39][:2])
        assert v._primed  # set by the first element, not by a kept child

"""The HDF5 reader on every Julia-written fixture, with h5py as the independent oracle.

For each fixture we walk every object reachable from the root (links) and from object references
found anywhere in dataset or attribute data (including vlen sequences of references in the global
heap, which h5py cannot read). Every object must parse completely. Wherever h5py can open the same
object, link names, dataspace dims, attribute names and raw bytes of numeric data must agree.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import (
    DENSE_FLUX_STATE,
    all_fixtures_or_skip,
    fixture_files,
    fixture_ids,
    present_cases,
    require_fixture,
    require_one_of,
    require_one_of_table,
)

from treexchange._hdf5 import H5Class, H5Type, HDF5File, ObjectHeader
from treexchange._hdf5._messages import SYMBOL_TABLE

FIXTURES = all_fixtures_or_skip()
IDS = fixture_ids(fixture_files()) or None


def _refs_in(h5: HDF5File, t: H5Type, data: bytes | memoryview, count: int, depth: int = 0) -> list[int]:
    """Relative addresses of every non-NULL object reference inside ``count`` elements of type t."""
    out: list[int] = []
    raw = bytes(data)
    if t.cls == H5Class.REFERENCE and t.ref_type == 0:
        for i in range(count):
            addr = int.from_bytes(raw[i * t.size : i * t.size + h5.offset_size], "little")
            if addr:
                out.append(addr)
    elif t.cls == H5Class.COMPOUND:
        for i in range(count):
            elem = raw[i * t.size : (i + 1) * t.size]
            for mem in t.members:
                out += _refs_in(h5, mem.type, elem[mem.offset : mem.offset + mem.type.size], 1, depth + 1)
    elif t.cls == H5Class.ARRAY and t.base is not None:
        n = int(np.prod(t.dims))
        for i in range(count):
            out += _refs_in(h5, t.base, raw[i * t.size : (i + 1) * t.size], n, depth + 1)
    elif t.cls == H5Class.VLEN and not t.is_vlen_string and t.base is not None:
        for i in range(count):
            elem = raw[i * t.size : (i + 1) * t.size]
            n = int.from_bytes(elem[:4], "little")
            body = h5.read_vlen(elem)
            assert len(body) == n * t.base.size
            out += _refs_in(h5, t.base, body, n, depth + 1)
    return out


def _check_vlen_strings(h5: HDF5File, t: H5Type, data: bytes | memoryview, count: int) -> None:
    """Every vlen string element resolves in the global heap to exactly its declared length."""
    raw = bytes(data)
    if t.is_vlen_string:
        for i in range(count):
            elem = raw[i * t.size : (i + 1) * t.size]
            assert len(h5.read_vlen(elem)) == int.from_bytes(elem[:4], "little")
    elif t.cls == H5Class.COMPOUND:
        for i in range(count):
            elem = raw[i * t.size : (i + 1) * t.size]
            for mem in t.members:
                _check_vlen_strings(h5, mem.type, elem[mem.offset : mem.offset + mem.type.size], 1)


def _walk(h5: HDF5File) -> dict[int, ObjectHeader]:
    """Every object reachable from the root by links and object references, fully parsed."""
    seen: dict[int, ObjectHeader] = {}
    todo = [h5.root_address]
    while todo:
        addr = todo.pop()
        if addr in seen:
            continue
        obj = h5.object(addr)
        seen[addr] = obj
        assert obj.kind in ("group", "dataset", "datatype")
        if obj.kind == "group":
            todo += obj.links().values()
        if obj.datatype is not None and obj.datatype.committed_at is not None:
            todo.append(obj.datatype.committed_at)
        for attr in obj.attributes.values():
            assert len(attr.data) == attr.space.count * attr.type.size
            assert bytes(h5.buffer[attr.data_offset : attr.data_offset + len(attr.data)]) == bytes(attr.data)
            if attr.type.committed_at is not None:
                todo.append(attr.type.committed_at)
            todo += _refs_in(h5, attr.type, attr.data, attr.space.count)
            _check_vlen_strings(h5, attr.type, attr.data, attr.space.count)
        if obj.kind == "dataset":
            assert obj.dataspace is not None and obj.datatype is not None and obj.layout is not None
            raw = h5.raw_data(obj)
            assert len(raw) == obj.dataspace.count * obj.datatype.size
            todo += _refs_in(h5, obj.datatype, raw, obj.dataspace.count)
            _check_vlen_strings(h5, obj.datatype, raw, obj.dataspace.count)
    return seen


def _h5py_objects(f: h5py.File) -> dict[int, object]:
    """Objects h5py can reach (links + readable reference data), keyed by relative address."""
    found: dict[int, object] = {}
    todo: list[object] = [f]
    while todo:
        obj = todo.pop()
        try:
            addr = h5py.h5o.get_info(obj.id).addr  # type: ignore[attr-defined]
        except Exception:
            continue
        if addr in found:
            continue
        found[addr] = obj
        if isinstance(obj, h5py.Group):
            for name in obj:
                try:
                    todo.append(obj[name])
                except Exception:
                    pass  # e.g. version-0 datatype messages libhdf5 refuses
        if isinstance(obj, h5py.Dataset) and obj.shape is not None:
            try:
                value = obj[()]
            except Exception:
                continue
            todo += [f[r] for r in _h5py_refs(value)]
    return found


def _h5py_refs(value: object) -> list[h5py.Reference]:
    out = []
    arr = np.asarray(value)
    if arr.dtype.fields:
        for name in arr.dtype.names or ():
            out += _h5py_refs(arr[name])
    elif arr.dtype == object:
        for v in arr.reshape(-1):
            if isinstance(v, h5py.Reference) and v:
                out.append(v)
    return out


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_fixture_walk_matches_h5py(path: Path) -> None:
    with HDF5File(path) as h5:
        assert h5.superblock_version in (0, 2)
        ours = _walk(h5)
        with h5py.File(path, "r") as f:
            assert h5.userblock == (b"" if f.userblock_size == 0 else bytes(h5.buffer[: f.userblock_size]))
            theirs = _h5py_objects(f)
            missing = set(theirs) - set(ours)
            assert not missing, f"h5py reaches objects we do not: {sorted(missing)}"
            for addr, hobj in theirs.items():
                _compare(h5, ours[addr], hobj)


def _compare(h5: HDF5File, obj: ObjectHeader, hobj: object) -> None:
    assert sorted(obj.attributes) == sorted(hobj.attrs.keys())  # type: ignore[attr-defined]
    if isinstance(hobj, h5py.Group):
        assert obj.kind == "group"
        assert sorted(obj.links()) == sorted(hobj.keys())
        return
    if isinstance(hobj, h5py.Datatype):
        assert obj.kind == "datatype"
        assert obj.datatype is not None
        if not _has_vlen(obj.datatype):  # libhdf5 reports vlen types at their in-memory size
            assert obj.datatype.size == hobj.id.get_size()
        return
    assert isinstance(hobj, h5py.Dataset) and obj.kind == "dataset"
    space = obj.dataspace
    assert space is not None
    if hobj.shape is None:
        assert space.kind == "null" and h5.raw_data(obj) == b""
        return
    assert space.dims == hobj.shape
    dtype = obj.datatype
    assert dtype is not None
    if not _has_vlen(dtype):
        assert dtype.size == hobj.id.get_type().get_size()
    if dtype.numpy_dtype() is not None or _numeric_compound(dtype):
        expected = np.ascontiguousarray(hobj[()]).tobytes()
        assert bytes(h5.raw_data(obj)) == expected


def _has_vlen(t: H5Type) -> bool:
    if t.cls == H5Class.VLEN:
        return True
    return any(_has_vlen(m.type) for m in t.members) or (t.base is not None and _has_vlen(t.base))


def _numeric_compound(t: H5Type) -> bool:
    return t.cls == H5Class.COMPOUND and all(
        m.type.numpy_dtype() is not None or _numeric_compound(m.type) for m in t.members
    )


def test_flux_state_arrays_are_zero_copy() -> None:
    """Arrays reached through references are views into the memory map, not copies."""
    # The first Dense weight of each file: its HDF5 dims (Julia's reversed) and bytes (Float32).
    first_weights = {DENSE_FLUX_STATE[0]: ((1, 16), 64), DENSE_FLUX_STATE[1]: ((3, 64), 768)}
    path, (dims, nbytes) = require_one_of_table(first_weights)
    with HDF5File(path) as h5:
        objs = _walk(h5)
        arrays = [o for o in objs.values() if o.kind == "dataset" and o.dataspace and o.dataspace.dims]
        weights = [o for o in arrays if o.dataspace.dims == dims]
        assert weights, f"expected the first Dense weight (HDF5 dims {dims})"
        w = weights[0]
        view = h5.raw_data(w)
        assert isinstance(view, memoryview) and view.obj is h5.buffer.obj
        off, n = h5.raw_location(w)  # type: ignore[misc]
        assert n == nbytes and bytes(h5.buffer[off : off + n]) == bytes(view)
        values = np.frombuffer(view, "<f4")
        assert np.all(np.isfinite(values)) and values.std() > 0


def test_version0_datatypes_parse() -> None:
    """JLD2 0.4 wrote committed types without the version nibble; libhdf5 refuses them."""
    # the file of ../shared the test was written for, then a bundled one, and the name of its value
    path, name = require_one_of_table(
        {"jld2testfiles/readas_foo_a.jld2": "foo", "misc/csawparallel_test.jld2": "single_stored_object"}
    )
    with h5py.File(path) as f, pytest.raises(Exception, match="version"):
        f["_types/00000001"]
    with HDF5File(path) as h5:
        types = h5.object(h5.root.links()["_types"]).links()
        bootstrap = h5.object(types["00000001"]).datatype
        assert bootstrap is not None and bootstrap.version == 0
        assert bootstrap.cls == H5Class.COMPOUND and bootstrap.size == 32
        assert [(m.name, m.offset) for m in bootstrap.members] == [("name", 0), ("parameters", 16)]
        name_t, params_t = (m.type for m in bootstrap.members)
        assert name_t.is_vlen_string and name_t.base is not None and name_t.base.size == 1
        assert params_t.cls == H5Class.VLEN and params_t.base is not None
        assert params_t.base.cls == H5Class.REFERENCE
        # the bootstrap's julia_type attribute is shared with itself and reads "Core.DataType"
        attr = h5.object(types["00000001"]).attributes["julia_type"]
        assert attr.type.committed_at == types["00000001"]
        assert bytes(h5.read_vlen(attr.data[:16])) == b"Core.DataType"
        value = h5.object(h5.root.links()[name])
        assert value.datatype is not None and value.datatype.committed_at is not None


# JLD (v1) files, written by JLD.jl through libhdf5: the file of ../shared the test was written for, then
# the bundled one (JLD.jl's own test file, a group of two datasets).
JLD_V1 = ("jld2testfiles/jldstruct.jld", "jld/jldjl_test_groups.jld")


def test_jld_v1_file_uses_superblock_v0_and_symbol_tables() -> None:
    path = require_one_of(JLD_V1)
    with HDF5File(path) as h5, h5py.File(path) as f:
        assert h5.superblock_version == 0
        assert h5.root.version == 1
        # symbol-table groups list members in name order, as h5py does: the root, and the groups in it
        # that are symbol tables (others, of link messages, list their links as written)
        links = h5.root.links()
        assert list(links) == list(f.keys())
        for name in [n for n in f if isinstance(f[n], h5py.Group)]:
            group = h5.object(links[name])
            if group.find(SYMBOL_TABLE) is not None:
                assert list(group.links()) == list(f[name].keys()), name


@pytest.mark.parametrize(
    ("fixture", "order"),
    present_cases(
        [
            ("jld2testfiles/struct_reconstruction.jld2", ["s", "ds", "dms", "tms", "_types"]),
            ("misc/seriesforecast_data.jld2", ["train_df", "test_df", "scaling", "_types"]),
            ("lux/eikonet_model.jld2", ["ps", "st", "model", "_types"]),
        ],
        relpath=lambda case: case[0],
        ids=lambda case: case[0],
    ),
)
def test_link_order_is_jld2_insertion_order(fixture: str, order: list[str]) -> None:
    """JLD2 lists keys in link-message order (its insertion order); h5py sorts them by name."""
    path = require_fixture(fixture)
    with HDF5File(path) as h5, h5py.File(path) as f:
        assert list(h5.root.links()) == order
        assert list(f.keys()) == sorted(order)

"""The per-file memos that make opening a file cheap (issue 23) give exactly what decoding gives.

Attribute *forms* (name, datatype, dataspace decoded once, later messages of that form only have
their data cut out), the simple-type and compound memo of ``KnownCompounds`` (member types found
again by their bytes), and the ``Tuple`` type of one repeated parameter: each checked against
the plain decode on every object of real Julia-written files, and on damaged bytes.
"""

from __future__ import annotations

import io
import struct
from pathlib import Path

import h5py
import numpy as np
import pytest
from conftest import all_fixtures_or_skip, fixture_ids

from treexchange import FormatError, JuliaType
from treexchange._hdf5 import HDF5File, _messages as m
from treexchange._hdf5._datatype import KnownCompounds, parse_datatype
from treexchange._hdf5._messages import attribute_of_form, parse_attribute

FILES = all_fixtures_or_skip("**/*.jld2")


def _objects(h5: HDF5File) -> list[int]:
    """Every object header the root group and ``/_types`` reach (one level)."""
    out = [h5.root_address]
    for address in h5.root.links().values():
        out.append(address)
        obj = h5.object(address)
        if obj.kind == "group":
            out += obj.links().values()
    return out


@pytest.mark.parametrize("path", FILES, ids=fixture_ids([p for p in FILES if isinstance(p, Path)]))
def test_memos_give_what_decoding_gives(path: Path) -> None:
    with HDF5File(path) as h5:
        try:
            addresses = _objects(h5)
        except FormatError:
            pytest.skip("the file's own tests say what is wrong with it")
        forms: m.AttributeForms = {}
        known = KnownCompounds()
        checked = 0
        for _ in range(2):  # the second pass finds every form and type remembered
            for address in addresses:
                obj = h5.object(address)
                for msg in obj.find_all(m.ATTRIBUTE):
                    if msg.flags & m.MSG_FLAG_SHARED:
                        continue
                    plain = parse_attribute(obj.cursor(msg), h5._committed_type, h5.limits)
                    c = obj.cursor(msg)
                    memo = parse_attribute(c, h5._committed_type, h5.limits, forms, known)
                    assert memo == plain and bytes(memo.data) == bytes(plain.data)
                    assert c.pos == plain.data_offset + len(plain.data)
                    checked += 1
                msg = obj.find(m.DATATYPE)
                if msg is not None and not msg.flags & m.MSG_FLAG_SHARED:
                    plain_c, memo_c = obj.cursor(msg), obj.cursor(msg)
                    plain_t = parse_datatype(plain_c, h5.limits)
                    assert parse_datatype(memo_c, h5.limits, known=known) == plain_t
                    assert memo_c.pos == plain_c.pos
        assert checked or not any(h5.object(a).find(m.ATTRIBUTE) for a in addresses)
        assert forms or not checked  # (the second pass found its forms)


def _h5py_file() -> bytes:
    bio = io.BytesIO()
    with h5py.File(bio, "w", libver="latest") as f:
        f.attrs["a"] = np.int64(7)
        f.attrs["b"] = np.int64(8)
    return bio.getvalue()


def test_a_form_met_again_still_checks_its_data_fits() -> None:
    """The second attribute has the first one's form (same name length, datatype, dataspace)
    but its message is cut short: the memo's hit raises the FormatError decoding raises."""
    raw = _h5py_file()
    with HDF5File(raw) as h5:
        a, b = h5.root.find_all(m.ATTRIBUTE)
        forms: m.AttributeForms = {}
        first = parse_attribute(h5.root.cursor(a), h5._committed_type, h5.limits, forms)
        assert first.name == "a" and len(forms) == 1
        # the same form as "a" (the name is part of it): "b" is not found
        assert attribute_of_form(h5.buffer, b.offset, b.offset + b.size, forms) is None
        # "a" itself, its data cut off by one byte
        with pytest.raises(FormatError, match="needs 8 data bytes") as err:
            attribute_of_form(h5.buffer, a.offset, a.offset + a.size - 1, forms)
        assert err.value.offset == first.data_offset
        with pytest.raises(FormatError, match="needs 8 data bytes"):
            parse_attribute(h5._cursor(a.offset, a.offset + a.size - 1), h5._committed_type, h5.limits)
        assert struct.unpack("<q", bytes(first.data)) == (7,)


@pytest.mark.parametrize("n", [2, 3, 17, 500])
def test_a_repeated_parameter_type_is_the_type_of_its_positions(n: int) -> None:
    layer = JuliaType.parse("Core.NamedTuple{(:weight,),Core.Tuple{Core.Array{Core.Float32,1}}}")
    fast = JuliaType._repeated("Tuple", layer, n)
    plain = JuliaType("Tuple", [JuliaType.parse(layer.qualified()) for _ in range(n)])
    assert fast == plain and hash(fast) == hash(plain)
    assert fast.qualified() == plain.qualified()
    assert fast != JuliaType._repeated("Tuple", layer, n + 1)


def test_datatypes_and_dataspaces_are_shared_by_files_of_the_same_limits(tmp_path: Path) -> None:
    # The same message bytes decode to the same immutable value in any file: a second file
    # opened with the same limits finds them decoded; another Limits gets its own tables, and a
    # shared table never grows past its bound.
    from treexchange import Limits
    from treexchange._hdf5 import _file

    paths = []
    for i in range(2):
        p = tmp_path / f"f{i}.h5"
        with h5py.File(p, "w") as f:
            f.create_dataset("x", data=np.arange(6, dtype="<f4").reshape(2, 3) + i)
        paths.append(p)
    _file._PROCESS_MEMOS.clear()
    with HDF5File(paths[0]) as a, HDF5File(paths[1]) as b:
        ta = a.object(a.root.links()["x"]).datatype
        tb = b.object(b.root.links()["x"]).datatype
        assert ta is tb and ta is not None and ta.numpy_dtype() == np.dtype("<f4")
        assert a.object(a.root.links()["x"]).dataspace is b.object(b.root.links()["x"]).dataspace
    with HDF5File(paths[0], limits=Limits(max_depth=7)) as c:
        tc = c.object(c.root.links()["x"]).datatype
        assert tc == ta and tc is not ta  # (decoded under its own limits)
    table = _file._PROCESS_MEMOS[_file.DEFAULT_LIMITS]["datatype"]
    table.update({bytes([i % 256, i // 256]): ta for i in range(_file._SHARED_ENTRIES)})
    with HDF5File(paths[1]) as d:
        table.pop(next(k for k, v in table.items() if v is ta and len(k) > 2))  # a miss next
        assert d.object(d.root.links()["x"]).datatype == ta
    assert len(table) <= _file._SHARED_ENTRIES

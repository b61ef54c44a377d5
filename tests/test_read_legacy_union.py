"""A ``Union`` type value as JLD2 <= v0.1.x wrote it (files with the legacy header).

JLD2 0.1.x (``src/data.jl``, "Union Types") committed ``Union`` as an HDF5 variable-length
sequence of its ``Core.DataType`` compounds (name + parameter references), one per member of
``Base.uniontypes(x)``: ``H5TYPE_UNION = VariableLengthDatatype(H5TYPE_DATATYPE)``. JLD2 v0.2
replaced it with the compound ``description``/``datatype``/``unionall`` read today. Such a
value reads as the same ``Type{Union{...}}``; ``convert`` writes it in today's form.
"""

from __future__ import annotations

from pathlib import Path

import h5py
import pytest
from _jld2_builder import Builder, shared, space, t_compound, t_ref, t_vlen, t_vlen_string

import treexchange as tx
from treexchange._cli import main

LEGACY = "Julia data file (HDF5), version 0.2.0"


def _legacy_union_file(members: list[str], count: int | None = None) -> bytes:
    b = Builder(LEGACY)
    datatype = t_compound([("name", t_vlen_string(), 16), ("parameters", t_vlen(t_ref()), 16)])
    union_type = b.commit(t_vlen(datatype), b.jt("Core.Union"))
    payload = b"".join(b.jt(name) for name in members)
    count = len(members) if count is None else count  # another count: a file that lies
    b.link("u", b.dataset(shared(union_type), space("scalar"), b.vlen(payload, count)))
    # The same type as a parameter of another type's value (how the wild file uses it).
    union_param = b.dataset(shared(union_type), space("scalar"), b.vlen(payload, count))
    b.link("vec_type", b.jt_dataset("Core.Array", [union_param, b.int_dataset(1)]))
    return b.finish()


def test_a_legacy_union_reads_as_the_union_of_its_member_datatypes(tmp_path: Path) -> None:
    path = tmp_path / "legacy_union.jld2"
    path.write_bytes(_legacy_union_file(["Base.Missing", "Core.Float64"]))
    value = tx.load(path)
    union = value["u"].type.params[0]
    assert union.name == "Core.Union"
    assert [p.name for p in union.params] == ["Base.Missing", "Core.Float64"]
    array = value["vec_type"].type.params[0]
    assert array.name == "Core.Array" and array.params[0] == union and array.params[1] == 1
    with tx.open(path) as f:
        assert f["u"].kind == "singleton"


def test_convert_writes_the_legacy_union_in_todays_form(tmp_path: Path) -> None:
    src, out = tmp_path / "legacy_union.jld2", tmp_path / "out.jld2"
    src.write_bytes(_legacy_union_file(["Base.Missing", "Core.Float64", "Core.Int64"]))
    assert main(["convert", str(src), str(out)]) == 0
    assert tx.values_equal(tx.load(src), tx.load(out))
    with h5py.File(out, "r") as f:  # today's Union: the description/datatype/unionall compound
        assert f["u"].dtype.names == ("description", "datatype", "unionall")


def test_a_legacy_union_whose_count_overruns_its_heap_object_is_a_format_error(tmp_path: Path) -> None:
    path = tmp_path / "lying.jld2"
    path.write_bytes(_legacy_union_file(["Base.Missing", "Core.Float64"], count=1_000_000))
    with pytest.raises(tx.FormatError, match="does not fit its heap object"):
        tx.load(path)

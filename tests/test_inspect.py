"""``treexchange inspect``: the JSON Lines contract (checked against h5py) and the text view."""

from __future__ import annotations

import json
import subprocess
import sys
import typing
from collections import Counter
from pathlib import Path

import h5py
import numpy as np
import pytest
from _h5walk import is_numeric, julia_shape, reachable_datasets, sha256_le
from _jld2_builder import Builder
from conftest import (
    DENSE_FLUX_STATE,
    NESTED_GROUPS,
    all_fixtures_or_skip,
    fixture_files,
    fixture_ids,
    require_fixture,
    require_one_of,
    require_one_of_table,
)

import treexchange as tx
from treexchange._cli import main
from treexchange._inspect import iter_records
from treexchange._jsonform import array_sha256, json_scalar
from treexchange._typeof import Kind

FIXTURES = all_fixtures_or_skip()
IDS = fixture_ids(fixture_files()) or None
KINDS = set(typing.get_args(Kind))


def _records(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> list[dict]:
    assert main(["inspect", str(path), "--json", *extra]) == 0
    out = capsys.readouterr().out
    return [json.loads(line) for line in out.splitlines()]


def _h5_dtype_name(ds: h5py.Dataset) -> str:
    if ds.id.get_type().get_class() == h5py.h5t.BITFIELD:
        return "bool"
    return ds.dtype.newbyteorder("=").name


@pytest.mark.parametrize("path", FIXTURES, ids=IDS)
def test_json_lists_every_array_like_h5py(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if path.suffix == ".jld":
        assert main(["inspect", str(path), "--json"]) == 2
        assert "JLD (v1)" in capsys.readouterr().err
        return
    records = _records(path, capsys)
    assert records, "no output"
    for rec in records:
        assert rec["kind"] in KINDS
        assert isinstance(rec["julia_type"], str) and rec["julia_type"]
        assert isinstance(rec["path"][0], str)
        assert all(isinstance(s, str) or (isinstance(s, int) and s >= 1) for s in rec["path"])
        if "ref" in rec:  # a container listed before (shared object or cycle): not listed again
            assert set(rec) == {"path", "kind", "julia_type", "ref"}
            assert rec["ref"] != rec["path"] and rec["kind"] not in (
                "array",
                "number",
                "bool",
                "string",
                "symbol",
            )
        elif rec["kind"] == "array":
            assert set(rec) == {"path", "kind", "julia_type", "dtype", "shape", "sha256"}
        elif rec["kind"] in ("number", "bool", "string", "symbol"):
            # raw bits (a primitive type numpy lacks) also say how Julia shows them
            assert set(rec) - {"shown"} == {"path", "kind", "julia_type", "value"}
            assert "shown" not in rec or rec["shown"].startswith(("0x", "'"))
        else:  # an Array{Any, N > 1} also gives its dims
            assert set(rec) - {"shape"} == {"path", "kind", "julia_type"}
            assert "shape" not in rec or (rec["kind"] == "vector" and len(rec["shape"]) >= 2)
    with h5py.File(path) as f:  # names whose objects libhdf5 refuses (version 0 datatypes): not comparable
        refused = set()
        for name in f:
            try:
                f[name]
            except Exception:
                refused.add(name)
    ours = Counter(
        (tuple(r["shape"]), r["dtype"], r["sha256"])
        for r in records
        if r["kind"] == "array" and r["path"][0] not in refused
    )
    theirs: Counter[tuple[tuple[int, ...], str, str]] = Counter()
    for ds in reachable_datasets(path).values():
        if is_numeric(ds) and (ds.ndim > 0 or "dimensions" in ds.attrs):
            theirs[(julia_shape(ds), _h5_dtype_name(ds), sha256_le(ds[()]))] += 1
    assert set(ours) == set(theirs)
    for key, n in theirs.items():
        assert ours[key] >= n  # an array shared by several fields is listed at each path


def test_json_lines_stay_one_record_per_line_with_unicode_line_breaks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A real Greek court text (katerinapr2/SIDProject test_text.jld2) holds U+0085 (NEL), which
    # str.splitlines and many line readers take for a line break, as they do U+2028/U+2029.
    path = tmp_path / "text.jld2"
    text = "first\x85second\u2028third\u2029fourth\r\nfifth"
    tx.save(path, text=text)
    assert main(["inspect", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    records = [json.loads(line) for line in out.splitlines()]
    assert [r["value"] for r in records] == [text]


def test_json_paths_kinds_and_values(capsys: pytest.CaptureFixture[str]) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    recs = {tuple(r["path"]): r for r in _records(path, capsys)}
    assert recs[("lenet_state",)]["kind"] == "namedtuple"
    assert recs[("lenet_state", "layers")]["kind"] == "tuple"
    assert recs[("lenet_state", "layers", 2)] == {
        "path": ["lenet_state", "layers", 2],
        "kind": "singleton",
        "julia_type": "Tuple{}",
    }
    w = recs[("lenet_state", "layers", 1, "weight")]
    assert w["shape"] == [5, 5, 1, 6] and w["dtype"] == "float32" and w["julia_type"] == "Array{Float32, 4}"
    assert recs[("lenet_state", "layers", 1, "stride", 2)]["value"] == 1
    assert recs[("lenet_state", "layers", 1, "groups")] == {
        "path": ["lenet_state", "layers", 1, "groups"],
        "kind": "number",
        "julia_type": "Int64",
        "value": 1,
    }
    # pre-order: a parent comes right before its first child
    order = [tuple(r["path"]) for r in _records(path, capsys)]
    assert order.index(("lenet_state", "layers", 1)) + 1 == order.index(("lenet_state", "layers", 1, "σ"))


def test_json_singletons_strings_symbols_dicts(capsys: pytest.CaptureFixture[str]) -> None:
    # The files of ../shared the test was written for, else bundled ones with the same kinds of values.
    path = require_one_of(
        ("jld2testfiles/singleton_struct_fields.jld2", "flux-model/vqvae_autoencoder7x7x16.jld2")
    )
    by = {tuple(r["path"]): r for r in _records(path, capsys)}
    if path.name == "singleton_struct_fields.jld2":
        assert by[("ms", "b")]["julia_type"] == "Nothing" and by[("ms", "b")]["kind"] == "singleton"
        assert by[("ms", "c")]["julia_type"] == "Missing"
        assert by[("ms", "a")]["value"] == 1 and by[("ms", "a")]["julia_type"] == "Int32"
    else:  # a Flux BatchNorm's ``active = nothing``
        nothing = by[("autoencoder", "layers", 1, "layers", 2, "active")]
        assert (
            nothing["kind"] == "singleton" and nothing["julia_type"] == "Nothing" and "value" not in nothing
        )
    path = require_one_of(("misc/seriesforecast_data.jld2", "misc/multistartlh_test.jld2"))
    by = {tuple(r["path"]): r for r in _records(path, capsys)}
    if path.name == "seriesforecast_data.jld2":
        symbol_at, symbol = ("train_df", "colindex", "names", 2), "meantemp"
        assert by[("train_df", "colindex", "lookup")]["kind"] == "dict"
        assert by[("train_df", "colindex", "lookup", "humidity")]["value"] == 3
    else:  # a Vector{Symbol}; a Dict{Int64, Vector{Float64}} (keys as JSON strings)
        symbol_at, symbol = ("y", 2), "b"
        dicts = {tuple(r["path"]): r for r in _records(require_fixture("legacy/dsge_test.jld2"), capsys)}
        assert dicts[("a",)]["kind"] == "dict" and dicts[("a", "3")]["shape"] == [10]
    assert by[symbol_at] == {
        "path": list(symbol_at),
        "kind": "symbol",
        "julia_type": "Symbol",
        "value": symbol,
    }
    recs = _records(require_fixture("misc/exactpenalty_data.jld2"), capsys)
    assert recs[-1] == {"path": ["c"], "kind": "string", "julia_type": "String", "value": "hi"}


def test_json_name_argument_and_groups(capsys: pytest.CaptureFixture[str]) -> None:
    # groups are no records: their leaves are, with the group names in their paths
    path, (group, _, group_leaves, leaves) = require_one_of_table(NESTED_GROUPS)
    recs = _records(path, capsys)
    assert [r["path"] for r in recs] == [leaf.split("/") for leaf in leaves]
    recs = _records(path, capsys, group)
    assert [r["path"] for r in recs] == [leaf.split("/") for leaf in group_leaves]
    assert main(["inspect", str(path), "nope"]) == 2
    assert "no entry named 'nope'" in capsys.readouterr().err


# Lines of each Dense Flux.state's text view (the file's own; its last line is the totals).
DENSE_STATE_VIEWS = {
    DENSE_FLUX_STATE[0]: [
        "      weight: Array{Float32, 2}  16×1  float32  64 B",
        "      σ: Tuple{}",
        "    [3]: Tuple{}",
        "-- 7 leaves, 4 arrays, 468 B of array data",
    ],
    DENSE_FLUX_STATE[1]: [
        "      weight: Array{Float32, 2}  64×3  float32  768 B",
        "      σ: Tuple{}",
        "      bias: Array{Float32, 1}  1  float32  4 B",
        "-- 6 leaves, 4 arrays, 1.3 KiB of array data",
    ],
}


def test_text_view_has_types_shapes_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    path, lines = require_one_of_table(DENSE_STATE_VIEWS)
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("model_state: NamedTuple{(:layers,)")
    for line in lines[:-1]:
        assert line in out
    assert out[-1] == lines[-1]


def test_special_float_values_and_big_integers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from _jld2_builder import space, t_float, t_int

    b = Builder()
    b.link("nan", b.dataset(t_float(8), space("scalar"), np.float64("nan").tobytes()))
    b.link("inf", b.dataset(t_float(4), space("scalar"), np.float32("-inf").tobytes()))
    b.link("tenth", b.dataset(t_float(4), space("scalar"), np.float32(0.1).tobytes()))
    b.link("big", b.dataset(t_int(16), space("scalar"), (2**100).to_bytes(16, "little", signed=True)))
    path = tmp_path / "special.jld2"
    path.write_bytes(b.finish())
    recs = {r["path"][0]: r for r in _records(path, capsys)}
    assert recs["nan"]["value"] == "NaN" and recs["inf"]["value"] == "-Infinity"
    assert recs["tenth"]["value"] == 0.1 and recs["tenth"]["julia_type"] == "Float32"
    assert recs["big"] == {"path": ["big"], "kind": "number", "julia_type": "Int128", "value": str(2**100)}


def test_json_value_encodings() -> None:
    assert json_scalar(np.complex128(complex(1.5, float("inf")))) == [1.5, "Infinity"]
    assert json_scalar(np.bool_(True)) is True
    assert json_scalar(tx.UInt128(5)) == "5"
    assert json_scalar(tx.Symbol("relu")) == "relu"
    assert json_scalar(np.uint64(2**64 - 1)) == 2**64 - 1
    assert json_scalar(10**4000) == "1" + "0" * 4000
    # Wider than Python prints as decimal text: our LimitError, not ValueError.
    with pytest.raises(tx.LimitError, match="too long"):
        json_scalar(10**5000)


def test_array_sha256_is_column_major_little_endian() -> None:
    a = np.arange(6, dtype=">i4").reshape(2, 3)  # C-ordered, big-endian
    expected = np.asfortranarray(a).astype("<i4").tobytes(order="F")
    import hashlib

    assert array_sha256(a) == hashlib.sha256(expected).hexdigest()


def test_records_from_open_file_match_cli(capsys: pytest.CaptureFixture[str]) -> None:
    path = require_fixture("flux-state/juliahepnet_model.jld2")
    with tx.open(path) as f:
        direct = list(iter_records(f))
    assert direct == _records(path, capsys)


def test_cli_module_entry_point() -> None:
    path = require_fixture("misc/exactpenalty_data.jld2")
    out = subprocess.run(
        [sys.executable, "-m", "treexchange._cli", "inspect", str(path), "--json"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert json.loads(out.splitlines()[0]) == {
        "path": ["a"],
        "kind": "number",
        "julia_type": "Int64",
        "value": 1,
    }


def test_plain_hdf5_needs_opt_in(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "plain.h5"
    with h5py.File(path, "w") as f:
        f["w"] = np.arange(6, dtype=np.float32).reshape(2, 3)
        f["g/s"] = 5
        f["c"] = np.array([(1, 2.0)], dtype=[("a", "<i4"), ("b", "<f8")])[0]
    assert main(["inspect", str(path)]) == 2
    assert "plain HDF5" in capsys.readouterr().err
    recs = {tuple(r["path"]): r for r in _records(path, capsys, "--allow-hdf5")}
    assert recs[("w",)]["shape"] == [3, 2] and recs[("w",)]["julia_type"] == "Array{Float32, 2}"
    assert recs[("w",)]["sha256"] == sha256_le(np.arange(6, dtype=np.float32).reshape(2, 3))
    assert recs[("g", "s")]["value"] == 5
    assert recs[("c", "b")] == {"path": ["c", "b"], "kind": "number", "julia_type": "Float64", "value": 2.0}
    assert main(["inspect", str(path), "--allow-hdf5"]) == 0
    assert "g/  (group, 1 entry)" in capsys.readouterr().out


def test_raw_bits_are_shown_as_julia_shows_them_not_as_an_integer(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A value of a primitive bits type numpy lacks (a pointer, a 16-bit type of one's own) or a
    struct BSON.jl stored as raw bits was printed as the integer its bytes make; the text view
    now prints what Julia prints (``CuPtr{Nothing}(0x00000012bee91e00)``, ``'a'``) and the JSON
    record keeps ``value`` (the contract) with that text in ``shown``."""
    from treexchange._bson._writer import bson_file, datatype

    real = require_fixture("bson/deltadahl_vae_cuarray.bson")  # a CuArray: its CUDA pointers
    pointers = [r for r in _records(real, capsys) if r["julia_type"] == "CUDA.CuPtr{Nothing}"]
    assert pointers and all(r["shown"] == f"0x{r['value']:016x}" for r in pointers)
    assert main(["inspect", str(real)]) == 0
    assert f"CUDA.CuPtr{{Nothing}} = {pointers[0]['shown']}" in capsys.readouterr().out

    point = np.array([(1.0, 2.0), (3.0, -1.0)], dtype=[("x", "<f4"), ("y", "<f4")])  # Point{Float32}
    raw = {"tag": "array", "type": datatype("Main.Point", datatype("Core.Float32")), "size": [2]}
    bson = tmp_path / "points.bson"
    bson.write_bytes(bson_file({"ps": dict(raw, data=point.tobytes())}))
    jld2 = tmp_path / "bits.jld2"
    # An InlineStrings.String7 as a real file holds it (sebastien-lemieux/horaires' data.jld2,
    # a DataFrame column CSV.jl read: the length, zeros, the text reversed); one whose length
    # byte is larger than the type holds is not text: hex, as any other bits.
    actif = tx.JuliaBits("InlineStrings.String7", b"\x05\x00\x00fitcA")
    bad = tx.JuliaBits("InlineStrings.String3", b"\x09abc")
    tx.save(
        jld2,
        h=tx.JuliaBits("Main.P16", b"\x00\x3c"),
        c=tx.JuliaBits("Core.Char", b"\x00\x00\x00a"),
        s=actif,
        q=tx.JuliaBits("InlineStrings.String3", b"\x02\x00" + "é".encode()[::-1]),
        bad=bad,
        # String1: two bytes since InlineStrings 1.4.3, before it one (its code unit, no length)
        one=tx.JuliaBits("InlineStrings.String1", b"\x01M"),
        empty=tx.JuliaBits("InlineStrings.String7", bytes(8)),
        full=tx.JuliaBits("InlineStrings.String3", b"\x03cba"),
    )
    assert main(["inspect", str(bson)]) == 0
    out = capsys.readouterr().out
    assert "[1]: Main.Point{Float32} = 0x400000003f800000" in out and "= 0xbf80000040400000" in out
    assert main(["inspect", str(jld2)]) == 0
    out = capsys.readouterr().out
    assert "h: Main.P16 = 0x3c00" in out and "c: Char = 'a'" in out
    assert 's: InlineStrings.String7 = "Actif"' in out and 'q: InlineStrings.String3 = "é"' in out
    assert "bad: InlineStrings.String3 = 0x63626109" in out
    shown = ["0x3c00", "'a'", '"Actif"', '"é"', "0x63626109", '"M"', '""', '"abc"']
    assert [r.get("shown") for r in _records(jld2, capsys)] == shown
    before_143 = tmp_path / "string1.jld2"
    tx.save(before_143, old=tx.JuliaBits("InlineStrings.String1", b"F"))
    assert [r.get("shown") for r in _records(before_143, capsys)] == ['"F"']
    assert tx.load(jld2)["s"].as_str() == "Actif"
    with pytest.raises(ValueError, match="not text"):
        tx.JuliaBits("Main.P16", b"\x00\x3c").as_str()
    with pytest.raises(ValueError, match=r"length byte 9 is more than it holds \(3\)"):
        bad.as_str()


def test_an_array_of_any_of_two_dims_shows_its_dims(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A ``Matrix{Any}`` (rotsoc/julia-machine-learning saves a 5×100 one of Knet layers) was shown
    as "(vector, 500 entries)": its dims were nowhere, in the text or in ``--json``."""
    data = np.empty((2, 3), object)
    data[:] = [["a", 1, 2.0], ["b", None, 3]]
    path = tmp_path / "m.jld2"
    tx.save(path, m=tx.JuliaArray("Any", data), v=[1, "x"])
    assert main(["inspect", str(path)]) == 0
    text = capsys.readouterr().out
    assert "m: Array{Any, 2}  (vector 2×3, 6 entries)" in text
    assert "v: Array{Any, 1}  (vector, 2 entries)" in text
    assert main(["inspect", "--json", str(path)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {"path": ["m"], "kind": "vector", "julia_type": "Array{Any, 2}", "shape": [2, 3]} in records
    assert {"path": ["v"], "kind": "vector", "julia_type": "Array{Any, 1}"} in records

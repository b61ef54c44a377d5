"""diff between schemas, value trees and schema files: human text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from _schema_samples import flux_chain_state, flux_dense
from conftest import (
    SKIP_REASON,
    fixture_files,
    fixture_ids,
    require_fixture,
    require_one_of_table,
)

import treexchange as tx
from treexchange import NamedTuple
from treexchange._cli import main
from treexchange._save import convert

REPO = Path(__file__).resolve().parents[1]


def test_identical_trees_have_no_differences() -> None:
    result = tx.diff({"model_state": flux_chain_state(0)}, {"model_state": flux_chain_state(1)})
    assert not result and len(result) == 0
    assert result.text().endswith("no differences\n")
    assert result.to_json()["equal"] is True


def test_checksums_show_changed_contents() -> None:
    a, b = {"model_state": flux_chain_state(0)}, {"model_state": flux_chain_state(1)}
    result = tx.diff(a, b, checksums=True)
    kinds = {d.kind for d in result}
    assert kinds == {"checksum"}
    assert {d.path for d in result} >= {
        ("model_state", "layers", 1, "weight"),
        ("model_state", "layers", 5, "bias"),
    }


def test_every_kind_of_change_is_reported_at_its_path() -> None:
    rng = np.random.default_rng(0)
    d1, d2, d3 = flux_dense(rng, 4, 8), flux_dense(rng, 8, 16), flux_dense(rng, 16, 2)
    a = {"m": NamedTuple(layers=(d1, d2, d3), k=np.int64(1), flag=True, act=())}
    b = {
        "m": NamedTuple(
            layers=(NamedTuple(σ=(), weight=d1.weight.astype(np.float64), bias=d1.bias), d3),
            k=np.float32(1),
            flag=np.zeros(1),
            act=None,
            new=1.0,
        )
    }
    result = tx.diff(a, b)
    got = [(d.kind, d.path) for d in result]
    assert got == [
        ("order", ("m", "layers", 1)),
        ("dtype", ("m", "layers", 1, "weight")),
        ("removed", ("m", "layers", 2)),
        ("dtype", ("m", "k")),
        ("kind", ("m", "flag")),
        ("type", ("m", "act")),
        ("added", ("m", "new")),
    ]
    text = result.text()
    assert "~ m.layers[1].weight: dtype float32 -> float64\n" in text
    assert "- m.layers[2]: removed (namedtuple (weight, bias, σ))\n" in text
    assert "+ m.new: added (number float64)\n" in text
    assert "~ m.layers[1]: order (weight, bias, σ) -> (σ, weight, bias)\n" in text
    data = json.loads(json.dumps(result.to_json()))
    assert data["equal"] is False
    first = data["differences"][1]
    assert first == {
        "kind": "dtype",
        "path": ["m", "layers", 1, "weight"],
        "a": "float32",
        "b": "float64",
        "message": "dtype float32 -> float64",
    }
    removed = data["differences"][2]
    assert removed["a"]["kind"] == "namedtuple" and removed["b"] is None


def test_schema_documents_and_files(tmp_path: Path) -> None:
    flux = REPO / "schema/examples/flux_chain_state.json"
    doc = tx.load_schema(flux)
    changed = doc.model_copy(deep=True)
    changed.node_at(("model_state", "layers", 5, "weight")).shape = [10, "n"]  # type: ignore[union-attr]
    changed.node_at(("model_state", "layers", 2, "chs")).enum = [8]  # type: ignore[union-attr]
    changed.node_at(("model_state", "layers")).description = None
    other = tmp_path / "other.json"
    other.write_text(changed.to_json(), encoding="utf-8")
    result = tx.diff(flux, other)
    assert [(d.kind, d.path) for d in result] == [
        ("description", ("model_state", "layers")),
        ("value", ("model_state", "layers", 2, "chs")),
        ("shape", ("model_state", "layers", 5, "weight")),
    ]
    assert "~ model_state.layers[5].weight: shape (10, 36) -> (10, n)" in result.text()
    assert "~ model_state.layers[2].chs: value enum [4] -> [8]" in result.text()
    assert result.a_label == str(flux)


def test_cli_diff_exit_codes_and_json(tmp_path: Path, capsys: object) -> None:
    flux = REPO / "schema/examples/flux_chain_state.json"
    lux = REPO / "schema/examples/lux_ps_st.json"
    assert main(["diff", str(flux), str(flux)]) == 0
    assert main(["diff", "--json", str(flux), str(lux)]) == 1
    out = capsys.readouterr().out  # type: ignore[attr-defined]
    data = json.loads(out[out.index("{") :])
    assert {(d["kind"], tuple(d["path"])) for d in data["differences"]} == {
        ("removed", ("model_state",)),
        ("added", ("ps",)),
        ("added", ("st",)),
    }


# --- contents: --checksums compares every leaf's value, not only arrays' -----------------------


def _bits64(bits: int) -> float:
    return float(np.array(bits, dtype="<u8").view("<f8")[()])


def _char(c: str) -> tx.JuliaBits:
    # A Char is its UTF-8 bytes left-aligned in a big-endian UInt32 (stored little-endian).
    return tx.JuliaBits("Core.Char", c.encode().ljust(4, b"\x00")[::-1])


# (name, value in A, value in B): one scalar of each kind whose content, and only that, differs.
CHANGED_SCALARS = [
    ("float64", 1.5, 2.5),
    ("float32", np.float32(0.1), np.float32(0.2)),
    ("float16", np.float16(0.5), np.float16(0.25)),
    ("int64", np.int64(3), np.int64(4)),
    ("uint8", np.uint8(1), np.uint8(255)),
    ("int128", tx.Int128(-(2**100)), tx.Int128(-(2**100) + 1)),
    ("uint128", tx.UInt128(2**127), tx.UInt128(2**127 + 1)),
    ("bigint", tx.BigInt(10**40), tx.BigInt(10**40 + 1)),
    ("bigfloat", tx.BigFloat("0.1"), tx.BigFloat("0.2")),
    ("complex", np.complex64(1 + 2j), np.complex64(1 - 2j)),
    ("bool", True, False),
    ("string", "relu", "tanh"),
    ("symbol", tx.Symbol("relu"), tx.Symbol("tanh")),
    ("char", _char("a"), _char("b")),
    ("signed_zero", 0.0, -0.0),
    ("nan_payload", float("nan"), _bits64(0x7FF8000000000001)),
    ("nan_sign", float("nan"), _bits64(0xFFF8000000000000)),
    ("nan32_payload", np.float32("nan"), np.array(0x7FC00001, "<u4").view("<f4")[()]),
]


def _nested(leaf: object) -> dict[str, object]:
    """The leaf at the top, inside a NamedTuple, and inside a Dict in a tuple."""
    return {
        "top": leaf,
        "m": NamedTuple(layer=NamedTuple(w=np.ones(2, np.float32), p=leaf, σ=())),
        "d": ({"k": leaf},),
    }


@pytest.mark.parametrize("case", CHANGED_SCALARS, ids=[c[0] for c in CHANGED_SCALARS])
def test_checksums_report_a_changed_scalar_at_every_place(
    case: tuple[str, object, object], tmp_path: Path
) -> None:
    _, va, vb = case
    fa, fb = tmp_path / "a.jld2", tmp_path / "b.jld2"
    tx.save(fa, **_nested(va))
    tx.save(fb, **_nested(vb))
    assert not tx.diff(fa, fb), "without --checksums the diff is of structure only"
    assert not tx.diff(fa, fa, checksums=True) and not tx.diff(fb, tx.load(fb), checksums=True)
    result = tx.diff(fa, fb, checksums=True)
    assert [(d.kind, d.path) for d in result] == [
        ("content", ("top",)),
        ("content", ("m", "layer", "p")),
        ("content", ("d", 1, "k")),
    ], result.text()
    # The value trees compare alike (tx.diff of what load returns), and a schema document
    # written with checksums records what the comparison needs (its JSON round trip too).
    assert [d.path for d in tx.diff(tx.load(fa), tx.load(fb), checksums=True)] == [d.path for d in result]
    doc_a = tx.load_schema(tx.infer_schema(fa, checksums=True).to_json())
    assert [d.path for d in tx.diff(doc_a, fb, checksums=True)] == [d.path for d in result]
    assert not tx.diff(doc_a, fa, checksums=True)
    first = result.differences[0]
    assert first.a != first.b or str(first.a) != str(first.b)


def test_cli_diff_checksums_names_path_and_both_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = tmp_path / "a.jld2", tmp_path / "b.jld2"
    tx.save(a, x=1.5, y="a", cfg=NamedTuple(name="x" * 200, act=tx.Symbol("relu"), σ=()))
    tx.save(b, x=2.5, y="b", cfg=NamedTuple(name="y" * 200, act=tx.Symbol("relu"), σ=()))
    assert main(["diff", str(a), str(b)]) == 0  # structure only: the same
    assert capsys.readouterr().out.endswith("no differences\n")
    assert main(["diff", "--checksums", str(a), str(b)]) == 1
    lines = capsys.readouterr().out.splitlines()[2:]
    assert lines[:2] == ["~ x: content 1.5 -> 2.5", "~ y: content 'a' -> 'b'"]
    assert len(lines) == 3 and lines[2].startswith("~ cfg.name: content 'xxx") and "… (200 chars)" in lines[2]
    assert len(lines[2]) < 200  # shortened for humans ...
    assert main(["diff", "--checksums", "--json", str(a), str(b)]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["equal"] is False
    assert data["differences"][0] == {
        "kind": "content",
        "path": ["x"],
        "a": 1.5,
        "b": 2.5,
        "message": "content 1.5 -> 2.5",
    }
    assert data["differences"][2]["b"] == "y" * 200  # ... whole in JSON


def test_nan_payloads_are_recorded_by_bits_in_schema_documents(tmp_path: Path) -> None:
    path = tmp_path / "n.jld2"
    tx.save(path, nan=float("nan"), neg=_bits64(0xFFF8000000000000), h=np.float16("nan"), z=-0.0)
    doc = tx.infer_schema(path, checksums=True)
    values = {k: node.value for k, node in doc.roots.items()}  # type: ignore[union-attr]
    assert values == {"nan": "NaN", "neg": "NaN(0xfff8000000000000)", "h": "NaN", "z": -0.0}
    again = tx.load_schema(doc.to_json())
    assert again == doc and str(again.roots["z"].value) == "-0.0"  # type: ignore[union-attr]
    assert not tx.diff(again, path, checksums=True)


def test_validate_checks_recorded_scalar_values(tmp_path: Path) -> None:
    a, b = tmp_path / "a.jld2", tmp_path / "b.jld2"
    tx.save(a, m=NamedTuple(lr=0.1, act="relu", on=True))
    tx.save(b, m=NamedTuple(lr=0.2, act="relu", on=False))
    doc = tx.infer_schema(a, checksums=True)
    assert tx.validate(a, doc) == []
    found = tx.validate(b, doc)
    assert [(m.kind, m.path) for m in found] == [("content", ("m", "lr")), ("content", ("m", "on"))]
    assert str(found[0]) == "m.lr: content 0.2 found, schema records 0.1"
    assert tx.validate(b, doc, checksums=False) == []  # contents are what checksums verify


def test_a_char_is_shown_as_one_in_diff_and_validate(tmp_path: Path) -> None:
    """A Char's content is recorded as the integer of its four bytes (as ``inspect --json``
    writes it), and messages showed that integer (``content 1627389952 -> 1644167168``); they
    show the Char, as Julia and ``inspect`` do. The recorded value and JSON stay integers."""
    a, b = tmp_path / "a.jld2", tmp_path / "b.jld2"
    tx.save(a, c=tx.JuliaBits("Core.Char", b"\x00\x00\x00a"), e=tx.JuliaBits("Main.E", b"\x01\x00"))
    tx.save(b, c=tx.JuliaBits("Core.Char", b"\x00\x00\x00b"), e=tx.JuliaBits("Main.E", b"\x02\x00"))
    found = tx.diff(a, b, checksums=True)
    assert [str(d) for d in found] == ["~ c: content 'a' -> 'b'", "~ e: content 0x0001 -> 0x0002"]
    first = next(iter(found))
    assert (first.a, first.b) == (0x61000000, 0x62000000)  # (the recorded values: exact)
    doc = tx.infer_schema(a, checksums=True)
    assert [str(m) for m in tx.validate(b, doc)] == [
        "c: content 'b' found, schema records 'a'",
        "e: content 0x0002 found, schema records 0x0001",
    ]
    raw = json.loads(doc.to_json())
    raw["roots"]["c"].update(value=None, enum=[0x61000000, 0x7A000000])
    assert str(tx.validate(b, raw)[0]) == "c: value 'b' found, schema allows ['a', 'z']"


def test_pointers_of_a_real_file_are_shown_in_diff_and_validate_as_inspect_shows_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """deltadahl's VAE (BSON.jl) holds CuArrays, whose CUDA pointers (``CUDA.CuPtr{Nothing}``, 8
    bytes, no numpy dtype) ``inspect`` shows in hex; ``diff`` and ``validate`` printed the integer
    their bytes make (``content 80512359936 -> 80512360448``). Now the same text as ``inspect``,
    the CLI too; JSON keeps the integers."""
    real = require_fixture("bson/deltadahl_vae_cuarray.bson")
    assert main(["inspect", str(real), "--json"]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    pointer = next(r for r in records if r["julia_type"] == "CUDA.CuPtr{Nothing}")
    where, old_text = tuple(pointer["path"]), pointer["shown"]  # (what inspect shows)
    values = tx.load(real)
    holder = values
    for key in where[:-1]:  # (a struct's field, a Dict's key, a position counted from 1)
        holder = (
            holder.fields[key]
            if isinstance(holder, tx.JuliaStruct)
            else holder[key - 1 if isinstance(key, int) else key]
        )
    old = holder.fields[where[-1]]
    assert isinstance(old, tx.JuliaBits) and old.shown() == old_text == f"0x{old.as_int():016x}"
    new = tx.JuliaBits(old.type, (old.as_int() + 0x200).to_bytes(8, "little"))
    holder.fields[where[-1]] = new
    moved = tmp_path / "moved.jld2"
    tx.save(moved, **values)
    new_text = new.shown()

    found = tx.diff(real, moved, checksums=True)
    assert [(d.path, d.message) for d in found] == [(where, f"content {old_text} -> {new_text}")]
    assert (found.differences[0].a, found.differences[0].b) == (old.as_int(), new.as_int())
    assert main(["diff", str(real), str(moved), "--checksums"]) == 1
    assert f": content {old_text} -> {new_text}\n" in capsys.readouterr().out
    assert main(["diff", str(real), str(moved), "--checksums", "--json"]) == 1
    assert json.loads(capsys.readouterr().out)["differences"][0]["b"] == new.as_int()

    doc = tx.infer_schema(real, checksums=True, values=True)
    assert [(m.path, m.detail) for m in tx.validate(moved, doc)] == [
        (where, f"{new_text} found, schema records {old_text}"),
        (where, f"{new_text} found, schema allows [{old_text}]"),
    ]
    schema = tmp_path / "schema.json"
    schema.write_text(doc.to_json())
    assert main(["validate", str(moved), str(schema)]) == 1
    assert f"content {new_text} found, schema records {old_text}" in capsys.readouterr().out


def test_enum_primitive_and_char_values_are_shown_at_their_width(tmp_path: Path) -> None:
    """A 1-byte ``@enum`` of -1 (recorded as -1) is ``0xff``, a 16-bit primitive ``0x3c00``, a
    non-ASCII Char ``'é'`` (its bytes make a negative integer, which was printed as one); the
    width a schema document does not record comes from the other side or the value found."""
    a, b = tmp_path / "a.jld2", tmp_path / "b.jld2"
    char = "é".encode().ljust(4, b"\x00")[::-1]  # (UTF-8 left-aligned in a big-endian UInt32)
    tx.save(
        a,
        e=tx.JuliaBits("Main.E8", b"\x01"),
        h=tx.JuliaBits("Main.P16", b"\x00\x3c"),
        c=tx.JuliaBits("Core.Char", b"\x00\x00\x00a"),
    )
    tx.save(
        b,
        e=tx.JuliaBits("Main.E8", b"\xff"),
        h=tx.JuliaBits("Main.P16", b"\x00\xbc"),
        c=tx.JuliaBits("Core.Char", char),
    )
    assert tx.JuliaBits("Core.Char", char).as_int() < 0
    messages = ["e: content 0x01 -> 0xff", "h: content 0x3c00 -> 0xbc00", "c: content 'a' -> 'é'"]
    assert [d.text()[2:] for d in tx.diff(a, b, checksums=True)] == messages
    doc = tx.infer_schema(a, checksums=True)
    assert [d.text()[2:] for d in tx.diff(doc, b, checksums=True)] == messages  # (b's widths)
    plain = [d.text()[2:] for d in tx.diff(doc, tx.infer_schema(b, checksums=True))]
    assert plain == ["e: content 1 -> -1", "h: content 15360 -> -17408", "c: content 'a' -> 'é'"]
    assert [str(m) for m in tx.validate(b, doc)] == [
        "e: content 0xff found, schema records 0x01",
        "h: content 0xbc00 found, schema records 0x3c00",
        "c: content 'é' found, schema records 'a'",
    ]
    raw = json.loads(doc.to_json())
    raw["roots"]["e"].update(value=None, enum=[1, 2])
    raw["roots"]["h"].update(value=None, minimum=0)
    raw["roots"]["c"].update(value=None)
    assert [str(m) for m in tx.validate(b, raw)] == [
        "e: value 0xff found, schema allows [0x01, 0x02]",
        "h: value 0xbc00 found, schema minimum is 0x0000",
    ]


def test_a_2_0_document_without_values_still_reads_and_diffs_by_structure() -> None:
    old = {"schema_version": "2.0", "roots": {"x": {"kind": "number", "dtype": "float64"}}}
    doc = tx.load_schema(old)
    assert doc.schema_version == "2.1" and doc.roots["x"].value is None  # type: ignore[union-attr]
    assert not tx.diff(old, {"x": 3.0})
    # With checksums the inferred side records a value the document does not: reported, as an
    # array's sha256 recorded on one side only is.
    assert [(d.kind, d.a, d.b) for d in tx.diff(old, {"x": 3.0}, checksums=True)] == [("content", None, 3.0)]


def test_bson_file_and_its_jld2_copy_have_the_same_contents(tmp_path: Path) -> None:
    """A BSON.jl file's scalars (BSON's own Float64/Int64/String, tagged Symbols and primitive
    structs) describe the same contents as the JLD2 file converted from it; a changed value shows."""
    from treexchange._bson._writer import bson_file, datatype, primitive, symbol

    def entries(x: float, s: str, sym: str, half: float, nan_bits: int, k: int) -> dict[str, object]:
        return {
            "x": x,
            "s": s,
            "sym": symbol(sym),
            "h": primitive(datatype("Core.Float16"), np.float16(half).tobytes()),
            "f": primitive(datatype("Core.Float32"), np.array(nan_bits, "<u4").tobytes()),
            "c": primitive(datatype("Core.Char"), b"a".ljust(4, b"\x00")[::-1]),
            "k": k,
        }

    src, copy, changed = tmp_path / "m.bson", tmp_path / "m.jld2", tmp_path / "changed.bson"
    src.write_bytes(bson_file(entries(1.5, "relu", "tanh", 0.5, 0x7FC00000, 7)))
    convert(src, copy)
    assert not tx.diff(src, copy, checksums=True), tx.diff(src, copy, checksums=True).text()
    assert main(["diff", "--checksums", str(src), str(copy)]) == 0
    changed.write_bytes(bson_file(entries(2.5, "relu", "sigmoid", 0.25, 0x7FC00001, 7)))
    result = tx.diff(copy, changed, checksums=True)
    assert [(d.kind, d.path) for d in result] == [
        ("content", ("x",)),
        ("content", ("sym",)),
        ("content", ("h",)),
        ("content", ("f",)),
    ], result.text()
    assert "~ f: content NaN -> NaN(0x7fc00001)" in result.text()


def test_a_bson_file_whose_length_starts_with_a_brace_is_data_not_a_schema(tmp_path: Path) -> None:
    """A BSON.jl file starts with its length (int32, little-endian): in one file size of 256 its
    first byte is ``{`` (0x7b), as a schema document's. It is still read as data, by the length
    equal to its size and its closing NUL (the ninth search: gamma-opt/adaptive-surrogate-opt's
    ``reparams/surrogate_1st.bson`` of 63,355 bytes was refused as "not UTF-8 JSON")."""
    from treexchange._bson._writer import bson_file

    def sized(pad: int) -> bytes:
        return bson_file({"w": np.arange(3, dtype=np.float64), "note": "x" * pad})

    pad = next(p for p in range(256) if len(sized(p)) % 256 == ord("{"))
    src, copy = tmp_path / "m.bson", tmp_path / "m.jld2"
    src.write_bytes(sized(pad))
    assert src.read_bytes()[:1] == b"{"
    convert(src, copy)
    assert not tx.diff(src, copy, checksums=True)
    assert main(["diff", str(src), str(copy)]) == 0
    assert main(["diff", str(copy), str(src)]) == 0


# The model-zoo MNIST convnet's ``params acc epoch_idx`` file: its stored epoch (../shared's, then the
# bundled one).
MNIST_PARAMS_BSON = {
    "bson/dhairya_juliacon2020_mnist_conv2_params.bson": 11,
    "bson/tetsugps_mnist_conv_params.bson": 15,
}
BSON_FILES = fixture_files("bson/*.bson")


@pytest.mark.parametrize(
    "path",
    BSON_FILES or [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))],
    ids=fixture_ids(BSON_FILES) if BSON_FILES else None,
)
def test_every_bson_file_and_its_jld2_copy_have_the_same_contents(path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.jld2"
    convert(path, copy)
    result = tx.diff(path, copy, checksums=True)
    assert not result, result.text()


def test_a_changed_scalar_of_a_real_bson_file_shows(tmp_path: Path) -> None:
    path, epoch = require_one_of_table(MNIST_PARAMS_BSON)
    edited = tmp_path / "edited.jld2"
    values = tx.load(path)
    assert values["epoch_idx"] == epoch
    tx.save(edited, **{**values, "epoch_idx": values["epoch_idx"] + 1})
    assert not tx.diff(path, edited)  # the same structure
    result = tx.diff(path, edited, checksums=True)
    assert [(d.kind, d.path, d.a, d.b) for d in result] == [("content", ("epoch_idx",), epoch, epoch + 1)]


def test_a_struct_of_zero_size_fields_is_its_singleton_to_diff(tmp_path: Path) -> None:
    """``DataFrames.ByRow{typeof(f)}`` (one field, the function): BSON.jl stores the field, JLD2
    the type alone, and reads it back as the singleton. ``convert`` verified such a file
    (``values_equal``) while ``diff`` of the two reported a kind change (ScoringEngineDemo's
    preprocessing, survey 20); a struct holding a real value still differs."""
    by_row = tx.JuliaStruct("DataFrames.ByRow{Main.#f}", {"fun": tx.Singleton("Main.#f")})
    tx.save(tmp_path / "a.jld2", p=by_row)
    back = tx.load(tmp_path / "a.jld2", "p")
    assert type(back) is tx.Singleton and tx.values_equal(back, by_row)
    assert not tx.diff({"p": by_row}, tmp_path / "a.jld2")
    holding = tx.JuliaStruct("DataFrames.ByRow{Main.#f}", {"fun": np.ones(2)})
    assert tx.diff({"p": holding}, tmp_path / "a.jld2")
    # Deeper: a Chain whose tuple holds field-less structs only (hamalajaa/DifferentiableUserModels'
    # Chain(InputsCoder(), DeterministicLikelihood()), the ninth search): the tuple is zero-size too
    chain_type = "Flux.Chain{Tuple{Main.InputsCoder, Main.Likelihood}}"
    chain = tx.JuliaStruct(
        chain_type, {"layers": (tx.Singleton("Main.InputsCoder"), tx.Singleton("Main.Likelihood"))}
    )
    tx.save(tmp_path / "c.jld2", c=chain)
    assert type(tx.load(tmp_path / "c.jld2", "c")) is tx.Singleton
    assert not tx.diff({"c": chain}, tmp_path / "c.jld2"), tx.diff({"c": chain}, tmp_path / "c.jld2").text()
    holding = tx.JuliaStruct(chain_type, {"layers": (tx.Singleton("Main.InputsCoder"), np.ones(2))})
    assert tx.diff({"c": holding}, tmp_path / "c.jld2")

"""BSON.jl files whose layers repeat: the parser's memos (one Lazy per distinct type document,
templates for documents with binaries) must give exactly what a parse of each document would,
arrays still zero-copy views of their own bytes, errors still at the document that is wrong."""

from __future__ import annotations

import struct

import numpy as np
import pytest

import treexchange as tx
from treexchange import FormatError, LimitError, TreexchangeError
from treexchange._bson import BsonDocument, _container, _writer
from treexchange._bson._container import Blob, Lazy, bson_depth
from treexchange._bson._writer import array, bson_file, datatype, tuple_
from treexchange._limits import Limits

jl_struct = _writer.struct


def _dense(rng: np.random.Generator, n_out: int, n_in: int, eltype: str = "Core.Float32") -> dict:
    dtype = np.float32 if eltype == "Core.Float32" else np.uint32
    t = datatype("Flux.Dense", datatype("NNlib.#relu"), datatype("Core.Array", datatype(eltype), 2))
    w = (np.abs(rng.standard_normal((n_out, n_in))) * 100).astype(dtype)
    b = (np.abs(rng.standard_normal(n_out)) * 100).astype(dtype)
    return jl_struct(t, array(eltype, w), array(eltype, b), jl_struct(datatype("NNlib.#relu")))


def _chain(layers: list[dict]) -> bytes:
    return bson_file({"model": jl_struct(datatype("Flux.Chain"), tuple_(*layers))})


def test_repeated_layers_read_their_own_bytes() -> None:
    rng = np.random.default_rng(1)
    layers = [_dense(rng, 3, 5) for _ in range(6)]  # one length: layers 3.. are template hits
    raw = _chain(layers)
    model = tx.load(raw, "model")
    got = model.fields["1"]
    for layer, expected in zip(got, layers):
        w, b = layer.fields["1"], layer.fields["2"]
        assert w.shape == (3, 5) and w.dtype == np.float32 and b.shape == (3,)
        assert np.array_equal(w, expected["data"][0]["data"]) and np.array_equal(
            b, expected["data"][1]["data"]
        )
        assert not w.flags.owndata  # a view of the file's bytes
    weights = [layer.fields["1"] for layer in got]
    # every layer a view of its own bytes: six distinct buffers positions, no two sharing memory
    for i in range(len(weights)):
        for j in range(i + 1, len(weights)):
            assert not np.shares_memory(weights[i], weights[j])
            assert not np.array_equal(weights[i], weights[j])
    assert all(layer.type == got[0].type for layer in got)


def test_templates_are_used_and_offsets_are_each_documents_own() -> None:
    rng = np.random.default_rng(2)
    raw = _chain([_dense(rng, 2, 4) for _ in range(5)])
    doc = BsonDocument(raw)
    etype, off, end = doc.entries["model"]
    tree = doc.parser.value(etype, off, end, ("model",))
    assert doc.parser._templates  # the repeated layer became a template
    layers = tree["data"][0]["data"]
    offsets = [layer.offset for layer in layers]
    assert offsets == sorted(set(offsets))  # each copy has its own offset
    blobs = [layer["data"][0]["data"] for layer in layers]
    assert all(isinstance(b, Blob) for b in blobs)
    assert len({b.offset for b in blobs}) == 5
    for layer, blob in zip(layers, blobs):  # the bytes a blob points at are in its own layer
        assert layer.offset < blob.offset < blob.offset + blob.length < layer.offset + 2000
    # the type documents are one Lazy for all the layers
    assert len({id(layer["type"]) for layer in layers}) == 1 and isinstance(layers[0]["type"], Lazy)
    # a second parse gives an equal tree (all template hits)
    again = doc.parser.value(etype, off, end, ("model",))
    assert [x.offset for x in again["data"][0]["data"]] == offsets


def test_same_length_other_bytes_is_not_taken_for_a_repeat() -> None:
    rng = np.random.default_rng(3)
    # Float32 and UInt32 arrays of one shape: documents of the same length, other type names
    layers = [_dense(rng, 2, 4, "Core.Float32") for _ in range(3)] + [_dense(rng, 2, 4, "Core.UInt32")]
    raw = _chain(layers)
    model = tx.load(raw, "model")
    got = model.fields["1"]
    assert [layer.fields["1"].dtype for layer in got] == [np.float32] * 3 + [np.uint32]
    assert np.array_equal(got[3].fields["1"], layers[3]["data"][0]["data"])


def test_a_broken_repeat_is_reported_at_its_own_document() -> None:
    rng = np.random.default_rng(4)
    raw = bytearray(_chain([_dense(rng, 2, 4) for _ in range(4)]))
    doc = BsonDocument(bytes(raw))
    tree = doc.parser.value(*doc.entries["model"], ("model",))
    last = tree["data"][0]["data"][3]
    # the last layer's weight size [2, 4] -> [2, 5]: same length, bytes no longer match
    size_at = raw.index(b"\x04size\x00", last.offset) + 6  # its BSON array: length, "0": 2, "1": 4
    assert struct.unpack_from("<q", raw, size_at + 18)[0] == 4
    struct.pack_into("<q", raw, size_at + 18, 5)
    with pytest.raises(FormatError, match="needs 40 bytes") as err:
        tx.load(bytes(raw))
    assert err.value.offset is not None and err.value.offset > last.offset
    assert err.value.path is not None and "4" in [str(p) for p in err.value.path]


def test_repeats_deeper_than_the_bound_are_still_refused() -> None:
    limits = Limits(max_depth=8)
    max_depth = bson_depth(limits)
    layer = _dense(np.random.default_rng(5), 1, 2)  # 4 levels: struct, fields, array, size
    levels = max_depth - 2  # nested BSON arrays: with the layer at the bottom, one level too many

    def nested(bottom: object) -> object:
        for _ in range(levels - 1):
            bottom = [bottom]
        return bottom

    raw = bson_file({"a": [layer, layer, layer], "b": nested(1.0), "c": nested(layer)})
    doc = BsonDocument(raw, limits=limits)
    tree = doc.parser.value(*doc.entries["a"], ("a",))
    assert doc.parser._templates and tree[2]["data"][0]["data"].offset > tree[1].offset  # a repeat
    doc.parser.value(*doc.entries["b"], ("b",))  # within the bound
    with pytest.raises(LimitError, match="nested deeper"):
        doc.parser.value(*doc.entries["c"], ("c",))


def _read(raw: bytes) -> tuple[str, object]:
    try:
        return "ok", tx.load(raw)
    except TreexchangeError as err:
        return type(err).__name__, None


def test_mutated_repeats_read_as_without_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    """Differential: every byte flip of a file of alike layers reads the same (or is refused the
    same way) with the templates as with none made."""
    rng = np.random.default_rng(6)
    base = _chain([_dense(rng, 2, 3) for _ in range(4)])
    flips = np.random.default_rng(7)
    cases = []
    for _ in range(150):
        raw = bytearray(base)
        at = int(flips.integers(4, len(raw) - 1))
        raw[at] = int(flips.integers(0, 256))
        cases.append(bytes(raw))
    with_templates = [_read(raw) for raw in cases]
    monkeypatch.setattr(_container, "MAX_TEMPLATES_PER_LENGTH", 0)
    without = [_read(raw) for raw in cases]
    assert sum(kind == "ok" for kind, _ in with_templates) > 20  # (most flips land in array bytes)
    for (kind_a, a), (kind_b, b) in zip(with_templates, without):
        assert kind_a == kind_b
        if kind_a == "ok":
            assert tx.values_equal(a, b)

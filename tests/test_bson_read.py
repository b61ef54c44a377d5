"""Reading BSON.jl files (issue 20, part 1): the real files of ../shared/julia_fixtures/bson, each
loaded, inspected, schema-inferred and converted to JLD2 value-equal (h5py reads the result),
and what the value model makes of BSON.jl's tags (Tracker, closures, CuArray, Dicts, backrefs)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest
from conftest import (
    BUNDLED_DIR,
    SKIP_REASON,
    fixture_files,
    fixture_ids,
    require_fixture,
    require_one_of_table,
)

import treexchange as tx
from treexchange._bson import is_device_array
from treexchange._bson._writer import backref, bson_file, datatype, struct
from treexchange._inspect import iter_records, text_lines, walk_nodes
from treexchange._nodeproto import CONTAINER_KINDS, LazyFile, LazyNode, is_node
from treexchange._save import convert
from treexchange._schema import RefNode
from treexchange._schema._model import iter_paths

BSON_FILES = fixture_files("bson/*.bson")
PARAMS = BSON_FILES or [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))]


def _arrays(value: object) -> list[np.ndarray]:
    """Every numpy array in a value tree, in order (each object once)."""
    out: list[np.ndarray] = []
    seen: set[int] = set()
    stack = [value]
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if isinstance(x, np.ndarray):
            out.append(x)
        elif isinstance(x, tx.JuliaStruct):
            stack.extend(reversed(list(x.fields.values())))
        elif isinstance(x, (dict, tx.NamedTuple)):
            stack.extend(reversed(list(x.values())))
        elif isinstance(x, (list, tuple)):
            stack.extend(reversed(x))
    return out


@pytest.mark.parametrize("path", PARAMS, ids=fixture_ids(BSON_FILES) if BSON_FILES else None)
def test_every_bson_file_loads_inspects_infers_and_converts(path: Path, tmp_path: Path) -> None:
    value = tx.load(path)
    assert isinstance(value, dict) and value
    with tx.open(path) as f:
        assert list(f) == list(value)
        records = list(iter_records(f))
        text = list(text_lines(f))
    assert {r["path"][0] for r in records} == set(value)
    assert text[-1].startswith("-- ")
    for rec in records:
        json.dumps(rec)
    schema = tx.infer_schema(path)
    assert set(schema.roots) == set(value)
    tx.validate(path, schema)

    out = tmp_path / "out.jld2"
    convert(path, out)  # (Projekt_saranego's too: its struct fields of several types are declared Any)
    back = tx.load(out)
    assert tx.values_equal(back, value)
    with tx.open(out) as f:  # the JLD2 copy lists exactly as the BSON file does (notes aside)
        assert list(iter_records(f)) == [{k: v for k, v in r.items() if k != "note"} for r in records]
    with h5py.File(out, "r") as h:  # the independent reader sees every name and every array
        assert set(h) - {"_types"} == set(value)
        n_datasets = []
        h.visititems(lambda name, obj: n_datasets.append(name) if isinstance(obj, h5py.Dataset) else None)
        assert n_datasets


# The model-zoo MNIST convnet saved as ``params=cpu.(params(model)) acc epoch_idx`` (a parameter list and
# what the training loop stored beside it): the stored accuracy and epoch; the file of ../shared, then the
# bundled one.
MNIST_PARAMS_BSON = {
    "bson/dhairya_juliacon2020_mnist_conv2_params.bson": (0.9874, 11),
    "bson/tetsugps_mnist_conv_params.bson": (0.9928, 15),
}


def test_mnist_params_file_holds_the_reported_values() -> None:
    path, (acc, epoch) = require_one_of_table(MNIST_PARAMS_BSON)
    v = tx.load(path)
    assert v["acc"] == pytest.approx(acc) and v["acc"].dtype == np.float64
    assert v["epoch_idx"] == epoch and v["epoch_idx"].dtype == np.int64
    shapes = [a.shape for a in v["params"]]
    assert shapes == [(3, 3, 1, 16), (16,), (3, 3, 16, 32), (32,), (3, 3, 32, 32), (32,), (10, 288), (10,)]
    w = v["params"][0]
    assert w.dtype == np.float32 and w.flags.f_contiguous
    assert not w.flags.owndata  # a view of the file's map: zero-copy


def test_whole_model_holds_the_same_weights_as_its_params_file() -> None:
    params = tx.load(require_fixture("bson/dhairya_juliacon2020_mnist_conv2_params.bson"), "params")
    model = tx.load(require_fixture("bson/dhairya_juliacon2020_model_conv_chain.bson"), "model")
    arrays = _arrays(model)
    assert len(arrays) == len(params)
    for a, b in zip(arrays, params):
        np.testing.assert_array_equal(a, b)


# Whole Flux Chains of Dense layers in BSON: the first layer's activation, the number of layers, the first
# weight's shape (Julia out×in), the Dense with identity: the file of ../shared the test was written for,
# then a bundled one.
FULL_TYPE_CHAINS = {
    "bson/eliascarv_mlp.bson": ("NNlib.#relu", 4, (16, 784), 2),
    "bson/skacc_metafunctional_model.bson": ("NNlib.#softplus", 6, (512, 551), 5),
}


def test_full_types_and_function_singletons() -> None:
    path, (activation, n_layers, shape, linear) = require_one_of_table(FULL_TYPE_CHAINS)
    model = tx.load(path, "model")
    assert str(model.type).startswith(f"Flux.Chain{{Tuple{{Flux.Dense{{{activation}, Array{{Float32, 2}}")
    layers = model["1"]
    assert isinstance(layers, tuple) and len(layers) == n_layers
    dense = layers[0]
    assert list(dense.fields) == ["1", "2", "3"]  # BSON.jl stores fields by position only
    assert dense["1"].shape == shape
    assert dense["3"] == tx.Singleton(activation)
    if path.name == "eliascarv_mlp.bson":
        assert layers[3] == tx.Singleton("NNlib.#softmax")
    assert layers[linear].type.params[0] == tx.JuliaType("Base.#identity")  # Main.Base.#identity: old Julia


def test_tracker_arrays_read_as_their_data_with_a_note() -> None:
    path = require_fixture("bson/ooshita_mlp_tracker_pretrained.bson")
    model = tx.load(path, "pretrained")
    dense = model["1"][0]
    assert str(dense.type) == "Flux.Dense{NNlib.#relu, Array{Float64, 2}, Array{Float64, 1}}"
    w = dense["1"]
    assert isinstance(w, np.ndarray) and w.shape == (32, 784) and w.dtype == np.float64
    with tx.open(path) as f:
        node = f["pretrained"]["1"][0]["1"]
        assert node.kind == "array" and "gradient is dropped" in node.note
        notes = [r for r in iter_records(f) if "note" in r]
        assert len(notes) == 6
        assert any("gradient is dropped" in line for line in text_lines(f))


def test_closure_names_itself_and_is_never_run() -> None:
    model = tx.load(require_fixture("bson/dhairya_juliacon2020_model_conv_chain.bson"), "model")
    closures = [x for x in model["1"] if isinstance(x, tx.Closure)]
    assert len(closures) == 1
    c = closures[0]
    assert (c.name, c.module, c.file, c.line) == ("#3", "Main", "REPL[9]", 8)
    assert c.type.name == "Main.#3#4" and c.captures == ()
    assert isinstance(c, tx.Singleton) and "REPL[9]:8" in repr(c)
    path = require_fixture("bson/dhairya_juliacon2020_model_conv_chain.bson")
    with tx.open(path) as f:
        notes = [r for r in iter_records(f) if "note" in r]
    assert [(r["path"], r["kind"]) for r in notes] == [(["model", "1", 7], "singleton")]
    assert notes[0]["note"].startswith("closure #3 defined at REPL[9]:8")


def test_cuarray_reads_as_a_struct_of_pointers_and_is_told_apart() -> None:
    vae = tx.load(require_fixture("bson/deltadahl_vae_cuarray.bson"), "vae")
    conv = vae["1"]["1"][0]
    weight = conv["2"]
    assert is_device_array(weight) and weight.type.name == "CUDA.CuArray"
    assert not any(is_device_array(a) for a in _arrays(vae))
    assert not is_device_array(conv)


def test_dicts_and_backrefs_shared_objects() -> None:
    v = tx.load(require_fixture("bson/sameer_bertlike_spam.bson"))
    vocab = v["vocab"]
    assert isinstance(vocab, tx.JuliaDict) and len(vocab) == 52
    assert str(vocab.julia_type) == "Dict{String, Int64}"
    assert all(isinstance(k, str) and isinstance(x, np.int64) for k, x in vocab.items())
    assert v["max_seq_len"] == 20


# BSON files of two or more names (the first two): the file of ../shared, then a bundled one.
TWO_NAMES_BSON = {
    "bson/cohrint_vae_mnist.bson": ("encoder", "decoder"),
    "bson/paulvdl_ddpm_simpleunet.bson": ("opt", "model"),
}


def test_open_is_lazy_per_name_and_shares_backrefs() -> None:
    path, (first, second) = require_one_of_table(TWO_NAMES_BSON)
    with tx.open(path) as f:
        assert f.format_version == "BSON" and f.attrs == {}
        assert f._values == {}  # nothing read by opening
        f[first]
        assert list(f._values) == [first]
        assert f.read(second) is f.read(second)  # one session: one object


# BSON files of a whole Flux Chain whose first layer is a Dense (``model["1"][0]["1"]`` its weight, Julia
# out×in): the file of ../shared the test was written for, then a bundled one (julia_fixtures/SOURCES.md).
DENSE_CHAIN_BSON = {"bson/eliascarv_mlp.bson": (16, 784), "bson/skacc_metafunctional_model.bson": (512, 551)}


def test_storage_order_and_copies() -> None:
    path, out_in = require_one_of_table(DENSE_CHAIN_BSON)
    julia = tx.load(path, "model")["1"][0]["1"]
    storage = tx.load(path, "model", order="storage")["1"][0]["1"]
    copied = tx.load(path, "model", mmap=False)["1"][0]["1"]
    assert julia.shape == out_in and storage.shape == out_in[::-1] and storage.flags.c_contiguous
    np.testing.assert_array_equal(storage, julia.T)
    assert copied.flags.owndata and tx.values_equal(copied, julia)


# A BSON file and the first inspect record of one of its names: the file of ../shared the test was
# written for (its reported accuracy), then a bundled one (its optimiser, Adam(2e-4)).
CLI_BSON = {
    "bson/dhairya_juliacon2020_mnist_conv2_params.bson": (
        "acc",
        {"path": ["acc"], "kind": "number", "julia_type": "Float64", "value": 0.9874},
    ),
    "bson/paulvdl_ddpm_simpleunet.bson": (
        "opt",
        {
            "path": ["opt"],
            "kind": "struct",
            "julia_type": "Optimisers.Adam{Float32, Tuple{Float64, Float64}, Float64}",
        },
    ),
}


def test_command_line_on_bson_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from treexchange._cli import main

    path, (name, record) = require_one_of_table(CLI_BSON)
    assert main(["inspect", str(path), "--json", name]) == 0
    rec = json.loads(capsys.readouterr().out.splitlines()[0])
    assert rec == record
    out = tmp_path / "new.jld2"
    assert main(["convert", str(path), str(out)]) == 0
    assert tx.values_equal(tx.load(out), tx.load(path))
    capsys.readouterr()
    assert main(["diff", str(path), str(out)]) == 0  # the JLD2 copy holds the same tree
    assert capsys.readouterr().out.splitlines()[-1] == "no differences"
    copy = tmp_path / "model.weights"  # any name: a BSON file is told by its content
    copy.write_bytes(path.read_bytes())
    assert tx.values_equal(tx.load(copy, name), tx.load(path, name))
    if path.name == "dhairya_juliacon2020_mnist_conv2_params.bson":
        assert tx.load(copy, "epoch_idx") == 11


@pytest.mark.parametrize("path", PARAMS, ids=fixture_ids(BSON_FILES) if BSON_FILES else None)
def test_bson_nodes_follow_the_node_protocol(path: Path) -> None:
    with tx.open(path) as f:
        assert isinstance(f, LazyFile) and f.kind == "group" and f.path == ()
        for node, _ in walk_nodes(f):
            assert isinstance(node, LazyNode) and is_node(node)
            if node.kind in CONTAINER_KINDS:
                kids = list(node.children())
                assert len(kids) == len(node)
                assert [child.path for _, child in kids] == [(*node.path, seg) for seg, _ in kids]
            elif node.kind == "array":
                assert node.shape == node.read().shape and node.dtype == node.read().dtype
        entry = next(iter(f))
        assert tx.values_equal(f[entry].read(), tx.load(path, entry))


def test_a_shared_mutable_struct_is_one_object_listed_once() -> None:
    from treexchange._bson._writer import backref, bson_file, datatype, struct

    cell = struct(datatype("Main.Cell"), 1.5, "x")
    raw = bson_file({"a": (struct(datatype("Main.Pairish"), backref(1), backref(1)))}, [cell])
    a = tx.load(raw, "a")
    assert a["1"] is a["2"] and a["1"].mutable and not a.mutable
    with tx.open(raw) as f:
        records = list(iter_records(f))
    refs = [r for r in records if "ref" in r]
    assert [(r["path"], r["ref"]) for r in refs] == [(["a", "2"], ["a", "1"])]
    out = tx.load(raw)
    assert tx.values_equal(out["a"]["1"], tx.JuliaStruct("Main.Cell", {"1": np.float64(1.5), "2": "x"}))


def _schema_refs(doc: tx.Schema) -> dict[tuple[Any, ...], list[Any]]:
    return {path: node.target for path, node in iter_paths(doc.roots) if isinstance(node, RefNode)}


def test_a_mutable_struct_containing_itself_reads_as_a_cycle(tmp_path: Path) -> None:
    """BSON.jl writes ``n = Node(1, nothing); n.next = n`` as backref 1 whose field is backref 1, and
    a ring of two nodes as two backrefs naming each other. Both read as the cyclic object graph
    JLD2.jl's file of the same values reads as (it was refused as a cycle of backrefs)."""
    node = datatype("Main.Node")
    raw = bson_file(
        {"n": backref(1), "ring": backref(2), "holder": (struct(datatype("Main.Holder"), backref(1), 3.0))},
        [struct(node, 1, backref(1)), struct(node, 2, backref(3)), struct(node, 3, backref(2))],
    )
    values = tx.load(raw)
    n, ring = values["n"], values["ring"]
    assert n.mutable and n["2"] is n and n["1"] == 1
    assert ring["2"]["2"] is ring and ring["2"] is not ring and ring["2"]["1"] == 3
    assert values["holder"]["1"] is n  # shared with the root entry, not a copy
    # JLD2.jl's file of the same values holds the same graph: written and read back, equal, same refs
    tx.save(tmp_path / "cycle.jld2", **values)
    again = tx.load(tmp_path / "cycle.jld2")
    assert again["n"]["2"] is again["n"] and again["ring"]["2"]["2"] is again["ring"]
    assert tx.values_equal(again, values)
    (tmp_path / "cycle.bson").write_bytes(raw)
    refs = _schema_refs(tx.infer_schema(tmp_path / "cycle.bson"))
    assert refs == _schema_refs(tx.infer_schema(tmp_path / "cycle.jld2"))
    assert refs[("n", "2")] == ["n"] and refs[("ring", "2", "2")] == ["ring"]
    with tx.open(raw) as f:
        assert f["n"].read()["2"] is not None


def test_a_vector_any_containing_itself_reads_as_a_cycle(tmp_path: Path) -> None:
    """BSON.jl writes ``a = Any[]; push!(a, a)`` as backref 1 whose element is backref 1 (the
    vector is cached before its elements are lowered), and ``x = Any[1.0, Any[]]; push!(x[2], x)``
    with the cycle one level down. Both read as the one Python list containing itself that the
    JLD2 reader returns; convert writes JLD2.jl's form of it (h5py follows the reference back)."""
    raw = bson_file({"a": backref(1), "x": backref(2), "keep": 7}, [[backref(1)], [1.0, [backref(2)]]])
    values = tx.load(raw)
    a, x = values["a"], values["x"]
    assert isinstance(a, list) and len(a) == 1 and a[0] is a
    assert x[0] == 1.0 and x[1][0] is x and x[1] is not x
    src, out = tmp_path / "loop.bson", tmp_path / "loop.jld2"
    src.write_bytes(raw)
    convert(src, out)
    with h5py.File(out, "r") as f:
        assert f[f["a"][()][0]] == f["a"]  # the element is a reference to the vector's own dataset
        assert f[f[f["x"][()][1]][()][0]] == f["x"]
    again = tx.load(out)
    assert again["a"][0] is again["a"] and again["x"][1][0] is again["x"]
    assert tx.values_equal(again, values) and tx.values_equal(values, tx.load(raw))
    assert not tx.values_equal(a, x)
    refs = _schema_refs(tx.infer_schema(src))
    assert refs == _schema_refs(tx.infer_schema(out)) == {("a", 1): ["a"], ("x", 2, 1): ["x"]}
    with tx.open(raw) as f:
        text = "\n".join(text_lines(f))
    assert "cycle: back to a" in text and "cycle: back to x" in text


def test_a_dict_holding_itself_reads_as_a_cycle_and_is_refused_as_jld2(tmp_path: Path) -> None:
    """BSON.jl stores ``d = Dict{Any,Any}(); d[1] = d`` as a struct whose values hold a backref to
    it, and a ``Dict{Symbol,Any}`` holding itself as a document holding a backref to itself; its
    load makes the Dict before its pairs, so both read as a dict containing itself. JLD2 stores a
    Dict as its pairs, with no form for one among them: converting it is a clear error."""
    any_ = datatype("Core.Any")
    raw = bson_file(
        {"d": backref(1), "s": backref(2)},
        [struct(datatype("Base.Dict", any_, any_), [1, "k"], [backref(1), 2.0]), {"me": backref(2), "n": 3}],
    )
    values = tx.load(raw)
    d, s = values["d"], values["s"]
    assert d[1] is d and d["k"] == 2.0 and str(d.julia_type) == "Dict{Any, Any}"
    assert s[tx.Symbol("me")] is s and s[tx.Symbol("n")] == 3
    assert tx.values_equal(values, tx.load(raw)) and not tx.values_equal(d, s)
    src = tmp_path / "d.bson"
    src.write_bytes(raw)
    assert _schema_refs(tx.infer_schema(src)) == {("d", "1"): ["d"], ("s", "me"): ["s"]}
    with pytest.raises(tx.ConversionError, match="Dict that contains itself") as err:
        convert(src, tmp_path / "d.jld2")
    assert err.value.path == ("d", "1")
    assert not (tmp_path / "d.jld2").exists()
    # a Dict whose keys Python cannot hash holding itself has no Python form either
    keyed = struct(datatype("Base.Dict", any_, any_), [[1.0]], [backref(1)])
    with pytest.raises(tx.UnsupportedError, match="Dict holding itself"):
        tx.load(bson_file({"d": backref(1)}, [keyed]))


def test_a_cycle_through_a_value_that_is_not_a_struct_is_still_refused() -> None:
    """Only a struct is made before its contents: a NamedTuple holding itself has no Julia meaning."""
    nt = datatype("Core.NamedTuple", (tx.Symbol("a"),), datatype("Core.Tuple", datatype("Core.Any")))
    with pytest.raises(tx.UnsupportedError, match="cycle"):
        tx.load(bson_file({"x": backref(1)}, [struct(nt, backref(1))]))


def test_an_nd_array_any_holding_itself_is_refused_as_bson_jl_builds_no_cycle_of_it() -> None:
    """BSON.jl writes ``a = Array{Any}(undef, 2, 1); a[1] = a`` as an ``array`` document whose
    element is a backref to it, but its load does not make the cycle: ``_raise_recursive`` caches
    an ``array`` document only after ``tags[:array]`` built it, and that copies the elements
    (``Array{T}(reshape(data, size...))``), so the inner reference becomes a second array holding
    the raw ``Dict{Symbol,Any}`` document. No Julia value to mirror: refused, with the path (a
    ``Vector{Any}`` is a BSON array BSON.jl caches before its elements, and reads as a cycle)."""
    any_ = datatype("Core.Any")
    raw = bson_file(
        {"a": backref(1)}, [{"tag": "array", "type": any_, "size": [2, 1], "data": [backref(1), 1.0]}]
    )
    with pytest.raises(tx.UnsupportedError, match="cycle of backrefs") as err:
        tx.load(raw)
    assert err.value.path == ("a", 1)


def test_diff_of_a_bson_file_and_its_jld2_copy_agrees_with_values_equal(tmp_path: Path) -> None:
    """Scalars no numpy dtype holds (a pointer's bits, an Int128) are described alike on both
    sides: ``diff`` reports nothing where ``values_equal`` is true."""
    from treexchange._bson._writer import primitive
    from treexchange._cli import main

    ptr = datatype("Core.Ptr", datatype("Core.Nothing"))
    entries = {
        "buf": struct(datatype("Main.Buffer"), primitive(ptr, (1234).to_bytes(8, "little")), 7),
        "big": primitive(datatype("Core.Int128"), (-5).to_bytes(16, "little", signed=True)),
        "ubig": primitive(datatype("Core.UInt128"), (2**100).to_bytes(16, "little")),
    }
    path = tmp_path / "in.bson"
    path.write_bytes(bson_file(entries))
    out = tmp_path / "out.jld2"
    convert(path, out)
    value = tx.load(path)
    assert isinstance(value["buf"]["1"], tx.JuliaBits)
    assert tx.values_equal(tx.load(out), value)
    assert not tx.diff(path, out), tx.diff(path, out).text()
    assert main(["diff", str(path), str(out)]) == 0


def test_int128_reads_as_the_numbers_jld2_gives_for_the_same_values(tmp_path: Path) -> None:
    """BSON.jl stores an ``Int128`` / ``UInt128`` as its 16 little-endian bytes (a primitive
    ``struct``, or an ``array`` of them): they read as :class:`tx.Int128` / :class:`tx.UInt128`,
    equal to what JLD2.jl's file of the same values reads as (they were raw ``JuliaBits``), and
    ``diff`` of the BSON file and a JLD2 file written from the values finds nothing."""
    from treexchange._bson._writer import primitive
    from treexchange._cli import main

    def wide(x: int, signed: bool) -> bytes:
        return x.to_bytes(16, "little", signed=signed)

    raw = bson_file(
        {
            "i": primitive(datatype("Core.Int128"), wide(-(2**100), True)),
            "small": primitive(datatype("Core.Int128"), wide(-5, True)),
            "u": primitive(datatype("Core.UInt128"), wide(2**127 + 3, False)),
            "v": {
                "tag": "array",
                "type": datatype("Core.Int128"),
                "size": [3],
                "data": b"".join(wide(x, True) for x in (1, -(2**127), 2**127 - 1)),
            },
            "m": {
                "tag": "array",
                "type": datatype("Core.UInt128"),
                "size": [1, 2],
                "data": wide(7, False) + wide(2**128 - 1, False),
            },
            "rng": struct(datatype("Main.LehmerRNG"), primitive(datatype("Core.UInt128"), wide(99, False))),
        }
    )
    got = tx.load(raw)
    assert type(got["i"]) is tx.Int128 and got["i"] == -(2**100) and str(got["i"]) == str(-(2**100))
    assert type(got["small"]) is tx.Int128 and type(got["u"]) is tx.UInt128 and got["u"] == 2**127 + 3
    assert got["v"].tolist() == [1, -(2**127), 2**127 - 1] and all(type(x) is tx.Int128 for x in got["v"])
    assert got["m"].shape == (1, 2) and got["m"].tolist() == [7, 2**128 - 1]
    assert type(got["rng"]["1"]) is tx.UInt128
    src, out = tmp_path / "w.bson", tmp_path / "w.jld2"
    src.write_bytes(raw)
    tx.save(out, **got)  # JLD2.jl's form: 16-byte HDF5 integers (h5py sees the width and sign)
    with h5py.File(out, "r") as h:
        t = h["i"].id.get_type()
        assert isinstance(t, h5py.h5t.TypeIntegerID) and t.get_size() == 16 and t.get_sign() == h5py.h5t.SGN_2
        assert h["u"].id.get_type().get_sign() == h5py.h5t.SGN_NONE and h["m"].shape == (2, 1)
    back = tx.load(out)
    assert tx.values_equal(back, got) and type(back["rng"]["1"]) is tx.UInt128
    assert not tx.diff(src, out), tx.diff(src, out).text()
    assert main(["diff", str(src), str(out)]) == 0
    with tx.open(src) as f, tx.open(out) as g:  # the nodes describe them alike
        assert list(iter_records(f)) == list(iter_records(g))
        assert f["v"].kind == "array" and np.asarray(f["v"]).tobytes() == np.asarray(g["v"]).tobytes()
        assert f["small"].dtype is None


def test_a_closure_keeps_what_it_captured_as_the_fields_of_its_struct() -> None:
    """B0B36JUL-FinalProjects-2022/Projekt_saranego's ResNet: ``SkipConnection(…, (mx, x) -> mx +
    downsample(x))``, closures that captured a trained ``Chain(Conv((1, 1), 4 => 8), BatchNorm(8))``.
    The captured values are read with their names; ``inspect`` shows the closure as what it is in
    Julia, a struct of its type whose fields are the captures; a closure with captures is equal
    only to one with equal captures, or to that struct (what its written copy reads back as:
    tests/test_closure_captures.py, which writes it)."""
    path = BUNDLED_DIR / "bson" / "saranego_resnet_closure.bson"
    model = tx.load(path, "model")
    block = model["2"]["1"][0]["1"]["1"][0]["1"]["1"][0]  # layer 1, block 1: the SkipConnection
    closure = block["2"]
    assert isinstance(closure, tx.Closure) and closure.capture_names == ("downsample",)
    (downsample,) = closure.captures
    conv, norm = downsample["1"]
    assert conv["2"].shape == (1, 1, 4, 8) and norm["2"].shape == (8,)
    assert not tx.values_equal(closure, tx.Singleton(closure.type))
    assert closure != tx.Singleton(closure.type) and closure != tx.Closure(closure.type, captures=(1,))
    assert tx.values_equal(closure, tx.load(path, "model")["2"]["1"][0]["1"]["1"][0]["1"]["1"][0]["2"])
    as_struct = tx.JuliaStruct(closure.type, {"downsample": downsample})
    assert closure == as_struct and as_struct == closure and tx.values_equal(as_struct, closure)
    with tx.open(path) as f:
        records = list(iter_records(f))
    notes = [r["note"] for r in records if "note" in r and "closure" in r["note"]]
    assert notes and all("captures downsample: Flux.Chain" in n for n in notes)
    shown = [r for r in records if "note" in r and "closure" in r["note"]]
    assert all(r["kind"] == "struct" and r["julia_type"].startswith(f"{closure.type.name}{{") for r in shown)
    captured = {tuple(r["path"][-2:]) for r in records if r["path"][-1:] == ["downsample"]}
    assert captured == {("2", "downsample")}  # the field of each closure's struct

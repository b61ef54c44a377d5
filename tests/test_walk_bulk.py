"""A lazy walk over Dicts and layers read in bulk sees what ``load`` reads.

The walk decodes a Dict's String keys together (``_bulktext.vlen_texts``: one Latin-1 text per
heap collection, non-ASCII keys decoded from their bytes), makes array nodes straight from the
descriptions ``Reader.prime`` left (``described_array``), and reads the Pairs of all the Dicts
of a Dict of Dicts at once (``Reader._prime_pairs``), their keys too. Each of those is checked
here against ``treexchange.load`` (the eager path, which shares none of them): every key in
order, every shape, dtype and value, for trees that mix what the bulk paths take with what they
leave to the one-by-one path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import treexchange as tx
from treexchange import JuliaDict, NamedTuple
from treexchange._jld2 import _bulktext, _nodes, _reader


def _dict_of_dicts() -> JuliaDict:
    rng = np.random.default_rng(0)
    shared = rng.standard_normal(3).astype(np.float32)
    tree = JuliaDict()
    for g in range(40):
        inner = tree.setdefault(f"g{g:03d}", JuliaDict())
        for i in range(35 + g % 3):
            key = f"κ{i}" if i % 9 == 0 else f"w{g}_{i}" + "x" * (i % 5)
            inner[key] = shared if i == 7 else rng.standard_normal((2, i % 4 + 1)).astype(np.float32)
    tree["ints"] = JuliaDict({i: np.arange(i + 1.0) for i in range(40)})  # not String keys
    tree["empty"] = JuliaDict()
    return tree


def _flat_dict() -> JuliaDict:
    rng = np.random.default_rng(1)
    return JuliaDict({("é" if i % 50 == 0 else "") + f"l{i}": rng.standard_normal(4) for i in range(500)})


def _layers() -> NamedTuple:
    rng = np.random.default_rng(2)
    layers = tuple(
        NamedTuple(weight=rng.standard_normal((3, 2)).astype(np.float32), bias=np.zeros(3, np.float32))
        for _ in range(60)
    )
    return NamedTuple(layers=layers, σ=(), lookup=_flat_dict())


def _walk(node: Any, loaded: Any) -> int:
    """Compare the lazy ``node`` with the loaded value; the number of arrays met."""
    if node.kind == "array":
        value = np.asarray(loaded)
        assert node.shape == value.shape and node.dtype == value.dtype
        np.testing.assert_array_equal(np.asarray(node), value)
        return 1
    if node.kind in ("tuple", "vector"):
        assert len(node) == len(loaded)
        return sum(_walk(node[i], loaded[i]) for i in range(len(node)))
    if hasattr(node, "keys"):
        assert list(node.keys()) == list(loaded.keys())
        return sum(_walk(node[k], loaded[k]) for k in node.keys())
    assert node.read() == loaded
    return 0


@pytest.mark.parametrize("make", [_dict_of_dicts, _flat_dict, _layers], ids=["dicts", "flat", "layers"])
def test_lazy_walk_matches_load(make: Any, tmp_path: Path) -> None:
    path = tmp_path / "tree.jld2"
    tx.save(path, st=make())
    loaded = tx.load(path)["st"]
    with tx.open(path) as f:
        arrays = _walk(f["st"], loaded)
    assert arrays > 400


def test_one_entry_of_a_dict_of_dicts(tmp_path: Path) -> None:
    """Reaching one entry first (before any walk) gives the same node a walk gives."""
    path = tmp_path / "tree.jld2"
    tree = _dict_of_dicts()
    tx.save(path, st=tree)
    with tx.open(path) as f:
        node = f["st"]["g017"]["κ9"]
        np.testing.assert_array_equal(np.asarray(node), tree["g017"]["κ9"])
        assert node.path == ("st", "g017", "κ9")
        assert list(f["st"]["g039"].keys()) == list(tree["g039"].keys())


def test_key_of_a_missing_heap_object_is_refused(tmp_path: Path) -> None:
    """A Dict key whose heap object is not in its collection (the object's index overwritten)
    is refused with a FormatError by the bulk key decoding, as the one-by-one path does."""
    path = tmp_path / "tree.jld2"
    tx.save(path, st=JuliaDict({f"key{i:04d}": np.arange(3.0) + i for i in range(100)}))
    raw = bytearray(path.read_bytes())
    at = raw.index(b"key0042")
    assert int.from_bytes(raw[at - 8 : at], "little") == 7  # the object's size, before it its index
    raw[at - 16 : at - 14] = (60000).to_bytes(2, "little")
    path.write_bytes(bytes(raw))
    with tx.open(path) as f, pytest.raises(tx.FormatError, match="no object"):
        list(f["st"].keys())


@pytest.mark.parametrize("parsed", [0, 3, 40], ids=["none", "few", "many"])
def test_described_arrays_is_described_array_of_each(parsed: int, tmp_path: Path) -> None:
    """``Reader.described_arrays`` (a Dict's values at once) gives what ``described_array``
    gives one address at a time, whichever of the headers were parsed since they were vouched
    for (those are looked up one by one when few, by a loop over all when many), for repeated
    addresses, undefined references (0), and values that are no numeric array."""
    rng = np.random.default_rng(5)
    shared = rng.standard_normal(3)
    tree = JuliaDict({f"a{i}": rng.standard_normal(i % 3 + 1) for i in range(60)})
    tree["again"], tree["twice"], tree["text"] = shared, shared, "not an array"
    path = tmp_path / "tree.jld2"
    tx.save(path, st=tree)
    with tx.open(path) as f:
        st = f["st"]
        np.testing.assert_array_equal(np.asarray(st["a0"]), tree["a0"])  # values vouched for
        reader, refs = st._reader, list(st._refs)
        for address in refs[5 : 5 + parsed]:
            reader.info(address)  # its own header made: in the file's objects, not vouched for
        addresses = [*refs, 0, *refs[:7], refs[-1]]
        expected = [reader.described_array(a) for a in addresses]
        assert reader.described_arrays(addresses) == expected
        assert sum(e is not None for e in expected) == len(addresses) - 3  # text, 0, text
        assert len(reader.h5._objects.keys() & set(refs)) >= parsed


def test_array_with_data_outside_the_file_is_described_then_refused(tmp_path: Path) -> None:
    """Describing a Dict's values in bulk does not check where their data lie (``Reader.prime``
    vouches for array headers alike but for their layout): an array whose data address lies
    outside the file gets its node, shape and dtype as the others do, and reading it is refused
    with a FormatError, as the one-by-one path does."""
    tree = JuliaDict({f"a{i:03d}": np.full(500, float(i)) for i in range(80)})  # (contiguous data)
    path = tmp_path / "tree.jld2"
    tx.save(path, st=tree)
    with tx.open(path) as f:
        reader = f["st"]._reader
        address = f["st"]["a040"].object_address
        data_at = reader.h5.raw_location(reader.info(address))[0] - reader.h5.base
    raw = bytearray(path.read_bytes())
    # the layout message's body: version (3 or 4), class 1 (contiguous), the data address
    layouts = [bytes([v, 1]) + data_at.to_bytes(8, "little") for v in (3, 4)]
    assert sum(raw.count(layout) for layout in layouts) == 1
    at = max(raw.find(layout) for layout in layouts) + 2
    raw[at : at + 8] = (len(raw) + 4096).to_bytes(8, "little")
    path.write_bytes(bytes(raw))
    with tx.open(path) as f:
        st = f["st"]
        nodes = [st[k] for k in st.keys()]  # a walk: every value described
        assert [(n.shape, n.dtype) for n in nodes] == [((500,), np.dtype(np.float64))] * 80
        np.testing.assert_array_equal(np.asarray(nodes[41]), tree["a041"])
        with pytest.raises(tx.FormatError):
            np.asarray(nodes[40])


def _few_dicts() -> JuliaDict:
    """An outer Dict of few Dicts (fewer than the bulk threshold of keys): its keys are decoded
    with the inner Dicts' keys (``Reader.prime(keys=...)``), not one by one."""
    rng = np.random.default_rng(3)
    return JuliaDict(
        {
            ("é" if g == 3 else "") + f"g{g}": JuliaDict({f"l{i}": rng.standard_normal(2) for i in range(40)})
            for g in range(6)
        }
    )


def test_outer_keys_decoded_with_the_inner_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "tree.jld2"
    tree = _few_dicts()
    tx.save(path, st=tree)
    calls: list[int] = []
    real = _bulktext.vlen_texts

    def spy(h5: Any, buf: Any, offsets: Any, more: Any = None) -> Any:
        found = real(h5, buf, offsets, more)
        if more is not None and found is not None:
            calls.append(len(found) - len(offsets))
        return found

    monkeypatch.setattr(_reader, "vlen_texts", spy)
    with tx.open(path) as f:
        node = f["st"]
        assert list(node.keys()) == list(tree.keys())
        assert _walk(node, tx.load(path)["st"]) == 240
    assert calls == [6]  # the outer Dict's 6 keys, in the inner keys' pass


def test_damaged_outer_key_refused_as_one_by_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An outer key whose heap object is missing stops the joint pass; the one-by-one path then
    reports it, in the same words and at the same path as without the joint pass."""
    path = tmp_path / "tree.jld2"
    tx.save(path, st=_few_dicts())
    raw = bytearray(path.read_bytes())
    at = raw.index(b"g4\0")
    assert int.from_bytes(raw[at - 8 : at], "little") == 2  # the object's size, before it its index
    raw[at - 16 : at - 14] = (60000).to_bytes(2, "little")
    path.write_bytes(bytes(raw))
    errors = []
    for joint in (True, False):
        if not joint:
            monkeypatch.setattr(_nodes, "_key_elements", lambda pairs: None)
        with tx.open(path) as f, pytest.raises(tx.FormatError, match="no object") as err:
            list(f["st"].keys())
        errors.append((str(err.value), err.value.path))
    assert errors[0] == errors[1]


def test_pair_runs_are_where_each_pair_was_read(tmp_path: Path) -> None:
    """Each inner Dict's Pairs, as ``Reader._prime_pairs`` records them (one run of the bytes it
    read for all of them, none kept by address), are each Pair's own element bytes, read from
    its own header address by address."""
    path = tmp_path / "tree.jld2"
    tree = _few_dicts()
    tx.save(path, st=tree)
    with tx.open(path) as f:
        node = f["st"]
        assert _walk(node, tx.load(path)["st"]) == 240
        reader = node._reader
        runs = list(reader._pair_runs.values())
        assert len(runs) == 6 and not set(reader._elements).intersection(*(found for found, *_ in runs))
        for found, info, blob, offsets in runs:
            assert len(found) == len(offsets) == 40
            for address, at in zip(found, offsets):
                own = reader.info(address)  # (its own header parsed)
                assert own.plan is not None and own.plan.size == info.plan.size
                assert reader.element_bytes(own) == blob[at : at + info.plan.size]


def test_values_handed_to_inner_dicts_are_what_each_finds(tmp_path: Path) -> None:
    """The references and described arrays ``Reader._prime_pairs`` finds for all the inner Dicts
    at once (``Reader.primed_values``) and hands to each when it is made are what the Dict's own
    pass (``_nodes._vouched_values``) finds for it; a Dict with few values, or with a value that
    is no array, is left to its own pass. The walk then sees what ``load`` reads."""
    rng = np.random.default_rng(4)
    shared = np.arange(6, dtype=np.int16).reshape(2, 3)
    tree = JuliaDict()
    for g, n in enumerate((40, 33, 20, 50, 36)):
        inner = tree.setdefault(f"g{g}", JuliaDict())
        for i in range(n):
            dtype = (np.float32, np.float64)[i % 2]
            inner[f"l{i}"] = shared if i == 5 else rng.standard_normal((i % 4 + 1, 2)).astype(dtype)
    tree["g4"]["l9"] = "no array"
    path = tmp_path / "tree.jld2"
    tx.save(path, st=tree)
    with tx.open(path) as f:
        outer = f["st"]
        reader = outer._reader
        handed = []
        for key in outer.keys():
            node = outer[key]
            assert isinstance(node, _nodes.DictNode)
            if node._vouched:  # handed over when made: nothing looked up in it yet
                handed.append(key)
                assert node._refs is not None and node._arrays is not None
                pairs = (node._pair_plans, node._pair_bufs, node._pair_offs)
                own = _nodes._vouched_values(reader, pairs, node.path)
                assert own is not None and own[1] is not None
                assert own[0] == node._refs and len(own[1]) == len(node._arrays)
                assert all(a is b for a, b in zip(own[1], node._arrays))
        assert handed == ["g0", "g1", "g3"]
        assert _walk(outer, tx.load(path)["st"]) == 40 + 33 + 20 + 50 + 35


def test_described_all_is_described_arrays(tmp_path: Path) -> None:
    """``Reader.described_all`` (the values of a Dict just primed, told at once) gives what
    ``described_arrays`` gives one by one: for the primed group exactly, and for anything else
    (a part of it, another order, an undefined reference) by asking ``described_arrays``."""
    rng = np.random.default_rng(6)
    path = tmp_path / "tree.jld2"
    tx.save(path, st=JuliaDict({f"a{i}": rng.standard_normal(4) for i in range(80)}))
    with tx.open(path) as f:
        st = f["st"]
        assert st["a0"].shape == (4,)  # (the first look at a value primes them all)
        reader, refs = st._reader, list(st._refs)
        assert reader._primed_arrays is not None and reader._primed_arrays[1] == refs
        for asked in (refs, refs[:10], refs[::-1], [*refs[:3], 0]):
            assert reader.described_all(asked) == reader.described_arrays(asked)
        info = reader.described_all(refs)[0]
        assert info is not None and info.dtype == np.float64 and info.shape == (4,)


def _pair_vector_of(f: Any, address: int) -> Any:
    reader = f.reader
    info = reader.describe(address, ("d",))
    return reader.pair_vector(info.plan, reader.element_bytes_at(info, address, ("d",)), 0, ("d",))


@pytest.mark.parametrize("target", ["array", "scalar"])
def test_dict_whose_pair_vector_is_no_vector_of_references(target: str, tmp_path: Path) -> None:
    """A Dict whose ``kvvec`` reference points at an array of numbers or at a scalar dataset is
    refused where it lies, by the path through the vector's node: the bulk read of a Dict's vector
    of Pairs (``Reader.pair_vector``) reads only vectors of references, and leaves it."""
    path = tmp_path / "tree.jld2"
    tx.save(path, d=JuliaDict({f"k{i}": np.arange(3.0) + i for i in range(40)}), x=np.arange(5.0), s=2.5)
    raw = bytearray(path.read_bytes())
    with tx.open(path) as f:
        links = f.reader.links(f.reader.root_address)
        layout = f.reader.h5.object(links["d"]).layout
        assert layout is not None and layout.data_offset is not None and layout.data_size == 8
        at = layout.data_offset  # the SerializedDict's one field: the reference to its Pairs
        found = _pair_vector_of(f, links["d"])
        assert found is not None and len(found[0]) == 40  # (the bulk read of the intact file)
    raw[at : at + 8] = links["x" if target == "array" else "s"].to_bytes(8, "little")
    with tx.open(bytes(raw)) as f:
        assert _pair_vector_of(f, links["d"]) is None
        with pytest.raises(tx.FormatError, match="not a vector of Pairs") as err:
            f["d"]
    assert err.value.path == ("d",)

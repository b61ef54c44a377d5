"""Lazy Julia ``Dict`` nodes: keys read from the pairs when the node is made, values made on access
at their own paths, lookups by key through an index. Everything a walk gives must equal the
eager ``load`` of the same file, for Python-written and Julia-written files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import fixture_files, fixture_ids

import treexchange as tx
from treexchange import JuliaDict, NamedTuple, values_equal
from treexchange._jld2._nodes import ContainerNode, DictNode

JULIA_DICT_FIXTURES = [
    p
    for p in fixture_files()
    if p.name
    in {"struct_reconstruction.jld2", "seriesforecast_data.jld2", "gmg_test.jld2", "betaml_test.jld2"}
]


def walked(node: Any) -> Any:
    """The value of ``node`` rebuilt from its children (dict entries looked up by key), checking
    every child's path and membership on the way."""
    if isinstance(node, ContainerNode) and node.kind == "dict":
        out = {}
        for seg, child in node.children():
            key = next(k for s, k in node._all() if s == seg)
            assert key in node
            looked_up = node[key]
            if child.kind == "array":  # made again when asked (see ContainerNode): the same array
                assert looked_up is not child and looked_up.object_address == child.object_address
                assert looked_up.path == child.path and looked_up.shape == child.shape
            else:
                assert looked_up is child  # made once, cached
            assert child.path == (*node.path, seg)
            out[key] = walked(child)
        assert len(out) == len(node)
        return out
    return node.read()


def _state() -> dict[str, Any]:
    rng = np.random.default_rng(5)
    # JuliaDict: save writes a plain str-keyed dict as a NamedTuple (docs/writing.md), and these
    # tests are about Julia Dict nodes.
    flat = JuliaDict({f"k{i:03d}": rng.standard_normal(3).astype(np.float32) for i in range(100)})
    return JuliaDict(
        {
            "flat": flat,
            "nested": JuliaDict(
                {
                    f"g{g}": JuliaDict({f"w{i}": np.full((2, 2), g * 10 + i, np.int64) for i in range(20)})
                    for g in range(5)
                }
            ),
            "ints": {i * 7: float(i) for i in range(40)},
            "mixed": {1: "one", "two": 2, 3.5: [1, 2], "nt": NamedTuple(a=1, b=np.zeros(2))},
            "empty": JuliaDict(),
            "tiny": JuliaDict({"a": 1}),
        }
    )


def test_python_written_dicts_walk_like_load(tmp_path: Path) -> None:
    path = tmp_path / "d.jld2"
    state = _state()
    tx.save(path, st=state)
    eager = tx.load(path, "st")
    with tx.open(path) as f:
        root = f["st"]
        assert isinstance(root, DictNode)
        assert values_equal(walked(root), eager)
        assert values_equal(root.read(), eager)
        flat = root["flat"]
        assert flat.keys() == list(state["flat"])
        assert "k099" in flat and "k100" not in flat and 5 not in flat
        with pytest.raises(KeyError):
            flat["nope"]
        ints = root["ints"]
        # Keys read back as numpy Int64 scalars; Python ints (and other numpy ints) find them.
        assert ints[7 * 39].read() == 39.0 and ints[np.int32(14)].read() == 2.0
        assert 8 not in ints and [1, 2] not in ints  # an unhashable key is simply absent
        assert root["mixed"][3.5].read() == [1, 2]
        assert root["mixed"]["nt"]["b"].path == ("st", "mixed", "nt", "b")
        assert root["empty"].keys() == [] and len(root["empty"]) == 0


@pytest.mark.parametrize("path", JULIA_DICT_FIXTURES, ids=fixture_ids(JULIA_DICT_FIXTURES))
def test_julia_written_dicts_walk_like_load(path: Path) -> None:
    eager = tx.load(path)
    seen_dict = False
    with tx.open(path) as f:
        for name in f:
            node = f[name]
            got = walked(node) if isinstance(node, ContainerNode) else node.read()
            assert values_equal(got, eager[name]), name
            seen_dict |= _has_dict(node)
    assert seen_dict


def _has_dict(node: Any) -> bool:
    if isinstance(node, ContainerNode):
        return node.kind == "dict" or any(_has_dict(c) for _, c in node.children())
    return False


def test_large_flat_dict_lookup_by_every_key(tmp_path: Path) -> None:
    n = 3000
    path = tmp_path / "flat.jld2"
    tx.save(path, st=JuliaDict({f"leaf{i}": np.int64(i) for i in range(n)}))
    with tx.open(path) as f:
        node = f["st"]
        assert [node[f"leaf{i}"].read() for i in range(n)] == list(range(n))
        assert node[f"leaf{n - 1}"].path == ("st", f"leaf{n - 1}")


def test_dict_values_at_the_path_bound_are_refused(tmp_path: Path) -> None:
    """A Dict whose values' paths would pass the reader's bound refuses each of them with a
    LimitError naming its path, on the walk's fast path (many arrays, vouched for) as on the
    general one; a Dict made within the bound gives its arrays."""
    path = tmp_path / "dod.jld2"
    inner = {f"l{i:03d}": np.full(2, i, np.float32) for i in range(40)}  # enough for bulk vouching
    tx.save(path, st=JuliaDict({f"g{j}": JuliaDict(inner) for j in range(5)}))
    with tx.open(path) as f:
        outer = f["st"]
        within = outer["g0"]
        assert within["l007"].shape == (2,)
        outer._reader.max_path = len(outer.path) + 1  # (as if the inner Dicts lay at the bound)
        at_bound = outer["g1"]
        assert isinstance(at_bound, DictNode)
        for key in ("l007", "l008"):  # the first vouches for all values, the second is a walk's
            with pytest.raises(tx.LimitError) as err:
                at_bound[key]
            assert err.value.path is not None and err.value.path[:2] == ("st", "g1")
        assert at_bound._arrays is not None  # (the second took the fast path)


def test_alike_values_that_are_not_arrays(tmp_path: Path) -> None:
    """Dicts whose many alike values are no arrays (Dicts: one header form for all, vouched for
    with the outer Dict's walk) give each as the Dict it is, not as an array node, on the first
    lookup and on the walk's later ones."""
    path = tmp_path / "dicts.jld2"
    value = JuliaDict(
        {
            f"g{j}": JuliaDict({f"m{k}": JuliaDict({"a": np.zeros(2), "b": np.ones(3)}) for k in range(5)})
            for j in range(5)
        }
    )
    tx.save(path, st=value)
    with tx.open(path) as f:
        outer = f["st"]
        for middle in ("g0", "g3"):
            for key in ("m0", "m1", "m4"):
                child = outer[middle][key]
                assert child.kind == "dict" and values_equal(child.read(), value[middle][key])
        # headers vouched for as alike to one Dict's: no array among them, however many
        reader = outer._reader
        alike = [a for a in outer["g3"]._refs if a in reader.h5.enter_vouched()]
        assert len(alike) >= 2 and reader.described_arrays(alike) == [None] * len(alike)

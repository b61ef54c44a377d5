"""Type parameters read the short way (TypeResolver._scalar_param, _committed_param) are exactly
what the general way gives: a parameter dataset read as a value in a session of its own, and a
committed type's full plan. Checked on every real file in ../shared, after a lazy walk (what the
short ways serve) and a full load."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import all_fixtures_or_skip, fixture_ids, require_fixture

import treexchange as tx
from treexchange._jld2._plans import type_of_value

FILES = all_fixtures_or_skip("**/*.jld2")


def _walk(node: Any, budget: list[int]) -> None:
    """Visit up to ``budget[0]`` nodes below ``node`` (their metadata only)."""
    if budget[0] <= 0 or not hasattr(node, "keys"):
        return
    for key in node.keys():
        budget[0] -= 1
        if budget[0] <= 0:
            return
        _walk(node[key], budget)


@pytest.mark.parametrize("path", FILES, ids=fixture_ids([p for p in FILES if isinstance(p, Path)]))
def test_short_type_parameters_match_the_general_read(path: Path) -> None:
    with tx.open(path) as f:
        try:
            _walk(f, [3000])
        except tx.TreexchangeError:
            pytest.skip("the walk stops at an error (the file's own tests say which)")
        reader = f.reader
        types = reader.types
        for ref, value in list(types._params.items()):
            if types.is_committed_datatype(ref):
                assert types.committed(ref).julia_type == value, ref
            else:
                assert type_of_value(reader.load_standalone(ref, ())) == value, ref
        for address, jt in list(types.committed_types.items()):
            assert types.committed(address).julia_type == jt, address


def test_a_walk_plans_only_the_committed_types_it_meets() -> None:
    """A Flux state's NamedTuple type names each layer's NamedTuple type as a parameter: opening
    the state decodes those names, and plans a layer's type only once a layer is looked at."""
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    with tx.open(path) as f:
        state = f["lenet_state"]
        types = f.reader.types
        named_only = set(types.committed_types) - set(types._committed)
        assert named_only  # layer types known by name, not planned
        conv = state["layers"][0]
        assert conv.kind == "namedtuple" and conv["weight"].shape == (5, 5, 1, 6)
        for address in named_only:
            assert types.committed(address).julia_type == types.committed_types[address]

"""Property: whatever Python tree ``save`` is given, it either writes a file that reads back as
``to_julia`` of the tree, or raises a ``TreexchangeError`` carrying the tree path; never another
exception, never a partial file."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings, strategies as st

import treexchange
from treexchange import (
    JuliaArray,
    JuliaBits,
    JuliaDict,
    JuliaStruct,
    NamedTuple,
    Symbol,
    to_julia,
    values_equal,
)


class _Liar(list):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 3


_text = st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xFFFF), max_size=6)
_leaves = st.one_of(
    st.integers(min_value=-(2**130), max_value=2**130),
    st.floats(allow_nan=True),
    st.booleans(),
    st.none(),
    _text,
    _text.map(Symbol),
    st.complex_numbers(allow_nan=False, max_magnitude=1e6),
    st.sampled_from([np.float32(1.5), np.int8(-3), np.uint64(2**64 - 1), np.zeros((2, 3), np.float32)]),
    st.sampled_from([object(), {1, 2}, b"raw", np.array(["a"], dtype=object), np.longdouble(1)]),
    st.binary(min_size=1, max_size=4).map(lambda b: JuliaBits("Main.E", b)),
)


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=3),
        st.lists(children, max_size=3).map(tuple),
        st.lists(children, max_size=3).map(_Liar),
        st.dictionaries(_text, children, max_size=3),
        st.dictionaries(st.integers(-5, 5), children, max_size=3),
        st.dictionaries(_text, children, max_size=3).map(JuliaDict),
        st.dictionaries(_text, children, max_size=3).map(lambda d: NamedTuple(list(d.items()))),
        st.dictionaries(_text, children, max_size=3).map(lambda d: JuliaStruct("Main.S", d)),
        st.lists(_text, max_size=3).map(lambda xs: JuliaArray("Core.String", xs)),
    )


_trees = st.recursive(_leaves, _containers, max_leaves=12)


def _ghost(x: Any) -> bool:
    if x is None or isinstance(x, treexchange.Singleton):
        return True
    if isinstance(x, tuple):  # NamedTuples are Mappings, not tuples
        return all(map(_ghost, x))
    if isinstance(x, NamedTuple):
        return all(map(_ghost, x.values()))
    if isinstance(x, JuliaStruct):
        return all(map(_ghost, x.fields.values()))
    return False


def _expected(x: Any) -> Any:
    """``x`` as it reads back: a struct with no stored field is a ghost, read as its Singleton
    (docs/writing.md)."""
    if isinstance(x, JuliaStruct):
        if _ghost(x):
            return treexchange.Singleton(x.type)
        return JuliaStruct(x.type, {k: _expected(v) for k, v in x.fields.items()})
    if isinstance(x, NamedTuple):
        return NamedTuple((k, _expected(v)) for k, v in x.items())
    if isinstance(x, JuliaDict):
        return JuliaDict({k: _expected(v) for k, v in x.items()})
    if isinstance(x, list):
        return [_expected(v) for v in x]
    if isinstance(x, tuple):
        return tuple(_expected(v) for v in x)
    return x


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(tree=_trees)
def test_save_writes_or_raises_a_treexchange_error(tree: Any) -> None:
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "f.jld2"
        try:
            treexchange.save(path, t=tree)
        except treexchange.TreexchangeError as err:
            assert err.path[:1] == ("t",), err
            assert list(Path(d).iterdir()) == []  # nothing left behind
            return
        back = treexchange.load(path, "t")
        assert values_equal(back, _expected(to_julia(tree))), (back, tree)

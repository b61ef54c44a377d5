"""PyTree -> Julia state (``treexchange.to_julia``): every mapping rule of issue 4, item 1."""

from __future__ import annotations

import collections
import dataclasses
import random
import typing

import equinox as eqx
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from treexchange import BigInt, ConversionError, Int128, NamedTuple, Symbol, UInt128, to_julia, values_equal

ALL_DTYPES = [
    np.float16, np.float32, np.float64, ml_dtypes.bfloat16, np.complex64, np.complex128,
    np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.bool_,
]  # fmt: skip
JAX_DTYPES = [jnp.float16, jnp.float32, jnp.bfloat16, jnp.complex64, jnp.int8, jnp.int16, jnp.int32]
JAX_DTYPES += [jnp.uint8, jnp.uint16, jnp.uint32, jnp.bool_]


def test_dict_becomes_namedtuple_in_the_dicts_own_order() -> None:
    # jax.tree_util would sort these keys; the order the user wrote is what Julia must get.
    tree = {"z": 1.0, "a": {"y": 2, "b": 3}, "m": None}
    out = to_julia(tree)
    assert isinstance(out, NamedTuple)
    assert list(out) == ["z", "a", "m"]
    assert list(out.a) == ["y", "b"]
    assert out.m is None


def test_our_namedtuple_namedtuple_and_dataclass_become_namedtuples() -> None:
    Point = collections.namedtuple("Point", "y x")

    class Typed(typing.NamedTuple):
        b: float
        a: int

    @dataclasses.dataclass
    class Cfg:
        second: float
        first: str = "x"

    out = to_julia(NamedTuple(p=Point(1, 2), t=Typed(1.5, 2), c=Cfg(0.5)))
    assert list(out) == ["p", "t", "c"]
    assert list(out.p) == ["y", "x"] and out.p.y == np.int64(1)
    assert list(out.t) == ["b", "a"] and out.t.b == np.float64(1.5)
    assert list(out.c) == ["second", "first"] and out.c.first == "x"


def test_equinox_module_fields_in_declaration_order_functions_become_empty() -> None:
    mlp = eqx.nn.MLP(3, 2, 4, depth=1, key=jax.random.key(0))
    out = to_julia(mlp)
    assert list(out) == [f.name for f in dataclasses.fields(mlp)]
    assert out.activation == () and out.final_activation == ()  # functions carry no state
    assert isinstance(out.layers, tuple) and len(out.layers) == 2
    first = out.layers[0]
    assert list(first) == ["weight", "bias", "in_features", "out_features", "use_bias"]
    assert first.weight.shape == (4, 3) and first.weight.dtype == np.float32  # (out, in): no transpose
    assert np.array_equal(first.weight, np.asarray(mlp.layers[0].weight))
    assert first.in_features == np.int64(3) and first.use_bias is True


@pytest.mark.parametrize("dtype", ALL_DTYPES, ids=lambda d: np.dtype(d).name)
def test_numpy_arrays_keep_dtype_and_shape(dtype: type) -> None:
    a = np.arange(6).reshape(2, 3).astype(dtype)
    out = to_julia({"a": a})
    assert out.a.dtype == np.dtype(dtype)
    assert out.a.shape == (2, 3)
    assert np.array_equal(out.a, a)


@pytest.mark.parametrize("dtype", JAX_DTYPES, ids=lambda d: np.dtype(d).name)
def test_jax_arrays_become_numpy_with_dtype_kept(dtype: type) -> None:
    a = jnp.arange(6).reshape(3, 2).astype(dtype)
    out = to_julia([a])
    assert isinstance(out[0], np.ndarray)
    assert out[0].dtype == np.dtype(dtype) and out[0].shape == (3, 2)
    assert np.array_equal(out[0], np.asarray(a))


def test_zero_dim_and_empty_arrays() -> None:
    out = to_julia((np.full((), 1.5, np.float32), np.zeros((0, 3), np.int16)))
    assert isinstance(out[0], np.ndarray) and out[0].shape == () and out[0].dtype == np.float32
    assert out[1].shape == (0, 3)


def test_python_and_numpy_scalars_map_to_exact_julia_types() -> None:
    out = to_julia((1.5, np.float32(1.5), 7, True, np.bool_(False), 2 + 1j, np.int8(-3), np.uint16(9)))
    assert [type(x) for x in out[:6]] == [np.float64, np.float32, np.int64, bool, bool, np.complex128]
    assert type(out[6]) is np.int8 and type(out[7]) is np.uint16
    assert out[3] is True and out[4] is False


def test_large_integers_widen_like_julia_literals() -> None:
    assert type(to_julia(2**63 - 1)) is np.int64
    assert type(to_julia(2**63)) is Int128 and to_julia(2**63) == 2**63
    assert type(to_julia(-(2**127))) is Int128
    assert type(to_julia(2**127)) is UInt128
    # Beyond 128 bits: a BigInt (JLD2 writes it as its base-62 String); one already a BigInt stays.
    wide = to_julia({"n": 2**128, "m": -(2**127) - 1, "k": BigInt(3, "Base.BigInt")})
    assert all(type(v) is BigInt for v in wide.values())
    assert wide["n"] == 2**128 and wide["m"] == -(2**127) - 1 and wide["k"].julia_name == "Base.BigInt"


def test_strings_symbols_none_are_kept() -> None:
    out = to_julia(("text", Symbol("relu"), None, np.str_("np")))
    assert out[0] == "text" and type(out[0]) is str
    assert type(out[1]) is Symbol
    assert out[2] is None
    assert type(out[3]) is str


def test_lists_are_vectors_or_tuples_on_request() -> None:
    assert to_julia([1, [2.0]]) == [np.int64(1), [np.float64(2.0)]]
    as_tuples = to_julia({"layers": [1, [2.0]]}, lists="tuple")
    assert as_tuples.layers == (np.int64(1), (np.float64(2.0),))
    with pytest.raises(ValueError):
        to_julia([], lists="array")  # type: ignore[arg-type]


def test_rng_objects_and_functions_become_empty_tuples() -> None:
    tree = {
        "key": jax.random.key(0),
        "gen": np.random.default_rng(0),
        "state": np.random.RandomState(0),
        "py": random.Random(0),
        "fn": jnp.tanh,
        "lam": lambda x: x,
        "cls": int,
    }
    out = to_julia(tree)
    assert all(v == () for v in out.values()), out
    # a raw uint32 key is just data: it stays an array
    assert to_julia(jax.random.PRNGKey(0)).dtype == np.uint32


@pytest.mark.parametrize(
    ("tree", "path", "message"),
    [
        ({"a": [1, {2, 3}]}, ("a", 2), "set has no Julia counterpart"),
        ((1, b"raw"), (2,), "bytes has no Julia counterpart"),
        ({"x": object()}, ("x",), "object has no Julia counterpart"),
        ({"m": {1: 2, "a": {3}}}, ("m", "a"), "set has no Julia counterpart"),
        ({"m": {"a\udc80": 1}}, ("m", "a\udc80"), "lone surrogate"),
        ({"w": np.array(["a"])}, ("w",), "array of dtype <U1"),
        ({"w": np.array([None], dtype=object)}, ("w",), "array of dtype object"),
        ({"w": np.zeros(2, np.longdouble)}, ("w",), "has no Julia element type"),
        ({"s": np.longdouble(1)}, ("s",), "numpy scalar of dtype"),
        ({"abs": jax.ShapeDtypeStruct((2,), jnp.float32)}, ("abs",), "ShapeDtypeStruct"),
    ],
)
def test_values_without_julia_counterpart_name_their_path(tree: object, path: tuple, message: str) -> None:
    with pytest.raises(ConversionError, match=message) as err:
        to_julia(tree, path=())
    assert err.value.path == path


def test_error_paths_start_with_the_given_root() -> None:
    with pytest.raises(ConversionError) as err:
        to_julia({"layers": ({"w": {1}},)}, path=("model_state",))
    assert err.value.path == ("model_state", "layers", 1, "w")
    assert "model_state.layers[1].w" in str(err.value)


def test_on_unknown_empty_marks_unknown_objects_as_stateless() -> None:
    assert to_julia({"x": object(), "y": 1.0}, on_unknown="empty") == NamedTuple(x=(), y=np.float64(1.0))


def test_cycles_are_reported_not_recursed_forever() -> None:
    loop: list[object] = [1]
    loop.append(loop)
    with pytest.raises(ConversionError, match="cycle") as err:
        to_julia(loop, lists="tuple")  # a Tuple cannot contain itself
    assert err.value.path == (2,)
    nested: dict[str, object] = {"a": 1}
    nested["self"] = nested
    with pytest.raises(ConversionError, match="cycle") as err:
        to_julia(nested)
    assert err.value.path == ("self",)


def test_a_list_containing_itself_is_a_cyclic_vector_any() -> None:
    """A Vector{Any} may contain itself in Julia: the converted list closes the same cycle."""
    loop: list[object] = [1]
    loop.append(loop)
    out = to_julia(loop)
    assert isinstance(out, list) and out[1] is out and out is not loop and out[0] == 1


def test_registered_custom_pytree_nodes_use_their_keys() -> None:
    @jax.tree_util.register_dataclass
    @dataclasses.dataclass
    class Params:
        w: jax.Array
        b: jax.Array
        n: int = dataclasses.field(metadata={"static": True}, default=3)

    class Pair:
        def __init__(self, a: object, b: object) -> None:
            self.a, self.b = a, b

    jax.tree_util.register_pytree_node(Pair, lambda p: ((p.a, p.b), None), lambda _, c: Pair(*c))
    out = to_julia({"p": Params(jnp.ones(2), jnp.zeros(1)), "pair": Pair(1.0, 2.0)})
    assert list(out.p) == ["w", "b", "n"]  # a dataclass: all fields, static included
    assert out.pair == (np.float64(1.0), np.float64(2.0))  # no names: a Tuple


def test_value_model_values_pass_through() -> None:
    from treexchange import MISSING, JuliaStruct, Singleton

    s = JuliaStruct("Main.Foo", {"a": np.int64(1)})
    tree = NamedTuple(s=s, m=MISSING, f=Singleton("NNlib.#relu"), e=())
    assert values_equal(to_julia(tree), tree)


def test_the_bridge_imports_jax_only_when_it_needs_it() -> None:
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, treexchange as tx\n"
        "state = tx.to_julia({'w': np.ones((2, 3), np.float32), 'f': len})\n"
        "out = tx.restore(state, {'w': np.zeros((2, 3), np.float32), 'f': len}, numpy=True)\n"
        "assert out['w'].sum() == 6 and out['f'] is len\n"
        "assert 'jax' not in sys.modules and 'equinox' not in sys.modules, 'imported jax'\n"
        "out = tx.restore(state, {'w': np.zeros((2, 3), np.float32), 'f': len})\n"
        "assert type(out['w']) is np.ndarray and 'jax' not in sys.modules  # a numpy leaf stays numpy\n"
        "tx.restore(state)\n"
        "assert 'jax' in sys.modules  # jax arrays were asked for (no template)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr

"""Restore with a template (``treexchange.restore``): node types, every mismatch kind, options."""

from __future__ import annotations

import collections
import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import treexchange as tx
from treexchange import (
    JuliaArray,
    Mismatch,
    MismatchError,
    NamedTuple,
    Singleton,
    flux_state,
    restore,
    to_julia,
)

F32 = np.float32


def f_order(shape: tuple[int, ...], dtype: type = F32, start: float = 0.0) -> np.ndarray:
    """An array laid out like the reader returns it (Fortran order, as Julia stores it)."""
    n = int(np.prod(shape))
    return np.asfortranarray((np.arange(n) + start).reshape(shape).astype(dtype))


def dense(out_size: int, in_size: int, start: float = 0.0) -> NamedTuple:
    return NamedTuple(weight=f_order((out_size, in_size), start=start), bias=f_order((out_size,)), σ=())


def mismatches(values: object, like: object, **options: object) -> list[Mismatch]:
    with pytest.raises(MismatchError) as err:
        restore(values, like, path=("model_state",), **options)  # type: ignore[arg-type]
    return err.value.mismatches


@pytest.fixture(scope="module")
def mlp() -> eqx.nn.MLP:
    return eqx.nn.MLP(3, 2, 4, depth=1, key=jax.random.key(0))


# --- success: structure and node types ----------------------------------------------------------------


def test_equinox_mlp_is_rebuilt_with_loaded_arrays(mlp: eqx.nn.MLP) -> None:
    state = NamedTuple(layers=(dense(4, 3, start=10), dense(2, 4, start=20)))
    out = restore(state, mlp)
    assert type(out) is eqx.nn.MLP and type(out.layers[0]) is eqx.nn.Linear
    assert isinstance(out.layers[0].weight, jax.Array)
    assert np.array_equal(np.asarray(out.layers[0].weight), state.layers[0].weight)
    assert np.array_equal(np.asarray(out.layers[1].bias), state.layers[1].bias)
    # static fields and functions come from the template
    assert out.activation is mlp.activation and out.final_activation is mlp.final_activation
    assert (out.in_size, out.width_size, out.depth) == (3, 4, 1)
    # and the model runs
    x = jnp.arange(3.0)
    w1, b1 = state.layers[0].weight, state.layers[0].bias
    w2, b2 = state.layers[1].weight, state.layers[1].bias
    expected = w2 @ np.maximum(w1 @ np.arange(3.0, dtype=F32) + b1, 0) + b2
    np.testing.assert_allclose(np.asarray(out(x)), expected, rtol=1e-6)


def test_numpy_option_returns_numpy_views(mlp: eqx.nn.MLP) -> None:
    state = NamedTuple(layers=(dense(4, 3), dense(2, 4)))
    out = restore(state, mlp, numpy=True)
    assert type(out.layers[0].weight) is np.ndarray
    assert np.shares_memory(out.layers[0].weight, state.layers[0].weight)  # zero-copy


def test_container_types_and_dict_order_are_kept() -> None:
    Pair = collections.namedtuple("Pair", "first second")

    @dataclasses.dataclass
    class Plain:
        w: np.ndarray
        name: str

    like = {
        "z": Pair(np.zeros(2, F32), np.zeros(1, F32)),
        "a": [np.zeros(3, F32), (np.zeros(1, F32),)],
        "nt": NamedTuple(q=np.zeros(2, F32)),
        "dc": Plain(np.zeros(2, F32), "tmpl"),
        "s": 1.0,
    }
    state = NamedTuple(
        z=NamedTuple(first=f_order((2,), start=1), second=f_order((1,), start=5)),
        a=[f_order((3,), start=2), (f_order((1,), start=7),)],
        nt=NamedTuple(q=f_order((2,), start=3)),
        dc=NamedTuple(w=f_order((2,), start=4), name="file"),
        s=np.float32(2.5),
    )
    out = restore(state, like, numpy=True)
    assert list(out) == ["z", "a", "nt", "dc", "s"]  # the template dict's own order, not sorted
    assert type(out["z"]) is Pair and out["z"].second[0] == 5
    assert type(out["a"]) is list and type(out["a"][1]) is tuple and out["a"][1][0][0] == 7
    assert type(out["nt"]) is NamedTuple and out["nt"].q[1] == 4
    assert type(out["dc"]) is Plain and out["dc"].w[0] == 4 and out["dc"].name == "file"
    assert type(out["s"]) is float and out["s"] == 2.5


def test_without_template_arrays_become_jax_and_field_order_survives_tree_map() -> None:
    state = NamedTuple(zeta=f_order((2, 2)), alpha=(f_order((3,)), "text", None))
    out = restore(state)
    assert list(out) == ["zeta", "alpha"]
    assert isinstance(out.zeta, jax.Array) and out.alpha[1:] == ("text", None)
    doubled = jax.tree_util.tree_map(lambda x: x * 2, out)
    assert list(doubled) == ["zeta", "alpha"]
    assert np.array_equal(np.asarray(doubled.zeta), 2 * state.zeta)


def test_abstract_template_of_shape_dtype_structs() -> None:
    like = {"w": jax.ShapeDtypeStruct((2, 3), jnp.float32)}
    out = restore(NamedTuple(w=f_order((2, 3))), like)
    assert isinstance(out["w"], jax.Array) and out["w"].shape == (2, 3)


def test_callable_and_none_entries_need_no_file_counterpart() -> None:
    like = {"w": np.zeros(2, F32), "act": jnp.tanh, "extra_bias": None, "empty": ()}
    out = restore(NamedTuple(w=f_order((2,))), like, numpy=True)
    assert out["act"] is jnp.tanh and out["extra_bias"] is None and out["empty"] == ()
    # when present they must hold no state: (), nothing, or a Julia function singleton
    state = NamedTuple(w=f_order((2,)), act=Singleton("NNlib.#tanh"), extra_bias=None, empty=())
    assert restore(state, like, numpy=True)["act"] is jnp.tanh


def test_flux_bias_false_fits_a_linear_without_bias() -> None:
    lin = eqx.nn.Linear(3, 2, use_bias=False, key=jax.random.key(1))
    out = restore(NamedTuple(weight=f_order((2, 3)), bias=False, σ=()), lin)
    assert out.bias is None and out.weight.shape == (2, 3)


def test_zero_dim_arrays_and_julia_scalars_fit_each_other() -> None:
    out = restore(NamedTuple(a=np.float32(2.0), b=np.full((), 3, np.int64)),
                  {"a": jnp.zeros((), jnp.float32), "b": 0}, numpy=True)  # fmt: skip
    assert out["a"].shape == () and out["a"] == 2.0 and out["b"] == 3 and type(out["b"]) is int


# --- every mismatch kind, all in one error ------------------------------------------------------------


def test_all_mismatches_are_listed_together_with_paths(mlp: eqx.nn.MLP) -> None:
    state = NamedTuple(
        layers=(
            NamedTuple(weight=f_order((4, 5)), bias=f_order((4,), np.float64), σ=()),  # shape, dtype
            NamedTuple(bias=f_order((2,)), weight=f_order((2, 4)), scale=f_order((2,))),  # order, extra
            (),  # an extra stateless layer must be accounted for by the template
        )
    )
    found = mismatches(state, mlp)
    assert [str(m) for m in found] == [
        "model_state.layers[1].weight: shape (4, 5) in file, (4, 3) in template",
        "model_state.layers[1].bias: dtype float64 in file, float32 in template",
        "model_state.layers[2].scale: extra array float32 (2,) in file, not in template",
        "model_state.layers[2]: order (bias, weight) in file, (weight, bias) in template",
        "model_state.layers[3]: extra () in file, not in template",
    ]
    assert [m.kind for m in found] == ["shape", "dtype", "extra", "order", "extra"]
    assert found[0].path == ("model_state", "layers", 1, "weight")


def test_missing_and_kind_mismatches(mlp: eqx.nn.MLP) -> None:
    state = NamedTuple(layers=(NamedTuple(weight=f_order((4, 3))), NamedTuple(weight=(1, 2), bias=[1.0])))
    found = mismatches(state, mlp)
    assert [str(m) for m in found] == [
        "model_state.layers[1].bias: missing from file, template has array float32 (4,)",
        "model_state.layers[2].weight: kind tuple in file, array float32 (2, 4) in template",
        "model_state.layers[2].bias: kind vector in file, array float32 (2,) in template",
    ]
    assert {m.kind for m in found} == {"missing", "kind"}


def test_kind_mismatches_name_the_inspect_kind_of_file_values() -> None:
    # A Vector{String} reads as a JuliaArray, whose inspect kind is "vector" (not "array");
    # #undef is named as Julia prints it.
    words = JuliaArray("Core.String", ["a", "b"])
    found = mismatches(NamedTuple(w=words, u=tx.UNDEF), {"w": np.zeros(2, F32), "u": np.zeros(1, F32)})
    assert [str(m) for m in found] == [
        "model_state.w: kind vector in file, array float32 (2,) in template",
        "model_state.u: kind #undef in file, array float32 (1,) in template",
    ]


def test_missing_positions_and_wrong_container_kinds() -> None:
    like = {"layers": (np.zeros(1, F32), np.zeros(1, F32)), "named": {"a": np.zeros(1, F32)}}
    found = mismatches(NamedTuple(layers=(f_order((1,)),), named=(f_order((1,)),)), like)
    assert [str(m) for m in found] == [
        "model_state.layers[2]: missing from file, template has array float32 (1,)",
        "model_state.named: kind tuple in file, dict in template",
    ]


def test_file_mismatch_error_message_lists_everything() -> None:
    with pytest.raises(MismatchError) as err:
        restore(NamedTuple(a=f_order((2,)), b=f_order((3,))), {"a": np.zeros(3, F32), "c": np.zeros(1, F32)},
                path=("x",))  # fmt: skip
    text = str(err.value)
    assert text.splitlines() == [
        "the file's state of x does not fit the template (3 mismatches):",
        "  x.a: shape (2,) in file, (3,) in template",
        "  x.c: missing from file, template has array float32 (1,)",
        "  x.b: extra array float32 (3,) in file, not in template",
    ]


def test_a_stateless_template_entry_rejects_data_in_the_file() -> None:
    found = mismatches(NamedTuple(act=f_order((2,))), {"act": jnp.tanh})
    assert [str(m) for m in found] == [
        "model_state.act: kind array float32 (2,) in file, function (no state) in template"
    ]


def test_scalar_dtype_mismatches_and_cast() -> None:
    state = NamedTuple(n=np.float64(2.5), k=np.int32(4), f=np.float32(1.5))
    like = {"n": 1, "k": np.int64(0), "f": 1.0}
    assert [str(m) for m in mismatches(state, like)] == [
        "model_state.n: dtype float64 in file, int in template",
        "model_state.k: dtype int32 in file, int64 in template",
    ]
    # cast=True converts only values that survive: 2.5 is no int (issue 8: no silent value changes)
    assert [str(m) for m in mismatches(state, like, cast=True)] == [
        "model_state.n: value float64 in file -> int: 2.5 is not an integer"
    ]
    out = restore(state.replace(n=np.float64(2.0)), like, cast=True, numpy=True)
    assert out == {"n": 2, "k": np.int64(4), "f": 1.5} and type(out["k"]) is np.int64
    assert restore(state, like, cast="unsafe", numpy=True)["n"] == 2  # asked for: truncated


# --- non-strict options -------------------------------------------------------------------------------


def test_allow_missing_keeps_template_values() -> None:
    like = {"w": np.full(2, 7, F32), "b": jnp.full(3, 9.0, jnp.float32)}
    out = restore(NamedTuple(w=f_order((2,))), like, allow_missing=["b"])
    # each leaf keeps the template leaf's kind (issue 8): numpy stays numpy, jax stays jax
    assert np.array_equal(out["w"], [0, 1]) and type(out["w"]) is np.ndarray
    assert np.array_equal(np.asarray(out["b"]), [9, 9, 9]) and isinstance(out["b"], jax.Array)
    out_np = restore(NamedTuple(w=f_order((2,))), like, allow_missing=["b"], numpy=True)
    assert type(out_np["b"]) is np.ndarray


def test_allow_missing_cannot_invent_values_for_abstract_templates() -> None:
    like = {"w": jax.ShapeDtypeStruct((2,), jnp.float32)}
    found = mismatches(NamedTuple(), like, allow_missing=True)
    assert [m.kind for m in found] == ["missing"]
    assert "abstract" in str(found[0])


def test_allow_extra_ignores_file_entries_and_positions() -> None:
    state = NamedTuple(w=f_order((2,)), unused=f_order((5,)), seq=(f_order((1,)), f_order((1,))))
    like = {"w": np.zeros(2, F32), "seq": (np.zeros(1, F32),)}
    with pytest.warns(tx.RestoreWarning, match=r"ignored \(file data unused\): seq\[2\], unused"):
        out = restore(state, like, allow_extra=True, numpy=True)
    assert list(out) == ["w", "seq"] and len(out["seq"]) == 1
    _, report = restore(state, like, allow_extra=True, numpy=True, report=True)  # no warning then
    assert report.ignored == (("seq", 2), ("unused",)) and len(report.restored) == 2


def test_cast_converts_array_dtypes() -> None:
    state = NamedTuple(w=f_order((2, 2), np.float64), i=f_order((2,), np.int32))
    out = restore(state, {"w": np.zeros((2, 2), F32), "i": jnp.zeros(2, jnp.float32)}, cast=True)
    assert out["w"].dtype == jnp.float32 and out["i"].dtype == jnp.float32
    np.testing.assert_array_equal(np.asarray(out["w"]), state.w.astype(F32))


def test_non_strict_mode_relaxes_everything_but_shapes_and_kinds() -> None:
    state = NamedTuple(b=f_order((2,), np.float64), a=f_order((2,)), extra=f_order((1,)))
    like = {"a": np.zeros(2, F32), "b": np.zeros(2, F32), "gone": np.ones(1, F32)}
    # strict=False no longer implies allow_missing (issue 8): a template leaf not in the file is named
    assert [str(m) for m in mismatches(state, like, strict=False)] == [
        "model_state.gone: missing from file, template has array float32 (1,)"
    ]
    out, report = restore(state, like, strict=False, allow_missing=["gone"], numpy=True, report=True)
    assert list(out) == ["a", "b", "gone"] and out["b"].dtype == F32 and out["gone"][0] == 1
    assert report.kept == (("gone",),) and report.ignored == (("extra",),)
    assert report.converted == ((("b",), "float64", "float32"),)
    found = mismatches(NamedTuple(a=f_order((3,))), like, strict=False, allow_missing=True)
    assert [m.kind for m in found] == ["shape"]
    # strict mode sees the field order
    state_same = NamedTuple(b=f_order((2,)), a=f_order((2,)))
    assert [m.kind for m in mismatches(state_same, {"a": np.zeros(2, F32), "b": np.zeros(2, F32)})] == [
        "order"
    ]


# --- Lux ps / st ---------------------------------------------------------------------------------------


def test_lux_parameters_and_empty_states_both_ways() -> None:
    ps = {"layer_1": {}, "layer_2": {"weight": np.ones((4, 2), F32), "bias": np.zeros((4, 1), F32)}}
    st = {"layer_1": {}, "layer_2": {}}
    ps_julia, st_julia = to_julia(ps), to_julia(st)
    assert st_julia == NamedTuple(layer_1=NamedTuple(), layer_2=NamedTuple())
    assert ps_julia.layer_1 == NamedTuple() and list(ps_julia.layer_2) == ["weight", "bias"]
    # back: NamedTuple() and () both fit an empty dict (Lux writes either for parameter-free layers)
    back = restore(ps_julia.replace(layer_1=()), ps, numpy=True)
    assert back["layer_1"] == {} and np.array_equal(back["layer_2"]["weight"], ps["layer_2"]["weight"])
    assert restore(st_julia, st) == {"layer_1": {}, "layer_2": {}}


# --- layouts -------------------------------------------------------------------------------------------


def test_layout_restores_through_the_flux_view(mlp: eqx.nn.MLP) -> None:
    state = NamedTuple(layers=(dense(4, 3, start=1), dense(2, 4, start=2)))
    out = restore(state, mlp, layout=flux_state)
    assert type(out) is eqx.nn.MLP
    assert np.array_equal(np.asarray(out.layers[1].weight), state.layers[1].weight)


def test_layout_that_drops_an_array_is_refused(mlp: eqx.nn.MLP) -> None:
    def first_layer_only(model: eqx.nn.MLP) -> NamedTuple:
        return NamedTuple(layers=(flux_state(model.layers[0]),))

    with pytest.raises(MismatchError, match="does not cover 2 array") as err:
        restore(NamedTuple(layers=(dense(4, 3),)), mlp, layout=first_layer_only)
    assert all(m.kind == "missing" for m in err.value.mismatches)


# --- round trip: to_julia then restore into the original tree -----------------------------------------

_dtypes = st.sampled_from([np.float16, np.float32, np.float64, np.int8, np.int32, np.uint16, np.bool_])
_arrays = st.builds(
    lambda shape, dtype: np.arange(int(np.prod(shape))).reshape(shape).astype(dtype),
    st.lists(st.integers(0, 3), max_size=3).map(tuple),
    _dtypes,
)
_leaves = _arrays | st.floats(allow_nan=False) | st.integers(-(2**62), 2**62) | st.booleans() | st.none()
_names = st.text(st.sampled_from("abσμϵ_xyz²"), min_size=1, max_size=4)
_trees = st.recursive(
    _leaves,
    lambda kids: (
        st.dictionaries(_names, kids, max_size=4) | st.lists(kids, max_size=3) | st.tuples(kids, kids)
    ),
    max_leaves=12,
)


@settings(max_examples=150, deadline=None)
@given(_trees)
def test_to_julia_then_restore_gives_the_tree_back(tree: object) -> None:
    out = restore(to_julia(tree), tree, numpy=True)
    assert _same(out, tree)


def _same(a: object, b: object) -> bool:
    if isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    if isinstance(b, dict):
        return type(a) is dict and list(a) == list(b) and all(_same(a[k], b[k]) for k in b)
    if isinstance(b, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return type(a) is type(b) and a == b


def test_large_restores_fill_every_leaf_in_the_right_place() -> None:
    # many large leaves, materialised after the checking pass: each must land where it belongs
    n = 6
    state = NamedTuple(layers=tuple(dense(1024, 1024 + i, start=i) for i in range(n)))
    like = [{"weight": jax.ShapeDtypeStruct((1024, 1024 + i), jnp.float32), "bias": np.zeros(1024, F32)}
            for i in range(n)]  # fmt: skip
    out = restore(state.layers, like)
    for i, layer in enumerate(out):
        assert np.array_equal(np.asarray(layer["weight"]), state.layers[i].weight)
        assert isinstance(layer["weight"], jax.Array)  # a ShapeDtypeStruct gives a jax array
        assert type(layer["bias"]) is np.ndarray  # a numpy template leaf gives numpy (issue 8)
        assert np.array_equal(layer["bias"], state.layers[i].bias)


def test_julia_dicts_have_no_field_order_but_named_tuples_do() -> None:
    like = {"a": np.zeros(1, F32), "b": np.zeros(1, F32)}
    as_dict = {"b": f_order((1,)), "a": f_order((1,))}  # a Julia Dict: hash order, meaningless
    assert list(restore(as_dict, like, numpy=True)) == ["a", "b"]
    assert [m.kind for m in mismatches(NamedTuple(as_dict), like)] == ["order"]


def test_flux_bias_false_fits_only_a_none_template() -> None:
    assert [str(m) for m in mismatches(NamedTuple(b=False), {"b": ()})] == [
        "model_state.b: kind bool in file, () in template"
    ]


def test_large_leaves_are_placed_on_worker_threads_with_the_same_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above the size thresholds the leaves are placed by a thread pool (run_jobs); the restored
    model is the same, array for array, and the threads really ran."""
    from treexchange._bridge import _restore

    model = eqx.nn.MLP(48, 32, 64, depth=3, key=jax.random.key(1))
    path = tmp_path / "mlp.jld2"
    tx.save(path, model_state=flux_state(model))
    abstract = eqx.filter_eval_shape(eqx.nn.MLP, 48, 32, 64, depth=3, key=jax.random.key(0))
    serial = tx.load(path, "model_state", like=abstract, layout=flux_state)
    threads: set[str] = set()
    place = _restore.Placer.place

    def spy(self: Any, *args: Any, **kwargs: Any) -> Any:
        threads.add(threading.current_thread().name)
        return place(self, *args, **kwargs)

    monkeypatch.setattr(_restore.Placer, "place", spy)
    monkeypatch.setattr(_restore, "PARALLEL_MIN_BYTES", 1024)
    monkeypatch.setattr(_restore, "PARALLEL_MIN_TOTAL", 4096)
    monkeypatch.setattr(_restore.os, "cpu_count", lambda: 2)
    pooled = tx.load(path, "model_state", like=abstract, layout=flux_state)
    assert any(name.startswith("treexchange-place") for name in threads)
    arrays = [x for x in jax.tree_util.tree_leaves(pooled) if eqx.is_array(x)]
    assert len(arrays) == 8
    for a, b in zip(jax.tree_util.tree_leaves(eqx.filter(serial, eqx.is_array)), arrays):
        assert isinstance(b, jax.Array) and np.array_equal(np.asarray(a), np.asarray(b))
    assert np.array_equal(np.asarray(pooled.layers[0].weight), np.asarray(model.layers[0].weight))


def test_run_jobs_keeps_order_and_raises_the_first_failure(monkeypatch: pytest.MonkeyPatch) -> None:
    from treexchange._bridge import _restore

    monkeypatch.setattr(_restore.os, "cpu_count", lambda: 2)
    big = _restore.PARALLEL_MIN_TOTAL
    jobs = [lambda i=i: i * 10 for i in range(6)]
    assert _restore.run_jobs(jobs, [big, 0, big, 0, big, 0]) == [0, 10, 20, 30, 40, 50]

    def fail() -> int:
        raise ValueError("leaf 2 failed")

    jobs[2] = fail
    with pytest.raises(ValueError, match="leaf 2"):
        _restore.run_jobs(jobs, [big, 0, big, 0, big, 0])

    # A large leaf failing late on a worker still wins over a small later leaf failing at once.
    def slow_fail() -> int:
        time.sleep(0.2)
        raise ValueError("leaf 0")

    def small_fail() -> int:
        raise KeyError("leaf 3")

    with pytest.raises(ValueError, match="leaf 0"):
        _restore.run_jobs([slow_fail, lambda: 1, lambda: 2, small_fail], [big, big, 0, 0])
    with pytest.raises(KeyError, match="leaf 3"):
        _restore.run_jobs([lambda: 0, lambda: 1, lambda: 2, small_fail, slow_fail], [big, big, 0, 0, big])

"""Issue 8, item 1: a restore never changes a value without saying so.

JAX's default configuration (x64 off) holds no 64-bit dtypes; ``jax.device_put`` used to narrow
int64/uint64/float64 silently (2**40 -> 0, 2**63+5 -> 5, 1e300 -> inf, 1e-310 -> 0). Every
template style is checked here with real files (written by treexchange, read back through the
codec): numpy leaves, jax leaves, an Equinox module, ``jax.ShapeDtypeStruct`` leaves, ``cast``, and
sharded placement on 8 forced host devices.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from fractions import Fraction
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import treexchange as tx
from treexchange import MismatchError, NamedTuple

BIG_INT = 2**40
BIG_UINT = 2**63 + 5
HUGE = 1e300
TINY = 1e-310  # a float64 subnormal: 0 in float32

X64_FIX = 'jax.config.update("jax_enable_x64", True)'


@pytest.fixture(autouse=True)
def _x64_is_off() -> None:
    # The findings are about JAX's default configuration; make sure the tests run in it.
    assert not jax.config.jax_enable_x64


@pytest.fixture
def wide_file(tmp_path: Path) -> Path:
    path = tmp_path / "wide.jld2"
    tx.save(
        path,
        state=NamedTuple(
            i=np.array([BIG_INT, 1], np.int64),
            u=np.array([BIG_UINT], np.uint64),
            f=np.array([HUGE, TINY, 0.5]),
        ),
    )
    return path


def numpy_template() -> dict[str, np.ndarray]:
    return {"i": np.zeros(2, np.int64), "u": np.zeros(1, np.uint64), "f": np.zeros(3)}


def abstract_template() -> dict[str, jax.ShapeDtypeStruct]:
    return {
        "i": jax.ShapeDtypeStruct((2,), np.int64),
        "u": jax.ShapeDtypeStruct((1,), np.uint64),
        "f": jax.ShapeDtypeStruct((3,), np.float64),
    }


def assert_exact(out: Any, *, kind: type) -> None:
    for name, dtype, values in (
        ("i", np.int64, [BIG_INT, 1]),
        ("u", np.uint64, [BIG_UINT]),
        ("f", np.float64, [HUGE, TINY, 0.5]),
    ):
        leaf = out[name] if isinstance(out, dict) else getattr(out, name)
        assert isinstance(leaf, kind), (name, type(leaf))
        host = np.asarray(leaf)
        assert host.dtype == dtype and host.tolist() == values, (name, host)


def error_of(path: Path, like: Any, **options: Any) -> MismatchError:
    with pytest.raises(MismatchError) as err:
        tx.load(path, "state", like=like, **options)
    return err.value


# --- numpy leaves: numpy arrays, every dtype kept ------------------------------------------------------


def test_numpy_template_leaves_give_numpy_arrays_with_every_value(wide_file: Path) -> None:
    out = tx.load(wide_file, "state", like=numpy_template())
    assert_exact(out, kind=np.ndarray)


# --- jax.ShapeDtypeStruct leaves: jax arrays, so 64-bit needs x64 ---------------------------------------


def test_abstract_64bit_template_without_x64_lists_every_leaf_and_the_fixes(wide_file: Path) -> None:
    err = error_of(wide_file, abstract_template())
    assert [str(m) for m in err.mismatches] == [
        "state.i: dtype int64 in file and template (jax without x64 holds int64 as int32)",
        "state.u: dtype uint64 in file and template (jax without x64 holds uint64 as uint32)",
        "state.f: dtype float64 in file and template (jax without x64 holds float64 as float32)",
    ]
    text = str(err)
    assert X64_FIX in text and "numpy=True" in text and 'cast="round"' in text


def test_abstract_64bit_template_with_x64_or_numpy_is_exact(wide_file: Path) -> None:
    with jax.enable_x64(True):
        out = tx.load(wide_file, "state", like=abstract_template())
        assert_exact(out, kind=jax.Array)
    assert_exact(tx.load(wide_file, "state", like=abstract_template(), numpy=True), kind=np.ndarray)


def test_narrowing_must_be_asked_for_and_still_refuses_what_does_not_fit(wide_file: Path) -> None:
    # cast=True narrows only values that survive: none of these do
    err = error_of(wide_file, abstract_template(), cast=True)
    assert [(m.kind, m.path) for m in err.mismatches] == [
        ("value", ("state", "i")),
        ("value", ("state", "u")),
        ("value", ("state", "f")),
    ]
    assert "1099511627776 -> 0" in str(err.mismatches[0])
    assert "9223372036854775813 -> 5" in str(err.mismatches[1])
    assert "2 of 3 values would change" in str(err.mismatches[2])  # 1e300 and 1e-310; 0.5 fits
    # cast="round" allows rounding only: overflow and underflow are still refused
    err = error_of(wide_file, abstract_template(), cast="round")
    assert "overflow, e.g. 1e+300 -> inf" in str(err.mismatches[2])
    # cast="unsafe" is the explicit opt-in to numpy's conversion
    out = tx.load(wide_file, "state", like=abstract_template(), cast="unsafe")
    assert np.asarray(out["i"]).tolist() == [0, 1] and out["i"].dtype == jnp.int32
    assert np.asarray(out["u"]).tolist() == [5]
    f = np.asarray(out["f"])
    assert np.isinf(f[0]) and f[1] == 0 and f[2] == 0.5


def test_values_that_fit_are_narrowed_by_cast_true(tmp_path: Path) -> None:
    path = tmp_path / "small.jld2"
    tx.save(path, state=NamedTuple(i=np.array([3, -7], np.int64), f=np.array([0.5, -2.25, 2.0**100])))
    like = {"i": jax.ShapeDtypeStruct((2,), np.int64), "f": jax.ShapeDtypeStruct((3,), np.float64)}
    out, report = tx.load(path, "state", like=like, cast=True, report=True)
    assert out["i"].dtype == jnp.int32 and np.asarray(out["i"]).tolist() == [3, -7]
    assert out["f"].dtype == jnp.float32 and np.asarray(out["f"]).tolist() == [0.5, -2.25, 2.0**100]
    assert report.converted == (
        (("state", "i"), "int64", "int32"),
        (("state", "f"), "float64", "float32"),
    )


# --- jax leaves (32-bit, as JAX makes them without x64) with cast=True ----------------------------------


def test_jax_leaves_with_cast_refuse_values_that_change(wide_file: Path) -> None:
    like = {"i": jnp.zeros(2, jnp.int32), "u": jnp.zeros(1, jnp.uint32), "f": jnp.zeros(3, jnp.float32)}
    strict = error_of(wide_file, like)
    assert [m.kind for m in strict.mismatches] == ["dtype", "dtype", "dtype"]
    assert "cast=True" in str(strict)
    err = error_of(wide_file, like, cast=True)
    assert [str(m) for m in err.mismatches] == [
        "state.i: value int64 in file -> int32: 1 of 2 values would change "
        "(out of range, e.g. 1099511627776 -> 0)",
        "state.u: value uint64 in file -> uint32: 1 of 1 values would change "
        "(out of range, e.g. 9223372036854775813 -> 5)",
        "state.f: value float64 in file -> float32: 2 of 3 values would change "
        "(overflow, e.g. 1e+300 -> inf)",
    ]
    assert 'cast="unsafe"' in str(err)


def test_jax_leaves_stay_jax_on_the_template_device(tmp_path: Path) -> None:
    path = tmp_path / "f32.jld2"
    tx.save(path, state=NamedTuple(w=np.arange(6, dtype=np.float32).reshape(2, 3)))
    device = jax.devices()[-1]
    like = {"w": jax.device_put(jnp.zeros((2, 3), jnp.float32), device)}
    out = tx.load(path, "state", like=like)
    assert isinstance(out["w"], jax.Array) and out["w"].devices() == {device}
    assert out["w"].sharding == like["w"].sharding


# --- an Equinox module -----------------------------------------------------------------------------------


class Counters(eqx.Module):
    """A module holding 64-bit state: step counters and a float64 accumulator."""

    i: Any
    u: Any
    f: Any
    name: str = eqx.field(static=True, default="counters")


def test_equinox_module_with_numpy_leaves_keeps_64bit_values(wide_file: Path) -> None:
    template = Counters(np.zeros(2, np.int64), np.zeros(1, np.uint64), np.zeros(3))
    out = tx.load(wide_file, "state", like=template)
    assert type(out) is Counters and out.name == "counters"
    assert_exact(out, kind=np.ndarray)


def test_equinox_module_with_abstract_leaves_refuses_without_x64(wide_file: Path) -> None:
    t = abstract_template()
    template = Counters(t["i"], t["u"], t["f"])
    err = error_of(wide_file, template)
    assert [m.path for m in err.mismatches] == [("state", "i"), ("state", "u"), ("state", "f")]
    assert X64_FIX in str(err)
    with jax.enable_x64(True):
        out = tx.load(wide_file, "state", like=template)
        assert type(out) is Counters
        assert_exact(out, kind=jax.Array)


# --- scalars, and restores without a template -------------------------------------------------------------


def test_scalar_casts_check_values() -> None:
    state = NamedTuple(n=np.int64(BIG_INT), x=np.float64(HUGE), k=np.float64(3.0))
    like = {"n": np.int32(0), "x": np.float32(0), "k": 0}
    with pytest.raises(MismatchError) as err:
        tx.restore(state, like, cast=True)
    assert [str(m) for m in err.value.mismatches] == [
        "n: value int64 in file -> int32: 1 of 1 values would change (out of range, e.g. 1099511627776 -> 0)",
        "x: value float64 in file -> float32: 1 of 1 values would change (overflow, e.g. 1e+300 -> inf)",
    ]
    out = tx.restore(state, like, cast="unsafe")
    assert type(out["n"]) is np.int32 and out["n"] == 0 and np.isinf(out["x"]) and out["k"] == 3


def test_without_template_64bit_arrays_need_x64_numpy_or_cast(wide_file: Path) -> None:
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    with pytest.raises(MismatchError) as err:
        tx.load(wide_file, "state", sharding=single)
    assert [m.path for m in err.value.mismatches] == [("state", "i"), ("state", "u"), ("state", "f")]
    assert X64_FIX in str(err.value)
    with jax.enable_x64(True):
        assert_exact(tx.load(wide_file, "state", sharding=single), kind=jax.Array)
    values = NamedTuple(i=np.array([1, 2], np.int64))
    assert tx.restore(values, cast=True).i.dtype == jnp.int32  # fits: narrowed on request


def test_a_kept_numpy_leaf_sent_to_jax_is_checked_too() -> None:
    # allow_missing keeps the template's value; sharding= turns the numpy leaf into a jax array
    single = jax.sharding.SingleDeviceSharding(jax.devices()[0])
    like = {"w": np.zeros(1, np.float32), "step": np.array([BIG_INT], np.int64)}
    state = NamedTuple(w=np.ones(1, np.float32))
    with pytest.raises(MismatchError, match=r"step: dtype int64 kept from the template \(jax without x64"):
        tx.restore(state, like, allow_missing=["step"], sharding=single)
    out = tx.restore(state, like, allow_missing=["step"])  # numpy stays numpy: exact
    assert out["step"].tolist() == [BIG_INT]


# --- sharded placement (8 forced host devices, in a subprocess) ---------------------------------------------

SHARDED = textwrap.dedent(
    r"""
    import json, sys
    import jax, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import treexchange as tx
    from treexchange import NamedTuple

    assert len(jax.devices()) == 8 and not jax.config.jax_enable_x64
    mesh = jax.sharding.Mesh(np.array(jax.devices()), ("d",))
    rows = NamedSharding(mesh, P("d"))
    path = sys.argv[1]
    tx.save(path, state=NamedTuple(
        i=np.full(8, 2**40, np.int64), u=np.full(8, 2**63 + 5, np.uint64),
        f=np.array([1e300, 1e-310, 0.5, 1, 2, 3, 4, 5]), ok=np.arange(8, dtype=np.float64)))
    like = {
        "i": jax.ShapeDtypeStruct((8,), np.int64), "u": jax.ShapeDtypeStruct((8,), np.uint64),
        "f": jax.ShapeDtypeStruct((8,), np.float64), "ok": jax.ShapeDtypeStruct((8,), np.float64),
    }
    report = {}
    for label, options in [("plain", {}), ("cast", {"cast": True}), ("round", {"cast": "round"})]:
        try:
            tx.load(path, "state", like=like, sharding=rows, **options)
            report[label] = None
        except tx.MismatchError as err:
            report[label] = [[m.kind, list(m.path)] for m in err.mismatches]
            report[label + "_fix"] = 'jax.config.update("jax_enable_x64", True)' in str(err)
    # values that fit are narrowed per shard on request
    part, rep = tx.load(path, "state", like={"ok": like["ok"]}, sharding=rows, cast=True,
                        allow_extra=True, report=True)
    report["ok_dtype"] = str(part["ok"].dtype)
    report["ok_values"] = np.asarray(part["ok"]).tolist()
    report["ok_sharded"] = part["ok"].sharding == rows and len(part["ok"].addressable_shards) == 8
    report["ignored"] = [list(p) for p in rep.ignored]
    jax.config.update("jax_enable_x64", True)
    out = tx.load(path, "state", like=like, sharding=rows)
    report["x64_values"] = {k: np.asarray(v).tolist() for k, v in out.items()}
    report["x64_dtypes"] = {k: str(v.dtype) for k, v in out.items()}
    report["x64_sharded"] = all(v.sharding == rows for v in out.values())
    print(json.dumps(report))
    """
)


@pytest.fixture(scope="module")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    path = tmp_path_factory.mktemp("sharded") / "wide.jld2"
    # (the suite's own XLA_FLAGS kept, conftest.py: eight devices added to them)
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    env = dict(os.environ, XLA_FLAGS=flags, JAX_PLATFORMS="cpu")
    env.pop("JAX_ENABLE_X64", None)
    done = subprocess.run(
        [sys.executable, "-c", SHARDED, str(path)], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_sharded_64bit_restore_without_x64_is_refused_per_leaf(sharded: dict[str, Any]) -> None:
    # without cast even values that would fit (ok) are refused: jax cannot hold float64 as it is
    assert sharded["plain"] == [["dtype", ["state", n]] for n in ("i", "u", "f", "ok")]
    assert sharded["plain_fix"] is True
    assert sharded["cast"] == [["value", ["state", n]] for n in ("i", "u", "f")]
    assert sharded["round"] == [["value", ["state", n]] for n in ("i", "u", "f")]  # 1e300, 1e-310


def test_sharded_restore_narrows_fitting_values_per_shard_and_is_exact_with_x64(
    sharded: dict[str, Any],
) -> None:
    assert sharded["ok_dtype"] == "float32" and sharded["ok_values"] == list(range(8))
    assert sharded["ok_sharded"] is True
    assert sharded["ignored"] == [["state", "i"], ["state", "u"], ["state", "f"]]
    assert sharded["x64_dtypes"] == {"i": "int64", "u": "uint64", "f": "float64", "ok": "float64"}
    assert sharded["x64_values"]["i"] == [BIG_INT] * 8
    assert sharded["x64_values"]["u"] == [BIG_UINT] * 8
    assert sharded["x64_values"]["f"][:3] == [HUGE, TINY, 0.5]
    assert sharded["x64_sharded"] is True


# --- the value check itself, against an exact oracle (Python ints and Fractions) -------------------------

_DTYPES = [
    np.bool_,
    np.int8,
    np.int32,
    np.int64,
    np.uint8,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
]
_EDGE_FLOATS = [
    0.5,
    0.1,
    2.0**24 + 1,
    2.0**40,
    65520.0,
    1e300,
    1e-310,
    1e-40,
    -0.0,
    float("nan"),
    float("inf"),
]


def _exact(x: np.generic) -> object:
    """One value as an exact Python number (a Fraction for finite floats; text for NaN/inf)."""
    item = x.item()
    if isinstance(item, float):
        return Fraction(item) if np.isfinite(item) else repr(item)
    return int(item)


def _changed(a: np.generic, b: np.generic) -> bool:
    """Whether converting ``a`` to ``b`` changed the value: exactly as numbers, and a NaN by its
    bits (sign and payload; hypothesis draws NaNs with payloads): it must come back as itself."""
    if isinstance(a, np.floating) and isinstance(b, np.floating) and np.isnan(a) and np.isnan(b):
        with np.errstate(all="ignore"):
            back = np.asarray(b).astype(a.dtype)
        return bool(back.tobytes() != np.asarray(a).tobytes())
    return _exact(a) != _exact(b)


@st.composite
def _source_arrays(draw: st.DrawFn) -> np.ndarray:
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    if dtype.kind == "b":
        values: list[Any] = draw(st.lists(st.booleans(), max_size=6))
    elif dtype.kind in "iu":
        info = np.iinfo(dtype)
        edges = st.sampled_from([v for v in (0, 1, -1, 2**31, 2**40, 2**63 + 5) if info.min <= v <= info.max])
        values = draw(st.lists(edges | st.integers(int(info.min), int(info.max)), max_size=6))
    else:
        values = draw(st.lists(st.sampled_from(_EDGE_FLOATS) | st.floats(width=64), max_size=6))
    with np.errstate(all="ignore"):
        return np.array(values, dtype=object).astype(dtype)


@settings(max_examples=400, deadline=None)
@given(array=_source_arrays(), dst=st.sampled_from(_DTYPES))
def test_exact_cast_check_agrees_with_an_exact_oracle(array: np.ndarray, dst: type) -> None:
    from treexchange._bridge._exact import conversion_loss, convert

    out = convert(array, np.dtype(dst))
    changed = sum(_changed(a, b) for a, b in zip(array, out))
    loss = conversion_loss(array, np.dtype(dst), "exact")
    assert (0 if loss is None else loss.changed) == changed, (array, out, loss)
    # "round" differs only for float destinations: rounding allowed, overflow and underflow not
    if np.dtype(dst).kind == "f":
        with np.errstate(all="ignore"):
            changed = sum(
                bool((np.isfinite(a) and not np.isfinite(b)) or (a != 0 and b == 0))
                for a, b in zip(array, out)
            )
    loss = conversion_loss(array, np.dtype(dst), "round")
    assert (0 if loss is None else loss.changed) == changed, (array, out, loss)

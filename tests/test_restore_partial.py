"""Issue 8, item 2: no silent partial restore.

``strict=False`` used to return a Flax-style template unchanged for a real LeNet ``Flux.state``,
and a Lux LSTM ``ps`` (Lux v0.5 names ``weight_i``/``weight_h``) filled only ``bias`` of a template
keyed ``weight_ih``/``weight_hh``/``bias``. Now a template leaf not in the file is an error unless
``allow_missing`` names it (or is ``True``, which still refuses a restore that fills nothing),
and every restore can say what it did (:class:`treexchange.RestoreReport`).
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import require_fixture

import treexchange as tx
from treexchange import MismatchError, NamedTuple, RestoreReport, flux_state

LENET = "flux-state/silver-bullet_lenet.jld2"


def flax_lenet_params() -> dict[str, Any]:
    """LeNet-5's parameters the way Flax names and shapes them (HWIO kernels, (in, out) Dense)."""
    z = lambda *shape: jnp.zeros(shape, jnp.float32)  # noqa: E731
    return {
        "Conv_0": {"kernel": z(5, 5, 1, 6), "bias": z(6)},
        "Conv_1": {"kernel": z(5, 5, 6, 16), "bias": z(16)},
        "Dense_0": {"kernel": z(256, 120), "bias": z(120)},
        "Dense_1": {"kernel": z(120, 84), "bias": z(84)},
        "Dense_2": {"kernel": z(84, 10), "bias": z(10)},
    }


def test_lenet_flux_state_into_flax_params_with_strict_false_names_everything_unfilled() -> None:
    path = require_fixture(LENET)
    with pytest.raises(MismatchError) as err:
        tx.load(path, "lenet_state", like=flax_lenet_params(), strict=False)
    assert [str(m) for m in err.value.mismatches] == [
        f"lenet_state.{name}: missing from file, template has dict"
        for name in ("Conv_0", "Conv_1", "Dense_0", "Dense_1", "Dense_2")
    ]
    # and it says what the file held instead (Flux's Chain: layers)
    assert str(err.value).splitlines()[-1] == "file data the template has no place for: lenet_state.layers"


def test_lenet_into_flax_params_with_allow_missing_true_still_refuses_to_restore_nothing() -> None:
    path = require_fixture(LENET)
    with pytest.raises(MismatchError, match="nothing in the file's state of lenet_state fits") as err:
        tx.load(path, "lenet_state", like=flax_lenet_params(), allow_missing=True, allow_extra=True)
    assert len(err.value.mismatches) == 10  # every kernel and bias, by path
    assert err.value.mismatches[0].path == ("lenet_state", "Conv_0", "kernel")
    assert "allow_missing=[paths]" in str(err.value)


def test_lenet_restores_into_a_flux_shaped_template_completely() -> None:
    # The same file into a template with Flux's names and shapes: every array from the file.
    path = require_fixture(LENET)
    conv = lambda k, i, o: {"weight": np.zeros((k, k, i, o), np.float32), "bias": np.zeros(o, np.float32)}  # noqa: E731
    dense = lambda i, o: {"weight": np.zeros((o, i), np.float32), "bias": np.zeros(o, np.float32)}  # noqa: E731
    like = {
        "layers": (conv(5, 1, 6), (), conv(5, 6, 16), (), (), dense(256, 120), dense(120, 84), dense(84, 10))
    }
    out, report = tx.load(path, "lenet_state", like=like, strict=False, report=True)
    assert report.kept == () and len(report.restored) == 10 and report.complete is False
    assert {p[3] for p in report.ignored} == {"stride", "pad", "dilation", "groups"}  # Conv hyperparameters
    raw = tx.load(path, "lenet_state")
    assert np.array_equal(out["layers"][5]["weight"], raw.layers[5].weight)


# --- Lux LSTM ps: Lux v0.5 names (weight_i, weight_h, bias) ----------------------------------------------


@pytest.fixture
def lux_lstm_file(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    hidden, inputs = 4, 3
    ps = NamedTuple(
        weight_i=rng.normal(size=(4 * hidden, inputs)).astype(np.float32),
        weight_h=rng.normal(size=(4 * hidden, hidden)).astype(np.float32),
        bias=rng.normal(size=(4 * hidden, 1)).astype(np.float32),
    )
    path = tmp_path / "lstm.jld2"
    tx.save(path, ps=ps)
    return path


def torch_style_lstm(key: int = 0) -> dict[str, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(key))
    return {
        "weight_ih": jax.random.normal(k1, (16, 3)),
        "weight_hh": jax.random.normal(k2, (16, 4)),
        "bias": jnp.zeros((16, 1)),
    }


def test_lux_lstm_into_a_wrongly_keyed_template_is_refused(lux_lstm_file: Path) -> None:
    for options in ({"strict": False}, {"allow_extra": True}):
        with pytest.raises(MismatchError) as err:
            tx.load(lux_lstm_file, "ps", like=torch_style_lstm(), **options)
        assert [str(m) for m in err.value.mismatches] == [
            "ps.weight_ih: missing from file, template has array float32 (16, 3)",
            "ps.weight_hh: missing from file, template has array float32 (16, 4)",
        ]
        assert "file data the template has no place for: ps.weight_i, ps.weight_h" in str(err.value)


def test_lux_lstm_with_allow_missing_true_warns_and_reports_what_it_kept(lux_lstm_file: Path) -> None:
    like = torch_style_lstm()
    with pytest.warns(tx.RestoreWarning, match=r"kept \(template value\): ps\.weight_ih, ps\.weight_hh"):
        out = tx.load(lux_lstm_file, "ps", like=like, allow_missing=True, allow_extra=True)
    assert np.array_equal(np.asarray(out["weight_ih"]), np.asarray(like["weight_ih"]))  # the template's
    out, report = tx.load(lux_lstm_file, "ps", like=like, allow_missing=True, allow_extra=True, report=True)
    assert report.restored == (("ps", "bias"),)
    assert report.kept == (("ps", "weight_ih"), ("ps", "weight_hh"))
    assert report.ignored == (("ps", "weight_i"), ("ps", "weight_h"))
    assert str(report).splitlines() == [
        "restored 1 of 3 template leaves from the file, kept 2, ignored 2 file entries",
        "  kept (template value): ps.weight_ih, ps.weight_hh",
        "  ignored (file data unused): ps.weight_i, ps.weight_h",
    ]


def test_lux_lstm_with_lux_names_restores_completely(lux_lstm_file: Path) -> None:
    like = {"weight_i": jnp.zeros((16, 3)), "weight_h": jnp.zeros((16, 4)), "bias": jnp.zeros((16, 1))}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a complete restore says nothing
        out, report = tx.load(lux_lstm_file, "ps", like=like, strict=False, report=True)
    assert report.complete and report.restored == (("ps", "weight_i"), ("ps", "weight_h"), ("ps", "bias"))
    raw = tx.load(lux_lstm_file, "ps")
    for name in like:
        assert isinstance(out[name], jax.Array)
        assert np.array_equal(np.asarray(out[name]), raw[name])


# --- allow_missing by path or predicate ---------------------------------------------------------------------


def backbone_state() -> NamedTuple:
    return NamedTuple(encoder=NamedTuple(w=np.ones((2, 2), np.float32), b=np.ones(2, np.float32)))


def model_template() -> dict[str, Any]:
    return {
        "encoder": {"w": np.zeros((2, 2), np.float32), "b": np.zeros(2, np.float32)},
        "head": {"w": np.full((1, 2), 7, np.float32), "b": np.full(1, 7, np.float32)},
        "step": 3,
    }


@pytest.mark.parametrize(
    "allowed",
    [
        ["head", "step"],
        [("head",), ("step",)],
        ["model.head.w", "model.head.b", "model.step"],  # with the loaded name in front
        lambda path: path[0] in ("head", "step"),
    ],
    ids=["text", "tuples", "full-paths", "predicate"],
)
def test_allow_missing_names_the_template_values_to_keep(allowed: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # asked for exactly this: no warning
        out, report = tx.restore(
            backbone_state(), model_template(), allow_missing=allowed, path=("model",), report=True
        )
    assert out["encoder"]["w"].sum() == 4 and out["head"]["w"].sum() == 14 and out["step"] == 3
    assert report.restored == (("model", "encoder", "w"), ("model", "encoder", "b"))
    assert report.kept == (("model", "head", "w"), ("model", "head", "b"), ("model", "step"))


def test_allow_missing_that_does_not_name_a_leaf_lists_it() -> None:
    with pytest.raises(MismatchError) as err:
        tx.restore(backbone_state(), model_template(), allow_missing=["head.w"], path=("model",))
    assert [str(m) for m in err.value.mismatches] == [
        "model.head.b: missing from file, template has array float32 (1,) (not in allow_missing)",
        "model.step: missing from file, template has int (not in allow_missing)",
    ]


def test_allow_missing_names_may_restore_nothing_on_purpose() -> None:
    like = {"head": {"w": np.zeros(1, np.float32)}}
    out, report = tx.restore(NamedTuple(), like, allow_missing=["head"], report=True)
    assert report.restored == () and report.kept == (("head", "w"),) and out["head"]["w"][0] == 0
    with pytest.raises(MismatchError, match="nothing in the file's state fits"):
        tx.restore(NamedTuple(), like, allow_missing=True)


def test_allow_missing_rejects_values_that_are_no_paths() -> None:
    with pytest.raises(TypeError, match="allow_missing"):
        tx.restore(backbone_state(), model_template(), allow_missing=3)  # type: ignore[arg-type]


# --- the report through a layout, and for a strict restore --------------------------------------------------


def test_report_through_the_flux_layout_names_file_paths() -> None:
    mlp = eqx.nn.MLP(3, 2, 4, depth=1, key=jax.random.key(0))
    state = flux_state(mlp)
    out, report = tx.restore(state, mlp, layout=flux_state, path=("model_state",), report=True)
    assert type(out) is eqx.nn.MLP and isinstance(report, RestoreReport) and report.complete
    assert report.restored == tuple(
        ("model_state", "layers", i, name) for i in (1, 2) for name in ("weight", "bias")
    )


def test_strict_restore_report_is_complete_and_quiet() -> None:
    state = NamedTuple(w=np.ones(2, np.float32), n=np.int64(5))
    out, report = tx.restore(state, {"w": np.zeros(2, np.float32), "n": 0}, report=True)
    assert out["n"] == 5 and report.complete and report.restored == (("w",), ("n",))
    assert str(report) == "restored 2 of 2 template leaves from the file"

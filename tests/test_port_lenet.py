"""Acceptance: the Julia-trained LeNet ``Flux.state`` restored into Equinox and Flax nnx CNNs."""

from __future__ import annotations

import functools
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _mnist import mnist_test_set
from conftest import require_fixture
from flax import nnx

import treexchange as tx
from treexchange._port._eqx import build_equinox
from treexchange._port._eqx_layers import Flatten
from treexchange._port._nnx import build_nnx
from treexchange._port._nnx_layers import Flatten as NnxFlatten
from treexchange._port._spec import Layer

LENET = Layer(
    "Chain",
    children=(
        Layer("Conv", {"kernel": (5, 5), "in": 1, "out": 6, "σ": "relu"}),
        Layer("MaxPool", {"k": (2, 2)}),
        Layer("Conv", {"kernel": (5, 5), "in": 6, "out": 16, "σ": "relu"}),
        Layer("MaxPool", {"k": (2, 2)}),
        Layer("flatten"),
        Layer("Dense", {"in": 256, "out": 120, "σ": "relu"}),
        Layer("Dense", {"in": 120, "out": 84, "σ": "relu"}),
        Layer("Dense", {"in": 84, "out": 10}),
    ),
)
LENET_TEXT = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


def hand_written_equinox_lenet(key: jax.Array) -> eqx.nn.Sequential:
    """A LeNet as an Equinox user writes it (strides given: Equinox pools default to stride 1)."""
    k = jax.random.split(key, 5)
    return eqx.nn.Sequential(
        [
            eqx.nn.Conv2d(1, 6, 5, key=k[0]),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.MaxPool2d(2, stride=2),
            eqx.nn.Conv2d(6, 16, 5, key=k[1]),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.MaxPool2d(2, stride=2),
            Flatten(),
            eqx.nn.Linear(256, 120, key=k[2]),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.Linear(120, 84, key=k[3]),
            eqx.nn.Lambda(jax.nn.relu),
            eqx.nn.Linear(84, 10, key=k[4]),
        ]
    )


def _accuracy(predict, images: np.ndarray, labels: np.ndarray) -> float:  # type: ignore[no-untyped-def]
    predict = jax.jit(predict)
    hits = 0
    for start in range(0, len(images), 2000):
        logits = predict(jnp.asarray(images[start : start + 2000]))
        hits += int((np.asarray(logits).argmax(axis=1) == labels[start : start + 2000]).sum())
    return hits / len(images)


@pytest.mark.parametrize("make", ["builder", "hand-written"])
def test_lenet_state_restored_into_equinox_classifies_mnist(make: str) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    images, labels = mnist_test_set()
    key = jax.random.key(0)
    like = build_equinox(LENET, key=key) if make == "builder" else hand_written_equinox_lenet(key)
    model = tx.load(path, "lenet_state", like=like, layout=tx.flux_state)
    acc = _accuracy(jax.vmap(model), images, labels)
    assert acc >= 0.975, acc
    # and back: the state written from the restored model is the file's, array for array
    original = tx.load(path, "lenet_state")
    again = tx.flux_state(model, flux="0.14")
    for mine, theirs in zip(again.layers, original.layers):
        assert list(mine) == list(theirs) if theirs != () else mine == ()
        if theirs != ():
            assert np.array_equal(mine.weight, theirs.weight)


def hand_written_nnx_lenet() -> nnx.Sequential:
    """A LeNet as a Flax user writes it: channels last, pools as partials, explicit VALID padding."""
    rngs = nnx.Rngs(0)
    pool = functools.partial(nnx.max_pool, window_shape=(2, 2), strides=(2, 2))
    return nnx.Sequential(
        nnx.Conv(1, 6, (5, 5), padding="VALID", rngs=rngs),
        nnx.relu,
        pool,
        nnx.Conv(6, 16, (5, 5), padding="VALID", rngs=rngs),
        nnx.relu,
        pool,
        NnxFlatten(),
        nnx.Linear(256, 120, rngs=rngs),
        nnx.relu,
        nnx.Linear(120, 84, rngs=rngs),
        nnx.relu,
        nnx.Linear(84, 10, rngs=rngs),
    )


@pytest.mark.parametrize("make", ["builder", "hand-written"])
def test_lenet_state_restored_into_flax_nnx_classifies_mnist(make: str) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    images, labels = mnist_test_set()
    like = build_nnx(LENET, rngs=nnx.Rngs(0)) if make == "builder" else hand_written_nnx_lenet()
    model = tx.load(path, "lenet_state", like=like, layout=tx.flux_state)
    graphdef, params = nnx.split(model)

    def predict(x: jax.Array) -> jax.Array:
        return nnx.merge(graphdef, params)(x.transpose(0, 2, 3, 1))  # NCHW -> NHWC (channels last)

    acc = _accuracy(predict, images, labels)
    assert acc >= 0.975, acc
    original = tx.load(path, "lenet_state")
    again = tx.flux_state(model, flux="0.14")
    for mine, theirs in zip(again.layers, original.layers):
        if theirs != ():
            assert np.array_equal(mine.weight, theirs.weight) and np.array_equal(mine.bias, theirs.bias)


def hand_written_linen_lenet() -> tuple[Any, Any]:
    """A LeNet as a Flax linen user writes it, with the variables ``module.init`` gives."""
    from flax import linen as nn

    from treexchange._port._linen_layers import Flatten as LinenFlatten

    pool = functools.partial(nn.max_pool, window_shape=(2, 2), strides=(2, 2))
    module = nn.Sequential(
        [
            nn.Conv(6, (5, 5), padding="VALID"),
            nn.relu,
            pool,
            nn.Conv(16, (5, 5), padding="VALID"),
            nn.relu,
            pool,
            LinenFlatten(),
            nn.Dense(120),
            nn.relu,
            nn.Dense(84),
            nn.relu,
            nn.Dense(10),
        ]
    )
    return module, module.init(jax.random.key(0), jnp.ones((1, 28, 28, 1)))


@pytest.mark.parametrize("make", ["from_flux", "hand-written"])
def test_lenet_state_restored_into_flax_linen_classifies_mnist(make: str) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    images, labels = mnist_test_set()
    if make == "from_flux":
        module, variables = tx.from_flux(path, "lenet_state", architecture=LENET_TEXT, target="linen")
    else:
        module, variables = tx.load(
            path, "lenet_state", like=hand_written_linen_lenet(), layout=tx.flux_state
        )

    def predict(x: jax.Array) -> jax.Array:
        return module.apply(variables, x.transpose(0, 2, 3, 1))  # NCHW -> NHWC (channels last)

    acc = _accuracy(predict, images, labels)
    assert acc >= 0.975, acc
    original = tx.load(path, "lenet_state")
    again = tx.flux_state((module, variables), flux="0.14")
    for mine, theirs in zip(again.layers, original.layers, strict=True):
        if theirs != ():
            assert np.array_equal(mine.weight, theirs.weight) and np.array_equal(mine.bias, theirs.bias)

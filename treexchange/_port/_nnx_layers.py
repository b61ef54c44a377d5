"""Small Flax nnx modules for Flux layers that Flax lacks (or whose defaults differ).

They take a batch, channels last (layer-spec §0.2: a Julia batch ``(s1, …, sN, C, B)`` is the
Flax array ``(B, sN, …, s1, C)``; dense data ``(F, B)`` is ``(B, F)``).

Example:
    >>> import jax.numpy as jnp
    >>> MaxPool((2, 2), (2, 2), ((0, 0), (0, 0)))(jnp.ones((1, 4, 4, 3))).shape
    (1, 2, 2, 3)
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx


class Flatten(nnx.Module):
    """Flux's ``flatten`` of a channels-last batch, in Flux's element order.

    Julia's column-major flatten of ``(W, H, C)`` runs ``W`` fastest; the channels-last batch is
    ``(N, H, W, C)``, so moving the channel axis first (``(N, C, H, W)``) and reshaping row-major gives
    the same order (layer-spec §1.4). Doing it here rather than permuting the next Dense's columns
    needs no channel count, which the model alone does not always reveal (a pool or norm first).
    """

    def __call__(self, x: jax.Array) -> jax.Array:
        return flux_flatten(x)


def flux_flatten(x: jax.Array) -> jax.Array:
    """Flux's column-major ``flatten`` of a channels-last batch (see :class:`Flatten`)."""
    if x.ndim > 2:
        x = jnp.moveaxis(x, -1, 1)
    return x.reshape(x.shape[0], -1)


class MaxPool(nnx.Module):
    """Flux ``MaxPool`` with its window, stride and padding spelt out (Flax's stride default is 1)."""

    def __init__(self, window: tuple[int, ...], strides: tuple[int, ...], padding: Any) -> None:
        self.window = tuple(window)
        self.strides = tuple(strides)
        self.padding = tuple(tuple(p) for p in padding)

    def __call__(self, x: jax.Array) -> jax.Array:
        return nnx.max_pool(x, self.window, self.strides, self.padding)


class MeanPool(MaxPool):
    """Flux ``MeanPool``: divides by the window size, padding included (NNlib ``pooling_direct.jl``)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return nnx.avg_pool(x, self.window, self.strides, self.padding, count_include_pad=True)


class AdaptivePool(nnx.Module):
    """Flux ``AdaptiveMaxPool``/``AdaptiveMeanPool``: uniform windows ``stride = in ÷ out``."""

    def __init__(self, op: str, out: tuple[int, ...]) -> None:
        self.op = op
        self.out = tuple(out)  # Flax spatial order

    def __call__(self, x: jax.Array) -> jax.Array:
        return adaptive_pool(self.op, self.out, x)


def adaptive_pool(op: str, out: tuple[int, ...], x: jax.Array) -> jax.Array:
    """Flux's adaptive pool (``op`` ``"max"``/``"mean"``) to the spatial size ``out`` (Flax order)."""
    spatial = x.shape[1:-1]
    strides = tuple(size // o for size, o in zip(spatial, out))
    window = tuple(size - (o - 1) * s for size, o, s in zip(spatial, out, strides))
    if op == "max":
        return nnx.max_pool(x, window, strides, "VALID")
    return nnx.avg_pool(x, window, strides, "VALID")


class GlobalPool(nnx.Module):
    """Flux ``GlobalMaxPool``/``GlobalMeanPool``: spatial dims reduced to size 1."""

    def __init__(self, op: str) -> None:
        self.op = op

    def __call__(self, x: jax.Array) -> jax.Array:
        return global_pool(self.op, x)


def global_pool(op: str, x: jax.Array) -> jax.Array:
    """Flux's global pool: the spatial dims of a channels-last batch reduced to size 1."""
    axes = tuple(range(1, x.ndim - 1))
    return jnp.max(x, axis=axes, keepdims=True) if op == "max" else jnp.mean(x, axis=axes, keepdims=True)


class CrossCor(nnx.Module):
    """Flux ``CrossCor``: what ``nnx.Conv`` computes (no kernel flip)."""

    def __init__(self, conv: nnx.Conv) -> None:
        self.conv = conv

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.conv(x)


class AlphaDropout(nnx.Module):
    """Flux ``AlphaDropout``; identity at inference."""

    def __init__(self, p: float) -> None:
        self.p = float(p)

    def __call__(self, x: jax.Array) -> jax.Array:
        return x


class Bilinear(nnx.Module):
    """Flux ``Bilinear``: ``z[b, o] = σ(Σᵢⱼ W[o,i,j] x[b,i] y[b,j] + b[o])`` with Flux's W as-is."""

    def __init__(self, weight: jax.Array, bias: jax.Array | None, activation: str) -> None:
        self.weight = nnx.Param(weight)
        self.bias = nnx.Param(bias) if bias is not None else None
        self.activation = activation

    def __call__(self, x: Any, y: Any = None) -> jax.Array:
        bias = self.bias.get_value() if self.bias is not None else None
        return bilinear(self.weight.get_value(), bias, self.activation, x, y)


def bilinear(weight: jax.Array, bias: jax.Array | None, activation: str, x: Any, y: Any = None) -> jax.Array:
    """Flux's ``Bilinear`` on a batch; ``x`` alone is used twice, a tuple ``x`` is the pair."""
    from ._activations import function_of

    if y is None:
        x, y = x if isinstance(x, tuple) else (x, x)
    z = jnp.einsum("oij,bi,bj->bo", weight, x, y)
    if bias is not None:
        z = z + bias
    return function_of(activation)(z)


def julia_dim_axis(julia_dim: int, ndim: int) -> int:
    """The Flax (batch, channels-last) axis of Julia dim ``julia_dim`` for an array of ``ndim`` axes."""
    nsp = ndim - 2
    if julia_dim <= nsp:
        return 1 + nsp - julia_dim
    if julia_dim == nsp + 1:
        return ndim - 1
    raise ValueError(f"Julia dim {julia_dim} of a {ndim}-d batch is the batch dim")


def connect(name: str, values: list[jax.Array]) -> jax.Array:
    """A Flux connection (``+``, ``*``, ``vcat``, ``hcat``, ``max``) on channels-last batches."""
    if name in ("vcat", "hcat"):
        axis = julia_dim_axis(1 if name == "vcat" else 2, values[0].ndim)
        return jnp.concatenate(values, axis=axis)
    out = values[0]
    for v in values[1:]:
        out = out + v if name == "+" else out * v if name == "*" else jnp.maximum(out, v)
    if name not in ("+", "*", "max"):
        raise ValueError(f"unknown connection {name!r}")
    return out


class Activated(nnx.Module):
    """One Flux layer with its activation outside a Chain (reads back as that one layer)."""

    def __init__(self, layer: Any, activation: str) -> None:
        self.layer = layer
        self.activation = activation

    def __call__(self, x: Any) -> Any:
        from ._activations import function_of

        return function_of(self.activation)(self.layer(x))


class Function(nnx.Module):
    """A Flux function that is a Chain entry of its own (``Chain(Dense(2 => 3), relu)``): it reads
    back as that entry, never folded into the layer before it (see ``_eqx_layers.Function``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, x: Any) -> Any:
        from ._activations import function_of

        return function_of(self.name)(x)


class NamedChain(nnx.Module):
    """Flux ``Chain(a = …, b = …)``."""

    def __init__(self, layers: list[Any], names: tuple[str, ...]) -> None:
        self.layers = nnx.List(layers)
        self.names = tuple(names)

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x


class Parallel(nnx.Module):
    """Flux ``Parallel(connection, layers…)``."""

    def __init__(
        self, layers: list[Any], connection: str = "+", names: tuple[str, ...] | None = None
    ) -> None:
        self.layers = nnx.List(layers)
        self.connection = connection
        self.names = names

    def __call__(self, x: Any) -> Any:
        return connect(self.connection, [layer(x) for layer in self.layers])


class SkipConnection(nnx.Module):
    """Flux ``SkipConnection(layers, connection)``: ``connection(layers(x), x)``."""

    def __init__(self, layers: Any, connection: str = "+") -> None:
        self.layers = layers
        self.connection = connection

    def __call__(self, x: Any) -> Any:
        return connect(self.connection, [self.layers(x), x])


class PairwiseFusion(nnx.Module):
    """Flux ``PairwiseFusion(connection, layers…)``; returns the tuple of every layer's output."""

    def __init__(self, layers: list[Any], connection: str = "+") -> None:
        self.layers = nnx.List(layers)
        self.connection = connection

    def __call__(self, x: Any) -> tuple[Any, ...]:
        xs = x if isinstance(x, tuple) else (x,) * len(self.layers)
        outputs = [self.layers[0](xs[0])]
        for layer, xi in zip(list(self.layers)[1:], xs[1:]):
            outputs.append(layer(connect(self.connection, [outputs[-1], xi])))
        return tuple(outputs)


class Maxout(nnx.Module):
    """Flux ``Maxout(layers…)``: the element-wise maximum of the layers' outputs."""

    def __init__(self, layers: list[Any]) -> None:
        self.layers = nnx.List(layers)

    def __call__(self, x: Any) -> Any:
        return connect("max", [layer(x) for layer in self.layers])


class Recurrence(nnx.Module):
    """Flux's ``RNN``/``LSTM``/``GRU``/``GRUv3`` over a batch of sequences, arrays in Flux's shapes.

    Input ``(batch, time, features)`` (``nnx.RNN``'s layout; the Julia sequence ``(in, L, B)``
    reversed), output the hidden states ``(batch, time, H)``, from a zero initial state (Flux ≥ 0.15's
    ``initialstates``; a Flux ≤ 0.14 ``state0`` is not restored). Flax's own cells split every gate
    into separate ``Linear`` layers and put the GRU's hidden bias inside the reset product, so the
    cell is written here once for all four kinds, from Flux's equations (layer-spec §2.13):

    - RNN: ``h' = σ(Wi x + Wh h + b)``
    - LSTM: ``i, f, g, o`` blocks of ``Wi x + Wh h + b``; ``c' = σ(f) c + σ(i) tanh(g)``,
      ``h' = σ(o) tanh(c')``
    - GRU: ``r, z`` from ``Wi x + Wh h + b``; ``h̃ = tanh(Wi_h̃ x + b_h̃ + r ⊙ (Wh_h̃ h))``
    - GRUv3: as GRU but ``h̃ = tanh(Wi_h̃ x + b_h̃ + Wh_h̃ (r ⊙ h))`` with its own ``Wh_h̃``
    """

    def __init__(
        self,
        kind: str,
        weight_ih: jax.Array,
        weight_hh: jax.Array,
        bias: jax.Array,
        weight_hh_candidate: jax.Array | None = None,
        activation: str = "tanh",
    ) -> None:
        self.kind = kind
        self.weight_ih = nnx.Param(weight_ih)  # Wi (G·H, in)
        self.weight_hh = nnx.Param(weight_hh)  # Wh (G·H, H); GRUv3: (2H, H)
        self.bias = nnx.Param(bias)  # b (G·H,)
        self.weight_hh_candidate = nnx.Param(weight_hh_candidate) if weight_hh_candidate is not None else None
        self.activation = activation

    def __call__(self, xs: jax.Array) -> jax.Array:
        wc = self.weight_hh_candidate.get_value() if self.weight_hh_candidate is not None else None
        arrays = (self.weight_ih.get_value(), self.weight_hh.get_value(), self.bias.get_value(), wc)
        return recurrence(self.kind, self.activation, *arrays, xs)


def recurrence(
    kind: str,
    activation: str,
    wi: jax.Array,
    wh: jax.Array,
    b: jax.Array,
    wc: jax.Array | None,
    xs: jax.Array,
) -> jax.Array:
    """Flux's recurrent ``kind`` over ``xs`` ``(batch, time, in)`` from a zero state
    (the equations are in :class:`Recurrence`)."""
    from ._activations import function_of

    hidden = wh.shape[-1]
    zero = jnp.zeros((xs.shape[0], hidden), xs.dtype)
    act = function_of(activation)

    def step(carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        if kind == "LSTM":
            h, c = carry
            i, f, g, o = jnp.split(x @ wi.T + h @ wh.T + b, 4, axis=-1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        h = carry
        if kind == "RNN":
            h = act(x @ wi.T + h @ wh.T + b)
            return h, h
        gx = jnp.split(x @ wi.T + b, 3, axis=-1)
        gh = jnp.split(h @ wh.T, 3 if kind == "GRU" else 2, axis=-1)
        r = jax.nn.sigmoid(gx[0] + gh[0])
        z = jax.nn.sigmoid(gx[1] + gh[1])
        if kind == "GRU":
            candidate = jnp.tanh(gx[2] + r * gh[2])
        else:
            assert wc is not None
            candidate = jnp.tanh(gx[2] + (r * h) @ wc.T)
        h = (1 - z) * candidate + z * h
        return h, h

    carry0: Any = (zero, zero) if kind == "LSTM" else zero
    _, hs = jax.lax.scan(step, carry0, jnp.swapaxes(xs, 0, 1))
    return jnp.swapaxes(hs, 0, 1)

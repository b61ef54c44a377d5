"""Small Flax nnx modules for Flux layers that Flax lacks (or whose defaults differ).

They take a batch, channels last (docs/porting.md §Data layout: a Julia batch ``(s1, …, sN, C, B)`` is the
Flax array ``(B, sN, …, s1, C)``; dense data ``(F, B)`` is ``(B, F)``).

Example:
    >>> import jax.numpy as jnp
    >>> MaxPool((2, 2), (2, 2), ((0, 0), (0, 0)))(jnp.ones((1, 4, 4, 3))).shape
    (1, 2, 2, 3)
"""

from __future__ import annotations

from typing import Any

import jax
from flax import nnx

from ._activations import function_of
from ._jaxops import (
    RecurrentArrays,
    adaptive_pool,
    bilinear,
    branch_inputs,
    cell_step,
    connect,
    flax_scale,
    flux_flatten,
    global_pool,
    recurrence,
    zero_state,
)


class Flatten(nnx.Module):
    """Flux's ``flatten`` of a channels-last batch, in Flux's element order.

    Julia's column-major flatten of ``(W, H, C)`` runs ``W`` fastest; the channels-last batch is
    ``(N, H, W, C)``, so moving the channel axis first (``(N, C, H, W)``) and reshaping row-major gives
    the same order (docs/porting.md §Flatten order). Doing it here rather than permuting the next
    Dense's columns needs no channel count, which the model alone does not always reveal (a pool or
    norm first).
    """

    def __call__(self, x: jax.Array) -> jax.Array:
        return flux_flatten(x)


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


class GlobalPool(nnx.Module):
    """Flux ``GlobalMaxPool``/``GlobalMeanPool``: spatial dims reduced to size 1."""

    def __init__(self, op: str) -> None:
        self.op = op

    def __call__(self, x: jax.Array) -> jax.Array:
        return global_pool(self.op, x)


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


class Scale(nnx.Module):
    """Flux ``Scale(size…)`` on a batch: ``x * weight + bias`` with the arrays laid out as one whole
    sample, channels last (``_flaxread.scale_perm``)."""

    def __init__(self, weight: jax.Array, bias: jax.Array | None) -> None:
        self.weight = nnx.Param(weight)
        self.bias = nnx.Param(bias) if bias is not None else None

    def __call__(self, x: jax.Array) -> jax.Array:
        bias = self.bias.get_value() if self.bias is not None else None
        return flax_scale(x, self.weight.get_value(), bias)


class Activated(nnx.Module):
    """One Flux layer with its activation outside a Chain (reads back as that one layer)."""

    def __init__(self, layer: Any, activation: str) -> None:
        self.layer = layer
        self.activation = activation

    def __call__(self, x: Any) -> Any:
        return function_of(self.activation)(self.layer(x))


class Function(nnx.Module):
    """A Flux function that is a Chain entry of its own (``Chain(Dense(2 => 3), relu)``): it reads
    back as that entry, never folded into the layer before it (see ``_eqx_layers.Function``)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self, x: Any) -> Any:
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

    def __call__(self, *xs: Any) -> Any:  # (a Flax Sequential spreads a tuple output over the arguments)
        inputs = branch_inputs(xs[0] if len(xs) == 1 else xs, len(self.layers))
        return connect(self.connection, [layer(xi) for layer, xi in zip(self.layers, inputs, strict=True)])


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

    def __call__(self, *given: Any) -> tuple[Any, ...]:  # (a Flax Sequential spreads a tuple output)
        x = given[0] if len(given) == 1 else given
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


class _FluxRecurrent(nnx.Module):
    """The arrays of a Flux recurrent layer or cell, in Flux's shapes and gate order (``kind`` is the
    layer's: ``"GRU"`` for a ``GRUCell``): params ``weight_ih`` ``(G·H, in)``, ``weight_hh``, ``bias``,
    GRUv3's ``weight_hh_candidate``, and a Flux ≤ 0.14 ``Recur``'s learnt ``state0_h``/``state0_c``."""

    def __init__(
        self,
        kind: str,
        weight_ih: jax.Array,
        weight_hh: jax.Array,
        bias: jax.Array | None,
        weight_hh_candidate: jax.Array | None = None,
        activation: str = "tanh",
        state0: Any = None,
        return_state: bool = False,
    ) -> None:
        self.kind = kind
        self.return_state = return_state  # (Flux ≥ 0.15's return_state=true: (outputs, last state))
        self.weight_ih = nnx.Param(weight_ih)  # Wi (G·H, in)
        self.weight_hh = nnx.Param(weight_hh)  # Wh (G·H, H); GRUv3: (2H, H)
        self.bias = nnx.Param(bias) if bias is not None else None  # b (G·H,); None: bias=false
        self.weight_hh_candidate = nnx.Param(weight_hh_candidate) if weight_hh_candidate is not None else None
        self.activation = activation
        parts = state0 if isinstance(state0, tuple) else (state0, None)
        self.state0_h = nnx.Param(parts[0]) if parts[0] is not None else None
        self.state0_c = nnx.Param(parts[1]) if parts[1] is not None else None

    def arrays(self) -> RecurrentArrays:
        """``(Wi, Wh, b, Wh_h̃)``, ``b`` None without bias, ``Wh_h̃`` None but for GRUv3."""
        wc = self.weight_hh_candidate.get_value() if self.weight_hh_candidate is not None else None
        bias = self.bias.get_value() if self.bias is not None else None
        return self.weight_ih.get_value(), self.weight_hh.get_value(), bias, wc


class Recurrence(_FluxRecurrent):
    """Flux's ``RNN``/``LSTM``/``GRU``/``GRUv3`` over a batch of sequences, arrays in Flux's shapes.

    Input ``(batch, time, features)`` (``nnx.RNN``'s layout; the Julia sequence ``(in, L, B)``
    reversed), output the hidden states ``(batch, time, H)``, from a zero initial state (Flux ≥ 0.15's
    ``initialstates``) or a Flux ≤ 0.14 ``Recur``'s learnt ``state0`` (``h``, LSTM ``(h, c)``, each
    ``(H,)``: the params ``state0_h``, ``state0_c``). Flax's own cells split every gate
    into separate ``Linear`` layers and put the GRU's hidden bias inside the reset product, so the
    cell is written here once for all four kinds, from Flux's equations (docs/porting.md §Recurrent layers):

    - RNN: ``h' = σ(Wi x + Wh h + b)``
    - LSTM: ``i, f, g, o`` blocks of ``Wi x + Wh h + b``; ``c' = σ(f) c + σ(i) tanh(g)``,
      ``h' = σ(o) tanh(c')``
    - GRU: ``r, z`` from ``Wi x + Wh h + b``; ``h̃ = tanh(Wi_h̃ x + b_h̃ + r ⊙ (Wh_h̃ h))``
    - GRUv3: as GRU but ``h̃ = tanh(Wi_h̃ x + b_h̃ + Wh_h̃ (r ⊙ h))`` with its own ``Wh_h̃``
    """

    def __call__(self, xs: jax.Array) -> Any:
        state0: Any = None
        if self.state0_h is not None:
            h = self.state0_h.get_value()
            state0 = (h, self.state0_c.get_value()) if self.state0_c is not None else h
        return recurrence(self.kind, self.activation, self.arrays(), xs, state0, self.return_state)


class Cell(_FluxRecurrent, nnx.RNNCellBase):
    """Flux ≥ 0.15's ``RNNCell``/``LSTMCell``/``GRUCell``/``GRUv3Cell`` alone: one step, the state
    carried by the caller, with Flax's cell call ``cell(carry, x) -> (carry', y)`` (so ``nnx.RNN(cell)``
    scans it). Flux's ``cell(x, h)`` is ``cell(h, x)`` here; ``x`` ``(…, in)`` with any leading
    (batch) axes, ``carry`` ``h`` ``(…, H)``, or for LSTM the pair ``(h, c)`` in Flux's order (Flax's
    ``nnx.LSTMCell`` carries ``(c, h)``); ``y`` is the new ``h``. The arrays and equations are
    :class:`Recurrence`'s; ``kind`` is the layer's (``"GRU"`` for a ``GRUCell``). Built without
    ``state0`` and ``return_state``: a Flux ≥ 0.15 cell has no learnt initial state, and its state is
    what it returns."""

    def __call__(self, carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        return cell_step(self.kind, self.activation, self.arrays(), carry, x)

    def initialize_carry(self, input_shape: tuple[int, ...], rngs: Any = None, carry_init: Any = None) -> Any:
        """Flux's ``initialstates``: zeros ``(…, H)`` for the batch axes of ``input_shape``."""
        return zero_state(self.kind, (*input_shape[:-1], int(self.weight_hh.get_value().shape[-1])))

    @property
    def num_feature_axes(self) -> int:
        return 1

"""Small Flax linen modules for Flux layers that Flax lacks (or whose defaults differ).

The linen twins of :mod:`._nnx_layers`, computing with the same functions
(:mod:`._jaxops`): a batch, channels last
(docs/porting.md §Data layout). Containers hold their children in a field named ``layers`` (linen names the
children's variable scopes ``layers_0``, ``layers_1`` …, as ``nn.Sequential`` does); a single child
is the scope ``layers`` (:class:`SkipConnection`) or ``layer`` (:class:`Activated`).

Example:
    >>> import jax, jax.numpy as jnp
    >>> pool = MaxPool((2, 2), (2, 2), ((0, 0), (0, 0)))
    >>> pool.apply({}, jnp.ones((1, 4, 4, 3))).shape
    (1, 2, 2, 3)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
from flax import linen as nn

from . import _jaxops as shared
from ._activations import function_of
from ._registry import RECURRENT_GATES


class Flatten(nn.Module):
    """Flux's ``flatten`` of a channels-last batch, in Flux's element order (``_nnx_layers.Flatten``)."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return shared.flux_flatten(x)


class MaxPool(nn.Module):
    """Flux ``MaxPool`` with its window, stride and padding spelt out (Flax's stride default is 1)."""

    window: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[tuple[int, int], ...]

    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.max_pool(x, tuple(self.window), tuple(self.strides), tuple(self.padding))


class MeanPool(MaxPool):
    """Flux ``MeanPool``: divides by the window size, padding included."""

    def __call__(self, x: jax.Array) -> jax.Array:
        return nn.avg_pool(
            x, tuple(self.window), tuple(self.strides), tuple(self.padding), count_include_pad=True
        )


class AdaptivePool(nn.Module):
    """Flux ``AdaptiveMaxPool``/``AdaptiveMeanPool`` (``op`` ``"max"``/``"mean"``, ``out`` in Flax order)."""

    op: str
    out: tuple[int, ...]

    def __call__(self, x: jax.Array) -> jax.Array:
        return shared.adaptive_pool(self.op, tuple(self.out), x)


class GlobalPool(nn.Module):
    """Flux ``GlobalMaxPool``/``GlobalMeanPool``."""

    op: str

    def __call__(self, x: jax.Array) -> jax.Array:
        return shared.global_pool(self.op, x)


class CrossCor(nn.Conv):
    """Flux ``CrossCor``: what ``nn.Conv`` computes (no kernel flip); a marker subclass, so the
    reader knows not to flip its kernel."""


class AlphaDropout(nn.Module):
    """Flux ``AlphaDropout``; identity at inference."""

    p: float

    def __call__(self, x: jax.Array) -> jax.Array:
        return x


class Bilinear(nn.Module):
    """Flux ``Bilinear`` with Flux's weight ``(out, in1, in2)`` as it is (param ``weight``, ``bias``)."""

    out: int
    activation: str = "identity"
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: Any, y: Any = None) -> jax.Array:
        first, second = (x if isinstance(x, tuple) else (x, x)) if y is None else (x, y)
        in1, in2 = first.shape[-1], second.shape[-1]
        bound = 1.0 / float(in1 * in2) ** 0.5

        def init(key: Any, shape: tuple[int, ...]) -> jax.Array:
            return jax.random.uniform(key, shape, minval=-bound, maxval=bound)

        weight = self.param("weight", init, (self.out, in1, in2))
        bias = self.param("bias", init, (self.out,)) if self.use_bias else None
        return shared.bilinear(weight, bias, self.activation, first, second)


class Scale(nn.Module):
    """Flux ``Scale(size…)`` on a batch: params ``weight``, ``bias`` laid out as one sample, channels
    last (``_flaxread.scale_perm``); they cover a whole sample."""

    shape: tuple[int, ...]
    use_bias: bool = True

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        weight = self.param("weight", nn.initializers.ones, self.shape)
        bias = self.param("bias", nn.initializers.zeros, self.shape) if self.use_bias else None
        return shared.flax_scale(x, weight, bias)


class Activated(nn.Module):
    """One Flux layer with its activation outside a Chain (reads back as that one layer)."""

    layer: Any
    activation: str

    def __call__(self, x: Any) -> Any:
        return function_of(self.activation)(self.layer(x))


class Function(nn.Module):
    """A Flux function that is a Chain entry of its own (never folded into the layer before it);
    ``function`` is its Flux name (linen reserves ``name`` for the module's own)."""

    function: str

    def __call__(self, x: Any) -> Any:
        return function_of(self.function)(x)


class InstanceNorm(nn.InstanceNorm):
    """``nn.InstanceNorm`` that knows its channel count (Flux's ``chs``, part of ``Flux.state``),
    which a norm without scale and bias does not reveal otherwise."""

    features: int | None = None


class GroupNorm(nn.GroupNorm):
    """``nn.GroupNorm`` that knows its channel count (see :class:`InstanceNorm`)."""

    features: int | None = None


class LayerNorm(nn.LayerNorm):
    """``nn.LayerNorm`` that knows its feature count (Flux's ``size``; see :class:`InstanceNorm`)."""

    features: int | None = None


class NamedChain(nn.Module):
    """Flux ``Chain(a = …, b = …)``."""

    layers: Sequence[Any]
    names: tuple[str, ...]

    def __call__(self, x: Any) -> Any:
        for layer in self.layers:
            x = layer(x)
        return x


class Parallel(nn.Module):
    """Flux ``Parallel(connection, layers…)``."""

    layers: Sequence[Any]
    connection: str = "+"
    names: tuple[str, ...] | None = None

    def __call__(self, *xs: Any) -> Any:  # (a Flax Sequential spreads a tuple output over the arguments)
        inputs = shared.branch_inputs(xs[0] if len(xs) == 1 else xs, len(self.layers))
        return shared.connect(
            self.connection, [layer(xi) for layer, xi in zip(self.layers, inputs, strict=True)]
        )


class SkipConnection(nn.Module):
    """Flux ``SkipConnection(layers, connection)``: ``connection(layers(x), x)``."""

    layers: Any
    connection: str = "+"

    def __call__(self, x: Any) -> Any:
        return shared.connect(self.connection, [self.layers(x), x])


class PairwiseFusion(nn.Module):
    """Flux ``PairwiseFusion(connection, layers…)``; returns the tuple of every layer's output."""

    layers: Sequence[Any]
    connection: str = "+"

    def __call__(self, *given: Any) -> tuple[Any, ...]:  # (a Flax Sequential spreads a tuple output)
        x = given[0] if len(given) == 1 else given
        xs = x if isinstance(x, tuple) else (x,) * len(self.layers)
        outputs = [self.layers[0](xs[0])]
        for layer, xi in zip(list(self.layers)[1:], xs[1:]):
            outputs.append(layer(shared.connect(self.connection, [outputs[-1], xi])))
        return tuple(outputs)


class Maxout(nn.Module):
    """Flux ``Maxout(layers…)``: the element-wise maximum of the layers' outputs."""

    layers: Sequence[Any]

    def __call__(self, x: Any) -> Any:
        return shared.connect("max", [layer(x) for layer in self.layers])


class Recurrence(nn.Module):
    """Flux's ``RNN``/``LSTM``/``GRU``/``GRUv3`` over ``(batch, time, in)``, arrays in Flux's shapes
    (params ``weight_ih`` ``(G·H, in)``, ``weight_hh``, ``bias``, GRUv3 ``weight_hh_candidate``; with
    ``learnt_state0`` a Flux ≤ 0.14 ``Recur``'s initial state ``state0_h`` ``(H,)``, LSTM also
    ``state0_c``), the equations of ``_nnx_layers.Recurrence``."""

    kind: str
    features: int
    activation: str = "tanh"
    learnt_state0: int = 0  # learnt initial-state arrays: 0 (from zeros), 1 (h) or 2 (LSTM's h, c)
    use_bias: bool = True  # False: Flux ≥ 0.15's bias=false (no ``bias`` param)
    return_state: bool = False  # Flux ≥ 0.15's return_state=true: (outputs, last state)

    @nn.compact
    def __call__(self, xs: jax.Array) -> jax.Array:
        arrays = _flux_recurrent_params(self, self.kind, self.features, xs.shape[-1], self.use_bias)
        state0: Any = None
        if self.learnt_state0:
            zeros = jax.nn.initializers.zeros
            state0 = self.param("state0_h", zeros, (self.features,))
            if self.learnt_state0 == 2:
                state0 = (state0, self.param("state0_c", zeros, (self.features,)))
        return shared.recurrence(self.kind, self.activation, arrays, xs, state0, self.return_state)


def _flux_recurrent_params(
    module: nn.Module, kind: str, hidden: int, n_in: int, use_bias: bool
) -> shared.RecurrentArrays:
    """``(Wi, Wh, b, Wh_h̃)`` of a Flux recurrent ``kind`` as ``module``'s params, in Flux's shapes
    (Flux's init: Glorot-uniform matrices, zero bias); ``b`` None without bias, ``Wh_h̃`` but for GRUv3."""
    gates = RECURRENT_GATES[kind]
    glorot = jax.nn.initializers.glorot_uniform()
    wi = module.param("weight_ih", glorot, (gates * hidden, n_in))
    wh = module.param("weight_hh", glorot, ((2 if kind == "GRUv3" else gates) * hidden, hidden))
    b = module.param("bias", jax.nn.initializers.zeros, (gates * hidden,)) if use_bias else None
    wc = module.param("weight_hh_candidate", glorot, (hidden, hidden)) if kind == "GRUv3" else None
    return wi, wh, b, wc


class Cell(nn.RNNCellBase):
    """Flux ≥ 0.15's ``RNNCell``/``LSTMCell``/``GRUCell``/``GRUv3Cell`` alone (one step, the state
    carried by the caller), the params and equations of :class:`Recurrence` (``kind`` is the layer's:
    ``"GRU"`` for a ``GRUCell``), with Flax's cell call ``cell.apply(variables, carry, x) -> (carry',
    y)`` (so ``nn.RNN(cell)`` scans it): Flux's ``cell(x, h)`` is ``(h, x)`` here, the LSTM carry the
    pair ``(h, c)`` in Flux's order (``nn.LSTMCell`` carries ``(c, h)``), ``y`` the new ``h``."""

    kind: str
    features: int
    activation: str = "tanh"
    use_bias: bool = True  # False: Flux ≥ 0.15's bias=false (no ``bias`` param)
    learnt_state0 = 0  # (as a Recurrence's, for the reader: a Flux ≥ 0.15 cell holds no state0)
    return_state = False

    @nn.compact
    def __call__(self, carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        arrays = _flux_recurrent_params(self, self.kind, self.features, x.shape[-1], self.use_bias)
        return shared.cell_step(self.kind, self.activation, arrays, carry, x)

    @nn.nowrap
    def initialize_carry(self, rng: Any, input_shape: tuple[int, ...]) -> Any:
        """Flux's ``initialstates``: zeros ``(…, H)`` for the batch axes of ``input_shape``."""
        return shared.zero_state(self.kind, (*input_shape[:-1], self.features))

    @property
    def num_feature_axes(self) -> int:
        return 1

"""Small Equinox modules for Flux layers that Equinox lacks (or whose defaults differ).

Every module here works on ONE sample in Equinox style, channels first, under the data
docs/porting.md §Data layout: a Julia sample of size ``(s1, …, sN, C)`` is the Python array
``(C, sN, …, s1)``. Julia dim ``d`` of a sample with Python ``ndim`` axes is Python axis ``ndim - d``.

Example:
    >>> import jax.numpy as jnp
    >>> Flatten()(jnp.arange(6.0).reshape(1, 2, 3)).shape
    (6,)
    >>> AdaptivePool("max", (2,))(jnp.arange(8.0).reshape(1, 8)).tolist()
    [[3.0, 7.0]]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from ._activations import function_of
from ._jaxops import branch_inputs, scale_shift

_NO_STATE: Any = object()  # no eqx.nn.State was passed: the call returns the output alone


class Flatten(eqx.Module):
    """Flux's ``flatten`` on one sample: column-major over Julia dims = row-major ``ravel`` here (§1.4)."""

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        return jnp.ravel(x)


class CrossCor(eqx.Module):
    """Flux ``CrossCor``: a cross-correlation, which is what ``eqx.nn.Conv`` computes (no kernel flip)."""

    conv: eqx.nn.Conv

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        return self.conv(x)


class AdaptivePool(eqx.Module):
    """Flux ``AdaptiveMaxPool``/``AdaptiveMeanPool``: uniform windows ``stride = in ÷ out``,
    ``k = in − (out − 1)·stride`` per spatial dim (Flux ``conv.jl``; not PyTorch's floor/ceil windows)."""

    op: str = eqx.field(static=True)
    out: tuple[int, ...] = eqx.field(static=True)  # Python spatial order

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        spatial = x.shape[1:]
        strides = tuple(size // out for size, out in zip(spatial, self.out))
        window = tuple(size - (out - 1) * s for size, out, s in zip(spatial, self.out, strides))
        return _reduce(self.op, x, (1, *window), (1, *strides))


class GlobalPool(eqx.Module):
    """Flux ``GlobalMaxPool``/``GlobalMeanPool``: one value per channel, spatial dims kept as size 1."""

    op: str = eqx.field(static=True)

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        axes = tuple(range(1, x.ndim))
        return (
            jnp.max(x, axis=axes, keepdims=True)
            if self.op == "max"
            else jnp.mean(x, axis=axes, keepdims=True)
        )


def _reduce(op: str, x: jax.Array, window: tuple[int, ...], strides: tuple[int, ...]) -> jax.Array:
    if op == "max":
        return lax.reduce_window(x, -jnp.inf, lax.max, window, strides, "VALID")
    total = lax.reduce_window(x, 0.0, lax.add, window, strides, "VALID")
    count = 1
    for w in window:
        count *= w
    return total / count


class InstanceNorm(eqx.Module):
    """Flux ``InstanceNorm`` (no running statistics): ``eqx.nn.GroupNorm`` with one group per channel."""

    norm: eqx.nn.GroupNorm

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        return self.norm(x)


class LayerNormStdEps(eqx.Module):
    """Flux ≤ 0.14 ``LayerNorm``: ``(x − μ) / (σ + ϵ)`` over the last ``len(shape)`` axes (ϵ added
    to the biased standard deviation, Flux ``normalise`` before #2421), then ``scale``/``bias``."""

    weight: jax.Array | None
    bias: jax.Array | None
    shape: tuple[int, ...] = eqx.field(static=True)  # Python order (reversed Flux ``size``)
    eps: float = eqx.field(static=True, default=1e-5)

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        axes = tuple(range(x.ndim - len(self.shape), x.ndim))
        mean = jnp.mean(x, axis=axes, keepdims=True)
        std = jnp.sqrt(jnp.mean((x - mean) ** 2, axis=axes, keepdims=True))
        y = (x - mean) / (std + self.eps)
        if self.weight is not None:
            y = y * self.weight
        if self.bias is not None:
            y = y + self.bias
        return y


class AlphaDropout(eqx.Module):
    """Flux ``AlphaDropout``; identity at inference (training-mode noise is not ported)."""

    p: float = eqx.field(static=True)

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        return x


class Bilinear(eqx.Module):
    """Flux ``Bilinear((in1, in2) => out, σ)``: ``z[o] = σ(Σᵢⱼ W[o,i,j] x[i] y[j] + b[o])`` (W as-is)."""

    weight: jax.Array
    bias: jax.Array | None
    activation: str = eqx.field(static=True, default="identity")

    def __call__(self, x: Any, y: Any = None, *, key: Any = None) -> jax.Array:
        if y is None:
            x, y = x if isinstance(x, tuple) else (x, x)  # Flux: B(x) == B(x, x), B((x, y)) == B(x, y)
        z = jnp.einsum("oij,i,j->o", self.weight, x, y)
        if self.bias is not None:
            z = z + self.bias
        return function_of(self.activation)(z)


class Scale(eqx.Module):
    """Flux ``Scale(size…)``: ``x .* scale .+ bias`` over the leading Julia dims of ``x`` (here the
    trailing axes, ``weight = rev(scale)``); its activation follows it, as for Dense."""

    weight: jax.Array
    bias: jax.Array | None

    def __call__(self, x: jax.Array, *, key: Any = None) -> jax.Array:
        return scale_shift(x, self.weight, self.bias)


def connect(name: str, values: list[jax.Array]) -> Any:
    """Apply a Flux connection (``+``, ``*``, ``vcat``, ``hcat``, ``max``, ``min``, ``tuple``: the
    values of ``_arch.CONNECTIONS``) to one sample's outputs."""
    if name == "tuple":  # (several heads: their outputs as they are)
        return tuple(values)
    if name == "+":
        out = values[0]
        for v in values[1:]:
            out = out + v
        return out
    if name == "*":
        out = values[0]
        for v in values[1:]:
            out = out * v
        return out
    if name in ("vcat", "hcat"):
        julia_dim = 1 if name == "vcat" else 2
        return jnp.concatenate(values, axis=values[0].ndim - julia_dim)
    if name in ("max", "min"):
        out = values[0]
        for v in values[1:]:
            out = jnp.maximum(out, v) if name == "max" else jnp.minimum(out, v)
        return out
    raise ValueError(f"unknown connection {name!r}")


class Activated(eqx.Module):
    """One Flux layer with its activation (``Dense(4 => 3, relu)``) where it is not inside a Chain
    (at the root, in a Parallel …), so that it reads back as that one layer, not as a Chain."""

    layer: Any
    activation: str = eqx.field(static=True)

    def __call__(self, x: Any, *, key: Any = None) -> Any:
        return function_of(self.activation)(self.layer(x))


class StatefulActivated(eqx.nn.StatefulLayer):
    """:class:`Activated` for a layer that carries state (``BatchNorm(C, relu)``): it threads the
    ``eqx.nn.State`` through, as ``eqx.nn.Sequential`` does, and reads back as that one layer."""

    layer: Any
    activation: str = eqx.field(static=True)

    def __call__(self, x: Any, state: Any = _NO_STATE, *, key: Any = None) -> Any:
        if state is _NO_STATE:
            return function_of(self.activation)(self.layer(x))
        y, state = self.layer(x, state)
        return function_of(self.activation)(y), state


def _positions(layer: Any, x: Any) -> int:
    """How many leading axes of ``x`` a layer that acts on one feature vector is mapped over: a
    recurrent layer's output ``(L, H)`` into ``Dense(H => out)`` is Flux's ``Dense`` on ``(H, L)``,
    column by column (Equinox's ``Linear`` and ``LayerNorm`` take one position only)."""
    ndim = getattr(x, "ndim", None)
    if ndim is None:
        return 0
    if isinstance(layer, eqx.nn.Linear):
        return max(ndim - 1, 0)
    if isinstance(layer, eqx.nn.LayerNorm):
        return max(ndim - len(layer.shape), 0)
    return 0


def _apply(layer: Any, x: Any, state: Any) -> tuple[Any, Any]:
    """``layer(x)``, passing ``state`` to (and taking it back from) a stateful layer; a ``Linear``
    or ``LayerNorm`` given positions (a sequence) maps over them (:func:`_positions`)."""
    if state is not _NO_STATE and isinstance(layer, eqx.nn.StatefulLayer) and layer.is_stateful():
        return layer(x, state)
    call = layer
    for _ in range(_positions(layer, x)):
        call = jax.vmap(call)
    return call(x), state


def _any_stateful(layers: Any) -> bool:
    return any(isinstance(m, eqx.nn.StatefulLayer) and m.is_stateful() for m in layers)


def _thread(layers: tuple[Any, ...], x: Any, state: Any) -> tuple[Any, Any]:
    """Apply ``layers`` in order, passing ``state`` to (and taking it back from) the stateful ones."""
    for layer in layers:
        x, state = _apply(layer, x, state)
    return x, state


class Function(eqx.Module):
    """A Flux function that is a Chain entry of its own (``Chain(Dense(2 => 3), relu)``): it reads
    back as that entry, never folded into the layer before it, so the model's ``Flux.state`` keeps
    the author's Chain (``()`` for the function) and the author's file restores into it."""

    name: str = eqx.field(static=True)

    def __call__(self, x: Any, *, key: Any = None) -> Any:
        return function_of(self.name)(x)


class SequenceChain(eqx.nn.StatefulLayer):
    """Flux ``Chain(…)`` holding a recurrent layer or a ``LayerNorm``: ``eqx.nn.Sequential``'s
    call, but a ``Linear`` or ``LayerNorm`` given more axes than it takes maps over the leading ones
    as Flux's act on the first dims (:func:`_positions`): a ``Dense`` after a recurrence gets its
    sequence ``(L, H)`` column by column, a ``LayerNorm(W)`` after a conv normalises each row of
    a ``(C, H, W)`` sample (Flux's dim 1), where ``eqx.nn.Linear``/``LayerNorm`` would refuse them."""

    layers: tuple[Any, ...]

    def is_stateful(self) -> bool:
        return _any_stateful(self.layers)

    def __call__(self, x: Any, state: Any = _NO_STATE, *, key: Any = None) -> Any:
        y, state = _thread(self.layers, x, state)
        return y if state is _NO_STATE else (y, state)


class NamedChain(eqx.nn.StatefulLayer):
    """Flux ``Chain(a = …, b = …)``: layers applied in order, with their names kept; called as
    ``model(x, state)`` it threads the state through its stateful layers (BatchNorm) and returns
    ``(y, state)``, as ``eqx.nn.Sequential`` does."""

    layers: tuple[Any, ...]
    names: tuple[str, ...] = eqx.field(static=True)

    def is_stateful(self) -> bool:
        return _any_stateful(self.layers)

    def __call__(self, x: Any, state: Any = _NO_STATE, *, key: Any = None) -> Any:
        y, state = _thread(self.layers, x, state)
        return y if state is _NO_STATE else (y, state)


class _Connected(eqx.nn.StatefulLayer):
    """A Flux connection layer over several layers that carries state when one of them does
    (``Parallel(+, BatchNorm(4), Dense(4 => 4))``): called as ``model(x, state)`` it threads the
    ``eqx.nn.State`` through its stateful layers in Flux's order and returns ``(y, state)``, as
    ``eqx.nn.Sequential`` does; called as ``model(x)`` it returns ``y``."""

    layers: tuple[Any, ...]

    def is_stateful(self) -> bool:
        return _any_stateful(self.layers)

    def __call__(self, x: Any, state: Any = _NO_STATE, *, key: Any = None) -> Any:
        y, state = self.forward(x, state)
        return y if state is _NO_STATE else (y, state)

    def forward(self, x: Any, state: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def each(self, x: Any, state: Any, *, spread: bool = True) -> tuple[list[Any], Any]:
        """Every layer applied to ``x`` (with ``spread``, a Parallel's: the i-th of a tuple of one
        input per layer, :func:`branch_inputs`), the state threaded through them in order."""
        outputs = []
        inputs = branch_inputs(x, len(self.layers)) if spread else [x] * len(self.layers)
        for layer, xi in zip(self.layers, inputs, strict=True):
            y, state = _apply(layer, xi, state)
            outputs.append(y)
        return outputs, state


class Parallel(_Connected):
    """Flux ``Parallel(connection, layers…)``: ``connection(layer₁(x), layer₂(x), …)``."""

    layers: tuple[Any, ...]
    connection: str = eqx.field(static=True, default="+")
    names: tuple[str, ...] | None = eqx.field(static=True, default=None)

    def forward(self, x: Any, state: Any) -> tuple[Any, Any]:
        outputs, state = self.each(x, state)
        return connect(self.connection, outputs), state


class SkipConnection(_Connected):
    """Flux ``SkipConnection(layers, connection)``: ``connection(layers(x), x)``."""

    layers: Any
    connection: str = eqx.field(static=True, default="+")

    def is_stateful(self) -> bool:
        return _any_stateful((self.layers,))

    def forward(self, x: Any, state: Any) -> tuple[Any, Any]:
        y, state = _apply(self.layers, x, state)
        return connect(self.connection, [y, x]), state


class PairwiseFusion(_Connected):
    """Flux ``PairwiseFusion(connection, layers…)``: ``y₁ = l₁(x₁)``, ``yᵢ = lᵢ(connection(yᵢ₋₁, xᵢ))``;
    returns the tuple of all ``yᵢ`` (a single ``x`` is used as every ``xᵢ``)."""

    layers: tuple[Any, ...]
    connection: str = eqx.field(static=True, default="+")

    def forward(self, x: Any, state: Any) -> tuple[Any, Any]:
        xs = x if isinstance(x, tuple) else (x,) * len(self.layers)
        y, state = _apply(self.layers[0], xs[0], state)
        outputs = [y]
        for layer, xi in zip(self.layers[1:], xs[1:]):
            y, state = _apply(layer, connect(self.connection, [outputs[-1], xi]), state)
            outputs.append(y)
        return tuple(outputs), state


class Maxout(_Connected):
    """Flux ``Maxout(layers…)``: the element-wise maximum of the layers' outputs."""

    layers: tuple[Any, ...]

    def forward(self, x: Any, state: Any) -> tuple[Any, Any]:
        outputs, state = self.each(x, state, spread=False)  # (Flux: every layer takes the input)
        return connect("max", outputs), state


Activation = Callable[[jax.Array], jax.Array]


class RNNCell(eqx.Module):
    """Flux's ``RNNCell`` (Equinox has none): ``h' = σ(Wi x + Wh h + b)``, arrays in Flux's shapes."""

    weight_ih: jax.Array  # Wi (H, in)
    weight_hh: jax.Array  # Wh (H, H)
    bias: jax.Array | None  # b (H,); None: Flux ≥ 0.15's bias=false
    activation: Callable[[jax.Array], jax.Array] = eqx.field(static=True, default=jnp.tanh)

    def __call__(self, x: jax.Array, h: jax.Array, *, key: Any = None) -> jax.Array:
        y = self.weight_ih @ x + self.weight_hh @ h
        return self.activation(y if self.bias is None else y + self.bias)


class GRUv3Cell(eqx.Module):
    """Flux's ``GRUv3Cell``, the paper's GRU (no PyTorch/Equinox twin).

    ``h̃ = tanh(Wi_h̃ x + Wh_h̃ (r .* h) + b_h̃)``: ``r`` applied to ``h`` before the matrix.
    """

    weight_ih: jax.Array  # Wi (3H, in): r, z, h̃ blocks
    weight_hh: jax.Array  # Wh (2H, H): r, z blocks
    bias: jax.Array | None  # b (3H,); None: Flux ≥ 0.15's bias=false
    weight_hh_candidate: jax.Array  # Wh_h̃ (H, H)

    def __call__(self, x: jax.Array, h: jax.Array, *, key: Any = None) -> jax.Array:
        wx = self.weight_ih @ x
        gx = jnp.split(wx if self.bias is None else wx + self.bias, 3)
        gh = jnp.split(self.weight_hh @ h, 2)
        r = jax.nn.sigmoid(gx[0] + gh[0])
        z = jax.nn.sigmoid(gx[1] + gh[1])
        candidate = jnp.tanh(gx[2] + self.weight_hh_candidate @ (r * h))
        return (1 - z) * candidate + z * h


class Recurrence(eqx.Module):
    """A cell scanned over one sequence, as Flux ≥ 0.15's ``RNN``/``LSTM``/``GRU``/``GRUv3`` do.

    Input ``(L, in)`` (the Julia sequence ``(in, L)`` under C0), output the hidden states ``(L, H)``,
    starting from zeros (Flux's ``initialstates``), or from ``state0`` (``h``, LSTM ``(h, c)``, each
    ``(H,)``), a Flux ≤ 0.14 ``Recur``'s learnt initial state. ``cell`` is an
    ``eqx.nn.LSTMCell``/``GRUCell``, :class:`RNNCell` or :class:`GRUv3Cell`. With ``return_state``
    (Flux ≥ 0.15's ``return_state=true``) the output is ``(hidden states, last state)``, the last
    state ``h`` ``(H,)`` or LSTM's ``(h, c)``, as Flux's ``scan`` returns them.
    """

    cell: Any
    state0: Any = None
    return_state: bool = eqx.field(static=True, default=False)

    def __call__(self, xs: jax.Array, *, key: Any = None) -> Any:
        if xs.ndim != 2:  # (a vector would be scanned over its numbers)
            raise ValueError(
                f"a recurrent layer takes one sequence (time, {self.cell.weight_ih.shape[-1]}) (jax.vmap "
                f"for a batch); got shape {xs.shape}"
            )
        hidden = self.cell.weight_hh.shape[-1]
        zero = jnp.zeros((hidden,), xs.dtype)
        lstm = isinstance(self.cell, eqx.nn.LSTMCell)
        carry0: Any = ((zero, zero) if lstm else zero) if self.state0 is None else self.state0

        def step(carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
            carry = self.cell(x, carry)
            return carry, carry[0] if lstm else carry

        last, hs = lax.scan(step, carry0, xs)
        return (hs, last) if self.return_state else hs

"""The JAX computations of the Flax layers of Flux kinds, shared by nnx and linen (no framework).

``_nnx_layers`` and ``_linen_layers`` wrap these functions in each API's modules, so both compute
the same thing on a batch, channels last (``docs/porting.md`` §Data layout).
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp

from .._errors import UnsupportedError
from ._activations import function_of


def flux_flatten(x: jax.Array) -> jax.Array:
    """Flux's column-major ``flatten`` of a channels-last batch (see :class:`Flatten`)."""
    if x.ndim > 2:
        x = jnp.moveaxis(x, -1, 1)
    return x.reshape(x.shape[0], -1)


def adaptive_pool(op: str, out: tuple[int, ...], x: jax.Array) -> jax.Array:
    """Flux's adaptive pool (``op`` ``"max"``/``"mean"``) to the spatial size ``out`` (Flax order)."""
    spatial = x.shape[1:-1]
    strides = tuple(size // o for size, o in zip(spatial, out))
    window = tuple(size - (o - 1) * s for size, o, s in zip(spatial, out, strides))
    dims, steps = (1, *window, 1), (1, *strides, 1)
    if op == "max":  # as Flax's max_pool/avg_pool compute them (lax.reduce_window, then the mean)
        return jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, dims, steps, "VALID")
    total = jax.lax.reduce_window(x, 0.0, jax.lax.add, dims, steps, "VALID")
    return total / math.prod(window)


def global_pool(op: str, x: jax.Array) -> jax.Array:
    """Flux's global pool: the spatial dims of a channels-last batch reduced to size 1."""
    axes = tuple(range(1, x.ndim - 1))
    return jnp.max(x, axis=axes, keepdims=True) if op == "max" else jnp.mean(x, axis=axes, keepdims=True)


def bilinear(weight: jax.Array, bias: jax.Array | None, activation: str, x: Any, y: Any = None) -> jax.Array:
    """Flux's ``Bilinear`` on a batch; ``x`` alone is used twice, a tuple ``x`` is the pair."""
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


def branch_inputs(x: Any, branches: int) -> list[Any]:
    """What each of a ``Parallel``'s branches is given, as Flux does: one input goes to every
    branch; a tuple of as many inputs as branches (a ``Parallel(tuple, …)`` or ``PairwiseFusion``
    before it) gives the i-th to the i-th branch (``(m::Parallel)(xs::Tuple) = m(xs...)``), a
    tuple of one is that one input; any other count is Flux's ArgumentError.

    Example:
        >>> branch_inputs(1.0, 2), branch_inputs((1.0, 2.0), 2), branch_inputs((1.0,), 2)
        ([1.0, 1.0], [1.0, 2.0], [1.0, 1.0])
    """
    if not isinstance(x, tuple):
        return [x] * branches
    if len(x) == 1:
        return [x[0]] * branches
    if len(x) != branches:
        raise ValueError(f"Parallel with {branches} branches takes one input or {branches}, not {len(x)}")
    return list(x)


def connect(name: str, values: list[jax.Array]) -> Any:
    """A Flux connection (``+``, ``*``, ``vcat``, ``hcat``, ``max``, ``min``, ``tuple``: the
    values of ``_arch.CONNECTIONS``) on channels-last batches."""
    if name == "tuple":  # (several heads: their outputs as they are)
        return tuple(values)
    if name in ("vcat", "hcat"):
        axis = julia_dim_axis(1 if name == "vcat" else 2, values[0].ndim)
        return jnp.concatenate(values, axis=axis)
    ops = {"+": jnp.add, "*": jnp.multiply, "max": jnp.maximum, "min": jnp.minimum}
    if name not in ops:
        raise ValueError(f"unknown connection {name!r}")
    out = values[0]
    for v in values[1:]:
        out = ops[name](out, v)
    return out


def learnt_initial_state(layer: Any) -> Any:
    """The learnt initial state a recurrent layer's module holds (restored over these zeros): ``h``,
    or ``(h, c)`` for LSTM, each ``(H,)``, when ``layer.args["state0"]``; else None (zeros, Flux's
    default, are not stored)."""
    if not layer.args.get("state0"):
        return None
    hidden = int(layer.args["out"])
    return (jnp.zeros(hidden), jnp.zeros(hidden)) if layer.kind == "LSTM" else jnp.zeros(hidden)


RecurrentArrays = tuple[jax.Array, jax.Array, jax.Array | None, jax.Array | None]
"""A Flux recurrent layer's ``(Wi, Wh, b, Wh_h̃)`` in Flux's shapes: ``b`` None for Flux ≥ 0.15's
``bias=false``, ``Wh_h̃`` None but for GRUv3."""


def cell_step(
    kind: str, activation: str, arrays: RecurrentArrays, carry: Any, x: jax.Array
) -> tuple[Any, jax.Array]:
    """One step of Flux's recurrent ``kind`` (``"GRU"`` for a ``GRUCell``) with its ``arrays``:
    ``(new state, output)``, the state ``h`` or LSTM's ``(h, c)`` in Flux's order, ``x`` ``(…, in)``
    with any leading axes (the equations are in ``_nnx_layers.Recurrence``)."""
    wi, wh, b, wc = arrays
    pre = x @ wi.T if b is None else x @ wi.T + b
    if kind == "LSTM":
        h, c = carry
        i, f, g, o = jnp.split(pre + h @ wh.T, 4, axis=-1)
        c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
        h = jax.nn.sigmoid(o) * jnp.tanh(c)
        return (h, c), h
    h = carry
    if kind == "RNN":
        h = function_of(activation)(pre + h @ wh.T)
        return h, h
    gx = jnp.split(pre, 3, axis=-1)
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


def zero_state(kind: str, shape: tuple[int, ...], dtype: Any = jnp.float32) -> Any:
    """Flux's ``initialstates`` of a recurrent ``kind`` (``"LSTM"`` for an ``LSTMCell``) for hidden
    states of ``shape``: zeros ``h``, or LSTM's pair ``(h, c)``."""
    zero = jnp.zeros(shape, dtype)
    return (zero, zero) if kind == "LSTM" else zero


def recurrence(
    kind: str,
    activation: str,
    arrays: RecurrentArrays,
    xs: jax.Array,
    state0: Any = None,
    return_state: bool = False,
) -> Any:
    """Flux's recurrent ``kind`` with its ``arrays`` over ``xs`` ``(batch, time, in)`` from a zero
    state, or from the learnt ``state0`` (``h``, LSTM ``(h, c)``, each ``(H,)``; the same for every
    sequence) (the equations are in ``_nnx_layers.Recurrence``). With ``return_state``, ``(hidden
    states, last state)`` (``h`` ``(batch, H)``, LSTM ``(h, c)``), as Flux ≥ 0.15's
    ``return_state=true``."""

    def step(carry: Any, x: jax.Array) -> tuple[Any, jax.Array]:
        return cell_step(kind, activation, arrays, carry, x)

    carry0 = zero_state(kind, (xs.shape[0], arrays[1].shape[-1]), xs.dtype)
    if state0 is not None:
        carry0 = jax.tree_util.tree_map(lambda s, z: z + s, state0, carry0)  # over the batch
    last, hs = jax.lax.scan(step, carry0, jnp.swapaxes(xs, 0, 1))
    hs = jnp.swapaxes(hs, 0, 1)
    return (hs, last) if return_state else hs


def scale_shift(x: jax.Array, weight: jax.Array, bias: jax.Array | None) -> jax.Array:
    """Flux's ``Scale``, ``scale .* x .+ bias``, on a Python array whose trailing axes are
    ``weight``'s (``rev(scale)``: Julia's leading dims, on which Julia broadcasts, are Python's
    trailing axes, on which numpy broadcasts)."""
    y = x * weight
    return y + bias if bias is not None else y


def flax_scale(x: jax.Array, weight: jax.Array, bias: jax.Array | None) -> jax.Array:
    """Flux's ``Scale`` on a Flax batch: its arrays are laid out as one whole sample (channels
    last), so they must cover every axis but the batch; a ``Scale`` over fewer Julia dims would
    broadcast along other axes than Flux's in this layout, and is refused."""
    if x.ndim != weight.ndim + 1:
        raise UnsupportedError(
            f"Flax Scale of shape {tuple(weight.shape)} on a batch of shape {tuple(x.shape)}: in Flax a "
            "Scale must cover a whole sample (Flux's Scale over its leading dims only ports to Equinox); "
            "see docs/porting.md §Data layout"
        )
    return scale_shift(x, weight, bias)

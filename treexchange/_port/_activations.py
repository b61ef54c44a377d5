"""Flux (NNlib) activation names <-> JAX functions."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from .._errors import UnsupportedError

# Base's math functions of a number the port knows (_arch.ACTIVATIONS says why these): their
# jax.numpy functions have the same names.
BASE_MATH = ("sin", "cos", "tan", "exp", "expm1", "abs", "sinh", "cosh", "atan", "asinh", "cbrt")

# Element-wise NNlib (and Base) functions: a Dense/Conv ``σ`` may be one of these.
ELEMENTWISE = frozenset(
    {
        "identity", "relu", "sigmoid", "tanh", "elu", "gelu", "softplus", "swish", "leakyrelu", "selu",
        "celu", "relu6", "hardtanh", "logsigmoid", "softsign", "hardsigmoid", "mish", "hardswish", "gelu_erf",
        "tanh_fast", "sigmoid_fast", "lisht", "tanhshrink", "trelu", "softshrink", "logcosh", "gelu_sigmoid",
        *BASE_MATH,
    }
)  # fmt: skip

# Functions of a whole array, not of each number: as a layer's σ, which Flux broadcasts
# (`σ.(W*x .+ b)`), they fail in Julia (NNlib: "`softmax(x)` called with a number").
WHOLE_ARRAY = frozenset({"softmax", "logsoftmax", "vec"})


def refuse_whole_array_sigma(name: str, layer: str) -> str | None:
    """The message refusing ``name`` as ``layer``'s σ when it is no function of a number, else None."""
    if name not in WHOLE_ARRAY:
        return None
    return (
        f"{name} as {layer}'s activation: Flux applies σ to each number (σ.(W*x .+ b)) and NNlib's "
        f"{name} takes an array, so this model fails in Julia; write it after the layer, "
        f"Chain({layer}(…), {name})"
    )


# Flux prints some functions under other names (σ is sigmoid); the parser and the reader agree on these.
ALIASES = {"σ": "sigmoid", "logσ": "logsigmoid", "hardσ": "hardsigmoid", "leaky_relu": "leakyrelu",
           "thresholdrelu": "trelu"}  # fmt: skip


def table() -> list[tuple[Callable[..., Any], str]]:
    """(JAX function, NNlib name) pairs, first match wins when reading a model."""
    import jax  # jax is costly to import: loaded on first use
    import jax.numpy as jnp

    nn = jax.nn
    pairs = [
        (getattr(nn, "identity", None), "identity"),
        (nn.relu, "relu"),
        (nn.sigmoid, "sigmoid"),
        (nn.tanh, "tanh"),
        (jnp.tanh, "tanh"),
        (nn.elu, "elu"),
        (nn.gelu, "gelu"),  # approximate=True by default: NNlib's gelu is the tanh form as well
        (nn.softplus, "softplus"),
        (nn.swish, "swish"),
        (nn.silu, "swish"),
        (nn.leaky_relu, "leakyrelu"),  # slope 0.01, NNlib's default
        (nn.selu, "selu"),
        (nn.celu, "celu"),
        (nn.relu6, "relu6"),
        (nn.hard_tanh, "hardtanh"),
        (nn.log_sigmoid, "logsigmoid"),
        (nn.soft_sign, "softsign"),
        (nn.hard_sigmoid, "hardsigmoid"),
        (nn.mish, "mish"),
        (nn.hard_swish, "hardswish"),
        (nn.softmax, "softmax"),
        (nn.log_softmax, "logsoftmax"),
        (_gelu_erf, "gelu_erf"),  # (the port's own functions, as its builders place them)
        (_vec, "vec"),
        *((fn, name) for name, fn in _OWN.items()),
        *((getattr(jnp, name), name) for name in BASE_MATH),
    ]
    return [(f, n) for f, n in pairs if f is not None]


def name_of(fn: Any) -> str | None:
    """The NNlib name of a JAX function (``None`` -> ``"identity"``), or None if it has none."""
    if fn is None or fn is _identity:
        return "identity"
    for candidate, name in table():
        if fn is candidate:
            return name
    flax_nnx = sys.modules.get("flax.nnx")
    if flax_nnx is not None:
        for attr, name in (("relu", "relu"), ("sigmoid", "sigmoid"), ("tanh", "tanh"), ("gelu", "gelu"),
                           ("softmax", "softmax"), ("log_softmax", "logsoftmax"), ("elu", "elu"),
                           ("swish", "swish"), ("silu", "swish"), ("leaky_relu", "leakyrelu")):  # fmt: skip
            if fn is getattr(flax_nnx, attr, None):
                return name
    eqx_mlp = sys.modules.get("equinox.nn._mlp")
    if eqx_mlp is not None and fn is getattr(eqx_mlp, "_identity", None):
        return "identity"
    return None


def function_of(name: str) -> Callable[..., Any]:
    """The JAX function for an NNlib name (softmax/logsoftmax over the feature axis: see callers)."""
    name = ALIASES.get(name, name)
    if name == "identity":
        return _identity
    if name == "vec":
        return _vec
    if name == "gelu_erf":  # (NNlib's exact gelu; its `gelu` is the tanh form, jax.nn.gelu's default)
        return _gelu_erf
    if name == "gelu_tanh":
        name = "gelu"
    # (NNlib's `tanh_fast`/`sigmoid_fast` are its faster roundings of tanh and σ, what Flux's
    # layers call for them anyway: the same function)
    name = {"tanh_fast": "tanh", "sigmoid_fast": "sigmoid"}.get(name, name)
    own = _OWN.get(name)
    if own is not None:
        return own
    for fn, candidate in table():
        if candidate == name:
            return fn
    raise UnsupportedError(f"no JAX function for the NNlib activation {name!r}")


def _identity(x: Any) -> Any:
    return x


# NNlib activations jax.nn has no function for, written as NNlib defines them (src/activations.jl)


def _lisht(x: Any) -> Any:
    import jax.numpy as jnp  # (jax is costly to import: loaded on first use)

    return x * jnp.tanh(x)


def _tanhshrink(x: Any) -> Any:
    import jax.numpy as jnp  # (jax is costly to import: loaded on first use)

    return x - jnp.tanh(x)


def _trelu(x: Any) -> Any:
    """``trelu(x, θ = 1) = x ≤ θ ? 0 : x``."""
    import jax.numpy as jnp  # (jax is costly to import: loaded on first use)

    return jnp.where(x <= 1, jnp.zeros_like(x), x)


def _softshrink(x: Any) -> Any:
    """``softshrink(x, λ = 0.5)``: ``x − λ`` above λ, ``x + λ`` below −λ, 0 between."""
    import jax.numpy as jnp  # (jax is costly to import: loaded on first use)

    lo, hi = x - 0.5, x + 0.5
    return jnp.where(hi > 0, jnp.where(lo < 0, jnp.zeros_like(hi), lo), hi)


def _logcosh(x: Any) -> Any:
    """``logcosh(x) = x + softplus(−2x) − log 2`` (no overflow for large |x|)."""
    import jax  # (jax is costly to import: loaded on first use)

    return x + jax.nn.softplus(-2 * x) - 0.6931471805599453


def _gelu_sigmoid(x: Any) -> Any:
    """``gelu_sigmoid(x) = x σ(√(8/π) (x + 0.044715 x³))``."""
    import jax  # (jax is costly to import: loaded on first use)

    return x * jax.nn.sigmoid(1.5957691216057308 * (x + 0.044715 * x**3))


_OWN: dict[str, Callable[..., Any]] = {
    "lisht": _lisht,
    "tanhshrink": _tanhshrink,
    "trelu": _trelu,
    "softshrink": _softshrink,
    "logcosh": _logcosh,
    "gelu_sigmoid": _gelu_sigmoid,
}


def _gelu_erf(x: Any) -> Any:
    import jax  # (jax is costly to import: loaded on first use, as in table())

    return jax.nn.gelu(x, approximate=False)


def _vec(x: Any) -> Any:
    """Julia's ``vec``: every element in one vector, in Julia's (column-major) order, which on the
    reversed axes is the row-major order of ``ravel`` (a batch ``(B, 1)`` -> ``(B,)``, as Julia's
    ``(1, B)`` -> ``(B,)``). Not in :func:`table`: a model's own ``jnp.ravel`` is no ``vec`` (one
    sample's ravel is Flux's ``flatten``)."""
    return x.reshape(-1)

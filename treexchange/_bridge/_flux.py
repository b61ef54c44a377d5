"""Flux layouts: Equinox models <-> the state ``Flux.state`` gives for the equivalent Flux model.

``eqx.nn.Linear(in, out)`` holds ``weight`` of shape ``(out, in)``, which is exactly Flux's
``Dense(in => out)`` weight in Julia's shape, so no transpose is ever needed. ``Flux.state`` of a
``Dense`` is ``(weight = W, bias = b, σ = ())`` (``bias = false`` without bias; the activation is a
function and carries no state); of a ``Chain`` it is ``(layers = (state₁, state₂, …),)`` with
``()`` for every stateless layer (``softmax``, ``flatten``, ``MaxPool``).

Equinox has no separate "Dense with activation": ``eqx.nn.MLP`` carries its activations, and in an
``eqx.nn.Sequential`` an element-wise ``eqx.nn.Lambda(jax.nn.relu)`` right after a ``Linear`` is
folded into that Dense's ``σ``, as one writes ``Dense(16 => 16, relu)`` in Flux. Any other function
(``softmax``) becomes its own stateless Chain layer.

Only Dense-only models are covered (the layout rules for Conv, norms, embeddings and recurrent
layers come in a later issue); other layers raise :class:`~treexchange.UnsupportedError`.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from .._errors import ConversionError, PathSegment, UnsupportedError
from .._values import NamedTuple
from ._restore import LeafRef
from ._to_julia import to_julia

# Flux names of NNlib activations that act element by element (and so can be a Dense's σ).
_ELEMENTWISE = frozenset(
    {
        "identity", "relu", "sigmoid", "tanh", "elu", "gelu", "softplus", "swish", "leakyrelu", "selu",
        "celu", "relu6", "hardtanh", "logsigmoid", "softsign", "hardsigmoid", "mish", "hardswish",
    }
)  # fmt: skip


@dataclasses.dataclass
class _Dense:
    weight: Any
    bias: Any  # None without bias
    activation: str | None  # Flux name; None = not set yet (may fold a following activation)
    activation_fn: Any = None  # the Python function, for error messages

    @property
    def sizes(self) -> tuple[int, int]:
        out_size, in_size = self.weight.shape
        return int(in_size), int(out_size)


@dataclasses.dataclass
class _Function:
    name: str | None  # Flux name, None if unknown
    fn: Any


@dataclasses.dataclass
class _Chain:
    layers: list[Any]


def flux_state(model: Any) -> Any:
    """What ``Flux.state`` returns for the Flux model equivalent to an Equinox model.

    ``eqx.nn.MLP``, ``eqx.nn.Sequential``, a tuple/list of layers -> ``(layers = (…),)``;
    ``eqx.nn.Linear`` -> ``(weight = W, bias = b, σ = ())``; functions and ``eqx.nn.Lambda`` -> ``()``.
    Save the result with ``treexchange.save(path, model_state=flux_state(model))``; restore into
    the model with ``treexchange.load(path, "model_state", like=model, layout=flux_state)``.

    Raises:
        UnsupportedError: a layer has no Flux layout yet (Conv, norms, embeddings, recurrent).

    Example:
        >>> from treexchange import flux_state
        >>> import jax, equinox as eqx
        >>> mlp = eqx.nn.MLP(3, 2, 8, depth=1, key=jax.random.key(0))
        >>> state = flux_state(mlp)
        >>> [(list(layer), layer.weight.shape) for layer in state.layers]
        [(['weight', 'bias', 'σ'], (8, 3)), (['weight', 'bias', 'σ'], (2, 8))]
    """
    return _state(_plan(model, ()))


def flux_julia(model: Any, *, file: str = "mlp.jld2", name: str = "model_state") -> str:
    """Julia lines that build the equivalent Flux model and load the saved state into it.

    Example:
        >>> from treexchange import flux_julia
        >>> import jax, equinox as eqx
        >>> mlp = eqx.nn.MLP(4, 2, 16, depth=2, activation=jax.nn.tanh, key=jax.random.key(0))
        >>> print(flux_julia(mlp))
        using Flux, JLD2
        model = Chain(Dense(4 => 16, tanh), Dense(16 => 16, tanh), Dense(16 => 2))
        Flux.loadmodel!(model, JLD2.load("mlp.jld2", "model_state"))
    """
    plan = _plan(model, ())
    expr = _julia_expr(plan)
    suffix = {"float64": " |> f64", "float16": " |> f16"}.get(_float_dtype(plan) or "float32", "")
    return "\n".join(
        [
            "using Flux, JLD2",
            f"model = {expr}{suffix}",
            f"Flux.loadmodel!(model, JLD2.load({_julia_string(file)}, {_julia_string(name)}))",
        ]
    )


# --- planning -----------------------------------------------------------------------------------


def _plan(model: Any, path: tuple[PathSegment, ...]) -> Any:
    eqx = sys.modules.get("equinox")
    if eqx is not None:
        if isinstance(model, eqx.nn.Linear):
            return _dense(model, None, None, path)
        if isinstance(model, eqx.nn.MLP):
            return _mlp(model, path)
        if isinstance(model, eqx.nn.Sequential):
            return _sequence(model.layers, (*path, "layers"))
        if isinstance(model, eqx.nn.Lambda):
            return _function(model.fn)
        if isinstance(model, eqx.nn.Identity):
            return _Function("identity", model)
        if isinstance(model, eqx.Module):
            raise UnsupportedError(
                f"no Flux layout for {type(model).__module__}.{type(model).__qualname__} yet (Dense-only "
                "models are covered; Conv, norms, embeddings and recurrent layers come later)",
                path=path,
            )
    if isinstance(model, (tuple, list)):
        return _sequence(model, path)
    if callable(model) and not dataclasses.is_dataclass(model):
        return _function(model)
    raise UnsupportedError(f"no Flux layout for {type(model).__name__}", path=path)


def _dense(layer: Any, activation: str | None, fn: Any, path: tuple[PathSegment, ...]) -> _Dense:
    weight = layer.weight
    if len(weight.shape) != 2:
        raise UnsupportedError(f"Linear weight of shape {tuple(weight.shape)} is not a matrix", path=path)
    if getattr(layer, "out_features", None) == "scalar":
        raise UnsupportedError('Linear(..., "scalar") has a 0-d bias; Flux Dense needs a vector', path=path)
    return _Dense(weight, layer.bias if layer.use_bias else None, activation, fn)


def _mlp(mlp: Any, path: tuple[PathSegment, ...]) -> _Chain:
    if getattr(mlp, "scan", False):
        raise UnsupportedError("eqx.nn.MLP(scan=True) stacks its hidden layers; use scan=False", path=path)
    layers = []
    last = len(mlp.layers) - 1
    for i, layer in enumerate(mlp.layers):
        fn = mlp.final_activation if i == last else mlp.activation
        name = _activation_name(fn)
        if name is None:
            name = "<unknown>"  # still a valid state (σ is () anyway); flux_julia reports it
        layers.append(_dense(layer, name, fn, (*path, "layers", i + 1)))
    return _Chain(layers)


def _sequence(items: Any, path: tuple[PathSegment, ...]) -> _Chain:
    layers: list[Any] = []
    for i, item in enumerate(items, 1):
        plan = _plan(item, (*path, i))
        previous = layers[-1] if layers else None
        if (
            isinstance(plan, _Function)
            and isinstance(previous, _Dense)
            and previous.activation is None
            and plan.name in _ELEMENTWISE
        ):
            previous.activation, previous.activation_fn = plan.name, plan.fn  # Dense(in => out, σ)
            continue
        layers.append(plan)
    return _Chain(layers)


def _function(fn: Any) -> _Function:
    return _Function(_activation_name(fn), fn)


def _activation_name(fn: Any) -> str | None:
    """The Flux/NNlib name of a JAX activation function, or None if it has none."""
    if fn is None:
        return "identity"
    for candidate, name in _activation_table():
        if fn is candidate:
            return name
    eqx_mlp = sys.modules.get("equinox.nn._mlp")
    if eqx_mlp is not None and fn is getattr(eqx_mlp, "_identity", None):
        return "identity"
    return None


def _activation_table() -> list[tuple[Callable[..., Any], str]]:
    import jax
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
        (nn.leaky_relu, "leakyrelu"),  # slope 0.01 on both sides
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
    ]
    return [(f, n) for f, n in pairs if f is not None]


# --- output --------------------------------------------------------------------------------------


def _leaf(x: Any) -> Any:
    return x if isinstance(x, LeafRef) else to_julia(x)


def _state(plan: Any) -> Any:
    if isinstance(plan, _Chain):
        return NamedTuple(layers=tuple(_state(layer) for layer in plan.layers))
    if isinstance(plan, _Dense):
        bias = _leaf(plan.bias) if plan.bias is not None else False  # Flux: Dense(...; bias=false)
        return NamedTuple(weight=_leaf(plan.weight), bias=bias, σ=())
    return ()  # a function: no state


def _julia_expr(plan: Any) -> str:
    if isinstance(plan, _Chain):
        return "Chain(" + ", ".join(_julia_expr(layer) for layer in plan.layers) + ")"
    if isinstance(plan, _Dense):
        in_size, out_size = plan.sizes
        parts = [f"{in_size} => {out_size}"]
        activation = plan.activation or "identity"
        if activation == "<unknown>":
            raise ConversionError(f"activation {plan.activation_fn!r} has no Flux (NNlib) name")
        if activation != "identity":
            parts.append(activation)
        if plan.bias is None:
            parts.append("bias=false")
        return "Dense(" + ", ".join(parts) + ")"
    if plan.name is None:
        raise ConversionError(f"function {plan.fn!r} has no Flux (NNlib) name")
    return plan.name


def _float_dtype(plan: Any) -> str | None:
    if isinstance(plan, _Chain):
        for layer in plan.layers:
            found = _float_dtype(layer)
            if found:
                return found
        return None
    if isinstance(plan, _Dense):
        return np.dtype(plan.weight.dtype).name
    return None


def _julia_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'

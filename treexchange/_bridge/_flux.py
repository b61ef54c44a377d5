"""Flux layouts: Equinox / Flax nnx models <-> the state ``Flux.state`` gives for the equivalent Flux model.

The model is read as its Flux twin (``treexchange._port``: one rule per Flux layer, with exact
array permutations such as the Conv kernel flip), and the rules assemble ``Flux.state``: field
names in Flux's order (``σ``, ``ϵ`` U+03F5, ``σ²`` …), ``bias = false``, ``()`` for stateless
entries, numbers typed as Flux has them. The same function is the ``layout=`` of a restore:
``treexchange.load(path, name, like=model, layout=flux_state)`` checks the file against the Julia
shapes and permutes each array into the model's layout while placing it.

Equinox: ``eqx.nn.Sequential``, ``eqx.nn.MLP``, tuples/lists of layers are Flux Chains; an
element-wise ``eqx.nn.Lambda(jax.nn.relu)`` right after a Linear/Conv/norm is folded into that
layer's ``σ``, as one writes ``Dense(16 => 16, relu)`` in Flux. A model with ``eqx.nn.BatchNorm``
is passed with its state: ``flux_state((model, state))``. Flax nnx: ``nnx.Sequential`` and the
modules of ``treexchange._port._nnx_layers``.
"""

from __future__ import annotations

import sys
from typing import Any

from .._port._spec import DEFAULT_FLUX_ERA
from .._port._state import Port, check_era, float_dtype, state_of
from ._to_julia import to_julia


def flux_state(model: Any, *, flux: str = DEFAULT_FLUX_ERA) -> Any:
    """What ``Flux.state`` returns for the Flux model equivalent to an Equinox or Flax nnx model.

    Args:
        model: an Equinox model, ``(model, state)`` for an Equinox model with BatchNorm, or a Flax
            nnx model.
        flux: the Flux era whose ``Flux.state`` to produce: ``"0.15"`` (Flux ≥ 0.15, the default:
            pools are ``(k, pad, stride)``) or ``"0.14"`` (Flux ≤ 0.14: pools are ``()``).

    Raises:
        UnsupportedError: a layer has no Flux rule (docs/porting.md lists what is covered).

    Example:
        >>> from treexchange import flux_state
        >>> import jax, equinox as eqx
        >>> mlp = eqx.nn.MLP(3, 2, 8, depth=1, key=jax.random.key(0))
        >>> state = flux_state(mlp)
        >>> [(list(layer), layer.weight.shape) for layer in state.layers]
        [(['weight', 'bias', 'σ'], (8, 3)), (['weight', 'bias', 'σ'], (2, 8))]
    """
    from .._port._state import fix_unported_leaves

    era = check_era(flux)
    port = read_model(model, era)
    fix_unported_leaves(port)
    return to_julia_keeping_refs(state_of(port, era))


def flux_julia(
    model: Any, *, file: str = "mlp.jld2", name: str = "model_state", flux: str = DEFAULT_FLUX_ERA
) -> str:
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
    from .._port._eqx import check_julia_names
    from .._port._rules import julia_constructor

    era = check_era(flux)
    port = read_model(model, era)
    check_julia_names(port.layer)
    expr = julia_constructor(port.layer, era)
    suffix = {"float64": " |> f64", "float16": " |> f16"}.get(float_dtype(port) or "float32", "")
    return "\n".join(
        [
            "using Flux, JLD2",
            f"model = {expr}{suffix}",
            f"Flux.loadmodel!(model, JLD2.load({_julia_string(file)}, {_julia_string(name)}))",
        ]
    )


def read_model(model: Any, era: str) -> Port:
    """Read an Equinox model, ``(model, eqx.nn.State)`` or a Flax nnx model as its Flux twin."""
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(model, nnx.Module):
        from .._port._nnx import read_nnx

        return read_nnx(model, flux=era)
    from .._port._eqx import read_equinox

    eqx = sys.modules.get("equinox")
    if (
        eqx is not None
        and isinstance(model, tuple)
        and len(model) == 2
        and isinstance(model[1], eqx.nn.State)
    ):
        return read_equinox(model[0], model[1], flux=era)
    return read_equinox(model, flux=era)


def to_julia_keeping_refs(state: Any) -> Any:
    """``to_julia`` for everything but LeafRefs (a restore's stand-ins pass through untouched)."""
    from .._values import NamedTuple
    from ._restore import LeafRef, NoArrays

    if isinstance(state, (LeafRef, NoArrays)):
        return state
    if isinstance(state, NamedTuple):
        return NamedTuple((k, to_julia_keeping_refs(v)) for k, v in state.items())
    if isinstance(state, tuple):
        return tuple(to_julia_keeping_refs(v) for v in state)
    return to_julia(state)


def _julia_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'

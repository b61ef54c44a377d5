"""Flux layouts: Equinox / Flax nnx models <-> the state ``Flux.state`` gives for the equivalent Flux model.

The model is read as its Flux twin (one rule per Flux layer, with exact
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

import contextlib
import sys
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

from .._bridge._restore import LeafRef, NoArrays
from .._bridge._to_julia import to_julia
from .._errors import ConversionError, TreexchangeError
from .._values import NamedTuple
from ._layout import is_linen_model
from ._lux import check_lux, lux_ps_st
from ._registry import MODEL_ERRORS, check_julia_names, julia_constructor
from ._spec import DEFAULT_FLUX_ERA
from ._state import Port, _restoring, check_era, fix_unported_leaves, float_dtype, state_of


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
    era = check_era(flux)
    with model_errors():
        port = read_model(model, era)
        fix_unported_leaves(port)
        if era != "0.14" and not _restoring(port):
            _warn_learnt_initial_states(port)
        return to_julia_keeping_refs(state_of(port, era))


def _learnt_initial_states(port: Port) -> int:
    """How many recurrent layers in ``port`` carry a non-zero learnt initial state (``state0``)."""
    own = [value for key, (value, _) in port.arrays.items() if key.startswith("state0.")]
    here = int(bool(port.layer.args.get("state0")) and any(np.any(np.asarray(a) != 0) for a in own))
    return here + sum(_learnt_initial_states(child) for child in port.children)


def _warn_learnt_initial_states(port: Port) -> None:
    """A Flux ≥ 0.15 state has no ``state0``: the Flux model built from it starts from zeros, so it
    computes another function than the model does; said, as ``convert --flux-state`` says it."""
    count = _learnt_initial_states(port)
    if count:
        warnings.warn(
            f"flux_state: {count} recurrent layer{'s' if count > 1 else ''} of the model start from a "
            "learnt initial state (a Flux <= 0.14 Recur's state0), which a Flux >= 0.15 state has no "
            "place for: that Flux model starts from zeros; flux='0.14' keeps it",
            UserWarning,
            stacklevel=3,
        )


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
    era = check_era(flux)
    with model_errors():
        port = read_model(model, era)
        dtype = float_dtype(port)
    check_julia_names(port.layer)
    expr = julia_constructor(port.layer, era)
    suffix = {"float64": " |> f64", "float16": " |> f16"}.get(dtype or "float32", "")
    return "\n".join(
        [
            "using Flux, JLD2",
            f"model = {expr}{suffix}",
            f"Flux.loadmodel!(model, JLD2.load({_julia_string(file)}, {_julia_string(name)}))",
        ]
    )


@contextlib.contextmanager
def model_errors() -> Iterator[None]:
    """Reading a model whose arrays are not arrays of its layers' shapes (a weight set to a list,
    a 1-d kernel): the AttributeError/ValueError of the line that met it as a ConversionError (a
    reader gives the path where it can, :func:`~._registry.class_reader`)."""
    try:
        yield
    except TreexchangeError:  # (ConversionError is a TypeError too)
        raise
    except MODEL_ERRORS as err:
        raise ConversionError(
            f"the model does not hold what its layers need: their arrays must be arrays of the "
            f"layers' shapes ({type(err).__name__}: {err})"
        ) from err


def read_model(model: Any, era: str) -> Port:
    """Read an Equinox model, ``(model, eqx.nn.State)``, a Flax nnx model or a Flax linen
    ``(module, variables)`` as its Flux twin."""
    if is_linen_model(model):
        from ._linen import read_linen  # flax is optional: only a linen model gets here

        return read_linen(model[0], model[1], flux=era)
    if "flax.linen" in sys.modules:
        if isinstance(model, sys.modules["flax.linen"].Module):
            raise TypeError(
                "a Flax linen module holds no weights: pass (module, variables), the variables that "
                "module.init gave (or a restore)"
            )
    nnx = sys.modules.get("flax.nnx")
    if nnx is not None and isinstance(model, nnx.Module):
        from ._nnx import read_nnx  # flax is optional

        return read_nnx(model, flux=era)
    from ._eqx import read_equinox  # equinox (through _eqx) is costly to import: loaded on first use

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


def lux_state(model: Any, *, lux: str = "1", part: str | None = None) -> Any:
    """The Lux ``(ps, st)`` of the Lux model equivalent to an Equinox or Flax nnx model.

    The model is read as its Flux twin (as :func:`flux_state` does) and each array is moved to its
    Lux place: ``Chain`` children ``layer_1``, ``layer_2`` …; a ``SkipConnection`` is its wrapped
    layer; BatchNorm ``ps = (scale, bias)``, ``st = (running_mean, running_var, training)``;
    LayerNorm ``ps = (bias, scale)``. Lux's ``Conv`` convolves as Flux's does (kernel flipped
    against JAX); an Equinox model read as Flux ``CrossCor`` is Lux ``Conv(…; cross_correlation=true)``.

    As a restore layout, pick one part:
    ``treexchange.load(path, "ps", like=model, layout=functools.partial(lux_state, part="ps"))``,
    then the same with ``"st"`` and ``part="st"`` into the result for a model with BatchNorm
    (each part leaves the other part's arrays as they are).

    Args:
        model: an Equinox model, ``(model, state)`` for an Equinox model with BatchNorm, or a Flax
            nnx model.
        lux: ``"1"`` (Lux ≥ 1.0, the default: biases ``(out,)``) or ``"0.5"`` (Lux 0.5: Dense bias
            ``(out, 1)``, Conv bias ``(1, …, 1, out, 1)``).
        part: ``None`` for the pair ``(ps, st)``, ``"ps"`` or ``"st"`` for one of them.

    Raises:
        UnsupportedError: a layer has no Lux mapping (docs/porting.md lists what is covered).

    Example:
        >>> from treexchange import lux_state
        >>> import jax, equinox as eqx
        >>> mlp = eqx.nn.MLP(3, 2, 8, depth=1, key=jax.random.key(0))
        >>> ps, st = lux_state(mlp, lux="0.5")
        >>> ps.layer_1.weight.shape, ps.layer_1.bias.shape, st.layer_2
        ((8, 3), (8, 1), NamedTuple())
    """
    check_lux(lux, part)
    with model_errors():
        port = read_model(model, DEFAULT_FLUX_ERA)
        restoring = _restoring(port)
        ps, st = lux_ps_st(port, lux, part, restoring)
        fix_unported_leaves(port)
    if part is None:
        return to_julia_keeping_refs(ps), to_julia_keeping_refs(st)
    return to_julia_keeping_refs(ps if part == "ps" else st)

"""Porting real models: Flux/Lux layers <-> Equinox, Flax and PyTorch, numerically exact.

API for other engineers (stable; ``_spec.Layer`` is the one description every path shares):

- ``_spec.Layer(kind, args, children, names)``: a Flux layer as Flux constructs it (conventions in
  ``_spec``'s docstring). ``_registry.with_defaults(layer)`` fills in Flux's defaults.
- ``_eqx.build_equinox(layer, *, key, flux="0.15") -> eqx.Module``: a runnable Equinox model, ONE
  sample channels-first (``x_py = rev(x_jl)`` without the batch axis); a model with BatchNorm
  needs ``state = eqx.nn.State(model)`` and is called ``model(x, state)``.
- ``_nnx.build_nnx(layer, *, rngs, flux="0.15") -> nnx.Module``: a Flax nnx model on a batch,
  channels-last (``x_flax = x_jl.transpose(n-1, n-3, …, 0, n-2)``).
- ``_linen.build_linen(layer, *, flux="0.15") -> (nn.Module, variables)``: a Flax linen module and
  its variables' shapes (``jax.ShapeDtypeStruct``, no weights drawn); restore a state into the pair.
  A linen model is always the pair ``(module, variables)`` (``_linen.is_linen_model``).
- ``load_state(model, state) -> model``: put a ``Flux.state`` value tree (as ``treexchange.load``
  returns it) into a built or hand-written model (``(model, eqx_state)`` for Equinox BatchNorm);
  the same as ``treexchange.restore(state, like=model, layout=treexchange.flux_state)``.
- ``_registry.julia_constructor(layer, era) -> str``: the Julia expression that builds ``layer``.
- ``_eqx.read_equinox(model, state=None, *, flux)`` / ``_nnx.read_nnx(model, *, flux)`` /
  ``_linen.read_linen(module, variables, *, flux)`` -> ``_state.Port``: a Python model read back
  as its Flux twin (``port.layer`` is its ``Layer`` tree). The nnx and linen readers share their
  per-layer rules (``_flaxread``: the two store the same leaves in the same layouts).

Contracts with the restore code (``_bridge/_restore.py``, ``_api.py``): a layout may return
``LeafRef.through(julia_shape, transform)`` (file checked against the Julia shape, ``transform``
applied when placing), set ``ref.fixed`` for a model leaf with no Julia counterpart, and put
``NoArrays()`` where the Julia state holds only hyper-parameters (any array-free value fits).
A Flux layer with an activation outside a Chain is ``_eqx_layers.Activated`` /
``_nnx_layers.Activated`` (inside a Chain: the module then the activation, folded when read); an
Equinox layer with state (BatchNorm) is ``_eqx_layers.StatefulActivated`` there, which passes the state. A
standalone function Chain entry is built as ``_eqx_layers.Function`` / ``_nnx_layers.Function``,
which the readers never fold, so a built model's Flux.state keeps its source's Chain entry for entry.

Adding a layer: one record in ``_registry.KINDS`` (every fact about the kind) and one builder and
reader per target, registered with ``_registry.register`` in ``_eqx.py``, ``_nnx.py``, ``_linen.py``
and ``_interop/_torch.py`` (array maps as ``_perm`` permutations, which serve both directions), and
tests against the numpy Flux reference. The rules are in ``docs/porting.md``.
"""

from __future__ import annotations

import functools
from typing import Any

from .._bridge import restore
from ._flux import flux_state


def load_state(model: Any, state: Any, *, flux: str | None = None, **options: Any) -> Any:
    """``model`` (or ``(model, eqx_state)``) with the arrays of a ``Flux.state`` value tree put in.

    ``flux`` is the Flux era the state comes from (``"0.14"``: a ``Recur``'s ``b``/``state0``);
    ``options`` are those of :func:`treexchange.restore` (``numpy``, ``cast``, ``path`` …).

    Example:
        >>> import jax, equinox as eqx
        >>> import treexchange as tx
        >>> lin = eqx.nn.Linear(2, 3, key=jax.random.key(0))
        >>> back = load_state(eqx.nn.Linear(2, 3, key=jax.random.key(1)), tx.flux_state(lin))
        >>> bool((back.weight == lin.weight).all())
        True
    """
    layout = flux_state if flux is None else functools.partial(flux_state, flux=flux)
    return restore(state, like=model, layout=layout, **options)

"""Lux layout: an Equinox / Flax nnx model <-> the ``(ps, st)`` of the equivalent Lux model.

The model is read as its Flux twin (the same ``Port`` tree ``flux_state`` uses, so every array
permutation, the Conv kernel flip included, is the Flux rule's), and each Flux array is moved to
its Lux place (layer-spec §2.1–2.15):

=================  =========================================  =====================================
Flux layer         Lux ``ps``                                 Lux ``st``
=================  =========================================  =====================================
Dense              ``weight (out, in)``, ``bias``             ``NamedTuple()``
Conv / CrossCor    ``weight (k…, in÷g, out)``, ``bias``       ``NamedTuple()``
BatchNorm          ``scale`` = γ, ``bias`` = β                ``running_mean`` = μ, ``running_var``
                                                              = σ², ``training``
LayerNorm          ``bias``, ``scale`` (bias first),          ``NamedTuple()``
                   shapes ``(size…, 1)``
Embedding          ``weight (dim, vocab)``                    ``NamedTuple()``
Chain, Parallel,   ``layer_1``, ``layer_2``, … (or its names) the same names
PairwiseFusion,
Maxout
SkipConnection     the wrapped layer's ``ps``                 the wrapped layer's ``st``
anything else      ``NamedTuple()`` (no arrays)               ``NamedTuple()``
=================  =========================================  =====================================

Biases are ``(out,)`` in Lux v1 and ``(out, 1)`` (Dense) / ``(1, …, 1, out, 1)`` (Conv) in Lux v0.5.
Lux's ``Conv`` is a true convolution, as Flux's ``Conv``, so its kernel is stored exactly as Flux
stores it; ``Conv(…; cross_correlation=true)`` is Flux's ``CrossCor`` (no flip). On a restore every
entry without arrays fits any array-free file value (Lux writes ``()`` or ``NamedTuple()`` there
depending on its version).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .._errors import UnsupportedError
from .._values import NamedTuple, Singleton
from ._perm import Perm
from ._state import KEEP, Port, julia_array

LUX_VERSIONS = ("1", "0.5")
LUX_PARTS = ("ps", "st")

# Flux array field -> (ps or st, Lux name), in Lux's field order.
_NAMES: dict[str, dict[str, tuple[str, str]]] = {
    "Dense": {"weight": ("ps", "weight"), "bias": ("ps", "bias")},
    "Conv": {"weight": ("ps", "weight"), "bias": ("ps", "bias")},
    "CrossCor": {"weight": ("ps", "weight"), "bias": ("ps", "bias")},
    "Embedding": {"weight": ("ps", "weight")},
    "BatchNorm": {
        "γ": ("ps", "scale"),
        "β": ("ps", "bias"),
        "μ": ("st", "running_mean"),
        "σ²": ("st", "running_var"),
    },
    "LayerNorm": {"bias": ("ps", "bias"), "scale": ("ps", "scale")},
}
# Lux.setup's BatchNorm state flag (a `Val`, stored by JLD2 as an empty struct).
_TRAINING = Singleton("Base.Val{true}")


def check_lux(lux: str, part: str | None) -> None:
    if lux not in LUX_VERSIONS:
        raise ValueError(f"lux must be one of {', '.join(LUX_VERSIONS)}, not {lux!r}")
    if part is not None and part not in LUX_PARTS:
        raise ValueError(f"part must be 'ps', 'st' or None, not {part!r}")


def lux_shape(
    layer_kind: str, nspatial: int, field: str, shape: tuple[int, ...], lux: str
) -> tuple[int, ...]:
    """The Lux shape of a Flux-shaped array: only singleton axes differ."""
    if layer_kind == "LayerNorm":
        return (*shape, 1)
    if field == "bias" and lux == "0.5":
        if layer_kind == "Dense":
            return (*shape, 1)
        if layer_kind in ("Conv", "CrossCor"):
            return (*(1,) * nspatial, *shape, 1)
    return shape


def lux_array(port: Port, field: str, lux: str) -> Any:
    """The Lux array (or, in a restore, the LeafRef) for one Flux array field of ``port``."""
    from .._bridge._restore import LeafRef

    value, perm = port.arrays[field]
    flux_shape = perm.julia_shape(tuple(value.shape))
    shape = lux_shape(port.layer.kind, len(port.layer.arg("kernel", ())), field, flux_shape, lux)
    if isinstance(value, LeafRef):
        return value.through(shape, _reshaped(perm, flux_shape))
    return np.ascontiguousarray(np.asarray(julia_array(value, perm)).reshape(shape))


def _reshaped(perm: Perm, flux_shape: tuple[int, ...]) -> Any:
    # Julia arrays are read reversed (row-major view of column-major data), so a reshape that only
    # adds or drops singleton axes is the same reshape on the Python side: no element moves.
    return lambda a: perm.forward(np.asarray(a).reshape(flux_shape))


def lux_ps_st(port: Port, lux: str, part: str | None, restoring: bool) -> tuple[Any, Any]:
    """``(ps, st)`` of the Lux twin of ``port``; in a restore, the leaves of the other part are kept."""
    from .._bridge._restore import NO_ARRAYS

    layer = port.layer
    if layer.kind in ("Chain", "Parallel", "PairwiseFusion", "Maxout"):  # connection: a function
        pairs = [lux_ps_st(child, lux, part, restoring) for child in port.children]
        names = layer.names or tuple(f"layer_{i}" for i in range(1, len(pairs) + 1))
        return (
            NamedTuple(zip(names, (p for p, _ in pairs))),
            NamedTuple(zip(names, (s for _, s in pairs))),
        )
    if layer.kind == "SkipConnection":
        return lux_ps_st(port.children[0], lux, part, restoring)
    if port.children:
        raise UnsupportedError(
            f"Lux ps/st for {layer.kind} is not mapped (containers with a function connection are)"
        )
    if not port.arrays:
        empty = NO_ARRAYS if restoring else NamedTuple()
        return empty, empty
    if layer.kind not in _NAMES:
        raise UnsupportedError(
            f"Lux ps/st for {layer.kind} is not mapped "
            "(Dense, Conv, CrossCor, Embedding, BatchNorm, LayerNorm are)"
        )
    ps: dict[str, Any] = {}
    st: dict[str, Any] = {}
    for field, (where, name) in _NAMES[layer.kind].items():
        if field not in port.arrays:
            continue  # no bias, BatchNorm without affine or tracked statistics
        if restoring and part is not None and where != part:
            port.fixed.append((port.arrays[field][0], KEEP))  # this part does not set it
            continue
        (ps if where == "ps" else st)[name] = lux_array(port, field, lux)
    if layer.kind == "BatchNorm" and not (restoring and part == "ps"):
        st["training"] = NO_ARRAYS if restoring else _TRAINING
    return NamedTuple(ps.items()), NamedTuple(st.items()) if st or not restoring else NO_ARRAYS

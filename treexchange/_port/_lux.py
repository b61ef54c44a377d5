"""Lux layout: an Equinox / Flax nnx model <-> the ``(ps, st)`` of the equivalent Lux model.

The model is read as its Flux twin (the same ``Port`` tree ``flux_state`` uses, so every array
permutation, the Conv kernel flip included, is the Flux rule's), and each Flux array is moved to
its Lux place (docs/porting.md §Supported layers):

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

A recurrent layer's learnt initial state (Flux ≤ 0.14 ``state0``) is the Lux cell's ``train_state``
ps ``hidden_state`` (LSTM: and ``train_memory``'s ``memory``).

Biases are ``(out,)`` in Lux v1 and ``(out, 1)`` (Dense) / ``(1, …, 1, out, 1)`` (Conv) in Lux v0.5.
Lux's ``Conv`` is a true convolution, as Flux's ``Conv``, so its kernel is stored exactly as Flux
stores it; ``Conv(…; cross_correlation=true)`` is Flux's ``CrossCor`` (no flip). On a restore every
entry without arrays fits any array-free file value (Lux writes ``()`` or ``NamedTuple()`` there
depending on its version).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._bridge._restore import NO_ARRAYS, LeafRef
from .._errors import UnsupportedError
from .._values import NamedTuple, Singleton
from ._perm import Perm
from ._registry import KINDS, RECURRENT_GATES, lux_names
from ._state import KEEP, Port, julia_array

LUX_VERSIONS = ("1", "0.5")
LUX_PARTS = ("ps", "st")

# Flux array field -> (ps or st, Lux name), in Lux's field order: the registry's Lux names, kept
# under these names for the modules that read them.
_NAMES: dict[str, Mapping[str, tuple[str, str]]] = {
    kind: record.lux for kind, record in KINDS.items() if record.lux and not record.gates
}

# Recurrent cells (docs/porting.md §Lux): Flux's one bias ``b``; Lux v1 has PyTorch's two, Lux v0.5 one
# (LSTM a ``(4H, 1)`` column, RNN an ``(H,)`` vector). The wrappers (``Recurrence``,
# ``StatefulRecurrentCell``) hold the cell's ps.
_RECURRENT_V05 = {
    kind: {field: name for field, (_, name) in lux_names(kind, "0.5").items()}
    for kind, record in KINDS.items()
    if record.lux_05 is not None
}
_RECURRENT_V1 = {field: name for field, (_, name) in next(r.lux for r in KINDS.values() if r.gates).items()}
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
    if field.startswith("state0."):  # a learnt initial state: Flux ≤ 0.14 (H, 1), Lux's ps (H,)
        return shape[:1]
    if layer_kind == "LayerNorm":
        return (*shape, 1)
    if field == "bias" and lux == "0.5":
        if layer_kind == "Dense":
            return (*shape, 1)
        if layer_kind in ("Conv", "CrossCor"):
            return (*(1,) * nspatial, *shape, 1)
    return shape


def _gru_v05_ps(port: Port, restoring: bool) -> tuple[Any, Any]:
    """Lux 0.5 ``GRUCell`` ps of a Flux GRU (written only: see :func:`_recurrent_ps_st`)."""
    wi, wh = (np.asarray(julia_array(*port.arrays[f])) for f in ("Wi", "Wh"))
    b = np.asarray(julia_array(*port.arrays["b"]))
    hidden = wh.shape[1]
    bias_h = np.concatenate([b[: 2 * hidden], np.zeros(hidden, b.dtype)]).reshape(-1, 1)
    ps = NamedTuple(
        weight_i=np.ascontiguousarray(wi),
        weight_h=np.ascontiguousarray(wh),
        bias_i=np.ascontiguousarray(b[2 * hidden :].reshape(-1, 1)),
        bias_h=bias_h,
    )
    return NamedTuple([*ps.items(), *_initial_state_ps(port, "0.5")]), (
        NO_ARRAYS if restoring else NamedTuple()
    )


# A learnt initial state (Flux ≤ 0.14 ``Recur.state0``, kept by the ported recurrent modules) is Lux's
# ``train_state=true`` (and for LSTM ``train_memory=true``): ps ``hidden_state`` (and ``memory``), each
# ``(H,)``, after the biases, in Lux 0.5 and Lux 1 alike (``initialparameters`` of RNNCell, LSTMCell,
# GRUCell); Lux repeats it over the batch as Flux broadcasts ``state0``.
_INITIAL_STATE_PS = (("state0.h", "hidden_state"), ("state0.c", "memory"))


def _initial_state_ps(port: Port, lux: str) -> list[tuple[str, Any]]:
    """The Lux ps entries of a recurrent layer's learnt initial state (none when it starts from zeros)."""
    return [(name, lux_array(port, field, lux)) for field, name in _INITIAL_STATE_PS if field in port.arrays]


def lux_array(port: Port, field: str, lux: str) -> Any:
    """The Lux array (or, in a restore, the LeafRef) for one Flux array field of ``port``."""
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
    if layer.kind == "MultiHeadAttention":
        return _attention_ps_st(port, lux, part, restoring)
    if layer.kind in RECURRENT_GATES:
        return _recurrent_ps_st(port, lux, part, restoring)
    if layer.kind not in _NAMES:
        raise UnsupportedError(
            f"Lux ps/st for {layer.kind} is not mapped ({', '.join(_NAMES)}, the recurrent layers "
            "but GRUv3, and MultiHeadAttention are; see docs/porting.md §Lux)"
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


def _attention_ps_st(port: Port, lux: str, part: str | None, restoring: bool) -> tuple[Any, Any]:
    """Lux ``MultiHeadAttention``: ``(q_proj, k_proj, v_proj, attention_dropout, out_proj)``, each
    projection a Lux Dense ``(weight, bias)`` holding Flux's arrays as they are (docs/porting.md
    §Attention)."""
    if lux == "0.5":
        raise UnsupportedError("Lux v0.5 has no MultiHeadAttention layer (Lux ≥ 1 has)")
    if restoring and part == "st":  # attention keeps no state arrays: the ps part sets them
        for value, _ in port.arrays.values():
            port.fixed.append((value, KEEP))
        return NO_ARRAYS, NO_ARRAYS
    ps: list[tuple[str, Any]] = []
    for name in ("q_proj", "k_proj", "v_proj", "attention_dropout", "out_proj"):
        keys = [f for f in ("weight", "bias") if f"{name}.{f}" in port.arrays]
        ps.append((name, NamedTuple((f, lux_array(port, f"{name}.{f}", lux)) for f in keys)))
    st = NO_ARRAYS if restoring else NamedTuple((name, NamedTuple()) for name, _ in ps)
    return NamedTuple(ps), st


def _recurrent_ps_st(port: Port, lux: str, part: str | None, restoring: bool) -> tuple[Any, Any]:
    """A recurrent layer as its Lux cell: v1 ``(weight_ih, weight_hh, bias_ih, bias_hh)`` with
    ``bias_hh = 0`` (exact: Flux's one bias is all in ``bias_ih``; for GRU Lux v1 puts ``b_hn``
    inside ``r``, where Flux has none, and zero is the same); v0.5 ``(weight_i, weight_h, bias)``
    for LSTM with a ``(4H, 1)`` bias (``vcat`` of four ``(H, 1)`` blocks), ``(weight_ih, weight_hh, bias)``
    for RNN with an ``(H,)`` bias (Lux v0.5 ``src/layers/recurrent.jl``); v0.5 GRU
    ``(weight_i, weight_h, bias_i, bias_h)`` with ``bias_i = b_h̃`` ``(H, 1)`` (added outside the
    reset product, as Flux's) and ``bias_h = [b_r; b_z; 0]`` ``(3H, 1)`` (Lux 0.5 ``GRUCell``)."""
    kind = port.layer.kind
    if kind == "GRUv3":
        raise UnsupportedError("Lux has no GRUv3 cell (the reset gate before Wh_h̃)")
    biased = "b" in port.arrays
    if not biased and lux == "0.5":
        raise UnsupportedError(
            f"a {kind} without bias as Lux 0.5 ps is not supported (lux='1' writes it: weight_ih and "
            "weight_hh only)"
        )
    if restoring and part != "st" and kind == "GRU" and biased:
        raise UnsupportedError(
            f"restoring Lux v{lux} GRU ps is not supported: the last block of its hidden bias sits "
            "inside the reset product, where Flux's GRU has no bias (write with tx.lux_state, or "
            "restore a Flux.state)"
        )
    if restoring and part == "st":  # the cell's arrays are all in ps: keep them
        for value, _ in port.arrays.values():
            port.fixed.append((value, KEEP))
        return NO_ARRAYS, NO_ARRAYS
    if lux == "0.5" and kind == "GRU":
        return _gru_v05_ps(port, restoring)
    names = _RECURRENT_V1 if lux == "1" else _RECURRENT_V05[kind]
    ps: list[tuple[str, Any]] = []
    for field, name in names.items():
        if field not in port.arrays:
            continue  # (bias=false: Lux's use_bias=false has neither bias)
        array = lux_array(port, field, lux)
        if field == "b" and lux == "0.5" and kind == "RNN":
            pass  # Lux 0.5's RNNCell bias is init_bias(rng, out): a vector, as Flux's
        elif field == "b" and lux == "0.5" and not restoring:
            array = array.reshape(-1, 1)
        elif field == "b" and lux == "0.5":
            value, perm = port.arrays[field]
            flux_shape = perm.julia_shape(tuple(value.shape))
            array = value.through((*flux_shape, 1), _reshaped(perm, flux_shape))
        ps.append((name, array))
    if not biased:
        pass
    elif lux == "1" and restoring:
        # Flux's one bias is the sum of Lux's two (both are added to the same pre-activations)
        bias = dict(ps)["bias_ih"]
        ps = [(name, bias.addend(0, 2) if name == "bias_ih" else a) for name, a in ps]
        ps.append(("bias_hh", bias.addend(1, 2)))
    elif lux == "1":
        ps.append(("bias_hh", np.zeros_like(np.asarray(dict(ps)["bias_ih"]))))
    return NamedTuple([*ps, *_initial_state_ps(port, lux)]), (NO_ARRAYS if restoring else NamedTuple())

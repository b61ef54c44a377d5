"""A Python model read as its Flux twin (:class:`Port`), and the ``Flux.state`` it gives.

A framework adapter reads a model into a :class:`Port` tree: the Flux :class:`Layer` each module
stands for, and for each of the layer's array fields the framework array (or, during a restore,
the :class:`~treexchange._bridge._restore.LeafRef` standing for it) with the exact permutation
from the Julia array to it. :func:`state_of` then assembles ``Flux.state`` from the layer rules;
on a restore the same walk hands back LeafRefs that know the Julia shape and the permutation to
apply when placing the file's array.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from .._bridge._restore import DISCARDED, NO_ARRAYS, LeafRef
from .._errors import UnsupportedError
from .._values import NamedTuple
from ._perm import Perm, Reshape
from ._registry import CELLS, rule_for
from ._rules import Arr, Child, Children, Discard, PaddedRows, _NamedFields
from ._spec import FLUX_ERAS, Layer


@dataclasses.dataclass
class Port:
    """One model module read as a Flux layer.

    ``arrays`` maps a Flux array field (``"weight"``, ``"σ²"``) to ``(framework array, perm)``
    with ``perm.forward(julia_array)`` = the framework array. ``fixed`` lists model leaves with
    no Flux counterpart and the value a restore gives them (Equinox BatchNorm's "first time" flag).
    """

    layer: Layer
    arrays: dict[str, tuple[Any, Perm]] = dataclasses.field(default_factory=dict)
    children: tuple[Port, ...] = ()
    fixed: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)

    def all_fixed(self) -> list[tuple[Any, Any]]:
        out = list(self.fixed)
        for child in self.children:
            out += child.all_fixed()
        return out


KEEP: Any = type("Keep", (), {"__repr__": lambda self: "KEEP"})()  # a "fixed" value: the template's own


def check_era(era: str) -> str:
    if era not in FLUX_ERAS:
        raise ValueError(f"flux must be one of {', '.join(FLUX_ERAS)} (the Flux.state eras), not {era!r}")
    return era


def state_of(port: Port, era: str) -> Any:
    """``Flux.state`` of the Flux twin of ``port`` (arrays in Julia shape, or LeafRefs for a restore).

    For a restore (the model's arrays are LeafRefs) the result is a template: arrays as LeafRefs,
    and every entry without arrays (hyper-parameters, whole pools) a ``NoArrays`` that fits the
    state of any Flux era, because ``Flux.loadmodel!`` never loads those either.
    """
    if _restoring(port):
        return _template(port, era)
    return _state(port, era, restoring=False)


def _state(port: Port, era: str, *, restoring: bool) -> Any:
    fields = rule_for(port.layer).fields(port.layer, era)
    if fields == ():
        return ()
    return NamedTuple((name, _resolve(port, spec, era, restoring)) for name, spec in fields)


def _template(port: Port, era: str = "0.15") -> Any:
    # 0.15 (the default) lists every field any era has, except a Flux ≤ 0.14 Recur's ``b``/``state0``:
    # those files restore through ``layout=functools.partial(flux_state, flux="0.14")``.
    state = _state(port, era, restoring=True)
    return NO_ARRAYS if state == () or (not _has_refs(state) and not port.children) else state


def _restoring(port: Port) -> bool:
    if any(isinstance(value, LeafRef) for value, _ in port.arrays.values()):
        return True
    return any(_restoring(child) for child in port.children)


def _has_refs(state: Any) -> bool:
    if isinstance(state, LeafRef):
        return True
    if isinstance(state, NamedTuple):
        return any(_has_refs(v) for v in state.values())
    if isinstance(state, tuple):
        return any(_has_refs(v) for v in state)
    return False


def _resolve(port: Port, spec: Any, era: str, restoring: bool = False) -> Any:
    if isinstance(spec, Arr):
        if spec.key not in port.arrays:
            raise UnsupportedError(f"{port.layer.kind} has no array for its field {spec.key!r}")
        value, perm = port.arrays[spec.key]
        array = julia_array(value, perm)
        return padded_rows(array, spec.extra) if isinstance(spec, PaddedRows) else array
    if isinstance(spec, Children):
        states = tuple(
            _template(c, era) if restoring else _state(c, era, restoring=False) for c in port.children
        )
        if port.layer.names:
            return NamedTuple(zip(port.layer.names, states))
        return states
    if isinstance(spec, Child):
        child = port.children[spec.index]
        return _template(child, era) if restoring else _state(child, era, restoring=False)
    if isinstance(spec, _NamedFields):
        return NamedTuple((name, _resolve(port, sub, era, restoring)) for name, sub in spec)
    if isinstance(spec, tuple) and spec and all(isinstance(sub, Arr) for sub in spec):
        return tuple(_resolve(port, sub, era, restoring) for sub in spec)  # an LSTM's state0 (h, c)
    if isinstance(spec, Discard):
        return DISCARDED if restoring else spec.value
    if restoring:
        return NO_ARRAYS  # a hyper-parameter: Flux.loadmodel! does not load it either
    return spec


def returning_state(port: Port, return_state: bool) -> Port:
    """``port`` of a recurrent layer whose module returns ``(outputs, last state)``: the layer's
    ``args["return_state"]`` (Flux ≥ 0.15's ``return_state=true``), else ``port`` as it is."""
    if return_state:
        port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "return_state": True})
    return port


_CELL_OF_LAYER = {layer: cell for cell, layer in CELLS.items()}


def bare_cell(port: Port) -> Port:
    """``port`` of a recurrent layer read from a module that runs one step, its state carried by the
    caller (``eqx.nn.GRUCell`` alone, ``_nnx_layers.Cell``, ``torch.nn.GRUCell``): Flux ≥ 0.15's
    cell of that layer (``GRU`` -> ``GRUCell``), whose state is the layer's ``cell``, same arrays."""
    port.layer = dataclasses.replace(port.layer, kind=_CELL_OF_LAYER[port.layer.kind])
    return port


def carry_initial_state(port: Port, state0: Any) -> Port:
    """``port`` of a recurrent layer whose module holds a learnt initial state ``state0`` (``h``, or
    ``(h, c)`` for LSTM, each ``(H,)``; None: the module starts from zeros): the layer's
    ``args["state0"]`` and its arrays ``state0.h``/``state0.c``, Julia ``(H, 1)`` as in Flux ≤ 0.14.
    A Flux ≥ 0.15 state has no ``state0``: restoring one keeps the module's own."""
    if state0 is None:
        return port
    parts = state0 if isinstance(state0, tuple) else (state0,)
    for name, value in zip(("h", "c"), parts):
        hidden = int(value.shape[0])
        port.arrays[f"state0.{name}"] = (value, Reshape((hidden, 1), (hidden,)))
        port.fixed.append((value, KEEP))  # used only where the state has no state0
    port.layer = dataclasses.replace(port.layer, args={**port.layer.args, "state0": True})
    return port


def padded_rows(array: Any, extra: int) -> Any:
    """A Julia-shaped array with ``extra`` zero rows after its own (a LeafRef: one that reads the
    file's array, of those rows more, without them)."""
    rows = int(array.shape[0])
    if isinstance(array, LeafRef):
        inner = array.transform

        def used_rows(a: np.ndarray) -> np.ndarray:
            kept = np.asarray(a)[:rows]
            return inner(kept) if inner is not None else kept

        return array.through((rows + extra, *array.shape[1:]), used_rows)
    return np.concatenate([array, np.zeros((extra, *array.shape[1:]), array.dtype)])


def gruv3_wh(wh: np.ndarray, hidden: int, padded: bool) -> np.ndarray:
    """GRUv3's ``Wh`` with the rows of the era written: 3H (Flux ≥ 0.15: zeros after the 2H it uses)
    or 2H (Flux ≤ 0.14), from either."""
    if padded and wh.shape[0] == 2 * hidden:
        return padded_rows(wh, hidden)
    if not padded and wh.shape[0] == 3 * hidden:
        return wh[: 2 * hidden]
    return wh


def julia_array(value: Any, perm: Perm) -> Any:
    """The Julia-shaped array of a framework array (a LeafRef becomes a LeafRef that permutes)."""
    if isinstance(value, LeafRef):
        return value.through(perm.julia_shape(value.shape), perm.forward)
    return np.ascontiguousarray(perm.inverse(np.asarray(value)))


def float_dtype(port: Port) -> str | None:
    """The dtype name of the first floating array (``flux_julia`` adds ``|> f64`` when not Float32)."""
    for value, _ in port.arrays.values():
        dtype = np.dtype(value.dtype)
        if dtype.kind == "f":
            return dtype.name
    for child in port.children:
        found = float_dtype(child)
        if found:
            return found
    return None


def fix_unported_leaves(port: Port) -> None:
    """Give every restore stand-in of a model leaf without Julia counterpart its fixed value."""
    for leaf, value in port.all_fixed():
        if isinstance(leaf, LeafRef):
            leaf.fixed = leaf.template if value is KEEP else value

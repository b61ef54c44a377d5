"""``Flux.state`` of a Flux era from a Layer tree and the arrays each layer holds, without a framework.

Two uses, both for old (BSON-era) models:

- a parameter list (``BSON.@save "p.bson" params=cpu.(params(model))``: the arrays of
  ``Flux.params(model)`` in order) plus the architecture: :func:`state_from_params` assigns the arrays
  to the layers in Flux's ``params`` order, checking every size, and builds the state;
- migrating a whole model to a current Flux (``treexchange convert --flux-state``):
  :func:`layer_state` gives one layer's ``Flux.state`` in the era asked for, from the arrays its
  struct holds (field names of any era).

The fields come from the layer rules (``_rules.RULES``: names, order and values as ``flux_state``
writes them), so a state made here is what ``tx.flux_state(model, flux=era)`` gives for the same
model, except that a recurrent layer's learnt initial state (``state0``) is kept for Flux ≤ 0.14.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import ConversionError, TreePath, format_path
from .._limits import DEFAULT_LIMITS
from .._recursion import stack_for_depth
from .._values import JuliaDict, JuliaStruct, NamedTuple
from ._eras import gpu_pointers_error, is_gpu_array, normalise
from ._registry import (
    ARRAY_LAYERS,
    KINDS,
    STATELESS_LAYERS,
    param_slots,
    rule_for,
    with_defaults,
    wrapped_kind,
)
from ._rules import Arr, Child, Children, Discard, PaddedRows, _NamedFields
from ._spec import Layer
from ._state import gruv3_wh
from ._wholemodel import _is_flux_struct, _unwrap_tracked, from_whole_model, refuse_cycles

# Field names that mean the same array in different eras (Dense ``W``/``weight``, recurrent
# ``b``/``bias``, ``Diagonal``'s ``α``/``β`` = ``Scale``'s ``scale``/``bias``).
_ALIASES = {"weight": ("W",), "b": ("bias",), "bias": ("b", "β"), "scale": ("α",)}


def flat_arrays(state: Any, prefix: str = "") -> dict[str, Any]:
    """The arrays of one layer's state by dotted path (``"cell.Wi"``, ``"diag.scale"``); a tuple of
    arrays (an LSTM's ``state0``) is one entry.

    Example:
        >>> flat_arrays(NamedTuple(cell=NamedTuple(Wi=np.ones((4, 2)), state0=(np.zeros(1), np.zeros(1)))))
        ... # doctest: +ELLIPSIS
        {'cell.Wi': array(...), 'cell.state0': (array([0.]), array([0.]))}
    """
    out: dict[str, Any] = {}
    items: Any = ()
    if isinstance(state, NamedTuple):
        items = state.items()
    elif isinstance(state, JuliaStruct):
        items = state.fields.items()
    for key, value in items:
        path = f"{prefix}{key}"
        if isinstance(value, np.ndarray) or (
            isinstance(value, tuple) and value and all(isinstance(v, np.ndarray) for v in value)
        ):
            out[path] = value
        elif isinstance(value, (NamedTuple, JuliaStruct)):
            out.update(flat_arrays(value, path + "."))
    return out


def _lookup(arrays: Mapping[str, Any], key: str) -> Any:
    if key in arrays:
        return arrays[key]
    for name in (key, *_ALIASES.get(key, ())):
        found = [v for k, v in arrays.items() if k.rsplit(".", 1)[-1] == name]
        if len(found) == 1:
            return found[0]
    return None


def layer_state(layer: Layer, arrays: Mapping[str, Any], era: str, path: TreePath = ()) -> Any:
    """``Flux.state`` of one non-container layer in ``era``, its arrays taken from ``arrays``
    (dotted paths, as :func:`flat_arrays` gives; names of any era).

    BatchNorm running statistics missing from ``arrays`` (a parameter list has none) are Flux's
    initial ones (μ = 0, σ² = 1), as ``Flux.loadparams!`` leaves them.

    Example:
        >>> dense = Layer("Dense", {"in": 3, "out": 2, "σ": "relu"})
        >>> state = layer_state(dense, {"W": np.ones((2, 3)), "b": np.zeros(2)}, "0.15")
        >>> list(state), state["weight"].shape
        (['weight', 'bias', 'σ'], (2, 3))
    """
    return _Filler(era).leaf(with_defaults(layer), arrays, tuple(path))


class _Filler:
    def __init__(self, era: str) -> None:
        self.era = era

    def leaf(self, layer: Layer, arrays: Mapping[str, Any], path: TreePath) -> Any:
        fields = rule_for(layer).fields(layer, self.era)
        if fields == ():
            return ()
        return NamedTuple((name, self.resolve(layer, name, spec, arrays, path)) for name, spec in fields)

    def resolve(self, layer: Layer, name: str, spec: Any, arrays: Mapping[str, Any], path: TreePath) -> Any:
        if isinstance(spec, Arr):
            value = _lookup(arrays, spec.key)
            if value is None:
                value = self.default(layer, spec.key, arrays, path)
            if wrapped_kind(layer.kind) == "GRUv3" and spec.key == "Wh" and isinstance(value, np.ndarray):
                value = gruv3_wh(value, int(layer.args["out"]), isinstance(spec, PaddedRows))
            return value
        if isinstance(spec, _NamedFields):
            return NamedTuple((n, self.resolve(layer, n, s, arrays, (*path, name))) for n, s in spec)
        if isinstance(spec, Discard):  # a Recur's state0 / state: the learnt initial state when known
            known = _lookup(arrays, "state0")
            return known if known is not None else spec.value
        if isinstance(spec, (Children, Child)):
            raise ConversionError(f"{layer.kind} is a container, not a layer with arrays", path=path)
        return spec

    def default(self, layer: Layer, key: str, arrays: Mapping[str, Any], path: TreePath) -> Any:
        like = _lookup(arrays, "γ")
        dtype = like.dtype if isinstance(like, np.ndarray) else np.float32
        channels = int(layer.args.get("channels", 0))
        if key == "μ" and channels:
            return np.zeros(channels, dtype)
        if key == "σ²" and channels:
            return np.ones(channels, dtype)
        raise ConversionError(f"{layer.kind} has no array {key!r}", path=(*path, key))


# --- parameter lists --------------------------------------------------------------------------------


def params_list(value: Any) -> list[Any] | None:
    """The arrays of a saved parameter list (a Vector of arrays, or a ``Params``), else None.

    A ``Params`` (Zygote's, Tracker's, Flux ≤ 0.9's) keeps the arrays in its first field,
    ``order``: a ``Vector{Any}``, or (Zygote ≥ 0.4) a ``Zygote.Buffer`` whose first field is that
    vector. Its second field, ``params``, is an ``IdSet`` whose keys are the same arrays in hash
    order, never the model's: it is not read.
    """
    if isinstance(value, JuliaStruct) and value.type.basename == "Params":
        order = params_order(value)
        return params_list(order[0]) if order is not None else None
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, np.ndarray) for v in value):
        return list(value)
    return None


def params_order(value: Any) -> tuple[list[Any] | tuple[Any, ...], TreePath] | None:
    """A saved ``Params``' ``order`` as it is, whatever its items, with its path below the
    ``Params`` (``('1',)``, in a ``Zygote.Buffer`` ``('1', '1')``); a Vector or Tuple is its own
    order (path ``()``); None for anything else."""
    if isinstance(value, (list, tuple)):
        return value, ()
    if not (isinstance(value, JuliaStruct) and value.type.basename == "Params" and value.fields):
        return None
    key, order = next(iter(value.fields.items()))
    where: TreePath = (key,)
    if isinstance(order, JuliaStruct) and order.type.basename == "Buffer" and order.fields:
        inner, order = next(iter(order.fields.items()))
        where = (key, inner)
    return (order, where) if isinstance(order, (list, tuple)) else None


def refuse_gpu_parameters(value: Any, path: TreePath) -> None:
    """A parameter list saved from the GPU (``params(model)`` of ``CuArray``s, in a ``Params`` or a
    Vector of arrays) holds the arrays' device addresses, none of their numbers: refused as
    ``from_flux`` refuses it, not written as it is as if it were data."""
    order = params_order(value)
    if order is None or not order[0]:
        return
    items, where = order
    if all(isinstance(v, np.ndarray) or is_gpu_array(v) for v in items):
        for i, item in enumerate(items, 1):
            if is_gpu_array(item):
                raise gpu_pointers_error(item, (*path, *where, i))


def state_from_params(
    layer: Layer, arrays: Sequence[Any], era: str, *, path: TreePath = (), initial_states: bool | None = None
) -> Any:
    """``Flux.state`` (of ``era``) of the model ``layer`` whose ``Flux.params`` are ``arrays``.

    The arrays are assigned in ``Flux.params`` order (layer by layer, each layer's trainable arrays
    in field order); every size is checked against what the architecture implies, so a wrong
    architecture or a list from another model fails here naming the first array that does not fit.
    A recurrent layer's initial state is taken when the next array fits it, or as
    ``initial_states`` says (a flat vector's length tells).

    Example:
        >>> from treexchange._port._arch import parse_architecture
        >>> arch = parse_architecture("Chain(Dense(3 => 2, relu), Dense(2 => 1))")
        >>> ps = [np.ones((2, 3)), np.zeros(2), np.ones((1, 2)), np.zeros(1)]
        >>> state = state_from_params(arch, ps, "0.15")
        >>> [list(s) for s in state["layers"]]
        [['weight', 'bias', 'σ'], ['weight', 'bias', 'σ']]
    """
    assigner = _Assigner(list(arrays), tuple(path), initial_states)
    filler = _Filler(era)
    state = assigner.walk(with_defaults(layer), filler, ())
    if assigner.next < len(assigner.arrays):
        extra = assigner.arrays[assigner.next]
        raise ConversionError(
            f"the architecture takes {assigner.next} parameter arrays, the list has {len(assigner.arrays)} "
            f"(the next one has size {_fmt(extra.shape)})",
            path=(*path, assigner.next + 1),
        )
    return state


def flat_vector(value: Any) -> np.ndarray | None:
    """``value`` when it is a flat parameter vector (a 1-D numeric array, Tracker's unwrapped), else None."""
    if isinstance(value, JuliaStruct) and value.type.basename == "TrackedArray":
        value = value.fields.get("data")  # Tracker (Flux ≤ 0.9): the data is the vector
    if isinstance(value, np.ndarray) and value.ndim == 1 and value.dtype.kind in "fc":
        return value
    return None


def params_from_flat(
    layer: Layer, flat: np.ndarray, *, path: TreePath = (), era: str | None = None
) -> tuple[list[np.ndarray], bool]:
    """The arrays of ``Flux.params(model)`` cut, in order, from ``model``'s flat parameter vector.

    ``p, re = Flux.destructure(model)`` concatenates the trainable arrays, each column-major
    (``vec``), in the order Functors walks them: the order of ``Flux.params`` and of
    :func:`param_slots`, layer by layer. Two layouts differ by era: Flux ≤ 0.14's recurrent cells
    train their initial state (after the bias), Flux ≥ 0.15's have none (and its ``GRUv3`` has a
    3H-row ``Wh``). The vector's length tells which (all of a model's layers are of one era); a
    length both layouts have is cut as ``era``'s (the era written), an error without it; whether
    the initial states are in it is returned with the arrays. Any other length is an error naming
    both.

    Example:
        >>> from treexchange._port._arch import parse_architecture
        >>> arch = parse_architecture("Chain(Dense(3 => 2, relu), Dense(2 => 1))")
        >>> arrays, initial_states = params_from_flat(arch, np.arange(11.0))
        >>> [a.shape for a in arrays], initial_states
        ([(2, 3), (2,), (1, 2), (1,)], False)
    """
    layouts: dict[str, list[tuple[int, ...]]] = {"0.15": [], "0.14": []}
    for sub in with_defaults(layer).walk():
        if sub.children:
            continue
        for name, layout in layouts.items():
            for _, shape, optional in param_slots(sub, name):
                if optional and name != "0.14":
                    continue  # Flux ≥ 0.15: no initial state
                layout.append(shape if shape is not None else (int(sub.args["out"]),))
    sizes = {name: sum(map(math.prod, shapes)) for name, shapes in layouts.items()}
    same = layouts["0.15"] == layouts["0.14"]
    fits = [name for name in layouts if sizes[name] == flat.size]
    if len(fits) == 2 and (same or era is not None):
        fits = ["0.14" if era == "0.14" else "0.15"]
    if len(fits) != 1:
        states = f" ({sizes['0.14']} in Flux ≤ 0.14's layout, with the recurrent layers' initial states)"
        why = (
            "the vector of another model, or an architecture that is not its model"
            if not fits
            else "both eras' layouts have that length: pass flux='0.14' or flux='0.15'"
        )
        raise ConversionError(
            f"the flat parameter vector has {flat.size} numbers; the model's parameters are "
            f"{sizes['0.15']}{'' if same else states}: {why}",
            path=path,
        )
    arrays: list[np.ndarray] = []
    start = 0
    for shape in layouts[fits[0]]:
        size = math.prod(shape)
        # (F order: Julia's vec of a column-major array; the views share the vector's memory)
        arrays.append(flat[start : start + size].reshape(shape, order="F"))
        start += size
    return arrays, fits[0] == "0.14" and not same


# The arrays no parameter list or flat vector holds (the registry's running statistics, ``μ``, ``σ²``).
_RUNNING = frozenset(name for kind in KINDS.values() for name in kind.state_arrays)


def keep_statistics(state: Any, model_state: Any) -> Any:
    """``state`` with the running statistics (``μ``, ``σ²``) of ``model_state``, a state of the same
    model: ``re(p)`` takes the trainable arrays from ``p`` and keeps the rest of ``re``'s model.

    Example:
        >>> bn = NamedTuple([("β", np.ones(2)), ("μ", np.zeros(2)), ("σ²", np.ones(2))])
        >>> trained = NamedTuple([("β", np.ones(2)), ("μ", np.array([5.0, 6.0])), ("σ²", np.ones(2))])
        >>> keep_statistics(bn, trained)["μ"].tolist()
        [5.0, 6.0]
    """
    if isinstance(state, NamedTuple) and isinstance(model_state, Mapping):
        return NamedTuple(
            (k, model_state[k] if k in _RUNNING and isinstance(model_state.get(k), np.ndarray)
             else keep_statistics(v, model_state.get(k)))
            for k, v in state.items()
        )  # fmt: skip
    if isinstance(state, tuple) and isinstance(model_state, tuple) and len(state) == len(model_state):
        return tuple(keep_statistics(v, m) for v, m in zip(state, model_state, strict=True))
    return state


def _fmt(shape: Sequence[int]) -> str:
    return "×".join(map(str, shape)) if len(shape) != 1 else f"{shape[0]}-element"


class _Assigner:
    def __init__(self, arrays: list[Any], path: TreePath, initial_states: bool | None = None) -> None:
        self.arrays = arrays
        self.next = 0
        self.path = path
        self.initial_states = initial_states

    def walk(self, layer: Layer, filler: _Filler, where: TreePath) -> Any:
        fields = rule_for(layer).fields(layer, filler.era)
        if layer.children:
            states = [self.walk(c, filler, (*where, i + 1)) for i, c in enumerate(layer.children)]
            if fields == ():
                return ()
            out = []
            for name, spec in fields:
                if isinstance(spec, Children):
                    out.append((name, NamedTuple(zip(layer.names, states)) if layer.names else tuple(states)))
                elif isinstance(spec, Child):
                    out.append((name, states[spec.index]))
                else:
                    out.append((name, spec))
            return NamedTuple(out)
        return filler.leaf(layer, self.take(layer, where), where)

    def take(self, layer: Layer, where: TreePath) -> dict[str, Any]:
        found: dict[str, Any] = {}
        hidden = layer.args.get("out")
        both_eras = zip(param_slots(layer, "0.14"), param_slots(layer, "0.15"), strict=True)
        for (key, shape, optional), (_, shape_15, _) in both_eras:
            if optional and self.initial_states is False:
                continue
            array = self.arrays[self.next] if self.next < len(self.arrays) else None
            got = tuple(array.shape) if isinstance(array, np.ndarray) else None
            # (either era's shape: GRUv3's Wh has 2H rows in Flux ≤ 0.14, 3H from 0.15)
            fits = got in (shape, shape_15) if shape is not None else got in ((hidden,), (hidden, 1))
            if fits:
                found[key] = array
                self.next += 1
                continue
            if optional:
                continue
            where_text = format_path(("model", *where)) if where else "the model"
            if got is None:
                raise ConversionError(
                    f"the parameter list ends at {self.next} arrays; the architecture's {layer.kind} "
                    f"({where_text}) needs {key} of size {_fmt(shape or ())}",
                    path=self.path,
                )
            raise ConversionError(
                f"parameter array {self.next + 1} has size {_fmt(got)}; the architecture's {layer.kind} "
                f"({where_text}) expects {key} of size {_fmt(shape or ())} there",
                path=(*self.path, self.next + 1),
            )
        states = [found.pop(k) for k in ("state0.h", "state0.c") if k in found]
        if states:
            columns = tuple(s.reshape(-1, 1) for s in states)
            found["state0"] = columns if len(columns) > 1 else columns[0]  # LSTM: (h, c)
        return found


# --- whole models -----------------------------------------------------------------------------------

# Struct names of Flux layers with state of their own (containers are walked field by field, as
# Functors does; so a Chain holding a closure or a user's struct still has a state).
_LAYER_STRUCTS = (ARRAY_LAYERS | STATELESS_LAYERS | {"Recur", "Recurrence"}) - {"function", "flatten"}


def whole_model_state(value: Any, era: str, *, path: TreePath = ()) -> Any:
    """``Flux.state`` (of ``era``) of a whole model as ``tx.load`` returns it, of any Flux era.

    Flux layers give the state the rules give in ``era`` (ghost fields back, old field names
    renamed); containers and users' structs are walked field by field, as ``Flux.state`` does for a
    functor; functions and closures are ``()``. So a model holding a closure still has a state
    (``Flux.state`` of a closure without captured variables is ``()``).

    Example:
        >>> old = JuliaStruct("Flux.Chain{Core.Tuple{Flux.Dense{Base.#identity,A,B}}}", {"layers": (
        ...     JuliaStruct("Flux.Dense{Base.#identity,A,B}", {"W": np.ones((2, 3)), "b": np.zeros(2)}),)})
        >>> state = whole_model_state(old, "0.15")
        >>> list(state), list(state["layers"][0])
        (['layers'], ['weight', 'bias', 'σ'])
    """
    refuse_cycles(value, tuple(path))
    with stack_for_depth(DEFAULT_LIMITS.max_depth):  # a model as deep as a file may hold
        model = normalise(_unwrap_tracked(value), tuple(path))
        return _model_state(model, era, tuple(path))


def _model_state(value: Any, era: str, path: TreePath) -> Any:
    if isinstance(value, JuliaStruct):
        if value.type.name.split(".", 1)[0] == "Flux" and value.type.basename in _LAYER_STRUCTS:
            layer, state = from_whole_model(value, path=path, flux=era)
            return layer_state(layer, flat_arrays(state), era, path)
        return NamedTuple((k, _model_state(v, era, (*path, k))) for k, v in value.fields.items())
    if isinstance(value, NamedTuple):
        return NamedTuple((k, _model_state(v, era, (*path, k))) for k, v in value.items())
    if isinstance(value, tuple):
        return tuple(_model_state(v, era, (*path, i + 1)) for i, v in enumerate(value))
    if isinstance(value, list):
        return [_model_state(v, era, (*path, i + 1)) for i, v in enumerate(value)]
    if isinstance(value, dict):  # a Dict is a container (Functors' children): a Dict of the states
        states = JuliaDict((k, _model_state(v, era, (*path, k))) for k, v in value.items())
        states.julia_type = getattr(value, "julia_type", None)  # (the writer re-derives it if unfit)
        return states
    if isinstance(value, (np.ndarray, np.generic, int, float, complex, str, bool)) or value is None:
        return value  # Flux's STATE_TYPES: arrays, numbers, nothing, strings, symbols
    return ()  # functions, closures, RNGs: what Flux.state keeps of a non-array leaf


def state_for_architecture(layer: Layer, value: Any, era: str, *, path: TreePath = ()) -> Any:
    """The ``Flux.state`` to put into the model ``layer`` (parsed from ``architecture=``) from
    what the file holds: a ``Flux.state`` (returned as it is), a parameter list, or a whole model
    of any Flux era (whose closures the architecture names)."""
    arrays = params_list(value)
    if arrays is not None:
        return state_from_params(layer, arrays, era, path=path)
    if isinstance(value, JuliaStruct):
        layers = _own_struct_layers(value)
        if layer.kind == "Chain" and layers is not None and len(layers) == len(layer.children):
            # A struct of the user's own holding Flux layers (its forward pass is Julia code):
            # the architecture says it applies them in field order, as this Chain.
            items = tuple(whole_model_state(v, era, path=(*path, k)) for k, v in layers)
            return NamedTuple(layers=items if layer.names is None else NamedTuple(zip(layer.names, items)))
        return whole_model_state(value, era, path=path)
    return value


def _own_struct_layers(value: JuliaStruct) -> list[tuple[str, Any]] | None:
    """The fields holding Flux layers of a struct that is not Flux's own (``Main.Model`` with a
    Dense, a Recur and a Dense), else None."""
    if _is_flux_struct(value):
        return None
    layers = [(k, v) for k, v in value.fields.items() if _is_flux_struct(v)]
    return layers or None


def nonzero_initial_states(value: Any, path: TreePath) -> list[TreePath]:
    """The paths of the non-zero ``state0`` entries (learnt initial states) in a Flux ≤ 0.14 state."""
    found = []
    if isinstance(value, NamedTuple):
        for k, v in value.items():
            arrays = v if isinstance(v, tuple) else (v,)
            if k == "state0" and any(isinstance(a, np.ndarray) and np.any(a != 0) for a in arrays):
                found.append((*path, k))
            else:
                found += nonzero_initial_states(v, (*path, k))
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            found += nonzero_initial_states(v, (*path, i + 1))
    return found

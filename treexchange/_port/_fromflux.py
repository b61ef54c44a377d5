"""``tx.from_flux``: a runnable Python model from a Flux file, with no template.

Two sources give the same pair ``(Layer tree, Flux.state)``:

- a whole-model file (Flux structs; their types record every layer and activation), or
- a ``Flux.state`` file plus the model as Flux prints it (``architecture=``), parsed, never evaluated.

:func:`check_state` then compares the state with what the Layer tree implies (structure and every
array size), so that a wrong architecture text fails here, naming the file path, rather than as a
shape error deep inside a framework.
"""

from __future__ import annotations

import dataclasses
import os
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np

from treexchange._errors import ConversionError, PathSegment, TreePath, UnsupportedError, format_path
from treexchange._port import load_state
from treexchange._port._arch import parse_architecture
from treexchange._port._componentarray import component_tree, is_component_array
from treexchange._port._registry import (
    CELLS,
    KINDS,
    RECURRENT_GATES,
    param_slots,
    with_defaults,
    wrapped_kind,
)
from treexchange._port._spec import DEFAULT_FLUX_ERA, Layer
from treexchange._port._state import check_era
from treexchange._port._statefill import (
    flat_vector,
    keep_statistics,
    params_from_flat,
    params_list,
    refuse_gpu_parameters,
    state_for_architecture,
    state_from_params,
)
from treexchange._port._wholemodel import from_whole_model, is_optimiser, outermost, structs_era
from treexchange._reader import has_embedded_schema, open as open_file, read_entry
from treexchange._values import JuliaArray, JuliaStruct, NamedTuple


def read_flux_source(
    path: str | os.PathLike[str], name: str, architecture: str | None = None, *, flux: str = "0.14"
) -> tuple[Layer, Any]:
    """``(Layer tree, Flux.state value tree)`` for the entry ``name`` of a Flux file.

    Without ``architecture`` the entry must be a whole Flux model (structs); with it, the entry is a
    ``Flux.state`` (or a whole model, whose arrays are then used) and the text describes the model.
    """
    layer, state, _ = read_source(path, name, architecture, flux=flux)
    return layer, state


def read_source(
    path: str | os.PathLike[str],
    name: str | Sequence[PathSegment],
    architecture: str | None,
    *,
    flux: str | None,
    flat: str | Sequence[PathSegment] | None = None,
) -> tuple[Layer, Any, str]:
    """:func:`read_flux_source` and the Flux era that applies: ``flux`` when given; else, for a
    ``Flux.state`` read with ``architecture``, the era its own field names show (:func:`state_era`),
    the current release when they show none; for a whole model the era its structs show (a
    recurrent layer: :func:`structs_era`), else Flux 0.14; the current release for a
    parameter list or a whole model read with ``architecture``. ``flat`` names a flat parameter
    vector (``Flux.destructure``'s) whose numbers fill the whole model (or ``Restructure``) at ``name``."""
    where = entry_path(name)
    shown = repr(where[0]) if len(where) == 1 else format_path(where)
    if flat is not None and architecture is not None:
        raise ConversionError(
            "flat= names the vector that fills the model the name holds; with architecture=, pass the "
            "flat vector itself as the name",
            path=where,
        )
    flat_where = None if flat is None else entry_path(flat)
    entries = read_entries(path, [where] if flat_where is None else [where, flat_where])
    value = value_at(entries[str(where[0])], where)
    rebuilder = restructure_model(value)
    if rebuilder is not None:
        model_key, model, length = rebuilder
        if flat_where is None:
            found = _vectors_of(path, length)
            p = found[0] if len(found) == 1 else "p"
            held = (
                f" (this file's vectors of {length} numbers: {', '.join(map(repr, found))})" if found else ""
            )
            raise ConversionError(
                f"{shown} is an Optimisers.Restructure (the re of p, re = Flux.destructure(model)): the "
                f"model's parameters are the flat vector p saved beside it{held}: pass its name, "
                f"tx.from_flux(path, {name!r}, flat={p!r}). (Its field model holds them as they were when "
                f"destructured: tx.from_flux(path, {(*where, model_key)!r}).)",
                path=where,
            )
        value, where = model, (*where, model_key)
    if flat_where is not None:
        numbers = flat_vector(value_at(entries[str(flat_where[0])], flat_where))
        if numbers is None:
            raise ConversionError(
                f"{format_path(flat_where)} is no flat parameter vector (a Vector of floats, as "
                "Flux.destructure gives)",
                path=flat_where,
            )
        era = flux or structs_era(value) or "0.14"  # (a whole model's era, as below)
        try:
            layer, model_state = from_whole_model(value, path=where, flux=era)
        except ConversionError as err:  # a closure, a struct of one's own: the text gives the layers
            raise ConversionError(
                f"{err.message}. With a flat vector, give the layers as text and the vector as the name: "
                f"tx.from_flux(path, {flat!r}, architecture='Chain(…)')",
                path=err.path,
            ) from None
        # (re(p) keeps what p does not hold: BatchNorm's running statistics, from re's model)
        layer, state, era = _from_flat(layer, numbers, era, flat_where)
        return layer, keep_statistics(state, model_state), era
    numbers = flat_vector(value)
    if architecture is not None and numbers is not None:
        layer, state, era = _from_flat(parse_architecture(architecture), numbers, flux, where)
        _warn_untrained_statistics(layer, state, where)
        return layer, state, era
    if isinstance(value, np.ndarray) and numbers is None:  # no Flux.state, and no flat vector: say why
        raise ConversionError(
            f"{shown} is an array of {value.dtype.name} {value.shape}, not a model's state; a flat "
            "parameter vector (Flux.destructure's) is one-dimensional, of floats",
            path=where,
        )
    refuse_gpu_parameters(value, where)  # (a parameter list from the GPU: addresses, no numbers)
    if architecture is None and isinstance(value, JuliaStruct) and params_list(value) is not None:
        raise ConversionError(
            f"{shown} is a parameter list ({value.type.basename}: the arrays of Flux.params, no layer "
            "types): pass architecture= with the model as Flux prints it",
            path=where,
        )
    if architecture is None:
        if numbers is not None:
            raise ConversionError(
                f"{shown} is a flat vector of {numbers.size} numbers (Flux.destructure's p?): pass "
                "architecture= with the model as Flux prints it, or the whole model (or the "
                "Restructure re) it belongs to as the name and this vector as flat=",
                path=where,
            )
        if not isinstance(value, JuliaStruct):
            inside = nested_models(value, where)
            if inside:  # a checkpoint (model=..., opt=...), an agent's list of networks
                at = ", ".join(map(format_path, inside[:3]))
                more = f" and {len(inside) - 3} more" if len(inside) > 3 else ""
                raise ConversionError(
                    f"{shown} is no model but holds Flux models, at {at}{more}: pass the path of the one "
                    f"you want as the name, tx.from_flux(path, {inside[0]!r})",
                    path=where,
                )
            chains = _chain_states(value, where)
            chains = [] if chains == [where] else chains  # (the value itself: only a text can help)
            others = [] if chains else nested_models(value, where, structs=True)
            if others and params_list(value) is None:  # structs, none of them Flux's: no Flux.state
                first = others[0]
                kinds = sorted({str(t) for _, t in others})
                raise ConversionError(
                    f"{shown} holds no Flux layers but structs of other types ({', '.join(kinds[:3])}"
                    f"{', …' if len(kinds) > 3 else ''}; the first at {format_path(first[0])}): a model "
                    "of another library or of your own, whose forward pass treexchange cannot know",
                    path=where,
                )
            what = (
                "is a list of arrays (a parameter list, cpu.(params(model)), names no layer)"
                if params_list(value) is not None
                else "holds no Flux structs (a Flux.state has no layer types)"
            )
            at = ", ".join(map(format_path, chains[:3]))
            hint = (
                f"; it holds the state of a Chain at {at} (the Flux.state of a struct of your own, or "
                f"a checkpoint?): pass that path as the name, tx.from_flux(path, {chains[0]!r}, "
                "architecture=…)"
                if chains
                else ""
            )
            raise ConversionError(
                f"{shown} {what}: pass architecture= with the model as Flux prints it{hint}", path=where
            )
        # (the era flux= names, else the one the structs show, else Flux 0.14's: most whole-model
        # files in the wild come from Flux ≤ 0.14, and a Flux 0.15 one without a recurrent layer
        # reads the same under both but for the pools' states)
        era = flux or structs_era(value) or "0.14"
        return (*from_whole_model(value, path=where, flux=era), era)
    layer = parse_architecture(architecture)
    plain_state = params_list(value) is None and not isinstance(value, JuliaStruct)
    given = flux if flux is not None or plain_state else DEFAULT_FLUX_ERA
    state = state_for_architecture(layer, value, given or DEFAULT_FLUX_ERA, path=where)
    check_state(layer, state, path=where)
    if params_list(value) is not None:
        _warn_untrained_statistics(layer, state, where)
    return layer, state, given or state_era(layer, state, path=where) or DEFAULT_FLUX_ERA


def restructure_model(value: Any) -> tuple[str, Any, Any] | None:
    """``(field name, model, length)`` of an ``Optimisers.Restructure`` (``Flux.destructure``'s
    ``re``: fields ``model, offsets, length``; BSON.jl names them ``"1"``, ``"2"``, ``"3"``), else None.
    """
    if not (isinstance(value, JuliaStruct) and value.type.name == "Optimisers.Restructure" and value.fields):
        return None
    keys = list(value.fields)
    model_key = "model" if "model" in value.fields else keys[0]
    length = value.fields.get("length", value.fields[keys[2]] if len(keys) > 2 else None)
    return model_key, value.fields[model_key], length


def _vectors_of(path: str | os.PathLike[str], length: Any) -> list[str]:
    """The names of the top-level vectors of floats of ``length`` numbers (headers only, no data)."""
    if not isinstance(length, (int, np.integer)):
        return []
    with open_file(path) as f:
        return [
            str(k)
            for k in f
            if getattr(node := f[k], "kind", None) == "array"
            and node.shape == (int(length),)
            and np.dtype(node.dtype).kind in "fc"
        ]


def _from_flat(
    layer: Layer, numbers: np.ndarray, flux: str | None, where: TreePath
) -> tuple[Layer, Any, str]:
    """``(layer, Flux.state, era)`` of the model ``layer`` from its flat parameter vector: the era
    given, else the one the vector's length shows (recurrent initial states: Flux ≤ 0.14)."""
    arrays, initial_states = params_from_flat(layer, numbers, path=where, era=flux)
    if initial_states and flux is not None and flux != "0.14":
        # (Flux ≥ 0.15 has no initial state: the port would start from zeros, not the trained one)
        raise ConversionError(
            f"the vector holds the recurrent layers' initial states (its length is the parameter count "
            f"with them: Flux ≤ 0.14's trainable state0), which Flux {flux}'s layers have not: leave "
            "flux= out, or pass flux='0.14'",
            path=where,
        )
    era = flux or ("0.14" if initial_states else DEFAULT_FLUX_ERA)
    state = state_from_params(layer, arrays, era, path=where, initial_states=initial_states)
    check_state(layer, state, path=where)
    return layer, state, era


@overload
def nested_models(
    value: Any, path: TreePath, limit: int = ..., *, structs: Literal[False] = ...
) -> list[TreePath]: ...


@overload
def nested_models(
    value: Any, path: TreePath, limit: int = ..., *, structs: Literal[True]
) -> list[tuple[TreePath, Any]]: ...


def nested_models(value: Any, path: TreePath, limit: int = 100_000, *, structs: bool = False) -> Any:
    """The paths of the Flux layer structs (outermost ones) inside a value that is not one, in
    order; at most ``limit`` values are visited. ``structs=True``: ``(path, type)`` of the
    outermost structs of any other type instead (what a value holding no Flux layer holds).

    Example:
        >>> from treexchange._values import NamedTuple
        >>> ckpt = NamedTuple(epoch=3, model=JuliaStruct("Flux.Chain", {"layers": ()}))
        >>> nested_models(ckpt, ("ckpt",))
        [('ckpt', 'model')]
        >>> nested_models([JuliaStruct("Main.Linear", {"w": 1.0})], ("results",), structs=True)
        [(('results', 1), JuliaType('Main.Linear'))]
    """
    if structs:
        return [(at, v.type) for at, v in outermost(value, path, limit, _is_other_struct)]
    return [at for at, _ in outermost(value, path, limit, _is_flux_layer)]


def _chain_states(value: Any, path: TreePath) -> list[TreePath]:
    """The paths of the outermost NamedTuples with a ``layers`` field (a Chain's ``Flux.state``)
    in ``value``: where the layers are in the state of a struct of one's own (``(l = (layers =
    …,),)``)."""

    def is_chain_state(v: Any) -> bool:
        return isinstance(v, NamedTuple) and "layers" in v

    def is_optimiser_state(v: Any) -> bool:  # (Flux.setup's tree has the model's shape: not a model)
        return bool(outermost(v, (), 100_000, lambda x: isinstance(x, JuliaStruct) and is_optimiser(x.type)))

    return [at for at, v in outermost(value, path, 100_000, is_chain_state) if not is_optimiser_state(v)]


def _is_flux_layer(v: Any) -> bool:
    return isinstance(v, JuliaStruct) and v.type.name.startswith("Flux.") and not is_optimiser(v.type)


def _is_other_struct(v: Any) -> bool:  # (an optimiser's state beside a model is no model of its own)
    return isinstance(v, JuliaStruct) and not v.type.name.startswith("Flux.") and not is_optimiser(v.type)


def entry_path(name: str | Sequence[PathSegment]) -> TreePath:
    """The tree path ``name`` stands for: an entry's name, or a path into an entry as errors
    print it, a tuple beginning with the entry's name (``("agents", 1, "policy")``: field or key
    names, and 1-based positions in a Tuple or Vector)."""
    if isinstance(name, str):
        return (name,)
    where = tuple(name) if isinstance(name, (tuple, list)) else ()
    if not where or not isinstance(where[0], str):
        raise TypeError(f"name must be an entry's name or a tuple path beginning with one, not {name!r}")
    return where


def read_entries(path: str | os.PathLike[str], wheres: Sequence[TreePath]) -> dict[str, Any]:
    """The entries the tree paths ``wheres`` (:func:`entry_path`'s form) begin with, by name, each
    read and checked against the file's embedded schema once (a Lux checkpoint's ``ps`` and ``st``
    are two paths into one entry)."""
    entries: dict[str, Any] = {}
    with open_file(path) as f:
        for where in wheres:
            entry = str(where[0])  # (entry_path: always a str)
            if entry in entries:
                continue
            entries[entry] = read_entry(f, entry)
            if has_embedded_schema(f):
                from treexchange._schema import check_loaded  # pydantic: only for a file with a schema

                check_loaded(f, entries[entry], name=entry)
    return entries


def value_at(value: Any, where: TreePath) -> Any:
    """The value at ``where[1:]`` inside ``value`` (the entry ``where[0]``): a struct's field, a
    NamedTuple's or Dict's key, a 1-based position in a Tuple or Vector (as paths print them).

    Raises:
        ConversionError: a step that leads nowhere, at the part of the path that exists, naming
            what is there.
    """
    for depth, seg in enumerate(where[1:], 1):
        if is_component_array(value):  # its components by name (ComponentArrays keeps them in the type)
            value = component_tree(value, path=where[:depth])
        if isinstance(value, JuliaStruct):
            if isinstance(seg, int) and not isinstance(seg, bool) and str(seg) in value.fields:
                seg = str(seg)  # BSON.jl keeps no field names: fields "1", "2", … are positions
            found = value.fields.get(seg, _MISSING) if isinstance(seg, str) else _MISSING
            held = f"fields {list(value.fields)}"
        elif isinstance(value, Mapping):
            try:
                found = value[seg] if seg in value else _MISSING
            except TypeError:  # (a key Python cannot hash is in no Dict)
                found = _MISSING
            held = f"keys {list(value)[:20]}"
        elif isinstance(value, (tuple, list, JuliaArray)):  # (a JuliaArray: a Vector of Vectors, …)
            ok = isinstance(seg, int) and not isinstance(seg, bool) and 1 <= seg <= len(value)
            found = value[seg - 1] if isinstance(seg, int) and ok else _MISSING
            held = f"{len(value)} element{'s' if len(value) != 1 else ''} (positions count from 1)"
        else:
            found, held = _MISSING, f"no entries (a {type(value).__name__})"
        if found is _MISSING:
            raise ConversionError(
                f"{format_path(where[:depth])} has no {seg!r}: it holds {held}", path=where[:depth]
            )
        value = found
    return value


_MISSING = object()


def _field(state: Any, key: str) -> Any:
    if isinstance(state, JuliaStruct):
        return state.fields.get(key)
    if isinstance(state, Mapping):
        return state.get(key)
    return None


def _shape(value: Any) -> tuple[int, ...] | None:
    return tuple(int(v) for v in value.shape) if isinstance(value, np.ndarray) else None


def _fmt(shape: Sequence[int]) -> str:
    return "×".join(map(str, shape)) if len(shape) != 1 else f"{shape[0]}-element"


def _expect(
    state: Any, key: str, shape: tuple[int, ...], path: TreePath, layer: Layer, *, optional: bool = False
) -> None:
    value = _field(state, key)
    got = _shape(value)
    if got is None:
        if optional or value is False or value is None:
            return
        raise ConversionError(
            f"{layer.kind} expects an array {key!r} of size {_fmt(shape)}", path=(*path, key)
        )
    if got != shape:
        raise ConversionError(
            f"the architecture's {layer.kind} implies {key} of size {_fmt(shape)}, the state has {_fmt(got)}",
            path=(*path, key),
        )


def _children_states(layer: Layer, state: Any, path: TreePath) -> list[tuple[Any, TreePath]]:
    inner = _field(state, "layers")
    base = (*path, "layers")
    n = len(layer.children)
    if isinstance(inner, Mapping) and not isinstance(inner, JuliaStruct):
        if layer.names is not None and list(inner) != list(layer.names):
            raise ConversionError(
                f"the architecture names the layers {list(layer.names)}, the state {list(inner)}", path=base
            )
        if layer.names is None:
            raise ConversionError(
                f"the state names its layers {list(inner)}, the architecture's are positional", path=base
            )
        items = list(inner.values())
        paths = [(*base, k) for k in inner]
    elif isinstance(inner, (tuple, list)):
        if layer.names is not None:
            raise ConversionError(
                f"the architecture names its layers {list(layer.names)}, the state's layers are positional",
                path=base,
            )
        items = list(inner)
        paths = [(*base, i + 1) for i in range(len(items))]
    else:
        held = list(state) if isinstance(state, Mapping) and not isinstance(state, JuliaStruct) else []
        if held and "layers" not in held:
            # Flux.state of a struct of one's own (Flux.@layer) around the model: a NamedTuple of
            # its fields, one of which holds the model's state
            wrapped = [k for k in held if isinstance(state[k], Mapping) and "layers" in state[k]]
            hint = (
                f" ({', '.join(map(repr, wrapped))} holds a state with `layers`: the state of a struct of "
                f"your own around the model? pass its path as the name, {(*path, wrapped[0])!r})"
                if wrapped
                else ""
            )
            raise ConversionError(
                f"{layer.kind} expects a `layers` entry with {n} layers; the state holds {held}{hint}",
                path=tuple(path),
            )
        raise ConversionError(f"{layer.kind} expects a `layers` entry with {n} layers", path=base)
    if len(items) != n:
        raise ConversionError(
            f"the architecture's {layer.kind} has {n} layers, the state {len(items)}", path=base
        )
    return list(zip(items, paths, strict=True))


def check_state(layer: Layer, state: Any, *, path: Sequence[PathSegment] = ()) -> None:
    """Raise ConversionError (with the state's tree path) where ``state`` cannot belong to ``layer``.

    Checks the container structure and every array size the Layer's hyper-parameters imply.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> dense = Layer("Dense", {"in": 3, "out": 2, "σ": "relu", "bias": True})
        >>> check_state(dense, NamedTuple(weight=np.zeros((2, 3)), bias=np.zeros(2), σ=()))
        >>> try:
        ...     check_state(dense, NamedTuple(weight=np.zeros((3, 2)), bias=np.zeros(2), σ=()), path=("m",))
        ... except ConversionError as err:
        ...     print(err)
        the architecture's Dense implies weight of size 2×3, the state has 3×2 (at m.weight)
    """
    for leaf, sub, at in _layer_states(layer, state, tuple(path)):
        _check_layer(leaf, sub, at)


def _layer_states(layer: Layer, state: Any, path: TreePath) -> Iterator[tuple[Layer, Any, TreePath]]:
    """Each layer of ``layer`` that is no container, with its part of ``state`` and that part's
    path (a container's state is checked on the way: its `layers`, their number and names)."""
    if layer.kind in ("Chain", "Parallel", "PairwiseFusion", "Maxout"):
        for child, (sub, sub_path) in zip(layer.children, _children_states(layer, state, path), strict=True):
            yield from _layer_states(child, sub, sub_path)
    elif layer.kind == "SkipConnection":
        yield from _layer_states(layer.children[0], _field(state, "layers"), (*path, "layers"))
    else:
        yield layer, state, path


def _check_layer(layer: Layer, state: Any, p: TreePath) -> None:
    kind = layer.kind
    record = KINDS.get(kind)
    if record is None:
        return  # the builders name an unknown kind
    old_dense = _field(state, "weight") is None  # a Dense of old Flux: W and b
    for spec in record.shapes(layer):
        where = _at(state, spec.where)
        key = spec.key
        if spec.alias is not None:
            if not spec.where and old_dense:
                key = spec.alias
            elif spec.where and _field(where, key) is None:  # Diagonal's α/β inside an old LayerNorm
                key = spec.alias
        shape = spec.shape
        if wrapped_kind(kind) == "GRUv3" and key == "Wh" and _field(state, "state") is None:
            shape = (3 * shape[1], shape[1])  # Flux ≥ 0.15 (no Recur): 3H rows, the last H unused
        _expect(where, key, shape, (*p, *spec.where), layer, optional=spec.optional)


def untrained_statistics(layer: Layer, state: Any, path: TreePath) -> list[tuple[TreePath, str]]:
    """``(path, kind)`` of the layers of ``layer`` whose ``state`` (made from a parameter list or
    a flat vector) holds running statistics: Flux's initial ones (μ = 0, σ² = 1), since ``Flux.params``
    and ``Flux.destructure`` hold only the trainable arrays, never the statistics learnt in training.

    Example:
        >>> from treexchange._port._arch import parse_architecture
        >>> arch = parse_architecture("Chain(Dense(3 => 4), BatchNorm(4, relu))")
        >>> state = state_from_params(arch, [np.ones((4, 3)), np.zeros(4), np.zeros(4), np.ones(4)], "0.15")
        >>> untrained_statistics(arch, state, ("params",))
        [(('params', 'layers', 2), 'BatchNorm')]
    """
    return [
        (at, leaf.kind)
        for leaf, sub, at in _layer_states(layer, state, path)
        if isinstance(_field(sub, "μ"), np.ndarray)
    ]


def untrained_statistics_note(layers: Sequence[tuple[TreePath, str]]) -> str:
    """What :func:`untrained_statistics` found, said for a warning or a note: the layers (the first
    five, and how many more) and why the port computes another function than the trained model."""
    kinds = "/".join(sorted({kind for _, kind in layers}))
    shown = ", ".join(format_path(at) for at, _ in layers[:5])
    more = f" and {len(layers) - 5} more" if len(layers) > 5 else ""
    plural, verb = ("s", "start") if len(layers) > 1 else ("", "starts")
    return (
        f"{len(layers)} {kinds} layer{plural} ({shown}{more}) {verb} from Flux's initial running "
        "statistics (μ = 0, σ² = 1): a parameter list or flat vector holds only the trainable arrays, "
        "not the statistics learnt in training, so in test mode the model computes another function "
        "than the trained one; the whole model or its Flux.state holds them"
    )


def _warn_untrained_statistics(layer: Layer, state: Any, where: TreePath) -> None:
    """Warn (for ``from_flux``: its caller's line) when the port from a parameter list or a flat
    vector holds BatchNorm layers, whose running statistics the file did not give."""
    layers = untrained_statistics(layer, state, where)
    if layers:
        warnings.warn(f"from_flux: {untrained_statistics_note(layers)}", UserWarning, stacklevel=4)


_POOLS = frozenset({"MaxPool", "MeanPool", "AdaptiveMaxPool", "AdaptiveMeanPool"})


def state_era(layer: Layer, state: Any, *, path: TreePath = ()) -> str | None:
    """The Flux era (``"0.14"`` or ``"0.15"``) whose ``Flux.state`` form ``state`` has, from its own
    field names; None when nothing in it differs between the eras (Dense, Conv, norms …).

    Flux ≤ 0.14 (Functors 0.4) keeps a ``Recur``'s ``state`` and its cell's ``state0`` and writes
    a pool as ``()``; Flux ≥ 0.15 has no ``Recur`` (``(cell = …,)``) and writes a pool's fields.
    ``state`` has passed :func:`check_state`.

    Raises:
        ConversionError: the state holds both forms (naming one entry of each).

    Example:
        >>> from treexchange import NamedTuple
        >>> net = Layer("Chain", children=(Layer("MaxPool", {"k": (2, 2)}),))
        >>> old, new = NamedTuple(layers=((),)), NamedTuple(layers=(NamedTuple(k=(2, 2)),))
        >>> state_era(net, old), state_era(net, new)
        ('0.14', '0.15')
    """
    found: dict[str, TreePath] = {}
    _collect_eras(layer, state, tuple(path), found)
    if len(found) > 1:
        raise ConversionError(
            f"the state mixes Flux eras: {format_path(found['0.14'])} has Flux ≤ 0.14's form, "
            f"{format_path(found['0.15'])} Flux ≥ 0.15's (pass flux= to say which applies)",
            path=path,
        )
    return next(iter(found), None)


def _collect_eras(layer: Layer, state: Any, path: TreePath, found: dict[str, TreePath]) -> None:
    """Record in ``found`` the first entry (its path) showing each era's form."""
    if layer.kind in RECURRENT_GATES:
        recur = _field(state, "state") is not None or _field(_field(state, "cell"), "state0") is not None
        found.setdefault("0.14" if recur else "0.15", path)
    elif layer.kind in CELLS:  # (a bare cell holding state0 is Flux ≤ 0.14's, which is refused)
        found.setdefault("0.14" if _field(state, "state0") is not None else "0.15", path)
    elif layer.kind in _POOLS:
        found.setdefault("0.14" if state == () else "0.15", path)
    elif layer.kind == "SkipConnection":
        _collect_eras(layer.children[0], _field(state, "layers"), (*path, "layers"), found)
    elif layer.children:
        for child, (sub, sub_path) in zip(layer.children, _children_states(layer, state, path), strict=True):
            _collect_eras(child, sub, sub_path, found)


def with_learnt_initial_states(layer: Layer, state: Any) -> Layer:
    """``layer`` with ``args["state0"]`` on each recurrent layer whose state holds a non-zero learnt
    initial state (a Flux ≤ 0.14 ``Recur``'s ``cell.state0``; Flux ≤ 0.11 drew it at random): the
    built module then holds it and starts from it, as the ``Recur`` did after ``Flux.reset!``.
    ``state`` has passed :func:`check_state`."""
    if layer.kind in RECURRENT_GATES:
        state0 = _field(_field(state, "cell"), "state0")
        arrays = state0 if isinstance(state0, tuple) else (state0,)
        if any(isinstance(a, np.ndarray) and bool(np.any(a != 0)) for a in arrays):
            return dataclasses.replace(layer, args={**layer.args, "state0": True})
        return layer
    if layer.kind == "SkipConnection":
        states = [_field(state, "layers")]
    elif layer.children:
        states = [sub for sub, _ in _children_states(layer, state, ())]
    else:
        return layer
    children = tuple(with_learnt_initial_states(c, s) for c, s in zip(layer.children, states, strict=True))
    return dataclasses.replace(layer, children=children)


def _at(state: Any, where: Sequence[str]) -> Any:
    for key in where:
        state = _field(state, key)
    return state


def from_flux(
    path: str | os.PathLike[str],
    name: str | Sequence[PathSegment],
    architecture: str | None = None,
    *,
    target: str = "equinox",
    flux: str | None = None,
    flat: str | Sequence[PathSegment] | None = None,
    key: Any = None,
) -> Any:
    """A runnable Equinox (or Flax nnx, or Flax linen) model from a Flux file, with no template.

    Without ``architecture``, ``name`` must hold a whole Flux model (``jldsave(path; model)``): the
    structs' types record every layer and activation. With ``architecture`` (the model as Flux
    prints it, ``"Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), …)"``), ``name`` holds its
    ``Flux.state``. The text is parsed, never evaluated, and checked against the state's sizes.

    The Equinox model takes ONE sample, channels first (``x_py = rev(x_jl)`` without the batch
    axis, docs/porting.md §Data layout; ``jax.vmap`` it for a batch). A model with BatchNorm is returned as
    ``(model, state)`` (an ``eqx.nn.State`` holding the running statistics), called ``model(x, state)``.

    Old Flux models saved with BSON.jl (Flux 0.7 to 0.16; Tracker parameters, every era's layer
    structs) port the same way; a parameter list (``params=cpu.(params(model))``, the arrays of
    ``Flux.params`` in order) takes ``architecture=``, and so does a whole model holding a closure,
    whose Chain entry the text then names (docs/porting.md, "Old Flux versions").

    A flat parameter vector (``p`` of ``p, re = Flux.destructure(model)``, the trainable arrays
    column-major one after the other in ``Flux.params`` order) ports with ``architecture=``, or as
    ``flat=`` with a whole model or the ``Optimisers.Restructure`` ``re`` as ``name`` giving the layers.

    Args:
        path: the JLD2 or BSON.jl file.
        name: the entry in it, or a path into an entry as errors print it: a tuple beginning
            with the entry's name, then field or key names and 1-based positions (a model in a
            checkpoint, ``("checkpoint", "model")``; an agent's network, ``("agents", 2, "q")``;
            a vector in a ``Vector{Vector}``, ``("params", 3)``; a BSON struct's field by its
            position, ``("res", 1)``; a ``ComponentArray``'s component by name).
        architecture: the Flux model text for a ``Flux.state`` file or a parameter list (or a
            whole model whose closures it names).
        target: ``"equinox"``, ``"nnx"`` (Flax nnx, on a channels-last batch) or ``"linen"``
            (Flax linen: the pair ``(module, variables)``, called ``module.apply(variables, x)``
            on a channels-last batch).
        flux: the Flux era whose semantics apply (``"0.14"`` or ``"0.15"``). By default, a
            ``Flux.state`` read with ``architecture`` is of the era its own field names show (a
            ``Recur``'s ``state``/``state0`` and pools stored as ``()`` are Flux ≤ 0.14's; ``(cell
            = …,)`` and pools with their fields Flux ≥ 0.15's), the current release when nothing
            in it differs between the eras (LayerNorm's ϵ then follows Flux ≥ 0.15: pass
            ``flux="0.14"`` for an older LayerNorm); a whole-model file is of the era its
            structs show (a recurrent layer holding its cell is Flux ≥ 0.15's, a ``Recur`` Flux
            ≤ 0.14's), else Flux 0.14's (most whole-model files come from Flux ≤ 0.14).
        flat: the entry (or path) holding a flat parameter vector whose numbers fill the model
            ``name`` holds (a whole model, or ``re``: an ``Optimisers.Restructure`` keeps the model
            as it was when destructured, the trained numbers are ``p``'s; its non-trainable arrays,
            BatchNorm's running statistics, are kept as ``re(p)`` keeps them). Its length must be
            the model's parameter count (with the recurrent initial states, for Flux ≤ 0.14).
        key: a ``jax.random`` key for the (immediately overwritten) initial weights.

    Raises:
        ConversionError: an unknown layer or function, an anonymous function, or a text that does
            not match the state (named with its position or file path).
        UnsupportedError: a layer the target has no builder for.

    Example:
        >>> import os, tempfile, jax, equinox as eqx
        >>> import treexchange as tx
        >>> k1, k2 = jax.random.split(jax.random.key(0))
        >>> layers = [eqx.nn.Linear(3, 4, key=k1), eqx.nn.Lambda(jax.nn.relu), eqx.nn.Linear(4, 2, key=k2)]
        >>> mlp = eqx.nn.Sequential(layers)
        >>> path = os.path.join(tempfile.mkdtemp(), "mlp.jld2")
        >>> tx.save(path, model_state=tx.flux_state(mlp))
        >>> text = "Chain(Dense(3 => 4, relu), Dense(4 => 2))"
        >>> model = tx.from_flux(path, "model_state", architecture=text)
        >>> x = jax.numpy.ones(3)
        >>> bool(jax.numpy.allclose(model(x), mlp(x)))
        True
    """
    era_given = None if flux is None else check_era(flux)
    layer, state, era = read_source(path, name, architecture, flux=era_given, flat=flat)
    layer = with_learnt_initial_states(layer, state)

    def fill(model: Any) -> Any:
        # (cast="round": the built model's dtypes rule. Float64 (Flux ≤ 0.9 often) rounds to JAX's
        # default Float32; under jax_enable_x64 Equinox builds Float64 layers, which a Float32 file
        # widens into, and Flax Float32 ones, which Float64 rounds to)
        return load_state(model, state, path=entry_path(name), flux=era, cast="round")

    return build_target(layer, fill, target=target, era=era, key=key)


def _refuse_empty_layers(layer: Layer) -> None:
    """A layer with a parameter array of size 0 (``Dense(0 => 4)``, a convolution over 0 channels
    or with a 0-size kernel) is a valid Flux struct, but the JAX libraries cannot build one: their
    initialisers divide by the fan-in or fan-out (a ZeroDivisionError, in some targets only).
    Refused by name for every target instead."""
    try:
        subs = list(with_defaults(layer).walk())
    except (KeyError, TypeError, ValueError):  # (a layer whose arguments the build checks itself)
        return
    for sub in subs:
        try:
            slots = param_slots(sub)
        except (KeyError, TypeError, ValueError):
            continue
        for key, shape, _ in slots:
            if shape is not None and 0 in shape:
                raise UnsupportedError(
                    f"{sub.kind}'s {key} would be {'×'.join(map(str, shape))}, of size 0: the JAX libraries "
                    "cannot build a layer with an empty parameter (their initialisers divide by its size)"
                )


def _refuse_nested_cells(layer: Layer) -> None:
    """A bare recurrent cell ports alone (one step, the state passed by the caller); inside a
    container Flux calls it ``cell(x)``, from zeros at every call, and Flux 0.16's returns the pair
    ``(y, state)`` to the next layer: the ported cells take the state as an argument, so that model
    is refused by name (its cell ports by its own path)."""
    for sub in layer.children:
        for inner in sub.walk():
            if inner.kind in CELLS:
                raise UnsupportedError(
                    f"a bare {inner.kind} inside a {layer.kind}: Flux calls it cell(x) there, from a zero "
                    f"state at every call (Flux 0.16's returns (y, state) to the next layer); the ported "
                    f"cell takes the state as an argument. Port the cell by its own path, or use "
                    f"{CELLS[inner.kind]}(in => out), which scans it over a sequence"
                )


def build_target(layer: Layer, fill: Callable[[Any], Any], *, target: str, era: str, key: Any = None) -> Any:
    """The ``target`` model of the Layer tree ``layer``, its arrays put in by ``fill`` (a restore:
    ``fill(model) -> model``, given ``(model, eqx.nn.State)`` for an Equinox model with BatchNorm).

    The model is built by shape only where the target allows it (no initial weights drawn, which
    costs seconds of XLA compilation per layer), then filled; a leaf the fill leaves unset (an RNG
    key) makes it build real initial weights instead. ``from_flux`` and ``from_lux`` share it.
    """
    _refuse_empty_layers(layer)
    _refuse_nested_cells(layer)
    if target == "equinox":
        # jax and equinox (also via _eqx) are costly to import: loaded on first use
        import equinox as eqx
        import jax

        from treexchange._port._eqx import build_equinox

        key = jax.random.key(0) if key is None else key
        stateful = any(sub.kind == "BatchNorm" for sub in layer.walk())  # running statistics: a State
        try:
            return _restore_abstract(layer, fill, key, era, stateful)
        except _NotConcrete:  # a leaf the restore does not fill: build real initial weights instead
            model = build_equinox(layer, key=key, flux=era)
            if stateful:
                return fill((model, eqx.nn.State(model)))
            return fill(model)
    if target == "nnx":
        try:
            # flax is optional
            from treexchange._port._nnx import build_nnx  # type: ignore[import-not-found, unused-ignore]
        except ImportError as err:
            raise UnsupportedError("target='nnx' is not available in this version") from err
        from flax import nnx  # flax is optional

        def build() -> Any:
            return build_nnx(layer, rngs=nnx.Rngs(0 if key is None else key), flux=era)

        try:  # by shape only, as for Equinox; RNG keys (Dropout) are not restored: then for real
            model = fill(nnx.eval_shape(build))
            _require_concrete(nnx.state(model))
            return model
        except _NotConcrete:
            return fill(build())
    if target == "linen":
        from treexchange._port._linen import build_linen  # _linen is for flax, which is optional

        # Shapes only, no weights drawn: the restore fills every array (linen keeps no RNG state).
        return fill(build_linen(layer, flux=era))
    raise ValueError(f"target must be 'equinox', 'nnx' or 'linen', not {target!r}")


class _NotConcrete(Exception):
    """The restored model still holds a shape-only leaf."""


def _restore_abstract(layer: Layer, fill: Callable[[Any], Any], key: Any, era: str, stateful: bool) -> Any:
    """Build the Equinox model by shape only (no weight initialisation: milliseconds instead of
    seconds of XLA compilation per layer) and let the restore fill every array.

    BatchNorm's ``StateIndex.init`` (the values a fresh ``eqx.nn.State`` starts from) has no Flux
    counterpart; it is set to the restored running statistics, so ``eqx.nn.State(model)`` of the
    result starts from the file's statistics too.
    """
    # jax and equinox (also via _eqx) are costly to import: loaded on first use
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    from treexchange._port._eqx import build_equinox

    abstract = eqx.filter_eval_shape(lambda: build_equinox(layer, key=key, flux=era))
    if not stateful:
        model = fill(abstract)
        _require_concrete(model)
        return model

    def is_index(x: Any) -> bool:
        return isinstance(x, eqx.nn.StateIndex)

    def indices(m: Any) -> list[Any]:
        return [leaf for leaf in jax.tree_util.tree_leaves(m, is_leaf=is_index) if is_index(leaf)]

    def inits(m: Any) -> list[Any]:
        return [index.init for index in indices(m)]

    def zeros(tree: Any) -> Any:
        return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), tree)

    model = eqx.tree_at(inits, abstract, [zeros(init) for init in inits(abstract)])
    model, eqx_state = fill((model, eqx.nn.State(model)))
    model = eqx.tree_at(inits, model, [eqx_state.get(index) for index in indices(model)])
    _require_concrete(model)
    return model, eqx_state


def _require_concrete(model: Any) -> None:
    import jax  # jax is costly to import: loaded on first use

    if any(isinstance(leaf, jax.ShapeDtypeStruct) for leaf in jax.tree_util.tree_leaves(model)):
        raise _NotConcrete

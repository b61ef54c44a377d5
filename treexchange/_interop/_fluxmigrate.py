"""``treexchange convert old.bson new.jld2 --flux-state``: old Flux models -> ``Flux.state`` in JLD2.

A BSON.jl file (or a whole-model JLD2 file) only loads in Julia with the package versions and type
definitions that wrote it. Its ``Flux.state``, in the field names and layout of a current Flux,
loads with ``Flux.loadmodel!(model, JLD2.load("new.jld2", "model"))`` into the same model built
with a current Flux. Each top-level entry becomes:

- a whole model (any value holding Flux layer structs, of any Flux era): its ``Flux.state`` in the
  era asked for (``_port._statefill.whole_model_state``), under the same name;
- a parameter list (``params=cpu.(params(model))``) with ``--architecture``: the state of that
  model (``state_from_params``), under the same name (without it: refused, as a Vector of
  arrays may as well be data; but a Vector or Tuple of arrays beside a whole model in another
  entry is data saved with it, ``BSON.@save "m.bson" model stats`` with ``stats = (mean, std)``,
  and is written as it is);
- a flat parameter vector (``p`` of ``p, re = Flux.destructure(model)``) with ``--architecture``,
  when its length is that model's parameter count: the state of that model, under the same name;
- ``re``, an ``Optimisers.Restructure``, when the file holds exactly one vector of as many numbers
  as ``re`` takes (its ``length``): the state of ``re(p)``, under ``re``'s name (``re``'s own
  model holds the parameters as they were when destructured, not the trained ones);
- anything else (``acc``, ``epoch_idx``, a vocabulary, an optimiser saved beside the model):
  written as it is.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any, TextIO

import numpy as np

from .._errors import ConversionError, TreePath, format_path
from .._port._arch import parse_architecture
from .._port._eras import era_field_names
from .._port._flux import _julia_string
from .._port._fromflux import check_state, restructure_model, untrained_statistics, untrained_statistics_note
from .._port._registry import julia_constructor
from .._port._spec import Layer
from .._port._state import check_era
from .._port._statefill import (
    flat_vector,
    keep_statistics,
    nonzero_initial_states,
    params_from_flat,
    params_list,
    refuse_gpu_parameters,
    state_for_architecture,
    state_from_params,
    whole_model_state,
)
from .._port._wholemodel import from_whole_model, is_optimiser
from .._reader import open as open_file, read_entry
from .._values import JuliaStruct, NamedTuple
from ._jld2io import save_jld2


def migrate_flux_state(
    source: str | os.PathLike[str],
    target: str | os.PathLike[str],
    *,
    flux: str = "0.15",
    architecture: str | None = None,
    dry_run: bool = False,
    out: TextIO | None = None,
) -> dict[str, Any]:
    """Write ``Flux.state`` of every model in ``source`` to the JLD2 file ``target`` (see the
    module docstring); ``dry_run`` prints the mapping (``new path <- old path  shape dtype``) and
    the Julia that loads the result, and writes nothing. Otherwise it writes ``target`` and prints a
    summary line, then the notes and the Julia of the dry run without the mapping (the lines a user
    needs to load the file). Returns the values written.

    Example:
        >>> import io, os, tempfile, numpy as np
        >>> import treexchange as tx
        >>> from treexchange import JuliaStruct
        >>> dense = JuliaStruct("Flux.Dense{NNlib.#relu,A,B}", {"W": np.ones((2, 3), np.float32),
        ...                                                     "b": np.zeros(2, np.float32)})
        >>> folder = tempfile.mkdtemp()
        >>> tx.save(os.path.join(folder, "old.jld2"), model=dense)
        >>> printed = io.StringIO()
        >>> roots = migrate_flux_state(
        ...     os.path.join(folder, "old.jld2"), os.path.join(folder, "new.jld2"), out=printed
        ... )
        >>> printed.getvalue().splitlines()[1]
        'model: in Julia:'
        >>> list(tx.load(os.path.join(folder, "new.jld2"), "model"))
        ['weight', 'bias', 'σ']
    """
    era = check_era(flux)
    printer = out if out is not None else sys.stdout
    roots: dict[str, Any] = {}
    with open_file(source) as f:
        names = list(f)
        values = {name: read_entry(f, name) for name in names}
    notes: list[str] = []
    # a list of arrays saved beside a whole model is that model's data, not a parameter list
    models = [name for name, value in values.items() if _is_whole_model(value)]
    for name, value in values.items():
        mapping: list[str]
        rebuilder = restructure_model(value)
        if architecture is None and models and _plain_array_list(value):
            roots[name], mapping, entry_notes = value, [], [_beside_models_note(name, models)]
        elif rebuilder is not None:
            roots[name], mapping, entry_notes = _migrate_restructure(
                name, value, rebuilder, values, era, os.fspath(target)
            )
        elif architecture is not None and flat_vector(value) is not None:
            roots[name], mapping, entry_notes = _migrate_flat(
                name, value, era, architecture, os.fspath(target)
            )
        else:
            roots[name], mapping, entry_notes = _migrate_entry(
                name, value, era, architecture, os.fspath(target)
            )
        if dry_run:
            for line in (*mapping, *entry_notes):
                print(line, file=printer)
        notes += entry_notes
    if not dry_run:
        save_jld2(target, roots)
        # without this the user would not see the Julia lines that load the file, nor what was left out
        print(
            f"{os.fspath(source)} -> {os.fspath(target)}: {len(roots)} value(s), Flux.state for Flux "
            f"{'>= 0.15' if era != '0.14' else '0.14'}, JLD2 0.2.0",
            file=printer,
        )
        for line in notes:
            print(line, file=printer)
    return roots


def _migrate_entry(
    name: str, value: Any, era: str, architecture: str | None, target: str
) -> tuple[Any, list[str], list[str]]:
    """The value written for ``name``, its mapping lines and its notes (Julia lines included)."""
    path: TreePath = (name,)
    sources = dict(_array_paths(value, path))
    refuse_gpu_parameters(value, path)
    if params_list(value) is not None:
        if architecture is None:
            what = (
                "a parameter list (the arrays of Flux.params)"
                if isinstance(value, JuliaStruct)  # a saved Params: nothing else
                else "a list of arrays (data, or a parameter list): if a parameter list, it"
            )
            raise ConversionError(
                f"{what} says nothing of its layers: pass --architecture with the model as Flux prints it",
                path=path,
            )
        layer = parse_architecture(architecture)
        try:
            state = state_for_architecture(layer, value, era, path=path)
            check_state(layer, state, path=path)
        except ConversionError:
            vectors = _vector_list(name, value, layer, era, target)
            if vectors is None:
                raise
            return vectors
        _note_untrained_statistics(layer, state, path)
        return (
            state,
            _mapping(state, path, sources),
            _julia(name, julia_constructor(layer, era), state, target),
        )
    if isinstance(value, JuliaStruct) and is_optimiser(value.type):
        return value, [], [f"{name}: written as it is (an optimiser, {value.type.name}: no model)"]
    if not _holds_flux_layer(value):
        return value, [], [f"{name}: written as it is (no Flux layers in it)"]
    state = whole_model_state(value, era, path=path)
    mapping = _mapping(state, path, sources)
    lines: list[str] = []
    if era != "0.14":  # Flux ≥ 0.15 has no learnt initial state: say what is left behind
        old = whole_model_state(value, "0.14", path=path)
        lines += [
            f"{format_path(where)}: a learnt initial state, not part of Flux >= 0.15's state "
            "(--flux 0.14 keeps it)"
            for where in nonzero_initial_states(old, path)
        ]
    if any(str(k).isdigit() for k in _keys(state)):
        lines.append(
            f"{name}: holds structs of your own, whose fields BSON stores by position: their states "
            "are named '1', '2', ...; rename them to the fields' names before Flux.loadmodel!"
        )
    if isinstance(value, dict):  # a checkpoint Dict("model" => model, "epoch" => 3): no one model
        keys = ", ".join(repr(k) for k in value if _holds_flux_layer(value[k]))
        lines.append(f"{name}: a Dict of states where the file has models ({keys}): load each into its model")
        return state, mapping, lines
    try:
        layer = from_whole_model(value, path=path, flux=era)[0]
    except ConversionError as err:  # a closure or a user's struct: the user writes the model
        fitted = None if architecture is None else _architecture_fitting(architecture, state, path)
        if isinstance(fitted, Layer):  # (--architecture names the closures: its model loads the state)
            lines += _julia(name, julia_constructor(fitted, era), state, target)
        else:
            lines.append(f"{name}: build the model in Julia yourself ({err})")
            if fitted is not None:
                lines.append(f"{name}: --architecture is not this model ({fitted})")
    else:
        lines += _julia(name, julia_constructor(layer, era), state, target)
    return state, mapping, lines


def _architecture_fitting(architecture: str, state: Any, path: TreePath) -> Layer | ConversionError:
    """The model of ``architecture`` when ``state`` (a whole model's, its closures ``()``) is that
    model's state, else the error saying where they differ."""
    layer = parse_architecture(architecture)
    try:
        check_state(layer, state, path=path)
    except ConversionError as err:
        return err
    return layer


def _migrate_flat(
    name: str, value: Any, era: str, architecture: str, target: str
) -> tuple[Any, list[str], list[str]]:
    """A flat vector with ``--architecture``: the model's state when the length is its parameter
    count, else the vector as it is (any Vector of floats may as well be data: a loss history)."""
    layer = parse_architecture(architecture)
    vector = flat_vector(value)
    try:
        state, notes = _state_from_flat(layer, vector, era, (name,))
    except ConversionError as err:
        return value, [], [f"{name}: written as it is (a vector, not this model's flat parameters: {err})"]
    _note_untrained_statistics(layer, state, (name,))
    return (
        state,
        _flat_mapping(state, (name,), name, vector),
        notes + _julia(name, julia_constructor(layer, era), state, target),
    )


def _vector_list(
    name: str, value: Any, layer: Layer, era: str, target: str
) -> tuple[Any, list[str], list[str]] | None:
    """A Vector of flat vectors that is no parameter list of ``layer`` (NeuralPDE's trained
    parameters of several networks, one vector each): each vector of the model's length becomes
    its state, the others are written as they are; None when none fits or it holds other arrays."""
    if not isinstance(value, (list, tuple)) or not all(flat_vector(v) is not None for v in value):
        return None
    items: list[Any] = []
    mapping: list[str] = []
    notes: list[str] = []
    fitted: list[int] = []
    for i, vector in enumerate(value, 1):
        vector = flat_vector(vector)
        try:
            state, state_notes = _state_from_flat(layer, vector, era, (name, i))
        except ConversionError as err:
            items.append(vector)
            why = f"not this model's flat parameters: {err.message}"
            notes.append(f"{format_path((name, i))}: written as it is ({why})")
            continue
        items.append(state)
        fitted.append(i)
        _note_untrained_statistics(layer, state, (name, i))
        mapping += _flat_mapping(state, (name, i), format_path((name, i)), vector)
        notes += state_notes
    if not fitted:
        return None
    lines = _julia(name, julia_constructor(layer, era), items[fitted[0] - 1], target)
    lines[-1] = f"{lines[-1][:-1]}[{fitted[0]}])"  # Flux.loadmodel!(m, JLD2.load(f, name)[i])
    if len(fitted) > 1:
        lines.append(
            f"  (and the same with [{'], ['.join(map(str, fitted[1:]))}] for the other vectors of it)"
        )
    notes += lines
    return (items if isinstance(value, list) else tuple(items)), mapping, notes


def _migrate_restructure(
    name: str, value: Any, rebuilder: tuple[str, Any, Any], values: dict[str, Any], era: str, target: str
) -> tuple[Any, list[str], list[str]]:
    """``re`` of ``p, re = Flux.destructure(model)``: the state of ``re(p)``, ``p`` being the one
    top-level vector of as many numbers as ``re`` takes (its ``length``)."""
    _, model, length = rebuilder
    found = [
        k
        for k, v in values.items()
        if (flat := flat_vector(v)) is not None
        and isinstance(length, int | np.integer)
        and flat.size == int(length)
    ]
    if len(found) != 1:
        which = (
            f"{len(found)} vectors of {length} numbers ({', '.join(found)})"
            if found
            else f"no vector of {length} numbers"
        )
        return (
            value,
            [],
            [
                f"{name}: written as it is (an Optimisers.Restructure, Flux.destructure's re: the file holds "
                f"{which}, so no one p to rebuild the model from)"
            ],
        )
    vector = flat_vector(values[found[0]])
    try:
        layer, model_state = from_whole_model(model, path=(name,), flux=era)
        state, notes = _state_from_flat(layer, vector, era, (found[0],), (name,))
        state = keep_statistics(state, model_state)  # (re(p) keeps the model's running statistics)
    except ConversionError as err:
        return (
            value,
            [],
            [f"{name}: written as it is (an Optimisers.Restructure whose model does not port: {err})"],
        )
    notes = [
        f"{name}: the state of {name}({found[0]}) (an Optimisers.Restructure, Flux.destructure's re)",
        *notes,
    ]
    mapping = _flat_mapping(state, (name,), found[0], vector)
    return state, mapping, notes + _julia(name, julia_constructor(layer, era), state, target)


def _state_from_flat(
    layer: Layer, flat: Any, era: str, path: TreePath, written: TreePath | None = None
) -> tuple[Any, list[str]]:
    """The state of ``layer`` from its flat vector (at ``path``), and the notes on what Flux ``era``
    leaves out, at the state's paths under ``written`` (the entry it is written as)."""
    arrays, initial_states = params_from_flat(layer, flat, path=path, era=era)  # (--flux breaks a tie)
    state = state_from_params(layer, arrays, era, path=path, initial_states=initial_states)
    check_state(layer, state, path=path)
    notes: list[str] = []
    if initial_states and era != "0.14":  # Flux ≥ 0.15 has no learnt initial state: say what is left behind
        old = state_from_params(layer, arrays, "0.14", path=path, initial_states=True)
        notes = [
            f"{format_path(where)}: a learnt initial state, not part of Flux >= 0.15's state "
            "(--flux 0.14 keeps it)"
            for where in nonzero_initial_states(old, written or path)
        ]
    return state, notes


def _note_untrained_statistics(layer: Layer, state: Any, path: TreePath) -> None:
    """On stderr: the BatchNorm layers of a state made from a parameter list or a flat vector,
    whose running statistics are Flux's initial ones (the file does not hold the trained ones), as
    ``from_flux`` warns of them; the Flux model loaded from it computes another function in test mode."""
    layers = untrained_statistics(layer, state, path)
    if layers:
        print(f"treexchange convert: note: {untrained_statistics_note(layers)}", file=sys.stderr)


def _flat_mapping(state: Any, path: TreePath, flat_name: str, flat: Any) -> list[str]:
    """``new path <- p[a:b]`` (Julia's 1-based range) for every array cut from the vector."""
    lines = []
    start = flat.__array_interface__["data"][0]
    for new_path, array in _arrays(state, path):
        where = "(Flux's default)"
        if np.shares_memory(array, flat):  # a view: the range of the vector it covers
            low = array.__array_interface__["data"][0]  # (numpy's byte_bounds moved in numpy 2)
            high = low + sum((n - 1) * step for n, step in zip(array.shape, array.strides, strict=True))
            first, last = (low - start) // flat.itemsize, (high - start) // flat.itemsize + 1
            where = f"{flat_name}[{first + 1}:{last}]"
            if last - first != array.size:  # (GRUv3's Wh for Flux 0.14: 2H of the 3H rows)
                where += " (some rows of it)"
        elif new_path[-1] == "Wh":  # (GRUv3's Wh for Flux ≥ 0.15: Flux ≤ 0.14's 2H rows, zeros after)
            where = f"{flat_name} (its rows, and zero rows Flux ≥ 0.15 allocates)"
        lines.append(f"{format_path(new_path)} <- {where}  {tuple(array.shape)} {array.dtype.name}")
    return lines


def _is_whole_model(value: Any) -> bool:
    """Flux layers, not an optimiser (whose type is Flux's too) nor a saved ``Params``."""
    if isinstance(value, JuliaStruct) and is_optimiser(value.type):
        return False
    return params_list(value) is None and _holds_flux_layer(value)


def _plain_array_list(value: Any) -> bool:
    """A Vector or Tuple of arrays (a saved ``Params`` struct is a parameter list, never data)."""
    return not isinstance(value, JuliaStruct) and params_list(value) is not None


def _beside_models_note(name: str, models: list[str]) -> str:
    shown = ", ".join(models[:3]) + (", ..." if len(models) > 3 else "")
    return (
        f"{name}: written as it is (a list of arrays beside the model in {shown}: data saved with it; "
        "if it is a parameter list, pass --architecture with its model)"
    )


def _keys(value: Any, depth: int = 0) -> Iterator[Any]:
    """Every NamedTuple key in a state (for the positional-names note)."""
    if depth > 64:
        return
    if isinstance(value, NamedTuple):
        for k, v in value.items():
            yield k
            yield from _keys(v, depth + 1)
    elif isinstance(value, (tuple, list)):
        for v in value:
            yield from _keys(v, depth + 1)
    elif isinstance(value, dict):  # (a checkpoint Dict's values; its own keys are the file's)
        for v in value.values():
            yield from _keys(v, depth + 1)


def _julia(name: str, constructor: str, state: Any, target: str) -> list[str]:
    floats = [a.dtype for _, a in _arrays(state, ()) if a.dtype.kind == "f"]
    suffix = {"float64": " |> f64", "float16": " |> f16"}.get(floats[0].name if floats else "", "")
    return [
        f"{name}: in Julia:",
        f"  {name} = {constructor}{suffix}",
        f"  Flux.loadmodel!({name}, JLD2.load({_julia_string(target)}, {_julia_string(name)}))",
    ]


def _holds_flux_layer(value: Any) -> bool:
    """Whether a Flux struct is inside ``value`` (each container visited once: shared values and
    cycles between a file's objects are not followed again)."""
    seen: set[int] = set()
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, JuliaStruct):
            if v.type.name.split(".", 1)[0] == "Flux":
                return True
            children: Any = v.fields.values()
        elif isinstance(v, (tuple, list)):
            children = v
        elif isinstance(v, (NamedTuple, dict)):  # (a checkpoint Dict("model" => model, ...) too)
            children = v.values()
        else:
            continue
        if id(v) not in seen:
            seen.add(id(v))
            todo.extend(children)
    return False


def _array_paths(value: Any, path: TreePath) -> Iterator[tuple[int, TreePath]]:
    """``(id(array), its path)`` for every array in a value as read (for the dry-run's mapping),
    each at its first path: a ``Params`` holds its arrays twice, in the model's order and again in
    its hash-ordered ``IdSet``, whose positions say nothing of the layers. A container already
    visited (shared, or a cycle: a file's objects may refer to each other) is not entered again."""
    seen: set[int] = set()
    todo: list[tuple[Any, TreePath]] = [(value, path)]
    while todo:
        v, at = todo.pop()
        if isinstance(v, np.ndarray):
            if id(v) not in seen:
                seen.add(id(v))
                yield id(v), at
            continue
        children: list[tuple[Any, Any]]
        if isinstance(v, JuliaStruct):
            children = []
            for k, x in zip(era_field_names(v), v.fields.values(), strict=True):
                if isinstance(x, JuliaStruct) and x.type.basename == "TrackedArray" and "data" in x.fields:
                    x = x.fields["data"]  # Tracker: the data is the parameter
                children.append((k, x))
        elif isinstance(v, NamedTuple):
            children = list(v.items())
        elif isinstance(v, (tuple, list)):
            children = [(i + 1, x) for i, x in enumerate(v)]
        else:
            continue
        if id(v) in seen:
            continue
        seen.add(id(v))
        todo.extend(((x, (*at, k)) for k, x in reversed(children)))


def _mapping(state: Any, path: TreePath, sources: dict[int, TreePath]) -> list[str]:
    lines = []
    for new_path, array in _arrays(state, path):
        origin = sources.get(id(array))
        if origin is None and array.base is not None:  # a reshaped view (a recurrent state0)
            origin = sources.get(id(array.base))
        where = format_path(origin) if origin else "(Flux's default)"
        lines.append(f"{format_path(new_path)} <- {where}  {tuple(array.shape)} {array.dtype.name}")
    return lines


def _arrays(value: Any, path: TreePath) -> Iterator[tuple[TreePath, np.ndarray]]:
    if isinstance(value, np.ndarray):
        yield path, value
    elif isinstance(value, NamedTuple):
        for k, v in value.items():
            yield from _arrays(v, (*path, k))
    elif isinstance(value, (tuple, list)):
        for i, v in enumerate(value):
            yield from _arrays(v, (*path, i + 1))

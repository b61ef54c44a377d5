"""A ComponentArrays.jl ``ComponentArray`` (one flat vector, its layout in its type) as the NamedTuple
tree it stands for.

Lux users often hand ``ComponentArray(ps)`` to Optimization.jl / DiffEqFlux and save that: JLD2 then
stores the flat ``data`` and the layout only as the type's last parameter, a tuple holding one
``Axis{(name = index, …)}`` (spelled ``Tuple{Axis{…}}`` or, by some JLD2 versions, ``NTuple{1,
Axis{…}}``). Each index is, in ComponentArrays' terms:

- an integer ``i``: the scalar ``data[i]``;
- a ``UnitRange`` ``a:b``: the vector ``data[a:b]``;
- ``ViewAxis{a:b, _, ShapedAxis{shape}}()``: ``data[a:b]`` reshaped to ``shape`` (column-major);
- ``ViewAxis{a:b, _, Shaped1DAxis{(n,)}}()`` (later ComponentArrays versions): the vector
  ``data[a:b]``;
- ``ViewAxis{a:b, _, Axis{…}}()``: a nested component whose indices count from ``a``.

A one-dimensional component without values (``1:0``, or ``ViewAxis{1:0, _,
Shaped1DAxis{(0,)}}()``) is what ComponentArrays stores for a ``NamedTuple()``, a Lux layer
without parameters (``WrappedFunction``, ``NoOpLayer``, a pooling layer): older versions make it
``ViewAxis(range, FlatAxis())``, which the constructor collapses to the bare range
(``ViewAxis(Inds, ::NullorFlatAxis) = Inds``, ComponentArrays.jl ``src/axis.jl``), later ones the
``Shaped1DAxis`` form, as for a vector in either. An empty vector cannot be told apart; a Lux
layer's parameters are always a NamedTuple, so such a component is read as ``NamedTuple()``
(found in real files of both forms: tests/corpus_sources.md, "Lux files found in the wild").

Indices are Julia's (1-based, ends included). Arrays come out in Julia's shape order, as
:func:`treexchange.load` gives every Julia array.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from treexchange._errors import ConversionError, TreePath, clip_type
from treexchange._juliatype import JuliaType
from treexchange._values import JuliaStruct, NamedTuple, Singleton

_NAME = "ComponentArrays.ComponentArray"
_SHOWN = 200  # characters of a layout type an error quotes (a model's whole layout can be kilobytes)


def is_component_array(value: Any) -> bool:
    """Whether ``value`` is a ComponentArray as :func:`treexchange.load` reads it (a struct)."""
    return isinstance(value, JuliaStruct) and isinstance(value.type, JuliaType) and value.type.name == _NAME


def component_tree(value: JuliaStruct, *, path: TreePath = ()) -> NamedTuple:
    """The NamedTuple tree of a one-dimensional ComponentArray.

    Raises:
        ConversionError: a ComponentArray of another dimension or an index form not listed above.

    Example:
        >>> import numpy as np
        >>> from treexchange import JuliaStruct, JuliaType, NamedTuple, Singleton
        >>> def span(a, b):
        ...     return JuliaStruct("UnitRange{Int64}", {"start": a, "stop": b})
        >>> shaped = JuliaType("ComponentArrays.ShapedAxis", [(2, 2)])
        >>> w = Singleton(JuliaType("ComponentArrays.ViewAxis", [span(1, 4), None, shaped]))
        >>> axis = JuliaType("ComponentArrays.Axis", [NamedTuple(w=w, b=span(5, 6), s=7)])
        >>> params = ["Float32", 1, "Array{Float32,1}", JuliaType("Tuple", [axis])]
        >>> array = JuliaType("ComponentArrays.ComponentArray", params)
        >>> tree = component_tree(JuliaStruct(array, {"data": np.arange(1, 8, dtype=np.float32)}))
        >>> tree.w.tolist(), tree.b.tolist(), float(tree.s)
        ([[1.0, 3.0], [2.0, 4.0]], [5.0, 6.0], 7.0)
    """
    data = value.fields.get("data")
    params = value.type.params
    if not isinstance(data, np.ndarray) or data.ndim != 1 or len(params) != 4:
        raise ConversionError("only a one-dimensional ComponentArray holds a NamedTuple tree", path=path)
    axes = params[3]
    elements = _tuple_elements(axes)
    if elements is None:
        message = f"unknown ComponentArray axes {clip_type(str(axes), _SHOWN)}: not a tuple"
        raise ConversionError(message, path=path)
    if len(elements) != 1:
        message = f"ComponentArray axes of {len(elements)} dimensions for its one-dimensional data"
        raise ConversionError(message, path=path)
    return _component(elements[0], data, 0, path)


def _tuple_elements(t: Any) -> list[Any] | None:
    """The element types of a tuple type in either spelling (``Tuple{A}``, ``NTuple{1, A}``)."""
    if not isinstance(t, JuliaType):
        return None
    if t.is_named("NTuple"):
        count = t.params[0] if len(t.params) == 2 else None
        if not isinstance(count, (int, np.integer)) or not 0 <= int(count) <= 8:
            return None  # (one Axis per dimension: a longer count is no ComponentArray's)
        return [t.params[1]] * int(count)
    return list(t.params) if t.is_named("Tuple") else None


def _component(axis: Any, data: np.ndarray, offset: int, path: TreePath) -> NamedTuple:
    if not (isinstance(axis, JuliaType) and axis.name == "ComponentArrays.Axis" and axis.params):
        raise ConversionError(f"unknown ComponentArray axis {clip_type(repr(axis), _SHOWN)}", path=path)
    names = axis.params[0]
    if not isinstance(names, Mapping):
        raise ConversionError(f"unknown ComponentArray axis {clip_type(repr(axis), _SHOWN)}", path=path)
    return NamedTuple((str(k), _entry(index, data, offset, (*path, k))) for k, index in names.items())


def _is_shape(dims: tuple[Any, ...]) -> bool:
    return all(isinstance(n, (int, np.integer)) and n >= 0 for n in dims)


def _entry(index: Any, data: np.ndarray, offset: int, path: TreePath) -> Any:
    if isinstance(index, Singleton):  # an instance of a type without fields: ViewAxis{…}()
        index = index.type
    if isinstance(index, (int, np.integer)):
        return data[offset + int(index) - 1]
    if isinstance(index, JuliaStruct) and set(index.fields) == {"start", "stop"}:  # UnitRange
        return _vector(_slice(index, data, offset, path))
    if isinstance(index, JuliaType) and index.name == "ComponentArrays.ViewAxis" and len(index.params) == 3:
        window, _, inner = index.params
        part = _slice(window, data, offset, path)
        if isinstance(inner, JuliaType) and inner.name in _SHAPED and inner.params:
            dims = inner.params[0]
            if not (isinstance(dims, tuple) and _is_shape(dims)):
                shown = clip_type(repr(dims), _SHOWN)  # (a damaged file's axis: not a shape)
                raise ConversionError(f"unknown ComponentArray shape {shown}", path=path)
            shape = tuple(int(n) for n in dims)
            if int(np.prod(shape)) != part.size:
                message = f"ComponentArray shape {shape} does not fit {part.size} values"
                raise ConversionError(message, path=path)
            if len(shape) != 1:  # (a vector's is its range: below)
                return part.reshape(shape, order="F")  # Julia's column-major layout, Julia's axis order
        if isinstance(inner, JuliaType) and inner.name == "ComponentArrays.Axis":
            start = int(window.fields["start"]) if isinstance(window, JuliaStruct) else 1
            return _component(inner, data, offset + start - 1, path)
        return _vector(part)
    raise ConversionError(f"unknown ComponentArray index {clip_type(repr(index), _SHOWN)}", path=path)


# A component's shape: ``ShapedAxis{shape}``; a vector's ``Shaped1DAxis{(n,)}`` in the versions that
# have it (older ones collapse ``ShapedAxis((n,))`` to the bare range).
_SHAPED = frozenset({"ComponentArrays.ShapedAxis", "ComponentArrays.Shaped1DAxis"})


def _vector(part: np.ndarray) -> Any:
    """A one-dimensional component: its values, or ``NamedTuple()`` when it has none (the
    empty range of a layer without parameters, see the module docstring)."""
    return NamedTuple() if part.size == 0 else part


def _slice(window: Any, data: np.ndarray, offset: int, path: TreePath) -> np.ndarray:
    if not (isinstance(window, JuliaStruct) and {"start", "stop"} <= set(window.fields)):
        raise ConversionError(f"unknown ComponentArray range {window!r}", path=path)
    start, stop = offset + int(window.fields["start"]), offset + int(window.fields["stop"])
    if not 1 <= start <= stop + 1 <= data.size + 1:
        message = f"ComponentArray range {start}:{stop} outside its {data.size} values"
        raise ConversionError(message, path=path)
    return data[start - 1 : stop]

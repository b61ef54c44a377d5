"""A ComponentArrays.jl ``ComponentArray`` (one flat vector, its layout in its type) as the NamedTuple
tree it stands for.

Lux users often hand ``ComponentArray(ps)`` to Optimization.jl / DiffEqFlux and save that: JLD2 then
stores the flat ``data`` and the layout only as the type's last parameter, a tuple holding one
``Axis{(name = index, …)}``. Each index is, in ComponentArrays' terms:

- an integer ``i``: the scalar ``data[i]``;
- a ``UnitRange`` ``a:b``: the vector ``data[a:b]``;
- ``ViewAxis{a:b, _, ShapedAxis{shape}}()``: ``data[a:b]`` reshaped to ``shape`` (column-major);
- ``ViewAxis{a:b, _, Axis{…}}()``: a nested component whose indices count from ``a``.

Indices are Julia's (1-based, ends included). Arrays come out in Julia's shape order, as
:func:`treexchange.load` gives every Julia array.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from treexchange._errors import ConversionError, TreePath
from treexchange._juliatype import JuliaType
from treexchange._values import JuliaStruct, NamedTuple, Singleton

_NAME = "ComponentArrays.ComponentArray"


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
    axis = axes.params[0] if isinstance(axes, JuliaType) and axes.params else None
    return _component(axis, data, 0, path)


def _component(axis: Any, data: np.ndarray, offset: int, path: TreePath) -> NamedTuple:
    if not (isinstance(axis, JuliaType) and axis.name == "ComponentArrays.Axis" and axis.params):
        raise ConversionError(f"unknown ComponentArray axis {axis!r}", path=path)
    names = axis.params[0]
    if not isinstance(names, Mapping):
        raise ConversionError(f"unknown ComponentArray axis {axis!r}", path=path)
    return NamedTuple((str(k), _entry(index, data, offset, (*path, k))) for k, index in names.items())


def _entry(index: Any, data: np.ndarray, offset: int, path: TreePath) -> Any:
    if isinstance(index, Singleton):  # an instance of a type without fields: ViewAxis{…}()
        index = index.type
    if isinstance(index, (int, np.integer)):
        return data[offset + int(index) - 1]
    if isinstance(index, JuliaStruct) and set(index.fields) == {"start", "stop"}:  # UnitRange
        return _slice(index, data, offset, path)
    if isinstance(index, JuliaType) and index.name == "ComponentArrays.ViewAxis" and len(index.params) == 3:
        window, _, inner = index.params
        part = _slice(window, data, offset, path)
        if isinstance(inner, JuliaType) and inner.name == "ComponentArrays.ShapedAxis" and inner.params:
            shape = tuple(int(n) for n in inner.params[0])
            if int(np.prod(shape)) != part.size:
                message = f"ComponentArray shape {shape} does not fit {part.size} values"
                raise ConversionError(message, path=path)
            return part.reshape(shape, order="F")  # Julia's column-major layout, Julia's axis order
        if isinstance(inner, JuliaType) and inner.name == "ComponentArrays.Axis":
            start = int(window.fields["start"]) if isinstance(window, JuliaStruct) else 1
            return _component(inner, data, offset + start - 1, path)
        return part
    raise ConversionError(f"unknown ComponentArray index {index!r}", path=path)


def _slice(window: Any, data: np.ndarray, offset: int, path: TreePath) -> np.ndarray:
    if not (isinstance(window, JuliaStruct) and {"start", "stop"} <= set(window.fields)):
        raise ConversionError(f"unknown ComponentArray range {window!r}", path=path)
    start, stop = offset + int(window.fields["start"]), offset + int(window.fields["stop"])
    if not 1 <= start <= stop + 1 <= data.size + 1:
        message = f"ComponentArray range {start}:{stop} outside its {data.size} values"
        raise ConversionError(message, path=path)
    return data[start - 1 : stop]

"""``tx.from_flux``: a runnable Python model from a Flux file, with no template.

Two sources give the same pair ``(Layer tree, Flux.state)``:

- a whole-model file (Flux structs; their types record every layer and activation), or
- a ``Flux.state`` file plus the model as Flux prints it (``architecture=``), parsed, never evaluated.

:func:`check_state` then compares the state with what the Layer tree implies (structure and every
array size), so that a wrong architecture text fails here, naming the file path, rather than as a
shape error deep inside a framework.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from treexchange._errors import ConversionError, PathSegment
from treexchange._port._arch import parse_architecture
from treexchange._port._spec import Layer
from treexchange._values import JuliaStruct

Path = tuple[PathSegment, ...]

_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3, "GRUv3": 3}


def read_flux_source(
    path: str | os.PathLike[str], name: str, architecture: str | None = None, *, flux: str = "0.14"
) -> tuple[Layer, Any]:
    """``(Layer tree, Flux.state value tree)`` for the entry ``name`` of a Flux file.

    Without ``architecture`` the entry must be a whole Flux model (structs); with it, the entry is a
    ``Flux.state`` (or a whole model, whose arrays are then used) and the text describes the model.
    """
    from treexchange import load  # the public loader; imported here to keep import order simple
    from treexchange._port._wholemodel import from_whole_model

    value = load(path, name)
    if architecture is None:
        if not isinstance(value, JuliaStruct):
            raise ConversionError(
                f"{name!r} holds no Flux structs (a Flux.state has no layer types): pass architecture= "
                "with the model as Flux prints it",
                path=(name,),
            )
        return from_whole_model(value, path=(name,), flux=flux)
    layer = parse_architecture(architecture)
    state = from_whole_model(value, path=(name,), flux=flux)[1] if isinstance(value, JuliaStruct) else value
    check_state(layer, state, path=(name,))
    return layer, state


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
    state: Any, key: str, shape: tuple[int, ...], path: Path, layer: Layer, *, optional: bool = False
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


def _children_states(layer: Layer, state: Any, path: Path) -> list[tuple[Any, Path]]:
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
    p = tuple(path)
    a = layer.args
    kind = layer.kind
    if kind in ("Chain", "Parallel", "PairwiseFusion", "Maxout"):
        for child, (sub, sub_path) in zip(layer.children, _children_states(layer, state, p), strict=True):
            check_state(child, sub, path=sub_path)
    elif kind == "SkipConnection":
        check_state(layer.children[0], _field(state, "layers"), path=(*p, "layers"))
    elif kind == "Dense":
        key = "weight" if _field(state, "weight") is not None else "W"
        _expect(state, key, (a["out"], a["in"]), p, layer)
        _expect(
            state, "bias" if key == "weight" else "b", (a["out"],), p, layer, optional=not a.get("bias", True)
        )
    elif kind in ("Conv", "CrossCor", "DepthwiseConv", "ConvTranspose"):
        groups = a.get("groups", 1)
        if kind == "ConvTranspose":
            shape = (*a["kernel"], a["out"] // groups, a["in"])
        else:
            shape = (*a["kernel"], a["in"] // groups, a["out"])
        _expect(state, "weight", shape, p, layer)
        _expect(state, "bias", (a["out"],), p, layer, optional=not a.get("bias", True))
    elif kind in ("BatchNorm", "InstanceNorm", "GroupNorm"):
        for key in ("β", "γ", "μ", "σ²"):
            _expect(state, key, (a["channels"],), p, layer, optional=True)
    elif kind == "LayerNorm":
        diag = _field(state, "diag")
        for key in ("scale", "bias", "α", "β"):
            _expect(diag, key, tuple(a["size"]), (*p, "diag"), layer, optional=True)
    elif kind == "Embedding":
        _expect(state, "weight", (a["out"], a["in"]), p, layer)
    elif kind == "Bilinear":
        _expect(state, "weight", (a["out"], *a["in"]), p, layer)
    elif kind in _GATES:
        cell = _field(state, "cell")
        g, h = _GATES[kind], a["out"]
        _expect(cell, "Wi", (g * h, a["in"]), (*p, "cell"), layer)
        _expect(cell, "Wh", ((2 if kind == "GRUv3" else g) * h, h), (*p, "cell"), layer)
    elif kind == "MultiHeadAttention":
        for proj, (o, i) in (
            ("q_proj", (a["qk_dim"], a["q_in"])),
            ("k_proj", (a["qk_dim"], a["k_in"])),
            ("v_proj", (a["v_dim"], a["v_in"])),
            ("out_proj", (a["out"], a["v_dim"])),
        ):
            _expect(_field(state, proj), "weight", (o, i), (*p, proj), layer)

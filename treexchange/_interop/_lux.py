"""PyTorch ``state_dict`` <-> Lux ``ps``/``st`` for the layers with Lux names (docs/porting.md §Lux).

Lux holds the same arrays as Flux under other names and, in Lux v0.5, other bias shapes, so each
tensor goes through the PyTorch rule of the Flux layer (:mod:`._torch`: pairing, permutation, kernel
flip — Lux's ``Conv`` convolves as Flux's does) and then to its Lux place:

============  =========================================  ==============================================
layer         ``ps``                                     ``st``
============  =========================================  ==============================================
Dense         ``weight (out, in)``, ``bias``             ``NamedTuple()``
Conv          ``weight (k…, in÷g, out)``, ``bias``       ``NamedTuple()``
BatchNorm     ``scale`` = γ, ``bias`` = β (scale first)  ``running_mean``, ``running_var``,
                                                         ``training = Val(true)``
LayerNorm     ``bias``, ``scale`` (bias first),          ``NamedTuple()``
              shapes ``(size…, 1)``
============  =========================================  ==============================================

Biases are ``(out,)`` in Lux v1 and ``(out, 1)`` (Dense) / ``(1, …, 1, out, 1)`` (Conv) in Lux v0.5.
A ``Chain``'s children are ``layer_1``, ``layer_2``, … in both ``ps`` and ``st``; layers without
arrays (pools, ``flatten``, activations, ``Dropout``) have empty NamedTuples there (a Lux ``Dropout``
keeps an rng in ``st``, which is not modelled here). Only the arrays are mapped: Lux's ``LayerNorm``
normalises over the whole input unless its ``dims`` is set (docs/porting.md §LayerNorm ϵ), which no
tensor records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._errors import ConversionError, Mismatch, MismatchError, UnsupportedError
from .._port._lux import _NAMES, _TRAINING, lux_shape
from .._port._spec import Layer
from .._values import NamedTuple
from ._torch import TorchParam, _numpy, _pair, as_layer, layer_of_module, torch_params

LUX_VERSIONS = ("0.5", "1")


def _lux_shape(layer: Layer, flux_field: str, julia_shape: tuple[int, ...], lux: str) -> tuple[int, ...]:
    """The Lux array shape of a Flux-shaped array (only the trailing/leading singleton axes differ)."""
    return lux_shape(layer.kind, len(layer.arg("kernel", ())), flux_field, julia_shape, lux)


def _check_version(lux: str) -> None:
    if lux not in LUX_VERSIONS:
        raise ValueError(f"lux must be one of {LUX_VERSIONS}, not {lux!r}")


def _layer(architecture: str | Layer | Any) -> tuple[Layer, Any]:
    if isinstance(architecture, (str, Layer)):
        return as_layer(architecture), None
    return as_layer(layer_of_module(architecture)), architecture


def _ordered(params: list[TorchParam], kind: str) -> list[TorchParam]:
    order = list(_NAMES[kind])
    return sorted(params, key=lambda p: order.index(p.flux))


def state_dict_to_lux(
    state_dict: Mapping[str, Any] | None, architecture: str | Layer | Any, *, lux: str = "1"
) -> tuple[NamedTuple, NamedTuple]:
    """Lux ``(ps, st)`` of the model ``architecture`` (Flux-style text, a Layer or an equivalent
    ``torch.nn.Module``) with the tensors of a PyTorch ``state_dict``; ``lux`` is ``"1"`` or ``"0.5"``.

    Example:
        >>> import numpy as np
        >>> sd = {"0.weight": np.ones((3, 2), np.float32), "0.bias": np.zeros(3, np.float32)}
        >>> ps, st = state_dict_to_lux(sd, "Chain(Dense(2 => 3, relu))", lux="0.5")
        >>> ps.layer_1.bias.shape, st.layer_1
        ((3, 1), NamedTuple())
    """
    _check_version(lux)
    layer, module = _layer(architecture)
    if state_dict is None:
        if module is None:
            raise ValueError("state_dict=None needs a torch.nn.Module as the architecture")
        state_dict = module.state_dict()
    pairs = _pair(layer, state_dict, None, ("ps",))
    tensors = {id(site.layer): group for site, _, group in pairs}

    def build(node: Layer) -> tuple[NamedTuple, NamedTuple]:
        if node.kind == "Chain":
            children = [build(child) for child in node.children]
            names = node.names or tuple(f"layer_{i}" for i in range(1, len(children) + 1))
            return (
                NamedTuple(**{n: c[0] for n, c in zip(names, children)}),
                NamedTuple(**{n: c[1] for n, c in zip(names, children)}),
            )
        if node.children:
            raise UnsupportedError(f"Lux ps/st for {node.kind} is not mapped (only Chain)")
        if id(node) not in tensors:
            return NamedTuple(), NamedTuple()
        if node.kind not in _NAMES:
            raise UnsupportedError(f"Lux ps/st for {node.kind} is not mapped ({', '.join(_NAMES)} are)")
        group = tensors[id(node)]
        ps: dict[str, Any] = {}
        st: dict[str, Any] = {}
        for p in _ordered(torch_params(node), node.kind):
            julia = p.perm.inverse(_numpy(group[p.torch]))
            where, name = _NAMES[node.kind][p.flux]
            (ps if where == "ps" else st)[name] = np.ascontiguousarray(
                julia.reshape(_lux_shape(node, p.flux, julia.shape, lux))
            )
        if node.kind == "BatchNorm":
            st["training"] = _TRAINING
        return NamedTuple(**ps), NamedTuple(**st)

    return build(layer)


def lux_to_state_dict(
    ps: Any,
    st: Any,
    architecture: str | Layer | Any,
    *,
    names: Mapping[str, Any] | None = None,
    lux: str = "1",
) -> dict[str, np.ndarray]:
    """The PyTorch tensors (numpy arrays) of Lux ``ps``/``st``, keyed like ``names`` (a template
    ``state_dict``; with a ``torch.nn.Module`` as ``architecture``, its own), else ``nn.Sequential``
    style (``"0.weight"``). Every missing or misshapen array is reported at once.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple
        >>> ps = NamedTuple(layer_1=NamedTuple(weight=np.ones((3, 2), np.float32), bias=np.zeros((3, 1))))
        >>> sd = lux_to_state_dict(ps, NamedTuple(layer_1=NamedTuple()), "Chain(Dense(2 => 3))", lux="0.5")
        >>> {k: v.shape for k, v in sd.items()}
        {'0.weight': (3, 2), '0.bias': (3,)}
    """
    _check_version(lux)
    layer, module = _layer(architecture)
    if names is None and module is not None:
        names = module.state_dict()
    if names is None:
        names = {}
        counter = 0
        for node in layer.walk():
            params = torch_params(node) if not node.children and node.kind in _NAMES else []
            for p in params:
                names[f"{counter}.{p.torch}"] = np.zeros(p.shape)
            counter += bool(params)
    pairs = _pair(layer, names, None, ("ps",))
    where_of = {id(site.layer): (prefix, group) for site, prefix, group in pairs}
    out: dict[str, np.ndarray] = {}
    problems: list[Mismatch] = []

    def walk(node: Layer, p_node: Any, s_node: Any, path: tuple[str, ...]) -> None:
        if node.kind == "Chain":
            child_names = node.names or tuple(f"layer_{i}" for i in range(1, len(node.children) + 1))
            for name, child in zip(child_names, node.children):
                walk(child, _get(p_node, name, path), _get(s_node, name, path), (*path, str(name)))
            return
        if id(node) not in where_of:
            return
        if node.kind not in _NAMES:
            raise UnsupportedError(f"Lux ps/st for {node.kind} is not mapped ({', '.join(_NAMES)} are)")
        prefix, group = where_of[id(node)]
        for p in torch_params(node):
            which, name = _NAMES[node.kind][p.flux]
            source = p_node if which == "ps" else s_node
            value = source.get(name) if isinstance(source, Mapping) else None
            at = (which, *path, name)
            if value is None:
                problems.append(Mismatch("missing", at, f"no Lux array for {prefix}.{p.torch}"))
                continue
            julia_shape = p.perm.julia_shape(p.shape)
            want = _lux_shape(node, p.flux, julia_shape, lux)
            arr = np.asarray(value)
            if tuple(arr.shape) != want:
                problems.append(Mismatch("shape", at, f"Lux {tuple(arr.shape)}, Lux {lux} needs {want}"))
                continue
            key = f"{prefix}.{p.torch}" if prefix else p.torch
            out[key] = np.ascontiguousarray(p.perm.forward(arr.reshape(julia_shape)))
        for extra in group:
            if extra == "num_batches_tracked":
                out[f"{prefix}.{extra}" if prefix else extra] = np.zeros((), np.int64)

    walk(layer, ps, st, ())
    if problems:
        raise MismatchError(problems, header=f"{len(problems)} problem(s) reading Lux ps/st")
    return out


def _get(node: Any, name: str, path: tuple[str, ...]) -> Any:
    if isinstance(node, Mapping) and name in node:
        return node[name]
    raise ConversionError(f"Lux ps/st has no {name!r} here", path=(*path, name))

"""Reading Flax models as their Flux twins: the per-layer rules that Flax nnx and Flax linen share.

Flax's two APIs store the same leaves in the same layouts (``kernel``, ``bias``, ``scale``,
``mean``, ``var``, ``embedding``, ``query``/``key``/``value``/``out``), so one set of rules reads
both: :class:`FlaxLayoutReader` takes a layer's attributes and arrays (an nnx module, or a linen
module's attributes and variables presented under the nnx names) and gives its Flux layer with the
exact permutation of every array. The nnx and linen targets subclass it with their own dispatch;
this module imports no framework (the rules: ``docs/porting.md`` §Conventions).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

from .._errors import PathSegment, TreePath, UnsupportedError
from ._activations import ELEMENTWISE, name_of
from ._layout import (
    chain_port,
    explicit_pairs,
    flux_transpose_pads,
    julia_pad,
    layernorm_0_14_message,
    rev,
    same_padding,
)
from ._perm import SAME, Compose, Perm, Reshape, Transpose, spatial_flip
from ._registry import CONTAINERS, with_defaults
from ._spec import Layer
from ._state import Port, carry_initial_state, returning_state


def value(variable: Any) -> Any:
    return variable.get_value() if hasattr(variable, "get_value") else variable


def int_tuple(value: Any, n: int) -> tuple[int, ...]:
    if value is None:
        return (1,) * n
    if isinstance(value, int):
        return (value,) * n
    return tuple(int(v) for v in value)


def scale_perm(ndim: int) -> Perm:
    """Julia ``Scale`` arrays -> Flax: laid out as one sample of the data they scale (docs/porting.md
    §Data layout): a vector as it is, ``(s1, …, sN, C)`` as ``(sN, …, s1, C)`` (channels last)."""
    if ndim <= 1:
        return SAME
    return Transpose((*range(ndim - 2, -1, -1), ndim - 1))


def scale_shape(size: tuple[int, ...]) -> tuple[int, ...]:
    """The Flax shape of a Julia ``Scale`` of ``size`` (:func:`scale_perm`)."""
    return tuple(size) if len(size) <= 1 else (*rev(size[:-1]), int(size[-1]))


class FlaxLayoutReader:
    """The rules both Flax APIs share; a subclass gives ``read`` (its dispatch), ``own_entry`` and
    the pool functions its partial pools wrap."""

    flatten_hint = "treexchange._port._nnx_layers.Flatten"
    max_pool: Callable[..., Any] | None = None
    avg_pool: Callable[..., Any] | None = None

    def __init__(self, era: str) -> None:
        self.era = era
        self.conv_data = False  # the data at this point of the model came out of a conv layer
        self.after_unknown = False  # the last module read was a function without an NNlib name

    def read(self, m: Any, path: TreePath) -> Port:
        """One module (or function) of the model as its Flux layer: each API dispatches its own."""
        raise NotImplementedError

    def function(self, m: Any, path: TreePath) -> Port:
        """A plain function in a Sequential: a partial Flax pool, or an activation by its NNlib name."""
        if isinstance(m, functools.partial) and m.func in (self.max_pool, self.avg_pool):
            return self.partial_pool(m, path)
        if callable(m):
            return Port(Layer("function", {"name": name_of(m), "fn": m}))
        raise UnsupportedError(f"no Flux layer for {type(m).__name__}", path=path)

    def chain(self, items: list[Any], path: TreePath, keys: list[PathSegment] | None = None) -> Port:
        """A Chain of ``items``; ``keys`` are their path segments (default ``1, 2, …`` as in Flux)."""
        return chain_port(items, path, self.read, self.own_entry, keys)

    def own_entry(self, item: Any) -> bool:
        """Whether a Chain item is the author's own Function entry (never folded into the layer before)."""
        return False

    def track(self, m: Any, port: Port, path: TreePath) -> None:
        """Follow, in call order, whether the data is conv output, so that a Linear fed by an unknown
        function of it (most likely a channels-last ``reshape``, whose order is not Flux's) is refused
        instead of ported into a model that computes something else."""
        kind = port.layer.kind
        if kind in CONTAINERS:  # its children were tracked as they were read
            return
        if kind == "function" and port.layer.arg("name") in ELEMENTWISE:
            return  # an activation changes no layout
        after_unknown, self.after_unknown = self.after_unknown, False
        if kind == "Dense" and self.conv_data and after_unknown:
            raise UnsupportedError(
                "a Linear after conv layers follows an unknown function; if it flattens, use "
                f"{self.flatten_hint} so the Dense columns get Flux's order",
                path=path,
            )
        if kind in ("Conv", "CrossCor", "ConvTranspose", "DepthwiseConv"):
            self.conv_data = True
        elif kind in ("Dense", "Embedding", "Bilinear", "flatten"):
            self.conv_data = False
        elif kind == "function" and port.layer.arg("name") is None:
            self.after_unknown = True

    def linear(self, m: Any) -> Port:
        kernel = value(m.kernel)
        inp, out = kernel.shape
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (kernel, Transpose((1, 0)))}
        if m.use_bias:
            arrays["bias"] = (value(m.bias), SAME)
        layer = Layer("Dense", {"in": int(inp), "out": int(out), "bias": bool(m.use_bias), "σ": "identity"})
        return Port(layer, arrays)

    def conv(self, conv: Any, path: TreePath, kind: str) -> Port:
        """A Conv, CrossCor or ConvTranspose (``kind``) in Flax's kernel layout, of either API."""
        if getattr(conv, "mask", None) is not None:  # (a kernel mask: another function than Flux's)
            raise UnsupportedError(
                f"{kind}(mask=…) has no Flux twin (Flux convolves the whole kernel)", path=path
            )
        kernel = value(conv.kernel)
        n = kernel.ndim - 2
        args: dict[str, Any] = {
            "kernel": rev(kernel.shape[:n]),
            "stride": rev(int_tuple(conv.strides, n)),
            "dilation": rev(int_tuple(conv.kernel_dilation, n)),
            "bias": bool(conv.use_bias),
            "σ": "identity",
        }
        if kind == "ConvTranspose":
            args.update({"in": int(kernel.shape[n]), "out": int(kernel.shape[n + 1]), "groups": 1})
            if getattr(conv, "transpose_kernel", False):
                raise UnsupportedError("ConvTranspose(transpose_kernel=True) is not ported", path=path)
            args["pad"], args["outpad"] = flux_transpose_pads(conv.padding, args, path)
        else:
            if int_tuple(getattr(conv, "input_dilation", 1), n) != (1,) * n:
                raise UnsupportedError("Conv(input_dilation != 1) has no Flux equivalent", path=path)
            groups = int(conv.feature_group_count)
            args.update(
                {"in": int(kernel.shape[n]) * groups, "out": int(kernel.shape[n + 1]), "groups": groups}
            )
            padding = conv.padding
            if isinstance(padding, str) and padding.upper() in ("SAME", "SAME_LOWER"):
                padding = same_padding(
                    padding,
                    kernel.shape[:n],
                    int_tuple(conv.strides, n),
                    int_tuple(conv.kernel_dilation, n),
                    path,
                )
            args["pad"] = julia_pad(explicit_pairs(padding, n, path))
        to_flax = Transpose((*range(n - 1, -1, -1), n, n + 1))
        if kind == "ConvTranspose":
            perm: Perm = Transpose((*range(n - 1, -1, -1), n + 1, n))
        elif kind == "CrossCor":
            perm = to_flax
        else:
            perm = Compose(to_flax, spatial_flip(n, 0))  # true convolution -> cross-correlation
        arrays: dict[str, tuple[Any, Perm]] = {"weight": (kernel, perm)}
        if conv.use_bias:
            arrays["bias"] = (value(conv.bias), SAME)
        return Port(with_defaults(Layer(kind, args)), arrays)

    def partial_pool(self, m: Any, path: TreePath) -> Port:
        kw = dict(m.keywords)
        window = tuple(kw.get("window_shape", m.args[0] if m.args else ()))
        n = len(window)
        strides = int_tuple(kw.get("strides"), n)
        if m.func is self.avg_pool and not kw.get("count_include_pad", True):
            raise UnsupportedError(
                "avg_pool(count_include_pad=False): Flux MeanPool counts padding", path=path
            )
        pad = julia_pad(explicit_pairs(kw.get("padding", "VALID"), n, path))
        kind = "MaxPool" if m.func is self.max_pool else "MeanPool"
        return Port(Layer(kind, {"k": rev(window), "stride": rev(strides), "pad": pad}))

    def scale(self, weight: Any, bias: Any) -> Port:
        """Flux's ``Scale``: ``scale``/``bias`` in the Flax layout of one sample (see
        :func:`scale_perm`)."""
        perm = scale_perm(len(weight.shape))
        args = {"size": perm.julia_shape(tuple(weight.shape)), "bias": bias is not None, "σ": "identity"}
        arrays: dict[str, tuple[Any, Perm]] = {"scale": (weight, perm)}
        if bias is not None:
            arrays["bias"] = (bias, perm)
        return Port(Layer("Scale", args), arrays)

    def batchnorm(self, m: Any, path: TreePath) -> Port:
        if getattr(m, "axis", -1) not in (-1, (-1,)):  # (nnx's; linen's reader checks its own)
            raise UnsupportedError(
                f"BatchNorm(axis={m.axis!r}): Flux normalises the channel axis{last_axis_hint(m.axis)}",
                path=path,
            )
        mean = value(m.mean)
        args = {
            "channels": int(mean.shape[0]),
            "ϵ": float(m.epsilon),
            "momentum": 1.0 - float(m.momentum),  # Flax keeps 1 − m (docs/porting.md §BatchNorm momentum)
            "affine": bool(m.use_scale),
            "track_stats": True,
        }
        if bool(m.use_scale) != bool(m.use_bias):
            raise UnsupportedError("Flux BatchNorm has both γ and β or neither", path=path)
        port = Port(with_defaults(Layer("BatchNorm", args)))
        if m.use_scale:
            port.arrays.update({"γ": (value(m.scale), SAME), "β": (value(m.bias), SAME)})
        port.arrays.update({"μ": (mean, SAME), "σ²": (value(m.var), SAME)})
        return port

    def groupnorm(self, m: Any, path: TreePath, instance: bool) -> Port:
        if bool(m.use_scale) != bool(m.use_bias):
            raise UnsupportedError("Flux norms have both γ and β or neither", path=path)
        if instance:
            channels = int(m.num_features)
        elif m.scale is not None:
            channels = int(value(m.scale).shape[0])
        else:
            channels = int(m.num_groups) * int(m.group_size)
        args: dict[str, Any] = {"channels": channels, "ϵ": float(m.epsilon), "affine": bool(m.use_scale),
                                "track_stats": False}  # fmt: skip
        if not instance:
            args["groups"] = int(m.num_groups)
        port = Port(with_defaults(Layer("InstanceNorm" if instance else "GroupNorm", args)))
        if m.use_scale:
            port.arrays.update({"γ": (value(m.scale), SAME), "β": (value(m.bias), SAME)})
        return port

    def recurrence(self, m: Any) -> Port:
        """Flux's arrays as they are (the module keeps Flux's shapes and gate order)."""
        args: dict[str, Any] = {
            "in": int(value(m.weight_ih).shape[1]),
            "out": int(value(m.weight_hh).shape[1]),
        }
        if m.kind == "RNN":
            args["σ"] = m.activation
        arrays: dict[str, tuple[Any, Perm]] = {
            "Wi": (value(m.weight_ih), SAME),
            "Wh": (value(m.weight_hh), SAME),
        }
        if m.bias is not None:
            arrays["b"] = (value(m.bias), SAME)
        else:
            args["bias"] = False  # Flux ≥ 0.15's bias=false
        if m.weight_hh_candidate is not None:
            arrays["Wh_h̃"] = (value(m.weight_hh_candidate), SAME)
        state0: Any = None
        if m.state0_h is not None:  # a learnt initial state (Flux ≤ 0.14)
            h = value(m.state0_h)
            state0 = (h, value(m.state0_c)) if m.state0_c is not None else h
        port = returning_state(Port(with_defaults(Layer(m.kind, args)), arrays), m.return_state)
        return carry_initial_state(port, state0)

    def attention(self, m: Any, path: TreePath) -> Port:
        """``nnx.MultiHeadAttention``: kernels ``(in, heads, head_dim)`` are Flux's ``W.T`` with its
        rows split into contiguous head blocks (as Flux splits them), ``out`` ``(heads, head_dim,
        out)`` likewise; biases reshaped the same way."""
        if m.normalize_qk or m.num_kv_heads != m.num_heads:
            raise UnsupportedError("normalize_qk / grouped kv heads have no Flux counterpart", path=path)
        heads, dim = int(m.num_heads), int(m.head_dim)
        qk = heads * dim
        arrays: dict[str, tuple[Any, Perm]] = {}
        for name, proj in (("q_proj", m.query), ("k_proj", m.key), ("v_proj", m.value)):
            kernel = value(proj.kernel)
            n_in = int(kernel.shape[0])
            arrays[f"{name}.weight"] = (
                kernel,
                Compose(Transpose((1, 0)), Reshape((n_in, qk), (n_in, heads, dim))),
            )
            if m.use_bias:
                arrays[f"{name}.bias"] = (value(proj.bias), Reshape((qk,), (heads, dim)))
        out_kernel = value(m.out.kernel)
        n_out = int(out_kernel.shape[-1])
        arrays["out_proj.weight"] = (
            out_kernel,
            Compose(Transpose((1, 0)), Reshape((qk, n_out), (heads, dim, n_out))),
        )
        if m.use_bias:
            arrays["out_proj.bias"] = (value(m.out.bias), SAME)
        args: dict[str, Any] = {
            "q_in": int(m.in_features), "k_in": int(m.in_kv_features), "v_in": int(m.in_kv_features),
            "qk_dim": qk, "v_dim": qk, "out": n_out, "nheads": heads, "bias": bool(m.use_bias),
            "dropout_prob": float(m.dropout_rate),
        }  # fmt: skip
        return Port(with_defaults(Layer("MultiHeadAttention", args)), arrays)

    def layernorm(self, m: Any, path: TreePath) -> Port:
        if self.era == "0.14":
            raise UnsupportedError(layernorm_0_14_message(), path=path)
        if bool(m.use_scale) != bool(m.use_bias):
            raise UnsupportedError("Flux LayerNorm has both scale and bias or neither", path=path)
        for axes in ("reduction_axes", "feature_axes"):  # (nnx's; linen's reader checks its own)
            if getattr(m, axes, -1) not in (-1, (-1,)):
                raise UnsupportedError(
                    f"LayerNorm({axes}={getattr(m, axes)!r}) normalises other axes than the last, "
                    f"which has no Flux twin here{last_axis_hint(getattr(m, axes))}",
                    path=path,
                )
        args = {"size": (int(m.num_features),), "ϵ": math.sqrt(float(m.epsilon)), "affine": bool(m.use_scale)}
        port = Port(with_defaults(Layer("LayerNorm", args)))
        if m.use_scale:
            port.arrays.update({"scale": (value(m.scale), SAME), "bias": (value(m.bias), SAME)})
        return port


def last_axis_hint(axis: Any) -> str:
    """The hint for a norm's axis counted from the front: it is the last one only for data of one
    rank, which a module does not know (Flux's layer is the same whatever the rank), so it is
    refused, naming the spelling that ports."""
    if isinstance(axis, int) and axis >= 0:
        return f" (if axis {axis} is the last of your data, write -1: a Flux layer is not tied to a rank)"
    return ""


_FEATURE_MAPS = frozenset(
    {"Conv", "CrossCor", "ConvTranspose", "DepthwiseConv", "MaxPool", "MeanPool", "AdaptiveMaxPool",
     "AdaptiveMeanPool", "GlobalMaxPool", "GlobalMeanPool"}
)  # fmt: skip
_VECTORS = frozenset({"flatten", "Dense", "Bilinear", "Embedding"})


def refuse_layernorm_on_feature_maps(
    layer: Any, target: str, *, reading: bool = False, maps: bool = False
) -> bool:
    """Raise UnsupportedError for a ``LayerNorm`` applied to a conv's feature maps anywhere in
    ``layer`` (nested Chains, named or not, and the branches of SkipConnection/Parallel included):
    Flux normalises their first dims (``LayerNorm(W)``: each row of a ``(W, H, C, N)`` map), while
    a Flax LayerNorm normalises the last axes of the channels-last ``(N, H, W, C)``: the channels.
    Building (``reading=False``) a Flax model of such a Flux layer, or writing (``reading=True``)
    the Flux twin of such a Flax model, would compute another function. The Equinox port, whose
    samples are Julia's dims reversed, normalises the right ones. Returns whether ``layer``'s
    output is feature maps (``maps``: whether its input is)."""
    kind = layer.kind
    if kind == "Chain":
        for child in layer.children:
            maps = refuse_layernorm_on_feature_maps(child, target, reading=reading, maps=maps)
        return maps
    if layer.children:  # (SkipConnection, Parallel, …: each branch gets the input)
        outs = [
            refuse_layernorm_on_feature_maps(c, target, reading=reading, maps=maps) for c in layer.children
        ]
        return any(outs) or maps
    if kind in _FEATURE_MAPS:
        return True
    if kind in _VECTORS or (kind == "function" and layer.args.get("name") == "vec"):
        return False
    if kind == "LayerNorm" and maps:
        size = tuple(layer.args["size"])
        if reading:
            raise UnsupportedError(
                f"a {target} LayerNorm{size} after conv layers normalises the channels of the feature "
                "maps, which no Flux LayerNorm does (it normalises their first dims, the width)"
            )
        raise UnsupportedError(
            f"LayerNorm{size} after conv layers normalises Flux's first dims of their feature maps, "
            f"which target={target!r} lays out channels-last (it would normalise the channels): "
            "target='equinox' ports it"
        )
    return maps

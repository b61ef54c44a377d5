"""The PyTorch target's readers: a ``torch.nn`` module read as the Flux layer it stands for.

One reader per Flux layer kind, registered with the layer registry (the kind's tensors are the
builders of :mod:`._torch`, which needs no torch). A module is read by the reader of its class
(the nearest registered class in its MRO); an activation module right after a layer that takes
one becomes that layer's ``σ``. This module imports torch at its top: only
``_torch.layer_of_module``, the dispatch point, imports it, when it is handed a torch module.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import torch.nn as nn

from .._errors import UnsupportedError
from .._port._registry import KINDS, NO_TORCH_EQUIVALENT, TORCH_MODULES, register
from .._port._spec import Layer

ACTIVATIONS = {
    "ReLU": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "GELU": "gelu",
    "ELU": "elu",
    "SELU": "selu",
    "Softplus": "softplus",
    "LeakyReLU": "leakyrelu",
    "SiLU": "swish",
    "Hardtanh": "hardtanh",
    "ReLU6": "relu6",
    "CELU": "celu",
    "Mish": "mish",
    "Hardswish": "hardswish",
    "Hardsigmoid": "hardsigmoid",  # (torch's x/6 + 1/2 clamped to [0, 1], NNlib's hardσ)
    "Softsign": "softsign",
    "LogSigmoid": "logsigmoid",
    "Tanhshrink": "tanhshrink",
    "Softshrink": "softshrink",
}
"""torch activation modules -> the NNlib name of the same function (with the options of
:data:`_DEFAULT_OPTIONS`: any other value computes another function)."""

# The option values under which a torch module computes its NNlib namesake (NNlib's leakyrelu has
# slope 0.01, elu α = 1, hardtanh clamps to [-1, 1]; torch's Softplus switches to x above
# threshold 20, where log1p(exp(x)) and x agree to float precision).
_DEFAULT_OPTIONS: dict[str, dict[str, Any]] = {
    "ELU": {"alpha": 1.0},
    "LeakyReLU": {"negative_slope": 0.01},
    "Softplus": {"beta": 1.0, "threshold": 20.0},
    "Hardtanh": {"min_val": -1.0, "max_val": 1.0},
    "CELU": {"alpha": 1.0},
    "Softshrink": {"lambd": 0.5},
}


def activation_name(sub: Any) -> str:
    """The NNlib name of a torch activation module, refusing options that change its function
    (``LeakyReLU(0.2)`` is not NNlib's ``leakyrelu``). ``GELU()`` (exact, erf) is ``gelu_erf``,
    ``GELU(approximate="tanh")`` NNlib's ``gelu``."""
    name = type(sub).__name__
    if name == "GELU":
        return "gelu" if getattr(sub, "approximate", "none") == "tanh" else "gelu_erf"
    for option, default in _DEFAULT_OPTIONS.get(name, {}).items():
        value = getattr(sub, option, default)
        if float(value) != default:
            raise UnsupportedError(
                f"torch {name}({option}={value}) computes another function than NNlib's "
                f"{ACTIVATIONS[name]} ({option} = {default}): no Flux activation to write it as"
            )
    return ACTIVATIONS[name]


def read_sequential(module: Any) -> Iterator[Layer]:
    """The Flux layers of an ``nn.Sequential`` (or of one module), activations folded into ``σ``."""
    # (iterating the Sequential, not ``children()``: a module used twice, ``Sequential(lin, relu,
    # lin)``, is two layers to Flux and two groups of its state_dict; ``children()`` names it once)
    items = list(module) if isinstance(module, nn.Sequential) else [module]
    pending: Layer | None = None
    for sub in items:
        name = type(sub).__name__
        if name in ACTIVATIONS and pending is not None and pending.args.get("σ") == "identity":
            pending = dataclasses.replace(pending, args={**pending.args, "σ": activation_name(sub)})
            continue
        if pending is not None:
            yield pending
        pending = read_module(sub)
    if pending is not None:
        yield pending


def read_module(sub: Any) -> Layer:
    """One torch module as its Flux layer, by the reader its class registered."""
    for cls in type(sub).__mro__:
        reader = _BY_CLASS.get(cls)
        if reader is not None:
            return reader(sub)
    name = type(sub).__name__
    if name in ACTIVATIONS:
        return Layer("function", {"name": activation_name(sub)})
    raise UnsupportedError(f"torch module {name} has no Flux counterpart here (give the architecture text)")


# --- one reader per kind -----------------------------------------------------------------------------


def _chain(sub: Any) -> Layer:
    return Layer("Chain", children=tuple(read_sequential(sub)))


def _dense(sub: Any) -> Layer:
    return Layer(
        "Dense",
        {"in": sub.in_features, "out": sub.out_features, "bias": sub.bias is not None, "σ": "identity"},
    )


def _bilinear(sub: Any) -> Layer:
    args = {"in": (sub.in1_features, sub.in2_features), "out": sub.out_features, "bias": sub.bias is not None}
    return Layer("Bilinear", {**args, "σ": "identity"})


def _pairs(values: Any) -> tuple[int, ...]:
    """torch's symmetric per-axis padding as Flux's ``(lo₁, hi₁, …)`` over Julia dims."""
    return tuple(p for p in values[::-1] for _ in range(2))


def _conv_args(sub: Any) -> dict[str, Any]:
    return {
        "kernel": tuple(sub.kernel_size[::-1]),
        "in": sub.in_channels,
        "out": sub.out_channels,
        "stride": tuple(sub.stride[::-1]),
        "pad": _pairs(sub.padding),
        "dilation": tuple(sub.dilation[::-1]),
        "groups": sub.groups,
        "bias": sub.bias is not None,
        "σ": "identity",
    }


def _conv(sub: Any) -> Layer:
    if sub.padding_mode != "zeros" or isinstance(sub.padding, str):
        raise UnsupportedError(
            f"torch {type(sub).__name__} padding {sub.padding!r}/{sub.padding_mode!r} has no Flux rule here"
        )
    return Layer("Conv", _conv_args(sub))


def _conv_transpose(sub: Any) -> Layer:
    if sub.padding_mode != "zeros":
        raise UnsupportedError(
            f"torch {type(sub).__name__} padding_mode {sub.padding_mode!r} has no Flux rule"
        )
    return Layer("ConvTranspose", {**_conv_args(sub), "outpad": tuple(sub.output_padding[::-1])})


def _norm_args(sub: Any) -> dict[str, Any]:
    return {
        "channels": sub.num_features,
        "ϵ": float(sub.eps),
        "momentum": float(sub.momentum if sub.momentum is not None else 0.1),
        "affine": sub.affine,
        "track_stats": sub.track_running_stats,
        "σ": "identity",
    }


def _batchnorm(sub: Any) -> Layer:
    return Layer("BatchNorm", _norm_args(sub))


def _instancenorm(sub: Any) -> Layer:
    return Layer("InstanceNorm", _norm_args(sub))


def _groupnorm(sub: Any) -> Layer:
    args = {"channels": sub.num_channels, "groups": sub.num_groups, "ϵ": float(sub.eps), "affine": sub.affine}
    return Layer("GroupNorm", {**args, "track_stats": False, "σ": "identity"})


def _layernorm(sub: Any) -> Layer:
    args = {"size": tuple(sub.normalized_shape[::-1]), "ϵ": float(sub.eps), "affine": sub.elementwise_affine}
    return Layer("LayerNorm", {**args, "σ": "identity"})


def _embedding(sub: Any) -> Layer:
    if sub.max_norm is not None:  # (it renormalises the rows it looks up: another function)
        raise UnsupportedError(f"torch Embedding(max_norm={sub.max_norm}) has no Flux counterpart")
    return Layer("Embedding", {"in": sub.num_embeddings, "out": sub.embedding_dim})


def _recurrent(sub: Any) -> Layer:
    name = type(sub).__name__
    if sub.num_layers != 1 or sub.bidirectional or getattr(sub, "proj_size", 0):
        raise UnsupportedError(
            f"torch {name}(num_layers={sub.num_layers}, bidirectional={sub.bidirectional}, "
            f"proj_size={getattr(sub, 'proj_size', 0)}): a Flux {name} is one layer, one direction, "
            "no projection (stack Flux layers in a Chain and give the architecture text)"
        )
    args: dict[str, Any] = {"in": sub.input_size, "out": sub.hidden_size}
    if name == "RNN":
        args["σ"] = sub.nonlinearity
    if not sub.bias:
        args["bias"] = False
    return Layer(name, args)


def _cell(sub: Any) -> Layer:
    """``torch.nn.RNNCell``/``LSTMCell``/``GRUCell``: Flux ≥ 0.15's cell of the same name (one step,
    ``cell(x, h)``, the same tensors as the layer's, without ``_l0``)."""
    args: dict[str, Any] = {"in": sub.input_size, "out": sub.hidden_size}
    if isinstance(sub, nn.RNNCell):
        args["σ"] = sub.nonlinearity
    if not sub.bias:
        args["bias"] = False
    return Layer(type(sub).__name__, args)


def _attention(sub: Any) -> Layer:
    if sub.bias_k is not None or sub.add_zero_attn:
        raise UnsupportedError(
            "torch MultiheadAttention with add_bias_kv/add_zero_attn has no Flux counterpart"
        )
    e = sub.embed_dim
    return Layer(
        "MultiHeadAttention",
        {
            "q_in": e, "k_in": sub.kdim, "v_in": sub.vdim, "qk_dim": e, "v_dim": e, "out": e,
            "nheads": sub.num_heads, "bias": sub.in_proj_bias is not None, "dropout_prob": float(sub.dropout),
        },
    )  # fmt: skip


def _ntuple(value: Any, n: int) -> tuple[int, ...]:
    return tuple(value) if isinstance(value, (tuple, list)) else (int(value),) * n


def _pool(sub: Any) -> Layer:
    name = type(sub).__name__
    n = int(name[-2])
    # (NNlib's pools: no dilation, floor of the output size, a mean over the whole window, padding
    # included; anything else is another function or another output size)
    refused = []
    if _ntuple(getattr(sub, "dilation", 1), n) != (1,) * n:
        refused.append(f"dilation={sub.dilation!r}")
    if sub.ceil_mode:
        refused.append("ceil_mode=True")
    if getattr(sub, "return_indices", False):
        refused.append("return_indices=True")
    if getattr(sub, "divisor_override", None) is not None:
        refused.append(f"divisor_override={sub.divisor_override}")
    if not getattr(sub, "count_include_pad", True) and any(_ntuple(sub.padding, n)):
        refused.append("count_include_pad=False")
    if refused:
        raise UnsupportedError(f"torch {name}({', '.join(refused)}) has no Flux counterpart")
    k = _ntuple(sub.kernel_size, n)[::-1]
    stride = _ntuple(sub.stride if sub.stride is not None else sub.kernel_size, n)[::-1]
    pad = _pairs(_ntuple(sub.padding, n))
    return Layer("MaxPool" if "Max" in name else "MeanPool", {"k": k, "stride": stride, "pad": pad})


def _flatten(sub: Any) -> Layer:
    if (sub.start_dim, sub.end_dim) != (1, -1):  # (Flux.flatten keeps the batch, merges the rest)
        raise UnsupportedError(
            f"torch Flatten(start_dim={sub.start_dim}, end_dim={sub.end_dim}) is not Flux.flatten "
            "(start_dim=1, end_dim=-1)"
        )
    return Layer("flatten")


def _dropout(sub: Any) -> Layer:
    return Layer("Dropout", {"p": float(sub.p)})


def _no_module(kind: str) -> Callable[[Any], Layer]:
    """The reader of a kind no torch module stands for: its tensors (none, or those of its
    children) still move through the architecture text."""

    def refuse(sub: Any) -> Layer:
        raise UnsupportedError(
            f"no torch module reads as Flux {kind}: give the architecture text (docs/pytorch.md)"
        )

    return refuse


def _kinds_of(*classes: type) -> tuple[str, ...]:
    """The kinds whose registry record names one of ``classes`` as its PyTorch module."""
    names = {cls.__name__ for cls in classes}
    return tuple(kind for kind, modules in TORCH_MODULES.items() if names & set(modules))


_ARRAY_READERS: list[tuple[tuple[type, ...], Callable[[Any], Layer]]] = [
    ((nn.Linear,), _dense),
    ((nn.Bilinear,), _bilinear),
    ((nn.Conv1d, nn.Conv2d, nn.Conv3d), _conv),
    ((nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d), _conv_transpose),
    ((nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d), _batchnorm),
    ((nn.InstanceNorm1d, nn.InstanceNorm2d, nn.InstanceNorm3d), _instancenorm),
    ((nn.GroupNorm,), _groupnorm),
    ((nn.LayerNorm,), _layernorm),
    ((nn.Embedding,), _embedding),
    ((nn.RNN, nn.LSTM, nn.GRU), _recurrent),
    ((nn.RNNCell, nn.LSTMCell, nn.GRUCell), _cell),
    ((nn.MultiheadAttention,), _attention),
]
_READERS: list[tuple[tuple[str, ...], tuple[type, ...], Callable[[Any], Layer]]] = [
    *((_kinds_of(*classes), classes, reader) for classes, reader in _ARRAY_READERS),
    (("Chain",), (nn.Sequential,), _chain),
    (
        ("MaxPool", "MeanPool"),
        (nn.MaxPool1d, nn.MaxPool2d, nn.MaxPool3d, nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d),
        _pool,
    ),
    (("flatten",), (nn.Flatten,), _flatten),
    (("Dropout",), (nn.Dropout,), _dropout),
]

_BY_CLASS: dict[type, Callable[[Any], Layer]] = {
    cls: reader for _, classes, reader in _READERS for cls in classes
}

for _kinds, _classes, _reader in _READERS:
    register("torch", _kinds, reader=_reader)
for _kind in sorted(set(KINDS) - {k for kinds, _, _ in _READERS for k in kinds} - set(NO_TORCH_EQUIVALENT)):
    register("torch", _kind, reader=read_module if _kind == "function" else _no_module(_kind))

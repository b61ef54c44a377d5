"""A numpy re-implementation of Flux/NNlib forward passes, on Julia-shaped arrays.

This is the independent reference every porting test compares against: it is written from Flux's
and NNlib's definitions (``NNlib src/impl/conv_direct.jl``, ``pooling_direct.jl``, ``src/conv.jl``,
``src/attention.jl``; Flux ``src/layers/{basic,conv,normalise,recurrent,attention}.jl``), not from
any Python framework, and it is checked against NNlib's own known answers (test_flux_reference.py).

Arrays are **Julia-shaped** (docs/porting.md §Data layout): ``w[i1-1, …, in-1] == W[i1, …, in]``; conv data is
``(s1, …, s_nsp, C, N)``; Dense data is ``(features, batch…)``. Everything is computed in float64.

``forward(layer, params, x)`` dispatches on the shared :class:`~treexchange._port._spec.Layer` IR;
``params`` is the layer's ``Flux.state`` value tree (``tx.NamedTuple``/dict/tuple, or the
``JuliaStruct`` of a whole-model file). Hyper-parameters come from ``layer.args`` first, then from
the state (stride, pad, ϵ … are stored there), then from Flux's defaults.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from treexchange import JuliaStruct
from treexchange._port._spec import Layer

Array = np.ndarray


# --- small helpers -----------------------------------------------------------------------------


def field(params: Any, name: str, default: Any = None) -> Any:
    """``params.name`` for a NamedTuple/dict/JuliaStruct state, else ``default``."""
    if isinstance(params, JuliaStruct):
        return params.fields.get(name, default)
    if isinstance(params, Mapping):
        return params.get(name, default)
    return default


def _array(value: Any) -> Array | None:
    """A state array as float64, or None for ``false``/``nothing``/absent."""
    if value is None or isinstance(value, (bool, np.bool_)) or (isinstance(value, tuple) and not value):
        return None
    return np.asarray(value, dtype=np.float64)


def _hyper(layer: Layer, params: Any, name: str, default: Any) -> Any:
    value = layer.arg(name)
    if value is None:
        value = field(params, name)
    if value is None or (isinstance(value, tuple) and not value):
        return default
    return value


def _ntuple(value: Any, n: int) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        return (int(value),) * n
    return tuple(int(v) for v in value)


def _pad2n(value: Any, n: int) -> tuple[int, ...]:
    """NNlib's padding expansion: Int -> all, N-tuple -> symmetric per dim, 2N-tuple as is."""
    if isinstance(value, (int, np.integer)):
        return (int(value),) * (2 * n)
    value = tuple(int(v) for v in value)
    if len(value) == n:
        return tuple(v for v in value for _ in range(2))
    if len(value) != 2 * n:
        raise ValueError(f"pad {value} is neither {n} nor {2 * n} long")
    return value


def era_tuple(flux: str) -> tuple[int, ...]:
    """``"0.16.11"`` -> ``(0, 16, 11)``."""
    return tuple(int(p) for p in flux.split("."))


# --- activations (NNlib definitions) -----------------------------------------------------------


def _sigmoid(x: Array) -> Array:
    return np.where(x >= 0, 1 / (1 + np.exp(-np.abs(x))), np.exp(-np.abs(x)) / (1 + np.exp(-np.abs(x))))


def _softplus(x: Array) -> Array:
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


def softmax(x: Array, axis: int = 0) -> Array:
    """NNlib ``softmax(x; dims=1)``: over Julia dim 1 (numpy axis 0) by default."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _logsoftmax(x: Array) -> Array:
    shifted = x - x.max(axis=0, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=0, keepdims=True))


_SELU_L, _SELU_A = 1.0507009873554804934193349852946, 1.6732632423543772848170429916717
_GELU_C = math.sqrt(2 / math.pi)
_erf = np.vectorize(math.erf)

ACTIVATIONS: dict[str, Callable[[Array], Array]] = {
    "identity": lambda x: x,
    "relu": lambda x: np.maximum(x, 0),
    "sigmoid": _sigmoid,
    "sigmoid_fast": _sigmoid,
    "tanh": np.tanh,
    "tanh_fast": np.tanh,
    "leakyrelu": lambda x: np.where(x > 0, x, 0.01 * x),
    "relu6": lambda x: np.clip(x, 0, 6),
    "elu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "celu": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0))),
    "selu": lambda x: _SELU_L * np.where(x > 0, x, _SELU_A * np.expm1(np.minimum(x, 0))),
    # NNlib's `gelu` is the tanh approximation (renamed gelu_tanh; gelu_erf is the exact one).
    "gelu": lambda x: 0.5 * x * (1 + np.tanh(_GELU_C * (x + 0.044715 * x**3))),
    "gelu_tanh": lambda x: 0.5 * x * (1 + np.tanh(_GELU_C * (x + 0.044715 * x**3))),
    "gelu_erf": lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2))),
    "swish": lambda x: x * _sigmoid(x),
    "hardswish": lambda x: x * np.clip((x + 3) / 6, 0, 1),
    "softplus": _softplus,
    "softsign": lambda x: x / (1 + np.abs(x)),
    "logsigmoid": lambda x: -_softplus(-x),
    "hardsigmoid": lambda x: np.clip((x + 3) / 6, 0, 1),
    "hardtanh": lambda x: np.clip(x, -1, 1),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "tanhshrink": lambda x: x - np.tanh(x),
    "lisht": lambda x: x * np.tanh(x),
    "trelu": lambda x: np.where(x <= 1, 0, x),
    "softshrink": lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)),
    "logcosh": lambda x: np.log(np.cosh(x.astype(np.float64))),
    "gelu_sigmoid": lambda x: x * _sigmoid(math.sqrt(8 / math.pi) * (x + 0.044715 * x**3)),
    "softmax": softmax,
    "logsoftmax": _logsoftmax,
    # Base's math functions of a number (Dense(2 => 64, sin), x -> sin.(x))
    **{
        name: getattr(np, {"atan": "arctan", "asinh": "arcsinh"}.get(name, name))
        for name in ("sin", "cos", "tan", "exp", "expm1", "abs", "sinh", "cosh", "atan", "asinh", "cbrt")
    },
}
ALIASES = {"σ": "sigmoid", "hardσ": "hardsigmoid", "logσ": "logsigmoid", "thresholdrelu": "trelu"}


def activation(name: str | None) -> Callable[[Array], Array]:
    """The NNlib activation called ``name`` (``None`` = identity)."""
    name = ALIASES.get(name or "identity", name or "identity")
    return ACTIVATIONS[name]


# --- convolution (NNlib conv_direct semantics) -------------------------------------------------


def _out_size(size: int, k: int, s: int, lo: int, hi: int, d: int) -> int:
    return (size + lo + hi - (k - 1) * d - 1) // s + 1


def conv(
    x: Array,
    w: Array,
    *,
    stride: Any = 1,
    pad: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    flipped: bool = False,
) -> Array:
    """NNlib ``conv(x, w; stride, pad, dilation, groups, flipped)`` on Julia-shaped arrays.

    ``flipped=False`` (NNlib's default, ``flipkernel=false``) is a TRUE convolution: kernel
    index ``k`` meets weight index ``K-1-k`` (``kproj(k, M, Val(false)) = M - k + 1``).
    ``x`` is ``(s…, Cin, N)``, ``w`` is ``(k…, Cin÷groups, Cout)``.
    """
    x = np.asarray(x, np.float64)
    w = np.asarray(w, np.float64)
    nsp = x.ndim - 2
    s, d, p = _ntuple(stride, nsp), _ntuple(dilation, nsp), _pad2n(pad, nsp)
    k = w.shape[:nsp]
    cin, n = x.shape[nsp], x.shape[nsp + 1]
    cout = w.shape[-1]
    if cin != w.shape[nsp] * groups or cout % groups:
        raise ValueError(f"channels: x has {cin}, w {w.shape} with groups={groups}")
    xp = np.pad(x, [(p[2 * i], p[2 * i + 1]) for i in range(nsp)] + [(0, 0), (0, 0)])
    out = tuple(_out_size(x.shape[i], k[i], s[i], p[2 * i], p[2 * i + 1], d[i]) for i in range(nsp))
    cig, cog = cin // groups, cout // groups
    y = np.zeros((*out, groups, cog, n))
    for kk in itertools.product(*(range(ki) for ki in k)):
        window = tuple(slice(kk[i] * d[i], kk[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(nsp))
        xs = xp[window].reshape(*out, groups, cig, n)
        widx = kk if flipped else tuple(k[i] - 1 - kk[i] for i in range(nsp))
        wk = w[widx].reshape(cig, groups, cog)
        y += np.einsum("...jin,ijm->...jmn", xs, wk)
    return y.reshape(*out, cout, n)


def conv_data_adjoint(
    dy: Array,
    w: Array,
    x_size: Sequence[int],
    *,
    stride: Any = 1,
    pad: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    flipped: bool = False,
) -> Array:
    """NNlib ``∇conv_data(dy, w, cdims)``: the exact adjoint of :func:`conv` in ``x``.

    ``x_size`` is the spatial size of the forward input; ``dy`` is ``(out…, Cout, N)``.
    """
    dy = np.asarray(dy, np.float64)
    w = np.asarray(w, np.float64)
    nsp = dy.ndim - 2
    s, d, p = _ntuple(stride, nsp), _ntuple(dilation, nsp), _pad2n(pad, nsp)
    k = w.shape[:nsp]
    out = dy.shape[:nsp]
    n, cout = dy.shape[-1], w.shape[-1]
    cig, cog = w.shape[nsp], cout // groups
    padded = tuple(x_size[i] + p[2 * i] + p[2 * i + 1] for i in range(nsp))
    dxp = np.zeros((*padded, groups, cig, n))
    dyg = dy.reshape(*out, groups, cog, n)
    for kk in itertools.product(*(range(ki) for ki in k)):
        window = tuple(slice(kk[i] * d[i], kk[i] * d[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(nsp))
        widx = kk if flipped else tuple(k[i] - 1 - kk[i] for i in range(nsp))
        wk = w[widx].reshape(cig, groups, cog)
        dxp[window] += np.einsum("...jmn,ijm->...jin", dyg, wk)
    crop = tuple(slice(p[2 * i], p[2 * i] + x_size[i]) for i in range(nsp))
    return dxp[crop].reshape(*x_size, groups * cig, n)


def conv_transpose(
    x: Array,
    w: Array,
    *,
    stride: Any = 1,
    pad: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    outpad: Any = 0,
) -> Array:
    """Flux ``ConvTranspose`` without bias: ``∇conv_data`` of the forward conv from out to in channels.

    ``w`` is ``(k…, Cout÷groups, Cin)``; the output size is
    ``(I-1)·stride - lo - hi + dilation·(k-1) + 1 + outpad`` (Flux ``conv_transpose_dims``).
    """
    nsp = x.ndim - 2
    s, d, p, op = _ntuple(stride, nsp), _ntuple(dilation, nsp), _pad2n(pad, nsp), _ntuple(outpad, nsp)
    k = w.shape[:nsp]
    size = tuple(
        (x.shape[i] - 1) * s[i] - p[2 * i] - p[2 * i + 1] + d[i] * (k[i] - 1) + 1 + op[i] for i in range(nsp)
    )
    return conv_data_adjoint(x, w, size, stride=s, pad=p, dilation=d, groups=groups)


# --- pooling (NNlib pooling_direct semantics) ---------------------------------------------------


def pool(x: Array, k: Sequence[int], *, stride: Any = None, pad: Any = 0, mode: str = "max") -> Array:
    """NNlib ``maxpool``/``meanpool``: windows ``k``, stride defaulting to ``k`` (Flux), pad 2N.

    Max pads with −∞; mean divides by ``prod(k)`` including padding (``count_include_pad``).
    """
    x = np.asarray(x, np.float64)
    nsp = x.ndim - 2
    k = tuple(int(v) for v in k)
    s = _ntuple(k if stride is None else stride, nsp)
    p = _pad2n(pad, nsp)
    fill = -np.inf if mode == "max" else 0.0
    xp = np.pad(x, [(p[2 * i], p[2 * i + 1]) for i in range(nsp)] + [(0, 0), (0, 0)], constant_values=fill)
    out = tuple(_out_size(x.shape[i], k[i], s[i], p[2 * i], p[2 * i + 1], 1) for i in range(nsp))
    acc = np.full((*out, *x.shape[nsp:]), fill)
    for kk in itertools.product(*(range(ki) for ki in k)):
        window = tuple(slice(kk[i], kk[i] + (out[i] - 1) * s[i] + 1, s[i]) for i in range(nsp))
        acc = np.maximum(acc, xp[window]) if mode == "max" else acc + xp[window]
    return acc if mode == "max" else acc / math.prod(k)


def _pool_layer(layer: Layer, params: Any, x: Array, mode: str) -> Array:
    """Flux ``MaxPool``/``MeanPool``: hyper-parameters from the Layer, or the ≥ 0.15 state."""
    k = _hyper(layer, params, "k", None)
    return pool(
        x, k, stride=_hyper(layer, params, "stride", k), pad=_hyper(layer, params, "pad", 0), mode=mode
    )


def adaptive_pool(x: Array, out: Sequence[int], mode: str) -> Array:
    """Flux ``AdaptiveMaxPool``/``AdaptiveMeanPool``: uniform windows ``stride = in ÷ out``."""
    nsp = x.ndim - 2
    stride = tuple(x.shape[i] // out[i] for i in range(nsp))
    k = tuple(x.shape[i] - (out[i] - 1) * stride[i] for i in range(nsp))
    return pool(x, k, stride=stride, mode=mode)


def global_pool(x: Array, mode: str) -> Array:
    """Flux ``GlobalMaxPool``/``GlobalMeanPool``: spatial dims reduced to size 1."""
    axes = tuple(range(x.ndim - 2))
    return x.max(axis=axes, keepdims=True) if mode == "max" else x.mean(axis=axes, keepdims=True)


def flatten(x: Array) -> Array:
    """``MLUtils.flatten``: ``reshape(x, :, size(x)[end])``, column-major."""
    return np.reshape(x, (-1, x.shape[-1]), order="F")


# --- normalisation -----------------------------------------------------------------------------


def _channel_shape(x: Array, channel_axis: int) -> tuple[int, ...]:
    return tuple(x.shape[channel_axis] if a == channel_axis else 1 for a in range(x.ndim))


def _affine(layer: Layer, params: Any, x: Array, channel_axis: int) -> Array:
    gamma, beta = _array(field(params, "γ")), _array(field(params, "β"))
    shape = _channel_shape(x, channel_axis)
    if gamma is not None:
        x = x * gamma.reshape(shape)
    if beta is not None:
        x = x + beta.reshape(shape)
    return activation(layer.arg("σ"))(x)


def batchnorm(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``BatchNorm`` in test mode: ``γ (x−μ)/√(σ²+ϵ) + β`` over every dim but N-1."""
    eps = float(_hyper(layer, params, "ϵ", 1e-5))
    cax = x.ndim - 2 if x.ndim > 1 else 0
    mu, var = _array(field(params, "μ")), _array(field(params, "σ²"))
    shape = _channel_shape(x, cax)
    if mu is None or var is None:  # track_stats=false: batch statistics even in test mode
        axes = tuple(a for a in range(x.ndim) if a != cax)
        m, v = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    else:
        m, v = mu.reshape(shape), var.reshape(shape)
    return _affine(layer, params, (x - m) / np.sqrt(v + eps), cax)


def instancenorm(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``InstanceNorm``: per sample and channel over the spatial dims (batch statistics)."""
    eps = float(_hyper(layer, params, "ϵ", 1e-5))
    cax = x.ndim - 2
    mu, var = _array(field(params, "μ")), _array(field(params, "σ²"))
    if mu is not None and var is not None:  # track_stats=true uses running stats in test mode
        shape = _channel_shape(x, cax)
        m, v = mu.reshape(shape), var.reshape(shape)
    else:
        axes = tuple(range(x.ndim - 2))
        m, v = x.mean(axis=axes, keepdims=True), x.var(axis=axes, keepdims=True)
    return _affine(layer, params, (x - m) / np.sqrt(v + eps), cax)


def groupnorm(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``GroupNorm``: channels in ``G`` contiguous blocks (column-major reshape ``C÷G, G``)."""
    eps = float(_hyper(layer, params, "ϵ", 1e-5))
    groups = int(layer.arg("groups") or field(params, "G") or 1)  # IR arg `groups`, state field `G`
    cax = x.ndim - 2
    c = x.shape[cax]
    xg = np.reshape(x, (*x.shape[:cax], c // groups, groups, x.shape[-1]), order="F")
    axes = tuple(range(cax + 1))
    m, v = xg.mean(axis=axes, keepdims=True), xg.var(axis=axes, keepdims=True)
    y = np.reshape((xg - m) / np.sqrt(v + eps), x.shape, order="F")
    return _affine(layer, params, y, cax)


def layernorm(layer: Layer, params: Any, x: Array, flux: str) -> Array:
    """Flux ``LayerNorm`` over dims ``1:length(size)``, with the ϵ of the Flux era (spec §2.11)."""
    size = tuple(int(v) for v in _hyper(layer, params, "size", (x.shape[0],)))
    eps = float(_hyper(layer, params, "ϵ", 1e-5))
    axes = tuple(range(len(size)))
    m = x.mean(axis=axes, keepdims=True)
    var = x.var(axis=axes, keepdims=True)
    era = era_tuple(flux)
    if era < (0, 15):
        y = (x - m) / (np.sqrt(var) + eps)  # ≤ 0.14: ϵ added to the standard deviation
    elif era < (0, 16, 11):
        y = (x - m) / np.sqrt(var + eps**2)  # 0.15.0–0.16.10: √(σ² + ϵ²)
    else:
        y = (x - m) / np.sqrt(var + eps)  # 0.16.11: NNlib.normalise
    diag = field(params, "diag")
    scale = _array(field(diag, "scale", field(diag, "α")))
    bias = _array(field(diag, "bias", field(diag, "β")))
    if scale is not None:
        y = y * scale.reshape(scale.shape + (1,) * (y.ndim - scale.ndim))
    if bias is not None:
        y = y + bias.reshape(bias.shape + (1,) * (y.ndim - bias.ndim))
    return activation(layer.arg("σ"))(y)


# --- basic layers ------------------------------------------------------------------------------


def dense(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``Dense``: ``σ.(W*x .+ b)`` over ``reshape(x, in, :)`` (``W``/``b`` before Flux 0.12)."""
    w = _array(field(params, "weight", field(params, "W")))
    assert w is not None, "Dense state without weight"
    b = _array(field(params, "bias", field(params, "b")))
    flat = x.reshape((x.shape[0], -1), order="F")
    y = w @ flat
    if b is not None:
        y = y + b.reshape(-1, 1)
    return activation(layer.arg("σ"))(y).reshape((w.shape[0], *x.shape[1:]), order="F")


def bilinear(layer: Layer, params: Any, x: Any) -> Array:
    """Flux ``Bilinear``: ``Z[o] = Σᵢⱼ W[o,i,j] x[i] y[j] + b[o]``; a single input is used twice."""
    xa, xb = x if isinstance(x, tuple) else (x, x)
    w = _array(field(params, "weight"))
    b = _array(field(params, "bias"))
    z = np.einsum("oij,ib,jb->ob", w, np.asarray(xa, np.float64), np.asarray(xb, np.float64))
    if b is not None:
        z = z + b.reshape(-1, 1)
    return activation(layer.arg("σ"))(z)


def scale(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``Scale``: ``σ.(scale .* x .+ bias)``."""
    s = _array(field(params, "scale"))
    b = _array(field(params, "bias"))
    assert s is not None
    y = x * s.reshape(s.shape + (1,) * (x.ndim - s.ndim))
    if b is not None:
        y = y + b.reshape(b.shape + (1,) * (x.ndim - b.ndim))
    return activation(layer.arg("σ"))(y)


def embedding(params: Any, ids: Array) -> Array:
    """Flux ``Embedding``: ``W[:, ids]`` with 1-based ids -> ``(dim, size(ids)…)``."""
    w = _array(field(params, "weight"))
    assert w is not None
    ids = np.asarray(ids)
    if ids.min() < 1 or ids.max() > w.shape[1]:
        raise IndexError(f"token ids must be in 1:{w.shape[1]} (Julia is 1-based)")
    return w[:, ids - 1]


# --- convolution layers ------------------------------------------------------------------------


def _conv_hyper(layer: Layer, params: Any, nsp: int) -> dict[str, Any]:
    return {
        "stride": _ntuple(_hyper(layer, params, "stride", 1), nsp),
        "pad": _pad2n(_hyper(layer, params, "pad", 0), nsp),
        "dilation": _ntuple(_hyper(layer, params, "dilation", 1), nsp),
    }


def _bias_act(layer: Layer, params: Any, y: Array) -> Array:
    b = _array(field(params, "bias"))
    if b is not None:
        y = y + b.reshape(_channel_shape(y, y.ndim - 2))
    return activation(layer.arg("σ"))(y)


def conv_layer(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``Conv``/``CrossCor``/``DepthwiseConv``: ``σ.(conv(x, W, cdims) .+ b)``."""
    w = _array(field(params, "weight"))
    assert w is not None
    nsp = w.ndim - 2
    groups = int(_hyper(layer, params, "groups", 1))
    if layer.kind == "DepthwiseConv" and field(params, "groups") is None and layer.arg("groups") is None:
        # Flux ≤ 0.12 DepthwiseConv: weight (k…, multiplier, Cin); output channel (c-1)·mult + m.
        groups = w.shape[-1]
        w = np.reshape(w, (*w.shape[:nsp], 1, -1), order="F")
    y = conv(x, w, groups=groups, flipped=layer.kind == "CrossCor", **_conv_hyper(layer, params, nsp))
    return _bias_act(layer, params, y)


def conv_transpose_layer(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``ConvTranspose``: ``σ.(∇conv_data(x, W, cdims) .+ b)``, W ``(k…, Cout÷g, Cin)``."""
    w = _array(field(params, "weight"))
    assert w is not None
    nsp = w.ndim - 2
    y = conv_transpose(
        x,
        w,
        groups=int(_hyper(layer, params, "groups", 1)),
        outpad=_ntuple(_hyper(layer, params, "outpad", 0), nsp),
        **_conv_hyper(layer, params, nsp),
    )
    return _bias_act(layer, params, y)


# --- recurrent layers --------------------------------------------------------------------------


def _split(v: Array, n: int) -> list[Array]:
    """Flux's gate blocks ``gate(h, k) = (1:h) .+ h*(k-1)`` along dim 1."""
    h = v.shape[0] // n
    return [v[i * h : (i + 1) * h] for i in range(n)]


def rnn_cell_step(kind: str, cell: Any, sigma: str | None, x: Array, state: Any) -> tuple[Array, Any]:
    """One step of Flux's ``RNNCell``/``LSTMCell``/``GRUCell``/``GRUv3Cell``: ``(output, new_state)``.

    ``x`` is ``(in, B)``; the state is ``h`` ``(H, B)`` or ``(h, c)`` for LSTM.
    """
    wi = _array(field(cell, "Wi"))
    wh = _array(field(cell, "Wh"))
    b = _array(field(cell, "bias", field(cell, "b")))
    assert wi is not None and wh is not None
    if b is None:
        b = np.zeros(wi.shape[0])
    b = b.reshape(-1, 1)
    if kind == "RNN":
        h = activation(sigma or "tanh")(wi @ x + wh @ state + b)
        return h, h
    if kind == "LSTM":
        h, c = state
        i, f, g, o = _split(wi @ x + wh @ h + b, 4)
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        return h, (h, c)
    h = state
    gx, bs = _split(wi @ x, 3), _split(b, 3)
    # (GRUv3: Flux ≤ 0.14's Wh is 2H×H; Flux ≥ 0.15 allocates 3H×H, chunks Wh*h in 3, uses two)
    gh = _split(wh @ h, 3 if kind == "GRU" or wh.shape[0] == wi.shape[0] else 2)
    r = _sigmoid(gx[0] + gh[0] + bs[0])
    z = _sigmoid(gx[1] + gh[1] + bs[1])
    if kind == "GRU":
        cand = np.tanh(gx[2] + r * gh[2] + bs[2])
    else:  # GRUv3: the paper's form, Wh_h̃ applied to r .* h
        wht = _array(field(cell, "Wh_h̃"))
        assert wht is not None
        cand = np.tanh(gx[2] + wht @ (r * h) + bs[2])
    h = (1 - z) * cand + z * h
    return h, h


def bare_cell(layer: Layer, params: Any, x: Array, state: Any) -> tuple[Array, Any]:
    """Flux ≥ 0.15's bare ``RNNCell``/``LSTMCell``/``GRUCell``/``GRUv3Cell`` called ``cell(x, state)``
    with its ``Flux.state`` ``params`` (the cell's own fields): Flux 0.16's ``(output, new state)``
    (Flux 0.15 returns the new state alone). ``x`` is ``(in, B)``, the state ``h`` ``(H, B)`` or
    LSTM's ``(h, c)``."""
    kind = layer.kind.removesuffix("Cell")
    given = (
        tuple(np.asarray(s, np.float64) for s in state) if kind == "LSTM" else np.asarray(state, np.float64)
    )
    return rnn_cell_step(kind, params, layer.arg("σ"), np.asarray(x, np.float64), given)


def recurrent(layer: Layer, params: Any, x: Array) -> Array:
    """Flux ``RNN``/``LSTM``/``GRU``/``GRUv3`` over a sequence ``(in, L, B)`` -> ``(H, L, B)``.

    Flux ≤ 0.14 (``Recur``, state with ``state0``) starts from ``state0``; Flux ≥ 0.15 from zeros.
    A 2-D input is one step ``(in, B)`` in the ``Recur`` era and an unbatched sequence ``(in, L)``
    from 0.15 on.
    """
    cell = field(params, "cell", params)
    wh = _array(field(cell, "Wh"))
    assert wh is not None
    hidden = wh.shape[1]
    state0 = field(cell, "state0")
    x = np.asarray(x, np.float64)
    if x.ndim == 2 and state0 is not None:
        seq, batch, squeeze = x[:, None, :], x.shape[1], "step"
    elif x.ndim == 2:
        seq, batch, squeeze = x[:, :, None], 1, "batch"
    else:
        seq, batch, squeeze = x, x.shape[2], ""

    def initial(v: Any) -> Array:
        a = np.asarray(v, np.float64)
        return np.broadcast_to(a.reshape(hidden, -1) if a.size > 1 else a, (hidden, batch)).copy()

    state: Any
    if layer.kind == "LSTM":
        state = (
            (initial(state0[0]), initial(state0[1])) if state0 is not None else (initial(0.0), initial(0.0))
        )
    else:
        state = initial(state0 if state0 is not None else 0.0)
    outputs = []
    for t in range(seq.shape[1]):
        y, state = rnn_cell_step(layer.kind, cell, layer.arg("σ"), seq[:, t, :], state)
        outputs.append(y)
    out = np.stack(outputs, axis=1)
    if squeeze == "step":
        return out[:, 0, :]
    if squeeze == "batch":
        return out[:, :, 0]
    return out


# --- attention ---------------------------------------------------------------------------------


def dot_product_attention(q: Array, k: Array, v: Array, nheads: int) -> tuple[Array, Array]:
    """NNlib ``dot_product_attention``: ``(x, α)``; heads own contiguous row blocks of dim 1.

    ``q`` ``(E, Lq, B)``, ``k``/``v`` ``(E, Lk, B)``; ``α[j, i, h, b]`` is softmax over keys ``j``
    of ``Σ_d q[d,h,i,b] k[d,h,j,b] / √hd``.
    """

    def heads(a: Array) -> Array:
        return np.reshape(a, (a.shape[0] // nheads, nheads, *a.shape[1:]), order="F")

    qh, kh, vh = heads(q), heads(k), heads(v)
    logits = np.einsum("dhib,dhjb->jihb", qh, kh) / math.sqrt(qh.shape[0])
    alpha = softmax(logits, axis=0)
    xh = np.einsum("jihb,dhjb->dhib", alpha, vh)
    return np.reshape(xh, (-1, *xh.shape[2:]), order="F"), alpha


def multi_head_attention(layer: Layer, params: Any, x: Any) -> tuple[Array, Array]:
    """Flux ``MultiHeadAttention``: returns ``(out_proj(x), α)`` as Flux does; ``x`` or ``(q, k, v)``."""
    q_in, k_in, v_in = (x if len(x) == 3 else (x[0], x[1], x[1])) if isinstance(x, tuple) else (x, x, x)
    nheads = int(_hyper(layer, params, "nheads", 8))
    proj = Layer("Dense")
    q = dense(proj, field(params, "q_proj"), np.asarray(q_in, np.float64))
    k = dense(proj, field(params, "k_proj"), np.asarray(k_in, np.float64))
    v = dense(proj, field(params, "v_proj"), np.asarray(v_in, np.float64))
    out, alpha = dot_product_attention(q, k, v, nheads)
    return dense(proj, field(params, "out_proj"), out), alpha


# --- containers and dispatch -------------------------------------------------------------------


def _children_params(layer: Layer, params: Any) -> list[Any]:
    """The states of a container's children, in order (positional or by the Chain's names)."""
    inner = field(params, "layers", params)
    n = len(layer.children)
    if inner is None or inner == ():
        return [()] * n
    if isinstance(inner, (Mapping, JuliaStruct)) and layer.names is not None:
        return [field(inner, name) for name in layer.names]
    if isinstance(inner, Mapping):
        return list(inner.values())
    if isinstance(inner, JuliaStruct):
        return list(inner.fields.values())
    if n == 1 and not isinstance(inner, (tuple, list)):
        return [inner]
    return list(inner)


def _combine(connection: str | None, values: Sequence[Any]) -> Any:
    """A ``Parallel``/``SkipConnection`` connection by its Julia name."""
    name = connection or "tuple"
    if name == "+":
        return sum(values[1:], start=values[0])
    if name in ("*", ".*"):
        out = values[0]
        for v in values[1:]:
            out = out * v
        return out
    if name == "vcat":
        return np.concatenate(values, axis=0)
    if name == "hcat":
        return np.concatenate([v.reshape(v.shape[0], -1) if v.ndim == 1 else v for v in values], axis=1)
    if name in ("cat", "cat_channels"):  # channel concatenation (dims = N-1)
        return np.concatenate(values, axis=values[0].ndim - 2)
    if name == "max":
        return np.maximum.reduce(list(values))
    if name == "tuple":
        return tuple(values)
    raise NotImplementedError(f"connection {name!r}")


def forward(layer: Layer, params: Any, x: Any, *, flux: str = "0.16.10") -> Any:
    """Run ``layer`` with its ``Flux.state`` ``params`` on Julia-shaped ``x``, as Flux would (test mode).

    ``flux`` is the Flux version whose semantics apply where they differ (LayerNorm's ϵ).
    """
    kind = layer.kind
    if kind == "Chain":
        for child, p in zip(layer.children, _children_params(layer, params), strict=True):
            x = forward(child, p, x, flux=flux)
        return x
    if kind == "SkipConnection":
        p = field(params, "layers", ())  # SkipConnection's `layers` is the one wrapped layer
        return _combine(layer.arg("connection", "+"), [forward(layer.children[0], p, x, flux=flux), x])
    if kind == "Parallel":
        ps = _children_params(layer, params)
        xs = x if isinstance(x, tuple) else (x,) * len(layer.children)
        ys = [forward(c, p, xi, flux=flux) for c, p, xi in zip(layer.children, ps, xs, strict=True)]
        return _combine(layer.arg("connection"), ys)
    if kind == "PairwiseFusion":
        ps = _children_params(layer, params)
        xs = x if isinstance(x, tuple) else (x,) * len(layer.children)
        outs: list[Any] = []
        for i, (c, p) in enumerate(zip(layer.children, ps, strict=True)):
            inp = xs[0] if i == 0 else _combine(layer.arg("connection"), [outs[-1], xs[i]])
            outs.append(forward(c, p, inp, flux=flux))
        return tuple(outs)
    if kind == "Maxout":
        ps = _children_params(layer, params)
        return np.maximum.reduce(
            [forward(c, p, x, flux=flux) for c, p in zip(layer.children, ps, strict=True)]
        )
    if kind == "function":
        return activation(layer.arg("name"))(np.asarray(x, np.float64))
    if kind == "flatten":
        return flatten(np.asarray(x, np.float64))
    if kind in ("Dropout", "AlphaDropout"):
        return x  # test mode
    x_arr = x if isinstance(x, tuple) or kind == "Embedding" else np.asarray(x, np.float64)
    return _LAYER_FORWARDS[kind](layer, params, x_arr, flux)


_LAYER_FORWARDS: dict[str, Callable[[Layer, Any, Any, str], Any]] = {
    "Dense": lambda lay, p, x, f: dense(lay, p, x),
    "Bilinear": lambda lay, p, x, f: bilinear(lay, p, x),
    "Scale": lambda lay, p, x, f: scale(lay, p, x),
    "Embedding": lambda lay, p, x, f: embedding(p, x),
    "Conv": lambda lay, p, x, f: conv_layer(lay, p, x),
    "CrossCor": lambda lay, p, x, f: conv_layer(lay, p, x),
    "DepthwiseConv": lambda lay, p, x, f: conv_layer(lay, p, x),
    "ConvTranspose": lambda lay, p, x, f: conv_transpose_layer(lay, p, x),
    "MaxPool": lambda lay, p, x, f: _pool_layer(lay, p, x, "max"),
    "MeanPool": lambda lay, p, x, f: _pool_layer(lay, p, x, "mean"),
    "AdaptiveMaxPool": lambda lay, p, x, f: adaptive_pool(x, _hyper(lay, p, "out", None), "max"),
    "AdaptiveMeanPool": lambda lay, p, x, f: adaptive_pool(x, _hyper(lay, p, "out", None), "mean"),
    "GlobalMaxPool": lambda lay, p, x, f: global_pool(x, "max"),
    "GlobalMeanPool": lambda lay, p, x, f: global_pool(x, "mean"),
    "BatchNorm": lambda lay, p, x, f: batchnorm(lay, p, x),
    "InstanceNorm": lambda lay, p, x, f: instancenorm(lay, p, x),
    "GroupNorm": lambda lay, p, x, f: groupnorm(lay, p, x),
    "LayerNorm": layernorm,
    "RNN": lambda lay, p, x, f: recurrent(lay, p, x),
    "LSTM": lambda lay, p, x, f: recurrent(lay, p, x),
    "GRU": lambda lay, p, x, f: recurrent(lay, p, x),
    "GRUv3": lambda lay, p, x, f: recurrent(lay, p, x),
    "MultiHeadAttention": lambda lay, p, x, f: multi_head_attention(lay, p, x),
}

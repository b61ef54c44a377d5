"""PyTorch ``state_dict`` <-> ``Flux.state``, matched by the layer rules (docs/porting.md §Supported layers).

The Flux side is a :class:`~treexchange._port._spec.Layer` tree: parsed from the model as Flux prints
it (``Chain(Conv((5, 5), 1 => 6, relu), …)``, never evaluated) or read from an equivalent
``torch.nn.Module`` (:func:`layer_of_module`). Its layers with arrays, in Flux's order, are paired
with the PyTorch modules that hold parameters, in registration order (the order of a
``state_dict``); each pair must be of matching kinds (``Linear`` for ``Dense``…), and each tensor is
moved by the rule's exact permutation (``_port._perm``):

=============  ========================================  ==============================================
Flux           PyTorch                                    Julia array -> tensor
=============  ========================================  ==============================================
Dense          Linear ``weight``, ``bias``                same (both ``(out, in)``)
Conv           Conv1d/2d/3d ``weight``, ``bias``          ``flip_spatial(rev(W))``: Flux convolves,
                                                          PyTorch cross-correlates (docs/porting.md
                                                          §Kernel flips)
CrossCor       Conv1d/2d/3d                               ``rev(W)``
BatchNorm      BatchNorm1d/2d/3d ``weight`` = γ,          same; ``num_batches_tracked`` has no Flux
               ``bias`` = β, ``running_mean`` = μ,        counterpart (ignored one way, 0 the other)
               ``running_var`` = σ²
LayerNorm      LayerNorm ``weight``/``bias`` =            ``rev`` (``normalized_shape`` is the Julia
               ``diag.scale``/``diag.bias``               ``size`` reversed)
Embedding      Embedding ``weight``                       transpose (Julia ``(dim, vocab)``)
Bilinear       Bilinear ``weight``, ``bias``              same (both ``(out, in1, in2)``)
DepthwiseConv  Conv1d/2d/3d with ``groups = in``          as Conv
ConvTranspose  ConvTranspose1d/2d/3d ``weight``, ``bias`` ``flip_spatial(rev(W))``: Julia
                                                          ``(k…, out÷G, in)`` -> ``(in, out÷G, k…)``
InstanceNorm,  InstanceNorm1d/2d/3d, GroupNorm            as BatchNorm (those tensors that exist:
GroupNorm      ``weight`` = γ, ``bias`` = β (+ stats)     ``affine``/``track_stats``)
RNN, LSTM,     RNN/LSTM/GRU (one layer, one direction)    same, gate blocks in the same order (LSTM
GRU            ``weight_ih_l0`` = Wi, ``weight_hh_l0`` =  i, f, g, o; GRU r, z, n); ``bias_hh_l0`` is 0
               Wh, ``bias_ih_l0`` = b, ``bias_hh_l0``     going to torch and folded into b coming back
                                                          (see :func:`_fold_bias_hh`)
RNNCell,       RNNCell/LSTMCell/GRUCell ``weight_ih``,    as RNN, LSTM, GRU (a bare Flux ≥ 0.15 cell:
LSTMCell,      ``weight_hh``, ``bias_ih``, ``bias_hh``    one step, ``cell(x, h)``, torch's call too)
GRUCell
MultiHead-     MultiheadAttention ``in_proj_weight`` =    same; separate ``q/k/v_proj_weight`` when
Attention      vcat(q, k, v weights), ``in_proj_bias``,   ``kdim``/``vdim`` differ from ``embed_dim``
               ``out_proj.weight``/``.bias``
=============  ========================================  ==============================================

GRUv3 and GRUv3Cell (reset gate before ``Wh``), an RNN or RNNCell whose activation is neither tanh
nor relu, and attention whose q/k/v/output sizes torch cannot express are refused with
:class:`~treexchange.UnsupportedError`: no conversion is ever approximate.

Every problem (a missing or left-over tensor, a kind or shape that does not fit) is collected and
raised at once as one :class:`treexchange.MismatchError` naming the tensor and the Julia path.

torch is optional: this module imports it only inside the functions that take modules or tensors.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np

from .._errors import (
    ConversionError,
    Mismatch,
    MismatchError,
    PathSegment,
    TreePath,
    UnsupportedError,
    format_path,
)
from .._port._arch import parse_architecture
from .._port._perm import REV, SAME, Perm, Transpose, conv_weight_perm
from .._port._registry import (
    CELLS,
    KINDS,
    NO_TORCH_EQUIVALENT,
    RECURRENT_GATES,
    RULES,
    TORCH_MODULES,
    builder,
    register,
    unsupported,
    with_defaults,
    wrapped_kind,
)
from .._port._rules import Arr, _NamedFields
from .._port._spec import DEFAULT_FLUX_ERA, Layer
from .._port._state import Port, state_of
from .._values import NamedTuple

IGNORED = frozenset({"num_batches_tracked"})
"""PyTorch buffers with no Flux counterpart."""


@dataclasses.dataclass(frozen=True)
class TorchParam:
    """One tensor of a layer: its Flux field, its PyTorch name, the permutation and torch shape.

    ``flux`` is the rule's array key (``"Wi"``, ``"q_proj.weight"``); ``""`` marks a tensor with no
    Flux counterpart (a recurrent ``bias_hh``: zeros going to torch, folded into ``b`` coming back).
    ``parts`` lists the Flux arrays stacked along dim 1 into one tensor (``in_proj_weight``).
    """

    flux: str
    torch: str
    perm: Perm
    shape: tuple[int, ...]
    transform: str = "same"  # what --dry-run prints
    parts: tuple[str, ...] = ()


def torch_params(layer: Layer) -> list[TorchParam]:
    """The PyTorch tensors of one Flux layer (defaults filled in), by the rules in the docstring.

    Example:
        >>> conv = with_defaults(Layer("Conv", {"kernel": (5, 3), "in": 2, "out": 4}))
        >>> [(p.flux, p.torch, p.shape) for p in torch_params(conv)]
        [('weight', 'weight', (4, 2, 3, 5)), ('bias', 'bias', (4,))]
    """
    return builder("torch", layer.kind)(layer)


def _bias(a: Mapping[str, Any]) -> list[TorchParam]:
    return [TorchParam("bias", "bias", SAME, (a["out"],))] if a.get("bias", True) else []


def _dense_params(layer: Layer) -> list[TorchParam]:
    a = layer.args
    return [TorchParam("weight", "weight", SAME, (a["out"], a["in"])), *_bias(a)]


def _bilinear_params(layer: Layer) -> list[TorchParam]:
    a = layer.args  # nn.Bilinear.weight (out, in1, in2) is Flux's W as it is
    return [TorchParam("weight", "weight", SAME, (a["out"], *a["in"])), *_bias(a)]


def _conv_params(layer: Layer) -> list[TorchParam]:
    a, kind = layer.args, layer.kind
    k = tuple(a["kernel"])
    if kind == "ConvTranspose":
        # Flux's ConvTranspose is the adjoint of its (true) convolution, PyTorch's the adjoint of its
        # cross-correlation: flip as for Conv. rev of Julia's (k…, Cout÷G, Cin) is already torch's
        # (Cin, Cout÷G, k…) for any groups (docs/porting.md §Kernel flips).
        weight = (a["in"], a["out"] // a["groups"], *k[::-1])
        return [
            TorchParam("weight", "weight", conv_weight_perm("Conv", dict(a)), weight, "rev+flip"),
            *_bias(a),
        ]
    weight = (a["out"], a["in"] // a.get("groups", 1), *k[::-1])
    how = "rev" if kind == "CrossCor" else "rev+flip"
    return [TorchParam("weight", "weight", conv_weight_perm(kind, dict(a)), weight, how), *_bias(a)]


def _norm_params(layer: Layer) -> list[TorchParam]:
    a = layer.args
    c = (a["channels"],)
    out = []
    if a["affine"]:
        out += [TorchParam("γ", "weight", SAME, c), TorchParam("β", "bias", SAME, c)]
    if a["track_stats"] and KINDS[layer.kind].state_arrays:
        out += [TorchParam("μ", "running_mean", SAME, c), TorchParam("σ²", "running_var", SAME, c)]
    return out


def _layernorm_params(layer: Layer) -> list[TorchParam]:
    a = layer.args
    shape = tuple(a["size"])[::-1]
    if not a["affine"]:
        return []
    return [TorchParam("scale", "weight", REV, shape, "rev"), TorchParam("bias", "bias", REV, shape, "rev")]


def _embedding_params(layer: Layer) -> list[TorchParam]:
    a = layer.args
    return [TorchParam("weight", "weight", Transpose((1, 0)), (a["in"], a["out"]), "transpose")]


def _no_tensors(layer: Layer) -> list[TorchParam]:
    return []


def _recurrent_params(layer: Layer) -> list[TorchParam]:
    """RNN/LSTM/GRU: torch stacks the gate blocks along dim 1 in Flux's order (LSTM i, f, g, o; GRU
    r, z, n), so every array moves as it is. torch adds ``b_hh`` inside the GRU's reset product
    (``n = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))``) where Flux's GRU has no bias, which a zero
    ``bias_hh`` reproduces exactly; Flux's RNN/LSTM add one bias, torch two (the sum). Without bias
    (Flux ≥ 0.15's ``bias=false``, torch's ``bias=False``: neither bias) the equations are the same
    with the biases left out, the GRU's too. A bare cell (``GRUCell``) has its layer's tensors
    without the ``_l0`` of a layer number (``torch.nn.GRUCell``'s names)."""
    a, kind = layer.args, wrapped_kind(layer.kind)
    if kind == "RNN" and a.get("σ", "tanh") not in ("tanh", "relu"):
        raise UnsupportedError(
            f"no PyTorch equivalent: torch's {layer.kind} computes tanh or relu, this Flux one {a['σ']}"
        )
    rows, inp, hidden = RECURRENT_GATES[kind] * a["out"], a["in"], a["out"]
    suffix = "" if layer.kind in CELLS else "_l0"
    weights = [
        TorchParam("Wi", f"weight_ih{suffix}", SAME, (rows, inp)),
        TorchParam("Wh", f"weight_hh{suffix}", SAME, (rows, hidden)),
    ]
    if a.get("bias") is False:
        return weights
    return [
        *weights,
        TorchParam("b", f"bias_ih{suffix}", SAME, (rows,)),
        TorchParam("", f"bias_hh{suffix}", SAME, (rows,), "zeros (folded into b coming back)"),
    ]


def _attention_params(layer: Layer) -> list[TorchParam]:
    """MultiHeadAttention: torch's ``embed_dim`` E is Flux's q input, qk, v and output size at once;
    both split heads into contiguous row blocks and scale by ``1/√(E/nheads)``."""
    a = layer.args
    e = a["q_in"]
    if not (a["qk_dim"] == a["v_dim"] == a["out"] == e):
        raise UnsupportedError(
            "no PyTorch equivalent: torch's MultiheadAttention has one embed_dim for the query input, "
            f"the q/k/v projections and the output; this one is ({a['q_in']}, {a['k_in']}, {a['v_in']}) "
            f"=> {a['qk_dim']}, {a['v_dim']} => {a['out']}"
        )
    out: list[TorchParam] = []
    if a["k_in"] == a["v_in"] == e:
        out.append(
            TorchParam(
                "q_proj.weight", "in_proj_weight", SAME, (3 * e, e), "vcat(q, k, v)",
                parts=("q_proj.weight", "k_proj.weight", "v_proj.weight"),
            )
        )  # fmt: skip
    else:
        out += [
            TorchParam("q_proj.weight", "q_proj_weight", SAME, (e, e)),
            TorchParam("k_proj.weight", "k_proj_weight", SAME, (e, a["k_in"])),
            TorchParam("v_proj.weight", "v_proj_weight", SAME, (e, a["v_in"])),
        ]
    if a.get("bias"):
        out.append(
            TorchParam(
                "q_proj.bias", "in_proj_bias", SAME, (3 * e,), "vcat(q, k, v)",
                parts=("q_proj.bias", "k_proj.bias", "v_proj.bias"),
            )
        )  # fmt: skip
    out.append(TorchParam("out_proj.weight", "out_proj.weight", SAME, (e, e)))
    if a.get("bias"):
        out.append(TorchParam("out_proj.bias", "out_proj.bias", SAME, (e,)))
    return out


def _fold_bias_hh(layer: Layer, b: np.ndarray, bias_hh: np.ndarray, where: TreePath) -> np.ndarray:
    """Flux's one bias from torch's two. RNN/LSTM: ``b = bias_ih + bias_hh`` (torch adds both to the
    same pre-activation). GRU: the r and z blocks add the same way; the n block of ``bias_hh`` sits
    inside torch's reset product, where Flux's GRU has none, so it must be zero. A zero ``bias_hh`` (what
    :func:`flux_to_state_dict` writes) leaves ``b`` bit for bit as it is."""
    if not bias_hh.any():
        return b
    if wrapped_kind(layer.kind) == "GRU":
        h = layer.args["out"]
        if bias_hh[2 * h :].any():
            raise UnsupportedError(
                "no Flux equivalent: this torch GRU has a nonzero bias_hh for the candidate gate (inside "
                "r ⊙ (W_hn h + b_hn)); Flux's GRU has no bias there, so it cannot be moved exactly",
                path=where,
            )
    return (b + bias_hh).astype(b.dtype)


def _has_arrays(layer: Layer) -> bool:
    rule = RULES.get(layer.kind)
    if rule is None:
        raise unsupported(layer.kind, "torch")
    fields = rule.fields(layer, DEFAULT_FLUX_ERA)
    return fields != () and any(_is_arr(spec) for _, spec in fields)


def _is_arr(spec: Any) -> bool:
    if isinstance(spec, Arr):
        return True
    return isinstance(spec, _NamedFields) and any(_is_arr(s) for _, s in spec)


@dataclasses.dataclass
class _Site:
    """A Flux layer with arrays, and where its state sits in ``Flux.state``."""

    layer: Layer
    path: TreePath


def array_layers(layer: Layer, root: TreePath = ("model_state",)) -> list[_Site]:
    """The layers with arrays in PyTorch's registration order (Flux's order, but a ``Parallel``'s
    branches reversed), each with the path of its state in ``Flux.state`` (1-based)."""
    out: list[_Site] = []

    def walk(node: Layer, path: TreePath) -> None:
        if node.kind in TORCH_MODULES:
            if torch_params(node):  # an InstanceNorm without affine/stats holds no tensor in torch either
                out.append(_Site(node, path))
            return
        if not node.children and _has_arrays(node):
            out.append(_Site(node, path))
            return
        order = list(enumerate(node.children))
        if node.kind == "Parallel":
            # PyTorch registers a residual block's main branch before its shortcut; Flux's
            # Parallel lists the shortcut first (Metalhead reverses Parallel branches to match
            # torchvision: `_list_state(node::Parallel…)`, scripts/pytorch2flux.jl; docs/porting.md
            # §Containers).
            order.reverse()
        for i, child in order:
            if node.kind == "SkipConnection":  # Flux.state: (layers = <the one layer>, connection)
                walk(child, (*path, "layers"))
                continue
            key: PathSegment = node.names[i] if node.names else i + 1
            walk(child, (*path, "layers", key))

    walk(layer, root)
    return out


_ATTENTION_TENSORS = frozenset({"in_proj_weight", "q_proj_weight"})


def _groups(state_dict: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``state_dict`` entries grouped by module (the name before the last dot), in order. A
    ``MultiheadAttention``'s ``out_proj`` submodule joins its parent's group (one Flux layer)."""
    groups: dict[str, dict[str, Any]] = {}
    for name, tensor in state_dict.items():
        prefix, _, leaf = name.rpartition(".")
        parent, _, sub = prefix.rpartition(".")
        if sub == "out_proj" and _ATTENTION_TENSORS & groups.get(parent, {}).keys():
            prefix, leaf = parent, f"out_proj.{leaf}"
        groups.setdefault(prefix, {})[leaf] = tensor
    return list(groups.items())


def _torch_ready(array: Any) -> np.ndarray:
    """An array torch takes (``new_tensor`` then casts to the module's dtype): bfloat16, which
    numpy knows only through ml_dtypes and torch not at all, goes as float32 (exact)."""
    a = np.array(array)
    return a.astype(np.float32) if a.dtype == ml_dtypes.bfloat16 else a


def _numpy(tensor: Any) -> np.ndarray:
    if isinstance(tensor, np.ndarray):
        return tensor
    detach = getattr(tensor, "detach", None)
    if detach is not None:  # a torch.Tensor: bfloat16 has no numpy dtype in torch, go through float32
        t = detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            return np.asarray(t.float().numpy()).astype(ml_dtypes.bfloat16)
        return np.asarray(t.numpy())
    return np.asarray(tensor)


def _module_kinds(module: Any) -> dict[str, str]:
    """module path -> class name, for the modules of ``module`` that hold tensors directly."""
    out = {}
    for name, sub in module.named_modules(remove_duplicate=False):  # (a module used twice: both names)
        own = [n for n, _ in sub.named_parameters(recurse=False)] + [
            n for n, _ in sub.named_buffers(recurse=False)
        ]
        if own:
            out[name] = type(sub).__name__
    return out


def _pair(
    layer: Layer,
    state_dict: Mapping[str, Any],
    kinds: Mapping[str, str] | None,
    root: TreePath,
) -> list[tuple[_Site, str, dict[str, Any]]]:
    """Flux layers with arrays paired with tensor groups; every problem raised at once."""
    sites = array_layers(layer, root)
    groups = _groups(state_dict)
    problems: list[Mismatch] = []
    pairs = []
    for site, (prefix, tensors) in zip(sites, groups):
        where = site.path
        label = f"{prefix}." if prefix else ""
        if site.layer.kind not in TORCH_MODULES:
            problems.append(Mismatch("kind", where, f"Flux {site.layer.kind} has no PyTorch rule yet"))
            continue
        torch_kind = kinds.get(prefix) if kinds is not None else None
        if torch_kind is not None and torch_kind not in TORCH_MODULES[site.layer.kind]:
            problems.append(
                Mismatch("kind", where, f"Flux {site.layer.kind} paired with torch {torch_kind} {prefix!r}")
            )
            continue
        expected = {p.torch: p for p in torch_params(site.layer)}
        for name, p in expected.items():
            if name not in tensors:
                problems.append(Mismatch("missing", (*where, p.flux), f"no tensor {label}{name}"))
                continue
            found = tensors[name]
            if not (hasattr(found, "shape") and hasattr(found, "dtype")):  # (None, a list, a number)
                what = f"{label}{name} is a {type(found).__name__}, not a tensor"
                problems.append(Mismatch("kind", (*where, p.flux), what))
                continue
            shape = tuple(_shape(found))
            if shape != p.shape:
                problems.append(
                    Mismatch(
                        "shape",
                        (*where, p.flux),
                        f"{label}{name} is {shape}, Flux {site.layer.kind} needs {p.shape}",
                    )
                )
        for name in tensors:
            if name not in expected and name not in IGNORED:
                problems.append(
                    Mismatch("extra", where, f"tensor {label}{name} has no place in Flux {site.layer.kind}")
                )
        pairs.append((site, prefix, tensors))
    for site in sites[len(groups) :]:
        problems.append(Mismatch("missing", site.path, f"no tensors for Flux {site.layer.kind}"))
    for prefix, tensors in groups[len(sites) :]:
        names = ", ".join(f"{prefix}.{n}" if prefix else n for n in tensors)
        problems.append(Mismatch("extra", (), f"tensors left over: {names}"))
    if problems:
        raise MismatchError(
            problems, header=f"{len(problems)} problem(s) matching the state_dict to the Flux model"
        )
    return pairs


def torch_order(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """``state_dict`` with its modules in registration order as far as names tell it: module paths
    compared part by part, numbers as numbers (``"2.weight"`` before ``"10.weight"``). For files that
    lost the order (``safetensors.torch.save_file`` sorts names); a ``state_dict`` from a module
    is already in order and is better used as it is.

    Example:
        >>> list(torch_order({"10.weight": 0, "2.bias": 0, "2.weight": 0}))
        ['2.bias', '2.weight', '10.weight']
    """

    def key(name: str) -> list[tuple[int, int | str]]:
        prefix = name.rpartition(".")[0]
        return (
            [(0, int(part)) if part.isdigit() else (1, part) for part in prefix.split(".")] if prefix else []
        )

    return {name: state_dict[name] for name in sorted(state_dict, key=key)}


def mapping_lines(state_dict: Mapping[str, Any], architecture: str | Layer) -> list[str]:
    """``tensor -> julia.path  torch shape dtype  permutation``, one line per tensor (``--dry-run``)."""
    layer = as_layer(architecture)
    lines = []
    for site, prefix, tensors in _pair(layer, state_dict, None, ("model_state",)):
        for p in torch_params(site.layer):
            name = f"{prefix}.{p.torch}" if prefix else p.torch
            dtype = getattr(tensors[p.torch], "dtype", "")
            julia = format_path((*site.path, p.flux)) if p.flux else "(no Flux array)"
            lines.append(f"{name} -> {julia}  {p.shape} {dtype}  {p.transform}")
    return lines


def _shape(tensor: Any) -> tuple[int, ...]:
    return tuple(int(d) for d in tensor.shape)


def as_layer(architecture: str | Layer) -> Layer:
    """The Layer tree of an architecture text (parsed, never evaluated) or a Layer, defaults filled."""
    if not isinstance(architecture, Layer):
        architecture = parse_architecture(architecture)
    _refuse_no_equivalent(architecture, ("model_state",))
    return with_defaults(architecture)


def _refuse_no_equivalent(layer: Layer, path: TreePath) -> None:
    """:class:`UnsupportedError` at the first layer PyTorch cannot compute (before any rule lookup)."""
    if layer.kind in NO_TORCH_EQUIVALENT:
        raise UnsupportedError(f"no PyTorch equivalent: {NO_TORCH_EQUIVALENT[layer.kind]}", path=path)
    for i, child in enumerate(layer.children):
        if layer.kind == "SkipConnection":
            _refuse_no_equivalent(child, (*path, "layers"))
        else:
            _refuse_no_equivalent(child, (*path, "layers", layer.names[i] if layer.names else i + 1))


def state_dict_to_flux(
    state_dict: Mapping[str, Any],
    architecture: str | Layer | Any,
    *,
    flux: str = DEFAULT_FLUX_ERA,
    module: Any = None,
    root: TreePath = ("model_state",),
) -> Any:
    """``Flux.state`` of the Flux model ``architecture`` with the tensors of a PyTorch ``state_dict``.

    ``architecture`` is the Flux model as Flux prints it, a Layer tree, or an equivalent
    ``torch.nn.Module`` (then ``state_dict`` may be ``None``: the module's own is used). Tensors are
    matched to the Flux layers with arrays in order, by the rules in the module docstring; every
    mismatch is reported at once. The result is a value tree ``treexchange.save`` writes as a
    ``Flux.loadmodel!``-ready ``model_state``.

    Example:
        >>> import numpy as np
        >>> from treexchange import state_dict_to_flux
        >>> sd = {"0.weight": np.ones((3, 2), np.float32), "0.bias": np.zeros(3, np.float32)}
        >>> state = state_dict_to_flux(sd, "Chain(Dense(2 => 3, relu))")
        >>> state.layers[0].weight.shape, state.layers[0].σ
        ((3, 2), ())

        A torch module stands for its own architecture (a Conv kernel comes back flipped and reversed):

        >>> import torch
        >>> conv = torch.nn.Sequential(torch.nn.Conv2d(1, 2, (3, 5)), torch.nn.ReLU())
        >>> state_dict_to_flux(None, conv).layers[0].weight.shape  # Julia (kW, kH, in, out)
        (5, 3, 1, 2)
    """
    if not isinstance(architecture, (str, Layer)):
        module = architecture
        architecture = layer_of_module(module)
        if state_dict is None:
            state_dict = module.state_dict()
    layer = as_layer(architecture)
    kinds = _module_kinds(module) if module is not None else None
    pairs = _pair(layer, state_dict, kinds, root)
    arrays: dict[int, dict[str, tuple[Any, Perm]]] = {}
    for site, _, tensors in pairs:
        arrays[id(site.layer)] = _flux_arrays(site, tensors)
    return state_of(_port(layer, arrays), flux)


def _flux_arrays(site: _Site, tensors: Mapping[str, Any]) -> dict[str, tuple[Any, Perm]]:
    """One layer's tensors as the rule's arrays (stacked tensors split, ``bias_hh`` folded)."""
    out: dict[str, tuple[Any, Perm]] = {}
    bias_hh = None
    for p in torch_params(site.layer):
        tensor = _numpy(tensors[p.torch])
        if not p.flux:
            bias_hh = tensor
        elif p.parts:
            for part, block in zip(p.parts, np.split(tensor, len(p.parts), axis=0)):
                out[part] = (block, p.perm)
        else:
            out[p.flux] = (tensor, p.perm)
    if bias_hh is not None:
        b, perm = out["b"]
        out["b"] = (_fold_bias_hh(site.layer, np.asarray(b), np.asarray(bias_hh), site.path), perm)
    return out


def _port(layer: Layer, arrays: Mapping[int, dict[str, tuple[Any, Perm]]]) -> Port:
    return Port(layer, dict(arrays.get(id(layer), {})), tuple(_port(c, arrays) for c in layer.children))


def flux_to_state_dict(
    state: Any,
    architecture: str | Layer | Any,
    *,
    names: Mapping[str, Any] | None = None,
    root: TreePath = ("model_state",),
) -> dict[str, np.ndarray]:
    """The PyTorch tensors (numpy arrays) of a ``Flux.state`` value tree, keyed like ``names``
    (a template ``state_dict``, e.g. ``module.state_dict()``); without ``names``, keys follow
    ``nn.Sequential``: one group per Flux layer with arrays, numbered in order (``"0.weight"``).

    ``architecture`` may be an equivalent ``torch.nn.Module`` (its ``state_dict`` gives the names).
    ``num_batches_tracked`` buffers (no Flux counterpart) come out as 0.

    Example:
        >>> import numpy as np
        >>> from treexchange import NamedTuple, flux_to_state_dict
        >>> dense = NamedTuple(weight=np.ones((3, 2), np.float32), bias=np.zeros(3, np.float32), σ=())
        >>> sd = flux_to_state_dict(NamedTuple(layers=(dense,)), "Chain(Dense(2 => 3, relu))")
        >>> {name: t.shape for name, t in sd.items()}
        {'0.weight': (3, 2), '0.bias': (3,)}
    """
    if not isinstance(architecture, (str, Layer)):
        names = architecture.state_dict() if names is None else names
        architecture = layer_of_module(architecture)
    layer = as_layer(architecture)
    sites = array_layers(layer, ())
    if names is None:
        names = {}
        for i, site in enumerate(sites):
            for p in torch_params(site.layer):
                names[f"{i}.{p.torch}"] = np.zeros(p.shape)
    pairs = _pair(layer, names, None, root)
    problems: list[Mismatch] = []
    out: dict[str, np.ndarray] = {}
    for site, prefix, tensors in pairs:
        node = _at(state, site.path[len(root) :])
        params = torch_params(site.layer)
        for p in params:
            path = (*site.path, p.flux)
            if not p.flux:  # bias_hh: Flux's one bias is all in bias_ih
                like = np.asarray(_julia_array(node, site.layer, "b"))
                out[f"{prefix}.{p.torch}" if prefix else p.torch] = np.zeros(p.shape, like.dtype)
                continue
            parts = [_julia_array(node, site.layer, key) for key in (p.parts or (p.flux,))]
            if any(part is None for part in parts):
                problems.append(Mismatch("missing", path, "not in the Julia state"))
                continue
            julia = np.concatenate([np.asarray(x) for x in parts]) if p.parts else np.asarray(parts[0])
            if tuple(julia.shape) != p.perm.julia_shape(p.shape):
                problems.append(
                    Mismatch(
                        "shape",
                        path,
                        f"Julia {tuple(julia.shape)}, the rule needs {p.perm.julia_shape(p.shape)}",
                    )
                )
                continue
            out[f"{prefix}.{p.torch}" if prefix else p.torch] = np.ascontiguousarray(p.perm.forward(julia))
        for name in tensors:
            if name in IGNORED:
                out[f"{prefix}.{name}" if prefix else name] = np.zeros((), np.int64)
    if problems:
        raise MismatchError(problems, header=f"{len(problems)} problem(s) reading the Flux state")
    return out


def _at(state: Any, path: TreePath) -> Any:
    node = state
    for seg in path:
        try:
            node = node[seg - 1] if isinstance(seg, int) else node[seg]
        except (KeyError, IndexError, TypeError):
            raise ConversionError("the Julia state has no entry here", path=("model_state", *path)) from None
    return node


def _julia_array(node: Any, layer: Layer, key: str) -> Any:
    """The array the rule calls ``key`` in one layer's state (``Wi`` is ``cell.Wi``; the bias is
    ``cell.bias`` or ``cell.b`` by Flux era; a bare cell's are its own fields, Flux ≥ 0.15's), or None."""
    rule = RULES.get(layer.kind)
    if rule is not None and wrapped_kind(layer.kind) in ("RNN", "LSTM", "GRU", "MultiHeadAttention"):
        for era in ("0.15",) if layer.kind in CELLS else ("0.15", "0.14"):
            where = _arr_path(rule.fields(layer, era), key)
            value = node
            for name in where or ():
                value = value.get(name) if isinstance(value, Mapping) else None
            if where is not None and value is not None:
                return value
        return None
    return _field(node, key)


def _arr_path(fields: Any, key: str) -> tuple[str, ...] | None:
    for name, spec in fields:
        if isinstance(spec, Arr) and spec.key == key:
            return (name,)
        if isinstance(spec, _NamedFields):
            inner = _arr_path(spec, key)
            if inner is not None:
                return (name, *inner)
    return None


def _field(node: Any, name: str) -> Any:
    if name in ("scale", "bias") and isinstance(node, NamedTuple) and "diag" in node:  # LayerNorm
        return node["diag"][name] if isinstance(node["diag"], NamedTuple) else None
    return node.get(name) if isinstance(node, Mapping) else None


def load_into_module(
    module: Any, state: Any, architecture: str | Layer | None = None, *, strict: bool = True
) -> Any:
    """Fill a ``torch.nn.Module`` with a ``Flux.state`` value tree (as ``treexchange.load`` returns it).

    The Flux model is ``architecture`` (text or Layer), or read from ``module`` itself. Returns the
    module (its parameters and buffers replaced in place, dtypes kept as the module has them).

    Example:
        >>> import numpy as np, torch
        >>> from treexchange import NamedTuple, load_into_module
        >>> w = np.arange(6, dtype=np.float32).reshape(3, 2)  # Julia (out, in), as torch's
        >>> state = NamedTuple(layers=(NamedTuple(weight=w, bias=np.ones(3, np.float32), σ=()),))
        >>> model = load_into_module(torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.Tanh()), state)
        >>> model[0].weight[2].tolist(), model[0].bias.tolist()
        ([4.0, 5.0], [1.0, 1.0, 1.0])
    """
    names = module.state_dict(keep_vars=True)  # (the tensors themselves: shared ones tell by identity)
    tensors = flux_to_state_dict(state, module if architecture is None else architecture, names=names)
    converted = {k: names[k].new_tensor(_torch_ready(v)) for k, v in tensors.items()}  # the module's dtypes
    _refuse_differing_shared(names, converted)
    module.load_state_dict(converted, strict=strict)
    return module


def _same_tensor_values(a: Any, b: Any) -> bool:
    """Equal shapes and values, NaN equal to NaN (a shared weight holding a NaN is still one)."""
    import torch  # (optional: imported only when a torch module is given)

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point():
        nan_a, nan_b = a.isnan(), b.isnan()
        return torch.equal(nan_a, nan_b) and torch.equal(a.masked_fill(nan_a, 0), b.masked_fill(nan_b, 0))
    return torch.equal(a, b)


def _refuse_differing_shared(tensors: Mapping[str, Any], converted: Mapping[str, Any]) -> None:
    """A module used twice (``Sequential(lin, relu, lin)``) holds one tensor under two names of its
    ``state_dict(keep_vars=True)``, ``tensors``; Flux has two layers. Loading states that differ
    there would keep whichever came last, silently: refused, naming both."""
    held: dict[int, list[str]] = {}
    for name, tensor in tensors.items():
        held.setdefault(id(tensor), []).append(name)
    problems = []
    for names in held.values():
        given = [n for n in names if n in converted]
        for first, other in itertools.pairwise(given):
            if not _same_tensor_values(converted[first], converted[other]):
                problems.append(
                    Mismatch("value", (), f"{first} and {other} are one tensor of the module (a module used "
                             "twice) but differ in the state: a torch module cannot hold both")
                )  # fmt: skip
    if problems:
        raise MismatchError(problems, header=f"{len(problems)} problem(s) loading the state into the module")


# --- an equivalent torch.nn.Module read as a Flux Layer tree ------------------------------------------


def layer_of_module(module: Any) -> Layer:
    """The Flux Layer tree an ``nn.Sequential`` of supported modules stands for.

    An activation module right after a layer that takes one (``Linear``, ``ConvNd``, norms) becomes
    that layer's ``σ`` (as one writes ``Dense(2 => 3, relu)`` in Flux); ``nn.Flatten`` is ``flatten``,
    pools and dropout map to Flux's. Each module is read by the reader its kind registered
    (:mod:`._torchmodules`, which imports torch).

    Example:
        >>> import torch
        >>> m = torch.nn.Sequential(torch.nn.Linear(2, 3), torch.nn.ReLU(), torch.nn.Linear(3, 1))
        >>> layer_of_module(m).kinds(), layer_of_module(m).children[0].args["σ"]
        (['Chain', 'Dense', 'Dense'], 'relu')
    """
    from ._torchmodules import read_sequential  # torch is optional: only a torch module gets here

    return Layer("Chain", children=tuple(read_sequential(module)))


# === the registry entries: the tensors of each kind (its reader: _torchmodules) ===================

for _kinds, _builder in [
    (("Dense",), _dense_params),
    (("Bilinear",), _bilinear_params),
    (("Conv", "DepthwiseConv", "CrossCor", "ConvTranspose"), _conv_params),
    (("BatchNorm", "InstanceNorm", "GroupNorm"), _norm_params),
    (("LayerNorm",), _layernorm_params),
    (("Embedding",), _embedding_params),
    (("RNN", "LSTM", "GRU", "RNNCell", "LSTMCell", "GRUCell"), _recurrent_params),
    (("MultiHeadAttention",), _attention_params),
    (tuple(k for k, r in KINDS.items() if r.group != "arrays"), _no_tensors),
]:
    register("torch", _kinds, builder=_builder)

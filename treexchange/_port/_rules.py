"""The Julia side of every layer kind: its ``Flux.state`` fields in Flux's order, and its constructor.

The records of :mod:`._registry` point here: ``fields(layer, era)`` lists the entries of the
layer's ``Flux.state`` NamedTuple in Flux's field order, each either

- :class:`Arr` (``Arr("weight")``): an array of the layer, named by its Flux field; a target
  (``_eqx.py``, ``_nnx.py`` …) says which framework leaf holds it and through which exact
  :class:`~treexchange._port._perm.Perm` (with inverse, so one reader serves both directions);
- :class:`Children`: the states of the sub-layers (a Tuple, or a NamedTuple for named Chains);
- :class:`Child` (``Child(0)``): one sub-layer's state (``SkipConnection.layers``);
- a Julia value, typed as Flux has it (``np.float32`` ϵ/momentum, ``np.int64`` groups/strides,
  ``()`` for functions and RNGs, ``None`` for ``nothing``, ``False`` for ``bias = false``).

Fields returning ``()`` mean the whole layer is ``()`` in ``Flux.state`` (a pool in Flux ≤ 0.14).
Field orders and values follow Flux's structs (``docs/porting.md`` §Field names and §Flux eras).

Example:
    >>> from treexchange._port._spec import Layer
    >>> conv = Layer("Conv", {"kernel": (5, 5), "in": 1, "out": 6, "σ": "relu", "bias": True,
    ...               "stride": (1, 1), "pad": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1})
    >>> [name for name, _ in conv_fields(conv, "0.15")]
    ['σ', 'weight', 'bias', 'stride', 'pad', 'dilation', 'groups']
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from treexchange._errors import UnsupportedError

from ._spec import Layer


@dataclasses.dataclass(frozen=True)
class Arr:
    """An array field of the layer (``key`` = its Flux field name)."""

    key: str


@dataclasses.dataclass(frozen=True)
class PaddedRows(Arr):
    """An array field Flux stores with ``extra`` more rows than the layer uses (zeros when written,
    never read): Flux ≥ 0.15's ``GRUv3Cell`` allocates ``Wh`` as 3H×H and uses its first 2H rows."""

    extra: int = 0


@dataclasses.dataclass(frozen=True)
class Child:
    """The state of ``layer.children[index]``."""

    index: int


@dataclasses.dataclass(frozen=True)
class Children:
    """The states of all ``layer.children`` (a Tuple; a NamedTuple when the layer has ``names``)."""


@dataclasses.dataclass(frozen=True)
class Discard:
    """Julia state written as ``value`` and ignored by a restore (a ``Recur``'s ``state0``/``state``)."""

    value: Any


Fields = list[tuple[str, Any]]


# --- typed Julia values ----------------------------------------------------------------------------


def i64(x: int) -> np.int64:
    return np.int64(x)


def ints(t: tuple[int, ...]) -> tuple[np.int64, ...]:
    return tuple(np.int64(v) for v in t)


def f32(x: float) -> np.float32:
    return np.float32(x)


def julia_f32(x: float) -> str:
    """A Float32 literal Julia parses back to the same value: ``1f-5``, ``0.1f0``."""
    text = str(np.float32(x))
    if "e" in text:
        mantissa, exponent = text.split("e")
        return f"{mantissa}f{int(exponent)}"
    return f"{text}f0"


def julia_tuple(t: tuple[Any, ...]) -> str:
    return "(" + ", ".join(str(v) for v in t) + ("," if len(t) == 1 else "") + ")"


def _activation(layer: Layer) -> str:
    return str(layer.arg("σ", "identity"))


def _with_activation(parts: list[str], layer: Layer) -> list[str]:
    act = _activation(layer)
    return [*parts, act] if act != "identity" else parts


def _call(name: str, positional: list[str], keywords: list[str]) -> str:
    inner = ", ".join(positional)
    if keywords:
        inner += "; " + ", ".join(keywords)
    return f"{name}({inner})"


# --- Dense, Bilinear, Embedding ---------------------------------------------------------------------


def dense_fields(layer: Layer, era: str) -> Fields:
    bias: Any = Arr("bias") if layer.arg("bias", True) else False  # Flux: Dense(...; bias=false)
    return [("weight", Arr("weight")), ("bias", bias), ("σ", ())]


def dense_julia(layer: Layer, children: list[str], era: str) -> str:
    parts = _with_activation([f"{layer.args['in']} => {layer.args['out']}"], layer)
    if not layer.arg("bias", True):
        parts.append("bias=false")
    return "Dense(" + ", ".join(parts) + ")"


def bilinear_julia(layer: Layer, children: list[str], era: str) -> str:
    in1, in2 = layer.args["in"]
    parts = _with_activation([f"({in1}, {in2}) => {layer.args['out']}"], layer)
    keywords = [] if layer.arg("bias", True) else ["bias=false"]
    return _call("Bilinear", parts, keywords)


def embedding_julia(layer: Layer, children: list[str], era: str) -> str:
    return f"Embedding({layer.args['in']} => {layer.args['out']})"


def scale_fields(layer: Layer, era: str) -> Fields:
    bias: Any = Arr("bias") if layer.arg("bias", True) else False  # Flux: Scale(...; bias=false)
    return [("scale", Arr("scale")), ("bias", bias), ("σ", ())]


def scale_julia(layer: Layer, children: list[str], era: str) -> str:
    parts = _with_activation([str(n) for n in layer.args["size"]], layer)
    return _call("Scale", parts, [] if layer.arg("bias", True) else ["bias=false"])


# --- convolutions ----------------------------------------------------------------------------------


def conv_defaults(layer: Layer) -> dict[str, Any]:
    n = len(layer.args["kernel"])
    return {
        "stride": (1,) * n,
        "pad": (0,) * (2 * n),
        "dilation": (1,) * n,
        "groups": 1,
        "bias": True,
        "σ": "identity",
        **({"outpad": (0,) * n} if layer.kind == "ConvTranspose" else {}),
    }


def conv_fields(layer: Layer, era: str) -> Fields:
    bias: Any = Arr("bias") if layer.args["bias"] else False
    fields: Fields = [
        ("σ", ()),
        ("weight", Arr("weight")),
        ("bias", bias),
        ("stride", ints(layer.args["stride"])),
        ("pad", ints(layer.args["pad"])),
    ]
    if layer.kind == "ConvTranspose" and era != "0.14":
        fields.append(("outpad", ints(layer.args["outpad"])))  # Flux ≥ 0.14.17 (#2462)
    fields.append(("dilation", ints(layer.args["dilation"])))
    if layer.kind != "CrossCor":  # CrossCor has no groups field
        fields.append(("groups", i64(layer.args["groups"])))
    return fields


def _pad_text(pad: tuple[int, ...]) -> str:
    """A ``pad`` (the 2N form: lo, hi per dim) as Flux's constructor keyword. Flux expands only an
    integer (to 2N entries) and keeps a tuple as given (``calc_padding`` = ``expand(Val(2N), pad)``),
    so the N form ``(1, 2)`` would make a layer whose ``pad`` has N entries, not the 2N the state
    holds: anything but one value for all is written in full."""
    if len(set(pad)) == 1:
        return str(pad[0])
    return julia_tuple(pad)


def conv_julia(layer: Layer, children: list[str], era: str) -> str:
    a = layer.args
    channels = f"{a['in']} => {a['out']}"
    positional = _with_activation([julia_tuple(a["kernel"]), channels], layer)
    keywords = []
    n = len(a["kernel"])
    if tuple(a["stride"]) != (1,) * n:
        keywords.append(f"stride={_tuple_or_int(a['stride'])}")
    if any(a["pad"]):
        keywords.append(f"pad={_pad_text(tuple(a['pad']))}")
    if layer.kind == "ConvTranspose" and any(a["outpad"]):
        keywords.append(f"outpad={_tuple_or_int(a['outpad'])}")
    if tuple(a["dilation"]) != (1,) * n:
        keywords.append(f"dilation={_tuple_or_int(a['dilation'])}")
    if layer.kind in ("Conv", "ConvTranspose") and a["groups"] != 1:
        keywords.append(f"groups={a['groups']}")
    if not a["bias"]:
        keywords.append("bias=false")
    return _call(layer.kind, positional, keywords)


def _tuple_or_int(t: tuple[int, ...]) -> str:
    return str(t[0]) if len(set(t)) == 1 else julia_tuple(tuple(t))


# --- pooling ----------------------------------------------------------------------------------------


def pool_defaults(layer: Layer) -> dict[str, Any]:
    k = tuple(layer.args["k"])
    return {"stride": k, "pad": (0,) * (2 * len(k))}


def pool_fields(layer: Layer, era: str) -> Fields | tuple[()]:
    if era == "0.14":
        return ()  # Functors 0.4: pools are leaves -> () (docs/porting.md §Flux eras)
    a = layer.args
    return [("k", ints(a["k"])), ("pad", ints(a["pad"])), ("stride", ints(a["stride"]))]


def pool_julia(layer: Layer, children: list[str], era: str) -> str:
    a = layer.args
    keywords = []
    if any(a["pad"]):
        keywords.append(f"pad={_pad_text(tuple(a['pad']))}")
    if tuple(a["stride"]) != tuple(a["k"]):
        keywords.append(f"stride={_tuple_or_int(a['stride'])}")
    return _call(layer.kind, [julia_tuple(a["k"])], keywords)


def adaptive_fields(layer: Layer, era: str) -> Fields | tuple[()]:
    return () if era == "0.14" else [("out", ints(layer.args["out"]))]


def adaptive_julia(layer: Layer, children: list[str], era: str) -> str:
    return f"{layer.kind}({julia_tuple(layer.args['out'])})"


def no_state(layer: Layer, era: str) -> tuple[()]:
    return ()


# --- normalisation ----------------------------------------------------------------------------------


def norm_defaults(layer: Layer) -> dict[str, Any]:
    instance = layer.kind == "InstanceNorm"
    return {
        "σ": "identity",
        "ϵ": 1e-5,
        "momentum": 0.1,
        "affine": not instance,
        "track_stats": not instance and layer.kind != "GroupNorm",
    }


def norm_fields(layer: Layer, era: str) -> Fields:
    a = layer.args
    fields: Fields = []
    if layer.kind == "GroupNorm":
        fields.append(("G", i64(a["groups"])))
    fields += [
        ("λ", ()),
        ("β", Arr("β") if a["affine"] else None),
        ("γ", Arr("γ") if a["affine"] else None),
        ("μ", Arr("μ") if a["track_stats"] else None),
        ("σ²", Arr("σ²") if a["track_stats"] else None),
        ("ϵ", f32(a["ϵ"])),
        ("momentum", f32(a["momentum"])),
        ("affine", bool(a["affine"])),
        ("track_stats", bool(a["track_stats"])),
        ("active", None),
        ("chs", i64(a["channels"])),
    ]
    return fields


def norm_julia(layer: Layer, children: list[str], era: str) -> str:
    a = layer.args
    positional = [str(a["channels"])]
    if layer.kind == "GroupNorm":
        positional.append(str(a["groups"]))
    positional = _with_activation(positional, layer)
    defaults = norm_defaults(layer)
    keywords = []
    eps_name = "ϵ" if era == "0.14" else "eps"
    if float(np.float32(a["ϵ"])) != float(np.float32(defaults["ϵ"])):
        keywords.append(f"{eps_name}={julia_f32(a['ϵ'])}")
    if float(np.float32(a["momentum"])) != float(np.float32(defaults["momentum"])):
        keywords.append(f"momentum={julia_f32(a['momentum'])}")
    for flag in ("affine", "track_stats"):
        if a[flag] != defaults[flag]:
            keywords.append(f"{flag}={str(a[flag]).lower()}")
    return _call(layer.kind, positional, keywords)


def layernorm_defaults(layer: Layer) -> dict[str, Any]:
    return {"ϵ": 1e-5, "affine": True, "σ": "identity"}


def layernorm_fields(layer: Layer, era: str) -> Fields:
    a = layer.args
    diag: Any = ()
    if a["affine"]:
        diag = _named([("scale", Arr("scale")), ("bias", Arr("bias")), ("σ", ())])
    return [
        ("λ", ()),
        ("diag", diag),
        ("ϵ", f32(a["ϵ"])),
        ("size", ints(a["size"])),
        ("affine", bool(a["affine"])),
    ]


def layernorm_julia(layer: Layer, children: list[str], era: str) -> str:
    a = layer.args
    size = tuple(a["size"])
    positional = _with_activation([julia_tuple(size) if len(size) > 1 else str(size[0])], layer)
    keywords = []
    if float(np.float32(a["ϵ"])) != float(np.float32(1e-5)):
        keywords.append(f"{'ϵ' if era == '0.14' else 'eps'}={julia_f32(a['ϵ'])}")
    if not a["affine"]:
        keywords.append("affine=false")
    return _call("LayerNorm", positional, keywords)


class _NamedFields(list):  # type: ignore[type-arg]
    """Fields of a nested NamedTuple inside a layer's state (LayerNorm's ``diag``)."""


def _named(entries: Fields) -> _NamedFields:
    return _NamedFields(entries)


# --- recurrent: RNN, LSTM, GRU, GRUv3 (docs/porting.md §Recurrent layers) --------------------------


CELLS = {"RNNCell": "RNN", "LSTMCell": "LSTM", "GRUCell": "GRU", "GRUv3Cell": "GRUv3"}
"""Flux's recurrent cells (one step, ``cell(x, h)``) -> the layer that scans the cell over a sequence."""


def bare_cell_fields(layer: Layer, era: str) -> Fields:
    """A bare Flux ≥ 0.15 cell (``GRUCell(3 => 5)`` used alone, its state carried by the caller):
    the fields of the wrapped layer's ``cell`` (``GRU``'s ``(cell = (Wi, Wh, b),)`` is ``GRUCell``'s
    ``(Wi, Wh, b)``), the same arrays under the same names.

    Flux ≤ 0.14's cells are called ``cell(h, x)``, return ``(h', y)`` and hold a ``state0``: no file
    holds one outside its ``Recur`` (the corpus has none; in a Chain it cannot run), so it is not
    written.
    """
    if era == "0.14":
        raise UnsupportedError(
            f"a bare {layer.kind} is written for Flux ≥ 0.15 only (write for flux='0.15'): Flux ≤ 0.14's "
            f"cell is called cell(h, x) and holds a state0, used only inside Recur({layer.kind}(…))"
        )
    (_, cell), *_ = recurrent_fields(dataclasses.replace(layer, kind=CELLS[layer.kind]), era)
    return list(cell)


def bare_cell_julia(layer: Layer, children: list[str], era: str) -> str:
    """``GRUCell(3 => 5)``: the wrapped layer's text with the cell's name (no ``return_state``)."""
    wrapped = dataclasses.replace(layer, kind=CELLS[layer.kind], args={**layer.args, "return_state": False})
    return _call(layer.kind, *_recurrent_arguments(wrapped, era))


def recurrent_fields(layer: Layer, era: str) -> Fields:
    """``(cell = (…),)`` from Flux 0.15; ``(cell = (…, state0), state)`` for Flux ≤ 0.14's ``Recur``.

    The bias is ``b`` everywhere except RNNCell/LSTMCell from 0.15 (renamed ``bias``). ``state0`` is
    Flux's default (zeros ``(H, 1)``) and a restore discards it with ``state`` (zero initial state on
    the Python side, which is what Flux ≥ 0.15 uses too), unless the layer carries its learnt initial
    state (``args["state0"]``, set by ``from_flux`` for a non-zero one): then ``state0`` is the
    model's arrays ``state0.h`` (and ``state0.c`` for LSTM, the pair ``(h, c)``).
    """
    kind, hidden = layer.kind, int(layer.args["out"])
    cell: Fields = [("σ", ())] if kind == "RNN" else []
    bias_name = "bias" if era != "0.14" and kind in ("RNN", "LSTM") else "b"
    # (Flux ≥ 0.15's GRUv3Cell: Wh = init(out * 3, out), of which the forward pass uses 2·out rows)
    wh = PaddedRows("Wh", hidden) if kind == "GRUv3" and era != "0.14" else Arr("Wh")
    # (Flux ≥ 0.15's bias=false stores false; Flux ≤ 0.14's loadmodel! loads false as a zero b)
    cell += [("Wi", Arr("Wi")), ("Wh", wh), (bias_name, Arr("b") if layer.arg("bias", True) else False)]
    if kind == "GRUv3":
        cell.append(("Wh_h̃", Arr("Wh_h̃")))
    if era != "0.14":
        return [("cell", _named(cell))]

    def zeros() -> Any:
        return np.zeros((hidden, 1), np.float32)

    def initial() -> Any:
        return (zeros(), zeros()) if kind == "LSTM" else zeros()

    state0: Any = Discard(initial())
    if layer.args.get("state0"):
        state0 = (Arr("state0.h"), Arr("state0.c")) if kind == "LSTM" else Arr("state0.h")
    return [("cell", _named([*cell, ("state0", state0)])), ("state", Discard(initial()))]


def recurrent_julia(layer: Layer, children: list[str], era: str) -> str:
    return _call(layer.kind, *_recurrent_arguments(layer, era))


def _recurrent_arguments(layer: Layer, era: str) -> tuple[list[str], list[str]]:
    """The positional and keyword arguments of ``RNN``/``LSTM``/``GRU``/``GRUv3``'s constructor."""
    parts = [f"{layer.args['in']} => {layer.args['out']}"]
    if layer.kind == "RNN" and _activation(layer) != "tanh":
        parts.append(_activation(layer))
    # (Flux ≤ 0.14's cells take no bias keyword: loadmodel! zeroes their b from the state's false)
    keywords = ["bias=false"] if not layer.arg("bias", True) and era != "0.14" else []
    if layer.arg("return_state", False):
        if era == "0.14":
            raise UnsupportedError(
                f"{layer.kind}(…; return_state=true) returns its last state too, which Flux ≤ 0.14's Recur "
                "cannot (write for flux='0.15')"
            )
        keywords.append("return_state=true")
    return parts, keywords


# --- MultiHeadAttention (docs/porting.md §Attention, Flux ≥ 0.13.15) -------------------------------


def attention_fields(layer: Layer, era: str) -> Fields:
    """``(nheads, q_proj, k_proj, v_proj, attn_drop, out_proj)``, each projection a Dense state."""
    bias = bool(layer.arg("bias", False))

    def proj(name: str) -> Any:
        return _named(
            [("weight", Arr(f"{name}.weight")), ("bias", Arr(f"{name}.bias") if bias else False), ("σ", ())]
        )

    drop = dropout_fields(Layer("Dropout", {"p": float(layer.arg("dropout_prob", 0.0))}), era)
    return [
        ("nheads", i64(int(layer.args["nheads"]))),
        ("q_proj", proj("q_proj")),
        ("k_proj", proj("k_proj")),
        ("v_proj", proj("v_proj")),
        ("attn_drop", _named(drop)),
        ("out_proj", proj("out_proj")),
    ]


ATTENTION_SIZES = ("q_in", "k_in", "v_in", "qk_dim", "v_dim", "out")
"""A MultiHeadAttention's sizes, as Flux's ``(q_in, k_in, v_in) => (qk_dim, v_dim) => out``."""


def attention_defaults(layer: Layer) -> dict[str, Any]:
    """Flux's defaults; ``MultiHeadAttention(E)`` (``"in": E``) is every size ``E``."""
    sizes = {k: layer.args["in"] for k in ATTENTION_SIZES} if "in" in layer.args else {}
    return {"nheads": 8, "bias": False, "dropout_prob": 0.0, **sizes}


def attention_julia(layer: Layer, children: list[str], era: str) -> str:
    keywords = [f"nheads={layer.args['nheads']}"]
    if layer.arg("bias", False):
        keywords.append("bias=true")
    if float(layer.arg("dropout_prob", 0.0)):
        keywords.append(f"dropout_prob={float(layer.args['dropout_prob'])!r}")
    q_in, k_in, v_in, qk, v, out = (int(layer.args[k]) for k in ATTENTION_SIZES)
    if q_in == k_in == v_in == qk == v == out:
        dims = str(q_in)
    else:
        dims = f"({q_in}, {k_in}, {v_in}) => ({qk}, {v}) => {out}"
    return _call("MultiHeadAttention", [dims], keywords)


# --- dropout ----------------------------------------------------------------------------------------


def dropout_fields(layer: Layer, era: str) -> Fields:
    dims = layer.arg("dims")
    dims_value: Any = () if dims is None else (i64(dims) if isinstance(dims, int) else ints(dims))
    return [("p", float(layer.args["p"])), ("dims", dims_value), ("active", None), ("rng", ())]


def dropout_julia(layer: Layer, children: list[str], era: str) -> str:
    dims = layer.arg("dims")
    keywords = [] if dims is None else [f"dims={dims if isinstance(dims, int) else julia_tuple(dims)}"]
    return _call("Dropout", [repr(float(layer.args["p"]))], keywords)


def alphadropout_fields(layer: Layer, era: str) -> Fields:
    return [("p", float(layer.args["p"])), ("active", None), ("rng", ())]


# --- containers -------------------------------------------------------------------------------------


def chain_julia(layer: Layer, children: list[str], era: str) -> str:
    if layer.names:
        return "Chain(" + ", ".join(f"{n} = {c}" for n, c in zip(layer.names, children)) + ")"
    return "Chain(" + ", ".join(children) + ")"


def connection(layer: Layer) -> str:
    return str(layer.arg("connection", "+"))


def embedding_fields(layer: Layer, era: str) -> Fields:
    return [("weight", Arr("weight"))]

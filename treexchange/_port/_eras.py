"""Old Flux layer structs (Flux 0.5 to 0.12) -> the Flux 0.13/0.14 structs the whole-model port reads.

Flux changed its layer structs several times before ``Flux.state`` existed, and BSON.jl files (the
way Flux models were saved until 2023) hold whichever struct the author's Flux had. BSON stores a
struct's fields by position only, so a struct is recognised by its type name and its number of
fields (and, where two eras have the same count, by what the fields hold). This module has one table
per layer kind: the field layouts of every era, oldest last, and what turns each into the current
form:

- ``Dense``: ``W``, ``b`` (Flux ≤ 0.11) -> ``weight``, ``bias``; Flux 0.3-0.4's ``(σ, W, b)``,
  activation first (told apart by what the first field holds), in the later order; ``Flux.Zeros``
  (a bias switched off in Flux 0.11/0.12) -> ``false`` wherever it stands.
- ``Conv``/``ConvTranspose``/``CrossCor``/``DepthwiseConv``: no ``dilation`` (DepthwiseConv ≤ 0.8,
  Conv 0.5.0-0.5.2) -> ones; no ``groups`` (≤ 0.11) -> 1 (the port's default); the type
  ``Conv{N,F,A,V}`` (≤ 0.8, no pad-length parameter) gains its ``M`` so that the activation is
  type parameter 3 as later.
- ``BatchNorm``/``InstanceNorm``/``GroupNorm``: 7 or 8 fields (≤ 0.11, with or without ``active``)
  -> the 11 (12 with ``G``) of 0.12: ``affine``/``track_stats`` from which arrays are there, ``chs``
  from their length. Flux's master between 0.11 and 0.12 (``0.12.0-dev``, early 2021) had the 11
  (12) fields with ``chs`` first (``chs, λ, β, …`` and GroupNorm's ``chs, G, λ, …``): the same names
  in 0.12's order. Flux 0.4-0.6's BatchNorm kept the running standard deviation where the variance
  stands later (:func:`stores_running_std`): ``σ² = σ.^2 .- ϵ``.
- ``LayerNorm``: ``(diag,)`` (≤ 0.11) -> ``(λ, diag, ϵ, size, affine)`` with ϵ = 1f-5 (0.11's
  ``normalise``; 0.10's had none); ``Diagonal(α, β)`` (≤ 0.12) -> ``Scale(scale, bias)``.
- ``Dropout``: ``(p, active)`` (≤ 0.8), ``(p, dims)`` (0.10), ``(p, dims, active)`` -> the port reads
  ``p`` and ``dims``; ``Maxout(over)`` (≤ 0.12) -> ``Maxout(layers)``.
- ``Recur``: ``(cell, init, state)`` (≤ 0.11) -> ``(cell, state)``; the cells' learnable initial
  state ``h`` (RNNCell, GRUCell) or ``h, c`` (LSTMCell), vectors there, becomes ``state0`` of size
  ``(H, 1)`` as in Flux 0.12 to 0.14. Gate order never changed (LSTM i, f, g, o; GRU r, z, h̃).

Tracker's ``TrackedArray`` (Flux ≤ 0.9) is read as its ``data`` before this runs (the reader, or
``_wholemodel``'s unwrapping for JLD2 files).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from .._errors import ConversionError, TreePath, format_path
from .._juliatype import JuliaType
from .._values import Closure, JuliaDict, JuliaStruct, NamedTuple, Singleton
from ._arch import known_closure

GPU_ARRAYS = frozenset({"CuArray", "CuDeviceArray", "ROCArray", "MtlArray"})  # device memory only
_CONV_KINDS = ("Conv", "ConvTranspose", "CrossCor", "DepthwiseConv")
_NORM = ("λ", "β", "γ", "μ", "σ²", "ϵ", "momentum")

# Per layer kind, its field layouts in every Flux era, newest first. The first layout whose length
# matches (and whose fields hold what the names say, see _fits) names the stored fields.
LAYOUTS: dict[str, tuple[tuple[str, ...], ...]] = {
    "Chain": (("layers",),),
    "SkipConnection": (("layers", "connection"),),
    "Parallel": (("connection", "layers"),),
    "PairwiseFusion": (("connection", "layers"),),
    "Scale": (("scale", "bias", "σ"),),
    "Bilinear": (("weight", "bias", "σ"),),
    "Embedding": (("weight", "padding_idx"), ("weight",)),
    "MaxPool": (("k", "pad", "stride"),),
    "MeanPool": (("k", "pad", "stride"),),
    "AdaptiveMaxPool": (("out",),),
    "AdaptiveMeanPool": (("out",),),
    "MultiHeadAttention": (("nheads", "q_proj", "k_proj", "v_proj", "attn_drop", "out_proj"),),
    **dict.fromkeys(("RNN", "LSTM", "GRU", "GRUv3"), (("cell",),)),
    "Dense": (("weight", "bias", "σ"), ("W", "b", "σ"), ("σ", "W", "b")),  # the last: Flux 0.3-0.4
    "Conv": (
        ("σ", "weight", "bias", "stride", "pad", "dilation", "groups"),
        ("σ", "weight", "bias", "stride", "pad", "dilation"),
        ("σ", "weight", "bias", "stride", "pad"),  # Flux 0.5.0 to 0.5.2 (no dilation yet)
    ),
    "ConvTranspose": (
        ("σ", "weight", "bias", "stride", "pad", "outpad", "dilation", "groups"),
        ("σ", "weight", "bias", "stride", "pad", "dilation", "groups"),
        ("σ", "weight", "bias", "stride", "pad", "dilation"),
    ),
    "CrossCor": (("σ", "weight", "bias", "stride", "pad", "dilation"),),
    "DepthwiseConv": (
        ("σ", "weight", "bias", "stride", "pad", "dilation", "groups"),
        ("σ", "weight", "bias", "stride", "pad", "dilation"),
        ("σ", "weight", "bias", "stride", "pad"),
    ),
    "BatchNorm": (
        (*_NORM, "affine", "track_stats", "active", "chs"),
        ("chs", *_NORM, "affine", "track_stats", "active"),  # 0.12.0-dev
        (*_NORM, "active"),
        _NORM,
    ),
    "InstanceNorm": (
        (*_NORM, "affine", "track_stats", "active", "chs"),
        ("chs", *_NORM, "affine", "track_stats", "active"),  # 0.12.0-dev
        (*_NORM, "active"),
        _NORM,
    ),
    "GroupNorm": (
        ("G", *_NORM, "affine", "track_stats", "active", "chs"),
        ("chs", "G", *_NORM, "affine", "track_stats", "active"),  # 0.12.0-dev
        ("G", *_NORM, "active"),
        ("G", *_NORM),
    ),
    "LayerNorm": (("λ", "diag", "ϵ", "size", "affine"), ("diag",)),
    "Diagonal": (("α", "β"),),
    "Dropout": (("p", "dims", "active", "rng"), ("p", "dims", "active"), ("p", "dims"), ("p", "active")),
    "AlphaDropout": (("p", "active", "rng"), ("p", "active"), ("p",)),
    "Maxout": (("layers",), ("over",)),
    "Recur": (("cell", "state"), ("cell", "init", "state")),
    "RNNCell": (("σ", "Wi", "Wh", "bias"), ("σ", "Wi", "Wh", "b", "state0")),
    "LSTMCell": (("Wi", "Wh", "bias"), ("Wi", "Wh", "b", "state0"), ("Wi", "Wh", "b", "h", "c")),
    "GRUCell": (("Wi", "Wh", "b"), ("Wi", "Wh", "b", "state0")),
    "GRUv3Cell": (("Wi", "Wh", "b", "Wh_h̃"), ("Wi", "Wh", "b", "Wh_h̃", "state0")),
}

# Old names that mean the same field under a later name (position-independent renames).
_RENAMES: dict[str, dict[str, str]] = {
    "Dense": {"W": "weight", "b": "bias"},
    "Maxout": {"over": "layers"},
}


def normalise(value: Any, path: TreePath = (), *, closures: str = "keep") -> Any:
    """``value`` (a whole Flux model as ``tx.load`` returns it) with every old-era Flux struct in
    its Flux 0.13/0.14 form; other values are returned as they are (arrays are not copied).

    ``closures="error"`` raises :class:`ConversionError` at the first closure (an anonymous
    function BSON.jl stored as code), naming its place in the model and where it was defined.

    Example:
        >>> import numpy as np
        >>> old = JuliaStruct("Flux.Dense{NNlib.#relu,Core.Array{Core.Float32,2},Core.Array{Core.Float32,1}}",
        ...                   {"W": np.ones((2, 3), np.float32), "b": np.zeros(2, np.float32)})
        >>> list(normalise(old).fields)
        ['weight', 'bias']
    """
    return _Normaliser(closures).walk(value, tuple(path))


def closure_description(value: Any) -> str | None:
    """``"#3 (Main.#3#4, defined at REPL[9]:8)"`` for a closure, else ``None``.

    A closure is an anonymous function: a :class:`~treexchange.Closure` (BSON.jl stored its code;
    it names where it was defined), or a function known by its type only
    (``Singleton('Main.#109#110')``, Julia ≥ 1.12's ``Main.VAEModel.#VAE##0#VAE##1``, named after the
    function it was written in, or a struct of that type holding its captured variables).

    Example:
        >>> from treexchange import Closure
        >>> closure_description(Closure("Main.#3#4", name="#3", file="REPL[9]", line=8))
        '#3 (Main.#3#4, defined at REPL[9]:8)'
        >>> closure_description(Singleton("Main.M.#VAE##0#VAE##1"))
        'Main.M.#VAE##0#VAE##1'
        >>> closure_description(Singleton("NNlib.#relu")) is None
        True
    """
    if isinstance(value, Closure):
        details = [value.type.name]
        if value.where:
            details.append(f"defined at {value.where}")
        if value.code:
            details.append(value.code)
        return f"{value.name or value.type.name} ({', '.join(details)})"
    if isinstance(value, (JuliaStruct, Singleton)):
        base = value.type.name.rsplit(".", 1)[-1]
        anonymous = base[:1] == "#" and (base[1:2].isdigit() or "##" in base)  # #3#4 (≤ 1.11), #f##0#f##1
        return value.type.name if anonymous else None
    return None


def _spelled_function(value: Any) -> Singleton | None:
    """A closure whose stored code only spells a known function (``x -> reshape(x, :, size(x,
    4))``, the model zoo's flatten; ``x -> relu.(x)``) as that function's singleton, else None."""
    code = value.code if isinstance(value, Closure) and not value.captures else None
    name = known_closure(code) if code else None
    if name is None:
        return None
    return Singleton("Flux.#flatten" if name == "flatten" else f"NNlib.#{name}")


def closure_error(value: Any, path: TreePath) -> ConversionError:
    """The error for a closure where the port needs a layer: where it is, where it was defined,
    and the way out (``architecture=``)."""
    position = ""
    if len(path) >= 2 and path[-2] == "layers" and isinstance(path[-1], (int, str)):
        position = f" (layer {path[-1]} of the Chain {format_path(path[:-2])})"
    return ConversionError(
        f"anonymous function {closure_description(value)}{position}: a closure is code, which "
        "treexchange never runs. Pass architecture= (--architecture on the command line) with the "
        "model as Flux prints it, writing the closure as the layer it computes (e.g. Flux.flatten for "
        "x -> reshape(x, :, size(x, 4)))",
        path=path,
    )


def is_gpu_array(value: Any) -> bool:
    """Whether ``value`` is a GPU array saved as it is (``CUDA.CuArray``...): a struct of device
    addresses, none of the numbers."""
    return isinstance(value, JuliaStruct) and value.type.basename in GPU_ARRAYS


def gpu_pointers_error(array: JuliaStruct, path: TreePath) -> ConversionError:
    """The refusal of a GPU array where weights are wanted (``array`` at ``path``)."""
    return ConversionError(
        f"the file holds no weights (GPU pointers): {array.type.name} stores only device addresses. "
        "Save the model from the CPU (BSON.@save with cpu(model)) and convert that file",
        path=path,
    )


class _Normaliser:
    def __init__(self, closures: str) -> None:
        self.closures = closures

    def walk(self, value: Any, path: TreePath) -> Any:
        if isinstance(value, JuliaStruct):
            return self.struct(value, path)
        if isinstance(value, NamedTuple):
            return NamedTuple((k, self.walk(v, (*path, k))) for k, v in value.items())
        if isinstance(value, tuple):
            return tuple(self.walk(v, (*path, i + 1)) for i, v in enumerate(value))
        if isinstance(value, list):
            return [self.walk(v, (*path, i + 1)) for i, v in enumerate(value)]
        if isinstance(value, dict):  # (a checkpoint Dict("model" => model, ...): Functors walks it)
            walked = JuliaDict((k, self.walk(v, (*path, k))) for k, v in value.items())
            walked.julia_type = getattr(value, "julia_type", None)
            return walked
        if self.closures == "error" and closure_description(value) is not None:
            spelled = _spelled_function(value)
            if spelled is not None:
                return spelled
            raise closure_error(value, path)
        return value

    def struct(self, s: JuliaStruct, path: TreePath) -> Any:
        kind = s.type.basename
        if kind == "Zeros" and _is_flux(s.type):
            return False  # Flux 0.11/0.12's "no bias"
        if kind in GPU_ARRAYS:
            raise gpu_pointers_error(s, path)
        if self.closures == "error" and closure_description(s) is not None:
            raise closure_error(s, path)
        if kind in _DENSE_CELLS and _is_flux(s.type) and any(_is_dense(v) for v in s.fields.values()):
            raise _dense_cell_error(s, path)
        named = _name_fields(kind, s.fields) if _is_flux(s.type) and kind in LAYOUTS else None
        if named is None and _is_flux(s.type) and kind in LAYOUTS:
            counts = sorted({len(layout) for layout in LAYOUTS[kind]})
            raise ConversionError(
                f"{s.type} has {len(s.fields)} fields; no Flux version's {kind} has that layout "
                f"({' or '.join(map(str, counts))} fields)",
                path=path,
            )
        if named is None:
            fields = {k: self.walk(v, (*path, k)) for k, v in s.fields.items()}
            return JuliaStruct(s.type, fields, layout=s.layout, mutable=s.mutable)
        renames = _RENAMES.get(kind, {})
        named = {renames.get(k, k): v for k, v in named.items()}
        named = {k: self.walk(v, (*path, k)) for k, v in named.items()}
        upgrade = _UPGRADES.get(kind)
        type_, named = upgrade(s.type, named) if upgrade else (s.type, named)
        if kind == "Diagonal":
            type_, named = _diagonal_as_scale(type_, named)
        return JuliaStruct(type_, named, layout=None, mutable=s.mutable)


# Flux 0.3-0.4's recurrent cells, built of Dense layers applied to vcat(x, h): RNNCell(d, h),
# LSTMCell(forget, input, output, cell, h, c), GRUCell(update, reset, candidate, h)
_DENSE_CELLS = {
    "RNNCell": "d",
    "LSTMCell": "forget, input, output, cell",
    "GRUCell": "update, reset, candidate",
}


def _is_dense(value: Any) -> bool:
    return isinstance(value, JuliaStruct) and _is_flux(value.type) and value.type.basename == "Dense"


def _dense_cell_error(s: JuliaStruct, path: TreePath) -> ConversionError:
    """The refusal of a Flux 0.3-0.4 recurrent cell (its gates Dense layers): no later Flux has
    its layout, and its GRU updates the other way round (``(1 .- z).*h .+ z.*h̃``, the candidate
    from ``vcat(r.*h, x)``), so reading it as a later cell would compute another function."""
    kind = s.type.basename
    gru = " and an update gate the other way round" if kind == "GRUCell" else ""
    return ConversionError(
        f"{s.type} is Flux 0.3-0.4's {kind}, built of Dense layers ({_DENSE_CELLS[kind]}) applied to "
        f"vcat(x, h): a layout no later Flux has{gru}, which treexchange does not port",
        path=path,
    )


def _is_flux(type_: JuliaType) -> bool:
    return type_.name.split(".", 1)[0] == "Flux"


def _fits(name: str, value: Any) -> bool:
    """Whether a stored field value can be the field ``name`` (told apart where two eras have the
    same number of fields: Dropout's ``dims`` vs ``active``)."""
    if name == "active":
        return value is None or isinstance(value, (bool, np.bool_))
    if name == "dims":
        return not isinstance(value, (bool, np.bool_)) and value is not None
    if name in ("chs", "G"):  # (a norm's counts: 0.12's chs last, 0.12.0-dev's first, where 0.12 has λ)
        return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if name == "λ":
        return not isinstance(value, (int, np.integer, np.ndarray))
    if name in ("weight", "W"):  # (Dense's activation came first in Flux 0.3-0.4, last later)
        return not _is_function(value)
    if name == "σ":
        return not isinstance(value, np.ndarray)
    return True


def _is_function(value: Any) -> bool:
    """Whether a stored field value is a function (an activation): a singleton such as
    ``NNlib.#relu``, or a closure."""
    return isinstance(value, (Singleton, Closure)) or closure_description(value) is not None


def _name_fields(kind: str, fields: Mapping[str, Any]) -> dict[str, Any] | None:
    """The fields under the names of the era they come from (``None``: no era has this layout)."""
    names = list(fields)
    values = list(fields.values())
    for layout in LAYOUTS[kind]:
        if list(layout) == names:
            return dict(fields)
    for layout in LAYOUTS[kind]:
        if set(names) <= set(layout) and names and not names[0].isdigit():
            return dict(fields)  # named fields, some left out (JLD2's zero-size ghosts)
    for layout in LAYOUTS[kind]:
        if len(layout) == len(values) and all(_fits(n, v) for n, v in zip(layout, values, strict=True)):
            return dict(zip(layout, values, strict=True))
    return None


def era_field_names(s: JuliaStruct) -> list[str]:
    """The names of a struct's fields in the Flux version that wrote it (BSON stores none: the
    reader names them ``"1"``, ``"2"``...); the stored names for anything else.

    Example:
        >>> recur = JuliaStruct("Flux.Recur{Flux.RNNCell}", {"1": None, "2": np.zeros(2), "3": np.zeros(2)})
        >>> era_field_names(recur)  # Flux ≤ 0.11's Recur
        ['cell', 'init', 'state']
    """
    named = (
        _name_fields(s.type.basename, s.fields) if _is_flux(s.type) and s.type.basename in LAYOUTS else None
    )
    return list(named) if named is not None else list(s.fields)


def _column(value: Any) -> Any:
    """An initial state vector ``(H,)`` as Flux 0.12's ``(H, 1)``."""
    if isinstance(value, np.ndarray) and value.ndim == 1:
        return value.reshape(-1, 1)
    if isinstance(value, tuple):
        return tuple(_column(v) for v in value)
    return value


def _conv(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    weight = f.get("weight")
    n = weight.ndim - 2 if isinstance(weight, np.ndarray) else None
    if "dilation" not in f and n is not None:
        f["dilation"] = (np.int64(1),) * n
    if len(type_.params) == 4 and n is not None:  # Conv{N,F,A,V} (Flux ≤ 0.8): no pad length M
        params = type_.params
        type_ = JuliaType(type_.name, (params[0], params[0], *params[1:]))
    return type_, f


def _norm(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    if "chs" in f:  # 0.12's fields (0.12.0-dev's, chs first, put in 0.12's order)
        return type_, {k: f[k] for k in ("G", *_NORM, "affine", "track_stats", "active", "chs") if k in f}
    if stores_running_std(type_, f):
        f = _std_as_variance(f)
    arrays = [v for k in ("β", "γ", "μ", "σ²") if isinstance(v := f.get(k), np.ndarray)]
    out = {k: f[k] for k in ("G", *_NORM) if k in f}
    out["affine"] = isinstance(f.get("γ"), np.ndarray)
    out["track_stats"] = isinstance(f.get("μ"), np.ndarray)
    out["active"] = None  # old `active::Bool` meant "training mode"; Flux 0.12 uses nothing = auto
    if arrays:
        out["chs"] = np.int64(arrays[0].shape[0])
    return type_, out


def stores_running_std(type_: JuliaType, f: Mapping[str, Any]) -> bool:
    """Whether an 8-field ``BatchNorm`` (Flux ≤ 0.11) is Flux 0.4-0.6's, whose fifth field is the
    running *standard deviation* ``σ`` (``ones`` at first; test mode divides by it, adding no ϵ),
    not Flux ≥ 0.7's running variance ``σ²`` (divided by ``sqrt(σ² .+ ϵ)``). BSON.jl keeps no field
    names, so the era shows in what the struct holds: ``BatchNorm{F,V,N}`` (three type parameters,
    Flux ≤ 0.5.1), or ϵ equal to ``1e-8`` as a Float64, the default of every Flux ≤ 0.6 and of
    none after (0.7.0: ``1e-5``, 0.7.3 on: ``1f-5``). A Flux ≤ 0.6 BatchNorm built with another ϵ
    cannot be told from a later one.

    Example:
        >>> bn = JuliaType.parse("Flux.BatchNorm{NNlib.#relu,Array{Float32,1},Array{Float32,1},Float64}")
        >>> stores_running_std(bn, {"ϵ": 1e-8}), stores_running_std(bn, {"ϵ": 1e-5})
        (True, False)
    """
    if type_.basename != "BatchNorm" or "chs" in f:
        return False
    eps = f.get("ϵ")
    default = isinstance(eps, (float, np.floating)) and np.asarray(eps).dtype == np.float64 and eps == 1e-8
    return len(type_.params) == 3 or bool(default)


def _std_as_variance(f: dict[str, Any]) -> dict[str, Any]:
    """Flux ≤ 0.6's running standard deviation as the variance a later BatchNorm divides by:
    ``σ² = σ.^2 .- ϵ``, so that ``sqrt(σ² .+ ϵ)`` is the old ``σ`` (never below ``sqrt(ϵ)`` in a
    trained layer: each update averages ``sqrt(var .+ ϵ)``, and it starts at one). Flux ≤ 0.5.1
    started ``μ``, ``σ`` as the numbers ``0.0``, ``1.0``: made vectors as long as ``β``."""
    out = dict(f)
    eps = float(f["ϵ"])
    like = next((v for k in ("β", "γ") if isinstance(v := f.get(k), np.ndarray)), None)
    for key in ("μ", "σ²"):
        value = out.get(key)
        if like is not None and isinstance(value, (int, float, np.number)) and not isinstance(value, bool):
            out[key] = np.full(like.shape[:1], value, like.dtype)
    std = out.get("σ²")
    if isinstance(std, np.ndarray):
        variance = np.maximum(np.square(std.astype(np.float64)) - eps, 0.0)
        out["σ²"] = variance.astype(std.dtype)
    return out


def _dense(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    """Flux 0.3-0.4's ``(σ, weight, bias)`` in the order of every later Flux; the forward pass,
    ``σ.(W*x .+ b)``, never changed."""
    order = ("weight", "bias", "σ")
    if list(f)[:1] == ["σ"] and set(f) == set(order):
        return type_, {k: f[k] for k in order}
    return type_, f


def _layernorm(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    if "size" in f:
        return type_, f
    diag = f["diag"]
    alpha = diag.fields.get("scale", diag.fields.get("α")) if isinstance(diag, JuliaStruct) else None
    if not isinstance(alpha, np.ndarray):
        return type_, f
    identity = JuliaType("Base.#identity")
    new_type = JuliaType(type_.name, (identity, diag.type, JuliaType("Core.Float32"), np.int64(alpha.ndim)))
    fields = {
        "λ": Singleton(identity),
        "diag": diag,
        "ϵ": np.float32(1e-5),
        "size": tuple(np.int64(d) for d in alpha.shape),
        "affine": True,
    }
    return new_type, fields


def _diagonal_as_scale(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    array = type_.params[0] if type_.params else JuliaType("Core.Array")
    new_type = JuliaType("Flux.Scale", (JuliaType("Base.#identity"), array, array))
    return new_type, {"scale": f["α"], "bias": f["β"], "σ": Singleton("Base.#identity")}


def _dropout(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    return type_, {"p": f["p"], "dims": f.get("dims", Singleton("Base.Colon")), "active": None}


def _recur(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    return type_, {"cell": f["cell"], "state": _column(f.get("state"))}


def _cell(type_: JuliaType, f: dict[str, Any]) -> tuple[JuliaType, dict[str, Any]]:
    if "bias" in f or ("state0" not in f and "h" not in f):
        return type_, f  # Flux ≥ 0.15 cells: nothing to change
    out = {k: v for k, v in f.items() if k not in ("h", "c", "state0")}
    if "c" in f:
        out["state0"] = (_column(f["h"]), _column(f["c"]))
    else:
        out["state0"] = _column(f.get("state0", f.get("h")))
    return type_, out


_UPGRADES: dict[str, Callable[[JuliaType, dict[str, Any]], tuple[JuliaType, dict[str, Any]]]] = {
    "Dense": _dense,
    **dict.fromkeys(_CONV_KINDS, _conv),
    **dict.fromkeys(("BatchNorm", "InstanceNorm", "GroupNorm"), _norm),
    "LayerNorm": _layernorm,
    "Dropout": _dropout,
    "Recur": _recur,
    **dict.fromkeys(("RNNCell", "LSTMCell", "GRUCell", "GRUv3Cell"), _cell),
}

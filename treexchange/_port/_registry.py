"""The layer registry: one record per Flux/Lux layer kind, and what each target registers for it.

A :class:`LayerKind` holds every fact about one Flux constructor that more than one module needs:

- its group (a container, a layer with arrays, a stateless layer);
- its ``Flux.state`` fields per era and its Julia constructor (the callables of :mod:`._rules`),
  and Flux's defaults for its hyper-parameters;
- the array sizes its hyper-parameters imply (what ``from_flux`` checks a state against);
- which arrays are running statistics rather than trained weights;
- where its activation goes (``"after"``: a separate function after the module in the Python
  targets; ``"inside"``: the module applies it itself);
- its gate blocks, in Flux's order (recurrent layers);
- its Lux names (``ps``/``st`` and the Lux name of each Flux array, Lux 1 and 0.5);
- its PyTorch module classes, or why PyTorch has none;
- what differs between the Flux eras (``docs/porting.md`` §Flux eras).

Each target (``equinox``, ``nnx``, ``linen``, ``torch``) registers, per kind, a **builder** (Flux
layer -> the target's module, or for PyTorch its tensors) and a **reader** (the target's module ->
the Flux layer) with :func:`register`; a second registration of the same kind and target is
refused, and ``tests/test_port_registry.py`` fails on a kind a target misses or one the registry
does not know. The Flux and Lux writers need no registration: they are the records' own fields and
Lux names. Adding a layer = one record here + one builder and reader per target
(``docs/design.md``); adding a framework = one target module that registers its entries.

Example:
    >>> from treexchange._port._spec import Layer
    >>> KINDS["LSTM"].gates, KINDS["BatchNorm"].state_arrays
    (('i', 'f', 'g', 'o'), ('μ', 'σ²'))
    >>> conv = Layer("Conv", {"kernel": (5, 5), "in": 1, "out": 6, "σ": "relu"})
    >>> [name for name, _ in RULES["Conv"].fields(with_defaults(conv), "0.15")]
    ['σ', 'weight', 'bias', 'stride', 'pad', 'dilation', 'groups']
    >>> julia_constructor(conv)
    'Conv((5, 5), 1 => 6, relu)'
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

from .._errors import ConversionError, TreexchangeError, UnsupportedError
from . import _rules as R
from ._spec import Layer

PORTING_DOCS = "docs/porting.md"

TARGETS = ("equinox", "nnx", "linen", "torch")
"""The targets that register a builder and a reader per kind."""


@dataclasses.dataclass(frozen=True)
class ArrayShape:
    """One array a layer's hyper-parameters imply: ``state[where…][key]`` of size ``shape``.

    ``alias`` is the field's name in old Flux versions (Dense ``W``/``b`` before Flux 0.12;
    ``Diagonal``'s ``α``/``β`` inside a LayerNorm); ``optional`` arrays may be absent or ``false``.
    """

    key: str
    shape: tuple[int, ...]
    where: tuple[str, ...] = ()
    optional: bool = False
    alias: str | None = None


def _no_arrays(layer: Layer) -> list[ArrayShape]:
    return []


@dataclasses.dataclass(frozen=True)
class LayerKind:
    """Every fact about one Flux layer kind (see the module docstring)."""

    kind: str
    group: str  # "container", "arrays" or "stateless"
    fields: Callable[[Layer, str], Any]
    julia: Callable[[Layer, list[str], str], str]
    defaults: Callable[[Layer], dict[str, Any]] = lambda layer: {}
    shapes: Callable[[Layer], list[ArrayShape]] = _no_arrays
    activation: str = ""  # "after", "inside" or "" (none)
    state_arrays: tuple[str, ...] = ()  # running statistics, not trained
    gates: tuple[str, ...] = ()  # gate blocks along dim 1 of Wi/Wh/b, in Flux's order
    lux: Mapping[str, tuple[str, str]] = dataclasses.field(default_factory=dict)  # Lux 1
    lux_05: Mapping[str, tuple[str, str]] | None = None  # Lux 0.5 where its names differ
    torch: tuple[str, ...] = ()  # torch.nn module classes holding the same tensors
    torch_refusal: str = ""  # why PyTorch cannot compute this layer (then ``torch`` is empty)
    eras: str = ""  # what differs between Flux <= 0.14 and >= 0.15
    # The Flux struct (whole-model files): its field orders, newest Flux first, then older ones
    # (JLD2 <= 0.4 leaves the zero-size σ/λ out, which the reader re-inserts in this order), and
    # which type parameter of the struct holds the activation.
    struct_fields: tuple[tuple[str, ...], ...] = ()
    activation_param: int | None = None
    cell_of: str = ""  # a bare recurrent cell (one step): the layer that scans it (GRUCell -> GRU)


Rule = LayerKind  # the Julia side of a record: ``fields``, ``julia``, ``defaults`` (older name)


# --- array sizes (what a state must hold for the hyper-parameters) -----------------------------------


def _dense_shapes(layer: Layer) -> list[ArrayShape]:
    a = layer.args
    return [
        ArrayShape("weight", (a["out"], a["in"]), alias="W"),
        ArrayShape("bias", (a["out"],), optional=not a.get("bias", True), alias="b"),
    ]


def _scale_shapes(layer: Layer) -> list[ArrayShape]:
    size = tuple(layer.args["size"])
    return [ArrayShape("scale", size), ArrayShape("bias", size, optional=not layer.args.get("bias", True))]


def _conv_shapes(layer: Layer) -> list[ArrayShape]:
    a = layer.args
    groups = a.get("groups", 1)
    if layer.kind == "ConvTranspose":  # the adjoint: Julia (k…, out÷G, in)
        shape = (*a["kernel"], a["out"] // groups, a["in"])
    else:
        shape = (*a["kernel"], a["in"] // groups, a["out"])
    return [ArrayShape("weight", shape), ArrayShape("bias", (a["out"],), optional=not a.get("bias", True))]


def _norm_shapes(layer: Layer) -> list[ArrayShape]:
    return [ArrayShape(key, (layer.args["channels"],), optional=True) for key in ("β", "γ", "μ", "σ²")]


def _layernorm_shapes(layer: Layer) -> list[ArrayShape]:
    size = tuple(layer.args["size"])
    return [
        ArrayShape("scale", size, ("diag",), optional=True, alias="α"),
        ArrayShape("bias", size, ("diag",), optional=True, alias="β"),
    ]


def _recurrent_shapes(layer: Layer) -> list[ArrayShape]:
    a, kind = layer.args, wrapped_kind(layer.kind)
    g, h = len(KINDS[kind].gates), a["out"]
    hidden_rows = (2 if kind == "GRUv3" else g) * h  # GRUv3's h̃ block of Wh is the separate Wh_h̃
    where = () if layer.kind in CELLS else ("cell",)  # (a bare cell's state is the wrapped layer's cell)
    return [ArrayShape("Wi", (g * h, a["in"]), where), ArrayShape("Wh", (hidden_rows, h), where)]


def _attention_shapes(layer: Layer) -> list[ArrayShape]:
    a = layer.args
    return [
        ArrayShape("weight", (a["qk_dim"], a["q_in"]), ("q_proj",)),
        ArrayShape("weight", (a["qk_dim"], a["k_in"]), ("k_proj",)),
        ArrayShape("weight", (a["v_dim"], a["v_in"]), ("v_proj",)),
        ArrayShape("weight", (a["out"], a["v_dim"]), ("out_proj",)),
    ]


# --- the records -------------------------------------------------------------------------------------

_BIAS_DEFAULTS = {"bias": True, "σ": "identity"}
_LUX_WEIGHTS = {"weight": ("ps", "weight"), "bias": ("ps", "bias")}
_LUX_NORM = {"γ": ("ps", "scale"), "β": ("ps", "bias")}
_LUX_RECURRENT = {"Wi": ("ps", "weight_ih"), "Wh": ("ps", "weight_hh"), "b": ("ps", "bias_ih")}
_CONV_TORCH = ("Conv1d", "Conv2d", "Conv3d")
_POOLS_0_14 = "a leaf in Flux <= 0.14 (Functors 0.4), so its state is (); its fields from Flux 0.15"
_RECUR = (
    "Flux <= 0.14 wraps the cell in Recur: (cell = (…, b, state0), state); Flux 0.15 has (cell = (…),) "
    "and names RNN/LSTM's bias `bias`"
)


def _conv(kind: str, torch: tuple[str, ...], eras: str = "") -> LayerKind:
    return LayerKind(
        kind, "arrays", R.conv_fields, R.conv_julia, R.conv_defaults, _conv_shapes, "after",
        lux=_LUX_WEIGHTS if kind in ("Conv", "CrossCor") else {}, torch=torch, eras=eras,
    )  # fmt: skip


def _norm(kind: str, torch: tuple[str, ...]) -> LayerKind:
    stats = ("μ", "σ²") if kind != "GroupNorm" else ()
    lux = (
        {**_LUX_NORM, "μ": ("st", "running_mean"), "σ²": ("st", "running_var")} if kind == "BatchNorm" else {}
    )
    if kind == "GroupNorm":
        lux = dict(_LUX_NORM)
    return LayerKind(
        kind, "arrays", R.norm_fields, R.norm_julia, R.norm_defaults, _norm_shapes, "after",
        state_arrays=stats, lux=lux, torch=torch,
    )  # fmt: skip


def _recurrent(kind: str, gates: tuple[str, ...], lux_05: Mapping[str, tuple[str, str]] | None) -> LayerKind:
    torch = (kind,) if kind != "GRUv3" else ()
    refusal = (
        "Flux's GRUv3 applies the reset gate before Wh (the paper's form); PyTorch's GRU has no such "
        "variant, so its weights cannot be moved exactly (use GRU)"
        if kind == "GRUv3"
        else ""
    )
    return LayerKind(
        kind, "arrays", R.recurrent_fields, R.recurrent_julia,
        (lambda layer: {"σ": "tanh"}) if kind == "RNN" else (lambda layer: {}),
        _recurrent_shapes, "inside" if kind == "RNN" else "",
        gates=gates, lux=_LUX_RECURRENT if kind != "GRUv3" else {}, lux_05=lux_05,
        torch=torch, torch_refusal=refusal, eras=_RECUR,
    )  # fmt: skip


def _bare_cell(cell: str, wrapped: LayerKind) -> LayerKind:
    """A bare Flux ≥ 0.15 cell (``GRUCell(3 => 5)`` alone, one step ``cell(x, h)``, the state carried
    by the caller): the wrapped layer's record (gates, sizes, activation, torch refusal) with the
    cell's state (the wrapped layer's ``cell``), its text and PyTorch's cell modules. Lux's cells are
    not mapped (``lux`` empty: Lux's ps/st writer refuses it by name)."""
    return dataclasses.replace(
        wrapped, kind=cell, fields=R.bare_cell_fields, julia=R.bare_cell_julia, lux={}, lux_05=None,
        torch=tuple(f"{module}Cell" for module in wrapped.torch), cell_of=wrapped.kind,
        eras="Flux >= 0.15 only (a Flux <= 0.14 cell is called cell(h, x) and holds state0, for its Recur)",
    )  # fmt: skip


def _stateless(
    kind: str, fields: Callable[[Layer, str], Any], julia: Any, defaults: Any = None, eras: str = ""
) -> LayerKind:
    return LayerKind(kind, "stateless", fields, julia, defaults or (lambda layer: {}), eras=eras)


def _connected(kind: str) -> LayerKind:
    """``Parallel`` or ``PairwiseFusion``: a connection function first, then the layers."""

    def julia(layer: Layer, children: list[str], era: str) -> str:
        return f"{kind}({R.connection(layer)}, {', '.join(children)})"

    return LayerKind(
        kind, "container", lambda layer, era: [("connection", ()), ("layers", R.Children())], julia
    )


def _container(kind: str, fields: Callable[[Layer, str], Any], julia: Any) -> LayerKind:
    return LayerKind(kind, "container", fields, julia)


KINDS: dict[str, LayerKind] = {
    record.kind: record
    for record in [
        LayerKind(
            "Dense", "arrays", R.dense_fields, R.dense_julia, lambda layer: dict(_BIAS_DEFAULTS),
            _dense_shapes, "after", lux=_LUX_WEIGHTS, torch=("Linear",),
        ),
        LayerKind(
            "Bilinear", "arrays", R.dense_fields, R.bilinear_julia, lambda layer: dict(_BIAS_DEFAULTS),
            lambda layer: [ArrayShape("weight", (layer.args["out"], *layer.args["in"]))], "inside",
            torch=("Bilinear",),
        ),
        LayerKind(
            "Scale", "arrays", R.scale_fields, R.scale_julia, lambda layer: dict(_BIAS_DEFAULTS),
            _scale_shapes, "after", lux={"scale": ("ps", "weight"), "bias": ("ps", "bias")},
            torch_refusal="torch.nn has no module holding Flux's Scale (an elementwise scale and shift "
            "of the input's shape): its arrays have no state_dict names to pair with",
        ),
        LayerKind(
            "Embedding", "arrays", R.embedding_fields, R.embedding_julia,
            shapes=lambda layer: [ArrayShape("weight", (layer.args["out"], layer.args["in"]))],
            lux={"weight": ("ps", "weight")}, torch=("Embedding",),
        ),
        _conv("Conv", _CONV_TORCH),
        _conv("DepthwiseConv", _CONV_TORCH),
        _conv("CrossCor", _CONV_TORCH),
        _conv("ConvTranspose", ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d"),
              "the `outpad` field from Flux 0.14.17"),
        _norm("BatchNorm", ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d")),
        _norm("InstanceNorm", ("InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d")),
        _norm("GroupNorm", ("GroupNorm",)),
        LayerKind(
            "LayerNorm", "arrays", R.layernorm_fields, R.layernorm_julia, R.layernorm_defaults,
            _layernorm_shapes, "after", lux={"bias": ("ps", "bias"), "scale": ("ps", "scale")},
            torch=("LayerNorm",),
            eras="Flux <= 0.14 divides by (σ + ϵ), Flux 0.15 by √(σ² + ϵ²); the keyword is `ϵ` then `eps`",
        ),
        _recurrent("RNN", ("h",),
                   {"Wi": ("ps", "weight_ih"), "Wh": ("ps", "weight_hh"), "b": ("ps", "bias")}),
        _recurrent("LSTM", ("i", "f", "g", "o"),
                   {"Wi": ("ps", "weight_i"), "Wh": ("ps", "weight_h"), "b": ("ps", "bias")}),
        _recurrent("GRU", ("r", "z", "h"), None),
        _recurrent("GRUv3", ("r", "z", "h"), None),
        LayerKind(
            "MultiHeadAttention", "arrays", R.attention_fields, R.attention_julia, R.attention_defaults,
            _attention_shapes, torch=("MultiheadAttention",), eras="Flux >= 0.13.15",
        ),
        _stateless("MaxPool", R.pool_fields, R.pool_julia, R.pool_defaults, _POOLS_0_14),
        _stateless("MeanPool", R.pool_fields, R.pool_julia, R.pool_defaults, _POOLS_0_14),
        _stateless("AdaptiveMaxPool", R.adaptive_fields, R.adaptive_julia, eras=_POOLS_0_14),
        _stateless("AdaptiveMeanPool", R.adaptive_fields, R.adaptive_julia, eras=_POOLS_0_14),
        _stateless("GlobalMaxPool", R.no_state, lambda layer, c, era: "GlobalMaxPool()"),
        _stateless("GlobalMeanPool", R.no_state, lambda layer, c, era: "GlobalMeanPool()"),
        _stateless("flatten", R.no_state, lambda layer, c, era: "Flux.flatten"),
        _stateless("function", R.no_state, lambda layer, c, era: str(layer.args["name"])),
        _stateless("Dropout", R.dropout_fields, R.dropout_julia),
        _stateless("AlphaDropout", R.alphadropout_fields,
                   lambda layer, c, era: f"AlphaDropout({float(layer.args['p'])!r})"),
        _container("Chain", lambda layer, era: [("layers", R.Children())], R.chain_julia),
        _connected("Parallel"),
        _container(
            "SkipConnection",
            lambda layer, era: [("layers", R.Child(0)), ("connection", ())],
            lambda layer, c, era: f"SkipConnection({c[0]}, {R.connection(layer)})",
        ),
        _connected("PairwiseFusion"),
        _container(
            "Maxout",
            lambda layer, era: [("layers", R.Children())],
            lambda layer, c, era: f"Maxout({', '.join(c)})",
        ),
    ]
}  # fmt: skip

_NORM_FIELDS = ("λ", "β", "γ", "μ", "σ²", "ϵ", "momentum", "affine", "track_stats", "active", "chs")
_CONV_FIELDS = ("σ", "weight", "bias", "stride", "pad", "dilation")
_STRUCTS: dict[str, tuple[tuple[tuple[str, ...], ...], int | None]] = {
    "Dense": ((("weight", "bias", "σ"), ("W", "b", "σ")), 0),
    "Conv": (((*_CONV_FIELDS, "groups"), _CONV_FIELDS), 2),
    "ConvTranspose": (
        (
            ("σ", "weight", "bias", "stride", "pad", "outpad", "dilation", "groups"),
            (*_CONV_FIELDS, "groups"),
            _CONV_FIELDS,
        ),
        2,
    ),
    "CrossCor": ((_CONV_FIELDS,), 2),
    "DepthwiseConv": ((_CONV_FIELDS,), 2),
    "BatchNorm": ((_NORM_FIELDS, ("λ", "β", "γ", "μ", "σ²", "ϵ", "momentum", "active")), 0),
    "InstanceNorm": ((_NORM_FIELDS,), 0),
    "GroupNorm": ((("G", *_NORM_FIELDS),), 0),
    "LayerNorm": ((("λ", "diag", "ϵ", "size", "affine"),), 0),
    "Scale": ((("scale", "bias", "σ"),), 0),
    "Bilinear": ((("weight", "bias", "σ"),), 0),
}
for _kind, (_orders, _param) in _STRUCTS.items():
    KINDS[_kind] = dataclasses.replace(KINDS[_kind], struct_fields=_orders, activation_param=_param)
for _cell, _wrapped in R.CELLS.items():
    KINDS[_cell] = _bare_cell(_cell, KINDS[_wrapped])

CELLS: Mapping[str, str] = R.CELLS
"""A bare recurrent cell's kind -> the layer that scans it over a sequence (``GRUCell`` -> ``GRU``)."""


def wrapped_kind(kind: str) -> str:
    """The recurrent layer whose step a bare cell ``kind`` is (``GRUCell`` -> ``GRU``), else ``kind``:
    the kind whose equations, gates and arrays a cell shares."""
    return CELLS.get(kind, kind)


RULES: Mapping[str, LayerKind] = KINDS  # the Julia side of each record, by its older name


def kinds_in(group: str) -> frozenset[str]:
    """The kinds of one group (``"container"``, ``"arrays"``, ``"stateless"``)."""
    return frozenset(k for k, r in KINDS.items() if r.group == group)


CONTAINERS = kinds_in("container")
ARRAY_LAYERS = kinds_in("arrays")
STATELESS_LAYERS = kinds_in("stateless")
ACTIVATED = frozenset(k for k, r in KINDS.items() if r.activation == "after")
"""Kinds whose activation is a separate function after the module in Equinox and Flax."""
RECURRENT_GATES = {k: len(r.gates) for k, r in KINDS.items() if r.gates and not r.cell_of}
"""Gate blocks along dim 1 of Wi/Wh/b: RNN 1, LSTM 4 (i, f, g, o), GRU/GRUv3 3 (r, z, h̃); the
layers that scan a sequence (a bare cell's are its wrapped layer's: :func:`wrapped_kind`)."""
TORCH_MODULES = {k: r.torch for k, r in KINDS.items() if r.torch}
"""Flux layer kind -> the PyTorch module classes that hold the same parameters."""
NO_TORCH_EQUIVALENT = {k: r.torch_refusal for k, r in KINDS.items() if r.torch_refusal}
"""Flux layers PyTorch cannot compute, with the reason given in the error."""


def lux_names(kind: str, lux: str = "1") -> Mapping[str, tuple[str, str]]:
    """Flux array field -> ``(ps or st, Lux name)`` of one kind, in Lux's field order."""
    record = KINDS[kind]
    if lux == "0.5" and record.lux_05 is not None:
        return record.lux_05
    return record.lux


# --- targets: one builder and one reader per kind ----------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Entry:
    """What one target registered for one kind: its builder and its reader."""

    target: str
    kind: str
    builder: Callable[..., Any] | None = None
    reader: Callable[..., Any] | None = None


_ENTRIES: dict[tuple[str, str], Entry] = {}


def register(
    target: str,
    kinds: str | tuple[str, ...],
    *,
    builder: Callable[..., Any] | None = None,
    reader: Callable[..., Any] | None = None,
) -> None:
    """Register ``target``'s builder and/or reader for each of ``kinds`` (a target whose reader
    needs its framework and whose builder does not, PyTorch's, registers them from two modules).

    Raises:
        ValueError: an unknown target or kind, or a second builder (or reader) for the same pair.
    """
    if target not in TARGETS:
        raise ValueError(f"unknown porting target {target!r} (known: {', '.join(TARGETS)})")
    for kind in (kinds,) if isinstance(kinds, str) else kinds:
        if kind not in KINDS:
            raise ValueError(f"{target} registers {kind!r}, which the layer registry does not know")
        old = _ENTRIES.get((target, kind), Entry(target, kind))
        if (builder is not None and old.builder is not None) or (
            reader is not None and old.reader is not None
        ):
            raise ValueError(f"{target} registers a second builder/reader for {kind!r}")
        _ENTRIES[target, kind] = Entry(target, kind, builder or old.builder, reader or old.reader)


ClassReaders = list[tuple[tuple[str, ...], tuple[type, ...], Callable[..., Any]]]
"""A target's readers: ``(kinds registered with it, module classes it reads, reader)`` per row."""


def register_target(
    target: str, builders: list[tuple[tuple[str, ...], Callable[..., Any]]], readers: ClassReaders
) -> dict[type, Callable[..., Any]]:
    """Register a target's builders and readers (a row without kinds reads a class whose kind
    another row registers: an ``eqx.nn.MLP`` is a Chain too); returns the class -> reader map
    that :func:`class_reader` dispatches on."""
    for kinds, build in builders:
        register(target, kinds, builder=build)
    for kinds, _, read in readers:
        if kinds:
            register(target, kinds, reader=read)
    return {cls: read for _, classes, read in readers for cls in classes}


def class_reader(by_class: Mapping[type, Callable[..., Any]], module: Any) -> Callable[..., Any] | None:
    """The reader registered for the nearest class in ``module``'s MRO, or None; called as
    ``reader(target_reader, module, path, …)``, a module whose fields are not what its class holds
    (a weight set to None, a string, an array of another rank) raises a ConversionError with the
    path, not the AttributeError/ValueError of the line that met it."""
    for cls in type(module).__mro__:
        found = by_class.get(cls)
        if found is not None:
            return functools.partial(_guarded_read, found)
    return None


MODEL_ERRORS = (AttributeError, TypeError, ValueError, IndexError, KeyError)
"""What reading a model whose leaves are not arrays of its layers' shapes raises on the way (a
weight that is None, a list, a 1-d kernel): each is made a ConversionError (:func:`class_reader`,
``_flux.model_errors``)."""


def _guarded_read(reader: Callable[..., Any], target: Any, module: Any, path: Any, *args: Any) -> Any:
    try:
        return reader(target, module, path, *args)
    except TreexchangeError:  # (ConversionError is a TypeError too: one a nested read raised)
        raise
    except MODEL_ERRORS as err:
        raise ConversionError(
            f"{type(getattr(module, 'module', module)).__name__} does not hold what the layer needs: its "
            "arrays must be arrays of "
            f"the layer's shapes ({type(err).__name__}: {err})",
            path=path,
        ) from err


def entry(target: str, kind: str) -> Entry:
    """``target``'s entry for ``kind``; :class:`UnsupportedError` listing what it supports if none."""
    found = _ENTRIES.get((target, kind))
    if found is None:
        raise unsupported(kind, target)
    return found


def builder(target: str, kind: str) -> Callable[..., Any]:
    """``target``'s builder for ``kind``; :class:`UnsupportedError` listing what it supports if none."""
    found = entry(target, kind).builder
    if found is None:
        raise unsupported(kind, target)
    return found


def registered(target: str) -> frozenset[str]:
    """The kinds ``target`` has registered (after its module was imported)."""
    return frozenset(kind for t, kind in _ENTRIES if t == target)


def unsupported(kind: str, target: str | None = None, *, path: Any = ()) -> UnsupportedError:
    """The error for a layer kind that does not port: what is supported, and where the rules are."""
    where = f" to {target}" if target else ""
    if target is not None and kind in KINDS and target == "torch" and KINDS[kind].torch_refusal:
        reason = f" ({KINDS[kind].torch_refusal})"
    else:
        reason = ""
    supported = sorted(registered(target)) if target is not None and registered(target) else sorted(KINDS)
    return UnsupportedError(
        f"the Flux layer {kind!r} does not port{where}{reason}; supported: {', '.join(supported)} "
        f"(see {PORTING_DOCS})",
        path=tuple(path),
    )


# --- the Julia side: defaults, constructors --------------------------------------------------------


def rule_for(layer: Layer) -> LayerKind:
    """The record of ``layer.kind``; :class:`UnsupportedError` listing the supported kinds if none."""
    record = KINDS.get(layer.kind)
    if record is None:
        raise unsupported(layer.kind)
    return record


def with_defaults(layer: Layer) -> Layer:
    """``layer`` with every hyper-parameter its rule needs (Flux's defaults filled in), recursively."""
    record = rule_for(layer)
    args = {**record.defaults(layer), **dict(layer.args)}
    children = tuple(with_defaults(child) for child in layer.children)
    return dataclasses.replace(layer, args=args, children=children)


def check_julia_names(layer: Layer) -> None:
    """Every activation and Chain function must have an NNlib name to be written as Julia."""
    for sub in layer.walk():
        if sub.kind == "function" and sub.arg("name") is None:
            raise ConversionError(f"function {sub.arg('fn')!r} has no Flux (NNlib) name")
        if sub.arg("σ") == "<unknown>":
            raise ConversionError(f"activation {sub.arg('fn')!r} has no Flux (NNlib) name")


def julia_constructor(layer: Layer, era: str = "0.15") -> str:
    """The Julia expression that constructs ``layer`` (``Chain(Conv((5, 5), 1 => 6, relu), …)``)."""
    return _julia(with_defaults(layer), era)


def _julia(layer: Layer, era: str) -> str:
    children = [_julia(child, era) for child in layer.children]
    return rule_for(layer).julia(layer, children, era)


# --- Flux.params order (parameter lists saved by old Flux code) --------------------------------------


Slot = tuple[str, "tuple[int, ...] | None", bool]
"""One array of ``Flux.params``: ``(key, shape, optional)``; shape None is a recurrent initial state."""


def param_slots(layer: Layer, era: str = "0.14") -> list[Slot]:
    """The arrays ``Flux.params`` lists for one layer of Flux ``era``, in order: ``(key, shape,
    optional)``; shape ``None`` is a recurrent initial state (``(H,)`` or ``(H, 1)``: trainable in
    Flux ≤ 0.14 only, hence optional). The shapes differ between the eras only for ``GRUv3``'s
    ``Wh`` (Flux ≥ 0.15 allocates 3H rows, uses 2H).

    Example:
        >>> param_slots(with_defaults(Layer("Conv", {"kernel": (3, 3), "in": 1, "out": 16})))
        [('weight', (3, 3, 1, 16), False), ('bias', (16,), False)]
    """
    a, kind = layer.args, layer.kind
    bias = bool(a.get("bias", True))
    if kind == "Dense":
        return [("weight", (a["out"], a["in"]), False), *([("bias", (a["out"],), False)] if bias else [])]
    if kind in ("Conv", "CrossCor", "DepthwiseConv", "ConvTranspose"):
        weight = ("weight", _conv_shapes(layer)[0].shape, False)
        return [weight, *([("bias", (a["out"],), False)] if bias else [])]
    if kind in ("BatchNorm", "InstanceNorm", "GroupNorm"):
        c = (a["channels"],)
        return [("β", c, False), ("γ", c, False)] if a.get("affine", True) else []
    if kind == "LayerNorm":
        size = tuple(a["size"])
        return [("scale", size, False), ("bias", size, False)] if a.get("affine", True) else []
    if kind == "Scale":
        size = tuple(a["size"])
        return [("scale", size, False), *([("bias", size, False)] if bias else [])]
    if kind == "Bilinear":
        weight = ("weight", (a["out"], *a["in"]), False)
        return [weight, *([("bias", (a["out"],), False)] if bias else [])]
    if kind == "Embedding":
        return [("weight", (a["out"], a["in"]), False)]
    if kind in RECURRENT_GATES:
        g, h = RECURRENT_GATES[kind], a["out"]
        slots: list[Slot] = [
            ("Wi", (g * h, a["in"]), False),
            ("Wh", ((2 if kind == "GRUv3" and era == "0.14" else g) * h, h), False),
        ]
        if bias:  # (Flux ≥ 0.15: bias=false stores false, no array)
            slots.append(("b", (g * h,), False))
        if kind == "GRUv3":
            slots.append(("Wh_h̃", (h, h), False))
        states = ["h", "c"] if kind == "LSTM" else ["h"]
        return slots + [(f"state0.{s}", None, True) for s in states]
    if kind == "MultiHeadAttention":
        slots = []  # the q, k, v, out projections (Dense each), in field order
        for proj, rows, cols in (
            ("q_proj", a["qk_dim"], a["q_in"]),
            ("k_proj", a["qk_dim"], a["k_in"]),
            ("v_proj", a["v_dim"], a["v_in"]),
            ("out_proj", a["out"], a["v_dim"]),
        ):
            slots.append((f"{proj}.weight", (rows, cols), False))
            if a.get("bias", False):
                slots.append((f"{proj}.bias", (rows,), False))
        return slots
    return []

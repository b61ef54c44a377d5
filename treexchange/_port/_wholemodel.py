"""Whole-model Flux files (the structs themselves, ``jldsave(path; model)``) -> Layer tree + Flux.state.

A whole-model file holds Flux's structs as ``tx.JuliaStruct``: each struct's type names the layer,
and functions exist only as type parameters (``Flux.Dense{NNlib.#relu, …}``) or as singletons
(``Singleton('NNlib.#softmax')`` in a Chain). JLD2 ≤ 0.4 leaves zero-size fields out of the stored
struct, so ``σ``/``λ`` are absent (docs/porting.md §Flux eras); :func:`from_whole_model` re-inserts them as
``()`` in Flux's field order, so the state it returns is what ``Flux.state(model)`` gives for that
model in the Flux version that wrote it (Functors 0.4: pools, ``flatten`` and functions are ``()``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from treexchange._errors import ConversionError, PathSegment, TreePath, TreexchangeError, format_path
from treexchange._juliatype import JuliaType
from treexchange._limits import DEFAULT_LIMITS
from treexchange._port._activations import refuse_whole_array_sigma
from treexchange._port._arch import BROADCAST_FUNCTION, CONNECTIONS, canonical_activation, connection_name
from treexchange._port._eras import is_gpu_array, normalise
from treexchange._port._registry import CELLS, KINDS, PORTING_DOCS, RECURRENT_GATES
from treexchange._port._spec import Layer
from treexchange._port._state import gruv3_wh
from treexchange._recursion import stack_for_depth
from treexchange._values import JuliaStruct, NamedTuple, Singleton, each_value, value_children

_GHOSTS = frozenset({"σ", "λ"})  # zero-size function fields JLD2 ≤ 0.4 does not store

# Flux's field order per struct (alternatives for older Flux versions), for re-inserting ghosts, and
# which type parameter holds the activation: the registry's facts per kind, plus the structs that
# are parts of a layer (LayerNorm's Diagonal of Flux ≤ 0.12, a Recur's RNNCell).
_FIELD_ORDERS: dict[str, tuple[tuple[str, ...], ...]] = {
    **{kind: record.struct_fields for kind, record in KINDS.items() if record.struct_fields},
    "Diagonal": (("α", "β"),),
    "RNNCell": (("σ", "Wi", "Wh", "b", "state0"), ("σ", "Wi", "Wh", "bias")),
}
_ACTIVATION_PARAM: dict[str, int] = {
    **{
        kind: record.activation_param for kind, record in KINDS.items() if record.activation_param is not None
    },
    "RNNCell": 0,
}


def _basename(type_: JuliaType) -> str:
    return type_.basename


def function_name(value: Any) -> str:
    """The Julia name of a function given as a singleton, its type, or its type's name.

    ``NNlib.#relu`` -> ``relu``; an anonymous function (``Main.#109#110``) keeps an inner ``#``.

    Example:
        >>> function_name(JuliaType("NNlib.#relu")), function_name(Singleton("Main.#109#110"))
        ('relu', '109#110')
    """
    if isinstance(value, Singleton):
        value = value.type
    name = _raw_name(value)
    # Split the module path off; operators such as `Base.#+` keep their symbol.
    head, _, tail = name.rpartition(".#")
    base = tail if head else name.rsplit(".", 1)[-1]
    base = base[1:] if base.startswith("#") else base
    return base


def _raw_name(value: Any) -> str:
    if isinstance(value, Singleton):
        value = value.type
    return value.name if isinstance(value, JuliaType) else str(value)


def _broadcast_function(value: Any) -> Any:
    """The function a ``Base.Broadcast.BroadcastFunction`` (Julia's ``.+``, as a value, its type or
    a struct of it) broadcasts, else ``None``."""
    t = value.type if isinstance(value, (Singleton, JuliaStruct)) else value
    if isinstance(t, JuliaType) and t.name.endswith(BROADCAST_FUNCTION) and len(t.params) == 1:
        return t.params[0]
    return None


# Modules of optimisers saved beside a model (``BSON.@save "m.bson" model opt``): Flux <= 0.14's own
# (``Flux.Optimise.ADAM``, ``Flux.Optimise.Optimiser``) and Optimisers.jl's (``Optimisers.Leaf``)
_OPTIMISER_MODULES = ("Flux.Optimise.", "Optimisers.")


def is_optimiser(type_: JuliaType) -> bool:
    """Whether a struct type is an optimiser's (or its state's) rather than a model's.

    Example:
        >>> is_optimiser(JuliaType("Flux.Optimise.ADAM")), is_optimiser(JuliaType("Flux.Dense"))
        (True, False)
    """
    return type_.name.startswith(_OPTIMISER_MODULES)


def optimiser_error(type_: JuliaType, path: TreePath) -> ConversionError:
    """The refusal of an optimiser (``opt`` of ``BSON.@save "m.bson" model opt``) named as a model."""
    return ConversionError(
        f"{type_.name} is an optimiser (its settings and per-parameter state), not a model: it holds "
        "no layers to port",
        path=path,
    )


def _is_anonymous(name: str) -> bool:
    return "#" in name or name[:1].isdigit()


def _is_flux_struct(value: Any) -> bool:
    return isinstance(value, JuliaStruct) and "Flux" in value.type.name.split(".")[:-1]


def _is_fieldless_layer(type_: JuliaType) -> bool:
    """Whether a singleton's type is a Flux layer struct (not a function's ``#name`` type)."""
    return "#" not in type_.name and "Flux" in type_.name.split(".")[:-1] and type_.basename in _HANDLERS


class _Converter:
    def __init__(self, era: str) -> None:
        self.era = era

    # -- errors -------------------------------------------------------------------------------

    @staticmethod
    def error(message: str, path: TreePath) -> ConversionError:
        return ConversionError(message, path=path)

    # -- values -------------------------------------------------------------------------------

    def activation_of(self, s: JuliaStruct, kind: str, path: TreePath) -> str:
        index = _ACTIVATION_PARAM[kind]
        params = s.type.params
        if len(params) <= index:
            raise self.error(f"{s.type} records no activation type parameter", path)
        name = self.function(params[index], path, what="activation")
        refusal = refuse_whole_array_sigma(name, kind)
        if refusal is not None:
            raise self.error(refusal, path)
        return name

    def function(self, value: Any, path: TreePath, *, what: str = "function") -> str:
        name = function_name(value)
        if _is_anonymous(name):
            raise self.error(f"anonymous function {_raw_name(value)} as {what} (not portable)", path)
        canonical = canonical_activation(name)
        if canonical is None:
            raw = _raw_name(value)
            module = raw.rpartition(".#")[0] if ".#" in raw else raw.rpartition(".")[0]
            if module.split(".", 1)[0] == "Main":
                raise self.error(
                    f"{what} {name!r} is one of your own ({_raw_name(value)}): the file holds its name, "
                    "not its code, and treexchange knows only Flux's and NNlib's functions",
                    path,
                )
            raise self.error(f"unknown {what} {name!r}", path)
        return canonical

    def connection(self, value: Any, path: TreePath) -> str:
        broadcast = _broadcast_function(value)
        name = "." + function_name(broadcast) if broadcast is not None else function_name(value)
        canonical = connection_name(name)
        if canonical is None:
            if _is_anonymous(name):
                raise self.error(f"anonymous function {_raw_name(value)} as connection", path)
            raise self.error(
                f"unknown connection function {name!r} (the port applies {', '.join(CONNECTIONS)})", path
            )
        return canonical

    def state_value(self, value: Any) -> Any:
        """A plain field value as ``Flux.state`` keeps it (functions and other objects -> ``()``)."""
        if isinstance(value, (np.ndarray, int, float, bool, np.generic, str)) or value is None:
            return value
        if isinstance(value, tuple):
            return tuple(self.state_value(v) for v in value)
        return ()

    def struct_state(
        self, s: JuliaStruct, kind: str, overrides: Mapping[str, Any] | None = None
    ) -> NamedTuple:
        """The struct's fields in Flux's order with the ghost fields back as ``()``."""
        names = list(s.fields)
        order: Sequence[str] = names
        for candidate in _FIELD_ORDERS.get(kind, ()):
            if [n for n in candidate if n not in _GHOSTS] == [n for n in names if n not in _GHOSTS]:
                order = candidate
                break
        overrides = overrides or {}
        items = []
        for name in order:
            if name in overrides:
                items.append((name, overrides[name]))
            elif name in s.fields:
                items.append((name, self.state_value(s.fields[name])))
            else:
                items.append((name, ()))
        return NamedTuple(items)

    # -- layers -------------------------------------------------------------------------------

    def convert(self, value: Any, path: TreePath) -> tuple[Layer, Any]:
        if isinstance(value, Singleton):
            name = function_name(value)
            if name == "flatten":
                return Layer("flatten"), ()
            if _is_fieldless_layer(value.type):
                # A layer struct without fields (GlobalMeanPool()) is stored as its type alone,
                # like a function: BSON.jl and JLD2 keep no data for a zero-size struct.
                return self.convert(JuliaStruct(value.type), path)
            return Layer("function", {"name": self.function(value, path)}), ()
        if not isinstance(value, JuliaStruct):
            raise self.error(f"expected a Flux layer, found {type(value).__name__}", path)
        kind = _basename(value.type)
        handler = _HANDLERS.get(kind)
        module = value.type.name.split(".")[:-1]
        if handler is not None and module and "Flux" not in module:
            # (a struct of one's own named like a Flux layer, Main.Embedding: its fields and its
            # forward pass are its author's, read as Flux's they would fail or mislead)
            raise self.error(
                f"{value.type.name} is not Flux's {kind} but a struct of {'.'.join(module)} with the same "
                "name: its forward pass is its author's code, which treexchange never runs. If it "
                f"computes what Flux's {kind} does, pass architecture= with the model as Flux would "
                "print it",
                path,
            )
        if handler is None:
            held = [] if _is_flux_struct(value) else _held_layers(value)
            if held:
                raise self.error(_own_struct_message(value, held, path), path)
            if is_optimiser(value.type):
                raise optimiser_error(value.type, path)
            known = ", ".join(sorted(_HANDLERS))
            shown = str(value.type)
            shown = shown if len(shown) <= 100 else shown[:99] + "…"  # (type parameters run long)
            if value.fields and not _is_flux_struct(value) and not _holds_arrays(value):
                # (settings saved beside a model: a list of every Flux layer says nothing useful;
                # a struct without fields may be a layer of one's own with nothing to learn)
                raise self.error(
                    f"unknown layer type {shown}: a struct of {'.'.join(module) or 'Main'} holding no "
                    f"array (settings, not weights), so there is nothing to port here; the Flux "
                    f"layers that port are in {PORTING_DOCS}",
                    path,
                )
            raise self.error(
                f"unknown layer type {shown}; the Flux layers that port: {known} (see {PORTING_DOCS})"
                f"{_flat_vector_hint(value, path)}",
                path,
            )
        try:
            return handler(self, value, path)
        except TreexchangeError:  # ConversionError is a TypeError too: a nested layer's, keep it
            raise
        except (KeyError, IndexError, TypeError, ValueError, AttributeError) as err:  # a malformed struct
            raise self.error(
                f"{value.type} lacks what the layer needs ({type(err).__name__}: {err})", path
            ) from err

    def children(self, layers: Any, path: TreePath) -> tuple[tuple[Layer, ...], tuple[str, ...] | None, Any]:
        """Convert a ``layers`` field: a Tuple, a NamedTuple (named Chain) or a Vector."""
        if isinstance(layers, Mapping):
            names = tuple(layers)
            pairs = [self.convert(v, (*path, k)) for k, v in layers.items()]
            return (
                tuple(p[0] for p in pairs),
                names,
                NamedTuple(zip(names, (p[1] for p in pairs), strict=True)),
            )
        if isinstance(layers, JuliaStruct) or not isinstance(layers, (tuple, list)):
            layer, state = self.convert(layers, path)
            return (layer,), None, state
        pairs = [self.convert(v, (*path, i + 1)) for i, v in enumerate(layers)]
        states = [p[1] for p in pairs]
        return tuple(p[0] for p in pairs), None, (states if isinstance(layers, list) else tuple(states))


def _array_shape(s: JuliaStruct, name: str, path: TreePath) -> tuple[int, ...]:
    value = s.fields.get(name)
    if not isinstance(value, np.ndarray):
        raise ConversionError(f"{s.type} has no array field {name!r}", path=path)
    return tuple(int(v) for v in value.shape)


def _has_bias(s: JuliaStruct, name: str = "bias") -> bool:
    value = s.fields.get(name)
    return isinstance(value, np.ndarray)


def _ints(value: Any) -> tuple[int, ...]:
    if isinstance(value, (int, np.integer)):
        return (int(value),)
    return tuple(int(v) for v in value)


def _float(value: Any) -> float:
    """A Julia number as a Python float; Float32 by its shortest repr (1f-5 -> 1e-05, not 9.99…e-06)."""
    if isinstance(value, np.float32):
        return float(str(value))
    return float(value)


def _chain(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    children, names, state = c.children(s.fields["layers"], (*path, "layers"))
    return Layer("Chain", children=children, names=names), NamedTuple(layers=state)


def _dense(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    weight = "weight" if "weight" in s.fields else "W"
    out, cin = _array_shape(s, weight, path)
    bias = _has_bias(s, "bias" if weight == "weight" else "b")
    layer = Layer("Dense", {"in": cin, "out": out, "σ": c.activation_of(s, "Dense", path), "bias": bias})
    return layer, c.struct_state(s, "Dense")


def _conv(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    kind = _basename(s.type)
    shape = _array_shape(s, "weight", path)
    n = len(shape) - 2
    if n < 1:
        raise c.error(f"{kind}'s weight has {len(shape)} dimensions; a convolution's has at least 3", path)
    groups = int(s.fields.get("groups", 1))
    if groups < 1:
        raise c.error(f"{kind}'s groups is {groups}; Flux's is at least 1", path)
    args: dict[str, Any] = {"kernel": shape[:n]}
    if kind == "ConvTranspose":
        args["in"], args["out"] = shape[n + 1], shape[n] * groups
    elif kind == "DepthwiseConv":  # Flux ≤ 0.12 struct: weight (k…, multiplier, Cin)
        args["in"], args["out"] = shape[n + 1], shape[n] * shape[n + 1]
    else:
        args["in"], args["out"] = shape[n] * groups, shape[n + 1]
    args["σ"] = c.activation_of(s, kind, path)
    args["stride"] = _ints(s.fields["stride"])
    pad = _ints(s.fields["pad"])
    args["pad"] = pad if len(pad) == 2 * n else tuple(p for p in pad for _ in range(2))
    args["dilation"] = _ints(s.fields["dilation"])
    if kind == "DepthwiseConv":
        args["groups"] = args["in"]
    else:
        args["groups"] = groups  # CrossCor: 1 (no such field in Flux)
    if kind == "ConvTranspose":
        args["outpad"] = _ints(s.fields["outpad"]) if "outpad" in s.fields else (0,) * n
    _check_window(c, kind, n, args, path)
    g = args["groups"]
    if g < 1 or args["in"] % g or args["out"] % g:  # (Flux's constructors check both)
        raise c.error(f"{kind}'s groups {g} does not divide its {args['in']} => {args['out']} channels", path)
    args["bias"] = _has_bias(s)
    return Layer(kind, args), c.struct_state(s, kind)


def _check_window(c: _Converter, kind: str, n: int, args: dict[str, Any], path: TreePath) -> None:
    """A convolution's or pool's window fields agree with its ``n`` spatial dimensions (one entry
    each, two of ``pad``) and are not negative, as Flux's constructors make them: a struct whose
    fields disagree (a damaged file) is an error here, not in the Python layer built from it."""
    if n < 1:
        raise c.error(f"{kind} has a window of {n} dimensions", path)
    for name, count in (("stride", n), ("dilation", n), ("pad", 2 * n), ("outpad", n), ("k", n)):
        value = args.get(name)
        if value is None:
            continue
        if len(value) != count or min(value) < 0 or (name not in ("pad", "outpad") and 0 in value):
            raise c.error(f"{kind}'s {name} {value} does not fit its {n} spatial dimensions", path)


def _norm(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    kind = _basename(s.type)
    f = s.fields
    affine = bool(f["affine"]) if "affine" in f else isinstance(f.get("γ"), np.ndarray)
    track = bool(f["track_stats"]) if "track_stats" in f else isinstance(f.get("μ"), np.ndarray)
    arrays = [v for k in ("β", "γ", "μ", "σ²") if isinstance(v := f.get(k), np.ndarray)]
    if "chs" in f:
        chs = int(f["chs"])
        # (a damaged count must not size the model: β, γ have chs entries, and so have μ, σ²
        # but for GroupNorm, whose running statistics are per group, G entries)
        per_channel = [v for k in ("β", "γ") if isinstance(v := f.get(k), np.ndarray)]
        stats = [v for k in ("μ", "σ²") if isinstance(v := f.get(k), np.ndarray)]
        stat_shape = (int(f["G"]),) if kind == "GroupNorm" and "G" in f else (chs,)
        if any(a.shape != (chs,) for a in per_channel) or any(a.shape != stat_shape for a in stats):
            raise c.error(f"{kind}'s chs is {chs}, its arrays have {[a.shape for a in arrays]}", path)
        if not arrays and not 0 < chs <= DEFAULT_LIMITS.max_elements:  # (nothing to check it against)
            raise c.error(f"{kind}'s chs is {chs}, no array holds it, and it is not 1 to max_elements", path)
    else:
        if not arrays:
            raise c.error(f"{s.type} stores no channel count", path)
        chs = int(arrays[0].shape[0])
    args: dict[str, Any] = {"channels": chs}
    if kind == "GroupNorm":
        args["groups"] = int(f["G"])
    args["σ"] = c.activation_of(s, kind, path)
    args.update(
        {"affine": affine, "track_stats": track, "ϵ": _float(f["ϵ"]), "momentum": _float(f["momentum"])}
    )
    return Layer(kind, args), c.struct_state(s, kind)


def _layernorm(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    f = s.fields
    diag = f.get("diag")
    sigma = c.activation_of(s, "LayerNorm", path)
    diag_state: Any = ()
    if isinstance(diag, JuliaStruct):
        diag_kind = _basename(diag.type)
        if diag_kind == "Scale":
            sigma = c.activation_of(diag, "Scale", (*path, "diag"))
        diag_state = c.struct_state(diag, diag_kind)
    size = _ints(f["size"])
    affine = bool(f["affine"]) if "affine" in f else isinstance(diag, JuliaStruct)
    args = {"size": size, "σ": sigma, "affine": affine, "ϵ": _float(f["ϵ"])}
    return Layer("LayerNorm", args), c.struct_state(s, "LayerNorm", {"diag": diag_state})


def _scale(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    size = _array_shape(s, "scale", path)
    layer = Layer("Scale", {"size": size, "σ": c.activation_of(s, "Scale", path), "bias": _has_bias(s)})
    return layer, c.struct_state(s, "Scale")


def _bilinear(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    out, in1, in2 = _array_shape(s, "weight", path)
    args = {
        "in": (in1, in2),
        "out": out,
        "σ": c.activation_of(s, "Bilinear", path),
        "bias": _has_bias(s),
    }
    return Layer("Bilinear", args), c.struct_state(s, "Bilinear")


def _embedding(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    dim, vocab = _array_shape(s, "weight", path)
    return Layer("Embedding", {"in": vocab, "out": dim}), c.struct_state(s, "Embedding")


def _pool(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    kind = _basename(s.type)
    f = s.fields
    if kind in ("MaxPool", "MeanPool"):
        k = _ints(f["k"])
        pad = _ints(f["pad"])
        pad = pad if len(pad) == 2 * len(k) else tuple(p for p in pad for _ in range(2))
        args: dict[str, Any] = {"k": k, "pad": pad, "stride": _ints(f["stride"])}
        _check_window(c, kind, len(k), args, path)
    elif kind in ("AdaptiveMaxPool", "AdaptiveMeanPool"):
        args = {"out": _ints(f["out"])}
    else:
        args = {}
    state: Any = () if c.era == "0.14" else c.struct_state(s, kind)
    return Layer(kind, args), state


def _dropout(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    kind = _basename(s.type)
    args: dict[str, Any] = {"p": _float(s.fields["p"])}
    if kind == "Dropout":
        dims = s.fields.get("dims")
        if isinstance(dims, (int, np.integer)) or (isinstance(dims, tuple) and dims):
            args["dims"] = _ints(dims)  # absent = Flux's `:` (all dims)
    return Layer(kind, args), c.struct_state(s, kind)


def _cell_layer(c: _Converter, cell: JuliaStruct, path: TreePath, recur: bool) -> tuple[Layer, Any]:
    cell_kind = _basename(cell.type)
    kind = CELLS.get(cell_kind)
    if kind is None:
        raise c.error(f"unknown recurrent cell {cell.type}", path)
    wi = _array_shape(cell, "Wi", path)
    wh = _array_shape(cell, "Wh", path)
    args: dict[str, Any] = {"in": wi[1], "out": wh[1]}
    if kind == "RNN":
        args["σ"] = c.activation_of(cell, "RNNCell", path)
    if not _has_bias(cell, "bias" if "bias" in cell.fields else "b"):
        args["bias"] = False  # Flux ≥ 0.15's bias=false (and Flux ≤ 0.12's Zeros, see _eras)
    if recur:
        args["recur"] = True
    state = c.struct_state(cell, cell_kind)
    if kind == "GRUv3" and isinstance(state.get("Wh"), np.ndarray):  # 3H rows from Flux 0.15, 2H before
        state = state.replace(Wh=gruv3_wh(state["Wh"], int(wh[1]), padded=c.era != "0.14"))
    if "state0" in state:  # a tuple (h0, c0) for LSTM stays a tuple
        state = state.replace(state0=c.state_value(cell.fields["state0"]))
    return Layer(kind, args), state


def _recur(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    cell = s.fields["cell"]
    if not isinstance(cell, JuliaStruct):
        raise c.error("Recur without a cell", path)
    layer, cell_state = _cell_layer(c, cell, (*path, "cell"), recur=True)
    return layer, NamedTuple(cell=cell_state, state=c.state_value(s.fields.get("state")))


def _bare_cell(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    """A Flux ≥ 0.15 cell alone (``GRUCell``: one step, ``cell(x, h)``, the state carried by the
    code that calls it; rash0402/crlEPH-dlc's predictor): the cell's layer, its state the wrapped
    layer's ``cell``. A Flux ≤ 0.14 cell (``state0``, called ``cell(h, x)``) outside its ``Recur``
    is refused: no file holds one, and in a Chain it cannot run."""
    kind = _basename(s.type)
    if "state0" in s.fields or c.era == "0.14":
        raise c.error(
            f"{s.type.name} outside Recur is a Flux ≤ 0.14 cell (cell(h, x) -> (h', y), with a state0), "
            f"which only ports as the layer that runs it, Recur({kind}(in => out)), or as Flux ≥ 0.15's "
            "bare cell (pass flux='0.15' if the file is Flux ≥ 0.15's)",
            path,
        )
    layer, state = _cell_layer(c, s, path, recur=False)
    return Layer(kind, layer.args), state


def _rnn15(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    cell = s.fields["cell"]
    if not isinstance(cell, JuliaStruct):
        raise c.error(f"{s.type} without a cell", path)
    layer, cell_state = _cell_layer(c, cell, (*path, "cell"), recur=False)
    params = s.type.params
    if params and isinstance(params[0], (bool, np.bool_)) and params[0]:  # (`LSTM{S, M}`: S = return_state)
        layer = Layer(layer.kind, {**layer.args, "return_state": True})
    return layer, NamedTuple(cell=cell_state)


def _mha(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    f = s.fields
    projections = {}
    for name in ("q_proj", "k_proj", "v_proj", "out_proj"):
        proj = f[name]
        if not isinstance(proj, JuliaStruct):
            raise c.error(f"MultiHeadAttention.{name} is not a Dense", (*path, name))
        projections[name] = (proj, _dense(c, proj, (*path, name)))
    q, k, v, o = (projections[n][0] for n in ("q_proj", "k_proj", "v_proj", "out_proj"))
    drop = f.get("attn_drop")
    args = {
        "q_in": _array_shape(q, "weight", path)[1],
        "k_in": _array_shape(k, "weight", path)[1],
        "v_in": _array_shape(v, "weight", path)[1],
        "qk_dim": _array_shape(q, "weight", path)[0],
        "v_dim": _array_shape(v, "weight", path)[0],
        "out": _array_shape(o, "weight", path)[0],
        "nheads": int(f["nheads"]),
        "bias": _has_bias(q),
        "dropout_prob": float(drop.fields["p"]) if isinstance(drop, JuliaStruct) else 0.0,
    }
    drop_state = _dropout(c, drop, (*path, "attn_drop"))[1] if isinstance(drop, JuliaStruct) else ()
    state = NamedTuple(
        [
            ("nheads", int(f["nheads"])),
            *((n, projections[n][1][1]) for n in ("q_proj", "k_proj", "v_proj")),
            ("attn_drop", drop_state),
            ("out_proj", projections["out_proj"][1][1]),
        ]
    )
    return Layer("MultiHeadAttention", args), state


def _connection_of(c: _Converter, s: JuliaStruct, param: int, path: TreePath) -> str:
    value = s.fields.get("connection")
    if value is None or not isinstance(value, Singleton):
        params = s.type.params
        if len(params) <= param:
            raise c.error(f"{s.type} records no connection", path)
        value = params[param]
    return c.connection(value, (*path, "connection"))


def _parallel(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    kind = _basename(s.type)
    connection = _connection_of(c, s, 0, path)
    children, names, state = c.children(s.fields["layers"], (*path, "layers"))
    return Layer(kind, {"connection": connection}, children, names), NamedTuple(connection=(), layers=state)


def _skip(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    connection = _connection_of(c, s, 1, path)
    layer, state = c.convert(s.fields["layers"], (*path, "layers"))
    return Layer("SkipConnection", {"connection": connection}, (layer,)), NamedTuple(
        layers=state, connection=()
    )


def _maxout(c: _Converter, s: JuliaStruct, path: TreePath) -> tuple[Layer, Any]:
    children, _, state = c.children(s.fields["layers"], (*path, "layers"))
    return Layer("Maxout", children=children), NamedTuple(layers=state)


_HANDLERS: dict[str, Callable[[_Converter, JuliaStruct, TreePath], tuple[Layer, Any]]] = {
    "Chain": _chain,
    "Dense": _dense,
    "Conv": _conv,
    "ConvTranspose": _conv,
    "CrossCor": _conv,
    "DepthwiseConv": _conv,
    "BatchNorm": _norm,
    "InstanceNorm": _norm,
    "GroupNorm": _norm,
    "LayerNorm": _layernorm,
    "Scale": _scale,
    "Bilinear": _bilinear,
    "Embedding": _embedding,
    "MaxPool": _pool,
    "MeanPool": _pool,
    "AdaptiveMaxPool": _pool,
    "AdaptiveMeanPool": _pool,
    "GlobalMaxPool": _pool,
    "GlobalMeanPool": _pool,
    "Dropout": _dropout,
    "AlphaDropout": _dropout,
    "Recur": _recur,
    "Recurrence": _rnn15,  # (Flux ≥ 0.16's Recurrence{S, M}(cell): LSTM(…) is one over an LSTMCell)
    **{kind: _rnn15 for kind in RECURRENT_GATES},
    **{kind: _bare_cell for kind in CELLS},
    "MultiHeadAttention": _mha,
    "Parallel": _parallel,
    "PairwiseFusion": _parallel,
    "SkipConnection": _skip,
    "Maxout": _maxout,
}


def _unwrap_tracked(value: Any) -> Any:
    """Tracker-era files (Flux ≤ 0.9) wrap every parameter in a ``Tracker.TrackedArray``: keep ``data``."""
    if isinstance(value, JuliaStruct):
        if value.type.basename == "TrackedArray" and "data" in value.fields:
            return value.fields["data"]
        fields = {k: _unwrap_tracked(v) for k, v in value.fields.items()}
        return JuliaStruct(value.type, fields, layout=value.layout)
    if isinstance(value, tuple):
        return tuple(_unwrap_tracked(v) for v in value)
    if isinstance(value, NamedTuple):
        return NamedTuple((k, _unwrap_tracked(v)) for k, v in value.items())
    return value


def _flat_vector_hint(value: Any, path: TreePath) -> str:
    """For a struct that is no layer: where it holds the longest vector of floats (a model of one's
    own keeping ``Flux.destructure``'s ``p``, LVModels' ``NDE`` its ``θ``), which ports with the
    architecture text; else nothing."""
    best: tuple[int, TreePath] | None = None
    for at, v in each_value(value, tuple(path), limit=10_000):  # (bounded: a hint, not a search)
        if isinstance(v, np.ndarray) and v.ndim == 1 and v.dtype.kind == "f" and v.size > 1:
            if best is None or v.size > best[0]:
                best = (int(v.size), at)
    if best is None:
        return ""
    return (
        f". It holds a vector of {best[0]} numbers at {format_path(best[1])}: if that is the model's flat "
        f"parameter vector (Flux.destructure's p), tx.from_flux(path, {best[1]!r}, architecture=…) ports it"
    )


def structs_era(model: Any) -> str | None:
    """The Flux era a whole model's structs show, or None when nothing in them tells: ``"0.15"``
    when a recurrent layer is Flux ≥ 0.15's (``RNN``/``LSTM``/``GRU``/``GRUv3`` holding its cell, or
    a cell without ``state0``), ``"0.14"`` when it is a ``Recur`` (Flux ≤ 0.14's wrapper). The
    other layers' structs are the same in both eras, and their states differ only where the era
    says how (pools), so a recurrent layer is what decides: a Flux 0.15 RNN read with the 0.14
    conventions would have ``bias`` where Flux 0.14's cell has ``b`` and ``state0``. Iterative,
    each object visited once (a shared or cyclic one too).

    Example:
        >>> cell = JuliaStruct("Flux.LSTMCell{A,B,C}", {"Wi": None, "Wh": None, "bias": None})
        >>> lstm = JuliaStruct("Flux.LSTM{C}", {"cell": cell})
        >>> structs_era(JuliaStruct("Flux.Chain{T}", {"layers": (lstm,)}))
        '0.15'
        >>> structs_era(JuliaStruct("Flux.Chain{T}", {"layers": ()})) is None
        True
    """
    for _, v in each_value(model):
        if isinstance(v, JuliaStruct) and v.type.name.split(".", 1)[0] == "Flux":
            base = _basename(v.type)
            if base == "Recur":
                return "0.14"
            if (base in RECURRENT_GATES or base == "Recurrence") and "cell" in v.fields:
                return "0.15"
            if base in CELLS and "Wi" in v.fields and not {"state0", "h", "c"} & v.fields.keys():
                return "0.15"  # (a bare cell: Flux ≤ 0.14's hold their state0, Flux ≤ 0.11's h/c)
    return None


# How many of the layers inside a struct of one's own its refusal names (then "and N more").
_HELD_SHOWN = 6


def outermost(
    value: Any, path: TreePath, limit: int, wanted: Callable[[Any], bool]
) -> list[tuple[TreePath, Any]]:
    """``(path, value)`` of the outermost values inside ``value`` that are ``wanted``, in order:
    each object once (a shared one at its first path, a cycle not followed again), at most
    ``limit`` objects visited and 64 levels down. Iterative: any depth.

    Example:
        >>> dense = JuliaStruct("Flux.Dense", {"weight": np.ones((2, 2))})
        >>> outermost([(1, dense), dense], ("m",), 100, lambda v: isinstance(v, JuliaStruct))
        [(('m', 1, 2), JuliaStruct('Flux.Dense', ...))]
    """
    found: list[tuple[TreePath, Any]] = []
    todo: list[tuple[Any, TreePath]] = [(value, path)]
    seen: set[int] = set()
    while todo and len(seen) < limit:
        v, at = todo.pop()
        if id(v) in seen or len(at) > 64:
            continue
        seen.add(id(v))
        if wanted(v):
            found.append((at, v))
            continue
        children = value_children(v)
        if children is not None:
            todo.extend((x, (*at, k)) for k, x in reversed(children))
    return found


def _held_layers(value: JuliaStruct) -> list[TreePath]:
    """The paths (below ``value``, a struct not Flux's) of the outermost Flux layers inside its
    fields, at any depth: a field holding a layer, a Vector of structs of one's own holding layers
    (PVNet's Vector of EdgeModels), a Dict or Tuple of them. Optimisers are no layers."""
    return [at for at, _ in outermost(value, (), 100_000, _is_held_layer)]


def _holds_arrays(value: JuliaStruct) -> bool:
    """Whether a numeric array (or a device array saved by mistake) lies anywhere inside
    ``value`` (within :func:`outermost`'s bounds)."""
    return bool(outermost(value, (), 100_000, _is_array_like))


def _is_array_like(value: Any) -> bool:
    return isinstance(value, np.ndarray) or is_gpu_array(value)


def _is_held_layer(value: Any) -> bool:
    return _is_flux_struct(value) and not is_optimiser(value.type)


def _own_struct_message(value: JuliaStruct, held: Sequence[TreePath], path: TreePath) -> str:
    """The refusal of a struct of one's own holding Flux layers: where they are (the first
    :data:`_HELD_SHOWN`, shallowest first, and how many more), the paths that port one alone,
    and, when they are all fields of it, that a Chain of them in field order ports the struct if
    that is what it computes."""
    direct = all(len(at) == 1 for at in held)
    held = sorted(held, key=len)  # (the fields' own layers first: a whole Chain, not one of its parts)
    shown = _shown_paths(held)
    where = f"fields {shown}" if direct else f"{len(held)} layer{'s' * (len(held) > 1)}, at {shown}"
    # (each path ports that layer alone: said first, since a struct that keeps one model and its
    # settings, TrainedModel(chain, zscore, …), is the usual case)
    paths = " or ".join(repr((*path, *at)) for at in held[:3])
    what = "a field's layers" if direct else "one layer"
    # (a package's container, GraphNeuralNetworks.GNNChain, is not the user's: named by its module)
    module = value.type.name.split(".", 1)[0]
    whose = "of your own" if module == "Main" else f"of {module}"
    foreign = _foreign_layers(value)
    besides = ""
    if foreign:
        kinds = ", ".join(sorted({v.type.name for _, v in foreign}))
        besides = (
            f"; beside them it holds layers that are not Flux's, which do not port ({kinds} at "
            f"{_shown_paths([at for at, _ in foreign])})"
        )
    text = (
        f"{value.type.name} is a struct {whose} holding Flux layers ({where}){besides}: its forward pass "
        "is Julia code, which treexchange never runs. "
        f"To port {what} alone, name its path: {paths}"
    )
    if direct:  # (layers inside Vectors or structs: no Chain of the fields says what it computes)
        text += (
            ". If the struct applies them in field order, pass architecture= (--architecture) with the "
            "Chain of those layers as Flux prints them"
        )
    return text


def _shown_paths(paths: Sequence[TreePath]) -> str:
    """The first :data:`_HELD_SHOWN` paths as fields read, and how many more."""
    shown = ", ".join(_relative_path(at) for at in paths[:_HELD_SHOWN])
    if len(paths) > _HELD_SHOWN:
        shown += f" and {len(paths) - _HELD_SHOWN} more"
    return shown


def _foreign_layers(value: JuliaStruct) -> list[tuple[TreePath, JuliaStruct]]:
    """The outermost structs below ``value``, outside its Flux layers, that look like another
    package's layers (a ``GraphNeuralNetworks.GCNConv`` in a ``GNNChain``): no Flux struct, no
    optimiser, not of Base or Core, holding a matrix or a kernel (a weight; a normaliser's vectors
    or a flat parameter vector are no layer). Their weights stay behind if a Flux layer is taken
    alone."""

    def stop(v: Any) -> bool:
        if not isinstance(v, JuliaStruct):
            return False
        if _is_flux_struct(v) or is_optimiser(v.type):
            return True  # (a Flux layer ports with its contents; an optimiser holds no layer)
        if v.type.name.split(".", 1)[0] in ("Base", "Core"):
            return False
        weights = any(isinstance(f, np.ndarray) and f.ndim >= 2 for f in v.fields.values())
        return weights and not _held_layers(v)  # (one holding Flux layers: walked into)

    found: list[tuple[TreePath, Any]] = []
    for key, child in value_children(value) or ():  # (value's own array fields are its data)
        found += outermost(child, (key,), 100_000, stop)
    return [(at, v) for at, v in found if not (_is_flux_struct(v) or is_optimiser(v.type))]


def _relative_path(path: TreePath) -> str:
    """A path below a struct as its fields read: ``edges[1].mlp``, BSON.jl's positional field
    names bare (``1[2].1``), as the field names the message gives beside it are."""
    out = []
    for i, seg in enumerate(path):
        if isinstance(seg, int):
            out.append(f"[{seg}]")
        elif seg.isidentifier() or seg.isdigit():
            out.append(seg if i == 0 else f".{seg}")
        else:
            out.append(f"[{seg!r}]")
    return "".join(out)


def refuse_cycles(value: Any, path: TreePath = ()) -> None:
    """Raise ConversionError where ``value`` contains itself. A file's objects may refer to each
    other in a cycle (JLD2 and BSON store references: a training state holding its own parent);
    the layer walks follow a model's fields and would never end. Iterative, each value visited once.

    Example:
        >>> loop = JuliaStruct("Main.Node", {"next": None})
        >>> loop.fields["next"] = loop
        >>> try:
        ...     refuse_cycles(loop, ("m",))
        ... except ConversionError as err:
        ...     print(err.message)
        m.next refers to m, which holds it: a cycle between the file's objects, which a model is not
    """
    on_path: dict[int, TreePath] = {}
    done: set[int] = set()
    todo: list[tuple[Any, TreePath, bool]] = [(value, tuple(path), False)]
    while todo:
        v, at, leaving = todo.pop()
        if leaving:
            del on_path[id(v)]
            done.add(id(v))
            continue
        children = value_children(v)
        if children is None:
            continue
        if id(v) in on_path:
            raise ConversionError(
                f"{format_path(at)} refers to {format_path(on_path[id(v)])}, which holds it: a cycle "
                "between the file's objects, which a model is not",
                path=at,
            )
        if id(v) in done:
            continue
        on_path[id(v)] = at
        todo.append((v, at, True))
        todo.extend((x, (*at, k), False) for k, x in reversed(children))


def from_whole_model(
    model: Any, *, path: Sequence[PathSegment] = (), flux: str = "0.14"
) -> tuple[Layer, Any]:
    """A whole-model Flux value (as ``tx.load`` returns it) -> ``(Layer tree, Flux.state value tree)``.

    ``flux`` is the era whose ``Flux.state`` conventions to follow for stateless layers (``"0.14"``:
    pools are ``()``, as Functors 0.4 made them; ``"0.15"``: their fields). Whole-model files in the
    wild come from Flux ≤ 0.14.

    Raises:
        ConversionError: a struct that is not a supported Flux layer, or an anonymous/unknown
            function, named with its tree path.

    Example:
        >>> import numpy as np
        >>> dense = JuliaStruct("Flux.Dense{NNlib.#relu,Array{Float32,2},Array{Float32,1}}",
        ...                     {"weight": np.zeros((3, 2), np.float32), "bias": np.zeros(3, np.float32)})
        >>> layer, state = from_whole_model(dense)
        >>> layer.args["σ"], list(state)
        ('relu', ['weight', 'bias', 'σ'])
    """
    era = "0.14" if flux.startswith("0.1") and tuple(map(int, flux.split(".")[:2])) < (0, 15) else "0.15"
    refuse_cycles(model, tuple(path))
    if isinstance(model, JuliaStruct) and is_optimiser(model.type):
        # (before the walk below, which would stop first at whatever the state holds: the device
        # pointers of an optimiser saved from the GPU, refused as if they were a model's weights)
        raise optimiser_error(model.type, tuple(path))
    with stack_for_depth(DEFAULT_LIMITS.max_depth):  # a model as deep as a file may hold
        model = normalise(_unwrap_tracked(model), tuple(path), closures="error")  # Flux 0.7-0.12 structs
        return _Converter(era).convert(model, tuple(path))

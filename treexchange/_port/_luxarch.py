"""Parse a Lux model as Lux prints it (``Chain(layer_1 = Dense(2 => 8, relu), …)``) into the Layer tree
of the equivalent Flux model.

Lux and Flux share most constructors; the text goes through the Flux parser's tokenizer and
expression tree (:mod:`._arch`), each Lux call is rewritten into its Flux twin, and the Flux
constructor table builds the Layer. Positions in errors are those of the Lux text. The rewrites:

- keywords: ``use_bias`` -> ``bias``, ``epsilon`` -> ``ϵ``; initialisers (``init_weight``,
  ``init_bias``, ``init_scale``, ``init_state``, ``init_memory``) and ``allow_fast_activation``
  are dropped (a trained state does not depend on them); ``True()``/``False()`` (Lux ≥ 1's static
  booleans) are ``true``/``false``;
- ``Conv(…; cross_correlation=true)`` is Flux's ``CrossCor``; ``FlattenLayer()`` is ``flatten``;
  ``NoOpLayer()`` is ``identity``; ``WrappedFunction(f)`` is ``f`` (a named NNlib function);
- a container printed with its layers named ``layer_1``, ``layer_2``, … (as Lux prints every
  positional container, those being its ``ps`` keys) is the positional Flux container;
- the cells ``RNNCell`` and ``LSTMCell`` are Flux's ``RNN`` and ``LSTM``: the cell run over a
  sequence from a zero state, every step's output returned (Lux's ``init_state`` default is zeros,
  except the Lux 0.5 ``RNNCell``'s, ones: refused by the caller; ``GRUCell`` is refused, its hidden
  bias sits inside the reset product where Flux's GRU has none). ``Recurrence(cell;
  return_sequence=true)`` and ``StatefulRecurrentCell(cell)`` are the same (Lux's ``ps`` of both is
  the cell's). ``Recurrence(cell)`` returns only the last step, which no Flux layer does: at the
  top of the text, or in a Chain (which is then ported part by part), the caller takes it
  (:class:`LuxPiece`); inside another container it is refused;
- a trainable initial state (``train_state=true``, ``train_memory=true``) or a cell without bias
  has no Flux twin: refused, naming its position.

A Lux ``LayerNorm`` normalises over every axis but the batch unless its ``dims`` says otherwise,
which is not Flux's ``LayerNorm``: refused, as are Lux layers with no Flux twin.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from treexchange._errors import ConversionError, UnsupportedError
from treexchange._port._arch import _Builder, _Call, _Name, _Pair, _Parser, _Tuple, _where
from treexchange._port._spec import Layer

_DROPPED = frozenset(
    {"init_weight", "init_bias", "init_scale", "init_state", "init_memory", "allow_fast_activation", "rng"}
)
_RENAMED = {"use_bias": "bias", "epsilon": "ϵ"}
_CELLS = {"RNNCell": "RNN", "LSTMCell": "LSTM", "GRUCell": "GRU"}
# Lux layers whose call is Flux's (same arguments once the keywords are renamed).
_SAME = frozenset(
    {
        "Chain", "Parallel", "PairwiseFusion", "SkipConnection", "Dense", "Embedding", "BatchNorm",
        "GroupNorm", "Dropout", "AlphaDropout", "MaxPool", "MeanPool", "GlobalMaxPool", "GlobalMeanPool",
        "AdaptiveMaxPool", "AdaptiveMeanPool",
    }
)  # fmt: skip
_PREFIXES = ("Lux.", "LuxCore.", "Main.")


class _LuxRewriter:
    """Lux expressions -> Flux expressions (same positions)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, message: str, pos: int, unsupported: bool = False) -> Exception:
        where = f"{message} at {_where(self.text, pos)} of the architecture"
        return UnsupportedError(where) if unsupported else ConversionError(where)

    def layer(self, e: Any) -> tuple[Any, bool]:
        """``(Flux expression, last_step)``: last_step for a ``Recurrence`` keeping only its last output."""
        if isinstance(e, _Call):
            return self.call(e)
        return e, False  # names (functions), lambdas: the Flux builder judges them

    def call(self, e: _Call) -> tuple[Any, bool]:
        name = _strip(e.func)
        kwargs = dict(e.kwargs)
        if name in ("True", "False") and not e.args:
            return _Name(name.lower(), e.pos), False
        if name in ("Recurrence", "StatefulRecurrentCell"):
            return self.wrapper(e, name, kwargs)
        if name in _CELLS:
            return self.cell(e, name, kwargs), False
        if name == "Conv" and "cross_correlation" in kwargs:
            flag = self.value(kwargs.pop("cross_correlation"))
            if isinstance(flag, _Name) and flag.name == "true":
                name = "CrossCor"
        if name == "FlattenLayer":
            dims = [*e.args, *(v for k, v in kwargs.items() if k == "N")]
            if len(e.args) + len(kwargs) != len(dims) or any(
                not (isinstance(v, _Name) and v.name == "nothing") for v in dims
            ):
                raise self.error("FlattenLayer(N) (flattening N axes only) has no Flux twin", e.pos, True)
            return _Name("flatten", e.pos), False
        if name == "NoOpLayer":
            return _Name("identity", e.pos), False
        if name == "WrappedFunction":
            if len(e.args) != 1 or kwargs:
                raise self.error("WrappedFunction must wrap one named function", e.pos)
            return e.args[0], False
        if name == "LayerNorm":
            raise self.error(
                "Lux's LayerNorm normalises over every axis but the batch (unless dims says otherwise), "
                "not over the leading ones as Flux's: it has no Flux twin to port through",
                e.pos,
                unsupported=True,
            )
        if name not in _SAME and name not in ("Conv", "CrossCor"):
            raise self.error(f"Lux layer {e.func!r} is not supported by from_lux", e.pos, unsupported=True)
        if name in _CONTAINERS or name == "SkipConnection":
            kwargs.pop("disable_optimizations", None)
            if isinstance(kwargs.get("name"), _Name) and kwargs["name"].name == "nothing":
                del kwargs["name"]  # Lux ≥ 1 prints a container's (unset) display name
            e = _positional_fields(e, kwargs, name)
        if name == "Chain":
            split = self.split_chain(e, kwargs)
            if split is not None:
                return split, False
        args = tuple(self.child(a) for a in e.args)
        if name in _CONTAINERS and _positional_names(kwargs):
            # Lux prints a positional container's layers as layer_1 = …, layer_2 = …, the keys of its
            # ps: the Flux twin is the positional container, whose layers Lux's layout names so too
            args += tuple(self.child(v) for v in kwargs.values())
            kwargs = {}
        return _Call(name, args, self.keywords(kwargs, child=name in _CONTAINERS), e.pos), False

    def child(self, e: Any) -> Any:
        if not isinstance(e, (_Pair, _Tuple)):  # a layer (pairs and tuples are sizes)
            flux, last = self.layer(e)
            if last or isinstance(flux, _Split):
                raise self.error(
                    "Recurrence(cell) keeps only the last step (return_sequence=false), which no Flux "
                    "layer does: it ports at the top of the text or in a Chain, not inside another "
                    "container (give the parts per name and compose them, or use return_sequence=true)",
                    _pos(e),
                    unsupported=True,
                )
            return flux
        return e

    def split_chain(self, e: _Call, kwargs: dict[str, Any]) -> _Split | None:
        """A Chain holding a last-step ``Recurrence`` (directly or in a Chain inside it): the Chain
        is ported part by part, the last step taken between the parts (no Flux layer takes it)."""
        if e.args and kwargs:
            return None  # mixed: the Flux Chain builder reports it
        items = list(kwargs.items()) if kwargs else [(f"layer_{i}", a) for i, a in enumerate(e.args, 1)]
        if len(items) == 1 and not kwargs and isinstance(items[0][1], _Tuple):
            items = [(f"layer_{i}", a) for i, a in enumerate(items[0][1].items, 1)]  # Chain([a, b])
        parts = [(key, *self.layer(value)) for key, value in items]
        if not any(last or isinstance(flux, _Split) for _, flux, last in parts):
            return None
        return _Split(tuple(parts), e.pos)

    def keywords(self, kwargs: dict[str, Any], child: bool = False) -> tuple[tuple[str, Any], ...]:
        out = []
        for key, value in kwargs.items():
            if key in _DROPPED:
                continue
            out.append((_RENAMED.get(key, key), self.child(value) if child else self.value(value)))
        return tuple(out)

    def value(self, e: Any) -> Any:
        if isinstance(e, _Call) and _strip(e.func) in ("True", "False") and not e.args:
            return _Name(_strip(e.func).lower(), e.pos)
        if isinstance(e, _Call) and _strip(e.func) == "static" and len(e.args) == 1:
            return self.value(e.args[0])
        return e

    def cell(self, e: _Call, name: str, kwargs: dict[str, Any]) -> _Call:
        bias = self.value(kwargs.pop("use_bias", _Name("true", e.pos)))
        if not (isinstance(bias, _Name) and bias.name in ("true", "false")):
            raise self.error(f"{name}(use_bias=…) must be true or false", e.pos)
        if name == "GRUCell" and bias.name == "true":
            raise self.error(
                "Lux's GRUCell adds the last block of its hidden bias inside the reset product "
                "(r ⊙ (W_hn h + b_hn)), where Flux's GRU has none: no Flux twin to port through",
                e.pos,
                unsupported=True,
            )
        for key in ("train_state", "train_memory"):
            flag = self.value(kwargs.pop(key, _Name("false", e.pos)))
            if not (isinstance(flag, _Name) and flag.name == "false"):
                raise self.error(
                    f"{name}({key}=true) learns its initial state, which a Flux {_CELLS[name]} (starting "
                    "from zeros) cannot hold",
                    e.pos,
                    unsupported=True,
                )
        if e.args and not isinstance(e.args[0], _Pair):
            raise self.error(f"{name} must be written {name}(in => out)", e.pos)
        # (use_bias=false: no bias_ih/bias_hh, Flux ≥ 0.15's bias=false; a GRU then has no b_hn either)
        flags = (("bias", _Name("false", e.pos)),) if bias.name == "false" else ()
        return _Call(_CELLS[name], e.args, (*self.keywords(kwargs), *flags), e.pos)

    def wrapper(self, e: _Call, name: str, kwargs: dict[str, Any]) -> tuple[Any, bool]:
        cell = kwargs.pop("cell", None)
        if cell is None and len(e.args) == 1:
            cell = e.args[0]
        if cell is None or not (isinstance(cell, _Call) and _strip(cell.func) in _CELLS):
            raise self.error(f"{name} must wrap an RNNCell, LSTMCell or GRUCell", e.pos)
        last = False
        if name == "Recurrence":
            sequence = self.value(kwargs.pop("return_sequence", _Name("false", e.pos)))
            last = not (isinstance(sequence, _Name) and sequence.name == "true")
            kwargs.pop("ordering", None)  # which Julia axis is time: the Python models take time first
        if kwargs:
            key = next(iter(kwargs))
            raise self.error(f"unknown keyword {key!r} for {name}", _pos(kwargs[key]))
        return self.cell(cell, _strip(cell.func), dict(cell.kwargs)), last


_CONTAINERS = frozenset({"Chain", "Parallel", "PairwiseFusion"})


def _positional_fields(e: _Call, kwargs: dict[str, Any], name: str) -> _Call:
    """Lux ≥ 1 prints every field of a container by name (``SkipConnection(connection = +, layers =
    …)``, ``Parallel(connection = vcat, layer_1 = …)``): the connection and wrapped layer go where
    Flux's constructors take them (``kwargs`` is updated in place)."""
    first = [kwargs.pop(key) for key in ("connection",) if key in kwargs and name != "Chain"]
    last = [kwargs.pop("layers")] if name == "SkipConnection" and "layers" in kwargs else []
    if name == "SkipConnection":
        return _Call(e.func, (*e.args, *last, *first), e.kwargs, e.pos)
    args = (*first, *e.args)
    if name == "Parallel" and args and isinstance(args[0], _Name) and args[0].name == "nothing":
        args = (_Name("tuple", args[0].pos), *args[1:])  # (Lux: no connection, the outputs as a tuple)
    return _Call(e.func, args, e.kwargs, e.pos)


def _blank_type_parameters(text: str) -> str:
    """``text`` with every ``{…}`` right after a name blanked out (Julia's default ``show`` of a
    parametric struct, ``FlattenLayer{Nothing}(nothing)``): spaces keep every position in place for
    the error messages."""
    chars = list(text)
    i = 0
    while i < len(chars):
        if chars[i] == "{" and i > 0 and (chars[i - 1].isalnum() or chars[i - 1] in "_!"):
            depth, j = 0, i
            while j < len(chars):
                depth += {"{": 1, "}": -1}.get(chars[j], 0)
                if depth == 0:
                    break
                j += 1
            for k in range(i, min(j + 1, len(chars))):
                if chars[k] != "\n":
                    chars[k] = " "
            i = j
        i += 1
    return "".join(chars)


def _positional_names(kwargs: dict[str, Any]) -> bool:
    return bool(kwargs) and list(kwargs) == [f"layer_{i}" for i in range(1, len(kwargs) + 1)]


def _strip(name: str) -> str:
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def _pos(e: Any) -> int:
    return int(getattr(e, "pos", 0))


@dataclasses.dataclass(frozen=True)
class _Split:
    """A Chain to port part by part: ``(ps key, Flux expression or _Split, last_step)`` each."""

    parts: tuple[tuple[str, Any, bool], ...]
    pos: int


@dataclasses.dataclass(frozen=True)
class LuxPiece:
    """What a Lux text ports to: one Flux-twin ``layer`` (its output's last time step when
    ``last_step``), or, for a Chain holding a last-step ``Recurrence``, ``parts`` to port one by one
    and run in order (``(ps key, LuxPiece)`` each)."""

    layer: Layer | None = None
    last_step: bool = False
    parts: tuple[tuple[str, LuxPiece], ...] = ()


def parse_lux_architecture(text: str) -> LuxPiece:
    """What a Lux model printed as ``text`` ports to (parsed, never evaluated): the Layer tree of the
    equivalent Flux model, or, where Lux's ``Recurrence(cell)`` keeps only the last time step (which
    no Flux layer does), the parts of the Chain around it.

    Raises:
        ConversionError: text that is not a Lux model (its line and column named).
        UnsupportedError: a Lux layer with no Flux twin (the Lux ``LayerNorm``, a cell learning its
            initial state, a last-step ``Recurrence`` inside a container other than a Chain).

    Example:
        >>> text = "Chain(layer_1 = Dense(2 => 8, relu; use_bias=false), layer_2 = FlattenLayer())"
        >>> net = parse_lux_architecture(text).layer
        >>> net.kinds(), net.names, net.children[0].args["bias"]
        (['Chain', 'Dense', 'flatten'], None, False)
        >>> piece = parse_lux_architecture("Chain(Recurrence(LSTMCell(2 => 8)), Dense(8 => 1, sigmoid))")
        >>> [(key, part.layer.kind, part.last_step) for key, part in piece.parts]
        [('layer_1', 'LSTM', True), ('layer_2', 'Dense', False)]
    """
    text = _blank_type_parameters(text)
    builder = _Builder(text)

    def piece(flux: Any, last: bool) -> LuxPiece:
        if isinstance(flux, _Split):
            return LuxPiece(parts=tuple((key, piece(sub, sub_last)) for key, sub, sub_last in flux.parts))
        return LuxPiece(builder.layer(flux), last)

    return piece(*_LuxRewriter(text).layer(_Parser(text).parse()))

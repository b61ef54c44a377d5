"""Parse a Flux model as Flux prints it (``Chain(Conv((5, 5), 1 => 6, relu), ...)``) into a Layer tree.

The text is tokenized and parsed by a small recursive-descent parser into a generic expression tree
(calls, tuples, pairs, names, numbers), which is then turned into :class:`~._spec.Layer` nodes by one
constructor table that follows Flux's own constructors (defaults, ``SamePad``, ``pad`` expansion).
Nothing is ever evaluated. An unknown layer or function, an anonymous function or a construct Flux
does not print is a :class:`~treexchange.ConversionError` naming it and its line and column.

Flux's printed decorations are accepted: ``# 156 parameters`` comments, multi-line layouts with
trailing commas, ``; keyword=…`` sections, module prefixes (``Flux.flatten``, ``NNlib.relu``) and
the Flux ≤ 0.14 ``Recur(LSTMCell(3 => 5))`` spelling of recurrent layers.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

from treexchange._errors import ConversionError
from treexchange._port._activations import BASE_MATH, refuse_whole_array_sigma
from treexchange._port._registry import CELLS, PORTING_DOCS, RECURRENT_GATES, wrapped_kind
from treexchange._port._spec import Layer

# --- tokens ------------------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<closure>\#\d[\w\#]*(?=[ \t]*[,)\];]))
  | (?P<space>[ \t\r\n]+|\#[^\n]*)
  | (?P<number>(?:\d[\d_]*\.?[\d_]*|\.\d[\d_]*)(?:[eEf][+-]?\d+)?)
  | (?P<name>var"[^"]*"|[^\W\d][\w!′²³⁺⁻]*(?:\.[^\W\d][\w!′²³⁺⁻]*)*)
  | (?P<punct>=>|->|\.\*|\.\+|==|[()\[\],;=+*\-:/^÷.'{}|&<>@$"\\])
    """,
    re.VERBOSE,
)


@dataclasses.dataclass(frozen=True)
class _Token:
    kind: str  # "number", "name", "closure" (`#13`, as Flux prints one), "punct", "end"
    text: str
    pos: int


def _where(text: str, pos: int) -> str:
    line = text.count("\n", 0, pos) + 1
    column = pos - (text.rfind("\n", 0, pos) + 1) + 1
    return f"line {line}, column {column}"


def _tokenize(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ConversionError(
                f"unexpected character {text[pos]!r} at {_where(text, pos)} of the architecture"
            )
        kind = m.lastgroup or ""
        if kind != "space":
            tokens.append(_Token(kind, m.group(), pos))
        pos = m.end()
    tokens.append(_Token("end", "", len(text)))
    return tokens


# --- expressions -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class _Name:
    name: str
    pos: int


@dataclasses.dataclass(frozen=True)
class _Number:
    value: int | float
    pos: int


@dataclasses.dataclass(frozen=True)
class _Tuple:
    items: tuple[Any, ...]
    pos: int


@dataclasses.dataclass(frozen=True)
class _Pair:
    first: Any
    second: Any
    pos: int


@dataclasses.dataclass(frozen=True)
class _Call:
    func: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    pos: int


@dataclasses.dataclass(frozen=True)
class _Lambda:
    pos: int


class _Parser:
    """Recursive descent over the tokens; grammar: ``expr := atom ('=>' expr | '->' …)?``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokenize(text)
        self.i = 0

    def error(self, message: str, pos: int) -> ConversionError:
        return ConversionError(f"{message} at {_where(self.text, pos)} of the architecture")

    def found(self) -> str:
        return repr(self.tok.text) if self.tok.kind != "end" else "the end of the text"

    @property
    def tok(self) -> _Token:
        return self.tokens[self.i]

    def take(self, text: str | None = None) -> _Token:
        tok = self.tok
        if text is not None and tok.text != text:
            found = repr(tok.text) if tok.kind != "end" else "the end of the text"
            raise self.error(f"expected {text!r} but found {found}", tok.pos)
        self.i += 1
        return tok

    def parse(self) -> Any:
        expr = self.expr()
        if self.tok.kind != "end":
            raise self.error(f"unexpected {self.tok.text!r} after the model", self.tok.pos)
        return expr

    def expr(self) -> Any:
        left = self.arithmetic()
        if self.tok.text == "=>":
            pos = self.take().pos
            return _Pair(left, self.expr(), pos)
        if self.tok.text == "->":
            self.take()
            body = self.skip_lambda_body()
            known = _known_lambda(left, body) if isinstance(left, _Name) else None
            return _Name(known, left.pos) if known is not None else _Lambda(_pos(left))
        return left

    def arithmetic(self, least: int = 1) -> Any:
        """Sizes written as code writes them, ``Dense(28^2, 32)``, ``Dense(16 * 4 * 4 => 120)``:
        ``+ - * ÷ ^`` between numbers folded (Julia's precedence, ``^`` to the right), nothing
        else evaluated."""
        if (
            self.tok.text == "-"
            and self.tokens[self.i + 1].kind == "number"
            and self.tokens[self.i + 2].text == "^"
        ):
            # (Julia's -2^2 is -(2^2): the minus binds looser than the power)
            minus = self.take()
            power = self.arithmetic(_BINARY["^"])
            if not isinstance(power, _Number):
                raise self.error("'-' must come before a number", minus.pos)
            left: Any = _Number(-power.value, minus.pos)
        else:
            left = self.atom()
        while isinstance(left, _Number) and _BINARY.get(self.tok.text, 0) >= least:
            op = self.take()
            if self.tok.kind != "number" and self.tok.text not in ("(", "-"):
                raise self.error(f"{op.text!r} must join two numbers", op.pos)
            right = self.arithmetic(_BINARY[op.text] + (op.text != "^"))
            if not isinstance(right, _Number):
                raise self.error(f"{op.text!r} must join two numbers", op.pos)
            left = _Number(_fold(op.text, left.value, right.value, self.error, op.pos), left.pos)
        return left

    def skip_lambda_body(self) -> list[str]:
        """Consume an anonymous function's body (up to the enclosing ``,``/``)``) so that the caller
        can name it in the error (or ignore it, as in ``init = (dims...) -> …``); its tokens' texts."""
        depth = 0
        body: list[str] = []
        while self.tok.kind != "end":
            if self.tok.text in "([{":
                depth += 1
            elif self.tok.text in ")]}":
                if depth == 0:
                    break
                depth -= 1
            elif self.tok.text in ",;" and depth == 0:
                break
            body.append(self.take().text)
        return body

    def atom(self) -> Any:
        tok = self.tok
        if tok.kind == "number":
            self.take()
            return _Number(_number(tok.text), tok.pos)
        if tok.text == "-" and self.tokens[self.i + 1].kind == "number":
            self.take()
            num = self.take()
            return _Number(-_number(num.text), tok.pos)
        if tok.text == "(":
            return self.paren()
        if tok.text == "[":
            return self.vector()
        if tok.kind == "name":
            self.take()
            if tok.text.startswith('var"'):
                raise self.error(f"anonymous function {tok.text} (write the model without closures)", tok.pos)
            if self.tok.text == "(":
                return self.call(tok)
            return _Name(tok.text, tok.pos)
        if tok.kind == "closure":  # (`#13` before `,` or `)`: how Flux prints a closure; `# 27
            # parameters`, `#1 layer` and a `#2` ending a line are comments)
            self.take()
            return _Lambda(tok.pos)
        if tok.kind == "punct" and tok.text in ("+", "*", ".*", ".+", "-", "/", "^"):
            self.take()
            return _Name(tok.text, tok.pos)
        if tok.kind == "end":
            raise self.error("the text ends where a value was expected", tok.pos)
        raise self.error(f"unexpected {tok.text!r}", tok.pos)

    def paren(self) -> Any:
        pos = self.take("(").pos
        items: list[Any] = []
        trailing_comma = False
        while self.tok.text != ")":
            items.append(self.expr())
            trailing_comma = False
            if self.tok.text == ",":
                self.take()
                trailing_comma = True
            elif self.tok.text != ")":
                raise self.error(f"expected ',' or ')' but found {self.found()}", self.tok.pos)
        self.take(")")
        if self.tok.text == "->":  # (a, b) -> …
            self.take()
            self.skip_lambda_body()
            return _Lambda(pos)
        if len(items) == 1 and not trailing_comma:
            return items[0]
        return _Tuple(tuple(items), pos)

    def vector(self) -> Any:
        pos = self.take("[").pos
        items: list[Any] = []
        while self.tok.text != "]":
            items.append(self.expr())
            if self.tok.text == ",":
                self.take()
            elif self.tok.text != "]":
                raise self.error(f"expected ',' or ']' but found {self.found()}", self.tok.pos)
        self.take("]")
        return _Tuple(tuple(items), pos)

    def call(self, name: _Token) -> _Call:
        self.take("(")
        args: list[Any] = []
        kwargs: list[tuple[str, Any]] = []
        semicolon = False
        while self.tok.text != ")":
            if self.tok.text == ";":
                self.take()
                semicolon = True
                continue
            if self.tok.kind == "name" and self.tokens[self.i + 1].text == "=":
                key = self.take().text
                self.take("=")
                kwargs.append((key, self.expr()))
            else:
                # (Julia takes keywords anywhere before a `;`: the model zoo's
                # `Conv((3, 3), 1=>16, pad=(1,1), relu)` is valid code)
                if semicolon:
                    raise self.error("positional argument after the ';' of keyword arguments", self.tok.pos)
                args.append(self.expr())
            if self.tok.text == ",":
                self.take()
            elif self.tok.text not in (")", ";"):
                raise self.error(f"expected ',' or ')' but found {self.found()}", self.tok.pos)
        self.take(")")
        return _Call(name.text, tuple(args), tuple(kwargs), name.pos)


_BINARY = {"+": 1, "-": 1, "*": 2, "÷": 2, "^": 3}


def _known_lambda(param: _Name, body: list[str]) -> str | None:
    """The function an anonymous function of code is, when it is only a spelling of one: ``x ->
    reshape(x, :, size(x, 4))`` (how Flux's model zoo flattened before ``Flux.flatten``) is
    ``flatten`` (every dim but the last, which is what ``size(x, N)`` names in the models it is
    written for); ``x -> relu.(x)`` / ``x -> softmax(x)`` / ``x -> flatten(x)`` are the function.
    Matched token by token, never evaluated; anything else stays an anonymous function."""
    x = param.name
    if not re.fullmatch(r"[^\W\d]\w*", x):
        return None
    head = ["reshape", "(", x, ",", ":", ",", "size", "(", x]
    tail = body[len(head) :]
    last_dim = (  # size(x, N), size(x)[end], size(x, ndims(x))
        (len(tail) == 4 and tail[:1] + tail[2:] == [",", ")", ")"] and tail[1].isdigit() and int(tail[1]) > 0)
        or tail == [")", "[", "end", "]", ")"]
        or tail == [",", "ndims", "(", x, ")", ")", ")"]
    )
    if body[: len(head)] == head and last_dim:
        return "flatten"
    if body == ["reshape", "(", x, ",", ":", ")"] or body == ["vec", "(", x, ")"]:
        return "vec"
    if len(body) in (4, 5) and body[-3:] == ["(", x, ")"] and (len(body) == 4 or body[1] == "."):
        name = _strip(body[0])
        if name == "flatten" or canonical_activation(name) is not None:
            return body[0]
    return None


def known_closure(code: str) -> str | None:
    """The Julia name of the function a closure's code only spells (``"x -> reshape(x, :, size(x,
    4))"`` -> ``"flatten"``, ``"x -> relu.(x)"`` -> ``"relu"``), else ``None``: the same token
    match as an anonymous function in architecture text, never an evaluation.

    Example:
        >>> known_closure("x -> reshape(x, :, size(x, 4))"), known_closure("x -> x .^ 2")
        ('flatten', None)
    """
    try:
        tokens = _tokenize(code)
    except ConversionError:
        return None
    if len(tokens) < 4 or tokens[0].kind != "name" or tokens[1].text != "->":
        return None
    name = _known_lambda(_Name(tokens[0].text, 0), [t.text for t in tokens[2:-1]])
    return None if name is None else _strip(name)


def _fold(op: str, a: int | float, b: int | float, error: Any, pos: int) -> int | float:
    """``a op b`` of two literals, bounded (a size, not a computation: ``9^999999`` is refused
    before Python would build it)."""
    if op == "^" and (abs(b) > 64 or (isinstance(b, int) and b < 0 and isinstance(a, int))):
        raise error(f"exponent {b} is out of range for a size", pos)
    if op == "÷":
        if b == 0:
            raise error("division by zero", pos)
        if not (isinstance(a, int) and isinstance(b, int)):
            raise error("÷ needs integers", pos)
        out: int | float = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)  # (Julia's div truncates)
    else:
        try:
            out = a**b if op == "^" else a + b if op == "+" else a - b if op == "-" else a * b
        except (ZeroDivisionError, OverflowError):
            raise error(f"{a} {op} {b} has no value for a size", pos) from None
    if isinstance(out, complex) or out != out:  # ((-8.0)^0.5 is complex in Python; inf - inf is NaN)
        raise error(f"{a} {op} {b} has no real value", pos)
    if abs(out) > 2**62:
        raise error(f"{a} {op} {b} is out of range for a size", pos)
    return out


def _number(text: str) -> int | float:
    text = text.replace("_", "")
    if re.fullmatch(r"\d+", text):
        return int(text)
    return float(text.replace("f", "e"))


# --- expressions -> Layer ----------------------------------------------------------------------

# Module prefixes Flux may print in front of its own names.
_PREFIXES = ("Flux.", "NNlib.", "MLUtils.", "Base.", "Main.", "Core.", "Metalhead.", "Functors.",
             "DiffEqFlux.")  # fmt: skip

# NNlib activations (Julia names); the IR stores the canonical name (σ -> sigmoid, ...).
ACTIVATION_ALIASES = {"σ": "sigmoid", "hardσ": "hardsigmoid", "logσ": "logsigmoid", "thresholdrelu": "trelu"}
ACTIVATIONS = frozenset(
    {
        "identity", "relu", "sigmoid", "sigmoid_fast", "tanh", "tanh_fast", "leakyrelu", "relu6", "elu",
        "celu", "selu", "gelu", "gelu_tanh", "gelu_erf", "swish", "hardswish", "softplus", "softsign",
        "logsigmoid", "hardsigmoid", "hardtanh", "mish", "tanhshrink", "lisht", "softmax", "logsoftmax",
        "trelu", "softshrink", "logcosh", "gelu_sigmoid",
        "vec",  # (Base.vec as a Chain entry, `Chain(…, Dense(8 => 1), vec)`: the output as one vector)
        # Base's math functions of a number defined for every real (sin: SIREN and physics-informed
        # networks, `Dense(2 => 64, sin)`, `x -> sin.(x)`); not sqrt or log, which Julia refuses
        # for negative numbers (DomainError) where JAX gives NaN
        *BASE_MATH,
    }
)  # fmt: skip
# Connections of Parallel / SkipConnection / PairwiseFusion the port applies: Julia name -> the name
# the port knows it by. `.+` / `.*` (in Julia >= 1.6 the value `Base.Broadcast.BroadcastFunction(+)`,
# a file's `BroadcastFunction{typeof(+)}`) broadcast, as the port's `+` / `*` do: numpy broadcasting
# on the reversed axes is Julia's broadcasting. `tuple` gives the branches' outputs as a tuple (a
# model with several heads). (`cat` needs `dims=`, which only a closure can pass: not portable.)
CONNECTIONS = {
    "+": "+",
    ".+": "+",
    "*": "*",
    ".*": "*",
    "vcat": "vcat",
    "hcat": "hcat",
    "max": "max",
    "min": "min",
    "tuple": "tuple",
}
BROADCAST_FUNCTION = "Broadcast.BroadcastFunction"


def connection_name(name: str) -> str | None:
    """The port's name of a Flux connection function (``Base.:+`` / ``.+`` -> ``+``), or None.

    Example:
        >>> connection_name(".*"), connection_name("vcat"), connection_name("cat")
        ('*', 'vcat', None)
    """
    name = _strip(name)
    if name.startswith(":"):  # Base.:+
        name = name[1:]
    return CONNECTIONS.get(name)


def _strip(name: str) -> str:
    for prefix in _PREFIXES:
        if name.startswith(prefix):
            return name[len(prefix) :]
    return name


def canonical_activation(name: str) -> str | None:
    """The IR name of an NNlib activation (``"σ"`` -> ``"sigmoid"``), or None if it is not one.

    Example:
        >>> canonical_activation("NNlib.σ"), canonical_activation("relu"), canonical_activation("foo")
        ('sigmoid', 'relu', None)
    """
    name = _strip(name)
    name = ACTIVATION_ALIASES.get(name, name)
    return name if name in ACTIVATIONS else None


class _Builder:
    """Turns the expression tree into Layers; knows the text for error positions."""

    def __init__(self, text: str) -> None:
        self.text = text

    def error(self, message: str, pos: int) -> ConversionError:
        return ConversionError(f"{message} at {_where(self.text, pos)} of the architecture")

    # -- values -------------------------------------------------------------------------------

    def int_(self, e: Any, what: str, minimum: int | None = 0) -> int:
        """An Int of at least ``minimum``: 0 for sizes and channels (Julia builds empty arrays
        of them; the port then refuses the layer by name, ``_refuse_empty_layers``); 1 for
        strides, dilations, windows, group and head counts (Flux divides or steps by them);
        ``None`` (any) for padding, which may be negative."""
        if isinstance(e, _Number) and isinstance(e.value, int):
            if minimum is not None and e.value < minimum:
                least = "a positive integer" if minimum == 1 else f"an integer ≥ {minimum}"
                raise self.error(f"{what} must be {least}, not {e.value}", _pos(e))
            return e.value
        raise self.error(f"{what} must be an integer", _pos(e))

    def float_(self, e: Any, what: str) -> float:
        if isinstance(e, _Number):
            return float(e.value)
        raise self.error(f"{what} must be a number", _pos(e))

    def bool_(self, e: Any, what: str) -> bool:
        if isinstance(e, _Name) and e.name in ("true", "false"):
            return e.name == "true"
        raise self.error(f"{what} must be true or false", _pos(e))

    def ints(self, e: Any, n: int | None, what: str, minimum: int | None = 0) -> tuple[int, ...]:
        """An Int (repeated ``n`` times) or a tuple of Ints, each at least ``minimum`` (:meth:`int_`)."""
        if isinstance(e, _Tuple):
            return tuple(self.int_(v, what, minimum) for v in e.items)
        value = self.int_(e, what, minimum)
        return (value,) * (n or 1)

    def pair(self, e: Any, what: str) -> tuple[Any, Any]:
        if isinstance(e, _Pair):
            return e.first, e.second
        raise self.error(f"{what} must be written `in => out`", _pos(e))

    def activation(self, e: Any, layer: str = "a layer") -> str:
        if isinstance(e, _Name):
            name = canonical_activation(e.name)
            if name is not None:
                refusal = refuse_whole_array_sigma(name, layer)
                if refusal is not None:
                    raise self.error(refusal, e.pos)
                return name
            raise self.error(f"unknown activation function {e.name!r}", e.pos)
        if isinstance(e, _Lambda):
            raise self.error("anonymous function (activations must be named NNlib functions)", e.pos)
        raise self.error("expected an activation function", _pos(e))

    def connection(self, e: Any) -> str:
        if isinstance(e, _Call) and _strip(e.func).endswith(BROADCAST_FUNCTION) and len(e.args) == 1:
            if isinstance(e.args[0], _Name) and not e.kwargs:  # as Flux prints `.+`
                e = _Name("." + _strip(e.args[0].name), e.pos)
        if isinstance(e, _Name) and connection_name(e.name) is not None:
            return str(connection_name(e.name))
        if isinstance(e, _Lambda):
            raise self.error("anonymous function as a connection", e.pos)
        if isinstance(e, _Name):
            raise self.error(
                f"unknown connection function {e.name!r} (the port applies {', '.join(CONNECTIONS)})", e.pos
            )
        raise self.error("expected a connection function such as + or vcat", _pos(e))

    # -- layers -------------------------------------------------------------------------------

    def layer(self, e: Any) -> Layer:
        if isinstance(e, _Lambda):
            raise self.error("anonymous function (not portable; write the model without closures)", e.pos)
        if isinstance(e, _Name):
            name = _strip(e.name)
            if name == "flatten":
                return Layer("flatten")
            act = canonical_activation(name)
            if act is not None:
                return Layer("function", {"name": act})
            if name in _CONSTRUCTORS:
                raise self.error(f"layer {name} without its arguments", e.pos)
            raise self.error(f"unknown function {e.name!r}", e.pos)
        if isinstance(e, _Call):
            name = _strip(e.func)
            build = _CONSTRUCTORS.get(name)
            if build is None:
                where = self.error(f"unknown layer {e.func!r}", e.pos)
                known = ", ".join(sorted(_CONSTRUCTORS))
                raise ConversionError(f"{where}; the layers that port: {known} (see {PORTING_DOCS})")
            return build(self, _Args(self, e))
        raise self.error("expected a layer", _pos(e))


def _pos(e: Any) -> int:
    return int(getattr(e, "pos", 0))


# Every initialiser keyword of Flux's layers, 0.10 to 0.16 (``src/layers``: ``init``; Dense ≤ 0.12
# ``initW``/``initb``; norms ``initβ``/``initγ``; recurrent cells ≤ 0.14 ``initb``/``init_state``,
# ≥ 0.15 ``init_kernel``/``init_recurrent_kernel``; ``rng``): code as written names them, a
# printed model does not, and none changes what a trained state computes.
_INITIALISERS = ("init", "initW", "initb", "initβ", "initγ", "init_state", "init_kernel",
                 "init_recurrent_kernel", "rng")  # fmt: skip


class _Args:
    """A call's arguments with helpers that report their position on error."""

    def __init__(self, builder: _Builder, call: _Call) -> None:
        self.b = builder
        self.call = call
        self.args = list(call.args)
        self.kwargs = dict(call.kwargs)
        for key in _INITIALISERS:  # initialisers do not matter for a trained state
            self.kwargs.pop(key, None)

    @property
    def name(self) -> str:
        return _strip(self.call.func)

    def arity(self, low: int, high: int) -> None:
        if not low <= len(self.args) <= high:
            raise self.b.error(
                f"{self.name} takes {low}–{high} positional arguments, got {len(self.args)}", self.call.pos
            )

    def pop_kw(self, key: str) -> Any:
        return self.kwargs.pop(key, None)

    def done(self) -> None:
        if self.kwargs:
            key = next(iter(self.kwargs))
            raise self.b.error(f"unknown keyword {key!r} for {self.name}", _pos(self.kwargs[key]))


def _pad(b: _Builder, e: Any, kernel: tuple[int, ...], dilation: tuple[int, ...]) -> tuple[int, ...]:
    """Flux's ``calc_padding`` then NNlib's expansion to the 2N form (lo₁, hi₁, lo₂, hi₂, …)."""
    n = len(kernel)
    if e is None:
        return (0,) * (2 * n)
    if isinstance(e, _Call) and _strip(e.func) == "SamePad" and not e.args:
        out: list[int] = []
        for k, d in zip(kernel, dilation, strict=True):
            total = (k - 1) * d  # larger half first: [cld(i, 2), fld(i, 2)]
            out += [-(-total // 2), total // 2]
        return tuple(out)
    values = b.ints(e, n, "pad", None)
    if len(values) == n:
        return tuple(v for v in values for _ in range(2))
    if len(values) == 2 * n:
        return values
    raise b.error(f"pad must have {n} or {2 * n} entries for a {n}-D kernel", _pos(e))


def _sigma(a: _Args, index: int) -> str:
    return a.b.activation(a.args[index], a.name) if len(a.args) > index else "identity"


def _bias(a: _Args) -> bool:
    e = a.pop_kw("bias")
    return True if e is None else a.b.bool_(e, "bias")


def _conv(a: _Args) -> Layer:
    a.arity(2, 3)
    kernel = a.b.ints(a.args[0], None, "kernel size")
    first, second = a.b.pair(a.args[1], "channels")
    cin, cout = a.b.int_(first, "input channels"), a.b.int_(second, "output channels")
    n = len(kernel)
    kind = a.name
    stride = a.b.ints(a.pop_kw("stride") or _Number(1, 0), n, "stride", 1)
    dilation = a.b.ints(a.pop_kw("dilation") or _Number(1, 0), n, "dilation", 1)
    if len(stride) != n or len(dilation) != n:
        raise a.b.error(f"stride and dilation need {n} entries", a.call.pos)
    args: dict[str, Any] = {"kernel": kernel, "in": cin, "out": cout, "σ": _sigma(a, 2), "stride": stride}
    args["pad"] = _pad(a.b, a.pop_kw("pad"), kernel, dilation)
    args["dilation"] = dilation
    groups_e = a.pop_kw("groups")
    if kind == "DepthwiseConv":
        args["groups"] = cin
    elif kind != "CrossCor":
        args["groups"] = a.b.int_(groups_e, "groups", 1) if groups_e is not None else 1
    elif groups_e is not None:
        raise a.b.error("CrossCor has no groups", _pos(groups_e))
    else:
        args["groups"] = 1  # Flux's CrossCor has no groups field; 1 is what it computes
    if kind == "ConvTranspose":
        outpad = a.pop_kw("outpad")
        args["outpad"] = a.b.ints(outpad, n, "outpad") if outpad is not None else (0,) * n
    args["bias"] = _bias(a)
    a.done()
    groups = args.get("groups", 1)
    if cin % groups or cout % groups:
        raise a.b.error(f"channels {cin} => {cout} are not divisible by groups={groups}", a.call.pos)
    return Layer(kind, args)


def _dense(a: _Args) -> Layer:
    a.arity(1, 3)
    if isinstance(a.args[0], _Pair):
        cin, cout = (a.b.int_(v, "Dense size") for v in a.b.pair(a.args[0], "Dense size"))
        sigma = _sigma(a, 1)
        if len(a.args) > 2:
            raise a.b.error("Dense(in => out, σ) takes no third argument", _pos(a.args[2]))
    else:  # Flux ≤ 0.12 printing: Dense(in, out, σ)
        a.arity(2, 3)
        cin, cout = a.b.int_(a.args[0], "Dense input size"), a.b.int_(a.args[1], "Dense output size")
        sigma = _sigma(a, 2)
    layer = Layer("Dense", {"in": cin, "out": cout, "σ": sigma, "bias": _bias(a)})
    a.done()
    return layer


def _fast_dense(a: _Args) -> Layer:
    """DiffEqFlux's ``FastDense(in, out, σ = identity; bias = true)`` (and ``StaticDense``): no
    arrays of its own, its parameters are ``[vec(W); b]`` of a flat vector, ``W`` ``(out, in)``
    column-major, which is a ``Dense``'s in ``Flux.destructure`` order, and it computes
    ``σ.(W*x .+ b)``. ``precache``/``numcols`` only size buffers."""
    for key in ("precache", "numcols"):
        a.pop_kw(key)
    return _dense(a)


def _bilinear(a: _Args) -> Layer:
    a.arity(1, 2)
    first, second = a.b.pair(a.args[0], "Bilinear size")
    ins = a.b.ints(first, 2, "Bilinear input sizes")
    if len(ins) != 2:
        raise a.b.error("Bilinear needs (in1, in2) => out", _pos(first))
    layer = Layer(
        "Bilinear",
        {
            "in": (ins[0], ins[1]),
            "out": a.b.int_(second, "Bilinear output size"),
            "σ": _sigma(a, 1),
            "bias": _bias(a),
        },
    )
    a.done()
    return layer


def _scale(a: _Args) -> Layer:
    sizes = [v for v in a.args if not isinstance(v, _Name)]
    size = tuple(a.b.int_(v, "Scale size") for v in sizes)
    if len(size) == 1 and isinstance(a.args[0], _Tuple):
        size = a.b.ints(a.args[0], None, "Scale size")
    sigma = a.b.activation(a.args[-1], a.name) if isinstance(a.args[-1], _Name) else "identity"
    layer = Layer("Scale", {"size": size, "σ": sigma, "bias": _bias(a)})
    a.done()
    return layer


def _embedding(a: _Args) -> Layer:
    a.arity(1, 2)
    if isinstance(a.args[0], _Pair):
        vocab, dim = (a.b.int_(v, "Embedding size") for v in a.b.pair(a.args[0], "Embedding size"))
    else:
        a.arity(2, 2)
        vocab, dim = a.b.int_(a.args[0], "Embedding size"), a.b.int_(a.args[1], "Embedding size")
    args: dict[str, Any] = {"in": vocab, "out": dim}
    pad_idx = a.pop_kw("pad_idx") or a.pop_kw("padding_idx")
    if pad_idx is not None:
        args["padding_idx"] = a.b.int_(pad_idx, "padding_idx", 1)
    a.done()
    return Layer("Embedding", args)


_NORM_DEFAULTS = {
    "BatchNorm": (True, True),
    "InstanceNorm": (False, False),
    "GroupNorm": (True, False),
}


def _norm(a: _Args) -> Layer:
    kind = a.name
    low = 2 if kind == "GroupNorm" else 1
    a.arity(low, low + 1)
    chs = a.b.int_(a.args[0], "channels")
    args: dict[str, Any] = {"channels": chs}
    if kind == "GroupNorm":
        args["groups"] = a.b.int_(a.args[1], "groups", 1)
        if chs % args["groups"]:
            raise a.b.error(f"GroupNorm channels {chs} not divisible by {args['groups']}", a.call.pos)
    args["σ"] = _sigma(a, low)
    affine, track = _NORM_DEFAULTS[kind]
    for key, default in (("affine", affine), ("track_stats", track)):
        e = a.pop_kw(key)
        args[key] = default if e is None else a.b.bool_(e, key)
    for key, number in (("ϵ", 1e-5), ("momentum", 0.1)):
        e = a.pop_kw(key) if key != "ϵ" else (a.pop_kw("ϵ") or a.pop_kw("eps"))
        args[key] = number if e is None else a.b.float_(e, key)
    a.pop_kw("active")
    a.done()
    return Layer(kind, args)


def _layernorm(a: _Args) -> Layer:
    sizes = [v for v in a.args if not isinstance(v, _Name)]
    if len(sizes) == 1 and isinstance(sizes[0], _Tuple):
        size = a.b.ints(sizes[0], None, "LayerNorm size")
    else:
        size = tuple(a.b.int_(v, "LayerNorm size") for v in sizes)
    if not size:
        raise a.b.error("LayerNorm needs a size", a.call.pos)
    sigma = a.b.activation(a.args[-1], a.name) if isinstance(a.args[-1], _Name) else "identity"
    args: dict[str, Any] = {"size": size, "σ": sigma}
    e = a.pop_kw("affine")
    args["affine"] = True if e is None else a.b.bool_(e, "affine")
    e = a.pop_kw("ϵ") or a.pop_kw("eps")
    args["ϵ"] = 1e-5 if e is None else a.b.float_(e, "ϵ")
    a.done()
    return Layer("LayerNorm", args)


def _dropout(a: _Args) -> Layer:
    a.arity(1, 1)
    p = a.b.float_(a.args[0], "p")
    if not 0 <= p <= 1:  # (Flux's own check: "Dropout expects 0 ≤ p ≤ 1")
        raise a.b.error(f"{a.name} expects 0 ≤ p ≤ 1, not {p}", _pos(a.args[0]))
    args: dict[str, Any] = {"p": p}
    if a.name == "Dropout":
        dims = a.pop_kw("dims")
        if dims is not None:  # absent = Flux's `:` (all dims)
            args["dims"] = a.b.ints(dims, None, "dims", 1)
    a.pop_kw("active")
    a.done()
    return Layer(a.name, args)


def _pool(a: _Args) -> Layer:
    a.arity(1, 1)
    k = a.b.ints(a.args[0], None, "window", 1)
    stride_e = a.pop_kw("stride")
    stride = k if stride_e is None else a.b.ints(stride_e, len(k), "stride", 1)
    pad = _pad(a.b, a.pop_kw("pad"), k, (1,) * len(k))
    a.done()
    return Layer(a.name, {"k": k, "pad": pad, "stride": stride})


def _adaptive(a: _Args) -> Layer:
    a.arity(1, 1)
    out = a.b.ints(a.args[0], None, "output size", 1)
    a.done()
    return Layer(a.name, {"out": out})


def _global(a: _Args) -> Layer:
    a.arity(0, 0)
    a.done()
    return Layer(a.name)


def _recurrent(a: _Args, kind: str | None = None, printed: bool = False) -> Layer:
    """``RNN(in => out, σ)``, ``LSTM(in => out)`` …, or Flux ≤ 0.12's ``RNN(in, out, σ)``. Without
    σ an RNN is ``tanh`` (the constructor's default), except in ``printed`` text: Flux ≤ 0.14
    prints ``Recur(RNNCell(3 => 5))`` only for ``identity`` (it names any other σ, tanh too)."""
    kind = kind or a.name
    step = kind in CELLS  # (a bare cell, RNNCell(3 => 5): one step, no return_state)
    if a.args and isinstance(a.args[0], _Pair):
        a.arity(1, 2)
        cin, cout = (a.b.int_(v, f"{kind} size") for v in a.b.pair(a.args[0], f"{kind} size"))
        rest = 1
    else:  # Flux ≤ 0.12: RNN(in, out, σ), LSTM(in, out), and their cells' printing
        a.arity(2, 3)
        cin, cout = a.b.int_(a.args[0], f"{kind} input size"), a.b.int_(a.args[1], f"{kind} output size")
        rest = 2
    args: dict[str, Any] = {"in": cin, "out": cout}
    if wrapped_kind(kind) == "RNN":
        args["σ"] = _sigma(a, rest) if len(a.args) > rest else ("identity" if printed else "tanh")
    elif len(a.args) > rest:
        raise a.b.error(f"{kind} takes no activation", _pos(a.args[rest]))
    for key in ("bias",) if step else ("return_state", "bias"):
        e = a.pop_kw(key)
        if e is not None:
            args[key] = a.b.bool_(e, key)
    a.done()
    return Layer(kind, args)


def _wrapped_cell(a: _Args, wrapper: str, printed: bool = False) -> Layer:
    """The recurrent layer of the one cell ``wrapper`` (``Recur``, ``Recurrence``) wraps."""
    if len(a.args) != 1 or not isinstance(a.args[0], _Call) or not _strip(a.args[0].func).endswith("Cell"):
        raise a.b.error(f"{wrapper} must wrap one RNNCell, LSTMCell, GRUCell or GRUv3Cell", a.call.pos)
    cell = a.args[0]
    kind = _strip(cell.func)[: -len("Cell")]
    if kind not in RECURRENT_GATES:
        raise a.b.error(f"unknown recurrent cell {cell.func!r}", cell.pos)
    return _recurrent(_Args(a.b, cell), kind, printed)


def _recur(a: _Args) -> Layer:
    """Flux ≤ 0.14 prints ``LSTM(3 => 5)`` as ``Recur(LSTMCell(3 => 5))`` (≤ 0.12: ``(3, 5)``), an
    RNN's σ only when it is not ``identity``: a printed form, read as printed."""
    layer = _wrapped_cell(a, "Recur", printed=True)
    return Layer(layer.kind, {**layer.args, "recur": True})


def _recurrence(a: _Args) -> Layer:
    """Flux ≥ 0.16's ``Recurrence(LSTMCell(3 => 5); return_state=…)``: the cell scanned over the
    sequence, what ``LSTM(3 => 5)`` is (the same state, ``(cell = …,)``)."""
    layer = _wrapped_cell(a, "Recurrence")
    e = a.pop_kw("return_state")
    a.done()
    if e is None:
        return layer
    return Layer(layer.kind, {**layer.args, "return_state": a.b.bool_(e, "return_state")})


def _mha(a: _Args) -> Layer:
    a.arity(1, 1)
    dims = a.args[0]
    if isinstance(dims, _Number):
        e = a.b.int_(dims, "dims")
        q_in = k_in = v_in = qk = v = out = e
    else:  # (q_in, k_in, v_in) => (qk_dim, v_dim) => out_dim, or in => qk_v => out forms
        ins, rest = a.b.pair(dims, "dims")
        mid, out_e = a.b.pair(rest, "dims")
        q_in, k_in, v_in = a.b.ints(ins, 3, "input dims")
        qk, v = a.b.ints(mid, 2, "qk and v dims")
        out = a.b.int_(out_e, "output dim")
    nheads_e = a.pop_kw("nheads")
    nheads = 8 if nheads_e is None else a.b.int_(nheads_e, "nheads", 1)
    bias_e = a.pop_kw("bias")
    dropout_e = a.pop_kw("dropout_prob")
    a.done()
    if qk % nheads or v % nheads:
        raise a.b.error(f"dims not divisible by nheads={nheads}", a.call.pos)
    return Layer(
        "MultiHeadAttention",
        {
            "q_in": q_in, "k_in": k_in, "v_in": v_in, "qk_dim": qk, "v_dim": v, "out": out,
            "nheads": nheads,
            "bias": False if bias_e is None else a.b.bool_(bias_e, "bias"),
            "dropout_prob": 0.0 if dropout_e is None else a.b.float_(dropout_e, "dropout_prob"),
        },
    )  # fmt: skip


def _children(
    a: _Args, items: list[Any], kwargs: dict[str, Any]
) -> tuple[tuple[Layer, ...], tuple[str, ...] | None]:
    if items and kwargs:
        raise a.b.error(f"{a.name} mixes positional and named layers", a.call.pos)
    if kwargs:
        names = tuple(kwargs)
        layers = tuple(a.b.layer(v) for v in kwargs.values())
        kwargs.clear()
        return layers, names
    return tuple(a.b.layer(v) for v in items), None


def _chain(a: _Args) -> Layer:
    items = list(a.args)
    if len(items) == 1 and isinstance(items[0], _Tuple) and not a.kwargs:  # Chain([...]) / Chain((...))
        items = list(items[0].items)
    layers, names = _children(a, items, a.kwargs)
    return Layer("Chain", children=layers, names=names)


def _parallel(a: _Args) -> Layer:
    if not a.args:
        raise a.b.error(f"{a.name} needs a connection", a.call.pos)
    connection = a.b.connection(a.args[0])
    layers, names = _children(a, a.args[1:], a.kwargs)
    if not layers:
        raise a.b.error(f"{a.name} needs at least one layer", a.call.pos)
    return Layer(a.name, {"connection": connection}, layers, names)


def _skip(a: _Args) -> Layer:
    a.arity(2, 2)
    a.done()
    return Layer("SkipConnection", {"connection": a.b.connection(a.args[1])}, (a.b.layer(a.args[0]),))


def _maxout(a: _Args) -> Layer:
    a.done()
    if not a.args or any(isinstance(v, _Lambda) for v in a.args):
        raise a.b.error(
            "Maxout must list its layers (the `Maxout(() -> layer, n)` form is not portable)", a.call.pos
        )
    return Layer("Maxout", children=tuple(a.b.layer(v) for v in a.args))


_CONSTRUCTORS: dict[str, Callable[[_Builder, _Args], Layer]] = {
    "Chain": lambda b, a: _chain(a),
    "Parallel": lambda b, a: _parallel(a),
    "PairwiseFusion": lambda b, a: _parallel(a),
    "SkipConnection": lambda b, a: _skip(a),
    "Maxout": lambda b, a: _maxout(a),
    "Dense": lambda b, a: _dense(a),
    # (DiffEqFlux ≤ 1's FastChain of FastDense: a flat vector's layout is that of a Chain of Dense)
    "FastChain": lambda b, a: _chain(a),
    "FastDense": lambda b, a: _fast_dense(a),
    "StaticDense": lambda b, a: _fast_dense(a),
    "Bilinear": lambda b, a: _bilinear(a),
    "Scale": lambda b, a: _scale(a),
    "Embedding": lambda b, a: _embedding(a),
    "Conv": lambda b, a: _conv(a),
    "CrossCor": lambda b, a: _conv(a),
    "ConvTranspose": lambda b, a: _conv(a),
    "DepthwiseConv": lambda b, a: _conv(a),
    "BatchNorm": lambda b, a: _norm(a),
    "InstanceNorm": lambda b, a: _norm(a),
    "GroupNorm": lambda b, a: _norm(a),
    "LayerNorm": lambda b, a: _layernorm(a),
    "Dropout": lambda b, a: _dropout(a),
    "AlphaDropout": lambda b, a: _dropout(a),
    "MaxPool": lambda b, a: _pool(a),
    "MeanPool": lambda b, a: _pool(a),
    "AdaptiveMaxPool": lambda b, a: _adaptive(a),
    "AdaptiveMeanPool": lambda b, a: _adaptive(a),
    "GlobalMaxPool": lambda b, a: _global(a),
    "GlobalMeanPool": lambda b, a: _global(a),
    **{kind: lambda b, a: _recurrent(a) for kind in (*RECURRENT_GATES, *CELLS)},
    "Recur": lambda b, a: _recur(a),
    "Recurrence": lambda b, a: _recurrence(a),
    "MultiHeadAttention": lambda b, a: _mha(a),
}


def parse_architecture(text: str) -> Layer:
    """Parse a Flux model as Flux prints it into a :class:`~._spec.Layer` tree (never evaluated).

    Hyper-parameters are filled in explicitly with Flux's defaults (``stride``, ``pad`` in its 2N
    form, ``dilation``, ``groups``, ``bias``, ``ϵ`` …), so consumers need no defaults of their own.

    Raises:
        ConversionError: an unknown layer or function, an anonymous function, or text that is not
            a Flux model; the message names it and gives its line and column.

    Example:
        >>> text = "Chain(Conv((5, 5), 1 => 6, relu, pad=SamePad()), MaxPool((2, 2)), Flux.flatten)"
        >>> net = parse_architecture(text)
        >>> net.kinds()
        ['Chain', 'Conv', 'MaxPool', 'flatten']
        >>> net.children[0].args["pad"], net.children[1].args["stride"]
        ((2, 2, 2, 2), (2, 2))

    A trailing ``|> f16`` / ``|> f32`` / ``|> f64`` (as ``flux_julia`` writes for a Float16 or
    Float64 model) is accepted and ignored: the arrays' type comes from the file.
    """
    # (spaces in place of the suffix: the positions errors give stay those of the text)
    text = _PRECISION_SUFFIX.sub(lambda m: " " * len(m.group(0)), text)
    builder = _Builder(text)
    return builder.layer(_Parser(text).parse())


_PRECISION_SUFFIX = re.compile(r"\|>\s*(?:Flux\.)?f(?:16|32|64)\s*$")

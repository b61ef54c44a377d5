"""The architecture parser: Flux's printed models -> Layer trees, never evaluated."""

from __future__ import annotations

import random
import re
from typing import Any

import pytest

from treexchange import ConversionError
from treexchange._port._arch import parse_architecture
from treexchange._port._registry import RULES, julia_constructor, with_defaults
from treexchange._port._spec import Layer

LENET = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)

# What Flux 0.14's `show` prints for the same model (multi-line, comments, trailing commas).
LENET_PRINTED = """Chain(
  Conv((5, 5), 1 => 6, relu),           # 156 parameters
  MaxPool((2, 2)),
  Conv((5, 5), 6 => 16, relu),          # 2_416 parameters
  MaxPool((2, 2)),
  Flux.flatten,
  Dense(256 => 120, relu),              # 30_840 parameters
  Dense(120 => 84, relu),               # 10_164 parameters
  Dense(84 => 10),                      # 850 parameters
)                   # Total: 10 arrays, 44_426 parameters, 174.867 KiB.
"""


def _conv(kernel: tuple[int, ...], cin: int, cout: int, sigma: str = "identity", **kw: Any) -> Layer:
    n = len(kernel)
    args = {
        "kernel": kernel, "in": cin, "out": cout, "σ": sigma, "stride": (1,) * n, "pad": (0,) * (2 * n),
        "dilation": (1,) * n, "groups": 1, "bias": True,
    }  # fmt: skip
    args.update(kw)
    return Layer("Conv", args)


def _dense(cin: int, cout: int, sigma: str = "identity", bias: bool = True) -> Layer:
    return Layer("Dense", {"in": cin, "out": cout, "σ": sigma, "bias": bias})


def test_lenet_text_gives_the_full_tree() -> None:
    pool = Layer("MaxPool", {"k": (2, 2), "pad": (0, 0, 0, 0), "stride": (2, 2)})
    expected = Layer(
        "Chain",
        children=(
            _conv((5, 5), 1, 6, "relu"),
            pool,
            _conv((5, 5), 6, 16, "relu"),
            pool,
            Layer("flatten"),
            _dense(256, 120, "relu"),
            _dense(120, 84, "relu"),
            _dense(84, 10),
        ),
    )
    assert parse_architecture(LENET) == expected
    assert parse_architecture(LENET_PRINTED) == expected


@pytest.mark.parametrize(
    ("text", "args"),
    [
        ("Conv((3, 3), 2 => 4, stride=2)", {"stride": (2, 2)}),
        ("Conv((3, 3), 2 => 4; stride=(1, 2))", {"stride": (1, 2)}),
        ("Conv((3, 3), 2 => 4, pad=1)", {"pad": (1, 1, 1, 1)}),
        ("Conv((3, 3), 2 => 4, pad=(1, 2))", {"pad": (1, 1, 2, 2)}),  # N-tuple: symmetric per dim
        ("Conv((3, 3), 2 => 4, pad=(1, 0, 2, 3))", {"pad": (1, 0, 2, 3)}),
        ("Conv((3,), 2 => 4, pad=(1, 2))", {"kernel": (3,), "pad": (1, 2)}),  # 1-D: a 2-tuple is already 2N
        ("Conv((3, 3), 2 => 4, pad=SamePad())", {"pad": (1, 1, 1, 1)}),
        ("Conv((4, 5), 2 => 4, pad=SamePad())", {"kernel": (4, 5), "pad": (2, 1, 2, 2)}),  # larger half first
        (
            "Conv((4, 3), 2 => 4, pad=SamePad(), dilation=2)",
            {"kernel": (4, 3), "pad": (3, 3, 2, 2), "dilation": (2, 2)},
        ),
        ("Conv((3, 3), 2 => 4, stride=2, pad=SamePad())", {"pad": (1, 1, 1, 1), "stride": (2, 2)}),
        ("Conv((3, 3), 2 => 4, bias=false)", {"bias": False}),
        ("Conv((3, 3), 2 => 4, groups=2)", {"groups": 2}),
        ("Conv((3, 3), 2 => 4, relu; init=Flux.glorot_uniform)", {"σ": "relu"}),
        ("Conv((3, 3), 2 => 4, init=kaiming_normal(gain=2), σ)", {"σ": "sigmoid"}),  # (valid Julia)
        ("Conv((3, 3), 2 => 4; init=kaiming_normal(gain=2), σ)", None),  # positional after the `;`
        ("Flux.Conv((3, 3), 2 => 4, NNlib.σ)", {"σ": "sigmoid"}),
    ],
)
def test_conv_keywords(text: str, args: dict[str, Any] | None) -> None:
    if args is None:
        with pytest.raises(ConversionError, match="positional argument after the ';'"):
            parse_architecture(text)
        return
    kernel = args.pop("kernel", (3, 3))
    assert parse_architecture(text) == _conv(kernel, 2, 4, **args)


def _flux_pad_field(printed: str, spatial: int) -> tuple[int, ...]:
    """The ``pad`` field Flux builds from a printed constructor: ``calc_padding`` is
    ``expand(Val(2N), pad)``, which repeats an integer 2N times and keeps a tuple as given."""
    match = re.search(r"pad=(\([^)]*\)|\d+)", printed)
    if match is None:
        return (0,) * (2 * spatial)
    text = match.group(1)
    if text.startswith("("):
        return tuple(int(v) for v in text.strip("()").split(",") if v.strip())
    return (int(text),) * (2 * spatial)


@pytest.mark.parametrize(
    "text",
    [
        "Conv((3, 3), 2 => 4, pad=(1, 2))",  # symmetric per dim, differing between dims
        "Conv((3, 3, 3), 2 => 4, pad=(0, 1, 2))",
        "Conv((3, 3), 2 => 4, pad=(1, 0, 2, 3))",
        "Conv((3, 3), 2 => 4, pad=1)",
        "Conv((4, 5), 2 => 4, pad=SamePad())",
        "Conv((3,), 2 => 4, pad=(1, 2))",
        "ConvTranspose((3, 3), 2 => 4, pad=(2, 1))",
        "MaxPool((2, 2), pad=(1, 0))",
        "MeanPool((3, 3), pad=(1, 1, 0, 0), stride=1)",
    ],
)
def test_printed_pad_round_trips_and_builds_the_states_pad(text: str) -> None:
    """The printed constructor parses back to the same layer, and the ``pad`` Flux builds from it
    has the entries of the state's ``pad`` (a 2-tuple for a 2-D kernel would be kept as 2 entries
    by Flux while the state has 4, and ``Flux.loadmodel!`` would refuse it)."""
    layer = parse_architecture(text)
    printed = julia_constructor(layer)
    assert parse_architecture(printed) == layer, printed
    state_pad = dict(RULES[layer.kind].fields(with_defaults(layer), "0.15"))["pad"]
    spatial = len(layer.args["kernel" if "kernel" in layer.args else "k"])
    assert _flux_pad_field(printed, spatial) == tuple(int(v) for v in state_pad), printed


def test_conv_variants() -> None:
    ct = parse_architecture("ConvTranspose((4, 4), 16 => 1, sigmoid, stride=2, pad=1)")
    assert ct.kind == "ConvTranspose" and ct.arg("outpad") == (0, 0) and ct.arg("pad") == (1, 1, 1, 1)
    cc = parse_architecture("CrossCor((2,), 3 => 5, dilation=3)")
    assert cc.kind == "CrossCor" and cc.arg("groups") == 1 and cc.arg("dilation") == (3,)
    dw = parse_architecture("DepthwiseConv((3, 3, 3), 4 => 8)")
    assert dw.kind == "DepthwiseConv" and dw.arg("groups") == 4 and dw.arg("pad") == (0,) * 6
    with pytest.raises(ConversionError, match="CrossCor has no groups"):
        parse_architecture("CrossCor((2,), 4 => 4, groups=2)")
    with pytest.raises(ConversionError, match="not divisible by groups=3"):
        parse_architecture("Conv((2,), 4 => 6, groups=3)")
    with pytest.raises(ConversionError, match="pad must have 2 or 4 entries"):
        parse_architecture("Conv((2, 2), 4 => 6, pad=(1, 2, 3))")


def test_other_layers() -> None:
    assert parse_architecture("Dense(784, 32, relu)") == _dense(784, 32, "relu")  # Flux ≤ 0.12 form
    assert parse_architecture("Dense(2 => 3; bias=false)") == _dense(2, 3, bias=False)
    bn = parse_architecture("BatchNorm(16, relu)")
    assert bn == Layer(
        "BatchNorm",
        {"channels": 16, "σ": "relu", "affine": True, "track_stats": True, "ϵ": 1e-5, "momentum": 0.1},
    )
    assert parse_architecture("InstanceNorm(3)").args["affine"] is False
    gn = parse_architecture("GroupNorm(32, 4, ϵ=1.0f-3)")
    assert gn.arg("groups") == 4 and gn.arg("ϵ") == pytest.approx(1e-3) and gn.arg("track_stats") is False
    assert parse_architecture("LayerNorm(10)") == Layer(
        "LayerNorm", {"size": (10,), "σ": "identity", "affine": True, "ϵ": 1e-5}
    )
    assert parse_architecture("LayerNorm((3, 4), relu, affine=false)").args["size"] == (3, 4)
    assert parse_architecture("Embedding(100 => 8)") == Layer("Embedding", {"in": 100, "out": 8})
    assert parse_architecture("LSTM(3 => 5)") == Layer("LSTM", {"in": 3, "out": 5})
    assert parse_architecture("Recur(LSTMCell(3 => 5))") == Layer("LSTM", {"in": 3, "out": 5, "recur": True})
    assert parse_architecture("RNN(2 => 4, relu)").args["σ"] == "relu"
    assert parse_architecture("GRUv3(2 => 4)").args == {"in": 2, "out": 4}
    mha = parse_architecture("MultiHeadAttention(64, nheads=8)")
    assert mha.args["nheads"] == 8 and mha.args["qk_dim"] == 64 and mha.args["bias"] is False
    mha2 = parse_architecture("MultiHeadAttention((4, 5, 6) => (8, 12) => 10; nheads=2, bias=true)")
    assert [mha2.args[k] for k in ("q_in", "k_in", "v_in", "qk_dim", "v_dim", "out")] == [4, 5, 6, 8, 12, 10]
    assert parse_architecture("Dropout(0.5)") == Layer("Dropout", {"p": 0.5})
    assert parse_architecture("AlphaDropout(0.1)").args == {"p": 0.1}
    assert parse_architecture("MeanPool((2, 2), pad=1, stride=1)").args == {
        "k": (2, 2),
        "pad": (1, 1, 1, 1),
        "stride": (1, 1),
    }
    assert parse_architecture("AdaptiveMaxPool((4, 4))") == Layer("AdaptiveMaxPool", {"out": (4, 4)})
    assert parse_architecture("GlobalMeanPool()") == Layer("GlobalMeanPool")
    assert parse_architecture("Bilinear((3, 4) => 2)").args["in"] == (3, 4)
    assert parse_architecture("Scale(3, tanh)").args == {"size": (3,), "σ": "tanh", "bias": True}


def test_containers() -> None:
    named = parse_architecture("Chain(enc = Chain(Dense(4 => 2, relu)), dec = Dense(2 => 4),)")
    assert named.names == ("enc", "dec") and named.kinds() == ["Chain", "Chain", "Dense", "Dense"]
    skip = parse_architecture("SkipConnection(Chain(Dense(2 => 2), relu), +)")
    assert skip.args == {"connection": "+"} and skip.kinds() == [
        "SkipConnection",
        "Chain",
        "Dense",
        "function",
    ]
    par = parse_architecture("Parallel(vcat, Dense(2 => 3), Dense(2 => 3, tanh))")
    assert par.args == {"connection": "vcat"} and len(par.children) == 2
    assert parse_architecture("Parallel(+, a = Dense(2 => 2), b = Dense(2 => 2))").names == ("a", "b")
    assert parse_architecture("PairwiseFusion(+, Dense(2 => 2), Dense(2 => 2))").kind == "PairwiseFusion"
    assert parse_architecture("Maxout(Dense(2 => 3), Dense(2 => 3))").kinds() == ["Maxout", "Dense", "Dense"]
    assert parse_architecture("Chain([Dense(2 => 2), softmax])").kinds() == ["Chain", "Dense", "function"]
    fn = parse_architecture("Chain(NNlib.softmax, σ, logσ, identity)")
    assert [c.args["name"] for c in fn.children] == ["softmax", "sigmoid", "logsigmoid", "identity"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("Chain(Dense(2 => 3), x -> x .^ 2)", "anonymous function .* line 1, column 22"),
        ("Chain(Dense(2 => 3), (x, y) -> x)", "anonymous function .* line 1, column 22"),
        ('Chain(var"#12#13"())', "anonymous function"),
        # how Flux prints a layer with a closure (lucpaoli/SAFT_ML's `Dense(…, x -> x)`): `#13`
        # was read as a comment, the rest of the line lost ("unexpected the end of the text")
        ("Chain(Dense(8 => 3, #13))", r"anonymous function \(activations must .* line 1, column 21"),
        ("Chain(\n  Dense(8 => 3, #13),  # 27 parameters\n)", "anonymous function .* line 2, column 17"),
        ("Chain(Dense(2 => 3), #5#6)", "anonymous function .* line 1, column 22"),
        ("Parallel(#7, Dense(2 => 3))", "anonymous function as a connection at line 1, column 10"),
        ("Chain(Dense(2 => 3),", "the text ends where a value was expected"),
        ("Chain(\n  Dense(2 => 3),\n  #5,\n)", "anonymous function .* line 3, column 3"),
        (
            "Parallel(cat, Dense(2 => 3))",
            r"unknown connection function 'cat' \(the port applies \+, .*tuple\)",
        ),
        ("Chain(\n  Dense(2 => 3),\n  Foo(3),\n)", "unknown layer 'Foo' at line 3, column 3"),
        ("Chain(Dense(2 => 3, mystery))", "unknown activation function 'mystery' at line 1, column 21"),
        ("Chain(Dense(2 => 3), mystery)", "unknown function 'mystery' at line 1, column 22"),
        ("Chain(Dense(2 => 3)", "expected ',' or '\\)' but found the end of the text"),
        ("Chain(Dense(2 => 3)))", "unexpected '\\)' after the model"),
        ("Chain(Dense)", "layer Dense without its arguments"),
        ("Parallel(myjoin, Dense(2 => 3))", "unknown connection function 'myjoin'"),
        ("SkipConnection(Dense(2 => 2), (a, b) -> a + b)", "anonymous function as a connection"),
        ("Dense(2 => 3, relu, tanh)", "takes no third argument"),
        ("Conv((3, 3), 2 => 4, padding=1)", "unknown keyword 'padding' for Conv"),
        ("Chain(Dense(2 => 3)) ∘ relu", "unexpected character"),
        ("Maxout(() -> Dense(2 => 3), 4)", "Maxout must list its layers"),
        ("Recur(Dense(2 => 3))", "Recur must wrap"),
        ("Dense(2.5 => 3)", "must be an integer"),
    ],
)
def test_errors_name_the_culprit_and_its_position(text: str, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        parse_architecture(text)


def test_nothing_is_evaluated() -> None:
    """Text that would run code in Julia or Python is only ever a parse error."""
    for text in ("run(`rm -rf /`)", "__import__('os').system('true')", "Chain(eval(:(Dense(2 => 3))))"):
        with pytest.raises(ConversionError):
            parse_architecture(text)


# --- round trips: a Layer printed the way Flux prints it parses back to the same Layer ---------


def _tuple(t: tuple[int, ...]) -> str:
    return f"({t[0]},)" if len(t) == 1 else "(" + ", ".join(map(str, t)) + ")"


def _print(layer: Layer) -> str:
    """A minimal Flux printer for the round-trip property (portcore's flux_julia is the real one)."""
    a = layer.args
    if layer.kind == "Chain":
        parts = [_print(c) for c in layer.children]
        if layer.names:
            parts = [f"{n} = {p}" for n, p in zip(layer.names, parts, strict=True)]
        return "Chain(\n  " + ",\n  ".join(parts) + ",  # 12 parameters\n)"
    if layer.kind in ("Conv", "ConvTranspose", "CrossCor"):
        kw = f"stride={_tuple(a['stride'])}, pad={_tuple(a['pad'])}, dilation={_tuple(a['dilation'])}"
        if layer.kind != "CrossCor":
            kw += f", groups={a['groups']}"
        head = f"{layer.kind}({_tuple(a['kernel'])}, {a['in']} => {a['out']}, {a['σ']}"
        return f"{head}; {kw}, bias={str(a['bias']).lower()})"
    if layer.kind == "Dense":
        return f"Dense({a['in']} => {a['out']}, {a['σ']}; bias={str(a['bias']).lower()})"
    if layer.kind in ("MaxPool", "MeanPool"):
        return f"{layer.kind}({_tuple(a['k'])}, pad={_tuple(a['pad'])}, stride={_tuple(a['stride'])})"
    if layer.kind == "BatchNorm":
        flags = f"affine={str(a['affine']).lower()}, track_stats={str(a['track_stats']).lower()}"
        return f"BatchNorm({a['channels']}, {a['σ']}, {flags}, ϵ={a['ϵ']!r}, momentum={a['momentum']!r})"
    if layer.kind == "function":
        return str(a["name"])
    return layer.kind


def _random_layer(rng: random.Random, depth: int = 0) -> Layer:
    choice = rng.choice(
        ["Conv", "Dense", "pool", "BatchNorm", "function", "flatten"] + (["Chain"] if depth < 2 else [])
    )
    sigma = rng.choice(["identity", "relu", "sigmoid", "tanh", "elu", "softplus"])
    if choice == "Conv":
        n = rng.randint(1, 3)
        kind = rng.choice(["Conv", "ConvTranspose", "CrossCor"])
        groups = rng.choice([1, 2]) if kind != "CrossCor" else 1
        args: dict[str, Any] = {
            "kernel": tuple(rng.randint(1, 5) for _ in range(n)), "in": 2 * rng.randint(1, 4),
            "out": 2 * rng.randint(1, 4), "σ": sigma, "stride": tuple(rng.randint(1, 3) for _ in range(n)),
            "pad": tuple(rng.randint(0, 3) for _ in range(2 * n)),
            "dilation": tuple(rng.randint(1, 3) for _ in range(n)),
        }  # fmt: skip
        args["groups"] = groups
        if kind == "ConvTranspose":
            args["outpad"] = (0,) * n
        args["bias"] = rng.random() < 0.5
        return Layer(kind, args)
    if choice == "Dense":
        return _dense(rng.randint(1, 300), rng.randint(1, 300), sigma, rng.random() < 0.7)
    if choice == "pool":
        n = rng.randint(1, 3)
        return Layer(
            rng.choice(["MaxPool", "MeanPool"]),
            {
                "k": tuple(rng.randint(1, 4) for _ in range(n)),
                "pad": tuple(rng.randint(0, 2) for _ in range(2 * n)),
                "stride": tuple(rng.randint(1, 4) for _ in range(n)),
            },
        )
    if choice == "BatchNorm":
        flags = {"affine": rng.random() < 0.5, "track_stats": rng.random() < 0.5}
        numbers = {"ϵ": rng.choice([1e-5, 1e-3, 0.01]), "momentum": rng.choice([0.1, 0.01])}
        return Layer("BatchNorm", {"channels": rng.randint(1, 64), "σ": sigma, **flags, **numbers})
    if choice == "function":
        return Layer("function", {"name": rng.choice(["relu", "softmax", "sigmoid", "logsoftmax"])})
    if choice == "flatten":
        return Layer("flatten")
    children = tuple(_random_layer(rng, depth + 1) for _ in range(rng.randint(1, 4)))
    names = tuple(f"l{i}" for i in range(len(children))) if rng.random() < 0.3 else None
    return Layer("Chain", children=children, names=names)


@pytest.mark.parametrize("seed", range(40))
def test_printed_layers_round_trip(seed: int) -> None:
    rng = random.Random(seed)
    layer = Layer("Chain", children=tuple(_random_layer(rng) for _ in range(rng.randint(1, 5))))
    assert parse_architecture(_print(layer)) == layer


def test_comments_that_begin_with_a_digit_stay_comments() -> None:
    """Only a `#13` where a value stands (before `,` or `)`, as Flux prints a closure) is a
    closure; a comment numbering the layers is a comment (a review's find)."""
    text = "Chain(\n  Dense(2 => 3),  #1 layer\n  Dense(3 => 1),  #2\n)  #3"
    assert parse_architecture(text).kinds() == ["Chain", "Dense", "Dense"]


def test_a_precision_suffix_is_accepted_and_ignored() -> None:
    """``flux_julia`` writes ``Chain(…) |> f16`` for a Float16 model, which ``from_flux`` refused
    ("unexpected '|'"): the suffix is accepted (the arrays' type comes from the file); others not."""
    plain = parse_architecture("Chain(Dense(3 => 2))")
    for suffix in (" |> f16", "|>f32", " |> Flux.f64\n"):
        assert parse_architecture("Chain(Dense(3 => 2))" + suffix) == plain
    with pytest.raises(ConversionError, match="column 22"):
        parse_architecture("Chain(Dense(3 => 2)) |> gpu")


def test_old_recurrent_forms_and_code_initialisers() -> None:
    """Flux ≤ 0.12 writes and prints recurrent layers with positional sizes (``LSTM(3, 5)``,
    ``Recur(LSTMCell(3, 5))``); Flux ≤ 0.14 prints an RNN's σ only when it is not ``identity``,
    so a printed ``Recur(RNNCell(3 => 5))`` is ``identity`` while the constructor ``RNN(3 => 5)``
    is ``tanh``. Code names initialisers (``initW``, ``initβ``, ``init_kernel``, …) that a printed
    model does not: ignored, as ``init`` was (each was "unknown keyword")."""
    rnn = {"in": 3, "out": 5}
    assert parse_architecture("LSTM(3, 5)") == Layer("LSTM", rnn)
    assert parse_architecture("RNN(3, 5)") == Layer("RNN", {**rnn, "σ": "tanh"})
    assert parse_architecture("RNN(3, 5, relu)") == Layer("RNN", {**rnn, "σ": "relu"})
    assert parse_architecture("Recur(GRUCell(3, 5))") == Layer("GRU", {**rnn, "recur": True})
    for printed in ("Recur(RNNCell(3, 5))", "Recur(RNNCell(3 => 5))"):
        assert parse_architecture(printed).args["σ"] == "identity"
    assert parse_architecture("Recur(RNNCell(3 => 5, tanh))").args["σ"] == "tanh"
    assert parse_architecture("Recurrence(RNNCell(3 => 5, tanh))").args["σ"] == "tanh"
    assert parse_architecture("RNN(3 => 5)").args["σ"] == "tanh"
    code = (
        "Chain(Dense(4, 3, relu; initW=Flux.glorot_normal, initb=zeros), BatchNorm(3; initβ=zeros32, "
        "initγ=ones32), LSTM(3 => 5; init_kernel=glorot_uniform, init_recurrent_kernel=glorot_uniform), "
        "RNN(5, 5; init=glorot_uniform, initb=zeros32, init_state=zeros32), Dropout(0.1; rng=rng))"
    )
    assert parse_architecture(code).kinds() == ["Chain", "Dense", "BatchNorm", "LSTM", "RNN", "Dropout"]
    with pytest.raises(ConversionError, match="LSTM takes no activation"):
        parse_architecture("LSTM(3, 5, tanh)")


def test_code_spellings_of_layers_and_sizes() -> None:
    """Code as written: integer arithmetic between numbers folded (``28^2``, ``16 * 4 * 4``), keywords
    before positional arguments (Julia allows it before a ``;``), anonymous functions that only
    spell a known function (the reshape flatten, ``x -> relu.(x)``), and a whole-array function
    as a layer's σ refused as Julia would fail it."""
    assert parse_architecture("Dense(28^2, 32)").args["in"] == 784
    assert parse_architecture("Dense(16 * 4 * 4 => 2 + 3 * 4)").args == {
        "in": 256, "out": 14, "σ": "identity", "bias": True
    }  # fmt: skip
    assert parse_architecture("Dense((2 + 3) * 4 - 10 ÷ 3, 1)").args["in"] == 17
    assert parse_architecture("Dense(-2^2 + 8, 1)").args["in"] == 4  # (Julia's -2^2 is -(2^2))
    assert parse_architecture("Conv((3, 3), 1=>16, pad=(1,1), relu)") == parse_architecture(
        "Conv((3, 3), 1 => 16, relu; pad=1)"
    )
    for flat in ("x -> reshape(x, :, size(x, 4))", "x -> reshape(x, :, size(x)[end])", "z -> flatten(z)"):
        assert parse_architecture(f"Chain({flat}, Dense(2, 3))").kinds() == ["Chain", "flatten", "Dense"]
    relu = parse_architecture("Chain(Dense(2, 3), x -> relu.(x))").children[1]
    assert relu == Layer("function", {"name": "relu"})
    assert parse_architecture("Dense(2, 3, x -> σ.(x))").args["σ"] == "sigmoid"
    # Base's math functions of every real number (a SIREN's sin) are functions too; sqrt is not
    # (Julia's DomainError for a negative number, JAX's NaN)
    assert parse_architecture("Chain(Dense(2, 3), x -> sin.(x))").children[1] == Layer(
        "function", {"name": "sin"}
    )
    assert parse_architecture("Dense(2 => 64, sin)").args["σ"] == "sin"
    with pytest.raises(ConversionError, match="anonymous function"):
        parse_architecture("Chain(Dense(2, 3), x -> sqrt.(x))")
    for bad, message in (
        ("Chain(x -> reshape(x, :, size(y, 4)), Dense(2, 3))", "anonymous function"),
        ("Chain(x -> x .^ 2, Dense(2, 3))", "anonymous function"),
        ("Dense(9^99999, 1)", "out of range"),
        ("Dropout((-8.0)^0.5)", "has no real value"),  # (complex in Python: was a TypeError)
        ("Dense(0.0^-1, 2)", "has no value for a size"),  # (was a ZeroDivisionError)
        ("Dense(3 * relu, 1)", "must join two numbers"),
        ("Dense(3 => 2; bias=false, relu)", "after the ';'"),
        ("Dense(3, 4, softmax)", "softmax takes an array"),
        ("Conv((3, 3), 1 => 2, logsoftmax)", "write it after the layer"),
    ):
        with pytest.raises(ConversionError, match=message):
            parse_architecture(bad)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # Python's ZeroDivisionError came out of these (a group or head count of 0 divides)
        ("Conv((3, 3), 2 => 4, groups=0)", "groups must be a positive integer, not 0"),
        ("GroupNorm(4, 0)", "groups must be a positive integer, not 0"),
        ("MultiHeadAttention(64, nheads=0)", "nheads must be a positive integer, not 0"),
        # and these parsed, to fail later or port a layer Flux cannot make
        ("Dense(-2, 1)", "Dense input size must be an integer ≥ 0, not -2"),
        ("Dense(2 => -1)", "Dense size must be an integer ≥ 0, not -1"),
        ("Conv((3, 3), 2 => 4, stride=0)", "stride must be a positive integer, not 0"),
        ("Conv((3, 3), 2 => 4, dilation=(1, 0))", "dilation must be a positive integer, not 0"),
        ("MaxPool((0, 2))", "window must be a positive integer, not 0"),
        ("MeanPool((2, 2), stride=0)", "stride must be a positive integer, not 0"),
        ("AdaptiveMaxPool((0, 3))", "output size must be a positive integer, not 0"),
        ("Embedding(10 => 3, pad_idx=0)", "padding_idx must be a positive integer, not 0"),
        ("Dropout(1.5)", "Dropout expects 0 ≤ p ≤ 1, not 1.5"),
        ("AlphaDropout(-0.1)", "AlphaDropout expects 0 ≤ p ≤ 1, not -0.1"),
    ],
)
def test_sizes_and_counts_out_of_range_are_refused_where_written(text: str, message: str) -> None:
    with pytest.raises(ConversionError, match=re.escape(message) + r" at line 1, column \d+"):
        parse_architecture(text)


def test_zero_sizes_and_negative_padding_still_parse() -> None:
    # Julia builds a Dense(0 => 3) (empty arrays: the port refuses it by name, with its shapes)
    # and a Conv with negative padding (a crop)
    assert parse_architecture("Dense(0 => 3)").args["in"] == 0
    assert parse_architecture("Conv((3, 3), 2 => 4, pad=-1)").args["pad"] == (-1, -1, -1, -1)

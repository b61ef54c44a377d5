"""The numpy Flux/NNlib reference reproduces NNlib's own known answers, and is self-consistent.

Known answers: ``conv_answer_dict`` in FluxML/NNlib.jl ``test/conv.jl`` (x = reshape(1:prod(size(dx)),
size(dx)), w = reshape(1:prod(size(dw)), size(dw)), one channel, one sample). Julia matrix literals
``[a b; c d]`` are written row by row, so ``np.array([[a, b], [c, d]])`` is the Julia-shaped array.
PyTorch serves as a second, independent implementation (cross-correlation, channels-first).
"""

from __future__ import annotations

import _flux_reference as ref
import numpy as np
import pytest
import torch

from treexchange import NamedTuple
from treexchange._port._spec import Layer

ANSWERS = {
    1: {
        "y_pad": np.array([1, 4, 7, 10, 13, 10.0]),
        "y_dil": np.array([5, 8, 11.0]),
        "y_flip": np.array([5, 8, 11, 14.0]),
        "dx": np.array([8, 18, 27, 36, 13.0]),
        "dx_stride": np.array([8, 4, 20, 10, 0.0]),
        "dx_pad": np.array([9, 18, 27, 36, 33.0]),
        "dx_dil": np.array([10, 16, 27, 8, 11.0]),
        "dx_flip": np.array([5, 18, 27, 36, 28.0]),
        "dw_shape": (2,),
    },
    2: {
        "y_pad": np.array(
            [
                [1, 9, 29, 49, 48],
                [4, 29, 79, 129, 115],
                [7, 39, 89, 139, 122],
                [10, 49, 99, 149, 129],
                [13, 59, 109, 159, 136],
                [10, 40, 70, 100, 80.0],
            ]
        ),
        "y_dil": np.array([[48, 98], [58, 108], [68, 118.0]]),
        "y_flip": np.array([[51, 101, 151], [61, 111, 161], [71, 121, 171], [81, 131, 181.0]]),
        "dx": np.array(
            [
                [116, 374, 674, 258],
                [243, 700, 1200, 407],
                [313, 800, 1300, 437],
                [383, 900, 1400, 467],
                [177, 386, 586, 159.0],
            ]
        ),
        "dx_stride": np.array(
            [
                [116, 58, 516, 258],
                [87, 29, 387, 129],
                [196, 98, 596, 298],
                [147, 49, 447, 149],
                [0, 0, 0, 0.0],
            ]
        ),
        "dx_pad": np.array(
            [
                [152, 470, 850, 911],
                [261, 700, 1200, 1240],
                [340, 800, 1300, 1319],
                [419, 900, 1400, 1398],
                [370, 746, 1126, 1087.0],
            ]
        ),
        "dx_dil": np.array(
            [
                [192, 392, 96, 196],
                [232, 432, 116, 216],
                [416, 766, 184, 334],
                [174, 324, 58, 108],
                [204, 354, 68, 118.0],
            ]
        ),
        "dx_flip": np.array(
            [
                [51, 254, 454, 453],
                [163, 700, 1200, 1087],
                [193, 800, 1300, 1157],
                [223, 900, 1400, 1227],
                [162, 586, 886, 724.0],
            ]
        ),
        "dw_shape": (2, 2),
    },
    3: {  # the short 3-D answers (column-major reshape of NNlib's literal vectors)
        "y_dil": np.reshape([608, 644, 680, 788, 824, 860.0], (3, 2, 1), order="F"),
        "y_flip": np.reshape(
            [
                686,
                722,
                758,
                794,
                866,
                902,
                938,
                974,
                1046,
                1082,
                1118,
                1154,
                1406,
                1442,
                1478,
                1514,
                1586,
                1622,
                1658,
                1694,
                1766,
                1802,
                1838,
                1874.0,
            ],
            (4, 3, 2),
            order="F",
        ),
        "dx_shape": (5, 4, 3),
        "dw_shape": (2, 2, 2),
    },
}


def _ramp(shape: tuple[int, ...]) -> np.ndarray:
    """Julia's ``reshape(Float64[1:prod(shape);], shape..., 1, 1)``."""
    return np.reshape(np.arange(1, int(np.prod(shape)) + 1, dtype=np.float64), (*shape, 1, 1), order="F")


def _x_w(rank: int) -> tuple[np.ndarray, np.ndarray]:
    answers = ANSWERS[rank]
    dx_shape = answers["dx"].shape if "dx" in answers else answers["dx_shape"]
    return _ramp(dx_shape), _ramp(answers["dw_shape"])


def _ddims(a: np.ndarray) -> np.ndarray:
    return a[..., 0, 0]


@pytest.mark.parametrize("rank", [1, 2])
def test_conv_known_answers(rank: int) -> None:
    x, w = _x_w(rank)
    y_pad = ANSWERS[rank]["y_pad"]
    inner = tuple(slice(1, n - 1) for n in y_pad.shape)
    strided = tuple(slice(1, n - 1, 2) for n in y_pad.shape)
    np.testing.assert_array_equal(_ddims(ref.conv(x, w)), y_pad[inner])
    np.testing.assert_array_equal(_ddims(ref.conv(x, w, stride=2)), y_pad[strided])
    np.testing.assert_array_equal(_ddims(ref.conv(x, w, dilation=2)), ANSWERS[rank]["y_dil"])
    np.testing.assert_array_equal(_ddims(ref.conv(x, w, pad=1)), y_pad)
    np.testing.assert_array_equal(_ddims(ref.conv(x, w, flipped=True)), ANSWERS[rank]["y_flip"])


def test_conv_known_answers_3d() -> None:
    x, w = _x_w(3)
    np.testing.assert_array_equal(_ddims(ref.conv(x, w, dilation=2)), ANSWERS[3]["y_dil"])
    np.testing.assert_array_equal(_ddims(ref.conv(x, w, flipped=True)), ANSWERS[3]["y_flip"])


@pytest.mark.parametrize("rank", [1, 2])
@pytest.mark.parametrize(
    ("key", "kwargs"),
    [
        ("dx", {}),
        ("dx_stride", {"stride": 2}),
        ("dx_pad", {"pad": 1}),
        ("dx_dil", {"dilation": 2}),
        ("dx_flip", {"flipped": True}),
    ],
)
def test_conv_data_gradient_known_answers(rank: int, key: str, kwargs: dict) -> None:
    """``∇conv_data(conv(x, w), w)`` as NNlib's test computes it."""
    x, w = _x_w(rank)
    dy = ref.conv(x, w, **kwargs)
    dx = ref.conv_data_adjoint(dy, w, x.shape[:rank], **kwargs)
    np.testing.assert_array_equal(_ddims(dx), ANSWERS[rank][key])


def test_nnlib_1d_example_from_the_spec() -> None:
    x = np.arange(1, 6, dtype=np.float64).reshape(5, 1, 1)
    w = np.array([1.0, 2.0]).reshape(2, 1, 1)
    assert ref.conv(x, w, pad=1)[:, 0, 0].tolist() == [1, 4, 7, 10, 13, 10]


@pytest.mark.parametrize("seed", range(12))
def test_conv_transpose_is_the_exact_adjoint(seed: int) -> None:
    """<conv(x, w), y> == <x, ∇conv_data(y, w)> for random geometry (1-3 D, groups, asym pad)."""
    rng = np.random.default_rng(seed)
    nsp = 1 + seed % 3
    groups = int(rng.integers(1, 3))
    cin, cout = groups * int(rng.integers(1, 3)), groups * int(rng.integers(1, 3))
    k = tuple(int(v) for v in rng.integers(1, 4, nsp))
    stride = tuple(int(v) for v in rng.integers(1, 3, nsp))
    dilation = tuple(int(v) for v in rng.integers(1, 3, nsp))
    pad = tuple(int(v) for v in rng.integers(0, 3, 2 * nsp))
    size = tuple(int(v) for v in rng.integers(6, 9, nsp))
    x = rng.normal(size=(*size, cin, 2))
    w = rng.normal(size=(*k, cin // groups, cout))
    kw = {"stride": stride, "pad": pad, "dilation": dilation, "groups": groups}
    y = ref.conv(x, w, **kw)
    dy = rng.normal(size=y.shape)
    lhs = float(np.sum(y * dy))
    rhs = float(np.sum(x * ref.conv_data_adjoint(dy, w, size, **kw)))
    assert lhs == pytest.approx(rhs, rel=1e-10)


def _to_torch(a: np.ndarray) -> torch.Tensor:
    """Convention C0: the Julia-shaped batch reversed is channels-first."""
    return torch.from_numpy(np.ascontiguousarray(a.transpose(range(a.ndim)[::-1])))


def _from_torch(t: torch.Tensor) -> np.ndarray:
    a = t.detach().numpy()
    return a.transpose(range(a.ndim)[::-1])


@pytest.mark.parametrize("seed", range(6))
def test_conv_matches_torch_with_flipped_kernel(seed: int) -> None:
    """A true convolution = torch's cross-correlation with every spatial axis of the kernel flipped."""
    rng = np.random.default_rng(100 + seed)
    nsp = 1 + seed % 3
    groups = 1 + seed % 2
    x = rng.normal(size=(*([7] * nsp), 2 * groups, 3))
    w = rng.normal(size=(*([3] * nsp), 2, 2 * groups))
    stride, dilation = (2,) * nsp, (1 + seed % 2,) * nsp
    pad = tuple(int(v) for v in rng.integers(0, 3, 2 * nsp))
    ours = ref.conv(x, w, stride=stride, pad=pad, dilation=dilation, groups=groups)
    conv = getattr(torch.nn.functional, f"conv{nsp}d")
    wt = torch.from_numpy(
        np.ascontiguousarray(np.flip(w.transpose(range(w.ndim)[::-1]), tuple(range(2, 2 + nsp))))
    )
    xt = torch.nn.functional.pad(_to_torch(x), pad)  # torch's pad tuple is last-dim-first = Julia order
    theirs = conv(xt, wt, stride=stride, dilation=dilation, groups=groups)
    np.testing.assert_allclose(ours, _from_torch(theirs), rtol=1e-10, atol=1e-10)


def test_pools_match_torch() -> None:
    rng = np.random.default_rng(7)
    x = rng.normal(size=(9, 8, 3, 2))
    mx = ref.pool(x, (3, 2), stride=(2, 2), pad=(1, 1, 0, 0))
    xt = _to_torch(x)
    t_mx = torch.nn.functional.max_pool2d(
        torch.nn.functional.pad(xt, (1, 1, 0, 0), value=-np.inf), (2, 3), (2, 2)
    )
    np.testing.assert_allclose(mx, _from_torch(t_mx))
    mean = ref.pool(x, (3, 3), pad=1, mode="mean")  # stride defaults to the window, as in Flux
    t_mean = torch.nn.functional.avg_pool2d(xt, 3, 3, padding=1, count_include_pad=True)
    np.testing.assert_allclose(mean, _from_torch(t_mean))
    np.testing.assert_allclose(ref.adaptive_pool(x[:8], (4, 2), "mean"), _from_torch(
        torch.nn.functional.adaptive_avg_pool2d(_to_torch(x[:8]), (2, 4))))  # fmt: skip
    assert ref.global_pool(x, "max").shape == (1, 1, 3, 2)


def test_flatten_is_column_major() -> None:
    x = np.arange(24.0).reshape((2, 3, 2, 2), order="F")
    assert ref.flatten(x)[:, 1].tolist() == list(range(12, 24))


def test_recurrent_cells_match_torch() -> None:
    """Flux gate order (i, f, g, o / r, z, n) and a zero hidden-side bias reproduce torch's cells."""
    rng = np.random.default_rng(3)
    nin, hid, steps, batch = 3, 4, 5, 2
    x = rng.normal(size=(nin, steps, batch))
    for kind, module in (("LSTM", torch.nn.LSTM), ("GRU", torch.nn.GRU), ("RNN", torch.nn.RNN)):
        gates = {"LSTM": 4, "GRU": 3, "RNN": 1}[kind]
        cell = NamedTuple(
            Wi=rng.normal(size=(gates * hid, nin)),
            Wh=rng.normal(size=(gates * hid, hid)),
            b=rng.normal(size=gates * hid),
        )
        ours = ref.forward(Layer(kind, {"in": nin, "out": hid}), NamedTuple(cell=cell), x)
        t = module(nin, hid, dtype=torch.float64)
        with torch.no_grad():
            t.weight_ih_l0.copy_(torch.from_numpy(cell["Wi"]))
            t.weight_hh_l0.copy_(torch.from_numpy(cell["Wh"]))
            t.bias_ih_l0.copy_(torch.from_numpy(cell["b"]))
            t.bias_hh_l0.zero_()
        theirs, _ = t(torch.from_numpy(x.transpose(1, 2, 0).copy()))  # (L, B, in)
        np.testing.assert_allclose(ours, theirs.detach().numpy().transpose(2, 0, 1), rtol=1e-10, atol=1e-12)


def test_recur_era_starts_from_state0() -> None:
    rng = np.random.default_rng(4)
    cell = NamedTuple(
        Wi=rng.normal(size=(2, 3)), Wh=rng.normal(size=(2, 2)), b=np.zeros(2), state0=np.ones((2, 1))
    )
    layer = Layer("RNN", {"in": 3, "out": 2, "σ": "tanh"})
    x = rng.normal(size=(3, 4))
    step = ref.forward(layer, NamedTuple(cell=cell, state=()), x)  # 2-D = one step of Recur
    np.testing.assert_allclose(step, np.tanh(cell["Wi"] @ x + cell["Wh"] @ np.ones((2, 4))))


def test_batchnorm_matches_torch_eval() -> None:
    rng = np.random.default_rng(5)
    c = 4
    st = {
        "β": rng.normal(size=c),
        "γ": rng.normal(size=c),
        "μ": rng.normal(size=c),
        "σ²": rng.uniform(0.5, 2, c),
    }
    x = rng.normal(size=(5, 6, c, 3))
    ours = ref.forward(Layer("BatchNorm", {"channels": c, "σ": "relu"}), NamedTuple(st.items()), x)
    bn = torch.nn.BatchNorm2d(c, dtype=torch.float64).eval()
    with torch.no_grad():
        bn.weight.copy_(torch.from_numpy(st["γ"]))
        bn.bias.copy_(torch.from_numpy(st["β"]))
        bn.running_mean.copy_(torch.from_numpy(st["μ"]))
        bn.running_var.copy_(torch.from_numpy(st["σ²"]))
    np.testing.assert_allclose(ours, _from_torch(torch.relu(bn(_to_torch(x)))), rtol=1e-10, atol=1e-12)


def test_groupnorm_and_layernorm_match_torch() -> None:
    rng = np.random.default_rng(6)
    x = rng.normal(size=(5, 6, 6, 2))
    gamma, beta = rng.normal(size=6), rng.normal(size=6)
    ours = ref.forward(Layer("GroupNorm", {"groups": 3}), NamedTuple([("γ", gamma), ("β", beta)]), x)
    gn = torch.nn.GroupNorm(3, 6, dtype=torch.float64)
    with torch.no_grad():
        gn.weight.copy_(torch.from_numpy(gamma))
        gn.bias.copy_(torch.from_numpy(beta))
    np.testing.assert_allclose(ours, _from_torch(gn(_to_torch(x))), rtol=1e-9, atol=1e-12)
    y = rng.normal(size=(8, 3))
    diag = NamedTuple(scale=rng.normal(size=8), bias=rng.normal(size=8), σ=())
    st = NamedTuple([("λ", ()), ("diag", diag), ("ϵ", 1e-3), ("size", (8,)), ("affine", True)])
    ln = torch.nn.LayerNorm(8, eps=1e-3, dtype=torch.float64)
    with torch.no_grad():
        ln.weight.copy_(torch.from_numpy(diag["scale"]))
        ln.bias.copy_(torch.from_numpy(diag["bias"]))
    expected = ln(torch.from_numpy(y.T.copy())).detach().numpy().T
    np.testing.assert_allclose(ref.forward(Layer("LayerNorm"), st, y, flux="0.16.11"), expected, rtol=1e-9)
    assert not np.allclose(ref.forward(Layer("LayerNorm"), st, y, flux="0.14"), expected, rtol=1e-6)


def test_multi_head_attention_matches_torch() -> None:
    rng = np.random.default_rng(8)
    e, heads, length, batch = 8, 2, 5, 3
    w = {k: rng.normal(size=(e, e)) / 3 for k in "qkvo"}
    bo = rng.normal(size=e)
    st = NamedTuple(
        nheads=heads,
        q_proj=NamedTuple(weight=w["q"], bias=False, σ=()),
        k_proj=NamedTuple(weight=w["k"], bias=False, σ=()),
        v_proj=NamedTuple(weight=w["v"], bias=False, σ=()),
        attn_drop=NamedTuple(p=0.0, dims=(), active=None, rng=()),
        out_proj=NamedTuple(weight=w["o"], bias=bo, σ=()),
    )
    x = rng.normal(size=(e, length, batch))
    ours, alpha = ref.forward(Layer("MultiHeadAttention", {"dims": e, "nheads": heads}), st, x)
    mha = torch.nn.MultiheadAttention(e, heads, bias=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(torch.from_numpy(np.concatenate([w["q"], w["k"], w["v"]])))
        mha.in_proj_bias.zero_()
        mha.out_proj.weight.copy_(torch.from_numpy(w["o"]))
        mha.out_proj.bias.copy_(torch.from_numpy(bo))
    xt = torch.from_numpy(x.transpose(1, 2, 0).copy())  # (L, B, E)
    theirs, _ = mha(xt, xt, xt, need_weights=False)
    np.testing.assert_allclose(ours, theirs.detach().numpy().transpose(2, 0, 1), rtol=1e-9, atol=1e-12)
    assert alpha.shape == (length, length, heads, batch)
    np.testing.assert_allclose(alpha.sum(axis=0), 1.0)


def test_containers_and_small_layers() -> None:
    rng = np.random.default_rng(9)
    dense = Layer("Dense", {"in": 3, "out": 3, "σ": "relu"})
    p = NamedTuple(weight=rng.normal(size=(3, 3)), bias=rng.normal(size=3), σ=())
    x = rng.normal(size=(3, 4))
    y = ref.forward(dense, p, x)
    skip = Layer("SkipConnection", {"connection": "+"}, (dense,))
    np.testing.assert_allclose(ref.forward(skip, NamedTuple(layers=p, connection=()), x), y + x)
    par = Layer("Parallel", {"connection": "vcat"}, (dense, Layer("function", {"name": "tanh"})))
    out = ref.forward(par, NamedTuple(connection=(), layers=(p, ())), x)
    np.testing.assert_allclose(out, np.concatenate([y, np.tanh(x)]))
    maxout = Layer("Maxout", children=(dense, dense))
    np.testing.assert_allclose(ref.forward(maxout, NamedTuple(layers=(p, p)), x), y)
    named = Layer("Chain", children=(dense, Layer("function", {"name": "softmax"})), names=("enc", "sm"))
    sm = ref.forward(named, NamedTuple(layers=NamedTuple(enc=p, sm=())), x)
    np.testing.assert_allclose(sm.sum(axis=0), 1.0)
    emb = ref.forward(Layer("Embedding"), NamedTuple(weight=np.arange(6.0).reshape(2, 3)), np.array([[1, 3]]))
    assert emb.shape == (2, 1, 2) and emb[:, 0, 1].tolist() == [2.0, 5.0]
    with pytest.raises(IndexError):
        ref.forward(Layer("Embedding"), NamedTuple(weight=np.zeros((2, 3))), np.array([0]))
    bil = ref.forward(Layer("Bilinear"), NamedTuple(weight=np.ones((1, 3, 3)), bias=False, σ=()), x)
    np.testing.assert_allclose(bil[0], x.sum(axis=0) ** 2)

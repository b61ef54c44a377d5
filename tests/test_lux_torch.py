"""PyTorch state_dict <-> Lux ps/st (Dense, Conv, BatchNorm, LayerNorm), Lux v1 and v0.5 layouts.

The Lux arrays are Flux's arrays renamed and, for v0.5 biases and LayerNorm, reshaped
(docs/porting.md §Supported layers): each is checked against the Flux.state of the same state_dict
(whose rules tests/test_torch.py checks against torch's outputs), torch's output is reproduced by
the numpy Flux reference run on the Lux arrays, and the reverse gives back torch's tensors exactly.
"""

from __future__ import annotations

import numpy as np
import pytest
from _flux_reference import forward

import treexchange as tx
from treexchange._interop._lux import lux_to_state_dict, state_dict_to_lux
from treexchange._interop._torch import as_layer, state_dict_to_flux

torch = pytest.importorskip("torch")
nn = torch.nn

TEXT = (
    "Chain(Conv((3, 2), 2 => 4), BatchNorm(4, relu), MaxPool((2, 2)), Flux.flatten, "
    "Dense(24 => 5), LayerNorm(5))"
)


def _module() -> nn.Sequential:
    g = torch.Generator().manual_seed(5)
    m = nn.Sequential(
        nn.Conv2d(2, 4, (2, 3)),
        nn.BatchNorm2d(4),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(24, 5),
        nn.LayerNorm(5),
    )
    with torch.no_grad():
        for name, t in list(m.named_parameters()) + list(m.named_buffers()):
            if t.dtype.is_floating_point:
                t.copy_(
                    torch.rand(t.shape, generator=g) + 0.5
                    if "var" in name
                    else torch.randn(t.shape, generator=g)
                )
    return m.eval()


def _as_flux(ps: tx.NamedTuple, st: tx.NamedTuple) -> tx.NamedTuple:
    """The Lux arrays in Flux.state places, biases flattened (what the Flux reference reads)."""
    conv, bn, dense, ln = ps.layer_1, ps.layer_2, ps.layer_5, ps.layer_6
    layers = (
        tx.NamedTuple(weight=conv.weight, bias=conv.bias.reshape(-1)),
        tx.NamedTuple(
            **{"γ": bn.scale, "β": bn.bias, "μ": st.layer_2.running_mean, "σ²": st.layer_2.running_var}
        ),
        (),
        (),
        tx.NamedTuple(weight=dense.weight, bias=dense.bias.reshape(-1)),
        tx.NamedTuple(diag=tx.NamedTuple(scale=ln.scale.reshape(-1), bias=ln.bias.reshape(-1))),
    )
    return tx.NamedTuple(layers=layers)


@pytest.mark.parametrize("lux", ["1", "0.5"])
def test_lux_ps_st_from_torch_and_back(lux: str) -> None:
    module = _module()
    sd = module.state_dict()
    ps, st = state_dict_to_lux(sd, TEXT, lux=lux)
    assert list(ps) == [f"layer_{i}" for i in range(1, 7)] == list(st)
    assert list(ps.layer_2) == ["scale", "bias"] and list(ps.layer_6) == ["bias", "scale"]
    assert list(st.layer_2) == ["running_mean", "running_var", "training"]
    assert st.layer_2.training == tx.Singleton("Base.Val{true}")
    assert ps.layer_3 == tx.NamedTuple() and st.layer_5 == tx.NamedTuple()
    v05 = lux == "0.5"
    assert ps.layer_5.bias.shape == ((5, 1) if v05 else (5,))
    assert ps.layer_1.bias.shape == ((1, 1, 4, 1) if v05 else (4,))
    assert ps.layer_6.scale.shape == (5, 1)
    # the same numbers as the Flux.state of the state_dict
    flux = state_dict_to_flux(sd, TEXT)
    np.testing.assert_array_equal(ps.layer_1.weight, flux.layers[0].weight)
    np.testing.assert_array_equal(st.layer_2.running_var, flux.layers[1]["σ²"])
    np.testing.assert_array_equal(ps.layer_5.weight, flux.layers[4].weight)
    # torch's output from the Lux arrays (Flux semantics; LayerNorm as Flux ≥ 0.16.11 and torch)
    x = np.random.default_rng(2).standard_normal((9, 6, 2, 3)).astype(np.float32)  # WHCN
    expected = forward(as_layer(TEXT), _as_flux(ps, st), x, flux="0.16.11")
    with torch.no_grad():
        got = module(torch.from_numpy(np.ascontiguousarray(x.transpose(3, 2, 1, 0)))).numpy()
    np.testing.assert_allclose(got.T, expected, rtol=1e-4, atol=1e-5)
    # and back, exactly; a module stands for its architecture and names
    for back in (
        lux_to_state_dict(ps, st, TEXT, names=sd, lux=lux),
        lux_to_state_dict(ps, st, module, lux=lux),
    ):
        assert set(back) == set(sd)
        for name, tensor in sd.items():
            if not name.endswith("num_batches_tracked"):
                np.testing.assert_array_equal(back[name], tensor.numpy(), err_msg=name)


def test_lux_layout_mismatch_is_reported_with_its_place() -> None:
    ps, st = state_dict_to_lux(_module().state_dict(), TEXT, lux="0.5")
    with pytest.raises(tx.MismatchError) as info:
        lux_to_state_dict(ps, st, TEXT, lux="1")  # v0.5 biases read as v1
    text = str(info.value)
    assert "ps.layer_1.bias" in text and "Lux (1, 1, 4, 1), Lux 1 needs (4,)" in text
    assert "ps.layer_5.bias" in text and len(info.value.mismatches) == 2

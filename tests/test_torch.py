"""PyTorch state_dict <-> Flux.state through the layer rules, checked against torch's own outputs.

For every rule with a PyTorch column: a real torch module with random weights (random running
statistics too), its state_dict converted to a Flux.state, the numpy Flux reference
(tests/_flux_reference.py, written from Flux/NNlib) run on the converted weights and compared with
torch's output on the same input (x_torch = rev(x_julia)); then the reverse conversion gives back
torch's tensors exactly. Acceptance: the Julia-trained LeNet in a torch module classifies MNIST.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _flux_reference import forward
from _mnist import julia_batch, mnist_test_set
from conftest import require_fixture

import treexchange as tx
from treexchange._cli import main
from treexchange._interop._safetensors import save_safetensors
from treexchange._interop._torch import (
    as_layer,
    flux_to_state_dict,
    layer_of_module,
    load_into_module,
    state_dict_to_flux,
)

torch = pytest.importorskip("torch")
nn = torch.nn


def _rev(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(tuple(range(x.ndim))[::-1]))


def _randomize(module: nn.Module, seed: int) -> nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, t in list(module.named_parameters()) + list(module.named_buffers()):
            if t.dtype.is_floating_point:
                values = (
                    torch.rand(t.shape, generator=g) + 0.5
                    if "var" in name
                    else torch.randn(t.shape, generator=g)
                )
                t.copy_(values)
    return module.eval()


# (Flux architecture, equivalent torch module, Julia-shaped input)
CASES = {
    "Dense": ("Chain(Dense(5 => 3, tanh))", lambda: nn.Sequential(nn.Linear(5, 3), nn.Tanh()), (5, 4)),
    "Dense-nobias": (
        "Chain(Dense(5 => 3; bias=false))",
        lambda: nn.Sequential(nn.Linear(5, 3, bias=False)),
        (5, 2),
    ),
    "Conv1d": (
        "Chain(Conv((3,), 2 => 4, relu))",
        lambda: nn.Sequential(nn.Conv1d(2, 4, 3), nn.ReLU()),
        (9, 2, 2),
    ),
    "Conv2d": (
        "Chain(Conv((5, 3), 2 => 4; stride=(2, 1), pad=(1, 2), dilation=(1, 2)))",
        lambda: nn.Sequential(nn.Conv2d(2, 4, (3, 5), stride=(1, 2), padding=(2, 1), dilation=(2, 1))),
        (11, 12, 2, 2),
    ),
    "Conv2d-groups": (
        "Chain(Conv((3, 3), 4 => 6; groups=2))",
        lambda: nn.Sequential(nn.Conv2d(4, 6, 3, groups=2)),
        (7, 6, 4, 2),
    ),
    "Conv3d": ("Chain(Conv((2, 2, 2), 1 => 2))", lambda: nn.Sequential(nn.Conv3d(1, 2, 2)), (4, 5, 3, 1, 2)),
    "CrossCor": (
        "Chain(CrossCor((3, 2), 2 => 3; pad=1))",
        lambda: nn.Sequential(nn.Conv2d(2, 3, (2, 3), padding=1)),
        (6, 5, 2, 2),
    ),
    "BatchNorm": (
        "Chain(Conv((3, 3), 2 => 3), BatchNorm(3, relu))",
        lambda: nn.Sequential(nn.Conv2d(2, 3, 3), nn.BatchNorm2d(3), nn.ReLU()),
        (6, 6, 2, 3),
    ),
    "LayerNorm": ("Chain(LayerNorm(6))", lambda: nn.Sequential(nn.LayerNorm(6)), (6, 3)),
    "Embedding": ("Chain(Embedding(10 => 4))", lambda: nn.Sequential(nn.Embedding(10, 4)), None),
    "ConvTranspose": (
        "Chain(ConvTranspose((3, 2), 4 => 6; stride=(2, 1), pad=1, outpad=(1, 0), groups=2))",
        lambda: nn.Sequential(
            nn.ConvTranspose2d(4, 6, (2, 3), stride=(1, 2), padding=1, output_padding=(0, 1), groups=2)
        ),
        (5, 4, 4, 2),
    ),
    "ConvTranspose1d-dilation": (
        "Chain(ConvTranspose((3,), 2 => 3, relu; stride=3, dilation=2))",
        lambda: nn.Sequential(nn.ConvTranspose1d(2, 3, 3, stride=3, dilation=2), nn.ReLU()),
        (6, 2, 2),
    ),
    "DepthwiseConv": (
        "Chain(DepthwiseConv((3, 3), 3 => 6; pad=1))",
        lambda: nn.Sequential(nn.Conv2d(3, 6, 3, padding=1, groups=3)),
        (5, 6, 3, 2),
    ),
    "GroupNorm": (
        "Chain(GroupNorm(6, 3, relu))",
        lambda: nn.Sequential(nn.GroupNorm(3, 6), nn.ReLU()),
        (5, 4, 6, 2),
    ),
    "InstanceNorm": (
        "Chain(InstanceNorm(3; affine=true))",
        lambda: nn.Sequential(nn.InstanceNorm2d(3, affine=True)),
        (5, 5, 3, 2),
    ),
    "InstanceNorm-track": (
        "Chain(InstanceNorm(3; affine=true, track_stats=true))",
        lambda: nn.Sequential(nn.InstanceNorm2d(3, affine=True, track_running_stats=True)),
        (5, 5, 3, 2),
    ),
    "InstanceNorm-plain": ("Chain(InstanceNorm(2))", lambda: nn.Sequential(nn.InstanceNorm1d(2)), (7, 2, 3)),
    "pools-flatten-dropout": (
        "Chain(Conv((3, 3), 2 => 3), MaxPool((2, 2)), MeanPool((2, 2); pad=1), Dropout(0.5), "
        "Flux.flatten, Dense(12 => 4))",
        lambda: nn.Sequential(
            nn.Conv2d(2, 3, 3),
            nn.MaxPool2d(2),
            nn.AvgPool2d(2, padding=1),
            nn.Dropout(0.5),
            nn.Flatten(),
            nn.Linear(12, 4),
        ),
        (9, 9, 2, 2),
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_layer_rule_against_torch_output_and_back(case: str) -> None:
    text, make, shape = CASES[case]
    module = _randomize(make(), seed=len(case))
    layer = as_layer(text)
    state = state_dict_to_flux(module.state_dict(), text)
    rng = np.random.default_rng(0)
    if case == "Embedding":
        ids = rng.integers(1, 11, size=(5, 2))  # Julia ids, 1-based, shape (5, 2)
        expected = forward(layer, state, ids)  # (dim, 5, 2)
        with torch.no_grad():
            got = module(torch.from_numpy(_rev(ids - 1))).numpy()  # (2, 5, dim)
    else:
        x = rng.standard_normal(shape).astype(np.float32)
        # LayerNorm: torch normalises with √(σ²+ϵ), as Flux ≥ 0.16.11 does (docs/porting.md §LayerNorm ϵ)
        expected = forward(layer, state, x, flux="0.16.11")
        with torch.no_grad():
            got = module(torch.from_numpy(_rev(x))).numpy()
    np.testing.assert_allclose(_rev(got), expected, rtol=1e-4, atol=1e-5)
    # the same from the module alone (its Layer tree read from it: a torch conv reads as a Flux
    # Conv, so not for CrossCor), and the reverse, exactly
    if case != "CrossCor":
        assert tx.values_equal(state_dict_to_flux(None, module), state)
    back = flux_to_state_dict(state, text, names=module.state_dict())
    for name, tensor in module.state_dict().items():
        if name.endswith("num_batches_tracked"):
            continue
        np.testing.assert_array_equal(back[name], tensor.numpy(), err_msg=name)


def test_bilinear_rule_against_torch_output_and_back() -> None:
    """nn.Bilinear.weight (out, in1, in2) is Flux's W as it is (docs/porting.md §Supported layers);
    two inputs."""
    module = _randomize(nn.Bilinear(3, 4, 5), seed=7)
    text = "Chain(Bilinear((3, 4) => 5))"
    sd = {f"0.{k}": v for k, v in module.state_dict().items()}
    state = state_dict_to_flux(sd, text)
    rng = np.random.default_rng(1)
    x, y = rng.standard_normal((3, 6)).astype(np.float32), rng.standard_normal((4, 6)).astype(np.float32)
    expected = forward(as_layer(text), state, (x, y))
    with torch.no_grad():
        got = module(torch.from_numpy(_rev(x)), torch.from_numpy(_rev(y))).numpy()
    np.testing.assert_allclose(_rev(got), expected, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(state.layers[0].weight, module.weight.detach().numpy())
    assert as_layer(layer_of_module(nn.Sequential(module))) == as_layer(text)
    back = flux_to_state_dict(state, text)
    assert set(back) == set(sd)
    for name, tensor in sd.items():
        np.testing.assert_array_equal(back[name], tensor.numpy(), err_msg=name)


def test_layers_without_a_pytorch_module_say_so() -> None:
    # Scale ports to Equinox and Flax; torch.nn has no module for it: the error says why
    with pytest.raises(
        tx.UnsupportedError, match=r"no PyTorch equivalent: torch\.nn has no module holding Flux's Scale"
    ):
        state_dict_to_flux({"0.weight": np.ones(3, np.float32)}, "Chain(Scale(3))")


def test_gruv3_has_no_pytorch_equivalent() -> None:
    with pytest.raises(tx.UnsupportedError, match="no PyTorch equivalent: Flux's GRUv3") as info:
        state_dict_to_flux({}, "Chain(Dense(2 => 3), GRUv3(3 => 4))")
    assert "model_state.layers[2]" in str(info.value)


def test_conv_kernel_is_flipped_not_just_reordered() -> None:
    """Flux convolves, PyTorch cross-correlates: the converted Julia kernel is the spatial flip."""
    module = _randomize(nn.Sequential(nn.Conv2d(1, 1, (2, 3), bias=False)), seed=3)
    w_torch = module[0].weight.detach().numpy()[0, 0]  # (kH, kW)
    w_julia = (
        state_dict_to_flux(module.state_dict(), "Chain(Conv((3, 2), 1 => 1; bias=false))").layers[0].weight
    )
    np.testing.assert_array_equal(w_julia[:, :, 0, 0], w_torch.T[::-1, ::-1])


LENET_TEXT = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


def torch_lenet() -> nn.Sequential:
    """LeNet as a PyTorch user writes it (NCHW)."""
    return nn.Sequential(
        nn.Conv2d(1, 6, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(6, 16, 5),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(256, 120),
        nn.ReLU(),
        nn.Linear(120, 84),
        nn.ReLU(),
        nn.Linear(84, 10),
    ).eval()


def test_lenet_flux_state_in_torch_classifies_mnist() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    images, labels = mnist_test_set()
    state = tx.load(path, "lenet_state")
    model = load_into_module(torch_lenet(), state)
    with torch.no_grad():
        predicted = model(torch.from_numpy(images)).argmax(dim=1).numpy()
    accuracy = float((predicted == labels).mean())
    assert accuracy >= 0.975, accuracy
    # the torch forward agrees with the Flux reference on the same state (first 20 images)
    x = julia_batch(images[:20])
    with torch.no_grad():
        logits = model(torch.from_numpy(images[:20])).numpy()
    np.testing.assert_allclose(_rev(logits), forward(as_layer(LENET_TEXT), state, x), rtol=1e-4, atol=1e-4)
    # and back: the module's state_dict is the file's Flux.state (Flux 0.14 era: pools are ())
    assert tx.values_equal(state_dict_to_flux(model.state_dict(), LENET_TEXT, flux="0.14"), state)
    # the torch module read as a Flux model is exactly the architecture Flux prints
    assert as_layer(layer_of_module(model)) == as_layer(LENET_TEXT)


def test_every_problem_is_reported_at_once() -> None:
    sd = {k: v.numpy() for k, v in torch_lenet().state_dict().items()}
    sd["extra.weight"] = np.zeros(3, np.float32)
    del sd["3.bias"]
    wrong = LENET_TEXT.replace("Dense(120 => 84, relu)", "Dense(120 => 80, relu)")
    with pytest.raises(tx.MismatchError) as info:
        state_dict_to_flux(sd, wrong)
    kinds = sorted(m.kind for m in info.value.mismatches)
    assert kinds == ["extra", "missing", "shape", "shape"], info.value.mismatches
    text = str(info.value)
    assert "no tensor 3.bias" in text and "model_state.layers[3].bias" in text
    assert "9.weight is (84, 120), Flux Dense needs (80, 120)" in text
    assert "tensors left over: extra.weight" in text


def test_kind_mismatch_with_a_module() -> None:
    module = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    with pytest.raises(tx.MismatchError, match="Flux BatchNorm paired with torch LayerNorm"):
        state_dict_to_flux(module.state_dict(), "Chain(Dense(4 => 4), BatchNorm(4))", module=module)


def test_cli_safetensors_with_architecture_writes_a_flux_state(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    state = tx.load(path, "lenet_state")
    model = load_into_module(torch_lenet(), state)
    # a PyTorch-written file: safetensors.torch sorts names ("10.weight" before "3.weight")
    from safetensors.torch import save_file

    st = tmp_path / "lenet.safetensors"
    save_file(model.state_dict(), str(st))
    out = tmp_path / "lenet.jld2"
    assert main(["convert", str(st), str(out), "--architecture", LENET_TEXT, "--dry-run"]) == 0
    assert "0.weight -> model_state.layers[1].weight  (6, 1, 5, 5)" in capsys.readouterr().out
    assert main(["convert", str(st), str(out), "--architecture", LENET_TEXT]) == 0
    written = tx.load(out, "model_state")
    for mine, theirs in zip(written.layers, state.layers):
        if isinstance(theirs, tx.NamedTuple) and "weight" in theirs:
            np.testing.assert_array_equal(mine.weight, theirs.weight)
            np.testing.assert_array_equal(mine.bias, theirs.bias)
    # a file written by treexchange (tree metadata) converts back as it is, no architecture needed
    save_safetensors(tmp_path / "t.safetensors", {"model_state": written})
    assert main(["convert", str(tmp_path / "t.safetensors"), str(tmp_path / "t.jld2")]) == 0


def test_import_treexchange_does_not_import_torch() -> None:
    code = "import sys, treexchange, treexchange._interop; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "False"


def test_public_format_names_import_their_package_only_when_called() -> None:
    """``import treexchange`` and naming the public format functions import no format package."""
    code = (
        "import sys, treexchange as tx\n"
        "fs = [tx.save_safetensors, tx.load_safetensors, tx.save_orbax, tx.load_orbax,\n"
        "      tx.state_dict_to_flux, tx.flux_to_state_dict, tx.load_into_module]\n"
        "print(sorted(m for m in ('torch', 'safetensors', 'orbax') if m in sys.modules))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"
    for name in ("save_safetensors", "load_orbax", "state_dict_to_flux", "load_into_module"):
        assert name in tx.__all__ and name in dir(tx)


class _BasicBlock(nn.Module):
    """torchvision's BasicBlock, same attribute names (conv1, bn1, conv2, bn2, downsample)."""

    def __init__(self, inplanes: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes)
            )


class _TorchvisionResNet18(nn.Module):
    """torchvision.models.resnet18's module tree and state_dict names (torchvision is not needed)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        inplanes = 64
        for i, planes in enumerate((64, 128, 256, 512), 1):
            stride = 1 if i == 1 else 2
            blocks = [_BasicBlock(inplanes, planes, stride), _BasicBlock(planes, planes, 1)]
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
            inplanes = planes
        self.fc = nn.Linear(512, 1000)


def test_torchvision_resnet18_to_metalhead_resnet18_and_back() -> None:
    from treexchange._interop._metalhead import resnet_to_torchvision, torchvision_to_resnet

    module = _randomize(_TorchvisionResNet18(), seed=18)
    sd = module.state_dict()
    assert len(sd) == 122  # as torchvision's resnet18
    state = torchvision_to_resnet(sd, 18)
    # Metalhead: ResNet(layers = Chain(backbone = Chain(stem, stage1..4), classifier)), see _metalhead.py
    chain = state.layers
    assert list(state) == ["layers"] and list(chain) == ["layers"] and len(chain.layers) == 2
    backbone, classifier = chain.layers
    stem, *stages = backbone.layers
    assert len(stages) == 4 and all(len(s.layers) == 2 for s in stages)
    conv, bn, pool = stem.layers
    assert list(pool) == ["k", "pad", "stride"]  # Flux 0.15: MaxPool((3, 3); stride=2, pad=1)
    assert conv.weight.shape == (7, 7, 3, 64) and conv.bias is False and conv.stride == (2, 2)
    assert list(bn) == ["λ", "β", "γ", "μ", "σ²", "ϵ", "momentum", "affine", "track_stats", "active", "chs"]
    np.testing.assert_array_equal(bn["σ²"], sd["bn1.running_var"].numpy())
    # torchvision's conv1 (64, 3, kH, kW) is Metalhead's kernel reversed and flipped
    np.testing.assert_array_equal(conv.weight[::-1, ::-1].transpose(3, 2, 1, 0), sd["conv1.weight"].numpy())
    first = stages[0].layers[0]
    assert list(first) == ["connection", "layers"] and first.layers[0] == ()  # identity shortcut
    down = stages[1].layers[0].layers[0]  # Parallel(+, shortcut, block): shortcut first
    assert down.layers[0].weight.shape == (1, 1, 64, 128)
    np.testing.assert_array_equal(down.layers[1]["μ"], sd["layer2.0.downsample.1.running_mean"].numpy())
    block = stages[3].layers[1].layers[1]
    assert [type(x).__name__ for x in block.layers] == [
        "NamedTuple",
        "NamedTuple",
        "tuple",
        "NamedTuple",
        "NamedTuple",
    ]
    assert block.layers[3].weight.shape == (3, 3, 512, 512)
    assert classifier.layers[2].weight.shape == (1000, 512)
    np.testing.assert_array_equal(classifier.layers[2].weight, sd["fc.weight"].numpy())
    # and back to the same tensors
    back = resnet_to_torchvision(state, sd, 18)
    assert set(back) == set(sd)
    for name, tensor in sd.items():
        if not name.endswith("num_batches_tracked"):
            np.testing.assert_array_equal(back[name], tensor.numpy(), err_msg=name)


@pytest.mark.parametrize(
    ("module", "match"),
    [
        (lambda: nn.LeakyReLU(0.2), "negative_slope=0.2"),
        (lambda: nn.ELU(alpha=2.0), "alpha=2.0"),
        (lambda: nn.Softplus(beta=2.0), "beta=2.0"),
        (lambda: nn.Hardtanh(-2.0, 2.0), "min_val=-2.0"),
        (lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False), "count_include_pad=False"),
        (lambda: nn.AvgPool2d(2, divisor_override=3), "divisor_override=3"),
        (lambda: nn.MaxPool2d(2, dilation=2), "dilation=2"),
        (lambda: nn.MaxPool2d(2, ceil_mode=True), "ceil_mode=True"),
        (lambda: nn.Embedding(5, 3, max_norm=0.5), "max_norm=0.5"),
        (lambda: nn.Flatten(1, 2), "end_dim=2"),
    ],
)
def test_torch_module_options_that_change_the_function_are_refused(module: Any, match: str) -> None:
    """A torch module's options were dropped (``LeakyReLU(0.2)`` read as NNlib's ``leakyrelu``,
    slope 0.01; ``AvgPool2d(count_include_pad=False)`` as Flux's MeanPool, which counts padding):
    the port computed another function. Refused, naming the option."""
    from treexchange._interop._torch import layer_of_module

    with pytest.raises(tx.UnsupportedError, match=match):
        layer_of_module(nn.Sequential(nn.Linear(4, 4), module()))


def test_torch_exact_gelu_is_gelu_erf(tmp_path: Path) -> None:
    """torch's ``GELU()`` is the erf form (NNlib ``gelu_erf``), ``GELU(approximate="tanh")`` NNlib's
    ``gelu``: each ports to its own function (the exact one was read as the tanh form, 4.7e-4 off)."""
    from treexchange._interop._torch import layer_of_module
    from treexchange._port._registry import julia_constructor

    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(0)) * 3
    for approximate, name in (("none", "gelu_erf"), ("tanh", "gelu")):
        m = nn.Sequential(nn.Linear(4, 4), nn.GELU(approximate=approximate)).eval()
        text = julia_constructor(layer_of_module(m), "0.15")
        assert text == f"Chain(Dense(4 => 4, {name}))"
        tx.save(tmp_path / "g.jld2", s=tx.state_dict_to_flux(None, m))
        ported = tx.from_flux(tmp_path / "g.jld2", "s", text)
        with torch.no_grad():
            want = m(x).numpy()
        np.testing.assert_allclose(np.asarray(jax.vmap(ported)(jnp.asarray(x.numpy()))), want, atol=2e-6)


def test_bfloat16_modules_load_and_state_dicts_of_non_tensors_are_refused(tmp_path: Path) -> None:
    """A bfloat16 Flux state loads into a bfloat16 module (``new_tensor`` refused ml_dtypes'
    bfloat16: TypeError), bit for bit; a state_dict entry that is no tensor is a MismatchError
    naming it (it was an AttributeError)."""
    m = nn.Sequential(nn.Linear(3, 2)).to(torch.bfloat16)
    tx.save(tmp_path / "b.jld2", model_state=tx.state_dict_to_flux(None, m))
    state = tx.load(tmp_path / "b.jld2", "model_state")
    fresh = tx.load_into_module(nn.Sequential(nn.Linear(3, 2)).to(torch.bfloat16), state)
    assert torch.equal(fresh[0].weight, m[0].weight) and fresh[0].weight.dtype == torch.bfloat16
    for bad in (None, [[0.0] * 3] * 2, "x", 1.5):
        sd = {**nn.Sequential(nn.Linear(3, 2)).state_dict(), "0.weight": bad}
        with pytest.raises(tx.MismatchError, match=r"0\.weight is a .*, not a tensor"):
            tx.state_dict_to_flux(sd, nn.Sequential(nn.Linear(3, 2)))


def test_a_module_used_twice_is_two_flux_layers_and_differing_states_are_refused() -> None:
    """``Sequential(lin, relu, lin)``: its state_dict names the shared Linear as ``0.*`` and
    ``2.*``; the Flux model has two Dense. It was "tensors left over: 2.weight, 2.bias" (torch's
    ``children()`` names a module once). Both ways port; a state whose two layers differ cannot
    go into the shared module (one would silently win): refused, naming both."""
    lin = nn.Linear(3, 3)
    shared = nn.Sequential(lin, nn.ReLU(), lin)
    state = tx.state_dict_to_flux(shared.state_dict(), shared)
    assert len(state.layers) == 2
    np.testing.assert_array_equal(state.layers[0].weight, state.layers[1].weight)
    assert list(tx.flux_to_state_dict(state, shared)) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    apart = tx.load_into_module(nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3)), state)
    x = torch.randn(4, 3)
    assert torch.equal(apart(x), shared(x))
    tx.load_into_module(shared, state)  # equal layers: fine
    doubled = state.layers[1].replace(weight=state.layers[1].weight * 2)
    other = tx.NamedTuple(layers=(state.layers[0], doubled))
    before = lin.weight.detach().clone()
    with pytest.raises(tx.MismatchError, match=r"0\.weight and 2\.weight are one tensor"):
        tx.load_into_module(shared, other)
    assert torch.equal(lin.weight, before)  # nothing loaded


@pytest.mark.parametrize(
    ("module", "name"),
    [
        (nn.ReLU6, "relu6"),
        (nn.CELU, "celu"),
        (nn.Mish, "mish"),
        (nn.Hardswish, "hardswish"),
        (nn.Hardsigmoid, "hardsigmoid"),
        (nn.Softsign, "softsign"),
        (nn.LogSigmoid, "logsigmoid"),
        (nn.Tanhshrink, "tanhshrink"),
        (nn.Softshrink, "softshrink"),
    ],
)
def test_torch_activations_with_an_nnlib_twin_port(tmp_path: Path, module: Any, name: str) -> None:
    """torch activation modules whose function NNlib has under a name (they were "no Flux
    counterpart here"): folded into the Dense's σ and computing what torch computes."""
    from treexchange._interop._torch import layer_of_module
    from treexchange._port._registry import julia_constructor

    m = nn.Sequential(nn.Linear(4, 4), module()).eval()
    text = julia_constructor(layer_of_module(m), "0.15")
    assert text == f"Chain(Dense(4 => 4, {name}))"
    tx.save(tmp_path / "a.jld2", s=tx.state_dict_to_flux(None, m))
    ported = tx.from_flux(tmp_path / "a.jld2", "s", text)
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1)) * 4
    with torch.no_grad():
        want = m(x).numpy()
    np.testing.assert_allclose(np.asarray(jax.vmap(ported)(jnp.asarray(x.numpy()))), want, atol=2e-6)
    with pytest.raises(tx.UnsupportedError, match=r"lambd=0\.2"):
        layer_of_module(nn.Sequential(nn.Linear(4, 4), nn.Softshrink(0.2)))

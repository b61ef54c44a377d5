"""``treexchange convert`` routes met in a new user's first hour (issue 21): torchvision-style
safetensors with --architecture, JLD2 -> PyTorch state_dict, options that would do nothing, and the
JLD2 -> JLD2 summary and progress line."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import require_fixture

import treexchange as tx
from treexchange._cli import main

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")

TINY = "Chain(Conv((3, 3), 1 => 4, relu), MaxPool((2, 2)), Flux.flatten, Dense(36 => 5, relu), Dense(5 => 3))"
LENET = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


class _TorchvisionStyle(torch.nn.Module):  # type: ignore[misc]
    """Named children as torchvision's AlexNet/VGG have them: ``features`` before ``classifier``
    (registration order), which sorted names put the other way round."""

    def __init__(self) -> None:
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(1, 4, 3), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.classifier = torch.nn.Sequential(
            torch.nn.Dropout(), torch.nn.Linear(36, 5), torch.nn.ReLU(), torch.nn.Linear(5, 3)
        )

    def forward(self, x: Any) -> Any:
        return self.classifier(torch.flatten(self.features(x), 1))


def test_sorted_torchvision_names_pair_with_the_architecture(tmp_path: Path) -> None:
    torch.manual_seed(0)
    module = _TorchvisionStyle()
    path, out = tmp_path / "vision.safetensors", tmp_path / "vision.jld2"
    safetensors_torch.save_file(module.state_dict(), str(path))  # stores the names sorted
    assert main(["convert", str(path), str(out), "--architecture", TINY]) == 0
    expected = tx.state_dict_to_flux(module.state_dict(), TINY)  # the module's own order
    assert tx.values_equal(tx.load(out, "model_state"), expected)
    # and by numbers: the Flux layers' Dense weights are the classifier's Linear weights
    layers = tx.load(out, "model_state").layers
    np.testing.assert_array_equal(layers[3].weight, module.classifier[1].weight.detach().numpy())


def test_jld2_flux_state_to_a_pytorch_state_dict_and_back(tmp_path: Path) -> None:
    lenet = require_fixture("flux-state/silver-bullet_lenet.jld2")
    from _mnist import mnist_test_set

    back = tmp_path / "back.safetensors"
    assert main(["convert", str(lenet), str(back), "--architecture", LENET]) == 0
    state_dict = safetensors_torch.load_file(str(back))
    assert sorted(state_dict) == sorted(f"{i}.{p}" for i in range(5) for p in ("weight", "bias"))
    assert state_dict["0.weight"].shape == (6, 1, 5, 5)  # PyTorch layout, not Flux's (5, 5, 1, 6)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(1, 6, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(6, 16, 5), torch.nn.ReLU(), torch.nn.MaxPool2d(2), torch.nn.Flatten(),
        torch.nn.Linear(256, 120), torch.nn.ReLU(), torch.nn.Linear(120, 84), torch.nn.ReLU(),
        torch.nn.Linear(84, 10),
    )  # fmt: skip
    with torch.no_grad():
        for i, layer in enumerate(m for m in net if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))):
            layer.weight.copy_(state_dict[f"{i}.weight"])
            layer.bias.copy_(state_dict[f"{i}.bias"])
        images, labels = mnist_test_set()
        predicted = net(torch.from_numpy(images)).argmax(1).numpy()
    assert (predicted == labels).mean() >= 0.975  # Flux's own: 97.89%
    # the order is recorded, so the way back needs no search and gives the same Flux.state
    again = tmp_path / "again.jld2"
    assert main(["convert", str(back), str(again), "--architecture", LENET]) == 0
    original = tx.load(lenet, "lenet_state")
    restored = tx.load(again, "model_state")
    for a, b in zip(original.layers, restored.layers):
        if isinstance(a, tx.NamedTuple) and "weight" in a:
            np.testing.assert_array_equal(a.weight, b.weight)


@pytest.mark.parametrize(
    ("out", "options", "flag"),
    [
        ("b.jld2", ["--architecture", TINY], "--architecture"),
        ("b.safetensors", ["--keep-producer"], "--keep-producer"),
        ("b.safetensors", ["--compress", "zstd"], "--compress"),
        ("ckpt.orbax", ["--no-verify"], "--no-verify"),
        ("b.jld2", ["--max-shard-size", "1MB"], "--max-shard-size"),
        ("ckpt.orbax", ["--architecture", TINY], "--architecture"),
    ],
)
def test_an_option_that_does_nothing_on_the_route_is_an_error(
    tmp_path: Path, capsys: Any, out: str, options: list[str], flag: str
) -> None:
    source = tmp_path / "a.jld2"
    tx.save(source, a=np.zeros(2))
    assert main(["convert", str(source), str(tmp_path / out), *options]) == 2
    assert f"{flag} does nothing" in capsys.readouterr().err
    assert not (tmp_path / out).exists()


@pytest.mark.parametrize("to", ["safetensors", "orbax"])
def test_flux_state_refuses_another_output_format(tmp_path: Path, capsys: Any, to: str) -> None:
    """--flux-state writes a JLD2 Flux.state: --to safetensors/orbax used to be ignored silently."""
    source = tmp_path / "a.jld2"
    tx.save(source, a=np.zeros(2))
    out = tmp_path / "b.out"
    assert main(["convert", str(source), str(out), "--flux-state", "--to", to]) == 2
    assert f"--flux-state writes a JLD2 file (Flux.state), not --to {to}" in capsys.readouterr().err
    assert not out.exists()


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_jld2_to_jld2_prints_a_summary_and_draws_progress_on_a_terminal(
    tmp_path: Path, capsys: Any, monkeypatch: Any
) -> None:
    source, target = tmp_path / "in.jld2", tmp_path / "out.jld2"
    tx.save(source, w=np.ones((256, 256), np.float32), b=np.zeros(3))
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    assert main(["convert", str(source), str(target)]) == 0
    summary = capsys.readouterr().out.strip()
    assert summary.startswith(f"{source} -> {target}: 2 value(s), ")
    assert "JLD2 0.2.0, verified" in summary
    assert "\r" in terminal.getvalue() and "100%" in terminal.getvalue()


def test_recorded_order_is_json_in_the_metadata(tmp_path: Path) -> None:
    lenet = require_fixture("flux-state/silver-bullet_lenet.jld2")
    from safetensors import safe_open

    back = tmp_path / "back.safetensors"
    assert main(["convert", str(lenet), str(back), "--architecture", LENET]) == 0
    with safe_open(str(back), framework="numpy") as f:
        order = json.loads(f.metadata()["treexchange.state_dict_order"])
    assert order[:4] == ["0.weight", "0.bias", "1.weight", "1.bias"]

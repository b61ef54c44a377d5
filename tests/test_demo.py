"""``treexchange demo``: writes mlp.jld2, reads it back, validates, prints the tree and the Julia."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import h5py
import numpy as np
import pytest

from treexchange._cli import main
from treexchange._commands.demo import build_mlp, demo

JULIA = [
    "    using Flux, JLD2",
    "    model = Chain(Dense(4 => 16, relu), Dense(16 => 16, relu), Dense(16 => 2))",
    '    Flux.loadmodel!(model, JLD2.load("treexchange-demo/mlp.jld2", "model_state"))',
]


def test_demo_without_arguments_in_a_fresh_directory(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TREEXCHANGE_SHARED"}
    done = subprocess.run(
        [sys.executable, "-c", "import sys; from treexchange._cli import main; sys.exit(main(['demo']))"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout.splitlines()
    assert out[-3:] == JULIA
    assert "arrays identical: True, same output: True" in done.stdout
    assert "0 problem(s)" in done.stdout
    # the tree, as `treexchange inspect` prints it
    assert any(line.startswith("model_state: NamedTuple{(:layers,)") for line in out)
    assert sum("σ: Tuple{}" in line for line in out) == 3
    assert any("weight: Array{Float32, 2}  16×4  float32" in line for line in out)
    # the file, read independently by h5py: Flux Dense weights (out, in), stored reversed
    mlp = build_mlp(0)
    # both files in the demo's own folder, nothing else in the working directory
    assert sorted(p.name for p in tmp_path.iterdir()) == ["treexchange-demo"]
    assert sorted(p.name for p in (tmp_path / "treexchange-demo").iterdir()) == ["lenet.jld2", "mlp.jld2"]
    with h5py.File(tmp_path / "treexchange-demo" / "mlp.jld2") as h5:
        layers = h5["model_state"][()]["layers"]
        assert layers.dtype.names == ("1", "2", "3")
        for i, linear in enumerate(mlp.layers, 1):
            np.testing.assert_array_equal(h5[layers[str(i)]["weight"]][()].T, np.asarray(linear.weight))
            np.testing.assert_array_equal(h5[layers[str(i)]["bias"]][()], np.asarray(linear.bias))


def test_demo_out_option_is_a_folder_created_for_both_files(tmp_path: Path, capsys: Any) -> None:
    assert main(["demo", "--out", str(tmp_path / "new" / "folder")]) == 0
    assert sorted(p.name for p in (tmp_path / "new" / "folder").iterdir()) == ["lenet.jld2", "mlp.jld2"]
    target = tmp_path / "sub dir" / 'we"ird.jld2'
    target.parent.mkdir()
    stream = io.StringIO()
    assert demo(str(target), seed=1, stream=stream) == 0
    text = stream.getvalue()
    assert target.is_file()
    assert 'JLD2.load("' + str(target).replace('"', '\\"') + '", "model_state")' in text


def test_demo_ports_the_julia_lenet_into_equinox_and_measures_it(tmp_path: Path) -> None:
    from conftest import BUNDLED, MNIST_DIR, SHARED, require_fixture

    require_fixture("flux-state/silver-bullet_lenet.jld2")
    stream = io.StringIO()
    assert demo(str(tmp_path / "mlp.jld2"), stream=stream, shared=None if BUNDLED else str(SHARED)) == 0
    text = stream.getvalue()
    assert "into an Equinox CNN" in text
    if MNIST_DIR.is_dir():
        line = next(x for x in text.splitlines() if "MNIST test accuracy:" in x)
        assert float(line.split(":")[1].split("%")[0]) >= 97.5
    assert (
        "       model = Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), "
        "MaxPool((2, 2)), Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
    ) in text.splitlines()
    assert (tmp_path / "lenet.jld2").is_file()


def test_demo_without_the_lenet_still_writes_a_cnn_for_flux(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.delenv("TREEXCHANGE_SHARED", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./shared, no ../shared with the fixture
    stream = io.StringIO()
    assert demo("mlp.jld2", stream=stream, shared=str(tmp_path / "nowhere")) == 0
    text = stream.getvalue()
    assert "LeNet was not found" in text and "MNIST" not in text
    assert 'Flux.loadmodel!(model, JLD2.load("lenet.jld2", "lenet_state"))' in text
    assert (tmp_path / "lenet.jld2").is_file()


def test_demo_help_names_both_files(capsys: Any) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "mlp.jld2" in text and "lenet.jld2" in text and "treexchange-demo" in text


def test_demo_finds_the_bundled_lenet_and_mnist_without_shared(tmp_path: Path, monkeypatch: Any) -> None:
    """A fresh clone has no ../shared: the demo ports the repository's own LeNet, at Flux's 97.89%."""
    from conftest import BUNDLED_DIR

    from treexchange._commands.demo_cnn import find_lenet

    monkeypatch.delenv("TREEXCHANGE_SHARED", raising=False)
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "julia_fixtures").symlink_to(BUNDLED_DIR)
    monkeypatch.chdir(clone)  # no ./shared, no ../shared: as in `pip install . && treexchange demo`
    lenet, mnist_dir = find_lenet(None)
    assert lenet == clone / "julia_fixtures" / "flux-state" / "silver-bullet_lenet.jld2"
    assert mnist_dir == clone / "julia_fixtures" / "mnist"
    stream = io.StringIO()
    assert demo(str(tmp_path / "mlp.jld2"), stream=stream) == 0
    line = next(x for x in stream.getvalue().splitlines() if "MNIST test accuracy:" in x)
    assert "97.89%" in line


def test_demo_with_a_shared_lenet_but_no_mnist_uses_the_bundled_mnist(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A shared folder may hold the LeNet without ``data/mnist``: the accuracy is still measured,
    on the MNIST test set the repository bundles."""
    from conftest import BUNDLED_DIR

    from treexchange._commands.demo_cnn import LENET_FILE, find_lenet

    monkeypatch.delenv("TREEXCHANGE_SHARED", raising=False)
    shared = tmp_path / "shared"
    (shared / LENET_FILE).parent.mkdir(parents=True)
    (shared / LENET_FILE).symlink_to(BUNDLED_DIR / "flux-state" / "silver-bullet_lenet.jld2")
    (shared / "data" / "mnist").mkdir(parents=True)  # the folder, without the files
    clone = tmp_path / "clone"
    clone.mkdir()
    (clone / "julia_fixtures").symlink_to(BUNDLED_DIR)
    monkeypatch.chdir(clone)
    lenet, mnist_dir = find_lenet(str(shared))
    assert lenet == shared / LENET_FILE
    assert mnist_dir == clone / "julia_fixtures" / "mnist"
    # with the data in the shared folder, that copy is the one used
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        (shared / "data" / "mnist" / name).symlink_to(BUNDLED_DIR / "mnist" / name)
    assert find_lenet(str(shared)) == (shared / LENET_FILE, shared / "data" / "mnist")
    (shared / "data" / "mnist" / "t10k-labels-idx1-ubyte.gz").unlink()
    stream = io.StringIO()
    assert demo(str(tmp_path / "mlp.jld2"), stream=stream, shared=str(shared)) == 0
    text = stream.getvalue()
    assert f"Ported the Julia-trained LeNet `lenet_state` of {shared / LENET_FILE}" in text
    line = next(x for x in text.splitlines() if "MNIST test accuracy:" in x)
    assert "97.89%" in line and str(clone / "julia_fixtures" / "mnist") in line
    assert "not found" not in text

"""The CNN part of ``treexchange demo``: a Julia-trained LeNet ported into Equinox, and back.

1. find the LeNet ``Flux.state`` (``flux-state/silver-bullet_lenet.jld2`` of the shared fixtures,
   written by Flux ≤ 0.14: pools and flatten are ``()``);
2. build the Equinox CNN for ``Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), …)`` and restore
   the state into it (``treexchange.load(..., like=cnn, layout=flux_state)``: kernels flipped, Flux's
   column-major flatten kept);
3. classify the MNIST test set with it when the data is there (``data/mnist`` of the shared folder, else
   the copy bundled in ``julia_fixtures/mnist``);
4. write the Equinox model's ``Flux.state`` and print the Julia lines that load it.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .._file import load
from .._port._flux import flux_julia, flux_state
from .._port._spec import Layer
from .._save import save

LENET_FILE = Path("julia_fixtures") / "flux-state" / "silver-bullet_lenet.jld2"
MNIST_DIR = Path("data") / "mnist"
MNIST_FILES = ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz")  # images, labels
# The repository's own copies (julia_fixtures/SOURCES.md): the LeNet at the same place inside the
# folder, the MNIST test set in its mnist/.
BUNDLED_DIR = Path("julia_fixtures")
BUNDLED_LENET = Path("flux-state") / "silver-bullet_lenet.jld2"
ACCEPTED = 0.975  # the original Flux pipeline gives 97.89%


def lenet_layer() -> Any:
    """The LeNet-5 of the FluxML model zoo (``conv_mnist.jl``) as a Flux layer tree."""
    return Layer(
        "Chain",
        children=(
            Layer("Conv", {"kernel": (5, 5), "in": 1, "out": 6, "σ": "relu"}),
            Layer("MaxPool", {"k": (2, 2)}),
            Layer("Conv", {"kernel": (5, 5), "in": 6, "out": 16, "σ": "relu"}),
            Layer("MaxPool", {"k": (2, 2)}),
            Layer("flatten"),
            Layer("Dense", {"in": 256, "out": 120, "σ": "relu"}),
            Layer("Dense", {"in": 120, "out": 84, "σ": "relu"}),
            Layer("Dense", {"in": 84, "out": 10}),
        ),
    )


def find_shared(given: str | None) -> Path | None:
    """The shared data folder: ``given``, ``$TREEXCHANGE_SHARED``, or ``shared``/``../shared`` here."""
    candidates = [given, os.environ.get("TREEXCHANGE_SHARED"), "shared", os.path.join("..", "shared")]
    for candidate in candidates:
        if candidate and (Path(candidate) / LENET_FILE).is_file():
            return Path(candidate)
    return None


def bundled_folders() -> list[Path]:
    """Where a clone of the repository keeps its bundled ``julia_fixtures/``: the current directory
    (``pip install . && treexchange demo`` run in the clone) and the folder above the package (an
    editable install, or running from the source tree). The wheel does not carry these files."""
    package_root = Path(__file__).resolve().parents[2]
    return [Path.cwd() / BUNDLED_DIR, package_root / BUNDLED_DIR]


def has_mnist(folder: Path) -> bool:
    """Whether ``folder`` holds the MNIST test set (both gzipped IDX files)."""
    return all((folder / name).is_file() for name in MNIST_FILES)


def mnist_folder(shared: Path) -> Path:
    """The shared folder's ``data/mnist`` when it holds the test set, else the bundled copy of it (a
    shared folder may carry the LeNet without the data); the shared one, absent, if neither does."""
    own = shared / MNIST_DIR
    if has_mnist(own):
        return own
    return next((b / "mnist" for b in bundled_folders() if has_mnist(b / "mnist")), own)


def find_lenet(given: str | None) -> tuple[Path, Path] | None:
    """(the LeNet file, the MNIST folder): from the shared folder (``find_shared``) when one is
    found, else from the repository's bundled ``julia_fixtures/`` (``bundled_folders``)."""
    if given is None or (Path(given) / LENET_FILE).is_file():
        folder = find_shared(given)
        if folder is not None:
            return folder / LENET_FILE, mnist_folder(folder)
    if given is not None:
        return None  # a folder was named and does not hold the LeNet: do not look elsewhere
    for bundled in bundled_folders():
        lenet = bundled / BUNDLED_LENET
        if lenet.is_file():
            return lenet, bundled / "mnist"
    return None


def mnist(folder: Path) -> tuple[Any, Any] | None:
    """(NCHW float32 images in [0, 1], labels) of the MNIST test set, or None if absent.

    NCHW is the reversed-axes view of the Julia batch ``28×28×1×N`` MLDatasets gives
    (docs/porting.md §Data layout).
    """
    if not has_mnist(folder):
        return None
    images, labels = (folder / name for name in MNIST_FILES)

    def idx(path: Path) -> Any:
        data = gzip.decompress(path.read_bytes())
        ndim = data[3]
        dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
        return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)

    return idx(images)[:, None, :, :].astype(np.float32) / 255, idx(labels)


def accuracy(model: Any, images: Any, labels: Any) -> float:
    """Classification accuracy of a one-sample Equinox model, batched under ``jax.jit``."""
    import jax  # jax: imported when the demo runs, not by every command

    predict = jax.jit(jax.vmap(model))
    hits = 0
    for start in range(0, len(images), 2000):
        logits = np.asarray(predict(images[start : start + 2000]))
        hits += int((logits.argmax(axis=1) == labels[start : start + 2000]).sum())
    return hits / len(images)


def cnn_demo(out_dir: str, shared: str | None, say: Callable[..., None]) -> bool:
    """Run the CNN part; returns whether everything checked out."""
    import jax  # jax: imported when the demo runs, not by every command

    from .._port._eqx import build_equinox  # equinox: imported when the demo runs

    found = find_lenet(shared)
    like = build_equinox(lenet_layer(), key=jax.random.key(0))
    ok = True
    if found is None:
        model = like
        say("4. CNN: the Julia-trained LeNet was not found (run the demo in a clone of the repository,")
        say(f"   which bundles it, or pass --shared DIR, the folder holding {LENET_FILE});")
        say("   using a freshly built Equinox LeNet instead.")
    else:
        path, mnist_dir = found
        model = load(path, "lenet_state", like=like, layout=flux_state)
        say(f"4. Ported the Julia-trained LeNet `lenet_state` of {path} into an Equinox CNN")
        say("   (Conv kernels flipped: Flux convolves, JAX cross-correlates; pools with Flux's stride).")
        data = mnist(mnist_dir)
        if data is None:
            say(f"   MNIST test set not found in {mnist_dir}: accuracy not measured.")
        else:
            acc = accuracy(model, *data)
            ok = acc >= ACCEPTED
            say(f"   MNIST test accuracy: {acc:.2%} on {len(data[1])} images of {mnist_dir}")
            say("   (Flux's own: 97.89%).")
    target = os.path.join(out_dir, "lenet.jld2")
    save(target, lenet_state=flux_state(model, flux="0.14"))
    say(f"   Wrote its Flux.state (Flux ≤ 0.14 form) to {target}; load it in Julia with:")
    for line in flux_julia(model, file=target, name="lenet_state", flux="0.14").splitlines():
        say(f"       {line}")
    return ok

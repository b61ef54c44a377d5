"""The MNIST test set from ../shared/data/mnist, laid out as Flux users feed it (MLDatasets.jl)."""

from __future__ import annotations

import gzip
from functools import cache

import numpy as np
import pytest

from tests.conftest import SHARED

MNIST = SHARED / "data" / "mnist"


@cache
def _read() -> tuple[np.ndarray, np.ndarray]:
    with gzip.open(MNIST / "t10k-images-idx3-ubyte.gz") as f:
        images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)
    with gzip.open(MNIST / "t10k-labels-idx1-ubyte.gz") as f:
        labels = np.frombuffer(f.read(), np.uint8, offset=8)
    return images, labels


def mnist_test_set() -> tuple[np.ndarray, np.ndarray]:
    """``(raw uint8 (N, 28, 28), labels (N,))``, or skip when ../shared/data/mnist is absent."""
    if not (MNIST / "t10k-images-idx3-ubyte.gz").is_file():
        pytest.skip(f"MNIST test set not found at {MNIST} (clone ../shared beside the repository)")
    return _read()


def julia_images(raw: np.ndarray) -> np.ndarray:
    """MLDatasets' layout: a Julia 28×28×1×N Float32 array, ``x[i, j, 1, n] = raw[n, j, i] / 255``."""
    return (raw.transpose(2, 1, 0)[:, :, None, :] / np.float32(255)).astype(np.float32)

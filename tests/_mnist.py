"""The MNIST test set from ../shared/data/mnist, laid out as Flux users feed it (its README)."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
from conftest import MNIST_DIR

MNIST = MNIST_DIR


def _idx(path: Path) -> np.ndarray:
    data = gzip.decompress(path.read_bytes())
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i : 8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, np.uint8, offset=4 + 4 * ndim).reshape(dims)


def mnist_test_set() -> tuple[np.ndarray, np.ndarray]:
    """(images NCHW float32 in [0, 1] = rev of Julia's 28×28×1×N, labels), or skip when absent.

    MLDatasets gives Julia ``x[i, j, 1, n] = raw[n, j, i]``; its reversed-axes view
    (docs/porting.md §Data layout) is ``raw[:, None, :, :] / 255``.
    """
    images, labels = MNIST / "t10k-images-idx3-ubyte.gz", MNIST / "t10k-labels-idx1-ubyte.gz"
    if not (images.is_file() and labels.is_file()):
        pytest.skip(f"MNIST test set not found at {MNIST}")
    raw = _idx(images)
    return (raw[:, None, :, :].astype(np.float32) / 255), _idx(labels).astype(np.int64)


def julia_batch(images: np.ndarray) -> np.ndarray:
    """The Julia-shaped batch (28×28×1×N, as MLDatasets gives it) of channels-first ``images``: ``rev``."""
    return np.ascontiguousarray(images.transpose(range(images.ndim)[::-1]))


def flux_data_mnist() -> tuple[np.ndarray, np.ndarray]:
    """The test set as old Flux (≤ 0.12, ``Flux.Data.MNIST``) fed it: Julia ``x[i, j, 1, n] =
    raw[n, i, j]`` (dim 1 runs down a pixel column, the transpose of MLDatasets'), so the
    channels-first view is ``raw.transpose(0, 2, 1)[:, None] / 255``. BSON-era MNIST models were
    trained on this orientation; fed the MLDatasets one they score ~15%."""
    images, labels = mnist_test_set()
    return np.ascontiguousarray(images.transpose(0, 1, 3, 2)), labels

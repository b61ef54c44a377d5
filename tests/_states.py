"""Helpers for tests that need a Julia-side state the model did not produce."""

from __future__ import annotations

from typing import Any

import jax
import numpy as np


def scaled(state: Any, seed: int) -> Any:
    """``state`` with every float array scaled at random (by 0.5-1.5, so variances stay positive)."""
    rng = np.random.default_rng(seed)
    return jax.tree_util.tree_map(
        lambda a: (
            (a * rng.uniform(0.5, 1.5, a.shape)).astype(a.dtype)
            if isinstance(a, np.ndarray) and a.dtype.kind == "f"
            else a
        ),
        state,
    )

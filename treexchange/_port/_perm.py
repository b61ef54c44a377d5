"""Exact element permutations between a Julia-shaped array and a framework's array, with inverses.

A :class:`Perm` only moves elements (transpose, flip, reshape and their compositions); it never
computes. ``forward`` takes the array as ``treexchange.load`` returns it (Julia shape,
docs/porting.md §Data layout) to the framework's layout; ``inverse`` goes back; ``julia_shape``
tells the Julia shape of a framework shape without touching data (the restore checks shapes before
reading anything).

Example:
    >>> import numpy as np
    >>> w = np.arange(24.0).reshape(2, 3, 4)
    >>> p = Compose(REV, Flip((1,)))
    >>> np.array_equal(p.inverse(p.forward(w)), w), p.julia_shape((4, 3, 2))
    (True, (2, 3, 4))
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np


class Perm:
    """Julia-shaped array <-> framework array, exactly (element moves only)."""

    def forward(self, a: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def inverse(self, a: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError

    def julia_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class Same(Perm):
    """Identical index order (Dense weight in Equinox, norm scales, biases)."""

    def forward(self, a: np.ndarray) -> np.ndarray:
        return a

    def inverse(self, a: np.ndarray) -> np.ndarray:
        return a

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    def julia_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)


@dataclasses.dataclass(frozen=True)
class Reverse(Perm):
    """All axes reversed: ``rev(w)`` of docs/porting.md §Data layout (same memory, Julia <-> C order)."""

    def forward(self, a: np.ndarray) -> np.ndarray:
        return a.transpose(tuple(range(a.ndim))[::-1])

    inverse = forward

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)[::-1]

    julia_shape = framework_shape


@dataclasses.dataclass(frozen=True)
class Transpose(Perm):
    """``forward(a) = a.transpose(axes)``."""

    axes: tuple[int, ...]

    def forward(self, a: np.ndarray) -> np.ndarray:
        return a.transpose(self.axes)

    def inverse(self, a: np.ndarray) -> np.ndarray:
        return a.transpose(tuple(int(i) for i in np.argsort(self.axes)))

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape[i] for i in self.axes)

    def julia_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        out = [0] * len(shape)
        for position, axis in enumerate(self.axes):
            out[axis] = shape[position]
        return tuple(out)


@dataclasses.dataclass(frozen=True)
class Flip(Perm):
    """Reverse the order along ``axes`` (a true convolution's kernel vs a cross-correlation's)."""

    axes: tuple[int, ...]

    def forward(self, a: np.ndarray) -> np.ndarray:
        return np.flip(a, self.axes) if self.axes else a

    inverse = forward

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return tuple(shape)

    julia_shape = framework_shape


@dataclasses.dataclass(frozen=True)
class Reshape(Perm):
    """Row-major reshape between two fixed shapes (a split or merge of contiguous axes)."""

    source: tuple[int, ...]
    target: tuple[int, ...]

    def forward(self, a: np.ndarray) -> np.ndarray:
        return np.reshape(a, self.target)

    def inverse(self, a: np.ndarray) -> np.ndarray:
        return np.reshape(a, self.source)

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return self.target if tuple(shape) == self.source else _mismatch(shape, self.source)

    def julia_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        # A shape that is not ``target`` is passed through unchanged so that the restore reports
        # the real size difference against the file instead of failing here.
        return self.source if tuple(shape) == self.target else tuple(shape)


@dataclasses.dataclass(frozen=True)
class Compose(Perm):
    """``forward`` applies ``steps`` left to right; ``inverse`` undoes them right to left."""

    steps: tuple[Perm, ...]

    def __init__(self, *steps: Perm) -> None:
        object.__setattr__(self, "steps", tuple(steps))

    def forward(self, a: np.ndarray) -> np.ndarray:
        for step in self.steps:
            a = step.forward(a)
        return a

    def inverse(self, a: np.ndarray) -> np.ndarray:
        for step in reversed(self.steps):
            a = step.inverse(a)
        return a

    def framework_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for step in self.steps:
            shape = step.framework_shape(shape)
        return shape

    def julia_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for step in reversed(self.steps):
            shape = step.julia_shape(shape)
        return shape


def _mismatch(shape: Any, expected: Any) -> tuple[int, ...]:
    raise ValueError(f"array of shape {tuple(shape)} where {tuple(expected)} was expected")


SAME = Same()
REV = Reverse()


def spatial_flip(nsp: int, first: int) -> Flip:
    """Flip the ``nsp`` spatial axes that start at axis ``first``."""
    return Flip(tuple(range(first, first + nsp)))


def conv_weight_perm(kind: str, args: dict[str, Any]) -> Perm:
    """Julia kernel -> Equinox and PyTorch ``weight`` for Conv/DepthwiseConv (flip), CrossCor,
    ConvTranspose (no flip)."""
    n = len(args["kernel"])
    if kind == "CrossCor":
        return REV
    if kind != "ConvTranspose":
        return Compose(REV, spatial_flip(n, 2))  # true convolution -> cross-correlation
    # Julia (k…, Cout÷G, Cin) -> rev (Cin, Cout÷G, k_rev…) -> (G, Cin÷G, Cout÷G, k…) -> (G, Cout÷G, Cin÷G, k…)
    g, cin, cout = int(args["groups"]), int(args["in"]), int(args["out"])
    k = tuple(args["kernel"])[::-1]
    rev_shape = (cin, cout // g, *k)
    split = (g, cin // g, cout // g, *k)
    swapped = (0, 2, 1, *range(3, 3 + n))
    return Compose(
        REV,
        Reshape(rev_shape, split),
        Transpose(swapped),
        Reshape((g, cout // g, cin // g, *k), (cout, cin // g, *k)),
    )

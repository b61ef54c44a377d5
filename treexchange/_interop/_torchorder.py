"""The module order of a ``state_dict`` whose names were sorted (a safetensors file), recovered
with the help of the Flux architecture it is matched to.

``safetensors.torch.save_file`` stores tensors sorted by name, so a torchvision-style
``features.0.weight ... classifier.1.weight`` comes back with ``classifier`` first. What the names
still tell: modules numbered by a ``Sequential`` (``features.0``, ``features.3``) keep the order of
their numbers; named siblings (``features``/``classifier``, ``conv1``/``bn1``/``layer1``/``fc``)
may have been registered in any order. The order is the one in which each module, taken in turn,
fits the next Flux layer with arrays (the same tensor names and shapes the layer rules ask for),
found by a depth-first search that tries names in natural order first ("conv2" before "conv10"),
so that equal-shaped siblings keep their natural order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._torch import IGNORED, _groups, _shape, array_layers, as_layer, torch_order, torch_params

_SEARCH_BUDGET = 200_000
"""Steps of the search before it gives up (the caller then reports the mismatches of name order)."""


def _natural(part: str) -> tuple[Any, ...]:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", part) if t)


def _must_precede(a: list[str], b: list[str]) -> bool:
    """Whether module path ``a`` comes before ``b`` whatever the registration: they first differ
    at two numbers (a Sequential's indices), the smaller first; or ``a`` is ``b``'s ancestor."""
    for x, y in zip(a, b):
        if x != y:
            return x.isdigit() and y.isdigit() and int(x) < int(y)
    return len(a) < len(b)


def architecture_order(state_dict: Mapping[str, Any], architecture: Any) -> dict[str, Any]:
    """``state_dict`` reordered so that its modules pair with ``architecture``'s layers in turn.

    Falls back to :func:`torch_order` (numbers as numbers) when no order fits; matching then reports
    every mismatch.

    Example:
        >>> import numpy as np
        >>> sd = {"classifier.0.weight": np.ones((2, 4)), "classifier.0.bias": np.ones(2),
        ...       "features.0.weight": np.ones((4, 3)), "features.0.bias": np.ones(4)}
        >>> list(architecture_order(sd, "Chain(Dense(3 => 4), Dense(4 => 2))"))[:2]
        ['features.0.weight', 'features.0.bias']
    """
    fallback = torch_order(state_dict)
    groups = _groups(fallback)
    sites = array_layers(as_layer(architecture), ())
    if len(groups) != len(sites):
        return fallback
    wanted = [{p.torch: p.shape for p in torch_params(site.layer)} for site in sites]
    have = [{n: tuple(_shape(t)) for n, t in tensors.items() if n not in IGNORED} for _, tensors in groups]
    paths = [prefix.split(".") if prefix else [] for prefix, _ in groups]
    preference = sorted(range(len(groups)), key=lambda i: tuple(_natural(p) for p in paths[i]))
    chosen: list[int] = []
    used = [False] * len(groups)
    budget = [_SEARCH_BUDGET]

    def search() -> bool:
        if len(chosen) == len(groups):
            return True
        budget[0] -= 1
        if budget[0] < 0:
            return False
        site = len(chosen)
        for i in preference:
            if used[i] or have[i] != wanted[site]:
                continue
            if any(not used[j] and j != i and _must_precede(paths[j], paths[i]) for j in range(len(groups))):
                continue
            used[i] = True
            chosen.append(i)
            if search():
                return True
            chosen.pop()
            used[i] = False
        return False

    if not search():
        return fallback
    order = {prefix: rank for rank, prefix in enumerate(groups[i][0] for i in chosen)}
    grouped = dict(groups)

    def group_of(name: str) -> str:
        prefix = name.rpartition(".")[0]
        while prefix not in grouped:  # an attention's out_proj.* joined its parent's group
            prefix = prefix.rpartition(".")[0]
        return prefix

    return {name: fallback[name] for name in sorted(fallback, key=lambda n: order[group_of(n)])}

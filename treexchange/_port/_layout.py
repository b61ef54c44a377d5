"""Helpers every target shares and no framework owns: axis reversal, padding between Flux's and
JAX's forms, the LayerNorm ϵ rule, and reading a sequence of modules as a Flux ``Chain``.

They sit below the targets (``_eqx``, ``_nnx``, ``_linen``, ``_interop/_torch``) so that no target
imports another. The rules are in ``docs/porting.md`` (§Conventions).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._errors import PathSegment, TreePath, UnsupportedError
from ._activations import ELEMENTWISE
from ._registry import ACTIVATED
from ._spec import Layer
from ._state import Port


def rev(t: Any) -> tuple[int, ...]:
    """A tuple over Julia dims as the tuple over Python axes (reversed), as ints."""
    return tuple(int(v) for v in t)[::-1]


def python_padding(pad: Sequence[int]) -> list[tuple[int, int]]:
    """Flux ``(lo₁, hi₁, lo₂, hi₂, …)`` over Julia dims -> Python per-axis pairs (spatial order reversed)."""
    n = len(pad) // 2
    return [(int(pad[2 * k]), int(pad[2 * k + 1])) for k in reversed(range(n))]


def julia_pad(pairs: Any, path: TreePath = ()) -> tuple[int, ...]:
    """Python per-axis ``(lo, hi)`` pairs -> Flux's ``(lo₁, hi₁, …)`` over Julia dims; a padding
    string (``"SAME"``) is refused, since Flux's ``SamePad`` splits the other way."""
    if isinstance(pairs, str):
        raise UnsupportedError(f"padding={pairs!r}: Flux needs explicit padding (SamePad differs)", path=path)
    out: list[int] = []
    for lo, hi in reversed(list(pairs)):
        out += [int(lo), int(hi)]
    return tuple(out)


def explicit_pairs(padding: Any, n: int, path: TreePath) -> list[tuple[int, int]]:
    """A Flax padding (``"VALID"``, an int, ints or pairs) as ``n`` explicit ``(lo, hi)`` pairs."""
    if isinstance(padding, str):
        if padding.upper() == "VALID":
            return [(0, 0)] * n
        raise UnsupportedError(
            f"padding={padding!r}: Flux needs explicit padding (SamePad differs)", path=path
        )
    if isinstance(padding, int):
        return [(padding, padding)] * n
    return [(int(p), int(p)) if isinstance(p, int) else (int(p[0]), int(p[1])) for p in padding]


def same_padding(
    padding: str, kernel: Sequence[int], strides: Sequence[int], dilation: Sequence[int], path: Any = ()
) -> list[tuple[int, int]]:
    """JAX's ``"SAME"`` padding of a stride-1 conv as explicit ``(lo, hi)`` pairs (Python axis order).

    The total ``d(k−1)`` is split with the larger half last (``"SAME_LOWER"``: first, as Flux's own
    ``SamePad``). With a stride above 1 the split depends on the input size, which Flux's static
    ``pad`` cannot follow: refused.

    Example:
        >>> same_padding("SAME", (3, 4), (1, 1), (1, 1))
        [(1, 1), (1, 2)]
    """
    if set(strides) != {1}:
        raise UnsupportedError(
            f"padding={padding!r} with strides {tuple(strides)}: the padding depends on the input "
            "size, which a Flux pad cannot follow; give explicit pairs",
            path=tuple(path),
        )
    pairs = []
    for k, d in zip(kernel, dilation, strict=True):
        total = int(d) * (int(k) - 1)
        small, large = total // 2, total - total // 2
        pairs.append((large, small) if padding.upper() == "SAME_LOWER" else (small, large))
    return pairs


def transpose_padding(a: Mapping[str, Any]) -> list[tuple[int, int]]:
    """Flux ConvTranspose pad/outpad -> ``lax.conv_transpose`` pairs: ``(d(k−1) − lo, d(k−1) − hi + outpad)``
    per Python spatial axis (``docs/porting.md`` §Padding)."""
    n = len(a["kernel"])
    pairs = []
    for j in reversed(range(n)):
        reach = a["dilation"][j] * (a["kernel"][j] - 1)
        pairs.append((reach - a["pad"][2 * j], reach - a["pad"][2 * j + 1] + a["outpad"][j]))
    return pairs


def flux_transpose_pads(
    padding: Any, args: Mapping[str, Any], path: TreePath
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Inverse of :func:`transpose_padding`; a negative ``hi`` pad is read as output padding.

    ``"VALID"`` and ``"SAME"`` are the pairs ``lax.conv_transpose`` pads the dilated input with,
    not zeros: for a dilated kernel of ``k = d(k₀−1)+1``, VALID pads ``(k−1, max(k−1, s−1))``
    (so Flux's ``pad = 0``, ``outpad = max(0, s−1−d(k₀−1))``) and SAME ``pad_len = k+s−2``, its
    first part ``k−1`` when ``s > k−1``, else ``⌈pad_len/2⌉`` (its output is the input times ``s``).
    """
    n = len(args["kernel"])
    if isinstance(padding, str):
        mode = padding.upper()
        if mode not in ("VALID", "SAME"):
            raise UnsupportedError(f"ConvTranspose padding={padding!r}: give explicit pairs", path=path)
        pairs = []
        for j in reversed(range(n)):  # (Python axis order: Julia's reversed)
            k = args["dilation"][j] * (args["kernel"][j] - 1) + 1
            s_ = args["stride"][j]
            if mode == "VALID":
                pairs.append((k - 1, max(k - 1, s_ - 1)))
            else:
                total = k + s_ - 2
                first = k - 1 if s_ > k - 1 else -(-total // 2)
                pairs.append((first, total - first))
    else:
        pairs = explicit_pairs(padding, n, path)
    pad: list[int] = []
    outpad: list[int] = []
    for j, (lo, hi) in zip(range(n), reversed(pairs)):
        reach = args["dilation"][j] * (args["kernel"][j] - 1)
        p_lo, p_hi = reach - lo, reach - hi
        extra = max(0, -p_hi)
        pad += [p_lo, p_hi + extra]
        outpad.append(extra)
    return tuple(pad), tuple(outpad)


def layernorm_eps(epsilon: float, era: str) -> float:
    """Flux LayerNorm ϵ -> the ``eps`` of ``(x−μ)/√(σ²+eps)`` (``docs/porting.md`` §LayerNorm ϵ)."""
    if era == "0.14":
        raise UnsupportedError(
            "Flux ≤ 0.14 LayerNorm divides by (σ + ϵ), which no Equinox/Flax LayerNorm computes; "
            "port it with flux='0.15'"
        )
    return float(epsilon) ** 2  # Flux 0.15–0.16.10: √(σ² + ϵ²)


def layernorm_0_15_message() -> str:
    return (
        "LayerNormStdEps is Flux ≤ 0.14's LayerNorm ((x−μ)/(σ+ϵ)); Flux ≥ 0.15 computes "
        "√(σ²+ϵ²) instead: use flux='0.14'"
    )


def layernorm_0_14_message() -> str:
    return (
        "Flux ≤ 0.14 LayerNorm divides by (σ + ϵ), which no Equinox/Flax LayerNorm computes; use flux='0.15'"
    )


def chain_port(
    items: list[Any],
    path: TreePath,
    read: Callable[[Any, TreePath], Port],
    own_entry: Callable[[Any], bool],
    keys: Sequence[PathSegment] | None = None,
) -> Port:
    """The Flux ``Chain`` of a model's sequence of layers (the Equinox, Flax nnx and linen readers),
    each item read by ``read`` at the path segment ``keys[i]`` (default ``1, 2, …`` as in Flux). An
    elementwise function right after a layer that takes an activation and has none (an Equinox
    ``Lambda(relu)`` after a ``Conv``) becomes that layer's ``σ``, as Flux writes ``Conv(…, relu)``;
    an item for which ``own_entry`` holds (the target's ``Function`` layer, the author's own Chain
    entry) stays an entry of its own."""
    ports: list[Port] = []
    folded: set[int] = set()
    for i, item in enumerate(items, 1):
        port = read(item, (*path, keys[i - 1] if keys is not None else i))
        prev = ports[-1] if ports else None
        name = port.layer.arg("name") if port.layer.kind == "function" else None
        if (
            prev is not None
            and not own_entry(item)
            and id(prev) not in folded
            and prev.layer.kind in ACTIVATED
            and prev.layer.arg("σ", "identity") == "identity"
            and name in ELEMENTWISE
        ):
            prev.layer = dataclasses.replace(prev.layer, args={**prev.layer.args, "σ": name})
            folded.add(id(prev))  # Conv(…, relu): one Flux layer
            continue
        ports.append(port)
    return Port(Layer("Chain", {}, tuple(p.layer for p in ports)), children=tuple(ports))


def is_linen_model(model: Any) -> bool:
    """``(linen module, variables)``: the pair that stands for a Flax linen model (asked without
    importing flax: a linen module exists only once flax.linen is loaded)."""
    linen = sys.modules.get("flax.linen")
    return (
        linen is not None
        and isinstance(model, tuple)
        and len(model) == 2
        and isinstance(model[0], linen.Module)
        and isinstance(model[1], Mapping)
    )

"""The layer description every porting path shares: a Flux model as Flux constructs it.

A :class:`Layer` says *what* a Flux layer is (its constructor and hyper-parameters, in Julia's own
conventions), never how a Python framework stores it. Three producers make these trees and every
consumer reads only them:

- the architecture text parser (``Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), ...)``),
- whole-model JLD2 files (Flux structs, whose types record every layer and its activation),
- Python models (an Equinox or Flax model read back into the Flux model it corresponds to);

and the consumers are the layer rules (state <-> framework arrays), the model builders (a runnable
Equinox or Flax model from a tree) and ``flux_julia`` (the Julia constructor text).

Conventions of ``Layer.args`` (one place, so that every producer and consumer agrees):

- Tuples over spatial dimensions are in **Julia order** (Julia dim 1 first): ``kernel``, ``stride``,
  ``dilation``, ``k`` (pools), ``out`` (adaptive pools), ``size`` (LayerNorm).
- ``pad`` is always the full ``2N`` form ``(lo₁, hi₁, lo₂, hi₂, …)`` over Julia dims 1, 2, …, as
  NNlib expands it (a symmetric ``N``-tuple or an Int is expanded by the producer).
- Channel counts are plain ints: ``in``, ``out`` (``Conv((k…), in => out)``, ``Dense(in => out)``).
- ``σ`` is the NNlib name of the activation (``"identity"``, ``"relu"``, ``"sigmoid"`` …); a function used
  as a Chain entry is ``Layer("function", {"name": "softmax"})``.
- Booleans are Python bools (``bias``, ``affine``, ``track_stats``); floats are Python floats
  (``ϵ``, ``momentum``, ``p``), stored with the Unicode names Flux uses.

Example:
    >>> from treexchange._port._spec import Layer
    >>> conv = Layer("Conv", {"kernel": (5, 5), "in": 1, "out": 6, "σ": "relu"})
    >>> Layer("Chain", children=(conv, Layer("MaxPool", {"k": (2, 2)}), Layer("flatten"))).kinds()
    ['Chain', 'Conv', 'MaxPool', 'flatten']
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

# Flux eras whose Flux.state differs (Functors 0.4 vs 0.5, Recur removed): docs/porting.md §Flux eras.
FLUX_ERAS = ("0.14", "0.15")
DEFAULT_FLUX_ERA = "0.15"


@dataclasses.dataclass(frozen=True)
class Layer:
    """One Flux layer: its constructor name, hyper-parameters (Julia conventions) and sub-layers.

    Args:
        kind: the Flux constructor (``"Conv"``, ``"Chain"``, ``"function"`` for a bare function).
        args: hyper-parameters, see the module docstring for their conventions.
        children: sub-layers of a container (``Chain``'s layers, ``Parallel``'s branches,
            ``SkipConnection``'s wrapped layer, ``RNN``'s cell when one is spelt out).
        names: for ``Chain(a = …, b = …)``: the keyword names of ``children``, else ``None``.
    """

    kind: str
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    children: tuple[Layer, ...] = ()
    names: tuple[str, ...] | None = None

    def arg(self, name: str, default: Any = None) -> Any:
        """``args[name]`` or ``default``."""
        return self.args.get(name, default)

    def walk(self) -> Iterator[Layer]:
        """This layer and every sub-layer, in pre-order."""
        yield self
        for child in self.children:
            yield from child.walk()

    def kinds(self) -> list[str]:
        """The ``kind`` of every layer in pre-order (handy in tests and error messages)."""
        return [layer.kind for layer in self.walk()]

"""Metalhead's ``ResNet(18)`` / ``ResNet(34)`` as a Flux model, and torchvision ``state_dict``\\ s for it.

The architecture follows Metalhead.jl's source (v0.9.6, FluxML/Metalhead.jl at 1d8f8a7):

- ``src/convnets/resnets/resnet.jl``: ``struct ResNet; layers; end`` with ``@functor``, so
  ``Flux.state(ResNet(18)) = (layers = Flux.state(layers),)``; ``RESNET_CONFIGS[18] =
  (basicblock, [2, 2, 2, 2])``, ``[34] = (basicblock, [3, 4, 6, 3])``.
- ``src/convnets/builders/resnet.jl`` ``build_resnet``: ``Chain(backbone, classifier)`` with
  ``backbone = Chain(stem, stages...)``.
- ``src/convnets/resnets/core.jl`` ``resnet_stem`` (default stem): ``Chain(Conv((7, 7), 3 => 64;
  stride = 2, pad = 3, bias = false), BatchNorm(64, relu), MaxPool((3, 3); stride = 2, pad = 1))``;
  ``basicblock``: ``Chain(Conv((3, 3), in => planes; stride, pad = 1, bias = false), BatchNorm(planes),
  relu, Conv((3, 3), planes => planes; pad = 1, bias = false), BatchNorm(planes))`` (``conv_norm`` in
  ``src/layers/conv.jl``: the conv has no bias when a norm follows; DropBlock/StochasticDepth with
  probability ``nothing`` are ``identity`` and filtered out); shortcuts ``:B`` =
  ``(downsample_conv, downsample_identity)``: ``Chain(Conv((1, 1), in => out; pad = SamePad(),
  stride, bias = false), BatchNorm(out))`` where the stride or width changes, else ``identity``;
  ``resnet_stride``: stride 2 for the first block of stages 2–4; ``resnet_planes``: 64·2^(stage-1).
- ``src/convnets/builders/stages.jl`` ``cnn_stages``: each stage a ``Chain`` of blocks, each block
  ``Parallel(connection, downsample, block)`` — shortcut first.
- ``src/layers/classifier.jl`` ``create_classifier``: ``Chain(AdaptiveMeanPool((1, 1)),
  MLUtils.flatten, Dense(512 => nclasses))``.

The connection ``addact$relu`` (a PartialFunctions closure) is recorded as ``()``, as the layer rules
record every Parallel connection (docs/porting.md §What Flux.state holds: Flux.state keeps no functions); what
``Flux.state`` stores for that closure is one of the open questions only running Julia settles.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from .._port._spec import DEFAULT_FLUX_ERA, Layer
from .._values import NamedTuple
from ._torch import as_layer, flux_to_state_dict, state_dict_to_flux

RESNET_CONFIGS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}


def resnet_architecture(depth: int = 18, *, nclasses: int = 1000) -> str:
    """The Flux model inside Metalhead's ``ResNet(depth)`` (its ``layers`` field), as Flux prints it.

    Example:
        >>> text = resnet_architecture(18)
        >>> text.count("Parallel("), text.count("Conv(")
        (8, 20)
    """
    repeats = RESNET_CONFIGS[depth]
    stem = (
        "Chain(Conv((7, 7), 3 => 64, stride=2, pad=3, bias=false), BatchNorm(64, relu), "
        "MaxPool((3, 3), stride=2, pad=1))"
    )
    stages = []
    inplanes = 64
    for stage, n in enumerate(repeats, 1):
        planes = 64 * 2 ** (stage - 1)
        blocks = []
        for block in range(1, n + 1):
            stride = 2 if stage > 1 and block == 1 else 1
            if stride != 1 or inplanes != planes:
                shortcut = (
                    f"Chain(Conv((1, 1), {inplanes} => {planes}, pad=SamePad(), stride={stride}, "
                    f"bias=false), BatchNorm({planes}))"
                )
            else:
                shortcut = "identity"
            body = (
                f"Chain(Conv((3, 3), {inplanes} => {planes}, stride={stride}, pad=1, bias=false), "
                f"BatchNorm({planes}), relu, Conv((3, 3), {planes} => {planes}, pad=1, bias=false), "
                f"BatchNorm({planes}))"
            )
            blocks.append(f"Parallel(+, {shortcut}, {body})")
            inplanes = planes
        stages.append(f"Chain({', '.join(blocks)})")
    backbone = f"Chain({stem}, {', '.join(stages)})"
    classifier = f"Chain(AdaptiveMeanPool((1, 1)), MLUtils.flatten, Dense({inplanes} => {nclasses}))"
    return f"Chain({backbone}, {classifier})"


def resnet_layer(depth: int = 18, *, nclasses: int = 1000) -> Layer:
    """:func:`resnet_architecture` parsed into the Layer tree (Flux's defaults filled in)."""
    return as_layer(resnet_architecture(depth, nclasses=nclasses))


def torchvision_to_resnet(
    state_dict: Mapping[str, Any], depth: int = 18, *, nclasses: int = 1000, flux: str = DEFAULT_FLUX_ERA
) -> NamedTuple:
    """``Flux.state(ResNet(depth))`` from a torchvision ``resnet18``/``resnet34`` ``state_dict``
    (``conv1``, ``bn1``, ``layer1.0.conv1`` … ``fc``), matched by the layer rules."""
    layer = resnet_layer(depth, nclasses=nclasses)
    inner = state_dict_to_flux(state_dict, layer, flux=flux, root=("model_state", "layers"))
    return NamedTuple(layers=inner)


def resnet_to_torchvision(
    state: Any, names: Mapping[str, Any], depth: int = 18, *, nclasses: int = 1000
) -> dict[str, np.ndarray]:
    """The torchvision tensors (keyed like ``names``, e.g. ``model.state_dict()``) of a
    ``Flux.state(ResNet(depth))``."""
    layer = resnet_layer(depth, nclasses=nclasses)
    return flux_to_state_dict(state["layers"], layer, names=names, root=("model_state", "layers"))

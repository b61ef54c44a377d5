"""from_flux's front end: the file (+ architecture text) -> (Layer tree, Flux.state), checked for sizes."""

from __future__ import annotations

import pytest
from conftest import require_fixture, require_one_of_table

from treexchange import ConversionError
from treexchange._port._fromflux import read_flux_source

LENET = (
    "Chain(Conv((5, 5), 1 => 6, relu), MaxPool((2, 2)), Conv((5, 5), 6 => 16, relu), MaxPool((2, 2)), "
    "Flux.flatten, Dense(256 => 120, relu), Dense(120 => 84, relu), Dense(84 => 10))"
)


def test_state_file_with_architecture() -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    layer, state = read_flux_source(path, "lenet_state", LENET)
    assert layer.kinds()[:3] == ["Chain", "Conv", "MaxPool"]
    assert state["layers"][0]["weight"].shape == (5, 5, 1, 6)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            LENET.replace("Dense(256 => 120", "Dense(256 => 100"),
            r"weight of size 100×256, the state has 120×256 \(at lenet_state.layers\[6\].weight\)",
        ),
        (
            LENET.replace("1 => 6", "3 => 6"),
            r"weight of size 5×5×3×6, the state has 5×5×1×6 \(at lenet_state.layers\[1\].weight\)",
        ),
        (
            LENET.replace(", Dense(84 => 10)", ""),
            r"the architecture's Chain has 7 layers, the state 8 \(at lenet_state.layers\)",
        ),
        ("Chain(enc = Dense(2 => 3))", r"names its layers \['enc'\], the state's layers are positional"),
    ],
)
def test_a_wrong_architecture_is_named_with_the_file_path(text: str, message: str) -> None:
    path = require_fixture("flux-state/silver-bullet_lenet.jld2")
    with pytest.raises(ConversionError, match=message):
        read_flux_source(path, "lenet_state", text)


# Whole Flux models (structs, not Flux.state): the file of ../shared the test was written for, then a
# bundled one (julia_fixtures/SOURCES.md); each with its name in the file, its layers, its Flux text.
WHOLE_MODELS = {
    "flux-model/hwdr_mlp.jld2": (
        "mlp",
        ["Chain", "Dense", "Dense", "Dense", "function"],
        "Chain(Dense(784 => 16, relu), Dense(16 => 16, relu), Dense(16 => 10), softmax)",
    ),
    "flux-model/kitml_example_model.jld2": (
        "nn",
        ["Chain", "Dense", "Dense", "Dense", "Dense"],
        "Chain(Dense(4 => 16, relu), Dense(16 => 16, relu), Dense(16 => 16, relu), Dense(16 => 1))",
    ),
}


def test_whole_model_needs_no_text_and_a_state_needs_one() -> None:
    path, (name, kinds, text) = require_one_of_table(WHOLE_MODELS)
    layer, _ = read_flux_source(path, name)
    assert layer.kinds() == kinds
    # A whole model can also be paired with a text; its arrays are checked against it.
    layer2, _ = read_flux_source(path, name, text)
    assert layer2 == layer
    with pytest.raises(ConversionError, match="pass architecture="):
        read_flux_source(require_fixture("flux-state/silver-bullet_lenet.jld2"), "lenet_state")

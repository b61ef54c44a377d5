# The Flux models whose `Flux.state` the corpus holds (shared by generate.jl and verify.jl).
# A fresh model of the same architecture is what verify.jl loads the treexchange-written
# state into with `Flux.loadmodel!`.
using Flux

const MODELS = Dict{String,Function}(
    "dense" => () -> Chain(Dense(4 => 8, relu), Dense(8 => 2)),
    "conv" => () -> Chain(Conv((3, 3), 1 => 4, relu), MaxPool((2, 2)), Flux.flatten, Dense(36 => 10)),
    "batchnorm" => () -> Chain(Dense(4 => 8), BatchNorm(8, relu), Dense(8 => 2)),
    "layernorm" => () -> Chain(Dense(4 => 8), LayerNorm(8), Dense(8 => 2)),
    "embedding" => () -> Chain(Embedding(10 => 4), Dense(4 => 2)),
    "lstm" => () -> Chain(LSTM(3 => 5), Dense(5 => 2)),
    "dropout" => () -> Chain(Dense(4 => 8), Dropout(0.5), Dense(8 => 2)),
    "named" => () -> Chain(enc = Dense(4 => 3, tanh), dec = Dense(3 => 4)),
)

# The Flux equivalent of the Equinox MLP write_python_side.py saves (4 -> 16 -> 16 -> 2, relu).
eqx_mlp() = Chain(Dense(4 => 16, relu), Dense(16 => 16, relu), Dense(16 => 2))

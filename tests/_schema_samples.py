"""Hand-built state trees for the schema tests (value model), shaped like what Flux and Lux save.

``flux_chain_state()`` is ``Flux.state(Chain(Conv((3, 3), 1 => 4, relu), BatchNorm(4), MaxPool((2, 2)),
Flux.flatten, Dense(36 => 10)))``; ``lux_ps_st()`` is the ``ps``/``st`` pair of
``Chain(Dense(3 => 8, tanh), BatchNorm(8), Dense(8 => 1))``.
"""

from __future__ import annotations

import numpy as np

from treexchange import NamedTuple, Singleton


def _f32(rng: np.random.Generator, *shape: int) -> np.ndarray:
    # Julia-shaped, column-major like the reader returns.
    return np.asfortranarray(rng.standard_normal(shape).astype(np.float32))


def flux_dense(rng: np.random.Generator, n_in: int, n_out: int) -> NamedTuple:
    return NamedTuple(weight=_f32(rng, n_out, n_in), bias=_f32(rng, n_out), σ=())


def flux_conv(rng: np.random.Generator) -> NamedTuple:
    return NamedTuple(
        σ=(),
        weight=_f32(rng, 3, 3, 1, 4),
        bias=_f32(rng, 4),
        stride=(np.int64(1), np.int64(1)),
        pad=(np.int64(0), np.int64(0), np.int64(0), np.int64(0)),
        dilation=(np.int64(1), np.int64(1)),
        groups=np.int64(1),
    )


def flux_batchnorm(rng: np.random.Generator, chs: int) -> NamedTuple:
    return NamedTuple(
        [
            ("λ", ()),
            ("β", _f32(rng, chs)),
            ("γ", _f32(rng, chs)),
            ("μ", _f32(rng, chs)),
            ("σ²", np.abs(_f32(rng, chs))),
            ("ϵ", np.float32(1e-5)),
            ("momentum", np.float32(0.1)),
            ("affine", True),
            ("track_stats", True),
            ("active", None),
            ("chs", np.int64(chs)),
        ]
    )


def flux_chain_state(seed: int = 0) -> NamedTuple:
    rng = np.random.default_rng(seed)
    layers = (flux_conv(rng), flux_batchnorm(rng, 4), (), (), flux_dense(rng, 36, 10))
    return NamedTuple(layers=layers)


def lux_ps_st(seed: int = 0) -> tuple[NamedTuple, NamedTuple]:
    rng = np.random.default_rng(seed)
    ps = NamedTuple(
        layer_1=NamedTuple(weight=_f32(rng, 8, 3), bias=_f32(rng, 8)),
        layer_2=NamedTuple(scale=_f32(rng, 8), bias=_f32(rng, 8)),
        layer_3=NamedTuple(weight=_f32(rng, 1, 8), bias=_f32(rng, 1)),
    )
    st = NamedTuple(
        layer_1=NamedTuple(),
        layer_2=NamedTuple(
            running_mean=np.zeros(8, np.float32),
            running_var=np.ones(8, np.float32),
            training=Singleton("Base.Val{true}"),
        ),
        layer_3=NamedTuple(),
    )
    return ps, st

"""What a Python object is, seen from Julia: array, scalar, container, or something with no state.

Nothing here imports JAX or Equinox. A JAX array can only exist once ``jax`` has been imported, so
the checks look ``jax`` up in ``sys.modules`` and treat everything as non-JAX while it is absent.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from typing import Any

import numpy as np

from .._errors import ConversionError
from .._typeof import is_jax_array, kind_of
from .._values import JuliaArray, JuliaBits, JuliaStruct, Missing, NamedTuple, Singleton, Undef


def jax_module() -> Any:
    """The ``jax`` module if it has been imported, else None (we never import it here)."""
    return sys.modules.get("jax")


def is_shape_dtype_struct(x: object) -> bool:
    jax = jax_module()
    return jax is not None and isinstance(x, jax.ShapeDtypeStruct)


def is_prng_key(x: object) -> bool:
    """A typed JAX PRNG key array (``jax.random.key``): RNG state, which Flux.state drops as ``()``."""
    jax = jax_module()
    if jax is None or not isinstance(x, (jax.Array, jax.ShapeDtypeStruct)):
        return False
    return bool(jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key))


def is_array_template(x: object) -> bool:
    """Arrays and abstract arrays (``jax.ShapeDtypeStruct``) that a template may hold as leaves."""
    if isinstance(x, np.ndarray):
        return True
    return (is_jax_array(x) or is_shape_dtype_struct(x)) and not is_prng_key(x)


def is_rng(x: object) -> bool:
    """Random number generator objects: state Julia would not get from ``Flux.state`` (it writes ``()``)."""
    if isinstance(x, (np.random.Generator, np.random.RandomState, np.random.BitGenerator, random.Random)):
        return True
    return is_prng_key(x)


def is_namedtuple_instance(x: object) -> bool:
    """A ``collections.namedtuple`` / ``typing.NamedTuple`` instance (not our Julia NamedTuple)."""
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_dataclass_instance(x: object) -> bool:
    """A dataclass instance (Equinox modules are dataclasses too)."""
    return dataclasses.is_dataclass(x) and not isinstance(x, type)


def is_non_state(x: object) -> bool:
    """Leaves that carry no state: functions, classes, RNG objects. ``Flux.state`` writes them as ``()``.

    Containers that happen to be callable (an Equinox module has ``__call__``) are not leaves and
    are excluded here; check for them first.
    """
    if is_dataclass_instance(x) or isinstance(x, (dict, list, tuple, NamedTuple)):
        return False
    return is_rng(x) or callable(x)


def is_value_model_leaf(x: object) -> bool:
    """Values of the value model that pass through unchanged (already Julia-shaped)."""
    return isinstance(x, (Singleton, JuliaBits, JuliaArray, JuliaStruct, Missing, Undef))


def describe_file_value(value: object) -> str:
    """Short text for a file value in a mismatch message: ``array float32 (5, 16)``, ``()``, ``nothing``."""
    if value is None:
        return "nothing"
    if isinstance(value, tuple) and value == ():
        return "()"
    if isinstance(value, Missing):
        return "missing"
    if isinstance(value, Undef):
        return "#undef"
    if isinstance(value, Singleton):
        return f"singleton {value.type}"
    if isinstance(value, np.ndarray):
        return f"array {value.dtype.name} {tuple(value.shape)}"
    if isinstance(value, NamedTuple) and len(value) == 0:
        return "NamedTuple()"
    try:
        return kind_of(value)
    except ConversionError:
        return type(value).__name__  # not a value-model value: say what it is

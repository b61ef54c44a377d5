"""Fixture lists shared by the safetensors and orbax tests."""

from __future__ import annotations

# Julia-written fixtures whose *values* convert exactly (checked for every fixture) but which
# tx.save does not write back to the same values, so JLD2 -> format -> JLD2 is not checked on them.
# Empty since the skeleton keeps each struct's on-disk layout (treexchange/_interop/_layoutjson.py):
# the five readas_foo_* and betaml_test.jld2 files listed before (custom serialisation through
# `written_type`, a struct whose only fields are singletons) now write back as convert writes them.
NOT_REWRITABLE: frozenset[str] = frozenset()

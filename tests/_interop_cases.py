"""Fixture lists shared by the safetensors and orbax tests."""

from __future__ import annotations

# Julia-written fixtures whose *values* convert exactly (checked for every fixture) but which
# tx.save does not write back to the same values, so JLD2 -> format -> JLD2 is not checked on them:
# - structs stored in a layout other than their fields imply (custom serialisation through
#   `written_type`, a struct whose only fields are singletons): without the original on-disk
#   layout the writer stores what Julia would store for the value itself;
# - temp.jld2: tx.save already changes it without any conversion (a Tuple type parameter is
#   re-spelt), a writer matter.
NOT_REWRITABLE = frozenset(
    {
        "readas_foo_a.jld2",
        "readas_foo_n_a.jld2",
        "readas_foo_n_sin.jld2",
        "readas_foo_sin.jld2",
        "betaml_test.jld2",
        "temp.jld2",
    }
)

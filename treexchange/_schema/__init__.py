"""The versioned state-tree schema: models, infer, validate, diff, migrate, JSON Schema, in-file schema.

This layer sits on the value model and the reader; it never imports jax (PyTrees are converted by the
JAX bridge, imported only when a PyTree is actually given).
"""

from ._diff import Difference, SchemaDiff, diff
from ._embedded import (
    SCHEMA_ATTRIBUTE,
    check_loaded,
    read_embedded_schema,
    schema_from_attributes,
    schema_to_attributes,
)
from ._infer import infer_schema
from ._jsonschema import json_schema, json_schema_text
from ._model import (
    SCHEMA_VERSION,
    ArrayNode,
    BoolNode,
    DictNode,
    GroupNode,
    NamedField,
    NamedTupleNode,
    Node,
    NumberNode,
    Producer,
    RefNode,
    Schema,
    SingletonNode,
    StringNode,
    StructNode,
    SymbolNode,
    TupleNode,
    VectorNode,
)
from ._validate import raise_if_invalid, validate
from ._versions import SchemaLike, load_schema, migrate, register_migration

__all__ = [
    "SCHEMA_ATTRIBUTE",
    "SCHEMA_VERSION",
    "ArrayNode",
    "BoolNode",
    "DictNode",
    "Difference",
    "GroupNode",
    "NamedField",
    "NamedTupleNode",
    "Node",
    "NumberNode",
    "Producer",
    "RefNode",
    "Schema",
    "SchemaDiff",
    "SchemaLike",
    "SingletonNode",
    "StringNode",
    "StructNode",
    "SymbolNode",
    "TupleNode",
    "VectorNode",
    "check_loaded",
    "diff",
    "infer_schema",
    "json_schema",
    "json_schema_text",
    "load_schema",
    "migrate",
    "raise_if_invalid",
    "read_embedded_schema",
    "register_migration",
    "schema_from_attributes",
    "schema_to_attributes",
    "validate",
]

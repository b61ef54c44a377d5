"""Schema back-references (schema 2.0): the ``ref`` node kind for cycles and shared objects.

Real files: hostile/linkcycle_shared_demo.jld2 (../shared's or tests/hostile/: a group holding a
hard link to itself), crafted_L14.jld2 (Julia's ``a = Any[]; push!(a, Any[a])``), and the BetaML models of
julia_fixtures/misc/betaml_test.jld2, whose estimators share one RNG and whose fitted models share
mutable ``var`` vectors (in the slow tier, as every test of that largest fixture). Each infers,
validates (the file, and the values ``load`` returns), diffs against itself and survives JSON, as
any other file.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import HOSTILE, REPO, require_fixture

import treexchange as tx
from treexchange._cli import main
from treexchange._schema import RefNode, migrate
from treexchange._schema._model import iter_paths


def _hostile(name: str) -> Path:
    path = HOSTILE / name
    if not path.is_file():
        pytest.skip(f"{path} absent")
    return path


def _refs(doc: tx.Schema) -> dict[tuple[Any, ...], list[Any]]:
    return {path: node.target for path, node in iter_paths(doc.roots) if isinstance(node, RefNode)}


def _json_schema_validator() -> Any:
    schema = json.loads((REPO / "schema" / "treexchange-schema.json").read_text(encoding="utf-8"))
    return jsonschema.validators.validator_for(schema)(schema)


def _round_trips(doc: tx.Schema) -> None:
    _json_schema_validator().validate(json.loads(doc.to_json()))
    assert tx.load_schema(doc.to_json()) == doc


@pytest.mark.parametrize(
    ("name", "refs"),
    [("linkcycle_shared_demo.jld2", {("a", "a"): ["a"]}), ("crafted_L14.jld2", {("a", 1, 1): ["a"]})],
)
def test_a_cyclic_file_infers_validates_and_diffs(name: str, refs: dict) -> None:
    path = _hostile(name)
    doc = tx.infer_schema(path)
    assert _refs(doc) == refs
    assert tx.validate(path, doc) == []
    assert tx.validate(tx.load(path), doc) == []  # the loaded values close the same cycle
    assert not tx.diff(path, doc) and not tx.diff(tx.load(path), path)
    _round_trips(doc)


@pytest.mark.slow  # (the largest fixture, conftest.SLOW_FIXTURES: inferred, validated twice, diffed: 8-12 s)
def test_shared_mutable_objects_of_a_real_model_are_back_references() -> None:
    # The default tier describes shared mutable objects of a Julia-written file in test_hostile.py
    # (crafted_L12.jld2: a vector reached twice at each of 40 levels) and of values below.
    path = require_fixture("misc/betaml_test.jld2")
    doc = tx.infer_schema(path)
    refs = _refs(doc)
    # Three estimators share one RNG (a mutable struct), described at the first.
    assert refs[("mod", "hpar", "estimator", 2, "opt", "rng")] == [
        "mod",
        "hpar",
        "estimator",
        1,
        "opt",
        "rng",
    ]
    assert refs[("mod", "hpar", "estimator", 3, "opt", "rng")] == [
        "mod",
        "hpar",
        "estimator",
        1,
        "opt",
        "rng",
    ]
    assert len(refs) >= 30
    assert tx.validate(path, doc) == [] and tx.validate(tx.load(path), doc) == []
    assert not tx.diff(path, doc)
    _round_trips(doc)


def test_values_with_cycles_and_sharing() -> None:
    a: list[Any] = []
    a.append([a])
    shared = tx.JuliaDict({1: 2.0})
    values = {"a": a, "s": (shared, shared)}
    doc = tx.infer_schema(values)
    assert _refs(doc) == {("a", 1, 1): ["a"], ("s", 2): ["s", 1]}
    assert doc.node_at(("a", 1, 1)).summary() == "ref to a"
    assert tx.validate(values, doc) == []
    # The same shapes without the sharing: each ref is a violation, named by its path.
    copy = {"a": a, "s": (shared, tx.JuliaDict({1: 2.0}))}
    found = tx.validate(copy, doc)
    assert [(m.kind, m.path) for m in found] == [("ref", ("s", 2))]
    assert "a separate dict found; schema expects the object at s[1] again" in str(found[0])
    # A cycle the schema does not describe is reported, not followed forever.
    flat = tx.infer_schema({"a": [[[]]]})
    found = tx.validate({"a": a}, flat)
    assert ("ref", ("a", 1, 1)) in [(m.kind, m.path) for m in found]


def test_a_ref_must_name_an_earlier_place() -> None:
    later = {"schema_version": "2.0", "roots": {"x": {"kind": "ref", "target": ["y"]}, "y": {"kind": "bool"}}}
    with pytest.raises(tx.FormatError, match="not a place described earlier"):
        tx.load_schema(later)
    to_ref = {
        "schema_version": "2.0",
        "roots": {
            "y": {"kind": "bool"},
            "x": {"kind": "ref", "target": ["y"]},
            "z": {"kind": "ref", "target": ["x"]},
        },
    }
    with pytest.raises(tx.FormatError, match="is a ref"):
        tx.load_schema(to_ref)
    with pytest.raises(tx.FormatError):
        tx.load_schema({"schema_version": "2.0", "roots": {"x": {"kind": "ref", "target": []}}})


def test_diff_reports_a_moved_or_lost_back_reference() -> None:
    v: list[Any] = [1.0]
    w: list[Any] = [1.0]
    a = tx.infer_schema({"m": (v, w, v)})
    b = tx.infer_schema({"m": (v, w, w)})
    c = tx.infer_schema({"m": (v, w, [1.0])})
    assert [(d.kind, d.path, str(d)) for d in tx.diff(a, b)] == [
        ("ref", ("m", 3), "~ m[3]: ref ref to m[1] -> ref to m[2]")
    ]
    assert [(d.kind, d.path) for d in tx.diff(a, c)] == [("kind", ("m", 3))]


def test_a_1_0_document_migrates_to_2_0_and_on() -> None:
    old = {"schema_version": "1.0", "roots": {"x": {"kind": "bool"}}}
    doc = tx.load_schema(old)
    assert doc.schema_version == "2.1" and doc.roots["x"].kind == "bool"  # through 2.0
    assert migrate(old) == {"schema_version": "2.1", "roots": {"x": {"kind": "bool"}}}


def test_cli_schema_and_validate_on_a_cyclic_file(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    path = _hostile("linkcycle_shared_demo.jld2")
    out = tmp_path / "cycle.schema.json"
    assert main(["schema", str(path), "-o", str(out)]) == 0
    assert '"kind": "ref"' in out.read_text(encoding="utf-8")
    assert main(["validate", str(path), str(out)]) == 0
    capsys.readouterr()


def _rule_tree() -> tx.JuliaStruct:
    """An MRBC-like rule tree: mutable nodes, each pointing to its parent (the root to itself)."""

    def node(rule: int, parent: Any) -> tx.JuliaStruct:
        return tx.JuliaStruct("Main.RuleNode", {"rule": rule, "parent": parent, "children": []}, mutable=True)

    root = node(0, None)
    root.fields["parent"] = root
    for i in (1, 2):
        child = node(i, root)
        root.fields["children"].append(child)
        for j in (0, 1):
            child.fields["children"].append(node(10 * i + j, child))
    return root


def test_a_rule_tree_with_parent_pointers(tmp_path: Path) -> None:
    # No file of ../shared holds such a graph (checked: only the hostile ones above have cycles),
    # so save writes one, as Julia's JLD2 would (a cycle through mutable structs is legal data).
    path = tmp_path / "rules.jld2"
    tx.save(path, tree=_rule_tree())
    doc = tx.infer_schema(path)
    refs = _refs(doc)
    assert refs[("tree", "parent")] == ["tree"]
    assert refs[("tree", "children", 1, "parent")] == ["tree"]
    assert refs[("tree", "children", 2, "children", 1, "parent")] == ["tree", "children", 2]
    assert len(refs) == 7  # one per node: its parent pointer
    back = tx.load(path, "tree")
    assert tx.validate(path, doc) == [] and tx.validate({"tree": back}, doc) == []
    assert not tx.diff(path, doc) and not tx.diff({"tree": back}, path)
    _round_trips(doc)
    # A tree whose grandchild points to the root instead of its parent: named by its path.
    back.fields["children"][1].fields["children"][0].fields["parent"] = back
    found = tx.validate({"tree": back}, doc)
    assert [(m.kind, m.path) for m in found] == [("ref", ("tree", "children", 2, "children", 1, "parent"))]


def test_an_embedded_schema_with_back_references_is_checked_on_load(tmp_path: Path) -> None:
    path = tmp_path / "rules.jld2"
    tx.save(path, tree=_rule_tree(), schema=True)  # inferred from the values: refs by identity
    embedded = tx.read_embedded_schema(path)
    assert embedded is not None and _refs(embedded)[("tree", "parent")] == ["tree"]
    tree = tx.load(path, "tree")  # load checks the file against the embedded schema
    assert tree.fields["parent"] is tree

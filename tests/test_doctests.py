"""Every docstring example of the package runs, and the public ones can be pasted as they are.

- ``test_public_examples_are_self_contained``: the examples in the docstrings of the public API (each
  name of ``treexchange.__all__``, and the public methods and properties of the public classes) run
  in an **empty namespace**: whatever they use they import, and through public names only (no
  ``treexchange._…`` module, no private helper). These are the examples the API reference shows.
- ``test_module_examples_run``: every other example, in every module of the package (private ones
  included), runs as ``pytest --doctest-modules`` runs it, with the module's globals.

Options for all: ``ELLIPSIS`` and ``NORMALIZE_WHITESPACE``. Modules that need jax or equinox import
them; both are dependencies of the package.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

import treexchange

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.fixture(autouse=True)
def _examples_write_under_tmp_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The examples make their files with ``tempfile.mkdtemp()``, as a user would; here that
    directory is under pytest's ``tmp_path``, so a test run leaves nothing in the system's
    temporary directory (it left about a hundred directories a run)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


MODULES = sorted(
    name for _, name, _ in pkgutil.walk_packages(treexchange.__path__, "treexchange.") if "._test" not in name
)
_PRIVATE_USE = re.compile(r"\btreexchange\._|(?<![\w.])_demo|\b_example_file\b")


def _public_objects() -> Iterator[tuple[str, object]]:
    """``(qualified public name, object)`` for every public function, class, method and property."""
    for name in treexchange.__all__:
        obj = getattr(treexchange, name)
        if inspect.isclass(obj):
            yield f"treexchange.{name}", obj
            for attr, member in vars(obj).items():
                if attr.startswith("_"):
                    continue
                if isinstance(member, (staticmethod, classmethod)):
                    member = member.__func__
                if isinstance(member, property):
                    member = member.fget
                if inspect.isfunction(member):
                    yield f"treexchange.{name}.{attr}", member
        elif inspect.isfunction(obj):
            yield f"treexchange.{name}", obj


PUBLIC = dict(_public_objects())


def _own_docstring(obj: object) -> str | None:
    doc = obj.__dict__.get("__doc__") if inspect.isclass(obj) else getattr(obj, "__doc__", None)
    return doc if isinstance(doc, str) else None


def _run(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    result = runner.run(test, out=out.append, clear_globs=True)
    assert result.failed == 0, "".join(out)


WITH_EXAMPLES = sorted(name for name, obj in PUBLIC.items() if ">>>" in (_own_docstring(obj) or ""))


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_public_examples_are_self_contained(name: str) -> None:
    doc = _own_docstring(PUBLIC[name])
    assert doc is not None
    test = doctest.DocTestParser().get_doctest(doc, {"__name__": "__example__"}, name, None, 0)
    private = [ex.source.strip() for ex in test.examples if _PRIVATE_USE.search(ex.source)]
    assert not private, f"{name}'s example uses private names: {private}"
    _run(test)


def _is_public_test(test_name: str, module: str) -> bool:
    """Whether a doctest found in ``module`` belongs to a public object (run by the test above)."""
    for obj in PUBLIC.values():
        qualname = getattr(obj, "__qualname__", None)
        if getattr(obj, "__module__", None) == module and test_name == f"{module}.{qualname}":
            return True
    return False


def _module_tests(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    return [
        t
        for t in doctest.DocTestFinder(exclude_empty=True).find(module, module_name)
        if t.examples and not _is_public_test(t.name, module_name)
    ]


@pytest.mark.parametrize("module_name", [m for m in MODULES if _module_tests(m)])
def test_module_examples_run(module_name: str) -> None:
    for test in _module_tests(module_name):
        _run(test)


def test_every_module_is_searched() -> None:
    assert "treexchange._jld2._reader" in MODULES and "treexchange._port._flux" in MODULES


def test_every_public_function_has_an_example() -> None:
    lacking = [
        name
        for name in treexchange.__all__
        if inspect.isfunction(getattr(treexchange, name))
        and ">>>" not in (_own_docstring(getattr(treexchange, name)) or "")
    ]
    assert not lacking, f"public functions without a docstring example: {lacking}"


def test_the_private_use_check_catches_private_helpers() -> None:
    assert _PRIVATE_USE.search("with treexchange.open(_demo_bytes()) as f:")
    assert _PRIVATE_USE.search("from treexchange._schema._model import BoolNode")
    assert not _PRIVATE_USE.search("tx.save(path, a=np.zeros(2)); x = obj._private_attr")

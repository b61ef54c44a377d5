"""Shared test helpers: where the Julia-written fixtures live, and skipping when they are absent.

The fixtures are real files written by Julia. They are looked for, in this order:

1. ``$TREEXCHANGE_SHARED`` when it is set (its ``julia_fixtures/``, ``data/mnist/``, ``hostile/``);
   set to a folder without them (``.ci/run`` uses an empty one), it hides ``../shared``;
2. ``../shared`` beside the repository (the project's full corpus, ../shared/julia_fixtures/CATALOG.md);
3. the files bundled in the repository's ``julia_fixtures/`` (those whose licence allows it, and the
   MNIST test set: julia_fixtures/SOURCES.md); ``julia_fixtures/fetch.py`` adds the others there.

Hostile files likewise: ``hostile/`` of the shared folder, else the redistributable part of it bundled
in ``tests/hostile/``.
"""

from __future__ import annotations

import gc
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

# XLA compiles every JAX operation the tests run, once per shape, and at its default level LLVM
# optimises each kernel for speed: the tests' models are tiny and each shape is run once or twice,
# so that optimisation is nearly all the cost of a port test (a random initialiser of a new weight
# shape, threefry's rounds unrolled, took 0.5-1.2 s to compile; 0.15 s at level 0; the default tier
# spent about a third of its time there). Level 0 compiles the same computations (the port tests
# compare results with tolerances, never with a compiled speed); set here, before any test module
# starts a JAX backend, and inherited by the tests' child processes. An XLA_FLAGS that names a level
# already is left as it is.
if "xla_backend_optimization_level" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_backend_optimization_level=0".strip()

REPO = Path(__file__).resolve().parents[1]
BUNDLED_DIR = REPO / "julia_fixtures"
SHARED = Path(os.environ.get("TREEXCHANGE_SHARED", REPO.parent / "shared"))
# The corpus the tests read: the shared folder's when it has one, else the repository's own copy.
BUNDLED = not (SHARED / "julia_fixtures").is_dir()
FIXTURES = BUNDLED_DIR if BUNDLED else SHARED / "julia_fixtures"
MNIST_DIR = (
    SHARED / "data" / "mnist"
    if (SHARED / "data" / "mnist" / "t10k-labels-idx1-ubyte.gz").is_file()
    else BUNDLED_DIR / "mnist"
)
# Hostile files (each once broke a promise of treexchange): the shared folder's full set when it is
# there, else those of them the repository may carry (tests/hostile/README.md says which and why).
HOSTILE = SHARED / "hostile" if (SHARED / "hostile").is_dir() else REPO / "tests" / "hostile"
HOSTILE_BUNDLED = HOSTILE == REPO / "tests" / "hostile"
# Whether the corpus is the project's own (whose files some tests name): ../shared, or the bundled
# subset of it; another folder of Julia-written files given through TREEXCHANGE_SHARED is not
# (tests/test_corpus.py runs over that one).
FULL_CORPUS = not BUNDLED and (FIXTURES / "CATALOG.md").is_file() and (FIXTURES / "jld2jl").is_dir()
OWN_CORPUS = FULL_CORPUS or BUNDLED
FOREIGN_REASON = f"names a file of ../shared, and the corpus at {FIXTURES} is another one"
SKIP_REASON = (
    f"Julia-written fixtures not found at {FIXTURES} (clone ../shared beside the repository, "
    "set TREEXCHANGE_SHARED, or run julia_fixtures/fetch.py)"
)
NOT_BUNDLED_REASON = (
    "not bundled (its repository shows no licence): run julia_fixtures/fetch.py, or clone ../shared "
    "beside the repository or set TREEXCHANGE_SHARED"
)
FULL_REASON = "counts the whole corpus of ../shared; the repository bundles part of it (julia_fixtures/)"


# Fixtures that make every test run over the corpus take 10-40 s (betaml: 616 KB of thousands of
# small objects): those cases go to the slow tier (pytest_collection_modifyitems below).
SLOW_FIXTURES = frozenset({"misc/betaml_test.jld2"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark slow every test parametrized with a fixture of SLOW_FIXTURES."""
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        for value in params.values():
            if isinstance(value, Path) and value.as_posix().endswith(tuple(SLOW_FIXTURES)):
                item.add_marker(pytest.mark.slow)
                break


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before a Hypothesis test, collect the garbage: anything an earlier test left in a
    reference cycle that changes global state when collected (a dropped JLD2 File used to: it
    kept Python's recursion limit raised, ``treexchange._recursion.stack_for_depth``, until a
    collection put it back in the middle of a Hypothesis test, which Hypothesis reported as two
    HypothesisWarnings). Such a File is now freed at once (test_hostile.py); this stays as a guard."""
    if item.get_closest_marker("hypothesis") is not None:
        gc.collect()


def _bundled_files() -> set[str]:
    """The corpus files sources.json lists (bundled, or fetched by fetch.py), relative to the folder."""
    entries = json.loads((BUNDLED_DIR / "sources.json").read_text(encoding="utf-8"))
    return {entry["file"] for entry in entries if not entry["file"].startswith("mnist/")}


def fixture_files(pattern: str = "**/*.jld*") -> list[Path]:
    """All fixture files matching ``pattern`` (sorted), or [] when ../shared is absent."""
    if not FIXTURES.is_dir():
        return []
    files = (p for p in FIXTURES.glob(pattern) if p.is_file())
    if BUNDLED:  # only the corpus, not julia_fixtures/' scripts or files generated there
        listed = _bundled_files()
        files = (p for p in files if str(p.relative_to(FIXTURES).as_posix()) in listed)
    return sorted(files)


def fixture_ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(FIXTURES)) for p in paths]


def absent_reason(relpath: str) -> str | None:
    """Why the fixture ``relpath`` is not here (the reason to skip with), or None when it is."""
    if (FIXTURES / relpath).is_file():
        return None
    if BUNDLED:
        return NOT_BUNDLED_REASON if relpath in _bundled_files() else SKIP_REASON
    return SKIP_REASON if OWN_CORPUS or not FIXTURES.is_dir() else FOREIGN_REASON


def require_fixture(relpath: str) -> Path:
    """The path of one fixture (e.g. ``"flux-state/silver-bullet_lenet.jld2"``), or skip."""
    reason = absent_reason(relpath)
    if reason is not None:
        pytest.skip(reason)
    return FIXTURES / relpath


# Fixtures of one kind, for tests whose point any of them makes: the file of ../shared the test was
# written for first, then a bundled one of the same kind (julia_fixtures/SOURCES.md), so that a fresh
# clone runs the test too and a run with ../shared runs it as before.
# A Flux.state ``model_state`` of Dense layers (``NamedTuple{(:layers,)}``, Float32 weights, ``σ = ()``):
DENSE_FLUX_STATE = ("flux-state/reinforce-circuits_mymodel.jld2", "flux-state/juliahepnet_model.jld2")


# JLD2 files of nested groups: a group some levels down, the names in it (in the file's order), the leaf
# paths below that group, and every leaf path of the file.
_SRF = "home/c1869192/srf/SRF/output/ordered"
NESTED_GROUPS: dict[str, tuple[str, list[str], list[str], list[str]]] = {
    "jld2testfiles/unionall_typeparam_v0.1.2.jld2": (
        "b/d",
        ["e", "f"],
        ["b/d/e", "b/d/f/g"],
        ["a", "b/c", "b/d/e", "b/d/f/g"],
    ),
    "misc/diffusionsimulator_test.jld2": (
        _SRF,
        ["run8l65.mat", "run5l25.mat"],
        [f"{_SRF}/run8l65.mat", f"{_SRF}/run5l25.mat"],
        [f"{_SRF}/run8l65.mat", f"{_SRF}/run5l25.mat"],
    ),
}


def require_one_of(relpaths: tuple[str, ...]) -> Path:
    """The first of ``relpaths`` that is here, or skip (with the first one's reason)."""
    for relpath in relpaths:
        if absent_reason(relpath) is None:
            return FIXTURES / relpath
    return require_fixture(relpaths[0])


def require_one_of_table(table: dict[str, T]) -> tuple[Path, T]:
    """The first file of ``table`` that is here and what the test expects of it, or skip (as above).

    For a test whose point any file of one kind makes but whose expected numbers are the file's own.
    """
    path = require_one_of(tuple(table))
    return path, table[path.relative_to(FIXTURES).as_posix()]


def present_cases(
    cases: list[tuple[Any, ...]],
    relpath: Callable[[tuple[Any, ...]], str],
    ids: Callable[[tuple[Any, ...]], str] = lambda case: "-".join(map(str, case)),
) -> list[Any]:
    """Parametrize helper: the ``cases`` whose fixture (``relpath(case)``) is here, plus ONE case that skips.

    For a test that makes the same check on each of several files of ../shared: a fresh clone without
    them collects one skip naming every absent file (and the way to get them), not one per case; with
    the files here every case runs as before. Each case is a tuple of the test's arguments.
    """
    present = [case for case in cases if absent_reason(relpath(case)) is None]
    absent = sorted({relpath(case) for case in cases if absent_reason(relpath(case)) is not None})
    params: list[Any] = [pytest.param(*case, id=ids(case)) for case in present]
    if absent:
        reason = f"{len(absent)} of {len({relpath(c) for c in cases})} files not here ({', '.join(absent)}): "
        reason += absent_reason(absent[0]) or ""
        params.append(
            pytest.param(*([None] * len(cases[0])), id="absent", marks=pytest.mark.skip(reason=reason))
        )
    return params


def shared_file(relpath: str) -> Path | None:
    """A file named as in ../shared (``julia_fixtures/...``, ``data/mnist/...``) wherever it is found."""
    if (SHARED / relpath).is_file():
        return SHARED / relpath
    # then the repository's bundled copy: a file bundled after ../shared was made is not in it
    places = (("julia_fixtures/", FIXTURES), ("data/mnist/", MNIST_DIR), ("julia_fixtures/", BUNDLED_DIR))
    for prefix, folder in places:
        if relpath.startswith(prefix) and (folder / relpath[len(prefix) :]).is_file():
            return folder / relpath[len(prefix) :]
    return None


def require_own_corpus() -> None:
    """Skip a test that names ../shared's files when the corpus is another one (the bundled one is not)."""
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)
    if not OWN_CORPUS:
        pytest.skip(FOREIGN_REASON)


def require_full_corpus() -> None:
    """Skip a test that counts ../shared's files when only the bundled part of it is here."""
    require_own_corpus()
    if not FULL_CORPUS:
        pytest.skip(FULL_REASON)


def all_fixtures_or_skip(pattern: str = "**/*.jld*") -> list:
    """Parametrize helper: every fixture matching ``pattern`` (paths), or one param that skips.

    Filter by ``pattern``, never the returned list: without fixtures it holds a ``pytest.param``.
    """
    files = fixture_files(pattern)
    return files if files else [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))]


@pytest.fixture
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)
    return FIXTURES

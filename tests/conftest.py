"""Shared test helpers: where the Julia-written fixtures live, and skipping when they are absent.

The fixtures are real files written by Julia (see ../shared/julia_fixtures/CATALOG.md). They are
used in place, never copied into this repository. Set TREEXCHANGE_SHARED to point elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("TREEXCHANGE_SHARED", REPO.parent / "shared"))
FIXTURES = SHARED / "julia_fixtures"
# Whether the corpus is the project's own ../shared (whose files some tests name) or a folder of
# other Julia-written files given through TREEXCHANGE_SHARED (tests/test_corpus.py runs over it).
OWN_CORPUS = (FIXTURES / "CATALOG.md").is_file() and (FIXTURES / "jld2jl").is_dir()
FOREIGN_REASON = f"names a file of ../shared, and the corpus at {FIXTURES} is another one"
SKIP_REASON = (
    f"Julia-written fixtures not found at {FIXTURES} (clone ../shared beside the repository "
    "or set TREEXCHANGE_SHARED)"
)


def fixture_files(pattern: str = "**/*.jld*") -> list[Path]:
    """All fixture files matching ``pattern`` (sorted), or [] when ../shared is absent."""
    if not FIXTURES.is_dir():
        return []
    return sorted(p for p in FIXTURES.glob(pattern) if p.is_file())


def fixture_ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(FIXTURES)) for p in paths]


def require_fixture(relpath: str) -> Path:
    """The path of one fixture (e.g. ``"flux-state/silver-bullet_lenet.jld2"``), or skip."""
    path = FIXTURES / relpath
    if not path.is_file():
        pytest.skip(SKIP_REASON if OWN_CORPUS or not FIXTURES.is_dir() else FOREIGN_REASON)
    return path


def require_own_corpus() -> None:
    """Skip a test that names ../shared's files (or counts them) when the corpus is another one."""
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)
    if not OWN_CORPUS:
        pytest.skip(FOREIGN_REASON)


def all_fixtures_or_skip() -> list[Path]:
    """Parametrize helper: every fixture, or a single param that skips with the reason."""
    files = fixture_files()
    return files if files else [pytest.param(None, marks=pytest.mark.skip(reason=SKIP_REASON))]


@pytest.fixture
def fixtures_dir() -> Path:
    if not FIXTURES.is_dir():
        pytest.skip(SKIP_REASON)
    return FIXTURES

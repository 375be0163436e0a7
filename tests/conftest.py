"""Test-wide fixtures: where the shared reference data lives, and how to find the repository."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def reference_dir() -> Path | None:
    """``../shared/reference`` beside the checkout (CI and developer machines), if present."""
    for candidate in (REPO_ROOT.parent / "shared" / "reference", Path("/work/shared/reference")):
        if candidate.is_dir():
            return candidate
    return None


@pytest.fixture
def reference() -> Path:
    found = reference_dir()
    if found is None:
        pytest.skip("../shared/reference (real CRDs and host captures) is not beside this checkout")
    return found

"""The house lint rules (ruff, configured in pyproject.toml) hold for the whole tree."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    ruff = shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed; it comes with the [test] extra")
    result = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-4000:]

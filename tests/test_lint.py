"""The house lint rules (ruff, configured in pyproject.toml) hold for the whole tree."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_ruff_check_passes():
    # The [test] extra installs ruff beside this Python, on PATH only in an activated venv.
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent)) or shutil.which("ruff")
    if ruff is None:
        pytest.fail("ruff is not installed; it comes with the [test] extra")
    result = subprocess.run(
        [ruff, "check", "--no-cache", "."], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout[-4000:]


def test_ci_runs_the_test_command_readme_gives():
    # README.md opens with indented commands; the one that runs pytest is the test command.
    readme = (REPO / "README.md").read_text().split("\n## ", 1)[0]
    commands = [line.strip() for line in readme.splitlines() if line.startswith("    ")]
    tests = [command for command in commands if "pytest" in command]
    assert len(tests) == 1, commands
    ci_lines = [line.strip() for line in (REPO / ".ci" / "run").read_text().splitlines()]
    assert tests[0] in ci_lines, f".ci/run does not run README.md's test command: {tests[0]}"

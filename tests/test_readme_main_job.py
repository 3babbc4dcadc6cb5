"""The README's main-job command, run as written: it must reach >= 99% dev token accuracy."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _main_job_command() -> list:
    for line in (REPO / "README.md").read_text().splitlines():
        if line.strip().startswith("pip install -e . && python -m t2t_lite.trainer"):
            return shlex.split(line.split("&&", 1)[1])
    raise AssertionError("README.md has no main-job line 'pip install -e . && python -m ...'")


@pytest.mark.slow
def test_readme_main_job_learns_reversal(tmp_path):
    command = _main_job_command()
    assert command[:3] == ["python", "-m", "t2t_lite.trainer"]
    command = [sys.executable] + [
        f"--output_dir={tmp_path / 'run'}" if arg.startswith("--output_dir=") else arg
        for arg in command[1:]
    ]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    evals = re.findall(r"^eval step (\d+): .*accuracy ([0-9.]+)", result.stdout, re.M)
    assert evals, result.stdout[-3000:]
    step, accuracy = evals[-1]
    assert float(accuracy) >= 0.99, result.stdout[-3000:]
    assert (tmp_path / "run" / "eval").is_dir() and (tmp_path / "run" / "checkpoint").exists()

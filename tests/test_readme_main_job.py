"""The README's main-job command, run as written: it must reach >= 99% dev token accuracy."""

import re

import pytest
from conftest import readme_main_job_run


@pytest.mark.slow
def test_readme_main_job_learns_reversal(tmp_path_factory):
    run, result = readme_main_job_run(tmp_path_factory)
    assert result["returncode"] == 0, result["stderr"][-3000:]
    evals = re.findall(r"^eval step (\d+): .*accuracy ([0-9.]+)", result["stdout"], re.M)
    assert evals, result["stdout"][-3000:]
    step, accuracy = evals[-1]
    assert float(accuracy) >= 0.99, result["stdout"][-3000:]
    assert (run / "eval").is_dir() and (run / "checkpoint").exists()

"""tests/warm_python.py: a forked command sees and reports what a real subprocess would."""

import os
import subprocess
import sys

import pytest
import warm_python

# Prints what a command can observe of how it was started, then exits with status 3.
SNIPPET = r"""
import os, sys
print(sys.argv)
print(os.getcwd())
print(os.environ.get("WARM_PYTHON_PROBE"))
print(repr(sys.stdin.read()))
print(sys.path[0] == "")
print("to stderr", file=sys.stderr)
sys.exit(3)
"""


def _both(argv, **kwargs):
    warm = warm_python.run(argv, capture_output=True, text=True, timeout=120, **kwargs)
    real = subprocess.run(argv, capture_output=True, text=True, timeout=120, **kwargs)
    return warm, real


def test_a_forked_command_gets_its_argv_cwd_env_stdin_and_status(tmp_path):
    env = dict(os.environ, WARM_PYTHON_PROBE="probe value")
    warm, real = _both(
        [sys.executable, "-c", SNIPPET, "one", "two words"],
        input="line 1\nline 2\n",
        env=env,
        cwd=tmp_path,
    )
    assert (warm.returncode, warm.stdout, warm.stderr) == (
        real.returncode,
        real.stdout,
        real.stderr,
    )
    assert warm.returncode == 3
    assert warm.stdout.splitlines() == [
        "['-c', 'one', 'two words']",
        str(tmp_path),
        "probe value",
        repr("line 1\nline 2\n"),
        "True",
    ]


def test_modules_and_scripts_run_as_main_with_their_own_path(tmp_path):
    script = tmp_path / "script.py"
    script.write_text(
        "import sys, helper\nprint(sys.argv[1:], __name__, helper.VALUE)\nraise SystemExit('no')\n"
    )
    (tmp_path / "helper.py").write_text("VALUE = 42\n")  # found beside the script only
    warm, real = _both([sys.executable, str(script), "a"], cwd="/")
    assert (warm.returncode, warm.stdout, warm.stderr) == (1, "['a'] __main__ 42\n", "no\n")
    assert (real.returncode, real.stdout, real.stderr) == (1, "['a'] __main__ 42\n", "no\n")
    warm, real = _both([sys.executable, "-m", "json.tool"], input='{"b": [1, 2]}')
    assert warm.stdout == real.stdout == '{\n    "b": [\n        1,\n        2\n    ]\n}\n'
    warm, real = _both([sys.executable, "-c", "raise ValueError('bad')"])
    assert warm.returncode == real.returncode == 1
    assert warm.stderr.splitlines()[-1] == real.stderr.splitlines()[-1] == "ValueError: bad"


def test_the_forked_process_has_tensorflow_imported_unless_the_environment_differs():
    probe = [sys.executable, "-c", "import sys; print('tensorflow' in sys.modules)"]
    assert warm_python.run(probe).stdout == "True\n"
    # A variable TensorFlow reads at import time: only a real new process honours it.
    env = dict(os.environ, TF_ENABLE_ONEDNN_OPTS="0")
    assert warm_python.run(probe, env=env).stdout == "False\n"


def test_a_command_that_outlives_its_timeout_is_killed():
    with pytest.raises(subprocess.TimeoutExpired):
        warm_python.run(
            [sys.executable, "-c", "import time; print('x'); time.sleep(60)"], timeout=2
        )

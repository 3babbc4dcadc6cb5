"""`subprocess.run([sys.executable, ...])` for commands, without TensorFlow's import each time.

A test that runs a command (`python -m t2t_lite.decoder ...`, `python tools/x.py ...`,
`python -c CODE`) waits about four seconds for TensorFlow's import before the command does
anything. `run` starts such a command as a new process forked from a server process that has
imported TensorFlow and Keras and nothing else: no device is initialised and no model code
has run there, so the command starts from the state a fresh interpreter reaches after
`import tensorflow`. It gets its own argv, environment, working directory, stdin, stdout,
stderr and exit status, and runs its module as `__main__` as `python -m` does.

What a fork cannot give, `run` leaves to a real `subprocess.run`: an environment that
differs from the server's in a variable TensorFlow reads at import (TF_*, XLA_*, CUDA_*,
...; a command told nothing of TF_CPP_MIN_LOG_LEVEL quiets its own start-up, which is
behaviour worth seeing), and any argv that is not the running Python's.

One server per test worker, started at the first call (multiprocessing's forkserver).
"""

from __future__ import annotations

import atexit
import io
import locale
import multiprocessing
import multiprocessing.forkserver
import os
import runpy
import subprocess
import sys
import tempfile
import threading
import traceback
import types

# Variables that TensorFlow, its libraries or the package read while TensorFlow is
# imported, so that a process forked after the import could not honour a new value.
_IMPORT_TIME_PREFIXES = (
    "TF_",
    "XLA_",
    "CUDA_",
    "KERAS_",
    "OMP_",
    "MKL_",
    "DNNL_",
    "ONEDNN_",
    "T2T_LITE_",
    "PYTHONWARNINGS",
    "PYTHONHASHSEED",
    "LD_",
)

_context = None
_server_env: dict | None = None
_plain_path: list | None = None


def _import_time_part(env: dict) -> dict:
    return {k: v for k, v in env.items() if k.startswith(_IMPORT_TIME_PREFIXES)}


def _server():
    """The forkserver context of this process, started with TensorFlow imported."""
    global _context, _server_env, _plain_path
    if _context is None:
        # sys.path of a plain `python -c` (without PYTHONPATH): a command's imports must
        # not see the test folder that pytest put on this process's path.
        plain_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        listed = subprocess.run(
            [sys.executable, "-c", "import sys; print('\\n'.join(sys.path[1:]))"],
            capture_output=True,
            text=True,
            check=True,
            env=plain_env,
        )
        _plain_path = listed.stdout.splitlines()
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(["tensorflow", "keras"])
        # The server's stderr is set when it starts: /dev/null, for the start-up lines of
        # its imports. Each command points its own stderr at its own file.
        saved = os.dup(2)
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 2)
        try:
            multiprocessing.forkserver.ensure_running()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            os.close(null)
        _server_env = dict(os.environ)
        _context = context
    return _context


def _forkable(argv: list, env: dict) -> bool:
    if not argv or argv[0] != sys.executable or len(argv) < 2:
        return False
    if argv[1] in ("-m", "-c"):
        if len(argv) < 3:
            return False
    elif argv[1].startswith("-") or not argv[1].endswith(".py"):
        return False
    _server()
    return _import_time_part(env) == _import_time_part(_server_env)


def run(
    argv: list,
    *,
    input: str | bytes | None = None,
    env: dict | None = None,
    cwd=None,
    timeout: float | None = None,
    capture_output: bool = True,
    text: bool = True,
    check: bool = False,
) -> subprocess.CompletedProcess:
    """`subprocess.run(argv, capture_output=True, ...)`, forked when that is the same run."""
    argv = [str(a) for a in argv]
    env = dict(os.environ if env is None else env)
    if not capture_output or not _forkable(argv, env):
        return subprocess.run(
            argv,
            input=input,
            env=env,
            cwd=cwd,
            timeout=timeout,
            capture_output=capture_output,
            text=text,
            check=check,
        )
    with tempfile.TemporaryDirectory(prefix="warm_python_") as folder:
        stdin_path = None
        if input is not None:
            stdin_path = os.path.join(folder, "stdin")
            data = input.encode(locale.getpreferredencoding(False)) if text else input
            with open(stdin_path, "wb") as handle:
                handle.write(data)
        out_path, err_path = os.path.join(folder, "stdout"), os.path.join(folder, "stderr")
        process = _server().Process(
            target=_command,
            args=(
                argv[1:],
                env,
                str(cwd) if cwd is not None else os.getcwd(),
                stdin_path,
                out_path,
                err_path,
                _plain_path,
            ),
        )
        process.start()
        process.join(timeout)
        timed_out = process.is_alive()
        if timed_out:
            process.kill()
            process.join()
        stdout, stderr = (_read(path, text) for path in (out_path, err_path))
    if timed_out:
        raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr)
    result = subprocess.CompletedProcess(argv, process.exitcode, stdout, stderr)
    if check:
        result.check_returncode()
    return result


def _read(path: str, text: bool):
    # A process that died before it opened its files wrote nothing.
    data = b""
    if os.path.exists(path):
        with open(path, "rb") as handle:
            data = handle.read()
    if not text:
        return data
    # As subprocess's text mode: the locale's encoding, universal newlines.
    return io.TextIOWrapper(io.BytesIO(data), encoding=locale.getpreferredencoding(False)).read()


def _command(arguments, env, cwd, stdin_path, out_path, err_path, plain_path):
    """The forked process: becomes `python <arguments>` and exits with its status."""
    for fd, path, flags in (
        (0, stdin_path or os.devnull, os.O_RDONLY),
        (1, out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, err_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    encoding = locale.getpreferredencoding(False)
    sys.stdin = io.TextIOWrapper(io.FileIO(0, "r", closefd=False), encoding=encoding)
    sys.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding=encoding)
    sys.stderr = io.TextIOWrapper(
        io.FileIO(2, "w", closefd=False),
        encoding=encoding,
        errors="backslashreplace",
        line_buffering=True,
    )
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    python_path = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    code = 0
    try:
        if arguments[0] == "-m":
            sys.argv = ["-m", *arguments[2:]]
            sys.path[:] = [os.getcwd(), *python_path, *plain_path]
            runpy.run_module(arguments[1], run_name="__main__", alter_sys=True)
        elif arguments[0] == "-c":
            sys.argv = ["-c", *arguments[2:]]
            sys.path[:] = ["", *python_path, *plain_path]
            main = types.ModuleType("__main__")
            sys.modules["__main__"] = main
            exec(compile(arguments[1], "<string>", "exec"), main.__dict__)
        else:
            script = os.path.abspath(arguments[0])
            sys.argv = list(arguments)
            sys.path[:] = [os.path.dirname(script), *python_path, *plain_path]
            runpy.run_path(script, run_name="__main__")
    except SystemExit as stop:
        code = _exit_status(stop.code)
    except BaseException:  # noqa: BLE001 - as the interpreter does: report, status 1
        traceback.print_exc()
        code = 1
    # What the interpreter does on its way out: join non-daemon threads, run atexit.
    threading._shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


def _exit_status(code) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1

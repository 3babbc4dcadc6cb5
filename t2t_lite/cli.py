"""What every command shares: how it runs under absl, and a quiet TensorFlow start-up.

`run(main, name)` makes `--help` list the command's own flags and exit 0 however it was
started. absl lists the key flags of the module it takes for the main one, `sys.argv[0]`:
under `python -m t2t_lite.trainer` that is the trainer, under the `t2t-trainer` console
script it is the script, which defines no flag, and absl's help exits with status 1.

`quiet_tensorflow(verbose)` imports TensorFlow and finds its devices with stderr captured,
then passes on what is not start-up noise. No setting hides all of it in TensorFlow 2.21:
the C++ lines written before absl::InitializeLog (the oneDNN notice, "Could not find cuda
drivers") ignore TF_CPP_MIN_LOG_LEVEL; TF_ENABLE_ONEDNN_OPTS=0 hides the oneDNN notice
only by turning oneDNN off; TF_CPP_MIN_LOG_LEVEL=3 hides the cuInit error on a machine
without GPU, and every later error too.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import re
import sys
import tempfile

from absl import app, flags

# Flags defined through this module belong to the command that calls it (its --help).
flags.disclaim_key_flags()

HELP_ARGUMENTS = frozenset(
    ["--help", "-help", "-?", "--helpshort", "-helpshort", "--helpfull", "-helpfull"]
)
LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# Set by `quiet_tensorflow` when it quiets a command: processes the command starts (the
# server's version workers) inherit it and are quieted the same way, although the
# TF_CPP_MIN_LOG_LEVEL they inherit would otherwise count as the user's choice.
QUIET_VARIABLE = "T2T_LITE_QUIET_TENSORFLOW"

# Start-up lines that tell a user nothing they asked for: absl's notice, the C++ INFO and
# WARNING lines (TF_CPP_MIN_LOG_LEVEL=2 would hide them once logging is set up), the CPU
# instructions notice, the CUDA errors of a machine without a GPU, and oneDNN's notice
# (logged as an error on the first run of an int64 op) that it falls back to Eigen.
_NOISE = re.compile(
    r"WARNING: All log messages before absl::InitializeLog\(\) is called"
    r"|[IW]\d{4} [\d:.]+ +\d+ \S+:\d+\] "
    r"|E\d{4} .*(failed call to cuInit|Unable to register cu\w+ factory"
    r"|oneDNN supports DT_INT64 only on platforms with AVX-512)"
    r"|To enable the following instructions: "
)


def run(main, module_name: str) -> None:
    """`app.run(main)` for the command module `module_name` (its `__name__`)."""
    command_flags = flags.FLAGS.get_key_flags_for_module(module_name)
    for flag in command_flags:
        flags.FLAGS.register_key_flag_for_module(sys.argv[0], flag)
    main_module = sys.modules["__main__"]
    if not main_module.__doc__ and module_name in sys.modules:
        # absl's usage text is the main module's docstring.
        main_module.__doc__ = sys.modules[module_name].__doc__
    app.run(main, flags_parser=_parse_flags)


def _parse_flags(argv: list) -> list:
    try:
        return app.parse_flags_with_usage(argv)
    except SystemExit as stop:
        # Help was asked for and given: a success, whatever absl's status says.
        if stop.code == 1 and asks_for_help(argv):
            raise SystemExit(0) from None
        raise


def asks_for_help(argv: list) -> bool:
    """Whether `argv` (program name first) holds one of absl's help flags."""
    arguments = argv[1:]
    if "--" in arguments:
        arguments = arguments[: arguments.index("--")]
    return any(argument in HELP_ARGUMENTS for argument in arguments)


def verbosity_requested(argv: list | None = None) -> bool:
    """Whether the command line (before flags are parsed) sets --verbosity or -v."""
    for argument in (sys.argv if argv is None else argv)[1:]:
        name = argument.split("=", 1)[0]
        if name in ("--verbosity", "-verbosity", "-v", "--v"):
            return True
    return False


def quiet_tensorflow(verbose: bool) -> None:
    """Imports TensorFlow and finds its devices without printing start-up noise.

    Does nothing when `verbose` (the user passed --verbosity), when the user set
    TF_CPP_MIN_LOG_LEVEL (their choice wins), or when TensorFlow is loaded already.
    Otherwise sets TF_CPP_MIN_LOG_LEVEL=2 for the rest of the run and writes every
    captured stderr line that is not start-up noise (see `_NOISE`) back to stderr.
    A process started by a quieted command (QUIET_VARIABLE set) is quieted too.
    """
    if verbose or "tensorflow" in sys.modules:
        return
    if os.environ.get(QUIET_VARIABLE) != "1":
        if LOG_LEVEL_VARIABLE in os.environ:
            return
        os.environ[LOG_LEVEL_VARIABLE] = "2"
        os.environ[QUIET_VARIABLE] = "1"
    with noise_filtered():
        import tensorflow as tf

        tf.config.list_physical_devices()  # initialises the devices: cuInit and friends


def quiet_worker():
    """For a process a command starts (a server's version worker): quiet as the command.

    Quiets TensorFlow's import when the command that started this process was quieted
    (QUIET_VARIABLE), and returns a context manager hiding the noise of the block it
    guards (oneDNN's notice on the first run of a model), or doing nothing if not quiet.
    """
    quiet = os.environ.get(QUIET_VARIABLE) == "1"
    quiet_tensorflow(verbose=not quiet)
    return noise_filtered() if quiet else contextlib.nullcontext()


@contextlib.contextmanager
def noise_filtered():
    """Captures stderr for the block, then writes back what is not start-up noise.

    The file descriptor is captured, so that TensorFlow's C++ lines are caught too.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            lines = captured.read().decode("utf-8", "replace").splitlines()
            kept = [line for line in lines if not _NOISE.match(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr, flush=True)


def registry_help() -> str:
    """The registered problems and hparams sets, one line each with what it is."""
    from t2t_lite import hparams, problems

    lines = ["Problems (--problem; or module:ClassName of your own):"]
    for name in problems.names():
        lines.append(f"  {name:<28} {_first_line(type(problems.get(name)))}")
    lines.append("Hparams sets (--hparams_set; default --train_steps in brackets):")
    for name in hparams.names():
        steps = f"[{hparams.get(name).train_steps:,} steps]"
        lines.append(f"  {name:<28} {steps:<16} {hparams.description(name)}")
    return "\n".join(lines)


def _first_line(item) -> str:
    return (inspect.getdoc(item) or "").split("\n", 1)[0]


class _FolderParser(flags.ArgumentParser):
    """A folder flag's value with ~ expanded, made absolute, so that messages name it fully."""

    syntactic_help = "a folder"

    def parse(self, argument):
        return os.path.abspath(os.path.expanduser(argument)) if argument else argument

    def flag_type(self) -> str:
        return "string"


def define_folder(name: str, default: str | None, help_text: str) -> None:
    """Defines the string flag `name` whose value (and default) `_FolderParser` resolves."""
    flags.DEFINE(_FolderParser(), name, default, help_text, serializer=flags.ArgumentSerializer())


class _FoldersParser(_FolderParser):
    """Comma-separated folders (an ensemble's runs), each resolved as `_FolderParser` does."""

    syntactic_help = "a folder, or comma-separated folders"

    def parse(self, argument):
        if not argument or "," not in argument:
            return super().parse(argument)
        parts = [part.strip() for part in argument.split(",") if part.strip()]
        return ",".join(super(_FoldersParser, self).parse(part) for part in parts)


def define_folders(name: str, default: str | None, help_text: str) -> None:
    """Defines the string flag `name`: one folder or several separated by commas, each
    resolved to an absolute path; the value stays one string, the parts joined by ","."""
    flags.DEFINE(_FoldersParser(), name, default, help_text, serializer=flags.ArgumentSerializer())


def define_ensemble_flags() -> None:
    """--ensemble_combination and --ensemble_weights of the commands that take several runs."""
    flags.DEFINE_enum(
        "ensemble_combination", "mean_probability", ["mean_probability", "mean_log_probability"],
        "How an ensemble combines its models' next-token distributions: log of the weighted mean "
        "of probabilities (fairseq), or the weighted mean of log-probabilities renormalised over "
        "the vocabulary (Marian, which does not renormalise)."
    )  # fmt: skip
    flags.DEFINE_list(
        "ensemble_weights", [], "One positive weight per model of the ensemble, in the order of "
        "the runs (normalised to sum to 1); default: equal weights."
    )  # fmt: skip


def ensemble_weights() -> list:
    """--ensemble_weights as floats; anything else is a UsageError naming the flag."""
    try:
        return [float(weight) for weight in flags.FLAGS.ensemble_weights]
    except ValueError:
        raise app.UsageError(
            f"--ensemble_weights must be numbers separated by commas, got "
            f"{','.join(flags.FLAGS.ensemble_weights)}"
        ) from None


def define_download_flags() -> None:
    """--download, --download_mirror and --download_checksums of the calling command."""
    flags.DEFINE_bool(
        "download", False,
        "Fetch the published corpus files the problem reads (WMT14: WMT's archives) into the "
        "raw folder first, resuming partial downloads and checking each file's checksum; "
        "files already there are checked, not fetched again.",
    )  # fmt: skip
    flags.DEFINE_string(
        "download_mirror", None,
        "With --download: base URL of a mirror serving the files under their own names "
        "(http://host/wmt14 serves http://host/wmt14/dev.tgz; file:///srv/wmt14 works too) "
        "instead of the publisher's URLs.",
    )  # fmt: skip
    define_folder(
        "download_checksums", None,
        "With --download: a file of `SHA256  NAME` lines (as sha256sum writes them) to check "
        "the files against instead of the recorded checksums, for a mirror holding other "
        "builds of them.",
    )  # fmt: skip


def download_source(flag_values=flags.FLAGS):
    """The `download.Source` the download flags ask for; None without --download.

    Raises:
        ValueError: for a mirror or checksums file given without --download.
    """
    if not flag_values.download:
        for name in ("download_mirror", "download_checksums"):
            if flag_values[name].value:
                raise ValueError(f"--{name} applies only with --download")
        return None
    from t2t_lite.problems.download import Source

    return Source(mirror=flag_values.download_mirror, checksums=flag_values.download_checksums)

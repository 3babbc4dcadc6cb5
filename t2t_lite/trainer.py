"""Trains a problem with an hparams set: `python -m t2t_lite.trainer --problem=... --hparams_set=...`.

Reads the problem's data from --data_dir (default ~/t2t_data; --generate_data makes it
first if it is missing) and writes the run to --output_dir (default
~/t2t_train/PROBLEM-HPARAMS_SET). --train_steps defaults to the hparams set's own budget.
--registry_help lists the problems and hparams sets.
"""

import logging as pylogging
import sys

from absl import app, flags, logging

from t2t_lite import cli

cli.quiet_tensorflow(cli.verbosity_requested())  # before anything imports TensorFlow

from t2t_lite.training import run_config  # noqa: E402

FLAGS = flags.FLAGS
run_config.define_flags(FLAGS)
flags.adopt_module_key_flags(run_config)  # --help lists them with the command's own
flags.DEFINE_string("hparams_set", "transformer_tiny", "Registered hparams set name.")
flags.DEFINE_string("hparams", "", 'Overrides, "key=value,key=value".')
flags.DEFINE_bool(
    "generate_data", False,
    "Run datagen first when the problem's data is missing under --data_dir: from --raw_dir, "
    "or TensorFlow Datasets for the problems that offer it.",
)  # fmt: skip
flags.DEFINE_string(
    "raw_dir", None, "With --generate_data: folder of raw text files; default "
    "DATA_DIR/<problem>/raw, else TensorFlow Datasets where the problem offers it."
)  # fmt: skip
flags.DEFINE_integer(
    "vocab_size", None,
    "With --generate_data: shared vocabulary size; default: the problem's own.",
    lower_bound=1,
)  # fmt: skip
cli.define_download_flags()
flags.DEFINE_bool(
    "registry_help", False, "Print the registered problems and hparams sets, then exit."
)

PROGRAM = "t2t_lite.trainer"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if FLAGS.registry_help:
        print(cli.registry_help())
        return
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from t2t_lite import hparams, problems
    from t2t_lite.problems.corpus import DataError
    from t2t_lite.runs import run_dir
    from t2t_lite.training import distribute, trainer

    # The errors a person can fix from the command line: flag values, the output folder,
    # the strategy, missing or incomplete data. Anything else is a defect and keeps its
    # traceback.
    user_errors = (run_dir.RunDirError, distribute.StrategyError)

    try:
        hp = hparams.override(hparams.get(FLAGS.hparams_set), FLAGS.hparams)
        problem = problems.get(FLAGS.problem)
    except ValueError as error:
        sys.exit(f"{PROGRAM}: {error}")
    datagen_only = ("vocab_size", "download", "download_mirror", "download_checksums")
    misplaced = [name for name in datagen_only if FLAGS[name].present]
    if misplaced and not FLAGS.generate_data:
        sys.exit(f"{PROGRAM}: --{misplaced[0]} applies only with --generate_data")
    try:
        default_dir = run_config.default_output_dir(problem.name, FLAGS.hparams_set)
        config = run_config.from_flags(FLAGS, output_dir=default_dir)
        if FLAGS.generate_data:
            _generate_data_if_missing(problem, run_config.absolute(config.data_dir))
        trainer.train_and_evaluate(config, hp)
    except DataError as error:
        hint = "" if FLAGS.generate_data else "; or add --generate_data to this command"
        sys.exit(f"{PROGRAM}: {error}{hint}")
    except user_errors as error:
        sys.exit(f"{PROGRAM}: {error}")


def _generate_data_if_missing(problem, data_dir: str) -> None:
    """What `python -m t2t_lite.datagen` does, when the data is not there (or damaged)."""
    from t2t_lite.problems.corpus import DataError

    try:
        problem.fingerprint(data_dir)
        return
    except DataError:
        pass
    options, same = {}, ""
    for name in ("raw_dir", "vocab_size", "download", "download_mirror", "download_checksums"):
        if FLAGS[name].value:
            same += f" --{name}" + ("" if FLAGS[name].value is True else f"={FLAGS[name].value}")
    if FLAGS.vocab_size:
        options["vocab_size"] = FLAGS.vocab_size
    print(
        f"generating the data of {problem.name} under {data_dir} (as python -m "
        f"t2t_lite.datagen --problem={problem.name} --data_dir={data_dir}{same} would)",
        flush=True,
    )
    # Datagen's progress lines (downloads, stages) show as under the datagen command.
    pylogging.getLogger("t2t_lite.datagen").setLevel(pylogging.INFO)
    try:
        download = cli.download_source(FLAGS)
        if download is not None:
            options["download"] = download
        metadata = problem.generate_data(data_dir, FLAGS.raw_dir, **options)
    except ValueError as error:  # DataError names the file; others, a setting that cannot work
        if isinstance(error, DataError):
            raise
        raise DataError(f"--generate_data: {error}") from None
    print(f"{problem.name}: {metadata.get('status', 'done')}", flush=True)


def run():
    cli.run(main, __name__)


if __name__ == "__main__":
    run()

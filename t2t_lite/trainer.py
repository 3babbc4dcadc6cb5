"""Trains a problem with an hparams set: `python -m t2t_lite.trainer --problem=... --hparams_set=...`."""

import os
import sys

from absl import app, flags, logging

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_lite.training import run_config  # noqa: E402  (absl flags only; TensorFlow loads in main)

FLAGS = flags.FLAGS
run_config.define_flags(FLAGS)
flags.adopt_module_key_flags(run_config)  # --help lists them with the command's own
flags.DEFINE_string("hparams_set", "transformer_tiny", "Registered hparams set name.")
flags.DEFINE_string("hparams", "", 'Overrides, "key=value,key=value".')


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from t2t_lite import hparams, problems
    from t2t_lite.problems.corpus import DataError
    from t2t_lite.runs import run_dir
    from t2t_lite.training import distribute, trainer

    # The errors a person can fix from the command line: flag values, the output folder,
    # the strategy, missing or incomplete data. Anything else is a defect and keeps its
    # traceback.
    user_errors = (run_dir.RunDirError, distribute.StrategyError, DataError)

    try:
        hp = hparams.override(hparams.get(FLAGS.hparams_set), FLAGS.hparams)
        problems.get(FLAGS.problem)
    except ValueError as error:
        sys.exit(f"t2t_lite.trainer: {error}")
    try:
        config = run_config.from_flags(FLAGS)
        trainer.train_and_evaluate(config, hp)
    except user_errors as error:
        sys.exit(f"t2t_lite.trainer: {error}")


def run():
    app.run(main)


if __name__ == "__main__":
    run()

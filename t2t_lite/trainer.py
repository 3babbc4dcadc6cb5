"""Trains a problem with an hparams set: `python -m t2t_lite.trainer --problem=... --hparams_set=...`."""

import os
import sys

from absl import app, flags, logging

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "problem",
    "algorithmic_reverse",
    "Registered problem name (e.g. multi30k_ende), or module:ClassName of your own.",
)
flags.DEFINE_string("hparams_set", "transformer_tiny", "Registered hparams set name.")
flags.DEFINE_string("hparams", "", 'Overrides, "key=value,key=value".')
flags.DEFINE_string("data_dir", "", "Folder holding one sub-folder per problem (datagen output).")
flags.DEFINE_string("output_dir", None, "Where checkpoints, hparams, manifest and events go.")
flags.DEFINE_integer("train_steps", 2000, "Optimizer updates to train for (global step).")
flags.DEFINE_float(
    "train_minutes",
    0.0,
    "Stop after this many minutes of training (0 = no limit); the step budget still applies.",
)
flags.DEFINE_integer("eval_steps", 0, "Dev batches per evaluation; 0 = the whole dev split.")
flags.DEFINE_integer("eval_every", 1000, "Evaluate every this many steps.")
flags.DEFINE_integer("save_every", 1000, "Write a checkpoint every this many steps.")
flags.DEFINE_integer("keep_checkpoints", 20, "Checkpoints to keep (the paper averages up to 20).")
flags.DEFINE_integer("log_every", 100, "Print progress and write train summaries this often.")
flags.DEFINE_enum(
    "strategy",
    "auto",
    ["auto", "one_device", "mirrored", "multi_worker", "tpu"],
    "tf.distribute strategy; auto picks from TF_CONFIG and visible GPUs.",
)
flags.DEFINE_integer("num_gpus", None, "Use this many of the visible GPUs.")
flags.DEFINE_integer("cpu_replicas", 1, "Mirror over this many logical CPU devices.")
flags.DEFINE_integer("seed", 1, "Random seed for weights, dropout and shuffling.")
flags.DEFINE_bool(
    "jit_compile", None, "Compile the forward and backward pass with XLA (--nojit_compile: "
    "never). Unset: on GPUs and TPUs, off on CPUs, where tools/benchmark_train.py measures no gain.",
)  # fmt: skip
flags.DEFINE_integer(
    "eval_bleu_sentences", 200, "BLEU problems: dev sentences decoded and scored with sacreBLEU "
    "at every evaluation (eval/bleu, eval/samples); 0 turns it off."
)  # fmt: skip
flags.DEFINE_enum(
    "eval_decode_method", "beam", ["beam", "greedy"],
    "Search for the BLEU evaluation: the problem's beam (paper: 4, alpha 0.6) or greedy (faster).",
)  # fmt: skip
flags.mark_flag_as_required("output_dir")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from t2t_lite import hparams, problems
    from t2t_lite.problems.corpus import DataError
    from t2t_lite.training import distribute, run_dir, trainer

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
        config = trainer.RunConfig(
            problem=FLAGS.problem,
            output_dir=FLAGS.output_dir,
            data_dir=FLAGS.data_dir,
            train_steps=FLAGS.train_steps,
            train_minutes=FLAGS.train_minutes,
            eval_steps=FLAGS.eval_steps,
            eval_every=FLAGS.eval_every,
            save_every=FLAGS.save_every,
            keep_checkpoints=FLAGS.keep_checkpoints,
            log_every=FLAGS.log_every,
            strategy=FLAGS.strategy,
            num_gpus=FLAGS.num_gpus,
            cpu_replicas=FLAGS.cpu_replicas,
            seed=FLAGS.seed,
            jit_compile=FLAGS.jit_compile,
            eval_bleu_sentences=FLAGS.eval_bleu_sentences,
            eval_decode_method=FLAGS.eval_decode_method,
        )
        trainer.train_and_evaluate(config, hp)
    except user_errors as error:
        sys.exit(f"t2t_lite.trainer: {error}")


def run():
    app.run(main)


if __name__ == "__main__":
    run()

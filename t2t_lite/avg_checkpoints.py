"""Averages the last N checkpoints of a training run (the paper: 5 for base, 20 for big).

    python -m t2t_lite.avg_checkpoints --output_dir=runs/ende_base --num_last=5

writes runs/ende_base/averaged/ckpt-<newest step>, restorable like any checkpoint of the run;
point the decoder or exporter at runs/ende_base/averaged.
"""

import sys

from absl import app, flags

from t2t_lite import cli

FLAGS = flags.FLAGS
cli.define_folder("output_dir", None, "The training run's directory (holds ckpt-* files).")
flags.DEFINE_integer("num_last", 5, "How many of the newest checkpoints to average.")
cli.define_folder("averaged_dir", None, "Where to write; default OUTPUT_DIR/averaged.")
flags.DEFINE_bool(
    "allow_fewer", False, "Average what exists, with a warning, if fewer than num_last exist."
)
flags.mark_flag_as_required("output_dir")


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(f"Unexpected arguments: {' '.join(argv[1:])}")
    cli.quiet_tensorflow(FLAGS["verbosity"].present)
    from t2t_lite.training.averaging import average_last_checkpoints

    try:
        prefix = average_last_checkpoints(
            FLAGS.output_dir, FLAGS.num_last, FLAGS.averaged_dir, FLAGS.allow_fewer
        )
    except (ValueError, FileNotFoundError) as error:
        sys.exit(f"avg_checkpoints: {error}")
    print(prefix)


def run() -> None:
    cli.run(main, __name__)


if __name__ == "__main__":
    run()

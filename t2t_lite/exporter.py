"""Exports a trained run as SavedModels: `python -m t2t_lite.exporter --problem=... --output_dir=...`.

Writes EXPORT_DIR/MODEL_NAME/VERSION (text in, text out, plus ids signatures) and
EXPORT_DIR/MODEL_NAME_ids/VERSION (ids only, core TensorFlow ops), VERSION one more
than the newest already there. See t2t_lite/export/exporter.py for the signatures.
"""

import os
import sys

from absl import app, flags, logging

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "problem",
    None,
    "Registered problem name (e.g. multi30k_ende), or module:ClassName of your own.",
)
flags.DEFINE_string(
    "hparams_set", "", "Hparams set of the checkpoint; empty = the run's own hparams.json."
)
flags.DEFINE_string("hparams", "", 'Overrides, "key=value,key=value".')
flags.DEFINE_string("data_dir", "", "Folder holding one sub-folder per problem (datagen output).")
flags.DEFINE_string("output_dir", "", "The training run (hparams.json and checkpoints).")
flags.DEFINE_string(
    "checkpoint_path", None, "A checkpoint prefix or folder; default: the run's newest."
)
flags.DEFINE_string("export_dir", None, "Folder of exported models.")
flags.DEFINE_string("model_name", None, "Versions go to EXPORT_DIR/MODEL_NAME/VERSION.")
flags.DEFINE_integer("beam_size", None, "Default beam; default: the problem's (paper: 4).")
flags.DEFINE_float("alpha", None, "Default length-penalty alpha; default: the problem's (0.6).")
flags.DEFINE_integer(
    "extra_length", None, "Decode at most input length + this; default: the problem's (50)."
)
flags.DEFINE_list(
    "beam_sizes", [], "Beams a request may ask for (each adds a graph branch); default: "
    "powers of two below --beam_size, and --beam_size."
)  # fmt: skip
flags.DEFINE_integer(
    "max_input_length", None, "Longest accepted input in ids, EOS included; default: "
    "hparams max_position - extra_length."
)  # fmt: skip
flags.DEFINE_string(
    "ids_model_name", None, "Name of the ids-only SavedModel; default MODEL_NAME_ids; "
    "empty = do not write it."
)  # fmt: skip
flags.mark_flags_as_required(["problem", "export_dir", "model_name"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from t2t_lite.export import export_from_run

    try:
        result = export_from_run(
            FLAGS.problem,
            FLAGS.data_dir,
            FLAGS.output_dir,
            FLAGS.export_dir,
            FLAGS.model_name,
            checkpoint_path=FLAGS.checkpoint_path,
            hparams_set=FLAGS.hparams_set or None,
            overrides=FLAGS.hparams,
            ids_model_name=FLAGS.ids_model_name,
            beam_size=FLAGS.beam_size,
            alpha=FLAGS.alpha,
            extra_length=FLAGS.extra_length,
            beam_sizes=tuple(int(size) for size in FLAGS.beam_sizes),
            max_input_length=FLAGS.max_input_length,
        )
    except ValueError as error:  # RestoreError, SearchConfigError, ExportError
        sys.exit(f"t2t_lite.exporter: {error}")
    print(f"exported version {result.version}: {result.text_dir}")
    if result.ids_dir:
        print(f"ids-only SavedModel (core TensorFlow ops): {result.ids_dir}")


def run():
    app.run(main)


if __name__ == "__main__":
    run()

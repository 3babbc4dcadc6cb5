"""Exports a trained run as SavedModels: `python -m t2t_lite.exporter --problem=... --output_dir=...`.

Writes EXPORT_DIR/MODEL_NAME/VERSION (text in, text out, plus ids signatures) and
EXPORT_DIR/MODEL_NAME_ids/VERSION (ids only, core TensorFlow ops), VERSION one more
than the newest already there. See t2t_lite/export/exporter.py for the signatures.
"""

import sys

from absl import app, flags, logging

from t2t_lite import cli

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
cli.define_folder(
    "data_dir", "~/t2t_data", "Folder holding one sub-folder per problem (datagen output)."
)
cli.define_folders(
    "output_dir", "", "The training run (hparams.json and checkpoints). Several runs separated "
    "by commas (RUN_A,RUN_B) export as one ensemble SavedModel (not with --format=ctranslate2)."
)  # fmt: skip
flags.DEFINE_string(
    "checkpoint_path", None, "A checkpoint prefix or folder; default: the run's newest. For an "
    "ensemble, comma-separated: one per run of --output_dir, or several of its one run."
)  # fmt: skip
cli.define_ensemble_flags()
cli.define_folder("export_dir", None, "Folder of exported models.")
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
flags.DEFINE_enum(
    "format", "savedmodel", ["savedmodel", "ctranslate2"], "savedmodel: TensorFlow Serving's "
    "SavedModels; ctranslate2: a CTranslate2 model folder (pip install \"t2t_lite[ctranslate2]\")."
)  # fmt: skip
flags.DEFINE_enum(
    "quantization", None, ["int8", "int8_float32", "int8_float16", "int8_bfloat16", "int16",
    "float16", "bfloat16", "float32"], "--format=ctranslate2: weight type; default float32."
)  # fmt: skip
flags.DEFINE_enum(
    "decode_dtype", "float32", ["float32", "bfloat16"], "--format=savedmodel: the dtype the "
    "search computes in; bfloat16 pays on CPUs with bfloat16 instructions (AVX512_BF16, AMX)."
)  # fmt: skip
flags.DEFINE_bool(
    "xla", None, "--format=savedmodel: compile the search with XLA; default: only when this "
    "machine has a GPU (on CPUs the plain graph is faster) and the problem does not constrain "
    "the search."
)  # fmt: skip
flags.mark_flags_as_required(["problem", "export_dir", "model_name"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    cli.quiet_tensorflow(FLAGS["verbosity"].present)
    if not FLAGS["verbosity"].present:
        logging.set_verbosity(logging.WARNING)
    from t2t_lite.export import export_from_run

    # What both formats take: the run, where the export goes, and the search defaults.
    common = dict(
        checkpoint_path=FLAGS.checkpoint_path,
        hparams_set=FLAGS.hparams_set or None,
        overrides=FLAGS.hparams,
        beam_size=FLAGS.beam_size,
        alpha=FLAGS.alpha,
        extra_length=FLAGS.extra_length,
    )
    where = (FLAGS.problem, FLAGS.data_dir, FLAGS.output_dir, FLAGS.export_dir, FLAGS.model_name)
    if FLAGS.format == "ctranslate2":
        _export_ctranslate2(where, common)
        return
    try:
        result = export_from_run(
            *where,
            ids_model_name=FLAGS.ids_model_name,
            beam_sizes=tuple(int(size) for size in FLAGS.beam_sizes),
            max_input_length=FLAGS.max_input_length,
            decode_dtype=FLAGS.decode_dtype,
            xla=FLAGS.xla,
            ensemble_combination=FLAGS.ensemble_combination,
            ensemble_weights=cli.ensemble_weights(),
            **common,
        )
    except ValueError as error:  # RestoreError, SearchConfigError, ExportError
        sys.exit(f"t2t_lite.exporter: {error}")
    print(f"exported version {result.version}: {result.text_dir}")
    if result.ids_dir:
        print(f"ids-only SavedModel (core TensorFlow ops): {result.ids_dir}")


def _export_ctranslate2(where: tuple, common: dict):
    from t2t_lite.export.ctranslate2_export import export_ctranslate2_from_run

    try:
        result = export_ctranslate2_from_run(*where, quantization=FLAGS.quantization, **common)
    except ValueError as error:  # RestoreError, SearchConfigError, ExportError
        sys.exit(f"t2t_lite.exporter: {error}")
    print(f"exported version {result.version} (CTranslate2): {result.text_dir}")


def run():
    cli.run(main, __name__)


if __name__ == "__main__":
    run()

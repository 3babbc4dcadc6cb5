"""Prepares a problem's data: `python -m t2t_lite.datagen --problem=... [--raw_dir=...]`.

Builds the shared vocabulary and the TFRecord shards of every split under
`DATA_DIR/<problem>/` (--data_dir, default ~/t2t_data, where the trainer looks) and
records counts and a data fingerprint in its `metadata.json`. A rerun with unchanged
inputs and settings does nothing and says so. For the WMT14 problems the raw folder may
hold WMT's archives as published; --download fetches them there first.
"""

import sys

from absl import app, flags

from t2t_lite import cli

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "problem", None,
    "Registered problem name, e.g. multi30k_ende, or module:ClassName of a problem of your "
    "own (the module importable from PYTHONPATH), e.g. my_corpus:MyCorpus.",
)  # fmt: skip
cli.define_folder("data_dir", "~/t2t_data", "Folder holding one sub-folder per problem.")
cli.define_folder(
    "raw_dir", None,
    "Folder of raw parallel text files (or, for wmt14_*, WMT's archives as published); "
    "default DATA_DIR/<problem>/raw.",
)  # fmt: skip
cli.define_download_flags()
flags.DEFINE_integer("vocab_size", None, "Shared vocabulary size; default: the problem's own.")
flags.DEFINE_float(
    "bpe_dropout", None,
    "BPE-dropout (Provilkov et al., 2020) of the training pairs: the chance that each merge "
    "is skipped, e.g. 0.1; dev and test keep one deterministic segmentation. Default: the "
    "problem's own (0 for none). Use with --train_copies.",
)  # fmt: skip
flags.DEFINE_integer(
    "train_copies", None,
    "Times the training pairs are written, each copy segmented anew by --bpe_dropout: about "
    "the number of epochs the training will run. Default: the problem's own (1).",
)  # fmt: skip
flags.DEFINE_enum(
    "source", "auto", ["auto", "raw", "tfds"],
    "Where the corpus comes from: raw files, TensorFlow Datasets, or auto (raw files if found).",
)  # fmt: skip
flags.DEFINE_string(
    "tfds_data_dir", None,
    "Where TensorFlow Datasets keeps downloads and prepared data (TFDS source only); "
    "default: TFDS's own (~/tensorflow_datasets).",
)  # fmt: skip
flags.DEFINE_integer(
    "workers", None,
    "Processes that encode, shuffle and hash the examples; default: one per CPU. "
    "1 does all the work in this process.",
    lower_bound=1,
)  # fmt: skip
flags.DEFINE_bool(
    "registry_help", False, "Print the registered problems and hparams sets, then exit."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    cli.quiet_tensorflow(FLAGS["verbosity"].present)
    if FLAGS.registry_help:
        print(cli.registry_help())
        return
    if not FLAGS.problem:
        sys.exit(
            "t2t_lite.datagen: --problem is required: a registered name (--registry_help "
            "lists them) or module:ClassName"
        )
    from t2t_lite import problems
    from t2t_lite.problems.encoding import WorkerDied

    options = {}
    if FLAGS.vocab_size is not None:
        options["vocab_size"] = FLAGS.vocab_size
    for name in ("bpe_dropout", "train_copies"):
        if FLAGS[name].value is not None:
            options[name] = FLAGS[name].value
    if FLAGS.source != "auto":
        options["source"] = FLAGS.source
    if FLAGS.workers is not None:
        options["workers"] = FLAGS.workers
    if FLAGS.tfds_data_dir is not None:
        options["tfds_data_dir"] = FLAGS.tfds_data_dir
    try:
        download = cli.download_source(FLAGS)
        if download is not None:
            options["download"] = download
        problem = problems.get(FLAGS.problem)
        metadata = problem.generate_data(FLAGS.data_dir, FLAGS.raw_dir, **options)
    except (ValueError, WorkerDied) as error:
        sys.exit(f"t2t_lite.datagen: {error}")
    print(f"{problem.name}: {metadata.get('status', 'done')}")
    for split, counts in sorted(metadata.get("splits", {}).items()):
        print(
            f"  {split}: {counts['examples']:,} examples in {len(counts['shards'])} shards, "
            f"{counts['skipped_empty']:,} empty pairs skipped"
        )
    if "fingerprint" in metadata:
        print(f"  fingerprint {metadata['fingerprint']}")


def run():
    cli.run(main, __name__)


if __name__ == "__main__":
    run()

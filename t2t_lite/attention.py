"""Draws a trained model's attention: `python -m t2t_lite.attention --problem=... --output_dir=RUN`.

For one sentence (`--sentence="..."`, or line `--line` of `--from_file`) and the model's own
translation (beam search with the problem's settings, or `--method=greedy`), or the target
given by `--target`, writes to `--image_dir` (default RUN/attention) one PNG per attention
kind and layer: encoder self-attention, decoder self-attention and encoder-decoder attention,
each with a panel averaging the heads and a panel per head, axes labelled with the subword
pieces (docs/attention.md). `attention.npz` beside them holds the arrays drawn. Prints the files.
"""

import os
import sys

from absl import app, flags

from t2t_lite import cli
from t2t_lite.ids import EOS_ID

FLAGS = flags.FLAGS
flags.DEFINE_string(
    "problem",
    None,
    "Registered problem name (e.g. multi30k_ende), or module:ClassName of your own.",
)
flags.DEFINE_string(
    "hparams_set", None, "Hparams set of the checkpoint; default: the run's hparams.json."
)
flags.DEFINE_string("hparams", "", 'Overrides, "key=value,key=value".')
cli.define_folder(
    "data_dir", "~/t2t_data", "Folder holding one sub-folder per problem (the vocabulary)."
)
cli.define_folder("output_dir", None, "The training run: hparams.json and checkpoints.")
flags.DEFINE_string(
    "checkpoint_path", None, "A checkpoint prefix or folder (e.g. OUTPUT_DIR/averaged or OUTPUT_DIR/best); "
    "default: the newest checkpoint of --output_dir."
)  # fmt: skip
flags.DEFINE_string("sentence", None, "The source sentence.")
flags.DEFINE_string("from_file", None, "A text file, one source sentence per line.")
flags.DEFINE_integer("line", 1, "With --from_file: the line to draw, counting from 1.", 1)
flags.DEFINE_string(
    "target", None, "The target to draw the attention of; default: the model's translation."
)
flags.DEFINE_enum(
    "method", "beam", ["beam", "greedy"], "How the model translates when --target is not "
    "given: beam search with the problem's beam size and alpha, or greedy decoding."
)  # fmt: skip
cli.define_folder(
    "image_dir", None, "Folder the PNG files (and attention.npz) are written to; default: "
    "OUTPUT_DIR/attention."
)  # fmt: skip
flags.DEFINE_integer("dpi", 100, "Dots per inch of the PNG files.", 50)
flags.mark_flags_as_required(["problem", "output_dir"])

PROGRAM = "t2t_lite.attention"


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if (FLAGS.sentence is None) == (FLAGS.from_file is None):
        raise app.UsageError("pass exactly one of --sentence and --from_file")
    cli.quiet_tensorflow(FLAGS["verbosity"].present)
    image_dir = FLAGS.image_dir or os.path.join(FLAGS.output_dir, "attention")
    from t2t_lite.inference.text_files import read_lines
    from t2t_lite.models import attention_maps
    from t2t_lite.runs import load_trained_model

    try:
        if FLAGS.from_file is None:
            source, where = FLAGS.sentence, "--sentence"
        else:
            lines = read_lines(FLAGS.from_file)
            if FLAGS.line > len(lines):
                raise ValueError(f"{FLAGS.from_file} has {len(lines)} lines, no line {FLAGS.line}")
            source, where = lines[FLAGS.line - 1], f"{FLAGS.from_file} line {FLAGS.line}"
        trained = load_trained_model(
            FLAGS.problem,
            FLAGS.data_dir,
            FLAGS.output_dir,
            FLAGS.checkpoint_path,
            FLAGS.hparams_set,
            FLAGS.hparams,
        )
        encoders = trained.problem.encoders(FLAGS.data_dir)
        limit = trained.hp.max_position
        source_ids = _encode(encoders["inputs"], source, where, limit)
        source_labels = attention_maps.token_labels(encoders["inputs"], [*source_ids, EOS_ID])
        _check_drawable([attention_maps.ENCODER], source_labels, [], trained)
        how = "--target" if FLAGS.target is not None else f"the model's {FLAGS.method} output"
        if FLAGS.target is None:
            target_ids = _translate(trained, source_ids)
        else:
            target_ids = _encode(encoders["targets"], FLAGS.target, "--target", limit, empty=True)
        target_labels = attention_maps.token_labels(encoders["targets"], [*target_ids, EOS_ID])
        kinds = [attention_maps.DECODER, attention_maps.ENCODER_DECODER]
        _check_drawable(kinds, source_labels, target_labels, trained)
        attention = attention_maps.sentence_attention(trained.model, source_ids, target_ids)
        written = attention_maps.write_figures(
            attention, source_labels, target_labels, image_dir, FLAGS.dpi
        )
    except (ValueError, OSError) as error:
        sys.exit(f"{PROGRAM}: {error}")
    print(f"attention of {trained.checkpoint_path}")
    print(f"source: {' '.join(source_labels)}")
    print(f"target ({how}): {' '.join(target_labels)}")
    for path in written:
        print(path)


def _check_drawable(kinds: list, source_labels: list, target_labels: list, trained) -> None:
    """Refuses, before the work, pictures too large to draw (`attention_maps.MAX_PIXELS`)."""
    from t2t_lite.models import attention_maps

    for kind in kinds:
        attention_maps.check_drawable(
            kind, source_labels, target_labels, trained.model.num_heads, FLAGS.dpi
        )


def _encode(encoder, text: str, where: str, max_position: int, empty: bool = False) -> list:
    """Token ids of `text` (no EOS); a ValueError naming `where` for text the model cannot take."""
    # Spaces (and NUL characters) alone are pieces to a SentencePiece vocabulary, not a sentence.
    if not empty and not text.replace("\x00", "").strip():
        raise ValueError(f"{where} is empty; give a sentence to draw the attention of")
    try:
        ids = encoder.encode(text)
    except ValueError as error:
        raise ValueError(f"{where}: {error}") from None
    if not ids and not empty:
        raise ValueError(f"{where} is empty; give a sentence to draw the attention of")
    if len(ids) + 1 > max_position:  # + EOS
        raise ValueError(
            f"{where} has {len(ids)} tokens; the model has positions for {max_position - 1} and EOS"
        )
    return ids


def _translate(trained, source_ids: list) -> list:
    """The model's best output ids (no EOS) for `source_ids`, searched as the decoder does."""
    from t2t_lite.search import SearchConfig, Translator, pad_batch, strip_ids

    config = SearchConfig.for_problem(trained.problem, trained.hp, method=FLAGS.method)
    if config.max_input_length and len(source_ids) + 1 > config.max_input_length:
        raise ValueError(
            f"the source has {len(source_ids)} tokens; translating it needs positions up to "
            f"{len(source_ids) + 1 + config.extra_length} and the model has "
            f"{trained.hp.max_position}: give its translation with --target"
        )
    constraint = trained.problem.search_constraint(FLAGS.data_dir)
    ids, _ = Translator(trained.model, config, constraint=constraint).search(
        pad_batch([source_ids])
    )
    return strip_ids(ids.numpy()[0, 0])  # may be empty: the picture then shows EOS alone


def run():
    cli.run(main, __name__)


if __name__ == "__main__":
    run()

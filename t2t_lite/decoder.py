"""Decodes text with a trained model: `python -m t2t_lite.decoder --problem=... --output_dir=...`.

From a file: `--decode_from_file=IN [--decode_to_file=OUT] [--reference_file=REF]` writes one
line per input line, in input order, and with a reference prints and saves sacreBLEU (with its
signature) and the paper's tokenized BLEU; `--output_format=jsonl` writes one JSON object per
line instead, with the hypotheses' scores and token counts. Interactively: `--decode_interactive`
reads lines from stdin and answers each on stdout. Search settings default to the problem's
(the paper's beam 4, alpha 0.6, input length + 50).

Scoring (forced decoding): `--decode_from_file=SOURCES --score_file=TARGETS [--decode_to_file=OUT]`
writes, per line pair, log P(target + EOS | source), its per-token terms and the length-normalised
score as JSON lines (docs/decoding.md).

Ensembles: `--output_dir=RUN_A,RUN_B[,...]` (or one run and `--checkpoint_path=CKPT_1,CKPT_2`)
decodes and scores with the models' combined next-token distributions: the weighted mean of
their probabilities by default (`--ensemble_combination=mean_probability`, as fairseq), or the
renormalised weighted mean of their log-probabilities (`mean_log_probability`, as Marian);
`--ensemble_weights` weights the models (default equal). Every search method works, and n-best.
"""

import sys

from absl import app, flags

from t2t_lite import cli

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
cli.define_folders(
    "output_dir", None, "The training run: hparams.json and checkpoints. Several runs separated "
    "by commas (RUN_A,RUN_B) decode as an ensemble; they must share the problem's vocabulary."
)  # fmt: skip
flags.DEFINE_string(
    "checkpoint_path", None, "A checkpoint prefix or folder (e.g. OUTPUT_DIR/averaged or OUTPUT_DIR/best); "
    "default: the newest checkpoint of --output_dir. For an ensemble, comma-separated: one per run "
    "of --output_dir, or several checkpoints of its one run."
)  # fmt: skip
cli.define_ensemble_flags()
flags.DEFINE_string("decode_from_file", None, "Input text, one sentence per line.")
flags.DEFINE_string(
    "decode_to_file", None, "Output file; default "
    "OUTPUT_DIR/decode/<input>.<checkpoint>.<method>.decodes (.decodes.jsonl with --output_format=jsonl, <input>.scores.jsonl with --score_file)."
)  # fmt: skip
flags.DEFINE_string(
    "reference_file", None, "References aligned with the input: score the output and write "
    "<decode_to_file>.<metric>.json."
)  # fmt: skip
flags.DEFINE_bool("decode_interactive", False, "Decode lines typed on stdin.")
flags.DEFINE_string(
    "constraints_file", None, "One JSON list of phrases per --decode_from_file line "
    '(e.g. ["Hund", "roten Ball"], [] for none) that its output must contain (beam search).'
)  # fmt: skip
flags.DEFINE_string(
    "prefix_file", None, "One line of target text per --decode_from_file line (empty for "
    "none) that its output must start with."
)  # fmt: skip
flags.DEFINE_enum("method", "beam", ["beam", "greedy", "sample"], "Search method.")
flags.DEFINE_integer("beam_size", None, "Beam size; default: the problem's (paper: 4).")
flags.DEFINE_float("alpha", None, "Length penalty exponent; default: the problem's (paper: 0.6).")
flags.DEFINE_integer(
    "extra_length", None, "Maximum output length = input length + this; default: the problem's "
    "(paper: 50)."
)  # fmt: skip
flags.DEFINE_float("temperature", 1.0, "Sampling temperature (--method=sample).")
flags.DEFINE_integer("top_k", 0, "Sample among the k most probable tokens; 0 = all.")
flags.DEFINE_integer("seed", None, "Sampling seed, for reproducible samples.")
flags.DEFINE_integer("batch_size", 32, "Sentences per batch (batches group similar lengths).")
flags.DEFINE_bool(
    "return_beams", False, "Write all beam hypotheses, best first, tab-separated on each line "
    "(with --output_format=jsonl, all of them in each line's object)."
)  # fmt: skip
flags.DEFINE_enum(
    "output_format", "text", ["text", "jsonl"], "text: one output line per input line; jsonl: "
    "one JSON object per input line with the hypotheses, their scores and token counts."
)  # fmt: skip
flags.DEFINE_string(
    "score_file", None, "Targets aligned line by line with --decode_from_file: instead of "
    "decoding, write each pair's log-probability under the model as JSON lines "
    "(default OUTPUT_DIR/decode/<input>.scores.jsonl)."
)  # fmt: skip
flags.DEFINE_enum(
    "engine", "tensorflow", ["tensorflow", "ctranslate2"], "tensorflow: restore the checkpoint; "
    "ctranslate2: decode with the CTranslate2 export at --ct2_model (docs/export.md)."
)  # fmt: skip
flags.DEFINE_string(
    "ct2_model", None, "--engine=ctranslate2: EXPORT_DIR/MODEL_NAME (its newest version) or "
    "EXPORT_DIR/MODEL_NAME/VERSION, written by `t2t_lite.exporter --format=ctranslate2`."
)  # fmt: skip
flags.DEFINE_enum(
    "decode_dtype", "float32", ["float32", "bfloat16"], "--engine=tensorflow: the dtype the "
    "search computes in (the exporter's option of the same name); bfloat16 pays on CPUs with "
    "bfloat16 instructions (AVX512_BF16, AMX) and on GPUs."
)  # fmt: skip
flags.DEFINE_bool(
    "ptb_output", False, "Parsing: write trees in Penn Treebank form, inside the label-less "
    "outer bracket `( (S ...) )`, and score them against --reference_file's trees as they are, "
    "as the EVALB program does with PTB gold files."
)  # fmt: skip
flags.mark_flags_as_required(["problem", "output_dir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {' '.join(argv[1:])}")
    if bool(FLAGS.decode_from_file) == FLAGS.decode_interactive:
        raise app.UsageError("pass exactly one of --decode_from_file and --decode_interactive")
    if FLAGS.score_file:
        _check_scoring_flags()
    if FLAGS.engine == "ctranslate2" and FLAGS.decode_dtype != "float32":
        raise app.UsageError(
            "--decode_dtype is for --engine=tensorflow; a CTranslate2 export computes in the "
            "type its --quantization gave it"
        )
    if (FLAGS.constraints_file or FLAGS.prefix_file) and not FLAGS.decode_from_file:
        raise app.UsageError("--constraints_file and --prefix_file go with --decode_from_file")
    cli.quiet_tensorflow(FLAGS["verbosity"].present)
    from t2t_lite import problems
    from t2t_lite.inference import decode, outputs, scoring
    from t2t_lite.runs import in_decode_dtype, load_models
    from t2t_lite.runs.ensemble import describe
    from t2t_lite.search import SearchConfig

    def to_stderr(line):
        print(line, file=sys.stderr, flush=True)

    printer = to_stderr if FLAGS.decode_interactive else print
    try:
        search = dict(
            method=FLAGS.method,
            beam_size=FLAGS.beam_size,
            alpha=FLAGS.alpha,
            extra_length=FLAGS.extra_length,
            temperature=FLAGS.temperature,
            top_k=FLAGS.top_k,
            seed=FLAGS.seed,
            # Every returned beam must be exact, not only the best one.
            stop_early=not FLAGS.return_beams,
        )
        SearchConfig.for_problem(problems.get(FLAGS.problem), **search)  # checked before restoring
        if FLAGS.engine == "ctranslate2":
            decoder = _ctranslate2_decoder(search, printer)
        else:
            trained = load_models(
                FLAGS.problem,
                FLAGS.data_dir,
                FLAGS.output_dir,
                FLAGS.checkpoint_path,
                FLAGS.hparams_set,
                FLAGS.hparams,
                FLAGS.ensemble_combination,
                cli.ensemble_weights(),
            )
            trained = in_decode_dtype(trained, FLAGS.decode_dtype)
            config = SearchConfig.for_problem(trained.problem, trained.hp, **search)
            decoder = decode.Decoder(trained, FLAGS.data_dir, config, FLAGS.batch_size, printer)
        trained, config = decoder.trained, decoder.config
        if FLAGS.ptb_output:
            decode.use_ptb_form(decoder.problem)
        if FLAGS.score_file:
            printer(f"scoring with {describe(trained)}: alpha {config.alpha:g}")
            output = FLAGS.decode_to_file or outputs.default_scores_path(
                FLAGS.output_dir, FLAGS.decode_from_file, trained.checkpoint_path
            )
            scoring.score_file(decoder, FLAGS.decode_from_file, FLAGS.score_file, output)
            return
        dtype = f" in {FLAGS.decode_dtype}" if FLAGS.decode_dtype != "float32" else ""
        printer(f"decoding with {describe(trained)}{dtype}: {config}")
        if FLAGS.decode_interactive:
            decode.interactive(
                decoder, return_beams=FLAGS.return_beams, output_format=FLAGS.output_format
            )
            return
        checkpoint = FLAGS.ct2_model if FLAGS.engine == "ctranslate2" else trained.checkpoint_path
        output = FLAGS.decode_to_file or outputs.default_output_path(
            FLAGS.output_dir,
            FLAGS.decode_from_file,
            config,
            FLAGS.output_format,
            checkpoint,
            FLAGS.decode_dtype,
        )
        decode.decode_file(
            decoder,
            FLAGS.decode_from_file,
            output,
            FLAGS.reference_file,
            FLAGS.return_beams,
            FLAGS.output_format,
            FLAGS.constraints_file,
            FLAGS.prefix_file,
        )
    except (ValueError, OSError) as error:
        sys.exit(f"t2t_lite.decoder: {error}")


def _check_scoring_flags():
    """Refuses flags that have no meaning when scoring, before anything loads."""
    if FLAGS.decode_interactive:
        raise app.UsageError("--score_file scores --decode_from_file; drop --decode_interactive")
    for name in ("reference_file", "return_beams", "constraints_file", "prefix_file"):
        if FLAGS[name].value:
            raise app.UsageError(f"--{name} is for decoding; drop it with --score_file")
    if FLAGS.engine != "tensorflow":
        sys.exit(
            f"t2t_lite.decoder: scoring (--score_file) needs --engine=tensorflow (the "
            f"restored checkpoint), not --engine={FLAGS.engine}"
        )


def _ctranslate2_decoder(search: dict, printer):
    from t2t_lite.runs import is_ensemble

    if is_ensemble(FLAGS.output_dir, FLAGS.checkpoint_path):
        raise ValueError(
            "--engine=ctranslate2 decodes one exported model, not an ensemble; decode an "
            "ensemble with --engine=tensorflow"
        )
    if not FLAGS.ct2_model:
        raise ValueError("--engine=ctranslate2 needs --ct2_model=EXPORT_DIR/MODEL_NAME[/VERSION]")
    from t2t_lite.inference.ctranslate2_engine import ctranslate2_decoder

    return ctranslate2_decoder(
        FLAGS.ct2_model, FLAGS.problem, FLAGS.data_dir, search, FLAGS.batch_size, printer
    )


def run():
    cli.run(main, __name__)


if __name__ == "__main__":
    run()

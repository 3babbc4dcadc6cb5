r"""Decoding speed of a trained model: in-process (with and without the cache) and exported.

    python tools/benchmark_decode.py --problem=multi30k_ende --data_dir=DATA --output_dir=RUN \
        [--checkpoint_path=...] [--num_sentences=100] [--batch_size=16] [--beam_size=4] \
        [--alpha=0.6] [--source_file=TEXT [--reference_file=TEXT]] [--rounds=3] \
        [--export_dir=DIR] [--ctranslate2=auto|on|off] [--ct2_threads=N] [--no_uncached]
    python tools/benchmark_decode.py --base_shape [--shape=base|multi30k] [--xla_row] [--rounds=3]

Decodes the first `num_sentences` dev sentences (or non-empty lines of `--source_file`)
with the same beam search (beam `--beam_size`, alpha `--alpha`, both the problem's by
default: 4 and 0.6) four ways, in one process, and two more through CTranslate2 when it
is installed (`--ctranslate2=auto`; `on` requires it):

* in-process cached: the `Translator` (what the decoder command, the exporter and training
  BLEU use): the encoder runs once and every step feeds one token through `decode_step`,
  which computes projections and feed-forward for that one position and attends over the
  stored keys and values of earlier positions. The cache is a head-major buffer
  ([N, H, C, Dh], read by the attention products as it lies) of C slots: the positions
  decoded so far rounded up to a block of 16 (the maximum decode length under XLA, whose
  shapes are static). The step scatters its key and value into slot i and attends over
  all C slots with the unwritten ones masked out, while the dense layers see one position;
* in-process uncached (left out with `--no_uncached`, it is the slowest by far): every
  step reruns the full `model.decode` on the whole prefix
  (tensor2tensor's slow path), so step i pushes all i positions through every layer
  (projections and feed-forward for i positions, O(i^2) self-attention work) and repeats
  the work of every earlier step;
* SavedModel translate_ids: the model exported by `t2t_lite.export.export_model` (the code
  of `python -m t2t_lite.exporter`, with `--beam_size` and `--alpha` as the defaults and the
  default offered beam sizes), reloaded with `tf.saved_model.load`; ids in, ids out;
* SavedModel serving_default: the same SavedModel, text in, text out (tokenization and
  detokenization inside the graph).

* CTranslate2 float32 and int8: the model exported by
  `t2t_lite.export.export_ctranslate2` (`--format=ctranslate2`, without and with
  `--quantization=int8`) and searched by the decoder's `--engine=ctranslate2`
  (`CTranslate2Translator`) on `--ct2_threads` threads (default: this process's CPUs);
  ids in, ids out. Its length penalty is CTranslate2's (docs/export.md), so outputs may
  differ from ours where alpha > 0; the BLEU column says what that costs.

The exports go to a temporary folder, deleted at the end, or to `--export_dir` (as the
next version of EXPORT_DIR/PROBLEM/ and EXPORT_DIR/PROBLEM_ct2/, kept). Only the text
SavedModel is written (its `translate_ids` is the ids-only SavedModel's signature).

Every row sees the same sentences in the same length-sorted batches of `--batch_size`
(dev sentences are detokenized, then tokenized again, so the text row and the ids rows
read identical ids). Each row is traced and run once on the first batch before timing.
Then, `--rounds` times, all batches are decoded with the rows taking turns batch by batch
(round-robin, the first row rotating), so that a busy neighbour on the machine slows all
rows alike; each row reports its median round.

Prints a table of sentences/s and target tokens/s (tokens of the best hypotheses, EOS not
counted; for the text row, its translations tokenized again with the target vocabulary),
the median seconds and their spread over the rounds ((max - min) / median), how many
best hypotheses equal the cached in-process row's (for the text row: its translations
against the cached ids detokenized, as the decoder command prints them), and, with
`--reference_file` (the references of `--source_file`, line for line), each row's
sacreBLEU.

`--base_shape` times random weights instead, at the shape of `../shared/BENCHMARKS.md`'s
decoding table: `--shape=base` (the default) is transformer_base with a 37,000-token shared
vocabulary, `--shape=multi30k` transformer_multi30k with 8,000; 32 sentences of 20 random
source tokens in one batch, beam 4, alpha 0.6, 30 output tokens each (the length limit;
random weights all but never choose EOS, so every output runs to it). Rows: the in-process
Translator (the SavedModel's search: a graph on CPUs, XLA on GPUs), with `--xla_row` the
same search compiled by XLA, the SavedModel's translate_ids in float32 and in bfloat16
(`--decode_dtype`), and CTranslate2 float32 and int8.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import keras
import numpy as np
import tensorflow as tf

from t2t_lite import hparams
from t2t_lite.decoding import beam_search
from t2t_lite.export import BeamSearcher, export_model
from t2t_lite.export.exporter import TranslationModule
from t2t_lite.ids import PAD_ID
from t2t_lite.metrics.bleu import sacrebleu_corpus
from t2t_lite.models import build_transformer
from t2t_lite.runs import load_trained_model
from t2t_lite.search import (
    SearchConfig,
    Translator,
    length_batches,
    pad_batch,
    row_limits,
    strip_ids,
)

CACHED = "in-process cached (Translator)"
UNCACHED = "in-process uncached (full decode/step)"
SAVED_IDS = "SavedModel translate_ids (ids)"
SAVED_TEXT = "SavedModel serving_default (text)"
CT2_FLOAT32 = "CTranslate2 float32 (ids)"
CT2_INT8 = "CTranslate2 int8 (ids)"
ROWS = (CACHED, UNCACHED, SAVED_IDS, SAVED_TEXT)
CT2_ROWS = (CT2_FLOAT32, CT2_INT8)
BASE_VOCAB, BASE_SENTENCES, BASE_SOURCE, BASE_OUTPUT = 37_000, 32, 20, 30


def uncached_search(model, config: SearchConfig):
    """Beam search whose step reruns `model.decode` on the prefix: ids [B, S] -> (ids, scores)."""
    vocab_size = model.target_vocab_size or model.vocab_size

    def step(ids, i, states):
        del i
        logits = model.decode(ids, states["encoder_output"], states["encoder_mask"])
        return logits[:, -1, :], states  # [N, V]

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def search(inputs):
        encoder_output, encoder_mask = model.encode(inputs, training=False)
        return beam_search(
            step,
            tf.zeros([tf.shape(inputs)[0]], tf.int32),
            config.beam_size,
            tf.shape(inputs)[1] + config.extra_length,
            vocab_size,
            config.alpha,
            states={"encoder_output": encoder_output, "encoder_mask": encoder_mask},
            max_lengths=row_limits(inputs, config.extra_length),
            pad_id=PAD_ID,
        )

    return search


def dev_sentences(problem, data_dir: str, count: int) -> list:
    """Source ids (EOS removed) of the first `count` dev examples."""
    sentences = []
    for example in problem.examples("dev", data_dir).take(count).as_numpy_iterator():
        ids = [int(token) for token in example["inputs"]]
        sentences.append(ids[:-1] if ids and ids[-1] == 1 else ids)
    return sentences


def file_sentences(problem, data_dir: str, path: str, count: int) -> list:
    """Source ids of the first `count` non-empty lines of a text file."""
    return [problem.encoders(data_dir)["inputs"].encode(line) for line in file_lines(path, count)]


def file_lines(path: str, count: int) -> list:
    """The first `count` non-empty lines of a text file, stripped."""
    with open(path, encoding="utf-8") as handle:
        return [line.strip() for line in handle if line.strip()][:count]


def ids_runner(search, start_column: bool = True):
    """A batch runner of an ids search: (ids lists, texts) -> best hypotheses' ids.

    Args:
        search: ids [B, S] int32 -> ids [B, K, L] (first of a tuple, or "output_ids" of a dict).
        start_column: whether column 0 of the output ids is the start id (the Translator's)
            or already the first generated id (the SavedModel's).
    """

    def run(batch_ids: list, batch_texts: list) -> list:
        del batch_texts
        outputs = search(tf.constant(pad_batch(batch_ids)))
        ids = (outputs["output_ids"] if isinstance(outputs, dict) else outputs[0]).numpy()
        if not start_column:
            ids = np.pad(ids[:, :1], [(0, 0), (0, 0), (1, 0)])  # [B, 1, L + 1]
        return [strip_ids(beams[0]) for beams in ids]

    return run


def ct2_runner(translator):
    """A batch runner of a `CTranslate2Translator`: (ids lists, texts) -> best hypotheses' ids."""

    def run(batch_ids: list, batch_texts: list) -> list:
        del batch_texts
        ids, _ = translator.search(pad_batch(batch_ids))
        return [strip_ids(beams[0]) for beams in ids]

    return run


def text_runner(signature):
    """A batch runner of a text signature: (ids lists, texts) -> best translations (str)."""

    def run(batch_ids: list, batch_texts: list) -> list:
        del batch_ids
        outputs = signature(sentences=tf.constant(batch_texts))
        return [text.decode("utf-8") for text in outputs["translations"].numpy()]

    return run


def run_batch(run, batch: list, sentences: list, texts: list, outputs: list) -> float:
    """Runs `run` on one batch of sentence indices, storing its results; returns seconds."""
    start = time.perf_counter()
    results = run([sentences[i] for i in batch], [texts[i] for i in batch])
    seconds = time.perf_counter() - start
    for index, result in zip(batch, results):
        outputs[index] = result
    return seconds


def time_rows(runners: dict, sentences: list, texts: list, batch_size: int, rounds: int) -> dict:
    """Times every runner over all batches `rounds` times; {name: {"times", "outputs"}}.

    Each runner is first run on the first batch (tracing, graph optimisation). The runners
    then take turns batch by batch (round r, batch b starts with runner r + b, modulo the
    number of runners), so load from other processes falls on all of them alike. "times"
    holds each round's total seconds; "outputs" the first round's results in input order.
    """
    batches = length_batches([len(ids) for ids in sentences], batch_size)
    for run in runners.values():
        run_batch(run, batches[0], sentences, texts, [None] * len(sentences))
    names = list(runners)
    results = {name: {"times": [], "outputs": [None] * len(sentences)} for name in names}
    for round_index in range(rounds):
        seconds = dict.fromkeys(names, 0.0)
        for batch_index, batch in enumerate(batches):
            shift = (round_index + batch_index) % len(names)
            for name in names[shift:] + names[:shift]:
                outputs = results[name]["outputs"] if round_index == 0 else [None] * len(texts)
                seconds[name] += run_batch(runners[name], batch, sentences, texts, outputs)
        for name in names:
            results[name]["times"].append(seconds[name])
    return results


def summarize(results: dict, target_encoder, references: list | None = None) -> dict:
    """Adds seconds (median), spread, rates, tokens and `same` (vs the first row) to each row.

    With `references` (one per sentence), also `bleu`: the row's sacreBLEU against them.
    """
    first = next(iter(results.values()))["outputs"]
    first_text = [target_encoder.decode(ids) for ids in first]
    for result in results.values():
        outputs = result["outputs"]
        is_text = bool(outputs) and isinstance(outputs[0], str)
        if is_text:
            tokens = sum(len(target_encoder.encode(text)) for text in outputs)
            same = sum(a == b for a, b in zip(outputs, first_text))
            texts = outputs
        else:
            tokens = sum(len(ids) for ids in outputs)
            same = sum(list(a) == list(b) for a, b in zip(outputs, first))
            texts = [target_encoder.decode(ids) for ids in outputs]
        if references is not None:
            result["bleu"] = sacrebleu_corpus(texts, references).score
        seconds = statistics.median(result["times"])
        result.update(
            seconds=seconds,
            spread=(max(result["times"]) - min(result["times"])) / seconds,
            sentences_per_sec=len(outputs) / seconds,
            tokens_per_sec=tokens / seconds,
            tokens=tokens,
            same=same,
        )
    return results


def format_table(results: dict, count: int) -> list:
    """The printed table, one string per line; ratios and sameness are against the first row."""
    first = next(iter(results))
    label = "cached" if first == CACHED else "first"
    bleu = all("bleu" in result for result in results.values())
    lines = [
        f"{'decoding':<40}{'sentences/s':>12}{'tokens/s':>10}{'seconds':>9}{'spread':>8}"
        f"{'vs ' + label:>11}{'same as ' + label:>16}" + (f"{'sacreBLEU':>11}" if bleu else "")
    ]
    for name, result in results.items():
        spread = f"{result['spread']:.0%}"
        ratio = f"{result['seconds'] / results[first]['seconds']:.2f}x"
        same = f"{result['same']}/{count}"
        lines.append(
            f"{name:<40}{result['sentences_per_sec']:>12.2f}{result['tokens_per_sec']:>10.1f}"
            f"{result['seconds']:>9.2f}{spread:>8}{ratio:>11}{same:>16}"
            + (f"{result['bleu']:>11.2f}" if bleu else "")
        )
    return lines


def export_and_load(trained, data_dir: str, export_dir: str, config: SearchConfig) -> tuple:
    """Exports with the project's exporter and reloads it: (ExportResult, loaded, seconds)."""
    start = time.perf_counter()
    result = export_model(
        trained,
        data_dir,
        export_dir,
        trained.problem.name,
        config,
        ids_model_name="",
    )
    seconds = time.perf_counter() - start
    try:
        import tensorflow_text  # noqa: F401  (registers the SentencePiece ops, if used)
    except ImportError:
        pass
    return result, tf.saved_model.load(result.text_dir), seconds


def ctranslate2_wanted(setting: str) -> bool:
    """Whether to add the CTranslate2 rows: `on`, or `auto` with ctranslate2 installed."""
    if setting == "off":
        return False
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        if setting == "on":
            raise SystemExit(
                'benchmark_decode: --ctranslate2=on needs ctranslate2: pip install "t2t_lite[ctranslate2]"'
            ) from None
        print("ctranslate2 is not installed: no CTranslate2 rows")
        return False
    return True


def ct2_runners(trained, data_dir: str, export_dir: str, config: SearchConfig, threads: int):
    """{row: runner} of the float32 and int8 CTranslate2 exports of `trained`."""
    from t2t_lite.export.ctranslate2_export import export_ctranslate2
    from t2t_lite.search.ctranslate2_search import CTranslate2Translator

    runners = {}
    for name, quantization in ((CT2_FLOAT32, None), (CT2_INT8, "int8")):
        start = time.perf_counter()
        exported = export_ctranslate2(
            trained, data_dir, export_dir, f"{trained.problem.name}_ct2", config, quantization
        )
        print(
            f"exported CTranslate2 {quantization or 'float32'} version {exported.version} in "
            f"{time.perf_counter() - start:.1f} s: {exported.text_dir}"
        )
        translator = CTranslate2Translator(exported.text_dir, config, threads=threads)
        runners[name] = ct2_runner(translator)
    return runners


# Random-weights shapes: (hparams set, shared vocabulary size).
SHAPES = {"base": ("transformer_base", BASE_VOCAB), "multi30k": ("transformer_multi30k", 8_000)}
DEFAULT = "in-process Translator (= SavedModel)"
XLA = "in-process Translator, XLA"
SAVED_BF16 = "SavedModel translate_ids, bfloat16"


def base_shape(args) -> dict:
    """The `--base_shape` table: random weights at BENCHMARKS.md's decoding shape."""
    from t2t_lite.export import ctranslate2_spec
    from t2t_lite.runs import TrainedModel, in_decode_dtype
    from t2t_lite.search.ctranslate2_search import CTranslate2Translator

    keras_seed = 1
    keras.utils.set_random_seed(keras_seed)
    hparams_set, vocab = SHAPES[args.shape]
    hp = hparams.get(hparams_set)
    model = build_transformer(hp, vocab)
    rng = np.random.default_rng(keras_seed)
    sentences = [list(rng.integers(3, vocab, BASE_SOURCE)) for _ in range(BASE_SENTENCES)]
    # Outputs of at most input (20 + EOS) + extra_length = 30 tokens.
    extra = BASE_OUTPUT - BASE_SOURCE - 1
    config = SearchConfig(
        beam_size=4, alpha=0.6, extra_length=extra, max_input_length=hp.max_position - extra
    )
    print(
        f"{hparams_set}, random weights, shared vocabulary {vocab:,}: {BASE_SENTENCES} "
        f"sentences x {BASE_SOURCE} source tokens in one batch, beam 4, alpha 0.6, at most "
        f"{BASE_OUTPUT} output tokens, {args.ct2_threads} CTranslate2 threads, median of "
        f"{args.rounds} round(s)"
    )
    tokens = ["<pad>", "</s>"] + [f"t{i}" for i in range(2, vocab)]
    bf16 = in_decode_dtype(TrainedModel(model, hp, None, ""), "bfloat16").model
    with tempfile.TemporaryDirectory(prefix="benchmark_decode_base_") as temporary:
        runners = {DEFAULT: ids_runner(Translator(model, config).search)}
        if args.xla_row:
            runners[XLA] = ids_runner(Translator(model, config, jit_compile=True).search)
        for name, searched in ((SAVED_IDS, model), (SAVED_BF16, bf16)):
            module = TranslationModule(BeamSearcher(searched, config))
            folder = os.path.join(temporary, name.split()[-1])
            tf.saved_model.save(module, folder, module.signatures())
            loaded = tf.saved_model.load(folder)
            runners[name] = ids_runner(
                lambda ids, loaded=loaded: loaded.signatures["translate_ids"](input_ids=ids),
                start_column=False,
            )
        for name, quantization in ((CT2_FLOAT32, None), (CT2_INT8, "int8")):
            folder = os.path.join(temporary, quantization or "float32")
            # A fresh spec each time: converting one changes its weights in place.
            spec = ctranslate2_spec.transformer_spec(model, tokens, tokens, hp.max_position)
            ctranslate2_spec.SpecConverter(spec).convert(folder, quantization=quantization)
            translator = CTranslate2Translator(folder, config, threads=args.ct2_threads)
            runners[name] = ct2_runner(translator)
        texts = [""] * len(sentences)
        results = time_rows(runners, sentences, texts, BASE_SENTENCES, args.rounds)
    target = _NumberedTokens()
    summarize(results, target)
    for line in format_table(results, len(sentences)):
        print(line)
    return results


class _NumberedTokens:
    """The base-shape rows' target "encoder": ids as text, for the sameness count."""

    def decode(self, ids) -> str:
        return " ".join(str(i) for i in ids)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="multi30k_ende")
    parser.add_argument("--data_dir", default="")
    parser.add_argument(
        "--output_dir", default=None, help="the run (required but with --base_shape)"
    )
    parser.add_argument("--checkpoint_path", default=None)
    parser.add_argument("--num_sentences", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=None, help="default: the problem's")
    parser.add_argument("--source_file", default=None, help="text to decode instead of dev")
    parser.add_argument(
        "--reference_file", default=None, help="references of --source_file: a BLEU column"
    )
    parser.add_argument("--rounds", type=int, default=3, help="timed runs of every row")
    parser.add_argument(
        "--export_dir", default=None, help="export here (kept); default: a temporary folder"
    )
    parser.add_argument("--ctranslate2", choices=("auto", "on", "off"), default="auto")
    parser.add_argument(
        "--ct2_threads", type=int, default=len(os.sched_getaffinity(0)),
        help="CTranslate2's threads; default: this process's CPUs",
    )  # fmt: skip
    parser.add_argument(
        "--base_shape", action="store_true", help="time random weights at BENCHMARKS.md's shape"
    )
    parser.add_argument(
        "--shape", choices=sorted(SHAPES), default="base", help="--base_shape's model"
    )
    parser.add_argument(
        "--xla_row", action="store_true", help="--base_shape: add the XLA-compiled search"
    )
    parser.add_argument(
        "--no_uncached", action="store_true", help="leave out the (slowest) uncached row"
    )
    args = parser.parse_args(argv)
    if args.rounds < 1:
        parser.error(f"--rounds must be >= 1, got {args.rounds}")
    if args.reference_file and not args.source_file:
        parser.error("--reference_file needs --source_file (its references, line for line)")
    if args.base_shape:
        ctranslate2_wanted("on")
        return base_shape(args)
    if not args.output_dir:
        parser.error("--output_dir (the trained run) is required")
    with_ct2 = ctranslate2_wanted(args.ctranslate2)

    trained = load_trained_model(args.problem, args.data_dir, args.output_dir, args.checkpoint_path)
    config = SearchConfig.for_problem(
        trained.problem, trained.hp, beam_size=args.beam_size, alpha=args.alpha
    )
    encoders = trained.problem.encoders(args.data_dir)
    references = None
    if args.source_file:
        texts = file_lines(args.source_file, args.num_sentences)
        if args.reference_file:
            references = reference_lines(args.source_file, args.reference_file, len(texts))
    else:
        dev = dev_sentences(trained.problem, args.data_dir, args.num_sentences)
        texts = [encoders["inputs"].decode(ids) for ids in dev]
    sentences = [list(encoders["inputs"].encode(text)) for text in texts]
    source_tokens = sum(len(ids) for ids in sentences)
    print(
        f"{args.problem}, {trained.checkpoint_path}: {len(sentences)} sentences of "
        f"{args.source_file or 'dev'} "
        f"({source_tokens / len(sentences):.1f} source tokens on average), batch "
        f"{args.batch_size}, beam {config.beam_size}, alpha {config.alpha}, max length input + "
        f"{config.extra_length}, {tf.config.threading.get_intra_op_parallelism_threads() or 'all'}"
        f" intra-op threads, median of {args.rounds} round(s)"
    )
    with tempfile.TemporaryDirectory(prefix="benchmark_decode_") as temporary:
        export_dir = args.export_dir or os.path.join(temporary, "export")
        exported, loaded, seconds = export_and_load(trained, args.data_dir, export_dir, config)
        print(
            f"exported version {exported.version} (beam sizes {list(exported.search.beam_sizes)}"
            f") in {seconds:.1f} s: {exported.text_dir}"
            + ("" if args.export_dir else " (temporary)")
        )
        runners = {
            CACHED: ids_runner(Translator(trained.model, config).search),
            SAVED_IDS: ids_runner(
                lambda ids: loaded.signatures["translate_ids"](input_ids=ids), start_column=False
            ),
            SAVED_TEXT: text_runner(loaded.signatures["serving_default"]),
        }
        if not args.no_uncached:
            runners[UNCACHED] = ids_runner(uncached_search(trained.model, config))
        if with_ct2:
            runners.update(
                ct2_runners(trained, args.data_dir, export_dir, config, args.ct2_threads)
            )
        results = time_rows(runners, sentences, texts, args.batch_size, args.rounds)
    summarize(results, encoders["targets"], references)
    for line in format_table(results, len(sentences)):
        print(line)
    return results


def reference_lines(source_file: str, reference_file: str, count: int) -> list:
    """The references of the first `count` non-empty lines of `source_file`, stripped."""
    with open(source_file, encoding="utf-8") as f:
        sources = f.read().splitlines()
    with open(reference_file, encoding="utf-8") as f:
        references = f.read().splitlines()
    if len(references) != len(sources):
        raise SystemExit(
            f"benchmark_decode: {reference_file} has {len(references):,} lines and "
            f"{source_file} {len(sources):,}; give the references of the source file, line for line"
        )
    return [ref.strip() for src, ref in zip(sources, references) if src.strip()][:count]


if __name__ == "__main__":
    main()

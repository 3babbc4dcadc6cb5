"""The decoder command end to end on trained tiny models, and BLEU during training.

Two runs: `algorithmic_reverse` trained until it reverses short inputs (so an output shows
which input it came from), and `multi30k_ende` trained a few steps on real data with a real
SentencePiece vocabulary (a BLEU problem: references, sacreBLEU, TensorBoard samples).
"""

import dataclasses
import glob
import gzip
import json
import os
import re
import shutil
import sys

import numpy as np
import pytest
import sacrebleu
import sacremoses
import tensorflow as tf
import warm_python
from test_averaging import run_module, trained_tiny_run
from test_decoding_model import trained_reverse_run

from t2t_lite import hparams, problems
from t2t_lite.inference import DecodeError, Decoder, decode, decode_file, read_lines
from t2t_lite.inference.outputs import output_lines
from t2t_lite.models import build_transformer
from t2t_lite.runs import RestoreError, in_decode_dtype, load_trained_model
from t2t_lite.runs.checkpoints import checkpoint_mismatches
from t2t_lite.search import SearchConfig, length_batches
from t2t_lite.training import averaging, bleu_eval, trainer

MULTI30K_HPARAMS = "hidden_size=32,filter_size=64,num_heads=2,batch_size=512,max_length=32"
BLEU_SENTENCES = 6


def run_decoder(*args, stdin=None, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return warm_python.run(
        [sys.executable, "-m", "t2t_lite.decoder", *map(str, args)],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
    )


def reverse(line: str) -> str:
    return " ".join(line.split()[::-1])


def raw_lines(path, count=None) -> list:
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line, _ in zip(handle, range(count or 10**9))]


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory):
    return trained_reverse_run(tmp_path_factory)


@pytest.fixture(scope="module")
def reverse_decoder(reverse_run):
    trained = load_trained_model("algorithmic_reverse", "", str(reverse_run))
    return Decoder(
        trained,
        "",
        SearchConfig.for_problem(trained.problem, trained.hp),
        printer=lambda line: None,
    )


@pytest.fixture(scope="module")
def reverse_input(tmp_path_factory):
    """24 lines of 1..6 symbols in random order, with an empty and a whitespace-only line."""
    rng = np.random.default_rng(5)
    lines = [" ".join(map(str, rng.integers(0, 10, size=rng.integers(1, 7)))) for _ in range(24)]
    lines[5], lines[11] = "", "   "
    path = tmp_path_factory.mktemp("reverse") / "input.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


def _train_multi30k(data_dir, output_dir, steps: int, every: int, method: str) -> tuple:
    """Trains transformer_tiny on multi30k_ende to `steps`, evaluating BLEU by `method`."""
    config = trainer.RunConfig(
        problem="multi30k_ende",
        output_dir=str(output_dir),
        data_dir=str(data_dir),
        train_steps=steps,
        eval_steps=1,
        eval_every=every,
        save_every=steps,
        log_every=every,
        eval_bleu_sentences=BLEU_SENTENCES,
        eval_decode_method=method,
    )
    hp = hparams.override(hparams.get("transformer_tiny"), MULTI30K_HPARAMS)
    lines = []
    metrics = trainer.train_and_evaluate(config, hp, printer=lines.append)
    return data_dir, output_dir, lines, metrics


@pytest.fixture(scope="module")
def multi30k_run(tmp_path_factory, shared_data):
    """multi30k_ende: datagen with a 1,000-piece vocabulary, then 4 steps with BLEU evals."""
    root = tmp_path_factory.mktemp("multi30k")
    data_dir, output_dir = root / "data", root / "run"
    problems.get("multi30k_ende").generate_data(
        str(data_dir), str(shared_data / "multi30k"), vocab_size=1000
    )
    return _train_multi30k(data_dir, output_dir, steps=4, every=2, method="greedy")


@pytest.fixture(scope="module")
def multi30k_beam_run(multi30k_run, tmp_path_factory):
    """A copy of multi30k_run trained one step further, evaluating BLEU with beam search."""
    data_dir, trained_dir, _, _ = multi30k_run
    output_dir = tmp_path_factory.mktemp("multi30k_beam") / "run"
    shutil.copytree(trained_dir, output_dir)
    return _train_multi30k(data_dir, output_dir, steps=5, every=5, method="beam")


@pytest.mark.slow
def test_file_decode_keeps_input_order_empty_lines_and_returns_beams(
    reverse_run, reverse_input, reverse_decoder
):
    path, lines = reverse_input
    output = path.parent / "out.txt"
    result = run_decoder(
        "--problem=algorithmic_reverse",
        f"--output_dir={reverse_run}",
        f"--decode_from_file={path}",
        f"--decode_to_file={output}",
        "--batch_size=5",
        "--return_beams",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    text = output.read_text(encoding="utf-8")
    assert text.endswith("\n") and text.count("\n") == len(lines)
    rows = [row.split("\t") for row in text.split("\n")[:-1]]
    # Beam 4 (the default): four tab-separated hypotheses per line, empty lines too.
    assert all(len(row) == 4 for row in rows)
    assert rows[5] == rows[11] == [""] * 4
    # Batched by length and put back: each best hypothesis equals its own one-line decode,
    # and with --return_beams the search runs until all K beams are final (stop_early off),
    # so every beam equals the library's decode with that setting ...
    best = [row[0] for row in rows]
    assert best == [reverse_decoder.translate([line]).best[0] for line in lines]
    # The same checkpoint the command restored (the newest in the run folder).
    exact = dataclasses.replace(reverse_decoder.config, stop_early=False)
    trained = load_trained_model("algorithmic_reverse", "", str(reverse_run))
    same_batches = Decoder(trained, "", exact, 5, printer=lambda line: None)
    batched = same_batches.translate(lines)
    assert rows == batched.beams
    # ... and the model reverses, so the best hypotheses follow the input order.
    reversed_ok = [b == reverse(line) for b, line in zip(best, lines) if line.strip()]
    assert sum(reversed_ok) >= 0.75 * len(reversed_ok), list(zip(lines, best))
    for scores in batched.scores:
        assert scores == sorted(scores, reverse=True)
    progress = [line for line in result.stdout.splitlines() if line.startswith("decoded 22/22")]
    assert progress and "sentences/s" in progress[0] and "tokens/s" in progress[0]
    assert "ETA" in progress[0]


@pytest.mark.slow
def test_interactive_mode_answers_each_stdin_line(reverse_run, reverse_decoder):
    typed = ["3 1 4", "", "2 7 1 8", "9 x", "5"]
    result = run_decoder(
        "--problem=algorithmic_reverse",
        f"--output_dir={reverse_run}",
        "--decode_interactive",
        stdin="\n".join(typed) + "\n",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answers = result.stdout.split("\n")
    assert answers[-1] == "" and len(answers) - 1 == len(typed)
    for index in (0, 2, 4):
        assert answers[index] == reverse_decoder.translate([typed[index]]).best[0]
    assert answers[1] == answers[3] == ""
    assert "error: stdin line 4: token 1 'x' is not a symbol" in result.stderr


@pytest.mark.slow
def test_too_long_lines_are_cut_with_a_warning(reverse_decoder):
    trained = reverse_decoder.trained
    short = dataclasses.replace(trained, hp=dataclasses.replace(trained.hp, max_position=16))
    messages = []
    config = SearchConfig.for_problem(short.problem, short.hp)
    decoder = Decoder(short, "", config, printer=messages.append)
    assert decoder.max_input_tokens == 16 - 10 - 1
    long_line = " ".join(str(i % 10) for i in range(9))
    result = decoder.translate(["1 2", long_line, "3"])
    assert len(result.beams) == 3 and result.best[0] and result.best[2]
    assert messages == [
        "warning: input line 2: 9 tokens, more than the model's maximum 5 (max_position 16 - "
        "extra_length 10 - 1 for EOS); decoding its first 5 tokens only"
    ]
    assert result.best[1] == decoder.translate(["0 1 2 3 4"]).best[0]


@pytest.mark.slow
def test_another_hparams_set_is_one_clear_line(reverse_run, reverse_input):
    path, _ = reverse_input
    result = run_decoder(
        "--problem=algorithmic_reverse",
        f"--output_dir={reverse_run}",
        "--hparams_set=transformer_tiny",
        f"--decode_from_file={path}",
    )
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith("t2t_lite.decoder: ")
    assert (
        "trained with other model hparams: num_encoder_layers=1 (asked 2), "
        "num_decoder_layers=1 (asked 2), normalize_first=True (asked False); "
        "drop --hparams_set to use the run's own hparams.json"
    ) in message


@pytest.mark.slow
@pytest.mark.parametrize("command", ["decoder", "exporter"])
def test_a_checkpoint_of_another_model_is_one_line_without_tensorflow_warnings(
    command, reverse_run, reverse_input, tmp_path_factory, tmp_path
):
    # reverse_run has one layer a side of width 128; the tiny run's checkpoints two of 32.
    other = trained_tiny_run(tmp_path_factory)
    checkpoint = other / "ckpt-2"
    if command == "decoder":
        args = [f"--decode_from_file={reverse_input[0]}", f"--decode_to_file={tmp_path / 'out'}"]
    else:
        args = [f"--export_dir={tmp_path / 'export'}", "--model_name=reverse"]
    result = run_module(
        f"t2t_lite.{command}",
        "--problem=algorithmic_reverse",
        f"--output_dir={reverse_run}",
        f"--checkpoint_path={checkpoint}",
        *args,
    )
    assert result.returncode == 1
    assert "could not be found" not in result.stderr and "Traceback" not in result.stderr
    assert not re.search(r"^W\d{4} ", result.stderr, re.MULTILINE), result.stderr  # absl warnings
    message = result.stderr.strip().splitlines()[-1]
    assert message.startswith(
        f"t2t_lite.{command}: checkpoint {checkpoint} does not fit a algorithmic_reverse model "
        "with these hparams (vocab 12): "
    )
    # The first mismatching variables (the second layer's, which the model lacks) ...
    assert re.search(r"\d+ variables differ \(the model has \d+\), e\.g\. model/", message)
    assert (
        "model/decoder_layer_1/cross_attention/key_dense/_kernel: not in the model "
        "(found [32, 2, 16])"
    ) in message
    assert message.count(": not in the model (found [") == 3 and "more)" in message
    # ... and the run folder whose hparams.json describes the checkpoint.
    assert f"pass --output_dir={other} (and no --hparams_set)" in message
    assert not (tmp_path / "out").exists() and not (tmp_path / "export").exists()


def test_checkpoint_mismatches_give_the_expected_and_the_found_shape(tmp_path):
    """Same layout, other widths: each variable is named with both shapes."""
    models = {}
    for width, heads in ((32, 2), (48, 4)):
        hp = hparams.override(
            hparams.get("transformer_tiny"),
            f"hidden_size={width},filter_size=64,num_heads={heads},num_encoder_layers=1,"
            "num_decoder_layers=1",
        )
        models[width] = build_transformer(hp, 12)
    prefix = tf.train.Checkpoint(model=models[32]).write(str(tmp_path / "ckpt"))
    mismatches, count = checkpoint_mismatches(models[48], prefix)
    assert count == len(models[48].weights)
    for name, expected, found in (
        ("decoder_layer_0/cross_attention/key_dense/_kernel", [48, 4, 12], [32, 2, 16]),
        ("encoder_layer_0/self_attention/output_dense/_kernel", [4, 12, 48], [2, 16, 32]),
        ("encoder_layer_0/feed_forward_layer_norm/gamma", [48], [32]),
    ):
        assert f"model/{name}: expected {expected}, found {found}" in mismatches
    assert all(": expected [" in line for line in mismatches)
    assert checkpoint_mismatches(models[32], prefix) == ([], len(models[32].weights))


@pytest.mark.slow
def test_missing_checkpoint_and_hparams_name_the_folder(reverse_run, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(RestoreError, match=r"empty has no hparams.json; pass --hparams_set"):
        load_trained_model("algorithmic_reverse", "", str(empty))
    shutil.copy(reverse_run / "hparams.json", empty / "hparams.json")
    with pytest.raises(RestoreError, match=r"no checkpoint in .*empty; train first"):
        load_trained_model("algorithmic_reverse", "", str(empty))
    with pytest.raises(RestoreError, match=r"ckpt-9 does not exist \(no .index file\)"):
        load_trained_model("algorithmic_reverse", "", str(reverse_run), str(empty / "ckpt-9"))
    # A checkpoint whose data file was cut short (an interrupted copy).
    newest = tf.train.latest_checkpoint(str(reverse_run))
    shutil.copy(newest + ".index", empty / "ckpt-7.index")
    data = open(newest + ".data-00000-of-00001", "rb").read()
    (empty / "ckpt-7.data-00000-of-00001").write_bytes(data[: len(data) // 2])
    with pytest.raises(RestoreError, match=r"ckpt-7 cannot be read .*files may be incomplete"):
        load_trained_model("algorithmic_reverse", "", str(reverse_run), str(empty / "ckpt-7"))


@pytest.mark.slow
def test_missing_vocabulary_is_one_clear_line(multi30k_run, tmp_path):
    data_dir, output_dir, _, _ = multi30k_run
    copy = tmp_path / "data"
    shutil.copytree(data_dir, copy)
    os.remove(copy / "multi30k_ende" / "vocab.model")
    with pytest.raises(ValueError) as error:
        load_trained_model("multi30k_ende", str(copy), str(output_dir))
    message = str(error.value)
    assert "\n" not in message and "vocab.model: vocabulary not found" in message
    assert "python -m t2t_lite.datagen" in message


@pytest.mark.slow
def test_reference_file_prints_and_saves_both_labelled_bleu_scores(
    multi30k_run, shared_data, tmp_path
):
    data_dir, output_dir, _, _ = multi30k_run
    raw = shared_data / "multi30k"
    sources = raw_lines(raw / "val.en.gz", 10) + ["Это предложение на русском языке.", ""]
    # A hyphenated compound in the references makes the compound rule count (ref_len).
    references = raw_lines(raw / "val.de.gz", 10) + ["Dies ist ein russisch-deutscher Satz.", ""]
    (tmp_path / "in.en").write_text("\n".join(sources) + "\n", encoding="utf-8")
    (tmp_path / "ref.de").write_text("\n".join(references) + "\n", encoding="utf-8")
    output = tmp_path / "out.de"
    result = run_decoder(
        "--problem=multi30k_ende",
        f"--data_dir={data_dir}",
        f"--output_dir={output_dir}",
        f"--decode_from_file={tmp_path / 'in.en'}",
        f"--decode_to_file={output}",
        f"--reference_file={tmp_path / 'ref.de'}",
        "--beam_size=2",
        "--extra_length=8",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    hypotheses = output.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(hypotheses) == 12 and hypotheses[11] == ""
    assert "warning: " in result.stdout and "line 11: " in result.stdout
    assert "byte fallbacks" in result.stdout

    report = json.loads((tmp_path / "out.de.bleu.json").read_text(encoding="utf-8"))
    expected = sacrebleu.corpus_bleu(hypotheses, [references])
    assert report["sacrebleu"]["label"] == "sacreBLEU"
    assert report["sacrebleu"]["score"] == pytest.approx(expected.score, abs=1e-9)
    assert report["sacrebleu"]["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a")
    assert report["tokenized_bleu"]["label"].startswith("tokenized BLEU (moses tok, compound")
    # The paper's number recomputed here: Moses tokenization with escaping (tokenizer.perl's
    # default), tensor2tensor's compound rule (perl: s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g) and
    # multi-bleu.perl's formula (sacreBLEU on pre-tokenized text, no smoothing).
    moses = sacremoses.MosesTokenizer(lang="de")

    def paper_tokens(line):
        tokens = moses.tokenize(line, return_str=True, escape=True)
        return re.sub(r"(\S)-(\S)", r"\1 ##AT##-##AT## \2", tokens, flags=re.ASCII)

    # What the perl one-liner prints for the tokenized line "Ein Mann mit E-Mail-Adresse .".
    assert paper_tokens("Ein Mann mit E-Mail-Adresse.") == (
        "Ein Mann mit E ##AT##-##AT## Mail ##AT##-##AT## Adresse ."
    )
    tokenized = sacrebleu.metrics.BLEU(tokenize="none", smooth_method="none", force=True)
    expected_tokenized = tokenized.corpus_score(
        [paper_tokens(line) for line in hypotheses], [[paper_tokens(line) for line in references]]
    )
    got = report["tokenized_bleu"]
    assert got["score"] == pytest.approx(expected_tokenized.score, abs=1e-9)
    assert got["matches"] == expected_tokenized.counts
    assert got["totals"] == expected_tokenized.totals
    assert (got["hyp_len"], got["ref_len"]) == (
        expected_tokenized.sys_len,
        expected_tokenized.ref_len,
    )
    assert report["search"]["beam_size"] == 2 and report["num_sentences"] == 12
    printed = [line for line in result.stdout.splitlines() if "BLEU" in line]
    assert printed[0].startswith(f"sacreBLEU: {report['sacrebleu']['score']:.2f}  [nrefs:1|")
    assert printed[1].startswith(
        f"tokenized BLEU (moses tok, compound split, multi-bleu): {got['score']:.2f}"
    )


def summaries(folder) -> dict:
    """{tag: [(step, value)]}: scalars as floats, text summaries as lists of str, images
    as [width, height, PNG bytes...] (bytes)."""
    found = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                if value.metadata.plugin_data.plugin_name == "images":
                    item = list(array.ravel())
                elif array.dtype == object:
                    item = [text.decode("utf-8") for text in array.ravel()]
                else:
                    item = float(array)
                found.setdefault(value.tag, []).append((event.step, item))
    return found


@pytest.mark.slow
def test_trainer_logs_sacrebleu_and_samples_on_a_bleu_problem(multi30k_run, shared_data):
    data_dir, output_dir, lines, metrics = multi30k_run
    logged = summaries(output_dir / "eval")
    assert [step for step, _ in logged["eval/bleu"]] == [2, 4]
    assert [step for step, _ in logged["eval/samples"]] == [2, 4]
    # The attention picture of the first dev example, at every evaluation, is a real PNG.
    pictures = logged["eval/attention/encoder_decoder_last_layer"]
    assert [step for step, _ in pictures] == [2, 4]
    width, height, png = pictures[-1][1]
    assert png.startswith(b"\x89PNG") and int(width) > 100 and int(height) > 100
    # The table lists every BLEU so far, so the first evaluations read without a chart.
    table = logged["eval/bleu_table"][-1][1][0]
    bleus = [float(row.split("|")[2]) for row in table.splitlines() if row.startswith("| 2 ")]
    assert [step for step, _ in logged["eval/bleu_table"]] == [2, 4] and "| 4 |" in table
    assert bleus == [pytest.approx(logged["eval/bleu"][0][1], abs=0.006)]
    raw = shared_data / "multi30k"
    sources = raw_lines(raw / "val.en.gz", BLEU_SENTENCES)
    references = raw_lines(raw / "val.de.gz", BLEU_SENTENCES)
    samples = logged["eval/samples"][-1][1]
    assert len(samples) == 3
    assert sources[0] in samples[0] and references[0] in samples[0]
    # The BLEU of step 4 is sacreBLEU of what the step-4 checkpoint decodes (greedy) on the
    # first dev sentences against the raw reference file.
    trained = load_trained_model("multi30k_ende", str(data_dir), str(output_dir))
    assert trained.checkpoint_path.endswith("ckpt-4")
    greedy = SearchConfig.for_problem(trained.problem, trained.hp, method="greedy")
    decoder = Decoder(trained, str(data_dir), greedy, printer=lambda line: None)
    hypotheses = decoder.translate(sources).best
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert logged["eval/bleu"][-1][1] == pytest.approx(expected, abs=1e-4)
    # The samples show the same hypotheses (markdown escapes removed).
    for sample, hypothesis in zip(samples, hypotheses):
        shown = re.sub(r"\\(.)", r"\1", sample.rsplit("**hypothesis:** ", 1)[1])
        assert shown == (hypothesis or "(empty)")
    assert metrics["bleu"] == pytest.approx(expected, abs=1e-4)
    assert any(
        line.startswith("eval step 4: BLEU ") and "6 dev sentences, greedy" in line
        for line in lines
    )


@pytest.mark.slow
def test_trainer_bleu_with_beam_search_is_sacrebleu_of_the_beam_decodes(
    multi30k_beam_run, shared_data
):
    data_dir, output_dir, lines, metrics = multi30k_beam_run
    logged = summaries(output_dir / "eval")
    bleu, samples = dict(logged["eval/bleu"]), dict(logged["eval/samples"])
    assert sorted(bleu) == sorted(samples) == [2, 4, 5]  # steps 2 and 4 are the copied run's
    raw = shared_data / "multi30k"
    sources = raw_lines(raw / "val.en.gz", BLEU_SENTENCES)
    references = raw_lines(raw / "val.de.gz", BLEU_SENTENCES)
    trained = load_trained_model("multi30k_ende", str(data_dir), str(output_dir))
    assert trained.checkpoint_path.endswith("ckpt-5")
    # The evaluator's references and sources (dev ids decoded by the vocabulary) are the raw
    # dev lines exactly, so the logged BLEU is scored against the reference file's text.
    evaluator = bleu_eval.BleuEvaluator(
        trained.model, trained.problem, str(data_dir), BLEU_SENTENCES, "beam"
    )
    assert evaluator.references == references and evaluator.sources == sources
    # The problem's beam (4, alpha 0.6), decoded here from the raw source text.
    beam = SearchConfig.for_problem(trained.problem, trained.hp, method="beam")
    assert (evaluator.config.beam_size, evaluator.config.alpha) == (4, 0.6) == (
        beam.beam_size, beam.alpha
    )  # fmt: skip
    decoder = Decoder(trained, str(data_dir), beam, printer=lambda line: None)
    hypotheses = decoder.translate(sources).best
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert bleu[5] == pytest.approx(expected, abs=1e-4)
    assert metrics["bleu"] == pytest.approx(expected, abs=1e-4)
    shown = [re.sub(r"\\(.)", r"\1", s.rsplit("**hypothesis:** ", 1)[1]) for s in samples[5]]
    assert shown == [h or "(empty)" for h in hypotheses[:3]]
    assert any(
        line.startswith("eval step 5: BLEU ") and "6 dev sentences, beam 4, alpha 0.6" in line
        for line in lines
    )


def test_read_lines_splits_on_newlines_only_and_names_bad_bytes(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes("one\r\ntwo\u2028still two\n\nfour".encode() + b"\n")
    assert read_lines(str(path)) == ["one", "two\u2028still two", "", "four"]
    path.write_bytes(b"fine\nfine\nbad \xff byte\n")
    with pytest.raises(DecodeError, match=r"in.txt line 3: not valid UTF-8 \(byte 14\)"):
        read_lines(str(path))
    with pytest.raises(DecodeError, match=r"missing.txt: file not found"):
        read_lines(str(tmp_path / "missing.txt"))


def test_length_batches_sort_longest_first_and_cover_every_index_once():
    lengths = [3, 9, 1, 9, 4, 4, 7]
    batches = length_batches(lengths, 3)
    assert batches == [[1, 3, 6], [4, 5, 0], [2]]
    assert sorted(i for batch in batches for i in batch) == list(range(len(lengths)))


@pytest.mark.slow
def test_a_reference_of_another_length_is_refused_before_decoding(reverse_decoder, tmp_path):
    (tmp_path / "in.txt").write_text("1 2\n3\n", encoding="utf-8")
    (tmp_path / "ref.txt").write_text("2 1\n", encoding="utf-8")
    with pytest.raises(DecodeError, match=r"ref.txt has 1 lines but .*in.txt has 2"):
        decode_file(
            reverse_decoder,
            str(tmp_path / "in.txt"),
            str(tmp_path / "out.txt"),
            str(tmp_path / "ref.txt"),
        )
    assert not (tmp_path / "out.txt").exists()


def test_output_lines_never_break_line_alignment(tmp_path):
    # Byte-fallback pieces can decode to carriage returns, form feeds or U+2028.
    result = decode.DecodeResult(
        beams=[["a\rb\u2028c", "d\te"], ["", ""], ["x\ny", "z"]],
        scores=[],
        warnings=[],
        target_tokens=0,
        seconds=1.0,
    )
    problem, inputs = problems.get("algorithmic_reverse"), ["1", "", "2"]
    lines = output_lines(problem, result, inputs)
    assert lines == ["a b c", "", "x y"]
    assert output_lines(problem, result, inputs, True) == ["a b c\td e", "\t", "x y\tz"]
    path = tmp_path / "out.txt"
    decode.write_lines(str(path), lines)
    assert path.read_text(encoding="utf-8").splitlines() == ["a b c", "", "x y"]


def test_decoding_with_another_checkpoint_writes_files_of_its_own(reverse_run, tmp_path):
    run = tmp_path / "run"
    # Without decode/: other test files write their decodes into the shared run's folder.
    shutil.copytree(reverse_run, run, ignore=shutil.ignore_patterns("decode"))
    averaged = averaging.average_last_checkpoints(str(run), num_last=1)  # RUN/averaged/ckpt-N
    newest = os.path.basename(tf.train.latest_checkpoint(str(run)))
    lines = ["3 1 4", "1 5 9 2 6"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "ref.txt").write_text("\n".join(map(reverse, lines)) + "\n")
    outputs = {}
    for checkpoint, label in ((None, newest), (averaged, f"averaged-{newest}")):
        result = run_decoder(
            "--problem=algorithmic_reverse", f"--output_dir={run}",
            f"--decode_from_file={tmp_path / 'in.txt'}",
            f"--reference_file={tmp_path / 'ref.txt'}",
            *([f"--checkpoint_path={checkpoint}"] if checkpoint else []),
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        outputs[label] = run / "decode" / f"in.txt.{label}.beam4.decodes"
    written = sorted(os.listdir(run / "decode"))
    # Each checkpoint's decode and score file, side by side.
    for path in outputs.values():
        assert path.name in written, written
        assert len(path.read_text().splitlines()) == 2
        assert [name for name in written if name.startswith(path.name + ".")], written
    assert len(written) == 4, written


def test_bfloat16_decoding_searches_with_the_bfloat16_copy(reverse_run, reverse_input):
    path, lines = reverse_input
    output = path.parent / "out_bfloat16.txt"
    result = run_decoder(
        "--problem=algorithmic_reverse", f"--output_dir={reverse_run}",
        f"--decode_from_file={path}", f"--decode_to_file={output}", "--decode_dtype=bfloat16",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert " in bfloat16: " in result.stdout
    trained = in_decode_dtype(
        load_trained_model("algorithmic_reverse", "", str(reverse_run)), "bfloat16"
    )
    assert trained.model.compute_dtype == "bfloat16"
    config = SearchConfig.for_problem(trained.problem, trained.hp)
    expected = Decoder(trained, "", config, printer=lambda line: None).translate(lines).best
    assert output.read_text(encoding="utf-8").split("\n")[:-1] == expected
    # CTranslate2 computes in its export's type: the flag is refused there, in one line.
    refused = run_decoder(
        "--problem=algorithmic_reverse", f"--output_dir={reverse_run}",
        f"--decode_from_file={path}", "--engine=ctranslate2", "--ct2_model=unused",
        "--decode_dtype=bfloat16",
    )  # fmt: skip
    assert refused.returncode != 0
    assert "--decode_dtype is for --engine=tensorflow" in refused.stderr
    assert "Traceback" not in refused.stderr

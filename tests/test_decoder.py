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
import subprocess
import sys

import numpy as np
import pytest
import sacrebleu
import tensorflow as tf
from test_decoding_model import trained_reverse_run

from t2t_lite import hparams, problems
from t2t_lite.inference import RestoreError, decode, load_trained_model
from t2t_lite.inference.decode import (
    DecodeError,
    Decoder,
    decode_file,
    length_batches,
    read_lines,
    search_config,
)
from t2t_lite.training import trainer

MULTI30K_HPARAMS = "hidden_size=32,filter_size=64,num_heads=2,batch_size=512,max_length=32"
BLEU_SENTENCES = 6


def run_decoder(*args, stdin=None, timeout=300):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    return subprocess.run(
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
    return Decoder(trained, "", search_config(trained.problem), printer=lambda line: None)


@pytest.fixture(scope="module")
def reverse_input(tmp_path_factory):
    """24 lines of 1..6 symbols in random order, with an empty and a whitespace-only line."""
    rng = np.random.default_rng(5)
    lines = [" ".join(map(str, rng.integers(0, 10, size=rng.integers(1, 7)))) for _ in range(24)]
    lines[5], lines[11] = "", "   "
    path = tmp_path_factory.mktemp("reverse") / "input.txt"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path, lines


@pytest.fixture(scope="module")
def multi30k_run(tmp_path_factory, shared_data):
    """multi30k_ende: datagen with a 1,000-piece vocabulary, then 4 steps with BLEU evals."""
    root = tmp_path_factory.mktemp("multi30k")
    data_dir, output_dir = root / "data", root / "run"
    problems.get("multi30k_ende").generate_data(
        str(data_dir), str(shared_data / "multi30k"), vocab_size=1000
    )
    config = trainer.RunConfig(
        problem="multi30k_ende",
        output_dir=str(output_dir),
        data_dir=str(data_dir),
        train_steps=4,
        eval_steps=1,
        eval_every=2,
        save_every=4,
        log_every=2,
        eval_bleu_sentences=BLEU_SENTENCES,
        eval_decode_method="greedy",
    )
    hp = hparams.override(hparams.get("transformer_tiny"), MULTI30K_HPARAMS)
    lines = []
    metrics = trainer.train_and_evaluate(config, hp, printer=lines.append)
    return data_dir, output_dir, lines, metrics


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
    decoder = Decoder(short, "", search_config(trained.problem), printer=messages.append)
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
    assert "trained with other model hparams: hidden_size=64 (asked 128)" in message


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
    references = raw_lines(raw / "val.de.gz", 10) + ["Dies ist ein russischer Satz.", ""]
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
    assert report["search"]["beam_size"] == 2 and report["num_sentences"] == 12
    printed = [line for line in result.stdout.splitlines() if "BLEU" in line]
    assert printed[0].startswith(f"sacreBLEU: {report['sacrebleu']['score']:.2f}  [nrefs:1|")
    assert printed[1].startswith("tokenized BLEU (moses tok, compound split, multi-bleu): ")


def summaries(folder) -> dict:
    """{tag: [(step, value)]}: scalars as floats, text summaries as lists of str."""
    found = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                array = tf.make_ndarray(value.tensor)
                if array.dtype == object:
                    item = [text.decode("utf-8") for text in array.ravel()]
                else:
                    item = float(array)
                found.setdefault(value.tag, []).append((event.step, item))
    return found


@pytest.mark.slow
def test_trainer_logs_sacrebleu_and_samples_on_a_bleu_problem(multi30k_run, shared_data):
    data_dir, output_dir, lines, metrics = multi30k_run
    logged = summaries(output_dir / "eval")
    assert [step for step, _ in logged["bleu"]] == [2, 4]
    assert [step for step, _ in logged["samples"]] == [2, 4]
    raw = shared_data / "multi30k"
    sources = raw_lines(raw / "val.en.gz", BLEU_SENTENCES)
    references = raw_lines(raw / "val.de.gz", BLEU_SENTENCES)
    samples = logged["samples"][-1][1]
    assert len(samples) == 3
    assert sources[0] in samples[0] and references[0] in samples[0]
    # The BLEU of step 4 is sacreBLEU of what the step-4 checkpoint decodes (greedy) on the
    # first dev sentences against the raw reference file.
    trained = load_trained_model("multi30k_ende", str(data_dir), str(output_dir))
    assert trained.checkpoint_path.endswith("ckpt-4")
    greedy = search_config(trained.problem, method="greedy")
    decoder = Decoder(trained, str(data_dir), greedy, printer=lambda line: None)
    hypotheses = decoder.translate(sources).best
    expected = sacrebleu.corpus_bleu(hypotheses, [references]).score
    assert logged["bleu"][-1][1] == pytest.approx(expected, abs=1e-4)
    # The samples show the same hypotheses (markdown escapes removed).
    for sample, hypothesis in zip(samples, hypotheses):
        shown = re.sub(r"\\(.)", r"\1", sample.rsplit("**hypothesis:** ", 1)[1])
        assert shown == (hypothesis or "(empty)")
    assert metrics["bleu"] == pytest.approx(expected, abs=1e-4)
    assert any(
        line.startswith("eval step 4: BLEU ") and "6 dev sentences, greedy" in line
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
        scores=[], warnings=[], target_tokens=0, seconds=1.0,
    )
    assert result.lines() == ["a b c", "", "x y"]
    assert result.lines(return_beams=True) == ["a b c\td e", "\t", "x y\tz"]
    path = tmp_path / "out.txt"
    decode.write_lines(str(path), result.lines())
    assert path.read_text(encoding="utf-8").splitlines() == ["a b c", "", "x y"]

"""Forced decoding (`--score_file`) and the decoder's JSON lines output, on the reverse model.

Expected log-probabilities are computed here, one pair at a time and without padding, from
the model's teacher-forced logits: `model(features, training=False)`, `tf.nn.log_softmax`,
the entries of the target ids (symbol k is id k + 2, EOS 1), summed.
"""

import dataclasses
import gzip
import io
import json
import os
import re
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from test_decoding_model import trained_reverse_run

from t2t_lite.inference import DecodeError, Decoder, Scorer, decode, decode_file, score_file
from t2t_lite.inference.outputs import default_output_path, default_scores_path, json_line
from t2t_lite.inference.scoring import PairScore, ScoreResult, length_penalty
from t2t_lite.problems.vocab import SentencePieceEncoder, train_sentencepiece
from t2t_lite.runs import load_trained_model
from t2t_lite.search import SearchConfig, pad_batch, strip_ids

EOS = 1
FIELDS = {
    "line", "source", "target", "tokens", "token_log_probs", "log_prob", "score", "num_tokens"
}  # fmt: skip
# Reversals (what the model learned), and targets it should find unlikely: a copy, a
# reversal missing a symbol, one with a symbol too many, and the empty target (EOS alone).
PAIRS = [
    ("3 1 4", "4 1 3"),
    ("1 5 9 2 6 5", "5 6 2 9 5 1"),
    ("2 7 1 8 2 8 1 8", "8 1 8 2 8 1 7 2"),
    ("3 1 4", "3 1 4"),
    ("9 8 7 6", "6 7 8"),
    ("0 5", "5 0 0"),
    ("7", ""),
]


def symbol_ids(line: str) -> list:
    return [int(symbol) + 2 for symbol in line.split()]


def penalty(n: int, alpha: float) -> float:
    return ((5.0 + n) / 6.0) ** alpha


def teacher_forced(model, source: str, target: str) -> np.ndarray:
    """log P of each target token and the final EOS, from one unpadded pair: [n]."""
    inputs = np.array([symbol_ids(source) + [EOS]], np.int32)  # [1, S]
    targets = np.array([symbol_ids(target) + [EOS]], np.int32)  # [1, n]
    logits = model({"inputs": inputs, "targets": targets}, training=False)  # [1, n, V]
    log_probs = tf.nn.log_softmax(logits, axis=-1).numpy()[0]  # [n, V]
    return log_probs[np.arange(targets.shape[1]), targets[0]]


def run_decoder(*args, timeout=300):
    return warm_python.run(
        [sys.executable, "-m", "t2t_lite.decoder", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )


@pytest.fixture(scope="module")
def reverse_run(tmp_path_factory):
    return trained_reverse_run(tmp_path_factory)


@pytest.fixture(scope="module")
def trained(reverse_run):
    return load_trained_model("algorithmic_reverse", "", str(reverse_run))


def make_decoder(trained, batch_size=32, printer=lambda line: None, **search) -> Decoder:
    config = SearchConfig.for_problem(trained.problem, trained.hp, **search)
    return Decoder(trained, "", config, batch_size, printer=printer)


@pytest.fixture(scope="module")
def scorer(trained):
    return Scorer(make_decoder(trained))


@pytest.fixture(scope="module")
def exact_decoder(trained):
    """Beam search until all beams are final (as --return_beams), batches of 2 lines."""
    return make_decoder(trained, batch_size=2, stop_early=False)


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_jsonl(path) -> list:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.mark.slow
# The empty target's self-attention is over one position: Keras warns, rightly here.
@pytest.mark.filterwarnings("ignore:You are using a softmax over axis -1")
def test_scores_are_the_teacher_forced_log_probabilities_of_target_and_eos(trained, scorer):
    assert scorer.alpha == 0.6  # the problem's, as beam search uses it
    sources, targets = zip(*PAIRS)
    result = scorer.score(sources, targets)
    for (source, target), pair in zip(PAIRS, result.pairs):
        expected = teacher_forced(trained.model, source, target)
        assert pair.ids == symbol_ids(target) + [EOS]
        assert pair.num_tokens == len(expected) == len(target.split()) + 1
        np.testing.assert_allclose(pair.token_log_probs, expected, rtol=1e-5, atol=1e-5)
        assert pair.log_prob == pytest.approx(expected.sum(), rel=1e-5, abs=1e-5)
        assert pair.score == pytest.approx(
            expected.sum() / penalty(len(expected), 0.6), rel=1e-5, abs=1e-5
        )
    # By hand for the first pair, "4 1 3" + EOS: n = 4, ((5 + 4) / 6) ** 0.6 = 1.5 ** 0.6.
    first = teacher_forced(trained.model, *PAIRS[0]).sum()
    assert result.pairs[0].score == pytest.approx(first / 1.5**0.6, rel=1e-5, abs=1e-5)
    # The model reverses: reversals are likely, the other targets far less so.
    log_probs = [pair.log_prob for pair in result.pairs]
    assert min(log_probs[:3]) > -1.5 and max(log_probs[3:]) < -3.0, log_probs


@pytest.mark.slow
def test_a_pair_scores_the_same_alone_and_in_padded_batches(trained, scorer):
    short = ("5 2", "2 5")
    # Its neighbours are longer on both sides, so in a batch it is padded in both.
    assert min(len(PAIRS[2][0].split()), len(PAIRS[2][1].split())) > 2
    sources, targets = zip(*[*PAIRS[:3], short, *PAIRS[3:]])
    alone = [scorer.score([s], [t]).pairs[0] for s, t in zip(sources, targets)]
    by_batch_size = {
        size: Scorer(make_decoder(trained, batch_size=size)).score(sources, targets).pairs
        for size in (1, 2, 32)
    }
    for size, pairs in by_batch_size.items():
        for one, pair in zip(alone, pairs, strict=True):
            assert pair.ids == one.ids, size
            np.testing.assert_allclose(pair.token_log_probs, one.token_log_probs, atol=1e-5)
            assert pair.log_prob == pytest.approx(one.log_prob, abs=1e-5)
            assert pair.score == pytest.approx(one.score, abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("alpha", [0.6, 2.0])
def test_the_beams_scores_are_the_forced_decoding_scores_of_the_beams(trained, alpha):
    # Without early stopping every returned beam is exact, down to the unlikely last ones.
    decoder = make_decoder(trained, alpha=alpha, beam_size=4, stop_early=False)
    sources = ["3 1 4", "1 5 9 2 6 5", "8", "2 7 1 8 2 8 1 8 2"]
    encoded = [symbol_ids(line) for line in sources]
    ids, scores = (t.numpy() for t in decoder.translator.search(pad_batch(encoded)))
    rows, hypotheses, beam_scores = [], [], []
    for row, source in enumerate(sources):
        for k in range(ids.shape[1]):
            tokens = strip_ids(ids[row, k])
            if ids[row, k, len(tokens) + 1] != EOS:  # not finished: no EOS to score
                continue
            rows.append(source)
            hypotheses.append(decoder.target_encoder.decode(tokens))
            beam_scores.append(scores[row, k])
    assert len(hypotheses) >= 3 * len(sources)
    forced = Scorer(decoder).score(rows, hypotheses).pairs
    np.testing.assert_allclose([pair.score for pair in forced], beam_scores, rtol=1e-4, atol=1e-5)
    # The best beams are the reversals and score near 0, where the length penalty hardly
    # matters; the check has teeth because some beam scores far enough from 0 that a length
    # count off by one (EOS left out, or counted twice) would move it beyond the tolerance.
    assert [h for h in hypotheses if h in [" ".join(s.split()[::-1]) for s in sources]]
    for score, hypothesis in zip(beam_scores, hypotheses):
        n = len(hypothesis.split()) + 1
        moved = [score * penalty(n, alpha) / penalty(m, alpha) for m in (n - 1, n + 1)]
        if all(abs(other - score) > 10 * (1e-4 * abs(score) + 1e-5) for other in moved):
            break
    else:
        pytest.fail(f"every beam scores too near 0 to tell its length count: {beam_scores}")


@pytest.mark.slow
def test_score_file_writes_a_json_line_per_pair_in_input_order(trained, scorer, tmp_path):
    sources = [s for s, _ in PAIRS[:3]] + ["", "   "] + [s for s, _ in PAIRS[3:]]
    targets = [t for _, t in PAIRS[:3]] + ["4 1", ""] + [t for _, t in PAIRS[3:]]
    messages = []
    summary = score_file(
        make_decoder(trained, batch_size=3, printer=messages.append),
        str(write(tmp_path / "src.txt", sources)),
        str(write(tmp_path / "tgt.txt", targets)),
        str(tmp_path / "out" / "scores.jsonl"),
    )
    records = read_jsonl(tmp_path / "out" / "scores.jsonl")
    assert [record["line"] for record in records] == list(range(1, len(sources) + 1))
    assert all(set(record) == FIELDS for record in records)
    assert [(r["source"], r["target"]) for r in records] == list(zip(sources, targets))
    # A blank source is not scored (the decoder does not decode blank lines) ...
    for record in records[3:5]:
        assert record["log_prob"] is record["score"] is None
        assert record["tokens"] == record["token_log_probs"] == [] and record["num_tokens"] == 0
    # ... and the others carry what the library computes.
    scored = [r for r in records if r["log_prob"] is not None]
    expected = scorer.score(*zip(*PAIRS)).pairs
    for record, pair in zip(scored, expected):
        assert record["tokens"] == pair.ids and record["num_tokens"] == pair.num_tokens
        assert record["token_log_probs"] == pytest.approx(pair.token_log_probs, abs=1e-5)
        assert record["log_prob"] == pytest.approx(pair.log_prob, abs=1e-5)
        assert record["score"] == pytest.approx(pair.score, abs=1e-5)
    assert summary["pairs"] == len(sources) and summary["scored"] == len(PAIRS)
    tokens = sum(pair.num_tokens for pair in expected)
    assert summary["target_tokens"] == tokens
    mean = sum(pair.log_prob for pair in expected) / tokens
    assert summary["mean_token_log_prob"] == pytest.approx(mean, abs=1e-5)
    assert any(m.startswith(f"scored {len(PAIRS)}/{len(PAIRS)} pairs | ") for m in messages)
    assert any(
        m.startswith(f"scored {len(PAIRS)} pairs (2 with a blank source, not scored) | ")
        and f"mean log-prob per token {mean:.4f}" in m
        for m in messages
    ), messages


@pytest.mark.slow
def test_bad_files_and_lines_are_refused_naming_file_and_line(trained, scorer, tmp_path):
    src = write(tmp_path / "src.txt", ["3 1 4", "1 5", "9 2 6"])
    unused = tmp_path / "unused.jsonl"
    # Files of different lengths: both named, with their counts, and nothing written.
    short = write(tmp_path / "short.txt", ["4 1 3", "5 1"])
    with pytest.raises(DecodeError) as error:
        score_file(scorer.decoder, str(src), str(short), str(unused))
    assert str(error.value) == (
        f"{short} has 2 lines but {src} has 3; pass one target per source line, in order"
    )
    missing = re.escape(str(tmp_path / "missing.txt"))
    with pytest.raises(DecodeError, match=rf"^{missing}: file not found"):
        score_file(scorer.decoder, str(src), str(tmp_path / "missing.txt"), str(unused))
    latin1 = tmp_path / "latin1.txt"
    latin1.write_bytes(b"4 1 3\n5 1\n\xe9\n")
    with pytest.raises(DecodeError, match=rf"^{re.escape(str(latin1))} line 3: not valid UTF-8"):
        score_file(scorer.decoder, str(src), str(latin1), str(unused))
    # A line the vocabulary refuses, on either side, and a target longer than the model's
    # positions: the file and line are named, and nothing is written.
    bad = write(tmp_path / "bad.txt", ["4 1 3", "5 x", "6 2 9"])
    with pytest.raises(DecodeError, match=rf"^{re.escape(str(bad))} line 2: token 1 'x' is not"):
        score_file(scorer.decoder, str(src), str(bad), str(unused))
    with pytest.raises(DecodeError, match=rf"^{re.escape(str(bad))} line 2: token 1 'x' is not"):
        score_file(scorer.decoder, str(bad), str(src), str(unused))
    assert not unused.exists()
    long_target = " ".join(["1"] * trained.hp.max_position)
    with pytest.raises(
        DecodeError,
        match=rf"^tgt line 2: {trained.hp.max_position + 1:,} tokens with EOS, more than the "
        rf"model's max_position {trained.hp.max_position:,}; ",
    ):
        scorer.score(["1 2", "3"], ["2 1", long_target], target_name="tgt")


@pytest.mark.slow
def test_a_source_longer_than_the_decoder_reads_is_cut_with_a_warning(trained):
    # As the decoder reads it: positions for the input and extra_length outputs.
    short = dataclasses.replace(trained, hp=dataclasses.replace(trained.hp, max_position=16))
    messages = []
    decoder = make_decoder(short, printer=messages.append)
    assert decoder.max_input_tokens == 16 - 10 - 1
    result = Scorer(decoder).score(["1 5 9 2 6 5 3", "1 5 9"], ["5 6 2 9 5 1", "9 5 1"], "src")
    assert result.warnings == [
        "src line 1: 7 tokens, more than the model's maximum 5 (max_position 16 - "
        "extra_length 10 - 1 for EOS); decoding its first 5 tokens only"
    ]
    assert messages[0] == f"warning: {result.warnings[0]}"
    cut = teacher_forced(trained.model, "1 5 9 2 6", "5 6 2 9 5 1")
    np.testing.assert_allclose(result.pairs[0].token_log_probs, cut, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_the_decoder_command_scores_a_file_and_names_both_files_on_a_mismatch(
    reverse_run, scorer, tmp_path
):
    sources, targets = zip(*PAIRS)
    src = write(tmp_path / "src.txt", sources)
    tgt = write(tmp_path / "tgt.txt", targets)
    out = tmp_path / "scores.jsonl"
    common = ["--problem=algorithmic_reverse", f"--output_dir={reverse_run}"]
    result = run_decoder(
        *common, f"--decode_from_file={src}", f"--score_file={tgt}", f"--decode_to_file={out}",
        "--batch_size=3",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    records = read_jsonl(out)
    expected = scorer.score(sources, targets).pairs
    assert [record["line"] for record in records] == list(range(1, len(PAIRS) + 1))
    for record, pair in zip(records, expected):
        assert record["score"] == pytest.approx(pair.score, abs=1e-5)
        assert record["token_log_probs"] == pytest.approx(pair.token_log_probs, abs=1e-5)
    assert f"scored {len(PAIRS)} pairs | mean log-prob per token" in result.stdout
    assert "pairs/s" in result.stdout and f"wrote {len(PAIRS)} lines to {out}" in result.stdout

    write(tmp_path / "short.txt", targets[:4])
    result = run_decoder(
        *common, f"--decode_from_file={src}", f"--score_file={tmp_path / 'short.txt'}"
    )
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"t2t_lite.decoder: {tmp_path / 'short.txt'} has 4 lines but {src} has {len(PAIRS)}; "
        "pass one target per source line, in order"
    )


@pytest.mark.slow
def test_jsonl_output_carries_each_beam_with_its_search_score(exact_decoder, tmp_path):
    lines = ["3 1 4", "", "1 5 9 2 6 5", "8", "2 7 1 8 2"]
    src = write(tmp_path / "in.txt", lines)
    decoder = exact_decoder
    decode_file(decoder, str(src), str(tmp_path / "beams.jsonl"), None, True, "jsonl")
    decode_file(decoder, str(src), str(tmp_path / "beams.txt"), None, True, "text")
    decode_file(decoder, str(src), str(tmp_path / "best.jsonl"), None, False, "jsonl")
    beams, best = read_jsonl(tmp_path / "beams.jsonl"), read_jsonl(tmp_path / "best.jsonl")
    text = (tmp_path / "beams.txt").read_text(encoding="utf-8").splitlines()
    assert [record["line"] for record in beams] == [1, 2, 3, 4, 5]
    assert [record["source"] for record in beams] == lines
    assert beams[1]["hypotheses"] == best[1]["hypotheses"] == []
    for line, record, one, row in zip(lines, beams, best, text):
        if not line:
            continue
        ids, scores = (
            t.numpy()[0] for t in decoder.translator.search(pad_batch([symbol_ids(line)]))
        )
        # A slot that no hypothesis filled (all ids 0: fewer than K beams ended by the
        # length limit) is left out; filled slots come first, best first.
        filled = [k for k in range(len(ids)) if ids[k, 1:].any()]
        assert filled == list(range(len(filled))) and filled
        ids, scores = ids[filled], scores[filled]
        hypotheses = record["hypotheses"]
        assert len(hypotheses) == len(filled) <= decoder.config.beam_size
        assert [h["text"] for h in hypotheses] == row.split("\t")
        np.testing.assert_allclose([h["score"] for h in hypotheses], scores, rtol=1e-5, atol=1e-5)
        finished = 0
        for hypothesis, hypothesis_ids in zip(hypotheses, ids):
            tokens = strip_ids(hypothesis_ids)
            assert hypothesis["text"] == decoder.target_encoder.decode(tokens)
            if hypothesis_ids[len(tokens) + 1] == EOS:  # ended: its EOS is counted
                assert hypothesis["num_tokens"] == len(tokens) + 1
                finished += 1
            else:  # still alive at the length limit (column 0 is the start id)
                assert len(tokens) == len(hypothesis_ids) - 1 == hypothesis["num_tokens"]
        assert finished >= 1
        assert one["hypotheses"] == hypotheses[:1]

    # Typed lines answer in the same format; a line that cannot be decoded says why.
    stdout = io.StringIO()
    decode.interactive(
        decoder, io.StringIO("3 1 4\n9 x\n"), stdout, return_beams=True, output_format="jsonl"
    )
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert answers[0]["line"] == 1 and answers[0]["source"] == "3 1 4"
    typed = answers[0]["hypotheses"]
    assert [h["text"] for h in typed] == [h["text"] for h in beams[0]["hypotheses"]]
    np.testing.assert_allclose(
        [h["score"] for h in typed], [h["score"] for h in beams[0]["hypotheses"]], atol=1e-5
    )
    assert answers[1]["line"] == 2 and answers[1]["hypotheses"] == []
    assert "stdin line 2: token 1 'x' is not a symbol" in answers[1]["error"]


def test_json_lines_hold_no_line_break_of_any_reader():
    record = {"text": "a\nb\rc\u2028d\u2029e\x85f\x1cg", "score": -1.5, "word": "Übermut"}
    line = json_line(record)
    assert len(line.splitlines()) == 1 and "Übermut" in line
    assert json.loads(line) == record


@pytest.mark.slow
def test_jsonl_greedy_scores_are_the_forced_log_probabilities_of_the_outputs(trained, tmp_path):
    lines = ["3 1 4", "1 5 9 2 6 5", "8", "2 7 1 8 2 8"]
    decoder = make_decoder(trained, method="greedy")
    src = write(tmp_path / "in.txt", lines)
    decode_file(decoder, str(src), str(tmp_path / "greedy.jsonl"), output_format="jsonl")
    records = read_jsonl(tmp_path / "greedy.jsonl")
    assert [len(record["hypotheses"]) for record in records] == [1] * len(lines)
    outputs = [record["hypotheses"][0] for record in records]
    # Greedy's score is log P, unnormalised: the forced log P of what it wrote, EOS included.
    forced = Scorer(decoder).score(lines, [output["text"] for output in outputs]).pairs
    for output, pair in zip(outputs, forced):
        assert output["num_tokens"] == pair.num_tokens
        assert output["score"] == pytest.approx(pair.log_prob, abs=1e-4)


@pytest.mark.slow
def test_tokens_are_the_vocabularys_pieces_with_eos_last(trained, tmp_path, shared_data):
    with gzip.open(shared_data / "multi30k" / "train.de.gz", "rt", encoding="utf-8") as lines:
        sample = [line.rstrip("\n") for line, _ in zip(lines, range(2000))]
    model_path = train_sentencepiece(sample, str(tmp_path / "de.model"), 400, num_threads=1)
    encoder = SentencePieceEncoder(model_path)
    decoder = make_decoder(trained)
    decoder.target_encoder = encoder  # only the records' token names are read from it
    target = "Ein Hund rennt."
    ids = [*encoder.encode(target), EOS]
    pair = PairScore(ids, [-0.5] * len(ids), -0.5 * len(ids), -0.5 * len(ids))
    record = Scorer(decoder).records(ScoreResult([pair], [], 0.0), ["A dog runs."], [target])[0]
    pieces = encoder.pieces()
    assert record["tokens"] == [pieces[token] for token in ids]
    assert record["tokens"][-1] == "</s>"
    assert "".join(record["tokens"][:-1]).replace("\u2581", " ").strip() == target


@pytest.mark.slow
def test_the_decoder_command_writes_json_lines_with_the_beams_scores(reverse_run, exact_decoder):
    lines = ["3 1 4", "", "1 5 9 2 6 5"]
    # A name of its own: the run folder (and its decode/) is shared with other test files.
    src = write(reverse_run / "test_scoring_jsonl_input.txt", lines)
    result = run_decoder(
        "--problem=algorithmic_reverse", f"--output_dir={reverse_run}",
        f"--decode_from_file={src}", "--output_format=jsonl", "--return_beams",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    checkpoint = os.path.basename(tf.train.latest_checkpoint(str(reverse_run)))
    output = (
        reverse_run / "decode" / f"test_scoring_jsonl_input.txt.{checkpoint}.beam4.decodes.jsonl"
    )
    records = read_jsonl(output)
    assert [(r["line"], r["source"]) for r in records] == [(1, lines[0]), (2, ""), (3, lines[2])]
    assert records[1]["hypotheses"] == []
    # --return_beams searches without early stopping, as this decoder does.
    decoder = exact_decoder
    for record in (records[0], records[2]):
        ids, scores = (
            t.numpy()[0]
            for t in decoder.translator.search(pad_batch([symbol_ids(record["source"])]))
        )
        hypotheses = record["hypotheses"]
        assert hypotheses[0]["text"] == " ".join(record["source"].split()[::-1])
        assert [h["text"] for h in hypotheses] == [
            decoder.target_encoder.decode(strip_ids(row)) for row in ids
        ]
        np.testing.assert_allclose([h["score"] for h in hypotheses], scores, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--return_beams"], "--return_beams is for decoding; drop it with --score_file"),
        (
            ["--reference_file=ref.txt"],
            "--reference_file is for decoding; drop it with --score_file",
        ),
        (
            ["--engine=ctranslate2"],
            "t2t_lite.decoder: scoring (--score_file) needs --engine=tensorflow (the restored "
            "checkpoint), not --engine=ctranslate2",
        ),
    ],
)
def test_flags_that_do_not_go_with_scoring_are_refused_before_anything_loads(
    tmp_path, flags, message
):
    # The run folder is empty and the files do not exist: the flags alone are checked.
    result = run_decoder(
        "--problem=algorithmic_reverse", f"--output_dir={tmp_path}",
        "--decode_from_file=src.txt", "--score_file=tgt.txt", *flags, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == message


def test_scoring_reads_a_file_not_stdin(tmp_path):
    result = run_decoder(
        "--problem=algorithmic_reverse", f"--output_dir={tmp_path}", "--decode_interactive",
        "--score_file=tgt.txt", timeout=60,
    )  # fmt: skip
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "--score_file scores --decode_from_file; drop --decode_interactive"
    )


def test_the_length_penalty_is_gnmts_by_hand():
    assert length_penalty(1, 0.6) == 1.0  # (5 + 1) / 6
    assert length_penalty(4, 0.6) == pytest.approx(1.2754245, abs=1e-7)  # 1.5 ** 0.6
    assert length_penalty(7, 2.0) == pytest.approx(4.0)  # (12 / 6) ** 2
    assert length_penalty(30, 0.0) == 1.0


def test_default_file_names_name_the_checkpoint_for_scores_as_for_decodes():
    run, config = os.path.join(os.sep, "runs", "m30k"), SearchConfig(method="beam", beam_size=4)
    averaged = os.path.join(run, "averaged", "ckpt-2352")
    assert default_scores_path(run, "data/test.en", averaged) == os.path.join(
        run, "decode", "test.en.averaged-ckpt-2352.scores.jsonl"
    )
    assert default_output_path(run, "data/test.en", config, "text", averaged) == os.path.join(
        run, "decode", "test.en.averaged-ckpt-2352.beam4.decodes"
    )
    bfloat16 = default_output_path(run, "data/test.en", config, "jsonl", averaged, "bfloat16")
    assert bfloat16.endswith("test.en.averaged-ckpt-2352.beam4.bfloat16.decodes.jsonl")
    # Another checkpoint of the same run writes another file.
    newest = os.path.join(run, "ckpt-2000")
    assert default_scores_path(run, "data/test.en", newest).endswith(
        "test.en.ckpt-2000.scores.jsonl"
    )
    # An ensemble writes under its first run, named after each checkpoint.
    other = os.path.join(os.sep, "runs", "seed2")
    path = default_scores_path(f"{run},{other}", "test.en", f"{newest},{other}/ckpt-9")
    assert path == os.path.join(
        run, "decode", "test.en.ensemble-m30k-ckpt-2000+seed2-ckpt-9.scores.jsonl"
    )

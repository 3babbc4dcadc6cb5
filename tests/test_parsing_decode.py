"""wsj_parsing end to end on the real WSJ sample: the decoder's EVALB F1, and the exported parser.

A tiny `transformer_parsing_small` (with its source pointer) is trained for 500 steps on the
sample's train files, enough to bracket some phrases; its quality does not matter beyond that,
only the wiring and the equivalences. Proven here:

1. `python -m t2t_lite.decoder --problem=wsj_parsing ... --reference_file=GOLD` writes one
   well-formed tree per input line over exactly that line's words (gold POS tags on the leaves),
   and the EVALB scores it prints and records in `<OUT>.parse_f1.json` are those of
   `python -m t2t_lite.evalb -p COLLINS.prm GOLD OUT` run on the very files it wrote.
2. Without search flags it decodes with the paper's parsing settings (beam 21, alpha 0.3,
   input + 300), as it prints and records.
3. A reference file of the wrong length, or with a line that is not a tree, stops the command
   before decoding with one line naming the file (and the line), not a traceback.
4. `python -m t2t_lite.exporter --problem=wsj_parsing` writes a SavedModel whose text signature,
   reloaded in a fresh process, returns exactly the bracket sequences the decoder's search gives,
   and so, post-processed as the decoder does, exactly the trees the decoder command wrote.
"""

import json
import os
import sys

import pytest
import warm_python

from t2t_lite import hparams, problems
from t2t_lite.export.exporter import METADATA_FILE
from t2t_lite.inference import decode
from t2t_lite.problems import trees
from t2t_lite.runs import load_trained_model
from t2t_lite.search import SearchConfig
from t2t_lite.training import trainer

PROBLEM = "wsj_parsing"
TINY = (
    "hidden_size=64,filter_size=128,num_heads=2,num_encoder_layers=1,num_decoder_layers=1,"
    "batch_size=1024,warmup_steps=100,dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"
)
TRAIN_STEPS = 500
BEAM, EXTRA = 2, 40  # small, for speed; alpha stays the problem's default
PAPER_ALPHA = 0.3
SENTENCES = 8
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# Runs in a new Python process: reloads the text SavedModel and parses the sentences.
FRESH_PROCESS = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops of the graph)

args = json.loads(sys.argv[1])
model = tf.saved_model.load(args["text_dir"])
outputs = model.signatures["serving_default"](sentences=tf.constant(args["sentences"]))
print(json.dumps({
    "translations": [text.decode() for text in outputs["translations"].numpy().tolist()],
    "scores": outputs["scores"].numpy().tolist(),
}))
"""


def _cli(*args, timeout=300):
    return warm_python.run(args, capture_output=True, text=True, timeout=timeout, env=ENV)


def _decoder(*flags):
    return _cli(sys.executable, "-m", "t2t_lite.decoder", f"--problem={PROBLEM}", *flags)


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def _evalb_summary(report: str, block: str = "-- All --") -> dict:
    """{"Bracketing FMeasure": "19.05", ...}: one summary block of EVALB's report, as printed."""
    text = report.split(block, 1)[1].split("\n\n", 1)[0]
    return dict((part.strip() for part in line.split("=")) for line in text.strip().splitlines())


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("parsing_decode")


@pytest.fixture(scope="module")
def run(work, shared_data):
    """(data_dir, output_dir): datagen on the WSJ sample (vocab 1,000), then a tiny model."""
    data_dir, output_dir = str(work / "data"), str(work / "run")
    metadata = problems.get(PROBLEM).generate_data(
        data_dir, str(shared_data / "wsj_sample"), vocab_size=1000
    )
    assert metadata["splits"]["train"]["examples"] == 3396
    config = trainer.RunConfig(
        problem=PROBLEM,
        output_dir=output_dir,
        data_dir=data_dir,
        train_steps=TRAIN_STEPS,
        eval_steps=1,
        eval_every=TRAIN_STEPS,
        save_every=TRAIN_STEPS,
        log_every=TRAIN_STEPS,
    )
    hp = hparams.override(hparams.get("transformer_parsing_small"), TINY)
    trainer.train_and_evaluate(config, hp, printer=lambda line: None)
    return data_dir, output_dir


@pytest.fixture(scope="module")
def dev(run, work, shared_data):
    """The gold trees and words of 8 dev sentences (8-15 words, file order), as files."""
    data_dir, _ = run
    problem = problems.get(PROBLEM)
    gold = problem.reference_trees("dev", data_dir, str(shared_data / "wsj_sample"))
    assert len(gold) == 105, "the documented dev split: files wsj_0160-0169"
    words = problem.reference_inputs(gold)
    chosen = [i for i, text in enumerate(words) if 8 <= len(text.split()) <= 15][:SENTENCES]
    assert len(chosen) == SENTENCES
    gold, words = [gold[i] for i in chosen], [words[i] for i in chosen]
    return {
        "gold": gold,
        "words": words,
        "gold_file": _write(work / "dev.gold", gold),
        "words_file": _write(work / "dev.words", words),
    }


@pytest.fixture(scope="module")
def decoded(run, dev, work):
    """The decoder command on the dev words with the gold file: its stdout, output and JSON."""
    data_dir, output_dir = run
    output = work / "dev.parsed"
    result = _decoder(
        f"--data_dir={data_dir}", f"--output_dir={output_dir}",
        f"--decode_from_file={dev['words_file']}", f"--decode_to_file={output}",
        f"--reference_file={dev['gold_file']}", f"--beam_size={BEAM}", f"--extra_length={EXTRA}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    scores_file = work / "dev.parsed.parse_f1.json"
    return {
        "stdout": result.stdout,
        "output": output,
        "lines": output.read_text(encoding="utf-8").split("\n")[:-1],
        "scores": json.loads(scores_file.read_text()),
        "scores_file": scores_file,
    }


@pytest.mark.slow
def test_printed_and_recorded_f1_equal_the_evalb_command_on_the_written_files(
    decoded, dev, shared_data
):
    scores = decoded["scores"]
    assert scores["metric"] == "parse_f1"
    assert scores["hypotheses_file"] == str(decoded["output"])
    assert scores["reference_file"] == str(dev["gold_file"])
    assert (scores["search"]["beam_size"], scores["search"]["extra_length"]) == (BEAM, EXTRA)
    assert scores["search"]["alpha"] == PAPER_ALPHA, "alpha not given: the problem's"
    assert f"wrote scores to {decoded['scores_file']}" in decoded["stdout"]

    # The independent computation: our EVALB (byte-identical to EVALB on its sample, see
    # test_evalb.py) on the gold file and the file the decoder wrote.
    evalb = _cli(
        sys.executable, "-m", "t2t_lite.evalb", "-p", str(shared_data / "evalb" / "COLLINS.prm"),
        str(dev["gold_file"]), str(decoded["output"]),
    )  # fmt: skip
    assert evalb.returncode == 0, evalb.stderr[-3000:]
    summary = _evalb_summary(evalb.stdout)
    assert summary["Number of sentence"] == str(SENTENCES)
    # Gold tags on the leaves: EVALB deletes punctuation alike on both sides, no errors.
    assert summary["Number of Error sentence"] == summary["Number of Skip  sentence"] == "0"
    assert summary["Tagging accuracy"] == "100.00"
    recorded = {
        "Number of sentence": str(scores["sentences"]),
        "Number of Error sentence": str(scores["errors"]),
        "Number of Skip  sentence": str(scores["skipped"]),
        "Number of Valid sentence": str(scores["valid"]),
        "Bracketing Recall": f"{scores['recall']:.2f}",
        "Bracketing Precision": f"{scores['precision']:.2f}",
        "Bracketing FMeasure": f"{scores['f1']:.2f}",
        "Complete match": f"{scores['complete_match']:.2f}",
        "Average crossing": f"{scores['average_crossing']:.2f}",
        "Tagging accuracy": f"{scores['tagging_accuracy']:.2f}",
    }
    assert recorded == {name: summary[name] for name in recorded}
    cutoff = _evalb_summary(evalb.stdout, f"-- len<={scores['cutoff_len']} --")
    assert f"{scores['cutoff_f1']:.2f}" == cutoff["Bracketing FMeasure"]
    # The bracket counts behind precision and recall, from EVALB's totals row.
    totals = evalb.stdout.split("=" * 76)[2].split()
    matched, gold_brackets, test_brackets = (int(count) for count in totals[2:5])
    assert scores["precision"] == pytest.approx(100 * matched / test_brackets)
    assert scores["recall"] == pytest.approx(100 * matched / gold_brackets)
    # Not the trivial flat parse (one bracket per sentence), and not a perfect one.
    assert test_brackets > SENTENCES and 0 < scores["f1"] < 100

    printed = (
        f"EVALB bracketing F1 (COLLINS.prm): {summary['Bracketing FMeasure']} (precision "
        f"{summary['Bracketing Precision']}, recall {summary['Bracketing Recall']}, "
        f"{SENTENCES}/{SENTENCES} sentences scored)"
    )
    assert printed in decoded["stdout"].splitlines()


def test_every_output_line_is_a_tree_over_exactly_the_input_words(decoded, dev):
    assert len(decoded["lines"]) == SENTENCES
    for line, words, gold in zip(decoded["lines"], dev["words"], dev["gold"], strict=True):
        tree = trees.parse_tree(line, source="decoder output")  # exactly one tree
        assert trees.to_string(tree) == line, "one canonical bracketed tree per line"
        assert trees.words(tree) == words.split()
        assert trees.tags(tree) == trees.tags(trees.parse_tree(gold)), "gold tags on leaves"


@pytest.mark.slow
def test_without_flags_the_decoder_uses_the_papers_parsing_search(run, dev, work):
    data_dir, output_dir = run
    output = work / "defaults.parsed"
    result = _decoder(
        f"--data_dir={data_dir}", f"--output_dir={output_dir}",
        f"--decode_from_file={_write(work / 'one.words', dev['words'][:1])}",
        f"--decode_to_file={output}",
        f"--reference_file={_write(work / 'one.gold', dev['gold'][:1])}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    announced = next(line for line in result.stdout.splitlines() if line.startswith("decoding"))
    assert "SearchConfig(method='beam', beam_size=21, alpha=0.3, extra_length=300" in announced
    search = json.loads((work / "defaults.parsed.parse_f1.json").read_text())["search"]
    assert (search["method"], search["beam_size"], search["alpha"]) == ("beam", 21, 0.3)
    assert search["extra_length"] == 300
    tree = trees.parse_tree(output.read_text(encoding="utf-8"))
    assert trees.words(tree) == dev["words"][0].split()


@pytest.mark.slow
def test_ptb_output_scored_by_reference_evalb_gives_the_printed_figures(
    run, dev, decoded, work, shared_data, reference_evalb
):
    data_dir, output_dir = run
    raw = problems.get(PROBLEM).reference_trees(
        "dev", data_dir, str(shared_data / "wsj_sample"), raw=True
    )
    words = problems.get(PROBLEM).reference_inputs(raw)
    gold = [line for line, text in zip(raw, words) if text in dev["words"]]
    assert len(gold) == SENTENCES and all(line.startswith("( (") for line in gold)
    gold_file, output = _write(work / "dev.gold.mrg", gold), work / "dev.ptb.parsed"
    result = _decoder(
        f"--data_dir={data_dir}", f"--output_dir={output_dir}", "--ptb_output",
        f"--decode_from_file={dev['words_file']}", f"--decode_to_file={output}",
        f"--reference_file={gold_file}", f"--beam_size={BEAM}", f"--extra_length={EXTRA}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = output.read_text(encoding="utf-8").splitlines()
    # The same trees as without the flag, inside the outer bracket.
    assert lines == [f"( {line} )" for line in decoded["lines"]]
    report = _cli(
        str(reference_evalb), "-p", str(shared_data / "evalb" / "COLLINS.prm"),
        str(gold_file), str(output),
    ).stdout  # fmt: skip
    summary = _evalb_summary(report)
    assert summary["Number of Valid sentence"] == str(SENTENCES)
    scores = json.loads((work / "dev.ptb.parsed.parse_f1.json").read_text())
    for field, key in (
        ("Bracketing Recall", "recall"),
        ("Bracketing Precision", "precision"),
        ("Bracketing FMeasure", "f1"),
        ("Complete match", "complete_match"),
        ("Average crossing", "average_crossing"),
        ("Tagging accuracy", "tagging_accuracy"),
    ):
        assert summary[field] == f"{scores[key]:.2f}", field
    printed = (
        f"EVALB bracketing F1 (COLLINS.prm): {summary['Bracketing FMeasure']} (precision "
        f"{summary['Bracketing Precision']}, recall {summary['Bracketing Recall']}, "
        f"{SENTENCES}/{SENTENCES} sentences scored)"
    )
    assert printed in result.stdout.splitlines()
    # Every sentence's outer bracket matches: a complete match is possible, and counted.
    matched = int(report.split("=" * 76)[2].split()[2])
    assert matched >= SENTENCES


@pytest.mark.parametrize("defect", ["short", "unbalanced"])
def test_a_bad_reference_file_is_one_clear_line_before_decoding(run, dev, work, defect):
    data_dir, output_dir = run
    gold, bad = list(dev["gold"]), work / f"bad_{defect}.gold"
    if defect == "short":
        gold = gold[:-1]
        expected = f"{bad} has 7 lines but {dev['words_file']} has 8"
    else:
        gold[2] = gold[2][:-1]  # line 3 loses its last ")"
        expected = f"{bad} line 3: this tree's 1 open bracket(s) are never closed"
    _write(bad, gold)
    output = work / f"bad_{defect}.parsed"
    result = _decoder(
        f"--data_dir={data_dir}", f"--output_dir={output_dir}",
        f"--decode_from_file={dev['words_file']}", f"--decode_to_file={output}",
        f"--reference_file={bad}", f"--beam_size={BEAM}", f"--extra_length={EXTRA}",
    )  # fmt: skip
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("t2t_lite.decoder: ") and expected in last, result.stderr[-2000:]
    assert not output.exists(), "refused before decoding: no output file written"


@pytest.mark.parametrize(
    "line, message",
    [
        ("(S (NP (DT The) (NN cat)) (VBD sat)))", "')' after this tree closes nothing"),
        ("(S (NP (DT The) (NN cat)) (VBD sat)", "this tree's 1 open bracket(s) are never closed"),
        ("The cat sat", "word 'The' outside any bracket"),
        ("(S (NN cat)) (S (VBD sat))", "expected exactly one tree, found 2"),
        ("(S (-NONE- *T*))", "tree has only empty elements"),
    ],
)
def test_reference_trees_are_checked_line_by_line(line, message):
    references = ["(S (NN cat))", line]
    with pytest.raises(ValueError) as error:
        problems.get(PROBLEM).check_references(references, "gold.txt")
    assert str(error.value).startswith(f"gold.txt line 2: {message}")
    assert "tree 1, line 1" not in str(error.value)


@pytest.fixture(scope="module")
def exported(run, work):
    """The exporter command on the run: beam 2 only, input + 40, alpha the problem's."""
    data_dir, output_dir = run
    result = _cli(
        sys.executable, "-m", "t2t_lite.exporter", f"--problem={PROBLEM}",
        f"--data_dir={data_dir}", f"--output_dir={output_dir}", f"--export_dir={work / 'export'}",
        "--model_name=parser", f"--beam_size={BEAM}", f"--beam_sizes={BEAM}",
        f"--extra_length={EXTRA}", "--ids_model_name=",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    text_dir = str(work / "export" / "parser" / "1")
    assert f"exported version 1: {text_dir}" in result.stdout
    return text_dir


@pytest.fixture(scope="module")
def fresh(exported, dev):
    args = {"text_dir": exported, "sentences": dev["words"]}
    result = _cli(sys.executable, "-c", FRESH_PROCESS, json.dumps(args))
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_reloaded_saved_model_parses_exactly_as_the_decoder(exported, fresh, decoded, dev, run):
    metadata = json.load(open(os.path.join(exported, METADATA_FILE)))
    assert metadata["problem"] == PROBLEM
    search = metadata["search"]
    assert (search["beam_size"], search["beam_sizes"], search["extra_length"]) == (BEAM, [2], EXTRA)
    assert search["alpha"] == PAPER_ALPHA == decoded["scores"]["search"]["alpha"]

    # Level 1, bracket sequences: the SavedModel returns the linearized tree (the target
    # text), as the decoder's own search does before it post-processes it.
    data_dir, output_dir = run
    trained = load_trained_model(PROBLEM, data_dir, output_dir)
    config = SearchConfig(beam_size=BEAM, alpha=PAPER_ALPHA, extra_length=EXTRA)
    searched = decode.Decoder(trained, data_dir, config, printer=lambda line: None)
    linearized = searched.translate(dev["words"]).best
    assert fresh["translations"] == linearized
    # Not a trivial agreement: the sentences get different parses, some with brackets.
    assert len(set(linearized)) > 1 and any("(" in text for text in linearized)
    # Both searches are constrained: each output is already a tree over its sentence's words
    # (rebuilding it changes nothing), which a 500-step tiny model does not manage alone.
    for text, words in zip(fresh["translations"], dev["words"]):
        rebuilt = trees.linearize(trees.delinearize(text.split(), words.split()), leaves="word")
        assert rebuilt == text.split()

    # Level 2, trees: the decoder command writes post-processed trees (gold tags on the
    # leaves, since it was given the reference), the SavedModel returns bracket sequences;
    # post-processed the same way they are exactly the lines the command wrote.
    problem = problems.get(PROBLEM)
    parsed = [
        problem.postprocess(text, words, trees.tags(trees.parse_tree(gold)))
        for text, words, gold in zip(fresh["translations"], dev["words"], dev["gold"])
    ]
    assert parsed == decoded["lines"]

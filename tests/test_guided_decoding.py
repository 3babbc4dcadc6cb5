"""Constraints and prefixes end to end: decoder command, SavedModel, REST server, CTranslate2.

One trained algorithmic_reverse model (shared with test_decoding_model.py). Each path must
keep the guarantee (every output holds its phrases and starts with its prefix, or says it
could not) and give the outputs of the in-process search.
"""

import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from serving_support import _ready, _start, _stop, predict
from test_decoding_model import full_decode_log_probs, trained_reverse_run

from t2t_lite.export import export_from_run
from t2t_lite.inference.decode import Decoder
from t2t_lite.runs import load_trained_model
from t2t_lite.search import SearchConfig, Translator, guidance_batch, pad_batch

PROBLEM = "algorithmic_reverse"
SENTENCES = ["1 2 3", "4 5 6 7", "8 9", "3 3 3", "0", "6 2 9 1"]
# The fifth asks for 12 tokens + EOS where "0" (1 token + EOS + extra 10) allows 12.
CONSTRAINTS = [["9"], [], ["1 1", "2"], ["5"], [" ".join(["7"] * 12)], ["4 4"]]
PREFIXES = ["", "7", "", "3 3", "", "1"]
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return str(trained_reverse_run(tmp_path_factory))


@pytest.fixture(scope="module")
def decoder(run):
    trained = load_trained_model(PROBLEM, "", run)
    config = SearchConfig.for_problem(trained.problem, trained.hp, beam_size=2)
    return Decoder(trained, "", config, printer=lambda line: None)


@pytest.fixture(scope="module")
def in_process(decoder):
    return decoder.translate(SENTENCES, guidance=list(zip(CONSTRAINTS, PREFIXES)))


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    export_dir = tmp_path_factory.mktemp("export")
    export_from_run(PROBLEM, "", run, str(export_dir), "rev", beam_size=2, ids_model_name="")
    return export_dir / "rev"


def words_contain(text, phrase):
    words, wanted = text.split(), phrase.split()
    return any(words[s : s + len(wanted)] == wanted for s in range(len(words) - len(wanted) + 1))


def test_outputs_hold_their_constraints_and_prefixes(in_process):
    for line, (text, phrases, prefix) in enumerate(zip(in_process.best, CONSTRAINTS, PREFIXES)):
        assert text.split()[: len(prefix.split())] == prefix.split(), (line, text)
        if line == 4:
            assert in_process.constraints_met[line] is False
            continue
        assert in_process.constraints_met[line] is True
        assert all(words_contain(text, phrase) for phrase in phrases), (line, text, phrases)
    assert len(in_process.warnings) == 1 and "line 5" in in_process.warnings[0]


def test_decoder_command_writes_the_same_outputs(run, in_process, tmp_path):
    source, output = tmp_path / "in.txt", tmp_path / "out.jsonl"
    source.write_text("\n".join(SENTENCES) + "\n")
    (tmp_path / "c.txt").write_text("\n".join(json.dumps(c) for c in CONSTRAINTS) + "\n")
    (tmp_path / "p.txt").write_text("\n".join(PREFIXES) + "\n")
    command = [
        sys.executable, "-m", "t2t_lite.decoder", f"--problem={PROBLEM}", f"--output_dir={run}",
        f"--decode_from_file={source}", f"--decode_to_file={output}", "--output_format=jsonl",
        f"--constraints_file={tmp_path / 'c.txt'}", f"--prefix_file={tmp_path / 'p.txt'}",
        "--beam_size=2",
    ]  # fmt: skip
    done = warm_python.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "line 5: its constraints do not fit" in done.stdout
    records = [json.loads(line) for line in output.read_text().splitlines()]
    assert [r["hypotheses"][0]["text"] for r in records] == in_process.best
    assert [r["constraints_met"] for r in records] == in_process.constraints_met
    # A malformed constraints line is one clear error naming the file and line.
    (tmp_path / "c.txt").write_text('["9"]\n[]\n"1 1"\n[]\n[]\n[]\n')
    done = warm_python.run(command, capture_output=True, text=True, env=ENV, timeout=300)
    assert done.returncode != 0
    assert f"{tmp_path / 'c.txt'} line 3: constraints must be a JSON list" in done.stderr
    assert "Traceback" not in done.stderr


def _saved_model_outputs(model_dir):
    model = tf.saved_model.load(str(model_dir / "1"))
    width = max(len(c) for c in CONSTRAINTS)
    padded = [c + [""] * (width - len(c)) for c in CONSTRAINTS]
    outputs = model.signatures["translate_constrained"](
        sentences=tf.constant(SENTENCES), constraints=tf.constant(padded),
        prefix=tf.constant(PREFIXES),
    )  # fmt: skip
    return {key: value.numpy() for key, value in outputs.items()}


def test_saved_model_equals_the_in_process_search(exported, in_process):
    outputs = _saved_model_outputs(exported)
    assert [t.decode() for t in outputs["translations"]] == in_process.best
    np.testing.assert_allclose(outputs["scores"], [s[0] for s in in_process.scores], rtol=1e-5)
    assert outputs["constraints_met"].tolist() == in_process.constraints_met


def test_rest_instances_with_constraints_and_prefix(exported, tmp_path):
    expected = _saved_model_outputs(exported)
    process, lines = _start(exported, tmp_path / "server.log")
    try:
        url = _ready(process, lines)
        instances = [{"sentences": s} for s in SENTENCES]
        for instance, phrases, prefix in zip(instances, CONSTRAINTS, PREFIXES):
            if phrases:
                instance["constraints"] = phrases
            if prefix:
                instance["prefix"] = prefix
        status, body = predict(url, {"instances": instances})
        assert status == 200, body
        got = body["predictions"]
        assert [p["translations"] for p in got] == [t.decode() for t in expected["translations"]]
        assert [p["constraints_met"] for p in got] == expected["constraints_met"].tolist()
        np.testing.assert_allclose([p["scores"] for p in got], expected["scores"], rtol=1e-5)
        status, body = predict(url, {"instances": [{"sentences": "1 2", "constraints": "9"}]})
        assert status == 400
        assert "instances[0].constraints must be a list of non-blank strings" in body["error"]
        status, body = predict(url, {"instances": [{"sentences": "1", "prefix": "3 " * 30}]})
        assert status == 400 and "shorten the prefix" in body["error"]
    finally:
        _stop(process)


def _log_prob(model, inputs, ids) -> float:
    """log P of the hypothesis `ids` ([start, tokens..., EOS, padding]) given `inputs` [1, S]."""
    ids = np.asarray(ids)
    end = int(np.flatnonzero(ids == 1)[0]) + 1  # through EOS
    log_probs = full_decode_log_probs(model, inputs, ids[None, : end - 1])[0]
    return float(sum(log_probs[t, ids[t + 1]] for t in range(end - 1)))


def test_ctranslate2_prefix_equals_the_tensorflow_prefix(run, tmp_path):
    ctranslate2_search = pytest.importorskip("t2t_lite.search.ctranslate2_search")
    pytest.importorskip("ctranslate2")
    from t2t_lite.export.ctranslate2_export import export_ctranslate2_from_run

    export_ctranslate2_from_run(PROBLEM, "", run, str(tmp_path), "rev")
    model_dir = ctranslate2_search.resolve_model_dir(str(tmp_path / "rev"))
    trained = load_trained_model(PROBLEM, "", run)
    rng = np.random.default_rng(0)
    inputs = [list(rng.integers(2, 12, size=rng.integers(2, 9))) for _ in range(40)]
    prefixes = [list(rng.integers(2, 12, size=rng.integers(1, 4))) for _ in range(40)]
    guidance = guidance_batch([[] for _ in inputs], prefixes)
    for beam, least in ((1, 40), (4, 38)):
        config = SearchConfig.for_problem(trained.problem, trained.hp, beam_size=beam, alpha=0.0)
        ours = Translator(trained.model, config).search_guided(pad_batch(inputs), guidance)
        theirs = ctranslate2_search.CTranslate2Translator(model_dir, config).search_guided(
            pad_batch(inputs), guidance
        )
        same = [np.array_equal(ours[0][r, 0], theirs[0][r, 0]) for r in range(40)]
        if beam == 1:
            # CTranslate2's beam 1 is greedy; the t2t search also keeps the best finished
            # hypothesis beside the live one, so where they differ, ours is the more
            # probable under the model (full decode, neither search's cache).
            for r in np.flatnonzero(np.logical_not(same)):
                inputs_r = pad_batch([inputs[r]])
                ours_p, theirs_p = (
                    _log_prob(trained.model, inputs_r, found[0][r, 0]) for found in (ours, theirs)
                )
                assert ours_p > theirs_p, (r, ours[0][r, 0], theirs[0][r, 0])
                same[r] = True
        assert sum(same) >= least, f"beam {beam}: {sum(same)} of 40 equal"
        for r in range(40):
            np.testing.assert_array_equal(theirs[0][r, 0, 1 : 1 + len(prefixes[r])], prefixes[r])
    # The server's CTranslate2 service: prefixes as the decoder's, constraints refused.
    from t2t_lite.serving.ctranslate2_service import CTranslate2Service, RefusedInput

    service = CTranslate2Service(model_dir)
    texts = ["1 2 3", "4 5 6 7"]
    answer = service.run(
        "translate_constrained",
        {"sentences": np.array(texts, object), "constraints": np.array([[""], [""]], object),
         "prefix": np.array(["9", ""], object)},
    )  # fmt: skip
    assert answer["translations"][0].decode().split()[0] == "9"
    assert answer["constraints_met"].tolist() == [True, True]
    with pytest.raises(RefusedInput, match="CTranslate2 cannot decode with required phrases"):
        service.run(
            "translate_constrained",
            {"sentences": np.array(texts, object), "constraints": np.array([["5"], [""]], object),
             "prefix": np.array(["", ""], object)},
        )  # fmt: skip
    refused = guidance_batch([[[5]]] + [[] for _ in inputs[1:]], prefixes)
    with pytest.raises(ValueError, match="CTranslate2 cannot decode with required phrases"):
        ctranslate2_search.CTranslate2Translator(model_dir, config).search_guided(
            pad_batch(inputs), refused
        )

"""CTranslate2 exports: the same model, the same outputs, through the library and the commands.

Every architecture the hparams sets produce (post- and pre-norm, shared or separate
embeddings, sinusoid or learned positions) is converted from random weights and must give
our model's teacher-forced log-probabilities (every step, so encoder, positions, the zero
start embedding and the tied projection all count) and our greedy outputs. A trained
algorithmic_reverse model must give our greedy outputs token for token and our beam
outputs (beam 4, no length penalty) on at least 98% of 200 inputs.
"""

import json
import os
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
import warm_python
from test_decoding_model import trained_reverse_run

from t2t_lite import hparams
from t2t_lite.ids import EOS_ID
from t2t_lite.models import Transformer, build_transformer
from t2t_lite.runs import load_trained_model
from t2t_lite.search import SearchConfig, Translator, pad_batch, row_limits, strip_ids

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason='ctranslate2 is not installed (pip install "t2t_lite[ctranslate2]")'
)
from t2t_lite.export import ctranslate2_spec  # noqa: E402  (needs ctranslate2)
from t2t_lite.export.ctranslate2_export import (  # noqa: E402
    METADATA_FILE,
    export_ctranslate2_from_run,
)
from t2t_lite.inference.ctranslate2_engine import ctranslate2_decoder  # noqa: E402
from t2t_lite.inference.text_files import DecodeError  # noqa: E402
from t2t_lite.search.ctranslate2_search import (  # noqa: E402
    CTranslate2Error,
    CTranslate2Translator,
    length_penalty_for,
    resolve_model_dir,
)

SMALL = "hidden_size=32,filter_size=64,num_heads=2,max_position=64"
VOCAB, TARGET_VOCAB = 30, 23
EXTRA = 10
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")


def _tokens(size: int, prefix: str) -> list:
    return ["<pad>", "</s>", "<unk>"] + [f"{prefix}{i}" for i in range(3, size)]


def _random_inputs(rng, vocab_size: int, count: int, longest: int) -> list:
    return [
        list(rng.integers(3, vocab_size, size=rng.integers(1, longest + 1))) for _ in range(count)
    ]


def _convert(model, source_tokens, target_tokens, folder, quantization=None) -> str:
    spec = ctranslate2_spec.transformer_spec(model, source_tokens, target_tokens)
    return ctranslate2_spec.SpecConverter(spec).convert(str(folder), quantization=quantization)


# Variant -> (hparams overrides, target vocabulary size or None, seed). Each seed gives a
# random model whose greedy outputs are mostly more than a lone EOS.
VARIANTS = {
    "post_norm_shared_sinusoid": ("", None, 11),
    "pre_norm": ("normalize_first=true", None, 11),
    "learned_positions": ("position_encoding=learned", None, 11),
    "separate_embeddings_one_vocabulary": ("shared_embedding=false", None, 11),
    "separate_vocabularies_pre_norm_learned": (
        "normalize_first=true,position_encoding=learned",
        TARGET_VOCAB,
        1,
    ),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_each_architecture_gives_our_log_probs_and_greedy_outputs(variant, tmp_path):
    overrides, target_vocab, seed = VARIANTS[variant]
    keras.utils.set_random_seed(seed)
    hp = hparams.override(
        hparams.get("transformer_tiny"), ",".join(filter(None, [SMALL, overrides]))
    )
    model = build_transformer(hp, VOCAB, target_vocab)
    source_tokens = _tokens(VOCAB, "s")
    target_tokens = _tokens(target_vocab or VOCAB, "t" if target_vocab else "s")
    folder = _convert(model, source_tokens, target_tokens, tmp_path / "model")
    files = set(os.listdir(folder))
    assert ("source_vocabulary.json" in files) == bool(target_vocab), files

    # Teacher-forced log P of every target token, EOS included, against our full decoder.
    rng = np.random.default_rng(4)
    sources = _random_inputs(rng, VOCAB, 8, 12)
    targets = _random_inputs(rng, target_vocab or VOCAB, 8, 9)
    translator = ctranslate2.Translator(folder, intra_threads=1)
    scored = translator.score_batch(
        [[source_tokens[i] for i in ids] for ids in sources],
        [[target_tokens[i] for i in ids] for ids in targets],
    )
    for source, target, result in zip(sources, targets, scored):
        logits = model(
            {"inputs": tf.constant([source + [1]]), "targets": tf.constant([target + [1]])}
        )
        log_probs = tf.nn.log_softmax(logits)[0].numpy()  # [T, V]
        ours = log_probs[np.arange(len(target) + 1), target + [1]]
        np.testing.assert_allclose(result.log_probs, ours, atol=2e-5)

    # Greedy search, each row up to its own length + EXTRA.
    config = SearchConfig(method="greedy", extra_length=EXTRA)
    inputs = pad_batch(_random_inputs(rng, VOCAB, 24, 12))
    ours = Translator(model, config).search(inputs)[0].numpy()
    theirs = CTranslate2Translator(folder, config, threads=1).search(inputs)[0]
    # Random weights give the padding id 0 a real probability. Our searches never generate it;
    # CTranslate2 does (suppressing it would renormalise its scores), so a row where it did is
    # compared up to that point, where both took the same argmax choices.
    limits = row_limits(inputs, EXTRA).numpy()
    for mine, row, limit in zip(ours[:, 0], theirs[:, 0], limits):
        tokens, cut = strip_ids(mine), strip_ids(row)
        assert len(tokens) == limit or mine[1 + len(tokens)] == EOS_ID  # no padding id inside
        if len(cut) == limit or row[1 + len(cut)] == EOS_ID:
            assert tokens == cut
        else:  # CTranslate2 generated the padding id after `cut`
            assert tokens[: len(cut)] == cut
    ours = [strip_ids(row[0]) for row in ours]
    assert sum(map(bool, ours)) >= len(ours) // 2, ours


def test_position_table_is_the_model_s_own_encoding():
    """Row p is position p: sin(p / 10000^(2i/D)) at 2i, cos at 2i + 1 (our layout, not CT2's)."""
    keras.utils.set_random_seed(0)
    model = build_transformer(hparams.override(hparams.get("transformer_tiny"), SMALL), VOCAB)
    table = ctranslate2_spec.position_table(model, 5)
    frequencies = 10000.0 ** (-np.arange(0, 32, 2) / 32)
    np.testing.assert_allclose(table[3, 0::2], np.sin(3 * frequencies), atol=1e-6)
    np.testing.assert_allclose(table[3, 1::2], np.cos(3 * frequencies), atol=1e-6)
    np.testing.assert_allclose(table[0, 1::2], 1.0)


def test_source_pointer_models_are_refused_with_a_reason():
    model = Transformer(
        VOCAB, num_encoder_layers=1, num_decoder_layers=1, hidden_size=8, filter_size=8,
        num_heads=2, source_pointer=True, non_copy_ids=[3, 4],
    )  # fmt: skip
    model.build()
    with pytest.raises(ctranslate2_spec.SpecError, match="source_pointer.*SavedModel"):
        ctranslate2_spec.transformer_spec(model, _tokens(VOCAB, "s"), _tokens(VOCAB, "s"))


def test_length_penalty_with_the_same_slope_as_gnmt():
    # ((5 + n) / 6)^0.6 and n^p have the same d ln / d ln n at n = 15: p = 0.6 * 15 / 20.
    assert length_penalty_for(0.6, 15) == pytest.approx(0.45)
    assert length_penalty_for(0.0, 15) == 0.0


@pytest.fixture(scope="module")
def reverse_export(tmp_path_factory):
    run = str(trained_reverse_run(tmp_path_factory))
    export_dir = tmp_path_factory.mktemp("ct2_export")
    first = export_ctranslate2_from_run("algorithmic_reverse", "", run, str(export_dir), "rev")
    second = export_ctranslate2_from_run(
        "algorithmic_reverse", "", run, str(export_dir), "rev", quantization="int8"
    )
    return run, export_dir, first, second


def _our_search(run, config, inputs) -> tuple:
    """Our Translator's (ids [B, K, L], scores [B, K]) with the model of `run`."""
    trained = load_trained_model("algorithmic_reverse", "", run)
    return tuple(t.numpy() for t in Translator(trained.model, config).search(inputs))


def _agreement(our_search, model_dir, config, inputs) -> tuple:
    ours, our_scores = our_search
    theirs, their_scores = CTranslate2Translator(model_dir, config, threads=1).search(inputs)
    same = [np.array_equal(ours[row, 0], theirs[row, 0]) for row in range(len(inputs))]
    return np.array(same), ours, theirs, our_scores, their_scores


def test_trained_model_greedy_and_beam_equal_ours(reverse_export):
    run, export_dir, first, second = reverse_export
    assert (first.version, second.version) == (1, 2)
    assert resolve_model_dir(str(export_dir / "rev")) == second.text_dir
    metadata = json.loads(open(os.path.join(second.text_dir, METADATA_FILE)).read())
    assert metadata["quantization"] == "int8" and metadata["problem"] == "algorithmic_reverse"

    rng = np.random.default_rng(7)
    inputs = pad_batch([list(rng.integers(2, 12, size=rng.integers(1, 15))) for _ in range(200)])
    greedy = SearchConfig(method="greedy", extra_length=EXTRA)
    our_greedy = _our_search(run, greedy, inputs)  # compared with both exports
    same, ours, _, our_scores, their_scores = _agreement(our_greedy, first.text_dir, greedy, inputs)
    assert same.all(), np.flatnonzero(~same)
    np.testing.assert_allclose(their_scores, our_scores, atol=1e-3)
    # Not a trivial check: outputs differ from input to input.
    assert len({tuple(row[0]) for row in ours}) > 150

    beam = SearchConfig(beam_size=4, alpha=0.0, extra_length=EXTRA)
    same, *_ = _agreement(_our_search(run, beam, inputs), first.text_dir, beam, inputs)
    assert same.mean() >= 0.98, same.mean()
    int8_same, *_ = _agreement(our_greedy, second.text_dir, greedy, inputs)
    assert int8_same.mean() >= 0.8, int8_same.mean()  # int8 rounding flips close calls


def test_decoder_refuses_another_problem_and_a_missing_export(reverse_export, tmp_path):
    _, export_dir, _, _ = reverse_export
    with pytest.raises(DecodeError, match="exported for problem algorithmic_reverse"):
        ctranslate2_decoder(str(export_dir / "rev"), "algorithmic_copy", "", {})
    with pytest.raises(CTranslate2Error, match=f"--ct2_model={tmp_path}: no CTranslate2 export"):
        ctranslate2_decoder(str(tmp_path), "algorithmic_reverse", "", {})


def _command(module, *args):
    return warm_python.run(
        [sys.executable, "-m", module, *map(str, args)],
        capture_output=True, text=True, timeout=300, env=ENV,
    )  # fmt: skip


@pytest.mark.slow
def test_commands_export_and_decode_like_the_tensorflow_engine(reverse_export, tmp_path):
    run, _, _, _ = reverse_export
    export_dir = tmp_path / "export"
    exported = _command(
        "t2t_lite.exporter", "--problem=algorithmic_reverse", f"--output_dir={run}",
        f"--export_dir={export_dir}", "--model_name=rev", "--format=ctranslate2",
    )  # fmt: skip
    assert exported.returncode == 0, exported.stderr[-3000:]
    assert "exported version 1 (CTranslate2)" in exported.stdout
    rng = np.random.default_rng(3)
    lines = [" ".join(map(str, rng.integers(0, 10, size=rng.integers(1, 12)))) for _ in range(30)]
    lines[4] = ""
    source, reference = tmp_path / "in.txt", tmp_path / "ref.txt"
    source.write_text("\n".join(lines) + "\n")
    reference.write_text("\n".join(" ".join(line.split()[::-1]) for line in lines) + "\n")
    outputs = {}
    for engine in ("tensorflow", "ctranslate2"):
        output = tmp_path / f"{engine}.txt"
        decoded = _command(
            "t2t_lite.decoder", "--problem=algorithmic_reverse", f"--output_dir={run}",
            f"--decode_from_file={source}", f"--decode_to_file={output}",
            f"--reference_file={reference}", "--beam_size=4", "--alpha=0",
            f"--engine={engine}", f"--ct2_model={export_dir / 'rev'}",
        )  # fmt: skip
        assert decoded.returncode == 0, decoded.stderr[-3000:]
        outputs[engine] = output.read_text()
        assert "sequence exact match" in decoded.stdout
        assert os.path.exists(f"{output}.accuracy.json")
    assert outputs["ctranslate2"] == outputs["tensorflow"]
    assert outputs["tensorflow"].split("\n")[4] == ""


def test_commands_say_what_is_missing(tmp_path):
    decoded = _command(
        "t2t_lite.decoder", "--problem=algorithmic_reverse", f"--output_dir={tmp_path}",
        f"--decode_from_file={tmp_path}/in.txt", "--engine=ctranslate2",
    )  # fmt: skip
    assert decoded.returncode != 0
    assert "--engine=ctranslate2 needs --ct2_model" in decoded.stderr.strip().splitlines()[-1]


def test_a_served_ctranslate2_version_answers_like_the_engine(reverse_export, tmp_path):
    import shutil

    from serving_support import _ready, _start, _stop, call, predict

    from t2t_lite.serving import ModelStore

    run, export_dir, first, _ = reverse_export
    model_dir = tmp_path / "rev"
    shutil.copytree(first.text_dir, model_dir / "1")
    (model_dir / "0").mkdir()  # An empty folder is not a version.
    assert ModelStore(str(model_dir)).versions_on_disk() == [1]
    process, lines = _start(model_dir, tmp_path / "server.log", "--poll_seconds=0")
    try:
        url = _ready(process, lines)
        status, metadata = call(url, "GET", "/v1/models/rev/metadata")
        assert status == 200
        signatures = metadata["metadata"]["signature_def"]["signature_def"]
        assert sorted(signatures) == [
            "serving_default", "translate_constrained", "translate_ids",
            "translate_ids_with_options", "translate_with_options",
        ]  # fmt: skip
        assert signatures["serving_default"]["inputs"]["sentences"]["dtype"] == "DT_STRING"

        rng = np.random.default_rng(11)
        rows = [list(rng.integers(2, 12, size=rng.integers(1, 12))) for _ in range(12)]
        sentences = [" ".join(str(token - 2) for token in row) for row in rows]
        sentences[3] = "  "
        status, reply = predict(
            url, {"signature_name": "translate_with_options",
                  "inputs": {"sentences": sentences, "beam_size": 2, "alpha": 0.0}},
        )  # fmt: skip
        assert status == 200, reply
        config = SearchConfig(beam_size=2, alpha=0.0, extra_length=EXTRA, beam_sizes=(1, 2, 4))
        engine = CTranslate2Translator(first.text_dir, SearchConfig(extra_length=EXTRA))
        for row, sentence in enumerate(sentences):
            if row == 3:
                assert reply["outputs"]["translations"][row] == ""
                assert reply["outputs"]["scores"][row] == 0.0
                continue
            ids, scores = engine.search(pad_batch([rows[row]]), config)
            expected = " ".join(str(token - 2) for token in strip_ids(ids[0, 0]))
            assert reply["outputs"]["translations"][row] == expected, sentence
            assert reply["outputs"]["scores"][row] == pytest.approx(scores[0, 0], abs=1e-4)
        # Trained to reverse: most translations are the reversed input.
        reversed_ = [" ".join(s.split()[::-1]) for s in sentences]
        assert np.mean([a == b for a, b in zip(reply["outputs"]["translations"], reversed_)]) > 0.5

        batch = pad_batch(rows[:4])
        status, reply = predict(
            url, {"signature_name": "translate_ids", "inputs": {"input_ids": batch.tolist()}}
        )
        assert status == 200, reply
        ids, scores = engine.search(batch)
        np.testing.assert_array_equal(np.array(reply["outputs"]["output_ids"]), ids[:, :, 1:])
        np.testing.assert_allclose(np.array(reply["outputs"]["scores"]), scores, atol=1e-4)

        refusals = [
            ({"sentences": ["1 2"], "beam_size": 3, "alpha": 0.0}, "choose one of [1, 2, 4]"),
            ({"sentences": ["1 2"], "beam_size": 2, "alpha": 11.0}, "choose 0 to 10"),
            ({"sentences": ["1 x"], "beam_size": 2, "alpha": 0.0}, "'x' is not a symbol"),
        ]
        for inputs, message in refusals:
            status, reply = predict(
                url, {"signature_name": "translate_with_options", "inputs": inputs}
            )
            assert status == 400 and message in reply["error"], reply
        status, reply = predict(
            url, {"inputs": {"input_ids": [[2, 5000, 1]]}, "signature_name": "translate_ids"}
        )
        assert status == 400 and "below the vocabulary size" in reply["error"], reply
        status, reply = predict(url, {"instances": ["3 1 4"]})
        assert status == 200 and reply["predictions"][0]["translations"] == "4 1 3", reply
    finally:
        _stop(process)
    assert process.returncode == 0

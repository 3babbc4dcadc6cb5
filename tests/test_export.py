"""The exporter: layout, SavedModel == in-process search in a fresh process, CLI tools, limits.

A tiny Transformer is trained on algorithmic_reverse; its SavedModels are reloaded in a
new Python process and must give exactly (bit for bit) the ids, scores and text of the
in-process `Translator` and of the decoder command on the same sentences.
"""

import functools
import gzip
import json
import os
import sys

import numpy as np
import pytest
import tensorflow as tf
import warm_python
from tensorflow.core.protobuf import saved_model_pb2

from t2t_lite import hparams, problems
from t2t_lite.export import SymbolCodec, codec_for, export_from_run
from t2t_lite.export.exporter import METADATA_FILE, WARMUP_FILE
from t2t_lite.problems.algorithmic import SymbolEncoder
from t2t_lite.runs import load_trained_model
from t2t_lite.search import SearchConfig, SearchConfigError, Translator, pad_batch, strip_ids
from t2t_lite.training import trainer

PROBLEM = "algorithmic_reverse"
TINY = (
    "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=48,"
    "warmup_steps=100,dropout=0.0,attention_dropout=0.0,relu_dropout=0.0"
)
BEAM, ALPHA, EXTRA = 2, 0.6, 10  # EXTRA: the problem's extra_decode_length
# Short sentences that the (little trained) model decodes up to their own length limit,
# batched with a much longer one: padded to its width, they must still decode as alone.
SHORT = ["5 5", "0", "1 2 3"]
LONG_INPUT = " ".join(str(i * 7 % 10) for i in range(40))
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")

# Runs in a new Python process: reloads both SavedModels and reports every output.
FRESH_PROCESS = r"""
import json, sys
import numpy as np, tensorflow as tf
import tensorflow_text  # noqa: F401  (registers tokenizer ops if the model uses them)

args = json.loads(sys.argv[1])
text, ids_only = tf.saved_model.load(args["text_dir"]), tf.saved_model.load(args["ids_dir"])
default, options = text.signatures["serving_default"], text.signatures["translate_with_options"]
sentences = tf.constant(args["sentences"])
input_ids = tf.constant(np.array(args["input_ids"], np.int32))
pair_ids = tf.constant(np.array(args["pair_ids"], np.int32))

def listed(outputs):
    lists = {k: v.numpy().tolist() for k, v in outputs.items()}
    return {k: [t.decode() for t in v] if outputs[k].dtype == tf.string else v
            for k, v in lists.items()}

def error(call):
    try:
        call()
    except tf.errors.InvalidArgumentError as e:
        return e.message
    return "no error"

beam_1 = dict(beam_size=tf.constant(1), alpha=tf.constant(0.0))
beam_3 = dict(beam_size=tf.constant(3), alpha=tf.constant(0.6))
out = {
    "default": listed(default(sentences=sentences)),
    "options": listed(options(sentences=sentences, **beam_1)),
    "text_ids": listed(text.signatures["translate_ids"](input_ids=input_ids)),
    "ids_only": listed(ids_only.signatures["translate_ids"](input_ids=input_ids)),
    "ids_options": listed(
        ids_only.signatures["translate_ids_with_options"](input_ids=input_ids, **beam_1)),
    "pair_text": listed(default(sentences=tf.constant(args["pair"]))),
    "pair_ids": listed(ids_only.signatures["translate_ids"](input_ids=pair_ids)),
    "blank": listed(default(sentences=tf.constant(["", "  ", "1 2"]))),
    "bad_beam": error(lambda: options(sentences=sentences, **beam_3)),
    "bad_token": error(lambda: default(sentences=tf.constant(["1 x 2"]))),
    "bad_symbol": error(lambda: default(sentences=tf.constant(["1 10"]))),
    "too_long": error(lambda: default(sentences=tf.constant([" ".join(["7"] * 5000)]))),
    "bad_id": error(lambda: ids_only.signatures["translate_ids"](input_ids=[[3, 12, 1]])),
}
print(json.dumps(out))
"""


def _hp():
    return hparams.override(hparams.get("transformer_tiny"), TINY)


def _train(output_dir, steps, **overrides):
    config = trainer.RunConfig(
        problem=PROBLEM,
        output_dir=str(output_dir),
        train_steps=steps,
        eval_steps=1,
        eval_every=steps,
        save_every=steps,
        log_every=steps,
        **overrides,
    )
    trainer.train_and_evaluate(config, _hp(), printer=lambda line: None)
    return str(output_dir)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    return _train(tmp_path_factory.mktemp("run"), 150)


@pytest.fixture(scope="module")
def exported(run, tmp_path_factory):
    export_dir = tmp_path_factory.mktemp("export")
    return export_from_run(PROBLEM, "", run, str(export_dir), "rev", beam_size=BEAM, alpha=ALPHA)


@pytest.fixture(scope="module")
def sentences():
    """Twelve dev-split inputs of the problem, as text (lengths 1 to 40 symbols)."""
    problem = problems.get(PROBLEM)
    encoder = problem.encoders("")["inputs"]
    pairs = [pair for pair, _ in zip(problem.generate("dev"), range(12))]
    return [encoder.decode(inputs) for inputs, _ in pairs]


@functools.cache
def _translator(run, checkpoint_path, beam_size, alpha, stop_early):
    """(input encoder, Translator) of the model in `run` (or `checkpoint_path`), unchanged;
    made once per setting, since each loads the model and traces its own search."""
    trained = load_trained_model(PROBLEM, "", run, checkpoint_path)
    config = SearchConfig(
        beam_size=beam_size, alpha=alpha, extra_length=EXTRA, stop_early=stop_early
    )
    return trained.problem.encoders("")["inputs"], Translator(trained.model, config)


def _search(run, sentences, beam_size, alpha, checkpoint_path=None, stop_early=True):
    """In-process reference: the Translator's ids [B, K, L], scores [B, K] and best text."""
    encoder, translator = _translator(run, checkpoint_path, beam_size, alpha, stop_early)
    input_ids = pad_batch([encoder.encode(s) for s in sentences])
    ids, scores = (t.numpy() for t in translator.search(input_ids))
    text = [encoder.decode(strip_ids(row[0])) for row in ids]
    return input_ids, ids, scores, text


@pytest.fixture(scope="module")
def reference(run, sentences):
    return _search(run, sentences, BEAM, ALPHA)


@pytest.fixture(scope="module")
def fresh(exported, reference, sentences):
    encoder = SymbolEncoder(10)
    args = {
        "text_dir": exported.text_dir,
        "ids_dir": exported.ids_dir,
        "sentences": sentences,
        "input_ids": reference[0].tolist(),
        "pair": [*SHORT, LONG_INPUT],
        "pair_ids": pad_batch([encoder.encode(s) for s in [*SHORT, LONG_INPUT]]).tolist(),
    }
    result = warm_python.run(
        [sys.executable, "-c", FRESH_PROCESS, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=ENV,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_versions_are_written_in_tf_serving_layout(exported):
    base = os.path.dirname(os.path.dirname(exported.text_dir))
    assert exported.version == 1
    assert exported.text_dir == os.path.join(base, "rev", "1")
    assert exported.ids_dir == os.path.join(base, "rev_ids", "1")
    assert sorted(os.listdir(os.path.join(base, "rev"))) == ["1"], "no temporary folder left"
    for folder in (exported.text_dir, exported.ids_dir):
        assert os.path.isfile(os.path.join(folder, "saved_model.pb"))
    metadata = json.load(open(os.path.join(exported.text_dir, METADATA_FILE)))
    assert metadata["problem"] == PROBLEM and metadata["version"] == 1
    assert metadata["search"]["beam_size"] == BEAM and metadata["search"]["beam_sizes"] == [1, 2]
    assert metadata["signatures"] == [
        "attention", "model_info", "serving_default", "translate_constrained", "translate_ids",
        "translate_ids_with_options", "translate_nbest", "translate_with_options",
    ]  # fmt: skip
    ids_metadata = json.load(open(os.path.join(exported.ids_dir, METADATA_FILE)))
    assert "translate_with_options" not in ids_metadata["signatures"]
    assert json.load(open(os.path.join(exported.text_dir, WARMUP_FILE)))[0]["instances"] == [""]


def test_each_search_is_saved_once(exported):
    # One loop per offered beam size (1 and 2) for the search that every translating
    # signature calls, and as many for the guided search of `translate_constrained` (text
    # model only): a search traced again by the saver would add its loops once more.
    for folder, searches in ((exported.text_dir, 2), (exported.ids_dir, 1)):
        saved = saved_model_pb2.SavedModel()
        with open(os.path.join(folder, "saved_model.pb"), "rb") as handle:
            saved.ParseFromString(handle.read())
        library = saved.meta_graphs[0].graph_def.library
        loops = [
            node.name
            for function in library.function
            for node in function.node_def
            if node.op in ("While", "StatelessWhile")
        ]
        assert len(loops) == 2 * searches, (folder, loops)


def test_fresh_process_text_equals_in_process_search(fresh, reference):
    _, _, scores, text = reference
    assert fresh["default"]["translations"] == text
    assert len(set(text)) > 6, "the trained model should give varied translations"
    np.testing.assert_array_equal(np.float32(fresh["default"]["scores"]), scores[:, 0])


def test_fresh_process_ids_equal_in_process_search(fresh, reference):
    _, ids, scores, _ = reference
    for name in ("text_ids", "ids_only"):
        np.testing.assert_array_equal(np.array(fresh[name]["output_ids"]), ids[:, :, 1:])
        np.testing.assert_array_equal(np.float32(fresh[name]["scores"]), scores)


def test_beam_size_and_alpha_per_request(fresh, run, sentences, reference):
    _, ids, scores, text = _search(run, sentences, beam_size=1, alpha=0.0)
    assert fresh["options"]["translations"] == text
    np.testing.assert_array_equal(np.float32(fresh["options"]["scores"]), scores[:, 0])
    # translate_ids_with_options: one beam, as the in-process search with beam 1.
    np.testing.assert_array_equal(np.array(fresh["ids_options"]["output_ids"]), ids[:, :, 1:])
    np.testing.assert_array_equal(np.float32(fresh["ids_options"]["scores"]), scores)
    assert np.array(fresh["ids_options"]["output_ids"]).shape[1] == 1 != reference[1].shape[1]
    assert "choose one of [1, 2]" in fresh["bad_beam"]


def _searches(run, change=None):
    """{stop_early: search(sentences) -> (ids [B, K, L], scores [B, K])} in this process,
    with the trained model of `run` after `change` (None: unchanged)."""
    stops = (True, False)
    if change is None:
        translators = {stop: _translator(run, None, BEAM, ALPHA, stop) for stop in stops}
    else:
        trained = load_trained_model(PROBLEM, "", run)
        model, encoder = change(trained.model), trained.problem.encoders("")["inputs"]
        configs = {
            stop: SearchConfig(beam_size=BEAM, alpha=ALPHA, extra_length=EXTRA, stop_early=stop)
            for stop in stops
        }
        translators = {stop: (encoder, Translator(model, configs[stop])) for stop in stops}
    return {
        stop: lambda lines, e=encoder, t=translator: tuple(
            x.numpy() for x in t.search(pad_batch([e.encode(s) for s in lines]))
        )
        for stop, (encoder, translator) in translators.items()
    }


@pytest.fixture(scope="module")
def searches(run):
    """`_searches` of the trained model."""
    return _searches(run)


def _without_eos(model):
    """`model` changed so that EOS never wins a step, all other logits unchanged.

    The last layer norm before the tied pre-softmax projection outputs h = gamma x_hat +
    beta (|x_hat| = sqrt(D)), and token j's logit is h . E[j]. beta gets c u added, where u
    . E[j] = 0 for every j but EOS and u . E[EOS] = -1: EOS's logit drops by c, where c is
    50 more than twice the largest logit any h could give."""
    norm = model.decoder_layer_norm or model.decoder_layers[-1].feed_forward_layer_norm
    embedding = model.token_embedding if model.shares_vocabulary else model.target_embedding
    table = embedding.embeddings.numpy()  # [V, D], V < D here
    target = np.zeros(len(table))
    target[1] = -1.0  # EOS
    u = np.linalg.lstsq(table, target, rcond=None)[0]
    np.testing.assert_allclose(table @ u, target, atol=1e-4)
    gamma, beta = norm.gamma.numpy(), norm.beta.numpy()
    largest = (np.abs(gamma).max() * np.sqrt(gamma.size) + np.linalg.norm(beta)) * max(
        np.linalg.norm(table, axis=1)
    )
    norm.beta.assign(beta + (50.0 + 2 * largest) * u)
    return model


@pytest.fixture(scope="module")
def searches_without_eos(run):
    """`_searches` of the trained model changed by `_without_eos`."""
    return _searches(run, _without_eos)


@pytest.fixture(scope="module")
def alone(searches):
    """Each SHORT sentence searched on its own, with early stopping: [(ids, scores)]."""
    return [searches[True]([s]) for s in SHORT]


@pytest.mark.parametrize("model", ["trained", "without_eos"])
def test_a_sentence_decodes_alone_and_beside_a_longer_one_the_same(
    model, searches, searches_without_eos
):
    if model == "without_eos":
        searches = searches_without_eos
        limits = [len(s.split()) + 1 + EXTRA for s in SHORT]  # own length with EOS + extra
        # The case that matters: alone, every short sentence runs to its own limit (all
        # `limit` slots of the best hypothesis hold symbols, none EOS).
        for sentence, limit in zip(SHORT, limits):
            best = searches[True]([sentence])[0][0, 0, 1:]
            assert len(best) == limit and np.all(best > 1), best
    # A row's search stops (freezes) when it would stop alone: every beam is exact, with or
    # without early stopping.
    for stop_early, beams in ((True, BEAM), (False, BEAM)):
        ids, scores = searches[stop_early]([*SHORT, LONG_INPUT])
        for row, sentence in enumerate(SHORT):
            alone_ids, alone_scores = searches[stop_early]([sentence])
            width = alone_ids.shape[2]
            np.testing.assert_array_equal(ids[row, :beams, :width], alone_ids[0, :beams])
            assert not ids[row, :beams, width:].any()
            # Other padding widths may round float sums differently.
            np.testing.assert_allclose(scores[row, :beams], alone_scores[0, :beams], rtol=1e-6)


def test_saved_model_decodes_a_sentence_alone_and_beside_a_longer_one_the_same(fresh, alone):
    encoder = SymbolEncoder(10)
    for row, (alone_ids, alone_scores) in enumerate(alone):
        best = alone_ids[0, 0, 1:]
        assert fresh["pair_text"]["translations"][row] == encoder.decode(strip_ids(alone_ids[0, 0]))
        got = np.array(fresh["pair_ids"]["output_ids"][row][0])
        np.testing.assert_array_equal(got[: len(best)], best)
        assert not got[len(best) :].any()
        for name in ("pair_text", "pair_ids"):
            score = np.ravel(fresh[name]["scores"][row])[0]
            np.testing.assert_allclose(score, alone_scores[0, 0], rtol=1e-6)


def test_blank_sentences_translate_to_blank_lines(fresh, run):
    assert fresh["blank"]["translations"][:2] == ["", ""]
    assert fresh["blank"]["scores"][:2] == [0.0, 0.0]
    # The real sentence beside them translates as the in-process search does it alone.
    _, _, scores, text = _search(run, ["1 2"], BEAM, ALPHA)
    assert fresh["blank"]["translations"][2] == text[0]
    np.testing.assert_allclose(np.ravel(fresh["blank"]["scores"][2])[0], scores[0, 0], rtol=1e-6)


def test_bad_inputs_fail_with_messages(fresh):
    assert "integers 0..9 separated by spaces; found token x]" in fresh["bad_token"]
    assert "symbols must be below 10" in fresh["bad_symbol"]
    assert "longer than this export's limit of 1014 ids" in fresh["too_long"].replace("\\'", "'")
    assert "below the vocabulary size 12" in fresh["bad_id"]


def _cli(*args, timeout=300):
    return warm_python.run(args, capture_output=True, text=True, timeout=timeout, env=ENV)


# TensorFlow's `saved_model_cli` console script calls this module's main(); run as a module
# of this Python, it is the same program whatever is on PATH.
SAVED_MODEL_CLI = (sys.executable, "-m", "tensorflow.python.tools.saved_model_cli")


def test_saved_model_cli_show_lists_the_signatures(exported):
    result = _cli(*SAVED_MODEL_CLI, "show", "--dir", exported.text_dir, "--all")
    assert result.returncode == 0, result.stderr[-2000:]
    for name in (
        "serving_default", "translate_with_options", "translate_ids", "translate_ids_with_options"
    ):  # fmt: skip
        assert f"signature_def['{name}']" in result.stdout
    for line in (
        "inputs['sentences'] tensor_info:", "outputs['translations'] tensor_info:",
        "inputs['input_ids'] tensor_info:", "outputs['output_ids'] tensor_info:",
        "inputs['beam_size'] tensor_info:",
    ):  # fmt: skip
        assert line in result.stdout


def test_saved_model_cli_run_translates_ids(exported, reference, tmp_path):
    """The graph-mode loader (as in TF Serving) restores every variable the search reads."""
    input_ids, ids, scores, _ = reference
    np.save(tmp_path / "input_ids.npy", input_ids)
    result = _cli(
        *SAVED_MODEL_CLI, "run", "--dir", exported.ids_dir, "--tag_set", "serve",
        "--signature_def", "translate_ids", "--inputs", f"input_ids={tmp_path / 'input_ids.npy'}",
        "--outdir", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_ids.npy"), ids[:, :, 1:])
    # The session runtime optimises the graph its own way: float sums may round differently.
    np.testing.assert_allclose(np.load(tmp_path / "out" / "scores.npy"), scores, rtol=1e-6)


def test_saved_model_cli_run_translates_text(exported, reference, sentences, tmp_path):
    """The symbol problem's text signature has core TensorFlow ops only: the CLI runs it."""
    _, _, scores, text = reference
    result = _cli(
        *SAVED_MODEL_CLI, "run", "--dir", exported.text_dir, "--tag_set", "serve",
        "--signature_def", "serving_default", "--input_exprs", f"sentences={json.dumps(sentences)}",
        "--outdir", str(tmp_path / "out"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    translations = np.load(tmp_path / "out" / "translations.npy", allow_pickle=True)
    assert [t.decode() for t in translations] == text
    np.testing.assert_allclose(np.load(tmp_path / "out" / "scores.npy"), scores[:, 0], rtol=1e-6)


@pytest.mark.slow
def test_decoder_command_gives_the_same_text(fresh, run, sentences, tmp_path):
    source = tmp_path / "input.txt"
    source.write_text("".join(s + "\n" for s in sentences))
    result = _cli(
        sys.executable, "-m", "t2t_lite.decoder", f"--problem={PROBLEM}", f"--output_dir={run}",
        f"--decode_from_file={source}", f"--decode_to_file={tmp_path / 'out.txt'}",
        f"--beam_size={BEAM}", f"--alpha={ALPHA}", "--batch_size=64",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "out.txt").read_text().split("\n")[:-1] == fresh["default"]["translations"]


def _perturbed_checkpoint(run, prefix) -> str:
    """The run's model with noise added to every weight, saved as a checkpoint; its path."""
    trained = load_trained_model(PROBLEM, "", run)
    rng = np.random.default_rng(5)
    for variable in trained.model.weights:
        value = np.asarray(variable)
        variable.assign(value + rng.normal(0.0, 0.3, value.shape).astype(value.dtype))
    return tf.train.Checkpoint(model=trained.model).save(prefix)


@pytest.mark.slow
def test_exporter_command_writes_the_next_version(exported, run, reference, sentences, tmp_path):
    """Version 2 comes from --checkpoint_path, not from the run's newest checkpoint."""
    base = os.path.dirname(os.path.dirname(exported.text_dir))
    checkpoint = _perturbed_checkpoint(run, str(tmp_path / "other" / "ckpt"))
    result = _cli(
        sys.executable, "-m", "t2t_lite.exporter", f"--problem={PROBLEM}", f"--output_dir={run}",
        f"--export_dir={base}", "--model_name=rev", "--beam_size=2", "--beam_sizes=2",
        "--ids_model_name=", f"--checkpoint_path={checkpoint}",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    text_dir = os.path.join(base, "rev", "2")
    assert f"exported version 2: {text_dir}" in result.stdout
    assert sorted(os.listdir(os.path.join(base, "rev"))) == ["1", "2"]
    assert sorted(os.listdir(os.path.join(base, "rev_ids"))) == ["1"]
    assert json.load(open(os.path.join(text_dir, METADATA_FILE)))["checkpoint"] == checkpoint
    _, _, scores, text = _search(run, sentences, BEAM, ALPHA, checkpoint_path=checkpoint)
    outputs = tf.saved_model.load(text_dir).signatures["serving_default"](
        sentences=tf.constant(sentences)
    )
    assert [t.decode() for t in outputs["translations"].numpy()] == text != reference[3]
    np.testing.assert_array_equal(outputs["scores"].numpy(), scores[:, 0])


def test_exporter_command_errors_are_one_clear_line(tmp_path):
    result = _cli(
        sys.executable, "-m", "t2t_lite.exporter", f"--problem={PROBLEM}",
        f"--output_dir={tmp_path}", f"--export_dir={tmp_path / 'e'}", "--model_name=rev",
        "--hparams_set=transformer_tiny",
    )  # fmt: skip
    assert result.returncode != 0
    assert f"no checkpoint in {tmp_path}" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.slow
def test_model_trained_under_mirrored_strategy_exports_the_same(tmp_path, sentences):
    # Trained by the command in a process of its own, as a user would run it: one
    # MirroredStrategy per process, over two logical CPU devices. One layer a side, which
    # traces and exports faster; what is compared does not depend on depth.
    run = str(tmp_path / "mirrored")
    command = [
        sys.executable,
        "-m",
        "t2t_lite.trainer",
        f"--problem={PROBLEM}",
        f"--hparams={TINY},num_encoder_layers=1,num_decoder_layers=1",
        f"--output_dir={run}",
        "--train_steps=20",
        "--save_every=20",
        "--eval_every=20",
        "--eval_steps=1",
        "--strategy=mirrored",
        "--cpu_replicas=2",
    ]
    result = warm_python.run(
        command,
        capture_output=True,
        text=True,
        timeout=600,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    assert result.returncode == 0, result.stderr[-3000:]
    manifest = json.load(open(os.path.join(run, "manifest.json")))
    assert manifest["replicas"] == 2
    result = export_from_run(PROBLEM, "", run, str(tmp_path / "export"), "rev",
                             beam_size=BEAM, alpha=ALPHA, beam_sizes=(BEAM,),
                             ids_model_name="")  # fmt: skip
    input_ids, ids, scores, text = _search(run, sentences, BEAM, ALPHA)
    reloaded = tf.saved_model.load(result.text_dir)
    outputs = reloaded.signatures["serving_default"](sentences=tf.constant(sentences))
    assert [t.decode() for t in outputs["translations"].numpy()] == text
    np.testing.assert_array_equal(outputs["scores"].numpy(), scores[:, 0])
    outputs = reloaded.signatures["translate_ids"](input_ids=tf.constant(input_ids))
    np.testing.assert_array_equal(outputs["output_ids"].numpy(), ids[:, :, 1:])


@pytest.mark.parametrize(
    "text", ["3 1 4 1 5", "", "  0   9 ", "7", "0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0 0"]
)
def test_symbol_codec_matches_the_python_encoder(text):
    encoder, codec = SymbolEncoder(10), SymbolCodec(10)
    ids = codec.tokenize(tf.constant([text])).to_list()[0]
    assert ids == encoder.encode(text) + [1]
    padded = tf.constant([ids + [0, 0]])
    assert codec.detokenize(padded).numpy().tolist() == [encoder.decode(ids).encode()]
    assert codec.detokenize(tf.constant([[5, 1, 7, 7]])).numpy().tolist() == [b"3"]  # EOS ends


def test_codec_for_refuses_encoders_without_an_in_graph_twin():
    with pytest.raises(ValueError, match="has no in-graph version"):
        codec_for(object(), "some_problem")


def test_search_options_follow_the_problem_and_the_paper():
    problem, hp = problems.get("multi30k_ende"), hparams.get("transformer_base")
    options = SearchConfig.for_problem(problem, hp)
    assert (options.beam_size, options.alpha, options.extra_length) == (4, 0.6, 50)
    assert options.beam_sizes == (1, 2, 4)
    # Output positions run to S + extra_length - 1 < max_position, so S <= 1024 - 50.
    assert options.max_input_length == 1024 - 50
    wide = SearchConfig.for_problem(problem, hp, beam_size=21, alpha=0.3)
    assert wide.beam_sizes == (1, 2, 4, 8, 16, 21)
    parsing = SearchConfig.for_problem(problems.get("wsj_parsing"), hp)
    assert (parsing.beam_size, parsing.alpha, parsing.extra_length) == (21, 0.3, 300)
    assert SearchConfig.for_problem(problem, hp, beam_sizes=(2, 8)).beam_sizes == (2, 4, 8)
    with pytest.raises(SearchConfigError, match="--alpha must be >= 0"):
        SearchConfig.for_problem(problem, hp, alpha=-1.0)
    with pytest.raises(SearchConfigError, match="lower --extra_length"):
        SearchConfig.for_problem(problem, hp, extra_length=1100)
    with pytest.raises(SearchConfigError, match="--beam_sizes must all be >= 1"):
        SearchConfig.for_problem(problem, hp, beam_sizes=(0, 2))


# Reloads a text SavedModel in a new process and translates the sentences given.
FRESH_TRANSLATE = r"""
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops)

args = json.loads(sys.argv[1])
outputs = tf.saved_model.load(args["text_dir"]).signatures["serving_default"](
    sentences=tf.constant(args["sentences"]))
print(json.dumps({"translations": [t.decode() for t in outputs["translations"].numpy()],
                  "scores": outputs["scores"].numpy().tolist()}))
"""


def _op_types(saved_model_dir) -> set:
    proto = saved_model_pb2.SavedModel()
    proto.ParseFromString(open(os.path.join(saved_model_dir, "saved_model.pb"), "rb").read())
    graph = proto.meta_graphs[0].graph_def
    types = {node.op for node in graph.node}
    for function in graph.library.function:
        types |= {node.op for node in function.node_def}
    return types


@pytest.mark.slow
def test_multi30k_sentencepiece_export_equals_the_decoder(tmp_path, shared_data):
    """Real English sentences, tokenized and detokenized by SentencePiece inside the graph.

    The model is one update away from its random initialisation (learning rate ~0): a
    briefly trained model says the same few words, or nothing, for every sentence, while
    this one gives each sentence its own long output (the input + 50 subwords of 1,000),
    so every search step, the length limits and detokenization are compared.
    """
    data_dir = str(tmp_path / "data")
    problem = problems.get("multi30k_ende")
    problem.generate_data(data_dir, str(shared_data / "multi30k"), vocab_size=1000)
    config = trainer.RunConfig(
        problem="multi30k_ende", data_dir=data_dir, output_dir=str(tmp_path / "run"),
        train_steps=1, eval_steps=1, eval_every=1, save_every=1, log_every=1,
        eval_bleu_sentences=0,
    )  # fmt: skip
    hp = hparams.override(_hp(), "learning_rate=1e-9")
    trainer.train_and_evaluate(config, hp, printer=lambda line: None)
    result = export_from_run(
        "multi30k_ende", data_dir, config.output_dir, str(tmp_path / "export"), "ende",
        beam_size=2, beam_sizes=(2,),
    )  # fmt: skip
    with gzip.open(shared_data / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        sentences = [next(f).rstrip("\n") for _ in range(12)]
    source = tmp_path / "val.en"
    source.write_text("".join(s + "\n" for s in sentences), encoding="utf-8")
    command = _cli(
        sys.executable, "-m", "t2t_lite.decoder", "--problem=multi30k_ende",
        f"--data_dir={data_dir}", f"--output_dir={config.output_dir}",
        f"--decode_from_file={source}", f"--decode_to_file={tmp_path / 'val.de'}",
        "--beam_size=2", "--batch_size=5",
    )  # fmt: skip
    assert command.returncode == 0, command.stderr[-3000:]
    expected = (tmp_path / "val.de").read_text(encoding="utf-8").split("\n")[:-1]
    assert len(expected) == len(sentences)
    assert len(set(expected)) == len(sentences)
    assert sum(len(line) > 20 for line in expected) >= 10, expected

    args = json.dumps({"text_dir": result.text_dir, "sentences": sentences})
    fresh = _cli(sys.executable, "-c", FRESH_TRANSLATE, args)
    assert fresh.returncode == 0, fresh.stderr[-3000:]
    got = json.loads(fresh.stdout.strip().splitlines()[-1])
    assert got["translations"] == expected

    assert any(op.startswith("Sentencepiece") for op in _op_types(result.text_dir))
    assert not any(op.startswith("Sentencepiece") for op in _op_types(result.ids_dir))
    encoder = problem.encoders(data_dir)["inputs"]
    input_ids = pad_batch([encoder.encode(s) for s in sentences])
    np.save(tmp_path / "input_ids.npy", input_ids)
    run = _cli(
        *SAVED_MODEL_CLI, "run", "--dir", result.ids_dir, "--tag_set", "serve",
        "--signature_def", "serving_default", "--inputs", f"input_ids={tmp_path / 'input_ids.npy'}",
        "--outdir", str(tmp_path / "out"),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    trained = load_trained_model("multi30k_ende", data_dir, config.output_dir)
    translator = Translator(trained.model, SearchConfig.for_problem(problem, beam_size=2))
    ids, _ = translator.search(input_ids)
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "output_ids.npy"), ids[:, :, 1:])

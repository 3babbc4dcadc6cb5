"""Attention pictures: the probabilities drawn are the model's, the files and images are sound.

The probabilities are recomputed here from each attention layer's own projection weights,
softmax(Q K^T / sqrt(Dh) + mask) in float64 numpy, on the states the model's ordinary
(picture-free) forward pass feeds that layer, and compared with what
`attention_maps.attention_probabilities` returns through the layers' `return_attention` path.
"""

import glob
import gzip
import os
import shutil
import subprocess
import sys
import tempfile

import matplotlib.image
import numpy as np
import pytest
import tensorflow as tf
import warm_python
from test_decoding_model import random_inputs, random_model, trained_reverse_run

from t2t_lite import hparams
from t2t_lite.layers.attention import MultiHeadAttention
from t2t_lite.models import attention_maps, shift_targets_right
from t2t_lite.runs import load_trained_model
from t2t_lite.training import attention_images, trainer

TINY = "hidden_size=32,filter_size=64,num_heads=2,batch_size=256,max_length=16"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    return load_trained_model("algorithmic_reverse", "", str(trained_reverse_run(tmp_path_factory)))


def _projection(dense, x):
    """An EinsumDense "btd,dhk->bthk" recomputed from its weights: [B, T, H, Dh]."""
    kernel, bias = (np.asarray(w, np.float64) for w in (dense.kernel, dense.bias))
    return np.einsum("btd,dhk->bthk", np.asarray(x, np.float64), kernel) + bias


def expected_probabilities(layer, query, memory, allowed):
    """softmax(Q K^T / sqrt(Dh)) over the allowed keys, from `layer`'s weights: [B, H, Tq, Tk]."""
    q = _projection(layer.query_dense, query)
    k = _projection(layer.key_dense, memory)
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) / np.sqrt(layer.head_size)
    logits = np.where(np.asarray(allowed)[:, None], logits, -np.inf)
    weights = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return weights / weights.sum(axis=-1, keepdims=True)


def recomputed(model, inputs, targets):
    """Every layer's probabilities from the plain forward pass and the layers' weights."""
    pre_norm = model.normalize_first
    embedding = model.token_embedding
    key_mask = np.asarray(inputs) != 0  # [B, S]
    batch, source_length = key_mask.shape
    encoder_mask = np.broadcast_to(key_mask[:, None, :], (batch, source_length, source_length))
    x = embedding(tf.constant(inputs))
    x = x + model.position_embedding(x, start_index=0)
    found = {kind: [] for kind in attention_maps.KINDS}
    for layer in model.encoder_layers:
        h = layer.self_attention_layer_norm(x) if pre_norm else x
        found["encoder"].append(expected_probabilities(layer.self_attention, h, h, encoder_mask))
        x = layer(x, attention_mask=tf.constant(encoder_mask))
    encoder_output, _ = model.encode(tf.constant(inputs))
    length = np.shape(targets)[1]
    causal = np.tril(np.ones((1, length, length), bool))
    cross_mask = np.broadcast_to(key_mask[:, None, :], (batch, length, source_length))
    decoder_input = shift_targets_right(tf.constant(targets))
    y = embedding(decoder_input)
    y = y + model.position_embedding(y, start_index=0)
    for layer in model.decoder_layers:
        h = layer.self_attention_layer_norm(y) if pre_norm else y
        found["decoder"].append(expected_probabilities(layer.self_attention, h, h, causal))
        after = y + layer.self_attention(h, attention_mask=tf.constant(causal))
        after = after if pre_norm else layer.self_attention_layer_norm(after)
        h = layer.cross_attention_layer_norm(after) if pre_norm else after
        found["encoder_decoder"].append(
            expected_probabilities(layer.cross_attention, h, encoder_output, cross_mask)
        )
        y = layer(y, encoder_output=encoder_output, cross_attention_mask=tf.constant(cross_mask))
    return found


def _pair(rng, vocab_size):
    # Two sentences of different lengths on each side, so that each batch has padding.
    return random_inputs(rng, vocab_size, [7, 3]), random_inputs(rng, vocab_size, [4, 8])


@pytest.mark.parametrize("which", ["trained pre-norm", "random post-norm", "keras kernels"])
def test_probabilities_are_the_softmax_of_each_layers_own_projections(which, trained):
    # The trained run and the first random model compute with the CPU kernel set ("auto"
    # on a CPU), the last one with the plain Keras layers.
    if which == "trained pre-norm":
        model = trained.model
        assert model.normalize_first and model.kernels == "cpu"
    else:
        overrides = TINY + (",kernels=keras" if which == "keras kernels" else "")
        model = random_model(vocab_size=13, seed=3, overrides=overrides)
        assert not model.normalize_first
        assert model.kernels == ("keras" if which == "keras kernels" else "cpu")
    inputs, targets = _pair(np.random.default_rng(5), 12)
    got = attention_maps.attention_probabilities(model, inputs, targets)
    expected = recomputed(model, inputs, targets)
    heads = model.num_heads
    assert [len(got[kind]) for kind in attention_maps.KINDS] == [
        model.num_encoder_layers, model.num_decoder_layers, model.num_decoder_layers
    ]  # fmt: skip
    shapes = {"encoder": (2, heads, 8, 8), "decoder": (2, heads, 9, 9)}
    shapes["encoder_decoder"] = (2, heads, 9, 8)
    for kind in attention_maps.KINDS:
        for layer, (probabilities, reference) in enumerate(zip(got[kind], expected[kind])):
            assert probabilities.shape == shapes[kind], (kind, layer)
            assert probabilities.dtype == np.float32
            np.testing.assert_allclose(probabilities, reference, atol=2e-6, err_msg=kind)
            np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-6)
    # Masked keys get exactly 0: the source's padding (sentence 2 has 3 tokens + EOS)...
    for kind in ("encoder", "encoder_decoder"):
        for probabilities in got[kind]:
            assert (probabilities[1, :, :, 4:] == 0.0).all(), kind
    # ... and the future in the decoder: the upper triangle, diagonal excluded.
    upper = np.triu(np.ones((9, 9), bool), k=1)
    for probabilities in got["decoder"]:
        assert (probabilities[:, :, upper] == 0.0).all()
    if which != "trained pre-norm":  # no key the mask allows is 0 (a trained one may be)
        assert all((p[1, :, :, :4] > 0).all() for p in got["encoder"] + got["encoder_decoder"])
        assert all((p[:, :, ~upper] > 0).all() for p in got["decoder"])


def test_the_picture_path_leaves_the_model_output_unchanged(trained):
    model = trained.model
    inputs, targets = _pair(np.random.default_rng(6), 12)
    plain = model({"inputs": tf.constant(inputs), "targets": tf.constant(targets)}).numpy()
    encoder_output, encoder_mask, _ = model.encode(tf.constant(inputs), return_attention=True)
    logits, _ = model.decode(
        shift_targets_right(tf.constant(targets)), encoder_output, encoder_mask,
        return_attention=True,
    )  # fmt: skip
    np.testing.assert_array_equal(logits.numpy(), plain)


def test_a_cached_step_does_not_return_probabilities():
    layer = MultiHeadAttention(2, 8)
    layer.build((1, 1, 8))
    empty = {"key": tf.zeros((1, 4, 2, 4)), "value": tf.zeros((1, 4, 2, 4))}
    with pytest.raises(ValueError, match="return_attention is for full calls"):
        layer(tf.zeros((1, 1, 8)), cache=empty, cache_index=0, return_attention=True)


def _tick_texts(labels) -> list:
    return [label.get_text() for label in labels]


def test_each_figure_draws_the_heads_average_and_every_head_with_piece_labels(trained):
    model, encoder = trained.model, trained.problem.encoders("")["inputs"]
    source, target = encoder.encode("3 1 4 1 5 9 2 6"), encoder.encode("6 2 9 5 1 4 1 3")
    attention = attention_maps.sentence_attention(model, source, target)
    source_labels = attention_maps.token_labels(encoder, attention.source_ids)
    target_labels = attention_maps.token_labels(encoder, attention.target_ids)
    assert source_labels == "3 1 4 1 5 9 2 6 </s>".split()
    assert target_labels == "6 2 9 5 1 4 1 3 </s>".split()
    batch = attention_maps.attention_probabilities(
        model, [attention.source_ids], [attention.target_ids]
    )
    heads = model.num_heads  # 4: panels in a 2 x 3 grid, the sixth slot empty
    layers = model.num_encoder_layers
    assert layers == model.num_decoder_layers
    rows_and_columns = {
        "encoder": (source_labels, source_labels),
        "decoder": (target_labels, ["<s>", *target_labels[:-1]]),
        "encoder_decoder": (target_labels, source_labels),
    }
    for kind, (row_labels, column_labels) in rows_and_columns.items():
        for layer in range(layers):
            figure = attention_maps.layer_figure(
                attention, kind, layer, source_labels, target_labels
            )
            panels, colour_bar = figure.axes[: heads + 1], figure.axes[-1]
            drawn = [np.asarray(ax.images[0].get_array()) for ax in panels]
            probabilities = batch[kind][layer][0]  # [H, Tq, Tk]
            np.testing.assert_array_equal(drawn[0], probabilities.mean(axis=0))
            for head in range(heads):
                np.testing.assert_array_equal(drawn[head + 1], probabilities[head])
            assert [ax.get_title() for ax in panels] == ["average of heads"] + [
                f"head {h + 1}" for h in range(heads)
            ]
            title = f"{attention_maps.TITLES[kind]}, layer {layer + 1} of {layers}"
            assert figure.get_suptitle() == title
            assert panels[0].images[0].get_clim() == (0.0, 1.0)
            assert colour_bar.get_ylabel() == "attention probability"
            # Rows labelled on the left column, columns under the lowest panel of each.
            assert _tick_texts(panels[0].get_yticklabels()) == row_labels
            assert _tick_texts(panels[3].get_yticklabels()) == row_labels
            for lowest in (2, 3, 4):
                assert _tick_texts(panels[lowest].get_xticklabels()) == column_labels
            assert set(_tick_texts(panels[0].get_xticklabels())) == {""}
    # The trained model reverses: reading target piece t, the last layer looks at source
    # piece S - 2 - t (EOS is S - 1), in most rows at least.
    last = attention.maps["encoder_decoder"][-1].mean(axis=0)[:-1]  # [T - 1, S]
    aligned = np.argmax(last, axis=1) == np.arange(7, -1, -1)
    assert aligned.sum() >= 6, np.argmax(last, axis=1)


def test_the_command_writes_pngs_of_the_expected_size_and_the_arrays_drawn(trained, tmp_path):
    (tmp_path / "sources.txt").write_text("1 2\n3 1 4 1 5 9\n")
    run = os.path.dirname(trained.checkpoint_path)
    image_dir = tmp_path / "images"
    result = warm_python.run(
        [sys.executable, "-m", "t2t_lite.attention", "--problem=algorithmic_reverse",
         f"--output_dir={run}", f"--from_file={tmp_path / 'sources.txt'}", "--line=2",
         f"--image_dir={image_dir}", "--dpi=80"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[:3] == [
        f"attention of {trained.checkpoint_path}",
        "source: 3 1 4 1 5 9 </s>",
        "target (the model's beam output): 9 5 1 4 1 3 </s>",
    ]
    layers = range(1, trained.model.num_decoder_layers + 1)
    names = [f"{kind}_layer{n}.png" for kind in attention_maps.KINDS for n in layers]
    assert lines[3:] == [str(image_dir / name) for name in names + ["attention.npz"]]
    # The arrays drawn are the in-process model's probabilities for the same pair.
    encoder = trained.problem.encoders("")["inputs"]
    source, target = encoder.encode("3 1 4 1 5 9"), encoder.encode("9 5 1 4 1 3")
    attention = attention_maps.sentence_attention(trained.model, source, target)
    saved = np.load(image_dir / "attention.npz")
    assert list(saved["source_labels"]) == "3 1 4 1 5 9 </s>".split()
    for kind in attention_maps.KINDS:
        for layer in range(len(layers)):
            np.testing.assert_allclose(
                saved[f"{kind}_layer{layer + 1}"], attention.maps[kind][layer], atol=1e-6
            )
    # Every PNG decodes, at the figure size in inches times 80 dots per inch.
    sides = [[str(label) for label in saved[f"{side}_labels"]] for side in ("source", "target")]
    for kind in attention_maps.KINDS:
        rows, columns, _, _ = attention_maps.axis_labels(kind, *sides)
        width, height = attention_maps.figure_size(trained.model.num_heads + 1, rows, columns)
        for layer in layers:
            pixels = matplotlib.image.imread(image_dir / f"{kind}_layer{layer}.png")
            assert pixels.shape == (round(height * 80), round(width * 80), 4), (kind, layer)
            assert pixels[..., :3].std() > 0.1, (kind, layer)  # not a blank picture


def _attention_command(*args, cwd=None, timeout=300):
    return warm_python.run(
        [sys.executable, "-m", "t2t_lite.attention", "--problem=algorithmic_reverse", *args],
        capture_output=True, text=True, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def test_a_sentence_with_greedy_output_goes_to_the_runs_attention_folder(trained, tmp_path):
    # A copy of the shared run, so that RUN/attention is not written into it.
    run = tmp_path / "run"
    shutil.copytree(os.path.dirname(trained.checkpoint_path), run)
    result = _attention_command(f"--output_dir={run}", "--sentence=2 7 1", "--method=greedy")
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert lines[1:3] == ["source: 2 7 1 </s>", "target (the model's greedy output): 1 7 2 </s>"]
    layers = range(1, trained.model.num_decoder_layers + 1)
    names = [f"{kind}_layer{n}.png" for kind in attention_maps.KINDS for n in layers]
    assert lines[3:] == [str(run / "attention" / name) for name in names + ["attention.npz"]]
    for name in names:
        assert matplotlib.image.imread(run / "attention" / name).shape[2] == 4


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sentence=1 2", "--from_file=x.txt"], "pass exactly one of --sentence and --from_file"),
        (["--from_file=lines.txt", "--line=3"], "lines.txt has 2 lines, no line 3"),
        (["--sentence=   "], "--sentence is empty; give a sentence"),
        # transformer_tiny has max_position 1024: 1023 tokens and EOS.
        (["--sentence=1 2", "--target=" + " 3" * 1024], "--target has 1024 tokens; the model "
         "has positions for 1023 and EOS"),
    ],
)  # fmt: skip
def test_bad_sentences_and_lines_are_refused_with_a_message(args, message, trained, tmp_path):
    (tmp_path / "lines.txt").write_text("1 2\n3 4\n")
    run = os.path.dirname(trained.checkpoint_path)
    result = _attention_command(
        f"--output_dir={run}", f"--image_dir={tmp_path / 'images'}", *args, cwd=tmp_path,
        timeout=120,
    )  # fmt: skip
    assert result.returncode != 0
    assert message in result.stderr, result.stderr[-2000:]
    assert not (tmp_path / "images").exists()


def _attention_images(folder) -> dict:
    """{tag: {step: decoded RGB(A) image}} of the eval/attention/ images in `folder`."""
    found = {}
    for path in glob.glob(os.path.join(folder, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag.startswith("eval/attention/"):
                    width, height, png = tf.make_ndarray(value.tensor)
                    pixels = tf.io.decode_png(png).numpy()
                    assert pixels.shape[:2] == (int(height), int(width))
                    found.setdefault(value.tag, {})[event.step] = pixels
    return found


def test_mirrored_training_writes_the_attention_image_at_every_evaluation(tmp_path):
    # Two replicas (MirroredStrategy over conftest's two logical CPUs), evaluations at 1, 2.
    hp = hparams.override(hparams.get("transformer_tiny"), TINY)
    config = trainer.RunConfig(
        problem="algorithmic_reverse", output_dir=str(tmp_path), train_steps=2, eval_steps=1,
        eval_every=1, save_every=2, log_every=2, cpu_replicas=2,
    )  # fmt: skip
    lines = []
    trainer.train_and_evaluate(config, hp, printer=lines.append)
    assert not [line for line in lines if "no attention image" in line], lines
    images = _attention_images(tmp_path / "eval")
    assert sorted(images) == [
        "eval/attention/encoder_decoder_last_layer", "eval/attention/encoder_decoder_layers"
    ]  # fmt: skip
    assert sorted(images["eval/attention/encoder_decoder_last_layer"]) == [1, 2]
    assert sorted(images["eval/attention/encoder_decoder_layers"]) == [1, 2]
    # The step-2 image is the picture of the step-2 checkpoint's attention on the first dev
    # example, teacher-forced on its reference.
    restored = load_trained_model("algorithmic_reverse", "", str(tmp_path))
    example = attention_images.attention_example(restored.problem, "", restored.model.max_position)
    first = next(restored.problem.examples("dev", "").as_numpy_iterator())
    keep = attention_images.ATTENTION_TOKENS
    assert example["source_ids"] == [int(i) for i in first["inputs"][:-1]][:keep]
    assert example["target_ids"] == [int(i) for i in first["targets"][:-1]][:keep]
    attention = attention_maps.sentence_attention(
        restored.model, example["source_ids"], example["target_ids"]
    )
    figures = attention_maps.summary_figures(
        attention, example["source_labels"], example["target_labels"]
    )
    for name, figure in figures.items():
        expected = attention_maps.figure_pixels(figure).astype(int)
        logged = images[f"eval/attention/{name}"][2][..., :3].astype(int)
        assert logged.shape == expected.shape, name
        # The same picture; a probability that moved by float rounding between the
        # replicated and the restored model may change a cell's colour by a few levels.
        assert np.mean(np.abs(logged - expected)) < 0.05, name
    assert (
        images["eval/attention/encoder_decoder_layers"][2].shape[1]
        > (images["eval/attention/encoder_decoder_last_layer"][2].shape[1])
    )


def _peak_rss_of_command(args: list, limit: int, timeout: float = 300):
    """(return code, stderr, peak resident bytes) of `python -m t2t_lite.attention args`.

    The command is killed as soon as its resident memory passes `limit` bytes (the code is
    then -9): what it would reach unchecked is what the test guards against, and must not
    take the machine's memory meanwhile. The peak is the kernel's high-water mark of the
    command's own memory (VmHWM, which starts afresh at exec), read while it runs. The
    child's ru_maxrss would not do: it starts at the forking test process's size.
    """
    import time

    command = [sys.executable, "-m", "t2t_lite.attention", "--problem=algorithmic_reverse", *args]
    peak = 0
    with open(os.devnull, "w") as null, tempfile.TemporaryFile("w+") as errors:
        child = subprocess.Popen(command, stdout=null, stderr=errors, text=True)
        deadline = time.monotonic() + timeout
        while child.poll() is None:
            resident, high_water = _memory_of(child.pid)
            peak = max(peak, high_water)
            if resident > limit or time.monotonic() > deadline:
                child.kill()
            time.sleep(0.05)  # a watchdog's sampling period, not a synchronisation
        errors.seek(0)
        return child.returncode, errors.read(), peak


def _memory_of(pid: int) -> tuple:
    """(VmRSS, VmHWM) of a running process in bytes; zeros once it has exited."""
    values = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    values[key] = int(rest.split()[0]) * 1024
    except (FileNotFoundError, ProcessLookupError):  # it has just exited
        pass
    return values.get("VmRSS", 0), values.get("VmHWM", 0)


MEMORY_BOUND = 1536 * 2**20  # loading TensorFlow and the run takes about 0.6 GiB


@pytest.mark.parametrize("side", ["source", "target"])
def test_a_sentence_too_long_to_draw_is_refused_with_bounded_memory(trained, tmp_path, side):
    # 967 pieces: under the model's 1,023 positions, but a 968 x 968 cell picture per head.
    long = " ".join(str(i % 10) for i in range(967))
    args = ["--sentence=" + long] if side == "source" else ["--sentence=1 2", "--target=" + long]
    run = os.path.dirname(trained.checkpoint_path)
    code, stderr, peak = _peak_rss_of_command(
        [f"--output_dir={run}", f"--image_dir={tmp_path / 'images'}", *args], MEMORY_BOUND
    )
    assert peak <= MEMORY_BOUND, f"peak resident memory {peak / 2**20:.0f} MiB"
    assert code == 1, stderr[-2000:]
    last = stderr.strip().splitlines()[-1]
    kind = "encoder self-attention" if side == "source" else "decoder self-attention"
    assert last.startswith(f"t2t_lite.attention: the {kind} picture would be "), last
    panels = trained.model.num_heads + 1
    assert (
        f" pixels (968 x 968 pieces, {panels} panels, --dpi=100), more than the 40,000,000 "
        f"this command draws; give a {side} of at most "
    ) in last, last
    assert last.endswith(" pieces (and EOS), or lower --dpi"), last
    assert not (tmp_path / "images").exists()
    # The length it names fits, one more piece does not.
    fits = int(last.split("at most ")[1].split()[0])
    labels = [str(i % 10) for i in range(fits)] + ["</s>"]
    source, target = (labels, ["1", "</s>"]) if side == "source" else (["1", "2", "</s>"], labels)
    kind = attention_maps.ENCODER if side == "source" else attention_maps.DECODER
    heads = trained.model.num_heads
    attention_maps.check_drawable(kind, source, target, heads)
    longer = ["0", *labels]
    with pytest.raises(ValueError, match="more than the 40,000,000"):
        if side == "source":
            attention_maps.check_drawable(kind, longer, target, heads)
        else:
            attention_maps.check_drawable(kind, source, longer, heads)


def test_blank_sentences_are_refused_before_a_sentencepiece_vocabulary_makes_pieces_of_them(
    shared_data, tmp_path
):
    from t2t_lite import attention
    from t2t_lite.problems.vocab import SentencePieceEncoder, train_sentencepiece

    with gzip.open(shared_data / "multi30k" / "train.en.gz", "rt", encoding="utf-8") as f:
        lines = [line.rstrip("\n") for _, line in zip(range(400), f)]
    encoder = SentencePieceEncoder(
        train_sentencepiece(lines, str(tmp_path / "vocab.model"), 400, num_threads=1)
    )
    for blank in ("   ", "\t", " \u00a0 ", "\u3000", "\x00\x00"):
        assert encoder.encode(blank), repr(blank)  # pieces of spaces, tabs, NULs
        with pytest.raises(ValueError) as error:
            attention._encode(encoder, blank, "--sentence", 1024)
        assert str(error.value) == "--sentence is empty; give a sentence to draw the attention of"
    assert attention._encode(encoder, " A dog. ", "--sentence", 1024) == encoder.encode(" A dog. ")

"""tools/benchmark_train.py: its FLOP count for the paper's base model, and a tiny run's table.

The FLOP count is checked against a count built here from the paper's layer structure
(section 3): the encoder's weights meet every source token, the decoder's and the tied
embedding / pre-softmax projection meet every target token, 2 FLOPs per multiply-add and
3 passes (forward, and backward for inputs and weights), plus the QK^T and AV products of
every attention block.
"""

import re
import sys
from pathlib import Path

import pytest
import warm_python
from conftest import load_tool

from t2t_lite import hparams
from t2t_lite.models import build_transformer

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_train.py"


def load_script():
    return load_tool("benchmark_train")


def assert_rate_matches_step_time(row, tokens):
    """The row's tok/s x s/step is the step's tokens, up to the rounding of both figures.

    s/step is printed to 3 decimals (off by up to 0.0005 s), tok/s to a whole number (off
    by up to 0.5 tok/s): their product is off by up to 0.0005 x tok/s + 0.5 x s/step, plus
    the product of the two errors.
    """
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    seconds, tokens_per_second = float(cells[2]), float(cells[4].replace(",", ""))
    assert seconds > 0
    bound = 0.5 * seconds + 0.0005 * tokens_per_second + 0.00025
    assert tokens_per_second * seconds == pytest.approx(tokens, abs=bound)
    return cells


def test_model_flops_of_transformer_base_from_the_paper_structure():
    script = load_script()
    hp = hparams.get("transformer_base")
    d, d_ff, n, vocab = 512, 2048, 6, 37000
    attention = 4 * (d * d + d)
    feed_forward = 2 * d * d_ff + d_ff + d
    encoder = n * (attention + feed_forward + 2 * 2 * d)
    decoder = n * (2 * attention + feed_forward + 3 * 2 * d)
    assert vocab * d + encoder + decoder == 63_082_496
    model = build_transformer(hp, vocab)
    assert sum(layer.count_params() for layer in model.encoder_layers) == encoder
    b, s, t = 128, 32, 32
    by_hand = 6 * (encoder * b * s + (decoder + vocab * d) * b * t)
    by_hand += 3 * 2 * 2 * b * d * (n * s * s + n * t * t + n * t * s)
    flops = script.model_flops(hp, model.count_params(), encoder, script.Shape(b, s, t))
    assert flops == by_hand
    # With source and target lengths apart, cross-attention's key and value projections
    # (2 per decoder layer) meet the source tokens, the rest of the decoder the targets.
    s = 24
    cross_key_value = n * 2 * (d * d + d)
    by_hand = 6 * ((encoder + cross_key_value) * b * s)
    by_hand += 6 * (decoder - cross_key_value + vocab * d) * b * t
    by_hand += 3 * 2 * 2 * b * d * (n * s * s + n * t * t + n * t * s)
    assert script.model_flops(hp, model.count_params(), encoder, script.Shape(b, s, t)) == by_hand
    s = 32
    assert round(flops / 1e12, 4) == 1.5648  # the figure the script's docstring derives
    # ../shared/BENCHMARKS.md, measured with the peers: "1.563 TFLOP for base here".
    assert flops == pytest.approx(1.563e12, rel=2e-3)


def test_step_products_add_up_to_the_paper_structure_count():
    script = load_script()
    hp = hparams.get("transformer_base")
    d, d_ff, n, vocab, heads = 512, 2048, 6, 37000, 8
    b, s, t = 128, 24, 40  # source and target lengths differ, to tell them apart
    # Weight matrices (section 3): 4 attention projections + 2 FFN layers per encoder
    # layer, 8 + 2 per decoder layer (cross-attention's key and value projections over
    # the source), and the shared embedding as pre-softmax projection.
    encoder = n * (4 * d * d + 2 * d * d_ff)
    decoder = n * (8 * d * d + 2 * d * d_ff)
    cross_key_value = n * 2 * d * d
    by_hand = 6 * ((encoder + cross_key_value) * b * s)
    by_hand += 6 * (decoder - cross_key_value + vocab * d) * b * t
    by_hand += 3 * 2 * 2 * b * d * (n * s * s + n * t * t + n * t * s)
    for replicas in (1, 2):
        products = script.step_products(hp, vocab, script.Shape(b, s, t), replicas)
        assert replicas * sum(p.flops for p in products) == by_hand
        # Three products (forward, input and weight gradient) per weight matrix, six per
        # attention block (QK^T, AV and two gradients of each) over B / replicas x H pairs.
        assert sum(p.count for p in products if not p.batch) == 3 * (n * 6 + n * 10 + 1)
        assert sum(p.count for p in products if p.batch) == 6 * 3 * n
        assert {p.batch for p in products if p.batch} == {b // replicas * heads}
    # What model_flops counts beyond the products: 6 x tokens x the biases and layer
    # norm parameters, which multiply nothing: per encoder layer 4 attention biases, 2
    # FFN biases, 2 layer norms (source tokens); per decoder layer cross-attention's key
    # and value biases (source tokens), 6 more attention biases, 2 FFN biases, 3 layer norms.
    model = build_transformer(hp, vocab)
    encoder_parameters = sum(layer.count_params() for layer in model.encoder_layers)
    flops = script.model_flops(hp, model.count_params(), encoder_parameters, script.Shape(b, s, t))
    source_vectors = n * (4 * d + d_ff + d + 2 * 2 * d) + n * 2 * d
    target_vectors = n * (6 * d + d_ff + d + 3 * 2 * d)
    assert flops - by_hand == 6 * (source_vectors * b * s + target_vectors * b * t)


@pytest.mark.slow
def test_tiny_run_prints_a_row_per_configuration(capsys):
    script = load_script()
    args = script.parse_args(
        [
            "--hparams_set=transformer_tiny",
            "--hparams=hidden_size=32,filter_size=64,num_heads=2",
            "--vocab_size=100", "--sentences=4", "--source_length=8", "--target_length=8",
            "--steps=1", "--warmup=0", "--rounds=1", "--peak_repeats=1",
            "--configs=noxla:float32,xla:float32,noxla:mixed_bfloat16",
        ]
    )  # fmt: skip
    script.run(args)
    out = capsys.readouterr().out
    assert "batch 4 x (8 + 8) = 32 target tokens" in out
    rows = [line for line in out.splitlines() if re.match(r"\| (no)?xla:", line)]
    assert [row.split(" | ")[0] for row in rows] == [
        "| noxla:float32", "| xla:float32", "| noxla:mixed_bfloat16",
    ]  # fmt: skip
    for row in rows:
        cells = assert_rate_matches_step_time(row, 32)
        assert cells[6].endswith("%") and cells[-1].endswith("x")
    # The products timed alone: a row per kind of layer, as many products as the tiny
    # model runs (three per weight matrix, six per attention block), and a total.
    hp = hparams.get("transformer_tiny")
    enc, dec = hp.num_encoder_layers, hp.num_decoder_layers
    groups = re.findall(r"^\| (?:encoder|decoder|cross|pre-softmax)[^|]*\| (\d+) \|", out, re.M)
    assert len(groups) == 12
    assert sum(map(int, groups)) == 3 * (6 * enc + 10 * dec + 1) + 6 * (enc + 2 * dec)
    total = re.search(r"products alone: ([\d.]+) s per step; .* \d+% of the float32 peak", out)
    assert float(total.group(1)) > 0


@pytest.mark.slow
def test_two_cpu_replicas_split_the_sentences_and_count_the_whole_batch():
    # A process of its own: a second mirrored strategy in the test process would reuse
    # the collective numbers of tests/test_distributed.py's strategy.
    command = [
        sys.executable, str(SCRIPT),
        "--hparams_set=transformer_tiny",
        "--hparams=hidden_size=32,filter_size=64,num_heads=2",
        "--vocab_size=100", "--sentences=4", "--source_length=8", "--target_length=8",
        "--steps=1", "--warmup=0", "--rounds=1", "--peak_repeats=1",
        "--configs=noxla:float32", "--cpu_replicas=2", "--product_repeats=0",
    ]  # fmt: skip
    result = warm_python.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    out = result.stdout
    assert "2 replica(s) of 2 sentences" in out
    # The step's token count is summed over replicas: 4 x 8 when each replica takes 2
    # of the 4 sentences (64 if each were fed the whole batch).
    assert "the step counts 32 target tokens over all replicas" in out
    (row,) = [line for line in out.splitlines() if line.startswith("| noxla:float32")]
    assert_rate_matches_step_time(row, 32)
    # The gradients' all-reduce timed alone, both ways, over every trainable weight:
    # 2+2 layers of D 32 (d_ff 64) and a tied 100 x 32 embedding, counted by hand as in
    # test_model_flops_of_transformer_base_from_the_paper_structure.
    d, d_ff = 32, 64
    attention, ffn = 4 * (d * d + d), 2 * d * d_ff + d_ff + d
    weights = 100 * d + 2 * (attention + ffn + 2 * 2 * d) + 2 * (2 * attention + ffn + 3 * 2 * d)
    assert weights == 45_952
    line = re.search(
        r"all-reduce of the step's ([\d,]+) gradient values over 2 replicas, timed alone "
        r"\(median of 1 calls\): ([\d.]+) ms by reduction to one device \(the trainer's\), "
        r"([\d.]+) ms by a ring collective",
        out,
    )
    assert line, out[-2000:]
    assert int(line[1].replace(",", "")) == weights
    assert float(line[2]) > 0 and float(line[3]) > 0


def test_cpu_replicas_that_do_not_divide_the_sentences_are_refused():
    script = load_script()
    args = script.parse_args(["--sentences=5", "--cpu_replicas=2"])
    with pytest.raises(SystemExit, match="--cpu_replicas=2: expected .* divides --sentences=5"):
        script.run(args)


def test_a_configuration_may_name_its_kernel_set():
    script = load_script()
    hp = hparams.override(
        hparams.get("transformer_tiny"), "hidden_size=32,filter_size=64,num_heads=2"
    )
    batch = script.random_batch(100, script.Shape(4, 8, 8), seed=1)
    kernels = {
        config: script.Runner(hp, config, 100, batch).model.kernels
        for config in ("noxla:float32:keras", "noxla:float32:cpu", "noxla:float32")
    }
    # Without one, the hparams' "auto": the CPU kernels on this CPU-only machine.
    assert list(kernels.values()) == ["keras", "cpu", "cpu"]
    with pytest.raises(ValueError, match=r"expected \{xla,noxla\}:POLICY\[:KERNELS\]"):
        script.Runner(hp, "noxla:float32:cpu:extra", 100, batch)

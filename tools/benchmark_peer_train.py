"""t2t_lite's training step side by side with TF Model Garden's, alternating processes.

    python tools/benchmark_peer_train.py --peer_python=PEER/bin/python
        [--rounds=2] [--steps=3] [--warmup=1] [--small]
        [--sentences=128] [--source_length=32] [--target_length=32] [--vocab_size=37000]
        [--peak_repeats=9]

`PEER/bin/python` is an interpreter with TF Model Garden (tf-models-official) and tf-keras,
which t2t_lite's own environment cannot hold (Model Garden builds on Keras 2). For example:

    python -m venv PEER && PEER/bin/pip install tensorflow==2.21.0 tensorflow-text==2.21.1 \\
        tf-keras==2.21.0 tensorflow-datasets tensorflow-hub tensorflow-model-optimization tf-slim \\
        gin-config pyyaml scipy sentencepiece seqeval immutabledict sacrebleu pandas psutil \\
        py-cpuinfo && PEER/bin/pip install --no-deps tf-models-official==2.20.0

(Model Garden 2.20.0 asks for TensorFlow 2.20, hence `--no-deps` and its other requirements
by hand; tensorflow-text 2.21.0's wheel fails to load, 2.21.1 works.)

Every round runs two fresh processes one after the other, t2t_lite first in odd rounds and
the peer first in even ones, so that a change in the machine's load falls on both. Each
process builds its model at the shape of `../shared/BENCHMARKS.md` (transformer_base: 6+6
layers, D 512, d_ff 2048, 8 heads, a shared 37,000-token vocabulary; 128 sentences of 32
source and 32 target tokens, no padding), compiles its training step as a `tf.function`
without XLA in float32, runs `--warmup` untimed steps and `--steps` timed ones, and measures
its own float32 matmul peak as BENCHMARKS.md does (`tf.function` 2048^3 and 4096^3, median
of `--peak_repeats` calls each (9), the better of the two), right before its steps.

The two models are the same size and do the same work per step. Model Garden's
`Seq2SeqTransformer` is built as t2t_lite's transformer_base is: post-norm (`norm_first`
False), biases in every projection, dropout 0.1 on embeddings and sub-layer outputs and none
inside attention or the feed-forward network (Model Garden's own defaults differ: pre-norm,
no biases, dropout everywhere). Its step is the one of Model Garden's translation task:
label-smoothed cross-entropy (0.1) from the task's loss function, normalised by the target
token count, gradients by `tf.GradientTape`, Adam (0.9, 0.98, 1e-9) from tf-keras. t2t_lite's
step is the trainer's `TrainStep`, as `tools/benchmark_train.py` runs it, with glibc's malloc
keeping freed memory as the trainer does; the peer runs with its defaults.

Model FLOPs per step are counted once, by `benchmark_train.model_flops` on t2t_lite's model
(1.5648 TFLOP for transformer_base here), and used for both rows; the table gives each row's
utilisation against the peak its own process measured, and the speed of each against
t2t_lite's as the median over rounds of the ratio of the two step times of a round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SMALL = {"layers": 2, "hidden_size": 256, "filter_size": 1024, "heads": 4}
RESULT = "RESULT "
PEER_HINT = (
    "install it there as the docstring of tools/benchmark_peer_train.py says "
    "(tf-models-official==2.20.0 with --no-deps, tensorflow==2.21.0, tf-keras==2.21.0, "
    "tensorflow-text==2.21.1 and Model Garden's other requirements)"
)


def float32_peak(tf, repeats: int = 9) -> float:
    """FLOP/s of a float32 `tf.function` matmul: the better of 2048^3 and 4096^3,
    each the median of `repeats` calls (after one untimed call)."""
    rates = []
    for size in (2048, 4096):
        a = tf.random.normal((size, size))
        multiply = tf.function(lambda x: tf.matmul(x, x))
        multiply(a).numpy()
        seconds = []
        for _ in range(repeats):
            start = time.perf_counter()
            multiply(a).numpy()
            seconds.append(time.perf_counter() - start)
        rates.append(2.0 * size**3 / statistics.median(seconds))
    return max(rates)


def time_steps(step, warmup: int, steps: int) -> dict:
    """Wall and CPU seconds per step of `steps` calls of `step()` after `warmup` untimed
    ones. Each call returns the loss; reading the last one waits for all the steps."""
    for _ in range(warmup):
        float(step())
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(steps):
        loss = step()
    float(loss)
    return {
        "step_s": (time.perf_counter() - wall) / steps,
        "cpu_step_s": (time.process_time() - cpu) / steps,
    }


def random_ids(args) -> dict:
    """Ids in [2, V) with no padding, the same in both processes (seeded)."""
    import numpy as np

    rng = np.random.default_rng(1)
    return {
        "inputs": rng.integers(2, args.vocab_size, (args.sentences, args.source_length)),
        "targets": rng.integers(2, args.vocab_size, (args.sentences, args.target_length)),
    }


def child_t2t_lite(args) -> dict:
    """t2t_lite's trainer step, as tools/benchmark_train.py builds it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import benchmark_train as bench
    import tensorflow as tf

    import t2t_lite
    from t2t_lite import hparams as hparams_lib
    from t2t_lite.training import host_memory

    host_memory.retain_freed_memory()
    hp = hparams_lib.get("transformer_base")
    if args.small:
        hp = hparams_lib.override(hp, bench.SMALL)
    shape = bench.Shape(args.sentences, args.source_length, args.target_length)
    # Its first call is timed as the first step (tracing and graph optimisation included).
    runner = bench.Runner(hp, "noxla:float32", args.vocab_size, random_ids(args))
    peak = float32_peak(tf, args.peak_repeats)
    timing = time_steps(lambda: runner.step.train(runner.iterator)["loss"], args.warmup, args.steps)
    model = runner.model
    parameters = model.count_params()
    encoder_parameters = sum(layer.count_params() for layer in model.encoder_layers)
    return {
        "implementation": f"t2t_lite {t2t_lite.__version__} (TF {tf.__version__})",
        "parameters": parameters,
        "model_flops": bench.model_flops(hp, parameters, encoder_parameters, shape),
        "peak": peak,
        "first_call_s": runner.compile_seconds,
        **timing,
    }


def child_model_garden(args) -> dict:
    """Model Garden's Seq2SeqTransformer and the step of its translation task."""
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
    try:
        import tensorflow as tf
        import tf_keras
        from official.nlp.modeling import models
        from official.nlp.tasks import translation
    except ImportError as error:
        raise SystemExit(
            f"{sys.executable}: no TF Model Garden here ({error}); {PEER_HINT}"
        ) from None
    from importlib import metadata

    size = (
        SMALL if args.small else {"layers": 6, "hidden_size": 512, "filter_size": 2048, "heads": 8}
    )

    def stack(kind):
        return kind(
            num_layers=size["layers"],
            num_attention_heads=size["heads"],
            intermediate_size=size["filter_size"],
            dropout_rate=0.1,
            attention_dropout_rate=0.0,
            intermediate_dropout=0.0,
            use_bias=True,
            norm_first=False,
        )

    tf_keras.utils.set_random_seed(1)
    model = models.Seq2SeqTransformer(
        vocab_size=args.vocab_size,
        embedding_width=size["hidden_size"],
        dropout_rate=0.1,
        encoder_layer=stack(models.TransformerEncoder),
        decoder_layer=stack(models.TransformerDecoder),
    )
    optimizer = tf_keras.optimizers.Adam(1e-4, beta_1=0.9, beta_2=0.98, epsilon=1e-9)
    spec = tf.TensorSpec([None, None], tf.int64)

    @tf.function(input_signature=[{"inputs": spec, "targets": spec}])
    def step(batch):
        with tf.GradientTape() as tape:
            logits = model(batch, training=True)
            xentropy, weights = translation._padded_cross_entropy_loss(
                logits, batch["targets"], 0.1, args.vocab_size
            )
            loss = tf.reduce_sum(xentropy) / tf.reduce_sum(weights)
        variables = model.trainable_variables
        optimizer.apply_gradients(zip(tape.gradient(loss, variables), variables))
        return loss

    batch = {key: tf.constant(value) for key, value in random_ids(args).items()}
    start = time.perf_counter()
    float(step(batch))
    first_call = time.perf_counter() - start
    peak = float32_peak(tf, args.peak_repeats)
    timing = time_steps(lambda: step(batch), args.warmup, args.steps)
    version = metadata.version("tf-models-official")
    return {
        "implementation": f"TF Model Garden {version} (TF {tf.__version__})",
        "parameters": model.count_params(),
        "peak": peak,
        "first_call_s": first_call,
        **timing,
    }


def run_child(python: str, name: str, args) -> dict:
    """One measurement process; its RESULT line, or SystemExit naming what failed."""
    command = [python, str(Path(__file__).resolve()), f"--child={name}"] + [
        f"--{key}={value}"
        for key, value in vars(args).items()
        if key not in ("child", "peer_python", "rounds", "small")
    ]
    if args.small:
        command.append("--small")
    result = subprocess.run(command, capture_output=True, text=True)
    lines = [line for line in result.stdout.splitlines() if line.startswith(RESULT)]
    if result.returncode or not lines:
        errors = [line for line in result.stderr.splitlines() if line.strip()]
        last = errors[-1] if errors else f"exit code {result.returncode}, no result printed"
        raise SystemExit(f"{name} run with {python} failed: {last}")
    return json.loads(lines[-1][len(RESULT) :])


def print_table(results: dict, flops: float, target_tokens: int) -> None:
    """One row per implementation: medians over rounds, ratios within rounds."""
    ours = results["t2t_lite"]
    print(
        "| implementation | parameters | first call s | s/step (rounds) | target tok/s "
        "| model GFLOP/s | float32 peak GFLOP/s | utilisation | CPU s/step | speed vs t2t_lite |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for rounds in results.values():
        step = statistics.median(r["step_s"] for r in rounds)
        utilisation = statistics.median(flops / r["step_s"] / r["peak"] for r in rounds)
        speed = statistics.median(o["step_s"] / r["step_s"] for o, r in zip(ours, rounds))
        each = ", ".join(f"{r['step_s']:.2f}" for r in rounds)
        print(
            f"| {rounds[0]['implementation']} | {rounds[0]['parameters']:,} "
            f"| {statistics.median(r['first_call_s'] for r in rounds):.1f} "
            f"| {step:.2f} ({each}) "
            f"| {target_tokens / step:,.0f} | {flops / step / 1e9:,.0f} "
            f"| {statistics.median(r['peak'] for r in rounds) / 1e9:,.0f} "
            f"| {utilisation:.0%} | {statistics.median(r['cpu_step_s'] for r in rounds):.2f} "
            f"| {speed:.2f}x |"
        )


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.child:
        child = {"t2t_lite": child_t2t_lite, "model_garden": child_model_garden}[args.child]
        print(RESULT + json.dumps(child(args)), flush=True)
        return
    if not args.peer_python:
        raise SystemExit(f"--peer_python: required, a Python with TF Model Garden; {PEER_HINT}")
    if not os.access(args.peer_python, os.X_OK):
        raise SystemExit(f"--peer_python={args.peer_python}: not an executable file")
    pythons = {"t2t_lite": sys.executable, "model_garden": args.peer_python}
    results = {name: [] for name in pythons}
    print(
        f"{'--small' if args.small else 'transformer_base'} shape, batch {args.sentences} x "
        f"({args.source_length} + {args.target_length}) tokens, vocabulary {args.vocab_size:,}; "
        f"{args.rounds} round(s) of {args.warmup} + {args.steps} steps in each process",
        flush=True,
    )
    for index in range(args.rounds):
        order = list(pythons) if index % 2 == 0 else list(reversed(pythons))
        for name in order:
            result = run_child(pythons[name], name, args)
            results[name].append(result)
            print(
                f"  round {index + 1}/{args.rounds}: {result['implementation']}: "
                f"{result['step_s']:.2f} s/step, peak {result['peak'] / 1e9:.0f} GFLOP/s",
                flush=True,
            )
    flops = results["t2t_lite"][0]["model_flops"]
    print(f"model FLOPs per step {flops / 1e12:.4f} T (t2t_lite's count, used for both rows)")
    print_table(results, flops, args.sentences * args.target_length)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--peer_python", default="", help="a Python with tf-models-official")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per process")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps after the first")
    parser.add_argument(
        "--small", action="store_true", help="2+2 layers, D 256, d_ff 1024, 4 heads"
    )
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--target_length", type=int, default=32)
    parser.add_argument("--vocab_size", type=int, default=37_000)
    parser.add_argument("--peak_repeats", type=int, default=9, help="timed calls per peak product")
    parser.add_argument("--child", choices=("t2t_lite", "model_garden"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("rounds", "steps", "sentences", "source_length", "target_length", "peak_repeats"):
        if getattr(args, name) < 1:
            parser.error(f"--{name}={getattr(args, name)}: expected a positive number")
    if args.vocab_size < 3:
        parser.error(f"--vocab_size={args.vocab_size}: expected at least 3 (0 and 1 are reserved)")
    return args


if __name__ == "__main__":
    main()

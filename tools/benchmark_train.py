"""Training-step throughput and model-FLOPs utilisation of one hparams set.

    python tools/benchmark_train.py [--hparams_set=transformer_base] [--small]
        [--vocab_size=37000] [--sentences=128] [--source_length=32] [--target_length=32]
        [--steps=3] [--warmup=1] [--rounds=2] [--configs=xla:float32,...]
        [--intra_op_threads=N] [--inter_op_threads=N] [--cpu_replicas=N] [--product_repeats=3]

Builds the model and the trainer's own `TrainStep` (Adam, token-normalised gradients)
for every configuration in `--configs` (XLA on/off x float32/mixed_bfloat16, and
optionally the kernel set: `noxla:float32:keras` against `noxla:float32:cpu`; without
it, the hparams' `kernels`, by default "auto", resolved for this machine), feeds
them one fixed batch of random non-padding ids with the unknown [None, None] shapes of
the bucketed pipeline, and prints one row per configuration: compile time (first call
minus one step: tracing and compilation), seconds per step, steps/s, target tokens/s,
achieved model FLOP/s and its share of the matmul peaks.

`--cpu_replicas=N` mirrors every step over N logical CPU devices as the trainer's flag
of that name does (each replica takes 1/N of the sentences; the table counts the whole
batch), so that N single-threaded replicas (`--intra_op_threads=1`) can be compared with
one replica on all threads. The gradients' all-reduce is then also timed alone
(`--peak_repeats` calls), the trainer's reduction to one device beside the ring
collective MirroredStrategy would use on CPUs.

Like the trainer, the script first has glibc's malloc keep freed memory
(`host_memory.retain_freed_memory`); `--malloc_defaults` leaves malloc alone, to measure
that setting's share in a second process.

The peaks are measured in the same run: a `tf.function` float32 matmul of 2048^3 and
4096^3 (the better of the two) and a bfloat16 matmul of 2048^3, median of
`--peak_repeats` calls each, with the step's threads and replicas (with N replicas, N
matmuls at once, counted together). The machine may be shared, so configurations are timed
round-robin (`--rounds` rounds of `--steps` steps, the peaks measured again every
round), each figure is the median over rounds, and ratios between rows are taken under
the same load. Process CPU time is reported too: CPU seconds per step and FLOPs per CPU
second against the peak's FLOPs per CPU second move less than wall time when other
processes take turns on the cores.

After the table, the step's float32 matrix products are timed alone (`step_products`):
every product of the forward and backward pass at the step's shapes and orientations
(TensorFlow's MatMul gradients: dX = dY W^T, dW = X^T dY), each distinct one a median of
`--product_repeats` calls with the step's threads and replicas, times how often the
step runs it, grouped by layer kind with each group's share of the float32 peak. It
shows how fast this CPU's kernels multiply matrices of these shapes, one product at a
time, and what a step would reach that ran its products one after another and nothing
else. The step itself runs independent products side by side on TensorFlow's inter-op
threads, so it can beat that figure; where it falls short, the difference is the work
between the products.

Model FLOPs per step (`model_flops`) count 2 FLOPs per multiply-add, times 3 for
forward + backward:
    6 x parameters x tokens  +  3 x 4 x B x Tq x Tk x D per attention block,
where the encoder's parameters and cross-attention's key and value projections meet each
source token and all others (the rest of the decoder and the tied embedding as pre-softmax
projection; lookups cost nothing) each target token, and
the attention term is the QK^T and AV products of the N encoder self-, N decoder self-
and N cross-attention blocks, counted in full. For transformer_base with a 37,000-token
shared vocabulary (63,082,496 parameters) and 128 x (32 + 32) tokens:
6 x 63,082,496 x 4,096 = 1.5503 TFLOP plus 18 x 3 x 4 x 128 x 32 x 32 x 512 = 0.0145 TFLOP,
1.5648 TFLOP per step. The peers' 1.563 TFLOP lies between this and the count with the
decoder's causal self-attention halved (1.5624); the 0.1% difference is all in the
attention term.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_lite import hparams as hparams_lib  # noqa: E402
from t2t_lite.models import build_transformer  # noqa: E402
from t2t_lite.training import distribute, host_memory  # noqa: E402
from t2t_lite.training.schedule import TransformerSchedule  # noqa: E402
from t2t_lite.training.step import TrainStep, make_optimizer  # noqa: E402

CONFIGS = "xla:float32,noxla:float32,xla:mixed_bfloat16,noxla:mixed_bfloat16"
SMALL = "num_encoder_layers=2,num_decoder_layers=2,hidden_size=256,filter_size=1024,num_heads=4"


@dataclasses.dataclass
class Shape:
    """One training batch: B sentences of S source and T target tokens."""

    sentences: int
    source_length: int
    target_length: int

    @property
    def target_tokens(self) -> int:
        return self.sentences * self.target_length


def model_flops(hp, parameters: int, encoder_parameters: int, shape: Shape) -> float:
    """FLOPs of one forward + backward pass (see the module docstring for the formula).

    Args:
        hp: the HParams (layer counts and D are used).
        parameters: the model's trainable parameter count.
        encoder_parameters: the part of it in the encoder layers (applied per source token).
        shape: the batch shape; source and target lengths may differ.

    Returns:
        6 x parameters x tokens + attention score/context products, in FLOPs.
    """
    b, s, t, d = shape.sentences, shape.source_length, shape.target_length, hp.hidden_size
    # Cross-attention's key and value projections (kernels and biases) read the encoder's output.
    cross_key_value = hp.num_decoder_layers * 2 * (d * d + d)
    source_side = encoder_parameters + cross_key_value
    weights = 6.0 * (source_side * b * s + (parameters - source_side) * b * t)
    # Query-key pairs of the encoder self-, decoder self- and cross-attention blocks.
    pairs = hp.num_encoder_layers * s * s + hp.num_decoder_layers * (t * t + t * s)
    return weights + 3.0 * 4.0 * b * d * pairs


@dataclasses.dataclass(frozen=True)
class Product:
    """`count` products per step of [batch x] (m x k) by (k x n) matrices, as stored.

    `transpose_a` / `transpose_b`: the operand is stored transposed ([k, m] / [n, k]) and
    read through the MatMul attribute of that name, as the step's own products are.
    """

    name: str
    count: int
    m: int
    k: int
    n: int
    transpose_a: bool = False
    transpose_b: bool = False
    batch: int = 0  # 0: plain matrices; else a batched product of `batch` pairs

    @property
    def flops(self) -> float:
        """FLOPs of all `count` products (2 per multiply-add)."""
        return 2.0 * max(self.batch, 1) * self.m * self.k * self.n * self.count

    @property
    def key(self) -> tuple:
        return (self.batch, self.m, self.k, self.n, self.transpose_a, self.transpose_b)


def _dense_products(name: str, count: int, rows: int, k: int, n: int, stored_transposed=False):
    """Forward, input- and weight-gradient products of `count` dense layers k -> n.

    y = x W (W [k, n]): dx = dy W^T, dW = x^T dy. y = x W^T (W stored [n, k], the FFN's
    first layer and the tied pre-softmax projection): dx = dy W, dW = dy^T x.
    """
    if stored_transposed:
        return [
            Product(f"{name}: forward", count, rows, k, n, transpose_b=True),
            Product(f"{name}: input gradient", count, rows, n, k),
            Product(f"{name}: weight gradient", count, n, rows, k, transpose_a=True),
        ]
    return [
        Product(f"{name}: forward", count, rows, k, n),
        Product(f"{name}: input gradient", count, rows, n, k, transpose_b=True),
        Product(f"{name}: weight gradient", count, k, rows, n, transpose_a=True),
    ]


def _attention_products(name: str, count: int, pairs: int, q: int, t: int, dh: int):
    """QK^T and AV of `count` attention blocks over `pairs` (sentence, head) pairs, and
    the two gradients of each: scores S = Q K^T ([q, dh] by [t, dh]^T), context C = A V."""
    return [
        Product(f"{name}: QK^T", count, q, dh, t, transpose_b=True, batch=pairs),
        Product(f"{name}: dQ = dS K", count, q, t, dh, batch=pairs),
        Product(f"{name}: dK = dS^T Q", count, t, q, dh, transpose_a=True, batch=pairs),
        Product(f"{name}: AV", count, q, t, dh, batch=pairs),
        Product(f"{name}: dA = dC V^T", count, q, dh, t, transpose_b=True, batch=pairs),
        Product(f"{name}: dV = A^T dC", count, t, q, dh, transpose_a=True, batch=pairs),
    ]


def step_products(hp, vocab_size: int, shape: Shape, replicas: int = 1) -> list:
    """Every matrix product of one replica's forward + backward pass, as `Product`s.

    Per layer: the encoder's 4 attention projections (over source positions) and FFN,
    the decoder's 4 self-attention projections, cross-attention's query and output
    projections over target positions and key and value projections over source
    positions, and its FFN; once: the tied pre-softmax projection. Each replica takes
    1/`replicas` of the sentences.
    """
    b = shape.sentences // replicas
    rows_s, rows_t = b * shape.source_length, b * shape.target_length
    d, f, enc, dec = hp.hidden_size, hp.filter_size, hp.num_encoder_layers, hp.num_decoder_layers
    dh = d // hp.num_heads
    pairs = b * hp.num_heads
    s, t = shape.source_length, shape.target_length
    return [
        *_dense_products("encoder attention projections", 4 * enc, rows_s, d, d),
        *_dense_products("encoder FFN W1", enc, rows_s, d, f, stored_transposed=True),
        *_dense_products("encoder FFN W2", enc, rows_s, f, d),
        *_dense_products("decoder self-attention projections", 4 * dec, rows_t, d, d),
        *_dense_products("cross-attention query, output", 2 * dec, rows_t, d, d),
        *_dense_products("cross-attention key, value", 2 * dec, rows_s, d, d),
        *_dense_products("decoder FFN W1", dec, rows_t, d, f, stored_transposed=True),
        *_dense_products("decoder FFN W2", dec, rows_t, f, d),
        *_dense_products("pre-softmax (tied embedding)", 1, rows_t, d, vocab_size, True),
        *_attention_products("encoder self-attention", enc, pairs, s, s, dh),
        *_attention_products("decoder self-attention", dec, pairs, t, t, dh),
        *_attention_products("cross-attention", dec, pairs, t, s, dh),
    ]


def product_seconds(product: Product, repeats: int, strategy) -> float:
    """Wall seconds of one float32 `product` (on every replica at once), median of `repeats`."""
    batch = (product.batch,) if product.batch else ()
    a_shape = batch + ((product.k, product.m) if product.transpose_a else (product.m, product.k))
    b_shape = batch + ((product.n, product.k) if product.transpose_b else (product.k, product.n))

    def operands(_):
        return tf.random.normal(a_shape), tf.random.normal(b_shape)

    def replica(a, b):
        c = tf.matmul(a, b, transpose_a=product.transpose_a, transpose_b=product.transpose_b)
        return c[..., :1, :1]  # the whole product is computed; one element comes back

    pairs = strategy.experimental_distribute_values_from_function(operands)
    matmul = tf.function(lambda pairs: strategy.run(replica, args=pairs))
    return statistics.median(wall for wall, _ in time_calls(matmul, pairs, repeats, strategy))


def time_products(products: list, repeats: int, strategy) -> dict:
    """{Product.key: seconds of one}, each distinct shape timed once."""
    seconds = {}
    for product in products:
        if product.key not in seconds:
            seconds[product.key] = product_seconds(product, repeats, strategy)
    return seconds


class Clock:
    """Wall-clock and process CPU seconds of a block of work.

    CPU seconds over all threads, divided by the cores used, estimate the time the work
    would take on an idle machine; on a shared machine they are steadier than wall time.
    """

    def __init__(self):
        self.wall, self.cpu = time.perf_counter(), time.process_time()

    def stop(self) -> tuple:
        """(wall seconds, CPU seconds) since construction."""
        return time.perf_counter() - self.wall, time.process_time() - self.cpu


def time_calls(function, pairs, repeats: int, strategy) -> list:
    """(wall, CPU) seconds of `repeats` calls of `function(pairs)`, after one untimed call.

    Each call ends when every replica's result has been copied to the host.
    """

    def call():
        for result in strategy.experimental_local_results(function(pairs)):
            result.numpy()

    call()
    times = []
    for _ in range(repeats):
        clock = Clock()
        call()
        times.append(clock.stop())
    return times


def matmul_peak(dtype: tf.DType, size: int, repeats: int, strategy) -> tuple:
    """(wall, CPU) FLOP rates of a compiled `size`^3 matmul, median of `repeats` calls.

    Under a strategy with several replicas every replica multiplies its own pair of
    matrices at the same time, and the rate counts all of them: the peak of the
    threads and devices the training step runs on.
    """

    def operands(_):
        a = tf.random.normal((size, size), dtype=tf.float32)
        return tf.cast(a, dtype), tf.cast(tf.transpose(a), dtype)

    pairs = strategy.experimental_distribute_values_from_function(operands)
    matmul = tf.function(lambda pairs: strategy.run(lambda a, b: tf.matmul(a, b), args=pairs))
    times = time_calls(matmul, pairs, repeats, strategy)
    flops = 2.0 * size**3 * strategy.num_replicas_in_sync
    return tuple(flops / statistics.median(t[i] for t in times) for i in (0, 1))


def measure_peaks(repeats: int, strategy) -> dict:
    """{dtype: (wall FLOP/s, FLOP per CPU second)}; float32 is the better of 2048^3 and 4096^3."""
    float32 = [matmul_peak(tf.float32, n, repeats, strategy) for n in (2048, 4096)]
    return {
        "float32": tuple(max(p[i] for p in float32) for i in (0, 1)),
        "bfloat16": matmul_peak(tf.bfloat16, 2048, repeats, strategy),
    }


def all_reduce_seconds(shapes: list, repeats: int, strategy) -> float:
    """Wall seconds of summing one float32 tensor per shape over `strategy`'s replicas.

    The gradients' all-reduce of a training step, alone: median of `repeats` calls.
    """

    def values(_):
        return [tf.random.normal(shape) for shape in shapes]

    def replica(*tensors):
        summed = tf.distribute.get_replica_context().all_reduce("sum", list(tensors))
        return tf.add_n([tf.reshape(s, [-1])[:1] for s in summed])  # every sum made, one back

    tensors = strategy.experimental_distribute_values_from_function(values)
    reduce = tf.function(lambda tensors: strategy.run(replica, args=tuple(tensors)))
    return statistics.median(wall for wall, _ in time_calls(reduce, tensors, repeats, strategy))


def print_all_reduce(variables: list, repeats: int, strategy) -> None:
    """The trainer's all-reduce of the step's gradients against a ring collective's."""
    shapes = [tuple(variable.shape) for variable in variables]
    ring = tf.distribute.MirroredStrategy(strategy.extended.worker_devices)
    ours, theirs = (all_reduce_seconds(shapes, repeats, s) for s in (strategy, ring))
    values = sum(int(np.prod(shape)) for shape in shapes)
    print(
        f"\nall-reduce of the step's {values:,} gradient values over "
        f"{strategy.num_replicas_in_sync} replicas, timed alone (median of {repeats} calls): "
        f"{ours * 1e3:.1f} ms by reduction to one device (the trainer's), "
        f"{theirs * 1e3:.1f} ms by a ring collective (MirroredStrategy's CPU default)"
    )


def random_batch(vocab_size: int, shape: Shape, seed: int) -> dict:
    """Ids in [2, V) with no padding, so every position counts as a target token."""
    rng = np.random.default_rng(seed)
    return {
        "inputs": rng.integers(2, vocab_size, (shape.sentences, shape.source_length)),
        "targets": rng.integers(2, vocab_size, (shape.sentences, shape.target_length)),
    }


def fixed_batches(batch: dict) -> tf.data.Dataset:
    """`batch` forever, with unknown [None, None] shapes as the bucketed pipeline has.

    Static shapes would let layers pick other code paths at trace time than they do
    in training, so the benchmark hides them exactly as `padded_batch` does.
    """
    spec = {key: tf.TensorSpec([None, None], tf.int64) for key in batch}
    dataset = tf.data.Dataset.from_generator(lambda: iter([batch]), output_signature=spec)
    return dataset.cache().repeat().prefetch(2)


class Runner:
    """One configuration: its model, optimizer, compiled step and measurements."""

    def __init__(self, hp, config: str, vocab_size: int, batch: dict):
        jit, policy, *kernels = config.split(":")
        if jit not in ("xla", "noxla") or len(kernels) > 1:
            raise ValueError(f"--configs entry {config!r}: expected {{xla,noxla}}:POLICY[:KERNELS]")
        self.name, self.jit_compile = config, jit == "xla"
        self.hp = dataclasses.replace(
            hp, dtype_policy=policy, kernels=kernels[0] if kernels else hp.kernels
        )
        hparams_lib.validate(self.hp)
        keras.utils.set_random_seed(1)
        strategy = tf.distribute.get_strategy()
        self.model = build_transformer(self.hp, vocab_size)
        schedule = TransformerSchedule(hp.hidden_size, hp.warmup_steps, hp.learning_rate)
        optimizer = make_optimizer(self.hp, schedule)
        optimizer.build(self.model.trainable_variables)
        self.step = TrainStep(
            self.model, optimizer, strategy, hp.label_smoothing, jit_compile=self.jit_compile
        )
        dataset = fixed_batches(batch)
        self.iterator = iter(strategy.experimental_distribute_dataset(dataset))
        self.compile_seconds = self._time(1)[0]
        self.step_seconds = []  # per round: (wall, CPU) seconds per step

    def _time(self, steps: int) -> tuple:
        clock = Clock()
        for _ in range(steps):
            result = self.step.train(self.iterator)
        float(result["loss"])
        self.last_result = result  # global sums of the last step (loss, tokens, ...)
        return clock.stop()

    def measure(self, warmup: int, steps: int) -> None:
        if warmup:
            self._time(warmup)
        wall, cpu = self._time(steps)
        self.step_seconds.append((wall / steps, cpu / steps))

    def median(self, index: int) -> float:
        """Median over rounds of wall (0) or CPU (1) seconds per step."""
        return statistics.median(seconds[index] for seconds in self.step_seconds)


def run(args) -> None:
    # As the trainer does; --malloc_defaults measures without it (a separate process).
    retained = False if args.malloc_defaults else host_memory.retain_freed_memory()
    if args.intra_op_threads:
        tf.config.threading.set_intra_op_parallelism_threads(args.intra_op_threads)
    if args.inter_op_threads:
        tf.config.threading.set_inter_op_parallelism_threads(args.inter_op_threads)
    if args.cpu_replicas < 1 or args.sentences % args.cpu_replicas:
        raise SystemExit(
            f"--cpu_replicas={args.cpu_replicas}: expected a positive number of replicas that "
            f"divides --sentences={args.sentences}, so that every replica gets the same share"
        )
    # Before any TensorFlow work: splitting the CPU into logical devices needs that.
    strategy = distribute.make_strategy("auto", cpu_replicas=args.cpu_replicas)
    hp = hparams_lib.get(args.hparams_set)
    hp = hparams_lib.override(
        hp, ",".join(filter(None, [SMALL if args.small else "", args.hparams]))
    )
    shape = Shape(args.sentences, args.source_length, args.target_length)
    batch = random_batch(args.vocab_size, shape, seed=1)
    print(
        f"{args.hparams_set}{' --small' if args.small else ''}: N={hp.num_encoder_layers}+"
        f"{hp.num_decoder_layers} D={hp.hidden_size} d_ff={hp.filter_size} H={hp.num_heads} "
        f"V={args.vocab_size:,}; batch {shape.sentences} x ({shape.source_length} + "
        f"{shape.target_length}) = {shape.target_tokens:,} target tokens; "
        f"TF {tf.__version__}, threads intra-op {args.intra_op_threads or 'default'} "
        f"inter-op {args.inter_op_threads or 'default'}, {os.cpu_count()} CPUs, "
        f"{strategy.num_replicas_in_sync} replica(s) of {shape.sentences // strategy.num_replicas_in_sync}"
        f" sentences; freed host "
        f"memory {'retained (as the trainer does)' if retained else 'returned (malloc defaults)'}"
    )
    runners = []
    for config in args.configs.split(","):
        with strategy.scope():
            runners.append(Runner(hp, config, args.vocab_size, batch))
        counted = float(runners[-1].last_result["tokens"])
        print(
            f"  compiled {config}: {runners[-1].compile_seconds:.1f} s; the step counts "
            f"{counted:,.0f} target tokens over all replicas",
            flush=True,
        )
    model = runners[0].model
    parameters = model.count_params()
    encoder_parameters = sum(layer.count_params() for layer in model.encoder_layers)
    flops = model_flops(hp, parameters, encoder_parameters, shape)
    print(f"parameters {parameters:,}; model FLOPs per step {flops / 1e12:.4f} T", flush=True)
    peaks = {"float32": [], "bfloat16": []}
    products = step_products(hp, args.vocab_size, shape, strategy.num_replicas_in_sync)
    product_times = []  # per round: {Product.key: seconds}
    for round_index in range(args.rounds):
        for name, value in measure_peaks(args.peak_repeats, strategy).items():
            peaks[name].append(value)
        if args.product_repeats:
            product_times.append(time_products(products, args.product_repeats, strategy))
        for runner in runners:
            runner.measure(args.warmup, args.steps)
        print(
            f"  round {round_index + 1}/{args.rounds}: "
            + ", ".join(f"{r.name} {r.step_seconds[-1][0]:.2f} s/step" for r in runners),
            flush=True,
        )
    peak = {
        name: tuple(statistics.median(v[i] for v in values) for i in (0, 1))
        for name, values in peaks.items()
    }
    print_table(runners, flops, shape, peak)
    if strategy.num_replicas_in_sync > 1:
        print_all_reduce(runners[0].step.variables, args.peak_repeats, strategy)
    if product_times:
        seconds = {
            key: statistics.median(r[key] for r in product_times) for key in product_times[0]
        }
        print_products(products, seconds, flops, peak["float32"][0], args.product_repeats)


def print_table(runners: list, flops: float, shape: Shape, peak: dict) -> None:
    """One row per configuration; utilisation = model FLOP/s over the measured peak."""
    fp32, bf16 = peak["float32"], peak["bfloat16"]
    print(
        f"\nmatmul peak, median over rounds (wall | per CPU second): float32 "
        f"{fp32[0] / 1e9:.0f} | {fp32[1] / 1e9:.0f} GFLOP/s, bfloat16 {bf16[0] / 1e9:.0f} | "
        f"{bf16[1] / 1e9:.0f} GFLOP/s; model FLOPs per step {flops / 1e12:.4f} T"
    )
    print(
        "| config | compile s | s/step | steps/s | target tok/s | GFLOP/s | util. fp32 peak "
        "| util. bf16 peak | CPU s/step | util. fp32 by CPU time | speed vs first row |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    reference = runners[0].median(0)
    for runner in runners:
        wall, cpu = runner.median(0), runner.median(1)
        achieved = flops / wall
        print(
            f"| {runner.name} | {runner.compile_seconds - wall:.1f} | {wall:.3f} | {1 / wall:.3f} "
            f"| {shape.target_tokens / wall:,.0f} | {achieved / 1e9:.0f} "
            f"| {achieved / fp32[0]:.0%} | {achieved / bf16[0]:.0%} | {cpu:.2f} "
            f"| {flops / cpu / fp32[1]:.0%} | {reference / wall:.2f}x |"
        )


def print_products(products: list, seconds: dict, flops: float, peak: float, repeats: int):
    """The step's products timed alone, grouped by layer kind, and their sum."""
    print(
        f"\nfloat32 matrix products of one step, timed alone at the step's shapes (median of "
        f"{repeats} calls each, median over rounds) and multiplied by their count:"
    )
    print("| products | count | ms per step | GFLOP/s | of fp32 peak |")
    print("|---|---|---|---|---|")
    groups = {}
    for product in products:
        group = groups.setdefault(product.name.split(":")[0], [0, 0.0, 0.0])
        group[0] += product.count
        group[1] += product.count * seconds[product.key]
        group[2] += product.flops
    for name, (count, group_seconds, group_flops) in groups.items():
        rate = group_flops / group_seconds
        print(
            f"| {name} | {count} | {group_seconds * 1e3:,.0f} | {rate / 1e9:.0f} | "
            f"{rate / peak:.0%} |"
        )
    total = sum(group[1] for group in groups.values())
    print(
        f"products alone: {total:.3f} s per step; model FLOPs over that time "
        f"{flops / total / 1e9:.0f} GFLOP/s, {flops / total / peak:.0%} of the float32 peak: "
        f"a step running its products one after another and nothing else"
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hparams_set", default="transformer_base")
    parser.add_argument("--hparams", default="", help="k=v,k=v overrides")
    parser.add_argument(
        "--small", action="store_true", help="2+2 layers, D 256, d_ff 1024, 4 heads"
    )
    parser.add_argument("--vocab_size", type=int, default=37000)
    parser.add_argument("--sentences", type=int, default=128)
    parser.add_argument("--source_length", type=int, default=32)
    parser.add_argument("--target_length", type=int, default=32)
    parser.add_argument("--steps", type=int, default=3, help="timed steps per round")
    parser.add_argument("--warmup", type=int, default=1, help="untimed steps before each round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--peak_repeats", type=int, default=9)
    parser.add_argument(
        "--product_repeats",
        type=int,
        default=3,
        help="calls per distinct float32 product of the step timed alone; 0 skips that part",
    )
    parser.add_argument(
        "--configs",
        default=CONFIGS,
        help="comma list of {xla,noxla}:POLICY[:KERNELS], KERNELS auto, cpu or keras",
    )
    parser.add_argument("--intra_op_threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument("--inter_op_threads", type=int, default=0, help="0: TensorFlow's default")
    parser.add_argument(
        "--cpu_replicas",
        type=int,
        default=1,
        help="mirror each step over this many logical CPU devices (the trainer's flag), "
        "each taking its share of the batch's sentences",
    )
    parser.add_argument(
        "--malloc_defaults",
        action="store_true",
        help="leave glibc's malloc settings alone (the trainer sets them to keep freed memory)",
    )
    return parser.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())

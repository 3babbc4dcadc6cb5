r"""The training loss and its gradient two ways: the CPU kernel's XLA programs and plain ops.

    python tools/benchmark_loss.py [--vocab_sizes=13,1000,8000,37000] [--tokens=1024,4096] \
        [--target_length=32] [--calls=20] [--rounds=3]

The label-smoothed cross-entropy sum and its gradient with respect to the [B, T, V]
logits are computed either by `t2t_lite.kernels.cross_entropy`, two XLA programs (a
forward that keeps the max logit and the softmax normaliser per token, and a written-out
backward p - q'), or by `t2t_lite.training.loss.cross_entropy_sums` with
kernels="keras", plain ops differentiated by TensorFlow. The XLA programs are compiled
once per [B, T, V] shape; the "cpu" kernel set uses them when V is at least
`COMPILED_MIN_VOCAB`. For each vocabulary size and batch of `--tokens` target tokens
(B = tokens / target_length sentences), this prints the first call of each way (trace,
plus the XLA compilation for the compiled way) and the median over `--rounds` of the
mean time of `--calls` further calls, the two ways taking turns round by round, so that a
busy neighbour on the machine slows both alike.
"""

import argparse
import statistics
import time

import tensorflow as tf

from t2t_lite.kernels import cross_entropy
from t2t_lite.training.loss import COMPILED_MIN_VOCAB, cross_entropy_sums


def loss_and_gradient(compiled: bool):
    """A traced function: (loss sum, d loss / d logits) with the chosen way."""

    @tf.function
    def run(logits, labels):
        with tf.GradientTape() as tape:
            tape.watch(logits)
            if compiled:
                loss, _ = cross_entropy.cross_entropy_sums(logits, labels, 0.1)
            else:
                loss, _ = cross_entropy_sums(logits, labels, 0.1, kernels="keras")
        return loss, tape.gradient(loss, logits)

    return run


def timed(function, *args) -> float:
    began = time.perf_counter()
    loss, gradient = function(*args)
    float(loss), gradient.numpy()  # wait for the results
    return time.perf_counter() - began


def measure(vocab_size: int, tokens: int, target_length: int, calls: int, rounds: int) -> dict:
    sentences = max(1, tokens // target_length)
    logits = tf.random.stateless_normal([sentences, target_length, vocab_size], seed=[1, 2])
    labels = tf.random.stateless_uniform(
        [sentences, target_length], seed=[3, 4], minval=1, maxval=vocab_size, dtype=tf.int32
    )
    ways = {"compiled": loss_and_gradient(True), "plain": loss_and_gradient(False)}
    first = {name: timed(function, logits, labels) for name, function in ways.items()}
    per_round = {name: [] for name in ways}
    for round_index in range(rounds):
        order = list(ways) if round_index % 2 == 0 else list(reversed(ways))
        for name in order:
            total = sum(timed(ways[name], logits, labels) for _ in range(calls))
            per_round[name].append(total / calls)
    steady = {name: statistics.median(values) for name, values in per_round.items()}
    return {"sentences": sentences, "first": first, "steady": steady}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab_sizes", default="13,1000,8000,37000")
    parser.add_argument("--tokens", default="1024,4096", help="target tokens per batch")
    parser.add_argument("--target_length", type=int, default=32)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    vocab_sizes = [int(v) for v in args.vocab_sizes.split(",")]
    token_counts = [int(t) for t in args.tokens.split(",")]
    if min(vocab_sizes) < 2 or min(token_counts) < 1 or args.target_length < 1:
        parser.error("--vocab_sizes need >= 2, --tokens and --target_length >= 1")
    if args.calls < 1 or args.rounds < 1:
        parser.error("--calls and --rounds need >= 1")
    print(
        f"loss + gradient of [B, {args.target_length}, V] logits; TF {tf.__version__}; "
        f"the cpu kernels compile when V >= {COMPILED_MIN_VOCAB:,}"
    )
    print(
        "| V | target tokens | first call compiled s | first call plain s "
        "| compiled ms/call | plain ms/call | plain / compiled |"
    )
    print("|---|---|---|---|---|---|---|")
    for vocab_size in vocab_sizes:
        for tokens in token_counts:
            result = measure(vocab_size, tokens, args.target_length, args.calls, args.rounds)
            first, steady = result["first"], result["steady"]
            print(
                f"| {vocab_size:,} | {result['sentences'] * args.target_length:,} "
                f"| {first['compiled']:.2f} | {first['plain']:.2f} "
                f"| {steady['compiled'] * 1e3:.2f} | {steady['plain'] * 1e3:.2f} "
                f"| {steady['plain'] / steady['compiled']:.2f}x |",
                flush=True,
            )


if __name__ == "__main__":
    main()

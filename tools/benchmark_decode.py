r"""Decoding speed with and without the decoder cache, on a trained model.

    python tools/benchmark_decode.py --problem=multi30k_ende --data_dir=DATA --output_dir=RUN \
        [--checkpoint_path=...] [--num_sentences=100] [--batch_size=16] [--beam_size=4] \
        [--source_file=TEXT]

Decodes the first `num_sentences` dev sentences (or lines of `--source_file`) twice with
the same beam search:

* cached: the `Translator` (what the decoder, the exporter and training BLEU use): the
  encoder runs once and every step feeds one token through `decode_step`, reusing the
  keys and values of earlier positions, so a step costs O(i) attention work at position i;
* uncached: every step reruns the full `model.decode` on the whole prefix (tensor2tensor's
  slow path), so step i recomputes all i positions through every layer: O(i^2) per step.

Prints a table of sentences/s and target tokens/s (tokens of the best hypotheses, EOS not
counted), and whether both searches returned the same hypotheses. Each search is traced on
the first batch before timing.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import tensorflow as tf

from t2t_lite.decoding import beam_search
from t2t_lite.inference import SearchConfig, Translator, load_trained_model, strip_ids
from t2t_lite.inference.decode import length_batches, pad_batch, search_config


def uncached_search(model, config: SearchConfig):
    """Beam search whose step reruns `model.decode` on the prefix: ids [B, S] -> (ids, scores)."""
    vocab_size = model.target_vocab_size or model.vocab_size

    def step(ids, i, states):
        del i
        logits = model.decode(ids, states["encoder_output"], states["encoder_mask"])
        return logits[:, -1, :], states  # [N, V]

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)])
    def search(inputs):
        encoder_output, encoder_mask = model.encode(inputs, training=False)
        return beam_search(
            step,
            tf.zeros([tf.shape(inputs)[0]], tf.int32),
            config.beam_size,
            tf.shape(inputs)[1] + config.extra_length,
            vocab_size,
            config.alpha,
            states={"encoder_output": encoder_output, "encoder_mask": encoder_mask},
        )

    return search


def dev_sentences(problem, data_dir: str, count: int) -> list:
    """Source ids (EOS removed) of the first `count` dev examples."""
    sentences = []
    for example in problem.examples("dev", data_dir).take(count).as_numpy_iterator():
        ids = [int(token) for token in example["inputs"]]
        sentences.append(ids[:-1] if ids and ids[-1] == 1 else ids)
    return sentences


def file_sentences(problem, data_dir: str, path: str, count: int) -> list:
    """Source ids of the first `count` non-empty lines of a text file."""
    encoder = problem.encoders(data_dir)["inputs"]
    with open(path, encoding="utf-8") as handle:
        lines = [line.strip() for line in handle if line.strip()][:count]
    return [encoder.encode(line) for line in lines]


def time_search(search, sentences: list, batch_size: int) -> dict:
    """Runs `search` over `sentences` in length-sorted batches; returns timing and outputs."""
    batches = length_batches([len(ids) for ids in sentences], batch_size)
    search(pad_batch([sentences[i] for i in batches[0]]))  # Trace before timing.
    outputs = [None] * len(sentences)
    start = time.perf_counter()
    for batch in batches:
        ids, _ = search(pad_batch([sentences[i] for i in batch]))
        for row, index in enumerate(batch):
            outputs[index] = strip_ids(ids.numpy()[row, 0])
    seconds = time.perf_counter() - start
    tokens = sum(len(ids) for ids in outputs)
    return {
        "seconds": seconds,
        "sentences_per_sec": len(sentences) / seconds,
        "tokens_per_sec": tokens / seconds,
        "tokens": tokens,
        "outputs": outputs,
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--problem", default="multi30k_ende")
    parser.add_argument("--data_dir", default="")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--checkpoint_path", default=None)
    parser.add_argument("--num_sentences", type=int, default=100)
    parser.add_argument("--batch_size", type=int, default=16)
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--source_file", default=None, help="text to decode instead of dev")
    args = parser.parse_args(argv)

    trained = load_trained_model(args.problem, args.data_dir, args.output_dir, args.checkpoint_path)
    config = search_config(trained.problem, beam_size=args.beam_size)
    if args.source_file:
        sentences = file_sentences(
            trained.problem, args.data_dir, args.source_file, args.num_sentences
        )
    else:
        sentences = dev_sentences(trained.problem, args.data_dir, args.num_sentences)
    source_tokens = sum(len(ids) for ids in sentences)
    print(
        f"{args.problem}, {trained.checkpoint_path}: {len(sentences)} sentences of "
        f"{args.source_file or 'dev'} "
        f"({source_tokens / len(sentences):.1f} source tokens on average), batch "
        f"{args.batch_size}, beam {config.beam_size}, alpha {config.alpha}, max length input + "
        f"{config.extra_length}, {tf.config.threading.get_intra_op_parallelism_threads() or 'all'}"
        " intra-op threads"
    )
    results = {
        "cached (Translator)": time_search(
            Translator(trained.model, config).search, sentences, args.batch_size
        ),
        "uncached (full decode per step)": time_search(
            uncached_search(trained.model, config), sentences, args.batch_size
        ),
    }
    cached = results["cached (Translator)"]
    print(f"{'search':<34}{'sentences/s':>13}{'tokens/s':>12}{'seconds':>10}{'time vs cached':>16}")
    for name, result in results.items():
        print(
            f"{name:<34}{result['sentences_per_sec']:>13.2f}{result['tokens_per_sec']:>12.1f}"
            f"{result['seconds']:>10.2f}{result['seconds'] / cached['seconds']:>15.2f}x"
        )
    same = sum(
        np.array_equal(a, b)
        for a, b in zip(cached["outputs"], results["uncached (full decode per step)"]["outputs"])
    )
    print(f"identical best hypotheses: {same}/{len(sentences)}")


if __name__ == "__main__":
    main()

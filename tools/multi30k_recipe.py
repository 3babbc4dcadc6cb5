"""The whole recipe on Multi30k English-German in one command, on one machine.

    python tools/multi30k_recipe.py --raw_dir=../shared/data/multi30k --work_dir=/tmp/m30k --minutes=30

1. datagen: a shared BPE vocabulary (the problem's 8,000 pieces, or `--vocab_size`) and
   TFRecords (multi30k_ende);
2. training `--hparams_set` for a wall-clock budget (start-up and evaluations included),
   saving a checkpoint every `--save_every` updates, in the set's precision or the one
   `--dtype_policy` names (`auto`: `mixed_bfloat16` where the CPU multiplies bfloat16 natively);
3. averaging the last `--num_last` checkpoints;
4. beam decoding (beam 4, alpha 0.6) of test_2016_flickr and val with the averaged model
   (`--splits=val` decodes val alone: choices made on val never see the test set);
5. sacreBLEU with its signature (and the paper's tokenized BLEU), printed as a table and
   written to WORK_DIR/results.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

PROBLEM = "multi30k_ende"
SPLITS = {"test_2016_flickr": "test", "val": "dev"}


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raw_dir", required=True, help="folder with the Multi30k .gz files")
    parser.add_argument("--work_dir", required=True, help="data, run and outputs go here")
    parser.add_argument("--minutes", type=float, default=30.0, help="training budget")
    parser.add_argument("--train_steps", type=int, default=1_000_000, help="step budget")
    parser.add_argument("--hparams_set", default="transformer_multi30k")
    parser.add_argument("--hparams", default="", help='overrides, "k=v,k=v"')
    parser.add_argument(
        "--vocab_size", type=int, default=0,
        help="pieces of the shared BPE vocabulary; 0: the problem's own (8,000)",
    )
    parser.add_argument(
        "--bpe_dropout", type=float, default=None,
        help="BPE-dropout of the training pairs (0 for none); default: the problem's own",
    )
    parser.add_argument(
        "--train_copies", type=int, default=None,
        help="times the training pairs are written, each segmented anew by --bpe_dropout; "
        "default: the problem's own",
    )
    parser.add_argument("--save_every", type=int, default=200)
    parser.add_argument("--num_last", type=int, default=5, help="checkpoints to average")
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--splits", default=",".join(SPLITS),
        help=f"comma-separated splits to decode, of {', '.join(SPLITS)}",
    )
    parser.add_argument(
        "--dtype_policy", default="set", choices=["set", "auto", "float32", "mixed_bfloat16"],
        help="set: the hparams set's own policy; auto: mixed_bfloat16 on a CPU with bfloat16 "
        "instructions and no GPU, else the set's policy",
    )
    args = parser.parse_args(argv)
    if args.vocab_size < 0:
        parser.error(f"--vocab_size: {args.vocab_size} is negative; give a piece count, or 0")
    args.splits = [name for name in args.splits.split(",") if name]
    unknown = sorted(set(args.splits) - set(SPLITS))
    if unknown or not args.splits:
        parser.error(f"--splits: unknown {unknown or 'empty'}; known: {', '.join(SPLITS)}")
    return args


def _plain_copy(raw_dir: str, name: str, folder: str) -> str:
    """Writes raw_dir/name.gz uncompressed into `folder`; returns its path."""
    target = os.path.join(folder, name)
    with gzip.open(os.path.join(raw_dir, name + ".gz"), "rb") as source:
        data = source.read()
    with open(target, "wb") as handle:
        handle.write(data)
    return target


def generate(args, data_dir: str) -> dict:
    """Datagen of the recipe's problem from `--raw_dir`; returns the data's metadata."""
    from t2t_lite import problems

    try:
        return problems.get(PROBLEM).generate_data(
            data_dir,
            args.raw_dir,
            vocab_size=args.vocab_size or None,
            bpe_dropout=args.bpe_dropout,
            train_copies=args.train_copies,
        )
    except ValueError as error:
        sys.exit(f"multi30k_recipe: {error}")


def recipe_hparams(args, has_gpu: bool, cpuinfo_path=None):
    """`--hparams_set` in the `--dtype_policy` policy; `--hparams` overrides come last and win."""
    from t2t_lite.training import cpu_features

    return cpu_features.training_hparams(
        args.hparams_set, args.dtype_policy, args.hparams, has_gpu, cpuinfo_path
    )


def _median_tokens_per_sec(train_dir: str) -> float | None:
    """The median of the run's logged train/tokens_per_sec (target tokens per second)."""
    import glob
    import statistics

    import tensorflow as tf

    rates = []
    for path in glob.glob(os.path.join(train_dir, "events.out.tfevents.*")):
        for event in tf.compat.v1.train.summary_iterator(path):
            for value in event.summary.value:
                if value.tag == "train/tokens_per_sec":
                    rates.append(float(tf.make_ndarray(value.tensor)))
    return statistics.median(rates) if rates else None


def run(args) -> dict:
    from t2t_lite.inference import decode
    from t2t_lite.runs import load_trained_model
    from t2t_lite.search import SearchConfig
    from t2t_lite.training import average_last_checkpoints, trainer

    data_dir = os.path.join(args.work_dir, "data")
    output_dir = os.path.join(args.work_dir, "run")
    text_dir = os.path.join(args.work_dir, "text")
    os.makedirs(text_dir, exist_ok=True)

    started = time.monotonic()
    print(f"== datagen {PROBLEM} from {args.raw_dir}")
    settings = generate(args, data_dir)["settings"]
    vocab_size = settings["vocab_size"]
    datagen_seconds = time.monotonic() - started

    import tensorflow as tf

    hp = recipe_hparams(args, has_gpu=bool(tf.config.list_physical_devices("GPU")))
    print(f"== training {args.hparams_set} in {hp.dtype_policy} for {args.minutes:g} minutes")
    config = trainer.RunConfig(
        problem=PROBLEM, output_dir=output_dir, data_dir=data_dir,
        train_steps=args.train_steps, train_minutes=args.minutes,
        eval_every=10 * args.save_every, save_every=args.save_every,
        keep_checkpoints=max(args.num_last, 5), log_every=100, seed=args.seed,
        eval_bleu_sentences=0,
    )
    training_started = time.monotonic()
    metrics = trainer.train_and_evaluate(config, hp)
    training_seconds = time.monotonic() - training_started

    print(f"== averaging the last {args.num_last} checkpoints")
    averaged = average_last_checkpoints(output_dir, args.num_last, allow_fewer=True)

    results = {
        "problem": PROBLEM, "hparams_set": args.hparams_set, "hparams": args.hparams,
        "dtype_policy": hp.dtype_policy, "seed": args.seed, "vocab_size": vocab_size,
        "bpe_dropout": settings.get("bpe_dropout", 0.0),
        "train_copies": settings.get("train_copies", 1),
        "budget_minutes": args.minutes, "training_seconds": training_seconds,
        "train_tokens_per_sec": _median_tokens_per_sec(os.path.join(output_dir, "train")),
        "datagen_seconds": datagen_seconds, "final_eval": metrics,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "command": " ".join(sys.argv), "averaged_checkpoint": averaged, "splits": {},
    }
    trained = load_trained_model(PROBLEM, data_dir, output_dir, checkpoint_path=averaged)
    results["updates"] = int(averaged.rsplit("-", 1)[1])
    config = SearchConfig.for_problem(
        trained.problem, trained.hp, beam_size=args.beam_size, alpha=args.alpha
    )
    decoder = decode.Decoder(trained, data_dir, config, batch_size=64)
    for stem in args.splits:
        source = _plain_copy(args.raw_dir, f"{stem}.en", text_dir)
        reference = _plain_copy(args.raw_dir, f"{stem}.de", text_dir)
        output = os.path.join(args.work_dir, f"{stem}.hyp.de")
        print(f"== decoding {stem} (beam {args.beam_size}, alpha {args.alpha})")
        summary = decode.decode_file(decoder, source, output, reference)
        scores = summary["scores"]
        results["splits"][stem] = {
            "sacrebleu": scores["sacrebleu"]["score"],
            "signature": scores["sacrebleu"]["signature"],
            "tokenized_bleu": scores["tokenized_bleu"]["score"],
            "sentences_per_sec": summary["sentences_per_sec"],
        }
    with open(os.path.join(args.work_dir, "results.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    _print_table(results)
    return results


def _print_table(results: dict) -> None:
    print()
    print("| split | sacreBLEU | tokenized BLEU | updates | training minutes | tokens/s | policy |")
    print("|---|---|---|---|---|---|---|")
    rate = results["train_tokens_per_sec"]
    for stem, split in results["splits"].items():
        print(
            f"| {stem} | {split['sacrebleu']:.2f} | {split['tokenized_bleu']:.2f} | "
            f"{results['updates']:,} | {results['training_seconds'] / 60:.1f} | "
            f"{f'{rate:,.0f}' if rate else '-'} | {results['dtype_policy']} |"
        )
    signature = next(iter(results["splits"].values()))["signature"]
    print(f"\nsacreBLEU signature: {signature}")
    print(f"machine: {results['machine']}")


def main(argv=None) -> int:
    run(_arguments(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

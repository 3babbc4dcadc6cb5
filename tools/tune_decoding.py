r"""Chooses checkpoint averaging, beam size and alpha on a dev split, over one or more runs.

    python tools/tune_decoding.py --problem=multi30k_ende --data_dir=DATA \
        --output_dirs=RUN_A,RUN_B --source_file=val.en --reference_file=val.de \
        --num_last=3,5 --beam_sizes=4,6 --alphas=0.6,0.8,1.0 [--batch_size=64] [--json=OUT]

For every number of last checkpoints in `--num_last`, each run's checkpoints are averaged
(into a temporary folder: the runs are only read), and the dev source is decoded with every
beam size and alpha of the grid. Each setting's sacreBLEU is
printed per run and as the mean over the runs; the setting with the best mean is marked,
ties going to the smaller beam, then the smaller alpha, then fewer checkpoints. Only the dev
split is read: the test split is decoded once, afterwards, with the chosen setting.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _numbers(kind):
    def parse(text: str) -> list:
        try:
            values = [kind(item) for item in text.split(",") if item.strip()]
        except ValueError as error:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list: {error}"
            ) from error
        if not values:
            raise argparse.ArgumentTypeError("expected at least one value")
        return values

    return parse


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", default="multi30k_ende")
    parser.add_argument("--data_dir", required=True, help="the runs' data folder (vocabulary)")
    parser.add_argument("--output_dirs", required=True, help="comma-separated training runs")
    parser.add_argument("--source_file", required=True, help="dev source, one sentence a line")
    parser.add_argument("--reference_file", required=True, help="its references, line for line")
    parser.add_argument("--num_last", type=_numbers(int), default=[5])
    parser.add_argument("--beam_sizes", type=_numbers(int), default=[4])
    parser.add_argument("--alphas", type=_numbers(float), default=[0.6])
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--json", default=None, help="also write the table here")
    args = parser.parse_args(argv)
    args.output_dirs = [item for item in args.output_dirs.split(",") if item]
    for name in ("source_file", "reference_file"):
        if not os.path.isfile(getattr(args, name)):
            parser.error(f"--{name}: no such file {getattr(args, name)!r}")
    for folder in args.output_dirs:
        if not os.path.isdir(folder):
            parser.error(f"--output_dirs: no such run folder {folder!r}")
    if min(args.num_last) < 1 or min(args.beam_sizes) < 1 or min(args.alphas) < 0:
        parser.error("--num_last and --beam_sizes must be >= 1, --alphas >= 0")
    return args


def best_setting(rows: list) -> dict:
    """The row with the highest mean; ties: smaller beam, smaller alpha, fewer checkpoints."""
    return max(rows, key=lambda r: (r["mean"], -r["beam_size"], -r["alpha"], -r["num_last"]))


def run(args) -> dict:
    from t2t_lite.inference import decode
    from t2t_lite.metrics.bleu import sacrebleu_corpus
    from t2t_lite.runs import load_trained_model
    from t2t_lite.search import SearchConfig
    from t2t_lite.training import average_last_checkpoints

    with open(args.reference_file, encoding="utf-8") as handle:
        references = handle.read().splitlines()
    scores = {}  # (num_last, beam, alpha) -> [sacreBLEU per run]
    grid = list(itertools.product(args.beam_sizes, args.alphas))
    total = len(args.num_last) * len(grid) * len(args.output_dirs)
    done, started = 0, time.monotonic()
    with tempfile.TemporaryDirectory(prefix="tune_decoding_") as temporary:
        for num_last in args.num_last:
            for run_index, output_dir in enumerate(args.output_dirs):
                averaged = average_last_checkpoints(
                    output_dir, num_last, os.path.join(temporary, f"{run_index}_last_{num_last}")
                )
                trained = load_trained_model(
                    args.problem, args.data_dir, output_dir, checkpoint_path=averaged
                )
                for beam_size, alpha in grid:
                    config = SearchConfig.for_problem(
                        trained.problem, trained.hp, beam_size=beam_size, alpha=alpha
                    )
                    decoder = decode.Decoder(
                        trained, args.data_dir, config, batch_size=args.batch_size,
                        printer=lambda *a, **k: None,
                    )
                    output = os.path.join(temporary, f"{run_index}.hyp")
                    decode.decode_file(decoder, args.source_file, output)
                    with open(output, encoding="utf-8") as handle:
                        bleu = sacrebleu_corpus(handle.read().splitlines(), references).score
                    scores.setdefault((num_last, beam_size, alpha), []).append(bleu)
                    done += 1
                    elapsed = time.monotonic() - started
                    print(
                        f"[{done}/{total}] {output_dir}: last {num_last}, beam {beam_size}, "
                        f"alpha {alpha:g}: {bleu:.2f}  ({elapsed / 60:.1f} min, ETA "
                        f"{elapsed / done * (total - done) / 60:.1f} min)",
                        flush=True,
                    )
    rows = [
        {"num_last": n, "beam_size": b, "alpha": a, "bleu": values,
         "mean": statistics.fmean(values)}
        for (n, b, a), values in scores.items()
    ]  # fmt: skip
    chosen = best_setting(rows)
    _print_table(rows, chosen, args)
    result = {"rows": rows, "chosen": chosen, "source_file": args.source_file}
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=2)
    return result


def _print_table(rows: list, chosen: dict, args) -> None:
    names = [os.path.basename(os.path.normpath(d)) for d in args.output_dirs]
    if len(set(names)) < len(names):
        names = [os.path.normpath(d) for d in args.output_dirs]
    runs = " | ".join(names)
    print()
    print(f"dev: {args.source_file}")
    print(f"| checkpoints averaged | beam | alpha | {runs} | mean |")
    print("|---|---|---|" + "---|" * len(args.output_dirs) + "---|")
    for row in rows:
        mark = "**" if row is chosen else ""
        values = " | ".join(f"{value:.2f}" for value in row["bleu"])
        print(
            f"| {row['num_last']} | {row['beam_size']} | {row['alpha']:g} | {values} | "
            f"{mark}{row['mean']:.2f}{mark} |"
        )


def main(argv=None) -> int:
    run(_arguments(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

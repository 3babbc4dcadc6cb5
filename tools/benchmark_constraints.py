r"""Lexically constrained decoding on a trained run: coverage, sacreBLEU and the speed cost.

    python tools/benchmark_constraints.py --problem=multi30k_ende --data_dir=DATA \
        --output_dir=RUN --source_file=SHARED/multi30k/val.en.gz \
        --reference_file=SHARED/multi30k/val.de.gz [--checkpoint_path=...] \
        [--num_sentences=0] [--beam_size=4] [--alpha=0.6] [--batch_size=32] [--seed=1]

Decodes the sentences unconstrained, then draws, per sentence, 1 and then 2 words of its
reference that the unconstrained output lacks (a reference word, stripped of surrounding
punctuation, that does not start any word of the output; fewer where the reference has
fewer) and decodes again with them as constraints (`t2t-decoder --constraints_file`).
Prints one row per setting: sentences given constraints, constraints, coverage (the share
of constraints found at the start of a word of the output: the search places a phrase's
pieces, the first of which starts a word, so this must be 100% unless an output says
its constraints did not fit), outputs with constraints_met false, sacreBLEU against the
references, and the decoding time with its ratio to the unconstrained one. Timings are
wall clock in this process, the same batches for every row.
"""

from __future__ import annotations

import argparse
import gzip
import random
import re
import sys
import time

PUNCTUATION = ".,;:!?\"'()[]«»„“”"


def _lines(path: str) -> list:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [line.rstrip("\n") for line in handle]


def draw_constraints(references: list, outputs: list, count: int, seed: int) -> list:
    """Per sentence, up to `count` reference words that no output word starts with."""
    rng = random.Random(seed)
    drawn = []
    for reference, output in zip(references, outputs, strict=True):
        words = [word.strip(PUNCTUATION) for word in reference.split()]
        candidates = sorted({w for w in words if w and not _occurs(w, output)})
        drawn.append(rng.sample(candidates, min(count, len(candidates))))
    return drawn


def _occurs(phrase: str, text: str) -> bool:
    """`phrase` occurs in `text` starting a word (as the search places it)."""
    return re.search(r"(^|\s)" + re.escape(phrase), text) is not None


def _decode(decoder, sources, guidance=None) -> tuple:
    start = time.perf_counter()
    result = decoder.translate(sources, source="source", guidance=guidance)
    return result, time.perf_counter() - start


def run(args, printer=print) -> list:
    """Decodes as the module docstring says; returns the table's rows as dicts."""
    from t2t_lite.inference.decode import Decoder
    from t2t_lite.runs import load_trained_model
    from t2t_lite.search import SearchConfig

    sources, references = _lines(args.source_file), _lines(args.reference_file)
    if len(sources) != len(references):
        sys.exit(f"{args.source_file} and {args.reference_file} differ in length")
    if args.num_sentences:
        sources, references = sources[: args.num_sentences], references[: args.num_sentences]
    trained = load_trained_model(args.problem, args.data_dir, args.output_dir, args.checkpoint_path)
    config = SearchConfig.for_problem(
        trained.problem, trained.hp, beam_size=args.beam_size, alpha=args.alpha
    )
    decoder = Decoder(trained, args.data_dir, config, args.batch_size, printer=lambda line: None)
    language = getattr(trained.problem, "target_language", "en")
    # Warm-up: trace both searches once, outside the timings.
    decoder.translate(sources[:1])
    warm = [w.strip(PUNCTUATION) for w in references[0].split()][:1]
    decoder.translate(sources[:1], guidance=[(warm, "")])
    plain, plain_seconds = _decode(decoder, sources)
    rows = [_row("unconstrained", plain, [[]] * len(sources), references, plain_seconds, language)]
    for count in (1, 2):
        constraints = draw_constraints(references, plain.best, count, args.seed)
        guided, seconds = _decode(decoder, sources, [(c, "") for c in constraints])
        label = f"{count} constraint{'s' if count > 1 else ''} per sentence"
        rows.append(_row(label, guided, constraints, references, seconds, language))
    for row in rows:
        row["slowdown"] = row["seconds"] / max(plain_seconds, 1e-9)
    _print(rows, config, len(sources), printer)
    return rows


def _row(label, result, constraints, references, seconds, language) -> dict:
    from t2t_lite.metrics.bleu import bleu_report

    total = sum(len(c) for c in constraints)
    found = sum(_occurs(p, out) for c, out in zip(constraints, result.best) for p in c)
    return {
        "setting": label,
        "sentences": sum(bool(c) for c in constraints),
        "constraints": total,
        "coverage": found / total if total else None,
        "not_met": sum(met is False for met in result.constraints_met),
        "sacrebleu": bleu_report(result.best, references, language)["sacrebleu"]["score"],
        "seconds": seconds,
    }


def _print(rows, config, num_sentences, printer) -> None:
    printer(f"{num_sentences} sentences, {config.describe()}")
    printer(
        "| setting | sentences with constraints | constraints | coverage | met: false "
        "| sacreBLEU | seconds | x unconstrained |"
    )
    printer("|---|---:|---:|---:|---:|---:|---:|---:|")
    for row in rows:
        coverage = "-" if row["coverage"] is None else f"{100 * row['coverage']:.1f}%"
        printer(
            f"| {row['setting']} | {row['sentences']} | {row['constraints']} | {coverage} | "
            f"{row['not_met']} | {row['sacrebleu']:.2f} | {row['seconds']:.1f} | "
            f"{row['slowdown']:.2f} |"
        )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[1])
    parser.add_argument("--problem", required=True)
    parser.add_argument("--data_dir", default="")
    parser.add_argument("--output_dir", required=True)
    parser.add_argument("--checkpoint_path", default=None)
    parser.add_argument("--source_file", required=True)
    parser.add_argument("--reference_file", required=True)
    parser.add_argument("--num_sentences", type=int, default=0, help="0 = all")
    parser.add_argument("--beam_size", type=int, default=None)
    parser.add_argument("--alpha", type=float, default=None)
    parser.add_argument("--batch_size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


if __name__ == "__main__":
    run(parse_args())

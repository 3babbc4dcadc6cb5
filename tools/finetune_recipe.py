"""News pretraining, then Multi30k fine-tuning (--warm_start_from), against Multi30k from scratch.

    python tools/finetune_recipe.py --work_dir=/tmp/finetune --minutes_pretrain=60 --minutes=30

1. datagen wmt14_ende from the shared WMT news files, as a corpus of one's own: news-test2008,
   newssyscomb2009 and newstest2009-2011 (about 10,600 pairs) as training text, newstest2013
   as dev and newstest2012 in the place of newstest2014, with a vocabulary of
   `--pretrain_vocab_size` BPE pieces;
2. pretraining `--hparams_set` on it for `--minutes_pretrain` minutes;
3. datagen multi30k_ende (its own 8k vocabulary, another one than the news vocabulary);
4. fine-tuning on Multi30k for `--minutes` minutes or `--train_steps` updates, whichever comes
   first, from the pretrained run, its embedding rows carried over by piece
   (`--warm_start_from=PRETRAINED --warm_start_vocab=NEWS_VOCAB`);
5. training on Multi30k from scratch with the same budget;
6. averaging each Multi30k run's last `--num_last` checkpoints, beam decoding of Multi30k val
   (dev) and test_2016_flickr, and sacreBLEU, printed as a table and written to
   WORK_DIR/results.json.

A pretraining that finished is reused when the recipe runs again in the same `--work_dir`.
The Multi30k steps are those of tools/multi30k_recipe.py, whose pieces this imports.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from multi30k_recipe import PROBLEM, SPLITS, _plain_copy  # tools/, this script's folder

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PRETRAIN_PROBLEM = "wmt14_ende"
NEWS_TRAIN = ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010", "newstest2011")


def _arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work_dir", required=True, help="data, runs and outputs go here")
    parser.add_argument(
        "--shared_data",
        default=os.path.join(os.path.dirname(REPO), "shared", "data"),
        help="folder holding multi30k/, wmt_news_2008_2012/ and wmt13_newstest2013/",
    )
    parser.add_argument("--minutes_pretrain", type=float, default=60.0, help="news budget")
    parser.add_argument("--minutes", type=float, default=30.0, help="each Multi30k run's budget")
    parser.add_argument(
        "--train_steps", type=int, default=1_000_000,
        help="step cap of each Multi30k run: with --minutes set high, both runs get the same "
        "number of updates whatever the machine's load",
    )  # fmt: skip
    parser.add_argument("--pretrain_steps", type=int, default=1_000_000, help="news step cap")
    parser.add_argument("--hparams_set", default="transformer_multi30k")
    parser.add_argument("--hparams", default="", help='overrides, "k=v,k=v" (every run)')
    parser.add_argument("--pretrain_vocab_size", type=int, default=8000)
    parser.add_argument("--save_every", type=int, default=200)
    parser.add_argument("--num_last", type=int, default=5, help="checkpoints to average")
    parser.add_argument("--beam_size", type=int, default=4)
    parser.add_argument("--alpha", type=float, default=0.6)
    parser.add_argument("--decode_lines", type=int, default=0, help="first N lines; 0 = all")
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args(argv)


def news_raw_dir(shared_data: str, folder: str) -> str:
    """The shared news files linked under wmt14_ende's raw names into `folder`."""
    news = os.path.join(shared_data, "wmt_news_2008_2012")
    links = {
        f"{stem}.en-de.{lang}": os.path.join(news, f"{stem}.en-de.{lang}")
        for stem in NEWS_TRAIN
        for lang in ("en", "de")
    }
    for lang in ("en", "de"):
        links[f"newstest2013.{lang}"] = os.path.join(
            shared_data, "wmt13_newstest2013", f"newstest2013.{lang}"
        )
        links[f"newstest2014.{lang}"] = os.path.join(news, f"newstest2012.en-de.{lang}")
    os.makedirs(folder, exist_ok=True)
    for name, target in links.items():
        if not os.path.lexists(os.path.join(folder, name)):
            os.symlink(target, os.path.join(folder, name))
    return folder


def _train(
    args, problem: str, data_dir: str, output_dir: str, minutes: float, steps: int, **warm
) -> dict:
    from t2t_lite import hparams as hparams_lib
    from t2t_lite.training import trainer

    hp = hparams_lib.override(hparams_lib.get(args.hparams_set), args.hparams)
    config = trainer.RunConfig(
        problem=problem, output_dir=output_dir, data_dir=data_dir,
        train_steps=steps, train_minutes=minutes,
        eval_every=10 * args.save_every, save_every=args.save_every,
        keep_checkpoints=max(args.num_last, 5), log_every=100, seed=args.seed,
        eval_bleu_sentences=0, **warm,
    )  # fmt: skip
    started = time.monotonic()
    metrics = trainer.train_and_evaluate(config, hp)
    return {"final_eval": metrics, "training_seconds": time.monotonic() - started}


def _text(args, stem: str, language: str, folder: str) -> str:
    """raw_dir/stem.language.gz as plain text, cut to --decode_lines lines if set."""
    path = _plain_copy(os.path.join(args.shared_data, "multi30k"), f"{stem}.{language}", folder)
    if args.decode_lines:
        with open(path, encoding="utf-8") as handle:
            lines = handle.readlines()[: args.decode_lines]
        with open(path, "w", encoding="utf-8") as handle:
            handle.writelines(lines)
    return path


def _score(args, data_dir: str, output_dir: str, text_dir: str) -> dict:
    """Averages the run's last checkpoints and scores them on every Multi30k split."""
    from t2t_lite.inference import decode
    from t2t_lite.runs import load_trained_model
    from t2t_lite.search import SearchConfig
    from t2t_lite.training import average_last_checkpoints

    averaged = average_last_checkpoints(output_dir, args.num_last, allow_fewer=True)
    trained = load_trained_model(PROBLEM, data_dir, output_dir, checkpoint_path=averaged)
    config = SearchConfig.for_problem(
        trained.problem, trained.hp, beam_size=args.beam_size, alpha=args.alpha
    )
    decoder = decode.Decoder(trained, data_dir, config, batch_size=64)
    scores = {"updates": int(averaged.rsplit("-", 1)[1]), "averaged_checkpoint": averaged}
    for stem in SPLITS:
        source, reference = (_text(args, stem, lang, text_dir) for lang in ("en", "de"))
        output = os.path.join(output_dir, f"{stem}.hyp.de")
        print(f"== decoding {stem} with {averaged} (beam {args.beam_size}, alpha {args.alpha})")
        summary = decode.decode_file(decoder, source, output, reference)["scores"]
        scores[stem] = summary["sacrebleu"]["score"]
        scores["signature"] = summary["sacrebleu"]["signature"]
    return scores


def _pretrain(args, data_dir: str, output_dir: str) -> dict:
    """Pretrains on news, or reads what an earlier call of the recipe recorded of it.

    A finished pretraining is reused so that the Multi30k runs can be repeated with other
    budgets; delete WORK_DIR/pretrained to pretrain again.
    """
    record = os.path.join(output_dir, "pretraining.json")
    if os.path.exists(record):
        print(f"== pretraining done earlier: {output_dir} (as {record} records)")
        with open(record) as handle:
            return json.load(handle)
    print(f"== pretraining {args.hparams_set} on news for {args.minutes_pretrain:g} minutes")
    budget = (args.minutes_pretrain, args.pretrain_steps)
    result = _train(args, PRETRAIN_PROBLEM, data_dir, output_dir, *budget)
    import tensorflow as tf

    result["updates"] = int(tf.train.latest_checkpoint(output_dir).rsplit("-", 1)[1])
    with open(record, "w") as handle:
        json.dump(result, handle, indent=2)
    return result


def run(args) -> dict:
    from t2t_lite import problems
    from t2t_lite.runs import run_dir

    work = os.path.abspath(args.work_dir)
    data_dir, text_dir = os.path.join(work, "data"), os.path.join(work, "text")
    os.makedirs(text_dir, exist_ok=True)
    runs = {name: os.path.join(work, name) for name in ("pretrained", "finetuned", "scratch")}

    raw = news_raw_dir(args.shared_data, os.path.join(work, "news_raw"))
    print(f"== datagen {PRETRAIN_PROBLEM} from the news files linked in {raw}")
    news = problems.get(PRETRAIN_PROBLEM)
    news.generate_data(data_dir, raw, vocab_size=args.pretrain_vocab_size)
    pretrained = _pretrain(args, data_dir, runs["pretrained"])

    print(f"== datagen {PROBLEM}")
    problems.get(PROBLEM).generate_data(data_dir, os.path.join(args.shared_data, "multi30k"))
    print(f"== fine-tuning on {PROBLEM} for {args.minutes:g} minutes from {runs['pretrained']}")
    warm = dict(warm_start_from=runs["pretrained"], warm_start_vocab=news.vocab_file(data_dir))
    budget = (args.minutes, args.train_steps)
    finetuned = _train(args, PROBLEM, data_dir, runs["finetuned"], *budget, **warm)
    print(f"== training on {PROBLEM} from scratch for {args.minutes:g} minutes")
    scratch = _train(args, PROBLEM, data_dir, runs["scratch"], *budget)

    results = {
        "hparams_set": args.hparams_set, "hparams": args.hparams,
        "minutes_pretrain": args.minutes_pretrain, "minutes": args.minutes,
        "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
        "command": " ".join(sys.argv), "decode_lines": args.decode_lines or "all",
        "pretrained": pretrained,
        "warm_start": run_dir.load_manifest(runs["finetuned"]).get("warm_start"),
        "runs": {"finetuned": finetuned, "scratch": scratch},
    }  # fmt: skip
    for name in results["runs"]:
        results["runs"][name].update(_score(args, data_dir, runs[name], text_dir))
    with open(os.path.join(work, "results.json"), "w") as handle:
        json.dump(results, handle, indent=2)
    _print_table(results)
    return results


def _print_table(results: dict) -> None:
    pretrained = results["pretrained"]
    labels = {
        "finetuned": f"news ({pretrained['updates']:,} updates, "
        f"{pretrained['training_seconds'] / 60:.0f} min), then Multi30k",
        "scratch": "Multi30k from scratch",
    }
    print()
    print(f"| run | {' | '.join(f'{stem} sacreBLEU' for stem in SPLITS)} | updates | minutes |")
    print(f"|---|{'---|' * len(SPLITS)}---|---|")
    for name, row in results["runs"].items():
        bleu = " | ".join(f"{row[stem]:.2f}" for stem in SPLITS)
        print(
            f"| {labels[name]} | {bleu} | {row['updates']:,} | {row['training_seconds'] / 60:.1f} |"
        )
    record = results["warm_start"] or {}
    for name, count in ((record.get("vocabulary") or {}).get("rows_carried") or {}).items():
        print(f"\nfine-tuning carried {count} rows of {name} by piece from the news vocabulary")
    print(f"sacreBLEU signature: {results['runs']['scratch']['signature']}")
    print(f"lines decoded per split: {results['decode_lines']}; machine: {results['machine']}")


def main(argv=None) -> int:
    run(_arguments(argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())

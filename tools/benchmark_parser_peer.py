"""Trains SuPar's CRF constituency parser on the WSJ sample and scores it as ours is scored.

    python tools/benchmark_parser_peer.py --peer_python=~/venvs/supar/bin/python \\
        --minutes=30 [--splits=dev,test] [--shared_data=../shared/data] \\
        [--work_dir=/tmp/wsj_parser_peer] [--threads=2] [--no_mbr]

The peer is SuPar (Zhang et al., 2020, "Fast and Accurate Neural CRF Constituency Parsing"):
a BiLSTM over word and character embeddings, no pretrained embeddings or language model, with
SuPar's own defaults otherwise. It runs in a Python of its own, since it needs PyTorch:

    python3 -m venv ~/venvs/supar && ~/venvs/supar/bin/pip install supar

1. trees: the same train (wsj_0001-0159), dev (wsj_0160-0169) and test (wsj_0170-0179) trees
   as `tools/parse_wsj_sample.py` reads, preprocessed the same way (no outer bracket, empty
   elements or function tags), one per line under a `TOP` root as SuPar reads them, into
   `WORK_DIR/{train,dev,test}.pid`;
2. training: `python -m supar.cmds.crf_con train` for `--minutes` of wall time (SuPar evaluates
   on dev after every epoch and keeps the model of the best dev F1, as its own command does;
   the process is stopped when the time is up) or for `--epochs`;
3. parsing of each of `--splits` with the kept model, timed (sentences/s);
4. EVALB bracketing scores with `t2t_lite.evalb` (COLLINS.prm, gold POS tags on the leaves:
   SuPar keeps the tags of its input trees) against the gold trees that
   `tools/parse_wsj_sample.py` scores ours against. Gold and parsed trees are written to
   `WORK_DIR/SPLIT.{gold,supar}`, so that `python -m t2t_lite.evalb -p COLLINS.prm GOLD TEST`
   recomputes every figure.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_lite import problems  # noqa: E402

PROBLEM = "wsj_parsing"
REPO = Path(__file__).resolve().parents[1]
INSTALL = "python3 -m venv ~/venvs/supar && ~/venvs/supar/bin/pip install supar"


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--peer_python", required=True, help="a Python with supar installed")
    parser.add_argument("--shared_data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work_dir", default="/tmp/wsj_parser_peer")
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--minutes", type=float, help="wall-time budget of training")
    budget.add_argument("--epochs", type=int, help="epochs of training")
    parser.add_argument("--splits", default="dev,test", help="comma-separated: dev, test")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch threads")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no_mbr", action="store_true", help="Viterbi trees instead of MBR")
    args = parser.parse_args(argv)
    if args.minutes is not None and args.minutes <= 0:
        parser.error(f"--minutes={args.minutes}: expected a positive number")
    if args.epochs is not None and args.epochs < 1:
        parser.error(f"--epochs={args.epochs}: expected a positive number")
    splits = args.splits.split(",")
    if not splits or any(split not in ("dev", "test") for split in splits):
        parser.error(f"--splits={args.splits}: expected dev, test or dev,test")
    args.splits = splits
    return args


def check_peer(python: str) -> str:
    """SuPar's version in `python`; SystemExit with one line saying how to install it."""
    if not os.path.isfile(python) or not os.access(python, os.X_OK):
        raise SystemExit(f"--peer_python={python}: not an executable file; {INSTALL}")
    found = subprocess.run(
        [python, "-c", "import supar, torch; print(supar.__version__, torch.__version__)"],
        capture_output=True,
        text=True,
    )
    if found.returncode != 0:
        raise SystemExit(f"supar is not importable with {python}; install it: {INSTALL}")
    return found.stdout.strip()


def write_trees(path: Path, trees: list) -> None:
    """One tree per line under SuPar's `TOP` root: `(TOP (S ...))`."""
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(f"(TOP {tree})\n" for tree in trees)


def read_trees(path: Path) -> list:
    """The trees SuPar wrote, one per line, without the `TOP` root."""
    found = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        match = re.fullmatch(r"\(TOP (.*)\)", line.strip())
        if not match:
            raise ValueError(f"{path} line {number}: not a (TOP ...) tree: {line[:80]!r}")
        found.append(match.group(1))
    return found


def prepare(args, work: Path) -> dict:
    """Writes WORK/{train,dev,test}.pid; returns {split: preprocessed gold trees}."""
    problem = problems.get(PROBLEM)
    raw_dir = os.path.join(args.shared_data, "wsj_sample")
    if not os.path.isdir(raw_dir):
        raise SystemExit(f"{raw_dir}: the WSJ sample is missing (--shared_data)")
    corpus = problem.corpus("", raw_dir, "raw")
    gold = {split: corpus.gold_trees(split) for split in ("train", "dev", "test")}
    for split, trees in gold.items():
        write_trees(work / f"{split}.pid", trees)
    return gold


# SuPar 1.1.4 saves and loads its whole parser object with torch.save / torch.load; PyTorch
# 2.6 and newer load only tensors unless told otherwise. The file is the one this run trained.
PEER_ENV = dict(os.environ, TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD="1")


def peer(args, mode: str, work: Path, *flags) -> list:
    mbr = [] if args.no_mbr else ["--mbr"]
    return [
        args.peer_python, "-m", "supar.cmds.crf_con", *mbr, mode, "--path", str(work / "model"),
        "--device", "-1", "--threads", str(args.threads), "--seed", str(args.seed), *flags,
    ]  # fmt: skip


def train(args, work: Path) -> tuple:
    """Trains within the budget; returns (seconds, epochs finished, best dev epoch)."""
    # SuPar reads its optimiser settings from a configuration file: Adam with lr 2e-3,
    # beta1 = beta2 = 0.9, epsilon 1e-12, the rate x0.75 every 5,000 updates, gradients
    # clipped at 5 (Zhang et al., 2020, section 4.1). The network is the model's default.
    config = work / "supar.ini"
    config.write_text(
        "[Optimizer]\nlr = 2e-3\nmu = .9\nnu = .9\neps = 1e-12\nweight_decay = 0\n"
        f"clip = 5.0\ndecay = .75\ndecay_steps = 5000\nepochs = {args.epochs or 100_000}\n"
        "patience = 100\n"
    )
    command = peer(
        args, "train", work, "--conf", str(config), "--build", "--feat", "char", "--embed=",
        "--train", str(work / "train.pid"), "--dev", str(work / "dev.pid"),
        # SuPar also scores its --test file after every epoch: dev again, so that nothing
        # of test is seen before the model is chosen.
        "--test", str(work / "dev.pid"),
    )  # fmt: skip
    log = work / "train.log"
    start = time.monotonic()
    with open(log, "w") as handle:
        process = subprocess.Popen(command, stdout=handle, stderr=subprocess.STDOUT, env=PEER_ENV)
        try:
            process.wait(timeout=args.minutes * 60 if args.minutes else None)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
    seconds = time.monotonic() - start
    text = log.read_text(errors="replace")
    if not (work / "model").is_file():
        raise SystemExit(f"SuPar saved no model (its log: {log}):\n{text[-2000:]}")
    current = finished = best = 0
    for line in text.splitlines():
        started = re.search(r"Epoch (\d+) / \d+:", line)
        if started:
            current = int(started.group(1))
        elif re.search(r"s elapsed", line):  # an epoch ends: "...s elapsed" or "(saved)"
            finished = current
            if "(saved)" in line:
                best = current
    return seconds, finished, best


def parse_split(args, work: Path, split: str) -> tuple:
    """(trees, seconds) of SuPar's parse of SPLIT.pid."""
    output = work / f"{split}.supar.pid"
    start = time.monotonic()
    done = subprocess.run(
        peer(args, "predict", work, "--data", str(work / f"{split}.pid"), "--pred", str(output)),
        capture_output=True,
        text=True,
        env=PEER_ENV,
    )
    seconds = time.monotonic() - start
    if done.returncode != 0:
        raise SystemExit(f"SuPar could not parse {split}: {done.stderr[-2000:]}")
    return read_trees(output), seconds


def report_row(name: str, scores: dict, rate: float) -> str:
    return (
        f"| {name} | {scores['f1']:.2f} | {scores['precision']:.2f} | {scores['recall']:.2f} | "
        f"{scores['complete_match']:.2f} | {rate:.1f} |"
    )


def main(argv=None) -> None:
    args = parse_args(argv)
    versions = check_peer(args.peer_python)
    work = Path(args.work_dir)
    work.mkdir(parents=True, exist_ok=True)
    gold = prepare(args, work)
    counts = ", ".join(f"{split} {len(trees)}" for split, trees in gold.items())
    print(f"SuPar {versions} (supar, torch); trees: {counts}", flush=True)
    seconds, epochs, best = train(args, work)
    print(
        f"training: {seconds / 60:.1f} min, {epochs} epochs finished, "
        f"model of epoch {best} kept (best dev F1)",
        flush=True,
    )
    problem = problems.get(PROBLEM)
    for split in args.splits:
        parsed, seconds = parse_split(args, work, split)
        (work / f"{split}.gold").write_text("\n".join(gold[split]) + "\n", encoding="utf-8")
        (work / f"{split}.supar").write_text("\n".join(parsed) + "\n", encoding="utf-8")
        scores = problem.score(parsed, gold[split])
        decoding = "MBR" if not args.no_mbr else "Viterbi"
        print(
            f"\nWSJ sample {split} ({len(gold[split])} sentences), EVALB COLLINS.prm, gold POS tags"
        )
        print("| parser | F1 | precision | recall | complete match | sentences/s |")
        print("|---|---|---|---|---|---|")
        rate = len(parsed) / seconds
        print(report_row(f"SuPar CRF ({decoding}, {epochs} epochs)", scores, rate))
        print(f"trees in {work}/{split}.{{gold,supar}}; sentences/s include loading the model")


if __name__ == "__main__":
    main()

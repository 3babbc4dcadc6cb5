"""Trains a parser on the shared WSJ sample and scores it against a right-branching baseline.

    python tools/parse_wsj_sample.py --minutes=30 [--train_steps=N] [--beam_size=21] \\
        [--dtype_policy=auto] [--save_every=500 --num_last=1] \\
        [--splits=dev,test] [--unconstrained] [--greedy] [--ptb_output] \\
        [--problem=wsj_parsing] [--shared_data=../shared/data] \\
        [--work_dir=/tmp/wsj_parsing_sample]

1. datagen: `--problem` (`wsj_parsing`, or `wsj_parsing_in_order` for in-order targets) on
   `SHARED_DATA/wsj_sample` (train wsj_0001-0159, dev wsj_0160-0169, test wsj_0170-0179)
   with a `--vocab_size` SentencePiece vocabulary, into `WORK_DIR/data` (a rerun with the
   same inputs reuses it);
2. training: `--hparams_set` (transformer_parsing_small) for `--train_steps` updates, or for
   about `--minutes` of wall time: a first chunk of `--calibration_steps` measures the speed,
   then training resumes in chunks sized to fill the budget; checkpoints go to `WORK_DIR/run`
   every `--save_every` updates (a rerun resumes from them, and `--minutes` then trains that
   much longer). `--dtype_policy=auto` trains in `mixed_bfloat16` on a CPU with bfloat16
   instructions (AVX512_BF16, AMX), in the set's policy elsewhere; `--num_last` above 1
   decodes with the average of that many of the newest checkpoints instead of the last one;
3. decoding of the sentences of each of `--splits` with beam search constrained to trees
   over the sentence's words (`WsjParsing.search_constraint`), by default with the problem's
   decode settings (beam 21, alpha 0.3, input + 300 tokens, section 6.3 of the paper);
   `--unconstrained` and `--greedy` add rows decoded without the constraint;
4. EVALB bracketing scores (COLLINS.prm semantics, gold POS tags on the leaves) of the model's
   trees and of right-branching trees over the same sentences, one table per split. Gold,
   model and baseline trees are written to `WORK_DIR/SPLIT.{gold,model,right_branching}` so
   that `python -m t2t_lite.evalb -p COLLINS.prm GOLD TEST` can recompute every figure.
   With `--ptb_output` the gold file holds the trees as the treebank files write them and
   every tree written is in Penn Treebank form, `( (S ...) )`, so that the reference EVALB
   program gives the same figures on the files (its scores count the outer bracket).
"""

from __future__ import annotations

import argparse
import os
import re
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from t2t_lite import problems  # noqa: E402
from t2t_lite.problems import EOS_ID, trees  # noqa: E402
from t2t_lite.runs import load_trained_model  # noqa: E402
from t2t_lite.search import SearchConfig, Translator, strip_ids  # noqa: E402
from t2t_lite.training import average_last_checkpoints, cpu_features  # noqa: E402
from t2t_lite.training.trainer import RunConfig, train_and_evaluate  # noqa: E402

PROBLEMS = ("wsj_parsing", "wsj_parsing_in_order")
REPO = Path(__file__).resolve().parents[1]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shared_data", default=str(REPO.parent / "shared" / "data"))
    parser.add_argument("--work_dir", default="/tmp/wsj_parsing_sample")
    parser.add_argument(
        "--problem",
        choices=PROBLEMS,
        default=PROBLEMS[0],
        help="top-down targets, or in-order (each label after its constituent's first child)",
    )
    parser.add_argument("--vocab_size", type=int, default=4000)
    parser.add_argument("--hparams_set", default="transformer_parsing_small")
    parser.add_argument("--hparams", default="", help='overrides, "key=value,key=value"')
    budget = parser.add_mutually_exclusive_group(required=True)
    budget.add_argument("--train_steps", type=int, help="optimizer updates (global step)")
    budget.add_argument("--minutes", type=float, help="wall-time budget of training")
    parser.add_argument("--calibration_steps", type=int, default=200)
    parser.add_argument(
        "--dtype_policy", default="set", choices=cpu_features.POLICY_CHOICES,
        help="set: the hparams set's own policy; auto: mixed_bfloat16 on a CPU with bfloat16 "
        "instructions and no GPU, else the set's policy",
    )  # fmt: skip
    parser.add_argument("--save_every", type=int, default=500, help="updates between checkpoints")
    parser.add_argument(
        "--num_last", type=int, default=1, help="decode the average of this many newest checkpoints"
    )
    parser.add_argument("--beam_size", type=int, default=None, help="default: the problem's")
    parser.add_argument("--alpha", type=float, default=None, help="default: the problem's")
    parser.add_argument("--extra_length", type=int, default=None, help="default: the problem's")
    parser.add_argument("--greedy", action="store_true", help="also decode greedily")
    parser.add_argument(
        "--unconstrained", action="store_true", help="also decode without the tree constraint"
    )
    parser.add_argument(
        "--decode_batch", type=int, default=16,
        help="sentences per search (16: the fastest measured, docs/parsing.md#parsing-speed)",
    )  # fmt: skip
    parser.add_argument("--splits", default="dev,test", help="comma-separated: dev, test")
    parser.add_argument(
        "--ptb_output", action="store_true", help="raw PTB gold, trees in PTB form ( (S ...) )"
    )
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    for name, what in (
        ("save_every", "updates"),
        ("num_last", "checkpoints"),
        ("decode_batch", "sentences"),
    ):
        if getattr(args, name) < 1:
            parser.error(f"--{name}: {getattr(args, name)} is not a positive count of {what}")
    return args


def current_step(output_dir: str) -> int:
    """The global step of the newest checkpoint in `output_dir` (0 without one)."""
    path = tf.train.latest_checkpoint(output_dir)
    return int(re.search(r"ckpt-(\d+)$", path).group(1)) if path else 0


def training_hparams(args, has_gpu: bool, cpuinfo_path=None):
    """`--hparams_set` in the `--dtype_policy` policy; `--hparams` overrides come last and win."""
    return cpu_features.training_hparams(
        args.hparams_set, args.dtype_policy, args.hparams, has_gpu, cpuinfo_path
    )


def train(args, data_dir: str, output_dir: str) -> int:
    """Trains for the step or time budget; returns the final global step."""
    hp = training_hparams(args, has_gpu=bool(tf.config.list_physical_devices("GPU")))
    print(f"training {args.hparams_set} in {hp.dtype_policy}")

    def run(steps: int) -> None:
        config = RunConfig(
            problem=args.problem, output_dir=output_dir, data_dir=data_dir, train_steps=steps,
            eval_every=500, save_every=args.save_every, keep_checkpoints=max(20, args.num_last),
            log_every=100, seed=args.seed,
        )  # fmt: skip
        train_and_evaluate(config, hp)

    if args.train_steps is not None:
        run(args.train_steps)
        return args.train_steps
    # Chunks until the budget is spent: each chunk's speed (set-up included, so a slight
    # underestimate) sizes the next, and training stops when less than a minute's worth is left.
    began = time.monotonic()
    deadline = began + args.minutes * 60
    step, chunk = current_step(output_dir), args.calibration_steps
    while True:
        chunk_began = time.monotonic()
        run(step + chunk)
        step += chunk
        rate = chunk / (time.monotonic() - chunk_began)
        chunk = int(rate * (deadline - time.monotonic()))
        if chunk < rate * 60:
            break
        print(f"measured {rate:.2f} steps/s; training on to step {step + chunk:,}")
    print(f"training took {(time.monotonic() - began) / 60:.1f} minutes, {step:,} steps")
    return step


def decode(model, config: SearchConfig, encoder, inputs: list, batch: int, constraint) -> list:
    """Decoded target text of each input text, by `config`'s search, in input order."""
    translator = Translator(model, config, constraint=constraint)
    ids = [encoder.encode(text) + [EOS_ID] for text in inputs]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))  # similar lengths together
    outputs = [""] * len(ids)
    for start in range(0, len(order), batch):
        chosen = order[start : start + batch]
        width = max(len(ids[i]) for i in chosen)
        padded = np.zeros([len(chosen), width], np.int32)  # [B, S]
        for row, index in enumerate(chosen):
            padded[row, : len(ids[index])] = ids[index]
        best, _ = translator.search(tf.constant(padded))  # [B, K, L], best beam first
        for row, index in enumerate(chosen):
            outputs[index] = encoder.decode(strip_ids(best[row, 0].numpy()))
    return outputs


def write_lines(path: Path, lines: list) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def report_row(name: str, scores: dict) -> str:
    return (
        f"{name:<60} {scores['f1']:6.2f} {scores['precision']:6.2f} {scores['recall']:6.2f} "
        f"{scores['complete_match']:8.2f} {scores['valid']:6d} {scores['errors']:6d}"
    )


def search_config(args, problem) -> SearchConfig:
    """Beam search with the problem's defaults unless flags override them; says which."""
    config = SearchConfig.for_problem(
        problem, beam_size=args.beam_size, alpha=args.alpha, extra_length=args.extra_length
    )
    defaults = (problem.beam_size, problem.alpha, problem.extra_decode_length)
    same = (config.beam_size, config.alpha, config.extra_length) == defaults
    print(
        f"decoding with beam {config.beam_size}, alpha {config.alpha}, input + "
        f"{config.extra_length} tokens ({'the paper' if same else 'NOT the paper'}: beam "
        f"{defaults[0]}, alpha {defaults[1]}, input + {defaults[2]})"
    )
    return config


def parse(model, problem, config, constraint, encoder, inputs, gold, args, name: str) -> list:
    """Decodes `inputs` with `config`; writes and returns the trees, with `gold`'s tags on."""
    began = time.monotonic()
    outputs = decode(model, config, encoder, inputs, args.decode_batch, constraint)
    seconds = time.monotonic() - began
    well_formed = sum(_well_formed(out, text, problem.order) for out, text in zip(outputs, inputs))
    print(
        f"{name}: decoded {len(inputs)} sentences in {seconds:.0f}s "
        f"({len(inputs) / seconds:.2f} sentences/s, {args.decode_batch} per search); "
        f"{well_formed} outputs were well-formed trees over the words, the rest were repaired"
    )
    write_lines(Path(args.work_dir) / f"{name}.linearized", outputs)
    parsed = [
        problem.outputs([out], text, reference)[0]
        for out, text, reference in zip(outputs, inputs, gold)
    ]
    write_lines(Path(args.work_dir) / name, parsed)
    return parsed


def evaluate_split(split, model, problem, config, data_dir, raw_dir, args, title) -> None:
    """Parses `split` every way asked for and prints the EVALB table of each against gold."""
    work = Path(args.work_dir)
    gold = problem.reference_trees(split, data_dir, raw_dir, raw=args.ptb_output)
    inputs = problem.reference_inputs(gold)
    write_lines(work / f"{split}.gold", gold)
    encoder = problem.encoders(data_dir)["inputs"]
    constraint = problem.search_constraint(data_dir)
    rows = {
        f"{title}, beam {config.beam_size}, constrained": parse(
            model, problem, config, constraint, encoder, inputs, gold, args, f"{split}.model"
        )
    }
    if args.unconstrained:
        rows["the same, unconstrained search"] = parse(
            model, problem, config, None, encoder, inputs, gold, args, f"{split}.unconstrained"
        )
    if args.greedy:
        greedy = SearchConfig(method="greedy", extra_length=config.extra_length)
        rows["the same, greedy (unconstrained)"] = parse(
            model, problem, greedy, None, encoder, inputs, gold, args, f"{split}.greedy"
        )
    tags = [trees.tags(trees.preprocess(trees.parse_tree(tree))) for tree in gold]
    rows["right-branching baseline"] = [
        trees.to_string(trees.right_branching(text.split(), tag)) for text, tag in zip(inputs, tags)
    ]
    if args.ptb_output:
        rows["right-branching baseline"] = [f"( {t} )" for t in rows["right-branching baseline"]]
    write_lines(work / f"{split}.right_branching", rows["right-branching baseline"])
    print(
        f"\nWSJ sample {split} ({len(gold)} sentences), EVALB COLLINS.prm, gold POS tags\n"
        f"{'':<60} {'F1':>6} {'P':>6} {'R':>6} {'complete':>8} {'valid':>6} {'errors':>6}"
    )
    for name, parsed in rows.items():
        print(report_row(name, problem.score(parsed, gold)))
    print(f"trees in {work}/{split}.{{gold,model,right_branching}}\n")


def main() -> None:
    args = parse_args()
    work = Path(args.work_dir)
    data_dir, output_dir = str(work / "data"), str(work / "run")
    problem = problems.get(args.problem)
    problem.ptb_output = args.ptb_output
    raw_dir = str(Path(args.shared_data) / "wsj_sample")
    metadata = problem.generate_data(data_dir, raw_dir, vocab_size=args.vocab_size)
    counts = {split: info["examples"] for split, info in sorted(metadata["splits"].items())}
    print(f"datagen ({metadata['status']}): {counts}, vocab {args.vocab_size}")

    steps = train(args, data_dir, output_dir)
    model, title = trained_model(args, data_dir, output_dir, steps)
    config = search_config(args, problem)
    for split in args.splits.split(","):
        evaluate_split(split, model, problem, config, data_dir, raw_dir, args, title)


def trained_model(args, data_dir: str, output_dir: str, steps: int):
    """(model, its row title): the newest checkpoint, or the average of `--num_last`."""
    title = f"{args.hparams_set}, {steps} steps"
    if args.num_last == 1:
        return load_trained_model(args.problem, data_dir, output_dir).model, title
    averaged = average_last_checkpoints(output_dir, args.num_last, allow_fewer=True)
    print(f"decoding with the average of the last {args.num_last} checkpoints: {averaged}")
    model = load_trained_model(args.problem, data_dir, output_dir, checkpoint_path=averaged).model
    return model, f"{title}, last {args.num_last} averaged"


def _well_formed(output: str, text: str, order: str = "top_down") -> bool:
    """True when the output needs no repair: one root, matching labels, one leaf per word."""
    tokens, stack, leaves = output.split(), [], 0
    if order == "in_order":  # read back and written again unchanged: nothing was repaired
        words = text.split()
        tree = trees.delinearize(tokens, words, order=order) if words else None
        return tree is not None and trees.linearize(tree, leaves="word", order=order) == tokens
    for position, token in enumerate(tokens):
        if token.startswith("("):
            stack.append(token[1:])
        elif token.startswith(")"):
            if not stack or stack.pop() != token[1:]:
                return False
            if not stack and position != len(tokens) - 1:
                return False
        elif stack:
            leaves += 1
        else:
            return False
    return bool(tokens) and not stack and leaves == len(text.split())


if __name__ == "__main__":
    main()

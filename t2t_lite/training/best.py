"""The best checkpoint by a dev score (`--keep_best`), and early stopping (`--early_stopping`).

`--keep_best=loss|bleu` watches one score of every evaluation: the dev loss (lower is
better) or the BLEU of the `--eval_bleu_sentences` decoded dev sentences (higher is
better). An evaluation that beats the best so far (strictly) writes the model and the
optimizer as RUN/best/ckpt-STEP with its own `checkpoint` state file, the layout of
RUN/averaged, so that the decoder and the exporter take `--checkpoint_path=RUN/best` and
averaging takes `--output_dir=RUN/best`; RUN/best/best.json holds the metric, its value,
the step and all the dev metrics of that evaluation.

The new folder is written in full as RUN/best.tmp-* and then renamed into place (the old
one moved to RUN/best.old first, and removed after): a crash leaves the previous best
complete, never a half-written one, and the next start puts RUN/best.old back if the
crash came between the two renames.

`--early_stopping=N` stops the run after N evaluations in a row that did not beat the
best; the trainer then saves the final checkpoint, as at the end of any run.

A resumed run carries on where the run before left off: the best from best.json, and the
evaluations without improvement since from the `keep_best` record of manifest.json, the
ones up to the step resumed at (those after it are evaluated again). TensorBoard gets
`eval/best_<metric>`, `eval/best_step` and `eval/evaluations_without_improvement` at
every evaluation, and the text `eval/early_stopping` when the run stops.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import math
import os
import shutil
import tempfile
import time

import tensorflow as tf

from t2t_lite.runs import run_dir
from t2t_lite.runs.run_dir import RunDirError
from t2t_lite.training import averaging, saving

BEST_FOLDER = "best"
BEST_FILE = "best.json"
MANIFEST_KEY = "keep_best"
# The dev scores a run can keep the best of, and whether higher is better.
HIGHER_IS_BETTER = {"loss": False, "bleu": True}


def check_metric(keep_best: str, eval_bleu_sentences: int, problem) -> None:
    """Refuses --keep_best=bleu where no BLEU is computed during training.

    Raises:
        RunDirError: naming the flag and what to do.
    """
    if keep_best != "bleu":
        return
    if problem.eval_metric != "bleu":
        raise RunDirError(
            f"--keep_best=bleu: problem {problem.name} is not scored by BLEU (its dev score "
            f"is {problem.eval_metric}), so no BLEU is computed during training; use "
            "--keep_best=loss"
        )
    if eval_bleu_sentences < 1:
        raise RunDirError(
            "--keep_best=bleu: --eval_bleu_sentences=0 turns BLEU during training off; set it "
            "to at least 1 (default 200) or use --keep_best=loss"
        )


@dataclasses.dataclass
class BestTracker:
    """The best dev score of a run so far, and the evaluations since that did not beat it.

    Attributes:
        metric: "none" (keeps nothing, never stops), "loss" or "bleu".
        patience: `--early_stopping`; 0 never stops.
        folder: where the best goes: OUTPUT_DIR/best (a worker's own folder elsewhere).
        manifest_dir: the output_dir whose manifest.json records the state; None on the
            workers that do not own it.
        best: best.json's content, None before the first evaluation.
        without_improvement: the steps of the evaluations after the best that did not beat it.
        stopped_at: the step at which the run stopped early, if it did.
    """

    metric: str
    patience: int
    folder: str
    manifest_dir: str | None
    best: dict | None = None
    without_improvement: list = dataclasses.field(default_factory=list)
    stopped_at: int | None = None

    @classmethod
    def resume(cls, config, checkpoint_dir: str, step: int, is_chief: bool, printer=print):
        """The tracker of a run of `config` starting at `step`, with what the run kept before.

        Raises:
            RunDirError: when OUTPUT_DIR/best holds the best by another metric, or its
                best.json cannot be read.
        """
        folder = os.path.join(checkpoint_dir, BEST_FOLDER)
        manifest_dir = config.output_dir if is_chief else None
        tracker = cls(config.keep_best, config.early_stopping, folder, manifest_dir)
        if tracker.metric == "none":
            return tracker
        recover(folder, printer)
        tracker.best = read_best(os.path.join(config.output_dir, BEST_FOLDER))
        if tracker.best is None:
            return tracker
        if tracker.best["metric"] != tracker.metric:
            raise RunDirError(
                f"--keep_best={tracker.metric}: {folder} holds the best by "
                f"{tracker.best['metric']} (step {tracker.best['step']}); resume with "
                f"--keep_best={tracker.best['metric']}, or move that folder away to keep the "
                f"best by {tracker.metric} from now on"
            )
        previous = run_dir.load_manifest(config.output_dir).get(MANIFEST_KEY) or {}
        tracker.without_improvement = [
            s for s in previous.get("without_improvement", []) if tracker.best["step"] < s <= step
        ]
        if tracker.should_stop:
            tracker.stopped_at = previous.get("stopped_early_at")
            printer(
                f"early stopping: {len(tracker.without_improvement)} evaluations without "
                f"improvement of the dev {tracker.metric} up to step {step} "
                f"(--early_stopping={tracker.patience}); not training further. Raise "
                "--early_stopping to train on"
            )
        return tracker

    @property
    def should_stop(self) -> bool:
        return self.patience > 0 and len(self.without_improvement) >= self.patience

    def record(self) -> dict:
        """The `keep_best` record of manifest.json: the settings and the state."""
        found = {"metric": self.metric, "early_stopping": self.patience}
        if self.metric == "none":
            return found
        best = self.best or {}
        return dict(
            found,
            best_step=best.get("step"),
            best_value=best.get("value"),
            without_improvement=list(self.without_improvement),
            stopped_early_at=self.stopped_at,
        )

    def improves(self, value: float) -> bool:
        if self.best is None:
            return True
        if HIGHER_IS_BETTER[self.metric]:
            return value > self.best["value"]
        return value < self.best["value"]

    def observe(self, step: int, metrics: dict, checkpoint, writer, printer=print) -> None:
        """Writes the best if evaluation `step` beat it, then the summaries and the manifest.

        Args:
            step: the step just evaluated.
            metrics: its dev metrics (those of `trainer.evaluate`, and "bleu").
            checkpoint: the `tf.train.Checkpoint` of the model and the optimizer.
            writer: the eval summary writer.
        """
        if self.metric == "none":
            return
        value = float(metrics[self.metric])
        if self.improves(value):
            record = {
                "metric": self.metric,
                "value": value,
                "step": step,
                "checkpoint": f"{saving.CHECKPOINT_NAME}-{step}",
                "higher_is_better": HIGHER_IS_BETTER[self.metric],
                "metrics": {k: float(v) for k, v in metrics.items()},
                "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            }
            write_best(self.folder, checkpoint, record, self.best)
            self.best, self.without_improvement = record, []
            printer(
                f"eval step {step}: best {self.metric} so far, {value:.4f}: kept in {self.folder}"
            )
        else:
            self.without_improvement.append(step)
            limit = f" (stops at {self.patience})" if self.patience else ""
            printer(
                f"eval step {step}: {self.metric} {value:.4f} is not better than "
                f"{self.best['value']:.4f} (step {self.best['step']}); "
                f"{len(self.without_improvement)} evaluation(s) without improvement{limit}"
            )
        with writer.as_default(step=step):
            tf.summary.scalar(f"eval/best_{self.metric}", self.best["value"])
            tf.summary.scalar("eval/best_step", self.best["step"])
            tf.summary.scalar("eval/evaluations_without_improvement", len(self.without_improvement))
        writer.flush()
        self._update_manifest()

    def stop(self, step: int, writer, printer=print) -> None:
        """Records and reports that the run stops early at `step`."""
        self.stopped_at = step
        line = (
            f"early stopping at step {step}: {len(self.without_improvement)} evaluations "
            f"without improvement of the dev {self.metric} (--early_stopping={self.patience}); "
            f"the best, {self.best['value']:.4f} at step {self.best['step']}, is in {self.folder}"
        )
        printer(line)
        with writer.as_default(step=step):
            tf.summary.text("eval/early_stopping", line)
        writer.flush()
        self._update_manifest()

    def _update_manifest(self) -> None:
        if self.manifest_dir:
            run_dir.update_manifest(self.manifest_dir, {MANIFEST_KEY: self.record()})


def read_best(folder: str) -> dict | None:
    """best.json of best folder `folder`, or None when there is no best yet.

    Raises:
        RunDirError: when best.json cannot be read.
    """
    path = os.path.join(folder, BEST_FILE)
    if not os.path.exists(path):
        return None
    try:
        with open(path) as handle:
            found = json.load(handle)
        if not isinstance(found, dict):
            raise ValueError("it is not a JSON object")
        missing = {"metric", "value", "step"} - set(found)
        if missing:
            raise ValueError(f"it has no {', '.join(sorted(missing))}")
        _check_value(found["value"])
        return found
    except (OSError, ValueError, TypeError) as error:
        raise RunDirError(
            f"cannot read {path} ({type(error).__name__}: {error}); move {folder} away (the "
            "run then keeps a new best) and rerun"
        ) from None


def _check_value(value) -> None:
    """Refuses a best value that no score can be compared with (text, null, NaN, inf).

    Refused rather than taken as no best: the next evaluation would then replace the
    folder, and with it the checkpoint kept there, on the strength of a broken file.
    """
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not is_number or not math.isfinite(value):
        raise ValueError(f'its "value" is {json.dumps(value)}, not a finite number')


def write_best(folder: str, checkpoint, record: dict, previous: dict | None) -> str:
    """Writes `checkpoint` and best.json into `folder` through a temporary folder and renames.

    Returns:
        The prefix of the checkpoint written, `folder`/ckpt-STEP.

    Raises:
        TrainingStopped: when it cannot be written (a full disk); `folder` keeps the
            previous best, and the temporary folder is removed.
    """
    parent, name = os.path.dirname(folder), record["checkpoint"]
    staging, old = None, folder + ".old"
    try:
        staging = tempfile.mkdtemp(prefix=f"{BEST_FOLDER}.tmp-", dir=parent)
        checkpoint.write(os.path.join(staging, name))
        averaging.write_checkpoint_state(staging, name)
        with open(os.path.join(staging, BEST_FILE), "w") as handle:
            handle.write(json.dumps(record, indent=2) + "\n")
        if os.path.isdir(folder):
            shutil.rmtree(old, ignore_errors=True)
            os.replace(folder, old)
        os.replace(staging, folder)
    except (tf.errors.OpError, OSError) as error:
        if staging:
            shutil.rmtree(staging, ignore_errors=True)
        if not os.path.isdir(folder) and os.path.isdir(old):
            os.replace(old, folder)
        kept = (
            f"{folder} keeps the best of step {previous['step']}"
            if previous
            else "no best was written before"
        )
        raise saving.TrainingStopped(
            f"cannot write the best checkpoint {os.path.join(folder, name)}: "
            f"{saving.error_cause(error)}; {kept}. Free space (or fix the folder) and rerun "
            "the same command to resume"
        ) from None
    shutil.rmtree(old, ignore_errors=True)
    return os.path.join(folder, name)


def recover(folder: str, printer=print) -> None:
    """Clears what a crash while writing best `folder` left: temporaries, or a best set aside."""
    parent, old = os.path.dirname(folder), folder + ".old"
    for staging in glob.glob(os.path.join(parent, f"{BEST_FOLDER}.tmp-*")):
        shutil.rmtree(staging, ignore_errors=True)
        printer(f"removed {staging}, the leftover of an interrupted write of {folder}")
    if os.path.isdir(old):
        if os.path.isdir(folder):
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(old, folder)
            printer(f"put back {folder} from {old}, set aside by an interrupted write")

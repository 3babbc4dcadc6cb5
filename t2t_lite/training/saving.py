"""Writing checkpoints without leaving a run worse than before: full disks, killed saves, NaNs.

A `tf.train.CheckpointManager` save writes `ckpt-N_temp/` first, merges it into
`ckpt-N.index` and `ckpt-N.data-*`, then rewrites the `checkpoint` state file through a
temporary file. A save that fails (a full disk) or is killed leaves those temporaries,
which keep a full disk full. `save_checkpoint` removes the partial files of a failed save
and stops the run naming the checkpoint that is still good; `remove_save_leftovers`
clears what killed saves left when a run starts. `check_finite` stops a run whose loss
has diverged before it can save NaN weights over the last good checkpoint.
"""

from __future__ import annotations

import errno
import math
import os
import re
import shutil

import tensorflow as tf

from t2t_lite.runs.run_dir import RunDirError

CHECKPOINT_NAME = "ckpt"
# A save's temporaries: its shard folder, tf.io's atomic write of the state file, and
# run_dir.write_atomic's files (tempfile's "tmp" prefix and our ".tmp" suffix).
_TEMP_FOLDER = re.compile(rf"^{CHECKPOINT_NAME}-\d+_temp$")
_TEMP_FILE = re.compile(r"^(tmp[^/]*\.tmp|checkpoint\.tmp[0-9a-f]{32})$")


class TrainingStopped(RunDirError):
    """The run stopped on a fault it cannot train through; the message names the last
    good checkpoint and what to do."""


def remove_save_leftovers(folder: str, printer=print) -> list:
    """Removes the temporaries of killed saves from checkpoint folder `folder`; their names.

    Only the patterns a save writes (`ckpt-N_temp/`, `tmp*.tmp`, `checkpoint.tmp<hex>`)
    directly in `folder` are removed; nothing else is touched.
    """
    if not os.path.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if _TEMP_FOLDER.match(name) and os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        elif _TEMP_FILE.match(name) and os.path.isfile(path) and not os.path.islink(path):
            os.remove(path)
        else:
            continue
        removed.append(name)
    if removed:
        names = ", ".join(removed)
        printer(f"removed {len(removed)} leftover(s) of interrupted saves in {folder}: {names}")
    return removed


def save_checkpoint(manager, step: int) -> str:
    """Saves checkpoint `step` with `manager`; returns its path.

    Raises:
        TrainingStopped: when the save fails (a full disk, a folder that became read-only);
            its partial files are removed first, and the message names the folder, the
            cause and the last good checkpoint, which is intact.
    """
    try:
        return manager.save(checkpoint_number=step)
    except (tf.errors.OpError, OSError) as error:
        folder = manager.directory
        prefix = os.path.join(folder, f"{CHECKPOINT_NAME}-{step}")
        last = tf.train.latest_checkpoint(folder)
        if last != prefix:  # the state file never named it: its files are partial
            for path in tf.io.gfile.glob(prefix + ".*"):
                os.remove(path)
        remove_save_leftovers(folder, printer=lambda _: None)
        kept = (
            f"the last good checkpoint {last} is intact"
            if last
            else "no earlier checkpoint was written"
        )
        raise TrainingStopped(
            f"cannot write checkpoint {prefix} in {folder}: {error_cause(error)}; its partial "
            f"files were removed and {kept}. Free space (or fix the folder) and rerun the "
            "same command to resume"
        ) from None


def error_cause(error: Exception) -> str:
    """A short lower-case cause of a failed write ("no space left on device")."""
    text = str(error)
    if getattr(error, "errno", None) == errno.ENOSPC or "No space left on device" in text:
        return "no space left on device"
    if getattr(error, "strerror", None):
        return error.strerror.lower()
    return text.strip().splitlines()[-1][-200:] if text.strip() else type(error).__name__


def check_finite(step: int, result: dict, folder: str) -> None:
    """Stops the run when update `step`'s loss or gradient norm is NaN or infinite.

    Called where the loss is fetched anyway (log and save points) and always before a
    save: the update that saw a non-finite gradient wrote non-finite weights.

    Raises:
        TrainingStopped: naming the step, the values and the newest checkpoint.
    """
    tokens = max(float(result["tokens"]), 1.0)
    loss, grad_norm = float(result["loss"]) / tokens, float(result["grad_norm"])
    if math.isfinite(loss) and math.isfinite(grad_norm):
        return
    last = tf.train.latest_checkpoint(folder)
    kept = f"the newest checkpoint {last} is from before" if last else "no checkpoint was written"
    raise TrainingStopped(
        f"training diverged at step {step}: loss {loss}, gradient norm {grad_norm}; stopped "
        f"without saving, {kept}. Lower the learning_rate hparam (or raise warmup_steps, set "
        "clip_grad_norm) and rerun: it resumes from that checkpoint"
    )

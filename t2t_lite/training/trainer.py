"""`train_and_evaluate`: the whole training run behind `python -m t2t_lite.trainer`.

The loop: build the model and Adam under the strategy's scope, restore the newest
checkpoint of `output_dir` if there is one, then repeat {update, log every
`log_every`, evaluate every `eval_every`, save every `save_every`} until `train_steps`
optimizer updates have been made. Checkpoints hold the model, the optimizer (with its
step counter, the global step) and nothing else.

Data order: a run from scratch shuffles the training data with `seed`, so two such runs
see the same batches. A run that resumes at step k shuffles with a seed derived from
(`seed`, k) (`data_seed`): it does not replay the batches the run before it started
with, and two resumes from the same checkpoint still see the same batches.

Learning rate: Keras evaluates the schedule at the count of updates made before the
current one, so update n (n = 1, 2, ...) uses `TransformerSchedule(n - 1)`, as in
tensor2tensor, which reads its global step before incrementing it (the schedule takes
step 0 as 1, so updates 1 and 2 share a rate). The `lr` logged at step n is that rate,
the one update n applied.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import time

import keras
import tensorflow as tf

from t2t_lite import hparams as hparams_lib
from t2t_lite import problems as problems_lib
from t2t_lite.models import build_transformer
from t2t_lite.problems import pipeline
from t2t_lite.training import (
    bleu_eval,
    checkpoints,
    cpu_features,
    distribute,
    host_memory,
    run_dir,
)
from t2t_lite.training.progress import Progress
from t2t_lite.training.schedule import TransformerSchedule
from t2t_lite.training.step import EVAL_KEYS, TrainStep, make_optimizer


@dataclasses.dataclass
class RunConfig:
    """Where and how long to train; everything that is not an hparam."""

    problem: str
    output_dir: str
    data_dir: str = ""
    train_steps: int = 1000
    train_minutes: float = 0.0  # wall-clock budget of this call, start-up included; 0 = none
    eval_steps: int = 0  # batches per evaluation; 0 = the whole dev split
    eval_every: int = 500
    save_every: int = 500
    keep_checkpoints: int = 5
    log_every: int = 100
    strategy: str = "auto"
    num_gpus: int | None = None
    cpu_replicas: int = 1
    seed: int = 1
    # XLA for the forward and backward pass: True, False, or None = where it pays: on
    # GPUs and TPUs, not on CPUs (tools/benchmark_train.py measures no gain there).
    jit_compile: bool | None = None
    # BLEU during training (problems whose eval_metric is "bleu"): dev sentences decoded at
    # every evaluation (0 = off) and the search, "beam" (the problem's) or "greedy".
    eval_bleu_sentences: int = 200
    eval_decode_method: str = "beam"

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Raises RunDirError naming the first field (flag) whose value cannot work."""
        for name, (minimum, meaning) in _MINIMUMS.items():
            value = getattr(self, name)
            if value is not None and value < minimum:
                raise run_dir.RunDirError(f"--{name}={value}: must be >= {minimum} ({meaning})")
        if self.eval_decode_method not in ("beam", "greedy"):
            raise run_dir.RunDirError(
                f"--eval_decode_method={self.eval_decode_method}: must be beam or greedy"
            )


# RunConfig field: (smallest value that works, what the field counts).
_MINIMUMS = {
    "train_steps": (0, "optimizer updates in all"),
    "train_minutes": (0, "0 = no time limit"),
    "eval_steps": (0, "0 = the whole dev split"),
    "eval_every": (1, "steps between evaluations"),
    "save_every": (1, "steps between checkpoints"),
    "keep_checkpoints": (1, "checkpoints kept on disk"),
    "log_every": (1, "steps between progress lines"),
    "num_gpus": (0, "GPUs to use; unset = all visible"),
    "cpu_replicas": (1, "logical CPU devices to mirror over"),
    "eval_bleu_sentences": (0, "0 = no BLEU during training"),
}


def accumulation_steps(hp, num_replicas: int) -> int:
    """Batches per replica per update so that an update sees `effective_batch_tokens`."""
    if hp.effective_batch_tokens <= 0:
        return 1
    return max(1, math.ceil(hp.effective_batch_tokens / (hp.batch_size * num_replicas)))


def make_schedule(hp) -> TransformerSchedule:
    """Eq. 3 with the hparams' width, warmup and scale."""
    return TransformerSchedule(hp.hidden_size, hp.warmup_steps, hp.learning_rate)


def build_model_and_optimizer(hp, problem, data_dir, strategy):
    """Creates the model and an Adam built on its variables, under `strategy.scope()`."""
    vocab_size, target_vocab_size = problem.vocab_sizes(data_dir)
    keras.mixed_precision.set_dtype_policy(hp.dtype_policy)
    with strategy.scope():
        model = build_transformer(
            hp, vocab_size, target_vocab_size, problem.target_non_copy_ids(data_dir)
        )
        optimizer = make_optimizer(hp, make_schedule(hp))
        optimizer.build(model.trainable_variables)
    return model, optimizer


def data_seed(seed: int, start_step: int) -> int:
    """The shuffling seed of a run that starts at `start_step`: `seed` itself from scratch.

    A resumed run gets a seed of its own for each start step (see the module docstring).
    """
    if start_step == 0:
        return seed
    digest = hashlib.sha256(f"{seed}:{start_step}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


def train_data(problem, config: RunConfig, hp, strategy, start_step: int, pad_to_bucket: bool):
    """The distributed training batches of a run that starts at `start_step`."""
    seed = data_seed(config.seed, start_step)
    return strategy.distribute_datasets_from_function(
        lambda context: problem.dataset(
            "train",
            config.data_dir,
            hp,
            seed=seed,
            input_context=context,
            pad_to_bucket=pad_to_bucket,
        )
    )


def restore_latest(checkpoint, output_dir: str) -> str | None:
    """Restores the newest checkpoint of `output_dir` into `checkpoint`; returns its path.

    The model's variables are compared with the checkpoint's first (names and shapes,
    `checkpoints.checkpoint_mismatches`), so a checkpoint of another model is refused
    before anything is restored.

    Raises:
        RunDirError: when the checkpoint does not fit the model.
    """
    latest = tf.train.latest_checkpoint(output_dir)
    if not latest:
        return None
    refusal = (
        f"cannot resume from {latest}: it does not fit the model these hparams build "
        "({}); it may come from another t2t_lite release. Train into a new --output_dir."
    )
    try:
        mismatches, total = checkpoints.checkpoint_mismatches(checkpoint.model, latest)
    except checkpoints.CheckpointError as error:
        raise run_dir.RunDirError(refusal.format(error)) from None
    if mismatches:
        raise run_dir.RunDirError(
            refusal.format(checkpoints.describe_mismatches(mismatches, total))
        )
    try:
        checkpoint.restore(latest).assert_existing_objects_matched()
    except (AssertionError, ValueError, tf.errors.OpError) as error:
        raise run_dir.RunDirError(refusal.format(str(error).splitlines()[0][:300])) from None
    return latest


def worker_dirs(strategy, output_dir: str) -> tuple:
    """(checkpoint folder, whether to write summaries and run files) for this worker.

    Under MultiWorkerMirroredStrategy every worker takes part in saving, but only the
    chief writes into `output_dir`; the others write to a folder of their own.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return output_dir, True
    task_type, task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in resolver.cluster_spec().as_dict()
    if task_type in (None, "chief") or (task_type == "worker" and task_id == 0 and not has_chief):
        return output_dir, True
    return os.path.join(output_dir, "workers", f"{task_type}_{task_id}"), False


def checkpoint_manager(model, optimizer, output_dir, keep):
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(
        checkpoint, output_dir, max_to_keep=keep, step_counter=optimizer.iterations
    )
    return checkpoint, manager


def use_xla(jit_compile: bool | None, strategy) -> bool:
    """`jit_compile`, or when None, whether the strategy's devices are GPUs or TPUs."""
    if jit_compile is not None:
        return jit_compile
    try:
        devices = strategy.extended.worker_devices
    except (AttributeError, RuntimeError):  # the default strategy places ops by itself
        devices = [device.name for device in tf.config.list_logical_devices()]
    return any(":GPU:" in device.upper() or ":TPU:" in device.upper() for device in devices)


class CompileLog:
    """Reports the compilations of the training step: how many are possible, and when.

    Without XLA the step is traced once for any batch shape. With XLA it is compiled
    once per distinct (sentences, source, target) shape of a micro-batch, and the
    training pipeline pads inputs and targets to their length bucket's boundary, so
    there are at most as many shapes as buckets. The step records the shapes it has met
    in `TrainStep.seen_shapes` inside the graph; they are read at reports only.
    """

    def __init__(self, step_fns, xla: bool, buckets: int, printer):
        self.step_fns, self.xla, self.buckets, self.printer = step_fns, xla, buckets, printer
        self.reported = 0
        if xla:
            printer(
                f"train step: XLA, compiled once per batch shape: at most {buckets} shapes "
                "(one per length bucket; inputs and targets padded to its boundary)"
            )
        else:
            printer("train step: tf.function without XLA, traced once for all batch shapes")

    def first_update(self, seconds: float) -> None:
        """Prints the time of the first update of this run (tracing and compilation)."""
        self.reported = self.compiled()
        what = f"tracing and {self.reported} XLA compilation(s)" if self.xla else "tracing"
        self.printer(f"first update: {seconds:.1f} s, including {what}")

    def compiled(self) -> int:
        """Distinct micro-batch shapes met so far (each one XLA compilation)."""
        return int(self.step_fns.seen_shapes.value().shape[0]) if self.xla else 0

    def report(self) -> dict:
        """Prints the count when it grew since the last report; returns summary values."""
        if not self.xla:
            return {}
        count = self.compiled()
        if count > self.reported:
            self.reported = count
            self.printer(f"XLA: {count} of at most {self.buckets} batch shapes compiled so far")
        return {"xla_compilations": float(count)}


def _print_batching(hp, strategy, accumulate, printer):
    replicas = strategy.num_replicas_in_sync
    target = (
        f"effective_batch_tokens {hp.effective_batch_tokens:,}"
        if hp.effective_batch_tokens
        else "effective_batch_tokens 0: one batch per update"
    )
    printer(
        f"batching: {hp.batch_size:,} tokens per replica x {replicas} replicas = "
        f"{hp.batch_size * replicas:,} global tokens per batch; x {accumulate} accumulated = "
        f"{hp.batch_size * replicas * accumulate:,} effective tokens per update ({target})"
    )


def evaluate(step_fns, dataset, strategy, eval_steps: int) -> dict:
    """Sums the token statistics over the dev batches; returns loss, accuracy, perplexity."""
    totals = dict.fromkeys(EVAL_KEYS, 0.0)
    for count, batch in enumerate(strategy.experimental_distribute_dataset(dataset)):
        if eval_steps and count >= eval_steps:
            break
        for key, value in step_fns.evaluate(batch).items():
            totals[key] += float(value)
    tokens = max(totals["tokens"], 1.0)
    return {
        "loss": totals["loss"] / tokens,
        "accuracy": totals["correct"] / tokens,
        "perplexity": math.exp(min(totals["nll"] / tokens, 50.0)),
        "tokens": totals["tokens"],
    }


def _write_scalars(writer, step: int, values: dict) -> None:
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, value)
    writer.flush()


def train_and_evaluate(config: RunConfig, hp, printer=print) -> dict:
    """Trains `config.problem` with hparams `hp` and returns the last evaluation metrics.

    Rerunning with the same `output_dir` resumes from its newest checkpoint, with a
    fresh shuffle of the training data (module docstring). Freed host memory stays in
    the process for the next update (`host_memory.retain_freed_memory`).

    Raises:
        RunDirError: a field of `config` that cannot work, an output_dir that cannot
            be written or resumed, or a strategy that cannot be set up here.
        DataError: the problem's data is missing or incomplete under `data_dir`.
    """
    config.check()
    host_memory.retain_freed_memory()
    # The time budget counts start-up and evaluations too.
    deadline = time.monotonic() + config.train_minutes * 60 if config.train_minutes else None
    hp = hparams_lib.validate(hp)
    problem = problems_lib.get(config.problem)
    run_dir.prepare(config.output_dir)
    run_dir.check_resume(config.output_dir, hp, config.problem)
    try:
        strategy = distribute.make_strategy(config.strategy, config.num_gpus, config.cpu_replicas)
    except ValueError as error:  # StrategyError, or a TPU resolver that finds no TPU
        raise run_dir.RunDirError(f"cannot set up the distribution strategy: {error}") from None
    keras.utils.set_random_seed(config.seed)
    accumulate = accumulation_steps(hp, strategy.num_replicas_in_sync)
    _print_batching(hp, strategy, accumulate, printer)

    model, optimizer = build_model_and_optimizer(hp, problem, config.data_dir, strategy)
    checkpoint_dir, is_chief = worker_dirs(strategy, config.output_dir)
    checkpoint, manager = checkpoint_manager(
        model, optimizer, checkpoint_dir, config.keep_checkpoints
    )
    # Every worker resumes from the chief's newest checkpoint (they hold the same weights).
    latest = restore_latest(checkpoint, config.output_dir)
    step = int(optimizer.iterations.numpy())
    if latest:
        printer(
            f"resumed from {latest} at step {step}; training data shuffled with seed "
            f"{data_seed(config.seed, step)} (from seed {config.seed} and step {step})"
        )
    if is_chief:
        run_dir.write_run_files(
            config.output_dir,
            hp,
            {
                "problem": config.problem,
                "seed": config.seed,
                "data_fingerprint": problem.fingerprint(config.data_dir),
                "strategy": type(strategy).__name__,
                "replicas": strategy.num_replicas_in_sync,
                "accumulation_steps": accumulate,
                "parameters": model.count_params(),
            },
        )
    printer(f"model: {model.count_params():,} parameters, {hp.dtype_policy}")
    warning = cpu_features.bfloat16_warning(hp.dtype_policy, on_cpu=not use_xla(None, strategy))
    if warning:
        printer(warning)

    schedule = make_schedule(hp)
    xla = use_xla(config.jit_compile, strategy)
    step_fns = TrainStep(
        model,
        optimizer,
        strategy,
        hp.label_smoothing,
        accumulate,
        hp.clip_grad_norm,
        xla,
    )
    buckets = len(
        pipeline.bucket_boundaries(hp.min_length_bucket, hp.max_length, hp.length_bucket_step)
    )
    compile_log = CompileLog(step_fns, xla, buckets, printer)
    iterator = iter(train_data(problem, config, hp, strategy, step, pad_to_bucket=xla))
    eval_data = problem.dataset("dev", config.data_dir, hp)
    train_writer = tf.summary.create_file_writer(os.path.join(checkpoint_dir, "train"))
    eval_writer = tf.summary.create_file_writer(os.path.join(checkpoint_dir, "eval"))
    bleu_evaluator = bleu_eval.make_bleu_evaluator(
        model, problem, config.data_dir, config.eval_bleu_sentences, config.eval_decode_method
    )

    progress = Progress(config.train_steps, step, printer, deadline=deadline)
    every_steps = (config.log_every, config.save_every, config.eval_every)
    first = True
    metrics = {}
    last = step >= config.train_steps
    while not last:
        began = time.monotonic()
        result = step_fns.train(iterator)
        step += 1
        progress.add_tokens(result["tokens"])  # a tensor: no wait for the host here
        if first:
            compile_log.first_update(time.monotonic() - began)
            first = False
        out_of_time = deadline is not None and time.monotonic() >= deadline
        last = step >= config.train_steps or out_of_time
        boundary = last or any(step % every == 0 for every in every_steps)
        if boundary and step_fns.loss_scaled:
            # Under float16 loss scaling an update whose gradients overflowed was skipped:
            # the optimizer's count of applied updates is the step.
            applied = int(optimizer.iterations.numpy())
            if applied != step:
                printer(
                    f"{step - applied} update(s) skipped before step {applied + 1}: "
                    "non-finite gradients; loss scale lowered to "
                    f"{float(optimizer.dynamic_scale.numpy()):g}"
                )
                step, last = applied, False
                continue
        if out_of_time:
            printer(f"time budget of {config.train_minutes:g} minutes reached at step {step}")
        if step % config.log_every == 0 or last:
            tokens = max(float(result["tokens"]), 1.0)
            values = {
                "loss": float(result["loss"]) / tokens,
                "lr": float(schedule(step - 1)),  # the rate update `step` used
                "grad_norm": float(result["grad_norm"]),
            }
            if "loss_scale" in result:
                values["loss_scale"] = float(result["loss_scale"])
            rate = progress.report(step, values)
            extra = compile_log.report()
            _write_scalars(train_writer, step, dict(values, tokens_per_sec=rate, **extra))
        if step % config.save_every == 0 or last:
            manager.save(checkpoint_number=step)
        if step % config.eval_every == 0 or last:
            metrics = evaluate(step_fns, eval_data, strategy, config.eval_steps)
            printer(
                f"eval step {step}: loss {metrics['loss']:.4f} | accuracy "
                f"{metrics['accuracy']:.4f} | perplexity {metrics['perplexity']:.3f}"
            )
            _write_scalars(
                eval_writer,
                step,
                {k: metrics[k] for k in ("loss", "accuracy", "perplexity")},
            )
            metrics.update(bleu_eval.log_bleu(bleu_evaluator, eval_writer, step, printer))
    if not metrics:
        metrics = evaluate(step_fns, eval_data, strategy, config.eval_steps)
        printer(f"eval step {step}: accuracy {metrics['accuracy']:.4f} (training was complete)")
    return metrics

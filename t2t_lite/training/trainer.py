"""`train_and_evaluate`: the whole training run behind `python -m t2t_lite.trainer`.

The loop: build the model and Adam under the strategy's scope, restore the newest
checkpoint of `output_dir` if there is one (else warm-start the model from
`warm_start_from` if set, `warm_start`), then repeat {update, log every `log_every`,
evaluate every `eval_every` (and keep the best, `best`), save every `save_every`} until
`train_steps` updates have been made or early stopping ends it. Checkpoints hold the
model, the optimizer (with its step counter, the global step) and nothing else.

Data order: a run from scratch shuffles the training data with `seed`, so two such runs
see the same batches; a resumed run shuffles with a seed of its own (`resume.data_seed`).

Learning rate: Keras evaluates the schedule at the count of updates made before the
current one, so update n (n = 1, 2, ...) uses `TransformerSchedule(n - 1)`, as in
tensor2tensor, which reads its global step before incrementing it (the schedule takes
step 0 as 1, so updates 1 and 2 share a rate). The `lr` logged at step n is that rate,
the one update n applied.

Every evaluation also writes the attention images of the first dev example
(`t2t_lite.training.attention_images`).
"""

from __future__ import annotations

import dataclasses
import os
import time

import keras
import tensorflow as tf

from t2t_lite import hparams as hparams_lib
from t2t_lite import problems as problems_lib
from t2t_lite.models import build_transformer
from t2t_lite.problems import pipeline
from t2t_lite.runs import run_dir
from t2t_lite.runs.progress import Progress
from t2t_lite.training import (
    best,
    bleu_eval,
    cpu_features,
    distribute,
    host_memory,
    saving,
    warm_start,
)
from t2t_lite.training.attention_images import attention_example, write_attention_images
from t2t_lite.training.compile_log import CompileLog, use_xla
from t2t_lite.training.resume import data_seed, resume_or_start, worker_dirs
from t2t_lite.training.run_config import RunConfig, resolve
from t2t_lite.training.schedule import TransformerSchedule
from t2t_lite.training.step import (
    TrainStep,
    accumulation_steps,
    batching_line,
    evaluate,
    make_optimizer,
)

__all__ = ["RunConfig", "train_and_evaluate"]


def make_schedule(hp, train_steps: int | None = None) -> TransformerSchedule:
    """Eq. 3 with the hparams' width, warmup and scale, and the cooldown of a run of
    `train_steps` updates (default: the hparams' train_steps)."""
    total = hp.train_steps if train_steps is None else train_steps
    return TransformerSchedule(
        hp.hidden_size,
        hp.warmup_steps,
        hp.learning_rate,
        total_steps=total,
        cooldown_steps=round(hp.cooldown_fraction * total),
    )


def build_model_and_optimizer(hp, problem, data_dir, strategy, schedule=None):
    """Creates the model and an Adam built on its variables, under `strategy.scope()`.

    `schedule`: the run's learning rate (default: `make_schedule(hp)`)."""
    vocab_size, target_vocab_size = problem.vocab_sizes(data_dir)
    keras.mixed_precision.set_dtype_policy(hp.dtype_policy)
    with strategy.scope():
        model = build_transformer(
            hp, vocab_size, target_vocab_size, problem.target_non_copy_ids(data_dir)
        )
        optimizer = make_optimizer(hp, schedule or make_schedule(hp))
        optimizer.build(model.trainable_variables)
    return model, optimizer


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


def _write_scalars(writer, step: int, values: dict) -> None:
    with writer.as_default(step=step):
        for name, value in values.items():
            tf.summary.scalar(name, value)
    writer.flush()


@dataclasses.dataclass
class _Run:
    """What the loop works with, built once by `_set_up`."""

    config: RunConfig
    hp: object
    problem: object
    strategy: object
    model: object
    optimizer: object
    manager: object
    step_fns: TrainStep
    schedule: TransformerSchedule
    compile_log: CompileLog
    progress: Progress
    iterator: object
    eval_data: object
    train_writer: object
    eval_writer: object
    bleu_evaluator: object
    best: best.BestTracker
    attention_example: dict | None
    printer: object
    deadline: float | None
    step: int
    run_files: dict | None = None  # the manifest a resumed run writes at its first save


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
    run = _set_up(config, hp, printer)
    metrics = _loop(run)
    if not metrics:
        metrics = _dev_metrics(run)
        printer(f"eval step {run.step}: accuracy {metrics['accuracy']:.4f} (training was complete)")
    return metrics


def _set_up(config: RunConfig, hp, printer) -> _Run:
    """Checks the settings, builds or restores the model, and opens data and summaries."""
    config.check()
    host_memory.retain_freed_memory()
    # The time budget counts start-up and evaluations too.
    deadline = time.monotonic() + config.train_minutes * 60 if config.train_minutes else None
    hp = hparams_lib.validate(hp)
    budget = "--train_steps" if config.train_steps is not None else "the hparams set's train_steps"
    config = resolve(config, hp)
    printer(
        f"data_dir {config.data_dir or '(none)'} | output_dir {config.output_dir} | "
        f"train_steps {config.train_steps:,} ({budget})"
    )
    problem = problems_lib.get(config.problem)
    best.check_metric(config.keep_best, config.eval_bleu_sentences, problem)
    problem.fingerprint(config.data_dir)  # DataError for missing data, before any folder is made
    problem.verify(config.data_dir)  # and for shards whose bytes are not datagen's
    source = warm_start.find_source(config)  # None unless a new run warm-starts
    created = not os.path.isdir(config.output_dir)
    run_dir.prepare(config.output_dir)
    run_dir.check_resume(config.output_dir, hp, config.problem)
    try:
        strategy = distribute.make_strategy(config.strategy, config.num_gpus, config.cpu_replicas)
    except ValueError as error:  # StrategyError, or a TPU resolver that finds no TPU
        raise run_dir.RunDirError(f"cannot set up the distribution strategy: {error}") from None
    keras.utils.set_random_seed(config.seed)
    accumulate = accumulation_steps(hp, strategy.num_replicas_in_sync)
    printer(batching_line(hp, strategy.num_replicas_in_sync, accumulate))

    # One schedule: the optimizer applies it, the log reports it.
    schedule = make_schedule(hp, config.train_steps)
    model, optimizer = build_model_and_optimizer(hp, problem, config.data_dir, strategy, schedule)
    checkpoint_dir, is_chief = worker_dirs(strategy, config.output_dir)
    _, manager, latest = resume_or_start(
        model, optimizer, checkpoint_dir, config.output_dir, config.keep_checkpoints, printer
    )
    step = int(optimizer.iterations.numpy())
    if latest:
        printer(
            f"resumed from {latest} at step {step}; training data shuffled with seed "
            f"{data_seed(config.seed, step)} (from seed {config.seed} and step {step})"
        )
    try:
        warm = warm_start.for_run(model, source, config, problem, latest, printer)
    except run_dir.RunDirError:
        if created and not os.listdir(config.output_dir):
            os.rmdir(config.output_dir)  # a source that does not fit leaves nothing behind
        raise
    tracker = best.BestTracker.resume(config, checkpoint_dir, step, is_chief, printer)
    run_files = None
    if is_chief:
        run_files = _run_manifest(config, problem, strategy, accumulate, model, warm)
        run_dir.check_vocabulary(config.output_dir, run_files["vocabulary"])
        if not latest:  # a resumed run's files describe its checkpoints until it saves one
            _write_run_files(config.output_dir, hp, run_files, tracker)
            run_files = None
    printer(f"model: {model.count_params():,} parameters, {hp.dtype_policy}")
    warning = cpu_features.bfloat16_warning(hp.dtype_policy, on_cpu=not use_xla(None, strategy))
    if warning:
        printer(warning)

    xla = use_xla(config.jit_compile, strategy)
    step_fns = TrainStep(
        model, optimizer, strategy, hp.label_smoothing, accumulate, hp.clip_grad_norm, xla
    )
    buckets = len(
        pipeline.bucket_boundaries(hp.min_length_bucket, hp.max_length, hp.length_bucket_step)
    )
    return _Run(
        config=config,
        hp=hp,
        problem=problem,
        strategy=strategy,
        model=model,
        optimizer=optimizer,
        manager=manager,
        step_fns=step_fns,
        schedule=schedule,
        compile_log=CompileLog(step_fns, xla, buckets, printer),
        progress=Progress(config.train_steps, step, printer, deadline=deadline),
        iterator=iter(train_data(problem, config, hp, strategy, step, pad_to_bucket=xla)),
        eval_data=problem.dataset("dev", config.data_dir, hp),
        train_writer=tf.summary.create_file_writer(os.path.join(checkpoint_dir, "train")),
        eval_writer=tf.summary.create_file_writer(os.path.join(checkpoint_dir, "eval")),
        bleu_evaluator=bleu_eval.make_bleu_evaluator(
            model, problem, config.data_dir, config.eval_bleu_sentences, config.eval_decode_method
        ),
        best=tracker,
        attention_example=attention_example(problem, config.data_dir, model.max_position),
        printer=printer,
        deadline=deadline,
        step=step,
        run_files=run_files,
    )


def _run_manifest(config, problem, strategy, accumulate, model, warm) -> dict:
    return {
        "problem": config.problem,
        "seed": config.seed,
        "data_fingerprint": problem.fingerprint(config.data_dir),
        "vocabulary": run_dir.vocabulary_record(problem, config.data_dir),
        "strategy": type(strategy).__name__,
        "replicas": strategy.num_replicas_in_sync,
        "accumulation_steps": accumulate,
        "parameters": model.count_params(),
        **({warm_start.MANIFEST_KEY: warm} if warm else {}),
    }


def _write_run_files(output_dir: str, hp, manifest: dict, tracker: best.BestTracker) -> None:
    run_dir.write_run_files(output_dir, hp, {**manifest, best.MANIFEST_KEY: tracker.record()})


def _save(run: _Run) -> None:
    """Saves a checkpoint; the first one of a resumed run also writes its settings.

    Until then hparams.json and manifest.json keep describing the checkpoints there, so a
    resumed run that stops first (a diverging loss, a crash) leaves them as they were.
    """
    saving.save_checkpoint(run.manager, run.step)
    if run.run_files is not None:
        _write_run_files(run.config.output_dir, run.hp, run.run_files, run.best)
        run.run_files = None


def _loop(run: _Run) -> dict:
    """Updates until the step or time budget ends; returns the last evaluation's metrics."""
    config = run.config
    every_steps = (config.log_every, config.save_every, config.eval_every)
    first = True
    metrics = {}
    last = run.step >= config.train_steps or run.best.should_stop
    while not last:
        began = time.monotonic()
        try:
            result = run.step_fns.train(run.iterator)
        except tf.errors.DataLossError as error:
            raise pipeline.read_error(run.problem, "train", config.data_dir, error) from None
        run.step += 1
        run.progress.add_tokens(result["tokens"])  # a tensor: no wait for the host here
        if first:
            run.compile_log.first_update(time.monotonic() - began)
            first = False
        out_of_time = run.deadline is not None and time.monotonic() >= run.deadline
        last = run.step >= config.train_steps or out_of_time
        boundary = last or any(run.step % every == 0 for every in every_steps)
        if boundary and _skipped_updates(run):
            last = False
            continue
        if boundary:  # the loss is fetched here anyway; never save NaN weights
            saving.check_finite(run.step, result, run.manager.directory)
        if out_of_time:
            run.printer(
                f"time budget of {config.train_minutes:g} minutes reached at step {run.step}"
            )
        if run.step % config.log_every == 0 or last:
            _log(run, result)
        if run.step % config.save_every == 0 or last:
            _save(run)
        if run.step % config.eval_every == 0 or last:
            metrics = _evaluate(run)
            if run.best.should_stop and not last:
                if run.step % config.save_every:  # the end of a run saves, this one too
                    _save(run)
                run.best.stop(run.step, run.eval_writer, run.printer)
                last = True
    return metrics


def _skipped_updates(run: _Run) -> bool:
    """Reports and rewinds `run.step` when float16 loss scaling skipped updates."""
    skipped = run.step_fns.skipped_updates(run.step)
    if skipped:
        run.step -= skipped
        run.printer(
            f"{skipped} update(s) skipped before step {run.step + 1}: non-finite gradients; "
            f"loss scale lowered to {float(run.optimizer.dynamic_scale.numpy()):g}"
        )
    return bool(skipped)


# TensorBoard tags of the progress values: grouped under train/, spelled out.
_TRAIN_TAGS = {"lr": "learning_rate"}


def _log(run: _Run, result: dict) -> None:
    """Prints the progress line and writes the train summaries (train/...) of this step."""
    tokens = max(float(result["tokens"]), 1.0)
    values = {
        "loss": float(result["loss"]) / tokens,
        "lr": float(run.schedule(run.step - 1)),  # the rate update `step` used
        "grad_norm": float(result["grad_norm"]),
    }
    if "loss_scale" in result:
        values["loss_scale"] = float(result["loss_scale"])
    rate = run.progress.report(run.step, values)
    extra = run.compile_log.report()
    logged = dict(values, tokens_per_sec=rate, **extra)
    _write_scalars(
        run.train_writer,
        run.step,
        {f"train/{_TRAIN_TAGS.get(name, name)}": value for name, value in logged.items()},
    )


def _dev_metrics(run: _Run) -> dict:
    """`evaluate` on the dev split; a damaged shard is a DataError naming it."""
    try:
        return evaluate(run.step_fns, run.eval_data, run.strategy, run.config.eval_steps)
    except tf.errors.DataLossError as error:
        raise pipeline.read_error(run.problem, "dev", run.config.data_dir, error) from None


def _evaluate(run: _Run) -> dict:
    """Evaluates on dev (and BLEU where the problem has it), prints and writes summaries."""
    metrics = _dev_metrics(run)
    run.printer(
        f"eval step {run.step}: loss {metrics['loss']:.4f} | accuracy "
        f"{metrics['accuracy']:.4f} | perplexity {metrics['perplexity']:.3f}"
    )
    _write_scalars(
        run.eval_writer,
        run.step,
        {f"eval/{k}": metrics[k] for k in ("loss", "accuracy", "perplexity")},
    )
    _write_attention(run)
    metrics.update(bleu_eval.log_bleu(run.bleu_evaluator, run.eval_writer, run.step, run.printer))
    run.best.observe(run.step, metrics, run.manager.checkpoint, run.eval_writer, run.printer)
    return metrics


def _write_attention(run: _Run) -> None:
    """Writes the eval/attention/... images of the first dev example at this step."""
    write_attention_images(run.model, run.attention_example, run.eval_writer, run.step, run.printer)

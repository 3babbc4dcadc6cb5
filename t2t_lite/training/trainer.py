"""`train_and_evaluate`: the whole training run behind `python -m t2t_lite.trainer`.

The loop: build the model and Adam under the strategy's scope, restore the newest
checkpoint of `output_dir` if there is one, then repeat {update, log every
`log_every`, evaluate every `eval_every`, save every `save_every`} until `train_steps`
optimizer updates have been made. Checkpoints hold the model, the optimizer (with its
step counter, the global step) and nothing else.
"""

from __future__ import annotations

import dataclasses
import math
import os

import keras
import tensorflow as tf

from t2t_lite import hparams as hparams_lib
from t2t_lite import problems as problems_lib
from t2t_lite.models import build_transformer
from t2t_lite.training import distribute, run_dir
from t2t_lite.training.progress import Progress
from t2t_lite.training.schedule import TransformerSchedule
from t2t_lite.training.step import TrainStep, make_optimizer


@dataclasses.dataclass
class RunConfig:
    """Where and how long to train; everything that is not an hparam."""

    problem: str
    output_dir: str
    data_dir: str = ""
    train_steps: int = 1000
    eval_steps: int = 0  # batches per evaluation; 0 = the whole dev split
    eval_every: int = 500
    save_every: int = 500
    keep_checkpoints: int = 5
    log_every: int = 100
    strategy: str = "auto"
    num_gpus: int | None = None
    cpu_replicas: int = 1
    seed: int = 1
    jit_compile: bool = False


def accumulation_steps(hp, num_replicas: int) -> int:
    """Batches per replica per update so that an update sees `effective_batch_tokens`."""
    if hp.effective_batch_tokens <= 0:
        return 1
    return max(1, math.ceil(hp.effective_batch_tokens / (hp.batch_size * num_replicas)))


def build_model_and_optimizer(hp, problem, data_dir, strategy):
    """Creates the model and an Adam built on its variables, under `strategy.scope()`."""
    vocab_size, target_vocab_size = problem.vocab_sizes(data_dir)
    keras.mixed_precision.set_dtype_policy(hp.dtype_policy)
    with strategy.scope():
        model = build_transformer(hp, vocab_size, target_vocab_size)
        schedule = TransformerSchedule(hp.hidden_size, hp.warmup_steps, hp.learning_rate)
        optimizer = make_optimizer(hp, schedule)
        optimizer.build(model.trainable_variables)
    return model, optimizer


def worker_dirs(strategy, output_dir: str) -> tuple:
    """(checkpoint folder, whether to write summaries and run files) for this worker.

    Under MultiWorkerMirroredStrategy every worker takes part in saving, but only the
    chief writes into `output_dir`; the others write to a folder of their own.
    """
    resolver = getattr(strategy, "cluster_resolver", None)
    if resolver is None or not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return output_dir, True
    task_type, task_id = resolver.task_type, resolver.task_id
    if task_type in (None, "chief") or (task_type == "worker" and task_id == 0):
        return output_dir, True
    return os.path.join(output_dir, "workers", f"{task_type}_{task_id}"), False


def checkpoint_manager(model, optimizer, output_dir, keep):
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer)
    manager = tf.train.CheckpointManager(
        checkpoint, output_dir, max_to_keep=keep, step_counter=optimizer.iterations
    )
    return checkpoint, manager


def _print_batching(hp, strategy, accumulate, printer):
    replicas = strategy.num_replicas_in_sync
    printer(
        f"batching: {hp.batch_size:,} tokens per replica x {replicas} replicas = "
        f"{hp.batch_size * replicas:,} per batch; x {accumulate} accumulated = "
        f"{hp.batch_size * replicas * accumulate:,} tokens per update"
    )


def evaluate(step_fns, dataset, strategy, eval_steps: int) -> dict:
    """Sums the token statistics over the dev batches; returns loss, accuracy, perplexity."""
    totals = {"loss": 0.0, "nll": 0.0, "correct": 0.0, "tokens": 0.0}
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

    Rerunning with the same `output_dir` resumes from its newest checkpoint.
    """
    hp = hparams_lib.validate(hp)
    problem = problems_lib.get(config.problem)
    run_dir.prepare(config.output_dir)
    run_dir.check_resume(config.output_dir, hp, config.problem)
    strategy = distribute.make_strategy(config.strategy, config.num_gpus, config.cpu_replicas)
    keras.utils.set_random_seed(config.seed)
    accumulate = accumulation_steps(hp, strategy.num_replicas_in_sync)
    _print_batching(hp, strategy, accumulate, printer)

    model, optimizer = build_model_and_optimizer(hp, problem, config.data_dir, strategy)
    checkpoint_dir, is_chief = worker_dirs(strategy, config.output_dir)
    checkpoint, manager = checkpoint_manager(
        model, optimizer, checkpoint_dir, config.keep_checkpoints
    )
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).assert_existing_objects_matched()
        printer(f"resumed from {manager.latest_checkpoint} at step {int(optimizer.iterations)}")
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

    step_fns = TrainStep(
        model,
        optimizer,
        strategy,
        hp.label_smoothing,
        accumulate,
        hp.clip_grad_norm,
        config.jit_compile,
    )
    train_data = strategy.distribute_datasets_from_function(
        lambda context: problem.dataset(
            "train", config.data_dir, hp, seed=config.seed, input_context=context
        )
    )
    eval_data = problem.dataset("dev", config.data_dir, hp)
    iterator = iter(train_data)
    train_writer = tf.summary.create_file_writer(os.path.join(checkpoint_dir, "train"))
    eval_writer = tf.summary.create_file_writer(os.path.join(checkpoint_dir, "eval"))

    step = int(optimizer.iterations)
    progress = Progress(config.train_steps, step, printer)
    metrics = {}
    while step < config.train_steps:
        result = step_fns.train(iterator)
        step += 1
        progress.add_tokens(float(result["tokens"]))
        if step % config.log_every == 0 or step == config.train_steps:
            tokens = max(float(result["tokens"]), 1.0)
            values = {
                "loss": float(result["loss"]) / tokens,
                "lr": float(optimizer.learning_rate),
                "grad_norm": float(result["grad_norm"]),
            }
            rate = progress.report(step, values)
            _write_scalars(train_writer, step, dict(values, tokens_per_sec=rate))
        if step % config.save_every == 0 or step == config.train_steps:
            manager.save(checkpoint_number=step)
        if step % config.eval_every == 0 or step == config.train_steps:
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
    if not metrics:
        metrics = evaluate(step_fns, eval_data, strategy, config.eval_steps)
        printer(f"eval step {step}: accuracy {metrics['accuracy']:.4f} (training was complete)")
    return metrics

"""The compiled training and evaluation steps under a tf.distribute strategy.

One optimizer update ("step") consumes `accumulation_steps` batches on every replica.
Each replica computes the gradient of its summed token losses; gradients and token
counts are summed over micro-batches and replicas, then divided by the global count
of non-padding target tokens, so the update is exactly that of one big batch.
Forward and backward passes are one `tf.function`, compiled by XLA when `jit_compile`.
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from t2t_lite import kernels as kernel_sets
from t2t_lite.kernels import adam as adam_kernel
from t2t_lite.kernels import keras_internals
from t2t_lite.training.loss import token_statistics

SUM = tf.distribute.ReduceOp.SUM
# Sums a training update returns (and accumulates), and those of an evaluation batch.
STAT_KEYS = ("loss", "nll", "tokens")
EVAL_KEYS = ("loss", "nll", "correct", "tokens")


def accumulation_steps(hp, num_replicas: int) -> int:
    """Batches per replica per update so that an update sees `effective_batch_tokens`."""
    if hp.effective_batch_tokens <= 0:
        return 1
    return max(1, math.ceil(hp.effective_batch_tokens / (hp.batch_size * num_replicas)))


def batching_line(hp, replicas: int, accumulate: int) -> str:
    """The start-up line on tokens per replica, per batch and per update."""
    target = (
        f"effective_batch_tokens {hp.effective_batch_tokens:,}"
        if hp.effective_batch_tokens
        else "effective_batch_tokens 0: one batch per update"
    )
    return (
        f"batching: {hp.batch_size:,} tokens per replica x {replicas} replicas = "
        f"{hp.batch_size * replicas:,} global tokens per batch; x {accumulate} accumulated = "
        f"{hp.batch_size * replicas * accumulate:,} effective tokens per update ({target})"
    )


def make_optimizer(
    hp, schedule, initial_loss_scale: float = 2.0**15, loss_scale_growth_steps: int = 2000
) -> keras.optimizers.Optimizer:
    """Adam with the paper's betas and epsilon (section 5.3), fed pre-reduced gradients.

    With `hp.kernels` resolving to "cpu" (`t2t_lite.kernels.resolve`, for the devices of
    the strategy in scope, as `build_transformer` resolves it) each variable's update is
    TensorFlow's fused Adam kernel (`t2t_lite.kernels.adam`); with "keras", Keras's.
    The optimizer's variables are Keras Adam's either way.

    Under the `mixed_float16` policy Adam is wrapped in Keras's dynamic loss scaling
    (`keras.optimizers.LossScaleOptimizer`): `TrainStep` multiplies the loss by the
    current scale before the backward pass, so small float16 gradients do not flush to
    zero; an update whose gradients overflow is skipped and halves the scale, and
    `loss_scale_growth_steps` finite updates in a row double it. bfloat16 has float32's
    exponent range and needs none of this.
    """
    adam = _ReducedGradientAdam(
        fused=kernel_sets.resolve(hp.kernels) == kernel_sets.CPU,
        learning_rate=schedule,
        beta_1=hp.adam_beta1,
        beta_2=hp.adam_beta2,
        epsilon=hp.adam_epsilon,
        name="adam",
    )
    if hp.dtype_policy != "mixed_float16":
        return adam
    return keras.optimizers.LossScaleOptimizer(
        adam,
        initial_scale=initial_loss_scale,
        dynamic_growth_steps=loss_scale_growth_steps,
        name="loss_scale",
    )


@keras_internals.skip_gradient_all_reduce
class _ReducedGradientAdam(keras.optimizers.Adam):
    """Adam whose gradients arrive already summed over replicas by `TrainStep`.

    The trainer sums gradients itself, before clipping and measuring their norm, so
    the optimizer must not sum them a second time.

    Args:
        fused: update each variable with `t2t_lite.kernels.adam` where it applies.
        **kwargs: those of `keras.optimizers.Adam`.
    """

    def __init__(self, fused: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.fused = fused

    def update_step(self, gradient, variable, learning_rate):
        if self.fused and adam_kernel.applies(self, gradient):
            return adam_kernel.update(self, gradient, variable, learning_rate)
        return super().update_step(gradient, variable, learning_rate)


class TrainStep:
    """Builds `train(iterator)` and `evaluate(batch)` for a model, optimizer and strategy.

    Args:
        model: a built `Transformer` (created under `strategy.scope()`); the loss uses
            the model's kernel set (`model.kernels`).
        optimizer: from `make_optimizer`, built on the model's trainable variables.
        strategy: the tf.distribute strategy.
        label_smoothing: eps of the loss.
        accumulation_steps: batches per replica per update (>= 1).
        clip_grad_norm: clip the global gradient norm to this (0 = no clipping).
        jit_compile: compile forward + backward with XLA.
    """

    def __init__(
        self,
        model,
        optimizer,
        strategy,
        label_smoothing,
        accumulation_steps=1,
        clip_grad_norm=0.0,
        jit_compile=False,
    ):
        self.model = model
        self.optimizer = optimizer
        self.strategy = strategy
        self.label_smoothing = label_smoothing
        self.accumulation_steps = accumulation_steps
        self.clip_grad_norm = clip_grad_norm
        self.variables = model.trainable_variables
        self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
        self.jit_compile = jit_compile
        self.kernels = getattr(model, "kernels", kernel_sets.KERAS)
        self._gradients = tf.function(self._gradients_fn, jit_compile=jit_compile, autograph=False)
        self.accumulators = None
        if accumulation_steps > 1:
            with strategy.scope():
                self.accumulators = [
                    tf.Variable(
                        tf.zeros_like(v),
                        trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM,
                    )
                    for v in self.variables
                ]
                self.stat_accumulators = {
                    key: tf.Variable(
                        0.0,
                        trainable=False,
                        synchronization=tf.VariableSynchronization.ON_READ,
                        aggregation=tf.VariableAggregation.SUM,
                    )
                    for key in STAT_KEYS
                }
        # Under XLA, every distinct (B, S, T) micro-batch shape met on this worker's
        # replicas, kept in the graph (no host round trip per update): one compilation each.
        self.seen_shapes = tf.Variable(
            tf.zeros([0, 3], tf.int32), shape=tf.TensorShape([None, 3]), trainable=False
        )
        self.train = tf.function(self._train_fn, autograph=False)
        self._evaluate = None  # (element spec, its tf.function), made by evaluate_for

    def skipped_updates(self, step: int) -> int:
        """How many of the `step` updates run so far float16 loss scaling skipped.

        An update whose gradients overflowed is not applied, so the optimizer's count of
        applied updates (the global step) stays behind the count of updates run.
        """
        if not self.loss_scaled:
            return 0
        return step - int(self.optimizer.iterations.numpy())

    def _gradients_fn(self, batch):
        with tf.GradientTape() as tape:
            logits = self.model(batch, training=True)
            stats = token_statistics(
                logits, batch["targets"], self.label_smoothing, accuracy=False,
                kernels=self.kernels,
            )  # fmt: skip
            loss = stats["loss"]
            if self.loss_scaled:
                loss = loss * self.optimizer.dynamic_scale
        grads = tape.gradient(loss, self.variables)
        return [tf.convert_to_tensor(g) for g in grads], stats

    def _apply(self, grads, stats):
        """Sums over replicas, normalises by global tokens, clips, applies (replica context)."""
        # One all-reduce for gradients and statistics: a single collective launch, so the
        # replicas can never start their collectives in different orders.
        context = tf.distribute.get_replica_context()
        reduced = context.all_reduce(SUM, list(grads) + [stats[k] for k in STAT_KEYS])
        grads, stats = reduced[: len(grads)], dict(zip(STAT_KEYS, reduced[len(grads) :]))
        scale = 1.0 / tf.maximum(stats["tokens"], 1.0)
        grads = [g * scale for g in grads]
        norm = tf.linalg.global_norm(grads)
        result, clip_norm = dict(stats, grad_norm=norm), self.clip_grad_norm
        if self.loss_scaled:
            # The gradients are still multiplied by the loss scale: the optimizer divides
            # them (and skips the update if any is not finite), so clip at a scaled norm.
            loss_scale = tf.identity(self.optimizer.dynamic_scale)
            result.update(grad_norm=norm / loss_scale, loss_scale=loss_scale)
            clip_norm = clip_norm * loss_scale
        if self.clip_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, clip_norm, use_norm=norm)
        self.optimizer.apply(grads, self.variables)
        return result

    def _replica_step(self, batch):
        grads, stats = self._gradients(batch)
        return self._apply(grads, stats)

    def _replica_accumulate(self, batch):
        grads, stats = self._gradients(batch)
        for accumulator, grad in zip(self.accumulators, grads):
            accumulator.assign_add(grad)
        for key in STAT_KEYS:
            self.stat_accumulators[key].assign_add(stats[key])

    def _replica_apply_accumulated(self):
        grads = [accumulator.read_value() for accumulator in self.accumulators]
        stats = {key: self.stat_accumulators[key].read_value() for key in STAT_KEYS}
        result = self._apply(grads, stats)
        for accumulator in self.accumulators:
            accumulator.assign(tf.zeros_like(accumulator))
        for key in STAT_KEYS:
            self.stat_accumulators[key].assign(0.0)
        return result

    def _train_fn(self, iterator):
        """One optimizer update. Returns global sums and the gradient norm (float32)."""
        if self.accumulators is None:
            batches = [next(iterator)]
            result = self.strategy.run(self._replica_step, args=(batches[0],))
        else:
            batches = []
            for _ in range(self.accumulation_steps):
                batches.append(next(iterator))
                self.strategy.run(self._replica_accumulate, args=(batches[-1],))
            result = self.strategy.run(self._replica_apply_accumulated)
        if self.jit_compile:
            self._record_shapes(batches)
        return {
            key: self.strategy.experimental_local_results(value)[0] for key, value in result.items()
        }

    def _record_shapes(self, batches):
        """Adds (B, S, T) of every micro-batch on every local replica to `seen_shapes`."""
        seen = self.seen_shapes.value()
        for batch in batches:
            for local in self.strategy.experimental_local_results(batch):
                sentences, source_length = tf.unstack(tf.shape(local["inputs"]))
                target_length = tf.shape(local["targets"])[1]
                shape = tf.stack([sentences, source_length, target_length])[None]  # [1, 3]
                known = tf.reduce_any(tf.reduce_all(tf.equal(seen, shape), axis=1))
                seen = tf.cond(
                    known, lambda s=seen: s, lambda s=seen, n=shape: tf.concat([s, n], 0)
                )
        self.seen_shapes.assign(seen)

    def _replica_evaluate(self, batch):
        logits = self.model(batch, training=False)
        # Plain ops: evaluation meets many batch shapes, each a compilation for the CPU loss.
        stats = token_statistics(logits, batch["targets"], self.label_smoothing)
        context = tf.distribute.get_replica_context()
        return dict(zip(EVAL_KEYS, context.all_reduce(SUM, [stats[k] for k in EVAL_KEYS])))

    def evaluate_for(self, element_spec):
        """The evaluation function of batches of `element_spec` (a distributed dataset's).

        Traced once for every batch shape: the spec's batch and length axes are None, where
        tracing on the first batches met would trace twice (their shapes, then a relaxed one).
        """
        if self._evaluate is None or self._evaluate[0] != element_spec:
            function = tf.function(
                self._evaluate_fn, input_signature=[element_spec], autograph=False
            )
            self._evaluate = (element_spec, function)
        return self._evaluate[1]

    def _evaluate_fn(self, batch):
        result = self.strategy.run(self._replica_evaluate, args=(batch,))
        return {
            key: self.strategy.experimental_local_results(value)[0] for key, value in result.items()
        }


def evaluate(step_fns, dataset, strategy, eval_steps: int) -> dict:
    """Sums the token statistics over the dev batches; returns loss, accuracy, perplexity."""
    totals = dict.fromkeys(EVAL_KEYS, 0.0)
    batches = strategy.experimental_distribute_dataset(dataset)
    evaluate_batch = step_fns.evaluate_for(batches.element_spec)
    for count, batch in enumerate(batches):
        if eval_steps and count >= eval_steps:
            break
        for key, value in evaluate_batch(batch).items():
            totals[key] += float(value)
    tokens = max(totals["tokens"], 1.0)
    return {
        "loss": totals["loss"] / tokens,
        "accuracy": totals["correct"] / tokens,
        "perplexity": math.exp(min(totals["nll"] / tokens, 50.0)),
        "tokens": totals["tokens"],
    }

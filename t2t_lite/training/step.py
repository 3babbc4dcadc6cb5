"""The compiled training and evaluation steps under a tf.distribute strategy.

One optimizer update ("step") consumes `accumulation_steps` batches on every replica.
Each replica computes the gradient of its summed token losses; gradients and token
counts are summed over micro-batches and replicas, then divided by the global count
of non-padding target tokens, so the update is exactly that of one big batch.
Forward and backward passes are one `tf.function`, compiled by XLA when `jit_compile`.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from t2t_lite.training.loss import token_statistics

SUM = tf.distribute.ReduceOp.SUM
STAT_KEYS = ("loss", "nll", "correct", "tokens")


def make_optimizer(hp, schedule) -> keras.optimizers.Optimizer:
    """Adam with the paper's betas and epsilon (section 5.3), fed pre-reduced gradients."""
    return _ReducedGradientAdam(
        learning_rate=schedule,
        beta_1=hp.adam_beta1,
        beta_2=hp.adam_beta2,
        epsilon=hp.adam_epsilon,
        name="adam",
    )


class _ReducedGradientAdam(keras.optimizers.Adam):
    """Adam whose gradients arrive already summed over replicas by `TrainStep`.

    The trainer sums gradients itself, before clipping and measuring their norm, so
    the optimizer must not sum them a second time.
    """

    def _all_reduce_sum_gradients(self, grads_and_vars):
        return grads_and_vars


class TrainStep:
    """Builds `train(iterator)` and `evaluate(batch)` for a model, optimizer and strategy.

    Args:
        model: a built `Transformer` (created under `strategy.scope()`).
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
        self._gradients = tf.function(self._gradients_fn, jit_compile=jit_compile)
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
        self.train = tf.function(self._train_fn)
        self.evaluate = tf.function(self._evaluate_fn, reduce_retracing=True)

    def _gradients_fn(self, batch):
        with tf.GradientTape() as tape:
            logits = self.model(batch, training=True)
            stats = token_statistics(logits, batch["targets"], self.label_smoothing)
        grads = tape.gradient(stats["loss"], self.variables)
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
        if self.clip_grad_norm > 0:
            grads, _ = tf.clip_by_global_norm(grads, self.clip_grad_norm, use_norm=norm)
        self.optimizer.apply(grads, self.variables)
        return dict(stats, grad_norm=norm)

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
            result = self.strategy.run(self._replica_step, args=(next(iterator),))
        else:
            for _ in range(self.accumulation_steps):
                self.strategy.run(self._replica_accumulate, args=(next(iterator),))
            result = self.strategy.run(self._replica_apply_accumulated)
        return {
            key: self.strategy.experimental_local_results(value)[0] for key, value in result.items()
        }

    def _replica_evaluate(self, batch):
        logits = self.model(batch, training=False)
        stats = token_statistics(logits, batch["targets"], self.label_smoothing)
        context = tf.distribute.get_replica_context()
        return dict(zip(STAT_KEYS, context.all_reduce(SUM, [stats[k] for k in STAT_KEYS])))

    def _evaluate_fn(self, batch):
        result = self.strategy.run(self._replica_evaluate, args=(batch,))
        return {
            key: self.strategy.experimental_local_results(value)[0] for key, value in result.items()
        }

"""Several Transformers searched as one model: `Ensemble`.

An ensemble presents the interface a search drives (`encode`, `init_cache`,
`split_cache`, `decode_step`) and teacher forcing (`__call__`), over M models that share
the source and target vocabularies but may differ in architecture (width, depth, heads).
Each model keeps its own encoder output and its own cache; the ensemble's states are
tuples of the models' states, model m at index m, so a beam search reorders every
model's cache by the same parent hypotheses.

At every position the models' next-token distributions are combined with weights
w_1..w_M (positive, normalised to sum to 1; equal by default), in one of two ways:

    "mean_probability" (the default, as fairseq):
        log P(y) = log sum_m w_m P_m(y)
    "mean_log_probability" (as Marian, renormalised):
        log P(y) = sum_m w_m log P_m(y) - log sum_y' exp(sum_m w_m log P_m(y'))

Marian adds the weighted log-probabilities without renormalising; here the weighted
geometric mean is renormalised over the vocabulary so that both combinations are
distributions and a hypothesis' score is a log-probability, as a single model's is.

What the ensemble returns as "logits" are these log-probabilities (float32): the searches'
log-softmax leaves a normalised distribution unchanged, so a search or a scorer uses an
ensemble exactly as it uses one model.
"""

from __future__ import annotations

import math

from keras import ops

COMBINATIONS = ("mean_probability", "mean_log_probability")


class EnsembleError(ValueError):
    """Models that cannot be combined, or bad weights; the message says what to change."""


class Ensemble:
    """M models with shared vocabularies, decoding with combined next-token distributions.

    Args:
        models: the built Transformers (at least one).
        weights: one positive weight per model, or None for equal weights; normalised
            to sum to 1.
        combination: one of `COMBINATIONS` (see the module docstring).
        names: a label per model for error messages (its run), or None.
    """

    def __init__(self, models, weights=None, combination="mean_probability", names=None):
        self.models = tuple(models)
        if not self.models:
            raise EnsembleError("an ensemble needs at least one model")
        names = list(names) if names is not None else [f"model {m}" for m in range(len(models))]
        if combination not in COMBINATIONS:
            raise EnsembleError(
                f"unknown ensemble combination {combination!r}; choose one of {COMBINATIONS}"
            )
        self.combination = combination
        self.weights = _normalised(weights, len(self.models))
        self.names = names
        first = self.models[0]
        for name, model in zip(names[1:], self.models[1:]):
            for side, mine, theirs in (
                ("source", first.vocab_size, model.vocab_size),
                ("target", _target_size(first), _target_size(model)),
            ):
                if mine != theirs:
                    raise EnsembleError(
                        f"{names[0]} has a {side} vocabulary of {mine} ids but {name} has "
                        f"{theirs}: an ensemble's models must share the problem's vocabulary"
                    )

    @property
    def vocab_size(self) -> int:
        return self.models[0].vocab_size

    @property
    def target_vocab_size(self) -> int | None:
        return self.models[0].target_vocab_size

    @property
    def max_position(self) -> int:
        """The positions every model knows: the smallest model's."""
        return min(model.max_position for model in self.models)

    @property
    def variables(self) -> list:
        """Every model's variables, model after model."""
        return [variable for model in self.models for variable in model.variables]

    def with_models(self, models) -> Ensemble:
        """An ensemble of `models` (e.g. bfloat16 copies) with these weights and combination."""
        return Ensemble(models, self.weights, self.combination, self.names)

    def combine(self, logits: list):
        """The combined log-probabilities of M logits [..., V] -> float32 [..., V]."""
        log_probs = [ops.log_softmax(ops.cast(each, "float32"), axis=-1) for each in logits]
        if len(log_probs) == 1:
            return log_probs[0]
        if self.combination == "mean_probability":
            weighted = [lp + math.log(w) for lp, w in zip(log_probs, self.weights)]
            return ops.logsumexp(ops.stack(weighted), axis=0)  # log sum_m w_m P_m
        mean = sum(lp * w for lp, w in zip(log_probs, self.weights))
        return ops.log_softmax(mean, axis=-1)

    def __call__(self, features, training=False):
        """Teacher-forced combined log-probabilities: {"inputs", "targets"} -> [B, T, V]."""
        return self.combine([model(features, training=training) for model in self.models])

    def encode(self, inputs, training=False):
        """ids [B, S] -> (encoder outputs, encoder masks): tuples, one entry per model."""
        encoded = [model.encode(inputs, training=training) for model in self.models]
        return tuple(output for output, _ in encoded), tuple(mask for _, mask in encoded)

    def init_cache(self, encoder_outputs, encoder_masks, max_decode_length):
        """A tuple of every model's `init_cache` over its own encoder output."""
        return tuple(
            model.init_cache(output, mask, max_decode_length)
            for model, output, mask in zip(self.models, encoder_outputs, encoder_masks)
        )

    def split_cache(self, cache):
        """(moving, constants): tuples of every model's two parts (`Transformer.split_cache`)."""
        parts = [model.split_cache(each) for model, each in zip(self.models, cache)]
        return tuple(moving for moving, _ in parts), tuple(constant for _, constant in parts)

    def decode_step(self, ids, i, cache, constants=None):
        """One cached step of every model: (combined log-probabilities [B, V], new caches).

        Args:
            ids: int [B], the token at position i.
            i: scalar int, the position.
            cache: the tuple of `init_cache`, or with `constants` the tuple of moving parts.
            constants: None, or the tuple of constant parts of `split_cache`.
        """
        constants = constants if constants is not None else (None,) * len(self.models)
        logits, caches = [], []
        for model, each, constant in zip(self.models, cache, constants):
            model_logits, new_cache = model.decode_step(ids, i, each, constant)
            logits.append(model_logits)
            caches.append(new_cache)
        return self.combine(logits), tuple(caches)


def _target_size(model) -> int:
    return model.target_vocab_size or model.vocab_size


def _normalised(weights, count: int) -> tuple:
    """`weights` (one per model, each positive and finite) scaled to sum to 1."""
    if weights is None or len(weights) == 0:
        return (1.0 / count,) * count
    weights = [float(weight) for weight in weights]
    if len(weights) != count:
        raise EnsembleError(
            f"--ensemble_weights has {len(weights)} weights for {count} models; give one "
            "weight per model, in the order of the runs"
        )
    if not all(math.isfinite(weight) and weight > 0 for weight in weights):
        raise EnsembleError(f"--ensemble_weights must all be positive numbers, got {weights}")
    total = sum(weights)
    return tuple(weight / total for weight in weights)

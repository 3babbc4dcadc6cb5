"""The typed, frozen hyperparameter record and its `k=v,k=v` overrides.

Hparams describe the model and its optimisation only. Paths, the problem and the
distribution strategy are command-line flags, never hparams.
"""

from __future__ import annotations

import dataclasses
import json
import math
import typing


@dataclasses.dataclass(frozen=True)
class HParams:
    """Model and optimisation settings of one Transformer (paper, Table 3 names in comments).

    Defaults are the paper's base model; the `transformer_base` set adds its
    ~25,000-token update (`effective_batch_tokens`), which defaults to 0 here.
    """

    # Architecture.
    num_encoder_layers: int = 6  # N
    num_decoder_layers: int = 6  # N
    hidden_size: int = 512  # d_model
    filter_size: int = 2048  # d_ff
    num_heads: int = 8  # h
    shared_embedding: bool = True  # one matrix for source, target and pre-softmax (section 3.4)
    position_encoding: str = "sinusoid"  # "sinusoid" (section 3.5) or "learned" (Table 3, row E)
    max_position: int = 1024  # table size for learned positions and the sinusoid cache
    normalize_first: bool = False  # False: post-norm as in the paper; True: pre-norm
    # Each decoder input also gets the encoder output at the next source token to copy
    # (for problems whose targets copy their inputs in order, such as lexicalized trees).
    source_pointer: bool = False
    # Regularisation.
    dropout: float = 0.1  # P_drop on sub-layer outputs and embeddings + positions
    attention_dropout: float = 0.0  # on attention weights
    relu_dropout: float = 0.0  # inside the feed-forward network
    label_smoothing: float = 0.1  # epsilon_ls
    # Optimisation (section 5.3): Adam and eq. 3.
    learning_rate: float = 1.0  # multiplies eq. 3
    warmup_steps: int = 4000
    # The last cooldown_fraction of a run's updates scale eq. 3 down linearly towards 0
    # (TransformerSchedule); 0 is the paper's schedule.
    cooldown_fraction: float = 0.0
    # Optimizer updates a run makes unless --train_steps says otherwise: 100,000 for the
    # base models and 300,000 for the big ones (section 5.2).
    train_steps: int = 100_000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_epsilon: float = 1e-9
    clip_grad_norm: float = 0.0  # 0 disables clipping
    # Batching (tensor2tensor meaning: tokens per replica, longest sequence x sequences).
    batch_size: int = 4096
    max_length: int = 256  # longer examples are dropped from training (and counted)
    min_length_bucket: int = 8
    length_bucket_step: float = 1.1
    # Target tokens per optimizer update over all replicas and accumulation steps;
    # 0 means one batch per replica per update. The paper's sets (transformer_base,
    # transformer_big, transformer_big_enfr) set ~25,000 (section 5.1).
    effective_batch_tokens: int = 0
    # Numerics: "float32", "mixed_bfloat16" or "mixed_float16".
    dtype_policy: str = "float32"
    # How the layers, loss and Adam compute (t2t_lite.kernels): "keras", "cpu", or "auto"
    # (resolved when the model is built: "cpu" on CPUs, "keras" on GPUs and TPUs). The
    # weights and checkpoints are the same whichever kernels computed them.
    kernels: str = "auto"

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> HParams:
        values = json.loads(text)
        unknown = sorted(set(values) - {f.name for f in dataclasses.fields(cls)})
        if unknown:
            raise ValueError(f"hparams JSON has unknown keys {unknown}")
        return cls(**values)

    def model_fields(self) -> dict:
        """The fields that change the shapes or meaning of the model's weights."""
        names = (
            "num_encoder_layers",
            "num_decoder_layers",
            "hidden_size",
            "filter_size",
            "num_heads",
            "shared_embedding",
            "position_encoding",
            "max_position",
            "normalize_first",
            "source_pointer",
        )
        return {name: getattr(self, name) for name in names}

    def model_changes(self, other: HParams) -> list:
        """(name, ours, theirs) of every model field where `other` differs."""
        ours, theirs = self.model_fields(), other.model_fields()
        return [(name, ours[name], theirs[name]) for name in ours if ours[name] != theirs[name]]


def _valid_keys(types: dict) -> str:
    """'key (type), key (type), ...' for every field, sorted by key."""
    return ", ".join(f"{key} ({types[key].__name__})" for key in sorted(types))


def _parse_value(key: str, text: str, kind: type, types: dict):
    text = text.strip()
    if kind is bool:
        lowered = text.lower()
        if lowered in ("true", "1", "yes"):
            return True
        if lowered in ("false", "0", "no"):
            return False
        problem = f"hparam {key!r} is a bool; got {text!r} (use true or false)"
    elif kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            article = "an" if kind is int else "a"
            problem = f"hparam {key!r} is {article} {kind.__name__}; got {text!r}"
    else:
        return text
    raise ValueError(f"{problem}; valid keys: {_valid_keys(types)}")


def override(hp: HParams, spec: str) -> HParams:
    """Returns `hp` with the `k=v,k=v` pairs of `spec` applied.

    Raises:
        ValueError: naming the key when it is unknown or its value does not parse as
            the field's type (both list the valid keys with their types), or when a pair
            has no `=`.
    """
    if not spec or not spec.strip():
        return hp
    types = typing.get_type_hints(HParams)
    changes = {}
    for pair in spec.split(","):
        if not pair.strip():
            continue
        if "=" not in pair:
            raise ValueError(f"--hparams entry {pair!r} is not of the form key=value")
        key, value = pair.split("=", 1)
        key = key.strip()
        if key not in types:
            raise ValueError(f"unknown hparam {key!r}; valid keys: {_valid_keys(types)}")
        changes[key] = _parse_value(key, value, types[key], types)
    return validate(dataclasses.replace(hp, **changes))


# (hparam, lowest allowed value, whether the lowest is excluded, what it is): each value
# must be finite and above its bound, else the run fails later inside TensorFlow (a
# division by zero, a bucket loop that never grows) or trains NaNs without saying so.
_LOWER_BOUNDS = (
    ("num_encoder_layers", 1, False, "encoder layers"),
    ("num_decoder_layers", 1, False, "decoder layers"),
    ("hidden_size", 1, False, "model width"),
    ("filter_size", 1, False, "feed-forward width"),
    ("num_heads", 1, False, "attention heads"),
    ("max_position", 1, False, "positions the model knows"),
    ("learning_rate", 0.0, True, "multiplies eq. 3"),
    ("warmup_steps", 1, False, "eq. 3 divides by warmup_steps^1.5"),
    ("adam_epsilon", 0.0, True, "Adam's epsilon"),
    ("clip_grad_norm", 0.0, False, "0 disables clipping"),
    ("batch_size", 1, False, "tokens per replica"),
    ("max_length", 1, False, "longest training example"),
    ("min_length_bucket", 1, False, "shortest bucket boundary"),
    ("length_bucket_step", 1.0, True, "bucket boundaries grow by this factor"),
)
_PROBABILITIES = (
    "dropout",
    "attention_dropout",
    "relu_dropout",
    "label_smoothing",
    "cooldown_fraction",
)
_ADAM_BETAS = ("adam_beta1", "adam_beta2")


def _check_ranges(hp: HParams) -> None:
    """Raises a ValueError naming the first hparam outside its range, its value and the rule."""
    for name, bound, exclusive, meaning in _LOWER_BOUNDS:
        value = getattr(hp, name)
        if not math.isfinite(value) or value < bound or (exclusive and value == bound):
            rule = f"> {bound}" if exclusive else f">= {bound}"
            raise ValueError(f"hparam {name}={value}: must be a finite number {rule} ({meaning})")
    for name in _PROBABILITIES + _ADAM_BETAS:
        value = getattr(hp, name)
        if not 0.0 <= value < 1.0:  # also refuses nan
            raise ValueError(f"hparam {name}={value}: must be in [0, 1)")
    if hp.hidden_size % 2 and hp.position_encoding == "sinusoid":
        raise ValueError(
            f"hparam hidden_size={hp.hidden_size}: must be even with sinusoid positions "
            "(sines and cosines pair up)"
        )


def validate(hp: HParams) -> HParams:
    """Checks ranges and cross-field constraints; returns `hp` unchanged when they hold.

    Raises:
        ValueError: naming the hparam, its value and the rule it breaks.
    """
    _check_ranges(hp)
    if hp.hidden_size % hp.num_heads:
        raise ValueError(
            f"hidden_size {hp.hidden_size} is not divisible by num_heads {hp.num_heads}"
        )
    if hp.position_encoding not in ("sinusoid", "learned"):
        raise ValueError(
            f"position_encoding must be 'sinusoid' or 'learned', got {hp.position_encoding!r}"
        )
    if hp.dtype_policy not in ("float32", "mixed_bfloat16", "mixed_float16"):
        raise ValueError(
            "dtype_policy must be float32, mixed_bfloat16 or mixed_float16, "
            f"got {hp.dtype_policy!r}"
        )
    if hp.kernels not in ("auto", "cpu", "keras"):
        raise ValueError(f"kernels must be auto, cpu or keras, got {hp.kernels!r}")
    if hp.max_length > hp.max_position and hp.position_encoding == "learned":
        raise ValueError(
            f"max_length {hp.max_length} exceeds max_position {hp.max_position} "
            "of the learned position table"
        )
    if hp.effective_batch_tokens < 0:
        raise ValueError(
            f"effective_batch_tokens must be >= 0 (0 = one batch per update), "
            f"got {hp.effective_batch_tokens}"
        )
    if hp.batch_size < hp.min_length_bucket:
        raise ValueError(f"batch_size {hp.batch_size} tokens is below one shortest bucket")
    return hp

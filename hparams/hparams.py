"""The typed, frozen hyperparameter record and its `k=v,k=v` overrides.

Hparams describe the model and its optimisation only. Paths, the problem and the
distribution strategy are command-line flags, never hparams.
"""

from __future__ import annotations

import dataclasses
import json
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


def validate(hp: HParams) -> HParams:
    """Checks cross-field constraints; returns `hp` unchanged when they hold."""
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
    for name in ("dropout", "attention_dropout", "relu_dropout", "label_smoothing"):
        if not 0.0 <= getattr(hp, name) < 1.0:
            raise ValueError(f"hparam {name} must be in [0, 1), got {getattr(hp, name)}")
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

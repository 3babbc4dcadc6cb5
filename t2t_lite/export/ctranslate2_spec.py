"""A trained Transformer as a CTranslate2 `TransformerSpec`, built from its weights.

CTranslate2 computes the same function as `Transformer.decode_step` once its spec says
what our model does by convention:

- kernels: CTranslate2 takes every linear weight as [out, in] (torch's layout). Our
  attention projections are `EinsumDense` kernels [D, H, Dh] (query, key, value) and
  [H, Dh, D] (output), heads outermost, so a reshape to [D, D] and a transpose give it;
  the FFN's first kernel is already stored [d_ff, D] (`TransposedDense`).
- fused projections: self-attention takes one [3D, D] query-key-value weight, encoder-
  decoder attention a query weight and one [2D, D] key-value weight. Queries are scaled
  by Dh^-0.5 after the bias, in both.
- embeddings: looked up and multiplied by sqrt(D) (`scale_embeddings`); the pre-softmax
  projection is the target embedding matrix itself, unscaled and without bias.
- positions: CTranslate2's own sinusoids start at position 1 and put all sines before
  all cosines, ours start at 0 and interleave them, so the table is written out (the
  model's own `position_embedding` evaluated on rows 0 .. max_position - 1), as is the
  learned table. Row i is position i in both stacks.
- the decoder starts from id 0, whose embedding our model zeroes (padding): the spec's
  `start_from_zero_embedding` feeds a zero vector (unscaled) plus position 0's encoding.
- layer norm: the model's epsilon goes into the config (CTranslate2 defaults to 1e-5);
  post-norm stacks have no final norm, pre-norm stacks one.

Sources end with EOS (`add_source_eos`), so a CTranslate2 user passes pieces only.
"""

from __future__ import annotations

import numpy as np
from ctranslate2.converters import Converter
from ctranslate2.specs import transformer_spec as ct2_specs


class SpecError(ValueError):
    """The model cannot be expressed as a CTranslate2 spec; the message says why."""


def _numpy(variable) -> np.ndarray:
    return np.asarray(variable.numpy(), dtype=np.float32)


def _dense_weight(dense) -> tuple:
    """(weight [out, in], bias [out]) of an attention `EinsumDense` projection."""
    kernel = _numpy(dense.kernel)
    if kernel.ndim == 3 and dense.equation.startswith("btd,"):  # [D, H, Dh] -> [H*Dh, D]
        weight = kernel.reshape(kernel.shape[0], -1).T
    else:  # output projection [H, Dh, D] -> [D, H*Dh]
        weight = kernel.reshape(-1, kernel.shape[-1]).T
    return np.ascontiguousarray(weight), _numpy(dense.bias).reshape(-1)


def _set_linear(spec, weight: np.ndarray, bias: np.ndarray | None) -> None:
    spec.weight = np.ascontiguousarray(weight)
    if bias is not None:
        spec.bias = bias


def _set_layer_norm(spec, layer_norm) -> None:
    spec.gamma = _numpy(layer_norm.gamma)
    spec.beta = _numpy(layer_norm.beta)


def _set_attention(spec, attention, self_attention: bool, layer_norm) -> None:
    query, key, value = (
        _dense_weight(getattr(attention, f"{name}_dense")) for name in ("query", "key", "value")
    )
    if self_attention:
        fused = [query, key, value]
        _set_linear(spec.linear[0], *(np.concatenate(part) for part in zip(*fused)))
    else:
        _set_linear(spec.linear[0], *query)
        _set_linear(spec.linear[1], *(np.concatenate(part) for part in zip(key, value)))
    _set_linear(spec.linear[-1], *_dense_weight(attention.output_dense))
    _set_layer_norm(spec.layer_norm, layer_norm)


def _set_feed_forward(spec, layer) -> None:
    ffn = layer.feed_forward
    _set_linear(spec.linear_0, _numpy(ffn.filter_dense.kernel), _numpy(ffn.filter_dense.bias))
    _set_linear(spec.linear_1, _numpy(ffn.output_dense.kernel).T, _numpy(ffn.output_dense.bias))
    _set_layer_norm(spec.layer_norm, layer.feed_forward_layer_norm)


def position_table(model, rows: int) -> np.ndarray:
    """The model's position encodings of positions 0 .. rows - 1: float32 [rows, D]."""
    zeros = np.zeros((1, rows, model.hidden_size), np.float32)
    return _numpy_tensor(model.position_embedding(zeros, start_index=0))


def _numpy_tensor(tensor) -> np.ndarray:
    return np.asarray(tensor, dtype=np.float32)


def check_expressible(model) -> None:
    """Raises SpecError when CTranslate2 cannot compute what `model` computes."""
    if getattr(model, "source_pointer", False):
        raise SpecError(
            "the model uses source_pointer (each decoder input adds the encoder output at "
            "the next source token to copy), which CTranslate2 cannot express; export it as "
            "a SavedModel (leave out --format=ctranslate2)"
        )
    if model.dtype_policy.compute_dtype != "float32":
        raise SpecError(
            f"the model computes in {model.dtype_policy.compute_dtype}; restore it in float32 "
            "(load_trained_model does) and choose the precision with --quantization"
        )


def transformer_spec(
    model,
    source_tokens: list,
    target_tokens: list,
    position_rows: int | None = None,
) -> ct2_specs.TransformerSpec:
    """The CTranslate2 spec of `model` (a built `t2t_lite.models.Transformer`).

    Args:
        model: the Transformer, float32.
        source_tokens: the token of every source id, in id order (id 0 = padding,
            id 1 = EOS); CTranslate2 translates tokens, not ids.
        target_tokens: the same for the target vocabulary.
        position_rows: rows of the position table (the longest position + 1); default
            the model's max_position.

    Raises:
        SpecError: for a model CTranslate2 cannot express, or vocabularies whose size
            is not the embeddings'.
    """
    check_expressible(model)
    source, target = model._source(), model._target()
    for name, tokens, embedding in (
        ("source", source_tokens, source),
        ("target", target_tokens, target),
    ):
        if len(tokens) != embedding.vocab_size or len(set(tokens)) != len(tokens):
            raise SpecError(
                f"the {name} vocabulary has {len(tokens)} tokens ({len(set(tokens))} distinct) "
                f"but the model embeds {embedding.vocab_size} ids; export with the data_dir "
                "whose vocabulary the model was trained on"
            )
    pre_norm = model.normalize_first
    encoder = ct2_specs.TransformerEncoderSpec(
        model.num_encoder_layers, model.num_heads, pre_norm=pre_norm
    )
    decoder = ct2_specs.TransformerDecoderSpec(
        model.num_decoder_layers, model.num_heads, pre_norm=pre_norm
    )
    table = position_table(model, position_rows or model.max_position)

    # Encoder.
    encoder.embeddings[0].weight = _numpy(source.embeddings)
    encoder.scale_embeddings = True
    encoder.position_encodings.encodings = table
    for layer_spec, layer in zip(encoder.layer, model.encoder_layers):
        _set_attention(
            layer_spec.self_attention, layer.self_attention, True, layer.self_attention_layer_norm
        )
        _set_feed_forward(layer_spec.ffn, layer)
    if pre_norm:
        _set_layer_norm(encoder.layer_norm, model.encoder_layer_norm)

    # Decoder.
    target_matrix = _numpy(target.embeddings)
    decoder.embeddings.weight = target_matrix
    decoder.scale_embeddings = True
    decoder.start_from_zero_embedding = True
    decoder.position_encodings.encodings = table
    decoder.projection.weight = target_matrix
    for layer_spec, layer in zip(decoder.layer, model.decoder_layers):
        _set_attention(
            layer_spec.self_attention, layer.self_attention, True, layer.self_attention_layer_norm
        )
        _set_attention(
            layer_spec.attention, layer.cross_attention, False, layer.cross_attention_layer_norm
        )
        _set_feed_forward(layer_spec.ffn, layer)
    if pre_norm:
        _set_layer_norm(decoder.layer_norm, model.decoder_layer_norm)

    spec = ct2_specs.TransformerSpec(encoder, decoder)
    spec.register_source_vocabulary(list(source_tokens))
    spec.register_target_vocabulary(list(target_tokens))
    config = spec.config
    config.layer_norm_epsilon = float(model.layer_norm_epsilon)
    config.add_source_eos = True
    config.add_source_bos = False
    config.eos_token = target_tokens[1]
    # Fed first but never embedded (start_from_zero_embedding); it must be a known token.
    config.decoder_start_token = target_tokens[0]
    config.bos_token = target_tokens[0]
    # A vocabulary without "<unk>" would get one appended at load time, one row more than
    # the embeddings: name an existing token instead (nothing we feed is unknown).
    config.unk_token = "<unk>" if "<unk>" in target_tokens else target_tokens[0]
    return spec


class SpecConverter(Converter):
    """A CTranslate2 converter whose model is an already built spec.

    `convert(output_dir, quantization=...)` validates the spec, quantizes its weights
    and writes `model.bin`, `config.json` and the vocabularies.
    """

    def __init__(self, spec: ct2_specs.TransformerSpec):
        self._spec = spec

    def _load(self):
        return self._spec

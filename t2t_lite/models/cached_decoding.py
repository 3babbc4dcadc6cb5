"""Cached decoding for the Transformer: the state a search carries from step to step.

`init_cache` builds it from the encoder's output, `decode_step` feeds one token and fills
one slot of every decoder layer's self-attention cache, and `split_cache` separates what a
beam search must reorder by parent hypothesis from what stays fixed for a sentence.
"""

from keras import ops

from t2t_lite.models import source_pointer as pointer_lib


class CachedDecoding:
    """Mixed into `Transformer`: uses its decoder layers, embeddings and `_logits`."""

    def init_cache(self, encoder_output, encoder_mask, max_decode_length):
        """The decoding state, every leaf with leading dimension B.

        Args:
            encoder_output: [B, S, D] from `encode`.
            encoder_mask: bool [B, S] from `encode`.
            max_decode_length: L, number of positions the self-attention cache holds
                (a Python int keeps shapes static for XLA).

        Returns:
            {"encoder_mask": bool [B, S],
             ["pointer": int32 [B], "encoder_output": [B, S, D]]  # with source_pointer
             "decoder_layer_<n>": {
                 "self_attention": {"key": [B, H, L, Dh], "value": [B, H, L, Dh]},  # zeros
                 "cross_attention": {"key": [B, H, S, Dh], "value": [B, H, S, Dh]}}}
            for n in 0..N-1; float leaves are in the compute dtype.
        """
        batch = ops.shape(encoder_output)[0]
        head_size = self.hidden_size // self.num_heads
        empty = ops.zeros(
            (batch, self.num_heads, max_decode_length, head_size), dtype=self.compute_dtype
        )
        cache = {"encoder_mask": ops.cast(encoder_mask, "bool")}
        if self.source_pointer:
            # Copies made so far, and what the pointer reads.
            cache["pointer"] = ops.zeros((batch,), "int32")
            cache["encoder_output"] = encoder_output
        for layer in self.decoder_layers:
            cache[layer.name] = {
                "self_attention": {"key": empty, "value": empty},
                "cross_attention": layer.compute_cross_key_value(encoder_output),
            }
        return cache

    @staticmethod
    def split_cache(cache):
        """(moving, constants): the parts of a cache that a step changes, and the rest.

        A beam search reorders only `moving` (each layer's self-attention keys and values,
        and the source pointer) by parent hypothesis after every step; `constants` (the
        encoder mask, the encoder-decoder keys and values, the encoder output) are the same
        for every hypothesis of a sentence and are never reordered.
        """
        moving, constants = {}, {}
        for key, value in cache.items():
            if key.startswith("decoder_layer_"):
                moving[key] = {"self_attention": value["self_attention"]}
                constants[key] = {"cross_attention": value["cross_attention"]}
            elif key == "pointer":
                moving[key] = value
            else:
                constants[key] = value
        return moving, constants

    def decode_step(self, ids, i, cache, constants=None):
        """One cached decoder step (eval mode): feeds `ids` at position i.

        Args:
            ids: int [B], the token at position i of the decoder input (0 when i = 0,
                then the token predicted for position i - 1).
            i: scalar int, the position, 0 <= i < L.
            cache: from `init_cache` or the previous step; or, with `constants`, the
                `moving` part of `split_cache`.
            constants: None, or the `constants` part of `split_cache`, of B sentences
                whose B * k hypotheses (k consecutive rows a sentence) are the rows of `ids`:
                the constants are never copied per hypothesis.

        Returns:
            (float32 logits [B, V_target] for position i, the cache with slot i filled);
            with `constants`, only the moving part of the new cache.
        """
        if constants is not None:
            logits, new_cache = self.decode_step(ids, i, _joined(cache, constants))
            return logits, self.split_cache(new_cache)[0]
        i = ops.cast(i, "int32")
        encoder_mask = cache["encoder_mask"]
        new_cache = {"encoder_mask": encoder_mask}
        pointed = None
        if self.source_pointer:
            pointer = cache["pointer"] + pointer_lib.copies(ids, self._non_copy_table)  # [B]
            pointed = pointer_lib.read(cache["encoder_output"], pointer[:, None])  # [B, 1, D]
            new_cache.update(pointer=pointer, encoder_output=cache["encoder_output"])
        x = self._embed(
            self._target(), ops.expand_dims(ids, 1), i, self.decoder_embedding_dropout, False,
            pointed,
        )  # fmt: skip
        cross_attention_mask = encoder_mask[:, None, :]  # [B, 1, S]
        for layer in self.decoder_layers:
            layer_cache = cache[layer.name]
            x, self_attention_cache = layer(
                x,
                cross_key_value=layer_cache["cross_attention"],
                cross_attention_mask=cross_attention_mask,
                cache=layer_cache["self_attention"],
                cache_index=i,
                training=False,
            )
            new_cache[layer.name] = {
                "self_attention": self_attention_cache,
                "cross_attention": layer_cache["cross_attention"],
            }
        return self._logits(x)[:, 0, :], new_cache


def _joined(moving: dict, constants: dict) -> dict:
    """The whole cache from the two parts of `Transformer.split_cache`."""
    cache = dict(constants)
    for key, value in moving.items():
        cache[key] = {**constants[key], **value} if isinstance(value, dict) else value
    return cache

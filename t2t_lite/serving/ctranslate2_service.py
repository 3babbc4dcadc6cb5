"""A CTranslate2 export answering the signatures of our SavedModels, for the server.

The server serves a CTranslate2 version folder with the signatures
a SavedModel of the same model has, with the same inputs, outputs and refusals:

    serving_default, translate_with_options   sentences -> translations, scores
    translate_ids, translate_ids_with_options input_ids -> output_ids, scores

(`serving_default` is `translate_ids` when the problem's vocabulary has no text form),
and `translate_constrained` (sentences, constraints, prefix) for prefixes, passed as
CTranslate2's `target_prefix`; a request with a constraint is refused in one line, since
CTranslate2 has no lexically constrained search.
Text is encoded and decoded by the problem's own Python encoder (the SentencePiece model
exported beside the weights, or the algorithmic problems' symbols), as the decoder
command does, and searched by `CTranslate2Translator`. The scores are CTranslate2's:
log P divided by length^p, which equals ours at alpha 0 (`t2t_lite.search.ctranslate2_search`).
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.problems.algorithmic import SymbolEncoder
from t2t_lite.problems.vocab import SentencePieceEncoder
from t2t_lite.search import SearchConfig, pad_batch, strip_ids
from t2t_lite.search.config import ALPHA_RANGE
from t2t_lite.search.ctranslate2_search import (
    METADATA_FILE,
    SENTENCEPIECE_FILE,
    CTranslate2Error,
    CTranslate2Translator,
)

# Argument and output name -> (dtype, shape), None for a dimension of any size.
_SENTENCES = {"sentences": ("string", (None,))}
_INPUT_IDS = {"input_ids": ("int32", (None, None))}
_OPTIONS = {"beam_size": ("int32", ()), "alpha": ("float32", ())}
_TEXT_OUTPUTS = {"scores": ("float32", (None,)), "translations": ("string", (None,))}
_GUIDANCE = {"constraints": ("string", (None, None)), "prefix": ("string", (None,))}
_GUIDED_OUTPUTS = {**_TEXT_OUTPUTS, "constraints_met": ("bool", (None,))}
_IDS_OUTPUTS = {"output_ids": ("int32", (None, None, None)), "scores": ("float32", (None, None))}


class RefusedInput(ValueError):
    """A request the model cannot answer as asked; the message says what to change."""


class CTranslate2Service:
    """The signatures of one exported version folder.

    Args:
        path: the version folder.
        calls: how many `run` calls may come at once (CTranslate2's inter-op threads;
            the CPUs are shared out between them).

    Attributes:
        signatures: {name: (inputs, outputs)}, each {name: (dtype, shape)}.
    """

    def __init__(self, path: str, calls: int = 1):
        self.path = path
        with open(os.path.join(path, METADATA_FILE)) as f:
            metadata = json.load(f)
        if metadata.get("kind") != "ctranslate2":
            raise ValueError(f"{path}: {METADATA_FILE} does not describe a CTranslate2 export")
        self.config = SearchConfig(**metadata["search"])
        calls = max(1, calls)
        self._translator = CTranslate2Translator(
            path,
            self.config,
            threads=max(1, (os.cpu_count() or 1) // calls),
            inter_threads=calls,
        )
        self._source_size = len(self._translator.source_tokens)
        self._encoder = self._text_encoder()
        self.signatures = {
            "translate_ids": (_INPUT_IDS, _IDS_OUTPUTS),
            "translate_ids_with_options": ({**_INPUT_IDS, **_OPTIONS}, _IDS_OUTPUTS),
        }
        if self._encoder is not None:
            self.signatures["serving_default"] = (_SENTENCES, _TEXT_OUTPUTS)
            self.signatures["translate_with_options"] = ({**_SENTENCES, **_OPTIONS}, _TEXT_OUTPUTS)
            # Prefixes only: required phrases are refused (CTranslate2 has no such search).
            self.signatures["translate_constrained"] = (
                {**_SENTENCES, **_GUIDANCE},
                _GUIDED_OUTPUTS,
            )
        else:
            self.signatures["serving_default"] = self.signatures["translate_ids"]

    def _text_encoder(self):
        """The problem's Python encoder: SentencePiece, symbols, or None (ids only)."""
        sentencepiece = os.path.join(self.path, SENTENCEPIECE_FILE)
        if os.path.isfile(sentencepiece):
            return SentencePieceEncoder(sentencepiece)
        tokens = self._translator.target_tokens
        if tokens == ["<pad>", "</s>"] + [str(s) for s in range(len(tokens) - 2)]:
            return SymbolEncoder(len(tokens) - 2)
        return None

    def run(self, signature_name: str, inputs: dict) -> dict:
        """Calls a signature on {name: np.ndarray}; returns {output name: np.ndarray}.

        Raises:
            RefusedInput: a beam size the export does not offer, alpha outside [0, 10],
                an input too long, out of the vocabulary or without EOS, a sentence the
                vocabulary refuses; as a SavedModel refuses them, checked in the same
                order (the first failed check is the one reported) and with the same
                messages for ids.
        """
        config = self._search_config(inputs)
        if signature_name == "translate_constrained":
            return self._translate_guided(inputs, config)
        if "sentences" in self.signatures[signature_name][0]:
            return self._translate_text(inputs["sentences"], config)
        ids, scores = self._search(np.asarray(inputs["input_ids"]), config)
        return {"output_ids": ids[:, :, 1:], "scores": scores}

    def warm_up(self) -> None:
        """One search of a one-token input: the first call sets CTranslate2 up."""
        self.run("translate_ids", {"input_ids": np.array([[2, EOS_ID]], np.int32)})

    def _search_config(self, inputs: dict) -> SearchConfig:
        config = self.config
        if "beam_size" in inputs:
            beam = int(inputs["beam_size"])
            if beam not in config.beam_sizes:
                raise RefusedInput(
                    "beam_size is not one this export offers; choose one of "
                    f"{list(config.beam_sizes)}"
                )
            config = dataclasses.replace(config, beam_size=beam)
        if "alpha" in inputs:
            alpha = float(inputs["alpha"])
            if not ALPHA_RANGE[0] <= alpha <= ALPHA_RANGE[1]:
                raise RefusedInput(
                    f"alpha must be >= {ALPHA_RANGE[0]:g} and <= {ALPHA_RANGE[1]:g}, got {alpha:g}"
                )
            config = dataclasses.replace(config, alpha=alpha)
        return config

    def _translate_guided(self, inputs: dict, config: SearchConfig) -> dict:
        """translate_constrained with prefixes; any constraint is refused in one line."""
        if any(_text(phrase).strip() for phrase in np.asarray(inputs["constraints"]).ravel()):
            raise RefusedInput(
                "CTranslate2 cannot decode with required phrases (constraints); send them "
                "to a TensorFlow SavedModel of this model, or drop them"
            )
        prefixes = [_text(prefix).strip() for prefix in inputs["prefix"]]
        outputs = self._translate_text(inputs["sentences"], config, prefixes)
        return {**outputs, "constraints_met": np.ones([len(prefixes)], bool)}

    def _search(self, input_ids: np.ndarray, config: SearchConfig, prefixes=None) -> tuple:
        """ids [B, S] -> (ids [B, K, L + 1] with the start column, scores [B, K])."""
        batch, width = input_ids.shape
        limit = self.config.max_input_length
        if limit is not None and width > limit:
            raise RefusedInput(
                f"an input is longer than this export's limit of {limit} ids (EOS "
                "included): split long sentences, or export with a larger max_input_length"
            )
        if batch == 0:
            empty = np.zeros([0, config.width, width + config.extra_length + 1], np.int32)
            return empty, np.zeros([0, config.width], np.float32)
        if input_ids.size and input_ids.min() < 0:
            raise RefusedInput("input ids must be >= 0")
        if input_ids.size and input_ids.max() >= self._source_size:
            raise RefusedInput(f"input ids must be below the vocabulary size {self._source_size}")
        for row, ids in enumerate(input_ids):
            tokens = ids[ids != PAD_ID]
            if not len(tokens) or tokens[-1] != EOS_ID:
                raise RefusedInput(
                    f"input row {row} does not end with EOS (id {EOS_ID}): end each row "
                    f"with {EOS_ID}, then pad with 0"
                )
        try:
            return self._translator.search(input_ids, config, prefixes)
        except CTranslate2Error as error:
            raise RefusedInput(str(error)) from None

    def _translate_text(self, sentences: np.ndarray, config: SearchConfig, prefixes=None) -> dict:
        texts = [_text(s) for s in sentences]
        pieces = []
        translations = [""] * len(texts)
        scores = np.zeros([len(texts)], np.float32)
        rows, encoded = [], []
        for row, text in enumerate(texts):
            if not text.strip():  # As the decoder command does: a blank line for a blank one.
                continue
            try:
                encoded.append(list(self._encoder.encode(text)))
                prefix = self._encoder.encode(prefixes[row]) if prefixes and prefixes[row] else []
            except ValueError as error:
                raise RefusedInput(f"sentence {row}: {error}") from None
            if len(prefix) >= len(encoded[-1]) + 1 + config.extra_length:
                raise RefusedInput(
                    "a prefix is as long as its sentence's maximum output (input length + "
                    f"{config.extra_length}); shorten the prefix"
                )
            pieces.append([self._translator.target_tokens[token] for token in prefix])
            rows.append(row)
        if rows:
            ids, beam_scores = self._search(
                pad_batch(encoded), config, pieces if prefixes is not None else None
            )
            for position, row in enumerate(rows):
                translations[row] = self._encoder.decode(strip_ids(ids[position, 0]))
                scores[row] = beam_scores[position, 0]
        # Strings as UTF-8 bytes, as a SavedModel's string tensors give them.
        translations = np.array([t.encode("utf-8") for t in translations], dtype=object)
        return {"translations": translations, "scores": scores}


def _text(value) -> str:
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)

"""Searching with an exported CTranslate2 model: `CTranslate2Translator`.

`CTranslate2Translator.search` has the contract of `t2t_lite.search.Translator.search`
(ids [B, S], EOS-terminated and 0-padded, in; ids [B, K, L] with start id 0 in column 0,
and scores [B, K], out), so the decoder command (`--engine=ctranslate2`) and the server
use it as they use the TensorFlow search. What each search setting becomes in CTranslate2:

- every method: a row generates at most its own length (EOS included) + extra_length
  tokens, EOS included (rows are sent to CTranslate2 grouped by length, since its
  `max_decoding_length` is per call); EOS may come first (`min_decoding_length=0`); the
  EOS is returned, so hypothesis lengths count it, as ours do.
- greedy: beam 1; the score is log P, as ours.
- beam: beam K, K hypotheses. Alpha 0 is CTranslate2's `length_penalty=0`: both rank by
  log P and stop once the best candidate ends (identical outputs up to float rounding).
  Otherwise CTranslate2 divides by length^p where we divide by ((5 + length) / 6)^alpha;
  p = alpha * n / (5 + n), with n the row's input length (EOS included) as the expected
  output length, gives both penalties the same slope in log length there
  (`length_penalty_for`); docs/export.md compares the two.
- prefix (`search_guided`): CTranslate2's `target_prefix`, the prefix's tokens forced
  first, as `t2t_lite.decoding.PrefixConstraint` does. Required phrases (lexically
  constrained decoding) are refused: CTranslate2 has no such search.
- sample: CTranslate2's own sampler (top k, temperature, its own seed): the draws differ
  from TensorFlow's.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np

from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.search.config import SearchConfig


class CTranslate2Error(ValueError):
    """No usable export, a missing package or an input the export cannot take; the message
    says what to do."""


# Written by t2t_lite.export.ctranslate2_export beside the model.
METADATA_FILE = "t2t_lite_export.json"
SENTENCEPIECE_FILE = "sentencepiece.model"
INSTALL_HINT = 'pip install "t2t_lite[ctranslate2]"'


def resolve_model_dir(path: str) -> str:
    """EXPORT/NAME/VERSION as given, or the newest VERSION of EXPORT/NAME."""
    if os.path.isfile(os.path.join(path, METADATA_FILE)):
        return path
    versions = []
    if os.path.isdir(path):
        versions = sorted(
            (int(name) for name in os.listdir(path) if name.isascii() and name.isdigit()),
            reverse=True,
        )
    for version in versions:
        candidate = os.path.join(path, str(version))
        if os.path.isfile(os.path.join(candidate, METADATA_FILE)):
            return candidate
    raise CTranslate2Error(
        f"--ct2_model={path}: no CTranslate2 export there (no {METADATA_FILE} in it or in a "
        "numbered version folder); export one with `python -m t2t_lite.exporter "
        "--format=ctranslate2 ...` and pass EXPORT_DIR/MODEL_NAME[/VERSION]"
    )


def _vocabulary(model_dir: str, side: str) -> list:
    for name in (f"{side}_vocabulary.json", "shared_vocabulary.json"):
        path = os.path.join(model_dir, name)
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                return json.load(f)
    raise CTranslate2Error(f"{model_dir}: no {side} vocabulary (shared_vocabulary.json); re-export")


def length_penalty_for(alpha: float, length: int) -> float:
    """CTranslate2's length_penalty p closest to GNMT's alpha around `length` tokens.

    d ln(length^p) / d ln(length) = p and d ln(((5 + length) / 6)^alpha) / d ln(length)
    = alpha * length / (5 + length): equal slopes rank nearby lengths alike.
    """
    return alpha * length / (5.0 + length)


class CTranslate2Translator:
    """Searches with a CTranslate2 model folder under `config` (see the module docstring).

    Args:
        model_dir: an exported version folder (`resolve_model_dir`).
        config: the SearchConfig.
        threads: CTranslate2's intra-op threads; 0 = its default.
        compute_type: CTranslate2's compute type ("default": the exported weights' type).
        inter_threads: how many `search` calls may run at once.
    """

    def __init__(
        self,
        model_dir: str,
        config: SearchConfig,
        threads: int = 0,
        compute_type: str = "default",
        inter_threads: int = 1,
    ):
        try:
            import ctranslate2
        except ImportError as error:
            raise CTranslate2Error(
                f"--engine=ctranslate2 needs the ctranslate2 package ({error}); install it "
                f"with: {INSTALL_HINT}"
            ) from None
        self.config = config
        self.model_dir = model_dir
        self.source_tokens = _vocabulary(model_dir, "source")
        self.target_tokens = _vocabulary(model_dir, "target")
        self._target_ids = {token: index for index, token in enumerate(self.target_tokens)}
        self.translator = ctranslate2.Translator(
            model_dir,
            device="cpu",
            compute_type=compute_type,
            intra_threads=threads,
            inter_threads=inter_threads,
        )
        if config.method == "sample" and config.seed is not None:
            ctranslate2.set_random_seed(config.seed)

    def _options(self, length: int, config: SearchConfig) -> dict:
        options = dict(
            max_decoding_length=length + config.extra_length,
            min_decoding_length=0,
            max_input_length=0,
            return_end_token=True,
            return_scores=True,
            beam_size=1,
            length_penalty=0.0,
        )
        if config.method == "beam":
            options.update(
                beam_size=config.beam_size,
                num_hypotheses=config.beam_size,
                length_penalty=length_penalty_for(config.alpha, length),
            )
        elif config.method == "sample" and config.temperature > 0:
            options.update(sampling_topk=config.top_k, sampling_temperature=config.temperature)
        return options

    def search_guided(self, inputs, guidance, config: SearchConfig | None = None) -> tuple:
        """`search` with forced prefixes: (ids [B, K, L], scores [B, K], met [B, K] bool).

        `guidance` is (phrases [B, P, W], phrase_lengths [B, P], prefix [B, T],
        prefix_lengths [B]) as `t2t_lite.search.guidance_batch` makes it; phrases must be
        empty (CTranslate2Error otherwise), so `met` is all True.
        """
        _, phrase_lengths, prefix, prefix_lengths = (np.asarray(part) for part in guidance)
        if phrase_lengths.size and phrase_lengths.max() > 0:
            raise CTranslate2Error(
                "CTranslate2 cannot decode with required phrases (constraints); decode with "
                "--engine=tensorflow, or a TensorFlow SavedModel, to use them"
            )
        prefixes = [
            [self.target_tokens[token] for token in prefix[row, : prefix_lengths[row]]]
            for row in range(len(prefix_lengths))
        ]
        ids, scores = self.search(inputs, config, prefixes)
        return ids, scores, np.ones(scores.shape, bool)

    def search(self, inputs, config: SearchConfig | None = None, prefixes=None) -> tuple:
        """ids [B, S] int (EOS-terminated, 0-padded) -> (ids [B, K, L] int32, scores [B, K]).

        L = S + extra_length + 1; column 0 is the start id 0, ids after EOS are 0; beam
        slots CTranslate2 left empty score -inf. `config` replaces the translator's
        SearchConfig for this call (a served request's beam and alpha); `prefixes`, per
        row the target tokens (strings) its outputs start with.
        """
        config = config or self.config
        inputs = np.asarray(inputs)
        batch, width = inputs.shape
        beams = config.width
        ids = np.zeros([batch, beams, width + config.extra_length + 1], np.int32)
        scores = np.full([batch, beams], -np.inf, np.float32)
        groups = defaultdict(list)
        sources = []
        for row in range(batch):
            tokens = [int(token) for token in inputs[row] if token != PAD_ID]
            if not tokens or tokens[-1] != EOS_ID:
                raise CTranslate2Error(f"input row {row} does not end with EOS (id {EOS_ID})")
            sources.append([self.source_tokens[token] for token in tokens[:-1]])
            groups[len(tokens)].append(row)
        for length, rows in groups.items():
            options = self._options(length, config)
            if prefixes is not None:
                options["target_prefix"] = [prefixes[row] or None for row in rows]
            results = self.translator.translate_batch([sources[row] for row in rows], **options)
            for row, result in zip(rows, results):
                for k, (tokens, score) in enumerate(zip(result.hypotheses, result.scores)):
                    hypothesis = [self._target_ids[token] for token in tokens]
                    ids[row, k, 1 : 1 + len(hypothesis)] = hypothesis
                    scores[row, k] = score
        return ids, scores

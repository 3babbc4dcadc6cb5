"""Decoding with an exported CTranslate2 model (`python -m t2t_lite.decoder --engine=ctranslate2`).

`CTranslate2Translator.search` has the contract of `t2t_lite.search.Translator.search`
(ids [B, S], EOS-terminated and 0-padded, in; ids [B, K, L] with start id 0 in column 0,
and scores [B, K], out), so `Decoder` batches, writes and scores its outputs exactly as
with the TensorFlow engine. What each search setting becomes in CTranslate2:

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
- sample: CTranslate2's own sampler (top k, temperature, its own seed): the draws differ
  from TensorFlow's.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict

import numpy as np

from t2t_lite import problems as problems_lib
from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.inference.decode import Decoder
from t2t_lite.inference.text_files import DecodeError
from t2t_lite.runs import TrainedModel
from t2t_lite.runs.run_dir import load_hparams
from t2t_lite.search import SearchConfig

# Written by t2t_lite.export.ctranslate2_export beside the model.
METADATA_FILE = "t2t_lite_export.json"
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
    raise DecodeError(
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
    raise DecodeError(f"{model_dir}: no {side} vocabulary (shared_vocabulary.json); re-export")


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
    """

    def __init__(
        self,
        model_dir: str,
        config: SearchConfig,
        threads: int = 0,
        compute_type: str = "default",
    ):
        try:
            import ctranslate2
        except ImportError as error:
            raise DecodeError(
                f"--engine=ctranslate2 needs the ctranslate2 package ({error}); install it "
                f"with: {INSTALL_HINT}"
            ) from None
        self.config = config
        self.model_dir = model_dir
        self.source_tokens = _vocabulary(model_dir, "source")
        self.target_tokens = _vocabulary(model_dir, "target")
        self._target_ids = {token: index for index, token in enumerate(self.target_tokens)}
        self.translator = ctranslate2.Translator(
            model_dir, device="cpu", compute_type=compute_type, intra_threads=threads
        )
        if config.method == "sample" and config.seed is not None:
            ctranslate2.set_random_seed(config.seed)

    def _options(self, length: int) -> dict:
        config = self.config
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

    def search(self, inputs) -> tuple:
        """ids [B, S] int (EOS-terminated, 0-padded) -> (ids [B, K, L] int32, scores [B, K]).

        L = S + extra_length + 1; column 0 is the start id 0, ids after EOS are 0; beam
        slots CTranslate2 left empty score -inf.
        """
        inputs = np.asarray(inputs)
        batch, width = inputs.shape
        beams = self.config.width
        ids = np.zeros([batch, beams, width + self.config.extra_length + 1], np.int32)
        scores = np.full([batch, beams], -np.inf, np.float32)
        groups = defaultdict(list)
        sources = []
        for row in range(batch):
            tokens = [int(token) for token in inputs[row] if token != PAD_ID]
            if not tokens or tokens[-1] != EOS_ID:
                raise DecodeError(f"input row {row} does not end with EOS (id {EOS_ID})")
            sources.append([self.source_tokens[token] for token in tokens[:-1]])
            groups[len(tokens)].append(row)
        for length, rows in groups.items():
            results = self.translator.translate_batch(
                [sources[row] for row in rows], **self._options(length)
            )
            for row, result in zip(rows, results):
                for k, (tokens, score) in enumerate(zip(result.hypotheses, result.scores)):
                    hypothesis = [self._target_ids[token] for token in tokens]
                    ids[row, k, 1 : 1 + len(hypothesis)] = hypothesis
                    scores[row, k] = score
        return ids, scores


def ctranslate2_decoder(
    model_path: str,
    problem_name: str,
    data_dir: str,
    search_overrides: dict,
    batch_size: int = 32,
    printer=print,
    threads: int = 0,
) -> Decoder:
    """A `Decoder` that searches with the CTranslate2 model at `model_path`.

    Args:
        model_path: EXPORT/NAME (its newest version) or EXPORT/NAME/VERSION.
        problem_name: must be the problem the model was exported for.
        data_dir: the data folder holding the problem's vocabulary.
        search_overrides: SearchConfig fields (None = the export's default).
        batch_size, printer: as for `Decoder`.
        threads: CTranslate2's intra-op threads; 0 = its default.

    Raises:
        DecodeError: no export at `model_path`, another problem, or a vocabulary that is
            not the export's.
    """
    model_dir = resolve_model_dir(model_path)
    with open(os.path.join(model_dir, METADATA_FILE)) as f:
        metadata = json.load(f)
    problem = problems_lib.get(problem_name)
    if metadata.get("problem") != problem.name:
        raise DecodeError(
            f"{model_dir} was exported for problem {metadata.get('problem')}, not "
            f"{problem.name}; pass --problem={metadata.get('problem')} or another --ct2_model"
        )
    if problem.search_constraint(data_dir) is not None:
        raise DecodeError(
            f"problem {problem.name} constrains its search, which CTranslate2 cannot do; "
            "decode with --engine=tensorflow"
        )
    hp = load_hparams(model_dir)
    exported = metadata.get("search", {})
    defaults = {key: exported.get(key) for key in ("beam_size", "alpha", "extra_length")}
    overrides = {key: value for key, value in search_overrides.items() if value is not None}
    config = SearchConfig.for_problem(problem, hp, **{**defaults, **overrides})
    # What decode reports and records as the model decoded: the export and its checkpoint.
    source = f"{model_dir} (CTranslate2 export of {metadata.get('checkpoint')})"
    trained = TrainedModel(model=None, hp=hp, problem=problem, checkpoint_path=source)
    translator = CTranslate2Translator(model_dir, config, threads=threads)
    decoder = Decoder(trained, data_dir, config, batch_size, printer, translator=translator)
    _check_vocabulary(decoder, translator, model_dir)
    return decoder


def _check_vocabulary(decoder: Decoder, translator: CTranslate2Translator, model_dir: str):
    """Refuses an export whose vocabulary is not the one --data_dir holds."""
    for side, encoder, tokens in (
        ("source", decoder.source_encoder, translator.source_tokens),
        ("target", decoder.target_encoder, translator.target_tokens),
    ):
        pieces = encoder.pieces() if hasattr(encoder, "pieces") else None
        if encoder.vocab_size != len(tokens) or (pieces is not None and pieces != tokens):
            raise DecodeError(
                f"{model_dir}: its {side} vocabulary ({len(tokens)} tokens) is not the "
                f"{decoder.problem.name} vocabulary of --data_dir ({encoder.vocab_size}); "
                "pass the --data_dir the model was exported from, or re-export"
            )

"""Decoding with an exported CTranslate2 model (`python -m t2t_lite.decoder --engine=ctranslate2`).

The search is `t2t_lite.search.ctranslate2_search.CTranslate2Translator`, which has the
contract of the TensorFlow `Translator`, so `Decoder` batches, writes and scores its
outputs exactly as with the TensorFlow engine.
"""

from __future__ import annotations

import json
import os

from t2t_lite import problems as problems_lib
from t2t_lite.inference.decode import Decoder
from t2t_lite.inference.text_files import DecodeError
from t2t_lite.runs import TrainedModel
from t2t_lite.runs.run_dir import load_hparams
from t2t_lite.search import SearchConfig
from t2t_lite.search.ctranslate2_search import (
    METADATA_FILE,
    CTranslate2Translator,
    resolve_model_dir,
)


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
        ValueError: no export at `model_path` (CTranslate2Error), another problem, or a
            vocabulary that is not the export's (DecodeError).
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

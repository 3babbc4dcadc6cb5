"""CTranslate2 model folders of a trained run, versioned like the SavedModels.

`export_ctranslate2` writes

    EXPORT_DIR/MODEL_NAME/VERSION/
        model.bin, config.json             CTranslate2's model (weights quantized as asked)
        shared_vocabulary.json             the token of every id (source_ and target_ when
                                           the vocabularies differ)
        sentencepiece.model                the problem's SentencePiece model, when it has one
        hparams.json                       the model's hparams, as in the run's folder
        t2t_lite_export.json               problem, checkpoint, search defaults

with VERSION one more than the newest there, written under a temporary name and renamed
(never half-written). `ctranslate2.Translator(VERSION_DIR)` loads it; sources are the
SentencePiece pieces of a sentence (EOS is added by the model's config), and the decoder
command translates with it (`--engine=ctranslate2`, `t2t_lite.inference.ctranslate2_engine`).

ctranslate2 is an optional dependency (`pip install "t2t_lite[ctranslate2]"`).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

from t2t_lite.export.exporter import ExportError, ExportResult, export_search, next_version
from t2t_lite.runs import is_ensemble
from t2t_lite.runs.restore import TrainedModel, load_trained_model
from t2t_lite.runs.run_dir import HPARAMS_FILE
from t2t_lite.search import SearchConfig
from t2t_lite.search.ctranslate2_search import INSTALL_HINT, METADATA_FILE, SENTENCEPIECE_FILE

# CTranslate2's Translator runs one model per folder.
ENSEMBLE_REFUSED = (
    "CTranslate2 cannot run an ensemble of models: export each run alone with "
    "--format=ctranslate2, or the ensemble as one SavedModel with --format=savedmodel"
)
# Weight types CTranslate2 converts to (its `ACCEPTED_MODEL_TYPES`); None keeps float32.
QUANTIZATIONS = (
    "int8",
    "int8_float32",
    "int8_float16",
    "int8_bfloat16",
    "int16",
    "float16",
    "bfloat16",
    "float32",
)


def import_ctranslate2():
    """The ctranslate2 module, or an ExportError saying how to install it."""
    try:
        import ctranslate2
    except ImportError as error:
        raise ExportError(
            f"--format=ctranslate2 needs the ctranslate2 package ({error}); "
            f"install it with: {INSTALL_HINT}"
        ) from None
    return ctranslate2


def vocabulary_tokens(encoder, problem_name: str) -> list:
    """The token of every id of a problem's encoder, in id order, each distinct.

    SentencePiece vocabularies give their pieces; symbol vocabularies (the algorithmic
    problems) "<pad>", "</s>" and the symbols as written ("0", "1", ...).
    """
    if hasattr(encoder, "pieces"):
        return list(encoder.pieces())
    if hasattr(encoder, "num_symbols"):
        return ["<pad>", "</s>"] + [str(symbol) for symbol in range(encoder.num_symbols)]
    raise ExportError(
        f"problem {problem_name} uses a {type(encoder).__name__}, whose ids have no tokens "
        "CTranslate2 could translate; give it a SentencePiece vocabulary (problems/vocab.py)"
    )


def export_ctranslate2(
    trained: TrainedModel,
    data_dir: str,
    export_dir: str,
    model_name: str,
    search: SearchConfig | None = None,
    quantization: str | None = None,
) -> ExportResult:
    """Writes the next version of EXPORT_DIR/MODEL_NAME as a CTranslate2 model folder.

    Args:
        trained: from `load_trained_model` (float32).
        data_dir: the data folder of the problem (its vocabulary).
        export_dir: the folder of exported models.
        model_name: the model's name; its versions go to EXPORT_DIR/MODEL_NAME/.
        search: the search defaults recorded beside the model (beam, alpha, extra
            length); None = the problem's.
        quantization: one of QUANTIZATIONS, or None to keep float32 weights.

    Returns:
        ExportResult with the version and its folder as `text_dir` (`ids_dir` None).

    Raises:
        ExportError: ctranslate2 missing, an unknown quantization, a model or problem
            CTranslate2 cannot express, or a bad model name.
    """
    if trained.members:
        raise ExportError(ENSEMBLE_REFUSED)
    ctranslate2 = import_ctranslate2()
    from t2t_lite.export import ctranslate2_spec  # Imports ctranslate2 at its top.

    if not model_name or os.sep in model_name or model_name.startswith("."):
        raise ExportError(f"model name {model_name!r} must be a plain folder name")
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise ExportError(
            f"--quantization={quantization} is not a CTranslate2 weight type; choose one of "
            f"{', '.join(QUANTIZATIONS)}"
        )
    problem = trained.problem
    if problem.search_constraint(data_dir) is not None:
        raise ExportError(
            f"problem {problem.name} constrains its search (outputs must be trees over the "
            "input's words), which CTranslate2 cannot do; export it as a SavedModel"
        )
    search = export_search(trained, search)
    encoders = problem.encoders(data_dir)
    source_tokens = vocabulary_tokens(encoders["inputs"], problem.name)
    target_tokens = vocabulary_tokens(encoders["targets"], problem.name)
    rows = trained.hp.max_position
    try:
        spec = ctranslate2_spec.transformer_spec(
            trained.model, source_tokens, target_tokens, position_rows=rows
        )
    except ctranslate2_spec.SpecError as error:
        raise ExportError(
            f"cannot export {trained.checkpoint_path} to CTranslate2: {error}"
        ) from None

    base = os.path.join(export_dir, model_name)
    os.makedirs(base, exist_ok=True)
    version = next_version(base)
    final = os.path.join(base, str(version))
    temporary = os.path.join(base, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    ctranslate2_spec.SpecConverter(spec).convert(temporary, quantization=quantization)
    vocab_file = getattr(encoders["inputs"], "model_path", None)
    if vocab_file:
        shutil.copyfile(vocab_file, os.path.join(temporary, SENTENCEPIECE_FILE))
    metadata = {
        "kind": "ctranslate2",
        "problem": problem.name,
        "checkpoint": trained.checkpoint_path,
        "search": dataclasses.asdict(search),
        "version": version,
        "quantization": quantization or "float32",
        "ctranslate2_version": ctranslate2.__version__,
        # Positions 0 .. position_rows - 1 are known to both stacks.
        "position_rows": rows,
    }
    with open(os.path.join(temporary, HPARAMS_FILE), "w") as f:
        f.write(trained.hp.to_json())
    with open(os.path.join(temporary, METADATA_FILE), "w") as f:
        json.dump(metadata, f, indent=2, sort_keys=True)
    os.rename(temporary, final)
    return ExportResult(version, final, None, search)


def export_ctranslate2_from_run(
    problem: str,
    data_dir: str,
    output_dir: str,
    export_dir: str,
    model_name: str,
    checkpoint_path: str | None = None,
    hparams_set: str | None = None,
    overrides: str = "",
    quantization: str | None = None,
    **search_overrides,
) -> ExportResult:
    """Restores the newest (or the given) checkpoint of a run and exports it to CTranslate2.

    `search_overrides` (beam_size, alpha, extra_length, ...; None = the problem's) go to
    `SearchConfig.for_problem` and are recorded as the model's defaults.
    """
    if is_ensemble(output_dir, checkpoint_path):
        raise ExportError(ENSEMBLE_REFUSED)
    import_ctranslate2()  # Says how to install it before a model is restored.
    trained = load_trained_model(
        problem, data_dir, output_dir, checkpoint_path, hparams_set, overrides
    )
    search = SearchConfig.for_problem(trained.problem, trained.hp, **search_overrides)
    return export_ctranslate2(trained, data_dir, export_dir, model_name, search, quantization)

"""SavedModels of a trained Transformer: text in, text out, with beam search inside the graph.

`export_model` writes two SavedModels in TensorFlow Serving's layout, under the same
version number (one more than the newest already there):

    EXPORT_DIR/MODEL_NAME/VERSION/       text and ids signatures (needs tensorflow-text ops
                                         when the vocabulary is SentencePiece)
    EXPORT_DIR/MODEL_NAME_ids/VERSION/   ids signatures only, core TensorFlow ops only, for
                                         `saved_model_cli run` and servers without TF Text

Signatures (B sentences, S source ids, K beams, L = S + extra_length generated ids):

    serving_default          sentences string [B]
                             -> translations string [B], scores float32 [B]
    translate_with_options   sentences string [B], beam_size int32 [], alpha float32 []
                             -> translations string [B], scores float32 [B]
    translate_ids            input_ids int32 [B, S] (EOS-terminated, 0-padded)
                             -> output_ids int32 [B, K, L], scores float32 [B, K]
    translate_ids_with_options
                             input_ids int32 [B, S], beam_size int32 [], alpha float32 []
                             -> output_ids int32 [B, K, L], scores float32 [B, K]

    translate_constrained    sentences string [B], constraints string [B, P] (each row's
                             required phrases, "" = none), prefix string [B] ("" = none)
                             -> translations string [B], scores float32 [B],
                                constraints_met bool [B]
                             (beam search with the default beam and alpha; see
                             `t2t_lite.decoding.lexical`; not for problems whose search
                             has a constraint of its own, such as parsing)

The text SavedModel also has the `translate_nbest`, `attention` and `model_info`
signatures of `inspection.py`. The ids-only SavedModel has the two ids signatures, `translate_ids` also under the name
`serving_default`. Translations are the best beam; scores are log P(Y | X) divided by the
GNMT length penalty. `output_ids` hold the generated ids (no start id), EOS, then zeros.
Per-request beam sizes must be one of the export's `beam_sizes` (each is a branch of the
graph, since a beam is a static dimension); alpha must be in [0, 10]. A sentence's
translation does not depend on the batch it comes in: each row generates at most its own
length (EOS included) + extra_length ids, however wide the batch is padded.

The search is the one of `t2t_lite.search.Translator`: the model's `encode`,
`init_cache` and cached `decode_step` under `t2t_lite.decoding.beam_search`, so a
reloaded SavedModel gives exactly the in-process outputs.

An ensemble (`t2t_lite.runs.load_models` of several runs) exports as one SavedModel with
these same signatures, searching with the combined distribution of its models; its
`attention` signature shows the first model's attention. The metadata lists the members.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil

import tensorflow as tf

from t2t_lite.export.inspection import inspector_for
from t2t_lite.export.searcher import BeamSearcher
from t2t_lite.export.text_codec import codec_for
from t2t_lite.ids import EOS_ID
from t2t_lite.runs import TrainedModel, in_decode_dtype, load_models
from t2t_lite.search import SearchConfig

IDS_SUFFIX = "_ids"
METADATA_FILE = os.path.join("assets.extra", "t2t_lite_export.json")
# Predict bodies (TF Serving's REST format) that `t2t_lite.serving` runs before serving a
# version, so that the first real request does not pay for the graph's optimisation.
WARMUP_FILE = os.path.join("assets.extra", "t2t_lite_warmup.json")


class ExportError(ValueError):
    """The export cannot be made as asked; the message says why and what to do."""


@dataclasses.dataclass(frozen=True)
class ExportResult:
    """What `export_model` wrote: the version and its folders (ids_dir None if not written)."""

    version: int
    text_dir: str
    ids_dir: str | None
    search: SearchConfig


def export_search(trained: TrainedModel, search: SearchConfig | None = None) -> SearchConfig:
    """`search`, or the problem's defaults, with the model's input limit; beam search only."""
    if search is None:
        search = SearchConfig.for_problem(trained.problem, trained.hp)
    if search.method != "beam":
        raise ExportError(f"exports search with beam search, not {search.method}")
    if search.max_input_length is None:
        limit = trained.hp.max_position - search.extra_length
        search = dataclasses.replace(search, max_input_length=limit)
    return search


class TranslationModule(tf.Module):
    """What one SavedModel holds: the searcher and, for text signatures, the codecs.

    Args:
        searcher: the BeamSearcher (shared between the text and the ids-only module).
        source_codec: tf.Module with `tokenize(strings [B]) -> ragged ids [B, (S)]`
            (EOS appended), or None for an ids-only module (core TensorFlow ops only).
        target_codec: tf.Module with `detokenize(ids [B, L]) -> strings [B]`, or None.
        inspector: an `inspection.Inspector` adding its signatures (text modules only).
    """

    def __init__(
        self, searcher: BeamSearcher, source_codec=None, target_codec=None, inspector=None
    ):
        super().__init__(name="translation")
        self.searcher = searcher
        if source_codec is not None:
            self.source_codec = source_codec
            self.target_codec = target_codec
        self._has_text = source_codec is not None
        self._inspector = inspector  # the n-best, attention and model_info signatures

    def translate_text(self, sentences, beam_size, alpha) -> dict:
        """sentences string [B] -> {"translations": string [B], "scores": float32 [B]}.

        A blank sentence (empty or whitespace) gets "" and score 0, as in the decoder.
        """
        ids = self.source_codec.tokenize(sentences)  # [B, (S)] with EOS
        input_ids = tf.cast(ids.to_tensor(default_value=0), tf.int32)  # [B, S]
        output_ids, scores = self.searcher.search(input_ids, beam_size, alpha)
        translations = self.target_codec.detokenize(output_ids[:, 0, :])
        # As the decoder command does, a blank sentence translates to a blank line.
        blank = tf.equal(tf.strings.length(tf.strings.strip(sentences)), 0)  # [B]
        return {
            "translations": tf.where(blank, "", translations),
            "scores": tf.where(blank, 0.0, scores[:, 0]),
        }

    def translate_ids(self, input_ids, beam_size, alpha) -> dict:
        """ids [B, S] -> {"output_ids": int32 [B, K, L], "scores": float32 [B, K]}."""
        output_ids, scores = self.searcher.search(input_ids, beam_size, alpha)
        return {"output_ids": output_ids, "scores": scores}

    def translate_constrained(self, sentences, constraints, prefix) -> dict:
        """Translations that contain required phrases and start with a prefix.

        Args:
            sentences: string [B].
            constraints: string [B, P], each row's phrases, padded with "" (no phrase).
            prefix: string [B], the text each translation starts with ("" for none).

        Returns:
            {"translations": string [B], "scores": float32 [B], "constraints_met": bool
            [B]: the translation contains every phrase (False when they cannot fit in
            the sentence's maximum length, and it was searched without them)}.
        """
        config = self.searcher.search_config
        ids = self.source_codec.tokenize(sentences)  # [B, (S)] with EOS
        input_ids = tf.cast(ids.to_tensor(default_value=0), tf.int32)  # [B, S]
        batch, num = tf.shape(constraints)[0], tf.shape(constraints)[1]
        phrases = self._target_pieces(tf.reshape(constraints, [-1]))  # [B * P, (W)]
        dense = phrases.to_tensor()  # [B * P, W]
        phrase_ids = tf.reshape(dense, [batch, num, tf.shape(dense)[1]])  # [B, P, W]
        phrase_lengths = tf.reshape(tf.cast(phrases.row_lengths(), tf.int32), [batch, num])
        prefixes = self._target_pieces(prefix)  # [B, (T)]
        guidance = (
            phrase_ids,
            phrase_lengths,
            prefixes.to_tensor(),
            tf.cast(prefixes.row_lengths(), tf.int32),
        )
        output_ids, scores, met = self.searcher.search_guided(
            input_ids,
            tf.constant(config.beam_size, tf.int32),
            tf.constant(config.alpha, tf.float32),
            guidance,
        )
        translations = self.target_codec.detokenize(output_ids[:, 0, :])
        blank = tf.equal(tf.strings.length(tf.strings.strip(sentences)), 0)  # [B]
        return {
            "translations": tf.where(blank, "", translations),
            "scores": tf.where(blank, 0.0, scores[:, 0]),
            "constraints_met": tf.logical_or(blank, met[:, 0]),
        }

    def _target_pieces(self, texts) -> tf.RaggedTensor:
        """int32 [N, (W)] target ids of each text, without EOS ("" gives no ids)."""
        ids = self.target_codec.tokenize(tf.strings.strip(texts))  # [N, (W + 1)], EOS last
        return tf.cast(ids[:, :-1], tf.int32)

    def warmup_request(self) -> dict:
        """A predict body for `serving_default`: an empty sentence, or just EOS as ids."""
        if self._has_text:
            return {"signature_name": "serving_default", "instances": [""]}
        return {"signature_name": "serving_default", "inputs": [[EOS_ID]]}

    def signatures(self) -> dict:
        """{name: concrete function} for tf.saved_model.save."""
        sentences = tf.TensorSpec([None], tf.string, name="sentences")
        input_ids = tf.TensorSpec([None, None], tf.int32, name="input_ids")
        beam_size = tf.TensorSpec([], tf.int32, name="beam_size")
        alpha = tf.TensorSpec([], tf.float32, name="alpha")
        options = self.searcher.search_config

        def defaults():
            return tf.constant(options.beam_size, tf.int32), tf.constant(options.alpha, tf.float32)

        def ids_default(input_ids):
            return self.translate_ids(input_ids, *defaults())

        functions = {
            "translate_ids": tf.function(ids_default, autograph=False, input_signature=[input_ids]),
            "translate_ids_with_options": tf.function(
                self.translate_ids, autograph=False, input_signature=[input_ids, beam_size, alpha]
            ),
        }
        if self._has_text:

            def text_default(sentences):
                return self.translate_text(sentences, *defaults())

            functions["serving_default"] = tf.function(
                text_default, autograph=False, input_signature=[sentences]
            )
            functions["translate_with_options"] = tf.function(
                self.translate_text, autograph=False, input_signature=[sentences, beam_size, alpha]
            )
        else:
            functions["serving_default"] = functions["translate_ids"]
        if self._has_text and self.searcher.supports_guidance:
            functions["translate_constrained"] = tf.function(
                self.translate_constrained,
                autograph=False,
                input_signature=[
                    sentences,
                    tf.TensorSpec([None, None], tf.string, name="constraints"),
                    tf.TensorSpec([None], tf.string, name="prefix"),
                ],
            )
        if self._has_text and self._inspector is not None:
            functions.update(self._inspector.signatures())
        return {name: fn.get_concrete_function() for name, fn in functions.items()}


def next_version(*model_dirs: str) -> int:
    """One more than the largest numeric version folder in any of `model_dirs` (1 if none)."""
    versions = [0]
    for folder in model_dirs:
        if os.path.isdir(folder):
            # ASCII only: str.isdigit() also takes "²", which int() rejects.
            versions += [
                int(name) for name in os.listdir(folder) if name.isascii() and name.isdigit()
            ]
    return max(versions) + 1


def _save(module: TranslationModule, model_dir: str, version: int, metadata: dict) -> str:
    """Saves under a temporary name, then renames to MODEL_DIR/VERSION (never half-written)."""
    os.makedirs(model_dir, exist_ok=True)
    final = os.path.join(model_dir, str(version))
    if os.path.exists(final):
        raise ExportError(f"{final} already exists; exports never overwrite a version")
    temporary = os.path.join(model_dir, f".tmp-{version}-{os.getpid()}")
    shutil.rmtree(temporary, ignore_errors=True)
    signatures = module.signatures()
    # The export serves; nothing differentiates it. Without the gradient functions of the
    # custom-gradient kernels (layer norm) the saver traces and writes less.
    options = tf.saved_model.SaveOptions(experimental_custom_gradients=False)
    tf.saved_model.save(module, temporary, signatures=signatures, options=options)
    os.makedirs(os.path.join(temporary, "assets.extra"), exist_ok=True)
    with open(os.path.join(temporary, METADATA_FILE), "w") as f:
        json.dump(dict(metadata, signatures=sorted(signatures)), f, indent=2, sort_keys=True)
    with open(os.path.join(temporary, WARMUP_FILE), "w") as f:
        json.dump([module.warmup_request()], f)
    os.rename(temporary, final)
    return final


def export_model(
    trained: TrainedModel,
    data_dir: str,
    export_dir: str,
    model_name: str,
    search: SearchConfig | None = None,
    ids_model_name: str | None = None,
    decode_dtype: str = "float32",
    xla: bool | None = None,
) -> ExportResult:
    """Writes the text SavedModel and (unless disabled) the ids-only one, same version.

    Args:
        trained: from `load_trained_model`.
        data_dir: the data folder of the problem (for its vocabulary).
        export_dir: the folder of exported models.
        model_name: the model's name; its versions go to EXPORT_DIR/MODEL_NAME/.
        search: the default beam and alpha, the beams a request may ask for and the
            longest input (`SearchConfig.for_problem`); None = the problem's defaults.
        ids_model_name: name of the ids-only SavedModel; None = MODEL_NAME + "_ids",
            "" = do not write it.
        decode_dtype: "float32", or "bfloat16" to search with a bfloat16 copy of the
            model (`t2t_lite.runs.in_decode_dtype`).
        xla: compile the search with XLA; None = as `t2t_lite.search.SearchFunction`
            decides (only with a GPU, and not for a constrained search).

    Returns:
        ExportResult with the version and the two version folders.
    """
    if not model_name or os.sep in model_name or model_name.startswith("."):
        raise ExportError(f"model name {model_name!r} must be a plain folder name")
    search = export_search(trained, search)
    encoders = trained.problem.encoders(data_dir)
    source_codec = codec_for(encoders["inputs"], trained.problem.name)
    target_codec = (
        source_codec
        if encoders["targets"] is encoders["inputs"]
        else codec_for(encoders["targets"], trained.problem.name)
    )
    ids_name = model_name + IDS_SUFFIX if ids_model_name is None else ids_model_name
    text_base = os.path.join(export_dir, model_name)
    ids_base = os.path.join(export_dir, ids_name) if ids_name else None
    version = next_version(text_base, *([ids_base] if ids_base else []))
    metadata = {
        "problem": trained.problem.name,
        "checkpoint": trained.checkpoint_path,
        "hparams": dataclasses.asdict(trained.hp),
        "search": dataclasses.asdict(search),
        "version": version,
        "decode_dtype": decode_dtype,
        "xla": xla,
    }
    if trained.members:
        metadata["ensemble"] = {
            "combination": trained.model.combination,
            "weights": list(trained.model.weights),
            "members": [
                {"checkpoint": member.checkpoint_path, "hparams": dataclasses.asdict(member.hp)}
                for member in trained.members
            ],
        }
    searcher = BeamSearcher(
        in_decode_dtype(trained, decode_dtype).model,
        search,
        constraint=trained.problem.search_constraint(data_dir),
        jit_compile=xla,
    )
    inspector = inspector_for(trained, encoders, searcher, source_codec, target_codec)
    text_module = TranslationModule(searcher, source_codec, target_codec, inspector)
    text_dir = _save(text_module, text_base, version, dict(metadata, kind="text"))
    ids_dir = None
    if ids_base:
        ids_module = TranslationModule(searcher)
        ids_dir = _save(ids_module, ids_base, version, dict(metadata, kind="ids"))
    return ExportResult(version, text_dir, ids_dir, search)


def export_from_run(
    problem: str,
    data_dir: str,
    output_dir: str,
    export_dir: str,
    model_name: str,
    checkpoint_path: str | None = None,
    hparams_set: str | None = None,
    overrides: str = "",
    ids_model_name: str | None = None,
    decode_dtype: str = "float32",
    xla: bool | None = None,
    ensemble_combination: str = "mean_probability",
    ensemble_weights=None,
    **search_overrides,
) -> ExportResult:
    """Restores the newest (or the given) checkpoint of a run and exports it: the CLI's call.

    Several runs (or checkpoints), comma-separated, export as one ensemble
    (`t2t_lite.runs.load_models`, with `ensemble_combination` and `ensemble_weights`).
    `search_overrides` (beam_size, alpha, extra_length, beam_sizes, max_input_length; None
    = the problem's default) go to `SearchConfig.for_problem`.
    """
    trained = load_models(
        problem,
        data_dir,
        output_dir,
        checkpoint_path,
        hparams_set,
        overrides,
        ensemble_combination,
        ensemble_weights,
    )
    search = SearchConfig.for_problem(trained.problem, trained.hp, **search_overrides)
    return export_model(
        trained, data_dir, export_dir, model_name, search, ids_model_name, decode_dtype, xla
    )

"""`RunConfig`: where and how long to train, everything that is not an hparam.

It is the one source of a run's settings and their defaults: `define_flags` makes the
trainer command's flags from its fields (name, type, default, choices, help), and
`from_flags` reads them back, so the command and the library cannot disagree. The step
budget has one default, the hparams set's `train_steps`: `train_steps=None` means it, and
`resolve` fills it in together with absolute paths when a run starts.
"""

from __future__ import annotations

import dataclasses
import os

from absl import flags

from t2t_lite.runs.run_dir import RunDirError

STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker", "tpu")
# tensor2tensor's folders: datagen writes under the first, runs go under the second.
DEFAULT_DATA_DIR = os.path.join("~", "t2t_data")
DEFAULT_TRAIN_ROOT = os.path.join("~", "t2t_train")
EVAL_DECODE_METHODS = ("beam", "greedy")
KEEP_BEST = ("none", "loss", "bleu")


def _field(default, help_text: str, minimum=None, choices=None):
    """A RunConfig field whose flag says `help_text`; `minimum` and `choices` are checked."""
    metadata = {"help": help_text, "minimum": minimum, "choices": choices}
    return dataclasses.field(default=default, metadata=metadata)


@dataclasses.dataclass(kw_only=True)
class RunConfig:
    """Where and how long to train; every field is also a flag of `python -m t2t_lite.trainer`."""

    # Required here; the trainer command names it ~/t2t_train/PROBLEM-HPARAMS_SET when unset.
    output_dir: str = dataclasses.field(
        metadata={
            "help": "Where checkpoints, hparams, manifest and events go; default "
            f"{DEFAULT_TRAIN_ROOT}/PROBLEM-HPARAMS_SET."
        }
    )
    problem: str = _field(
        "algorithmic_reverse",
        "Registered problem name (e.g. multi30k_ende), or module:ClassName of your own.",
    )
    data_dir: str = _field(
        DEFAULT_DATA_DIR, "Folder holding one sub-folder per problem (datagen output)."
    )
    train_steps: int | None = _field(
        None,
        "Optimizer updates to train for (global step); default: the hparams set's own "
        "(transformer_base 100,000, transformer_big 300,000; see --registry_help).",
        0,
    )
    train_minutes: float = _field(
        0.0,
        "Stop after this many minutes, start-up and evaluations included (0 = no limit); "
        "the step budget still applies.",
        0,
    )
    eval_steps: int = _field(0, "Dev batches per evaluation; 0 = the whole dev split.", 0)
    eval_every: int = _field(1000, "Evaluate every this many steps.", 1)
    save_every: int = _field(1000, "Write a checkpoint every this many steps.", 1)
    keep_checkpoints: int = _field(
        20, "Checkpoints to keep on disk (the paper averages up to 20).", 1
    )
    log_every: int = _field(100, "Print progress and write train summaries this often.", 1)
    strategy: str = _field(
        "auto",
        "tf.distribute strategy; auto picks from TF_CONFIG and visible GPUs.",
        choices=STRATEGIES,
    )
    num_gpus: int | None = _field(None, "Use this many of the visible GPUs; unset = all.", 0)
    cpu_replicas: int = _field(1, "Mirror over this many logical CPU devices.", 1)
    seed: int = _field(1, "Random seed for weights, dropout and shuffling.")
    jit_compile: bool | None = _field(
        None,
        "Compile the forward and backward pass with XLA (--nojit_compile: never). Unset: on "
        "GPUs and TPUs, off on CPUs, where tools/benchmark_train.py measures no gain.",
    )
    eval_bleu_sentences: int = _field(
        200,
        "BLEU problems: dev sentences decoded and scored with sacreBLEU at every evaluation "
        "(eval/bleu, eval/samples); 0 turns it off.",
        0,
    )
    eval_decode_method: str = _field(
        "beam",
        "Search for the BLEU evaluation: the problem's beam (paper: 4, alpha 0.6) or greedy "
        "(faster).",
        choices=EVAL_DECODE_METHODS,
    )
    keep_best: str = _field(
        "none",
        "Keep the checkpoint with the best dev score in OUTPUT_DIR/best (with best.json: "
        "metric, value, step): loss (lower is better) or bleu (BLEU problems, with "
        "--eval_bleu_sentences >= 1); none keeps no best.",
        choices=KEEP_BEST,
    )
    early_stopping: int = _field(
        0,
        "Stop after this many evaluations in a row that do not beat the best --keep_best "
        "score (needs --keep_best, whose metric it watches); 0 never stops early.",
        0,
    )
    warm_start_from: str | None = _field(
        None,
        "Start a new run from this checkpoint prefix or run folder (its newest checkpoint; "
        "RUN/best for its best): model variables of the same name and shape are copied, the "
        "optimizer starts fresh at step 0. Ignored when --output_dir has checkpoints (the run "
        "resumes from them).",
    )
    warm_start_vocab: str | None = _field(
        None,
        "With --warm_start_from: the SentencePiece .model of the source run's vocabulary; "
        "embedding rows are carried over by piece to this problem's vocabulary (new pieces "
        "keep fresh rows).",
    )

    def __post_init__(self):
        self.check()

    def check(self) -> None:
        """Raises RunDirError naming the first field (flag) whose value cannot work."""
        if not self.output_dir:
            raise RunDirError(
                "--output_dir: not set; name the run's folder (the trainer command's default "
                f"is {DEFAULT_TRAIN_ROOT}/PROBLEM-HPARAMS_SET)"
            )
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            minimum, choices = field.metadata.get("minimum"), field.metadata.get("choices")
            if minimum is not None and value is not None and value < minimum:
                raise RunDirError(
                    f"--{field.name}={value}: must be >= {minimum} ({field.metadata['help']})"
                )
            if choices and value not in choices:
                raise RunDirError(f"--{field.name}={value}: must be one of {', '.join(choices)}")
        if self.early_stopping and self.keep_best == "none":
            raise RunDirError(
                f"--early_stopping={self.early_stopping}: needs --keep_best=loss or "
                "--keep_best=bleu, the dev score it watches"
            )
        if self.warm_start_vocab and not self.warm_start_from:
            raise RunDirError(
                f"--warm_start_vocab={self.warm_start_vocab}: needs --warm_start_from, the "
                "checkpoint whose embedding rows it maps"
            )


# How each field type becomes a flag.
_DEFINE = {
    "str": flags.DEFINE_string,
    "str | None": flags.DEFINE_string,
    "int": flags.DEFINE_integer,
    "int | None": flags.DEFINE_integer,
    "float": flags.DEFINE_float,
    "bool | None": flags.DEFINE_bool,
}


def define_flags(flag_values: flags.FlagValues = flags.FLAGS) -> None:
    """Defines one flag per RunConfig field, with the field's default, choices and help."""
    for field in dataclasses.fields(RunConfig):
        default = None if field.default is dataclasses.MISSING else field.default
        help_text = field.metadata["help"]
        if field.metadata.get("choices"):
            flags.DEFINE_enum(
                field.name, default, list(field.metadata["choices"]), help_text,
                flag_values=flag_values,
            )  # fmt: skip
        else:
            _DEFINE[field.type](field.name, default, help_text, flag_values=flag_values)


def from_flags(flag_values: flags.FlagValues = flags.FLAGS, **values) -> RunConfig:
    """The RunConfig of the parsed flags, `values` (e.g. a default output_dir) filling unset ones.

    Raises:
        RunDirError: for a value that cannot work.
    """
    for field in dataclasses.fields(RunConfig):
        if flag_values[field.name].present or field.name not in values:
            values[field.name] = flag_values[field.name].value
    return RunConfig(**values)


def default_output_dir(problem_name: str, hparams_set: str) -> str:
    """tensor2tensor's habit: ~/t2t_train/PROBLEM-HPARAMS_SET, absolute."""
    return absolute(os.path.join(DEFAULT_TRAIN_ROOT, f"{problem_name}-{hparams_set}"))


def absolute(path: str) -> str:
    """`path` with ~ expanded, made absolute ("" stays "": no folder)."""
    return os.path.abspath(os.path.expanduser(path)) if path else path


def resolve(config: RunConfig, hp) -> RunConfig:
    """`config` as the run uses it: absolute folders, the hparams set's train_steps if unset."""
    steps = hp.train_steps if config.train_steps is None else config.train_steps
    return dataclasses.replace(
        config,
        output_dir=absolute(config.output_dir),
        data_dir=absolute(config.data_dir),
        train_steps=steps,
        warm_start_from=absolute(config.warm_start_from),
        warm_start_vocab=absolute(config.warm_start_vocab),
    )

"""Shared test set-up: two logical CPU devices, and the path of the shared corpora."""

import contextlib
import fcntl
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


# Each xdist worker's TensorFlow, and every command a test starts (they inherit the
# environment), gets the cores shared out among the workers as its intra-op threads.
# Sized to all cores, two workers' thread pools on 2 cores compete for them: the files
# test_parsing_decode.py and test_decoder.py on two workers took 335 s that way against
# 316 s with one thread per worker, run one after the other. A value set by the user
# wins; with `-n 0` nothing is set.
if "PYTEST_XDIST_WORKER" in os.environ:
    _workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    _threads = max(1, len(os.sched_getaffinity(0)) // _workers)
    os.environ.setdefault("TF_NUM_INTRAOP_THREADS", str(_threads))

import tensorflow as tf  # noqa: E402

# Two logical CPUs let MirroredStrategy run with two replicas on any machine. This has
# to happen before TensorFlow initialises its devices, so it is done at import time.
_cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    _cpu, [tf.config.LogicalDeviceConfiguration(), tf.config.LogicalDeviceConfiguration()]
)

REPO = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO.parent / "shared" / "data"


def load_tool(name: str):
    """The script tools/<name>.py as a module (the tools are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "tools" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real corpora beside the repository (`../shared/data`)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared corpora are missing: expected them at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def reference_evalb(shared_data, tmp_path_factory) -> Path:
    """The reference EVALB program, built with gcc into a temporary folder from its C source.

    The source is not part of the shared data by default (see `evalb/SOURCE.txt` there for
    where it comes from): put it at `evalb/evalb.c` beside the parameter files, or name it
    in the environment variable EVALB_SOURCE. Without it (or gcc) the test is skipped.
    """
    source = Path(os.environ.get("EVALB_SOURCE") or shared_data / "evalb" / "evalb.c")
    if not source.is_file():
        pytest.skip(f"no EVALB C source at {source} (see evalb/SOURCE.txt; or set EVALB_SOURCE)")
    if shutil.which("gcc") is None:
        pytest.skip("gcc is not installed: cannot build the reference EVALB program")
    binary = tmp_path_factory.mktemp("evalb") / "evalb"
    subprocess.run(["gcc", "-O2", "-o", str(binary), str(source)], check=True, timeout=120)
    return binary


@contextlib.contextmanager
def shared_run_folder(tmp_path_factory, name: str):
    """Yields a folder `name` common to every test worker of this pytest run, locked.

    The caller builds the folder's content if it is not there yet; other workers asking
    for it meanwhile wait for the lock, then find it built (a run trained once per
    session, not once per worker).
    """
    root = tmp_path_factory.getbasetemp()
    if "PYTEST_XDIST_WORKER" in os.environ:
        root = root.parent  # the run's folder, above each worker's own
    with open(root / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield root / name
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def readme_main_job_command() -> list:
    """The README's main-job command (after `pip install -e . &&`), as argv."""
    for line in (REPO / "README.md").read_text().splitlines():
        if line.strip().startswith("pip install -e . && python -m t2t_lite.trainer"):
            return shlex.split(line.split("&&", 1)[1])
    raise AssertionError("README.md has no main-job line 'pip install -e . && python -m ...'")


def readme_main_job_run(tmp_path_factory) -> tuple:
    """(run folder, {"returncode", "stdout", "stderr"}) of the README's main job, run once.

    The command runs as README.md writes it, in a fresh Python, with only --output_dir
    moved into this pytest run's shared folder. Its model is also the trained
    algorithmic_reverse model of the decoding tests (it reverses what it is given), so the
    suite trains it once for both.
    """
    with shared_run_folder(tmp_path_factory, "readme_main_job") as folder:
        record = folder / "result.json"
        if not record.exists():
            folder.mkdir(parents=True, exist_ok=True)
            command = readme_main_job_command()
            assert command[:3] == ["python", "-m", "t2t_lite.trainer"], command
            command = [sys.executable] + [
                f"--output_dir={folder / 'run'}" if arg.startswith("--output_dir=") else arg
                for arg in command[1:]
            ]
            env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
            done = subprocess.run(command, capture_output=True, text=True, timeout=1800, env=env)
            result = {"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}
            record.write_text(json.dumps(result))
        return folder / "run", json.loads(record.read_text())


# The files that take longest on 2 CPU cores (minutes each), longest first. The test
# workers (pyproject.toml's addopts) take whole files in collection order, so starting these
# first keeps one long file from running alone at the end. The README's main job leads: its
# run is the trained model of files further down, so it is ready before they ask for it
# instead of one worker waiting on the other's training.
_LONGEST_FIRST = (
    "test_readme_main_job.py",
    "test_trainer.py",
    "test_recipes.py",
    "test_export.py",
    "test_ensemble.py",
    "test_decoder.py",
    "test_parsing_decode.py",
    "test_commands.py",
    "test_serving.py",
    "test_page.py",
    "test_datagen.py",
    "test_serving_faults.py",
    "test_training_faults.py",
    "test_averaging.py",
    "test_ctranslate2.py",
    "test_benchmark_train.py",
)


# The quick tier (`python -m pytest -m quick`, docs/testing.md): every module imported
# (test_every_module.py) and one small behaviour of each part, chosen among tests that
# need no trained fixture and no datagen. A file maps to the tests it contributes, by
# function name (all of its parameters) or by full name (one of them), or to ALL.
ALL = "*"
QUICK = {
    "test_every_module.py": ALL,
    "test_hparams.py": ALL,
    "test_schedule_and_loss.py": ALL,
    "test_cpu_features.py": ALL,
    "test_algorithmic.py": (
        "test_registry_lists_and_refuses",
        "test_reverse_examples_are_reversed_and_end_with_eos",
        "test_symbol_encoder_round_trip_and_errors",
    ),
    "test_layers.py": (
        "test_padding_mask_on_literal_batch",
        "test_sinusoid_matches_the_papers_formula",
        "test_embedding_scales_by_sqrt_d_and_zeroes_padding",
        "test_embedding_attend_is_the_transposed_matrix_without_bias",
        "test_attention_equals_numpy_eq1_and_ignores_masked_keys",
        "test_feed_forward_is_eq2",
        "test_encoder_layer_composes_sublayers_as_the_paper_says",
        "test_decoder_layer_composes_sublayers_and_is_causal",
        "test_residual_dropout_only_in_training",
    ),
    "test_layer_kernels.py": (
        "test_auto_is_cpu_kernels_on_cpus_and_keras_on_accelerators",
        "test_layer_norm_kernels_equal_keras_values_and_gradients[shape0-eager]",
        "test_dropout_kernel_keep_probability_and_scale",
        "test_positionwise_projection_equals_einsum_dense",
        "test_cross_entropy_gradient_equals_autodiff[cpu_kernel-eager-0.1]",
        "test_moved_keras_internals_fail_loudly_naming_the_version_and_attribute",
    ),
    "test_transformer.py": (
        "test_call_is_decode_of_targets_shifted_right",
        "test_cached_decoding_equals_full_decoding[overrides0-None]",
        "test_source_pointer_reads_the_next_source_token_to_copy",
    ),
    "test_beam_search.py": (
        "test_alpha_favours_the_longer_less_probable_hypothesis",
        "test_bad_arguments_and_step_functions_are_explained",
    ),
    "test_greedy.py": (
        "test_greedy_follows_the_argmax_path_and_pads_after_eos",
        "test_sampling_is_reproducible_with_a_seed",
    ),
    "test_constraints.py": ("test_masks_of_a_two_word_tree",),
    "test_bleu.py": (
        "test_tokenized_bleu_of_tiny_corpus_matches_hand_count",
        "test_sacrebleu_of_tiny_corpus_matches_hand_count",
    ),
    "test_evalb.py": ("test_crossing_brackets_hand_derived", "test_sample_rsl_byte_for_byte"),
    "test_trees.py": ("test_linearize_hand_example", "test_parse_errors_name_tree_and_line"),
    "test_pipeline.py": ("test_bucket_boundaries_are_tensor2tensors",),
    "test_vocab.py": (
        "test_reserved_ids_follow_design",
        "test_decode_stops_at_eos_and_skips_padding",
        "test_reservoir_sample_is_uniform_bounded_and_deterministic",
    ),
    "test_translate.py": (
        "test_registry_lists_the_translation_problems",
        "test_missing_files_are_named",
    ),
    "test_parsing.py": ("test_registry_decode_defaults_and_hparams", "test_score_hand_derived"),
    "test_trainer.py": (
        "test_time_budget_stops_saves_and_evaluates",
        "test_eta_is_the_sooner_of_the_step_and_time_budgets",
    ),
    "test_averaging.py": ("test_no_checkpoints_is_a_clear_error",),
    "test_keep_best.py": ("test_bleu_keeps_the_highest_score_and_ties_do_not_count",),
    "test_training_faults.py": (
        "test_impossible_hparams_are_refused_naming_the_hparam_value_and_rule",
    ),
    "test_distributed.py": ("test_make_strategy_refuses_contradictory_flags",),
    "test_mixed_precision.py": ("test_adam_of_either_kernel_set_matches_keras_adam",),
    "test_decoder.py": (
        "test_read_lines_splits_on_newlines_only_and_names_bad_bytes",
        "test_length_batches_sort_longest_first_and_cover_every_index_once",
        "test_output_lines_never_break_line_alignment",
    ),
    "test_scoring.py": (
        "test_the_length_penalty_is_gnmts_by_hand",
        "test_default_file_names_name_the_checkpoint_for_scores_as_for_decodes",
    ),
    "test_export.py": (
        "test_symbol_codec_matches_the_python_encoder",
        "test_search_options_follow_the_problem_and_the_paper",
    ),
    "test_serving.py": ("test_merge_pads_variable_length_inputs_and_keeps_unbatched_ones",),
    "test_serving_faults.py": ("test_the_server_and_the_search_share_the_alpha_range",),
    "test_ctranslate2.py": ("test_length_penalty_with_the_same_slope_as_gnmt",),
    "test_datagen.py": ("test_count_lines_agrees_with_read_lines",),
    "test_commands.py": ("test_console_script_help_lists_its_own_flags_and_exits_0",),
}


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order and stays contiguous
    for item in items:
        chosen = QUICK.get(item.path.name, ())
        if chosen == ALL or item.originalname in chosen or item.name in chosen:
            item.add_marker(pytest.mark.quick)

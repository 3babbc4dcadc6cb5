"""Shared test set-up: two logical CPU devices, and the path of the shared corpora."""

import contextlib
import fcntl
import os
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


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The folder of real corpora beside the repository (`../shared/data`)."""
    if not SHARED_DATA.is_dir():
        pytest.fail(f"the shared corpora are missing: expected them at {SHARED_DATA}")
    return SHARED_DATA


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


# The files that take longest on 2 CPU cores (minutes each), longest first. The two test
# workers (pyproject.toml's addopts) take whole files in collection order, so starting these
# first keeps one long file from running alone at the end.
_LONGEST_FIRST = (
    "test_trainer.py",
    "test_readme_main_job.py",
    "test_recipes.py",
    "test_export.py",
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


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order and stays contiguous

"""Shared test set-up: two logical CPU devices, and the path of the shared corpora."""

import contextlib
import fcntl
import os
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

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
    "test_averaging.py",
    "test_benchmark_train.py",
)


def pytest_collection_modifyitems(items):
    def rank(item):
        name = item.path.name
        return _LONGEST_FIRST.index(name) if name in _LONGEST_FIRST else len(_LONGEST_FIRST)

    items.sort(key=rank)  # stable: each file keeps its own order and stays contiguous

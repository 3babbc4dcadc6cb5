"""Every library module of the package imports, so the quick tier (`-m quick`) touches all.

The command-line modules (`python -m t2t_lite.trainer` etc.) define their flags on absl's
global registry at import, so they cannot share one process; the quick tier starts each
of them once instead (tests/test_commands.py, `--help`).
"""

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where each part's files are: problems/ and hparams/ install as t2t_lite.problems and
# t2t_lite.hparams (setup.py's package_dir).
ROOTS = {"t2t_lite": "t2t_lite", "t2t_lite.problems": "problems", "t2t_lite.hparams": "hparams"}
COMMANDS = {
    "trainer", "datagen", "decoder", "exporter", "serve", "avg_checkpoints", "evalb", "attention",
}  # fmt: skip


def library_modules() -> list:
    """The dotted names of every module of the package but the command-line ones."""
    names = []
    for package, folder in ROOTS.items():
        for path in sorted((REPO / folder).rglob("*.py")):
            parts = path.relative_to(REPO / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            elif package == "t2t_lite" and len(parts) == 1 and parts[0] in COMMANDS:
                continue
            names.append(".".join((package, *parts)))
    return names


def test_the_module_list_finds_each_part():
    names = library_modules()
    for expected in (
        "t2t_lite.ids",
        "t2t_lite.layers.attention",
        "t2t_lite.problems.algorithmic",
        "t2t_lite.hparams.transformer",
        "t2t_lite.serving.server",
    ):
        assert expected in names
    assert "t2t_lite.trainer" not in names and "t2t_lite.training.trainer" in names


@pytest.mark.parametrize("name", library_modules())
def test_module_imports(name):
    module = importlib.import_module(name)
    assert module.__name__ == name

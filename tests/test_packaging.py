"""A regular (non-editable) install lays the package out as setup.py promises.

The editable install that development uses resolves `t2t_lite.problems` and
`t2t_lite.hparams` through setuptools' path mapping; a regular install copies the files.
This builds the package the way `pip install .` does (setuptools' build_py, from a copy of
the tracked files, so the checkout is untouched) and imports from the built tree alone.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def source_files() -> list:
    """The checkout's files: git's tracked ones, or (no git) every file but build output."""
    try:
        listed = subprocess.run(
            ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True, timeout=60
        )
        return [line for line in listed.stdout.splitlines() if line]
    except (OSError, subprocess.CalledProcessError):
        skipped = {".git", "__pycache__", "build", ".pytest_cache", ".ruff_cache"}
        return [
            str(path.relative_to(REPO))
            for path in REPO.rglob("*")
            if path.is_file()
            and not skipped.intersection(path.relative_to(REPO).parts)
            and not any(part.endswith(".egg-info") for part in path.parts)
        ]


def test_regular_install_layout_imports_problems_and_hparams(tmp_path):
    source = tmp_path / "source"
    for name in source_files():
        target = source / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, target)
    built = tmp_path / "lib"
    build = subprocess.run(
        [sys.executable, "setup.py", "-q", "build_py", f"--build-lib={built}"],
        cwd=source, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    # problems/ and hparams/ land inside t2t_lite, nothing generic at the top level.
    assert sorted(path.name for path in built.iterdir()) == ["t2t_lite"]
    page = [f"serving/page/{name}" for name in ("index.html", "page.css", "page.js", "draw.js")]
    for module in ("problems/__init__.py", "problems/translate.py", "hparams/__init__.py", *page):
        assert (built / "t2t_lite" / module).is_file(), module
    check = (
        "import t2t_lite, t2t_lite.problems as p, t2t_lite.hparams as h;"
        "files = [t2t_lite.__file__, p.__file__, h.__file__];"
        f"assert all(f.startswith({str(built)!r}) for f in files), files;"
        "print(p.get('algorithmic_reverse').name, h.get('transformer_base').hidden_size)"
    )
    environment = {**os.environ, "PYTHONPATH": str(built)}
    # Run from an empty folder so that the checkout is not importable by the current directory.
    imported = subprocess.run(
        [sys.executable, "-c", check], cwd=tmp_path, env=environment,
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert imported.stdout.split()[-2:] == ["algorithmic_reverse", "512"]

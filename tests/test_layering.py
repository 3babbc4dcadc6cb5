"""The package's layering (docs/design.md), checked on every module's imports.

Each module's imports of t2t_lite are read from its source (module level and inside
functions alike) and checked against `ALLOWED`: which parts a part may import. The
actual graph between parts must also be free of cycles. Two planted violations show
that the check fails when a rule is broken.
"""

import ast
import shutil
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# Where each part's files are: problems/ and hparams/ install as t2t_lite.problems and
# t2t_lite.hparams (setup.py's package_dir).
ROOTS = {"t2t_lite": "t2t_lite", "t2t_lite.problems": "problems", "t2t_lite.hparams": "hparams"}
# The command-line modules: they parse flags and call one library function each.
COMMANDS = {
    "trainer", "datagen", "decoder", "exporter", "serve", "avg_checkpoints", "evalb", "attention",
}  # fmt: skip

# Part -> the parts it may import. A part is a subpackage, `ids` (the shared ids) or
# `version` (the package's __init__, which holds only __version__).
ALLOWED = {
    "version": set(),
    "ids": set(),
    "hparams": set(),
    # Pure functions over text (sacreBLEU, EVALB): imported by the problems that own their
    # scores, by training (BLEU during training) and by inference (writing scores).
    "metrics": set(),
    "kernels": set(),
    "layers": {"kernels"},
    "models": {"layers", "kernels", "ids"},
    "decoding": {"ids"},
    # A problem owns its outputs, so it scores them (metrics) and says what its search may
    # output (decoding's constraints); it never imports models or training.
    "problems": {"ids", "decoding", "metrics"},
    "search": {"ids", "decoding"},
    "runs": {"version", "ids", "hparams", "problems", "models"},
    "training": {
        "ids",
        "hparams",
        "metrics",
        "kernels",
        "layers",
        "models",
        "decoding",
        "problems",
        "search",
        "runs",
    },  # fmt: skip
    "inference": {"ids", "metrics", "problems", "search", "runs"},
    "export": {"ids", "decoding", "problems", "search", "runs"},
    # Serving loads SavedModels as TensorFlow Serving would, and answers for a CTranslate2
    # version with CTranslate2's search and the problem's text encoder: never the model code.
    "serving": {"ids", "search", "problems"},
    # The commands' shared plumbing (absl help, a quiet TensorFlow start-up); it lists the
    # registered problems and hparams sets for --registry_help.
    "cli": {"hparams", "problems"},
}
# Parts whose code must not build input pipelines: a model is portable and testable alone.
NO_TF_DATA = {"kernels", "layers", "models"}


def part_of(module: str) -> str:
    """The part a module belongs to: "trainer" -> "command", "t2t_lite.runs.x" -> "runs"."""
    names = module.split(".")
    if len(names) == 1:
        return "version"
    if len(names) == 2 and names[1] in COMMANDS:
        return "command"
    return names[1]


def modules(repo: Path) -> dict:
    """{module name: source file} of every module of the package under `repo`."""
    found = {}
    for package, folder in ROOTS.items():
        for path in sorted((repo / folder).rglob("*.py")):
            relative = path.relative_to(repo / folder).with_suffix("")
            names = [package, *relative.parts]
            if names[-1] == "__init__":
                names.pop()
            name = ".".join(names)
            if package == "t2t_lite" and name.split(".")[:2] in (
                ["t2t_lite", "problems"],
                ["t2t_lite", "hparams"],
            ):
                continue
            found[name] = path
    return found


def imports(name: str, path: Path) -> list:
    """(line, imported t2t_lite module) of every import in the file, relative ones resolved."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".")
                parts = parts if is_package else parts[:-1]
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join(parts + ([base] if base else []))
            found += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return [(line, target) for line, target in found if target.split(".")[0] == "t2t_lite"]


def check(repo: Path) -> list:
    """Every breach of the layering under `repo`, one message each (empty when it holds)."""
    problems, edges = [], {}
    known = modules(repo)
    for name, path in known.items():
        part = part_of(name)
        where = path.relative_to(repo)
        if part not in ALLOWED and part != "command":
            problems.append(f"{where}: part {part!r} is not in the layering; add it to ALLOWED")
            continue
        for line, target in imports(name, path):
            other = part_of(_module_of(target, known))
            if other in (part, "command") and other != "command":
                continue
            if other == "command" or (part != "command" and other not in ALLOWED[part]):
                problems.append(f"{where}:{line}: {part} may not import {other} ({target})")
            if part != "command":
                edges.setdefault(part, set()).add(other)
        if part in NO_TF_DATA and "tf.data" in path.read_text():
            problems.append(f"{where}: {part} uses tf.data; input pipelines belong to problems")
    cycle = _cycle(edges)
    if cycle:
        problems.append(f"import cycle between parts: {' -> '.join(cycle)}")
    return problems


def _module_of(target: str, known: dict) -> str:
    """The module an import names: `t2t_lite.search.SearchConfig` -> `t2t_lite.search`."""
    while target not in known and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def _cycle(edges: dict) -> list:
    """One cycle of the graph {part: parts it imports}, as a path, or []."""
    state = {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == "open":
                return path[path.index(nxt) :] + [nxt] if nxt in path else [node, nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = "done"
        return []

    for start in sorted(edges):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return []


def test_the_package_follows_its_layering():
    assert check(REPO) == []


def test_allowed_imports_have_no_cycle():
    assert _cycle(ALLOWED) == []


def test_every_part_of_the_package_is_in_the_layering():
    parts = {part_of(name) for name in modules(REPO)} - {"command"}
    assert parts <= set(ALLOWED), sorted(parts - set(ALLOWED))


def _copy(tmp_path: Path) -> Path:
    for folder in ROOTS.values():
        shutil.copytree(
            REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    return tmp_path


@pytest.mark.parametrize(
    "file, planted, expected",
    [
        # A model that reaches into training.
        (
            "t2t_lite/models/transformer.py",
            "from t2t_lite.training import trainer\n",
            "t2t_lite/models/transformer.py:{line}: models may not import training",
        ),
        # The server importing the model code (it must only load SavedModels).
        (
            "t2t_lite/serving/server.py",
            "    from t2t_lite.models import build_transformer\n",
            "t2t_lite/serving/server.py:{line}: serving may not import models",
        ),
        # Run folders importing the decoder library: breaks the rule and closes a cycle.
        (
            "t2t_lite/runs/restore.py",
            "from t2t_lite.inference import decode\n",
            "t2t_lite/runs/restore.py:{line}: runs may not import inference",
        ),
    ],
)
def test_a_planted_violation_fails_the_check(tmp_path, file, planted, expected):
    repo = _copy(tmp_path)
    path = repo / file
    text = path.read_text()
    if planted.startswith("    "):  # inside a function: the check reads those too
        text += "\n\ndef _planted():\n" + planted
    else:
        text += "\n" + planted
    path.write_text(text)
    line = len(text.rstrip("\n").splitlines())
    found = check(repo)
    assert any(message.startswith(expected.format(line=line)) for message in found), found
    if "runs may not import inference" in expected:
        assert any(message.startswith("import cycle between parts:") for message in found)


def test_a_model_building_an_input_pipeline_fails_the_check(tmp_path):
    repo = _copy(tmp_path)
    path = repo / "t2t_lite/layers/masks.py"
    path.write_text(
        path.read_text() + "\n\ndef _planted(x):\n    return tf.data.Dataset.from_tensors(x)\n"
    )
    assert (
        "t2t_lite/layers/masks.py: layers uses tf.data; input pipelines belong to problems"
        in check(repo)
    )


def test_hparams_sets_derive_from_transformer_base_in_one_step():
    """Each set is `HParams(...)` (the base) or `dataclasses.replace(transformer_base(), ...)`."""
    from t2t_lite import hparams

    sources = {}
    for path in (REPO / "hparams").glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.FunctionDef):
                sources[node.name] = node
    for name in hparams.names():
        returned = [n.value for n in ast.walk(sources[name]) if isinstance(n, ast.Return)]
        assert len(returned) == 1, name
        call = returned[0]
        if name == "transformer_base":
            assert ast.unparse(call.func) == "HParams"
            continue
        assert ast.unparse(call.func) == "dataclasses.replace", name
        assert ast.unparse(call.args[0]) == "transformer_base()", (name, ast.unparse(call.args[0]))

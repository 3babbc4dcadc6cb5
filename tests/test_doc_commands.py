"""Every command the documentation shows uses only flags its program defines; links resolve.

README.md and docs/*.md are read for commands in fenced blocks, indented blocks and inline
code spans that start a program: `python -m t2t_lite.X`, a console script `t2t-X` (mapped
to its module through setup.py), or a script `tools/X.py`. Each `--flag` (or `-f`) written
after the program, up to the next `&&`, `|`, `;` or redirection, must be one the program
accepts:
- absl commands: the flags the module registers as its own key flags, read from absl's
  FLAGS in a fresh process that imports only that module (absl refuses a flag name defined
  twice, so two commands cannot share one process), plus absl's own (--help, --verbosity,
  ...); `--noNAME` and `--[no]NAME` for boolean flags;
- argparse programs (tools/*.py, t2t_lite.evalb): the option strings of their
  `add_argument` calls, read from the source without running it (several tools import
  TensorFlow at the top).
A failure names the file, the line and the flag.
"""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOC_FILES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
SEPARATORS = {"&&", "||", "|", ";", ">", ">>", "<", "2>", "2>&1", "&"}

# Run in a fresh interpreter: import one command module, then print the flags it accepts.
_FLAG_LISTER = """
import importlib, json, sys
from absl import app, flags
name = sys.argv[1]
importlib.import_module(name)
app.define_help_flags()  # what app.run adds before it parses
by_module = flags.FLAGS.flags_by_module_dict()
accepted = list(flags.FLAGS.get_key_flags_for_module(name))
accepted += [f for module, defined in by_module.items() if module.startswith("absl.")
             for f in defined]
names = {}
for flag in accepted:
    names[flag.name] = flag.boolean
    if flag.short_name:
        names[flag.short_name] = flag.boolean
print(json.dumps(names))
"""


def console_scripts() -> dict:
    """{'t2t-trainer': 't2t_lite.trainer', ...} from setup.py's entry points."""
    text = (REPO / "setup.py").read_text()
    return dict(re.findall(r'"(t2t-[\w-]+)=([\w.]+):run"', text))


def argparse_options(path: Path) -> set:
    """The option strings of every `add_argument` call in `path`, and -h/--help."""
    options = {"-h", "--help"}
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not (isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument"):
            continue
        names = [
            arg.value
            for arg in node.args
            if isinstance(arg, ast.Constant) and str(arg.value).startswith("-")
        ]
        options.update(names)
        negated = any(
            k.arg == "action" and "BooleanOptionalAction" in ast.unparse(k.value)
            for k in node.keywords
        )
        if negated:
            options.update("--no-" + n[2:] for n in names if n.startswith("--"))
    return options


def _is_argparse(path: Path) -> bool:
    return "add_argument(" in path.read_text()


def absl_flags(modules: list) -> dict:
    """{module: {flag name: is boolean}}, each module imported in a process of its own."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    running = {
        module: subprocess.Popen(
            [sys.executable, "-c", _FLAG_LISTER, module],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=REPO,
        )
        for module in modules
    }
    found = {}
    for module, process in running.items():
        out, err = process.communicate(timeout=300)
        assert process.returncode == 0, f"importing {module} failed:\n{err[-2000:]}"
        found[module] = json.loads(out.strip().splitlines()[-1])
    return found


def doc_snippets(page: str):
    """Yields (line number, text) of each fenced or indented code line and inline code span.

    Lines ending in a backslash are joined with the next ones; the number is the first's.
    """
    lines = page.splitlines()
    fenced = False
    previous_blank = True
    in_indented = False
    pending, pending_line = "", 0
    for number, line in enumerate(lines, 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            previous_blank = False
            continue
        indented = not fenced and line.startswith("    ") and (previous_blank or in_indented)
        in_indented = indented or (in_indented and not line.strip())
        # A heading ends its line as a blank does: an indented block may follow it.
        previous_blank = not line.strip() or line.startswith("#")
        if fenced or indented:
            text = line.strip()
            if pending:
                text, number = pending + " " + text, pending_line
            if text.endswith("\\"):
                pending, pending_line = text[:-1], number
                continue
            pending = ""
            yield number, text
        else:
            for span in re.findall(r"`([^`]+)`", line):
                yield number, span


def commands(text: str, scripts: dict):
    """Yields (program, arguments) for each command in one line of shell text.

    program is a module name (`t2t_lite.decoder`) or a tools/ script path (`tools/x.py`).
    """
    try:
        tokens = shlex.split(text, comments=True)
    except ValueError:
        tokens = text.split()
    i = 0
    while i < len(tokens):
        token, program, start = tokens[i], None, i + 1
        if token.startswith("python") and tokens[i + 1 : i + 2] == ["-m"] and i + 2 < len(tokens):
            if tokens[i + 2].startswith("t2t_lite."):
                program, start = tokens[i + 2], i + 3
        elif token in scripts:
            program = scripts[token]
        elif re.fullmatch(r"(\./)?tools/\w+\.py", token):
            program = token.removeprefix("./")
        if program is None:
            i += 1
            continue
        end = start
        while end < len(tokens) and tokens[end] not in SEPARATORS:
            end += 1
        yield program, tokens[start:end]
        i = end


def flag_problems(argument: str, accepted, is_absl: bool) -> str | None:
    """Why `argument` is not a flag of the program, or None when it is (or is no flag)."""
    argument = argument.strip("[]")
    if not argument.startswith("-") or argument in ("-", "--") or argument.startswith("---"):
        return None
    name = argument.split("=", 1)[0]
    if not is_absl:
        return None if name in accepted else f"{name} is not one of its options"
    bare = name.lstrip("-")
    if bare.startswith("[no]"):
        bare = bare[4:]
        return None if accepted.get(bare) else f"--{bare} is not one of its boolean flags"
    if bare in accepted:
        return None
    if bare.startswith("no") and accepted.get(bare[2:]):
        return None
    return f"{name} is not one of its flags"


def check_text(label: str, snippets, scripts: dict, known: dict) -> list:
    """Problems found in `snippets` ((line, text) pairs) of the file called `label`."""
    problems = []
    for number, text in snippets:
        for program, arguments in commands(text, scripts):
            if program not in known:
                problems.append(f"{label}:{number}: {program}: no such program")
                continue
            accepted, is_absl = known[program]
            for argument in arguments:
                why = flag_problems(argument, accepted, is_absl)
                if why:
                    problems.append(f"{label}:{number}: {program}: {why} ({text[:80]})")
    return problems


@pytest.fixture(scope="module")
def known_programs() -> dict:
    """{program: (accepted flags, is absl)} for every command module and tools/ script."""
    scripts = console_scripts()
    known, absl_modules = {}, []
    for module in sorted(set(scripts.values())):
        source = REPO / (module.replace(".", "/") + ".py")
        if _is_argparse(source):
            known[module] = (argparse_options(source), False)
        else:
            absl_modules.append(module)
    for module, names in absl_flags(absl_modules).items():
        known[module] = (names, True)
    for script in sorted((REPO / "tools").glob("*.py")):
        known[f"tools/{script.name}"] = (argparse_options(script), False)
    return known


def test_every_console_script_is_known(known_programs):
    assert set(console_scripts().values()) <= set(known_programs)
    assert len(console_scripts()) == 8


def test_documented_flags_exist(known_programs):
    scripts = console_scripts()
    problems, seen = [], 0
    for path in DOC_FILES:
        snippets = list(doc_snippets(path.read_text()))
        seen += sum(1 for _, text in snippets for _ in commands(text, scripts))
        problems += check_text(str(path.relative_to(REPO)), snippets, scripts, known_programs)
    assert seen > 50, f"only {seen} commands found in the docs: is the extraction broken?"
    assert not problems, "documented flags the code does not define:\n" + "\n".join(problems)


def test_a_bogus_flag_is_named_with_its_file_and_line(known_programs):
    scripts = console_scripts()
    page = "Intro.\n\n    python -m t2t_lite.decoder --problem=x \\\n        --beam_width=4\n\n"
    page += "Then `t2t-trainer --[no]jit_compile --nosuch_bool` and\n"
    page += "```\npython tools/multi30k_recipe.py --raw_dir=x --minute=3 | tee log\n```\n"
    page += "`python -m t2t_lite.evalb -p COLLINS.prm -x GOLD TEST`\n"
    problems = check_text("page.md", doc_snippets(page), scripts, known_programs)
    assert problems == [
        "page.md:3: t2t_lite.decoder: --beam_width is not one of its flags "
        "(python -m t2t_lite.decoder --problem=x  --beam_width=4)",
        "page.md:6: t2t_lite.trainer: --nosuch_bool is not one of its flags "
        "(t2t-trainer --[no]jit_compile --nosuch_bool)",
        "page.md:8: tools/multi30k_recipe.py: --minute is not one of its options "
        "(python tools/multi30k_recipe.py --raw_dir=x --minute=3 | tee log)",
        "page.md:10: t2t_lite.evalb: -x is not one of its options "
        "(python -m t2t_lite.evalb -p COLLINS.prm -x GOLD TEST)",
    ]


def _anchors(page: str) -> set:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to -."""
    anchors = set()
    for heading in re.findall(r"^#+ +(.+)$", page, re.M):
        anchor = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(anchor)
    return anchors


def test_links_between_pages_resolve():
    problems = []
    for path in DOC_FILES:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for target in re.findall(r"\]\(([^)\s]+)\)", line):
                if re.match(r"[a-z]+://", target):
                    continue
                file_part, _, anchor = target.partition("#")
                linked = (path.parent / file_part).resolve() if file_part else path
                label = f"{path.relative_to(REPO)}:{number}: ({target})"
                if not linked.exists():
                    problems.append(f"{label} names no file")
                elif anchor and anchor not in _anchors(linked.read_text()):
                    problems.append(f"{label} names no heading of {linked.name}")
    assert not problems, "broken links:\n" + "\n".join(problems)

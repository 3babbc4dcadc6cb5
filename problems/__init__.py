"""Problems by name: `get(name)`, `names()`, `register(problem)`.

The registry is an explicit table: the built-in problems are listed here, and a program
adds its own with `register`, which refuses a name that is already taken. Every command
resolves `--problem` through `get`, which also accepts `module:ClassName` (a module
importable from `PYTHONPATH` or installed), so a problem defined outside this package
needs no registration to be used from the command line:

    python -m t2t_lite.datagen --problem=my_corpus:MyCorpus --data_dir=DATA
"""

from __future__ import annotations

import importlib
import inspect

from t2t_lite.ids import EOS_ID, PAD_ID
from t2t_lite.problems import algorithmic, multi30k, parsing, wmt
from t2t_lite.problems.problem import Problem, TextEncoder

_PROBLEMS = (
    algorithmic.AlgorithmicCopy,
    algorithmic.AlgorithmicReverse,
    multi30k.Multi30kEnDe,
    multi30k.Multi30kEnFr,
    wmt.Wmt14EnDe,
    wmt.Wmt14DeEn,
    wmt.Wmt14EnFr,
    wmt.Wmt14FrEn,
    parsing.WsjParsing,
    parsing.WsjParsingInOrder,
)

# Name -> a Problem subclass (get makes a new instance) or a Problem instance (get returns it).
_REGISTRY: dict = {}


def register(problem):
    """Adds a problem to the registry under its `name`; returns `problem` (a decorator too).

    Args:
        problem: a `Problem` subclass (`get` returns a new instance of it each time) or a
            `Problem` instance (`get` returns that instance).

    Raises:
        ValueError: when `problem` is not a Problem subclass or instance, has no `name`,
            or its name is registered already.
    """
    what = _describe(problem)
    if not _is_problem(problem):
        raise ValueError(f"register takes a Problem subclass or instance; got {what}")
    name = problem.name
    if not name:
        raise ValueError(f"problem {what} has no name; set the class attribute `name`")
    if name in _REGISTRY:
        raise ValueError(
            f"problem name {name!r} is registered already (by {_describe(_REGISTRY[name])}); "
            f"give {what} another name"
        )
    _REGISTRY[name] = problem
    return problem


def names() -> list:
    """The registered problem names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> Problem:
    """Returns the named problem: a registered name, or `module:ClassName`.

    With `module:ClassName` the module is imported and its attribute `ClassName` (dots
    reach nested attributes) must be a Problem subclass, which is instantiated, or a
    Problem instance, which is returned as it is.

    Raises:
        ValueError: for an unknown name (listing the known ones), a module that cannot be
            imported, a missing attribute, or one that is not a Problem.
    """
    if ":" in name:
        return _from_module(name)
    if name not in _REGISTRY:
        raise ValueError(
            f"unknown problem {name!r}; known problems: {', '.join(names())}; a problem of "
            "your own is given as module:ClassName, e.g. --problem=my_corpus:MyCorpus"
        )
    return _instance(_REGISTRY[name])


def _from_module(spec: str) -> Problem:
    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute or ":" in attribute:
        raise ValueError(f"problem {spec!r}: expected module:ClassName, e.g. my_corpus:MyCorpus")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(
            f"problem {spec!r}: cannot import module {module_name!r} ({error}); put the folder "
            "that holds it on PYTHONPATH, or install it"
        ) from error
    value = module
    for part in attribute.split("."):
        if not hasattr(value, part):
            defined = sorted(
                f"{module_name}:{key}"
                for key, item in vars(module).items()
                if inspect.isclass(item) and _is_problem(item) and item.__module__ == module_name
            )
            hint = f"; it defines {', '.join(defined)}" if defined else ""
            raise ValueError(
                f"problem {spec!r}: module {module_name!r} ({getattr(module, '__file__', '?')}) "
                f"has no attribute {attribute!r}{hint}"
            )
        value = getattr(value, part)
    if not _is_problem(value):
        raise ValueError(
            f"problem {spec!r}: {module_name}.{attribute} is {_describe(value)}, not a subclass "
            "or instance of t2t_lite.problems.Problem"
        )
    if not value.name:
        raise ValueError(
            f"problem {spec!r}: {module_name}.{attribute} has no name; set the class "
            "attribute `name` (it names the problem's folder under --data_dir)"
        )
    return _instance(value)


def _is_problem(value) -> bool:
    return isinstance(value, Problem) or (inspect.isclass(value) and issubclass(value, Problem))


def _instance(problem) -> Problem:
    return problem() if inspect.isclass(problem) else problem


def _describe(value) -> str:
    if inspect.isclass(value) or inspect.isroutine(value):
        kind = "class" if inspect.isclass(value) else "function"
        return f"{kind} {value.__module__}.{value.__qualname__}"
    if isinstance(value, Problem):
        return f"instance of {type(value).__module__}.{type(value).__qualname__}"
    return f"{type(value).__name__} {repr(value)[:60]}"


for _problem in _PROBLEMS:
    register(_problem)

__all__ = ["EOS_ID", "PAD_ID", "Problem", "TextEncoder", "get", "names", "register"]

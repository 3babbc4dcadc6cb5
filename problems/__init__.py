"""Problems by name: `get(name)`, `names()`.

The registry is an explicit table: a problem is available when it is listed here.
"""

from t2t_lite.problems import algorithmic, multi30k, parsing, wmt
from t2t_lite.problems.problem import EOS_ID, PAD_ID, Problem, TextEncoder

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
)


def _build_registry(classes) -> dict:
    registry = {}
    for cls in classes:
        if cls.name in registry:
            raise ValueError(f"problem name {cls.name!r} is registered twice")
        registry[cls.name] = cls
    return registry


_REGISTRY = _build_registry(_PROBLEMS)


def names() -> list:
    """The registered problem names, sorted."""
    return sorted(_REGISTRY)


def get(name: str) -> Problem:
    """Returns a new instance of the named problem.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown problem {name!r}; known problems: {', '.join(names())}")
    return _REGISTRY[name]()


__all__ = ["EOS_ID", "PAD_ID", "Problem", "TextEncoder", "get", "names"]

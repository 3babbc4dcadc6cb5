"""Hparams sets by name: `get(name)`, `names()`, `description(name)`, `override(hp, "k=v,k=v")`."""

from t2t_lite.hparams import parsing, transformer
from t2t_lite.hparams.hparams import HParams, override, validate

_REGISTRY = {
    fn.__name__: fn
    for fn in (
        transformer.transformer_base,
        transformer.transformer_big,
        transformer.transformer_big_enfr,
        transformer.transformer_base_single_gpu,
        transformer.transformer_big_single_gpu,
        transformer.transformer_small,
        transformer.transformer_tiny,
        transformer.transformer_algorithmic,
        transformer.transformer_multi30k,
        parsing.transformer_parsing,
        parsing.transformer_parsing_small,
    )
}


def names() -> list:
    """The registered hparams set names, sorted."""
    return sorted(_REGISTRY)


def description(name: str) -> str:
    """The first line of the named set's docstring: what the set is for."""
    get(name)  # the same error for an unknown name
    return (_REGISTRY[name].__doc__ or "").strip().split("\n", 1)[0]


def get(name: str) -> HParams:
    """Returns the named hparams set.

    Raises:
        ValueError: for an unknown name, listing the known ones.
    """
    if name not in _REGISTRY:
        raise ValueError(f"unknown hparams set {name!r}; known sets: {', '.join(names())}")
    return validate(_REGISTRY[name]())


__all__ = ["HParams", "description", "get", "names", "override", "validate"]

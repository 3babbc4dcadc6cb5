"""EVALB's parameter (.prm) files: the settings that say what is deleted, equal and counted.

Keys as in EVALB's README (section 6): DEBUG, MAX_ERROR, CUTOFF_LEN, LABELED, DELETE_LABEL,
DELETE_LABEL_FOR_LENGTH, QUOTE_LABEL (the 2006 quote fix), EQ_LABEL, EQ_WORD. How scoring uses
them is described in `t2t_lite.metrics.evalb`.
"""

from __future__ import annotations

import dataclasses
import os
import re


@dataclasses.dataclass(frozen=True)
class EvalbParams:
    """The settings of an EVALB parameter (.prm) file; field names follow its keys."""

    debug: int = 0
    max_error: int = 10
    cutoff_len: int = 40
    labeled: bool = True
    delete_labels: frozenset = frozenset()
    delete_labels_for_length: frozenset = frozenset()
    quote_labels: frozenset = frozenset()
    eq_labels: tuple = ()  # ((label, label), ...)
    eq_words: tuple = ()  # ((word, word), ...)


COLLINS = EvalbParams(
    delete_labels=frozenset(["TOP", "-NONE-", ",", ":", "``", "''", "."]),
    delete_labels_for_length=frozenset(["-NONE-"]),
    eq_labels=(("ADVP", "PRT"),),
)
_INT_KEYS = {"DEBUG": "debug", "MAX_ERROR": "max_error", "CUTOFF_LEN": "cutoff_len"}
_SET_KEYS = {
    "DELETE_LABEL": "delete_labels",
    "DELETE_LABEL_FOR_LENGTH": "delete_labels_for_length",
    "QUOTE_LABEL": "quote_labels",
}
_PAIR_KEYS = {"EQ_LABEL": "eq_labels", "EQ_WORD": "eq_words"}


def parse_params(text: str, source: str = "<params>") -> EvalbParams:
    """Parses the text of an EVALB parameter file (`KEY value...` lines, `#` comments).

    Raises:
        ValueError: On an unknown key or a malformed value, naming the source and line.
    """
    values = {"debug": 0, "max_error": 10, "cutoff_len": 40, "labeled": True}
    sets = {name: set() for name in _SET_KEYS.values()}
    pairs = {name: [] for name in _PAIR_KEYS.values()}
    for number, line in enumerate(text.splitlines(), start=1):
        # Only whole lines are comments: "#" is also a POS tag (DELETE_LABEL # is valid).
        fields = [] if line.lstrip().startswith("#") else line.split()
        if not fields:
            continue
        key, args = fields[0], fields[1:]
        where = f"{source}, line {number}"
        if key in _INT_KEYS or key == "LABELED":
            if len(args) != 1 or not re.fullmatch(r"-?\d+", args[0]):
                raise ValueError(f"{where}: {key} takes one integer, got {' '.join(args)!r}")
            if key == "LABELED":
                values["labeled"] = int(args[0]) != 0
            else:
                values[_INT_KEYS[key]] = int(args[0])
        elif key in _SET_KEYS:
            if len(args) != 1:
                raise ValueError(f"{where}: {key} takes one label, got {' '.join(args)!r}")
            sets[_SET_KEYS[key]].add(args[0])
        elif key in _PAIR_KEYS:
            if len(args) != 2:
                raise ValueError(f"{where}: {key} takes two values, got {' '.join(args)!r}")
            pairs[_PAIR_KEYS[key]].append((args[0], args[1]))
        else:
            known = sorted([*_INT_KEYS, "LABELED", *_SET_KEYS, *_PAIR_KEYS])
            raise ValueError(f"{where}: unknown key {key!r}; EVALB knows {', '.join(known)}")
    return EvalbParams(
        **values,
        **{name: frozenset(labels) for name, labels in sets.items()},
        **{name: tuple(found) for name, found in pairs.items()},
    )


def load_params(path: str | os.PathLike) -> EvalbParams:
    """Reads an EVALB parameter file such as COLLINS.prm."""
    with open(path, encoding="utf-8") as handle:
        return parse_params(handle.read(), source=os.fspath(path))

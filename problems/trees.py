"""Penn Treebank constituency trees: parsing, preprocessing, linearization and its repair.

Pure Python (no TensorFlow), used by the parsing problem and its decoder.

Trees. A `Tree` has a `label` and `children`; a preterminal is `Tree(tag, (word,))`, every other
node has only `Tree` children. `parse_trees` reads bracketed text: one tree per line, `.mrg` files
with several multi-line trees, odd whitespace, and the label-less outer bracket `( (S ...) )` of
PTB files (kept as a root with label "").

Preprocessing (`preprocess`), the standard treatment before training or scoring:
1. The outer root is removed when it is label-less (or `TOP`/`ROOT`) and has one phrasal child.
2. `-NONE-` empty elements are removed, and so is every constituent left without words.
3. Phrasal labels lose function tags and indices: `NP-SBJ-1`, `NP=2`, `NP-SBJ=1-3` -> `NP`.
   A disjunctive label `ADVP|PRT` (an annotator's undecided choice) keeps its first member, `ADVP`.
   Labels that begin and end with `-` (`-NONE-`, `-LRB-`, `-RRB-`) are names, not tagged labels,
   and POS tags are never changed.

Linearization (Vinyals et al. 2015, "Grammar as a Foreign Language"; tensor2tensor's parsing
problems): the inputs are the words, the targets are bracket tokens with labels and one token per
word, e.g. for "(S (NP (NNP John)) (VP (VBZ sleeps)) (. .))":

    leaves="placeholder" (default): (S (NP XX )NP (VP XX )VP XX )S
    leaves="tag" (keep_pos=True):   (S (NP NNP )NP (VP VBZ )VP . )S
    leaves="word" (lexicalized):    (S (NP John )NP (VP sleeps )VP . )S

In the in-order form (`order="in_order"`; Liu & Zhang 2017, "In-Order Transition-based
Constituent Parsing", and Fernandez-Gonzalez & Gomez-Rodriguez 2020 for sequence-to-sequence
parsers) a constituent's opening token comes after its first child, so a label is predicted once
the constituent's first part has been read; the tokens are the same, in another order:

    leaves="word", order="in_order": John (NP )NP (S sleeps (VP )VP . )S

By default POS tags are replaced by the placeholder `XX`, as Vinyals et al. did: the parser
predicts brackets, not tags. The lexicalized form keeps the words themselves in the targets, so
that a decoder always sees which word it has reached (He & Choi 2021 found such outputs easier
to learn); a constrained search then copies them from the input. EVALB's standard parameters (COLLINS.prm)
delete punctuation by its POS tag, so a tree scored with EVALB needs real tags: pass the gold tags
to `delinearize(tokens, words, tags=...)`, the usual convention for this setup.

`delinearize` never fails on a non-empty word list: whatever the tokens, it returns a valid tree
whose leaves are exactly the words in order (see its docstring for the repair rules).
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Sequence

POS_PLACEHOLDER = "XX"
EMPTY_ELEMENT = "-NONE-"
UNKNOWN_LABEL = "X"
_ROOT_LABELS = ("", "TOP", "ROOT")
# An opening bracket with its label (possibly empty, possibly after spaces), ")" or a word.
_TOKEN = re.compile(r"\(\s*[^\s()]*|\)|[^\s()]+")
_FUNCTION_TAG = re.compile(r"[-=]")
_BAD_SYMBOL = re.compile(r"[\s()]")


@dataclasses.dataclass(frozen=True)
class Tree:
    """A constituency tree node.

    Attributes:
        label: Phrasal label (`NP`) or, for a preterminal, the POS tag (`NN`). "" for the
            label-less outer bracket of PTB files.
        children: Either exactly one word (a `str`: the node is a preterminal) or one or more
            `Tree` nodes.
    """

    label: str
    children: tuple

    def __post_init__(self):
        children = self.children
        if len(children) != 1:
            if not children:
                raise ValueError(f"constituent {self.label!r} has no children")
            if any(child.__class__ is str for child in children):
                raise ValueError(
                    f"constituent {self.label!r} mixes words and constituents: {children!r}; "
                    "a word must be the only child of its POS tag, as in (NN dog)"
                )

    @property
    def is_preterminal(self) -> bool:
        """True for `(TAG word)`."""
        return isinstance(self.children[0], str)

    def __str__(self) -> str:
        return to_string(self)


def preterminal(tag: str, word: str) -> Tree:
    """Returns the preterminal `(tag word)`."""
    return Tree(tag, (word,))


class _Locator:
    """Finds the line of the i-th token of a text, for error messages only (rescans the text)."""

    def __init__(self, text: str, source: str):
        self.text, self.source = text, source

    def __call__(self, token_index: int, tree_number: int) -> str:
        match = next(m for i, m in enumerate(_TOKEN.finditer(self.text)) if i == token_index)
        line = self.text.count("\n", 0, match.start()) + 1
        return f"{self.source}, tree {tree_number}, line {line}"


def parse_trees(text: str, source: str = "<text>") -> list:
    """Parses every bracketed tree in `text`.

    Args:
        text: Penn Treebank bracketed trees, any number per line or across lines.
        source: Name used in error messages (a file name).

    Returns:
        The trees in order of appearance, as `Tree`s (the outer `( ... )` kept, label "").

    Raises:
        ValueError: On unbalanced brackets, a word outside any bracket, an empty constituent or
            a constituent mixing words and brackets; the message names the source, the tree
            number and the line.
    """
    where = _Locator(text, source)
    tokens = _TOKEN.findall(text)
    trees = []
    stack = []  # [label, children, index of its "(" token]
    for index, token in enumerate(tokens):
        if token[0] == "(":
            stack.append([token[1:].lstrip(), [], index])
        elif token == ")":
            if not stack:
                after = "after this tree " if trees else ""
                raise ValueError(
                    f"{where(index, max(len(trees), 1))}: ')' {after}closes nothing; "
                    "the brackets are unbalanced"
                )
            label, children, start = stack.pop()
            try:
                node = Tree(label, tuple(children))
            except ValueError as error:
                raise ValueError(f"{where(start, len(trees) + 1)}: {error}") from None
            (stack[-1][1] if stack else trees).append(node)
        elif stack:
            stack[-1][1].append(token)
        else:
            raise ValueError(f"{where(index, len(trees) + 1)}: word {token!r} outside any bracket")
    if stack:
        raise ValueError(
            f"{where(stack[0][2], len(trees) + 1)}: this tree's {len(stack)} open bracket(s) "
            "are never closed; the text ends inside the tree"
        )
    return trees


def parse_tree(text: str, source: str = "<text>") -> Tree:
    """Parses text holding exactly one tree; see `parse_trees`."""
    trees = parse_trees(text, source)
    if len(trees) != 1:
        raise ValueError(f"{source}: expected exactly one tree, found {len(trees)}")
    return trees[0]


def read_trees(path: str | os.PathLike) -> list:
    """Reads all trees of a file (`.mrg`, or one tree per line); errors name the file."""
    with open(path, encoding="utf-8") as handle:
        return parse_trees(handle.read(), source=os.fspath(path))


def strip_function_tags(label: str) -> str:
    """`NP-SBJ-1` -> `NP`, `NP=2` -> `NP`, `ADVP|PRT` -> `ADVP`; `-NONE-`, `-LRB-` unchanged."""
    if len(label) > 1 and label.startswith("-") and label.endswith("-"):
        return label
    label = label.split("|", 1)[0]
    match = _FUNCTION_TAG.search(label, 1)
    return label[: match.start()] if match else label


def _strip(tree: Tree) -> Tree | None:
    """Removes empty elements and their emptied ancestors; strips function tags."""
    if tree.is_preterminal:
        return None if tree.label == EMPTY_ELEMENT else tree
    children = tuple(c for c in (_strip(child) for child in tree.children) if c is not None)
    return Tree(strip_function_tags(tree.label), children) if children else None


def preprocess(tree: Tree) -> Tree:
    """Applies the standard preprocessing listed in the module docstring.

    Raises:
        ValueError: If nothing but empty elements remains.
    """
    while (
        tree.label in _ROOT_LABELS
        and len(tree.children) == 1
        and not tree.is_preterminal
        and not tree.children[0].is_preterminal
    ):
        tree = tree.children[0]
    stripped = _strip(tree)
    if stripped is None:
        raise ValueError(f"tree has only empty elements: {to_string(tree)}")
    return stripped


def _preterminals(tree: Tree) -> list:
    """The preterminals of `tree`, left to right (iterative: garbage trees can be deep)."""
    found, pending = [], [tree]
    while pending:
        node = pending.pop()
        if node.is_preterminal:
            found.append(node)
        else:
            pending.extend(reversed(node.children))
    return found


def words(tree: Tree) -> list:
    """The words (leaves) of `tree`, left to right."""
    return [node.children[0] for node in _preterminals(tree)]


def tags(tree: Tree) -> list:
    """The POS tags of `tree`, one per word."""
    return [node.label for node in _preterminals(tree)]


def tagged_words(tree: Tree) -> list:
    """`[(word, tag), ...]` left to right."""
    return [(node.children[0], node.label) for node in _preterminals(tree)]


def _events(tree: Tree, order: str = "top_down"):
    """Yields ("open", node), ("leaf", node) and ("close", node): in document order, or with
    each node's "open" after its first child's events (`order="in_order"`)."""
    pending = [("visit", tree)]
    while pending:
        kind, node = pending.pop()
        if kind in ("open", "close"):
            yield kind, node
        elif node.is_preterminal:
            yield "leaf", node
        elif order == "in_order":
            pending.append(("close", node))
            pending.extend(("visit", child) for child in reversed(node.children[1:]))
            pending.extend([("open", node), ("visit", node.children[0])])
        else:
            yield "open", node
            pending.append(("close", node))
            pending.extend(("visit", child) for child in reversed(node.children))


def to_string(tree: Tree) -> str:
    """The tree on one line in PTB bracket format: `(S (NP (NNP John)) (VP (VBZ sleeps)))`."""
    parts = []
    for kind, node in _events(tree):
        if kind == "open":
            parts.append(f"({node.label} " if node.label else "( ")
        elif kind == "leaf":
            parts.append(f"({node.label} {node.children[0]}) ")
        else:
            parts[-1] = parts[-1].rstrip()
            parts.append(") ")
    return "".join(parts).rstrip()


LEAVES = ("placeholder", "tag", "word")


ORDERS = ("top_down", "in_order")


def linearize(
    tree: Tree, keep_pos: bool = False, leaves: str | None = None, order: str = "top_down"
) -> list:
    """Target tokens of `tree` (see the module docstring); the inputs are `words(tree)`.

    Args:
        tree: A preprocessed tree.
        keep_pos: Emit each word's POS tag instead of the placeholder `XX` (`leaves="tag"`).
        leaves: What stands for each word: "placeholder" (`XX`), "tag" (its POS tag) or
            "word" (the word itself: the lexicalized form, whose leaves copy the input).
            Overrides `keep_pos` when given.
        order: "top_down" (each `(LABEL` before its constituent) or "in_order" (after the
            constituent's first child; see the module docstring).

    Returns:
        Tokens `(LABEL`, `)LABEL` and one leaf token per word.
    """
    leaves = leaves or ("tag" if keep_pos else "placeholder")
    if leaves not in LEAVES:
        raise ValueError(f"leaves must be one of {LEAVES}, got {leaves!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    tokens = []
    for kind, node in _events(tree, order):
        if kind == "open":
            tokens.append(f"({node.label}")
        elif kind == "close":
            tokens.append(f"){node.label}")
        elif leaves == "word":
            tokens.append(node.children[0])
        else:
            tokens.append(node.label if leaves == "tag" else POS_PLACEHOLDER)
    return tokens


def bracket_symbols(tokens) -> set:
    """The bracket tokens `(LABEL` and `)LABEL` among `tokens`."""
    return {token for token in tokens if token[:1] in ("(", ")")}


def _symbol(text: str, fallback: str) -> str:
    """`text` if it is usable as a label in bracket format, else `fallback`."""
    return text if text and not _BAD_SYMBOL.search(text) else fallback


def delinearize(
    tokens: Sequence[str],
    words: Sequence[str],
    tags: Sequence[str] | None = None,
    root_label: str = "S",
    order: str = "top_down",
) -> Tree:
    """Builds a valid tree over `words` from (possibly malformed) linearized tokens.

    Tokens starting with `(` open a constituent, tokens starting with `)` close one, any other
    token is a preterminal taking the next word. In the in-order form (`order="in_order"`) an
    opening token makes the last finished constituent or preterminal before it, at its level,
    the new constituent's first child (none if there is none). Repairs, so that every sequence
    gives a tree whose leaves are exactly `words` in order:
    - a closing token pops the innermost open constituent whatever its label (the opening
      label wins on a mismatch); one with nothing open is ignored;
    - constituents still open at the end are closed;
    - preterminals beyond the last word are dropped; words left over are attached, as
      preterminals, at the end of the root;
    - constituents without words are removed;
    - several top-level pieces (or a bare word) are put under one `root_label` node;
    - a label that cannot be written in bracket format (empty, or with brackets or spaces)
      becomes `X`, such a tag becomes `XX`.

    Args:
        tokens: Linearized target tokens, e.g. decoded output without EOS/padding.
        words: The sentence, non-empty.
        tags: One POS tag per word to use instead of the tag tokens (e.g. gold tags, so that
            EVALB can delete punctuation as COLLINS.prm asks); None keeps the tokens' tags.
        root_label: Label of the node added over several top-level pieces.
        order: The linearization's order, as `linearize`'s.

    Returns:
        The tree.

    Raises:
        ValueError: If `words` is empty, `tags` has a different length or `order` is unknown.
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if not words:
        raise ValueError("delinearize needs at least one word: a tree has at least one leaf")
    if tags is not None and len(tags) != len(words):
        raise ValueError(f"got {len(tags)} tags for {len(words)} words; pass one tag per word")
    top = []
    stack = []  # [label, children]
    next_word = 0
    for token in tokens:
        if token.startswith("("):
            level = stack[-1][1] if stack else top
            first = [level.pop()] if order == "in_order" and level else []
            stack.append([_symbol(token[1:], UNKNOWN_LABEL), first])
        elif token.startswith(")"):
            if stack:
                label, children = stack.pop()
                if children:
                    (stack[-1][1] if stack else top).append(Tree(label, tuple(children)))
        elif next_word < len(words):
            tag = tags[next_word] if tags is not None else _symbol(token, POS_PLACEHOLDER)
            (stack[-1][1] if stack else top).append(preterminal(tag, words[next_word]))
            next_word += 1
    while stack:
        label, children = stack.pop()
        if children:
            (stack[-1][1] if stack else top).append(Tree(label, tuple(children)))
    leftover = [
        preterminal(tags[i] if tags is not None else POS_PLACEHOLDER, words[i])
        for i in range(next_word, len(words))
    ]
    if len(top) == 1 and not top[0].is_preterminal:
        return Tree(top[0].label, top[0].children + tuple(leftover))
    return Tree(root_label, tuple(top + leftover))


def right_branching(
    words: Sequence[str], tags: Sequence[str] | None = None, label: str = "S"
) -> Tree:
    """The trivial right-branching parse `(S w1 (S w2 (S ... (S wn-1 wn))))`.

    Args:
        words: The sentence, non-empty.
        tags: POS tags for the preterminals (gold tags for a fair EVALB baseline); None uses
            `XX`.
        label: Label of every constituent.

    Returns:
        The tree; a one-word sentence gives `(S (XX w))`.
    """
    if not words:
        raise ValueError("right_branching needs at least one word")
    if tags is not None and len(tags) != len(words):
        raise ValueError(f"got {len(tags)} tags for {len(words)} words; pass one tag per word")
    leaves = [
        preterminal(tags[i] if tags is not None else POS_PLACEHOLDER, w)
        for i, w in enumerate(words)
    ]
    tree = Tree(label, tuple(leaves[-2:]))
    for leaf in reversed(leaves[:-2]):
        tree = Tree(label, (leaf, tree))
    return tree

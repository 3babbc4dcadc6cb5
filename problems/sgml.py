"""WMT's SGML test sets as text: the `<seg>` segments of a source and a reference file.

WMT shipped its test sets up to 2020 as one SGML file per language, one tag per line:

    <srcset setid="newstest2014" srclang="any">
    <doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">
    <p>
    <seg id="1">India and Japan prime ministers meet in Tokyo</seg>
    ...
    </doc>

The reference file (`<refset ... trglang="de">`) has the same documents and segment ids in
the same order. A segment's text is what lies between its tags, with the XML entities
(`&amp;` `&lt;` `&gt;` `&quot;` `&apos;` and numeric `&#...;`) turned back into
characters and its whitespace collapsed as sacreBLEU's `--echo` writes it (a bare `&`, as
WMT's files after 2009 write it, stays as it is). Pairs are matched by position and
checked by document and segment id.
"""

from __future__ import annotations

import dataclasses
import itertools
import re

from t2t_lite.problems.corpus import DataError

_DOC = re.compile(r"<doc\b[^>]*?\bdocid=\"([^\"]*)\"", re.I)
_SEG = re.compile(r"<seg\b[^>]*?\bid=\"?([^\">\s]+)\"?[^>]*>(.*)</seg>", re.I)
_ENTITY = re.compile(r"&(amp|lt|gt|quot|apos|#[0-9]+|#[xX][0-9a-fA-F]+);")
_NAMED = {"amp": "&", "lt": "<", "gt": ">", "quot": '"', "apos": "'"}


@dataclasses.dataclass(frozen=True)
class Segment:
    """One `<seg>`: where it is, which document and id, and its text."""

    line: int  # from 1
    docid: str
    segid: str
    text: str


def unescape(text: str) -> str:
    """`text` with the XML entities and numeric character references replaced."""

    def replace(match):
        name = match.group(1)
        if not name.startswith("#"):
            return _NAMED[name]
        code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
        try:
            return chr(code)
        except (ValueError, OverflowError):
            return match.group(0)  # Not a character: keep the text as written.

    return _ENTITY.sub(replace, text)


def segments(lines, where: str):
    """Yields the `Segment`s of an SGML file given as (line number, text) pairs.

    Args:
        lines: iterable of (line number from 1, line text without its terminator).
        where: the file's name for messages.

    Raises:
        DataError: naming `where` and the line for a `<seg>` outside a `<doc>` or a
            `<seg` line without its closing tag on the same line.
    """
    docid = None
    for number, line in lines:
        stripped = line.strip()
        lowered = stripped[:5].lower()
        if lowered.startswith("<doc"):
            match = _DOC.match(stripped)
            docid = match.group(1) if match else ""
        elif lowered == "</doc":
            docid = None
        elif lowered.startswith("<seg"):
            match = _SEG.match(stripped)
            if match is None:
                raise DataError(
                    f"{where}:{number}: <seg> without its closing </seg> on the same line "
                    f"({stripped[:60]!r}); WMT's SGML has one segment per line: re-download "
                    "the archive"
                )
            if docid is None:
                raise DataError(
                    f"{where}:{number}: <seg> outside any <doc>; re-download the archive"
                )
            text = " ".join(unescape(match.group(2)).split())
            yield Segment(number, docid, match.group(1), text)


def parallel_segments(source_lines, target_lines, source_where: str, target_where: str):
    """Yields (source Segment, target Segment) of a source and a reference file.

    Raises:
        DataError: naming both files and lines when the documents or segment ids differ
            or one file has more segments than the other.
    """
    pairs = itertools.zip_longest(
        segments(source_lines, source_where), segments(target_lines, target_where)
    )
    for source, target in pairs:
        if source is None or target is None:
            longer, extra, shorter = (
                (target_where, target, source_where)
                if source is None
                else (source_where, source, target_where)
            )
            raise DataError(
                f"{longer}:{extra.line}: segment {extra.docid}/{extra.segid} has no partner: "
                f"{shorter} has fewer segments; the source and reference must hold the same "
                "documents and segments"
            )
        if (source.docid, source.segid) != (target.docid, target.segid):
            raise DataError(
                f"{source_where}:{source.line} is segment {source.docid}/{source.segid} but "
                f"{target_where}:{target.line} is {target.docid}/{target.segid}; the source "
                "and reference must hold the same documents and segments in the same order"
            )
        yield source, target


def count_segments(lines) -> int:
    """`<seg` lines of an SGML file given as (line number, text) pairs (a quick count)."""
    return sum(1 for _, line in lines if line.lstrip()[:4].lower() == "<seg")

"""Corpus BLEU two ways: sacreBLEU, and the paper's tokenized BLEU.

The paper ("Attention Is All You Need", Table 2) reports BLEU on tokenized text, computed as
tensor2tensor's `get_ende_bleu.sh` did it:

1. Moses tokenization of hypotheses and references (`tokenizer.perl -l de`; here sacremoses, the
   maintained Python port, with the same defaults: XML escaping on, no aggressive dash splitting).
2. For German, compound splitting: every intra-word hyphen `a-b` becomes `a ##AT##-##AT## b`
   (`perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`), as in GNMT and ConvS2S.
3. `multi-bleu.perl`: corpus BLEU over whitespace tokens, case-sensitive, 1..4-grams, clipped counts,
   no smoothing, brevity penalty BP = exp(1 - r / c) when c < r.

Step 3 is scored with sacrebleu's BLEU(tokenize="none", smooth_method="none", force=True), which is
multi-bleu's formula exactly: the same sufficient statistics (clipped n-gram matches and totals per
order, hypothesis length c, closest reference length r), precision p_n = matches_n / totals_n,
BLEU = BP * exp(sum_n log(p_n) / 4), and BLEU = 0 as soon as one p_n is 0 (multi-bleu's
`my_log(0) = -9999999999`; sacrebleu's identical floor). The tests check this against a
hand-derived corpus and an independent n-gram count.

Tokenized BLEU depends on the tokenizer and is not comparable across papers; sacreBLEU (13a
tokenization of detokenized text, exponential smoothing) is the shareable number, reported with its
signature. Results carry a `label` so that the two are never confused.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import sacrebleu
from sacrebleu.metrics import BLEU
from sacrebleu.metrics.bleu import BLEUScore

SACREBLEU_LABEL = "sacreBLEU"
TOKENIZED_LABEL = "tokenized BLEU (moses tok, compound split, multi-bleu)"
TOKENIZED_LABEL_NO_SPLIT = "tokenized BLEU (moses tok, multi-bleu)"

# `(\S)-(\S)` with ASCII whitespace classes: perl without `-C` reads bytes, so its `\s` is
# [ \t\n\r\f\v] and every byte of a multi-byte UTF-8 character counts as `\S`, exactly what
# re.ASCII gives on str. Matches do not overlap: "a-b-c" -> "a ##AT##-##AT## b-c", as in perl.
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)", flags=re.ASCII)
_COMPOUND_REPLACEMENT = r"\1 ##AT##-##AT## \2"


@dataclasses.dataclass(frozen=True)
class BleuResult:
    """One corpus BLEU score and its sufficient statistics.

    Attributes:
        label: What kind of BLEU this is: `SACREBLEU_LABEL` or a tokenized-BLEU label.
        score: Corpus BLEU in [0, 100].
        signature: How it was computed (sacreBLEU's signature, or the tokenized pipeline's).
        precisions: Modified n-gram precisions for n = 1..4, in percent.
        matches: Clipped n-gram matches for n = 1..4.
        totals: Hypothesis n-gram counts for n = 1..4.
        brevity_penalty: exp(1 - r / c) if c < r, else 1.
        hyp_len: Total hypothesis length c in tokens.
        ref_len: Total (closest) reference length r in tokens.
    """

    label: str
    score: float
    signature: str
    precisions: tuple[float, ...]
    matches: tuple[int, ...]
    totals: tuple[int, ...]
    brevity_penalty: float
    hyp_len: int
    ref_len: int

    def to_dict(self) -> dict:
        """Returns the result as a JSON-ready dict."""
        return dataclasses.asdict(self)


def _check_corpus(hypotheses: Sequence[str], references: Sequence[str]) -> None:
    """Refuses corpora that cannot be scored line by line."""
    if len(hypotheses) != len(references):
        raise ValueError(
            f"BLEU needs one hypothesis per reference line, but got {len(hypotheses)} "
            f"hypotheses and {len(references)} references; check that the decoder wrote one "
            "line per input sentence (no dropped or split lines)."
        )
    if not hypotheses:
        raise ValueError("BLEU of an empty corpus is undefined: got 0 hypotheses and 0 references.")
    for name, lines in (("hypothesis", hypotheses), ("reference", references)):
        for index, line in enumerate(lines):
            if not isinstance(line, str):
                raise TypeError(f"{name} {index} is {type(line).__name__}, expected str.")
            if "\n" in line:
                raise ValueError(
                    f"{name} {index} contains a newline; pass one sentence per list item "
                    "(strip the trailing newline when reading a file)."
                )


def _result(label: str, signature: str, score: BLEUScore) -> BleuResult:
    return BleuResult(
        label=label,
        score=float(score.score),
        signature=signature,
        precisions=tuple(float(p) for p in score.precisions),
        matches=tuple(int(m) for m in score.counts),
        totals=tuple(int(t) for t in score.totals),
        brevity_penalty=float(score.bp),
        hyp_len=int(score.sys_len),
        ref_len=int(score.ref_len),
    )


def sacrebleu_corpus(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
    """sacreBLEU's default corpus BLEU (13a tokenization, exp smoothing) on detokenized text.

    Args:
        hypotheses: Detokenized system outputs, one sentence per item.
        references: Detokenized references, aligned with `hypotheses`.

    Returns:
        A `BleuResult` labelled "sacreBLEU" whose signature is sacreBLEU's own, e.g.
        `nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0`.

    Raises:
        ValueError: If the line counts differ, the corpus is empty, or a line holds a newline.
    """
    _check_corpus(hypotheses, references)
    metric = BLEU()
    score = metric.corpus_score(list(hypotheses), [list(references)])
    return _result(SACREBLEU_LABEL, str(metric.get_signature()), score)


@functools.lru_cache(maxsize=8)
def _moses_tokenizer(lang: str):
    """sacremoses' MosesTokenizer for `lang` (imported here: it takes half a second, and
    most commands that import this module never tokenize)."""
    import sacremoses

    return sacremoses.MosesTokenizer(lang=lang)


def moses_tokenize(line: str, lang: str) -> str:
    """Tokenizes one sentence like `tokenizer.perl -l lang` with its default options.

    Args:
        line: A detokenized sentence.
        lang: Language code for the non-breaking prefixes and language rules, e.g. "de".

    Returns:
        Space-separated tokens, with `&`, `|`, `<`, `>`, `'`, `"`, `[`, `]` XML-escaped as
        tokenizer.perl does by default.
    """
    return _moses_tokenizer(lang).tokenize(line, return_str=True, escape=True)


def split_compounds(line: str) -> str:
    """Rewrites every intra-word hyphen `a-b` as `a ##AT##-##AT## b` (tensor2tensor's rule).

    Args:
        line: A tokenized sentence.

    Returns:
        The sentence with hyphenated compounds split; hyphens next to a space are left alone.
    """
    return _COMPOUND_HYPHEN.sub(_COMPOUND_REPLACEMENT, line)


def prepare_tokenized(line: str, lang: str, compound_split: bool) -> str:
    """Moses-tokenizes `line` and, if asked, splits hyphenated compounds."""
    tokens = moses_tokenize(line, lang)
    return split_compounds(tokens) if compound_split else tokens


def multi_bleu(hypotheses: Sequence[str], references: Sequence[str]) -> BleuResult:
    """multi-bleu.perl's corpus BLEU on already tokenized text (tokens split on whitespace).

    Args:
        hypotheses: Tokenized system outputs, one sentence per item.
        references: Tokenized references, aligned with `hypotheses`. Moses output holds only
            ASCII spaces between tokens, so Python's split and perl's byte-wise split agree.

    Returns:
        A `BleuResult` labelled as tokenized BLEU (multi-bleu prints it rounded to 2 decimals).
    """
    _check_corpus(hypotheses, references)
    metric = BLEU(tokenize="none", smooth_method="none", force=True)
    score = metric.corpus_score(list(hypotheses), [list(references)])
    signature = "multi-bleu|nrefs:1|case:mixed|tok:pre-tokenized|smooth:none|ngram:4"
    return _result("tokenized BLEU (multi-bleu)", signature, score)


def tokenized_bleu(
    hypotheses: Sequence[str],
    references: Sequence[str],
    lang: str,
    compound_split: bool | None = None,
) -> BleuResult:
    """The paper's tokenized BLEU, as tensor2tensor's get_ende_bleu.sh computed it.

    Args:
        hypotheses: Detokenized system outputs, one sentence per item.
        references: Detokenized references, aligned with `hypotheses`.
        lang: Target language code for the Moses tokenizer, e.g. "de".
        compound_split: Whether to split hyphenated compounds; None means only for German.

    Returns:
        A `BleuResult` whose label says "tokenized BLEU" and whose signature names the
        tokenizer, the compound rule and the multi-bleu formula.

    Raises:
        ValueError: If the line counts differ, the corpus is empty, or a line holds a newline.
    """
    _check_corpus(hypotheses, references)
    if compound_split is None:
        compound_split = lang == "de"
    hyp_tokens = [prepare_tokenized(line, lang, compound_split) for line in hypotheses]
    ref_tokens = [prepare_tokenized(line, lang, compound_split) for line in references]
    scored = multi_bleu(hyp_tokens, ref_tokens)
    label = TOKENIZED_LABEL if compound_split else TOKENIZED_LABEL_NO_SPLIT
    import sacremoses

    signature = (
        f"tokenized|tok:moses-{lang}|escape:yes|compound_split:{'yes' if compound_split else 'no'}"
        f"|nrefs:1|case:mixed|smooth:none|ngram:4|sacremoses:{sacremoses.__version__}"
        f"|sacrebleu:{sacrebleu.__version__}"
    )
    return dataclasses.replace(scored, label=label, signature=signature)


def bleu_report(hypotheses: Sequence[str], references: Sequence[str], lang: str) -> dict:
    """Both BLEU scores of one corpus, each labelled with what it is.

    Args:
        hypotheses: Detokenized system outputs, one sentence per item.
        references: Detokenized references, aligned with `hypotheses`.
        lang: Target language code, e.g. "de".

    Returns:
        {"num_sentences", "lang", "sacrebleu": {...}, "tokenized_bleu": {...}} where each score
        dict is `BleuResult.to_dict()` (label, score, signature, precisions, ...).
    """
    return {
        "num_sentences": len(hypotheses),
        "lang": lang,
        "sacrebleu": sacrebleu_corpus(hypotheses, references).to_dict(),
        "tokenized_bleu": tokenized_bleu(hypotheses, references, lang).to_dict(),
    }


def write_scores_json(path: str | os.PathLike, report: dict) -> None:
    """Writes a scores report (`bleu_report`, a problem's `score`) as UTF-8 JSON, creating folders.

    Args:
        path: Destination file, e.g. OUTPUT_DIR/decode/bleu.json.
        report: The dict returned by `bleu_report`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")

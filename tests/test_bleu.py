"""Tests for t2t_lite.metrics.bleu: hand-derived BLEU, the tokenization rules, real newstest2013."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from t2t_lite.metrics import (
    SACREBLEU_LABEL,
    TOKENIZED_LABEL,
    bleu_report,
    moses_tokenize,
    sacrebleu_corpus,
    split_compounds,
    tokenized_bleu,
    write_scores_json,
)

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
NEWSTEST2013 = DATA / "wmt13_newstest2013"

# A tiny German corpus. The last pair is shorter than its reference (brevity penalty) and differs
# in case ("Gut" vs "gut": BLEU is case-sensitive).
HYPS = ["Die E-Mail kam gestern an.", 'Er sagte: "Ja".', "Gut gemacht!"]
REFS = ["Die E-Mail kam heute an.", 'Er sagte: "Nein".', "Das ist gut gemacht!"]


def _bleu(matches, totals, hyp_len, ref_len):
    """BLEU = BP * (prod_n p_n)^(1/4) * 100 with BP = exp(1 - r / c) if c < r (Papineni et al.)."""
    bp = math.exp(1 - ref_len / hyp_len) if hyp_len < ref_len else 1.0
    log_mean = sum(math.log(m / t) for m, t in zip(matches, totals)) / 4
    return 100 * bp * math.exp(log_mean)


def test_tokenized_bleu_of_tiny_corpus_matches_hand_count():
    # Moses + compound split, by hand:
    #   Die E ##AT##-##AT## Mail kam gestern an .   vs   ... heute an .        (8 vs 8 tokens)
    #     1-grams 7/8, 2-grams 5/7, 3-grams 3/6, 4-grams 2/5
    #   Er sagte : &quot; Ja &quot; .   vs   Er sagte : &quot; Nein &quot; .     (7 vs 7)
    #     1-grams 6/7, 2-grams 4/6, 3-grams 2/5, 4-grams 1/4
    #   Gut gemacht !   vs   Das ist gut gemacht !                              (3 vs 5)
    #     1-grams 2/3, 2-grams 1/2, 3-grams 0/1, 4-grams 0/0
    matches, totals = (15, 10, 5, 3), (18, 15, 12, 9)
    result = tokenized_bleu(HYPS, REFS, "de")
    assert result.label == TOKENIZED_LABEL
    assert result.matches == matches and result.totals == totals
    assert (result.hyp_len, result.ref_len) == (18, 20)
    assert result.brevity_penalty == pytest.approx(math.exp(1 - 20 / 18))
    assert result.precisions == pytest.approx([100 * m / t for m, t in zip(matches, totals)])
    assert result.score == pytest.approx(_bleu(matches, totals, 18, 20))
    assert "compound_split:yes" in result.signature and "tok:moses-de" in result.signature


def test_sacrebleu_of_tiny_corpus_matches_hand_count():
    # 13a tokenization keeps "E-Mail" whole and does not escape quotes:
    #   Die E-Mail kam gestern an .  vs  ... heute an .    1: 5/6, 2: 3/5, 3: 1/4, 4: 0/3
    #   Er sagte : " Ja " .          vs  ... Nein " .      1: 6/7, 2: 4/6, 3: 2/5, 4: 1/4
    #   Gut gemacht !                vs  Das ist gut gemacht !   1: 2/3, 2: 1/2, 3: 0/1, 4: 0/0
    matches, totals = (13, 8, 3, 1), (16, 13, 10, 7)
    result = sacrebleu_corpus(HYPS, REFS)
    assert result.label == SACREBLEU_LABEL
    assert result.matches == matches and result.totals == totals
    assert (result.hyp_len, result.ref_len) == (16, 18)
    assert result.score == pytest.approx(_bleu(matches, totals, 16, 18))
    assert result.signature.startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")


def test_zero_four_gram_matches_smoothed_by_sacrebleu_but_zero_for_multi_bleu():
    # 1-grams 3/4, 2-grams 2/3, 3-grams 1/2, 4-grams 0/1.
    hyps, refs = ["a b c d"], ["a b c e"]
    assert tokenized_bleu(hyps, refs, "en").score == 0.0
    # sacreBLEU's "exp" smoothing: the k-th zero precision becomes 1 / (2^k * total).
    expected = 100 * math.exp(
        (math.log(3 / 4) + math.log(2 / 3) + math.log(1 / 2) + math.log(1 / 2)) / 4
    )
    assert sacrebleu_corpus(hyps, refs).score == pytest.approx(expected)


def test_identical_corpus_scores_100():
    assert sacrebleu_corpus(HYPS, HYPS).score == pytest.approx(100.0)
    assert tokenized_bleu(REFS, REFS, "de").score == pytest.approx(100.0)


def test_moses_tokenization_of_punctuation_and_quotes():
    # tokenizer.perl -l de: ":" "?" "(" ")" and quotes split off, quotes and apostrophes escaped,
    # "3,50" kept (comma between digits), "z.B." kept (dot inside the word), intra-word hyphens
    # kept (no -a), the final period split off.
    line = (
        'Er sagte: "Das ist gut, oder?" Die E-Mail-Adresse kostet 3,50 Euro (z.B. für Max\'s Hund).'
    )
    assert moses_tokenize(line, "de") == (
        "Er sagte : &quot; Das ist gut , oder ? &quot; Die E-Mail-Adresse kostet 3,50 Euro "
        "( z.B. für Max &apos; s Hund ) ."
    )


@pytest.mark.parametrize(
    "line, expected",
    [
        ("Die E-Mail-Adresse", "Die E ##AT##-##AT## Mail ##AT##-##AT## Adresse"),
        ("Straßen-Bahn und U-Bahn", "Straßen ##AT##-##AT## Bahn und U ##AT##-##AT## Bahn"),
        ("Nord- und Südamerika", "Nord- und Südamerika"),
        ("Berlin - Hamburg", "Berlin - Hamburg"),
        ("2013-2014", "2013 ##AT##-##AT## 2014"),
        # Matches do not overlap: the "y" that ends the first match cannot start the second.
        ("x-y-z", "x ##AT##-##AT## y-z"),
    ],
)
def test_compound_split_rule(line, expected):
    assert split_compounds(line) == expected


def test_mismatched_line_counts_are_refused_with_both_counts():
    with pytest.raises(ValueError, match="got 2 hypotheses and 3 references"):
        sacrebleu_corpus(HYPS[:2], REFS)
    with pytest.raises(ValueError, match="got 3 hypotheses and 2 references"):
        tokenized_bleu(HYPS, REFS[:2], "de")


def test_report_labels_both_scores_and_round_trips_through_json(tmp_path):
    report = bleu_report(HYPS, REFS, "de")
    path = tmp_path / "decode" / "bleu.json"
    write_scores_json(path, report)
    loaded = json.loads(path.read_text(encoding="utf-8"))
    assert loaded["num_sentences"] == 3 and loaded["lang"] == "de"
    assert loaded["sacrebleu"]["label"] == SACREBLEU_LABEL
    assert loaded["tokenized_bleu"]["label"] == TOKENIZED_LABEL
    assert loaded["sacrebleu"]["score"] == pytest.approx(sacrebleu_corpus(HYPS, REFS).score)
    assert loaded["tokenized_bleu"]["score"] == pytest.approx(
        tokenized_bleu(HYPS, REFS, "de").score
    )


# Real data: newstest2013 German, and two "systems" derived from it deterministically.


def _read(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def _perturbed(lines: list[str]) -> list[str]:
    """Drops every word with (line + word index) % 6 == 0; swaps words 1 and 2 on every 3rd line."""
    out = []
    for i, line in enumerate(lines):
        words = [w for j, w in enumerate(line.split()) if (i + j) % 6 != 0]
        if i % 3 == 0 and len(words) > 3:
            words[1], words[2] = words[2], words[1]
        out.append(" ".join(words))
    return out


@pytest.fixture(scope="module")
def newstest_de():
    return _read(NEWSTEST2013 / "newstest2013.de")


def test_newstest2013_against_itself_is_100(newstest_de):
    assert sacrebleu_corpus(newstest_de, newstest_de).score == pytest.approx(100.0)
    assert tokenized_bleu(newstest_de, newstest_de, "de").score == pytest.approx(100.0)


# Golden values printed by Moses' scripts/generic/multi-bleu.perl on the same corpora, after
# sacremoses tokenization (-l de) and `perl -ple 's{(\S)-(\S)}{$1 ##AT##-##AT## $2}g'`:
#   perturbed: BLEU = 56.888672, 99.9851/79.3425/62.5478/46.8090 (BP=0.819465, hyp_len=53580, ref_len=64248)
#   rotated:   BLEU = 0.687214, 15.1569/1.1331/0.2111/0.0615 (BP=1.000000, hyp_len=64248, ref_len=64248)
@pytest.mark.parametrize(
    "system, score, precisions, lengths",
    [
        ("perturbed", 56.888672, (99.9851, 79.3425, 62.5478, 46.8090), (53580, 64248)),
        ("rotated", 0.687214, (15.1569, 1.1331, 0.2111, 0.0615), (64248, 64248)),
    ],
)
def test_tokenized_bleu_on_newstest2013_matches_multi_bleu_perl(
    newstest_de, system, score, precisions, lengths
):
    hyps = _perturbed(newstest_de) if system == "perturbed" else newstest_de[1:] + newstest_de[:1]
    result = tokenized_bleu(hyps, newstest_de, "de")
    assert result.score == pytest.approx(score, abs=5e-7)
    assert result.precisions == pytest.approx(precisions, abs=5e-5)
    assert (result.hyp_len, result.ref_len) == lengths


@pytest.mark.skipif(shutil.which("perl") is None, reason="perl is not installed")
def test_compound_split_equals_the_perl_one_liner_on_newstest2013(newstest_de, tmp_path):
    tokenized = [moses_tokenize(line, "de") for line in newstest_de]
    source = tmp_path / "ref.tok"
    source.write_text("\n".join(tokenized) + "\n", encoding="utf-8")
    perl = subprocess.run(
        ["perl", "-ple", r"s{(\S)-(\S)}{$1 ##AT##-##AT## $2}g", str(source)],
        capture_output=True,
        check=True,
    )
    expected = perl.stdout.decode("utf-8").splitlines()
    ours = [split_compounds(line) for line in tokenized]
    assert sum("##AT##" in line for line in ours) > 100  # the rule really fires on this corpus
    assert ours == expected


@pytest.mark.parametrize("system", ["perturbed", "rotated"])
def test_sacrebleu_on_newstest2013_matches_the_sacrebleu_command_line(
    newstest_de, system, tmp_path
):
    hyps = _perturbed(newstest_de) if system == "perturbed" else newstest_de[1:] + newstest_de[:1]
    hyp_path = tmp_path / "hyp.de"
    hyp_path.write_text("\n".join(hyps) + "\n", encoding="utf-8")
    raw_ref = NEWSTEST2013 / "newstest2013.de.raw"  # original bytes, with U+00A0 spaces
    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "sacrebleu",
            str(raw_ref),
            "-i",
            str(hyp_path),
            "-m",
            "bleu",
            "-w",
            "6",
        ],
        capture_output=True,
        check=True,
        text=True,
    )
    expected = json.loads(cli.stdout)
    result = sacrebleu_corpus(hyps, _read(raw_ref))
    assert round(result.score, 6) == pytest.approx(expected["score"], abs=1e-9)
    assert result.signature == expected["signature"]
    assert f"hyp_len = {result.hyp_len} ref_len = {result.ref_len}" in expected["verbose_score"]
    assert 0.3 < result.score < 70  # neither a copy of the reference nor empty

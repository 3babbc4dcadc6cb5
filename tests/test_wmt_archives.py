"""WMT14 read from WMT's archives as published: the same examples as the extracted files.

The archives are small ones built at test time in the real layouts (wmt_archive_support)
from real news sentences of ../shared/data; the extracted text is written from the same
sentences independently, as `tar x` and `sacrebleu --echo` would give it.
"""

import logging
import sys
import tarfile

import pytest
import warm_python
import wmt_archive_support as support

from t2t_lite import problems
from t2t_lite.problems import sgml, wmt_archives
from t2t_lite.problems.corpus import DataError

VOCAB = 500

HAND_SGML = """<refset setid="newstest2014" srclang="any" trglang="de">
<doc sysid="ref" docid="1012-bbc" genre="news" origlang="en">
<p>
<seg id="1">Der &quot;Spiegel&quot; &amp; die &lt;Zeit&gt;</seg>
<seg id="2">  Zwei\u00a0 Leerzeichen  &#228;&#xFC;  </seg>
</p>
</doc>
<doc sysid="ref" docid="7-dpa" genre="news" origlang="de">
<seg id="1">AT&T und R&D bleiben, &apos;so&apos;</seg>
</doc>
</refset>
"""


def _lines(text: str):
    return enumerate(text.splitlines(), 1)


def test_sgml_segments_hand_checked():
    found = [(s.line, s.docid, s.segid, s.text) for s in sgml.segments(_lines(HAND_SGML), "x")]
    assert found == [
        (4, "1012-bbc", "1", 'Der "Spiegel" & die <Zeit>'),
        (5, "1012-bbc", "2", "Zwei Leerzeichen äü"),
        (9, "7-dpa", "1", "AT&T und R&D bleiben, 'so'"),
    ]
    assert sgml.count_segments(_lines(HAND_SGML)) == 3


def test_sgml_pairs_checked_by_document_and_segment():
    other = HAND_SGML.replace('docid="7-dpa"', 'docid="8-dpa"')
    with pytest.raises(DataError, match=r"src.sgm:9 is segment 7-dpa/1 but ref.sgm:9 is 8-dpa/1"):
        list(sgml.parallel_segments(_lines(HAND_SGML), _lines(other), "src.sgm", "ref.sgm"))
    # A segment missing in the middle shows where the documents part ways.
    gap = HAND_SGML.replace('<seg id="2">  Zwei\u00a0 Leerzeichen  &#228;&#xFC;  </seg>\n', "")
    with pytest.raises(
        DataError, match=r"src.sgm:8 is segment 7-dpa/1 but ref.sgm:5 is 1012-bbc/2"
    ):
        list(sgml.parallel_segments(_lines(gap), _lines(HAND_SGML), "src.sgm", "ref.sgm"))
    shorter = HAND_SGML.replace('<seg id="1">AT&T und R&D bleiben, &apos;so&apos;</seg>\n', "")
    with pytest.raises(DataError, match=r"ref.sgm:9: segment 7-dpa/1 has no partner: src.sgm"):
        list(sgml.parallel_segments(_lines(shorter), _lines(HAND_SGML), "src.sgm", "ref.sgm"))
    broken = HAND_SGML.replace('</seg>\n<seg id="2">', '\n<seg id="2">', 1)
    with pytest.raises(DataError, match=r"x:4: <seg> without its closing </seg>"):
        list(sgml.segments(_lines(broken), "x"))


def _generate(problem_name, data_dir, raw_dir):
    problem = problems.get(problem_name)
    return problem.generate_data(str(data_dir), str(raw_dir), vocab_size=VOCAB, workers=1)


@pytest.mark.parametrize("other", ["de", "fr"])
def test_datagen_from_archives_gives_the_examples_of_the_extracted_files(
    other, tmp_path, shared_data, caplog
):
    extracted = support.build(tmp_path / "archives", shared_data, other)
    support.write_extracted(tmp_path / "text", extracted)
    # The SGML test set went through entities and odd whitespace.
    assert any("&" in line for line in extracted["newstest2014.en"])
    assert any('"' in line for line in extracted[f"newstest2014.{other}"])
    name = f"wmt14_en{other}"
    with caplog.at_level(logging.WARNING, logger="t2t_lite.datagen"):
        from_archives = _generate(name, tmp_path / "a", tmp_path / "archives")
    # These small archives are not the published files, and the warning says so.
    dev = wmt_archives.ARCHIVES["dev.tgz"].sha256
    said = [r.getMessage() for r in caplog.records]
    warned = [line for line in said if "is not the published file's" in line]
    assert len(warned) == len(wmt_archives.archives_of(("en", other))) - 1  # test-full: md5 only
    prefix = f"datagen: {tmp_path / 'archives' / 'dev.tgz'}: sha256 "
    assert any(line.startswith(prefix) and f"file's {dev}; reading" in line for line in warned)
    from_text = _generate(name, tmp_path / "t", tmp_path / "text")
    assert from_archives["status"] == from_text["status"] == "generated"
    assert from_archives["vocab"] == from_text["vocab"]
    assert from_archives["splits"] == from_text["splits"]  # counts and every shard's sha256
    train = sum(len(lines) for n, lines in extracted.items() if n.endswith((".en", ".en.gz")))
    train -= len(extracted["newstest2013.en"]) + len(extracted["newstest2014.en"])
    counts = {split: from_archives["splits"][split]["examples"] for split in ("train", "dev")}
    assert counts == {"train": train, "dev": support.DEV_LINES}
    assert from_archives["splits"]["test"]["examples"] == len(extracted["newstest2014.en"])
    assert from_archives["fingerprint"] != from_text["fingerprint"]  # other inputs, same data
    archives = [entry[0] for entry in from_archives["inputs"]["archives"]]
    assert len(archives) == (7 if other == "fr" else 5)
    # The reverse problem shares the data; a rerun from the archives does nothing.
    again = _generate(f"wmt14_{other}en", tmp_path / "a", tmp_path / "archives")
    assert again["status"] == "up to date"


@pytest.fixture
def ende_archives(tmp_path, shared_data):
    support.build(tmp_path / "raw", shared_data, "de")
    return tmp_path / "raw"


def test_missing_archives_are_named_with_what_to_do(ende_archives, tmp_path):
    (ende_archives / "dev.tgz").unlink()
    (ende_archives / "training-parallel-nc-v9.tgz").rename(
        ende_archives / "training-parallel-nc-v9.tgz.part"
    )
    with pytest.raises(DataError) as caught:
        _generate("wmt14_ende", tmp_path / "data", ende_archives)
    message = str(caught.value)
    assert "\n" not in message
    assert "training-parallel-nc-v9.tgz (80.4 MB from http://www.statmt.org/wmt14/" in message
    assert "partly downloaded" in message
    assert "dev.tgz (38.7 MB from http://data.statmt.org/wmt19/translation-task/dev.tgz)" in (
        message
    )
    assert "--download" in message and f"by hand into {ende_archives}" in message


def test_truncated_archive_is_named_as_damaged(ende_archives, tmp_path):
    path = ende_archives / "training-parallel-europarl-v7.tgz"
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(DataError, match=rf"^{path}: damaged archive \(.*\); remove it and rerun"):
        _generate("wmt14_ende", tmp_path / "data", ende_archives)
    assert not (tmp_path / "data" / "wmt14_ende" / "metadata.json").exists()


def test_archive_without_the_pairs_member_is_named(ende_archives, tmp_path, shared_data):
    english, german = support.news(shared_data, "newstest2010", "de", 10)
    path = ende_archives / "training-parallel-nc-v9.tgz"
    support.write_tar(path, {"training/news-commentary-v8.de-en.en": support._text(english)})
    with pytest.raises(DataError, match=r"has no member training/news-commentary-v9.de-en.en"):
        _generate("wmt14_ende", tmp_path / "data", ende_archives)
    # Members of different lengths are named with the line where one runs out.
    support.write_tar(
        path,
        {
            "training/news-commentary-v9.de-en.en": support._text(english),
            "training/news-commentary-v9.de-en.de": support._text(german[:7]),
        },
    )
    with pytest.raises(DataError, match=r"nc-v9.tgz:training/news-commentary-v9.de-en.en:8: line"):
        _generate("wmt14_ende", tmp_path / "data", ende_archives)


def test_archive_members_are_read_as_streams_without_extracting(ende_archives):
    before = sorted(p.name for p in ende_archives.iterdir())
    path = ende_archives / "training-parallel-commoncrawl.tgz"
    lines = list(wmt_archives.member_lines(str(path), "commoncrawl.de-en.de"))
    with tarfile.open(path) as archive:
        member = archive.extractfile("commoncrawl.de-en.de").read().decode("utf-8")
    assert [text for _, text in lines] == member.splitlines()
    assert sorted(p.name for p in ende_archives.iterdir()) == before


def test_datagen_command_names_a_missing_archive_in_one_line(ende_archives, tmp_path):
    (ende_archives / "test-full.tgz").unlink()
    result = warm_python.run(
        [
            sys.executable, "-m", "t2t_lite.datagen", "--problem=wmt14_ende",
            f"--data_dir={tmp_path / 'data'}", f"--raw_dir={ende_archives}",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith(f"t2t_lite.datagen: {ende_archives}: WMT14 archive not found: ")
    assert "test-full.tgz (https://statmt.org/wmt14/test-full.tgz)" in last
    assert "Traceback" not in result.stderr
    assert not (tmp_path / "data" / "wmt14_ende" / "metadata.json").exists()

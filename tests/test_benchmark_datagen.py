"""`tools/benchmark_datagen.py` on a tiny corpus: the corpus it builds and the table it prints."""

import json
import os
import re
import sys
from pathlib import Path

import warm_python

SCRIPT = Path(__file__).resolve().parents[1] / "tools" / "benchmark_datagen.py"
STAGES = ["reading", "vocabulary sample", "SentencePiece training", "encoding", "shuffling"]
ROW = re.compile(r"^(.+?) +([\d.]+) +([\d.]+) +(\d+) +(\d+)$")


def test_benchmark_builds_the_corpus_and_times_every_stage(tmp_path, shared_data):
    command = [
        sys.executable,
        str(SCRIPT),
        f"--folder={tmp_path}",
        "--pairs=3000",
        "--vocab_size=1000",
        f"--shared_data={shared_data}",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = warm_python.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert result.returncode == 0, result.stderr
    raw = tmp_path / "raw"
    en = (raw / "synthetic.en-de.en").read_bytes().split(b"\n")
    de = (raw / "synthetic.en-de.de").read_bytes().split(b"\n")
    assert len(en) == len(de) == 3001 and en[-1] == de[-1] == b""
    words = sum(len(line.split()) for line in en) / 3000
    assert 15 < words < 30, "sentences about as long as WMT14's"
    # The echoed progress counts the pairs the corpus has.
    assert re.search(
        r"datagen: reading: done in [\d.]+ s: train 3,000 pairs, dev 3,000 pairs, test 3,003 pairs",
        result.stderr,
    )
    rows = {}
    (stages,) = [p for p in result.stdout.split("\n\n") if p.startswith("datagen on 3,000")]
    for line in stages.splitlines()[2:]:
        if line.startswith("  of which writing"):
            continue
        match = ROW.match(line)
        assert match, line
        rows[match.group(1).strip()] = [float(x) for x in match.groups()[1:]]
    assert list(rows) == STAGES + ["total (process)"]
    total_wall, total_cpu, total_rss, total_pss = rows["total (process)"]
    assert sum(rows[stage][0] for stage in STAGES) <= total_wall
    for stage in ("SentencePiece training", "encoding"):
        wall, cpu, rss, pss = rows[stage]
        assert wall > 0 and cpu > 0 and 100 < pss <= rss <= total_rss, (stage, rows[stage])
    assert "  of which writing" in result.stdout
    # A second run reuses the corpus (same --pairs) and builds the data again.
    again = warm_python.run(
        command + ["--quiet"], capture_output=True, text=True, timeout=300, env=env
    )
    assert again.returncode == 0, again.stderr
    assert (raw / "synthetic.en-de.en").read_bytes().split(b"\n") == en
    assert "wmt14_ende: generated" in again.stdout


SIZE_ROW = re.compile(r"^ +([\d,]+) +([\d.]+) +([\d.]+) +([\d.]+) +([\d,]+) +([\d,]+)$")


def _sizes_table(stdout: str, problem: str) -> list:
    """[(pairs, wall, CPU, CPU per M pairs, PSS MB, shard bytes)] of the last table."""
    _, table = stdout.rsplit(f"{problem} datagen by corpus size", 1)
    rows = []
    for line in table.strip().splitlines()[2:]:
        match = SIZE_ROW.match(line)
        assert match, line
        rows.append([float(x.replace(",", "")) for x in match.groups()])
    return rows


def test_several_sizes_of_the_french_corpus_in_one_table(tmp_path, shared_data):
    command = [
        sys.executable,
        str(SCRIPT),
        f"--folder={tmp_path}",
        "--pairs=2000,3000",
        "--problem=wmt14_enfr",
        "--vocab_size=1000",
        f"--shared_data={shared_data}",
        "--quiet",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    result = warm_python.run(command, capture_output=True, text=True, timeout=600, env=env)
    assert result.returncode == 0, result.stderr
    # English and French halves of the same news lines, 3,000 pairs (the last size).
    raw = tmp_path / "raw"
    en = (raw / "synthetic.en-fr.en").read_text(encoding="utf-8").split("\n")
    fr = (raw / "synthetic.en-fr.fr").read_text(encoding="utf-8").split("\n")
    assert len(en) == len(fr) == 3001
    news = set(
        (Path(shared_data) / "wmt_news_2008_2012" / "newstest2011.en-fr.fr")
        .read_text(encoding="utf-8")
        .split()
    )
    words = " ".join(fr).split()
    assert sum(word in news for word in words) > 0.5 * len(words)
    assert result.stdout.count("datagen on 2,000 pairs") == 1
    assert result.stdout.count("datagen on 3,000 pairs") == 1
    rows = _sizes_table(result.stdout, "wmt14_enfr")
    assert [row[0] for row in rows] == [2000, 3000]
    for pairs, wall, cpu, per_million, pss, _ in rows:
        assert wall > 0 and pss > 100
        # CPU s is printed to 0.05 s, the rate to 0.05 s per million pairs.
        assert abs(per_million - cpu / pairs * 1e6) <= 0.05 * 1e6 / pairs + 0.05
    # Shard bytes as metadata.json records them, for the size whose data is still there.
    metadata = json.loads((tmp_path / "data" / "wmt14_enfr" / "metadata.json").read_text())
    recorded = sum(s["bytes"] for split in metadata["splits"].values() for s in split["shards"])
    assert metadata["splits"]["train"]["examples"] == 3000
    assert rows[1][5] == recorded and 0 < rows[0][5] < rows[1][5]


def test_clean_removes_each_sizes_files_and_bad_sizes_are_named(tmp_path, shared_data):
    command = [
        sys.executable,
        str(SCRIPT),
        f"--folder={tmp_path}",
        "--problem=wmt14_enfr",
        "--vocab_size=1000",
        f"--shared_data={shared_data}",
        "--quiet",
    ]
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    bad = warm_python.run(command + ["--pairs=1000,x"], capture_output=True, text=True, env=env)
    assert bad.returncode == 2 and "--pairs=1000,x: give positive integers" in bad.stderr
    result = warm_python.run(
        command + ["--pairs=1500", "--clean"], capture_output=True, text=True, timeout=600, env=env
    )
    assert result.returncode == 0, result.stderr
    assert [row[0] for row in _sizes_table(result.stdout, "wmt14_enfr")] == [1500]
    assert list(tmp_path.iterdir()) == []

"""`tools/benchmark_datagen.py` on a tiny corpus: the corpus it builds and the table it prints."""

import os
import re
import subprocess
import sys
from pathlib import Path

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
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
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
    for line in result.stdout.split("\n\n")[-1].splitlines()[2:]:
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
    again = subprocess.run(
        command + ["--quiet"], capture_output=True, text=True, timeout=300, env=env
    )
    assert again.returncode == 0, again.stderr
    assert (raw / "synthetic.en-de.en").read_bytes().split(b"\n") == en
    assert "wmt14_ende: generated" in again.stdout

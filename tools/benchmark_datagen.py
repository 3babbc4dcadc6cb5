"""Wall time, CPU time and peak memory of `t2t_lite.datagen` per stage, at WMT14 scale.

    python tools/benchmark_datagen.py --folder=/tmp/datagen_bench [--pairs=4500000[,...]]
        [--shared_data=../shared/data] [--problem=wmt14_ende|wmt14_enfr] [--vocab_size=N]
        [--clean]

Builds (once; reruns with the same --pairs and problem reuse it) a deterministic
synthetic corpus of `--pairs` English-German (wmt14_ende) or English-French (wmt14_enfr)
training pairs in `FOLDER/raw` from the WMT news files of the shared data
(news-test2008, newssyscomb2009, newstest2009-2011): pair i joins the first half of one
news sentence to the second half of another, in both languages alike, so the sentences
are as long as WMT14's (about 22 words). To give the vocabulary a growing number of
word types, as a real corpus of millions of sentences has, each half comes in 32
variants whose numbers and some capitalised names are altered. newstest2013 is the dev
set and newstest2012 stands in for newstest2014 (links, nothing copied).

Then runs `python -m t2t_lite.datagen --problem=PROBLEM` on it (data in `FOLDER/data`,
removed first so that every run builds), follows its progress lines, and samples the
process tree (datagen and its worker processes) every 0.5 s from /proc. Per stage it
prints wall seconds, CPU seconds of the whole tree, and the peak resident memory of the
tree: RSS summed over processes, and PSS (each shared page divided among the processes
that share it; worker processes are forked and share the parent's pages, so the RSS sum
counts those more than once). "writing" is the time datagen's main process spent
writing records, part of the encoding stage's wall time.

`--pairs` may list several sizes (`--pairs=4500000,18000000,36000000`): they are
measured one after another in the same folder, each with its stage table, and a last
table puts the sizes side by side: wall and CPU seconds of datagen, CPU seconds per
million pairs (the figure to compare for linearity: contention from other work
inflates wall time more than CPU time), peak PSS and the bytes of all shards written.
`--clean` removes each size's corpus and data once it is measured.
"""

from __future__ import annotations

import argparse
import os
import random
import re
import resource
import shutil
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path

_NEWS_TRAIN = ("news-test2008", "newssyscomb2009", "newstest2009", "newstest2010", "newstest2011")
_TARGETS = {"wmt14_ende": "de", "wmt14_enfr": "fr"}  # problem -> its target language
_VARIANTS = 32
_SYLLABLES = ("ka", "ber", "lin", "to", "mar", "sen", "vi", "dor", "ul", "ne", "ga", "ris")
_STAGE = re.compile(r"datagen: (.+?): (started|done in [\d.]+ s)(.*)$")
_WRITING = re.compile(r"([\d.]+) s writing")
_TICK = os.sysconf("SC_CLK_TCK")
_PAGE = os.sysconf("SC_PAGE_SIZE")


# The corpus.
def _variant(half: str, variant: int) -> str:
    """`half` with its digits and some capitalised words changed, by `variant` (0: as is)."""
    if variant == 0:
        return half
    words = half.split(" ")
    for position, word in enumerate(words):
        if any(c in "0123456789" for c in word):
            words[position] = "".join(
                str((int(c) + variant + position) % 10) if c in "0123456789" else c for c in word
            )
        elif len(word) > 3 and word[0].isupper() and word.isalpha():
            mix = zlib.crc32(f"{word} {variant}".encode())
            if mix % 3 == 0:
                syllable = _SYLLABLES[(mix >> 8) % len(_SYLLABLES)]
                words[position] = word[:2] + syllable + word[2:]
    return " ".join(words)


class _Halves:
    """First and second halves of the non-empty lines of some files, in `_VARIANTS` variants.

    Variants are made when first asked for, so a small corpus is quick to build.
    """

    def __init__(self, paths: list):
        self.lines = []
        for path in paths:
            for line in path.read_text(encoding="utf-8").split("\n"):
                words = line.split()
                if len(words) >= 2:
                    cut = len(words) // 2
                    self.lines.append((" ".join(words[:cut]), " ".join(words[cut:])))
        self._made = {}

    def get(self, line: int, half: int, variant: int) -> str:
        key = (line, half, variant)
        if key not in self._made:
            self._made[key] = _variant(self.lines[line][half], variant)
        return self._made[key]


def build_corpus(shared: Path, raw: Path, pairs: int, target: str = "de") -> None:
    """Writes `pairs` synthetic English-`target` training pairs; links dev and test into `raw`."""
    stamp = raw / "pairs.txt"
    if stamp.exists() and stamp.read_text() == f"{pairs} en-{target}":
        return
    shutil.rmtree(raw, ignore_errors=True)
    raw.mkdir(parents=True)
    news = shared / "wmt_news_2008_2012"
    pair = f"en-{target}"
    english = _Halves([news / f"{stem}.{pair}.en" for stem in _NEWS_TRAIN])
    other = _Halves([news / f"{stem}.{pair}.{target}" for stem in _NEWS_TRAIN])
    rng = random.Random(2014)
    lines = min(len(english.lines), len(other.lines))
    with (
        open(raw / f"synthetic.{pair}.en", "w", encoding="utf-8") as en,
        open(raw / f"synthetic.{pair}.{target}", "w", encoding="utf-8") as out,
    ):
        for _ in range(pairs):
            a, b = rng.randrange(lines), rng.randrange(lines)
            v, w = rng.randrange(_VARIANTS), rng.randrange(_VARIANTS)
            # The same picks for both languages keep the pairs loosely parallel.
            en.write(f"{english.get(a, 0, v)} {english.get(b, 1, w)}\n")
            out.write(f"{other.get(a, 0, v)} {other.get(b, 1, w)}\n")
    for language in ("en", target):
        os.symlink(
            shared / "wmt13_newstest2013" / f"newstest2013.{language}",
            raw / f"newstest2013.{language}",
        )
        os.symlink(news / f"newstest2012.{pair}.{language}", raw / f"newstest2014.{language}")
    stamp.write_text(f"{pairs} en-{target}")


# Watching the process tree.
def _stat(pid: int) -> list | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on


def _tree(root: int) -> list:
    """`root` and its live descendants."""
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (fields := _stat(int(entry))):
            children.setdefault(int(fields[1]), []).append(int(entry))
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo += children.get(pid, [])
    return found


def tree_cpu(root: int) -> float:
    """CPU seconds of `root`, its live descendants and the children it has reaped."""
    total = 0
    for pid in _tree(root):
        if fields := _stat(pid):
            total += int(fields[11]) + int(fields[12])  # utime, stime
            if pid == root:
                total += int(fields[13]) + int(fields[14])  # cutime, cstime
    return total / _TICK


def tree_memory(root: int) -> tuple:
    """(RSS, PSS) in bytes, summed over the tree."""
    rss = pss = 0
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                rss += int(f.read().split()[1]) * _PAGE
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        pss += int(line.split()[1]) * 1024
                        break
        except OSError:
            pass  # The process ended between the listing and the read.
    return rss, pss


class Watch:
    """Samples a process tree's memory in a thread; marks stages from its progress lines."""

    def __init__(self, process: subprocess.Popen):
        self.process = process
        self.samples = []  # (time, rss, pss)
        self.events = []  # (time, stage, "started" | "done", cpu seconds, rest of line)
        self.lines = []
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _sample(self) -> None:
        while self.process.poll() is None:
            self.samples.append((time.perf_counter(), *tree_memory(self.process.pid)))
            time.sleep(0.5)

    def follow(self, echo: bool) -> None:
        for line in self.process.stderr:
            self.lines.append(line)
            if echo:
                sys.stderr.write(line)
            if match := _STAGE.search(line):
                stage, what, rest = match.groups()
                kind = "started" if what == "started" else "done"
                self.events.append(
                    (time.perf_counter(), stage, kind, tree_cpu(self.process.pid), rest)
                )
        self.process.wait()
        self._sampler.join()

    def stages(self) -> list:
        """[(stage, wall s, CPU s, peak RSS, peak PSS, rest of the done line)]."""
        rows, open_ = [], {}
        for moment, stage, kind, cpu, rest in self.events:
            if kind == "started":
                open_[stage] = (moment, cpu)
                continue
            start, start_cpu = open_.pop(stage, (moment, cpu))
            # A stage shorter than the sampling period gets the last sample before its end.
            before = [s for s in self.samples if s[0] <= moment] or [(0, 0, 0)]
            inside = [s for s in before if s[0] >= start] or before[-1:]
            rows.append(
                (
                    stage,
                    moment - start,
                    cpu - start_cpu,
                    max(s[1] for s in inside),
                    max(s[2] for s in inside),
                    rest,
                )
            )
        return rows


def _stage_group(stage: str) -> str:
    return stage.split(" ")[0] if stage.split(" ")[0] in ("encoding", "shuffling") else stage


def report(rows: list, wall: float, cpu: float, peak: tuple) -> str:
    """The table: stages in order (splits of a stage summed), writing, total."""
    merged = {}
    writing = 0.0
    for stage, seconds, cpu_s, rss, pss, rest in rows:
        group = _stage_group(stage)
        old = merged.get(group, (0.0, 0.0, 0, 0))
        merged[group] = (old[0] + seconds, old[1] + cpu_s, max(old[2], rss), max(old[3], pss))
        if match := _WRITING.search(rest):
            writing += float(match.group(1))
    lines = [f"{'stage':<24} {'wall s':>8} {'CPU s':>8} {'peak RSS MB':>12} {'peak PSS MB':>12}"]
    for group, (seconds, cpu_s, rss, pss) in merged.items():
        lines.append(
            f"{group:<24} {seconds:8.1f} {cpu_s:8.1f} {rss / 2**20:12.0f} {pss / 2**20:12.0f}"
        )
        if group == "encoding":
            lines.append(f"{'  of which writing':<24} {writing:8.1f} {'-':>8} {'-':>12} {'-':>12}")
    lines.append(
        f"{'total (process)':<24} {wall:8.1f} {cpu:8.1f} {peak[0] / 2**20:12.0f} "
        f"{peak[1] / 2**20:12.0f}"
    )
    return "\n".join(lines)


def _sizes(text: str) -> list:
    try:
        sizes = [int(part.replace("_", "")) for part in text.split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(
            f"--pairs={text}: give positive integers separated by commas, e.g. 4500000,18000000"
        )
    return sizes


def shard_bytes(data: Path) -> int:
    """Bytes of the TFRecord shards under `data` (every split)."""
    return sum(path.stat().st_size for path in data.rglob("*.tfrecord"))


def measure(args, folder: Path, pairs: int) -> tuple:
    """Builds the corpus and runs datagen on it: (wall s, CPU s, peak PSS, shard bytes)."""
    start = time.perf_counter()
    build_corpus(Path(args.shared_data), folder / "raw", pairs, _TARGETS[args.problem])
    print(f"corpus: {pairs:,} pairs in {folder / 'raw'} ({time.perf_counter() - start:.1f} s)")
    shutil.rmtree(folder / "data", ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "t2t_lite.datagen",
        f"--problem={args.problem}",
        f"--data_dir={folder / 'data'}",
        f"--raw_dir={folder / 'raw'}",
    ]
    if args.vocab_size:
        command.append(f"--vocab_size={args.vocab_size}")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    process = subprocess.Popen(command, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    watch = Watch(process)
    watch.follow(echo=not args.quiet)
    wall = time.perf_counter() - start
    if process.returncode != 0:
        sys.exit(f"benchmark_datagen: datagen failed:\n{''.join(watch.lines[-20:])}")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    peak = (max(s[1] for s in watch.samples), max(s[2] for s in watch.samples))
    written = shard_bytes(folder / "data")
    print(process.stdout.read().rstrip())
    print(f"\ndatagen on {pairs:,} pairs, {os.cpu_count()} CPUs")
    print(report(watch.stages(), wall, cpu, peak), flush=True)
    if args.clean:
        shutil.rmtree(folder / "raw", ignore_errors=True)
        shutil.rmtree(folder / "data", ignore_errors=True)
    return wall, cpu, peak[1], written


def sizes_table(rows: list) -> str:
    """One line per size: [(pairs, wall s, CPU s, peak PSS bytes, shard bytes)]."""
    lines = [
        f"{'pairs':>12} {'wall s':>9} {'CPU s':>9} {'CPU s/M pairs':>14} {'peak PSS MB':>12} "
        f"{'shard bytes':>15}"
    ]
    for pairs, wall, cpu, pss, written in rows:
        lines.append(
            f"{pairs:>12,} {wall:9.1f} {cpu:9.1f} {cpu / pairs * 1e6:14.1f} "
            f"{pss / 2**20:12,.0f} {written:>15,}"
        )
    return "\n".join(lines)


def main() -> None:
    repo = Path(__file__).resolve().parents[1]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--folder", required=True, help="where the corpus and data go")
    parser.add_argument(
        "--pairs", type=_sizes, default=[4_500_000], help="training pairs; several: 1000,2000"
    )
    parser.add_argument("--shared_data", default=str(repo.parent / "shared" / "data"))
    parser.add_argument("--problem", default="wmt14_ende", choices=sorted(_TARGETS))
    parser.add_argument("--vocab_size", type=int, default=None, help="default: the problem's")
    parser.add_argument("--quiet", action="store_true", help="do not echo datagen's lines")
    parser.add_argument(
        "--clean", action="store_true", help="remove each size's corpus and data once measured"
    )
    args = parser.parse_args()
    rows = []
    for pairs in args.pairs:
        rows.append((pairs, *measure(args, Path(args.folder), pairs)))
    print(f"\n{args.problem} datagen by corpus size, {os.cpu_count()} CPUs")
    print(sizes_table(rows))


if __name__ == "__main__":
    main()

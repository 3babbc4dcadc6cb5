"""`python -m t2t_lite.datagen` end to end on real Multi30k files; problems by name or module."""

import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
from collections import Counter

import pytest
import sentencepiece as spm
import tensorflow as tf
import warm_python

from t2t_lite import problems
from t2t_lite.problems import encoding
from t2t_lite.problems.corpus import count_lines, read_lines
from t2t_lite.problems.problem import Problem
from t2t_lite.problems.progress import Progress
from t2t_lite.problems.translate import TranslateProblem
from t2t_lite.problems.vocab import train_sentencepiece


def run_datagen(*flags, env=None) -> subprocess.CompletedProcess:
    env = {**(env or os.environ), "TF_CPP_MIN_LOG_LEVEL": "2"}
    return warm_python.run(
        [sys.executable, "-m", "t2t_lite.datagen", *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_datagen_builds_then_reruns_as_a_no_op(tmp_path, shared_data):
    flags = [
        "--problem=multi30k_ende",
        f"--data_dir={tmp_path}",
        f"--raw_dir={shared_data / 'multi30k'}",
        "--vocab_size=1000",
    ]
    first = run_datagen(*flags)
    assert first.returncode == 0, first.stderr
    assert "multi30k_ende: generated" in first.stdout
    assert "train: 29,000 examples in 8 shards, 0 empty pairs skipped" in first.stdout
    assert "dev: 1,014 examples in 1 shards" in first.stdout
    assert "test: 1,000 examples in 1 shards" in first.stdout
    folder = tmp_path / "multi30k_ende"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["settings"]["vocab_size"] == 1000
    assert f"fingerprint {metadata['fingerprint']}" in first.stdout
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}

    second = run_datagen(*flags)
    assert second.returncode == 0, second.stderr
    assert "multi30k_ende: up to date" in second.stdout
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == stamps

    problem = problems.get("multi30k_ende")
    assert problem.fingerprint(str(tmp_path)) == metadata["fingerprint"]
    assert problem.encoders(str(tmp_path))["inputs"].vocab_size == 1000


def test_datagen_names_the_bad_file_and_line(tmp_path):
    raw = tmp_path / "raw"
    raw.mkdir()
    for split in ("train", "val", "test_2016_flickr"):
        (raw / f"{split}.en").write_text("A dog runs.\nTwo cats sleep.\nA bird sings.\n")
        (raw / f"{split}.de").write_text("Ein Hund rennt.\nZwei Katzen schlafen.\n")
    result = run_datagen("--problem=multi30k_ende", f"--data_dir={tmp_path}", f"--raw_dir={raw}")
    assert result.returncode == 1
    assert (
        f"t2t_lite.datagen: {raw}/train.en:3: line has no partner: {raw}/train.de ends after 2 lines"
        in result.stderr
    )
    assert not (tmp_path / "multi30k_ende" / "metadata.json").exists()


def test_problems_generated_in_code_refuse_datagen_options(tmp_path):
    problem = problems.get("algorithmic_copy")
    assert problem.generate_data(str(tmp_path)) == {}
    with pytest.raises(
        ValueError, match=r"algorithmic_copy takes no datagen options; got \['vocab_size'\]"
    ):
        Problem.generate_data(problem, str(tmp_path), vocab_size=100)


USER_MODULE = """
from t2t_lite.problems.translate import TranslateProblem


class Captions(TranslateProblem):
    name = "captions_ende"
    vocab_size = 400
    num_shards = {"train": 2}


NOT_A_PROBLEM = 3
"""


def write_module(folder, name: str) -> None:
    """Writes `name.py` (a TranslateProblem subclass `Captions`) into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.py").write_text(USER_MODULE)


def write_captions(raw, shared_data) -> dict:
    """Real Multi30k captions as train/dev/test.{en,de}: {split: pairs}."""
    raw.mkdir(parents=True)
    sizes = {"train": 300, "dev": 40, "test": 30}
    for language in ("en", "de"):
        with gzip.open(shared_data / "multi30k" / f"train.{language}.gz", "rt") as f:
            lines = f.read().split("\n")
        start = 0
        for split, size in sizes.items():
            part = lines[start : start + size]
            (raw / f"{split}.{language}").write_text("\n".join(part) + "\n", encoding="utf-8")
            start += size
    return sizes


def test_datagen_runs_a_problem_given_as_module_and_class(tmp_path, shared_data):
    write_module(tmp_path / "code", "my_captions")
    data_dir = tmp_path / "data"
    # The default raw folder, DATA_DIR/<name>/raw.
    sizes = write_captions(data_dir / "captions_ende" / "raw", shared_data)
    path = [str(tmp_path / "code"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    result = run_datagen("--problem=my_captions:Captions", f"--data_dir={data_dir}", env=env)
    assert result.returncode == 0, result.stderr
    assert "captions_ende: generated" in result.stdout
    assert "train: 300 examples in 2 shards" in result.stdout
    folder = data_dir / "captions_ende"
    metadata = json.loads((folder / "metadata.json").read_text())
    assert metadata["settings"]["vocab_size"] == 400
    for split, size in sizes.items():
        shards = metadata["splits"][split]["shards"]
        records = [
            sum(1 for _ in tf.data.TFRecordDataset(str(folder / shard["file"]))) for shard in shards
        ]
        # Example i goes to shard i mod (number of shards).
        expected = [size // 2, size // 2] if split == "train" else [size]
        assert records == [shard["examples"] for shard in shards] == expected


def test_get_imports_module_and_class(tmp_path, monkeypatch):
    write_module(tmp_path, "captions_a")
    monkeypatch.syspath_prepend(str(tmp_path))
    problem = problems.get("captions_a:Captions")
    assert isinstance(problem, TranslateProblem) and problem.name == "captions_ende"
    assert problems.get("t2t_lite.problems.wmt:Wmt14EnDe").vocab_size == 37_000
    # An instance is returned as it is.
    monkeypatch.setattr(sys.modules["captions_a"], "INSTANCE", problem, raising=False)
    assert problems.get("captions_a:INSTANCE") is problem


def test_get_names_what_is_wrong_with_module_and_class(tmp_path, monkeypatch):
    write_module(tmp_path, "captions_b")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(
        ValueError,
        match=r"problem 'no_such_module:X': cannot import module 'no_such_module' "
        r"\(No module named 'no_such_module'\); put the folder that holds it on PYTHONPATH",
    ):
        problems.get("no_such_module:X")
    with pytest.raises(
        ValueError,
        match=r"module 'captions_b' \(.*captions_b.py\) has no attribute 'Missing'; "
        r"it defines captions_b:Captions$",
    ):
        problems.get("captions_b:Missing")
    with pytest.raises(
        ValueError, match=r"captions_b.NOT_A_PROBLEM is int 3, not a subclass or instance"
    ):
        problems.get("captions_b:NOT_A_PROBLEM")
    with pytest.raises(
        ValueError, match=r"captions_b.TranslateProblem has no name; set the class attribute"
    ):
        problems.get("captions_b:TranslateProblem")
    with pytest.raises(ValueError, match=r"problem 'captions_b:': expected module:ClassName"):
        problems.get("captions_b:")
    with pytest.raises(ValueError, match=r"unknown problem 'captions'; known problems: .*"):
        problems.get("captions")


def test_register_adds_a_problem_and_refuses_duplicates(monkeypatch):
    monkeypatch.setattr(problems, "_REGISTRY", dict(problems._REGISTRY))

    @problems.register
    class Captions(TranslateProblem):
        name = "captions_registered"

    assert "captions_registered" in problems.names()
    assert type(problems.get("captions_registered")) is Captions

    class Other(TranslateProblem):
        name = "captions_registered"

    with pytest.raises(
        ValueError,
        match=r"problem name 'captions_registered' is registered already \(by class "
        r".*Captions\); give class .*Other another name",
    ):
        problems.register(Other)
    with pytest.raises(ValueError, match=r"problem name 'wmt14_ende' is registered already"):
        problems.register(problems.get("wmt14_ende"))
    with pytest.raises(ValueError, match=r"register takes a Problem subclass or instance"):
        problems.register(dict)
    instance = Other()
    instance.name = "captions_instance"
    problems.register(instance)
    assert problems.get("captions_instance") is instance


# Progress, parallel encoding, shard hashes.
STAGE_LINE = re.compile(r"datagen: (.*)$")


def stage_lines(stderr: str) -> list:
    return [m.group(1) for line in stderr.splitlines() if (m := STAGE_LINE.search(line))]


def captions_with_blanks(tmp_path, shared_data) -> tuple:
    """(environment, data_dir, raw folder) of problem my_captions:Captions; 2 train pairs blank."""
    write_module(tmp_path / "code", "my_captions")
    data_dir = tmp_path / "data"
    raw = data_dir / "captions_ende" / "raw"
    write_captions(raw, shared_data)
    for language, blank in (("en", 17), ("de", 230)):
        lines = (raw / f"train.{language}").read_text(encoding="utf-8").split("\n")
        lines[blank] = "  " if language == "de" else ""
        (raw / f"train.{language}").write_text("\n".join(lines), encoding="utf-8")
    path = [str(tmp_path / "code"), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, path))}
    return env, data_dir, raw


def test_datagen_reports_each_stage_with_the_counts_of_the_corpus(tmp_path, shared_data):
    env, data_dir, raw = captions_with_blanks(tmp_path, shared_data)
    result = run_datagen("--problem=my_captions:Captions", f"--data_dir={data_dir}", env=env)
    assert result.returncode == 0, result.stderr
    # Expected counts, from the raw files themselves.
    lines = {
        (split, language): (raw / f"{split}.{language}")
        .read_bytes()
        .decode("utf-8")
        .split("\n")[:-1]
        for split in ("train", "dev", "test")
        for language in ("en", "de")
    }
    pairs = {split: len(lines[split, "en"]) for split in ("train", "dev", "test")}
    kept = {
        split: sum(
            bool(e.strip() and d.strip()) for e, d in zip(lines[split, "en"], lines[split, "de"])
        )
        for split in pairs
    }
    sentences = sum(bool(s.strip()) for language in ("en", "de") for s in lines["train", language])
    assert (pairs["train"], kept["train"], sentences) == (300, 298, 598)
    said = stage_lines(result.stderr)
    started = [line.split(": started")[0] for line in said if ": started" in line]
    assert started == [
        "reading",
        "vocabulary sample",
        "SentencePiece training",
        "encoding train",
        "shuffling train",
        "encoding dev",
        "encoding test",
    ]
    done = {
        line.split(": done in")[0]: line.split(" s: ", 1)[-1]
        for line in said
        if ": done in" in line
    }
    assert done["reading"] == ", ".join(f"{split} {n:,} pairs" for split, n in pairs.items())
    assert (
        done["vocabulary sample"] == f"{sentences:,} of {sentences:,} non-empty sentences sampled"
    )
    assert f"SentencePiece training: started ({sentences:,} sentences, vocab_size 400)" in said
    shards = {"train": 2, "dev": 1, "test": 1}
    for split in pairs:
        assert done[f"encoding {split}"].startswith(
            f"{pairs[split]:,} pairs read, {kept[split]:,} encoded and written to {shards[split]} "
            f"shards, {pairs[split] - kept[split]:,} skipped (empty side); "
        )
    assert done["shuffling train"] == f"2 shards, {kept['train']:,} examples"
    assert f"train: {kept['train']} examples in 2 shards, 2 empty pairs skipped" in result.stdout
    # Every shard's sha256 is in the metadata.
    folder = data_dir / "captions_ende"
    metadata = json.loads((folder / "metadata.json").read_text())
    for split in metadata["splits"].values():
        for shard in split["shards"]:
            assert (
                shard["sha256"] == hashlib.sha256((folder / shard["file"]).read_bytes()).hexdigest()
            )


class NewsEnDe(TranslateProblem):
    """Real WMT news: train newstest2010 + newssyscomb2009, dev newstest2013, test newstest2012."""

    name = "news_ende"
    vocab_size = 1000
    num_shards = {"train": 4}
    raw_stems = {
        "train": ("newstest2010", "newssyscomb2009"),
        "dev": ("newstest2013",),
        "test": ("newstest2012",),
    }


@pytest.fixture(scope="module")
def news_raw(tmp_path_factory, shared_data):
    raw = tmp_path_factory.mktemp("news_raw")
    news = shared_data / "wmt_news_2008_2012"
    for language in ("en", "de"):
        for stem in ("newstest2010", "newssyscomb2009", "newstest2012"):
            os.symlink(news / f"{stem}.en-de.{language}", raw / f"{stem}.{language}")
        os.symlink(
            shared_data / "wmt13_newstest2013" / f"newstest2013.{language}",
            raw / f"newstest2013.{language}",
        )
    return raw


def shard_bytes(folder) -> dict:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.name != "metadata.json"}


def test_parallel_runs_repeat_byte_for_byte_and_equal_one_process(tmp_path, news_raw):
    problem = NewsEnDe()
    runs = {}
    for name, workers in (("two", 2), ("again", 2), ("one", 1)):
        problem.generate_data(str(tmp_path / name), str(news_raw), workers=workers)
        runs[name] = shard_bytes(tmp_path / name / "news_ende")
    assert runs["two"] == runs["again"] == runs["one"]
    assert len([n for n in runs["two"] if n.endswith(".tfrecord")]) == 6
    # And against SentencePiece itself: example i of the corpus is in train shard i mod 4.
    data_dir = str(tmp_path / "two")
    reference = spm.SentencePieceProcessor(model_file=problem.vocab_file(data_dir))
    expected = [[] for _ in range(4)]
    index = 0
    for stem in ("newstest2010", "newssyscomb2009"):
        en = (news_raw / f"{stem}.en").read_bytes().decode("utf-8").split("\n")[:-1]
        de = (news_raw / f"{stem}.de").read_bytes().decode("utf-8").split("\n")[:-1]
        for source, target in zip(en, de, strict=True):
            if source.strip() and target.strip():
                ids = (
                    tuple(reference.encode(source)) + (1,),
                    tuple(reference.encode(target)) + (1,),
                )
                expected[index % 4].append(ids)
                index += 1
    for shard, path in enumerate(problem.shard_files("train", data_dir)):
        got = [
            (tuple(e["inputs"]), tuple(e["targets"]))
            for e in problem._read([path]).as_numpy_iterator()
        ]
        assert Counter(got) == Counter(expected[shard]) and got != expected[shard]


def test_a_shard_over_the_memory_budget_is_shuffled_through_buckets(
    tmp_path, news_raw, monkeypatch
):
    problem = NewsEnDe()
    problem.generate_data(str(tmp_path), str(news_raw), workers=1)
    source = problem.shard_files("train", str(tmp_path))[0]
    records = [r.numpy() for r in tf.data.TFRecordDataset(source)]
    monkeypatch.setattr(encoding, "SHUFFLE_BUDGET", os.path.getsize(source) // 3)
    state = encoding.shuffle_states(7, [len(records)])[0]
    results = []
    for copy in ("a", "b"):
        path = str(tmp_path / f"shard.{copy}")
        shutil.copy(source, path)
        sha = encoding.shuffle_and_hash((path, state))
        data = open(path, "rb").read()
        assert sha == hashlib.sha256(data).hexdigest()
        results.append(data)
    assert results[0] == results[1], "deterministic for a given state"
    shuffled = [r.numpy() for r in tf.data.TFRecordDataset(str(tmp_path / "shard.a"))]  # CRCs hold
    assert Counter(shuffled) == Counter(records) and shuffled != records
    assert sorted(os.listdir(tmp_path))[-2:] == ["shard.a", "shard.b"]  # no bucket left over
    assert not [n for n in os.listdir(tmp_path) if "bucket" in n]


def test_a_shard_damaged_in_place_is_named_and_rebuilt(tmp_path, shared_data):
    env, data_dir, _ = captions_with_blanks(tmp_path, shared_data)
    flags = ["--problem=my_captions:Captions", f"--data_dir={data_dir}"]
    assert run_datagen(*flags, env=env).returncode == 0
    shard = data_dir / "captions_ende" / "train-00001-of-00002.tfrecord"
    good = shard.read_bytes()
    middle = len(good) // 2
    shard.write_bytes(
        good[:middle] + bytes(b ^ 0xFF for b in good[middle : middle + 16]) + good[middle + 16 :]
    )
    assert shard.stat().st_size == len(good)
    result = run_datagen(*flags, env=env)
    assert result.returncode == 0, result.stderr
    assert (
        f"{shard}: shard damaged: same size but not the bytes datagen wrote (sha256 differs from"
        in result.stderr
    )
    assert "rebuilding the data of" in result.stderr
    assert "captions_ende: generated" in result.stdout
    assert shard.read_bytes() == good
    again = run_datagen(*flags, env=env)
    assert "captions_ende: up to date" in again.stdout
    assert "verifying: done in" in again.stderr and "4 shards, 0 damaged" in again.stderr


def test_count_lines_agrees_with_read_lines(tmp_path):
    texts = {"plain": "a\nb\n", "no_end": "a\nb", "crlf": "a\r\nb\r\n\r\n", "empty": "", "one": "x"}
    for name, text in texts.items():
        for path in (tmp_path / name, tmp_path / f"{name}.gz"):
            data = text.encode()
            path.write_bytes(gzip.compress(data) if path.suffix == ".gz" else data)
            assert count_lines(str(path)) == len(list(read_lines(str(path)))), name


def test_progress_lines_come_while_a_stage_runs(tmp_path, news_raw, caplog):
    caplog.set_level(logging.INFO, logger="t2t_lite.datagen")
    NewsEnDe().generate_data(str(tmp_path), str(news_raw), workers=1, progress=Progress(interval=0))
    said = [r.getMessage() for r in caplog.records if r.name == "t2t_lite.datagen"]
    pairs = sum(
        len((news_raw / f"{stem}.en").read_bytes().decode("utf-8").split("\n")[:-1])
        for stem in ("newstest2010", "newssyscomb2009")
    )
    assert pairs == 2991
    rate = r"[\d,]+/s, ETA \d+ s"
    # Both sides, read twice (choose, then write the sample), reported every 8,192.
    assert re.fullmatch(
        rf"datagen: vocabulary sample: 8,192 / {4 * pairs:,} sentences read \(68%\), {rate}",
        said[3],
    ), said[3]
    encoding_lines = [line for line in said if line.startswith("datagen: encoding train: ")]
    # One line per chunk of 2,048 pairs here (interval 0, one process), then the summary.
    assert re.fullmatch(
        rf"datagen: encoding train: 2,048 / {pairs:,} pairs \(68%\), 2,048 encoded and written, {rate}",
        encoding_lines[1],
    ), encoding_lines[1]
    assert encoding_lines[2].startswith(
        f"datagen: encoding train: {pairs:,} / {pairs:,} pairs (100%)"
    )
    assert encoding_lines[3].startswith("datagen: encoding train: done in ")


def _small_vocab(tmp_path, news_raw) -> str:
    path = str(tmp_path / "vocab.model")
    train_sentencepiece(
        (text for _, text in read_lines(str(news_raw / "newstest2010.en"))), path, 400
    )
    return path


def _kill_self(item):
    os.kill(os.getpid(), 9)


def test_a_worker_that_dies_stops_datagen_with_an_error_that_says_so(tmp_path, news_raw):
    with encoding.Workers(_small_vocab(tmp_path, news_raw), 2) as pool:
        with pytest.raises(encoding.WorkerDied, match="--workers=1"):
            list(pool.map(_kill_self, range(3)))


class _Finalised:
    """Appends the pid of the process that finalises it to `path`."""

    def __init__(self, path):
        self.path = path
        self.cycle = self

    def __del__(self):
        with open(self.path, "a") as file:
            file.write(f"{os.getpid()}\n")


def _collect(item):
    import gc

    gc.collect()
    return os.getpid()


def test_workers_never_finalise_what_the_parent_left_for_collection(tmp_path, news_raw):
    # TensorFlow objects finalised in a fork crash it; any object stands for them here.
    import gc

    vocab = _small_vocab(tmp_path, news_raw)
    marks = tmp_path / "finalised"
    gc.disable()
    try:
        with encoding.Workers(vocab, 2) as pool:
            _Finalised(str(marks))  # Garbage (a cycle) when the workers are forked.
            worker_pids = set(pool.map(_collect, range(8)))
        gc.collect()
    finally:
        gc.enable()
    assert os.getpid() not in worker_pids
    assert marks.read_text().split() == [str(os.getpid())]


def test_nul_only_lines_are_skipped_and_counted_like_empty_ones(tmp_path, shared_data):
    env, data_dir, raw = captions_with_blanks(tmp_path, shared_data)  # 2 blank train pairs
    for split, language, number, text in (
        ("train", "en", 40, "\x00"),
        ("dev", "de", 3, " \x00\x00"),
    ):
        path = raw / f"{split}.{language}"
        lines = path.read_text(encoding="utf-8").split("\n")
        lines[number - 1] = text
        path.write_text("\n".join(lines), encoding="utf-8")
    result = run_datagen("--problem=my_captions:Captions", f"--data_dir={data_dir}", env=env)
    assert result.returncode == 0, result.stderr
    assert "train: 297 examples in 2 shards, 3 empty pairs skipped" in result.stdout
    metadata = json.loads((data_dir / "captions_ende" / "metadata.json").read_text())
    train, dev = metadata["splits"]["train"], metadata["splits"]["dev"]
    assert (train["skipped_empty"], dev["skipped_empty"]) == (3, 1)
    assert f"{raw / 'train.en'}:40" in train["skipped_first"]
    assert dev["skipped_first"] == [f"{raw / 'dev.en'}:3"]
    # The vocabulary sample leaves them out too: 600 train sentences, 3 blank.
    assert "vocabulary sample: done in" in result.stderr
    assert "597 of 597 non-empty sentences sampled" in result.stderr


def _children(pid: int) -> set:
    found = set()
    for task in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{task}/children") as file:
            found.update(int(child) for child in file.read().split())
    return found


def _alive(pid: int) -> bool:
    """True while process `pid` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as file:
            return file.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_kill_9_of_datagen_during_encoding_ends_its_workers(tmp_path, shared_data):
    import time

    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    flags = ["--problem=multi30k_ende", f"--data_dir={tmp_path}", "--workers=2",
             f"--raw_dir={shared_data / 'multi30k'}", "--vocab_size=1000"]  # fmt: skip
    with open(tmp_path / "stderr", "w") as errors:
        parent = subprocess.Popen(
            [sys.executable, "-m", "t2t_lite.datagen", *flags], stdout=subprocess.DEVNULL,
            stderr=errors, env=env,
        )  # fmt: skip
    workers = set()
    try:
        deadline = time.monotonic() + 240
        # Its two workers exist once encoding has started (forked at the first chunk).
        while len(workers) < 2 and parent.poll() is None and time.monotonic() < deadline:
            if "encoding train: started" in (tmp_path / "stderr").read_text():
                workers = _children(parent.pid)
            time.sleep(0.05)  # polling the log, not a synchronisation
        assert len(workers) == 2, (tmp_path / "stderr").read_text()[-2000:]
        parent.kill()  # SIGKILL: no handler of the parent runs
        parent.wait(timeout=30)
        deadline = time.monotonic() + 10
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [pid for pid in workers if _alive(pid)]
        assert not (tmp_path / "multi30k_ende" / "metadata.json").exists()
    finally:
        parent.kill()
        for pid in workers:
            if _alive(pid):
                os.kill(pid, 9)


def _decoded_pairs(problem, data_dir, split):
    encoder = problem.encoders(data_dir)["inputs"]
    return [
        (encoder.decode(e["inputs"]), encoder.decode(e["targets"]))
        for e in problem.examples(split, data_dir).as_numpy_iterator()
    ]


def test_bpe_dropout_copies_hold_the_corpus_each_time_and_repeat_in_any_process(tmp_path, news_raw):
    problem = NewsEnDe()
    plain_dir, two, one = (str(tmp_path / name) for name in ("plain", "two", "one"))
    plain = problem.generate_data(plain_dir, str(news_raw))
    sampled = problem.generate_data(two, str(news_raw), bpe_dropout=0.1, train_copies=3)
    problem.generate_data(one, str(news_raw), bpe_dropout=0.1, train_copies=3, workers=1)
    assert shard_bytes(tmp_path / "two" / "news_ende") == shard_bytes(
        tmp_path / "one" / "news_ende"
    )
    assert sampled["settings"]["bpe_dropout"] == 0.1
    assert sampled["settings"]["train_copies"] == 3
    assert "bpe_dropout" not in plain["settings"] and sampled["fingerprint"] != plain["fingerprint"]
    # The vocabulary, dev and test are those of the plain data, byte for byte.
    assert sampled["vocab"] == plain["vocab"]
    for split in ("dev", "test"):
        assert sampled["splits"][split] == plain["splits"][split]
    train = sampled["splits"]["train"]
    assert train["examples"] == 3 * plain["splits"]["train"]["examples"]
    assert (train["copies"], train["bpe_dropout"]) == (3, 0.1)
    assert train["target_tokens"] > 3 * plain["splits"]["train"]["target_tokens"]
    # Each copy is the whole corpus, segmented anew: the text three times over, in
    # other pieces than the plain ones and than each other.
    texts = Counter(_decoded_pairs(problem, two, "train"))
    assert texts == Counter(
        {p: 3 * n for p, n in Counter(_decoded_pairs(problem, plain_dir, "train")).items()}
    )
    ids = Counter(
        (tuple(e["inputs"]), tuple(e["targets"]))
        for e in problem.examples("train", two).as_numpy_iterator()
    )
    assert len(ids) > 2.5 * plain["splits"]["train"]["examples"]
    rerun = problem.generate_data(two, str(news_raw), bpe_dropout=0.1, train_copies=3)
    assert rerun["status"] == "up to date"


def test_bpe_dropout_and_copies_out_of_range_are_refused_by_name(tmp_path, news_raw):
    problem = NewsEnDe()
    for options, words in (
        ({"bpe_dropout": 1.0}, "bpe_dropout=1.0: the chance of skipping a merge"),
        ({"bpe_dropout": -0.1}, "bpe_dropout=-0.1"),
        ({"train_copies": 0}, "train_copies=0: give the number of times"),
    ):
        with pytest.raises(ValueError, match=re.escape(words)):
            problem.generate_data(str(tmp_path), str(news_raw), **options)

    class Unigram(NewsEnDe):
        model_type = "unigram"

    with pytest.raises(
        ValueError, match="applies to BPE vocabularies; problem news_ende has a unigram"
    ):
        Unigram().generate_data(str(tmp_path), str(news_raw), bpe_dropout=0.1)
    assert not (tmp_path / "news_ende").exists()
    result = run_datagen(
        "--problem=multi30k_ende", f"--data_dir={tmp_path}", f"--raw_dir={news_raw}",
        "--bpe_dropout=2",
    )  # fmt: skip
    assert result.returncode != 0
    assert result.stderr.strip().splitlines()[-1].startswith("t2t_lite.datagen: bpe_dropout=2.0:")

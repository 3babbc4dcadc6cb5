"""--download: WMT's archives fetched from a mirror, resumed, checked, never half-trusted.

A threading HTTP server on 127.0.0.1 (wmt_archive_support.ArchiveServer) serves small
archives in the real layouts, answers Range requests and can break a transfer midway.
"""

import hashlib
import logging
import socket
import sys

import pytest
import warm_python
import wmt_archive_support as support

from t2t_lite import problems
from t2t_lite.problems import download, wmt_archives
from t2t_lite.problems.download import DownloadError, Source

VOCAB = 500


@pytest.fixture(scope="module")
def served(tmp_path_factory, shared_data):
    """{language: folder} of the En-De and En-Fr archives, with a SHA256SUMS file each."""
    folders = {}
    for other in ("de", "fr"):
        folder = tmp_path_factory.mktemp(f"served_{other}")
        support.build(folder, shared_data, other)
        (folder / "SHA256SUMS").write_text(support.sha256sums(folder))
        folders[other] = folder
    return folders


def _source(server, folder, **options):
    return Source(mirror=server.url, checksums=str(folder / "SHA256SUMS"), pause=0, **options)


def _archive(name):
    return wmt_archives.ARCHIVES[name]


@pytest.mark.parametrize("other", ["de", "fr"])
def test_download_then_datagen_gives_the_data_of_the_archives_by_hand(
    other, served, tmp_path, caplog
):
    folder = served[other]
    problem = problems.get(f"wmt14_en{other}")
    with support.ArchiveServer(folder) as server, caplog.at_level(logging.INFO):
        fetched = problem.generate_data(
            str(tmp_path / "data"), None, vocab_size=VOCAB, workers=1,
            download=_source(server, folder),
        )  # fmt: skip
        raw = tmp_path / "data" / f"wmt14_en{other}" / "raw"  # the default raw folder
        names = [a.name for a in wmt_archives.archives_of(("en", other))]
        assert sorted(p.name for p in raw.iterdir()) == sorted(names)
        for name in names:
            assert (raw / name).read_bytes() == (folder / name).read_bytes()
        assert sorted(name for name, _ in server.requests) == sorted(names)
        # Rerun: the archives are checked, not fetched again, and the data is up to date.
        again = problem.generate_data(
            str(tmp_path / "data"), None, vocab_size=VOCAB, workers=1,
            download=_source(server, folder),
        )  # fmt: skip
        assert len(server.requests) == len(names)
    assert again["status"] == "up to date"
    by_hand = problem.generate_data(
        str(tmp_path / "by_hand"), str(folder), vocab_size=VOCAB, workers=1
    )
    assert fetched["splits"] == by_hand["splits"] and fetched["vocab"] == by_hand["vocab"]
    said = [r.getMessage() for r in caplog.records if r.name == "t2t_lite.datagen"]
    assert f"datagen: download dev.tgz: started (from {server.url}/dev.tgz)" in said
    assert any(line.startswith("datagen: download dev.tgz: done in ") for line in said)
    assert any(line.startswith("datagen: download dev.tgz: present and checked") for line in said)


def test_a_dropped_connection_is_resumed_with_a_range_request(served, tmp_path):
    folder, name = served["de"], "training-parallel-europarl-v7.tgz"
    size = (folder / name).stat().st_size
    with support.ArchiveServer(folder) as server:
        server.drops[name] = [size // 3, 1]
        download.fetch_all([_archive(name)], str(tmp_path), _source(server, folder))
    assert server.requests == [(name, None), (name, f"bytes={size // 3}-")]
    assert (tmp_path / name).read_bytes() == (folder / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_broken_run_keeps_only_the_part_file_and_the_next_run_resumes_it(served, tmp_path):
    folder, name = served["de"], "training-parallel-commoncrawl.tgz"
    size = (folder / name).stat().st_size
    with support.ArchiveServer(folder) as server:
        server.drops[name] = [size // 4, 2]  # Each attempt adds a quarter, then breaks.
        with pytest.raises(DownloadError) as caught:
            download.fetch_all([_archive(name)], str(tmp_path), _source(server, folder, attempts=2))
        message = str(caught.value)
        assert message.startswith(f"{server.url}/{name}: download of {name} failed after 2 ")
        held = 2 * (size // 4)
        assert f"{tmp_path / name}.part keeps the {held:,} bytes received" in message
        assert f"or download {name} by hand into {tmp_path}" in message
        assert sorted(p.name for p in tmp_path.iterdir()) == [f"{name}.part"]
        # A corpus read now names the archive as partly downloaded, never reads the .part.
        with pytest.raises(problems.corpus.DataError, match=rf"{name} \(.*\) partly downloaded"):
            wmt_archives.ArchiveCorpus(str(tmp_path), ("en", "de"))
        download.fetch_all([_archive(name)], str(tmp_path), _source(server, folder))
    assert server.requests == [
        (name, None),
        (name, f"bytes={size // 4}-"),
        (name, f"bytes={held}-"),
    ]
    assert (tmp_path / name).read_bytes() == (folder / name).read_bytes()
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_a_wrong_checksum_is_named_and_nothing_is_left(served, tmp_path):
    folder, name = served["de"], "dev.tgz"
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'0' * 64}  {name}\n")
    actual = hashlib.sha256((folder / name).read_bytes()).hexdigest()
    raw = tmp_path / "raw"
    with support.ArchiveServer(folder) as server:
        source = Source(mirror=server.url, checksums=str(sums), pause=0)
        with pytest.raises(DownloadError) as caught:
            download.fetch_all([_archive(name)], str(raw), source)
    assert str(caught.value) == (
        f"{server.url}/{name}: the file received has sha256 {actual}, not the {'0' * 64} "
        f"recorded; removed it. Rerun with --download to fetch it again; or download {name} "
        f"by hand into {raw}"
    )
    assert list(raw.iterdir()) == []


def test_the_recorded_checksums_apply_without_a_checksums_file(served, tmp_path):
    folder, name = served["de"], "dev.tgz"
    size = (folder / name).stat().st_size
    with support.ArchiveServer(folder) as server:
        with pytest.raises(
            DownloadError, match=rf"has {size:,} bytes, not the 38,654,961 recorded"
        ):
            download.fetch_all([_archive(name)], str(tmp_path), Source(mirror=server.url))
    assert list(tmp_path.iterdir()) == []
    # A file already there that differs from the record is refused, not overwritten.
    (tmp_path / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(DownloadError, match=rf"{tmp_path / name}: already there but has {size:,}"):
        download.fetch_all([_archive(name)], str(tmp_path), Source(mirror="http://127.0.0.1:9"))
    assert (tmp_path / name).read_bytes() == (folder / name).read_bytes()


def test_a_dead_link_and_no_server_are_named_with_the_alternative(served, tmp_path):
    folder = served["de"]
    gone = wmt_archives.Archive("training-parallel-un.tgz", "", None, None)
    with support.ArchiveServer(folder) as server:  # The En-De folder has no UN archive.
        with pytest.raises(DownloadError) as caught:
            download.fetch_all([gone], str(tmp_path), Source(mirror=server.url, pause=0))
    assert str(caught.value) == (
        f"{server.url}/training-parallel-un.tgz: HTTP 404 Not Found for training-parallel-un.tgz; "
        f"or download training-parallel-un.tgz by hand into {tmp_path}"
    )
    with socket.socket() as probe:  # A port on which nothing listens.
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = Source(mirror=f"http://127.0.0.1:{port}/wmt14", pause=0, attempts=2)
    with pytest.raises(DownloadError, match=r"after 2 attempts \(.*refused.*\); nothing was rec"):
        download.fetch_all([gone], str(tmp_path), source)
    assert list(tmp_path.iterdir()) == []


def test_a_file_mirror_serves_the_archives_too(served, tmp_path):
    folder, name = served["fr"], "training-giga-fren.tar"
    source = Source(mirror=folder.as_uri(), checksums=str(folder / "SHA256SUMS"))
    download.fetch_all([_archive(name)], str(tmp_path), source)
    assert (tmp_path / name).read_bytes() == (folder / name).read_bytes()


def test_checksums_file_lines_are_checked(tmp_path):
    sums = tmp_path / "SHA256SUMS"
    sums.write_text(f"{'a' * 64} *dev.tgz\n\n{'b' * 63}  test-full.tgz\n")
    with pytest.raises(DownloadError, match=rf"{sums}:3: expected `SHA256  NAME`"):
        download.read_checksums(str(sums))
    sums.write_text(f"{'A' * 64} *dev.tgz\n")
    assert download.read_checksums(str(sums)) == {"dev.tgz": "a" * 64}


@pytest.mark.slow
def test_datagen_command_downloads_with_progress_and_says_what_failed(
    served, tmp_path, shared_data
):
    folder = served["de"]
    command = [
        sys.executable, "-m", "t2t_lite.datagen", "--problem=wmt14_ende",
        f"--data_dir={tmp_path / 'data'}", f"--raw_dir={tmp_path / 'raw'}",
        f"--vocab_size={VOCAB}", "--workers=1",
    ]  # fmt: skip
    result = warm_python.run(
        [*command, "--download_mirror=http://127.0.0.1:9"], capture_output=True, text=True
    )
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "t2t_lite.datagen: --download_mirror applies only with --download"
    )
    with support.ArchiveServer(folder) as server:
        mirror = f"--download_mirror={server.url}"
        bad = tmp_path / "BAD"
        bad.write_text(support.sha256sums(folder).replace("dev.tgz", "other.tgz"))
        result = warm_python.run(
            [*command, "--download", mirror, f"--download_checksums={bad}"],
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == (
            f"t2t_lite.datagen: {bad}: has no line for dev.tgz; add its sha256 (sha256sum "
            "writes the lines)"
        )
        checksums = f"--download_checksums={folder / 'SHA256SUMS'}"
        result = warm_python.run(
            [*command, "--download", mirror, checksums], capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"datagen: download test-full.tgz: started (from {server.url}/test-full.tgz)" in (
        result.stderr
    )
    assert "wmt14_ende: generated" in result.stdout
    test_pairs = len(support.test_lines(shared_data, "de")[0])
    assert f"  test: {test_pairs:,} examples in 1 shards" in result.stdout


@pytest.mark.slow
@pytest.mark.parametrize("module", ["datagen", "trainer"])
def test_help_lists_the_download_flags(module):
    result = warm_python.run(
        [sys.executable, "-m", f"t2t_lite.{module}", "--help"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    listed = result.stdout.replace("--[no]", "--")
    for flag in ("--download:", "--download_mirror:", "--download_checksums:", "--vocab_size:"):
        assert f"\n  {flag}" in listed, flag


@pytest.mark.slow
def test_trainer_refuses_download_flags_without_generate_data(tmp_path):
    result = warm_python.run(
        [
            sys.executable, "-m", "t2t_lite.trainer", "--problem=wmt14_ende", "--download",
            f"--data_dir={tmp_path / 'data'}", f"--output_dir={tmp_path / 'run'}",
        ],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "t2t_lite.trainer: --download applies only with --generate_data"
    )
    assert not (tmp_path / "run").exists()

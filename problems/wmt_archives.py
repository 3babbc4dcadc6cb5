"""The WMT14 corpora read straight from the archives WMT distributes, unchanged.

A raw folder holds the archives under their published names (see `ARCHIVES`); each
language pair reads these members (`LAYOUTS`), in the order of the names they have once
extracted, which is the order `RawCorpus` reads the extracted files in:

    train  training-parallel-commoncrawl.tgz   commoncrawl.de-en.{en,de}
           training-parallel-europarl-v7.tgz   training/europarl-v7.de-en.{en,de}
           training-giga-fren.tar (En-Fr)      giga-fren.release2.fixed.{en,fr}.gz
           training-parallel-nc-v9.tgz         training/news-commentary-v9.de-en.{en,de}
           training-parallel-un.tgz (En-Fr)    un/undoc.2000.fr-en.{en,fr}
    dev    dev.tgz                             dev/newstest2013.{en,de}
    test   test-full.tgz                       test-full/newstest2014-deen-src.en.sgm,
                                               test-full/newstest2014-deen-ref.de.sgm

(`fr-en` and `fren` for En-Fr.) Members are read as streams, never extracted: each side
of a pair opens the archive on its own and walks to its member, so memory stays bounded
whatever the archive's size. The test set's SGML is read by `sgml`. A missing archive, a
missing member and a damaged archive raise `DataError` naming the file and what to do.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gzip
import io
import os
import tarfile
import zlib

from t2t_lite.problems import sgml
from t2t_lite.problems.corpus import DataError, numbered_lines
from t2t_lite.problems.download import digest_of
from t2t_lite.problems.progress import LOGGER


@dataclasses.dataclass(frozen=True)
class Archive:
    """One file as WMT publishes it; `sha256` or `md5` is what a download is checked against."""

    name: str
    url: str
    size: int | None
    sha256: str | None
    md5: str | None = None


# URLs, sizes and sha256 as TensorFlow Datasets 4.9 records them in
# tensorflow_datasets/url_checksums/wmt14_translate.txt (and wmt_t2t_translate.txt for the
# giga-fren and UN archives). TFDS takes newstest2013 from WMT19's dev.tgz, which holds
# the same dev/newstest2013.* files as WMT14's. No sha256 is published for test-full.tgz:
# its md5 is the one sacreBLEU 2.x records for "wmt14/full" (sacrebleu/dataset/__init__.py).
ARCHIVES = {
    archive.name: archive
    for archive in (
        Archive(
            "training-parallel-commoncrawl.tgz",
            "http://www.statmt.org/wmt13/training-parallel-commoncrawl.tgz",
            918_311_367,
            "c7a74e2ea01ac6c920123108627e35278d4ccb5701e15428ffa34de86fa3a9e5",
        ),
        Archive(
            "training-parallel-europarl-v7.tgz",
            "http://www.statmt.org/wmt13/training-parallel-europarl-v7.tgz",
            657_632_379,
            "0224c7c710c8a063dfd893b0cc0830202d61f4c75c17eb8e31836103d27d96e7",
        ),
        Archive(
            "training-parallel-nc-v9.tgz",
            "http://www.statmt.org/wmt14/training-parallel-nc-v9.tgz",
            80_418_416,
            "cb8953f292298e6877ae433c98912b927cb0766b303f4540512ddd286c748485",
        ),
        Archive(
            "training-parallel-un.tgz",
            "http://www.statmt.org/wmt13/training-parallel-un.tgz",
            2_365_634_246,
            "29141b5c1eba149a94f7a59d3b1a834b2e47fe0f8758d68dcd77a3d3f497ee47",
        ),
        Archive(
            "training-giga-fren.tar",
            "http://www.statmt.org/wmt10/training-giga-fren.tar",
            2_595_102_720,
            "3ff8319f6919393520559bfbc7ad6a747ec81b3abc7be9993b338d4b017b4d9a",
        ),
        Archive(
            "dev.tgz",
            "http://data.statmt.org/wmt19/translation-task/dev.tgz",
            38_654_961,
            "7a7deccf82ebb05ba508dba5eb21356492224e8f630ec4f992132b029b4b25e7",
        ),
        Archive(
            "test-full.tgz",
            "https://statmt.org/wmt14/test-full.tgz",
            None,
            None,
            md5="a8cd784e006feb32ac6f3d9ec7eb389a",
        ),
    )
}


@dataclasses.dataclass(frozen=True)
class Member:
    """A line-aligned (or SGML) pair of members of one archive."""

    archive: str
    source: str
    target: str
    stem: str  # the files' name once extracted, without the language suffix
    sgml: bool = False


def _news_pair(other: str) -> dict:
    """Split -> [Member] of English and `other` (de or fr), in extracted-name order."""
    pair, short = f"{other}-en", f"{other}en"
    train = [
        Member(
            "training-parallel-commoncrawl.tgz",
            f"commoncrawl.{pair}.en",
            f"commoncrawl.{pair}.{other}",
            f"commoncrawl.{pair}",
        ),
        Member(
            "training-parallel-europarl-v7.tgz",
            f"training/europarl-v7.{pair}.en",
            f"training/europarl-v7.{pair}.{other}",
            f"europarl-v7.{pair}",
        ),
        Member(
            "training-parallel-nc-v9.tgz",
            f"training/news-commentary-v9.{pair}.en",
            f"training/news-commentary-v9.{pair}.{other}",
            f"news-commentary-v9.{pair}",
        ),
    ]
    if other == "fr":  # The paper's 36M En-Fr pairs include the UN and 10^9 corpora.
        train += [
            Member(
                "training-giga-fren.tar",
                "giga-fren.release2.fixed.en.gz",
                "giga-fren.release2.fixed.fr.gz",
                "giga-fren.release2.fixed",
            ),
            Member(
                "training-parallel-un.tgz",
                "un/undoc.2000.fr-en.en",
                "un/undoc.2000.fr-en.fr",
                "undoc.2000.fr-en",
            ),
        ]
    return {
        "train": sorted(train, key=lambda member: member.stem),
        "dev": [
            Member("dev.tgz", "dev/newstest2013.en", f"dev/newstest2013.{other}", "newstest2013")
        ],
        "test": [
            Member(
                "test-full.tgz",
                f"test-full/newstest2014-{short}-src.en.sgm",
                f"test-full/newstest2014-{short}-ref.{other}.sgm",
                "newstest2014",
                sgml=True,
            )
        ],
    }


LAYOUTS = {("en", "de"): _news_pair("de"), ("en", "fr"): _news_pair("fr")}


def archives_of(languages: tuple) -> list:
    """The `Archive`s a language pair reads, each once, in reading order."""
    names = [m.archive for members in LAYOUTS[languages].values() for m in members]
    return [ARCHIVES[name] for name in dict.fromkeys(names)]


def has_archives(raw_dir: str, languages: tuple) -> bool:
    """Whether `raw_dir` holds any archive of the pair (complete or partly downloaded)."""
    return any(
        os.path.exists(os.path.join(raw_dir, archive.name + suffix))
        for archive in archives_of(languages)
        for suffix in ("", ".part")
    )


def missing_message(raw_dir: str, missing: list) -> str:
    """One line naming the missing archives, their sizes and sources, and what to do."""
    listed = ", ".join(
        f"{archive.name} ({_size(archive.size)}{archive.url})"
        + (
            " partly downloaded"
            if os.path.exists(os.path.join(raw_dir, archive.name + ".part"))
            else ""
        )
        for archive in missing
    )
    return (
        f"{raw_dir}: WMT14 archive{'s' if len(missing) > 1 else ''} not found: {listed}; rerun "
        f"with --download to fetch {'them' if len(missing) > 1 else 'it'} (a partial download "
        f"resumes), or download by hand into {raw_dir}"
    )


def _size(size: int | None) -> str:
    return f"{size / 1e6:,.1f} MB from " if size else ""


class ArchiveCorpus:
    """The WMT14 corpus of one language pair, read from WMT's archives in `raw_dir`.

    Args:
        raw_dir: the folder holding the archives.
        languages: (source, target) language codes as `LAYOUTS` keys them.

    Raises:
        DataError: when an archive of the pair is missing, naming every missing one.
    """

    def __init__(self, raw_dir: str, languages: tuple):
        self.raw_dir = raw_dir
        self.layout = LAYOUTS[languages]
        self.splits = tuple(self.layout)
        self.archives = archives_of(languages)
        missing = [a for a in self.archives if not os.path.isfile(self._path(a.name))]
        if missing:
            raise DataError(missing_message(raw_dir, missing))

    def _path(self, name: str) -> str:
        return os.path.join(self.raw_dir, name)

    def identity(self) -> dict:
        """The archives' content hashes and the members read: what the fingerprint covers.

        An archive whose sha256 differs from the published file's is read all the same
        (a gzip stream is not checked end to end when only some members are read), with
        a warning that says so.
        """
        digests = [[a.name, digest_of(self._path(a.name))] for a in self.archives]
        for archive, (_, digest) in zip(self.archives, digests):
            if archive.sha256 and digest != archive.sha256:
                LOGGER.warning(
                    "datagen: %s: sha256 %s is not the published file's %s; reading it anyway "
                    "(if it is not a build of your own, remove it and rerun with --download)",
                    self._path(archive.name), digest, archive.sha256,
                )  # fmt: skip
        return {
            "archives": digests,
            "members": {
                split: [[m.archive, m.source, m.target] for m in members]
                for split, members in self.layout.items()
            },
        }

    def describe(self, split: str) -> str:
        return ", ".join(
            f"{self._path(m.archive)}:{m.source} + {m.target}" for m in self.layout[split]
        )

    def count(self, split: str) -> int:
        """Pairs of `split`, from the lines (or segments) of the source members."""
        total = 0
        for member in self.layout[split]:
            lines = member_lines(self._path(member.archive), member.source)
            if member.sgml:
                total += sgml.count_segments(lines)
            else:
                total += sum(1 for _ in lines)
        return total

    def pairs(self, split: str):
        """Yields (origin, line number, source text, target text) of every member pair."""
        for member in self.layout[split]:
            path = self._path(member.archive)
            source = member_lines(path, member.source)
            target = member_lines(path, member.target)
            where = (f"{path}:{member.source}", f"{path}:{member.target}")
            if member.sgml:
                for src, tgt in sgml.parallel_segments(source, target, *where):
                    yield where[0], src.line, src.text, tgt.text
            else:
                yield from _aligned(source, target, *where)


def _aligned(source, target, source_where: str, target_where: str):
    """(origin, line, source, target) of two line iterators that must be equally long."""
    number = 0
    for number, source_text in source:  # noqa: B007 (used after the loop)
        partner = next(target, None)
        if partner is None:
            raise DataError(
                f"{source_where}:{number}: line has no partner: {target_where} ends after "
                f"{number - 1} lines; the archive's members must be line-aligned: re-download it"
            )
        yield source_where, number, source_text, partner[1]
    if next(target, None) is not None:
        raise DataError(
            f"{target_where}:{number + 1}: line has no partner: {source_where} ends after "
            f"{number} lines; the archive's members must be line-aligned: re-download it"
        )


def member_lines(path: str, member: str):
    """Yields (line number from 1, text) of one member of a tar archive, as a stream.

    Members named `.gz` are decompressed too. Lines end at `\\n` (a `\\r` before it is
    dropped), as `corpus.read_lines` reads extracted files.

    Raises:
        DataError: naming the archive (and member and line) when it cannot be opened, has
            no such member, is damaged or truncated, or holds invalid UTF-8.
    """
    number = 0
    try:
        with _open_member(path, member) as stream:
            for number, text in numbered_lines(stream, f"{path}:{member}"):  # noqa: B007
                yield number, text
    except (tarfile.TarError, OSError, EOFError, zlib.error) as error:
        where = f" after line {number} of {member}" if number else f" reading {member}"
        raise DataError(f"{path}: damaged archive ({error}{where}); {_redo(path)}") from None


@contextlib.contextmanager
def _open_member(path: str, member: str):
    """The binary stream of `member`; DataError when the archive lacks it."""
    with tarfile.open(path, "r:*") as archive:
        for info in iter(archive.next, None):
            if info.name.removeprefix("./") == member and info.isfile():
                stream = archive.extractfile(info)
                if member.endswith(".gz"):
                    stream = gzip.GzipFile(fileobj=stream)
                # Lines come from 1 MiB blocks: fewer trips through tarfile's and gzip's
                # layers than with their own 8 KiB buffers.
                with io.BufferedReader(stream, buffer_size=1 << 20) as stream:
                    yield stream
                return
    raise DataError(
        f"{path}: has no member {member}, so it is not the WMT release this problem reads; "
        f"{_redo(path)}"
    )


def _redo(path: str) -> str:
    archive = ARCHIVES.get(os.path.basename(path))
    source = f" from {archive.url}" if archive else ""
    return (
        f"remove it and rerun with --download to fetch it again (checked against its "
        f"recorded checksum), or download it by hand{source}"
    )

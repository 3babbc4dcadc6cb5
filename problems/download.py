"""Downloads of published corpus files: resumable, checked, reported as they go.

`fetch_all` brings each file into a folder under its own name unless it is there already
(then its checksum is checked). A file is received as `NAME.part` and renamed to `NAME`
only once its size and checksum match what is recorded for it, so nothing half-received
or different is ever read as the corpus. A transfer that breaks off is resumed from the
bytes received (an HTTP Range request), a few times in a run and again by the next run,
which finds the `.part`. A file whose checksum is wrong is removed.

Progress goes to datagen's log (`progress`):

    datagen: download dev.tgz: 12,582,912 / 38,654,961 bytes (33%), 4,194,304/s, ETA 6 s

A mirror (`Source.mirror`) serves the files under their names at another base URL
(`http://host/wmt/dev.tgz`, or `file:///srv/wmt/dev.tgz`); a checksums file
(`Source.checksums`, as `sha256sum` writes it) replaces the recorded digests for a mirror
that holds other builds of the files.
"""

from __future__ import annotations

import dataclasses
import hashlib
import http.client
import os
import time
import urllib.error
import urllib.request

from t2t_lite.problems.corpus import DataError
from t2t_lite.problems.progress import Progress

CHUNK = 1 << 20


class DownloadError(DataError):
    """A file that could not be fetched or checked; the message names URL, file and remedy."""


@dataclasses.dataclass(frozen=True)
class Source:
    """Where downloads come from and what they are checked against.

    Attributes:
        mirror: base URL that serves every file under its own name, instead of the
            publisher's URL; None for the publisher's.
        checksums: path of a file of `SHA256  NAME` lines (`sha256sum`'s output) whose
            digests replace the recorded ones (and whose files then have no size check).
        attempts: transfers of one file in a run before giving up (each resumes).
        timeout: seconds a connection may stay silent.
        pause: seconds before the second attempt, doubling for each further one.
    """

    mirror: str | None = None
    checksums: str | None = None
    attempts: int = 3
    timeout: float = 60.0
    pause: float = 2.0

    def url(self, file) -> str:
        return f"{self.mirror.rstrip('/')}/{file.name}" if self.mirror else file.url


def read_checksums(path: str) -> dict:
    """{file name: sha256} of a `sha256sum`-style file (`HEX  NAME` or `HEX *NAME`).

    Raises:
        DownloadError: naming the file and line when a line is not of that form.
    """
    digests = {}
    try:
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                if not line.strip() or line.startswith("#"):
                    continue
                parts = line.split(maxsplit=1)
                digest = parts[0].lower()
                if len(parts) != 2 or len(digest) != 64 or set(digest) - set("0123456789abcdef"):
                    raise DownloadError(
                        f"{path}:{number}: expected `SHA256  NAME` as sha256sum writes it, got "
                        f"{line.strip()[:80]!r}"
                    )
                digests[os.path.basename(parts[1].strip().lstrip("*"))] = digest
    except OSError as error:
        raise DownloadError(f"{path}: cannot read the checksums file ({error})") from None
    return digests


def fetch_all(files, folder: str, source: Source, progress: Progress | None = None) -> None:
    """Brings every file of `files` (objects with name, url, size, sha256, md5) into `folder`.

    Raises:
        DownloadError: for the first file that cannot be fetched or does not match its
            checksum: one line naming the URL and the file, and what to do.
    """
    progress = progress or Progress()
    os.makedirs(folder, exist_ok=True)
    override = read_checksums(source.checksums) if source.checksums else None
    for file in files:
        if override is not None:
            if file.name not in override:
                raise DownloadError(
                    f"{source.checksums}: has no line for {file.name}; add its sha256 "
                    "(sha256sum writes the lines)"
                )
            file = dataclasses.replace(file, size=None, sha256=override[file.name], md5=None)
        path = os.path.join(folder, file.name)
        url = source.url(file)
        if os.path.isfile(path):
            _check_existing(path, file, url)
            progress.say(f"download {file.name}: present and checked ({path})")
            continue
        _receive(url, path, file, source, progress)


def _check_existing(path: str, file, url: str) -> None:
    problem = _mismatch(path, file)
    if problem:
        raise DownloadError(
            f"{path}: already there but {problem}, so it is not the file of {url}; remove it "
            "and rerun with --download to fetch it again"
        )


def _receive(url: str, path: str, file, source: Source, progress: Progress) -> None:
    """Fetches `url` into `path` through `path.part`, resuming; checks it; renames it."""
    part = path + ".part"
    reason = ""
    for attempt in range(source.attempts):
        if attempt:
            time.sleep(source.pause * 2 ** (attempt - 1))  # A busy server gets a moment.
        try:
            _transfer(url, part, file, source.timeout, progress)
            break
        except urllib.error.HTTPError as error:
            if error.code == 416 and os.path.exists(part):
                break  # Nothing past what we hold: the .part is complete; the check decides.
            raise DownloadError(
                f"{url}: HTTP {error.code} {error.reason} for {file.name}; {_by_hand(path)}"
            ) from None
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            reason = str(getattr(error, "reason", "") or error) or type(error).__name__
    else:
        held = os.path.getsize(part) if os.path.exists(part) else 0
        kept = (
            f"{part} keeps the {held:,} bytes received and a rerun with --download resumes "
            "from there"
            if held
            else "nothing was received"
        )
        raise DownloadError(
            f"{url}: download of {file.name} failed after {source.attempts} attempts ({reason}); "
            f"{kept}; {_by_hand(path)}"
        )
    problem = _mismatch(part, file)
    if problem:
        os.remove(part)  # Resuming a wrong file cannot make it right.
        raise DownloadError(
            f"{url}: the file received {problem}; removed it. Rerun with --download to fetch it "
            f"again; {_by_hand(path)}"
        )
    os.replace(part, path)
    progress.say(f"download {file.name}: checked and saved as {path}")


def _transfer(url: str, part: str, file, timeout: float, progress: Progress) -> None:
    """One HTTP(S) or file transfer into `part`, continuing it where the server allows."""
    held = os.path.getsize(part) if os.path.exists(part) else 0
    headers = {"Range": f"bytes={held}-"} if held else {}
    request = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(request, timeout=timeout) as response:
        resumed = held and getattr(response, "status", None) == 206
        if resumed and not response.headers.get("Content-Range", "").startswith(f"bytes {held}-"):
            raise http.client.HTTPException(f"unexpected Content-Range for a resumed {file.name}")
        if not resumed:
            held = 0  # The server sends the whole file: start over.
        length = response.headers.get("Content-Length")
        remaining = int(length) if length and length.isdigit() else None
        if remaining is None and file.size:
            remaining = file.size - held
        note = f"from {url}" + (f", resuming after {held:,} bytes" if held else "")
        with (
            open(part, "ab" if held else "wb") as out,
            progress.stage(
                f"download {file.name}", unit="bytes", total=remaining, note=note
            ) as stage,
        ):
            received, start = 0, time.perf_counter()
            while chunk := response.read(CHUNK):
                out.write(chunk)
                received += len(chunk)
                stage.update(received)
            seconds = time.perf_counter() - start
            stage.summary = f"{received:,} bytes, {received / max(seconds, 1e-9) / 1e6:,.1f} MB/s"
        if remaining is not None and received < remaining:
            raise http.client.IncompleteRead(b"", remaining - received)


def _mismatch(path: str, file) -> str:
    """What differs between the file at `path` and the record of `file`; "" when it matches."""
    size = os.path.getsize(path)
    if file.size is not None and size != file.size:
        return f"has {size:,} bytes, not the {file.size:,} recorded"
    for algorithm in ("sha256", "md5"):
        expected = getattr(file, algorithm, None)
        if expected:
            digest = digest_of(path, algorithm)
            return (
                ""
                if digest == expected
                else f"has {algorithm} {digest}, not the {expected} recorded"
            )
    return ""


_DIGESTS: dict = {}


def digest_of(path: str, algorithm: str = "sha256") -> str:
    """The hex digest of a file, computed once per file version in this process.

    A version is the file's identity and state (device, inode, size, modification time),
    which a rename keeps: the check of a finished download also serves the data
    fingerprint of the same run.
    """
    status = os.stat(path)
    key = (algorithm, status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns)
    if key not in _DIGESTS:
        digest = hashlib.new(algorithm)
        with open(path, "rb") as f:
            while block := f.read(CHUNK):
                digest.update(block)
        _DIGESTS[key] = digest.hexdigest()
    return _DIGESTS[key]


def _by_hand(path: str) -> str:
    return f"or download {os.path.basename(path)} by hand into {os.path.dirname(path)}"

"""Small WMT14 archives in the real layouts, built from real news sentences at test time.

Every archive has the published name, compression (tar.gz, or a plain tar holding .gz
files for giga-fren) and member paths, with the neighbouring language pairs' members
beside the ones a pair reads, so that a reader picking the wrong member is caught. The
test set is SGML as WMT writes it: `<srcset>`/`<refset>`, several `<doc>`s, one `<seg>`
per line, `&`, `<`, `>` and `"` written as entities.

`build(folder, shared_data, other)` writes the archives of En-`other` and returns the
same corpus as extracted text: {file name: lines}, named as `wmt.py` documents.
"""

from __future__ import annotations

import gzip
import hashlib
import http.server
import io
import re
import socket
import tarfile
import threading
from pathlib import Path

# Which real news set stands in for which training corpus, and how many lines of it.
TRAIN_SOURCES = {
    "commoncrawl": ("news-test2008", 150),
    "europarl-v7": ("newstest2009", 150),
    "news-commentary-v9": ("newstest2010", 120),
    "giga-fren.release2.fixed": ("newstest2011", 120),
    "undoc.2000": ("newssyscomb2009", 100),
}
DEV_LINES, TEST_LINES, SEGMENTS_PER_DOC = 40, 23, 7


def news(shared_data: Path, stem: str, other: str, count: int) -> tuple:
    """(English lines, `other` lines) of a real news set, the first `count` of each."""
    folder = shared_data / "wmt_news_2008_2012"
    return tuple(
        (folder / f"{stem}.en-{other}.{language}").read_text(encoding="utf-8").splitlines()[:count]
        for language in ("en", other)
    )


def test_lines(shared_data: Path, other: str) -> tuple:
    """Real newstest2012 pairs standing in for newstest2014: the first lines, and the pairs
    with `&`, a quote, or odd whitespace (which the SGML must escape or the reader collapse)."""
    en, xx = news(shared_data, "newstest2012", other, 4000)
    odd = [i for i, pair in enumerate(zip(en, xx)) if re.search(r"&|\xa0|  ", "".join(pair))]
    quoted = [i for i, pair in enumerate(zip(en, xx)) if '"' in "".join(pair)][:5]
    chosen = sorted(set(range(TEST_LINES - len(odd) - 5)) | set(odd) | set(quoted))
    return [en[i] for i in chosen], [xx[i] for i in chosen]


def sacrebleu_text(line: str) -> str:
    """A segment as sacreBLEU's --echo writes it: whitespace runs collapsed, ends stripped."""
    return re.sub(r"\s+", " ", line.strip())


def escape(text: str) -> str:
    return (
        text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace('"', "&quot;")
    )


def sgml_file(lines: list, kind: str, language: str, pair: str) -> bytes:
    """WMT's SGML for `lines`: srcset or refset, docs of SEGMENTS_PER_DOC segments."""
    head = (
        '<srcset setid="newstest2014" srclang="any">'
        if kind == "src"
        else f'<refset setid="newstest2014" srclang="any" trglang="{language}">'
    )
    out = [head]
    for start in range(0, len(lines), SEGMENTS_PER_DOC):
        out.append(
            f'<doc sysid="ref" docid="{start // SEGMENTS_PER_DOC + 1}-{pair}" genre="news" origlang="en">'
        )
        out.append("<p>")
        for number, line in enumerate(lines[start : start + SEGMENTS_PER_DOC], 1):
            out.append(f'<seg id="{number}">{escape(line)}</seg>')
        out.append("</p>")
        out.append("</doc>")
    out.append(f"</{'srcset' if kind == 'src' else 'refset'}>")
    return ("\n".join(out) + "\n").encode("utf-8")


def write_tar(path: Path, members: dict, compressed: bool = True) -> None:
    """A tar (gzipped unless `compressed` is False) of {member path: bytes}, with folders."""
    with tarfile.open(path, "w:gz" if compressed else "w") as archive:
        folders = sorted({name.rsplit("/", 1)[0] for name in members if "/" in name})
        for folder in folders:
            info = tarfile.TarInfo(folder)
            info.type = tarfile.DIRTYPE
            info.mode = 0o755
            archive.addfile(info)
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            archive.addfile(info, io.BytesIO(data))


def _text(lines: list) -> bytes:
    return ("\n".join(lines) + "\n").encode("utf-8")


def build(folder: Path, shared_data: Path, other: str) -> dict:
    """Writes the En-`other` archives into `folder`; returns {extracted file name: lines}."""
    folder.mkdir(parents=True, exist_ok=True)
    pair, short = f"{other}-en", f"{other}en"
    neighbour = "cs-en"  # a pair nobody here reads, as the real archives have
    extracted = {}

    def train(stem: str) -> tuple:
        source_set, count = TRAIN_SOURCES[stem]
        english, foreign = news(shared_data, source_set, other, count)
        return english, foreign

    def record(stem: str, english: list, foreign: list) -> None:
        extracted[f"{stem}.en"], extracted[f"{stem}.{other}"] = english, foreign

    en, xx = train("commoncrawl")
    record(f"commoncrawl.{pair}", en, xx)
    write_tar(
        folder / "training-parallel-commoncrawl.tgz",
        {
            f"commoncrawl.{neighbour}.cs": _text(xx[:5]),
            f"commoncrawl.{neighbour}.en": _text(en[:5]),
            f"commoncrawl.{pair}.annotation": _text(["crawl"] * len(en)),
            f"commoncrawl.{pair}.{other}": _text(xx),  # the foreign side first, on purpose
            f"commoncrawl.{pair}.en": _text(en),
        },
    )
    en, xx = train("europarl-v7")
    record(f"europarl-v7.{pair}", en, xx)
    write_tar(
        folder / "training-parallel-europarl-v7.tgz",
        {
            f"training/europarl-v7.{neighbour}.cs": _text(xx[:5]),
            f"training/europarl-v7.{neighbour}.en": _text(en[:5]),
            f"training/europarl-v7.{pair}.en": _text(en),
            f"training/europarl-v7.{pair}.{other}": _text(xx),
        },
    )
    en, xx = train("news-commentary-v9")
    record(f"news-commentary-v9.{pair}", en, xx)
    write_tar(
        folder / "training-parallel-nc-v9.tgz",
        {
            f"training/news-commentary-v9.{neighbour}.cs": _text(xx[:5]),
            f"training/news-commentary-v9.{neighbour}.en": _text(en[:5]),
            f"training/news-commentary-v9.{pair}.{other}": _text(xx),
            f"training/news-commentary-v9.{pair}.en": _text(en),
        },
    )
    if other == "fr":
        en, xx = train("giga-fren.release2.fixed")
        extracted["giga-fren.release2.fixed.en.gz"] = en
        extracted["giga-fren.release2.fixed.fr.gz"] = xx
        write_tar(
            folder / "training-giga-fren.tar",
            {
                "giga-fren.release2.fixed.en.gz": gzip.compress(_text(en), mtime=0),
                "giga-fren.release2.fixed.fr.gz": gzip.compress(_text(xx), mtime=0),
            },
            compressed=False,
        )
        en, xx = train("undoc.2000")
        record("undoc.2000.fr-en", en, xx)
        write_tar(
            folder / "training-parallel-un.tgz",
            {
                "un/undoc.2000.es-en.es": _text(xx[:5]),
                "un/undoc.2000.es-en.en": _text(en[:5]),
                "un/undoc.2000.fr-en.en": _text(en),
                "un/undoc.2000.fr-en.fr": _text(xx),
            },
        )
    dev = {
        language: (shared_data / "wmt13_newstest2013" / f"newstest2013.{language}.raw")
        .read_text(encoding="utf-8")
        .splitlines()[:DEV_LINES]
        for language in ("en", "de", "fr")
    }
    record("newstest2013", dev["en"], dev[other])
    write_tar(
        folder / "dev.tgz",
        {
            **{f"dev/newstest2013.{language}": _text(dev[language]) for language in dev},
            "dev/newstest2013-src.en.sgm": sgml_file(dev["en"], "src", "en", "en"),
            "dev/newstest2012.en": _text(dev["en"][:3]),
        },
    )
    en, xx = test_lines(shared_data, other)
    record("newstest2014", [sacrebleu_text(line) for line in en], [sacrebleu_text(x) for x in xx])
    write_tar(
        folder / "test-full.tgz",
        {
            f"test-full/newstest2014-{short}-src.{other}.sgm": sgml_file(xx, "src", other, short),
            f"test-full/newstest2014-{short}-src.en.sgm": sgml_file(en, "src", "en", short),
            f"test-full/newstest2014-{short}-ref.en.sgm": sgml_file(en, "ref", "en", short),
            f"test-full/newstest2014-{short}-ref.{other}.sgm": sgml_file(xx, "ref", other, short),
            "test-full/newstest2014-csen-src.en.sgm": sgml_file(en[:3], "src", "en", "csen"),
        },
    )
    return extracted


def write_extracted(folder: Path, extracted: dict) -> None:
    """The corpus as extracted text files (gzipped where the name says .gz)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, lines in extracted.items():
        data = _text(lines)
        (folder / name).write_bytes(gzip.compress(data, mtime=0) if name.endswith(".gz") else data)


def sha256sums(folder: Path) -> str:
    """`sha256sum`'s lines for the archives in `folder`."""
    return "".join(
        f"{hashlib.sha256(path.read_bytes()).hexdigest()}  {path.name}\n"
        for path in sorted(folder.iterdir())
        if path.suffix in (".tgz", ".tar")
    )


class _Handler(http.server.BaseHTTPRequestHandler):
    """GET of the server's folder by file name, with `Range: bytes=N-` and planned drops."""

    def do_GET(self):  # noqa: N802 (the name http.server calls)
        server = self.server
        name = self.path.removeprefix("/wmt14/")  # The mirror's files are under /wmt14/.
        server.requests.append((name, self.headers.get("Range")))
        path = server.folder / name
        if "/" in name or not path.is_file():
            self.send_error(404)
            return
        data = path.read_bytes()
        start = 0
        wanted = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if wanted:
            start = int(wanted.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        cut = server.drops.get(name)
        if cut and cut[1] > 0:
            cut[1] -= 1  # The connection breaks after cut[0] bytes of the body.
            self.wfile.write(body[: cut[0]])
            self.wfile.flush()
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class ArchiveServer:
    """A threading HTTP server on 127.0.0.1 serving `folder`'s files by name.

    `drops[name] = [bytes, times]` breaks the next `times` transfers of `name` after
    `bytes` bytes; `requests` lists (name, Range header) of every GET.
    """

    def __init__(self, folder: Path):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self.httpd.folder = folder
        self.httpd.requests = []
        self.httpd.drops = {}
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/wmt14"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def requests(self) -> list:
        return self.httpd.requests

    @property
    def drops(self) -> dict:
        return self.httpd.drops

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=30)

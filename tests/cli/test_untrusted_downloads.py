"""Issue 25.6: `devctl infer download` takes apart a tar stream that a job (or anyone who can
write its volume) made: untrusted input.

Crafted streams go through devctl.transfer.download as the exec WebSocket delivers them (a
stand-in for the API server's socket: channel 1 frames, then the Status): CVE-2025-4517's
symlink chain that defeats tarfile's ``data`` filter on this machine's Python 3.11.7 (a file
written outside the directory), the issue's ``z -> .`` plus a long ``z/z/.../../..`` link,
absolute and ``..`` members, hard links out, devices and FIFOs, a stream past its limits.  Then
the CLI against kubesim: links skipped and reported, --links, --max-size."""
from __future__ import annotations

import io
import json
import os
import tarfile

import pytest
from websocket import ABNF

from devctl import transfer


# -- a tar stream, as the exec WebSocket delivers it -------------------------------------------------
class _Frame:
    def __init__(self, data):
        self.data = data


class _Socket:
    """recv_data_frame() of websocket-client: stdout in 64 KiB frames, then the Status."""

    def __init__(self, chunks):
        self.chunks, self.status_sent = chunks, False

    def recv_data_frame(self, _control):
        chunk = next(self.chunks, None)
        if chunk is not None:
            return ABNF.OPCODE_BINARY, _Frame(b"\x01" + chunk)
        if not self.status_sent:
            self.status_sent = True
            return ABNF.OPCODE_BINARY, _Frame(b"\x03" + json.dumps({"status": "Success"}).encode())
        return ABNF.OPCODE_CLOSE, _Frame(b"")


class _Client:
    subprotocol = "v5.channel.k8s.io"

    def __init__(self, chunks):
        self.sock = _Socket(chunks)

    def close(self):
        pass


class _Api:
    def __init__(self, chunks):
        self.client = _Client(chunks)

    def exec_stream(self, namespace, pod, command, stdin=False):
        assert command[:2] == ["tar", "-c"]
        return self.client


def _chunks(data, size=1 << 16):
    return iter([data[i:i + size] for i in range(0, len(data), size)])


def tar(*members):
    """A tar stream of (TarInfo, bytes | None) pairs."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for info, data in members:
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def member(name, kind=tarfile.REGTYPE, link="", data=None):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, link
    if kind == tarfile.DIRTYPE:
        info.mode = 0o755
    return info, (data if data is not None else (b"x\n" if kind == tarfile.REGTYPE else None))


def download(stream, dest, capsys, **extractor):
    """([(skipped member, why)] as reported on stderr, the error or None) of downloading ``stream``
    into ``dest``; with ``extractor`` keyword arguments, through an Extractor made with them."""
    api = _Api(stream if not isinstance(stream, bytes) else _chunks(stream))
    kwargs = {"extractor": transfer.Extractor(str(dest), **extractor)} if extractor else {}
    error = None
    try:
        transfer.download(api, "ns", "pod", "/artifacts", str(dest),
                          progress=transfer.Progress("downloaded", out=lambda text: None, tty=False), **kwargs)
    except transfer.DevctlError as exc:
        error = str(exc)
    lines = capsys.readouterr().err.splitlines()
    return [tuple(line[len("warning: skipped "):].split(": ", 1)) for line in lines
            if line.startswith("warning: skipped ")], error


def files_under(root):
    out = set()
    for base, dirs, files in os.walk(root):
        out.update(os.path.relpath(os.path.join(base, n), root) for n in dirs + files)
    return out


def cve_2025_4517():
    """The symlink chain of CVE-2025-4517: each level a 247-character directory and a one-letter
    link to it, then a link climbing 16 levels from the end of a path longer than PATH_MAX
    (os.path.realpath gives up there, so the filter sees it inside), ``escape`` through it to the
    directory above the destination, and a file written through ``escape``."""
    comp, steps, path, members = "d" * 247, "abcdefghijklmnop", "", []
    for step in steps:
        members.append(member(os.path.join(path, comp), tarfile.DIRTYPE))
        members.append(member(os.path.join(path, step), tarfile.SYMTYPE, comp))
        path = os.path.join(path, comp)
    chain = os.path.join("/".join(steps), "l" * 254)
    members.append(member(chain, tarfile.SYMTYPE, "../" * len(steps)))
    members.append(member("escape", tarfile.SYMTYPE, chain + "/../.."))
    members.append(member("escape/planted", data=b"pwned\n"))
    members.append(member("results/output.json", data=b"{}\n"))
    return tar(*members)


# (case, stream, what must be skipped, what must be written)
HOSTILE = [
    ("cve-2025-4517", cve_2025_4517(), {"escape"}, {"results/output.json"}),
    ("z-dot-and-long-climb", tar(member("z", tarfile.SYMTYPE, "."),
                                 member("z/" * 30 + "up", tarfile.SYMTYPE, "z/" * 30 + "../" * 31),
                                 member("out", tarfile.SYMTYPE, "z/" * 30 + "up/.."),
                                 member("out/planted"), member("ok.txt")),
     {"z", "z/" * 30 + "up", "out"}, {"ok.txt"}),
    ("absolute", tar(member("/tmp/planted-abs"), member("ok.txt")), {"/tmp/planted-abs"}, {"ok.txt"}),
    ("dotdot", tar(member("../planted"), member("a/../../planted"), member("ok.txt")),
     {"../planted", "a/../../planted"}, {"ok.txt"}),
    ("hardlink-out", tar(member("passwd", tarfile.LNKTYPE, "/etc/passwd"), member("up", tarfile.LNKTYPE, "../x"),
                         member("ok.txt")), {"passwd", "up"}, {"ok.txt"}),
    ("symlink-absolute", tar(member("etc", tarfile.SYMTYPE, "/etc"), member("etc/planted"), member("ok.txt")),
     {"etc"}, {"ok.txt"}),
    ("specials", tar(member("dev", tarfile.CHRTYPE), member("blk", tarfile.BLKTYPE), member("fifo", tarfile.FIFOTYPE),
                     member("ok.txt")), {"dev", "blk", "fifo"}, {"ok.txt"}),
]


@pytest.mark.parametrize("case, stream, skipped, written", HOSTILE, ids=[c[0] for c in HOSTILE])
def test_hostile_streams_write_nothing_outside_and_report_what_they_skip(tmp_path, capsys, case, stream, skipped,
                                                                         written):
    box = tmp_path / "box"  # everything the download may touch: box/outer/inner/dest
    dest = box / "outer" / "inner" / "dest"
    dest.mkdir(parents=True)
    got, error = download(stream, dest, capsys)
    assert error is None, error
    assert files_under(box) - {"outer", "outer/inner", "outer/inner/dest"} == \
        {os.path.join("outer/inner/dest", p) for p in files_under(dest)}  # nothing outside dest
    assert not any(os.path.islink(os.path.join(base, n)) for base, dirs, files in os.walk(dest) for n in dirs + files)
    assert {name for name, _ in got} >= skipped, got
    assert written <= files_under(dest)
    assert all(why for _, why in got)


def test_links_kept_on_request_only_when_they_stay_below(tmp_path, capsys):
    stream = tar(member("data/a.txt", data=b"a\n"), member("same", tarfile.SYMTYPE, "data/a.txt"),
                 member("hard", tarfile.LNKTYPE, "./data/a.txt"), member("z", tarfile.SYMTYPE, "."),
                 member("z/z/z/up", tarfile.SYMTYPE, "../../.."), member("abs", tarfile.SYMTYPE, "/etc/passwd"),
                 member("through/z", tarfile.SYMTYPE, "."), member("z/file-below-a-link"))
    got, error = download(stream, tmp_path / "d", capsys, links=True)
    assert error is None, error
    d = tmp_path / "d"
    assert os.readlink(d / "same") == "data/a.txt" and (d / "same").read_text() == "a\n"
    assert (d / "hard").read_text() == "a\n" and os.stat(d / "hard").st_ino == os.stat(d / "data" / "a.txt").st_ino
    assert os.readlink(d / "z") == "."  # downward only ("."): kept
    assert {name for name, _ in got} == {"z/z/z/up", "abs", "z/file-below-a-link"}, got


def test_a_file_is_never_written_through_a_link_already_in_the_directory(tmp_path, capsys):
    d = tmp_path / "d"
    d.mkdir()
    (d / "old").symlink_to(tmp_path / "victim.txt")  # left by an earlier download or the user
    got, error = download(tar(member("old", data=b"overwritten\n")), d, capsys)
    assert error is None and not (tmp_path / "victim.txt").exists() and [n for n, _ in got] == ["old"]


@pytest.mark.parametrize("limits, text", [
    ({"max_bytes": 1 << 20}, "more than 1.0 MB of files (--max-size)"),
    ({"max_files": 100}, "more than 100 files (--max-files)"),
])
def test_a_stream_past_its_limits_stops_with_one_line(tmp_path, capsys, limits, text):
    if "max_bytes" in limits:  # 64 MiB of one file: stopped at its header, long before its end
        body = tar(member("big.bin", data=b"\0" * (64 << 20)))
    else:
        body = tar(*[member("f%04d" % i) for i in range(5000)])
    stream = _chunks(body)
    got, error = download(stream, tmp_path / "d", capsys, **limits)
    assert error and text in error and "\n" not in error, error
    assert next(stream, None) is not None  # it stopped reading: the rest of the stream is unread


def test_a_stream_longer_than_its_members_declare_stops(tmp_path, capsys):
    """A PAX header of 8 MiB (tarfile reads it into memory) passes the stream's own limit."""
    info = tarfile.TarInfo("x")
    info.pax_headers = {"comment": "y" * (8 << 20)}
    got, error = download(tar((info, b"x")), tmp_path / "d", capsys, max_bytes=1 << 20, max_files=10)
    assert error and "the stream passed" in error, error


# -- the CLI, against kubesim --------------------------------------------------------------------------------
def test_download_skips_and_reports_links_unless_asked(devctl, tmp_path):
    project = tmp_path / "project"
    project.mkdir()
    (project / "README").write_text("mine\n")
    (project / "big.bin").write_bytes(b"\0" * (2 << 20))
    (project / "readme-link").symlink_to("README")
    (project / "data").mkdir()
    (project / "data" / "up").symlink_to("../README")  # inside, but it climbs: never kept
    result = devctl("infer", "create", "links", "--project-dir", str(project), "--input-path", "/artifacts/README",
                    "--gpus", "0")
    assert result.exit_code == 0, result.output
    result = devctl("infer", "download", "links", "--to", str(tmp_path / "plain"))
    assert result.exit_code == 0, result.output
    assert sorted(os.listdir(tmp_path / "plain")) == ["README", "big.bin", "data"]
    assert "warning: skipped ./readme-link: a symbolic link (-> README): use --links to keep links" in result.stderr
    assert "warning: skipped ./data/up: a symbolic link (-> ../README): use --links to keep links" in result.stderr
    result = devctl("infer", "download", "links", "--links", "--to", str(tmp_path / "linked"))
    assert result.exit_code == 0, result.output
    assert os.readlink(tmp_path / "linked" / "readme-link") == "README"
    assert not os.path.lexists(tmp_path / "linked" / "data" / "up")
    assert "warning: skipped ./data/up: a symbolic link (-> ../README) that is absolute or goes up" in result.stderr
    result = devctl("infer", "download", "links", "--max-size", "1Mi", "--to", str(tmp_path / "small"))
    assert result.exit_code == 1
    errors = [line for line in result.output.splitlines() if line.startswith("error")]
    assert len(errors) == 1 and "is too large: more than 1.0 MB of files (--max-size): stopped at ./big.bin" in errors[0]
    result = devctl("infer", "download", "links", "--max-size", "lots")
    assert result.exit_code == 2 and "'lots' is not a size like 500Mi or 2Gi" in result.output

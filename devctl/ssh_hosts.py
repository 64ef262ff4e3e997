"""The block devctl manages at the top of ``~/.ssh/config`` (between the BEGIN and END lines;
everything else in the file is kept as it is): read, written atomically, and the entries of
deleted servers forgotten (``devctl ssh-config`` writes it, ``devctl delete`` forgets)."""
from __future__ import annotations

import os
import re

from .errors import DevctlError

BEGIN = "# BEGIN devctl ssh-config (managed by 'devctl ssh-config'; edits inside are replaced)"
END = "# END devctl ssh-config"


def default_path() -> str:
    return os.path.join(os.path.expanduser("~"), ".ssh", "config")


def split_block(text: str) -> tuple[list[list[str]], str]:
    """(the managed block's entries, each a list of lines starting with its Host line; the
    file without the block)."""
    lines = text.splitlines()
    if BEGIN not in lines:
        return [], text
    start = lines.index(BEGIN)
    if END not in lines[start:]:  # edited by hand: nothing of the file may be lost
        raise ValueError(f"the line {BEGIN!r} has no {END!r} after it: restore it, or remove the block by hand")
    end = lines.index(END, start)
    entries: list[list[str]] = []
    for line in lines[start + 1:end]:
        if line.startswith("Host "):
            entries.append([line])
        elif entries and line.strip():
            entries[-1].append(line)
    rest = lines[:start] + lines[end + 1:]
    while rest and not rest[0].strip():
        rest.pop(0)
    return entries, "\n".join(rest) + ("\n" if rest else "")


def entry_names(entry: list[str]) -> list[str]:
    return entry[0].split()[1:]


def join_block(entries: list[list[str]], rest: str) -> str:
    if not entries:
        return rest
    body = "\n".join("\n".join(entry) for entry in entries)
    return f"{BEGIN}\n{body}\n{END}\n" + (f"\n{rest}" if rest else "")


def write_config(path: str, add: list[list[str]], remove: set[str], remove_all: bool = False) -> list[str]:
    """Apply to the file at ``path``: drop the entries named in ``remove`` (or all), add (or
    replace, by their names) ``add``; the file is created 0600 (its directory 0700) and written
    atomically. Returns the host names now in the block."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        text = ""
    try:
        entries, rest = split_block(text)
    except ValueError as exc:
        raise DevctlError(f"{path}: {exc}") from None
    names = {n for entry in add for n in entry_names(entry)} | set(remove)
    kept = [] if remove_all else [e for e in entries if not set(entry_names(e)) & names]
    entries = kept + add
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, mode=0o700, exist_ok=True)
    tmp = f"{path}.devctl-tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(join_block(entries, rest))
    if os.path.exists(path):
        os.chmod(tmp, os.stat(path).st_mode & 0o777)
    os.replace(tmp, path)
    return [entry_names(e)[0] for e in entries]


def forget(names: list[str], namespace: str, path: str | None = None) -> None:
    """Remove the entries of the servers ``names`` of ``namespace`` (with their replicas') if the
    block has them: what ``devctl delete`` calls; a file without them is not touched."""
    path = path or default_path()
    try:
        with open(path, encoding="utf-8") as fh:
            entries, _rest = split_block(fh.read())
    except (OSError, ValueError):  # no file, or a block edited by hand: left alone
        return
    ours = [re.compile(r"^  (HostName|HostKeyAlias) %s(-\d+)?\.%s\.devserver$" % (re.escape(n), re.escape(namespace)))
            for n in names]
    gone = {n for entry in entries if any(p.match(line) for p in ours for line in entry) for n in entry_names(entry)}
    if gone:
        write_config(path, [], gone)

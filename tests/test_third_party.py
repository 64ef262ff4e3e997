"""third_party/: every directory is upstream files kept unchanged, with their licence and a README
that names where they came from and lists each file's sha256 (a changed file fails here)."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

THIRD_PARTY = Path(__file__).resolve().parents[1] / "third_party"
DIRS = sorted(p for p in THIRD_PARTY.iterdir() if p.is_dir())


def test_every_directory_is_listed():
    index = (THIRD_PARTY / "README.md").read_text()
    assert DIRS and all("`%s/`" % d.name in index for d in DIRS)


@pytest.mark.parametrize("directory", DIRS, ids=[d.name for d in DIRS])
def test_files_are_the_upstream_ones_with_their_licence(directory):
    assert "Apache License" in (directory / "LICENSE").read_text()
    readme = (directory / "README.md").read_text()
    files = sorted(directory.glob("*.yaml"))
    assert files
    for path in files:
        assert "%s  %s" % (hashlib.sha256(path.read_bytes()).hexdigest(), path.name) in readme, path.name

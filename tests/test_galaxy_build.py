"""The built collection torchdev.operator holds only what a collection needs (galaxy.yml's
build_ignore; docs/architecture.md): `ansible-galaxy collection build .` from the root must not
ship the CLI, the simulator, the exporter, the checkout's configuration or local directories
(.venv*, .cache, bundle/)."""
from __future__ import annotations

import fnmatch
import subprocess
import sys
import tarfile
from pathlib import Path

import yaml

from _support import ROOT
from hack import image

# What the archive may hold at its top level (MANIFEST.json and FILES.json are ansible-galaxy's).
ALLOWED = {"MANIFEST.json", "FILES.json", "README.md", "meta", "plugins", "roles", "playbooks"}
REQUIRED = ALLOWED
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())


def _ignored(name: str) -> bool:
    """ansible-galaxy's own test for a top-level entry (fnmatch on the path relative to the root)."""
    return any(fnmatch.fnmatch(name, pattern) for pattern in GALAXY["build_ignore"])


def test_the_built_collection_holds_only_the_collection(tmp_path):
    galaxy = Path(sys.executable).parent / "ansible-galaxy"
    res = subprocess.run([str(galaxy), "collection", "build", str(ROOT), "--output-path", str(tmp_path)],
                         cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    [archive] = tmp_path.glob("torchdev-operator-*.tar.gz")
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    top = {name.split("/")[0] for name in names}
    assert top - ALLOWED == set(), "add these to galaxy.yml build_ignore: %s" % sorted(top - ALLOWED)
    assert REQUIRED - top == set()
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert "roles/devserver/tasks/main.yml" in names and "plugins/module_utils/constants.py" in names


def test_build_ignore_covers_every_other_top_level_entry():
    """Also what this checkout may lack today: every tracked top-level entry and every
    top-level .gitignore entry (.venv-image, .cache, bundle/, ...)."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    names = {line.split("/")[0] for line in tracked.splitlines()}
    for line in (ROOT / ".gitignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "/" not in line.strip("/"):
            names.add(line.strip("/"))
    names |= {p.name for p in ROOT.iterdir()}
    names -= {"galaxy.yml"}  # ansible-galaxy reads it and writes MANIFEST.json instead
    leaked = sorted(n for n in names if n not in ALLOWED and not _ignored(n))
    assert not leaked, "add these to galaxy.yml build_ignore: %s" % leaked
    assert not [n for n in ALLOWED if _ignored(n)]


def test_the_image_builds_the_collection_from_the_same_entries():
    """The Dockerfile copies the collection's entries into a directory and builds it there."""
    copies = [i.args.split() for i in image.parse_dockerfile((ROOT / "Dockerfile").read_text()) if i.op == "COPY"]
    sources = {src.rstrip("/") for args in copies if "torchdev-src" in args[-1] for src in args[:-1]}
    assert sources == (ALLOWED - {"MANIFEST.json", "FILES.json"}) | {"galaxy.yml"}

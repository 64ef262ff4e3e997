#!/usr/bin/env python3
"""Install the Ansible collections pinned in requirements.yml without Galaxy.

Galaxy is not reachable from our build machines, but PyPI is, and the
``ansible`` community package on PyPI bundles the collections.  We download
one pinned ``ansible`` wheel and extract *only* the pinned collections from it
into ``./collections/ansible_collections``.  The collection version inside the
wheel must equal the pin in requirements.yml, otherwise we fail loudly.

It also makes this checkout the collection torchdev.operator (galaxy.yml): a relative
symlink ``collections/ansible_collections/torchdev/operator`` -> the repository root, so
ansible-playbook, ansible-doc, ansible-lint, molecule, the local runtime and the tests
resolve ``torchdev.operator.*`` to the files being edited.

The wheel is downloaded once, into .cache/wheels, and read from there afterwards: the image's
HOME that the real tier lays out (hack/image.py) installs the collections again, in a network
namespace without a route out when a real tier runs in one (hack/isolate.py).

Usage: install_collections.py [--dest collections] [--requirements requirements.yml] [--no-link]
(--no-link: only the pinned collections, e.g. into the image's ~/.ansible/collections, hack/image.py)
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

import yaml

# The community package whose wheel carries the pinned collection versions.
ANSIBLE_WHEEL = "ansible==12.3.0"
WHEELS = pathlib.Path(__file__).resolve().parents[1] / ".cache" / "wheels"


def ansible_wheel() -> pathlib.Path:
    """The pinned ansible wheel in WHEELS, downloaded there first if it is not."""
    version = ANSIBLE_WHEEL.split("==")[1]
    found = sorted(WHEELS.glob(f"ansible-{version}-*.whl"))
    if found:
        return found[0]
    WHEELS.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=WHEELS) as tmp:  # whole or not at all
        subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                        "--only-binary=:all:", ANSIBLE_WHEEL, "-d", tmp], check=True)
        wheel = next(pathlib.Path(tmp).glob(f"ansible-{version}-*.whl"))
        return wheel.rename(WHEELS / wheel.name)


def installed_version(dest: pathlib.Path, fqcn: str) -> str | None:
    ns, name = fqcn.split(".")
    manifest = dest / "ansible_collections" / ns / name / "MANIFEST.json"
    if not manifest.exists():
        return None
    return json.loads(manifest.read_text())["collection_info"]["version"]


ROOT = pathlib.Path(__file__).resolve().parent.parent


def link_checkout(dest: pathlib.Path) -> None:
    """collections/ansible_collections/<namespace>/<name> -> the repository root (galaxy.yml)."""
    galaxy = yaml.safe_load((ROOT / "galaxy.yml").read_text())
    link = dest / "ansible_collections" / galaxy["namespace"] / galaxy["name"]
    target = pathlib.Path(*[".."] * 3) if dest.resolve() == (ROOT / "collections").resolve() else ROOT
    if link.is_symlink() and link.resolve() == ROOT.resolve():
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(target, target_is_directory=True)
    print(f"linked {link} -> {target} (the checkout is the collection {galaxy['namespace']}.{galaxy['name']})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dest", default="collections")
    ap.add_argument("--requirements", default="requirements.yml")
    ap.add_argument("--no-link", action="store_true", help="do not link this checkout as torchdev.operator")
    args = ap.parse_args()
    dest = pathlib.Path(args.dest)
    wanted = {
        c["name"]: str(c["version"])
        for c in yaml.safe_load(pathlib.Path(args.requirements).read_text())["collections"]
    }
    if not args.no_link:
        link_checkout(dest)
    missing = {n: v for n, v in wanted.items() if installed_version(dest, n) != v}
    if not missing:
        return 0
    wheel = ansible_wheel()
    with zipfile.ZipFile(wheel) as zf:
        for fqcn, version in missing.items():
            ns, name = fqcn.split(".")
            prefix = f"ansible_collections/{ns}/{name}/"
            manifest = json.loads(zf.read(prefix + "MANIFEST.json"))
            got = manifest["collection_info"]["version"]
            if got != version:
                print(f"error: {wheel.name} carries {fqcn} {got}, requirements.yml pins {version}",
                      file=sys.stderr)
                return 1
            target = dest / "ansible_collections" / ns / name
            shutil.rmtree(target, ignore_errors=True)
            for member in zf.namelist():
                if member.startswith(prefix) and not member.endswith("/"):
                    zf.extract(member, dest)
            print(f"installed {fqcn} {version} into {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

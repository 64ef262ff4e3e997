#!/usr/bin/env python3
"""The operator image without Docker (`make test-image`, docs/delivery.md): the Dockerfile's
own instructions, read and carried out over a local HOME with the base image's Python.

    python -m hack.image --venv .venv-image --home .cache/image-home

* FROM must be the base image requirements-image.txt was transcribed for (its `# base:` line):
  .venv-image holds that base's Python packages at their pins (ansible-core 2.18, ...).
* ENV sets variables for what follows; USER and WORKDIR change nothing here (WORKDIR is HOME).
* COPY copies from the checkout into HOME (`${HOME}` and the base image's other variables
  expanded).
* RUN runs the command with bash, as the image would: HOME is the local HOME, .venv-image/bin
  first on PATH (its python3, pip, ansible-galaxy), no Ansible setting of this checkout, in
  HOME. Two things differ and are said so: paths under /tmp/ go to a scratch directory, and
  `ansible-galaxy collection install -r FILE` installs the pinned collections from PyPI
  (hack/install_collections.py --no-link) because Galaxy is not reachable here; every other
  ansible-galaxy command (build, install of the built torchdev collection) is the real one.

Afterwards it checks what the image would hold: the built torchdev.operator at the VERSION
file's version and kubernetes.core in ~/.ansible/collections, watches.yaml and the exporter in
HOME, and the base's ansible-core and Python in .venv-image. The Makefile then runs the DevServer
end-to-end tests and the molecule scenario with that ansible-core and those collections.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The base image's environment (ansible-operator-plugins images/ansible-operator/Dockerfile).
BASE_ENV = {"HOME": "/opt/ansible", "USER_NAME": "ansible", "USER_UID": "1001"}
GALAXY_SHIM = """#!/bin/bash
# hack/image.py: Galaxy is not reachable; the pinned collections come from PyPI instead.
if [ "$1" = collection ] && [ "$2" = install ] && [ "$3" = -r ] && [ $# -eq 4 ]; then
  exec {python} {installer} --no-link --requirements "$4" --dest "$HOME/.ansible/collections"
fi
exec {galaxy} "$@"
"""


@dataclass(frozen=True)
class Instruction:
    op: str
    args: str
    line: int


def parse_dockerfile(text: str) -> list[Instruction]:
    """The Dockerfile's instructions (continuation lines joined, comments dropped)."""
    out: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if pending and line.startswith("#"):
            continue
        start = start or number
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        op, _, args = (pending + line).partition(" ")
        out.append(Instruction(op.upper(), args.strip(), start))
        pending, start = "", 0
    return out


def expand(text: str, env: dict[str, str]) -> str:
    """${VAR}, ${VAR:-default} and $VAR as the Dockerfile builder expands them."""
    def one(m: re.Match) -> str:
        name, default = m.group(1) or m.group(3), m.group(2)
        return env.get(name) or (default if default is not None else "")
    return re.sub(r"\$\{(\w+)(?::-([^}]*))?\}|\$(\w+)", one, text)


def base_image(requirements: Path) -> str:
    for line in requirements.read_text().splitlines():
        if line.startswith("# base:"):
            return line.split(":", 1)[1].split("(")[0].strip()
    raise ValueError("%s has no '# base: <image>' line" % requirements)


def build(instructions: list[Instruction], venv: Path, home: Path, scratch: Path, base: str,
          image_env: dict[str, str] | None = None) -> list[str]:
    """Carry the instructions out over `home`; returns a log line per instruction. `image_env`
    receives what the Dockerfile's ENV instructions set (the image's environment at run time)."""
    env = dict(BASE_ENV, HOME=str(home))
    image_env = {} if image_env is None else image_env
    shim = scratch / "shim"
    shim.mkdir(parents=True, exist_ok=True)
    (shim / "ansible-galaxy").write_text(GALAXY_SHIM.format(
        python=shlex.quote(sys.executable), installer=shlex.quote(str(ROOT / "hack" / "install_collections.py")),
        galaxy=shlex.quote(str(venv / "bin" / "ansible-galaxy"))))
    (shim / "ansible-galaxy").chmod(0o755)
    tmp = scratch / "tmp"
    tmp.mkdir(exist_ok=True)
    log = []
    for ins in instructions:
        if ins.op == "FROM":
            if ins.args.split()[0] != base:
                raise ValueError("line %d: FROM %s, but requirements-image.txt is the base %s" % (ins.line, ins.args, base))
        elif ins.op == "ENV":
            for pair in shlex.split(expand(ins.args, env)):
                key, _, value = pair.partition("=")
                env[key] = image_env[key] = value
        elif ins.op == "COPY":
            *sources, dest = shlex.split(expand(ins.args, env))
            for source in sources:
                _copy(ROOT / source, Path(dest), dest.endswith("/") or len(sources) > 1)
        elif ins.op == "RUN":
            command = ins.args.replace("/tmp/", str(tmp) + "/")
            run_env = {k: v for k, v in os.environ.items()
                       if not k.startswith(("ANSIBLE_", "PYTHON", "VIRTUAL_ENV", "PIP_", "K8S_AUTH"))}
            run_env.update(env, PATH=os.pathsep.join([str(shim), str(venv / "bin"), "/usr/bin", "/bin"]),
                           TMPDIR=str(tmp))
            res = subprocess.run(["bash", "-c", command], cwd=home, env=run_env, capture_output=True, text=True,
                                 timeout=900)
            if res.returncode != 0:
                raise RuntimeError("line %d: RUN %s\nexit %d\n%s%s" % (ins.line, command, res.returncode,
                                                                       res.stdout[-3000:], res.stderr[-3000:]))
        elif ins.op not in ("USER", "WORKDIR", "LABEL", "ARG"):
            raise ValueError("line %d: %s is not carried out by hack/image.py" % (ins.line, ins.op))
        log.append("%-4d %s %s" % (ins.line, ins.op, ins.args[:100]))
    return log


def _copy(source: Path, dest: Path, into: bool) -> None:
    target = dest / source.name if into and source.is_file() else dest
    if source.is_dir():
        shutil.copytree(source, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)


def check(venv: Path, home: Path, version: str, python: str) -> list[str]:
    """What is wrong with the laid-out image ([] when nothing)."""
    problems = []
    collections = home / ".ansible" / "collections" / "ansible_collections"
    for fqcn, want in (("torchdev/operator", version), ("kubernetes/core", None)):
        manifest = collections / fqcn / "MANIFEST.json"
        if not manifest.is_file() or (collections / fqcn).is_symlink():
            problems.append("%s is not installed in %s" % (fqcn.replace("/", "."), collections))
            continue
        got = json.loads(manifest.read_text())["collection_info"]["version"]
        if want and got != want:
            problems.append("%s %s, VERSION says %s" % (fqcn.replace("/", "."), got, want))
    for path in ("watches.yaml", "torchdev_exporter/__main__.py", "requirements.yml"):
        if not (home / path).is_file():
            problems.append("%s is not in HOME" % path)
    probe = subprocess.run([str(venv / "bin" / "python"), "-c", "import sys, ansible.release, kubernetes, "
                            "prometheus_client; print('%d.%d' % sys.version_info[:2], ansible.release.__version__)"],
                           capture_output=True, text=True, timeout=60)
    if probe.returncode != 0:
        problems.append("the image's python cannot import its packages: " + probe.stderr.strip()[-300:])
    else:
        got_python, core = probe.stdout.split()
        if got_python != python:
            problems.append("the image's python is %s, the base image's is %s" % (got_python, python))
        if not core.startswith("2.18."):
            problems.append("ansible-core %s, the base image's is 2.18" % core)
    return problems


def main(argv: list[str]) -> int:
    from hack import version

    parser = argparse.ArgumentParser(description="Lay out the operator image's HOME from the Dockerfile, no Docker.")
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv-image")
    parser.add_argument("--home", type=Path, default=ROOT / ".cache" / "image-home")
    parser.add_argument("--dockerfile", type=Path, default=ROOT / "Dockerfile")
    parser.add_argument("--requirements", type=Path, default=ROOT / "requirements-image.txt")
    parser.add_argument("--env-file", type=Path, help="write the Dockerfile's ENV here (KEY=value lines)")
    args = parser.parse_args(argv)
    venv, home = args.venv.resolve(), args.home.resolve()
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    (home / ".ansible" / "tmp").mkdir(parents=True)  # the base image creates it
    python = re.search(r"\(python (\d+\.\d+)\)", args.requirements.read_text().splitlines()[0]).group(1)
    image_env: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="torchdev-image-") as scratch:
        log = build(parse_dockerfile(args.dockerfile.read_text()), venv, home, Path(scratch),
                    base_image(args.requirements), image_env)
    if args.env_file:
        args.env_file.write_text("".join("%s=%s\n" % (k, shlex.quote(v)) for k, v in image_env.items()))
    print("\n".join(log))
    problems = check(venv, home, version.read_version(), python)
    for problem in problems:
        print("test-image: " + problem, file=sys.stderr)
    if not problems:
        print("the image's HOME is %s (python %s, ansible-core 2.18)" % (home, python))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

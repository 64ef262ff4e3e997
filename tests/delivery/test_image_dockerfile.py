"""hack/image.py reads the Dockerfile (issue 16.3): `make test-image` lays the image's HOME out
from the Dockerfile's own instructions and runs the DevServer e2e tests and molecule with the
base image's Python and ansible-core (requirements-image.txt). These tests check the reading
only; the target itself takes minutes (docs/delivery.md)."""
from __future__ import annotations

import pytest

from _support import ROOT
from hack import image


def test_the_dockerfile_is_built_on_the_base_requirements_image_txt_describes():
    instructions = image.parse_dockerfile((ROOT / "Dockerfile").read_text())
    assert instructions[0].op == "FROM"
    assert instructions[0].args == image.base_image(ROOT / "requirements-image.txt")


def test_every_instruction_is_one_hack_image_carries_out():
    ops = {i.op for i in image.parse_dockerfile((ROOT / "Dockerfile").read_text())}
    assert ops <= {"FROM", "ENV", "COPY", "RUN", "USER", "WORKDIR", "LABEL", "ARG"}
    assert {"COPY", "RUN"} <= ops


def test_the_image_runs_ansible_2_18_with_native_types():
    """ansible-core 2.18 templates None to "" without Jinja2's native types; the roles need None."""
    env = [i.args for i in image.parse_dockerfile((ROOT / "Dockerfile").read_text()) if i.op == "ENV"]
    assert "ANSIBLE_JINJA2_NATIVE=True" in env
    pins = (ROOT / "requirements-image.txt").read_text()
    assert "\nansible-core==2.18." in pins and "\nkubernetes==33.1.0" in pins


def test_continuations_and_comments():
    text = "FROM base:1\n# a comment\nRUN a \\\n # inside\n && b\nCOPY x ${HOME}/y\n"
    assert [(i.op, i.args, i.line) for i in image.parse_dockerfile(text)] == [
        ("FROM", "base:1", 1), ("RUN", "a  && b", 3), ("COPY", "x ${HOME}/y", 6)]


@pytest.mark.parametrize("text,expected", [
    ("${HOME}/x", "/opt/ansible/x"), ("$HOME", "/opt/ansible"), ("${USER_UID:-1001}", "1001"),
    ("${NOPE:-dflt}", "dflt"), ("${NOPE}", ""),
])
def test_variables_expand_as_the_builder_does(text, expected):
    assert image.expand(text, dict(image.BASE_ENV)) == expected

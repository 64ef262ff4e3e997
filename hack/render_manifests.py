#!/usr/bin/env python3
"""Render every manifest torchdev ships or creates: input of `make checkov` and tests/security.

    python -m hack.render_manifests [--image IMG] OUTDIR

writes
  OUTDIR/roles/<role>/<case>.yaml   what a role renders (its tasks/render.yml, after normalize.yml
                                    when it has one) for a matrix of sample custom resources; all
                                    roles and cases in ONE ansible-playbook run
  OUTDIR/config/<dir>.yaml          `kubectl kustomize config/<dir>`: default (CRDs, RBAC, the
                                    operator Deployment), samples, and every other kustomization
                                    that config/default does not include; --image replaces
                                    the operator image (hack/version.py default_image) as
                                    `make deploy IMG=...` does

Every role with a tasks/render.yml needs a case builder in CASE_BUILDERS: a new role without
one is an error, so nothing it renders escapes the security checks.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import yaml

from ansible_collections.torchdev.operator.plugins.module_utils.lifecycle import lifecycle_status
from hack.render_cases import devserver_cases as devserver_matrix, devuser_cases as devuser_matrix
from hack.render_cases import trainingjob_cases as trainingjob_matrix, usage_cases as usage_matrix
from hack.render_cases import ephemeralaccelerationjob_cases as ephemeralaccelerationjob_matrix
from hack import version

ROOT = Path(__file__).resolve().parents[1]
ROLES = ROOT / "roles"
CONFIG = ROOT / "config"
SAMPLES = CONFIG / "samples"
BIN = Path(sys.executable).parent


def _meta(obj: dict[str, Any]) -> dict[str, str]:
    """ansible_operator_meta: namespace "" for a cluster-scoped object, as ansible-operator passes it."""
    return {"name": obj["metadata"]["name"], "namespace": obj["metadata"].get("namespace", "")}


def _devserver_run(case: dict[str, Any]) -> dict[str, Any]:
    """The DevServer of a case ({cr, flavor, ...}) as ansible-operator passes it: only the raw
    object and spec (the role must not depend on the snake_cased copies), and its flavor as
    flavor.yml indexes it."""
    cr = case["cr"]
    return {
        "ansible_operator_meta": _meta(cr),
        "_torchdev_io_devserver": cr,
        "_torchdev_io_devserver_spec": cr["spec"],
        "devserver_flavor": case["flavor"],
    }


def devserver_hostvars(case: dict[str, Any]) -> dict[str, Any]:
    """The variables of one devserver render case ({cr, flavor, observed?, pvcs?, storage_class?, kueue?, devuser?}):
    the DevServer, what observe.yml would have found and lifecycle.yml decided."""
    return dict(_devserver_run(case), **{
        "devserver_observed": case.get("observed", []),
        "devserver_observed_pvcs": case.get("pvcs", []),
        "devserver_observe": {"objects": {"home_storage_class": case.get("storage_class")}},
        "devserver_kueue": case.get("kueue"),
        "devserver_devuser": case.get("devuser"),
        # What lifecycle.yml would have decided for a server that just became ready.
        "devserver_lifecycle": lifecycle_status(case["cr"], True, "2026-01-01T00:00:00Z"),
    })


def usage_hostvars(case: dict[str, Any]) -> dict[str, Any]:
    """The variables of one usage-record case ({cr, flavor, reservation?, observed?}): what
    tasks/usage.yml renders (devserver_usage_objects) after normalize.yml, for the reservation
    lifecycle.yml decided (none: the status's, as finalize.yml passes it) and the record
    observe.yml found (none: not written yet)."""
    return dict(_devserver_run(case), **{
        "devserver_observe": {"objects": {"usage_record": case.get("observed")}},
        "devserver_usage_reservation": case.get("reservation"),
        "torchdev_render_tasks": ["normalize.yml", "usage.yml"],
        "torchdev_render_objects": "devserver_usage_objects",
    })


def devuser_hostvars(case: dict[str, Any]) -> dict[str, Any]:
    """The variables of one devuser render case ({cr, kueue, flavors, vars?})."""
    cr = case["cr"]
    return dict({
        "ansible_operator_meta": _meta(cr),
        "_torchdev_io_devuser": cr,
        "_torchdev_io_devuser_spec": cr["spec"],
        "devuser_kueue": case["kueue"],
        "devuser_flavors": case["flavors"],
    }, **case.get("vars", {}))


def devserver_cases() -> dict[str, dict[str, Any]]:
    """The DevServer matrix (hack/render_cases.py) as host variables, and the UsageRecords the
    role writes (cases usage_*)."""
    cases = {key: devserver_hostvars(case) for key, case in devserver_matrix().items()}
    cases.update({"usage_" + key: usage_hostvars(case) for key, case in usage_matrix().items()})
    return cases


def devuser_cases() -> dict[str, dict[str, Any]]:
    """The DevUser matrix (hack/render_cases.py: jane's namespace dev-jane is where the
    DevServer matrix lives) as host variables."""
    return {key: devuser_hostvars(case) for key, case in devuser_matrix().items()}


def trainingjob_hostvars(case: dict[str, Any]) -> dict[str, Any]:
    """The variables of one trainingjob render case ({cr, decision?, kueue?, job?}): the raw object
    and what observe.yml and decide.yml would have produced."""
    cr = case["cr"]
    return {
        "ansible_operator_meta": _meta(cr),
        "_torchdev_io_trainingjob": cr,
        "_torchdev_io_trainingjob_spec": cr["spec"],
        "trainingjob_observe": {"objects": {"job": case.get("job"), "claim": None}, "kueue": case.get("kueue")},
        "trainingjob_kueue": case.get("kueue"),
        "trainingjob_observed": [],
        "trainingjob_decision": dict({"run": True, "attempt": 0}, **case.get("decision", {})),
    }


def trainingjob_cases() -> dict[str, dict[str, Any]]:
    """The TrainingJob matrix (hack/render_cases.py) as host variables."""
    return {key: trainingjob_hostvars(case) for key, case in trainingjob_matrix().items()}


def ephemeralaccelerationjob_hostvars(case: dict[str, Any]) -> dict[str, Any]:
    """The variables of one ephemeralaccelerationjob render case ({cr, decision?}): the raw object
    and what observe.yml (nothing yet) and decide.yml (a new job: everything) would have produced."""
    cr = case["cr"]
    return {
        "ansible_operator_meta": _meta(cr),
        "_torchdev_io_ephemeralaccelerationjob": cr,
        "_torchdev_io_ephemeralaccelerationjob_spec": cr["spec"],
        "ephemeralaccelerationjob_observe": {"objects": {"claim": None, "runner": None, "pod": None}},
        "ephemeralaccelerationjob_decision": dict({"phase": "Pending", "ensure": ["claim", "runner", "pod"], "delete": []},
                                                  **case.get("decision", {})),
    }


def ephemeralaccelerationjob_cases() -> dict[str, dict[str, Any]]:
    """The EphemeralAccelerationJob matrix (hack/render_cases.py) as host variables."""
    return {key: ephemeralaccelerationjob_hostvars(case) for key, case in ephemeralaccelerationjob_matrix().items()}


CASE_BUILDERS: dict[str, Callable[[], dict[str, dict[str, Any]]]] = {
    "devserver": devserver_cases,
    "ephemeralaccelerationjob": ephemeralaccelerationjob_cases,
    "devuser": devuser_cases,
    "trainingjob": trainingjob_cases,
}


def rendering_roles() -> list[str]:
    """The roles that render objects (have tasks/render.yml)."""
    return sorted(p.parent.parent.name for p in ROLES.glob("*/tasks/render.yml"))


def role_cases() -> dict[str, dict[str, dict[str, Any]]]:
    missing = [role for role in rendering_roles() if role not in CASE_BUILDERS]
    if missing:
        raise RuntimeError("no render cases for role(s) %s: add a builder to hack/render_manifests.py CASE_BUILDERS"
                           % ", ".join(missing))
    return {role: CASE_BUILDERS[role]() for role in rendering_roles()}


def render_roles(workdir: Path, cases: dict[str, dict[str, dict[str, Any]]] | None = None) -> dict[str, dict[str, list]]:
    """{role: {case: [objects]}}: each role's normalize.yml (if any) and render.yml, one host per case
    ({role: {case: host variables}}, default: every role's matrix), then the role's variable
    <role>_objects. A case may name other task files (torchdev_render_tasks) and another
    variable (torchdev_render_objects). The playbook's output is kept in workdir/ansible.log."""
    cases = role_cases() if cases is None else cases
    hosts = {}
    for role, role_hosts in cases.items():
        tasks = [t for t in ("normalize.yml", "render.yml") if (ROLES / role / "tasks" / t).exists()]
        for case, hostvars in role_hosts.items():
            hosts["%s__%s" % (role, case)] = dict(
                dict(torchdev_render_tasks=tasks, torchdev_render_objects=role + "_objects"), **hostvars,
                ansible_connection="local", ansible_python_interpreter=sys.executable, torchdev_render_role=role)
    (workdir / "inventory.json").write_text(json.dumps({"all": {"hosts": hosts}}))
    (workdir / "render.yml").write_text(yaml.safe_dump([{
        "name": "Render the objects of every role",
        "hosts": "all",
        "gather_facts": False,
        "tasks": [
            {"name": "Run the role's pure tasks",
             # public: a role may name its objects in vars/main.yml (devserver_objects)
             "ansible.builtin.include_role": {"name": "torchdev.operator.{{ torchdev_render_role }}",
                                              "tasks_from": "{{ item }}", "public": True},
             "loop": "{{ torchdev_render_tasks }}"},
            {"name": "Dump the rendered objects",
             "ansible.builtin.copy": {
                 "content": "{{ lookup('ansible.builtin.vars', torchdev_render_objects) | to_json }}",
                 "dest": str(workdir) + "/{{ inventory_hostname }}.json", "mode": "0644"}},
        ],
    }]))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_FORKS="16",
               ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_NOCOLOR="1")
    proc = subprocess.run([str(BIN / "ansible-playbook"), "-i", str(workdir / "inventory.json"), str(workdir / "render.yml")],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    (workdir / "ansible.log").write_text(proc.stdout)
    if proc.returncode != 0:
        raise RuntimeError("rendering the roles failed:\n" + proc.stdout[-6000:] + proc.stderr[-3000:])
    return {role: {case: json.loads((workdir / ("%s__%s.json" % (role, case))).read_text()) for case in role_hosts}
            for role, role_hosts in cases.items()}


def kustomizations() -> list[str]:
    """config/default, config/samples and every config/<dir> config/default does not include."""
    included = {(CONFIG / "default" / r).resolve().name
                for r in yaml.safe_load((CONFIG / "default" / "kustomization.yaml").read_text()).get("resources", [])}
    return sorted(p.parent.name for p in CONFIG.glob("*/kustomization.yaml") if p.parent.name not in included)


class KubectlLoader(yaml.SafeLoader):
    """kubectl (Go, YAML 1.2) writes 0.00005 as 5e-05, which YAML 1.1 (PyYAML) would read as a
    string: an exponent without a dot is a float here too."""


KubectlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)[eE][-+]?[0-9]+$"),
    list("-+.0123456789"))


def kustomize(directory: str) -> list[dict[str, Any]]:
    """`kubectl kustomize config/<directory>`, parsed as kubectl would."""
    out = subprocess.run([str(BIN / "kubectl"), "kustomize", str(CONFIG / directory)],
                         check=True, capture_output=True, text=True, timeout=120).stdout
    return [doc for doc in yaml.load_all(out, Loader=KubectlLoader) if doc]


def write(outdir: Path, image: str | None = None) -> list[Path]:
    written = []
    default = version.default_image()
    with tempfile.TemporaryDirectory(prefix="torchdev-render-") as tmp:
        rendered = render_roles(Path(tmp))
    for role, by_case in rendered.items():
        for case, objects in by_case.items():
            written.append(_dump(outdir / "roles" / role / ("%s.yaml" % case), objects))
    for directory in kustomizations():
        objects = kustomize(directory)
        for obj in objects if image else []:
            for container in ((obj.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers", []):
                if container.get("image") == default:
                    container["image"] = image
        written.append(_dump(outdir / "config" / ("%s.yaml" % directory), objects))
    return written


def _dump(path: Path, objects: list[dict[str, Any]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump_all(objects, sort_keys=False))
    return path


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description="Render every manifest torchdev ships or creates.")
    parser.add_argument("--image", help="operator image in place of config/default's (as `make deploy` IMG=...)")
    parser.add_argument("outdir", type=Path)
    args = parser.parse_args(argv)
    written = write(args.outdir, args.image)
    print("rendered %d manifest files into %s" % (len(written), args.outdir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Shared bits of the EphemeralAccelerationJob tests."""
from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / "config" / "crd" / "bases" / "torchdev.io_ephemeralaccelerationjobs.yaml"
SEEDS = ROOT / "tests" / "data" / "seed004" / "ephemeralaccelerationjobs.yaml"
GROUP, VERSION, PLURAL = "torchdev.io", "v1alpha1", "ephemeralaccelerationjobs"


def load(path: pathlib.Path) -> dict:
    return yaml.safe_load(path.read_text())


def seed_examples() -> list[dict]:
    return [d for d in yaml.safe_load_all(SEEDS.read_text()) if d]


def eaj(name: str = "infer", namespace: str = "ml", **spec) -> dict:
    body = {"model": "resnet50", "input": {"type": "image", "path": "/artifacts/input.jpg"}}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "EphemeralAccelerationJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}

"""Shared bits of the TrainingJob tests."""
from __future__ import annotations

import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[2]
CRD = ROOT / "config" / "crd" / "bases" / "torchdev.io_trainingjobs.yaml"
SEEDS = ROOT / "tests" / "data" / "seed001" / "trainingjobs.yaml"
GROUP, VERSION = "torchdev.io", "v1alpha1"


def load(path: pathlib.Path) -> dict:
    return yaml.safe_load(path.read_text())


def seed_examples() -> list[dict]:
    return [d for d in yaml.safe_load_all(SEEDS.read_text()) if d]


def tj(name: str = "train", namespace: str = "ml", **spec) -> dict:
    body = {"model": "mlp", "dataset": "synthetic", "numWorkers": 2}
    body.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
            "metadata": {"name": name, "namespace": namespace}, "spec": body}

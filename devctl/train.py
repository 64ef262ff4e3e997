"""``devctl train submit | list | get | logs | suspend | resume | delete``: TrainingJobs
(torchdev.io/v1alpha1, roles/trainingjob)."""
from __future__ import annotations

import re
import sys
from typing import Any

import click

from . import API_VERSION, GROUP
from . import complete
from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError, DevctlError
from .output import (LIST_FORMATS, DurationType, age, output_option, print_object, print_objects,
                     print_table, selector_option, truncate)

KIND = "TrainingJob"
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
NAME_MAX = 50  # the CRD's rule: it names the Job, its pods and Service
INDEX_LABEL = "batch.kubernetes.io/job-completion-index"
EVENTS_SHOWN = 10


def validate_name(_ctx, _param, value: str | None) -> str | None:
    if value is not None and (not NAME_RE.match(value) or len(value) > NAME_MAX):
        raise click.BadParameter(
            f"{value!r} is not a valid trainingjob name: use lower-case letters, digits and '-', start with a "
            f"letter, end with a letter or digit, at most {NAME_MAX} characters")
    return value


@click.group("train")
def train() -> None:
    """Distributed PyTorch training runs (TrainingJobs): submit, watch, suspend, resume.

    \b
      devctl train submit -f job.yaml
      devctl train submit mnist --workers 2 --gpus-per-worker 0 --epochs 10 -- python train.py
      devctl train list
      devctl train get mnist
      devctl train logs mnist --rank 1 -f
    """


# -- submit ---------------------------------------------------------------------------------
def _load_file(path: str) -> dict:
    import yaml  # lazy

    try:
        text = sys.stdin.read() if path == "-" else open(path).read()
        docs = [d for d in yaml.safe_load_all(text) if d]
    except OSError as exc:
        raise DevctlError(f"cannot read {path}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise DevctlError(f"{path} is not valid YAML: {' '.join(str(exc).split())}") from None
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise DevctlError(f"{path} must hold exactly one TrainingJob, found {len(docs)} document(s)")
    body = docs[0]
    if body.get("kind") != KIND:
        raise DevctlError(f"{path}: kind must be {KIND}, got {body.get('kind')!r}")
    api_version = body.get("apiVersion")
    if api_version != API_VERSION:
        raise DevctlError(f"{path}: apiVersion must be {API_VERSION}, got {api_version!r}")
    if not isinstance(body.get("spec"), dict):
        raise DevctlError(f"{path}: spec is missing")
    return body


@train.command("submit")
@click.argument("name", required=False, callback=validate_name)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("-f", "--filename", metavar="FILE", help="A TrainingJob manifest (YAML; - for stdin).")
@click.option("--workers", type=click.IntRange(1, 100), help="Worker pods (spec.numWorkers).")
@click.option("--gpus-per-worker", type=click.IntRange(0, 16), help="GPUs of each worker (0: CPU workers, gloo).")
@click.option("--image", help="Container image of the workers.")
@click.option("--model", help="spec.model (default: the name).")
@click.option("--dataset", help="spec.dataset (default: custom).")
@click.option("--epochs", type=click.IntRange(1, 100000), help="hyperparameters.epochs.")
@click.option("--checkpoints/--no-checkpoints", default=None, help="Checkpoints on a claim the operator creates.")
@click.option("--backoff-limit", type=click.IntRange(0, 100), help="Whole-group restarts before Failed.")
@click.option("--deadline", type=DurationType(1, 31536000, whole=True), metavar="DURATION",
              help="failurePolicy.activeDeadlineSeconds: how long the job may run, e.g. 90m, 12h, 2d (at most 365d).")
@output_option(default="table", formats=("table", "json", "yaml"))
@kube_options()
@pass_settings
def submit(settings: Settings, name: str | None, command: tuple[str, ...], filename: str | None, workers: int | None,
           gpus_per_worker: int | None, image: str | None, model: str | None, dataset: str | None,
           epochs: int | None, checkpoints: bool | None, backoff_limit: int | None, deadline: int | None,
           output: str) -> None:
    """Submit a TrainingJob from a manifest (-f) or from flags; after -- the workers' command."""
    if filename:
        body = _load_file(filename)
        meta = body.setdefault("metadata", {})
        if name:
            meta["name"] = name
        if not meta.get("name"):
            raise DevctlError(f"{filename}: metadata.name is missing (or give NAME)")
        validate_name(None, None, meta["name"])
    else:
        if not name:
            raise click.UsageError("give NAME (or -f FILE)")
        if workers is None:
            raise click.UsageError("--workers is required without -f")
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name},
                "spec": {"model": model or name, "dataset": dataset or "custom", "numWorkers": workers}}
    spec = body["spec"]
    if workers is not None:
        spec["numWorkers"] = workers
    if gpus_per_worker is not None:
        spec["gpusPerWorker"] = gpus_per_worker
        if gpus_per_worker == 0:
            spec.setdefault("networking", {})["backend"] = "gloo"
    for key, value in (("image", image), ("model", model), ("dataset", dataset)):
        if value is not None:
            spec[key] = value
    if epochs is not None:
        spec.setdefault("hyperparameters", {})["epochs"] = epochs
    if checkpoints is not None:
        spec.setdefault("checkpoint", {})["enabled"] = checkpoints
    if backoff_limit is not None:
        spec.setdefault("failurePolicy", {})["backoffLimit"] = backoff_limit
    if deadline is not None:
        spec.setdefault("failurePolicy", {})["activeDeadlineSeconds"] = deadline
    if command:
        spec["command"] = list(command)
    namespace = settings.namespace()
    body["metadata"].pop("namespace", None)
    created = settings.api.create_trainingjob(namespace, body)
    if output == "table":
        click.echo(f"trainingjob.{GROUP}/{created['metadata']['name']} submitted in namespace {namespace}")
    else:
        print_object(created, output)


# -- list / get --------------------------------------------------------------------------------
def _row(obj: dict, all_ns: bool, wide: bool = False) -> list[Any]:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    row = [obj["metadata"]["name"], st.get("state") or "Pending", st.get("progress") or "-",
           st.get("currentEpoch", "-") if st.get("currentEpoch") is not None else "-",
           st.get("restartCount") or 0, age(obj["metadata"].get("creationTimestamp"))]
    if wide:
        row += [spec.get("numWorkers", "-"), spec.get("gpusPerWorker", 1), spec.get("image") or "-"]
    return ([obj["metadata"].get("namespace", "")] if all_ns else []) + row


@train.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="TrainingJobs in every namespace.")
@selector_option("TrainingJobs")
@output_option(formats=LIST_FORMATS)
@kube_options()
@pass_settings
def list_(settings: Settings, all_namespaces: bool, selector: str | None, output: str) -> None:
    """List TrainingJobs: state, progress, epoch, restarts (-o wide adds workers, GPUs per worker, image)."""
    items = settings.api.list_trainingjobs(None if all_namespaces else settings.namespace(), selector)
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    if print_objects(items, output, f"trainingjob.{GROUP}"):
        return
    wide = output == "wide"
    headers = (["NAMESPACE"] if all_namespaces else []) + ["NAME", "STATE", "PROGRESS", "EPOCH", "RESTARTS", "AGE"]
    headers += ["WORKERS", "GPUS-PER-WORKER", "IMAGE"] if wide else []
    print_table(headers, [_row(o, all_namespaces, wide) for o in items], empty="No trainingjobs found.")


def _worker_pods(api, namespace: str, name: str) -> list[dict]:
    pods = api.list_pods(namespace, f"job-name={name}")
    return sorted((p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")),
                  key=lambda p: (int(_index(p)) if _index(p).isdigit() else 999, p["metadata"].get("creationTimestamp", "")))


def _index(pod: dict) -> str:
    meta = pod.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(INDEX_LABEL) or (meta.get("labels") or {}).get(INDEX_LABEL) or "?")


def describe(obj: dict, pods: list[dict] | None, events: list[dict]) -> str:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    lines = [f"Name:        {obj['metadata']['name']}", f"Namespace:   {obj['metadata'].get('namespace', '')}",
             f"State:       {st.get('state') or 'Pending'}",
             f"Workers:     {spec.get('numWorkers')} x {spec.get('gpusPerWorker', 1)} GPU(s)  "
             f"(active {(st.get('workers') or {}).get('active', 0)}, failed {(st.get('workers') or {}).get('failed', 0)})",
             f"Progress:    {st.get('progress') or '-'}  epoch {st.get('currentEpoch', '-')}/{st.get('totalEpochs', '-')}"]
    metrics = st.get("metrics") or {}
    if metrics:
        lines.append("Metrics:     " + ", ".join(f"{k}={v:g}" for k, v in sorted(metrics.items())))
    ckpt = st.get("latestCheckpoint") or {}
    if ckpt:
        lines.append(f"Checkpoint:  {ckpt.get('path')} (epoch {ckpt.get('epoch')}, {st.get('checkpoints', '?')} kept)")
    lines.append(f"Restarts:    {st.get('restartCount') or 0}"
                 + (f"  (last: {st['lastRestartReason']})" if st.get("lastRestartReason") else ""))
    if st.get("failureReason"):
        lines.append(f"Failure:     {st['failureReason']}")
    if (st.get("result") or {}).get("reason"):
        lines.append(f"Result:      {st['result']['reason']}: {st['result'].get('message', '')}")
    if st.get("queue"):
        lines.append(f"Queue:       {st['queue'].get('message') or st['queue'].get('name')}")
    if st.get("duration"):
        lines.append(f"Duration:    {st['duration']}")
    lines.append("Conditions:")
    for c in st.get("conditions") or []:
        lines.append(f"  {c['type']:<10} {c['status']:<6} {c.get('reason', ''):<22} {truncate(c.get('message', ''), 80)}")
    if pods is not None:
        lines.append("Pods:")
        for p in pods:
            lines.append(f"  rank {_index(p):<3} {p['metadata']['name']:<32} {(p.get('status') or {}).get('phase', '')}")
    if events:
        lines.append("Events:")
        for e in events[-EVENTS_SHOWN:]:
            lines.append(f"  {e.get('type', ''):<8} {e.get('reason', ''):<20} {truncate(e.get('message', ''), 90)}")
    return "\n".join(lines)


@train.command("get")
@click.argument("name", callback=validate_name, shell_complete=complete.training_jobs)
@output_option()
@kube_options()
@pass_settings
def get(settings: Settings, name: str, output: str) -> None:
    """Show a TrainingJob: progress, epoch, metrics, checkpoint, restarts, workers, events."""
    namespace = settings.namespace()
    api = settings.api
    obj = api.get_trainingjob(namespace, name)
    if output != "table":
        print_object(obj, output)
        return
    try:
        pods = _worker_pods(api, namespace, name)
    except ApiError:
        pods = None
    try:
        events = api.list_core_events(namespace, name)
    except ApiError:
        events = []
    click.echo(describe(obj, pods, events))


# -- logs -----------------------------------------------------------------------------------------
@train.command("logs")
@click.argument("name", callback=validate_name, shell_complete=complete.training_jobs)
@click.option("--rank", type=click.IntRange(0, 99), help="Only this worker (the completion index); -f needs one.")
@click.option("-f", "--follow", is_flag=True, help="Stream the log (rank 0 unless --rank).")
@click.option("--tail", type=click.IntRange(0), help="Only the last N lines of each worker.")
@kube_options()
@pass_settings
def logs(settings: Settings, name: str, rank: int | None, follow: bool, tail: int | None) -> None:
    """Print the workers' logs, each line prefixed with its rank."""
    namespace = settings.namespace()
    api = settings.api
    api.get_trainingjob(namespace, name)  # a clear "not found" first
    pods = _worker_pods(api, namespace, name)
    if follow and rank is None:
        rank = 0
    if rank is not None:
        pods = [p for p in pods if _index(p) == str(rank)]
        if not pods:
            raise DevctlError(f"trainingjob {name} has no worker of rank {rank} now (see 'devctl train get {name}')")
        pods = pods[-1:]
    if not pods:
        raise DevctlError(f"trainingjob {name} has no workers now (see 'devctl train get {name}')")
    if follow:
        for chunk in api.pod_log(namespace, pods[0]["metadata"]["name"], follow=True, tail=tail):
            click.echo(chunk, nl=False)
        return
    for p in pods:
        text = api.pod_log(namespace, p["metadata"]["name"], tail=tail) or ""
        for line in text.splitlines():
            click.echo(f"[rank {_index(p)}] {line}")


# -- suspend / resume / delete ----------------------------------------------------------------------
def _set_suspend(settings: Settings, name: str, value: bool) -> None:
    namespace = settings.namespace()
    settings.api.patch_trainingjob(namespace, name, {"spec": {"suspend": value}})
    click.echo(f"trainingjob.{GROUP}/{name} {'suspended' if value else 'resumed'}"
               + (" (resumes from its newest checkpoint)" if not value else ""))


@train.command("suspend")
@click.argument("name", callback=validate_name, shell_complete=complete.training_jobs)
@kube_options()
@pass_settings
def suspend(settings: Settings, name: str) -> None:
    """Stop the workers (checkpoints and the claim are kept; Kueue quota is released)."""
    _set_suspend(settings, name, True)


@train.command("resume")
@click.argument("name", callback=validate_name, shell_complete=complete.training_jobs)
@kube_options()
@pass_settings
def resume(settings: Settings, name: str) -> None:
    """Start a suspended TrainingJob again, from its newest checkpoint."""
    _set_suspend(settings, name, False)


@train.command("delete")
@click.argument("name", callback=validate_name, shell_complete=complete.training_jobs)
@kube_options()
@pass_settings
def delete(settings: Settings, name: str) -> None:
    """Delete a TrainingJob and its workers. Its checkpoint claim <name>-checkpoints is kept."""
    namespace = settings.namespace()
    settings.api.delete_trainingjob(namespace, name)
    click.echo(f"trainingjob.{GROUP}/{name} deleted; checkpoints are kept "
               f"(persistentvolumeclaim {name}-checkpoints if the operator created it)")

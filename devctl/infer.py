"""``devctl infer``: EphemeralAccelerationJobs (torchdev.io/v1alpha1, roles/ephemeralaccelerationjob):
image inference on a GPU that leaves nothing behind.

A job's files live on its volume ``artifacts-<name>`` (mounted at /artifacts): ``create``
makes the volume, uploads a project directory into it, then creates the job; ``copy-file``
downloads a URL into it from inside the cluster; ``download`` brings it back; ``debug``
opens a shell beside it.  Each of these runs a short-lived helper pod (busybox) that mounts
the volume; files move with tar over the API's exec WebSocket (devctl/transfer.py), as
``kubectl cp`` moves them.  The operator deletes the inference pod and, later, the volume
(spec.ttlSecondsAfterFinished, spec.pvcTTLSecondsAfterFinished); ``cleanup`` deletes the
volumes past their TTL whatever happened to their job.
"""
from __future__ import annotations

import os
import posixpath
import re
import subprocess
import sys
import time
from datetime import timedelta
from typing import Any

import click

from . import API_VERSION, GROUP
from . import wait as waiting
from . import complete
from .settings import Settings
from .context import kube_options, pass_settings
from .errors import ApiError, DevctlError, NotFound, left_in_place
from .output import (DURATION, DurationType, age, human_duration, info, now, output_option, parse_time,
                     print_object, print_objects, print_table, selector_option, truncate)
from .transfer import DOWNLOAD_MAX_FILES

from ansible_collections.torchdev.operator.plugins.module_utils import ephemeralaccelerationjob as eaj
from ansible_collections.torchdev.operator.plugins.module_utils.quantity import is_quantity, parse_quantity
from ansible_collections.torchdev.operator.plugins.module_utils.constants import (
    EAJ_ARTIFACTS_DIR, EAJ_EXPIRES_ANNOTATION, EAJ_FINAL_PHASES, EAJ_HELPER_IMAGE, EAJ_LABEL, EAJ_TTL_ANNOTATION,
    LABEL_MANAGED_BY)

KIND = "EphemeralAccelerationJob"
NAME_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
HELPER_TIMEOUT = 300.0  # seconds for a helper pod to start
HELPER_LIFETIME = 3600  # a helper pod left behind ends itself (activeDeadlineSeconds)
USER_ID = 1000  # the helper pods' user, the inference pod's (the volume is group-writable for it)


def _byte_size(_ctx, param, value: str) -> int:
    """A size like 500Mi or 2Gi, in bytes (at least 1)."""
    if not is_quantity(value) or parse_quantity(value) < 1:
        raise click.BadParameter(f"{value!r} is not a size like 500Mi or 2Gi", param=param)
    return int(parse_quantity(value))


def validate_name(_ctx, _param, value: str | None) -> str | None:
    if value is not None and (not NAME_RE.match(value) or len(value) > eaj.NAME_MAX):
        raise click.BadParameter(
            f"{value!r} is not a valid job name: use lower-case letters, digits and '-', start with a letter, end "
            f"with a letter or digit, at most {eaj.NAME_MAX} characters")
    return value


def volume_path(value: str, what: str) -> str:
    if not eaj.in_volume(value):
        raise click.BadParameter(f"{value!r}: {what} must be a path in {EAJ_ARTIFACTS_DIR} (e.g. "
                                 f"{EAJ_ARTIFACTS_DIR}/input.jpg)")
    return value


@click.group("infer")
def infer() -> None:
    """Image inference on a GPU, ephemeral (EphemeralAccelerationJobs): upload, run, download.

    \b
      devctl infer create my-job --project-dir ./code --input-path /artifacts/image.jpg --wait
      devctl infer copy-file my-job https://example.com/cat.jpg --target-path /artifacts/cat.jpg
      devctl infer watch my-job
      devctl infer download my-job --to ./results
      devctl infer debug my-job
      devctl infer cleanup
    """


# -- helper pods ---------------------------------------------------------------------------------
def _managed_by_devctl(labels: dict) -> dict:
    return dict(labels, **{LABEL_MANAGED_BY: "devctl"})


def helper_pod(name: str, job: str, component: str, image: str, command: list[str]) -> dict:
    """A pod that mounts the job's volume at /artifacts (transfer: tar, wget; debug: a shell)."""
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": _managed_by_devctl(eaj.labels(job, component))},
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": HELPER_LIFETIME,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": 1,
            "securityContext": {"runAsNonRoot": True, "runAsUser": USER_ID, "runAsGroup": USER_ID, "fsGroup": USER_ID,
                                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": component, "image": image, "imagePullPolicy": "IfNotPresent", "command": command,
                "resources": {"requests": {"cpu": "100m", "memory": "64Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}},
                "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                                    "capabilities": {"drop": ["ALL"]}},
                "volumeMounts": [{"name": "artifacts", "mountPath": EAJ_ARTIFACTS_DIR}],
            }],
            "volumes": [{"name": "artifacts", "persistentVolumeClaim": {"claimName": eaj.claim_name(job)}}],
        },
    }


def wait_running(api, namespace: str, name: str, timeout: float) -> dict:
    start = time.monotonic()
    last = None
    while True:
        pod = api.get_pod(namespace, name)
        status = pod.get("status") or {}
        phase = status.get("phase") or "Pending"
        if phase == "Running" and any("running" in (cs.get("state") or {}) for cs in status.get("containerStatuses") or []):
            return pod
        if phase in ("Succeeded", "Failed"):
            raise DevctlError(f"the helper pod {name} ended ({phase}) before it was used: {status.get('message') or ''}")
        why = next((c.get("message") for c in status.get("conditions") or []
                    if c.get("type") == "PodScheduled" and c.get("status") == "False"), None)
        state = f"{phase}" + (f": {why}" if why else "")
        if state != last:
            info(f"helper pod {name}: {state}")
            last = state
        if time.monotonic() - start >= timeout:
            raise DevctlError(f"timed out after {human_duration(timeout)} waiting for the helper pod {name} to run "
                              f"(last state: {state})")
        time.sleep(waiting.POLL_INTERVAL)


class Helper:
    """``with Helper(...) as pod:`` a running helper pod, deleted at the end (``keep``: not)."""

    def __init__(self, api, namespace: str, job: str, component: str, image: str, command: list[str] | None = None,
                 keep: bool = False, timeout: float = HELPER_TIMEOUT):
        suffix = time.strftime("%Y%m%d%H%M%S", time.gmtime())
        self.name = f"{component}-{job}-{suffix}"[:63].rstrip("-")
        self.api, self.namespace, self.keep, self.timeout = api, namespace, keep, timeout
        self.body = helper_pod(self.name, job, component, image, command or ["sleep", str(HELPER_LIFETIME)])

    def __enter__(self) -> str:
        self.api.create_pod(self.namespace, self.body)
        try:
            wait_running(self.api, self.namespace, self.name, self.timeout)
        except BaseException:
            self._delete()
            raise
        return self.name

    def __exit__(self, *exc) -> None:
        if not self.keep:
            self._delete()

    def _delete(self) -> None:
        try:
            self.api.delete_pod(self.namespace, self.name)
        except NotFound:
            pass


# -- the volume ------------------------------------------------------------------------------------
def ensure_volume(api, namespace: str, name: str, spec: dict, ttl: int) -> dict:
    """The job's volume artifacts-<name>: created with the spec the operator renders
    (module_utils claim_spec: it adopts it unchanged), or the one there already."""
    claim = eaj.claim_name(name)
    body = {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "labels": _managed_by_devctl(eaj.labels(name, "artifacts")),
                         "annotations": {EAJ_TTL_ANNOTATION: str(int(ttl))}},
            "spec": eaj.claim_spec(spec)}
    try:
        created = api.create_pvc(namespace, body)
        info(f"persistentvolumeclaim/{claim} created ({body['spec']['resources']['requests']['storage']})")
        return created
    except ApiError as exc:
        if exc.status != 409:
            raise
    live = api.get_pvc(namespace, claim)
    if ((live.get("metadata") or {}).get("labels") or {}).get(EAJ_LABEL) != name:
        raise DevctlError(f"persistentvolumeclaim {claim} exists and is not the volume of job {name}")
    info(f"persistentvolumeclaim/{claim} exists: using it")
    return live


def _volume_of(api, namespace: str, name: str) -> dict:
    try:
        return api.get_pvc(namespace, eaj.claim_name(name))
    except NotFound:
        try:
            job = api.get_eaj(namespace, name)
        except NotFound:
            raise DevctlError(f"job {name} has no volume {eaj.claim_name(name)} in namespace {namespace} "
                              f"(create it with 'devctl infer create {name}')") from None
        when = (job.get("status") or {}).get("artifactsExpireAt")
        raise DevctlError(f"the volume {eaj.claim_name(name)} of job {name} is gone"
                          + (f" (deleted at {when}, pvcTTLSecondsAfterFinished)" if when else "")) from None


# -- create -----------------------------------------------------------------------------------------
@infer.command("create")
@click.argument("name", callback=validate_name)
@click.option("--project-dir", type=click.Path(exists=True, file_okay=False), help="Uploaded into /artifacts first.")
@click.option("--input-path", required=True, metavar="PATH", callback=lambda c, p, v: volume_path(v, "--input-path"),
              help="The image or the directory of images, in /artifacts.")
@click.option("--input-type", type=click.Choice(["image", "directory"]),
              help="image or directory (default: directory when the project has one there).")
@click.option("--model", default="resnet50", show_default=True,
              help="resnet50, mobilenet_v3_small, or a model file in /artifacts (.pt, .ts, .safetensors).")
@click.option("--output-path", default=EAJ_ARTIFACTS_DIR + "/output.json", show_default=True,
              callback=lambda c, p, v: volume_path(v, "--output-path"), help="The results file, in /artifacts.")
@click.option("--gpus", type=click.IntRange(0, 8), default=1, show_default=True, help="GPUs (0: on the CPU).")
@click.option("--pod-ttl", type=DurationType(0, 604800, whole=True), default="0", show_default=True, metavar="DURATION",
              help="Keep the pod this long after the job finished (its logs): 0, 90s, 10m, 1d (at most 7d).")
@click.option("--pvc-ttl", type=DurationType(0, 2592000, whole=True), default="1h", show_default=True,
              metavar="DURATION",
              help="Keep the volume this long after the job finished (to download the results; at most 30d).")
@click.option("--storage-class", help="The volume's storage class (default: the cluster's).")
@click.option("--pvc-size", default="1Gi", show_default=True, help="The volume's size.")
@click.option("--image", help="The inference image (default: the operator's, pytorch/pytorch).")
@click.option("--helper-image", default=EAJ_HELPER_IMAGE, show_default=True, help="Image of the upload pod (tar).")
@click.option("--wait", is_flag=True, help="Wait until the job finished, showing its progress.")
@click.option("--timeout", type=DURATION, default="1h", show_default=True, help="How long --wait waits.")
@output_option(default="table", formats=("table", "json", "yaml"))
@kube_options()
@pass_settings
def create(settings: Settings, name: str, project_dir: str | None, input_path: str, input_type: str | None,
           model: str, output_path: str, gpus: int, pod_ttl: int, pvc_ttl: int, storage_class: str | None,
           pvc_size: str, image: str | None, helper_image: str, wait: bool, timeout: float, output: str) -> None:
    """Create the volume, upload --project-dir into it, then create the job NAME."""
    if pvc_ttl < pod_ttl:
        raise click.BadParameter("--pvc-ttl must not be shorter than --pod-ttl (the pod uses the volume)",
                                 param_hint="--pvc-ttl")
    if input_type is None:
        local = os.path.join(project_dir, input_path[len(EAJ_ARTIFACTS_DIR) + 1:]) if project_dir else ""
        input_type = "directory" if local and os.path.isdir(local) else "image"
    spec: dict[str, Any] = {"model": model, "input": {"type": input_type, "path": input_path},
                            "output": {"path": output_path}, "resources": {"gpu": gpus},
                            "ttlSecondsAfterFinished": pod_ttl, "pvcTTLSecondsAfterFinished": pvc_ttl,
                            "pvcSize": pvc_size}
    if storage_class:
        spec["storageClass"] = storage_class
    if image:
        spec["image"] = image
    problem = eaj.spec_problem(spec, name)
    if problem:
        raise DevctlError(problem["message"])
    namespace = settings.namespace()
    api = settings.api
    try:
        api.get_eaj(namespace, name)
        raise DevctlError(f'job "{name}" already exists in namespace "{namespace}"')
    except NotFound:
        pass
    ensure_volume(api, namespace, name, spec, pvc_ttl)
    with left_in_place(f"the volume {eaj.claim_name(name)}", f"'devctl infer create {name}' again uses it, "
                       f"'devctl infer cleanup' deletes it {pvc_ttl}s from now"):
        if project_dir:
            from .transfer import upload

            with Helper(api, namespace, name, "transfer", helper_image) as pod:
                upload(api, namespace, pod, project_dir, EAJ_ARTIFACTS_DIR)
        body = {"apiVersion": API_VERSION, "kind": KIND, "metadata": {"name": name}, "spec": spec}
        created = api.create_eaj(namespace, body)
    if output == "table":
        click.echo(f"ephemeralaccelerationjob.{GROUP}/{name} created in namespace {namespace}")
    else:
        print_object(created, output)
    if wait:
        with left_in_place(f"job {name} (created)", f"'devctl infer watch {name}' follows it, "
                                                    f"'devctl infer delete {name}' deletes it"):
            watch_job(api, namespace, name, timeout)


# -- copy-file -------------------------------------------------------------------------------------
@infer.command("copy-file")
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@click.argument("url")
@click.option("--target-path", required=True, metavar="PATH", callback=lambda c, p, v: volume_path(v, "--target-path"),
              help="Where the file goes, in /artifacts.")
@click.option("--pvc-size", default="1Gi", show_default=True, help="The volume's size, when it is created here.")
@click.option("--storage-class", help="The volume's storage class, when it is created here.")
@click.option("--pvc-ttl", type=click.IntRange(0, 2592000), default=3600, show_default=True, metavar="SECONDS",
              help="The volume's TTL for 'devctl infer cleanup', when it is created here and no job follows.")
@click.option("--helper-image", default=EAJ_HELPER_IMAGE, show_default=True, help="Image of the copy pod (wget).")
@kube_options()
@pass_settings
def copy_file(settings: Settings, name: str, url: str, target_path: str, pvc_size: str, storage_class: str | None,
              pvc_ttl: int, helper_image: str) -> None:
    """Download URL into the volume of job NAME, from inside the cluster (the volume is created
    when it does not exist yet: create the job afterwards)."""
    if not re.match(r"^(https?|ftp)://", url):
        raise click.BadParameter(f"{url!r} is not an http(s) or ftp URL", param_hint="URL")
    namespace = settings.namespace()
    api = settings.api
    spec = {"pvcSize": pvc_size, **({"storageClass": storage_class} if storage_class else {})}
    try:
        api.get_pvc(namespace, eaj.claim_name(name))
    except NotFound:
        ensure_volume(api, namespace, name, spec, pvc_ttl)
    from .transfer import run

    with left_in_place(f"the volume {eaj.claim_name(name)}", f"'devctl infer copy-file {name}' again uses it, "
                       f"'devctl infer cleanup' deletes it after its TTL"), \
            Helper(api, namespace, name, "transfer", helper_image) as pod:
        code, _, err = run(api, namespace, pod, ["mkdir", "-p", posixpath.dirname(target_path)])
        if code == 0:
            code, _, err = run(api, namespace, pod, ["wget", "-q", "-O", target_path, url])
        if code != 0:
            raise DevctlError(f"cannot download {url} into {target_path}: {' '.join(err.split()) or f'exit code {code}'}")
    click.echo(f"{url} -> {eaj.claim_name(name)}:{target_path}")


# -- download ---------------------------------------------------------------------------------------
@infer.command("download")
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@click.option("--to", "target", type=click.Path(file_okay=False), help="Local directory (default ./<name>-artifacts).")
@click.option("--path", "source", default=EAJ_ARTIFACTS_DIR, show_default=True,
              callback=lambda c, p, v: v if v == EAJ_ARTIFACTS_DIR else volume_path(v, "--path"),
              help="The directory of the volume to download.")
@click.option("--helper-image", default=EAJ_HELPER_IMAGE, show_default=True, help="Image of the download pod (tar).")
@click.option("--links", is_flag=True,
              help="Keep symbolic links whose target stays below them (relative, no '..') and hard links to files "
                   "of the download (default: links are skipped and reported).")
@click.option("--max-size", default="20Gi", show_default=True, callback=_byte_size, metavar="QUANTITY",
              help="Stop past this much file data (e.g. 500Mi, 2Gi).")
@click.option("--max-files", type=click.IntRange(1), default=DOWNLOAD_MAX_FILES, show_default=True,
              help="Stop past this many files, directories and links.")
@kube_options()
@pass_settings
def download(settings: Settings, name: str, target: str | None, source: str, helper_image: str, links: bool,
             max_size: int, max_files: int) -> None:
    """Download the volume of job NAME (its results, and what was uploaded) to this machine.

    What a job left on its volume is untrusted: members with absolute paths or '..', devices
    and FIFOs are skipped, and so are symbolic and hard links unless --links; each skipped
    member is reported on stderr. Past --max-size or --max-files the download stops with an
    error (what was written stays)."""
    from .transfer import Extractor, download as fetch

    namespace = settings.namespace()
    api = settings.api
    _volume_of(api, namespace, name)
    target = target or f"{name}-artifacts"
    extractor = Extractor(target, max_bytes=max_size, max_files=max_files, links=links)
    with Helper(api, namespace, name, "transfer", helper_image) as pod:
        fetch(api, namespace, pod, source, target, extractor=extractor)
    click.echo(os.path.abspath(target))


# -- debug ------------------------------------------------------------------------------------------
@infer.command("debug", context_settings={"ignore_unknown_options": True})
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@click.argument("command", nargs=-1, type=click.UNPROCESSED)
@click.option("--keep", is_flag=True, help="Leave the pod running and print how to exec into it.")
@click.option("--helper-image", default=EAJ_HELPER_IMAGE, show_default=True, help="Image of the debug pod.")
@kube_options()
@pass_settings
def debug(settings: Settings, name: str, command: tuple[str, ...], keep: bool, helper_image: str) -> None:
    """A pod with the volume of job NAME at /artifacts: a shell in it (kubectl exec), or
    after -- a command; the pod is deleted afterwards unless --keep."""
    from .tunnel import find_kubectl

    namespace = settings.namespace()
    api = settings.api
    _volume_of(api, namespace, name)
    with Helper(api, namespace, name, "debug", helper_image, keep=keep) as pod:
        kubectl = find_kubectl() or "kubectl"
        tty = sys.stdin.isatty() and not command
        exec_cmd = [kubectl, *api.kubectl_args(), "exec", "-it" if tty else "-i", "-n", namespace, pod, "--",
                    *(command or ("sh",))]
        if keep:
            click.echo(f"pod/{pod} is running with {eaj.claim_name(name)} at {EAJ_ARTIFACTS_DIR}; it ends itself "
                       f"after {human_duration(HELPER_LIFETIME)}:")
            click.echo(f"  kubectl exec -it {pod} -n {namespace} -- sh")
            click.echo(f"  kubectl delete pod {pod} -n {namespace}")
            return
        try:
            code = subprocess.call(exec_cmd)
        except OSError as exc:
            raise DevctlError(f"cannot run {kubectl}: {exc.strerror}") from None
    if code:
        sys.exit(code)


# -- watch / get / list / logs ------------------------------------------------------------------------
def _condition(obj: dict, ctype: str) -> dict:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == ctype), {})


def describe_state(obj: dict) -> str:
    st = obj.get("status") or {}
    phase = st.get("phase") or "Pending"
    return f"{phase}: {st['message']}" if st.get("message") else phase


def watch_job(api, namespace: str, name: str, timeout: float) -> dict:
    """Print the job's progress until it finished; raise when it failed."""
    start = time.monotonic()
    last = None
    info(f"watching ephemeralaccelerationjob {name} (timeout {human_duration(timeout)})")
    while True:
        try:
            obj = api.get_eaj(namespace, name)
        except ApiError as exc:
            if isinstance(exc, NotFound) or exc.status not in waiting.TRANSIENT:
                raise
            obj = None
        if obj is not None:
            state = describe_state(obj)
            if state != last:
                info(f"[{human_duration(time.monotonic() - start)}] {name}: {state}")
                last = state
            phase = (obj.get("status") or {}).get("phase")
            if phase == "Succeeded":
                st = obj["status"]
                info(f"results: {st.get('artifactPath')} in {eaj.claim_name(name)} until {st.get('artifactsExpireAt')} "
                     f"('devctl infer download {name}')")
                return obj
            if phase == "Failed":
                failed = _condition(obj, "Failed")
                raise DevctlError(f"job {name} failed ({failed.get('reason') or 'Failed'}): "
                                  f"{(obj.get('status') or {}).get('message') or ''}")
        if time.monotonic() - start >= timeout:
            raise DevctlError(f"timed out after {human_duration(timeout)} waiting for job {name} (last state: {last})")
        time.sleep(waiting.POLL_INTERVAL)


@infer.command("watch")
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@click.option("--timeout", type=DURATION, default="1h", show_default=True, help="How long to follow the job.")
@kube_options()
@pass_settings
def watch(settings: Settings, name: str, timeout: float) -> None:
    """Follow job NAME until it succeeded (exit 0) or failed (exit 1)."""
    watch_job(settings.api, settings.namespace(), name, timeout)


def _row(obj: dict, all_ns: bool) -> list[Any]:
    st = obj.get("status") or {}
    spec = obj.get("spec") or {}
    row = [obj["metadata"]["name"], st.get("phase") or "Pending", spec.get("model", ""),
           (spec.get("resources") or {}).get("gpu", 1), st.get("artifactPath") or "-",
           st.get("artifactsExpireAt") or "-", age(obj["metadata"].get("creationTimestamp"))]
    return ([obj["metadata"].get("namespace", "")] if all_ns else []) + row


@infer.command("list")
@click.option("-A", "--all-namespaces", is_flag=True, help="Jobs in every namespace.")
@selector_option("jobs")
@output_option(formats=("table", "name", "json", "yaml"))
@kube_options()
@pass_settings
def list_(settings: Settings, all_namespaces: bool, selector: str | None, output: str) -> None:
    """List the jobs: phase, model, GPUs, results, when the volume goes."""
    items = settings.api.list_eajs(None if all_namespaces else settings.namespace(), selector)
    items.sort(key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
    if print_objects(items, output, f"ephemeralaccelerationjob.{GROUP}"):
        return
    headers = (["NAMESPACE"] if all_namespaces else []) + ["NAME", "PHASE", "MODEL", "GPUS", "RESULTS", "VOLUME UNTIL",
                                                            "AGE"]
    print_table(headers, [_row(o, all_namespaces) for o in items], empty="No ephemeralaccelerationjobs found.")


def describe(obj: dict) -> str:
    spec, st = obj.get("spec") or {}, obj.get("status") or {}
    name = obj["metadata"]["name"]
    inp = spec.get("input") or {}
    lines = [f"Name:        {name}", f"Namespace:   {obj['metadata'].get('namespace', '')}",
             f"Phase:       {st.get('phase') or 'Pending'}"]
    if st.get("message"):
        lines.append(f"Message:     {st['message']}")
    lines += [f"Model:       {spec.get('model')}", f"Input:       {inp.get('path')} ({inp.get('type')})",
              f"Output:      {(spec.get('output') or {}).get('path')}",
              f"GPUs:        {(spec.get('resources') or {}).get('gpu', 1)}",
              f"Pod:         {st.get('podName') or eaj.pod_name(name)} (kept {spec.get('ttlSecondsAfterFinished', 0)}s "
              f"after the job finished)",
              f"Volume:      {eaj.claim_name(name)} (kept {spec.get('pvcTTLSecondsAfterFinished', 3600)}s"
              + (f", until {st['artifactsExpireAt']}" if st.get("artifactsExpireAt") else "") + ")"]
    for label, key in (("Started", "startedAt"), ("Finished", "finishedAt"), ("Results", "artifactPath"),
                       ("Exit code", "exitCode")):
        if st.get(key) is not None:
            lines.append(f"{label + ':':<12} {st[key]}")
    lines.append("Conditions:")
    for c in st.get("conditions") or []:
        lines.append(f"  {c['type']:<19} {c['status']:<6} {c.get('reason', ''):<19} {truncate(c.get('message', ''), 70)}")
    return "\n".join(lines)


@infer.command("get")
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@output_option()
@kube_options()
@pass_settings
def get(settings: Settings, name: str, output: str) -> None:
    """Show job NAME: phase, message, model, input, output, pod, volume, times, conditions."""
    obj = settings.api.get_eaj(settings.namespace(), name)
    if output != "table":
        print_object(obj, output)
        return
    click.echo(describe(obj))


@infer.command("logs")
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@kube_options()
@pass_settings
def logs(settings: Settings, name: str) -> None:
    """Print the inference pod's log (kept ttlSecondsAfterFinished after the job finished)."""
    namespace = settings.namespace()
    api = settings.api
    obj = api.get_eaj(namespace, name)
    pod = (obj.get("status") or {}).get("podName") or eaj.pod_name(name)
    try:
        text = api.pod_log(namespace, pod)
    except NotFound:
        ttl = (obj.get("spec") or {}).get("ttlSecondsAfterFinished", 0)
        raise DevctlError(f"the pod {pod} of job {name} is gone (ttlSecondsAfterFinished {ttl}s; "
                          f"create the job with --pod-ttl to keep its log)") from None
    click.echo(text or "", nl=not (text or "").endswith("\n"))


# -- cleanup / delete -------------------------------------------------------------------------------
def _expiry(claim: dict, job: dict | None) -> Any:
    """When a volume may go: its job's artifactsExpireAt (a finished job), the time devctl
    wrote when it detached it from its deleted job, else (a volume whose job never came)
    its creation + its TTL annotation.  None: not yet known (the job runs)."""
    meta = claim.get("metadata") or {}
    annotations = meta.get("annotations") or {}
    if job is not None:
        st = job.get("status") or {}
        return parse_time(st.get("artifactsExpireAt")) if st.get("phase") in EAJ_FINAL_PHASES else None
    if annotations.get(EAJ_EXPIRES_ANNOTATION):
        return parse_time(annotations[EAJ_EXPIRES_ANNOTATION])
    try:
        ttl = int(annotations.get(EAJ_TTL_ANNOTATION) or 3600)
    except ValueError:
        ttl = 3600
    created = parse_time(meta.get("creationTimestamp"))
    return created + timedelta(seconds=ttl) if created else None


@infer.command("cleanup")
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted.")
@output_option()
@kube_options()
@pass_settings
def cleanup(settings: Settings, dry_run: bool, output: str) -> None:
    """Delete the job volumes past their TTL (also those of deleted jobs, and of jobs never created)."""
    namespace = settings.namespace()
    api = settings.api
    jobs = {o["metadata"]["name"]: o for o in api.list_eajs(namespace)}
    claims = api.list_pvcs(namespace, EAJ_LABEL)
    current = now()
    rows = []
    for claim in sorted(claims, key=lambda c: c["metadata"]["name"]):
        meta = claim["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        job = (meta.get("labels") or {}).get(EAJ_LABEL)
        expiry = _expiry(claim, jobs.get(job))
        if expiry is None or expiry > current:
            continue
        if not dry_run:
            try:
                api.delete_pvc(namespace, meta["name"])
            except NotFound:
                continue
        rows.append({"name": meta["name"], "job": job, "expired": expiry.strftime("%Y-%m-%dT%H:%M:%SZ"),
                     "deleted": not dry_run})
    if output != "table":
        print_object({"items": rows}, output)
        return
    print_table(["VOLUME", "JOB", "EXPIRED", "DELETED"], [[r["name"], r["job"], r["expired"], r["deleted"]] for r in rows],
                empty="No volume past its TTL.")


@infer.command("delete")
@click.argument("name", callback=validate_name, shell_complete=complete.inference_jobs)
@click.option("--delete-pvc", is_flag=True, help="Delete the volume now too (else it stays until its TTL: cleanup).")
@kube_options()
@pass_settings
def delete(settings: Settings, name: str, delete_pvc: bool) -> None:
    """Delete job NAME and its pod; its volume is kept until its TTL unless --delete-pvc."""
    namespace = settings.namespace()
    api = settings.api
    job = api.get_eaj(namespace, name)
    claim = eaj.claim_name(name)
    if not delete_pvc:
        st, spec = job.get("status") or {}, job.get("spec") or {}
        expires = st.get("artifactsExpireAt") or (now() + timedelta(seconds=int(spec.get("pvcTTLSecondsAfterFinished", 3600)))
                                                  ).strftime("%Y-%m-%dT%H:%M:%SZ")
        try:  # detached from the job: the garbage collector leaves it, cleanup deletes it after its TTL
            api.patch_pvc(namespace, claim, {"metadata": {"ownerReferences": None,
                                                          "annotations": {EAJ_EXPIRES_ANNOTATION: expires}}})
        except NotFound:
            expires = None
    api.delete_eaj(namespace, name)
    click.echo(f"ephemeralaccelerationjob.{GROUP}/{name} deleted")
    if delete_pvc:
        try:
            api.delete_pvc(namespace, claim)
            click.echo(f"persistentvolumeclaim/{claim} deleted")
        except NotFound:
            pass
    elif expires:
        click.echo(f"persistentvolumeclaim/{claim} kept until {expires} ('devctl infer cleanup' deletes it then)")

# -*- coding: utf-8 -*-
# Apache-2.0
"""The names and numbers torchdev's parts agree on: the API group and version, field
manager, label and annotation keys, ports, naming conventions and the documented condition
reasons (docs/api.md).

One source for the module_utils, the filters, the roles (the ``torchdev`` variable of the
``common`` role: this module's ``as_dict()``, through the ``torchdev.operator.constants``
lookup) and devctl.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

# --- API ----------------------------------------------------------------------------------
API_GROUP = "torchdev.io"
VERSION = "v1alpha1"
API_VERSION = API_GROUP + "/" + VERSION
FIELD_MANAGER = "torchdev-operator"
MANAGED_BY = "torchdev-operator"
PART_OF = "torchdev"

# --- labels ---------------------------------------------------------------------------------
LABEL_NAME = "app.kubernetes.io/name"
LABEL_INSTANCE = "app.kubernetes.io/instance"
LABEL_COMPONENT = "app.kubernetes.io/component"
LABEL_PART_OF = "app.kubernetes.io/part-of"
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
DEVSERVER_LABEL = API_GROUP + "/devserver"
OWNER_LABEL = API_GROUP + "/owner"
# An e-mail address as the CRDs check it (DevServer spec.owner, DevUser spec.email, UsageRecord
# spec.user); devctl checks its flags with the same pattern.
EMAIL_PATTERN = r"^[^@\s]+@[^@\s]+\.[^@\s]+$"
FLAVOR_LABEL = API_GROUP + "/flavor"
# On a DevUser's namespace (and every object its role renders): the DevUser's name.
USER_LABEL = API_GROUP + "/user"
POD_INDEX_LABEL = "apps.kubernetes.io/pod-index"

# --- annotations ----------------------------------------------------------------------------
# Hash of an object's desired state (plan.stamp): our intent changed when it differs.
DESIRED_HASH_ANNOTATION = API_GROUP + "/desired-hash"
# Hash of the pod-shaping fields of a flavor, set on DevServers to reconcile them.
FLAVOR_HASH_ANNOTATION = API_GROUP + "/flavor-hash"
# On a DevServer's pod template: hashes of its container command and of its <name>-scripts
# ConfigMap (a change rolls the pods).
CONFIG_HASH_ANNOTATION = API_GROUP + "/config-hash"
SCRIPTS_HASH_ANNOTATION = API_GROUP + "/scripts-hash"
# On the namespace dev-<name>, "devuser/<name>": the DevUser created it / adopted it.
CREATED_BY_ANNOTATION = API_GROUP + "/created-by"
ADOPTED_BY_ANNOTATION = API_GROUP + "/adopted-by"
# ansible-operator's dependent-watch annotations (objects not owned by their primary).
# On a stopped DevServer (spec.suspend true): who stopped it (user, idle, expired, cancelled)
# and when; devctl stop / cancel set them, the operator sets idle and expired.
STOPPED_BY_ANNOTATION = API_GROUP + "/stopped-by"
STOPPED_AT_ANNOTATION = API_GROUP + "/stopped-at"
# status.reservation.endReason by the stopped-by annotation.
STOP_REASONS = {"user": "Stopped", "idle": "Idle", "expired": "Expired", "cancelled": "Cancelled"}
# On a DevServer's StatefulSet, while Kueue has evicted the server and not admitted it again
# (eviction.server_release): the lastEvictionTime whose pods the operator released (scaled the
# StatefulSet to 0 so that the namespace's ResourceQuota counts none of them while it waits),
# and, while Kueue admits the Workload of the StatefulSet scaled to 0, its QuotaReserved time
# (a change of the StatefulSet that makes Kueue put that Workload on hold, so that it may be
# scaled up again).
RELEASED_EVICTION_ANNOTATION = API_GROUP + "/released-eviction"
KUEUE_HOLD_ANNOTATION = API_GROUP + "/kueue-hold"
# The DevServer watch's finalizer (watches.yaml): a DevServer deleted during a reservation
# leaves its UsageRecord (endReason Deleted) before it goes.
USAGE_FINALIZER = API_GROUP + "/devserver-usage"
PRIMARY_RESOURCE_ANNOTATION = "operator-sdk/primary-resource"
PRIMARY_RESOURCE_TYPE_ANNOTATION = "operator-sdk/primary-resource-type"

# --- resources ------------------------------------------------------------------------------
CPU, MEMORY = "cpu", "memory"
GPU_RESOURCE = "nvidia.com/gpu"
EFA_RESOURCE = "vpc.amazonaws.com/efa"
EXTENDED_RESOURCES = (GPU_RESOURCE, EFA_RESOURCE)

# --- ports of a DevServer's pods --------------------------------------------------------------
SSH_PORT = 2222
# torch.distributed: the c10d rendezvous (MASTER_PORT), then NCCL_PORTS ports for NCCL / Gloo.
RDZV_PORT = 29500
NCCL_PORTS = 10
# The DevServer entrypoint's exit code when the image has no sshd or ssh-keygen (EX_CONFIG of
# sysexits.h); its termination message starts with IMAGE_LACKS_SSH_PREFIX (devserver_status).
IMAGE_LACKS_SSH_EXIT_CODE = 78
IMAGE_LACKS_SSH_PREFIX = "torchdev: the image has no "

# --- DevUser naming ---------------------------------------------------------------------------
NAMESPACE_PREFIX = "dev-"
SHARED_CLAIM_SUFFIX = "-shared-efs"
LOCAL_QUEUE = "torchdev"
CLUSTER_QUEUE_PREFIX = "torchdev-"

# --- the roles' API tasks --------------------------------------------------------------------
# A kubernetes.core task whose request failed for a reason that passes (the filter retryable:
# 409, 429, 5xx, a broken connection) is tried API_RETRIES more times, API_RETRY_DELAY seconds
# apart, before the run fails (and the operator retries it with backoff).
API_RETRIES = 3
API_RETRY_DELAY = 1

# --- condition reasons (docs/api.md) -----------------------------------------------------------
# Degraded reasons of a problem with the spec or its flavor: permanent until one of them
# changes, so the run records them and ends successfully (no retries).
PROBLEM_REASONS = ("FlavorNotFound", "InvalidSpec", "InsufficientGPUs", "NamespaceNotOwned", "ClaimNotFound",
                   "QuotaExceeded")
REASON_INVALID_SPEC = "InvalidSpec"
REASON_RECONCILE_ERROR = "ReconcileError"
DEVSERVER_REASONS = {
    "Ready": ("ServerReady", "PodsNotReady", "Queued", "Suspended", "UserStopped", "IdleTimeout", "Expired",
              "Cancelled", "ReconcileFailed"),
    "Progressing": ("Provisioning", "Queued", "RollingUpdate", "Reconciled", "SpecRejected"),
    "Degraded": ("AsExpected", "FlavorNotFound", "InvalidSpec", "InsufficientGPUs", "ClaimNotFound", "QuotaExceeded",
                 "ReconcileError", "PodFailed", "ImageLacksSSH", "PodCreateRefused"),
    "Expiring": ("NoDeadline", "ReservationExpiring", "IdleShutdownPending", "IdleTimeout"),
    "HomeResized": ("AsRequested", "ResizeNotSupported", "ResizePending"),
    # once Kueue evicted the server: True with Kueue's eviction reason (these two, PodsReadyTimeout,
    # AdmissionCheck, ClusterQueueStopped, ...: eviction.py), False Readmitted
    "Evicted": ("Preempted", "Evicted", "Readmitted"),
}
DEVUSER_REASONS = {
    "Ready": ("UserReady", "ReconcileFailed"),
    "Degraded": ("AsExpected", "InvalidSpec", "NamespaceNotOwned", "ReconcileError"),
}
FLAVOR_REASONS = {"Ready": ("Valid", "InvalidSpec", "ReconcileError")}


def as_dict():
    """Every public constant, keyed by its lower-cased name (``api_version``, ``ssh_port``):
    the ``torchdev`` variable the roles read."""
    return {name.lower(): value for name, value in globals().items()
            if name.isupper() and not name.startswith("_")}

# --- TrainingJob (module_utils/trainingjob.py, trainingjob_status.py, torchdev_train) -------------
TRAININGJOB_LABEL = API_GROUP + "/trainingjob"
# On the Job: the attempt (status.restartCount when it was created).
TRAINING_ATTEMPT_ANNOTATION = API_GROUP + "/attempt"
# On a TrainingJob: the operator's own record of the run (JSON: state, restartCount, startTime,
# lastRestartTime, lastRestartReason, completionTime, reason), what decides its phase, restarts
# and deadline.  Not in the status: the trainer token may patch the status (the library's
# progress), never the object's metadata (module_utils/trainingjob_status.py ledger).
TRAINING_RUN_ANNOTATION = API_GROUP + "/run"
# The training code's status writes (the torchdev_train library); the operator's are FIELD_MANAGER.
TRAINING_FIELD_MANAGER = "torchdev-train"
TRAINING_LIB_DIR = "/opt/torchdev/lib"
TRAINING_HYPERPARAMETERS_PATH = "/etc/torchdev/hyperparameters.json"
# Exit codes of a worker that no restart can fix: torchdev_train's configuration error (3),
# command not executable (126), command not found (127).
TRAINING_PERMANENT_EXIT_CODES = (3, 126, 127)
# Status fields the library writes (field manager torchdev-train); the operator never writes them.
TRAINING_LIBRARY_STATUS_FIELDS = ("progress", "currentEpoch", "metrics", "latestCheckpoint", "checkpoints",
                                  "lastReportTime", "result")
TRAININGJOB_STATES = ("Pending", "Queued", "Initializing", "Running", "Restarting", "Suspended", "Completed", "Failed")
TRAININGJOB_REASONS = {
    "Running": ("Running", "Initializing", "Queued", "Restarting", "Suspended", "Completed", "Failed"),
    "Succeeded": ("AllEpochsCompleted", "TargetAccuracyReached", "EarlyStopped", "JobComplete"),
    "Failed": ("BackoffLimitExceeded", "DeadlineExceeded", "PermanentFailure", "ImagePullFailed", "WorkerFailed",
               "InvalidSpec", "InsufficientGPUs"),
    "Degraded": ("AsExpected", "InvalidSpec", "InsufficientGPUs", "ReconcileError", "PodCreateRefused"),
}

# --- EphemeralAccelerationJob (module_utils/ephemeralaccelerationjob*.py, torchdev_infer, devctl infer) ---------
EAJ_LABEL = API_GROUP + "/ephemeralaccelerationjob"
# The job's volume, mounted at EAJ_ARTIFACTS_DIR in the inference pod and devctl's helper pods;
# spec paths (model file, input, output) are paths in it.
EAJ_ARTIFACTS_DIR = "/artifacts"
EAJ_CLAIM_PREFIX = "artifacts-"
EAJ_POD_PREFIX = "ephemeralaccelerationjob-"
# The torchdev_infer runner (roles/ephemeralaccelerationjob/files/torchdev_infer): ConfigMap
# <name>-infer, mounted here and on the container's PYTHONPATH.
EAJ_RUNNER_DIR = "/opt/torchdev/infer"
EAJ_RUNNER_SUFFIX = "-infer"
# The built-in models (torchvision) and the model files the runner loads from the volume.
EAJ_MODELS = ("resnet50", "mobilenet_v3_small")
EAJ_MODEL_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript", ".safetensors")
EAJ_PHASES = ("Pending", "Running", "Succeeded", "Failed")
EAJ_FINAL_PHASES = ("Succeeded", "Failed")
# The runner's exit codes (torchdev_infer.runner: the same numbers) -> the Failed reason.
EAJ_EXIT_REASONS = {3: "InputNotFound", 4: "InputUnreadable", 5: "UnknownModel", 6: "ModelLoadFailed",
                    7: "OutputNotWritable", 1: "InferenceFailed"}
EAJ_REASONS = {
    "Succeeded": ("InferenceSucceeded", "Pending", "Running", "Failed"),
    "Failed": ("InputNotFound", "InputUnreadable", "UnknownModel", "ModelLoadFailed", "OutputNotWritable",
               "InferenceFailed", "PodFailed", "ImagePullFailed", "PodDeleted", "InvalidSpec",
               "Pending", "Running", "Succeeded"),
    "ArtifactsAvailable": ("Bound", "ClaimPending", "Expired", "Deleted"),
    "Degraded": ("AsExpected", "InvalidSpec", "ReconcileError", "PodCreateRefused"),
}
# On an artifacts volume devctl detached from its deleted job (devctl infer delete without
# --delete-pvc): when `devctl infer cleanup` may delete it (RFC 3339); and on every volume devctl
# creates, its TTL after the job finishes (seconds), for a volume whose job never came.
EAJ_EXPIRES_ANNOTATION = API_GROUP + "/artifacts-expire-at"
EAJ_TTL_ANNOTATION = API_GROUP + "/artifacts-ttl"
# devctl's helper pods (upload, download, copy-file, debug): a small image with tar, wget, sh.
EAJ_HELPER_IMAGE = "busybox:1.37"

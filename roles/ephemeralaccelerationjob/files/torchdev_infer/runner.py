"""The inference runner: load a model, classify images from the artifacts volume, write
output.json.

    python -m torchdev_infer --model resnet50 --input-type image --input /artifacts/input.jpg \\
        --output /artifacts/output.json [--artifacts-dir /artifacts] [--batch-size 16] [--device auto]

* ``--model``: ``resnet50`` or ``mobilenet_v3_small`` (torchvision's, with their pretrained
  weights: downloaded into $TORCH_HOME/hub/checkpoints, which the pod keeps in its own /tmp,
  never on the volume, checked against the hash in their file name and loaded with
  ``weights_only=True``; a TORCH_HOME on the volume is refused: a file planted there by an
  upload would be unpickled),
  or a model file in the volume: TorchScript (.pt, .pth, .ts, .torchscript; its labels, when
  saved with ``_extra_files={"labels.json": ...}``) or a .safetensors state dict of one of
  those two architectures (metadata ``architecture``, optional ``labels``: a JSON list;
  needs torchvision and safetensors).
* ``--input-type image``: one image file; ``directory``: every image in that directory
  (not recursive, sorted by name), in batches of ``--batch-size``.
* The images are prepared as torchvision's classification weights expect: RGB, the shorter
  side resized to 256 (bilinear), the centre 224x224, scaled to [0, 1] and normalised with
  the ImageNet mean and standard deviation.
* It runs on the GPU when torch sees one (``--device auto``), else on the CPU.
* ``output.json``: ``model``, ``input``, ``top5`` (``label``, ``probability``, ``index``;
  one image) or ``results`` (one entry per image with its ``image`` path and ``top5``; a
  directory), ``images``, ``elapsed_ms`` (the time spent in the model's forward passes),
  ``device``, ``timestamp`` (UTC, RFC 3339).  Written whole, at the end (a temporary file
  renamed).

A missing input, an unreadable image, an unknown model, a model that cannot be loaded or an
output that cannot be written end the run with a one-line message on stderr and in the
container's termination message (/dev/termination-log: the operator copies it into the
job's status) and the exit code of EXIT_CODES (the operator names the failure by it).
Nothing on the volume is removed.

Paths are paths in the volume (/artifacts/...); ``--artifacts-dir`` is where the volume is
mounted (/artifacts in the pod; the tests point it at a directory).
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import time

EXIT_CODES = {"InferenceFailed": 1, "InputNotFound": 3, "InputUnreadable": 4, "UnknownModel": 5,
              "ModelLoadFailed": 6, "OutputNotWritable": 7}
MOUNT = "/artifacts"
BUILTIN_MODELS = ("resnet50", "mobilenet_v3_small")
TORCHSCRIPT_SUFFIXES = (".pt", ".pth", ".ts", ".torchscript")
MODEL_SUFFIXES = TORCHSCRIPT_SUFFIXES + (".safetensors",)
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff", ".ppm", ".pgm")
# The last layer of each built-in architecture (its rows: the number of classes).
CLASSIFIER_WEIGHT = {"resnet50": "fc.weight", "mobilenet_v3_small": "classifier.3.weight"}
RESIZE, CROP = 256, 224
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
TOP = 5
TERMINATION_LOG = "/dev/termination-log"
MESSAGE_LIMIT = 4096


class InferenceError(Exception):
    """A failure with its reason (a key of EXIT_CODES) and a one-line message."""

    def __init__(self, reason: str, message: str):
        super().__init__(message)
        self.reason = reason
        self.message = " ".join(str(message).split())

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.reason]


# --------------------------------------------------------------------------- paths
def local_path(path: str, artifacts_dir: str) -> str:
    """Where ``path`` (a path in the volume, /artifacts/...) is on this machine."""
    norm = os.path.normpath("/" + str(path).lstrip("/")) if str(path).startswith("/") else None
    if norm is None or not (norm == MOUNT or norm.startswith(MOUNT + "/")):
        raise InferenceError("InputNotFound", "%s is not a path in the volume (%s/...)" % (path, MOUNT))
    rest = norm[len(MOUNT):].lstrip("/")
    return os.path.join(artifacts_dir, rest) if rest else artifacts_dir


def find_images(input_type: str, path: str, artifacts_dir: str) -> list:
    """[(local path, volume path)] of the images to classify."""
    local = local_path(path, artifacts_dir)
    if input_type == "image":
        if os.path.isdir(local):
            raise InferenceError("InputUnreadable", "input %s is a directory: use input.type directory" % path)
        if not os.path.isfile(local):
            raise InferenceError("InputNotFound", "input image %s does not exist" % path)
        return [(local, path)]
    if input_type != "directory":
        raise InferenceError("InputNotFound", "unknown input type %r (image or directory)" % input_type)
    if not os.path.isdir(local):
        raise InferenceError("InputNotFound", "input directory %s does not exist" % path)
    names = sorted(n for n in os.listdir(local)
                   if n.lower().endswith(IMAGE_SUFFIXES) and os.path.isfile(os.path.join(local, n)))
    if not names:
        raise InferenceError("InputNotFound", "input directory %s holds no images (%s)" % (path, ", ".join(IMAGE_SUFFIXES)))
    return [(os.path.join(local, n), path.rstrip("/") + "/" + n) for n in names]


# --------------------------------------------------------------------------- images
def preprocess(image):
    """A PIL image -> a float tensor [3, 224, 224], as torchvision's ImageClassification
    transform of the resnet50 / mobilenet_v3_small weights prepares it."""
    import torch
    from PIL import Image

    image = image.convert("RGB")
    width, height = image.size
    short, long = (width, height) if width <= height else (height, width)
    new_short, new_long = RESIZE, int(RESIZE * long / short)
    size = (new_short, new_long) if width <= height else (new_long, new_short)
    image = image.resize(size, Image.BILINEAR)
    left = int(round((size[0] - CROP) / 2.0))
    top = int(round((size[1] - CROP) / 2.0))
    image = image.crop((left, top, left + CROP, top + CROP))
    pixels = torch.frombuffer(bytearray(image.tobytes()), dtype=torch.uint8).reshape(CROP, CROP, 3)
    tensor = pixels.permute(2, 0, 1).float().div(255.0)
    mean = torch.tensor(MEAN).view(3, 1, 1)
    std = torch.tensor(STD).view(3, 1, 1)
    return (tensor - mean) / std


def read_image(local: str, shown: str):
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(local) as image:
            image.load()
            return preprocess(image)
    except (OSError, ValueError, UnidentifiedImageError, Image.DecompressionBombError) as exc:
        raise InferenceError("InputUnreadable", "cannot read image %s: %s" % (shown, exc)) from None


# --------------------------------------------------------------------------- models
def _torchvision(why: str):
    try:
        import torchvision  # noqa: F401
        import torchvision.models
    except Exception as exc:  # noqa: BLE001 - ImportError, or a torchvision built for another torch
        raise InferenceError("ModelLoadFailed", "%s needs torchvision, which cannot be imported in this image (%s: %s); "
                                                "use a TorchScript model file" % (why, type(exc).__name__, exc)) from None
    return torchvision


def load_model(model: str, artifacts_dir: str):
    """(module in eval mode, labels or None, kind)."""
    if model in BUILTIN_MODELS:
        tv = _torchvision("the model %s" % model)
        weights = tv.models.get_model_weights(model).DEFAULT
        state = builtin_state(weights, artifacts_dir)
        last = state.get(CLASSIFIER_WEIGHT[model]) if isinstance(state, dict) else None
        classes = int(last.shape[0]) if last is not None else len(weights.meta.get("categories") or []) or 1000
        net = tv.models.get_model(model, weights=None, num_classes=classes)
        try:
            net.load_state_dict(state)
        except Exception as exc:  # noqa: BLE001 - missing / unexpected keys, shapes
            raise InferenceError("ModelLoadFailed", "the pretrained weights %s do not fit %s: %s"
                                 % (weights, model, str(exc).splitlines()[0])) from None
        return net.eval(), list(weights.meta.get("categories") or []) or None, "torchvision"
    if not (isinstance(model, str) and model.startswith("/") and model.endswith(MODEL_SUFFIXES)):
        raise InferenceError("UnknownModel", "unknown model %r: use %s, or a model file in %s (%s)" % (
            model, " or ".join(BUILTIN_MODELS), MOUNT, ", ".join(MODEL_SUFFIXES)))
    try:
        local = local_path(model, artifacts_dir)
    except InferenceError as exc:
        raise InferenceError("UnknownModel", exc.message) from None
    if not os.path.isfile(local):
        raise InferenceError("UnknownModel", "model file %s does not exist" % model)
    if model.endswith(".safetensors"):
        return load_safetensors(local, model)
    import torch

    extra = {"labels.json": ""}
    try:
        net = torch.jit.load(local, map_location="cpu", _extra_files=extra)
    except Exception as exc:  # noqa: BLE001 - torch raises RuntimeError, ValueError, zipfile errors
        raise InferenceError("ModelLoadFailed", "%s is not a TorchScript model: %s" % (model, str(exc).splitlines()[0]
                                                                                         if str(exc) else type(exc).__name__)) from None
    labels = _labels(extra["labels.json"], model)
    return net.eval(), labels, "torchscript"


def builtin_state(weights, artifacts_dir: str) -> dict:
    """The state dict of torchvision's pretrained ``weights`` (their ``url``): the file in
    $TORCH_HOME/hub/checkpoints, downloaded there when missing (its sha256 checked against the
    hash in its name), loaded with weights_only=True (tensors only: a pickle that would run
    code is refused).  A hub directory on the artifacts volume is refused."""
    import torch

    hub = os.path.realpath(torch.hub.get_dir())
    volume = os.path.realpath(artifacts_dir)
    if hub == volume or hub.startswith(volume.rstrip(os.sep) + os.sep):
        raise InferenceError("ModelLoadFailed", "TORCH_HOME (%s) is on the artifacts volume: the weights of %s are "
                                                "never loaded from where an upload can write (use a model file)"
                             % (torch.hub.get_dir(), weights))
    try:
        return torch.hub.load_state_dict_from_url(weights.url, model_dir=os.path.join(hub, "checkpoints"),
                                                  map_location="cpu", progress=False, check_hash=True,
                                                  weights_only=True)
    except Exception as exc:  # noqa: BLE001 - a download, a hash or a pickle that went wrong
        raise InferenceError("ModelLoadFailed", "cannot load the pretrained weights %s: %s (give a model file)"
                             % (weights, str(exc).strip().splitlines()[0] if str(exc).strip()
                                else type(exc).__name__)) from None


def _labels(raw, where: str):
    if not raw:
        return None
    try:
        labels = json.loads(raw)
    except ValueError:
        raise InferenceError("ModelLoadFailed", "the labels of %s are not a JSON list" % where) from None
    if not isinstance(labels, list):
        raise InferenceError("ModelLoadFailed", "the labels of %s are not a JSON list" % where)
    return [str(label) for label in labels]


def load_safetensors(local: str, model: str):
    try:
        from safetensors import safe_open
    except ImportError:
        raise InferenceError("ModelLoadFailed", "%s: the safetensors package is not installed in this image" % model) from None
    try:
        with safe_open(local, framework="pt") as fh:
            metadata = dict(fh.metadata() or {})
            state = {key: fh.get_tensor(key) for key in fh.keys()}
    except Exception as exc:  # noqa: BLE001 - SafetensorError and friends
        raise InferenceError("ModelLoadFailed", "%s is not a safetensors file: %s" % (model, exc)) from None
    arch = metadata.get("architecture")
    if arch not in BUILTIN_MODELS:
        raise InferenceError("ModelLoadFailed", "%s: its metadata must name the architecture (architecture: %s), got %r" % (
            model, " or ".join(BUILTIN_MODELS), arch))
    tv = _torchvision("the safetensors model %s (architecture %s)" % (model, arch))
    last = state.get(CLASSIFIER_WEIGHT[arch])
    if last is None:
        raise InferenceError("ModelLoadFailed", "%s has no %s: not %s weights" % (model, CLASSIFIER_WEIGHT[arch], arch))
    net = tv.models.get_model(arch, weights=None, num_classes=int(last.shape[0]))
    try:
        net.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - missing / unexpected keys, shapes
        raise InferenceError("ModelLoadFailed", "%s does not fit %s: %s" % (model, arch, str(exc).splitlines()[0])) from None
    return net.eval(), _labels(metadata.get("labels"), model), "safetensors"


# --------------------------------------------------------------------------- inference
def pick_device(device: str = "auto") -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def classify(net, batch, device: str):
    """(top-k probabilities, indices) of a batch [n, 3, 224, 224] and the seconds it took."""
    import torch

    start = time.perf_counter()
    with torch.inference_mode():
        out = net(batch.to(device))
        if isinstance(out, (tuple, list)):
            out = out[0]
        if not isinstance(out, torch.Tensor) or out.dim() != 2 or out.shape[0] != batch.shape[0]:
            raise InferenceError("InferenceFailed", "the model returned %s, not logits of shape [images, classes]" % (
                tuple(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__))
        probs = torch.softmax(out.float(), dim=1)
        top = torch.topk(probs, min(TOP, probs.shape[1]), dim=1)
        values, indices = top.values.cpu(), top.indices.cpu()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    return values, indices, time.perf_counter() - start


def _top(values, indices, labels):
    out = []
    for p, i in zip(values.tolist(), indices.tolist()):
        label = labels[i] if labels and i < len(labels) else "class_%d" % i
        out.append({"label": label, "probability": round(float(p), 6), "index": int(i)})
    return out


def write_output(doc: dict, output: str, artifacts_dir: str) -> str:
    try:
        local = local_path(output, artifacts_dir)
    except InferenceError as exc:
        raise InferenceError("OutputNotWritable", exc.message) from None
    tmp = local + ".tmp"
    try:
        os.makedirs(os.path.dirname(local) or ".", exist_ok=True)
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        os.replace(tmp, local)
    except OSError as exc:
        raise InferenceError("OutputNotWritable", "cannot write %s: %s" % (output, exc.strerror or exc)) from None
    return local


def run(model: str, input_type: str, input_path: str, output: str, artifacts_dir: str = MOUNT,
        batch_size: int = 16, device: str = "auto", log=print) -> dict:
    """Classify the input, write ``output`` and return its document (raises InferenceError)."""
    import torch

    images = find_images(input_type, input_path, artifacts_dir)
    device = pick_device(device)
    log("loading %s" % model)
    net, labels, kind = load_model(model, artifacts_dir)
    try:
        net = net.to(device)
    except Exception as exc:  # noqa: BLE001
        raise InferenceError("ModelLoadFailed", "cannot move %s to %s: %s" % (model, device, exc)) from None
    log("%s model on %s; %d image(s) from %s" % (kind, device, len(images), input_path))
    results, spent = [], 0.0
    batch_size = max(int(batch_size), 1)
    for first in range(0, len(images), batch_size):
        chunk = images[first:first + batch_size]
        batch = torch.stack([read_image(local, shown) for local, shown in chunk])
        values, indices, seconds = classify(net, batch, device)
        spent += seconds
        for (_local, shown), v, i in zip(chunk, values, indices):
            results.append({"image": shown, "top5": _top(v, i, labels)})
        log("batch %d/%d: %d image(s) in %.1f ms" % (first // batch_size + 1, (len(images) + batch_size - 1) // batch_size,
                                                    len(chunk), seconds * 1000))
    doc = {"model": model, "input": input_path}
    if input_type == "image":
        doc["top5"] = results[0]["top5"]
    else:
        doc["results"] = results
    doc.update({
        "images": len(results),
        "elapsed_ms": round(spent * 1000, 2),
        "device": device.split(":")[0],
        "timestamp": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    })
    if device.startswith("cuda"):
        doc["device_name"] = torch.cuda.get_device_name(0)
    write_output(doc, output, artifacts_dir)
    best = results[0]["top5"][0]
    log("wrote %s: %s %s %.4f" % (output, results[0]["image"], best["label"], best["probability"]))
    return doc


def _report(message: str, termination_log: str) -> None:
    print("error: " + message, file=sys.stderr)
    try:
        with open(termination_log, "w") as fh:
            fh.write(message[:MESSAGE_LIMIT])
    except OSError:
        pass  # not in a pod (or no termination log): stderr is enough


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="torchdev_infer", description="Classify images with a PyTorch model.")
    parser.add_argument("--model", required=True)
    parser.add_argument("--input-type", choices=("image", "directory"), default="image")
    parser.add_argument("--input", required=True)
    parser.add_argument("--output", default=MOUNT + "/output.json")
    parser.add_argument("--artifacts-dir", default=MOUNT)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--termination-log", default=os.environ.get("TORCHDEV_TERMINATION_LOG", TERMINATION_LOG))
    args = parser.parse_args(argv)
    try:
        run(args.model, args.input_type, args.input, args.output, args.artifacts_dir, args.batch_size, args.device,
            log=lambda line: print(line, flush=True))
    except InferenceError as exc:
        _report(exc.message, args.termination_log)
        return exc.exit_code
    except Exception as exc:  # noqa: BLE001 - anything else is an inference failure with its cause
        _report("inference failed: %s: %s" % (type(exc).__name__, " ".join(str(exc).split())), args.termination_log)
        return EXIT_CODES["InferenceFailed"]
    return 0

"""The inference runner torchdev_infer (roles/ephemeralaccelerationjob/files/torchdev_infer),
for real on the CPU: a small model written by the test (TorchScript; a .safetensors state
dict), generated images, and the top-5 checked against a plain PyTorch forward pass of the
same model on the same pixels, prepared here independently.  Failures: exit code, a clear
message on stderr and in the termination log, nothing on the volume removed.

torchvision does not import beside this machine's CPU torch: the built-in models and the
safetensors architectures are exercised with a stand-in ``torchvision`` module (its
``models.get_model`` / ``get_model_weights``), which is the only part of torchvision the
runner calls."""
from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

import torch

from torchdev_infer.runner import EXIT_CODES, InferenceError, main, run

from _infer_models import LABELS, TinyNet, assert_matches, reference, tiny, write_image


@pytest.fixture
def volume(tmp_path):
    """The artifacts volume: the TorchScript model (with its labels), three images."""
    root = tmp_path / "artifacts"
    (root / "images").mkdir(parents=True)
    net = tiny()
    torch.jit.save(torch.jit.script(net), str(root / "model.pt"), _extra_files={"labels.json": json.dumps(LABELS)})
    write_image(root / "images" / "a.png", 256, 256, 1)
    write_image(root / "images" / "b.png", 320, 240, 2)   # landscape: resized, then cropped
    write_image(root / "images" / "c.png", 230, 300, 3)   # portrait
    (root / "images" / "notes.txt").write_text("not an image, not in the batch")
    return root, net


def test_one_image_matches_a_plain_forward_pass(volume):
    root, net = volume
    doc = run("/artifacts/model.pt", "image", "/artifacts/images/b.png", "/artifacts/out/output.json", str(root),
              log=lambda line: None)
    written = json.loads((root / "out" / "output.json").read_text())
    assert written == doc
    assert set(doc) == {"model", "input", "top5", "images", "elapsed_ms", "device", "timestamp"}
    assert doc["model"] == "/artifacts/model.pt" and doc["device"] == "cpu" and doc["images"] == 1
    assert doc["elapsed_ms"] > 0 and doc["timestamp"].endswith("Z")
    assert_matches(doc["top5"], reference(net, root / "images" / "b.png"), LABELS)
    assert sum(t["probability"] for t in doc["top5"]) <= 1.0 + 1e-6


def test_a_directory_in_batches(volume):
    root, net = volume
    lines = []
    doc = run("/artifacts/model.pt", "directory", "/artifacts/images", "/artifacts/output.json", str(root),
              batch_size=2, log=lines.append)
    assert [r["image"] for r in doc["results"]] == ["/artifacts/images/%s.png" % n for n in "abc"]
    for result in doc["results"]:
        assert_matches(result["top5"], reference(net, root / result["image"][len("/artifacts/"):]), LABELS)
    assert doc["images"] == 3 and "top5" not in doc
    assert [line.split(":")[0] for line in lines if line.startswith("batch")] == ["batch 1/2", "batch 2/2"]


def test_a_model_without_labels_names_classes_by_index(tmp_path):
    root = tmp_path / "artifacts"
    root.mkdir()
    net = tiny(7)
    torch.jit.save(torch.jit.script(net), str(root / "plain.ts"))
    write_image(root / "x.png", 256, 256, 9)
    doc = run("/artifacts/plain.ts", "image", "/artifacts/x.png", "/artifacts/o.json", str(root), log=lambda line: None)
    assert_matches(doc["top5"], reference(net, root / "x.png"))


# --------------------------------------------------------------------------- failures
def run_main(root, *args, model="/artifacts/model.pt", input_type="image", inp="/artifacts/images/a.png",
             output="/artifacts/output.json"):
    log = root.parent / "termination-log"
    code = main(["--model", model, "--input-type", input_type, "--input", inp, "--output", output,
                 "--artifacts-dir", str(root), "--termination-log", str(log), *args])
    return code, (log.read_text() if log.exists() else "")


@pytest.mark.parametrize("kwargs,reason,text", [
    ({"inp": "/artifacts/images/missing.jpg"}, "InputNotFound", "input image /artifacts/images/missing.jpg does not exist"),
    ({"input_type": "directory", "inp": "/artifacts/nothing"}, "InputNotFound", "input directory /artifacts/nothing does not exist"),
    ({"inp": "/artifacts/../etc/passwd"}, "InputNotFound", "is not a path in the volume"),
    ({"inp": "/artifacts/broken.jpg"}, "InputUnreadable", "cannot read image /artifacts/broken.jpg"),
    ({"input_type": "directory", "inp": "/artifacts/mixed"}, "InputUnreadable", "cannot read image /artifacts/mixed/b.jpg"),
    ({"inp": "/artifacts/images"}, "InputUnreadable", "is a directory: use input.type directory"),
    ({"model": "vgg16"}, "UnknownModel", "unknown model 'vgg16': use resnet50 or mobilenet_v3_small"),
    ({"model": "/artifacts/missing.pt"}, "UnknownModel", "model file /artifacts/missing.pt does not exist"),
    ({"model": "/artifacts/garbage.pt"}, "ModelLoadFailed", "/artifacts/garbage.pt is not a TorchScript model"),
    ({"model": "resnet50"}, "ModelLoadFailed", "the model resnet50 needs torchvision"),
    ({"output": "/artifacts/images/a.png/out.json"}, "OutputNotWritable", "cannot write /artifacts/images/a.png/out.json"),
])
def test_failures_exit_with_a_clear_message_and_keep_the_volume(volume, kwargs, reason, text, capsys, monkeypatch):
    root, _net = volume
    monkeypatch.setitem(sys.modules, "torchvision", None)  # whatever this machine has: not importable
    (root / "broken.jpg").write_bytes(b"\xff\xd8 this is not a JPEG")
    (root / "mixed").mkdir()
    write_image(root / "mixed" / "a.png", 256, 256, 4)
    (root / "mixed" / "b.jpg").write_text("truncated")
    (root / "garbage.pt").write_bytes(b"PK\x03\x04 not a zip archive")
    before = sorted(p.relative_to(root) for p in root.rglob("*"))
    code, message = run_main(root, **kwargs)
    assert code == EXIT_CODES[reason], (code, message)
    assert text in message and "\n" not in message.strip()
    assert capsys.readouterr().err.strip() == "error: " + message
    assert sorted(p.relative_to(root) for p in root.rglob("*")) == before  # nothing written, nothing removed


def test_the_module_runs_as_the_pod_runs_it(volume, tmp_path):
    """python -m torchdev_infer, as the inference container runs it (PYTHONPATH: the runner)."""
    root, net = volume
    log = tmp_path / "termination-log"
    proc = subprocess.run([sys.executable, "-m", "torchdev_infer", "--model", "/artifacts/model.pt", "--input",
                           "/artifacts/images/a.png", "--artifacts-dir", str(root), "--termination-log", str(log)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "wrote /artifacts/output.json" in proc.stdout and not log.exists()
    assert_matches(json.loads((root / "output.json").read_text())["top5"], reference(net, root / "images" / "a.png"), LABELS)


# --------------------------------------------------------------------------- torchvision's models
def fake_torchvision(nets, categories=None):
    """A stand-in for torchvision: models.get_model(name, weights=..., num_classes=...) and
    models.get_model_weights(name).DEFAULT (its meta categories), as the runner calls them."""
    calls = []

    class Weights:
        def __init__(self, name):
            self.name, self.meta = name, {"categories": categories or []}
            self.url = "https://download.invalid/models/%s-00000000.pth" % name

        def __str__(self):
            return "%s_Weights.IMAGENET1K_V1" % self.name

        def get_state_dict(self, *args, **kwargs):  # torchvision/models/_api.py, as it is
            return torch.hub.load_state_dict_from_url(self.url, *args, **kwargs)

    def get_model(name, weights=None, num_classes=1000):
        calls.append((name, str(weights) if weights else None, num_classes))
        torch.manual_seed(99)  # a fresh, untrained model: load_state_dict must fill it
        net = type(nets[name])(num_classes).eval()
        if weights is not None:  # torchvision's models/resnet.py, as it is
            net.load_state_dict(weights.get_state_dict(progress=True, check_hash=True))
        return net

    models = types.ModuleType("torchvision.models")
    models.get_model = get_model
    models.get_model_weights = lambda name: types.SimpleNamespace(DEFAULT=Weights(name))
    tv = types.ModuleType("torchvision")
    tv.models = models
    return tv, models, calls


def test_builtin_models_come_from_torchvision_with_their_weights(volume, monkeypatch, tmp_path):
    root, _ = volume
    net = tiny(3)
    tv, models, calls = fake_torchvision({"mobilenet_v3_small": net}, categories=LABELS)
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    # the weights, as torchvision's download leaves them in the pod's own TORCH_HOME
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "pod-tmp" / "torch"))
    (tmp_path / "pod-tmp" / "torch" / "hub" / "checkpoints").mkdir(parents=True)
    torch.save(net.state_dict(), tmp_path / "pod-tmp" / "torch" / "hub" / "checkpoints" / "mobilenet_v3_small-00000000.pth")
    doc = run("mobilenet_v3_small", "image", "/artifacts/images/c.png", "/artifacts/output.json", str(root),
              log=lambda line: None)
    assert calls == [("mobilenet_v3_small", None, 10)]  # the architecture, sized by the weights the runner loaded
    assert_matches(doc["top5"], reference(net, root / "images" / "c.png"), LABELS)


class Planted:
    """A pickle that writes a marker file when it is unpickled (its __reduce__ calls open)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("torch_home", ["volume", "pod"])
def test_planted_builtin_weights_are_never_unpickled(volume, monkeypatch, tmp_path, torch_home):
    """Issue 25.4: an upload that plants .cache/torch/hub/checkpoints/resnet50-*.pth on the volume
    (where TORCH_HOME pointed) or a pickle in the hub directory: refused, the marker never written."""
    root, _ = volume
    tv, models, _ = fake_torchvision({"resnet50": TinyNet().eval()})
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    home = root / ".cache" / "torch" if torch_home == "volume" else tmp_path / "pod-tmp" / "torch"
    monkeypatch.setenv("TORCH_HOME", str(home))
    (home / "hub" / "checkpoints").mkdir(parents=True)
    marker = tmp_path / "pwned"
    torch.save(Planted(marker), home / "hub" / "checkpoints" / "resnet50-00000000.pth")
    with pytest.raises(InferenceError) as err:
        run("resnet50", "image", "/artifacts/images/a.png", "/artifacts/o.json", str(root), log=lambda line: None)
    assert not marker.exists()
    assert err.value.reason == "ModelLoadFailed"
    assert ("on the artifacts volume" if torch_home == "volume" else "Weights only load failed") in err.value.message


def save_safetensors(state, path, metadata=None):
    """The safetensors format written by hand (safetensors.torch.save_file needs numpy, which
    this machine lacks): little-endian header length, JSON header, the raw float32 data."""
    import struct

    header, blobs, offset = {}, [], 0
    for key, tensor in state.items():
        data = tensor.detach().contiguous().to(torch.float32).flatten()
        raw = struct.pack("<%df" % data.numel(), *data.tolist())
        header[key] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def test_a_safetensors_state_dict_of_a_builtin_architecture(volume, monkeypatch):
    save_file = save_safetensors
    root, _ = volume
    trained = tiny(5)
    save_file(trained.state_dict(), str(root / "finetuned.safetensors"),
              metadata={"architecture": "resnet50", "labels": json.dumps(LABELS)})
    save_file(trained.state_dict(), str(root / "anonymous.safetensors"))
    tv, models, calls = fake_torchvision({"resnet50": TinyNet().eval()})
    monkeypatch.setitem(sys.modules, "torchvision", tv)
    monkeypatch.setitem(sys.modules, "torchvision.models", models)
    doc = run("/artifacts/finetuned.safetensors", "image", "/artifacts/images/a.png", "/artifacts/o.json", str(root),
              log=lambda line: None)
    assert calls == [("resnet50", None, 10)]  # the architecture, sized by the weights, untrained
    assert_matches(doc["top5"], reference(trained, root / "images" / "a.png"), LABELS)
    code, message = run_main(root, model="/artifacts/anonymous.safetensors")
    assert code == EXIT_CODES["ModelLoadFailed"] and "must name the architecture" in message

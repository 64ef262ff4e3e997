"""A small image classifier and images for the inference runner's tests (tests/eaj,
tests/e2e): written by the tests, checked against a plain PyTorch forward pass."""
from __future__ import annotations

import torch
from PIL import Image
from pytest import approx

MEAN = torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)
STD = torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)
LABELS = ["cat", "dog", "car", "tree", "boat", "cup", "pen", "key", "sun", "fox"]


class TinyNet(torch.nn.Module):
    """Ten classes; a stride-4 convolution keeps it fast, the weights make it non-trivial."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 5, stride=4)
        self.fc = torch.nn.Linear(8 * 4 * 4, classes)

    def forward(self, x):
        x = torch.nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 4)
        return self.fc(x.flatten(1)) * 4.0


def tiny(seed=0):
    torch.manual_seed(seed)
    return TinyNet().eval()


def write_image(path, width, height, seed):
    g = torch.Generator().manual_seed(seed)
    pixels = torch.randint(0, 256, (3, height, width), generator=g).float().unsqueeze(0)
    pixels = torch.nn.functional.avg_pool2d(pixels, 3, 1, 1)[0]  # smooth: resizing is not pure noise
    data = bytes(pixels.permute(1, 2, 0).to(torch.uint8).flatten().tolist())
    Image.frombytes("RGB", (width, height), data).save(path)


def reference(net, path):
    """Plain PyTorch: the image as torchvision prepares it (shorter side 256, centre 224,
    ImageNet normalisation), one forward pass, softmax, top 5."""
    image = Image.open(path).convert("RGB")
    w, h = image.size
    if (w, h) != (256, 256):
        size = (256, int(256 * h / w)) if w <= h else (int(256 * w / h), 256)
        image = image.resize(size, Image.BILINEAR)
        w, h = size
    data = torch.tensor(list(image.tobytes()), dtype=torch.uint8).reshape(h, w, 3)
    top, left = int(round((h - 224) / 2.0)), int(round((w - 224) / 2.0))
    x = (data[top:top + 224, left:left + 224].permute(2, 0, 1).float() / 255.0 - MEAN) / STD
    with torch.no_grad():
        probs = torch.softmax(net(x.unsqueeze(0)), dim=1)[0]
    values, indices = torch.topk(probs, 5)
    return values.tolist(), indices.tolist()


def assert_matches(top5, expected, labels=None):
    values, indices = expected
    assert [t["index"] for t in top5] == indices
    assert [t["probability"] for t in top5] == approx(values, abs=2e-6)
    assert [t["label"] for t in top5] == [labels[i] if labels else "class_%d" % i for i in indices]

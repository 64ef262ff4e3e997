#!/usr/bin/env python3
"""GPU health check for a DevServer pod.

    python gpu_check.py                 # every visible GPU, human-readable
    python gpu_check.py --json          # JSON report on stdout
    python gpu_check.py --allow-cpu     # no GPU: run the same checks on the CPU

Per GPU: name, compute capability, memory total/free; bf16/fp16/fp32 matmul TFLOP/s
(CUDA events, after warmup; the result is compared with a float64 reference on a small
problem so a wrong answer fails even when it is fast); a memtest-ish check that
allocates --mem-fraction of the free memory and writes/reads back three patterns
(0x55.., 0xAA.., each element's own index).  Also torch/CUDA/cuDNN/NCCL/driver versions.

Exit codes: 0 healthy; 1 a check failed (wrong matmul, memory errors, below
--min-tflops); 2 no GPU visible (unless --allow-cpu); 3 torch cannot be imported;
64 bad command line.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

EXIT_OK, EXIT_FAILED, EXIT_NO_GPU, EXIT_NO_TORCH, EXIT_USAGE = 0, 1, 2, 3, 64
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
# Relative Frobenius error of C = A @ B vs float64, for K=256 random normal inputs.
TOLERANCE = {"bf16": 3e-2, "fp16": 5e-3, "fp32": 1e-4}
PATTERNS = (("0x55", 0x5555555555555555), ("0xAA", -0x5555555555555556), ("index", None))


class _Parser(argparse.ArgumentParser):
    def error(self, message):  # argparse's exit 2 would read as "no GPU"
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, "%s: error: %s\n" % (self.prog, message))


def parser():
    p = _Parser(description=__doc__.split("\n")[0])
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="write the JSON report to PATH, or stdout when no PATH")
    p.add_argument("--allow-cpu", action="store_true", help="without a GPU, run the checks on the CPU (exit 0)")
    p.add_argument("--devices", default="all", help="comma-separated GPU indices (default: all visible)")
    p.add_argument("--dtypes", default="bf16,fp16,fp32", help="matmul dtypes (bf16, fp16, fp32)")
    p.add_argument("--size", type=int, default=None, help="matmul N (NxN @ NxN); default 8192 on GPU, 256 on CPU")
    p.add_argument("--iters", type=int, default=None, help="timed matmuls (default 20 GPU, 3 CPU)")
    p.add_argument("--warmup", type=int, default=None, help="untimed matmuls (default 5 GPU, 1 CPU)")
    p.add_argument("--mem-fraction", type=float, default=0.5,
                   help="fraction of the free GPU memory the memtest allocates (default 0.5)")
    p.add_argument("--cpu-mem-mib", type=int, default=64, help="memtest size on the CPU path (default 64 MiB)")
    p.add_argument("--min-tflops", type=float, default=None,
                   help="fail when the bf16 (else first dtype) matmul is slower than this")
    return p


def driver_version():
    try:
        import pynvml  # noqa: F401 - optional

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else version
    except Exception:
        pass
    smi = shutil.which("nvidia-smi")
    if smi:
        try:
            out = subprocess.run([smi, "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=20)
            if out.returncode == 0 and out.stdout.strip():
                return out.stdout.strip().splitlines()[0].strip()
        except Exception:
            pass
    try:
        with open("/proc/driver/nvidia/version") as fh:
            for word in fh.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    return None


def versions(torch):
    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "driver": None, "cudnn": None, "nccl": None}
    if torch.cuda.is_available():
        info["driver"] = driver_version()
        try:
            info["cudnn"] = torch.backends.cudnn.version()
        except Exception:
            pass
        try:
            info["nccl"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:
            pass
    return info


def matmul_check(torch, device, name, n, iters, warmup):
    dtype = getattr(torch, DTYPES[name])
    cuda = device.type == "cuda"
    result = {"dtype": name, "n": n, "iters": iters}
    # Correctness: small problem vs float64 on the CPU.
    gen = torch.Generator(device="cpu").manual_seed(1234)
    a64 = torch.randn(128, 256, generator=gen, dtype=torch.float64)
    b64 = torch.randn(256, 128, generator=gen, dtype=torch.float64)
    a, b = a64.to(device=device, dtype=dtype), b64.to(device=device, dtype=dtype)
    ref = a.double().cpu() @ b.double().cpu()  # reference from the rounded inputs
    got = (a @ b).double().cpu()
    rel = (torch.linalg.norm(got - ref) / torch.linalg.norm(ref)).item()
    result["rel_error"] = rel
    result["correct"] = bool(rel == rel and rel <= TOLERANCE[name])
    # Throughput.
    x = torch.randn(n, n, device=device, dtype=dtype)
    y = torch.randn(n, n, device=device, dtype=dtype)
    out = torch.empty(n, n, device=device, dtype=dtype)
    for _ in range(warmup):
        torch.matmul(x, y, out=out)
    if cuda:
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            torch.matmul(x, y, out=out)
        end.record()
        end.synchronize()
        seconds = start.elapsed_time(end) / 1e3
    else:
        t0 = time.perf_counter()
        for _ in range(iters):
            torch.matmul(x, y, out=out)
        seconds = time.perf_counter() - t0
    finite = bool(torch.isfinite(out).all().item())
    result["seconds"] = seconds
    result["tflops"] = 2.0 * n ** 3 * iters / seconds / 1e12 if seconds > 0 else float("inf")
    result["finite"] = finite
    result["ok"] = result["correct"] and finite
    del x, y, out
    return result


def memtest(torch, device, nbytes):
    """Write/read-verify ``nbytes`` (rounded down to int64s) with three patterns, in chunks."""
    count = max(1, nbytes // 8)
    result = {"bytes": count * 8, "patterns": [], "errors": 0}
    cuda = device.type == "cuda"
    t0 = time.perf_counter()
    try:
        buf = torch.empty(count, dtype=torch.int64, device=device)
    except RuntimeError as exc:  # torch.cuda.OutOfMemoryError is a RuntimeError
        result.update(ok=False, error="allocation of %d bytes failed: %s" % (count * 8, exc))
        return result
    chunk = 1 << 26  # 512 MiB of int64 per compare: bounded scratch memory
    for label, value in PATTERNS:
        errors = 0
        if value is None:
            for lo in range(0, count, chunk):
                hi = min(count, lo + chunk)
                torch.arange(lo, hi, dtype=torch.int64, device=device, out=buf[lo:hi])
        else:
            buf.fill_(value)
        if cuda:
            torch.cuda.synchronize(device)
        for lo in range(0, count, chunk):
            hi = min(count, lo + chunk)
            if value is None:
                expect = torch.arange(lo, hi, dtype=torch.int64, device=device)
                errors += int((buf[lo:hi] != expect).sum().item())
                del expect
            else:
                errors += int((buf[lo:hi] != value).sum().item())
        result["patterns"].append({"pattern": label, "errors": errors})
        result["errors"] += errors
    del buf
    if cuda:
        torch.cuda.synchronize(device)
        torch.cuda.empty_cache()
    result["seconds"] = time.perf_counter() - t0
    result["ok"] = result["errors"] == 0
    return result


def check_device(torch, device, args, dtypes):
    cuda = device.type == "cuda"
    info = {"device": str(device)}
    if cuda:
        props = torch.cuda.get_device_properties(device)
        free, total = torch.cuda.mem_get_info(device)
        info.update(index=device.index, name=props.name, capability="%d.%d" % (props.major, props.minor),
                    multiprocessors=props.multi_processor_count, total_bytes=total, free_bytes=free)
        mem_bytes = int(free * args.mem_fraction)
    else:
        info.update(index=None, name="cpu (%d threads)" % torch.get_num_threads())
        mem_bytes = args.cpu_mem_mib * 2 ** 20
    n = args.size or (8192 if cuda else 256)
    iters = args.iters or (20 if cuda else 3)
    warmup = args.warmup if args.warmup is not None else (5 if cuda else 1)
    info["matmul"] = {}
    for name in dtypes:
        try:
            info["matmul"][name] = matmul_check(torch, device, name, n, iters, warmup)
        except RuntimeError as exc:
            info["matmul"][name] = {"dtype": name, "ok": False, "error": str(exc)}
    info["memtest"] = memtest(torch, device, mem_bytes)
    problems = []
    for name, res in info["matmul"].items():
        if not res.get("ok"):
            problems.append("%s matmul %s" % (name, res.get("error") or "wrong result (rel error %.3g)" % res.get("rel_error", float("nan"))))
    if args.min_tflops is not None:
        key = "bf16" if "bf16" in info["matmul"] else dtypes[0]
        tflops = info["matmul"][key].get("tflops", 0.0)
        if tflops < args.min_tflops:
            problems.append("%s matmul %.1f TFLOP/s below --min-tflops %.1f" % (key, tflops, args.min_tflops))
    if not info["memtest"]["ok"]:
        problems.append("memtest: %s" % (info["memtest"].get("error") or "%d errors" % info["memtest"]["errors"]))
    info["problems"] = problems
    info["ok"] = not problems
    return info


def emit(report, args):
    if args.json:
        text = json.dumps(report, indent=2, sort_keys=True, default=str)
        if args.json == "-":
            print(text)
            return
        with open(args.json, "w") as fh:
            fh.write(text + "\n")
    print_human(report)


def print_human(report):
    v = report.get("versions") or {}
    print("torch %s, CUDA %s, driver %s, cuDNN %s, NCCL %s" % (
        v.get("torch"), v.get("cuda"), v.get("driver"), v.get("cudnn"), v.get("nccl")))
    print("mode %s, %d GPU(s) visible (CUDA_VISIBLE_DEVICES=%s)" % (
        report["mode"], report["device_count"], report.get("cuda_visible_devices")))
    if report.get("message"):
        print(report["message"])
    for dev in report.get("devices", []):
        extra = ""
        if dev.get("total_bytes"):
            extra = ", %.1f GiB total / %.1f GiB free, sm_%s" % (
                dev["total_bytes"] / 2 ** 30, dev["free_bytes"] / 2 ** 30, dev["capability"].replace(".", ""))
        print("[%s] %s%s" % (dev["device"], dev["name"], extra))
        for name, res in dev["matmul"].items():
            if "error" in res:
                print("  matmul %-4s  ERROR %s" % (name, res["error"]))
            else:
                print("  matmul %-4s  %10.3f TFLOP/s (N=%d)  rel.err %.2e  %s" % (
                    name, res["tflops"], res["n"], res["rel_error"], "OK" if res["ok"] else "FAIL"))
        mem = dev["memtest"]
        print("  memtest      %.2f GiB x %d patterns, %d errors  %s" % (
            mem["bytes"] / 2 ** 30, len(mem.get("patterns", [])), mem.get("errors", 0),
            "OK" if mem.get("ok") else "FAIL %s" % mem.get("error", "")))
    print("result: %s" % ("PASS" if report["ok"] else "FAIL" + (": " + "; ".join(report.get("problems", [])) if report.get("problems") else "")))


def main(argv=None):
    args = parser().parse_args(argv)
    dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    bad = [d for d in dtypes if d not in DTYPES]
    if bad or not dtypes:
        print("gpu_check: error: unknown dtype(s) %s (choose from %s)" % (", ".join(bad), ", ".join(DTYPES)), file=sys.stderr)
        return _usage()
    if not 0 < args.mem_fraction <= 0.95:
        print("gpu_check: error: --mem-fraction must be in (0, 0.95]", file=sys.stderr)
        return _usage()
    try:
        import torch
    except ImportError as exc:
        report = {"ok": False, "mode": "none", "device_count": 0, "devices": [],
                  "message": "torch cannot be imported: %s" % exc, "versions": {}}
        emit(report, args)
        return EXIT_NO_TORCH
    report = {"versions": versions(torch), "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0, "devices": []}
    if report["device_count"] == 0:
        reason = ("torch %s is a CPU-only build" % torch.__version__ if torch.version.cuda is None
                  else "CUDA build %s sees no GPU (driver missing, no nvidia.com/gpu limit, or CUDA_VISIBLE_DEVICES=%r)"
                  % (torch.version.cuda, os.environ.get("CUDA_VISIBLE_DEVICES")))
        if not args.allow_cpu:
            report.update(ok=False, mode="none", message="no GPU visible: %s; --allow-cpu runs the checks on the CPU" % reason,
                          problems=["no GPU visible"])
            emit(report, args)
            return EXIT_NO_GPU
        report["mode"] = "cpu"
        report["message"] = "no GPU visible (%s): checks run on the CPU (--allow-cpu)" % reason
        devices = [torch.device("cpu")]
    else:
        report["mode"] = "cuda"
        if args.devices == "all":
            indices = list(range(report["device_count"]))
        else:
            try:
                indices = [int(x) for x in args.devices.split(",") if x.strip()]
            except ValueError:
                print("gpu_check: error: --devices takes GPU indices, e.g. 0,1", file=sys.stderr)
                return _usage()
            if any(i < 0 or i >= report["device_count"] for i in indices):
                print("gpu_check: error: --devices %s: only %d GPU(s) visible" % (args.devices, report["device_count"]), file=sys.stderr)
                return _usage()
        devices = [torch.device("cuda", i) for i in indices]
    for device in devices:
        if device.type == "cuda":
            torch.cuda.set_device(device)
        report["devices"].append(check_device(torch, device, args, dtypes))
    report["problems"] = ["%s: %s" % (d["device"], p) for d in report["devices"] for p in d["problems"]]
    report["ok"] = not report["problems"]
    emit(report, args)
    return EXIT_OK if report["ok"] else EXIT_FAILED


def _usage():
    return EXIT_USAGE  # EX_USAGE: a bad command line, distinct from the health results


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""All-reduce check for a DevServer: correctness and bandwidth, like nccl-tests' all_reduce_perf.

Run it on every pod with devrun (torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_*):

    devrun allreduce_check.py                       # 1 KiB .. 64 MiB, table on rank 0
    devrun allreduce_check.py --sizes 1M,256M --iters 50 --json report.json

For every message size each rank fills a buffer with rank+1 and all-reduces it (SUM);
every element must then equal world*(world+1)/2 exactly (checked before and after the
timed loop, on every rank; the error counts are all-reduced so every rank agrees).
The timed loop runs --warmup untimed then --iters timed all-reduces; the time is the
slowest rank's mean.  algbw = bytes / time, busbw = algbw * 2(n-1)/n (nccl-tests'
convention: the per-link traffic of a ring all-reduce, comparable across world sizes).

Backend: --backend, else TORCHDEV_BACKEND, else nccl when CUDA is available, else gloo.
nccl runs on cuda:LOCAL_RANK; gloo on the CPU.
Exit codes: 0 every result correct; 1 a wrong result (or a collective error);
2 usage/environment error (e.g. not started by torchrun/devrun).
"""

import argparse
import datetime
import json
import os
import re
import sys
import time

DEFAULT_SIZES = "1K,4K,16K,64K,256K,1M,4M,16M,64M"
_UNITS = {"": 1, "B": 1, "K": 2 ** 10, "KB": 2 ** 10, "KIB": 2 ** 10, "M": 2 ** 20, "MB": 2 ** 20,
          "MIB": 2 ** 20, "G": 2 ** 30, "GB": 2 ** 30, "GIB": 2 ** 30}
DTYPES = ("float32", "float64", "int32", "int64")


def parse_size(text):
    match = re.fullmatch(r"\s*([0-9]+)\s*([A-Za-z]*)\s*", text)
    if not match or match.group(2).upper() not in _UNITS:
        raise argparse.ArgumentTypeError("invalid size %r (e.g. 1024, 4K, 1M, 1GiB)" % text)
    value = int(match.group(1)) * _UNITS[match.group(2).upper()]
    if value <= 0:
        raise argparse.ArgumentTypeError("size must be positive: %r" % text)
    return value


def parse_sizes(text):
    sizes = [parse_size(part) for part in text.split(",") if part.strip()]
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sizes


def human(nbytes):
    for unit, factor in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= factor and nbytes % factor == 0:
            return "%d %s" % (nbytes // factor, unit)
    return "%d B" % nbytes


def bus_factor(world):
    return 2.0 * (world - 1) / world if world > 0 else 0.0


def parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sizes", type=parse_sizes, default=parse_sizes(DEFAULT_SIZES),
                   help="comma-separated message sizes in bytes, K/M/G suffixes (default %s)" % DEFAULT_SIZES)
    p.add_argument("--iters", type=int, default=20, help="timed all-reduces per size (default 20)")
    p.add_argument("--warmup", type=int, default=5, help="untimed all-reduces per size (default 5)")
    p.add_argument("--dtype", choices=DTYPES, default="float32")
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default=None,
                   help="default: $TORCHDEV_BACKEND, else auto (nccl with CUDA, else gloo)")
    p.add_argument("--timeout", type=float, default=300.0, help="process-group timeout in seconds (default 300)")
    p.add_argument("--inject-fault", type=int, default=None, metavar="RANK",
                   help="self-test of the checker: RANK contributes rank+2 in the verified all-reduces, so the check must FAIL")
    p.add_argument("--json", nargs="?", const="-", default=None, metavar="PATH",
                   help="write a JSON report (rank 0) to PATH, or stdout when no PATH (the table is then not printed)")
    return p


def pick_backend(requested, torch):
    backend = requested or os.environ.get("TORCHDEV_BACKEND") or "auto"
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend not in ("nccl", "gloo"):
        raise SystemExit("allreduce_check: error: unknown backend %r (TORCHDEV_BACKEND?)" % backend)
    return backend


def fail_usage(message):
    print("allreduce_check: error: %s" % message, file=sys.stderr)
    sys.exit(2)


def main(argv=None):
    args = parser().parse_args(argv)
    if args.iters < 1 or args.warmup < 0:
        fail_usage("--iters must be >= 1 and --warmup >= 0")
    missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not os.environ.get(v)]
    if missing:
        fail_usage("%s not set: start this under torchrun, e.g. `devrun %s`" % (", ".join(missing), os.path.basename(sys.argv[0])))
    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        fail_usage("cannot import torch: %s" % exc)

    backend = pick_backend(args.backend, torch)
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    if backend == "nccl":
        if not torch.cuda.is_available():
            fail_usage("backend nccl needs a CUDA GPU (none visible); use --backend gloo")
        if local_rank >= torch.cuda.device_count():
            fail_usage("LOCAL_RANK %d but only %d GPU(s) visible" % (local_rank, torch.cuda.device_count()))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dist.init_process_group(backend=backend, init_method="env://",
                            timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    dtype = getattr(torch, args.dtype)
    elem = torch.empty((), dtype=dtype).element_size()
    expected = world * (world + 1) // 2
    cuda = device.type == "cuda"

    def sync():
        if cuda:
            torch.cuda.synchronize(device)

    def verify(buf):
        buf.fill_(rank + (2 if rank == args.inject_fault else 1))
        dist.all_reduce(buf, op=dist.ReduceOp.SUM)
        bad = (buf != expected).sum().to(torch.int64)
        errors = bad.clone()
        dist.all_reduce(errors, op=dist.ReduceOp.SUM)
        value = buf[0].item()
        return int(errors.item()), value

    results, ok = [], True
    for size in args.sizes:
        count = max(1, size // elem)
        nbytes = count * elem
        buf = torch.empty(count, dtype=dtype, device=device)
        errors_before, seen = verify(buf)
        buf.zero_()  # timing on zeros: no growth, no overflow
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(args.iters):
                dist.all_reduce(buf)
            end.record()
            end.synchronize()
            elapsed = start.elapsed_time(end) / 1e3
        else:
            t0 = time.perf_counter()
            for _ in range(args.iters):
                dist.all_reduce(buf)
            elapsed = time.perf_counter() - t0
        slowest = torch.tensor([elapsed], dtype=torch.float64, device=device)
        dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
        per_iter = slowest.item() / args.iters
        errors_after, _ = verify(buf)
        errors = errors_before + errors_after
        algbw = nbytes / per_iter / 1e9 if per_iter > 0 else float("inf")
        row = {
            "size_bytes": nbytes,
            "count": count,
            "time_us": per_iter * 1e6,
            "algbw_gbps": algbw,
            "busbw_gbps": algbw * bus_factor(world),
            "expected": expected,
            "observed": seen,
            "errors": errors,
            "correct": errors == 0,
        }
        ok = ok and row["correct"]
        results.append(row)
        del buf

    report = {
        "ok": ok,
        "backend": backend,
        "world_size": world,
        "device": str(device) if not cuda else torch.cuda.get_device_name(device),
        "dtype": args.dtype,
        "iters": args.iters,
        "warmup": args.warmup,
        "expected_sum": expected,
        "inject_fault": args.inject_fault,
        "torch_version": torch.__version__,
        "results": results,
    }
    if cuda:
        try:
            report["nccl_version"] = ".".join(str(x) for x in torch.cuda.nccl.version())
        except Exception:  # pragma: no cover - informational only
            pass
    if rank == 0:
        if args.json != "-":
            print_table(report)
        if args.json:
            text = json.dumps(report, indent=2, sort_keys=True)
            if args.json == "-":
                print(text)
            else:
                with open(args.json, "w") as fh:
                    fh.write(text + "\n")
        sys.stdout.flush()
    dist.barrier()
    dist.destroy_process_group()
    return 0 if ok else 1


def print_table(report):
    print("# all_reduce SUM check: backend %s, world %d, %s, dtype %s, %d iters (+%d warmup)"
          % (report["backend"], report["world_size"], report["device"], report["dtype"],
             report["iters"], report["warmup"]))
    print("# expected every element = world*(world+1)/2 = %d" % report["expected_sum"])
    print("%12s %12s %12s %12s %12s %8s" % ("size", "count", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "check"))
    for row in report["results"]:
        print("%12s %12d %12.1f %12.3f %12.3f %8s" % (
            human(row["size_bytes"]), row["count"], row["time_us"], row["algbw_gbps"], row["busbw_gbps"],
            "OK" if row["correct"] else "FAIL(%d)" % row["errors"]))
    print("# result: %s" % ("PASS" if report["ok"] else "FAIL: wrong all_reduce results"))


if __name__ == "__main__":
    sys.exit(main())

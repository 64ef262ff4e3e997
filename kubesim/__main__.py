"""python -m kubesim --port PORT --kubeconfig PATH [--nodes SPEC] [--disable a,b] [--kueue]"""
from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubesim", description="Embedded Kubernetes API simulator.")
    p.add_argument("--port", type=int, default=0, help="port (0 picks a free loopback port)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default loopback)")
    p.add_argument("--kubeconfig", required=True,
                   help="write a kubeconfig for the simulator here; it appears when ready")
    p.add_argument("--nodes", default=None,
                   help="fake nodes, e.g. 'gpu:2x{cpu:48,memory:192Gi,nvidia.com/gpu:4}; "
                        "cpu:2x{cpu:16,memory:64Gi}' (default: 2 CPU + 2 GPU nodes; '' for none)")
    p.add_argument("--disable", default="",
                   help="comma-separated controllers to switch off (scheduler, kubelet, ...)")
    p.add_argument("--no-validate", action="store_true",
                   help="skip schema validation of objects (faster, less faithful)")
    p.add_argument("--kueue", action="store_true",
                   help="install Kueue's CRDs (from $KUEUE_CRDS_DIR) and run its admission "
                        "controller")
    p.add_argument("--log-level", default="WARNING")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from kubesim.cluster import Cluster, serve_forever

    try:
        cluster = Cluster(nodes=args.nodes,
                          disabled=[d for d in args.disable.split(",") if d.strip()],
                          validate=not args.no_validate, kueue=args.kueue)
    except ValueError as exc:
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve_forever(cluster, args.host, args.port, args.kubeconfig, stop)

    try:
        asyncio.run(run())
    except (ValueError, FileNotFoundError) as exc:  # bad --nodes, no Kueue CRDs, ...
        print(f"kubesim: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""`python -m hack.cluster up|down|status [--dir DIR]`: the real control plane on loopback.

up: starts etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok (built by
`make cluster-build`), writes DIR/kubeconfig and prints the `export KUBECONFIG=` line.
down: stops what up started (idempotent). status: which recorded processes still run.
"""
from __future__ import annotations

import argparse
import sys
import time

from hack.cluster.control_plane import DEFAULT_DIR, ClusterError, ControlPlane


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hack.cluster", description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", default=str(DEFAULT_DIR),
                        help="the cluster's directory (certificates, etcd data, logs, kubeconfig)")
    args = parser.parse_args(argv)
    cp = ControlPlane(args.dir)
    if args.command == "up":
        started = time.monotonic()
        try:
            kubeconfig = cp.up()
        except ClusterError as e:
            print(f"error: {e}", file=sys.stderr)
            cp.down()
            return 1
        print(f"# control plane up in {time.monotonic() - started:.1f}s at {cp.server}; "
              f"logs in {cp.logs}", file=sys.stderr)
        print(f"export KUBECONFIG={kubeconfig}")
    elif args.command == "down":
        stopped = cp.down()
        print(f"stopped: {', '.join(stopped) or 'nothing was running'}")
    else:
        running = cp.running()
        if not running:
            print(f"not running (nothing recorded in {cp.state_path})")
        for name, alive in running.items():
            print(f"{name}: {'running' if alive else 'stopped'}")
        return 0 if running and all(running.values()) else 3
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""torchdev-runtime: run the operator's watches.yaml locally (stand-in for ansible-operator).

    torchdev-runtime --watches-file watches.yaml [--kubeconfig PATH] [--namespace NS[,NS]]
                     [--max-concurrent-reconciles N] [--ansible-verbosity N]
                     [--reconcile-period 10h] [--ansible-config ansible.cfg]
                     [--dependent Kind.group=apps/v1/StatefulSet,v1/Service] [--verbose]
"""
from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading

from .gotime import DurationError, parse_duration
from .kube import default_kubeconfig
from .watches import WatchesError


def _duration(s: str) -> float:
    try:
        return parse_duration(s)
    except DurationError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="torchdev-runtime",
        description="Local runtime for the torchdev Ansible operator: honours watches.yaml "
                    "like ansible-operator and runs the roles with ansible-runner.")
    p.add_argument("--watches-file", default="./watches.yaml",
                   help="path to the watches file (default ./watches.yaml)")
    p.add_argument("--kubeconfig", default=None,
                   help="kubeconfig (default $KUBECONFIG, then ~/.kube/config)")
    p.add_argument("--namespace", "-n", default=os.environ.get("WATCH_NAMESPACE", ""),
                   help="comma-separated namespaces to watch (default $WATCH_NAMESPACE, "
                        "empty = all namespaces)")
    p.add_argument("--max-concurrent-reconciles", type=int, default=None,
                   help="default concurrent reconciles per kind (default: CPU count); "
                        "MAX_CONCURRENT_RECONCILES_<KIND>_<GROUP> overrides it per kind")
    p.add_argument("--ansible-verbosity", type=int, default=2,
                   help="ansible -v level (default 2); ANSIBLE_VERBOSITY_<KIND>_<GROUP> "
                        "overrides it per kind")
    p.add_argument("--reconcile-period", type=_duration, default="10h",
                   help="requeue period for watches without reconcilePeriod (default 10h)")
    p.add_argument("--ansible-config", default=None,
                   help="ANSIBLE_CONFIG for the runs (default $ANSIBLE_CONFIG, then the "
                        "ansible.cfg next to the watches file, then ./ansible.cfg)")
    p.add_argument("--dependent", action="append", default=[], metavar="KIND=GVK[,GVK]",
                   help="watch more dependent kinds from the start, e.g. "
                        "DevServer.torchdev.io=v1/Pod (repeatable); the kinds a watch's role "
                        "renders (its templates), less its blacklist, are always watched, and "
                        "kinds are also learned from the roles' results")
    p.add_argument("--graceful-shutdown-timeout", type=_duration, default="30s",
                   help="how long to wait for running reconciles on SIGINT/SIGTERM (30s)")
    p.add_argument("--gather-facts", action="store_true",
                   help="gather Ansible facts before each run (ansible-operator does; slower)")
    p.add_argument("--keep-artifacts", action="store_true",
                   help="keep ansible-runner artifacts (printed at exit)")
    p.add_argument("--health-interval", type=_duration, default="60s",
                   help="interval of the health log line (0 = off)")
    p.add_argument("--metrics-bind-address", default="",
                   help="serve the reconcile metrics (controller_runtime_reconcile_*, as ansible-operator "
                        "does) on HOST:PORT, e.g. :8080 (default: off)")
    p.add_argument("--verbose", "-v", action="store_true",
                   help="log every task, dependent events and the output of failed runs")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if os.environ.get("TORCHDEV_RUNTIME_DEBUG") else logging.INFO,
        format="%(asctime)s %(levelname)-5s %(message)s", datefmt="%H:%M:%S")
    from .runtime import Runtime  # imported late: keeps --help fast

    deps: dict[str, list[str]] = {}
    for spec in args.dependent:
        owner, sep, rest = spec.partition("=")
        if not sep or not rest:
            print(f"torchdev-runtime: --dependent {spec!r}: want KIND=apiVersion/Kind[,...]",
                  file=sys.stderr)
            return 2
        deps.setdefault(owner, []).extend(x for x in rest.split(",") if x)
    kubeconfig = args.kubeconfig or default_kubeconfig()
    if not os.path.exists(kubeconfig):
        print(f"torchdev-runtime: kubeconfig {kubeconfig} not found (use --kubeconfig or "
              "$KUBECONFIG)", file=sys.stderr)
        return 2
    try:
        rt = Runtime(args.watches_file, kubeconfig, namespaces=args.namespace,
                     ansible_config=args.ansible_config,
                     max_concurrent_reconciles=args.max_concurrent_reconciles,
                     ansible_verbosity=args.ansible_verbosity,
                     reconcile_period=args.reconcile_period, dependent_watches=deps,
                     verbose=args.verbose, gather_facts=args.gather_facts,
                     keep_artifacts=args.keep_artifacts,
                     graceful_shutdown_timeout=args.graceful_shutdown_timeout,
                     health_interval=args.health_interval)
    except (WatchesError, ValueError) as exc:
        print(f"torchdev-runtime: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()
    signals = {"n": 0}

    def on_signal(signum, _frame) -> None:
        signals["n"] += 1
        if signals["n"] > 1:
            logging.getLogger("torchdev_runtime").warning("second signal: exiting now")
            os._exit(130)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    try:
        rt.start(wait_synced=None)
    except Exception as exc:  # noqa: BLE001
        print(f"torchdev-runtime: cannot start: {exc}", file=sys.stderr)
        rt.stop(timeout=1)
        return 1
    if args.metrics_bind_address:
        from .metrics import serve

        serve(rt, args.metrics_bind_address)
        logging.getLogger("torchdev_runtime").info("reconcile metrics on %s/metrics", args.metrics_bind_address)
    while not stop.wait(1.0):
        pass
    clean = rt.stop()
    if args.keep_artifacts:
        print(f"artifacts kept in {rt.work_dir}", file=sys.stderr)
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())

"""Request log and counters by verb, resource and status code.

Each logged write says whether it changed the object: ``noop`` is true for an update or
patch that left the object as it was (kubesim, like kube-apiserver, then keeps the
resourceVersion and emits no event). A controller that writes what is already correct shows
up as no-op writes (tests/reliability count them after an operator restart).
"""
from __future__ import annotations

import contextvars
import time
from collections import Counter, deque
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})
# Set by ApiServer._write when an update or patch changed nothing (per request: the HTTP
# layer resets it before each one).
NOOP_WRITE: contextvars.ContextVar[bool] = contextvars.ContextVar("kubesim_noop_write",
                                                                default=False)


class Metrics:
    def __init__(self, log_size: int = 20_000):
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self.log: deque[dict[str, Any]] = deque(maxlen=log_size)

    def record(self, verb: str, resource: str, code: int, path: str, latency_ms: float,
               user_agent: str = "", content_type: str = "", noop: bool = False) -> None:
        """Count one request and log it (`content_type`: the request body's, "" without one;
        `noop`: a write that changed nothing)."""
        self.counts[(verb, resource, code)] += 1
        entry = {"time": time.time(), "verb": verb, "resource": resource, "code": code,
                 "path": path, "latency_ms": round(latency_ms, 3),
                 "user_agent": user_agent, "content_type": content_type}
        if verb in WRITE_VERBS:
            entry["noop"] = noop
        self.log.append(entry)

    def reset(self) -> None:
        self.counts.clear()
        self.log.clear()

    def total(self, verbs: frozenset[str] | set[str] | None = None, resource: str | None = None,
              successful_only: bool = False) -> int:
        n = 0
        for (verb, res, code), c in self.counts.items():
            if verbs is not None and verb not in verbs:
                continue
            if resource is not None and res.split("/")[0] != resource and res != resource:
                continue
            if successful_only and code >= 400:
                continue
            n += c
        return n

    def snapshot(self) -> dict[str, Any]:
        by_verb: Counter[str] = Counter()
        for (verb, _, _), c in self.counts.items():
            by_verb[verb] += c
        return {
            "requests": {f"{v} {r} {c}": n for (v, r, c), n in sorted(self.counts.items())},
            "by_verb": dict(by_verb),
            "total": sum(self.counts.values()),
            "writes": self.total(WRITE_VERBS),
        }

    def recent(self, limit: int = 1000) -> list[dict[str, Any]]:
        return list(self.log)[-limit:]

"""Request log and counters by verb, resource and status code."""
from __future__ import annotations

import time
from collections import Counter, deque
from typing import Any

WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


class Metrics:
    def __init__(self, log_size: int = 20_000):
        self.counts: Counter[tuple[str, str, int]] = Counter()
        self.log: deque[dict[str, Any]] = deque(maxlen=log_size)

    def record(self, verb: str, resource: str, code: int, path: str, latency_ms: float,
               user_agent: str = "", content_type: str = "") -> None:
        """Count one request and log it (`content_type`: the request body's, "" without one)."""
        self.counts[(verb, resource, code)] += 1
        self.log.append({"time": time.time(), "verb": verb, "resource": resource, "code": code,
                         "path": path, "latency_ms": round(latency_ms, 3),
                         "user_agent": user_agent, "content_type": content_type})

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

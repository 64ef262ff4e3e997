"""client-go workqueue semantics (k8s.io/client-go/util/workqueue) used by controller-runtime.

* ``Queue``: an item is queued at most once (``dirty`` set); an item being processed is
  never handed to a second worker; adding it while it is processed marks it dirty and it is
  queued again when ``done()`` is called.
* ``add_after``: a delaying queue; when an item is already waiting, the earlier time wins.
* ``add_rate_limited``: ``add_after(item, rate_limiter.when(item))``.
* The default controller rate limiter (controller-runtime ``DefaultTypedControllerRateLimiter``
  -> client-go ``DefaultTypedControllerRateLimiter``): the max of a per-item exponential
  failure limiter (5ms * 2^failures, capped at 1000s, reset by ``forget``) and an overall
  token bucket (10 qps, burst 100).
"""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from typing import Any, Hashable


class ItemExponentialFailureRateLimiter:
    def __init__(self, base_delay: float = 0.005, max_delay: float = 1000.0):
        self.base_delay = base_delay
        self.max_delay = max_delay
        self._failures: dict[Hashable, int] = {}
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        with self._lock:
            exp = self._failures.get(item, 0)
            self._failures[item] = exp + 1
        return exponential_backoff(exp, self.base_delay, self.max_delay)

    def num_requeues(self, item: Hashable) -> int:
        with self._lock:
            return self._failures.get(item, 0)

    def forget(self, item: Hashable) -> None:
        with self._lock:
            self._failures.pop(item, None)


def exponential_backoff(failures: int, base_delay: float = 0.005,
                        max_delay: float = 1000.0) -> float:
    """Delay before retry number ``failures + 1``: base * 2^failures, capped at max."""
    try:
        backoff = base_delay * (2.0 ** failures)
    except OverflowError:
        return max_delay
    return max_delay if backoff > max_delay else backoff


class BucketRateLimiter:
    """golang.org/x/time/rate Limiter.Reserve().Delay() with qps and burst."""

    def __init__(self, qps: float = 10.0, burst: int = 100, clock=time.monotonic):
        self.qps = qps
        self.burst = burst
        self._tokens = float(burst)
        self._last = clock()
        self._clock = clock
        self._lock = threading.Lock()

    def when(self, item: Hashable) -> float:
        with self._lock:
            now = self._clock()
            self._tokens = min(float(self.burst), self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            if self._tokens >= 0:
                return 0.0
            return -self._tokens / self.qps

    def num_requeues(self, item: Hashable) -> int:
        return 0

    def forget(self, item: Hashable) -> None:
        pass


class MaxOfRateLimiter:
    def __init__(self, *limiters: Any):
        self.limiters = limiters

    def when(self, item: Hashable) -> float:
        return max(l.when(item) for l in self.limiters)

    def num_requeues(self, item: Hashable) -> int:
        return max(l.num_requeues(item) for l in self.limiters)

    def forget(self, item: Hashable) -> None:
        for l in self.limiters:
            l.forget(item)


def default_controller_rate_limiter() -> MaxOfRateLimiter:
    return MaxOfRateLimiter(ItemExponentialFailureRateLimiter(0.005, 1000.0),
                            BucketRateLimiter(10.0, 100))


class RateLimitingQueue:
    def __init__(self, rate_limiter: Any | None = None, name: str = "queue"):
        self.name = name
        self.rate_limiter = rate_limiter or default_controller_rate_limiter()
        self._cond = threading.Condition()
        self._queue: deque[Hashable] = deque()
        self._dirty: set[Hashable] = set()
        self._processing: set[Hashable] = set()
        self._shutting_down = False
        # delaying part
        self._waiting: dict[Hashable, float] = {}
        self._heap: list[tuple[float, int, Hashable]] = []
        self._seq = itertools.count()
        self._delay_cond = threading.Condition()
        self._delay_thread = threading.Thread(target=self._delay_loop, name=f"{name}-delay",
                                              daemon=True)
        self._delay_thread.start()

    # -- basic queue --------------------------------------------------------------------
    def add(self, item: Hashable) -> None:
        with self._cond:
            if self._shutting_down or item in self._dirty:
                return
            self._dirty.add(item)
            if item in self._processing:
                return
            self._queue.append(item)
            self._cond.notify()

    def get(self, timeout: float | None = None) -> tuple[Hashable | None, bool]:
        """Returns (item, shutdown). With a timeout, (None, False) when nothing came."""
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while not self._queue and not self._shutting_down:
                if deadline is None:
                    self._cond.wait()
                else:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return None, False
                    self._cond.wait(left)
            # client-go keeps handing out queued items after ShutDown; we stop at once so that
            # stop() only waits for reconciles already running (queued ones are dropped).
            if self._shutting_down or not self._queue:
                return None, True
            item = self._queue.popleft()
            self._processing.add(item)
            self._dirty.discard(item)
            return item, False

    def done(self, item: Hashable) -> None:
        with self._cond:
            self._processing.discard(item)
            if item in self._dirty:
                self._queue.append(item)
                self._cond.notify()

    def __len__(self) -> int:
        with self._cond:
            return len(self._queue)

    def processing(self) -> int:
        with self._cond:
            return len(self._processing)

    def waiting(self) -> int:
        with self._delay_cond:
            return len(self._waiting)

    def due_in(self, item: Hashable) -> float | None:
        """Seconds until ``item``'s delayed requeue is due, None when none is waiting."""
        with self._delay_cond:
            at = self._waiting.get(item)
        return None if at is None else max(0.0, at - time.monotonic())

    def is_idle(self) -> bool:
        with self._cond:
            return not self._queue and not self._processing

    def is_pending(self, item: Hashable) -> bool:
        """True while ``item`` is queued (waiting for a worker) or being processed."""
        with self._cond:
            return item in self._dirty or item in self._processing

    def shutdown(self) -> None:
        with self._cond:
            self._shutting_down = True
            self._cond.notify_all()
        with self._delay_cond:
            self._delay_cond.notify_all()

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    # -- delaying -----------------------------------------------------------------------
    def add_after(self, item: Hashable, delay: float) -> None:
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        ready = time.monotonic() + delay
        with self._delay_cond:
            cur = self._waiting.get(item)
            if cur is not None and cur <= ready:
                return
            self._waiting[item] = ready
            heapq.heappush(self._heap, (ready, next(self._seq), item))
            self._delay_cond.notify()

    def _delay_loop(self) -> None:
        while True:
            due: list[Hashable] = []
            with self._delay_cond:
                if self._shutting_down:
                    return
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    ready, _, item = heapq.heappop(self._heap)
                    if self._waiting.get(item) == ready:
                        del self._waiting[item]
                        due.append(item)
                if not due:
                    timeout = (self._heap[0][0] - now) if self._heap else None
                    self._delay_cond.wait(timeout)
                    continue
            for item in due:
                self.add(item)

    # -- rate limiting ------------------------------------------------------------------
    def add_rate_limited(self, item: Hashable) -> float:
        delay = self.rate_limiter.when(item)
        self.add_after(item, delay)
        return delay

    def forget(self, item: Hashable) -> None:
        self.rate_limiter.forget(item)

    def num_requeues(self, item: Hashable) -> int:
        return self.rate_limiter.num_requeues(item)

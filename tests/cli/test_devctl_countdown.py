"""The lifecycle countdowns through the CLI (issue 12.2): `devctl list`'s TIME-LEFT column and
`devctl get`'s Reservation / Idle lines, from the status the operator writes (played here with
set_status). The e2e tests check the operator writes that status; these check what a user
reads of it."""
from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest


def _at(seconds: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _table(text: str) -> list[dict]:
    """A devctl table as rows of {header: cell}: columns start where their header does."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = lines[0]
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = list(zip(starts, starts[1:] + [None]))
    names = [header[a:b].strip() for a, b in bounds]
    return [{n: line[a:b].strip() for n, (a, b) in zip(names, bounds)} for line in lines[1:]]


# (status, how the TIME-LEFT a user reads begins); a minute of slack for a slow run.  Built when
# a test runs, not at collection: the times are relative to now.
def _cases() -> dict:
    return {
        "reserved": ({"phase": "Running", "reservation": {"duration": "4h", "startedAt": _at(-3600),
                                                          "expiresAt": _at(3 * 3600 + 1800)}}, ("3h29m", "3h30m")),
        "idle first": ({"phase": "Running",
                        "reservation": {"duration": "4h", "startedAt": _at(-60), "expiresAt": _at(4 * 3600)},
                        "idle": {"since": _at(-600), "deadline": _at(20 * 60), "autoShutdown": True}},
                       ("idle 19m", "idle 20m")),
        "idle without shutdown": ({"phase": "Running",
                                   "idle": {"since": _at(-600), "deadline": _at(20 * 60), "autoShutdown": False}},
                                  ("-",)),
        "ended": ({"phase": "Expired", "reservation": {"duration": "1h", "startedAt": _at(-7200),
                                                       "expiresAt": _at(-3600), "endedAt": _at(-3590),
                                                       "endReason": "Expired"}}, ("-",)),
        "queued": ({"phase": "Queued", "queue": {"position": 2, "estimatedStartTime": _at(25 * 60)}},
                   ("ETA in 24m", "ETA in 25m")),
    }


def test_list_shows_the_time_left_of_each_server(cluster, devctl):
    cases = _cases()
    for i, (status, _) in enumerate(cases.values()):
        cluster.create_devserver(f"s{i}")
        cluster.set_status(f"s{i}", **status)
    res = devctl("list")
    assert res.exit_code == 0, res.output
    got = {row["NAME"]: row["TIME-LEFT"] for row in _table(res.stdout)}
    for i, (case, (_, expected)) in enumerate(cases.items()):
        assert any(got[f"s{i}"].startswith(e) for e in expected), (case, got[f"s{i}"], expected)


@pytest.mark.parametrize("case, expected", [
    ("reserved", [("Reservation", "4h from "), ("Reservation", "(in 3h2")]),
    ("idle first", [("Idle", "; stops at "), ("Idle", "(in 19m"), ("Reservation", "expires at ")]),
    ("idle without shutdown", [("Idle", "; idle timeout ends at ")]),
    ("ended", [("Reservation", "(Expired), started ")]),
])
def test_get_counts_down_to_the_deadlines(cluster, devctl, case, expected):
    cluster.create_devserver("one")
    cluster.set_status("one", **_cases()[case][0])
    res = devctl("get", "one")
    assert res.exit_code == 0, res.output
    lines = {}
    for line in res.stdout.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            lines.setdefault(key.strip(), value.strip())
    for key, fragment in expected:
        assert fragment in lines.get(key, ""), (key, fragment, lines.get(key))

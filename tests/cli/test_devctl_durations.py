"""Every timeout and duration flag takes durations, with one parser (issue 28.6): 2m, 1h30m, 2d, or
seconds as a bare number; NaN, infinities, negatives and out-of-range values are one-line usage
errors naming the flag.  Also seed 002's `config set github_user` spelling."""
from __future__ import annotations

import click
import pytest
import yaml

from devctl.output import DurationType

from devctl_helpers import as_json


@pytest.mark.parametrize("value, kwargs, expected", [
    ("2m", {}, 120.0), ("1h30m", {}, 5400.0), ("90", {}, 90.0), ("90s", {}, 90.0), ("0", {}, 0.0), ("1.5h", {}, 5400.0),
    ("2d", {}, 172800.0), (30, {}, 30.0),
    ("1.2", {"whole": True}, 2), ("90m", {"minimum": 1, "maximum": 31536000, "whole": True}, 5400),
    # refused (None)
    ("nan", {}, None), ("inf", {}, None), ("-5", {}, None), ("-1.5h", {}, None), ("soon", {}, None), ("", {}, None),
    ("0", {"minimum": 1}, None), ("8d", {"maximum": 604800}, None),
])
def test_duration_type(value, kwargs, expected):
    param = click.Option(["--timeout"])
    if expected is None:
        with pytest.raises(click.BadParameter):
            DurationType(**kwargs).convert(value, param, None)
        return
    got = DurationType(**kwargs).convert(value, param, None)
    assert got == expected and type(got) is type(expected)


@pytest.mark.parametrize("args, fragment", [
    (["infer", "watch", "nojob", "--timeout", "2m"], 'not found'),     # parsed: the job is what is missing
    (["infer", "watch", "nojob", "--timeout", "soon"], "Invalid value for '--timeout': invalid duration 'soon'"),
    (["infer", "create", "x", "--input-path", "/artifacts/x.jpg", "--pod-ttl", "8d"],
     "Invalid value for '--pod-ttl': '8d' is out of range"),
    (["train", "submit", "t", "--deadline", "0"], "Invalid value for '--deadline': '0' is out of range"),
    (["monitor", "x", "--interval", "nan"], "Invalid value for '--interval'"),
])
def test_duration_flags(devctl, args, fragment):
    result = devctl(*args)
    last = result.output.strip().splitlines()[-1]
    assert result.exit_code != 0 and fragment in last, result.output
    assert [line for line in result.output.splitlines() if line.startswith("error")] == [last]  # one error line


def test_durations_reach_the_spec(devctl, cluster):
    created = as_json(devctl("train", "submit", "long", "--workers", "1", "--gpus-per-worker", "0",
                             "--deadline", "1h30m", "-o", "json"))
    assert created["spec"]["failurePolicy"]["activeDeadlineSeconds"] == 5400
    result = devctl("infer", "create", "ttl", "--input-path", "/artifacts/x.jpg", "--gpus", "0",
                    "--pod-ttl", "10m", "--pvc-ttl", "2h", "-o", "json")
    assert result.exit_code == 0, result.output
    spec = as_json(result)["spec"]
    assert spec["ttlSecondsAfterFinished"] == 600 and spec["pvcTTLSecondsAfterFinished"] == 7200


@pytest.mark.parametrize("key", ["namespace", "NAMESPACE", "name_space"])
def test_config_set_keys_as_seed_002_writes_them(key, tmp_path):
    from devctl_helpers import invoke

    result = invoke(["config", "set", key, "dev-team"])
    if key == "name_space":
        assert result.exit_code == 2 and "'name_space' is not one of namespace, owner" in result.output
        return
    assert result.exit_code == 0, result.output
    assert yaml.safe_load((tmp_path / "devctl.yaml").read_text())["namespace"] == "dev-team"

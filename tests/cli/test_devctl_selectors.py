"""kubectl's conventions for choosing and printing objects (issue 28.6): -o wide and -o name on the
lists and get, -l/--selector, and several names for get, delete, stop and start (the ones not
found are one error after the others are done)."""
from __future__ import annotations

import json

import pytest
from kubernetes import client

from devctl_helpers import GROUP, VERSION, as_json


@pytest.fixture
def servers(cluster):
    """Three servers: a and b labelled team=ml, c team=infra."""
    for name, team in (("a", "ml"), ("b", "ml"), ("c", "infra")):
        body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer",
                "metadata": {"name": name, "namespace": cluster.ns, "labels": {"team": team}},
                "spec": {"owner": "alice@example.com", "flavor": "gpu-a10g-1", "image": f"img-{name}:1"}}
        cluster.custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "devservers", body)
    cluster.set_status("a", sshCommand="ssh -p 22 dev@a")
    return cluster


def _names(result) -> list[str]:
    return [item["metadata"]["name"] for item in as_json(result)["items"]]


def test_list_selector_wide_and_name(devctl, servers):
    assert _names(devctl("list", "-l", "team=ml", "-o", "json")) == ["a", "b"]
    assert _names(devctl("list", "--selector", "team!=ml", "-o", "json")) == ["c"]
    assert _names(devctl("list", "-l", "team in (infra),!missing", "-o", "json")) == ["c"]
    name = devctl("list", "-l", "team=ml", "-o", "name")
    assert name.exit_code == 0 and name.stdout.splitlines() == ["devserver.torchdev.io/a", "devserver.torchdev.io/b"]
    wide = devctl("list", "-o", "wide")
    header, first = wide.stdout.splitlines()[:2]
    assert header.split() == ["NAME", "FLAVOR", "MODE", "PHASE", "READY", "TIME-LEFT", "AGE",
                              "IMAGE", "REPLICAS", "OWNER", "SSH"]
    assert first.split()[0] == "a" and first.split()[7:] == ["img-a:1", "1", "alice@example.com", "ssh", "-p", "22",
                                                           "dev@a"]
    none = devctl("list", "-l", "team=nobody")
    assert none.exit_code == 0 and none.stdout == "" and "No devservers matching team=nobody" in none.stderr


def test_list_all_namespaces_with_a_selector(devctl, servers, sim):
    other = client.CoreV1Api(sim.k8s)
    other.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": servers.ns + "-x"}})
    servers.custom.create_namespaced_custom_object(GROUP, VERSION, servers.ns + "-x", "devservers", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "DevServer",
        "metadata": {"name": "z", "labels": {"team": "ml", "only": servers.ns}},
        "spec": {"owner": "bob@example.com", "flavor": "cpu-small"}})
    listed = as_json(devctl("list", "-A", "-l", f"only={servers.ns}", "-o", "json"))["items"]
    assert [(o["metadata"]["namespace"], o["metadata"]["name"]) for o in listed] == [(servers.ns + "-x", "z")]


def test_get_several_names_and_a_selector(devctl, servers):
    one = as_json(devctl("get", "a", "-o", "json"))
    assert one["kind"] == "DevServer" and one["metadata"]["name"] == "a"  # one NAME: the object
    assert _names(devctl("get", "c", "a", "-o", "json")) == ["c", "a"]    # several: a List, in order
    assert _names(devctl("get", "-l", "team=ml", "-o", "json")) == ["a", "b"]
    assert devctl("get", "a", "b", "-o", "name").stdout.splitlines() == ["devserver.torchdev.io/a",
                                                                         "devserver.torchdev.io/b"]
    table = devctl("get", "a", "c")
    assert table.exit_code == 0 and [line.split()[-1] for line in table.stdout.splitlines()
                                     if line.startswith("Name:")] == ["a", "c"], table.stdout
    # a missing one: the others are printed, then one error line, exit 1
    partial = devctl("get", "a", "nope", "b", "-o", "json")
    assert partial.exit_code == 1 and [i["metadata"]["name"] for i in json.loads(partial.stdout)["items"]] == ["a", "b"]
    assert [line for line in partial.stderr.splitlines() if line.startswith("error")] == [
        partial.stderr.strip().splitlines()[-1]] and "nope" in partial.stderr
    both = devctl("get", "a", "-l", "team=ml")
    assert both.exit_code == 2 and "give NAME... or -l SELECTOR, not both" in both.stderr
    neither = devctl("get")
    assert neither.exit_code == 2 and "give one or more NAMEs or -l SELECTOR" in neither.stderr


def test_stop_and_start_several(devctl, servers):
    stopped = devctl("stop", "-l", "team=ml", "-o", "json")
    assert _names(stopped) == ["a", "b"]
    assert [servers.devserver(n)["spec"].get("suspend") for n in "abc"] == [True, True, False]
    started = devctl("start", "a", "b")
    assert started.exit_code == 0 and started.stdout.splitlines() == ["devserver/a started", "devserver/b started"]
    assert [servers.devserver(n)["spec"].get("suspend") for n in "abc"] == [False, False, False]
    partial = devctl("stop", "c", "nope")
    assert partial.exit_code == 1 and "devserver/c stopped" in partial.stdout and "nope" in partial.stderr
    assert servers.devserver("c")["spec"]["suspend"] is True


def test_delete_several_and_by_selector(devctl, servers):
    result = devctl("delete", "a", "c")
    assert result.exit_code == 0, result.output
    assert servers.devserver_names() == ["b"]
    result = devctl("delete", "-l", "team=ml")
    assert result.exit_code == 0 and 'devserver.torchdev.io "b" deleted' in result.stdout
    assert servers.devserver_names() == []
    missing = devctl("delete", "x", "y")
    assert missing.exit_code == 1 and "x" in missing.stderr and "y" in missing.stderr
    assert len([line for line in missing.stderr.splitlines() if line.startswith("error")]) == 1


def test_flavors_users_and_jobs_take_selectors_wide_and_name(devctl, cluster, sim):
    custom = cluster.custom
    custom.patch_cluster_custom_object(GROUP, VERSION, "devserverflavors", "gpu-h100-8",
                                       {"metadata": {"labels": {"tier": "big"}},
                                        "spec": {"nodeSelector": {"pool": "h100"}}})
    assert devctl("flavors", "-l", "tier=big", "-o", "name").stdout.splitlines() == [
        "devserverflavor.torchdev.io/gpu-h100-8"]
    wide = devctl("flavors", "-l", "tier=big", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-2:] == ["NODE-SELECTOR", "TOLERATIONS"] and "pool=h100" in wide[1].split()
    for name, team in (("t1", "ml"), ("t2", "infra")):
        custom.create_namespaced_custom_object(GROUP, VERSION, cluster.ns, "trainingjobs", {
            "apiVersion": f"{GROUP}/{VERSION}", "kind": "TrainingJob",
            "metadata": {"name": name, "labels": {"team": team}},
            "spec": {"model": "m", "dataset": "custom", "numWorkers": 2, "gpusPerWorker": 1, "image": "trainer:1"}})
    assert devctl("train", "list", "-l", "team=ml", "-o", "name").stdout.splitlines() == [
        "trainingjob.torchdev.io/t1"]
    wide = devctl("train", "list", "-o", "wide").stdout.splitlines()
    assert wide[0].split()[-3:] == ["WORKERS", "GPUS-PER-WORKER", "IMAGE"] and wide[1].split()[-3:] == [
        "2", "1", "trainer:1"]
    assert [o["metadata"]["name"] for o in as_json(devctl("infer", "list", "-l", "team=ml", "-o", "json"))["items"]] == []
    users = devctl("admin", "users", "-l", f"nobody-{cluster.ns}", "-o", "json")
    assert as_json(users)["items"] == []
    assert devctl("admin", "users", "-o", "wide").exit_code == 0


@pytest.mark.parametrize("command", ["get", "delete", "stop", "start", "autostop"])
def test_no_name_and_no_selector_is_a_usage_error_and_nothing_else(devctl, command):
    result = devctl(command, "-o", "json") if command != "delete" else devctl(command)
    assert result.exit_code == 2 and result.stdout == "", result.output
    assert result.stderr.strip().splitlines() == [
        f"error: give one or more NAMEs or -l SELECTOR (see 'devctl {command} --help')"]

"""End to end: SSH without kubectl (issue 27.6).  spec.ssh.serviceType makes the <name>-ssh
Service a NodePort (or a LoadBalancer), status.ssh carries the direct address the API server and
the node give it, devctl connects there without a port-forward, an unchanged server writes
nothing, and changing the type in place (NodePort -> LoadBalancer -> ClusterIP) goes through the
role's server-side apply: the API server clears the nodePort a ClusterIP Service may not have."""
from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from _e2e_helpers import GROUP, VERSION, devserver, get_ds, reconcile_again, wait_ready

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def devctl(sim, ns, *args):
    from devctl.main import cli

    result = CliRunner().invoke(cli, ["--kubeconfig", sim.kubeconfig, "-n", ns, *args], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def wait_ssh(sim, kube, ns, name, check, message):
    def done():
        ssh = (get_ds(kube, ns, name).get("status") or {}).get("ssh")
        return [ssh] if check(ssh) else None
    return sim.wait_for(done, 60, interval=0.1, message=message)[0]


def set_type(kube, ns, name, service_type):
    kube["custom"].patch_namespaced_custom_object(GROUP, VERSION, ns, "devservers", name,
                                                  {"spec": {"ssh": {"serviceType": service_type}}})


def test_node_port_server_is_reached_directly_and_changes_type_in_place(sim, kube, runtime, ns):
    kube["custom"].create_namespaced_custom_object(GROUP, VERSION, ns, "devservers",
                                                   devserver("direct", ssh={"serviceType": "NodePort"}))
    wait_ready(sim, kube, ns, "direct")
    svc = kube["core"].read_namespaced_service("direct-ssh", ns)
    assert svc.spec.type == "NodePort" and svc.spec.external_traffic_policy == "Local"
    node_port = svc.spec.ports[0].node_port
    node = kube["core"].read_node(kube["core"].read_namespaced_pod("direct-0", ns).spec.node_name)
    internal = [a.address for a in node.status.addresses if a.type == "InternalIP"][0]
    ssh = wait_ssh(sim, kube, ns, "direct", lambda s: (s or {}).get("host"), "status.ssh with the node's address")
    assert ssh == {"serviceType": "NodePort", "host": internal, "port": node_port,
                   "command": f"ssh -p {node_port} dev@{internal}"}

    # devctl: get prints the plain command, ssh goes there without a port-forward, ssh-config names it
    assert f"ssh -p {node_port} dev@{internal}" in devctl(sim, ns, "get", "direct")
    plan = json.loads(devctl(sim, ns, "ssh", "direct", "--print", "-o", "json"))
    assert plan["mode"] == "direct" and (plan["host"], plan["port"]) == (internal, node_port)
    assert plan["portForward"] is None and plan["ssh"] == ["ssh", "-p", str(node_port), "-o", f"HostKeyAlias=direct.{ns}.devserver",
                                                                f"dev@{internal}"]
    entry = devctl(sim, ns, "ssh-config", "direct", "--print")
    assert f"  HostName {internal}" in entry and f"  Port {node_port}" in entry and "ProxyCommand" not in entry

    # an unchanged NodePort server writes nothing (the Node read is a GET)
    reconcile_again(sim, runtime, ns, "direct", times=1)
    sim.reset_metrics()
    reconcile_again(sim, runtime, ns, "direct", times=1)
    assert sim.writes() == 0, [r for r in sim.requests() if r["verb"] not in ("get", "list", "watch")]

    # NodePort -> LoadBalancer: the load balancer's address, port 22.  kubesim plays the cloud
    # controller; the real tier has none, so the server says what it waits for, and the test
    # writes the address as a cloud-controller-manager would (the operator sees its managedFields).
    set_type(kube, ns, "direct", "LoadBalancer")
    ssh = wait_ssh(sim, kube, ns, "direct", lambda s: (s or {}).get("serviceType") == "LoadBalancer",
                   "status.ssh of a LoadBalancer")
    if "host" not in ssh and os.environ.get("TORCHDEV_E2E_TIER") == "real":
        assert ssh == {"serviceType": "LoadBalancer", "message": "waiting for the load balancer's address "
                       "(status.loadBalancer of Service direct-ssh)"}, ssh
        kube["core"].patch_namespaced_service_status(
            "direct-ssh", ns, {"status": {"loadBalancer": {"ingress": [{"hostname": f"direct-{ns}.elb.example.com"}]}}},
            field_manager="cloud-controller-manager")
    ssh = wait_ssh(sim, kube, ns, "direct", lambda s: (s or {}).get("serviceType") == "LoadBalancer" and s.get("host"),
                   "status.ssh with the load balancer's address")
    lb = kube["core"].read_namespaced_service("direct-ssh", ns)
    assert lb.spec.type == "LoadBalancer" and ssh["host"] == lb.status.load_balancer.ingress[0].hostname
    assert ssh["port"] == 22 and ssh["command"] == f"ssh -p 22 dev@{ssh['host']}" and "message" not in ssh

    # -> ClusterIP: the allocated nodePort is cleared (a ClusterIP Service may not have one), status.ssh goes,
    # devctl port-forwards again
    set_type(kube, ns, "direct", "ClusterIP")
    wait_ssh(sim, kube, ns, "direct", lambda s: s is None, "status.ssh removed")
    svc = kube["core"].read_namespaced_service("direct-ssh", ns)
    assert svc.spec.type == "ClusterIP" and svc.spec.ports[0].node_port is None
    assert svc.spec.external_traffic_policy is None
    entry = devctl(sim, ns, "ssh-config", "direct", "--print")
    assert "ProxyCommand" in entry and "  Port " not in entry

"""End to end on CPU: the filter's env -> N local "pods" -> devrun -> torchrun -> gloo.

Each pod is a process tree with exactly the env the operator renders for pod index i
(NODE_RANK resolved like the downward API, pod 0's DNS name mapped to 127.0.0.1, a
free MASTER_PORT per test).  Skipped when torch is not installed.
"""

import glob
import json
import subprocess
import sys

import pytest

from _pytorch_helpers import (ALLREDUCE_CHECK, DEVRUN, GPU_CHECK, TRAIN_TINY, base_env, free_port, load_rendezvous,
                              resolve_env)

import torch

R = load_rendezvous()
CPU_FLAVOR = {"resources": {"requests": {"cpu": 2, "memory": "4Gi"}}, "gpu": {"count": 0, "efa": False}}


def distributed(name, world, nprocs, namespace="dev-test"):
    return {"apiVersion": "torchdev.io/v1alpha1", "kind": "DevServer",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"owner": "t@example.com", "flavor": "cpu", "mode": "distributed",
                     "distributed": {"worldSize": world, "nprocsPerNode": nprocs, "backend": "gloo",
                                     "ncclSettings": {"NCCL_DEBUG": "INFO"}}}}


def pod_envs(ds):
    """(rendered env list, [resolved env of pod i]) for every replica of ``ds``."""
    name, namespace = ds["metadata"]["name"], ds["metadata"]["namespace"]
    rendered = R.rendezvous_env(ds, CPU_FLAVOR)
    host = "%s-0.%s.%s.svc.cluster.local" % (name, name, namespace)
    assert {"name": "MASTER_ADDR", "value": host} in rendered
    port = free_port()
    envs = []
    for index in range(R.replicas(ds)):
        env = base_env()
        env.update(resolve_env(rendered, index, "%s-%d" % (name, index), dns={host: "127.0.0.1"}, port=port))
        envs.append(env)
    return rendered, envs


def run_pods(pods, ds, argv, cwd, timeout=75):
    rendered, envs = pod_envs(ds)
    for env in envs:
        pods.start(argv, env, str(cwd))
    results = pods.wait(timeout)
    for i, (rc, out) in enumerate(results):
        assert rc == 0, "pod %d exited %s\n%s" % (i, rc, pods.outputs())
    return rendered, envs, results


@pytest.mark.slow
@pytest.mark.parametrize("world, nprocs", [(4, 2), (2, 1)])
def test_devrun_train_tiny(pods, tmp_path, world, nprocs):
    ds = distributed("tiny%d%d" % (world, nprocs), world, nprocs)
    outdir = tmp_path / "out"
    outdir.mkdir()
    # devrun executed through its shebang (PATH's python3 is this interpreter).
    _, envs, _ = run_pods(pods, ds, [DEVRUN, TRAIN_TINY, str(outdir)], tmp_path)
    nnodes = world // nprocs
    assert [e["NODE_RANK"] for e in envs] == [str(i) for i in range(nnodes)]
    records = [json.load(open(p)) for p in sorted(glob.glob(str(outdir / "rank-*.json")))]
    assert sorted(r["rank"] for r in records) == list(range(world))
    expected = [world * i + world * (world - 1) / 2 for i in range(4)]
    for rec in records:
        env = rec["env"]
        assert rec["result"] == expected, rec
        assert rec["world_size"] == world and rec["backend"] == "gloo"
        assert env["WORLD_SIZE"] == str(world) and env["RANK"] == str(rec["rank"])
        node, local = int(env["NODE_RANK"]), int(env["LOCAL_RANK"])
        assert 0 <= local < nprocs and env["LOCAL_WORLD_SIZE"] == str(nprocs)
        assert rec["rank"] == node * nprocs + local  # static rendezvous: node-major ranks
        assert env["GROUP_RANK"] == env["NODE_RANK"]
        assert (env["NNODES"], env["NPROC_PER_NODE"]) == (str(nnodes), str(nprocs))
        assert env["TORCHDEV_BACKEND"] == "gloo"
    assert {(r["env"]["NODE_RANK"], r["env"]["LOCAL_RANK"]) for r in records} == \
        {(str(n), str(l)) for n in range(nnodes) for l in range(nprocs)}


@pytest.mark.slow
def test_allreduce_check_over_gloo(pods, tmp_path):
    ds = distributed("arc", 4, 2)
    report_path = tmp_path / "report.json"
    argv = [sys.executable, DEVRUN, ALLREDUCE_CHECK, "--sizes", "1K,64K,1M", "--iters", "3", "--warmup", "1",
            "--timeout", "60", "--json", str(report_path)]
    _, _, results = run_pods(pods, ds, argv, tmp_path)
    report = json.loads(report_path.read_text())
    assert report["ok"] is True
    assert (report["backend"], report["world_size"], report["expected_sum"]) == ("gloo", 4, 10)
    assert [r["size_bytes"] for r in report["results"]] == [1024, 65536, 1048576]
    for row in report["results"]:
        assert row["correct"] and row["errors"] == 0 and row["observed"] == 10
        assert row["time_us"] > 0 and row["algbw_gbps"] > 0 and row["busbw_gbps"] > 0
        assert row["busbw_gbps"] == pytest.approx(row["algbw_gbps"] * 2 * 3 / 4)
    assert "busbw(GB/s)" in results[0][1] and "PASS" in results[0][1]  # table on rank 0 (node 0)
    assert "busbw(GB/s)" not in results[1][1]


def test_allreduce_check_without_torchrun_is_a_usage_error(tmp_path):
    env = base_env()
    out = subprocess.run([sys.executable, ALLREDUCE_CHECK, "--sizes", "1K"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=str(tmp_path))
    assert out.returncode == 2 and "devrun" in out.stderr


def test_gpu_check_allow_cpu_json(tmp_path):
    env = base_env()  # CUDA_VISIBLE_DEVICES="": no GPU, even on a GPU machine
    cmd = [sys.executable, GPU_CHECK, "--json", "--cpu-mem-mib", "8", "--size", "64"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert out.returncode == 2, out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is False and "no GPU visible" in report["message"]
    out = subprocess.run(cmd + ["--allow-cpu"], env=env, capture_output=True, text=True, timeout=60, cwd=str(tmp_path))
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads(out.stdout)
    assert report["ok"] is True and report["mode"] == "cpu" and report["device_count"] == 0
    assert report["versions"]["torch"] == torch.__version__
    dev = report["devices"][0]
    assert set(dev["matmul"]) == {"bf16", "fp16", "fp32"}
    for res in dev["matmul"].values():
        assert res["ok"] and res["tflops"] > 0 and res["rel_error"] < 0.05
    assert dev["memtest"]["ok"] and dev["memtest"]["errors"] == 0
    assert [p["pattern"] for p in dev["memtest"]["patterns"]] == ["0x55", "0xAA", "index"]
    assert dev["memtest"]["bytes"] == 8 * 2 ** 20



@pytest.mark.slow
def test_allreduce_check_fails_on_a_wrong_result(pods, tmp_path):
    """--inject-fault: one rank contributes a wrong value; every pod must exit non-zero.

    errors: 1024 float32 elements x 2 ranks (counts are summed over ranks) x 2 checks (before/after timing).
    """
    ds = distributed("arcfail", 2, 1)
    report_path = tmp_path / "report.json"
    argv = [sys.executable, DEVRUN, ALLREDUCE_CHECK, "--sizes", "4K", "--iters", "1", "--warmup", "0",
            "--timeout", "60", "--inject-fault", "1", "--json", str(report_path)]
    _, envs = pod_envs(ds)
    for env in envs:
        pods.start(argv, env, str(tmp_path))
    results = pods.wait()
    assert all(rc != 0 for rc, _ in results), pods.outputs()
    report = json.loads(report_path.read_text())
    assert report["ok"] is False and report["inject_fault"] == 1
    row = report["results"][0]
    assert not row["correct"] and row["errors"] == 2 * 2 * 1024 and row["observed"] == 4 and row["expected"] == 3
    assert "FAIL" in results[0][1]

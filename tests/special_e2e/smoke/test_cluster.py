"""The namespace cluster of the cluster smoke: its configuration, its refusals, and (as root, with Debian's Slurm and
munge installed) a real two-node cluster made, used, crashed, restored and removed."""

import ipaddress
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.special_e2e.smoke import cluster as cluster_module
from tests.special_e2e.smoke.cluster import ClusterError, NamespaceCluster, free_subnet, node_names, slurm_conf

ROUTES = """default via 192.0.2.1 dev eth0
192.0.2.0/24 dev eth0 proto kernel scope link src 192.0.2.2
10.213.47.0/24 dev br0 proto kernel scope link src 10.213.47.254
10.213.48.0/23 dev br1
"""


def test_the_subnet_is_the_first_candidate_no_route_overlaps():
    assert free_subnet(ROUTES) == ipaddress.ip_network("10.213.50.0/24")  # 47 taken, 48-49 inside a /23
    assert free_subnet("default via 10.0.0.1 dev eth0\n") == ipaddress.ip_network("10.213.47.0/24")
    with pytest.raises(ClusterError, match="every candidate subnet"):
        free_subnet("10.0.0.0/8 dev eth1\n")


def test_slurm_conf_declares_every_node_with_its_address_cpus_and_a_gpu():
    root = Path("/var/tmp/x")
    conf = slurm_conf(node_names(2), ["10.1.2.1", "10.1.2.2"], root, cpus=24, slurmd_timeout_s=300)
    lines = conf.splitlines()
    assert "SlurmctldHost=gcpo-n1(10.1.2.1)" in lines
    assert "NodeName=gcpo-n2 NodeAddr=10.1.2.2 CPUs=24 Gres=gpu:1 State=UNKNOWN" in lines
    assert {
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "GresTypes=gpu",
        "SlurmdTimeout=300",
    } <= set(lines)
    assert f"AuthInfo=socket={root / 'munge' / 'munge.socket'}" in lines


def test_the_cluster_refuses_without_root_or_programs(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(ClusterError, match="needs root"):
        NamespaceCluster(tmp_path).start()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: None if name in ("slurmd", "munged") else "/usr/bin/" + name)
    with pytest.raises(ClusterError, match="missing slurmd, munged: apt-get install slurmctld slurmd"):
        NamespaceCluster(tmp_path).start()
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/" + name)
    with pytest.raises(ClusterError, match="at least 2 nodes"):
        NamespaceCluster(tmp_path, count=1).start()


def _answering(stdout: str = "", returncode: int = 0, stderr: str = ""):
    return lambda *args, **kwargs: subprocess.CompletedProcess(args, returncode, stdout=stdout, stderr=stderr)


def test_a_failed_wait_says_what_sinfo_gave_last(tmp_path, monkeypatch):
    cluster = NamespaceCluster(tmp_path)
    monkeypatch.setattr(cluster, "command", _answering("gcpo-n1 alloc\ngcpo-n2 idle\n"))
    with pytest.raises(ClusterError, match=r"not idle within 0 s: gcpo-n1 alloc, gcpo-n2 idle \(logs in "):
        cluster.wait_until_idle(0, ["gcpo-n1", "gcpo-n2"])
    error = "sinfo: error: slurm_load_node: Unable to contact slurm controller (connect failure)"
    monkeypatch.setattr(cluster, "command", _answering(returncode=1, stderr=f"noise\n{error}\n"))
    with pytest.raises(ClusterError, match=r"no answer from sinfo \(sinfo: error: slurm_load_node: Unable to contact"):
        cluster.wait_until_idle(0, ["gcpo-n1"])
    monkeypatch.setattr(cluster, "command", _answering())
    with pytest.raises(ClusterError, match=r"no answer from sinfo \(empty output\)"):
        cluster.wait_until_idle(0, ["gcpo-n1"])
    monkeypatch.setattr(cluster, "command", _answering("gcpo-n1 idle\n"))
    cluster.wait_until_idle(0, ["gcpo-n1"])


def _cluster_in(root: Path) -> NamespaceCluster:
    cluster = NamespaceCluster(root, count=2)
    cluster.nodes = [cluster_module.Node(n, f"10.1.2.{i}", f"ns{i}", f"v{i}") for i, n in enumerate(node_names(2), 1)]
    return cluster


def test_a_restored_node_is_set_down_before_its_link_and_slurmd_come_back(tmp_path, monkeypatch):
    """Set DOWN first, as Slurm sets a node that stops answering: the crashed job's COMPLETING state on it ends at
    once, not when slurmctld resends its TERMINATE_JOB (about 90 s); then the link, a fresh slurmd, the wait."""
    cluster = _cluster_in(tmp_path)
    calls = []
    monkeypatch.setattr(cluster, "command", lambda args, **kw: calls.append(("command", *args)))
    monkeypatch.setattr(cluster_module, "_run", lambda args, **kw: calls.append(("run", *args)))
    monkeypatch.setattr(cluster, "_start_node", lambda node: calls.append(("slurmd", node.name)))
    monkeypatch.setattr(cluster, "wait_until_idle", lambda timeout_s, names: calls.append(("wait", *names)))
    cluster.restore_node("gcpo-n2")
    assert calls == [
        ("command", "scontrol", "update", "nodename=gcpo-n2", "state=down", "reason=crashed by the smoke"),
        ("run", "ip", "link", "set", "v2", "up"),
        ("slurmd", "gcpo-n2"),
        ("wait", "gcpo-n2"),
    ]


def test_every_start_writes_a_fresh_cluster_folder(tmp_path, monkeypatch):
    """An earlier cluster's Slurm state (its jobs), spool and logs are gone; nothing else in the folder is touched;
    a folder with anything else in it and no marker is refused, not emptied."""
    monkeypatch.setattr(cluster_module, "NODE_PRIVATE", tmp_path / "node-private")
    root = tmp_path / "cluster"
    for name in ("state/job_state", "spool/gcpo-n1/cred_state", "log/slurmctld.log", "nodes/gcpo-n2/private/x"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text("from the cluster before")
    (root / "notes.txt").write_text("the user's")
    with pytest.raises(ClusterError, match=r"cluster holds notes.txt, not a cluster's folder of this harness"):
        _cluster_in(root)._write_files()
    assert (root / "state" / "job_state").is_file()
    (root / "notes.txt").unlink()
    _cluster_in(root)._write_files()  # a cluster's folder from before the marker
    (root / "state" / "job_state").write_text("from the cluster before")
    (root / "notes.txt").write_text("the user's, added since")
    cluster = _cluster_in(root)
    cluster._write_files()  # the marker: this module's folder
    assert not list((root / "state").iterdir()) and not list((root / "log").iterdir())
    assert not list((root / "spool" / "gcpo-n1").iterdir())
    assert not list((root / "nodes" / "gcpo-n2" / "private").iterdir())
    assert (root / "notes.txt").read_text() == "the user's, added since"
    assert "NodeName=gcpo-n2 NodeAddr=10.1.2.2" in cluster.conf.read_text()


REAL = os.geteuid() == 0 and not cluster_module.missing_programs()
needs_a_real_cluster = pytest.mark.skipif(
    not REAL,
    reason="needs root and Debian's slurmctld, slurmd, slurm-client and munge "
    "(bash scripts/smoke_cluster_cpu.sh installs them)",
)


@needs_a_real_cluster
def test_a_real_two_node_cluster(tmp_path_factory):
    """Both nodes take a job step with their own host name, address, private folder and process IDs; a crashed node's
    processes are all gone; a restored one takes steps again; nothing is left after stop."""
    root = tmp_path_factory.mktemp("cluster")
    root.chmod(0o755)  # the nodes' slurmd reads its config there
    cluster = NamespaceCluster(root, count=2, python=sys.executable)
    private = cluster_module.NODE_PRIVATE
    try:
        cluster.start()
        script = (
            f'touch "{private}/from-$(hostname)"; sleep 1; '
            f'echo "$(hostname) $(hostname --ip-address) $$ $(cd {private} && echo from-*)"'
        )
        step = cluster.command(["srun", "--nodes=2", "--ntasks=2", "bash", "-c", script], timeout=120)
        lines = sorted(step.stdout.split("\n")[:2])
        (n1, a1, pid1, tmp1), (n2, a2, pid2, tmp2) = (line.split() for line in lines)
        assert (n1, n2) == ("gcpo-n1", "gcpo-n2") and [a1, a2] == [n.address for n in cluster.nodes]
        assert int(pid1) < 1000 and int(pid2) < 1000  # numbered inside each node's PID namespace
        assert (tmp1, tmp2) == ("from-gcpo-n1", "from-gcpo-n2")  # each node sees only its own folder there
        assert not list(private.glob("from-gcpo-n*"))  # and this machine sees neither
        assert cluster.node_pids("gcpo-n2")
        record = cluster.kill_node("gcpo-n2")
        assert record["node"] == "gcpo-n2" and record["processes"] >= 2 and not cluster.node_pids("gcpo-n2")
        cluster.restore_node("gcpo-n2")
        again = cluster.command(["srun", "--nodes=1", "--ntasks=1", "-w", "gcpo-n2", "hostname"], timeout=120)
        assert again.stdout.strip() == "gcpo-n2"
    finally:
        cluster.stop()
        netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert all(node.netns not in netns and node.veth not in links for node in cluster.nodes)
    assert cluster.bridge not in links
    assert cluster.munged.poll() is not None and all(node.process.poll() is not None for node in cluster.nodes)


@needs_a_real_cluster
def test_a_cluster_made_again_in_the_same_folder_starts_idle(tmp_path_factory):
    """A job still running when its cluster was killed (as the smoke stops a cluster, and as a CI run's cluster held
    both nodes `alloc` with the job of the run before) is not recovered by the next cluster made in that folder."""
    root = tmp_path_factory.mktemp("cluster")
    root.chmod(0o755)
    first = NamespaceCluster(root, count=2, python=sys.executable)
    try:
        first.start()
        since = time.time()  # every save from here on has the job in it
        job = ["sbatch", "--parsable", "--nodes=2", "--exclusive", f"--output={root}/job.out"]
        first.command([*job, "--wrap", "srun --nodes=2 sleep 600"])
        saved = root / "state" / "job_state"
        running = cluster_module._wait_for
        running(lambda: set(first.node_states().values()) == {"alloc"}, 60, "the job never ran")
        running(lambda: saved.is_file() and saved.stat().st_mtime > since, 60, "slurmctld never saved the job")
    finally:
        first.stop()  # every daemon killed, as by the smoke
    second = NamespaceCluster(root, count=2, python=sys.executable)
    try:
        second.start(timeout_s=60)
        assert second.node_states() == {"gcpo-n1": "idle", "gcpo-n2": "idle"}
    finally:
        second.stop()

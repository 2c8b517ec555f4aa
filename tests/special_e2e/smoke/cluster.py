"""A real Slurm cluster of several nodes on one Linux machine, to run ``docker/slurm_gcpo.sbatch`` as a user would.

Each node is a set of Linux namespaces, made and removed here (root only):

* network: a veth pair whose outer end is on a bridge of its own, and one address in a private /24 that exists
  only between the namespaces made here (no default route, no NAT: a node reaches the other nodes and nothing
  else); ``gcpo-n1`` is ``<subnet>.1``, ``gcpo-n2`` ``<subnet>.2``, ...;
* host name (UTS), mounts (its own ``/etc/hosts`` naming every node, its own ``/dev/shm``, and a folder of its own
  at :data:`NODE_PRIVATE`, where the jobs put ``RAY_TMPDIR``, so that each node's Ray has its own sockets and
  session as on separate hosts; ``/tmp`` stays shared, since the checkout, its environments and a CI's work
  folder may live there) and process IDs. The PID namespace matters: the sbatch's and Ray's clean-ups kill every Ray process they
  can see, and a node must not see another's. It also makes a crashed node: SIGKILL to the namespace's first
  process ends every process in it, as when a host dies.

One munged (on its own socket) serves every node; slurmctld runs on node 1, which is also the login node where
``sbatch`` runs; one slurmd per node. What Slurm 22.05 (Debian 12's ``slurmctld``, ``slurmd``, ``slurm-client``)
needs to run this way, each found by trying:

* the node's namespaces entered with ``nsenter --net`` and made with ``unshare --uts --pid --fork --mount
  --mount-proc``: ``ip netns exec`` remounts ``/sys`` and hides the cgroup mounts slurmd reads;
* ``cgroup.conf`` ``CgroupPlugin=cgroup/v1``, ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``;
* a ``gpu`` gres backed by a device file (``File=/dev/null``): a count-only gres reads as 0 and the node goes
  INVAL. Its flags are Slurm's defaults, so each step gets ``CUDA_VISIBLE_DEVICES``, ``ROCR_VISIBLE_DEVICES`` and
  ``GPU_DEVICE_ORDINAL``, as on clusters whose ``gres.conf`` has no ``Flags=nvidia_gpu_env``;
* ``CPUs`` declared per node with ``SlurmdParameters=config_overrides`` (verl's actors each ask Ray for a CPU:
  the job needs more logical CPUs than the machine's cores).
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import psutil

ROOT = Path(__file__).resolve().parents[3]
NODE_PREFIX = "gcpo-n"
# each node's own folder, at the same path on every node (short: Ray's socket paths end at 107 characters)
NODE_PRIVATE = Path("/run/gcpo-node")
# private /24s tried in order; the first that no route of this machine overlaps is used
CANDIDATE_SUBNETS = tuple(f"10.213.{third}.0/24" for third in range(47, 60))
DEBIAN_PACKAGES = ("slurmctld", "slurmd", "slurm-client", "munge", "iproute2", "util-linux")
PROGRAMS = ("slurmctld", "slurmd", "sbatch", "scontrol", "munged", "ip", "nsenter", "unshare")
# what a cluster writes under its root (each made anew by every start)
CLUSTER_FOLDERS = ("etc", "state", "run", "log", "munge", "spool", "nodes")
CLUSTER_MARKER = ".gcpo-namespace-cluster"  # in a cluster's root: the folder is one this module made


class ClusterError(RuntimeError):
    """The cluster could not be made, or a node did not come up: one line saying which and why."""


def node_names(count: int) -> list[str]:
    return [f"{NODE_PREFIX}{index}" for index in range(1, count + 1)]


def free_subnet(routes: str, candidates: Sequence[str] = CANDIDATE_SUBNETS) -> ipaddress.IPv4Network:
    """The first candidate /24 that overlaps none of the networks in ``ip -4 route`` output ``routes``."""
    taken = []
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        if word == "default":
            continue
        try:
            taken.append(ipaddress.ip_network(word, strict=False))
        except ValueError:
            continue
    for candidate in candidates:
        network = ipaddress.ip_network(candidate)
        if not any(network.overlaps(other) for other in taken):
            return network
    raise ClusterError(
        f"every candidate subnet ({candidates[0]} ... {candidates[-1]}) overlaps a route of this machine"
    )


def missing_programs(programs: Sequence[str] = PROGRAMS) -> list[str]:
    return [name for name in programs if shutil.which(name) is None]


def slurm_conf(nodes: Sequence[str], addresses: Sequence[str], root: Path, cpus: int, slurmd_timeout_s: int) -> str:
    """slurm.conf of the cluster: every daemon as root, state and logs under ``root``."""
    lines = [
        "ClusterName=gcpo-smoke",
        f"SlurmctldHost={nodes[0]}({addresses[0]})",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"StateSaveLocation={root / 'state'}",
        f"SlurmdSpoolDir={root / 'spool' / '%n'}",
        f"SlurmctldPidFile={root / 'run' / 'slurmctld.pid'}",
        f"SlurmdPidFile={root / 'run' / 'slurmd-%n.pid'}",
        f"SlurmctldLogFile={root / 'log' / 'slurmctld.log'}",
        f"SlurmdLogFile={root / 'log' / 'slurmd-%n.log'}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SchedulerType=sched/backfill",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "MpiDefault=none",
        # a node that comes back (a restarted slurmd) is usable again without an administrator
        "ReturnToService=2",
        "SlurmdParameters=config_overrides",
        f"SlurmdTimeout={slurmd_timeout_s}",
        "MinJobAge=3600",  # finished jobs stay in `scontrol show job` while the smoke reads them
        "GresTypes=gpu",
    ]
    lines += [
        f"NodeName={name} NodeAddr={address} CPUs={cpus} Gres=gpu:1 State=UNKNOWN"
        for name, address in zip(nodes, addresses)
    ]
    lines.append("PartitionName=smoke Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


@dataclass
class Node:
    name: str
    address: str
    netns: str
    veth: str  # the outer end, on the bridge
    process: Optional[subprocess.Popen] = None  # `nsenter ... unshare ...`; its child is the node's first process


@dataclass
class NamespaceCluster:
    """``count`` Slurm nodes in namespaces under ``root`` (made and removed by :meth:`start` / :meth:`stop`; use as
    a context manager). ``python`` runs each node's first process (:func:`node_main`)."""

    root: Path
    count: int = 2
    cpus_per_node: int = 24
    slurmd_timeout_s: int = 300
    python: str = sys.executable
    tag: str = field(default_factory=lambda: f"{os.getpid() % 100000:05d}")
    nodes: list[Node] = field(default_factory=list)
    munged: Optional[subprocess.Popen] = None
    bridge: str = ""
    subnet: Optional[ipaddress.IPv4Network] = None
    last_sinfo_error: str = ""  # sinfo's last line of complaint, while slurmctld does not answer

    @property
    def conf(self) -> Path:
        return self.root / "etc" / "slurm.conf"

    @property
    def env(self) -> dict[str, str]:
        """The environment of Slurm's commands for this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def __enter__(self) -> "NamespaceCluster":
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # ---- making it ---------------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> None:
        if os.geteuid() != 0:
            raise ClusterError("the cluster needs root (network namespaces, Slurm's and munge's daemons)")
        missing = missing_programs()
        if missing:
            raise ClusterError(f"missing {', '.join(missing)}: apt-get install {' '.join(DEBIAN_PACKAGES)}")
        if self.count < 2:
            raise ClusterError(f"a cluster needs at least 2 nodes, got {self.count}")
        self.subnet = free_subnet(_run(["ip", "-4", "route"]).stdout)
        hosts = list(self.subnet.hosts())
        self.bridge = f"gcpo{self.tag}br"
        self.nodes = [
            Node(name, str(hosts[index]), f"gcpo{self.tag}-{name}", f"gcpo{self.tag}v{index + 1}")
            for index, name in enumerate(node_names(self.count))
        ]
        self._write_files()
        self._start_munge()
        self._make_network()
        for node in self.nodes:
            self._start_node(node)
        self.wait_until_idle(timeout_s)

    def _write_files(self) -> None:
        # A cluster's state never outlives it: slurmctld recovers the jobs of an earlier cluster made in this folder
        # from StateSaveLocation, and a job that was running when that cluster was killed holds every node `alloc`
        # (a CI run's cluster never went idle that way). Only the folders made here are removed, and only in a root
        # that holds nothing else (a cluster's before the marker existed) or has the marker.
        if self.root.is_dir() and not (self.root / CLUSTER_MARKER).is_file():
            foreign = sorted(entry.name for entry in self.root.iterdir() if entry.name not in CLUSTER_FOLDERS)
            if foreign:
                raise ClusterError(
                    f"{self.root} holds {', '.join(foreign)}, not a cluster's folder of this harness: choose another"
                )
        for sub in CLUSTER_FOLDERS:
            if (self.root / sub).exists():
                shutil.rmtree(self.root / sub)  # an error here must show: what stays would be recovered
        self.root.mkdir(parents=True, exist_ok=True)
        (self.root / CLUSTER_MARKER).touch()
        for sub in (
            "etc",
            "state",
            "run",
            "log",
            "munge",
            *(f"spool/{n.name}" for n in self.nodes),
            *(f"nodes/{n.name}/private" for n in self.nodes),
        ):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        (self.root / "munge").chmod(0o755)  # munged asks that its socket's folder be reachable by every user
        for node in self.nodes:
            (self.root / "nodes" / node.name / "private").chmod(0o1777)
        NODE_PRIVATE.mkdir(parents=True, exist_ok=True)  # the mount point (empty on this machine itself)
        names, addresses = [n.name for n in self.nodes], [n.address for n in self.nodes]
        self.conf.write_text(slurm_conf(names, addresses, self.root, self.cpus_per_node, self.slurmd_timeout_s))
        (self.root / "etc" / "gres.conf").write_text("Name=gpu File=/dev/null\n")
        (self.root / "etc" / "cgroup.conf").write_text("CgroupPlugin=cgroup/v1\n")
        (self.root / "etc" / "hosts").write_text(
            "127.0.0.1 localhost\n" + "".join(f"{n.address} {n.name}\n" for n in self.nodes)
        )

    def _start_munge(self) -> None:
        key = self.root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        munge = self.root / "munge"
        self.munged = subprocess.Popen(
            [
                "munged",
                "--foreground",
                "--force",
                f"--socket={munge / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={munge / 'munged.pid'}",
                f"--seed-file={munge / 'munged.seed'}",
                f"--log-file={self.root / 'log' / 'munged.log'}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "log" / "munged.out", "ab"),
            start_new_session=True,
        )
        _wait_for(
            lambda: (munge / "munge.socket").exists(),
            10,
            f"munged did not create its socket (see {self.root / 'log' / 'munged.out'})",
        )

    def _make_network(self) -> None:
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "link", "set", self.bridge, "up"])
        for node in self.nodes:
            _run(["ip", "netns", "add", node.netns])
            _run(["ip", "link", "add", node.veth, "type", "veth", "peer", "name", "eth0", "netns", node.netns])
            _run(["ip", "link", "set", node.veth, "master", self.bridge])
            _run(["ip", "link", "set", node.veth, "up"])
            _run(["ip", "-n", node.netns, "addr", "add", f"{node.address}/{self.subnet.prefixlen}", "dev", "eth0"])
            _run(["ip", "-n", node.netns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", node.netns, "link", "set", "lo", "up"])

    def _node_spec(self, node: Node) -> Path:
        spec = {
            "name": node.name,
            "hosts": str(self.root / "etc" / "hosts"),
            "private": str(self.root / "nodes" / node.name / "private"),
            "private_at": str(NODE_PRIVATE),
            "conf": str(self.conf),
            "controller": node is self.nodes[0],
            "log": str(self.root / "log" / f"{node.name}.out"),
        }
        path = self.root / "etc" / f"{node.name}.json"
        path.write_text(json.dumps(spec), encoding="utf-8")
        return path

    def _start_node(self, node: Node) -> None:
        spec = self._node_spec(node)
        node.process = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{node.netns}",
                "unshare",
                "--uts",
                "--pid",
                "--fork",
                "--mount",
                "--mount-proc",
                self.python,
                "-m",
                "tests.special_e2e.smoke.cluster",
                str(spec),
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=open(self.root / "log" / f"{node.name}.out", "ab"),
            start_new_session=True,
        )

    def node_states(self) -> dict[str, str]:
        """Each node's state as Slurm has it (``idle``, ``alloc``, ``down*``, ...); empty while slurmctld does not
        answer (:attr:`last_sinfo_error` then says why)."""
        proc = self.command(["sinfo", "--noheader", "--Node", "--format=%N %t"], check=False, timeout=30)
        self.last_sinfo_error = (proc.stderr.strip().splitlines() or [""])[-1] if proc.returncode else ""
        states = {}
        for line in proc.stdout.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def wait_until_idle(self, timeout_s: float, names: Optional[Sequence[str]] = None) -> None:
        names = list(names or [n.name for n in self.nodes])
        last: dict[str, str] = {}

        def idle() -> bool:
            nonlocal last
            last = self.node_states()
            return all(last.get(name) == "idle" for name in names)

        def why() -> str:  # made when the wait fails: the states sinfo gave last, or why it gave none
            seen = ", ".join(f"{name} {state}" for name, state in sorted(last.items()))
            answer = seen or f"no answer from sinfo ({self.last_sinfo_error or 'empty output'})"
            return f"Slurm nodes not idle within {timeout_s:.0f} s: {answer} (logs in {self.root / 'log'})"

        _wait_for(idle, timeout_s, why)

    # ---- using it ----------------------------------------------------------------------------------------------
    def command(
        self, args: Sequence[str], check: bool = True, timeout: float = 60, env: Optional[dict] = None
    ) -> subprocess.CompletedProcess:
        """A command on node 1's network (the login node): ``sbatch``, ``scontrol``, ``sinfo``, Ray's state API."""
        return _run(
            ["nsenter", f"--net=/run/netns/{self.nodes[0].netns}", *args],
            check=check,
            timeout=timeout,
            env=env or self.env,
        )

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    def node_pids(self, name: str) -> set[int]:
        """Every process in the node's PID namespace (as this machine numbers them)."""
        first = self._first_process(self.node(name))
        if first is None:
            return set()
        try:
            namespace = os.readlink(f"/proc/{first.pid}/ns/pid")
        except OSError:
            return set()
        pids = set()
        for process in psutil.process_iter():
            try:
                if os.readlink(f"/proc/{process.pid}/ns/pid") == namespace:
                    pids.add(process.pid)
            except OSError:
                continue
        return pids

    def kill_node(self, name: str) -> dict:
        """Crash a node: its link goes down first (nothing it had open is closed politely: peers see silence, as
        from a dead host), then SIGKILL to its first process ends every process in its PID namespace."""
        node = self.node(name)
        started = time.time()
        _run(["ip", "link", "set", node.veth, "down"])
        first = self._first_process(node)
        killed = len(self.node_pids(name))
        if first is not None:
            first.kill()
        if node.process is not None:
            try:
                node.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                node.process.kill()
        return {"node": name, "time": started, "processes": killed}

    def restore_node(self, name: str, timeout_s: float = 120.0) -> None:
        """Bring a crashed node back (its link, a fresh slurmd) and wait until Slurm has it idle again. The node is
        set DOWN first, as Slurm does itself once SlurmdTimeout passes without an answer: that ends the crashed job's
        COMPLETING state on it at once (else slurmctld holds the node until it resends the job's TERMINATE_JOB,
        about 90 s after the new slurmd answers), and ReturnToService=2 takes it back when that slurmd registers."""
        node = self.node(name)
        self.command(["scontrol", "update", f"nodename={name}", "state=down", "reason=crashed by the smoke"])
        _run(["ip", "link", "set", node.veth, "up"])
        self._start_node(node)
        self.wait_until_idle(timeout_s, [name])

    @staticmethod
    def _first_process(node: Node) -> Optional[psutil.Process]:
        if node.process is None or node.process.poll() is not None:
            return None
        try:
            children = psutil.Process(node.process.pid).children()
        except psutil.Error:
            return None
        return children[0] if children else None

    # ---- removing it -------------------------------------------------------------------------------------------
    def stop(self) -> None:
        """Stop every daemon by its PID, then delete the namespaces and the bridge; safe to call more than once
        and after a failed start."""
        for node in self.nodes:
            first = self._first_process(node)
            if first is not None:
                try:
                    first.kill()
                except psutil.Error:
                    pass
            if node.process is not None:
                _reap(node.process)
        if self.munged is not None:
            self.munged.terminate()
            _reap(self.munged)
        for node in self.nodes:
            _run(["ip", "netns", "delete", node.netns], check=False)
            _run(["ip", "link", "delete", node.veth], check=False)
        if self.bridge:
            _run(["ip", "link", "delete", self.bridge], check=False)


def _reap(process: subprocess.Popen, timeout_s: float = 20) -> None:
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=timeout_s)


def _run(
    args: Sequence[str], check: bool = True, timeout: float = 60, env: Optional[dict] = None
) -> subprocess.CompletedProcess:
    try:
        proc = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"`{' '.join(args)}` did not finish in {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        why = (proc.stderr.strip() or proc.stdout.strip()).splitlines()
        raise ClusterError(f"`{' '.join(args)}` exited {proc.returncode}: {why[-1] if why else 'no output'}")
    return proc


def _wait_for(
    condition: Callable[[], bool], timeout_s: float, message: Union[str, Callable[[], str]], interval_s: float = 1.0
) -> None:
    """Poll ``condition`` until it holds; past ``timeout_s``, raise :class:`ClusterError` with ``message`` (a callable
    is called then, so that it can say what the last poll saw)."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise ClusterError(message() if callable(message) else message)
        time.sleep(interval_s)


# ---- a node's first process ---------------------------------------------------------------------------------------
def node_main(spec_path: str) -> int:
    """PID 1 of a node's namespaces: its host name and mounts, then its daemons (slurmd; slurmctld on node 1),
    reaping every process that ends in the namespace (slurmstepd double-forks), until the daemons are gone."""
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    import socket

    socket.sethostname(spec["name"])
    for args in (
        ["mount", "--bind", spec["hosts"], "/etc/hosts"],
        ["mount", "--bind", spec["private"], spec["private_at"]],
        ["mount", "-t", "tmpfs", "-o", "mode=1777", "tmpfs", "/dev/shm"],
    ):
        subprocess.run(args, check=True)
    daemons = [subprocess.Popen(["slurmd", "-D", "-N", spec["name"], "-f", spec["conf"]])]
    if spec["controller"]:
        daemons.append(subprocess.Popen(["slurmctld", "-D", "-f", spec["conf"]]))

    def forward(signum, _frame):
        for daemon in daemons:
            if daemon.poll() is None:
                daemon.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    alive = {d.pid for d in daemons}
    while alive:
        try:
            pid, _status = os.wait()
        except ChildProcessError:
            break
        except InterruptedError:
            continue
        alive.discard(pid)
    return 0


if __name__ == "__main__":
    sys.exit(node_main(sys.argv[1]))

"""The Slurm script's head / worker logic, with stub srun, scontrol, apptainer, ray, hostname and ip."""

import os
import re
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "docker" / "slurm_gcpo.sbatch"

NODE_INDEX = """$(( $(tr ' ' '\\n' <<< "$STUB_NODES" | grep -n "^$STUB_NODE$" | cut -d: -f1) ))"""
STUBS = {
    "scontrol": """[ "$1 $2" = "show hostnames" ] && tr ' ' '\\n' <<< "$STUB_NODES" """,
    # srun: log (one line), drop its own options (-w takes a value), then run the command "on" that node
    "srun": """echo "srun ${*//$'\\n'/ }" >> "$STUB_LOG"
node=""
while [ $# -gt 0 ]; do case "$1" in -w) node="$2"; shift 2;; -*) shift;; *) break;; esac; done
STUB_NODE="${node:-$STUB_NODE}" exec "$@" """,
    "apptainer": """echo "apptainer ${*//$'\\n'/ }" >> "$STUB_LOG"
shift; while [ $# -gt 0 ]; do case "$1" in --nv) shift;; --bind) shift 2;; *) break;; esac; done
shift; exec "$@" """,
    # hostname --ip-address: the name's address (Debian maps it to 127.0.1.1 in /etc/hosts: STUB_HOSTNAME_LOOPBACK);
    # hostname -I: every address of the host (none with STUB_NO_HOSTNAME_I)
    "hostname": f"""case "$1" in
  -I) [ -z "${{STUB_NO_HOSTNAME_I:-}}" ] && echo "10.2.0.{NODE_INDEX} 172.17.0.1" || exit 1;;
  *) if [ -n "${{STUB_HOSTNAME_LOOPBACK:-}}" ]; then echo 127.0.1.1; else echo "10.0.0.{NODE_INDEX}"; fi;;
esac""",
    # ip -4 -o addr show [dev] IFACE ...: the interface's address, unless the container has no iproute2 (STUB_NO_IP)
    "ip": f"""if [ -n "${{STUB_NO_IP:-}}" ]; then echo "bash: ip: command not found" >&2; exit 127; fi
iface="$5"; [ "$iface" = dev ] && iface="$6"
echo "3: $iface    inet 192.168.9.{NODE_INDEX}/24 brd x scope global $iface" """,
    # python3, as the fallbacks use it: an interface's address by ioctl, or the default route's source address
    "python3": f"""[ -n "${{STUB_NO_PY:-}}" ] && exit 1
case "$*" in *fcntl*) echo "192.168.9.{NODE_INDEX}";; *connect*) echo "10.1.0.{NODE_INDEX}";; *) exit 3;; esac""",
    # ray start --block: register the node (workers only when STUB_WORKERS_JOIN=1, after STUB_JOIN_DELAY s), then
    # block until `ray stop` on that node ends it, as the real one does
    "ray": """echo "ray $* node=$STUB_NODE nccl=${NCCL_SOCKET_IFNAME:-} tmp=${RAY_TMPDIR:-}" >> "$STUB_LOG"
case "$1" in
  start) if [[ "$*" == *--head* ]]; then echo "$STUB_NODE" >> "$STUB_JOINED"
         elif [[ "${STUB_WORKERS_JOIN:-1}" == 1 ]]; then
           sleep "${STUB_JOIN_DELAY:-0}"; echo "$STUB_NODE" >> "$STUB_JOINED"
         fi
         echo "$$" >> "$STUB_JOINED.$STUB_NODE.pids"
         exec sleep 60 > /dev/null;;
  status) echo "Node status"; echo "Active:"; [ -f "$STUB_JOINED" ] && sed 's/^/ 1 node_/' "$STUB_JOINED"
          echo "Pending:"; echo " (no pending nodes)";;
  stop) [ -f "$STUB_JOINED.$STUB_NODE.pids" ] && xargs kill < "$STUB_JOINED.$STUB_NODE.pids" 2>/dev/null;;
esac""",
}


@pytest.fixture
def cluster(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in STUBS.items():
        path = bin_dir / name
        path.write_text("#!/usr/bin/env bash\n" + body + "\n")
        path.chmod(path.stat().st_mode | stat.S_IEXEC)
    launcher = tmp_path / "launcher.sh"
    launcher.write_text('echo "launcher node=$STUB_NODE RAY_ADDRESS=$RAY_ADDRESS NNODES=$NNODES '
                        'GPUS_PER_NODE=$GPUS_PER_NODE NCCL=${NCCL_SOCKET_IFNAME:-} args=$*" >> "$STUB_LOG"\n'
                        'echo "launcher tmp=${RAY_TMPDIR:-}" >> "$STUB_LOG"\n')
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_LOG=str(tmp_path / "log"),
               STUB_JOINED=str(tmp_path / "joined"), STUB_NODES="gpu-a gpu-b gpu-c", SLURM_JOB_NODELIST="gpu-[a-c]",
               SLURM_CPUS_PER_TASK="48", SLURM_GPUS_PER_NODE="h100:4", RAY_POLL_INTERVAL="0.2",
               RAY_TMPDIR=str(tmp_path / "ray-tmp"))

    def run(*args, **extra):
        proc = subprocess.run(["bash", str(SBATCH), str(launcher), *args], capture_output=True, text=True,
                              env={**env, **extra}, timeout=120)
        log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
        return proc, log

    return run


def test_head_then_workers_then_the_launcher_on_the_head(cluster):
    proc, log = cluster("trainer.total_training_steps=10")
    assert proc.returncode == 0, proc.stderr
    starts = [line for line in log if line.startswith("ray start")]
    head = [line for line in starts if "--head" in line]
    workers = [line for line in starts if "--head" not in line]
    assert len(head) == 1 and "node=gpu-a" in head[0]
    assert "--node-ip-address=10.0.0.1" in head[0] and "--port=6379" in head[0]
    assert "--num-cpus=48" in head[0] and "--num-gpus=4" in head[0]  # fixed counts, "h100:4" -> 4
    assert sorted(w.split("node=")[1].split()[0] for w in workers) == ["gpu-b", "gpu-c"]
    for worker, ip in zip(sorted(workers, key=lambda w: w.split("node=")[1]), ("10.0.0.2", "10.0.0.3")):
        assert "--address=10.0.0.1:6379" in worker and f"--node-ip-address={ip}" in worker
    launched = [line for line in log if line.startswith("launcher node=")]
    assert launched == ["launcher node=gpu-a RAY_ADDRESS=10.0.0.1:6379 NNODES=3 GPUS_PER_NODE=4 NCCL= "
                        "args=trainer.total_training_steps=10"]
    assert log.index(launched[0]) > max(log.index(s) for s in starts)
    assert sum(line.startswith("ray stop") for line in log) == 3  # cleaned up on every node
    assert any(re.match(r"apptainer exec --nv --bind \S+ gcpo-verl.sif env RAY_TMPDIR=\S+ ray start", line)
               for line in log)


def test_multi_nic_hosts_bind_ray_nccl_and_gloo_to_the_given_interface(cluster):
    proc, log = cluster(RAY_NETWORK_INTERFACE="ib0")
    assert proc.returncode == 0, proc.stderr
    head = next(line for line in log if line.startswith("ray start") and "--head" in line)
    assert "--node-ip-address=192.168.9.1" in head and "nccl=ib0" in head
    assert any("--address=192.168.9.1:6379" in line for line in log)
    assert "NCCL=ib0" in next(line for line in log if line.startswith("launcher node="))


def test_pyxis_runs_through_srun_container_flags(cluster):
    proc, log = cluster(CONTAINER_RUNTIME="pyxis", CONTAINER_IMAGE="nvcr.io#me/gcpo:1", CONTAINER_MOUNTS="/data:/data")
    assert proc.returncode == 0, proc.stderr
    assert any("--container-image=nvcr.io#me/gcpo:1" in line and "--container-mounts=/data:/data" in line
               for line in log if line.startswith("srun"))
    assert not any(line.startswith("apptainer") for line in log)


def test_nodes_that_never_join_fail_the_job_with_a_clear_message(cluster):
    proc, log = cluster(STUB_WORKERS_JOIN="0", RAY_JOIN_TIMEOUT="2")
    assert proc.returncode == 1
    assert "only 1 of 3 nodes joined the Ray cluster within 2 s" in proc.stderr
    assert not any(line.startswith("launcher") for line in log)


def test_an_unknown_container_runtime_is_refused(cluster):
    proc, _ = cluster(CONTAINER_RUNTIME="docker")
    assert proc.returncode == 2 and "CONTAINER_RUNTIME must be apptainer, pyxis or none" in proc.stderr


def node_ips(log):
    """{node: the address it was started with}, from the `ray start` lines."""
    starts = [line for line in log if line.startswith("ray start")]
    return {line.split("node=")[1].split()[0]: line.split("--node-ip-address=")[1].split()[0] for line in starts}


def test_without_iproute2_in_the_container_the_interface_address_comes_from_python(cluster):
    proc, log = cluster(RAY_NETWORK_INTERFACE="ib0", STUB_NO_IP="1")
    assert proc.returncode == 0, proc.stderr
    assert node_ips(log) == {"gpu-a": "192.168.9.1", "gpu-b": "192.168.9.2", "gpu-c": "192.168.9.3"}


def test_a_loopback_host_address_is_passed_over_for_a_routable_one(cluster):
    proc, log = cluster(STUB_HOSTNAME_LOOPBACK="1")  # hostname --ip-address says 127.0.1.1, as on Debian hosts
    assert proc.returncode == 0, proc.stderr
    assert node_ips(log) == {"gpu-a": "10.1.0.1", "gpu-b": "10.1.0.2", "gpu-c": "10.1.0.3"}  # the default route's
    proc, log = cluster(STUB_HOSTNAME_LOOPBACK="1", STUB_NO_PY="1")
    assert proc.returncode == 0 and node_ips(log)["gpu-a"] == "10.2.0.1"  # then hostname -I's first


def test_a_node_with_only_a_loopback_address_fails_with_a_clear_message(cluster):
    proc, log = cluster(STUB_HOSTNAME_LOOPBACK="1", STUB_NO_PY="1", STUB_NO_HOSTNAME_I="1")
    assert proc.returncode == 1
    assert "gpu-a has no IPv4 address other nodes can reach: found only loopback 127.0.1.1" in proc.stderr
    assert "set RAY_NETWORK_INTERFACE" in proc.stderr
    assert not any(line.startswith("ray start") for line in log)


def test_an_interface_without_an_address_fails_with_a_clear_message(cluster):
    proc, log = cluster(RAY_NETWORK_INTERFACE="ib7", STUB_NO_IP="1", STUB_NO_PY="1")
    assert proc.returncode == 1 and "gpu-a has no IPv4 address on ib7" in proc.stderr
    assert not any(line.startswith("ray start") for line in log)


def test_under_pyxis_every_container_shares_the_nodes_ray_directory(cluster, tmp_path):
    """Each `srun --container-image` is a fresh container with its own /tmp: the driver, started in another
    container than the head's `ray start`, must still find the head's Ray sockets and session."""
    proc, log = cluster(CONTAINER_RUNTIME="pyxis", CONTAINER_IMAGE="nvcr.io#me/gcpo:1", CONTAINER_MOUNTS="/data:/data")
    assert proc.returncode == 0, proc.stderr
    ray_tmp = tmp_path / "ray-tmp"
    in_containers = [line for line in log if line.startswith("srun") and "--container-image" in line]
    assert in_containers and all(f"--container-mounts=/data:/data,{ray_tmp}:{ray_tmp} " in line
                                 for line in in_containers)
    assert ray_tmp.is_dir()  # made on every host before a container binds it
    starts = [line for line in log if line.startswith("ray start")]
    assert len(starts) == 3 and all(line.endswith(f"tmp={ray_tmp}") for line in starts)
    assert f"launcher tmp={ray_tmp}" in log


def test_waiting_for_nodes_starts_one_container_however_often_it_polls(cluster):
    proc, log = cluster(STUB_JOIN_DELAY="1")  # workers join a second late: polled every 0.2 s meanwhile
    assert proc.returncode == 0, proc.stderr
    polls = [line for line in log if line.startswith("ray status")]
    containers_for_polls = [line for line in log if line.startswith("srun") and "ray status" in line]
    assert len(polls) >= 4
    assert len(containers_for_polls) == 2  # one wait for the head, one for every node


def test_apptainer_binds_the_mounts_and_rays_directory(cluster, tmp_path):
    proc, log = cluster(CONTAINER_MOUNTS="/data:/data")
    assert proc.returncode == 0, proc.stderr
    in_containers = [line for line in log if line.startswith("apptainer")]
    assert in_containers and all(f"--bind /data:/data,{tmp_path / 'ray-tmp'} gcpo-verl.sif" in line
                                 for line in in_containers)

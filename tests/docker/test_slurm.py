"""The Slurm script's head / worker logic, with stub srun, scontrol, apptainer, ray, hostname and ip."""

import os
import stat
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "docker" / "slurm_gcpo.sbatch"

STUBS = {
    "scontrol": """[ "$1 $2" = "show hostnames" ] && tr ' ' '\\n' <<< "$STUB_NODES" """,
    # srun: log, drop its own options (-w takes a value), then run the command "on" that node
    "srun": """echo "srun $*" >> "$STUB_LOG"
node=""
while [ $# -gt 0 ]; do case "$1" in -w) node="$2"; shift 2;; -*) shift;; *) break;; esac; done
STUB_NODE="$node" exec "$@" """,
    "apptainer": """echo "apptainer $*" >> "$STUB_LOG"
shift; while [ $# -gt 0 ]; do case "$1" in --nv) shift;; --bind) shift 2;; *) break;; esac; done
shift; exec "$@" """,
    "hostname": """echo "10.0.0.$(( $(tr ' ' '\\n' <<< "$STUB_NODES" | grep -n "^$STUB_NODE$" | cut -d: -f1) ))" """,
    "ip": """echo "3: $5    inet 192.168.9.$(( $(tr ' ' '\\n' <<< "$STUB_NODES" | grep -n "^$STUB_NODE$" | cut -d: -f1) ))/24 brd x" """,
    # ray start --block: register the node (workers only when STUB_WORKERS_JOIN=1), then block until
    # `ray stop` on that node ends it, as the real one does
    "ray": """echo "ray $* node=$STUB_NODE nccl=${NCCL_SOCKET_IFNAME:-}" >> "$STUB_LOG"
case "$1" in
  start) if [[ "$*" == *--head* || "${STUB_WORKERS_JOIN:-1}" == 1 ]]; then echo "$STUB_NODE" >> "$STUB_JOINED"; fi
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
                        'GPUS_PER_NODE=$GPUS_PER_NODE NCCL=${NCCL_SOCKET_IFNAME:-} args=$*" >> "$STUB_LOG"\n')
    env = dict(os.environ, PATH=f"{bin_dir}:{os.environ['PATH']}", STUB_LOG=str(tmp_path / "log"),
               STUB_JOINED=str(tmp_path / "joined"), STUB_NODES="gpu-a gpu-b gpu-c", SLURM_JOB_NODELIST="gpu-[a-c]",
               SLURM_CPUS_PER_TASK="48", SLURM_GPUS_PER_NODE="h100:4", RAY_POLL_INTERVAL="0.2")

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
    launched = [line for line in log if line.startswith("launcher")]
    assert launched == ["launcher node=gpu-a RAY_ADDRESS=10.0.0.1:6379 NNODES=3 GPUS_PER_NODE=4 NCCL= "
                        "args=trainer.total_training_steps=10"]
    assert log.index(launched[0]) > max(log.index(s) for s in starts)
    assert sum(line.startswith("ray stop") for line in log) == 3  # cleaned up on every node
    assert any(line.startswith("apptainer exec --nv gcpo-verl.sif") for line in log)


def test_multi_nic_hosts_bind_ray_nccl_and_gloo_to_the_given_interface(cluster):
    proc, log = cluster(RAY_NETWORK_INTERFACE="ib0")
    assert proc.returncode == 0, proc.stderr
    head = next(line for line in log if line.startswith("ray start") and "--head" in line)
    assert "--node-ip-address=192.168.9.1" in head and "nccl=ib0" in head
    assert any("--address=192.168.9.1:6379" in line for line in log)
    assert "NCCL=ib0" in next(line for line in log if line.startswith("launcher"))


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

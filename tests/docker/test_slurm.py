"""The Slurm script's head / worker logic, with stub srun, scontrol, apptainer, podman, ray, hostname and ip."""

import os
import re
import stat
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SBATCH = ROOT / "docker" / "slurm_gcpo.sbatch"

NODE_INDEX = """$(( $(tr ' ' '\\n' <<< "$STUB_NODES" | grep -n "^$STUB_NODE$" | cut -d: -f1) ))"""
STUBS = {
    "scontrol": """[ "$1 $2" = "show hostnames" ] && tr ' ' '\\n' <<< "$STUB_NODES" """,
    # srun: log (one line), drop its own options (-w takes a value), then run the command "on" that node
    # srun: log (one line), drop its own options (-w takes a value), then run the command "on" that node, with the
    # device variables Slurm's gpu gres sets in every step unless gres.conf has Flags=nvidia_gpu_env
    # (pyxis, unless STUB_NO_PYXIS: --help names --container-image; a step with --container-mounts logs what its
    # container gets, as the apptainer and podman stubs do)
    "srun": """if [ "$1" = --help ]; then [ -z "${STUB_NO_PYXIS:-}" ] && echo "  --container-image=[USER@][REGISTRY#]IMAGE"
  exit 0; fi
echo "srun ${*//$'\\n'/ }" >> "$STUB_LOG"
node=""; mounts=""
while [ $# -gt 0 ]; do case "$1" in -w) node="$2"; shift 2;; --container-mounts=*) mounts="${1#*=}"; shift;;
  -*) shift;; *) break;; esac; done
[ -n "$mounts" ] && echo "container mounts=$(tr ',' '\\n' <<< "$mounts" | sort | paste -sd,) gpus=all" >> "$STUB_LOG"
export CUDA_VISIBLE_DEVICES=0 ROCR_VISIBLE_DEVICES=0 GPU_DEVICE_ORDINAL=0
# the step in a process group of its own, which a signal to srun reaches whole (as Slurm signals a step)
STUB_NODE="${node:-$STUB_NODE}" setsid "$@" & step=$!
trap 'kill -TERM -- "-$step" 2>/dev/null' TERM
while true; do wait "$step"; rc=$?; kill -0 "$step" 2>/dev/null || break; done
exit "$rc" """,
    # apptainer exec: the host's environment passes whole (apptainer's default); --bind SRC[:DST],... (DST: SRC)
    "apptainer": """echo "apptainer ${*//$'\\n'/ }" >> "$STUB_LOG"
gpus=none; mounts=""
shift; while [ $# -gt 0 ]; do case "$1" in --nv) gpus=all; shift;; --bind) mounts="$2"; shift 2;; -*) shift;;
  *) break;; esac; done
mounts="$(tr ',' '\\n' <<< "$mounts" | awk -F: '{print $1 ":" ($2 == "" ? $1 : $2)}' | sort | paste -sd,)"
echo "container mounts=$mounts gpus=$gpus" >> "$STUB_LOG"
shift; exec "$@" """,
    # podman: `image exists` (every image but STUB_NO_IMAGE); `run`: only the variables named by --env reach the
    # command (their values from podman's environment), with the image's PATH; -v SRC:DST; --device for GPUs
    "podman": """if [ "$1 $2" = "image exists" ]; then [ "$3" != "${STUB_NO_IMAGE:-}" ]; exit; fi
echo "podman ${*//$'\\n'/ }" >> "$STUB_LOG"
gpus=none; mounts=""; passed=(PATH="$STUB_IMAGE_PATH")
shift; while [ $# -gt 0 ]; do case "$1" in --rm) shift;; -v) mounts="$mounts,$2"; shift 2;;
  --device) [ "$2" = nvidia.com/gpu=all ] && gpus=all; shift 2;;
  --env) [ -n "${!2+x}" ] && passed+=("$2=${!2}"); shift 2;; -*) shift 2;; *) break;; esac; done
echo "container mounts=$(tr ',' '\\n' <<< "${mounts#,}" | sort | paste -sd,) gpus=$gpus" >> "$STUB_LOG"
shift; exec env -i "${passed[@]}" "$@" """,
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
    # Ray 2.60 as it behaves: `ray start --head` turns token auth on when RAY_AUTH_MODE is unset and
    # $HOME/.ray/auth_token exists; a process that joins it (status, a worker's start) then fails with
    # InvalidAuthToken unless it runs in token mode with the head's token (RAY_AUTH_TOKEN, else the file).
    # ray start --block: register the node (workers only when STUB_WORKERS_JOIN=1, after STUB_JOIN_DELAY s), then
    # block until SIGTERM, which it answers by exiting 1 as the real one does (STUB_DIES=<node>: that node's Ray
    # ends by itself with exit 1 after STUB_DIES_AFTER s). ray list nodes: STUB_DEAD_IP as a dead node.
    "ray": """echo "ray $* node=$STUB_NODE nccl=${NCCL_SOCKET_IFNAME:-} tmp=${RAY_TMPDIR:-} auth=${RAY_AUTH_MODE:-unset} \
rocr=${ROCR_VISIBLE_DEVICES:-unset} ordinal=${GPU_DEVICE_ORDINAL:-unset} cuda=${CUDA_VISIBLE_DEVICES:-unset}" >> "$STUB_LOG"
token_of_caller() {
  if [ "${RAY_AUTH_MODE:-}" = token ]; then echo "${RAY_AUTH_TOKEN:-$(cat "$HOME/.ray/auth_token" 2>/dev/null)}"
  elif [ -z "${RAY_AUTH_MODE:-}" ] && [ "$1" = head ] && [ -f "$HOME/.ray/auth_token" ]; then cat "$HOME/.ray/auth_token"
  fi
}
authenticated() {
  local head; head="$(cat "$STUB_JOINED.token" 2>/dev/null)"
  [ -z "$head" ] || [ "$head" = "$(token_of_caller)" ] && return 0
  echo "ray.exceptions.AuthenticationError: RPC error: InvalidAuthToken: Authentication token is missing or incorrect." >&2
  return 1
}
case "$1" in
  start) if [[ "$*" == *--head* ]]; then echo "${STUB_HEAD_TOKEN:-$(token_of_caller head)}" > "$STUB_JOINED.token"
           echo "$STUB_NODE" >> "$STUB_JOINED"
         elif ! authenticated; then exit 1
         elif [[ "${STUB_WORKERS_JOIN:-1}" == 1 ]]; then
           sleep "${STUB_JOIN_DELAY:-0}"; echo "$STUB_NODE" >> "$STUB_JOINED"
         fi
         trap 'kill "$sleeper"; echo "ray stopped node=$STUB_NODE" >> "$STUB_LOG"; exit 1' TERM
         if [ "${STUB_DIES:-}" = "$STUB_NODE" ]; then sleep "${STUB_DIES_AFTER:-1}"; exit 1; fi
         sleep 60 & sleeper=$!; wait;;
  status) authenticated || exit 1
          echo "Node status"; echo "Active:"; [ -f "$STUB_JOINED" ] && sed 's/^/ 1 node_/' "$STUB_JOINED"
          echo "Pending:"; echo " (no pending nodes)";;
  list) if [ -n "${STUB_DEAD_IP:-}" ]; then echo "-   node_id: x"; echo "    node_ip: $STUB_DEAD_IP"; echo "    state: DEAD"
        else echo "No resource in the cluster"; fi;;
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
    launcher.write_text(
        'echo "launcher node=$STUB_NODE RAY_ADDRESS=$RAY_ADDRESS NNODES=$NNODES '
        'GPUS_PER_NODE=$GPUS_PER_NODE NCCL=${NCCL_SOCKET_IFNAME:-} args=$*" >> "$STUB_LOG"\n'
        'echo "launcher tmp=${RAY_TMPDIR:-}" >> "$STUB_LOG"\n'
        'echo "launcher auth=${RAY_AUTH_MODE:-unset} token=${RAY_AUTH_TOKEN:-} '
        'rocr=${ROCR_VISIBLE_DEVICES:-unset}" >> "$STUB_LOG"\n'
        "trap 'kill \"$sleeper\"; exit 143' TERM\n"
        'sleep "${STUB_LAUNCHER_SECONDS:-0}" & sleeper=$!; wait "$sleeper"\n'
        'exit "${STUB_LAUNCHER_EXIT:-0}"\n'
    )
    (tmp_path / "gcpo-verl.sif").write_text("an image")  # the default CONTAINER_IMAGE, in the job's folder
    (tmp_path / "cdi").mkdir()  # NVIDIA's CDI spec, which podman's --device nvidia.com/gpu=all needs
    (tmp_path / "cdi" / "nvidia.yaml").write_text("kind: nvidia.com/gpu\n")
    env = dict(
        os.environ,
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        STUB_IMAGE_PATH=f"{bin_dir}:/usr/bin:/bin",
        CDI_SPEC_DIRS=str(tmp_path / "cdi"),
        STUB_LOG=str(tmp_path / "log"),
        STUB_JOINED=str(tmp_path / "joined"),
        STUB_NODES="gpu-a gpu-b gpu-c",
        SLURM_JOB_NODELIST="gpu-[a-c]",
        SLURM_CPUS_PER_TASK="48",
        SLURM_GPUS_PER_NODE="h100:4",
        RAY_POLL_INTERVAL="0.2",
        RAY_TMPDIR=str(tmp_path / "ray-tmp"),
        HOME=str(tmp_path / "home"),
    )
    for key in ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_ADDRESS"):
        env.pop(key, None)

    def run(*args, **extra):
        for state in tmp_path.glob("joined*"):  # the stand-in cluster's state from an earlier job of the test
            state.unlink()
        proc = subprocess.run(
            ["bash", str(SBATCH), str(launcher), *args],
            capture_output=True,
            text=True,
            env={**env, **extra},
            cwd=tmp_path,
            timeout=120,
        )
        log = (tmp_path / "log").read_text().splitlines() if (tmp_path / "log").exists() else []
        return proc, log

    return run


def test_head_then_workers_then_the_launcher_on_the_head(cluster, tmp_path):
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
    assert launched == [
        "launcher node=gpu-a RAY_ADDRESS=10.0.0.1:6379 NNODES=3 GPUS_PER_NODE=4 NCCL= "
        "args=trainer.total_training_steps=10"
    ]
    assert log.index(launched[0]) > max(log.index(s) for s in starts)
    # cleaned up on every node: each node's Ray asked to stop (SIGTERM to its `ray start --block`), which exits 1,
    # yet the job ends 0 with nothing that reads as a failure, and Ray's folder is gone
    assert sorted(line for line in log if line.startswith("ray stopped")) == [
        f"ray stopped node=gpu-{n}" for n in "abc"
    ]
    assert not any(line.startswith("ray stop ") for line in log)  # never `ray stop`: it stops every Ray it sees
    assert "error" not in proc.stderr.lower() and "left the job" not in proc.stderr
    assert not (tmp_path / "ray-tmp").exists()
    assert any(
        re.match(
            r"apptainer exec --nv --bind \S+ gcpo-verl.sif env -u ROCR_VISIBLE_DEVICES "
            r"-u GPU_DEVICE_ORDINAL RAY_TMPDIR=\S+ RAY_AUTH_MODE=token bash -c .*ray start",
            line,
        )
        for line in log
    )


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
    assert any(
        "--container-image=nvcr.io#me/gcpo:1" in line and "--container-mounts=/data:/data" in line
        for line in log
        if line.startswith("srun")
    )
    assert not any(line.startswith("apptainer") for line in log)


def test_nodes_that_never_join_fail_the_job_with_a_clear_message(cluster):
    proc, log = cluster(STUB_WORKERS_JOIN="0", RAY_JOIN_TIMEOUT="2")
    assert proc.returncode == 1
    assert "only 1 of 3 nodes joined the Ray cluster within 2 s" in proc.stderr
    assert not any(line.startswith("launcher") for line in log)


def test_an_unknown_container_runtime_is_refused(cluster):
    proc, _ = cluster(CONTAINER_RUNTIME="docker")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "CONTAINER_RUNTIME must be apptainer, pyxis, podman or none, got 'docker'"


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
    assert in_containers and all(
        f"--container-mounts=/data:/data,{ray_tmp}:{ray_tmp} " in line for line in in_containers
    )
    made = [i for i, line in enumerate(log) if line.startswith("srun") and f"mkdir -p {ray_tmp}" in line]
    first_container = next(i for i, line in enumerate(log) if "--container-image" in line)
    assert len(made) == 3 and max(made) < first_container  # made on every host before a container binds it
    starts = [line for line in log if line.startswith("ray start")]
    assert len(starts) == 3 and all(f" tmp={ray_tmp} " in line for line in starts)
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
    assert in_containers and all(
        f"--bind /data:/data,{tmp_path / 'ray-tmp'} gcpo-verl.sif" in line for line in in_containers
    )


# --- Ray's token authentication ------------------------------------------------------------------------------


def _stale_token(tmp_path):
    """~/.ray/auth_token, as any earlier local `ray.init()` leaves it."""
    token = tmp_path / "home" / ".ray" / "auth_token"
    token.parent.mkdir(parents=True)
    token.write_text("f" * 64)
    return token


def test_a_token_left_by_an_earlier_local_ray_no_longer_hangs_the_job(cluster, tmp_path):
    """Ray 2.60 turns token auth on for a head whose user has ~/.ray/auth_token, but not for the processes that join
    it: `ray status` failed, its error went to /dev/null, and the job waited RAY_JOIN_TIMEOUT blaming the network.
    Every Ray process and the driver now run in token mode with one token of the job's, off the command line."""
    _stale_token(tmp_path)
    proc, log = cluster(RAY_JOIN_TIMEOUT="20")
    assert proc.returncode == 0, proc.stderr
    rays = [line for line in log if line.startswith("ray start") or line.startswith("ray status")]
    assert rays and all("auth=token" in line for line in rays)
    launcher = next(line for line in log if line.startswith("launcher auth="))
    token = launcher.split("token=")[1].split()[0]
    assert launcher.startswith("launcher auth=token") and len(token) == 64 and token != "f" * 64
    assert not any(token in line for line in log if line.startswith("srun") or line.startswith("apptainer"))
    assert "Ray auth token" in proc.stdout


def test_without_the_pinned_mode_the_stub_reproduces_the_hang(cluster, tmp_path):
    """The stand-in behaves as Ray 2.60 did: with the mode unpinned, joining fails on the stale token."""
    _stale_token(tmp_path)
    stub = tmp_path / "bin" / "ray"
    env = dict(
        os.environ,
        PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}",
        HOME=str(tmp_path / "home"),
        STUB_LOG=str(tmp_path / "log"),
        STUB_JOINED=str(tmp_path / "joined"),
        STUB_NODE="gpu-a",
    )
    env.pop("RAY_AUTH_MODE", None)
    (tmp_path / "joined.token").write_text("f" * 64)  # the head turned token auth on by itself, from the file
    status = subprocess.run([str(stub), "status"], env=env, capture_output=True, text=True, timeout=10)
    assert status.returncode == 1 and "InvalidAuthToken" in status.stderr


def test_an_authentication_error_fails_the_join_at_once_and_says_why(cluster):
    start = time.monotonic()
    proc, log = cluster(RAY_JOIN_TIMEOUT="60", STUB_HEAD_TOKEN="0" * 64)  # a head with another token than the job's
    assert proc.returncode != 0 and time.monotonic() - start < 30  # not RAY_JOIN_TIMEOUT
    assert "cannot authenticate to the Ray head at 10.0.0.1:6379" in proc.stderr
    assert "InvalidAuthToken" in proc.stderr and "RAY_AUTH_MODE and RAY_AUTH_TOKEN" in proc.stderr
    assert "check RAY_NETWORK_INTERFACE" not in proc.stderr
    assert not any(line.startswith("launcher") for line in log)


def test_an_unknown_auth_mode_is_refused(cluster):
    proc, _ = cluster(RAY_AUTH_MODE="tokens")
    assert proc.returncode == 2 and "RAY_AUTH_MODE must be token or disabled, got 'tokens'" in proc.stderr


def test_auth_disabled_runs_every_process_without_a_token(cluster, tmp_path):
    _stale_token(tmp_path)
    proc, log = cluster(RAY_AUTH_MODE="disabled", RAY_AUTH_TOKEN="leaked")
    assert proc.returncode == 0, proc.stderr
    assert all("auth=disabled" in line for line in log if line.startswith("ray start"))
    assert "launcher auth=disabled token= " in next(line for line in log if line.startswith("launcher auth="))


# --- device variables -----------------------------------------------------------------------------------------


def test_slurms_rocr_and_ordinal_variables_never_reach_ray_or_the_driver(cluster):
    """Slurm's gpu gres sets CUDA_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES and GPU_DEVICE_ORDINAL in every step;
    verl's workers die on ROCR_VISIBLE_DEVICES beside CUDA_VISIBLE_DEVICES. Ray sets CUDA_VISIBLE_DEVICES itself."""
    proc, log = cluster()
    assert proc.returncode == 0, proc.stderr
    starts = [line for line in log if line.startswith("ray start")]
    assert len(starts) == 3
    assert all("rocr=unset" in line and "ordinal=unset" in line and "cuda=0" in line for line in starts)
    assert "rocr=unset" in next(line for line in log if line.startswith("launcher auth="))


# --- a node lost during the run -------------------------------------------------------------------------------


def test_a_node_whose_ray_ends_mid_run_is_named_and_the_job_ends_in_bounded_time(cluster):
    start = time.monotonic()
    proc, log = cluster(
        STUB_DIES="gpu-b",
        STUB_DIES_AFTER="1",
        STUB_LAUNCHER_SECONDS="60",
        RAY_NODE_LOSS_GRACE="2",
        RAY_POLL_INTERVAL="0.5",
    )
    took = time.monotonic() - start
    assert proc.returncode == 1 and took < 30  # not the driver's 60 s
    named = [line for line in proc.stderr.splitlines() if "left the job" in line]
    assert named == [
        "node gpu-b left the job: its Ray ended (exit 1) during the run; the run stops here (resubmit "
        "the job to resume from its last checkpoint)"
    ]
    assert "the driver did not stop within RAY_NODE_LOSS_GRACE=2 s of the node loss: stopping it" in proc.stderr
    assert not any("-w gpu-b" in line and "touch" in line for line in log)  # a lost node is not waited for


def test_a_node_ray_has_as_dead_is_named_when_the_driver_fails(cluster):
    """A crashed host looks alive to srun until Slurm declares it down; Ray misses its heartbeats first, and the
    driver fails on the actors it lost. The job asks Ray which node died and names it."""
    proc, log = cluster(STUB_DEAD_IP="10.0.0.3", STUB_LAUNCHER_EXIT="1")
    assert proc.returncode == 1
    named = [line for line in proc.stderr.splitlines() if "left the job" in line]
    assert named == [
        "node gpu-c left the job: Ray has its node (10.0.0.3) as dead; the run stops here (resubmit "
        "the job to resume from its last checkpoint)"
    ]


def test_a_failing_driver_without_a_lost_node_keeps_its_status(cluster):
    proc, _ = cluster(STUB_LAUNCHER_EXIT="3")
    assert proc.returncode == 3 and "left the job" not in proc.stderr


def test_ray_is_asked_for_dead_nodes_while_the_driver_runs(cluster):
    proc, log = cluster(
        STUB_DEAD_IP="10.0.0.2",
        STUB_LAUNCHER_SECONDS="60",
        RAY_HEALTH_INTERVAL="1",
        RAY_NODE_LOSS_GRACE="1",
        RAY_POLL_INTERVAL="0.5",
    )
    assert proc.returncode == 1
    assert "node gpu-b left the job: Ray has its node (10.0.0.2) as dead" in proc.stderr
    assert sum(line.startswith("ray list nodes") for line in log) >= 1


# --- container runtimes: podman, and the flags every branch passes ---------------------------------------------


def container_view(log):
    """What the job's containers got, as the processes inside saw it: each container's mounts and GPUs, and the
    environment of every `ray start` and of the launcher (Ray's directory, auth mode, device variables, token)."""
    return {
        "containers": sorted({line for line in log if line.startswith("container ")}),
        "ray": sorted(
            line.split(" --")[0] + " " + line.split(" node=")[1] for line in log if line.startswith("ray start")
        ),
        "launcher": sorted(line for line in log if line.startswith("launcher ")),
    }


def test_podman_runs_every_step_in_a_container_on_the_nodes_network(cluster, tmp_path):
    proc, log = cluster(
        CONTAINER_RUNTIME="podman",
        CONTAINER_IMAGE="localhost/gcpo-verl-cpu:0.1.0",
        CONTAINER_MOUNTS="/data:/data,/ckpt",
        CONTAINER_OPTIONS="--ulimit nofile=20000:20000 --runtime runc",
    )
    assert proc.returncode == 0, proc.stderr
    runs = [line for line in log if line.startswith("podman run")]
    # the address look-ups, the head's and the workers' Ray, the two waits and the launcher: each in a container
    kinds = ["; node_ip_candidates ", "; ray_node ", "; wait_for_ray_nodes ", "launcher.sh"]
    assert [sum(kind in line for line in runs) for kind in kinds] == [3, 3, 2, 1]
    assert len(runs) == 9
    ray_tmp = tmp_path / "ray-tmp"
    for line in runs:
        assert " --rm --network host --pid host --ipc host --device nvidia.com/gpu=all " in line
        assert f"-v /data:/data -v /ckpt:/ckpt -v {ray_tmp}:{ray_tmp} " in line
        assert " --ulimit nofile=20000:20000 --runtime runc localhost/gcpo-verl-cpu:0.1.0 " in line
        assert "--env CUDA_VISIBLE_DEVICES " in line  # the step's, by name: podman reads the values
        if "node_ip_candidates" not in line:  # the job's token exists once the head's address is known
            assert "--env RAY_AUTH_TOKEN " in line
        for host_only in ("PATH", "HOME", "PWD", "TMPDIR", "LD_LIBRARY_PATH"):
            assert f"--env {host_only} " not in line
    token = next(line for line in log if line.startswith("launcher auth=")).split("token=")[1].split()[0]
    assert len(token) == 64 and not any(token in line for line in runs)
    assert not (tmp_path / "ray-tmp").exists()


def test_apptainer_pyxis_and_podman_give_the_containers_the_same_binds_environment_and_gpus(cluster, tmp_path):
    """podman's branch is the one proven end to end (scripts/smoke_cluster_cpu.sh --container); apptainer's and
    pyxis's must give Ray and the launcher the same: the same binds, Ray's directory, auth, token and device
    variables inside, and the GPUs."""
    views = {}
    for runtime, image in (("apptainer", "gcpo-verl.sif"), ("pyxis", "nvcr.io#me/gcpo:1"), ("podman", "gcpo:1")):
        (tmp_path / "log").unlink(missing_ok=True)
        proc, log = cluster(
            CONTAINER_RUNTIME=runtime, CONTAINER_IMAGE=image, CONTAINER_MOUNTS="/data:/data", RAY_AUTH_TOKEN="a" * 64
        )
        assert proc.returncode == 0, (runtime, proc.stderr)
        views[runtime] = container_view(log)
    podman = views["podman"]
    assert len(podman["containers"]) == 1 and "gpus=all" in podman["containers"][0]
    assert len(podman["ray"]) == 3 and all("cuda=0" in line and "rocr=unset" in line for line in podman["ray"])
    assert any(f"token={'a' * 64}" in line for line in podman["launcher"])
    assert views["apptainer"] == podman
    assert views["pyxis"] == podman


def test_without_gpus_no_container_asks_for_them(cluster, tmp_path):
    for runtime in ("apptainer", "podman"):
        (tmp_path / "log").unlink(missing_ok=True)
        proc, log = cluster(CONTAINER_RUNTIME=runtime, CONTAINER_GPUS="none")
        assert proc.returncode == 0, proc.stderr
        assert container_view(log)["containers"][0].endswith(" gpus=none")
        runs = [line.split(" gcpo-verl.sif ")[0] for line in log if line.startswith(("apptainer", "podman run"))]
        assert runs and not any("--nv" in line or "nvidia.com/gpu" in line for line in runs)
    proc, _ = cluster(CONTAINER_GPUS="some")
    assert proc.returncode == 2 and proc.stderr.strip() == "CONTAINER_GPUS must be all or none, got 'some'"


@pytest.mark.parametrize(
    "runtime, settings, line",
    [
        ("podman", {"STUB_NO_IMAGE": "gcpo:2"}, "podman has no image gcpo:2 (build it with scripts/build_image.py"),
        ("podman", {"STUB_HIDE": "podman"}, "podman is not installed"),
        ("apptainer", {}, "the image file gcpo:2 does not exist"),
        ("apptainer", {"STUB_HIDE": "apptainer"}, "apptainer is not installed"),
    ],
)
def test_a_missing_image_or_runtime_ends_the_job_before_ray_starts(cluster, tmp_path, runtime, settings, line):
    if "STUB_HIDE" in settings:  # a PATH of the stubs and every other program, but not the runtime's
        hidden = settings.pop("STUB_HIDE")
        (tmp_path / "bin" / hidden).unlink()
        system = tmp_path / "system"
        system.mkdir()
        for folder in os.environ["PATH"].split(os.pathsep):
            for program in Path(folder).glob("*") if Path(folder).is_dir() else []:
                if program.name != hidden and not (system / program.name).exists() and os.access(program, os.X_OK):
                    (system / program.name).symlink_to(program)
        settings["PATH"] = f"{tmp_path / 'bin'}:{system}"
    proc, log = cluster(CONTAINER_RUNTIME=runtime, CONTAINER_IMAGE="gcpo:2", **settings)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 3  # one per node
    assert all(f"node gpu-{n}: {line}" in lines[i] for i, n in enumerate("abc"))
    assert not any(entry.startswith("ray ") for entry in log)


def test_a_node_without_nvidias_cdi_spec_is_named_for_podman_with_gpus(cluster, tmp_path):
    (tmp_path / "no-cdi").mkdir()
    proc, log = cluster(CONTAINER_RUNTIME="podman", CONTAINER_IMAGE="gcpo:1", CDI_SPEC_DIRS=str(tmp_path / "no-cdi"))
    assert proc.returncode == 2
    assert "node gpu-a: podman has no CDI spec for nvidia.com/gpu (nvidia-ctk cdi generate" in proc.stderr
    assert not any(entry.startswith("ray ") for entry in log)


def test_pyxis_without_the_plugin_ends_the_job_in_one_line(cluster):
    proc, log = cluster(CONTAINER_RUNTIME="pyxis", STUB_NO_PYXIS="1")
    assert proc.returncode == 2
    assert proc.stderr.strip() == (
        "CONTAINER_RUNTIME=pyxis, but this srun has no --container-image: the pyxis plugin is not installed"
    )
    assert not any(entry.startswith("ray ") for entry in log)

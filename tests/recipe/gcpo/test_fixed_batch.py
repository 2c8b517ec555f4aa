"""A fixed batch's credit and advantages are the numbers recorded before a re-cut of the code (issue 39).

The batch (uneven groups; all-correct, mixed and all-wrong groups; an exact copy; a shaped reward) is credited by
the engine under every Shapley method and normalisation switch, and its advantages are taken through verl's own
``compute_advantage`` with the registered ``gcpo`` estimator and the ``algorithm`` config a run would pass. Every
value is compared with ``fixed_batch.json``, recorded by

    python -m tests.recipe.gcpo.test_fixed_batch --record

before the change (only then: a recording after it proves nothing).

What is reproducible where (issue 46). Measured on the machine whose environment ``fixed_batch.json`` holds (an AMD
EPYC, Zen 4 with AVX-512, torch 2.13.0+cpu; the values recorded before on the same torch and thread count reproduce
there bit for bit), forcing the kernels another CPU runs -- ATen's loops without vector instructions
(``ATEN_CPU_CAPABILITY=default``), MKL's other code paths (``MKL_CBWR=COMPATIBLE``, ``AVX2``, ...) -- and 1 to 8
threads:

* on every machine, bit for bit: which values are exactly 0 (a wrong rollout's credit, an all-wrong group's
  advantages, an exact method's standard error: masks, not sums); and verl's advantage is the engine's advantage
  rounded once to float32 (compared within the process: one IEEE rounding of the same float64);
* on another CPU, a float64 only to rounding: other vector widths and MKL paths sum in another order, up to 1.1e-14
  in the measurements (640 ulp of a small advantage), 4.3e-15 on an Intel AVX-512 Xeon. The float64s are compared
  to ``ROUNDING_ATOL`` = 1e-12, 90 times the most measured and far below a real change: the kernel computed in
  float32 moves them by 1e-9 and more, ``epsilon`` 1e-6 -> 1.0001e-6 the advantages by 2e-10 and more (both are
  tested to fail). verl's float32 advantage to one float32 ulp: a float64 moved by 1e-14 may round the other way;
* in the recording's environment (the same torch, CPU vendor, family and model, ATen kernels, thread count and MKL
  path variables), bit for bit: every run there gave the same bits, so there a change that only reorders a sum is
  caught too. The thread count changed no bit on that machine for this batch (1 to 8 threads), but MKL may split
  larger products between threads, so the key keeps it, and the test runs the batch at 1, 2 and 3 threads whatever
  the process was started with (``OMP_NUM_THREADS=3`` gives torch only 2 threads on a 2-core machine).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

RECORD = Path(__file__).with_name("fixed_batch.json")
ROOT = Path(__file__).resolve().parents[3]
# (name, algorithm.gcpo.credit overrides, norm_adv_by_std_in_grpo)
SETTINGS = [
    ("default", {}, True),
    ("exact", {"method": "exact"}, True),
    ("mc", {"method": "mc", "permutations": 16, "seed": 3}, True),
    ("loo", {"method": "loo"}, True),
    ("batch-scale", {"all_correct_scale": "batch"}, True),
    ("mix", {"advantage": "mix", "mix_coef": 0.5}, True),
    ("dr-grpo", {}, False),
    ("rbf-sqrt-floor", {"kernel": "rbf", "quality": "sqrt", "std_floor": 0.05}, True),
]
# What another CPU's rounding may move a float64 by (see the docstring): 90 times the most measured, far below a real
# change
ROUNDING_ATOL = 1e-12
MKL_PATH_VARIABLES = ("MKL_CBWR", "MKL_ENABLE_INSTRUCTIONS", "MKL_DEBUG_CPU_TYPE")
# ATen and MKL kernels of another CPU, forced on this one (read when torch starts: a new process)
OTHER_CPU_KERNELS = {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}


def fixed_batch() -> tuple[np.ndarray, torch.Tensor, list[str]]:
    """(rewards (N,), embeddings (N, 16) float32 unit rows, prompt ids) of 7 prompts, rows interleaved."""
    rng = np.random.default_rng(20261126)
    sizes = [8, 8, 6, 8, 5, 8, 12]
    rewards, rows, uids = [], [], []
    for g, size in enumerate(sizes):
        centre = rng.normal(size=16)
        emb = centre + rng.normal(scale=0.6, size=(size, 16))
        if g == 0:
            reward = np.ones(size)  # all correct, one exact copy
            emb[3] = emb[1]
        elif g == 1:
            reward = -np.ones(size)  # all wrong
        elif g == 4:
            reward = np.array([1.0, 0.6, -1.0, 1.0, 0.2])  # shaped rewards (an overlong penalty)
        elif g == 6:
            reward = np.ones(size)  # all correct, past the exact limit of `auto` with mc on
        else:
            reward = np.where(rng.random(size) < 0.5, 1.0, -1.0)
            reward[0] = 1.0
        rewards += list(reward)
        rows += list(emb)
        uids += [f"p{g}"] * size
    order = np.random.default_rng(7).permutation(len(uids))
    embeddings = torch.tensor(np.asarray(rows)[order], dtype=torch.float32)
    embeddings = torch.nn.functional.normalize(embeddings, dim=-1)
    return np.asarray(rewards)[order], embeddings, [uids[i] for i in order]


def _algorithm(overrides: dict, norm_by_std: bool):
    return OmegaConf.create(
        {"adv_estimator": "gcpo", "norm_adv_by_std_in_grpo": norm_by_std, "gcpo": {"credit": dict(overrides)}}
    )


def credit_and_verl_advantage(overrides: dict, norm_by_std: bool):
    """The engine's credit of the batch under ``algorithm.gcpo.credit`` ``overrides``, and verl's advantage of it
    through ``compute_advantage`` with the registered ``gcpo`` estimator (float32 on the response's first token)."""
    from verl.protocol import DataProto
    from verl.trainer.ppo.ray_trainer import compute_advantage

    from gcpo_core.credit.compute import compute_credit
    from recipe.gcpo.estimator import StepCredit, provide_credit
    from recipe.gcpo.settings import GCPOSettings

    rewards, embeddings, uids = fixed_batch()
    n = len(uids)
    algorithm = _algorithm(overrides, norm_by_std)
    credit_config = GCPOSettings.from_algorithm_config(algorithm, "gcpo").credit
    result = compute_credit(rewards, embeddings, uids, credit_config)
    mask = torch.zeros(n, 4)
    mask[:, :3] = 1
    token_rewards = torch.zeros(n, 4, dtype=torch.float32)
    token_rewards[:, 2] = torch.tensor(rewards, dtype=torch.float32)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": token_rewards, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )
    step = StepCredit(
        np.array(uids, dtype=object),
        token_rewards.sum(-1).double().numpy(),
        result.score.numpy(),
        np.ones(n, dtype=bool),
        credit_config,
        result.shapley_stderr.numpy(),
    )
    with provide_credit(step):
        verl_adv = compute_advantage(
            data, adv_estimator="gcpo", norm_adv_by_std_in_grpo=norm_by_std, config=algorithm
        ).batch["advantages"][:, 0]
    return result, verl_adv


def compute_all(extra: dict | None = None) -> dict[str, dict[str, list[float]]]:
    """Every setting's engine credit (phi, its stderr, score, advantage) and verl's advantage of the batch;
    ``extra`` credit settings on top of each setting's (a test's deliberate change)."""
    out = {}
    for name, overrides, norm_by_std in SETTINGS:
        result, verl_adv = credit_and_verl_advantage({**overrides, **(extra or {})}, norm_by_std)
        out[name] = {
            "shapley": result.shapley.tolist(),
            "shapley_stderr": result.shapley_stderr.tolist(),
            "score": result.score.tolist(),
            "advantage": result.advantage.tolist(),
            "verl_advantage": verl_adv.double().tolist(),
        }
    return out


def environment() -> dict:
    """What the bits of the batch's float64s depend on: torch (its kernels and MKL), the CPU's vendor and model (MKL
    picks its code path by them), the ATen kernels torch dispatches to, the thread count, MKL's path variables."""
    return {
        "torch": torch.__version__,
        "cpu": _cpu(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
        # MKL's code path when a variable chooses it rather than the CPU (MKL_CBWR=COMPATIBLE moved these numbers)
        "mkl": {name: os.environ[name] for name in MKL_PATH_VARIABLES if name in os.environ},
    }


def _cpu() -> str:
    fields = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if not line.strip():
                    break  # the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        return platform.processor() or platform.machine()
    parts = [fields.get(k, "?") for k in ("vendor_id", "cpu family", "model", "model name")]
    return "{} family {} model {} ({})".format(*parts)


@contextmanager
def torch_threads(count: int):
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def mismatches(got: dict, recorded: dict, bitwise: bool) -> list[str]:
    """Where ``got`` is not the recording: always to the rules that hold on every machine, and bit for bit when
    ``bitwise`` (the recording's environment)."""
    if set(got) != set(recorded):
        return [f"the settings {sorted(got)} differ from the recording's {sorted(recorded)}"]
    found = []
    for name, fields in recorded.items():
        if set(got[name]) != set(fields):
            found.append(f"{name}: the fields {sorted(got[name])} differ from the recording's {sorted(fields)}")
            continue
        for field, values in fields.items():
            expected = np.array([float.fromhex(v) for v in values])
            actual = np.asarray(got[name][field], dtype=np.float64)
            where = f"{name} {field}"
            if actual.shape != expected.shape:
                found.append(f"{where}: {actual.shape[0]} values, the recording has {expected.shape[0]}")
                continue
            if not np.array_equal(actual == 0, expected == 0):
                index = int(np.flatnonzero((actual == 0) != (expected == 0))[0])
                found.append(f"{where}: [{index}] is {actual[index]!r}, recorded {expected[index]!r} (exact zeros)")
            # a float32 value may round the other way when its float64 moves by rounding: one float32 ulp
            atol = (
                np.spacing(np.abs(expected).astype(np.float32)).astype(np.float64)
                if field == "verl_advantage"
                else ROUNDING_ATOL
            )
            off = np.abs(actual - expected) > atol
            if off.any():
                index = int(np.flatnonzero(off)[0])
                found.append(
                    f"{where}: {int(off.sum())} value(s) beyond rounding, e.g. [{index}] {actual[index]!r} against "
                    f"{expected[index]!r} (off by {abs(actual[index] - expected[index]):.3g})"
                )
            elif bitwise and not np.array_equal(actual, expected):
                index = int(np.flatnonzero(actual != expected)[0])
                found.append(
                    f"{where}: not bit for bit in the recording's environment, e.g. [{index}] {actual[index].hex()} "
                    f"against {expected[index].hex()}"
                )
    return found


def _recording() -> dict:
    if not RECORD.is_file():
        pytest.fail(f"{RECORD.name} is missing: record it (see this module's docstring) before changing the code")
    return json.loads(RECORD.read_text())


@pytest.mark.parametrize("threads", [1, 2, 3])
def test_the_fixed_batch_gives_the_recorded_credit_and_advantages(threads):
    recorded = _recording()
    with torch_threads(threads):
        got = compute_all()
        bitwise = recorded["environment"] == environment()
    problems = mismatches(got, recorded["values"], bitwise)
    assert not problems, f"{len(problems)} mismatch(es) ({'bit for bit' if bitwise else 'to rounding'}): " + "; ".join(
        problems
    )
    for name, fields in got.items():  # verl's advantage is the engine's, rounded once to float32
        assert np.array_equal(
            np.asarray(fields["verl_advantage"]), np.asarray(fields["advantage"], dtype=np.float32).astype(np.float64)
        ), name
    # the record is not vacuous: every setting's credit moves the advantages of the all-correct groups
    _, _, uids = fixed_batch()
    all_correct = np.isin(np.array(uids), ["p0", "p6"])
    for name, fields in got.items():
        assert np.abs(np.asarray(fields["advantage"])[all_correct]).max() > 0.05, name


@pytest.mark.parametrize("weight", [0.0, 0.3, 1.0])
def test_the_blend_is_grpo_and_the_recorded_default_in_proportion(weight):
    """``credit.advantage=blend`` (issue 72) is checked against this record without a recording of its own: its
    credit is the default's phi, its advantage (1 - w) * GRPO's advantage of the rewards + w * the default's recorded
    advantage, the same through verl's ``compute_advantage``, and the all-correct groups' push is w times the
    default's."""
    recorded = _recording()["values"]["default"]
    result, verl_adv = credit_and_verl_advantage({"advantage": "blend", "blend_weight": weight}, True)
    rewards, _, uids = fixed_batch()
    default = {field: np.array([float.fromhex(v) for v in recorded[field]]) for field in ("score", "advantage")}
    np.testing.assert_allclose(result.score.numpy(), default["score"], rtol=0, atol=ROUNDING_ATOL)
    grpo = np.zeros(len(uids))
    groups = np.array(uids)
    for g in set(uids):  # verl's GRPO in float64; a group whose rewards are all equal exactly 0
        r = rewards[groups == g]
        grpo[groups == g] = 0.0 if np.all(r == r[0]) else (r - r.mean()) / (r.std(ddof=1) + 1e-6)
    expected = (1 - weight) * grpo + weight * default["advantage"]
    np.testing.assert_allclose(result.advantage.numpy(), expected, rtol=0, atol=ROUNDING_ATOL)
    # verl's side: the shaped rewards reach the estimator rounded to float32 (0.6 is not a float32), so its GRPO part
    # differs from the engine's float64 one by that rounding, far below a float32 advantage's resolution at 1e-6
    np.testing.assert_allclose(verl_adv.double().numpy(), expected, rtol=0, atol=1e-6)
    all_correct = np.isin(groups, ["p0", "p6"])
    np.testing.assert_allclose(
        result.advantage.numpy()[all_correct], weight * default["advantage"][all_correct], 0, 1e-13
    )
    assert np.abs(default["advantage"][all_correct]).max() > 0.05


def test_another_cpus_rounding_passes_but_is_not_the_recordings_bits():
    """Another CPU's kernels, forced on this one: the numbers pass to rounding, and their bits differ from the
    recording's (so the rule above is tried, not passed by identical bits)."""
    recorded = _recording()
    env = {
        **os.environ,
        **OTHER_CPU_KERNELS,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    run = subprocess.run(
        [sys.executable, "-m", "tests.recipe.gcpo.test_fixed_batch", "--print"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    other = json.loads(run.stdout)
    got = {n: {f: [float.fromhex(v) for v in vs] for f, vs in fields.items()} for n, fields in other["values"].items()}
    assert other["environment"]["cpu_capability"] == "DEFAULT"
    assert not mismatches(got, recorded["values"], bitwise=False)
    if recorded["environment"]["cpu_capability"] != "DEFAULT":  # the recording ran vector kernels: other sums
        assert mismatches(got, recorded["values"], bitwise=True)


def test_the_comparison_tells_rounding_from_a_change():
    recorded = _recording()["values"]
    same = {n: {f: [float.fromhex(v) for v in vs] for f, vs in fields.items()} for n, fields in recorded.items()}
    assert not mismatches(same, recorded, bitwise=True)

    def changed(field: str, index: int, to) -> dict:
        values = json.loads(json.dumps(same))
        values["default"][field][index] = to(values["default"][field][index])
        return values

    nonzero = next(i for i, v in enumerate(same["default"]["advantage"]) if v != 0)
    zero = next(i for i, v in enumerate(same["default"]["shapley"]) if v == 0)
    one_ulp = changed("advantage", nonzero, lambda v: float(np.nextafter(v, np.inf)))
    assert not mismatches(one_ulp, recorded, bitwise=False)  # another CPU's rounding
    assert mismatches(one_ulp, recorded, bitwise=True)  # on the recording's machine, a reordered sum
    assert mismatches(changed("advantage", nonzero, lambda v: v + 2 * ROUNDING_ATOL), recorded, bitwise=False)
    assert mismatches(changed("shapley", zero, lambda v: 5e-324), recorded, bitwise=False)  # a zero is exact
    f32 = changed("verl_advantage", nonzero, lambda v: float(np.nextafter(np.float32(v), np.float32(np.inf))))
    assert not mismatches(f32, recorded, bitwise=False)
    f32_twice = changed("verl_advantage", nonzero, lambda v: v + 3 * float(np.spacing(np.float32(abs(v)))))
    assert mismatches(f32_twice, recorded, bitwise=False)
    assert mismatches({k: v for k, v in same.items() if k != "mc"}, recorded, bitwise=False)


def _float32_kernel(compute_kernel):
    def kernel(*args, **kwargs):
        return compute_kernel(*args, **kwargs).to(torch.float32).to(torch.float64)

    return kernel


@pytest.mark.parametrize(
    "change",
    ["the kernel in float32", "epsilon 1.0001e-6"],
)
def test_a_real_change_of_the_numbers_fails_on_any_machine(change, monkeypatch):
    import gcpo_core.credit.compute as compute

    if change == "the kernel in float32":
        monkeypatch.setattr(compute, "compute_kernel", _float32_kernel(compute.compute_kernel))
        got = compute_all()
    else:
        got = compute_all(extra={"epsilon": 1.0001e-6})
    problems = mismatches(got, _recording()["values"], bitwise=False)
    assert problems and all("beyond rounding" in p for p in problems), problems


def _hex(values: dict) -> dict:
    return {
        name: {field: [float(v).hex() for v in vs] for field, vs in fields.items()} for name, fields in values.items()
    }


if __name__ == "__main__":
    if sys.argv[1:] == ["--print"]:  # this process's numbers, for the test above
        print(json.dumps({"environment": environment(), "values": _hex(compute_all())}))
    elif sys.argv[1:] == ["--record"]:
        RECORD.write_text(json.dumps({"environment": environment(), "values": _hex(compute_all())}, indent=1) + "\n")
        print(f"recorded {RECORD}")
    else:
        sys.exit("usage: python -m tests.recipe.gcpo.test_fixed_batch --record")

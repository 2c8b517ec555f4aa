"""The ``algorithm.gcpo`` block of the Hydra config, typed and validated at start-up.

A wrong value fails naming its full key (``algorithm.gcpo.credit.method``) and what it accepts; an unknown key
fails naming the known ones. The GRPO-style normalisation switch is verl's own
``algorithm.norm_adv_by_std_in_grpo``, shared with GRPO so that the two estimators are configured alike.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf

from gcpo_core.credit.config import CreditConfig
from gcpo_core.encoding.encoder import EncoderConfig
from gcpo_core.credit.shapley.exact import EXACT_LIMIT
from recipe.gcpo.credit_actor import CreditActorOptions

GCPO_ESTIMATOR = "gcpo"
# verl's trainer mode the GCPO trainer runs in: the recipe's entry point builds GCPOTrainer (verl's
# PPOTrainerSync plus the credit actor) for it, so every mode-dependent branch of verl's trainer is the sync one
SYNC_TRAINER_MODE = "sync"
# Estimators that need the responses' embeddings, hence the GCPO trainer and its credit actor; each fixes some
# algorithm.gcpo.credit keys (the rest stay configurable, e.g. DQO's alpha is credit.mix_coef).
EMBEDDING_ESTIMATORS: dict[str, dict] = {
    GCPO_ESTIMATOR: {},
    # DQO-style additive DPP bonus (arXiv 2509.04784): reward + alpha * leave-one-out log-det diversity of the
    # unweighted embeddings (correctness plays no part in the diversity term), normalised as GRPO normalises a
    # reward: every group by its own std, so a group of equal rewards keeps its diversity term at GRPO's scale
    "dqo": {"quality": "none", "method": "loo", "advantage": "mix", "all_correct_scale": "group"},
    # DRA-GRPO (arXiv 2505.09655): reward / (1 + summed similarity to the other completions), then each group
    # by its own std with epsilon 1e-4, as the official code (xiwenc1/DRA-GRPO, grpo_trainer.py) does
    "dra_grpo": {"advantage": "dra", "all_correct_scale": "group", "epsilon": 1e-4},
}
# reward_extra_info key written by recipe.gcpo.reward: constant within a group exactly when GCPO has no signal
GCPO_FILTER_METRIC = "gcpo_signal"
# reward.reward_kwargs as verl 0.9.1's reward managers read it (key -> its sub-keys, None for a value): only the
# DAPO manager reads it, from the raw config (verl/experimental/reward_loop/reward_manager/dapo.py); the keys are
# added with "+" outside verl's schema, so a misspelt one would be a silent no-op. tests/recipe/gcpo/
# test_settings.py reads verl's source to keep this table true.
REWARD_KWARGS: dict[str, dict[str, frozenset[str] | None]] = {
    "dapo": {"max_resp_len": None, "overlong_buffer_cfg": frozenset({"enable", "len", "penalty_factor", "log"})},
}


@dataclass(frozen=True)
class DumpSettings:
    """Credit dumps for ``gcpo report``: every ``every_n_steps`` steps, up to ``max_groups`` groups."""

    every_n_steps: int = 0
    max_groups: int = 16
    directory: str = "gcpo_dumps"

    def __post_init__(self) -> None:
        if not isinstance(self.every_n_steps, int) or self.every_n_steps < 0:
            raise ValueError(f"every_n_steps must be an integer >= 0 (0: off), got {self.every_n_steps!r}")
        if not isinstance(self.max_groups, int) or self.max_groups < 1:
            raise ValueError(f"max_groups must be an integer >= 1, got {self.max_groups!r}")


@dataclass(frozen=True)
class GCPOSettings:
    """Everything GCPO adds to verl's config.

    Attributes:
        encoder: the sentence encoder (``algorithm.gcpo.encoder.*``).
        credit: the credit engine (``algorithm.gcpo.credit.*``); ``norm_by_std`` comes from
            ``algorithm.norm_adv_by_std_in_grpo``.
        actor: the Ray credit actor's resources and failure handling (``algorithm.gcpo.actor.*``).
        filter_all_correct: accept DAPO group filtering on a metric that drops all-correct groups (the groups
            where GCPO's extra signal lives). Off: such a filter is refused at start-up.
        dump: credit dumps for reports (``algorithm.gcpo.dump.*``).
    """

    encoder: EncoderConfig = field(default_factory=EncoderConfig)
    credit: CreditConfig = field(default_factory=CreditConfig)
    actor: CreditActorOptions = field(default_factory=CreditActorOptions)
    filter_all_correct: bool = False
    dump: DumpSettings = field(default_factory=DumpSettings)

    @classmethod
    def from_algorithm_config(cls, algorithm: DictConfig | Mapping[str, Any], estimator: str = GCPO_ESTIMATOR
                              ) -> "GCPOSettings":
        """Parse ``algorithm.gcpo`` (absent: defaults), with the keys ``estimator`` fixes applied."""
        algorithm = _plain(algorithm)
        block = algorithm.get("gcpo") or {}
        if not isinstance(block, Mapping):
            raise ValueError(f"algorithm.gcpo must be a mapping, got {block!r}")
        _known("algorithm.gcpo", block, {"encoder", "credit", "actor", "filter_all_correct", "dump"})
        credit = dict(block.get("credit") or {})
        if "norm_by_std" in credit:
            raise ValueError(
                "algorithm.gcpo.credit.norm_by_std is not a key: use verl's algorithm.norm_adv_by_std_in_grpo"
            )
        credit["norm_by_std"] = bool(algorithm.get("norm_adv_by_std_in_grpo", True))
        credit.update(EMBEDDING_ESTIMATORS[estimator])
        filter_all_correct = block.get("filter_all_correct", False)
        if not isinstance(filter_all_correct, bool):
            raise ValueError(f"algorithm.gcpo.filter_all_correct must be true or false, got {filter_all_correct!r}")
        return cls(
            encoder=_build(EncoderConfig, block.get("encoder"), "algorithm.gcpo.encoder"),
            credit=_build(CreditConfig, credit, "algorithm.gcpo.credit"),
            actor=_build(CreditActorOptions, block.get("actor"), "algorithm.gcpo.actor"),
            filter_all_correct=filter_all_correct,
            dump=_build(DumpSettings, block.get("dump"), "algorithm.gcpo.dump"),
        )


def validate_gcpo_config(config: DictConfig) -> GCPOSettings | None:
    """Start-up checks of a full trainer config; returns the GCPO settings (None when GCPO is not selected).

    Raises:
        ValueError: a bad ``algorithm.gcpo`` value, ``gcpo`` selected outside verl's V1 sync trainer mode, fewer
            than two rollouts per prompt, or DAPO group filtering that would silently discard all-correct groups.
    """
    algorithm = config.algorithm
    estimator = algorithm.adv_estimator
    if estimator not in EMBEDDING_ESTIMATORS:
        return None
    settings = GCPOSettings.from_algorithm_config(algorithm, estimator)
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode")
    if not config.trainer.get("use_v1", True) or mode != SYNC_TRAINER_MODE:
        raise ValueError(needs_gcpo_trainer(
            f"trainer.use_v1={config.trainer.get('use_v1')}, trainer.v1.trainer_mode={mode}", estimator))
    multi_turn = OmegaConf.select(config, "actor_rollout_ref.rollout.multi_turn.enable")
    if multi_turn:
        raise ValueError(f"algorithm.adv_estimator={estimator} credits one output per rollout; multi-turn agent loops "
                         "(actor_rollout_ref.rollout.multi_turn.enable=true) put several outputs under one rollout and "
                         "are not supported")
    if settings.credit.method == "exact" and config.actor_rollout_ref.rollout.n > EXACT_LIMIT:
        raise ValueError(f"algorithm.gcpo.credit.method=exact enumerates 2^n coalitions: with rollout.n="
                         f"{config.actor_rollout_ref.rollout.n} > {EXACT_LIMIT} use method=auto or mc")
    n = config.actor_rollout_ref.rollout.n
    if n < 2:
        raise ValueError(f"{estimator} credits rollouts within a group: actor_rollout_ref.rollout.n must be >= 2, got {n}")
    if n > settings.credit.max_group_size:
        raise ValueError(
            f"actor_rollout_ref.rollout.n={n} exceeds algorithm.gcpo.credit.max_group_size="
            f"{settings.credit.max_group_size}"
        )
    filter_groups = algorithm.get("filter_groups") or {}
    if filter_groups.get("enable", False):
        metric = filter_groups.get("metric")
        if metric != GCPO_FILTER_METRIC and not settings.filter_all_correct:
            raise ValueError(
                f"algorithm.filter_groups.enable=true with metric={metric!r} drops every group whose rollouts are "
                "all correct, which is where GCPO gives a signal GRPO does not. Use "
                f"algorithm.filter_groups.metric={GCPO_FILTER_METRIC} with the GCPO reward function "
                "(recipe/gcpo/reward.py: it drops only groups without a GCPO signal), or set "
                "algorithm.gcpo.filter_all_correct=true to accept DAPO's filtering."
            )
    return settings


def validate_filter_signal(config: DictConfig) -> None:
    """Start-up check of DAPO's group filter on ``gcpo_signal``: the metric comes from the reward function (verl's
    replay buffer reads it from each row's reward_extra_info), and a reward that does not report it stops the run
    at its first step ("Finished groups are missing DAPO metric 'gcpo_signal'"). A reward function whose module
    never names the key cannot report it.

    Raises:
        ValueError: filtering on ``gcpo_signal`` with a reward function that does not report it.
    """
    filter_groups = OmegaConf.select(config, "algorithm.filter_groups") or {}
    if not filter_groups.get("enable", False) or filter_groups.get("metric") != GCPO_FILTER_METRIC:
        return
    function_config = OmegaConf.select(config, "reward.custom_reward_function") or {}
    path, name = function_config.get("path"), function_config.get("name")
    fix = (f"return it from the reward function (0 for a wrong response, 1 + a tiny fingerprint of the text for a "
           f"correct one: recipe/gcpo/reward.py does), use the recipe's reward (reward.custom_reward_function.path="
           f"pkg://recipe.gcpo.reward), or filter on acc (algorithm.filter_groups.metric=acc)")
    if not path:
        raise ValueError(f"algorithm.filter_groups.metric={GCPO_FILTER_METRIC} is read from the reward, but verl's "
                         f"built-in reward does not report it: {fix}")
    source = _reward_source(path)
    if source is not None and GCPO_FILTER_METRIC not in source:
        raise ValueError(f"algorithm.filter_groups.metric={GCPO_FILTER_METRIC} is read from the reward, but the reward "
                         f"function {path}:{name} never reports {GCPO_FILTER_METRIC!r}: {fix}")


def _reward_source(path: str) -> str | None:
    """The text of a ``reward.custom_reward_function.path`` module (``pkg://a.b`` or a file); None when it cannot be
    found here (it may exist only on the cluster: verl reports that)."""
    import importlib.util

    try:
        if path.startswith("pkg://"):
            spec = importlib.util.find_spec(path[len("pkg://"):])
            origin = spec.origin if spec is not None else None
        else:
            origin = os.path.expanduser(path)
        with open(origin, encoding="utf-8") as handle:
            return handle.read()
    except (OSError, TypeError, ValueError, ImportError):
        return None


def check_actor_loss_owner(config: DictConfig, selected: str, what: str, alternative: str = "") -> None:
    """Start-up checks for a setting that gives the actor workers their loss (``set_loss_fn``): only the recipe's
    trainer installs it, and distillation would replace it.

    Args:
        selected: the setting, as the user wrote it (``algorithm.div_r1.enable=true``).
        what: the loss it gives (``the Div-R1 loss``). alternative: advice appended to the trainer message.
    Raises:
        ValueError: another trainer, or distillation enabled.
    """
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode")
    if not config.trainer.get("use_v1", True) or mode != SYNC_TRAINER_MODE:
        raise ValueError(f"{selected} needs the recipe's trainer, which gives the actor workers {what}: launch with "
                         f"`python -m recipe.gcpo.main_gcpo` (trainer.v1.trainer_mode={SYNC_TRAINER_MODE}; found "
                         f"trainer.use_v1={config.trainer.get('use_v1')}, trainer.v1.trainer_mode={mode}){alternative}")
    if OmegaConf.select(config, "distillation.enabled"):
        raise ValueError(f"{selected} gives the actor {what}; with distillation.enabled=true the actor runs the "
                         "distillation loss instead: use one or the other")


def needs_gcpo_trainer(found: str, estimator: str = GCPO_ESTIMATOR) -> str:
    return (
        f"algorithm.adv_estimator={estimator} needs the GCPO trainer, which embeds the responses and computes their "
        "credit before advantages; verl's stock trainers give an estimator neither. Launch with "
        "`python -m recipe.gcpo.main_gcpo` (or scripts/run_qwen3_4b_gcpo.sh), which runs it as verl's V1 sync "
        f"trainer (trainer.use_v1=true, trainer.v1.trainer_mode={SYNC_TRAINER_MODE}: verl's defaults) (found: {found})."
    )


def validate_group_contrastive(config: DictConfig):
    """Start-up checks of ``algorithm.group_contrastive`` (Group Contrastive PO's reference injection)."""
    from recipe.gcpo.baselines.group_contrastive import GroupContrastiveSettings, solution_coverage

    settings = _build(GroupContrastiveSettings, _plain(config.algorithm.get("group_contrastive")),
                      "algorithm.group_contrastive")
    if not settings.enable:
        return settings
    mode = OmegaConf.select(config, "trainer.v1.trainer_mode")
    if not config.trainer.get("use_v1", True) or mode != SYNC_TRAINER_MODE:
        raise ValueError(f"algorithm.group_contrastive runs in the recipe's trainer, verl's V1 sync trainer: set "
                         f"trainer.use_v1=true and trainer.v1.trainer_mode={SYNC_TRAINER_MODE} (found use_v1="
                         f"{config.trainer.get('use_v1')}, trainer_mode={mode}) and launch with python -m "
                         "recipe.gcpo.main_gcpo")
    correction = config.algorithm.get("rollout_correction") or {}
    if correction.get("rollout_is") or correction.get("rollout_rs") or correction.get("bypass_mode"):
        raise ValueError("algorithm.group_contrastive injects reference solutions that were never sampled, so they "
                         "have no rollout log-probs: set algorithm.rollout_correction.rollout_is=null, rollout_rs=null "
                         "and bypass_mode=false (bypass mode would use them as the old log-probs)")
    train_files = OmegaConf.select(config, "data.train_files")
    for path in [train_files] if isinstance(train_files, str) else list(train_files or []):
        path = os.path.expanduser(str(path))
        if path.endswith(".parquet") and os.path.isfile(path) and solution_coverage(path, settings.solution_key) == 0:
            raise ValueError(f"algorithm.group_contrastive needs reference solutions, but {path} has no "
                             f"extra_info.{settings.solution_key} (DAPO-Math-17K has none; prepare a set that does, "
                             "e.g. `scripts/prepare_data.py --datasets math`)")
    return settings


def validate_reward_kwargs(config: DictConfig) -> None:
    """Start-up checks of ``reward.reward_kwargs``: only keys the selected reward manager reads, and the DAPO
    manager's own overlong-buffer checks (which verl runs in every reward worker, after the models are up).

    Raises:
        ValueError: a key the reward manager does not read, a manager that reads none, or an overlong buffer
            that is enabled without the values the DAPO manager needs.
    """
    kwargs = _plain(OmegaConf.select(config, "reward.reward_kwargs"))
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"reward.reward_kwargs must be a mapping, got {kwargs!r}")
    manager = config.reward.reward_manager
    if manager.get("source", "register") != "register":
        return  # a reward manager of the user's own (source=importlib) reads what it reads
    accepted = REWARD_KWARGS.get(manager.name)
    if accepted is None:
        readers = ", ".join(sorted(REWARD_KWARGS))
        raise ValueError(f"reward.reward_kwargs ({sorted(kwargs)}) is read only by reward.reward_manager.name="
                         f"{readers} in verl 0.9.1: reward_manager.name={manager.name} would ignore it")
    _known("reward.reward_kwargs", kwargs, set(accepted))
    for key, fields in accepted.items():
        value = kwargs.get(key)
        if fields is not None and value is not None:
            if not isinstance(value, Mapping):
                raise ValueError(f"reward.reward_kwargs.{key} must be a mapping, got {value!r}")
            _known(f"reward.reward_kwargs.{key}", value, set(fields))
    buffer = kwargs.get("overlong_buffer_cfg") or {}
    if buffer.get("enable"):
        missing = sorted(REWARD_KWARGS["dapo"]["overlong_buffer_cfg"] - set(buffer))
        if missing:
            raise ValueError(f"reward.reward_kwargs.overlong_buffer_cfg.enable=true: the DAPO reward manager also reads "
                             f"{', '.join(f'overlong_buffer_cfg.{key}' for key in missing)}; set them")
        max_len, length = kwargs.get("max_resp_len"), buffer["len"]
        if max_len is None:
            raise ValueError("reward.reward_kwargs.overlong_buffer_cfg.enable=true needs reward.reward_kwargs.max_resp_len")
        if not length or length <= 0:
            raise ValueError(f"reward.reward_kwargs.overlong_buffer_cfg.len must be > 0 when the buffer is enabled, "
                             f"got {length}")
        if max_len < length:
            raise ValueError(f"reward.reward_kwargs.max_resp_len={max_len} must be >= overlong_buffer_cfg.len={length}")


# the arguments verl 0.9.1's reward managers pass a custom reward function by name (verl/experimental/reward_loop/
# reward_manager/*.py): custom_reward_function.reward_kwargs of the same name would replace them (verl merges the
# kwargs over them); the router's two are passed only when a reward model serves the run
REWARD_FN_ARGS = ("data_source", "solution_str", "ground_truth", "extra_info")
REWARD_FN_ROUTER_ARGS = ("reward_router_address", "reward_model_tokenizer")
# modules whose reward function takes **kwargs only to absorb REWARD_FN_ROUTER_ARGS, so its named parameters are
# every keyword it reads
STRICT_REWARD_MODULES = ("recipe.gcpo.reward",)


def validate_custom_reward_kwargs(config: DictConfig) -> None:
    """Start-up check of ``reward.custom_reward_function.reward_kwargs``: verl passes them to the reward function as
    keyword arguments, so a misspelt one is dropped by a ``**kwargs`` or fails in every reward worker after the
    models are up. Each name must be a keyword parameter of the function (any name, where the function takes
    ``**kwargs`` for its own use), and none may replace an argument verl passes.

    Raises:
        ValueError: an unknown or clashing keyword, or a reward function that cannot be loaded to check it.
    """
    function_config = OmegaConf.select(config, "reward.custom_reward_function") or {}
    kwargs = _plain(function_config.get("reward_kwargs")) or {}
    if not kwargs:
        return
    if not isinstance(kwargs, Mapping):
        raise ValueError(f"reward.custom_reward_function.reward_kwargs must be a mapping, got {kwargs!r}")
    path, name = function_config.get("path"), function_config.get("name")
    if not path:
        raise ValueError("reward.custom_reward_function.reward_kwargs is set but custom_reward_function.path is not: "
                         "verl would ignore them")
    clash = sorted(set(kwargs) & set(REWARD_FN_ARGS + REWARD_FN_ROUTER_ARGS))
    if clash:
        raise ValueError(f"reward.custom_reward_function.reward_kwargs: {clash} would replace the argument(s) verl "
                         "passes the reward function for each response")
    import inspect

    from verl.utils.import_utils import load_extern_object

    try:
        function = load_extern_object(module_path=path, object_name=name)
    except Exception as err:
        raise ValueError(f"reward.custom_reward_function ({path}, {name}) cannot be loaded here to check its "
                         f"reward_kwargs: {type(err).__name__}: {err}") from err
    parameters = inspect.signature(function).parameters.values()
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)
    if takes_any and getattr(function, "__module__", None) not in STRICT_REWARD_MODULES:
        return  # a function of the user's own that reads **kwargs: what it reads is its business
    accepted = {p.name for p in parameters if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                          inspect.Parameter.KEYWORD_ONLY)} - set(REWARD_FN_ARGS)
    _known(f"reward.custom_reward_function.reward_kwargs (keyword arguments of {path}:{name})", kwargs, accepted)


def _plain(value: Any) -> Any:
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    return value


def _known(path: str, block: Mapping, allowed: set[str]) -> None:
    unknown = sorted(set(block) - allowed)
    if unknown:
        close = [match for key in unknown for match in difflib.get_close_matches(key, sorted(allowed), n=1)]
        hint = f" (did you mean {', '.join(repr(m) for m in close)}?)" if close else ""
        raise ValueError(f"{path}: unknown key(s) {unknown}{hint}; known: {sorted(allowed)}")


def _build(cls, values: Mapping[str, Any] | None, path: str):
    values = dict(values or {})
    _known(path, values, {f.name for f in dataclasses.fields(cls)})
    try:
        return cls(**values)
    except (ValueError, TypeError) as err:
        # "credit config: method must be ..." -> "algorithm.gcpo.credit.method must be ..."
        message = re.sub(r"^[a-z ]+config: |^credit actor: ", "", str(err))
        raise ValueError(f"{path}.{message}") from None

"""The one typed configuration: YAML presets in ``configs/`` plus dotted ``--set a.b=value`` overrides.

Every section forbids unknown keys, so a typo fails before any actor starts, with the key's dotted path.
Later subsystems add sections here; there is no second config mechanism.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import Field, model_validator

from conductor.budget_config import BudgetConfig, check_budget
from conductor.calibrate_config import CalibrateConfig
from conductor.config_section import Section
from conductor.dataset_config import DatasetSpec as DatasetSpec
from conductor.evaluate_config import EvaluateConfig as EvaluateConfig
from conductor.judge_config import JudgeConfig, check_judge
from conductor.response_cache_config import ResponseCacheConfig
from conductor.rewards import RewardConfig as RewardConfig
from conductor.serve_config import ServeConfig
from conductor.sft_config import SftConfig as SftConfig
from conductor.simulator_config import FaultRates as FaultRates
from conductor.simulator_config import SimulatorConfig
from conductor.store_root import StorePath


class SamplingParams(Section):
    temperature: float = Field(default=0.2, ge=0.0, le=2.0)
    max_tokens: int = Field(default=4096, ge=1, le=1_000_000)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    token_limit_param: Literal["max_tokens", "max_completion_tokens"] = Field(
        default="max_tokens", description="the name the provider takes the reply limit under: OpenAI's reasoning "
        "models (o-series, gpt-5) refuse max_tokens and take max_completion_tokens")
    fixed_sampling: bool = Field(default=False, description="send no temperature or top_p, whatever a call asks: "
                                 "OpenAI's reasoning models refuse any but their default")

    def call_defaults(self) -> dict[str, Any]:
        """The settings every call starts from (a call's own override them); how they are sent:
        conductor/provider_client.py, ``on_the_wire``."""
        return {"temperature": self.temperature, "max_tokens": self.max_tokens, "top_p": self.top_p}


class ProviderSpec(Section):
    """One API endpoint and its budget. Every worker on a provider shares these limits."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:\-]+$")
    base_url: str = Field(pattern=r"^https?://", description="OpenAI-compatible base URL, e.g. https://.../v1")
    api_key_env: Optional[str] = Field(default=None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
                                       description="NAME of the env var holding the key (never the key)")
    rpm: Optional[float] = Field(default=None, gt=0, description="requests per rate window")
    tpm: Optional[float] = Field(default=None, gt=0, description="tokens (prompt + max_tokens) per rate window")
    rate_window_s: float = Field(default=60.0, gt=0, description="the provider's window: rpm/tpm and its "
                                 "x-ratelimit-limit-requests header count per this many seconds (60 = per minute)")
    max_concurrency: int = Field(default=32, ge=1, le=4096)
    timeout_s: float = Field(default=120.0, gt=0, description="one attempt")
    deadline_s: float = Field(default=600.0, gt=0, description="one call, all retries included")
    max_retries: int = Field(default=6, ge=0, le=50)
    backoff_base_s: float = Field(default=0.5, gt=0)
    backoff_max_s: float = Field(default=30.0, gt=0)
    retry_after_cap_s: float = Field(default=60.0, gt=0)
    cooldown_after_failures: int = Field(default=5, ge=1, description="failures in the window before a cooldown")
    cooldown_failure_ratio: float = Field(default=0.5, gt=0, le=1, description="and at least this share failed")
    cooldown_window_s: float = Field(default=30.0, gt=0)
    cooldown_s: float = Field(default=30.0, ge=0)


class WorkerSpec(Section):
    """One worker LLM: what the Conductor is told about it, and where and how to call it."""

    id: str = Field(min_length=1, pattern=r"^[A-Za-z0-9_.:\-]+$")
    description: str = Field(min_length=1)
    provider: Optional[str] = Field(default=None, description="ProviderSpec.id; needed to call it over HTTP")
    model: Optional[str] = Field(default=None, description="model name at the provider (default: id)")
    price_in_per_m: Optional[float] = Field(default=None, ge=0, description="USD per 1M input tokens")
    price_out_per_m: Optional[float] = Field(default=None, ge=0, description="USD per 1M output tokens")
    sampling: SamplingParams = Field(default_factory=SamplingParams)

    @property
    def model_name(self) -> str:
        return self.model or self.id


class PoolConfig(Section):
    providers: list[ProviderSpec] = Field(default_factory=list)
    workers: list[WorkerSpec] = Field(default_factory=list)
    judges: list[WorkerSpec] = Field(default_factory=list, description="workers called only as a judge "
                                     "(judge.worker), never shown to the Conductor")
    subset_size: Optional[int] = Field(default=None, ge=1, description="random pool subset per question")
    cache: ResponseCacheConfig = Field(default_factory=ResponseCacheConfig)

    @model_validator(mode="after")
    def _consistent(self) -> PoolConfig:
        callable_ids = [w.id for w in (*self.workers, *self.judges)]
        for kind, ids in (("worker", callable_ids), ("provider", [p.id for p in self.providers])):
            duplicates = sorted({i for i in ids if ids.count(i) > 1})
            if duplicates:
                raise ValueError(f"duplicate {kind} ids: {duplicates}")
        known = {p.id for p in self.providers}
        unknown = sorted({w.provider for w in (*self.workers, *self.judges)
                          if w.provider is not None and w.provider not in known})
        if unknown:
            raise ValueError(f"workers name unknown providers {unknown}; defined: {sorted(known)}")
        if self.providers:
            self.routes()  # every worker reachable: found at load, not when the pool is built after the warm start
        if self.subset_size is not None and self.workers and self.subset_size > len(self.workers):
            raise ValueError(f"subset_size {self.subset_size} > number of workers {len(self.workers)}")
        return self

    def provider(self, provider_id: str) -> ProviderSpec:
        return next(p for p in self.providers if p.id == provider_id)

    def routes(self) -> dict[str, list[WorkerSpec]]:
        """Workers and judges grouped by provider id, for pools that call them; every one needs a provider."""
        called = [*self.workers, *self.judges]
        missing = [w.id for w in called if w.provider is None]
        if missing:
            raise ValueError(f"workers without a provider cannot be called: {missing}")
        return {p.id: [w for w in called if w.provider == p.id] for p in self.providers}


class ExecutorConfig(Section):
    max_steps: int = Field(default=5, ge=1, le=32)
    max_rounds: int = Field(default=1, ge=0, le=8, description="recursive rounds after the root workflow")
    question_visibility: Literal["first", "all"] = "all"
    parallel_steps: bool = True


class PromptConfig(Section):
    fewshot_file: Optional[str] = Field(default=None, description="JSON list of examples; None = packaged set")
    num_fewshot: int = Field(default=4, ge=0, le=32)
    show_prices: bool = True


class DataConfig(Section):
    datasets: list[DatasetSpec] = Field(default_factory=list)


class VerifierConfig(Section):
    math_timeout_s: float = Field(default=5.0, gt=0, le=120)
    code_timeout_s: float = Field(default=10.0, gt=0, le=600)
    code_memory_mb: int = Field(default=1024, ge=64, le=65536)
    require_code_isolation: bool = Field(
        default=False, description="refuse to run code when a kernel sandbox layer is unavailable")
    allow_unconfined_code_reads: bool = Field(
        default=False, description="run code even where Landlock is unavailable (a kernel before 5.13 or without "
        "the LSM): the program can then read every file the host user can, a parent process's environment and "
        "its API keys among them; off, such runs are refused as infrastructure errors")
    python_reward_timeout_s: float = Field(
        default=30.0, gt=0, le=3600, description="a user's Python reward call gets this long, then the episode "
        "is an infrastructure error (the call runs on in the background: conductor/verifiers/bounded_calls.py)")
    python_reward_threads: int = Field(
        default=16, ge=1, le=1024, description="threads each Python reward may hold at once per process; "
        "calls past the timeout keep theirs until they return")


class PolicyConfig(Section):
    model_path: Optional[str] = Field(default=None, description="HF model dir (local or URL); a .gguf file or "
                                      "package://<module>/<file>.gguf (converted once, learner/gguf_policy.py); "
                                      "None = build a tiny policy")
    tiny_vocab_size: int = Field(default=768, ge=256)
    tiny_corpus: Literal["default", "run"] = Field(
        default="default", description="what the tiny policy's BPE tokenizer is trained on: the built-in corpus "
        "(prompts, workflows, toy questions), or that plus this run's pool listing and training questions "
        "(shorter prompts where questions are long: LaTeX, code)")


class EngineConfig(Section):
    replicas: int = Field(default=1, ge=1)
    num_cpus: float = Field(default=1.0, ge=0)
    num_gpus: float = Field(default=0.0, ge=0, description="> 0: vLLM on GPU (multiprocess workers)")
    dtype: Literal["float32", "bfloat16", "float16", "auto"] = "float32"
    max_model_len: int = Field(default=4096, ge=128)
    kv_cache_gb: int = Field(default=1, ge=1, description="CPU KV cache in GiB (VLLM_CPU_KVCACHE_SPACE)")
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    enforce_eager: bool = True


class RolloutConfig(Section):
    group_size: int = Field(default=4, ge=1, description="G samples per question (GRPO group)")
    temperature: float = Field(default=1.0, ge=0)
    top_p: float = Field(default=1.0, gt=0, le=1)
    max_new_tokens: int = Field(default=256, ge=1)
    recursive_fraction: float = Field(default=0.0, ge=0, le=1, description="share of samples given a recursive round")
    truncation_is_format_error: bool = Field(default=True, description="a completion cut at max_new_tokens "
                                             "(the root's or a recursive turn's) scores as a format error")
    max_concurrent_episodes: int = Field(default=64, ge=1)
    questions_per_batch: int = Field(default=4, ge=1, description="questions per generation call")
    actors: int = Field(default=1, ge=1, description="RolloutActor actors (each runs many episodes at once)")
    limit: Optional[int] = Field(default=None, ge=1, description="questions to roll out: the rollouts command "
                                 "only (training always uses the whole dataset)")
    store_path: StorePath = Field(default="{output_dir}/{run_name}/rollouts",
                                  description="local dir or s3://bucket/prefix")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options (no keys: use env); "
                                            "empty = output.storage_options")

    @model_validator(mode="before")
    @classmethod
    def _renamed(cls, data: Any) -> Any:
        if isinstance(data, dict) and "workers" in data:
            raise ValueError("rollout.workers was renamed rollout.actors (worker means a worker LLM)")
        return data


ASYNC_TIS_CAP = 2.0


class LearnerConfig(Section):
    """The DeepSpeed ZeRO learner group and the GRPO objective it optimises."""

    zero_stage: Literal[0, 1, 2, 3] = Field(default=2, description="0: plain data parallel (no sharding)")
    ranks: int = Field(default=1, ge=1, description="learner actors (data-parallel ranks)")
    num_cpus_per_rank: float = Field(default=1.0, ge=0)
    torch_threads: Optional[int] = Field(default=None, ge=1, description="torch threads per rank; None = Ray's "
                                         "(the rank's num_cpus). More than it reserves pays on a CPU node where the "
                                         "engine idles while the learner trains")
    num_gpus_per_rank: float = Field(default=0.0, ge=0, description="> 0: NCCL backend and GPU bundles")
    dtype: Literal["float32", "bfloat16"] = "float32"
    lr: float = Field(default=1e-3, gt=0)
    lr_schedule: Literal["constant", "cosine"] = "constant"
    warmup_steps: int = Field(default=10, ge=0, description="linear warmup, in optimizer steps")
    betas: tuple[float, float] = (0.9, 0.99)
    weight_decay: float = Field(default=0.0, ge=0)
    grad_clip: float = Field(default=1.0, gt=0)
    micro_batch_size: int = Field(default=16, ge=1, description="sequences per forward pass per rank")
    mini_batches: int = Field(default=1, ge=1, description="optimizer steps per training step")
    gradient_checkpointing: bool = Field(default=False, description="recompute activations (large models)")
    shared_prompt: bool = Field(default=True, description="run each distinct prompt once per micro-batch, not "
                                "once per sample (exact; off under gradient_checkpointing, which has no cache)")
    eps_low: float = Field(default=0.2, ge=0, lt=1)
    eps_high: float = Field(default=0.2, ge=0)
    kl_coef: float = Field(default=0.0, ge=0, description="> 0 keeps a frozen reference model")
    worker_id_kl_coef: float = Field(
        default=0.0, ge=0, description="a KL term to the warm start on the tokens that name a worker (the "
        "model_id list) only: holds whom to ask open while the subtasks and format move "
        "(conductor/worker_choice_tokens.py); > 0 keeps a frozen reference model")
    worker_id_kl_scope: Literal["all", "first"] = Field(
        default="all", description="which worker-naming tokens worker_id_kl_coef holds: every entry of the "
        "model_id list, or the first (the worker that answers first) alone, leaving whom to ask to check or "
        "build on it free to move")
    later_worker_kl_coef: Optional[float] = Field(
        default=None, ge=0, description="the KL term's coefficient on the tokens that name the workers after the "
        "first (who check or build on its answer) in place of kl_coef; null: kl_coef. 0 frees whom to ask to "
        "check while the shapes, the format and (with worker_id_kl_coef) the first worker stay held "
        "(conductor/worker_choice_tokens.py)")
    train_plan_line: bool = Field(
        default=True, description="false: a plan line (sft.plan: the tokens before the first model_id, and the "
        "one that starts it) carries no loss, so the reward cannot rewrite or skip the kind the policy reads "
        "(conductor/worker_choice_tokens.py)")
    first_round_weight: float = Field(
        default=1.0, ge=0, le=1, description="in an episode with recursive rounds (rollout.recursive_fraction), "
        "the root completion's advantage times this; its recursive turns get the full advantage")
    aggregation: Literal["token", "sequence"] = "token"
    tis_cap: Union[Annotated[float, Field(gt=0)], Literal["auto"], None] = Field(
        default="auto", description="truncated importance weight cap; null = off; auto = off when training "
        "synchronously (train.max_staleness 0), 2.0 when asynchronously")
    filter_zero_spread: bool = Field(default=True, description="drop groups whose rewards are all equal")
    advantage_scale: Literal["std", "none"] = Field(
        default="std", description="divide a group's centred rewards by its std (GRPO) or not (Dr. GRPO): "
        "'none' keeps a small cost penalty a tie-break (learner/grpo.py)")
    weight_sync: Literal["object_store", "collective"] = "object_store"
    sync_bucket_mb: float = Field(default=64.0, gt=0, description="ZeRO-3 gather / broadcast bucket size")
    checkpoint_every: int = Field(default=20, ge=0, description="steps between checkpoints; 0 = only at the end")
    keep_checkpoints: int = Field(default=2, ge=1)

    def resolved(self, asynchronous: bool) -> LearnerConfig:
        """This section with ``tis_cap: auto`` made concrete for the training mode."""
        if self.tis_cap != "auto":
            return self
        return self.model_copy(update={"tis_cap": ASYNC_TIS_CAP if asynchronous else None})


class TrainConfig(Section):
    """The training loop (cluster/grpo_recipe.py), synchronous or asynchronous, and its evaluation."""

    steps: int = Field(default=150, ge=0)
    questions_per_step: int = Field(default=8, ge=1)
    domain_weights: Optional[dict[str, Annotated[float, Field(ge=0)]]] = Field(
        default=None, description="draw training questions by domain with these weights (every domain of the "
        "training split named; 0 leaves one out) instead of uniformly over questions")
    val_questions: int = Field(default=60, ge=0, description="selects the best checkpoint")
    best_by: Literal["reward", "accuracy"] = Field(
        default="reward", description="the validation figure that picks the best checkpoint: the mean reward "
        "(the trained objective, cost penalties included) or the accuracy alone")
    val_average: Literal["questions", "domains"] = Field(
        default="questions", description="how best_by's figure averages the validation questions: over "
        "questions, or each domain's mean averaged over domains (the evaluation report's average: a domain "
        "that is a small share of the split counts as much as the others)")
    val_max_worker_tokens: Optional[float] = Field(
        default=None, gt=0, description="a token budget: a validated policy spending more worker tokens per "
        "question (averaged as val_average says) is not kept as the best, however accurate")
    val_constrain_format: bool = Field(
        default=False, description="validate and evaluate the held-out split decoding under the workflow "
        "expression (conductor/workflow_constraint.py), as evaluate.constrain_format deploys the policy")
    heldout_questions: int = Field(default=150, ge=1, description="reported once, at the end")
    split_seed: int = Field(default=0, description="draws which questions are validation and held-out; apart "
                            "from the run's `seed` (the policy's initialisation and sampling), so that runs "
                            "over seeds train and are scored on the same questions")
    eval_every: int = Field(default=10, ge=1)
    val_before_train: bool = Field(default=False, description="also validate the warm-start policy before step "
                                   "1: the curve's step 0, and a start no later step beats stays the best")
    refill_rounds: int = Field(default=0, ge=0, description="extra rollout rounds per step replacing groups "
                               "with no reward spread (dynamic sampling); 0 = only filter them")
    eval_temperature: float = Field(default=0.0, ge=0, description="0 = greedy routing at evaluation")
    format_floor: float = Field(default=0.3, ge=0, le=1,
                                description="sampled format rate under this for format_patience steps: roll back")
    format_patience: int = Field(default=3, ge=1)
    max_rollbacks: int = Field(default=3, ge=0, description="format collapses rolled back before giving up")
    max_staleness: int = Field(default=0, ge=0, le=64, description="k: every trained record is at most k policy "
                               "versions old; 0 = synchronous (generate, then train), >= 1 = rollouts go on "
                               "while the learner trains")
    replayable: bool = Field(default=False, description="each step trains on the next groups in request order, "
                             "waiting for a slow one instead of taking a later one that finished first: a second "
                             "run with the same seed trains on the same batches (and, over pool.cache, replays "
                             "its calls). Asynchronous runs (max_staleness >= 1) wait more for it; a synchronous "
                             "run trains on the same groups either way")
    max_learner_restarts: int = Field(default=3, ge=0, description="learner groups rebuilt from the newest "
                                      "checkpoint after a rank dies, before giving up")
    stall_timeout_s: float = Field(default=1800.0, gt=0, description="no new rollout group for this long: stop "
                                   "with an error (an actor that never comes back)")
    resume: bool = Field(default=False, description="continue from the run's latest checkpoint")
    plot: bool = True


class ChaosConfig(Section):
    """Fault injection for tests and demos: kill a random actor of the next listed kind every ``every_s``
    seconds, or, with ``every_steps``, after every that many training steps (a schedule that a fast machine
    cannot outrun: the kills happen however quickly the steps go)."""

    kill: list[Literal["rollout_actor", "engine", "learner", "pool"]] = Field(default_factory=list)
    every_s: float = Field(default=60.0, gt=0)
    every_steps: Optional[int] = Field(default=None, ge=1, description="kill after steps n, 2n, ...; "
                                       "replaces every_s and first_after_s")
    first_after_s: float = Field(default=0.0, ge=0, description="extra wait before the first kill")
    max_kills: Optional[int] = Field(default=None, ge=1, description="stop after this many (default: one round)")
    seed: int = 0


class OutputConfig(Section):
    """Where a run writes (conductor/run_output.py): summary, checkpoints, exported policy, curve, audit
    log and, by default, the replay store, all under ``{dir}/{run_name}/``."""

    dir: StorePath = Field(default="runs", description="local dir or s3://bucket/prefix; under `ray job submit` use "
                     "s3:// or shared storage: a job's working directory is a temporary copy on the head node")
    storage_options: dict[str, Any] = Field(default_factory=dict, description="fsspec options (no keys: use env)")


class Config(Section):
    run_name: str = Field(default="demo", pattern=r"^[A-Za-z0-9_.\-]+$")
    seed: int = 0
    pool: PoolConfig = Field(default_factory=PoolConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    prompt: PromptConfig = Field(default_factory=PromptConfig)
    reward: RewardConfig = Field(default_factory=RewardConfig)
    data: DataConfig = Field(default_factory=DataConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    judge: JudgeConfig = Field(default_factory=JudgeConfig)
    simulator: SimulatorConfig = Field(default_factory=SimulatorConfig)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    engine: EngineConfig = Field(default_factory=EngineConfig)
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    sft: SftConfig = Field(default_factory=SftConfig)
    learner: LearnerConfig = Field(default_factory=LearnerConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    chaos: ChaosConfig = Field(default_factory=ChaosConfig)
    evaluate: EvaluateConfig = Field(default_factory=EvaluateConfig)
    serve: ServeConfig = Field(default_factory=ServeConfig)
    calibrate: CalibrateConfig = Field(default_factory=CalibrateConfig)
    output: OutputConfig = Field(default_factory=OutputConfig)

    @model_validator(mode="after")
    def _sft_shapes_fit(self) -> Config:
        from conductor.example_workflows import shape_steps

        too_long = [s for s, w in self.sft.shapes.items() if w > 0 and shape_steps(s) > self.executor.max_steps]
        if self.sft.steps and too_long:
            raise ValueError(f"sft.shapes {', '.join(too_long)} have more steps than executor.max_steps "
                             f"({self.executor.max_steps})")
        return self

    @model_validator(mode="after")
    def _judge_callable(self) -> Config:
        check_judge(self)
        return self

    @model_validator(mode="after")
    def _budget_names_providers(self) -> Config:
        check_budget(self)
        return self

    def store(self) -> tuple[str, dict[str, Any]]:
        """The replay store's path (``rollout.store_path`` filled in) and its fsspec options."""
        path = self.rollout.store_path.format(run_name=self.run_name, output_dir=self.output.dir.rstrip("/"))
        return path, dict(self.rollout.storage_options or self.output.storage_options)

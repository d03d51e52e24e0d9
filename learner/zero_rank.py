"""ZeroRank: one data-parallel rank of the DeepSpeed ZeRO learner, Ray-free. ``learner/learner_rank.py`` runs
it as a Ray actor; ``bench/gpu_check.py`` runs it in a plain process (world size 1, no Ray on the machine).

Every rank runs the same sequence of collectives, so every method here is called on all ranks at once
(``LearnerGroup`` does that). Gradient accumulation is DeepSpeed's own, with a fixed number of
micro-batches per optimizer step; a rank with fewer sequences than micro-batches runs an empty
(all-masked) micro-batch, so ZeRO-3's parameter gathers stay in step across ranks. Losses are
normalised by the whole batch's token (or sequence) count and scaled by the world size, so the averaged
gradient equals the gradient of the whole batch's mean whatever the split.

CPU here: gloo backend, torch AdamW as the client optimizer (no fused/CPU-Adam JIT build) and DeepSpeed's
shared-memory comm op skipped (another JIT build that only speeds up intra-node CPU collectives). GPU:
NCCL; the same code.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import sys
from collections.abc import Sequence
from typing import Any, Optional

import numpy as np
import torch

from conductor.config import LearnerConfig
from conductor.metrics import Families
from conductor.run_output import RunOutput, local_copy
from conductor.timer import Timer
from conductor.worker_choice_tokens import TokenTexts
from learner.grpo import GrpoSettings, policy_loss
from learner.lr_schedule import lr_factor
from learner.shared_prompt import collate_shared, shared_prompt_logprobs
from learner.train_batch import LearnerStats, TrainSequence, collate, split, token_logprobs

EMPTY = TrainSequence(prompt_ids=(0,), completion_ids=(0,), behaviour_logprobs=(0.0,), advantage=0.0)


def deepspeed_config(config: LearnerConfig, accumulation_steps: int) -> dict[str, Any]:
    return {
        "train_micro_batch_size_per_gpu": config.micro_batch_size,
        "gradient_accumulation_steps": accumulation_steps,
        "gradient_clipping": config.grad_clip,
        "zero_optimization": {"stage": config.zero_stage},
        "bf16": {"enabled": config.dtype == "bfloat16"},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1 << 30,
        "wall_clock_breakdown": False,
    }


def _skip_shm_comm_build() -> None:
    """DeepSpeed JIT-compiles a shared-memory comm op at ``init_distributed`` on CPU (30-40 s, 1.6 GB);
    gloo does not need it. The module's name is shadowed by a function, hence ``sys.modules``."""
    import deepspeed.comm.torch  # noqa: F401

    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if state.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


class ZeroRank:
    def __init__(self, rank: int, world_size: int, config: LearnerConfig,
                 storage_options: Optional[dict[str, Any]] = None, run_name: str = ""):
        """Not started: ``setup`` joins the process group at rank 0's address, which is only known once
        rank 0 has a node (``LearnerGroup``)."""
        self.rank, self.world_size, self.config = rank, world_size, config
        self.storage_options = storage_options
        self.metrics = Families("conductor_learner", run=run_name) if rank == 0 else None

    def setup(self, master: tuple[str, int], model_path: str, total_steps: int, accumulation_steps: int,
              seed: int = 0) -> int:
        config, rank = self.config, self.rank
        os.environ.update(RANK=str(rank), WORLD_SIZE=str(self.world_size), LOCAL_RANK="0",
                          MASTER_ADDR=master[0], MASTER_PORT=str(master[1]))
        os.environ.setdefault("DS_ACCELERATOR", "cuda" if config.num_gpus_per_rank > 0 else "cpu")
        import deepspeed
        from transformers import AutoModelForCausalLM

        model_path = local_copy(model_path, self.storage_options)  # a remote policy: copied once per node
        self.accumulation_steps = accumulation_steps
        self.zero3 = config.zero_stage == 3
        random.seed(seed + rank)
        np.random.seed(seed + rank)
        torch.manual_seed(seed + rank)
        if config.torch_threads:
            torch.set_num_threads(config.torch_threads)
        _skip_shm_comm_build()
        deepspeed.init_distributed(dist_backend="nccl" if config.num_gpus_per_rank > 0 else "gloo")
        ds_config = deepspeed_config(config, accumulation_steps)
        if self.zero3:
            from transformers.integrations import HfDeepSpeedConfig

            self._hf_ds_config = HfDeepSpeedConfig(ds_config)  # from_pretrained partitions at load time
        dtype = torch.bfloat16 if config.dtype == "bfloat16" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
        self.model_config = model.config
        if config.gradient_checkpointing:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        self.pad_id = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        self.shared_prompt = config.shared_prompt and not config.gradient_checkpointing
        optimizer = torch.optim.AdamW(model.parameters(), lr=config.lr, betas=tuple(config.betas),
                                      weight_decay=config.weight_decay)
        schedule = functools.partial(lr_factor, warmup_steps=config.warmup_steps,
                                     total_steps=max(1, total_steps * config.mini_batches),
                                     schedule=config.lr_schedule)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=ds_config)
        self.reference = None
        self.token_texts = None
        if config.worker_id_kl_coef > 0 or config.later_worker_kl_coef is not None:
            from transformers import AutoTokenizer

            self.token_texts = TokenTexts(AutoTokenizer.from_pretrained(model_path))
        self.settings = GrpoSettings(eps_low=config.eps_low, eps_high=config.eps_high, kl_coef=config.kl_coef,
                                     worker_id_kl_coef=config.worker_id_kl_coef,
                                     later_worker_kl_coef=config.later_worker_kl_coef,
                                     aggregation=config.aggregation,
                                     tis_cap=config.resolved(asynchronous=False).tis_cap)
        if self.settings.uses_reference:
            self.reference = _unpartitioned(model_path, dtype, self._hf_ds_config if self.zero3 else None)
            self.reference = self.reference.to(self.engine.device).eval()
            self.reference.requires_grad_(False)
        self.steps_done = 0
        self.sender = None
        return rank

    # -- training ---------------------------------------------------------------------------------------

    def _collate(self, sequences: Sequence[TrainSequence]):
        """A micro-batch's tensors, on the engine's device (host memory on CPU, the rank's GPU with NCCL)."""
        if self.token_texts is not None:  # the plan line's ``untrained`` positions come marked (learner_group.py)
            texts = self.token_texts
            first_only = self.config.worker_id_kl_scope == "first"
            later = self.config.later_worker_kl_coef is not None
            sequences = [dataclasses.replace(s, worker_choice=texts.choice_positions(s.completion_ids, first_only),
                                             later_workers=texts.later_positions(s.completion_ids) if later else ())
                         for s in sequences]
        batch = collate_shared(sequences, self.pad_id) if self.shared_prompt else collate(sequences, self.pad_id)
        for item in dataclasses.fields(batch):
            setattr(batch, item.name, getattr(batch, item.name).to(self.engine.device))
        return batch

    def _micro_batches(self, sequences: Sequence[TrainSequence]):
        return [self._collate(piece) if piece else _masked(self._collate([EMPTY]))
                for piece in split(list(sequences), self.accumulation_steps)]

    def _forward_logprobs(self, module, batch) -> torch.Tensor:
        """Logprobs aligned with ``batch.completion_mask`` (either layout: learner/shared_prompt.py or
        learner/train_batch.py)."""
        if self.shared_prompt:
            return shared_prompt_logprobs(module, batch)
        logits = module(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits
        return token_logprobs(logits, batch.input_ids)

    def train_step(self, mini_batches: list[list[TrainSequence]], normalisers: list[float],
                   batch_tokens: int = 0) -> LearnerStats:
        """One training step: an optimizer step per mini-batch. ``normalisers[m]`` is mini-batch m's
        token (or sequence) count over all ranks; ``batch_tokens`` the whole batch's (for tokens/s)."""
        timings: dict[str, float] = {}
        self.engine.train()
        with Timer("collate", timings):
            prepared = [self._micro_batches(mini) for mini in mini_batches]
        old = None
        if len(prepared) > 1:  # several updates on one batch: ratios against the pre-update policy
            with torch.no_grad(), Timer("forward", timings):
                old = [[self._forward_logprobs(self.engine, b) for b in micros] for micros in prepared]
        totals = {"loss": 0.0, "clip_fraction": 0.0, "mean_ratio": 0.0, "kl": 0.0, "worker_id_kl": 0.0}
        averaged = ("clip_fraction", "mean_ratio", "kl", "worker_id_kl")  # over the trained tokens of the step
        trained_tokens = 0.0
        for m, micros in enumerate(prepared):
            for k, batch in enumerate(micros):
                with Timer("forward", timings):
                    logprobs = self._forward_logprobs(self.engine, batch)
                    old_logprobs = old[m][k] if old is not None else logprobs.detach()
                    ref = None
                    if self.reference is not None:
                        with torch.no_grad():
                            ref = self._forward_logprobs(self.reference, batch)
                    loss, stats = policy_loss(logprobs, old_logprobs, batch.advantages, batch.completion_mask,
                                              self.settings, behaviour_logprobs=batch.behaviour_logprobs,
                                              ref_logprobs=ref, normaliser=max(normalisers[m], 1.0) / self.world_size,
                                              worker_choice_mask=batch.worker_choice_mask,
                                              later_worker_mask=batch.later_worker_mask)
                with Timer("backward", timings):
                    self.engine.backward(loss, scale_wrt_gas=False)
                with Timer("optimizer", timings):
                    self.engine.step()
                totals["loss"] += loss.item() / self.world_size
                weight = float(batch.completion_mask.sum())  # 0 for a filler micro-batch: it says nothing
                for key in averaged:
                    totals[key] += stats[key] * weight
                trained_tokens += weight
        self.steps_done += 1
        for key in averaged:
            totals[key] /= max(1.0, trained_tokens)
        stats = LearnerStats(**totals, grad_norm=float(self.engine.get_global_grad_norm() or 0.0),
                             lr=float(self.scheduler.get_last_lr()[0]), timings=timings)
        if self.metrics is not None:
            seconds = sum(timings.values())
            self.metrics.set("conductor_learner_step_seconds", seconds)
            self.metrics.set("conductor_learner_grad_norm", stats.grad_norm)
            self.metrics.set("conductor_learner_tokens_per_second", batch_tokens / max(seconds, 1e-9))
            self.metrics.inc("conductor_learner_steps_total", len(mini_batches))
        return stats

    def logprobs(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """The current policy's logprobs of ``completion_ids`` after ``prompt_ids`` (tests, diagnostics)."""
        self.engine.eval()
        batch = self._collate([TrainSequence(tuple(prompt_ids), tuple(completion_ids), (0.0,) * len(completion_ids),
                                             0.0)])
        with torch.no_grad():
            values = self._forward_logprobs(self.engine, batch)
        return values[0][batch.completion_mask[0] > 0].tolist()

    # -- checkpoints and export -------------------------------------------------------------------------

    def save_checkpoint(self, out: RunOutput, tag: str, client_state: dict[str, Any]) -> str:
        """Every rank writes its DeepSpeed files locally and uploads them (a remote output: ranks on
        other nodes included), so the driver finds the whole checkpoint under ``out``."""
        state = dict(client_state, learner_steps=self.steps_done)
        local = out.staged("checkpoints")
        self.engine.save_checkpoint(str(local), tag=tag, client_state=state)
        torch.save(rng_state(), local / tag / f"rng-rank{self.rank}.pt")
        out.publish("checkpoints", tag)
        out.discard_staged("checkpoints", tag)
        return out.path("checkpoints", tag)

    def load_checkpoint(self, out: RunOutput, tag: str) -> dict[str, Any]:
        local = out.fetch("checkpoints", tag)
        try:
            path, client_state = self.engine.load_checkpoint(str(local.parent), tag=tag, load_optimizer_states=True,
                                                             load_lr_scheduler_states=True)
            if path is None:
                raise FileNotFoundError(f"no DeepSpeed checkpoint {tag!r} under {out.path('checkpoints')}")
            set_rng_state(torch.load(local / f"rng-rank{self.rank}.pt", weights_only=False))
        finally:
            out.discard_staged("checkpoints", tag)
        self.steps_done = int(client_state.get("learner_steps", 0))
        self._apply_configured_lr()
        return {k: v for k, v in client_state.items() if k != "learner_steps"}

    def _apply_configured_lr(self) -> None:
        """A checkpoint restores the scheduler's base lr too; the configured ``lr`` wins, so a run resumed
        with a new ``learner.lr`` uses it from the next step, at the restored point of the schedule."""
        scheduler = self.scheduler
        scheduler.base_lrs = [self.config.lr] * len(scheduler.base_lrs)
        for group, base, factor in zip(scheduler.optimizer.param_groups, scheduler.base_lrs, scheduler.lr_lambdas):
            group["lr"] = base * factor(scheduler.last_epoch)
        scheduler._last_lr = [group["lr"] for group in scheduler.optimizer.param_groups]

    def export_hf(self, out: RunOutput, tokenizer_from: Optional[str] = None) -> Optional[str]:
        """The policy as a Hugging Face directory at ``out/policy`` (rank 0 writes; all gather under ZeRO-3)."""
        from learner.hf_export import export_hf

        tokenizer_dir = local_copy(tokenizer_from, self.storage_options) if tokenizer_from and self.rank == 0 else None
        written = export_hf(self.engine.module, self.model_config, str(out.staged("policy")), self.rank, self.zero3,
                            self._bucket_bytes(), tokenizer_dir)
        if written is None:
            return None
        out.publish("policy")
        out.discard_staged("policy")
        return out.path("policy")

    def full_state_dict(self) -> Optional[dict[str, torch.Tensor]]:
        """Every parameter, gathered, on rank 0 (None elsewhere). For tests on tiny models."""
        from learner.weight_sync import gathered_buckets, parameter_specs

        collected: dict[str, torch.Tensor] = {}
        for bucket in gathered_buckets(self.engine.module, parameter_specs(self.engine.module), self._bucket_bytes(),
                                       self.zero3):
            if self.rank == 0:
                collected.update({name: tensor.detach().clone() for name, tensor in bucket})
        return collected if self.rank == 0 else None

    # -- weight sync (learner/weight_sync.py) --------------------------------------------------------

    def _bucket_bytes(self) -> int:
        return int(self.config.sync_bucket_mb * 2**20)

    def weight_plan(self) -> list[list[tuple[str, tuple[int, ...], str]]]:
        from conductor.weight_transfer import bucket_plan
        from learner.weight_sync import parameter_specs

        return bucket_plan(parameter_specs(self.engine.module), self._bucket_bytes())

    def connect_sender(self, transport: str, replicas: Any = None,
                       group_address: Optional[tuple[str, int]] = None, group_size: int = 0) -> bool:
        """Rank 0 holds the sending side: the engines' handles (object store) or a process group spanning
        itself and the engines' workers (collective; blocks until every engine worker joins)."""
        from conductor.weight_transfer import WeightGroup
        from learner.weight_sync import CollectiveSender, ObjectStoreSender

        if self.rank != 0:
            return False
        if transport == "object_store":
            self.sender = ObjectStoreSender(replicas)
        else:
            backend = "nccl" if self.config.num_gpus_per_rank > 0 else "gloo"
            self.sender = CollectiveSender(WeightGroup.open(backend, group_address[0], group_address[1], 0,
                                                            group_size))
        return True

    def push_weights(self, version: int, replicas: Optional[list[int]] = None) -> int:
        """Gather parameters bucket by bucket (all ranks) and send each from rank 0 (to ``replicas``:
        default all)."""
        from learner.weight_sync import gathered_buckets, parameter_specs

        for bucket in gathered_buckets(self.engine.module, parameter_specs(self.engine.module), self._bucket_bytes(),
                                       self.zero3):
            if self.rank == 0:
                self.sender.send(bucket)
        if self.rank == 0:
            self.sender.finish(version, replicas)
        return version


def _unpartitioned(model_path: str, dtype: torch.dtype, hf_ds_config: Any) -> Any:
    """The frozen KL reference, whole on each rank. Under ZeRO-3 the live ``HfDeepSpeedConfig`` would have
    ``from_pretrained`` partition it with ``zero.Init``, and no engine ever gathers a model that does not train:
    its weights were empty and its first forward failed. So it is loaded with that config set aside."""
    from transformers import AutoModelForCausalLM

    if hf_ds_config is None:
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    from transformers.integrations.deepspeed import set_hf_deepspeed_config, unset_hf_deepspeed_config

    unset_hf_deepspeed_config()
    try:
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=dtype)
    finally:
        set_hf_deepspeed_config(hf_ds_config)


def _masked(batch):
    """An all-masked micro-batch: it runs forward and backward (keeping collectives in step) but adds
    nothing to the gradient."""
    batch.completion_mask.zero_()
    return batch

"""GrpoRecipe: a training run read top to bottom (the command that runs it: cluster/train.py).

``setup`` (data, pool, warm start, baselines, the cluster's actors), ``train`` (the loop), ``finish`` (best
checkpoint, held-out evaluation, export, summary). One loop serves both modes: with
``train.max_staleness: 0`` it is synchronous (sample Q groups at version v, train, publish v + 1); with
k >= 1 the rollout actors keep sampling while the learner trains, and admission control
(conductor/staleness.py) keeps every trained record at most k versions old and admits none for steps past
the run's last.

It heals itself (cluster/recipe_healing.py): engines, rollout actors and pool actors restart (Ray
``max_restarts``) and their work is issued again; a dead learner rank makes the driver rebuild the learner group
from the newest checkpoint (``train.max_learner_restarts`` times). A resumed run trains the groups its checkpoint
had admitted ahead, where the store holds them, rather than sampling and paying for them again
(cluster/pending_groups.py).
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from typing import Any

import ray
from rich.console import Console

from cluster import best_checkpoint as best
from cluster import cache_occurrences
from cluster import train_report as report
from cluster.group_collector import GroupCollector
from cluster.learner_keeper import LearnerKeeper
from cluster.pending_groups import PendingGroups, carried_over
from cluster.pool_meters import PoolMeters
from cluster.recipe_healing import Healing
from cluster.rollout_feed import RolloutFeed
from cluster.rollouts import tasks_for
from cluster.run_spend import RunSpend
from cluster.step_stats import StalenessStats, StepStats
from cluster.train_state import (
    Checkpoints,
    TrainState,
    append_trained,
    archive_previous_run,
    publish_trained,
    resume_trained_log,
)
from cluster.warm_start import warm_start_policy
from conductor.config import Config
from conductor.cost_dial import CARD_FILE, card_of, validation_settings
from conductor.kept_baselines import kept_or_measured
from conductor.pool import ReplayMiss
from conductor.replay_store import Cursor, ReplayStore
from conductor.rollout_summary import RolloutStats, summarise
from conductor.run_output import RunOutput, local_copy
from conductor.simulator.embedded_pool import with_simulated_pool
from conductor.staleness import StalenessManager
from conductor.stop_request import StopRequest, signals_held
from conductor.tasks.splits import configured_splits, training_sampler
from conductor.timer import Timer
from conductor.token_budget import TokenBudget

LEFTOVER_WAIT_S = 120.0  # at the end, for rollout requests admitted for steps this segment did not train


class GrpoRecipe(Healing):
    def __init__(self, config: Config, console: Console):
        self.config, self.console = config, console
        self.out = RunOutput(config.output.dir, config.run_name, config.output.storage_options)
        self.stack = contextlib.ExitStack()
        self.started = time.time()
        self.segment_mark: float | None = None  # while train() runs: when its wall time was last counted
        self.reissued_counted = 0            # re-issued rollout requests already added to state.faults
        self.stopped = None                  # the spend cap's BudgetStop, when it ended the loop early
        self.stop_request = StopRequest()    # SIGTERM / SIGINT: checkpoint after the step and exit
        self.phases: dict[str, float] = {}   # setup's and finish's seconds by phase (summary.json run_phases_s)

    # -- setup ------------------------------------------------------------------------------------------

    def setup(self) -> None:
        from transformers import AutoTokenizer

        from actors.conductor_engine import start_engines
        from actors.rollout_actor import RolloutActor
        from actors.worker_pool import RayPool
        from cluster.placement import engine_placement_group

        config = self.config
        self.val_settings = validation_settings(card_of(config.reward), config.evaluate.cost_quality,
                                                "evaluate.cost_quality")
        self.console.print(f"outputs: {self.out.url}")
        if not config.train.resume:
            archive_previous_run(self.out, self.console)
        with self.stop_request.interrupting():  # no step to finish yet: a signal unwinds the measurements at once
            self.spend = RunSpend(config, self.out)
            self.splits = configured_splits(tasks_for(config), config.train)
            self.console.print(f"tasks: {len(self.splits.train)} train, {len(self.splits.val)} validation, "
                               f"{len(self.splits.heldout)} held-out")
            config = self.config = with_simulated_pool(config, self.stack)[0]

            # The warm start, and the baselines on the held-out split through the same executor, pool, verifier.
            with Timer("warm_start", self.phases):
                self.policy = warm_start_policy(config, self.out, list(self.splits.train), self.console, self.spend)
            tokenizer = AutoTokenizer.from_pretrained(local_copy(self.policy, config.output.storage_options))
            with Timer("baselines", self.phases):
                baselines = kept_or_measured(config, self.splits.heldout, tokenizer, self.out, self.spend)
            self.baselines = baselines.figures
            report.print_baselines(self.console, baselines)

        # The cluster: engines, rollout actors, learners, weight sync.
        cluster_started = time.perf_counter()
        ray.init(address=os.environ.get("RAY_ADDRESS") or "local", ignore_reinit_error=True, log_to_driver=False)
        self.stack.callback(ray.shutdown)
        self.stack.callback(self.stop_request.install().uninstall)  # after ray.init: a second signal goes to Ray's
        report.warn_local_output(self.out, sum(node["Alive"] for node in ray.nodes()), self.console)
        self.store_path, store_options = config.store()
        self.store = ReplayStore(self.store_path, storage_options=store_options or None)
        # The engines load while the learners start (both mostly imports and model loading, on different CPUs).
        self.engines = start_engines(self.policy, config.engine, config.seed, engine_placement_group(config.engine),
                                     storage_options=config.output.storage_options, run_name=config.run_name,
                                     wait=False)
        # Owned (and held) here, so the pool actors outlive any rollout actor.
        self.pool = RayPool(config.pool, seed=config.seed, run_name=config.run_name,
                            occurrences=cache_occurrences.load(self.out) if config.train.resume else None)
        # a dial run scores every evaluated question at each of its validation settings
        scored = len(self.val_settings)
        self.meters = PoolMeters(self.pool, self.spend, caching=config.pool.cache.mode != "off",
                                 val_questions=scored * len(self.splits.val),
                                 heldout_questions=scored * len(self.splits.heldout))
        # however the run ends: the spend read, the caches' new answers written, the spend read again (so a
        # resumed run's cap counts every answer they stored; a kill in a slow flush finds the ledger written)
        self.stack.callback(self.meters.record_spend_on_exit)
        self.stack.callback(self.pool.flush)
        self.stack.callback(self.meters.record_spend_on_exit)
        self.feed = RolloutFeed([RolloutActor.remote(config, self.policy, self.engines, self.store_path,
                                                     config.seed + i) for i in range(config.rollout.actors)])
        self.learner_config = config.learner.resolved(asynchronous=config.train.max_staleness > 0)
        self.checkpoints = Checkpoints(self.out, config.learner.keep_checkpoints)
        self.metrics = report.DashboardMetrics(config.run_name)
        self.state = TrainState()
        with Timer("engines_and_learners", self.phases):
            self.learners = LearnerKeeper(self._start_learners, self.checkpoints, config.train.max_learner_restarts,
                                          restarts=lambda: self.state.faults.get("learner_restarts", 0),
                                          count=self._count, on_rebuilt=self._learners_rebuilt)
        saved_best = None
        if config.train.resume and self.checkpoints.latest():
            self.state = self.checkpoints.load(self.learners.group, self.checkpoints.latest())
            self.console.print(f"resumed from {self.checkpoints.latest()} (step {self.state.step}, "
                               f"policy v{self.state.version})")
            resume_trained_log(self.out, self.state.step)
            saved_best = self.checkpoints.saved_step("best")
        void = best.void_best(self.state, best.selection_basis(config), saved_best)
        if void:
            self.console.print(f"[yellow]{void}: the best is chosen afresh from this segment's validations[/]")
        self.budget = TokenBudget.of(config.reward, self.state.token_multiplier)
        self.staleness = StalenessManager(config.train.questions_per_step, config.train.max_staleness,
                                          steps=max(0, config.train.steps - self.state.step))  # none past the last
        # The groups the checkpoint had admitted ahead and the store holds are trained, not sampled again.
        pending = PendingGroups.from_json(self.state.pending)
        carried, self.state.sampler = carried_over(
            self.store, pending, self.state.sampler, limit=self.staleness.capacity(),
            max_staleness=config.train.max_staleness, group_size=config.rollout.group_size,
            train_ids={task.id for task in self.splits.train})
        self.sampler = training_sampler(self.splits.train, config.seed, config.train.domain_weights, self.state.sampler)
        # Engines start from the warm-start weights: hand them the learners' own, under a version no earlier
        # (killed) segment wrote rollouts for. Records older than this segment's first version are not read.
        self.state.version = max([self.state.version, *self.store.versions()])
        with Timer("first_weight_sync", self.phases):
            self._publish()
        self.collector = GroupCollector(
            self.feed, self.store, self.sampler, self.staleness, Cursor.from_json(self.state.store_cursor),
            segment=uuid.uuid4().hex[:8], first_version=self.state.version,
            questions_per_batch=config.rollout.questions_per_batch, refill_rounds=config.train.refill_rounds,
            filter_zero_spread=self.learner_config.filter_zero_spread, on_wait=self._look_after_actors,
            count=self._count, stall_timeout_s=config.train.stall_timeout_s,
            in_request_order=config.train.replayable)
        self.collector.carry_over(carried, shift=self.state.version - pending.version)  # V's weights are these
        if carried:
            self._count("groups_carried_over", len(carried))
            self.console.print(f"{len(carried)} group(s) the checkpoint had admitted ahead are in the store: "
                               f"trained as sampled, not sampled again")
        self._start_fault_handling()
        self.phases["cluster"] = time.perf_counter() - cluster_started
        self.console.print(report.phases_line("setup", self.phases))

    def _start_learners(self) -> tuple[Any, Any]:
        """A learner group and the weight sync from it to the engines."""
        from learner.learner_group import LearnerGroup
        from learner.weight_sync import WeightSync

        sequences = self.config.train.questions_per_step * self.config.rollout.group_size
        learners = LearnerGroup(self.policy, self.learner_config, self.config.train.steps, sequences,
                                seed=self.config.seed, storage_options=self.config.output.storage_options,
                                run_name=self.config.run_name)
        # The first time, the engines loaded while the group started: one that failed to start raises its own
        # error here (the collective sync would wait out its timeout for it)
        self.engines.wait_until_up()
        return learners, WeightSync(learners, self.engines, self.learner_config.weight_sync)

    # -- the training loop ------------------------------------------------------------------------------

    def train(self) -> None:
        config, state = self.config, self.state
        self.segment_mark = time.time()
        if config.train.val_before_train and state.step == 0 and not state.evals and not self.stop_request.requested:
            self._validate()
        self.meters.resume_training()
        with report.progress_bar(self.console, config.train.steps, state.step) as progress:
            while state.step < config.train.steps:
                if self.stop_request.requested:
                    break
                self.stopped = self.meters.stop_before_next(state)
                if self.stopped:
                    self.console.print(f"[yellow]{self.stopped.line()}[/]")
                    break
                stats = self.train_step()
                if stats is None:
                    continue  # the learner group was rebuilt mid-step; the step's groups were dropped
                row = stats.row() | self.meters.step_row(state)
                state.history.append(row)
                self.console.print(report.log_line(row))
                progress.update(state.step, f"reward {row['mean_reward']:.2f} best {max(state.best_val, 0):.2f}")
                self.metrics.update(dict(row, policy_version=state.version))
                self.chaos.on_step(state.step)
                if state.format_collapsed(row["format_rate"], config.train.format_floor,
                                          config.train.format_patience) and self.checkpoints.latest():
                    self._roll_back()
                    continue
                if state.step % config.train.eval_every == 0 or state.step == config.train.steps:
                    self._validate()
                if config.learner.checkpoint_every and state.step % config.learner.checkpoint_every == 0:
                    self._checkpoint(f"step-{state.step}")
        self.meters.pause_training()
        if self.stop_request.requested:
            self.console.print(f"[yellow]{self.stop_request.signal.name}: stopping after step {state.step}; "
                               f"--set train.resume=true goes on from its checkpoint[/]")
            if self.checkpoints.latest() != f"step-{state.step}":
                self._checkpoint(f"step-{state.step}")  # first: the time the signal leaves may end in a kill
        self._let_admitted_come_back()  # their calls count as the closing phase's, as calls in flight always did
        self.meters.record_spend()  # theirs too, in the ledger, with or without a summary to follow
        self._count_wall_time()
        self.segment_mark = None
        if self.checkpoints.latest() != f"step-{state.step}":
            self._checkpoint(f"step-{state.step}")
        else:
            cache_occurrences.save(self.out, self.pool)
        self.stop_request.uninstall()  # finish() has no step to end at: cluster/train.py runs it interrupting

    def _let_admitted_come_back(self) -> None:
        """The requests admitted for steps the loop did not reach (it stopped early: the spend cap) are paid
        for, and a resumed run trains their groups (cluster/pending_groups.py): let them come back before
        anything publishes other weights, and before the checkpoint takes in the cache's counts (their calls'
        included, so a resumed run's identical requests are not served their answers). Up to LEFTOVER_WAIT_S;
        a replay-only cache without an answer for one (a recording made before they were let come back) ends
        the wait, not the run. A run that trained all its steps admitted none (conductor/staleness.py)."""
        try:
            still_out = self.feed.drain(LEFTOVER_WAIT_S, self._look_after_actors)
        except ReplayMiss as exc:
            self.console.print(f"[yellow]a request admitted for a later step stopped: {exc}[/]")
            return
        if still_out:
            self.console.print(f"[yellow]{still_out} rollout request(s) admitted for later steps had not come back "
                               f"after {LEFTOVER_WAIT_S:g}s: a resumed run may draw their questions again[/]")

    def train_step(self) -> StepStats | None:
        from learner.learner_group import LearnerGroupFailed

        timings: dict[str, float] = {}
        step_start = time.perf_counter()
        with Timer("rollout", timings), self.metrics.phase("generate"):
            collected = self.collector.collect(lambda: self.state.version)
        learner_version, groups = self.state.version, collected.groups
        records = [record for group in groups for record in group]
        if self.budget:
            records = self.budget.step(records)
            self.state.token_multiplier = self.budget.multiplier
        try:
            with Timer("train", timings), self.metrics.phase("train"):
                learner_stats, batch_stats = self.learners.group.train_step(records)
            with Timer("sync", timings), self.metrics.phase("sync"):
                self._publish(step_done=True)
        except LearnerGroupFailed as exc:
            self.staleness.discard(self.config.train.questions_per_step)  # refill extras were discarded already
            self._count("groups_lost_with_learner", len(groups))
            self.learners.rebuild(exc)
            return None
        self.state.step += 1
        append_trained(self.out, self.state.step, learner_version, groups)
        timings["step"] = time.perf_counter() - step_start
        return StepStats(step=self.state.step, version=self.state.version, rollouts=summarise(records),
                         learner=learner_stats, batch=batch_stats,
                         staleness=StalenessStats.of(records, learner_version, collected.stale_dropped,
                                                     collected.refill_rounds), timings=timings,
                         token_multiplier=self.budget.multiplier if self.budget else None)

    def _publish(self, step_done: bool = False) -> None:
        """A new policy version: push the learners' weights to the engines, replica by replica. Only a
        training step's version opens room for more rollouts; a version from a rollback or a rebuilt
        learner just makes the groups in flight one version older (the too old are dropped on reading)."""
        self.state.version += 1
        self.learners.sync.push(self.state.version)
        if step_done:
            self.staleness.publish()

    def _validate(self) -> None:
        state = self.state
        with self.metrics.phase("eval"), self.meters.validation() as cost:
            result = self.evaluate(list(self.splits.val))
        state.evals.append(dict(best.validation_row(state.step, result), **self.spend.validation_row(cost)))
        self.metrics.update({"val_accuracy": result.accuracy})
        score = best.validation_score(result, self.config.train)
        better = score > state.best_val
        self.console.print(report.validation_line(result, kept=better, best_val=state.best_val,
                                                  best_step=state.best_step,
                                                  not_eligible=best.not_eligible(result, self.config.train)))
        if better:
            previous = state.best_val, state.best_step
            state.best_val, state.best_step = score, state.step
            if not self._checkpoint("best"):
                state.best_val, state.best_step = previous

    def evaluate(self, tasks: list) -> RolloutStats:
        """Greedy routing (``train.eval_temperature``), one sample per question, nothing stored; a dial run
        at ``evaluate.cost_quality``, else at cheap, balanced and best, pooled (conductor/cost_dial.py)."""
        return summarise(self.feed.evaluate(tasks, best.validation_sampling(self.config),
                                            self.collector.next_batch_id(), self._look_after_actors,
                                            self.val_settings))

    def _checkpoint(self, tag: str) -> bool:
        """Save; if a learner rank dies meanwhile the weights to save are gone: rebuild and skip it."""
        from learner.learner_group import LearnerGroupFailed

        try:
            self._count_wall_time()  # a checkpoint carries the segment's time so far: a resumed run adds to it
            # the sampler, the store's cursor and the groups admitted ahead, as of these weights (a rollback since
            # the step raised the floor; a step lost with the learner took groups)
            collector, state = self.collector, self.state
            state.sampler, state.store_cursor = collector.sampler_state(), collector.cursor.to_json()
            state.pending = collector.pending(state.version).to_json()
            with self.metrics.phase("checkpoint"):
                self.checkpoints.save(self.learners.group, self.state, tag)
                cache_occurrences.save(self.out, self.pool)
            publish_trained(self.out)
            return True
        except LearnerGroupFailed as exc:
            self.learners.rebuild(exc)
            self.console.print(f"[yellow]checkpoint {tag} skipped: its weights died with the learner[/]")
            return False

    def _count_wall_time(self) -> None:
        if self.segment_mark is not None:
            now = time.time()
            self.state.wall_seconds += now - self.segment_mark
            self.segment_mark = now

    def _count(self, key: str, amount: int = 1) -> None:
        if amount:
            self.state.faults[key] = self.state.faults.get(key, 0) + amount
            self.metrics.fault(key, amount)

    # -- finish -----------------------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Held-out evaluation of the best validated policy, its export, and the summary."""
        state = self.state
        self.chaos.stop()
        self.meters.check_heldout(state)  # a resumed segment with its cap spent stops before paying for it again
        self.learners.restore_tag = self.checkpoints.latest()  # the final step's weights: train() saved them last
        if state.best_step != -1:  # even the last step's: a learner rebuilt while saving it left older weights
            self.learners.restore_tag = "best"
            chosen = self.learners.run(lambda: self.checkpoints.load(self.learners.group, "best"))
            self.learners.run(self._publish)
            self.console.print(f"evaluating the best validated policy (step {chosen.step}, val {chosen.best_val:.3f})")
        elif state.evals:
            self.console.print("[yellow]no validated policy could be kept (the validation lines say why): "
                               "evaluating the last[/]")
        with Timer("heldout_evaluation", self.phases):
            heldout = self.evaluate(list(self.splits.heldout))
        report.warn_infra_errors(self.console, "held-out evaluation", heldout.infra_errors)
        with Timer("export", self.phases), signals_held():  # a stop waits for a whole policy/
            exported = self.learners.run(lambda: self.learners.group.export_hf(self.out, tokenizer_from=self.policy))
        card = card_of(self.config.reward)
        if card is not None:  # evaluation and serving read it: this policy takes a cost_quality setting
            self.out.write_text("policy", CARD_FILE, text=card.json())
        self._look_after_actors()
        summary = report.run_summary(self.config, self.state, heldout, self.splits.heldout, self.baselines, self.out,
                                     policy_dir=exported, engine_versions=self.engines.versions(allow_unavailable=True),
                                     chaos_kills=[f"{kind} {index}" for kind, index in self.chaos.kills],
                                     wall_seconds=time.time() - self.started, store=self.store_path,
                                     run_phases_s={name: round(s, 2) for name, s in self.phases.items()},
                                     **self.meters.summary(state, self.stopped))
        publish_trained(self.out)
        report.write_summary(self.out, summary)
        self.console.print(report.results_table(summary))
        self.console.print(f"summary: {self.out.path('summary.json')}; policy: {exported}; "
                           f"checkpoints: {self.out.path('checkpoints')}; rollouts: {self.store_path}")
        return summary

    def close(self) -> None:
        self.stack.close()

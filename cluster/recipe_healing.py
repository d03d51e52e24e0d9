"""How a training run heals itself, the part of cluster/grpo_recipe.py's ``GrpoRecipe`` that looks after its
actors: engines, rollout actors and pool actors restart (Ray ``max_restarts``) and are counted, an engine back
from a restart gets the current weights, a dead learner rank rebuilds the learner group from the newest
checkpoint, a collapsed format rolls the learners back, and a chaos monkey (``chaos``) kills actors on purpose.
A mixin: it works on the recipe's own state (its feed, engines, learners, collector and counters).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class Healing:
    def _start_fault_handling(self) -> None:
        from cluster.chaos import ChaosMonkey
        from cluster.restart_watch import RestartWatch

        targets: dict[str, Callable[[], list[Any]]] = {
            "rollout_actor": lambda: self.feed.actors, "engine": lambda: self.engines.replicas,
            "pool": lambda: list(self.pool.actors.values()), "learner": lambda: self.learners.group.ranks}
        self.watch = RestartWatch({kind: targets[kind] for kind in ("rollout_actor", "engine", "pool")})
        self.watch.look()
        self.chaos = ChaosMonkey(self.config.chaos, targets, log=self.console.print).start()
        self.stack.callback(self.chaos.stop)
        self.stack.callback(lambda: self.learners.shutdown())

    def _look_after_actors(self) -> None:
        """Engines that came back from a restart get the current weights; restarts are counted."""
        from learner.learner_group import LearnerGroupFailed

        self.metrics.queue(len(self.feed.running) + len(self.feed.retrying))
        for kind, count in self.watch.look().items():
            self._count(f"{kind}_restarts", count)
        self._count("rollout_requests_reissued", self.feed.counters.reissued - self.reissued_counted)
        self.reissued_counted = self.feed.counters.reissued
        try:
            repaired = self.learners.sync.repair(self.state.version)
        except LearnerGroupFailed as exc:  # the learner pushes the repair: rebuilding it publishes to all
            self.learners.rebuild(exc)
            return
        if repaired:
            self._count("engine_repairs", len(repaired))
            self.console.print(f"[yellow]engine replica(s) {repaired} restarted: given policy v{self.state.version}[/]")

    def _learners_rebuilt(self, tag: str | None, cause: Exception) -> None:
        """New learners' weights are a new version for the engines."""
        self._publish()
        self.collector.raise_floor(self.state.version)  # groups sampled by the lost weights are not trained
        self.console.print(f"[yellow]a learner rank died ({cause}); rebuilt the learner group from "
                           f"{tag or 'the warm-start policy'}, now policy v{self.state.version}[/]")

    def _roll_back(self) -> None:
        """Restore the newest checkpoint's weights and optimizer; the step count, data and history move on."""
        if self.state.rollbacks >= self.config.train.max_rollbacks:
            raise RuntimeError(f"the sampled format rate collapsed {self.state.rollbacks + 1} times; lower "
                               "learner.lr or lengthen the warmup")
        tag = self.checkpoints.latest()
        self.learners.run(lambda: self.checkpoints.load(self.learners.group, tag))
        self.state.rollbacks += 1
        self.state.low_format_steps = 0
        self.learners.run(self._publish)
        self.collector.raise_floor(self.state.version)  # groups sampled by the collapsed policy are not trained
        self.console.print(f"[yellow]sampled format rate stayed under the floor: rolled back to {tag}[/]")


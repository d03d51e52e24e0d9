"""A RouterDC-style router (Chen et al., NeurIPS 2024): a query encoder and one learned embedding per
worker, trained with two contrastive losses; a question goes to the worker whose embedding is most similar.

- sample-LLM loss: for each training question, pull its encoding towards the embeddings of workers that
  answered it right and away from those that did not:
  ``-log exp(s+/t) / (exp(s+/t) + sum_neg exp(s-/t))`` averaged over positives;
- sample-sample loss: questions are clustered (k-means on their embeddings); each question is pulled
  towards another of its cluster and away from one of each other cluster, which keeps the encoder stable.

A fifth of the training questions is kept aside to pick the epoch (every ``CHECK_EVERY``) whose routing
is most accurate on them: with one noisy verdict per question the encoder otherwise learns the noise.

Deviations, for a CPU box with no model hub: the encoder is a trainable two-layer head over frozen
all-MiniLM-L6-v2 embeddings (RouterDC fine-tunes mDeBERTa-v3-base); scores are the verdicts of one
answer per worker and question (RouterDC scores several samples), so with binary scores its top-K
positives and bottom-H negatives (K = H = 3 of ~7 LLMs) become all right and all wrong workers. Cost:
one call per question.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any, Optional

import numpy as np

from conductor.baselines import SOLVE_ALONE
from conductor.evaluation.fixed_methods import run_workflow
from conductor.evaluation.method import MethodContext
from conductor.evaluation.outcome import Attempt
from conductor.evaluation.registry import MethodSpec
from conductor.evaluation.routing_table import RoutingTable, shared_routing_table
from conductor.tasks.task import Task
from conductor.workflow import Step, Workflow

CLUSTERS = 5
TEMPERATURE, SAMPLE_SAMPLE_WEIGHT = 0.1, 1.0
EPOCHS, CHECK_EVERY, LEARNING_RATE, WIDTH = 300, 10, 1e-3, 128


def kmeans(points: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Cluster labels of ``points`` (scikit-learn's k-means; at most one cluster per point)."""
    from sklearn.cluster import KMeans

    return KMeans(n_clusters=min(k, len(points)), n_init=4, random_state=seed).fit_predict(points)


def train_router_dc(table: RoutingTable, seed: int = 0) -> Any:
    """The trained (encoder, worker embeddings), as a callable: embeddings -> worker scores."""
    import torch

    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(table))
    held, fit = order[:len(table) // 5], order[len(table) // 5:]
    queries = torch.tensor(table.embeddings[fit])
    workers = table.correct.shape[1]
    encoder = torch.nn.Sequential(torch.nn.Linear(queries.shape[1], WIDTH), torch.nn.GELU(),
                                  torch.nn.Linear(WIDTH, WIDTH))
    worker_embeddings = torch.nn.Parameter(torch.randn(workers, WIDTH) * 0.1)
    optimizer = torch.optim.AdamW(list(encoder.parameters()) + [worker_embeddings], lr=LEARNING_RATE)
    clusters = kmeans(table.embeddings[fit], CLUSTERS, seed)
    right = torch.tensor(np.nan_to_num(table.correct[fit], nan=0.0) == 1)
    wrong = torch.tensor(table.correct[fit] == 0)
    held_correct = np.nan_to_num(table.correct[held], nan=0.0)

    def scores(embeddings: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            encoded = torch.nn.functional.normalize(encoder(torch.tensor(embeddings)), dim=-1)
            return (encoded @ torch.nn.functional.normalize(worker_embeddings, dim=-1).T).numpy()

    def held_out_accuracy() -> float:
        chosen = np.argmax(scores(table.embeddings[held]), axis=1)
        return float(held_correct[np.arange(len(held)), chosen].mean()) if len(held) else 0.0

    best = (-1.0, None)
    usable = right.any(1) & wrong.any(1)  # a question every worker got right (or wrong) says nothing
    for epoch in range(EPOCHS):
        if epoch % CHECK_EVERY == 0:
            accuracy = held_out_accuracy()
            if accuracy > best[0]:
                best = (accuracy, copy.deepcopy((encoder.state_dict(), worker_embeddings.detach().clone())))
        encoded = torch.nn.functional.normalize(encoder(queries), dim=-1)
        similarity = encoded @ torch.nn.functional.normalize(worker_embeddings, dim=-1).T / TEMPERATURE
        negatives = torch.logsumexp(similarity.masked_fill(~wrong, -1e4), dim=1, keepdim=True)
        per_pair = torch.logaddexp(similarity, negatives) - similarity  # -log softmax of the positive
        mask = right & usable[:, None]
        loss = (per_pair * mask).sum() / mask.sum().clamp(min=1)
        loss = loss + SAMPLE_SAMPLE_WEIGHT * _sample_sample_loss(encoded, clusters, rng)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    if held_out_accuracy() <= best[0]:
        encoder.load_state_dict(best[1][0])
        worker_embeddings.data.copy_(best[1][1])
    return scores


def _sample_sample_loss(encoded: Any, clusters: np.ndarray, rng: np.random.Generator) -> Any:
    import torch

    groups = {c: np.flatnonzero(clusters == c) for c in np.unique(clusters)}
    if len(groups) < 2:
        return torch.zeros(())
    anchors, positives, negatives = [], [], []
    for q, c in enumerate(clusters):
        if len(groups[c]) < 2:
            continue
        anchors.append(q)
        positives.append(rng.choice(groups[c][groups[c] != q]))
        negatives.append([rng.choice(members) for other, members in groups.items() if other != c])
    if not anchors:
        return torch.zeros(())
    anchor = encoded[anchors]
    logits = torch.cat([(anchor * encoded[positives]).sum(-1, keepdim=True),
                        torch.einsum("qd,qnd->qn", anchor, encoded[torch.tensor(negatives)])], dim=1) / TEMPERATURE
    return -torch.log_softmax(logits, dim=1)[:, 0].mean()


@dataclass
class RouterDC:
    name: str
    context: MethodContext
    _scores: Optional[Any] = None
    _choice: dict[str, int] = field(default_factory=dict)

    async def prepare(self, tasks: list[Task], repeats: int, limit: asyncio.Semaphore) -> None:
        from conductor.evaluation.embeddings import embed

        table = await shared_routing_table(self.context, limit)
        scores = await asyncio.to_thread(train_router_dc, table, self.context.seed)
        embeddings = await asyncio.to_thread(embed, [t.prompt for t in tasks])
        self._choice = {t.id: int(np.argmax(row)) for t, row in zip(tasks, scores(embeddings))}

    async def attempt(self, task: Task, repeat: int) -> Attempt:
        return await run_workflow(self.context, Workflow((Step(self._choice[task.id], SOLVE_ALONE, ()),)), task)


SPECS = (MethodSpec("router_dc", RouterDC, trained=True, routing_table=True),)

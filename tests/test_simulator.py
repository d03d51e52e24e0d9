import asyncio

import openai
import pytest

from conductor.config import SimulatorConfig
from conductor.simulator.oracle import Oracle
from conductor.simulator.preset_file import read_preset_file
from conductor.simulator.server import SimulatorServer
from conductor.verifiers.verify import verify
from tests.support.sim_helpers import accuracy_by, answers, ask

TOY = SimulatorConfig(preset="toy", port=0, latency_scale=0, toy_items_per_domain=200)


@pytest.fixture(scope="module")
def toy_sim():
    with SimulatorServer(TOY) as sim:
        yield sim


def test_toy_specialists_show_the_configured_gap(toy_sim):
    tasks = list(toy_sim.state.preset.tasks)
    workers = [w.name for w in toy_sim.state.preset.workers]
    acc = accuracy_by(toy_sim, tasks, workers)
    own = {"toy-arith": "arithmetic", "toy-reverse": "reverse", "toy-sort": "sort"}
    for worker, domain in own.items():
        assert acc[(worker, domain)] == pytest.approx(0.9, abs=0.01)
        for other in set(own.values()) - {domain}:
            assert acc[(worker, other)] == pytest.approx(0.2, abs=0.01)
    best_single = max(sum(acc[(w, d)] for d in own.values()) / 3 for w in workers)
    perfect_router = sum(acc[(w, d)] for w, d in own.items()) / 3
    assert best_single == pytest.approx(0.433, abs=0.01) and perfect_router == pytest.approx(0.9, abs=0.01)


def test_errors_correlate_across_workers(toy_sim):
    tasks = [t for t in toy_sim.state.preset.tasks if t.domain == "reverse"]
    oracle = toy_sim.state.oracle
    outside = [w for w in ("toy-arith", "toy-sort")]
    both = sum(oracle.base_correct[(outside[0], t.id)] and oracle.base_correct[(outside[1], t.id)] for t in tasks)
    assert both / len(tasks) > 0.2 * 0.2 * 1.5  # shared difficulty: more joint successes than independence


def test_context_boosts_and_misleads(toy_sim):
    tasks = [t for t in toy_sim.state.preset.tasks if t.domain == "arithmetic"]
    right = [("Solve it.", f"#### {t.answer}") for t in tasks]
    wrong = [("Solve it.", f"#### {t.meta['wrong_answers'][0]}") for t in tasks]
    plain = answers(toy_sim, [("toy-reverse", ask(t)) for t in tasks])
    helped = answers(toy_sim, [("toy-reverse", ask(t, [c])) for t, c in zip(tasks, right)])
    misled = answers(toy_sim, [("toy-arith", ask(t, [c])) for t, c in zip(tasks, wrong)])

    def rate(texts):
        return sum(verify(t, x).correct for t, x in zip(tasks, texts)) / len(tasks)

    assert rate(plain) == pytest.approx(0.2, abs=0.01)
    assert rate(helped) == pytest.approx(0.2 + 0.8 * 0.5, abs=0.08)  # boost 0.5
    assert rate(misled) == pytest.approx(0.9 * (1 - 0.3), abs=0.08)  # mislead 0.3


def test_answers_are_reproducible_and_seeded(toy_sim):
    tasks = list(toy_sim.state.preset.tasks)[:60]
    requests = [("toy-sort", ask(t)) for t in tasks]
    assert answers(toy_sim, requests) == answers(toy_sim, requests)
    with SimulatorServer(TOY.model_copy(update={"seed": 1})) as other:
        assert answers(other, requests) != answers(toy_sim, requests)


def test_openai_client_sees_a_well_formed_api(toy_sim):
    task = toy_sim.state.preset.tasks[0]

    async def main():
        client = openai.AsyncOpenAI(base_url=toy_sim.base_url, api_key="unused", max_retries=0)
        models = [m.id for m in (await client.models.list()).data]
        full = await client.chat.completions.create(model="toy-arith", messages=ask(task))
        short = await client.chat.completions.create(model="toy-arith", messages=ask(task), max_tokens=2)
        unknown = await client.chat.completions.create(model="toy-arith", messages=[{"role": "user", "content": "hi"}])
        with pytest.raises(openai.BadRequestError):
            await client.chat.completions.create(model="toy-arith", messages="not a list")
        await client.close()
        return models, full, short, unknown

    models, full, short, unknown = asyncio.run(main())
    assert models == ["toy-arith", "toy-reverse", "toy-sort"]
    assert full.choices[0].finish_reason == "stop" and full.usage.total_tokens > full.usage.completion_tokens > 0
    assert short.choices[0].finish_reason == "length" and short.usage.completion_tokens == 2
    assert "could not identify" in unknown.choices[0].message.content


@pytest.mark.slow
def test_paper7_served_answers_are_what_the_calibrated_oracle_decides(shared_data):
    """Over HTTP and the real verifiers, each worker's answer on a sample of each domain is right exactly
    when the oracle's calibrated margin says so. The full-size accuracies against the paper's table are
    asserted in-process by tests/test_evaluate.py::test_paper7_baselines_reproduce_the_papers_table."""
    config = SimulatorConfig(preset="paper-7", port=0, latency_scale=0, data_dir=str(shared_data), mmlu_items=600)
    with SimulatorServer(config) as sim:
        tasks = list(sim.state.preset.tasks)
        assert len(tasks) == 500 + 600 + 164
        sample = [t for domain in ("math500", "mmlu", "code") for t in tasks if t.domain == domain][::21]
        workers = [w.name for w in read_preset_file("paper-7").workers]
        texts = answers(sim, [(w, ask(t)) for w in workers for t in sample])
    oracle = Oracle(sim.state.preset, config)
    pairs = [(w, t) for w in workers for t in sample]
    assert {t.domain for t in sample} == {"math500", "mmlu", "code"}
    mismatches = [(w, t.id) for (w, t), text in zip(pairs, texts)
                  if verify(t, text).correct != oracle.base_correct[(w, t.id)]]
    assert not mismatches

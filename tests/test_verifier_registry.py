"""The verifier registry: the built-in kinds and what config validation reads from them, that the kinds load
lazily and without import circles, and that a verifier added to the registry is used everywhere a kind is
(config, prompts, scoring, answer keys, the simulator's wording)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import conductor
from conductor.config import DatasetSpec
from conductor.simulator.presets import SimWorker
from conductor.simulator.render import own_value, render_answer
from conductor.tasks import load_tasks
from conductor.verifiers import registry
from conductor.verifiers.answer_key import answer_key, final_value, is_right
from conductor.verifiers.registry import SimulatedAnswer, VerifierSpec
from conductor.verifiers.verdict import Verdict
from conductor.verifiers.verify import verify

BUILT_IN = ("math", "choice", "number", "text", "exact", "humaneval", "mbpp", "lcb_stdin", "lcb_functional",
            "python", "judge", "http")


def test_the_built_in_kinds_and_what_a_field_map_must_supply_for_each():
    assert registry.names() == BUILT_IN
    assert {name for name in BUILT_IN if registry.get(name).reference} == {"math", "choice", "number", "text", "exact"}
    assert {name: registry.get(name).meta for name in BUILT_IN if registry.get(name).meta} == {
        "choice": ("num_options",), "humaneval": ("prompt", "test", "entry_point"), "mbpp": ("tests", "test_imports"),
        "lcb_stdin": ("tests",), "lcb_functional": ("tests", "func_name", "starter_code")}
    assert all(registry.get(name).instruction for name in BUILT_IN)


def test_an_unknown_name_is_refused_naming_the_known_ones():
    with pytest.raises(registry.UnknownVerifier, match=r"'fuzzy' is not a verifier; known: math, choice, number"):
        registry.get("fuzzy")
    with pytest.raises(ValueError, match="is registered twice"):
        registry.register(registry.get("math"))


_PROBE = """
import json, sys
import {first}
loaded = sorted(m for m in sys.modules if m.startswith("conductor.verifiers.kinds."))
from conductor.verifiers import registry
print(json.dumps([loaded, list(registry.names()), registry.__file__]))
"""


@pytest.mark.parametrize("first", ["conductor.verifiers.registry", "conductor.config", "conductor.tasks",
                                   "conductor.verifiers.kinds.code", "conductor.verifiers.kinds.choice"])
def test_kinds_load_on_the_first_lookup_and_any_import_order_works(first):
    root = Path(conductor.__file__).parents[1]  # this checkout's package, not whichever one is installed
    out = subprocess.run([sys.executable, "-c", _PROBE.format(first=first)], capture_output=True, text=True,
                         check=True, cwd=root).stdout
    loaded, names, where = json.loads(out)
    assert names == list(BUILT_IN) and where == registry.__file__
    if not first.startswith("conductor.verifiers.kinds"):
        assert loaded == []  # importing the registry, the config or the tasks imports no verifier


def _yes_no(task, response, settings):
    said = response.strip().split()[-1].strip(".").lower()
    return Verdict(said == task.answer, said)


@pytest.fixture
def yes_no(monkeypatch):
    """A verifier added beside the built-ins for one test (the registry is restored after it)."""
    monkeypatch.setattr(registry._REGISTRY, "specs", dict(registry._REGISTRY.all()))
    return registry.register(VerifierSpec(
        "yes_no", _yes_no, lambda task, text: text.strip().split()[-1].strip(".") if text.strip() else None,
        lambda task, value: value.lower(), "End with yes or no.",
        simulated=SimulatedAnswer(lambda value: f"So: {value}.", lead="Thinking it over.")))


def test_a_registered_verifier_is_used_by_config_prompts_scoring_keys_and_the_simulator(tmp_path, yes_no):
    path = tmp_path / "facts.jsonl"
    path.write_text(json.dumps({"q": "Is water wet?", "a": "yes", "wrong_answers": ["no"]}) + "\n")
    spec = DatasetSpec(path=str(path), fields={"question": "q", "answer": "a"}, domain="facts", verifier="yes_no",
                       meta=["wrong_answers"])
    [task] = load_tasks(spec)
    assert task.verifier == "yes_no" and task.prompt == "Is water wet?\n\nEnd with yes or no."
    assert verify(task, "I think so. yes").correct and not verify(task, "no").correct
    text = render_answer(task, own_value(task, False, 0.3), SimWorker("w", "d", {}), "solve", 0.3)
    assert text == "Thinking it over.\nSo: no."
    assert final_value(task, text) == "no" and answer_key(task, "YES") == "yes"
    assert is_right(task, "Yes") and not is_right(task, "no")

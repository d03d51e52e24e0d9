"""The evaluation-method registry: the built-in names and their forms, that the method modules load lazily,
Ray-free and without import circles, and that a method registered at run time is built and accepted by the
config like a built-in one."""

import ast
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import conductor
from conductor.config import WorkerSpec
from conductor.config_loader import ConfigError, load_config
from conductor.evaluation import registry
from conductor.evaluation.method import MethodContext
from conductor.evaluation.registry import MethodSpec, build_methods
from conductor.roster import Roster

BUILT_IN = ("single", "self_reflection", "consensus", "solve_check", "random", "moa", "smoothie_dependent",
            "smoothie_independent", "router_dc", "masrouter", "rllib_router", "conductor", "conductor_recursive",
            "oracle", "domain_table")
ROOT = Path(conductor.__file__).parents[1]  # this checkout's package, not whichever one is installed
ROSTER = Roster.full([WorkerSpec(id=w, description="a worker") for w in ("a", "b", "c")])


def test_the_built_in_methods_and_their_forms():
    assert registry.names() == BUILT_IN
    spec = registry.get
    assert {n for n in BUILT_IN if spec(n).workers == "each"} == {"single", "self_reflection", "consensus"}
    assert {n for n in BUILT_IN if spec(n).workers == "pair"} == {"solve_check"}
    assert {n for n in BUILT_IN if spec(n).trained} == {"router_dc", "masrouter", "rllib_router"}
    assert {n for n in BUILT_IN if spec(n).derived} == {"oracle", "domain_table"}
    assert registry.is_derived("oracle") and not registry.is_derived("single:a")
    assert not registry.is_derived("conductor_cost")  # a checkpoint's row, named by evaluate.conductor_name


def test_names_expand_per_worker_and_a_derived_row_brings_what_it_needs():
    context = MethodContext(ROSTER, executor=None)
    built = build_methods(["single:b", "solve_check:c>a", "moa", "oracle", "self_reflection"], context)
    # the oracle is over every single worker, not only single:b, which was named (as a domain table names its
    # rows): an oracle over some of them, reported as the oracle, understated it
    assert [m.name for m in built] == ["single:b", "solve_check:c>a", "moa", "self_reflection:a",
                                       "self_reflection:b", "self_reflection:c", "single:a", "single:c"]
    assert (built[1].solver, built[1].checker) == (2, 0)
    assert [m.name for m in build_methods(["oracle"], context)] == ["single:a", "single:b", "single:c"]
    with pytest.raises(ValueError, match=r"method 'single:d': no worker 'd' in the pool \(a, b, c\)"):
        build_methods(["single:d"], context)
    with pytest.raises(ValueError, match=r"trained routers \(router_dc, masrouter, rllib_router\) learn on"):
        build_methods(["rllib_router"], context)


def test_a_method_reads_its_own_settings_from_the_context():
    settings = load_config(None, ["evaluate.rllib_iterations=6"]).evaluate
    context = MethodContext(ROSTER, executor=None, train_tasks=(None,), settings=settings)
    [router] = build_methods(["rllib_router"], context)
    assert type(router).__module__ == "conductor.evaluation.rllib_router" and router.iterations == 6


def test_the_config_checks_method_names_against_the_registry_naming_the_setting():
    assert load_config(None, ["evaluate.methods=[single:a, solve_check:a>b, oracle]"]).evaluate.methods[1] == \
        "solve_check:a>b"
    for methods, message in [("[single, nonsense]", "evaluate.methods.1: Value error, unknown method 'nonsense'; "
                                                    "known: single, self_reflection, consensus"),
                             ("[moa:a]", "evaluate.methods.0: Value error, method 'moa' chooses from the whole "
                                         "pool; it takes no ':<worker>'"),
                             ("[solve_check:a]", "method 'solve_check' takes two workers in order")]:
        with pytest.raises(ConfigError, match=message.replace("(", r"\(").replace(")", r"\)")):
            load_config(None, [f"evaluate.methods={methods}"])


_PROBE = """
import json, sys
import {first}
from conductor.evaluation import registry
before = sorted(m for m in registry.BUILTIN_MODULES if m in sys.modules)
names = list(registry.names())
after = sorted(m for m in registry.BUILTIN_MODULES if m in sys.modules)
print(json.dumps([before, after, names, "ray" in sys.modules, registry.__file__]))
"""


@pytest.mark.parametrize("first", ["conductor.evaluation.method", "conductor.evaluation.registry",
                                   "conductor.config", "conductor.evaluation.rllib_router",
                                   "conductor.evaluation.fixed_methods"])
def test_method_modules_load_on_the_first_lookup_in_any_import_order_and_without_ray(first):
    out = subprocess.run([sys.executable, "-c", _PROBE.format(first=first)], capture_output=True, text=True,
                         check=True, cwd=ROOT).stdout
    before, after, names, ray, where = json.loads(out)
    assert names == list(BUILT_IN) and after == sorted(registry.BUILTIN_MODULES) and where == registry.__file__
    assert not ray  # the RLlib router imports Ray only when it trains
    if first in ("conductor.evaluation.method", "conductor.evaluation.registry", "conductor.config"):
        assert before == []  # the interface, the registry and the config import no method


def _imports(path: Path, module: str, modules: set[str]) -> set[str]:
    """The modules of ``modules`` that ``path`` imports, at its top or inside functions (an import inside a
    function still closes a circle when it runs); those under ``if TYPE_CHECKING:`` never run, so not them."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for statement in child.orelse:
                    visit(statement)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                package = module.split(".")[: len(module.split(".")) - child.level] if child.level else []
                base = ".".join([*package, child.module] if child.module else package)
                found.update([base, *(f"{base}.{alias.name}" for alias in child.names)])
            visit(child)

    visit(ast.parse(path.read_text()))
    return {name for name in found if name in modules and name != module}


def test_no_import_circle_runs_through_the_evaluation_package():
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in (ROOT / "conductor").rglob("*.py")}
    graph = {name: _imports(path, name, set(files)) for name, path in files.items()}
    assert "conductor.evaluation.fixed_methods" in graph["conductor.evaluation.routing_table"]  # inside a function

    def circle_from(start: str) -> list[str]:
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph[node]:
                if nxt == start:
                    return [*path, start]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
        return []

    circles = [circle_from(m) for m in graph if m.startswith("conductor.evaluation")]
    assert not [c for c in circles if c], [" -> ".join(c) for c in circles if c]


@dataclass
class FirstWorkerTwice:
    name: str
    context: MethodContext
    worker: int


@pytest.fixture
def plugin(monkeypatch):
    """A method added beside the built-ins for one test (the registry is restored after it)."""
    monkeypatch.setattr(registry._REGISTRY, "specs", dict(registry._REGISTRY.all()))
    return registry.register(MethodSpec("twice", FirstWorkerTwice, "each"))


def test_a_registered_method_is_built_and_accepted_by_the_config(plugin):
    assert registry.names()[-1] == "twice"
    assert load_config(None, ["evaluate.methods=[twice:b, oracle]"]).evaluate.methods == ["twice:b", "oracle"]
    built = build_methods(["twice"], MethodContext(ROSTER, executor=None))
    assert [(m.name, m.worker) for m in built] == [("twice:a", 0), ("twice:b", 1), ("twice:c", 2)]
    with pytest.raises(ValueError, match="'twice' is registered twice"):
        registry.register(plugin)
    with pytest.raises(ValueError, match="cannot contain ':'"):
        registry.register(MethodSpec("a:b", FirstWorkerTwice))

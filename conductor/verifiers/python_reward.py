"""A user's own reward: a Python function named ``module:function`` in a dataset entry
(``verifier: python``, ``reward_function: my_rewards:score``), imported from the user's code; or named by
its file, ``path/to/my_rewards.py:score`` (a relative path is from the working directory; the file's
folder is not put on ``sys.path``, so it imports its neighbours only if they are importable anyway).

The contract::

    def score(task, response: str) -> float | None

``task`` is a read-only mapping: ``id``, ``domain``, ``question`` (the prompt as the workers got it, the
dataset's answer-format instruction included), ``answer`` (the reference; "" where the map names none)
and ``meta`` (the entry's meta columns, a copy). ``response`` is the episode's final answer, never empty.
The return value is the verdict: a score in [0, 1] (a bool, an int or a numpy scalar counts: True is 1.0). ``None`` says
"cannot judge" (e.g. a judge service that is down). None, raising, NaN, a non-number or a number outside
[0, 1] makes the episode an infrastructure error: unscored, counted, out of the accuracy denominator
(conductor/episode_score.py), and the run goes on. Only the exception's type and the first
``MESSAGE_CHARS`` characters of its message are kept (records, logs).

The function runs in every process that scores (the driver for evaluation, each rollout actor), several
calls at once, so it must be thread-safe. Each call runs on a thread of the reward's own, at most
``verifier.python_reward_threads`` of them per reward and process (conductor/verifiers/bounded_calls.py), and
gets ``verifier.python_reward_timeout_s``: past it the episode is an infrastructure error and the run goes
on. Python cannot stop a thread, so the late call runs on in the background, its result dropped, holding
its thread until it returns; a function that hangs for good holds them all at last, and from then each call
is an infrastructure error after waiting ``python_reward_timeout_s`` for a free thread ("threads busy"),
never a scorer's thread held. It is found by name in each
process (``resolve``), never pickled: on a Ray cluster ship the module with the job, in the directory
``ray job submit --working-dir .`` uploads or under the runtime env's ``py_modules``. A config naming one that
does not import, or cannot take (task, response), fails at load naming the setting (``check_reference``);
a rollout actor that cannot import it fails when it starts (``preload``), not with every episode unscored.

How a score becomes the reward (conductor/rewards.py): ``wrong + score * (correct - wrong)``, linear, so 0
and 1 are the built-ins' wrong and correct, the order format_error <= wrong <= reward <= correct holds and
the cost penalties and their floor apply as for any answer. For accuracy a score of 0.5 or more counts as
correct: the accuracy figures stay a share of questions, comparable with the built-in verifiers', while
the reward keeps the whole fraction GRPO learns from.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import logging
import math
import numbers
import sys
from collections.abc import Callable, Iterable, Mapping
from copy import deepcopy
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Optional

from conductor.per_process import PerProcess
from conductor.verifiers.bounded_calls import BoundedCalls, CallTimeout, Saturated
from conductor.verifiers.text_match import extract_answer
from conductor.verifiers.verdict import Verdict

if TYPE_CHECKING:
    from conductor.config import VerifierConfig
    from conductor.tasks.task import Task

CORRECT_AT = 0.5  # a score at or above this counts as correct for accuracy
MESSAGE_CHARS = 200  # of a raising reward's message, kept in the record and the log
log = logging.getLogger(__name__)

_functions: PerProcess[str, Callable[..., Any]] = PerProcess()
_calls: PerProcess[str, BoundedCalls] = PerProcess()  # each reward's own threads, made at its first call
_logged: set[tuple[str, str]] = set()  # (reference, problem kind) already logged by this process


class RewardImportError(ValueError):
    """A reference that does not name an importable function taking (task, response)."""


def split_reference(reference: str) -> tuple[str, str]:
    """``"pkg.module:function"`` -> ("pkg.module", "function"); ``"path/to/rewards.py:function"`` -> (the
    path, "function"). The function part may be dotted (Class.method)."""
    module, sep, name = reference.rpartition(":")
    from_file = module.endswith(".py")
    parts = [*name.split("."), *([] if from_file else module.split("."))]
    if not sep or not module or not all(part.isidentifier() for part in parts):
        raise RewardImportError(f"{reference!r} is not 'module:function' or 'path/to/file.py:function' "
                                "(e.g. 'my_rewards:score')")
    return module, name


def _load_module(module_name: str) -> Any:
    """A module by name from sys.path, or a .py file by its path (relative: to the working directory, which
    on a Ray cluster is the job's uploaded working_dir in every actor)."""
    if not module_name.endswith(".py"):
        return importlib.import_module(module_name)
    path = Path(module_name).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no file {module_name} (from {Path.cwd()})")
    unique = "conductor_reward_" + hashlib.blake2b(str(path).encode(), digest_size=6).hexdigest()
    module = sys.modules.get(unique)
    if module is None:
        spec = importlib.util.spec_from_file_location(unique, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[unique] = module  # as import does: a module that looks itself up while it runs (a dataclass)
        try:
            spec.loader.exec_module(module)
        except BaseException:
            del sys.modules[unique]  # a module that failed is tried again, not half-used
            raise
    return module


def _import(reference: str) -> Callable[..., Any]:
    module_name, name = split_reference(reference)
    try:
        target: Any = _load_module(module_name)
    except (Exception, SystemExit) as exc:  # the user's module: any error at import (a missing dependency, sys.exit)
        raise RewardImportError(f"cannot import {module_name!r}: {_describe(exc)}") from None
    for part in name.split("."):
        try:
            target = getattr(target, part)
        except AttributeError:
            raise RewardImportError(f"module {module_name!r} has no {name!r}") from None
    if not callable(target):
        raise RewardImportError(f"{reference!r} is not callable (it is of type {type(target).__name__})")
    return target


def check_reference(reference: str) -> str:
    """At config load: the function imports and can be called as ``f(task, response)`` (pydantic names the
    setting in the message). Returns the reference unchanged."""
    function = _import(reference)
    if inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function):
        raise RewardImportError(f"{reference!r} is async: a reward function is called in a thread and must return "
                                "its score (wrap it: def score(task, response): return asyncio.run(...))")
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):  # some builtins have no signature: nothing to check before a call
        return reference
    try:
        signature.bind(None, "")
    except TypeError as exc:
        raise RewardImportError(f"{reference!r} cannot be called as f(task, response): {exc}") from None
    return reference


def resolve(reference: str) -> Callable[..., Any]:
    """The function, imported once per process."""
    return _functions.get(reference, lambda: _import(reference))


def preload(references: Iterable[str]) -> None:
    """Import every named reward in this process now (a rollout actor at start): a module the job did not
    ship fails here, naming it, rather than leaving every episode unscored."""
    for reference in references:
        try:
            resolve(reference)
        except RewardImportError as exc:
            raise RewardImportError(f"reward function {reference!r} in this process: {exc} (ship the module "
                                    "with the job: runtime_env working_dir or py_modules)") from None


def task_view(task: Task) -> Mapping[str, Any]:
    return MappingProxyType({"id": task.id, "domain": task.domain, "question": task.prompt, "answer": task.answer,
                             "meta": MappingProxyType(deepcopy(task.meta))})


def check(task: Task, response: str, settings: VerifierConfig) -> Verdict:
    """The ``python`` kind's verifier: the task's reward function on the response; never raises."""
    reference = task.reward_function
    if reference is None:
        return Verdict(False, infra_error=f"task {task.id}: verifier python without a reward_function")
    extracted = extract_answer(response)
    timeout_s = settings.python_reward_timeout_s
    try:
        value = _threads(reference, settings).call(resolve(reference), task_view(task), response, timeout_s=timeout_s)
    except CallTimeout:
        return _unjudged(reference, "timeout", f"gave no score within {timeout_s:g} s "
                         "(verifier.python_reward_timeout_s)", extracted)
    except Saturated as exc:
        return _unjudged(reference, "saturated", f"was not called: {exc} (verifier.python_reward_threads)",
                         extracted)
    except (Exception, SystemExit) as exc:  # the user's code: whatever it raises, sys.exit too
        return _unjudged(reference, type(exc).__name__, f"raised {_describe(exc)}", extracted)
    problem = _problem(value)
    if problem is not None:
        return _unjudged(reference, problem, problem, extracted)
    score = float(value)
    return Verdict(score >= CORRECT_AT, extracted, f"score {score:g}", score=score)


def _threads(reference: str, settings: VerifierConfig) -> BoundedCalls:
    return _calls.get(reference, lambda: BoundedCalls(settings.python_reward_threads, f"reward {reference}"))


def _problem(value: Any) -> Optional[str]:
    """Why ``value`` is not a score in [0, 1], or None."""
    if value is None:
        return "returned None (cannot judge)"
    if not _is_number(value):
        return f"returned a {type(value).__name__}, not a number in [0, 1]"
    try:
        number = float(value)
    except OverflowError:  # an int past any float (10**400)
        return "returned a number outside [0, 1]"
    if math.isnan(number):
        return "returned NaN"
    if not 0.0 <= number <= 1.0:
        return f"returned {number:g}, outside [0, 1]"
    return None


def _is_number(value: Any) -> bool:
    """A real number, a bool, or a numpy scalar of one (``np.mean(hits)``, ``np.mean(hits) > 0.5``)."""
    if isinstance(value, numbers.Real):
        return True
    dtype = getattr(value, "dtype", None)
    return getattr(value, "shape", None) == () and getattr(dtype, "kind", None) in ("b", "i", "u", "f")


def _unjudged(reference: str, kind: str, reason: str, extracted: Optional[str]) -> Verdict:
    if (reference, kind) not in _logged:  # once per kind of problem: a broken reward fails on every episode
        _logged.add((reference, kind))
        log.warning("reward function %s %s; such episodes are infrastructure errors", reference, reason)
    return Verdict(False, extracted, infra_error=f"reward function {reference} {reason}")


def _describe(exc: BaseException) -> str:
    message = str(exc)
    if len(message) > MESSAGE_CHARS:
        message = message[:MESSAGE_CHARS] + "..."
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__

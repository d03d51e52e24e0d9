"""Calls into a candidate's process from the judge's, and back: plain data only, one JSON line each.

A code check runs two sandboxed processes (code_harness.py): the candidate's loads the answer and ``serve``s
calls to the names it defines; the judge's runs the dataset's tests with those names bound to ``Remote``
proxies, and alone prints the pass marker. The candidate never sees the tests' expected values or the marker,
and the judge compares values it built itself.

So what crosses must be data, not objects: an object "equal to everything", or a ``str`` subclass that lies in
``__eq__``, is a value only inside its own process. ``encode`` turns the builtin containers and scalars (their
subclasses as the builtin they extend; numpy values by ``tolist()``) and a few standard-library value types
(``Decimal``, ``Fraction``, ``datetime``'s, ``deque``, ``Counter``, ``OrderedDict``, a namedtuple) into tagged
JSON; ``decode`` builds only those exact types back and refuses anything else. A generator or other iterator
crosses as its items (at most ``MAX_ITEMS``) and is rebuilt as an iterator, so a test's ``list(f(x))`` reads
the same. Any other object (a ``re.Match``, an instance of the candidate's class) crosses as an ``Opaque``:
its truth and its repr, equal to nothing but itself, which is no more than ``True`` or ``False`` would say. A
function cannot cross: that call raises ``TypeError``. An exception in the candidate is raised in the judge as
the nearest builtin in its ancestry, with its arguments (``RuntimeError`` where there is none), so a test that
expects a ``ValueError`` still holds.

What data alone cannot carry: a test no longer sees its arguments changed in place, identity (``is``) between
an argument and a result, instances of the candidate's own classes (only their truth), functions passed either
way, or a module-level value changed after the names were bound (bound once, at the start).

Both programs carry this file's source (code_harness.py embeds it), so it imports nothing outside the standard
library and has no ``from __future__`` line.
"""

import builtins
import collections
import datetime
import decimal
import fractions
import importlib
import json
import numbers
import os
import sys

MAX_ITEMS = 1_000_000  # items taken from one iterator
MAX_DEPTH = 200  # nesting of containers
MAX_REPLY_BYTES = 64 << 20  # one reply the judge reads
CANDIDATE_ENDED = "the candidate's process ended, or sent a reply over the cap"
_channel = None  # the judge's (requests, replies) files, once connected


def serve(namespace, channel):
    """The candidate's side: answer each request on ``channel`` (read fd, write fd) until the judge closes it.
    A request names a value in ``namespace``: describe it, call it, or call a method of a new instance."""
    requests, replies = os.fdopen(channel[0], "rb"), os.fdopen(channel[1], "wb")
    for line in requests:
        try:
            reply = _answer(namespace, json.loads(line))
        except BaseException as exc:  # the candidate's own failure, SystemExit included: the judge's test fails
            reply = {"error": [[kind.__name__ for kind in type(exc).__mro__], _said(exc), _args(exc)]}
        replies.write(dumps(reply))
        replies.flush()


def connect(channel):
    """The judge's side: the pipe pair to the candidate's process (write fd, read fd)."""
    global _channel
    _channel = (os.fdopen(channel[0], "wb"), os.fdopen(channel[1], "rb"))


class Remote:
    """A name defined in the candidate's process (``method``: that method of a new instance of it), called
    with plain values and returning one."""

    def __init__(self, name, method=None):
        self.name, self.method = name, method
        self.__name__ = method or name

    def __call__(self, *args, **kwargs):
        return decode(_ask({"name": self.name, "method": self.method, "args": encode(list(args)),
                            "kwargs": encode(kwargs)})["value"])

    def __repr__(self):
        return f"<the candidate's {self.__name__}>"


def bind(names, namespace):
    """Each of ``names`` the candidate defines, into ``namespace``: a ``Remote`` if callable, else its value.
    A standard-library module it imported is imported here (the candidate names it, so nothing else is: an
    installed package's import could change the judge). A name the candidate lacks stays unbound (or as the
    judge's own program defined it)."""
    for name in names:
        try:
            reply = _ask({"name": name, "describe": True})
            if reply.get("module"):  # the tests use a module the candidate imported: the judge imports its own
                namespace[name] = _standard_module(reply["module"])
            else:
                namespace[name] = Remote(name) if reply.get("callable") else decode(reply.get("value"))
        except EOFError:
            raise
        except Exception:  # undefined, or a value that cannot cross: the test meets it as the judge has it
            continue


_MAPPINGS = ((collections.Counter, "counter"), (collections.OrderedDict, "ordereddict"), (dict, "dict"))
_MAPPING_KINDS = {tag: kind for kind, tag in _MAPPINGS}  # a Counter built from a dict takes its counts
_SEQUENCE_KINDS = {"list": list, "tuple": tuple, "set": set, "frozenset": frozenset, "deque": collections.deque,
                   "iter": lambda items: iter(list(items))}
_FACTORIES = {kind.__name__: kind for kind in (int, float, str, list, dict, set, tuple)}  # a defaultdict's
_BARE_INT = 1 << 53  # ints this small cross as JSON numbers; larger ones as hex (no str-conversion limit)


def encode(value, depth=0):
    """``value`` as JSON-ready tagged data; ``TypeError`` for what is not plain data."""
    if depth > MAX_DEPTH:
        raise TypeError("a value nested too deep to compare")
    if value is None or value is True or value is False:
        return value
    if isinstance(value, numbers.Integral):
        number = int(value)
        return number if -_BARE_INT < number < _BARE_INT else ["int", format(number, "x")]
    if isinstance(value, float):
        return ["float", float(value).hex()]
    if isinstance(value, complex):
        return ["complex", float(value.real).hex(), float(value.imag).hex()]
    if isinstance(value, fractions.Fraction):
        return ["fraction", format(value.numerator, "x"), format(value.denominator, "x")]
    if isinstance(value, decimal.Decimal):
        return ["decimal", str(value)]
    if isinstance(value, numbers.Real):  # another real type: as its float
        return ["float", float(value).hex()]
    if isinstance(value, (datetime.date, datetime.time)):  # datetime too, a date's subclass
        kind = next(kind for kind in (datetime.datetime, datetime.date, datetime.time) if isinstance(value, kind))
        return [kind.__name__, value.isoformat()]
    if isinstance(value, datetime.timedelta):
        return ["timedelta", value.days, value.seconds, value.microseconds]
    if isinstance(value, str):
        return str.__str__(value)  # a bare JSON string (a list is always tagged)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return ["bytearray" if isinstance(value, bytearray) else "bytes", bytes(value).hex()]
    if isinstance(value, range):
        return ["range", value.start, value.stop, value.step]
    if isinstance(value, dict):
        tag = next(tag for kind, tag in _MAPPINGS if isinstance(value, kind))
        pairs = [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in dict.items(value)]
        factory = getattr(value, "default_factory", None)
        if tag == "dict" and factory in _FACTORIES.values():
            return ["defaultdict", factory.__name__, pairs]
        return [tag, pairs]
    fields = getattr(type(value), "_fields", None)
    if isinstance(value, tuple) and isinstance(fields, tuple) and all(isinstance(f, str) for f in fields):
        items = [encode(item, depth + 1) for item in tuple.__iter__(value)]
        return ["namedtuple", type(value).__name__, list(fields), items]
    for kind, tag in ((list, "list"), (tuple, "tuple"), (frozenset, "frozenset"), (set, "set"),
                      (collections.deque, "deque")):
        if isinstance(value, kind):
            return [tag, [encode(item, depth + 1) for item in kind.__iter__(value)]]
    if hasattr(type(value), "__next__"):  # a generator, map, filter, zip...: its items, once
        items = []
        for item in value:
            if len(items) >= MAX_ITEMS:
                raise TypeError("an iterator with more items than can be compared")
            items.append(encode(item, depth + 1))
        return ["iter", items]
    if callable(getattr(value, "tolist", None)) and not callable(value):  # numpy arrays and scalars
        return encode(value.tolist(), depth + 1)
    if callable(value):
        raise TypeError(f"a {type(value).__name__} cannot be compared outside the candidate's process")
    return ["opaque", bool(value), repr(value)[:200]]  # a re.Match, say: tests read its truth


class Opaque:
    """A value that crossed without its data (an instance of some class): only its truth and its repr did,
    so a test's ``assert f(x)`` reads it, and it equals nothing but itself."""

    __slots__ = ("truth", "text")

    def __init__(self, truth, text):
        self.truth, self.text = truth, text

    def __bool__(self):
        return self.truth

    def __repr__(self):
        return self.text


def decode(data, depth=0):
    """The value ``encode`` described, built from exact builtins only; ``ValueError`` for anything else."""
    if depth > MAX_DEPTH:
        raise ValueError("a value nested too deep")
    if data is None or data is True or data is False or type(data) in (int, str):
        return data
    if not isinstance(data, list) or not data or not isinstance(data[0], str):
        raise ValueError(f"not a tagged value: {str(data)[:80]}")
    tag, rest = data[0], data[1:]
    if tag == "int":
        return int(_text(rest), 16)
    if tag == "float":
        return float.fromhex(_text(rest))
    if tag == "complex" and len(rest) == 2 and all(isinstance(part, str) for part in rest):
        return complex(float.fromhex(rest[0]), float.fromhex(rest[1]))
    if tag == "str":
        return _text(rest)
    if tag in ("bytes", "bytearray"):
        raw = bytes.fromhex(_text(rest))
        return raw if tag == "bytes" else bytearray(raw)
    if tag == "opaque" and len(rest) == 2 and isinstance(rest[0], bool) and isinstance(rest[1], str):
        return Opaque(rest[0], rest[1][:200])
    if tag == "range" and len(rest) == 3 and all(type(part) is int for part in rest):
        return range(*rest)
    if tag == "fraction" and len(rest) == 2 and all(isinstance(part, str) for part in rest):
        return fractions.Fraction(int(rest[0], 16), int(rest[1], 16))
    if tag == "decimal":
        return decimal.Decimal(_text(rest))
    if tag in ("date", "time", "datetime"):
        return getattr(datetime, tag).fromisoformat(_text(rest))
    if tag == "timedelta" and len(rest) == 3 and all(type(part) is int for part in rest):
        return datetime.timedelta(*rest)
    if tag == "namedtuple" and len(rest) == 3 and isinstance(rest[0], str) and isinstance(rest[1], list):
        return collections.namedtuple(rest[0], rest[1])(*(decode(item, depth + 1) for item in _items(rest[2:])))
    if tag == "defaultdict" and len(rest) == 2 and rest[0] in _FACTORIES:
        return collections.defaultdict(_FACTORIES[rest[0]], decode(["dict", rest[1]], depth))
    items = _items(rest)
    if tag in _MAPPING_KINDS:
        pairs = (_pair(item) for item in items)
        return _MAPPING_KINDS[tag]({decode(k, depth + 1): decode(v, depth + 1) for k, v in pairs})
    if tag in _SEQUENCE_KINDS:
        return _SEQUENCE_KINDS[tag](decode(item, depth + 1) for item in items)
    raise ValueError(f"unknown tag {tag[:40]!r}")


def dumps(message):
    """One line of JSON (no newline inside), the frame of the judge's pipe."""
    return (json.dumps(message, ensure_ascii=True, separators=(",", ":")) + "\n").encode("ascii")


def _standard_module(name):
    """A top-level standard-library module (not a submodule: ``unittest.__main__`` runs on import)."""
    if not isinstance(name, str) or name.startswith("_") or name not in sys.stdlib_module_names:
        raise ImportError(f"the judge imports only top-level standard-library modules, not {str(name)[:80]!r}")
    return importlib.import_module(name)


def _answer(namespace, request):
    if request.get("name") not in namespace:
        raise NameError(f"name {request.get('name')!r} is not defined")
    target = namespace[request["name"]]
    if request.get("describe"):
        if isinstance(target, type(os)):
            return {"module": target.__name__}
        return {"callable": True} if callable(target) else {"value": encode(target)}
    if request.get("method"):
        target = getattr(target(), request["method"])
    return {"value": encode(target(*decode(request["args"]), **decode(request["kwargs"])))}


def _ask(request):
    if _channel is None:
        raise RuntimeError("remote_calls.connect was not called")
    requests, replies = _channel
    try:
        requests.write(dumps(request))
        requests.flush()
    except BrokenPipeError:
        raise EOFError(CANDIDATE_ENDED) from None
    line = replies.readline(MAX_REPLY_BYTES + 1)
    if not line.endswith(b"\n"):
        raise EOFError(CANDIDATE_ENDED)
    reply = json.loads(line)
    if not isinstance(reply, dict):
        raise ValueError("a reply that is not an object")
    if "error" in reply:
        raise _error(reply["error"])
    return reply


def _error(error):
    """The exception the candidate raised, as the nearest builtin in its class's ancestry (a ``ValueError``
    subclass as ``ValueError``), with its arguments where they crossed; ``RuntimeError`` for none."""
    names, message, args = error if isinstance(error, list) and len(error) == 3 else ([], "", None)
    names = names if isinstance(names, list) else []
    kinds = [getattr(builtins, name, None) for name in names if isinstance(name, str)]
    kind = next((k for k in kinds if isinstance(k, type) and issubclass(k, Exception)), None)
    if kind is None:
        return RuntimeError(f"the candidate raised {str(names[:1])[:80]}: {str(message)[:300]}")
    try:
        return kind(*decode(args)) if args is not None else kind(str(message)[:300])
    except Exception:
        try:
            return kind(str(message)[:300])
        except Exception:
            return RuntimeError(f"the candidate raised {kind.__name__}: {str(message)[:300]}")


def _args(exc):
    try:
        return encode(list(exc.args))
    except BaseException:
        return None


def _said(exc):
    try:
        return str(exc)[:300]
    except BaseException:
        return ""


def _text(rest):
    if len(rest) != 1 or not isinstance(rest[0], str):
        raise ValueError("a scalar without its text")
    return rest[0]


def _items(rest):
    if len(rest) != 1 or not isinstance(rest[0], list):
        raise ValueError("a container without its items")
    return rest[0]


def _pair(item):
    if not isinstance(item, list) or len(item) != 2:
        raise ValueError("a dict entry that is not a pair")
    return item

"""The child side of DeadlineRunner: read (module, function, args), call it on the main thread, reply."""

import importlib
import sys

from conductor.verifiers.deadline import read_message, write_message


def main() -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    sys.stdout = sys.stderr  # libraries that print must not corrupt the reply stream
    while True:
        try:
            module_name, qualname, args = read_message(requests)
        except Exception:
            return  # host closed the pipe
        try:
            fn = importlib.import_module(module_name)
            for part in qualname.split("."):
                fn = getattr(fn, part)
            write_message(replies, ("ok", fn(*args)))
        except Exception as exc:
            write_message(replies, ("error", f"{type(exc).__name__}: {exc}"))


if __name__ == "__main__":
    main()

"""A server process freezes its startup heap, so a full collection no longer walks the ~730k objects torch,
transformers and vLLM leave alive (each such walk is a pause every in-flight request pays)."""

import subprocess
import sys

PROBE = """
import gc, weakref
from cluster.serve import freeze_startup_heap
class Kept: pass
startup = [Kept() for _ in range(50_000)]
freeze_startup_heap()
frozen = gc.get_freeze_count()
class Cycle: pass
late = Cycle(); late.self = late; alive = weakref.ref(late); del late
gc.collect()
print(frozen, alive() is None)
"""


def test_freeze_moves_the_startup_heap_out_of_collections_and_later_garbage_is_still_collected():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=120)
    frozen, collected = out.stdout.split()
    assert int(frozen) >= 50_000
    assert collected == "True"

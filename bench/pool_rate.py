"""Rate-limit benchmark for the worker pool, against the simulated worker server on loopback.

    .venv/bin/python bench/pool_rate.py            # prints a table, updates BENCHMARKS.md

Scenarios (window W seconds; limits in requests per window):
  A  client limit L below the server's limit:  achieved rate / L   (goal >= 0.95 of the ceiling W / (W + m),
     m = conductor.rate_limits.send_margin(W), as the client keeps L per W + m) and 429s (goal 0)
  B  server limit S below the client's L, server sends x-ratelimit-* headers (as OpenAI does)
  C  the same without those headers (as vLLM and many gateways): only 429 + Retry-After to go on
  C0 baseline in the same run: the openai SDK with its default retries and no limiter, server as in C
Achieved rate = accepted requests / wall time of the scenario. "Peak per W" = the most requests (any answer)
that reached the server inside one sliding window of W seconds (the client's guarantee: <= L).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
import time
from pathlib import Path

import openai

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from conductor.config import SimulatorConfig  # noqa: E402
from conductor.local_pool import LocalPool  # noqa: E402
from conductor.pool import WorkerCallError  # noqa: E402
from conductor.rate_limits import send_margin  # noqa: E402
from conductor.simulator.presets import simulated_pool_config  # noqa: E402
from conductor.simulator.server import SimulatorServer  # noqa: E402
from conductor.window_peaks import window_peak  # noqa: E402

WORKER = "toy-arith"


def prompts(sim, count):
    tasks = sim.state.preset.tasks
    return [[{"role": "user", "content": f"Question:\n{tasks[i % len(tasks)].prompt}"}] for i in range(count)]


def server_rates(sim, started: float, ended: float, window: float) -> tuple[float, float, int, int]:
    """(accepted requests per second of wall time; 429s per minute; 429 count; peak arrivals per window)."""
    log = [e for e in sim.state.log if started <= e["t"] <= ended]
    accepted = sum(1 for e in log if e["status"] == 200)
    refused = sum(1 for e in log if e["status"] == 429)
    minutes = (ended - started) / 60.0
    return accepted / (ended - started), refused / minutes, refused, window_peak([e["t"] for e in log], window)


def run_pool(sim, calls, client_limit, window, concurrency=64):
    config = simulated_pool_config(sim.state.preset, sim.base_url, rpm=client_limit, rate_window_s=window,
                                   max_concurrency=concurrency, deadline_s=600, max_retries=50)
    pool = LocalPool(config)

    async def main():
        async def one(messages):
            try:
                await pool.chat(WORKER, messages)
                return True
            except WorkerCallError:
                return False
        try:
            return await asyncio.gather(*(one(m) for m in prompts(sim, calls)))
        finally:
            await pool.close()

    started = time.time()
    outcomes = asyncio.run(main())
    return started, time.time(), sum(outcomes)


def run_naive(sim, calls, concurrency=64):
    """The SDK as many users run it: default retries (which honour Retry-After), no client-side limit."""
    async def main():
        client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="unused")
        gate = asyncio.Semaphore(concurrency)

        async def one(messages):
            async with gate:
                try:
                    await client.chat.completions.create(model=WORKER, messages=messages)
                    return True
                except openai.APIError:
                    return False
        try:
            return await asyncio.gather(*(one(m) for m in prompts(sim, calls)))
        finally:
            await client.close()

    started = time.time()
    outcomes = asyncio.run(main())
    return started, time.time(), sum(outcomes)


def scenario(server_limit, client_limit, window, calls, naive=False, headers=True):
    config = SimulatorConfig(preset="toy", port=0, latency_scale=0.5, toy_items_per_domain=50,
                             rpm=server_limit, rate_window_s=window, rate_limit_headers=headers)
    with SimulatorServer(config) as sim:
        started, ended, succeeded = (run_naive(sim, calls) if naive else run_pool(sim, calls, client_limit, window))
        rate, per_minute, refused, peak = server_rates(sim, started, ended, window)
    return {"rate": rate, "per_minute": per_minute, "refused": refused, "succeeded": succeeded, "calls": calls,
            "seconds": ended - started, "peak": peak}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=float, default=5.0)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--no-write", action="store_true", help="do not update BENCHMARKS.md")
    args = parser.parse_args()
    w = args.window
    low, high = 100, 200  # requests per window
    a = scenario(server_limit=high, client_limit=low, window=w, calls=args.calls)
    b = scenario(server_limit=low, client_limit=high, window=w, calls=args.calls)
    c = scenario(server_limit=low, client_limit=high, window=w, calls=args.calls, headers=False)
    c0 = scenario(server_limit=low, client_limit=None, window=w, calls=args.calls, naive=True, headers=False)
    rows = [
        (f"A: client L={low}/{w:g}s < server {high}/{w:g}s", a, a["rate"] / (low / w), "achieved / L"),
        (f"B: server S={low}/{w:g}s < client {high}/{w:g}s, limit headers", b, b["rate"] / (low / w),
         "achieved / S"),
        ("C: as B, no limit headers", c, c["rate"] / (low / w), "achieved / S"),
        ("C0 baseline: openai SDK retries, no limiter, as C", c0, c0["rate"] / (low / w), "achieved / S"),
    ]
    header = ("| scenario | calls ok | achieved req/s | ratio | 429s | 429s per minute | peak per W | wall s |\n"
              "|---|---|---|---|---|---|---|---|")
    lines = [f"| {name} | {r['succeeded']}/{r['calls']} | {r['rate']:.2f} | {ratio:.3f} ({what}) | {r['refused']} | "
             f"{r['per_minute']:.1f} | {r['peak']} | {r['seconds']:.1f} |" for name, r, ratio, what in rows]
    ceiling = w / (w + send_margin(w))
    summary = (f"Without limit headers, pool vs naive SDK under the same server limit: {c['refused']} vs "
               f"{c0['refused']} refusals ({c0['refused'] / max(c['refused'], 1):.1f}x fewer with the pool); "
               f"with headers the pool is refused {b['refused']} times. The client's ceiling is L per W + m: "
               f"achieved / L <= W / (W + m) = {ceiling:.3f} here (m = {send_margin(w):g}s).")
    table = "\n".join([header, *lines])
    print(table)
    print(summary)
    if not args.no_write:
        write_section("pool_rate", f"`bench/pool_rate.py` (window {w:g}s, {args.calls} calls per scenario, "
                      f"simulator latency ~20 ms):\n\n{table}\n\n{summary}\n")
    ok = a["rate"] >= 0.95 * ceiling * low / w and a["refused"] == 0 and a["peak"] <= low
    return 0 if ok else 1


def write_section(name: str, body: str) -> None:
    path = REPO / "BENCHMARKS.md"
    text = (path.read_text() if path.exists()
            else "# Benchmarks\n\nRatios are measured against a baseline in the same run.\n")
    block = f"<!-- {name}:start -->\n## {name}\n\n{body.rstrip()}\n\n<!-- {name}:end -->"
    pattern = re.compile(rf"<!-- {name}:start -->.*?<!-- {name}:end -->", re.DOTALL)
    text = pattern.sub(block, text) if pattern.search(text) else text.rstrip() + "\n\n" + block + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())

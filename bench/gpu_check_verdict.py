"""bench/gpu_check.py's verdict: the device's GRPO step against the CPU's on the same batch, each check with its
bound, and the report those checks and the timings make (gpu_check.md, BENCHMARKS.md's section)."""

from __future__ import annotations

from typing import Any

# bf16 on the device against float32 on the CPU, same weights and batch (measured margins: BENCHMARKS.md).
TOLERANCE = {"logprob_mean": 0.05, "logprob_max": 0.5, "loss_rel": 0.05, "grad_norm_rel": 0.05,
             "update_corr": 0.9, "export_logprob_max": 0.01}


def compare_sides(reference: dict[str, Any], device: dict[str, Any]) -> list[tuple[str, float, float, bool]]:
    """(what, measured, bound, passed) for each check of the device's step against the reference's."""
    import torch

    def flat(side, key):
        return torch.tensor([v for row in side[key] for v in row], dtype=torch.float64)

    before = (flat(device, "before") - flat(reference, "before")).abs()
    after = (flat(device, "after") - flat(reference, "after")).abs()
    moved_ref = flat(reference, "after") - flat(reference, "before")
    moved_dev = flat(device, "after") - flat(device, "before")
    corr = float(torch.corrcoef(torch.stack([moved_ref, moved_dev]))[0, 1])

    def rel(key):
        ref, dev = reference["step"][key], device["step"][key]
        return abs(dev - ref) / max(abs(ref), 1e-3)

    checks = [("logprobs before the step, mean abs diff (nats)", float(before.mean()), TOLERANCE["logprob_mean"]),
              ("logprobs before the step, max abs diff (nats)", float(before.max()), TOLERANCE["logprob_max"]),
              ("loss, relative diff", rel("loss"), TOLERANCE["loss_rel"]),
              ("grad norm, relative diff", rel("grad_norm"), TOLERANCE["grad_norm_rel"]),
              ("logprobs after the step, mean abs diff (nats)", float(after.mean()), TOLERANCE["logprob_mean"])]
    rows = [(what, value, bound, value <= bound) for what, value, bound in checks]
    rows.append(("the step's change of each logprob, correlation", corr, TOLERANCE["update_corr"],
                 corr >= TOLERANCE["update_corr"]))
    export = device.get("export")
    if export:
        rows.append(("export equals the rank's weights (1 = yes)", float(export["identical"]), 1.0,
                     export["identical"]))
        rows.append(("reloaded export vs the rank, max abs diff of logprobs", export["reload_logprob_max"],
                     TOLERANCE["export_logprob_max"], export["reload_logprob_max"] <= TOLERANCE["export_logprob_max"]))
    return rows


def render(summary: dict[str, Any]) -> str:
    speed, checks = summary["speed"], summary["checks"]
    lines = [f"Device: {speed['device_name']}. Policy: {summary['policy']}. DeepSpeed ZeRO-2, world size 1, "
             f"shared-prompt forward, {summary['learner']['mini_batches']} mini-batches of micro-batches of "
             f"{summary['learner']['micro_batch_size']}.", "",
             f"The same step on the same batch ({summary['compare_sequences']} sequences) from the same weights: "
             f"device {summary['device_dtype']} against the CPU in float32.", "",
             "| check | measured | bound | |", "|---|---|---|---|"]
    lines += [f"| {what} | {value:.4g} | {bound:.4g} | {'pass' if ok else 'FAIL'} |"
              for what, value, bound, ok in checks]
    peak = speed["peak_tflops"]
    achieved = speed["step_flops"] / speed["step_s"] / 1e12
    mfu = f"{100 * achieved / peak:.1f}% of {peak:g}" if peak else "n/a (no known peak: --peak-tflops)"
    lines += ["", f"Timed: {speed['sequences']} sequences ({summary['speed_shape']}), median of "
              f"{len(speed['steps_s'])} steps after {summary['warmup']} warm-up.", "",
              "| step (s) | sequence tokens/s | tokens run/s | model TFLOP/s | MFU (bf16 dense peak, TFLOP/s) | "
              "peak GPU memory (GiB) |", "|---|---|---|---|---|---|",
              f"| {speed['step_s']:.3f} | {speed['sequence_tokens'] / speed['step_s']:,.0f} | "
              f"{speed['run_tokens'] / speed['step_s']:,.0f} | {achieved:.1f} | {mfu} | "
              f"{speed['max_memory_gib'] if speed['max_memory_gib'] is None else round(speed['max_memory_gib'], 1)} |"]
    export = summary.get("export")
    if export:
        lines += ["", f"Export: {export['tensors']} tensors, {export['bytes'] / 2**20:.0f} MiB, reloaded by "
                  "transformers."]
    lines += ["", f"Verdict: {'PASS' if summary['passed'] else 'FAIL'}."]
    return "\n".join(lines)

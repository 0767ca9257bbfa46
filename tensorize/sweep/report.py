"""What a finished sweep says: per machine (all its workloads together) the total cycles,
utilisation and area proxy; the Pareto front over the three objectives :data:`OBJECTIVES`
(total cycles, PEs, SRAM bytes); the best machine per workload; each swept model's total on
the fastest machines; and the failed points. Data first (:func:`summarize`), then text
(:func:`summary_text`).

A model's layer is one workload for all the layers sharing its kernel, so a machine's total
counts its cycles once per such layer (the row's ``count``): the total is the model's, as
``tensorize model`` reports it, not a sum over distinct kernels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorize.sweep.model_totals import model_totals_text

# What the Pareto front minimises, all three at once: a machine is on it when no other is at
# least as good in each and better in one.
OBJECTIVES = ("cycles", "pes", "sram_bytes")


def machines(rows: Sequence[dict[str, Any]], workloads: int) -> list[dict[str, Any]]:
    """One entry per machine whose every workload ran: its fields, machine file, area proxy,
    total cycles over the workloads (a model's workload counted once per layer sharing its
    kernel, its row's ``count``) and utilisation (those MACs over PEs x cycles)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(row["machine_file"], []).append(row)
    result = []
    for file, group in groups.items():
        if len(group) < workloads or any(r.get("error") for r in group):
            continue
        cycles = sum(r["cycles"] * _layers(r) for r in group)
        pes = group[0]["pes"]
        macs = sum(r["macs"] * _layers(r) for r in group)
        result.append({"fields": group[0]["fields"], "machine_file": file, "pes": pes,
                       "sram_bytes": group[0]["sram_bytes"], "cycles": cycles,
                       "utilisation": round(macs / (cycles * pes), 6) if cycles else 0.0})
    return result


def _layers(row: dict[str, Any]) -> int:
    """The layers a row's cycles stand for: a model workload's count, else one."""
    return int(row.get("count") or 1)


def pareto_front(entries: Sequence[dict[str, Any]],
                 objectives: Sequence[str] = OBJECTIVES) -> list[dict[str, Any]]:
    """The entries no other entry beats over ``objectives`` (each minimised): none is at
    least as good in every one and better in one. Sorted by PEs, SRAM bytes, cycles."""
    def measures(entry: dict[str, Any]) -> tuple[Any, ...]:
        return tuple(entry[name] for name in objectives)

    front = []
    for entry in entries:
        mine = measures(entry)
        dominated = any(all(o <= m for o, m in zip(measures(other), mine))
                        and measures(other) != mine for other in entries)
        if not dominated:
            front.append(entry)
    return sorted(front, key=lambda e: (e["pes"], e["sram_bytes"], e["cycles"]))


def best_per_workload(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The row of fewest cycles per workload (ties: the earlier point)."""
    best: dict[str, dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: r["index"]):
        if row.get("error"):
            continue
        current = best.get(row["workload"])
        if current is None or row["cycles"] < current["cycles"]:
            best[row["workload"]] = row
    return best


def summarize(rows: Sequence[dict[str, Any]], workloads: int,
              model_totals: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The summary as data: counts, best per workload, the Pareto front, failures, and
    each model's total per machine (:func:`tensorize.sweep.model_totals.model_totals`)."""
    entries = machines(rows, workloads)
    failed = [r for r in sorted(rows, key=lambda r: r["index"]) if r.get("error")]
    return {"points": len(rows), "failed": len(failed), "machines_complete": len(entries),
            "best": best_per_workload(rows), "pareto": pareto_front(entries),
            "pareto_objectives": list(OBJECTIVES),
            "failures": [{"key": r["key"], "workload": r["workload"], "fields": r["fields"],
                          "error": r["error"]} for r in failed],
            "model_totals": list(model_totals)}


def _fields(fields: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in fields.items())


def summary_text(summary: dict[str, Any], shown_failures: int = 10) -> str:
    """The summary as the lines the command prints."""
    lines = []
    best = summary["best"]
    if best:
        width = max(len(w) for w in best) + 2
        lines.append(f"{'workload':<{width}}{'best cycles':>12}{'exec util':>11}  machine")
        for workload, row in best.items():
            lines.append(f"{workload:<{width}}{row['cycles']:>12,}"
                         f"{100 * row['utilisation']:>10.1f}%  {_fields(row['fields'])}")
    front = summary["pareto"]
    if front:
        lines.append("")
        lines.append(f"Pareto front over 3 objectives, total cycles over the workloads, PEs "
                     f"and SRAM bytes, each minimised ({len(front)} of "
                     f"{summary['machines_complete']} machines):")
        lines.append(f"{'PEs':>7}{'SRAM bytes':>12}{'cycles':>12}{'exec util':>11}  machine")
        for entry in front:
            lines.append(f"{entry['pes']:>7,}{entry['sram_bytes']:>12,}{entry['cycles']:>12,}"
                         f"{100 * entry['utilisation']:>10.1f}%  {_fields(entry['fields'])}")
    if summary.get("model_totals"):
        lines.append("")
        lines.append(model_totals_text(summary["model_totals"]))
    failures = summary["failures"]
    if failures:
        lines.append("")
        lines.append(f"failed points ({len(failures)}):")
        for failure in failures[:shown_failures]:
            reason = str(failure["error"]).splitlines()[0]
            lines.append(f"  {failure['workload']} on {_fields(failure['fields'])}: {reason}")
        if len(failures) > shown_failures:
            lines.append(f"  ... and {len(failures) - shown_failures} more (results.jsonl)")
    return "\n".join(lines)

"""A model's total per machine: its swept layers' cycles added up, each workload's cycles
times the count of layers sharing its kernel (:mod:`tensorize.sweep.model_workloads`), which
is what ``tensorize model MODEL --target npu --machine FILE`` reports as the total of those
layers. Data first (:func:`model_totals`), then text (:func:`model_totals_text`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tensorize.sweep.workloads import Workload


def model_totals(rows: Sequence[dict[str, Any]], workloads: Sequence[Workload]
                 ) -> list[dict[str, Any]]:
    """Per model and machine, in row order: the model file, the machine's fields, file and
    area proxy; ``layers``, the model's layers whose point ran (each workload counted as
    many times as layers share its kernel) and ``failed``, those whose point failed or has
    no row; ``cycles``, the cycles of the layers that ran (each workload's cycles times its
    count), which is the total ``tensorize model`` reports on that machine (it counts the
    tensorized layers, and runs the others on the host); ``utilisation``, those layers'
    MACs (as the model counts them) over PEs x cycles. Compare machines by cycles only
    where ``failed`` is 0."""
    infos = {w.name: dict(w.info) for w in workloads if w.kind == "model"}
    layers_of: dict[str, int] = {}
    for info in infos.values():
        layers_of[info["model"]] = layers_of.get(info["model"], 0) + info["count"]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for row in rows:
        info = infos.get(row["workload"])
        if info is not None:
            groups.setdefault((info["model"], row["machine_file"]), []).append(row)
    totals = []
    for (model, machine), group in groups.items():
        ran = [(r, infos[r["workload"]]) for r in group if not r.get("error")]
        cycles = sum(r["cycles"] * info["count"] for r, info in ran)
        macs = sum(info["macs"] * info["count"] for _, info in ran)
        layers = sum(info["count"] for _, info in ran)
        pes = group[0]["pes"]
        totals.append({"model": model, "fields": group[0]["fields"], "machine_file": machine,
                       "pes": pes, "sram_bytes": group[0]["sram_bytes"], "layers": layers,
                       "failed": layers_of[model] - layers, "cycles": cycles,
                       "utilisation": round(macs / (cycles * pes), 6) if cycles else 0.0})
    return totals


def model_totals_text(totals: Sequence[dict[str, Any]], shown: int = 3) -> str:
    """Per model, the ``shown`` machines of fewest total cycles among those that ran every
    swept layer, and how many machines left some layer unrun."""
    lines = []
    for model in dict.fromkeys(t["model"] for t in totals):
        entries = [t for t in totals if t["model"] == model]
        complete = sorted((t for t in entries if not t["failed"]), key=lambda t: t["cycles"])
        layers = entries[0]["layers"] + entries[0]["failed"]
        unrun = len(entries) - len(complete)
        note = f"; {unrun} machines left some layer unrun" if unrun else ""
        lines.append(f"{model}: {layers} layers, total cycles (each kernel's cycles times the "
                     f"layers sharing it), fastest {min(shown, len(complete))} of "
                     f"{len(complete)} machines that ran them all{note}:")
        lines.append(f"{'PEs':>7}{'SRAM bytes':>12}{'cycles':>12}{'useful util':>13}  machine")
        for entry in complete[:shown]:
            fields = " ".join(f"{k}={v}" for k, v in entry["fields"].items())
            lines.append(f"{entry['pes']:>7,}{entry['sram_bytes']:>12,}{entry['cycles']:>12,}"
                         f"{100 * entry['utilisation']:>12.1f}%  {fields}")
    return "\n".join(lines)

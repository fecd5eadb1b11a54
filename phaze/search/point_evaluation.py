"""A point's full evaluation as the search records it: each model's placement, where the time went, its throughput."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from phaze.placement import PlacementResult


def throughput_of(result: PlacementResult | None) -> float:
    """Sequences/s of a placement, 0 when nothing fits."""
    return result.throughput_seq_s if result is not None and result.feasible else 0.0


@dataclass(frozen=True)
class Evaluation:
    """A point's full evaluation: each model's best placement (None: nothing fits) and where the time went."""

    results: dict[str, PlacementResult | None]
    ilp_s: float
    dp_s: float
    milps: tuple = ()
    """The layer schedules this evaluation took past the list schedule (LayerSchedule: status, mip_gap, solve_s)."""
    upper_seq_s: float | None = None
    """An early-stopped evaluation's upper bound on the mean throughput (models not evaluated count at their bounds)."""
    chip: dict | None = None
    """A baseline's chip as hw.* params (chip_params) and area_mm2; None for a point of the space (its point table row)."""

    @property
    def exact(self) -> bool:
        """False when the evaluation stopped early: its throughput is then an upper bound that cannot beat the study."""
        return self.upper_seq_s is None

    def milp_metrics(self) -> dict[str, float]:
        """How its layer MILPs ended: how many ran, how many stopped above the gap at their limit, how many stopped once
        their bound refuted a cut-off (a search's question, not a schedule: their gap is not counted), the largest gap
        left, the median seconds."""
        if not self.milps:
            return {"milp.count": 0}
        scheduled = [m.mip_gap for m in self.milps if m.status != "refuted"]
        return {"milp.count": len(self.milps), "milp.open": sum(m.status == "time_limit" for m in self.milps),
                "milp.refuted": sum(m.status == "refuted" for m in self.milps), "milp.max_gap": max(scheduled, default=0.0),
                "milp.median_s": float(np.median([m.solve_s for m in self.milps]))}

    @property
    def throughput_seq_s(self) -> float:
        """The objective: the mean over the models of their throughput (sequences/s); an upper bound when not exact."""
        if self.upper_seq_s is not None:
            return self.upper_seq_s
        return float(np.mean([throughput_of(r) for r in self.results.values()]))

    @property
    def result(self) -> PlacementResult | None:
        """The placement when one model is searched (None for several: see `results`)."""
        return next(iter(self.results.values())) if len(self.results) == 1 else None

    def speedup_over(self, baseline: "Evaluation") -> float:
        """Mean over the models of throughput / baseline throughput (PHAZE's average speedup)."""
        ratios = [throughput_of(r) / throughput_of(baseline.results[m]) for m, r in self.results.items() if throughput_of(baseline.results[m]) > 0]
        return float(np.mean(ratios)) if ratios else float("nan")

"""Points of a hardware space as the search reads them: one point as a one-row frame, a chip as a trial's hw.* params,
the reference chip in the optimum's run."""

from __future__ import annotations

import pandas as pd

from phaze.placement import PlacementResult


def chip_params(axes, row: pd.Series) -> dict:
    """A chip's architecture as the hw.* params of a trial (`axes`: its space's, point_axes), whole numbers as int."""
    return {f"hw.{a}": (row[a] if a == "hbm_generation" else int(row[a])) for a in axes}


def chip_of(axes, point: pd.DataFrame) -> dict:
    """A one-row point as a baseline's Evaluation.chip: its hw.* params and area."""
    row = point.iloc[0]
    return {**chip_params(axes, row), "area_mm2": float(row["area_mm2"])}


def point_at(points: pd.DataFrame, index: int) -> pd.DataFrame:
    """The one-row frame of points[index] (index 0), as the cost model and the placement DP take a point."""
    return points.iloc[[index]].reset_index(drop=True)


def optimum_run(reference: pd.DataFrame, optimum_point: pd.DataFrame, result: PlacementResult | None) -> tuple[pd.DataFrame, tuple | None]:
    """The reference point with the optimum's HBM capacity, and the optimum's (mbs, recompute): PHAZE loops over
    (mbs, HBM, recompute) runs and reads the fixed strategy's throughput from the optimum's run (docs/
    phaze-reference.md §1.2, §7). Unchanged (no run) when the optimum found no placement."""
    if result is None or not result.feasible:
        return reference, None
    point = reference.assign(hbm_gib=optimum_point.hbm_gib.iloc[0]) if "hbm_gib" in optimum_point.columns else reference
    return point, (int(result.strategy.mbs), str(result.strategy.recompute))

"""Where a plan's step goes, as a person reads it: per pipeline stage, its time and its memory as stacked bars
(phaze.pipeline.Explanation), and the tables behind them; logged with the best trial of every study."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from phaze.pipeline import Explanation, explain  # noqa: E402


def breakdown_figure(explanation: Explanation, title: str = ""):
    """Two stacked-bar panels, one bar per pipeline stage: the step's seconds by component, and memory by component."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 2.2 + 0.45 * len(explanation.time_s)))
    time = explanation.time_s.loc[:, explanation.time_s.sum() > 0]
    memory = explanation.memory_gib.loc[:, explanation.memory_gib.sum() > 0]
    time.rename(columns=lambda c: c.removesuffix("_s")).plot.barh(stacked=True, ax=left, colormap="tab20", width=0.8)
    memory.rename(columns=lambda c: c.removesuffix("_gib")).plot.barh(stacked=True, ax=right, colormap="tab20b", width=0.8)
    left.set(xlabel="seconds per training step", ylabel="pipeline stage", title="time (each bar: the time per batch)")
    right.set(xlabel="GiB per device", ylabel="", title="memory")
    for ax in (left, right):
        ax.invert_yaxis()
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.38), ncol=4, frameon=False)
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    return fig


def best_explanations(outcome) -> dict[str, Explanation]:
    """Each model's breakdown on the study's best point (nothing when no point was evaluated)."""
    if outcome.best is None:
        return {}
    ev = outcome.evaluator
    point = ev.point(outcome.best_index)
    return {m.name: explain(m.job, point, outcome.best.results[m.name], m.workloads, m.layers(outcome.best_index, point))
            for m in ev.models if outcome.best.results.get(m.name) is not None and outcome.best.results[m.name].feasible}

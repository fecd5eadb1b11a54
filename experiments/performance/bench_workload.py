"""Benchmark: Llama-2-7B workload extraction from scratch and from the disk cache.

    python -m experiments.performance.bench_workload [model=llama2]

Prints the wall time of a from-scratch extraction (all TP widths) for each microbatch size of the
training config, and of loading each back from the cache, with their ratio.
"""

from __future__ import annotations

import sys
import tempfile
import time

from phaze.workload.extract import extract_workload
from phaze.config import compose_config as compose_cfg


def main(overrides: list[str]) -> None:
    cfg = compose_cfg(*(overrides or ["model=llama2"]))
    rows = []
    with tempfile.TemporaryDirectory() as cache:
        for mbs in cfg.train.mbs:
            t0 = time.perf_counter()
            extract_workload(cfg.model, mbs, cfg.train.bytes_per_elem, cfg.train.tp_widths, cache_dir=cache)
            t1 = time.perf_counter()
            extract_workload(cfg.model, mbs, cfg.train.bytes_per_elem, cfg.train.tp_widths, cache_dir=cache)
            t2 = time.perf_counter()
            rows.append((mbs, t1 - t0, t2 - t1))
    print(f"model {cfg.model.name}, TP widths {list(cfg.train.tp_widths)}")
    print(f"{'mbs':>4} {'extract_s':>10} {'cache_load_s':>13} {'ratio':>8}")
    for mbs, cold, warm in rows:
        print(f"{mbs:>4} {cold:>10.2f} {warm:>13.4f} {cold / warm:>8.0f}x")
    print(f"all microbatch sizes: extract {sum(r[1] for r in rows):.1f} s, load {sum(r[2] for r in rows):.3f} s")


if __name__ == "__main__":
    main(sys.argv[1:])

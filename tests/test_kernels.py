"""phaze.kernels: the warm-up compiles every Numba kernel signature that a search then calls, so that a search whose
warm-up ran (in the background) compiles nothing itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from tests.test_search_study import TINY_MODEL


JOBS = [
    [*TINY_MODEL, "hw=tiny_grid"],
    [*TINY_MODEL, "hw=tiny_grid", "train=megatron"],
    [*TINY_MODEL, "hw=h100", "cluster=dgx_h100", "train=fsdp"],
]
"""PHAZE's step and chips, the modern placement space (timeline step, ZeRO 0-3, mode search), and FSDP on a GPU (one
collective stream for ZeRO-3, no layer MILP)."""

SCRIPT = textwrap.dedent("""
    import json, sys
    from phaze.kernels import start_warm_up
    from phaze.placement import dp, reconstruct
    from phaze.schedule import modes, sgs
    from phaze.config import compose_config, model_job
    from phaze.hardware.space import enumerate_space
    from phaze.pipeline import evaluate_point

    if __name__ == "__main__":
        process = start_warm_up()
        process.join()
        kernels = {f"{m.__name__}.{n}": getattr(m, n) for m in (dp, reconstruct, modes, sgs) for n in dir(m)
                   if hasattr(getattr(m, n), "stats")}
        for job in json.loads(sys.argv[1]):
            cfg = compose_config(*job, f"cache_dir={sys.argv[2]}")
            points = enumerate_space(cfg.hw)
            evaluate_point(model_job(cfg), points.iloc[[len(points) - 1]])
        # a signature missing from Numba's cache is compiled here: one the warm-up did not reach
        compiled = {name: [str(s) for s in k.stats.cache_misses] for name, k in kernels.items() if k.stats.cache_misses}
        loaded = sum(len(k.stats.cache_hits) for k in kernels.values())
        print(json.dumps({"exit": process.exitcode, "compiled": compiled, "loaded": loaded}))
""")


@pytest.mark.slow
def test_a_search_after_the_warm_up_compiles_no_kernel(tmp_path):
    script = tmp_path / "check.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    out = subprocess.run([sys.executable, str(script), json.dumps(JOBS), str(tmp_path / "workloads")], env=env,
                         capture_output=True, text=True, timeout=900, check=True)
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["exit"] == 0
    assert report["compiled"] == {}
    assert report["loaded"] >= 5  # the DP's and the list scheduler's kernels came from the warm-up's cache

"""PHAZE's world stays reproducible: `train=phaze` gives the numbers it gave before the modern placement
space was added (issue 12), on the headline optimum's architecture and on the TPUv4-like chip; and `train=megatron`
its headline number on its own optimum's architecture."""

import json
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.solver]

OPTIMUM_ARCH = ["hw=phaze_grid", "hw.n_tc=[4]", "hw.tc_rows=[256]", "hw.tc_cols=[256]", "hw.n_vc=[4]", "hw.vc_width=[256]",
                "hw.glb_mib=[32]", "hw.hbm_gib=[80]"]
"""The point `python -m phaze.run model=llama2 hw=phaze_grid` finds best (README: 4x256x256 TC, 4x256 VC, 32 MiB, 80 GiB)."""


def evaluate(tmp_path, *overrides, train: str = "phaze") -> dict:
    proc = subprocess.run([sys.executable, "-m", "phaze.evaluate", "model=llama2", f"train={train}", *overrides,
                           f"cache_dir={tmp_path / 'cache'}"], capture_output=True, text=True, cwd=tmp_path, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_llama2_optimum_on_its_architecture_is_unchanged(tmp_path):
    # the placement space searched on the grid optimum's point: 111.1826 seq/s, as before issue 12
    best = evaluate(tmp_path, *OPTIMUM_ARCH)
    assert best["throughput_seq_s"] == pytest.approx(111.1826466205538, rel=1e-12)
    assert (best["dp"], best["pp"], best["tp"], best["mbs"], best["recompute"]) == (128, 6, [2, 2, 1, 1, 1, 1], 1, "none")
    assert (best["zero"], best["sp"], best["vp"], best["cp"], best["tp_comm_overlap"]) == (0, False, 1, 1, False)


def test_llama2_on_tpuv4_is_unchanged(tmp_path):
    best = evaluate(tmp_path, "hw=tpuv4")
    assert best["throughput_seq_s"] == pytest.approx(197.99453749037164, rel=1e-12)
    assert best["time_per_batch_s"] == pytest.approx(20.687439420894055, rel=1e-12)
    assert (best["dp"], best["pp"], best["tp"], best["mbs"], best["recompute"]) == (256, 4, 1, 1, "full")


MEGATRON_OPTIMUM_ARCH = ["hw=phaze_grid", "hw.n_tc=[4]", "hw.tc_rows=[256]", "hw.tc_cols=[256]", "hw.n_vc=[256]", "hw.vc_width=[256]",
                         "hw.glb_mib=[8]", "hw.hbm_gib=[80]"]
"""The point `python -m phaze.run model=llama2 hw=phaze_grid train=megatron` finds best (424.114995 seq/s)."""


def test_llama2_megatron_optimum_on_its_architecture_is_unchanged(tmp_path):
    """The modern placement space's headline number, which the redesign of issue 46 had to keep."""
    best = evaluate(tmp_path, *MEGATRON_OPTIMUM_ARCH, train="megatron")
    assert best["throughput_seq_s"] == pytest.approx(424.11499514373014, rel=1e-12)
    assert (best["dp"], best["pp"], best["tp"], best["mbs"], best["recompute"], best["zero"]) == (1024, 1, 1, 4, "none", 2)

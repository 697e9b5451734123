"""Runs examples/dask_read.py against a real server, as a user would."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from zarrgate import ZarrgateStore

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "dask_read.py"


@pytest.mark.parametrize("scheduler", ["processes", "threads"])
def test_dask_read_example(zarrgate_server, scheduler: str) -> None:
    data = np.arange(60 * 80, dtype="float32").reshape(60, 80)
    arr = zarr.create_array(
        store=ZarrgateStore(zarrgate_server.addr),
        name="dask/x",
        shape=data.shape,
        chunks=(15, 20),
        shards=(30, 40),
        dtype=data.dtype,
    )
    arr[:] = data

    run = subprocess.run(
        [sys.executable, str(EXAMPLE), "--addr", zarrgate_server.addr, "--path", "dask/x",
         "--scheduler", scheduler, "--workers", "2"],
        capture_output=True, text=True, timeout=300,
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["shape"] == [60, 80] and out["dtype"] == "float32"
    assert out["sum"] == pytest.approx(float(data.sum(dtype="float64")))
    assert out["mean"] == pytest.approx(float(data.mean(dtype="float64")))
    assert out["chunks"] == 16
    # The chunks were read by the workers: with processes, each one a spawned
    # process with its own unpickled array and channel, never the parent. How
    # many workers got tasks depends on timing (on an idle machine: 2), so
    # only at least one is asserted.
    assert out["workers"] >= 1, out
    if scheduler == "processes":
        assert not out["read_in_main_process"], out
        assert 1 <= out["processes"] <= 2, out

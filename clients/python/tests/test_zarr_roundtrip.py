"""zarr-python arrays through the gateway: written via ZarrgateStore, they are
plain zarr files in the served directory that zarr's LocalStore reads
identically, and the other way round."""

from __future__ import annotations

import numpy as np
import pytest
import zarr
from zarr.storage import LocalStore

from zarrgate import ZarrgateStore


def _files(root) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


@pytest.mark.parametrize(
    ("zarr_format", "extra"),
    [
        pytest.param(3, {"shards": (20, 32)}, id="v3-sharded"),
        pytest.param(3, {}, id="v3"),
        pytest.param(2, {}, id="v2"),
    ],
)
def test_array_roundtrip(zarrgate_server, zarr_format: int, extra: dict) -> None:
    data = np.arange(40 * 64, dtype="int32").reshape(40, 64)
    store = ZarrgateStore(zarrgate_server.addr)
    arr = zarr.create_array(
        store=store,
        name="group/x",
        shape=data.shape,
        chunks=(10, 16),
        dtype=data.dtype,
        zarr_format=zarr_format,
        attributes={"units": "m"},
        **extra,
    )
    arr[:] = data
    arr[5:7, 3:50] = -1  # a partial (read-modify-write) update
    data[5:7, 3:50] = -1

    # Back through the gateway, opened by path.
    again = zarr.open_array(store=ZarrgateStore(zarrgate_server.addr), path="group/x", mode="r")
    np.testing.assert_array_equal(again[:], data)
    np.testing.assert_array_equal(again[3:9, 10:20], data[3:9, 10:20])
    assert again.attrs["units"] == "m"
    assert again.metadata.zarr_format == zarr_format

    # The same bytes as plain files, read by zarr's own LocalStore.
    local = zarr.open_array(store=LocalStore(zarrgate_server.root, read_only=True), path="group/x")
    np.testing.assert_array_equal(local[:], data)
    assert local.metadata == again.metadata

    files = _files(zarrgate_server.root)
    assert not [f for f in files if ".zarrgate-tmp" in f]
    keys = sorted(zarr.core.sync.sync(_collect(store.list())))
    assert keys == files
    if zarr_format == 3 and extra:
        # 2 x 2 shards, each one file.
        assert [f for f in files if "/c/" in f] == [
            "group/x/c/0/0", "group/x/c/0/1", "group/x/c/1/0", "group/x/c/1/1"
        ]
    if zarr_format == 2:
        assert "group/x/.zarray" in files and "group/x/0.0" in files


async def _collect(it):
    return [k async for k in it]


def test_local_writes_gateway_reads(zarrgate_server) -> None:
    """Written with LocalStore into the served directory, read through the gateway."""
    data = np.linspace(0, 1, 1000, dtype="float64").reshape(10, 100)
    local = zarr.create_array(
        store=LocalStore(zarrgate_server.root),
        name="y",
        shape=data.shape,
        chunks=(5, 30),
        shards=(10, 60),
        dtype=data.dtype,
    )
    local[:] = data
    arr = zarr.open_array(store=ZarrgateStore(zarrgate_server.addr, read_only=True), path="y")
    np.testing.assert_array_equal(arr[:], data)
    np.testing.assert_array_equal(arr[7, 55:65], data[7, 55:65])
    with pytest.raises(ValueError, match="read-only"):
        arr[0, 0] = 5


@pytest.mark.filterwarnings("ignore:Consolidated metadata is currently not part:UserWarning")
def test_groups_and_consolidated_metadata(zarrgate_server) -> None:
    store = ZarrgateStore(zarrgate_server.addr)
    root = zarr.open_group(store=store, mode="w")
    root.attrs["title"] = "t"
    a = root.create_array("a", shape=(4,), dtype="u1", chunks=(2,))
    a[:] = [1, 2, 3, 4]
    root.create_group("sub").create_array("b", shape=(3,), dtype="f4")[:] = 7
    zarr.consolidate_metadata(store)

    g = zarr.open_group(store=ZarrgateStore(zarrgate_server.addr), mode="r")
    assert g.attrs["title"] == "t"
    assert sorted(g.group_keys()) == ["sub"] and sorted(g.array_keys()) == ["a"]
    np.testing.assert_array_equal(g["a"][:], [1, 2, 3, 4])
    np.testing.assert_array_equal(g["sub/b"][:], [7, 7, 7])
    assert g.metadata.consolidated_metadata is not None

    lg = zarr.open_group(store=LocalStore(zarrgate_server.root, read_only=True), mode="r")
    assert lg.metadata == g.metadata

    # Deleting through the gateway removes the files.
    del root["sub"]
    assert not (zarrgate_server.root / "sub").exists()

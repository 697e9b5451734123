"""The xarray backend (engine="zarrgate") against a real gateway: datasets
written by xarray (v3 plain, sharded, with strings; v2) and by netCDF-C
(NCZarr), opened through the gateway and compared with ``xr.open_zarr`` on
the same directory; trees of groups; laziness, counted at the server (its
/metrics); indexing compared with numpy; URLs, options and errors."""

from __future__ import annotations

import itertools
import pickle
import re
import shutil
import time
import urllib.request
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import netCDF4
import numpy as np
import pandas as pd
import pytest
import xarray as xr

import zarrgate
from zarrgate.errors import ZarrgateNodeTypeError, ZarrgateNotFound, ZarrgateUnauthenticated
from zarrgate.xarray_backend import ZarrgateBackendEntrypoint, fill_scalar, parse_url

from conftest import REPO_ROOT, start_server, stop_server

# -- a server whose reads can be counted --------------------------------------


@dataclass(frozen=True)
class CountedServer:
    addr: str
    root: Path
    admin: str  # http://127.0.0.1:PORT

    def url(self, path: str) -> str:
        return f"grpc://{self.addr}/{path}"

    def counts(self) -> dict[str, int]:
        """Slab reads served (ReadSlab, ReadSlabShared and ReadSlabSmall
        calls started, the last over small-reads connections too) and
        chunks decoded, from the gateway's /metrics."""
        text = urllib.request.urlopen(self.admin + "/metrics", timeout=10).read().decode()
        out = {"slab_reads": 0, "chunks_decoded": 0}
        for line in text.splitlines():
            if line.startswith("grpc_server_started_total{") and re.search(
                r'grpc_method="ReadSlab(Shared|Small)?"', line
            ):
                out["slab_reads"] += int(float(line.rsplit(" ", 1)[1]))
            elif line.startswith("zarrgate_codec_chunks_total{") and 'op="decode"' in line:
                out["chunks_decoded"] += int(float(line.rsplit(" ", 1)[1]))
        return out


@pytest.fixture(scope="module")
def counted(zarrgate_bin: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CountedServer]:
    """`zarrgate serve` with the admin endpoint (to count reads) and no
    metadata cache (datasets are written into its directory behind its
    back)."""
    base = tmp_path_factory.mktemp("xr")
    log = base / "serve.log"
    proc, addr = start_server(zarrgate_bin, base / "root", log,
                              "--metadata-ttl", "0", "--admin-listen", "127.0.0.1:0")
    try:
        deadline = time.monotonic() + 30
        while not (m := re.search(rb"admin_url=(http://127\.0\.0\.1:\d+)", log.read_bytes())):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no admin endpoint:\n{log.read_text(errors='replace')}")
            time.sleep(0.05)
        yield CountedServer(addr=addr, root=base / "root", admin=m.group(1).decode())
    finally:
        stop_server(proc)


# -- datasets -----------------------------------------------------------------


def make_dataset() -> xr.Dataset:
    """Dimension coordinates (times among them), a 2-d non-dimension
    coordinate, NaNs, a packed variable (scale_factor, _FillValue), strings,
    booleans, attributes of several types."""
    rng = np.random.default_rng(7)
    t = rng.standard_normal((6, 5, 8)).astype("float32")
    t[0, 0, :3] = np.nan
    packed = np.round(rng.uniform(0, 100, (5, 8)), 1)
    packed[1, 1] = np.nan
    return xr.Dataset(
        {
            "t": (("time", "lat", "lon"), t, {"units": "K", "long_name": "temperature",
                                              "valid_range": [-5.0, 5.0]}),
            "packed": (("lat", "lon"), packed, {"units": "%"}),
            "flag": (("lat", "lon"), rng.integers(0, 2, (5, 8)).astype(bool)),
            "count": (("time",), np.arange(6, dtype="uint16")),
            "name": (("lat",), np.array(["a", "bb", "", "dddd", "é✓"], dtype=object)),
        },
        coords={
            "time": pd.date_range("2020-01-01", periods=6, freq="6h"),
            "lat": np.linspace(-10, 10, 5),
            "lon": np.arange(8) * 1.5,
            "height": (("lat", "lon"), rng.uniform(0, 1, (5, 8)), {"units": "m"}),
        },
        attrs={"title": "test dataset", "version": 3, "weights": [0.5, 0.25], "flagged": True},
    )


ENCODING = {"packed": {"dtype": "int16", "scale_factor": 0.1, "_FillValue": -1},
            "t": {"chunks": (2, 5, 4)}}


def write_xarray(root: Path, name: str, kind: str) -> Path:
    ds = make_dataset()
    enc = {k: dict(v) for k, v in ENCODING.items()}
    if kind == "v3-sharded":
        enc["t"] = {"chunks": (1, 5, 4), "shards": (2, 5, 8)}
        enc["height"] = {"chunks": (5, 2), "shards": (5, 4)}
    path = root / name
    ds.to_zarr(path, zarr_format=2 if kind == "v2" else 3, consolidated=False, encoding=enc)
    return path


def write_nczarr(root: Path, name: str) -> Path:
    """An NCZarr dataset as netCDF-C 4.10 writes it: dimensions, a
    coordinate variable, a CF ``coordinates`` attribute, fill values, group
    and variable attributes, a scalar."""
    path = root / name
    nc = netCDF4.Dataset(f"file://{path}#mode=nczarr,file", "w")
    nc.createDimension("x", 4)
    nc.createDimension("y", 6)
    x = nc.createVariable("x", "f8", ("x",))
    x[:] = [0.5, 1.5, 2.5, 3.5]
    x.units = "km"
    h = nc.createVariable("h", "f4", ("x", "y"))
    h[:] = np.arange(24, dtype="f4").reshape(4, 6) / 4
    v = nc.createVariable("v", "i4", ("x", "y"), fill_value=-99, chunksizes=(2, 3))
    data = np.arange(24, dtype="i4").reshape(4, 6)
    data[0, 0] = -99  # masked
    v[:] = data
    v.units = "m"
    v.coordinates = "h"
    v.setncattr("scale", 2.5)
    s = nc.createVariable("s", "i4", ())
    s.assignValue(42)
    nc.title = "nczarr"
    nc.history = "written by netCDF4"
    nc.close()
    return path


_names = itertools.count()


def written(server: CountedServer, kind: str) -> tuple[str, Path]:
    """A dataset of that kind in the server's directory: (node path, dir)."""
    name = f"{kind}-{next(_names)}.zarr"
    if kind == "nczarr":
        return name, write_nczarr(server.root, name)
    return name, write_xarray(server.root, name, kind)


def open_both(server: CountedServer, name: str, path: Path, **kw) -> tuple[xr.Dataset, xr.Dataset]:
    got = xr.open_dataset(server.url(name), engine="zarrgate", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no consolidated metadata
        want = xr.open_zarr(path, consolidated=False, chunks=None, **kw)
    return got, want


def assert_same(got: xr.Dataset, want: xr.Dataset) -> None:
    xr.testing.assert_identical(got, want)
    for k in want.variables:
        assert got[k].dtype == want[k].dtype, k
        assert got[k].encoding.get("_FillValue", "-") == want[k].encoding.get("_FillValue", "-") or (
            np.isnan(got[k].encoding["_FillValue"]) and np.isnan(want[k].encoding["_FillValue"])
        ), k
        assert got[k].encoding.get("scale_factor") == want[k].encoding.get("scale_factor"), k
        assert got[k].encoding["preferred_chunks"] == want[k].encoding["preferred_chunks"], k


DECODINGS = [
    {},
    {"mask_and_scale": False},
    {"decode_times": False},
    {"decode_coords": False},
    {"drop_variables": ["packed"]},
    {"mask_and_scale": False, "decode_times": False, "concat_characters": False},
]


# -- identical to xr.open_zarr --------------------------------------------------


@pytest.mark.parametrize("kind", ["v3", "v3-sharded", "v2"])
@pytest.mark.parametrize("decoding", DECODINGS, ids=lambda d: ",".join(d) or "default")
def test_identical_to_open_zarr(counted, kind: str, decoding: dict) -> None:
    name, path = written(counted, kind)
    got, want = open_both(counted, name, path, **decoding)
    # height is a coordinate through the `coordinates` attribute, decoded.
    assert ("height" in got.coords) == decoding.get("decode_coords", True)
    assert_same(got, want)
    assert got.t.encoding["shards"] == ((2, 5, 8) if kind == "v3-sharded" else None)
    # The gateway's values are the directory's, whatever the decoding.
    assert got.name.dtype == want.name.dtype == np.dtypes.StringDType()


# zarr-python's, when it writes fixed-size bytes and unicode to v3.
@pytest.mark.filterwarnings("ignore:The data type .* does not have a Zarr V3 specification")
@pytest.mark.parametrize("zarr_format", [2, 3])
@pytest.mark.parametrize("decoding", [{}, {"mask_and_scale": False},
                                      {"decode_times": False, "decode_timedelta": False}],
                         ids=["default", "mask_and_scale", "decode_times"])
def test_data_types_identical_to_open_zarr(counted, zarr_format: int, decoding: dict) -> None:
    """Every kind of value xarray writes: integers of each width, float16,
    complex with NaN, fixed-size bytes and unicode, booleans, times with
    NaT, timedeltas, a 0-d variable with attributes."""
    ds = xr.Dataset({
        "i8": ("n", np.array([-1, 2, 3], "int8")),
        "u64": ("n", np.array([0, 2**63, 5], "uint64")),
        "f16": ("n", np.array([1.5, np.nan, 3], "float16")),
        "c": ("n", np.array([1 + 2j, 3, np.nan], "complex128")),
        "S": ("n", np.array([b"ab", b"", b"xyz"], "S3")),
        "U": ("n", np.array(["ab", "", "xyz\u00e9"], "U4")),
        "b": ("n", np.array([True, False, True])),
        "scalar": ((), np.float64(3.5), {"a": 1}),
        "ts": ("n", np.array(["2020-01-01", "NaT", "2021-06-01"], "datetime64[ns]")),
        "td": ("n", np.array([1, 2, 3], "timedelta64[s]")),
    })
    name = f"types-{next(_names)}.zarr"
    ds.to_zarr(counted.root / name, zarr_format=zarr_format, consolidated=False)
    got, want = open_both(counted, name, counted.root / name, **decoding)
    xr.testing.assert_identical(got.load(), want.load())
    assert {k: got[k].dtype for k in got.variables} == {k: want[k].dtype for k in want.variables}


@pytest.mark.parametrize("decoding", DECODINGS[:4], ids=lambda d: ",".join(d) or "default")
def test_nczarr_identical_to_open_zarr(counted, decoding: dict) -> None:
    name, path = written(counted, "nczarr")
    got, want = open_both(counted, name, path, **decoding)
    # A netCDF scalar is 0-d here, as netCDF reads it; xr.open_zarr shows
    # its storage: a dimension "_scalar_" of length 1.
    assert got.s.dims == () and want.s.dims == ("_scalar_",)
    assert got.s.values == want.s.values[0] == 42
    assert_same(got.drop_vars("s"), want.drop_vars("s"))
    assert got.attrs == {"title": "nczarr", "history": "written by netCDF4"}  # no _NCProperties
    if decoding.get("mask_and_scale", True):
        assert np.isnan(got.v.values[0, 0]) and got.v.values[0, 1] == 1
    if decoding.get("decode_coords", True):
        assert "h" in got.coords


@pytest.mark.parametrize("decoding", DECODINGS[:2], ids=["default", "mask_and_scale"])
def test_nczarr_490_fixture_identical_to_open_zarr(counted, decoding: dict) -> None:
    """The dataset netCDF 4.9.0's ncgen wrote (upper-case _NCZARR_* keys,
    partly in .zarray; testdata/nczarr): the same as xr.open_zarr reads.
    xr.open_zarr fails on its scalar (shape [1], no dimensions), so it reads
    a copy without it; here the scalar is a 0-d variable."""
    name = f"nc490-{next(_names)}.ncz"
    shutil.copytree(REPO_ROOT / "testdata" / "nczarr" / "simple.ncz", counted.root / name)
    shutil.copytree(counted.root / name, counted.root / f"{name}-noscalar")
    shutil.rmtree(counted.root / f"{name}-noscalar" / "scalar")
    got, want = open_both(counted, name, counted.root / f"{name}-noscalar", **decoding)
    assert got.scalar.dims == () and got.scalar.values == 42
    assert got.scalar.attrs["note"] == "a netCDF scalar"
    assert_same(got.drop_vars("scalar"), want)
    assert got.attrs == {"title": "zarrgate NCZarr fixture", "version": 2}
    assert got.temp.dims == ("time", "lat", "lon")
    if decoding.get("mask_and_scale", True):
        assert got.temp.values[0, 0, 1] == 0.5  # scale_factor applied


def test_use_zarr_fill_value_as_mask(counted) -> None:
    """The zarr fill value masks by default in v2 and not in v3, as with
    xr.open_zarr; use_zarr_fill_value_as_mask turns it on or off. (xarray
    2026.9's open_zarr drops the argument, so it is checked by its effect.)"""
    v3, v3_path = written(counted, "v3")
    v2, v2_path = written(counted, "v2")
    got, want = open_both(counted, v3, v3_path, use_zarr_fill_value_as_mask=False)
    assert_same(got, want)
    got, want = open_both(counted, v2, v2_path, use_zarr_fill_value_as_mask=True)
    assert_same(got, want)
    # count's fill value is 0 (v3) / null (v2: no mask); flag's is False.
    masked = xr.open_dataset(counted.url(v3), engine="zarrgate", use_zarr_fill_value_as_mask=True)
    assert np.isnan(masked["count"].values[0]) and masked["count"].attrs == {}
    assert masked["count"].encoding["_FillValue"] == 0
    plain = xr.open_dataset(counted.url(v2), engine="zarrgate", use_zarr_fill_value_as_mask=False)
    assert plain.t.encoding.get("_FillValue") is None and np.isnan(plain.t.values[0, 0, 0])
    assert int(plain["count"].values[0]) == 0


def test_datatree_identical_to_open_zarr(counted) -> None:
    ds = make_dataset()
    tree = xr.DataTree.from_dict({
        "/": ds[["count"]].assign_attrs(kind="root"),
        "/surface": ds[["t", "name"]],
        "/surface/detail": ds[["packed"]].isel(lat=slice(0, 3)).rename(lat="lat3"),
        "/empty": xr.Dataset(attrs={"note": "nothing here"}),
    })
    name = f"tree-{next(_names)}.zarr"
    tree.to_zarr(counted.root / name, consolidated=False,
                 encoding={"/surface/detail": {"packed": ENCODING["packed"]}})
    got = xr.open_datatree(counted.url(name), engine="zarrgate")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want = xr.open_datatree(counted.root / name, engine="zarr", consolidated=False, chunks=None)
    xr.testing.assert_identical(got, want)
    assert set(got.groups) == {"/", "/surface", "/surface/detail", "/empty"}
    # A subtree, by group= or by URL.
    sub = xr.open_datatree(counted.url(name), engine="zarrgate", group="surface")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        want_sub = xr.open_datatree(counted.root / name, engine="zarr", group="surface",
                                    consolidated=False, chunks=None)
    xr.testing.assert_identical(sub, want_sub)
    xr.testing.assert_identical(xr.open_datatree(counted.url(f"{name}/surface"), engine="zarrgate"), sub)
    groups = xr.open_groups(counted.url(name), engine="zarrgate")
    xr.testing.assert_identical(groups["/surface/detail"], want["surface/detail"].to_dataset(inherit=False))
    # One dataset of the tree.
    one = xr.open_dataset(counted.url(name), engine="zarrgate", group="surface/detail")
    xr.testing.assert_identical(one, want["surface/detail"].to_dataset(inherit=False))
    got.close()


# -- laziness and one read per indexer -------------------------------------------


def test_opening_reads_no_chunk(counted) -> None:
    name, _ = written(counted, "v3")
    lazy = {"create_default_indexes": False, "decode_times": False}
    c0 = counted.counts()
    xr.open_dataset(counted.url(name), engine="zarrgate", **lazy)
    assert counted.counts() == c0, "opening read chunks"
    xr.open_datatree(counted.url(name), engine="zarrgate", **lazy)
    assert counted.counts() == c0, "opening a tree read chunks"

    # What xarray itself reads, from any backend: the first and the last
    # time to decode times (two one-element reads of one chunk) ...
    xr.open_dataset(counted.url(name), engine="zarrgate", create_default_indexes=False)
    c1 = counted.counts()
    assert (c1["slab_reads"] - c0["slab_reads"], c1["chunks_decoded"] - c0["chunks_decoded"]) == (2, 2)
    # ... and the three dimension coordinates it makes indexes of: one slab
    # each, of one chunk each. No data variable is read.
    ds = xr.open_dataset(counted.url(name), engine="zarrgate")
    c1b = counted.counts()
    assert (c1b["slab_reads"] - c1["slab_reads"], c1b["chunks_decoded"] - c1["chunks_decoded"]) == (5, 5)
    c1 = c1b

    # One indexer, one slab read, only the chunks it touches: t is in
    # (2, 5, 4) chunks, t[1, :, 5:] lies in one.
    ds.t[1, :, 5:].values
    c2 = counted.counts()
    assert (c2["slab_reads"] - c1["slab_reads"], c2["chunks_decoded"] - c1["chunks_decoded"]) == (1, 1)
    # An outer indexer (lists of indices) is one read too, of the stepped
    # slab holding it: time [0, 5] as 0:6:5 (chunks 0 and 2 of 3), lon
    # [1, 6] as 1:7:5 (both chunks): 4 chunks, not the 6 spanning it.
    ds.t.isel(time=[0, 5], lon=[1, 6]).values
    c3 = counted.counts()
    assert (c3["slab_reads"] - c2["slab_reads"], c3["chunks_decoded"] - c2["chunks_decoded"]) == (1, 4)
    # A vectorized one too.
    ds.t.isel(lat=xr.DataArray([0, 4], dims="p"), lon=xr.DataArray([0, 7], dims="p")).values
    c4 = counted.counts()
    assert c4["slab_reads"] - c3["slab_reads"] == 1
    # A reduction over a whole variable: one read.
    float(ds.t.mean())
    assert counted.counts()["slab_reads"] - c4["slab_reads"] == 1


def _random_isel(rng: np.random.Generator, sizes: dict[str, int]) -> dict:
    sel = {}
    for d, n in sizes.items():
        r = rng.integers(0, 6)
        if r == 0:
            sel[d] = int(rng.integers(-n, n))
        elif r == 1:
            step = int(rng.choice([1, 2, 3, -1, -2]))
            # Reversed slices with bounds before the start (< -n) are left
            # out: xarray (2026.9) composes them wrongly on any lazy
            # backend, xr.open_zarr's too ([-7:0:-2] of 6 gives 2 elements).
            lo, hi = (int(x) for x in rng.integers(-n - 2 if step > 0 else -n, n + 2, 2))
            sel[d] = slice(lo, hi, step)
        elif r == 2:
            sel[d] = rng.integers(0, n, int(rng.integers(1, 4))).tolist()
        elif r == 3:
            sel[d] = slice(None, None, -1)
    return sel


def test_indexing_matches_numpy(counted) -> None:
    """200 random isel (ints, slices with any step, lists of indices) on
    the lazy variables: the values are numpy's on the dataset in memory."""
    name, _ = written(counted, "v3-sharded")
    ds = xr.open_dataset(counted.url(name), engine="zarrgate", mask_and_scale=False)
    mem = make_dataset()
    rng = np.random.default_rng(3)
    for _ in range(200):
        var = str(rng.choice(["t", "height", "name", "flag"]))
        sel = _random_isel(rng, dict(mem[var].sizes))
        got = ds[var].isel(sel).values
        want = mem[var].isel(sel).values
        assert got.shape == want.shape, (var, sel)
        np.testing.assert_array_equal(got.astype(want.dtype), want, err_msg=f"{var} {sel}")
    # Empty reversed slices: xarray's own decomposition fails on them for a
    # BASIC backend (IndexError); the backend makes them empty forward ones.
    assert ds.t.isel(time=slice(2, 5, -1)).values.shape == (0, 5, 8)
    assert ds.t.isel(time=slice(2, 5, -1), lon=[1, 2]).values.shape == (0, 5, 2)
    # A whole string variable and one element keep numpy's StringDType.
    assert ds.name[1].values.dtype == np.dtypes.StringDType() and str(ds.name[1].values) == "bb"


def test_dask_chunks_and_pickle(counted) -> None:
    """chunks={} makes dask chunks of the zarr chunks (as xr.open_zarr);
    the dataset pickles (its variables reconnect) and computes the same."""
    name, path = written(counted, "v3")
    ds = xr.open_dataset(counted.url(name), engine="zarrgate", chunks={})
    want = xr.open_zarr(path, consolidated=False)
    assert ds.t.chunks == want.t.chunks == ((2, 2, 2), (5,), (4, 4))
    again = pickle.loads(pickle.dumps(ds))
    xr.testing.assert_identical(again.compute(), want.compute())
    assert float(again.t.mean().compute()) == pytest.approx(float(want.t.mean().compute()))


def test_load_async(counted) -> None:
    """ds.load_async() reads every variable (one slab each) and gives what
    load() gives."""
    import asyncio

    name, _ = written(counted, "v3")
    ds = xr.open_dataset(counted.url(name), engine="zarrgate", decode_times=False,
                         create_default_indexes=False)
    c0 = counted.counts()
    got = asyncio.run(ds.load_async())
    assert counted.counts()["slab_reads"] - c0["slab_reads"] == len(ds.variables)
    xr.testing.assert_identical(got, xr.open_dataset(counted.url(name), engine="zarrgate",
                                                     decode_times=False,
                                                     create_default_indexes=False).load())


# -- URLs, options, errors ---------------------------------------------------------


def test_parse_url() -> None:
    assert parse_url("grpc://127.0.0.1:5000/a/b") == ("grpc://127.0.0.1:5000", "a/b")
    assert parse_url("grpcs://zarrgate.example:443/") == ("grpcs://zarrgate.example:443", "")
    assert parse_url("GRPC://[::1]:5000/a%20b/c/") == ("grpc://[::1]:5000", "a b/c")
    for bad, msg in [
        ("http://h:1/x", "grpc:// or grpcs://"),
        ("grpc://h/x", "host:port"),
        ("grpc://h:99999/x", "out of range"),
        ("grpc://alice:secret@h:1/x", "credentials"),
        ("grpc://secret@h:1/x", "credentials"),
        ("https://secret@h:1/x", "grpc:// or grpcs://"),
        ("grpc://h:1/x?token=secret", "query"),
        ("grpc://h:1/x#secret", "fragment"),
        ("grpc://h:1/a/../b", "'..'"),
        ("grpc://h:1/a//b", "empty"),
    ]:
        with pytest.raises(ValueError, match=msg) as e:
            parse_url(bad)
        assert "secret" not in str(e.value)
    e = ZarrgateBackendEntrypoint()
    assert e.guess_can_open("grpc://h:1/x") and e.guess_can_open("grpcs://h:1")
    assert not e.guess_can_open("/data/x.zarr") and not e.guess_can_open(Path("grpc:"))


def test_open_a_group_of_a_client(counted) -> None:
    name, path = written(counted, "v3")
    with zarrgate.connect(counted.addr) as c:
        got = xr.open_dataset(c.open_group(name), engine="zarrgate")
        assert_same(got, open_both(counted, name, path)[1])
        got.close()  # the client is the caller's: still open
        assert c.open_group(name).path == name
        with pytest.raises(ValueError, match="its client has them"):
            xr.open_dataset(c.open_group(name), engine="zarrgate", token="t")


def test_fill_scalar() -> None:
    f32 = np.dtype("float32")
    assert np.isnan(fill_scalar('"NaN"', "float32", f32)) and fill_scalar('"NaN"', "float32", f32).dtype == f32
    assert fill_scalar('"-Infinity"', "float64", np.dtype("float64")) == -np.inf
    nan = fill_scalar('"0x7fc00001"', "float32", f32)
    assert np.isnan(nan) and nan.view("<u4") == 0x7FC00001
    assert fill_scalar("[1.5, \"NaN\"]", "complex64", np.dtype("complex64")).real == 1.5
    assert fill_scalar("-3", "int8", np.dtype("int8")) == np.int8(-3)
    assert fill_scalar("true", "bool", np.dtype(bool)) is np.True_
    assert fill_scalar('""', "string", np.dtypes.StringDType()) == ""
    assert fill_scalar('"YWI="', "S3", np.dtype("S3")) == b"ab"  # base64, as v2 fixed bytes
    assert fill_scalar('"ab"', "U4", np.dtype("U4")) == "ab"
    assert fill_scalar("[1, 2]", "r16", np.dtype("V2")) == np.void(b"\x01\x02")
    assert fill_scalar("null", "int8", np.dtype("int8")) is None and fill_scalar("", "int8", np.dtype("int8")) is None


def test_errors(counted) -> None:
    name, _ = written(counted, "v3")
    with pytest.raises(ZarrgateNotFound):
        xr.open_dataset(counted.url("no/such"), engine="zarrgate")
    with pytest.raises(ZarrgateNodeTypeError, match="an array, not a group"):
        xr.open_dataset(counted.url(f"{name}/t"), engine="zarrgate")
    with pytest.raises(TypeError, match="unknown"):
        xr.open_dataset(counted.url(name), engine="zarrgate", storage_options={"anon": True})
    with pytest.raises(ValueError, match="'..'"):
        xr.open_dataset(counted.url(name), engine="zarrgate", group="a/../../etc")
    with pytest.raises(ValueError, match="given twice"):
        xr.open_dataset(counted.url(name), engine="zarrgate", token="a", storage_options={"token": "b"})
    # An array without dimension names cannot be a variable.
    with zarrgate.connect(counted.addr) as c:
        c.create_array("nodims/x", (3,), "int8")
    with pytest.raises(KeyError, match="dimension_names"):
        xr.open_dataset(counted.url("nodims"), engine="zarrgate")


def test_token_and_tls_from_options(secure_server, monkeypatch) -> None:
    """The secure server (TLS, tokens, a policy): the token and CA as
    arguments, in storage_options, or the token from $ZARRGATE_TOKEN."""
    s = secure_server
    write_xarray(s.root, "proj/ds.zarr", "v3")
    url = f"grpcs://{s.addr}/proj/ds.zarr"
    with pytest.raises(ZarrgateUnauthenticated):
        xr.open_dataset(url, engine="zarrgate", tls_ca=s.certs.ca, token="")
    want = xr.open_zarr(s.root / "proj/ds.zarr", consolidated=False, chunks=None)
    for kw in [
        {"tls_ca": s.certs.ca, "token": s.tokens["bob"]},
        {"storage_options": {"tls_ca": str(s.certs.ca), "token": s.tokens["bob"]}},
    ]:
        got = xr.open_dataset(url, engine="zarrgate", **kw)
        xr.testing.assert_identical(got.load(), want)
    monkeypatch.setenv("ZARRGATE_TOKEN", s.tokens["alice"])
    xr.testing.assert_identical(xr.open_dataset(url, engine="zarrgate", tls_ca=s.certs.ca).load(), want)

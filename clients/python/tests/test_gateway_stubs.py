"""The generated ArrayService stubs against the same server: an array that
zarr-python wrote through ZarrgateStore, read back by the gateway's own
Zarr decoder (GetNode, ReadSlab)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
import zarr

from zarrgate import ZarrgateStore, gateway_pb2, gateway_pb2_grpc


def _read_slab(stub, path: str, selection=()) -> np.ndarray:
    header, out = None, None
    for msg in stub.ReadSlab(gateway_pb2.ReadSlabRequest(path=path, selection=list(selection))):
        if msg.HasField("header"):
            header = msg.header
            assert header.byte_order == gateway_pb2.BYTE_ORDER_LITTLE_ENDIAN
            out = np.zeros(tuple(header.shape), dtype=np.dtype(header.data_type).newbyteorder("<"))
        else:
            b = msg.block
            box = tuple(slice(o, o + s) for o, s in zip(b.origin, b.shape, strict=True))
            out[box] = np.frombuffer(b.data, dtype=out.dtype).reshape(tuple(b.shape))
    assert header is not None
    return out


@pytest.mark.parametrize(
    ("zarr_format", "extra"),
    [
        pytest.param(3, {"shards": (8, 12)}, id="v3-sharded"),
        pytest.param(3, {}, id="v3"),
        pytest.param(2, {}, id="v2"),
    ],
)
def test_gateway_reads_what_zarr_python_wrote(zarrgate_server, zarr_format, extra) -> None:
    data = (np.arange(16 * 24, dtype="int32") * 3 - 100).reshape(16, 24)
    arr = zarr.create_array(
        store=ZarrgateStore(zarrgate_server.addr),
        name="g/a",
        shape=data.shape,
        chunks=(4, 6),
        dtype=data.dtype,
        zarr_format=zarr_format,
        **extra,
    )
    arr[:] = data

    with grpc.insecure_channel(zarrgate_server.addr) as channel:
        stub = gateway_pb2_grpc.ArrayServiceStub(channel)
        node = stub.GetNode(gateway_pb2.GetNodeRequest(path="g/a")).node
        assert list(node.array.shape) == [16, 24]
        assert node.array.data_type == "int32"
        assert list(node.array.chunk_shape) == [4, 6]
        assert list(node.array.shard_shape) == list(extra.get("shards", ()))
        try:
            whole = _read_slab(stub, "g/a")
        except grpc.RpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                # `zarrgate serve` builds its gateway without a codec engine
                # (gateway.New(store, nil, ...) in cmd/zarrgate/serve.go), so
                # ReadSlab answers UNIMPLEMENTED "this gateway has no codec
                # engine". Runs for real once serve wires one in.
                pytest.xfail(f"serve has no codec engine: {e.details()}")
            raise
        np.testing.assert_array_equal(whole, data)
        sel = [gateway_pb2.Slice(start=3, stop=11, step=2), gateway_pb2.Slice(start=5, stop=20)]
        np.testing.assert_array_equal(_read_slab(stub, "g/a", sel), data[3:11:2, 5:20])

from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Format(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FORMAT_UNSPECIFIED: _ClassVar[Format]
    FORMAT_ZARR_V3: _ClassVar[Format]
    FORMAT_ZARR_V2: _ClassVar[Format]
    FORMAT_NCZARR: _ClassVar[Format]

class NodeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    NODE_KIND_UNSPECIFIED: _ClassVar[NodeKind]
    NODE_KIND_GROUP: _ClassVar[NodeKind]
    NODE_KIND_ARRAY: _ClassVar[NodeKind]

class ByteOrder(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    BYTE_ORDER_UNSPECIFIED: _ClassVar[ByteOrder]
    BYTE_ORDER_LITTLE_ENDIAN: _ClassVar[ByteOrder]
FORMAT_UNSPECIFIED: Format
FORMAT_ZARR_V3: Format
FORMAT_ZARR_V2: Format
FORMAT_NCZARR: Format
NODE_KIND_UNSPECIFIED: NodeKind
NODE_KIND_GROUP: NodeKind
NODE_KIND_ARRAY: NodeKind
BYTE_ORDER_UNSPECIFIED: ByteOrder
BYTE_ORDER_LITTLE_ENDIAN: ByteOrder

class Dimension(_message.Message):
    __slots__ = ("name", "size", "unlimited")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    UNLIMITED_FIELD_NUMBER: _ClassVar[int]
    name: str
    size: int
    unlimited: bool
    def __init__(self, name: _Optional[str] = ..., size: _Optional[int] = ..., unlimited: _Optional[bool] = ...) -> None: ...

class ArrayInfo(_message.Message):
    __slots__ = ("shape", "data_type", "chunk_shape", "shard_shape", "codecs_json", "dimension_names", "fill_value_json", "stored_bytes")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SHAPE_FIELD_NUMBER: _ClassVar[int]
    SHARD_SHAPE_FIELD_NUMBER: _ClassVar[int]
    CODECS_JSON_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_NAMES_FIELD_NUMBER: _ClassVar[int]
    FILL_VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    STORED_BYTES_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    data_type: str
    chunk_shape: _containers.RepeatedScalarFieldContainer[int]
    shard_shape: _containers.RepeatedScalarFieldContainer[int]
    codecs_json: str
    dimension_names: _containers.RepeatedScalarFieldContainer[str]
    fill_value_json: str
    stored_bytes: int
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., data_type: _Optional[str] = ..., chunk_shape: _Optional[_Iterable[int]] = ..., shard_shape: _Optional[_Iterable[int]] = ..., codecs_json: _Optional[str] = ..., dimension_names: _Optional[_Iterable[str]] = ..., fill_value_json: _Optional[str] = ..., stored_bytes: _Optional[int] = ...) -> None: ...

class Node(_message.Message):
    __slots__ = ("path", "kind", "format", "attributes_json", "array", "dimensions")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_JSON_FIELD_NUMBER: _ClassVar[int]
    ARRAY_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    path: str
    kind: NodeKind
    format: Format
    attributes_json: str
    array: ArrayInfo
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    def __init__(self, path: _Optional[str] = ..., kind: _Optional[_Union[NodeKind, str]] = ..., format: _Optional[_Union[Format, str]] = ..., attributes_json: _Optional[str] = ..., array: _Optional[_Union[ArrayInfo, _Mapping]] = ..., dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ...) -> None: ...

class GetNodeRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class GetNodeResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: Node
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class ListChildrenRequest(_message.Message):
    __slots__ = ("path", "recursive")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RECURSIVE_FIELD_NUMBER: _ClassVar[int]
    path: str
    recursive: bool
    def __init__(self, path: _Optional[str] = ..., recursive: _Optional[bool] = ...) -> None: ...

class ListChildrenResponse(_message.Message):
    __slots__ = ("nodes",)
    NODES_FIELD_NUMBER: _ClassVar[int]
    nodes: _containers.RepeatedCompositeFieldContainer[Node]
    def __init__(self, nodes: _Optional[_Iterable[_Union[Node, _Mapping]]] = ...) -> None: ...

class CreateGroupRequest(_message.Message):
    __slots__ = ("path", "format", "attributes_json", "dimensions", "nczarr_legacy")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_JSON_FIELD_NUMBER: _ClassVar[int]
    DIMENSIONS_FIELD_NUMBER: _ClassVar[int]
    NCZARR_LEGACY_FIELD_NUMBER: _ClassVar[int]
    path: str
    format: Format
    attributes_json: str
    dimensions: _containers.RepeatedCompositeFieldContainer[Dimension]
    nczarr_legacy: bool
    def __init__(self, path: _Optional[str] = ..., format: _Optional[_Union[Format, str]] = ..., attributes_json: _Optional[str] = ..., dimensions: _Optional[_Iterable[_Union[Dimension, _Mapping]]] = ..., nczarr_legacy: _Optional[bool] = ...) -> None: ...

class CreateGroupResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: Node
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class CreateArrayRequest(_message.Message):
    __slots__ = ("path", "format", "shape", "data_type", "chunk_shape", "shard_shape", "codecs_json", "fill_value_json", "dimension_names", "attributes_json")
    PATH_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SHAPE_FIELD_NUMBER: _ClassVar[int]
    SHARD_SHAPE_FIELD_NUMBER: _ClassVar[int]
    CODECS_JSON_FIELD_NUMBER: _ClassVar[int]
    FILL_VALUE_JSON_FIELD_NUMBER: _ClassVar[int]
    DIMENSION_NAMES_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_JSON_FIELD_NUMBER: _ClassVar[int]
    path: str
    format: Format
    shape: _containers.RepeatedScalarFieldContainer[int]
    data_type: str
    chunk_shape: _containers.RepeatedScalarFieldContainer[int]
    shard_shape: _containers.RepeatedScalarFieldContainer[int]
    codecs_json: str
    fill_value_json: str
    dimension_names: _containers.RepeatedScalarFieldContainer[str]
    attributes_json: str
    def __init__(self, path: _Optional[str] = ..., format: _Optional[_Union[Format, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data_type: _Optional[str] = ..., chunk_shape: _Optional[_Iterable[int]] = ..., shard_shape: _Optional[_Iterable[int]] = ..., codecs_json: _Optional[str] = ..., fill_value_json: _Optional[str] = ..., dimension_names: _Optional[_Iterable[str]] = ..., attributes_json: _Optional[str] = ...) -> None: ...

class CreateArrayResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: Node
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class UpdateAttributesRequest(_message.Message):
    __slots__ = ("path", "attributes_json", "merge")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ATTRIBUTES_JSON_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    path: str
    attributes_json: str
    merge: bool
    def __init__(self, path: _Optional[str] = ..., attributes_json: _Optional[str] = ..., merge: _Optional[bool] = ...) -> None: ...

class UpdateAttributesResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: Node
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class DeleteNodeRequest(_message.Message):
    __slots__ = ("path",)
    PATH_FIELD_NUMBER: _ClassVar[int]
    path: str
    def __init__(self, path: _Optional[str] = ...) -> None: ...

class DeleteNodeResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ResizeArrayRequest(_message.Message):
    __slots__ = ("path", "shape")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    path: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, path: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class ResizeArrayResponse(_message.Message):
    __slots__ = ("node",)
    NODE_FIELD_NUMBER: _ClassVar[int]
    node: Node
    def __init__(self, node: _Optional[_Union[Node, _Mapping]] = ...) -> None: ...

class Slice(_message.Message):
    __slots__ = ("start", "stop", "step")
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    start: int
    stop: int
    step: int
    def __init__(self, start: _Optional[int] = ..., stop: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class SlabHeader(_message.Message):
    __slots__ = ("shape", "data_type", "byte_order", "element_size", "shared_segment", "destination", "bulk")
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    BYTE_ORDER_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    SHARED_SEGMENT_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    data_type: str
    byte_order: ByteOrder
    element_size: int
    shared_segment: SharedSegment
    destination: SharedDestinationAnswer
    bulk: BulkOffer
    def __init__(self, shape: _Optional[_Iterable[int]] = ..., data_type: _Optional[str] = ..., byte_order: _Optional[_Union[ByteOrder, str]] = ..., element_size: _Optional[int] = ..., shared_segment: _Optional[_Union[SharedSegment, _Mapping]] = ..., destination: _Optional[_Union[SharedDestinationAnswer, _Mapping]] = ..., bulk: _Optional[_Union[BulkOffer, _Mapping]] = ...) -> None: ...

class BulkOffer(_message.Message):
    __slots__ = ("host", "port", "ticket")
    HOST_FIELD_NUMBER: _ClassVar[int]
    PORT_FIELD_NUMBER: _ClassVar[int]
    TICKET_FIELD_NUMBER: _ClassVar[int]
    host: str
    port: int
    ticket: bytes
    def __init__(self, host: _Optional[str] = ..., port: _Optional[int] = ..., ticket: _Optional[bytes] = ...) -> None: ...

class SharedDestination(_message.Message):
    __slots__ = ("pid", "fd", "size", "token")
    PID_FIELD_NUMBER: _ClassVar[int]
    FD_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    pid: int
    fd: int
    size: int
    token: bytes
    def __init__(self, pid: _Optional[int] = ..., fd: _Optional[int] = ..., size: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class SharedDestinationAnswer(_message.Message):
    __slots__ = ("accepted", "reason")
    ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    accepted: bool
    reason: str
    def __init__(self, accepted: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class SharedSegment(_message.Message):
    __slots__ = ("path", "size", "token")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    token: bytes
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class SharedRange(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class Block(_message.Message):
    __slots__ = ("origin", "shape", "data", "offsets", "shared")
    ORIGIN_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    origin: _containers.RepeatedScalarFieldContainer[int]
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    offsets: _containers.RepeatedScalarFieldContainer[int]
    shared: SharedRange
    def __init__(self, origin: _Optional[_Iterable[int]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ..., offsets: _Optional[_Iterable[int]] = ..., shared: _Optional[_Union[SharedRange, _Mapping]] = ...) -> None: ...

class ReadSlabRequest(_message.Message):
    __slots__ = ("path", "selection", "bulk")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    BULK_FIELD_NUMBER: _ClassVar[int]
    path: str
    selection: _containers.RepeatedCompositeFieldContainer[Slice]
    bulk: bool
    def __init__(self, path: _Optional[str] = ..., selection: _Optional[_Iterable[_Union[Slice, _Mapping]]] = ..., bulk: _Optional[bool] = ...) -> None: ...

class ReadSlabSharedRequest(_message.Message):
    __slots__ = ("read", "attach", "release", "destination")
    READ_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    read: ReadSlabRequest
    attach: SharedAttach
    release: SharedRelease
    destination: SharedDestination
    def __init__(self, read: _Optional[_Union[ReadSlabRequest, _Mapping]] = ..., attach: _Optional[_Union[SharedAttach, _Mapping]] = ..., release: _Optional[_Union[SharedRelease, _Mapping]] = ..., destination: _Optional[_Union[SharedDestination, _Mapping]] = ...) -> None: ...

class SharedAttach(_message.Message):
    __slots__ = ("attached",)
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    attached: bool
    def __init__(self, attached: _Optional[bool] = ...) -> None: ...

class SharedRelease(_message.Message):
    __slots__ = ("blocks",)
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    def __init__(self, blocks: _Optional[int] = ...) -> None: ...

class ReadSlabSmallRequest(_message.Message):
    __slots__ = ("path", "selection")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    path: str
    selection: _containers.RepeatedCompositeFieldContainer[Slice]
    def __init__(self, path: _Optional[str] = ..., selection: _Optional[_Iterable[_Union[Slice, _Mapping]]] = ...) -> None: ...

class ReadSlabSmallResponse(_message.Message):
    __slots__ = ("header", "blocks")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    header: SlabHeader
    blocks: _containers.RepeatedCompositeFieldContainer[Block]
    def __init__(self, header: _Optional[_Union[SlabHeader, _Mapping]] = ..., blocks: _Optional[_Iterable[_Union[Block, _Mapping]]] = ...) -> None: ...

class OpenSmallReadsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class OpenSmallReadsResponse(_message.Message):
    __slots__ = ("offer", "max_request_bytes", "idle_timeout_ms", "lifetime_ms")
    OFFER_FIELD_NUMBER: _ClassVar[int]
    MAX_REQUEST_BYTES_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    LIFETIME_MS_FIELD_NUMBER: _ClassVar[int]
    offer: BulkOffer
    max_request_bytes: int
    idle_timeout_ms: int
    lifetime_ms: int
    def __init__(self, offer: _Optional[_Union[BulkOffer, _Mapping]] = ..., max_request_bytes: _Optional[int] = ..., idle_timeout_ms: _Optional[int] = ..., lifetime_ms: _Optional[int] = ...) -> None: ...

class SmallReadsRequest(_message.Message):
    __slots__ = ("read", "timeout_ms")
    READ_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    read: ReadSlabSmallRequest
    timeout_ms: int
    def __init__(self, read: _Optional[_Union[ReadSlabSmallRequest, _Mapping]] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class SmallReadsResponse(_message.Message):
    __slots__ = ("read", "code", "message")
    READ_FIELD_NUMBER: _ClassVar[int]
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    read: ReadSlabSmallResponse
    code: int
    message: str
    def __init__(self, read: _Optional[_Union[ReadSlabSmallResponse, _Mapping]] = ..., code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ReadSlabResponse(_message.Message):
    __slots__ = ("header", "block")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    header: SlabHeader
    block: Block
    def __init__(self, header: _Optional[_Union[SlabHeader, _Mapping]] = ..., block: _Optional[_Union[Block, _Mapping]] = ...) -> None: ...

class ReadSlabSharedResponse(_message.Message):
    __slots__ = ("header", "block", "end")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    header: SlabHeader
    block: Block
    end: SlabEnd
    def __init__(self, header: _Optional[_Union[SlabHeader, _Mapping]] = ..., block: _Optional[_Union[Block, _Mapping]] = ..., end: _Optional[_Union[SlabEnd, _Mapping]] = ...) -> None: ...

class SlabEnd(_message.Message):
    __slots__ = ("destination_elements",)
    DESTINATION_ELEMENTS_FIELD_NUMBER: _ClassVar[int]
    destination_elements: int
    def __init__(self, destination_elements: _Optional[int] = ...) -> None: ...

class WriteSlabHeader(_message.Message):
    __slots__ = ("path", "selection")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    path: str
    selection: _containers.RepeatedCompositeFieldContainer[Slice]
    def __init__(self, path: _Optional[str] = ..., selection: _Optional[_Iterable[_Union[Slice, _Mapping]]] = ...) -> None: ...

class WriteSlabRequest(_message.Message):
    __slots__ = ("header", "block")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    header: WriteSlabHeader
    block: Block
    def __init__(self, header: _Optional[_Union[WriteSlabHeader, _Mapping]] = ..., block: _Optional[_Union[Block, _Mapping]] = ...) -> None: ...

class WriteSlabResponse(_message.Message):
    __slots__ = ("chunks_written", "bytes_written")
    CHUNKS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    chunks_written: int
    bytes_written: int
    def __init__(self, chunks_written: _Optional[int] = ..., bytes_written: _Optional[int] = ...) -> None: ...

class WriteSlabSharedRequest(_message.Message):
    __slots__ = ("path", "selection", "source")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SELECTION_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    path: str
    selection: _containers.RepeatedCompositeFieldContainer[Slice]
    source: SharedDestination
    def __init__(self, path: _Optional[str] = ..., selection: _Optional[_Iterable[_Union[Slice, _Mapping]]] = ..., source: _Optional[_Union[SharedDestination, _Mapping]] = ...) -> None: ...

class WriteSlabSharedResponse(_message.Message):
    __slots__ = ("source", "chunks_written", "bytes_written")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    source: SharedDestinationAnswer
    chunks_written: int
    bytes_written: int
    def __init__(self, source: _Optional[_Union[SharedDestinationAnswer, _Mapping]] = ..., chunks_written: _Optional[int] = ..., bytes_written: _Optional[int] = ...) -> None: ...

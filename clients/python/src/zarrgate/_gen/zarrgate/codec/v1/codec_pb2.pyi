from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ChunkSpec(_message.Message):
    __slots__ = ("data_type", "chunk_shape", "fill_value", "codecs_json")
    DATA_TYPE_FIELD_NUMBER: _ClassVar[int]
    CHUNK_SHAPE_FIELD_NUMBER: _ClassVar[int]
    FILL_VALUE_FIELD_NUMBER: _ClassVar[int]
    CODECS_JSON_FIELD_NUMBER: _ClassVar[int]
    data_type: str
    chunk_shape: _containers.RepeatedScalarFieldContainer[int]
    fill_value: bytes
    codecs_json: str
    def __init__(self, data_type: _Optional[str] = ..., chunk_shape: _Optional[_Iterable[int]] = ..., fill_value: _Optional[bytes] = ..., codecs_json: _Optional[str] = ...) -> None: ...

class Chunk(_message.Message):
    __slots__ = ("data", "offsets", "missing", "shared_length")
    DATA_FIELD_NUMBER: _ClassVar[int]
    OFFSETS_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    SHARED_LENGTH_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    offsets: _containers.RepeatedScalarFieldContainer[int]
    missing: bool
    shared_length: int
    def __init__(self, data: _Optional[bytes] = ..., offsets: _Optional[_Iterable[int]] = ..., missing: _Optional[bool] = ..., shared_length: _Optional[int] = ...) -> None: ...

class EncodeRequest(_message.Message):
    __slots__ = ("spec", "chunks")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    spec: ChunkSpec
    chunks: _containers.RepeatedCompositeFieldContainer[Chunk]
    def __init__(self, spec: _Optional[_Union[ChunkSpec, _Mapping]] = ..., chunks: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ...) -> None: ...

class EncodeResponse(_message.Message):
    __slots__ = ("encoded",)
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    encoded: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, encoded: _Optional[_Iterable[bytes]] = ...) -> None: ...

class DecodeRequest(_message.Message):
    __slots__ = ("spec", "encoded", "selections", "refs", "shared_encoded", "outputs")
    SPEC_FIELD_NUMBER: _ClassVar[int]
    ENCODED_FIELD_NUMBER: _ClassVar[int]
    SELECTIONS_FIELD_NUMBER: _ClassVar[int]
    REFS_FIELD_NUMBER: _ClassVar[int]
    SHARED_ENCODED_FIELD_NUMBER: _ClassVar[int]
    OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    spec: ChunkSpec
    encoded: _containers.RepeatedScalarFieldContainer[bytes]
    selections: _containers.RepeatedCompositeFieldContainer[Selection]
    refs: _containers.RepeatedCompositeFieldContainer[ChunkRef]
    shared_encoded: _containers.RepeatedCompositeFieldContainer[SharedRegion]
    outputs: _containers.RepeatedCompositeFieldContainer[SharedRegion]
    def __init__(self, spec: _Optional[_Union[ChunkSpec, _Mapping]] = ..., encoded: _Optional[_Iterable[bytes]] = ..., selections: _Optional[_Iterable[_Union[Selection, _Mapping]]] = ..., refs: _Optional[_Iterable[_Union[ChunkRef, _Mapping]]] = ..., shared_encoded: _Optional[_Iterable[_Union[SharedRegion, _Mapping]]] = ..., outputs: _Optional[_Iterable[_Union[SharedRegion, _Mapping]]] = ...) -> None: ...

class SharedRegion(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class SharedMemoryOffer(_message.Message):
    __slots__ = ("path", "size", "token")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    token: bytes
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class SharedMemoryAnswer(_message.Message):
    __slots__ = ("attached", "reason")
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    attached: bool
    reason: str
    def __init__(self, attached: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class ChunkRef(_message.Message):
    __slots__ = ("key", "offset", "length", "generation")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    key: str
    offset: int
    length: int
    generation: str
    def __init__(self, key: _Optional[str] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ..., generation: _Optional[str] = ...) -> None: ...

class Selection(_message.Message):
    __slots__ = ("dims", "element_size")
    DIMS_FIELD_NUMBER: _ClassVar[int]
    ELEMENT_SIZE_FIELD_NUMBER: _ClassVar[int]
    dims: _containers.RepeatedCompositeFieldContainer[DimSelection]
    element_size: int
    def __init__(self, dims: _Optional[_Iterable[_Union[DimSelection, _Mapping]]] = ..., element_size: _Optional[int] = ...) -> None: ...

class DimSelection(_message.Message):
    __slots__ = ("start", "stop", "step")
    START_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    start: int
    stop: int
    step: int
    def __init__(self, start: _Optional[int] = ..., stop: _Optional[int] = ..., step: _Optional[int] = ...) -> None: ...

class DecodeResponse(_message.Message):
    __slots__ = ("chunks",)
    CHUNKS_FIELD_NUMBER: _ClassVar[int]
    chunks: _containers.RepeatedCompositeFieldContainer[Chunk]
    def __init__(self, chunks: _Optional[_Iterable[_Union[Chunk, _Mapping]]] = ...) -> None: ...

class BatchError(_message.Message):
    __slots__ = ("code", "message", "item_index")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    ITEM_INDEX_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    item_index: int
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., item_index: _Optional[int] = ...) -> None: ...

class ProcessRequest(_message.Message):
    __slots__ = ("id", "encode", "decode", "cancel", "attach", "deadline_unix_nanos", "trace_context", "request_id")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    ENCODE_FIELD_NUMBER: _ClassVar[int]
    DECODE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    DEADLINE_UNIX_NANOS_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    id: int
    encode: EncodeRequest
    decode: DecodeRequest
    cancel: CancelRequest
    attach: SharedMemoryOffer
    deadline_unix_nanos: int
    trace_context: _containers.ScalarMap[str, str]
    request_id: str
    def __init__(self, id: _Optional[int] = ..., encode: _Optional[_Union[EncodeRequest, _Mapping]] = ..., decode: _Optional[_Union[DecodeRequest, _Mapping]] = ..., cancel: _Optional[_Union[CancelRequest, _Mapping]] = ..., attach: _Optional[_Union[SharedMemoryOffer, _Mapping]] = ..., deadline_unix_nanos: _Optional[int] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., request_id: _Optional[str] = ...) -> None: ...

class CancelRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ProcessResponse(_message.Message):
    __slots__ = ("id", "encode", "decode", "error", "draining", "attached")
    ID_FIELD_NUMBER: _ClassVar[int]
    ENCODE_FIELD_NUMBER: _ClassVar[int]
    DECODE_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    DRAINING_FIELD_NUMBER: _ClassVar[int]
    ATTACHED_FIELD_NUMBER: _ClassVar[int]
    id: int
    encode: EncodeResponse
    decode: DecodeResponse
    error: BatchError
    draining: Draining
    attached: SharedMemoryAnswer
    def __init__(self, id: _Optional[int] = ..., encode: _Optional[_Union[EncodeResponse, _Mapping]] = ..., decode: _Optional[_Union[DecodeResponse, _Mapping]] = ..., error: _Optional[_Union[BatchError, _Mapping]] = ..., draining: _Optional[_Union[Draining, _Mapping]] = ..., attached: _Optional[_Union[SharedMemoryAnswer, _Mapping]] = ...) -> None: ...

class Draining(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ByteRange(_message.Message):
    __slots__ = ("bounded", "from_offset", "suffix_length")
    class Bounded(_message.Message):
        __slots__ = ("offset", "length")
        OFFSET_FIELD_NUMBER: _ClassVar[int]
        LENGTH_FIELD_NUMBER: _ClassVar[int]
        offset: int
        length: int
        def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...
    BOUNDED_FIELD_NUMBER: _ClassVar[int]
    FROM_OFFSET_FIELD_NUMBER: _ClassVar[int]
    SUFFIX_LENGTH_FIELD_NUMBER: _ClassVar[int]
    bounded: ByteRange.Bounded
    from_offset: int
    suffix_length: int
    def __init__(self, bounded: _Optional[_Union[ByteRange.Bounded, _Mapping]] = ..., from_offset: _Optional[int] = ..., suffix_length: _Optional[int] = ...) -> None: ...

class Condition(_message.Message):
    __slots__ = ("if_generation_match", "if_absent")
    IF_GENERATION_MATCH_FIELD_NUMBER: _ClassVar[int]
    IF_ABSENT_FIELD_NUMBER: _ClassVar[int]
    if_generation_match: str
    if_absent: bool
    def __init__(self, if_generation_match: _Optional[str] = ..., if_absent: _Optional[bool] = ...) -> None: ...

class Capabilities(_message.Message):
    __slots__ = ("readable", "writable", "listable", "partial_writes", "conditional_writes", "erasable")
    READABLE_FIELD_NUMBER: _ClassVar[int]
    WRITABLE_FIELD_NUMBER: _ClassVar[int]
    LISTABLE_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_WRITES_FIELD_NUMBER: _ClassVar[int]
    CONDITIONAL_WRITES_FIELD_NUMBER: _ClassVar[int]
    ERASABLE_FIELD_NUMBER: _ClassVar[int]
    readable: bool
    writable: bool
    listable: bool
    partial_writes: bool
    conditional_writes: bool
    erasable: bool
    def __init__(self, readable: _Optional[bool] = ..., writable: _Optional[bool] = ..., listable: _Optional[bool] = ..., partial_writes: _Optional[bool] = ..., conditional_writes: _Optional[bool] = ..., erasable: _Optional[bool] = ...) -> None: ...

class GetCapabilitiesRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetCapabilitiesResponse(_message.Message):
    __slots__ = ("capabilities",)
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    capabilities: Capabilities
    def __init__(self, capabilities: _Optional[_Union[Capabilities, _Mapping]] = ...) -> None: ...

class ValueInfo(_message.Message):
    __slots__ = ("generation", "size", "offset", "length")
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    generation: str
    size: int
    offset: int
    length: int
    def __init__(self, generation: _Optional[str] = ..., size: _Optional[int] = ..., offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class GetRequest(_message.Message):
    __slots__ = ("key", "range")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    key: str
    range: ByteRange
    def __init__(self, key: _Optional[str] = ..., range: _Optional[_Union[ByteRange, _Mapping]] = ...) -> None: ...

class GetResponse(_message.Message):
    __slots__ = ("info", "data")
    INFO_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    info: ValueInfo
    data: bytes
    def __init__(self, info: _Optional[_Union[ValueInfo, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class KeyRange(_message.Message):
    __slots__ = ("key", "range")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RANGE_FIELD_NUMBER: _ClassVar[int]
    key: str
    range: ByteRange
    def __init__(self, key: _Optional[str] = ..., range: _Optional[_Union[ByteRange, _Mapping]] = ...) -> None: ...

class GetPartialValuesRequest(_message.Message):
    __slots__ = ("ranges",)
    RANGES_FIELD_NUMBER: _ClassVar[int]
    ranges: _containers.RepeatedCompositeFieldContainer[KeyRange]
    def __init__(self, ranges: _Optional[_Iterable[_Union[KeyRange, _Mapping]]] = ...) -> None: ...

class PartialValuePart(_message.Message):
    __slots__ = ("index", "missing", "data", "last", "generation")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    index: int
    missing: bool
    data: bytes
    last: bool
    generation: str
    def __init__(self, index: _Optional[int] = ..., missing: _Optional[bool] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ..., generation: _Optional[str] = ...) -> None: ...

class GetPartialValuesResponse(_message.Message):
    __slots__ = ("parts",)
    PARTS_FIELD_NUMBER: _ClassVar[int]
    parts: _containers.RepeatedCompositeFieldContainer[PartialValuePart]
    def __init__(self, parts: _Optional[_Iterable[_Union[PartialValuePart, _Mapping]]] = ...) -> None: ...

class SharedSegment(_message.Message):
    __slots__ = ("path", "size", "token")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    path: str
    size: int
    token: bytes
    def __init__(self, path: _Optional[str] = ..., size: _Optional[int] = ..., token: _Optional[bytes] = ...) -> None: ...

class SharedValue(_message.Message):
    __slots__ = ("offset", "length")
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LENGTH_FIELD_NUMBER: _ClassVar[int]
    offset: int
    length: int
    def __init__(self, offset: _Optional[int] = ..., length: _Optional[int] = ...) -> None: ...

class GetPartialValuesSharedRequest(_message.Message):
    __slots__ = ("read", "attach", "release")
    READ_FIELD_NUMBER: _ClassVar[int]
    ATTACH_FIELD_NUMBER: _ClassVar[int]
    RELEASE_FIELD_NUMBER: _ClassVar[int]
    read: GetPartialValuesRequest
    attach: bool
    release: int
    def __init__(self, read: _Optional[_Union[GetPartialValuesRequest, _Mapping]] = ..., attach: _Optional[bool] = ..., release: _Optional[int] = ...) -> None: ...

class SharedValuePart(_message.Message):
    __slots__ = ("index", "missing", "data", "last", "generation", "shared")
    INDEX_FIELD_NUMBER: _ClassVar[int]
    MISSING_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    LAST_FIELD_NUMBER: _ClassVar[int]
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    SHARED_FIELD_NUMBER: _ClassVar[int]
    index: int
    missing: bool
    data: bytes
    last: bool
    generation: str
    shared: SharedValue
    def __init__(self, index: _Optional[int] = ..., missing: _Optional[bool] = ..., data: _Optional[bytes] = ..., last: _Optional[bool] = ..., generation: _Optional[str] = ..., shared: _Optional[_Union[SharedValue, _Mapping]] = ...) -> None: ...

class GetPartialValuesSharedResponse(_message.Message):
    __slots__ = ("parts", "segment")
    PARTS_FIELD_NUMBER: _ClassVar[int]
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    parts: _containers.RepeatedCompositeFieldContainer[SharedValuePart]
    segment: SharedSegment
    def __init__(self, parts: _Optional[_Iterable[_Union[SharedValuePart, _Mapping]]] = ..., segment: _Optional[_Union[SharedSegment, _Mapping]] = ...) -> None: ...

class SetHeader(_message.Message):
    __slots__ = ("key", "condition")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    key: str
    condition: Condition
    def __init__(self, key: _Optional[str] = ..., condition: _Optional[_Union[Condition, _Mapping]] = ...) -> None: ...

class SetRequest(_message.Message):
    __slots__ = ("header", "data")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    header: SetHeader
    data: bytes
    def __init__(self, header: _Optional[_Union[SetHeader, _Mapping]] = ..., data: _Optional[bytes] = ...) -> None: ...

class SetResponse(_message.Message):
    __slots__ = ("generation",)
    GENERATION_FIELD_NUMBER: _ClassVar[int]
    generation: str
    def __init__(self, generation: _Optional[str] = ...) -> None: ...

class PartialWrite(_message.Message):
    __slots__ = ("key", "offset", "data")
    KEY_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    key: str
    offset: int
    data: bytes
    def __init__(self, key: _Optional[str] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class SetPartialValuesRequest(_message.Message):
    __slots__ = ("writes",)
    WRITES_FIELD_NUMBER: _ClassVar[int]
    writes: _containers.RepeatedCompositeFieldContainer[PartialWrite]
    def __init__(self, writes: _Optional[_Iterable[_Union[PartialWrite, _Mapping]]] = ...) -> None: ...

class SetPartialValuesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EraseRequest(_message.Message):
    __slots__ = ("key", "condition")
    KEY_FIELD_NUMBER: _ClassVar[int]
    CONDITION_FIELD_NUMBER: _ClassVar[int]
    key: str
    condition: Condition
    def __init__(self, key: _Optional[str] = ..., condition: _Optional[_Union[Condition, _Mapping]] = ...) -> None: ...

class EraseResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EraseValuesRequest(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class EraseValuesResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ErasePrefixRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class ErasePrefixResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class ListPrefixRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class ListPrefixResponse(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ...) -> None: ...

class ListDirRequest(_message.Message):
    __slots__ = ("prefix",)
    PREFIX_FIELD_NUMBER: _ClassVar[int]
    prefix: str
    def __init__(self, prefix: _Optional[str] = ...) -> None: ...

class ListDirResponse(_message.Message):
    __slots__ = ("keys", "prefixes")
    KEYS_FIELD_NUMBER: _ClassVar[int]
    PREFIXES_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[str]
    prefixes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, keys: _Optional[_Iterable[str]] = ..., prefixes: _Optional[_Iterable[str]] = ...) -> None: ...

import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ToolErrorKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_ERROR_KIND_UNSPECIFIED: _ClassVar[ToolErrorKind]
    TOOL_ERROR_KIND_INVALID_ARGUMENTS: _ClassVar[ToolErrorKind]
    TOOL_ERROR_KIND_EXECUTION_FAILED: _ClassVar[ToolErrorKind]
    TOOL_ERROR_KIND_TIMED_OUT: _ClassVar[ToolErrorKind]
    TOOL_ERROR_KIND_UNAVAILABLE: _ClassVar[ToolErrorKind]
    TOOL_ERROR_KIND_DENIED: _ClassVar[ToolErrorKind]
    TOOL_ERROR_KIND_UNKNOWN_TOOL: _ClassVar[ToolErrorKind]
TOOL_ERROR_KIND_UNSPECIFIED: ToolErrorKind
TOOL_ERROR_KIND_INVALID_ARGUMENTS: ToolErrorKind
TOOL_ERROR_KIND_EXECUTION_FAILED: ToolErrorKind
TOOL_ERROR_KIND_TIMED_OUT: ToolErrorKind
TOOL_ERROR_KIND_UNAVAILABLE: ToolErrorKind
TOOL_ERROR_KIND_DENIED: ToolErrorKind
TOOL_ERROR_KIND_UNKNOWN_TOOL: ToolErrorKind

class ListToolsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListToolsResponse(_message.Message):
    __slots__ = ("tools", "tool_set_version", "call_stream")
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_SET_VERSION_FIELD_NUMBER: _ClassVar[int]
    CALL_STREAM_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[ToolDescriptor]
    tool_set_version: str
    call_stream: bool
    def __init__(self, tools: _Optional[_Iterable[_Union[ToolDescriptor, _Mapping]]] = ..., tool_set_version: _Optional[str] = ..., call_stream: _Optional[bool] = ...) -> None: ...

class ToolDescriptor(_message.Message):
    __slots__ = ("name", "description", "input_schema", "output_schema", "read_only", "idempotent", "destructive", "requires_approval", "read_keys", "write_keys", "default_timeout", "cache_ttl", "version", "result_fields")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    INPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_FIELD_NUMBER: _ClassVar[int]
    DESTRUCTIVE_FIELD_NUMBER: _ClassVar[int]
    REQUIRES_APPROVAL_FIELD_NUMBER: _ClassVar[int]
    READ_KEYS_FIELD_NUMBER: _ClassVar[int]
    WRITE_KEYS_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    CACHE_TTL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELDS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    input_schema: str
    output_schema: str
    read_only: bool
    idempotent: bool
    destructive: bool
    requires_approval: bool
    read_keys: _containers.RepeatedScalarFieldContainer[str]
    write_keys: _containers.RepeatedScalarFieldContainer[str]
    default_timeout: _duration_pb2.Duration
    cache_ttl: _duration_pb2.Duration
    version: str
    result_fields: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., input_schema: _Optional[str] = ..., output_schema: _Optional[str] = ..., read_only: _Optional[bool] = ..., idempotent: _Optional[bool] = ..., destructive: _Optional[bool] = ..., requires_approval: _Optional[bool] = ..., read_keys: _Optional[_Iterable[str]] = ..., write_keys: _Optional[_Iterable[str]] = ..., default_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., cache_ttl: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., version: _Optional[str] = ..., result_fields: _Optional[_Iterable[str]] = ...) -> None: ...

class CallToolRequest(_message.Message):
    __slots__ = ("call_id", "tool_name", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    tool_name: str
    arguments: str
    def __init__(self, call_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class CallToolResponse(_message.Message):
    __slots__ = ("result",)
    RESULT_FIELD_NUMBER: _ClassVar[int]
    result: ToolResult
    def __init__(self, result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class StreamToolRequest(_message.Message):
    __slots__ = ("call",)
    CALL_FIELD_NUMBER: _ClassVar[int]
    call: CallToolRequest
    def __init__(self, call: _Optional[_Union[CallToolRequest, _Mapping]] = ...) -> None: ...

class StreamToolResponse(_message.Message):
    __slots__ = ("progress", "result")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    progress: ToolProgress
    result: ToolResult
    def __init__(self, progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., result: _Optional[_Union[ToolResult, _Mapping]] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("progress", "total", "message")
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    progress: float
    total: float
    message: str
    def __init__(self, progress: _Optional[float] = ..., total: _Optional[float] = ..., message: _Optional[str] = ...) -> None: ...

class ToolResult(_message.Message):
    __slots__ = ("call_id", "output", "error", "handler_duration")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    HANDLER_DURATION_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    output: str
    error: ToolError
    handler_duration: _duration_pb2.Duration
    def __init__(self, call_id: _Optional[str] = ..., output: _Optional[str] = ..., error: _Optional[_Union[ToolError, _Mapping]] = ..., handler_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ToolError(_message.Message):
    __slots__ = ("kind", "message")
    KIND_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    kind: ToolErrorKind
    message: str
    def __init__(self, kind: _Optional[_Union[ToolErrorKind, str]] = ..., message: _Optional[str] = ...) -> None: ...

class CallToolsRequest(_message.Message):
    __slots__ = ("calls", "cancels")
    CALLS_FIELD_NUMBER: _ClassVar[int]
    CANCELS_FIELD_NUMBER: _ClassVar[int]
    calls: _containers.RepeatedCompositeFieldContainer[StreamedCall]
    cancels: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, calls: _Optional[_Iterable[_Union[StreamedCall, _Mapping]]] = ..., cancels: _Optional[_Iterable[int]] = ...) -> None: ...

class StreamedCall(_message.Message):
    __slots__ = ("id", "call", "timeout", "metadata")
    class MetadataEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: bytes
        def __init__(self, key: _Optional[str] = ..., value: _Optional[bytes] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    id: int
    call: CallToolRequest
    timeout: _duration_pb2.Duration
    metadata: _containers.ScalarMap[str, bytes]
    def __init__(self, id: _Optional[int] = ..., call: _Optional[_Union[CallToolRequest, _Mapping]] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., metadata: _Optional[_Mapping[str, bytes]] = ...) -> None: ...

class CallToolsResponse(_message.Message):
    __slots__ = ("answers",)
    ANSWERS_FIELD_NUMBER: _ClassVar[int]
    answers: _containers.RepeatedCompositeFieldContainer[CallAnswer]
    def __init__(self, answers: _Optional[_Iterable[_Union[CallAnswer, _Mapping]]] = ...) -> None: ...

class CallAnswer(_message.Message):
    __slots__ = ("id", "result", "status")
    ID_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    id: int
    result: ToolResult
    status: CallStatus
    def __init__(self, id: _Optional[int] = ..., result: _Optional[_Union[ToolResult, _Mapping]] = ..., status: _Optional[_Union[CallStatus, _Mapping]] = ...) -> None: ...

class CallStatus(_message.Message):
    __slots__ = ("code", "message")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class GetIdentityKeysRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetIdentityKeysResponse(_message.Message):
    __slots__ = ("jwks", "max_age")
    JWKS_FIELD_NUMBER: _ClassVar[int]
    MAX_AGE_FIELD_NUMBER: _ClassVar[int]
    jwks: str
    max_age: _duration_pb2.Duration
    def __init__(self, jwks: _Optional[str] = ..., max_age: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

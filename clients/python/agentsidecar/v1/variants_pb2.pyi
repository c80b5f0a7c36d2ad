import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class VariantState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VARIANT_STATE_UNSPECIFIED: _ClassVar[VariantState]
    VARIANT_STATE_IN_ROTATION: _ClassVar[VariantState]
    VARIANT_STATE_IDLE: _ClassVar[VariantState]
    VARIANT_STATE_ROLLED_BACK: _ClassVar[VariantState]
    VARIANT_STATE_SHADOW: _ClassVar[VariantState]
VARIANT_STATE_UNSPECIFIED: VariantState
VARIANT_STATE_IN_ROTATION: VariantState
VARIANT_STATE_IDLE: VariantState
VARIANT_STATE_ROLLED_BACK: VariantState
VARIANT_STATE_SHADOW: VariantState

class ListVariantsRequest(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: str
    def __init__(self, profile: _Optional[str] = ...) -> None: ...

class ListVariantsResponse(_message.Message):
    __slots__ = ("profiles",)
    PROFILES_FIELD_NUMBER: _ClassVar[int]
    profiles: _containers.RepeatedCompositeFieldContainer[ProfileVariants]
    def __init__(self, profiles: _Optional[_Iterable[_Union[ProfileVariants, _Mapping]]] = ...) -> None: ...

class SetVariantWeightsRequest(_message.Message):
    __slots__ = ("profile", "weights", "reason")
    class WeightsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    WEIGHTS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    profile: str
    weights: _containers.ScalarMap[str, float]
    reason: str
    def __init__(self, profile: _Optional[str] = ..., weights: _Optional[_Mapping[str, float]] = ..., reason: _Optional[str] = ...) -> None: ...

class SetVariantWeightsResponse(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: ProfileVariants
    def __init__(self, profile: _Optional[_Union[ProfileVariants, _Mapping]] = ...) -> None: ...

class PromoteVariantRequest(_message.Message):
    __slots__ = ("profile", "variant", "reason")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    profile: str
    variant: str
    reason: str
    def __init__(self, profile: _Optional[str] = ..., variant: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class PromoteVariantResponse(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: ProfileVariants
    def __init__(self, profile: _Optional[_Union[ProfileVariants, _Mapping]] = ...) -> None: ...

class RollBackVariantRequest(_message.Message):
    __slots__ = ("profile", "variant", "reason")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    VARIANT_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    profile: str
    variant: str
    reason: str
    def __init__(self, profile: _Optional[str] = ..., variant: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RollBackVariantResponse(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: ProfileVariants
    def __init__(self, profile: _Optional[_Union[ProfileVariants, _Mapping]] = ...) -> None: ...

class ResetVariantsRequest(_message.Message):
    __slots__ = ("profile", "reason")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    profile: str
    reason: str
    def __init__(self, profile: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class ResetVariantsResponse(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: ProfileVariants
    def __init__(self, profile: _Optional[_Union[ProfileVariants, _Mapping]] = ...) -> None: ...

class ProfileVariants(_message.Message):
    __slots__ = ("profile", "variants", "change", "window")
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    VARIANTS_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    WINDOW_FIELD_NUMBER: _ClassVar[int]
    profile: str
    variants: _containers.RepeatedCompositeFieldContainer[VariantStatus]
    change: VariantChange
    window: _duration_pb2.Duration
    def __init__(self, profile: _Optional[str] = ..., variants: _Optional[_Iterable[_Union[VariantStatus, _Mapping]]] = ..., change: _Optional[_Union[VariantChange, _Mapping]] = ..., window: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class VariantChange(_message.Message):
    __slots__ = ("principal", "time", "action", "reason")
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    principal: str
    time: _timestamp_pb2.Timestamp
    action: str
    reason: str
    def __init__(self, principal: _Optional[str] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., action: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class VariantStatus(_message.Message):
    __slots__ = ("name", "state", "stable", "configured_weight", "weight", "session_share", "rolled_back_reason", "shadow_share", "runs", "failed_runs", "p50", "p95")
    NAME_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    STABLE_FIELD_NUMBER: _ClassVar[int]
    CONFIGURED_WEIGHT_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_FIELD_NUMBER: _ClassVar[int]
    SESSION_SHARE_FIELD_NUMBER: _ClassVar[int]
    ROLLED_BACK_REASON_FIELD_NUMBER: _ClassVar[int]
    SHADOW_SHARE_FIELD_NUMBER: _ClassVar[int]
    RUNS_FIELD_NUMBER: _ClassVar[int]
    FAILED_RUNS_FIELD_NUMBER: _ClassVar[int]
    P50_FIELD_NUMBER: _ClassVar[int]
    P95_FIELD_NUMBER: _ClassVar[int]
    name: str
    state: VariantState
    stable: bool
    configured_weight: float
    weight: float
    session_share: float
    rolled_back_reason: str
    shadow_share: float
    runs: int
    failed_runs: int
    p50: _duration_pb2.Duration
    p95: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., state: _Optional[_Union[VariantState, str]] = ..., stable: _Optional[bool] = ..., configured_weight: _Optional[float] = ..., weight: _Optional[float] = ..., session_share: _Optional[float] = ..., rolled_back_reason: _Optional[str] = ..., shadow_share: _Optional[float] = ..., runs: _Optional[int] = ..., failed_runs: _Optional[int] = ..., p50: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., p95: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

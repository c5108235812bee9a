from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TransferState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TRANSFER_UNKNOWN: _ClassVar[TransferState]
    TRANSFER_BEGIN: _ClassVar[TransferState]
    TRANSFER_MIDDLE: _ClassVar[TransferState]
    TRANSFER_END: _ClassVar[TransferState]
TRANSFER_UNKNOWN: TransferState
TRANSFER_BEGIN: TransferState
TRANSFER_MIDDLE: TransferState
TRANSFER_END: TransferState

class Observation(_message.Message):
    __slots__ = ("transfer_state", "data")
    TRANSFER_STATE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    transfer_state: TransferState
    data: bytes
    def __init__(self, transfer_state: _Optional[_Union[TransferState, str]] = ..., data: _Optional[bytes] = ...) -> None: ...

class Actions(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class PolicySetup(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: bytes
    def __init__(self, data: _Optional[bytes] = ...) -> None: ...

class Empty(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

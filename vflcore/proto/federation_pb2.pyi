from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TensorKey(_message.Message):
    __slots__ = ("job_id", "round", "batch", "name")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ROUND_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    round: int
    batch: int
    name: str
    def __init__(self, job_id: _Optional[str] = ..., round: _Optional[int] = ..., batch: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class TensorChunk(_message.Message):
    __slots__ = ("key", "dtype", "shape", "total_bytes", "offset", "data")
    KEY_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    key: TensorKey
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    total_bytes: int
    offset: int
    data: bytes
    def __init__(self, key: _Optional[_Union[TensorKey, _Mapping]] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ..., total_bytes: _Optional[int] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ...) -> None: ...

class TensorRequest(_message.Message):
    __slots__ = ("key", "count", "names")
    KEY_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    NAMES_FIELD_NUMBER: _ClassVar[int]
    key: TensorKey
    count: int
    names: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, key: _Optional[_Union[TensorKey, _Mapping]] = ..., count: _Optional[int] = ..., names: _Optional[_Iterable[str]] = ...) -> None: ...

class SendAck(_message.Message):
    __slots__ = ("key", "bytes_received", "tensors")
    KEY_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    key: TensorKey
    bytes_received: int
    tensors: int
    def __init__(self, key: _Optional[_Union[TensorKey, _Mapping]] = ..., bytes_received: _Optional[int] = ..., tensors: _Optional[int] = ...) -> None: ...

class JoinRequest(_message.Message):
    __slots__ = ("party", "num_rows", "num_features", "id_set_digest", "client_version", "cached_alignments")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_FEATURES_FIELD_NUMBER: _ClassVar[int]
    ID_SET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CACHED_ALIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    party: int
    num_rows: int
    num_features: int
    id_set_digest: bytes
    client_version: str
    cached_alignments: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, party: _Optional[int] = ..., num_rows: _Optional[int] = ..., num_features: _Optional[int] = ..., id_set_digest: _Optional[bytes] = ..., client_version: _Optional[str] = ..., cached_alignments: _Optional[_Iterable[bytes]] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("job_id", "algorithm", "task", "seed", "batch_size", "epochs", "embedding_dim", "bottom_hidden", "optimizer", "learning_rate", "test_fraction", "num_rows", "passive_parties", "algorithm_options", "num_outputs", "weight_decay")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    BATCH_SIZE_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_DIM_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_HIDDEN_FIELD_NUMBER: _ClassVar[int]
    OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    TEST_FRACTION_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    PASSIVE_PARTIES_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_OPTIONS_FIELD_NUMBER: _ClassVar[int]
    NUM_OUTPUTS_FIELD_NUMBER: _ClassVar[int]
    WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    algorithm: str
    task: str
    seed: int
    batch_size: int
    epochs: int
    embedding_dim: int
    bottom_hidden: _containers.RepeatedScalarFieldContainer[int]
    optimizer: str
    learning_rate: float
    test_fraction: float
    num_rows: int
    passive_parties: _containers.RepeatedScalarFieldContainer[int]
    algorithm_options: str
    num_outputs: int
    weight_decay: float
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., task: _Optional[str] = ..., seed: _Optional[int] = ..., batch_size: _Optional[int] = ..., epochs: _Optional[int] = ..., embedding_dim: _Optional[int] = ..., bottom_hidden: _Optional[_Iterable[int]] = ..., optimizer: _Optional[str] = ..., learning_rate: _Optional[float] = ..., test_fraction: _Optional[float] = ..., num_rows: _Optional[int] = ..., passive_parties: _Optional[_Iterable[int]] = ..., algorithm_options: _Optional[str] = ..., num_outputs: _Optional[int] = ..., weight_decay: _Optional[float] = ...) -> None: ...

class JoinReply(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: JobSpec
    def __init__(self, job: _Optional[_Union[JobSpec, _Mapping]] = ...) -> None: ...

class SubscribeRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class Align(_message.Message):
    __slots__ = ("alignment_key", "run_psi")
    ALIGNMENT_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_PSI_FIELD_NUMBER: _ClassVar[int]
    alignment_key: bytes
    run_psi: bool
    def __init__(self, alignment_key: _Optional[bytes] = ..., run_psi: _Optional[bool] = ...) -> None: ...

class TrainEpoch(_message.Message):
    __slots__ = ("epoch",)
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    def __init__(self, epoch: _Optional[int] = ...) -> None: ...

class Evaluate(_message.Message):
    __slots__ = ("epoch", "rows")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    rows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, epoch: _Optional[int] = ..., rows: _Optional[_Iterable[int]] = ...) -> None: ...

class Infer(_message.Message):
    __slots__ = ("request_id", "rows")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    rows: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, request_id: _Optional[str] = ..., rows: _Optional[_Iterable[int]] = ...) -> None: ...

class Finish(_message.Message):
    __slots__ = ("success", "message")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    success: bool
    message: str
    def __init__(self, success: _Optional[bool] = ..., message: _Optional[str] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "train_epoch", "evaluate", "infer", "finish", "align", "share_head")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRAIN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_FIELD_NUMBER: _ClassVar[int]
    INFER_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    ALIGN_FIELD_NUMBER: _ClassVar[int]
    SHARE_HEAD_FIELD_NUMBER: _ClassVar[int]
    task_id: int
    train_epoch: TrainEpoch
    evaluate: Evaluate
    infer: Infer
    finish: Finish
    align: Align
    share_head: ShareHead
    def __init__(self, task_id: _Optional[int] = ..., train_epoch: _Optional[_Union[TrainEpoch, _Mapping]] = ..., evaluate: _Optional[_Union[Evaluate, _Mapping]] = ..., infer: _Optional[_Union[Infer, _Mapping]] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ..., align: _Optional[_Union[Align, _Mapping]] = ..., share_head: _Optional[_Union[ShareHead, _Mapping]] = ...) -> None: ...

class ShareHead(_message.Message):
    __slots__ = ("round",)
    ROUND_FIELD_NUMBER: _ClassVar[int]
    round: int
    def __init__(self, round: _Optional[int] = ...) -> None: ...

class HeartbeatRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class HeartbeatReply(_message.Message):
    __slots__ = ("party", "job_id", "state")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    party: int
    job_id: str
    state: str
    def __init__(self, party: _Optional[int] = ..., job_id: _Optional[str] = ..., state: _Optional[str] = ...) -> None: ...

class FailureReport(_message.Message):
    __slots__ = ("job_id", "task_id", "message")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    task_id: int
    message: str
    def __init__(self, job_id: _Optional[str] = ..., task_id: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class FailureAck(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

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
    __slots__ = ("party", "num_rows", "num_features", "id_set_digest", "client_version", "cached_alignments", "job_id", "checkpoints", "resumable_psi")
    PARTY_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_FEATURES_FIELD_NUMBER: _ClassVar[int]
    ID_SET_DIGEST_FIELD_NUMBER: _ClassVar[int]
    CLIENT_VERSION_FIELD_NUMBER: _ClassVar[int]
    CACHED_ALIGNMENTS_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    RESUMABLE_PSI_FIELD_NUMBER: _ClassVar[int]
    party: int
    num_rows: int
    num_features: int
    id_set_digest: bytes
    client_version: str
    cached_alignments: _containers.RepeatedScalarFieldContainer[bytes]
    job_id: str
    checkpoints: _containers.RepeatedCompositeFieldContainer[Position]
    resumable_psi: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, party: _Optional[int] = ..., num_rows: _Optional[int] = ..., num_features: _Optional[int] = ..., id_set_digest: _Optional[bytes] = ..., client_version: _Optional[str] = ..., cached_alignments: _Optional[_Iterable[bytes]] = ..., job_id: _Optional[str] = ..., checkpoints: _Optional[_Iterable[_Union[Position, _Mapping]]] = ..., resumable_psi: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Position(_message.Message):
    __slots__ = ("epoch", "batch")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    batch: int
    def __init__(self, epoch: _Optional[int] = ..., batch: _Optional[int] = ...) -> None: ...

class NextJobRequest(_message.Message):
    __slots__ = ("wait_s",)
    WAIT_S_FIELD_NUMBER: _ClassVar[int]
    wait_s: float
    def __init__(self, wait_s: _Optional[float] = ...) -> None: ...

class NextJobReply(_message.Message):
    __slots__ = ("job", "dataset", "model")
    JOB_FIELD_NUMBER: _ClassVar[int]
    DATASET_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    job: JobSpec
    dataset: str
    model: str
    def __init__(self, job: _Optional[_Union[JobSpec, _Mapping]] = ..., dataset: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class JobSpec(_message.Message):
    __slots__ = ("job_id", "algorithm", "task", "seed", "batch_size", "epochs", "embedding_dim", "bottom_hidden", "optimizer", "learning_rate", "test_fraction", "num_rows", "passive_parties", "algorithm_options", "num_outputs", "weight_decay", "checkpoint_every_steps", "wire_codec", "wire_codec_up", "wire_codec_down", "privacy", "top_optimizer", "top_learning_rate", "top_weight_decay", "bottom_optimizer", "bottom_learning_rate", "bottom_weight_decay", "validation_fraction", "patience", "eval_every_rounds")
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
    CHECKPOINT_EVERY_STEPS_FIELD_NUMBER: _ClassVar[int]
    WIRE_CODEC_FIELD_NUMBER: _ClassVar[int]
    WIRE_CODEC_UP_FIELD_NUMBER: _ClassVar[int]
    WIRE_CODEC_DOWN_FIELD_NUMBER: _ClassVar[int]
    PRIVACY_FIELD_NUMBER: _ClassVar[int]
    TOP_OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    TOP_LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    TOP_WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_OPTIMIZER_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_LEARNING_RATE_FIELD_NUMBER: _ClassVar[int]
    BOTTOM_WEIGHT_DECAY_FIELD_NUMBER: _ClassVar[int]
    VALIDATION_FRACTION_FIELD_NUMBER: _ClassVar[int]
    PATIENCE_FIELD_NUMBER: _ClassVar[int]
    EVAL_EVERY_ROUNDS_FIELD_NUMBER: _ClassVar[int]
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
    checkpoint_every_steps: int
    wire_codec: str
    wire_codec_up: str
    wire_codec_down: str
    privacy: PrivacySpec
    top_optimizer: str
    top_learning_rate: float
    top_weight_decay: float
    bottom_optimizer: str
    bottom_learning_rate: float
    bottom_weight_decay: float
    validation_fraction: float
    patience: int
    eval_every_rounds: int
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., task: _Optional[str] = ..., seed: _Optional[int] = ..., batch_size: _Optional[int] = ..., epochs: _Optional[int] = ..., embedding_dim: _Optional[int] = ..., bottom_hidden: _Optional[_Iterable[int]] = ..., optimizer: _Optional[str] = ..., learning_rate: _Optional[float] = ..., test_fraction: _Optional[float] = ..., num_rows: _Optional[int] = ..., passive_parties: _Optional[_Iterable[int]] = ..., algorithm_options: _Optional[str] = ..., num_outputs: _Optional[int] = ..., weight_decay: _Optional[float] = ..., checkpoint_every_steps: _Optional[int] = ..., wire_codec: _Optional[str] = ..., wire_codec_up: _Optional[str] = ..., wire_codec_down: _Optional[str] = ..., privacy: _Optional[_Union[PrivacySpec, _Mapping]] = ..., top_optimizer: _Optional[str] = ..., top_learning_rate: _Optional[float] = ..., top_weight_decay: _Optional[float] = ..., bottom_optimizer: _Optional[str] = ..., bottom_learning_rate: _Optional[float] = ..., bottom_weight_decay: _Optional[float] = ..., validation_fraction: _Optional[float] = ..., patience: _Optional[int] = ..., eval_every_rounds: _Optional[int] = ...) -> None: ...

class PrivacySpec(_message.Message):
    __slots__ = ("label_defence", "marvell_sum_kl", "gradient_noise", "label_dp_epsilon", "embedding_clip", "embedding_noise_multiplier", "dp_delta", "active_embedding_clip", "active_embedding_noise_multiplier", "noise_persistence")
    LABEL_DEFENCE_FIELD_NUMBER: _ClassVar[int]
    MARVELL_SUM_KL_FIELD_NUMBER: _ClassVar[int]
    GRADIENT_NOISE_FIELD_NUMBER: _ClassVar[int]
    LABEL_DP_EPSILON_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_CLIP_FIELD_NUMBER: _ClassVar[int]
    EMBEDDING_NOISE_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    DP_DELTA_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_EMBEDDING_CLIP_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_EMBEDDING_NOISE_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    NOISE_PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    label_defence: str
    marvell_sum_kl: float
    gradient_noise: float
    label_dp_epsilon: float
    embedding_clip: float
    embedding_noise_multiplier: float
    dp_delta: float
    active_embedding_clip: float
    active_embedding_noise_multiplier: float
    noise_persistence: float
    def __init__(self, label_defence: _Optional[str] = ..., marvell_sum_kl: _Optional[float] = ..., gradient_noise: _Optional[float] = ..., label_dp_epsilon: _Optional[float] = ..., embedding_clip: _Optional[float] = ..., embedding_noise_multiplier: _Optional[float] = ..., dp_delta: _Optional[float] = ..., active_embedding_clip: _Optional[float] = ..., active_embedding_noise_multiplier: _Optional[float] = ..., noise_persistence: _Optional[float] = ...) -> None: ...

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
    __slots__ = ("alignment_key", "run_psi", "chunk_ids", "server_ids", "resume", "upload_from", "download_from")
    ALIGNMENT_KEY_FIELD_NUMBER: _ClassVar[int]
    RUN_PSI_FIELD_NUMBER: _ClassVar[int]
    CHUNK_IDS_FIELD_NUMBER: _ClassVar[int]
    SERVER_IDS_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    UPLOAD_FROM_FIELD_NUMBER: _ClassVar[int]
    DOWNLOAD_FROM_FIELD_NUMBER: _ClassVar[int]
    alignment_key: bytes
    run_psi: bool
    chunk_ids: int
    server_ids: int
    resume: bool
    upload_from: int
    download_from: int
    def __init__(self, alignment_key: _Optional[bytes] = ..., run_psi: _Optional[bool] = ..., chunk_ids: _Optional[int] = ..., server_ids: _Optional[int] = ..., resume: _Optional[bool] = ..., upload_from: _Optional[int] = ..., download_from: _Optional[int] = ...) -> None: ...

class TrainEpoch(_message.Message):
    __slots__ = ("epoch", "first_batch")
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FIRST_BATCH_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    first_batch: int
    def __init__(self, epoch: _Optional[int] = ..., first_batch: _Optional[int] = ...) -> None: ...

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
    __slots__ = ("success", "message", "rejoin")
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REJOIN_FIELD_NUMBER: _ClassVar[int]
    success: bool
    message: str
    rejoin: bool
    def __init__(self, success: _Optional[bool] = ..., message: _Optional[str] = ..., rejoin: _Optional[bool] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("position", "best")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    BEST_FIELD_NUMBER: _ClassVar[int]
    position: Position
    best: Position
    def __init__(self, position: _Optional[_Union[Position, _Mapping]] = ..., best: _Optional[_Union[Position, _Mapping]] = ...) -> None: ...

class Restore(_message.Message):
    __slots__ = ("position", "serve")
    POSITION_FIELD_NUMBER: _ClassVar[int]
    SERVE_FIELD_NUMBER: _ClassVar[int]
    position: Position
    serve: bool
    def __init__(self, position: _Optional[_Union[Position, _Mapping]] = ..., serve: _Optional[bool] = ...) -> None: ...

class HoldOut(_message.Message):
    __slots__ = ("rows", "num_rows")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    NUM_ROWS_FIELD_NUMBER: _ClassVar[int]
    rows: bytes
    num_rows: int
    def __init__(self, rows: _Optional[bytes] = ..., num_rows: _Optional[int] = ...) -> None: ...

class Task(_message.Message):
    __slots__ = ("task_id", "train_epoch", "evaluate", "infer", "finish", "align", "share_head", "checkpoint", "restore", "hold_out")
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TRAIN_EPOCH_FIELD_NUMBER: _ClassVar[int]
    EVALUATE_FIELD_NUMBER: _ClassVar[int]
    INFER_FIELD_NUMBER: _ClassVar[int]
    FINISH_FIELD_NUMBER: _ClassVar[int]
    ALIGN_FIELD_NUMBER: _ClassVar[int]
    SHARE_HEAD_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    RESTORE_FIELD_NUMBER: _ClassVar[int]
    HOLD_OUT_FIELD_NUMBER: _ClassVar[int]
    task_id: int
    train_epoch: TrainEpoch
    evaluate: Evaluate
    infer: Infer
    finish: Finish
    align: Align
    share_head: ShareHead
    checkpoint: Checkpoint
    restore: Restore
    hold_out: HoldOut
    def __init__(self, task_id: _Optional[int] = ..., train_epoch: _Optional[_Union[TrainEpoch, _Mapping]] = ..., evaluate: _Optional[_Union[Evaluate, _Mapping]] = ..., infer: _Optional[_Union[Infer, _Mapping]] = ..., finish: _Optional[_Union[Finish, _Mapping]] = ..., align: _Optional[_Union[Align, _Mapping]] = ..., share_head: _Optional[_Union[ShareHead, _Mapping]] = ..., checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., restore: _Optional[_Union[Restore, _Mapping]] = ..., hold_out: _Optional[_Union[HoldOut, _Mapping]] = ...) -> None: ...

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

class SubmitRequest(_message.Message):
    __slots__ = ("job_document",)
    JOB_DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    job_document: str
    def __init__(self, job_document: _Optional[str] = ...) -> None: ...

class JobRef(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class ListRequest(_message.Message):
    __slots__ = ("states", "limit")
    STATES_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    states: _containers.RepeatedScalarFieldContainer[str]
    limit: int
    def __init__(self, states: _Optional[_Iterable[str]] = ..., limit: _Optional[int] = ...) -> None: ...

class EpochMetrics(_message.Message):
    __slots__ = ("epoch", "train_loss", "test_loss", "metrics", "seconds", "wire_bytes")
    class MetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    TRAIN_LOSS_FIELD_NUMBER: _ClassVar[int]
    TEST_LOSS_FIELD_NUMBER: _ClassVar[int]
    METRICS_FIELD_NUMBER: _ClassVar[int]
    SECONDS_FIELD_NUMBER: _ClassVar[int]
    WIRE_BYTES_FIELD_NUMBER: _ClassVar[int]
    epoch: int
    train_loss: float
    test_loss: float
    metrics: _containers.ScalarMap[str, float]
    seconds: float
    wire_bytes: int
    def __init__(self, epoch: _Optional[int] = ..., train_loss: _Optional[float] = ..., test_loss: _Optional[float] = ..., metrics: _Optional[_Mapping[str, float]] = ..., seconds: _Optional[float] = ..., wire_bytes: _Optional[int] = ...) -> None: ...

class JobInfo(_message.Message):
    __slots__ = ("job_id", "algorithm", "state", "submitter", "submitted_at", "started_at", "ended_at", "error", "epochs_done", "epochs", "final_metrics", "job_document", "history", "served", "serving", "state_message", "student_metrics")
    class FinalMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    class StudentMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    ALGORITHM_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    SUBMITTER_FIELD_NUMBER: _ClassVar[int]
    SUBMITTED_AT_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_DONE_FIELD_NUMBER: _ClassVar[int]
    EPOCHS_FIELD_NUMBER: _ClassVar[int]
    FINAL_METRICS_FIELD_NUMBER: _ClassVar[int]
    JOB_DOCUMENT_FIELD_NUMBER: _ClassVar[int]
    HISTORY_FIELD_NUMBER: _ClassVar[int]
    SERVED_FIELD_NUMBER: _ClassVar[int]
    SERVING_FIELD_NUMBER: _ClassVar[int]
    STATE_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STUDENT_METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    algorithm: str
    state: str
    submitter: str
    submitted_at: float
    started_at: float
    ended_at: float
    error: str
    epochs_done: int
    epochs: int
    final_metrics: _containers.ScalarMap[str, float]
    job_document: str
    history: _containers.RepeatedCompositeFieldContainer[EpochMetrics]
    served: bool
    serving: str
    state_message: str
    student_metrics: _containers.ScalarMap[str, float]
    def __init__(self, job_id: _Optional[str] = ..., algorithm: _Optional[str] = ..., state: _Optional[str] = ..., submitter: _Optional[str] = ..., submitted_at: _Optional[float] = ..., started_at: _Optional[float] = ..., ended_at: _Optional[float] = ..., error: _Optional[str] = ..., epochs_done: _Optional[int] = ..., epochs: _Optional[int] = ..., final_metrics: _Optional[_Mapping[str, float]] = ..., job_document: _Optional[str] = ..., history: _Optional[_Iterable[_Union[EpochMetrics, _Mapping]]] = ..., served: _Optional[bool] = ..., serving: _Optional[str] = ..., state_message: _Optional[str] = ..., student_metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

class JobList(_message.Message):
    __slots__ = ("jobs",)
    JOBS_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[JobInfo]
    def __init__(self, jobs: _Optional[_Iterable[_Union[JobInfo, _Mapping]]] = ...) -> None: ...

class JobEvent(_message.Message):
    __slots__ = ("job_id", "seq", "at", "kind", "state", "message", "epoch", "final_metrics")
    class FinalMetricsEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: float
        def __init__(self, key: _Optional[str] = ..., value: _Optional[float] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    EPOCH_FIELD_NUMBER: _ClassVar[int]
    FINAL_METRICS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    seq: int
    at: float
    kind: str
    state: str
    message: str
    epoch: EpochMetrics
    final_metrics: _containers.ScalarMap[str, float]
    def __init__(self, job_id: _Optional[str] = ..., seq: _Optional[int] = ..., at: _Optional[float] = ..., kind: _Optional[str] = ..., state: _Optional[str] = ..., message: _Optional[str] = ..., epoch: _Optional[_Union[EpochMetrics, _Mapping]] = ..., final_metrics: _Optional[_Mapping[str, float]] = ...) -> None: ...

"""The one settings object: every knob of the server, from ``ATTNSERVE_*`` env vars or CLI flags.

Model hyperparameters are not here (they live in the models' config dataclasses); only what an
operator tunes when deploying: where to listen, which models to load, how to batch, what to refuse.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

# Names only: this module stays free of torch, so the supervisor of several workers is light.
from models.names import BACKEND_NAMES as BACKENDS
from models.names import DEFAULT_BATCH_BUCKETS, DEFAULT_MODELS, DEFAULT_PRECISION, PRECISION_NAMES


class Settings(BaseSettings):
    """Server settings. Env vars: ``ATTNSERVE_<FIELD>`` (e.g. ``ATTNSERVE_MAX_BATCH_SIZE=16``)."""

    model_config = SettingsConfigDict(env_prefix="ATTNSERVE_", extra="ignore", frozen=True)

    host: str = Field(
        default="127.0.0.1", description="Interface to listen on (0.0.0.0 in containers)."
    )
    port: int = Field(default=8000, ge=0, le=65535, description="TCP port to listen on.")
    device: Literal["auto", "cpu", "cuda"] = Field(
        default="auto", description="Where models run: cuda if available under auto, else cpu."
    )
    models: Annotated[tuple[str, ...], NoDecode] = Field(
        default=DEFAULT_MODELS,
        min_length=1,
        description=(
            "Models to load, comma-separated: 'all-MiniLM-L6-v2', 'all-mpnet-base-v2' (with the "
            "[mpnet] extra), shipped Informer names ('informer-etth1-h24', ...) or paths to "
            "model folders: sentence-transformers or transformers encoders (BERT, RoBERTa, "
            "XLM-RoBERTa, DistilBERT, MPNet, ModernBERT) and Informer checkpoints."
        ),
    )
    model_dir: Path | None = Field(
        default=None,
        description=(
            "A folder of model folders, each served beside 'models' under its folder's name: "
            "sentence-transformers folders (SentenceTransformer.save), transformers encoder "
            "folders (save_pretrained + tokenizer) and Informer checkpoints (attnserve train); "
            "hidden entries and plain files in it are skipped. Unset: no extra models."
        ),
    )
    precisions: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(DEFAULT_PRECISION,),
        min_length=1,
        description=(
            "Precisions every model is loaded in, comma-separated, the default first: float32 "
            "(the weights as trained; every exactness contract holds), bfloat16 (CPUs with "
            "AVX-512 BF16 or AMX, refused at start-up elsewhere; CUDA), int8 (dynamic "
            "quantization of the linear layers, CPU), float16 (CUDA only). A request picks one "
            "in its precision field; each costs one more copy of the weights."
        ),
    )
    max_batch_size: int = Field(
        default=32, ge=1, le=1024, description="Most rows (texts or series) one batch may hold."
    )
    max_batch_tokens: int = Field(
        default=16384,
        ge=1,
        description="Most padded tokens or time steps (rows x longest row) per batch.",
    )
    max_batch_memory_mb: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Memory budget of one batch in MiB: its peak activation memory as the model "
            "estimates it for the batch's attention backend, rows and length (full attention "
            "grows with the square of the length). The batcher adds no request past it, runs a "
            "larger single request in parts, and refuses with a 422 a request whose single row "
            "is over it. Unset: half the memory available once models are loaded (free GPU "
            "memory on CUDA, available RAM on CPU), split among the models and worker "
            "processes. 0: no memory cap."
        ),
    )
    max_wait_ms: float = Field(
        default=5.0,
        ge=0,
        le=10_000,
        description="Longest a request waits for others to fill its batch before it runs anyway.",
    )
    max_queue: int = Field(
        default=256, ge=1, description="Requests that may wait per model; past this, a 429."
    )
    request_timeout_s: float = Field(
        default=30.0, gt=0, description="A request not answered within this time gets a 504."
    )
    memory_trim_interval_s: float = Field(
        default=1.0,
        ge=0,
        description=(
            "After a batch, return the C allocator's free memory to the operating system "
            "(glibc malloc_trim) when this many seconds have passed since the last time, so "
            "resident memory does not creep up under ever-new input shapes. 0: never (also "
            "moot under a preloaded jemalloc or tcmalloc)."
        ),
    )
    max_request_compute_s: float | None = Field(
        default=None,
        ge=0,
        description=(
            "Most estimated compute one request (and one batch) may need, in seconds on this "
            "device: the model's arithmetic for its rows, length, backend and options, priced "
            "by the speed each backend showed at warm-up. A request over it gets a 422 "
            "compute_budget_exceeded saying how to fit (fewer inputs, smaller options, another "
            "backend) instead of holding the model past its client's timeout. Unset: half of "
            "request_timeout_s. 0: no bound."
        ),
    )
    batch_slice_s: float = Field(
        default=0.25,
        ge=0,
        le=60,
        description=(
            "Time slice: the most estimated compute, in seconds on this device, one forward "
            "pass may take before waiting requests get a turn. A batch grows no further, and a "
            "request over it runs in parts of about this much with the batches of requests "
            "that arrived meanwhile run between its parts, so a small request never waits "
            "for all of a large one. Smaller slices cost per-row efficiency; "
            "benchmarks/service/head_of_line.py measures both sides. 0: off (forward passes as "
            "large as the other batch limits allow)."
        ),
    )
    max_body_bytes: int = Field(
        default=4 * 1024 * 1024, ge=1024, description="Largest accepted request body, else a 413."
    )
    body_parse_processes: int = Field(
        default=1,
        ge=0,
        le=64,
        description="Helper processes that parse and validate large forecast bodies off the "
        "event loop, so a few MB of JSON do not stall other requests (and /healthz); 0: parse "
        "every body on the event loop.",
    )
    body_parse_min_bytes: int = Field(
        default=512 * 1024,
        ge=0,
        description="Forecast bodies of at least this size go to a body-parsing process; "
        "smaller ones (one 2,048-step window is ~0.3 MB) are parsed on the event loop in a few "
        "ms, less than the round trip adds.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        le=1024 * 1024,
        description="Largest request line plus headers; a connection sending more is refused (431).",
    )
    http_parser: Literal["auto", "httptools", "h11"] = Field(
        default="auto",
        description="HTTP/1.1 parser: httptools (C, fast; auto picks it when installed) or h11 "
        "(pure Python). Both get the same header size and time limits.",
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="A connection must send a request's complete headers within this time of "
        "its first byte (or of connecting); otherwise it is closed.",
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description="The whole request body must arrive within this time of the end of its "
        "headers, however it trickles in; otherwise a 408 and the connection is closed.",
    )
    keep_alive_timeout_s: int = Field(
        default=15, ge=1, description="An idle keep-alive connection is closed after this time."
    )
    max_connection_age_s: float = Field(
        default=60.0,
        ge=0,
        description="A keep-alive connection older than this gets 'Connection: close' on its "
        "next response, so clients reconnect (and reach a replaced worker); 0: never.",
    )
    max_connections: int = Field(
        default=1024,
        ge=1,
        description="Most connections held at once per process. A new one past it closes the one "
        "that has waited longest on its client (idle, or part-way through its headers or "
        "body), or is refused (503 too_many_connections) when every one has a request at work.",
    )
    max_connections_per_client: int = Field(
        default=256,
        ge=1,
        description="Most connections per process from one client IP address (clients behind "
        "one NAT or proxy share it); past it as past max_connections, among its own.",
    )
    max_inputs_per_request: int = Field(
        default=64, ge=1, description="Most texts (encode) or series (forecast) in one request."
    )
    max_text_tokens: int = Field(
        default=256,
        ge=2,
        le=512,
        description="Longest text in tokens, [CLS]/[SEP] included (the model's table has 512).",
    )
    auto_truncate: bool = Field(
        default=True,
        description="TEI's routes (/embed, /embed_all, /embed_sparse, /rerank, /predict, "
        "/similarity, /, /invocations) cut over-long texts when truncate is absent or null.",
    )
    served_model_names: str = Field(
        default="",
        description="Other names of loaded models (--served-model-name, repeatable): "
        "comma-separated alias=model, or alias alone when one model is loaded.",
    )
    api_key: SecretStr | None = Field(
        default=None,
        description="When set, model routes need 'Authorization: Bearer <key>' (health stays open).",
    )
    shutdown_grace_s: float = Field(
        default=30.0,
        ge=0,
        description="On SIGTERM, how long queued and running batches get to finish before exit.",
    )
    workers: int = Field(
        default=0,
        ge=0,
        le=64,
        description=(
            "Server processes sharing the port, each with its own copy of the models, queue and "
            "batcher (CPU only; one process tops out near one core). 0 or auto: one per usable "
            "CPU per t torch threads (torch_threads, else OMP_NUM_THREADS, else CPUs / 8 rounded "
            "up), at most 8, as many as fit in half the available memory; 1 on GPU or with ray."
        ),
    )
    ray: bool = Field(
        default=False,
        description="Serve on Ray Serve (pip install 'attnserve[ray]'): replicas of the whole app "
        "behind Ray's proxy on host:port, on a local Ray cluster or the one RAY_ADDRESS names. "
        "One GPU per replica on GPU hosts, else torch_threads CPUs each.",
    )
    replicas: int = Field(
        default=0,
        ge=0,
        le=1024,
        description="With ray: this many replicas; 0: autoscale between 1 and max_replicas on "
        "ongoing requests.",
    )
    max_replicas: int = Field(
        default=4, ge=1, le=1024, description="With ray and replicas 0: the autoscaler's ceiling."
    )
    ray_target_ongoing_requests: float | None = Field(
        default=None,
        gt=0,
        description="With ray and replicas 0: ongoing requests per replica the autoscaler aims "
        "at. Unset: max_batch_size (one full batch waiting per replica).",
    )
    torch_threads: int = Field(
        default=0,
        ge=0,
        description=(
            "Intra-op CPU threads for torch per process. 0: the CPUs the process may use, the "
            "least of the host's cores, its affinity mask (taskset, --cpuset-cpus) and its cgroup "
            "CPU quota (docker --cpus, a Kubernetes CPU limit; rounded down, at least 1), and no "
            "more than OMP_NUM_THREADS when set; with N workers, OMP_NUM_THREADS or that / N each."
        ),
    )
    omp_wait_policy: Literal["passive", "active", "default"] = Field(
        default="passive",
        description=(
            "How torch's idle OpenMP threads wait for the next parallel region, exported as "
            "OMP_WAIT_POLICY before torch loads (attnserve serve). passive: they sleep at once, "
            "so a CPU shared with other busy processes (or a container's CPU quota) keeps its "
            "throughput; active: they spin; default: OpenMP's own (spin a while, then sleep). "
            "An OMP_WAIT_POLICY already in the environment wins over the default, not over this "
            "setting given explicitly."
        ),
    )
    autocast: bool = Field(
        default=True,
        description="On CUDA, run models under bf16 (or fp16) autocast where backends allow.",
    )
    compile_backends: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="Attention backends whose model forward runs torch.compile'd (comma-separated; "
        "empty: all eager). Graphs compile during warm-up, before ready: one per batch bucket "
        "(forecast) or per backend (text, symbolic shapes).",
    )
    compile_mode: Literal[
        "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"
    ] = Field(default="default", description="torch.compile mode for compiled backends.")
    compile_backend: str = Field(
        default="inductor",
        description="torch.compile backend: inductor (generated kernels) or aot_eager (tracing only).",
    )
    batch_buckets: Annotated[tuple[int, ...], NoDecode] = Field(
        default=DEFAULT_BATCH_BUCKETS,
        description="Batch sizes (rows) a compiled forecast batch is padded up to, so shapes "
        "repeat; larger batches run eagerly.",
    )
    background_load: bool = Field(
        default=True,
        description="Load and warm up after the server starts listening, so /healthz answers and "
        "/readyz says 503 meanwhile; off: the server listens only once it is ready.",
    )
    log_level: Literal["critical", "error", "warning", "info", "debug"] = Field(
        default="info", description="Log level of the server and uvicorn."
    )
    otlp_endpoint: str | None = Field(
        default=None,
        description="OpenTelemetry collector that gets a trace of each request as OTLP/HTTP: a "
        "base URL (/v1/traces added) or the traces URL. Unset: OTEL_EXPORTER_OTLP_ENDPOINT or "
        "_TRACES_ENDPOINT, else tracing is off. The SDK's other OTEL_* variables apply.",
    )

    @field_validator("models", "compile_backends", "batch_buckets", "precisions", mode="before")
    @classmethod
    def _split_commas(cls, value: object) -> object:
        # Env vars and flags give "a,b,c"; Python callers may pass a list.
        if isinstance(value, str):
            value = [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("workers", mode="before")
    @classmethod
    def _auto_is_zero(cls, value: object) -> object:
        return 0 if isinstance(value, str) and value.strip().lower() == "auto" else value

    @field_validator("model_dir", "max_batch_memory_mb", "max_request_compute_s", mode="before")
    @classmethod
    def _empty_is_none(cls, value: object) -> object:
        # ATTNSERVE_MODEL_DIR= (set but empty) means no folder, not the working directory;
        # ATTNSERVE_MAX_BATCH_MEMORY_MB= (or _MAX_REQUEST_COMPUTE_S=) means the default.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("model_dir")
    @classmethod
    def _model_dir_is_a_folder(cls, value: Path | None) -> Path | None:
        if value is not None and not value.is_dir():
            problem = "is not a folder" if value.exists() else "does not exist"
            raise ValueError(
                f"model_dir {str(value)!r} {problem}; give the folder that holds your checkpoint "
                "folders (one subfolder per model)"
            )
        return value

    @field_validator("compile_backends")
    @classmethod
    def _known_backends(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [b for b in value if b not in BACKENDS]
        if unknown:
            raise ValueError(
                f"unknown backend(s) in compile_backends: {', '.join(unknown)}; "
                f"valid: {', '.join(BACKENDS)}"
            )
        return value

    @field_validator("precisions")
    @classmethod
    def _known_precisions(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [p for p in value if p not in PRECISION_NAMES]
        if unknown:
            raise ValueError(
                f"unknown precision(s): {', '.join(unknown)}; valid: {', '.join(PRECISION_NAMES)}"
            )
        if len(set(value)) != len(value):
            raise ValueError(f"precisions lists a name twice: {', '.join(value)}")
        return value

    @field_validator("batch_buckets")
    @classmethod
    def _positive_buckets(cls, value: tuple[int, ...]) -> tuple[int, ...]:
        if not value or min(value) < 1:
            raise ValueError("batch_buckets must be positive batch sizes, e.g. 1,4,16,32")
        return tuple(sorted(set(value)))

    @model_validator(mode="after")
    def _unique_models(self) -> Settings:
        if len(set(self.models)) != len(self.models):
            raise ValueError(f"models lists a name twice: {', '.join(self.models)}")
        return self

    @model_validator(mode="after")
    def _workers_on_cpu(self) -> Settings:
        # One process owns a GPU: several would each hold a CUDA context and a model copy, and
        # their batches would contend for the device instead of merging.
        if self.workers > 1 and self.device == "cuda":
            raise ValueError("workers > 1 runs on CPU only; on CUDA use --workers 1")
        return self

    @property
    def api_key_value(self) -> str | None:
        """The API key as plain text, or None when authentication is off."""
        return self.api_key.get_secret_value() if self.api_key else None

    @property
    def request_compute_limit_s(self) -> float | None:
        """The per-request compute bound in seconds (None: no bound); see
        ``max_request_compute_s``."""
        if self.max_request_compute_s is None:
            return self.request_timeout_s / 2
        return self.max_request_compute_s or None

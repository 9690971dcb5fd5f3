"""Progress from the logs of GPU programs, table-driven: DeepSpeed's engine lines (through its
`log_dist` prefix) and Hugging Face Trainer's tqdm bar with its log dicts (as tqdm writes them:
carriage returns between redraws, a cleared line before each dict); and why a program that
wrote no termination message failed, from its log's tail (CUDA out of memory, NCCL's watchdog,
an Xid), through the path the operator takes (ContainerExit.classify)."""

from __future__ import annotations

import pytest

from tpujob.api.status import FailureReason
from tpujob.api.trainer_spec import ProgressSpec
from tpujob.controller.log_failures import MAX_LINE, read_log_failure
from tpujob.controller.observe import ContainerExit
from tpujob.log_progress import FORMATS, latest_progress, parse_deepspeed_line

pytestmark = pytest.mark.unit

DS = "[2026-11-27 21:00:00,000] [INFO] [logging.py:107:log_dist] "
CLEAR = "\r" + " " * 60 + "\r"


def _bar(step: int, total: int, rate: str = " 2.50it/s") -> str:
    return f"\r {100 * step // total:3d}%|###       | {step}/{total} [01:56<04:44,{rate}]"


@pytest.mark.parametrize("line, expected", [
    (DS + "[Rank 0] step=10, skipped=0, lr=[0.0001], mom=[(0.9, 0.999)]", {"step": 10}),
    (DS + "[Rank 0] epoch=1/micro_step=40/global_step=20, RunningAvgSamplesPerSec=46.3, "
          "CurrSamplesPerSec=47.1, MemAllocated=1.2GB, MaxMemAllocated=3.4GB", {"step": 20}),
    (DS + "[Rank 1] step=10, skipped=0, lr=[0.0001]", None),   # another rank's line
    (DS + "[Rank 0] DeepSpeed Flops Profiler step=3", None),
    ("step=5, skipped=0", None),
])
def test_deepspeed_line(line, expected):
    assert parse_deepspeed_line(line) == expected


@pytest.mark.parametrize("text, expected", [
    # transformers 5: floats written as strings; the dict above the bar it was logged at.
    (_bar(0, 1000, " ?it/s").replace("01:56<04:44", "00:00<?") + _bar(290, 1000) + CLEAR +
     "{'loss': '2.345', 'grad_norm': '1.2', 'learning_rate': '4.5e-05', 'epoch': '0.12'}\n" +
     _bar(300, 1000), {"step": 300, "step_time_s": 0.4, "loss": 2.345}),
    # older: unquoted floats; a slow step reads s/it.
    (CLEAR + "{'loss': 1.5, 'learning_rate': 1e-05, 'epoch': 2.0}\n" + _bar(40, 50, "12.00s/it"),
     {"step": 40, "step_time_s": 12.0, "loss": 1.5}),
    # An evaluation bar (batches, a shorter total) after the training bar is not the step.
    (_bar(300, 1000) + "\n" + _bar(8, 8, " 5.00it/s"), {"step": 300, "step_time_s": 0.4}),
    # A dict logged after the newest training bar is not yet that bar's.
    (_bar(300, 1000) + CLEAR + "{'loss': 9.0, 'epoch': 0.3}\n", {"step": 300,
                                                                "step_time_s": 0.4}),
    ("{'loss': 2.0, 'epoch': 0.1}\nno bar yet", None),
    # A bar that has not measured a rate yet gives no step time.
    (_bar(1, 10, " 0.00it/s"), {"step": 1}),
])
def test_transformers_progress(text, expected):
    assert latest_progress(text, "transformers") == expected


def test_an_unknown_format_is_refused_even_with_a_regex():
    with pytest.raises(ValueError, match="unknown log format 'bogus'"):
        latest_progress("step 3", "bogus", regex=r"step (?P<step>\d+)")
    with pytest.raises(ValueError, match="unknown log format 'regex'"):
        latest_progress("step 3", "regex", regex=None)


def test_the_newest_deepspeed_line_wins_and_the_formats_are_the_api_s():
    text = "\n".join([DS + "[Rank 0] step=9, skipped=0", "noise", DS + "[Rank 0] step=11, x"])
    assert latest_progress(text, "deepspeed") == {"step": 11}
    for fmt in ("deepspeed", "transformers"):
        assert fmt in FORMATS
        assert ProgressSpec.model_validate({"source": "log", "format": fmt}).format == fmt


@pytest.mark.parametrize("tail, reason, summary", [
    ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a "
     "total capacity of 79.10 GiB", FailureReason.OUT_OF_MEMORY, "out of GPU memory"),
    ("jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to "
     "allocate 1073741824 bytes.", FailureReason.OUT_OF_MEMORY, "out of GPU memory"),
    ("[rank3]:[E1127 21:00:00.000 ProcessGroupNCCL.cpp:632] [Rank 3] Watchdog caught collective "
     "operation timeout: WorkNCCL(SeqNum=120, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
     "Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
     FailureReason.COLLECTIVE_TIMEOUT, "collective timed out"),
    ("torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 1/2 "
     "clients joined.", FailureReason.COLLECTIVE_TIMEOUT, "collective timed out"),
    ("NVRM: Xid (PCI:0000:8a:00): 79, pid=1234, GPU has fallen off the bus.",
     FailureReason.HARDWARE_ERROR, "GPU hardware fault (Xid 79)"),
    ("RuntimeError: CUDA error: uncorrectable ECC error encountered",
     FailureReason.HARDWARE_ERROR, "GPU hardware fault"),
    # What a surviving torchrun process prints when its peer on the other node is SIGKILLed
    # (gloo, torch 2.15, seen in local mode), and NCCL's words for the same.
    ("[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc"
     ":561] Connection closed by peer [127.0.0.1]:53940. This is typically caused by a remote "
     "worker crashing. Check the logs of the remote worker before reporting an error.",
     FailureReason.PREEMPTED, "lost a peer (another process or node stopped)"),
    ("torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote "
     "process exited or there was a network error, NCCL version 2.21.5",
     FailureReason.PREEMPTED, "lost a peer (another process or node stopped)"),
])
def test_a_log_tail_names_its_cause(tail, reason, summary):
    found = read_log_failure("step 10\n" + tail + "\nTraceback ...")
    assert (found.reason, found.summary, found.line) == (reason, summary, tail.strip())
    assert found.lost_peer == summary.startswith("lost a peer")
    exit_ = ContainerExit(pod="run-slice-0-1", container="trainer", exit_code=1,
                          k8s_reason="Error", message="step 10\n" + tail)
    assert exit_.classify() == (reason, f"pod run-slice-0-1, container trainer exited 1: "
                                        f"{summary}: {tail.strip()}")


def test_a_hardware_fault_explains_the_timeouts_beside_it_and_lines_are_cut():
    tail = ("Watchdog caught collective operation timeout: WorkNCCL(...)\n"
            "NVRM: Xid (PCI:0000:8a:00): 48, An uncorrectable double bit error\n"
            "Watchdog caught collective operation timeout: WorkNCCL(...)")
    assert read_log_failure(tail).reason == FailureReason.HARDWARE_ERROR
    long = "CUDA out of memory " + "x" * 1000
    assert len(read_log_failure(long).line) == MAX_LINE == 300
    assert read_log_failure("Traceback\nValueError: bad shape") is None
    # A dropped HTTP connection is not a lost peer.
    assert read_log_failure("requests.exceptions.ConnectionError: ('Connection aborted.', "
                            "ConnectionResetError(104, 'Connection reset by peer'))") is None
    plain = ContainerExit(pod="p", container="trainer", exit_code=1, k8s_reason="Error",
                          message="ValueError: bad shape")
    assert plain.classify() == (FailureReason.ERROR,
                                "pod p, container trainer exited 1: ValueError: bad shape")

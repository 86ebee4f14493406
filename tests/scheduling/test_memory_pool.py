"""A trace crosses the estimate pool's pipe with every figure the estimate reads."""

from __future__ import annotations

from gpufleet.scheduling.memory_pool import _decode_trace, _encode_trace
from gpufleet.scheduling.memtrace import PhasePeak, StepTrace


def test_a_decoded_trace_has_the_peak_and_the_allocation_sequence_of_the_original():
    trace = StepTrace(
        forward_backward=PhasePeak(peak=700, parameters=100, gradients=100, other=500),
        optimizer_step=PhasePeak(peak=900, parameters=100, gradients=100, optimizer_states=200, other=500),
        parameter_bytes=100, gradient_bytes=100, parameter_count=25, fake=True,
        events=((1, 512), (2, 4096), (2, -4096)), blas_marks={"forward": 1}, step_ends=(3,), step_peaks=(900,),
        lt_marks={"forward": 1}, scratch=((2, (8 << 20, 512)),),
    )
    decoded = _decode_trace(_encode_trace(trace))
    assert decoded.peak == trace.peak == 900
    from gpufleet.scheduling.allocator import device_events, replay

    assert replay(device_events(decoded, workspace=1 << 20)) == replay(device_events(trace, workspace=1 << 20))
    assert decoded.blas_marks == {"forward": 1}
    # The kernel's scratch is in the replay: 8 MiB taken beside the 4 KiB block.
    assert replay(device_events(decoded, workspace=1 << 20)).peak_allocated >= (8 << 20) + 4096
    assert decoded.optimizer_step.optimizer_states == 200


def test_a_trace_kept_on_disk_by_another_trace_format_is_traced_again(tmp_path, monkeypatch):
    from gpufleet.scheduling import memory_pool

    files = memory_pool.TraceFiles(tmp_path)
    files.save("mlp/mb64/fp32/single1/abc", {"x": 1})
    assert files._path("mlp/mb64/fp32/single1/abc").exists()
    monkeypatch.setattr(memory_pool, "TRACE_FORMAT", memory_pool.TRACE_FORMAT + 1)
    newer = memory_pool.TraceFiles(tmp_path)
    assert newer._path("mlp/mb64/fp32/single1/abc") != files._path("mlp/mb64/fp32/single1/abc")
    assert newer.load("mlp/mb64/fp32/single1/abc") is None

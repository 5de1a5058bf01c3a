"""The phase meter on real allocations: the kernel's high-water mark reset per phase, the
sampling fallback, and the run's peak kept across resets."""

from __future__ import annotations

import time

import pytest

from observer_ci.pipeline import memory

pytestmark = pytest.mark.skipif(
    memory.current_rss() is None, reason="no /proc/self/statm on this system: no figures"
)
MIB = 1 << 20


def test_a_freed_allocation_still_counts_and_an_earlier_peak_does_not():
    big = bytearray(96 * MIB)  # an earlier, higher peak: ru_maxrss would keep it
    del big
    with memory.measure() as figures:
        transient = bytearray(48 * MIB)
        del transient
    if figures.method != memory.METHOD_HWM:
        pytest.skip(f"/proc/self/clear_refs not writable here: {figures.method} meter")
    assert 44 * MIB < figures.growth < 80 * MIB, figures
    with memory.measure() as quiet:
        pass
    assert quiet.growth < 8 * MIB  # the 96 MiB before the phase is not this phase's
    assert memory.process_peak() >= figures.start + 90 * MIB  # kept across the resets


def test_the_sampled_meter_sees_an_allocation_held_for_a_while():
    with memory.measure(sampled=True) as figures:
        held = bytearray(48 * MIB)
        time.sleep(0.05)
        del held
    assert figures.method == memory.METHOD_SAMPLED
    assert 44 * MIB < figures.growth < 80 * MIB, figures
    assert figures.seconds >= 0.05


def test_a_footprint_without_an_export_has_no_export_figure():
    session = memory.PhaseMemory(start=100, peak=164, seconds=0.02, method="hwm")
    footprint = memory.graph_footprint(None, session)
    assert footprint.export_bytes is None and footprint.export_peak is None
    assert (footprint.session_bytes, footprint.session_seconds) == (64, 0.02)

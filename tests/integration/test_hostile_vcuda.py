"""Issue 10, findings 5 and 6: a hostile tenant inside a GPU container
against the CUDA interposer libegpu-vcuda.so (preloaded over the mock
driver, driven through tests/vcuda/vcuda_probe.c as test_vcuda.py does).

* Finding 5, the shared accounting: zeroing the usage words of
  vcuda-memory.shm does not let the container's processes together allocate
  past the limit; a symlink planted at vcuda-memory.shm does not make each
  process count on its own (they fail closed with one log line); a symlink
  planted at vcuda-core.shm does not get its target overwritten, and the
  compute limit does not fall back to a per-process bucket either.
* Finding 6, launch entry points: cuLaunchCooperativeKernel(_ptsz),
  cuLaunchCooperativeKernelMultiDevice, cuLaunch, cuLaunchGrid and
  cuLaunchGridAsync are held to the container's share of the card, as
  measured with the mock's device clock.
"""
import os
import struct
import time

import pytest

from test_vcuda import (CTX_MIB, MIB, OOM, Probe, card_share, core_conf,  # noqa: F401
                        log_lines, mem_conf, meminfo, mock_used, paths, world)

LAUNCH_ENTRIES = [
    ("coop", "direct", "cuLaunchCooperativeKernel"),
    ("coop_ptsz", "procaddr", "cuLaunchCooperativeKernel_ptsz"),
    ("multi", "dlsym", "cuLaunchCooperativeKernelMultiDevice"),
    ("launch", "direct", "cuLaunch"),
    ("grid", "procaddr", "cuLaunchGrid"),
    ("gridasync", "dlsym", "cuLaunchGridAsync"),
]


@pytest.mark.parametrize("what,lookup,entry", LAUNCH_ENTRIES,
                         ids=[f"{e[2]}-{e[1]}" for e in LAUNCH_ENTRIES])
def test_other_launch_entry_points_get_only_the_core_share(world, what, lookup, entry):
    """A process that launches 1 ms kernels over and over through entry gets
    its 30% of the card's device time, not the whole card (each launch is
    one block of the kernel "k", EGPU_MOCK_CUDA_KERNEL_NS k=1000000)."""
    conf = dict(core_conf(30), EGPU_MOCK_CUDA_KERNEL_NS="k=1000000")
    probe = Probe(world, lookup=lookup, conf=conf)
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe(f"spin {what} k 1") == ["spin", "0"]
    time.sleep(0.5)  # past learning the kernel's cost
    share = card_share(world, 1.5)
    stop = probe("stop")
    assert stop[2] == "0" and int(stop[1]) > 100, (stop, probe.stderr())
    assert 20 <= share <= 40, f"{entry} got {share:.1f}% of the card at a 30% limit"
    assert probe.close() == 0
    assert log_lines(probe.stderr()) == []

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


# ---- finding 5: the shared accounting ----

def zero_usage_words(region):
    """What a process of the container can do to vcuda-memory.shm (mode
    0666) without the interposer: zero every card's total and every process
    slot's bytes per card, leaving the header, the card table and who holds
    each slot alone. The layout is region.c's: version 2 (24b3727) or 3."""
    data = bytearray(region.read_bytes())
    version, = struct.unpack_from("<I", data, 8)
    hwm, = struct.unpack_from("<I", data, 32)
    cards_off, slot_size, bytes_off = {2: (48, 144, 16), 3: (56, 152, 24)}[version]
    for c in range(16):
        struct.pack_into("<Q", data, cards_off + 32 * c + 24, 0)
    slots_off = cards_off + 16 * 32
    for i in range(hwm):
        at = slots_off + i * slot_size + bytes_off
        data[at:at + 16 * 8] = bytes(16 * 8)
    with open(region, "r+b") as f:  # in place, as a mapping would
        f.write(data)


def test_zeroing_the_memory_region_gives_no_memory(world):
    """Three processes take the whole 2 GiB limit; then the usage words of
    the region are zeroed behind their backs. None of them, and no new
    process, gets one more byte: each repairs its own slot from its own
    ledger, and reservations wait until every live process has registered
    its usage again."""
    limit, chunk = 2048 * MIB, 64 * MIB
    probes = [Probe(world, conf=mem_conf(2048)) for _ in range(3)]
    for p in probes:
        assert p.rc("init") == 0 and p.rc("ctx 0 primary") == 0
    counts = []
    for p in probes:
        a = p(f"fill mem {chunk}")
        assert a[0] == "fill" and a[2] == str(OOM), a
        counts.append(int(a[1]))
    held = 3 * CTX_MIB * MIB + sum(counts) * chunk
    assert limit - held < chunk, (held, counts)
    zero_usage_words(world["dir"] / "vcuda-memory.shm")
    for p in probes:
        assert p.rc(f"alloc mem {chunk}") == OOM
    for p in probes:  # each has been back since: all slots vouched for again
        assert meminfo(p) == (limit - held, limit)
    late = Probe(world, conf=mem_conf(2048))
    assert late.rc("init") == 0
    assert late.rc("ctx 0 primary") == OOM  # 300 MiB more would pass the limit
    for p in probes:
        assert p.rc(f"alloc mem {chunk}") == OOM
    assert mock_used(world) == held  # the driver gave out nothing more
    for p in probes + [late]:
        assert p.close() == 0
    lines = [line for p in probes for line in log_lines(p.stderr())]
    assert len(lines) == 3, lines  # one warning per process that found its slot changed
    assert all("behind the interposer's back" in line for line in lines), lines


def test_symlink_at_memory_region_fails_closed(world, tmp_path):
    """A link planted at vcuda-memory.shm before the first process starts:
    no process counts on its own (three of them would get three times the
    limit); each fails closed, with one error line, and the link's target
    is not touched."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    (world["dir"] / "vcuda-memory.shm").symlink_to(victim)
    probes = [Probe(world, conf=mem_conf(1024)) for _ in range(3)]
    for p in probes:
        assert p.rc("init") == 0
        assert p.rc("ctx 0 primary") == OOM
        assert p.rc("ctx 0 v2") == OOM
    assert mock_used(world) == 0
    for p in probes:
        assert p.close() == 0
        lines = log_lines(p.stderr())
        assert len(lines) == 1, lines
        assert "vcuda-memory.shm" in lines[0] and "symbolic link" in lines[0], lines
        assert "failing closed" in lines[0] and lines[0].startswith("E"), lines
    assert victim.read_bytes() == b"precious"


def test_symlink_at_core_region_writes_no_victim(world, tmp_path):
    """A link planted at vcuda-core.shm pointing at a file the container's
    processes can write: the file is neither sized nor overwritten, and the
    compute limit does not fall back to a bucket per process either (three
    processes would get three times the share): launches on the limited
    card are refused, with one error line."""
    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    os.chmod(victim, 0o666)
    (world["dir"] / "vcuda-core.shm").symlink_to(victim)
    probe = Probe(world, conf=core_conf(30))
    assert probe.rc("init") == 0 and probe.rc("ctx 0 primary") == 0
    assert probe.rc("launch") == 701  # CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES
    assert probe.close() == 0
    assert victim.read_bytes() == b"precious"
    lines = log_lines(probe.stderr())
    assert len(lines) == 1, lines
    assert "vcuda-core.shm" in lines[0] and "failing closed" in lines[0], lines

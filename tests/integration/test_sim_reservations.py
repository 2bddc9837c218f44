"""egpu-sim --reservations: pre-existing ElasticGPUs hold their
capacity before the first pod of the replay, and no pod is ever placed into
it (checked card by card with --card-dump, for every policy and several
seeds, against the same replay without them); the allocation ratio counts
it; a bad file is refused naming the file, the item and the field."""
import csv
import json

import pytest

from test_sim_cli import POLICIES, run, small_trace

# nodes_small.csv: n-a (4 x V100M16), n-b (2 x T4), n-c (no GPUs).
CAPACITY = 6000


def egpu(name, node, core, gpu=None, gpus=None, phase="Bound", memory=None):
    cap = {"elasticgpu.io/gpu-core": core}
    if memory:
        cap["elasticgpu.io/gpu-memory"] = memory
    spec = {"capacity": cap, "nodeName": node}
    if gpus:
        spec["physicalGPU"] = {"gpuNames": gpus}
    else:
        spec["gpuShare"] = {"gpuName": gpu}
    return {"apiVersion": "elasticgpu.io/v1alpha1", "kind": "ElasticGPU",
            "metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


RESERVED = [
    egpu("whole", "n-a", 200, gpus=["n-a-gpu0", "n-a-gpu1"]),
    egpu("slice", "n-b", 60, gpu="n-b-gpu1", phase="Available", memory=4096),
    egpu("failed", "n-a", 100, gpus=["n-a-gpu2"], phase="Failed"),
]
# What each card holds: the Failed one holds nothing.
HELD = {"n-a-gpu0": 1000, "n-a-gpu1": 1000, "n-b-gpu1": 600}


def replay(sim, tmp_path, fixtures, items, name, as_list=True):
    d = tmp_path / "trace" if (tmp_path / "trace").exists() else small_trace(tmp_path, fixtures)
    args = ["--trace-dir", str(d), "--seeds", "1..6", "--no-plot", "--jobs", "2",
            "--out", str(tmp_path / name), "--card-dump", str(tmp_path / f"{name}.csv")]
    if items is not None:
        f = tmp_path / f"{name}.json"
        f.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": items}
                                if as_list else items))
        args += ["--reservations", str(f)]
    p = run(sim, *args)
    assert p.returncode == 0, p.stderr
    with open(tmp_path / f"{name}.csv") as f:
        cards = list(csv.DictReader(f))
    with open(tmp_path / name / "replay_runs.csv") as f:
        runs = list(csv.DictReader(f))
    return p, cards, runs


def test_reserved_capacity_is_never_placed_into(sim, tmp_path, fixtures):
    p, cards, runs = replay(sim, tmp_path, fixtures, RESERVED, "with")
    assert ("reservations " + str(tmp_path / "with.json") + ": 3 ElasticGPUs, 2 holding "
            "2600 milli-GPU = 43.33% of the cluster's GPU capacity (6000 milli-GPU)") in p.stdout
    assert "gpu-memory ignored (the trace has none)" in p.stdout
    assert len(runs) == len(POLICIES) * 6 and len(cards) == len(runs) * 6
    for c in cards:
        reserved, pods = int(c["reserved_milli"]), int(c["pods_milli"])
        assert reserved == HELD.get(c["card"], 0), c
        assert reserved + pods <= int(c["capacity_milli"]), c
        if reserved == 1000:
            assert pods == 0 and c["pods"] == "0", c  # a whole reserved card: nobody else
    # The allocation ratio counts the reservations and what was placed, and
    # the arrived share starts at what they hold.
    placed = {}
    for c in cards:
        key = (c["policy"], c["seed"])
        placed[key] = placed.get(key, 0) + int(c["pods_milli"])
    for r in runs:
        assert int(r["reserved_milli"]) == 2600
        alloc = 100.0 * (2600 + placed[(r["policy"], r["seed"])]) / CAPACITY
        assert abs(float(r["final_alloc_pct"]) - alloc) < 0.01, r
        assert float(r["final_alloc_pct"]) >= 2600 * 100.0 / CAPACITY
        assert float(r["final_arrived_pct"]) <= 130.0 + 1e-9
    # The slice's card still takes pods into the rest of it, under some policy.
    assert any(c["card"] == "n-b-gpu1" and int(c["pods_milli"]) > 0 for c in cards)


def test_without_reservations_those_cards_are_used(sim, tmp_path, fixtures):
    """The control: the very same replays without the file place pods on
    the cards the reservations hold, so the test above can fail."""
    _, cards, runs = replay(sim, tmp_path, fixtures, None, "without")
    assert all(r["reserved_milli"] == "0" for r in runs)
    assert all(c["reserved_milli"] == "0" for c in cards)
    used = {c["card"] for c in cards if int(c["pods_milli"]) > 0}
    assert {"n-a-gpu0", "n-a-gpu1", "n-b-gpu1"} <= used


def test_plain_list_is_read_too(sim, tmp_path, fixtures):
    p, cards, _ = replay(sim, tmp_path, fixtures, RESERVED[:1], "plain", as_list=False)
    assert "1 ElasticGPUs, 1 holding 2000 milli-GPU = 33.33%" in p.stdout
    assert "gpu-memory ignored" not in p.stdout
    assert all(int(c["pods_milli"]) == 0 for c in cards if c["card"] in ("n-a-gpu0", "n-a-gpu1"))


BAD = [
    ([egpu("a", "n-z", 50, gpu="n-z-gpu0")],
     'items[0] (a): spec.nodeName "n-z" is not a node of the trace'),
    ([egpu("ok", "n-b", 10, gpu="n-b-gpu0"), egpu("b", "n-a", 50, gpu="n-a-gpu4")],
     'items[1] (b): spec.gpuShare.gpuName "n-a-gpu4" is not a card of node n-a '
     '(its cards: n-a-gpu0..n-a-gpu3)'),
    ([egpu("c", "n-c", 100, gpus=["n-c-gpu0"])],
     'items[0] (c): spec.physicalGPU.gpuNames[0] "n-c-gpu0" is not a card of node n-c '
     '(it has no GPUs)'),
    ([egpu("d1", "n-b", 60, gpu="n-b-gpu0"), egpu("d2", "n-b", 50, gpu="n-b-gpu0")],
     "items[1] (d2): spec.gpuShare.gpuName (reservations are applied in the file's order): "
     "card n-b-gpu0 has 400 milli-GPU and 0 MiB free; the reservation asks 500 milli-GPU"),
    ([egpu("e1", "n-b", 30, gpu="n-b-gpu1"), egpu("e2", "n-b", 100, gpus=["n-b-gpu1"])],
     "items[1] (e2): spec.physicalGPU.gpuNames (reservations are applied in the file's order): "
     "card n-b-gpu1 is not free for a whole-card reservation"),
    ([egpu("f", "n-b", 150, gpu="n-b-gpu0")],
     "items[0] (f): spec.capacity.elasticgpu.io/gpu-core is 150; allowed: 1..99 to share one "
     "card"),
    ([{"kind": "GPU", "metadata": {"name": "g"}}], "items[0] (g): "),
]


@pytest.mark.parametrize("items,needle", BAD)
def test_bad_reservations_name_file_item_and_field(sim, tmp_path, fixtures, items, needle):
    d = small_trace(tmp_path, fixtures)
    f = tmp_path / "resv.json"
    f.write_text(json.dumps(items))
    p = run(sim, "--trace-dir", str(d), "--reservations", str(f), "--no-plot",
            "--out", str(tmp_path / "out"))
    assert p.returncode == 2, p.stdout
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith(f"egpu-sim: {f}: "), lines[0]
    assert needle in lines[0], lines[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("text,needle", [
    ("[{", ":1:2: not JSON"),
    ('{"kind": "Pod"}', "expected a JSON list of ElasticGPU objects, or a List"),
    (None, "No such file or directory"),
])
def test_unreadable_reservations(sim, tmp_path, fixtures, text, needle):
    d = small_trace(tmp_path, fixtures)
    f = tmp_path / "resv.json"
    if text is not None:
        f.write_text(text)
    p = run(sim, "--trace-dir", str(d), "--reservations", str(f), "--no-plot",
            "--out", str(tmp_path / "out"))
    assert p.returncode == 2
    assert p.stderr.startswith(f"egpu-sim: {f}") and needle in p.stderr, p.stderr


def test_help_names_the_flags(sim):
    p = run(sim, "--help")
    assert "--reservations FILE" in p.stdout and "--card-dump FILE" in p.stdout
    assert "<sn>-gpu0" in p.stdout

"""The hostile tenant against egpu-agent (issue 10, finding 2): the agent runs
as root and writes a container's limits; the container's processes are
adversaries that write wherever their mounts let them.

The tests run the real egpu-agent with the fake kubelet and the test API
server, as test_agent.py does, and play the container from the Allocate
answer: every read-write mount that is a directory is somewhere the tenant
writes (on the host, at that mount's host path), as root (the tests run as
root: a container without a user namespace) or as an unprivileged user
(uid 65534, as a container's ``runAsUser`` would be). What the interposer
reads is the host file behind /etc/elastic-gpu/vcuda.conf, found through the
mounts the way a container runtime would resolve it.

What the tenant tries, one test each:

* symlinks at the agent's old temporary names and at limits.json and
  vcuda.conf: no host file is written through them;
* an unprivileged user plants the temporary files and keeps them open: the
  interposer's vcuda.conf stays root's, unwritable by others, with the
  agent's limits, even after the tenant writes through what it kept;
* a FIFO at limits.json and other names: the agent still answers /metrics
  and registers again after a kubelet restart;
* a 12-deep and a 10,000-deep tree, links to files and directories outside,
  a FIFO: the cleanup removes all of it and every link target survives;
* rewriting every file it can reach: the allocation metrics do not move,
  neither at once nor after an agent restart.
"""
import json
import os
import stat
import subprocess
import sys
import time

import grpc
import pytest

from test_agent import (  # noqa: F401 (fixtures, used by name)
    RES, Agent, agent_bin, alloc_dir, allocate, api_env, cleanup_env, dp, mounts, scrape,
    wait_until)

NOBODY = 65534
EVIL_CONF = (b"EGPU_VCUDA_MEMORY_MIB=16777216\nEGPU_VCUDA_CORE=100\n"
             b"EGPU_VCUDA_CORE_LIMIT=100\n")


def writable_dirs(resp):
    """Host paths of the directories the container can write."""
    return [m.host_path for m in resp.mounts
            if not m.read_only and os.path.isdir(m.host_path)]


def host_path(resp, container_path):
    """The host file behind container_path: the longest mount over it."""
    best = None
    for m in resp.mounts:
        cp = m.container_path.rstrip("/")
        if container_path == cp or container_path.startswith(cp + "/"):
            if best is None or len(cp) > len(best.container_path.rstrip("/")):
                best = m
    assert best is not None, container_path
    rest = container_path[len(best.container_path.rstrip("/")):]
    return best.host_path + rest


def old_tmp_names(agent):
    """The agent's temporary names before the fix: ".<name>.tmp.<pid>"."""
    pid = agent.proc.pid
    return [f".{n}.tmp.{pid}" for n in ("limits.json", "vcuda.conf", "ld.so.preload")]


def shared_pod(api, kubelet, name, core=30, mem=4096, card=0):
    """Make pod name with one container on card, set its PodResources and
    Allocate its IDs; returns (ids, Allocate's container response)."""
    u = api.uuids()
    api.pod(name, [("main", core, mem, [u[card]])])
    ids = ["%s-%02d" % (u[card], i) for i in range(core)]
    kubelet.set_pod_resources({f"default/{name}": {"main": {RES: ids}}})
    resp = allocate(kubelet.plugins[RES], ids).container_responses[0]
    return ids, resp


def prestart(kubelet, ids):
    kubelet.plugins[RES].stub.PreStartContainer(dp.PreStartContainerRequest(devices_ids=ids),
                                                timeout=30)


def make_chain(parent, name, depth):
    """A chain of depth directories "d" below parent/name; returns the fd of
    the deepest (the caller closes it)."""
    os.mkdir(os.path.join(parent, name))
    fd = os.open(os.path.join(parent, name), os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        nfd = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nfd
    return fd


def test_symlink_at_limits_tmp_writes_no_host_file(api_env):
    api, kubelet, agent = api_env
    ids, resp = shared_pod(api, kubelet, "links")
    victims = {}
    dirs = writable_dirs(resp)
    assert dirs, "a shared container has somewhere to put its regions"
    for i, d in enumerate(dirs):
        for name in old_tmp_names(agent) + ["limits.json", "vcuda.conf", "ld.so.preload"]:
            victim = os.path.join(agent.base, f"victim-{i}-{name.strip('.')}")
            with open(victim, "w") as f:
                f.write("host file\n")
            path = os.path.join(d, name)
            if os.path.lexists(path):
                os.unlink(path)
            os.symlink(victim, path)
            victims[victim] = path
    prestart(kubelet, ids)
    allocate(kubelet.plugins[RES], ids)  # Allocate again rewrites ld.so.preload
    for victim, link in victims.items():
        with open(victim) as f:
            assert f.read() == "host file\n", f"written through {link}"
    # What the interposer reads is the agent's, in a file of its own.
    conf = host_path(resp, "/etc/elastic-gpu/vcuda.conf")
    assert not os.path.islink(conf)
    with open(conf) as f:
        assert "EGPU_VCUDA_MEMORY_MIB=4096\n" in f.read()
    # A whole card runs without the interposer: nothing to write at all.
    u = api.uuids()
    whole = allocate(kubelet.plugins[RES],
                     ["%s-%02d" % (u[1], i) for i in range(100)]).container_responses[0]
    assert writable_dirs(whole) == []


def test_planted_tmp_file_cannot_become_config(api_env):
    api, kubelet, agent = api_env
    os.chmod(agent.base, 0o755)  # the tenant's user reaches the alloc root, as on a node
    ids, resp = shared_pod(api, kubelet, "plant")
    dirs = writable_dirs(resp)
    names = old_tmp_names(agent) + ["limits.json", "vcuda.conf"]
    script = (
        "import os, sys\n"
        "fds = []\n"
        f"for d in {dirs!r}:\n"
        f"    for n in {names!r}:\n"
        "        try:\n"
        "            fds.append(os.open(os.path.join(d, n), os.O_RDWR | os.O_CREAT, 0o666))\n"
        "        except OSError:\n"
        "            pass\n"
        "print(len(fds), flush=True)\n"
        "sys.stdin.readline()\n"
        "for fd in fds:\n"
        "    try:\n"
        "        os.ftruncate(fd, 0)\n"
        f"        os.pwrite(fd, {EVIL_CONF!r}, 0)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('done', flush=True)\n")
    tenant = subprocess.Popen([sys.executable, "-c", script], user=NOBODY, group=NOBODY,
                              extra_groups=[], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              text=True, cwd="/")
    try:
        planted = int(tenant.stdout.readline())
        assert planted > 0, "the tenant's user can write in its shared dir"
        prestart(kubelet, ids)
        tenant.stdin.write("go\n")
        tenant.stdin.flush()
        assert tenant.stdout.readline().strip() == "done"
    finally:
        tenant.kill()
        tenant.wait()
    conf = host_path(resp, "/etc/elastic-gpu/vcuda.conf")
    st = os.lstat(conf)
    assert stat.S_ISREG(st.st_mode)
    assert st.st_uid == 0 and st.st_mode & 0o022 == 0, \
        f"vcuda.conf uid={st.st_uid} mode={stat.S_IMODE(st.st_mode):o}"
    with open(conf) as f:
        text = f.read()
    assert "EGPU_VCUDA_MEMORY_MIB=4096\n" in text and "EGPU_VCUDA_CORE=30\n" in text, text
    # Its directory, as the container sees it, is no place to swap it.
    top = host_path(resp, "/etc/elastic-gpu")
    st = os.stat(top)
    assert st.st_uid == 0 and st.st_mode & 0o022 == 0


def test_fifo_at_limits_does_not_hang_agent(api_env):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("fifo", [("main", 30, 4096, [u[0]])])
    adm = kubelet.admit(RES, 30, pod="fifo", check=True)
    for d in writable_dirs(adm.container_response):
        for name in ("limits.json", "vcuda.conf", "ld.so.preload", "vcuda-memory.shm", "x"):
            path = os.path.join(d, name)
            if os.path.lexists(path):
                os.unlink(path)
            os.mkfifo(path, 0o666)
    time.sleep(2.5)  # the agent's loop looks at its allocations every second
    assert agent.get("/metrics")[0] == 200
    kubelet.restart()
    assert kubelet.wait_for_registration(2, timeout=15).ok, agent.text()
    assert agent.get("/metrics")[0] == 200
    assert wait_until(lambda: agent.get("/readyz")[0] == 200, 5), agent.text()


def test_deep_tree_and_links_removed_by_cleanup(cleanup_env):
    kubelet, start = cleanup_env
    agent = start("--cleanup-interval", "1")
    kubelet.wait_for_devices(RES, lambda d: len(d) == 200, timeout=15)
    a = kubelet.admit(RES, 30, pod="a", check=True)
    top = alloc_dir(a)
    outside_file = os.path.join(agent.base, "keep-file")
    outside_dir = os.path.join(agent.base, "keep-dir")
    with open(outside_file, "w") as f:
        f.write("host\n")
    os.mkdir(outside_dir)
    with open(os.path.join(outside_dir, "inside"), "w") as f:
        f.write("x")
    dirs = writable_dirs(a.container_response)
    assert dirs
    try:
        for d in dirs:
            for name, depth in (("deep12", 12), ("deeper", 10000)):
                fd = make_chain(d, name, depth)
                os.symlink(outside_file, "out", dir_fd=fd)
                os.symlink(outside_dir, "outdir", dir_fd=fd)
                os.mkfifo("fifo", dir_fd=fd)
                os.close(fd)
            os.symlink(outside_file, os.path.join(d, "tofile"))
            os.symlink(outside_dir, os.path.join(d, "todir"))
            os.symlink("..", os.path.join(d, "up"))
            os.mkfifo(os.path.join(d, "fifo"))
        kubelet.remove_pod("default", "a")
        assert wait_until(lambda: not os.path.lexists(top), 60), agent.text()
        with open(outside_file) as f:
            assert f.read() == "host\n"
        assert os.listdir(outside_dir) == ["inside"]
        assert os.path.isdir(agent.alloc_root)
        assert agent.get("/healthz")[0] == 200
    finally:
        if os.path.lexists(top):  # GNU rm copes with any depth
            subprocess.run(["rm", "-rf", "--one-file-system", top], check=False)


def test_rewriting_files_does_not_change_metrics(api_env, agent_bin):
    api, kubelet, agent = api_env
    u = api.uuids()
    api.pod("honest", [("main", 30, 4096, [u[1]])])
    adm = kubelet.admit(RES, 30, pod="honest", container="main", check=True)
    core = ("egpu_agent_gpu_allocated_core_percent", (("gpu", u[1]),))
    mem = ("egpu_agent_gpu_allocated_memory_mib", (("gpu", u[1]),))
    other = ("egpu_agent_gpu_allocated_core_percent", (("gpu", u[0]),))
    labels = (("container", "main"), ("namespace", "default"), ("pod", "honest"))
    ctr_core = ("egpu_agent_container_limit_core_percent", labels)
    want = {core: 30, mem: 4096, other: 0, ctr_core: 30}
    assert wait_until(lambda: scrape(agent).get(core) == 30, 5), scrape(agent)

    forged = json.dumps({"pod": "honest", "namespace": "default", "container": "main",
                         "gpus": u, "core": 100, "memory": 16777216})
    for d in writable_dirs(adm.container_response):
        for name in ("limits.json", "vcuda.conf", "forged.json"):
            tmp = os.path.join(d, ".forge")
            with open(tmp, "w") as f:
                f.write(forged)
            os.replace(tmp, os.path.join(d, name))  # root in the container may
    time.sleep(2.5)  # two refreshes of the metrics
    m = scrape(agent)
    assert {k: m.get(k) for k in want} == want
    # A restarted agent rebuilds the same from what it wrote itself.
    assert agent.stop() == 0, agent.text()
    again = Agent(agent_bin, agent.base, api=os.path.join(agent.base, "kubeconfig"))
    try:
        assert kubelet.wait_for_registration(2, timeout=15).ok
        assert wait_until(lambda: scrape(again).get(ctr_core) is not None, 5), scrape(again)
        m = scrape(again)
        assert {k: m.get(k) for k in want} == want
    finally:
        assert again.stop() == 0, again.text()

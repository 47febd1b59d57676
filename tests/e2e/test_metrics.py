"""End-to-end: `--metrics`, scraped by hand and by a real Prometheus. The
counters follow what the mount and the server did (reads, bytes, errors,
open files, refreshes, HTTP requests by method and status); the endpoint
answers /metrics only. The endpoint does not depend on how the kernel hands
FUSE requests over: these run once."""

import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request

import pytest

from conftest import run
from test_http import Server
from test_media_software import free_port
from test_live import wait_for

pytestmark = pytest.mark.once

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$")


def metrics_port(log_path, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        with open(log_path) as f:
            m = re.search(r"metrics at http://127\.0\.0\.1:(\d+)/metrics", f.read())
        if m:
            return int(m.group(1))
        time.sleep(0.05)
    raise AssertionError("no metrics address in " + log_path)


def get(port, path, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.request(method, path)
    r = conn.getresponse()
    body = r.read().decode()
    conn.close()
    return r.status, r.getheader("content-type"), body


def scrape(port):
    """{'name{labels}': value} of every sample."""
    status, kind, body = get(port, "/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4"), (status, kind)
    samples = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            m = SAMPLE.match(line)
            assert m, "not a sample line: %r" % line
            samples[m.group(1)] = float(m.group(2))
    return samples


def read_all(mnt):
    total = 0
    for d, _, files in os.walk(mnt):
        for name in files:
            with open(os.path.join(d, name), "rb") as f:
                total += len(f.read())
    return total


def test_a_mount_counts_what_it_serves(store, mount):
    m = mount(store, "--metrics", "127.0.0.1:0")
    port = metrics_port(str(m.mnt) + ".log")
    before = scrape(port)
    files = sum(len(f) for _, _, f in os.walk(m.mnt))
    assert before["retagfs_view_tracks"] == files
    assert before["process_resident_memory_bytes"] > 1 << 20
    read_bytes = 'retagfs_fuse_read_bytes_total'
    reads = 'retagfs_fuse_requests_total{kind="read"}'
    size = read_all(m.mnt)
    assert not os.path.exists(os.path.join(m.mnt, "no such file"))
    held = open(next(os.path.join(d, f) for d, _, fs in os.walk(m.mnt) for f in fs), "rb")
    try:
        after = scrape(port)
        assert after["retagfs_open_files"] == 1
    finally:
        held.close()
    # Every byte read came through the daemon once (no passthrough for
    # retagged files; the page cache was empty).
    assert after[reads] > before.get(reads, 0)
    assert 0 < after[read_bytes] - before[read_bytes] <= size
    assert after['retagfs_fuse_errors_total{errno="ENOENT"}'] >= 1
    assert after['retagfs_fuse_requests_total{kind="readdirplus"}'] >= 1
    assert after["retagfs_open_cache_misses_total"] >= 1
    wait_for(lambda: scrape(port)["retagfs_open_files"] == 0)
    # Only /metrics, only reads.
    assert get(port, "/")[0] == 404
    assert get(port, "/metrics", "POST")[0] == 405
    assert get(port, "/metrics", "HEAD")[0] == 200


def open_sockets(pid):
    """How many sockets process `pid` holds."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except FileNotFoundError:  # closed meanwhile
            pass
    return count


def test_many_idle_connections_take_few_of_the_processes_sockets(store, mount):
    """Connections beyond the endpoint's few wait in the listen queue: a
    client opening a hundred does not make the daemon hold a hundred."""
    m = mount(store, "--metrics", "127.0.0.1:0")
    port = metrics_port(str(m.mnt) + ".log")
    before = open_sockets(m.proc.pid)
    idle = [socket.create_connection(("127.0.0.1", port)) for _ in range(100)]
    try:
        time.sleep(0.5)
        assert open_sockets(m.proc.pid) - before <= 16, (before, open_sockets(m.proc.pid))
    finally:
        for s in idle:
            s.close()
    wait_for(lambda: scrape(port)["retagfs_view_tracks"] > 0)


def test_a_refresh_is_counted_with_its_latency(store, library, mount):
    m = mount(store, "--metrics", "127.0.0.1:0")
    port = metrics_port(str(m.mnt) + ".log")
    before = scrape(port)
    run("tag", "set", str(library / "tagged.flac"), "comment=metrics", "--db", str(store))
    wait_for(lambda: scrape(port).get("retagfs_refreshes_total", 0) > before.get("retagfs_refreshes_total", 0))
    after = scrape(port)
    assert after["retagfs_refresh_seconds_count"] == after["retagfs_refreshes_total"]
    assert after["retagfs_store_change"] > before["retagfs_store_change"]


def test_serve_counts_requests_by_method_and_status(tmp_path, store):
    server = Server(store, tmp_path / "serve.log", "--metrics", "127.0.0.1:0")
    try:
        port = metrics_port(str(tmp_path / "serve.log"))
        listing = json.loads(server.request("GET", "/", {"Accept": "application/json"})[2])
        assert server.request("GET", "/no%20such%20folder/")[0] == 404
        first = next(e for e in listing["entries"] if e["type"] == "folder")
        status, _, _ = server.request("GET", urllib.parse.urljoin("/", first["href"]))
        assert status == 200
        samples = scrape(port)
        assert samples['retagfs_http_requests_total{method="GET",status="200"}'] == 2
        assert samples['retagfs_http_requests_total{method="GET",status="404"}'] == 1
        assert samples["retagfs_http_request_seconds_count"] == 3
    finally:
        server.stop()


PROMETHEUS = shutil.which("prometheus")


def prometheus_query(port, query):
    url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (port, urllib.parse.quote(query))
    with urllib.request.urlopen(url, timeout=10) as r:
        result = json.load(r)["data"]["result"]
    return float(result[0]["value"][1]) if result else None


def test_a_real_prometheus_scrapes_the_mount(tmp_path, store, mount):
    assert PROMETHEUS, "prometheus is not installed (make test-deps installs it)"
    m = mount(store, "--metrics", "127.0.0.1:0")
    port = metrics_port(str(m.mnt) + ".log")
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
        "scrape_configs:\n  - job_name: retagfs\n    static_configs:\n"
        "      - targets: ['127.0.0.1:%d']\n" % port)
    web = free_port()
    log = open(tmp_path / "prometheus.log", "w+")
    prom = subprocess.Popen([PROMETHEUS, "--config.file", str(config), "--storage.tsdb.path", str(tmp_path / "tsdb"),
                             "--web.listen-address", "127.0.0.1:%d" % web], stdout=log, stderr=subprocess.STDOUT)
    try:
        def target_up():
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/api/v1/targets" % web, timeout=5) as r:
                    targets = json.load(r)["data"]["activeTargets"]
            except OSError:
                return False
            return any(t["health"] == "up" for t in targets)
        wait_for(target_up, timeout=30)
        query = 'retagfs_fuse_requests_total{kind="read"}'
        wait_for(lambda: prometheus_query(web, query) is not None, timeout=15)
        before = prometheus_query(web, query)
        read_all(m.mnt)
        wait_for(lambda: prometheus_query(web, query) > before, timeout=15)
        assert prometheus_query(web, "up") == 1
    except AssertionError:
        log.seek(0)
        print(log.read()[-4000:])
        raise
    finally:
        prom.terminate()
        prom.wait(timeout=20)

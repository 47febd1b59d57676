#!/usr/bin/env python3
"""HTTP benchmark rows (part of scripts/bench.py): random 64 KiB range GETs
at concurrency 16 over a library's files, `retagfs serve` against nginx
serving the backing files in the same run, measured by wrk (requests per
second and latency percentiles). Runs alone as
`scripts/bench_http.py --lib DIR --db DB`."""

import argparse
import http.client
import json
import os
import random
import re
import socket
import subprocess
import tempfile
import time
import urllib.parse

BIN = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "target", "release", "retagfs")

SECONDS, CONNECTIONS, THREADS, SPAN = 10, 16, 2, 64 << 10


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port, proc):
    deadline = time.time() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError("the server on port %d did not come up" % port)
            time.sleep(0.05)


def wrk_script(work, files, name):
    """A wrk script whose requests ask for a random file of `files` (path,
    bytes both sides serve of it) and a 64 KiB range from a random offset
    inside it."""
    lua = os.path.join(work, name + ".lua")
    with open(lua, "w") as f:
        rows = ("{%s, %d}" % (json.dumps(quoted(path)), max(size - 1, 0)) for path, size in files)
        f.write("files = {\n" + ",\n".join(rows) + "\n}\n")
        f.write("math.randomseed(7)\n"
                "request = function()\n"
                "  local f = files[math.random(#files)]\n"
                "  local from = math.random(0, f[2])\n"
                "  return wrk.format('GET', f[1], {['Range'] = 'bytes=' .. from .. '-' .. (from + %d)})\n"
                "end\n" % (SPAN - 1))
    return lua


def quoted(path):
    return "/" + "/".join(urllib.parse.quote(p, safe="") for p in path.split("/"))


def served_size(port, path):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("HEAD", quoted(path))
    size = int(conn.getresponse().getheader("Content-Length"))
    conn.close()
    return size


def run_wrk(port, lua):
    out = subprocess.run(["wrk", "-t%d" % THREADS, "-c%d" % CONNECTIONS, "-d%ds" % SECONDS, "--latency",
                          "-s", lua, "http://127.0.0.1:%d/" % port], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = {}
    for p in ("50", "90", "99"):
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % p, out)
        scale = {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
        pct[p] = float(m.group(1)) * scale
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, pct, int(errors.group(1)) if errors else 0


def nginx(work, root, port):
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        # Workers of a master started as root run as `nobody`, which cannot
        # read a private temporary library.
        f.write("user root;\n" if os.geteuid() == 0 else "")
        f.write("daemon off; worker_processes 2; pid %s/nginx.pid; error_log %s/nginx.err;\n"
                "events { worker_connections 1024; }\n"
                "http { access_log off; sendfile on; tcp_nopush on; client_body_temp_path %s;\n"
                "  proxy_temp_path %s; fastcgi_temp_path %s; uwsgi_temp_path %s; scgi_temp_path %s;\n"
                "  server { listen 127.0.0.1:%d; root %s; } }\n"
                % (work, work, work, work, work, work, work, port, root))
    return subprocess.Popen(["nginx", "-c", conf, "-p", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def bench(lib, db, sample=2000):
    """Rows: (what, retagfs (rps, percentiles, errors), nginx (same))."""
    work = tempfile.mkdtemp(prefix="retagfs-bench-http-")
    tracks = json.loads(subprocess.run([BIN, "export", "--db", db], capture_output=True, text=True, check=True).stdout)
    rng = random.Random(1)
    chosen = rng.sample(tracks, min(sample, len(tracks)))
    port, nport = free_port(), free_port()
    served = subprocess.Popen([BIN, "serve", "--db", db, "--listen", "127.0.0.1:%d" % port],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    direct = nginx(work, lib, nport)
    try:
        wait_listening(port, served)
        wait_listening(nport, direct)
        # Offsets both sides hold: the served file and the backing one
        # differ in size by their tags.
        sizes = [min(served_size(port, t["path"]), os.path.getsize(t["backing_path"])) for t in chosen]
        ours_lua = wrk_script(work, [(t["path"], n) for t, n in zip(chosen, sizes)], "served")
        theirs_lua = wrk_script(work, [(os.path.relpath(t["backing_path"], lib), n)
                                       for t, n in zip(chosen, sizes)], "backing")
        # Alternated, so that both see the same machine.
        ours, theirs = [], []
        for _ in range(2):
            ours.append(run_wrk(port, ours_lua))
            theirs.append(run_wrk(nport, theirs_lua))
        return ours, theirs
    finally:
        served.terminate()
        direct.terminate()
        served.wait(timeout=20)
        direct.wait(timeout=20)


def report(ours, theirs, row):
    """Prints through bench.py's `row` (requests per second and latency)."""
    best = lambda runs: max(runs, key=lambda r: r[0])  # noqa: E731
    o, t = best(ours), best(theirs)
    spread = lambda runs: "%.0f-%.0f req/s" % (min(r[0] for r in runs), max(r[0] for r in runs))  # noqa: E731
    row("http", "random 64 KiB range GETs, 16 connections (req/s)", o[0], t[0], unit="req",
        note="direct = nginx over the backing files; %s against %s; %d and %d non-2xx"
             % (spread(ours), spread(theirs), o[2], t[2]))
    for p in ("50", "99"):
        row("http", "the same, p%s latency (ms)" % p, o[1][p], t[1][p], unit="ms")


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--db", required=True)
    a = ap.parse_args()
    ours, theirs = bench(a.lib, a.db)

    def row(area, work, o, t, unit="", note=""):
        print(f"{area:8s} {work:52s} {o:>12.1f} {t:>12.1f} {o / t if t else 0:>6.2f}x {unit} {note}")
    report(ours, theirs, row)


if __name__ == "__main__":
    main()

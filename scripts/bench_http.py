#!/usr/bin/env python3
"""HTTP benchmark rows (part of scripts/bench.py): the same random pattern
of 64 KiB spans (the same files and the same list of offsets, 16 at once)
read from one library through every way retagfs serves it, in the same run:

  our HTTP             `retagfs serve`, Range GETs (wrk)
  our WebDAV           PROPFIND Depth 1 of the view's largest folder (wrk)
  the mount directly   16 Python processes, each open + pread + close
  nginx over the mount what users do without `retagfs serve` (wrk)
  nginx over backing   nginx serving the backing files: the limit (wrk)

then whole-file reads of a fixed random sample of 200 tracks (GETs, and
1 MiB reads from the mount). Runs alternate, RUNS of each. Prints rows
through bench.py's `row`, then one Markdown table per protocol for
docs/benchmarks.md. Runs alone as `scripts/bench_http.py --lib DIR --db DB`
(it mounts, so as root or with fusermount3; the mount's --io-uring is
retagfs's default there, RETAGFS_IO_URING changes it); RETAGFS_BIN picks the
binary (default: target/release/retagfs)."""

import argparse
import collections
import functools
import json
import multiprocessing
import os
import random
import re
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("RETAGFS_BIN", os.path.join(ROOT, "target", "release", "retagfs"))

SECONDS, CONNECTIONS, THREADS, SPAN, RUNS = 10, 16, 2, 64 << 10, 2
# Random spans in the list every side reads in turn, and the whole-file
# sample; a whole-file read is a span at offset -1.
OPS, WHOLE, WHOLE_READ = 20000, 200, 1 << 20


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


def wait_mounted(mnt, proc):
    deadline = time.time() + 600
    while not os.path.ismount(mnt):
        if proc.poll() is not None or time.time() > deadline:
            raise RuntimeError("the mount on %s did not come up (log: %s.log)" % (mnt, mnt))
        time.sleep(0.01)


def quoted(path):
    return "/" + "/".join(urllib.parse.quote(p, safe="") for p in path.split("/"))


def wrk_script(work, name, paths, ops, method="GET", headers=None):
    """A wrk script that goes through `ops` ((index in `paths`, offset), an
    offset of -1 for the whole file) in turn, each wrk thread from its own
    place in the list, as run_reader's threads do; a span asks for a 64 KiB
    range from its offset."""
    lua = os.path.join(work, name + ".lua")
    with open(lua, "w") as f:
        f.write("paths = {\n" + ",\n".join(json.dumps(p) for p in paths) + "\n}\n")
        f.write("ops = {\n" + ",\n".join("{%d, %d}" % (i + 1, off) for i, off in ops) + "\n}\n")
        f.write("headers = {%s}\n" % ", ".join("[%s] = %s" % (json.dumps(k), json.dumps(v))
                                               for k, v in (headers or {}).items()))
        f.write("local threads = 0\n"
                "function setup(thread) thread:set('first', threads * math.floor(#ops / %d)); "
                "threads = threads + 1 end\n"
                "function init(args) i = first end\n"
                "request = function()\n"
                "  i = i %% #ops + 1\n"
                "  local op = ops[i]\n"
                "  if op[2] >= 0 then headers['Range'] = 'bytes=' .. op[2] .. '-' .. (op[2] + %d) end\n"
                "  return wrk.format(%s, paths[op[1]], headers)\n"
                "end\n" % (THREADS, SPAN - 1, json.dumps(method)))
    return lua


def percentiles(seconds):
    s = sorted(seconds)
    return {p: s[min(len(s) - 1, int(len(s) * int(p) / 100))] * 1e3 for p in ("50", "99")} if s else \
        {"50": 0.0, "99": 0.0}


def run_wrk(port, lua):
    """One wrk run: {rate (requests/s), ms by percentile, errors (non-2xx
    answers and socket errors), mbs (MB/s on the wire, headers included)}."""
    out = subprocess.run(["wrk", "-t%d" % THREADS, "-c%d" % CONNECTIONS, "-d%ds" % SECONDS, "--latency",
                          "-s", lua, "http://127.0.0.1:%d/" % port], capture_output=True, text=True, check=True).stdout
    pct = {}
    for p in ("50", "99"):
        m = re.search(r"\s%s%%\s+([\d.]+)(us|ms|s)" % p, out)
        pct[p] = float(m.group(1)) * {"us": 1e-3, "ms": 1.0, "s": 1e3}[m.group(2)]
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    sockets = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    wire = re.search(r"Transfer/sec:\s+([\d.]+)([KMG]?B)", out)
    return {"rate": float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1)), "ms": pct,
            "errors": (int(errors.group(1)) if errors else 0) + (sum(map(int, sockets.groups())) if sockets else 0),
            "mbs": float(wire.group(1)) * {"B": 1, "KB": 1 << 10, "MB": 1 << 20, "GB": 1 << 30}[wire.group(2)] / 1e6}


def read_ops(files, ops, start, k):
    """Reader k of run_reader: from its own place in `ops`, open + one
    64 KiB pread at the offset (or 1 MiB reads to the end) + close, from
    `start` for SECONDS; (seconds per operation, bytes, errors)."""
    span, whole = bytearray(SPAN), bytearray(WHOLE_READ)
    lat, got, errors, i = [], 0, 0, k * len(ops) // CONNECTIONS
    time.sleep(max(0.0, start - time.perf_counter()))
    while (began := time.perf_counter()) < start + SECONDS:
        f, off = ops[i % len(ops)]
        i += 1
        try:
            fd = os.open(files[f], os.O_RDONLY)
            try:
                if off >= 0:
                    got += os.preadv(fd, [span], off)
                else:
                    while n := os.readv(fd, [whole]):
                        got += n
            finally:
                os.close(fd)
        except OSError:
            errors += 1
            continue
        lat.append(time.perf_counter() - began)
    return lat, got, errors


def run_reader(root, paths, ops):
    """A directory (the mount) read directly with the pattern wrk sends:
    CONNECTIONS processes (threads would queue on the GIL, which showed as
    milliseconds of p99 even over the backing files), started together,
    read_ops each. The same figures as run_wrk's, latency per operation."""
    files = [os.path.join(root, p) for p in paths]
    start = time.perf_counter() + 1  # the workers forked and waiting
    with multiprocessing.get_context("fork").Pool(CONNECTIONS) as pool:
        done = pool.map(functools.partial(read_ops, files, ops, start), range(CONNECTIONS))
    lat = [s for d in done for s in d[0]]
    return {"rate": len(lat) / SECONDS, "ms": percentiles(lat), "errors": sum(d[2] for d in done),
            "mbs": sum(d[1] for d in done) / SECONDS / 1e6}


def nginx(work, roots):
    """One nginx, a server per {port: root}. It serves the mount as root
    thanks to `user root;`: workers of a master started as root otherwise run
    as `nobody`, which cannot read a private library nor (without
    `--allow-other`) a FUSE mount of another user. Started as another user,
    nginx keeps that user, the mount's, and needs neither; an nginx run as
    a service (www-data) over a user's mount needs `retagfs mount
    --allow-other` (and user_allow_other in /etc/fuse.conf). No
    `tcp_nopush on` (Debian's nginx.conf has it): it held 64 KiB range
    answers of full-size tracks ~40 ms (Nagle against delayed ACKs), 0.9k
    instead of 16k requests/s on loopback."""
    conf = os.path.join(work, "nginx.conf")
    with open(conf, "w") as f:
        f.write("user root;\n" if os.geteuid() == 0 else "")
        f.write("daemon off; worker_processes 2; pid %s/nginx.pid; error_log %s/nginx.err;\n"
                "events { worker_connections 1024; }\n"
                "http { access_log off; sendfile on; client_body_temp_path %s;\n"
                "  proxy_temp_path %s; fastcgi_temp_path %s; uwsgi_temp_path %s; scgi_temp_path %s;\n"
                % (work, work, work, work, work, work, work))
        f.write("".join("  server { listen 127.0.0.1:%d; root %s; }\n" % (port, root) for port, root in roots.items()))
        f.write("}\n")
    return subprocess.Popen(["nginx", "-c", conf, "-p", work], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def largest_folder(paths):
    """(view path, entries) of the folder with most entries (files and
    folders)."""
    entries = collections.defaultdict(set)
    for p in paths:
        parts = p.split("/")
        for k in range(len(parts)):
            entries["/".join(parts[:k])].add(parts[k])
    folder = max(entries, key=lambda d: len(entries[d]))
    return folder, len(entries[folder])


def started(procs, cmd, log):
    with open(log, "wb") as out:
        procs.append(subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT))
    return procs[-1]


def bench(lib, db, mount_args=(), sample=2000):
    """{"ranges": {side: [runs]}, "whole": {side: [runs]}, "folder": (path,
    entries), "files": (range files, whole files)}; a run as run_wrk's."""
    work = tempfile.mkdtemp(prefix="retagfs-bench-http-")
    tracks = json.loads(subprocess.run([BIN, "export", "--db", db], capture_output=True, text=True, check=True).stdout)
    rng = random.Random(1)
    chosen = rng.sample(tracks, min(sample, len(tracks)))
    whole = rng.sample(tracks, min(WHOLE, len(tracks)))
    mnt = os.path.join(work, "mnt")
    os.mkdir(mnt)
    port, mport, nport = free_port(), free_port(), free_port()
    procs = []
    try:
        served = started(procs, [BIN, "serve", "--db", db, "--listen", "127.0.0.1:%d" % port],
                         os.path.join(work, "serve.log"))
        mounted = started(procs, [BIN, "mount", mnt, "--db", db, *mount_args], mnt + ".log")
        wait_mounted(mnt, mounted)
        procs.append(nginx(work, {mport: mnt, nport: lib}))
        for p, proc in ((port, served), (mport, procs[-1]), (nport, procs[-1])):
            wait_listening(p, proc)
        # Offsets every side holds: a served file and its backing one differ
        # in size by their tags (the mount and `serve` serve the same view).
        sizes = [min(os.path.getsize(os.path.join(mnt, t["path"])), os.path.getsize(t["backing_path"]))
                 for t in chosen]
        ops = [(i, rng.randrange(sizes[i])) for i in (rng.randrange(len(chosen)) for _ in range(OPS))]
        folder, entries = largest_folder([t["path"] for t in tracks])
        sides = {}
        for name, picked, pattern in (("ranges", chosen, ops), ("whole", whole, [(i, -1) for i in range(len(whole))])):
            view = [t["path"] for t in picked]
            backing = [os.path.relpath(t["backing_path"], lib) for t in picked]
            view_lua = wrk_script(work, name + "-view", [quoted(p) for p in view], pattern)
            backing_lua = wrk_script(work, name + "-backing", [quoted(p) for p in backing], pattern)
            sides[name] = {
                "our HTTP": lambda lua=view_lua: run_wrk(port, lua),
                "the mount, read directly": lambda v=view, o=pattern: run_reader(mnt, v, o),
                "nginx over the mount": lambda lua=view_lua: run_wrk(mport, lua),
                "nginx over the backing files": lambda lua=backing_lua: run_wrk(nport, lua),
                "the same readers over the backing files": lambda b=backing, o=pattern: run_reader(lib, b, o),
            }
        propfind = wrk_script(work, "propfind", [quoted(folder) + "/" if folder else "/"], [(0, -1)],
                              method="PROPFIND", headers={"Depth": "1"})
        sides["ranges"]["our WebDAV, PROPFIND Depth 1"] = lambda: run_wrk(port, propfind)
        # Alternated, so that every side sees the same machine.
        results = {name: collections.defaultdict(list) for name in sides}
        for _ in range(RUNS):
            for name, measures in sides.items():
                for side, measure in measures.items():
                    results[name][side].append(measure())
    finally:
        # nginx first: files it holds open on the mount would only detach it.
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    if not os.path.ismount(mnt):
        shutil.rmtree(work, ignore_errors=True)
    return {"ranges": results["ranges"], "whole": results["whole"], "folder": (folder, entries),
            "files": (len(chosen), len(whole))}


def best(runs):
    return max(runs, key=lambda r: r["rate"])


def span(runs):
    return "%.0f-%.0f" % (min(r["rate"] for r in runs), max(r["rate"] for r in runs))


# Targets (printed, not asserted): (side, against, least ratio of op/s,
# whether its p99 must be no worse).
TARGETS = {
    "ranges": [("our HTTP", "nginx over the mount", 1.5, True),
               ("our HTTP", "nginx over the backing files", 0.6, False)],
    "whole": [("our HTTP", "nginx over the backing files", 0.8, False)],
}


def targets(kind, side, res):
    out = []
    for who, against, least, p99 in TARGETS[kind]:
        if who != side:
            continue
        o, t = best(res[side]), best(res[against])
        ratio = o["rate"] / t["rate"]
        out.append("≥ %.1fx %s: %.2fx %s" % (least, against, ratio, "met" if ratio >= least else "MISSED"))
        if p99:
            out.append("p99 no worse: %.1f against %.1f ms %s"
                       % (o["ms"]["99"], t["ms"]["99"], "met" if o["ms"]["99"] <= t["ms"]["99"] else "MISSED"))
    return "; ".join(out)


def report(res, row):
    """Rows through bench.py's `row` (rate of the best run, its latency,
    every run's rate in the note), then the Markdown table."""
    (folder, entries), (nfiles, nwhole) = res["folder"], res["files"]
    backing, over_mount = "nginx over the backing files", "nginx over the mount"
    unit = {"ranges": "req", "whole": "file"}

    def pair(kind, work, side, against, latency=True, note=""):
        runs, theirs = res[kind][side], res[kind][against]
        o, t = best(runs), best(theirs)
        mbs = " (%.1f and %.1f MB/s)" % (o["mbs"], t["mbs"]) if kind == "whole" else ""
        row("http", work, o["rate"], t["rate"], unit=unit[kind],
            note="direct = %s; runs %s against %s/s%s; %d and %d errors%s"
                 % (against, span(runs), span(theirs), mbs, o["errors"], t["errors"], note))
        for p in ("50", "99") if latency else ():
            row("http", "the same, p%s latency (ms)" % p, o["ms"][p], t["ms"][p], unit="ms")

    def note(kind, side):
        t = targets(kind, side, res[kind])
        return "; target " + t if t else ""

    pair("ranges", "random 64 KiB ranges, 16 at once: our HTTP (req/s)", "our HTTP", backing,
         note=note("ranges", "our HTTP"))
    pair("ranges", "the same, our HTTP against nginx over the mount (req/s)", "our HTTP", over_mount)
    pair("ranges", "the same, nginx over the mount (req/s)", over_mount, backing, latency=False)
    pair("ranges", "the same, from the mount: 16 processes open+pread+close", "the mount, read directly",
         "the same readers over the backing files")
    o = best(res["ranges"]["our WebDAV, PROPFIND Depth 1"])
    row("http", "PROPFIND Depth 1, largest folder, 16 at once (req/s)", o["rate"], None, unit="req",
        note="/%s (%d entries); runs %s/s; p50 %.1f ms, p99 %.1f ms; %d errors"
             % (folder, entries, span(res["ranges"]["our WebDAV, PROPFIND Depth 1"]), o["ms"]["50"], o["ms"]["99"],
                o["errors"]))
    pair("whole", "whole files, %d tracks, 16 at once: our HTTP (files/s)" % nwhole, "our HTTP", backing,
         latency=False, note=note("whole", "our HTTP"))
    pair("whole", "the same, nginx over the mount (files/s)", over_mount, backing, latency=False)
    pair("whole", "the same, from the mount: 1 MiB reads (files/s)", "the mount, read directly",
         "the same readers over the backing files", latency=False)

    print("\n| path | op/s (min-max) | p50 ms | p99 ms | x nginx over backing | x nginx over mount | target |\n"
          "|---|---|---|---|---|---|---|")
    titles = {"ranges": "random 64 KiB ranges of %d files" % nfiles, "whole": "whole files, %d tracks" % nwhole}
    for kind, sides in res.items():
        if kind not in titles:
            continue
        for side, runs in sides.items():
            o = best(runs)
            ratios = ["%.2fx" % (o["rate"] / best(sides[against])["rate"])
                      if not side.startswith("our WebDAV") else "-" for against in (backing, over_mount)]
            rate = span(runs) + (" (%.0f MB/s)" % o["mbs"] if kind == "whole" else "")
            where = "/%s, %d entries" % (folder, entries) if side.startswith("our WebDAV") else titles[kind]
            print("| %s, %s | %s | %.2f | %.2f | %s | %s | %s |"
                  % (side, where, rate, o["ms"]["50"], o["ms"]["99"], *ratios, targets(kind, side, sides)),
                  flush=True)
    print(flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--db", required=True)
    a = ap.parse_args()
    res = bench(a.lib, a.db)

    def row(area, work, o, t=None, unit="", note=""):
        ratio = "%6.2fx" % (o / t) if t else "       "
        print(f"{area:8s} {work:56s} {o:>12.1f} {t or 0:>12.1f} {ratio} {unit} {note}")
    report(res, row)


if __name__ == "__main__":
    main()

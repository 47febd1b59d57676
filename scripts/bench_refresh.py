#!/usr/bin/env python3
"""Benchmark of live refresh (not a test: it prints figures, asserts nothing).

For libraries of several sizes (hard links of one small FLAC, each given its
own title), it mounts the store and measures:
  (a) the daemon's own refresh time (from `mount -v` log lines) for a
      single-track retag and for a 1000-track retag (one `import`);
  (b) through the real mount, the time from `retagfs tag set` returning
      until the new path is visible with stat and in its directory's
      listing (median of 20 retags), idle and while four other processes
      keep reading files of the mount.
Single-track figures should stay flat as the library grows. The daemon's
RSS is printed after it all.

Usage: scripts/bench_refresh.py [--sizes 100,1000,10000,100000] [--work DIR]
"""

import argparse
import json
import multiprocessing
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("RETAGFS_BIN", os.path.join(ROOT, "target", "release", "retagfs"))
SOURCE = os.path.join(ROOT, "tests", "fixtures", "tagged.flac")
REFRESH = re.compile(r"refresh: (\d+) track\(s\) changed.* in ([0-9.]+) ms")


def run(*args, **kw):
    return subprocess.run([BIN, *args], check=True, capture_output=True, text=True, **kw)


def make_library(work, n):
    lib = os.path.join(work, f"lib-{n}")
    db = os.path.join(work, f"store-{n}.db")
    if not os.path.exists(db):
        for i in range(n):
            d = os.path.join(lib, f"{i // 1000:03d}")
            if i % 1000 == 0:
                # One copy per folder: a file can only have so many links.
                os.makedirs(d, exist_ok=True)
                shutil.copy(SOURCE, os.path.join(d, f"{i}.flac"))
            else:
                os.link(os.path.join(d, f"{i - i % 1000}.flac"), os.path.join(d, f"{i}.flac"))
        run("scan", lib, "--db", db)
        tracks = json.loads(run("export", "--db", db).stdout)
        edits = [{"id": t["id"], "tags": {"title": f"Song {t['id']}", "album": f"Album {t['id'] // 12}"}}
                 for t in tracks]
        run("import", "--db", db, "-", input=json.dumps(edits))
    return db


class Mounted:
    def __init__(self, db, mnt):
        os.makedirs(mnt, exist_ok=True)
        self.log_path = mnt + ".log"
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([BIN, "mount", mnt, "--db", db, "-v"], stdout=self.log,
                                     stderr=subprocess.STDOUT)
        self.mnt = mnt
        deadline = time.time() + 600
        while not os.path.ismount(mnt):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("mount failed: " + open(self.log_path).read())
            time.sleep(0.05)

    def refresh_times(self):
        return [(int(m.group(1)), float(m.group(2))) for m in REFRESH.finditer(open(self.log_path).read())]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def rss_mib(pid):
    """Resident memory of a process, MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def wait_visible(path, timeout=10.0):
    """Seconds until `path` can be stat'ed and its directory lists it."""
    start = time.perf_counter()
    name, folder = os.path.basename(path), os.path.dirname(path)
    while not (os.path.exists(path) and name in os.listdir(folder)):
        if time.perf_counter() - start > timeout:
            return float("nan")
        time.sleep(0.0005)
    return time.perf_counter() - start


def keep_reading(paths, stop):
    """Reads whole files of the mount until told to stop (a media server)."""
    i = 0
    while not stop.is_set():
        try:
            with open(paths[i % len(paths)], "rb") as f:
                f.read()
        except OSError:
            pass
        i += 1


def retag_latencies(db, m, victim, label):
    album = os.path.join(m.mnt, os.path.dirname(victim["path"]))
    os.listdir(album)
    visible = []
    for i in range(20):
        title = f"Retag {label} {i} {time.time_ns()}"
        run("tag", "--db", db, "set", str(victim["id"]), f"title={title}")
        visible.append(wait_visible(os.path.join(album, f"03 {title}.flac")))
    return visible


def bench(work, n):
    db = make_library(work, n)
    tracks = json.loads(run("export", "--db", db).stdout)
    t0 = time.perf_counter()
    m = Mounted(db, os.path.join(work, f"mnt-{n}"))
    mount_s = time.perf_counter() - t0
    try:
        victim = tracks[len(tracks) // 2]
        visible = retag_latencies(db, m, victim, "idle")
        # Again while four other processes keep reading files of the mount.
        served = [os.path.join(m.mnt, t["path"]) for t in tracks[: min(len(tracks), 2000)]]
        stop = multiprocessing.Event()
        readers = [multiprocessing.Process(target=keep_reading, args=(served[k::4], stop)) for k in range(4)]
        for r in readers:
            r.start()
        time.sleep(0.5)
        loaded = retag_latencies(db, m, victim, "loaded")
        stop.set()
        for r in readers:
            r.join()
        time.sleep(0.3)
        single = [ms for count, ms in m.refresh_times() if count == 1]
        edits = [{"id": t["id"], "tags": {"comment": f"bulk {time.time_ns()}"}} for t in tracks[:1000]]
        run("import", "--db", db, "-", input=json.dumps(edits))
        deadline = time.time() + 30
        bulk = []
        while not bulk and time.time() < deadline:
            bulk = [ms for count, ms in m.refresh_times() if count == len(edits)]
            time.sleep(0.05)
        rss = rss_mib(m.proc.pid)
    finally:
        m.stop()
    return {
        "tracks": n,
        "mount_s": mount_s,
        "refresh_1_ms": statistics.median(single) if single else float("nan"),
        "refresh_1000_ms": bulk[0] if bulk else float("nan"),
        "visible_median_ms": statistics.median(visible) * 1000,
        "visible_max_ms": max(visible) * 1000,
        "visible_loaded_median_ms": statistics.median(loaded) * 1000,
        "visible_loaded_max_ms": max(loaded) * 1000,
        "rss_mib": rss,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100,1000,10000,100000")
    ap.add_argument("--work", help="keep generated libraries here (default: a temp dir)")
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    a = ap.parse_args()
    work = a.work or tempfile.mkdtemp(prefix="retagfs-bench-")
    os.makedirs(work, exist_ok=True)
    rows = []
    for n in (int(s) for s in a.sizes.split(",")):
        rows.append(bench(work, n))
        if not a.json:
            r = rows[-1]
            print(f"{r['tracks']:>7} tracks  mount {r['mount_s']:6.2f} s  refresh 1 track {r['refresh_1_ms']:7.2f} ms"
                  f"  refresh 1000 tracks {r['refresh_1000_ms']:8.2f} ms  tag set -> visible median "
                  f"{r['visible_median_ms']:6.2f} ms (max {r['visible_max_ms']:6.2f}), under read load "
                  f"{r['visible_loaded_median_ms']:6.2f} ms (max {r['visible_loaded_max_ms']:6.2f}), daemon RSS after it "
                  f"{r['rss_mib']:.1f} MiB", flush=True)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
    base = rows[0]["refresh_1_ms"]
    if not a.json and base == base and base > 0:
        print("single-track refresh relative to the smallest library: " +
              ", ".join(f"{r['tracks']}: {r['refresh_1_ms'] / base:.2f}x" for r in rows))
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

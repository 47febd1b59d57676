"""The `metrics` rows of scripts/bench.py: what counting costs. The same
store mounted twice at once, with `--metrics` (scraped every second, as a
Prometheus would) and without it, the two taking turns: a walk of every
file and an indexer's first pass (open and the first 4 KiB of every file),
each after the kernel forgot the names it had looked up, and sequential
reads of each large file through the daemon (no kernel passthrough; the
mount's page cache dropped before each read, the backing file's kept, so
that the daemon's own work is what is timed). The figure held to the
target (at most 1.02) is the total time with over the total time without,
over all the pairs: a single pair's ratio wanders by +-30 % on a shared
machine, and their median by a few percent."""

import os
import statistics
import threading
import time
import urllib.request

from bench_http import free_port

# Pairs of each row: enough that machine noise (a pair's ratio ranges
# over +-30 % here) leaves the median within about a percent.
RUNS = 41
READ_RUNS = 301
TARGET = 1.02


class Scraper:
    """GETs /metrics every `every` seconds until stopped."""

    def __init__(self, port, every=1.0):
        self.stop_event = threading.Event()
        self.scrapes = 0

        def loop():
            while not self.stop_event.wait(every):
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                    r.read()
                self.scrapes += 1
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def stop(self):
        """Stops; a scraper that scraped nothing (its first GET failed)
        would make the rows measure nothing: that ends the run."""
        self.stop_event.set()
        self.thread.join()
        if self.scrapes == 0:
            raise SystemExit("metrics: the endpoint was never scraped")


def drop_page_cache(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def forget_entries():
    """The kernel's cached names and inodes, dropped: a walk asks the
    daemon again, as on a fresh mount, without mounting anew."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")


class Mounts:
    """The same store mounted twice at once, with --metrics (scraped every
    second) and without, both reading through the daemon."""

    def __init__(self, b, db, work):
        port = free_port()
        args = ["--no-kernel-passthrough"]
        self.counted = b.Mount(db, os.path.join(work, "mnt-counted"), *args, "--metrics", f"127.0.0.1:{port}")
        self.plain = b.Mount(db, os.path.join(work, "mnt-plain"), *args)
        for m in (self.counted, self.plain):
            m.wait_ls()
        self.scraper = Scraper(port)

    def stop(self):
        self.scraper.stop()
        self.counted.stop()
        self.plain.stop()


def compared(b, label, mounts, prepare, work, runs):
    """Alternated runs of `work(mnt)` on both mounts (which goes first
    alternating too), each after `prepare(mnt)`: a row of the ratio."""
    times = {True: [], False: []}
    cpu = {True: 0.0, False: 0.0}
    ratios = []
    for r in range(runs):
        took = {}
        for counted in ((True, False) if r % 2 == 0 else (False, True)):
            m = mounts.counted if counted else mounts.plain
            prepare(m.mnt)
            cpu_before = b.cpu_seconds(m.proc.pid)
            t0 = time.perf_counter()
            work(m.mnt)
            took[counted] = time.perf_counter() - t0
            cpu[counted] += b.cpu_seconds(m.proc.pid) - cpu_before
            times[counted].append(took[counted])
        ratios.append(took[True] / took[False])
    total = sum(times[True]) / sum(times[False])
    verdict = "met" if total <= TARGET else "MISSED"
    b.row("metrics", label, b.spread(times[True]), b.spread(times[False]),
          note=f"with / without --metrics over {runs} pairs: total time {total:.3f}; a pair's ratio: median "
               f"{statistics.median(ratios):.3f} ({min(ratios):.3f}-{max(ratios):.3f}); daemon CPU "
               f"{cpu[True] / max(cpu[False], 1e-9):.3f}; target <= {TARGET}: {verdict}")


def bench(b, work, tracks, runs):
    """The rows; `b` is bench.py."""
    if not os.access("/proc/sys/vm/drop_caches", os.W_OK):
        print("(metrics rows skipped: forgetting the kernel's names needs root, /proc/sys/vm/drop_caches)")
        return
    runs = max(runs, RUNS)
    lib = b.make_flac_library(work, tracks)
    db = os.path.join(work, f"metrics-{tracks}.db")
    if not os.path.exists(db):
        b.scan(lib, db)
    mounts = Mounts(b, db, work)
    try:
        compared(b, f"find -type f, names forgotten, {tracks} tracks", mounts,
                 lambda m: forget_entries(), b.find, runs)
        compared(b, f"open + first 4 KiB of every file, {tracks} tracks", mounts,
                 lambda m: forget_entries(), lambda m: b.read_starts(b.all_files(m)), runs // 2)
    finally:
        mounts.stop()
    large = b.make_large_files(work)
    large_db = os.path.join(work, "large.db")
    if not os.path.exists(large_db):
        b.scan(large, large_db)
    mounts = Mounts(b, large_db, work)
    try:
        for name in sorted(os.listdir(large)):
            ext = os.path.splitext(name)[1]
            b.read_seq(os.path.join(large, name))
            path_in = lambda m, ext=ext: next(p for p in b.all_files(m) if p.endswith(ext))  # noqa: E731
            mb = os.path.getsize(os.path.join(large, name)) / 1e6
            compared(b, f"{ext[1:]:5s} sequential 1 MiB through the daemon ({mb:.0f} MB)", mounts,
                     lambda m, path_in=path_in: drop_page_cache(path_in(m)),
                     lambda m, path_in=path_in: b.read_seq(path_in(m)), READ_RUNS)
    finally:
        mounts.stop()

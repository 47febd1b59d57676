#!/usr/bin/env python3
"""Remote-library benchmark rows (part of scripts/bench.py, area `remote`):
retagfs reading a bucket itself against what users do without it, side by
side in one run, every request paying LATENCY_MS of added round trip.

The bucket: versitygw serving a folder on loopback, the libraries uploaded
through the S3 API by rclone (once per work dir). Every client reaches it
through tests/e2e/s3_proxy.py, which delays each request by LATENCY_MS and
counts them:

  retagfs            `retagfs scan s3://BUCKET/PREFIX`, `retagfs mount` of
                     that store (ranged GETs, its disk cache)
  the rclone stack   `rclone mount gw:BUCKET/PREFIX DIR --read-only` with
                     rclone's defaults (--vfs-cache-mode off), retagfs
                     scanning and mounting DIR as a local folder
  naive GETs         a Python loop of sequential 128 KiB ranged GETs
                     (boto3, signed), each waiting for the previous: what a
                     FUSE layer doing one GET per kernel read costs
  local              retagfs mounting the same files in a local folder

Rows: first scans of the tiny FLACs and of the 200 mixed tracks (retagfs
with a fresh --cache-dir, the rclone stack on a fresh `rclone mount`);
re-scans with nothing changed (time, GETs; the rclone stack on a fresh
mount, as after its 5-minute directory cache); an indexer's pass (open +
4 KiB of every file) over a fresh mount after a scan with the same
--cache-dir; each 2-minute file read whole (1 MiB reads) with an empty disk
cache, then again from the disk cache, each read on fresh mounts with the
page cache dropped. Where our mount sits on the rclone mount, the same is
measured with our read-ahead off too (its default 1 MiB chunks, six at a
time, make rclone reopen its stream at every chunk). Ratios are their time
over ours, run by run (the sides take turns). Prints rows through
bench.py's `row`, then one Markdown table for docs/benchmarks.md.

Needs root (mounts, drop_caches), versitygw (`make test-deps`) and rclone.
Runs alone as `scripts/bench_remote.py [--work DIR] [--runs N] [--tracks N]`.
"""

import argparse
import contextlib
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.append(os.path.join(ROOT, "tests", "e2e"))
from s3_proxy import S3Proxy  # noqa: E402
from bench_http import free_port, wait_listening  # noqa: E402

BIN = os.environ.get("RETAGFS_BIN", os.path.join(ROOT, "target", "release", "retagfs"))
ACCESS, SECRET, BUCKET, REGION = "retagfs-bench", "retagfs-bench-secret", "music", "us-east-1"
LATENCY_MS = 20
# The naive reader's GET: one kernel read of a FUSE mount (max_read).
NAIVE_GET = 128 << 10
# A first scan through the rclone stack longer than this is measured once.
RCLONE_PATIENCE = 15 * 60
# Runs of the stream rows, at least: cold single-file reads wander.
STREAM_RUNS = 9


def versitygw_binary():
    found = shutil.which("versitygw")
    if found:
        return found
    gopath = subprocess.run(["go", "env", "GOPATH"], capture_output=True, text=True).stdout.strip() \
        if shutil.which("go") else ""
    path = os.path.join(gopath or os.path.expanduser("~/go"), "bin", "versitygw")
    if not os.path.exists(path):
        raise SystemExit("versitygw is not installed: run `make test-deps`")
    return path


def mounted(mnt):
    """Whether something is mounted on mnt, by the mount table: a FUSE mount
    whose daemon died fails stat, which os.path.ismount takes for no mount."""
    mnt = os.path.realpath(mnt)
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point.encode().decode("unicode_escape") == mnt:
                return True
    return False


def unmount(mnt):
    for cmd in (["fusermount3", "-u", mnt], ["umount", "-l", mnt]):
        if not mounted(mnt):
            return
        subprocess.run(cmd, capture_output=True)


class Stack:
    """Every process started (server, mounts), stopped in reverse order by
    close(), which runs on success, failure, Ctrl-C and SIGTERM; the proxy
    too."""

    def __init__(self):
        self.live = []
        self.proxy = None

    def start(self, cmd, log, env=None, mnt=None):
        return Started(self, cmd, log, env, mnt)

    def close(self):
        while self.live:
            last = self.live[-1]
            try:
                last.stop()
            except Exception as e:  # keep tearing down the rest
                print(f"(remote: stopping {' '.join(last.cmd[:3])} failed: {e!r})", flush=True)
                if last in self.live:
                    self.live.remove(last)
        if self.proxy is not None:
            self.proxy.stop()
            self.proxy = None


class Started:
    """A background process (a server or a mount's daemon); stop() ends it
    and, if it serves a mount, makes sure the mount is gone."""

    def __init__(self, stack, cmd, log, env, mnt):
        self.stack, self.cmd, self.mnt, self.log = stack, cmd, mnt, log
        if mnt:
            os.makedirs(mnt, exist_ok=True)
            unmount(mnt)  # one a killed run left
        with open(log, "ab") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        stack.live.append(self)
        if mnt:
            deadline = time.time() + 120
            while not os.path.ismount(mnt):
                if self.proc.poll() is not None or time.time() > deadline:
                    self.stop()
                    raise SystemExit(f"{cmd[0]} did not mount {mnt} (log: {log})")
                time.sleep(0.01)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        if self in self.stack.live:
            self.stack.live.remove(self)
        if self.proc.poll() is None:
            # retagfs and rclone both unmount on SIGTERM.
            self.proc.terminate()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.mnt:
            unmount(self.mnt)


def secs(v):
    return f"{v:.1f}" if v >= 10 else f"{v:.2f}" if v >= 1 else f"{v:.3f}"


def timing(times):
    """'median s (min-max)' of a list of seconds."""
    m, lo, hi = statistics.median(times), min(times), max(times)
    return f"{secs(m)} s ({secs(lo)}-{secs(hi)})" if len(times) > 1 else f"{secs(m)} s (once)"


def requests(counts):
    """'n GETs, n HEADs, n LISTs' of the median counts of some runs."""
    parts = []
    for kind in ("GET", "HEAD", "LIST"):
        n = statistics.median(c.get(kind, 0) for c in counts)
        if n or kind == "GET":
            parts.append(f"{n:,.0f} {kind}" + ("" if n == 1 else "s"))
    return ", ".join(parts)


def track_count(db):
    with sqlite3.connect(db) as con:
        return con.execute("SELECT count(*) FROM tracks").fetchone()[0]


class Bench:
    """The libraries in the bucket, the proxy every client goes through,
    and the helpers the rows share."""

    def __init__(self, suite, work, stack, proxy, libs):
        self.b, self.stack, self.proxy, self.libs = suite, stack, proxy, libs
        self.dir = os.path.join(work, "remote")
        self.table = []

    def path(self, *parts):
        p = os.path.join(self.dir, *parts)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        return p

    def fresh(self, *parts):
        """An empty folder (a disk cache no run has filled)."""
        p = self.path(*parts)
        shutil.rmtree(p, ignore_errors=True)
        os.makedirs(p)
        return p

    def measured(self, fn):
        """(seconds, requests counted at the proxy) of fn(); the seconds fn
        returns if it returns a number (bench.py's scan times itself)."""
        self.proxy.reset_counts()
        t0 = time.perf_counter()
        out = fn()
        took = time.perf_counter() - t0
        return out if isinstance(out, float) else took, self.proxy.counts

    def mount(self, db, name, *extra):
        mnt = self.path(name)
        return self.stack.start([BIN, "mount", mnt, "--db", db, *self.b.IO_URING, *extra], mnt + ".log", mnt=mnt)

    def rclone(self, prefix):
        """A fresh `rclone mount` of the prefix, through the proxy, with
        rclone's defaults."""
        mnt = self.path("rclone-" + prefix)
        return self.stack.start(["rclone", "mount", f"gw:{BUCKET}/{prefix}", mnt, "--read-only"],
                                self.path("rclone.log"), env=rclone_env(self.proxy.port), mnt=mnt)

    def report(self, work, ours, ours_counts, against, theirs, their_counts, target=None, least=None,
               least_says=None, also=None):
        """A row through bench.py's `row` and a line of the Markdown table.
        `least`: the target's least ratio of their time to ours (per run,
        runs paired), said as `least_says` if given; `also`: (label,
        seconds, counts) of a variant of the side compared with, shown
        beside it."""
        ratios = [t / o for o, t in zip(ours, theirs)]
        met = ""
        if least is not None:
            met = (least_says or f"≥ {least:g}x") + ": " + ("met" if statistics.median(ratios) >= least else "MISSED")
        target = ", ".join(t for t in (target, met) if t)
        theirs_text = f"{against}: {timing(theirs)}; {requests(their_counts)}"
        if also:
            label, seconds, counts = also
            theirs_text += (f"; {label}: {timing(seconds)}; {requests(counts)}: "
                            f"{ratio_text([t / o for o, t in zip(ours, seconds)])}")
        self.b.row("remote", work, self.b.spread(ours), self.b.spread(theirs),
                   note=f"{requests(ours_counts)}; against {theirs_text}; {target}")
        self.table.append((work, f"{timing(ours)}; {requests(ours_counts)}", theirs_text, ratio_text(ratios),
                           target))


def ratio_text(ratios):
    """'median x (min-max)' of per-run ratios."""
    return "%.2fx (%.2f-%.2f)" % (statistics.median(ratios), min(ratios), max(ratios))


def s3_env(port, cache_home):
    return {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_REGION": REGION, "AWS_ACCESS_KEY_ID": ACCESS,
            "AWS_SECRET_ACCESS_KEY": SECRET, "XDG_CACHE_HOME": cache_home}


def rclone_env(port):
    """rclone's remote `gw:` from the environment. Debian's rclone refuses to
    start with AWS_CA_BUNDLE set."""
    env = {k: v for k, v in os.environ.items() if k != "AWS_CA_BUNDLE"}
    env.update({
        "RCLONE_CONFIG_GW_TYPE": "s3", "RCLONE_CONFIG_GW_PROVIDER": "Other",
        "RCLONE_CONFIG_GW_ENDPOINT": f"http://127.0.0.1:{port}", "RCLONE_CONFIG_GW_REGION": REGION,
        "RCLONE_CONFIG_GW_ACCESS_KEY_ID": ACCESS, "RCLONE_CONFIG_GW_SECRET_ACCESS_KEY": SECRET,
        "RCLONE_CONFIG_GW_FORCE_PATH_STYLE": "true",
    })
    return env


def start_bucket(stack, folder, libs):
    """versitygw serving `folder`, every library uploaded under its own
    prefix (straight to the server, once per work dir); its port."""
    root = os.path.join(folder, "s3")
    os.makedirs(root, exist_ok=True)
    port = free_port()
    gw = stack.start([versitygw_binary(), "--access", ACCESS, "--secret", SECRET, "--port", f"127.0.0.1:{port}",
                      "--keep-alive", "--quiet", "posix", root], os.path.join(folder, "versitygw.log"))
    wait_listening(port, gw.proc)
    env = rclone_env(port)
    for lib in libs:
        prefix = os.path.basename(lib)
        done = os.path.join(folder, "uploaded-" + prefix)
        if os.path.exists(done):
            continue
        print(f"remote: uploading {lib} to s3://{BUCKET}/{prefix}", flush=True)
        for args in (["mkdir", f"gw:{BUCKET}"], ["copy", lib, f"gw:{BUCKET}/{prefix}", "--transfers", "16"]):
            p = subprocess.run(["rclone", *args], env=env, capture_output=True, text=True)
            if p.returncode:
                raise SystemExit(f"rclone {args[0]} failed: {p.stderr}")
        open(done, "w").close()
    # The server's files in the page cache, as a server's own cache would
    # hold them after the upload: scans then wait on the network alone.
    for d, _, names in os.walk(root):
        for n in names:
            with open(os.path.join(d, n), "rb") as f:
                while f.read(1 << 20):
                    pass
    return port


def scan_rows(x, key, runs, label):
    """First scans and re-scans of a library, retagfs against the rclone
    stack (each on a fresh `rclone mount`), taking turns; the stores and
    caches they leave, by run: [(store, cache folder, rclone stack's store)]."""
    b, lib = x.b, x.libs[key]
    prefix, n = os.path.basename(lib), len(x.b.all_files(lib))
    root = f"s3://{BUCKET}/{prefix}"
    first, first_n, again, again_n = [], [], [], []
    their_first, their_first_n, their_again, their_again_n = [], [], [], []
    stores = []
    for r in range(runs):
        print(f"remote: scans of {n:,} {label}, run {r + 1}/{runs}", flush=True)
        db, cache = x.path(f"{prefix}-s3-{r}.db"), x.fresh("cache", f"{prefix}-scan-{r}")
        b.remove_store(db)
        took, counts = x.measured(lambda: b.scan(root, db, "--cache-dir", cache)[0])
        first.append(took)
        first_n.append(counts)
        if track_count(db) != n:
            print(f"(remote: the scan of {root} found {track_count(db)} of {n} tracks)", flush=True)
        took, counts = x.measured(lambda: b.scan(root, db, "--cache-dir", cache)[0])
        again.append(took)
        again_n.append(counts)
        # A first scan through rclone longer than RCLONE_PATIENCE is measured once.
        if not their_first or their_first[0] <= RCLONE_PATIENCE:
            rdb = x.path(f"{prefix}-rclone-{r}.db")
            b.remove_store(rdb)
            with x.rclone(prefix) as m:
                took, counts = x.measured(lambda: b.scan(m.mnt, rdb)[0])
            their_first.append(took)
            their_first_n.append(counts)
            # Users re-scan hours later: rclone's directory cache (5 min by
            # default) is gone by then, as it is on a fresh mount.
            with x.rclone(prefix) as m:
                took, counts = x.measured(lambda: b.scan(m.mnt, rdb)[0])
            their_again.append(took)
            their_again_n.append(counts)
        stores.append((db, cache, rdb))
    stack = "the rclone stack"
    if len(their_first) < runs:
        stack += f" (measured once: its first scan took {their_first[0] / 60:.0f} min)"
    x.report(f"first scan, {n:,} {label}", first, first_n, stack, their_first, their_first_n, least=5)
    slowest, gets = statistics.median(again), max(c["GET"] for c in again_n)
    x.report(f"re-scan, {n:,} unchanged", again, again_n, stack, their_again, their_again_n,
             target=f"≤ 2 s: {'met' if slowest <= 2 else 'MISSED'}, 0 GETs: {'met' if gets == 0 else 'MISSED'}")
    return stores


def indexer_rows(x, key, stores):
    """An indexer's first pass (open + the first 4 KiB of every file) over a
    fresh mount of a store scanned with the same --cache-dir, against the
    same over fresh mounts of the rclone stack (also with our mount's
    read-ahead off); page cache dropped before each pass."""
    b = x.b
    prefix, n = os.path.basename(x.libs[key]), len(b.all_files(x.libs[key]))
    sides = {"ours": [], "rclone": [], "rclone, read-ahead off": []}
    counts = {side: [] for side in sides}

    def one(side, m):
        files = b.all_files(m.mnt)
        b.drop_caches()
        took, n = x.measured(lambda: b.read_starts(files))
        sides[side].append(took)
        counts[side].append(n)

    for r, (db, cache, rdb) in enumerate(stores):
        print(f"remote: indexer's pass, run {r + 1}/{len(stores)}", flush=True)
        with x.mount(db, "mnt-s3", "--cache-dir", cache) as m:
            one("ours", m)
        with x.rclone(prefix), x.mount(rdb, "mnt-rclone") as m:
            one("rclone", m)
        with x.rclone(prefix), x.mount(rdb, "mnt-rclone", "--read-ahead", "off") as m:
            one("rclone, read-ahead off", m)
    gets = max(c["GET"] for c in counts["ours"])
    x.report(f"indexer's pass (open + 4 KiB of each), {n} tracks", sides["ours"], counts["ours"],
             "the rclone stack", sides["rclone"], counts["rclone"], target=f"0 GETs: {'met' if gets == 0 else 'MISSED'}",
             also=("with `--read-ahead off` on our mount", sides["rclone, read-ahead off"],
                   counts["rclone, read-ahead off"]))


def naive_read(client, key, size):
    """One signed 128 KiB ranged GET after another, each waiting for the
    previous: a FUSE layer doing a GET per kernel read."""
    for start in range(0, size, NAIVE_GET):
        end = min(start + NAIVE_GET, size) - 1
        client.get_object(Bucket=BUCKET, Key=key, Range=f"bytes={start}-{end}")["Body"].read()


def stream_rows(x, runs):
    """Each 2-minute file read whole (1 MiB reads), each read on fresh
    mounts with the page cache dropped: through our mount of the bucket
    with the disk cache a scan left (the file's first bytes) and with an
    empty one, by naive GETs, through our mount of the rclone stack (also
    with our read-ahead off), then again through our mount from the disk
    cache the first reads filled, and through our mount of the same files
    in a local folder; the sides in turn."""
    import boto3
    from botocore.config import Config
    b, lib = x.b, x.libs["large"]
    prefix = os.path.basename(lib)
    exts = sorted(os.path.splitext(p)[1] for p in b.all_files(lib))
    sizes = {e: os.path.getsize(os.path.join(lib, "big" + e)) for e in exts}
    s3db, rdb, ldb = x.path("large-s3.db"), x.path("large-rclone.db"), x.path("large-local.db")
    for db in (s3db, rdb, ldb):
        b.remove_store(db)
    b.scan(f"s3://{BUCKET}/{prefix}", s3db, "--cache-dir", x.fresh("cache", "large-scan"))
    with x.rclone(prefix) as m:
        b.scan(m.mnt, rdb)
    b.scan(lib, ldb)
    client = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"], region_name=REGION,
                          aws_access_key_id=ACCESS, aws_secret_access_key=SECRET,
                          config=Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1}))
    sides = ("cold", "cold, empty cache", "naive", "rclone", "rclone, read-ahead off", "cached", "local")
    times = {s: {e: [] for e in exts} for s in sides}
    counts = {s: {e: [] for e in exts} for s in sides}

    def one(side, e, read):
        b.drop_caches()
        took, n = x.measured(read)
        times[side][e].append(took)
        counts[side][e].append(n)

    def through(side, e, *mounts):
        """Reads the file of extension e on fresh mounts (the last serves it)."""
        with contextlib.ExitStack() as up:
            for m in mounts:
                served = up.enter_context(m())
            path = next(p for p in b.all_files(served.mnt) if p.endswith(e))
            one(side, e, lambda: b.read_seq(path))

    runs = max(runs, STREAM_RUNS)
    for r in range(runs):
        print(f"remote: streams, run {r + 1}/{runs}", flush=True)
        # A disk cache per file. A cold read finds in it what a scan leaves
        # there (the file's first bytes), or nothing (a mount on another
        # machine than the scan's); the read from the cache then finds the
        # whole file there.
        caches = {e: x.fresh("cache", f"stream-{r}", e[1:]) for e in exts}
        empty = {e: x.fresh("cache", f"stream-{r}-empty", e[1:]) for e in exts}
        for e in exts:
            scanned = x.path(f"scan-{r}{e}.db")
            b.remove_store(scanned)
            b.scan(f"s3://{BUCKET}/{prefix}", scanned, "--cache-dir", caches[e])
        rclone = lambda: x.rclone(prefix)  # noqa: E731
        for e in exts:
            through("cold", e, lambda: x.mount(s3db, "mnt-s3", "--cache-dir", caches[e]))
        for e in exts:
            through("cold, empty cache", e, lambda: x.mount(s3db, "mnt-s3", "--cache-dir", empty[e]))
        for e in exts:
            one("naive", e, lambda: naive_read(client, f"{prefix}/big{e}", sizes[e]))
        for e in exts:
            through("rclone", e, rclone, lambda: x.mount(rdb, "mnt-rclone"))
        for e in exts:
            through("rclone, read-ahead off", e, rclone, lambda: x.mount(rdb, "mnt-rclone", "--read-ahead", "off"))
        for e in exts:
            through("cached", e, lambda: x.mount(s3db, "mnt-s3", "--cache-dir", caches[e]))
        for e in exts:
            through("local", e, lambda: x.mount(ldb, "mnt-local"))
    for e in exts:
        what = f"{e[1:].upper()} {sizes[e] / 1e6:.1f} MB"
        x.report(f"{what}, cold, after a scan", times["cold"][e], counts["cold"][e],
                 "128 KiB GETs one at a time", times["naive"][e], counts["naive"][e], least=5,
                 also=("ours with an empty cache", times["cold, empty cache"][e], counts["cold, empty cache"][e]))
        x.report(f"{what}, cold, after a scan", times["cold"][e], counts["cold"][e],
                 "the rclone stack", times["rclone"][e], counts["rclone"][e], least=1, least_says="no slower",
                 also=("with `--read-ahead off` on our mount", times["rclone, read-ahead off"][e],
                       counts["rclone, read-ahead off"][e]))
        x.report(f"{what}, from the disk cache", times["cached"][e], counts["cached"][e],
                 "the local folder", times["local"][e], counts["local"][e], least=0.8)


def markdown(table):
    print("\n| row | retagfs on the bucket | against | their time / ours (min-max) | target |\n|---|---|---|---|---|")
    for cells in table:
        print("| " + " | ".join(cells) + " |")
    print(flush=True)


def bench(suite, work, tracks, runs):
    """The `remote` rows; `suite` is bench.py (its libraries, row, spread,
    scan, mounts' --io-uring, drop_caches, read helpers)."""
    b = suite
    if not b.drop_caches():
        raise SystemExit("remote: needs root (mounts, /proc/sys/vm/drop_caches)")
    folder = os.path.join(work, "remote")
    os.makedirs(folder, exist_ok=True)
    libs = {"flac": b.make_flac_library(work, tracks), "mixed": b.make_mixed_library(work),
            "large": b.make_large_files(work)}
    saved = dict(os.environ)
    stack = Stack()

    def terminated(signum, frame):
        raise SystemExit(f"remote: signal {signum}")
    old_term = signal.signal(signal.SIGTERM, terminated)
    try:
        port = start_bucket(stack, folder, libs.values())
        stack.proxy = S3Proxy(port, latency_ms=LATENCY_MS).start()
        os.environ.update(s3_env(stack.proxy.port, os.path.join(folder, "xdg")))
        for other in ("AWS_PROFILE", "AWS_SESSION_TOKEN"):
            os.environ.pop(other, None)
        x = Bench(b, work, stack, stack.proxy, libs)
        print(f"remote: {LATENCY_MS} ms added to every request; `rclone mount` with its defaults "
              f"(--vfs-cache-mode off); {BIN}", flush=True)
        scan_rows(x, "flac", runs, "tiny FLACs")
        stores = scan_rows(x, "mixed", runs, "mixed-format tracks")
        indexer_rows(x, "mixed", stores)
        stream_rows(x, runs)
        markdown(x.table)
    finally:
        stack.close()
        os.environ.clear()
        os.environ.update(saved)
        signal.signal(signal.SIGTERM, old_term)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracks", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", help="keep generated libraries and the bucket here (default: a temp dir)")
    a = ap.parse_args()
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench as suite
    # As bench.py mounts by default: through FUSE over io_uring where the
    # kernel has it.
    suite.IO_URING[1] = "on" if os.path.exists(suite.URING_PARAM) else "off"
    work = a.work or tempfile.mkdtemp(prefix="retagfs-bench-remote-")
    try:
        bench(suite, work, a.tracks, a.runs)
    finally:
        if not a.work:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""The benchmark suite (not a test: it prints figures and asserts nothing).

Generates its libraries, then measures retagfs beside the same operation done
directly on the backing files in the same run, as a ratio:

  scan      first scan (warm, and cold against one thread per core) and
            re-scan of 20k tiny FLACs (2,000 artists x 10
            tracks), the scan of them moved to another path, first scan
            of 200 mixed-format tracks and of 2,000 tiny FLACs with covers
            or with long lyrics; peak RSS
  mount     mount to the end of the first `ls` of the root
  walk      `find -type f` over the mount, first and repeated
  stat      stat of every file on a fresh mount; daemon RSS afterwards
  open      then open every file and read its first 4 KiB (an indexer's
            first pass); on a fresh mount, the tags of 2,000 files read
            with mutagen (a tagger's pass); the daemon's CPU beside both
  read      sequential (1 MiB) and random 4 KiB reads of large files per
            format, synthesis and structure-only, cold (drop_caches) and
            repeated
  refresh   single-track retag -> new path visible (see bench_refresh.py)
  http      random 64 KiB spans at concurrency 16 through `retagfs serve`
            (range GETs), its WebDAV (PROPFIND of the largest folder), the
            mount read directly, nginx over the mount and nginx over the
            backing files; whole-file reads of 200 tracks the same ways;
            a Markdown table per protocol (see bench_http.py)
  query     `retagfs query` against beets' `beet ls` (pip) with the same
            queries on the same tracks, 20k and --scale tracks, and the
            first listing of `.search` folders (see bench_query.py)
  views     five views from a configuration file (one selected by a query,
            one fanned out over genres) against one view of the same store:
            mount to first ls, memory, a retag's refresh time, 20k and
            --scale tracks (see bench_views.py)
  metrics   the same mounts with `--metrics` (scraped every second) and
            without: a fresh walk, an indexer's pass and sequential reads
            through the daemon, alternated; the ratio (see
            bench_metrics.py)
  remote    a library in an S3 bucket (versitygw), 20 ms added to every
            request: retagfs scanning and mounting the bucket against
            `rclone mount` with retagfs over it (first scans and re-scans,
            an indexer's pass, cold 2-minute streams, also against one
            128 KiB GET at a time), and streams from its disk cache
            against a local folder; a Markdown table (see bench_remote.py;
            not in the default set: needs versitygw and rclone, ~15 min)

The daemon's RSS is printed after each phase (mount, walk, stat, open, reads,
concurrent readers, refresh), per track where the mount serves a library.
When the mounts take requests through io_uring, the first walk, the stat
and the open rows (with the tags) are measured again through /dev/fuse
(`--io-uring off`),
as an ordinary user's mount or a kernel without it would take them.

Usage: scripts/bench.py [--tracks 20000] [--work DIR] [--runs 3] [--only AREA,...]
Needs root for drop_caches (cold rows are skipped otherwise, and say so).
"""

import argparse
import atexit
import contextlib
import os
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time

import mutagen

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_http  # noqa: E402
import bench_metrics  # noqa: E402
import bench_refresh  # noqa: E402
import bench_query  # noqa: E402
import bench_views  # noqa: E402
import bench_remote  # noqa: E402

URING_PARAM = "/sys/module/fuse/parameters/enable_uring"

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = bench_refresh.BIN
FAULTFS = os.path.join(os.path.dirname(BIN), "retagfs-faultfs")
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def spread(times):
    """(median, min, max) of a list of figures."""
    return statistics.median(times), min(times), max(times)


def timed(fn, runs):
    """(median, min, max) seconds of `runs` calls of fn."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return spread(times)


def alternated(fn, direct, runs):
    """timed() of fn and of direct, their calls taking turns: a stretch of
    load on the shared machine then weighs on both sides alike."""
    ours, theirs = [], []
    for _ in range(runs):
        for f, times in ((fn, ours), (direct, theirs)):
            t0 = time.perf_counter()
            f()
            times.append(time.perf_counter() - t0)
    return spread(ours), spread(theirs)


def drop_caches():
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


rss_mib = bench_refresh.rss_mib


def cpu_seconds(pid):
    """CPU time a process (all its threads) has used, user and system."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed_with_cpu(fn, pid):
    """(seconds fn took, seconds of CPU process `pid` used meanwhile)."""
    c0, t0 = cpu_seconds(pid), time.perf_counter()
    fn()
    return time.perf_counter() - t0, cpu_seconds(pid) - c0


TAGGED_FILES = 2000


def read_tags(paths):
    """What a tagger's or a library manager's pass does: parse the tags of
    every file (mutagen, as beets, Picard and others use)."""
    for p in paths:
        mutagen.File(p)


# ---------------------------------------------------------------- libraries

def vorbis_comment(tags):
    vendor = b"bench"
    out = struct.pack("<I", len(vendor)) + vendor + struct.pack("<I", len(tags))
    for k, v in tags:
        e = f"{k}={v}".encode()
        out += struct.pack("<I", len(e)) + e
    return out


def tiny_flac_parts(work):
    """STREAMINFO body and audio frames of a 50 ms FLAC."""
    wav, flac = os.path.join(work, "t.wav"), os.path.join(work, "t.flac")
    sh("sox", "-n", "-r", "8000", "-c", "1", "-b", "16", wav, "synth", "0.05", "sine", "440")
    sh("flac", "-s", "-f", "--no-padding", "--no-seektable", "-o", flac, wav)
    d = open(flac, "rb").read()
    pos, streaminfo = 4, None
    while True:
        last, kind, n = d[pos] & 0x80, d[pos] & 0x7F, int.from_bytes(d[pos + 1:pos + 4], "big")
        if kind == 0:
            streaminfo = d[pos + 4:pos + 4 + n]
        pos += 4 + n
        if last:
            return streaminfo, d[pos:]


def flac_picture(image):
    """The body of a FLAC PICTURE block: `image` as a 500x500 JPEG front
    cover (the scan trusts the declared type of bytes it cannot sniff)."""
    mime = b"image/jpeg"
    return (struct.pack(">II", 3, len(mime)) + mime + struct.pack(">I", 0)
            + struct.pack(">IIIII", 500, 500, 24, 0, len(image)) + image)


def make_flac_library(work, n, cover=0, lyrics=0):
    """n tiny FLACs, 10 per album; with `cover`, each album's tracks embed
    one picture of that many bytes (as taggers embed an album's cover);
    with `lyrics`, each album's first track carries lyrics of that many
    bytes."""
    lib = os.path.join(work, f"flac-{n}" + (f"-cover-{cover}" if cover else "")
                       + (f"-lyrics-{lyrics}" if lyrics else ""))
    if os.path.isdir(lib):
        return lib
    streaminfo, frames = tiny_flac_parts(work)
    tmp = lib + ".tmp"
    for i in range(n):
        artist, track = i // 10, i % 10 + 1
        d = os.path.join(tmp, f"Artist {artist:05d}", f"Album {artist:05d}")
        os.makedirs(d, exist_ok=True)
        fields = [("ARTIST", f"Artist {artist:05d}"), ("ALBUM", f"Album {artist:05d}"),
                  ("TITLE", f"Song {i}"), ("TRACKNUMBER", str(track)), ("DATE", "2020")]
        if lyrics and track == 1:
            fields.append(("LYRICS", lyrics_text(artist, lyrics)))
        comment = vorbis_comment(fields)
        blocks = [(0, streaminfo), (4, comment)]
        if cover:
            blocks.append((6, flac_picture(random.Random(artist).randbytes(cover))))
        body = b"fLaC"
        for k, (kind, block) in enumerate(blocks):
            last = 0x80 if k == len(blocks) - 1 else 0
            body += bytes([last | kind]) + len(block).to_bytes(3, "big") + block
        body += frames
        with open(os.path.join(d, f"{track:02d}.flac"), "wb") as f:
            f.write(body)
    os.rename(tmp, lib)
    return lib


def lyrics_text(seed, size):
    """`size` bytes of lines of words, as lyrics look."""
    rnd = random.Random(seed)
    words = ("love", "night", "heart", "road", "light", "rain", "home", "fire", "time", "gone")
    lines, length = [], 0
    while length < size:
        line = " ".join(rnd.choice(words) for _ in range(rnd.randint(4, 9)))
        lines.append(line)
        length += len(line) + 1
    return "\n".join(lines)[:size]


def make_mixed_library(work, n=200):
    """n tracks of 1-4 s (stereo 44.1 kHz), the six formats in turn, each
    encoded and tagged by its real encoder; 20 tracks per folder. Encoding
    runs on every core."""
    lib = os.path.join(work, "mixed")
    if os.path.isdir(lib):
        return lib
    tmp = lib + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    rnd = random.Random(200)
    exts = ("flac", "mp3", "m4a", "ogg", "opus", "wav")

    def encode(i):
        d = os.path.join(tmp, f"Artist {i // 20:02d}", f"Album {i // 20:02d}")
        os.makedirs(d, exist_ok=True)
        ext = exts[i % len(exts)]
        wav = os.path.join(d, f".{i}.src.wav")
        sh("sox", "-n", "-r", "44100", "-c", "2", "-b", "16", wav, "synth", f"{rnd.uniform(1, 4):.2f}",
           "pinknoise", "gain", "-12")
        out = os.path.join(d, f"{i % 20 + 1:02d} Song {i}.{ext}")
        title, artist, album = f"Song {i}", f"Artist {i // 20:02d}", f"Album {i // 20:02d}"
        if ext == "flac":
            sh("flac", "-s", "-f", "-T", f"TITLE={title}", "-T", f"ARTIST={artist}", "-T", f"ALBUM={album}",
               "-o", out, wav)
        elif ext == "mp3":
            sh("lame", "--quiet", "-b", "192", "--tt", title, "--ta", artist, "--tl", album, wav, out)
        elif ext == "ogg":
            sh("oggenc", "-Q", "-q", "5", "-t", title, "-a", artist, "-l", album, "-o", out, wav)
        elif ext == "opus":
            sh("opusenc", "--quiet", "--bitrate", "128", "--title", title, "--artist", artist,
               "--album", album, wav, out)
        else:
            codec = ["-c:a", "aac", "-b:a", "192k"] if ext == "m4a" else ["-c:a", "pcm_s16le"]
            sh("ffmpeg", "-v", "error", "-y", "-i", wav, *codec, "-metadata", f"title={title}",
               "-metadata", f"artist={artist}", "-metadata", f"album={album}", out)
        os.remove(wav)

    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:
        list(pool.map(encode, range(n)))
    os.rename(tmp, lib)
    return lib


def make_large_files(work, seconds=120):
    """One large file per format (2 minutes of stereo 44.1 kHz)."""
    lib = os.path.join(work, "large")
    if os.path.isdir(lib):
        return lib
    tmp = lib + ".tmp"
    os.makedirs(tmp)
    wav = os.path.join(tmp, "big.wav")
    sh("sox", "-n", "-r", "44100", "-c", "2", "-b", "16", wav, "synth", str(seconds), "pinknoise", "gain", "-12")
    cover = os.path.join(FIXTURES, "cover.png")
    sh("flac", "-s", "-f", "-T", "TITLE=Big FLAC", f"--picture=3|image/png|||{cover}", "-o",
       os.path.join(tmp, "big.flac"), wav)
    sh("lame", "--quiet", "-b", "320", "--tt", "Big MP3", wav, os.path.join(tmp, "big.mp3"))
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "aac", "-b:a", "256k", "-metadata", "title=Big M4A",
       "-movflags", "+faststart", os.path.join(tmp, "big.m4a"))
    sh("oggenc", "-Q", "-q", "8", "-t", "Big Vorbis", "-o", os.path.join(tmp, "big.ogg"), wav)
    sh("opusenc", "--quiet", "--bitrate", "256", "--title", "Big Opus", wav, os.path.join(tmp, "big.opus"))
    sh("ffmpeg", "-v", "error", "-y", "-i", wav, "-c:a", "pcm_s16le", "-metadata", "title=Big WAV",
       os.path.join(tmp, "big2.wav"))
    os.remove(wav)
    os.rename(os.path.join(tmp, "big2.wav"), os.path.join(tmp, "big.wav"))
    os.rename(tmp, lib)
    return lib


# ------------------------------------------------------------------ mounts

def scan(lib, db, *extra):
    """Scan; returns (seconds, peak RSS MiB of the scan process)."""
    # What the suite wrote before (libraries, copies of stores) is written
    # back first: ext4 would otherwise flush it inside the new store's
    # first fsync, and the row would time the suite's own writes.
    os.sync()
    t0 = time.perf_counter()
    p = subprocess.Popen([BIN, "scan", lib, "--db", db, *extra], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    elapsed = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"scan of {lib} failed")
    return elapsed, usage.ru_maxrss / 1024


def moved_scan(lib, db):
    """Seconds to scan the library renamed to another path, into a copy of
    its store (the library and `db` are as they were after)."""
    moved, copy = lib + "-moved", db + "-moved"
    for suffix in ("", "-wal"):
        if os.path.exists(db + suffix):
            shutil.copy(db + suffix, copy + suffix)
    os.rename(lib, moved)
    try:
        return scan(moved, copy)[0]
    finally:
        os.rename(moved, lib)
        remove_store(copy)


def remove_store(db):
    """Removes a store and the files SQLite and the scan keep beside it."""
    for suffix in ("", "-wal", "-shm", "-scan.lock"):
        if os.path.exists(db + suffix):
            os.remove(db + suffix)


# How mounts take requests: "on" (FUSE over io_uring, where the kernel has
# it) or "off" (/dev/fuse); set by --io-uring.
IO_URING = ["--io-uring", "off"]


class Mount:
    def __init__(self, db, mnt, *extra, io_uring=None):
        os.makedirs(mnt, exist_ok=True)
        self.mnt = mnt
        transport = ["--io-uring", io_uring] if io_uring else IO_URING
        self.proc = subprocess.Popen([BIN, "mount", mnt, "--db", db, *transport, *extra],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def wait_ls(self):
        deadline = time.time() + 600
        while True:
            if os.path.ismount(self.mnt):
                return os.listdir(self.mnt)
            if self.proc.poll() is not None or time.time() > deadline:
                raise SystemExit("mount failed")
            time.sleep(0.001)

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def all_files(root):
    out = []
    for d, _, files in os.walk(root):
        out.extend(os.path.join(d, f) for f in files)
    return out


def find(root):
    sh("find", root, "-type", "f")


def stat_all(paths):
    for p in paths:
        os.stat(p)


def read_seq(path, bs=1 << 20):
    with open(path, "rb", buffering=0) as f:
        while f.read(bs):
            pass


def read_random(path, count=2000, bs=4096, seed=1):
    size = os.path.getsize(path)
    rnd = random.Random(seed)
    fd = os.open(path, os.O_RDONLY)
    try:
        for _ in range(count):
            os.pread(fd, bs, rnd.randrange(0, max(1, size - bs)))
    finally:
        os.close(fd)


# ------------------------------------------------------------------ report

ROWS = []


def row(area, work, ours, direct=None, unit="s", note=""):
    """ours/direct: (median, min, max) or a number."""
    def fmt(v):
        if v is None:
            return "-"
        if isinstance(v, tuple):
            m, lo, hi = v
            return f"{m:.4f} ({lo:.4f}-{hi:.4f})" if unit == "s" else f"{m:.1f}"
        return f"{v:.4f}" if unit == "s" else f"{v:.1f}"
    med = lambda v: v[0] if isinstance(v, tuple) else v  # noqa: E731
    ratio = f"{med(ours) / med(direct):.2f}x" if direct and med(direct) else ""
    ROWS.append((area, work, fmt(ours), fmt(direct), ratio, unit, note))
    print(f"{area:8s} {work:52s} {fmt(ours):>28s} {fmt(direct):>28s} {ratio:>8s} {unit:4s} {note}", flush=True)


# Runs of each re-scan row, at least.
RESCAN_RUNS = 15


# Tracks, and bytes of each album's cover, of the library with art.
COVERED_TRACKS, COVER_BYTES = 2000, 150_000
LYRICS_TRACKS, LYRICS_BYTES = 2000, 80_000


def first_scans(work, lib, name, runs):
    """Spread of `runs` first scans of `lib`, each into a new store."""
    times = []
    for r in range(runs):
        db = os.path.join(work, f"{name}-{r}.db")
        remove_store(db)
        times.append(scan(lib, db)[0])
    return spread(times)


def bench_scan(work, n, runs, mixed=True):
    lib = make_flac_library(work, n)
    firsts, rss = [], []
    for r in range(runs):
        db = os.path.join(work, f"scan-{n}-{r}.db")
        remove_store(db)
        s, m = scan(lib, db)
        firsts.append(s)
        rss.append(m)
    row("scan", f"first scan, {n} tiny FLACs", spread(firsts),
        note=f"{n / statistics.median(firsts):.0f} files/s")
    row("scan", "peak RSS of the first scan", statistics.median(rss), unit="MiB")
    db = os.path.join(work, f"scan-{n}-0.db")
    if mixed:
        cold_scans(work, lib, db, n, runs)
    # Re-scans take tens of milliseconds: a median of three wandered by a
    # third between runs of the suite.
    rescans = max(runs, RESCAN_RUNS)
    row("scan", f"re-scan, {n} unchanged", *alternated(lambda: scan(lib, db), lambda: find(lib), rescans),
        note="direct = find over the library")
    row("scan", f"re-scan, {n} unchanged, every folder listed (--full)",
        *alternated(lambda: scan(lib, db, "--full"), lambda: find(lib), rescans),
        note="direct = find over the library")
    row("scan", f"scan of the {n} tracks moved to another path", moved_scan(lib, db),
        note="every track found moved (one recording: the worst case)")
    if not mixed:
        return lib, db
    row("scan", "first scan, 200 mixed-format tracks", first_scans(work, make_mixed_library(work), "mixed", runs))
    covered = make_flac_library(work, COVERED_TRACKS, cover=COVER_BYTES)
    row("scan", f"first scan, {COVERED_TRACKS} tiny FLACs, a {COVER_BYTES // 1000} kB cover per album",
        first_scans(work, covered, "covered", runs), note="each album's 10 tracks embed its cover")
    sung = make_flac_library(work, LYRICS_TRACKS, lyrics=LYRICS_BYTES)
    row("scan", f"first scan, {LYRICS_TRACKS} tiny FLACs, {LYRICS_BYTES // 1000} kB lyrics on every tenth",
        first_scans(work, sung, "lyrics", runs), note="each album's first track carries long lyrics")
    return lib, db


def scans_against_one_per_core(lib, db, runs, before):
    """Scans of `lib` into the store `db` with the default threads and with
    `-j` one per core, taking turns (a stretch of load weighs on both
    alike), `before` run ahead of each: (cores, spread of the default,
    spread of one per core)."""
    cores = len(os.sched_getaffinity(0))
    def one(*extra):
        before()
        return scan(lib, db, *extra)[0]
    pairs = [(one(), one("-j", str(cores))) for _ in range(runs)]
    return cores, spread([p[0] for p in pairs]), spread([p[1] for p in pairs])


def cold_scans(work, lib, db, n, runs):
    """A first scan and a re-scan as users run them, the library not in the
    page cache: the default threads (8 probing, and the walk growing to 16
    once it reads from the disk) against one per core."""
    if not drop_caches():
        print("(cold scan rows skipped: cannot write /proc/sys/vm/drop_caches without root)")
        return
    fresh = os.path.join(work, f"scan-{n}-cold.db")
    cores, ours, per_core = scans_against_one_per_core(
        lib, fresh, runs, before=lambda: (remove_store(fresh), drop_caches()))
    row("scan", f"first scan, {n} tiny FLACs, cold", ours, per_core,
        note=f"direct = -j {cores} (one thread per core)")
    remove_store(fresh)
    cores, ours, per_core = scans_against_one_per_core(lib, db, max(runs, 5), before=drop_caches)
    row("scan", f"re-scan, {n} unchanged, cold", ours, per_core,
        note=f"direct = -j {cores} (one thread per core)")
    # The rows after these are warm: what a scan reads is read again.
    scan(lib, fresh)
    remove_store(fresh)


def bench_tree(work, lib, db, runs, label=""):
    mnt = os.path.join(work, "mnt")
    times, walk_first, stat_first, opened_first, tagged = [], [], [], [], []
    rss_mounted, rss_walked, rss, rss_opened = [], [], [], []
    for _ in range(runs):
        t0 = time.perf_counter()
        m = Mount(db, mnt)
        m.wait_ls()
        times.append(time.perf_counter() - t0)
        rss_mounted.append(rss_mib(m.proc.pid))
        t0 = time.perf_counter()
        find(mnt)
        walk_first.append(time.perf_counter() - t0)
        rss_walked.append(rss_mib(m.proc.pid))
        m.stop()
        m = Mount(db, mnt)
        m.wait_ls()
        t0 = time.perf_counter()
        sh("find", mnt, "-type", "f", "-printf", "%s\n")
        stat_first.append(time.perf_counter() - t0)
        rss.append(rss_mib(m.proc.pid))
        served = all_files(mnt)
        opened_first.append(timed_with_cpu(lambda: read_starts(served), m.proc.pid))
        rss_opened.append(rss_mib(m.proc.pid))
        m.stop()
        tagged.append(tag_pass(db, mnt))
    direct_find = timed(lambda: find(lib), runs)
    tracks = len(all_files(lib))
    row("mount", f"mount to end of first `ls` of the root{label}", spread(times))
    rss_row("mount", f"daemon RSS after it{label}", rss_mounted, tracks)
    row("walk", f"find -type f, fresh mount{label}", spread(walk_first),
        direct_find)
    rss_row("walk", f"daemon RSS after it{label}", rss_walked, tracks)
    # The same through /dev/fuse (an ordinary user's mount, or a kernel
    # without FUSE over io_uring), to show what io_uring changes.
    through_dev = IO_URING[1] == "on"
    dev_first, dev_stat, dev_opened, dev_tagged = [], [], [], []
    for _ in range(runs if through_dev else 0):
        m = Mount(db, mnt, io_uring="off")
        m.wait_ls()
        t0 = time.perf_counter()
        find(mnt)
        dev_first.append(time.perf_counter() - t0)
        m.stop()
        m = Mount(db, mnt, io_uring="off")
        m.wait_ls()
        t0 = time.perf_counter()
        sh("find", mnt, "-type", "f", "-printf", "%s\n")
        dev_stat.append(time.perf_counter() - t0)
        served = all_files(mnt)
        dev_opened.append(timed_with_cpu(lambda: read_starts(served), m.proc.pid))
        m.stop()
        dev_tagged.append(tag_pass(db, mnt, io_uring="off"))
    if through_dev:
        row("walk", f"find -type f, fresh mount, through /dev/fuse{label}",
            spread(dev_first), direct_find)
    m = Mount(db, mnt)
    m.wait_ls()
    find(mnt)
    row("walk", f"find -type f, repeated{label}", timed(lambda: find(mnt), runs), direct_find)
    m.stop()
    direct_stat = timed(lambda: sh("find", lib, "-type", "f", "-printf", "%s\n"), runs)
    row("stat", f"stat of every file (find -printf %s), fresh mount{label}",
        spread(stat_first), direct_stat)
    if through_dev:
        row("stat", f"stat of every file, fresh mount, through /dev/fuse{label}",
            spread(dev_stat), direct_stat)
    rss_row("stat", f"daemon RSS after stat of every file{label}", rss, tracks)
    files = all_files(lib)
    read_starts(files)
    direct_open = timed(lambda: read_starts(files), runs)
    row("open", f"open + first 4 KiB of every file, once{label}", wall(opened_first),
        direct_open, note=f"an indexer's first pass; {cpu_note(opened_first)}")
    if through_dev:
        row("open", f"the same, through /dev/fuse{label}", wall(dev_opened), direct_open,
            note=cpu_note(dev_opened))
    rss_row("open", f"daemon RSS after it{label}", rss_opened, tracks)
    direct_tags = timed(lambda: read_tags(sorted(files)[:TAGGED_FILES]), runs)
    row("open", f"tags of {TAGGED_FILES} files read (mutagen), fresh mount{label}",
        wall(tagged), direct_tags, note=cpu_note(tagged))
    if through_dev:
        row("open", f"the same, through /dev/fuse{label}", wall(dev_tagged), direct_tags,
            note=cpu_note(dev_tagged))


def tag_pass(db, mnt, io_uring=None):
    """(seconds, daemon CPU seconds) of reading the tags of the first
    TAGGED_FILES files on a fresh mount."""
    m = Mount(db, mnt, io_uring=io_uring)
    m.wait_ls()
    served = sorted(all_files(mnt))[:TAGGED_FILES]
    took = timed_with_cpu(lambda: read_tags(served), m.proc.pid)
    m.stop()
    return took


def wall(timed_runs):
    """The spread of the wall times of (seconds, CPU seconds) runs."""
    return spread([t for t, _ in timed_runs])


def cpu_note(timed_runs):
    """The daemon's CPU over (seconds, CPU seconds) runs, for a row's note."""
    return f"daemon CPU {statistics.median(c for _, c in timed_runs):.2f} s"


def read_starts(paths, n=4096):
    """What a media indexer's first pass does: open every file and read
    its start."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        os.read(fd, n)
        os.close(fd)


def rss_row(area, work, rss, tracks=None):
    """A row of the daemon's RSS (median of `rss`, MiB), per track if the
    mount serves `tracks`."""
    median = statistics.median(rss)
    note = f"{median * 1024 * 1024 / tracks:.0f} B/track" if tracks else ""
    row(area, work, median, unit="MiB", note=note)


# Runs of each warm (page-cached) read row, at least.
WARM_RUNS = 15
# Runs of each cold single-file read row, at least: they wander by a
# fifth from run to run, and A/B rounds of 41 runs were needed to
# tell a 10% change (docs/benchmarks.md).
COLD_RUNS = 15


def bench_reads(work, runs):
    lib = make_large_files(work)
    db = os.path.join(work, "large.db")
    if not os.path.exists(db):
        scan(lib, db)
    can_drop = drop_caches()
    for mode in ("synthesis", "structure-only"):
        mnt = os.path.join(work, "mnt-large")
        m = Mount(db, mnt, "--mode", mode)
        m.wait_ls()
        served = {os.path.splitext(p)[1]: p for p in all_files(mnt)}
        for ext in sorted(served):
            backing = os.path.join(lib, "big" + ext)
            mine = served[ext]
            mb = os.path.getsize(backing) / 1e6
            if can_drop:
                def cold(p):
                    def f():
                        drop_caches()
                        t0 = time.perf_counter()
                        read_seq(p)
                        return time.perf_counter() - t0
                    return f
                # Alternated, and more runs than the default: cold rows
                # wander with the disk more than anything else here.
                c_ours, c_direct = [], []
                for _ in range(max(runs, COLD_RUNS)):
                    c_ours.append(cold(mine)())
                    c_direct.append(cold(backing)())
                row("read", f"{mode} {ext[1:]:5s} sequential 1 MiB, cold ({mb:.0f} MB)",
                    spread(c_ours),
                    spread(c_direct))
            read_seq(mine)
            read_seq(backing)
            # Warm rows take a millisecond or less: more runs steady their
            # medians against this machine's noise.
            warm_runs = max(runs, WARM_RUNS)
            row("read", f"{mode} {ext[1:]:5s} sequential 1 MiB, repeated",
                timed(lambda: read_seq(mine), warm_runs), timed(lambda: read_seq(backing), warm_runs))
            row("read", f"{mode} {ext[1:]:5s} 2000 random 4 KiB reads",
                timed(lambda: read_random(mine), warm_runs), timed(lambda: read_random(backing), warm_runs))
        rss_row("read", f"daemon RSS after the {mode} reads", [rss_mib(m.proc.pid)])
        m.stop()
    if not can_drop:
        print("(cold rows skipped: cannot write /proc/sys/vm/drop_caches without root)")


def bench_mixed_read(work, runs):
    """Every file of the mixed library read once, on a fresh mount each run
    (backing files in the page cache, the mount's cache empty), then again
    with the mount's cache warm; "cold" drops every cache before each side."""
    mixed = make_mixed_library(work)
    db = os.path.join(work, "mixed-0.db")
    if not os.path.exists(db):
        scan(mixed, db)
    mnt = os.path.join(work, "mnt-mixed")
    direct = all_files(mixed)
    read_all = lambda paths: [read_seq(p) for p in paths]  # noqa: E731
    once, again, cold, cold_direct, rss = [], [], [], [], []
    can_drop = drop_caches()
    for _ in range(runs):
        m = Mount(db, mnt)
        m.wait_ls()
        served = all_files(mnt)
        read_all(direct)
        t0 = time.perf_counter()
        read_all(served)
        once.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        read_all(served)
        again.append(time.perf_counter() - t0)
        if can_drop:
            drop_caches()
            t0 = time.perf_counter()
            read_all(served)
            cold.append(time.perf_counter() - t0)
            drop_caches()
            t0 = time.perf_counter()
            read_all(direct)
            cold_direct.append(time.perf_counter() - t0)
        rss.append(rss_mib(m.proc.pid))
        m.stop()
    mb = sum(os.path.getsize(p) for p in direct) / 1e6
    direct_warm = timed(lambda: read_all(direct), runs)
    row("read", f"every file of {len(direct)} mixed tracks once, fresh mount ({mb:.0f} MB)", spread(once),
        direct_warm)
    row("read", f"every file of {len(direct)} mixed tracks, again", spread(again), direct_warm)
    if cold:
        row("read", f"every file of {len(direct)} mixed tracks, cold", spread(cold), spread(cold_direct))
    rss_row("read", f"daemon RSS after reading the {len(direct)} tracks", rss)


def bench_concurrent(work, lib, db, runs):
    """Eight streams reading the large files sequentially while a ninth
    thread walks the 20k-track mount, all at once; page cache warm."""
    large = make_large_files(work)
    large_db = os.path.join(work, "large.db")
    if not os.path.exists(large_db):
        scan(large, large_db)
    walk_mnt, read_mnt = os.path.join(work, "mnt-walk"), os.path.join(work, "mnt-read")
    walker, reader = Mount(db, walk_mnt), Mount(large_db, read_mnt)
    walker.wait_ls()
    reader.wait_ls()

    def together(files, walk_root):
        threads = [threading.Thread(target=read_seq, args=(files[i % len(files)],)) for i in range(8)]
        threads.append(threading.Thread(target=find, args=(walk_root,)))
        for t in threads:
            t.start()
        for t in threads:
            t.join()

    served, direct = sorted(all_files(read_mnt)), sorted(all_files(large))
    together(served, walk_mnt)
    together(direct, lib)
    row("mixed", "8 sequential readers + a walker, repeated", timed(lambda: together(served, walk_mnt), runs),
        timed(lambda: together(direct, lib), runs))
    rss_row("mixed", "daemon RSS after it (the large-file mount)", [rss_mib(reader.proc.pid)])
    walker.stop()
    reader.stop()


@contextlib.contextmanager
def slow_view(work, lib, name, faults):
    """`lib` behind retagfs-faultfs, which waits as told by `faults` (e.g.
    `delay_ms=5`): storage with network latency. Yields the view's path."""
    slow, control = os.path.join(work, name), os.path.join(work, f"{name}-control")
    os.makedirs(slow, exist_ok=True)
    with open(control, "w") as f:
        f.write(f"mode=ok {faults}")
    faultfs = subprocess.Popen([FAULTFS, lib, slow, "--control", control],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while not os.path.ismount(slow):
            if faultfs.poll() is not None:
                raise SystemExit("retagfs-faultfs did not mount")
            time.sleep(0.01)
        yield slow
    finally:
        subprocess.run(["umount", slow], check=False)
        faultfs.wait(timeout=30)


def bench_slow_backing(work, runs, delay_ms=5):
    """The large files behind retagfs-faultfs, which waits `delay_ms` before
    every read (storage with network latency): one stream read sequentially,
    cold, with and without read-ahead; "direct" reads the slow view itself."""
    with slow_view(work, make_large_files(work), "slow", f"delay_ms={delay_ms}") as slow:
        db = os.path.join(work, "slow.db")
        if os.path.exists(db):
            os.remove(db)
        scan(slow, db)
        for ahead in ("off", "on"):
            mnt = os.path.join(work, f"mnt-slow-{ahead}")
            m = Mount(db, mnt, "--read-ahead", ahead)
            m.wait_ls()
            served = {os.path.splitext(p)[1]: p for p in all_files(mnt)}
            for ext in (".flac", ".wav"):
                def cold(p):
                    drop_caches()
                    t0 = time.perf_counter()
                    read_seq(p)
                    return time.perf_counter() - t0
                ours = [cold(served[ext]) for _ in range(runs)]
                direct = [cold(os.path.join(slow, "big" + ext)) for _ in range(runs)]
                mb = os.path.getsize(served[ext]) / 1e6
                row("slow", f"{ext[1:]} {delay_ms} ms/read, read-ahead {ahead}, cold",
                    spread(ours),
                    spread(direct),
                    note=f"{mb / statistics.median(ours):.0f} MB/s")
            m.stop()


def bench_slow_scan(work, runs, n=2000, delay_ms=1):
    """A library behind retagfs-faultfs, where every lookup, getattr,
    listing, open and read waits `delay_ms`: first scan and re-scan with the
    default threads (16 on network storage) against one per core."""
    faults = f"delay_ms={delay_ms} meta_delay_ms={delay_ms}"
    with slow_view(work, make_flac_library(work, n), "slow-scan", faults) as slow:
        db = os.path.join(work, "slow-scan.db")
        cores, ours, one_per_core = scans_against_one_per_core(slow, db, runs, before=lambda: remove_store(db))
        row("slow", f"first scan, {n} tracks, {delay_ms} ms/request", ours, one_per_core,
            note=f"direct = -j {cores} (one thread per core)")
        per_core = ["-j", str(cores)]
        row("slow", f"re-scan, {n} unchanged, {delay_ms} ms/request",
            *alternated(lambda: scan(slow, db), lambda: scan(slow, db, *per_core), runs),
            note=f"direct = -j {cores}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tracks", type=int, default=20000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work", help="keep generated libraries here (default: a temp dir)")
    ap.add_argument("--scale", type=int, default=100000,
                    help="also scan, walk, stat and refresh a library this large (0: skip)")
    ap.add_argument("--only", default="scan,tree,read,slow,refresh,http,query,views,metrics")
    ap.add_argument("--io-uring", choices=["on", "off"], default="on" if os.path.exists(URING_PARAM) else "off",
                    help="mount with FUSE over io_uring (default where the kernel has it; as root the fuse module "
                         "parameter is turned on for the run and restored after)")
    a = ap.parse_args()
    IO_URING[1] = a.io_uring
    old_param = None
    if a.io_uring == "on":
        with open(URING_PARAM) as f:
            old_param = f.read().strip()
        atexit.register(lambda: open(URING_PARAM, "w").write(old_param))
    work = a.work or tempfile.mkdtemp(prefix="retagfs-bench-")
    os.makedirs(work, exist_ok=True)
    only = set(a.only.split(","))
    transport = "FUSE over io_uring" if a.io_uring == "on" else "/dev/fuse"
    print(f"retagfs benchmark suite: {a.tracks} tracks, {a.runs} runs per figure (median (min-max)), "
          f"requests through {transport}, work dir {work}")
    print(f"{'area':8s} {'work':52s} {'retagfs':>28s} {'direct':>28s} {'ratio':>8s}")
    if only & {"scan", "tree", "http"}:
        lib, db = bench_scan(work, a.tracks, a.runs)
        if "http" in only:
            bench_http.report(bench_http.bench(lib, db, mount_args=IO_URING), row)
        if "tree" in only:
            bench_tree(work, lib, db, a.runs)
        if "read" in only:
            bench_concurrent(work, lib, db, a.runs)
    if a.scale and only & {"scan", "tree"}:
        big_lib, big_db = bench_scan(work, a.scale, 1, mixed=False)
        if "tree" in only:
            bench_tree(work, big_lib, big_db, 1, label=f" ({a.scale} tracks)")
    if "read" in only:
        bench_reads(work, a.runs)
        bench_mixed_read(work, a.runs)
    if "slow" in only:
        bench_slow_backing(work, a.runs)
        bench_slow_scan(work, a.runs)
    if "refresh" in only:
        r = bench_refresh.bench(work, a.tracks)
        row("refresh", f"tag set -> new path visible, {a.tracks} tracks", r["visible_median_ms"] / 1000,
            note=f"max {r['visible_max_ms']:.2f} ms over 20")
        row("refresh", "the same while 4 processes read the mount", r["visible_loaded_median_ms"] / 1000,
            note=f"max {r['visible_loaded_max_ms']:.2f} ms over 20")
        row("refresh", "daemon refresh, 1 track", r["refresh_1_ms"] / 1000)
        row("refresh", "daemon refresh, 1000 tracks", r["refresh_1000_ms"] / 1000)
        rss_row("refresh", "daemon RSS after the refreshes", [r["rss_mib"]], a.tracks)
        if a.scale:
            r = bench_refresh.bench(work, a.scale)
            row("refresh", f"tag set -> new path visible, {a.scale} tracks", r["visible_median_ms"] / 1000,
                note=f"max {r['visible_max_ms']:.2f} ms over 20")
            row("refresh", f"daemon refresh, 1 track, {a.scale} tracks", r["refresh_1_ms"] / 1000)
            rss_row("refresh", f"daemon RSS after the refreshes ({a.scale} tracks)", [r["rss_mib"]], a.scale)
    if "query" in only:
        bench_query.bench(sys.modules[__name__], work, a.tracks, a.scale, a.runs)
    if "views" in only:
        bench_views.bench(sys.modules[__name__], work, a.tracks, a.scale, a.runs)
    if "metrics" in only:
        bench_metrics.bench(sys.modules[__name__], work, a.tracks, a.runs)
    if "remote" in only:
        bench_remote.bench(sys.modules[__name__], work, a.tracks, a.runs)
    if not a.work:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Soak test (not part of `make test`: it runs for a set time and prints).

Mounts a library of copies of the test fixtures and, for --seconds, keeps
these running at once against the mount:
  walkers     `os.walk` + stat of everything
  readers     whole files and 4 KiB reads at random offsets
  retaggers   `retagfs tag set` of random tracks (new titles: paths move),
              by id and by their path in the mount
  rescanner   `retagfs scan` every few seconds
  truncator   truncates a random backing file for a moment, then restores
              it (reads of it meanwhile must fail cleanly with EIO/ENOENT)
  replacer    every --replace-every seconds replaces the store: scanned
              into another path and moved over the mounted one, or
              removed and scanned anew in place, in turn (the mount must
              follow; edits meanwhile may fail, and files open across the
              switch fail their cover art's reads with EIO). Edits and
              re-scans wait while a store is moved over until the mount
              has loaded it: a program opening the store in between would
              pair it with the old store's -wal and -shm (docs/store.md)
It samples the daemon's RSS and open descriptors every second, counts
errors by kind, and at the end restores everything, re-scans and verifies
every served file: its size equals what stat said, mutagen reads the
store's title from it, and its decoded audio equals the backing file's
(ffmpeg, PCM sha256). Exit status 0 when the daemon survived, no
unexpected error happened and every file verified.

Usage: scripts/soak.py [--seconds 60] [--copies 30] [--work DIR]
"""

import argparse
import collections
import contextlib
import errno
import hashlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.environ.get("RETAGFS_BIN", os.path.join(ROOT, "target", "release", "retagfs"))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")


def retagfs(*args):
    return subprocess.run([BIN, *args], capture_output=True, text=True)


def make_library(lib, copies):
    for i in range(copies):
        d = os.path.join(lib, f"set {i:03}")
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(FIXTURES):
            if name.rsplit(".", 1)[-1] in ("flac", "mp3", "m4a", "ogg", "opus", "wav") and name != "truncated.flac":
                shutil.copy(os.path.join(FIXTURES, name), os.path.join(d, name))


def status(pid):
    with open(f"/proc/{pid}/status") as f:
        rss = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    return rss, len(os.listdir(f"/proc/{pid}/fd"))


class Soak:
    def __init__(self, work, seconds, replace_every):
        self.work, self.seconds, self.replace_every = work, seconds, replace_every
        self.lib, self.db, self.mnt = (os.path.join(work, x) for x in ("lib", "store.db", "mnt"))
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.counts = collections.Counter()
        self.unexpected = []
        # Backing path -> until when reads of its track may fail (it is
        # truncated, or was restored and the next re-scan has not run yet).
        self.disturbed = {}
        self.backing_of = {}  # track id -> backing path
        self.ids = []
        # Until when edits may fail and reads EIO: the store is being
        # replaced, or was a moment ago and the mount may not have switched.
        self.replacing_until = 0.0
        # Cleared while a store is moved over the mounted one: as
        # docs/store.md says, nothing may open the store between the move
        # and the mount's notice, or SQLite pairs the new database with the
        # old one's -wal and -shm (and corrupts it).
        self.writers_may_run = threading.Event()
        self.writers_may_run.set()
        self.writers_running = 0
        self.writers_done = threading.Condition(self.lock)

    def count(self, what, error=None):
        with self.lock:
            self.counts[what] += 1
            if error is not None:
                # The time, to find the failure in the mount's log.
                at = time.strftime("%H:%M:%S", time.gmtime()) + f".{int(time.time() * 1000) % 1000:03}Z"
                self.unexpected.append(f"{at} {what}: {error}")

    def served_files(self):
        return [os.path.join(d, f) for d, _, fs in os.walk(self.mnt) for f in fs]

    def walker(self):
        while not self.stop.is_set():
            for f in self.served_files():
                try:
                    os.stat(f)
                except FileNotFoundError:
                    pass  # renamed by a retag between listing and stat
            self.count("walks")

    @contextlib.contextmanager
    def writing(self):
        """Runs a command that opens the store, once no store is being
        moved over the mounted one."""
        self.writers_may_run.wait()
        with self.lock:
            self.writers_running += 1
        try:
            yield
        finally:
            with self.lock:
                self.writers_running -= 1
                self.writers_done.notify_all()

    def replacing(self):
        with self.lock:
            return self.replacing_until > time.time()

    def expected_failure(self, ino):
        """Whether reads of the served file with inode `ino` may fail now
        (files are inode track id + 1; None if the stat failed)."""
        track = None if ino is None else ino - 1
        with self.lock:
            known = track is None or track in self.backing_of
        if not known:
            # A re-scan added it anew (its file was refused while it was
            # truncated, when the store was last replaced): learn its id.
            with self.writing():
                self.learn_tracks()
        with self.lock:
            now = time.time()
            return self.disturbed.get(self.backing_of.get(track), 0) > now or self.replacing_until > now

    def reader(self, rng):
        while not self.stop.is_set():
            files = self.served_files()
            if not files:
                continue
            f = rng.choice(files)
            step, ino = "stat", None
            try:
                ino = os.stat(f).st_ino
                step = "open"
                with open(f, "rb") as h:
                    step = "read"
                    size = os.fstat(h.fileno()).st_size
                    if rng.random() < 0.5:
                        if len(h.read()) != size:
                            # A retag while open: the handle serves the
                            # version it opened, stat the new one.
                            self.count("whole reads of a version retagged meanwhile")
                    else:
                        for _ in range(20):
                            os.pread(h.fileno(), 4096, rng.randrange(max(size, 1)))
                self.count("reads")
            except FileNotFoundError:
                self.count("reads of renamed files (ENOENT)")
            except OSError as e:
                if e.errno == errno.EIO and self.expected_failure(ino):
                    self.count("EIO while the backing file was truncated or not yet re-scanned, "
                               "or the store replaced")
                else:
                    with self.lock:
                        backing = self.backing_of.get((ino or 0) - 1)
                    self.count("read errors", f"{step} of {f} (inode {ino}, track of {backing}): {e}")

    def retagger(self, rng):
        while not self.stop.is_set():
            with self.lock:
                track_id = rng.choice(self.ids)
            with self.writing():
                p = retagfs("tag", "--db", self.db, "set", str(track_id), f"title=Soak {rng.randrange(10**6)}")
            if p.returncode != 0 and self.replacing():
                self.count("retags refused while the store was replaced")
            else:
                self.count("retags", None if p.returncode == 0 else p.stderr.strip())
            time.sleep(0.05)

    def mount_retagger(self, rng):
        """`retagfs tag set` of a file named by its path in the mount, with
        no --db (the mount names its store). Another retag may move the
        file between the listing and the edit: then it names nothing."""
        while not self.stop.is_set():
            path = rng.choice(self.served_files())
            with self.writing():
                p = retagfs("tag", "set", path, f"title=Soak {rng.randrange(10**6)}")
            moved = p.returncode == 1 and "No such file or directory" in p.stderr and not os.path.exists(path)
            if p.returncode != 0 and not moved and self.replacing():
                self.count("mount retags refused while the store was replaced")
            else:
                self.count("mount retags", None if p.returncode == 0 or moved else p.stderr.strip())
            time.sleep(0.05)

    def rescanner(self):
        while not self.stop.wait(3):
            with self.writing():
                p = retagfs("scan", self.lib, "--db", self.db)
            self.count("rescans", None if p.returncode == 0 else p.stderr.strip())

    def replacer(self):
        """Replaces the store in turn by one scanned elsewhere and moved
        over it, and by removing it and scanning anew in place."""
        rebuilt = os.path.join(self.work, "rebuilt.db")
        in_place = False
        while not self.stop.wait(self.replace_every):
            with self.lock:
                self.replacing_until = float("inf")
            if in_place:
                os.remove(self.db)
                p = retagfs("scan", self.lib, "--db", self.db)
            else:
                for suffix in ("", "-wal", "-shm"):
                    if os.path.exists(rebuilt + suffix):
                        os.remove(rebuilt + suffix)
                p = retagfs("scan", self.lib, "--db", rebuilt)
                if p.returncode == 0:
                    self.move_over(rebuilt)
            self.count("stores scanned anew in place" if in_place else "stores moved over the mounted one",
                       None if p.returncode == 0 else p.stderr.strip())
            self.learn_tracks()
            with self.lock:
                # The mount switches within milliseconds; a file opened
                # before it reads its art as EIO until opened again.
                self.replacing_until = time.time() + 2
            in_place = not in_place

    def move_over(self, rebuilt):
        """Moves a store over the mounted one with no other program
        opening it until the mount has loaded the new one."""
        self.writers_may_run.clear()
        with self.lock:
            self.writers_done.wait_for(lambda: self.writers_running == 0)
        loaded = self.stores_loaded()
        os.replace(rebuilt, self.db)
        deadline = time.time() + 10
        while self.stores_loaded() == loaded and time.time() < deadline:
            time.sleep(0.01)
        self.writers_may_run.set()

    def stores_loaded(self):
        """How many stores the mount has loaded in place of another."""
        with open(os.path.join(self.work, "mount.log"), errors="replace") as f:
            return sum("was replaced: loaded the new one" in line for line in f)

    def learn_tracks(self):
        tracks = json.loads(retagfs("export", "--db", self.db).stdout)
        with self.lock:
            self.ids = [t["id"] for t in tracks]
            self.backing_of = {t["id"]: t["backing_path"] for t in tracks}

    def truncator(self, rng, backing):
        while not self.stop.wait(1):
            path = rng.choice(backing)
            # Outside the library: a re-scan would add the copy as a track.
            keep = os.path.join(self.work, "truncated-original")
            shutil.copy2(path, keep)
            with self.lock:
                self.disturbed[path] = float("inf")
            with open(path, "r+b") as f:
                f.truncate(os.path.getsize(path) // 2)
            time.sleep(0.5)
            os.replace(keep, path)
            with self.lock:
                # Until a re-scan (every 3 s, taking well under 1 s) has
                # seen the restored file.
                self.disturbed[path] = time.time() + 5
            self.count("truncations")

    def run(self):
        os.makedirs(self.mnt, exist_ok=True)
        p = retagfs("scan", self.lib, "--db", self.db)
        if p.returncode != 0:
            sys.exit(p.stderr)
        self.learn_tracks()
        backing = list(self.backing_of.values())
        log = open(os.path.join(self.work, "mount.log"), "w")
        daemon = subprocess.Popen([BIN, "mount", self.mnt, "--db", self.db], stdout=log, stderr=log)
        while not os.path.ismount(self.mnt):
            if daemon.poll() is not None:
                sys.exit("mount failed: see " + log.name)
            time.sleep(0.05)
        workers = [threading.Thread(target=self.walker), threading.Thread(target=self.rescanner),
                   threading.Thread(target=self.truncator, args=(random.Random(2), backing))]
        workers += [threading.Thread(target=self.reader, args=(random.Random(10 + i),)) for i in range(4)]
        workers += [threading.Thread(target=self.retagger, args=(random.Random(20 + i),)) for i in range(2)]
        if self.replace_every > 0:
            workers += [threading.Thread(target=self.replacer)]
        workers += [threading.Thread(target=self.mount_retagger, args=(random.Random(30),))]
        for w in workers:
            w.start()
        samples = []
        start = time.time()
        while time.time() - start < self.seconds and daemon.poll() is None:
            samples.append((time.time() - start, *status(daemon.pid)))
            time.sleep(1)
        self.stop.set()
        for w in workers:
            w.join()
        survived = daemon.poll() is None

        print(f"{'t (s)':>6} {'RSS (MiB)':>10} {'fds':>5}")
        for t, rss, fds in samples[:: max(1, len(samples) // 20)]:
            print(f"{t:6.0f} {rss / 1024:10.1f} {fds:5}")
        print("work done:", dict(self.counts))
        failures = list(self.unexpected)
        if not survived:
            failures.append("the mount daemon died")
        else:
            retagfs("scan", self.lib, "--db", self.db)
            time.sleep(0.5)
            failures += self.verify()
            subprocess.run(["umount", self.mnt], check=False)
            daemon.wait(timeout=30)
        log.close()
        with open(log.name) as f:
            if "panicked" in f.read():
                failures.append("a panic in the mount log")
        for line in failures[:50]:
            print("FAIL", line)
        print(f"soak: {len(failures)} failure(s) over {self.seconds} s")
        return 1 if failures else 0

    def verify(self):
        """Every served file (found by inode: track id + 1, as paths of
        colliding names depend on the order of live edits): size as stat
        says, the store's title, the backing file's audio."""
        failures = []
        tracks = {t["id"]: t for t in json.loads(retagfs("export", "--db", self.db).stdout)}
        served = {os.stat(f).st_ino - 1: f for f in self.served_files()}
        if set(served) != set(tracks):
            failures.append(f"tracks served {sorted(set(served) - set(tracks))[:5]}, "
                            f"not served {sorted(set(tracks) - set(served))[:5]}")
        for track_id, path in sorted(served.items()):
            t = tracks.get(track_id)
            if t is None:
                continue
            try:
                with open(path, "rb") as h:
                    data = h.read()
                if len(data) != os.stat(path).st_size:
                    failures.append(f"{path}: size differs from stat")
                title = title_of(path)
                if title != t["tags"].get("title", [None])[0]:
                    failures.append(f"{path}: title {title!r}, store {t['tags'].get('title')!r}")
                if pcm(path) != pcm(t["backing_path"]):
                    failures.append(f"{path}: decoded audio differs from the backing file")
            except Exception as e:  # noqa: BLE001 - reported, not hidden
                failures.append(f"{path}: {e}")
        print(f"verified {len(served)} files")
        return failures


def title_of(path):
    """The title as mutagen reads it (WAV keeps it in an ID3 chunk, which
    mutagen's easy interface does not map)."""
    from mutagen import File as MutagenFile

    easy = MutagenFile(path, easy=True)
    if easy is not None and easy.get("title"):
        return easy["title"][0]
    full = MutagenFile(path)
    frame = full.tags.get("TIT2") if full is not None and full.tags is not None else None
    return frame.text[0] if frame else None


def pcm(path):
    out = subprocess.run(["ffmpeg", "-v", "error", "-i", path, "-map", "0:a", "-f", "f64le", "-"],
                         capture_output=True).stdout
    return hashlib.sha256(out).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--copies", type=int, default=30, help="copies of the fixture set (7 files each)")
    ap.add_argument("--replace-every", type=int, default=30,
                    help="seconds between replacements of the store (0: never)")
    ap.add_argument("--work", help="work directory (default: a temporary one)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="retagfs-soak-")
    make_library(os.path.join(work, "lib"), args.copies)
    rc = Soak(work, args.seconds, args.replace_every).run()
    if rc == 0 and not args.work:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"library, store and mount log kept in {work}")
    sys.exit(rc)


if __name__ == "__main__":
    main()

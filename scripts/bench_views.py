"""The `views` rows of scripts/bench.py: the same store mounted as one view
and with a configuration of five views (one selected by a query, one fanned
out over two genres a track), album covers in every folder of tracks and
two smart playlists, at 20k and the large library, the two taking
turns in one run: mount to the first `ls`, the daemon's memory after it,
and the daemon's own refresh time for a retag of one track (from the
`mount -v` log; median of 20 retags), which updates every view it is in.
Then a row a part of the configuration (PARTS), each mounted alone in
turns with one view: what each part costs.

The libraries are bench.py's tiny FLACs, each album given two genres
through `retagfs import`."""

import hashlib
import json
import os
import re
import statistics
import sqlite3
import subprocess
import time

VIEW_TABLES = {
    "Artists": 'template = "${albumartist|artist}/$album/${tracknumber:02} $title"',
    "Albums": 'template = "$album/${tracknumber:02} $title"',
    "Years": 'template = "$date/$album/${tracknumber:02} $title"',
    "Recently added": 'template = "$artist - $title"\nquery = "added:-30d.."',
    "Genres": 'template = "${genre*}/$album/${tracknumber:02} $title"',
}
PLAYLIST_TABLES = '''
[[playlist]]
name = "Genre 3"
query = 'genre:="Genre 3"'
sort = "album tracknumber"

[[playlist]]
name = "Openers"
query = "tracknumber:1"
sort = "-added"
'''


def configuration(views=tuple(VIEW_TABLES), playlists=True):
    """The TOML of `views` (names of VIEW_TABLES), with the playlists or not."""
    tables = "".join(f'\n[[view]]\nname = "{name}"\n{VIEW_TABLES[name]}\n' for name in views)
    return tables + (PLAYLIST_TABLES if playlists else "")


FIVE_VIEWS = configuration()
# What each part of the five views' configuration costs, each mounted
# alone: (label, configuration, extra mount options).
PARTS = [
    ("five views, no covers, no playlists", configuration(playlists=False), ["--covers", "false"]),
    ("five views with covers", configuration(playlists=False), []),
    ("five views with playlists", FIVE_VIEWS, ["--covers", "false"]),
    ("all of it", FIVE_VIEWS, []),
    ("all of it but Recently added", configuration([v for v in VIEW_TABLES if v != "Recently added"]), []),
]
REFRESH = re.compile(r"refresh: 1 track\(s\) changed.* in ([0-9.]+) ms")
RETAGS = 20
TARGETS = {"mount": 2.0, "memory": 1.5, "retag_ms": 1.0}


def store_with_genres(b, work, n):
    lib = b.make_flac_library(work, n)
    db = os.path.join(work, f"views-by-album-{n}.db")
    if not os.path.exists(db):
        b.scan(lib, db)
        tracks = json.loads(subprocess.run([b.BIN, "export", "--db", db], check=True, capture_output=True).stdout)
        # Each track's album by its tag, not by its id: a scan numbers the
        # tracks of several albums in the order its threads meet them.
        album = {t["id"]: int(t["tags"]["album"][0].split()[-1]) for t in tracks}
        # Two genres an album, as taggers set them.
        edits = [{"id": i, "tags": {"genre": [f"Genre {a % 7}", f"Genre {7 + a % 11}"]}} for i, a in album.items()]
        subprocess.run([b.BIN, "import", "--db", db, "-"], input=json.dumps(edits).encode(),
                       check=True, capture_output=True)
        give_albums_covers(db, album)
    return db


def give_albums_covers(db, album):
    """A front cover an album (`album`: track id to album number), shared
    by its tracks, written as an external tool may (docs/store.md: `art`
    and `track_art`)."""
    con = sqlite3.connect(db)
    with con:
        shas = {}
        for a in sorted(set(album.values())):
            image = b"\xff\xd8\xff\xe0" + f"cover of album {a}".encode() * 500 + b"\xff\xd9"
            sha = hashlib.sha256(image).hexdigest()
            con.execute("INSERT INTO art (sha256, mime, data) VALUES (?, 'image/jpeg', ?)", (sha, image))
            shas[a] = sha
        con.executemany("INSERT INTO track_art (track_id, position, art_sha256, picture_type) VALUES (?, 0, ?, 3)",
                        [(i, shas[a]) for i, a in album.items()])
    con.close()


class Logged:
    """A mount with `-v`, its log kept to read refresh times from."""

    def __init__(self, b, db, mnt, *extra):
        os.makedirs(mnt, exist_ok=True)
        self.mnt, self.log_path = mnt, mnt + ".log"
        t0 = time.perf_counter()
        with open(self.log_path, "w") as log:
            self.proc = subprocess.Popen([b.BIN, "mount", mnt, "--db", db, "-v", *b.IO_URING, *extra],
                                         stdout=log, stderr=subprocess.STDOUT)
        while not (os.path.ismount(mnt) and os.listdir(mnt)):
            if self.proc.poll() is not None:
                raise SystemExit("views: mount failed: " + open(self.log_path).read())
            time.sleep(0.001)
        self.up = time.perf_counter() - t0
        self.rss = b.rss_mib(self.proc.pid)

    def refreshes(self):
        return [float(t) for t in REFRESH.findall(open(self.log_path).read())]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)


def retag_times(b, db, m, track_id):
    """The daemon's refresh time of each of RETAGS retags of one track."""
    for i in range(RETAGS):
        seen = len(m.refreshes())
        subprocess.run([b.BIN, "tag", "--db", db, "set", str(track_id), f"title=Retag {i} {time.time_ns()}"],
                       check=True, capture_output=True)
        deadline = time.time() + 10
        while len(m.refreshes()) == seen and time.time() < deadline:
            time.sleep(0.001)
    return m.refreshes()[-RETAGS:]


def bench(b, work, tracks, scale, runs):
    """`b` is bench.py (its libraries, scan, row, rss_mib)."""
    config = os.path.join(work, "five-views.toml")
    with open(config, "w") as f:
        f.write(FIVE_VIEWS)
    for n in [tracks] + ([scale] if scale and scale != tracks else []):
        db = store_with_genres(b, work, n)
        figures = {side: {"up": [], "rss": [], "retag": []} for side in ("one", "five")}
        for r in range(runs):
            for side, extra in (("one", []), ("five", ["--config", config])):
                m = Logged(b, db, os.path.join(work, f"mnt-views-{side}"), *extra)
                try:
                    figures[side]["up"].append(m.up)
                    figures[side]["rss"].append(m.rss)
                    if r == 0:
                        figures[side]["retag"] = retag_times(b, db, m, n // 2)
                finally:
                    m.stop()
        one, five = figures["one"], figures["five"]
        ratio = statistics.median(five["up"]) / statistics.median(one["up"])
        b.row("views", f"mount to first ls, five views, {n} tracks", b.spread(five["up"]), b.spread(one["up"]),
              note=f"direct = one view; {ratio:.2f}x; <= {TARGETS['mount']}x: "
                   f"{'met' if ratio <= TARGETS['mount'] else 'MISSED'}")
        ratio = statistics.median(five["rss"]) / statistics.median(one["rss"])
        b.row("views", f"daemon memory after it, five views, {n} tracks", statistics.median(five["rss"]),
              statistics.median(one["rss"]), unit="MiB",
              note=f"direct = one view; {ratio:.2f}x; <= {TARGETS['memory']}x: "
                   f"{'met' if ratio <= TARGETS['memory'] else 'MISSED'}")
        median = statistics.median(five["retag"]) if five["retag"] else float("nan")
        b.row("views", f"refresh of one retag, five views, {n} tracks", b.spread([t / 1000 for t in five["retag"]]),
              b.spread([t / 1000 for t in one["retag"]]) if one["retag"] else None,
              note=f"direct = one view; median {median:.3f} ms over {len(five['retag'])} retags; "
                   f"<= {TARGETS['retag_ms']} ms: {'met' if median <= TARGETS['retag_ms'] else 'MISSED'}")
        parts(b, work, db, n, runs)


def parts(b, work, db, n, runs):
    """A row a part of the configuration (PARTS), each mounted alone, all
    taking turns with one view: its memory against one view's, and its
    mount time in the note."""
    sides = [("one view", None, [])] + PARTS
    figures = {label: {"up": [], "rss": []} for label, _, _ in sides}
    for r in range(runs):
        for i, (label, config, extra) in enumerate(sides):
            options = list(extra)
            if config is not None:
                path = os.path.join(work, f"part-{i}.toml")
                with open(path, "w") as f:
                    f.write(config)
                options += ["--config", path]
            m = Logged(b, db, os.path.join(work, "mnt-views-part"), *options)
            try:
                figures[label]["up"].append(m.up)
                figures[label]["rss"].append(m.rss)
            finally:
                m.stop()
    one = figures["one view"]
    for label, _, _ in PARTS:
        part = figures[label]
        b.row("views", f"part: {label}, {n} tracks", statistics.median(part["rss"]),
              statistics.median(one["rss"]), unit="MiB",
              note=f"direct = one view; mount {statistics.median(part['up']):.3f} s "
                   f"against {statistics.median(one['up']):.3f} s")

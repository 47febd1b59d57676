"""The `query` rows of scripts/bench.py: `retagfs query` against beets'
`beet ls` with the same queries on the same tracks, on the 20k and the
large library, side by side in one run (their calls taking turns), and the
first listing of a `.search` folder of a mount of the large library.

The beets library is filled through beets' Python API from `retagfs
export` (an import would read every file, which is not what is timed).
Both print the matching tracks' files (`retagfs query --print library`,
`beet ls -p`), and their outputs are compared as sets once per query. One
more row prints the first query's paths in the view (`--print view`, the
default), which builds the view as a mount does."""

import json
import os
import subprocess
import sys
import tempfile
import time

# (what, retagfs query, the same in beets' field names)
QUERIES = [
    ("a substring", "album:0042", "album:0042"),
    ("a range", "tracknumber:3..4", "track:3..4"),
    ("a combination", "artist:0004 year:2019..2021 -title:7", "artist:0004 year:2019..2021 ^title:7"),
]
# First listings of search folders timed on a fresh mount each.
SEARCHES = ["album:0042", "artist:0004 tracknumber:3..4", "title:\"song 99\""]
# The first listing of a search on the large library, at most (seconds).
SEARCH_TARGET = 0.1


def ensure_beets():
    try:
        import beets  # noqa: F401
    except ImportError:
        for extra in ([], ["--break-system-packages"]):
            if subprocess.run([sys.executable, "-m", "pip", "install", "-q", "beets", *extra]).returncode == 0:
                break
        else:
            raise SystemExit("query: cannot install beets (pip install beets)")


def beets_library(b, db, folder):
    """A beets library (and its config folder) of the tracks of store `db`."""
    lib_path = os.path.join(folder, "library.db")
    if os.path.exists(lib_path):
        return lib_path
    tracks = json.loads(subprocess.run([b.BIN, "export", "--db", db], check=True,
                                       capture_output=True).stdout)
    fill = f"""
import json, sys
from beets.library import Library, Item
lib = Library({lib_path + '.tmp'!r}, {folder!r})
tracks = json.load(sys.stdin)
with lib.transaction():
    for t in tracks:
        tags = {{k: v[0] for k, v in t["tags"].items() if v}}
        item = Item(path=t["backing_path"].encode(), artist=tags.get("artist", ""),
                    album=tags.get("album", ""), title=tags.get("title", ""),
                    track=int(tags.get("tracknumber", "0") or 0), year=int(tags.get("date", "0")[:4] or 0))
        lib.add(item)
"""
    subprocess.run([sys.executable, "-c", fill], input=json.dumps(tracks).encode(), check=True,
                   env=beets_env(folder))
    os.rename(lib_path + ".tmp", lib_path)
    return lib_path


def beets_env(folder):
    return {**os.environ, "BEETSDIR": folder}


def paths_of(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, env=env)
    if p.returncode not in (0, 1):
        raise SystemExit(f"{cmd[0]} failed: {p.stderr.decode(errors='replace')}")
    return p.stdout.decode(errors="replace").splitlines()


def query_rows(b, db, n, runs, folder):
    lib = beets_library(b, db, folder)
    env = beets_env(folder)
    for what, ours, theirs in QUERIES:
        retagfs = [b.BIN, "query", "--db", db, "--print", "library", "--", ours]
        # beets takes a query as one argument per term.
        beet = [sys.executable, "-m", "beets", "-l", lib, "ls", "-p", "--", *theirs.split()]
        found = set(paths_of(retagfs))
        same = found == set(paths_of(beet, env))
        mine, beets_time = b.alternated(lambda: paths_of(retagfs), lambda: paths_of(beet, env), runs)
        ratio = beets_time[0] / mine[0]
        b.row("query", f"{what} ({ours}), {n} tracks", mine, beets_time,
              note=f"direct = beet ls; {len(found)} tracks, the same set: {'yes' if same else 'NO'}; "
                   f"beets/ours {ratio:.1f}x; >= 10x: {'met' if ratio >= 10 else 'MISSED'}")
    what, ours, _ = QUERIES[0]
    in_view = [b.BIN, "query", "--db", db, "--print", "view", "--", ours]
    took = b.timed(lambda: paths_of(in_view), runs)
    b.row("query", f"{what} ({ours}) printed as paths in the view, {n} tracks", took,
          note="builds the whole view first, as a mount does")


def search_rows(b, db, n, work):
    """The first listing (lookup, then every folder listed) of each search
    folder, each on a fresh mount."""
    for text in SEARCHES:
        mnt = os.path.join(work, "mnt-search")
        m = b.Mount(db, mnt)
        try:
            m.wait_ls()
            folder = os.path.join(mnt, ".search", text)
            t0 = time.perf_counter()
            files = sum(len(names) for _, _, names in os.walk(folder))
            took = time.perf_counter() - t0
        finally:
            m.stop()
        b.row("query", f"first listing of .search/{text}, {n} tracks", took,
              note=f"{files} files; <= {SEARCH_TARGET * 1000:.0f} ms: "
                   f"{'met' if took <= SEARCH_TARGET else 'MISSED'}")


def bench(b, work, tracks, scale, runs):
    """`b` is bench.py (its libraries, scan, Mount, row, alternated)."""
    ensure_beets()
    sizes = [tracks] + ([scale] if scale and scale != tracks else [])
    for n in sizes:
        lib = b.make_flac_library(work, n)
        db = os.path.join(work, f"query-{n}.db")
        if not os.path.exists(db):
            b.scan(lib, db)
        folder = os.path.join(work, f"beets-{n}")
        os.makedirs(folder, exist_ok=True)
        query_rows(b, db, n, runs, folder)
        if n == sizes[-1]:
            search_rows(b, db, n, work)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench as suite
    work = sys.argv[1] if len(sys.argv) > 1 else tempfile.mkdtemp(prefix="retagfs-bench-query-")
    bench(suite, work, 20000, 100000, 3)

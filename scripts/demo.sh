#!/usr/bin/env bash
# The demo behind `make demo`: a small messy library made from the project's
# fixture files, scanned, mounted, read by a real tagger (mutagen), retagged.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${RETAGFS_BIN:-target/release/retagfs}
work=$(mktemp -d /tmp/retagfs-demo.XXXXXX)
lib=$work/library mnt=$work/mnt db=$work/store.db
pid=""
cleanup() {
  if [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; then kill -TERM "$pid"; wait "$pid" || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

mount_view() {
  "$BIN" mount "$mnt" --db "$db" 2>"$work/mount.log" &
  pid=$!
  # What the daemon said on starting (as root it may have turned on FUSE
  # over io_uring in the kernel, and says so).
  for _ in $(seq 100); do mountpoint -q "$mnt" && { cat "$work/mount.log"; return; }; sleep 0.05; done
  cat "$work/mount.log"; exit 1
}

unmount_view() {
  kill -TERM "$pid"; wait "$pid" || true; pid=""
}

step "A messy library in $lib"
mkdir -p "$lib/downloads/new stuff" "$lib/old rips" "$mnt"
cp tests/fixtures/tagged.flac "$lib/downloads/new stuff/track03_final(1).flac"
cp tests/fixtures/untagged.flac "$lib/old rips/unknown.flac"
cp tests/fixtures/tagged.mp3 "$lib/old rips/a.mp3"
cp tests/fixtures/tagged.m4a tests/fixtures/tagged.ogg tests/fixtures/tagged.opus tests/fixtures/tagged.wav "$lib/downloads/"
cp tests/fixtures/cover.png tests/fixtures/notes.txt "$lib/old rips/"
(cd "$lib" && find . -type f | sort)

step "retagfs scan $lib --db $db"
"$BIN" scan "$lib" --db "$db"

step "retagfs mount $mnt --db $db   (default template: albumartist/album/track title)"
mount_view
(cd "$mnt" && find . -type f | sort)

step "What a real tagger (mutagen) reads through the mount"
python3 - "$mnt" <<'PY'
import os, sys, mutagen
root = sys.argv[1]
for dirpath, _, files in sorted(os.walk(root)):
    for name in sorted(files):
        path = os.path.join(dirpath, name)
        f = mutagen.File(path, easy=True)
        tags = dict(f.tags or {}) if f is not None else {}
        # WAV: mutagen has no easy keys for its id3 chunk.
        frames = {"TIT2": "title", "TPE1": "artist", "TALB": "album", "TRCK": "tracknumber"}
        tags.update({frames[k]: v.text for k, v in list(tags.items()) if k in frames})
        short = {k: v for k, v in tags.items() if k in ("title", "artist", "album", "tracknumber")}
        print(os.path.relpath(path, root), short)
PY

step "Retag one track in the store while mounted: retagfs tag set <file> title='A New Title'"
track="$lib/downloads/new stuff/track03_final(1).flac"
"$BIN" tag --db "$db" set "$track" "title=A New Title"
"$BIN" tag --db "$db" get "$track" title artist
for _ in $(seq 100); do [ -e "$mnt/Fixture Band/Fixture Album/03 A New Title.flac" ] && break; sleep 0.01; done
echo "the mount followed at once, no remount:"
(cd "$mnt" && find . -type f -name '*.flac' | sort)
python3 -c "import mutagen.flac,sys; print('title seen by mutagen:', mutagen.flac.FLAC(sys.argv[1])['title'])" \
  "$mnt/Fixture Band/Fixture Album/03 A New Title.flac"
cmp <(tail -c 8000 "$track") <(tail -c 8000 "$mnt/Fixture Band/Fixture Album/03 A New Title.flac") && \
  echo "audio bytes identical to the backing file; the backing file was not modified"

step "Unmount"
unmount_view
echo "demo done"

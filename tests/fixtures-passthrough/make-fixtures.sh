#!/usr/bin/env bash
# Regenerates the committed files that synthesis must serve byte-identical
# (with a log line saying why). Needs: sox ffmpeg vorbis-tools.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sox -n -r 22050 -c 1 -b 16 "$tmp/tone.wav" synth 1 sine 440 gain -6

# Two Vorbis streams in a row (different serial numbers): a chained stream.
oggenc -Q -q 0 -s 1111 -t "First" -o "$tmp/a.ogg" "$tmp/tone.wav"
oggenc -Q -q 0 -s 2222 -t "Second" -o "$tmp/b.ogg" "$tmp/tone.wav"
cat "$tmp/a.ogg" "$tmp/b.ogg" > chained.ogg

# Fragmented MP4 (moof atoms).
ffmpeg -v error -y -i "$tmp/tone.wav" -c:a aac -b:a 32k -metadata title="Fragmented" \
  -movflags frag_keyframe+empty_moov fragmented.m4a

# RF64 WAV.
ffmpeg -v error -y -i "$tmp/tone.wav" -c:a pcm_s16le -rf64 always -metadata title="RF64" rf64.wav

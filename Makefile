# retagfs: `make demo` and `make test` work on a fresh Debian machine; they
# install what is missing (apt packages need root or sudo).

SHELL := /bin/bash
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
APT_PACKAGES := fuse3 pkg-config ffmpeg flac lame vorbis-tools opus-tools sox python3-pip
CARGO := $(shell command -v cargo || echo $$HOME/.cargo/bin/cargo)
BIN := target/release/retagfs

.PHONY: all deps build test lint unit e2e demo fixtures clean bench

all: build

deps:
	@missing=""; \
	for c in fusermount3:fuse3 pkg-config:pkg-config ffmpeg:ffmpeg flac:flac lame:lame oggenc:vorbis-tools opusenc:opus-tools sox:sox pip3:python3-pip; do \
	  command -v $${c%%:*} >/dev/null || missing="$$missing $${c##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
	@python3 -c 'import mutagen, pytest' 2>/dev/null || \
	  python3 -m pip install -q mutagen pytest 2>/dev/null || \
	  python3 -m pip install -q --break-system-packages mutagen pytest
	@command -v cargo >/dev/null || [ -x "$$HOME/.cargo/bin/cargo" ] || \
	  (curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy)

build: deps
	$(CARGO) build --release --locked

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --workspace --locked

e2e: build
	python3 -m pytest -ra tests/e2e

test: deps lint unit e2e

demo: build
	bash scripts/demo.sh

# The benchmark suite (prints tables; not a test): criterion benches of the
# in-process hot paths, then the whole-system figures against direct reads.
bench: build
	$(CARGO) bench --locked -p retagfs-core --bench hot_paths -- --warm-up-time 1 --measurement-time 2 --noplot
	python3 scripts/bench.py

fixtures:
	bash tests/fixtures/make-fixtures.sh
	bash tests/fixtures-passthrough/make-fixtures.sh
	python3 tests/fixtures-odd/make-fixtures.py

clean:
	$(CARGO) clean

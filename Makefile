# retagfs: `make demo` and `make test` work on a fresh Debian machine; they
# install what is missing (apt packages need root or sudo).

SHELL := /bin/bash
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CARGO := $(shell command -v cargo || echo $$HOME/.cargo/bin/cargo)
BIN := target/release/retagfs

.PHONY: all deps test-deps build install deb test lint unit e2e demo fixtures clean bench fuzz soak

# The S3-compatible server the object-store tests run against.
VERSITYGW_VERSION ?= v1.8.0

all: build

# Installs the Debian packages of the commands in $(1) (command:package)
# that are missing.
define apt_install_missing
	@missing=""; \
	for c in $(1); do \
	  command -v $${c%%:*} >/dev/null || missing="$$missing $${c##*:}"; \
	done; \
	if [ -n "$$missing" ]; then \
	  echo "installing:$$missing"; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

deps:
	$(call apt_install_missing,cc:gcc fusermount3:fuse3 pkg-config:pkg-config ffmpeg:ffmpeg flac:flac \
	  lame:lame oggenc:vorbis-tools opusenc:opus-tools sox:sox pip3:python3-pip)
	@python3 -c 'import mutagen, pytest' 2>/dev/null || \
	  python3 -m pip install -q mutagen pytest 2>/dev/null || \
	  python3 -m pip install -q --break-system-packages mutagen pytest
	@command -v cargo >/dev/null || [ -x "$$HOME/.cargo/bin/cargo" ] || \
	  (curl -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal --component rustfmt,clippy)

build: deps
	$(CARGO) build --release --locked

# Installs the binary `make build` made, for everyday use and for
# contrib/systemd's units (PREFIX=/usr/local by default), with the
# completions of bash, zsh and fish and a manual page per command, both
# made by the binary from its command line. It builds nothing itself: run
# as root, it would build with root's toolchain, if any, or install a
# binary older than the sources. DESTDIR stages the files (packaging).
PREFIX ?= /usr/local
SHARE = $(DESTDIR)$(PREFIX)/share
install:
	@[ -x $(BIN) ] || { echo "no $(BIN): run \`make build\` first"; exit 1; }
	$(SUDO) install -D -m 755 $(BIN) $(DESTDIR)$(PREFIX)/bin/retagfs
	$(SUDO) install -d $(SHARE)/bash-completion/completions $(SHARE)/zsh/vendor-completions \
	  $(SHARE)/fish/vendor_completions.d $(SHARE)/man/man1
	$(SUDO) bash -c '$(BIN) completions bash > $(SHARE)/bash-completion/completions/retagfs'
	$(SUDO) bash -c '$(BIN) completions zsh > $(SHARE)/zsh/vendor-completions/_retagfs'
	$(SUDO) bash -c '$(BIN) completions fish > $(SHARE)/fish/vendor_completions.d/retagfs.fish'
	$(SUDO) $(BIN) man-pages $(SHARE)/man/man1

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --all-targets --locked -- -D warnings

unit:
	$(CARGO) test --workspace --locked

e2e: build
	bash tests/e2e/run.sh

# The media software and the browser the end-to-end tests run against a
# mounted or served view.
test-deps: deps
	$(call apt_install_missing,mpd:mpd mpc:mpc minidlnad:minidlna exiftool:libimage-exiftool-perl \
	  ip:iproute2 unshare:util-linux curl:curl chromium:chromium chromedriver:chromium-driver \
	  mount.davfs:davfs2 rclone:rclone openssl:openssl htpasswd:apache2-utils man:man-db \
	  lintian:lintian dpkg-shlibdeps:dpkg-dev prometheus:prometheus)
	@python3 -c 'import selenium' 2>/dev/null || \
	  python3 -m pip install -q selenium 2>/dev/null || \
	  python3 -m pip install -q --break-system-packages selenium
	@# An S3-compatible server for the object-store tests (Go, built once).
	@command -v versitygw >/dev/null || [ -x "$$(go env GOPATH)/bin/versitygw" ] || \
	  { echo "installing versitygw $(VERSITYGW_VERSION) with go install"; \
	    go install github.com/versity/versitygw/cmd/versitygw@$(VERSITYGW_VERSION); }

# The Debian package target/debian/retagfs_VERSION_ARCH.deb of the binary
# `make build` made (scripts/make-deb.sh; dpkg-deb, no tool to compile).
deb: build
	bash scripts/make-deb.sh

test: test-deps lint unit e2e

demo: build
	bash scripts/demo.sh

# The benchmark suite (prints tables; not a test): criterion benches of the
# in-process hot paths, then the whole-system figures against direct reads.
bench: build
	$(call apt_install_missing,wrk:wrk nginx:nginx-light)
	$(CARGO) bench --locked -p retagfs-core --bench hot_paths -- --warm-up-time 1 --measurement-time 2 --noplot
	python3 scripts/bench.py

fixtures:
	bash tests/fixtures/make-fixtures.sh
	bash tests/fixtures-passthrough/make-fixtures.sh
	python3 tests/fixtures-odd/make-fixtures.py

clean:
	$(CARGO) clean

# Runs every fuzz target for FUZZ_SECONDS each (cargo-fuzz, nightly Rust).
# A failing input lands in fuzz/artifacts/<target>/; once fixed, copy it to
# fuzz/regressions/<target>/, where `make test` runs it again.
FUZZ_SECONDS ?= 60
FUZZ_TARGETS := flac mp3 mp4 ogg wav template import serve http webdav query
fuzz:
	@rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
	@command -v cargo-fuzz >/dev/null || $(CARGO) install cargo-fuzz --locked
	python3 scripts/fuzz_seeds.py fuzz/seeds
	@for t in $(FUZZ_TARGETS); do \
	  echo "== fuzz $$t ($(FUZZ_SECONDS) s)"; mkdir -p fuzz/corpus/$$t; \
	  (cd fuzz && cargo +nightly fuzz run $$t corpus/$$t seeds/$$t -- \
	    -max_total_time=$(FUZZ_SECONDS) -rss_limit_mb=4096 -max_len=1048576) || exit 1; \
	done

# Mixed load (walks, reads, retags, re-scans, backing truncations) against a
# mount for SOAK_SECONDS; prints RSS over time and verifies every file after.
SOAK_SECONDS ?= 300
soak: build
	python3 scripts/soak.py --seconds $(SOAK_SECONDS)

# holter — see README.md. `make run` records; `make test` runs every test.
DATA ?= holter-data
ARGS ?=
# make install PREFIX=/usr DESTDIR=/tmp/root: see scripts/install.sh.
PREFIX ?= /usr/local
SYSTEMDDIR ?= /etc/systemd/system
DESTDIR ?=
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)$(shell git diff --quiet HEAD 2>/dev/null || echo +dirty)
GOBUILD = go build -ldflags "-X main.version=$(VERSION) -X main.commit=$(COMMIT)"

.PHONY: run build install test setup generate check-generated

setup:
	./scripts/setup.sh

build: setup
	$(GOBUILD) -o bin/holter ./cmd/holter

# The binary on PATH, the systemd unit and its flags file (/etc/default/holter).
# Needs only Go and gcc: the UI and BPF objects are committed.
install:
	$(GOBUILD) -o bin/holter ./cmd/holter
	PREFIX=$(PREFIX) SYSTEMDDIR=$(SYSTEMDDIR) DESTDIR=$(DESTDIR) ./scripts/install.sh

# Records the whole system into $(DATA), UI on 127.0.0.1:7070 (it prints the login URL). Needs root.
run: build
	./bin/holter record --data $(DATA) $(ARGS)

generate: setup
	go generate ./internal/recorder/

check-generated: setup
	./scripts/check-generated.sh

# The whole suite. The privileged tests need root; with CI=true they fail
# rather than skip. Packages run one at a time (-p 1): several of them run a
# whole-system recorder, and one's workloads would be another's noise.
# The tests that call t.Parallel (cmd/holter's waiting tests, see its
# TestMain) run four at a time, not GOMAXPROCS: they mostly wait, and two
# CPUs would leave them waiting in turn. cmd/holter's end-to-end tests take
# longer than 20 minutes on a loaded 2-CPU machine: the timeout is per
# package.
test: setup check-generated
	go vet ./...
	go test -count=1 -p 1 -parallel 4 -timeout 60m ./...

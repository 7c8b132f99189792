# holter — see README.md. `make run` records; `make test` runs every test.
DATA ?= holter-data
ARGS ?=

.PHONY: run build test setup generate check-generated

setup:
	./scripts/setup.sh

build: setup
	go build -o bin/holter ./cmd/holter

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
test: setup check-generated
	go vet ./...
	go test -count=1 -p 1 -timeout 20m ./...

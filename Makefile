# zarrgate — see README.md. Every tool is pinned in go.mod (`go tool ...`),
# so a fresh clone needs nothing installed beyond Go, Python 3 and make.

GO       ?= go
BUF      := $(GO) tool buf
# Built test servers and Python venvs live outside the clone, so that fresh
# clones on one machine (CI) reuse them.
CACHE    ?= $(HOME)/.cache/zarrgate
export ZARRGATE_CACHE := $(CACHE)/bin
export ZARRGATE_VENV  := $(CACHE)/venv

.PHONY: build all tools api-landed deps fuzz test-python generate check-generated lint breaking test test-go serve bench clean

all: lint test-go

## build: the zarrgate binary into bin/
build:
	$(GO) build -o bin/zarrgate ./cmd/zarrgate

## tools: build the pinned dev tools (buf, protoc plugins, grpcurl) into the Go cache
tools:
	$(GO) build -o /dev/null tool

## generate: regenerate gen/ (Go) and the Python stubs from proto/ (offline
## once the Python venv exists)
generate:
	$(BUF) generate
	scripts/gen-python.sh

## check-generated: fail if gen/ is not what buf generates from proto/
check-generated: generate
	@git diff --exit-code --stat -- gen/ clients/python/src/zarrgate/_gen/ || (echo "generated code is stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git ls-files --others --exclude-standard gen/ clients/python/src/zarrgate/_gen/)" || (echo "untracked generated files: run 'make generate' and commit" >&2; exit 1)

## lint: buf lint, buf breaking, gofmt, go vet
lint: breaking
	$(BUF) lint
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$out" || (echo "gofmt needed: $$out" >&2; exit 1)
	$(GO) vet ./...

## breaking: no wire-incompatible change against the landed API
## (api/landed.binpb; additions are fine, anything else fails)
breaking:
	$(BUF) breaking --against api/landed.binpb

## api-landed: record the current API as landed (only for a deliberate,
## announced break, or to pin new services once they have shipped)
api-landed:
	$(BUF) build -o api/landed.binpb

## test: everything CI checks (installs what the tests need first)
test: tools lint check-generated test-go test-python fuzz

## fuzz: every fuzz target, briefly (FUZZTIME=3s each)
fuzz:
	scripts/fuzz.sh

## test-python: the Python package against a live server, with zarr-python's
## own store test suite
test-python:
	scripts/test-python.sh

PYTHON := $(ZARRGATE_VENV)-client/bin/python

## deps: build and install what the tests need: versitygw for S3, netCDF's
## ncgen/ncdump, and a Python venv with pinned zarr-python, numcodecs, grpcio
deps:
	scripts/deps.sh

## test-go: the Go test suite under the race detector, S3 on a real server,
## interop checks against the real zarr-python and numcodecs
## (e2e on its own afterwards and without -race: it drives the real binary,
## which is not race-built, and its load and memory tests measure a server
## that must not share the machine with the other packages' race tests)
test-go: deps
	ZARRGATE_S3_REQUIRED=1 ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/e2e$$')
	ZARRGATE_S3_REQUIRED=1 ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -count=1 -timeout 20m ./e2e/

## serve: run the embedded server on ./data at 127.0.0.1:50051
serve:
	$(GO) run ./cmd/zarrgate serve --root ./data --listen 127.0.0.1:50051

## bench: the benchmarks recorded in docs/benchmarks.md (tensorstore, pinned
## in bench/requirements.txt, is added to the test venv for the comparison)
bench: deps
	$(PYTHON) -m pip install -q -r bench/requirements.txt
	$(GO) test -run '^$$' -bench . -benchtime 5x ./storesvc/remote/ ./codecsvc/... ./gateway/... ./internal/...
	ZARRGATE_PYTHON=$(PYTHON) $(GO) test -run '^$$' -bench 'GatewaySlabs' -benchtime 3x -timeout 60m ./e2e/
	$(GO) test -run '^$$' -bench 'ServeStream' -benchtime 5x ./e2e/
	$(GO) test -run '^$$' -bench 'CodecWorkers' -benchtime 2x ./e2e/
	$(GO) test -run '^$$' -bench 'GatewayMemory' -benchtime 1x -timeout 30m ./e2e/

clean:
	rm -rf data bin

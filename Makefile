# zarrgate — see README.md. Every dev tool (buf, protoc plugins, grpcurl) is
# pinned in its own module, tools/go.mod, and run with `go tool
# -modfile=tools/go.mod ...` (GOTOOL below), so a fresh clone needs nothing
# installed beyond Go, Python 3, Node.js 20+ with npm, and make, and the
# tools' dependencies stay out of the product's go.mod. (The TypeScript
# client's protoc-gen-es and tsc are pinned in clients/typescript's
# package-lock.json and installed by `npm ci`.)

GO       ?= go
GOTOOL   := $(GO) tool -modfile=tools/go.mod
BUF      := $(GOTOOL) buf
# Built test servers and Python venvs live outside the clone, so that fresh
# clones on one machine (CI) reuse them.
CACHE    ?= $(HOME)/.cache/zarrgate
export ZARRGATE_CACHE := $(CACHE)/bin
export ZARRGATE_VENV  := $(CACHE)/venv

.PHONY: build build-image all tools api-landed deps fuzz test-cgocodecs test-python test-typescript generate check-generated lint breaking tidy-check deploy-check test test-go serve bench bench-side-by-side clean

all: lint test-go

## build: the zarrgate binary into bin/
build:
	$(GO) build -o bin/zarrgate ./cmd/zarrgate

## build-image: the container image's binary (the Dockerfile's build line
## run here: static, the cgocodecs build with libzstd and libdeflate linked
## in; deps installs them) into bin/zarrgate-image
build-image: deps
	scripts/image-binary.sh bin/zarrgate-image

## tools: build the pinned dev tools (buf, protoc plugins, grpcurl) into the Go cache
tools:
	$(GO) build -modfile=tools/go.mod -o /dev/null tool

## generate: regenerate gen/ (Go), the Python stubs and the TypeScript stubs
## from proto/ (offline once the Python venv and clients/typescript's
## node_modules exist)
generate:
	$(BUF) generate
	scripts/gen-python.sh
	scripts/gen-typescript.sh

## check-generated: fail if gen/ or the Python or TypeScript stubs are not
## what buf generates from proto/
GENERATED := gen/ clients/python/src/zarrgate/_gen/ clients/typescript/src/gen/
check-generated: generate
	@git diff --exit-code --stat -- $(GENERATED) || (echo "generated code is stale: run 'make generate' and commit" >&2; exit 1)
	@test -z "$$(git ls-files --others --exclude-standard $(GENERATED))" || (echo "untracked generated files: run 'make generate' and commit" >&2; exit 1)

## lint: buf lint, buf breaking, tidy go.mod files, gofmt, go vet, the
## deployment's manifests and Dockerfile
lint: breaking tidy-check deploy-check
	$(BUF) lint
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); test -z "$$out" || (echo "gofmt needed: $$out" >&2; exit 1)
	$(GO) vet ./...
	$(GO) vet -tags purego ./codecsvc/...
	GOARCH=arm64 $(GO) vet ./codecsvc/...
	cd deploy/validate && $(GO) vet ./...

## deploy-check: deploy/kubernetes.yaml decoded strictly into the Kubernetes
## API types and cross-checked (Secrets, ConfigMaps, Services, ports, probes,
## every flag against the binary the Dockerfile's build line makes, which
## must be static), and deploy/grafana/zarrgate.json (structure, PromQL,
## metrics and labels against a real gateway's and workers' /metrics);
## deploy/validate is its own module (deploy/README.md)
deploy-check: deps
	cd deploy/validate && $(GO) test -count=1 ./...

## breaking: no wire-incompatible change against the landed API
## (api/landed.binpb; additions are fine, anything else fails)
breaking:
	$(BUF) breaking --against api/landed.binpb

## tidy-check: go.mod and go.sum of the product, of tools/ and of
## deploy/validate/ are what
## `go mod tidy` makes them (no missing, unused or mis-marked requirements),
## and the tools build against the product's protobuf and grpc (so that
## protoc-gen-go is the version of the runtime the generated code runs on)
RUNTIME_MODS := google.golang.org/protobuf google.golang.org/grpc
tidy-check:
	@a=$$($(GO) list -m $(RUNTIME_MODS)) && b=$$(cd tools && $(GO) list -m $(RUNTIME_MODS)) && test "$$a" = "$$b" || { printf 'go.mod:\n%s\ntools/go.mod:\n%s\n' "$$a" "$$b" >&2; echo "tools/go.mod and go.mod disagree on $(RUNTIME_MODS): bump both ('cd tools && go get MODULE@VERSION'), then 'make generate'" >&2; exit 1; }
	@out=$$($(GO) mod tidy -diff 2>&1) || { printf '%s\n' "$$out" >&2; echo "go.mod/go.sum are not tidy (diff above): run 'go mod tidy' and commit" >&2; exit 1; }
	@out=$$(cd tools && $(GO) mod tidy -diff 2>&1) || { printf '%s\n' "$$out" >&2; echo "tools/go.mod/go.sum are not tidy (diff above): run 'cd tools && go mod tidy' and commit" >&2; exit 1; }
	@out=$$(cd deploy/validate && $(GO) mod tidy -diff 2>&1) || { printf '%s\n' "$$out" >&2; echo "deploy/validate/go.mod/go.sum are not tidy (diff above): run 'cd deploy/validate && go mod tidy' and commit" >&2; exit 1; }

## api-landed: record the current API as landed (only for a deliberate,
## announced break, or to pin new services once they have shipped)
api-landed:
	$(BUF) build -o api/landed.binpb

## test: everything CI checks (installs what the tests need first)
test: tools lint check-generated test-go test-cgocodecs test-python test-typescript fuzz

## fuzz: every fuzz target, briefly (FUZZTIME=3s each)
fuzz:
	scripts/fuzz.sh

## test-python: the Python package against a live server, with zarr-python's
## own store test suite
test-python:
	scripts/test-python.sh

## test-typescript: the TypeScript client (clients/typescript, node_modules
## from its package-lock.json by `npm ci`) under Node's test runner, reading
## what the Go client wrote through real servers
test-typescript:
	scripts/test-typescript.sh

PYTHON := $(ZARRGATE_VENV)-client/bin/python

## deps: build and install what the tests need: versitygw for S3, netCDF's
## ncgen/ncdump, and a Python venv with pinned zarr-python, numcodecs, grpcio
deps:
	scripts/deps.sh

## test-go: the Go test suite under the race detector, S3 on a real server,
## interop checks against the real zarr-python and numcodecs
## (e2e on its own afterwards and without -race: it drives the real binary,
## which is not race-built, and its load and memory tests measure a server
## that must not share the machine with the other packages' race tests),
## then the codecs again with -tags purego (no assembly)
test-go: deps
	ZARRGATE_S3_REQUIRED=1 ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -race -count=1 $$($(GO) list ./... | grep -v '/e2e$$')
	ZARRGATE_S3_REQUIRED=1 ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -count=1 -timeout 20m ./e2e/
	ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -count=1 -tags purego ./codecsvc/ ./codecsvc/blosc/

## test-cgocodecs: the cgocodecs build (libdeflate, libzstd; deps installs
## Debian's libdeflate-dev and libzstd-dev), the container image's, passes
## the codec tests, the numcodecs interop and compression parity included;
## its C decoders (zstd, gzip) are fuzzed briefly; and the image's own
## binary (the Dockerfile's build line, static) passes the e2e suite
test-cgocodecs: deps
	CGO_ENABLED=1 ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -tags cgocodecs -count=1 ./codecsvc/ ./codecsvc/blosc/
	CGO_ENABLED=1 FUZZ_TAGS=cgocodecs FUZZ_PKGS=./codecsvc/ FUZZ_TARGETS='^FuzzDecode(Zstd|Gzip)$$' FUZZTIME=5s scripts/fuzz.sh
	VERSION= REVISION= scripts/image-binary.sh $(ZARRGATE_CACHE)/zarrgate-image
	ZARRGATE_E2E_BIN=$(ZARRGATE_CACHE)/zarrgate-image ZARRGATE_S3_REQUIRED=1 ZARRGATE_INTEROP_REQUIRED=1 ZARRGATE_PYTHON=$(PYTHON) $(GO) test -count=1 -timeout 20m ./e2e/

## serve: run the embedded server on ./data at 127.0.0.1:50051
serve:
	$(GO) run ./cmd/zarrgate serve --root ./data --listen 127.0.0.1:50051

## bench: the benchmarks recorded in docs/benchmarks.md (tensorstore, pinned
## in bench/requirements.txt, is added to the test venv for the comparison)
bench: deps
	$(PYTHON) -m pip install -q -r bench/requirements.txt
	$(GO) test -run '^$$' -bench . -benchtime 5x ./storesvc/remote/ ./codecsvc/... ./gateway/... ./internal/...
	ZARRGATE_PYTHON=$(PYTHON) $(GO) test -run '^$$' -bench 'GatewaySlabs' -benchtime 3x -timeout 60m ./e2e/
	ZARRGATE_PYTHON=$(PYTHON) $(GO) test -run '^$$' -bench 'PythonClient' -benchtime 1x -timeout 60m ./e2e/
	$(GO) test -run '^$$' -bench 'ServeStream' -benchtime 5x ./e2e/
	$(GO) test -run '^$$' -bench 'CodecWorkers' -benchtime 2x ./e2e/
	$(GO) test -run '^$$' -bench 'GatewayMemory' -benchtime 1x -timeout 30m ./e2e/
	$(MAKE) bench-side-by-side

## bench-side-by-side: issue 20's table in one interleaved run: zarrgate
## against tensorstore, zarrs, zarr-python, numcodecs and a raw 2-thread
## read, on an array written by zarr-python (libzstd level 3), each system
## in its own process (scripts/bench-side-by-side.sh; ROUNDS=5, ROWS=a,b to
## run a subset; its own venv, ~/.cache/zarrgate/venv-bench)
bench-side-by-side:
	scripts/bench-side-by-side.sh

clean:
	rm -rf data bin

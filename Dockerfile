# syntax=docker/dockerfile:1
#
# zarrgate's container image: one static binary (the cgocodecs build, with
# libzstd and libdeflate linked in) on a distroless base, run as a non-root
# user. Every tier runs from it (gateway, store-worker,
# codec-worker, serve); deploy/kubernetes.yaml gives the command.
#
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) \
#     --build-arg REVISION=$(git rev-parse HEAD) -t zarrgate:0.1.0 .
#
# NOT BUILT on the development machines (no Docker there): deploy/validate
# runs the `go build` line below outside Docker and checks that it makes a
# static binary reporting VERSION (make deploy-check). See deploy/README.md.
#
# No HEALTHCHECK: distroless has no shell or curl to run one, and
# Kubernetes ignores it anyway. Health is the admin endpoint
# (--admin-listen): GET /healthz (alive) and /readyz (ready to serve),
# which the manifests probe.

ARG GO_VERSION=1.26.8

FROM golang:${GO_VERSION}-bookworm AS build
# libzstd and libdeflate, linked into the binary statically: the image is
# the cgocodecs build, which encodes zstd and decodes zstd, gzip and zlib
# with them (README "Compression levels"; docs/benchmarks.md). The image
# already has gcc.
RUN apt-get update && apt-get install -y --no-install-recommends libzstd-dev libdeflate-dev \
    && rm -rf /var/lib/apt/lists/*
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/go/pkg/mod go mod download
COPY . .
# The build context has no usable .git (.dockerignore), so -buildvcs=false
# and the version comes from the build arguments, as --version shows it.
# Static (-extldflags=-static): netgo and osusergo keep glibc's resolver
# and user database, which need shared libraries at run time, out of it.
# `make build-image` runs this line outside Docker (scripts/image-binary.sh);
# for a pure-Go image, build with CGO_ENABLED=0 and no -tags or -extldflags.
ARG VERSION=dev
ARG REVISION=
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=1 go build -tags cgocodecs,netgo,osusergo -trimpath -buildvcs=false -ldflags "-s -w -extldflags=-static -X main.version=${VERSION} -X main.revision=${REVISION}" -o /out/zarrgate ./cmd/zarrgate

# static: no libc needed (linked in); :nonroot runs as uid/gid 65532
# and has /tmp, CA certificates (for S3 and OIDC issuers) and tzdata.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/zarrgate /usr/local/bin/zarrgate
USER 65532:65532
# gRPC: gateway/serve, store-worker, codec-worker; 9090 the admin endpoint.
EXPOSE 50051 50052 50053 9090
ENTRYPOINT ["/usr/local/bin/zarrgate"]
CMD ["help"]

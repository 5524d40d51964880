# The tern image: tern-operator, tern-runner (turn Jobs and fork copies),
# tern-pki (the install's certificates), kubectl-tern and tern-fakellm (the
# scripted model server, for demos and tests/e2e/kind.sh), and git: the runner
# pushes publish_branch's branches itself, from its own pod (docs/tools.md).
# Build from the repository root:
#   docker build -t ghcr.io/tern-dev/tern:0.1.0 .
# or without Docker: make images (scripts/build-image carries out this file's
# last stage; it accepts only the instructions used here: docs/images.md).
FROM debian:12 AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends build-essential libcurl4-openssl-dev \
      libcjson-dev libyaml-dev libssl-dev libmicrohttpd-dev \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY Makefile ./
COPY operator ./operator
COPY tests/fakes ./tests/fakes
COPY tests/harness ./tests/harness
RUN make -j"$(nproc)" build/bin/tern-operator build/bin/tern-runner build/bin/tern-pki \
      build/bin/kubectl-tern build/bin/tern-fakellm

FROM debian:12-slim
RUN apt-get update \
 && apt-get install -y --no-install-recommends libcurl4 libcjson1 libyaml-0-2 libssl3 \
      libmicrohttpd12 ca-certificates git tzdata \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /src/build/bin/tern-operator /src/build/bin/tern-runner \
     /src/build/bin/tern-pki /src/build/bin/kubectl-tern /src/build/bin/tern-fakellm \
     /usr/local/bin/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/tern-operator"]

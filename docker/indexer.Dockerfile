# The indexer image: `memweave` (index, sql, export, report, ask) and the
# OpenAI-compatible simulator (`memweave-llm-sim`, for clusters without GPUs).
# Build from the repository root: docker build -f docker/indexer.Dockerfile .
FROM rust:1.94-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p memweave-cli --bin memweave --features minilm,kafka \
 && cargo build --release --locked -p memweave-llm --bin memweave-llm-sim --features sim

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin memweave
COPY --from=build /src/target/release/memweave /src/target/release/memweave-llm-sim /usr/local/bin/
USER 10001
ENTRYPOINT ["memweave"]

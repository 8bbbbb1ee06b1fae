# The query service image: `memweave-query` alone. It is built from its own
# crate, which depends on neither rdkafka nor timely (a test checks the tree).
# Build from the repository root: docker build -f docker/query.Dockerfile .
FROM rust:1.94-bookworm AS build
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends protobuf-compiler \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p memweave-query --bin memweave-query

FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --no-create-home --shell /usr/sbin/nologin memweave
COPY --from=build /src/target/release/memweave-query /usr/local/bin/
USER 10001
EXPOSE 8080
ENTRYPOINT ["memweave-query"]
CMD ["serve", "--listen", "0.0.0.0:8080"]

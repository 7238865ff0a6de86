# Image of the ingest application: Debian bookworm, Debian's Python 3.11 and OpenJDK 17 JRE,
# the package with its dependencies (PySpark brings Spark) in a virtualenv at
# /opt/ingest/venv, running as the unprivileged user "ingest" (uid/gid 10001).
#
#   docker build -t kafka-lakehouse-ingest:0.1.0 .          (or: podman/buildah build)
#   docker run --rm kafka-lakehouse-ingest:0.1.0 --help      (arguments go to `ingest`)
#
# The entry point (scripts/container-entrypoint.sh, under tini) runs `ingest ARGS…`, and
# also starts Spark executors ("executor") and cluster-mode drivers ("driver …") when Spark
# on Kubernetes launches pods from this image. docs/deploy.md has the details.
#
# The runtime alone (the package `pipeline`): the lab (lab/: demo, broker, drills, bench)
# and the Kafka broker's jars it starts stay out (.dockerignore); `ingest demo` here says
# in one line that it is the lab's.
#
# Before building: `python -m pipeline.jvm fetch spark-kafka-4.2` (and spark-kafka-3.5 for
# PYSPARK_VERSION 3.5.7; scripts/image-test.sh fetches both), so that .jvm/ holds Spark's
# Kafka source for the image's Spark line.
#
# Build arguments:
#   BASE_IMAGE   Debian bookworm image (default debian:bookworm-slim; pin it by digest in CI,
#                e.g. debian:bookworm-slim@sha256:…, for byte-for-byte reproducible bases)
#   PIP_INDEX_URL, PIP_EXTRA_INDEX_URL, PIP_CERT
#                a Python package mirror / a CA bundle (mounted with `--volume` at build
#                time) for building behind a proxy; used by the build stages only
#   EXTRA_JARS   space-separated "URL#SHA256" items added to Spark's jars directory, e.g.
#                the Hudi Spark bundle or hadoop-aws; every download is checked against its
#                SHA-256 and the build fails on a mismatch or a missing checksum
#
# Layers: the dependencies (~860 MB, PySpark mostly) change only with pyproject.toml or
# EXTRA_JARS; a code change rebuilds and ships only the small package layer.
ARG BASE_IMAGE=debian:bookworm-slim

# ---- deps: a virtualenv with the dependencies, without the package ----------------------
FROM ${BASE_IMAGE} AS deps
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
# Debian point releases update these packages; the pins keep the major.minor line fixed.
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3=3.11.* python3-venv=3.11.* \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore \
    PYTHONDONTWRITEBYTECODE=1
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_CERT
WORKDIR /src
# The dependencies are installed through a stub of the package, which is removed again.
# Byte code is compiled without timestamps (unchecked-hash): reproducible layers, and the
# read-only venv never needs to be written at run time.
# PYSPARK_VERSION: the image's Spark line (empty: the newest pyproject.toml allows; 3.5.7
# for Spark 3.5 LTS, where the pipeline reads with Spark's Kafka source: docs/deploy.md).
ARG PYSPARK_VERSION=""
COPY pyproject.toml README.md ./
RUN python3 -m venv /opt/ingest/venv \
 && mkdir pipeline && touch pipeline/__init__.py \
 && /opt/ingest/venv/bin/pip install --no-compile . ${PYSPARK_VERSION:+"pyspark==$PYSPARK_VERSION"} \
 && /opt/ingest/venv/bin/pip uninstall -y kafka-lakehouse-ingest \
 && rm -rf pipeline build ./*.egg-info \
 && site=$(/opt/ingest/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
 && rm -rf "$site"/pyspark/jars/connect-repl "$site"/pyspark/examples \
           "$site"/pandas/tests "$site"/pyarrow/tests "$site"/numpy/*/tests \
 && find "$site"/pyspark/bin -name '*.cmd' -delete \
 && ln -s "$site"/pyspark /opt/ingest/spark \
 && /opt/ingest/venv/bin/python -m compileall -q -j 0 --invalidation-mode unchecked-hash \
      /opt/ingest/venv/lib >/dev/null

# Extra jars (e.g. the Hudi Spark bundle): downloaded with Python, checked against SHA-256.
ARG EXTRA_JARS=""
RUN for item in $EXTRA_JARS; do \
      url="${item%%#*}"; sum="${item#*#}"; \
      if [ "$sum" = "$item" ] || [ -z "$sum" ]; then \
        echo "EXTRA_JARS: $url has no #SHA256 checksum" >&2; exit 1; fi; \
      name="$(basename "${url%%\?*}")"; \
      /opt/ingest/venv/bin/python -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' \
        "$url" "/opt/ingest/spark/jars/$name" || exit 1; \
      echo "$sum  /opt/ingest/spark/jars/$name" | sha256sum --check --strict - || exit 1; \
    done

# ---- package: the application as a wheel ------------------------------------------------
FROM deps AS package
ARG PIP_INDEX_URL
ARG PIP_EXTRA_INDEX_URL
ARG PIP_CERT
COPY pipeline ./pipeline
RUN /opt/ingest/venv/bin/pip wheel --no-deps --wheel-dir /wheels . \
 && rm -rf build ./*.egg-info

# ---- runtime -----------------------------------------------------------------------------
FROM ${BASE_IMAGE}
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
ARG DEBIAN_FRONTEND=noninteractive
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="kafka-lakehouse-ingest" \
      org.opencontainers.image.description="Exactly-once Kafka to Iceberg ingestion on PySpark" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.licenses="Apache-2.0"

# The JRE's post-install scripts expect the man directory that slim images leave out.
RUN mkdir -p /usr/share/man/man1 \
 && apt-get update \
 && apt-get install -y --no-install-recommends \
      python3=3.11.* openjdk-17-jre-headless=17.* tini=0.19.* \
 && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /var/cache/apt/archives/*.deb /var/log/apt /var/log/dpkg.log \
           /var/cache/debconf/*-old /var/lib/dpkg/*-old \
 && groupadd --system --gid 10001 ingest \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/lib/ingest --create-home \
      --shell /usr/sbin/nologin ingest

COPY --from=deps /opt/ingest /opt/ingest
# The jars of the project's JVM manifest (Spark's Kafka source per Spark line; not the
# broker's, .dockerignore), as `python -m pipeline.jvm fetch` left them in .jvm/
# (scripts/image-test.sh build does it): fetched on the host, whose Maven reaches the registry.
COPY .jvm/ /opt/ingest/jvm/
COPY --chmod=0755 scripts/container-entrypoint.sh /opt/ingest/bin/entrypoint
COPY --chmod=0644 scripts/ingest_submit.py /opt/ingest/app/ingest_submit.py
COPY --chmod=0644 conf/log4j2.properties conf/spark-defaults.conf /opt/ingest/conf/
COPY --from=package /wheels /tmp/wheels
# Spark's Kafka source of the image's Spark line joins Spark's own jars, so every JVM the
# image starts has it (driver, spark-submit's driver pod, executors): source.reader spark.
RUN /opt/ingest/venv/bin/pip install --no-cache-dir --no-compile --no-deps --no-index /tmp/wheels/*.whl \
 && /opt/ingest/venv/bin/python -m compileall -q --invalidation-mode unchecked-hash \
      "$(/opt/ingest/venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/pipeline" >/dev/null \
 && SPARK_HOME=/opt/ingest/spark /opt/ingest/venv/bin/python -m pipeline.spark.pyspark_zip \
 && rm -rf /tmp/wheels \
 && jars="$(INGEST_JVM_DIR=/opt/ingest/jvm /opt/ingest/venv/bin/python -m pipeline.source.spark_kafka jars)" \
 && for jar in $(echo "$jars" | tr ',' ' '); do ln -s "$jar" /opt/ingest/spark/jars/; done

ENV PATH=/opt/ingest/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    SPARK_HOME=/opt/ingest/spark \
    SPARK_CONF_DIR=/opt/ingest/conf \
    PYSPARK_PYTHON=/opt/ingest/venv/bin/python \
    PYSPARK_DRIVER_PYTHON=/opt/ingest/venv/bin/python \
    PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    INGEST_JVM_DIR=/opt/ingest/jvm \
    HOME=/var/lib/ingest

USER 10001:10001
WORKDIR /var/lib/ingest
# Prometheus metrics and /healthz, /readyz (config: metrics.port); Spark driver RPC and
# block manager ports used by the Helm chart.
EXPOSE 9108 7078 7079
ENTRYPOINT ["/usr/bin/tini", "-g", "--", "/opt/ingest/bin/entrypoint"]
CMD ["--help"]

# pnsq's nsqd in a container: docker build -t pnsq . && docker run -p 4150:4150 -p 4151:4151 pnsq
# (or nsqlookupd: docker run pnsq nsqlookupd --data-path=/data; scripts/compose.yaml runs a cluster)
# Data lives in the /data volume; the daemon runs as the unprivileged user "nsq" (uid 10001).
# docs/operations.md has the details.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install pnsq (not editable) from the build context, then drop the sources; keep the health
# check script (docker/healthcheck.py).
COPY . /src
RUN pip install /src && install -m 0755 /src/docker/healthcheck.py /usr/local/bin/pnsq-healthcheck \
    && rm -rf /src

# The user and the data directory; both exist before VOLUME so the volume starts owned by nsq.
RUN groupadd --system --gid 10001 nsq \
    && useradd --system --uid 10001 --gid nsq --home-dir /data --no-create-home \
        --shell /usr/sbin/nologin nsq \
    && mkdir -p /data \
    && chown nsq:nsq /data
VOLUME ["/data"]
WORKDIR /data

# 4150 TCP protocol V2, 4151 HTTP API; 4160/4161 are nsqlookupd's TCP and HTTP ports.
EXPOSE 4150 4151 4160 4161

USER nsq:nsq

# /ping of the daemon PID 1 runs, nsqd or nsqlookupd, on the HTTP address its own flags give
# (docker/healthcheck.py; the image has Python but no curl).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["python", "/usr/local/bin/pnsq-healthcheck"]

# nsqd is PID 1: it handles SIGTERM (docker stop) and SIGINT itself, checkpoints and exits.
STOPSIGNAL SIGTERM
CMD ["nsqd", "--data-path=/data", "--tcp-address=0.0.0.0:4150", "--http-address=0.0.0.0:4151"]

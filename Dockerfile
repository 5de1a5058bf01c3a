# The image the action runs in: published to the GitHub container registry by
# .github/workflows/release.yml (action.yml points at it); build it locally with
#   docker build -t observer-ci .
FROM python:3.11-slim

RUN apt-get update \
    && apt-get install -y --no-install-recommends git make \
    && rm -rf /var/lib/apt/lists/*

ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONUNBUFFERED=1

WORKDIR /action
COPY pyproject.toml constraints.txt README.md LICENSE Makefile ./
COPY observer_ci ./observer_ci
COPY entrypoint.py ./

# 1. torch alone from the PyTorch CPU wheel index (PyPI's Linux wheel is the CUDA build, a
#    527 MB wheel pulling ~3 GB of CUDA packages; the CPU wheel is 192 MB).
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu
RUN python -m pip install --no-deps --index-url "${TORCH_INDEX_URL}" torch==2.13.0+cpu
# 2. Everything else, torch's own dependencies included, from PyPI at the pins of
#    constraints.txt (its torch==2.13.0 pin is met by the 2.13.0+cpu installed above).
RUN python -m pip install -c constraints.txt '.[transformers]' \
    && python -m pip check

ENTRYPOINT ["python", "/action/entrypoint.py"]

#!/usr/bin/env bash
# Smoke test of the action's image (run by .github/workflows/release.yml on the image it
# builds, and again on the image it pushed, before action.yml is pinned to it):
# the CPU torch pin, pip check, the demo in dry-run.   Usage: tools/smoke_image.sh IMAGE
set -euo pipefail
image="$1"
examples="$(cd "$(dirname "$0")/../examples" && pwd)"
docker run --rm --entrypoint python "$image" -c \
  "import torch; assert torch.__version__ == '2.13.0+cpu', torch.__version__"
docker run --rm --entrypoint python "$image" -m pip check
docker run --rm -v "$examples:/examples:ro" -e INPUT_SCRIPT="/examples/mlp_classifier.py" \
  -e INPUT_OUT=/tmp/out "$image" --dry-run
docker image inspect "$image" --format 'image size: {{.Size}} bytes'

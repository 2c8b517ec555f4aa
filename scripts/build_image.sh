#!/usr/bin/env bash
# Builds this recipe's image with docker/Dockerfile: the CPU image by default, from a clean checkout and with no
# image registry (scripts/build_image.py --help: the options, what it installs, how the site's CA reaches pip).
#
# Usage: bash scripts/build_image.sh [--target cpu|gpu] [--tool podman|docker] [--tag TAG] [--ca FILE] [...]
#        bash scripts/build_image.sh --target gpu --base pypi   # the GPU image on a stand-in for verl's image
#                                                               # made from PyPI (docs/deployment.md)
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/build_image.py" "$@"

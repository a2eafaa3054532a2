#!/bin/bash
set -euo pipefail
cd /app
del=$(git log --diff-filter=D --format=%H -1 -- config.ini)
git checkout "$del^" -- config.ini
git commit -q -m "Restore config.ini"
git log --oneline

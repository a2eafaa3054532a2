#!/bin/bash
set -euo pipefail
cd /app
export FILTER_BRANCH_SQUELCH_WARNING=1
git filter-branch -f \
  --index-filter 'git rm -q --cached --ignore-unmatch secrets.env' \
  --tree-filter 'grep -rlF --exclude-dir=.git "sk-live-9f8e7d6c5b4a" . | while read -r f; do sed -i "s/sk-live-9f8e7d6c5b4a/REDACTED/g" "$f"; done; true' \
  --tag-name-filter cat -- --all
rm -rf .git/refs/original
git for-each-ref --format='%(refname)' refs/original | while read -r r; do git update-ref -d "$r"; done
git reflog expire --expire=now --all
git gc -q --prune=now --aggressive
git checkout -q main
git status --short
git log --oneline --decorate

#!/bin/bash
set -euo pipefail
cd /app
git checkout -q main
for c in $(git rev-list --reverse main..feature/export); do
    case "$(git log -1 --format=%s "$c")" in
        Fix*) git cherry-pick "$c" ;;
    esac
done
git log --oneline --graph --all

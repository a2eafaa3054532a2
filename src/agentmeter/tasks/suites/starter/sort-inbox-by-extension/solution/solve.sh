#!/bin/bash
set -euo pipefail
cd /app/inbox
for f in * .[!.]*; do
    [ -f "$f" ] || continue
    stem="${f#.}"
    if [[ "$stem" == *.* ]]; then
        ext="${stem##*.}"; ext="${ext,,}"
    else
        ext=noext
    fi
    mkdir -p "/app/sorted/$ext"
    mv -- "$f" "/app/sorted/$ext/$f"
done
find /app/sorted -type f | sort

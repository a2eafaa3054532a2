#!/bin/bash
set -euo pipefail
cd /app
grep -E '^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z \[[A-Z]+\] ' server.log \
  | awk '{ lv = $2; gsub(/[][]/, "", lv); c[lv]++ } END { for (k in c) print k, c[k] }' \
  | sort -k2,2nr -k1,1 > level_counts.txt
cat level_counts.txt

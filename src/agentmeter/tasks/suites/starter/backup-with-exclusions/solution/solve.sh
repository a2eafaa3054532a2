#!/bin/bash
set -euo pipefail
cd /app
tar -czf backup.tar.gz --exclude='*.log' --exclude='node_modules' --exclude='.cache' project
tar -tzf backup.tar.gz

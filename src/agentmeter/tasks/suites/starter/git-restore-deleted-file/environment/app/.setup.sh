#!/bin/sh
# Builds the task's git history with fixed identities and dates (deterministic commit ids).
set -e
cd /app
git init -q -b main
git config user.name "Dana Dev"
git config user.email "dana@example.com"
c() { GIT_AUTHOR_DATE="2024-01-0$1T10:00:00+00:00" GIT_COMMITTER_DATE="2024-01-0$1T10:00:00+00:00" git commit -q -m "$2"; }
printf 'import configparser\n\ncfg = configparser.ConfigParser()\ncfg.read("config.ini")\nprint(cfg["server"]["port"])\n' > app.py
printf '[server]\nport = 8000\nhost = 127.0.0.1\n' > config.ini
git add -A; c 1 "Initial app"
printf '[server]\nport = 8080\nhost = 0.0.0.0\nworkers = 4\n\n[cache]\nttl = 300\n' > config.ini
git add -A; c 2 "Tune server settings"
git rm -q config.ini
printf 'import configparser\nimport sys\n\ncfg = configparser.ConfigParser()\ncfg.read(sys.argv[1] if len(sys.argv) > 1 else "config.ini")\nprint(cfg["server"]["port"])\n' > app.py
git add -A; c 3 "Allow config path argument"
printf '# demo app\n\nRun `python3 app.py [config]`.\n' > README.md
git add -A; c 4 "Add README"

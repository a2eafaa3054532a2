#!/bin/sh
# Builds the task's git history with fixed identities and dates (deterministic commit ids).
set -e
cd /app
git init -q -b main
git config user.name "Sam Ops"
git config user.email "sam@example.com"
n=0
c() { n=$((n+1)); d=$(printf '2024-03-%02dT12:00:00+00:00' $n); GIT_AUTHOR_DATE=$d GIT_COMMITTER_DATE=$d git commit -q -m "$1"; }
printf 'import os\n\nAPI_URL = "https://api.example.com"\n' > settings.py
printf '# service\n' > README.md
git add -A; c "Initial settings"
printf 'API_KEY=sk-live-9f8e7d6c5b4a\nDB_PASSWORD=hunter2\n' > secrets.env
printf 'import os\n\nAPI_URL = "https://api.example.com"\nAPI_KEY = os.environ.get("API_KEY")\n' > settings.py
git add -A; c "Load API key"
printf '#!/bin/sh\ncurl -H "Authorization: Bearer sk-live-9f8e7d6c5b4a" "$API_URL/deploy"\n' > deploy.sh
git add -A; c "Add deploy script"
printf 'API_KEY=sk-live-9f8e7d6c5b4a\nDB_PASSWORD=hunter3\nREGION=eu\n' > secrets.env
printf '# service\n\nDeploy with ./deploy.sh\n' > README.md
git add -A; c "Rotate DB password, document deploy"
git tag v1.0
printf '#!/bin/sh\n# token: sk-live-9f8e7d6c5b4a\ncurl -H "Authorization: Bearer $API_KEY" "$API_URL/deploy"\n' > deploy.sh
git add -A; c "Read token from environment"
printf '#!/bin/sh\ncurl -fsS -H "Authorization: Bearer $API_KEY" "$API_URL/deploy"\n' > deploy.sh
printf 'secrets.env\n' > .gitignore
git rm -q --cached secrets.env
rm secrets.env
git add -A; c "Stop tracking secrets"

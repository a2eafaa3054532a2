#!/bin/sh
# Builds the task's git history with fixed identities and dates (deterministic commit ids).
set -e
cd /app
git init -q -b main
git config user.name "Rui Maint"
git config user.email "rui@example.com"
n=0
c() { n=$((n+1)); d=$(date -u -d "@$((1714550400 + n * 3600))" +%Y-%m-%dT%H:%M:%S+00:00); GIT_AUTHOR_DATE=$d GIT_COMMITTER_DATE=$d git commit -q -m "$1"; }
cat > textstats.py <<'PY'
"""Text statistics."""


def words(text):
    return text.split()


def word_count(text):
    return len(words(text))


def average_word_length(text):
    w = words(text)
    return sum(len(x) for x in w) / len(w) if w else 0.0
PY
cat > check.sh <<'SH'
#!/bin/sh
# Regression check: exits 0 when textstats behaves correctly.
python3 -c '
import textstats as t
assert t.word_count("a  b\tc\n") == 3
assert t.word_count("") == 0
assert abs(t.average_word_length("ab abcd") - 3.0) < 1e-9
'
SH
chmod +x check.sh
git add -A; c "Add textstats"
i=1
while [ $i -le 24 ]; do
  printf '\n\ndef stat_%d(text):\n    return word_count(text) + %d\n' $i $i >> textstats.py
  git add -A; c "Add stat_$i"
  if [ $i -eq 6 ]; then
    sed -i 's/^"""Text statistics."""$/"""Text statistics helpers."""/' textstats.py
    git add -A; c "Tidy helpers"
  elif [ $i -eq 14 ]; then
    sed -i 's/^    return text.split()$/    return text.split(" ")/' textstats.py
    git add -A; c "Tidy word helpers"
  elif [ $i -eq 19 ]; then
    sed -i 's/^    return len(words(text))$/    return len(words(text))  # number of tokens/' textstats.py
    git add -A; c "Refactor word_count"
  fi
  i=$((i+1))
done
sed -i 's/^    return text.split(" ")$/    return text.split(" ")  # split on spaces/' textstats.py
git add -A; c "Document tokenizer"
printf '# textstats\n' > README.md
git add -A; c "Add README"

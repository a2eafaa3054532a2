#!/bin/bash
# Verifier: the checks live in /tests/check.py (agent-written code runs only through
# $AS_AGENT, as the unprivileged agent user); the reward is always written.
mkdir -p /logs/verifier
if python3 -I /tests/check.py; then
    echo 1 > /logs/verifier/reward.txt
else
    echo 0 > /logs/verifier/reward.txt
fi
exit 0

"""Task building for CLI-generation tasks (CLI-Tool-Bench, spec §3): schema, seeded case
generation, --help walking, start.py replay, prompt rendering. An application above the runner
(it runs the oracle in a task sandbox and asks models through runner/judging.py): nothing below
`cli/` imports it (an import contract)."""

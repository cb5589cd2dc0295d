"""What each experiment taught, as Markdown paragraphs for RESULTS.md (kept with the code so that
regenerating RESULTS.md keeps them)."""

NOTES: dict[str, list[str]] = {}

"""The engine: executing and committing steps (look up, claim, execute, commit, publish)."""

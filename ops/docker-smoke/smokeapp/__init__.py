"""Agents for ops/docker-smoke.sh: mounted at /app/src in every LittleGhost container."""

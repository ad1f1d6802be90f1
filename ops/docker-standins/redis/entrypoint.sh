# A server started with no config file listens on every interface with protected mode off (as redis:7-alpine).
if [ "$1" = "redis-server" ]; then shift; exec redis-server --protected-mode no "$@"; fi
exec "$@"

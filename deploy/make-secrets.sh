#!/bin/sh
# Writes the secrets docker-compose.yml reads from ./secrets/ (once; existing files are kept):
# the PostgreSQL and Redis passwords, the URLs that carry them, and the session secret.
set -eu
cd "$(dirname "$0")/.."
umask 077
mkdir -p secrets
rand() { python3 -c 'import secrets; print(secrets.token_urlsafe(48))'; }
[ -s secrets/postgres_password ] || rand > secrets/postgres_password
[ -s secrets/database_url ] || \
  echo "postgresql+psycopg://gpufleet:$(cat secrets/postgres_password)@postgres:5432/gpufleet" > secrets/database_url
[ -s secrets/redis_password ] || rand > secrets/redis_password
[ -s secrets/redis_url ] || echo "redis://:$(cat secrets/redis_password)@redis:6379/0" > secrets/redis_url
[ -s secrets/secret_key ] || rand > secrets/secret_key
# Compose (without swarm) bind-mounts secret files as they are, so the containers' own users
# (gpufleet 10001, postgres 999, redis 999) must be able to read them; the folder stays 0700, so no other
# account of this machine can reach them.
chmod 0644 secrets/postgres_password secrets/database_url secrets/redis_password secrets/redis_url secrets/secret_key
echo "secrets written to $(pwd)/secrets"

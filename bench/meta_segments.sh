#!/bin/bash
# The meta changelog's dead redo journals: its size on the broker after N documents, then the
# time a fresh worker takes to restore the state from the changelogs (BENCHMARKS.md, "Meta
# changelog segments"). Starts its own broker (tools/kafka/kafka.sh, ports 19992/19993) and
# leaves it running.
#   bench/meta_segments.sh INPUT.jsonl N                # the worker's own topic settings
#   PRODDEFAULT=1 bench/meta_segments.sh INPUT.jsonl N  # meta changelog pre-created with a broker's defaults
set -u
cd "$(dirname "$0")/.."
REPO=$PWD
INPUT=${1:?usage: meta_segments.sh INPUT.jsonl N}
N=${2:?usage: meta_segments.sh INPUT.jsonl N}
export KAFKA_PORT=19992 KAFKA_CONTROLLER_PORT=19993 KAFKA_RUN_DIR=/tmp/sd-kafka-lead
bash tools/kafka/kafka.sh start >/dev/null
B=127.0.0.1:19992; P=m$RANDOM; export STREAM_DEDUPE_REPLICATION_FACTOR=1
STATE=$(mktemp -d)
PY=$REPO/.venv/bin/python
if [ -n "${PRODDEFAULT:-}" ]; then
  $PY - "$B" "$P-app-state-meta-changelog" <<'PYEOF'
import asyncio, sys
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
async def main() -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=sys.argv[1])
    await admin.start()
    config = {"cleanup.policy": "compact", "segment.bytes": str(1 << 30), "segment.ms": str(7 * 86_400_000),
              "max.message.bytes": str(1_114_112)}
    await admin.create_topics([NewTopic(sys.argv[2], 1, 1, topic_configs=config)])
    await admin.close()
asyncio.run(main())
PYEOF
fi
worker() {  # state directory
  $PY -m stream_dedupe worker --broker $B --app-id $P-app --input-topic $P.docs --events-topic $P.events \
    --deduped-topic $P.deduped --dlq-topic $P.dlq --state-dir "$1" --web-port 16068 --jobs 1 --log-level warning \
    > "$1.log" 2>&1 &
  WP=$!
}
worker $STATE/a
for _ in $(seq 1 90); do curl -sf localhost:16068/readyz >/dev/null && break; sleep 1; done
$PY -m stream_dedupe produce "$INPUT" --broker $B --topic $P.docs --replication-factor 1 --no-progress >/dev/null 2>&1
for _ in $(seq 1 600); do
  n=$(curl -s localhost:16068/metrics | awk '/^stream_dedupe_documents_total/{s+=$2} END{print s+0}')
  [ "${n%.*}" -ge "$N" ] && break
  sleep 1
done
echo "decided $n"; sleep "${WAIT:-30}"  # the log cleaner
echo "segment warnings in the worker's log: $(grep -c 'closes a segment' $STATE/a.log)"
DATA=$KAFKA_RUN_DIR/data
du -s --block-size=1 $DATA/$P-app-state-meta-changelog-0 | awk '{printf "meta changelog on disk: %.1f MB\n", $1/1e6}'
du -s --block-size=1 $DATA/$P-app-state-*-changelog-0 | awk '{s+=$1} END{printf "all changelogs on disk: %.1f MB\n", s/1e6}'
kill $WP; while kill -0 $WP 2>/dev/null; do sleep 0.2; done
started=$(date +%s.%N)
worker $STATE/b
for _ in $(seq 1 1200); do curl -sf localhost:16068/readyz >/dev/null && break; sleep 0.25; done
echo "restore (fresh disk) to ready: $(echo "$(date +%s.%N) - $started" | bc) s"
kill $WP; while kill -0 $WP 2>/dev/null; do sleep 0.2; done
rm -rf "$STATE"

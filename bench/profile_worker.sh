#!/bin/bash
# Where a Kafka worker's CPU goes: py-spy samples one worker while it dedupes a JSONL file.
#   python3 -m venv /tmp/spyvenv && /tmp/spyvenv/bin/pip install py-spy   # not a project dependency
#   bench/profile_worker.sh JOBS SECONDS INPUT.jsonl     -> bench/out/spy-JOBS.txt (py-spy raw format)
#   python bench/spy_summary.py bench/out/spy-JOBS.txt   # leaf and inclusive shares
# Starts its own broker (tools/kafka/kafka.sh, ports 19992/19993) and leaves it running.
set -u
cd "$(dirname "$0")/.."
mkdir -p bench/out
export KAFKA_PORT=19992 KAFKA_CONTROLLER_PORT=19993 KAFKA_RUN_DIR=/tmp/sd-kafka-lead
bash tools/kafka/kafka.sh start >/dev/null
B=127.0.0.1:19992
P=spy$RANDOM
JOBS=${1:-1}
INPUT=${3:?usage: profile_worker.sh JOBS SECONDS INPUT.jsonl}
export STREAM_DEDUPE_REPLICATION_FACTOR=1
STATE=$(mktemp -d)
.venv/bin/python -m stream_dedupe worker --broker $B --app-id $P-app --input-topic $P.docs --events-topic $P.events --deduped-topic $P.deduped --dlq-topic $P.dlq --state-dir $STATE/state --web-port 16066 --jobs $JOBS --log-level warning > $STATE/worker.log 2>&1 &
WP=$!
for i in $(seq 1 60); do curl -sf localhost:16066/readyz >/dev/null && break; sleep 1; done
.venv/bin/python -m stream_dedupe produce "$INPUT" --broker $B --topic $P.docs --replication-factor 1 --no-progress >/dev/null 2>&1 &
sleep 1
${PY_SPY:-/tmp/spyvenv/bin/py-spy} record -p $WP -d ${2:-12} -r 200 -f raw -o bench/out/spy-$JOBS.txt --nonblocking >/dev/null 2>&1
curl -s localhost:16066/metrics | grep -E "^stream_dedupe_(documents_total|decided|forwarded_records_total)" | head
kill $WP; wait $WP
rm -rf "$STATE"
echo "bench/out/spy-$JOBS.txt"

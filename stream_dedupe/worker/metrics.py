"""Prometheus metrics of a worker, in a registry of its own (never the process-global one).

Served as ``GET /metrics`` by the worker's web server. Names follow the Prometheus conventions:
prefix ``stream_dedupe_``, base units (seconds, bytes), ``_total`` on counters.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, Histogram, Info, generate_latest
from prometheus_client import Counter as PromCounter

from stream_dedupe.core.records import INVALID_REASONS

#: Decision latency buckets in seconds (input record timestamp -> its event acknowledged).
#: Up to an hour: under a backlog a record waits minutes, and a top bucket of 60 s showed every quantile as 60 s.
LATENCY_BUCKETS = (
    *(0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
    *(120.0, 300.0, 600.0, 1800.0, 3600.0),
)
CANDIDATE_BUCKETS = (0.0, 0.5, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0, 50.0, 100.0)
CONTENT_TYPE = "text/plain; version=0.0.4"
#: ``POST /query`` latency buckets in seconds (request received -> answer ready).
QUERY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

_OUTCOMES = {"new": "new", "duplicate-of": "duplicate", "unchanged": "unchanged", "deleted": "deleted"}


class WorkerMetrics:
    """All metrics of one worker.

    Attributes:
        registry: The registry ``/metrics`` renders.

    """

    def __init__(self, app_id: str | None = None, processing_guarantee: str | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        # Which app a target runs, as one series (the others carry only their target labels): the
        # rules tell deployments apart by job, and StreamDedupeAppsShareJob catches two apps in one.
        self.build = Info(
            "stream_dedupe_build", "The worker's version, app id and processing guarantee (value 1).", registry=r
        )
        if app_id is not None:
            from stream_dedupe import __version__

            self.build.info(
                {"version": __version__, "app_id": app_id, "processing_guarantee": processing_guarantee or ""}
            )
        self.documents = PromCounter(
            "stream_dedupe_documents", "Input records decided, by outcome.", ["outcome"], registry=r
        )
        self.duplicate_ratio = Gauge(
            "stream_dedupe_duplicate_ratio",
            "Documents dropped from the index (duplicate-of arrivals, and documents a new arrival covers) over the "
            "new and duplicate documents decided by this process.",
            registry=r,
        )
        self.index_changes = PromCounter(
            "stream_dedupe_index_changes",
            "Documents other than the one decided that left the index (covered now) or entered it (a "
            "representative now), from cover-changed events.",
            ["change"],
            registry=r,
        )
        self.candidates = Histogram(
            "stream_dedupe_candidates_per_document",
            "LSH candidates per document (the batch mean, observed once per batch).",
            buckets=CANDIDATE_BUCKETS,
            registry=r,
        )
        self.rejections = PromCounter(
            "stream_dedupe_verification_rejections",
            "LSH candidates rejected by verification (false positives of the LSH).",
            registry=r,
        )
        self.latency = Histogram(
            "stream_dedupe_decision_latency_seconds",
            "From the input record's Kafka timestamp to the acknowledgement of its event.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.clusters = Gauge("stream_dedupe_clusters", "Clusters in the state (singletons included).", registry=r)
        self.largest_cluster = Gauge(
            "stream_dedupe_largest_cluster_size",
            "Members of the largest cluster (a runaway cluster means templates chain distinct pages).",
            registry=r,
        )
        self.hot_buckets = PromCounter(
            "stream_dedupe_hot_bucket_skips", "Band insertions skipped because the LSH bucket was full.", registry=r
        )
        self.full_bucket_candidates = PromCounter(
            "stream_dedupe_full_bucket_candidates",
            "Representatives verified because a full LSH bucket may have hidden them from the band lookup.",
            registry=r,
        )
        self.boilerplate = PromCounter(
            "stream_dedupe_boilerplate_lines_stripped",
            "Lines stripped as learned boilerplate before shingling.",
            registry=r,
        )
        self.state_documents = Gauge("stream_dedupe_state_documents", "Documents in the state.", registry=r)
        self.state_bytes = Gauge("stream_dedupe_state_bytes", "Bytes of the local state directory.", registry=r)
        self.invalid = PromCounter(
            "stream_dedupe_invalid_records", "Records sent to the DLQ, by reason.", ["reason"], registry=r
        )
        self.lag = Gauge(
            "stream_dedupe_consumer_lag",
            "Input records not yet signed and forwarded by this worker, per input partition it consumes.",
            ["topic", "partition"],
            registry=r,
        )
        self.batch_size = Histogram(
            "stream_dedupe_batch_records",
            "Records per decided batch.",
            buckets=(1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500),
            registry=r,
        )
        self.forwarded = PromCounter(
            "stream_dedupe_forwarded_records",
            "Input records this worker's sign stage forwarded to the index topic (re-forwards included).",
            registry=r,
        )
        self.signed_by = PromCounter(
            "stream_dedupe_signed_documents",
            "Documents by the stage that signed them: sign (any worker) or decide (the parameters differed, "
            "or the record was too large to forward with its signature).",
            ["stage"],
            registry=r,
        )
        self.recognized = PromCounter(
            "stream_dedupe_recrawls_recognized",
            "Unchanged re-crawls recognized by their fingerprint: decided from their records, texts not read.",
            registry=r,
        )
        self.unsigned_recrawls = PromCounter(
            "stream_dedupe_unsigned_recrawls",
            "Records this worker's sign stage forwarded unsigned: unchanged re-crawls the decider's state holds "
            "as they are (only on the worker that decides).",
            registry=r,
        )
        #: ``time.monotonic()`` from which the clusters gauges may be recomputed (:func:`next_cluster_scan`).
        self.cluster_scan_due = 0.0
        self.sign_processes = Gauge(
            "stream_dedupe_sign_processes",
            "Signing processes of this worker's sign stage besides its own process (--jobs minus 1; 0: in-process).",
            registry=r,
        )
        self.sign_pool_failures = PromCounter(
            "stream_dedupe_sign_pool_failures",
            "Batches a signing process failed (killed, out of memory): signed in-process instead, pool restarted.",
            registry=r,
        )
        self.standby_lag = Gauge(
            "stream_dedupe_standby_lag_records",
            "Changelog records this worker's standby copy has not applied yet (-1: not following).",
            registry=r,
        )
        self.standby_lag.set(-1)  # until the worker follows the changelogs as a standby
        self.ready = Gauge(
            "stream_dedupe_ready", "1 while the worker is ready (signing; deciding if it owns the index).", registry=r
        )
        self.shards_served = Gauge(
            "stream_dedupe_shards_served", "Index shards this worker serves (--index-shards).", registry=r
        )
        self.index_shards = Gauge(
            "stream_dedupe_index_shards", "Index shards of the deployment (--index-shards).", registry=r
        )
        self.shard_documents = Gauge(
            "stream_dedupe_shard_documents", "Documents in a served shard's band tables.", ["shard"], registry=r
        )
        self.shard_table_bytes = Gauge(
            "stream_dedupe_shard_band_table_bytes",
            "Bytes of a served shard's band tables (RAM).",
            ["shard"],
            registry=r,
        )
        self.shard_state_bytes = Gauge(
            "stream_dedupe_shard_state_bytes", "Bytes of a served shard's tables on disk.", ["shard"], registry=r
        )
        self.shard_lag = Gauge(
            "stream_dedupe_shard_request_lag",
            "Shard call records not yet read by a served shard (end offset minus position).",
            ["shard"],
            registry=r,
        )
        self.shard_calls = PromCounter(
            "stream_dedupe_shard_calls", "Calls a served shard answered or applied.", ["shard"], registry=r
        )
        self.shard_standby_lag = Gauge(
            "stream_dedupe_shard_standby_lag_records",
            "Changelog records this worker's standby copies of index shards have not applied (-1: none).",
            registry=r,
        )
        self.shard_standby_lag.set(-1)
        self.standby_replicas = Gauge(
            "stream_dedupe_standby_replicas", "Standby copies wanted per shard (--standby-replicas).", registry=r
        )
        self.shard_standbys = Gauge(
            "stream_dedupe_shard_standbys",
            "Index shards this worker keeps a standby copy of (the group's placement, docs/sharding.md).",
            registry=r,
        )
        self.shard_call_seconds = Histogram(
            "stream_dedupe_shard_call_seconds",
            "The decider's rounds of shard calls (send to the last answer).",
            buckets=(0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10),
            registry=r,
        )
        self.shard_unavailable = PromCounter(
            "stream_dedupe_shard_unavailable",
            "Rounds of shard calls that found a shard unavailable (moving, restoring): the batch was retried.",
            registry=r,
        )
        self.decider = Gauge(
            "stream_dedupe_decider", "1 on the one worker that runs the decide stage (owns the index).", registry=r
        )
        self.decide_retrying = Gauge(
            "stream_dedupe_decide_retrying_seconds",
            "Seconds the decider has retried its batch for no record's fault (a shard, the broker); 0 otherwise.",
            registry=r,
        )
        self.expired = PromCounter(
            "stream_dedupe_expired_documents",
            "Documents deleted by the retention policy (--max-age): older than their source's maximum age.",
            registry=r,
        )
        self.poison_retries = PromCounter(
            "stream_dedupe_poison_retries",
            "Batches or records whose processing failed with an error blamed on a record, and was retried.",
            registry=r,
        )
        self.oversize_outputs = PromCounter(
            "stream_dedupe_oversize_outputs",
            "Outputs over their topic's max.message.bytes, dead-lettered instead (output-too-large).",
            ["topic"],
            registry=r,
        )
        self.oversize_changelog = Gauge(
            "stream_dedupe_oversize_changelog_records",
            "State values too large for their changelog topic even compressed (kept locally only).",
            registry=r,
        )
        self.broker_connected = Gauge(
            "stream_dedupe_broker_connected",
            "1 while this worker's clients reach a Kafka broker (0 during an outage).",
            registry=r,
        )
        self.broker_last_contact = Gauge(
            "stream_dedupe_broker_last_contact_seconds",
            "Seconds since a client of this worker last had a connection to a broker.",
            registry=r,
        )
        self.query_seconds = Histogram(
            "stream_dedupe_query_seconds",
            "POST /query: seconds from the request to its answer (waiting for the batch in progress included).",
            buckets=QUERY_BUCKETS,
            registry=r,
        )
        self.query_answers = PromCounter(
            "stream_dedupe_query_answers",
            "Documents answered by POST /query, by would-be decision (new, duplicate-of, unchanged, invalid).",
            ["decision"],
            registry=r,
        )
        self.query_rejections = PromCounter(
            "stream_dedupe_query_rejections",
            "POST /query requests refused, by HTTP status (400, 401, 408, 413, 503).",
            ["status"],
            registry=r,
        )
        self._last: Counter[str] = Counter()
        #: new and duplicate-of documents, and documents dropped, decided by this process (``duplicate_ratio``).
        self._decided = self._dropped = 0
        # Every series of a labelled counter from the start (0), so that rate() sees the first batch:
        # a series born at its first increment loses that increment (first samples 1995, 247).
        for outcome in (*_OUTCOMES.values(), "invalid"):
            self.documents.labels(outcome)
        for reason in INVALID_REASONS:
            self.invalid.labels(reason)
        for stage in ("sign", "decide"):
            self.signed_by.labels(stage)
        for change in ("left", "entered"):
            self.index_changes.labels(change)

    def restart_counters(self) -> None:
        """The engine was rebuilt (its cumulative counters start again from zero)."""
        self._last = Counter()

    def record_batch(self, events: Sequence[dict[str, Any]], counters: Counter[str], records: int) -> None:
        """Account for one decided batch (its events and the engine's cumulative counters)."""
        for event in events:
            kind = event["event"]
            if kind in _OUTCOMES:
                self.documents.labels(_OUTCOMES[kind]).inc()
                if kind in ("new", "duplicate-of"):
                    self._decided += 1
                    self._dropped += kind == "duplicate-of"
            elif kind == "cover-changed":
                # A copy that outranks the indexed document (longer, newer) is "new", and the older
                # one leaves the index here: counted as dropped, or a re-crawl with a newer
                # updated_at would never count as a duplicate.
                left, entered = len(event["left"]), len(event["entered"])
                self.index_changes.labels("left").inc(left)
                self.index_changes.labels("entered").inc(entered)
                self._dropped += left
            elif kind == "invalid":
                self.documents.labels("invalid").inc()
                self.invalid.labels(str(event.get("reason"))).inc()
        delta = {k: counters[k] - self._last[k] for k in ("documents", "candidates", "rejected_candidates")}
        for key in ("hot_bucket_skips", "full_bucket_candidates", "boilerplate_lines_stripped", "presigned"):
            delta[key] = counters[key] - self._last[key]
        delta["recognized"] = counters["recognized_unchanged"] - self._last["recognized_unchanged"]
        self._last = Counter(counters)
        if delta["documents"]:
            self.candidates.observe(delta["candidates"] / delta["documents"])
        self.rejections.inc(max(delta["rejected_candidates"], 0))
        self.hot_buckets.inc(max(delta["hot_bucket_skips"], 0))
        self.full_bucket_candidates.inc(max(delta["full_bucket_candidates"], 0))
        self.boilerplate.inc(max(delta["boilerplate_lines_stripped"], 0))
        self.signed_by.labels("sign").inc(max(delta["presigned"], 0))
        # a recognized re-crawl used no signature at all: counted apart, not as the decide stage's
        self.signed_by.labels("decide").inc(max(delta["documents"] - delta["presigned"] - delta["recognized"], 0))
        self.recognized.inc(max(delta["recognized"], 0))
        if self._decided:
            self.duplicate_ratio.set(min(self._dropped / self._decided, 1.0))
        self.batch_size.observe(records)

    def render(self) -> bytes:
        """The text exposition of the registry."""
        return generate_latest(self.registry)

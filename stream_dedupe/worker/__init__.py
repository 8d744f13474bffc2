"""The Kafka worker: a Faust app that dedupes a crawl topic with the core engine.

See ``docs/worker.md``. Entry points: :func:`stream_dedupe.worker.app.create_app` and the
``worker``/``produce`` commands in :mod:`stream_dedupe.worker.cli`.
"""

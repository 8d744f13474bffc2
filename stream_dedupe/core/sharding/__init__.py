"""A sharded index: the engine's candidate state split across shards, its decisions in one gather.

See ``docs/sharding.md`` for the design and :mod:`.gather` for how the engine runs on it.
"""

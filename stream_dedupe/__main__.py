"""``python -m stream_dedupe``: the command line (:func:`stream_dedupe.cli.main`)."""

import gc

gc.disable()  # from the first import on: cli_support.start_up_without_gc

from stream_dedupe.cli import main  # noqa: E402

main()

from stream_dedupe.cli import main

main()

"""One module per system under test; each measurement runs in its own process.

    python -m bench.systems SYSTEM MEASURE '{"url": ..., ...}'

prints one JSON object (the figures) as its last line of output.
"""
